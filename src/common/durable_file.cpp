#include "common/durable_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace qhx {

namespace {

[[noreturn]] void io_fail(const char* what, const std::filesystem::path& p, int err) {
  throw IoError(cat(what, " ", p.string(), ": ", std::strerror(err)));
}

// Tensors arrive a row (a few KiB) at a time; one write() per MiB.
constexpr std::size_t kBuffer = std::size_t{1} << 20;

}  // namespace

DurableFile::DurableFile(std::filesystem::path path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) io_fail("cannot create", path_, errno);
  buf_.resize(kBuffer);
}

DurableFile::~DurableFile() {
  if (fd_ >= 0) ::close(fd_);
}

void DurableFile::write(const void* data, std::size_t n) {
  if (fd_ < 0) throw IoError(cat("cannot write ", path_.string(), ": already closed"));
  if (n == 0) return;  // an empty tensor's data() may be null, which memcpy must not see
  digest_.update(data, n);
  const char* p = static_cast<const char*>(data);
  if (used_ + n > buf_.size()) {
    write_out(buf_.data(), used_);
    used_ = 0;
    if (n >= buf_.size()) return write_out(p, n);
  }
  std::memcpy(buf_.data() + used_, p, n);
  used_ += n;
}

// write() may take fewer bytes than asked (a signal, the last bytes below a file size
// limit); the next call then says why it takes none.
void DurableFile::write_out(const char* p, std::size_t n) {
  while (n > 0) {
    const ssize_t k = ::write(fd_, p, n);
    if (k < 0) {
      if (errno == EINTR) continue;
      io_fail("cannot write", path_, errno);
    }
    if (k == 0) io_fail("cannot write", path_, ENOSPC);
    p += k;
    n -= static_cast<std::size_t>(k);
  }
}

FileDigest DurableFile::close() {
  write_out(buf_.data(), used_);
  used_ = 0;
  // Delayed allocation: a full disk may first show here, or at close().
  if (::fsync(fd_) != 0) io_fail("cannot flush to disk", path_, errno);
  // The written pages leave the page cache (they are on disk now): written, they
  // are cached in small folios, and read back through a mapping advised for
  // huge pages they come in 2 MiB folios that MappedFile maps with 2 MiB
  // page-table entries (mapped_file.cpp, map_aligned). Advisory.
  ::posix_fadvise(fd_, 0, 0, POSIX_FADV_DONTNEED);
  if (::close(std::exchange(fd_, -1)) != 0) io_fail("cannot close", path_, errno);
  return digest_.digest();
}

FileDigest write_file_durably(const std::filesystem::path& path, std::string_view bytes) {
  DurableFile f(path);
  f.write(bytes.data(), bytes.size());
  return f.close();
}

FileDigest copy_file_durably(const std::filesystem::path& from, const std::filesystem::path& to) {
  struct Fd {
    int fd;
    ~Fd() {
      if (fd >= 0) ::close(fd);
    }
  } in{::open(from.c_str(), O_RDONLY | O_CLOEXEC)};
  if (in.fd < 0) io_fail("cannot read", from, errno);
  DurableFile out(to);
  std::vector<char> buf(kBuffer);
  for (;;) {
    const ssize_t n = ::read(in.fd, buf.data(), buf.size());
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      io_fail("cannot read", from, errno);
    }
    out.write(buf.data(), static_cast<std::size_t>(n));
  }
  return out.close();
}

void sync_dir(const std::filesystem::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) io_fail("cannot open folder", dir, errno);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) io_fail("cannot flush to disk the folder", dir, err);
}

}  // namespace qhx
