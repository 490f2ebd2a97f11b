// Session state memory: the KV cache and the host-kept buffers of NPU-contract graphs.
#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "qhexrt/error.hpp"
#include "runtime/run_context.hpp"

namespace qhx {

namespace {

// QHX_TEST_POISON_STATE=1 fills every new state buffer with 0xFF bytes (NaN as f32 and f16,
// -1 as int8), so a graph or a stage that reads state it never wrote shows it in its output.
// The tests run with it; a buffer fresh from the system is zeros and would hide such a read
// until the allocator hands back memory a previous request used.
bool poison_state() {
  static const bool on = [] {
    const char* v = std::getenv("QHX_TEST_POISON_STATE");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  return on;
}

}  // namespace

StateBuffer make_state_buffer(std::size_t bytes) {
  constexpr std::size_t kHuge = std::size_t{2} << 20;
  if (bytes > SIZE_MAX - kHuge) fail("out of memory: a graph's state needs ", bytes, " bytes");
  const std::size_t rounded = std::max<std::size_t>((bytes + kHuge - 1) / kHuge * kHuge, kHuge);
  void* p = std::aligned_alloc(kHuge, rounded);
  if (p == nullptr) fail("out of memory: a graph's state needs ", rounded, " bytes");
#ifdef MADV_HUGEPAGE
  madvise(p, rounded, MADV_HUGEPAGE);  // advisory: failure is harmless
#endif
  if (poison_state()) std::memset(p, 0xFF, rounded);
  return StateBuffer(static_cast<std::byte*>(p));
}

std::byte* SessionState::buffer(const Graph& graph, const IoSpec& spec) {
  auto& b = buffers[graph.name + "." + spec.name];
  if (!b) {
    // Checked: the shape is a product of the context length and config sizes.
    std::size_t bytes = dtype_size(spec.dtype);
    for (const auto d : spec.shape)
      if (d < 0 || __builtin_mul_overflow(bytes, static_cast<std::size_t>(d), &bytes))
        fail("graph \"", graph.name, "\": state \"", spec.name, "\" is too large for this machine's address space");
    // Left uninitialized: a graph that owns its state reads only the positions already
    // written, and untouched pages of a long context cost no memory.
    b = make_state_buffer(bytes);
  }
  return b.get();
}

std::byte* SessionState::shared(const std::string& name, std::size_t bytes) {
  auto& b = buffers[name];
  if (!b) {
    // Zeroed: a graph under the NPU contract takes the whole past as input and masks the rows
    // not yet written, and a mask cannot hide a NaN or an fp16 overflow there (0 x NaN is NaN).
    b = make_state_buffer(bytes);
    std::memset(b.get(), 0, bytes);
  }
  return b.get();
}

}  // namespace qhx
