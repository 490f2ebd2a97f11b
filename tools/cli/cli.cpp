// The one object that compiles CLI11 (see cli.hpp for why).
#include "cli/cli.hpp"

#include <cstdint>
#include <optional>
#include <utility>

#include <CLI/CLI.hpp>

namespace qhx_cli {

namespace {
CLI::Option* raw(void* p) { return static_cast<CLI::Option*>(p); }
}  // namespace

Check IsMember(std::vector<std::string> members) {
  Check c(Check::Kind::member);
  c.members = std::move(members);
  return c;
}

Check RangeOf(double lo, double hi, bool integral) {
  Check c(Check::Kind::range);
  c.lo = lo;
  c.hi = hi;
  c.integral = integral;
  return c;
}

Option* Option::check(const Check& c) {
  CLI::Option* o = raw(impl_);
  switch (c.kind) {
    case Check::Kind::positive: o->check(CLI::PositiveNumber); break;
    case Check::Kind::non_negative: o->check(CLI::NonNegativeNumber); break;
    case Check::Kind::member: o->check(CLI::IsMember(c.members)); break;
    case Check::Kind::range:
      if (c.integral)
        o->check(CLI::Range(static_cast<long long>(c.lo), static_cast<long long>(c.hi)));
      else
        o->check(CLI::Range(c.lo, c.hi));
      break;
    case Check::Kind::custom: o->check(CLI::Validator(c.custom, c.description)); break;
  }
  return this;
}

Option* Option::required(bool value) {
  raw(impl_)->required(value);
  return this;
}

Option* Option::excludes(Option* other) {
  raw(impl_)->excludes(raw(other->impl_));
  return this;
}

Option* Option::type_name(const std::string& name) {
  raw(impl_)->type_name(name);
  return this;
}

Option* Option::delimiter(char sep) {
  raw(impl_)->delimiter(sep);
  return this;
}

std::size_t Option::count() const { return raw(impl_)->count(); }

struct App::Impl {
  CLI::App app;
  std::vector<std::unique_ptr<Option>> options;

  explicit Impl(std::string description) : app(std::move(description)) {}
  Option* keep(CLI::Option* o) {
    options.push_back(std::unique_ptr<Option>(new Option(o)));
    return options.back().get();
  }
};

Option* Option::required_unless(Option* other) {
  // App::parse checks it once CLI11 has parsed.
  pending_unless_ = other;
  return this;
}

App::App(std::string description) : impl_(std::make_unique<Impl>(std::move(description))) {}
App::~App() = default;

template <class T>
Option* App::add_option(const std::string& name, T& target, const std::string& help) {
  return impl_->keep(impl_->app.add_option(name, target, help));
}

Option* App::add_flag(const std::string& name, bool& target, const std::string& help) {
  return impl_->keep(impl_->app.add_flag(name, target, help));
}

int App::parse(int argc, const char* const* argv) {
  try {
    impl_->app.parse(argc, argv);
    for (const auto& o : impl_->options) {
      if (o->pending_unless_ != nullptr && o->count() == 0 && o->pending_unless_->count() == 0)
        throw CLI::RequiredError(raw(o->impl_)->get_name());
    }
  } catch (const CLI::ParseError& e) {
    return impl_->app.exit(e);
  }
  return -1;
}

#define QHX_CLI_TYPE(T) template Option* App::add_option<T>(const std::string&, T&, const std::string&);
QHX_CLI_TYPE(std::string)
QHX_CLI_TYPE(int)
QHX_CLI_TYPE(unsigned)
QHX_CLI_TYPE(long)
QHX_CLI_TYPE(unsigned long)
QHX_CLI_TYPE(long long)
QHX_CLI_TYPE(unsigned long long)
QHX_CLI_TYPE(float)
QHX_CLI_TYPE(double)
QHX_CLI_TYPE(std::optional<std::string>)
QHX_CLI_TYPE(std::optional<int>)
QHX_CLI_TYPE(std::optional<long>)
QHX_CLI_TYPE(std::optional<unsigned long>)
QHX_CLI_TYPE(std::optional<float>)
QHX_CLI_TYPE(std::optional<double>)
QHX_CLI_TYPE(std::vector<std::string>)
QHX_CLI_TYPE(std::vector<int>)
#undef QHX_CLI_TYPE

}  // namespace qhx_cli
