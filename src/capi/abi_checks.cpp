// The layout of the C API's structs, frozen: a program compiled against an
// older qhexrt.h passes these structs to whichever libqhexrt.so.0 it finds, so
// a field that moves breaks it silently. Later API versions only append fields
// (docs/api.md, "Compatibility"); these checks fail the build of the shared
// library if an edit moves one. Offsets are those of LP64 (x86-64, aarch64).
#include <cstddef>
#include <cstdint>

#include "qhexrt/qhexrt.h"

#if UINTPTR_MAX == UINT64_MAX
// API version 1.
static_assert(offsetof(qhx_generate_options, prompt) == 0);
static_assert(offsetof(qhx_generate_options, system) == 8);
static_assert(offsetof(qhx_generate_options, images) == 16);
static_assert(offsetof(qhx_generate_options, n_images) == 24);
static_assert(offsetof(qhx_generate_options, max_new_tokens) == 32);
static_assert(offsetof(qhx_generate_options, greedy) == 36);
static_assert(offsetof(qhx_generate_options, seed) == 40);
static_assert(offsetof(qhx_generate_options, raw) == 48);

// API version 2.
static_assert(offsetof(qhx_pipeline_options, struct_size) == 0);
static_assert(offsetof(qhx_pipeline_options, image_cache_mb) == 8);
static_assert(offsetof(qhx_pipeline_options, want_images) == 16);
static_assert(offsetof(qhx_pipeline_options, threads) == 20);
static_assert(offsetof(qhx_pipeline_options, weights_in_memory) == 24);

static_assert(offsetof(qhx_image_cache_stats, struct_size) == 0);
static_assert(offsetof(qhx_image_cache_stats, hits) == 8);
static_assert(offsetof(qhx_image_cache_stats, misses) == 16);
static_assert(offsetof(qhx_image_cache_stats, entries) == 24);
static_assert(offsetof(qhx_image_cache_stats, bytes) == 32);
static_assert(offsetof(qhx_image_cache_stats, capacity_bytes) == 40);

static_assert(offsetof(qhx_generation_options, struct_size) == 0);
static_assert(offsetof(qhx_generation_options, max_new_tokens) == 8);
static_assert(offsetof(qhx_generation_options, use_manifest_sampling) == 16);
static_assert(offsetof(qhx_generation_options, greedy) == 20);
static_assert(offsetof(qhx_generation_options, temperature) == 24);
static_assert(offsetof(qhx_generation_options, top_k) == 28);
static_assert(offsetof(qhx_generation_options, top_p) == 32);
static_assert(offsetof(qhx_generation_options, min_p) == 36);
static_assert(offsetof(qhx_generation_options, repetition_penalty) == 40);
static_assert(offsetof(qhx_generation_options, presence_penalty) == 44);
static_assert(offsetof(qhx_generation_options, seed) == 48);
static_assert(offsetof(qhx_generation_options, stop) == 56);
static_assert(offsetof(qhx_generation_options, n_stop) == 64);
static_assert(offsetof(qhx_generation_options, resize) == 72);
static_assert(offsetof(qhx_generation_options, on_text) == 80);
static_assert(offsetof(qhx_generation_options, user) == 88);
static_assert(offsetof(qhx_generation_options, keep_step_logits) == 96);
static_assert(offsetof(qhx_generation_options, reserved_v3) == 100);
static_assert(offsetof(qhx_generation_options, frequency_penalty) == 104);
static_assert(offsetof(qhx_generation_options, reserved_v4) == 108);
static_assert(offsetof(qhx_generation_options, speculate) == 112);
static_assert(sizeof(qhx_generation_options) == 120);

static_assert(offsetof(qhx_timings, struct_size) == 0);
static_assert(offsetof(qhx_timings, load_ms) == 8);
static_assert(offsetof(qhx_timings, vision_ms) == 16);
static_assert(offsetof(qhx_timings, image_tokens) == 24);
static_assert(offsetof(qhx_timings, images_encoded) == 32);
static_assert(offsetof(qhx_timings, image_cache_hits) == 40);
static_assert(offsetof(qhx_timings, prefill_ms) == 48);
static_assert(offsetof(qhx_timings, ttft_ms) == 56);
static_assert(offsetof(qhx_timings, decode_ms_per_token) == 64);
static_assert(offsetof(qhx_timings, decode_steps) == 72);
#endif
