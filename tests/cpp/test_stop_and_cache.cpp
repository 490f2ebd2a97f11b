// The runtime's small parts: stop strings over a text stream, and the
// image-feature cache's byte bound and LRU order.
#include <gtest/gtest.h>

#include "runtime/image_cache.hpp"
#include "runtime/stop_strings.hpp"
#include "test_support.hpp"

namespace qhx {
namespace {

std::string feed(StopStrings& s, std::initializer_list<const char*> pieces, std::vector<std::string>* out = nullptr) {
  std::string all;
  for (const char* p : pieces) {
    std::string r = s.push(p);
    if (out) out->push_back(r);
    all += r;
  }
  return all;
}

TEST(StopStrings, CutsBeforeAStopStringSplitAcrossPieces) {
  StopStrings s({"END"});
  std::vector<std::string> released;
  EXPECT_EQ(feed(s, {"abc E", "N", "Dxyz"}, &released), "abc ");
  EXPECT_TRUE(s.stopped());
  EXPECT_EQ(released[0], "abc ");  // "E" is held back: it may start "END"
  EXPECT_EQ(released[1], "");
  EXPECT_EQ(s.push("more"), "");
}

TEST(StopStrings, ReleasesHeldTextWhenItIsNotAStop) {
  StopStrings s({"END", "\n\n"});
  std::vector<std::string> released;
  EXPECT_EQ(feed(s, {"a E", "Nx", "\n"}, &released), "a ENx");
  EXPECT_EQ(released[0], "a ");
  EXPECT_EQ(released[1], "ENx");
  EXPECT_FALSE(s.stopped());
  EXPECT_EQ(s.flush(), "\n");
}

TEST(StopStrings, FirstOfSeveralWinsAndNoStopsPassThrough) {
  StopStrings s({"cd", "b"});
  EXPECT_EQ(feed(s, {"abcd"}), "a");
  StopStrings none({});
  EXPECT_EQ(feed(none, {"x", "", "y"}), "xy");
  EXPECT_EQ(none.flush(), "");
  EXPECT_EQ(StopStrings({"lo"}).find_in("hello"), 3u);
  test::expect_error([] { StopStrings({"ok", ""}); }, {"stop[1]", "must not be empty"});
}

std::shared_ptr<const ImageFeatures> features(std::size_t floats) {
  auto f = std::make_shared<ImageFeatures>();
  f->embeds.assign(floats, 1.0f);
  return f;
}

TEST(ImageFeatureCache, EvictsLeastRecentlyUsedWithinItsBytes) {
  ImageFeatureCache c;
  c.set_capacity(3 * 100 * sizeof(float));
  const ImageKey a{1, 0}, b{2, 0}, d{3, 0}, e{4, 0};
  c.insert(a, features(100));
  c.insert(b, features(100));
  c.insert(d, features(100));
  EXPECT_NE(c.find(a), nullptr);  // a is now the most recent
  c.insert(e, features(100));     // b leaves
  EXPECT_EQ(c.find(b), nullptr);
  EXPECT_NE(c.find(a), nullptr);
  EXPECT_NE(c.find(d), nullptr);
  EXPECT_NE(c.find(e), nullptr);
  const auto s = c.stats();
  EXPECT_EQ(s.entries, 3);
  EXPECT_EQ(s.bytes, static_cast<std::int64_t>(3 * 100 * sizeof(float)));
  EXPECT_EQ(s.hits, 4);
  EXPECT_EQ(s.misses, 1);
  c.insert({5, 0}, features(1000));  // larger than the whole cache: not kept, nothing evicted
  EXPECT_EQ(c.stats().entries, 3);
  c.set_capacity(0);
  EXPECT_EQ(c.stats().entries, 0);
}

TEST(ImageFeatureCache, KeysDependOnBytesAndSalt) {
  const std::vector<std::uint8_t> x{1, 2, 3}, y{1, 2, 4};
  const std::int64_t s1[] = {512}, s2[] = {448};
  EXPECT_EQ(hash_bytes(x, s1), hash_bytes(x, s1));
  EXPECT_NE(hash_bytes(x, s1), hash_bytes(y, s1));
  EXPECT_NE(hash_bytes(x, s1), hash_bytes(x, s2));
}

}  // namespace
}  // namespace qhx
