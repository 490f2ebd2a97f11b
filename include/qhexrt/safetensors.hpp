// qhexrt/safetensors.hpp — read-only, zero-copy access to safetensors checkpoints.
//
// Format: 8-byte little-endian header length N, an N-byte JSON header mapping
// tensor names to {dtype, shape, data_offsets:[begin,end)} (relative to the
// data section that starts right after the header), and an optional
// "__metadata__" string map. The file is mmapped; a TensorView points into the
// mapping, so the file object must outlive every view taken from it.
//
// Everything in the header is validated before any view is handed out: known
// dtype, non-negative shape, begin <= end, every tensor inside the file,
// end - begin == numel * dtype size, no two tensors overlapping.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "qhexrt/dtype.hpp"

namespace qhx {

// The QHexRT bundle format version this build reads (the "qhexrt_bundle"
// metadata key of a bundle .bin; see docs/bundle.md). Newer files are refused.
constexpr int kBundleFormatVersion = 2;

struct TensorView {
  std::string name;
  DType dtype = DType::F32;
  std::vector<std::int64_t> shape;
  const std::byte* data = nullptr;  // points into the mapped file; nullptr when nbytes == 0
  std::size_t nbytes = 0;

  std::int64_t numel() const;
};

// How a file's bytes are held. Mapped: served from the page cache, so opening
// copies nothing (and processes share the pages). InMemory: read into this
// process's memory in 2 MiB pages at open, for weights that every decode step
// streams in full: 4 KiB page-cache pages cost such a stream a TLB miss and a
// stop of the hardware prefetchers at every page (docs/bundle.md, "Mapped files").
enum class FileResidency { Mapped, InMemory };

// One .safetensors file.
class SafetensorsFile {
 public:
  // Maps (or reads) and validates the file. Throws qhx::Error naming the file and the problem.
  static SafetensorsFile open(const std::filesystem::path& path, FileResidency residency = FileResidency::Mapped);

  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;
  ~SafetensorsFile();

  const std::filesystem::path& path() const;
  // Tensors in header order.
  const std::vector<TensorView>& tensors() const;
  // nullptr if absent.
  const TensorView* find(std::string_view name) const;
  // Throws qhx::Error naming the tensor and the file if absent.
  const TensorView& get(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const;

 private:
  struct Impl;
  explicit SafetensorsFile(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A Hugging Face checkpoint: a single model.safetensors, or shards listed by
// model.safetensors.index.json ("weight_map": tensor name -> shard file).
class Checkpoint {
 public:
  // `path` is a checkpoint directory, a .safetensors file or an index .json file.
  static Checkpoint open(const std::filesystem::path& path, FileResidency residency = FileResidency::Mapped);

  Checkpoint(Checkpoint&&) noexcept;
  Checkpoint& operator=(Checkpoint&&) noexcept;
  ~Checkpoint();

  const TensorView* find(std::string_view name) const;
  const TensorView& get(std::string_view name) const;
  std::vector<std::string> names() const;  // sorted
  std::size_t shard_count() const;

 private:
  struct Impl;
  explicit Checkpoint(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace qhx
