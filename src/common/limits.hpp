// Every bound QHexRT puts on a size it reads from a file or a request, in one
// place. Each is far above what a real model or request needs and low enough
// that a corrupt or hostile input is refused with an error naming the limit
// before anything is allocated from it. docs/limits.md lists them with the
// test that covers each; change both together.
#pragma once

#include <cstddef>
#include <cstdint>

namespace qhx::limits {

// --- safetensors (checkpoints and bundle .bin files) ---
// Real headers are a few hundred KiB even for 100B-parameter models.
inline constexpr std::uint64_t kSafetensorsHeaderBytes = std::uint64_t{100} << 20;
// Counted while the header is parsed, so a header of millions of tiny entries
// fails before it becomes a multi-gigabyte JSON tree.
inline constexpr std::size_t kTensorsPerFile = std::size_t{1} << 18;
// Conv3d weights are 5-D; nothing in a model file needs more than 8.
inline constexpr std::size_t kTensorRank = 8;

// --- JSON (config.json, manifests, indexes, messages, request bodies) ---
// nlohmann parses iteratively, but code that walks the tree (and the chat
// template's values) recurses; real files nest fewer than 10 levels.
inline constexpr std::size_t kJsonDepth = 64;
// config.json, generation_config.json, preprocessor_config.json, manifests,
// model.safetensors.index.json, chat template files: read whole into a tree.
inline constexpr std::uint64_t kJsonFileBytes = std::uint64_t{64} << 20;
// tokenizer.json is copied once for simdjson (Qwen's is 11 MB).
inline constexpr std::uint64_t kTokenizerJsonBytes = std::uint64_t{256} << 20;
// Token ids are int32 and tables are indexed by id.
inline constexpr std::int64_t kVocabularyTokens = std::int64_t{1} << 24;

// --- config.json sizes (products of two of them and a layer count stay far from int64 overflow) ---
inline constexpr std::int64_t kModelDimension = std::int64_t{1} << 24;
inline constexpr std::int64_t kModelLayers = 4096;

// --- manifests ---
// KV-cache sizes are products of the context length and the model's sizes.
inline constexpr std::int64_t kContextLength = std::int64_t{1} << 20;

// --- images ---
// The largest decoded image (width * height) any plan may allow; a manifest's
// max_decode_pixels (default 100M, Pillow's bomb guard is 89M) must not exceed
// it, nor may its resize targets.
inline constexpr std::int64_t kImagePixels = std::int64_t{1} << 28;
// Every image of a conversation is decoded or looked up per request.
inline constexpr std::size_t kImagesPerRequest = 256;

// --- prompts ---
// The rendered prompt text, before it is tokenized (the ids take ~1/3 of its
// bytes again); the context length bounds the token count after.
inline constexpr std::size_t kPromptBytes = std::size_t{64} << 20;

// --- mapped files ---
// Live mappings the SIGBUS guard can watch (src/common/mapping_guard.hpp); a
// bundle maps ~7 files, a sharded 100B checkpoint ~100.
inline constexpr std::size_t kMappedFiles = 1024;

}  // namespace qhx::limits
