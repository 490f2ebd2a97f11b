# cmake -DIN=FILE -DOUT=HEADER -DNAME=SYMBOL -P embed_file.cmake
# Writes HEADER with FILE's bytes as `inline constexpr unsigned char SYMBOL[]` and SYMBOL##Size.
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" n)
math(EXPR size "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
file(WRITE "${OUT}.tmp"
  "// Generated from ${IN} by tools/serve/embed_file.cmake; do not edit.\n"
  "#pragma once\n#include <cstddef>\n\n"
  "inline constexpr unsigned char ${NAME}[] = {\n  ${bytes}0x00};\n"
  "inline constexpr std::size_t ${NAME}Size = ${size};\n")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.tmp")
