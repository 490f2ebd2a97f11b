// The image-feature cache: what the vision encoder made of an image, kept per
// pipeline and keyed by a hash of the decoded, resized pixels, so the same
// picture sent again (in this conversation, another one, or re-encoded as
// another file) skips stage F and the vision graph. Bounded in bytes; the least
// recently used entry leaves first.
//
// The memo beside it maps the hash of an image's *encoded* bytes (and the
// resize settings) to its pixel hash and size, so a known image is not even
// decoded again when only its token count is needed.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

namespace qhx {

struct ImageKey {
  std::uint64_t lo = 0, hi = 0;  // XXH3-128
  friend auto operator<=>(const ImageKey&, const ImageKey&) = default;
};

// XXH3-128 of `bytes` with `salt` mixed in (the resize settings, the image size).
ImageKey hash_bytes(std::span<const std::uint8_t> bytes, std::span<const std::int64_t> salt);

struct ImageFeatures {
  std::int64_t tokens = 0;  // merged image tokens
  std::int64_t width = 0;   // the language model's hidden size
  std::int64_t n_deepstack = 0;
  std::vector<float> embeds;     // [tokens, width]
  std::vector<float> deepstack;  // [n_deepstack, tokens, width]
  std::size_t bytes() const { return (embeds.size() + deepstack.size()) * sizeof(float); }
};

class ImageFeatureCache {
 public:
  void set_capacity(std::size_t bytes);
  // The features, or nullptr (counted as a hit or a miss).
  std::shared_ptr<const ImageFeatures> find(const ImageKey& key);
  // Keeps `features` unless they alone exceed the capacity; evicts the least recently used.
  void insert(const ImageKey& key, std::shared_ptr<const ImageFeatures> features);

  struct Stats {
    std::int64_t hits = 0, misses = 0, entries = 0, bytes = 0, capacity = 0;
  };
  Stats stats() const;

 private:
  using Lru = std::list<std::pair<ImageKey, std::shared_ptr<const ImageFeatures>>>;
  mutable std::mutex mu_;
  std::size_t capacity_ = 0, bytes_ = 0;
  std::int64_t hits_ = 0, misses_ = 0;
  Lru lru_;  // most recently used first
  std::map<ImageKey, Lru::iterator> index_;
};

struct KnownImage {
  ImageKey pixels;
  std::int64_t height = 0, width = 0;  // after resizing
};

// Bounded by entry count (each is a few dozen bytes); oldest insert leaves first.
class ImageMemo {
 public:
  const KnownImage* find(const ImageKey& encoded) const;
  void insert(const ImageKey& encoded, const KnownImage& image);

 private:
  static constexpr std::size_t kMaxEntries = 4096;
  std::map<ImageKey, KnownImage> map_;
  std::list<ImageKey> order_;
};

}  // namespace qhx
