// The global functions a chat template can call: Jinja2's range (with the sandbox's
// 100000 cap), dict, namespace, cycler, joiner and lipsum (refused), and transformers'
// raise_exception and strftime_now.
#pragma once

#include "runtime/chat/interpreter.hpp"

namespace troupe::chat {

/// Binds the globals in `scope` (the outermost scope of a render).
void add_globals(Scope& scope);

}  // namespace troupe::chat
