// qhexrt/dtype.hpp — element types of tensors in files and in memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace qhx {

enum class DType : std::uint8_t { F32, F16, BF16, I8, U8, I32, I64 };

std::size_t dtype_size(DType dt);                             // bytes per element
std::string_view dtype_name(DType dt);                        // the safetensors spelling: "F32", "BF16", ...
std::optional<DType> dtype_from_name(std::string_view name);  // the inverse; nullopt if unknown

}  // namespace qhx
