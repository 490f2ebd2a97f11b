#include "backends/cpu/stored_panels.hpp"

#include <cstring>

#include "qhexrt/error.hpp"

namespace qhx::cpu {

namespace {

constexpr int P = kStoredPanel;

std::int64_t panels_of(std::int64_t rows) { return (rows + P - 1) / P; }
std::int64_t k4_of(std::int64_t cols) { return (cols + 3) / 4; }

void check_shape(std::int64_t rows, std::int64_t cols, const std::string& where) {
  if (rows <= 0 || cols <= 0)
    fail(where, ": a stored panel matrix needs a positive shape, not [", rows, ", ", cols, "]");
  if (cols > kInt8MaxCols)
    fail(where, ": ", cols, " input features exceed the int8 path's exact limit of ", kInt8MaxCols);
}

void check_array(const void* p, std::size_t have, std::size_t want, const char* what, const std::string& where) {
  if (have != want)
    fail(where, ": the stored ", what, " hold ", have, " bytes, not the ", want,
         " a panel matrix of this shape needs (P = ", P, "); the file is corrupt or of another layout");
  if (reinterpret_cast<std::uintptr_t>(p) % 64 != 0)
    fail(where, ": the stored ", what, " are not 64-byte aligned in the file, so the kernels cannot use them in place");
}

void check_all(const StoredPanels& s, std::int64_t rows, std::int64_t cols, const std::string& where) {
  check_shape(rows, cols, where);
  check_array(s.panels, s.panels_bytes, stored_panels_bytes(rows, cols), "panels", where);
  check_array(s.row_sums, s.row_sums_bytes, stored_row_sums_bytes(rows), "row sums", where);
  check_array(s.scales, s.scales_bytes, stored_scales_bytes(rows), "scales", where);
}

}  // namespace

std::size_t stored_panels_bytes(std::int64_t rows, std::int64_t cols) {
  return static_cast<std::size_t>(panels_of(rows) * k4_of(cols) * P * 4);
}
std::size_t stored_row_sums_bytes(std::int64_t rows) {
  return static_cast<std::size_t>(panels_of(rows) * P) * sizeof(std::int32_t);
}
std::size_t stored_scales_bytes(std::int64_t rows) {
  return static_cast<std::size_t>(panels_of(rows) * P) * sizeof(float);
}

std::shared_ptr<const PackedI8> view_stored_panels(const StoredPanels& s, std::int64_t rows, std::int64_t cols,
                                                   const Int8Kernel& kernel, std::shared_ptr<const void> owner,
                                                   const std::string& where) {
  if (kernel.panel != P)
    fail(where, ": the ", kernel.name, " kernel uses ", kernel.panel, "-row panels; the stored ones have ", P,
         " (repack from the unpacked rows instead)");
  check_all(s, rows, cols, where);
  auto out = std::make_shared<PackedI8>();
  out->rows = rows;
  out->cols = cols;
  out->k4 = k4_of(cols);
  out->panels = panels_of(rows);
  out->panel = P;
  out->kernel = &kernel;
  out->bits = 8;
  // Aliasing shared_ptrs: each array shares `owner`'s count, so the mapping
  // lives as long as any packed matrix that reads it. The kernels only read.
  out->data = std::shared_ptr<std::int8_t>(owner, static_cast<std::int8_t*>(const_cast<void*>(s.panels)));
  out->row_sums = std::shared_ptr<std::int32_t>(owner, static_cast<std::int32_t*>(const_cast<void*>(s.row_sums)));
  out->scales = std::shared_ptr<float>(owner, static_cast<float*>(const_cast<void*>(s.scales)));
  return out;
}

void pack_stored_panels(const std::int8_t* q, const float* scales, std::int64_t rows, std::int64_t cols,
                        std::vector<std::int8_t>& panels, std::vector<std::int32_t>& row_sums,
                        std::vector<float>& padded_scales) {
  check_shape(rows, cols, "pack_stored_panels");
  const std::int64_t k4 = k4_of(cols), np = panels_of(rows);
  panels.assign(stored_panels_bytes(rows, cols), 0);
  row_sums.assign(static_cast<std::size_t>(np * P), 0);
  padded_scales.assign(static_cast<std::size_t>(np * P), 0.0f);
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t p = r / P, j = r % P;
    std::int32_t sum = 0;
    for (std::int64_t c = 0; c < cols; ++c) {
      const std::int8_t v = q[r * cols + c];
      panels[static_cast<std::size_t>(((p * k4) + c / 4) * P * 4 + j * 4 + c % 4)] = v;
      sum += v;
    }
    row_sums[static_cast<std::size_t>(r)] = sum;
    padded_scales[static_cast<std::size_t>(r)] = scales[r];
  }
}

void unpack_w8_panels(const StoredPanels& s, std::int64_t rows, std::int64_t cols, const std::string& where,
                      std::vector<std::int8_t>& q, std::vector<float>& scales) {
  check_all(s, rows, cols, where);
  const std::int64_t k4 = k4_of(cols), np = panels_of(rows);
  const auto* src = static_cast<const std::int8_t*>(s.panels);
  const auto* sums = static_cast<const std::int32_t*>(s.row_sums);
  const auto* sc = static_cast<const float*>(s.scales);
  q.assign(static_cast<std::size_t>(rows * cols), 0);
  scales.assign(static_cast<std::size_t>(rows), 0.0f);
  for (std::int64_t r = 0; r < np * P; ++r) {
    const std::int64_t p = r / P, j = r % P;
    std::int32_t sum = 0;
    bool padding_zero = true;
    for (std::int64_t c = 0; c < k4 * 4; ++c) {
      const std::int8_t v = src[((p * k4) + c / 4) * P * 4 + j * 4 + c % 4];
      if (r < rows && c < cols) {
        q[static_cast<std::size_t>(r * cols + c)] = v;
        sum += v;
      } else if (v != 0) {
        padding_zero = false;
      }
    }
    if (!padding_zero) fail(where, ": the stored panels of row ", r, " are not zero past the matrix's edge");
    if (sums[r] != sum)
      fail(where, ": stored row sum ", sums[r], " of row ", r, " is not the sum of its weights (", sum, ")");
    if (r < rows)
      scales[static_cast<std::size_t>(r)] = sc[r];
    else if (sc[r] != 0.0f)
      fail(where, ": the stored scale of padding row ", r, " is not 0");
  }
}

StoredPanels stored_panels_of(const WeightMatrix& w) {
  if (!w.panel_form) fail("stored_panels_of: the matrix is not in the panel form");
  return StoredPanels{w.data,   stored_panels_bytes(w.rows, w.cols), w.panel_row_sums, stored_row_sums_bytes(w.rows),
                      w.scales, stored_scales_bytes(w.rows)};
}

void unpack_panel_form(WeightMatrix& w) {
  if (!w.panel_form) return;
  struct Rows {
    std::vector<std::int8_t> q;
    std::vector<float> scales;
  };
  auto rows = std::make_shared<Rows>();
  unpack_w8_panels(stored_panels_of(w), w.rows, w.cols, "a stored panel matrix", rows->q, rows->scales);
  w.data = rows->q.data();
  w.scales = rows->scales.data();
  w.panel_form = false;
  w.panel_row_sums = nullptr;
  w.owned = std::move(rows);
}

}  // namespace qhx::cpu
