// Tests for the Jinja2-subset renderer (src/chat/jinja*.cpp) and the chat
// template files (src/chat/template_file.cpp). Every expected output follows
// from Jinja's documented behaviour in transformers' environment
// (trim_blocks, lstrip_blocks, loop controls, its tojson); each of the table's
// cases also holds in jinja2 3.1. tests/python/test_chat_template.py checks
// whole chat templates against transformers itself.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/jinja.hpp"
#include "chat/template_file.hpp"
#include "qhexrt/error.hpp"
#include "test_support.hpp"

namespace {

using qhx::chat::Template;
using Ordered = nlohmann::ordered_json;

std::string render(const std::string& tmpl, const std::string& context = "{}") {
  return Template::parse(tmpl, "t").render(Ordered::parse(context));
}

// The message of the qhx::Error that parsing (and then rendering) throws; "" if none.
std::string error_of(const std::string& tmpl, const std::string& context = "{}") {
  try {
    render(tmpl, context);
  } catch (const qhx::Error& e) {
    return e.what();
  }
  return "";
}

std::string parse_error_of(const std::string& tmpl) {
  try {
    Template::parse(tmpl, "t");
  } catch (const qhx::Error& e) {
    return e.what();
  }
  return "";
}

struct RenderCase {
  const char* group;
  const char* tmpl;
  const char* context;
  const char* expected;
};

struct ErrorCase {
  const char* tmpl;
  const char* context;
  const char* message_part;
};

// Cases written from Jinja's semantics (each also holds in jinja2 with transformers'
// environment): {group, template, context, expected output}.
// A case is its template and context on one line, its expected output on the next.
// clang-format off
const RenderCase kRenderCases[] = {
    {"text", "Hello, {world}!",
     "{}", "Hello, {world}!"},
    {"text", "a\n",
     "{}", "a"},
    {"text", "a\n\n",
     "{}", "a\n"},
    {"text", "a\r\nb\rc",
     "{}", "a\nb\nc"},
    {"text", "{% if true %}\nyes\n{% endif %}\nafter",
     "{}", "yes\nafter"},
    {"text", "  {% if true %}x{% endif %}",
     "{}", "x"},
    {"text", "a\n    {% if true %}\n    b\n    {% endif %}\nc",
     "{}", "a\n    b\nc"},
    {"text", "  {{ 'x' }}",
     "{}", "  x"},
    {"text", "a  {% if true %}b{% endif %}",
     "{}", "a  b"},
    {"text", "  {%+ if true %}x{% endif %}",
     "{}", "  x"},
    {"text", "{% if true +%}\nx{% endif %}",
     "{}", "\nx"},
    {"text", "a  \n  {{- 'b' -}}  \n c",
     "{}", "abc"},
    {"text", "{%- if true -%}  x  {%- endif -%}",
     "{}", "x"},
    {"text", "{{ 'a' }}\n{{ 'b' }}",
     "{}", "a\nb"},
    {"text", "a{# note #}b",
     "{}", "ab"},
    {"text", "{# c #}\nx",
     "{}", "x"},
    {"text", "  {# c #}\nx",
     "{}", "x"},
    {"text", "a {#- c -#} b",
     "{}", "ab"},
    {"text", "{% for x in [1, 2] %}\n  {{ x }}\n{% endfor %}\n",
     "{}", "  1\n  2\n"},
    {"literal", "{{ 'a\\'b' }} {{ \"x\\ty\" }} {{ '\\u00e9\\x41' }} {{ 'a' 'b' }}",
     "{}", "a'b x\ty éA ab"},
    {"literal", "{{ 42 }} {{ -3 }} {{ 1_000 }} {{ 0x1F }} {{ 0b101 }}",
     "{}", "42 -3 1000 31 5"},
    {"literal", "{{ 1.5 }} {{ 1e3 }} {{ 2.0 }} {{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1e15 }} {{ 0.0001 }} {{ 0.00001 }} {{ 1/3 }}",
     "{}", "1.5 1000.0 2.0 0.30000000000000004 1e+16 1000000000000000.0 0.0001 1e-05 0.3333333333333333"},
    {"literal", "{{ true }} {{ False }} {{ none }} {{ None }}",
     "{}", "True False None None"},
    {"literal", "{{ [1, 'a', none, true, 1.5] }} {{ {'k': 'v', 'n': 1} }} {{ [\"it's\"] }} {{ (1, 2)|length }}",
     "{}", "[1, 'a', None, True, 1.5] {'k': 'v', 'n': 1} [\"it's\"] 2"},
    {"lookup", "{{ m.role }} {{ m['content'] }} [{{ m.missing }}] {{ m['items'] }}",
     "{\"m\": {\"role\": \"user\", \"content\": \"hi\", \"items\": 7}}", "user hi [] 7"},
    {"lookup", "{{ m.get('role') }} {{ m.get('x', 'd') }} {{ m.get('x') }}",
     "{\"m\": {\"role\": \"user\"}}", "user d None"},
    {"lookup", "{{ xs[0] }} {{ xs[-1] }} {{ xs.1 }} [{{ xs[5] }}]",
     "{\"xs\": [10, 20, 30]}", "10 30 20 []"},
    {"lookup", "{{ xs[1:] }} {{ xs[:-1] }} {{ xs[::-1] }} {{ xs[::2] }} {{ xs[5:] }}",
     "{\"xs\": [10, 20, 30]}", "[20, 30] [10, 20] [30, 20, 10] [10, 30] []"},
    {"lookup", "{{ 'héllo'[1:3] }} {{ 'abc'[::-1] }} {{ 'héllo'[1] }} {{ 'héllo'|length }}",
     "{}", "él cba é 5"},
    {"ops", "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 2 ** 3 ** 2 }}",
     "{}", "7 9 3.5 3 -4 1 2 1024 64"},
    {"ops", "{{ 'ab' * 2 }} {{ [1] + [2] }} {{ 'a' + 'b' }} {{ 1 + 1.5 }} {{ true + 1 }} {{ 4 / 2 }}",
     "{}", "abab [1, 2] ab 2.5 2 2.0"},
    {"ops", "{{ 'n=' ~ 1 ~ none ~ nothing ~ [1] }}",
     "{}", "n=1None[1]"},
    {"ops", "{{ 1 < 2 }} {{ 1 == 1.0 }} {{ 'a' != 'b' }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'b' >= 'a' }} {{ [1, 2] == [1, 2] }} {{ true == 1 }}",
     "{}", "True True True True False True True True"},
    {"ops", "{{ 'a' in 'cat' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }} {{ 'x' in nothing }}",
     "{}", "True True True True False"},
    {"ops", "{{ 0 or 'x' }} {{ 1 and 'y' }} [{{ '' and 'z' }}] {{ not 0 }} {{ not [1] }} {{ not '' }}",
     "{}", "x y [] True False True"},
    {"ops", "{{ 'a' if true else 'b' }} {{ 'a' if false else 'b' }} [{{ 'a' if false }}] {{ ('a' if false) is defined }}",
     "{}", "a b [] False"},
    {"ops", "{{ 1 + 2 is odd }} {{ -1|abs }} {{ not 1 == 2 }} {{ -'abc'|length if false else 'neg' }}",
     "{}", "1 1 True neg"},
    {"if", "{% if n == 1 %}one{% elif n == 2 %}two{% else %}many{% endif %}",
     "{\"n\": 2}", "two"},
    {"if", "{% if n == 1 %}one{% elif n == 2 %}two{% else %}many{% endif %}",
     "{\"n\": 7}", "many"},
    {"if", "{% if n %}set{% endif %}|{% if [] %}list{% endif %}|{% if {} %}dict{% endif %}|{% if 0.0 %}zero{% endif %}|{% if ' ' %}space{% endif %}",
     "{}", "||||space"},
    {"for", "{% for x in ['a', 'b', 'c'] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }} {% endfor %}",
     "{}", "1032TrueFalse3 2121FalseFalse3 3210FalseTrue3 "},
    {"for", "{% for x in [1, 2, 3] %}{{ loop.previtem }}-{{ loop.nextitem }};{% endfor %}",
     "{}", "-2;1-3;2-;"},
    {"for", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}",
     "{\"d\": {\"b\": 1, \"a\": 2}}", "b=1;a=2;ba"},
    {"for", "{% for x in range(10) if x is even %}{{ x }}{{ '/' ~ loop.length if loop.last }}{% endfor %}",
     "{}", "02468/5"},
    {"for", "{% for x in [] %}x{% else %}empty{% endfor %} {% for x in [1] if x > 5 %}x{% else %}none{% endfor %}",
     "{}", "empty none"},
    {"for", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}",
     "{}", "0134"},
    {"for", "{% for a in [1, 2] %}{% for b in 'xy' %}{{ a }}{{ b }}{{ loop.index }} {% endfor %}{{ loop.index }}|{% endfor %}",
     "{}", "1x1 1y2 1|2x1 2y2 2|"},
    {"for", "{% set x = 0 %}{% for i in [1, 2, 3] %}{{ x }}{% set x = i %}{{ x }}{% endfor %}{{ x }}",
     "{}", "0102030"},
    {"for", "{% for c in 'hé' %}[{{ c }}]{% endfor %}{% for x in nothing %}x{% else %}e{% endfor %}[{{ loop }}]",
     "{}", "[h][é]e[]"},
    {"for", "{% for m in messages[::-1] %}{{ m }}{% endfor %}",
     "{\"messages\": [\"a\", \"b\", \"c\"]}", "cba"},
    {"set", "{% set a = 'x' %}{% set b, c = [1, 2] %}{{ a }}{{ b }}{{ c }}",
     "{}", "x12"},
    {"set", "{% set s %}in {{ 1 + 1 }}{% endset %}[{{ s }}]",
     "{}", "[in 2]"},
    {"set", "{% if true %}{% set inner = 'i' %}{% endif %}{{ inner }}",
     "{}", "i"},
    {"set", "{% set ns = namespace(count=0, found=false) %}{% for x in [1, 2, 3] %}{% set ns.count = ns.count + x %}{% if x == 2 %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.count }} {{ ns.found }} {{ ns.missing is defined }}",
     "{}", "6 True False"},
    {"macro", "{% macro greet(name, greeting='Hello') %}{{ greeting }}, {{ name }}!{% endmacro %}{{ greet('Ann') }} {{ greet('Bo', 'Hi') }} {{ greet(greeting='Yo', name='Cy') }} [{{ greet() }}]",
     "{}", "Hello, Ann! Hi, Bo! Yo, Cy! [Hello, !]"},
    {"macro", "{% set top = 'T' %}{% macro m() %}{{ top }}{{ who }}{% endmacro %}{{ m() }}",
     "{\"who\": \"W\"}", "TW"},
    {"macro", "{% macro m() %}[{{ x }}]{% endmacro %}{% for x in [1] %}{{ m() }}{% endfor %}",
     "{}", "[]"},
    {"macro", "{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }}",
     "{}", "321"},
    {"macro", "{% generation %}gen {{ 1 }}{% endgeneration %}",
     "{}", "gen 1"},
    {"filter", "{{ 'hello'|length }} {{ [1, 2]|count }} {{ {'a': 1}|length }} {{ nothing|length }}",
     "{}", "5 2 1 0"},
    {"filter", "{{ [1, 2, 3]|first }} {{ [1, 2, 3]|last }} {{ 'abc'|first }} [{{ []|first }}]",
     "{}", "1 3 a []"},
    {"filter", "{{ ['a', 'b']|join(', ') }} {{ [1, 2]|join }} {{ [{'n': 'x'}, {'n': 'y'}]|join('-', attribute='n') }}",
     "{}", "a, b 12 x-y"},
    {"filter", "{{ 'Hi There'|upper }} {{ 'Hi There'|lower }} {{ 'hello wORLD-foo'|title }} {{ 'hELLO world'|capitalize }} [{{ '  x  '|trim }}] [{{ 'xxhixx'|trim('x') }}]",
     "{}", "HI THERE hi there Hello World-Foo Hello world [x] [hi]"},
    {"filter", "{{ 'aaa'|replace('a', 'b') }} {{ 'aaa'|replace('a', 'b', 2) }}",
     "{}", "bbb bba"},
    {"filter", "{{ nothing|default('d') }} [{{ ''|default('d') }}] {{ ''|default('d', true) }} {{ none|d('n') }} {{ 0|d('z', boolean=true) }}",
     "{}", "d [] d None z"},
    {"filter", "{{ 12|string ~ 'x' }} {{ '42'|int + 1 }} {{ '3.9'|int }} {{ 'abc'|int }} {{ 'abc'|int(7) }} {{ 3.7|int }} {{ '0x1A'|int(0, 16) }} {{ '2.5'|float * 2 }} {{ 'x'|float }} {{ 2|float }}",
     "{}", "12x 43 3 0 7 3 26 5.0 0.0 2.0"},
    {"filter", "{{ 'ab'|list }} {{ [1, 2, 3]|reverse|list }} {{ 'abc'|reverse }} {% for k, v in {'a': 1, 'b': 2}|items %}{{ k }}{{ v }}{% endfor %}",
     "{}", "['a', 'b'] [3, 2, 1] cba a1b2"},
    {"filter", "{{ v|tojson }}",
     "{\"v\": {\"name\": \"é\\\"x\", \"args\": {\"b\": 1, \"a\": [1.5, true, null]}}}", "{\"name\": \"é\\\"x\", \"args\": {\"b\": 1, \"a\": [1.5, true, null]}}"},
    {"filter", "{{ v|tojson(indent=2) }}",
     "{\"v\": {\"b\": 1, \"a\": [1.5, true, null], \"e\": []}}", "{\n  \"b\": 1,\n  \"a\": [\n    1.5,\n    true,\n    null\n  ],\n  \"e\": []\n}"},
    {"filter", "{{ v|tojson(sort_keys=true) }} {{ [1, 2]|tojson(separators=(',', ':')) }}",
     "{\"v\": {\"b\": 1, \"a\": 2}}", "{\"a\": 2, \"b\": 1} [1,2]"},
    {"filter", "{{ 'é\\n<&>'|tojson }} {{ 'é😀'|tojson(ensure_ascii=true) }} {{ '\\x01'|tojson }}",
     "{}", "\"é\\n<&>\" \"\\u00e9\\ud83d\\ude00\" \"\\u0001\""},
    {"filter", "{{ '<b>'|safe }} {{ '<b>' }}",
     "{}", "<b> <b>"},
    {"filter", "{{ 'a\\nb\\n\\nc'|indent(2) }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent('> ', blank=true) }}",
     "{}", "a\n  b\n\n  c|  a\n  b|a\n> \n> b"},
    {"filter", "{{ ['a', 'A', 'b', 'a']|unique|list }} {{ ['a', 'A']|unique(case_sensitive=true)|list }} {{ [{'r': 'u'}, {'r': 'a'}, {'r': 'u'}]|unique(attribute='r')|map(attribute='r')|list }}",
     "{}", "['a', 'b'] ['a', 'A'] ['u', 'a']"},
    {"filter", "{{ [{'n': 'x'}, {'n': 'y'}]|map(attribute='n')|join(',') }} {{ ['a', 'b']|map('upper')|list }} {{ [[1, 2], [3]]|map('length')|list }}",
     "{}", "x,y ['A', 'B'] [2, 1]"},
    {"filter", "{{ [1, 2, 3, 4]|select('even')|list }} {{ [1, 2, 3, 4]|reject('even')|list }} {{ [0, 1, '', none, 'a']|select|list }} {{ [1, 5, 10]|select('gt', 3)|list }}",
     "{}", "[2, 4] [1, 3] [1, 'a'] [5, 10]"},
    {"filter", "{{ ms|selectattr('role', 'equalto', 'user')|map(attribute='content')|list }} {{ ms|rejectattr('content')|map(attribute='role')|list }} {{ ms|selectattr('content', 'defined')|list|length }}",
     "{\"ms\": [{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"user\", \"content\": \"u\"}, {\"role\": \"assistant\"}]}", "['u'] ['assistant'] 2"},
    {"filter", "{{ -3|abs }} {{ (-2.5)|abs }} {{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }} {{ 2.1|round(0, 'ceil') }} {{ 2.9|round(method='floor') }} {{ 3|round }}",
     "{}", "3 2.5 2.0 4.0 2.67 3.0 2.0 3"},
    {"test", "{{ x is defined }} {{ y is defined }} {{ y is undefined }} {{ none is none }} {{ 'a' is string }} {{ 1 is number }} {{ true is number }} {{ 1 is integer }} {{ true is integer }} {{ 1.0 is float }} {{ {} is mapping }} {{ [] is sequence }} {{ 'a' is sequence }} {{ 1 is iterable }} {{ true is boolean }} {{ 1 is boolean }}",
     "{\"x\": 1}", "True False True True True True True True False True True True True False True False"},
    {"test", "{{ true is true }} {{ 1 is true }} {{ false is false }} {{ range is callable }} {{ 'a' is callable }} {{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }}",
     "{}", "True False True True False True True True False"},
    {"test", "{{ 1 is eq 1 }} {{ 1 is equalto(2) }} {{ 1 is ne 2 }} {{ 1 is lt 2 }} {{ 2 is gt 1 }} {{ 2 is ge 2 }} {{ 2 is le 1 }} {{ 2 is in [1, 2] }} {{ 'x' is not in 'abc' }} {{ x is not none }} {{ none is sameas none }}",
     "{\"x\": 1}", "True False True True True True False True True True True"},
    {"method", "{{ 'hello'.startswith('he') }} {{ 'hello'.endswith('lo') }} {{ 'hello'.startswith(('x', 'h')) }} {{ 'hello'.endswith('x') }}",
     "{}", "True True True False"},
    {"method", "{{ 'a b  c'.split() }} {{ 'a,b,c'.split(',') }} {{ 'a,b,c'.split(',', 1) }} {{ 'a,b,c'.rsplit(',', 1) }} {{ '  a b  '.split(None, 1) }} {{ 'a,b'.split(',', maxsplit=0) }}",
     "{}", "['a', 'b', 'c'] ['a', 'b', 'c'] ['a', 'b,c'] ['a,b', 'c'] ['a', 'b  '] ['a,b']"},
    {"method", "[{{ '  x \\n'.strip() }}] [{{ '\\n\\nx\\n'.lstrip('\\n') }}] [{{ 'x\\n\\n'.rstrip() }}] [{{ 'xyhiyx'.strip('xy') }}]",
     "{}", "[x] [x\n] [x] [hi]"},
    {"method", "{{ 'Hi'.upper() }} {{ 'Hi'.lower() }} {{ \"they're bill's\".title() }} {{ 'hELLO'.capitalize() }} {{ 'aXa'.replace('a', 'b') }} {{ 'hello'.find('l') }} {{ 'hello'.find('z') }} {{ 'héllo'.find('l') }} {{ 'banana'.count('a') }} {{ '-'.join(['a', 'b']) }}",
     "{}", "HI hi They'Re Bill'S Hello bXb 2 -1 2 3 a-b"},
    {"method", "{{ c.split('</think>')[-1].lstrip('\\n') }}|{{ c.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}",
     "{\"c\": \"<think>\\nreason\\n</think>\\n\\nanswer\"}", "answer|reason"},
    {"method", "{{ d.keys()|list }} {{ d.values()|list }} {% for k, v in d.items() %}{{ k }}{{ v }}{% endfor %}",
     "{\"d\": {\"b\": 1, \"a\": 2}}", "['b', 'a'] [1, 2] b1a2"},
    {"undefined", "[{{ nothing }}] {{ nothing is defined }} {{ not nothing }} {{ nothing|default('d') }} {{ nothing == nothing }} {{ nothing|upper }}|{{ nothing|join }}|{{ nothing|list }}",
     "{}", "[] False True d True ||[]"},
    {"undefined", "[{{ m.role }}] [{{ m['x'] }}] {{ m.role is defined }} [{{ none.x }}]",
     "{\"m\": {}}", "[] [] False []"},
    {"global", "{{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ range(3, 0, -1)|list }} {{ strftime_now('%Y')|length }}",
     "{}", "[0, 1, 2] [1, 3, 5] [3, 2, 1] 4"},
};
// clang-format on

// Render-time errors Jinja raises too: {template, context, part of the message}.
const ErrorCase kRenderErrors[] = {
    {"{{ m.a.b }}", "{\"m\": {}}", "t:1:7: 'dict object' has no attribute 'a'"},
    {"{{ nothing + 1 }}", "{}", "'nothing' is undefined"},
    {"{{ nothing() }}", "{}", "t:1:4: 'nothing' is undefined"},
    {"{{ nothing.attr }}", "{}", "'nothing' is undefined"},
    {"{{ 'a' + 1 }}", "{}", "unsupported operand"},
    {"{{ 1 / 0 }}", "{}", "division by zero"},
    {"{{ xs.append(4) }}", "{\"xs\": [1]}", "unsafe"},
    {"{% set x = 1 %}{% set x.a = 2 %}", "{}", "cannot assign attribute on non-namespace object"},
    {"{% for a, b in [[1]] %}{% endfor %}", "{}", "not enough values to unpack"},
    {"{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", "{}", "takes not more than 1 argument"},
    {"{{ raise_exception('Bad role: ' ~ r) }}", "{\"r\": \"x\"}", "t:1:4: raise_exception: Bad role: x"},
    {"{{ 1 < 'a' }}", "{}", "'<' not supported"},
    {"{{ 5|tojson(indent=2) ~ nothing|tojson }}", "{}", "not JSON serializable"},
};

class JinjaRender : public ::testing::TestWithParam<RenderCase> {};

TEST_P(JinjaRender, MatchesJinja) {
  const RenderCase& c = GetParam();
  EXPECT_EQ(render(c.tmpl, c.context), c.expected) << "template: " << c.tmpl;
}

INSTANTIATE_TEST_SUITE_P(Cases, JinjaRender, ::testing::ValuesIn(kRenderCases),
                         [](const ::testing::TestParamInfo<RenderCase>& param) {
                           return std::string(param.param.group) + "_" + std::to_string(param.index);
                         });

TEST(JinjaErrors, RenderTimeFailuresNameWhatAndWhere) {
  for (const ErrorCase& c : kRenderErrors) {
    const std::string msg = error_of(c.tmpl, c.context);
    EXPECT_NE(msg.find(c.message_part), std::string::npos) << "template: " << c.tmpl << "\nmessage: " << msg;
    EXPECT_EQ(msg.rfind("t:", 0), 0u) << msg;  // always located in the template
  }
}

TEST(JinjaErrors, RaiseExceptionCarriesTheMessage) {
  EXPECT_EQ(error_of("{%- if messages[0].role != 'system' %}\n  {{- raise_exception('System first!') }}\n{%- endif %}",
                     R"({"messages": [{"role": "user"}]})"),
            "t:2:7: raise_exception: System first!");
}

TEST(JinjaErrors, UnsupportedTagsAreRefusedAtParseTimeWithLineAndColumn) {
  EXPECT_EQ(parse_error_of("{% include 'x' %}"), "t:1:4: unsupported Jinja construct 'include'");
  EXPECT_EQ(parse_error_of("line one\n  {% extends 'base.j2' %}"), "t:2:6: unsupported Jinja construct 'extends'");
  for (const char* tag : {"block", "call", "filter", "with", "import", "from", "raw", "autoescape", "do"}) {
    const std::string msg = parse_error_of(std::string("ok\n{%- ") + tag + " x %}{% end" + tag + " %}");
    EXPECT_EQ(msg, std::string("t:2:5: unsupported Jinja construct '") + tag + "'") << tag;
  }
  EXPECT_EQ(parse_error_of("{% for x in xs recursive %}{% endfor %}"),
            "t:1:16: unsupported Jinja construct 'recursive'");
}

TEST(JinjaErrors, UnknownFiltersAndTestsAreRefusedAtParseTime) {
  EXPECT_EQ(parse_error_of("{{ x|sort }}"), "t:1:6: unsupported Jinja construct 'filter sort'");
  EXPECT_EQ(parse_error_of("{{ x | dictsort(true) }}"), "t:1:8: unsupported Jinja construct 'filter dictsort'");
  EXPECT_EQ(parse_error_of("{% if x is lower %}{% endif %}"), "t:1:12: unsupported Jinja construct 'test lower'");
  // A filter or test named by string is only known at render time.
  EXPECT_EQ(error_of("{{ ['a']|map('sort')|list }}"), "t:1:9: unsupported Jinja construct 'filter sort'");
  EXPECT_EQ(error_of("{{ [1]|select('lower')|list }}"), "t:1:7: unsupported Jinja construct 'test lower'");
}

TEST(JinjaErrors, UnknownMethodsAreRefusedAtRenderTime) {
  EXPECT_EQ(error_of("{{ 'a'.isdigit() }}"), "t:1:7: unsupported Jinja construct 'str.isdigit' (an unknown method)");
  EXPECT_EQ(error_of("{{ d.copy() }}", R"({"d": {}})"),
            "t:1:5: unsupported Jinja construct 'dict.copy' (an unknown method)");
  EXPECT_EQ(error_of("{% for x in [1] %}{{ loop.cycle('a', 'b') }}{% endfor %}"),
            "t:1:26: unsupported Jinja construct 'loop.cycle' (an unknown method)");
  // Without a call, a missing attribute is just undefined, as in Jinja.
  EXPECT_EQ(render("[{{ 'a'.isdigit }}]"), "[]");
}

TEST(JinjaErrors, SyntaxErrorsNameLineAndColumn) {
  EXPECT_EQ(parse_error_of("{% if x %}no end"), "t:1:17: syntax error: unexpected end of template, expected 'endif'");
  EXPECT_EQ(parse_error_of("{{ 1 + }}"), "t:1:8: syntax error: unexpected end of print statement");
  EXPECT_EQ(parse_error_of("{{ 'abc }}"), "t:1:4: syntax error: unterminated string literal");
  EXPECT_EQ(parse_error_of("{% endfor %}"), "t:1:4: syntax error: unknown tag 'endfor'");
  EXPECT_EQ(parse_error_of("x\n{% break %}"), "t:2:4: syntax error: 'break' outside of a loop");
  EXPECT_EQ(parse_error_of("{% for x in y %}{% macro m() %}{% continue %}{% endmacro %}{% endfor %}"),
            "t:1:35: syntax error: 'continue' outside of a loop");
  EXPECT_EQ(parse_error_of("{{ (1 }}"), "t:1:7: syntax error: unexpected '}', expected ')'");
  EXPECT_EQ(parse_error_of("a\n{# open"), "t:2:1: syntax error: missing end of comment tag");
  EXPECT_EQ(parse_error_of("{{ x"), "t:1:1: syntax error: unexpected end of template, expected '}}'");
  EXPECT_NE(parse_error_of("{% macro m(a=1, b) %}{% endmacro %}").find("t:1:18: syntax error: non-default argument"),
            std::string::npos);
  EXPECT_NE(parse_error_of("{{ f(a=1, 2) }}").find("t:1:11: syntax error: positional argument follows keyword"),
            std::string::npos);
}

TEST(JinjaErrors, DeepNestingAndRecursionAreErrorsNotCrashes) {
  EXPECT_NE(parse_error_of("{{ " + std::string(1000, '(') + "1" + std::string(1000, ')') + " }}")
                .find("syntax error: nested too deeply"),
            std::string::npos);
  std::string ifs;
  for (int i = 0; i < 1000; ++i) ifs += "{% if true %}";
  EXPECT_NE(parse_error_of(ifs).find("syntax error: nested too deeply"), std::string::npos);
  EXPECT_NE(error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}").find("macro 'f': recursion deeper than"),
            std::string::npos);
}

TEST(Jinja, RendersAreIndependent) {
  // Template-level state (here a namespace) starts afresh on every render.
  const Template t = Template::parse("{% set ns = namespace(n=0) %}{% set ns.n = ns.n + 1 %}{{ ns.n }}", "t");
  EXPECT_EQ(t.render(Ordered::object()), "1");
  EXPECT_EQ(t.render(Ordered::object()), "1");
  EXPECT_EQ(t.name(), "t");
}

TEST(Jinja, PlainJsonContextIteratesItsSortedKeys) {
  // nlohmann::json keeps object keys sorted; ordered_json keeps their order, as Python's dicts do.
  const Template t = Template::parse("{% for k in d %}{{ k }}{% endfor %}", "t");
  EXPECT_EQ(t.render(nlohmann::json{{"d", {{"b", 1}, {"a", 2}}}}), "ab");
  EXPECT_EQ(t.render(Ordered::parse(R"({"d": {"b": 1, "a": 2}})")), "ba");
}

TEST(Jinja, ContextMustBeAnObject) { EXPECT_THROW(Template::parse("x", "t").render(Ordered::array()), qhx::Error); }

TEST(Jinja, ChatTurnsWithImagesAndAGenerationPrompt) {
  // The shape of Qwen3-VL's template: content as a string or a list of parts.
  const std::string tmpl =
      "{%- for m in messages %}\n"
      "  {{- '<|im_start|>' + m.role + '\\n' }}\n"
      "  {%- if m.content is string %}\n"
      "    {{- m.content }}\n"
      "  {%- else %}\n"
      "    {%- for p in m.content %}\n"
      "      {%- if p.type == 'image' %}<|vision_start|><|image_pad|><|vision_end|>\n"
      "      {%- elif 'text' in p %}{{ p.text }}{% endif %}\n"
      "    {%- endfor %}\n"
      "  {%- endif %}\n"
      "  {{- '<|im_end|>\\n' }}\n"
      "{%- endfor %}\n"
      "{%- if add_generation_prompt %}\n"
      "  {{- '<|im_start|>assistant\\n' }}\n"
      "{%- endif %}\n";
  const std::string ctx = R"({"add_generation_prompt": true, "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is it?"}]}]})";
  EXPECT_EQ(render(tmpl, ctx),
            "<|im_start|>system\nBe brief.<|im_end|>\n"
            "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>What is it?<|im_end|>\n"
            "<|im_start|>assistant\n");
}

// ---- template files ----

TEST(TemplateFile, ReadsTheThreeForms) {
  const qhx::test::TempDir dir;
  EXPECT_EQ(qhx::chat::load_template_file(dir.write("chat_template.jinja", "{{ a }}\n")), "{{ a }}\n");
  EXPECT_EQ(qhx::chat::load_template_file(dir.write("chat_template.json", R"({"chat_template": "J"})")), "J");
  EXPECT_EQ(
      qhx::chat::load_template_file(dir.write("tokenizer_config.json", R"({"eos_token": "e", "chat_template": "T"})")),
      "T");
  EXPECT_EQ(qhx::chat::load_template_file(dir.write(
                "list.json",
                R"({"chat_template": [{"name": "tool_use", "template": "U"}, {"name": "default", "template": "D"}]})")),
            "D");
}

TEST(TemplateFile, BadFilesNameTheFile) {
  const qhx::test::TempDir dir;
  auto message = [](const std::filesystem::path& p) {
    try {
      qhx::chat::load_template_file(p);
    } catch (const qhx::Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const auto no_key = dir.write("tokenizer_config.json", R"({"eos_token": "e"})");
  EXPECT_EQ(message(no_key), no_key.string() + ": no \"chat_template\" key");
  const auto no_default = dir.write("a.json", R"({"chat_template": [{"name": "x", "template": "X"}]})");
  EXPECT_NE(message(no_default).find("no template named \"default\""), std::string::npos);
  const auto bad_json = dir.write("b.json", "{not json");
  EXPECT_EQ(message(bad_json).rfind(bad_json.string() + ": not valid JSON", 0), 0u);
  const auto huge_number =
      dir.write("c.json", R"({"chat_template": "T", "x": 1e999})");  // out_of_range, not parse_error
  EXPECT_EQ(message(huge_number).rfind(huge_number.string() + ": not valid JSON", 0), 0u);
  EXPECT_EQ(message(dir.path() / "absent.jinja"),
            (dir.path() / "absent.jinja").string() + ": cannot open the chat template file");
}

TEST(TemplateFile, CheckpointPrecedenceIsTransformers) {
  namespace fs = std::filesystem;
  const qhx::test::TempDir dir;
  EXPECT_FALSE(qhx::chat::find_checkpoint_template(dir.path()).has_value());
  dir.write("tokenizer_config.json", R"({"eos_token": "e"})");
  EXPECT_FALSE(qhx::chat::find_checkpoint_template(dir.path()).has_value());  // a config without a template
  dir.write("tokenizer_config.json", R"({"chat_template": "from tokenizer_config"})");
  dir.write("processor_config.json", R"({"chat_template": "from processor_config"})");
  dir.write("chat_template.jinja", "from jinja");
  dir.write("chat_template.json", R"({"chat_template": "from chat_template.json"})");
  const char* order[] = {"chat_template.json", "chat_template.jinja", "processor_config.json", "tokenizer_config.json"};
  const char* text[] = {"from chat_template.json", "from jinja", "from processor_config", "from tokenizer_config"};
  for (int i = 0; i < 4; ++i) {
    const auto found = qhx::chat::find_checkpoint_template(dir.path());
    ASSERT_TRUE(found.has_value()) << order[i];
    EXPECT_EQ(found->path, dir.path() / order[i]);
    EXPECT_EQ(found->text, text[i]);
    fs::remove(dir.path() / order[i]);
  }
  EXPECT_FALSE(qhx::chat::find_checkpoint_template(dir.path()).has_value());
}

}  // namespace
