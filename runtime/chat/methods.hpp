// The methods of Python's str, list, tuple and dict that templates call (`s.strip()`,
// `d.items()`, `xs.index(x)`), as bound-method values, plus the argument binding every
// built-in function uses.
#pragma once

#include "runtime/chat/value.hpp"

#include <functional>
#include <initializer_list>
#include <optional>
#include <string_view>
#include <vector>

namespace troupe::chat {

/// The attribute `name` of a str, list, tuple, dict or number, as Python has it: a bound
/// method; an undefined that raises SecurityError when called, for the methods Jinja2's
/// ImmutableSandboxedEnvironment forbids (list.append, dict.update, ...) and for dunder
/// attributes; or nullopt when the type has no such attribute. Python methods troupe does
/// not implement raise Fault{unsupported} naming the method.
std::optional<Value> builtin_attribute(const Value& self, std::string_view name);

/// A parameter of a built-in: its name and default (nullopt: required).
struct Param {
  const char* name;
  std::optional<Value> default_value;
};
/// Python's binding of positional and keyword arguments to `params`, with Python's
/// TypeErrors for too many, unknown, repeated or missing arguments.
std::vector<Value> bind(std::string_view function, const CallArgs& args,
                        std::initializer_list<Param> params);

/// A callable built-in (global function or bound method).
class Function : public Object {
 public:
  using Impl = Value (*)(Interpreter& in, const Value& self, CallArgs& args);
  Function(std::string name, Value self, Impl impl)
      : name_(std::move(name)), self_(std::move(self)), impl_(impl) {}
  [[nodiscard]] std::string type_name() const override {
    return self_.is_undefined() ? "function" : "builtin_function_or_method";
  }
  [[nodiscard]] bool callable() const override { return true; }
  Value call(Interpreter& in, CallArgs& args) const override { return impl_(in, self_, args); }
  [[nodiscard]] const std::string& name() const { return name_; }

 private:
  std::string name_;
  Value self_;  // undefined for a global function
  Impl impl_;
};

/// A callable with state (loop.cycle, loop.changed, joiner(), cycler().next).
class Closure : public Object {
 public:
  using Impl = std::function<Value(Interpreter& in, CallArgs& args)>;
  Closure(std::string name, Impl impl) : name_(std::move(name)), impl_(std::move(impl)) {}
  [[nodiscard]] std::string type_name() const override { return "function"; }
  [[nodiscard]] bool callable() const override { return true; }
  Value call(Interpreter& in, CallArgs& args) const override { return impl_(in, args); }

 private:
  std::string name_;
  Impl impl_;
};

}  // namespace troupe::chat
