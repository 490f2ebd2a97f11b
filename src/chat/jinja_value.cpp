#include "chat/jinja_value.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "chat/py_string.hpp"

namespace qhx::chat::jinja {

Value Value::of(Json j) {
  auto owner = std::make_shared<const Json>(std::move(j));
  const Json* at = owner.get();
  return inside(std::move(owner), at);
}

Value Value::inside(std::shared_ptr<const Json> owner, const Json* at) {
  Value v;
  v.kind_ = Kind::Data;
  v.owner_ = std::move(owner);
  v.at_ = at;
  return v;
}

Value Value::of_namespace(std::shared_ptr<Namespace> ns) {
  Value v;
  v.kind_ = Kind::Namespace;
  v.ns_ = std::move(ns);
  return v;
}

Value Value::of_callable(std::string name, std::function<Value(const CallArgs&)> fn) {
  Value v;
  v.kind_ = Kind::Callable;
  v.fn_ = std::make_shared<const Callable>(Callable{std::move(name), std::move(fn)});
  return v;
}

void Value::fail_undefined() const { fault(why_); }

std::int64_t Value::as_int() const {
  if (at_->is_boolean()) return at_->get<bool>() ? 1 : 0;
  if (at_->is_number_unsigned() &&
      at_->get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
    fault("integer ", at_->get<std::uint64_t>(), " is too large");
  return at_->get<std::int64_t>();
}

double Value::as_double() const {
  if (at_->is_boolean()) return at_->get<bool>() ? 1.0 : 0.0;
  return at_->get<double>();
}

Json Value::to_json() const {
  switch (kind_) {
    case Kind::Data: return *at_;
    case Kind::Undefined: fail_undefined();
    case Kind::Namespace: fault("a namespace cannot be stored in a list or dict");
    case Kind::Callable: fault("a function cannot be stored in a list or dict");
  }
  return nullptr;
}

Value* Namespace::find(std::string_view key) {
  for (auto& [k, v] : attrs)
    if (k == key) return &v;
  return nullptr;
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return false;
    case Value::Kind::Namespace:
    case Value::Kind::Callable: return true;
    case Value::Kind::Data: break;
  }
  const Json& j = v.data();
  if (j.is_null()) return false;
  if (j.is_boolean()) return j.get<bool>();
  if (j.is_number_float()) return j.get<double>() != 0.0;
  if (j.is_number()) return j.get<std::int64_t>() != 0;
  if (j.is_string()) return !j.get_ref<const std::string&>().empty();
  return !j.empty();
}

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return "Undefined";
    case Value::Kind::Namespace: return "Namespace";
    case Value::Kind::Callable: return "function";
    case Value::Kind::Data: break;
  }
  const Json& j = v.data();
  if (j.is_null()) return "NoneType";
  if (j.is_boolean()) return "bool";
  if (j.is_number_float()) return "float";
  if (j.is_number()) return "int";
  if (j.is_string()) return "str";
  if (j.is_array()) return "list";
  return "dict";
}

std::string repr(const Json& j) {
  if (j.is_null()) return "None";
  if (j.is_boolean()) return j.get<bool>() ? "True" : "False";
  if (j.is_number_float()) return py::float_repr(j.get<double>());
  if (j.is_number_unsigned()) return std::to_string(j.get<std::uint64_t>());
  if (j.is_number()) return std::to_string(j.get<std::int64_t>());
  if (j.is_string()) return py::str_repr(j.get_ref<const std::string&>());
  std::string out;
  if (j.is_array()) {
    out = "[";
    for (std::size_t i = 0; i < j.size(); ++i) out += (i ? ", " : "") + repr(j[i]);
    return out + "]";
  }
  out = "{";
  bool first = true;
  for (const auto& [k, v] : j.items()) {
    out += (first ? "" : ", ") + py::str_repr(k) + ": " + repr(v);
    first = false;
  }
  return out + "}";
}

std::string to_str(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return "";
    case Value::Kind::Callable: fault("cannot print the function '", v.callable().name, "'");
    case Value::Kind::Namespace: {
      std::string out = "<Namespace {";
      bool first = true;
      for (const auto& [k, x] : v.ns().attrs) {
        out += (first ? "" : ", ") + py::str_repr(k) + ": " + (x.is_data() ? repr(x.data()) : to_str(x));
        first = false;
      }
      return out + "}>";
    }
    case Value::Kind::Data: break;
  }
  if (v.is_string()) return v.str_ref();
  return repr(v.data());
}

namespace {

bool json_equal(const Json& a, const Json& b) {
  const bool an = a.is_number() || a.is_boolean(), bn = b.is_number() || b.is_boolean();
  if (an || bn) {
    if (!an || !bn) return false;
    return Value::inside(nullptr, &a).as_double() == Value::inside(nullptr, &b).as_double() &&
           (a.is_number_float() || b.is_number_float() ||
            Value::inside(nullptr, &a).as_int() == Value::inside(nullptr, &b).as_int());
  }
  if (a.type() != b.type()) return false;
  if (a.is_array()) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
      if (!json_equal(a[i], b[i])) return false;
    return true;
  }
  if (a.is_object()) {
    if (a.size() != b.size()) return false;
    for (const auto& [k, v] : a.items()) {
      const auto it = b.find(k);
      if (it == b.end() || !json_equal(v, *it)) return false;
    }
    return true;
  }
  return a == b;
}

}  // namespace

bool equal(const Value& a, const Value& b) {
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::Undefined: return true;  // Jinja's Undefined equals any other Undefined
    case Value::Kind::Namespace: return &a.ns() == &b.ns();
    case Value::Kind::Callable: return &a.callable() == &b.callable();
    case Value::Kind::Data: return json_equal(a.data(), b.data());
  }
  return false;
}

bool less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_int() && b.is_int()) return a.as_int() < b.as_int();
    return a.as_double() < b.as_double();
  }
  if (a.is_string() && b.is_string()) return a.str_ref() < b.str_ref();  // UTF-8 byte order is code point order
  if (a.is_list() && b.is_list()) {
    const Json &x = a.data(), &y = b.data();
    for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
      const Value xi = a.child(x[i]), yi = b.child(y[i]);
      if (!equal(xi, yi)) return less(xi, yi);
    }
    return x.size() < y.size();
  }
  if (a.is_undefined()) a.fail_undefined();
  if (b.is_undefined()) b.fail_undefined();
  fault("'<' not supported between instances of '", type_name(a), "' and '", type_name(b), "'");
}

bool contains(const Value& haystack, const Value& needle) {
  if (haystack.is_undefined()) return false;
  if (haystack.is_string()) {
    if (!needle.is_string()) fault("'in <string>' requires string as left operand, not ", type_name(needle));
    return haystack.str_ref().find(needle.str_ref()) != std::string::npos;
  }
  if (haystack.is_list()) {
    for (const Json& x : haystack.data())
      if (equal(haystack.child(x), needle)) return true;
    return false;
  }
  if (haystack.is_dict()) return needle.is_string() && haystack.data().contains(needle.str_ref());
  fault("argument of type '", type_name(haystack), "' is not iterable");
}

std::vector<Value> iterate(const Value& v) {
  std::vector<Value> out;
  if (v.is_undefined()) return out;
  if (v.is_list()) {
    for (const Json& x : v.data()) out.push_back(v.child(x));
  } else if (v.is_dict()) {
    for (const auto& [k, x] : v.data().items()) out.push_back(Value::of(k));
  } else if (v.is_string()) {
    const std::u32string u = py::decode(v.str_ref());
    for (char32_t c : u) out.push_back(Value::of(py::encode(std::u32string(1, c))));
  } else {
    fault("'", type_name(v), "' object is not iterable");
  }
  return out;
}

namespace {

void dump_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  for (std::size_t i = 0; i < s.size();) {
    std::size_t n = 1;
    const char32_t c = py::decode_at(s, i, n);
    if (n == 0) fault("invalid UTF-8 in a string at byte ", i);
    char buf[16];
    switch (c) {
      case U'"': out += "\\\""; break;
      case U'\\': out += "\\\\"; break;
      case U'\n': out += "\\n"; break;
      case U'\r': out += "\\r"; break;
      case U'\t': out += "\\t"; break;
      case U'\b': out += "\\b"; break;
      case U'\f': out += "\\f"; break;
      default:
        if (c < 0x20 || (ensure_ascii && c > 0x7E)) {
          if (c > 0xFFFF) {
            const char32_t v = c - 0x10000;
            std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 + (v >> 10)),
                          static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
          } else {
            std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
          }
          out += buf;
        } else {
          out.append(s, i, n);
        }
    }
    i += n;
  }
  out += '"';
}

void dump(std::string& out, const Json& j, const DumpOptions& opt, int depth) {
  auto newline = [&](int d) {
    if (!opt.indent) return;
    out += '\n';
    for (int k = 0; k < d; ++k) out += *opt.indent;
  };
  if (j.is_null()) {
    out += "null";
  } else if (j.is_boolean()) {
    out += j.get<bool>() ? "true" : "false";
  } else if (j.is_number_float()) {
    const double d = j.get<double>();
    out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity") : py::float_repr(d);
  } else if (j.is_number()) {
    out += repr(j);
  } else if (j.is_string()) {
    dump_string(out, j.get_ref<const std::string&>(), opt.ensure_ascii);
  } else if (j.is_array()) {
    if (j.empty()) {
      out += "[]";
      return;
    }
    out += '[';
    for (std::size_t i = 0; i < j.size(); ++i) {
      if (i) out += opt.item_sep;
      newline(depth + 1);
      dump(out, j[i], opt, depth + 1);
    }
    newline(depth);
    out += ']';
  } else {
    if (j.empty()) {
      out += "{}";
      return;
    }
    std::vector<std::pair<const std::string*, const Json*>> items;
    for (auto it = j.begin(); it != j.end(); ++it) items.emplace_back(&it.key(), &it.value());
    if (opt.sort_keys)
      std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return *a.first < *b.first; });
    out += '{';
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (i) out += opt.item_sep;
      newline(depth + 1);
      dump_string(out, *items[i].first, opt.ensure_ascii);
      out += opt.key_sep;
      dump(out, *items[i].second, opt, depth + 1);
    }
    newline(depth);
    out += '}';
  }
}

}  // namespace

std::string dumps(const Json& j, const DumpOptions& opt) {
  std::string out;
  dump(out, j, opt, 0);
  return out;
}

}  // namespace qhx::chat::jinja
