// Runs a parsed template: statements write to an output buffer, expressions evaluate to
// Values. Scoping follows Jinja2: a for-loop iteration, a macro call, a block set, a filter
// block and a with block each get a fresh scope whose reads fall through to the enclosing
// one and whose writes stay local (so `{% set %}` inside a loop does not leak, which is why
// templates use namespace()); if-blocks share their scope. One Interpreter renders once.
#pragma once

#include "runtime/chat/ast.hpp"
#include "runtime/chat/limits.hpp"
#include "runtime/chat/value.hpp"

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace troupe::chat {

class Scope {
 public:
  explicit Scope(std::shared_ptr<Scope> parent = nullptr) : parent_(std::move(parent)) {}
  /// The innermost binding of `name`, or null.
  [[nodiscard]] const Value* find(const std::string& name) const;
  void set(const std::string& name, Value v) { vars_[name] = std::move(v); }

 private:
  std::unordered_map<std::string, Value> vars_;
  std::shared_ptr<Scope> parent_;
};
using ScopePtr = std::shared_ptr<Scope>;

class Interpreter {
 public:
  using Clock = std::function<std::chrono::system_clock::time_point()>;
  Interpreter(const Limits& limits, Clock clock) : budget_(limits), clock_(std::move(clock)) {}
  /// Releases every owned object, which frees the reference cycles a render made.
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  /// Keeps `o` until the render ends and then calls its release(); every object that can
  /// hold a reference back to itself (namespace, macro, loop state) is made through this.
  template <class T>
  std::shared_ptr<T> own(std::shared_ptr<T> o) {
    owned_.push_back(o);
    return o;
  }

  /// Renders `body` with `context` as the outermost scope.
  std::string render(const ast::Body& body, const ScopePtr& context);

  Value eval(const ast::Expr& e, const ScopePtr& scope);
  /// Calls any callable value (macro, function, bound method).
  Value call(const Value& callee, CallArgs& args);
  /// Runs `body` in `scope` into a fresh buffer and returns what it wrote.
  std::string render_block(const ast::Body& body, const ScopePtr& scope);

  Budget& budget() { return budget_; }
  [[nodiscard]] std::chrono::system_clock::time_point now() const { return clock_(); }

  /// Counts one level of call nesting against Limits::max_call_depth.
  class DepthGuard {
   public:
    explicit DepthGuard(Interpreter& in);
    ~DepthGuard() { --in_.depth_; }
    DepthGuard(const DepthGuard&) = delete;
    DepthGuard& operator=(const DepthGuard&) = delete;

   private:
    Interpreter& in_;
  };

 private:
  enum class Flow { normal, break_loop, continue_loop };
  Flow exec(const ast::Body& body, const ScopePtr& scope);
  Flow exec(const ast::Stmt& s, const ScopePtr& scope);
  Flow exec_for(const ast::For& f, const ScopePtr& scope);
  void assign(const ast::Target& t, const Value& v, const ScopePtr& scope);
  Value apply_filters(const ast::Expr& chain, const Value& base, const ScopePtr& scope);
  CallArgs eval_args(const ast::Args& args, const ScopePtr& scope);
  List eval_all(const std::vector<ast::ExprPtr>& exprs, const ScopePtr& scope);
  Value eval_node(const ast::Expr& e, const ScopePtr& scope);
  void emit(std::string_view text);

  Budget budget_;
  Clock clock_;
  std::vector<std::string> buffers_;
  std::vector<std::shared_ptr<Object>> owned_;
  int depth_ = 0;
};

}  // namespace troupe::chat
