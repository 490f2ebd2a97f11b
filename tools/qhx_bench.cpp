// qhx_bench — QHexRT's speed, measured through its own API (qhx::Pipeline), and
// as fractions of this machine's limits (scripts/bench.sh measures them once
// with the shared roofline tool and caches them as JSON).
//
//   qhx_bench [--bundle DIR] [--roofline FILE] [--runs N] [--quick] [--threads N] [--json]
//
// Figures, each the median of N runs:
//   vision_ms        vision encode of assets/sample.png at 512x512 (the VLM manifest)
//   ttft_ms          "Describe this image." with that image, request start to first token
//   prefill_tok_s    a raw prompt of exactly 320 tokens through the text manifest
//   decode ms/token  after a prompt of 512 and of 1,024 tokens, over forced decode steps,
//                    through a copy of the text manifest with a larger context
//   load_ms          Pipeline::open of the VLM manifest; peak_rss_mb (getrusage) once the
//                    caption runs are done (the decode sections' sessions add KV caches of their own);
//                    file_pages_2mib_mb / anon_pages_2mib_mb: memory mapped in 2 MiB pages during
//                    decode (/proc/self/smaps_rollup: FilePmdMapped, AnonHugePages)
//   long_context     with --long-context N, for the f16 and the 8-bit KV cache: prefill of an
//                    N-token prompt, decode at N and at 512 tokens of context, and decode's
//                    fraction of read bandwidth at N counting the weights and the cache rows
//                    a step reads (layers x 2 x kv_heads x N rows)
//                    (speed_vs_512: the median of per-run ratios, the two contexts run back to back)
//   verify_steps_512 per K in {2, 4, 8}: ms of one speculation step that verifies K drafts
//                    (forced tokens as the drafts, all accepted) against a plain decode step
//                    run just before it (the median of the runs' ratios), and the expected
//                    speed-up (1 - a^(K+1)) / (1 - a) · plain / step at acceptance rates
//                    a = 0.5, 0.7, 0.9 (random weights show no real acceptance)
//   adjacent fractions  decode at 512 and at N: also against the read bandwidth probed just
//                    before and just after each run's decode steps (`qhx_bench --bandwidth-probe`:
//                    the roofline's read figure, in a child process; the prompt is prefilled by a
//                    session's first turn, the steps decode in its second). The host's bandwidth
//                    for two threads flips between two levels on a shared host
//                    within seconds, so only runs whose two probes agree within 10% count
//                    (stable_runs), against the mean of their probes
// Fractions (n/a without the roofline file; a limit is the better of its 1-thread and
// all-threads figures):
//   decode_bw_fraction    = bytes of LLM + lm-head weights per token x tok/s / read bandwidth
//   prefill_flop_fraction = 2 * params_llm * tokens / prefill time / peak
//   vision_flop_fraction  = (2 * params_vision * patches + attention) / vision time / peak
// where peak is the int8 dot-product peak when the graph's matrices take the int8
// path (w8 weights, "activations": "int8", the default), else the fp32 FMA peak.
// Progress goes to stderr; stdout has the table, or with --json one JSON object.
#include <sys/resource.h>
#include <unistd.h>

#include "cli/cli.hpp"
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bandwidth_probe.hpp"
#include "bench_report.hpp"
#include "bench_support.hpp"
#include "qhexrt/doctor.hpp"
#include "qhexrt/error.hpp"
#include "qhexrt/pipeline.hpp"
#include "qhexrt/session.hpp"
#include "qhexrt/safetensors.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace qhx_bench;

namespace {

std::string default_bundle() {
  const char* cache = std::getenv("QHX_CACHE");
  const char* home = std::getenv("HOME");
  const fs::path base = cache && *cache ? fs::path(cache) : fs::path(home ? home : ".") / ".cache" / "qhexrt";
  return (base / "bundles" / "random_2b-w8").string();
}

// The one manifest of `kind` ("vlm" or "text") in a bundle directory.
// The bundle's one manifest of a kind (qhx::find_bundle_manifests: with or without images).
fs::path find_manifest(const fs::path& bundle, const std::string& kind) {
  const qhx::BundleManifests all = qhx::find_bundle_manifests(bundle);
  const auto& hits = kind == "vlm" ? all.vlm : all.text;
  if (hits.size() != 1) qhx::fail(bundle.string(), ": expected one ", kind, " manifest, found ", hits.size());
  return hits[0];
}

// A raw prompt of exactly n tokens ("word word ..."), checked with the pipeline's tokenizer.
std::string prompt_of(const qhx::Tokenizer& tok, std::int64_t n) {
  std::string text = "word";
  for (std::int64_t i = 1; i < n; ++i) text += " word";
  const auto got = static_cast<std::int64_t>(tok.encode(text).size());
  if (got != n) qhx::fail("the benchmark prompt tokenizes to ", got, " tokens, not ", n);
  return text;
}

// --weights-in-memory: every pipeline the benchmark opens reads its streamed weights into memory.
bool g_weights_in_memory = false;

qhx::PipelineOptions bench_options() {
  qhx::PipelineOptions o;
  o.weights_in_memory = g_weights_in_memory;
  return o;
}

// The text plan over a larger context (and a KV cache of another dtype): PipelineOptions'
// overrides, checked as the manifest's own keys would be.
qhx::Pipeline open_long_context(const fs::path& text_manifest, std::int64_t context, const std::string& kv_cache = "") {
  qhx::PipelineOptions o = bench_options();
  o.context_length = context;
  if (!kv_cache.empty()) o.kv_cache = kv_cache;
  return qhx::Pipeline::open(text_manifest, o);
}

qhx::SamplingParams greedy() {
  qhx::SamplingParams s;
  s.greedy = true;
  s.temperature = 0.0f;
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  qhx_cli::App app{"qhx_bench: QHexRT speed through its own API, and as fractions of the machine's limits"};
  std::string bundle = default_bundle(), roofline_path, image = "assets/sample.png";
  int runs = 0, threads = 0;
  std::int64_t decode_steps = 0, long_context = 0;
  bool quick = false, as_json = false, bandwidth_probe = false;
  app.add_option("--bundle", bundle, "bundle directory (qhx_export output)");
  app.add_option("--roofline", roofline_path, "roofline JSON (scripts/bench.sh caches it); fractions are n/a without");
  app.add_option("--image", image, "image for the vision and TTFT figures");
  app.add_option("--runs", runs, "runs per figure (median); default 3, 1 with --quick")->check(qhx_cli::PositiveNumber);
  app.add_option("--decode-steps", decode_steps, "forced decode steps per decode figure; default 16, 4 with --quick")
      ->check(qhx_cli::PositiveNumber);
  app.add_option("--threads", threads, "CPU threads (0: one per core)")->check(qhx_cli::NonNegativeNumber);
  app.add_option("--long-context", long_context,
                 "also prefill an N-token prompt and decode at N tokens of context, with the f16 and the 8-bit KV "
                 "cache (e.g. 4096; 0, the default: skip)")
      ->check(qhx_cli::NonNegativeNumber);
  app.add_flag("--quick", quick, "one run per figure and fewer decode steps");
  app.add_flag("--json", as_json, "print one JSON object");
  app.add_flag(
      "--weights-in-memory", g_weights_in_memory,
      "read the weights decode streams into memory instead of mapping them (PipelineOptions::weights_in_memory)");
  app.add_flag("--bandwidth-probe", bandwidth_probe,
               "only measure the read bandwidth now with --threads threads and print GB/s (what the decode "
               "figures are also compared with, run just before and after each)");
  QHX_CLI_PARSE(app, argc, argv);
  if (bandwidth_probe) {
    std::printf("%.3f\n",
                measure_read_bandwidth(threads > 0 ? threads : static_cast<int>(std::thread::hardware_concurrency())));
    return 0;
  }
  if (runs == 0) runs = quick ? 1 : 3;
  if (decode_steps == 0) decode_steps = quick ? 4 : 16;

  try {
    std::string warning;
    const int threads_used = qhx::set_threads(threads, &warning);
    if (!warning.empty()) std::fprintf(stderr, "qhx_bench: warning: %s\n", warning.c_str());
    const fs::path dir = bundle;
    if (!fs::is_directory(dir)) qhx::fail(bundle, ": no such bundle directory (scripts/bench.sh builds one)");
    if (!fs::exists(image)) qhx::fail(image, ": no such image (run from the repository root, or give --image)");
    const fs::path vlm_manifest = find_manifest(dir, "vlm"), text_manifest = find_manifest(dir, "text");
    const json text_m = read_json(text_manifest);
    const json cfg = read_json(dir / text_m.value("config", std::string("config.json")));
    const auto log = [&](const std::string& s) {
      std::cerr << "qhx_bench: " << s << std::endl;
    };
    const auto t_start = std::chrono::steady_clock::now();

    // Weight bytes read per decoded token: the LLM's and the lm-head's tensors,
    // as the CPU backend streams them (a w4 matrix's scales in 16 bits when
    // every one is a bf16 value: docs/bundle.md).
    const auto streamed_bytes = [&](const std::string& graph) {
      const auto file =
          qhx::SafetensorsFile::open(dir / text_m.at("graphs").at(graph).at("weights").get<std::string>());
      double sum = 0;
      for (const qhx::TensorView& t : file.tensors()) {
        const bool w4_scale = t.name.size() > 6 && t.name.ends_with(".scale") && t.dtype == qhx::DType::F32 &&
                              file.find(t.name.substr(0, t.name.size() - 6)) != nullptr &&
                              file.get(t.name.substr(0, t.name.size() - 6)).dtype == qhx::DType::U8;
        bool bf16 = w4_scale;
        for (std::int64_t i = 0; bf16 && i < t.numel(); ++i) {
          std::uint32_t bits;
          std::memcpy(&bits, t.data + 4 * i, 4);
          bf16 = (bits & 0xFFFFu) == 0;
        }
        sum += static_cast<double>(t.nbytes) / (bf16 ? 2 : 1);
      }
      return sum;
    };
    const double bytes_per_token = streamed_bytes("llm") + streamed_bytes("lm_head");

    // Parameter counts (matrix weights only) from the config.
    const json& tc = cfg.at("text_config");
    const json& vc = cfg.at("vision_config");
    const double H = tc.at("hidden_size"), I = tc.at("intermediate_size"), L = tc.at("num_hidden_layers");
    const double nh = tc.at("num_attention_heads"), nkv = tc.at("num_key_value_heads");
    const double hd = tc.value("head_dim", H / nh);
    const double params_llm = L * (H * nh * hd * 2 + H * nkv * hd * 2 + 3 * H * I);
    const double D = vc.at("hidden_size"), VI = vc.at("intermediate_size"), depth = vc.at("depth");
    const double out_h = vc.at("out_hidden_size"), merge = vc.at("spatial_merge_size");
    // The patch embedding's work per patch: a still image's T frames are folded into one (patch_embed stage).
    const double patch_in = static_cast<double>(vc.at("in_channels")) * static_cast<double>(vc.at("patch_size")) *
                            static_cast<double>(vc.at("patch_size"));
    const double n_mergers = 1.0 + static_cast<double>(vc.value("deepstack_visual_indexes", json::array()).size());
    const double params_vis_patch = patch_in * D + depth * (4 * D * D + 2 * D * VI);  // applied per patch
    const double md = D * merge * merge;
    const double params_vis_merge = n_mergers * (md * md + md * out_h);  // applied per merged token

    std::vector<double> vision_ms, ttft_ms, prefill_ms, d512, d1024;
    std::vector<double> d512_adjacent;  // per run: decode's fraction of the bandwidth probed around it
    std::vector<double> verify_ms,
        verify_ratio;            // per kVerifyDrafts: ms per verification step, its cost in plain steps
    double verify_plain_ms = 0;  // the plain steps measured beside them
    double load_ms = 0;
    std::int64_t image_tokens = 0;
    const qhx::SamplingParams g = greedy();
    // Touches the weights and runs both the prefill and the decode paths once (kernels may
    // pack or fault in their weights on first use).
    const auto warm_up = [&](qhx::Pipeline& p) {
      qhx::GenerationRequest r;
      r.prompt = "Hello.";
      r.raw = true;
      r.max_new_tokens = 3;
      r.sampling = g;
      p.generate(r);
    };
    // A raw prompt, then decode_steps forced steps (the first token comes from the prefill's logits).
    const auto forced_decode = [&](qhx::Pipeline& p, const std::string& prompt, std::int32_t forced) {
      qhx::GenerationRequest req;
      req.prompt = prompt;
      req.raw = true;
      req.max_new_tokens = decode_steps + 1;
      req.forced_tokens.assign(static_cast<std::size_t>(decode_steps + 1), forced);
      req.sampling = g;
      auto res = p.generate(req);
      if (res.timings.decode_steps != decode_steps)
        qhx::fail("decode ran ", res.timings.decode_steps, " steps, not ", decode_steps);
      return res;
    };
    // The same steps, with (`probe`) the read bandwidth probed just before and just after
    // them: a session prefills the prompt in its first turn (one token), then decodes the
    // forced steps in its second, at the prompt's context (plus a few template tokens).
    struct Probed {
      double prefill_ms = 0, decode_ms = 0, bw_before = 0, bw_after = 0;
      bool stable() const {
        return bw_before > 0 && bw_after > 0 && std::min(bw_before, bw_after) >= 0.9 * std::max(bw_before, bw_after);
      }
      double bw() const { return (bw_before + bw_after) / 2; }
    };
    const auto probed_decode = [&](qhx::Pipeline& p, const std::string& prompt, std::int32_t forced, bool probe) {
      qhx::Session session(p);
      qhx::GenerationOptions first;
      first.max_new_tokens = 1;
      first.sampling = g;
      Probed out;
      out.prefill_ms = session.send(qhx::Message::text("user", prompt), first).timings.prefill_ms;
      qhx::GenerationOptions steps;
      steps.max_new_tokens = decode_steps + 1;
      steps.forced_tokens.assign(static_cast<std::size_t>(decode_steps + 1), forced);
      steps.sampling = g;
      if (probe) out.bw_before = read_bandwidth_now(threads_used);
      const auto res = session.send(qhx::Message::text("user", "word"), steps);
      if (probe) out.bw_after = read_bandwidth_now(threads_used);
      if (res.timings.decode_steps != decode_steps)
        qhx::fail("decode ran ", res.timings.decode_steps, " steps, not ", decode_steps);
      out.decode_ms = res.timings.decode_ms_per_token;
      return out;
    };
    const auto probes_text = [](const Probed& r) {
      return "read bandwidth " + std::to_string(r.bw_before) + " GB/s before, " + std::to_string(r.bw_after) +
             " after" + (r.stable() ? "" : " (unstable: not counted)");
    };

    {  // VLM manifest: load, vision encode and TTFT of "Describe this image." with the image.
      log("open " + vlm_manifest.string());
      // Without the image-feature cache: every run encodes the image again (with it, runs
      // after the first would take the features from the cache and time no vision at all).
      qhx::PipelineOptions no_image_cache = bench_options();
      no_image_cache.image_cache_mb = 0;
      qhx::Pipeline p = qhx::Pipeline::open(vlm_manifest, no_image_cache);
      load_ms = p.load_ms();
      warm_up(p);
      for (int r = 0; r < runs; ++r) {
        qhx::GenerationRequest req;
        req.prompt = "Describe this image.";
        req.images = {image};
        req.resize = "fixed";
        req.max_new_tokens = 1;
        req.sampling = g;
        const auto res = p.generate(req);
        if (res.timings.image_cache_hits != 0 || res.timings.image_tokens == 0)
          throw std::runtime_error("qhx_bench: run " + std::to_string(r + 1) + " did not encode the image");
        vision_ms.push_back(res.timings.vision_ms);
        ttft_ms.push_back(res.timings.ttft_ms);
        image_tokens = res.timings.image_tokens;
        log("run " + std::to_string(r + 1) + ": vision " + std::to_string(res.timings.vision_ms) + " ms, ttft " +
            std::to_string(res.timings.ttft_ms) + " ms (" + std::to_string(res.prompt_tokens.size()) +
            " prompt tokens)");
      }
    }
    const double peak_rss_caption_mb = peak_rss_mb();  // before the decode sections
    std::pair<double, double> huge_pages{-1, -1};
    const std::int64_t prefill_tokens = 320;
    {  // Text manifest: prefill of exactly 320 tokens.
      log("open " + text_manifest.string());
      qhx::Pipeline p = qhx::Pipeline::open(text_manifest, bench_options());
      warm_up(p);
      const std::string prompt = prompt_of(p.tokenizer(), prefill_tokens);
      for (int r = 0; r < runs; ++r) {
        qhx::GenerationRequest req;
        req.prompt = prompt;
        req.raw = true;
        req.max_new_tokens = 1;
        req.sampling = g;
        const auto res = p.generate(req);
        if (static_cast<std::int64_t>(res.prompt_tokens.size()) != prefill_tokens)
          qhx::fail("prefill prompt has ", res.prompt_tokens.size(), " tokens, not ", prefill_tokens);
        prefill_ms.push_back(res.timings.prefill_ms);
        log("run " + std::to_string(r + 1) + ": prefill " + std::to_string(prefill_tokens) + " tokens " +
            std::to_string(res.timings.prefill_ms) + " ms");
      }
    }
    {  // Decode at 512 and 1,024 tokens of context, through a copy of the text manifest with a larger context.
      std::optional<qhx::Pipeline> p;
      p.emplace(open_long_context(text_manifest, 2048));
      warm_up(*p);
      const std::int32_t forced = p->tokenizer().encode(" word").at(0);
      for (const std::int64_t ctx_len : {std::int64_t{512}, std::int64_t{1024}}) {
        const std::string prompt = prompt_of(p->tokenizer(), ctx_len);
        for (int r = 0; r < runs; ++r) {
          const bool at512 = ctx_len == 512;  // only decode at 512 is compared with the probes
          const auto res = probed_decode(*p, prompt, forced, at512);
          (at512 ? d512 : d1024).push_back(res.decode_ms);
          if (at512 && res.stable())
            d512_adjacent.push_back(bytes_per_token / (res.decode_ms / 1000.0) / (res.bw() * 1e9));
          log("run " + std::to_string(r + 1) + ": context " + std::to_string(ctx_len) + ", prefill " +
              std::to_string(res.prefill_ms) + " ms, decode " + std::to_string(res.decode_ms) + " ms/token" +
              (at512 ? "; " + probes_text(res) : std::string()));
        }
      }
      huge_pages = huge_mapped_mb();  // while the decoder's weights are open and streamed
      // Verification steps at 512 context: with the forced tokens as the drafts every draft is
      // accepted, so each step verifies K drafts in one (K + 1)-row pass (speculation's cost).
      // Each run measures a plain step and then every K back to back, and a cost is the median
      // of the runs' ratios: the bandwidth moves too much between minutes to compare a step
      // with a plain one measured earlier.
      const std::string prompt = prompt_of(p->tokenizer(), 512);
      std::vector<double> plain_ms;
      std::vector<std::vector<double>> step_ms(std::size(kVerifyDrafts)), ratio(std::size(kVerifyDrafts));
      for (int r = 0; r < runs; ++r) {
        const double plain = forced_decode(*p, prompt, forced).timings.decode_ms_per_token;
        plain_ms.push_back(plain);
        for (std::size_t i = 0; i < std::size(kVerifyDrafts); ++i) {
          const std::int64_t K = kVerifyDrafts[i];
          qhx::GenerationRequest req;
          req.prompt = prompt;
          req.raw = true;
          req.max_new_tokens = decode_steps * (K + 1) + 1;
          req.forced_tokens.assign(static_cast<std::size_t>(*req.max_new_tokens), forced);
          req.sampling = g;
          req.speculate = K;
          const auto res = p->generate(req);
          if (res.accepted_tokens != res.draft_tokens || res.draft_tokens == 0)
            qhx::fail("verification steps with K = ", K, ": ", res.accepted_tokens, " of ", res.draft_tokens,
                      " forced drafts accepted");
          step_ms[i].push_back(res.timings.decode_ms_per_token);  // per graph run, i.e. per verification step
          ratio[i].push_back(res.timings.decode_ms_per_token / plain);
          log("run " + std::to_string(r + 1) + ": verify K = " + std::to_string(K) + ", " +
              std::to_string(res.timings.decode_ms_per_token) + " ms/step over " +
              std::to_string(res.timings.decode_steps) + " steps (plain step " + std::to_string(plain) + " ms)");
        }
      }
      verify_plain_ms = median(plain_ms);
      for (std::size_t i = 0; i < std::size(kVerifyDrafts); ++i) {
        verify_ms.push_back(median(step_ms[i]));
        verify_ratio.push_back(median(ratio[i]));
      }
    }
    json long_figures = json::array();
    if (long_context > 0) {  // Long contexts, per KV cache: prefill of N tokens, decode at N and at 512.
      for (const std::string kv : {"f16", "i8"}) {
        std::optional<qhx::Pipeline> p;
        // Room for the session's two turns: the prompt, the template's tokens and the steps.
        p.emplace(open_long_context(text_manifest, long_context + decode_steps + 64, kv));
        warm_up(*p);
        const std::int32_t forced = p->tokenizer().encode(" word").at(0);
        const auto run_at = [&](int r, std::int64_t ctx_len, const std::string& prompt) {
          const auto res = probed_decode(*p, prompt, forced, /*probe=*/true);
          log("run " + std::to_string(r + 1) + ": kv " + kv + ", context " + std::to_string(ctx_len) + ", prefill " +
              std::to_string(res.prefill_ms) + " ms, decode " + std::to_string(res.decode_ms) + " ms/token; " +
              probes_text(res));
          return res;
        };
        const std::string prompt_long = prompt_of(p->tokenizer(), long_context);
        const std::string prompt_short = prompt_of(p->tokenizer(), 512);
        std::vector<double> pre_ms, dec_long, dec_short, ratios;
        // A step at context N reads every weight once and the cache's rows of every layer, key and value.
        const double row_bytes = kv == "i8" ? hd + 4 : 2 * hd;
        const double kv_bytes = L * 2 * nkv * static_cast<double>(long_context) * row_bytes;
        std::vector<double> adjacent, bw_stable;  // per stable run: decode at N's fraction of its probes, their mean
        // Alternating pairs: the host's bandwidth drifts from minute to minute, so each
        // run's two contexts are measured back to back and their ratio taken per pair.
        for (int r = 0; r < runs; ++r) {
          const auto at_long = run_at(r, long_context, prompt_long);
          const auto at_short = run_at(r, 512, prompt_short);
          pre_ms.push_back(at_long.prefill_ms);
          dec_long.push_back(at_long.decode_ms);
          dec_short.push_back(at_short.decode_ms);
          ratios.push_back(at_short.decode_ms / at_long.decode_ms);
          if (at_long.stable()) {
            adjacent.push_back((bytes_per_token + kv_bytes) / (at_long.decode_ms / 1000.0) / (at_long.bw() * 1e9));
            bw_stable.push_back(at_long.bw());
          }
        }
        const double dl = median(dec_long), ds = median(dec_short);
        json f = {{"kv_cache", kv},
                  {"context", long_context},
                  {"prefill_ms", median(pre_ms)},
                  {"prefill_tok_s", static_cast<double>(long_context) / (median(pre_ms) / 1000.0)},
                  {"decode_ms_per_token", dl},
                  {"decode_ms_per_token_512", ds},
                  {"speed_vs_512", median(ratios)},  // the median of the pairs' ratios
                  {"kv_bytes_per_token", kv_bytes},
                  {"bw_fraction", nullptr},
                  {"bw_fraction_adjacent", adjacent.empty() ? json(nullptr) : json(median(adjacent))},
                  {"read_gbs_adjacent", bw_stable.empty() ? json(nullptr) : json(median(bw_stable))},
                  {"stable_runs", adjacent.size()}};
        long_figures.push_back(f);
      }
    }

    const double vis = median(vision_ms), ttft = median(ttft_ms), pre = median(prefill_ms);
    const double dec512 = median(d512), dec1024 = median(d1024);
    const double prefill_tok_s = prefill_tokens / (pre / 1000.0);
    const double decode_tok_s = 1000.0 / dec512;
    const double merged = static_cast<double>(image_tokens), patches = merged * merge * merge;
    const double vision_flops = 2 * params_vis_patch * patches + 2 * params_vis_merge * merged +
                                depth * 4 * patches * patches * D;  // QK^T and AV over all patches
    const double prefill_flops = 2 * params_llm * static_cast<double>(prefill_tokens);
    const auto roof = load_roofline(roofline_path);
    json frac_decode = nullptr, frac_prefill = nullptr, frac_vision = nullptr;
    const bool llm_int8 = graph_uses_int8(dir, text_m, "llm", "model.language_model.layers.0.mlp.up_proj.weight");
    const bool vis_int8 =
        graph_uses_int8(dir, read_json(vlm_manifest), "vision", "model.visual.blocks.0.mlp.linear_fc1.weight");
    const auto peak = [&](bool int8) {
      return (int8 && roof->int8_gops > 0 ? roof->int8_gops : roof->fp32_gflops) * 1e9;
    };
    if (roof) {
      frac_decode = bytes_per_token * decode_tok_s / (roof->read_gbs * 1e9);
      frac_prefill = prefill_flops / (pre / 1000.0) / peak(llm_int8);
      frac_vision = vision_flops / (vis / 1000.0) / peak(vis_int8);
    }
    const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
    json j = {
        {"bundle", fs::absolute(dir).string()},
        {"runs", runs},
        {"int8_kernel", qhx::diagnose().cpu.int8_kernel},
        {"threads", threads},
        {"weights_in_memory", g_weights_in_memory},
        {"threads_used", threads_used},
        {"decode_steps", decode_steps},
        {"vision_ms", vis},
        {"image_tokens", image_tokens},
        {"vision_gflop", vision_flops / 1e9},
        {"vision_flop_fraction", frac_vision},
        {"vision_peak", vis_int8 ? "int8" : "fp32"},
        {"ttft_ms", ttft},
        {"prefill_tokens", prefill_tokens},
        {"prefill_ms", pre},
        {"prefill_tok_s", prefill_tok_s},
        {"prefill_gflop", prefill_flops / 1e9},
        {"prefill_flop_fraction", frac_prefill},
        {"prefill_peak", llm_int8 ? "int8" : "fp32"},
        {"decode_ms_per_token_512", dec512},
        {"decode_ms_per_token_1024", dec1024},
        {"decode_tok_s", decode_tok_s},
        {"decode_tok_s_1024", 1000.0 / dec1024},
        {"weight_bytes_per_token", bytes_per_token},
        {"decode_bw_fraction", frac_decode},
        {"decode_bw_fraction_adjacent", d512_adjacent.empty() ? json(nullptr) : json(median(d512_adjacent))},
        {"decode_stable_runs", d512_adjacent.size()},
        {"load_ms", load_ms},
        {"peak_rss_mb", peak_rss_caption_mb},
        {"file_pages_2mib_mb", huge_pages.first},
        {"anon_pages_2mib_mb", huge_pages.second},
        {"wall_s", wall_s},
    };
    json verify = json::array();
    for (std::size_t i = 0; i < verify_ms.size(); ++i) {
      const std::int64_t K = kVerifyDrafts[i];
      json speedup = json::object();
      // The speed-up from the cost in plain steps: step_ms / plain_ms = verify_ratio.
      for (const double a : {0.5, 0.7, 0.9})
        speedup[std::to_string(a).substr(0, 3)] = speculation_speedup(a, K, verify_ratio[i], 1.0);
      verify.push_back({{"drafts", K},
                        {"step_ms", verify_ms[i]},
                        {"plain_step_ms", verify_plain_ms},
                        {"cost_vs_plain_step", verify_ratio[i]},
                        {"speedup_at_acceptance", speedup}});
    }
    j["verify_steps_512"] = verify;
    for (json& f : long_figures)
      if (roof)
        f["bw_fraction"] = (bytes_per_token + f["kv_bytes_per_token"].get<double>()) /
                           (f["decode_ms_per_token"].get<double>() / 1000.0) / (roof->read_gbs * 1e9);
    if (!long_figures.empty()) j["long_context"] = long_figures;
    if (roof) {
      j["roofline"] = {{"threads", roof->threads},
                       {"read_gbs", roof->read_gbs},
                       {"fp32_gflops", roof->fp32_gflops},
                       {"int8_gops", roof->int8_gops}};
    }
    if (as_json) {
      std::cout << j.dump() << std::endl;
      return 0;
    }
    print_report(j, roof ? roof->raw.value("int8_isa", std::string("?")) : std::string());
  } catch (const std::exception& e) {
    std::cerr << "qhx_bench: error: " << e.what() << std::endl;
    return 1;
  }
  return 0;
}
