// qhexrt/debug.hpp — looking inside a run: named intermediates, and .npy files.
//
// Graphs report each intermediate under the name the Python reference uses
// (e.g. "hidden.layer3"); a tool can install a sink to write them out and diff
// them against transformers by name. With no sink installed, reporting is a
// cheap no-op. write_npy writes NumPy .npy files (format 1.0, little-endian, C
// order), for dumps that tests and users read with numpy.load.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

namespace qhx {
namespace debug {

using DumpSink = std::function<void(std::string_view name, const float* data, const std::vector<std::int64_t>& shape)>;

void set_dump_sink(DumpSink sink);  // an empty function turns dumping off

}  // namespace debug

// Throws qhx::Error naming the path on failure. numel(shape) must equal data.size().
void write_npy(const std::filesystem::path& path, std::span<const float> data, const std::vector<std::int64_t>& shape);
void write_npy(const std::filesystem::path& path, std::span<const std::int64_t> data,
               const std::vector<std::int64_t>& shape);

}  // namespace qhx
