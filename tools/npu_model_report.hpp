// qhx_bench --npu-model DIR: the device time model's table for a qnn-htp bundle (or a
// checkpoint's shapes), docs/qnn.md "Device time model".
#pragma once

#include <string>

namespace qhx_bench {

// Prints the per-graph table, ms per token for W8 and W4 with and without speculation,
// and the calibration against the reference design; one JSON object with `as_json`.
// Returns the process exit code.
int npu_model_report(const std::string& dir, const std::string& soc, bool as_json);

}  // namespace qhx_bench
