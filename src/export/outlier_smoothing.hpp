// Outlier smoothing folded in at export: a few hidden channels of a real checkpoint
// carry activations one to two orders of magnitude above the rest, and a per-row
// int8 activation scale set by them crushes every ordinary channel of the row
// (tests/reference/make_outlier_checkpoint.py plants such channels;
// tests/python/test_outlier_activations.py measures the effect and this remedy).
//
// For a matrix W fed by x (W x), any per-column factor s_j > 0 gives the same
// product: (W diag(s)) (diag(s)^-1 x). Where x_j comes out of a norm's gain g_j,
// dividing g_j by s_j divides x_j; where x_j = silu(gate_j) · up_j, dividing up's
// row j does. So the export moves a share of each outlier channel's magnitude into
// the weights' columns, once, and the runtime's arithmetic and its bit-exact
// reference contract stay as they are (the bundle simply holds other numbers).
//
// Which channels: an estimate a_j of channel j's magnitude from the weights alone
// (|g_j| for a norm's outputs; |gate_j| · |up_j| row norms for the MLP's
// intermediate), and only channels with a_j > kOutlierRatio · median(a) move, by
// s_j = (a_j / median(a))^kSmoothingAlpha. A checkpoint without such channels is
// exported byte for byte as without smoothing.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "qhexrt/safetensors.hpp"

namespace qhx {

inline constexpr double kOutlierRatio = 8.0;    // a channel this many medians above is an outlier
inline constexpr double kSmoothingAlpha = 0.5;  // the share (in log scale) moved into the weights

struct OutlierSmoothing {
  // tensor name -> factor per element: a matrix's columns are multiplied by col[name],
  // its rows divided by row[name], a vector (norm gain) divided by vec[name].
  std::map<std::string, std::vector<float>> col, row, vec;
  std::size_t channels = 0;  // outlier channels moved, over all layers and sites

  bool empty() const { return channels == 0; }
  // Row r of matrix `name` as the bundle stores it, in place (out [cols]).
  void apply_row(const std::string& name, std::int64_t r, float* out, std::int64_t cols) const;
  // Vector `name` as the bundle stores it, in place.
  void apply_vector(const std::string& name, std::vector<float>& v) const;
};

// The smoothing of a Qwen3-VL checkpoint's text decoder (q/k/v after input_layernorm,
// gate/up after post_attention_layernorm, down after the MLP's product), for
// `layers` decoder layers under "model.language_model.layers.".
OutlierSmoothing plan_outlier_smoothing(const Checkpoint& ck, std::int64_t layers);

}  // namespace qhx
