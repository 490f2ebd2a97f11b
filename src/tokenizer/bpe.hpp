// Byte-pair encoding by merge rank, as HF `tokenizers`' BPE model does it:
// start from one symbol per byte, then repeatedly merge the adjacent pair with
// the lowest rank (leftmost first on ties) until no ranked pair is left.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace qhx {

class Bpe {
 public:
  // `byte_ids[b]` is the id of the single-byte token for byte b.
  void set_byte_ids(const std::array<std::int32_t, 256>& byte_ids) { byte_ids_ = byte_ids; }
  // Merge `rank` (its index in tokenizer.json's list) joins left+right into merged.
  void add_merge(std::int32_t rank, std::int32_t left, std::int32_t right, std::int32_t merged);
  void reserve(std::size_t merges);
  std::size_t merge_count() const { return merge_count_; }

  // Appends the ids of one pre-tokenized chunk of raw bytes. Thread-safe.
  void encode(std::string_view chunk, std::vector<std::int32_t>& out) const;

 private:
  static std::uint64_t key(std::int32_t a, std::int32_t b) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
  }
  void merge_all(std::string_view chunk, std::vector<std::int32_t>& out) const;

  struct Merge {
    std::int32_t rank;
    std::int32_t merged;
  };
  // (left, right) -> merge, in an open-addressing table: it is probed for every
  // adjacent pair of every chunk, and built from 151k entries at load time.
  struct Slot {
    std::uint64_t key = kEmpty;
    Merge merge{};
  };
  static constexpr std::uint64_t kEmpty = ~std::uint64_t{0};
  const Merge* find(std::int32_t left, std::int32_t right) const;
  void grow();

  std::array<std::int32_t, 256> byte_ids_{};
  std::vector<Slot> slots_;
  std::size_t merge_count_ = 0;
  int shift_ = 64;

  // Chunks repeat a lot in real text, so finished chunks are cached, as HF does
  // (bounded: once full, nothing more is added).
  static constexpr std::size_t kCacheCapacity = 10000;
  static constexpr std::size_t kCacheMaxChunk = 256;
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<std::int32_t>> cache_;
};

}  // namespace qhx
