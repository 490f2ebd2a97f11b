// The real Qwen3 tokenizer on arbitrary bytes: encode (added tokens, NFC, the
// pre-tokenizer, BPE) and decode of arbitrary ids, whole and streamed, checked
// against what tokenizer.hpp promises.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/utf8.hpp"
#include "fuzz_support.hpp"
#include "qhexrt/tokenizer.hpp"

namespace {

std::unique_ptr<qhx::Tokenizer> g_tok;

// StreamDecoder's promise: its pieces, joined, are decode() of the same ids.
void check_stream(const qhx::Tokenizer& tok, const std::vector<std::int32_t>& ids, bool skip_special) {
  qhx::StreamDecoder stream(tok, skip_special);
  std::string joined;
  for (const auto id : ids) joined += stream.push(id);
  joined += stream.flush();
  QHX_FUZZ_CHECK(joined == tok.decode(ids, skip_special));
}

void check_encode(const qhx::Tokenizer& tok, std::string_view text, bool skip_special) {
  const auto ids = tok.encode(text);  // throws on invalid UTF-8
  for (const auto id : ids) QHX_FUZZ_CHECK(id >= 0 && id < tok.vocab_size());
  const std::string back = tok.decode(ids);
  QHX_FUZZ_CHECK(qhx::utf8::first_invalid(back) == back.size());
  // Byte-level BPE loses nothing but what NFC changes, and NFC leaves ASCII alone;
  // text that went through once is normalized, so a second pass must not move it.
  bool ascii = true;
  for (const char c : text) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
  if (ascii) QHX_FUZZ_CHECK(back == text);
  QHX_FUZZ_CHECK(tok.decode(tok.encode(back)) == back);
  check_stream(tok, ids, skip_special);
}

// Three bytes per id, spread a little past both ends of the vocabulary.
std::vector<std::int32_t> ids_of(const std::uint8_t* p, std::size_t n, std::int32_t vocab) {
  std::vector<std::int32_t> ids;
  for (std::size_t i = 0; i + 3 <= n; i += 3) {
    const std::int32_t raw = p[i] | (p[i + 1] << 8) | (p[i + 2] << 16);
    ids.push_back(raw % (vocab + 8) - 4);
  }
  return ids;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  g_tok = std::make_unique<qhx::Tokenizer>(qhx::Tokenizer::load(qhx::fuzz::tokenizer_json()));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const bool skip_special = (data[0] & 1) != 0;
  const bool as_ids = (data[0] & 2) != 0;
  const std::uint8_t* rest = data + 1;
  const std::size_t n = size - 1;
  const qhx::Tokenizer& tok = *g_tok;
  if (as_ids) {
    const auto ids = ids_of(rest, n, tok.vocab_size());
    bool valid = true;
    for (const auto id : ids) valid = valid && id >= 0 && id < tok.vocab_size();
    qhx::fuzz::expect_only_qhx_errors([&] {
      const std::string text = tok.decode(ids, skip_special);
      QHX_FUZZ_CHECK(valid);
      QHX_FUZZ_CHECK(qhx::utf8::first_invalid(text) == text.size());
    });
    if (valid) check_stream(tok, ids, skip_special);
  } else {
    qhx::fuzz::expect_only_qhx_errors([&] { check_encode(tok, qhx::fuzz::as_text(rest, n), skip_special); });
  }
  return 0;
}
