// bench_session — what a session saves on a follow-up turn, through the public API only.
//
//   bench_session --bundle DIR [--image FILE] [--runs N] [--answer-tokens N] [--threads N] [--json]
//
// Per run, in a pipeline with the image-feature cache off (so turn 1 always encodes):
//   turn 1   [image, "Describe this image."]: TTFT, tokens prefilled, vision ms
//   turn 2   "What is in the top left corner?" about the same image, in the same session:
//            TTFT and tokens prefilled (only the new turn's, the rest comes from the KV cache)
// Then, in a pipeline with the cache on: the same image in a *new* session, after one session
// encoded it: vision ms (0 on a hit), image-cache hits, TTFT.
// Figures are medians over the runs; turn2/turn1 is the ratio of the medians, taken in one
// process minutes apart at most, so it holds on a host whose bandwidth moves.
#include "cli/cli.hpp"
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <vector>

#include "qhexrt/error.hpp"
#include "qhexrt/session.hpp"

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

qhx::GenerationOptions greedy(std::int64_t n) {
  qhx::GenerationOptions o;
  o.max_new_tokens = n;
  qhx::SamplingParams s;
  s.greedy = true;
  o.sampling = s;
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  qhx_cli::App app{"QHexRT session benchmark: follow-up turn TTFT vs the first turn's, and image-cache hits"};
  std::string bundle, image = QHX_SAMPLE_IMAGE;
  int runs = 3, threads = 0;
  std::int64_t answer = 16;
  bool as_json = false;
  app.add_option("--bundle", bundle, "a bundle folder (its VLM manifest is used) or a VLM manifest")->required();
  app.add_option("--image", image, "the image of the conversation");
  app.add_option("--runs", runs, "runs (median)")->check(qhx_cli::PositiveNumber);
  app.add_option("--answer-tokens", answer, "tokens generated per turn")->check(qhx_cli::PositiveNumber);
  app.add_option("--threads", threads, "CPU threads (0: one per core)")->check(qhx_cli::NonNegativeNumber);
  app.add_flag("--json", as_json, "one JSON object on stdout");
  QHX_CLI_PARSE(app, argc, argv);
  try {
    std::string warning;
    const int used = qhx::set_threads(threads, &warning);
    if (!warning.empty()) std::fprintf(stderr, "bench_session: warning: %s\n", warning.c_str());
    qhx::PipelineOptions off;
    off.image_cache_mb = 0;
    qhx::Pipeline pipe = qhx::Pipeline::open(bundle, off, /*want_images=*/true);
    const qhx::Message turn1{"user",
                             {qhx::ContentPart::image_part(qhx::ImageSource::file(image)),
                              qhx::ContentPart::text_part("Describe this image.")}};
    const qhx::Message turn2 = qhx::Message::text("user", "What is in the top left corner?");
    std::vector<double> ttft1, ttft2, vision1, prefilled1, prefilled2, cached2, prompt2;
    for (int r = 0; r < runs + 1; ++r) {  // the first run warms the caches and is not counted
      qhx::Session s(pipe);
      const auto a = s.send(turn1, greedy(answer));
      const auto b = s.send(turn2, greedy(answer));
      std::fprintf(stderr,
                   "run %d: turn 1 ttft %.1f ms (%zu tokens prefilled, vision %.1f ms) | turn 2 ttft %.1f ms (%lld of "
                   "%zu tokens prefilled)\n",
                   r, a.timings.ttft_ms, a.prompt_tokens.size() - static_cast<std::size_t>(a.cached_tokens),
                   a.timings.vision_ms, b.timings.ttft_ms,
                   static_cast<long long>(b.prompt_tokens.size()) - static_cast<long long>(b.cached_tokens),
                   b.prompt_tokens.size());
      if (r == 0) continue;
      ttft1.push_back(a.timings.ttft_ms);
      vision1.push_back(a.timings.vision_ms);
      prefilled1.push_back(static_cast<double>(a.prompt_tokens.size()) - static_cast<double>(a.cached_tokens));
      ttft2.push_back(b.timings.ttft_ms);
      prefilled2.push_back(static_cast<double>(b.prompt_tokens.size()) - static_cast<double>(b.cached_tokens));
      cached2.push_back(static_cast<double>(b.cached_tokens));
      prompt2.push_back(static_cast<double>(b.prompt_tokens.size()));
    }

    // The image cache across sessions: one session encodes, a new one finds the features.
    qhx::Pipeline cached_pipe = qhx::Pipeline::open(bundle, {}, /*want_images=*/true);
    qhx::Session first(cached_pipe);
    const auto enc = first.send(turn1, greedy(1));
    std::vector<double> hit_vision, hit_ttft;
    std::int64_t hits = 0;
    for (int r = 0; r < runs; ++r) {
      qhx::Session again(cached_pipe);
      const auto h = again.send(turn1, greedy(1));
      hit_vision.push_back(h.timings.vision_ms);
      hit_ttft.push_back(h.timings.ttft_ms);
      hits += h.timings.image_cache_hits;
    }
    const double t1 = median(ttft1), t2 = median(ttft2);
    const nlohmann::json out = {{"threads", used},
                                {"runs", runs},
                                {"turn1_ttft_ms", t1},
                                {"turn1_vision_ms", median(vision1)},
                                {"turn1_prefilled_tokens", median(prefilled1)},
                                {"turn2_ttft_ms", t2},
                                {"turn2_prefilled_tokens", median(prefilled2)},
                                {"turn2_cached_tokens", median(cached2)},
                                {"turn2_prompt_tokens", median(prompt2)},
                                {"turn2_over_turn1", t2 / t1},
                                {"new_session_same_image",
                                 {{"first_vision_ms", enc.timings.vision_ms},
                                  {"vision_ms", median(hit_vision)},
                                  {"image_cache_hits", hits},
                                  {"ttft_ms", median(hit_ttft)},
                                  {"images_encoded", enc.timings.images_encoded}}}};
    if (as_json) {
      std::cout << out.dump() << std::endl;
    } else {
      std::printf("turn 1: TTFT %.1f ms, %.0f tokens prefilled (vision %.1f ms)\n", t1, median(prefilled1),
                  median(vision1));
      std::printf("turn 2: TTFT %.1f ms, %.0f tokens prefilled, %.0f of %.0f from the KV cache\n", t2,
                  median(prefilled2), median(cached2), median(prompt2));
      std::printf("turn 2 / turn 1 TTFT: %.3f (goal <= 0.10)\n", t2 / t1);
      std::printf(
          "same image, new session: vision %.1f ms (first encode %.1f ms), %lld image-cache hits in %d runs, TTFT %.1f "
          "ms\n",
          median(hit_vision), enc.timings.vision_ms, static_cast<long long>(hits), runs, median(hit_ttft));
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_session: error: %s\n", e.what());
    return 1;
  }
}
