// Tokenizer unit tests. Exhaustive id parity with HF `tokenizers` is in
// tests/python/test_tokenizer_parity.py; these pin the pieces and the errors.
#include <gtest/gtest.h>

#include <random>

#include "test_support.hpp"
#include "tokenizer/byte_level.hpp"
#include "tokenizer/normalize_nfc.hpp"
#include "tokenizer/pretokenize_qwen.hpp"

namespace qhx {
namespace {

using Ids = std::vector<std::int32_t>;
using test::expect_error;
using test::qwen_tokenizer;

std::vector<std::string> split(std::string_view text) {
  std::vector<ByteSpan> spans;
  QwenSplitScratch scratch;
  split_qwen(text, spans, scratch);
  std::vector<std::string> out;
  for (auto s : spans) out.emplace_back(text.substr(s.begin, s.end - s.begin));
  return out;
}

using Chunks = std::vector<std::string>;

// Expected chunks follow from the regex's semantics (spec §7), checked against HF.
TEST(QwenPreTokenizer, WhitespaceLooksAhead) {
  EXPECT_EQ(split("a  b"), (Chunks{"a", " ", " b"}));
  EXPECT_EQ(split(" 2048"), (Chunks{" ", "2", "0", "4", "8"}));
  EXPECT_EQ(split("hello\r\n\r\n  world"), (Chunks{"hello", "\r\n\r\n", " ", " world"}));
  EXPECT_EQ(split("\t\tfoo"), (Chunks{"\t", "\tfoo"}));
  EXPECT_EQ(split("end  "), (Chunks{"end", "  "}));
  EXPECT_EQ(split("a\u3000\u3000b"), (Chunks{"a", "\u3000", "\u3000b"}));
  EXPECT_EQ(split("x\u200b\u200by"), (Chunks{"x", "\u200b\u200b", "y"}));  // U+200B is not White_Space
}

TEST(QwenPreTokenizer, ContractionsAreCaseInsensitive) {
  EXPECT_EQ(split("IT'S"), (Chunks{"IT", "'S"}));
  EXPECT_EQ(split("it'sx"), (Chunks{"it", "'s", "x"}));
  EXPECT_EQ(split("we'LLx"), (Chunks{"we", "'LL", "x"}));
  EXPECT_EQ(split("it'\u017fx"), (Chunks{"it", "'\u017f", "x"}));  // long s folds to s
  EXPECT_EQ(split("x'hello"), (Chunks{"x", "'hello"}));
}

TEST(QwenPreTokenizer, PunctuationKeepsTrailingNewlines) {
  EXPECT_EQ(split("a, b!!\n\nc"), (Chunks{"a", ",", " b", "!!\n\n", "c"}));
  EXPECT_EQ(split(" {}\n"), (Chunks{" {}\n"}));
}

TEST(Tokenizer, KnownIds) {
  const Tokenizer& tok = qwen_tokenizer();
  EXPECT_EQ(tok.vocab_size(), 151669);
  EXPECT_EQ(tok.encode("Describe this image."), (Ids{74785, 419, 2168, 13}));
  EXPECT_EQ(tok.encode("You are a helpful assistant."), (Ids{2610, 525, 264, 10950, 17847, 13}));
  EXPECT_EQ(tok.encode("\n"), (Ids{198}));
  EXPECT_EQ(tok.encode("user"), (Ids{872}));
  EXPECT_EQ(tok.encode("assistant"), (Ids{77091}));
  EXPECT_EQ(tok.encode(" "), (Ids{220}));
  EXPECT_TRUE(tok.encode("").empty());
}

TEST(Tokenizer, ChatPromptOfTheSpec) {
  // Spec §6's worked example with a 4-pad image instead of 256.
  const std::string prompt =
      "<|im_start|>user\n<|vision_start|><|image_pad|><|image_pad|><|image_pad|><|image_pad|><|vision_end|>"
      "Describe this image.<|im_end|>\n<|im_start|>assistant\n";
  EXPECT_EQ(qwen_tokenizer().encode(prompt), (Ids{151644, 872, 198, 151652, 151655, 151655, 151655, 151655, 151653,
                                                  74785, 419, 2168, 13, 151645, 198, 151644, 77091, 198}));
}

TEST(Tokenizer, AddedTokensMatchInRawTextLeftmostLongest) {
  const Tokenizer& tok = qwen_tokenizer();
  EXPECT_EQ(tok.encode("<think>"), (Ids{151667}));
  EXPECT_EQ(tok.encode("</think><think>"), (Ids{151668, 151667}));
  // A fragment is ordinary text.
  const Ids frag = tok.encode("<|im_start");
  EXPECT_EQ(std::count(frag.begin(), frag.end(), 151644), 0);
  EXPECT_EQ(tok.decode(frag), "<|im_start");
  EXPECT_TRUE(tok.is_special(151645));
  EXPECT_FALSE(tok.is_special(151667));
  EXPECT_FALSE(tok.is_special(9707));
  EXPECT_EQ(tok.token_to_id("<|im_end|>"), 151645);
  EXPECT_EQ(tok.token_to_id("\xC4\xA0"), 220);  // 'Ġ' is the byte-level space
  EXPECT_FALSE(tok.token_to_id("no such token").has_value());
}

TEST(Tokenizer, NfcBeforeSplitting) {
  const Tokenizer& tok = qwen_tokenizer();
  EXPECT_EQ(tok.encode("e\u0301"), tok.encode("\u00e9"));
  EXPECT_EQ(tok.decode(tok.encode("Cafe\u0301 A\u030a")), "Caf\u00e9 \u00c5");
}

TEST(Tokenizer, DecodeSkipsSpecialOnRequest) {
  const Tokenizer& tok = qwen_tokenizer();
  const Ids ids = tok.encode("<|im_start|>assistant\nHi<think><|im_end|>");
  EXPECT_EQ(tok.decode(ids), "<|im_start|>assistant\nHi<think><|im_end|>");
  EXPECT_EQ(tok.decode(ids, /*skip_special=*/true), "assistant\nHi<think>");
}

std::int32_t byte_id(unsigned char b) {
  return *qwen_tokenizer().token_to_id(byte_level::encode(std::string(1, static_cast<char>(b))));
}

TEST(Tokenizer, DecodeReplacesInvalidUtf8LikePython) {
  const Tokenizer& tok = qwen_tokenizer();
  // b"\xe4\xbd".decode("utf-8", "replace") == "\ufffd": one maximal subpart.
  EXPECT_EQ(tok.decode(Ids{byte_id(0xE4), byte_id(0xBD)}), "\uFFFD");
  // b"\xe4\xbd\xa0" is U+4F60.
  EXPECT_EQ(tok.decode(Ids{byte_id(0xE4), byte_id(0xBD), byte_id(0xA0)}), "\u4f60");
  // b"\xff\x80a" -> two replacements, then 'a'.
  EXPECT_EQ(tok.decode(Ids{byte_id(0xFF), byte_id(0x80), byte_id('a')}), "\uFFFD\uFFFDa");
}

TEST(Tokenizer, BadIdsAndTextAreErrors) {
  const Tokenizer& tok = qwen_tokenizer();
  expect_error([&] { (void)tok.decode(Ids{151669}); }, {"151669", "out of range"});
  expect_error([&] { (void)tok.decode(Ids{-1}); }, {"-1", "out of range"});
  expect_error([&] { (void)tok.encode("ok\xC3("); }, {"not valid UTF-8", "byte 2"});
}

TEST(StreamDecoder, NeverEmitsHalfACharacter) {
  const Tokenizer& tok = qwen_tokenizer();
  StreamDecoder dec(tok);
  EXPECT_EQ(dec.push(byte_id(0xE4)), "");
  EXPECT_EQ(dec.push(byte_id(0xBD)), "");
  EXPECT_EQ(dec.push(byte_id(0xA0)), "\u4f60");
  EXPECT_EQ(dec.push(byte_id(0xF0)), "");
  EXPECT_EQ(dec.push(byte_id('x')), "\uFFFDx");  // F0 can no longer complete
  EXPECT_EQ(dec.push(byte_id(0xE4)), "");
  EXPECT_EQ(dec.flush(), "\uFFFD");
}

TEST(StreamDecoder, ConcatenationEqualsFullDecode) {
  const Tokenizer& tok = qwen_tokenizer();
  std::mt19937 rng(1234);
  const Ids text = tok.encode("Grüße 你好 🙂👩‍👩‍👧 नमस्ते <|im_end|> end");
  for (int trial = 0; trial < 200; ++trial) {
    Ids ids;
    for (int k = 0; k < 40; ++k) {
      const auto r = rng() % 4;
      if (r == 0)
        ids.push_back(byte_id(static_cast<unsigned char>(rng() % 256)));
      else if (r == 1)
        ids.push_back(static_cast<std::int32_t>(rng() % 151669));
      else
        ids.push_back(text[rng() % text.size()]);
    }
    for (const bool skip : {false, true}) {
      StreamDecoder dec(tok, skip);
      std::string streamed;
      for (const auto id : ids) streamed += dec.push(id);
      streamed += dec.flush();
      ASSERT_EQ(streamed, tok.decode(ids, skip)) << "trial " << trial;
    }
  }
}

// Corrupt tokenizer.json files: each gives an error naming the file and the problem.
class CorruptTokenizer : public ::testing::Test {
 protected:
  static std::string real() { return test::read_file(test::tokenizer_json_path()); }
  static void expect_load_error(const std::string& json, std::initializer_list<std::string> fragments) {
    expect_error([&] { (void)Tokenizer::from_json(json, "bad/tokenizer.json"); }, fragments);
  }
  static std::string replace(std::string s, const std::string& from, const std::string& to) {
    const auto pos = s.find(from);
    EXPECT_NE(pos, std::string::npos) << from;
    return s.replace(pos, from.size(), to);
  }
};

TEST_F(CorruptTokenizer, Truncated) {
  expect_load_error(real().substr(0, 1000), {"bad/tokenizer.json", "not valid JSON"});
  expect_load_error("", {"bad/tokenizer.json", "not valid JSON"});
}

TEST_F(CorruptTokenizer, WrongShapes) {
  expect_load_error("[]", {"bad/tokenizer.json", "expected an object"});
  expect_load_error(replace(real(), "\"model\":", "\"modelx\":"), {"missing key \"model\""});
  expect_load_error(replace(real(), "\"!\": 0", "\"!\": \"zero\""), {"model.vocab[\"!\"]", "expected an integer"});
  expect_load_error(replace(real(), "\"!\": 0", "\"!\": -5"), {"model.vocab[\"!\"]", "out of range"});
  expect_load_error(replace(real(), "\"type\": \"NFC\"", "\"type\": \"NFKC\""), {"normalizer", "NFKC"});
  expect_load_error(replace(real(), "(?i:'s|'t|", "(?i:'t|"), {"pre_tokenizer", "not Qwen's"});
  expect_load_error(replace(real(), "\"lstrip\": false", "\"lstrip\": true"), {"added_tokens[0].lstrip"});
}

TEST_F(CorruptTokenizer, MergeOfUnknownToken) {
  expect_load_error(replace(real(), "[\n        \"i\",\n        \"n\"\n      ]", "[\"i\", \"\xE2\x82\xAC\"]"),
                    {"model.merges[2]", "not in the vocab"});
}

TEST(TokenizerFile, MissingFile) {
  expect_error([] { (void)Tokenizer::load("/nonexistent/tokenizer.json"); },
               {"/nonexistent/tokenizer.json", "cannot open"});
}

// HF's Unicode tables are of two ages (docs/tokenizer.md): its regex classes are
// Unicode 16.0, its NFC Unicode 9.0. Expectations taken from HF tokenizers 0.22.2.
TEST(TokenizerUnicodeVersions, RegexClassesAreUnicode16) {
  // U+10D50 GARAY CAPITAL LETTER A and U+10D40/1 GARAY DIGITs (16.0); U+2EBF0 CJK Ext I (15.1).
  EXPECT_EQ(split("\U00010D50'sm"), (Chunks{"\U00010D50", "'s", "m"}));
  EXPECT_EQ(split("\U00010D40\U00010D41x"), (Chunks{"\U00010D40", "\U00010D41", "x"}));
  EXPECT_EQ(split("a\U0002EBF0b"), (Chunks{"a\U0002EBF0b"}));
  const Tokenizer& tok = qwen_tokenizer();
  EXPECT_EQ(tok.encode("\U00010D50'sm"), (Ids{123934, 113, 238, 594, 76}));
  EXPECT_EQ(tok.encode("\U00010D40\U00010D41x"), (Ids{123934, 113, 222, 123934, 113, 223, 87}));
}

TEST(TokenizerUnicodeVersions, NfcIsUnicode9) {
  auto nfc = [](std::string_view s) {
    std::string out;
    nfc_as_hf(s, out);
    return out;
  };
  EXPECT_EQ(nfc("a\u0301"), "\u00e1");
  EXPECT_EQ(nfc("x\u0301\u0316"), "x\u0316\u0301");
  EXPECT_EQ(nfc("\u1100\u1161\u11a8"), "\uac01");
  // U+1ABF (13.0, ccc 220 today) is an opaque starter to HF: no reordering, no composition across it.
  EXPECT_EQ(nfc("a\u1abf\u0301"), "a\u1abf\u0301");
  EXPECT_EQ(nfc("e\u0316\u1dfa\u0301"), "e\u0316\u1dfa\u0301");
  // U+11935 U+11930 compose to U+11938 since 13.0; not for HF.
  EXPECT_EQ(nfc("\U00011935\U00011930"), "\U00011935\U00011930");
  // LV + U+11A7 (not a trailing consonant) stays; utf8proc 2.8 alone would drop U+11A7.
  EXPECT_EQ(nfc("\uac00\u11a7"), "\uac00\u11a7");
  const Tokenizer& tok = qwen_tokenizer();
  EXPECT_EQ(tok.encode("a\u1abf\u0301"), (Ids{64, 157, 103, 123, 53839}));
  EXPECT_EQ(tok.encode("\U00011935\U00011930"), (Ids{128240, 97, 113, 128240, 97, 108}));
  EXPECT_EQ(tok.encode("\uac00\u11a7"), (Ids{19969, 124137, 100}));
}

}  // namespace
}  // namespace qhx
