// A pipeline whose weights file is truncated (docs/bundle.md, "Mapped files"):
// before it opens, the open fails naming the file and a tensor; after, between
// two requests, the next request fails naming the file (its size no longer
// matches); in the middle of an answer, the read past the new end gives zeros
// instead of SIGBUS and the answer fails naming the file. Every later request
// of that pipeline fails the same way, and the process never dies.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdint>
#include <string>

#include "qhexrt/error.hpp"
#include "qhexrt/pipeline.hpp"
#include "qhexrt/session.hpp"
#include "test_support.hpp"

namespace qhx {
namespace {

namespace fs = std::filesystem;
using test::expect_error;
using test::TempDir;

// A copy of the tiny checkpoint the test may damage (the default f32 CPU plan
// serves its model.safetensors in place).
fs::path copy_checkpoint(const TempDir& dir) {
  const fs::path src = test::cache_dir() / "reference" / "tiny_a" / "checkpoint";
  EXPECT_TRUE(fs::exists(src / "model.safetensors")) << src << ": run tests/reference/build_all.py";
  const fs::path dst = dir.path() / "ckpt";
  fs::copy(src, dst, fs::copy_options::recursive);
  return dst;
}

// Where the tensor data begins: truncating there leaves every tensor's bytes gone.
std::uint64_t data_start(const fs::path& st) {
  const std::string head = test::read_file(st).substr(0, 8);
  std::uint64_t n = 0;
  for (std::size_t i = 0; i < 8; ++i) n |= std::uint64_t{static_cast<unsigned char>(head[i])} << (8 * i);
  return 8 + n;
}

void truncate_to(const fs::path& p, std::uint64_t bytes) {
  ASSERT_EQ(::truncate(p.c_str(), static_cast<off_t>(bytes)), 0) << p;
}

// Digits, forced: a known number of steps, each with text to stream.
GenerationRequest digits_request() {
  GenerationRequest r;
  r.prompt = "Count.";
  r.max_new_tokens = 6;
  r.forced_tokens = {15, 16, 17, 18, 19, 20};  // "0" .. "5"
  return r;
}

// The error a request gives, or "" when it succeeds.
template <typename Fn>
std::string changed_error(Fn&& fn) {
  try {
    fn();
  } catch (const FileChangedError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a FileChangedError: " << e.what();
  }
  return "";
}

TEST(FileChanged, TruncatedBeforeOpen) {
  TempDir dir;
  const fs::path ckpt = copy_checkpoint(dir);
  const fs::path weights = ckpt / "model.safetensors";
  truncate_to(weights, fs::file_size(weights) / 2);
  expect_error([&] { (void)Pipeline::open(ckpt); }, {weights.string(), "tensor '", "truncated"});
}

TEST(FileChanged, TruncatedBetweenRequests) {
  TempDir dir;
  const fs::path ckpt = copy_checkpoint(dir);
  const fs::path weights = ckpt / "model.safetensors";
  Pipeline p = Pipeline::open(ckpt);
  EXPECT_EQ(p.generate(digits_request()).tokens.size(), 6u);
  truncate_to(weights, fs::file_size(weights) / 2);
  for (int attempt = 0; attempt < 2; ++attempt) {
    const std::string e = changed_error([&] { (void)p.generate(digits_request()); });
    EXPECT_NE(e.find(weights.string()), std::string::npos) << e;
    EXPECT_NE(e.find("truncated or changed while mapped"), std::string::npos) << e;
    EXPECT_NE(e.find("reopen the model"), std::string::npos) << e;
  }
  // A session of the same pipeline fails the same way.
  Session s(p);
  EXPECT_NE(changed_error([&] { (void)s.send(Message::text("user", "hi")); }).find(weights.string()),
            std::string::npos);
  EXPECT_TRUE(s.messages().empty());
}

TEST(FileChanged, TruncatedDuringAnAnswer) {
  TempDir dir;
  const fs::path ckpt = copy_checkpoint(dir);
  const fs::path weights = ckpt / "model.safetensors";
  const std::uint64_t cut = data_start(weights);
  Pipeline p = Pipeline::open(ckpt);
  GenerationRequest r = digits_request();
  std::string streamed;
  r.on_text = [&](std::string_view piece) {
    if (streamed.empty()) truncate_to(weights, cut);  // after the first token: the next step reads past the end
    streamed += piece;
  };
  const std::string e = changed_error([&] { (void)p.generate(r); });
  EXPECT_NE(e.find(weights.string()), std::string::npos) << e;
  EXPECT_NE(e.find("a read fell past its end"), std::string::npos) << e;  // the SIGBUS guard, not the size check
  EXPECT_EQ(streamed, "0");  // nothing computed from the zeros reached the caller
  // Its weights are gone: later requests fail too, in any session.
  EXPECT_NE(changed_error([&] { (void)p.generate(digits_request()); }).find(weights.string()), std::string::npos);
  Session s(p);
  EXPECT_NE(changed_error([&] { (void)s.send(Message::text("user", "hi")); }).find(weights.string()),
            std::string::npos);
}

TEST(FileChanged, AnotherPipelineIsUnaffected) {
  // Each pipeline checks its own files: one whose copy was damaged does not
  // fail a second one opened from another copy.
  TempDir dir_a, dir_b;
  const fs::path a = copy_checkpoint(dir_a), b = copy_checkpoint(dir_b);
  Pipeline pa = Pipeline::open(a);
  Pipeline pb = Pipeline::open(b);
  truncate_to(a / "model.safetensors", data_start(a / "model.safetensors"));
  EXPECT_FALSE(changed_error([&] { (void)pa.generate(digits_request()); }).empty());
  EXPECT_EQ(pb.generate(digits_request()).tokens.size(), 6u);
}

}  // namespace
}  // namespace qhx
