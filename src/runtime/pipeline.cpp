#include "qhexrt/pipeline.hpp"
#include "runtime/manifest.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <future>
#include <thread>

#include "common/limits.hpp"
#include "common/mapping_guard.hpp"
#include "formats/staging_names.hpp"
#include "qhexrt/error.hpp"
#include "runtime/run_context.hpp"
#include "runtime/stage.hpp"
#include "sampling/ngram_draft.hpp"
#include "runtime/pipeline_impl.hpp"

namespace qhx {

namespace {
constexpr std::int64_t kDefaultImageCacheMb = 256;  // ~30 images of the 2B model at 512x512
}  // namespace

Graph& Resources::graph(const std::string& name) {
  const auto it = graphs.find(name);
  if (it == graphs.end()) fail(manifest.source, ": no graph named \"", name, "\"");
  return it->second;
}

const Table& Resources::table(const std::string& name) const {
  const auto it = tables.find(name);
  if (it == tables.end()) fail(manifest.source, ": no table named \"", name, "\"");
  return it->second;
}

const Table& Resources::matrix_table(const std::string& name) const {
  const Table& t = table(name);
  if (t.lookup == nullptr) fail(manifest.source, ": table \"", name, "\" (", t.tensor, ") is not a matrix");
  return t;
}

void Table::gather(const std::int32_t* ids, std::int64_t n, float* out) const {
  lookup->run({{"ids", {DType::I32, {n}, const_cast<std::int32_t*>(ids)}}}, {{"rows", {DType::F32, {n, n_cols}, out}}});
}

const IoSpec& Graph::input(std::string_view n) const {
  for (const IoSpec& s : inputs)
    if (s.name == n) return s;
  fail("graph \"", name, "\" has no input named \"", n, "\" (a stage needs it; the graph's kind has another contract)");
}

const IoSpec& Graph::output(std::string_view n) const {
  for (const IoSpec& s : outputs)
    if (s.name == n) return s;
  fail("graph \"", name, "\" has no output named \"", n,
       "\" (a stage needs it; the graph's kind has another contract)");
}

bool Graph::has_input(std::string_view n) const {
  return std::any_of(inputs.begin(), inputs.end(), [&](const IoSpec& s) { return s.name == n; });
}

namespace {

// The bound tensors in the order of `specs`; every spec bound exactly once.
std::vector<TensorRef> order_bindings(const Graph& g, const std::vector<IoSpec>& specs, std::span<const Binding> bound,
                                      const char* what) {
  std::vector<TensorRef> out;
  out.reserve(specs.size());
  for (const IoSpec& s : specs) {
    const Binding* b = nullptr;
    for (const Binding& x : bound)
      if (x.name == s.name) b = &x;
    if (b == nullptr) fail("graph \"", g.name, "\": ", what, " \"", s.name, "\" is not bound");
    out.push_back(b->tensor);
  }
  for (const Binding& x : bound)
    if (std::none_of(specs.begin(), specs.end(), [&](const IoSpec& s) { return s.name == x.name; }))
      fail("graph \"", g.name, "\" has no ", what, " named \"", x.name, "\"");
  return out;
}

}  // namespace

void Graph::run(std::initializer_list<Binding> in, std::initializer_list<Binding> out) {
  run(std::span<const Binding>(in.begin(), in.size()), std::span<const Binding>(out.begin(), out.size()));
}

void Graph::run(std::span<const Binding> in, std::span<const Binding> out) {
  const auto ins = order_bindings(*this, inputs, in, "input");
  const auto outs = order_bindings(*this, outputs, out, "output");
  delegate->execute(ins, outs);
  check_mapped_files(mappings);
}

std::string stage_ref(const ManifestStage& stage, const char* key) {
  const auto it = stage.args.find(key);
  if (it == stage.args.end() || !it->is_string())
    fail(stage.path, ".", key, ": missing (the ", stage.op, " stage needs it)");
  return it->get<std::string>();
}

namespace {

// Wraps errors from loading a part of the plan with the manifest's name.
template <typename Fn>
auto in_manifest(const Manifest& m, const std::string& what, Fn&& fn) {
  try {
    return fn();
  } catch (const Error& e) {
    fail(m.source, ": ", what, ": ", e.what());
  }
}

}  // namespace

namespace {

void load_graph(Resources& res, const std::string& name, const ManifestGraph& mg) {
  GraphBlob blob{name,
                 mg.kind,
                 res.manifest.dir,
                 mg.spec,
                 res.manifest.context_length,
                 res.manifest.prefill_chunk,
                 res.manifest.version};
  if (res.manifest.image.resize == "fixed" && res.family->patch_size() > 0) {
    const std::int64_t side = res.manifest.image.size / res.family->patch_size();
    blob.image_patches = side * side;
  }
  blob.weights_in_memory = res.weights_in_memory;
  res.graphs.emplace(name, graph_of(res, mg.backend, blob));
}

}  // namespace

Graph graph_of(const Resources& res, const std::string& backend, const GraphBlob& blob) {
  Graph g;
  g.name = blob.name;
  g.mappings = res.mappings;
  g.delegate = create_delegate(backend, blob);
  g.inputs = g.delegate->input_specs();
  g.outputs = g.delegate->output_specs();
  g.contract = g.delegate->contract();
  for (IoSpec& s : g.outputs) s.role = IoRole::Output;
  for (const IoSpec& s : g.inputs)
    if (s.role == IoRole::State && std::find(s.shape.begin(), s.shape.end(), -1) != s.shape.end())
      fail("graph \"", blob.name, "\": state input \"", s.name, "\" must have a fixed shape");
  return g;
}

Graph host_graph(const Resources& res, const std::string& name, const std::string& kind, nlohmann::json spec) {
  GraphBlob blob{name,
                 kind,
                 res.manifest.dir,
                 std::move(spec),
                 res.manifest.context_length,
                 res.manifest.prefill_chunk,
                 res.manifest.version};
  return graph_of(res, kHostBackend, blob);
}

Pipeline::Pipeline(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Pipeline::Pipeline(Pipeline&&) noexcept = default;
Pipeline& Pipeline::operator=(Pipeline&&) noexcept = default;
Pipeline::~Pipeline() = default;

namespace {

bool has_image_stages(const Manifest& m) {
  return std::any_of(m.stages.begin(), m.stages.end(), [](const ManifestStage& s) { return s.op == "load_images"; });
}

bool looks_like_manifest(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::string head(4096, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<std::size_t>(in.gcount()));
  return head.find("\"qhexrt_manifest\"") != std::string::npos;
}

// The manifests of a bundle folder, parsed, by whether they have image stages; each list in
// file-name order.
struct ParsedManifests {
  std::vector<Manifest> vlm, text;
};
ParsedManifests parse_bundle_manifests(const std::filesystem::path& dir) {
  ParsedManifests out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (!e.is_regular_file() || e.path().extension() != ".json") continue;
    if (!looks_like_manifest(e.path())) continue;  // config.json, tokenizer.json (large: not parsed)
    Manifest m;
    try {
      m = load_manifest(e.path());
    } catch (const Error& err) {
      fail(dir.string(), ": a bundle folder with a bad manifest: ", err.what());
    }
    (has_image_stages(m) ? out.vlm : out.text).push_back(std::move(m));
  }
  const auto by_name = [](const Manifest& a, const Manifest& b) {
    return a.source < b.source;
  };
  std::sort(out.vlm.begin(), out.vlm.end(), by_name);
  std::sort(out.text.begin(), out.text.end(), by_name);
  return out;
}

// A bundle folder holds manifests beside its files: the one with image stages
// when the caller has images, else a text one (else the image one, which also
// takes text), as parsed. Empty when `dir` holds no manifest.
std::optional<Manifest> bundle_manifest(const std::filesystem::path& dir, bool want_images) {
  ParsedManifests all = parse_bundle_manifests(dir);
  auto& vlm = all.vlm;
  auto& text = all.text;
  auto& first = want_images ? vlm : (text.empty() ? vlm : text);
  if (first.empty()) {
    if (vlm.empty() && text.empty()) return std::nullopt;
    fail(dir.string(), ": a bundle folder whose manifests have no image stages (",
         std::filesystem::path(text.front().source).filename().string(), "); it cannot take an image");
  }
  if (first.size() > 1) {
    std::string names;
    for (const auto& f : first)
      names += (names.empty() ? "" : ", ") + std::filesystem::path(f.source).filename().string();
    fail(dir.string(), ": a bundle folder with several ", want_images ? "image" : "text", " manifests (", names,
         "); give one of them with -m");
  }
  return std::move(first.front());
}

}  // namespace

BundleManifests find_bundle_manifests(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) fail(dir.string(), ": not a bundle folder (no such directory)");
  const ParsedManifests all = parse_bundle_manifests(dir);
  BundleManifests out;
  for (const Manifest& m : all.vlm) out.vlm.emplace_back(m.source);
  for (const Manifest& m : all.text) out.text.emplace_back(m.source);
  return out;
}

Manifest resolve_manifest(const std::filesystem::path& path, bool want_images) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))  // a bundle folder an interrupted export left moved aside?
    for (const auto& p : {path, path.parent_path()})
      if (const std::string hint = p.empty() ? "" : missing_bundle_hint(p); !hint.empty())
        fail(path.string(), ": no such file or folder", hint);
  if (!std::filesystem::is_directory(path)) return load_manifest(path);
  if (auto manifest = bundle_manifest(path, want_images)) return std::move(*manifest);
  if (!std::filesystem::exists(path / "config.json"))
    fail(path.string(), ": not a manifest, a bundle folder or a Hugging Face checkpoint directory (no config.json)");
  return default_manifest_for_hf_dir(path);
}

std::string Pipeline::plan(const std::filesystem::path& path, bool want_images) {
  return resolve_manifest(path, want_images).json.dump(2);
}

namespace {

// The manifest's tables and graphs, in manifest order, into res.
void load_tables_and_graphs(Resources& res) {
  const Manifest& m = res.manifest;
  // Structured bindings are captured by name: clang 14 (the sanitizer build) cannot capture them implicitly.
  for (const auto& [name, mt] : m.tables) {
    in_manifest(m, "tables." + name, [&, &name = name, &mt = mt] {
      Table t;
      t.file.emplace(Checkpoint::open(m.dir / mt.file));
      t.path = mt.file;
      t.tensor = mt.tensor;
      const TensorView& v = t.file->get(mt.tensor);
      if (v.shape.size() == 2) {  // any stored format: the host backend reads it
        t.lookup = std::make_unique<Graph>(
            host_graph(res, "tables." + name, "gather", {{"weights", mt.file}, {"tensor", mt.tensor}}));
        t.n_rows = v.shape[0];
        t.n_cols = t.lookup->output("rows").shape[1];
      }
      res.tables.emplace(name, std::move(t));
      return 0;
    });
  }
  for (const auto& [name, mg] : m.graphs)
    in_manifest(m, "graphs." + name, [&, &name = name, &mg = mg] {
      load_graph(res, name, mg);
      return 0;
    });
}

}  // namespace

namespace {

// The plan with PipelineOptions' overrides written into its manifest and parsed again, so
// every check of a manifest applies to them.
Manifest with_overrides(Manifest m, const PipelineOptions& o) {
  if (!o.context_length && !o.kv_cache && !o.activations) return m;
  nlohmann::json j = m.json;
  if (o.context_length) j["context_length"] = *o.context_length;
  if (o.kv_cache) {
    bool any = false;
    for (auto& [name, g] : j["graphs"].items())
      if (g.is_object() && g.value("kind", "") == "qwen3vl.text_decoder") {
        g["kv_cache"] = *o.kv_cache;
        any = true;
      }
    if (!any)
      fail(m.source, ": PipelineOptions::kv_cache \"", *o.kv_cache,
           "\": the plan has no graph whose KV cache dtype can be chosen (kind qwen3vl.text_decoder)");
    j["qhexrt_manifest"] = std::max<std::int64_t>(m.version, 5);  // kv_cache and its "i8" value
  }
  if (o.activations) {
    bool any = false;
    for (auto& [name, g] : j["graphs"].items())
      if (g.is_object() && g.value("backend", "") == "cpu") {
        g["activations"] = *o.activations;
        any = true;
      }
    if (!any) fail(m.source, ": PipelineOptions::activations \"", *o.activations, "\": the plan has no CPU graph");
    j["qhexrt_manifest"] = std::max<std::int64_t>(m.version, 8);  // "activations" and its "f16" value
  }
  return parse_manifest(j.dump(), m.source, m.dir);
}

}  // namespace

Pipeline Pipeline::open(const std::filesystem::path& path, const PipelineOptions& options, bool want_images) {
  const auto t0 = Clock::now();
  auto impl = std::make_unique<Impl>();
  Resources& res = impl->res;
  // Every file mapped from here on (on this thread) is the pipeline's.
  res.mappings = new_mapping_group();
  res.weights_in_memory = options.weights_in_memory;
  const MappingGroupScope mapping_scope(res.mappings);
  res.manifest = with_overrides(resolve_manifest(path, want_images), options);
  if (!options.qnn_backend_library.empty() || !options.qnn_system_library.empty()) {
    nlohmann::json libraries = nlohmann::json::object();
    if (!options.qnn_backend_library.empty()) libraries["htp_library"] = options.qnn_backend_library;
    if (!options.qnn_system_library.empty()) libraries["system_library"] = options.qnn_system_library;
    configure_backend("qnn-htp", libraries);
  }
  const Manifest& m = res.manifest;
  res.family = in_manifest(m, "config", [&] { return load_model_family(m.model, m.dir / m.config); });
  if (m.chat_template != "none" && m.chat_template != m.model)
    res.chat_template = in_manifest(m, "chat_template", [&] { return ChatTemplate::load(m.dir / m.chat_template); });
  // The tokenizer (a ~11 MB JSON: the largest share of opening once the weights are
  // mapped, not repacked) loads on its own thread while the tables and graphs load here.
  // Its error still comes first when both fail, as when they loaded in turn.
  std::future<Tokenizer> tokenizer = std::async(std::launch::async, [&m, group = res.mappings] {
    const MappingGroupScope scope(group);
    return in_manifest(m, "tokenizer", [&] { return Tokenizer::load(m.dir / m.tokenizer); });
  });
  std::exception_ptr graphs_error;
  try {
    load_tables_and_graphs(res);
  } catch (...) {
    graphs_error = std::current_exception();
  }
  res.tokenizer.emplace(tokenizer.get());
  if (graphs_error) std::rethrow_exception(graphs_error);
  for (const auto& stop : m.stop_tokens) {
    const auto id = res.tokenizer->token_to_id(stop);
    if (!id) fail(m.source, ": stop_tokens: \"", stop, "\" is not a token of the tokenizer");
    res.stop_ids.push_back(*id);
  }
  for (std::size_t i = 0; i < m.stop_token_ids.size(); ++i) {
    const std::int64_t id = m.stop_token_ids[i];
    if (id >= res.family->vocab_size())
      fail(m.source, ": stop_token_ids[", i, "]: ", id, " is outside the vocabulary [0, ", res.family->vocab_size(),
           ")");
    if (std::find(res.stop_ids.begin(), res.stop_ids.end(), id) == res.stop_ids.end())
      res.stop_ids.push_back(static_cast<std::int32_t>(id));
  }
  for (const auto& st : m.stages) impl->stages.push_back(in_manifest(m, st.path, [&] { return make_stage(st, res); }));
  const std::int64_t cache_mb = options.image_cache_mb.value_or(kDefaultImageCacheMb);
  if (cache_mb < 0) fail("the image cache size must be >= 0 MB, got ", cache_mb);
  res.image_cache.set_capacity(static_cast<std::size_t>(cache_mb) << 20);
  impl->load_ms = ms_since(t0);
  return Pipeline(std::move(impl));
}

const Tokenizer& Pipeline::tokenizer() const { return *impl_->res.tokenizer; }
double Pipeline::load_ms() const { return impl_->load_ms; }

GenerationResult Pipeline::Impl::run(const TurnInput& input, const GenerationOptions& options, SessionState& state,
                                     std::string* full_text) {
  std::lock_guard lock(run_mutex);
  // A pipeline whose file was truncated or rewritten fails this and every
  // later request (its weights are gone), and never answers from zeros.
  check_mapped_files(res.mappings, /*stat_files=*/true);
  GenerationResult result;
  RunContext ctx{input, options, result, res, state};
  const Manifest& m = res.manifest;
  ctx.max_new_tokens = options.max_new_tokens.value_or(m.max_new_tokens);
  if (ctx.max_new_tokens < 1) fail("max new tokens must be >= 1, got ", ctx.max_new_tokens);
  if (ctx.max_new_tokens >= m.context_length)
    fail("max new tokens (", ctx.max_new_tokens, ") must be below the context length (", m.context_length, ")");
  if (options.speculate < 0 || options.speculate > kMaxSpeculate)
    fail("speculate: draft length ", options.speculate, " is outside [0, ", kMaxSpeculate, "]");
  const std::size_t n_images = input.images().size();
  if (n_images > 0 && !has_image_stages(m))
    fail(m.source, ": this plan has no image stages (a text-only manifest); it cannot take an image");
  if (n_images > limits::kImagesPerRequest)
    fail("the conversation has ", n_images, " images, over the limit of ", limits::kImagesPerRequest,
         " per request (limits::kImagesPerRequest, docs/limits.md)");
  ctx.sampling = options.sampling.value_or(m.sampling);
  ctx.sampling.validate();
  const BlockStats before = state.kv.block_stats();
  for (const auto& stage : stages) {
    stage->run(ctx);
    check_mapped_files(res.mappings);  // host stages read mapped tables too
  }
  const BlockStats& after = state.kv.block_stats();
  result.block_graphs.graph_calls = after.calls - before.calls;
  result.block_graphs.padded_tokens = after.padded_tokens - before.padded_tokens;
  result.block_graphs.host_bytes = after.host_bytes - before.host_bytes;
  check_mapped_files(res.mappings, /*stat_files=*/true);
  result.timings.load_ms = load_ms;
  if (full_text != nullptr) *full_text = std::move(ctx.full_text);
  return result;
}

namespace {

constexpr std::string_view kImageMarker = "<image>";

// The user's turn of a GenerationRequest: the prompt's text with an image at
// each "<image>" marker, or all images first when the prompt has no marker.
std::vector<ContentPart> user_content(const GenerationRequest& req) {
  const std::string& prompt = req.prompt;
  std::vector<ContentPart> parts;
  std::size_t markers = 0;
  for (auto at = prompt.find(kImageMarker); at != std::string::npos; at = prompt.find(kImageMarker, at + 1)) ++markers;
  if (markers == 0) {
    for (const auto& im : req.images) parts.push_back(ContentPart::image_part(ImageSource::file(im)));
    parts.push_back(ContentPart::text_part(prompt));
    return parts;
  }
  if (markers != req.images.size())
    fail("the prompt has ", markers, " <image> markers for ", req.images.size(), " image(s)");
  std::size_t from = 0, next = 0;
  for (auto at = prompt.find(kImageMarker); at != std::string::npos; at = prompt.find(kImageMarker, from)) {
    if (at > from) parts.push_back(ContentPart::text_part(prompt.substr(from, at - from)));
    parts.push_back(ContentPart::image_part(ImageSource::file(req.images[next++])));
    from = at + kImageMarker.size();
  }
  if (from < prompt.size()) parts.push_back(ContentPart::text_part(prompt.substr(from)));
  return parts;
}

}  // namespace

GenerationResult Pipeline::generate(const GenerationRequest& request) {
  TurnInput input;
  std::vector<Message> messages;
  input.messages = &messages;
  if (request.raw || impl_->res.manifest.chat_template == "none") {
    if (request.system) fail("--system needs the chat template (this request is raw)");
    input.raw = true;
    input.raw_text = request.prompt;
    for (const auto& im : request.images) input.raw_images.push_back(ImageSource::file(im));
  } else {
    if (request.system) messages.push_back(Message::text("system", *request.system));
    messages.push_back({"user", user_content(request)});
  }
  GenerationOptions options;
  options.max_new_tokens = request.max_new_tokens;
  options.sampling = request.sampling;
  options.stop = request.stop;
  options.resize = request.resize;
  options.forced_tokens = request.forced_tokens;
  options.speculate = request.speculate;
  options.keep_step_logits = request.keep_step_logits;
  options.keep_prompt_logits = request.keep_prompt_logits;
  if (request.on_text)
    options.on_text = [&](std::string_view text) {
      request.on_text(text);
      return true;
    };
  impl_->one_shot.ids.clear();  // a fresh run: nothing reused (the buffers are)
  return impl_->run(input, options, impl_->one_shot);
}

bool Pipeline::takes_images() const { return has_image_stages(impl_->res.manifest); }
std::vector<std::pair<std::string, std::string>> Pipeline::graph_backends() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [name, g] : impl_->res.manifest.graphs) out.emplace_back(name, g.backend);
  return out;
}
const SamplingParams& Pipeline::default_sampling() const { return impl_->res.manifest.sampling; }
std::int64_t Pipeline::context_length() const { return impl_->res.manifest.context_length; }

ImageCacheStats Pipeline::image_cache_stats() const {
  const auto s = impl_->res.image_cache.stats();
  return {s.hits, s.misses, s.entries, s.bytes, s.capacity};
}

const char* stop_reason_name(StopReason reason) {
  switch (reason) {
    case StopReason::MaxNewTokens: return "max_new_tokens";
    case StopReason::StopToken: return "stop_token";
    case StopReason::StopString: return "stop_string";
    case StopReason::Cancelled: return "cancelled";
  }
  return "unknown";
}

int set_threads(int threads, std::string* warning) {
  if (threads < 0) fail("threads must be >= 0, got ", threads);
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  int n = threads == 0 ? cores : threads;
  if (n > cores) {
    if (warning != nullptr)
      *warning = cat(threads, " threads asked for, but this machine has ", cores, " cores; using ", cores,
                     " (more threads than cores only wait on each other)");
    n = cores;
  }
  configure_backend(kHostBackend, {{"threads", n}});
  return n;
}

}  // namespace qhx
