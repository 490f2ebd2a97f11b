// One test per bound of src/common/limits.hpp (docs/limits.md): an input just
// over it is refused with an error naming the input, the limit's name and its
// value, before anything is allocated from it. The image decoder's pixel bound
// and the server's body and image bounds are tested beside their code
// (test_image.cpp, test_serve.cpp, tests/python/test_serve.py), the mapped
// files' one in test_mapped_file.cpp.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "common/limits.hpp"
#include "qhexrt/error.hpp"
#include "qhexrt/hf_config.hpp"
#include "qhexrt/pipeline.hpp"
#include "qhexrt/safetensors.hpp"
#include "qhexrt/session.hpp"
#include "qhexrt/tokenizer.hpp"
#include "runtime/manifest.hpp"
#include "test_support.hpp"

namespace qhx {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::expect_error;
using test::TempDir;

std::string le_u64(std::uint64_t v) {
  std::string s(8, '\0');
  for (std::size_t i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xFF);
  return s;
}

fs::path safetensors_file(const TempDir& dir, const std::string& header, const std::string& data = "") {
  return dir.write("t.safetensors", le_u64(header.size()) + header + data);
}

std::string nested(std::size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

// A file of `bytes` that takes no disk space: only its size is looked at.
fs::path sparse_file(const TempDir& dir, const std::string& name, std::uint64_t bytes) {
  const fs::path p = dir.write(name, "{");
  fs::resize_file(p, bytes);
  return p;
}

fs::path tiny_checkpoint() { return test::cache_dir() / "reference" / "tiny_a" / "checkpoint"; }

json tiny_config() { return json::parse(test::read_file(tiny_checkpoint() / "config.json")); }

// A manifest valid up to the fields these tests set.
json manifest() {
  return {{"qhexrt_manifest", 1}, {"model", "qwen3vl"}, {"config", "config.json"},  {"tokenizer", "tok.json"},
          {"context_length", 64}, {"prefill_chunk", 8}, {"graphs", json::object()}, {"stages", {{{"op", "tokenize"}}}}};
}

void expect_manifest_error(const json& m, std::initializer_list<std::string> fragments) {
  std::vector<std::string> all = {"m.json"};
  all.insert(all.end(), fragments.begin(), fragments.end());
  expect_error([&] { (void)parse_manifest(m.dump(), "m.json", "/bundle"); }, all);
}

TEST(Limits, SafetensorsHeaderBytes) {
  TempDir dir;
  const fs::path p = dir.write("big.safetensors", le_u64(limits::kSafetensorsHeaderBytes + 1));
  fs::resize_file(p, 8 + limits::kSafetensorsHeaderBytes + 1);
  expect_error([&] { (void)SafetensorsFile::open(p); },
               {p.string(), "limits::kSafetensorsHeaderBytes", std::to_string(limits::kSafetensorsHeaderBytes)});
}

TEST(Limits, TensorsPerFile) {
  TempDir dir;
  std::string header = "{";
  for (std::size_t i = 0; i <= limits::kTensorsPerFile + 1; ++i)
    header += (i ? ",\"" : "\"") + std::to_string(i) + "\":0";
  header += "}";
  const fs::path p = safetensors_file(dir, header);
  expect_error([&] { (void)SafetensorsFile::open(p); },
               {p.string(), "limits::kTensorsPerFile", std::to_string(limits::kTensorsPerFile)});
}

TEST(Limits, TensorRank) {
  TempDir dir;
  std::string dims = "1";
  for (std::size_t i = 0; i < limits::kTensorRank; ++i) dims += ",1";  // one dimension too many
  const fs::path p =
      safetensors_file(dir, "{\"w\":{\"dtype\":\"U8\",\"shape\":[" + dims + "],\"data_offsets\":[0,1]}}", "x");
  expect_error([&] { (void)SafetensorsFile::open(p); },
               {p.string(), "'w'", "limits::kTensorRank", std::to_string(limits::kTensorRank)});
}

TEST(Limits, JsonDepth) {
  const std::string deep = nested(limits::kJsonDepth + 1);
  const std::string fragment = "limits::kJsonDepth";
  const std::string value = std::to_string(limits::kJsonDepth);
  // Just at the limit is fine (the parser then says what else is wrong).
  expect_error([&] { (void)parse_manifest(nested(limits::kJsonDepth), "m.json", "."); },
               {"m.json", "expected a JSON object"});

  TempDir dir;
  const fs::path st = safetensors_file(dir, "{\"w\":" + deep + "}");
  expect_error([&] { (void)SafetensorsFile::open(st); }, {st.string(), fragment, value});
  expect_error([&] { (void)parse_manifest(deep, "m.json", "."); }, {"m.json", fragment, value});
  expect_error([&] { (void)parse_qwen3vl_config(deep, "config.json"); }, {"config.json", fragment, value});
  expect_error([&] { (void)parse_messages(deep, "messages.json", "."); }, {"messages.json", fragment, value});
  expect_error([&] { (void)Tokenizer::from_json("{\"model\":" + deep + "}", "tok.json"); },
               {"tok.json", fragment, value});
  // Brackets inside strings are text, not nesting.
  const std::string in_string = "[\"" + deep + "\\\"" + deep + "\"]";
  expect_error([&] { (void)parse_manifest(in_string, "m.json", "."); }, {"m.json", "expected a JSON object"});
}

TEST(Limits, JsonFileBytes) {
  TempDir dir;
  const fs::path p = sparse_file(dir, "config.json", limits::kJsonFileBytes + 1);
  expect_error([&] { (void)load_qwen3vl_config(p); },
               {p.string(), "limits::kJsonFileBytes", std::to_string(limits::kJsonFileBytes)});
  const fs::path m = sparse_file(dir, "plan.json", limits::kJsonFileBytes + 1);
  expect_error([&] { (void)load_manifest(m); }, {m.string(), "limits::kJsonFileBytes"});
}

TEST(Limits, TokenizerJsonBytes) {
  TempDir dir;
  const fs::path p = sparse_file(dir, "tokenizer.json", limits::kTokenizerJsonBytes + 1);
  expect_error([&] { (void)Tokenizer::load(p); },
               {p.string(), "limits::kTokenizerJsonBytes", std::to_string(limits::kTokenizerJsonBytes)});
}

TEST(Limits, VocabularyTokens) {
  std::string text = test::read_file(test::tokenizer_json_path());
  const std::string from = "\"!\": 0";
  const auto at = text.find(from);
  ASSERT_NE(at, std::string::npos);
  text.replace(at, from.size(), "\"!\": " + std::to_string(limits::kVocabularyTokens));
  expect_error(
      [&] { (void)Tokenizer::from_json(text, "tok.json"); },
      {"tok.json", "model.vocab[\"!\"]", "limits::kVocabularyTokens", std::to_string(limits::kVocabularyTokens)});
}

TEST(Limits, ModelDimensionAndLayers) {
  json c = tiny_config();
  c["text_config"]["hidden_size"] = limits::kModelDimension + 1;
  expect_error(
      [&] { (void)parse_qwen3vl_config(c.dump(), "config.json"); },
      {"config.json", "text_config.hidden_size", "limits::kModelDimension", std::to_string(limits::kModelDimension)});
  c = tiny_config();
  c["vision_config"]["patch_size"] = limits::kModelDimension + 1;
  expect_error([&] { (void)parse_qwen3vl_config(c.dump(), "config.json"); },
               {"vision_config.patch_size", "limits::kModelDimension"});
  c = tiny_config();
  c["text_config"]["num_hidden_layers"] = limits::kModelLayers + 1;
  expect_error([&] { (void)parse_qwen3vl_config(c.dump(), "config.json"); },
               {"text_config.num_hidden_layers", "limits::kModelLayers", std::to_string(limits::kModelLayers)});
}

TEST(Limits, ContextLength) {
  const std::string value = std::to_string(limits::kContextLength);
  for (const char* key : {"context_length", "prefill_chunk", "max_new_tokens"}) {
    json m = manifest();
    m[key] = limits::kContextLength + 1;
    expect_manifest_error(m, {key, "limits::kContextLength", value});
  }
}

TEST(Limits, ImagePixels) {
  const std::string value = std::to_string(limits::kImagePixels);
  for (const char* key : {"max_decode_pixels", "max_pixels", "min_pixels"}) {
    json m = manifest();
    m["image"] = {{key, limits::kImagePixels + 1}};
    expect_manifest_error(m, {std::string("image.") + key, "limits::kImagePixels", value});
  }
  json m = manifest();
  m["image"] = {{"size", 16385}};
  expect_manifest_error(m, {"image.size", "limits::kImagePixels"});
}

class PipelineLimits : public ::testing::Test {
 protected:
  static Pipeline& pipeline() {
    static Pipeline p = Pipeline::open(tiny_checkpoint());
    return p;
  }
};

TEST_F(PipelineLimits, ImagesPerRequest) {
  Message m{"user", {}};
  for (std::size_t i = 0; i <= limits::kImagesPerRequest; ++i)
    m.content.push_back(ContentPart::image_part(ImageSource::file("never_read.png")));
  m.content.push_back(ContentPart::text_part("what are these?"));
  Session s(pipeline());
  expect_error([&] { (void)s.send(m); },
               {"images", "limits::kImagesPerRequest", std::to_string(limits::kImagesPerRequest)});
}

TEST_F(PipelineLimits, PromptBytes) {
  GenerationRequest r;
  r.raw = true;
  r.prompt.assign(limits::kPromptBytes + 1, 'a');
  expect_error([&] { (void)pipeline().generate(r); },
               {"prompt", "limits::kPromptBytes", std::to_string(limits::kPromptBytes)});
}

}  // namespace
}  // namespace qhx
