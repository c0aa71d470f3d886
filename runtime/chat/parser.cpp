#include "runtime/chat/parser.hpp"

#include "runtime/chat/builtins.hpp"
#include "runtime/chat/lexer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <initializer_list>

namespace troupe::chat {

namespace {

using namespace ast;

template <class Node>
ExprPtr make(const Token& at, Node node) {
  auto e = std::make_unique<Expr>();
  e->line = at.line;
  e->column = at.column;
  e->node = std::move(node);
  return e;
}

template <class Node>
Stmt stmt(const Token& at, Node node) {
  Stmt s;
  s.line = at.line;
  s.column = at.column;
  s.node = std::move(node);
  return s;
}

std::string join_quoted(const std::vector<std::string>& names) {
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i) out += " or ";
    out += "'" + names[i] + "'";
  }
  return out;
}

class Parser {
 public:
  Parser(std::vector<Token> tokens, int max_depth) : t_(std::move(tokens)), max_depth_(max_depth) {}

  Body parse_template() {
    Body body = subparse({});
    return body;
  }

 private:
  std::vector<Token> t_;
  std::size_t pos_ = 0;
  int depth_ = 0;
  int max_depth_;
  int loop_depth_ = 0;
  std::vector<std::string> tag_stack_;
  std::vector<std::vector<std::string>> end_stack_;

  struct Depth {
    explicit Depth(Parser& p) : p_(p) {
      if (++p_.depth_ > p_.max_depth_) {
        --p_.depth_;
        p_.fail(p_.cur(), fmt::format("template nested deeper than {} levels", p_.max_depth_),
                FaultKind::limit);
      }
    }
    ~Depth() { --p_.depth_; }
    Depth(const Depth&) = delete;
    Depth& operator=(const Depth&) = delete;
    Parser& p_;
  };

  const Token& cur() const { return t_[pos_]; }
  const Token& look() const { return t_[std::min(pos_ + 1, t_.size() - 1)]; }
  const Token& advance() {
    const Token& t = t_[pos_];
    if (pos_ + 1 < t_.size()) ++pos_;
    return t;
  }
  bool is_op(std::string_view op) const { return cur().type == TokenType::op && cur().text == op; }
  bool is_name(std::string_view n) const {
    return cur().type == TokenType::name && cur().text == n;
  }
  bool skip_op(std::string_view op) {
    if (!is_op(op)) return false;
    advance();
    return true;
  }
  bool skip_name(std::string_view n) {
    if (!is_name(n)) return false;
    advance();
    return true;
  }

  [[noreturn]] void fail(const Token& at, std::string message,
                         FaultKind kind = FaultKind::syntax) const {
    throw Fault{kind, std::move(message), at.line, at.column};
  }
  const Token& expect_op(std::string_view op) {
    if (!is_op(op)) fail(cur(), fmt::format("expected token '{}', got {}", op, describe(cur())));
    return advance();
  }
  const Token& expect(TokenType type, const char* what) {
    if (cur().type != type)
      fail(cur(), fmt::format("expected token '{}', got {}", what, describe(cur())));
    return advance();
  }
  const Token& expect_name() { return expect(TokenType::name, "name"); }
  const Token& expect_name(std::string_view n) {
    if (!is_name(n)) fail(cur(), fmt::format("expected token '{}', got {}", n, describe(cur())));
    return advance();
  }
  void expect_block_end() { expect(TokenType::block_end, "end of statement block"); }

  // Jinja2's _fail_ut_eof: which tags it was looking for and which block is still open.
  [[noreturn]] void fail_unknown_tag(const Token& at, const std::string* name) {
    std::string message =
        name ? fmt::format("Encountered unknown tag '{}'.", *name) : "Unexpected end of template.";
    if (!end_stack_.empty()) {
      bool expected = false;
      for (const auto& tags : end_stack_)
        if (name && std::find(tags.begin(), tags.end(), *name) != tags.end()) expected = true;
      message += expected
                     ? fmt::format(
                           " You probably made a nesting mistake. Jinja is expecting this tag, but "
                           "currently looking for {}.",
                           join_quoted(end_stack_.back()))
                     : fmt::format(" Jinja was looking for the following tags: {}.",
                                   join_quoted(end_stack_.back()));
    }
    if (!tag_stack_.empty())
      message +=
          fmt::format(" The innermost block that needs to be closed is '{}'.", tag_stack_.back());
    fail(at, std::move(message));
  }

  // ---- statements ------------------------------------------------------------------------
  Body subparse(const std::vector<std::string>& end_tags) {
    Body body;
    if (!end_tags.empty()) end_stack_.push_back(end_tags);
    while (cur().type != TokenType::eof) {
      const Token& tok = cur();
      if (tok.type == TokenType::data) {
        body.push_back(stmt(tok, Text{tok.text}));
        advance();
      } else if (tok.type == TokenType::var_begin) {
        advance();
        Depth d(*this);
        const Token& at = cur();
        body.push_back(stmt(at, Output{parse_tuple(false, true, {}, false)}));
        expect(TokenType::var_end, "end of print statement");
      } else if (tok.type == TokenType::block_begin) {
        advance();
        if (cur().type == TokenType::name &&
            std::find(end_tags.begin(), end_tags.end(), cur().text) != end_tags.end()) {
          end_stack_.pop_back();
          return body;
        }
        parse_statement(body);
        expect_block_end();
      } else {
        fail(tok, fmt::format("unexpected {}", describe(tok)));
      }
    }
    if (!end_tags.empty()) fail_unknown_tag(cur(), nullptr);
    return body;
  }

  // After the tag's own tokens: `%}`, the body, up to one of end_tags (left current).
  Body parse_statements(const std::vector<std::string>& end_tags, bool drop_needle) {
    skip_op(":");
    expect_block_end();
    Body body = subparse(end_tags);
    if (drop_needle) advance();
    return body;
  }

  void parse_statement(Body& out) {
    Depth d(*this);
    const Token& tok = cur();
    if (tok.type != TokenType::name) fail(tok, "tag name expected");
    const std::string name = tok.text;
    tag_stack_.push_back(name);
    if (name == "for") {
      out.push_back(parse_for());
    } else if (name == "if") {
      out.push_back(parse_if());
    } else if (name == "set") {
      out.push_back(parse_set());
    } else if (name == "macro") {
      out.push_back(parse_macro());
    } else if (name == "call") {
      out.push_back(parse_call_block());
    } else if (name == "filter") {
      out.push_back(parse_filter_block());
    } else if (name == "with" || name == "generation") {
      out.push_back(parse_with(name));
    } else if (name == "print") {
      advance();
      bool first = true;
      while (cur().type != TokenType::block_end) {
        if (!first) expect_op(",");
        first = false;
        const Token& at = cur();
        out.push_back(stmt(at, Output{parse_expression(true)}));
      }
    } else if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) fail(tok, fmt::format("'{}' outside of a for loop", name));
      advance();
      if (name == "break") {
        out.push_back(stmt(tok, Break{}));
      } else {
        out.push_back(stmt(tok, Continue{}));
      }
    } else if (name == "block" || name == "extends" || name == "include" || name == "import" ||
               name == "from") {
      fail(
          tok,
          fmt::format(
              "{{% {} %}} is not supported: a chat template is a single file with no loader", name),
          FaultKind::unsupported);
    } else if (name == "autoescape") {
      fail(tok, "{% autoescape %} is not supported (transformers renders with autoescaping off)",
           FaultKind::unsupported);
    } else {
      tag_stack_.pop_back();
      fail_unknown_tag(tok, &name);
    }
    tag_stack_.pop_back();
  }

  Stmt parse_for() {
    const Token& at = advance();
    For f;
    f.target = parse_assign_target(true, false, {"in"}, false);
    expect_name("in");
    f.iterable = parse_tuple(false, false, {"recursive"}, false);
    if (skip_name("if")) f.filter = parse_expression(true);
    if (is_name("recursive"))
      fail(cur(), "recursive for loops are not supported in troupe's chat templates",
           FaultKind::unsupported);
    ++loop_depth_;
    f.body = parse_statements({"endfor", "else"}, false);
    --loop_depth_;
    if (advance().text == "else") f.otherwise = parse_statements({"endfor"}, true);
    return stmt(at, std::move(f));
  }

  Stmt parse_if() {
    const Token& at = advance();
    If node;
    while (true) {
      ExprPtr test = parse_tuple(false, false, {}, false);
      Body body = parse_statements({"elif", "else", "endif"}, false);
      node.branches.emplace_back(std::move(test), std::move(body));
      const Token& tok = advance();
      if (tok.text == "elif") continue;
      if (tok.text == "else") node.otherwise = parse_statements({"endif"}, true);
      break;
    }
    return stmt(at, std::move(node));
  }

  Stmt parse_set() {
    const Token& at = advance();
    Target target = parse_assign_target(true, false, {}, true);
    if (skip_op("=")) return stmt(at, Set{std::move(target), parse_tuple(false, true, {}, false)});
    SetBlock sb;
    sb.target = std::move(target);
    if (is_op("|")) sb.filter = parse_filter(nullptr, false);
    sb.body = parse_statements({"endset"}, true);
    return stmt(at, std::move(sb));
  }

  std::vector<MacroParam> parse_signature() {
    std::vector<MacroParam> params;
    expect_op("(");
    bool defaults = false;
    while (!is_op(")")) {
      if (!params.empty()) expect_op(",");
      MacroParam p;
      p.name = expect_name().text;
      if (skip_op("=")) {
        p.default_value = parse_expression(true);
        defaults = true;
      } else if (defaults) {
        fail(cur(), "non-default argument follows default argument");
      }
      params.push_back(std::move(p));
    }
    expect_op(")");
    return params;
  }

  std::shared_ptr<MacroDef> finish_macro(std::string name, std::vector<MacroParam> params,
                                         const char* end) {
    auto def = std::make_shared<MacroDef>();
    def->name = std::move(name);
    def->params = std::move(params);
    const int saved_loops = loop_depth_;
    loop_depth_ = 0;
    def->body = parse_statements({end}, true);
    loop_depth_ = saved_loops;
    std::vector<std::string> names;
    collect_names(def->body, names);
    for (const auto& p : def->params)
      if (p.default_value) collect_names(*p.default_value, names);
    auto used = [&](const char* n) {
      return std::find(names.begin(), names.end(), n) != names.end();
    };
    def->uses_varargs = used("varargs");
    def->uses_kwargs = used("kwargs");
    def->uses_caller = used("caller");
    return def;
  }

  Stmt parse_macro() {
    const Token& at = advance();
    std::string name = expect_name().text;
    auto params = parse_signature();
    return stmt(at, Macro{finish_macro(std::move(name), std::move(params), "endmacro")});
  }

  Stmt parse_call_block() {
    const Token& at = advance();
    std::vector<MacroParam> params;
    if (is_op("(")) params = parse_signature();
    const Token& call_at = cur();
    ExprPtr call = parse_expression(true);
    if (!std::holds_alternative<Call>(call->node)) fail(call_at, "expected call");
    CallBlock cb;
    cb.call = std::move(call);
    cb.caller = finish_macro("caller", std::move(params), "endcall");
    return stmt(at, std::move(cb));
  }

  Stmt parse_filter_block() {
    const Token& at = advance();
    FilterBlock fb;
    fb.filter = parse_filter(nullptr, true);
    fb.body = parse_statements({"endfilter"}, true);
    return stmt(at, std::move(fb));
  }

  Stmt parse_with(const std::string& tag) {
    const Token& at = advance();
    With w;
    if (tag == "with") {
      while (cur().type != TokenType::block_end) {
        if (!w.assignments.empty()) expect_op(",");
        Target target = parse_assign_target(true, false, {}, false);
        expect_op("=");
        w.assignments.emplace_back(std::move(target), parse_expression(true));
      }
    }
    w.body = parse_statements({tag == "with" ? "endwith" : "endgeneration"}, true);
    return stmt(at, std::move(w));
  }

  Target parse_assign_target(bool with_tuple, bool name_only,
                             const std::vector<std::string>& extra_end, bool with_namespace) {
    Target t;
    if (with_namespace && cur().type == TokenType::name && look().type == TokenType::op &&
        look().text == ".") {
      t.names.push_back(advance().text);
      advance();
      t.ns_attr = expect_name().text;
      return t;
    }
    if (name_only) {
      t.names.push_back(expect_name().text);
      return t;
    }
    const Token& at = cur();
    ExprPtr e = with_tuple ? parse_tuple(true, false, extra_end, false) : parse_primary();
    auto name_of = [&](const Expr& x) -> std::string {
      if (const auto* n = std::get_if<Name>(&x.node)) return n->name;
      if (std::holds_alternative<TupleLit>(x.node))
        fail(at, "nested tuple targets are not supported in troupe's chat templates",
             FaultKind::unsupported);
      fail(at, "can't assign to this expression");
    };
    if (const auto* tuple = std::get_if<TupleLit>(&e->node)) {
      t.tuple = true;
      for (const auto& item : tuple->items) t.names.push_back(name_of(*item));
    } else {
      t.names.push_back(name_of(*e));
    }
    return t;
  }

  // ---- expressions -----------------------------------------------------------------------
  bool is_tuple_end(const std::vector<std::string>& extra) const {
    if (cur().type == TokenType::var_end || cur().type == TokenType::block_end || is_op(")"))
      return true;
    return cur().type == TokenType::name &&
           std::find(extra.begin(), extra.end(), cur().text) != extra.end();
  }

  ExprPtr parse_tuple(bool simplified, bool with_condexpr,
                      const std::vector<std::string>& extra_end, bool explicit_parentheses) {
    const Token& at = cur();
    std::vector<ExprPtr> args;
    bool is_tuple = false;
    while (true) {
      if (!args.empty()) expect_op(",");
      if (is_tuple_end(extra_end)) break;
      args.push_back(simplified ? parse_primary() : parse_expression(with_condexpr));
      if (is_op(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!args.empty()) return std::move(args[0]);
      if (!explicit_parentheses)
        fail(cur(), fmt::format("Expected an expression, got {}", describe(cur())));
    }
    return make(at, TupleLit{std::move(args)});
  }

  ExprPtr parse_expression(bool with_condexpr) {
    Depth d(*this);
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    const Token& at = cur();
    ExprPtr expr1 = parse_or();
    while (skip_name("if")) {
      ExprPtr expr2 = parse_or();
      ExprPtr expr3;
      if (skip_name("else")) expr3 = parse_condexpr();
      expr1 = make(at, CondExpr{std::move(expr2), std::move(expr1), std::move(expr3)});
    }
    return expr1;
  }

  ExprPtr parse_or() {
    const Token& at = cur();
    ExprPtr left = parse_and();
    while (skip_name("or")) left = make(at, Binary{BinaryOp::or_, std::move(left), parse_and()});
    return left;
  }

  ExprPtr parse_and() {
    const Token& at = cur();
    ExprPtr left = parse_not();
    while (skip_name("and")) left = make(at, Binary{BinaryOp::and_, std::move(left), parse_not()});
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      Depth d(*this);
      const Token& at = advance();
      return make(at, Unary{UnaryOp::not_, parse_not()});
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const Token& at = cur();
    ExprPtr expr = parse_math1();
    Compare c;
    while (true) {
      static const std::pair<const char*, CompareOp> ops[] = {
          {"==", CompareOp::eq}, {"!=", CompareOp::ne}, {"<", CompareOp::lt},
          {"<=", CompareOp::le}, {">", CompareOp::gt},  {">=", CompareOp::ge}};
      bool matched = false;
      for (const auto& [sym, op] : ops) {
        if (is_op(sym)) {
          advance();
          c.rest.emplace_back(op, parse_math1());
          matched = true;
          break;
        }
      }
      if (matched) continue;
      if (skip_name("in")) {
        c.rest.emplace_back(CompareOp::in, parse_math1());
      } else if (is_name("not") && look().type == TokenType::name && look().text == "in") {
        advance();
        advance();
        c.rest.emplace_back(CompareOp::not_in, parse_math1());
      } else {
        break;
      }
    }
    if (c.rest.empty()) return expr;
    c.first = std::move(expr);
    return make(at, std::move(c));
  }

  ExprPtr parse_math1() {
    const Token& at = cur();
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const BinaryOp op = advance().text == "+" ? BinaryOp::add : BinaryOp::sub;
      left = make(at, Binary{op, std::move(left), parse_concat()});
    }
    return left;
  }

  ExprPtr parse_concat() {
    const Token& at = cur();
    std::vector<ExprPtr> items;
    items.push_back(parse_math2());
    while (skip_op("~")) items.push_back(parse_math2());
    if (items.size() == 1) return std::move(items[0]);
    return make(at, Concat{std::move(items)});
  }

  ExprPtr parse_math2() {
    const Token& at = cur();
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const std::string sym = advance().text;
      const BinaryOp op = sym == "*"    ? BinaryOp::mul
                          : sym == "/"  ? BinaryOp::div
                          : sym == "//" ? BinaryOp::floordiv
                                        : BinaryOp::mod;
      left = make(at, Binary{op, std::move(left), parse_pow()});
    }
    return left;
  }

  ExprPtr parse_pow() {
    const Token& at = cur();
    ExprPtr left = parse_unary(true);
    while (skip_op("**"))
      left = make(at, Binary{BinaryOp::pow, std::move(left), parse_unary(true)});
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    Depth d(*this);
    const Token& at = cur();
    ExprPtr node;
    if (skip_op("-")) {
      node = make(at, Unary{UnaryOp::neg, parse_unary(false)});
    } else if (skip_op("+")) {
      node = make(at, Unary{UnaryOp::pos, parse_unary(false)});
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    Depth d(*this);
    const Token& tok = cur();
    switch (tok.type) {
      case TokenType::name: {
        advance();
        if (tok.text == "true" || tok.text == "True")
          return make(tok, Literal{Value::boolean(true)});
        if (tok.text == "false" || tok.text == "False")
          return make(tok, Literal{Value::boolean(false)});
        if (tok.text == "none" || tok.text == "None") return make(tok, Literal{Value::none()});
        return make(tok, Name{tok.text});
      }
      case TokenType::string: {
        std::string s = advance().text;
        while (cur().type == TokenType::string) s += advance().text;
        return make(tok, Literal{Value::string(std::move(s))});
      }
      case TokenType::integer:
        advance();
        return make(tok, Literal{Value::integer(tok.int_value)});
      case TokenType::floating:
        advance();
        return make(tok, Literal{Value::floating(tok.float_value)});
      case TokenType::op:
        if (tok.text == "(") {
          advance();
          ExprPtr e = parse_tuple(false, true, {}, true);
          expect_op(")");
          return e;
        }
        if (tok.text == "[") return parse_list();
        if (tok.text == "{") return parse_dict();
        break;
      default:
        break;
    }
    fail(tok, fmt::format("unexpected {}", describe(tok)));
  }

  ExprPtr parse_list() {
    const Token& at = expect_op("[");
    ListLit l;
    while (!is_op("]")) {
      if (!l.items.empty()) expect_op(",");
      if (is_op("]")) break;
      l.items.push_back(parse_expression(true));
    }
    expect_op("]");
    return make(at, std::move(l));
  }

  ExprPtr parse_dict() {
    const Token& at = expect_op("{");
    DictLit d;
    while (!is_op("}")) {
      if (!d.items.empty()) expect_op(",");
      if (is_op("}")) break;
      ExprPtr key = parse_expression(true);
      expect_op(":");
      d.items.emplace_back(std::move(key), parse_expression(true));
    }
    expect_op("}");
    return make(at, std::move(d));
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(".") || is_op("[")) {
        node = parse_subscript(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op("|")) {
        node = parse_filter(std::move(node), false);
      } else if (is_name("is")) {
        node = parse_test(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    const Token& tok = advance();
    if (tok.text == ".") {
      const Token& attr = advance();
      if (attr.type == TokenType::name) return make(tok, GetAttr{std::move(node), attr.text});
      if (attr.type != TokenType::integer) fail(attr, "expected name or number");
      return make(tok,
                  GetItem{std::move(node), make(attr, Literal{Value::integer(attr.int_value)})});
    }
    std::vector<ExprPtr> args;
    while (!is_op("]")) {
      if (!args.empty()) expect_op(",");
      args.push_back(parse_subscribed());
    }
    expect_op("]");
    ExprPtr key = args.size() == 1 ? std::move(args[0]) : make(tok, TupleLit{std::move(args)});
    return make(tok, GetItem{std::move(node), std::move(key)});
  }

  ExprPtr parse_subscribed() {
    const Token& at = cur();
    std::vector<ExprPtr> parts;
    if (is_op(":")) {
      advance();
      parts.emplace_back();
    } else {
      ExprPtr e = parse_expression(true);
      if (!is_op(":")) return e;
      advance();
      parts.push_back(std::move(e));
    }
    if (is_op(":")) {
      parts.emplace_back();
    } else if (!is_op("]") && !is_op(",")) {
      parts.push_back(parse_expression(true));
    } else {
      parts.emplace_back();
    }
    if (skip_op(":")) {
      if (!is_op("]") && !is_op(",")) {
        parts.push_back(parse_expression(true));
      } else {
        parts.emplace_back();
      }
    } else {
      parts.emplace_back();
    }
    return make(at, SliceLit{std::move(parts[0]), std::move(parts[1]), std::move(parts[2])});
  }

  Args parse_call_args() {
    const Token& open = expect_op("(");
    Args args;
    bool require_comma = false;
    while (!is_op(")")) {
      if (require_comma) {
        expect_op(",");
        if (is_op(")")) break;
      }
      if (is_op("*") || is_op("**"))
        fail(cur(), "*args and **kwargs in calls are not supported in troupe's chat templates",
             FaultKind::unsupported);
      if (cur().type == TokenType::name && look().type == TokenType::op && look().text == "=") {
        std::string key = advance().text;
        advance();
        args.keyword.emplace_back(std::move(key), parse_expression(true));
      } else {
        if (!args.keyword.empty()) fail(open, "invalid syntax for function call expression");
        args.positional.push_back(parse_expression(true));
      }
      require_comma = true;
    }
    expect_op(")");
    return args;
  }

  ExprPtr parse_call(ExprPtr node) {
    // A call is reported where its callee starts: `raise_exception(...)`, `m.strip()`.
    const int line = node->line, column = node->column;
    Args args = parse_call_args();
    auto call = make(cur(), Call{std::move(node), std::move(args)});
    call->line = line;
    call->column = column;
    return call;
  }

  ExprPtr parse_filter(ExprPtr node, bool start_inline) {
    while (is_op("|") || start_inline) {
      if (!start_inline) advance();
      start_inline = false;
      const Token& tok = expect_name();
      std::string name = tok.text;
      while (skip_op(".")) name += "." + expect_name().text;
      if (filter_availability(name) == Availability::unknown)
        fail(tok, fmt::format("No filter named '{}'.", name));
      Args args;
      if (is_op("(")) args = parse_call_args();
      node = make(tok, FilterCall{std::move(node), std::move(name), std::move(args)});
    }
    return node;
  }

  ExprPtr parse_test(ExprPtr node) {
    const Token& is_tok = advance();
    const bool negated = skip_name("not");
    const Token& tok = expect_name();
    std::string name = tok.text;
    while (skip_op(".")) name += "." + expect_name().text;
    if (test_availability(name) == Availability::unknown)
      fail(tok, fmt::format("No test named '{}'.", name));
    Args args;
    if (is_op("(")) {
      args = parse_call_args();
    } else if ((cur().type == TokenType::name || cur().type == TokenType::string ||
                cur().type == TokenType::integer || cur().type == TokenType::floating ||
                is_op("(") || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail(cur(), "You cannot chain multiple tests with is");
      args.positional.push_back(parse_postfix(parse_primary()));
    }
    ExprPtr test = make(is_tok, TestCall{std::move(node), std::move(name), std::move(args)});
    if (negated) return make(is_tok, Unary{UnaryOp::not_, std::move(test)});
    return test;
  }

  // ---- name collection (for macros' varargs / kwargs / caller) ---------------------------
  static void collect_names(const Expr& e, std::vector<std::string>& out) {
    auto sub = [&](const ExprPtr& p) {
      if (p) collect_names(*p, out);
    };
    auto args = [&](const Args& a) {
      for (const auto& x : a.positional) sub(x);
      for (const auto& [k, x] : a.keyword) sub(x);
    };
    std::visit(
        [&](const auto& n) {
          using N = std::decay_t<decltype(n)>;
          if constexpr (std::is_same_v<N, Name>) {
            out.push_back(n.name);
          } else if constexpr (std::is_same_v<N, ListLit> || std::is_same_v<N, TupleLit> ||
                               std::is_same_v<N, Concat>) {
            for (const auto& x : n.items) sub(x);
          } else if constexpr (std::is_same_v<N, DictLit>) {
            for (const auto& [k, v] : n.items) {
              sub(k);
              sub(v);
            }
          } else if constexpr (std::is_same_v<N, GetAttr>) {
            sub(n.object);
          } else if constexpr (std::is_same_v<N, GetItem>) {
            sub(n.object);
            sub(n.key);
          } else if constexpr (std::is_same_v<N, SliceLit>) {
            sub(n.start);
            sub(n.stop);
            sub(n.step);
          } else if constexpr (std::is_same_v<N, Call>) {
            sub(n.callee);
            args(n.args);
          } else if constexpr (std::is_same_v<N, FilterCall> || std::is_same_v<N, TestCall>) {
            sub(n.operand);
            args(n.args);
          } else if constexpr (std::is_same_v<N, Unary>) {
            sub(n.operand);
          } else if constexpr (std::is_same_v<N, Binary>) {
            sub(n.left);
            sub(n.right);
          } else if constexpr (std::is_same_v<N, Compare>) {
            sub(n.first);
            for (const auto& [op, x] : n.rest) sub(x);
          } else if constexpr (std::is_same_v<N, CondExpr>) {
            sub(n.test);
            sub(n.then);
            sub(n.otherwise);
          }
        },
        e.node);
  }

  static void collect_names(const Body& body, std::vector<std::string>& out) {
    for (const auto& s : body) {
      auto sub = [&](const ExprPtr& p) {
        if (p) collect_names(*p, out);
      };
      std::visit(
          [&](const auto& n) {
            using N = std::decay_t<decltype(n)>;
            if constexpr (std::is_same_v<N, Output>) {
              sub(n.expr);
            } else if constexpr (std::is_same_v<N, If>) {
              for (const auto& [t, b] : n.branches) {
                sub(t);
                collect_names(b, out);
              }
              collect_names(n.otherwise, out);
            } else if constexpr (std::is_same_v<N, For>) {
              sub(n.iterable);
              sub(n.filter);
              collect_names(n.body, out);
              collect_names(n.otherwise, out);
            } else if constexpr (std::is_same_v<N, Set>) {
              sub(n.value);
            } else if constexpr (std::is_same_v<N, SetBlock>) {
              sub(n.filter);
              collect_names(n.body, out);
            } else if constexpr (std::is_same_v<N, Macro>) {
              collect_names(n.def->body, out);
            } else if constexpr (std::is_same_v<N, CallBlock>) {
              sub(n.call);
              collect_names(n.caller->body, out);
            } else if constexpr (std::is_same_v<N, FilterBlock>) {
              sub(n.filter);
              collect_names(n.body, out);
            } else if constexpr (std::is_same_v<N, With>) {
              for (const auto& [t, x] : n.assignments) sub(x);
              collect_names(n.body, out);
            }
          },
          s.node);
    }
  }
};

}  // namespace

ast::Body parse(std::string_view source, int max_depth) {
  return Parser(tokenize(source), max_depth).parse_template();
}

}  // namespace troupe::chat
