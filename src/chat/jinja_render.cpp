// The renderer: walks the syntax tree with Jinja's scoping (a for loop's body
// gets a fresh scope each iteration, a macro sees only its arguments and the
// template's top level) and Python's value semantics.
#include "chat/jinja.hpp"

#include <algorithm>

#include "chat/jinja_ast.hpp"
#include "chat/jinja_builtins.hpp"
#include "chat/jinja_value.hpp"
#include "chat/py_string.hpp"
#include "qhexrt/error.hpp"

namespace qhx::chat {
namespace jinja {
namespace {

using Frame = std::vector<std::pair<std::string, Value>>;
enum class Flow { Normal, Break, Continue };

constexpr int kMaxMacroDepth = 64;  // far beyond what chat templates need, well within the stack

class Renderer {
 public:
  Renderer(std::shared_ptr<const Program> prog, const Json& context) : prog_(std::move(prog)), context_(context) {
    if (!context.is_object()) qhx::fail(prog_->name, ": the render context must be a JSON object");
    active_.push_back(&root_);
  }

  std::string run() {
    std::string out;
    exec(prog_->body, out);
    return out;
  }

 private:
  [[noreturn]] void fail_at(Loc loc, const std::string& msg) const { qhx::fail(where(prog_->name, loc), msg); }

  Value lookup(const std::string& name) const {
    for (auto f = active_.rbegin(); f != active_.rend(); ++f)
      for (auto it = (*f)->rbegin(); it != (*f)->rend(); ++it)
        if (it->first == name) return it->second;
    const auto it = context_.find(name);
    if (it != context_.end()) return Value::inside(nullptr, &*it);  // the context outlives the render
    return global(name);
  }

  static void assign(Frame& f, const std::string& name, Value v) {
    for (auto& [k, x] : f)
      if (k == name) {
        x = std::move(v);
        return;
      }
    f.emplace_back(name, std::move(v));
  }

  // Binds `targets` to `v` in `f`, unpacking when there are several.
  static void bind(Frame& f, const std::vector<std::string>& targets, const Value& v) {
    if (targets.size() == 1) return assign(f, targets[0], v);
    const std::vector<Value> parts = iterate(v);
    if (parts.size() != targets.size())
      fault(parts.size() < targets.size() ? "not enough" : "too many", " values to unpack (expected ", targets.size(),
            ", got ", parts.size(), ")");
    for (std::size_t i = 0; i < targets.size(); ++i) assign(f, targets[i], parts[i]);
  }

  Flow exec(const Body& body, std::string& out) {
    for (const Node& n : body) {
      const Flow flow = exec(n, out);
      if (flow != Flow::Normal) return flow;
    }
    return Flow::Normal;
  }

  Flow exec(const Node& n, std::string& out) {
    try {
      return exec_node(n, out);
    } catch (const Fault& f) {
      fail_at(n.loc, f.message);
    }
  }

  Flow exec_node(const Node& n, std::string& out) {
    switch (n.kind) {
      case Node::Kind::Text: out += n.text; return Flow::Normal;
      case Node::Kind::Output: out += to_str(eval(*n.expr)); return Flow::Normal;
      case Node::Kind::If:
        for (std::size_t i = 0; i < n.conditions.size(); ++i)
          if (truthy(eval(*n.conditions[i]))) return exec(n.bodies[i], out);
        return n.bodies.size() > n.conditions.size() ? exec(n.bodies.back(), out) : Flow::Normal;
      case Node::Kind::For: return exec_for(n, out);
      case Node::Kind::Set: exec_set(n); return Flow::Normal;
      case Node::Kind::Macro: assign(*active_.back(), n.text, macro(n)); return Flow::Normal;
      case Node::Kind::Generation: return exec(n.bodies[0], out);
      case Node::Kind::Break: return Flow::Break;
      case Node::Kind::Continue: return Flow::Continue;
    }
    return Flow::Normal;
  }

  Flow exec_for(const Node& n, std::string& out) {
    std::vector<Value> items = iterate(eval(*n.expr));
    if (n.cond) {
      // The loop filter sees the loop's targets (and not yet its `loop`).
      std::vector<Value> kept;
      for (const Value& item : items) {
        Frame f;
        bind(f, n.targets, item);
        active_.push_back(&f);
        const bool keep = truthy(eval(*n.cond));
        active_.pop_back();
        if (keep) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      if (n.bodies.size() < 2) return Flow::Normal;
      Frame f;
      active_.push_back(&f);
      const Flow flow = exec(n.bodies[1], out);
      active_.pop_back();
      return flow;
    }
    const std::int64_t len = static_cast<std::int64_t>(items.size());
    for (std::int64_t i = 0; i < len; ++i) {
      const Value& item = items[static_cast<std::size_t>(i)];
      Frame f;
      bind(f, n.targets, item);
      Json loop = {{"index", i + 1},  {"index0", i},          {"revindex", len - i}, {"revindex0", len - i - 1},
                   {"first", i == 0}, {"last", i == len - 1}, {"length", len},       {"depth", 1},
                   {"depth0", 0}};
      if (i > 0) loop["previtem"] = items[static_cast<std::size_t>(i - 1)].to_json();
      if (i + 1 < len) loop["nextitem"] = items[static_cast<std::size_t>(i + 1)].to_json();
      assign(f, "loop", Value::of(std::move(loop)));
      active_.push_back(&f);
      const Flow flow = exec(n.bodies[0], out);
      active_.pop_back();
      if (flow == Flow::Break) break;
    }
    return Flow::Normal;
  }

  void exec_set(const Node& n) {
    Value v;
    if (n.expr) {
      v = eval(*n.expr);
    } else {
      std::string text;
      exec(n.bodies[0], text);
      v = Value::of(text);
    }
    if (n.ns_attr.empty()) return bind(*active_.back(), n.targets, v);
    const Value target = lookup(n.targets[0]);
    if (target.kind() != Value::Kind::Namespace) fault("cannot assign attribute on non-namespace object");
    Namespace& ns = target.ns();
    if (Value* slot = ns.find(n.ns_attr))
      *slot = v;
    else
      ns.attrs.emplace_back(n.ns_attr, v);
  }

  Value macro(const Node& n) {
    return Value::of_callable(n.text, [this, &n](const CallArgs& c) {
      const std::size_t nparams = n.targets.size();
      if (c.pos.size() > nparams) fault("macro '", n.text, "' takes not more than ", nparams, " argument(s)");
      if (depth_ >= kMaxMacroDepth) fault("macro '", n.text, "': recursion deeper than ", kMaxMacroDepth);
      Frame f;
      std::vector<bool> given(nparams, false);
      for (std::size_t i = 0; i < c.pos.size(); ++i) {
        assign(f, n.targets[i], c.pos[i]);
        given[i] = true;
      }
      for (const auto& [k, v] : c.kw) {
        const auto it = std::find(n.targets.begin(), n.targets.end(), k);
        if (it == n.targets.end()) fault("macro '", n.text, "' has no argument named '", k, "'");
        const std::size_t i = static_cast<std::size_t>(it - n.targets.begin());
        if (given[i]) fault("macro '", n.text, "' got multiple values for argument '", k, "'");
        assign(f, k, v);
        given[i] = true;
      }
      std::vector<Frame*> saved = std::move(active_);
      active_ = {&root_, &f};
      ++depth_;
      std::string text;
      try {
        for (std::size_t i = 0; i < nparams; ++i) {
          if (given[i]) continue;
          assign(f, n.targets[i],
                 n.defaults[i] ? eval(*n.defaults[i]) : Value::undefined("'" + n.targets[i] + "' is undefined"));
        }
        exec(n.bodies[0], text);
      } catch (...) {
        --depth_;
        active_ = std::move(saved);
        throw;
      }
      --depth_;
      active_ = std::move(saved);
      return Value::of(text);
    });
  }

  Value eval(const Expr& e) {
    try {
      return eval_expr(e);
    } catch (const Fault& f) {
      fail_at(e.loc, f.message);
    }
  }

  CallArgs call_args(const Expr& e, std::size_t first) {
    CallArgs c;
    for (std::size_t i = first; i < e.args.size(); ++i) c.pos.push_back(eval(*e.args[i]));
    for (const auto& [k, x] : e.kwargs) c.kw.emplace_back(k, eval(*x));
    return c;
  }

  std::optional<std::int64_t> slice_bound(const ExprPtr& e) {
    if (!e) return std::nullopt;
    const Value v = eval(*e);
    if (v.is_none()) return std::nullopt;
    if (!v.is_int()) fault("slice indices must be integers or None");
    return v.as_int();
  }

  Value eval_slice(const Expr& e) {
    const Value obj = eval(*e.args[0]);
    const auto start = slice_bound(e.args[1]), stop = slice_bound(e.args[2]), step = slice_bound(e.args[3]);
    if (obj.is_undefined()) obj.fail_undefined();
    if (obj.is_string()) {
      const std::u32string u = py::decode(obj.str_ref());
      std::u32string out;
      for (std::size_t i : py::slice_indices(u.size(), start, stop, step)) out += u[i];
      return Value::of(py::encode(out));
    }
    if (!obj.is_list()) fault("'", type_name(obj), "' object is not subscriptable");
    Json out = Json::array();
    for (std::size_t i : py::slice_indices(obj.data().size(), start, stop, step)) out.push_back(obj.data()[i]);
    return Value::of(std::move(out));
  }

  Value eval_call(const Expr& e) {
    const Expr& callee = *e.args[0];
    Value fn;
    if (callee.kind == Expr::Kind::Attr) {
      const Value obj = eval(*callee.args[0]);
      fn = get_attr(obj, callee.name);
      if (fn.is_undefined() && (obj.is_string() || obj.is_list() || obj.is_dict())) {
        // `loop` is held as a dict, but its methods (cycle, changed) are the loop's.
        const Expr& base = *callee.args[0];
        const bool is_loop = base.kind == Expr::Kind::Name && base.name == "loop";
        fault("unsupported Jinja construct '", is_loop ? "loop" : type_name(obj), ".", callee.name,
              "' (an unknown method)");
      }
    } else {
      fn = eval(callee);
    }
    if (fn.is_undefined()) fn.fail_undefined();
    if (fn.kind() != Value::Kind::Callable) fault("'", type_name(fn), "' object is not callable");
    return fn.callable().fn(call_args(e, 1));
  }

  static bool compare(const std::string& op, const Value& l, const Value& r) {
    if (op == "==") return equal(l, r);
    if (op == "!=") return !equal(l, r);
    if (op == "<") return less(l, r);
    if (op == ">") return less(r, l);
    if (op == "<=") return less(l, r) || equal(l, r);
    if (op == ">=") return less(r, l) || equal(l, r);
    if (op == "in") return contains(r, l);
    return !contains(r, l);  // "not in"
  }

  Value eval_expr(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::Literal: return Value::inside(std::shared_ptr<const Json>(prog_, &e.literal), &e.literal);
      case Expr::Kind::Name: return lookup(e.name);
      case Expr::Kind::List:
      case Expr::Kind::Tuple: {
        Json out = Json::array();
        for (const ExprPtr& x : e.args) out.push_back(eval(*x).to_json());
        return Value::of(std::move(out));
      }
      case Expr::Kind::Dict: {
        Json out = Json::object();
        for (std::size_t i = 0; i + 1 < e.args.size(); i += 2) {
          const Value k = eval(*e.args[i]);
          if (!k.is_string()) fault("dict keys must be strings here, not ", type_name(k));
          out[k.str_ref()] = eval(*e.args[i + 1]).to_json();
        }
        return Value::of(std::move(out));
      }
      case Expr::Kind::Attr: return get_attr(eval(*e.args[0]), e.name);
      case Expr::Kind::Item: {
        const Value obj = eval(*e.args[0]);
        return get_item(obj, eval(*e.args[1]));
      }
      case Expr::Kind::Slice: return eval_slice(e);
      case Expr::Kind::Call: return eval_call(e);
      case Expr::Kind::Filter: {
        const Value input = eval(*e.args[0]);
        return apply_filter(e.name, input, call_args(e, 1));
      }
      case Expr::Kind::Test: {
        const Value input = eval(*e.args[0]);
        return Value::of(apply_test(e.name, input, call_args(e, 1)));
      }
      case Expr::Kind::Unary: {
        const Value v = eval(*e.args[0]);
        if (e.name == "not") return Value::of(!truthy(v));
        if (e.name == "-") return negate(v);
        if (v.is_undefined()) v.fail_undefined();
        if (!v.is_number()) fault("bad operand type for unary +: '", type_name(v), "'");
        return v;
      }
      case Expr::Kind::Binary: {
        const Value l = eval(*e.args[0]);
        if (e.name == "and") return truthy(l) ? eval(*e.args[1]) : l;
        if (e.name == "or") return truthy(l) ? l : eval(*e.args[1]);
        return binary_op(e.name, l, eval(*e.args[1]));
      }
      case Expr::Kind::Compare: {
        Value l = eval(*e.args[0]);
        for (std::size_t i = 0; i < e.ops.size(); ++i) {
          Value r = eval(*e.args[i + 1]);
          if (!compare(e.ops[i], l, r)) return Value::of(false);
          l = std::move(r);
        }
        return Value::of(true);
      }
      case Expr::Kind::Concat: {
        std::string out;
        for (const ExprPtr& x : e.args) out += to_str(eval(*x));
        return Value::of(out);
      }
      case Expr::Kind::Cond:
        if (truthy(eval(*e.args[0]))) return eval(*e.args[1]);
        if (e.args[2]) return eval(*e.args[2]);
        return Value::undefined("the inline if-expression evaluated to false and no else section was defined");
    }
    return Value();
  }

  std::shared_ptr<const Program> prog_;
  const Json& context_;
  Frame root_;
  std::vector<Frame*> active_;
  int depth_ = 0;
};

}  // namespace
}  // namespace jinja

Template Template::parse(std::string_view source, std::string_view name) {
  return Template(jinja::parse_program(source, name));
}

std::string Template::render(const nlohmann::ordered_json& context) const {
  return jinja::Renderer(program_, context).run();
}

std::string Template::render(const nlohmann::json& context) const { return render(nlohmann::ordered_json(context)); }

const std::string& Template::name() const { return program_->name; }

}  // namespace qhx::chat
