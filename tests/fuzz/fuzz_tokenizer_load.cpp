// Loading a tokenizer.json (the structure checks, the vocab, merges and added
// tokens, the decode tables), then a short encode and decode with what loaded:
// a table that loads must serve every id it claims.
#include <cstdint>
#include <vector>

#include "fuzz_support.hpp"
#include "qhexrt/tokenizer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  qhx::fuzz::expect_only_qhx_errors([&] {
    const auto tok = qhx::Tokenizer::from_json(qhx::fuzz::as_text(data, size), "tokenizer.json");
    const std::int32_t n = tok.vocab_size();
    std::vector<std::int32_t> all;
    for (std::int32_t id = 0; id < n && id < 4096; ++id) {
      all.push_back(id);
      (void)tok.token_bytes(id);
      (void)tok.is_special(id);
    }
    (void)tok.decode(all);
    (void)tok.decode(all, /*skip_special=*/true);
    const auto ids = tok.encode("Hello, world! 你好 <|im_start|>user\n  x\u0301 123");
    for (const auto id : ids) QHX_FUZZ_CHECK(id >= 0 && id < n);
    (void)tok.decode(ids);
  });
  return 0;
}
