// Loading a Hugging Face tokenizer.json (Qwen2/Qwen3 flavour) and the
// encode/decode pipelines. The file is 11 MB of JSON, so it is parsed with
// simdjson: the load time is most of a pipeline's open once the weights are mapped.
#include "qhexrt/tokenizer.hpp"

#include <simdjson.h>

#include <algorithm>
#include <cstdlib>
#include <unordered_map>

#include "common/json_limits.hpp"
#include "common/limits.hpp"
#include "common/mapped_file.hpp"
#include "common/utf8.hpp"
#include "qhexrt/error.hpp"
#include "tokenizer/bpe.hpp"
#include "tokenizer/byte_level.hpp"
#include "tokenizer/normalize_nfc.hpp"
#include "tokenizer/pretokenize_qwen.hpp"
#include "tokenizer/token_index.hpp"

namespace qhx {
namespace {

using simdjson::dom::element;
using simdjson::dom::object;

// Reading helpers: every failure names the source and the JSON path.
struct Reader {
  std::string_view source;

  [[noreturn]] void bad(std::string_view path, std::string_view what) const { fail(source, ": ", path, ": ", what); }
  object obj(element e, std::string_view path) const {
    object o;
    if (e.get(o) != simdjson::SUCCESS) bad(path, "expected an object");
    return o;
  }
  simdjson::dom::array arr(element e, std::string_view path) const {
    simdjson::dom::array a;
    if (e.get(a) != simdjson::SUCCESS) bad(path, "expected an array");
    return a;
  }
  std::string_view str(element e, std::string_view path) const {
    std::string_view s;
    if (e.get(s) != simdjson::SUCCESS) bad(path, "expected a string");
    return s;
  }
  std::int64_t int64(element e, std::string_view path) const {
    std::int64_t v = 0;
    if (e.get(v) != simdjson::SUCCESS) bad(path, "expected an integer");
    return v;
  }
  bool boolean(element e, std::string_view path) const {
    bool v = false;
    if (e.get(v) != simdjson::SUCCESS) bad(path, "expected true or false");
    return v;
  }
  // The member, or a null element pointer-equivalent when absent.
  bool has(object o, std::string_view key, element& out) const { return o.at_key(key).get(out) == simdjson::SUCCESS; }
  element need(object o, std::string_view key, std::string_view path) const {
    element e;
    if (!has(o, key, e)) bad(path, cat("missing key \"", key, "\""));
    return e;
  }
  // The "type" member of a component object.
  std::string_view type_of(object o, std::string_view path) const {
    return str(need(o, "type", path), cat(path, ".type"));
  }
  std::string_view type_of(element e, std::string_view path) const { return type_of(obj(e, path), path); }
};

constexpr std::int64_t kMaxTokens = limits::kVocabularyTokens;

std::string id_range(std::int64_t id) {
  return cat("id ", id, " out of range [0, ", kMaxTokens, ") (limits::kVocabularyTokens, docs/limits.md)");
}

struct AddedToken {
  std::string content;
  std::int32_t id;
  bool special;
};

}  // namespace

struct Tokenizer::Impl {
  bool nfc = true;
  Bpe bpe;
  std::vector<AddedToken> added;              // longest first, for leftmost-longest matching
  std::array<bool, 256> added_first_byte{};   // bytes that can start an added token
  std::string vocab_text;                     // every vocab token's byte-level text, back to back
  std::vector<std::string_view> id_to_token;  // views into vocab_text; empty for added-only ids
  TokenIndex token_ids;
  std::unordered_map<std::string, std::int32_t> added_ids;
  std::vector<std::size_t> bytes_offset;  // token_bytes(id) = bytes_data[offset[id], offset[id+1])
  std::string bytes_data;
  std::vector<bool> special;

  void load(const simdjson::padded_string& json, std::string_view source);
  void encode_span(std::string_view text, std::vector<std::int32_t>& out, QwenSplitScratch& scratch,
                   std::vector<ByteSpan>& chunks) const;
};

void Tokenizer::Impl::load(const simdjson::padded_string& json, std::string_view source) {
  const Reader r{source};
  simdjson::dom::parser parser;
  if (auto err = parser.allocate(json.size(), limits::kJsonDepth); err != simdjson::SUCCESS)
    fail(source, ": cannot parse (", simdjson::error_message(err), ")");
  element root;
  if (auto err = parser.parse(json).get(root); err != simdjson::SUCCESS) {
    if (err == simdjson::DEPTH_ERROR)
      fail(source, ": JSON nests deeper than ", limits::kJsonDepth, " levels (limits::kJsonDepth, docs/limits.md)");
    fail(source, ": not valid JSON (", simdjson::error_message(err), ")");
  }
  const object top = r.obj(root, "(root)");

  // normalizer: NFC or none.
  element e;
  if (r.has(top, "normalizer", e) && !e.is_null()) {
    const auto t = r.type_of(e, "normalizer");
    if (t != "NFC") r.bad("normalizer.type", cat("unsupported normalizer \"", t, "\" (QHexRT implements NFC)"));
  } else {
    nfc = false;
  }

  // pre_tokenizer: Qwen's Split regex followed by ByteLevel without its own regex.
  {
    const object pre = r.obj(r.need(top, "pre_tokenizer", "(root)"), "pre_tokenizer");
    const auto unsupported = [&](std::string_view why) {
      r.bad("pre_tokenizer",
            cat("unsupported pre-tokenizer: ", why, " (QHexRT implements Qwen2's Split regex + ByteLevel)"));
    };
    if (r.type_of(pre, "pre_tokenizer") != "Sequence") unsupported("not a Sequence");
    auto seq = r.arr(r.need(pre, "pretokenizers", "pre_tokenizer"), "pre_tokenizer.pretokenizers");
    if (seq.size() != 2) unsupported("expected 2 steps");
    const object split = r.obj(seq.at(0).value(), "pre_tokenizer.pretokenizers[0]");
    if (r.type_of(split, "pre_tokenizer.pretokenizers[0]") != "Split") unsupported("first step is not Split");
    const object pattern =
        r.obj(r.need(split, "pattern", "pre_tokenizer.pretokenizers[0]"), "pre_tokenizer.pretokenizers[0].pattern");
    element regex;
    if (!r.has(pattern, "Regex", regex) ||
        r.str(regex, "pre_tokenizer.pretokenizers[0].pattern.Regex") != kQwenSplitPattern)
      unsupported("the Split regex is not Qwen's");
    if (r.str(r.need(split, "behavior", "pre_tokenizer.pretokenizers[0]"), "behavior") != "Isolated")
      unsupported("Split behavior is not Isolated");
    if (r.boolean(r.need(split, "invert", "pre_tokenizer.pretokenizers[0]"), "invert")) unsupported("inverted Split");
    const object bl = r.obj(seq.at(1).value(), "pre_tokenizer.pretokenizers[1]");
    if (r.type_of(bl, "pre_tokenizer.pretokenizers[1]") != "ByteLevel") unsupported("second step is not ByteLevel");
    element flag;
    if (r.has(bl, "use_regex", flag) && r.boolean(flag, "use_regex")) unsupported("ByteLevel with use_regex");
    if (r.has(bl, "add_prefix_space", flag) && r.boolean(flag, "add_prefix_space"))
      unsupported("ByteLevel with add_prefix_space");
  }
  if (r.type_of(r.need(top, "decoder", "(root)"), "decoder") != "ByteLevel")
    r.bad("decoder.type", "unsupported decoder (QHexRT implements ByteLevel)");

  // model: BPE.
  const object model = r.obj(r.need(top, "model", "(root)"), "model");
  if (r.has(model, "type", e) && r.str(e, "model.type") != "BPE") r.bad("model.type", "expected \"BPE\"");
  if (r.has(model, "dropout", e) && !e.is_null()) r.bad("model.dropout", "BPE dropout is not supported");
  if (r.has(model, "byte_fallback", e) && r.boolean(e, "model.byte_fallback"))
    r.bad("model.byte_fallback", "byte fallback is not supported");
  if (r.has(model, "ignore_merges", e) && r.boolean(e, "model.ignore_merges"))
    r.bad("model.ignore_merges", "ignore_merges is not supported");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (r.has(model, key, e) && !e.is_null() && !r.str(e, cat("model.", key)).empty())
      r.bad(cat("model.", key), "must be empty");

  const object vocab = r.obj(r.need(model, "vocab", "model"), "model.vocab");
  // Token strings are copied once into one buffer; the id map views into it.
  std::size_t text_size = 0;
  for (auto [key, value] : vocab) text_size += key.size();
  vocab_text.reserve(text_size);
  id_to_token.reserve(vocab.size());
  for (auto [key, value] : vocab) {
    std::int64_t id = 0;
    if (value.get(id) != simdjson::SUCCESS) r.bad(cat("model.vocab[\"", key, "\"]"), "expected an integer id");
    if (id < 0 || id >= kMaxTokens) r.bad(cat("model.vocab[\"", key, "\"]"), id_range(id));
    if (key.empty()) r.bad("model.vocab", "empty token string");
    const auto uid = static_cast<std::size_t>(id);
    if (uid >= id_to_token.size()) id_to_token.resize(uid + 1);
    if (!id_to_token[uid].empty()) r.bad(cat("model.vocab[\"", key, "\"]"), cat("id ", id, " used twice"));
    const std::string_view owned(vocab_text.data() + vocab_text.size(), key.size());
    vocab_text.append(key);
    id_to_token[uid] = owned;
  }
  token_ids.build(&id_to_token);

  std::array<std::int32_t, 256> byte_ids{};
  for (unsigned b = 0; b < 256; ++b) {
    std::string sym;
    utf8::append(sym, byte_level::char_of_byte(static_cast<unsigned char>(b)));
    const auto id = token_ids.find(sym);
    if (!id) r.bad("model.vocab", cat("no token for byte 0x", std::hex, b));
    byte_ids[b] = *id;
  }
  bpe.set_byte_ids(byte_ids);

  simdjson::dom::array merges;
  if (r.need(model, "merges", "model").get(merges) != simdjson::SUCCESS) r.bad("model.merges", "expected an array");
  bpe.reserve(merges.size());
  std::int32_t rank = 0;
  std::string joined;
  for (element m : merges) {
    // Paths are built only on failure: this loop runs 151k times.
    std::string_view left, right, as_string;
    simdjson::dom::array pair;
    if (m.get(as_string) == simdjson::SUCCESS) {  // older "left right" spelling
      const auto space = as_string.find(' ');
      if (space == std::string_view::npos) r.bad(cat("model.merges[", rank, "]"), "expected \"left right\"");
      left = as_string.substr(0, space);
      right = as_string.substr(space + 1);
    } else if (m.get(pair) != simdjson::SUCCESS || pair.size() != 2 || pair.at(0).get(left) != simdjson::SUCCESS ||
               pair.at(1).get(right) != simdjson::SUCCESS) {
      r.bad(cat("model.merges[", rank, "]"), "expected a pair of strings");
    }
    joined.assign(left).append(right);
    const auto a = token_ids.find(left);
    const auto b = token_ids.find(right);
    const auto ab = token_ids.find(joined);
    if (!a || !b || !ab)
      r.bad(cat("model.merges[", rank, "]"),
            cat("merge \"", left, "\" + \"", right, "\" refers to a token not in the vocab"));
    bpe.add_merge(rank, *a, *b, *ab);
    ++rank;
  }

  // added_tokens: matched in the raw text, before normalization.
  element added_json;
  if (r.has(top, "added_tokens", added_json)) {
    std::size_t k = 0;
    for (element t : r.arr(added_json, "added_tokens")) {
      const std::string path = cat("added_tokens[", k++, "]");
      const object o = r.obj(t, path);
      const std::int64_t id = r.int64(r.need(o, "id", path), path + ".id");
      if (id < 0 || id >= kMaxTokens) r.bad(path + ".id", id_range(id));
      const std::string_view content = r.str(r.need(o, "content", path), path + ".content");
      if (content.empty()) r.bad(path + ".content", "empty");
      if (utf8::first_invalid(content) != content.size()) r.bad(path + ".content", "not valid UTF-8");
      for (const char* flag : {"lstrip", "rstrip", "single_word", "normalized"})
        if (r.has(o, flag, e) && r.boolean(e, path + "." + flag)) r.bad(path + "." + flag, "true is not supported");
      const bool is_special = r.has(o, "special", e) && r.boolean(e, path + ".special");
      added.push_back({std::string(content), static_cast<std::int32_t>(id), is_special});
      if (static_cast<std::size_t>(id) >= id_to_token.size()) id_to_token.resize(static_cast<std::size_t>(id) + 1);
      added_ids.emplace(std::string(content), static_cast<std::int32_t>(id));
    }
  }
  std::stable_sort(added.begin(), added.end(),
                   [](const AddedToken& x, const AddedToken& y) { return x.content.size() > y.content.size(); });
  for (const auto& t : added) added_first_byte[static_cast<unsigned char>(t.content[0])] = true;

  // Raw bytes of every id, for decoding. Added tokens are their content.
  special.assign(id_to_token.size(), false);
  std::vector<const AddedToken*> added_by_id(id_to_token.size(), nullptr);
  for (const auto& t : added) {
    added_by_id[static_cast<std::size_t>(t.id)] = &t;
    special[static_cast<std::size_t>(t.id)] = t.special;
  }
  bytes_offset.assign(1, 0);
  bytes_offset.reserve(id_to_token.size() + 1);
  for (std::size_t id = 0; id < id_to_token.size(); ++id) {
    if (added_by_id[id] != nullptr) {
      // HF runs added tokens through the ByteLevel decoder too, falling back to
      // their UTF-8 text when a character is outside the byte alphabet.
      const auto mapped = byte_level::decode(added_by_id[id]->content);
      bytes_data += mapped ? *mapped : added_by_id[id]->content;
    } else {
      if (id_to_token[id].empty()) r.bad("model.vocab", cat("no token has id ", id, " (ids must be contiguous)"));
      const auto mapped = byte_level::decode(id_to_token[id]);
      if (!mapped) r.bad("model.vocab", cat("token id ", id, " is not in the byte-level alphabet"));
      bytes_data += *mapped;
    }
    bytes_offset.push_back(bytes_data.size());
  }
}

void Tokenizer::Impl::encode_span(std::string_view text, std::vector<std::int32_t>& out, QwenSplitScratch& scratch,
                                  std::vector<ByteSpan>& chunks) const {
  if (text.empty()) return;
  std::string normalized;
  if (nfc && std::any_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) >= 0x80; })) {
    nfc_as_hf(text, normalized);  // HF's NFC: Unicode 9.0 data (see normalize_nfc.hpp)
    text = normalized;
  }
  chunks.clear();
  split_qwen(text, chunks, scratch);
  for (const ByteSpan& c : chunks) bpe.encode(text.substr(c.begin, c.end - c.begin), out);
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_json(std::string_view json_text, std::string_view source) {
  check_json_file_size(json_text.size(), limits::kTokenizerJsonBytes, source, "limits::kTokenizerJsonBytes");
  auto impl = std::make_unique<Impl>();
  impl->load(simdjson::padded_string(json_text), source);
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::load(const std::filesystem::path& path) {
  const MappedFile file(path);  // names the path in its errors
  check_json_file_size(file.size(), limits::kTokenizerJsonBytes, path.string(), "limits::kTokenizerJsonBytes");
  // The copy for simdjson is taken while mapped; the parse is of the copy.
  auto json = file.parse(
      [](const MappedFile& f) { return simdjson::padded_string(reinterpret_cast<const char*>(f.data()), f.size()); });
  auto impl = std::make_unique<Impl>();
  impl->load(json, path.string());
  return Tokenizer(std::move(impl));
}

std::vector<std::int32_t> Tokenizer::encode(std::string_view text) const {
  if (const auto bad = utf8::first_invalid(text); bad != text.size())
    fail("text to encode is not valid UTF-8 (byte ", bad, ")");
  std::vector<std::int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  QwenSplitScratch scratch;
  std::vector<ByteSpan> chunks;
  std::size_t span_start = 0;
  for (std::size_t i = 0; i < text.size();) {
    if (impl_->added_first_byte[static_cast<unsigned char>(text[i])]) {
      const AddedToken* match = nullptr;
      for (const auto& t : impl_->added)  // longest first: the first hit is leftmost-longest
        if (text.compare(i, t.content.size(), t.content) == 0) {
          match = &t;
          break;
        }
      if (match != nullptr) {
        impl_->encode_span(text.substr(span_start, i - span_start), ids, scratch, chunks);
        ids.push_back(match->id);
        i += match->content.size();
        span_start = i;
        continue;
      }
    }
    ++i;
  }
  impl_->encode_span(text.substr(span_start), ids, scratch, chunks);
  return ids;
}

std::string Tokenizer::decode(std::span<const std::int32_t> ids, bool skip_special) const {
  std::string bytes;
  for (const std::int32_t id : ids) {
    if (skip_special && is_special(id)) continue;
    bytes += token_bytes(id);
  }
  return utf8::to_valid_lossy(bytes);
}

std::int32_t Tokenizer::vocab_size() const { return static_cast<std::int32_t>(impl_->special.size()); }

std::optional<std::int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (const auto it = impl_->added_ids.find(std::string(token)); it != impl_->added_ids.end()) return it->second;
  return impl_->token_ids.find(token);
}

std::string_view Tokenizer::token_bytes(std::int32_t id) const {
  if (id < 0 || id >= vocab_size()) fail("token id ", id, " out of range [0, ", vocab_size(), ")");
  const auto u = static_cast<std::size_t>(id);
  return std::string_view(impl_->bytes_data)
      .substr(impl_->bytes_offset[u], impl_->bytes_offset[u + 1] - impl_->bytes_offset[u]);
}

bool Tokenizer::is_special(std::int32_t id) const {
  if (id < 0 || id >= vocab_size()) fail("token id ", id, " out of range [0, ", vocab_size(), ")");
  return impl_->special[static_cast<std::size_t>(id)];
}

}  // namespace qhx
