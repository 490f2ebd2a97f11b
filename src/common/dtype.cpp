// The element types (qhexrt/dtype.hpp), spelled as safetensors spells them.
#include "qhexrt/dtype.hpp"

#include "qhexrt/error.hpp"

namespace qhx {
namespace {

struct DTypeName {
  std::string_view name;
  DType dtype;
  std::size_t size;
};

constexpr DTypeName kDTypes[] = {
    {"F32", DType::F32, 4}, {"F16", DType::F16, 2}, {"BF16", DType::BF16, 2}, {"I8", DType::I8, 1},
    {"U8", DType::U8, 1},   {"I32", DType::I32, 4}, {"I64", DType::I64, 8},
};

const DTypeName& dtype_entry(DType dt) {
  for (const auto& d : kDTypes)
    if (d.dtype == dt) return d;
  fail("qhx::DType: invalid enumerator ", static_cast<int>(dt));
}

}  // namespace

std::size_t dtype_size(DType dt) { return dtype_entry(dt).size; }

std::string_view dtype_name(DType dt) { return dtype_entry(dt).name; }

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& d : kDTypes)
    if (d.name == name) return d.dtype;
  return std::nullopt;
}

}  // namespace qhx
