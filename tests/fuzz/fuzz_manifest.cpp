// A manifest (docs/manifest.md) as Pipeline::open reads it: version, files,
// graphs, tables, stages, sampling and image options, every field validated.
#include <cstdint>

#include "fuzz_support.hpp"
#include "runtime/manifest.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  qhx::fuzz::expect_only_qhx_errors(
      [&] { (void)qhx::parse_manifest(qhx::fuzz::as_text(data, size), "manifest.json", "/nonexistent/bundle"); });
  return 0;
}
