// write_npy is declared in the public qhexrt/debug.hpp.
#pragma once

#include "qhexrt/debug.hpp"
