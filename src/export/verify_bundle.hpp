// The export gate: runs a freshly exported bundle and its fp32 source side by
// side on a text prompt and an image prompt, and compares the logits that
// choose the first generated token.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "export/export_bundle.hpp"

namespace qhx {

struct VerifyCase {
  std::string name;  // "text", "image"
  double cosine = 0;
  double max_abs = 0;
  std::int32_t bundle_token = -1, source_token = -1;
};

struct VerifyReport {
  std::vector<VerifyCase> cases;
  double cosine_bound = 0;  // the format's bound
  bool passed = false;      // every case: same greedy first token and cosine >= bound
};

// The cosine bound a format must meet: w8 0.999, w4 0.99, f16 0.9999, f32 0.99999.
double cosine_bound(const std::string& weights);

VerifyReport verify_bundle(const ExportSummary& bundle, const ExportOptions& options);

}  // namespace qhx
