// Recursive descent over the tokens, with Jinja's grammar and operator
// precedence (jinja2/parser.py): a test binds tighter than arithmetic, `-x|f`
// filters the negation, `**` is left-associative.
#include <algorithm>
#include <array>
#include <charconv>
#include <cstdlib>

#include "chat/jinja_ast.hpp"
#include "chat/jinja_builtins.hpp"
#include "qhexrt/error.hpp"

namespace qhx::chat::jinja {
namespace {

// Jinja's own tags (and the `do` extension) that this renderer leaves out:
// they are refused by name rather than reported as unknown.
constexpr std::array<std::string_view, 13> kUnsupportedTags = {
    "include", "extends", "block", "call", "filter", "with", "import",
    "from",    "autoescape", "raw", "do", "trans", "endblock"};

Node node(Node::Kind kind, Loc loc) {
  Node n;
  n.kind = kind;
  n.loc = loc;
  return n;
}

ExprPtr make(Expr::Kind kind, Loc loc) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->loc = loc;
  return e;
}

// Nesting deeper than this is refused rather than overflowing the stack (in
// parsing here, and in rendering, whose recursion follows the tree).
constexpr int kMaxNesting = 128;

class Parser {
 public:
  Parser(std::vector<Token> tokens, std::string_view name) : toks_(std::move(tokens)), name_(name) {}

  Body parse_all() {
    std::string end;
    Body body = parse_body({}, end);
    return body;
  }

 private:
  const Token& cur() const { return toks_[pos_]; }
  const Token& peek(std::size_t k = 1) const { return toks_[std::min(pos_ + k, toks_.size() - 1)]; }
  const Token& next() { return toks_[pos_ == toks_.size() - 1 ? pos_ : pos_++]; }

  [[noreturn]] void syntax(const Token& at, std::string_view msg) const {
    qhx::fail(where(name_, at.loc), "syntax error: ", msg);
  }
  [[noreturn]] void unsupported(const Token& at, std::string_view what) const {
    qhx::fail(where(name_, at.loc), "unsupported Jinja construct '", what, "'");
  }

  static std::string describe(const Token& t) {
    switch (t.kind) {
      case Tok::Text: return "template text";
      case Tok::VarBegin: return "'{{'";
      case Tok::VarEnd: return "end of print statement";
      case Tok::BlockBegin: return "'{%'";
      case Tok::BlockEnd: return "end of statement block";
      case Tok::Name: return "'" + t.text + "'";
      case Tok::String: return "string literal";
      case Tok::Integer:
      case Tok::Float: return "number " + t.text;
      case Tok::Op: return "'" + t.text + "'";
      case Tok::End: return "end of template";
    }
    return "token";
  }

  bool is_op(std::string_view op) const { return cur().kind == Tok::Op && cur().text == op; }
  bool is_name(std::string_view n) const { return cur().kind == Tok::Name && cur().text == n; }
  bool skip_op(std::string_view op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  void expect_op(std::string_view op) {
    if (!skip_op(op)) syntax(cur(), qhx::cat("expected '", op, "', got ", describe(cur())));
  }
  std::string expect_name() {
    if (cur().kind != Tok::Name) syntax(cur(), "expected a name, got " + describe(cur()));
    return next().text;
  }
  void expect_block_end() {
    if (cur().kind != Tok::BlockEnd) syntax(cur(), "expected end of statement block, got " + describe(cur()));
    next();
  }

  // Statements until one of `ends` (a block tag name); `end` receives the tag
  // that closed the body, whose name token is consumed (its arguments are not).
  Body parse_body(const std::vector<std::string_view>& ends, std::string& end) {
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.kind == Tok::End) {
        if (!ends.empty()) syntax(t, qhx::cat("unexpected end of template, expected '", ends.front(), "'"));
        return body;
      }
      if (t.kind == Tok::Text) {
        Node n = node(Node::Kind::Text, t.loc);
        n.text = next().text;
        body.push_back(std::move(n));
      } else if (t.kind == Tok::VarBegin) {
        next();
        Node n = node(Node::Kind::Output, t.loc);
        n.expr = parse_tuple(true, false);
        if (cur().kind != Tok::VarEnd) syntax(cur(), "expected end of print statement, got " + describe(cur()));
        next();
        body.push_back(std::move(n));
      } else if (t.kind == Tok::BlockBegin) {
        next();
        if (cur().kind != Tok::Name) syntax(cur(), "expected a tag name, got " + describe(cur()));
        const std::string tag = cur().text;
        if (std::find(ends.begin(), ends.end(), tag) != ends.end()) {
          next();
          end = tag;
          return body;
        }
        body.push_back(parse_statement());
      } else {
        syntax(t, "unexpected " + describe(t));
      }
    }
  }

  Node parse_statement() {
    const Nest nest(*this);
    const Token& t = cur();
    const std::string tag = t.text;
    Node n = node(Node::Kind::Text, t.loc);
    if (tag == "if") {
      next();
      parse_if(n);
    } else if (tag == "for") {
      next();
      parse_for(n);
    } else if (tag == "set") {
      next();
      parse_set(n);
    } else if (tag == "macro") {
      next();
      parse_macro(n);
    } else if (tag == "generation") {
      // transformers' AssistantTracker extension: the body renders as is.
      next();
      expect_block_end();
      n.kind = Node::Kind::Generation;
      std::string end;
      n.bodies.push_back(parse_body({"endgeneration"}, end));
      expect_block_end();
    } else if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) syntax(t, "'" + tag + "' outside of a loop");
      next();
      expect_block_end();
      n.kind = tag == "break" ? Node::Kind::Break : Node::Kind::Continue;
    } else if (std::find(kUnsupportedTags.begin(), kUnsupportedTags.end(), tag) != kUnsupportedTags.end()) {
      unsupported(t, tag);
    } else {
      syntax(t, "unknown tag '" + tag + "'");
    }
    return n;
  }

  void parse_if(Node& n) {
    n.kind = Node::Kind::If;
    while (true) {
      n.conditions.push_back(parse_tuple(false, false));
      expect_block_end();
      std::string end;
      n.bodies.push_back(parse_body({"endif", "elif", "else"}, end));
      if (end == "elif") continue;
      if (end == "else") {
        expect_block_end();
        n.bodies.push_back(parse_body({"endif"}, end));
      }
      expect_block_end();
      return;
    }
  }

  std::vector<std::string> parse_targets(std::string_view what) {
    std::vector<std::string> names;
    const bool parens = skip_op("(");
    do {
      if (parens && is_op(")")) break;
      if (cur().kind != Tok::Name) syntax(cur(), qhx::cat("expected a name to assign in '", what, "', got ", describe(cur())));
      names.push_back(next().text);
    } while (skip_op(","));
    if (parens) expect_op(")");
    return names;
  }

  void parse_for(Node& n) {
    n.kind = Node::Kind::For;
    n.targets = parse_targets("for");
    if (!is_name("in")) syntax(cur(), "expected 'in', got " + describe(cur()));
    next();
    n.expr = parse_tuple(false, false, "recursive");
    if (is_name("recursive")) unsupported(cur(), "recursive");
    if (is_name("if")) {
      next();
      n.cond = parse_expression(true);
    }
    expect_block_end();
    std::string end;
    ++loop_depth_;
    n.bodies.push_back(parse_body({"endfor", "else"}, end));
    --loop_depth_;
    if (end == "else") {
      expect_block_end();
      n.bodies.push_back(parse_body({"endfor"}, end));
    }
    expect_block_end();
  }

  void parse_set(Node& n) {
    n.kind = Node::Kind::Set;
    if (cur().kind == Tok::Name && peek().kind == Tok::Op && peek().text == ".") {
      n.targets.push_back(next().text);
      next();
      n.ns_attr = expect_name();
    } else {
      n.targets = parse_targets("set");
    }
    if (skip_op("=")) {
      n.expr = parse_tuple(true, false);
      expect_block_end();
      return;
    }
    if (is_op("|")) unsupported(cur(), "set with a filter");
    if (n.targets.size() != 1 || !n.ns_attr.empty()) syntax(cur(), "expected '='");
    expect_block_end();
    std::string end;
    n.bodies.push_back(parse_body({"endset"}, end));
    expect_block_end();
  }

  void parse_macro(Node& n) {
    n.kind = Node::Kind::Macro;
    n.text = expect_name();
    expect_op("(");
    while (!is_op(")")) {
      if (!n.targets.empty()) expect_op(",");
      if (is_op(")")) break;
      n.targets.push_back(expect_name());
      if (skip_op("=")) {
        n.defaults.push_back(parse_expression(true));
      } else {
        if (!n.defaults.empty() && n.defaults.back()) syntax(cur(), "non-default argument follows default argument");
        n.defaults.push_back(nullptr);
      }
    }
    next();
    expect_block_end();
    const int saved = loop_depth_;
    loop_depth_ = 0;  // a macro body is a new function: break/continue cannot reach an outer loop
    std::string end;
    n.bodies.push_back(parse_body({"endmacro"}, end));
    loop_depth_ = saved;
    expect_block_end();
  }

  // ---- expressions ----

  bool tuple_end(std::string_view extra_end) const {
    const Token& t = cur();
    if (t.kind == Tok::VarEnd || t.kind == Tok::BlockEnd || (t.kind == Tok::Op && t.text == ")")) return true;
    return !extra_end.empty() && t.kind == Tok::Name && t.text == extra_end;
  }

  ExprPtr parse_tuple(bool with_cond, bool explicit_parens, std::string_view extra_end = {}) {
    const Loc loc = cur().loc;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (tuple_end(extra_end)) break;
      items.push_back(parse_expression(with_cond));
      if (is_op(",")) is_tuple = true;
      else break;
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items.front());
      if (!explicit_parens) syntax(cur(), "expected an expression, got " + describe(cur()));
    }
    auto e = make(Expr::Kind::Tuple, loc);
    e->args = std::move(items);
    return e;
  }

  ExprPtr parse_expression(bool with_cond) { return with_cond ? parse_condexpr() : parse_or(); }

  ExprPtr parse_condexpr() {
    const Nest nest(*this);
    ExprPtr expr = parse_or();
    while (is_name("if")) {
      const Loc loc = next().loc;
      auto c = make(Expr::Kind::Cond, loc);
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

  ExprPtr binary(std::string op, Loc loc, ExprPtr l, ExprPtr r) {
    auto e = make(Expr::Kind::Binary, loc);
    e->name = std::move(op);
    e->args.push_back(std::move(l));
    e->args.push_back(std::move(r));
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      const Loc loc = next().loc;
      left = binary("or", loc, std::move(left), parse_and());
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      const Loc loc = next().loc;
      left = binary("and", loc, std::move(left), parse_not());
    }
    return left;
  }

  ExprPtr parse_not() {
    const Nest nest(*this);
    if (!is_name("not")) return parse_compare();
    const Loc loc = next().loc;
    auto e = make(Expr::Kind::Unary, loc);
    e->name = "not";
    e->args.push_back(parse_not());
    return e;
  }

  ExprPtr parse_compare() {
    const Loc loc = cur().loc;
    ExprPtr first = parse_math1();
    auto cmp = make(Expr::Kind::Compare, loc);
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

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& op = next();
      left = binary(op.text, op.loc, std::move(left), parse_concat());
    }
    return left;
  }

  ExprPtr parse_concat() {
    const Loc loc = cur().loc;
    ExprPtr first = parse_math2();
    if (!is_op("~")) return first;
    auto e = make(Expr::Kind::Concat, loc);
    e->args.push_back(std::move(first));
    while (skip_op("~")) e->args.push_back(parse_math2());
    return e;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& op = next();
      left = binary(op.text, op.loc, std::move(left), parse_pow());
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      const Token& op = next();
      left = binary(op.text, op.loc, std::move(left), parse_unary(true));
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    const Nest nest(*this);
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      const Token& op = next();
      node = make(Expr::Kind::Unary, op.loc);
      node->name = op.text;
      node->args.push_back(parse_unary(false));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr literal(Json value, Loc loc) {
    auto e = make(Expr::Kind::Literal, loc);
    e->literal = std::move(value);
    return e;
  }

  static std::string without_underscores(std::string s) {
    s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
    return s;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    switch (t.kind) {
      case Tok::Name: {
        next();
        if (t.text == "true" || t.text == "True") return literal(true, t.loc);
        if (t.text == "false" || t.text == "False") return literal(false, t.loc);
        if (t.text == "none" || t.text == "None") return literal(nullptr, t.loc);
        auto e = make(Expr::Kind::Name, t.loc);
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
      default:
        break;
    }
    syntax(t, "unexpected " + describe(t));
  }

  ExprPtr parse_list() {
    auto e = make(Expr::Kind::List, next().loc);
    while (!is_op("]")) {
      if (!e->args.empty()) expect_op(",");
      if (is_op("]")) break;
      e->args.push_back(parse_expression(true));
    }
    next();
    return e;
  }

  ExprPtr parse_dict() {
    auto e = make(Expr::Kind::Dict, next().loc);
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

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(".") || is_op("[")) node = parse_subscript(std::move(node));
      else if (is_op("(")) node = parse_call(std::move(node));
      else return node;
    }
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op("|")) node = parse_filter(std::move(node));
      else if (is_name("is")) node = parse_test(std::move(node));
      else if (is_op("(")) node = parse_call(std::move(node));
      else return node;
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    const Token& t = next();
    if (t.text == ".") {
      const Token& attr = next();
      if (attr.kind == Tok::Name) {
        auto e = make(Expr::Kind::Attr, t.loc);
        e->name = attr.text;
        e->args.push_back(std::move(node));
        return e;
      }
      if (attr.kind == Tok::Integer) {
        const std::string digits = without_underscores(attr.text);
        std::int64_t index = 0;
        const auto res = std::from_chars(digits.data(), digits.data() + digits.size(), index);
        if (res.ec != std::errc() || res.ptr != digits.data() + digits.size()) syntax(attr, "bad index after '.'");
        auto e = make(Expr::Kind::Item, t.loc);
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
    auto e = make(is_slice ? Expr::Kind::Slice : Expr::Kind::Item, t.loc);
    e->args.push_back(std::move(node));
    if (!is_slice && !parts[0]) syntax(t, "expected an expression inside '[]'");
    for (int k = 0; k < (is_slice ? 3 : 1); ++k) e->args.push_back(std::move(parts[k]));
    return e;
  }

  // Call arguments after '(' into e->args (after what is already there) and e->kwargs.
  void parse_call_args(Expr& e) {
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

  ExprPtr parse_call(ExprPtr node) {
    auto e = make(Expr::Kind::Call, node->loc);  // errors point at what is called
    e->args.push_back(std::move(node));
    parse_call_args(*e);
    return e;
  }

  std::string dotted_name() {
    std::string n = expect_name();
    while (is_op(".") && peek().kind == Tok::Name) {
      next();
      n += "." + next().text;
    }
    return n;
  }

  ExprPtr parse_filter(ExprPtr node) {
    const Token& bar = next();
    const Token& at = cur();
    auto e = make(Expr::Kind::Filter, bar.loc);
    e->name = dotted_name();
    if (!has_filter(e->name)) unsupported(at, "filter " + e->name);
    e->args.push_back(std::move(node));
    if (is_op("(")) parse_call_args(*e);
    return e;
  }

  ExprPtr parse_test(ExprPtr node) {
    const Loc loc = next().loc;
    const bool negated = is_name("not");
    if (negated) next();
    const Token& at = cur();
    auto e = make(Expr::Kind::Test, loc);
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
    auto n = make(Expr::Kind::Unary, loc);
    n->name = "not";
    n->args.push_back(std::move(e));
    return n;
  }

  // Counts one level of nesting while alive.
  class Nest {
   public:
    explicit Nest(Parser& p) : p_(p) {
      if (++p_.nesting_ > kMaxNesting) p_.syntax(p_.cur(), "nested too deeply");
    }
    ~Nest() { --p_.nesting_; }
    Nest(const Nest&) = delete;
    Nest& operator=(const Nest&) = delete;

   private:
    Parser& p_;
  };

  std::vector<Token> toks_;
  std::string_view name_;
  std::size_t pos_ = 0;
  int loop_depth_ = 0;
  int nesting_ = 0;
};

}  // namespace

std::shared_ptr<const Program> parse_program(std::string_view source, std::string_view name) {
  auto prog = std::make_shared<Program>();
  prog->name = std::string(name);
  prog->body = Parser(lex(source, prog->name), prog->name).parse_all();
  return prog;
}

}  // namespace qhx::chat::jinja
