// Manifest v1 parsing: a valid plan, and every kind of mistake giving an
// error that names the JSON path and what was expected.
#include <gtest/gtest.h>

#include "qhexrt/error.hpp"
#include "runtime/hf_dir_plan.hpp"
#include "runtime/manifest.hpp"
#include "test_support.hpp"

namespace qhx {
namespace {

nlohmann::json valid() {
  return nlohmann::json::parse(R"({
    "qhexrt_manifest": 1, "name": "t", "model": "qwen3vl", "config": "config.json", "tokenizer": "tokenizer.json",
    "chat_template": "qwen3vl", "context_length": 64, "prefill_chunk": 5, "max_new_tokens": 8,
    "sampling": {"temperature": 0.7, "top_k": 20, "top_p": 0.8},
    "tables": {"embed": {"file": "model.safetensors", "tensor": "model.language_model.embed_tokens.weight"}},
    "graphs": {"llm": {"backend": "cpu", "kind": "qwen3vl.text_decoder", "config": "config.json", "weights": "model.safetensors"},
               "lm_head": {"backend": "cpu", "kind": "linear", "weights": "model.safetensors", "tensor": "lm_head.weight"}},
    "stages": [{"op": "tokenize"}, {"op": "embed", "table": "embed"}, {"op": "prefill", "graph": "llm", "lm_head": "lm_head"},
               {"op": "decode", "graph": "llm", "lm_head": "lm_head", "table": "embed"}, {"op": "detokenize"}]})");
}

Manifest parse(const nlohmann::json& j) { return parse_manifest(j.dump(), "m.json", "/bundle"); }

void expect_manifest_error(const nlohmann::json& j, std::initializer_list<std::string> fragments) {
  std::vector<std::string> all = {"m.json"};
  all.insert(all.end(), fragments.begin(), fragments.end());
  try {
    (void)parse(j);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    for (const auto& f : all)
      EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << e.what() << "\nlacks: " << f;
  }
}

TEST(Manifest, ParsesAValidPlan) {
  const Manifest m = parse(valid());
  EXPECT_EQ(m.version, 1);
  EXPECT_EQ(m.context_length, 64);
  EXPECT_EQ(m.prefill_chunk, 5);
  EXPECT_FLOAT_EQ(m.sampling.temperature, 0.7f);
  EXPECT_EQ(m.sampling.top_k, 20);
  EXPECT_EQ(m.stop_tokens, (std::vector<std::string>{"<|im_end|>", "<|endoftext|>"}));
  ASSERT_EQ(m.stages.size(), 5u);
  EXPECT_EQ(m.stages[3].op, "decode");
  EXPECT_EQ(m.graphs.at("llm").kind, "qwen3vl.text_decoder");
  EXPECT_EQ(m.dir, "/bundle");
}

TEST(Manifest, VersionRule) {
  auto j = valid();
  j["qhexrt_manifest"] = kManifestVersion + 1;
  expect_manifest_error(j, {"qhexrt_manifest", "needs a newer QHexRT"});
  j.erase("qhexrt_manifest");
  expect_manifest_error(j, {"qhexrt_manifest", "missing"});
}

TEST(Manifest, ErrorsNameTheJsonPath) {
  auto j = valid();
  j["stages"][2]["op"] = "warp_drive";
  expect_manifest_error(j, {"stages[2].op", "unknown stage \"warp_drive\""});
  j = valid();
  j["stages"][2]["graph"] = "nope";
  expect_manifest_error(j, {"stages[2].graph", "no graph named \"nope\""});
  j = valid();
  j["stages"][1]["table"] = "nope";
  expect_manifest_error(j, {"stages[1].table", "no table named"});
  j = valid();
  j["context_length"] = "64";
  expect_manifest_error(j, {"context_length", "expected an integer"});
  j = valid();
  j["prefill_chunk"] = 0;
  expect_manifest_error(j, {"prefill_chunk", "must be > 0"});
  j = valid();
  j["sampling"]["top_p"] = 1.5;
  expect_manifest_error(j, {"sampling", "top_p"});
  j = valid();
  j["graphs"]["llm"].erase("backend");
  expect_manifest_error(j, {"graphs.llm.backend", "missing"});
  j = valid();
  j["contxt_length"] = 5;
  expect_manifest_error(j, {"contxt_length", "unknown key"});
  j = valid();
  j["stages"] = nlohmann::json::array();
  expect_manifest_error(j, {"stages", "non-empty"});
  j = valid();
  j["model"] = "llama";
  expect_manifest_error(j, {"model", "unsupported model"});
  test::expect_error([] { (void)parse_manifest("{\"qhexrt_manifest\": 1,", "m.json", "."); },
                     {"m.json", "not valid JSON"});
  // Found by fuzz_manifest: nlohmann's parser reports a number past double's range as
  // out_of_range (406), not parse_error; it escaped as a bare nlohmann exception.
  test::expect_error(
      [] { (void)parse_manifest("{\"qhexrt_manifest\": 1, \"context_length\": 1e7777}", "m.json", "."); },
      {"m.json", "not valid JSON", "number overflow"});
}

TEST(Manifest, LoadNamesTheFile) {
  test::expect_error([] { (void)load_manifest("/nonexistent/plan.json"); }, {"/nonexistent/plan.json"});
}

TEST(Manifest, DefaultPlanForACheckpointDirectory) {
  const Manifest m = default_manifest_for_hf_dir("/some/ckpt");
  EXPECT_EQ(m.config, "/some/ckpt/config.json");  // absolute: the printed plan works from anywhere
  EXPECT_EQ(m.prefill_chunk, 320);
  EXPECT_EQ(m.stages.size(), 8u);
  EXPECT_EQ(m.graphs.at("lm_head").spec["tensor"][1], "model.language_model.embed_tokens.weight");
}

TEST(Manifest, StopTokenIds) {
  auto j = valid();
  j["qhexrt_manifest"] = 4;
  j["stop_token_ids"] = {151645, 7};
  EXPECT_EQ(parse(j).stop_token_ids, (std::vector<std::int64_t>{151645, 7}));
  EXPECT_TRUE(parse(valid()).stop_token_ids.empty());
  j["stop_token_ids"] = {1, -2};
  expect_manifest_error(j, {"stop_token_ids[1]", ">= 0"});
  j["stop_token_ids"] = {1, "2"};
  expect_manifest_error(j, {"stop_token_ids[1]", "expected an integer"});
  j["stop_token_ids"] = 151645;
  expect_manifest_error(j, {"stop_token_ids", "expected an array"});
  j["stop_token_ids"] = {1};
  j["qhexrt_manifest"] = 3;  // a key of version 4
  expect_manifest_error(j, {"stop_token_ids", "needs qhexrt_manifest >= 4", "says 3"});
}

TEST(Manifest, AnI8KvCacheNeedsVersion5) {
  auto j = valid();
  j["graphs"]["llm"]["kv_cache"] = "i8";
  j["qhexrt_manifest"] = 5;
  EXPECT_EQ(parse(j).graphs.at("llm").spec["kv_cache"], "i8");
  j["qhexrt_manifest"] = 4;  // a value of version 5
  expect_manifest_error(j, {"graphs.llm.kv_cache", "\"i8\" needs qhexrt_manifest >= 5", "says 4"});
  j["graphs"]["llm"]["kv_cache"] = "f16";  // version 3's values stay valid
  EXPECT_EQ(parse(j).graphs.at("llm").spec["kv_cache"], "f16");
}

// --- a checkpoint directory's generation_config.json and preprocessor_config.json

const char* kGenSource = "/ckpt/generation_config.json";
const char* kPreSource = "/ckpt/preprocessor_config.json";

HfDirPlan from_generation(const nlohmann::json& j) {
  HfDirPlan p;
  apply_generation_config(j.dump(), kGenSource, p);
  return p;
}

Qwen3VLVisionConfig vision_16_2_2() {
  Qwen3VLVisionConfig v;
  v.patch_size = 16;
  v.spatial_merge_size = 2;
  v.temporal_patch_size = 2;
  return v;
}

HfDirPlan from_preprocessor(const nlohmann::json& j) {
  HfDirPlan p;
  apply_preprocessor_config(j.dump(), kPreSource, vision_16_2_2(), "/ckpt/config.json", p);
  return p;
}

TEST(HfDirPlan, NoFilesKeepTodaysDefaults) {
  const HfDirPlan p;
  EXPECT_EQ(p.sampling,
            (nlohmann::json{{"temperature", 0.7}, {"top_k", 20}, {"top_p", 0.8}, {"repetition_penalty", 1.0}}));
  EXPECT_EQ(p.stop_tokens, (std::vector<std::string>{"<|im_end|>", "<|endoftext|>"}));
  EXPECT_FALSE(p.has_stop_token_ids);
  EXPECT_EQ(p.min_pixels, 65536);
  EXPECT_EQ(p.max_pixels, 16777216);
  const Manifest m = default_manifest_for_hf_dir("/nonexistent/ckpt");
  EXPECT_FALSE(m.sampling.greedy);
  EXPECT_EQ(m.sampling.top_k, 20);
  EXPECT_EQ(m.stop_tokens, (std::vector<std::string>{"<|im_end|>", "<|endoftext|>"}));
  EXPECT_TRUE(m.stop_token_ids.empty());
}

TEST(HfDirPlan, GenerationConfig) {
  const HfDirPlan p = from_generation({{"do_sample", true},
                                       {"temperature", 0.6},
                                       {"top_k", 5},
                                       {"top_p", 0.9},
                                       {"min_p", 0.05},
                                       {"repetition_penalty", 1.1},
                                       {"eos_token_id", {151645, 151643}},
                                       {"pad_token_id", 151643},
                                       {"transformers_version", "5.24.0"}});
  EXPECT_EQ(p.sampling["greedy"], false);
  EXPECT_EQ(p.sampling["temperature"], 0.6);
  EXPECT_EQ(p.sampling["top_k"], 5);
  EXPECT_EQ(p.sampling["top_p"], 0.9);
  EXPECT_EQ(p.sampling["min_p"], 0.05);
  EXPECT_EQ(p.sampling["repetition_penalty"], 1.1);
  EXPECT_TRUE(p.stop_tokens.empty());  // generate() stops on eos_token_id only
  EXPECT_TRUE(p.has_stop_token_ids);
  EXPECT_EQ(p.stop_token_ids, (std::vector<std::int64_t>{151645, 151643}));
  EXPECT_EQ(from_generation({{"eos_token_id", 42}}).stop_token_ids, (std::vector<std::int64_t>{42}));
  EXPECT_TRUE(from_generation({{"eos_token_id", nlohmann::json::array()}}).stop_token_ids.empty());
}

TEST(HfDirPlan, GenerationConfigDefaultsAreTransformers) {
  // GenerationConfig's own defaults: do_sample false (greedy), temperature 1, top_k 50, top_p 1.
  for (const auto& j :
       {nlohmann::json::object(), nlohmann::json{{"do_sample", nullptr}, {"top_k", nullptr}, {"min_p", nullptr}}}) {
    const HfDirPlan p = from_generation(j);
    EXPECT_EQ(p.sampling["greedy"], true);
    EXPECT_EQ(p.sampling["temperature"], 1.0);
    EXPECT_EQ(p.sampling["top_k"], 50);
    EXPECT_EQ(p.sampling["top_p"], 1.0);
    EXPECT_EQ(p.sampling["min_p"], 0.0);
    EXPECT_EQ(p.sampling["repetition_penalty"], 1.0);
    // no eos_token_id: the default stop tokens stay
    EXPECT_EQ(p.stop_tokens, (std::vector<std::string>{"<|im_end|>", "<|endoftext|>"}));
    EXPECT_FALSE(p.has_stop_token_ids);
  }
  EXPECT_EQ(from_generation({{"do_sample", false}, {"temperature", 0.0}}).sampling["temperature"], 0.0);
}

TEST(HfDirPlan, BadGenerationConfigNamesFileAndKey) {
  struct Case {
    nlohmann::json j;
    std::vector<std::string> phrases;
  };
  const Case cases[] = {
      {{{"top_k", "5"}}, {"top_k", "expected an integer", "string"}},
      {{{"top_k", 5.5}}, {"top_k", "expected an integer"}},
      {{{"top_k", -1}}, {"top_k", ">= 0"}},
      {{{"temperature", "0.6"}}, {"temperature", "expected a number"}},
      {{{"do_sample", true}, {"temperature", 0.0}}, {"temperature", "> 0 when do_sample is true"}},
      {{{"temperature", -1.0}}, {"temperature", ">= 0"}},
      {{{"do_sample", "yes"}}, {"do_sample", "expected a boolean"}},
      {{{"top_p", 0.0}}, {"top_p", "(0, 1]"}},
      {{{"top_p", 1.5}}, {"top_p", "(0, 1]"}},
      {{{"min_p", 2.0}}, {"min_p", "[0, 1]"}},
      {{{"repetition_penalty", 0.0}}, {"repetition_penalty", "> 0"}},
      {{{"eos_token_id", "151645"}}, {"eos_token_id", "expected a token id or a list"}},
      {{{"eos_token_id", {151645, "x"}}}, {"eos_token_id[1]", "expected an integer"}},
      {{{"eos_token_id", {151645, -1}}}, {"eos_token_id[1]", ">= 0"}},
      {{{"eos_token_id", -5}}, {"eos_token_id", ">= 0"}},
      {{{"num_beams", 4}}, {"num_beams", "beam search", "not supported"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.j.dump());
    std::vector<std::string> all = c.phrases;
    all.emplace_back(kGenSource);
    test::expect_error([&] { (void)from_generation(c.j); }, all);
  }
  HfDirPlan p;
  test::expect_error([&] { apply_generation_config("{\"top_k\": 5,", kGenSource, p); }, {kGenSource, "not valid JSON"});
  test::expect_error([&] { apply_generation_config("[1, 2]", kGenSource, p); }, {kGenSource, "JSON object"});
}

TEST(HfDirPlan, PreprocessorConfig) {
  // The hub layout: size alone.
  HfDirPlan p = from_preprocessor({{"size", {{"shortest_edge", 4096}, {"longest_edge", 1048576}}},
                                   {"patch_size", 16},
                                   {"merge_size", 2},
                                   {"temporal_patch_size", 2},
                                   {"image_mean", {0.5, 0.5, 0.5}},
                                   {"image_std", {0.5, 0.5, 0.5}}});
  EXPECT_EQ(p.min_pixels, 4096);
  EXPECT_EQ(p.max_pixels, 1048576);
  // min_pixels / max_pixels override size, as in both transformers lines.
  p = from_preprocessor({{"size", {{"shortest_edge", 4096}, {"longest_edge", 1048576}}}, {"min_pixels", 8192}});
  EXPECT_EQ(p.min_pixels, 8192);
  EXPECT_EQ(p.max_pixels, 1048576);
  p = from_preprocessor({{"min_pixels", 3136}, {"max_pixels", 802816}});
  EXPECT_EQ(p.min_pixels, 3136);
  EXPECT_EQ(p.max_pixels, 802816);
  p = from_preprocessor(nlohmann::json::object());  // nothing said: the defaults stay
  EXPECT_EQ(p.min_pixels, 65536);
  EXPECT_EQ(p.max_pixels, 16777216);
}

TEST(HfDirPlan, BadPreprocessorConfigNamesFileAndKey) {
  struct Case {
    nlohmann::json j;
    std::vector<std::string> phrases;
  };
  const Case cases[] = {
      {{{"patch_size", 14}}, {"patch_size", "14 differs from /ckpt/config.json's vision_config.patch_size 16"}},
      {{{"merge_size", 1}}, {"merge_size", "vision_config.spatial_merge_size 2"}},
      {{{"temporal_patch_size", 1}}, {"temporal_patch_size", "vision_config.temporal_patch_size 2"}},
      {{{"patch_size", "16"}}, {"patch_size", "expected an integer"}},
      {{{"size", {{"height", 448}, {"width", 448}}}}, {"size", "shortest_edge", "longest_edge"}},
      {{{"size", 448}}, {"size", "expected an object"}},
      {{{"size", {{"shortest_edge", "4096"}, {"longest_edge", 1048576}}}},
       {"size.shortest_edge", "expected an integer"}},
      {{{"min_pixels", 65536.0}}, {"min_pixels", "expected an integer"}},
      {{{"min_pixels", 0}}, {"min_pixels", "> 0"}},
      {{{"max_pixels", -1}}, {"max_pixels", "> 0"}},
      {{{"min_pixels", 2000000}, {"max_pixels", 1000000}}, {"min_pixels", "exceeds max_pixels"}},
      {{{"size", {{"shortest_edge", 2000000}, {"longest_edge", 1000000}}}}, {"size.shortest_edge", "exceeds"}},
      {{{"image_mean", {0.48145466, 0.4578275, 0.40821073}}}, {"image_mean", "not supported", "mean 0.5"}},
      {{{"image_std", 0.25}}, {"image_std", "not supported"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.j.dump());
    std::vector<std::string> all = c.phrases;
    all.emplace_back(kPreSource);
    test::expect_error([&] { (void)from_preprocessor(c.j); }, all);
  }
  HfDirPlan p;
  test::expect_error([&] { apply_preprocessor_config("not json", kPreSource, vision_16_2_2(), "c.json", p); },
                     {kPreSource, "not valid JSON"});
}

}  // namespace
}  // namespace qhx
