// UTF-8 helpers. Expected strings are what Python's bytes.decode("utf-8",
// "replace") gives (the Unicode Standard's "maximal subpart" practice).
#include <gtest/gtest.h>

#include "common/utf8.hpp"

namespace qhx::utf8 {
namespace {

const std::string R = "\uFFFD";

TEST(Utf8, LossyDecodingMatchesPython) {
  EXPECT_EQ(to_valid_lossy("\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64"),
            "a" + R + R + R + "b" + R + "c" + R + R + "d");
  EXPECT_EQ(to_valid_lossy("\xED\xA0\x80"), R + R + R);          // a surrogate is never well-formed
  EXPECT_EQ(to_valid_lossy("\xF4\x90\x80\x80"), R + R + R + R);  // beyond U+10FFFF
  EXPECT_EQ(to_valid_lossy("\xC0\xAF"), R + R);                  // overlong
  EXPECT_EQ(to_valid_lossy("\xE0\x80\xAF"), R + R + R);
  EXPECT_EQ(to_valid_lossy("\xF0\x9F\x98"), R);  // truncated: one maximal subpart
  EXPECT_EQ(to_valid_lossy("\xF0\x9F\x98\x80"), "\U0001F600");
  EXPECT_EQ(to_valid_lossy(std::string("a\0b", 3)), std::string("a\0b", 3));
}

TEST(Utf8, FirstInvalid) {
  EXPECT_EQ(first_invalid("plain"), 5u);
  EXPECT_EQ(first_invalid("\u4f60\u597d"), 6u);
  EXPECT_EQ(first_invalid("ab\xE4\xBD"), 2u);
  EXPECT_EQ(first_invalid("ab\x80"), 2u);
}

TEST(Utf8, StablePrefixHoldsBackOnlyAPossibleSequence) {
  EXPECT_EQ(stable_prefix_length("ab"), 2u);
  EXPECT_EQ(stable_prefix_length("ab\xE4"), 2u);
  EXPECT_EQ(stable_prefix_length("ab\xE4\xBD"), 2u);
  EXPECT_EQ(stable_prefix_length("ab\xE4\xBD\xA0"), 5u);
  EXPECT_EQ(stable_prefix_length("ab\xF0\x9F\x98"), 2u);
  EXPECT_EQ(stable_prefix_length("ab\xE4\x41"), 4u);  // cannot complete any more
  EXPECT_EQ(stable_prefix_length("ab\xFF"), 3u);
  EXPECT_EQ(stable_prefix_length("\xE0\x80"), 2u);  // E0 80 is ill-formed at once
}

TEST(Utf8, AppendAndDecodeRoundTrip) {
  for (const char32_t cp : {0x24u, 0xA2u, 0x20ACu, 0x10348u, 0x10FFFFu}) {
    std::string s;
    append(s, cp);
    std::size_t len = 0;
    EXPECT_EQ(decode(s, 0, len), cp);
    EXPECT_EQ(len, s.size());
    EXPECT_EQ(first_invalid(s), s.size());
  }
}

}  // namespace
}  // namespace qhx::utf8
