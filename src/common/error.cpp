// The error type is header-only; this file anchors it in the library so that
// the vtable and typeinfo of qhx::Error live in exactly one object file.
#include "qhexrt/error.hpp"
