// The syntax tree the parser builds and the renderer walks.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/jinja_lexer.hpp"

namespace qhx::chat::jinja {

// Python keeps dict keys in insertion order, and templates iterate and print them.
using Json = nlohmann::ordered_json;

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    Literal,  // literal
    Name,     // name
    List,     // args
    Tuple,    // args
    Dict,     // args: key, value, key, value...
    Attr,     // args[0].name
    Item,     // args[0][args[1]]
    Slice,    // args[0][args[1]:args[2]:args[3]] (null children are absent bounds)
    Call,     // args[0](args[1..], kwargs)
    Filter,   // args[0] | name(args[1..], kwargs)
    Test,     // args[0] is name(args[1..], kwargs)
    Unary,    // name ("-", "+", "not") args[0]
    Binary,   // args[0] name args[1]; name is an arithmetic operator, "and" or "or"
    Compare,  // args[0] ops[0] args[1] ops[1] args[2]... ("==", "<", "in", "not in"...)
    Concat,   // args[0] ~ args[1] ~ ...
    Cond,     // args[1] if args[0] else args[2] (args[2] may be null)
  };
  Kind kind = Kind::Literal;
  Loc loc;
  Json literal;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
};

struct Node;
using Body = std::vector<Node>;

struct Node {
  enum class Kind {
    Text,        // text
    Output,      // {{ expr }}
    If,          // conditions[i] -> bodies[i]; a trailing extra body is the else
    For,         // for targets in expr [if cond] bodies[0] [else bodies[1]]
    Set,         // set targets (or ns_attr on targets[0]) = expr; or bodies[0] with a block set
    Macro,       // macro name(targets, defaults) bodies[0]
    Generation,  // bodies[0]
    Break,
    Continue,
  };
  Kind kind = Kind::Text;
  Loc loc;
  std::string text;                 // Text; Macro name
  ExprPtr expr;                     // Output, For iterable, Set value
  ExprPtr cond;                     // For filter
  std::vector<ExprPtr> conditions;  // If
  std::vector<Body> bodies;
  std::vector<std::string> targets;  // For / Set names, Macro parameters
  std::vector<ExprPtr> defaults;     // Macro parameter defaults (null when none)
  std::string ns_attr;               // Set: assigns targets[0].ns_attr
};

// A parsed template: its statements and the name used in messages.
struct Program {
  std::string name;
  Body body;
};

std::shared_ptr<const Program> parse_program(std::string_view source, std::string_view name);

}  // namespace qhx::chat::jinja
