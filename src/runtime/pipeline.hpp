// The pipeline is public API: see include/qhexrt/pipeline.hpp.
#pragma once

#include "qhexrt/pipeline.hpp"
#include "runtime/manifest.hpp"
