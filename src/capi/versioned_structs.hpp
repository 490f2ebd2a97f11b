// The C API's versioned structs (qhexrt.h, "Versioned structs"): their sizes in
// each API version, reading and writing a caller's struct of any accepted size,
// and the defaults _init fills.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <type_traits>

#include "capi/capi_support.hpp"

namespace qhx::capi {

// The size of a versioned struct in API version 2: the end of its last v2
// field. Fields appended by later versions must not move this.
constexpr std::size_t kPipelineOptionsV2 = offsetof(qhx_pipeline_options, threads) + sizeof(int32_t);
constexpr std::size_t kGenerationOptionsV2 = offsetof(qhx_generation_options, keep_step_logits) + sizeof(int);
constexpr std::size_t kTimingsV2 = offsetof(qhx_timings, decode_steps) + sizeof(int64_t);
constexpr std::size_t kImageCacheStatsV2 = offsetof(qhx_image_cache_stats, capacity_bytes) + sizeof(int64_t);
// A version 3 field is honoured only if the caller's struct_size reaches its end.
constexpr std::size_t kGenerationOptionsV3 = offsetof(qhx_generation_options, frequency_penalty) + sizeof(float);
constexpr std::size_t kGenerationOptionsV4 = offsetof(qhx_generation_options, speculate) + sizeof(int32_t);
// The structs of API version 5, the last whose headers declared qhx_*_init as
// functions: what those exported symbols fill, whatever the library's structs
// grow to (a program built against such a header has a struct of at most this
// size). API 6 appended no field; a later version that appends one to a struct
// writes its V5 size here as the offset of that field (with the padding before it).
constexpr std::size_t kPipelineOptionsV5 = sizeof(qhx_pipeline_options);
constexpr std::size_t kGenerationOptionsV5 = sizeof(qhx_generation_options);
constexpr std::size_t kTimingsV5 = sizeof(qhx_timings);
constexpr std::size_t kImageCacheStatsV5 = sizeof(qhx_image_cache_stats);

// Checks a caller's struct_size against the v2 minimum.
template <typename T>
int check_struct_size(const T* s, std::size_t v2_size, const char* function, const char* argument, const char* type) {
  if (s->struct_size < v2_size)
    return set_error(QHX_ERR_ARGUMENT,
                     qhx::cat(function, ": ", argument, "->struct_size is ", s->struct_size, ", below the ", v2_size,
                              " bytes of API version 2's ", type, " (set it to sizeof(", type, "), or call the ", type,
                              "'s _init function)"));
  return QHX_OK;
}

// Reads a caller's versioned input struct: the defaults, overwritten by the
// fields that fit in the caller's struct_size (an older, shorter struct keeps
// the defaults of the fields it does not have; a longer one's tail is ignored).
template <typename T>
void read_versioned(const T* in, T& out) {
  static_assert(std::is_trivially_copyable_v<T>);
  std::memcpy(&out, in, std::min(in->struct_size, sizeof(T)));
  out.struct_size = sizeof(T);
}

// Writes a versioned output struct: only the fields that fit in the caller's struct_size.
template <typename T>
void write_versioned(const T& in, T* out) {
  static_assert(std::is_trivially_copyable_v<T>);
  const std::size_t caller_size = out->struct_size;
  std::memcpy(out, &in, std::min(caller_size, sizeof(T)));
  out->struct_size = caller_size;
}

// qhx_*_init_sized: the defaults into the caller's struct_size bytes (its tail
// past the library's struct zeroed), struct_size set to the caller's.
template <typename T>
int init_sized(T* s, std::size_t struct_size, std::size_t v2_size, const T& defaults, const char* function,
               const char* argument, const char* type) {
  static_assert(std::is_trivially_copyable_v<T>);
  if (s == nullptr) return null_argument(function, argument);
  if (struct_size < v2_size)
    return set_error(QHX_ERR_ARGUMENT, qhx::cat(function, ": struct_size is ", struct_size, ", below the ", v2_size,
                                                " bytes of API version 2's ", type, " (pass sizeof(", type, "))"));
  std::memcpy(s, &defaults, std::min(struct_size, sizeof(T)));
  if (struct_size > sizeof(T)) std::memset(reinterpret_cast<char*>(s) + sizeof(T), 0, struct_size - sizeof(T));
  s->struct_size = struct_size;
  return QHX_OK;
}

// The defaults of qhx_*_init.
qhx_pipeline_options default_pipeline_options();
qhx_generation_options default_generation_options();
// The C++ options of a (checked) C options struct.
qhx::GenerationOptions to_cpp(const qhx_generation_options& o);
// Options of qhx_session_send / _respond: NULL means the defaults.
int read_generation_options(const qhx_generation_options* in, qhx_generation_options& out, const char* function);

}  // namespace qhx::capi
