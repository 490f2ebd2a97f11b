// What stages share: the loaded resources (for the whole pipeline) and the
// state of one request (RunContext).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backends/cpu/weights.hpp"
#include "backends/delegate.hpp"
#include "qhexrt/hf_config.hpp"
#include "qhexrt/safetensors.hpp"
#include "qhexrt/tokenizer.hpp"
#include "runtime/manifest.hpp"
#include "qhexrt/pipeline.hpp"
#include "runtime/manifest.hpp"
#include "sampling/sampler.hpp"

namespace qhx {

// A host-side tensor (the token embeddings, stage F's weights), mapped from its file.
struct Table {
  std::optional<Checkpoint> file;
  std::string tensor;        // its name in the file
  cpu::WeightMatrix matrix;  // [rows, cols] when the tensor is a matrix (else empty)
};

// A graph's persistent state tensor (the KV cache): uninitialized bytes on
// 2 MiB pages where the system grants them (decode streams the KV cache like the
// weights, and 4 KiB pages would cost a TLB miss every few rows).
struct StateFree {
  void operator()(std::byte* p) const { std::free(p); }
};
using StateBuffer = std::unique_ptr<std::byte[], StateFree>;
StateBuffer make_state_buffer(std::size_t bytes);

// A graph and its persistent state tensors, by input name.
struct Graph {
  std::string name;
  std::unique_ptr<Delegate> delegate;
  std::vector<IoSpec> inputs, outputs;
  std::map<std::string, StateBuffer> state;  // of the input's dtype and shape
  std::vector<float> hidden;         // [T, hidden] output buffer, reused across calls
  std::vector<std::uint8_t> no_mask; // [T] zeros, for calls without images
};

struct Resources {
  Manifest manifest;
  Qwen3VLConfig config;
  std::optional<Tokenizer> tokenizer;
  std::map<std::string, Graph> graphs;
  std::map<std::string, Table> tables;
  std::vector<std::int32_t> stop_ids;

  Graph& graph(const std::string& name);
  const Table& table(const std::string& name) const;
  const Table& matrix_table(const std::string& name) const;  // throws unless the table is a matrix
};

using Clock = std::chrono::steady_clock;

inline double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

struct RunContext {
  RunContext(const GenerationRequest& req, GenerationResult& out, Resources& resources)
      : request(req), result(out), res(resources) {}
  const GenerationRequest& request;
  GenerationResult& result;
  Resources& res;
  Clock::time_point started = Clock::now();

  std::int64_t max_new_tokens = 0;
  SamplingParams sampling;
  std::vector<std::int32_t> ids;        // the prompt, [L]
  std::vector<float> embeds;            // [L, hidden]
  std::vector<std::int32_t> positions;  // [3, L]
  std::int64_t rope_delta = 0;
  std::vector<float> logits;            // [vocab], the latest step's
  std::optional<StreamDecoder> stream;  // shared by decode (push) and detokenize (flush)

  // Image path (empty for text requests).
  struct Image {
    std::vector<std::uint8_t> rgb;  // resized, HWC RGB8
    std::int64_t height = 0, width = 0;
    std::int64_t t = 1, gh = 0, gw = 0;  // grid in patches (image_grid_thw)
  };
  std::vector<Image> images;
  std::vector<float> vision_hidden;  // [N, vision_hidden]: stage F's output, N = Σ t·gh·gw
  std::vector<float> image_embeds;   // [N/4, hidden]
  std::vector<float> deepstack;      // [n_deepstack, N/4, hidden]
  std::int64_t n_deepstack = 0;
};

}  // namespace qhx
