#include "qhexrt/export.hpp"

#include <fstream>

#include "qhexrt/chat_template.hpp"

#include <chrono>
#include <cstdio>
#include <fstream>

#include "backends/cpu/weights.hpp"
#include "common/mapping_guard.hpp"
#include "export/bundle_manifests.hpp"
#include "formats/bundle_writer.hpp"
#include "formats/quantize.hpp"
#include "qhexrt/error.hpp"
#include "qhexrt/hf_config.hpp"
#include "qhexrt/safetensors.hpp"

namespace qhx {
namespace {

// Counts bytes of tensor data converted so far and draws a bar on stderr.
class Progress {
 public:
  Progress(std::uint64_t total, bool enabled) : total_(total), enabled_(enabled) {}
  void set_file(const std::string& name) { file_ = name; }
  void advance(std::uint64_t bytes) {
    done_ += bytes;
    if (!enabled_) return;
    const int pct = total_ == 0 ? 100 : static_cast<int>(100 * done_ / total_);
    if (pct == last_pct_) return;
    last_pct_ = pct;
    std::fprintf(stderr, "\r[%-40s] %3d%% %s", std::string(static_cast<std::size_t>(pct * 40 / 100), '#').c_str(),
                 pct, file_.c_str());
    std::fflush(stderr);
  }
  void finish() {
    if (enabled_) std::fprintf(stderr, "\n");
  }

 private:
  std::uint64_t total_, done_ = 0;
  bool enabled_;
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
void add_matrix(BundleWriter& w, const std::string& name, const TensorView& src, std::int64_t rows, std::int64_t cols,
                WeightFormat format, Progress& progress) {
  const cpu::WeightMatrix m = source_matrix(src, rows, cols);
  add_matrix(w, name, format, rows, cols, [m, &progress](std::int64_t r, float* out) {
    cpu::weight_row_to_f32(m, r, out);
    progress.advance(static_cast<std::uint64_t>(m.cols) * dtype_size(m.dtype));
  });
}

// Vectors (norm weights, biases) are stored as f32 whatever the format.
void add_vector(BundleWriter& w, const std::string& name, const TensorView& src, Progress& progress) {
  const cpu::WeightMatrix m = source_matrix(src, 1, src.numel());
  std::vector<float> v(static_cast<std::size_t>(src.numel()));
  cpu::weight_row_to_f32(m, 0, v.data());
  w.add_f32(name, {src.numel()}, v);
  progress.advance(src.nbytes);
}

bool starts_with(const std::string& s, std::string_view p) { return s.compare(0, p.size(), p) == 0; }

// Every tensor of the checkpoint under `prefix` (except `skip` prefixes): matrices in
// the bundle's format, vectors in f32.
void add_group(BundleWriter& w, const Checkpoint& ck, std::string_view prefix, std::initializer_list<std::string_view> skip,
               WeightFormat f, Progress& progress) {
  for (const auto& name : ck.names()) {
    if (!starts_with(name, prefix)) continue;
    bool skipped = false;
    for (const auto s : skip) skipped |= starts_with(name, s);
    if (skipped) continue;
    const TensorView& t = ck.get(name);
    if (t.shape.size() == 2) add_matrix(w, name, t, t.shape[0], t.shape[1], f, progress);
    else if (t.shape.size() == 1) add_vector(w, name, t, progress);
    else fail("tensor ", name, ": unexpected rank ", t.shape.size());
  }
}

std::uint64_t group_bytes(const Checkpoint& ck, std::string_view prefix) {
  std::uint64_t n = 0;
  for (const auto& name : ck.names())
    if (starts_with(name, prefix)) n += ck.get(name).nbytes;
  return n;
}


}  // namespace

ExportSummary export_qnn_bundle(const ExportOptions& o);  // export_qnn.cpp

ExportSummary export_bundle(const ExportOptions& o) {
  if (o.target == "qnn-htp") return export_qnn_bundle(o);
  if (o.target != "cpu") fail("--target must be cpu or qnn-htp, got \"", o.target, "\"");
  const auto t0 = std::chrono::steady_clock::now();
  const auto format = parse_weight_format(o.weights);
  if (!format) fail("--weights must be w8, w4, f16 or f32, got \"", o.weights, "\"");
  if (o.image_size <= 0 || o.image_size % 32 != 0) fail("--image-size must be a positive multiple of 32");
  if (o.prefill_chunk <= 0 || o.context <= 1) fail("--prefill-chunk and --context must be positive");
  const bool quantized = *format == WeightFormat::W8 || *format == WeightFormat::W4;
  if (!o.lm_head.empty() && (!quantized || (o.lm_head != "w8" && o.lm_head != "w4")))
    fail("--lm-head must be w8 or w4, in a w8 or w4 bundle (got --lm-head ", o.lm_head, " with --weights ", o.weights,
         ")");
  const Qwen3VLConfig cfg = load_qwen3vl_config(o.hf_dir / "config.json");
  // Before any file is written: a broken generation or preprocessor config stops the export.
  const HfDirPlan hf = hf_dir_plan(o.hf_dir);
  const MappingGroup source_files = new_mapping_group();
  const Checkpoint ck = [&] {
    const MappingGroupScope scope(source_files);
    return Checkpoint::open(o.hf_dir);
  }();
  if (!std::filesystem::exists(o.hf_dir / "tokenizer.json")) fail(o.hf_dir.string(), ": no tokenizer.json");
  std::filesystem::create_directories(o.out_dir);

  BundleFiles files = bundle_file_names(o.weights, o.image_size);
  files.context = o.context;
  files.prefill_chunk = o.prefill_chunk;
  const std::string embed_name = "model.language_model.embed_tokens.weight";
  const TensorView& embed = ck.get(embed_name);
  const TensorView& head = ck.find("lm_head.weight") != nullptr ? ck.get("lm_head.weight") : embed;  // tied
  const auto& vc = cfg.vision;
  const std::int64_t patch_cols = vc.in_channels * vc.temporal_patch_size * vc.patch_size * vc.patch_size;

  Progress progress(group_bytes(ck, "model.") + head.nbytes, o.progress);
  const auto meta = [&](const std::string& role) {
    return std::map<std::string, std::string>{{"role", role}, {"weights", o.weights},
                                              {"source", o.hf_dir.filename().string()}};
  };
  const auto write = [&](const std::string& file, const std::string& role, auto&& fill) {
    progress.set_file(file);
    BundleWriter w(o.out_dir / file, meta(role));
    fill(w);
    // A source shard truncated meanwhile reads zeros: never finish a file from them.
    check_mapped_files(source_files, /*stat_files=*/true);
    w.finish();
  };
  // Matrices of the vision blocks and the LLM in the chosen format; the lm-head is
  // int8 in quantized bundles (the seed's in-graph int8 lm-head) unless --lm-head
  // asks for w4 (a sixth of a w4 model's bytes per decoded token saved).
  write(files.vision, "vision", [&](BundleWriter& w) {
    add_group(w, ck, "model.visual.", {"model.visual.patch_embed.", "model.visual.pos_embed."}, *format, progress);
  });
  write(files.llm, "llm_shared", [&](BundleWriter& w) {
    add_group(w, ck, "model.language_model.", {embed_name}, *format, progress);
  });
  const WeightFormat head_format =
      !o.lm_head.empty() ? *parse_weight_format(o.lm_head) : (*format == WeightFormat::W4 ? WeightFormat::W8 : *format);
  write(files.lm_head, "lm_head", [&](BundleWriter& w) {
    add_matrix(w, "lm_head.weight", head, head.shape[0], head.shape[1], head_format, progress);
  });
  write(files.embed, "embed", [&](BundleWriter& w) {
    add_matrix(w, embed_name, embed, embed.shape[0], embed.shape[1],
               *format == WeightFormat::F32 ? WeightFormat::F32 : WeightFormat::F16, progress);
  });
  write(files.patch_embed, "vision_patch_embed", [&](BundleWriter& w) {
    const TensorView& t = ck.get("model.visual.patch_embed.proj.weight");
    add_matrix(w, t.name, t, vc.hidden_size, patch_cols, WeightFormat::F32, progress);
  });
  write(files.patch_bias, "vision_patch_embed_bias", [&](BundleWriter& w) {
    add_vector(w, "model.visual.patch_embed.proj.bias", ck.get("model.visual.patch_embed.proj.bias"), progress);
  });
  write(files.pos_embed, "vision_pos_embed", [&](BundleWriter& w) {
    const TensorView& t = ck.get("model.visual.pos_embed.weight");
    add_matrix(w, t.name, t, t.shape[0], t.shape[1], WeightFormat::F32, progress);
  });
  progress.finish();

  std::filesystem::copy_file(o.hf_dir / "tokenizer.json", o.out_dir / "tokenizer.json",
                             std::filesystem::copy_options::overwrite_existing);
  std::filesystem::copy_file(o.hf_dir / "config.json", o.out_dir / "config.json",
                             std::filesystem::copy_options::overwrite_existing);
  ExportSummary s;
  // The checkpoint's own chat template travels with the bundle (a Thinking
  // checkpoint must not be run with the Instruct one).
  if (const auto tmpl = ChatTemplate::from_checkpoint(o.hf_dir)) {
    files.chat_template = "chat_template.jinja";
    std::ofstream(o.out_dir / files.chat_template, std::ios::binary) << tmpl->source();
    s.files.emplace_back(files.chat_template, std::filesystem::file_size(o.out_dir / files.chat_template));
  }
  const std::string size = std::to_string(o.image_size);
  s.vlm_manifest = o.out_dir / ("qwen3vl-2b-vlm-" + size + ".json");
  s.text_manifest = o.out_dir / ("qwen3vl-2b-text-" + size + ".json");
  write_manifest(s.vlm_manifest, vlm_manifest(files, hf));
  write_manifest(s.text_manifest, text_manifest(files, hf));
  for (const auto& f : {files.vision, files.llm, files.lm_head, files.embed, files.patch_embed, files.patch_bias,
                        files.pos_embed, std::string("tokenizer.json"), std::string("config.json"),
                        s.vlm_manifest.filename().string(), s.text_manifest.filename().string()})
    s.files.emplace_back(f, std::filesystem::file_size(o.out_dir / f));
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return s;
}

}  // namespace qhx
