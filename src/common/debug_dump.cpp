#include "common/debug_dump.hpp"

namespace qhx::debug {
namespace {
DumpSink& sink() {
  static DumpSink s;
  return s;
}
}  // namespace

void set_dump_sink(DumpSink s) { sink() = std::move(s); }
bool dumping() { return static_cast<bool>(sink()); }
void dump(std::string_view name, const float* data, const std::vector<std::int64_t>& shape) {
  if (sink()) sink()(name, data, shape);
}

}  // namespace qhx::debug
