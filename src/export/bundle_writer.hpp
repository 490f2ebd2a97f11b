// Writing QHexRT bundle files (docs/bundle.md): safetensors files whose
// every tensor starts at a multiple of 64 bytes from the start of the file.
//
// Two phases, so a multi-GB file is never held in memory: add() declares each
// tensor (name, dtype, shape, and how to produce its bytes), then finish()
// writes the header (all sizes are known by then) and calls each producer in
// add() order, streaming its bytes to the file. Gaps before a tensor are filled
// by "__pad.<n>" U8 [k] entries of zero bytes (standard safetensors readers reject
// unlisted gaps), and the header is padded with spaces so the data starts 64-aligned.
//
// Tensors whose bytes are given to add() (small ones: vectors, shapes) are laid out
// before those with producers, so a loader's reads at open are contiguous.
//
// The file is written as "<path>.partial" and renamed to <path> once complete and
// synced to disk: a failed or interrupted conversion leaves no file that looks finished.
// Its XXH3-128 is computed as the bytes go out (digest(), for checksums.json).
// Errors are qhx::Error naming the path (and the tensor); a file system failure (a
// full disk) is a qhx::IoError naming the file and the OS reason.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "common/file_digest.hpp"
#include "formats/quantize.hpp"
#include "qhexrt/dtype.hpp"

namespace qhx {

inline constexpr std::uint64_t kBundleAlignment = 64;

// Where a tensor producer writes its bytes (in order, exactly the declared count).
class ByteSink {
 public:
  virtual ~ByteSink() = default;
  virtual void write(const void* data, std::size_t n) = 0;
  template <typename T>
  void write(std::span<const T> values) {
    write(values.data(), values.size_bytes());
  }
};

class BundleWriter {
 public:
  using Producer = std::function<void(ByteSink&)>;

  // `metadata` must hold "role" (non-empty) and "weights" (w8, w4, f16 or f32);
  // "qhexrt_bundle" is the writer's (giving it is an error): the lowest format
  // version that reads the file, 1 unless a tensor asked for more (require_version:
  // 2 for a panel-form matrix), so older readers keep reading what they can.
  // Nothing is written before finish().
  BundleWriter(std::filesystem::path path, std::map<std::string, std::string> metadata);
  ~BundleWriter();
  BundleWriter(const BundleWriter&) = delete;
  BundleWriter& operator=(const BundleWriter&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // The bundle's "weights" format.
  WeightFormat weights() const { return weights_; }
  // Columns per w4 block: the metadata's "w4_block" (32, 64 or 128), kW4Block without it.
  std::int64_t w4_block() const { return w4_block_; }
  // How w4 scales are chosen: the metadata's "w4_scales" ("lpbq" or "free"), LPBQ without it.
  W4Scales w4_scales() const { return w4_scales_; }

  // Declares a tensor whose numel * dtype_size bytes `produce` writes during
  // finish(). Names must be unique, non-empty and not start with "__" (reserved
  // for __metadata__ and __pad.<n>).
  void add(const std::string& name, DType dtype, std::vector<std::int64_t> shape, Producer produce);
  // The same with the bytes given now (copied: for small tensors).
  void add(const std::string& name, DType dtype, std::vector<std::int64_t> shape, std::span<const std::byte> bytes);
  void add_f32(const std::string& name, std::vector<std::int64_t> shape, std::span<const float> values);

  // The file needs bundle format `version` (1 .. kBundleFormatVersion) or later to be read.
  void require_version(int version);

  // Writes the file. Call once; no add() after it.
  void finish();
  // The size and XXH3-128 of the file finish() wrote.
  const FileDigest& digest() const { return digest_; }

 private:
  struct Entry {
    std::string name;  // "__pad.<n>" entries have no producer: zero bytes
    DType dtype;
    std::vector<std::int64_t> shape;
    std::uint64_t nbytes;
    Producer produce;
    bool given;  // the bytes were given to add(): laid out first (finish())
  };
  std::filesystem::path path_;
  std::map<std::string, std::string> metadata_;
  WeightFormat weights_ = WeightFormat::F32;
  std::int64_t w4_block_ = kW4Block;
  W4Scales w4_scales_ = W4Scales::Lpbq;
  std::vector<Entry> entries_;
  bool finished_ = false;
  int version_ = 1;
  FileDigest digest_;
};

// Row r of a [rows, cols] f32 matrix into out[cols] (e.g. widened from a bf16
// checkpoint). Called once per row, in order, during BundleWriter::finish().
using RowSource = std::function<void(std::int64_t r, float* out)>;

// Declares matrix `name` [rows, cols] in format `f` (w4 falls back to w8 when
// cols is not a multiple of the writer's w4 block: see matrix_storage_format):
// `name` and, for w8 and w4, `name + ".scale"` (LPBQ w4 also `name + ".channel_scale"`),
// converted row by row from `rows_of` as the file is written.
// Returns the format actually used. Conversion errors name the tensor and row.
WeightFormat add_matrix(BundleWriter& w, const std::string& name, WeightFormat f, std::int64_t rows, std::int64_t cols,
                        RowSource rows_of);
// Declares w8 matrix `name` [rows, cols] in the panel form the int8 kernels read in
// place (src/backends/cpu/stored_panels.hpp; docs/bundle.md, "Panel form"): tensors
// `name.panels`, `.row_sums`, `.scale` and `.shape`, quantized as add_matrix's w8,
// row by row from `rows_of`, 16 rows at a time. Makes the file format version 2.
void add_w8_panel_matrix(BundleWriter& w, const std::string& name, std::int64_t rows, std::int64_t cols,
                         RowSource rows_of);
// The same as add_matrix from an f32 matrix held by the writer until finish().
WeightFormat add_matrix(BundleWriter& w, const std::string& name, WeightFormat f, std::int64_t rows, std::int64_t cols,
                        std::vector<float> values);

}  // namespace qhx
