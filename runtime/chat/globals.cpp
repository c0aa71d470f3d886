#include "runtime/chat/globals.hpp"

#include "runtime/chat/methods.hpp"
#include "runtime/chat/operators.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <ctime>

namespace troupe::chat {

namespace {

[[noreturn]] void type_error(std::string m) {
  fault(FaultKind::type, std::move(m));
}
Value str(std::string s) {
  return Value::string(std::move(s));
}

class Namespace : public Object {
 public:
  explicit Namespace(Dict attrs) : attrs_(std::move(attrs)) {}
  [[nodiscard]] std::string type_name() const override { return "Namespace"; }
  [[nodiscard]] std::string type_repr() const override { return "jinja2.utils.Namespace object"; }
  [[nodiscard]] std::optional<Value> getattr(std::string_view name) const override {
    if (const Value* v = attrs_.find(name)) return *v;
    return std::nullopt;
  }
  bool set_attr(const std::string& name, Value v) override {
    attrs_.set(name, std::move(v));
    return true;
  }
  void release() override { attrs_ = Dict(); }
  [[nodiscard]] std::optional<std::string> repr() const override {
    return "<Namespace " + chat::repr(Value::dict(attrs_)) + ">";
  }

 private:
  Dict attrs_;
};

// dict(*args, **kwargs) as Python builds it: one mapping or iterable of pairs, then kwargs.
Dict build_dict(const CallArgs& args, std::string_view function) {
  if (args.positional.size() > 1)
    type_error(
        fmt::format("{} expected at most 1 argument, got {}", function, args.positional.size()));
  Dict d;
  if (!args.positional.empty()) {
    const Value& src = args.positional[0];
    if (src.is_dict()) {
      d = src.dict();
    } else {
      for (const auto& pair : iterate(src)) {
        const List kv = iterate(pair);
        if (kv.size() != 2)
          type_error(fmt::format("dictionary update sequence element has length {}; 2 is required",
                                 kv.size()));
        if (!kv[0].is_string())
          fault(FaultKind::unsupported, "dict keys must be strings in troupe's templates");
        d.set(kv[0].str(), kv[1]);
      }
    }
  }
  for (const auto& [k, v] : args.keyword) d.set(k, v);
  return d;
}

Value g_range(Interpreter& in, const Value&, CallArgs& args) {
  if (!args.keyword.empty()) type_error("range() takes no keyword arguments");
  const auto& p = args.positional;
  if (p.empty() || p.size() > 3)
    type_error(fmt::format("range expected at most 3 arguments, got {}", p.size()));
  for (const auto& x : p)
    if (!x.is_int() && !x.is_bool())
      type_error(fmt::format("'{}' object cannot be interpreted as an integer", type_name(x)));
  std::int64_t start = 0, stop, step = 1;
  if (p.size() == 1) {
    stop = p[0].as_int();
  } else {
    start = p[0].as_int();
    stop = p[1].as_int();
    if (p.size() == 3) step = p[2].as_int();
  }
  if (step == 0) type_error("range() arg 3 must not be zero");
  const double count = step > 0
                           ? std::ceil((static_cast<double>(stop) - static_cast<double>(start)) /
                                       static_cast<double>(step))
                           : std::ceil((static_cast<double>(start) - static_cast<double>(stop)) /
                                       static_cast<double>(-step));
  if (count > 100000)
    fault(FaultKind::type,
          "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  if (count > 0) in.budget().steps(static_cast<std::size_t>(count));
  return Value::range(start, stop, step);
}

Value g_dict(Interpreter&, const Value&, CallArgs& args) {
  return Value::dict(build_dict(args, "dict"));
}

Value g_namespace(Interpreter& in, const Value&, CallArgs& args) {
  return Value::object(in.own(std::make_shared<Namespace>(build_dict(args, "namespace"))));
}

Value g_raise_exception(Interpreter&, const Value&, CallArgs& args) {
  const auto a = bind("raise_exception", args, {{"message", std::nullopt}});
  fault(FaultKind::raised, to_str(a[0]));
}

// datetime.now().strftime(fmt): C's strftime on local time, with Python's %f and with %z and
// %Z empty (a naive datetime has no zone).
Value g_strftime_now(Interpreter& in, const Value&, CallArgs& args) {
  const auto a = bind("strftime_now", args, {{"format", std::nullopt}});
  if (!a[0].is_string())
    type_error(fmt::format("strftime() argument 1 must be str, not {}", type_name(a[0])));
  const auto now = in.now();
  const auto since_epoch = now.time_since_epoch();
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(since_epoch);
  auto micros =
      std::chrono::duration_cast<std::chrono::microseconds>(since_epoch - seconds).count();
  std::time_t t = static_cast<std::time_t>(seconds.count());
  if (micros < 0) {
    micros += 1000000;
    --t;
  }
  std::tm tm{};
  localtime_r(&t, &tm);
  const std::string& f = a[0].str();
  std::string out;
  for (std::size_t i = 0; i < f.size(); ++i) {
    if (f[i] != '%' || i + 1 >= f.size()) {
      out += f[i];
      continue;
    }
    const char c = f[++i];
    if (c == 'f') {
      out += fmt::format("{:06d}", micros);
    } else if (c == 'z' || c == 'Z') {
    } else {
      char buf[256];
      const char spec[3] = {'%', c, 0};
      const std::size_t n = std::strftime(buf, sizeof buf, spec, &tm);
      out.append(buf, n);
    }
  }
  return str(std::move(out));
}

// cycler(*items): .next(), .reset(), .current
class Cycler : public Object {
 public:
  explicit Cycler(List items) : items_(std::move(items)) {}
  [[nodiscard]] std::string type_name() const override { return "Cycler"; }
  [[nodiscard]] std::string type_repr() const override { return "jinja2.utils.Cycler object"; }
  [[nodiscard]] std::optional<Value> getattr(std::string_view name) const override {
    auto pos = pos_;
    auto items = items_;
    if (name == "current") return items[*pos];
    if (name == "next")
      return Value::object(std::make_shared<Closure>("next", [pos, items](Interpreter&, CallArgs&) {
        Value v = items[*pos];
        *pos = (*pos + 1) % items.size();
        return v;
      }));
    if (name == "reset")
      return Value::object(std::make_shared<Closure>("reset", [pos](Interpreter&, CallArgs&) {
        *pos = 0;
        return Value::none();
      }));
    return std::nullopt;
  }

 private:
  List items_;
  std::shared_ptr<std::size_t> pos_ = std::make_shared<std::size_t>(0);
};

Value g_cycler(Interpreter&, const Value&, CallArgs& args) {
  if (args.positional.empty()) type_error("at least one item has to be provided");
  return Value::object(std::make_shared<Cycler>(args.positional));
}

Value g_joiner(Interpreter&, const Value&, CallArgs& args) {
  const auto a = bind("joiner", args, {{"sep", str(", ")}});
  auto used = std::make_shared<bool>(false);
  const Value sep = a[0];
  return Value::object(std::make_shared<Closure>("joiner", [used, sep](Interpreter&, CallArgs&) {
    if (!*used) {
      *used = true;
      return str("");
    }
    return sep;
  }));
}

Value g_lipsum(Interpreter&, const Value&, CallArgs&) {
  fault(FaultKind::unsupported,
        "lipsum() is not supported in troupe's chat templates (its output is random)");
}

}  // namespace

void add_globals(Scope& scope) {
  auto add = [&](const char* name, Function::Impl impl) {
    scope.set(name, Value::object(std::make_shared<Function>(name, Value(), impl)));
  };
  add("range", g_range);
  add("dict", g_dict);
  add("namespace", g_namespace);
  add("cycler", g_cycler);
  add("joiner", g_joiner);
  add("lipsum", g_lipsum);
  add("raise_exception", g_raise_exception);
  add("strftime_now", g_strftime_now);
}

}  // namespace troupe::chat
