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

void check_llm_contract(const Graph& llm, const Graph& lm_head) {
  for (const char* name : {"embeds", "positions", "start", "deepstack", "image_mask"}) (void)llm.input(name);
  (void)llm.output("hidden");
  (void)lm_head.input("x");
  (void)lm_head.output("y");
}

void run_llm_step(Graph& llm, Graph& lm_head, SessionState& session, const float* embeds,
                  const std::int32_t* positions, std::int64_t T, std::int64_t start, const float* deepstack,
                  std::int64_t n_deepstack, const std::uint8_t* image_mask, bool all_rows, std::vector<float>& out) {
  const std::int64_t H = llm.output("hidden").shape[1];
  // Buffers kept on the graph: the decode loop allocates nothing here once warm.
  if (image_mask == nullptr) {
    if (llm.no_mask.size() < static_cast<std::size_t>(T)) llm.no_mask.assign(static_cast<std::size_t>(T), 0);
    image_mask = llm.no_mask.data();
  }
  if (llm.hidden.size() < static_cast<std::size_t>(T * H)) llm.hidden.resize(static_cast<std::size_t>(T * H));
  float* hidden = llm.hidden.data();
  std::int64_t start_v = start;
  // The decoder's state (its KV cache) is the session's, whatever the graph calls it.
  const IoSpec* state = nullptr;
  for (const IoSpec& s : llm.inputs)
    if (s.role == IoRole::State) {
      if (state != nullptr) fail("graph \"", llm.name, "\": more than one state input; this runtime drives one KV cache");
      state = &s;
    }
  if (state == nullptr) fail("graph \"", llm.name, "\": no state input (a KV cache) to run a conversation over");
  llm.run({{"embeds", {DType::F32, {T, H}, const_cast<float*>(embeds)}},
           {"positions", {DType::I32, {3, T}, const_cast<std::int32_t*>(positions)}},
           {"start", {DType::I64, {1}, &start_v}},
           {state->name, {state->dtype, state->shape, session.buffer(llm, *state)}},
           {"deepstack", {DType::F32, {n_deepstack, T, H}, const_cast<float*>(deepstack)}},
           {"image_mask", {DType::U8, {T}, const_cast<std::uint8_t*>(image_mask)}}},
          {{"hidden", {DType::F32, {T, H}, hidden}}});

  const std::int64_t rows = all_rows ? T : 1;
  const std::int64_t V = lm_head.output("y").shape[1];
  out.resize(static_cast<std::size_t>(rows * V));
  lm_head.run({{"x", {DType::F32, {rows, H}, hidden + (T - rows) * H}}},
              {{"y", {DType::F32, {rows, V}, out.data()}}});
}

}  // namespace qhx
