// Arithmetic with Python's rules: `/` always gives a float, `//` and `%` floor
// towards negative infinity, bools count as ints, str/list repeat and concatenate.
#include <cmath>
#include <limits>

#include "chat/jinja_value.hpp"

namespace qhx::chat::jinja {
namespace {

// `f` is one of the __builtin_*_overflow functions.
template <typename F>
std::int64_t checked(F f, std::int64_t a, std::int64_t b, std::string_view op) {
  std::int64_t r = 0;
  if (f(a, b, &r)) fault("integer overflow in '", op, "'");
  return r;
}
std::int64_t add(std::int64_t a, std::int64_t b, std::string_view op) {
  return checked([](std::int64_t x, std::int64_t y, std::int64_t* r) { return __builtin_add_overflow(x, y, r); }, a, b,
                 op);
}
std::int64_t sub(std::int64_t a, std::int64_t b, std::string_view op) {
  return checked([](std::int64_t x, std::int64_t y, std::int64_t* r) { return __builtin_sub_overflow(x, y, r); }, a, b,
                 op);
}
std::int64_t mul(std::int64_t a, std::int64_t b, std::string_view op) {
  return checked([](std::int64_t x, std::int64_t y, std::int64_t* r) { return __builtin_mul_overflow(x, y, r); }, a, b,
                 op);
}

Value repeat(const Value& seq, std::int64_t n) {
  if (seq.is_string()) {
    std::string out;
    for (std::int64_t i = 0; i < n; ++i) out += seq.str_ref();
    return Value::of(out);
  }
  Json out = Json::array();
  for (std::int64_t i = 0; i < n; ++i)
    for (const Json& x : seq.data()) out.push_back(x);
  return Value::of(std::move(out));
}

double float_mod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

}  // namespace

Value negate(const Value& v) {
  if (v.is_undefined()) v.fail_undefined();
  if (!v.is_number()) fault("bad operand type for unary -: '", type_name(v), "'");
  if (v.is_int()) return Value::of(sub(0, v.as_int(), "-"));
  return Value::of(-v.as_double());
}

Value binary_op(std::string_view op, const Value& a, const Value& b) {
  if (a.is_undefined()) a.fail_undefined();
  if (b.is_undefined()) b.fail_undefined();
  const bool nums = a.is_number() && b.is_number();
  const bool ints = nums && a.is_int() && b.is_int();
  if (op == "+") {
    if (ints) return Value::of(add(a.as_int(), b.as_int(), op));
    if (nums) return Value::of(a.as_double() + b.as_double());
    if (a.is_string() && b.is_string()) return Value::of(a.str_ref() + b.str_ref());
    if (a.is_list() && b.is_list()) {
      Json out = a.data();
      for (const Json& x : b.data()) out.push_back(x);
      return Value::of(std::move(out));
    }
  } else if (op == "-") {
    if (ints) return Value::of(sub(a.as_int(), b.as_int(), op));
    if (nums) return Value::of(a.as_double() - b.as_double());
  } else if (op == "*") {
    if (ints) return Value::of(mul(a.as_int(), b.as_int(), op));
    if (nums) return Value::of(a.as_double() * b.as_double());
    if ((a.is_string() || a.is_list()) && b.is_int()) return repeat(a, b.as_int());
    if (a.is_int() && (b.is_string() || b.is_list())) return repeat(b, a.as_int());
  } else if (op == "/") {
    if (nums) {
      if (b.as_double() == 0) fault("division by zero");
      return Value::of(a.as_double() / b.as_double());
    }
  } else if (op == "//" || op == "%") {
    if (nums && b.as_double() == 0) fault(op == "%" ? "modulo by zero" : "integer division or modulo by zero");
    if (ints) {
      const std::int64_t x = a.as_int(), y = b.as_int();
      if (x == std::numeric_limits<std::int64_t>::min() && y == -1) fault("integer overflow in '", op, "'");
      std::int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        --q;
        m += y;
      }
      return Value::of(op == "//" ? q : m);
    }
    if (nums) {
      const double x = a.as_double(), y = b.as_double();
      return Value::of(op == "//" ? std::floor((x - float_mod(x, y)) / y + 0.5) : float_mod(x, y));
    }
    if (op == "%" && a.is_string()) fault("unsupported Jinja construct '%' string formatting");
  } else if (op == "**") {
    if (ints && b.as_int() >= 0) {
      std::int64_t base = a.as_int(), e = b.as_int(), acc = 1;
      while (e > 0) {
        if (e & 1) acc = mul(acc, base, op);
        e >>= 1;
        if (e > 0) base = mul(base, base, op);
      }
      return Value::of(acc);
    }
    if (nums) return Value::of(std::pow(a.as_double(), b.as_double()));
  }
  fault("unsupported operand type(s) for ", op, ": '", type_name(a), "' and '", type_name(b), "'");
}

}  // namespace qhx::chat::jinja
