// The tools' command-line parser: a narrow face of CLI11 (Debian's libcli11-dev).
//
// Why a face and not CLI11 itself: CLI11 2.1 is header-only with fully inline virtual
// classes, so every object that includes it compiles its whole parser again (~9 s per
// object at -O3, ~25 s under ASan; 11 tools and benchmarks did). Here only cli.cpp
// includes it. The names follow CLI11's, so a tool reads as it would with CLI11, and
// the help text, error messages and exit codes are CLI11's own.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

namespace qhx_cli {

// A check of an option's value: one of the constants and functions below, given to
// Option::check.
struct Check {
  enum class Kind { positive, non_negative, member, range, custom };
  explicit Check(Kind k) : kind(k) {}
  // `fn` returns "" when the value is good, else the message (it may normalise the value).
  Check(std::function<std::string(std::string&)> fn, std::string what)
      : kind(Kind::custom), custom(std::move(fn)), description(std::move(what)) {}

  Kind kind;
  std::vector<std::string> members;  // member
  double lo = 0, hi = 0;             // range
  bool integral = false;             // a range of integers prints as one
  std::function<std::string(std::string&)> custom;
  std::string description;
};

inline const Check PositiveNumber{Check::Kind::positive};
inline const Check NonNegativeNumber{Check::Kind::non_negative};
Check IsMember(std::vector<std::string> members);
Check RangeOf(double lo, double hi, bool integral);
template <class T>
Check Range(T lo, T hi) {
  return RangeOf(static_cast<double>(lo), static_cast<double>(hi), std::is_integral_v<T>);
}

class Option {
 public:
  Option* check(const Check& c);
  Option* required(bool value = true);
  Option* excludes(Option* other);
  // Makes this option required when `other` is not given (checked after parsing).
  Option* required_unless(Option* other);
  Option* type_name(const std::string& name);
  Option* delimiter(char sep);
  std::size_t count() const;
  explicit operator bool() const { return count() > 0; }

 private:
  friend class App;
  explicit Option(void* impl) : impl_(impl) {}
  void* impl_;                        // the CLI::Option, owned by the App
  Option* pending_unless_ = nullptr;  // required_unless's other option
};

class App {
 public:
  explicit App(std::string description);
  ~App();
  App(const App&) = delete;
  App& operator=(const App&) = delete;

  // T is one of the types cli.cpp instantiates (strings, integers, floats, their
  // std::optional and std::vector forms); another type fails to link.
  template <class T>
  Option* add_option(const std::string& name, T& target, const std::string& help = "");
  Option* add_flag(const std::string& name, bool& target, const std::string& help = "");

  // Parses the command line. Returns -1 when the program should go on; otherwise the
  // exit code after CLI11 printed the help (0) or the error (non-zero).
  int parse(int argc, const char* const* argv);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace qhx_cli

// For main(): parse, or return the exit code (help: 0; a bad command line: CLI11's code).
#define QHX_CLI_PARSE(app, argc, argv)                   \
  do {                                                   \
    const int qhx_cli_rc_ = (app).parse((argc), (argv)); \
    if (qhx_cli_rc_ >= 0) return qhx_cli_rc_;            \
  } while (false)
