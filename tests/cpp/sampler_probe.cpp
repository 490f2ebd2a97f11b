// Test-only: one sampling step for tests/python/test_sampler_vs_hf.py.
//
// stdin:  {"logits": [float...], "history": [int...], "params": {SamplingParams fields, all optional}}
// stdout: {"probs": [float...], "greedy": int}
//   probs  — Sampler::distribution() with the given params
//   greedy — the token the same params pick with greedy = true
// A qhx::Error (bad params, bad ids) goes to stderr with exit status 1.
#include <cstdint>
#include <iostream>
#include <vector>

#include <nlohmann/json.hpp>

#include "qhexrt/error.hpp"
#include "sampling/sampler.hpp"

namespace {

using Json = nlohmann::json;

qhx::SamplingParams parse_params(const Json& j) {
  qhx::SamplingParams p;
  p.greedy = j.value("greedy", p.greedy);
  p.temperature = j.value("temperature", p.temperature);
  p.top_k = j.value("top_k", p.top_k);
  p.top_p = j.value("top_p", p.top_p);
  p.min_p = j.value("min_p", p.min_p);
  p.repetition_penalty = j.value("repetition_penalty", p.repetition_penalty);
  p.presence_penalty = j.value("presence_penalty", p.presence_penalty);
  p.frequency_penalty = j.value("frequency_penalty", p.frequency_penalty);
  p.seed = j.value("seed", p.seed);
  return p;
}

Json run(const Json& in) {
  const auto logits = in.at("logits").get<std::vector<float>>();
  const auto history = in.value("history", std::vector<std::int32_t>{});
  qhx::SamplingParams params = parse_params(in.value("params", Json::object()));

  std::vector<float> work = logits;
  std::vector<float> probs;
  qhx::Sampler(params).distribution(work, history, probs);

  params.greedy = true;
  work = logits;
  const std::int32_t greedy = qhx::Sampler(params).sample(work, history);
  return Json{{"probs", probs}, {"greedy", greedy}};
}

}  // namespace

int main() {
  try {
    std::cout << run(Json::parse(std::cin)).dump() << '\n';
    return 0;
  } catch (const qhx::Error& e) {
    std::cerr << "sampler_probe: " << e.what() << '\n';
    return 1;
  } catch (const Json::exception& e) {
    std::cerr << "sampler_probe: bad input JSON: " << e.what() << '\n';
    return 2;
  }
}
