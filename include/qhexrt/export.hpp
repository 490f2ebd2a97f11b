// qhexrt/export.hpp — turning a Hugging Face checkpoint into a QHexRT bundle
// (docs/bundle.md), and the export gate that checks the bundle against its source.
//
//   Exporting a Hugging Face Qwen3-VL checkpoint to a QHexRT bundle: the seed's
//   files under the seed's names and roles (docs/bundle.md), in one weight
//   format, plus the two manifests that run them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace qhx {

struct ExportOptions {
  std::filesystem::path hf_dir;  // config.json, model.safetensors(.index.json), tokenizer.json
  std::filesystem::path out_dir;
  std::string weights = "w8";  // w8 | w4 | f16 | f32
  std::string lm_head;         // "" (w8 in w8 and w4 bundles, else `weights`) | w8 | w4 (quantized bundles only)
  // How w4 scales are chosen (docs/bundle.md, "w4"): "" (free for --target cpu, lpbq for
  // qnn-htp), "free" (a bf16 scale per group of 32 columns, least squares: the CPU's best) or
  // "lpbq" (low-power block quantization, what the HTP takes).
  std::string w4_scales;
  // Columns per LPBQ block: 64 (0: the default), 32 or 128; free scales take groups of 32. A CPU
  // bundle stores a matrix whose input features are not a multiple of it as w8; a qnn-htp
  // export refuses it.
  std::int64_t w4_block = 0;
  // The text decoder's matrix kinds a w4 bundle keeps in w8: "auto" (those whose measured
  // w4 error is over 1.5x the median kind's; the export prints the measurement), "none", or
  // a comma list (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj).
  std::string w4_keep_w8 = "auto";
  std::int64_t image_size = 512;  // fixed resize of the VLM manifest; names the files
  std::int64_t prefill_chunk = 320;
  std::int64_t context = 1024;
  bool progress = true;  // a progress bar on stderr
  // Where the bundle runs: "cpu" (the CPU backend's weight files) or "qnn-htp" (QNN
  // context binaries for the Hexagon NPU of `soc`, docs/qnn.md; needs the QNN generator
  // environment of scripts/setup_qnn.sh and --weights w8).
  std::string target = "cpu";
  std::string soc = "SM8750";  // SM8650 (HTP v75) | SM8750 (v79) | SM8850 (v81)
  std::int64_t qnn_parts = 0;  // the decoder's parts (0: the generator chooses by size)
  // qnn-htp: the short prefill graph's block, for prompt remainders and follow-up turns
  // (-1: 64 when prefill_chunk >= 256, else prefill_chunk / 2; 0: none), and the verify
  // graph's (speculation: the token and verify_block - 1 drafts; 0: none). Both share the
  // prefill and decode graphs' weights in one context.
  std::int64_t short_chunk = -1;
  std::int64_t verify_block = 5;
  // Outlier channels of the text decoder smoothed into the weights at export
  // (docs/bundle.md, "Outlier smoothing"): "auto" (w8 and w4), "on" (any format), "off".
  std::string smoothing = "auto";
  // How w8 matrices are stored (docs/bundle.md, "Panel form"): "panels", the int8
  // kernels' own layout, mapped in place at open (bundle format 2); "rows", row-major,
  // repacked at every open but read by builds that know only format 1.
  std::string layout = "panels";
  // The text decoder's KV cache (docs/manifest.md, "kv_cache"): "" (f16 in w8 and w4
  // bundles, f32 in f32 and f16 ones), "f32", "f16" or "i8" (int8 rows with a scale each).
  std::string kv_cache;
  // The CPU's activation precision where matrices are multiplied, written into the manifests
  // (docs/manifest.md, "activations"): "" (int8 in w8 and w4 bundles, else f32), "int8" (w8
  // and w4 only: rows quantized at run time, integer products), "f16" (activations rounded to
  // fp16, as the NPU holds them, then f32 arithmetic) or "f32". A qnn-htp bundle computes in fp16.
  std::string activations;
  // The export gate (verify_bundle below) on the staged bundle before it is published: a
  // bundle that fails it never replaces what OUT held. With keep_failed it is kept at
  // "<OUT>.failed" (replaced whole) for a look; else it is removed.
  bool verify = false;
  bool keep_failed = false;
  // Polled while the export runs (once per matrix row); returning true stops it with an
  // error, nothing published (qhx_export: on SIGINT or SIGTERM).
  std::function<bool()> cancelled;
};

// --- the export gate --------------------------------------------------------
// The export gate: runs a freshly exported bundle and its fp32 source side by
// side on a text prompt and an image prompt, and compares the logits that
// choose the first generated token.

struct VerifyCase {
  std::string name;  // "text", "image"
  double cosine = 0;
  double max_abs = 0;
  double kl_divergence = 0;  // KL(source || bundle) of the two softmax distributions, in nats
  std::int32_t bundle_token = -1, source_token = -1;
};

struct VerifyReport {
  std::vector<VerifyCase> cases;
  double cosine_bound = 0;  // the format's bounds (gate_bounds)
  double kld_bound = 0;
  bool passed = false;  // every case: same greedy first token, cosine >= and KLD <= the bounds
  // When it failed: what to try instead, one line each (other activations, other weights).
  std::vector<std::string> advice;
};

struct ExportSummary {
  std::vector<std::pair<std::string, std::uint64_t>> files;  // name, bytes
  double seconds = 0;
  std::size_t smoothed_channels = 0;  // outlier channels smoothed into the weights (0: none found, or off)
  std::filesystem::path out_dir;      // where the bundle is: out_dir made absolute, a symbolic link followed
  std::filesystem::path vlm_manifest, text_manifest;
  std::vector<std::string> notes;  // lines for the user (qhx_export prints them), e.g. a qnn-htp bundle's device memory
  // With ExportOptions::verify: the gate's report. When it failed, published is false,
  // out_dir is as it was before the export and the manifests named here are at kept_at (with
  // keep_failed) or gone.
  std::optional<VerifyReport> gate;
  bool published = true;
  std::filesystem::path kept_at;
};

// Writes the bundle beside out_dir and publishes it in one rename (docs/bundle.md, "How a
// bundle is written"): whatever happens, out_dir holds the previous bundle (or nothing) or
// the complete new one. Throws qhx::Error naming the file or tensor at fault, out_dir
// untouched; refuses an out_dir that holds what is not a bundle (it is replaced whole).
ExportSummary export_bundle(const ExportOptions& options);
// The SoCs --target qnn-htp prepares for.
const std::vector<std::string>& qnn_socs();

// --- checking a bundle's files (qhx_export --check, qhx_doctor) ---------------
// Every file of a bundle against the size and XXH3-128 its checksums.json records
// (docs/bundle.md, "Checksums").

struct BundleCheck {
  bool has_checksums = false;         // the folder has a checksums.json
  std::size_t files = 0;              // files it lists (each read once)
  std::vector<std::string> problems;  // one per file missing, of another size or another hash, naming it
  std::vector<std::string> unlisted;  // files in the folder it does not list: not checked, not errors
  bool ok() const { return has_checksums && problems.empty(); }
};

// A folder without checksums.json (a bundle exported before they were recorded) has
// has_checksums false and one problem saying so. Throws only when out of memory.
BundleCheck check_bundle(const std::filesystem::path& dir);

// The bounds a format must meet (docs/bundle.md, "The export gate", says why each is what it is).
struct GateBounds {
  double cosine = 0, kld = 0;
};
GateBounds gate_bounds(const std::string& weights);

// Runs the bundle whose manifests `bundle` names against options.hf_dir (export_bundle calls it
// on the staged bundle when options.verify is set).
VerifyReport verify_bundle(const ExportSummary& bundle, const ExportOptions& options);

}  // namespace qhx
