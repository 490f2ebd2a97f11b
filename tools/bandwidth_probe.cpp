// The read-bandwidth probe of qhx_bench (bandwidth_probe.hpp).
#include "bandwidth_probe.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace fs = std::filesystem;

// The read bandwidth now, measured as the roofline tool measures it: each thread
// first touches its own slice of a fresh 1 GiB buffer, then all threads sum their
// slices; best of 5 passes. Run by `qhx_bench --bandwidth-probe` in a process of its
// own (read_bandwidth_now), so the benchmark's peak RSS does not count the buffer.
double measure_read_bandwidth(int threads) {
  const std::size_t words = (std::size_t{1} << 30) / sizeof(std::uint64_t);
  const std::unique_ptr<std::uint64_t[]> buf(new std::uint64_t[words]);  // not yet touched
  const int nt = std::max(1, threads);
  constexpr int kPasses = 5;
  std::barrier sync(nt);
  std::vector<std::uint64_t> sums(static_cast<std::size_t>(nt));
  double best = 1e30;
  // Thread 0 is this thread (no more threads than cores, or a late wake-up would
  // shorten the timed span); it times each pass from before the start barrier to
  // after the end barrier, wake-ups included, as an OpenMP parallel region is timed.
  const auto work = [&](int t) {
    const std::size_t per = words / static_cast<std::size_t>(nt) / 8 * 8;
    const std::size_t b = per * static_cast<std::size_t>(t), e = t + 1 == nt ? words / 8 * 8 : b + per;
    for (std::size_t i = b; i < e; ++i) buf[i] = i;  // the reader touches its pages first
    for (int pass = 0; pass < kPasses; ++pass) {
      const auto t0 = std::chrono::steady_clock::now();
      sync.arrive_and_wait();
      std::uint64_t a[8] = {};
      for (std::size_t i = b; i < e; i += 8)
        for (std::size_t u = 0; u < 8; ++u) a[u] += buf[i + u];
      for (const std::uint64_t v : a) sums[static_cast<std::size_t>(t)] += v;
      sync.arrive_and_wait();
      if (t == 0) best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < nt; ++t) pool.emplace_back(work, t);
  work(0);
  for (auto& th : pool) th.join();
  std::uint64_t all = 0;
  for (const std::uint64_t v : sums) all += v;
  if (all == 0) return 0;  // never: the sums are used, so the loads cannot be dropped
  return static_cast<double>(words / 8 * 8 * sizeof(std::uint64_t)) / best / 1e9;
}

// GB/s from `qhx_bench --bandwidth-probe` run now (0 if it failed). On a shared
// host the bandwidth two threads get moves by up to 2x within a minute (the host
// places the VM's cores), so decode figures are also given against probes taken
// just before and just after them, beside the roofline measured at the start.
double read_bandwidth_now(int threads) {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return 0;
  int fd[2];
  if (::pipe(fd) != 0) return 0;
  const std::string self_s = self.string(), nt = std::to_string(threads);
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fd[0]);
    ::close(fd[1]);
    return 0;
  }
  if (pid == 0) {  // only exec after fork: this process has threads
    ::dup2(fd[1], STDOUT_FILENO);
    ::close(fd[0]);
    ::close(fd[1]);
    const char* args[] = {self_s.c_str(), "--bandwidth-probe", "--threads", nt.c_str(), nullptr};
    ::execv(self_s.c_str(), const_cast<char* const*>(args));
    ::_exit(127);
  }
  ::close(fd[1]);
  std::string text;
  char chunk[256];
  for (ssize_t got; (got = ::read(fd[0], chunk, sizeof chunk)) > 0;) text.append(chunk, static_cast<std::size_t>(got));
  ::close(fd[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 0;
  try {
    return std::stod(text);
  } catch (const std::exception&) {
    return 0;
  }
}
