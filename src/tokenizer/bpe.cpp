#include "tokenizer/bpe.hpp"

#include <algorithm>
#include <bit>
#include <queue>

namespace qhx {

namespace {
inline std::size_t slot_of(std::uint64_t key, int shift) {
  return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ull) >> shift);  // Fibonacci hashing
}
}  // namespace

void Bpe::reserve(std::size_t merges) {
  while ((slots_.size() >> 1) < merges) grow();
}

void Bpe::grow() {
  std::vector<Slot> old = std::move(slots_);
  const std::size_t capacity = old.empty() ? 64 : old.size() * 2;
  slots_.assign(capacity, Slot{});
  shift_ = 64 - std::countr_zero(capacity);
  for (const Slot& s : old) {
    if (s.key == kEmpty) continue;
    std::size_t i = slot_of(s.key, shift_);
    while (slots_[i].key != kEmpty) i = (i + 1) & (capacity - 1);
    slots_[i] = s;
  }
}

const Bpe::Merge* Bpe::find(std::int32_t left, std::int32_t right) const {
  if (slots_.empty()) return nullptr;
  const std::uint64_t k = key(left, right);
  for (std::size_t i = slot_of(k, shift_);; i = (i + 1) & (slots_.size() - 1)) {
    if (slots_[i].key == k) return &slots_[i].merge;
    if (slots_[i].key == kEmpty) return nullptr;
  }
}

void Bpe::add_merge(std::int32_t rank, std::int32_t left, std::int32_t right, std::int32_t merged) {
  if ((merge_count_ + 1) * 2 > slots_.size()) grow();  // load factor <= 1/2
  const std::uint64_t k = key(left, right);
  std::size_t i = slot_of(k, shift_);
  while (slots_[i].key != kEmpty && slots_[i].key != k) i = (i + 1) & (slots_.size() - 1);
  // A pair listed twice takes its last rank: HF collects the list into a map.
  if (slots_[i].key == kEmpty) ++merge_count_;
  slots_[i] = Slot{k, Merge{rank, merged}};
}

void Bpe::encode(std::string_view chunk, std::vector<std::int32_t>& out) const {
  if (chunk.size() == 1) {
    out.push_back(byte_ids_[static_cast<unsigned char>(chunk[0])]);
    return;
  }
  const bool cacheable = chunk.size() <= kCacheMaxChunk;
  if (cacheable) {
    std::lock_guard lock(cache_mutex_);
    if (auto it = cache_.find(std::string(chunk)); it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const std::size_t first = out.size();
  merge_all(chunk, out);
  if (cacheable) {
    std::lock_guard lock(cache_mutex_);
    if (cache_.size() < kCacheCapacity)
      cache_.try_emplace(std::string(chunk), out.begin() + static_cast<std::ptrdiff_t>(first), out.end());
  }
}

void Bpe::merge_all(std::string_view chunk, std::vector<std::int32_t>& out) const {
  // Symbols form a doubly linked list over the initial byte positions; a merge
  // keeps the left symbol and kills the right one. Candidate merges wait in a
  // min-heap ordered by (rank, position); stale entries are skipped on pop.
  struct Symbol {
    std::int32_t id;
    std::int32_t prev, next;  // -1 at the ends
    bool alive;
  };
  struct Candidate {
    std::int32_t rank, pos, merged;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  const auto n = static_cast<std::int32_t>(chunk.size());
  std::vector<Symbol> sym(static_cast<std::size_t>(n));
  for (std::int32_t i = 0; i < n; ++i)
    sym[static_cast<std::size_t>(i)] = {byte_ids_[static_cast<unsigned char>(chunk[static_cast<std::size_t>(i)])],
                                        i - 1, i + 1 < n ? i + 1 : -1, true};

  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto consider = [&](std::int32_t pos) {
    const Symbol& a = sym[static_cast<std::size_t>(pos)];
    if (a.next < 0) return;
    if (const Merge* m = find(a.id, sym[static_cast<std::size_t>(a.next)].id)) heap.push({m->rank, pos, m->merged});
  };
  for (std::int32_t i = 0; i + 1 < n; ++i) consider(i);

  while (!heap.empty()) {
    const Candidate top = heap.top();
    heap.pop();
    Symbol& left = sym[static_cast<std::size_t>(top.pos)];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = sym[static_cast<std::size_t>(left.next)];
    // Stale if either side changed since the candidate was pushed.
    const Merge* m = find(left.id, right.id);
    if (m == nullptr || m->merged != top.merged) continue;
    left.id = top.merged;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) sym[static_cast<std::size_t>(right.next)].prev = top.pos;
    if (left.prev >= 0) consider(left.prev);
    consider(top.pos);
  }
  for (std::int32_t i = 0; i >= 0; i = sym[static_cast<std::size_t>(i)].next)
    out.push_back(sym[static_cast<std::size_t>(i)].id);
}

}  // namespace qhx
