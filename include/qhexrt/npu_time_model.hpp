// qhexrt/npu_time_model.hpp — what a qnn-htp bundle's graphs cost on a phone's NPU, on paper.
//
// A graph call is priced as its weight stream plus a fixed cost per decoder layer plus its
// multiply-accumulates:
//
//   ms = (weight bytes + KV bytes read) / bandwidth + layers * per-layer cost + MACs / throughput
//
// The three SM8750 figures are solved from the reference design's measurements on that SoC
// (vision 161 ms, decode graph 96 ms at context 1,024, int8 lm-head 11 ms; docs/qnn.md,
// "Device time model"); the other SoCs scale them by stated bandwidth and NPU-speed ratios.
// A prediction, not a measurement: the emulator gives no device timings.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "qhexrt/hf_config.hpp"

namespace qhx::npu {

struct SocFigures {
  std::string soc;        // "SM8650", "SM8750", "SM8850"
  double weight_gbs = 0;  // effective bytes/s of a graph's weight and KV stream, in GB/s
  double layer_ms = 0;    // fixed cost of one decoder or vision layer per call
  double tmacs = 0;       // effective fp16-activation MACs per second, in 10^12
  std::string basis;      // where the figures come from
};
const std::vector<SocFigures>& soc_figures();
// Throws qhx::Error naming the SoCs it knows.
const SocFigures& soc_figures(const std::string& soc);

struct GraphCost {
  std::string graph;        // "vision", "prefill", "short", "verify", "decode", "lm_head"
  std::int64_t rows = 0;    // tokens (patches for the vision graph) per call
  double weight_bytes = 0;  // streamed per call
  double kv_bytes = 0;      // past keys and values read per call (the full past input)
  double macs = 0;          // per call
  double ms = 0;            // predicted per call
};

struct Prediction {
  std::string soc, weights;  // weights: "w8" or "w4" (the lm-head int8 either way)
  std::int64_t context = 0;
  std::vector<GraphCost> graphs;   // per graph call
  double decode_ms_per_token = 0;  // decode graph + lm-head
  // Speculation through a verify graph of `verify_block` rows: ms per token at each
  // per-draft acceptance, with the lm-head run once per row (as the bundle does) and with
  // one lm-head call over all rows.
  std::int64_t verify_block = 0;
  std::vector<double> acceptance, spec_ms_per_token, spec_ms_per_token_batched_head;
};

// The block sizes a bundle prepares; a checkpoint directory gets the exporter's defaults.
struct Blocks {
  std::int64_t prefill = 320, short_chunk = 64, verify = 5, context = 1024;
  std::int64_t image_size = 512;
};

// Qwen3-VL-2B-Instruct's shapes, on which the reference design measured (the calibration).
Qwen3VLConfig reference_shapes();
// The reference design's measurements on SM8750: vision, decode graph, lm-head (ms).
struct ReferenceMs {
  double vision = 161, decode = 96, lm_head = 11;
};

Prediction predict(const Qwen3VLConfig& cfg, const std::string& soc, const std::string& weights, const Blocks& blocks);

// Rows at which a decoder block call's row compute costs as much as its fixed part (the
// weight stream and the per-layer cost): the prefill stage prices a call of b rows at
// 1 + b / knee (the manifest's "block_knee").
double block_knee(const Qwen3VLConfig& cfg, const std::string& soc, const std::string& weights);

// Bytes per weight of a quantized decoder matrix in the HTP binary: 1 for w8 (+ its scale
// per row, negligible), 0.5 + 2/64 for w4 (4 bits and an fp16 scale per block of 64).
double bytes_per_weight(const std::string& weights, std::int64_t w4_block = 64);

// What one decoder context (a part's binary) needs of the device's memory at a context
// length: its weights, its layers' fp16 KV cache (the slab the runtime binds in place), the
// block graphs' fp16 masks, and the largest block's attention scores (one layer at a time).
// A device's process domain holds about 3.5 GB (kContextLimitBytes; onnxruntime PR #20930):
// a context past it fails to load there.
struct ContextMemory {
  std::int64_t parts = 0;
  double weight_bytes = 0, kv_bytes = 0, mask_bytes = 0, scores_bytes = 0;  // of the largest part
  double total() const { return weight_bytes + kv_bytes + mask_bytes + scores_bytes; }
};
inline constexpr double kContextLimitBytes = 3.5e9;
// `parts`: the decoder's parts (0: as the generator splits it, one per 400 MB of weights).
ContextMemory context_memory(const Qwen3VLConfig& cfg, const std::string& weights, const Blocks& blocks,
                             std::int64_t parts);

}  // namespace qhx::npu
