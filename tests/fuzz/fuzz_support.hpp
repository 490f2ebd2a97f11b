// What the fuzz targets share: the rule that bad input may only raise qhx::Error,
// a scratch file for the parsers that read from a path, and where data lives.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>

#include "qhexrt/error.hpp"

namespace qhx::fuzz {

inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// A parser's contract is "qhx::Error naming the problem" for any input: anything
// else that escapes (a JSON library's type_error, std::out_of_range, bad_alloc
// from an unchecked size) is a bug, so it is left to reach libFuzzer, which
// reports it as a crash with the input.
template <typename Fn>
void expect_only_qhx_errors(Fn&& fn) {
  try {
    fn();
  } catch (const qhx::Error&) {}
}

// Stops the run with a message, as a failed invariant must (libFuzzer saves the input).
[[noreturn]] inline void invariant_failed(const char* what) {
  std::fprintf(stderr, "fuzz invariant failed: %s\n", what);
  std::abort();
}
#define QHX_FUZZ_CHECK(cond)                           \
  do {                                                 \
    if (!(cond)) ::qhx::fuzz::invariant_failed(#cond); \
  } while (0)

// One file per process (libFuzzer's -fork and -jobs run several), rewritten for
// each input, for the parsers whose entry point takes a path and maps the file.
class ScratchFile {
 public:
  explicit ScratchFile(const std::string& suffix) {
    const char* tmp = std::getenv("TMPDIR");
    const std::filesystem::path dir =
        std::filesystem::exists("/dev/shm") ? "/dev/shm" : (tmp != nullptr ? tmp : "/tmp");
    path_ = dir / ("qhx_fuzz_" + std::to_string(getpid()) + suffix);
  }
  ~ScratchFile() {
    std::error_code ec;
    std::filesystem::remove(path_, ec);
  }
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;

  const std::filesystem::path& write(std::span<const std::uint8_t> bytes) const {
    const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) invariant_failed("cannot create the scratch file");
    std::size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
      if (n <= 0) invariant_failed("cannot write the scratch file");
      done += static_cast<std::size_t>(n);
    }
    ::close(fd);
    return path_;
  }

 private:
  std::filesystem::path path_;
};

// Generated data (the real tokenizer, the tiny checkpoint): the environment's
// QHX_CACHE, else the one this build was configured with.
inline std::filesystem::path cache_dir() {
  const char* p = std::getenv("QHX_CACHE");
  return p != nullptr && *p != '\0' ? p : QHX_FUZZ_DEFAULT_CACHE;
}

inline std::filesystem::path tokenizer_json() {
  const char* p = std::getenv("QHX_TOKENIZER_JSON");
  return p != nullptr && *p != '\0' ? std::filesystem::path(p) : cache_dir() / "tokenizer" / "tokenizer.json";
}

}  // namespace qhx::fuzz
