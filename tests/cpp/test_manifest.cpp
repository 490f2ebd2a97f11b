// Manifest v1 parsing: a valid plan, and every kind of mistake giving an
// error that names the JSON path and what was expected.
#include <gtest/gtest.h>

#include "qhexrt/error.hpp"
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
    for (const auto& f : all) EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << e.what() << "\nlacks: " << f;
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
  test::expect_error([] { (void)parse_manifest("{\"qhexrt_manifest\": 1,", "m.json", "."); }, {"m.json", "not valid JSON"});
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

}  // namespace
}  // namespace qhx
