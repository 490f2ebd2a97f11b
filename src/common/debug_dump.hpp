// The reporting side of qhexrt/debug.hpp: graphs call dump() for each named intermediate.
#pragma once

#include "qhexrt/debug.hpp"

namespace qhx::debug {

bool dumping();
void dump(std::string_view name, const float* data, const std::vector<std::int64_t>& shape);

}  // namespace qhx::debug
