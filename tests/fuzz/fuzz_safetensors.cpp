// The safetensors reader on arbitrary file contents: the length prefix, the JSON
// header and the tensor table it validates, and the lookups a graph then makes.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "fuzz_support.hpp"
#include "qhexrt/safetensors.hpp"

namespace {

// open()'s promises, checked from outside: views match their shapes, lie in the
// file (touching every byte faults past the mapping) and share no byte.
void check_views(const qhx::SafetensorsFile& st, std::size_t file_size) {
  std::vector<const qhx::TensorView*> views;
  for (const auto& t : st.tensors()) {
    QHX_FUZZ_CHECK(st.find(t.name) == &t);
    QHX_FUZZ_CHECK(t.nbytes == static_cast<std::size_t>(t.numel()) * qhx::dtype_size(t.dtype));
    QHX_FUZZ_CHECK((t.data == nullptr) == (t.nbytes == 0));
    const volatile std::byte* bytes = t.data;  // volatile: the reads are the check
    for (std::size_t i = 0; i < t.nbytes; ++i) (void)bytes[i];
    if (t.nbytes > 0) views.push_back(&t);
  }
  std::sort(views.begin(), views.end(), [](auto* a, auto* b) { return a->data < b->data; });
  for (std::size_t i = 1; i < views.size(); ++i)
    QHX_FUZZ_CHECK(views[i - 1]->data + views[i - 1]->nbytes <= views[i]->data);
  if (!views.empty())
    QHX_FUZZ_CHECK(views.back()->data + views.back()->nbytes - views.front()->data <=
                   static_cast<std::ptrdiff_t>(file_size));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const qhx::fuzz::ScratchFile file(".safetensors");
  const auto& path = file.write({data, size});
  qhx::fuzz::expect_only_qhx_errors([&] {
    const auto st = qhx::SafetensorsFile::open(path);
    check_views(st, size);
    (void)st.metadata().size();
  });
  return 0;
}
