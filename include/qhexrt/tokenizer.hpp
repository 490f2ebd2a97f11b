// qhexrt/tokenizer.hpp — Qwen2/Qwen3 byte-level BPE from a Hugging Face tokenizer.json.
//
// Encoding (identical to HF `tokenizers`): added tokens are matched in the raw
// text first (leftmost, longest); every other span is NFC-normalized, split by
// Qwen's pre-tokenizer regex, mapped byte -> printable char (GPT-2 table) and
// merged by BPE rank. No BOS/EOS is added.
// Decoding: tokens -> bytes, then UTF-8 with U+FFFD for each maximal invalid
// subsequence (Python errors="replace").
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace qhx {

class Tokenizer {
 public:
  // Throws qhx::Error naming the file and the problem.
  static Tokenizer load(const std::filesystem::path& tokenizer_json);
  // `source` names the text in error messages.
  static Tokenizer from_json(std::string_view json_text, std::string_view source);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Throws qhx::Error if `text` is not valid UTF-8.
  std::vector<std::int32_t> encode(std::string_view text) const;
  // Throws qhx::Error on an id outside [0, vocab_size()).
  std::string decode(std::span<const std::int32_t> ids, bool skip_special = false) const;

  // Number of ids: BPE vocab plus added tokens (151669 for Qwen3).
  std::int32_t vocab_size() const;
  // Id of a token string (an added token's content, or a vocab entry in byte-level form).
  std::optional<std::int32_t> token_to_id(std::string_view token) const;
  // The raw bytes an id decodes to (may be partial UTF-8). Throws on a bad id.
  std::string_view token_bytes(std::int32_t id) const;
  // True for added tokens flagged "special" (dropped by skip_special decoding).
  bool is_special(std::int32_t id) const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Token-by-token decoding that never emits half a UTF-8 sequence: bytes of an
// incomplete trailing sequence are held back until they complete (or are
// proven invalid). The concatenation of every push() and the final flush()
// equals Tokenizer::decode of all ids.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok, bool skip_special = true);
  std::string push(std::int32_t id);
  std::string flush();

 private:
  const Tokenizer* tok_;
  bool skip_special_;
  std::string pending_;  // undecided trailing bytes (at most 3)
};

}  // namespace qhx
