// The fast kernels of the CPU backend: Google Highway SIMD with run-time
// dispatch (one binary picks SSE4/AVX2/AVX-512/NEON on the machine it runs
// on), multi-threaded through the pool of thread_pool.hpp. They compute in f32
// like the reference kernels (kernels_ref.hpp), but in a different summation
// order, and pass the same suite (tests/cpp/test_kernels.cpp).
//
//   linear      per weight format, parallel over output rows; each weight row
//               is dequantized in registers (never to memory) and, for m > 1,
//               used for up to 4 activation rows per pass over a tile of
//               activation rows that stays in L2
//   attention   parallel over (query, head); vectorized dots and exp
//   rms_norm, layer_norm, silu_mul, gelu_tanh, add_inplace, rope_rotate_half
//               vectorized (contrib/math Exp and Tanh: 1-2 ulp)
//   gelu_erf, gather_rows   the reference functions
#pragma once

#include "backends/cpu/kernel_set.hpp"

namespace qhx::cpu {

const KernelSet& fast_kernels();

}  // namespace qhx::cpu
