#include "backends/cpu/kernel_plan.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <string>

#include "backends/cpu/checkpoint_weights.hpp"
#include "backends/cpu/stored_panels.hpp"
#include "common/mapping_guard.hpp"
#include "qhexrt/error.hpp"

namespace qhx::cpu {

KernelPlan kernel_plan(const GraphBlob& blob) {
  KernelPlan plan;
  plan.kernels = &active_kernels();
  const auto it = blob.spec.find("activations");
  if (it == blob.spec.end()) {
    // Version 1 plans predate the key and computed in f32: they keep doing so.
    plan.int8_activations = blob.manifest_version >= 2;
    return plan;
  }
  if (!it->is_string() || (*it != "int8" && *it != "f16" && *it != "f32"))
    fail("graph \"", blob.name, "\": \"activations\" must be \"int8\", \"f16\" or \"f32\", not ", it->dump());
  plan.int8_activations = *it == "int8";
  plan.f16_activations = *it == "f16";
  return plan;
}

void prepare(const KernelPlan& plan, WeightMatrix& w) {
  w.int8_activations = plan.int8_activations && (w.dtype == DType::I8 || w.dtype == DType::U8);
  w.f16_activations = plan.f16_activations;
  w.packed = plan.kernels->pack(w);
  if (w.panel_form) {
    if (w.packed != nullptr) return;  // the mapped panels themselves: nothing to copy or release
    // This kernel set reads rows (or panels of another height): unpack, then as a row-major matrix.
    unpack_panel_form(w);
    w.packed = plan.kernels->pack(w);
    return;  // (the rows are w's own memory, not pages of the file to release)
  }
  const std::int64_t stored_cols = w.dtype == DType::U8 ? w.cols / 2 : w.cols;
  if (w.packed != nullptr) release_pages(w.data, static_cast<std::size_t>(w.rows * stored_cols));
}

void release_pages(const void* data, std::size_t bytes) {
  // Only pages of a file mapping, which the file refills: a file read into
  // memory (FileResidency::InMemory) would read zeros there afterwards.
  if (!mapping_registry::maps_file(data, bytes)) return;
  // Only whole pages inside the range: its neighbours may still be in use.
  const auto page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto begin = (reinterpret_cast<std::uintptr_t>(data) + page - 1) / page * page;
  const auto end = (reinterpret_cast<std::uintptr_t>(data) + bytes) / page * page;
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);  // advisory
}

Checkpoint open_streamed_weights(const std::filesystem::path& path, const KernelPlan& plan, bool in_memory) {
  Checkpoint mapped = Checkpoint::open(path);
  if (!in_memory || !plan.int8_activations) return mapped;
  const std::string suffix = ".panels";
  for (const std::string& name : mapped.names()) {
    if (name.size() <= suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
    // One panel-form matrix tells: the plan's kernel set either views its panels
    // in place (all of the file's are then used so) or unpacks them into rows.
    WeightMatrix w = matrix_weight(mapped, name.substr(0, name.size() - suffix.size()));
    w.int8_activations = true;
    if (w.panel_form && plan.kernels->pack(w) != nullptr) return Checkpoint::open(path, FileResidency::InMemory);
    return mapped;
  }
  return mapped;
}

}  // namespace qhx::cpu
