// XXH3-128 of a file's bytes and their count: what a bundle's checksums.json records for
// each file (docs/bundle.md, "Checksums"). A fast non-cryptographic hash: it catches a
// truncated, corrupt or half-copied file, not a deliberate forgery.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

struct XXH3_state_s;

namespace qhx {

struct FileDigest {
  std::uint64_t bytes = 0;
  std::string xxh3_128;  // 32 lowercase hex digits: XXH128's canonical (big-endian) form
  bool operator==(const FileDigest&) const = default;
};

// Hashes bytes as they go by, so a writer knows its file's digest without reading it back.
class DigestStream {
 public:
  DigestStream();
  ~DigestStream();
  DigestStream(const DigestStream&) = delete;
  DigestStream& operator=(const DigestStream&) = delete;

  void update(const void* data, std::size_t n);
  FileDigest digest() const;

 private:
  XXH3_state_s* state_;
  std::uint64_t bytes_ = 0;
};

// Reads the file once. With `sync`, also flushes it to disk (a file another program wrote,
// before it is published). Throws qhx::Error naming the file and the OS reason.
FileDigest digest_file(const std::filesystem::path& path, bool sync = false);

}  // namespace qhx
