// Which of the text decoder's matrix kinds a w4 bundle keeps in w8: the measured rule.
//
// For each kind (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj) the relative
// error of its 4-bit weights, sqrt(sum (w - q)^2 / sum w^2) over a sample of rows of every
// layer (after outlier smoothing, as written), is compared with the median over the kinds: a
// kind whose error exceeds kKeepRatio times the median is kept in w8. Heavy-tailed matrices
// (ExecuTorch's analysis names down_proj and v_proj on real Llama weights) lose most under the
// block scheme's 4-bit multipliers; the rule keeps what this checkpoint's weights say, no more.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "export/outlier_smoothing.hpp"
#include "formats/quantize.hpp"
#include "qhexrt/safetensors.hpp"

namespace qhx {

struct W4KindError {
  std::string kind;       // "down_proj"
  double error = 0;       // relative error of its w4 weights (sampled rows)
  bool measured = false;  // false: its input features are not a multiple of the block (w8 anyway)
  bool kept_w8 = false;
};

struct W4KeepRule {
  std::vector<W4KindError> kinds;
  double median = 0;
  std::string mode;                    // "auto", "none", or the list asked for
  std::set<std::string> kept() const;  // the kinds kept in w8
  std::string summary() const;         // one line for the export's output
};

inline constexpr double kKeepRatio = 1.5;

// `mode`: "auto" (the rule), "none", or a comma list of kinds to keep in w8 (measured and
// printed all the same). Throws naming an unknown kind.
W4KeepRule measure_w4_keep(const Checkpoint& ck, std::int64_t layers, std::int64_t block, W4Scales how,
                           const OutlierSmoothing* smoothing, const std::string& mode);

}  // namespace qhx
