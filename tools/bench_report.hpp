// qhx_bench's table: the figures of its JSON object, one line each.
#pragma once

#include <string>

#include "bench_support.hpp"

namespace qhx_bench {

// Prints `j` (what `qhx_bench --json` writes) as the human-readable table on
// stdout; int8_isa is the roofline's int8 ISA, for the machine line.
void print_report(const json& j, const std::string& int8_isa);

}  // namespace qhx_bench
