// Finding a stored panel matrix (stored_panels.hpp) in a mapped bundle file:
// the reader's side, so the loader can tell a panel-form w8 matrix from a
// row-major one by its tensors and hand the kernels the mapped bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "backends/cpu/stored_panels.hpp"
#include "qhexrt/safetensors.hpp"

namespace qhx::cpu {

// The three tensors of panel matrix `name` of logical [rows, cols] in `ckpt`, or
// nullopt when it has no `name.panels` (a row-major matrix). Checks each tensor's
// dtype and shape; throws qhx::Error naming `file` and the tensor on a mismatch.
std::optional<StoredPanels> find_stored_panels(const Checkpoint& ckpt, const std::string& file, const std::string& name,
                                               std::int64_t rows, std::int64_t cols);

// The logical [rows, cols] of panel matrix `name` (its `name.shape`), or nullopt when
// it has no `name.panels`. Throws qhx::Error naming `file` and the tensor if the
// shape tensor is missing or not two positive I64.
std::optional<std::pair<std::int64_t, std::int64_t>> stored_panels_shape(const Checkpoint& ckpt,
                                                                         const std::string& file,
                                                                         const std::string& name);

}  // namespace qhx::cpu
