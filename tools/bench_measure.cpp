#include "bench_measure.hpp"

#include <algorithm>
#include <cstring>
#include <iostream>
#include <optional>
#include <stdexcept>

#include "bandwidth_probe.hpp"
#include "bench_support.hpp"
#include "qhexrt/error.hpp"
#include "qhexrt/pipeline.hpp"
#include "qhexrt/safetensors.hpp"
#include "qhexrt/session.hpp"

namespace fs = std::filesystem;

namespace qhx_bench {

void log(const std::string& line) { std::cerr << "qhx_bench: " << line << std::endl; }

namespace {

// A raw prompt of exactly n tokens ("word word ..."), checked with the pipeline's tokenizer.
std::string prompt_of(const qhx::Tokenizer& tok, std::int64_t n) {
  std::string text = "word";
  for (std::int64_t i = 1; i < n; ++i) text += " word";
  const auto got = static_cast<std::int64_t>(tok.encode(text).size());
  if (got != n) qhx::fail("the benchmark prompt tokenizes to ", got, " tokens, not ", n);
  return text;
}

// The text plan over a larger context (and a KV cache of another dtype): PipelineOptions'
// overrides, checked as the manifest's own keys would be.
qhx::Pipeline open_long_context(const BenchSetup& b, std::int64_t context, const std::string& kv_cache = "") {
  qhx::PipelineOptions o = b.options;
  o.context_length = context;
  if (!kv_cache.empty()) o.kv_cache = kv_cache;
  return qhx::Pipeline::open(b.text_manifest, o);
}

qhx::SamplingParams greedy() {
  qhx::SamplingParams s;
  s.greedy = true;
  s.temperature = 0.0f;
  return s;
}

// Touches the weights and runs both the prefill and the decode paths once (kernels may
// pack or fault in their weights on first use).
void warm_up(qhx::Pipeline& p) {
  qhx::GenerationRequest r;
  r.prompt = "Hello.";
  r.raw = true;
  r.max_new_tokens = 3;
  r.sampling = greedy();
  p.generate(r);
}

// A raw prompt, then decode_steps forced steps (the first token comes from the prefill's logits).
qhx::GenerationResult forced_decode(const BenchSetup& b, qhx::Pipeline& p, const std::string& prompt,
                                    std::int32_t forced) {
  qhx::GenerationRequest req;
  req.prompt = prompt;
  req.raw = true;
  req.max_new_tokens = b.decode_steps + 1;
  req.forced_tokens.assign(static_cast<std::size_t>(b.decode_steps + 1), forced);
  req.sampling = greedy();
  auto res = p.generate(req);
  if (res.timings.decode_steps != b.decode_steps)
    qhx::fail("decode ran ", res.timings.decode_steps, " steps, not ", b.decode_steps);
  return res;
}

struct Probed {
  double prefill_ms = 0, decode_ms = 0, bw_before = 0, bw_after = 0;
  bool stable() const {
    return bw_before > 0 && bw_after > 0 && std::min(bw_before, bw_after) >= 0.9 * std::max(bw_before, bw_after);
  }
  double bw() const { return (bw_before + bw_after) / 2; }
};

// The forced steps, with (`probe`) the read bandwidth probed just before and just after
// them: a session prefills the prompt in its first turn (one token), then decodes the
// forced steps in its second, at the prompt's context (plus a few template tokens).
Probed probed_decode(const BenchSetup& b, qhx::Pipeline& p, const std::string& prompt, std::int32_t forced,
                     bool probe) {
  qhx::Session session(p);
  qhx::GenerationOptions first;
  first.max_new_tokens = 1;
  first.sampling = greedy();
  Probed out;
  out.prefill_ms = session.send(qhx::Message::text("user", prompt), first).timings.prefill_ms;
  qhx::GenerationOptions steps;
  steps.max_new_tokens = b.decode_steps + 1;
  steps.forced_tokens.assign(static_cast<std::size_t>(b.decode_steps + 1), forced);
  steps.sampling = greedy();
  if (probe) out.bw_before = read_bandwidth_now(b.threads_used);
  const auto res = session.send(qhx::Message::text("user", "word"), steps);
  if (probe) out.bw_after = read_bandwidth_now(b.threads_used);
  if (res.timings.decode_steps != b.decode_steps)
    qhx::fail("decode ran ", res.timings.decode_steps, " steps, not ", b.decode_steps);
  out.decode_ms = res.timings.decode_ms_per_token;
  return out;
}

std::string probes_text(const Probed& r) {
  return "read bandwidth " + std::to_string(r.bw_before) + " GB/s before, " + std::to_string(r.bw_after) + " after" +
         (r.stable() ? "" : " (unstable: not counted)");
}

// Weight bytes a graph of the text plan streams per decoded token, as the CPU backend
// reads them (a w4 matrix's scales in 16 bits when every one is a bf16 value: docs/bundle.md).
double streamed_bytes(const fs::path& dir, const json& text_manifest, const std::string& graph) {
  const auto file =
      qhx::SafetensorsFile::open(dir / text_manifest.at("graphs").at(graph).at("weights").get<std::string>());
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
}

VerifyFigures measure_verification(const BenchSetup& b, qhx::Pipeline& p, std::int32_t forced) {
  // With the forced tokens as the drafts every draft is accepted, so each step verifies K
  // drafts in one (K + 1)-row pass (speculation's cost). Each run measures a plain step and
  // then every K back to back, and a cost is the median of the runs' ratios: the bandwidth
  // moves too much between minutes to compare a step with a plain one measured earlier.
  const std::string prompt = prompt_of(p.tokenizer(), 512);
  std::vector<double> plain_ms;
  std::vector<std::vector<double>> step_ms(std::size(kVerifyDrafts)), ratio(std::size(kVerifyDrafts));
  for (int r = 0; r < b.runs; ++r) {
    const double plain = forced_decode(b, p, prompt, forced).timings.decode_ms_per_token;
    plain_ms.push_back(plain);
    for (std::size_t i = 0; i < std::size(kVerifyDrafts); ++i) {
      const std::int64_t K = kVerifyDrafts[i];
      qhx::GenerationRequest req;
      req.prompt = prompt;
      req.raw = true;
      req.max_new_tokens = b.decode_steps * (K + 1) + 1;
      req.forced_tokens.assign(static_cast<std::size_t>(*req.max_new_tokens), forced);
      req.sampling = greedy();
      req.speculate = K;
      const auto res = p.generate(req);
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
  VerifyFigures v;
  v.plain_ms = median(plain_ms);
  for (std::size_t i = 0; i < std::size(kVerifyDrafts); ++i) {
    v.step_ms.push_back(median(step_ms[i]));
    v.cost_vs_plain.push_back(median(ratio[i]));
  }
  return v;
}

}  // namespace

ModelCost model_cost(const fs::path& dir, const json& text_manifest, const json& config) {
  ModelCost c;
  c.bytes_per_token = streamed_bytes(dir, text_manifest, "llm") + streamed_bytes(dir, text_manifest, "lm_head");
  // Parameter counts (matrix weights only) from the config.
  const json& tc = config.at("text_config");
  const json& vc = config.at("vision_config");
  const double H = tc.at("hidden_size"), I = tc.at("intermediate_size");
  const double nh = tc.at("num_attention_heads");
  c.layers = tc.at("num_hidden_layers");
  c.kv_heads = tc.at("num_key_value_heads");
  c.head_dim = tc.value("head_dim", H / nh);
  c.params_llm = c.layers * (H * nh * c.head_dim * 2 + H * c.kv_heads * c.head_dim * 2 + 3 * H * I);
  const double D = vc.at("hidden_size"), VI = vc.at("intermediate_size");
  const double out_h = vc.at("out_hidden_size");
  c.vision_hidden = D;
  c.depth = vc.at("depth");
  c.merge = vc.at("spatial_merge_size");
  // The patch embedding's work per patch: a still image's T frames are folded into one (patch_embed stage).
  const double patch_in = static_cast<double>(vc.at("in_channels")) * static_cast<double>(vc.at("patch_size")) *
                          static_cast<double>(vc.at("patch_size"));
  const double n_mergers = 1.0 + static_cast<double>(vc.value("deepstack_visual_indexes", json::array()).size());
  c.params_vis_patch = patch_in * D + c.depth * (4 * D * D + 2 * D * VI);
  const double md = D * c.merge * c.merge;
  c.params_vis_merge = n_mergers * (md * md + md * out_h);
  return c;
}

CaptionFigures measure_caption(const BenchSetup& b) {
  log("open " + b.vlm_manifest.string());
  // Without the image-feature cache: every run encodes the image again (with it, runs
  // after the first would take the features from the cache and time no vision at all).
  qhx::PipelineOptions no_image_cache = b.options;
  no_image_cache.image_cache_mb = 0;
  qhx::Pipeline p = qhx::Pipeline::open(b.vlm_manifest, no_image_cache);
  CaptionFigures f;
  f.load_ms = p.load_ms();
  warm_up(p);
  for (int r = 0; r < b.runs; ++r) {
    qhx::GenerationRequest req;
    req.prompt = "Describe this image.";
    req.images = {b.image};
    req.resize = "fixed";
    req.max_new_tokens = 1;
    req.sampling = greedy();
    const auto res = p.generate(req);
    if (res.timings.image_cache_hits != 0 || res.timings.image_tokens == 0)
      throw std::runtime_error("qhx_bench: run " + std::to_string(r + 1) + " did not encode the image");
    f.vision_ms.push_back(res.timings.vision_ms);
    f.ttft_ms.push_back(res.timings.ttft_ms);
    f.image_tokens = res.timings.image_tokens;
    log("run " + std::to_string(r + 1) + ": vision " + std::to_string(res.timings.vision_ms) + " ms, ttft " +
        std::to_string(res.timings.ttft_ms) + " ms (" + std::to_string(res.prompt_tokens.size()) + " prompt tokens)");
  }
  return f;
}

std::vector<double> measure_prefill(const BenchSetup& b, std::int64_t tokens) {
  log("open " + b.text_manifest.string());
  qhx::Pipeline p = qhx::Pipeline::open(b.text_manifest, b.options);
  warm_up(p);
  const std::string prompt = prompt_of(p.tokenizer(), tokens);
  std::vector<double> ms;
  for (int r = 0; r < b.runs; ++r) {
    qhx::GenerationRequest req;
    req.prompt = prompt;
    req.raw = true;
    req.max_new_tokens = 1;
    req.sampling = greedy();
    const auto res = p.generate(req);
    if (static_cast<std::int64_t>(res.prompt_tokens.size()) != tokens)
      qhx::fail("prefill prompt has ", res.prompt_tokens.size(), " tokens, not ", tokens);
    ms.push_back(res.timings.prefill_ms);
    log("run " + std::to_string(r + 1) + ": prefill " + std::to_string(tokens) + " tokens " +
        std::to_string(res.timings.prefill_ms) + " ms");
  }
  return ms;
}

DecodeFigures measure_decode(const BenchSetup& b, const ModelCost& cost) {
  qhx::Pipeline p = open_long_context(b, 2048);
  warm_up(p);
  const std::int32_t forced = p.tokenizer().encode(" word").at(0);
  DecodeFigures f;
  for (const std::int64_t ctx_len : {std::int64_t{512}, std::int64_t{1024}}) {
    const std::string prompt = prompt_of(p.tokenizer(), ctx_len);
    for (int r = 0; r < b.runs; ++r) {
      const bool at512 = ctx_len == 512;  // only decode at 512 is compared with the probes
      const auto res = probed_decode(b, p, prompt, forced, at512);
      (at512 ? f.at512 : f.at1024).push_back(res.decode_ms);
      if (at512 && res.stable())
        f.at512_adjacent.push_back(cost.bytes_per_token / (res.decode_ms / 1000.0) / (res.bw() * 1e9));
      log("run " + std::to_string(r + 1) + ": context " + std::to_string(ctx_len) + ", prefill " +
          std::to_string(res.prefill_ms) + " ms, decode " + std::to_string(res.decode_ms) + " ms/token" +
          (at512 ? "; " + probes_text(res) : std::string()));
    }
  }
  f.huge_pages = huge_mapped_mb();  // while the decoder's weights are open and streamed
  f.verify = measure_verification(b, p, forced);
  return f;
}

json measure_long_context(const BenchSetup& b, const ModelCost& cost, std::int64_t context, const std::string& kv) {
  // Room for the session's two turns: the prompt, the template's tokens and the steps.
  qhx::Pipeline p = open_long_context(b, context + b.decode_steps + 64, kv);
  warm_up(p);
  const std::int32_t forced = p.tokenizer().encode(" word").at(0);
  const auto run_at = [&](int r, std::int64_t ctx_len, const std::string& prompt) {
    const auto res = probed_decode(b, p, prompt, forced, /*probe=*/true);
    log("run " + std::to_string(r + 1) + ": kv " + kv + ", context " + std::to_string(ctx_len) + ", prefill " +
        std::to_string(res.prefill_ms) + " ms, decode " + std::to_string(res.decode_ms) + " ms/token; " +
        probes_text(res));
    return res;
  };
  const std::string prompt_long = prompt_of(p.tokenizer(), context);
  const std::string prompt_short = prompt_of(p.tokenizer(), 512);
  std::vector<double> pre_ms, dec_long, dec_short, ratios;
  // A step at context N reads every weight once and the cache's rows of every layer, key and value.
  const double row_bytes = kv == "i8" ? cost.head_dim + 4 : 2 * cost.head_dim;
  const double kv_bytes = cost.layers * 2 * cost.kv_heads * static_cast<double>(context) * row_bytes;
  std::vector<double> adjacent, bw_stable;  // per stable run: decode at N's fraction of its probes, their mean
  // Alternating pairs: the host's bandwidth drifts from minute to minute, so each run's two
  // contexts are measured back to back and their ratio taken per pair.
  for (int r = 0; r < b.runs; ++r) {
    const auto at_long = run_at(r, context, prompt_long);
    const auto at_short = run_at(r, 512, prompt_short);
    pre_ms.push_back(at_long.prefill_ms);
    dec_long.push_back(at_long.decode_ms);
    dec_short.push_back(at_short.decode_ms);
    ratios.push_back(at_short.decode_ms / at_long.decode_ms);
    if (at_long.stable()) {
      adjacent.push_back((cost.bytes_per_token + kv_bytes) / (at_long.decode_ms / 1000.0) / (at_long.bw() * 1e9));
      bw_stable.push_back(at_long.bw());
    }
  }
  return {{"kv_cache", kv},
          {"context", context},
          {"prefill_ms", median(pre_ms)},
          {"prefill_tok_s", static_cast<double>(context) / (median(pre_ms) / 1000.0)},
          {"decode_ms_per_token", median(dec_long)},
          {"decode_ms_per_token_512", median(dec_short)},
          {"speed_vs_512", median(ratios)},  // the median of the pairs' ratios
          {"kv_bytes_per_token", kv_bytes},
          {"bw_fraction", nullptr},
          {"bw_fraction_adjacent", adjacent.empty() ? json(nullptr) : json(median(adjacent))},
          {"read_gbs_adjacent", bw_stable.empty() ? json(nullptr) : json(median(bw_stable))},
          {"stable_runs", adjacent.size()}};
}

}  // namespace qhx_bench
