// A checkpoint's config.json as the runtime reads it (both transformers lines'
// spellings, the defaults save_pretrained leaves out, and the validation).
#include <cstdint>

#include "fuzz_support.hpp"
#include "qhexrt/hf_config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  qhx::fuzz::expect_only_qhx_errors(
      [&] { (void)qhx::parse_qwen3vl_config(qhx::fuzz::as_text(data, size), "config.json"); });
  return 0;
}
