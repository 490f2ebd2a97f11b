#include "chat/jinja_lexer.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>

#include "chat/py_string.hpp"
#include "qhexrt/error.hpp"

namespace qhx::chat::jinja {

std::string where(std::string_view name, Loc loc) { return qhx::cat(name, ':', loc.line, ':', loc.col, ": "); }

namespace {

// Jinja splits the source on \r\n, \r and \n, joins the lines with \n and,
// without keep_trailing_newline, drops one final line break.
std::string normalize_newlines(std::string_view src) {
  std::string out;
  out.reserve(src.size());
  for (std::size_t i = 0; i < src.size(); ++i) {
    if (src[i] == '\r') {
      out += '\n';
      if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
    } else {
      out += src[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

class Lexer {
 public:
  Lexer(std::string_view src, std::string_view name) : src_(normalize_newlines(src)), name_(name) {
    for (std::size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    if (py::first_invalid(src_) != src_.size()) fail_at(py::first_invalid(src_), "invalid UTF-8");
  }

  std::vector<Token> run() {
    bool line_starting = true;
    while (pos_ < src_.size()) {
      const std::size_t open = next_tag(pos_);
      if (open == std::string::npos) {
        push(Tok::Text, src_.substr(pos_), pos_);
        break;
      }
      const char kind = src_[open + 1];
      const char sign = open + 2 < src_.size() && (src_[open + 2] == '-' || src_[open + 2] == '+') ? src_[open + 2] : 0;
      std::string text = src_.substr(pos_, open - pos_);
      if (sign == '-') {
        text = py::strip(text, std::nullopt, false, true);
      } else if (sign != '+' && kind != '{') {
        // lstrip_blocks: a block or comment tag alone after indentation takes the indentation away.
        const std::size_t line_start = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
        const std::string_view tail = std::string_view(text).substr(line_start);
        if ((line_start > 0 || line_starting) && !tail.empty() && py::strip(tail, std::nullopt, true, true).empty())
          text.resize(line_start);
      }
      push(Tok::Text, text, pos_);
      pos_ = open + 2 + (sign != 0 ? 1 : 0);
      if (kind == '#') {
        line_starting = comment(open);
      } else {
        line_starting = tag(kind == '{' ? Tok::VarBegin : Tok::BlockBegin, open);
      }
    }
    tokens_.push_back(Token{Tok::End, "", loc(src_.size())});
    return std::move(tokens_);
  }

 private:
  std::size_t next_tag(std::size_t from) const {
    for (std::size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1))
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    return std::string::npos;
  }

  Loc loc(std::size_t offset) const {
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    const std::size_t start = *(it - 1);
    Loc l;
    l.line = static_cast<int>(it - line_starts_.begin());
    l.col = 1 + static_cast<int>(py::length(std::string_view(src_).substr(start, offset - start)));
    return l;
  }

  [[noreturn]] void fail_at(std::size_t offset, std::string_view msg) const {
    qhx::fail(where(name_, loc(offset)), "syntax error: ", msg);
  }

  void push(Tok kind, std::string text, std::size_t offset) {
    if (kind == Tok::Text && text.empty()) return;
    tokens_.push_back(Token{kind, std::move(text), loc(offset)});
  }

  // Skips past the comment's end; returns whether what it consumed ends a line.
  bool comment(std::size_t open) {
    const std::size_t close = src_.find("#}", pos_);
    if (close == std::string::npos) fail_at(open, "missing end of comment tag");
    if (close > pos_ && src_[close - 1] == '-') {
      pos_ = skip_space(close + 2);
    } else if (close > pos_ && src_[close - 1] == '+') {
      pos_ = close + 2;
    } else {
      pos_ = close + 2 + (close + 2 < src_.size() && src_[close + 2] == '\n' ? 1 : 0);  // trim_blocks
    }
    return src_[pos_ - 1] == '\n';
  }

  std::size_t skip_space(std::size_t i) const {
    while (i < src_.size()) {
      std::size_t n = 0;
      if (!py::is_space(py::decode_at(src_, i, n)) || n == 0) break;
      i += n;
    }
    return i;
  }

  // Tokens of a {{ }} or {% %} tag, up to its end marker; returns whether the end consumed a newline.
  bool tag(Tok begin, std::size_t open) {
    const bool block = begin == Tok::BlockBegin;
    push(begin, "", open);
    std::string brackets;  // closers expected, innermost last
    while (true) {
      while (pos_ < src_.size() && std::isspace(static_cast<unsigned char>(src_[pos_]))) ++pos_;
      if (pos_ >= src_.size())
        fail_at(open,
                block ? "unexpected end of template, expected '%}'" : "unexpected end of template, expected '}}'");
      if (brackets.empty()) {
        const char close = block ? '%' : '}';
        const std::size_t at = pos_;
        const bool minus = src_.compare(pos_, 3, std::string{'-', close, '}'}) == 0;
        const bool plus = block && src_.compare(pos_, 3, "+%}") == 0;
        if (minus || plus || src_.compare(pos_, 2, std::string{close, '}'}) == 0) {
          pos_ += minus || plus ? 3 : 2;
          if (minus)
            pos_ = skip_space(pos_);
          else if (block && !plus && pos_ < src_.size() && src_[pos_] == '\n')
            ++pos_;  // trim_blocks
          push(block ? Tok::BlockEnd : Tok::VarEnd, "", at);
          return src_[pos_ - 1] == '\n';
        }
      }
      token(brackets);
    }
  }

  void token(std::string& brackets) {
    const std::size_t at = pos_;
    const char c = src_[pos_];
    if (std::isdigit(static_cast<unsigned char>(c))) return number(at);
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      while (pos_ < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) ++pos_;
      return push(Tok::Name, src_.substr(at, pos_ - at), at);
    }
    if (c == '\'' || c == '"') return string(at);
    static const char* const kOps[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[",
                                       "]",  "(",  ")",  "{",  "}",  ">",  "<", "=", ".", ":", "|", ",", ";"};
    for (const char* op : kOps) {
      const std::string_view o(op);
      if (src_.compare(pos_, o.size(), o) != 0) continue;
      pos_ += o.size();
      if (o == "(" || o == "[" || o == "{") {
        brackets += o == "(" ? ')' : o == "[" ? ']' : '}';
      } else if (o == ")" || o == "]" || o == "}") {
        if (brackets.empty()) fail_at(at, qhx::cat("unexpected '", o, "'"));
        if (brackets.back() != o[0]) fail_at(at, qhx::cat("unexpected '", o, "', expected '", brackets.back(), "'"));
        brackets.pop_back();
      }
      return push(Tok::Op, std::string(o), at);
    }
    fail_at(at, qhx::cat("unexpected char '", c, "'"));
  }

  // Integers and floats as Jinja writes them: digits with _ separators, a
  // fraction and/or an exponent, or 0b/0o/0x integers.
  void number(std::size_t at) {
    auto digits = [&](auto is_digit) {
      const std::size_t start = pos_;
      while (pos_ < src_.size() && (is_digit(src_[pos_]) || (src_[pos_] == '_' && pos_ > start))) ++pos_;
      return pos_ > start;
    };
    auto dec = [](char ch) {
      return std::isdigit(static_cast<unsigned char>(ch)) != 0;
    };
    if (src_[pos_] == '0' && pos_ + 1 < src_.size() && std::strchr("bBoOxX", src_[pos_ + 1]) != nullptr) {
      const char base = static_cast<char>(std::tolower(static_cast<unsigned char>(src_[pos_ + 1])));
      pos_ += 2;
      digits([&](char ch) {
        return base == 'x'   ? std::isxdigit(static_cast<unsigned char>(ch)) != 0
               : base == 'o' ? ch >= '0' && ch <= '7'
                             : ch == '0' || ch == '1';
      });
      return push(Tok::Integer, src_.substr(at, pos_ - at), at);
    }
    digits(dec);
    bool is_float = false;
    if (pos_ + 1 < src_.size() && src_[pos_] == '.' && dec(src_[pos_ + 1])) {
      ++pos_;
      digits(dec);
      is_float = true;
    }
    if (pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
      std::size_t p = pos_ + 1;
      if (p < src_.size() && (src_[p] == '+' || src_[p] == '-')) ++p;
      if (p < src_.size() && dec(src_[p])) {
        pos_ = p;
        digits(dec);
        is_float = true;
      }
    }
    push(is_float ? Tok::Float : Tok::Integer, src_.substr(at, pos_ - at), at);
  }

  // A quoted literal with Python's escapes (Jinja decodes them with "unicode-escape").
  void string(std::size_t at) {
    const char quote = src_[pos_++];
    std::string out;
    auto hex = [&](std::size_t n) {
      if (pos_ + n > src_.size()) fail_at(at, "truncated \\x, \\u or \\U escape");
      std::uint32_t v = 0;
      for (std::size_t k = 0; k < n; ++k) {
        const char h = src_[pos_ + k];
        if (!std::isxdigit(static_cast<unsigned char>(h))) fail_at(at, "truncated \\x, \\u or \\U escape");
        v = v * 16 + static_cast<std::uint32_t>(
                         std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : std::tolower(h) - 'a' + 10);
      }
      pos_ += n;
      if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) fail_at(at, "escape is not a Unicode scalar value");
      py::append(out, static_cast<char32_t>(v));
    };
    while (true) {
      if (pos_ >= src_.size()) fail_at(at, "unterminated string literal");
      const char c = src_[pos_++];
      if (c == quote) break;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= src_.size()) fail_at(at, "unterminated string literal");
      const char e = src_[pos_++];
      switch (e) {
        case '\n': break;  // a backslash-newline continues the line
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'v': out += '\v'; break;
        case 'x': hex(2); break;
        case 'u': hex(4); break;
        case 'U': hex(8); break;
        default:
          if (e >= '0' && e <= '7') {
            unsigned v = static_cast<unsigned>(e - '0');
            for (int k = 0; k < 2 && pos_ < src_.size() && src_[pos_] >= '0' && src_[pos_] <= '7'; ++k)
              v = v * 8 + static_cast<unsigned>(src_[pos_++] - '0');
            py::append(out, static_cast<char32_t>(v));
          } else {
            // Python keeps an unknown escape as written.
            out += '\\';
            out += e;
          }
      }
    }
    push(Tok::String, out, at);
  }

  std::string src_;
  std::string_view name_;
  std::vector<std::size_t> line_starts_{0};
  std::size_t pos_ = 0;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> lex(std::string_view source, std::string_view name) { return Lexer(source, name).run(); }

}  // namespace qhx::chat::jinja
