#include "export/w4_keep.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "backends/cpu/weights.hpp"
#include "formats/quantize.hpp"
#include "qhexrt/error.hpp"

namespace qhx {
namespace {

const std::vector<std::string>& decoder_kinds() {
  static const std::vector<std::string> k{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  return k;
}

std::string tensor_of(std::int64_t layer, const std::string& kind) {
  const bool mlp = kind == "gate_proj" || kind == "up_proj" || kind == "down_proj";
  return "model.language_model.layers." + std::to_string(layer) + (mlp ? ".mlp." : ".self_attn.") + kind + ".weight";
}

constexpr std::int64_t kSampledRows = 32;  // rows per matrix, evenly spread

}  // namespace

std::set<std::string> W4KeepRule::kept() const {
  std::set<std::string> s;
  for (const auto& k : kinds)
    if (k.kept_w8) s.insert(k.kind);
  return s;
}

std::string W4KeepRule::summary() const {
  std::ostringstream o;
  o.precision(4);
  o << "w4 relative error by matrix kind (sampled rows):";
  for (const auto& k : kinds) {
    o << " " << k.kind << " ";
    if (k.measured)
      o << k.error;
    else
      o << "- (w8: K not a multiple of the block)";
  }
  if (mode == "auto")
    o << "; kept in w8 (error over " << kKeepRatio << " x the median " << median << "): ";
  else
    o << "; kept in w8 (--w4-keep-w8 " << mode << "): ";
  const auto s = kept();
  if (s.empty()) o << "none";
  for (auto it = s.begin(); it != s.end(); ++it) o << (it == s.begin() ? "" : ", ") << *it;
  return o.str();
}

W4KeepRule measure_w4_keep(const Checkpoint& ck, std::int64_t layers, std::int64_t block, W4Scales how,
                           const OutlierSmoothing* smoothing, const std::string& mode) {
  std::set<std::string> listed;
  if (mode != "auto" && mode != "none") {
    std::stringstream in(mode);
    for (std::string k; std::getline(in, k, ',');) {
      if (std::find(decoder_kinds().begin(), decoder_kinds().end(), k) == decoder_kinds().end())
        fail("--w4-keep-w8: \"", k, "\" is not a decoder matrix kind (q_proj, k_proj, v_proj, o_proj, gate_proj, ",
             "up_proj, down_proj), nor auto or none");
      listed.insert(k);
    }
  }
  W4KeepRule rule;
  rule.mode = mode;
  std::vector<float> row;
  std::vector<std::uint8_t> packed;
  std::vector<float> scales;
  for (const auto& kind : decoder_kinds()) {
    double err = 0, norm = 0;
    for (std::int64_t l = 0; l < layers; ++l) {
      const std::string name = tensor_of(l, kind);
      const TensorView* t = ck.find(name);
      if (t == nullptr || t->shape.size() != 2) fail("tensor ", name, ": missing, or not a matrix");
      const std::int64_t rows = t->shape[0], cols = t->shape[1];
      if (cols % block != 0) continue;  // stored as w8 anyway
      const cpu::WeightMatrix m{.data = t->data, .dtype = t->dtype, .rows = rows, .cols = cols};
      row.resize(static_cast<std::size_t>(cols));
      packed.resize(static_cast<std::size_t>(cols / 2));
      scales.resize(static_cast<std::size_t>(cols / kW4Group));
      for (std::int64_t i = 0; i < std::min(rows, kSampledRows); ++i) {
        const std::int64_t r = i * rows / std::min(rows, kSampledRows);
        cpu::weight_row_to_f32(m, r, row.data());
        if (smoothing != nullptr) smoothing->apply_row(name, r, row.data(), cols);
        quantize_w4_row(row.data(), cols, block, packed.data(), scales.data(), how);
        for (std::int64_t c = 0; c < cols; ++c) {
          const int q = cpu::w4_nibble(packed[static_cast<std::size_t>(c / 2)], static_cast<int>(c % 2));
          const double d = static_cast<double>(row[c]) - q * static_cast<double>(scales[c / kW4Group]);
          err += d * d;
          norm += static_cast<double>(row[c]) * row[c];
        }
      }
    }
    rule.kinds.push_back({kind, norm > 0 ? std::sqrt(err / norm) : 0.0, norm > 0, false});
  }
  std::vector<double> e;
  for (const auto& k : rule.kinds)
    if (k.measured) e.push_back(k.error);
  std::sort(e.begin(), e.end());
  rule.median = e.empty() ? 0 : e[e.size() / 2];
  for (auto& k : rule.kinds)
    k.kept_w8 = k.measured && (mode == "auto" ? k.error > kKeepRatio * rule.median : listed.count(k.kind) != 0);
  return rule;
}

}  // namespace qhx
