// bf16 <-> f32 (at the end), and IEEE 754 binary16 (f16) <-> f32, bit-exact and independent of the FPU's
// rounding mode. Widening is exact (every f16 is an f32). Narrowing rounds to
// nearest, ties to even, as numpy's astype(float16) and torch do: magnitudes
// from 65520 up become infinity, those below 2^-25 (and 2^-25 itself, a tie
// with the even zero) become zero, NaN stays NaN (quiet, payload kept where it fits).
#pragma once

#include <cstdint>
#include <cstring>

namespace qhx {

inline float f16_to_f32(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1Fu;
  const std::uint32_t mant = h & 0x3FFu;
  std::uint32_t bits = 0;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (mant << 13);  // infinity or NaN
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);  // rebias 15 -> 127
  } else if (mant == 0) {
    bits = sign;  // signed zero
  } else {
    const float f = static_cast<float>(mant) * 0x1p-24f;  // subnormal: mant * 2^-24, exact in f32
    return sign != 0 ? -f : f;
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline std::uint16_t f32_to_f16(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  x &= 0x7FFFFFFFu;
  if (x >= 0x7F800000u) {  // infinity or NaN
    const std::uint32_t nan = x > 0x7F800000u ? (0x200u | ((x >> 13) & 0x3FFu)) : 0u;
    return static_cast<std::uint16_t>(sign | 0x7C00u | nan);
  }
  if (x >= 0x477FF000u) return static_cast<std::uint16_t>(sign | 0x7C00u);  // >= 65520: rounds past 65504
  if (x >= 0x38800000u) {                                                   // >= 2^-14: a normal f16
    std::uint32_t m = x - (112u << 23);                                     // rebias 127 -> 15
    m += 0xFFFu + ((m >> 13) & 1u);  // round the 13 dropped bits to nearest even (a carry bumps the exponent)
    return static_cast<std::uint16_t>(sign | (m >> 13));
  }
  // A subnormal f16 (or zero): the value in units of 2^-24, rounded to nearest even.
  // f32 normal: value = mant24 * 2^(e - 150), i.e. mant24 >> (126 - e) units; f32 subnormals are far below 2^-25.
  const std::uint32_t e = x >> 23;
  if (e == 0) return sign;
  const std::uint32_t mant24 = (x & 0x7FFFFFu) | 0x800000u;
  const std::uint32_t shift = 126 - e;  // >= 14, since e <= 112 here
  if (shift > 24) return sign;          // value < 2^-25: rounds to zero
  std::uint32_t q = mant24 >> shift;
  const std::uint32_t rem = mant24 & ((1u << shift) - 1u);
  const std::uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u) != 0)) ++q;  // q == 1024 is the smallest normal: still right
  return static_cast<std::uint16_t>(sign | q);
}

// bf16: the upper half of an f32. Widening is a shift; narrowing rounds to
// nearest, ties to even (as torch's .to(bfloat16)), for finite inputs (a value
// within half a bf16 ulp of FLT_MAX rounds to infinity).
inline float bf16_to_f32(std::uint16_t v) {
  const std::uint32_t bits = static_cast<std::uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline std::uint16_t f32_to_bf16(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  x += 0x7FFFu + ((x >> 16) & 1u);
  return static_cast<std::uint16_t>(x >> 16);
}

}  // namespace qhx
