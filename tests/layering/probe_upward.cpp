// A scratch file of the formats layer that includes a header of the runtime, a layer
// above it: the build must refuse it (tests/layering/probe.sh).
#include "runtime/manifest.hpp"

int qhx_layering_probe_upward() { return 0; }
