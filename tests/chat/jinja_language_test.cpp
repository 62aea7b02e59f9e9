// jinja_language_test.cpp: unit tests of the Jinja subset itself: expressions,
// control flow, loops, macros, whitespace control, filters, tests, methods and
// error reporting. Expected strings are what Python jinja2 prints.
#include <gtest/gtest.h>

#include "chat/chat_template.h"

namespace {

using nlohmann::ordered_json;

std::string render(const std::string& src, const ordered_json& ctx = ordered_json::object()) {
  auto t = ms::ChatTemplate::create(src);
  if (!t.is_ok()) return "PARSE ERROR: " + t.status().message();
  auto r = t->render(ctx);
  if (!r.is_ok()) return "ERROR: " + r.status().message();
  return *r;
}

ms::Status render_status(const std::string& src, const ordered_json& ctx = ordered_json::object()) {
  auto t = ms::ChatTemplate::create(src);
  if (!t.is_ok()) return t.status();
  auto r = t->render(ctx);
  return r.status();
}

TEST(JinjaExpr, Arithmetic) {
  EXPECT_EQ(render("{{ 1 + 2 * 3 }}|{{ (1 + 2) * 3 }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ 7 % 3 }}|{{ -7 % 3 }}"),
            "7|9|3|-4|1|2");
  EXPECT_EQ(render("{{ 7 / 2 }}|{{ 4 / 2 }}|{{ 2 ** 10 }}|{{ 1.5 + 1 }}|{{ -3 }}"), "3.5|2.0|1024|2.5|-3");
  EXPECT_EQ(render("{{ 'a' ~ 1 ~ none ~ true }}|{{ 'ab' * 3 }}|{{ [1] + [2] }}"), "a1NoneTrue|ababab|[1, 2]");
}

TEST(JinjaExpr, ComparisonsAndLogic) {
  EXPECT_EQ(render("{{ 1 == 1.0 }} {{ 1 != 2 }} {{ 'a' < 'b' }} {{ 3 >= 3 }} {{ 1 == true }}"),
            "True True True True True");
  EXPECT_EQ(render("{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }}"),
            "True True True True");
  EXPECT_EQ(render("{{ 0 or 'x' }} {{ 1 and 'y' }} {{ not [] }} {{ none or [] }}"), "x y True []");
  EXPECT_EQ(render("{{ 'yes' if 1 > 0 else 'no' }}|{{ 'yes' if false }}|"), "yes||");
}

TEST(JinjaExpr, PythonRepr) {
  EXPECT_EQ(render("{{ ['a', \"b'c\", 1, 2.5, none, true] }}"), "['a', \"b'c\", 1, 2.5, None, True]");
  EXPECT_EQ(render("{{ {'k': 1, 'n': {'x': [1]}} }}"), "{'k': 1, 'n': {'x': [1]}}");
  EXPECT_EQ(render("{{ (1, 2) }} {{ (1,) }} {{ 1.0 }} {{ 1e20 }} {{ 0.1 + 0.2 }}"),
            "(1, 2) (1,) 1.0 1e+20 0.30000000000000004");
  EXPECT_EQ(render("{{ x }}", {{"x", {{"b", 1}, {"a", 2}}}}), "{'b': 1, 'a': 2}");
}

TEST(JinjaExpr, AccessAndSlicing) {
  ordered_json ctx = {{"m", {{"role", "user"}, {"content", "hello"}}}, {"l", {1, 2, 3, 4}}};
  EXPECT_EQ(render("{{ m.role }} {{ m['content'] }} {{ l[0] }} {{ l[-1] }} {{ l.1 }}", ctx), "user hello 1 4 2");
  EXPECT_EQ(render("{{ l[1:3] }} {{ l[::-1] }} {{ l[:-1] }} {{ m.content[1:] }} {{ 'héllo'[::-1] }}", ctx),
            "[2, 3] [4, 3, 2, 1] [1, 2, 3] ello olléh");
  EXPECT_EQ(render("[{{ m.missing }}][{{ m.missing.deeper }}][{{ nothing }}][{{ l[10] }}]", ctx), "[][][][]");
}

TEST(JinjaExpr, Undefined) {
  EXPECT_EQ(render("{{ x is defined }} {{ x is undefined }} {{ x | length }} {{ x | default('d') }}"),
            "False True 0 d");
  EXPECT_EQ(render("{% for a in x %}a{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{{ '' | default('d') }} {{ '' | default('d', true) }} {{ none | d('z') }}"), " d None");
}

TEST(JinjaControl, IfElifElse) {
  const std::string t = "{% if x > 2 %}big{% elif x > 1 %}mid{% else %}small{% endif %}";
  EXPECT_EQ(render(t, {{"x", 3}}), "big");
  EXPECT_EQ(render(t, {{"x", 2}}), "mid");
  EXPECT_EQ(render(t, {{"x", 0}}), "small");
}

TEST(JinjaControl, ForLoopVariables) {
  EXPECT_EQ(render("{% for x in ['a','b','c'] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}"
                   "{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.previtem }}{{ loop.nextitem }};{% endfor %}"),
            "103TrueFalse3b;212FalseFalse3ac;321FalseTrue3b;");
  EXPECT_EQ(render("{% for x in range(10) if x is odd %}{{ x }}{{ ',' if not loop.last }}{% endfor %}"), "1,3,5,7,9");
  EXPECT_EQ(render("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }} {% endfor %}"), "a=1 b=2 ");
  EXPECT_EQ(render("{% for k in {'a': 1, 'b': 2} %}{{ k }}{% endfor %}"), "ab");
  EXPECT_EQ(render("{% for x in [1,2,3,4] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}"
                   "{% endif %}{{ x }}{% endfor %}"),
            "13");
  EXPECT_EQ(render("{% for x in 'ab' %}{{ loop.cycle('x', 'y') }}{{ x }}{% endfor %}"), "xayb");
  EXPECT_EQ(render("{% for x in [] %}no{% else %}else{% endfor %}"), "else");
}

TEST(JinjaControl, ScopingAndNamespace) {
  EXPECT_EQ(render("{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }}"), "1");
  EXPECT_EQ(render("{% set ns = namespace(x=1) %}{% for i in [1, 2] %}{% set ns.x = ns.x + i %}{% endfor %}{{ ns.x }}"),
            "4");
  EXPECT_EQ(render("{% if true %}{% set y = 5 %}{% endif %}{{ y }}"), "5");
  EXPECT_EQ(render("{% set a, b = [1, 2] %}{{ b }}{{ a }}"), "21");
  EXPECT_EQ(render("{% set blk %}  hi {{ 1 }} {% endset %}[{{ blk }}]"), "[  hi 1 ]");
  EXPECT_EQ(render("{% set blk | upper %}hi{% endset %}{{ blk }}"), "HI");
}

TEST(JinjaControl, Macros) {
  EXPECT_EQ(render("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}"
                   "{{ greet('Ann') }} {{ greet('Bob', '?') }} {{ greet(punct='.', name='Cy') }}"),
            "Hi Ann! Hi Bob? Hi Cy.");
  EXPECT_EQ(render("{% macro wrap() %}<{{ caller() }}>{% endmacro %}{% call wrap() %}body{% endcall %}"), "<body>");
  EXPECT_EQ(render("{% set g = 'G' %}{% macro m() %}{{ g }}{% endmacro %}{{ m() }}"), "G");
}

TEST(JinjaControl, RawFilterGenerationComments) {
  EXPECT_EQ(render("{% raw %}{{ not parsed }}{% endraw %}"), "{{ not parsed }}");
  EXPECT_EQ(render("{% filter upper %}abc {{ 'd' }}{% endfilter %}"), "ABC D");
  EXPECT_EQ(render("a{% generation %}b{{ 1 }}{% endgeneration %}c"), "ab1c");
  EXPECT_EQ(render("a{# comment {{ x }} #}b"), "ab");
}

TEST(JinjaWhitespace, ControlMarkers) {
  EXPECT_EQ(render("a  {{- 'b' -}}  c"), "abc");
  EXPECT_EQ(render("a\n  {%- if true -%}\n  b\n  {%- endif -%}\n c"), "abc");
  EXPECT_EQ(render("x {#- c -#} y"), "xy");
}

TEST(JinjaWhitespace, TrimAndLstripBlocks) {
  // trim_blocks drops the newline after a tag; lstrip_blocks the indent before it.
  EXPECT_EQ(render("{% for x in [1, 2] %}\n    {% if x %}\n{{ x }}\n    {% endif %}\n{% endfor %}\n"), "1\n2\n");
  EXPECT_EQ(render("  {{ 'expr tags keep indent' }}\n"), "  expr tags keep indent");
  EXPECT_EQ(render("a\n{# c #}\nb"), "a\nb");
}

TEST(JinjaFilters, Strings) {
  EXPECT_EQ(render("{{ '  x  ' | trim }}|{{ 'xxhixx' | trim('x') }}|{{ 'aBc' | upper }}|{{ 'aBc' | lower }}"),
            "x|hi|ABC|abc");
  EXPECT_EQ(render("{{ 'hello world' | capitalize }}|{{ 'hello wORLD' | title }}|{{ 'a-b' | replace('-', '+') }}"),
            "Hello world|Hello World|a+b");
  EXPECT_EQ(render("{{ 'one two  three' | wordcount }}|{{ 'ab' | center(6) }}|{{ 3 | string }}{{ [1] | string }}"),
            "3|  ab  |3[1]");
  EXPECT_EQ(render("{{ 'a\nb\n\nc' | indent(2) }}"), "a\n  b\n\n  c");
  EXPECT_EQ(render("{{ 'a\nb' | indent(2, true) }}"), "  a\n  b");
  EXPECT_EQ(render("{{ '<a & \"b\">' | e }}|{{ '<x>' | safe }}|{{ '%s-%d' | format('a', 3) }}"),
            "&lt;a &amp; &#34;b&#34;&gt;|<x>|a-3");
}

TEST(JinjaFilters, Numbers) {
  EXPECT_EQ(render("{{ '42' | int }} {{ 'x' | int }} {{ 3.9 | int }} {{ '2.5' | float }} {{ -3 | abs }}"),
            "42 0 3 2.5 3");
  EXPECT_EQ(render("{{ 2.567 | round(2) }} {{ 2.5 | round }} {{ 2.1 | round(0, 'ceil') }}"), "2.57 3.0 3.0");
}

TEST(JinjaFilters, Sequences) {
  ordered_json ctx = {{"users", {{{"name", "b"}, {"age", 30}, {"admin", true}},
                                 {{"name", "a"}, {"age", 20}, {"admin", false}},
                                 {{"name", "c"}, {"age", 25}}}}};
  EXPECT_EQ(render("{{ users | map(attribute='name') | join(',') }}", ctx), "b,a,c");
  EXPECT_EQ(render("{{ users | selectattr('admin') | map(attribute='name') | list }}", ctx), "['b']");
  EXPECT_EQ(render("{{ users | rejectattr('admin') | map(attribute='name') | list }}", ctx), "['a', 'c']");
  EXPECT_EQ(render("{{ users | selectattr('age', 'gt', 22) | map(attribute='name') | join }}", ctx), "bc");
  EXPECT_EQ(render("{{ users | sort(attribute='age') | map(attribute='name') | join }}", ctx), "acb");
  EXPECT_EQ(render("{{ users | sort(attribute='name', reverse=true) | map(attribute='name') | join }}", ctx), "cba");
  EXPECT_EQ(render("{{ [3, 1, 2] | sort }} {{ [1, 2, 3] | reverse | list }} {{ [1, 1, 2] | unique | list }}"),
            "[1, 2, 3] [3, 2, 1] [1, 2]");
  EXPECT_EQ(render("{{ [1, 2, 3] | first }} {{ [1, 2, 3] | last }} {{ [1, 2, 3] | length }} {{ 'abc' | count }}"),
            "1 3 3 3");
  EXPECT_EQ(render("{{ [1, 2, 3, 4] | select('even') | list }} {{ [1, 2, 3] | reject('odd') | list }}"),
            "[2, 4] [2]");
  EXPECT_EQ(render("{{ ['a', 'b'] | map('upper') | join }} {{ [1, 2, 3, 4, 5] | batch(2) | list }}"),
            "AB [[1, 2], [3, 4], [5]]");
  EXPECT_EQ(render("{{ {'b': 1, 'a': 2} | dictsort }} {{ {'a': 1} | items | list }}"),
            "[('a', 2), ('b', 1)] [('a', 1)]");
  EXPECT_EQ(render("{{ [3, 1, 2] | min }} {{ [3, 1, 2] | max }} {{ [3, 1, 2] | sum }}"), "1 3 6");
}

TEST(JinjaFilters, ToJson) {
  ordered_json ctx = {{"v", {{"name", "Zürich \"q\"\n"}, {"n", 1}, {"f", 2.5}, {"l", {true, nullptr}}}}};
  EXPECT_EQ(render("{{ v | tojson }}", ctx),
            "{\"name\": \"Zürich \\\"q\\\"\\n\", \"n\": 1, \"f\": 2.5, \"l\": [true, null]}");
  EXPECT_EQ(render("{{ {'a': [1, 2], 'b': {}} | tojson(indent=2) }}"),
            "{\n  \"a\": [\n    1,\n    2\n  ],\n  \"b\": {}\n}");
  EXPECT_EQ(render("{{ {'b': 1, 'a': 'é'} | tojson(sort_keys=true, ensure_ascii=true) }}"),
            "{\"a\": \"\\u00e9\", \"b\": 1}");
  EXPECT_EQ(render("{{ {'a': 1} | tojson(separators=(',', ':')) }}"), "{\"a\":1}");
}

TEST(JinjaExpr, MarkupAndTypedKeys) {
  // jinja2's Markup: safe + plain escapes the plain operand; ~ does not.
  EXPECT_EQ(render("{{ 'a'|safe + '<\"b\">' }}|{{ 'a'|safe ~ '<b>' }}|{{ '<x>' | e | e }}"),
            "a&lt;&#34;b&#34;&gt;|a<b>|&lt;x&gt;");
  EXPECT_EQ(render("{% set d = {1: 'one', 2: 'two'} %}{% for k, v in d | dictsort %}{{ k + 1 }}{{ v }}{% endfor %} {{ d }}"),
            "2one3two {1: 'one', 2: 'two'}");
  EXPECT_EQ(render("{{ none | selectattr('x') | list }} {{ none | map(attribute='x') | list }}"), "[] []");
}

TEST(JinjaWhitespace, CommentSplitsTextForMinus) {
  // `{%-` strips only the text after the preceding comment, as jinja2 does.
  EXPECT_EQ(render("a\n\n{# c #}\n  {%- if true %}b{% endif %}"), "a\n\nb");
}

TEST(JinjaTests, IsTests) {
  EXPECT_EQ(render("{{ none is none }}{{ 'a' is string }}{{ {} is mapping }}{{ [] is iterable }}{{ 'a' is sequence }}"),
            "TrueTrueTrueTrueTrue");
  EXPECT_EQ(render("{{ 1 is number }}{{ 1 is integer }}{{ 1.0 is integer }}{{ true is boolean }}{{ true is true }}"
                   "{{ 0 is false }}"),
            "TrueTrueFalseTrueTrueFalse");
  EXPECT_EQ(render("{{ 4 is even }}{{ 3 is odd }}{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(2) }}{{ 3 is eq 3 }}"
                   "{{ 3 is ne 3 }}{{ 2 is lt 3 }}{{ 4 is gt(3) }}{{ x is not defined }}"),
            "TrueTrueTrueFalseTrueFalseTrueTrueTrue");
  EXPECT_EQ(render("{{ not x is defined }} {{ 'a' is in 'abc' }} {{ range is callable }}"), "True True True");
}

TEST(JinjaMethods, StringMethods) {
  EXPECT_EQ(render("{{ '  a b  '.strip() }}|{{ 'xxaxx'.lstrip('x') }}|{{ 'xxaxx'.rstrip('x') }}"), "a b|axx|xxa");
  EXPECT_EQ(render("{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a,b,c'.split(',', 1) }}"),
            "['a', 'b', '', 'c'] ['a', 'b'] ['a', 'b,c']");
  EXPECT_EQ(render("{{ 'hello'.startswith('he') }} {{ 'hello'.endswith(('x', 'lo')) }} {{ 'ab'.upper() }}"),
            "True True AB");
  EXPECT_EQ(render("{{ 'a-b-c'.replace('-', '', 1) }} {{ '{} and {name}'.format(1, name='x') }} {{ ','.join(['a', 'b']) }}"),
            "ab-c 1 and x a,b");
  EXPECT_EQ(render("{{ 'hello'.find('l') }} {{ 'hello'.find('z') }} {{ 'hello'.count('l') }} {{ 'a\nb\r\nc'.splitlines() }}"),
            "2 -1 2 ['a', 'b', 'c']");
  EXPECT_EQ(render("{{ 'hello world'.title() }} {{ 'hELLO'.capitalize() }} {{ 'AB'.lower() }}"),
            "Hello World Hello ab");
}

TEST(JinjaMethods, DictAndListMethods) {
  EXPECT_EQ(render("{% set d = {'a': 1, 'b': 2} %}{{ d.keys() | list }} {{ d.values() | list }} {{ d.get('a') }} "
                   "{{ d.get('z', 0) }} {{ d.get('z') }}"),
            "['a', 'b'] [1, 2] 1 0 None");
  EXPECT_EQ(render("{% set l = [1] %}{% set _ = l.append(2) %}{{ l }} {{ l.pop() }} {{ l }} {{ [5, 6].index(6) }}"),
            "[1, 2] 2 [1] 1");
  EXPECT_EQ(render("{% set d = dict(a=1) %}{% do d.update({'b': 2}) %}{{ d }}"), "{'a': 1, 'b': 2}");
}

TEST(JinjaGlobals, RangeAndTime) {
  EXPECT_EQ(render("{{ range(3) | list }} {{ range(1, 7, 2) | list }} {{ range(3, 0, -1) | list }}"),
            "[0, 1, 2] [1, 3, 5] [3, 2, 1]");
  ms::ChatTemplateOptions opts;
  std::tm tm{};
  tm.tm_year = 124;
  tm.tm_mon = 6;
  tm.tm_mday = 26;
  opts.now = tm;
  auto t = ms::ChatTemplate::create("{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%Y-%m-%d') }}", opts);
  ASSERT_TRUE(t.is_ok());
  EXPECT_EQ(*t->render(ordered_json::object()), "26 Jul 2024|2024-07-26");
}

TEST(JinjaHf, ChatTemplateConventions) {
  const std::string tpl =
      "{{ bos_token }}{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{{ eos_token }}\n{% endfor %}"
      "{% if add_generation_prompt %}<|assistant|>{% endif %}";
  ordered_json ctx = {{"bos_token", "<s>"},
                      {"eos_token", "</s>"},
                      {"messages", {{{"role", "user"}, {"content", "hi"}}}},
                      {"add_generation_prompt", true}};
  EXPECT_EQ(render(tpl, ctx), "<s><|user|>hi</s>\n<|assistant|>");
  // nlohmann::json (sorted keys) works too.
  auto t = ms::ChatTemplate::create("{{ messages[0].content }}");
  ASSERT_TRUE(t.is_ok());
  EXPECT_EQ(*t->render(nlohmann::json{{"messages", {{{"role", "user"}, {"content", "x"}}}}}), "x");
}

TEST(JinjaErrors, RaiseException) {
  ms::Status s = render_status("{{ raise_exception('Conversation roles must alternate') }}");
  EXPECT_EQ(s.code(), ms::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "Conversation roles must alternate");
}

TEST(JinjaErrors, SyntaxErrorsNameConstructAndLine) {
  ms::Status s = render_status("line1\n{% include 'x.jinja' %}");
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("include"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("line 2"), std::string::npos) << s.message();
  s = render_status("{% if x %}never closed");
  EXPECT_NE(s.message().find("endif"), std::string::npos) << s.message();
  s = render_status("{{ 1 + }}");
  EXPECT_FALSE(s.is_ok());
  s = render_status("{% frobnicate %}");
  EXPECT_NE(s.message().find("frobnicate"), std::string::npos) << s.message();
  s = render_status("{{ 'unterminated }}");
  EXPECT_FALSE(s.is_ok());
}

TEST(JinjaErrors, RuntimeErrorsNameConstructAndLine) {
  ms::Status s = render_status("\n\n{{ x | nosuchfilter }}");
  EXPECT_NE(s.message().find("nosuchfilter"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("line 3"), std::string::npos) << s.message();
  s = render_status("{{ x is nosuchtest }}");
  EXPECT_NE(s.message().find("nosuchtest"), std::string::npos) << s.message();
  s = render_status("{{ 1 + 'a' }}");
  EXPECT_NE(s.message().find("unsupported operand"), std::string::npos) << s.message();
  s = render_status("{{ nofn() }}");
  EXPECT_NE(s.message().find("nofn"), std::string::npos) << s.message();
  s = render_status("{{ 1 // 0 }}");
  EXPECT_FALSE(s.is_ok());
  s = render_status("{% for x in none %}{% endfor %}");
  EXPECT_FALSE(s.is_ok());
}

}  // namespace
