// bench_tokenizer — load time and single-threaded encode throughput of qhx::Tokenizer.
//
//   bench_tokenizer --tokenizer tokenizer.json --corpus corpus.jsonl [--repeat N] [--loads L] [--json]
//
// The corpus is JSON Lines, one JSON string per line (tests/python/tokenizer_corpus.py
// writes one). Load time is the best of L loads; encode time is the best of N passes
// over the whole corpus. MB/s counts 10^6 UTF-8 bytes of input text per second.
// With --json, prints one JSON object:
//   {"load_ms": .., "encode_mb_s": .., "encode_s": .., "bytes": .., "tokens": .., "strings": .., ...}
// bench/tokenizer_vs_hf.py runs this and compares with Hugging Face `tokenizers`.
#include "cli/cli.hpp"
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "qhexrt/error.hpp"
#include "qhexrt/tokenizer.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// One std::string per line; each line must be a JSON string.
std::vector<std::string> read_corpus(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) qhx::fail(path, ": cannot open corpus file");
  std::vector<std::string> out;
  std::string line;
  std::size_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      qhx::fail(path, ": line ", line_no, ": ", e.what());
    }
    if (!j.is_string()) qhx::fail(path, ": line ", line_no, ": expected a JSON string, got ", j.type_name());
    out.push_back(j.get<std::string>());
  }
  if (in.bad()) qhx::fail(path, ": read error");
  return out;
}

struct EncodeResult {
  double best_s = std::numeric_limits<double>::infinity();
  std::uint64_t tokens = 0;
  std::uint64_t checksum = 0;  // keeps the work observable
};

EncodeResult bench_encode(const qhx::Tokenizer& tok, const std::vector<std::string>& corpus, int repeat) {
  EncodeResult r;
  for (int rep = 0; rep < repeat; ++rep) {
    std::uint64_t tokens = 0;
    std::uint64_t checksum = 0;
    const auto t0 = Clock::now();
    for (const auto& s : corpus) {
      const auto ids = tok.encode(s);
      tokens += ids.size();
      for (const auto id : ids) checksum = checksum * 31U + static_cast<std::uint32_t>(id);
    }
    r.best_s = std::min(r.best_s, seconds_since(t0));
    r.tokens = tokens;
    r.checksum = checksum;
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  qhx_cli::App app{"Benchmark qhx::Tokenizer: load time and single-threaded encode throughput"};
  std::string tokenizer_path;
  std::string corpus_path;
  int repeat = 5;
  int loads = 3;
  bool as_json = false;
  app.add_option("--tokenizer", tokenizer_path, "path to tokenizer.json")->required();
  app.add_option("--corpus", corpus_path, "JSON Lines file, one JSON string per line")->required();
  app.add_option("--repeat", repeat, "encode passes over the corpus (best is reported)")
      ->check(qhx_cli::PositiveNumber);
  app.add_option("--loads", loads, "tokenizer loads (best is reported)")->check(qhx_cli::PositiveNumber);
  app.add_flag("--json", as_json, "print one JSON object");
  QHX_CLI_PARSE(app, argc, argv);

  try {
    double best_load_s = std::numeric_limits<double>::infinity();
    std::optional<qhx::Tokenizer> tok;
    for (int k = 0; k < loads; ++k) {
      tok.reset();
      const auto t0 = Clock::now();
      tok.emplace(qhx::Tokenizer::load(tokenizer_path));
      best_load_s = std::min(best_load_s, seconds_since(t0));
    }

    const auto corpus = read_corpus(corpus_path);
    std::uint64_t bytes = 0;
    for (const auto& s : corpus) bytes += s.size();

    const EncodeResult enc = bench_encode(*tok, corpus, repeat);
    const double mb_s = enc.best_s > 0 ? static_cast<double>(bytes) / enc.best_s / 1e6 : 0.0;

    if (as_json) {
      const nlohmann::json out = {
          {"load_ms", best_load_s * 1e3}, {"encode_mb_s", mb_s},      {"encode_s", enc.best_s}, {"bytes", bytes},
          {"tokens", enc.tokens},         {"strings", corpus.size()}, {"repeat", repeat},       {"loads", loads},
          {"checksum", enc.checksum},
      };
      std::cout << out.dump() << '\n';
    } else {
      std::printf("tokenizer: %s\n", tokenizer_path.c_str());
      std::printf("load:      %.1f ms (best of %d)\n", best_load_s * 1e3, loads);
      std::printf("corpus:    %zu strings, %llu bytes\n", corpus.size(), static_cast<unsigned long long>(bytes));
      std::printf("encode:    %.4f s (best of %d) -> %.2f MB/s, %llu tokens\n", enc.best_s, repeat, mb_s,
                  static_cast<unsigned long long>(enc.tokens));
    }
    std::cout.flush();
    return std::cout ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "bench_tokenizer: error: " << e.what() << "\n";
    return 1;
  }
}
