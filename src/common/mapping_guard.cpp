#include "common/mapping_guard.hpp"

#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>

#include "common/limits.hpp"
#include "qhexrt/error.hpp"

namespace qhx {
namespace {

enum Reason : int { kIntact = 0, kFaulted = 1, kStatChanged = 2 };

// What the signal handler reads: atomics in a fixed table, so it needs no
// lock (the faulting thread may hold any) and no allocation. A slot is live
// while begin != 0; end is rounded up to a page, as the mapping is.
struct Range {
  std::atomic<std::uintptr_t> begin{0};
  std::atomic<std::uintptr_t> end{0};
  std::atomic<int> lost{kIntact};
};
constinit std::array<Range, limits::kMappedFiles> g_ranges{};
// Live mappings marked lost: while it is 0 a check is one load.
constinit std::atomic<std::size_t> g_lost_live{0};
constinit std::atomic<std::uintptr_t> g_page_size{4096};
// The SIGBUS disposition before ours, read by the handler for faults not ours.
// Written once, before the handler is installed.
struct sigaction g_previous {};

// The rest of a slot, only for code outside the handler, under registry_mutex().
struct Info {
  bool used = false;
  std::string path;
  int fd = -1;
  MappingGroup group = kNoMappingGroup;
  std::size_t size = 0;
  timespec mtime{};
};

// Never destroyed: a MappedFile that outlives static destruction (a static
// object assigned a mapping late) must still find them.
std::mutex& registry_mutex() {
  static auto* m = new std::mutex;
  return *m;
}

std::array<Info, limits::kMappedFiles>& infos() {
  static auto* table = new std::array<Info, limits::kMappedFiles>;
  return *table;
}

std::atomic<MappingGroup> g_next_group{1};
thread_local MappingGroup t_group = kNoMappingGroup;

void mark_lost(Range& r, int reason) noexcept {
  int expected = kIntact;
  if (r.lost.compare_exchange_strong(expected, reason)) g_lost_live.fetch_add(1);
}

// A SIGBUS that is not a read past the end of one of our files: what the
// process would have done without us.
void forward(int sig, siginfo_t* info, void* context) {
  if ((g_previous.sa_flags & SA_SIGINFO) != 0) {
    if (g_previous.sa_sigaction != nullptr) g_previous.sa_sigaction(sig, info, context);
    return;
  }
  const bool sent = info->si_code <= 0;  // kill(), not a fault
  if (g_previous.sa_handler == SIG_IGN && sent) return;
  if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    g_previous.sa_handler(sig);
    return;
  }
  // The default action: a fault re-executes on return and ends the process
  // as a plain SIGBUS (core, exit status); a sent signal is raised again.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(sig, &dfl, nullptr);
  if (sent) raise(sig);
}

// Async-signal-safe only: atomics, raw system calls.
void on_sigbus(int sig, siginfo_t* info, void* context) {
  const int saved_errno = errno;
  if (info->si_code == BUS_ADRERR) {
    const auto addr = reinterpret_cast<std::uintptr_t>(info->si_addr);
    for (Range& r : g_ranges) {
      const std::uintptr_t begin = r.begin.load(std::memory_order_acquire);
      const std::uintptr_t end = r.end.load(std::memory_order_acquire);
      if (begin == 0 || addr < begin || addr >= end) continue;
      // Zero pages from the faulting one to the end of the mapping: the read
      // resumes and sees zeros, and so does any later read there. The
      // syscall itself, not mmap(), so no sanitizer interceptor runs here.
      const std::uintptr_t page = addr & ~(g_page_size.load(std::memory_order_relaxed) - 1);
      // Every argument a long: syscall() reads six of them whatever was passed.
      const long got = syscall(SYS_mmap, static_cast<long>(page), static_cast<long>(end - page), long{PROT_READ},
                               long{MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED}, -1L, 0L);
      if (got == static_cast<long>(page)) {
        mark_lost(r, kFaulted);
        errno = saved_errno;
        return;
      }
      break;  // the pages could not be replaced: the fault cannot be survived
    }
  }
  forward(sig, info, context);
  errno = saved_errno;
}

// Installed with the first mapping, not at start-up: a program that maps no
// file keeps its SIGBUS disposition, and handlers installed before (a
// sanitizer's) are chained to.
void install_handler() {
  static bool installed = false;
  if (installed) return;
  g_page_size.store(static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE)));
  if (sigaction(SIGBUS, nullptr, &g_previous) != 0) fail("cannot read the SIGBUS disposition: ", std::strerror(errno));
  struct sigaction sa {};
  sa.sa_sigaction = on_sigbus;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGBUS, &sa, nullptr) != 0)
    fail("cannot install the SIGBUS handler for mapped files: ", std::strerror(errno));
  installed = true;
}

bool same_time(const timespec& a, const timespec& b) { return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec; }

// Under registry_mutex().
void stat_one(std::size_t i) {
  const Info& in = infos()[i];
  struct stat st {};
  if (::fstat(in.fd, &st) != 0) return;  // no verdict without a stat
  if (static_cast<std::uint64_t>(st.st_size) != in.size || !same_time(st.st_mtim, in.mtime))
    mark_lost(g_ranges[i], kStatChanged);
}

// Under registry_mutex().
std::string lost_message(std::size_t i, const char* advice) {
  const Info& in = infos()[i];
  struct stat st {};
  const std::string now =
      ::fstat(in.fd, &st) == 0 ? cat(st.st_size, " bytes now") : std::string("its size now unknown");
  const char* how = g_ranges[i].lost.load() == kFaulted ? "a read fell past its end"
                                                        : "its size or modification time is not what it was at open";
  return cat(in.path, ": the file was truncated or changed while mapped (", how, "; ", in.size, " bytes at open, ", now,
             "): what was read from it is not its contents", advice);
}

}  // namespace

MappingGroup new_mapping_group() { return g_next_group.fetch_add(1); }

MappingGroupScope::MappingGroupScope(MappingGroup group) : previous_(t_group) { t_group = group; }
MappingGroupScope::~MappingGroupScope() { t_group = previous_; }

void check_mapped_files(MappingGroup group, bool stat_files) {
  if (!stat_files && g_lost_live.load(std::memory_order_acquire) == 0) return;
  std::optional<std::string> message;
  {
    const std::lock_guard lock(registry_mutex());
    for (std::size_t i = 0; i < infos().size() && !message; ++i) {
      const Info& in = infos()[i];
      if (!in.used || (group != kEveryMappingGroup && in.group != group)) continue;
      if (stat_files) stat_one(i);
      if (g_ranges[i].lost.load() != kIntact) message = lost_message(i, "; reopen the model");
    }
  }
  if (message) throw FileChangedError(*message);
}

namespace mapping_registry {

int add(const std::byte* data, std::size_t size, int fd, const std::filesystem::path& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) fail(path.string(), ": cannot stat: ", std::strerror(errno));
  const std::lock_guard lock(registry_mutex());
  install_handler();
  auto& table = infos();
  for (std::size_t i = 0; i < table.size(); ++i) {
    if (table[i].used) continue;
    table[i] = Info{true, path.string(), fd, t_group, size, st.st_mtim};
    const auto begin = reinterpret_cast<std::uintptr_t>(data);
    const std::uintptr_t page = g_page_size.load();
    Range& r = g_ranges[i];
    r.lost.store(kIntact);
    r.end.store((begin + size + page - 1) & ~(page - 1));
    r.begin.store(begin, std::memory_order_release);
    return static_cast<int>(i);
  }
  fail(path.string(), ": cannot map it: ", limits::kMappedFiles,
       " files are mapped already (limits::kMappedFiles, docs/limits.md)");
}

void remove(int slot) noexcept {
  const std::lock_guard lock(registry_mutex());
  const auto i = static_cast<std::size_t>(slot);
  Range& r = g_ranges[i];
  // First, so the handler stops matching before the range is unmapped (and reused).
  r.begin.store(0, std::memory_order_release);
  r.end.store(0);
  if (r.lost.exchange(kIntact) != kIntact) g_lost_live.fetch_sub(1);
  Info& in = infos()[i];
  ::close(in.fd);
  in = Info{};
}

bool maps_file(const void* data, std::size_t bytes) {
  const auto begin = reinterpret_cast<std::uintptr_t>(data);
  for (const Range& r : g_ranges) {
    const std::uintptr_t b = r.begin.load(std::memory_order_acquire);
    if (b != 0 && b <= begin && begin + bytes <= r.end.load()) return true;
  }
  return false;
}

bool lost(int slot, bool stat_file) {
  const auto i = static_cast<std::size_t>(slot);
  if (stat_file) {
    const std::lock_guard lock(registry_mutex());
    stat_one(i);
  }
  return g_ranges[i].lost.load(std::memory_order_acquire) != kIntact;
}

void fail_lost(int slot) {
  std::string message;
  {
    const std::lock_guard lock(registry_mutex());
    message = lost_message(static_cast<std::size_t>(slot), "");
  }
  throw FileChangedError(message);
}

}  // namespace mapping_registry

}  // namespace qhx
