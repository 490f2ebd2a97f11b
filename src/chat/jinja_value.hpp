// Run-time values of the renderer and the Python semantics Jinja gives them:
// truthiness, str(), ==, <, `in`, iteration, attribute and item lookup.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "chat/jinja_ast.hpp"
#include "qhexrt/error.hpp"

namespace qhx::chat::jinja {

// What a built-in throws: a message without a location, which the renderer
// prefixes with the template position of the expression being evaluated.
struct Fault {
  std::string message;
};
template <typename... Args>
[[noreturn]] void fault(Args&&... args) {
  throw Fault{qhx::cat(std::forward<Args>(args)...)};
}

class Value;
struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
};

struct Namespace;
struct Callable {
  std::string name;
  std::function<Value(const CallArgs&)> fn;
};

class Value {
 public:
  enum class Kind { Undefined, Data, Namespace, Callable };

  Value() = default;  // undefined
  static Value undefined(std::string why) {
    Value v;
    v.why_ = std::move(why);
    return v;
  }
  static Value of(Json j);
  // A value inside `owner` (which keeps it alive): subscripts share, not copy.
  static Value inside(std::shared_ptr<const Json> owner, const Json* at);
  static Value of_namespace(std::shared_ptr<Namespace> ns);
  static Value of_callable(std::string name, std::function<Value(const CallArgs&)> fn);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_data() const { return kind_ == Kind::Data; }
  const Json& data() const { return *at_; }  // only when is_data()
  Namespace& ns() const { return *ns_; }
  const Callable& callable() const { return *fn_; }
  // Why it is undefined, as Jinja words it ("'x' is undefined").
  const std::string& why() const { return why_; }
  [[noreturn]] void fail_undefined() const;

  bool is_string() const { return is_data() && at_->is_string(); }
  const std::string& str_ref() const { return at_->get_ref<const std::string&>(); }
  bool is_number() const { return is_data() && (at_->is_number() || at_->is_boolean()); }
  bool is_int() const { return is_data() && (at_->is_number_integer() || at_->is_boolean()); }
  std::int64_t as_int() const;  // ints and bools
  double as_double() const;     // any number or bool
  bool is_list() const { return is_data() && at_->is_array(); }
  bool is_dict() const { return is_data() && at_->is_object(); }
  bool is_none() const { return is_data() && at_->is_null(); }

  // A child of a list or dict value, sharing its storage.
  Value child(const Json& c) const { return inside(owner_, &c); }
  // The JSON for this value (copied); a namespace, function or undefined cannot be one.
  Json to_json() const;

 private:
  Kind kind_ = Kind::Undefined;
  std::shared_ptr<const Json> owner_;
  const Json* at_ = nullptr;
  std::shared_ptr<Namespace> ns_;
  std::shared_ptr<const Callable> fn_;
  std::string why_ = "undefined value";
};

struct Namespace {
  std::vector<std::pair<std::string, Value>> attrs;  // in assignment order, as Python prints them
  Value* find(std::string_view key);
};

bool truthy(const Value& v);
std::string type_name(const Value& v);  // Python's: 'str', 'int', 'list', 'dict', 'NoneType'...
std::string to_str(const Value& v);     // str(v); "" for undefined
std::string repr(const Json& j);        // repr(v) for JSON data
bool equal(const Value& a, const Value& b);
// a < b with Python's rules; fails for unordered types.
bool less(const Value& a, const Value& b);
bool contains(const Value& haystack, const Value& needle);  // needle in haystack
std::vector<Value> iterate(const Value& v);                 // for x in v

// Jinja's getattr (attribute, then item) and getitem (item, then attribute).
Value get_attr(const Value& obj, const std::string& name);
Value get_item(const Value& obj, const Value& key);

// Python's json.dumps(v, ensure_ascii, indent, separators, sort_keys).
struct DumpOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // absent: one line
  std::string item_sep = ", ";
  std::string key_sep = ": ";
  bool sort_keys = false;
};
std::string dumps(const Json& j, const DumpOptions& opt);

}  // namespace qhx::chat::jinja

namespace qhx::chat::jinja {

// Python's + - * / // % ** on Jinja values (ints stay exact; overflow fails).
Value binary_op(std::string_view op, const Value& a, const Value& b);
Value negate(const Value& v);

}  // namespace qhx::chat::jinja
