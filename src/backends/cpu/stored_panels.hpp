// w8 matrices stored already in the int8 kernels' panel layout (int8_matmul.hpp's,
// P = 16), so that opening a bundle maps them instead of repacking them: bundle
// format version 2 (docs/bundle.md, "Panel form").
//
// A stored w8 panel matrix NAME of logical shape [rows, cols] is four tensors:
//   NAME.panels    I8  [panels, k4, 16, 4]  the packed bytes, 0 past the edges
//   NAME.row_sums  I32 [panels · 16]         Σ_k qw[r, k], 0 past the last row
//   NAME.scale     F32 [panels · 16]         sw_r, 0 past the last row
//   NAME.shape     I64 [2]                   {rows, cols}: the padding hides them
// with panels = ceil(rows / 16), k4 = ceil(cols / 4), each 64-byte aligned.
//
// Why P = 16 only: the portable and AVX-512 VNNI kernels share it, so x86 and
// QHX_INT8_KERNEL=portable use the mapped bytes as they are; a kernel with
// another P (NEON, P = 4) gets a repack from the unpacked rows (unpack_w8_panels).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/int8_matmul.hpp"
#include "backends/cpu/weights.hpp"

namespace qhx::cpu {

// The panel height of the stored form.
inline constexpr int kStoredPanel = 16;
static_assert(kStoredPanel == kWeightPanel, "weights.hpp's w8_at reads the stored form");

// The stored arrays of one panel matrix, as found in its file.
struct StoredPanels {
  const void* panels = nullptr;  // [panels, k4, 16, 4] int8
  std::size_t panels_bytes = 0;
  const void* row_sums = nullptr;  // [panels · 16] int32
  std::size_t row_sums_bytes = 0;
  const void* scales = nullptr;  // [panels · 16] float
  std::size_t scales_bytes = 0;
};

// A PackedI8 for `kernel` (whose panel must be kStoredPanel) that points into the
// stored arrays without copying; `owner` keeps them alive (the file mapping) and
// is shared by every array. Checks sizes, alignment (64 bytes) and the exact-sum
// limit; throws qhx::Error naming `where` (file and tensor) on any mismatch.
std::shared_ptr<const PackedI8> view_stored_panels(const StoredPanels& s, std::int64_t rows, std::int64_t cols,
                                                   const Int8Kernel& kernel, std::shared_ptr<const void> owner,
                                                   const std::string& where);

// The byte counts a stored panel matrix of [rows, cols] must have.
std::size_t stored_panels_bytes(std::int64_t rows, std::int64_t cols);
std::size_t stored_row_sums_bytes(std::int64_t rows);
std::size_t stored_scales_bytes(std::int64_t rows);

// Writes the stored form of a w8 matrix (q [rows, cols], scales [rows]) into the
// three arrays (sized by the functions above): the exporter's side.
void pack_stored_panels(const std::int8_t* q, const float* scales, std::int64_t rows, std::int64_t cols,
                        std::vector<std::int8_t>& panels, std::vector<std::int32_t>& row_sums,
                        std::vector<float>& padded_scales);

// The inverse: the row-major q [rows, cols] and scales [rows] of a stored panel
// matrix, for the readers that need rows (the reference kernels, f32 activations,
// QNN export, NEON's repack). Checks that the padding is zero and that the row
// sums agree, so a corrupt tensor is an error naming `where`, not wrong numbers.
void unpack_w8_panels(const StoredPanels& s, std::int64_t rows, std::int64_t cols, const std::string& where,
                      std::vector<std::int8_t>& q, std::vector<float>& scales);

// The stored arrays of a panel-form WeightMatrix (weights.hpp).
StoredPanels stored_panels_of(const WeightMatrix& w);

// Turns a panel-form w into the row-major w8 matrix it stores, in memory w then
// owns (`owned`): for the kernels that read rows (the reference set, f32
// activations, a kernel with another panel height). Checks the padding and the
// row sums as unpack_w8_panels does. Does nothing to a row-major w.
void unpack_panel_form(WeightMatrix& w);

}  // namespace qhx::cpu
