// The template language itself: small templates, one per construct, rendered by troupe and
// by Python's Jinja2 (tools/chat_reference/render.py, transformers' environment) with the
// same variables. Each must give the same text, or both must fail the same way.
#include "runtime/chat/chat_template.hpp"
#include "test_chat_util.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using troupe::ChatTemplate;
using troupe::ChatTemplateError;
using namespace troupe::chat_test;

namespace {

// Variables every snippet sees (JSON, so Python gets the same values in the same order).
const char* const kContext = R"J({
  "users": [{"name": "bob", "age": 31, "admin": true}, {"name": "amy", "age": 25, "admin": false},
            {"name": "Cid", "age": 40, "admin": false, "tags": ["x"]}],
  "d": {"z": 1, "a": 2, "items": 5},
  "l": [0, 1, 2, 3, 4, 5, 6],
  "s": "héllo wörld",
  "empty": [],
  "n": 5,
  "bos_token": "<s>",
  "eos_token": "</s>",
  "f": 2.5,
  "nested": {"a": {"b": [10, 20]}},
  "tool": {"type": "function", "function": {"name": "get_weather", "description": "Weather — now.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
  "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather.",
              "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City"},
              "days": {"type": "integer", "minimum": 1, "maximum": 7.5}, "tags": {"type": "array", "items": {"type": "string"}}},
              "required": ["city"]}}},
            {"type": "function", "function": {"name": "now", "description": "Time.", "parameters": {"type": "object", "properties": {}}}}],
  "documents": [{"title": "A", "text": "alpha"}, {"title": "B", "text": "beta", "source": "x.org"}],
  "chat": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Paris?"},
           {"role": "assistant", "content": null, "tool_calls": [{"id": "abcDEF123", "type": "function",
            "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}]},
           {"role": "tool", "tool_call_id": "abcDEF123", "content": "{\"t\": 21}"},
           {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nSunny, 21 °C."}, {"role": "user", "content": "Thanks"}],
  "messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"},
               {"role": "assistant", "content": "hello", "tool_calls": [{"function": {"name": "f", "arguments": {"x": 1}}}]},
               {"role": "tool", "content": "out"}, {"role": "user", "content": "bye"}]
})J";

using Snippets = std::vector<std::string>;

// Compares every snippet; returns how many Python rendered (the rest raised), or -1 when
// the reference is missing.
int check_snippets(const Snippets& snippets) {
  const Json context = Json::parse(kContext);
  Json request = {{"now", fixed_now}, {"cases", Json::array()}};
  for (const auto& s : snippets)
    request["cases"].push_back({{"template", s}, {"context", context}});
  const auto run = run_reference(request);
  if (reference_missing(run)) return -1;
  int rendered = 0;
  for (std::size_t i = 0; i < snippets.size(); ++i) {
    rendered += run.results[i]["ok"].get<bool>() ? 1 : 0;
    check_same(
        run.results[i],
        [&] {
          ChatTemplate t(snippets[i]);
          t.set_clock(fixed_clock);
          return t.render_with(context);
        },
        "template: " + Json(snippets[i]).dump());
  }
  return rendered;
}

}  // namespace

TEST_CASE("jinja: whitespace control, trim_blocks, lstrip_blocks, comments, raw", "[chat][jinja]") {
  check_snippets({
      "a\n{% if true %}\nb\n{% endif %}\nc",
      "  {% if true %}x{% endif %}  \n  y",
      "{%- if true -%}  x  {%- endif -%}  z",
      "a {{- ' b ' -}} c",
      "a\n  {{ 'x' }}\n  {% if true %}\ny{% endif %}",
      "{% if true +%}\n  x{%+ if true %}y{% endif %}\n{% endif %}",
      "line\n    {# comment #}\nnext",
      "{#- c -#}  x  {# c2 #}\n y {#+ c3 +#}\n",
      "{% raw %}{{ not }} {% if %}{% endraw %}|{%- raw -%}  a  {%- endraw -%}|",
      "{% raw %}\nx\n  {% endraw %}\ny",
      "trailing newline\n",
      "two trailing\n\n",
      "crlf\r\nline\r\n{% if true %}\r\nx\r\n{% endif %}\r\nend\r",
      "\t{% if true %}\ttab{% endif %}",
      "{{ 'a' }}\n{{ 'b' }}\n",
      "{% for i in [1, 2] %}\n  {{ i }}\n{% endfor %}\n",
      "x\u00a0\u3000 {%- if true %}y{% endif %}",
      "a  \n  {%- if true %}b{% endif %}",
      "{% if true %}  \n  {% endif %}end",
      "{%if true%}{{1}}{%endif%}",
      "text {{ '{{' }} {{ '}}' }} {{ {'a': {'b': 1}} }}",
  });
}

TEST_CASE("jinja: literals and how values print", "[chat][jinja]") {
  check_snippets({
      R"({{ 'it\'s' }} {{ "dq \"x\"" }} {{ 'tab\tnl\nuni\u00e9\U0001F600 hex\x41 oct\101 bs\\ unknown\d' }})",
      "{{ 1_000 }} {{ 0x1F }} {{ 0o17 }} {{ 0b101 }} {{ 1.5e3 }} {{ 2.0 }} {{ 1e-7 }} {{ 1E5 }}",
      "{{ 10000000000000000.0 }} {{ 1000000000000000.0 }} {{ 0.0001 }} {{ 0.00001 }} {{ 0.1 + 0.2 "
      "}} {{ 1/3 }} "
      "{{ -0.0 }} {{ 123456789.123456789 }} {{ 5e-324 }} {{ 1.7976931348623157e308 }}",
      "{{ [1, 'two', 3.0, none, true, false, [], {}, ()] }}",
      "{{ {'b': 1, 'a': [1, {'x': none}]} }} {{ {} }}",
      "{{ (1,) }} {{ (1, 2) }} {{ () }} {{ 1, 2 }}",
      "{{ True }} {{ False }} {{ None }} {{ none }} {{ true }}",
      "{{ 'a' 'b' \"c\" }}",
      "{{ 'é' ~ 1 ~ 2.5 ~ none ~ true ~ [1] ~ missing }}",
      R"({{ ["it's", 'say "hi"', 'both \' "', 'back\\slash', 'nl\n'] }})",
      R"({{ ['\x00\x1f\x7f\x80\xa0\u00ad\u200b\u2028é\U0001F600\ufeff\U000e0001'] }})",
      "{{ users }}",
      "{{ tool }}",
      "{{ d.keys() }} {{ d.values() }} {{ d.items() }}",
  });
}

TEST_CASE("jinja: arithmetic, comparison, logic, membership", "[chat][jinja]") {
  check_snippets({
      "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % -3 }} {{ -7 % 3 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ 2 ** "
      "10 }} "
      "{{ 2 ** -1 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ 7 / 2 }} {{ 6 / 3 }} {{ 2.0 ** 0.5 }}",
      "{{ 'ab' * 3 }} {{ 3 * 'ab' }} {{ [1] * 3 }} {{ 'x' * 0 }}|{{ 'x' * -1 }}|{{ true + 1 }} {{ "
      "1 + 1.5 }} "
      "{{ true * 'z' }}",
      "{{ [1] + [2] }} {{ (1,) + (2,) }} {{ 'a' + 'b' }} {{ n - f }} {{ -n }} {{ +f }} {{ - - n }}",
      "{{ 'a' + 1 }}",
      "{{ 1 / 0 }}",
      "{{ 1 // 0 }}",
      "{{ 5 % 0 }}",
      "{{ [1] + (2,) }}",
      "{{ none + 1 }}",
      "{{ -'a' }}",
      "{{ 1.5 * 'a' }}",
      "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ (1, "
      "2) == (1, 2) }} "
      "{{ [1] == (1,) }} {{ none == none }} {{ 1 != 2 }} {{ 'B' < 'a' }} {{ 'é' > 'z' }} {{ [1] <= "
      "[1] }} {{ true == 1 }}",
      "{{ 1 < 'a' }}",
      "{{ none < 1 }}",
      "{{ 'a' in 'cat' }} {{ 1 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }} {{ 'x' in "
      "missing }} "
      "{{ 'a' in d }} {{ 1 in d }} {{ (1, 2) in [(1, 2)] }} {{ '' in 'abc' }}",
      "{{ 1 in 'abc' }}",
      "{{ 1 in 5 }}",
      "{{ true and 'x' }} {{ 0 or 'y' }} {{ '' and 1 }}|{{ not 0 }} {{ not [] }} {{ none or none "
      "}} {{ [] or {} }} "
      "{{ not 'a' == 'b' }} {{ not (1 and 0) }}",
      "{{ 'yes' if 1 else 'no' }} {{ 'yes' if 0 }}|{{ ('a' if 0) is defined }} {{ 1 if 0 else 2 if "
      "0 else 3 }}",
      "{{ 1 + 2 * 3 - 4 / 2 }} {{ (1 + 2) * 3 }} {{ 2 * 3 ~ 4 }} {{ 1 ~ 2 + 3 }} {{ -n | abs }} {{ "
      "not n is none }}",
      "{{ 9223372036854775807 }} {{ -9223372036854775807 - 1 }}",
  });
}

TEST_CASE("jinja: undefined values and lookups", "[chat][jinja]") {
  check_snippets({
      "[{{ missing }}] {{ missing is defined }} {{ missing is undefined }} {{ missing | length }} "
      "{{ missing | default('d') }} {{ not missing }}{% for x in missing %}x{% endfor %}{{ missing "
      "| list }}"
      "{{ missing | join }}|{{ missing | upper }}|{{ missing | trim }}|{{ missing | string }}|{{ "
      "missing | first }}|",
      "{{ missing.attr }}",
      "{{ missing['k'] }}",
      "{{ d.nokey }}|{{ d['nokey'] }}|{{ d.nokey is defined }}|{{ d.z }}{{ d['a'] }}",
      "{{ d.a.b }}",
      "{{ d.nokey.b }}",
      "{{ l[5] }}|{{ l[-1] }}|{{ l[100] }}|{{ l['x'] }}|{{ l[1.5] }}|{{ l.0 }}",
      "{{ missing + 1 }}",
      "{{ 1 + missing }}",
      "{{ missing ~ 'x' }}",
      "{{ missing() }}",
      "{{ missing < 1 }}",
      "{{ none.attr }}|{{ 'abc'.nope }}|{{ [].nope }}|{{ n.nope }}|",
      "{{ missing == missing }} {{ missing != 1 }} {{ missing == none }}",
      "{{ d['items'] }} {{ d.get('items') }} {{ d.get('q') }} {{ d.get('q', 'dflt') }} {{ "
      "d.get('z') }}",
      "{{ nested.a.b[1] }} {{ nested['a']['b'][0] }} {{ nested.a.b.1 }} {{ "
      "messages[2].tool_calls[0].function.arguments }}",
      "{{ s[0] }}{{ s[-1] }}|{{ s[1:3] }}|{{ s[::-1] }}|{{ s[::2] }}|{{ s[10:] }}|{{ s[-100:2] "
      "}}|{{ s[20] }}|",
      "{{ l[1:] }} {{ l[:-1] }} {{ l[::-1] }} {{ l[::2] }} {{ l[5:1:-2] }} {{ l[-2:] }} {{ l[:100] "
      "}} {{ l[3:1] }}",
      "{{ l[::0] }}",
      "{{ l['a':] }}|{{ d[1:] }}|",
      "{{ messages[1:] | length }} {{ messages[-1].content }} {{ messages[::-1][0].role }}",
      "{{ ''.__class__ }}|{{ d.__len__ }}|",
      "{{ ''.__class__.__name__ }}",
      "{{ [1].append(2) }}",
      "{{ {}.update({'a': 1}) }}",
      "{{ d.update }}|{{ [].sort }}|",
  });
}

TEST_CASE("jinja: str methods", "[chat][jinja]") {
  check_snippets({
      R"({{ '  x  '.strip() }}|{{ 'xxhixx'.strip('x') }}|{{ '  x'.lstrip() }}|{{ 'x  '.rstrip() }}|{{ '\n\t x \u3000\x1c'.strip() }}|{{ 'abcab'.strip('ba') }}|)",
      "{{ 'a,b,,c'.split(',') }} {{ ' a  b c '.split() }} {{ 'a b c'.split(' ', 1) }} {{ "
      "'a,b,c'.rsplit(',', 1) }} "
      "{{ '  a b  '.rsplit(None, 1) }} {{ ''.split() }} {{ ''.split(',') }} {{ 'a "
      "b'.split(maxsplit=0) }} "
      "{{ '  a b  '.split(None, 1) }} {{ 'aXXbXX'.split('XX') }}",
      R"({{ 'l1\nl2\r\nl3\rl4\x0bl5\u2028l6'.splitlines() }} {{ 'a\nb\n'.splitlines(true) }} {{ ''.splitlines() }})",
      "{{ 'Hello'.startswith('He') }} {{ 'Hello'.startswith(('x', 'H')) }} {{ "
      "'Hello'.endswith('lo') }} "
      "{{ 'Hello'.startswith('l', 2) }} {{ 'héllo'.endswith('l', 0, 4) }} {{ ''.startswith('') }}",
      "{{ 'hello world'.title() }} {{ \"they're bill's\".title() }} {{ 'hELLO wORLD'.capitalize() "
      "}} "
      "{{ 'straße ﬁ'.upper() }} {{ 'ΣΑΣ ΟΔΟΣ Σ'.lower() }} {{ 'İ'.lower() | length }} {{ "
      "'ǆemal'.title() }} "
      "{{ 'ß'.capitalize() }} {{ 'ŉ'.upper() }} {{ 'HELLO'.lower() }} {{ 'ÀÉÎ'.lower() }}",
      "{{ 'aaa'.replace('a', 'b', 2) }} {{ 'abc'.replace('', '-') }} {{ 'x'.replace('x', 'yy') }} "
      "{{ 'héllo'.replace('é', 'e') }} {{ 'abc'.replace('', '-', 2) }}",
      "{{ 'hello'.find('l') }} {{ 'hello'.rfind('l') }} {{ 'hello'.find('z') }} {{ "
      "'héllo'.index('l') }} "
      "{{ 'hello'.count('l') }} {{ 'aaaa'.count('aa') }} {{ 'héllo'.find('l', 3) }} {{ "
      "'abc'.count('') }}",
      "{{ 'hello'.index('z') }}",
      "{{ '-'.join(['a', 'b']) }} {{ 'x'.center(6, '*') }} {{ 'x'.center(5) }}| {{ 'x'.ljust(3) "
      "}}| "
      "{{ 'x'.rjust(3, '0') }} {{ '-5'.zfill(4) }} {{ 'é'.center(4, 'ü') }}",
      "{{ '-'.join([1, 2]) }}",
      "{{ 'a=b=c'.partition('=') }} {{ 'a=b=c'.rpartition('=') }} {{ 'abc'.partition('x') }} "
      "{{ 'prefix_x'.removeprefix('prefix_') }} {{ 'x.json'.removesuffix('.json') }} {{ "
      "'x'.removesuffix('') }}",
      "{{ '{} and {}'.format(1, 'two') }} {{ '{0}{1}{0}'.format('a', 'b') }} {{ "
      "'{name}!'.format(name='Ann') }} "
      "{{ '{:>5}|{:<5}|{:^5}|{:*^7}'.format('a', 'b', 'c', 'd') }} {{ '{!r} {!s}'.format('x', 1.0) "
      "}} {{ '{{lit}}'.format() }}",
      "{{ '{:.2f} {:5d} {:05.1f} {:,} {:_} {:+d} {: d} {:x} {:#X} {:o} {:b} {:e} {:.3e} {:%} "
      "{:.1%}'.format("
      "3.14159, 42, 2.5, 1234567, 1234567, 5, 5, 255, 255, 8, 5, 12345.678, 0.000123, 0.25, 0.125) "
      "}}",
      "{{ '{} {:g} {:.3} {:.3g} {:10.4f}| {:<8.2e}|'.format(1.0, 1e20, 100.0, 1234.5678, 3.14159, "
      "2.5) }} "
      "{{ '{0[0]} {0[1]} {1.a}'.format(['x', 'y'], {'a': 'b'}) }} {{ '{:>{}}'.format('x', 3) if "
      "false }}",
      "{{ '{} {}'.format(1) }}",
      "{{ '%s and %d' % ('a', 3) }} {{ '%5.2f|%-4d|%04d|%x|%X|%o|%e|%g|%G' % (3.14159, 7, 42, 255, "
      "255, 8, 12345.678, 0.00001, 1e20) }} "
      "{{ '%(a)s-%(b)s' % {'a': 1, 'b': 2} }} {{ '%s' % 'x' }} {{ '%r' % 'x' }} {{ '%%' % () }} {{ "
      "'%c%c' % (65, 'b') }} "
      "{{ '%5s|%-5s|%.2s' % ('ab', 'cd', 'xyz') }} {{ '%+d % d %#x %#o' % (5, 5, 255, 8) }} {{ "
      "'%s' % [1, 2] }} "
      "{{ '%d' % 3.99 }} {{ '%.0f %.1f' % (0.5, 0.25) }} {{ '%s %s' % (none, true) }} {{ 'no args' "
      "% {} }} {{ '%s' % {'a': 1} }}",
      "{{ '%s %s' % ('a',) }}",
      "{{ '%s' % ('a', 'b') }}",
      "{{ '%d' % 'x' }}",
      "{{ 'abc'.isalpha() }} {{ '123'.isdigit() }} {{ '²'.isdigit() }} {{ '²'.isdecimal() }} {{ "
      "'½'.isnumeric() }} "
      "{{ ' \t'.isspace() }} {{ 'abc'.islower() }} {{ 'ABC'.isupper() }} {{ 'a1'.isalnum() }} {{ "
      "''.isalpha() }} "
      "{{ 'aB'.islower() }} {{ '1'.islower() }} {{ 'é'.isascii() }} {{ 'ǅ'.isupper() }}",
      "{{ 'abc'.swapcase() }}",
      "{{ s.upper() }} {{ s | length }} {{ s.split('ö') }}",
  });
}

TEST_CASE("jinja: filters", "[chat][jinja]") {
  check_snippets({
      "{{ '  x  ' | trim }}|{{ 'xxyxx' | trim('x') }}|{{ 'Hello' | upper }} {{ 'Hello' | lower }} "
      "{{ 'hello-world foo(bar) [x] <y> {z}' | title }} {{ 'hello WORLD' | capitalize }} {{ \"it's "
      "O'neil\" | title }}",
      "{{ [1, 2, 3] | length }} {{ 'héllo' | length }} {{ {'a': 1} | count }} {{ [3, 1, 2] | first "
      "}} "
      "{{ [3, 1, 2] | last }} {{ [] | first }}|{{ 'abc' | first }} {{ 'abc' | last }} {{ d | first "
      "}} {{ d | last }} {{ [] | last }}|",
      "{{ [1, 2] | join(', ') }} {{ ['a', 'b'] | join }} {{ users | join(', ', attribute='name') "
      "}} {{ [none, 1.0] | join('-') }}",
      "{{ users | map(attribute='name') | join('/') }} {{ users | map(attribute='missing', "
      "default='?') | list }} "
      "{{ ['a', 'b'] | map('upper') | list }} {{ users | map(attribute='tags.0') | list }} {{ [1, "
      "2] | map('string') | join('+') }}",
      "{{ users | selectattr('admin') | map(attribute='name') | list }} {{ users | "
      "rejectattr('admin') | map(attribute='name') | list }} "
      "{{ users | selectattr('age', 'gt', 30) | map(attribute='name') | list }} "
      "{{ users | selectattr('name', 'equalto', 'bob') | list | length }} {{ users | "
      "selectattr('tags', 'defined') | list | length }} "
      "{{ messages | rejectattr('role', 'equalto', 'tool') | map(attribute='role') | join(',') }} "
      "{{ messages | selectattr('tool_calls', 'undefined') | list | length }}",
      "{{ [1, 2, 3, 4] | select('odd') | list }} {{ [1, 2, 3, 4] | reject('even') | list }} {{ [0, "
      "1, '', 'a', none] | select | list }} "
      "{{ [1, 5, 3] | select('gt', 2) | list }} {{ [1, 'a', none] | select('string') | list }} {{ "
      "['a', 'B'] | select('in', ['a']) | list }}",
      "{{ [3, 1, 2] | sort }} {{ [3, 1, 2] | sort(reverse=true) }} {{ ['b', 'A', 'c'] | sort }} {{ "
      "['b', 'A', 'c'] | sort(case_sensitive=true) }} "
      "{{ users | sort(attribute='age') | map(attribute='name') | list }} {{ users | "
      "sort(attribute='admin,name') | map(attribute='name') | list }} "
      "{{ [[2, 'b'], [1, 'z'], [2, 'a']] | sort }} {{ ['b', 'a', 'B'] | sort(reverse=true) }}",
      "{{ [3, 'a'] | sort }}",
      "{{ [1, 2, 1, 'a', 'A', 'b'] | unique | list }} {{ ['a', 'A'] | unique(case_sensitive=true) "
      "| list }} "
      "{{ users | unique(attribute='admin') | map(attribute='name') | list }} {{ {'b': 1, 'a': 2, "
      "'C': 0} | dictsort }} "
      "{{ {'b': 1, 'a': 2} | dictsort(by='value', reverse=true) }} {{ {'x': 1} | items | list }} "
      "{{ missing | items | list }}",
      "{{ [[1], [1]] | unique | list }}",
      "{{ [1, 2, 3] | reverse | list }} {{ 'abc' | reverse }} {{ [1, 2, 3] | sum }} {{ users | "
      "sum(attribute='age') }} "
      "{{ [0.5, 1] | sum(start=10) }} {{ [3, 1, 2] | min }} {{ [3, 1, 2] | max }} {{ ['b', 'A'] | "
      "max }} {{ ['b', 'A'] | min }} "
      "{{ users | max(attribute='age') }} {{ [] | max }}|{{ ['b', 'A'] | max(case_sensitive=true) "
      "}} {{ (1, 2) | reverse | list }}",
      "{{ '42' | int }} {{ '4.7' | int }} {{ 'x' | int }} {{ 'x' | int(7) }} {{ '0x1A' | "
      "int(base=16) }} {{ 3.9 | int }} "
      "{{ -3.9 | int }} {{ '3.5' | float }} {{ 'x' | float }} {{ 2 | float }} {{ true | int }} {{ "
      "' 12 ' | int }} {{ '1_000' | int }} "
      "{{ '1e3' | float }} {{ 'inf' | float }} {{ none | int }} {{ none | float }} {{ '-0' | float "
      "}} {{ '077' | int }} {{ '0b11' | int(base=2) }}",
      "{{ missing | int }}",
      "{{ '10' | int(base=2.0) }} {{ '10' | int(base=99) }} {{ '0x1A' | int(base=0) }} {{ '010' | "
      "int(base=0) }} "
      "{{ '12' | int(base=0) }} {{ 'z' | int(base=36) }}",
      "{{ 'x' | indent(2.0) }}",
      "{{ 'x'.center(2.5) }}",
      "{{ 'a b c'.split(' ', 1.0) }}",
      "{{ 1.5 | round(1.5) }}",
      "{{ '%*d' % (5.0, 1) }}",
      "{{ 2.5 | round }} {{ 3.5 | round }} {{ 2.675 | round(2) }} {{ 3.14159 | round(3) }} {{ 1.5 "
      "| round(method='floor') }} "
      "{{ 1.2 | round(method='ceil') }} {{ 7 | round }} {{ 1234 | round(-2) }} {{ 1250 | round(-2) "
      "}} {{ 1250.0 | round(-2) }} "
      "{{ -2.5 | round }} {{ 0.125 | round(2) }} {{ 1e20 | round(2) }} {{ 15 | round(-1) }} {{ 25 "
      "| round(-1) }} {{ 2.5 | round(0, 'floor') }}",
      "{{ 1 | round(method='nope') }}",
      "{{ 'a' | default('b') }} {{ missing | default('b') }} {{ '' | default('b') }}|{{ '' | "
      "default('b', true) }} "
      "{{ none | default('b') }} {{ missing | d('short') }} {{ 0 | default(1, boolean=true) }}",
      R"({{ [1, 'a', none, true, 1.5, {'k': [1, 2]}] | tojson }} {{ {'b': 1, 'a': 'é"\\\n'} | tojson }} {{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }})",
      "{{ {'a': [1, 2], 'b': {}, 'c': []} | tojson(indent=2) }} {{ [1, [2, []]] | tojson(indent=0) "
      "}} {{ [1, 2] | tojson(indent='\\t') }}",
      R"({{ 'é😀' | tojson(ensure_ascii=true) }} {{ {'a': 1, 'b': [1, 2]} | tojson(separators=(',', ':')) }} {{ 1.0 | tojson }} {{ 1e100 | tojson }} {{ '<>&\'' | tojson }} {{ 'ctl\x01\x1f\x7f\x08\x0c' | tojson }} {{ (1, 2) | tojson }})",
      "{{ tool | tojson }}\n{{ tool | tojson(indent=4) }}\n{{ messages | tojson }}\n{{ tools | "
      "tojson(indent=2) }}",
      "{{ missing | tojson }}",
      "{{ range(2) | tojson }}",
      R"({{ 'a\nb\n\nc' | indent }}|{{ 'a\nb' | indent(2, true) }}|{{ 'a\n\nb' | indent(2, blank=true) }}|{{ 'x' | indent('>>', first=true) }}|{{ '' | indent }}|{{ 'a\r\nb' | indent(1) }})",
      "{{ 'x' | center(7) }}|{{ 'abcdef ghij' | truncate(7) }}|{{ 'abcdefghijklmn' | truncate(5, "
      "true) }}|"
      "{{ 'hello world foo bar baz' | truncate(12, leeway=0) }}|{{ 'short' | truncate(3) }}|",
      "{{ '<b>' | escape }} {{ '<b>' | e }} {{ ('<b>' | safe) + '<i>' }} {{ '<i>' + ('<b>' | safe) "
      "}} {{ '<b>' | safe | escape }} "
      "{{ ('x' | safe) is escaped }} {{ 'x' is escaped }} {{ '\\'\"&' | forceescape }} {{ ('<a>' | "
      "safe) ~ '<b>' }} {{ ['<'] | join | e }}",
      "{{ '%s-%s' | format('a', 'b') }} {{ '%(x)s' | format(x=1) }} {{ '%.2f' | format(2) }}",
      "{{ 5 | string }} {{ [1] | string }} {{ none | string }} {{ 'x' | list }} {{ {'a': 1, 'b': "
      "2} | list }} {{ (1, 2) | list }} "
      "{{ -3 | abs }} {{ -2.5 | abs }} {{ users[0] | attr('name') }} {{ users[0] | attr('nope') "
      "}}|{{ range(3) | list }}",
      "{% set g = [1, 2, 3] | select('odd') %}{{ g | list }}{{ g | list }}{{ g | first }}",
      "{% set g = [1, 2, 3] | map('string') %}{{ g | first }}{{ g | list }}",
      "{{ [1, 2] | select('odd') | length }}",
      "{% if [] | select('odd') %}truthy{% endif %} {{ [] | select('odd') | list | length }}",
      "{{ [1, 2] | map('upper') | list }} {{ [1, 2] | map('nosuchfilter') | list }}",
      "{{ ['a'] | select('nosuchtest') | list }}",
  });
}

TEST_CASE("jinja: tests", "[chat][jinja]") {
  check_snippets({
      "{{ 1 is odd }} {{ 2 is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }} {{ none "
      "is none }} {{ 1 is number }} "
      "{{ true is number }} {{ true is boolean }} {{ 1 is integer }} {{ true is integer }} {{ 1.0 "
      "is float }} {{ 'a' is string }} "
      "{{ {} is mapping }} {{ [] is iterable }} {{ 'a' is iterable }} {{ 1 is iterable }} {{ "
      "missing is iterable }} {{ [] is sequence }} "
      "{{ {} is sequence }} {{ missing is sequence }} {{ 'abc' is lower }} {{ 'ABC' is upper }} {{ "
      "true is true }} {{ 1 is true }} "
      "{{ false is false }} {{ 0 is false }} {{ d.items() is iterable }} {{ d.items() is sequence "
      "}} {{ range(2) is sequence }} "
      "{{ none is iterable }} {{ (1,) is sequence }} {{ 1.5 is number }}",
      "{{ 1 is eq 1 }} {{ 1 is == 1 }} {{ 1 is ne 2 }} {{ 2 is gt 1 }} {{ 2 is ge 2 }} {{ 1 is lt "
      "2 }} {{ 1 is le 0 }} "
      "{{ 1 is in [1, 2] }} {{ 'x' is not in 'abc' }} {{ none is sameas none }} {{ true is sameas "
      "true }} {{ 'upper' is filter }} "
      "{{ 'nope' is filter }} {{ 'odd' is test }} {{ range is callable }} {{ 'x' is callable }} {{ "
      "1 is not none }} "
      "{{ 2 is greaterthan 1 }} {{ 1 is lessthan 2 }} {{ 1 is equalto 1 }} {{ 1 is != 1 }} {{ "
      "missing is callable }} "
      "{{ 5 is >= 5 }} {{ 5 is < 6 }} {{ 5 is <= 4 }} {{ 5 is > 4 }}",
      "{{ (1 if missing is defined else 2) }} {{ missing is not defined and n is defined }}",
      "{{ missing is odd }}",
      "{{ 'a' is odd }}",
      "{{ 1 is nosuchtest }}",
  });
}

TEST_CASE("jinja: for loops", "[chat][jinja]") {
  check_snippets({
      "{% for x in ['a', 'b', 'c'] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ "
      "loop.revindex0 }}"
      "{{ loop.first }}{{ loop.last }}{{ loop.length }}[{{ loop.previtem }}|{{ loop.nextitem }}]{{ "
      "loop.cycle('o', 'e') }}"
      "{{ loop.depth }}{{ loop.depth0 }};{% endfor %}",
      "{% for x in [1, 2, 3, 4, 5] if x is odd %}{{ loop.index }}/{{ loop.length }}:{{ x }}{{ "
      "loop.last }} {% else %}none{% endfor %}",
      "{% for x in [] %}x{% else %}empty{% endfor %}{% for x in [2] if x > 5 %}x{% else "
      "%}filtered{% endfor %}"
      "{% for x in missing %}x{% else %}undef{% endfor %}",
      "{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}{{ v }}{% endfor %}{% for a, b in [[1, 2], "
      "[3, 4]] %}{{ a + b }}{% endfor %}"
      "{% for a, b in ['xy'] %}{{ b }}{{ a }}{% endfor %}{% for (a, b) in [(1, 2)] %}{{ a }}{{ b "
      "}}{% endfor %}",
      "{% for c in 'héj' %}[{{ c }}]{% endfor %}{% for k in {'z': 1, 'y': 2} %}{{ k }}{% endfor %}"
      "{% for x in range(3) %}{{ x }}{% endfor %}{% for x in d.values() %}{{ x }}{% endfor %}",
      "{% for x in [1, 2, 3, 4] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break "
      "%}{% endif %}{{ x }}{% endfor %}",
      "{% for i in range(3) %}{% for j in range(2) %}{{ loop.index }}{% endfor %}{{ loop.index "
      "}};{% endfor %}",
      "{% for i in range(2) %}{% set outer = loop %}{% for j in range(2) %}{{ outer.index }}{{ "
      "loop.index }} {% endfor %}{% endfor %}",
      "{% for x in [1, 1, 2, 2, 1] %}{% if loop.changed(x) %}{{ x }}{% endif %}{% endfor %}",
      "{% for a, b in [[1, 2, 3]] %}{% endfor %}",
      "{% for a, b in [[1]] %}{% endfor %}",
      "{% for x in 5 %}{% endfor %}",
      "{% for x in none %}{% endfor %}",
      "{% for x in [1, 2] %}{{ x }}{{ loop }}{% endfor %}{{ x }}|{{ loop }}|",
      "{% for m in messages %}{{ m.role }}{% if not loop.last %},{% endif %}{% endfor %}",
      "{% for m in messages[::-1] %}{% set index = (messages | length - 1) - loop.index0 %}{{ "
      "index }}{{ m.role[0] }} {% endfor %}",
      "{{ range(3) | list }} {{ range(1, 7, 2) | list }} {{ range(5, 0, -2) | list }} {{ range(0) "
      "| list }} {{ range(3) }} "
      "{{ range(1, 10, 3) }} {{ range(3) | length }} {{ range(10)[2:9:3] }} {{ range(5)[::-1] }} "
      "{{ range(3)[1] }} {{ range(-3) | list }}",
      "{{ range(200000) | length }}",
      "{{ range(1, 2, 0) }}",
      "{{ range(1.5) }}",
  });
}

TEST_CASE("jinja: set, scoping, namespace, with, filter blocks", "[chat][jinja]") {
  check_snippets({
      "{% set count = 0 %}{% for i in range(3) %}{% set count = count + 1 %}{{ count }}{% endfor "
      "%}{{ count }}",
      "{% set x = 1 %}{% for i in [1] %}{{ x }}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}",
      "{% for i in [1, 2] %}{% if i == 2 %}{{ y }}{% endif %}{% set y = i %}{% endfor %}|{{ y }}|",
      "{% set x = 1 %}{% if true %}{% set x = 2 %}{% endif %}{{ x }}{% if false %}{% else %}{% set "
      "x = 3 %}{% endif %}{{ x }}",
      "{% set ns = namespace(count=0, items=[]) %}{% for i in range(3) %}{% set ns.count = "
      "ns.count + i %}"
      "{% set ns.items = ns.items + [i] %}{% endfor %}{{ ns.count }} {{ ns.items }} {{ ns.missing "
      "}}|{{ ns }}",
      "{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}{{ ns['a'] }}{% set ns.a = 'x' "
      "%}{{ ns.a }} {{ ns }}",
      "{% set x = 5 %}{% set x.y = 1 %}",
      "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c, d = 'xy' %}{{ c }}{{ d }}{% set e = 1, 2 %}{{ "
      "e }}",
      "{% set x %}  block {{ 1 + 1 }}  {% endset %}[{{ x }}]{% set y | trim | upper %}  inner  {% "
      "endset %}[{{ y }}]",
      "{% set x %}{% set inner = 5 %}{% endset %}{{ inner }}|",
      "{% with a = 1, b = 2 %}{{ a + b }}{% set c = 3 %}{% endwith %}{{ a }}|{{ c }}|{% with %}{% "
      "set q = 1 %}{% endwith %}{{ q }}|",
      "{% set a = 5 %}{% with a = a + 1, b = a %}{{ a }}{{ b }}{% endwith %}",
      "{% filter upper %}hello {{ 'world' }}{% endfilter %}{% filter trim | replace('a', 'b') %}  "
      "aaa  {% endfilter %}|"
      "{% filter upper %}{% set z = 1 %}{% endfilter %}{{ z }}|",
      "{% set messages = [] %}{{ messages | length }}",
      "{% set add_generation_prompt = true %}{{ add_generation_prompt }}",
      "{% set loop_messages = messages[1:] %}{% for m in loop_messages %}{{ loop.index0 }}{{ "
      "m.role }} {% endfor %}",
      "{% if messages[0]['role'] == 'system' %}{% set sys = messages[0]['content'] %}{% else %}{% "
      "set sys = false %}{% endif %}"
      "{{ sys }} {{ sys != false }}",
      "{% print 'a', 1 %}{% print n %}",
  });
}

TEST_CASE("jinja: macros and call blocks", "[chat][jinja]") {
  check_snippets({
      "{% set x = 5 %}{% macro show() %}{{ x }}{% endmacro %}{% set x = 6 %}{{ show() }}",
      "{% macro m(a, b=a ~ '!', c='d') %}{{ a }}|{{ b }}|{{ c }}{% endmacro %}{{ m(1) }} {{ m(1, "
      "c=3) }} {{ m(b=2, a=1) }}",
      "{% macro m(a) %}[{{ a }}]{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, k='v') }}{{ "
      "m() }}",
      "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}",
      "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(b=1) }}",
      "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, a=2) }}",
      "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1) | int }}{% endif %}{% "
      "endmacro %}{{ fact(5) }}",
      "{% macro outer() %}<{{ caller() }}>{% endmacro %}{% call outer() %}inside {{ 1 }}{% endcall "
      "%}",
      "{% macro list_items(items) %}{% for i in items %}{{ caller(i) }}{% endfor %}{% endmacro %}"
      "{% call(item) list_items([1, 2]) %}({{ item }}){% endcall %}",
      "{% macro m() %}{{ caller is defined }}{% endmacro %}{{ m() }}",
      "{% for i in [1, 2] %}{% macro m() %}{{ i }}{% endmacro %}{{ m() }}{% endfor %}",
      "{% macro m() %}{% set inner = 1 %}{{ inner }}{% endmacro %}{{ m() }}{{ inner }}|",
      "{% macro m(x) %}\n  {{ x }}\n{% endmacro %}\n{{ m('a') }}|{{ m('b') | trim }}|",
      "{% macro m() %}{{ raise_exception('from macro') }}{% endmacro %}{{ m() }}",
      "{% macro render_tool(t) %}{{ t.function.name }}({{ t.function.parameters.properties | list "
      "| join(', ') }}){% endmacro %}"
      "{{ render_tool(tool) }}",
      "{% macro m() %}x{% endmacro %}{{ m is callable }} {{ m.name }} {{ m }} {{ [m] }}",
      "{% macro m(a, b) %}{% endmacro %}{% macro m2(a=1, b) %}{% endmacro %}",
  });
}

TEST_CASE("jinja: globals and transformers' additions", "[chat][jinja]") {
  check_snippets({
      "{{ raise_exception('boom: ' ~ 1) }}",
      "{% if true %}before{{ raise_exception('in if') }}{% endif %}",
      "{{ raise_exception(none) }}",
      "{{ raise_exception() }}",
      "{{ strftime_now('%Y-%m-%d %H:%M:%S %A %B %j %a %b %d %y %I %p %f %% %Z|%z') }}",
      "{{ strftime_now('%d %B %Y') }}",
      "{{ dict(a=1, b=[2]) }} {{ dict([('x', 1)]) }} {{ dict({'a': 1}, b=2) }} {{ dict() }}",
      "{% set c = cycler('a', 'b') %}{{ c.next() }}{{ c.next() }}{{ c.next() }}{{ c.current }}{{ "
      "c.reset() }}{{ c.next() }}",
      "{% set j = joiner('|') %}{% for x in [1, 2, 3] %}{{ j() }}{{ x }}{% endfor %}{% set k = "
      "joiner() %}{{ k() }}{{ k() }}",
      "{% generation %}gen {{ 1 }}{% set g = 1 %}{% endgeneration %}{{ g }}|",
      "{{ [1, 2].index(2) }} {{ [1, 1].count(1) }} {{ (1, 2).index(2) }} {{ d.copy() }} {{ "
      "[1].copy() }}",
      "{{ [1, 2].index(5) }}",
  });
}

TEST_CASE("jinja: constructs that published chat templates use", "[chat][jinja]") {
  // Written here in the style of the templates of Llama 3.1, Mistral, Hermes / Qwen 2.5,
  // Command R, Granite, DeepSeek R1 and Phi, to cover what the five fetched ones do not.
  const int rendered = check_snippets({
      // Llama 3.1: date from strftime_now, system message split off, tools as indented JSON.
      "{{- bos_token }}\n{%- if not tools is defined %}{%- set tools = none %}{%- endif %}\n"
      "{%- if not date_string is defined %}{%- set date_string = strftime_now('%d %b %Y') %}{%- "
      "endif %}\n"
      "{%- if chat[0]['role'] == 'system' %}\n    {%- set system_message = chat[0]['content']|trim "
      "%}\n"
      "    {%- set chat = chat[1:] %}\n{%- else %}\n    {%- set system_message = '' %}\n{%- endif "
      "%}\n"
      "{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}{{- 'Today Date: ' + date_string + "
      "'\\n\\n' }}\n"
      "{%- if tools is not none %}\n    {%- for t in tools %}\n        {{- t | tojson(indent=4) "
      "}}\n        {{- '\\n\\n' }}\n"
      "    {%- endfor %}\n{%- endif %}\n{{- system_message }}{{- '<|eot_id|>' }}\n"
      "{%- for message in chat %}\n    {%- if 'tool_calls' in message %}\n"
      "        {%- set tool_call = message.tool_calls[0].function %}\n"
      "        {{- '{\"name\": \"' + tool_call.name + '\", ' }}{{- '\"parameters\": ' }}{{- "
      "tool_call.arguments | tojson }}{{- '}' }}\n"
      "    {%- elif message.role == 'tool' or message.role == 'ipython' %}\n"
      "        {%- if message.content is mapping or message.content is iterable %}{{- "
      "message.content | tojson }}"
      "{%- else %}{{- message.content }}{%- endif %}\n"
      "    {%- else %}\n        {{- '<|start_header_id|>' + message['role'] + "
      "'<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}\n"
      "    {%- endif %}\n{%- endfor %}",
      // Mistral: alternation check over filtered messages, 9-character tool call ids, JSON cut
      // open.
      "{%- set user_messages = chat | selectattr('role', 'equalto', 'user') | list %}"
      "{%- for message in chat | rejectattr('role', 'equalto', 'tool') | rejectattr('role', "
      "'equalto', 'tool_results') "
      "| selectattr('tool_calls', 'undefined') %}"
      "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ loop.index0 }}:{{ "
      "message.role }} {% endif %}{%- endfor %}"
      "{{ user_messages | length }}"
      "{%- for message in chat %}{%- if message.tool_calls is defined and message.tool_calls is "
      "not none %}"
      "{{- '[TOOL_CALLS] [' }}{%- for tool_call in message.tool_calls %}{%- set out = "
      "tool_call.function | tojson %}"
      "{{- out[:-1] }}{%- if not tool_call.id is defined or tool_call.id | length != 9 %}"
      "{{- raise_exception('Tool call IDs should be alphanumeric strings with length 9!') }}{%- "
      "endif %}"
      "{{- ', \"id\": \"' + tool_call.id + '\"}' }}{%- if not loop.last %}{{- ', ' }}{%- else "
      "%}{{- ']' + eos_token }}{%- endif %}"
      "{%- endfor %}{%- endif %}{%- endfor %}",
      "{%- for tool_call in [{'id': 'short', 'function': {'name': 'f'}}] %}{%- if tool_call.id | "
      "length != 9 %}"
      "{{- raise_exception('Tool call IDs should be alphanumeric strings with length 9!') }}{%- "
      "endif %}{%- endfor %}",
      // Hermes / Qwen 2.5: tools listed in <tools>, tool calls as JSON, tool responses grouped.
      "{%- if tools %}{{- '<|im_start|>system\\n' }}{%- if chat[0]['role'] == 'system' %}{{- "
      "chat[0]['content'] }}{%- endif %}"
      "{{- '\\n\\n<tools>' }}{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor "
      "%}{{- '\\n</tools><|im_end|>\\n' }}{%- endif %}"
      "{%- for message in chat %}{%- if (message.role == 'user') or (message.role == 'system' and "
      "not loop.first) or "
      "(message.role == 'assistant' and not message.tool_calls) %}{{- '<|im_start|>' + "
      "message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
      "{%- elif message.role == 'assistant' %}{{- '<|im_start|>' + message.role }}{%- if "
      "message.content %}{{- '\\n' + message.content }}{%- endif %}"
      "{%- for tool_call in message.tool_calls %}{%- if tool_call.function is defined %}{%- set "
      "tool_call = tool_call.function %}{%- endif %}"
      "{{- '\\n<tool_call>\\n{\"name\": \"' }}{{- tool_call.name }}{{- '\", \"arguments\": ' }}{{- "
      "tool_call.arguments | tojson }}"
      "{{- '}\\n</tool_call>' }}{%- endfor %}{{- '<|im_end|>\\n' }}"
      "{%- elif message.role == 'tool' %}{%- if (loop.index0 == 0) or (chat[loop.index0 - 1].role "
      "!= 'tool') %}{{- '<|im_start|>user' }}{%- endif %}"
      "{{- '\\n<tool_response>\\n' }}{{- message.content }}{{- '\\n</tool_response>' }}"
      "{%- if loop.last or (chat[loop.index0 + 1].role != 'tool') %}{{- '<|im_end|>\\n' }}{%- "
      "endif %}{%- endif %}{%- endfor %}",
      // Command R / Hermes 2 Pro: a recursive macro over JSON schemas (note `.items` is
      // dict.items).
      "{%- macro json_to_python_type(json_spec) %}{%- set basic_type_map = {'string': 'str', "
      "'number': 'float', "
      "'integer': 'int', 'boolean': 'bool', 'null': 'None'} %}{%- if json_spec.type is string and "
      "json_spec.type in basic_type_map %}{{- basic_type_map[json_spec.type] }}"
      "{%- elif json_spec.type == 'array' %}{{- 'list[' + json_to_python_type(json_spec['items']) "
      "+ ']' }}"
      "{%- elif json_spec.type == 'object' %}{%- if json_spec.additionalProperties is defined %}"
      "{{- 'dict[str, ' + json_to_python_type(json_spec.additionalProperties) + ']' }}{%- else "
      "%}{{- 'dict' }}{%- endif %}"
      "{%- elif json_spec.type is iterable %}{{- 'Union[' }}{%- for t in json_spec.type %}"
      "{{- json_to_python_type({'type': t}) }}{%- if not loop.last %}{{- ',' }}{%- endif %}{%- "
      "endfor %}{{- ']' }}"
      "{%- else %}{{- 'Any' }}{%- endif %}{%- endmacro %}"
      "{%- for tool in tools %}{{ tool.function.name }}({%- for name, spec in "
      "tool.function.parameters.properties.items() %}"
      "{{ name }}: {{ json_to_python_type(spec) }}{%- if not loop.last %}, {% endif %}{%- endfor "
      "%}) "
      "{%- endfor %}{{ json_to_python_type({'type': ['string', 'null']}) }} {{ "
      "json_to_python_type({'type': 'array', 'items': {'type': 'number'}}) }}"
      " {{ (tools[0].function.parameters.properties.tags.items is callable) }}",
      // Granite: documents as JSON, a default system prompt, loop over documents.
      "{%- if documents %}{%- for document in documents %}{{- 'Document ' + loop.index0 | string + "
      "'\\n' }}"
      "{{- document | tojson(indent=4) }}{%- if not loop.last %}{{- '\\n\\n' }}{%- endif %}{%- "
      "endfor %}{%- endif %}"
      "{{ '\\n' ~ (documents | map(attribute='title') | join(', ')) }} {{ documents | "
      "selectattr('source', 'defined') | list | length }}",
      // DeepSeek R1: reasoning stripped from history with split.
      "{%- for message in chat %}{%- if message['role'] == 'assistant' and message['content'] is "
      "not none %}"
      "{%- set content = message['content'] %}{%- if '</think>' in content %}{%- set content = "
      "content.split('</think>')[-1] %}{%- endif %}"
      "[{{ content }}]{%- endif %}{%- endfor %}",
      // Phi / Zephyr / ChatML one-liners with eos and generation prompt.
      "{% for message in chat %}{% if message['role'] == 'system' %}{{'<|system|>\n' + "
      "message['content'] + '<|end|>\n'}}"
      "{% elif message['role'] == 'user' %}{{'<|user|>\n' + message['content'] + '<|end|>\n'}}{% "
      "elif message['role'] == 'assistant' %}"
      "{{'<|assistant|>\n' + (message['content'] or '') + '<|end|>\n'}}{% endif %}{% endfor %}{% "
      "if add_generation_prompt %}{{ '<|assistant|>\n' }}"
      "{% else %}{{ eos_token }}{% endif %}",
      "{% for message in chat[:2] %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] "
      "+ '<|im_end|>' + '\n'}}{% endfor %}",
      // Gemma 2: no system role.
      "{% if chat[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% "
      "endif %}",
      // Functionary-style: function signatures from schemas with dictsort.
      "{%- for tool in tools %}// {{ tool.function.description }}\ntype {{ tool.function.name }} = "
      "(_: {\n"
      "{%- for name, spec in tool.function.parameters.properties | dictsort %}{{ name }}"
      "{%- if name not in tool.function.parameters.required | default([]) %}?{%- endif %}: {{ "
      "spec.type }},\n{%- endfor %}}) => any;\n{%- endfor %}",
  });
  if (rendered >= 0) CHECK(rendered == 9);  // all but the two that raise_exception on purpose
}

TEST_CASE("jinja: syntax errors fail on both sides", "[chat][jinja]") {
  check_snippets({
      "{% if %}{% endif %}",
      "{{ 1 + }}",
      "{% for x in %}{% endfor %}",
      "{% endif %}",
      "{% if true %}",
      "{% for x in y %}{% endif %}",
      "{{ x | nosuchfilter }}",
      "{{ x is nosuchtest }}",
      "{{ 'unterminated }}",
      "{% set 1 = 2 %}",
      "{{ (1 }}",
      "{{ [1, 2 }}",
      "{{ 1 ) }}",
      "{% foo %}",
      "{% break %}",
      "{{ }}",
      "{{ x y }}",
      "{# unclosed comment",
      "{% raw %}unclosed raw",
      "{{ f(a=1, 2) }}",
      "{% include 'x.j2' %}",
      "{% extends 'base' %}",
      "{% do [].append(1) %}",
      "{{ 1 is is none }}",
      "{{ 'a' | }}",
      R"({{ '\x4' }})",
      "{% set x = 1 %}{% endset %}",
      "{% macro %}{% endmacro %}",
      "{% else %}",
  });
}
