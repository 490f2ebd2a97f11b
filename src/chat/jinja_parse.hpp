// The parser's shared half: the token cursor and the expression grammar
// (jinja_expr_parser.cpp), with Jinja's precedence (jinja2/parser.py): a test
// binds tighter than arithmetic, `-x|f` filters the negation, `**` is
// left-associative. The statement parser (jinja_parser.cpp) extends it.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "chat/jinja_ast.hpp"
#include "qhexrt/error.hpp"

namespace qhx::chat::jinja {

// Nesting deeper than this is refused rather than overflowing the stack (in
// parsing, and in rendering, whose recursion follows the tree).
constexpr int kMaxNesting = 128;

ExprPtr make_expr(Expr::Kind kind, Loc loc);

class ExprParser {
 public:
  ExprParser(std::vector<Token> tokens, std::string_view name) : toks_(std::move(tokens)), name_(name) {}

  // A comma-separated expression list (a tuple when there is a comma), up to
  // the end of the tag, a ')' or the name `extra_end`.
  ExprPtr parse_tuple(bool with_cond, bool explicit_parens, std::string_view extra_end = {});
  // One expression; with_cond admits `x if c else y` at its top.
  ExprPtr parse_expression(bool with_cond);

 protected:
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

  // Counts one level of nesting while alive.
  class Nest {
   public:
    explicit Nest(ExprParser& p) : p_(p) {
      if (++p_.nesting_ > kMaxNesting) p_.syntax(p_.cur(), "nested too deeply");
    }
    ~Nest() { --p_.nesting_; }
    Nest(const Nest&) = delete;
    Nest& operator=(const Nest&) = delete;

   private:
    ExprParser& p_;
  };

 private:
  bool tuple_end(std::string_view extra_end) const;
  ExprPtr parse_condexpr();
  ExprPtr binary(std::string op, Loc loc, ExprPtr l, ExprPtr r);
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr literal(Json value, Loc loc);
  ExprPtr parse_primary();
  ExprPtr parse_list();
  ExprPtr parse_dict();
  ExprPtr parse_postfix(ExprPtr node);
  ExprPtr parse_filter_expr(ExprPtr node);
  ExprPtr parse_subscript(ExprPtr node);
  void parse_call_args(Expr& e);
  ExprPtr parse_call(ExprPtr node);
  std::string dotted_name();
  ExprPtr parse_filter(ExprPtr node);
  ExprPtr parse_test(ExprPtr node);

  std::vector<Token> toks_;
  std::string_view name_;
  std::size_t pos_ = 0;
  int nesting_ = 0;
};

}  // namespace qhx::chat::jinja
