// Token text -> id, as an open-addressing table of ids over texts the caller
// owns. Built once from 151k vocab entries and probed ~450k times while the
// merges load, so it avoids the per-node allocations of std::unordered_map.
#pragma once

#include <bit>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace qhx {

class TokenIndex {
 public:
  // `texts[id]` is the text of token id; the views must outlive the index.
  // Empty views are holes and are not indexed.
  void build(const std::vector<std::string_view>* texts) {
    texts_ = texts;
    std::size_t capacity = 64;
    while (capacity < texts->size() * 2) capacity *= 2;  // load factor <= 1/2
    slots_.assign(capacity, 0);
    shift_ = 64 - std::countr_zero(capacity);
    for (std::size_t id = 0; id < texts->size(); ++id) {
      const std::string_view t = (*texts)[id];
      if (t.empty()) continue;
      std::size_t i = slot_of(t);
      while (slots_[i] != 0) i = (i + 1) & (slots_.size() - 1);
      slots_[i] = static_cast<std::uint32_t>(id + 1);
    }
  }

  std::optional<std::int32_t> find(std::string_view text) const {
    if (slots_.empty()) return std::nullopt;
    for (std::size_t i = slot_of(text);; i = (i + 1) & (slots_.size() - 1)) {
      const std::uint32_t s = slots_[i];
      if (s == 0) return std::nullopt;
      if ((*texts_)[s - 1] == text) return static_cast<std::int32_t>(s - 1);
    }
  }

 private:
  std::size_t slot_of(std::string_view t) const {
    std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a, then Fibonacci spreading
    for (const char c : t) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
    return static_cast<std::size_t>((h * 0x9E3779B97F4A7C15ull) >> shift_);
  }

  const std::vector<std::string_view>* texts_ = nullptr;
  std::vector<std::uint32_t> slots_;  // id + 1; 0 = empty
  int shift_ = 64;
};

}  // namespace qhx
