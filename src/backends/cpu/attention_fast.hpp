// The fast attention kernels (attention_fast.cpp), the KernelSet's attention,
// attention_f16kv and attention_i8kv in fast_kernels() (kernels_fast.hpp says
// which path serves which call). Internal to the CPU backend.
#pragma once

#include <cstdint>

namespace qhx::cpu::fast {

void attention(const float* q, const float* k, const float* v, std::int64_t t, std::int64_t n, std::int64_t hq,
               std::int64_t hkv, std::int64_t d, std::int64_t start, float scale, bool causal, float* out);
void attention_f16kv(const float* q, const std::uint16_t* k, const std::uint16_t* v, std::int64_t t, std::int64_t n,
                     std::int64_t ctx, std::int64_t hq, std::int64_t hkv, std::int64_t d, std::int64_t start,
                     float scale, bool causal, float* out);
void attention_i8kv(const float* q, const std::int8_t* k, const std::int8_t* v, std::int64_t t, std::int64_t n,
                    std::int64_t ctx, std::int64_t hq, std::int64_t hkv, std::int64_t d, std::int64_t start,
                    float scale, float* out);

}  // namespace qhx::cpu::fast
