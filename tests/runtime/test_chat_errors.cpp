// ChatTemplate's own contract, where there is no Python output to compare with: errors name
// the place and kind, refused features say so, bounds stop runaway templates, tokenizer
// directories are read as transformers reads them, and bad input never crashes.
#include "runtime/chat/chat_template.hpp"
#include "runtime/chat/globals.hpp"
#include "runtime/chat/interpreter.hpp"
#include "runtime/chat/parser.hpp"
#include "test_chat_util.hpp"
#include "test_tokenizer_util.hpp"

#include <catch2/catch.hpp>

#include <random>
#include <thread>

using troupe::ChatTemplate;
using troupe::ChatTemplateError;
using Kind = troupe::ChatTemplateError::Kind;
using troupe::chat_test::Json;
using troupe::tokenizer_test::TempDir;

namespace {

// The error `source` gives when parsed and rendered with `variables`.
ChatTemplateError error_of(const std::string& source, const Json& variables = Json::object(),
                           ChatTemplate::Limits limits = {}) {
  try {
    ChatTemplate t(source, limits);
    const std::string out = t.render_with(variables);
    FAIL("rendered " << Json(out).dump() << " instead of failing");
  } catch (const ChatTemplateError& e) {
    return e;
  }
  throw std::logic_error("unreachable");
}

const Json kMessages = Json::parse(R"([{"role": "user", "content": "hi"}])");

}  // namespace

TEST_CASE("chat errors: syntax errors name the line and column", "[chat]") {
  auto e = error_of("line one\n{% if true %}\n  {{ 1 + }}\n{% endif %}");
  CHECK(e.kind() == Kind::syntax);
  CHECK(e.line() == 3);
  CHECK(e.column() == 10);
  CHECK(std::string(e.what()).find("chat template line 3, column 10") != std::string::npos);

  e = error_of("{% for x in xs %}\n{{ x }}\n");
  CHECK(e.kind() == Kind::syntax);
  CHECK(e.message().find("'endfor' or 'else'") != std::string::npos);
  CHECK(e.message().find("innermost block that needs to be closed is 'for'") != std::string::npos);

  e = error_of("ok\n\n   {{ x | upperr }}");
  CHECK(e.kind() == Kind::syntax);
  CHECK(e.message() == "No filter named 'upperr'.");
  CHECK(e.line() == 3);

  e = error_of("{{ 'é' ~ 'unterminated }}");
  CHECK(e.kind() == Kind::syntax);
  CHECK(e.column() == 10);  // columns count characters, not bytes
}

TEST_CASE("chat errors: runtime errors name the place, raise_exception keeps its message",
          "[chat]") {
  auto e =
      error_of("a\n{% for m in messages %}{{ raise_exception('Bad role: ' ~ m.role) }}{% endfor %}",
               {{"messages", kMessages}});
  CHECK(e.kind() == Kind::raised);
  CHECK(e.message() == "Bad role: user");
  CHECK(e.line() == 2);
  CHECK(std::string(e.what()) ==
        "chat template line 2, column 27 raised an exception: Bad role: user");

  e = error_of("{{ missing.attr }}");
  CHECK(e.kind() == Kind::undefined);
  CHECK(e.message() == "'missing' is undefined");

  e = error_of("\n\n{{ 1 // 0 }}");
  CHECK(e.kind() == Kind::type);
  CHECK(e.line() == 3);

  e = error_of("{{ [].append(1) }}");
  CHECK(e.kind() == Kind::security);
  CHECK(e.message() == "access to attribute 'append' of 'list' object is unsafe.");
}

TEST_CASE("chat errors: what troupe does not implement is refused by name", "[chat]") {
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"{{ [1, 2] | batch(1) | list }}", "filter 'batch'"},
      {"{{ [1, 2] | random }}", "filter 'random'"},
      {"{% for x in [1] recursive %}{% endfor %}", "recursive for loops"},
      {"{% include 'other.jinja' %}", "{% include %}"},
      {"{% extends 'base' %}", "{% extends %}"},
      {"{% block b %}{% endblock %}", "{% block %}"},
      {"{% autoescape true %}{% endautoescape %}", "{% autoescape %}"},
      {"{{ range }}", "cannot print a function"},
      {"{{ [1] | select('odd') }}", "cannot print a generator"},
      {"{{ cycler(1) }}", "cannot print a Cycler"},
      {"{{ [1, 2].pop() }}", "list method pop()"},
      {"{{ 'a'.encode() }}", "str method encode()"},
      {"{{ 5.0.is_integer() }}", "float attribute is_integer"},
      {"{{ '\\N{BULLET}' }}", "\\N{...}"},
      {"{{ 99999999999999999999 }}", "64-bit"},
      {"{{ 9223372036854775807 + 1 }}", "64-bit"},
      {"{{ {1: 'a'} }}", "dict keys must be strings"},
      {"{{ (-8) ** 0.5 }}", "complex"},
      {"{{ f(*args) }}", "*args"},
      {"{% for (a, b), c in [] %}{% endfor %}", "nested tuple targets"},
      {"{{ lipsum() }}", "lipsum()"},
      {"{{ '{:z}'.format(1.0) }}", "'z' format option"},
      {"{{ '{:{}}'.format(1, 2) }}", "nested replacement fields"},
      {"{{ 'x'.expandtabs() }}", "str method expandtabs()"},
  };
  for (const auto& [source, what] : refused) {
    INFO(source);
    const auto e = error_of(source, {{"args", Json::array()}});
    CHECK(e.kind() == Kind::unsupported);
    CHECK_THAT(e.message(), Catch::Contains(what));
  }
}

TEST_CASE("chat errors: bounds stop runaway templates with a limit error", "[chat]") {
  ChatTemplate::Limits small;
  small.max_string_bytes = 1 << 16;
  small.max_total_bytes = 1 << 20;
  small.max_steps = 10'000;
  small.max_call_depth = 20;
  small.max_syntax_depth = 50;

  auto e = error_of("{% for i in range(100000) %}x{% endfor %}", Json::object(),
                    small);  // range is charged as steps
  CHECK(e.kind() == Kind::limit);
  e = error_of("{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}",
               Json::object(), small);
  CHECK(e.kind() == Kind::limit);
  CHECK_THAT(e.message(), Catch::Contains("steps"));
  e = error_of("{{ 'x' * 100000000000 }}", Json::object(), small);
  CHECK(e.kind() == Kind::limit);
  e = error_of("{% for i in range(5000) %}{{ 'abcdefghijklmnop' }}{% endfor %}", Json::object(),
               small);
  CHECK(e.kind() == Kind::limit);
  CHECK_THAT(e.message(), Catch::Contains("bytes"));
  e = error_of(
      "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% "
      "endfor %}",
      Json::object(), small);
  CHECK(e.kind() == Kind::limit);
  e = error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", Json::object(), small);
  CHECK(e.kind() == Kind::limit);
  CHECK_THAT(e.message(), Catch::Contains("nested deeper than 20"));
  e = error_of("{{ " + std::string(200, '(') + "1" + std::string(200, ')') + " }}", Json::object(),
               small);
  CHECK(e.kind() == Kind::limit);
  std::string nested_ifs;
  for (int i = 0; i < 100; ++i) nested_ifs += "{% if true %}";
  for (int i = 0; i < 100; ++i) nested_ifs += "{% endif %}";
  e = error_of(nested_ifs, Json::object(), small);
  CHECK(e.kind() == Kind::limit);
  // The defaults allow what real templates do.
  ChatTemplate ok("{% for i in range(1000) %}{{ i }}{% endfor %}");
  CHECK(ok.render_with(Json::object()).size() == 2890);
}

TEST_CASE("chat errors: tokenizer directories are read as transformers reads them", "[chat]") {
  TempDir dir;
  SECTION("AddedToken dicts, null and empty tokens, additional_special_tokens") {
    dir.write_json(
        "tokenizer_config.json",
        Json::parse(R"({"bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": false},
                                   "eos_token": "</s>", "pad_token": null, "unk_token": "",
                                   "additional_special_tokens": ["<x>", {"content": "<y>"}],
                                   "chat_template": "{{ bos_token }}|{{ eos_token }}|{{ pad_token is defined }}|{{ unk_token is defined }}|{{ additional_special_tokens }}|{{ messages[0].content }}{{ tools }}{{ documents }}{{ add_generation_prompt }}"})"));
    const auto t = ChatTemplate::from_tokenizer_dir(dir.path());
    CHECK(t.render(kMessages, true) == "<s>|</s>|False|False|['<x>', '<y>']|hiNoneNoneTrue");
    // Keyword arguments override special tokens, as apply_chat_template's kwargs do.
    CHECK(t.render(kMessages, false, Json{{"bos_token", "B"}}) ==
          "B|</s>|False|False|['<x>', '<y>']|hiNoneNoneFalse");
  }
  SECTION("a list of named templates: tool_use with tools, default otherwise") {
    dir.write_json("tokenizer_config.json",
                   Json::parse(R"({"chat_template": [{"name": "default", "template": "plain"},
                                                     {"name": "tool_use", "template": "tools: {{ tools | length }}"}]})"));
    const auto t = ChatTemplate::from_tokenizer_dir(dir.path());
    CHECK(t.render(kMessages, false) == "plain");
    CHECK(t.render(kMessages, false, Json{{"tools", Json::parse(R"([{"type": "function"}])")}}) ==
          "tools: 1");
    CHECK(t.source() == "plain");
  }
  SECTION("named templates without a default") {
    dir.write_json("tokenizer_config.json",
                   Json::parse(R"({"chat_template": [{"name": "rag", "template": "x"},
                                                                              {"name": "tool_use", "template": "y"}]})"));
    const auto t = ChatTemplate::from_tokenizer_dir(dir.path());
    try {
      (void)t.render(kMessages, false);
      FAIL("rendered without a default template");
    } catch (const ChatTemplateError& e) {
      CHECK(e.kind() == Kind::input);
      CHECK_THAT(e.message(),
                 Catch::Contains("no default specified") && Catch::Contains("rag, tool_use"));
    }
  }
  SECTION("chat_template.jinja wins over the config's field") {
    dir.write_json("tokenizer_config.json",
                   Json{{"chat_template", "from config"}, {"eos_token", "E"}});
    dir.write("chat_template.jinja", "from file {{ eos_token }}\n");
    CHECK(ChatTemplate::from_tokenizer_dir(dir.path()).render(kMessages, false) == "from file E");
  }
  SECTION("no chat template") {
    dir.write_json("tokenizer_config.json", Json{{"chat_template", nullptr}});
    try {
      (void)ChatTemplate::from_tokenizer_dir(dir.path());
      FAIL("loaded a missing template");
    } catch (const ChatTemplateError& e) {
      CHECK(e.kind() == Kind::input);
      CHECK_THAT(e.message(), Catch::Contains("chat_template is not set"));
    }
  }
  SECTION("bad files") {
    dir.write("tokenizer_config.json", "{not json");
    CHECK_THROWS_AS(ChatTemplate::from_tokenizer_dir(dir.path()), ChatTemplateError);
    dir.write_json("tokenizer_config.json", Json{{"chat_template", 5}});
    CHECK_THROWS_AS(ChatTemplate::from_tokenizer_dir(dir.path()), ChatTemplateError);
    dir.write_json("tokenizer_config.json", Json{{"chat_template", "x"}, {"bos_token", 5}});
    CHECK_THROWS_AS(ChatTemplate::from_tokenizer_dir(dir.path()), ChatTemplateError);
    dir.write_json("tokenizer_config.json", Json{{"chat_template", "{% if %}"}});
    CHECK_THROWS_AS(ChatTemplate::from_tokenizer_dir(dir.path()), ChatTemplateError);
    CHECK_THROWS_AS(ChatTemplate::from_tokenizer_dir(dir.path() / "absent"), troupe::Error);
  }
}

TEST_CASE("chat errors: render() checks its arguments as apply_chat_template does", "[chat]") {
  const ChatTemplate t("{{ messages | length }}");
  auto input_error = [&](const Json& messages, const Json& extra) {
    try {
      (void)t.render(messages, false, extra);
    } catch (const ChatTemplateError& e) {
      return e.kind() == Kind::input;
    }
    return false;
  };
  CHECK(input_error(Json::object(), Json::object()));
  CHECK(input_error(kMessages, Json::array()));
  CHECK(input_error(kMessages, Json{{"messages", kMessages}}));
  CHECK(input_error(kMessages, Json{{"add_generation_prompt", true}}));
  CHECK(input_error(kMessages, Json{{"tools", "get_weather"}}));
  CHECK(input_error(kMessages, Json{{"tools", Json::array({1})}}));
  CHECK(input_error(kMessages, Json{{"documents", Json::object()}}));
  CHECK(t.render(kMessages, false, Json{{"tools", nullptr}}) == "1");
  // Strings that are not UTF-8 are refused, not passed on.
  Json bad = kMessages;
  bad[0]["content"] = std::string("\xff\xfe");
  CHECK_THROWS_AS((void)t.render(bad, false), ChatTemplateError);
}

TEST_CASE("chat errors: key order reaches tojson as the caller gave it", "[chat]") {
  const ChatTemplate t("{{ messages[0] | tojson }}");
  const Json ordered = Json::parse(R"([{"role": "user", "content": "x", "a": 1}])");
  CHECK(t.render(ordered, false) == R"({"role": "user", "content": "x", "a": 1})");
  // nlohmann::json sorts its keys before troupe sees them.
  const nlohmann::json sorted =
      nlohmann::json::parse(R"([{"role": "user", "content": "x", "a": 1}])");
  CHECK(t.render(sorted, false) == R"({"a": 1, "content": "x", "role": "user"})");
}

TEST_CASE("chat errors: strftime_now reads the clock it is given", "[chat]") {
  ChatTemplate t("{{ strftime_now('%Y') }}");
  t.set_clock([] {
    return std::chrono::system_clock::time_point(std::chrono::seconds(0)) +
           std::chrono::hours(24 * 400);
  });
  CHECK(t.render(kMessages, false) == "1971");
}

TEST_CASE("chat errors: one template renders on several threads at once", "[chat]") {
  const ChatTemplate t(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{{ m.content "
      "}}{% endfor %}{{ ns.n }}");
  Json messages = Json::array();
  for (int i = 0; i < 50; ++i)
    messages.push_back({{"role", "user"}, {"content", std::to_string(i)}});
  const std::string expected = t.render(messages, false);
  std::vector<std::string> got(4);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&, k] {
      for (int r = 0; r < 50; ++r) got[k] = t.render(messages, false);
    });
  for (auto& th : threads) th.join();
  for (const auto& g : got) CHECK(g == expected);
}

TEST_CASE("chat errors: mangled templates fail cleanly, never crash", "[chat]") {
  // Byte-level mutations of template snippets: every outcome is text or a ChatTemplateError.
  std::vector<std::string> seeds = {
      "{%- for m in messages %}{{ '<|' + m.role + '|>' + m.content | trim }}{% if loop.last %}x{% "
      "endif %}{% endfor %}",
      "{% set ns = namespace(a=[]) %}{% macro f(x, y=2) %}{{ x ~ y }}{% endmacro %}{{ f(1) }}{{ "
      "ns.a | tojson(indent=2) }}",
      "{{ 'a,b'.split(',') | map('upper') | join('-') }}{{ {'k': [1, 2.5, none]} | dictsort }}{{ "
      "'%5.1f' % 3.14 }}",
      "{% if x is defined and x.y[1:] %}{{ x.y[::-1] }}{% elif z %}{% raw %}{{{% endraw %}{% else "
      "%}{# c #}{% endif %}",
  };
  // The real templates too, where they have been fetched.
  for (const char* name : {"qwen3", "llama3", "llama2", "gemma3", "deepseek_v3"}) {
    const auto config = troupe::tokenizer_test::real_tokenizers() / name / "tokenizer_config.json";
    if (!std::filesystem::exists(config)) continue;
    const auto j = troupe::tokenizer_test::read_json(config);
    if (j.contains("chat_template") && j["chat_template"].is_string())
      seeds.push_back(j["chat_template"].get<std::string>());
  }
  ChatTemplate::Limits small;
  small.max_string_bytes = 1 << 16;
  small.max_steps = 20'000;
  small.max_call_depth = 20;
  std::mt19937 rng(20261205);
  const std::string alphabet = "{}%#-+()[]|~.,:'\"\\ \nabcxyz0123456789=<>!*/";
  int rendered = 0, refused = 0;
  const Json messages =
      Json::parse(R"([{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
      {"role": "assistant", "content": "<think>r</think>a", "tool_calls": [{"function": {"name": "f", "arguments": {"x": 1}}}]},
      {"role": "tool", "content": "t"}, {"role": "user", "content": "v"}])");
  for (int i = 0; i < 3000; ++i) {
    std::string s = seeds[i % seeds.size()];
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < edits && !s.empty(); ++k) {
      const std::size_t at = rng() % s.size();
      switch (rng() % 3) {
        case 0:
          s.erase(at, 1 + rng() % 3);
          break;
        case 1:
          s.insert(at, 1, alphabet[rng() % alphabet.size()]);
          break;
        default:
          s[at] = alphabet[rng() % alphabet.size()];
      }
    }
    try {
      ChatTemplate t(s, small);
      (void)t.render(kMessages, true,
                     Json{{"x", Json{{"y", Json::array({1, 2, 3})}}}, {"z", true}});
      ++rendered;
    } catch (const ChatTemplateError&) {
      ++refused;
    } catch (const std::exception& e) {
      FAIL("template " << Json(s).dump() << " threw a non-template error: " << e.what());
    }
  }
  CHECK(rendered + refused == 3000);
  CHECK(rendered > 100);
  CHECK(refused > 100);
}

TEST_CASE("chat errors: a render frees the reference cycles it makes", "[chat]") {
  // A probe object reachable only through a cycle the template builds: a namespace that
  // holds itself, a macro stored in the scope it closes over, loop state that holds a
  // namespace holding the loop. Once the render is over, nothing may keep it alive.
  namespace chat = troupe::chat;
  struct Probe : chat::Object {
    [[nodiscard]] std::string type_name() const override { return "Probe"; }
  };
  for (const char* source :
       {"{% set ns = namespace(p=probe) %}{% set ns.self = ns %}",
        "{% set keep = probe %}{% macro m() %}{{ keep is defined }}{% endmacro %}{{ m() }}",
        "{% for x in [1] %}{% set ns = namespace(p=probe) %}{% if loop.changed(ns) %}"
        "{% set ns.l = loop %}{% endif %}{% endfor %}",
        "{% macro outer() %}{{ caller() }}{% endmacro %}{% set keep = probe %}"
        "{% call outer() %}{{ keep is defined }}{% endcall %}"}) {
    INFO(source);
    std::weak_ptr<Probe> weak;
    {
      auto probe = std::make_shared<Probe>();
      weak = probe;
      const auto body = chat::parse(source, 100);
      auto context = std::make_shared<chat::Scope>();
      chat::add_globals(*context);
      context->set("probe", chat::Value::object(std::move(probe)));
      const chat::Limits limits;
      chat::Interpreter interpreter(limits, [] { return std::chrono::system_clock::now(); });
      (void)interpreter.render(body, context);
    }
    CHECK(weak.expired());
  }
}
