// Builds the syntax tree from tokens with Jinja2's grammar and precedence (jinja2/parser.py):
// conditional expressions, or/and/not, comparison chains with in / not in, + - ~ * / // % **
// (left-associative, as in Jinja2), unary minus binding looser than filters and tests,
// postfix .attr / [key] / [a:b:c] / (args). Stateless: parse() is a pure function.
#pragma once

#include "runtime/chat/ast.hpp"

#include <string_view>

namespace troupe::chat {

/// Parses template source. Throws Fault (syntax, or unsupported for Jinja2 features troupe
/// refuses) with the line and column of the problem.
ast::Body parse(std::string_view source, int max_depth);

}  // namespace troupe::chat
