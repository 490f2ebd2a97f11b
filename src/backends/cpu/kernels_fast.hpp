// The fast kernels of the CPU backend: Google Highway SIMD with run-time
// dispatch (one binary picks SSE4/AVX2/AVX-512/NEON on the machine it runs
// on), multi-threaded through the pool of thread_pool.hpp. They compute in f32
// like the reference kernels (kernels_ref.hpp), but in a different summation
// order, and pass the same suite (tests/cpp/test_kernels.cpp). The attention
// kernels are in attention_fast.cpp, the rest in kernels_fast.cpp; the vector
// helpers both use in vector_helpers-inl.h.
//
//   linear      w8 matrices on the int8 path (int8_matmul.hpp): activations
//               quantized per row, weights repacked at load (`pack`) into panels
//               for the CPU's int8 kernel (AVX-512 VNNI, NEON dotprod, or portable).
//               Every other case per weight format, parallel over output rows; each
//               weight row is dequantized in registers (never to memory) and, for
//               m > 1, used for up to 4 activation rows per pass over a tile of
//               activation rows that stays in L2
//   linear_then linear, with the step run by the thread that computed each block,
//               right after it (the int8 path: 64 rows of a piece of panels; the
//               f32 path: all rows of a range of output columns)
//   attention   many non-causal queries (vision): blocks of 8 queries, S = Q·Kᵀ
//               with K transposed per KV head, softmax, O = P·V, register-tiled;
//               causal (decoder prefill and decode, any number of queries): the
//               query heads of one KV head together, each key/value row read once,
//               the outputs kept in registers; other head sizes: parallel over
//               (query, head). A causal call's rows never depend on how many
//               queries share the call (chunked prefill == one pass, bit for bit)
//   attention_f16kv  the per-query paths of attention over an f16 KV cache
//               [hkv, ctx, d], widened as it loads (the decoder's cache with
//               "kv_cache": "f16"); a head's rows are one sequential stream
//   attention_i8kv   the same paths over the 8-bit cache (kv_cache_i8.hpp): scores
//               from exact int16 x int8 sums (16 keys' sums folded into one
//               vector), value rows widened exactly, each row's scale applied to
//               its score and its weight; a head's rows are one sequential stream
//   to_f16      the hardware's round-to-nearest-even conversion (F16C, NEON fcvt)
//   attention_i8  int8_attention.hpp's contract on the int8 kernel linear uses
//   rms_norm, layer_norm, silu_mul, gelu_tanh, add_inplace, rope_rotate_half
//               vectorized (contrib/math Exp and Tanh: 1-2 ulp)
//   gelu_erf    the reference function, split across the pool
//   gather_rows the reference function
#pragma once

#include <string_view>
#include <vector>

#include "backends/cpu/kernel_set.hpp"

namespace qhx::cpu {

const KernelSet& fast_kernels();

// Highway's name for the SIMD target the fast kernels dispatch to on this CPU
// ("AVX3", "AVX2", "NEON", ...), and every target this build has that the CPU
// runs, best first (qhx_doctor reports them).
std::string_view fast_kernels_target();
std::vector<std::string_view> fast_kernels_targets();

}  // namespace qhx::cpu
