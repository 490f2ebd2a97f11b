// Attribute and item lookup, the Python methods templates call on strings and
// dicts, and the environment's globals. Lists and dicts are immutable, as in
// transformers' ImmutableSandboxedEnvironment.
#include <algorithm>
#include <array>
#include <charconv>
#include <ctime>

#include "chat/jinja_builtins.hpp"
#include "chat/py_string.hpp"

namespace qhx::chat::jinja {

Args::Args(const CallArgs& call, std::string_view fn, std::initializer_list<std::string_view> params)
    : fn_(fn), names_(params), bound_(params.size()) {
  if (call.pos.size() > names_.size())
    fault(fn, "() takes at most ", names_.size(), " argument(s) (", call.pos.size(), " given)");
  for (std::size_t i = 0; i < call.pos.size(); ++i) bound_[i] = call.pos[i];
  for (const auto& [key, v] : call.kw) {
    const auto it = std::find(names_.begin(), names_.end(), key);
    if (it == names_.end()) fault(fn, "() got an unexpected keyword argument '", key, "'");
    auto& slot = bound_[static_cast<std::size_t>(it - names_.begin())];
    if (slot) fault(fn, "() got multiple values for argument '", key, "'");
    slot = v;
  }
}

std::string Args::str(std::size_t i, std::string_view dflt) const {
  return has(i) ? to_str(*get(i)) : std::string(dflt);
}

std::optional<std::string> Args::opt_str(std::size_t i) const {
  if (!has(i) || get(i)->is_none()) return std::nullopt;
  return to_str(*get(i));
}

std::int64_t Args::integer(std::size_t i, std::int64_t dflt) const {
  if (!has(i)) return dflt;
  if (!get(i)->is_int()) fault(fn_, "(): '", names_[i], "' must be an integer, not ", type_name(*get(i)));
  return get(i)->as_int();
}

bool Args::flag(std::size_t i, bool dflt) const { return has(i) ? truthy(*get(i)) : dflt; }

namespace {

Value bound(const std::string& name, std::function<Value(const CallArgs&)> fn) {
  return Value::of_callable(name, std::move(fn));
}

Value unsafe(const Value& obj, const std::string& name) {
  const std::string what = qhx::cat("access to attribute '", name, "' of '", type_name(obj),
                                    "' object is unsafe (the sandbox keeps lists and dicts immutable)");
  return bound(name, [what](const CallArgs&) -> Value { fault(what); });
}

Json strings(const std::vector<std::string>& parts) {
  Json out = Json::array();
  for (const std::string& p : parts) out.push_back(p);
  return out;
}

bool affix(const Value& s, const Value& affixes, bool prefix) {
  auto test = [&](const Value& a) {
    if (!a.is_string())
      fault(prefix ? "startswith" : "endswith", " first arg must be str or a tuple of str, not ", type_name(a));
    const std::string &x = s.str_ref(), &y = a.str_ref();
    return y.size() <= x.size() &&
           (prefix ? x.compare(0, y.size(), y) == 0 : x.compare(x.size() - y.size(), y.size(), y) == 0);
  };
  if (affixes.is_list()) {
    for (const Value& a : iterate(affixes))
      if (test(a)) return true;
    return false;
  }
  return test(affixes);
}

Value string_method(const Value& s, const std::string& name) {
  const std::string& str = s.str_ref();
  if (name == "startswith" || name == "endswith")
    return bound(name, [s, name](const CallArgs& c) {
      const Args a(c, name, {"prefix"});
      if (!a.has(0)) fault(name, "() takes exactly one argument");
      return Value::of(affix(s, *a.get(0), name == "startswith"));
    });
  if (name == "split" || name == "rsplit")
    return bound(name, [str, name](const CallArgs& c) {
      const Args a(c, name, {"sep", "maxsplit"});
      const std::optional<std::string> sep = a.opt_str(0);
      const std::int64_t max = a.integer(1, -1);
      return Value::of(strings(name == "split" ? py::split(str, sep, max) : py::rsplit(str, sep, max)));
    });
  if (name == "strip" || name == "lstrip" || name == "rstrip")
    return bound(name, [str, name](const CallArgs& c) {
      const Args a(c, name, {"chars"});
      return Value::of(py::strip(str, a.opt_str(0), name != "rstrip", name != "lstrip"));
    });
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize" || name == "splitlines")
    return bound(name, [str, name](const CallArgs& c) {
      Args(c, name, {});
      if (name == "upper") return Value::of(py::upper(str));
      if (name == "lower") return Value::of(py::lower(str));
      if (name == "title") return Value::of(py::title(str));
      if (name == "splitlines") return Value::of(strings(py::splitlines(str)));
      return Value::of(py::capitalize(str));
    });
  if (name == "replace")
    return bound(name, [str](const CallArgs& c) {
      const Args a(c, "replace", {"old", "new", "count"});
      if (!a.has(0) || !a.has(1) || !a.get(0)->is_string() || !a.get(1)->is_string())
        fault("replace() takes two strings");
      return Value::of(py::replace(str, a.get(0)->str_ref(), a.get(1)->str_ref(), a.integer(2, -1)));
    });
  if (name == "find" || name == "count")
    return bound(name, [str, name](const CallArgs& c) {
      const Args a(c, name, {"sub"});
      if (!a.has(0) || !a.get(0)->is_string()) fault(name, "() takes one string argument");
      const std::string& sub = a.get(0)->str_ref();
      return Value::of(name == "find" ? py::find(str, sub) : py::count(str, sub));
    });
  if (name == "join")
    return bound(name, [str](const CallArgs& c) {
      const Args a(c, "join", {"iterable"});
      if (!a.has(0)) fault("join() takes exactly one argument");
      std::string out;
      bool first = true;
      for (const Value& item : iterate(*a.get(0))) {
        if (!item.is_string()) fault("sequence item: expected str instance, ", type_name(item), " found");
        out += (first ? "" : str) + item.str_ref();
        first = false;
      }
      return Value::of(out);
    });
  return Value::undefined("'str object' has no attribute '" + name + "'");
}

Value dict_method(const Value& d, const std::string& name) {
  if (name == "get")
    return bound(name, [d](const CallArgs& c) {
      const Args a(c, "get", {"key", "default"});
      if (!a.has(0)) fault("get expected at least 1 argument, got 0");
      const Value& key = *a.get(0);
      if (key.is_string()) {
        const auto it = d.data().find(key.str_ref());
        if (it != d.data().end()) return d.child(*it);
      }
      return a.has(1) ? *a.get(1) : Value::of(nullptr);
    });
  if (name == "items" || name == "keys" || name == "values")
    return bound(name, [d, name](const CallArgs& c) {
      Args(c, name, {});
      Json out = Json::array();
      for (auto it = d.data().begin(); it != d.data().end(); ++it) {
        if (name == "items")
          out.push_back(Json::array({it.key(), it.value()}));
        else if (name == "keys")
          out.push_back(it.key());
        else
          out.push_back(it.value());
      }
      return Value::of(std::move(out));
    });
  static const std::array<std::string_view, 6> kMutators = {"pop",    "popitem", "setdefault",
                                                            "update", "clear",   "__setitem__"};
  if (std::find(kMutators.begin(), kMutators.end(), name) != kMutators.end()) return unsafe(d, name);
  return Value::undefined("'dict object' has no attribute '" + name + "'");
}

Value list_attr(const Value& l, const std::string& name) {
  static const std::array<std::string_view, 8> kMutators = {"append", "extend",  "insert", "pop",
                                                            "remove", "reverse", "sort",   "clear"};
  if (std::find(kMutators.begin(), kMutators.end(), name) != kMutators.end()) return unsafe(l, name);
  return Value::undefined("'list object' has no attribute '" + name + "'");
}

Value index(const Value& seq, std::int64_t i) {
  if (seq.is_string()) {
    const std::u32string u = py::decode(seq.str_ref());
    const std::int64_t n = static_cast<std::int64_t>(u.size());
    if (i < -n || i >= n) return Value::undefined(qhx::cat("'str object' has no element ", i));
    return Value::of(py::encode(std::u32string(1, u[static_cast<std::size_t>(i < 0 ? i + n : i)])));
  }
  const std::int64_t n = static_cast<std::int64_t>(seq.data().size());
  if (i < -n || i >= n) return Value::undefined(qhx::cat("'list object' has no element ", i));
  return seq.child(seq.data()[static_cast<std::size_t>(i < 0 ? i + n : i)]);
}

}  // namespace

Value get_attr(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Value::Kind::Undefined: obj.fail_undefined();
    case Value::Kind::Namespace: {
      if (Value* v = obj.ns().find(name)) return *v;
      return Value::undefined("'Namespace object' has no attribute '" + name + "'");
    }
    case Value::Kind::Callable: return Value::undefined("'function object' has no attribute '" + name + "'");
    case Value::Kind::Data: break;
  }
  if (obj.is_string()) return string_method(obj, name);
  if (obj.is_list()) return list_attr(obj, name);
  if (obj.is_dict()) {
    Value m = dict_method(obj, name);
    if (!m.is_undefined()) return m;
    const auto it = obj.data().find(name);
    return it != obj.data().end() ? obj.child(*it) : m;
  }
  return Value::undefined(qhx::cat("'", type_name(obj), " object' has no attribute '", name, "'"));
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) obj.fail_undefined();
  if (obj.is_dict() && key.is_string()) {
    const auto it = obj.data().find(key.str_ref());
    if (it != obj.data().end()) return obj.child(*it);
  }
  if ((obj.is_list() || obj.is_string()) && key.is_int()) return index(obj, key.as_int());
  if (key.is_string()) return get_attr(obj, key.str_ref());
  return Value::undefined(qhx::cat("'", type_name(obj), " object' has no element ", to_str(key)));
}

Value get_path(const Value& v, const std::string& path) {
  Value cur = v;
  for (const std::string& part : py::split(path, std::string("."), -1)) {
    std::int64_t index = 0;
    const auto res = std::from_chars(part.data(), part.data() + part.size(), index);
    const bool digits =
        !part.empty() && part[0] != '-' && res.ec == std::errc() && res.ptr == part.data() + part.size();
    cur = get_item(cur, digits ? Value::of(index) : Value::of(part));
  }
  return cur;
}

namespace {

Value range(const CallArgs& c) {
  if (!c.kw.empty()) fault("range() takes no keyword arguments");
  std::vector<std::int64_t> a;
  for (const Value& v : c.pos) {
    if (!v.is_int()) fault("'", type_name(v), "' object cannot be interpreted as an integer");
    a.push_back(v.as_int());
  }
  if (a.empty() || a.size() > 3) fault("range expected 1 to 3 arguments, got ", a.size());
  const std::int64_t start = a.size() == 1 ? 0 : a[0], stop = a.size() == 1 ? a[0] : a[1],
                     step = a.size() == 3 ? a[2] : 1;
  if (step == 0) fault("range() arg 3 must not be zero");
  Json out = Json::array();
  for (std::int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    // The sandbox's limit (jinja2.sandbox.MAX_RANGE).
    if (out.size() >= 100000) fault("range too big, maximum size for range is 100000");
    out.push_back(i);
  }
  return Value::of(std::move(out));
}

Value make_namespace(const CallArgs& c) {
  auto ns = std::make_shared<Namespace>();
  auto set = [&](const std::string& k, const Value& v) {
    if (Value* slot = ns->find(k))
      *slot = v;
    else
      ns->attrs.emplace_back(k, v);
  };
  for (const Value& p : c.pos) {
    if (!p.is_dict()) fault("namespace() positional arguments must be dicts");
    for (auto it = p.data().begin(); it != p.data().end(); ++it) set(it.key(), p.child(it.value()));
  }
  for (const auto& [k, v] : c.kw) set(k, v);
  return Value::of_namespace(std::move(ns));
}

Value make_dict(const CallArgs& c) {
  Json out = Json::object();
  for (const Value& p : c.pos) {
    if (!p.is_dict()) fault("dict() positional arguments must be dicts");
    for (auto it = p.data().begin(); it != p.data().end(); ++it) out[it.key()] = it.value();
  }
  for (const auto& [k, v] : c.kw) out[k] = v.to_json();
  return Value::of(std::move(out));
}

Value strftime_now(const CallArgs& c) {
  const Args a(c, "strftime_now", {"format"});
  if (!a.has(0) || !a.get(0)->is_string()) fault("strftime_now() takes a format string");
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  std::string buf(256, '\0');
  const std::size_t n = std::strftime(buf.data(), buf.size(), a.get(0)->str_ref().c_str(), &local);
  buf.resize(n);
  return Value::of(buf);
}

}  // namespace

Value global(const std::string& name) {
  if (name == "range") return Value::of_callable(name, range);
  if (name == "namespace") return Value::of_callable(name, make_namespace);
  if (name == "dict") return Value::of_callable(name, make_dict);
  if (name == "strftime_now") return Value::of_callable(name, strftime_now);
  if (name == "raise_exception")
    return Value::of_callable(name, [](const CallArgs& c) -> Value {
      const Args a(c, "raise_exception", {"message"});
      fault("raise_exception: ", a.str(0, ""));
    });
  return Value::undefined("'" + name + "' is undefined");
}

}  // namespace qhx::chat::jinja
