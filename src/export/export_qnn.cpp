// `qhx_export --target qnn-htp`: a Hugging Face checkpoint -> the reference design's QNN
// bundle. Three steps, so the HTP graphs run the very weights the CPU backend runs:
//   1. the CPU w8 or w4 bundle (write_cpu_bundle), into .cpu-<weights> in the staging folder;
//   2. the build-time generator (tools/qnn/make_qnn_bundle.py, in the QNN venv that
//      scripts/setup_qnn.sh installs) turns its int8 / 4-bit matrices into QNN context binaries
//      for the SoC in the staging folder, and describes them in qnn_graphs.json;
//   3. the host-side files (embedding table, stage F, tokenizer, config, template) join
//      the binaries, and the two manifests are written from the description.
// Then the staging folder is published as the CPU export's is (export/staged_bundle.hpp).
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <cstdlib>
#include <fstream>

#include "export/bundle_manifests.hpp"
#include "export/export_steps.hpp"
#include "export/staged_bundle.hpp"
#include "formats/quantize.hpp"
#include "qhexrt/error.hpp"
#include "qhexrt/export.hpp"
#include "qhexrt/hf_config.hpp"
#include "qhexrt/npu_time_model.hpp"
#include "runtime/hf_dir_plan.hpp"

extern char** environ;

namespace qhx {
namespace {

namespace fs = std::filesystem;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

// The QNN venv's Python: $QHX_QNN_PYTHON, else $QHX_CACHE/qnn/venv, else ~/.cache/qhexrt/qnn/venv.
fs::path generator_python() {
  if (const std::string p = env("QHX_QNN_PYTHON"); !p.empty()) return p;
  std::vector<fs::path> tried;
  if (const std::string c = env("QHX_CACHE"); !c.empty()) tried.push_back(fs::path(c) / "qnn/venv/bin/python");
  if (const std::string h = env("HOME"); !h.empty()) tried.push_back(fs::path(h) / ".cache/qhexrt/qnn/venv/bin/python");
  for (const auto& p : tried)
    if (fs::exists(p)) return p;
  std::string list;
  for (const auto& p : tried) list += "\n  " + p.string();
  fail("--target qnn-htp needs the QNN generator's Python environment (onnx, onnxruntime-qnn); not found at:", list,
       "\nRun scripts/setup_qnn.sh, or set QHX_QNN_PYTHON to its python.");
}

// The generator script: $QHX_QNN_GENERATOR, the source tree's, or the installed copy.
fs::path generator_script() {
  if (const std::string p = env("QHX_QNN_GENERATOR"); !p.empty()) return p;
  std::vector<fs::path> tried{fs::path(QHX_SOURCE_DIR) / "tools/qnn/make_qnn_bundle.py"};
  std::error_code ec;
  if (const fs::path exe = fs::read_symlink("/proc/self/exe", ec); !ec)
    tried.push_back(exe.parent_path().parent_path() / "share/qhexrt/qnn/make_qnn_bundle.py");
  for (const auto& p : tried)
    if (fs::exists(p)) return p;
  std::string list;
  for (const auto& p : tried) list += "\n  " + p.string();
  fail("--target qnn-htp: the generator make_qnn_bundle.py is not at:", list, "\nSet QHX_QNN_GENERATOR to it.");
}

// Runs the generator to its end; when the export is cancelled meanwhile (qhx_export's
// SIGINT or SIGTERM interrupts waitpid), the generator is stopped too.
void run_generator(const std::vector<std::string>& args, const ExportOptions& o) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (const int e = posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ); e != 0)
    fail("cannot start ", args[0], ": ", std::strerror(e));
  int status = 0;
  bool stopped = false;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) fail("waiting for the QNN generator: ", std::strerror(errno));
    if (!stopped && o.cancelled && o.cancelled()) {
      kill(pid, SIGTERM);
      stopped = true;
    }
  }
  check_cancelled(o);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::string cmd;
    for (const auto& a : args) cmd += (cmd.empty() ? "" : " ") + a;
    fail("the QNN generator failed (",
         WIFEXITED(status) ? cat("exit status ", WEXITSTATUS(status)) : cat("signal ", WTERMSIG(status)),
         "; its messages are above): ", cmd);
  }
}

nlohmann::json read_json(const fs::path& p) {
  std::ifstream f(p);
  if (!f) fail(p.string(), ": cannot read (the QNN generator did not finish?)");
  try {
    return nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    fail(p.string(), ": ", e.what());
  }
}

// A 4-bit HTP bundle has every matrix but the lm-head in 4 bits: a matrix whose input
// features are not a multiple of the block, which a CPU bundle would keep in w8, is
// refused here, before any work, rather than silently costing the NPU bytes.
void check_w4_blocks(std::int64_t block, const Qwen3VLConfig& cfg) {
  const auto& t = cfg.text;
  const auto& v = cfg.vision;
  const std::int64_t merged = v.hidden_size * v.spatial_merge_size * v.spatial_merge_size;
  const std::vector<std::pair<const char*, std::int64_t>> inputs{
      {"the text decoder's q/k/v/gate/up projections (hidden_size)", t.hidden_size},
      {"the text decoder's o_proj (num_attention_heads x head_dim)", t.num_attention_heads * t.head_dim},
      {"the text decoder's down_proj (intermediate_size)", t.intermediate_size},
      {"the vision blocks' qkv, proj and linear_fc1 (vision hidden_size)", v.hidden_size},
      {"the vision blocks' linear_fc2 (vision intermediate_size)", v.intermediate_size},
      {"the patch mergers (vision hidden_size x spatial_merge_size^2)", merged}};
  for (const auto& [what, k] : inputs)
    if (k % block != 0)
      fail("--target qnn-htp --weights w4: ", what, " take K = ", k,
           " input features, not a multiple of the w4 block (", block, " columns)",
           k % 32 == 0 && block != 32 ? "; use --w4-block 32" : "; use --weights w8");
}

npu::Blocks blocks_of(const ExportOptions& o, std::int64_t short_chunk) {
  return {o.prefill_chunk, short_chunk, o.verify_block, o.context, o.image_size};
}

// A context the model's positions cannot reach, or that a device's process domain cannot
// hold, is refused before any work (docs/qnn.md, "Context length").
void check_device_memory(const ExportOptions& o, const Qwen3VLConfig& cfg, std::int64_t short_chunk) {
  if (cfg.text.max_position_embeddings > 0 && o.context > cfg.text.max_position_embeddings)
    fail("--context ", o.context, " is beyond the model's ", cfg.text.max_position_embeddings,
         " positions (max_position_embeddings)");
  const npu::ContextMemory m = npu::context_memory(cfg, o.weights, blocks_of(o, short_chunk), o.qnn_parts);
  if (m.total() > npu::kContextLimitBytes)
    fail("--context ", o.context, ": a decoder context would need ", static_cast<std::int64_t>(m.total() / 1e6),
         " MB of the device's memory (", m.parts, " part(s); the largest: weights ",
         static_cast<std::int64_t>(m.weight_bytes / 1e6), " MB, KV cache ", static_cast<std::int64_t>(m.kv_bytes / 1e6),
         " MB, masks ", static_cast<std::int64_t>(m.mask_bytes / 1e6), " MB, attention scores ",
         static_cast<std::int64_t>(m.scores_bytes / 1e6), " MB), over the ~",
         static_cast<std::int64_t>(npu::kContextLimitBytes / 1e6),
         " MB a device's process domain holds: a shorter --context, a smaller --prefill-chunk, or more --qnn-parts");
}

}  // namespace

const std::vector<std::string>& qnn_socs() {
  static const std::vector<std::string> socs{"SM8650", "SM8750", "SM8850"};
  return socs;
}

ExportSummary export_qnn_bundle(const ExportOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  if (o.weights != "w8" && o.weights != "w4")
    fail(
        "--target qnn-htp bundles hold int8 (w8) or 4-bit (w4) weights with fp16 activations: use --weights w8 or "
        "w4, not ",
        o.weights);
  if (!o.lm_head.empty() && o.lm_head != "w8") fail("--target qnn-htp: the lm-head is int8 (--lm-head w8)");
  const W4Plan w4 = w4_plan(o);
  const Qwen3VLConfig cfg = load_qwen3vl_config(o.hf_dir / "config.json");
  if (o.weights == "w4") check_w4_blocks(w4.block, cfg);
  if (std::find(qnn_socs().begin(), qnn_socs().end(), o.soc) == qnn_socs().end())
    fail("--soc must be SM8650 (HTP v75), SM8750 (v79) or SM8850 (v81), got \"", o.soc, "\"");
  const std::int64_t short_chunk =
      o.short_chunk >= 0 ? o.short_chunk : (o.prefill_chunk >= 256 ? 64 : o.prefill_chunk / 2);
  if (short_chunk != 0 && (short_chunk < 2 || short_chunk >= o.prefill_chunk))
    fail("--short-chunk (", short_chunk, ") must be 0 (none) or in [2, --prefill-chunk (", o.prefill_chunk, "))");
  if (o.verify_block != 0 && (o.verify_block < 2 || o.verify_block >= o.context || o.verify_block == short_chunk ||
                              o.verify_block == o.prefill_chunk))
    fail("--verify-block (", o.verify_block,
         ") must be 0 (none) or in [2, --context), a block size the other graphs do not have");
  if (o.prefill_chunk >= o.context)
    fail("--prefill-chunk (", o.prefill_chunk, ") must be below --context (", o.context,
         "): the prefill graph's past is the context less one block");
  check_device_memory(o, cfg, short_chunk);
  const fs::path python = generator_python(), script = generator_script();
  return abandon_on_error(o, [&] {
    ExportOptions cpu = o;
    cpu.target = "cpu";
    cpu.lm_head = "w8";
    cpu.activations.clear();  // the generator reads the weights; the HTP computes in fp16
    cpu.w4_scales = "lpbq";   // the HTP's 4-bit scheme, in the CPU bundle the binaries are made from
    cpu.w4_block = w4.block;
    check_cpu_export(cpu);
    const HfDirPlan hf = hf_dir_plan(o.hf_dir);
    StagedBundle stage(o.out_dir, o.hf_dir);
    const fs::path dir = stage.dir();
    const fs::path w8 = dir / (".cpu-" + o.weights);  // the CPU bundle the binaries are made from
    const WrittenFiles cpu_files = write_cpu_bundle(cpu, w8);

    std::vector<std::string> args{python.string(),   script.string(),
                                  "--bundle",        w8.string(),
                                  "--out",           dir.string(),
                                  "--soc",           o.soc,
                                  "--context",       std::to_string(o.context),
                                  "--prefill-chunk", std::to_string(o.prefill_chunk),
                                  "--short-chunk",   std::to_string(short_chunk),
                                  "--verify-block",  std::to_string(o.verify_block),
                                  "--image-size",    std::to_string(o.image_size)};
    if (o.qnn_parts > 0) args.insert(args.end(), {"--parts", std::to_string(o.qnn_parts)});
    run_generator(args, o);
    nlohmann::json desc = read_json(dir / "qnn_graphs.json");
    // The prefill stage's price of a block call (docs/qnn.md, "Device time model").
    desc["block_knee"] = std::round(npu::block_knee(cfg, o.soc, o.weights) * 10) / 10;
    // What the largest decoder context needs on the device (qhx_doctor reads it back).
    const auto parts = static_cast<std::int64_t>(desc.at("llm_parts").size());
    npu::ContextMemory mem = npu::context_memory(cfg, o.weights, blocks_of(o, short_chunk), parts);
    std::uint64_t largest = 0;
    for (const auto& p : desc.at("llm_parts"))
      largest = std::max(largest, p.at("shared").at("bytes").get<std::uint64_t>());
    mem.weight_bytes = static_cast<double>(largest);  // the binary as prepared
    desc["device_memory"] = {{"per_context_bytes", static_cast<std::uint64_t>(mem.total())},
                             {"binary_bytes", largest},
                             {"kv_bytes", static_cast<std::uint64_t>(mem.kv_bytes)},
                             {"mask_bytes", static_cast<std::uint64_t>(mem.mask_bytes)},
                             {"scores_bytes", static_cast<std::uint64_t>(mem.scores_bytes)},
                             {"limit_bytes", static_cast<std::uint64_t>(npu::kContextLimitBytes)}};
    stage.record("qnn_graphs.json", write_manifest(dir / "qnn_graphs.json", desc));

    BundleFiles files = bundle_file_names(o.weights, o.image_size);
    files.model = cpu_files.names.model;
    files.context = o.context;
    files.prefill_chunk = o.prefill_chunk;
    std::vector<std::string> host{files.embed,     files.patch_embed, files.patch_bias,
                                  files.pos_embed, "tokenizer.json",  "config.json"};
    if (fs::exists(w8 / "chat_template.jinja")) {
      files.chat_template = "chat_template.jinja";
      host.push_back(files.chat_template);
    }
    for (const auto& f : host) {
      fs::rename(w8 / f, dir / f);
      stage.record(f, cpu_files.digests.at(f));
    }
    fs::remove_all(w8);

    const std::string vlm = vlm_manifest_name(files), text = text_manifest_name(files);
    stage.record(vlm, write_manifest(dir / vlm, qnn_vlm_manifest(files, hf, desc)));
    stage.record(text, write_manifest(dir / text, qnn_text_manifest(files, hf, desc)));
    check_cancelled(o);
    ExportSummary s = gate_and_publish(stage, o, vlm, text);
    s.notes = cpu_files.notes;
    s.notes.push_back(cat("device memory per decoder context (the largest of ", parts,
                          "): ", static_cast<std::int64_t>(mem.total() / 1e6), " MB of the ~",
                          static_cast<std::int64_t>(npu::kContextLimitBytes / 1e6),
                          " MB a process domain holds (binary ", largest / 1000000, " MB, KV cache ",
                          static_cast<std::int64_t>(mem.kv_bytes / 1e6), " MB at context ", o.context, ", masks ",
                          static_cast<std::int64_t>(mem.mask_bytes / 1e6), " MB, attention scores ",
                          static_cast<std::int64_t>(mem.scores_bytes / 1e6), " MB)"));
    s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return s;
  });
}

}  // namespace qhx
