// Seams for the test programs. The shipped libraries only call through these slots; what
// fills them (reading QHX_TEST_POISON_STATE, QHX_EXPORT_TEST_*) is src/testing/, linked into
// the tools and the tests and never into libqhexrt.so or libqhexrt_export.so. With a slot
// empty the library behaves as it would without tests.
#pragma once

#include <cstddef>

namespace qhx::test_hooks {

struct Hooks {
  // Called on every new session state buffer (a KV cache, an NPU graph's host-kept past).
  void (*new_state)(void* data, std::size_t bytes) = nullptr;
  // Called by the export at each named point of writing and publishing (docs/bundle.md).
  void (*export_point)(const char* point) = nullptr;
  // Whether the export publishes as on a file system without RENAME_EXCHANGE.
  bool (*export_no_exchange)() = nullptr;
};

Hooks& hooks();

}  // namespace qhx::test_hooks
