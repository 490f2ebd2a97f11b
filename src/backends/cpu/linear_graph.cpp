// Graph kind "linear" on the CPU: y = x · Wᵀ for one weight matrix from a
// checkpoint — the lm-head. The entry's "tensor" is a name or a list of
// names; the first one present is used, which is how a tied lm-head falls
// back to the token embedding table when lm_head.weight is not stored.
//
// inputs   x  f32 [T, in]
// outputs  y  f32 [T, out]
#include <optional>

#include "backends/cpu/checkpoint_weights.hpp"
#include "backends/cpu/kernel_plan.hpp"
#include "backends/cpu/kernel_set.hpp"
#include "backends/delegate.hpp"
#include "qhexrt/error.hpp"
#include "qhexrt/safetensors.hpp"

namespace qhx::cpu {
namespace {

class LinearGraph final : public Delegate {
 public:
  void init(const GraphBlob& blob) override {
    name_ = blob.name;
    const KernelPlan plan = kernel_plan(blob);
    ckpt_.emplace(open_streamed_weights(blob_file(blob, "weights"), plan,
                                        blob.weights_in_memory));  // the lm-head: read in full every step
    std::vector<std::string> names;
    const auto it = blob.spec.find("tensor");
    if (it != blob.spec.end() && it->is_string()) names.push_back(it->get<std::string>());
    if (it != blob.spec.end() && it->is_array())
      for (const auto& n : *it)
        if (n.is_string()) names.push_back(n.get<std::string>());
    if (names.empty()) fail("graph \"", name_, "\": \"tensor\" must be a tensor name or a list of names");
    for (const auto& n : names) {
      const TensorView* t = ckpt_->find(n);
      if (t != nullptr || ckpt_->find(n + ".panels") != nullptr) {  // row-major, or the panel form
        if (t != nullptr && t->shape.size() != 2) fail("graph \"", name_, "\": tensor ", n, " is not a matrix");
        w_ = matrix_weight(*ckpt_, n);  // any stored format (f32, bf16, f16, w8, w4)
        k_ = plan.kernels;
        prepare(plan, w_);
        return;
      }
    }
    fail("graph \"", name_, "\": none of the tensors ", blob.spec["tensor"].dump(), " is in the weights");
  }
  std::vector<IoSpec> input_specs() const override { return {{"x", DType::F32, {-1, w_.cols}}}; }
  std::vector<IoSpec> output_specs() const override { return {{"y", DType::F32, {-1, w_.rows}}}; }
  void execute(std::span<const TensorRef> in, std::span<const TensorRef> out) override {
    const auto is = input_specs();
    const auto os = output_specs();
    check_io(name_, is, in, "input");
    check_io(name_, os, out, "output");
    if (in[0].shape[0] != out[0].shape[0]) fail("graph \"", name_, "\": x and y must have the same number of rows");
    k_->linear(in[0].as<float>(), in[0].shape[0], w_, nullptr, out[0].as<float>());
  }

 private:
  std::string name_;
  std::optional<Checkpoint> ckpt_;
  WeightMatrix w_;
  const KernelSet* k_ = &active_kernels();
};

}  // namespace

std::unique_ptr<Delegate> make_linear_graph() { return std::make_unique<LinearGraph>(); }

}  // namespace qhx::cpu
