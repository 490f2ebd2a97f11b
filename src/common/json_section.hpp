// Reading a JSON object field by field with errors that name the source, the
// dotted JSON path and what was expected, e.g.
//   config.json: text_config.hidden_size: expected an integer, got a string ("2048")
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "qhexrt/error.hpp"

namespace qhx {

using Json = nlohmann::json;

// nlohmann's type_name() says "number" for both 3 and 3.5; the difference is
// exactly what a wrong-type error needs to show.
inline std::string describe(const Json& v) {
  if (v.is_number_float()) return cat("a floating-point number (", v.dump(), ")");
  if (v.is_number_integer()) return cat("an integer (", v.dump(), ")");
  if (v.is_boolean()) return cat("a boolean (", v.dump(), ")");
  if (v.is_string()) return cat("a string (", v.dump(), ")");
  if (v.is_null()) return "null";
  if (v.is_array()) return "an array";
  return "an object";
}

// One JSON object of the config, with its dotted path for error messages.
class Section {
 public:
  Section(const Json& obj, std::string path, std::string_view source)
      : obj_(obj), path_(std::move(path)), source_(source) {}

  std::string path_of(std::string_view key) const { return path_.empty() ? std::string(key) : cat(path_, ".", key); }

  [[noreturn]] void fail_at(std::string_view key, const std::string& problem) const {
    fail(source_, ": ", path_of(key), ": ", problem);
  }

  // nullptr when the key is absent.
  const Json* find(std::string_view key) const {
    const auto it = obj_.find(key);
    return it == obj_.end() ? nullptr : &*it;
  }

  std::int64_t integer(std::string_view key, std::int64_t fallback) const {
    const Json* v = find(key);
    return v == nullptr ? fallback : to_integer(*v, path_of(key));
  }

  double number(std::string_view key, double fallback) const {
    const Json* v = find(key);
    if (v == nullptr) return fallback;
    if (!v->is_number()) fail_at(key, cat("expected a number, got ", describe(*v)));
    return v->get<double>();
  }

  bool boolean(std::string_view key, bool fallback) const {
    const Json* v = find(key);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) fail_at(key, cat("expected a boolean, got ", describe(*v)));
    return v->get<bool>();
  }

  std::string string(std::string_view key, const std::string& fallback) const {
    const Json* v = find(key);
    if (v == nullptr) return fallback;
    if (!v->is_string()) fail_at(key, cat("expected a string, got ", describe(*v)));
    return v->get<std::string>();
  }

  std::vector<std::int64_t> integer_list(std::string_view key, const std::vector<std::int64_t>& fallback) const {
    const Json* v = find(key);
    if (v == nullptr) return fallback;
    if (!v->is_array()) fail_at(key, cat("expected an array of integers, got ", describe(*v)));
    std::vector<std::int64_t> out;
    for (std::size_t i = 0; i < v->size(); ++i) out.push_back(to_integer((*v)[i], cat(path_of(key), "[", i, "]")));
    return out;
  }

  // A nested object that must be present.
  Section object(std::string_view key) const {
    const Json* v = find(key);
    if (v == nullptr) fail_at(key, "missing");
    if (!v->is_object()) fail_at(key, cat("expected an object, got ", describe(*v)));
    return Section(*v, path_of(key), source_);
  }

  // Present and not null.
  bool has_value(std::string_view key) const {
    const Json* v = find(key);
    return v != nullptr && !v->is_null();
  }

 private:
  // Floats and booleans are rejected rather than converted: "hidden_size":
  // 2048.5 or true is a broken file, not a size.
  std::int64_t to_integer(const Json& v, const std::string& path) const {
    if (!v.is_number_integer()) fail(source_, ": ", path, ": expected an integer, got ", describe(v));
    if (v.is_number_unsigned() &&
        v.get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      fail(source_, ": ", path, ": integer ", v.dump(), " is out of range");
    return v.get<std::int64_t>();
  }

  const Json& obj_;
  std::string path_;
  std::string_view source_;
};

}  // namespace qhx
