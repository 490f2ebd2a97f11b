#include "qhexrt/export.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <set>

#include "backends/cpu/int8_matmul.hpp"
#include "backends/cpu/weights.hpp"
#include "common/durable_file.hpp"
#include "common/mapping_guard.hpp"
#include "export/bundle_manifests.hpp"
#include "export/export_steps.hpp"
#include "export/outlier_smoothing.hpp"
#include "export/w4_keep.hpp"
#include "export/staged_bundle.hpp"
#include "export/bundle_writer.hpp"
#include "formats/quantize.hpp"
#include "qhexrt/chat_template.hpp"
#include "qhexrt/error.hpp"
#include "qhexrt/hf_config.hpp"
#include "qhexrt/safetensors.hpp"
#include "qwen3vl/family.hpp"

namespace qhx {
namespace {

// Counts bytes of tensor data converted so far and draws a bar on stderr; stops the
// export when it is cancelled (checked once per row).
class Progress {
 public:
  Progress(std::uint64_t total, const ExportOptions& o) : total_(total), enabled_(o.progress), options_(o) {}
  void set_file(const std::string& name) { file_ = name; }
  void advance(std::uint64_t bytes) {
    check_cancelled(options_);
    const bool first_half = 2 * done_ < total_;
    done_ += bytes;
    if (first_half && 2 * done_ >= total_) export_point("writing");
    if (!enabled_) return;
    const int pct = total_ == 0 ? 100 : static_cast<int>(100 * done_ / total_);
    if (pct == last_pct_) return;
    last_pct_ = pct;
    std::fprintf(stderr, "\r[%-40s] %3d%% %s", std::string(static_cast<std::size_t>(pct * 40 / 100), '#').c_str(), pct,
                 file_.c_str());
    std::fflush(stderr);
  }
  void finish() {
    if (enabled_) std::fprintf(stderr, "\n");
  }

 private:
  std::uint64_t total_, done_ = 0;
  bool enabled_;
  const ExportOptions& options_;
  int last_pct_ = -1;
  std::string file_;
};

// A source tensor read as a [rows, cols] f32 matrix, one row at a time.
cpu::WeightMatrix source_matrix(const TensorView& t, std::int64_t rows, std::int64_t cols) {
  if (t.dtype != DType::F32 && t.dtype != DType::BF16 && t.dtype != DType::F16)
    fail("tensor ", t.name, ": dtype ", dtype_name(t.dtype), " cannot be exported (F32, BF16 or F16)");
  if (t.numel() != rows * cols) fail("tensor ", t.name, " does not have ", rows, " x ", cols, " elements");
  return cpu::WeightMatrix{.data = t.data, .dtype = t.dtype, .rows = rows, .cols = cols};
}

// Declares `name` [rows, cols] in `format` (and its ".scale"), converting
// from `src` row by row while the file is written.
// A w8 matrix goes in the panel form when `panels` (--layout panels), row-major otherwise.
void add_matrix(BundleWriter& w, const std::string& name, const TensorView& src, std::int64_t rows, std::int64_t cols,
                WeightFormat format, bool panels, Progress& progress, const OutlierSmoothing* smoothing = nullptr) {
  const cpu::WeightMatrix m = source_matrix(src, rows, cols);
  RowSource rows_of = [m, &progress, smoothing, name](std::int64_t r, float* out) {
    cpu::weight_row_to_f32(m, r, out);
    if (smoothing != nullptr) smoothing->apply_row(name, r, out, m.cols);
    progress.advance(static_cast<std::uint64_t>(m.cols) * dtype_size(m.dtype));
  };
  if (panels && matrix_storage_format(format, cols, w.w4_block()) == WeightFormat::W8 && cols <= cpu::kInt8MaxCols)
    add_w8_panel_matrix(w, name, rows, cols, std::move(rows_of));
  else
    add_matrix(w, name, format, rows, cols, std::move(rows_of));
}

// Vectors (norm weights, biases) are stored as f32 whatever the format.
void add_vector(BundleWriter& w, const std::string& name, const TensorView& src, Progress& progress,
                const OutlierSmoothing* smoothing = nullptr) {
  const cpu::WeightMatrix m = source_matrix(src, 1, src.numel());
  std::vector<float> v(static_cast<std::size_t>(src.numel()));
  cpu::weight_row_to_f32(m, 0, v.data());
  if (smoothing != nullptr) smoothing->apply_vector(name, v);
  w.add_f32(name, {src.numel()}, v);
  progress.advance(src.nbytes);
}

bool starts_with(const std::string& s, std::string_view p) { return s.compare(0, p.size(), p) == 0; }

// Every tensor of the checkpoint under `prefix` (except `skip` prefixes): matrices in
// the bundle's format, vectors in f32.
void add_group(BundleWriter& w, const Checkpoint& ck, std::string_view prefix,
               std::initializer_list<std::string_view> skip, WeightFormat f, bool panels, Progress& progress,
               const OutlierSmoothing* smoothing = nullptr, const std::set<std::string>& w8_kinds = {}) {
  for (const auto& name : ck.names()) {
    if (!starts_with(name, prefix)) continue;
    bool skipped = false;
    for (const auto s : skip) skipped |= starts_with(name, s);
    if (skipped) continue;
    const TensorView& t = ck.get(name);
    bool keep_w8 = false;  // a w4 bundle's matrix of a kind the keep rule keeps in w8
    for (const auto& k : w8_kinds) keep_w8 |= name.size() > k.size() + 7 && name.ends_with("." + k + ".weight");
    if (t.shape.size() == 2)
      add_matrix(w, name, t, t.shape[0], t.shape[1], keep_w8 ? WeightFormat::W8 : f, panels, progress, smoothing);
    else if (t.shape.size() == 1)
      add_vector(w, name, t, progress, smoothing);
    else
      fail("tensor ", name, ": unexpected rank ", t.shape.size());
  }
}

std::uint64_t group_bytes(const Checkpoint& ck, std::string_view prefix) {
  std::uint64_t n = 0;
  for (const auto& name : ck.names())
    if (starts_with(name, prefix)) n += ck.get(name).nbytes;
  return n;
}

// The checkpoint's stored parameters (a tied lm-head is stored once, as transformers counts it).
std::uint64_t parameter_count(const Checkpoint& ck) {
  std::uint64_t n = 0;
  for (const auto& name : ck.names()) {
    std::uint64_t elements = 1;
    for (const std::int64_t d : ck.get(name).shape) elements *= static_cast<std::uint64_t>(d);
    n += elements;
  }
  return n;
}

}  // namespace

void check_cancelled(const ExportOptions& o) {
  if (o.cancelled && o.cancelled()) fail("interrupted");
}

ExportSummary export_qnn_bundle(const ExportOptions& o);  // export_qnn.cpp

W4Plan w4_plan(const ExportOptions& o) {
  W4Plan p;
  if (o.w4_scales.empty()) {
    p.scales = o.target == "qnn-htp" ? W4Scales::Lpbq : W4Scales::Free;
  } else {
    const auto s = parse_w4_scales(o.w4_scales);
    if (!s) fail("--w4-scales must be free or lpbq, got \"", o.w4_scales, "\"");
    if (*s == W4Scales::Free && o.target == "qnn-htp")
      fail("--w4-scales free is for --target cpu: the HTP takes 4-bit weights as LPBQ blocks (docs/qnn.md)");
    p.scales = *s;
  }
  if (p.scales == W4Scales::Free) {
    if (o.w4_block != 0 && o.w4_block != kW4Group)
      fail("--w4-block ", o.w4_block, " is for --w4-scales lpbq: free scales take groups of 32 columns");
    p.block = kW4Group;
  } else {
    p.block = o.w4_block != 0 ? o.w4_block : kW4Block;
    check_w4_block(p.block);
  }
  return p;
}

void check_cpu_export(const ExportOptions& o) {
  const auto format = parse_weight_format(o.weights);
  if (!format) fail("--weights must be w8, w4, f16 or f32, got \"", o.weights, "\"");
  if (o.image_size <= 0 || o.image_size % 32 != 0) fail("--image-size must be a positive multiple of 32");
  if (o.prefill_chunk <= 0 || o.context <= 1) fail("--prefill-chunk and --context must be positive");
  if (o.smoothing != "auto" && o.smoothing != "on" && o.smoothing != "off")
    fail("--smoothing must be auto, on or off, got \"", o.smoothing, "\"");
  if (o.layout != "panels" && o.layout != "rows") fail("--layout must be panels or rows, got \"", o.layout, "\"");
  if (!o.kv_cache.empty() && o.kv_cache != "f32" && o.kv_cache != "f16" && o.kv_cache != "i8")
    fail("--kv-cache must be f32, f16 or i8, got \"", o.kv_cache, "\"");
  const bool quantized = *format == WeightFormat::W8 || *format == WeightFormat::W4;
  if (!o.activations.empty() && o.activations != "int8" && o.activations != "f16" && o.activations != "f32")
    fail("--activations must be int8, f16 or f32, got \"", o.activations, "\"");
  if (o.activations == "int8" && !quantized)
    fail("--activations int8 is for w8 and w4 bundles: ", o.weights, " matrices compute in floating point");
  w4_plan(o);
  if (o.w4_keep_w8 != "auto" && *format != WeightFormat::W4)
    fail("--w4-keep-w8 is for --weights w4 (got --weights ", o.weights, ")");
  if (!o.lm_head.empty() && (!quantized || (o.lm_head != "w8" && o.lm_head != "w4")))
    fail("--lm-head must be w8 or w4, in a w8 or w4 bundle (got --lm-head ", o.lm_head, " with --weights ", o.weights,
         ")");
  load_qwen3vl_config(o.hf_dir / "config.json");
  hf_dir_plan(o.hf_dir);  // a broken generation or preprocessor config
  Checkpoint::open(o.hf_dir);
  if (!std::filesystem::exists(o.hf_dir / "tokenizer.json")) fail(o.hf_dir.string(), ": no tokenizer.json");
}

WrittenFiles write_cpu_bundle(const ExportOptions& o, const std::filesystem::path& dir) {
  check_cpu_export(o);
  const WeightFormat format = *parse_weight_format(o.weights);
  const Qwen3VLConfig cfg = load_qwen3vl_config(o.hf_dir / "config.json");
  const HfDirPlan hf = hf_dir_plan(o.hf_dir);
  const MappingGroup source_files = new_mapping_group();
  const Checkpoint ck = [&] {
    const MappingGroupScope scope(source_files);
    return Checkpoint::open(o.hf_dir);
  }();
  std::filesystem::create_directories(dir);

  WrittenFiles out;
  BundleFiles& files = out.names;
  files = bundle_file_names(o.weights, o.image_size);
  files.model = model_name(qwen3vl::Family(cfg).name(), parameter_count(ck));
  files.context = o.context;
  files.prefill_chunk = o.prefill_chunk;
  files.kv_cache = o.kv_cache;
  files.activations = o.activations;
  const std::string embed_name = "model.language_model.embed_tokens.weight";
  const TensorView& embed = ck.get(embed_name);
  const TensorView& head = ck.find("lm_head.weight") != nullptr ? ck.get("lm_head.weight") : embed;  // tied
  const auto& vc = cfg.vision;
  const std::int64_t patch_cols = vc.in_channels * vc.temporal_patch_size * vc.patch_size * vc.patch_size;

  Progress progress(group_bytes(ck, "model.") + head.nbytes, o);
  const bool panels = o.layout == "panels";  // w8 matrices of the graphs that repack them (not tables)
  const W4Plan w4 = w4_plan(o);
  const auto meta = [&](const std::string& role) {
    std::map<std::string, std::string> m{
        {"role", role}, {"weights", o.weights}, {"source", o.hf_dir.filename().string()}};
    if (o.weights == "w4" || o.lm_head == "w4") {
      m["w4_block"] = std::to_string(w4.block);
      m["w4_scales"] = std::string(w4_scales_name(w4.scales));
    }
    return m;
  };
  const auto write = [&](const std::string& file, const std::string& role, auto&& fill) {
    check_cancelled(o);
    progress.set_file(file);
    BundleWriter w(dir / file, meta(role));
    fill(w);
    // A source shard truncated meanwhile reads zeros: never finish a file from them.
    check_mapped_files(source_files, /*stat_files=*/true);
    w.finish();
    out.digests[file] = w.digest();
  };
  // Matrices of the vision blocks and the LLM in the chosen format; the lm-head is
  // int8 in quantized bundles (the seed's in-graph int8 lm-head) unless --lm-head
  // asks for w4 (a sixth of a w4 model's bytes per decoded token saved).
  write(files.vision, "vision", [&](BundleWriter& w) {
    add_group(w, ck, "model.visual.", {"model.visual.patch_embed.", "model.visual.pos_embed."}, format, panels,
              progress);
  });
  // "auto": where int8 arithmetic meets the activations (w8, w4), outlier channels are
  // smoothed into the weights (export/outlier_smoothing.hpp).
  const bool smooth =
      o.smoothing == "on" || (o.smoothing == "auto" && (format == WeightFormat::W8 || format == WeightFormat::W4));
  const OutlierSmoothing smoothing =
      smooth ? plan_outlier_smoothing(ck, cfg.text.num_hidden_layers) : OutlierSmoothing{};
  out.smoothed_channels = smoothing.channels;
  std::set<std::string> w8_kinds;
  if (format == WeightFormat::W4) {
    const W4KeepRule rule = measure_w4_keep(ck, cfg.text.num_hidden_layers, w4.block, w4.scales,
                                            smoothing.empty() ? nullptr : &smoothing, o.w4_keep_w8);
    w8_kinds = rule.kept();
    out.notes.push_back(rule.summary());
  }
  write(files.llm, "llm_shared", [&](BundleWriter& w) {
    add_group(w, ck, "model.language_model.", {embed_name}, format, panels, progress,
              smoothing.empty() ? nullptr : &smoothing, w8_kinds);
  });
  const WeightFormat head_format =
      !o.lm_head.empty() ? *parse_weight_format(o.lm_head) : (format == WeightFormat::W4 ? WeightFormat::W8 : format);
  write(files.lm_head, "lm_head", [&](BundleWriter& w) {
    add_matrix(w, "lm_head.weight", head, head.shape[0], head.shape[1], head_format, panels, progress);
  });
  write(files.embed, "embed", [&](BundleWriter& w) {
    add_matrix(w, embed_name, embed, embed.shape[0], embed.shape[1],
               format == WeightFormat::F32 ? WeightFormat::F32 : WeightFormat::F16, false, progress);
  });
  write(files.patch_embed, "vision_patch_embed", [&](BundleWriter& w) {
    const TensorView& t = ck.get("model.visual.patch_embed.proj.weight");
    add_matrix(w, t.name, t, vc.hidden_size, patch_cols, WeightFormat::F32, false, progress);
  });
  write(files.patch_bias, "vision_patch_embed_bias", [&](BundleWriter& w) {
    add_vector(w, "model.visual.patch_embed.proj.bias", ck.get("model.visual.patch_embed.proj.bias"), progress);
  });
  write(files.pos_embed, "vision_pos_embed", [&](BundleWriter& w) {
    const TensorView& t = ck.get("model.visual.pos_embed.weight");
    add_matrix(w, t.name, t, t.shape[0], t.shape[1], WeightFormat::F32, false, progress);
  });
  progress.finish();

  for (const char* f : {"tokenizer.json", "config.json"}) out.digests[f] = copy_file_durably(o.hf_dir / f, dir / f);
  // The checkpoint's own chat template travels with the bundle (a Thinking
  // checkpoint must not be run with the Instruct one).
  if (const auto tmpl = ChatTemplate::from_checkpoint(o.hf_dir)) {
    files.chat_template = "chat_template.jinja";
    out.digests[files.chat_template] = write_file_durably(dir / files.chat_template, tmpl->source());
  }
  out.vlm_manifest = vlm_manifest_name(files);
  out.text_manifest = text_manifest_name(files);
  out.digests[out.vlm_manifest] = write_manifest(dir / out.vlm_manifest, vlm_manifest(files, hf));
  out.digests[out.text_manifest] = write_manifest(dir / out.text_manifest, text_manifest(files, hf));
  return out;
}

namespace {

ExportSummary summary_of(const std::filesystem::path& dir, const std::string& vlm_manifest,
                         const std::string& text_manifest) {
  ExportSummary s;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir))
    if (e.is_regular_file()) s.files.emplace_back(e.path().lexically_relative(dir).generic_string(), e.file_size());
  std::sort(s.files.begin(), s.files.end());
  s.out_dir = dir;
  s.vlm_manifest = dir / vlm_manifest;
  s.text_manifest = dir / text_manifest;
  return s;
}

}  // namespace

ExportSummary published_summary(const StagedBundle& stage, const std::string& vlm_manifest,
                                const std::string& text_manifest) {
  return summary_of(stage.out(), vlm_manifest, text_manifest);
}

ExportSummary gate_and_publish(StagedBundle& stage, const ExportOptions& o, const std::string& vlm_manifest,
                               const std::string& text_manifest) {
  std::optional<VerifyReport> gate;
  if (o.verify) {
    gate = verify_bundle(summary_of(stage.dir(), vlm_manifest, text_manifest), o);
    check_cancelled(o);
  }
  if (gate && !gate->passed) {
    ExportSummary s;
    if (o.keep_failed) {
      std::filesystem::path at = stage.out();
      at += ".failed";
      at = stage.publish_aside(at, o.hf_dir, !export_no_exchange());
      s = summary_of(at, vlm_manifest, text_manifest);
      s.kept_at = at;
    }
    s.out_dir = stage.out();
    s.published = false;
    s.gate = std::move(gate);
    return s;  // the staging folder, unless kept, is removed with `stage`
  }
  stage.publish(!export_no_exchange());
  ExportSummary s = published_summary(stage, vlm_manifest, text_manifest);
  s.gate = std::move(gate);
  return s;
}

ExportSummary export_bundle(const ExportOptions& o) {
  if (o.keep_failed && !o.verify) fail("--keep-failed keeps a bundle the export gate refused: it needs --verify");
  if (o.target == "qnn-htp") {
    if (!o.kv_cache.empty())
      fail("--kv-cache is for --target cpu: the qnn-htp graphs take their KV cache in fp16, in place (docs/qnn.md)");
    if (!o.activations.empty() && o.activations != "f16")
      fail("--activations ", o.activations, " is for --target cpu: the qnn-htp graphs compute in fp16 (docs/qnn.md)");
    return export_qnn_bundle(o);
  }
  if (o.target != "cpu") fail("--target must be cpu or qnn-htp, got \"", o.target, "\"");
  const auto t0 = std::chrono::steady_clock::now();
  return abandon_on_error(o, [&] {
    check_cpu_export(o);  // before anything is written
    StagedBundle stage(o.out_dir, o.hf_dir);
    const WrittenFiles w = write_cpu_bundle(o, stage.dir());
    for (const auto& [name, d] : w.digests) stage.record(name, d);
    check_cancelled(o);
    ExportSummary s = gate_and_publish(stage, o, w.vlm_manifest, w.text_manifest);
    s.smoothed_channels = w.smoothed_channels;
    s.notes = w.notes;
    s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return s;
  });
}

}  // namespace qhx
