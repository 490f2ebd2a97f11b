// How a CPU graph's weight matrices meet the kernels, read from the graph's
// manifest entry once at init (docs/manifest.md, "activations"):
//   "activations": "int8"  w8 and w4 matrices take the int8 path (int8_matmul.hpp):
//                          activations quantized per row at run time; the default
//                          (manifest version 2 and later; version 1 plans, which
//                          predate the key, keep f32)
//                  "f16"   every matrix's input is rounded to fp16 (ties to even),
//                          then as "f32": what an fp16 accelerator computes
//                  "f32"   every matrix is widened to f32 in registers: exact
//                          with respect to the stored weights, slower
// Matrices of other formats always compute in f32.
#pragma once

#include <cstddef>
#include <filesystem>

#include "backends/cpu/kernel_set.hpp"
#include "backends/cpu/weights.hpp"
#include "backends/delegate.hpp"
#include "qhexrt/safetensors.hpp"

namespace qhx::cpu {

struct KernelPlan {
  const KernelSet* kernels = nullptr;
  bool int8_activations = true;
  bool f16_activations = false;
};

// The plan for blob on the active kernel set. Throws qhx::Error naming the
// graph if "activations" is not one of the values above.
KernelPlan kernel_plan(const GraphBlob& blob);

// Marks w for the plan's arithmetic and lets the kernel set repack it (done
// once per matrix, at load). A repacked matrix's mapped pages are released
// (release_pages), so the process holds one copy of the weights, not two; the
// mapping stays valid and re-reads the file if the stored form is used again.
// A w8 matrix stored in the panel form (bundle format 2) is used in place when the
// kernel set can (int8 activations, a 16-row-panel kernel): opening is then mapping;
// otherwise it is unpacked into rows first and treated as a row-major matrix.
void prepare(const KernelPlan& plan, WeightMatrix& w);

// Drops the resident pages of a read-only file mapping inside [data, data + bytes)
// (nothing outside a registered file mapping).
void release_pages(const void* data, std::size_t bytes);

// How a graph whose every decode step streams its weights (the decoder, the
// lm-head) holds its weights file `path`: with `in_memory` (the pipeline's
// weights_in_memory), read into memory in 2 MiB pages (FileResidency::InMemory,
// safetensors.hpp) when it holds panel-form matrices the plan's kernels use in
// place; else mapped (other matrices are repacked into the process's own memory
// at load anyway, or read as rows).
Checkpoint open_streamed_weights(const std::filesystem::path& path, const KernelPlan& plan, bool in_memory);

}  // namespace qhx::cpu
