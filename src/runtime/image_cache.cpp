#include "runtime/image_cache.hpp"

#include <xxhash.h>

namespace qhx {

ImageKey hash_bytes(std::span<const std::uint8_t> bytes, std::span<const std::int64_t> salt) {
  XXH3_state_t* st = XXH3_createState();
  XXH3_128bits_reset(st);
  XXH3_128bits_update(st, salt.data(), salt.size_bytes());
  XXH3_128bits_update(st, bytes.data(), bytes.size());
  const XXH128_hash_t h = XXH3_128bits_digest(st);
  XXH3_freeState(st);
  return {h.low64, h.high64};
}

void ImageFeatureCache::set_capacity(std::size_t bytes) {
  std::lock_guard lock(mu_);
  capacity_ = bytes;
  while (bytes_ > capacity_ && !lru_.empty()) {
    bytes_ -= lru_.back().second->bytes();
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
}

std::shared_ptr<const ImageFeatures> ImageFeatureCache::find(const ImageKey& key) {
  std::lock_guard lock(mu_);
  const auto it = index_.find(key);
  if (it == index_.end()) {
    ++misses_;
    return nullptr;
  }
  ++hits_;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->second;
}

void ImageFeatureCache::insert(const ImageKey& key, std::shared_ptr<const ImageFeatures> features) {
  std::lock_guard lock(mu_);
  const std::size_t size = features->bytes();
  if (size > capacity_ || index_.count(key) != 0) return;
  while (bytes_ + size > capacity_) {
    bytes_ -= lru_.back().second->bytes();
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  lru_.emplace_front(key, std::move(features));
  index_[key] = lru_.begin();
  bytes_ += size;
}

ImageFeatureCache::Stats ImageFeatureCache::stats() const {
  std::lock_guard lock(mu_);
  return {hits_, misses_, static_cast<std::int64_t>(lru_.size()), static_cast<std::int64_t>(bytes_),
          static_cast<std::int64_t>(capacity_)};
}

const KnownImage* ImageMemo::find(const ImageKey& encoded) const {
  const auto it = map_.find(encoded);
  return it == map_.end() ? nullptr : &it->second;
}

void ImageMemo::insert(const ImageKey& encoded, const KnownImage& image) {
  if (map_.count(encoded) != 0) return;
  if (map_.size() == kMaxEntries) {
    map_.erase(order_.front());
    order_.pop_front();
  }
  map_.emplace(encoded, image);
  order_.push_back(encoded);
}

}  // namespace qhx
