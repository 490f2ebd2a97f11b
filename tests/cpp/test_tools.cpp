// Runs the command-line tools as a user would (under the sanitizers in the
// sanitizer build) and checks their output, exit status and error messages.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <array>
#include <cstdio>

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
  const std::string cmd = (test::bin_dir() / tool).string() + " " + args + " <" +
                          in.string() + " >" + out.string() + " 2>" + err.string();
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
