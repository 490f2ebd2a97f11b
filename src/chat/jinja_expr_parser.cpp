// Expressions, by recursive descent in Jinja's precedence order (lowest first):
// conditional, or, and, not, comparison, + -, ~, * / // %, **, unary with
// postfix subscripts, calls, filters and tests.
#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cstdlib>

#include "chat/jinja_builtins.hpp"
#include "chat/jinja_parse.hpp"

namespace qhx::chat::jinja {
namespace {

std::string without_underscores(std::string s) {
  s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
  return s;
}

}  // namespace

ExprPtr make_expr(Expr::Kind kind, Loc loc) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->loc = loc;
  return e;
}

bool ExprParser::tuple_end(std::string_view extra_end) const {
  const Token& t = cur();
  if (t.kind == Tok::VarEnd || t.kind == Tok::BlockEnd || (t.kind == Tok::Op && t.text == ")")) return true;
  return !extra_end.empty() && t.kind == Tok::Name && t.text == extra_end;
}

ExprPtr ExprParser::parse_tuple(bool with_cond, bool explicit_parens, std::string_view extra_end) {
  const Loc loc = cur().loc;
  std::vector<ExprPtr> items;
  bool is_tuple = false;
  while (true) {
    if (!items.empty()) expect_op(",");
    if (tuple_end(extra_end)) break;
    items.push_back(parse_expression(with_cond));
    if (is_op(","))
      is_tuple = true;
    else
      break;
  }
  if (!is_tuple) {
    if (!items.empty()) return std::move(items.front());
    if (!explicit_parens) syntax(cur(), "expected an expression, got " + describe(cur()));
  }
  auto e = make_expr(Expr::Kind::Tuple, loc);
  e->args = std::move(items);
  return e;
}

ExprPtr ExprParser::parse_expression(bool with_cond) { return with_cond ? parse_condexpr() : parse_or(); }

ExprPtr ExprParser::parse_condexpr() {
  const Nest nest(*this);
  ExprPtr expr = parse_or();
  while (is_name("if")) {
    const Loc loc = next().loc;
    auto c = make_expr(Expr::Kind::Cond, loc);
    c->args.push_back(parse_or());
    c->args.push_back(std::move(expr));
    if (is_name("else")) {
      next();
      c->args.push_back(parse_condexpr());
    } else {
      c->args.push_back(nullptr);
    }
    expr = std::move(c);
  }
  return expr;
}

ExprPtr ExprParser::binary(std::string op, Loc loc, ExprPtr l, ExprPtr r) {
  auto e = make_expr(Expr::Kind::Binary, loc);
  e->name = std::move(op);
  e->args.push_back(std::move(l));
  e->args.push_back(std::move(r));
  return e;
}

ExprPtr ExprParser::parse_or() {
  ExprPtr left = parse_and();
  while (is_name("or")) {
    const Loc loc = next().loc;
    left = binary("or", loc, std::move(left), parse_and());
  }
  return left;
}

ExprPtr ExprParser::parse_and() {
  ExprPtr left = parse_not();
  while (is_name("and")) {
    const Loc loc = next().loc;
    left = binary("and", loc, std::move(left), parse_not());
  }
  return left;
}

ExprPtr ExprParser::parse_not() {
  const Nest nest(*this);
  if (!is_name("not")) return parse_compare();
  const Loc loc = next().loc;
  auto e = make_expr(Expr::Kind::Unary, loc);
  e->name = "not";
  e->args.push_back(parse_not());
  return e;
}

ExprPtr ExprParser::parse_compare() {
  const Loc loc = cur().loc;
  ExprPtr first = parse_math1();
  auto cmp = make_expr(Expr::Kind::Compare, loc);
  cmp->args.push_back(std::move(first));
  while (true) {
    static const std::array<std::string_view, 6> kOps = {"==", "!=", "<", "<=", ">", ">="};
    if (cur().kind == Tok::Op && std::find(kOps.begin(), kOps.end(), cur().text) != kOps.end()) {
      cmp->ops.push_back(next().text);
    } else if (is_name("in")) {
      next();
      cmp->ops.push_back("in");
    } else if (is_name("not") && peek().kind == Tok::Name && peek().text == "in") {
      next();
      next();
      cmp->ops.push_back("not in");
    } else {
      break;
    }
    cmp->args.push_back(parse_math1());
  }
  if (cmp->ops.empty()) return std::move(cmp->args.front());
  return cmp;
}

ExprPtr ExprParser::parse_math1() {
  ExprPtr left = parse_concat();
  while (is_op("+") || is_op("-")) {
    const Token& op = next();
    left = binary(op.text, op.loc, std::move(left), parse_concat());
  }
  return left;
}

ExprPtr ExprParser::parse_concat() {
  const Loc loc = cur().loc;
  ExprPtr first = parse_math2();
  if (!is_op("~")) return first;
  auto e = make_expr(Expr::Kind::Concat, loc);
  e->args.push_back(std::move(first));
  while (skip_op("~")) e->args.push_back(parse_math2());
  return e;
}

ExprPtr ExprParser::parse_math2() {
  ExprPtr left = parse_pow();
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    const Token& op = next();
    left = binary(op.text, op.loc, std::move(left), parse_pow());
  }
  return left;
}

ExprPtr ExprParser::parse_pow() {
  ExprPtr left = parse_unary(true);
  while (is_op("**")) {
    const Token& op = next();
    left = binary(op.text, op.loc, std::move(left), parse_unary(true));
  }
  return left;
}

ExprPtr ExprParser::parse_unary(bool with_filter) {
  const Nest nest(*this);
  ExprPtr node;
  if (is_op("-") || is_op("+")) {
    const Token& op = next();
    node = make_expr(Expr::Kind::Unary, op.loc);
    node->name = op.text;
    node->args.push_back(parse_unary(false));
  } else {
    node = parse_primary();
  }
  node = parse_postfix(std::move(node));
  if (with_filter) node = parse_filter_expr(std::move(node));
  return node;
}

ExprPtr ExprParser::literal(Json value, Loc loc) {
  auto e = make_expr(Expr::Kind::Literal, loc);
  e->literal = std::move(value);
  return e;
}

ExprPtr ExprParser::parse_primary() {
  const Token& t = cur();
  switch (t.kind) {
    case Tok::Name: {
      next();
      if (t.text == "true" || t.text == "True") return literal(true, t.loc);
      if (t.text == "false" || t.text == "False") return literal(false, t.loc);
      if (t.text == "none" || t.text == "None") return literal(nullptr, t.loc);
      auto e = make_expr(Expr::Kind::Name, t.loc);
      e->name = t.text;
      return e;
    }
    case Tok::String: {
      std::string s;
      const Loc loc = t.loc;
      while (cur().kind == Tok::String) s += next().text;  // adjacent literals concatenate
      return literal(s, loc);
    }
    case Tok::Integer: {
      next();
      std::string digits = without_underscores(t.text);
      int base = 10;
      if (digits.size() > 2 && digits[0] == '0' && std::isalpha(static_cast<unsigned char>(digits[1]))) {
        const char b = static_cast<char>(std::tolower(static_cast<unsigned char>(digits[1])));
        base = b == 'x' ? 16 : b == 'o' ? 8 : 2;
        digits = digits.substr(2);
      }
      std::int64_t v = 0;
      const auto res = std::from_chars(digits.data(), digits.data() + digits.size(), v, base);
      if (res.ec != std::errc() || res.ptr != digits.data() + digits.size()) syntax(t, "integer literal out of range");
      return literal(v, t.loc);
    }
    case Tok::Float: {
      next();
      const std::string digits = without_underscores(t.text);
      return literal(std::strtod(digits.c_str(), nullptr), t.loc);
    }
    case Tok::Op:
      if (t.text == "(") {
        next();
        ExprPtr e = parse_tuple(true, true);
        expect_op(")");
        return e;
      }
      if (t.text == "[") return parse_list();
      if (t.text == "{") return parse_dict();
      break;
    default: break;
  }
  syntax(t, "unexpected " + describe(t));
}

ExprPtr ExprParser::parse_list() {
  auto e = make_expr(Expr::Kind::List, next().loc);
  while (!is_op("]")) {
    if (!e->args.empty()) expect_op(",");
    if (is_op("]")) break;
    e->args.push_back(parse_expression(true));
  }
  next();
  return e;
}

ExprPtr ExprParser::parse_dict() {
  auto e = make_expr(Expr::Kind::Dict, next().loc);
  while (!is_op("}")) {
    if (!e->args.empty()) expect_op(",");
    if (is_op("}")) break;
    e->args.push_back(parse_expression(true));
    expect_op(":");
    e->args.push_back(parse_expression(true));
  }
  next();
  return e;
}

ExprPtr ExprParser::parse_postfix(ExprPtr node) {
  while (true) {
    if (is_op(".") || is_op("["))
      node = parse_subscript(std::move(node));
    else if (is_op("("))
      node = parse_call(std::move(node));
    else
      return node;
  }
}

ExprPtr ExprParser::parse_filter_expr(ExprPtr node) {
  while (true) {
    if (is_op("|"))
      node = parse_filter(std::move(node));
    else if (is_name("is"))
      node = parse_test(std::move(node));
    else if (is_op("("))
      node = parse_call(std::move(node));
    else
      return node;
  }
}

ExprPtr ExprParser::parse_subscript(ExprPtr node) {
  const Token& t = next();
  if (t.text == ".") {
    const Token& attr = next();
    if (attr.kind == Tok::Name) {
      auto e = make_expr(Expr::Kind::Attr, t.loc);
      e->name = attr.text;
      e->args.push_back(std::move(node));
      return e;
    }
    if (attr.kind == Tok::Integer) {
      const std::string digits = without_underscores(attr.text);
      std::int64_t index = 0;
      const auto res = std::from_chars(digits.data(), digits.data() + digits.size(), index);
      if (res.ec != std::errc() || res.ptr != digits.data() + digits.size()) syntax(attr, "bad index after '.'");
      auto e = make_expr(Expr::Kind::Item, t.loc);
      e->args.push_back(std::move(node));
      e->args.push_back(literal(index, attr.loc));
      return e;
    }
    syntax(attr, "expected a name after '.', got " + describe(attr));
  }
  // "[": an index or a slice (a tuple index has no meaning for JSON values).
  ExprPtr parts[3];
  bool is_slice = false;
  for (int k = 0; k < 3; ++k) {
    if (!is_op(":") && !is_op("]")) parts[k] = parse_expression(true);
    if (k < 2 && skip_op(":")) {
      is_slice = true;
      continue;
    }
    break;
  }
  if (is_op(",")) unsupported(cur(), "tuple subscript");
  expect_op("]");
  auto e = make_expr(is_slice ? Expr::Kind::Slice : Expr::Kind::Item, t.loc);
  e->args.push_back(std::move(node));
  if (!is_slice && !parts[0]) syntax(t, "expected an expression inside '[]'");
  for (int k = 0; k < (is_slice ? 3 : 1); ++k) e->args.push_back(std::move(parts[k]));
  return e;
}

// Call arguments after '(' into e->args (after what is already there) and e->kwargs.
void ExprParser::parse_call_args(Expr& e) {
  expect_op("(");
  bool first = true;
  while (!is_op(")")) {
    if (!first) expect_op(",");
    first = false;
    if (is_op(")")) break;
    if (is_op("*") || is_op("**")) unsupported(cur(), "*args/**kwargs in a call");
    if (cur().kind == Tok::Name && peek().kind == Tok::Op && peek().text == "=") {
      std::string key = next().text;
      next();
      e.kwargs.emplace_back(std::move(key), parse_expression(true));
    } else {
      if (!e.kwargs.empty()) syntax(cur(), "positional argument follows keyword argument");
      e.args.push_back(parse_expression(true));
    }
  }
  next();
}

ExprPtr ExprParser::parse_call(ExprPtr node) {
  auto e = make_expr(Expr::Kind::Call, node->loc);  // errors point at what is called
  e->args.push_back(std::move(node));
  parse_call_args(*e);
  return e;
}

std::string ExprParser::dotted_name() {
  std::string n = expect_name();
  while (is_op(".") && peek().kind == Tok::Name) {
    next();
    n += "." + next().text;
  }
  return n;
}

ExprPtr ExprParser::parse_filter(ExprPtr node) {
  const Token& bar = next();
  const Token& at = cur();
  auto e = make_expr(Expr::Kind::Filter, bar.loc);
  e->name = dotted_name();
  if (!has_filter(e->name)) unsupported(at, "filter " + e->name);
  e->args.push_back(std::move(node));
  if (is_op("(")) parse_call_args(*e);
  return e;
}

ExprPtr ExprParser::parse_test(ExprPtr node) {
  const Loc loc = next().loc;
  const bool negated = is_name("not");
  if (negated) next();
  const Token& at = cur();
  auto e = make_expr(Expr::Kind::Test, loc);
  e->name = dotted_name();
  if (!has_test(e->name)) unsupported(at, "test " + e->name);
  e->args.push_back(std::move(node));
  const Token& t = cur();
  const bool bare_arg = t.kind == Tok::Name || t.kind == Tok::String || t.kind == Tok::Integer ||
                        t.kind == Tok::Float || (t.kind == Tok::Op && (t.text == "[" || t.text == "{"));
  if (is_op("(")) {
    parse_call_args(*e);
  } else if (bare_arg && !is_name("else") && !is_name("or") && !is_name("and")) {
    if (is_name("is")) syntax(t, "you cannot chain multiple tests with is");
    e->args.push_back(parse_postfix(parse_primary()));
  }
  if (!negated) return e;
  auto n = make_expr(Expr::Kind::Unary, loc);
  n->name = "not";
  n->args.push_back(std::move(e));
  return n;
}

}  // namespace qhx::chat::jinja
