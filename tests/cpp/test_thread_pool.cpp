// The CPU thread pool (src/backends/cpu/thread_pool): parallel_for covers
// [0, n) exactly once in contiguous chunks, for any thread count, grain and n;
// nested and concurrent calls run serially; exceptions reach the caller.
// parallel_for_pieces calls exactly the pieces [k·piece, (k + 1)·piece) ∩ [0, n),
// whatever the threads, and a thread that is held up leaves its pieces to the others.
// parallel_for_balanced calls runs of whole pieces covering [0, n) once, each thread
// its own share first and in order, and a held-up thread's remaining pieces go to the others.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <utility>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "backends/cpu/thread_pool.hpp"

namespace qhx::cpu {
namespace {

class ThreadPool : public ::testing::Test {
 protected:
  void TearDown() override { set_threads(static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))); }
};

void expect_covered_once(std::int64_t n, std::int64_t grain) {
  std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
  std::atomic<int> chunks{0};
  parallel_for(n, grain, [&](std::int64_t b, std::int64_t e) {
    ASSERT_LE(0, b);
    ASSERT_LT(b, e);
    ASSERT_LE(e, n);
    if (n >= grain) {
      ASSERT_GE(e - b, grain);
    }
    chunks.fetch_add(1);
    for (std::int64_t i = b; i < e; ++i) hits[static_cast<std::size_t>(i)].fetch_add(1);
  });
  for (std::int64_t i = 0; i < n; ++i)
    ASSERT_EQ(hits[static_cast<std::size_t>(i)].load(), 1) << "n=" << n << " i=" << i;
  EXPECT_LE(chunks.load(), num_threads());
  if (n == 0) {
    EXPECT_EQ(chunks.load(), 0);
  }
}

TEST_F(ThreadPool, CoversEveryIndexOnceForAnyThreadCount) {
  for (const int t : {1, 2, 3, 4, 7}) {
    set_threads(t);
    EXPECT_EQ(num_threads(), t);
    for (const std::int64_t n : {0, 1, 2, 3, 5, 16, 17, 100, 1000})
      for (const std::int64_t grain : {1, 4, 64}) expect_covered_once(n, grain);
  }
}

TEST_F(ThreadPool, UsesSeveralThreads) {
  set_threads(3);
  std::atomic<int> chunks{0};
  std::vector<std::thread::id> ids(3);
  parallel_for(3, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) ids[static_cast<std::size_t>(i)] = std::this_thread::get_id();
    chunks.fetch_add(1);
  });
  EXPECT_EQ(chunks.load(), 3);
  EXPECT_EQ(ids[0], std::this_thread::get_id());  // the caller runs the first chunk
  EXPECT_NE(ids[1], ids[0]);
  EXPECT_NE(ids[2], ids[1]);
}

TEST_F(ThreadPool, ManyCallsInARow) {
  set_threads(4);
  std::int64_t total = 0;
  for (int call = 0; call < 2000; ++call) {
    std::vector<std::int64_t> part(64, 0);
    parallel_for(64, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) part[static_cast<std::size_t>(i)] = i;
    });
    for (const auto v : part) total += v;
  }
  EXPECT_EQ(total, 2000 * (63 * 64 / 2));
}

TEST_F(ThreadPool, NestedCallsRunSerially) {
  set_threads(3);
  std::vector<std::atomic<int>> hits(30 * 7);
  parallel_for(30, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i)
      parallel_for(7, [&](std::int64_t b2, std::int64_t e2) {
        for (std::int64_t j = b2; j < e2; ++j) hits[static_cast<std::size_t>(i * 7 + j)].fetch_add(1);
      });
  });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
}

TEST_F(ThreadPool, ConcurrentCallersAreSafe) {
  set_threads(2);
  std::atomic<std::int64_t> sum{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 3; ++c)
    callers.emplace_back([&] {
      for (int r = 0; r < 200; ++r)
        parallel_for(50, [&](std::int64_t b, std::int64_t e) {
          for (std::int64_t i = b; i < e; ++i) sum.fetch_add(i);
        });
    });
  for (auto& t : callers) t.join();
  EXPECT_EQ(sum.load(), 3 * 200 * (49 * 50 / 2));
}

TEST_F(ThreadPool, ExceptionsReachTheCaller) {
  set_threads(2);
  EXPECT_THROW(parallel_for(2,
                            [](std::int64_t b, std::int64_t) {
                              if (b > 0) throw std::runtime_error("worker");
                            }),
               std::runtime_error);
  EXPECT_THROW(parallel_for(2,
                            [](std::int64_t b, std::int64_t) {
                              if (b == 0) throw std::runtime_error("caller");
                            }),
               std::runtime_error);
  // The pool still works afterwards.
  expect_covered_once(100, 1);
}

// The pieces a call made, as sorted (begin, end) pairs, and each index's hits.
void expect_exact_pieces(std::int64_t n, std::int64_t piece) {
  std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
  std::mutex mu;
  std::vector<std::pair<std::int64_t, std::int64_t>> got;
  parallel_for_pieces(n, piece, [&](std::int64_t b, std::int64_t e) {
    {
      std::lock_guard<std::mutex> lk(mu);
      got.emplace_back(b, e);
    }
    for (std::int64_t i = b; i < e; ++i) hits[static_cast<std::size_t>(i)].fetch_add(1);
  });
  std::sort(got.begin(), got.end());
  std::vector<std::pair<std::int64_t, std::int64_t>> want;
  for (std::int64_t b = 0; b < n; b += piece) want.emplace_back(b, std::min(n, b + piece));
  EXPECT_EQ(got, want) << "n=" << n << " piece=" << piece << " threads=" << num_threads();
  for (std::int64_t i = 0; i < n; ++i)
    ASSERT_EQ(hits[static_cast<std::size_t>(i)].load(), 1) << "n=" << n << " i=" << i;
}

TEST_F(ThreadPool, PiecesHaveFixedBoundsForAnyThreadCount) {
  for (const int t : {1, 2, 3, 7}) {
    set_threads(t);
    for (const std::int64_t n : {0, 1, 2, 5, 16, 17, 100, 1000})
      for (const std::int64_t piece : {1, 3, 16, 64, 5000}) expect_exact_pieces(n, piece);
  }
}

TEST_F(ThreadPool, AHeldUpThreadLeavesItsPiecesToTheOthers) {
  set_threads(2);
  // The caller holds its piece until the other thread has run every other
  // piece (which first waits for the caller to hold one): with one fixed chunk
  // per thread, half the pieces would wait for the caller.
  constexpr std::int64_t kPieces = 8;
  std::atomic<int> others{0};
  std::atomic<bool> caller_holds{false};
  const auto caller = std::this_thread::get_id();
  std::vector<std::thread::id> who(kPieces);
  parallel_for_pieces(kPieces, 1, [&](std::int64_t b, std::int64_t) {
    who[static_cast<std::size_t>(b)] = std::this_thread::get_id();
    if (std::this_thread::get_id() == caller) {
      caller_holds = true;
      for (int spin = 0; spin < 20000000 && others.load() < kPieces - 1; ++spin) std::this_thread::yield();
      return;
    }
    for (int spin = 0; spin < 20000000 && !caller_holds.load(); ++spin) std::this_thread::yield();
    others.fetch_add(1);
  });
  EXPECT_EQ(others.load(), kPieces - 1);
  EXPECT_EQ(std::count(who.begin(), who.end(), caller), 1);
}

TEST_F(ThreadPool, NestedPiecesRunSeriallyWithTheSameBounds) {
  set_threads(3);
  std::atomic<int> bad{0};
  parallel_for(6, [&](std::int64_t, std::int64_t) {
    std::vector<std::pair<std::int64_t, std::int64_t>> got;
    parallel_for_pieces(10, 4, [&](std::int64_t b, std::int64_t e) { got.emplace_back(b, e); });
    const std::vector<std::pair<std::int64_t, std::int64_t>> want{{0, 4}, {4, 8}, {8, 10}};
    if (got != want) bad.fetch_add(1);
  });
  EXPECT_EQ(bad.load(), 0);
}

TEST_F(ThreadPool, ExceptionsInPiecesReachTheCaller) {
  set_threads(2);
  EXPECT_THROW(parallel_for_pieces(9, 2,
                                   [](std::int64_t b, std::int64_t) {
                                     if (b == 4) throw std::runtime_error("piece");
                                   }),
               std::runtime_error);
  expect_exact_pieces(100, 7);
}

// The runs a balanced call made: every index once, each run whole pieces, at most
// num_threads() threads, one serial run when the grain allows no split.
void expect_balanced_runs(std::int64_t n, std::int64_t grain, std::int64_t piece) {
  std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
  std::mutex mu;
  std::vector<std::pair<std::int64_t, std::int64_t>> runs;
  std::vector<std::thread::id> ids;
  parallel_for_balanced(n, grain, piece, [&](std::int64_t b, std::int64_t e) {
    {
      std::lock_guard<std::mutex> lk(mu);
      runs.emplace_back(b, e);
      if (std::find(ids.begin(), ids.end(), std::this_thread::get_id()) == ids.end())
        ids.push_back(std::this_thread::get_id());
    }
    for (std::int64_t i = b; i < e; ++i) hits[static_cast<std::size_t>(i)].fetch_add(1);
  });
  const std::string where = "n=" + std::to_string(n) + " grain=" + std::to_string(grain) +
                            " piece=" + std::to_string(piece) + " threads=" + std::to_string(num_threads());
  for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<std::size_t>(i)].load(), 1) << where << " i=" << i;
  for (const auto& [b, e] : runs) {
    ASSERT_LT(b, e) << where;
    ASSERT_EQ(b % piece, 0) << where << ": a run starts inside a piece";
    ASSERT_TRUE(e == n || e % piece == 0) << where << ": a run ends inside a piece";
  }
  EXPECT_LE(static_cast<int>(ids.size()), num_threads()) << where;
  if (n > 0 && (n < 2 * grain || n <= piece)) {
    EXPECT_EQ(runs.size(), 1u) << where << ": too small to split";
  }
}

TEST_F(ThreadPool, BalancedRunsAreWholePiecesCoveringEveryIndexOnce) {
  for (const int t : {1, 2, 3, 7}) {
    set_threads(t);
    for (const std::int64_t n : {0, 1, 2, 5, 16, 17, 100, 1000, 9496})
      for (const std::int64_t piece : {1, 3, 16, 5000})
        for (const std::int64_t grain : {1, 64}) expect_balanced_runs(n, grain, piece);
  }
}

TEST_F(ThreadPool, BalancedThreadsTakeTheirOwnShareInOrderFirst) {
  set_threads(2);
  // The caller's share is the first half: it runs from piece 0 upwards, in runs
  // that do not go back, and the other thread starts at the second half.
  constexpr std::int64_t kPieces = 400;
  const auto caller = std::this_thread::get_id();
  std::mutex mu;
  std::vector<std::pair<std::int64_t, std::int64_t>> mine, theirs;
  std::atomic<int> started{0};
  parallel_for_balanced(kPieces, 1, 1, [&](std::int64_t b, std::int64_t e) {
    bool first = false;
    {
      std::lock_guard<std::mutex> lk(mu);
      auto& runs = std::this_thread::get_id() == caller ? mine : theirs;
      first = runs.empty();
      runs.emplace_back(b, e);
    }
    if (first) {  // both threads start before either goes on (or the caller could do it all)
      started.fetch_add(1);
      for (int spin = 0; spin < 20000000 && started.load() < 2; ++spin) std::this_thread::yield();
    }
  });
  ASSERT_FALSE(mine.empty());
  ASSERT_FALSE(theirs.empty());
  EXPECT_EQ(mine.front().first, 0);
  EXPECT_EQ(theirs.front().first, kPieces / 2);
  // Each thread's own runs follow one another without a gap, in runs of a quarter
  // of what is left (at most ~log(200) / log(4/3) of them, not 200 single pieces),
  // until its share is empty; what comes after is stolen.
  for (const auto* runs : {&mine, &theirs}) {
    std::size_t i = 1;
    while (i < runs->size() && (*runs)[i].first == (*runs)[i - 1].second) ++i;
    const std::int64_t own_end = (*runs)[i - 1].second;
    EXPECT_TRUE(own_end == kPieces / 2 || own_end == kPieces || i == runs->size());
    EXPECT_LE(i, 25u) << "own runs";
  }
}

TEST_F(ThreadPool, ABalancedThreadHeldUpLeavesTheRestOfItsShareToTheOthers) {
  set_threads(2);
  // The caller holds its first run until the other thread has done everything
  // else: it must take the caller's remaining pieces, from the back.
  constexpr std::int64_t kPieces = 64;
  const auto caller = std::this_thread::get_id();
  std::atomic<std::int64_t> others{0};
  std::atomic<std::int64_t> caller_items{-1};
  parallel_for_balanced(kPieces, 1, 1, [&](std::int64_t b, std::int64_t e) {
    if (std::this_thread::get_id() == caller) {
      if (caller_items.load() < 0) {
        caller_items = e - b;
        for (int spin = 0; spin < 20000000 && others.load() < kPieces - (e - b); ++spin) std::this_thread::yield();
      } else {
        caller_items.fetch_add(e - b);
      }
      return;
    }
    for (int spin = 0; spin < 20000000 && caller_items.load() < 0; ++spin) std::this_thread::yield();
    others.fetch_add(e - b);
  });
  EXPECT_EQ(caller_items.load(), kPieces / 2 / 4) << "the caller ran only its first run (a quarter of its share)";
  EXPECT_EQ(others.load(), kPieces - kPieces / 2 / 4);
}

TEST_F(ThreadPool, ExceptionsInBalancedRunsReachTheCaller) {
  set_threads(2);
  EXPECT_THROW(parallel_for_balanced(90, 1, 2,
                                     [](std::int64_t b, std::int64_t e) {
                                       if (b <= 60 && 60 < e) throw std::runtime_error("run");
                                     }),
               std::runtime_error);
  expect_balanced_runs(100, 1, 7);
}

}  // namespace
}  // namespace qhx::cpu
