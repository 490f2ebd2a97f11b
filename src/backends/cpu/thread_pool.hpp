// A small persistent thread pool for the CPU kernels: `parallel_for(n, fn)`
// splits [0, n) into contiguous chunks, one per participating thread (the
// caller runs the first chunk itself), and returns when all are done.
//
// Workers are started once (lazily, on first use) and live until exit or the
// next set_threads(); they spin briefly after each job, then sleep on a
// condition variable. A call allocates nothing: `fn` is passed by reference
// through a function pointer. Calls are meant to come from one thread at a
// time; a call made while another is running (from a second thread, or from
// inside a worker's fn) simply runs serially on its caller, so it is always
// safe. An exception thrown by fn on any thread is rethrown to the caller.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <utility>

namespace qhx::cpu {

// Number of threads parallel_for uses, the caller included (>= 1). The default
// is std::thread::hardware_concurrency(). Changing it restarts the workers.
// Not to be called while a parallel_for is running.
void set_threads(int n);
int num_threads();

namespace detail {
using ChunkFn = void (*)(void* ctx, std::int64_t begin, std::int64_t end);
// How a call's items are shared out (see the functions below).
enum class Split {
  Chunks,    // one contiguous chunk per thread
  Pieces,    // pieces of `piece` items taken in turn by whichever thread is free
  Balanced,  // each thread's own run of pieces from its front, the rest stolen from the back
};
void parallel_run(std::int64_t n, std::int64_t grain, std::int64_t piece, Split split, ChunkFn call, void* ctx);
}  // namespace detail

// Calls fn(begin, end) over contiguous chunks covering [0, n), each of at
// least `grain` items (one chunk when n < 2 * grain), on up to num_threads() threads.
template <class Fn>
void parallel_for(std::int64_t n, std::int64_t grain, Fn&& fn) {
  using F = std::remove_reference_t<Fn>;
  detail::parallel_run(
      n, grain, 0, detail::Split::Chunks,
      [](void* ctx, std::int64_t begin, std::int64_t end) { (*static_cast<F*>(ctx))(begin, end); },
      const_cast<void*>(static_cast<const void*>(&fn)));
}

// Calls fn(begin, end) over the pieces [k·piece, (k + 1)·piece) ∩ [0, n), each
// piece run by whichever thread asks next. For compute-bound loops: the cores
// of a shared host do not run at one speed (one vCPU can be far slower than the
// other at AMX products), and an equal split waits for the slowest. The pieces' bounds do not depend on the threads, so neither do results.
template <class Fn>
void parallel_for_pieces(std::int64_t n, std::int64_t piece, Fn&& fn) {
  using F = std::remove_reference_t<Fn>;
  detail::parallel_run(
      n, 1, std::max<std::int64_t>(1, piece), detail::Split::Pieces,
      [](void* ctx, std::int64_t begin, std::int64_t end) { (*static_cast<F*>(ctx))(begin, end); },
      const_cast<void*>(static_cast<const void*>(&fn)));
}

// Calls fn(begin, end) over contiguous runs of whole pieces covering [0, n): each
// thread owns an equal share of the pieces and works through it from the front in
// runs that shrink as it empties, so its reads stay one sequential stream; a thread
// that finishes early takes pieces one at a time from the back of another's share.
// For memory-bound loops (decode's weight stream): an equal split waits for the
// slower core at every call, a visible share of a decode step, while
// Pieces breaks each thread's stream into jumps. Pieces are never split, so the
// items each fn call sees are whole pieces (results cannot depend on the threads
// when fn computes each item alone).
template <class Fn>
void parallel_for_balanced(std::int64_t n, std::int64_t grain, std::int64_t piece, Fn&& fn) {
  using F = std::remove_reference_t<Fn>;
  detail::parallel_run(
      n, grain, std::max<std::int64_t>(1, piece), detail::Split::Balanced,
      [](void* ctx, std::int64_t begin, std::int64_t end) { (*static_cast<F*>(ctx))(begin, end); },
      const_cast<void*>(static_cast<const void*>(&fn)));
}

// Work items per chunk so that a chunk is worth a thread hand-off (~32k flops),
// for items of cost_per_item flops each: the kernels' `grain`.
inline std::int64_t grain_for(std::int64_t cost_per_item) {
  return std::max<std::int64_t>(1, (std::int64_t{1} << 15) / std::max<std::int64_t>(1, cost_per_item));
}

template <class Fn>
void parallel_for(std::int64_t n, Fn&& fn) {
  parallel_for(n, 1, std::forward<Fn>(fn));
}

}  // namespace qhx::cpu
