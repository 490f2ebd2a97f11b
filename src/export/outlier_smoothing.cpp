#include "export/outlier_smoothing.hpp"

#include <algorithm>
#include <cmath>

#include "backends/cpu/weights.hpp"
#include "qhexrt/error.hpp"

namespace qhx {
namespace {

// Tensor `name` as f32, row by row; shape [rows, cols] (a vector: rows 1).
std::vector<float> read_f32(const Checkpoint& ck, const std::string& name, std::int64_t& rows, std::int64_t& cols) {
  const TensorView& t = ck.get(name);
  if (t.dtype != DType::F32 && t.dtype != DType::BF16 && t.dtype != DType::F16)
    fail("tensor ", name, ": dtype ", dtype_name(t.dtype), " cannot be exported (F32, BF16 or F16)");
  rows = t.shape.size() == 2 ? t.shape[0] : 1;
  cols = t.shape.size() == 2 ? t.shape[1] : t.numel();
  const cpu::WeightMatrix m{.data = t.data, .dtype = t.dtype, .rows = rows, .cols = cols};
  std::vector<float> v(static_cast<std::size_t>(rows * cols));
  for (std::int64_t r = 0; r < rows; ++r) cpu::weight_row_to_f32(m, r, v.data() + r * cols);
  return v;
}

std::vector<float> read_vector(const Checkpoint& ck, const std::string& name) {
  std::int64_t rows = 0, cols = 0;
  return read_f32(ck, name, rows, cols);
}

// The L2 norm of each row of matrix `name`.
std::vector<double> row_norms(const Checkpoint& ck, const std::string& name) {
  std::int64_t rows = 0, cols = 0;
  const std::vector<float> m = read_f32(ck, name, rows, cols);
  std::vector<double> n(static_cast<std::size_t>(rows));
  for (std::int64_t r = 0; r < rows; ++r) {
    double s = 0;
    for (std::int64_t c = 0; c < cols; ++c) s += static_cast<double>(m[r * cols + c]) * m[r * cols + c];
    n[r] = std::sqrt(s);
  }
  return n;
}

// s_j for magnitudes a (all 1 when no channel is an outlier); counts the outliers.
std::vector<float> factors(const std::vector<double>& a, std::size_t& outliers) {
  std::vector<double> sorted = a;
  std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(sorted.size() / 2), sorted.end());
  const double median = sorted[sorted.size() / 2];
  std::vector<float> s(a.size(), 1.0f);
  if (!(median > 0)) return s;
  for (std::size_t j = 0; j < a.size(); ++j)
    if (a[j] > kOutlierRatio * median) {
      s[j] = static_cast<float>(std::pow(a[j] / median, kSmoothingAlpha));
      ++outliers;
    }
  return s;
}

bool all_one(const std::vector<float>& s) {
  return std::all_of(s.begin(), s.end(), [](float x) { return x == 1.0f; });
}

}  // namespace

void OutlierSmoothing::apply_row(const std::string& name, std::int64_t r, float* out, std::int64_t cols) const {
  if (const auto it = col.find(name); it != col.end())
    for (std::int64_t c = 0; c < cols; ++c) out[c] *= it->second[static_cast<std::size_t>(c)];
  if (const auto it = row.find(name); it != row.end()) {
    const float s = it->second[static_cast<std::size_t>(r)];
    for (std::int64_t c = 0; c < cols; ++c) out[c] /= s;
  }
}

void OutlierSmoothing::apply_vector(const std::string& name, std::vector<float>& v) const {
  if (const auto it = vec.find(name); it != vec.end())
    for (std::size_t j = 0; j < v.size(); ++j) v[j] /= it->second[j];
}

OutlierSmoothing plan_outlier_smoothing(const Checkpoint& ck, std::int64_t layers) {
  OutlierSmoothing plan;
  for (std::int64_t l = 0; l < layers; ++l) {
    const std::string p = "model.language_model.layers." + std::to_string(l) + ".";
    // A norm's gain and the matrices that read its output.
    const std::pair<const char*, std::vector<const char*>> sites[] = {
        {"input_layernorm", {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"}},
        {"post_attention_layernorm", {"mlp.gate_proj", "mlp.up_proj"}}};
    for (const auto& [norm, readers] : sites) {
      const std::string g_name = p + norm + ".weight";
      const std::vector<float> g = read_vector(ck, g_name);
      std::vector<double> a(g.size());
      for (std::size_t j = 0; j < g.size(); ++j) a[j] = std::fabs(g[j]);
      std::vector<float> s = factors(a, plan.channels);
      if (all_one(s)) continue;
      for (const char* m : readers) {
        const std::string name = p + m + ".weight";
        if (ck.get(name).shape.size() != 2 || ck.get(name).shape[1] != static_cast<std::int64_t>(g.size()))
          fail("tensor ", name, ": expected ", g.size(), " columns (the width of ", g_name, ")");
        plan.col[name] = s;
      }
      plan.vec[g_name] = std::move(s);
    }
    // down_proj reads silu(gate) * up: its channel r scales with both rows r.
    const std::string gate = p + "mlp.gate_proj.weight", up = p + "mlp.up_proj.weight",
                      down = p + "mlp.down_proj.weight";
    const std::vector<double> ng = row_norms(ck, gate), nu = row_norms(ck, up);
    if (ng.size() != nu.size()) fail("tensors ", gate, " and ", up, ": different numbers of rows");
    std::vector<double> a(ng.size());
    for (std::size_t r = 0; r < a.size(); ++r) a[r] = ng[r] * nu[r];
    std::vector<float> s = factors(a, plan.channels);
    if (all_one(s)) continue;
    plan.row[up] = s;
    // up's columns may be smoothed too (post_attention_layernorm): both apply.
    plan.col[down] = std::move(s);
  }
  return plan;
}

}  // namespace qhx
