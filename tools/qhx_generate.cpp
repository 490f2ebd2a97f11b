// qhx_generate — text generation from a QHexRT manifest or a Hugging Face checkpoint.
//
//   qhx_generate -m MANIFEST_OR_HF_DIR -p PROMPT [-n N] [sampling flags] [--json] ...
//   qhx_generate MANIFEST BACKEND SYSTEM_LIB DIR MAX_TOKENS PROMPT [IMAGE]   (the seed's form)
//   qhx_generate -m MANIFEST --batch TASKS.jsonl [--json]          (many requests, one load)
//
// Text streams to stdout as it is generated; speed goes to stderr. With
// --json the last stdout line is one JSON object describing the run.
#include <sys/resource.h>

#include "cli/cli.hpp"
#include "cli/model_flags.hpp"
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>

#include "qhexrt/debug.hpp"
#include "qhexrt/error.hpp"
#include "qhexrt/pipeline.hpp"
#include "qhexrt/session.hpp"

namespace {

double peak_rss_mb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

struct Args {
  std::string model, prompt, system, dump_logits, dump_prompt_logits, dump_dir, resize, messages, batch;
  std::vector<std::string> images, stop;
  qhx_cli::SamplingFlags sampling;
  qhx_cli::RuntimeFlags runtime;
  qhx_cli::SpeculateFlag speculate;
  bool replay = false;
  std::vector<std::int32_t> force_tokens;
  std::vector<std::string> positional;
  std::string qnn_backend, qnn_system;  // the seed's BACKEND and SYSTEM_LIB, when not "cpu"
  std::int64_t max_new = 0;
  bool raw = false, json = false, print_plan = false;
};

// The seed's positional form: MANIFEST BACKEND SYSTEM_LIB DIR MAX_TOKENS PROMPT [IMAGE].
void apply_positional(Args& a) {
  const auto& p = a.positional;
  if (p.size() < 6 || p.size() > 7)
    qhx::fail("positional form: MANIFEST BACKEND SYSTEM_LIB DIR MAX_TOKENS PROMPT [IMAGE] (got ", p.size(),
              " arguments)");
  if (!a.model.empty() || !a.prompt.empty()) qhx::fail("give either -m/-p or the positional form, not both");
  // BACKEND is "cpu", or the QAIRT backend library (libQnnHtp.so) with SYSTEM_LIB beside it:
  // each a path, or a file name looked for as docs/qnn.md says.
  if (p[1] != "cpu") {
    a.qnn_backend = p[1];
    a.qnn_system = p[2];
  }
  std::filesystem::path manifest = p[0];
  if (!std::filesystem::exists(manifest) && std::filesystem::exists(std::filesystem::path(p[3]) / manifest))
    manifest = std::filesystem::path(p[3]) / manifest;
  a.model = manifest.string();
  try {
    std::size_t used = 0;
    a.max_new = std::stoll(p[4], &used);
    if (used != p[4].size()) throw std::invalid_argument(p[4]);
  } catch (const std::exception&) {
    qhx::fail("MAX_TOKENS must be an integer, got \"", p[4], "\"");
  }
  a.prompt = p[5];
  if (p.size() == 7) a.images.push_back(p[6]);
}

// Collects named intermediates (all rows of every call, in order) for --dump-dir.
struct DumpCollector {
  std::map<std::string, std::pair<std::vector<float>, std::vector<std::int64_t>>> tensors;
  void add(std::string_view name, const float* data, const std::vector<std::int64_t>& shape) {
    auto& [values, shp] = tensors[std::string(name)];
    std::int64_t n = 1;
    for (const auto d : shape) n *= d;
    values.insert(values.end(), data, data + n);
    if (shp.empty())
      shp = shape;
    else
      shp[0] += shape[0];
  }
  void write(const std::filesystem::path& dir) const {
    std::filesystem::create_directories(dir);
    for (const auto& [name, t] : tensors) qhx::write_npy(dir / (name + ".npy"), t.first, t.second);
  }
};

// One line of a --batch file: {"prompt": "...", "image": "a.png"} or "images": [...], and an
// optional "system"; image paths are relative to the file's folder. Other keys (a task file's
// "answer", say) are ignored, so a dataset's own file can be run as it is.
struct BatchTask {
  std::string prompt;
  std::optional<std::string> system;
  std::vector<std::filesystem::path> images;
};

std::vector<BatchTask> read_batch(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) qhx::fail(path, ": cannot open the batch file");
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  std::vector<BatchTask> tasks;
  std::string line;
  for (std::int64_t no = 1; std::getline(in, line); ++no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const auto where = [&] {
      return path + ":" + std::to_string(no);
    };
    // A task is flat: a depth bound keeps a hostile line from nesting without end.
    const auto shallow = [&](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
      if (depth > 4) qhx::fail(where(), ": nested too deeply for a task");
      return true;
    };
    nlohmann::json j = nlohmann::json::parse(line, shallow, /*allow_exceptions=*/false);
    if (j.is_discarded()) qhx::fail(where(), ": not a JSON object (one task per line)");
    if (!j.is_object()) qhx::fail(where(), ": a task is a JSON object, got ", j.type_name());
    BatchTask t;
    const auto text = [&](const char* key) -> std::optional<std::string> {
      const auto it = j.find(key);
      if (it == j.end()) return std::nullopt;
      if (!it->is_string()) qhx::fail(where(), ": \"", key, "\" must be a string, got ", it->type_name());
      return it->get<std::string>();
    };
    const auto prompt = text("prompt");
    if (!prompt) qhx::fail(where(), ": no \"prompt\"");
    t.prompt = *prompt;
    t.system = text("system");
    if (const auto image = text("image")) t.images.push_back(dir / *image);
    if (const auto it = j.find("images"); it != j.end()) {
      if (!it->is_array()) qhx::fail(where(), ": \"images\" must be an array of paths");
      for (const auto& im : *it) {
        if (!im.is_string()) qhx::fail(where(), ": \"images\" must be an array of paths");
        t.images.push_back(dir / im.get<std::string>());
      }
    }
    tasks.push_back(std::move(t));
  }
  if (in.bad()) qhx::fail(path, ": read error");
  if (tasks.empty()) qhx::fail(path, ": no tasks (one JSON object per line)");
  return tasks;
}

int run(const Args& args_in) {
  Args a = args_in;
  if (!a.positional.empty()) apply_positional(a);
  if (a.model.empty()) qhx::fail("no model: give -m MANIFEST_OR_HF_DIR (or the positional form)");
  a.runtime.apply_threads("qhx_generate");

  std::vector<BatchTask> batch;
  if (!a.batch.empty()) {
    if (!a.prompt.empty() || !a.images.empty() || !a.messages.empty() || a.raw || a.replay)
      qhx::fail("--batch gives every request: it does not go with -p, -i, --messages, --replay or --raw");
    if (!a.dump_logits.empty() || !a.dump_prompt_logits.empty() || !a.dump_dir.empty() || !a.force_tokens.empty())
      qhx::fail("--batch does not go with the --dump-* options or --force-tokens (they describe one request)");
    batch = read_batch(a.batch);  // before the model loads, so errors name the file and line
  }
  std::vector<qhx::Message> messages;
  if (!a.messages.empty()) {
    if (!a.prompt.empty() || !a.system.empty() || !a.images.empty() || a.raw)
      qhx::fail("--messages gives the whole conversation: it does not go with -p, --system, -i or --raw");
    std::ifstream in(a.messages, std::ios::binary);
    if (!in) qhx::fail(a.messages, ": cannot open the messages file");
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    messages = qhx::parse_messages(text, a.messages, std::filesystem::path(a.messages).parent_path());
    // The conversation's shape is checked here, before the model loads, so errors name the file.
    if (a.replay) {
      if (std::none_of(messages.begin(), messages.end(), [](const qhx::Message& m) { return m.role == "user"; }))
        qhx::fail(a.messages, ": no user message to answer (--replay answers each user turn)");
    } else if (messages.back().role != "user") {
      qhx::fail(a.messages, ": [", messages.size() - 1,
                "]: the conversation must end with a user message (the last one is \"", messages.back().role,
                "\"); --replay answers every user turn of a whole conversation");
    }
  } else if (a.replay) {
    qhx::fail("--replay needs --messages");
  }
  bool has_images = !a.images.empty();
  for (const auto& t : batch) has_images |= !t.images.empty();
  for (const auto& m : messages)
    for (const auto& part : m.content) has_images |= part.kind == qhx::ContentPart::Kind::Image;
  if (a.print_plan) {  // the plan open() would pick: for a bundle folder, by whether there are images
    std::cout << qhx::Pipeline::plan(a.model, has_images) << std::endl;
    return 0;
  }
  qhx::PipelineOptions popts = a.runtime.pipeline_options();
  popts.qnn_backend_library = a.qnn_backend;
  popts.qnn_system_library = a.qnn_system;
  qhx::Pipeline pipe = qhx::Pipeline::open(a.model, popts, has_images);
  if (!a.qnn_backend.empty()) {
    const auto graphs = pipe.graph_backends();
    if (std::none_of(graphs.begin(), graphs.end(), [](const auto& g) { return g.second == "qnn-htp"; }))
      std::fprintf(stderr, "qhx_generate: note: every graph of %s runs on the CPU; %s and %s are not used\n",
                   a.model.c_str(), a.qnn_backend.c_str(), a.qnn_system.c_str());
  }

  qhx::GenerationOptions opts;
  if (a.max_new != 0) opts.max_new_tokens = a.max_new;
  if (!a.resize.empty()) opts.resize = a.resize;
  opts.sampling = a.sampling.apply(pipe.default_sampling());
  opts.stop = a.stop;
  opts.forced_tokens = a.force_tokens;
  opts.speculate = a.speculate.tokens();
  opts.keep_step_logits = !a.dump_logits.empty();
  opts.keep_prompt_logits = !a.dump_prompt_logits.empty();
  opts.on_text = [](std::string_view text) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    return true;
  };
  DumpCollector dumps;
  if (!a.dump_dir.empty())
    qhx::debug::set_dump_sink(
        [&](std::string_view n, const float* d, const std::vector<std::int64_t>& s) { dumps.add(n, d, s); });

  // One result per answered turn: --replay answers every user turn of the
  // file in order through one session (the file's assistant turns are
  // replaced by the answers); otherwise only the last one is answered.
  std::vector<qhx::GenerationResult> results;
  std::vector<qhx::ImageCacheStats> cache_after;  // the image cache's counters after each turn
  if (!batch.empty()) {
    // Independent requests on one loaded pipeline: each answer is one line of stdout
    // (its newlines escaped as \\n, so line i answers task i), or one JSON object with --json.
    for (std::size_t i = 0; i < batch.size(); ++i) {
      qhx::GenerationRequest req;
      req.prompt = batch[i].prompt;
      req.system = batch[i].system ? batch[i].system : (a.system.empty() ? std::nullopt : std::optional(a.system));
      req.images = batch[i].images;
      req.resize = opts.resize;
      req.max_new_tokens = opts.max_new_tokens;
      req.sampling = opts.sampling;
      req.stop = opts.stop;
      req.speculate = opts.speculate;
      const qhx::GenerationResult r = pipe.generate(req);
      if (a.json) {
        nlohmann::json j = {{"index", i},
                            {"text", r.text},
                            {"tokens", r.tokens},
                            {"prompt_tokens", r.prompt_tokens.size()},
                            {"stop_reason", r.stop_reason},
                            {"ttft_ms", r.timings.ttft_ms},
                            {"decode_ms_per_token", r.timings.decode_ms_per_token}};
        std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
      } else {
        std::string line;
        for (const char c : r.text) line += c == '\n' ? std::string("\\n") : std::string(1, c);
        std::cout << line << std::endl;
      }
    }
    std::fprintf(stderr, "batch: %zu requests, peak RSS %.0f MB\n", batch.size(), peak_rss_mb());
    return 0;
  }
  if (messages.empty()) {
    qhx::GenerationRequest req;
    req.prompt = a.prompt;
    if (!a.system.empty()) req.system = a.system;
    req.raw = a.raw;
    for (const auto& im : a.images) req.images.emplace_back(im);
    req.resize = opts.resize;
    req.max_new_tokens = opts.max_new_tokens;
    req.sampling = opts.sampling;
    req.stop = opts.stop;
    req.forced_tokens = opts.forced_tokens;
    req.speculate = opts.speculate;
    req.keep_step_logits = opts.keep_step_logits;
    req.keep_prompt_logits = opts.keep_prompt_logits;
    req.on_text = [&](std::string_view text) {
      opts.on_text(text);
    };
    results.push_back(pipe.generate(req));
    cache_after.push_back(pipe.image_cache_stats());
  } else {
    qhx::Session session(pipe);
    if (!a.replay) {
      results.push_back(session.respond(messages, opts));
      cache_after.push_back(pipe.image_cache_stats());
    } else {
      std::vector<qhx::Message> history;
      for (auto& m : messages) {
        if (m.role == "assistant") continue;  // replaced by the answer to the turn before it
        if (m.role == "system") {
          history.push_back(std::move(m));
          continue;
        }
        history.push_back(std::move(m));
        if (!results.empty()) std::fputc('\n', stdout);
        results.push_back(session.respond(history, opts));
        cache_after.push_back(pipe.image_cache_stats());
        history = session.messages();
      }
    }
  }
  std::fputc('\n', stdout);
  std::fflush(stdout);  // the text ends before the timings on stderr
  for (const auto& r : results) {
    const auto& t = r.timings;
    if (t.image_tokens > 0 || t.image_cache_hits > 0)
      std::fprintf(stderr, "vision %.1f ms for %lld image tokens (%lld images encoded, %lld from the image cache)\n",
                   t.vision_ms, static_cast<long long>(t.image_tokens), static_cast<long long>(t.images_encoded),
                   static_cast<long long>(t.image_cache_hits));
    std::fprintf(stderr,
                 "load %.0f ms | prompt %zu tokens (%lld cached), prefill %.1f ms | ttft %.1f ms | decode %.2f "
                 "ms/token (%.2f tok/s) over %lld steps | %s\n",
                 t.load_ms, r.prompt_tokens.size(), static_cast<long long>(r.cached_tokens), t.prefill_ms, t.ttft_ms,
                 t.decode_ms_per_token, t.decode_ms_per_token > 0 ? 1000.0 / t.decode_ms_per_token : 0.0,
                 static_cast<long long>(t.decode_steps), r.stop_reason.c_str());
    if (r.draft_tokens > 0)
      std::fprintf(stderr, "speculation: %lld of %lld drafted tokens accepted\n",
                   static_cast<long long>(r.accepted_tokens), static_cast<long long>(r.draft_tokens));
  }

  if (!a.dump_logits.empty()) {
    std::vector<float> all;
    std::int64_t rows = 0, vocab = 0;
    for (const auto& r : results) {
      all.insert(all.end(), r.step_logits.begin(), r.step_logits.end());
      rows += static_cast<std::int64_t>(r.tokens.size());
      vocab = r.vocab;
    }
    qhx::write_npy(a.dump_logits, all, {rows, vocab});
  }
  if (!a.dump_prompt_logits.empty()) {
    std::vector<float> all;
    std::int64_t rows = 0, vocab = 0;
    for (const auto& r : results) {
      all.insert(all.end(), r.prompt_logits.begin(), r.prompt_logits.end());
      rows += static_cast<std::int64_t>(r.prompt_tokens.size()) - r.cached_tokens;
      vocab = r.vocab;
    }
    qhx::write_npy(a.dump_prompt_logits, all, {rows, vocab});
  }
  if (!a.dump_dir.empty()) dumps.write(a.dump_dir);

  if (a.json) {
    for (std::size_t i = 0; i < results.size(); ++i) {
      const auto& r = results[i];
      const auto& cache = cache_after[i];
      const auto& t = r.timings;
      nlohmann::json j = {
          {"tokens", r.tokens},
          {"text", r.text},
          {"reasoning", r.reasoning},
          {"prompt_tokens", r.prompt_tokens},
          {"cached_tokens", r.cached_tokens},
          {"stop_reason", r.stop_reason},
          {"draft_tokens", r.draft_tokens},
          {"accepted_tokens", r.accepted_tokens},
          {"timings",
           {{"load_ms", t.load_ms},
            {"vision_ms", t.vision_ms},
            {"image_tokens", t.image_tokens},
            {"images_encoded", t.images_encoded},
            {"image_cache_hits", t.image_cache_hits},
            {"prefill_ms", t.prefill_ms},
            {"ttft_ms", t.ttft_ms},
            {"decode_ms_per_token", t.decode_ms_per_token},
            {"decode_steps", t.decode_steps}}},
          {"image_cache",
           {{"hits", cache.hits}, {"misses", cache.misses}, {"entries", cache.entries}, {"bytes", cache.bytes}}},
          {"peak_rss_mb", peak_rss_mb()}};
      if (const auto& b = r.block_graphs; b.graph_calls > 0)
        j["qnn"] = {{"graph_calls", b.graph_calls},
                    {"decode_calls", b.decode_calls},
                    {"padded_tokens", b.padded_tokens},
                    {"host_bytes", b.host_bytes},
                    {"decode_host_bytes", b.decode_host_bytes},
                    {"host_bytes_per_step", b.step_host_bytes}};
      std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  qhx_cli::App app{"QHexRT text generation (Qwen3-VL) from a manifest or a Hugging Face checkpoint directory"};
  Args a;
  app.add_option("-m,--model", a.model, "manifest (.json), bundle folder, or Hugging Face checkpoint directory");
  app.add_option("-p,--prompt", a.prompt, "the user's message (or the whole text with --raw)");
  app.add_option("-n,--max-new-tokens", a.max_new, "tokens to generate at most (default: the manifest's)")
      ->check(qhx_cli::PositiveNumber);
  app.add_option("-i,--image", a.images, "an image (repeatable); placed at each <image> in the prompt, else first");
  app.add_option("--resize", a.resize, "fixed (any image to the manifest's size) or native (keep aspect)")
      ->check(qhx_cli::IsMember({"fixed", "native"}));
  a.sampling.add_to(app);
  a.speculate.add_to(app);
  a.runtime.add_to(app);
  app.add_option("--system", a.system, "a system message before the user's");
  app.add_option("--messages", a.messages,
                 "a whole conversation: a JSON array of {role, content}; content a string or parts "
                 "{type: text, text} / {type: image, path}; answers the last user turn");
  app.add_flag("--replay", a.replay,
               "with --messages: answer every user turn in order through one session (the file's assistant turns "
               "are replaced by the answers); --json prints a line per turn");
  app.add_option("--batch", a.batch,
                 "many independent requests on one load: a JSON-lines file, one {prompt, image or images, system} "
                 "per line (paths relative to the file); prints one answer per line (or one JSON object with --json)");
  app.add_option("--stop", a.stop, "a stop string (repeatable): the answer ends before it");
  app.add_flag("--raw", a.raw, "feed the prompt as is, without the chat template");
  app.add_flag("--json", a.json, "print one JSON object describing the run as the last stdout line");
  app.add_option("--dump-logits", a.dump_logits, "write the logits that chose each token to FILE.npy [steps, vocab]");
  app.add_option("--dump-prompt-logits", a.dump_prompt_logits,
                 "write the logits at every prompt position to FILE.npy [prompt, vocab]");
  app.add_option("--force-tokens", a.force_tokens,
                 "teacher forcing: take these token ids (comma-separated) instead of sampling")
      ->delimiter(',');
  app.add_flag("--print-plan", a.print_plan,
               "print the manifest that would run (for a checkpoint directory: the default plan; for a bundle folder: "
               "its image or text manifest, by whether there are images) and exit");
  app.add_option("--dump-dir", a.dump_dir, "write every named intermediate (e.g. hidden.layer0) to DIR/NAME.npy");
  app.add_option("args", a.positional, "the seed's form: MANIFEST BACKEND SYSTEM_LIB DIR MAX_TOKENS PROMPT [IMAGE]");
  QHX_CLI_PARSE(app, argc, argv);
  try {
    return run(a);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "qhx_generate: error: %s\n", e.what());
    return 1;
  }
}
