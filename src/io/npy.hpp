// Writing NumPy .npy files (format version 1.0, little-endian, C order), for
// dumps that tests and users read with numpy.load.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <vector>

namespace qhx {

// Throws qhx::Error naming the path on failure. numel(shape) must equal data.size().
void write_npy(const std::filesystem::path& path, std::span<const float> data, const std::vector<std::int64_t>& shape);
void write_npy(const std::filesystem::path& path, std::span<const std::int64_t> data,
               const std::vector<std::int64_t>& shape);

}  // namespace qhx
