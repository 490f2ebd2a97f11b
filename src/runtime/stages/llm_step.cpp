// Running the language model graphs for a block of tokens: shared by prefill and decode.
#include <algorithm>
#include <cstring>

#include "qhexrt/error.hpp"
#include "runtime/stage.hpp"

namespace qhx {

std::string stage_ref(const ManifestStage& stage, const char* key) {
  const auto it = stage.args.find(key);
  if (it == stage.args.end() || !it->is_string())
    fail(stage.path, ".", key, ": missing (the ", stage.op, " stage needs it)");
  return it->get<std::string>();
}

void run_llm_step(Graph& llm, Graph& lm_head, const float* embeds, const std::int32_t* positions,
                  std::int64_t T, std::int64_t start, const float* deepstack, std::int64_t n_deepstack,
                  const std::uint8_t* image_mask, bool all_rows, std::vector<float>& out) {
  const std::int64_t H = llm.outputs[0].shape[1];
  // Buffers kept on the graph: the decode loop allocates nothing here once warm.
  if (image_mask == nullptr) {
    if (llm.no_mask.size() < static_cast<std::size_t>(T)) llm.no_mask.assign(static_cast<std::size_t>(T), 0);
    image_mask = llm.no_mask.data();
  }
  if (llm.hidden.size() < static_cast<std::size_t>(T * H)) llm.hidden.resize(static_cast<std::size_t>(T * H));
  float* hidden = llm.hidden.data();
  std::int64_t start_v = start;
  const IoSpec& kv = llm.inputs[3];
  const TensorRef ins[] = {
      {DType::F32, {T, H}, const_cast<float*>(embeds)},
      {DType::I32, {3, T}, const_cast<std::int32_t*>(positions)},
      {DType::I64, {1}, &start_v},
      {kv.dtype, kv.shape, llm.state.at(kv.name).get()},
      {DType::F32, {n_deepstack, T, H}, const_cast<float*>(deepstack)},
      {DType::U8, {T}, const_cast<std::uint8_t*>(image_mask)},
  };
  const TensorRef outs[] = {{DType::F32, {T, H}, hidden}};
  llm.delegate->execute(ins, outs);

  const std::int64_t rows = all_rows ? T : 1;
  const std::int64_t V = lm_head.outputs[0].shape[1];
  out.resize(static_cast<std::size_t>(rows * V));
  const TensorRef head_in[] = {{DType::F32, {rows, H}, hidden + (T - rows) * H}};
  const TensorRef head_out[] = {{DType::F32, {rows, V}, out.data()}};
  lm_head.delegate->execute(head_in, head_out);
}

}  // namespace qhx
