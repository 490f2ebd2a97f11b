// qhx_export — a Hugging Face Qwen3-VL checkpoint -> a QHexRT bundle (docs/bundle.md).
//
//   qhx_export --hf DIR --out BUNDLE [--weights w8|w4|f16|f32] [--w4-scales free|lpbq] [--w4-block 64|32|128]
//              [--lm-head w8|w4]
//              [--image-size 512]
//              [--prefill-chunk 320] [--context N] [--target cpu|qnn-htp] [--soc SM8750]
//              [--activations int8|f16|f32] [--verify [--keep-failed]]
//   qhx_export --check BUNDLE     (its files against its checksums.json; exit 0 when all match)
#include "cli/cli.hpp"

#include <csignal>
#include <cstdio>

#include "qhexrt/export.hpp"

namespace {

volatile std::sig_atomic_t g_signal = 0;

// The first SIGINT or SIGTERM asks the export to stop (it removes its staging folder and
// leaves OUT as it was); a second one, the default action restored, ends it at once.
extern "C" void on_stop_signal(int sig) { g_signal = sig; }

void install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sa.sa_flags = SA_RESETHAND;  // no SA_RESTART: a wait for the QNN generator returns EINTR
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  // Over a `ulimit -f` limit, write() then fails with EFBIG, reported naming the file,
  // instead of the process being killed with a partial file.
  std::signal(SIGXFSZ, SIG_IGN);
}

int check_bundle(const std::string& dir) {
  const qhx::BundleCheck c = qhx::check_bundle(dir);
  for (const auto& p : c.problems) std::fprintf(stderr, "qhx_export: %s\n", p.c_str());
  for (const auto& u : c.unlisted) std::printf("not covered by checksums.json (not checked): %s\n", u.c_str());
  if (c.ok()) {
    std::printf("%s: %zu files match checksums.json (XXH3-128)\n", dir.c_str(), c.files);
    return 0;
  }
  if (c.has_checksums)
    std::fprintf(stderr, "qhx_export: error: %s: %zu problem(s) in %zu files checked\n", dir.c_str(), c.problems.size(),
                 c.files);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  qhx_cli::App app{"Export a Hugging Face Qwen3-VL checkpoint to a QHexRT bundle"};
  qhx::ExportOptions o;
  bool quiet = false;
  std::string hf, out, check;
  auto* hf_opt = app.add_option("--hf", hf, "Hugging Face checkpoint directory");
  auto* out_opt = app.add_option("--out", out, "bundle directory to write (replaced whole, atomically)");
  auto* check_opt =
      app.add_option("--check", check, "verify BUNDLE's files against its checksums.json, then exit (0: all match)")
          ->excludes(hf_opt)
          ->excludes(out_opt);
  hf_opt->required_unless(check_opt);
  out_opt->required_unless(check_opt);
  app.add_option("--weights", o.weights,
                 "weight format: w8 (int8 per channel), w4 (int4, low-power block quantization), f16, f32")
      ->check(qhx_cli::IsMember({"w8", "w4", "f16", "f32"}));
  app.add_option("--w4-scales", o.w4_scales,
                 "how w4 scales are chosen: free (a bf16 scale per 32 columns, least squares; the default for "
                 "--target cpu) or lpbq (low-power block quantization, what the HTP takes; the qnn-htp default)")
      ->check(qhx_cli::IsMember({"free", "lpbq"}));
  app.add_option("--w4-block", o.w4_block,
                 "with --w4-scales lpbq: columns per block, 64 (the default), 32 or 128 (fewer scale bytes on the HTP)")
      ->check(qhx_cli::IsMember({"32", "64", "128"}));
  app.add_option("--w4-keep-w8", o.w4_keep_w8,
                 "w4: the decoder matrix kinds kept in w8: auto (the default: those whose measured w4 error is over "
                 "1.5x the median kind's), none, or a comma list such as down_proj,v_proj");
  app.add_option("--lm-head", o.lm_head,
                 "lm-head format in a w8 or w4 bundle: w8 (the default) or w4 (fewer bytes per decoded token)")
      ->check(qhx_cli::IsMember({"w8", "w4"}));
  app.add_option("--image-size", o.image_size, "fixed image size of the VLM manifest (a multiple of 32)")
      ->check(qhx_cli::PositiveNumber);
  app.add_option("--prefill-chunk", o.prefill_chunk, "tokens per prefill call")->check(qhx_cli::PositiveNumber);
  app.add_option("--context", o.context, "context length (KV cache)")->check(qhx_cli::Range(2, 1 << 20));
  app.add_option("--target", o.target,
                 "where the bundle runs: cpu, or qnn-htp (QNN context binaries for the Hexagon NPU)")
      ->check(qhx_cli::IsMember({"cpu", "qnn-htp"}));
  app.add_option("--soc", o.soc,
                 "with --target qnn-htp: the SoC, SM8650 (HTP v75), SM8750 (v79, default) or SM8850 (v81)")
      ->check(qhx_cli::IsMember(qhx::qnn_socs()));
  app.add_option("--short-chunk", o.short_chunk,
                 "with --target qnn-htp: the short prefill graph's block (default 64 for a prefill chunk >= 256, "
                 "else half of it; 0: none)")
      ->check(qhx_cli::Range(0, 1 << 20));
  app.add_option("--verify-block", o.verify_block,
                 "with --target qnn-htp: the verify graph's block, a token and its drafts (default 5: --speculate "
                 "up to 4; 0: none)")
      ->check(qhx_cli::Range(0, 1 << 20));
  app.add_option("--qnn-parts", o.qnn_parts,
                 "with --target qnn-htp: split the decoder into N context binaries "
                 "(default: by size, a part per ~400 MB of int8 weights)")
      ->check(qhx_cli::PositiveNumber);
  app.add_option("--smoothing", o.smoothing,
                 "outlier channels of the text decoder folded into the weights: auto (w8 and w4, the default), on, off")
      ->check(qhx_cli::IsMember({"auto", "on", "off"}));
  app.add_option("--layout", o.layout,
                 "how w8 matrices are stored: panels (the int8 kernels' layout, mapped in place at open; bundle "
                 "format 2, the default) or rows (row-major, repacked at open; readable by format-1 builds)")
      ->check(qhx_cli::IsMember({"panels", "rows"}));
  app.add_option("--kv-cache", o.kv_cache,
                 "the text decoder's KV cache: f32, f16 (the default in w8 and w4 bundles) or i8 (int8 with a scale "
                 "per token and head: about half of f16's bytes, for long contexts)")
      ->check(qhx_cli::IsMember({"f32", "f16", "i8"}));
  app.add_option("--activations", o.activations,
                 "the CPU's activation precision in matrix products: int8 (w8 and w4: rows quantized at run time, "
                 "the default there), f16 (rounded to fp16, as the NPU holds them) or f32 (the default of f16 and f32 "
                 "bundles)")
      ->check(qhx_cli::IsMember({"int8", "f16", "f32"}));
  app.add_flag("--verify", o.verify,
               "the export gate: run the staged bundle against the fp32 source and publish it "
               "only if they agree (docs/bundle.md, \"The export gate\")");
  app.add_flag("--keep-failed", o.keep_failed, "with --verify: keep a bundle that fails the gate at OUT.failed");
  app.add_flag("-q,--quiet", quiet, "no progress bar");
  QHX_CLI_PARSE(app, argc, argv);
  if (!check.empty()) return check_bundle(check);
  install_signal_handlers();
  o.hf_dir = hf;
  o.out_dir = out;
  o.progress = !quiet;
  o.cancelled = [] {
    return g_signal != 0;
  };
  try {
    const qhx::ExportSummary s = qhx::export_bundle(o);
    if (s.published || !s.kept_at.empty()) {
      std::uint64_t total = 0;
      std::printf("bundle %s (%s%s) %s in %.1f s:\n", (s.published ? s.out_dir : s.kept_at).c_str(), o.weights.c_str(),
                  o.target == "qnn-htp" ? (", qnn-htp " + o.soc).c_str() : "",
                  s.published ? "written" : "failing the gate, kept aside", s.seconds);
      for (const auto& [name, bytes] : s.files) {
        std::printf("  %-32s %12.3f MB\n", name.c_str(), static_cast<double>(bytes) / 1e6);
        total += bytes;
      }
      std::printf("  %-32s %12.3f MB\n", "total", static_cast<double>(total) / 1e6);
    }
    for (const auto& note : s.notes) std::printf("%s\n", note.c_str());
    if (s.smoothed_channels > 0)
      std::printf("outlier smoothing: %zu channel(s) of the text decoder folded into the weights\n",
                  s.smoothed_channels);
    if (s.gate) {
      const qhx::VerifyReport& r = *s.gate;
      for (const auto& c : r.cases)
        std::printf(
            "verify %-5s: greedy first token %d (fp32 source %d), logits cosine %.6f (bound %.5f), KLD %.6f "
            "(bound %g), max abs %.3e\n",
            c.name.c_str(), c.bundle_token, c.source_token, c.cosine, r.cosine_bound, c.kl_divergence, r.kld_bound,
            c.max_abs);
      if (!r.passed) {
        std::fprintf(
            stderr, "qhx_export: error: the bundle fails the export gate (see above): %s\n",
            s.kept_at.empty()
                ? ("nothing was published, " + s.out_dir.string() + " is as it was before the export").c_str()
                : ("not published (" + s.out_dir.string() + " is as it was); it is kept at " + s.kept_at.string())
                      .c_str());
        for (const auto& a : r.advice) std::fprintf(stderr, "qhx_export:   %s\n", a.c_str());
        return 1;
      }
      std::printf("verify: passed\n");
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "\nqhx_export: error: %s\n", e.what());
    return 1;
  }
}
