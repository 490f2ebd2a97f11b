// The tools' command-line face of CLI11 (tools/cli): each check refuses what it should
// and keeps what it should, and parse() tells main() whether to go on.
#include <gtest/gtest.h>

#include <optional>
#include <tuple>
#include <string>
#include <vector>

#include "cli/cli.hpp"

namespace {

int parse(qhx_cli::App& app, std::vector<std::string> args) {
  args.insert(args.begin(), "prog");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  return app.parse(static_cast<int>(argv.size()), argv.data());
}

TEST(Cli, ValuesOfEachKind) {
  qhx_cli::App app{"test"};
  std::string s;
  int i = 0;
  std::optional<float> f;
  std::optional<int> unset;
  std::vector<std::string> list;
  std::vector<int> ids;
  bool flag = false;
  app.add_option("-s,--str", s);
  app.add_option("--int", i);
  app.add_option("--float", f);
  app.add_option("--unset", unset);
  app.add_option("--item", list);
  app.add_option("--ids", ids)->delimiter(',');
  auto* fl = app.add_flag("--flag", flag);
  ASSERT_EQ(parse(app, {"-s", "a b", "--int", "-3", "--float", "0.5", "--item", "x", "--item", "y", "--ids", "1,2,3",
                        "--flag"}),
            -1);
  EXPECT_EQ(s, "a b");
  EXPECT_EQ(i, -3);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(*f, 0.5f);
  EXPECT_FALSE(unset.has_value());
  EXPECT_EQ(list, (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(ids, (std::vector<int>{1, 2, 3}));
  EXPECT_TRUE(flag);
  EXPECT_TRUE(static_cast<bool>(*fl));
  EXPECT_EQ(fl->count(), 1u);
}

TEST(Cli, HelpReturnsZeroAndUnknownOptionsFail) {
  qhx_cli::App a{"test"};
  EXPECT_EQ(parse(a, {"--help"}), 0);
  qhx_cli::App b{"test"};
  const int rc = parse(b, {"--nope"});
  EXPECT_GT(rc, 0);
}

TEST(Cli, NumberChecks) {
  for (const auto& [arg, positive_ok, non_negative_ok] :
       std::vector<std::tuple<std::string, bool, bool>>{{"1", true, true}, {"0", false, true}, {"-1", false, false}}) {
    int p = 0, n = 0;
    qhx_cli::App a{"test"};
    a.add_option("--p", p)->check(qhx_cli::PositiveNumber);
    EXPECT_EQ(parse(a, {"--p", arg}) == -1, positive_ok) << arg;
    qhx_cli::App b{"test"};
    b.add_option("--n", n)->check(qhx_cli::NonNegativeNumber);
    EXPECT_EQ(parse(b, {"--n", arg}) == -1, non_negative_ok) << arg;
  }
}

TEST(Cli, RangeIsInclusive) {
  for (const auto& [arg, ok] : std::vector<std::pair<std::string, bool>>{
           {"2", true}, {"1048576", true}, {"1", false}, {"1048577", false}, {"x", false}}) {
    int v = 0;
    qhx_cli::App a{"test"};
    a.add_option("--v", v)->check(qhx_cli::Range(2, 1 << 20));
    EXPECT_EQ(parse(a, {"--v", arg}) == -1, ok) << arg;
  }
  double d = 0;
  qhx_cli::App a{"test"};
  a.add_option("--d", d)->check(qhx_cli::Range(0.0, 1.0));
  EXPECT_EQ(parse(a, {"--d", "0.25"}), -1);
  EXPECT_EQ(d, 0.25);
}

TEST(Cli, MembersAndCustomChecks) {
  std::string m, c;
  qhx_cli::App a{"test"};
  a.add_option("--m", m)->check(qhx_cli::IsMember({"fixed", "native"}));
  a.add_option("--c", c)->check(qhx_cli::Check(
      [](std::string& v) { return v.size() == 3 ? std::string() : std::string("three letters"); }, "ABC"));
  EXPECT_EQ(parse(a, {"--m", "native", "--c", "abc"}), -1);
  EXPECT_EQ(m, "native");
  EXPECT_EQ(c, "abc");
  qhx_cli::App b{"test"};
  b.add_option("--m", m)->check(qhx_cli::IsMember({"fixed", "native"}));
  EXPECT_GT(parse(b, {"--m", "other"}), 0);
  qhx_cli::App d{"test"};
  d.add_option("--c", c)->check(qhx_cli::Check([](std::string&) { return std::string("bad"); }, "X"));
  EXPECT_GT(parse(d, {"--c", "abc"}), 0);
}

TEST(Cli, RequiredExcludesAndRequiredUnless) {
  const auto make = [](qhx_cli::App& app, std::string& hf, std::string& check, std::string& need) {
    auto* hf_opt = app.add_option("--hf", hf);
    auto* check_opt = app.add_option("--check", check)->excludes(hf_opt);
    hf_opt->required_unless(check_opt);
    app.add_option("--need", need)->required();
  };
  std::string hf, check, need;
  {
    qhx_cli::App a{"test"};
    make(a, hf, check, need);
    EXPECT_EQ(parse(a, {"--hf", "x", "--need", "y"}), -1);
  }
  {
    qhx_cli::App a{"test"};
    make(a, hf, check, need);
    EXPECT_EQ(parse(a, {"--check", "x", "--need", "y"}), -1);
  }
  {
    qhx_cli::App a{"test"};
    make(a, hf, check, need);
    EXPECT_GT(parse(a, {"--need", "y"}), 0);  // neither --hf nor --check
  }
  {
    qhx_cli::App a{"test"};
    make(a, hf, check, need);
    EXPECT_GT(parse(a, {"--hf", "x", "--check", "y", "--need", "z"}), 0);  // excluded
  }
  {
    qhx_cli::App a{"test"};
    make(a, hf, check, need);
    EXPECT_GT(parse(a, {"--hf", "x"}), 0);  // --need missing
  }
}

}  // namespace
