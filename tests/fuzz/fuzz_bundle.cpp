// A bundle .bin as the CPU backend reads it: the safetensors header with its
// "__metadata__" (the bundle format version), then every tensor taken as a weight
// matrix or vector the way the graphs take them, which decides the format from
// the dtype and the companion "<name>.scale".
//
// The input is the header's JSON text, a NUL, then the data section: the target
// writes the 8-byte length itself, so mutations reach the metadata and the
// weight checks instead of dying at the length prefix (fuzz_safetensors covers it).
#include <cstdint>
#include <cstring>
#include <vector>

#include "backends/cpu/checkpoint_weights.hpp"
#include "fuzz_support.hpp"
#include "qhexrt/safetensors.hpp"

namespace {

using qhx::cpu::WeightMatrix;

std::vector<std::uint8_t> as_safetensors(const std::uint8_t* data, std::size_t size) {
  const auto* nul = static_cast<const std::uint8_t*>(std::memchr(data, 0, size));
  const std::size_t header = nul != nullptr ? static_cast<std::size_t>(nul - data) : size;
  std::vector<std::uint8_t> out(8);
  for (int i = 0; i < 8; ++i)
    out[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(std::uint64_t{header} >> (8 * i));
  out.insert(out.end(), data, data + size);
  if (nul != nullptr) out.erase(out.begin() + 8 + static_cast<std::ptrdiff_t>(header));  // the separator
  return out;
}

// A matrix the reader hands out must cover exactly its tensor's bytes, and its
// scales exactly theirs: the kernels read rows * cols elements with no checks.
void check_matrix(const qhx::Checkpoint& ckpt, const std::string& name, const WeightMatrix& w) {
  const qhx::TensorView& t = ckpt.get(name);
  const auto elements = static_cast<std::size_t>(w.rows * w.cols);
  const std::size_t need = w.dtype == qhx::DType::U8 ? elements / 2 : elements * qhx::dtype_size(w.dtype);
  QHX_FUZZ_CHECK(need == t.nbytes);
  if (w.scales != nullptr) {
    const qhx::TensorView& s = ckpt.get(name + ".scale");
    const auto groups = w.dtype == qhx::DType::U8 ? w.rows * (w.cols / qhx::cpu::kW4GroupSize) : w.rows;
    QHX_FUZZ_CHECK(static_cast<std::size_t>(groups) * sizeof(float) == s.nbytes);
  }
  if (w.rows > 0 && w.cols > 0 && w.cols <= (1 << 16)) {
    std::vector<float> row(static_cast<std::size_t>(w.cols));
    qhx::cpu::weight_row_to_f32(w, 0, row.data());
    qhx::cpu::weight_row_to_f32(w, w.rows - 1, row.data());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const qhx::fuzz::ScratchFile file(".bin");
  const auto& path = file.write(as_safetensors(data, size));
  qhx::fuzz::expect_only_qhx_errors([&] {
    const auto ckpt = qhx::Checkpoint::open(path);
    for (const std::string& name : ckpt.names()) {
      const qhx::TensorView& t = ckpt.get(name);
      qhx::fuzz::expect_only_qhx_errors([&] { check_matrix(ckpt, name, qhx::cpu::matrix_weight(ckpt, name)); });
      if (!t.shape.empty() && t.shape[0] > 0) {
        const std::int64_t rows = t.shape[0];
        const std::int64_t stored = t.numel() / rows;
        const std::int64_t cols = t.dtype == qhx::DType::U8 ? 2 * stored : stored;
        qhx::fuzz::expect_only_qhx_errors(
            [&] { check_matrix(ckpt, name, qhx::cpu::reshaped_matrix_weight(ckpt, name, rows, cols)); });
      }
      if (t.shape.size() == 1)
        qhx::fuzz::expect_only_qhx_errors([&] { (void)qhx::cpu::vector_weight(ckpt, name, t.shape[0]); });
    }
  });
  return 0;
}
