// The statement half of the parser: the template's text, output and block
// tags, built on the expression parser (jinja_parse.hpp).
#include <algorithm>
#include <array>

#include "chat/jinja_parse.hpp"
#include "qhexrt/error.hpp"

namespace qhx::chat::jinja {
namespace {

// Jinja's own tags (and the `do` extension) that this renderer leaves out:
// they are refused by name rather than reported as unknown.
constexpr std::array<std::string_view, 13> kUnsupportedTags = {"include", "extends", "block",   "call",       "filter",
                                                               "with",    "import",  "from",    "autoescape", "raw",
                                                               "do",      "trans",   "endblock"};

Node node(Node::Kind kind, Loc loc) {
  Node n;
  n.kind = kind;
  n.loc = loc;
  return n;
}

class Parser : public ExprParser {
 public:
  using ExprParser::ExprParser;

  Body parse_all() {
    std::string end;
    Body body = parse_body({}, end);
    return body;
  }

 private:
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
      if (cur().kind != Tok::Name)
        syntax(cur(), qhx::cat("expected a name to assign in '", what, "', got ", describe(cur())));
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

  int loop_depth_ = 0;
};

}  // namespace

std::shared_ptr<const Program> parse_program(std::string_view source, std::string_view name) {
  auto prog = std::make_shared<Program>();
  prog->name = std::string(name);
  prog->body = Parser(lex(source, prog->name), prog->name).parse_all();
  return prog;
}

}  // namespace qhx::chat::jinja
