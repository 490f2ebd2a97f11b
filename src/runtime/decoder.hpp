// Driving a language-model graph: one typed step, and the two contracts a graph's kind can
// declare (docs/manifest.md, "Decoder contracts"):
//
//   state (GraphContract::DecoderState, e.g. qwen3vl.text_decoder): any T tokens up to the
//     prefill chunk; the graph keeps its KV cache as its state input, which the session's
//     KvManager holds. Inputs embeds, positions, start, deepstack, image_mask, the state;
//     output hidden.
//   block (GraphContract::DecoderBlock, qwen3vl.text_decoder_ar and the NPU's graphs): a
//     fixed block of AR rows over a past of CL − AR rows that the host keeps; the KvManager
//     pads the step to the block, builds the mask and the rope tables, and writes the block's
//     new keys and values into its cache.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/kv_manager.hpp"

namespace qhx {

struct Graph;
class ModelFamily;

// One call of the language model: tokens [start, start + tokens) of the conversation.
struct DecoderStep {
  const float* embeds = nullptr;            // [tokens, hidden]
  const std::int32_t* positions = nullptr;  // [3, tokens]
  std::int64_t tokens = 0;
  std::int64_t start = 0;            // the positions already in the session's cache
  const float* deepstack = nullptr;  // [n_deepstack, tokens, hidden] (null when n_deepstack is 0)
  std::int64_t n_deepstack = 0;
  const std::uint8_t* image_mask = nullptr;  // [tokens], 1 at image tokens; null: text only
  std::int64_t logit_rows = 0;               // run the lm-head on the last rows (0: not at all)
};

class Decoder {
 public:
  // The driver of `llm` by the contract its kind declares; throws naming the graph when it
  // declares none or lacks an input or output of its contract.
  static std::unique_ptr<Decoder> of(Graph& llm, const ModelFamily& family);
  virtual ~Decoder() = default;

  // Tokens per call of a block graph; 0 for a state graph (any count up to its chunk).
  virtual std::int64_t block() const = 0;
  // The positions a block graph's past input holds (a longer prompt goes on through
  // another graph); 0 for a state graph, which takes any past up to its context.
  virtual std::int64_t room() const = 0;
  std::int64_t hidden_size() const { return hidden_size_; }
  Graph& graph() { return llm_; }

  // Runs the step over the session's state: returns hidden [tokens, hidden] (valid until the next run).
  virtual const float* run(KvManager& kv, const DecoderStep& step) = 0;

 protected:
  Decoder(Graph& llm, std::int64_t hidden) : llm_(llm), hidden_size_(hidden) {}
  Graph& llm_;
  std::int64_t hidden_size_;
};

// Checks at load that `lm_head` takes x [T, hidden] to y [T, vocab].
void check_lm_head(const Graph& lm_head);

// Runs `decoder` on `step`, then `lm_head` on its last step.logit_rows rows: logits [rows, vocab] in `out`.
void run_decoder_step(Decoder& decoder, Graph& lm_head, KvManager& kv, const DecoderStep& step,
                      std::vector<float>& out);

}  // namespace qhx
