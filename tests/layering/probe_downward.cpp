// A scratch file of the formats layer that includes only what the formats layer sees:
// it must compile (the control for probe_upward.cpp, so that test cannot pass because
// nothing compiles at all).
#include "common/limits.hpp"
#include "formats/quantize.hpp"

int qhx_layering_probe_downward() { return static_cast<int>(qhx::format_name(qhx::WeightFormat::W8).size()); }
