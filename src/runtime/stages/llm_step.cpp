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

namespace {

// The NPU contract (a fixed block over a host-kept KV cache) is told apart by its past input.
bool is_block_contract(const Graph& llm) {
  return std::any_of(llm.inputs.begin(), llm.inputs.end(), [](const IoSpec& s) { return s.name == "past_key"; });
}

// One call of a state graph: its KV cache is the session's, whatever the graph calls it.
void run_state(Graph& llm, SessionState& session, const float* embeds, const std::int32_t* positions, std::int64_t T,
               std::int64_t start, const float* deepstack, std::int64_t n_deepstack, const std::uint8_t* image_mask,
               float* hidden) {
  const std::int64_t H = llm.output("hidden").shape[1];
  std::int64_t start_v = start;
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
}

constexpr float kMasked = -1000.0f;  // the NPU graphs' float mask value (docs/qnn.md)

// One call of a block graph: the host pads the T tokens to the block, builds the
// additive mask over the past it keeps and the rope tables, and writes the
// block's new keys and values into its cache at [start, start + T).
void run_block(Graph& llm, SessionState& session, const ModelFamily& family, const float* embeds,
               const std::int32_t* positions, std::int64_t T, std::int64_t start, const float* deepstack,
               std::int64_t n_ds, const std::uint8_t* image_mask, float* hidden) {
  const IoSpec& in = llm.input("inputs_embeds");
  const IoSpec& pk = llm.input("past_key");
  const std::int64_t AR = in.shape[0], H = in.shape[1], past = pk.shape[0];
  const std::int64_t CL = past + AR, half = llm.input("rope_cos").shape[1];
  std::int64_t row = 1;  // floats of one token's keys over all layers
  for (std::size_t d = 1; d < pk.shape.size(); ++d) row *= pk.shape[d];
  if (T > AR) fail("graph \"", llm.name, "\": ", T, " tokens for a block of ", AR);
  if (start > past)
    fail("graph \"", llm.name, "\": ", start, " tokens are cached, but a block of ", AR, " in a context of ", CL,
         " has room for a past of ", past, " (a smaller block continues from there)");
  auto* keys = reinterpret_cast<float*>(session.shared("block_kv.key", static_cast<std::size_t>(CL * row) * 4));
  auto* values = reinterpret_cast<float*>(session.shared("block_kv.value", static_cast<std::size_t>(CL * row) * 4));

  llm.block_in.assign(static_cast<std::size_t>(AR * H), 0.0f);
  std::copy_n(embeds, T * H, llm.block_in.data());
  llm.block_mask.assign(static_cast<std::size_t>(AR * CL), kMasked);
  for (std::int64_t r = 0; r < T; ++r) {
    std::fill_n(llm.block_mask.data() + r * CL, start, 0.0f);  // the past this sequence has
    std::fill_n(llm.block_mask.data() + r * CL + past, r + 1, 0.0f);  // causal within the block
  }
  llm.block_pos.assign(static_cast<std::size_t>(3 * AR), 0);  // padding rows at position 0
  for (int a = 0; a < 3; ++a) std::copy_n(positions + a * T, T, llm.block_pos.data() + a * AR);
  llm.block_cos.resize(static_cast<std::size_t>(AR * half));
  llm.block_sin.resize(llm.block_cos.size());
  family.rope_tables(llm.block_pos.data(), AR, llm.block_cos.data(), llm.block_sin.data());
  llm.block_ds.assign(static_cast<std::size_t>(n_ds * AR * H), 0.0f);  // zeros at text rows
  for (std::int64_t d = 0; d < n_ds; ++d)
    for (std::int64_t t = 0; t < T; ++t)
      if (image_mask[t] != 0) std::copy_n(deepstack + (d * T + t) * H, H, llm.block_ds.data() + (d * AR + t) * H);
  llm.block_out.resize(static_cast<std::size_t>(AR * H));
  llm.new_k.resize(static_cast<std::size_t>(AR * row));
  llm.new_v.resize(llm.new_k.size());
  const std::vector<std::int64_t> past_shape = pk.shape, new_shape = llm.output("new_key").shape;
  std::vector<Binding> ins{{"inputs_embeds", {DType::F32, {AR, H}, llm.block_in.data()}},
                           {"attention_mask", {DType::F32, {AR, CL}, llm.block_mask.data()}},
                          {"rope_cos", {DType::F32, {AR, half}, llm.block_cos.data()}},
                          {"rope_sin", {DType::F32, {AR, half}, llm.block_sin.data()}},
                          {"past_key", {DType::F32, past_shape, keys}},
                          {"past_value", {DType::F32, past_shape, values}}};
  // A decode block graph (AR 1) has no DeepStack input: its tokens are generated text.
  if (llm.has_input("deepstack")) {
    const IoSpec& ds = llm.input("deepstack");
    const std::int64_t want = ds.shape[0] < 0 ? n_ds : ds.shape[0];
    if (n_ds > want)
      fail("graph \"", llm.name, "\": ", n_ds, " DeepStack layers for a graph that takes ", want);
    llm.block_ds.resize(static_cast<std::size_t>(want * AR * H), 0.0f);
    ins.push_back({"deepstack", {DType::F32, {want, AR, H}, llm.block_ds.data()}});
  } else if (n_ds > 0 && std::any_of(image_mask, image_mask + T, [](std::uint8_t m) { return m != 0; })) {
    fail("graph \"", llm.name, "\" takes no DeepStack features, but its block holds image tokens ",
         "(image tokens go through the prefill graph)");
  }
  const Binding out[] = {{"hidden", {DType::F32, {AR, H}, llm.block_out.data()}},
                         {"new_key", {DType::F32, new_shape, llm.new_k.data()}},
                         {"new_value", {DType::F32, new_shape, llm.new_v.data()}}};
  llm.run(ins, out);
  std::copy_n(llm.new_k.data(), T * row, keys + start * row);
  std::copy_n(llm.new_v.data(), T * row, values + start * row);
  std::copy_n(llm.block_out.data(), T * H, hidden);
}

}  // namespace

void check_llm_contract(const Graph& llm, const Graph& lm_head) {
  if (is_block_contract(llm)) {
    for (const char* name : {"inputs_embeds", "attention_mask", "rope_cos", "rope_sin", "past_key", "past_value"})
      (void)llm.input(name);
    for (const char* name : {"hidden", "new_key", "new_value"}) (void)llm.output(name);
  } else {
    for (const char* name : {"embeds", "positions", "start", "deepstack", "image_mask"}) (void)llm.input(name);
    (void)llm.output("hidden");
  }
  (void)lm_head.input("x");
  (void)lm_head.output("y");
}

std::int64_t llm_block(const Graph& llm) { return is_block_contract(llm) ? llm.input("inputs_embeds").shape[0] : 0; }

void run_llm_step(Graph& llm, Graph& lm_head, SessionState& session, const ModelFamily& family, const float* embeds,
                  const std::int32_t* positions, std::int64_t T, std::int64_t start, const float* deepstack,
                  std::int64_t n_deepstack, const std::uint8_t* image_mask, std::int64_t logit_rows,
                  std::vector<float>& out) {
  const std::int64_t H = llm.output("hidden").shape[1];
  // Buffers kept on the graph: the decode loop allocates nothing here once warm.
  if (image_mask == nullptr) {
    if (llm.no_mask.size() < static_cast<std::size_t>(T)) llm.no_mask.assign(static_cast<std::size_t>(T), 0);
    image_mask = llm.no_mask.data();
  }
  if (llm.hidden.size() < static_cast<std::size_t>(T * H)) llm.hidden.resize(static_cast<std::size_t>(T * H));
  float* hidden = llm.hidden.data();
  if (is_block_contract(llm)) {
    run_block(llm, session, family, embeds, positions, T, start, deepstack, n_deepstack, image_mask, hidden);
  } else {
    run_state(llm, session, embeds, positions, T, start, deepstack, n_deepstack, image_mask, hidden);
  }
  const std::int64_t rows = std::min(logit_rows, T);
  if (rows <= 0) return;  // a chunk before the prompt's last: the lm-head is not run

  const std::int64_t V = lm_head.output("y").shape[1];
  out.resize(static_cast<std::size_t>(rows * V));
  lm_head.run({{"x", {DType::F32, {rows, H}, hidden + (T - rows) * H}}},
              {{"y", {DType::F32, {rows, V}, out.data()}}});
}

}  // namespace qhx
