// The mapped-file guard (src/common/mapping_guard.hpp): a file truncated or
// rewritten while mapped reads zeros and is reported naming the file, a fault
// nowhere near our mappings still ends the process, and a destroyed mapping is
// forgotten.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/limits.hpp"
#include "common/mapped_file.hpp"
#include "common/mapping_guard.hpp"
#include "qhexrt/error.hpp"
#include "test_support.hpp"

namespace {

using qhx::FileChangedError;
using qhx::MappedFile;
using qhx::test::expect_error;
using qhx::test::TempDir;
namespace fs = std::filesystem;

const std::size_t kPage = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));

// `pages` pages of 0xAB.
fs::path make_file(const TempDir& dir, const std::string& name, std::size_t pages) {
  return dir.write(name, std::string(pages * kPage, '\xAB'));
}

// What another process does: shrinks the file through its own descriptor.
void truncate_to(const fs::path& p, std::size_t bytes) {
  ASSERT_EQ(::truncate(p.c_str(), static_cast<off_t>(bytes)), 0);
}

// A read the compiler must perform (the page is gone: this is where SIGBUS comes from).
unsigned char read_byte(const std::byte* p) {
  return static_cast<unsigned char>(*static_cast<const volatile std::byte*>(p));
}

// Over 2 MiB and not a whole number of them, with every byte telling its position,
// so a slice read or mapped to the wrong place, or a short last slice, shows.
std::string position_coded() {
  std::string bytes(5 * (std::size_t{1} << 20) + 123, '\0');
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>((i * 2654435761u) >> 13);
  return bytes;
}

TEST(MappedFileInMemory, ReadsTheWholeFileInto2MiBAlignedMemory) {
  TempDir dir;
  const std::string bytes = position_coded();
  const fs::path p = dir.write("weights.bin", bytes);
  const MappedFile f(p, /*in_memory=*/true);
  ASSERT_EQ(f.size(), bytes.size());
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(f.data()) % (std::uintptr_t{2} << 20), 0u);
  EXPECT_EQ(std::memcmp(f.data(), bytes.data(), bytes.size()), 0);
  // A copy: the file changing afterwards changes nothing, and nothing is lost.
  truncate_to(p, kPage);
  EXPECT_EQ(read_byte(f.data() + bytes.size() - 1), static_cast<unsigned char>(bytes.back()));
  EXPECT_FALSE(f.lost(/*stat_file=*/true));
  EXPECT_NO_THROW(f.check(true));
  MappedFile moved = MappedFile(p, true);  // the truncated file, read again: its new size
  EXPECT_EQ(moved.size(), kPage);
  const MappedFile empty(dir.write("empty.bin", ""), true);
  EXPECT_EQ(empty.size(), 0u);
  expect_error([&] { (void)MappedFile(dir.path() / "missing.bin", true); }, {"missing.bin", "cannot open"});
}

TEST(MappedFileGuard, TruncatedFileReadsZerosAndNamesTheFile) {
  TempDir dir;
  const fs::path p = make_file(dir, "weights.bin", 4);
  const MappedFile f(p);
  EXPECT_EQ(read_byte(f.data() + 3 * kPage), 0xAB);
  EXPECT_FALSE(f.lost());
  truncate_to(p, kPage);
  EXPECT_EQ(read_byte(f.data()), 0xAB);           // before the new end: still the file
  EXPECT_EQ(read_byte(f.data() + 2 * kPage), 0);  // past it: zeros, not SIGBUS
  EXPECT_EQ(read_byte(f.data() + 3 * kPage + 7), 0);
  EXPECT_TRUE(f.lost());
  expect_error([&] { f.check(); },
               {p.string(), "truncated or changed while mapped", "a read fell past its end",
                std::to_string(4 * kPage) + " bytes at open", std::to_string(kPage) + " bytes now"});
  try {
    f.check();
  } catch (const FileChangedError&) {  // the type callers (qhx_serve) tell apart
    SUCCEED();
  }
}

// Files of 2 MiB and more are mapped at 2 MiB-aligned addresses (advised for huge
// pages, which the kernel may or may not use): the bytes are the file's, the guard
// works as for any mapping, and unmapping returns the whole range.
TEST(MappedFileGuard, LargeFilesMapAt2MiBAlignedAddresses) {
  TempDir dir;
  const std::string bytes = position_coded();
  const fs::path p = dir.write("weights.bin", bytes);
  std::optional<MappedFile> f(std::in_place, p);
  ASSERT_EQ(f->size(), bytes.size());
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(f->data()) % (std::uintptr_t{2} << 20), 0u);
  EXPECT_EQ(std::memcmp(f->data(), bytes.data(), bytes.size()), 0);
  truncate_to(p, 3 * (std::size_t{1} << 20));
  EXPECT_EQ(read_byte(f->data() + 100), static_cast<unsigned char>(bytes[100]));
  EXPECT_EQ(read_byte(f->data() + bytes.size() - 1), 0);  // past the new end: zeros, not SIGBUS
  EXPECT_TRUE(f->lost());
  const std::byte* start = f->data();
  f.reset();
  // Nothing of the reservation is left mapped: the range is free again.
  std::vector<unsigned char> resident((bytes.size() + kPage - 1) / kPage);
  EXPECT_EQ(::mincore(const_cast<std::byte*>(start), bytes.size(), resident.data()), -1);
  EXPECT_EQ(errno, ENOMEM);
}

TEST(MappedFileGuard, StatCheckSeesATruncationBeforeAnyRead) {
  TempDir dir;
  const fs::path p = make_file(dir, "a.bin", 2);
  const MappedFile f(p);
  truncate_to(p, kPage);
  EXPECT_FALSE(f.lost());  // nothing read past the end yet
  EXPECT_TRUE(f.lost(/*stat_file=*/true));
  expect_error([&] { f.check(); }, {p.string(), "size or modification time"});
}

TEST(MappedFileGuard, StatCheckSeesARewriteThatKeptTheSize) {
  TempDir dir;
  const fs::path p = make_file(dir, "a.bin", 2);
  const MappedFile f(p);
  {
    const int fd = ::open(p.c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::pwrite(fd, "x", 1, 0), 1);
    const timespec later[2] = {{0, UTIME_OMIT}, {::time(nullptr) + 100, 0}};  // mtime surely differs
    ASSERT_EQ(::futimens(fd, later), 0);
    ::close(fd);
  }
  EXPECT_TRUE(f.lost(/*stat_file=*/true));
}

TEST(MappedFileGuard, ReplacingThePathIsHarmless) {
  // The usual way to update a file (write a new one, rename it over the old):
  // the mapping keeps the old file's pages, so nothing is lost.
  TempDir dir;
  const fs::path p = make_file(dir, "a.bin", 2);
  const MappedFile f(p);
  const fs::path fresh = make_file(dir, "fresh.bin", 1);
  fs::rename(fresh, p);
  EXPECT_EQ(read_byte(f.data() + kPage + 1), 0xAB);
  EXPECT_FALSE(f.lost(/*stat_file=*/true));
}

TEST(MappedFileGuard, GroupsCheckOnlyTheirOwnFiles) {
  TempDir dir;
  const fs::path pa = make_file(dir, "a.bin", 2), pb = make_file(dir, "b.bin", 2);
  const qhx::MappingGroup ga = qhx::new_mapping_group(), gb = qhx::new_mapping_group();
  std::optional<MappedFile> a, b;
  {
    const qhx::MappingGroupScope scope(ga);
    a.emplace(pa);
  }
  {
    const qhx::MappingGroupScope scope(gb);
    b.emplace(pb);
  }
  truncate_to(pa, 0);
  EXPECT_EQ(read_byte(a->data() + kPage), 0);
  expect_error([&] { qhx::check_mapped_files(ga); }, {pa.string(), "reopen the model"});
  EXPECT_NO_THROW(qhx::check_mapped_files(gb, /*stat_files=*/true));
  expect_error([&] { qhx::check_mapped_files(qhx::kEveryMappingGroup); }, {pa.string()});
  a.reset();  // destroyed: forgotten with its loss
  EXPECT_NO_THROW(qhx::check_mapped_files(qhx::kEveryMappingGroup, /*stat_files=*/true));
}

TEST(MappedFileGuard, ManyThreadsFaultingAtOnce) {
  // The CPU backend's workers read one matrix from several threads.
  TempDir dir;
  const fs::path p = make_file(dir, "a.bin", 64);
  const MappedFile f(p);
  truncate_to(p, kPage);
  std::atomic<unsigned> sum{0};
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (std::size_t page = 1 + t; page < 64; page += 4) sum += read_byte(f.data() + page * kPage);
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(sum.load(), 0u);
  EXPECT_TRUE(f.lost());
}

TEST(MappedFileGuard, MovedFileKeepsItsGuard) {
  TempDir dir;
  const fs::path p = make_file(dir, "a.bin", 2);
  MappedFile f(p);
  MappedFile g(std::move(f));
  truncate_to(p, 0);
  EXPECT_EQ(read_byte(g.data() + kPage), 0);
  EXPECT_TRUE(g.lost());
  EXPECT_FALSE(f.lost());  // NOLINT(bugprone-use-after-move): moved-from owns nothing
}

TEST(MappedFileGuard, RegistryLimitIsAnErrorNamingIt) {
  // Each MappedFile holds its descriptor: the soft limit (often 1024) must leave room
  // for kMappedFiles of them, so it is raised toward the hard limit, as a server would.
  rlimit nofile{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &nofile), 0);
  const rlim_t want = qhx::limits::kMappedFiles + 64;
  if (nofile.rlim_cur < want) {
    ASSERT_GE(nofile.rlim_max, want) << "the hard RLIMIT_NOFILE is below " << want;
    nofile.rlim_cur = want;
    ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &nofile), 0);
  }
  TempDir dir;
  const fs::path p = make_file(dir, "a.bin", 1);
  std::vector<MappedFile> files;
  files.reserve(qhx::limits::kMappedFiles + 1);
  std::string error;
  try {
    while (files.size() <= qhx::limits::kMappedFiles) files.emplace_back(p);
  } catch (const qhx::Error& e) {
    error = e.what();
  }
  EXPECT_LE(files.size(), qhx::limits::kMappedFiles);
  for (const std::string& f :
       {p.string(), std::string("limits::kMappedFiles"), std::to_string(qhx::limits::kMappedFiles)})
    EXPECT_NE(error.find(f), std::string::npos) << error;
  files.pop_back();
  EXPECT_NO_THROW(MappedFile again(p));
}

// --- faults that are not ours must still end the process ---

// GCC says __SANITIZE_ADDRESS__; clang 14 only answers __has_feature.
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define QHX_TEST_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(QHX_TEST_ASAN)
// AddressSanitizer's SIGBUS handler was installed first; ours chains to it,
// and it reports the fault and ends the process.
#define EXPECT_DIES_OF_SIGBUS(stmt) EXPECT_DEATH(stmt, "BUS")
#else
#define EXPECT_DIES_OF_SIGBUS(stmt) EXPECT_EXIT(stmt, ::testing::KilledBySignal(SIGBUS), "")
#endif

// A mapping the guard does not know of, of a file truncated under it, read past the end.
void fault_in_unregistered_mapping(const fs::path& p, void* at) {
  const int fd = ::open(p.c_str(), O_RDONLY);
  void* m = ::mmap(at, 2 * kPage, PROT_READ, MAP_PRIVATE | (at != nullptr ? MAP_FIXED_NOREPLACE : 0), fd, 0);
  if (m == MAP_FAILED) _exit(3);  // not a SIGBUS death: the test fails
  truncate_to(p, 0);
  (void)read_byte(static_cast<const std::byte*>(m) + kPage);
  _exit(0);  // survived: the test fails
}

TEST(MappedFileGuardDeathTest, FaultOutsideOurMappingsStillKills) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  TempDir dir;
  const fs::path ours = make_file(dir, "ours.bin", 2), other = make_file(dir, "other.bin", 2);
  const MappedFile f(ours);  // the handler is installed
  EXPECT_DIES_OF_SIGBUS(fault_in_unregistered_mapping(other, nullptr));
}

TEST(MappedFileGuardDeathTest, DestroyedMappingIsForgotten) {
  // A new mapping at the very address a destroyed MappedFile had must not be
  // taken for it.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  TempDir dir;
  const fs::path p = make_file(dir, "gone.bin", 2), other = make_file(dir, "other.bin", 2);
  void* at = nullptr;
  {
    const MappedFile f(p);
    at = const_cast<std::byte*>(f.data());
  }
  EXPECT_DIES_OF_SIGBUS(fault_in_unregistered_mapping(other, at));
}

TEST(MappedFileGuardDeathTest, SentSigbusStillKills) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  TempDir dir;
  const MappedFile f(make_file(dir, "a.bin", 1));
  EXPECT_DIES_OF_SIGBUS(::raise(SIGBUS));
}

}  // namespace
