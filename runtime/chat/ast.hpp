// The syntax tree of a template: one struct per expression and per statement kind, as
// Jinja2's parser builds them (jinja2/nodes.py), so the interpreter can follow Jinja2's
// evaluation node for node. Every node carries its line and column for error messages.
#pragma once

#include "runtime/chat/value.hpp"

#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace troupe::chat::ast {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using Body = std::vector<Stmt>;

struct Args {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
};

struct Literal {
  Value value;
};
struct Name {
  std::string name;
};
struct ListLit {
  std::vector<ExprPtr> items;
};
struct TupleLit {
  std::vector<ExprPtr> items;
};
struct DictLit {
  std::vector<std::pair<ExprPtr, ExprPtr>> items;
};
struct GetAttr {  // obj.name: Python attribute first, then item
  ExprPtr object;
  std::string name;
};
struct GetItem {  // obj[key]: item first, then attribute
  ExprPtr object;
  ExprPtr key;
};
struct SliceLit {  // a[start:stop:step], only as a GetItem key
  ExprPtr start, stop, step;
};
struct Call {
  ExprPtr callee;
  Args args;
};
struct FilterCall {  // operand | name(args); operand is null in {% filter %} and {% set %} blocks
  ExprPtr operand;
  std::string name;
  Args args;
};
struct TestCall {  // operand is name(args)
  ExprPtr operand;
  std::string name;
  Args args;
};
enum class UnaryOp { neg, pos, not_ };
struct Unary {
  UnaryOp op;
  ExprPtr operand;
};
enum class BinaryOp { add, sub, mul, div, floordiv, mod, pow, and_, or_ };
struct Binary {
  BinaryOp op;
  ExprPtr left, right;
};
enum class CompareOp { eq, ne, lt, le, gt, ge, in, not_in };
struct Compare {  // Python's chained comparison: a < b < c
  ExprPtr first;
  std::vector<std::pair<CompareOp, ExprPtr>> rest;
};
struct CondExpr {  // a if test else b; b null: undefined when the test fails
  ExprPtr test, then, otherwise;
};
struct Concat {  // a ~ b ~ c
  std::vector<ExprPtr> items;
};

struct Expr {
  int line = 0, column = 0;
  std::variant<Literal, Name, ListLit, TupleLit, DictLit, GetAttr, GetItem, SliceLit, Call,
               FilterCall, TestCall, Unary, Binary, Compare, CondExpr, Concat>
      node;
};

/// An assignment target: `x`, `a, b` (a tuple of targets) or `ns.attr`.
struct Target {
  std::vector<std::string> names;  // one name, or several for tuple unpacking
  bool tuple = false;
  std::string ns_attr;  // non-empty: `names[0].ns_attr`
};

struct Text {
  std::string text;
};
struct Output {
  ExprPtr expr;
};
struct If {
  std::vector<std::pair<ExprPtr, Body>> branches;  // if and elifs
  Body otherwise;
};
struct For {
  Target target;
  ExprPtr iterable;
  ExprPtr filter;  // `for x in xs if cond`, may be null
  Body body, otherwise;
};
struct Set {
  Target target;
  ExprPtr value;
};
struct SetBlock {
  Target target;
  ExprPtr filter;  // FilterCall chain with a null innermost operand, may be null
  Body body;
};
struct MacroParam {
  std::string name;
  ExprPtr default_value;  // may be null
};
struct MacroDef {
  std::string name;
  std::vector<MacroParam> params;
  Body body;
  bool uses_varargs = false, uses_kwargs = false, uses_caller = false;
};
struct CallBlock {
  std::shared_ptr<MacroDef> caller;  // the body, as the macro `caller`
  ExprPtr call;                      // a Call expression
};
struct FilterBlock {
  ExprPtr filter;  // FilterCall chain with a null innermost operand
  Body body;
};
struct With {  // also {% generation %} (transformers' AssistantTracker): a scope
  std::vector<std::pair<Target, ExprPtr>> assignments;
  Body body;
};
struct Break {};
struct Continue {};
struct Macro {
  std::shared_ptr<MacroDef> def;
};

struct Stmt {
  int line = 0, column = 0;
  std::variant<Text, Output, If, For, Set, SetBlock, Macro, CallBlock, FilterBlock, With, Break,
               Continue>
      node;
};

}  // namespace troupe::chat::ast
