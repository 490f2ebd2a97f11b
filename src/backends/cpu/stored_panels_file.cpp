#include "backends/cpu/stored_panels_file.hpp"

#include <cstring>
#include <vector>

#include "qhexrt/error.hpp"

namespace qhx::cpu {

namespace {

const TensorView& expect(const Checkpoint& ckpt, const std::string& file, const std::string& name, DType dtype,
                         const std::vector<std::int64_t>& shape, const std::string& matrix) {
  const TensorView* t = ckpt.find(name);
  if (t == nullptr) fail(file, ": tensor ", name, ": missing (panel matrix ", matrix, " has ", matrix, ".panels)");
  if (t->dtype != dtype || t->shape != shape) {
    std::string want, have;
    for (auto d : shape) want += (want.empty() ? "" : ", ") + std::to_string(d);
    for (auto d : t->shape) have += (have.empty() ? "" : ", ") + std::to_string(d);
    fail(file, ": tensor ", name, ": ", dtype_name(t->dtype), " [", have, "] is not the ", dtype_name(dtype), " [",
         want, "] of a ", kStoredPanel, "-row panel matrix ", matrix);
  }
  return *t;
}

}  // namespace

std::optional<StoredPanels> find_stored_panels(const Checkpoint& ckpt, const std::string& file, const std::string& name,
                                               std::int64_t rows, std::int64_t cols) {
  const auto shape = stored_panels_shape(ckpt, file, name);
  if (!shape) return std::nullopt;
  if (shape->first != rows || shape->second != cols)
    fail(file, ": tensor ", name, ".shape: panel matrix ", name, " is [", shape->first, ", ", shape->second,
         "], not the [", rows, ", ", cols, "] the config asks for");
  const std::int64_t panels = (rows + kStoredPanel - 1) / kStoredPanel, k4 = (cols + 3) / 4;
  const TensorView& p = expect(ckpt, file, name + ".panels", DType::I8, {panels, k4, kStoredPanel, 4}, name);
  const TensorView& r = expect(ckpt, file, name + ".row_sums", DType::I32, {panels * kStoredPanel}, name);
  const TensorView& s = expect(ckpt, file, name + ".scale", DType::F32, {panels * kStoredPanel}, name);
  return StoredPanels{p.data, p.nbytes, r.data, r.nbytes, s.data, s.nbytes};
}

std::optional<std::pair<std::int64_t, std::int64_t>> stored_panels_shape(const Checkpoint& ckpt,
                                                                         const std::string& file,
                                                                         const std::string& name) {
  if (ckpt.find(name + ".panels") == nullptr) return std::nullopt;
  const TensorView& t = expect(ckpt, file, name + ".shape", DType::I64, {2}, name);
  std::int64_t rc[2];
  std::memcpy(rc, t.data, sizeof rc);
  if (rc[0] <= 0 || rc[1] <= 0)
    fail(file, ": tensor ", name, ".shape: [", rc[0], ", ", rc[1], "] is not a positive matrix shape");
  return std::pair{rc[0], rc[1]};
}

}  // namespace qhx::cpu
