// Jinja's built-in filters and tests, Python's str/dict methods and the
// globals of transformers' environment, over jinja::Value.
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chat/jinja_value.hpp"

namespace qhx::chat::jinja {

bool has_filter(std::string_view name);
bool has_test(std::string_view name);
Value apply_filter(const std::string& name, const Value& input, const CallArgs& args);
bool apply_test(const std::string& name, const Value& input, const CallArgs& args);

// range, namespace, raise_exception, strftime_now; undefined for any other name.
Value global(const std::string& name);

// Binds call arguments to named parameters as Python does (positional first,
// then keywords); fails on too many, unknown or repeated arguments.
class Args {
 public:
  Args(const CallArgs& call, std::string_view fn, std::initializer_list<std::string_view> params);
  const Value* get(std::size_t i) const { return bound_[i] ? &*bound_[i] : nullptr; }
  bool has(std::size_t i) const { return bound_[i].has_value(); }
  std::string str(std::size_t i, std::string_view dflt) const;  // str() of the argument
  std::optional<std::string> opt_str(std::size_t i) const;      // absent or None: nullopt
  std::int64_t integer(std::size_t i, std::int64_t dflt) const;
  bool flag(std::size_t i, bool dflt) const;  // truthiness

 private:
  std::string_view fn_;
  std::vector<std::string_view> names_;
  std::vector<std::optional<Value>> bound_;
};

// Attribute path lookup as Jinja's make_attrgetter: "a.b.0" -> x["a"]["b"][0].
Value get_path(const Value& v, const std::string& path);

}  // namespace qhx::chat::jinja
