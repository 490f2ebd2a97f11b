// Tests for the Qwen3-VL config.json reader: the real 2B config, what
// transformers' save_pretrained writes, both RoPE spellings, class defaults
// for absent keys, wrong types, and every validation rule.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qhexrt/error.hpp"
#include "qhexrt/hf_config.hpp"

namespace fs = std::filesystem;
using Json = nlohmann::json;

namespace {

// Qwen/Qwen3-VL-2B-Instruct config.json as published (note the integer
// rope_theta, and the extra keys the reader must ignore).
constexpr const char* kQwen3VL2B = R"json({
  "architectures": ["Qwen3VLForConditionalGeneration"],
  "image_token_id": 151655,
  "model_type": "qwen3_vl",
  "text_config": {
    "attention_bias": false,
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "dtype": "bfloat16",
    "eos_token_id": 151645,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 2048,
    "initializer_range": 0.02,
    "intermediate_size": 6144,
    "max_position_embeddings": 262144,
    "model_type": "qwen3_vl_text",
    "num_attention_heads": 16,
    "num_hidden_layers": 28,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06,
    "rope_scaling": {
      "mrope_interleaved": true,
      "mrope_section": [24, 20, 20],
      "rope_type": "default"
    },
    "rope_theta": 5000000,
    "tie_word_embeddings": true,
    "use_cache": true,
    "vocab_size": 151936
  },
  "tie_word_embeddings": true,
  "transformers_version": "4.57.0.dev0",
  "video_token_id": 151656,
  "vision_config": {
    "deepstack_visual_indexes": [5, 11, 17],
    "depth": 24,
    "hidden_act": "gelu_pytorch_tanh",
    "hidden_size": 1024,
    "in_channels": 3,
    "initializer_range": 0.02,
    "intermediate_size": 4096,
    "model_type": "qwen3_vl",
    "num_heads": 16,
    "num_position_embeddings": 2304,
    "out_hidden_size": 2048,
    "patch_size": 16,
    "spatial_merge_size": 2,
    "temporal_patch_size": 2
  },
  "vision_end_token_id": 151653,
  "vision_start_token_id": 151652
})json";

// Written by transformers 4.57.6 save_pretrained for
//   Qwen3VLConfig(text_config=dict(vocab_size=1000, hidden_size=64, intermediate_size=128,
//                   num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
//                   rope_theta=10000.0, max_position_embeddings=4096,
//                   rope_scaling={"rope_type": "default", "mrope_section": [4, 2, 2], "mrope_interleaved": True}),
//                 vision_config=dict(depth=2, hidden_size=32, num_heads=4, intermediate_size=64,
//                   out_hidden_size=64, num_position_embeddings=16, deepstack_visual_indexes=[0, 1]),
//                 image_token_id=900, video_token_id=901, vision_start_token_id=902, vision_end_token_id=903)
// text_config.tie_word_embeddings is absent because False is that class's
// default; the top-level flag is written because False differs from the
// PretrainedConfig base default (True).
constexpr const char* kSavePretrainedSmall = R"json({
  "image_token_id": 900,
  "model_type": "qwen3_vl",
  "text_config": {
    "attention_bias": false,
    "attention_dropout": 0.0,
    "head_dim": 16,
    "hidden_act": "silu",
    "hidden_size": 64,
    "initializer_range": 0.02,
    "intermediate_size": 128,
    "max_position_embeddings": 4096,
    "model_type": "qwen3_vl_text",
    "num_attention_heads": 4,
    "num_hidden_layers": 2,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-06,
    "rope_scaling": {
      "mrope_interleaved": true,
      "mrope_section": [
        4,
        2,
        2
      ],
      "rope_type": "default"
    },
    "rope_theta": 10000.0,
    "use_cache": true,
    "vocab_size": 1000
  },
  "tie_word_embeddings": false,
  "transformers_version": "4.57.6",
  "video_token_id": 901,
  "vision_config": {
    "deepstack_visual_indexes": [
      0,
      1
    ],
    "depth": 2,
    "hidden_act": "gelu_pytorch_tanh",
    "hidden_size": 32,
    "in_channels": 3,
    "initializer_range": 0.02,
    "intermediate_size": 64,
    "model_type": "qwen3_vl",
    "num_heads": 4,
    "num_position_embeddings": 16,
    "out_hidden_size": 64,
    "patch_size": 16,
    "spatial_merge_size": 2,
    "temporal_patch_size": 2
  },
  "vision_end_token_id": 903,
  "vision_start_token_id": 902
}
)json";

// Written by transformers 5.24.0 save_pretrained for tests/reference's tiny_b (the
// Qwen3VLConfig(**tiny_configs.get("tiny_b")) of make_checkpoint.py, cast to bf16). Against 4.57:
// vision_config.model_type "qwen3_vl_vision", vision rope_parameters, text rope_parameters with
// rope_theta inside, a top-level dtype and text_config.pad_token_id null.
constexpr const char* kSavePretrainedTf5 = R"json({
  "architectures": [
    "Qwen3VLForConditionalGeneration"
  ],
  "dtype": "bfloat16",
  "image_token_id": 151655,
  "model_type": "qwen3_vl",
  "text_config": {
    "attention_bias": false,
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "dtype": "bfloat16",
    "eos_token_id": 151645,
    "head_dim": 32,
    "hidden_act": "silu",
    "hidden_size": 96,
    "initializer_range": 0.02,
    "intermediate_size": 160,
    "max_position_embeddings": 262144,
    "model_type": "qwen3_vl_text",
    "num_attention_heads": 8,
    "num_hidden_layers": 3,
    "num_key_value_heads": 2,
    "pad_token_id": null,
    "rms_norm_eps": 1e-06,
    "rope_parameters": {
      "mrope_interleaved": true,
      "mrope_section": [
        6,
        5,
        5
      ],
      "rope_theta": 5000000.0,
      "rope_type": "default"
    },
    "tie_word_embeddings": true,
    "use_cache": true,
    "vocab_size": 151936
  },
  "tie_word_embeddings": true,
  "transformers_version": "5.24.0",
  "video_token_id": 151656,
  "vision_config": {
    "deepstack_visual_indexes": [
      1
    ],
    "depth": 3,
    "hidden_act": "gelu_pytorch_tanh",
    "hidden_size": 64,
    "in_channels": 3,
    "initializer_range": 0.02,
    "intermediate_size": 128,
    "model_type": "qwen3_vl_vision",
    "num_heads": 1,
    "num_position_embeddings": 2304,
    "out_hidden_size": 96,
    "patch_size": 16,
    "rope_parameters": {
      "rope_theta": 10000.0,
      "rope_type": "axial"
    },
    "spatial_merge_size": 2,
    "temporal_patch_size": 2
  },
  "vision_end_token_id": 151653,
  "vision_start_token_id": 151652
})json";

constexpr const char* kSource = "/models/qwen/config.json";

Json real_2b() { return Json::parse(kQwen3VL2B); }

// Sets (or, with a discarded value, removes) the field at a JSON pointer.
Json with(Json j, const std::string& pointer, const Json& value) {
  if (value.is_discarded()) {
    const Json::json_pointer ptr(pointer);
    j.at(ptr.parent_pointer()).erase(ptr.back());
  } else {
    j[Json::json_pointer(pointer)] = value;
  }
  return j;
}

const Json kRemove = Json::value_t::discarded;

void expect_parse_error(const Json& j, const std::vector<std::string>& phrases) {
  try {
    (void)qhx::parse_qwen3vl_config(j.dump(), kSource);
    ADD_FAILURE() << "parse did not throw";
  } catch (const qhx::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(kSource), std::string::npos) << "message lacks the source: " << msg;
    for (const auto& p : phrases) EXPECT_NE(msg.find(p), std::string::npos) << "message lacks '" << p << "': " << msg;
  }
}

void expect_2b(const qhx::Qwen3VLConfig& c) {
  EXPECT_EQ(c.image_token_id, 151655);
  EXPECT_EQ(c.video_token_id, 151656);
  EXPECT_EQ(c.vision_start_token_id, 151652);
  EXPECT_EQ(c.vision_end_token_id, 151653);
  EXPECT_TRUE(c.tie_word_embeddings);

  const auto& t = c.text;
  EXPECT_EQ(t.vocab_size, 151936);
  EXPECT_EQ(t.hidden_size, 2048);
  EXPECT_EQ(t.intermediate_size, 6144);
  EXPECT_EQ(t.num_hidden_layers, 28);
  EXPECT_EQ(t.num_attention_heads, 16);
  EXPECT_EQ(t.num_key_value_heads, 8);
  EXPECT_EQ(t.head_dim, 128);
  EXPECT_EQ(t.hidden_act, "silu");
  EXPECT_DOUBLE_EQ(t.rms_norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(t.rope_theta, 5000000.0);
  EXPECT_EQ(t.rope_type, "default");
  EXPECT_EQ(t.mrope_section, (std::vector<std::int64_t>{24, 20, 20}));
  EXPECT_TRUE(t.mrope_interleaved);
  EXPECT_EQ(t.max_position_embeddings, 262144);
  EXPECT_FALSE(t.attention_bias);
  EXPECT_TRUE(t.tie_word_embeddings);

  const auto& v = c.vision;
  EXPECT_EQ(v.depth, 24);
  EXPECT_EQ(v.hidden_size, 1024);
  EXPECT_EQ(v.num_heads, 16);
  EXPECT_EQ(v.intermediate_size, 4096);
  EXPECT_EQ(v.hidden_act, "gelu_pytorch_tanh");
  EXPECT_EQ(v.in_channels, 3);
  EXPECT_EQ(v.patch_size, 16);
  EXPECT_EQ(v.temporal_patch_size, 2);
  EXPECT_EQ(v.spatial_merge_size, 2);
  EXPECT_EQ(v.out_hidden_size, 2048);
  EXPECT_EQ(v.num_position_embeddings, 2304);
  EXPECT_EQ(v.deepstack_visual_indexes, (std::vector<std::int64_t>{5, 11, 17}));
}

class TempFile {
 public:
  explicit TempFile(const std::string& contents) {
    std::random_device rd;
    dir_ =
        fs::temp_directory_path() / ("qhx_test_hf_config_" + std::to_string(::getpid()) + "_" + std::to_string(rd()));
    fs::create_directories(dir_);
    std::ofstream(path()) << contents;
  }
  ~TempFile() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  fs::path path() const { return dir_ / "config.json"; }
  const fs::path& dir() const { return dir_; }

 private:
  fs::path dir_;
};

}  // namespace

TEST(HfConfig, RealQwen3VL2B) { expect_2b(qhx::parse_qwen3vl_config(kQwen3VL2B, kSource)); }

TEST(HfConfig, LoadFromFile) {
  const TempFile f(kQwen3VL2B);
  expect_2b(qhx::load_qwen3vl_config(f.path()));
}

TEST(HfConfig, LoadMissingFileNamesPath) {
  const TempFile f("{}");
  const fs::path missing = f.dir() / "nope" / "config.json";
  try {
    (void)qhx::load_qwen3vl_config(missing);
    ADD_FAILURE() << "did not throw";
  } catch (const qhx::Error& e) {
    EXPECT_NE(std::string(e.what()).find(missing.string()), std::string::npos) << e.what();
  }
}

TEST(HfConfig, InvalidJsonNamesPathAndPosition) {
  const TempFile f("{\"text_config\": {\"hidden_size\": 2048,, }");
  try {
    (void)qhx::load_qwen3vl_config(f.path());
    ADD_FAILURE() << "did not throw";
  } catch (const qhx::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(f.path().string()), std::string::npos) << msg;
    EXPECT_NE(msg.find("invalid JSON"), std::string::npos) << msg;
    EXPECT_NE(msg.find("line 1, column"), std::string::npos) << msg;
  }
  expect_parse_error(Json::array({1, 2}), {"top level"});
}

TEST(HfConfig, WhatSavePretrainedWrites) {
  const auto c = qhx::parse_qwen3vl_config(kSavePretrainedSmall, kSource);
  EXPECT_EQ(c.image_token_id, 900);
  EXPECT_EQ(c.vision_end_token_id, 903);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.text.tie_word_embeddings);  // omitted: the text class default
  EXPECT_EQ(c.text.vocab_size, 1000);
  EXPECT_EQ(c.text.head_dim, 16);
  EXPECT_EQ(c.text.num_key_value_heads, 2);
  EXPECT_DOUBLE_EQ(c.text.rope_theta, 10000.0);
  EXPECT_EQ(c.text.mrope_section, (std::vector<std::int64_t>{4, 2, 2}));
  EXPECT_EQ(c.vision.depth, 2);
  EXPECT_EQ(c.vision.num_position_embeddings, 16);
  EXPECT_EQ(c.vision.deepstack_visual_indexes, (std::vector<std::int64_t>{0, 1}));
}

// save_pretrained of a default Qwen3VLConfig() writes "rope_scaling": null,
// with which transformers itself cannot build the rotary embedding.
TEST(HfConfig, NullRopeScalingIsRejected) {
  expect_parse_error(with(real_2b(), "/text_config/rope_scaling", nullptr), {"text_config.rope_scaling", "null"});
  expect_parse_error(with(real_2b(), "/text_config/rope_scaling", kRemove), {"text_config.rope_scaling", "missing"});
}

TEST(HfConfig, AbsentKeysTakeTransformersDefaults) {
  const Json minimal = {
      {"text_config", {{"rope_scaling", {{"rope_type", "default"}}}}},
      {"vision_config", {{"out_hidden_size", 4096}}},  // the class default 3584 would not match text's 4096
  };
  const auto c = qhx::parse_qwen3vl_config(minimal.dump(), kSource);
  EXPECT_EQ(c.image_token_id, 151655);
  EXPECT_EQ(c.video_token_id, 151656);
  EXPECT_EQ(c.vision_start_token_id, 151652);
  EXPECT_EQ(c.vision_end_token_id, 151653);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.text.vocab_size, 151936);
  EXPECT_EQ(c.text.hidden_size, 4096);
  EXPECT_EQ(c.text.intermediate_size, 22016);
  EXPECT_EQ(c.text.num_hidden_layers, 32);
  EXPECT_EQ(c.text.num_attention_heads, 32);
  EXPECT_EQ(c.text.num_key_value_heads, 32);
  EXPECT_EQ(c.text.head_dim, 128);
  EXPECT_EQ(c.text.hidden_act, "silu");
  EXPECT_DOUBLE_EQ(c.text.rms_norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(c.text.rope_theta, 5000000.0);
  EXPECT_EQ(c.text.mrope_section, (std::vector<std::int64_t>{24, 20, 20}));
  EXPECT_TRUE(c.text.mrope_interleaved);
  EXPECT_EQ(c.text.max_position_embeddings, 128000);
  EXPECT_FALSE(c.text.attention_bias);
  EXPECT_FALSE(c.text.tie_word_embeddings);
  EXPECT_EQ(c.vision.depth, 27);
  EXPECT_EQ(c.vision.hidden_size, 1152);
  EXPECT_EQ(c.vision.num_heads, 16);
  EXPECT_EQ(c.vision.intermediate_size, 4304);
  EXPECT_EQ(c.vision.hidden_act, "gelu_pytorch_tanh");
  EXPECT_EQ(c.vision.in_channels, 3);
  EXPECT_EQ(c.vision.patch_size, 16);
  EXPECT_EQ(c.vision.temporal_patch_size, 2);
  EXPECT_EQ(c.vision.spatial_merge_size, 2);
  EXPECT_EQ(c.vision.num_position_embeddings, 2304);
  EXPECT_EQ(c.vision.deepstack_visual_indexes, (std::vector<std::int64_t>{8, 16, 24}));
}

TEST(HfConfig, NullKeyValueHeadsMeansMultiHead) {
  const auto c =
      qhx::parse_qwen3vl_config(with(real_2b(), "/text_config/num_key_value_heads", nullptr).dump(), kSource);
  EXPECT_EQ(c.text.num_key_value_heads, 16);
}

TEST(HfConfig, RopeParametersSpelling) {
  Json j = real_2b();
  j["text_config"].erase("rope_scaling");
  j["text_config"].erase("rope_theta");
  j["text_config"]["rope_parameters"] = {{"rope_type", "default"},
                                         {"rope_theta", 5000000.0},
                                         {"mrope_section", {24, 20, 20}},
                                         {"mrope_interleaved", true}};
  expect_2b(qhx::parse_qwen3vl_config(j.dump(), kSource));

  j["text_config"]["rope_parameters"]["rope_theta"] = 1000000.0;
  EXPECT_DOUBLE_EQ(qhx::parse_qwen3vl_config(j.dump(), kSource).text.rope_theta, 1000000.0);

  j["text_config"]["rope_scaling"] = {{"rope_type", "default"}};
  expect_parse_error(j, {"text_config.rope_parameters", "both rope_scaling and rope_parameters"});
}

TEST(HfConfig, LegacyRopeTypeKey) {
  Json j = with(real_2b(), "/text_config/rope_scaling/rope_type", kRemove);
  j["text_config"]["rope_scaling"]["type"] = "default";
  EXPECT_EQ(qhx::parse_qwen3vl_config(j.dump(), kSource).text.rope_type, "default");
  j["text_config"]["rope_scaling"]["type"] = "linear";
  expect_parse_error(j, {"text_config.rope_type", "unsupported RoPE type \"linear\""});
}

TEST(HfConfig, MissingSubConfigs) {
  expect_parse_error(with(real_2b(), "/text_config", kRemove), {"text_config", "missing"});
  expect_parse_error(with(real_2b(), "/vision_config", kRemove), {"vision_config", "missing"});
  expect_parse_error(with(real_2b(), "/text_config", nullptr), {"text_config", "expected an object"});
  expect_parse_error(with(real_2b(), "/vision_config", Json::array()), {"vision_config", "expected an object"});
}

TEST(HfConfig, OtherModelTypesAreRejected) {
  expect_parse_error(with(real_2b(), "/model_type", "qwen3_vl_moe"), {"model_type", "qwen3_vl_moe"});
  expect_parse_error(with(real_2b(), "/text_config/model_type", "qwen3_vl_moe_text"), {"text_config.model_type"});
}

TEST(HfConfig, WrongTypes) {
  struct Case {
    const char* pointer;
    Json value;
    std::vector<std::string> phrases;
  };
  const Case cases[] = {
      {"/text_config/hidden_size", "2048", {"text_config.hidden_size", "expected an integer", "string"}},
      {"/text_config/hidden_size", 2048.0, {"text_config.hidden_size", "expected an integer", "floating-point"}},
      {"/text_config/num_hidden_layers", true, {"text_config.num_hidden_layers", "expected an integer", "boolean"}},
      {"/text_config/head_dim", nullptr, {"text_config.head_dim", "expected an integer", "null"}},
      {"/text_config/vocab_size", 18446744073709551615ull, {"text_config.vocab_size", "out of range"}},
      {"/text_config/rms_norm_eps", "1e-6", {"text_config.rms_norm_eps", "expected a number"}},
      {"/text_config/rope_theta", false, {"text_config.rope_theta", "expected a number"}},
      {"/text_config/hidden_act", 1, {"text_config.hidden_act", "expected a string"}},
      {"/text_config/attention_bias", 0, {"text_config.attention_bias", "expected a boolean"}},
      {"/text_config/rope_scaling", "default", {"text_config.rope_scaling", "expected an object"}},
      {"/text_config/rope_scaling/mrope_section", 64, {"text_config.rope_scaling.mrope_section", "expected an array"}},
      {"/text_config/rope_scaling/mrope_section/1",
       20.5,
       {"text_config.rope_scaling.mrope_section[1]", "expected an integer"}},
      {"/text_config/rope_scaling/mrope_interleaved", "true", {"mrope_interleaved", "expected a boolean"}},
      {"/vision_config/deepstack_visual_indexes/2",
       "17",
       {"vision_config.deepstack_visual_indexes[2]", "expected an integer"}},
      {"/vision_config/patch_size", 16.0, {"vision_config.patch_size", "expected an integer"}},
      {"/tie_word_embeddings", "true", {"tie_word_embeddings", "expected a boolean"}},
      {"/image_token_id", 151655.0, {"image_token_id", "expected an integer"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(std::string(c.pointer) + " = " + c.value.dump());
    expect_parse_error(with(real_2b(), c.pointer, c.value), c.phrases);
  }
}

TEST(HfConfig, ValidationRules) {
  struct Case {
    const char* pointer;
    Json value;
    std::vector<std::string> phrases;
  };
  const Case cases[] = {
      // sizes > 0
      {"/text_config/vocab_size", 0, {"text_config.vocab_size", "> 0"}},
      {"/text_config/hidden_size", -2048, {"text_config.hidden_size", "> 0"}},
      {"/text_config/intermediate_size", 0, {"text_config.intermediate_size", "> 0"}},
      {"/text_config/num_hidden_layers", 0, {"text_config.num_hidden_layers", "> 0"}},
      {"/text_config/num_attention_heads", 0, {"text_config.num_attention_heads", "> 0"}},
      {"/text_config/num_key_value_heads", 0, {"text_config.num_key_value_heads", "> 0"}},
      {"/text_config/head_dim", 0, {"text_config.head_dim", "> 0"}},
      {"/text_config/max_position_embeddings", 0, {"text_config.max_position_embeddings", "> 0"}},
      {"/vision_config/depth", 0, {"vision_config.depth", "> 0"}},
      {"/vision_config/hidden_size", 0, {"vision_config.hidden_size", "> 0"}},
      {"/vision_config/num_heads", 0, {"vision_config.num_heads", "> 0"}},
      {"/vision_config/intermediate_size", 0, {"vision_config.intermediate_size", "> 0"}},
      {"/vision_config/in_channels", 0, {"vision_config.in_channels", "> 0"}},
      {"/vision_config/patch_size", 0, {"vision_config.patch_size", "> 0"}},
      {"/vision_config/temporal_patch_size", 0, {"vision_config.temporal_patch_size", "> 0"}},
      {"/vision_config/out_hidden_size", 0, {"vision_config.out_hidden_size", "> 0"}},
      {"/vision_config/num_position_embeddings", 0, {"vision_config.num_position_embeddings", "> 0"}},
      {"/vision_config/spatial_merge_size", 0, {"vision_config.spatial_merge_size", ">= 1"}},
      // text structure
      {"/text_config/num_key_value_heads", 3, {"text_config.num_key_value_heads", "does not divide"}},
      {"/text_config/head_dim", 127, {"text_config.head_dim", "even"}},
      {"/text_config/hidden_act", "gelu", {"text_config.hidden_act", "unsupported activation \"gelu\""}},
      {"/text_config/rms_norm_eps", 0.0, {"text_config.rms_norm_eps", "> 0"}},
      {"/text_config/rms_norm_eps", -1e-6, {"text_config.rms_norm_eps", "> 0"}},
      {"/text_config/rope_theta", 0, {"text_config.rope_theta", "> 0"}},
      {"/text_config/rope_scaling/rope_type", "yarn", {"text_config.rope_type", "unsupported RoPE type \"yarn\""}},
      {"/text_config/rope_scaling/mrope_section", {24, 40}, {"text_config.mrope_section", "3 entries"}},
      {"/text_config/rope_scaling/mrope_section", {24, 20, 20, 0}, {"text_config.mrope_section", "3 entries"}},
      {"/text_config/rope_scaling/mrope_section", {24, 20, 21}, {"text_config.mrope_section", "sum to 65", "64"}},
      {"/text_config/rope_scaling/mrope_section", {44, 0, 20}, {"text_config.mrope_section", "> 0"}},
      // vision structure
      {"/vision_config/num_heads", 5, {"vision_config.num_heads", "does not divide hidden_size 1024"}},
      {"/vision_config/hidden_act", "gelu", {"vision_config.hidden_act", "unsupported activation \"gelu\""}},
      {"/vision_config/num_position_embeddings", 2300, {"vision_config.num_position_embeddings", "perfect square"}},
      {"/vision_config/out_hidden_size",
       1024,
       {"vision_config.out_hidden_size", "differs from text_config.hidden_size"}},
      {"/vision_config/deepstack_visual_indexes",
       {5, 11, 24},
       {"deepstack_visual_indexes", "24 is outside [0, depth=24)"}},
      {"/vision_config/deepstack_visual_indexes", {-1, 11}, {"deepstack_visual_indexes", "outside"}},
      {"/vision_config/deepstack_visual_indexes", {11, 5}, {"deepstack_visual_indexes", "strictly increasing"}},
      {"/vision_config/deepstack_visual_indexes", {5, 5}, {"deepstack_visual_indexes", "strictly increasing"}},
      // token ids
      {"/image_token_id", 151936, {"image_token_id", "outside [0, text_config.vocab_size=151936)"}},
      {"/video_token_id", -1, {"video_token_id", "outside"}},
      {"/vision_start_token_id", 200000, {"vision_start_token_id", "outside"}},
      {"/vision_end_token_id", -151653, {"vision_end_token_id", "outside"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(std::string(c.pointer) + " = " + c.value.dump());
    expect_parse_error(with(real_2b(), c.pointer, c.value), c.phrases);
  }
}

TEST(HfConfig, DeepstackNeedsEnoughTextLayers) {
  Json j = real_2b();
  j["text_config"]["num_hidden_layers"] = 2;
  expect_parse_error(j, {"vision_config.deepstack_visual_indexes", "3 entries", "num_hidden_layers is 2"});
}

TEST(HfConfig, EmptyDeepstackIsAllowed) {
  const auto c = qhx::parse_qwen3vl_config(
      with(real_2b(), "/vision_config/deepstack_visual_indexes", Json::array()).dump(), kSource);
  EXPECT_TRUE(c.vision.deepstack_visual_indexes.empty());
}

// ---------------------------------------------------------------------------
// transformers 5.x spellings

TEST(HfConfig, WhatTransformers5SavePretrainedWrites) {
  const auto c = qhx::parse_qwen3vl_config(kSavePretrainedTf5, kSource);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_TRUE(c.text.tie_word_embeddings);
  EXPECT_EQ(c.dtype, "bfloat16");
  EXPECT_EQ(c.text.dtype, "bfloat16");
  EXPECT_EQ(c.text.hidden_size, 96);
  EXPECT_EQ(c.text.head_dim, 32);
  EXPECT_EQ(c.text.num_key_value_heads, 2);
  EXPECT_DOUBLE_EQ(c.text.rope_theta, 5000000.0);
  EXPECT_EQ(c.text.rope_type, "default");
  EXPECT_EQ(c.text.mrope_section, (std::vector<std::int64_t>{6, 5, 5}));
  EXPECT_EQ(c.vision.depth, 3);
  EXPECT_EQ(c.vision.num_heads, 1);
  EXPECT_EQ(c.vision.deepstack_visual_indexes, (std::vector<std::int64_t>{1}));
  EXPECT_EQ(c.vision.rope_type, "axial");
  EXPECT_DOUBLE_EQ(c.vision.rope_theta, 10000.0);
}

TEST(HfConfig, VisionModelTypeBothSpellings) {
  EXPECT_EQ(qhx::parse_qwen3vl_config(with(real_2b(), "/vision_config/model_type", "qwen3_vl_vision").dump(), kSource)
                .vision.depth,
            24);
  EXPECT_EQ(
      qhx::parse_qwen3vl_config(with(real_2b(), "/vision_config/model_type", "qwen3_vl").dump(), kSource).vision.depth,
      24);
  Json j = Json::parse(kSavePretrainedTf5);
  j["vision_config"]["model_type"] = "qwen3_vl";  // what 4.57 writes; 5.x loads it too
  EXPECT_EQ(qhx::parse_qwen3vl_config(j.dump(), kSource).vision.depth, 3);
  expect_parse_error(with(real_2b(), "/vision_config/model_type", "qwen3_vl_moe_vision"),
                     {"vision_config.model_type", "\"qwen3_vl_moe_vision\"", "\"qwen3_vl_vision\""});
  expect_parse_error(with(real_2b(), "/vision_config/model_type", "qwen3_vl_text"), {"vision_config.model_type"});
  expect_parse_error(with(Json::parse(kSavePretrainedTf5), "/text_config/model_type", "qwen3_vl_vision"),
                     {"text_config.model_type", "expected \"qwen3_vl_text\""});
}

TEST(HfConfig, VisionRopeParameters) {
  // 4.57 files have none: theta 10000, as 4.57 hard-codes.
  EXPECT_DOUBLE_EQ(qhx::parse_qwen3vl_config(kQwen3VL2B, kSource).vision.rope_theta, 10000.0);
  EXPECT_EQ(qhx::parse_qwen3vl_config(kQwen3VL2B, kSource).vision.rope_type, "axial");
  const Json tf5 = Json::parse(kSavePretrainedTf5);
  // The theta is honoured, not assumed.
  EXPECT_DOUBLE_EQ(
      qhx::parse_qwen3vl_config(with(tf5, "/vision_config/rope_parameters/rope_theta", 20000.0).dump(), kSource)
          .vision.rope_theta,
      20000.0);
  EXPECT_DOUBLE_EQ(
      qhx::parse_qwen3vl_config(with(tf5, "/vision_config/rope_parameters/rope_theta", 1000).dump(), kSource)
          .vision.rope_theta,
      1000.0);
  // Absent theta: 5.x's default_theta 10000; "default" is turned into "axial" by 5.x's config.
  EXPECT_DOUBLE_EQ(
      qhx::parse_qwen3vl_config(with(tf5, "/vision_config/rope_parameters/rope_theta", kRemove).dump(), kSource)
          .vision.rope_theta,
      10000.0);
  EXPECT_EQ(qhx::parse_qwen3vl_config(with(tf5, "/vision_config/rope_parameters/rope_type", "default").dump(), kSource)
                .vision.rope_type,
            "axial");
  EXPECT_EQ(
      qhx::parse_qwen3vl_config(with(tf5, "/vision_config/rope_parameters", nullptr).dump(), kSource).vision.rope_theta,
      10000.0);
  // A bare vision rope_theta (5.x moves it into rope_parameters when the config loads).
  Json bare = with(tf5, "/vision_config/rope_parameters", kRemove);
  bare["vision_config"]["rope_theta"] = 30000.0;
  EXPECT_DOUBLE_EQ(qhx::parse_qwen3vl_config(bare.dump(), kSource).vision.rope_theta, 30000.0);
  bare["vision_config"]["rope_theta"] = -1.0;
  expect_parse_error(bare, {"vision_config.rope_theta", "> 0"});
  expect_parse_error(with(bare, "/vision_config/rope_theta", "1e4"), {"vision_config.rope_theta", "expected a number"});
  // Refusals: what we cannot honour, or a broken value.
  expect_parse_error(with(tf5, "/vision_config/rope_parameters/rope_type", "yarn"),
                     {"vision_config.rope_parameters.rope_type", "unsupported vision RoPE type \"yarn\""});
  expect_parse_error(with(tf5, "/vision_config/rope_parameters/rope_type", 1),
                     {"vision_config.rope_parameters.rope_type", "expected a string"});
  expect_parse_error(with(tf5, "/vision_config/rope_parameters/rope_theta", 0.0),
                     {"vision_config.rope_parameters.rope_theta", "> 0"});
  expect_parse_error(with(tf5, "/vision_config/rope_parameters/rope_theta", -10000.0),
                     {"vision_config.rope_parameters.rope_theta", "> 0"});
  expect_parse_error(with(tf5, "/vision_config/rope_parameters/rope_theta", "10000"),
                     {"vision_config.rope_parameters.rope_theta", "expected a number"});
  expect_parse_error(with(tf5, "/vision_config/rope_parameters", "axial"),
                     {"vision_config.rope_parameters", "expected an object"});
  expect_parse_error(with(tf5, "/vision_config/rope_scaling", Json{{"rope_type", "linear"}, {"factor", 2.0}}),
                     {"vision_config.rope_scaling", "no RoPE scaling"});
  // The 2-D RoPE splits each head in four: hidden 36 / 3 heads = 12 works, 6 heads = 6 does not.
  Json odd = tf5;
  odd["vision_config"]["hidden_size"] = 36;
  odd["vision_config"]["num_heads"] = 6;
  expect_parse_error(odd, {"vision_config.num_heads", "vision head dim 6", "multiple of 4"});
  odd["vision_config"]["num_heads"] = 3;
  EXPECT_EQ(qhx::parse_qwen3vl_config(odd.dump(), kSource).vision.num_heads, 3);
}

TEST(HfConfig, TextRopeParametersWithoutThetaIsRefused) {
  // 5.x would take its default_theta 500000 here and 4.57 its 5000000: no silent pick.
  expect_parse_error(with(Json::parse(kSavePretrainedTf5), "/text_config/rope_parameters/rope_theta", kRemove),
                     {"text_config.rope_parameters.rope_theta", "missing", "500000", "5000000"});
  // One level up is still read (early 5.x files).
  Json j = with(Json::parse(kSavePretrainedTf5), "/text_config/rope_parameters/rope_theta", kRemove);
  j["text_config"]["rope_theta"] = 1000000.0;
  EXPECT_DOUBLE_EQ(qhx::parse_qwen3vl_config(j.dump(), kSource).text.rope_theta, 1000000.0);
}

TEST(HfConfig, DtypeAndTorchDtype) {
  const Json tf5 = Json::parse(kSavePretrainedTf5);
  EXPECT_EQ(qhx::parse_qwen3vl_config(kSavePretrainedSmall, kSource).dtype, "");  // absent
  // The older spelling alone, at either level.
  Json old = with(with(tf5, "/dtype", kRemove), "/text_config/dtype", kRemove);
  old["torch_dtype"] = "float32";
  old["text_config"]["torch_dtype"] = "float16";
  const auto c = qhx::parse_qwen3vl_config(old.dump(), kSource);
  EXPECT_EQ(c.dtype, "float32");
  EXPECT_EQ(c.text.dtype, "float16");
  // Both spellings: they must agree.
  Json both = tf5;
  both["torch_dtype"] = "bfloat16";
  EXPECT_EQ(qhx::parse_qwen3vl_config(both.dump(), kSource).dtype, "bfloat16");
  both["torch_dtype"] = "float32";
  expect_parse_error(both, {"torch_dtype", "\"float32\"", "dtype is \"bfloat16\""});
  both = tf5;
  both["text_config"]["torch_dtype"] = "float16";
  expect_parse_error(both, {"text_config.torch_dtype", "cannot tell which one applies"});
  // Broken values.
  expect_parse_error(with(tf5, "/dtype", "int8"), {"dtype", "unsupported dtype \"int8\""});
  expect_parse_error(with(tf5, "/text_config/dtype", 16), {"text_config.dtype", "expected a string"});
  expect_parse_error(with(old, "/torch_dtype", "float64"), {"torch_dtype", "unsupported dtype \"float64\""});
  // null is absent (what save_pretrained writes for an unset dtype).
  EXPECT_EQ(qhx::parse_qwen3vl_config(with(tf5, "/dtype", nullptr).dump(), kSource).dtype, "");
}
