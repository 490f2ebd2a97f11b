// How a CPU graph's weight matrices meet the kernels, read from the graph's
// manifest entry once at init (docs/manifest.md, "activations"):
//   "activations": "int8"  w8 matrices take the int8 path (int8_matmul.hpp):
//                          activations quantized per row at run time; the default
//                  "f32"   every matrix is widened to f32 in registers: exact
//                          with respect to the stored weights, slower
// Matrices of other formats always compute in f32.
#pragma once

#include "backends/cpu/kernel_set.hpp"
#include "backends/cpu/weights.hpp"
#include "backends/delegate.hpp"

namespace qhx::cpu {

struct KernelPlan {
  const KernelSet* kernels = nullptr;
  bool int8_activations = true;
};

// The plan for blob on the active kernel set. Throws qhx::Error naming the
// graph if "activations" is not one of the values above.
KernelPlan kernel_plan(const GraphBlob& blob);

// Marks w for the plan's arithmetic and lets the kernel set repack it (done
// once per matrix, at load; the stored matrix stays mapped and untouched).
void prepare(const KernelPlan& plan, WeightMatrix& w);

}  // namespace qhx::cpu
