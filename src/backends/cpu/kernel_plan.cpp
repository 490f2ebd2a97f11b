#include "backends/cpu/kernel_plan.hpp"

#include "qhexrt/error.hpp"

namespace qhx::cpu {

KernelPlan kernel_plan(const GraphBlob& blob) {
  KernelPlan plan;
  plan.kernels = &active_kernels();
  const auto it = blob.spec.find("activations");
  if (it == blob.spec.end()) return plan;
  if (!it->is_string() || (*it != "int8" && *it != "f32"))
    fail("graph \"", blob.name, "\": \"activations\" must be \"int8\" or \"f32\", not ", it->dump());
  plan.int8_activations = *it == "int8";
  return plan;
}

void prepare(const KernelPlan& plan, WeightMatrix& w) {
  w.int8_activations = plan.int8_activations && w.dtype == DType::I8;
  w.packed = plan.kernels->pack(w);
}

}  // namespace qhx::cpu
