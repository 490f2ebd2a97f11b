// The definitions of the tables declared in unicode_classes.hpp, generated into
// the build directory by scripts/gen_unicode_tables.py (see src/CMakeLists.txt).
#include "tokenizer/unicode_classes.hpp"

#include "qhx_unicode_tables.inc"
