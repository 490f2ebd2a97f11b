// Jinja's built-in filters and tests (jinja2/filters.py, jinja2/tests.py) and
// transformers' tojson (json.dumps with ensure_ascii=False).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "chat/jinja_builtins.hpp"
#include "chat/py_string.hpp"

namespace qhx::chat::jinja {
namespace {

constexpr std::array<std::string_view, 30> kFilters = {
    "length",  "count",   "first",  "last",   "join",   "upper",  "lower",      "title",      "capitalize", "trim",
    "replace", "default", "d",      "string", "int",    "float",  "list",       "items",      "reverse",    "tojson",
    "safe",    "indent",  "unique", "map",    "select", "reject", "selectattr", "rejectattr", "abs",        "round"};

constexpr std::array<std::string_view, 34> kTests = {
    "defined",  "undefined",   "none", "string", "number",   "integer",  "float", "mapping",     "sequence",
    "iterable", "boolean",     "true", "false",  "callable", "even",     "odd",   "divisibleby", "eq",
    "equalto",  "==",          "ne",   "!=",     "lt",       "lessthan", "<",     "le",          "<=",
    "gt",       "greaterthan", ">",    "ge",     ">=",       "in",       "sameas"};

CallArgs shift(const CallArgs& args, std::size_t n) {
  CallArgs rest;
  rest.pos.assign(args.pos.begin() + static_cast<std::ptrdiff_t>(std::min(n, args.pos.size())), args.pos.end());
  rest.kw = args.kw;
  return rest;
}

Json list_of(const std::vector<Value>& items) {
  Json out = Json::array();
  for (const Value& v : items) out.push_back(v.to_json());
  return out;
}

// Python's float(str): optional sign, digits with an optional fraction and
// exponent (single underscores between digits), or inf/infinity/nan; spaces around.
std::optional<double> parse_python_float(const std::string& text) {
  std::string s = py::strip(text, std::nullopt, true, true);
  std::string lower = py::lower(s);
  std::size_t i = lower[0] == '+' || lower[0] == '-' ? 1 : 0;
  const std::string body = lower.substr(std::min(i, lower.size()));
  if (body == "inf" || body == "infinity" || body == "nan") {
    const double v = body == "nan" ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
    return lower[0] == '-' ? -v : v;
  }
  std::string clean;
  bool digits = false, dot = false, exp = false;
  for (std::size_t k = 0; k < s.size(); ++k) {
    const char c = s[k];
    if (std::isdigit(static_cast<unsigned char>(c))) {
      digits = true;
    } else if (c == '_' && k > 0 && std::isdigit(static_cast<unsigned char>(s[k - 1])) && k + 1 < s.size() &&
               std::isdigit(static_cast<unsigned char>(s[k + 1]))) {
      continue;
    } else if (c == '.' && !dot && !exp) {
      dot = true;
    } else if ((c == 'e' || c == 'E') && digits && !exp) {
      exp = true;
      digits = false;
      if (k + 1 < s.size() && (s[k + 1] == '+' || s[k + 1] == '-')) clean += s[k++];
    } else if ((c == '+' || c == '-') && k == 0) {
    } else {
      return std::nullopt;
    }
    clean += s[k];
  }
  if (!digits) return std::nullopt;
  return std::strtod(clean.c_str(), nullptr);
}

// Python's int(str, base): sign, digits (single underscores between), spaces around.
std::optional<std::int64_t> parse_python_int(const std::string& text, std::int64_t base) {
  std::string s = py::strip(text, std::nullopt, true, true);
  bool neg = false;
  std::size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
  if (base == 16 && s.size() > i + 1 && s[i] == '0' && (s[i + 1] == 'x' || s[i + 1] == 'X')) i += 2;
  std::string digits;
  for (; i < s.size(); ++i) {
    if (s[i] == '_' && !digits.empty() && i + 1 < s.size() && s[i + 1] != '_') continue;
    digits += s[i];
  }
  if (digits.empty() || base < 2 || base > 36) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(digits.c_str(), &end, static_cast<int>(base));
  if (*end != '\0' || errno != 0 || digits[0] == '-' || digits[0] == '+' ||
      std::isspace(static_cast<unsigned char>(digits[0])))
    return std::nullopt;
  return neg ? -v : v;
}

Value to_int(const Value& v, const Value& dflt, std::int64_t base) {
  if (v.is_int()) return Value::of(v.as_int());
  if (v.is_number()) {
    const double d = v.as_double();
    if (std::isnan(d)) return dflt;
    if (std::isinf(d) || std::fabs(d) >= 9.2e18) fault("cannot convert float ", py::float_repr(d), " to integer");
    return Value::of(static_cast<std::int64_t>(d));
  }
  if (v.is_string()) {
    if (auto i = parse_python_int(v.str_ref(), base)) return Value::of(*i);
    if (auto d = parse_python_float(v.str_ref())) return to_int(Value::of(*d), dflt, base);
  }
  return dflt;
}

Value round_value(const Value& v, std::int64_t precision, const std::string& method) {
  if (method != "common" && method != "ceil" && method != "floor") fault("method must be common, ceil or floor");
  if (v.is_undefined()) v.fail_undefined();
  if (!v.is_number()) fault("type ", type_name(v), " doesn't define __round__ method");
  if (method == "common") {
    if (v.is_int() && precision >= 0) return Value::of(v.as_int());
    const double x = v.as_double();
    if (precision < 0) {
      const double scale = std::pow(10.0, static_cast<double>(-precision));
      const double r = std::nearbyint(x / scale) * scale;
      return v.is_int() ? Value::of(static_cast<std::int64_t>(r)) : Value::of(r);
    }
    // printf rounds the exact binary value half to even, as Python's round does.
    char buf[512];
    std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(std::min<std::int64_t>(precision, 300)), x);
    return Value::of(std::strtod(buf, nullptr));
  }
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double scaled = v.as_double() * scale;
  return Value::of((method == "ceil" ? std::ceil(scaled) : std::floor(scaled)) / scale);
}

std::string indent(const std::string& s, const Value* width, bool first, bool blank) {
  const std::string pad = width == nullptr ? "    "
                          : width->is_string()
                              ? width->str_ref()
                              : std::string(static_cast<std::size_t>(std::max<std::int64_t>(0, width->as_int())), ' ');
  // As Jinja: a newline is appended first so a trailing line break survives splitlines.
  const std::vector<std::string> lines = py::splitlines(s + "\n");
  std::string out;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) out += "\n";
    if (i > 0 && (blank || !lines[i].empty())) out += pad;
    out += lines[i];
  }
  return first ? pad + out : out;
}

Value tojson(const Value& v, const Args& a) {
  DumpOptions opt;
  opt.ensure_ascii = a.flag(0, false);
  if (const Value* ind = a.get(1); ind != nullptr && !ind->is_none()) {
    opt.indent = ind->is_string()
                     ? ind->str_ref()
                     : std::string(static_cast<std::size_t>(std::max<std::int64_t>(0, ind->as_int())), ' ');
    opt.item_sep = ",";
  }
  if (const Value* sep = a.get(2); sep != nullptr && !sep->is_none()) {
    if (!sep->is_list() || sep->data().size() != 2 || !sep->data()[0].is_string() || !sep->data()[1].is_string())
      fault("tojson: separators must be a pair of strings");
    opt.item_sep = sep->data()[0].get<std::string>();
    opt.key_sep = sep->data()[1].get<std::string>();
  }
  opt.sort_keys = a.flag(3, false);
  if (v.is_undefined()) fault("Object of type Undefined is not JSON serializable");
  if (!v.is_data()) fault("Object of type ", type_name(v), " is not JSON serializable");
  return Value::of(dumps(v.data(), opt));
}

// select/reject/selectattr/rejectattr: keep the items whose test (or truthiness) is `keep`.
Value select(const Value& input, const CallArgs& args, bool by_attr, bool keep, const char* fn) {
  CallArgs rest = args;
  std::string attr;
  if (by_attr) {
    if (rest.pos.empty()) fault(fn, ": missing the attribute");
    attr = to_str(rest.pos.front());
    rest = shift(rest, 1);
  }
  std::string test;
  if (!rest.pos.empty()) {
    test = to_str(rest.pos.front());
    if (!has_test(test)) fault("unsupported Jinja construct 'test ", test, "'");
    rest = shift(rest, 1);
  }
  Json out = Json::array();
  for (const Value& item : iterate(input)) {
    const Value probe = by_attr ? get_path(item, attr) : item;
    const bool pass = test.empty() ? truthy(probe) : apply_test(test, probe, rest);
    if (pass == keep) out.push_back(item.to_json());
  }
  return Value::of(std::move(out));
}

Value map(const Value& input, const CallArgs& args) {
  Json out = Json::array();
  if (args.pos.empty()) {
    const Args a(args, "map", {"attribute", "default"});
    if (!a.has(0)) fault("map requires a filter name or attribute=");
    const std::string attr = a.str(0, "");
    for (const Value& item : iterate(input)) {
      Value v = get_path(item, attr);
      if (v.is_undefined() && a.has(1)) v = *a.get(1);
      if (v.is_undefined()) fault("map: ", v.why(), " (a list cannot hold undefined values here)");
      out.push_back(v.to_json());
    }
    return Value::of(std::move(out));
  }
  const std::string filter = to_str(args.pos.front());
  if (!has_filter(filter)) fault("unsupported Jinja construct 'filter ", filter, "'");
  const CallArgs rest = shift(args, 1);
  for (const Value& item : iterate(input)) out.push_back(apply_filter(filter, item, rest).to_json());
  return Value::of(std::move(out));
}

Value unique(const Value& input, const Args& a) {
  const bool case_sensitive = a.flag(0, false);
  const std::optional<std::string> attr = a.opt_str(1);
  Json out = Json::array();
  std::vector<Value> seen;
  for (const Value& item : iterate(input)) {
    Value key = attr ? get_path(item, *attr) : item;
    if (!case_sensitive && key.is_string()) key = Value::of(py::lower(key.str_ref()));
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equal(s, key); })) continue;
    seen.push_back(key);
    out.push_back(item.to_json());
  }
  return Value::of(std::move(out));
}

Value length(const Value& v) {
  if (v.is_undefined()) return Value::of(0);
  if (v.is_string()) return Value::of(static_cast<std::int64_t>(py::length(v.str_ref())));
  if (v.is_list() || v.is_dict()) return Value::of(static_cast<std::int64_t>(v.data().size()));
  fault("object of type '", type_name(v), "' has no len()");
}

}  // namespace

bool has_filter(std::string_view name) { return std::find(kFilters.begin(), kFilters.end(), name) != kFilters.end(); }
bool has_test(std::string_view name) { return std::find(kTests.begin(), kTests.end(), name) != kTests.end(); }

Value apply_filter(const std::string& name, const Value& v, const CallArgs& args) {
  if (name == "length" || name == "count") return (void)Args(args, name, {}), length(v);
  if (name == "first" || name == "last") {
    Args(args, name, {});
    const std::vector<Value> items = iterate(v);
    if (items.empty()) return Value::undefined("no " + name + " item, sequence was empty");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "join") {
    const Args a(args, name, {"d", "attribute"});
    const std::string sep = a.str(0, "");
    const std::optional<std::string> attr = a.opt_str(1);
    std::string out;
    bool first = true;
    for (const Value& item : iterate(v)) {
      out += (first ? "" : sep) + to_str(attr ? get_path(item, *attr) : item);
      first = false;
    }
    return Value::of(out);
  }
  if (name == "upper") return (void)Args(args, name, {}), Value::of(py::upper(to_str(v)));
  if (name == "lower") return (void)Args(args, name, {}), Value::of(py::lower(to_str(v)));
  if (name == "title") return (void)Args(args, name, {}), Value::of(py::jinja_title(to_str(v)));
  if (name == "capitalize") return (void)Args(args, name, {}), Value::of(py::capitalize(to_str(v)));
  if (name == "trim") {
    const Args a(args, name, {"chars"});
    return Value::of(py::strip(to_str(v), a.opt_str(0), true, true));
  }
  if (name == "replace") {
    const Args a(args, name, {"old", "new", "count"});
    if (!a.has(0) || !a.has(1)) fault("replace needs old and new");
    const std::int64_t n = a.has(2) && !a.get(2)->is_none() ? a.integer(2, -1) : -1;
    return Value::of(py::replace(to_str(v), a.str(0, ""), a.str(1, ""), n));
  }
  if (name == "default" || name == "d") {
    const Args a(args, name, {"default_value", "boolean"});
    const bool use_default = v.is_undefined() || (a.flag(1, false) && !truthy(v));
    if (!use_default) return v;
    return a.has(0) ? *a.get(0) : Value::of("");
  }
  if (name == "string") return (void)Args(args, name, {}), Value::of(to_str(v));
  if (name == "safe") return (void)Args(args, name, {}), v;
  if (name == "int") {
    const Args a(args, name, {"default", "base"});
    return to_int(v, a.has(0) ? *a.get(0) : Value::of(0), a.integer(1, 10));
  }
  if (name == "float") {
    const Args a(args, name, {"default"});
    if (v.is_number()) return Value::of(v.as_double());
    if (v.is_string())
      if (auto d = parse_python_float(v.str_ref())) return Value::of(*d);
    return a.has(0) ? *a.get(0) : Value::of(0.0);
  }
  if (name == "list") return (void)Args(args, name, {}), Value::of(list_of(iterate(v)));
  if (name == "items") {
    Args(args, name, {});
    if (v.is_undefined()) return Value::of(Json::array());
    if (!v.is_dict()) fault("Can only get item pairs from a mapping.");
    Json out = Json::array();
    for (auto it = v.data().begin(); it != v.data().end(); ++it) out.push_back(Json::array({it.key(), it.value()}));
    return Value::of(std::move(out));
  }
  if (name == "reverse") {
    Args(args, name, {});
    if (v.is_string()) {
      std::u32string u = py::decode(v.str_ref());
      std::reverse(u.begin(), u.end());
      return Value::of(py::encode(u));
    }
    std::vector<Value> items = iterate(v);
    std::reverse(items.begin(), items.end());
    return Value::of(list_of(items));
  }
  if (name == "tojson") return tojson(v, Args(args, name, {"ensure_ascii", "indent", "separators", "sort_keys"}));
  if (name == "indent") {
    const Args a(args, name, {"width", "first", "blank"});
    return Value::of(indent(to_str(v), a.get(0), a.flag(1, false), a.flag(2, false)));
  }
  if (name == "unique") return unique(v, Args(args, name, {"case_sensitive", "attribute"}));
  if (name == "map") return map(v, args);
  if (name == "select") return select(v, args, false, true, "select");
  if (name == "reject") return select(v, args, false, false, "reject");
  if (name == "selectattr") return select(v, args, true, true, "selectattr");
  if (name == "rejectattr") return select(v, args, true, false, "rejectattr");
  if (name == "abs") {
    Args(args, name, {});
    if (v.is_undefined()) v.fail_undefined();
    if (!v.is_number()) fault("bad operand type for abs(): '", type_name(v), "'");
    if (v.is_int()) return v.as_int() < 0 ? negate(v) : Value::of(v.as_int());
    return Value::of(std::fabs(v.as_double()));
  }
  if (name == "round") {
    const Args a(args, name, {"precision", "method"});
    return round_value(v, a.integer(0, 0), a.str(1, "common"));
  }
  fault("unsupported Jinja construct 'filter ", name, "'");
}

bool apply_test(const std::string& name, const Value& v, const CallArgs& args) {
  auto one = [&](const char* param) {
    const Args a(args, name, {param});
    if (!a.has(0)) fault("test '", name, "' needs an argument");
    return *a.get(0);
  };
  auto none = [&] {
    Args(args, name, {});
  };
  if (name == "defined") return none(), !v.is_undefined();
  if (name == "undefined") return none(), v.is_undefined();
  if (name == "none") return none(), v.is_none();
  if (name == "string") return none(), v.is_string();
  if (name == "number") return none(), v.is_number();
  if (name == "integer") return none(), v.is_data() && v.data().is_number_integer();
  if (name == "float") return none(), v.is_data() && v.data().is_number_float();
  if (name == "boolean") return none(), v.is_data() && v.data().is_boolean();
  if (name == "true") return none(), v.is_data() && v.data().is_boolean() && v.data().get<bool>();
  if (name == "false") return none(), v.is_data() && v.data().is_boolean() && !v.data().get<bool>();
  if (name == "mapping") return none(), v.is_dict();
  if (name == "sequence" || name == "iterable")
    return none(), v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
  if (name == "callable") return none(), v.kind() == Value::Kind::Callable;
  if (name == "even" || name == "odd") {
    none();
    const Value m = binary_op("%", v, Value::of(2));
    return truthy(m) == (name == "odd");
  }
  if (name == "divisibleby") return !truthy(binary_op("%", v, one("num")));
  if (name == "eq" || name == "equalto" || name == "==") return equal(v, one("other"));
  if (name == "ne" || name == "!=") return !equal(v, one("other"));
  if (name == "lt" || name == "lessthan" || name == "<") return less(v, one("other"));
  if (name == "le" || name == "<=") {
    const Value o = one("other");
    return less(v, o) || equal(v, o);
  }
  if (name == "gt" || name == "greaterthan" || name == ">") return less(one("other"), v);
  if (name == "ge" || name == ">=") {
    const Value o = one("other");
    return less(o, v) || equal(v, o);
  }
  if (name == "in") return contains(one("seq"), v);
  if (name == "sameas") {
    const Value o = one("other");
    if (v.is_data() && o.is_data() && (v.data().is_null() || v.data().is_boolean())) return v.data() == o.data();
    return v.is_data() && o.is_data() && &v.data() == &o.data();
  }
  fault("unsupported Jinja construct 'test ", name, "'");
}

}  // namespace qhx::chat::jinja
