// Buffers that start on a cache line. Why: the int8 kernels write a product's
// output 16 floats (one 64-byte line) per store, and an AMX tile's epilogue
// writes 32 rows at a time; in a buffer off the lines (a large malloc is 16
// bytes past a page start) every store covers two lines, each filled by two
// stores that often come from different tiles, and the line leaves L1 between
// them when the rows share its sets (rows a multiple of 4 KiB apart, as most
// of a model's are).
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace qhx {

inline constexpr std::size_t kCacheLine = 64;

template <class T>
struct LineAllocator {
  using value_type = T;
  LineAllocator() = default;
  template <class U>
  LineAllocator(const LineAllocator<U>&) {}
  T* allocate(std::size_t n) { return static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{kCacheLine})); }
  void deallocate(T* p, std::size_t) { ::operator delete (p, std::align_val_t{kCacheLine}); }
  template <class U>
  bool operator==(const LineAllocator<U>&) const {
    return true;
  }
};

// A float buffer whose first element starts a cache line.
using LineFloats = std::vector<float, LineAllocator<float>>;

}  // namespace qhx
