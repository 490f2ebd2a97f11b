#include "common/file_digest.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>
#include <new>
#include <vector>

#include "qhexrt/error.hpp"

namespace qhx {

DigestStream::DigestStream() : state_(XXH3_createState()) {
  if (state_ == nullptr) throw std::bad_alloc();
  XXH3_128bits_reset(state_);
}

DigestStream::~DigestStream() { XXH3_freeState(state_); }

void DigestStream::update(const void* data, std::size_t n) {
  XXH3_128bits_update(state_, data, n);
  bytes_ += n;
}

FileDigest DigestStream::digest() const {
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, XXH3_128bits_digest(state_));
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (const unsigned char b : c.digest) {
    hex += kHex[b >> 4];
    hex += kHex[b & 15];
  }
  return {bytes_, hex};
}

FileDigest digest_file(const std::filesystem::path& path, bool sync) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot read ", path.string(), ": ", std::strerror(errno));
  DigestStream d;
  std::vector<char> buf(std::size_t{1} << 20);
  for (;;) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      fail("cannot read ", path.string(), ": ", std::strerror(err));
    }
    d.update(buf.data(), static_cast<std::size_t>(n));
  }
  if (sync && ::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    fail("cannot flush ", path.string(), " to disk: ", std::strerror(err));
  }
  ::close(fd);
  return d.digest();
}

}  // namespace qhx
