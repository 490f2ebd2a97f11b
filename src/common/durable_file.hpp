// Files written for a bundle: every failure is an error naming the file and the OS reason
// ("No space left on device", "File too large" under `ulimit -f`), the bytes are on disk
// when close() returns (fsync: a power cut after publishing must not leave holes), and the
// XXH3-128 of what was written comes out of close() without reading the file back.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string_view>
#include <vector>

#include "common/file_digest.hpp"
#include "qhexrt/error.hpp"

namespace qhx {

// A failure of the file system itself (as opposed to bad data): callers that add context
// to errors pass it on as it is, since it already names the file.
class IoError : public Error {
 public:
  using Error::Error;
};

class DurableFile {
 public:
  // Creates `path` (or truncates it).
  explicit DurableFile(std::filesystem::path path);
  // Without close() (an error on the way), the descriptor is closed and the file left as it
  // is: the caller removes it, or the folder it stands in.
  ~DurableFile();
  DurableFile(const DurableFile&) = delete;
  DurableFile& operator=(const DurableFile&) = delete;

  void write(const void* data, std::size_t n);
  // Flushes, syncs and closes; the digest of every byte written.
  FileDigest close();
  const std::filesystem::path& path() const { return path_; }

 private:
  void write_out(const char* p, std::size_t n);
  std::filesystem::path path_;
  int fd_ = -1;
  std::vector<char> buf_;
  std::size_t used_ = 0;
  DigestStream digest_;
};

FileDigest write_file_durably(const std::filesystem::path& path, std::string_view bytes);
FileDigest copy_file_durably(const std::filesystem::path& from, const std::filesystem::path& to);
// Makes a folder's entries (files created, renamed or removed in it) durable.
void sync_dir(const std::filesystem::path& dir);

}  // namespace qhx
