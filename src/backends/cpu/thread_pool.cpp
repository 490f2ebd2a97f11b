#include "backends/cpu/thread_pool.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace qhx::cpu {
namespace {

// A spin-wait hint to the core, not a system call (a sched_yield per spin
// would make the spin cost tens of milliseconds, e.g. under qemu).
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__) || defined(__arm__)
  asm volatile("yield" ::: "memory");
#else
  std::this_thread::yield();
#endif
}

// Spin iterations before sleeping: roughly tens of microseconds, enough to
// bridge the gaps between the kernel calls of one decode step.
constexpr int kSpin = 20000;

thread_local bool t_in_pool_job = false;  // set while a thread runs a chunk

using detail::Split;

class Pool {
 public:
  ~Pool() { stop(); }

  void set_threads(int n) {
    std::lock_guard<std::mutex> call(call_mu_);
    stop();
    threads_.store(std::max(1, n), std::memory_order_relaxed);
  }

  int threads() const { return threads_.load(std::memory_order_relaxed); }

  void run(std::int64_t n, std::int64_t grain, std::int64_t piece, Split split, detail::ChunkFn call, void* ctx) {
    if (n <= 0) return;
    grain = std::max<std::int64_t>(1, grain);
    if (split == Split::Chunks) piece = 0;
    const std::int64_t pieces = piece > 0 ? (n + piece - 1) / piece : 0;
    const std::int64_t by_grain = std::max<std::int64_t>(1, n / grain);
    const std::int64_t max_chunks = split == Split::Pieces     ? pieces
                                    : split == Split::Balanced ? std::min(pieces, by_grain)
                                                               : by_grain;
    std::unique_lock<std::mutex> busy(call_mu_, std::try_to_lock);
    const std::int64_t chunks = std::min<std::int64_t>(threads(), max_chunks);
    if (chunks <= 1 || !busy.owns_lock() || t_in_pool_job) {  // serial: small, nested or concurrent
      if (split == Split::Pieces)
        for (std::int64_t b = 0; b < n; b += piece) call(ctx, b, std::min(n, b + piece));
      else
        call(ctx, 0, n);  // Balanced: one run of whole pieces
      return;
    }
    start_workers();
    n_ = n;
    chunks_ = chunks;
    piece_ = piece;
    split_ = split;
    next_piece_.store(0, std::memory_order_relaxed);
    if (split == Split::Balanced)
      for (std::int64_t i = 0; i < chunks; ++i)
        shares_[static_cast<std::size_t>(i)].set(pieces * i / chunks, pieces * (i + 1) / chunks);
    call_ = call;
    ctx_ = ctx;
    error_ = nullptr;
    pending_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> lk(mu_);
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();

    std::exception_ptr mine;
    t_in_pool_job = true;
    try {
      run_share(0);
    } catch (...) {
      mine = std::current_exception();
    }
    t_in_pool_job = false;

    for (int i = 0; i < kSpin && pending_.load(std::memory_order_acquire) != 0; ++i) cpu_relax();
    if (pending_.load(std::memory_order_acquire) != 0) {
      std::unique_lock<std::mutex> lk(mu_);
      done_.wait(lk, [&] { return pending_.load(std::memory_order_acquire) == 0; });
    }
    if (mine) std::rethrow_exception(mine);
    if (error_) std::rethrow_exception(error_);
  }

 private:
  // Thread `index`'s part of the current job.
  void run_share(int index) {
    switch (split_) {
      case Split::Chunks: call_(ctx_, n_ * index / chunks_, n_ * (index + 1) / chunks_); return;
      case Split::Pieces: run_pieces(); return;
      case Split::Balanced: run_balanced(index); return;
    }
  }

  // A thread's own pieces from the front in runs of a quarter of what is left
  // (a few claims per call, one stream), then other threads' pieces one at a
  // time from their backs. An exception stops this thread; the others finish.
  void run_balanced(int self) {
    std::int64_t b = 0, e = 0;
    while (shares_[static_cast<std::size_t>(self)].claim_front(b, e)) call_(ctx_, b * piece_, std::min(n_, e * piece_));
    for (std::int64_t k = 1; k < chunks_; ++k) {
      Share& victim = shares_[static_cast<std::size_t>((self + k) % chunks_)];
      while (victim.claim_back(b)) call_(ctx_, b * piece_, std::min(n_, (b + 1) * piece_));
    }
  }

  // Takes pieces until none is left (an exception stops this thread's share;
  // the others finish theirs).
  void run_pieces() {
    for (;;) {
      const std::int64_t k = next_piece_.fetch_add(1, std::memory_order_relaxed);
      const std::int64_t begin = k * piece_;
      if (begin >= n_) return;
      call_(ctx_, begin, std::min(n_, begin + piece_));
    }
  }

  void start_workers() {
    const int t = threads();
    if (!workers_.empty() || t <= 1) return;
    stop_ = false;
    // Each worker starts from the current generation, so it cannot miss the
    // job that is published right after this returns.
    const std::uint64_t gen = generation_.load(std::memory_order_acquire);
    shares_ = std::make_unique<Share[]>(static_cast<std::size_t>(t));
    for (int i = 1; i < t; ++i) workers_.emplace_back([this, i, gen] { worker(i, gen); });
  }

  void stop() {
    if (workers_.empty()) return;
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
  }

  void worker(int index, std::uint64_t seen) {
    for (;;) {
      for (int i = 0; i < kSpin && generation_.load(std::memory_order_acquire) == seen; ++i) cpu_relax();
      if (generation_.load(std::memory_order_acquire) == seen) {
        std::unique_lock<std::mutex> lk(mu_);
        wake_.wait(lk, [&] { return generation_.load(std::memory_order_acquire) != seen; });
      }
      seen = generation_.load(std::memory_order_acquire);
      {
        std::lock_guard<std::mutex> lk(mu_);
        if (stop_) return;
      }
      if (index < chunks_) {
        t_in_pool_job = true;
        try {
          run_share(index);
        } catch (...) {
          std::lock_guard<std::mutex> lk(mu_);
          if (!error_) error_ = std::current_exception();
        }
        t_in_pool_job = false;
      }
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        std::lock_guard<std::mutex> lk(mu_);
        done_.notify_one();
      }
    }
  }

  std::mutex call_mu_;  // held by the one running call
  std::atomic<int> threads_{std::max(1, static_cast<int>(std::thread::hardware_concurrency()))};
  std::vector<std::thread> workers_;

  std::mutex mu_;
  std::condition_variable wake_, done_;
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  bool stop_ = false;

  // One thread's pieces [lo, hi) of a Balanced job: its owner claims from the
  // front, others from the back, both by compare-and-swap of the packed pair.
  struct alignas(64) Share {  // a cache line each: owners do not contend
    std::atomic<std::uint64_t> range{0};
    static std::uint64_t pack(std::int64_t lo, std::int64_t hi) {
      return static_cast<std::uint64_t>(lo) << 32 | static_cast<std::uint64_t>(hi);
    }
    void set(std::int64_t lo, std::int64_t hi) { range.store(pack(lo, hi), std::memory_order_relaxed); }
    bool claim_front(std::int64_t& b, std::int64_t& e) {
      std::uint64_t r = range.load(std::memory_order_relaxed);
      for (;;) {
        const auto lo = static_cast<std::int64_t>(r >> 32), hi = static_cast<std::int64_t>(r & 0xFFFFFFFFu);
        if (lo >= hi) return false;
        const std::int64_t take = std::max<std::int64_t>(1, (hi - lo) / 4);
        if (range.compare_exchange_weak(r, pack(lo + take, hi), std::memory_order_relaxed)) {
          b = lo;
          e = lo + take;
          return true;
        }
      }
    }
    bool claim_back(std::int64_t& b) {
      std::uint64_t r = range.load(std::memory_order_relaxed);
      for (;;) {
        const auto lo = static_cast<std::int64_t>(r >> 32), hi = static_cast<std::int64_t>(r & 0xFFFFFFFFu);
        if (lo >= hi) return false;
        if (range.compare_exchange_weak(r, pack(lo, hi - 1), std::memory_order_relaxed)) {
          b = hi - 1;
          return true;
        }
      }
    }
  };

  // The current job (written before generation_ is bumped, read after).
  std::int64_t n_ = 0, chunks_ = 0, piece_ = 0;
  Split split_ = Split::Chunks;
  std::unique_ptr<Share[]> shares_;  // one per thread (start_workers)
  std::atomic<std::int64_t> next_piece_{0};
  detail::ChunkFn call_ = nullptr;
  void* ctx_ = nullptr;
  std::exception_ptr error_;
};

Pool& pool() {
  static Pool p;
  return p;
}

}  // namespace

void set_threads(int n) { pool().set_threads(n); }
int num_threads() { return pool().threads(); }

namespace detail {
void parallel_run(std::int64_t n, std::int64_t grain, std::int64_t piece, Split split, ChunkFn call, void* ctx) {
  if (split == Split::Balanced && (n + piece - 1) / piece > std::int64_t{0xFFFFFFFF})
    piece = (n + std::int64_t{0xFFFFFFFE}) / std::int64_t{0xFFFFFFFF};  // the packed share holds 32-bit indices
  pool().run(n, grain, piece, split, call, ctx);
}
}  // namespace detail

}  // namespace qhx::cpu
