// The part of Qualcomm's QNN C API (QAIRT) that the qnn-htp backend uses, declared here
// because no QNN headers are available from any registry. Written from the API's published
// documentation (docs.qualcomm.com, "Qualcomm AI Engine Direct": QnnInterface, QnnTypes,
// QnnContext, QnnGraph, QnnSystemContext, QnnSystemInterface), against QNN core API 2.x and
// QNN System API 1.x as shipped in QAIRT 2.4x/2.5x; the loader checks the versions the
// libraries report and tests/cpp/test_qnn.cpp checks these layouts against the real libraries.
//
// Only what we touch is typed; the rest of each function table is opaque slots, so a slot's
// position is what matters. The structs are the LP64 C layouts (x86-64 and aarch64 alike);
// the static_asserts pin the offsets we derived from the documented field lists, so an edit
// that moves a field fails the build instead of reading garbage at run time.
#pragma once

#include <cstdarg>
#include <cstddef>
#include <cstdint>

namespace qhx::qnn::abi {

// The structs mirror QNN's headers field by field, each field's offset or meaning aligned
// beside it.
// clang-format off

// Every QNN call returns a 64-bit handle; its low 16 bits are the error code (0 = success).
using ErrorHandle = std::uint64_t;
inline std::uint32_t error_code(ErrorHandle e) { return static_cast<std::uint32_t>(e & 0xFFFF); }

using Handle = void*;  // backend, device, context, graph, log, profile, signal: all opaque

struct Version {
  std::uint32_t major, minor, patch;
};
struct ApiVersion {
  Version core;     // the QNN API the library implements
  Version backend;  // the backend's own API (HTP, CPU, ...)
};

// Data types: high byte = class (0 int, 1 uint, 2 float, 3 sfixed, 4 ufixed, 5 bool),
// low byte = bit width written in hex digits (0x16 = 16 bits).
enum class DataType : std::uint32_t {
  Int8 = 0x0008, Int16 = 0x0016, Int32 = 0x0032, Int64 = 0x0064,
  UInt8 = 0x0108, UInt16 = 0x0116, UInt32 = 0x0132, UInt64 = 0x0164,
  Float16 = 0x0216, BFloat16 = 0x0226, Float32 = 0x0232, Float64 = 0x0264,
  SFixed8 = 0x0308, SFixed16 = 0x0316, SFixed32 = 0x0332,
  UFixed8 = 0x0408, UFixed16 = 0x0416, UFixed32 = 0x0432,
  Bool8 = 0x0508,
};
enum class TensorType : std::uint32_t { AppWrite = 0, AppRead = 1, AppReadWrite = 2, Native = 3, Static = 4 };
enum class MemType : std::uint32_t { Raw = 0, MemHandle = 1 };

// Quantization parameters: two enums and a union whose largest member (the bit-width
// per-axis encoding: 3 x u32, then two pointers) makes it 32 bytes. We never read the
// encodings (our graphs have float I/O); the size is what matters, for the tensor layout.
struct QuantizeParams {
  std::uint32_t definition;
  std::uint32_t encoding;
  alignas(8) std::uint8_t encoding_union[32];
};
static_assert(sizeof(QuantizeParams) == 40);

struct ClientBuffer {
  void* data;
  std::uint32_t size;
};

// Tensor version 1 and 2 share their leading fields; version 2 appends three.
struct TensorV1 {
  std::uint32_t id;
  const char* name;
  TensorType type;
  std::uint32_t data_format;  // 0 = dense
  DataType data_type;
  QuantizeParams quantize;
  std::uint32_t rank;
  std::uint32_t* dims;
  MemType mem_type;
  union {
    ClientBuffer client_buf;
    Handle mem_handle;
  };
};
struct TensorV2 {
  TensorV1 base;
  std::uint8_t* is_dynamic_dims;
  struct {
    std::uint32_t layout;
    std::uint32_t num_specified_elements;
    std::uint32_t num_sparse_dims;
  } sparse;
  std::uint8_t is_produced;
};
struct Tensor {
  std::uint32_t version;  // 1 or 2
  union {
    TensorV1 v1;
    TensorV2 v2;
  };
};
static_assert(offsetof(TensorV1, name) == 8 && offsetof(TensorV1, data_type) == 24);
static_assert(offsetof(TensorV1, quantize) == 32 && offsetof(TensorV1, rank) == 72);
static_assert(offsetof(TensorV1, dims) == 80 && offsetof(TensorV1, mem_type) == 88);
static_assert(offsetof(TensorV1, client_buf) == 96 && sizeof(TensorV1) == 112);
static_assert(sizeof(TensorV2) == 136);
static_assert(offsetof(Tensor, v1) == 8 && sizeof(Tensor) == 144);  // the stride of tensor arrays

using LogCallback = void (*)(const char* fmt, std::uint32_t level, std::uint64_t timestamp, va_list args);

// The core function table (QnnInterface's implementation struct, API 2.x). The order is
// the ABI: slots are only ever appended. Untyped slots are ones we do not call.
struct CoreFunctions {
  void* property_has_capability;                                                      // 0
  ErrorHandle (*backend_create)(Handle log, const void** config, Handle* backend);  // 1
  void* backend_set_config;                                                           // 2
  ErrorHandle (*backend_get_api_version)(ApiVersion* version);                       // 3
  ErrorHandle (*backend_get_build_id)(const char** id);                              // 4
  void* backend_register_op_package;                                                  // 5
  void* backend_get_supported_operations;                                             // 6
  void* backend_validate_op_config;                                                   // 7
  ErrorHandle (*backend_free)(Handle backend);                                        // 8
  void* context_create;                                                               // 9
  void* context_set_config;                                                           // 10
  void* context_get_binary_size;                                                      // 11
  void* context_get_binary;                                                           // 12
  ErrorHandle (*context_create_from_binary)(Handle backend, Handle device, const void** config,
                                            const void* binary, std::uint64_t size, Handle* context,
                                            Handle profile);                          // 13
  ErrorHandle (*context_free)(Handle context, Handle profile);                        // 14
  void* graph_create;                                                                 // 15
  void* graph_create_subgraph;                                                        // 16
  void* graph_set_config;                                                             // 17
  void* graph_add_node;                                                               // 18
  void* graph_finalize;                                                               // 19
  ErrorHandle (*graph_retrieve)(Handle context, const char* name, Handle* graph);     // 20
  ErrorHandle (*graph_execute)(Handle graph, const Tensor* inputs, std::uint32_t n_inputs, Tensor* outputs,
                               std::uint32_t n_outputs, Handle profile, Handle signal);  // 21
  void* graph_execute_async;                                                          // 22
  void* tensor_create_context_tensor;                                                 // 23
  void* tensor_create_graph_tensor;                                                   // 24
  ErrorHandle (*log_create)(LogCallback callback, std::uint32_t max_level, Handle* log);  // 25
  void* log_set_log_level;                                                            // 26
  ErrorHandle (*log_free)(Handle log);                                                // 27
  void* profile_slots[7];                                                             // 28..34
  void* mem_register;                                                                 // 35
  void* mem_deregister;                                                               // 36
  void* device_get_platform_info;                                                     // 37
  void* device_free_platform_info;                                                    // 38
  void* device_get_infrastructure;                                                    // 39
  ErrorHandle (*device_create)(Handle log, const void** config, Handle* device);      // 40
  void* device_set_config;                                                            // 41
  void* device_get_info;                                                              // 42
  ErrorHandle (*device_free)(Handle device);                                          // 43
  void* signal_slots[4];                                                              // 44..47
  ErrorHandle (*error_get_message)(ErrorHandle error, const char** message);          // 48
};
static_assert(offsetof(CoreFunctions, context_create_from_binary) == 13 * sizeof(void*));
static_assert(offsetof(CoreFunctions, graph_retrieve) == 20 * sizeof(void*));
static_assert(offsetof(CoreFunctions, device_create) == 40 * sizeof(void*));
static_assert(offsetof(CoreFunctions, error_get_message) == 48 * sizeof(void*));

// One provider of QnnInterface_getProviders: its backend id, name, versions, then the table.
struct CoreInterface {
  std::uint32_t backend_id;
  const char* provider_name;
  ApiVersion api_version;
  CoreFunctions fn;
};
static_assert(offsetof(CoreInterface, api_version) == 16 && offsetof(CoreInterface, fn) == 40);
using GetCoreProviders = ErrorHandle (*)(const CoreInterface*** providers, std::uint32_t* count);

// --- System API (libQnnSystem.so): reading a context binary's metadata ---------------------

struct GraphInfoV1 {  // versions 2 and 3 append fields; the leading ones are shared
  const char* name;
  std::uint32_t num_inputs;
  Tensor* inputs;
  std::uint32_t num_outputs;
  Tensor* outputs;
};
// A graph-info entry: a version tag and a union sized by its largest member (version 3:
// version 1's fields, then 2 counts/pointers for updateable tensors, a blob size and
// pointer, and two op indices: 80 bytes). The union size is the stride of the graphs array.
struct GraphInfo {
  std::uint32_t version;
  union {
    GraphInfoV1 v1;
    std::uint8_t v3_size[80];
  };
};
static_assert(offsetof(GraphInfo, v1) == 8 && sizeof(GraphInfo) == 88);

struct BinaryInfoV1 {  // version 2 appends a platform-info pointer
  std::uint32_t backend_id;
  const char* build_id;
  Version core_api;
  Version backend_api;
  const char* soc_version;
  Version hw_info_blob_version;
  Version context_blob_version;
  std::uint32_t hw_info_blob_size;
  void* hw_info_blob;
  std::uint64_t context_blob_size;
  std::uint32_t num_context_tensors;
  Tensor* context_tensors;
  std::uint32_t num_graphs;
  GraphInfo* graphs;
};
struct BinaryInfoV3 {  // drops the hardware-info blob fields, appends metadata and the SoC model
  std::uint32_t backend_id;
  const char* build_id;
  Version core_api;
  Version backend_api;
  const char* soc_version;
  Version context_blob_version;
  std::uint64_t context_blob_size;
  std::uint32_t num_context_tensors;
  Tensor* context_tensors;
  std::uint32_t num_graphs;
  GraphInfo* graphs;
  void* platform_info;
  std::uint32_t metadata_size;
  void* metadata;
  std::uint32_t soc_model;
};
static_assert(offsetof(BinaryInfoV1, core_api) == 16 && offsetof(BinaryInfoV1, soc_version) == 40);
static_assert(offsetof(BinaryInfoV1, num_graphs) == 112 && offsetof(BinaryInfoV1, graphs) == 120);
static_assert(offsetof(BinaryInfoV3, context_blob_size) == 64 && offsetof(BinaryInfoV3, graphs) == 96);
static_assert(offsetof(BinaryInfoV3, soc_model) == 128);
struct BinaryInfo {
  std::uint32_t version;  // 1, 2 or 3
  union {
    BinaryInfoV1 v1;  // also the leading part of version 2
    BinaryInfoV3 v3;
  };
};

struct SystemFunctions {
  ErrorHandle (*context_create)(Handle* sys_context);  // 0
  ErrorHandle (*context_get_binary_info)(Handle sys_context, void* binary, std::uint64_t size,
                                         const BinaryInfo** info, std::uint64_t* info_size);  // 1
  void* context_get_metadata;                                                             // 2
  ErrorHandle (*context_free)(Handle sys_context);                                        // 3
};
struct SystemInterface {
  std::uint32_t backend_id;
  const char* provider_name;
  Version system_api_version;
  SystemFunctions fn;
};
static_assert(offsetof(SystemInterface, system_api_version) == 16 && offsetof(SystemInterface, fn) == 32);
using GetSystemProviders = ErrorHandle (*)(const SystemInterface*** providers, std::uint32_t* count);

// The API majors this declaration speaks. Minor versions only append (QNN's compatibility
// rule), so any minor of these majors is accepted.
inline constexpr std::uint32_t kCoreApiMajor = 2;
inline constexpr std::uint32_t kSystemApiMajor = 1;

// clang-format on

}  // namespace qhx::qnn::abi
