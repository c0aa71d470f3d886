#include "runtime/chat/interpreter.hpp"

#include "runtime/chat/builtins.hpp"
#include "runtime/chat/methods.hpp"
#include "runtime/chat/operators.hpp"

#include <fmt/format.h>

namespace troupe::chat {

void Budget::bytes(std::size_t n) {
  if (n > limits_.max_string_bytes)
    fault(FaultKind::limit,
          fmt::format("a string of {} bytes exceeds the template limit of {} bytes", n,
                      limits_.max_string_bytes));
  total_bytes_ += n;
  if (total_bytes_ > limits_.max_total_bytes)
    fault(FaultKind::limit, fmt::format("the template built more than {} bytes of strings in all",
                                        limits_.max_total_bytes));
}

void Budget::steps(std::size_t n) {
  steps_ += n;
  if (steps_ > limits_.max_steps)
    fault(FaultKind::limit, fmt::format("the template ran more than {} steps (loop iterations, "
                                        "calls and filtered items)",
                                        limits_.max_steps));
}

const Value* Scope::find(const std::string& name) const {
  for (const Scope* s = this; s; s = s->parent_.get()) {
    auto it = s->vars_.find(name);
    if (it != s->vars_.end()) return &it->second;
  }
  return nullptr;
}

Interpreter::DepthGuard::DepthGuard(Interpreter& in) : in_(in) {
  if (++in_.depth_ > in_.budget_.limits().max_call_depth) {
    --in_.depth_;
    fault(FaultKind::limit,
          fmt::format("macro calls nested deeper than {}", in_.budget_.limits().max_call_depth));
  }
}

namespace {

// What loop.changed() remembers across the iterations of one loop.
class LoopState : public Object {
 public:
  [[nodiscard]] std::string type_name() const override { return "LoopState"; }
  void release() override { last_changed.reset(); }
  std::optional<Value> last_changed;
};

// Jinja2's LoopContext: loop.index, loop.first, loop.previtem, loop.cycle(...), ...
class LoopContext : public Object {
 public:
  LoopContext(std::shared_ptr<const List> items, std::size_t index,
              std::shared_ptr<LoopState> state)
      : items_(std::move(items)), index_(index), state_(std::move(state)) {}
  [[nodiscard]] std::string type_name() const override { return "LoopContext"; }
  [[nodiscard]] std::string type_repr() const override {
    return "jinja2.runtime.LoopContext object";
  }
  [[nodiscard]] std::optional<std::string> repr() const override {
    return fmt::format("<LoopContext {}/{}>", index_ + 1, items_->size());
  }
  [[nodiscard]] std::optional<Value> getattr(std::string_view name) const override {
    const auto n = static_cast<std::int64_t>(items_->size());
    const auto i = static_cast<std::int64_t>(index_);
    if (name == "index") return Value::integer(i + 1);
    if (name == "index0") return Value::integer(i);
    if (name == "revindex") return Value::integer(n - i);
    if (name == "revindex0") return Value::integer(n - i - 1);
    if (name == "first") return Value::boolean(i == 0);
    if (name == "last") return Value::boolean(i == n - 1);
    if (name == "length") return Value::integer(n);
    if (name == "depth") return Value::integer(1);
    if (name == "depth0") return Value::integer(0);
    if (name == "previtem")
      return i > 0 ? (*items_)[index_ - 1] : Value::undefined("there is no previous item");
    if (name == "nextitem")
      return i + 1 < n ? (*items_)[index_ + 1] : Value::undefined("there is no next item");
    if (name == "cycle") {
      const auto index = index_;
      return Value::object(
          std::make_shared<Closure>("cycle", [index](Interpreter&, CallArgs& args) {
            if (args.positional.empty()) fault(FaultKind::type, "no items for cycling given");
            return args.positional[index % args.positional.size()];
          }));
    }
    if (name == "changed") {
      std::weak_ptr<LoopState> state = state_;
      return Value::object(
          std::make_shared<Closure>("changed", [state](Interpreter&, CallArgs& args) {
            const auto s = state.lock();
            Value now = Value::sequence(args.positional, SeqKind::tuple);
            if (!s || (s->last_changed && equals(*s->last_changed, now)))
              return Value::boolean(false);
            s->last_changed = now;
            return Value::boolean(true);
          }));
    }
    return std::nullopt;
  }

 private:
  std::shared_ptr<const List> items_;
  std::size_t index_;
  std::shared_ptr<LoopState> state_;
};

// A {% macro %} (or the body of a {% call %} block, as `caller`), closed over the scope it
// was defined in: it reads that scope's variables as they are when it is called.
class Macro : public Object {
 public:
  Macro(std::shared_ptr<const ast::MacroDef> def, ScopePtr closure)
      : def_(std::move(def)), closure_(std::move(closure)) {}
  [[nodiscard]] std::string type_name() const override { return "Macro"; }
  [[nodiscard]] std::string type_repr() const override { return "jinja2.runtime.Macro object"; }
  [[nodiscard]] bool callable() const override { return true; }
  [[nodiscard]] std::optional<std::string> repr() const override {
    return fmt::format("<Macro {}>", str_repr(def_->name));
  }
  [[nodiscard]] std::optional<Value> getattr(std::string_view name) const override {
    if (name == "name") return Value::string(def_->name);
    return std::nullopt;
  }
  void release() override { closure_.reset(); }

  Value call(Interpreter& in, CallArgs& args) const override {
    Interpreter::DepthGuard guard(in);
    const auto& params = def_->params;
    auto scope = std::make_shared<Scope>(closure_);
    auto kwargs = args.keyword;
    auto take_kw = [&](const std::string& name) -> std::optional<Value> {
      for (auto it = kwargs.begin(); it != kwargs.end(); ++it) {
        if (it->first == name) {
          Value v = std::move(it->second);
          kwargs.erase(it);
          return v;
        }
      }
      return std::nullopt;
    };
    for (std::size_t i = 0; i < params.size(); ++i) {
      const auto& p = params[i];
      std::optional<Value> v;
      if (i < args.positional.size()) {
        v = args.positional[i];
      } else {
        v = take_kw(p.name);
      }
      if (!v) {
        v = p.default_value
                ? in.eval(*p.default_value, scope)
                : Value::undefined(fmt::format("parameter {} was not provided", str_repr(p.name)));
      }
      scope->set(p.name, std::move(*v));
    }
    if (def_->uses_caller) {
      auto caller = take_kw("caller");
      scope->set("caller", caller ? *caller : Value::undefined("No caller defined"));
    }
    if (def_->uses_kwargs) {
      Dict d;
      for (auto& [k, v] : kwargs) d.set(k, v);
      scope->set("kwargs", Value::dict(std::move(d)));
    } else if (!kwargs.empty()) {
      if (kwargs.front().first == "caller")
        fault(FaultKind::type,
              fmt::format("macro {} was invoked with two values for the special caller "
                          "argument. This is most likely a bug.",
                          str_repr(def_->name)));
      fault(FaultKind::type, fmt::format("macro {} takes no keyword argument {}",
                                         str_repr(def_->name), str_repr(kwargs.front().first)));
    }
    if (def_->uses_varargs) {
      List rest;
      for (std::size_t i = params.size(); i < args.positional.size(); ++i)
        rest.push_back(args.positional[i]);
      scope->set("varargs", Value::sequence(std::move(rest), SeqKind::tuple));
    } else if (args.positional.size() > params.size()) {
      fault(FaultKind::type, fmt::format("macro {} takes not more than {} argument(s)",
                                         str_repr(def_->name), params.size()));
    }
    return Value::string(in.render_block(def_->body, scope));
  }

 private:
  std::shared_ptr<const ast::MacroDef> def_;
  ScopePtr closure_;
};

// Runs f; a Fault it throws without a place gets (line, column), the innermost node's.
template <class F>
auto located(int line, int column, F&& f) {
  try {
    return f();
  } catch (Fault& e) {
    if (e.line == 0) {
      e.line = line;
      e.column = column;
    }
    throw;
  }
}

template <class... Fs>
struct Overloaded : Fs... {
  using Fs::operator()...;
};
template <class... Fs>
Overloaded(Fs...) -> Overloaded<Fs...>;

}  // namespace

// ---- rendering ---------------------------------------------------------------------------
Interpreter::~Interpreter() {
  for (const auto& o : owned_) o->release();
}

std::string Interpreter::render(const ast::Body& body, const ScopePtr& context) {
  auto scope = std::make_shared<Scope>(context);
  return render_block(body, scope);
}

std::string Interpreter::render_block(const ast::Body& body, const ScopePtr& scope) {
  DepthGuard guard(*this);
  buffers_.emplace_back();
  try {
    exec(body, scope);
  } catch (...) {
    buffers_.pop_back();
    throw;
  }
  std::string out = std::move(buffers_.back());
  buffers_.pop_back();
  return out;
}

void Interpreter::emit(std::string_view text) {
  if (text.empty()) return;
  auto& out = buffers_.back();
  budget_.bytes(text.size());
  if (out.size() + text.size() > budget_.limits().max_string_bytes)
    fault(FaultKind::limit, fmt::format("the rendered text exceeds the template limit of {} bytes",
                                        budget_.limits().max_string_bytes));
  out.append(text);
}

Interpreter::Flow Interpreter::exec(const ast::Body& body, const ScopePtr& scope) {
  for (const auto& s : body) {
    const Flow f = exec(s, scope);
    if (f != Flow::normal) return f;
  }
  return Flow::normal;
}

Interpreter::Flow Interpreter::exec(const ast::Stmt& s, const ScopePtr& scope) {
  return located(s.line, s.column, [&] {
    return std::visit(
        Overloaded{
            [&](const ast::Text& t) {
              emit(t.text);
              return Flow::normal;
            },
            [&](const ast::Output& o) {
              const Value v = eval(*o.expr, scope);
              emit(v.is_string() ? v.str() : to_str(v));
              return Flow::normal;
            },
            [&](const ast::If& i) {
              for (const auto& [test, body] : i.branches)
                if (truthy(eval(*test, scope))) return exec(body, scope);
              return exec(i.otherwise, scope);
            },
            [&](const ast::For& f) { return exec_for(f, scope); },
            [&](const ast::Set& st) {
              assign(st.target, eval(*st.value, scope), scope);
              return Flow::normal;
            },
            [&](const ast::SetBlock& sb) {
              Value v = Value::string(render_block(sb.body, std::make_shared<Scope>(scope)));
              if (sb.filter) v = apply_filters(*sb.filter, v, scope);
              assign(sb.target, v, scope);
              return Flow::normal;
            },
            [&](const ast::Macro& m) {
              scope->set(m.def->name, Value::object(own(std::make_shared<Macro>(m.def, scope))));
              return Flow::normal;
            },
            [&](const ast::CallBlock& cb) {
              const auto& call = std::get<ast::Call>(cb.call->node);
              const Value callee = eval(*call.callee, scope);
              CallArgs args = eval_args(call.args, scope);
              args.keyword.emplace_back(
                  "caller", Value::object(own(std::make_shared<Macro>(cb.caller, scope))));
              const Value v = this->call(callee, args);
              emit(to_str(v));
              return Flow::normal;
            },
            [&](const ast::FilterBlock& fb) {
              const Value body =
                  Value::string(render_block(fb.body, std::make_shared<Scope>(scope)));
              emit(to_str(apply_filters(*fb.filter, body, scope)));
              return Flow::normal;
            },
            [&](const ast::With& w) {
              auto inner = std::make_shared<Scope>(scope);
              for (const auto& [target, expr] : w.assignments)
                assign(target, eval(*expr, scope), inner);
              return exec(w.body, inner);
            },
            [&](const ast::Break&) { return Flow::break_loop; },
            [&](const ast::Continue&) { return Flow::continue_loop; },
        },
        s.node);
  });
}

Interpreter::Flow Interpreter::exec_for(const ast::For& f, const ScopePtr& scope) {
  const Value iterable = eval(*f.iterable, scope);
  List items = iterate(iterable);
  if (f.filter) {
    List kept;
    for (auto& item : items) {
      budget_.steps();
      auto test_scope = std::make_shared<Scope>(scope);
      assign(f.target, item, test_scope);
      if (truthy(eval(*f.filter, test_scope))) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) return exec(f.otherwise, scope);
  auto shared = std::make_shared<const List>(std::move(items));
  auto state = own(std::make_shared<LoopState>());
  for (std::size_t i = 0; i < shared->size(); ++i) {
    budget_.steps();
    auto iter_scope = std::make_shared<Scope>(scope);
    assign(f.target, (*shared)[i], iter_scope);
    iter_scope->set("loop", Value::object(std::make_shared<LoopContext>(shared, i, state)));
    const Flow flow = exec(f.body, iter_scope);
    if (flow == Flow::break_loop) break;
  }
  return Flow::normal;
}

void Interpreter::assign(const ast::Target& t, const Value& v, const ScopePtr& scope) {
  if (!t.ns_attr.empty()) {
    const Value* ns = scope->find(t.names[0]);
    if (!ns || !ns->is_object() || !ns->object()->set_attr(t.ns_attr, v))
      fault(FaultKind::type, "cannot assign attribute on non-namespace object");
    return;
  }
  if (!t.tuple) {
    scope->set(t.names[0], v);
    return;
  }
  const List items = iterate(v);
  if (items.size() > t.names.size())
    fault(FaultKind::type, fmt::format("too many values to unpack (expected {})", t.names.size()));
  if (items.size() < t.names.size())
    fault(FaultKind::type, fmt::format("not enough values to unpack (expected {}, got {})",
                                       t.names.size(), items.size()));
  for (std::size_t i = 0; i < items.size(); ++i) scope->set(t.names[i], items[i]);
}

Value Interpreter::apply_filters(const ast::Expr& chain, const Value& base, const ScopePtr& scope) {
  const auto& f = std::get<ast::FilterCall>(chain.node);
  return located(chain.line, chain.column, [&] {
    // The innermost operand is an expression, or absent in {% filter %} / {% set %} blocks.
    Value operand = base;
    if (f.operand) {
      operand = std::holds_alternative<ast::FilterCall>(f.operand->node)
                    ? apply_filters(*f.operand, base, scope)
                    : eval(*f.operand, scope);
    }
    CallArgs args = eval_args(f.args, scope);
    return call_filter(*this, f.name, operand, args);
  });
}

List Interpreter::eval_all(const std::vector<ast::ExprPtr>& exprs, const ScopePtr& scope) {
  List out;
  out.reserve(exprs.size());
  for (const auto& x : exprs) out.push_back(eval(*x, scope));
  return out;
}

CallArgs Interpreter::eval_args(const ast::Args& args, const ScopePtr& scope) {
  CallArgs out;
  out.positional = eval_all(args.positional, scope);
  for (const auto& [name, a] : args.keyword) out.keyword.emplace_back(name, eval(*a, scope));
  return out;
}

Value Interpreter::call(const Value& callee, CallArgs& args) {
  budget_.steps();
  if (callee.is_undefined()) fail_undefined(callee);
  if (callee.is_object() && callee.object()->callable()) return callee.object()->call(*this, args);
  fault(FaultKind::type, fmt::format("'{}' object is not callable", type_name(callee)));
}

// ---- expressions -------------------------------------------------------------------------
Value Interpreter::eval(const ast::Expr& e, const ScopePtr& scope) {
  return located(e.line, e.column, [&] { return eval_node(e, scope); });
}

Value Interpreter::eval_node(const ast::Expr& e, const ScopePtr& scope) {
  return std::visit(
      Overloaded{
          [&](const ast::Literal& l) { return l.value; },
          [&](const ast::Name& n) {
            const Value* v = scope->find(n.name);
            return v ? *v : Value::undefined(fmt::format("{} is undefined", str_repr(n.name)));
          },
          [&](const ast::ListLit& l) { return Value::sequence(eval_all(l.items, scope)); },
          [&](const ast::TupleLit& l) {
            return Value::sequence(eval_all(l.items, scope), SeqKind::tuple);
          },
          [&](const ast::DictLit& l) {
            Dict d;
            for (const auto& [k, v] : l.items) {
              const Value key = eval(*k, scope);
              if (!key.is_string())
                fault(FaultKind::unsupported,
                      fmt::format("dict keys must be strings in troupe's templates, not {}",
                                  type_name(key)));
              d.set(key.str(), eval(*v, scope));
            }
            return Value::dict(std::move(d));
          },
          [&](const ast::GetAttr& g) { return get_attr(eval(*g.object, scope), g.name); },
          [&](const ast::GetItem& g) {
            const Value obj = eval(*g.object, scope);
            if (const auto* s = std::get_if<ast::SliceLit>(&g.key->node)) {
              auto part = [&](const ast::ExprPtr& p) { return p ? eval(*p, scope) : Value(); };
              return get_slice(obj, part(s->start), part(s->stop), part(s->step));
            }
            return get_item(obj, eval(*g.key, scope));
          },
          [&](const ast::SliceLit&) -> Value {
            fault(FaultKind::syntax, "a slice can only be used as a subscript");
          },
          [&](const ast::Call& c) {
            const Value callee = eval(*c.callee, scope);
            CallArgs args = eval_args(c.args, scope);
            return call(callee, args);
          },
          [&](const ast::FilterCall&) { return apply_filters(e, Value(), scope); },
          [&](const ast::TestCall& t) {
            const Value v = eval(*t.operand, scope);
            CallArgs args = eval_args(t.args, scope);
            return Value::boolean(call_test(*this, t.name, v, args));
          },
          [&](const ast::Unary& u) {
            const Value v = eval(*u.operand, scope);
            switch (u.op) {
              case ast::UnaryOp::neg:
                return negate(v);
              case ast::UnaryOp::pos:
                return unary_plus(v);
              case ast::UnaryOp::not_:
                return Value::boolean(!truthy(v));
            }
            return v;
          },
          [&](const ast::Binary& b) {
            if (b.op == ast::BinaryOp::and_) {
              Value left = eval(*b.left, scope);
              return truthy(left) ? eval(*b.right, scope) : left;
            }
            if (b.op == ast::BinaryOp::or_) {
              Value left = eval(*b.left, scope);
              return truthy(left) ? left : eval(*b.right, scope);
            }
            const Value left = eval(*b.left, scope);
            const Value right = eval(*b.right, scope);
            return binary(b.op, left, right, budget_);
          },
          [&](const ast::Compare& c) {
            Value left = eval(*c.first, scope);
            for (const auto& [op, expr] : c.rest) {
              Value right = eval(*expr, scope);
              if (!compare(op, left, right)) return Value::boolean(false);
              left = std::move(right);
            }
            return Value::boolean(true);
          },
          [&](const ast::CondExpr& c) {
            if (truthy(eval(*c.test, scope))) return eval(*c.then, scope);
            if (c.otherwise) return eval(*c.otherwise, scope);
            return Value::undefined(
                fmt::format("the inline if-expression on line {} evaluated to false "
                            "and no else section was defined.",
                            e.line));
          },
          [&](const ast::Concat& c) {
            std::string out;
            for (const auto& x : c.items) {
              const Value v = eval(*x, scope);
              const std::string piece = to_str(v);
              budget_.bytes(out.size() + piece.size());
              out += piece;
            }
            return Value::string(std::move(out));
          },
      },
      e.node);
}

}  // namespace troupe::chat
