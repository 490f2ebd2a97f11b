// The Jinja lexer: template source -> text and tag tokens, with the whitespace
// rules of the environment transformers uses (trim_blocks, lstrip_blocks,
// `-`/`+` markers, one trailing newline dropped).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace qhx::chat::jinja {

struct Loc {
  int line = 1;
  int col = 1;
};

enum class Tok {
  Text,        // raw template text between tags
  VarBegin,    // {{
  VarEnd,      // }}
  BlockBegin,  // {%
  BlockEnd,    // %}
  Name,
  String,  // value already unescaped
  Integer,
  Float,
  Op,   // operator or punctuation: + - * / // % ** ~ [ ] ( ) { } == != > >= < <= = . : | ,
  End,  // end of template
};

struct Token {
  Tok kind;
  std::string text;
  Loc loc;
};

// Throws qhx::Error "NAME:LINE:COL: ..." on a lexical error (unclosed tag or
// comment, unbalanced brackets, a bad character or string literal).
std::vector<Token> lex(std::string_view source, std::string_view name);

// "NAME:LINE:COL: " — the prefix of every error that points into a template.
std::string where(std::string_view name, Loc loc);

}  // namespace qhx::chat::jinja
