// Shared helpers for the C++ tests: where generated data lives, temp files.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "qhexrt/tokenizer.hpp"

namespace qhx::test {

// A location: the environment variable if set, else the default compiled in by tests/CMakeLists.txt.
inline std::filesystem::path location(const char* env, const char* fallback) {
  const char* p = std::getenv(env);
  return p != nullptr && *p != '\0' ? p : fallback;
}
inline std::filesystem::path bin_dir() { return location("QHX_BIN", QHX_DEFAULT_BIN); }
inline std::filesystem::path cache_dir() { return location("QHX_CACHE", QHX_DEFAULT_CACHE); }

// The real Qwen3 tokenizer, fetched by scripts/setup.sh. Its absence is a
// failure, not a skip: every test run must exercise the real data.
inline std::filesystem::path tokenizer_json_path() {
  std::filesystem::path path = location("QHX_TOKENIZER_JSON", QHX_DEFAULT_TOKENIZER_JSON);
  if (path.empty() || !std::filesystem::exists(path))
    ADD_FAILURE() << "QHX_TOKENIZER_JSON (" << path << ") not found: run scripts/setup.sh";
  return path;
}

// Loaded once per test binary (11 MB of JSON).
inline const Tokenizer& qwen_tokenizer() {
  static const Tokenizer tok = Tokenizer::load(tokenizer_json_path());
  return tok;
}

// A fresh directory under the system temp dir, removed at destruction.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() / ("qhx_test_" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path write(const std::string& name, const std::string& bytes) const {
    const auto p = path_ / name;
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }

 private:
  std::filesystem::path path_;
};

inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// Asserts that `fn` throws qhx::Error whose message contains every fragment.
template <typename Fn>
void expect_error(Fn&& fn, const std::vector<std::string>& fragments) {
  try {
    fn();
    ADD_FAILURE() << "expected qhx::Error";
  } catch (const std::exception& e) {
    const std::string msg = e.what();
    for (const auto& f : fragments) EXPECT_NE(msg.find(f), std::string::npos) << "message: " << msg << "\nlacks: " << f;
  }
}
template <typename Fn>
void expect_error(Fn&& fn, std::initializer_list<std::string> fragments) {
  expect_error(std::forward<Fn>(fn), std::vector<std::string>(fragments));
}

}  // namespace qhx::test
