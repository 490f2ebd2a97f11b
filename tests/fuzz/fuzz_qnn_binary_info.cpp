// A context binary's metadata as QHexRT takes it from QnnSystemContext_getBinaryInfo.
// QHexRT never parses the binary's bytes itself (QAIRT's libQnnSystem does, and is
// not ours to fuzz); what it parses is the library's answer, which carries whatever
// the binary says: struct versions, graph and tensor counts, names, ranks, dims and
// build ids. This target builds that answer from the input (arrays as long as their
// counts, but maybe absent) and runs QHexRT's side: binary_info_from (what
// read_binary_info keeps) and qhx_doctor's build-id comparison and SoC label.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "backends/qnn/qnn_runtime.hpp"
#include "doctor/qairt_version.hpp"
#include "fuzz_support.hpp"

namespace {

namespace abi = qhx::qnn::abi;

// Owns everything the fake answer points at (a deque: growing it moves nothing).
struct Arena {
  std::deque<std::string> strings;
  std::deque<std::vector<std::uint32_t>> dims;
  std::deque<std::vector<abi::Tensor>> tensors;
  std::vector<abi::GraphInfo> graphs;
};

const char* c_string(FuzzedDataProvider& fdp, Arena& a) {
  if (fdp.ConsumeIntegralInRange(0, 7) == 0) return nullptr;
  return a.strings.emplace_back(fdp.ConsumeRandomLengthString(48)).c_str();
}

std::uint32_t small_or_any(FuzzedDataProvider& fdp, std::uint32_t small) {
  return fdp.ConsumeBool() ? fdp.ConsumeIntegralInRange<std::uint32_t>(0, small) : fdp.ConsumeIntegral<std::uint32_t>();
}

abi::Tensor tensor(FuzzedDataProvider& fdp, Arena& a) {
  static const abi::DataType kTypes[] = {abi::DataType::Float32, abi::DataType::Float16, abi::DataType::Int32,
                                         abi::DataType::Int8,    abi::DataType::UInt8,   abi::DataType::Bool8};
  abi::Tensor t{};
  t.version = fdp.ConsumeIntegralInRange<std::uint32_t>(0, 3);
  abi::TensorV1& v = t.v1;
  v.id = fdp.ConsumeIntegral<std::uint32_t>();
  v.name = c_string(fdp, a);
  v.type = static_cast<abi::TensorType>(fdp.ConsumeIntegralInRange<std::uint32_t>(0, 5));
  v.data_type = fdp.ConsumeBool() ? kTypes[fdp.ConsumeIntegralInRange<std::size_t>(0, 5)]
                                  : static_cast<abi::DataType>(fdp.ConsumeIntegral<std::uint32_t>());
  v.rank = small_or_any(fdp, 10);
  if (fdp.ConsumeIntegralInRange(0, 7) != 0) {
    auto& d = a.dims.emplace_back(std::min<std::uint32_t>(v.rank, 16));
    for (auto& x : d) x = small_or_any(fdp, 64);
    v.dims = d.data();
  }
  return t;
}

abi::Tensor* tensors(FuzzedDataProvider& fdp, Arena& a, std::uint32_t& count) {
  count = fdp.ConsumeIntegralInRange<std::uint32_t>(0, 4);
  auto& ts = a.tensors.emplace_back();
  for (std::uint32_t i = 0; i < count; ++i) ts.push_back(tensor(fdp, a));
  return fdp.ConsumeIntegralInRange(0, 7) == 0 ? nullptr : ts.data();
}

abi::BinaryInfo answer(FuzzedDataProvider& fdp, Arena& a) {
  abi::BinaryInfo bi{};
  bi.version = fdp.ConsumeIntegralInRange<std::uint32_t>(0, 4);
  const auto n = fdp.ConsumeIntegralInRange<std::uint32_t>(0, 4);
  a.graphs.assign(n, abi::GraphInfo{});
  for (auto& g : a.graphs) {
    g.version = fdp.ConsumeIntegralInRange<std::uint32_t>(0, 4);
    g.v1.name = c_string(fdp, a);
    g.v1.inputs = tensors(fdp, a, g.v1.num_inputs);
    g.v1.outputs = tensors(fdp, a, g.v1.num_outputs);
  }
  abi::GraphInfo* graphs = fdp.ConsumeIntegralInRange(0, 7) == 0 ? nullptr : a.graphs.data();
  const abi::Version core{small_or_any(fdp, 3), small_or_any(fdp, 30), small_or_any(fdp, 3)};
  if (bi.version == 3) {
    bi.v3 = {};
    bi.v3.build_id = c_string(fdp, a);
    bi.v3.soc_version = c_string(fdp, a);
    bi.v3.core_api = core;
    bi.v3.soc_model = small_or_any(fdp, 90);
    bi.v3.num_graphs = n;
    bi.v3.graphs = graphs;
  } else {
    bi.v1 = {};
    bi.v1.build_id = c_string(fdp, a);
    bi.v1.soc_version = c_string(fdp, a);
    bi.v1.core_api = core;
    bi.v1.num_graphs = n;
    bi.v1.graphs = graphs;
  }
  return bi;
}

// What the backend then does with a tensor's dims: allocates dtype size times
// their product, and hands QNN that size as a 32-bit client-buffer length.
void check_tensor(const qhx::qnn::TensorInfo& t) {
  QHX_FUZZ_CHECK(t.dims.size() <= 8);
  unsigned __int128 bytes = 4;  // the widest element a graph's I/O may have
  for (const auto d : t.dims) bytes = std::min<unsigned __int128>(bytes * d, ~std::uint64_t{0});
  QHX_FUZZ_CHECK(bytes <= 0xFFFFFFFFu);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider fdp(data, size);
  const std::string library_build = fdp.ConsumeRandomLengthString(48);
  Arena arena;
  const abi::BinaryInfo bi = answer(fdp, arena);
  qhx::fuzz::expect_only_qhx_errors([&] {
    const qhx::qnn::BinaryInfo info = qhx::qnn::binary_info_from(bi, "fuzz.bin");
    for (const auto& g : info.graphs) {
      for (const auto& t : g.inputs) check_tensor(t);
      for (const auto& t : g.outputs) check_tensor(t);
    }
    (void)qhx::doctor::check_qairt_builds(info.build_id, library_build);
    (void)qhx::doctor::parse_qairt_build(info.soc_version);
    (void)qhx::qnn::soc_label(info.soc_model);
  });
  return 0;
}
