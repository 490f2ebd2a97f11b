// What stages share: the loaded resources (for the whole pipeline), the state
// of one conversation (SessionState, lives across requests) and the state of
// one request (RunContext).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backends/delegate.hpp"
#include "common/mapping_guard.hpp"
#include "models/model_family.hpp"
#include "qhexrt/chat_template.hpp"
#include "qhexrt/pipeline.hpp"
#include "qhexrt/safetensors.hpp"
#include "qhexrt/session.hpp"
#include "qhexrt/tokenizer.hpp"
#include "runtime/image_cache.hpp"
#include "runtime/kv_manager.hpp"
#include "runtime/manifest.hpp"
#include "sampling/sampler.hpp"

namespace qhx {

// A tensor bound to one of a graph's inputs or outputs by its contract name.
struct Binding {
  std::string_view name;
  TensorRef tensor;
};

// A graph, its contract (named inputs and outputs with roles) and scratch reused across calls.
struct Graph {
  std::string name;
  std::unique_ptr<Delegate> delegate;
  MappingGroup mappings = kNoMappingGroup;  // the pipeline's files, checked after every run
  std::vector<IoSpec> inputs, outputs;
  GraphContract contract = GraphContract::Plain;  // what its kind declares (runtime/decoder.hpp)

  // The spec named `name`; throws naming the graph when it has none (a plan
  // that pairs a stage with a graph of another contract fails at load).
  const IoSpec& input(std::string_view name) const;
  const IoSpec& output(std::string_view name) const;
  // Whether the contract has an optional input (a decode block graph has no DeepStack input).
  bool has_input(std::string_view name) const;
  // Runs the graph with tensors bound by name: every input and output of the
  // contract must be bound, and nothing else. Throws FileChangedError when one
  // of the pipeline's files was lost meanwhile: outputs computed over zeros are
  // never used.
  void run(std::initializer_list<Binding> inputs, std::initializer_list<Binding> outputs);
  void run(std::span<const Binding> inputs, std::span<const Binding> outputs);
};

// A host-side tensor the plan names (the token embeddings, stage F's weights), mapped
// from its file. A matrix's rows are looked up by the host backend's "gather" graph, so a
// stage looks rows up without knowing how the file stores them.
struct Table {
  std::optional<Checkpoint> file;
  std::filesystem::path path;           // the manifest's file, relative to the plan's folder
  std::string tensor;                   // its name in the file
  std::int64_t n_rows = 0, n_cols = 0;  // [rows, cols] when the tensor is a matrix (else 0)
  std::unique_ptr<Graph> lookup;        // the host backend's rows of it, when it is a matrix

  std::int64_t rows() const { return n_rows; }
  std::int64_t cols() const { return n_cols; }
  // out [n, cols] = the rows `ids` (checked by the caller), widened to f32.
  void gather(const std::int32_t* ids, std::int64_t n, float* out) const;
};

struct Resources {
  MappingGroup mappings = kNoMappingGroup;  // every file the pipeline mapped while it opened
  bool weights_in_memory = false;           // PipelineOptions::weights_in_memory, for the graphs' blobs
  Manifest manifest;
  std::unique_ptr<ModelFamily> family;        // the manifest's "model"
  std::optional<ChatTemplate> chat_template;  // a template file; else the family's built-in one renders
  std::optional<Tokenizer> tokenizer;
  std::map<std::string, Graph> graphs;
  std::map<std::string, Table> tables;
  std::vector<std::int32_t> stop_ids;
  ImageFeatureCache image_cache;  // vision outputs by pixel hash, shared by every session
  ImageMemo image_memo;           // encoded bytes -> pixel hash and grid, so a known image is not decoded again

  Graph& graph(const std::string& name);
  const Table& table(const std::string& name) const;
  const Table& matrix_table(const std::string& name) const;  // throws unless the table is a matrix
};

// A graph of `backend` built from `blob`, its contract read once (its outputs marked so).
Graph graph_of(const Resources& res, const std::string& backend, const GraphBlob& blob);
// A graph of the host backend that the runtime builds itself rather than the plan listing
// it (a table's rows, stage F): file names in `spec` resolve against the plan's folder.
Graph host_graph(const Resources& res, const std::string& name, const std::string& kind, nlohmann::json spec);

// What one conversation holds between requests: the ids whose keys and values
// are in its KV cache (positions [0, ids.size())), and the cache, in the KV manager.
struct SessionState {
  std::vector<std::int32_t> ids;
  KvManager kv;
};

using Clock = std::chrono::steady_clock;

inline double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// One request: the conversation to answer (or a raw prompt).
struct TurnInput {
  bool raw = false;
  std::string raw_text;                            // raw: the whole prompt text, image pads included
  const std::vector<Message>* messages = nullptr;  // else: rendered through the chat template (not owned)
  std::vector<ImageSource> raw_images;             // raw: the images, in the order of their pads

  // Every image of the request, in the order its tokens appear.
  std::vector<const ImageSource*> images() const;
};

struct RunContext {
  RunContext(const TurnInput& in, const GenerationOptions& opts, GenerationResult& out, Resources& resources,
             SessionState& state)
      : input(in), options(opts), result(out), res(resources), session(state) {}
  const TurnInput& input;
  const GenerationOptions& options;
  GenerationResult& result;
  Resources& res;
  SessionState& session;
  Clock::time_point started = Clock::now();

  std::int64_t max_new_tokens = 0;
  SamplingParams sampling;
  std::vector<std::int32_t> ids;        // the whole prompt, [L]
  std::int64_t reused = 0;              // P: ids[0, P) are already in the session's cache
  std::vector<float> embeds;            // [L - P, hidden]: the rows to prefill
  std::vector<std::int32_t> positions;  // [3, L]
  std::int64_t rope_delta = 0;
  std::vector<float> logits;            // [vocab], the latest step's
  std::optional<StreamDecoder> stream;  // decode's text stream
  std::string held_text;                // streamed text decode held back to the end (detokenize sends it)
  std::string full_text;                // the output as text, cut at a stop string, <think> part included

  // The images of the request, in prompt order.
  struct Image {
    const ImageSource* source = nullptr;
    ImageKey key;                   // hash of the resized pixels
    std::vector<std::uint8_t> rgb;  // resized, HWC RGB8 (empty when known from the memo)
    std::int64_t height = 0, width = 0;
    std::int64_t t = 1, gh = 0, gw = 0;  // grid in patches (image_grid_thw)
    std::int64_t first_pad = 0;          // index in ids of its first <|image_pad|>
    std::int64_t n_pads = 0;             // = t·gh·gw / merge²
    bool needed = false;                 // some of its pads are past the reused prefix
    std::vector<float> vision_hidden;    // [t·gh·gw, vision_hidden]: stage F's output (when encoded)
    std::shared_ptr<const ImageFeatures> features;
  };
  std::vector<Image> images;
};

}  // namespace qhx
