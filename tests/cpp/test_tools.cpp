// Runs the command-line tools as a user would (under the sanitizers in the
// sanitizer build) and checks their output, exit status and error messages.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>

#include "qhexrt/safetensors.hpp"
#include "runtime/manifest.hpp"
#include "test_support.hpp"

namespace qhx {
namespace {

struct ToolRun {
  int status = -1;
  std::string out, err;
};

// Runs `args` with `input` on stdin through the shell; captures stdout and stderr.
ToolRun run_tool(const std::string& tool, const std::string& args, const std::string& input) {
  test::TempDir dir;
  const auto in = dir.write("stdin", input);
  const auto out = dir.path() / "stdout";
  const auto err = dir.path() / "stderr";
  const std::string cmd =
      (test::bin_dir() / tool).string() + " " + args + " <" + in.string() + " >" + out.string() + " 2>" + err.string();
  const int raw = std::system(cmd.c_str());
  ToolRun r;
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
  r.out = test::read_file(out);
  r.err = test::read_file(err);
  return r;
}

std::string tokenizer_flag() { return "--tokenizer " + test::tokenizer_json_path().string(); }

TEST(QhxTokenize, EncodesAndDecodesLines) {
  const ToolRun enc = run_tool("qhx_tokenize", tokenizer_flag(), "\"Describe this image.\"\n\"\"\n\"<think>\"\n");
  EXPECT_EQ(enc.status, 0) << enc.err;
  EXPECT_EQ(enc.out, "[74785,419,2168,13]\n[]\n[151667]\n");
  const ToolRun dec = run_tool("qhx_tokenize", tokenizer_flag() + " --decode", "[74785,419,2168,13]\n[]\n[151645]\n");
  EXPECT_EQ(dec.status, 0) << dec.err;
  EXPECT_EQ(dec.out, "\"Describe this image.\"\n\"\"\n\"<|im_end|>\"\n");
  const ToolRun skip = run_tool("qhx_tokenize", tokenizer_flag() + " --decode --skip-special", "[151645,9707]\n");
  EXPECT_EQ(skip.out, "\"Hello\"\n");
}

TEST(QhxTokenize, BadLineStopsWithItsNumberAfterEarlierOutput) {
  const ToolRun r = run_tool("qhx_tokenize", tokenizer_flag(), "\"a\"\n\"b\"\n{not json\n\"c\"\n");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.out, "[64]\n[65]\n");
  EXPECT_NE(r.err.find("line 3"), std::string::npos) << r.err;
}

TEST(QhxTokenize, WrongTypesAndIdsAreErrors) {
  struct Case {
    std::string args, input, fragment;
  };
  const std::vector<Case> cases = {
      {"", "42\n", "expected a JSON string"},
      {"", "[1,2]\n", "expected a JSON string"},
      {"--decode", "\"text\"\n", "expected a JSON array"},
      {"--decode", "[1,\"x\"]\n", "element 1"},
      {"--decode", "[151669]\n", "out of range"},
      {"--decode", "[-1]\n", "out of range"},
      {"", "\"\\ud800\"\n", "line 1"},  // a lone surrogate is not text
  };
  for (const auto& c : cases) {
    const ToolRun r = run_tool("qhx_tokenize", tokenizer_flag() + " " + c.args, c.input);
    EXPECT_EQ(r.status, 1) << c.input;
    EXPECT_NE(r.err.find(c.fragment), std::string::npos) << c.input << " -> " << r.err;
  }
}

TEST(QhxTokenize, BadTokenizerFileAndFlags) {
  test::TempDir dir;
  const auto truncated = dir.write("tokenizer.json", test::read_file(test::tokenizer_json_path()).substr(0, 1000));
  ToolRun r = run_tool("qhx_tokenize", "--tokenizer " + truncated.string(), "\"a\"\n");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find(truncated.string()), std::string::npos) << r.err;
  r = run_tool("qhx_tokenize", "--tokenizer /nonexistent.json", "\"a\"\n");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("/nonexistent.json"), std::string::npos) << r.err;
  r = run_tool("qhx_tokenize", "--bogus-flag", "");
  EXPECT_NE(r.status, 0);
  EXPECT_FALSE(r.err.empty());
}

}  // namespace
}  // namespace qhx

namespace qhx {
namespace {

// The tiny checkpoint that transformers wrote (tests/reference/build_all.py, run by scripts/test.sh).
std::filesystem::path tiny_checkpoint() {
  const auto p = test::cache_dir() / "reference" / "tiny_a" / "checkpoint";
  if (!std::filesystem::exists(p / "model.safetensors"))
    ADD_FAILURE() << p << " not found: run tests/reference/build_all.py (scripts/test.sh does)";
  return p;
}

// A copy of the tiny checkpoint in `dir`, whose files a test may then break.
std::filesystem::path copy_checkpoint(const test::TempDir& dir) {
  const auto out = dir.path() / "ckpt";
  std::filesystem::create_directories(out);
  for (const char* f : {"config.json", "tokenizer.json", "model.safetensors"})
    std::filesystem::copy_file(tiny_checkpoint() / f, out / f);
  return out;
}

// The manifests of tiny_a's bundles are named after its 12,473,024 stored parameters (docs/bundle.md).
const std::string kTinyText = "qwen3vl-12m-text-512.json", kTinyVlm = "qwen3vl-12m-vlm-512.json";

std::string quoted(const std::filesystem::path& p) {
  std::string out = "'";
  out += p.string();
  out += '\'';
  return out;
}

// The default plan of the tiny checkpoint, as JSON, for tests to edit.
nlohmann::json plan_of(const std::filesystem::path& ckpt) {
  const ToolRun r = run_tool("qhx_generate", "--print-plan -m " + quoted(ckpt), "");
  EXPECT_EQ(r.status, 0) << r.err;
  return nlohmann::json::parse(r.out);
}

void expect_generate_error(const std::string& args, std::initializer_list<std::string> fragments) {
  const ToolRun r = run_tool("qhx_generate", args, "");
  EXPECT_NE(r.status, 0) << args;
  EXPECT_LT(r.status, 128) << "crashed: " << args << "\n" << r.err;  // a signal is a crash
  for (const auto& f : fragments)
    EXPECT_NE(r.err.find(f), std::string::npos) << args << "\n" << r.err << "\nlacks: " << f;
}

TEST(QhxGenerate, GeneratesGreedyJson) {
  const ToolRun r = run_tool("qhx_generate", "-m " + quoted(tiny_checkpoint()) + " -p Hi -n 4 --temp 0 --json", "");
  ASSERT_EQ(r.status, 0) << r.err;
  std::istringstream lines(r.out);
  std::string line, last;
  while (std::getline(lines, line))
    if (!line.empty()) last = line;
  const auto j = nlohmann::json::parse(last);
  EXPECT_EQ(j["tokens"].size(), 4u);
  EXPECT_EQ(j["prompt_tokens"], (std::vector<int>{151644, 872, 198, 13048, 151645, 198, 151644, 77091, 198}));
  for (const char* k : {"load_ms", "prefill_ms", "ttft_ms", "decode_ms_per_token"})
    EXPECT_TRUE(j["timings"].contains(k)) << k;
  EXPECT_GT(j["peak_rss_mb"].get<double>(), 0.0);
  EXPECT_NE(r.err.find("ms/token"), std::string::npos);
}

TEST(QhxGenerate, SeedPositionalForm) {
  test::TempDir dir;
  const auto manifest = dir.path() / "plan.json";
  std::ofstream(manifest) << plan_of(tiny_checkpoint()).dump();
  const ToolRun ok = run_tool("qhx_generate", quoted(manifest) + " cpu - " + quoted(dir.path()) + " 3 Hello", "");
  EXPECT_EQ(ok.status, 0) << ok.err;
  // A CPU plan given the QNN libraries runs on the CPU and says so (nothing of QNN is loaded).
  const ToolRun cpu_plan = run_tool(
      "qhx_generate", quoted(manifest) + " libQnnHtp.so libQnnSystem.so " + quoted(dir.path()) + " 3 Hello", "");
  EXPECT_EQ(cpu_plan.status, 0) << cpu_plan.err;
  EXPECT_NE(cpu_plan.err.find("runs on the CPU"), std::string::npos) << cpu_plan.err;
  EXPECT_EQ(cpu_plan.out, ok.out);
  expect_generate_error(quoted(manifest) + " cpu - . three Hello", {"MAX_TOKENS", "three"});
}

TEST(QhxGenerate, MissingAndCorruptWeights) {
  test::TempDir dir;
  const auto ckpt = copy_checkpoint(dir);
  const std::string weights = test::read_file(ckpt / "model.safetensors");
  std::filesystem::remove(ckpt / "model.safetensors");
  expect_generate_error("-m " + quoted(ckpt) + " -p Hi -n 2", {"model.safetensors"});
  std::ofstream(ckpt / "model.safetensors", std::ios::binary) << weights.substr(0, weights.size() / 2);
  expect_generate_error("-m " + quoted(ckpt) + " -p Hi -n 2", {"model.safetensors", "past the end"});
  std::ofstream(ckpt / "model.safetensors", std::ios::binary) << "\x10\x00\x00\x00\x00\x00\x00\x00{not json}    ";
  expect_generate_error("-m " + quoted(ckpt) + " -p Hi -n 2", {"model.safetensors"});
}

TEST(QhxGenerate, UnsupportedConfigValue) {
  test::TempDir dir;
  const auto ckpt = copy_checkpoint(dir);
  auto config = nlohmann::json::parse(test::read_file(ckpt / "config.json"));
  config["text_config"]["hidden_act"] = "gelu";
  std::ofstream(ckpt / "config.json") << config.dump();
  expect_generate_error("-m " + quoted(ckpt) + " -p Hi -n 2", {"config.json", "text_config.hidden_act"});
  config["text_config"]["hidden_act"] = "silu";
  config["text_config"]["intermediate_size"] = 193;  // valid, but no longer matches the weights
  std::ofstream(ckpt / "config.json") << config.dump();
  expect_generate_error("-m " + quoted(ckpt) + " -p Hi -n 2", {"shape"});
}

TEST(QhxGenerate, PromptAndBudgetMustFitTheContext) {
  test::TempDir dir;
  auto plan = plan_of(tiny_checkpoint());
  plan["context_length"] = 16;
  const auto manifest = dir.path() / "plan.json";
  std::ofstream(manifest) << plan.dump();
  expect_generate_error("-m " + quoted(manifest) + " -p 'a b c d e f g h i j k l m n o p q r' -n 1",
                        {"does not fit the context of 16"});
  expect_generate_error("-m " + quoted(manifest) + " -p Hi -n 12", {"exceeds the context of 16"});
  expect_generate_error("-m " + quoted(tiny_checkpoint()) + " -p Hi -n 100000", {"context length"});
}

TEST(QhxGenerate, BadFlagsAndManifests) {
  expect_generate_error("-m " + quoted(tiny_checkpoint()) + " -p Hi --no-such-flag", {"no-such-flag"});
  expect_generate_error("-m " + quoted(tiny_checkpoint()) + " -p Hi -n abc", {"abc"});
  expect_generate_error("-m " + quoted(tiny_checkpoint()) + " -p Hi --top-p 2", {"top_p"});
  expect_generate_error("-p Hi", {"no model"});
  expect_generate_error("-m /nonexistent/plan.json -p Hi", {"/nonexistent/plan.json"});
  test::TempDir dir;
  auto plan = plan_of(tiny_checkpoint());
  plan["stages"][2]["op"] = "teleport";
  const auto manifest = dir.path() / "plan.json";
  std::ofstream(manifest) << plan.dump();
  expect_generate_error("-m " + quoted(manifest) + " -p Hi", {"stages[2].op", "unknown stage \"teleport\""});
  std::ofstream(manifest) << "{\"qhexrt_manifest\": 1, ";
  expect_generate_error("-m " + quoted(manifest) + " -p Hi", {"plan.json", "not valid JSON"});
  // Graph keys with values outside their sets name the graph, the key and the value.
  for (const auto& [key, value] : {std::pair{"kv_cache", "bf16"}, std::pair{"activations", "int4"}}) {
    auto bad = plan_of(tiny_checkpoint());
    bad["graphs"]["llm"][key] = value;
    std::ofstream(manifest, std::ios::trunc) << bad.dump();
    expect_generate_error("-m " + quoted(manifest) + " -p Hi", {"llm", key, value});
  }
}

}  // namespace
}  // namespace qhx

namespace qhx {
namespace {

// A w8 bundle of the tiny checkpoint, exported by qhx_export into `dir`.
std::filesystem::path export_tiny_bundle(const test::TempDir& dir) {
  const auto out = dir.path() / "bundle";
  const ToolRun r =
      run_tool("qhx_export", "--hf " + quoted(tiny_checkpoint()) + " --out " + quoted(out) + " --weights w8 -q", "");
  EXPECT_EQ(r.status, 0) << r.err;
  return out;
}

TEST(QhxExport, BundleRunsAndVerifies) {
  test::TempDir dir;
  const auto out = dir.path() / "bundle";
  const ToolRun r = run_tool(
      "qhx_export", "--hf " + quoted(tiny_checkpoint()) + " --out " + quoted(out) + " --weights w8 -q --verify", "");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("verify: passed"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("llm_shared_512.bin"), std::string::npos) << r.out;
  const ToolRun g = run_tool("qhx_generate", "-m " + quoted(out / kTinyText) + " -p Hi -n 3 --json", "");
  EXPECT_EQ(g.status, 0) << g.err;
  // A quantized bundle's decoder keeps its KV cache in f16 and computes on the int8 path.
  for (const std::string& m : {kTinyText, kTinyVlm}) {
    const auto plan = nlohmann::json::parse(std::ifstream(out / m));
    EXPECT_EQ(plan.at("qhexrt_manifest"), kManifestVersion) << m;
    EXPECT_EQ(plan.at("graphs").at("llm").at("kv_cache"), "f16") << m;
    EXPECT_EQ(plan.at("graphs").at("llm").at("activations"), "int8") << m;
  }
}

TEST(QhxExport, BadArguments) {
  test::TempDir dir;
  ToolRun r = run_tool("qhx_export", "--hf /nonexistent --out " + quoted(dir.path() / "b"), "");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("/nonexistent"), std::string::npos) << r.err;
  r = run_tool("qhx_export",
               "--hf " + quoted(tiny_checkpoint()) + " --out " + quoted(dir.path() / "b") + " --weights w3", "");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("w3"), std::string::npos) << r.err;
  r = run_tool("qhx_export",
               "--hf " + quoted(tiny_checkpoint()) + " --out " + quoted(dir.path() / "b") + " --lm-head w2", "");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("w2"), std::string::npos) << r.err;
  // A quantized lm-head in a float bundle is refused, naming both flags.
  r = run_tool(
      "qhx_export",
      "--hf " + quoted(tiny_checkpoint()) + " --out " + quoted(dir.path() / "b") + " --weights f16 --lm-head w4 -q",
      "");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--lm-head w4 with --weights f16"), std::string::npos) << r.err;
}

TEST(QhxExport, W4LmHead) {
  // --lm-head w4 stores the lm-head as w4 (U8 nibbles with group scales) and the bundle runs.
  test::TempDir dir;
  const auto out = dir.path() / "bundle";
  for (const char* head : {"w8", "w4"}) {
    SCOPED_TRACE(head);
    std::filesystem::remove_all(out);
    const ToolRun r = run_tool(
        "qhx_export",
        "--hf " + quoted(tiny_checkpoint()) + " --out " + quoted(out) + " --weights w4 --lm-head " + head + " -q", "");
    ASSERT_EQ(r.status, 0) << r.err;
    const auto file = SafetensorsFile::open(out / "lmhead_wqo.bin");
    if (std::string(head) == "w4")
      EXPECT_EQ(file.get("lm_head.weight").dtype, DType::U8);
    else  // w8: the panel form (docs/bundle.md)
      EXPECT_EQ(file.get("lm_head.weight.panels").dtype, DType::I8);
    const ToolRun g = run_tool("qhx_generate", "-m " + quoted(out / kTinyText) + " -p Hi -n 3 --json", "");
    EXPECT_EQ(g.status, 0) << g.err;
  }
}

TEST(QhxGenerate, CorruptBundles) {
  test::TempDir dir;
  const auto bundle = export_tiny_bundle(dir);
  const auto text = quoted(bundle / kTinyText);
  const auto llm = bundle / "llm_shared_512.bin";
  const std::string good = test::read_file(llm);

  std::ofstream(llm, std::ios::binary) << good.substr(0, good.size() / 2);  // truncated
  expect_generate_error("-m " + text + " -p Hi -n 2", {"llm_shared_512.bin", "past the end"});
  std::ofstream(llm, std::ios::binary) << "garbage, not a bundle";  // corrupt
  expect_generate_error("-m " + text + " -p Hi -n 2", {"llm_shared_512.bin"});

  std::string newer = good;  // the same bytes, claiming a format version past this build's
  static_assert(kBundleFormatVersion < 9);
  const auto at = newer.find("\"qhexrt_bundle\":\"");
  ASSERT_NE(at, std::string::npos);
  newer[at + 17] = '9';
  std::ofstream(llm, std::ios::binary) << newer;
  expect_generate_error("-m " + text + " -p Hi -n 2", {"llm_shared_512.bin", "version 9", "newer QHexRT"});

  std::ofstream(llm, std::ios::binary) << good;
  std::filesystem::remove(bundle / "lmhead_wqo.bin");  // a file the manifest names is missing
  expect_generate_error("-m " + text + " -p Hi -n 2", {"lmhead_wqo.bin"});
}

TEST(QhxGenerate, BundleShapesMustMatchTheConfig) {
  test::TempDir dir;
  const auto bundle = export_tiny_bundle(dir);
  auto config = nlohmann::json::parse(test::read_file(bundle / "config.json"));
  config["text_config"]["intermediate_size"] = 256;
  std::ofstream(bundle / "config.json") << config.dump();
  expect_generate_error("-m " + quoted(bundle / kTinyText) + " -p Hi -n 2", {"shape", "mlp"});
}

TEST(QhxGenerate, ImageErrors) {
  test::TempDir dir;
  const auto bundle = export_tiny_bundle(dir);
  const auto vlm = quoted(bundle / kTinyVlm);
  const auto not_image = dir.write("notes.png", "this is text, not a picture\n");
  expect_generate_error("-m " + vlm + " -p Hi -n 2 -i " + quoted(not_image), {"notes.png"});
  expect_generate_error("-m " + vlm + " -p Hi -n 2 -i /nonexistent/photo.jpg", {"/nonexistent/photo.jpg"});
  // An image given to the text-only manifest.
  const auto ppm = dir.write("tiny.ppm", std::string("P6\n2 2\n255\n") + std::string(12, '\x80'));
  expect_generate_error("-m " + quoted(bundle / kTinyText) + " -p Hi -n 2 -i " + quoted(ppm), {"no image stages"});
  // A header claiming 100,000 x 100,000 pixels is refused before decoding.
  const auto huge = dir.write("huge.ppm", "P6\n100000 100000\n255\n" + std::string(64, '\0'));
  expect_generate_error("-m " + vlm + " -p Hi -n 2 -i " + quoted(huge), {"huge.ppm"});
  const auto empty = dir.write("empty.ppm", "P6\n0 0\n255\n");
  expect_generate_error("-m " + vlm + " -p Hi -n 2 -i " + quoted(empty), {"empty.ppm"});
  // More <image> markers than images.
  expect_generate_error("-m " + vlm + " -p '<image> and <image>' -n 2 -i " + quoted(ppm), {"<image> markers"});
  // Raw prompts carry the vision tokens themselves: their image pads must match the images.
  expect_generate_error("-m " + vlm + " --raw -p Hi -n 2 -i " + quoted(ppm), {"fewer image placeholders than images"});
  const std::string two_pads =
      "'<|vision_start|><|image_pad|><|vision_end|><|vision_start|><|image_pad|><|vision_end|>'";
  expect_generate_error("-m " + vlm + " --raw -p " + two_pads + " -n 2 -i " + quoted(ppm),
                        {"more image placeholders than images"});
}

}  // namespace
}  // namespace qhx
