// Named intermediates for parity debugging. Graphs report each intermediate
// under the name the Python reference uses (e.g. "hidden.layer3"); a tool can
// install a sink to write them out and diff them against transformers by name.
// With no sink installed, dump() is a cheap no-op.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

namespace qhx::debug {

using DumpSink = std::function<void(std::string_view name, const float* data, const std::vector<std::int64_t>& shape)>;

void set_dump_sink(DumpSink sink);  // an empty function turns dumping off
bool dumping();
void dump(std::string_view name, const float* data, const std::vector<std::int64_t>& shape);

}  // namespace qhx::debug
