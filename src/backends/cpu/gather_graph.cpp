// Graph kind "gather" on the CPU: rows of one stored matrix, widened to f32 from
// whatever format the file holds (the token embeddings the embed and decode stages
// look up). The entry's "weights" names the file and "tensor" the matrix. The ids are
// the caller's to check against the table's rows.
//
// inputs   ids   i32 [T]
// outputs  rows  f32 [T, cols]
#include <optional>

#include "backends/cpu/checkpoint_weights.hpp"
#include "backends/cpu/kernel_set.hpp"
#include "backends/delegate.hpp"
#include "qhexrt/error.hpp"
#include "qhexrt/safetensors.hpp"

namespace qhx::cpu {
namespace {

class GatherGraph final : public Delegate {
 public:
  void init(const GraphBlob& blob) override {
    name_ = blob.name;
    const auto it = blob.spec.find("tensor");
    if (it == blob.spec.end() || !it->is_string()) fail("graph \"", name_, "\": \"tensor\" must be a tensor name");
    ckpt_.emplace(Checkpoint::open(blob_file(blob, "weights")));
    table_ = matrix_weight(*ckpt_, it->get<std::string>());  // any stored format
  }
  std::vector<IoSpec> input_specs() const override { return {{"ids", DType::I32, {-1}}}; }
  std::vector<IoSpec> output_specs() const override { return {{"rows", DType::F32, {-1, table_.cols}}}; }
  void execute(std::span<const TensorRef> in, std::span<const TensorRef> out) override {
    if (in.size() != 1 || out.size() != 1 || in[0].shape.size() != 1 || out[0].shape.size() != 2 ||
        out[0].shape[0] != in[0].shape[0] || out[0].shape[1] != table_.cols)
      fail("graph \"", name_, "\": ids [T] and rows [T, ", table_.cols, "] expected");
    active_kernels().gather_rows(table_, in[0].as<const std::int32_t>(), in[0].shape[0], out[0].as<float>());
  }

 private:
  std::string name_;
  std::optional<Checkpoint> ckpt_;
  WeightMatrix table_;
};

}  // namespace

std::unique_ptr<Delegate> make_gather_graph() { return std::make_unique<GatherGraph>(); }

}  // namespace qhx::cpu
