// jinja_limits_test.cpp: hostile and broken templates (issue 14 item 7) fail
// with an error that names the template and the limit, quickly, and never
// crash or exhaust memory; real templates stay far inside the limits.
#include <gtest/gtest.h>
#include <pthread.h>

#include <chrono>
#include <fstream>
#include <sstream>

#include "chat/chat_template.h"
#include "chat/jinja_interpreter.h"

namespace {

using nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

ms::ChatTemplateOptions named(const std::string& name) {
  ms::ChatTemplateOptions o;
  o.name = name;
  return o;
}

// Status of creating + rendering `src`; "" when it rendered.
std::string error_of(const std::string& src, ms::ChatTemplateOptions o = named("evil.jinja"),
                     const ordered_json& ctx = ordered_json::object()) {
  auto t = ms::ChatTemplate::create(src, o);
  if (!t.is_ok()) return t.status().message();
  auto r = t->render(ctx);
  return r.is_ok() ? "" : r.status().message();
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

#define EXPECT_HAS(haystack, needle) EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)

// --- the cases ---------------------------------------------------

TEST(JinjaLimits, RecursiveMacroStopsAtTheCallDepth) {
  std::string e = error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}\n{{ f(0) }}");
  EXPECT_HAS(e, "evil.jinja: render error: template render limit: macro 'f' called with 64 calls already open");
  EXPECT_HAS(e, "(template line 1)");
  // Mutual recursion through caller() counts the same way.
  e = error_of("{% macro g() %}{{ caller() }}{% endmacro %}{% macro f() %}{% call g() %}{{ f() }}{% endcall %}"
               "{% endmacro %}{{ f() }}");
  EXPECT_HAS(e, "calls already open");
}

TEST(JinjaLimits, HundredThousandNestedParenthesesAreAParseError) {
  const int n = 100000;
  auto t0 = Clock::now();
  std::string e = error_of("{{ " + std::string(n, '(') + "1" + std::string(n, ')') + " }}");
  EXPECT_HAS(e, "evil.jinja: syntax error: template nested deeper than the limit of 100 levels");
  // Every way of nesting: brackets, dicts, calls, unary operators, not, ternaries, blocks.
  for (const std::string& src : {
           "{{ " + std::string(n, '[') + std::string(n, ']') + " }}",
           "{{ " + [] { std::string s; for (int i = 0; i < 100000; ++i) s += "{'a': "; return s; }() + "1" +
               std::string(n, '}') + " }}",
           "{{ f" + [] { std::string s; for (int i = 0; i < 100000; ++i) s += "(f"; return s; }() + std::string(n, ')') +
               " }}",
           "{{ " + std::string(n, '-') + "1 }}",
           "{{ " + [] { std::string s; for (int i = 0; i < 100000; ++i) s += "not "; return s; }() + "1 }}",
           "{{ " + [] { std::string s; for (int i = 0; i < 100000; ++i) s += "1 if x else "; return s; }() + "1 }}",
           [] { std::string s; for (int i = 0; i < 100000; ++i) s += "{% if x %}"; return s; }(),
       }) {
    EXPECT_HAS(error_of(src), "nested deeper than the limit of 100 levels");
  }
  EXPECT_LT(seconds_since(t0), 60.0);  // linear work: seconds only on a loaded sanitizer build
}

TEST(JinjaLimits, LongChainsAreBoundedByTheExpressionDepth) {
  // Loops in the parser build these without recursing; the tree still gets
  // deep, and the renderer and the tree's destructor would recurse on it.
  auto chain = [](const std::string& first, const std::string& link, int n) {
    std::string s = "{{ " + first;
    for (int i = 0; i < n; ++i) s += link;
    return s + " }}";
  };
  for (const std::string& src : {
           chain("x", ".a", 100000), chain("x", "[0]", 100000), chain("x", "()", 100000),
           chain("x", "|trim", 100000), chain("x", " is defined", 100000), chain("1", " + 1", 100000),
           chain("'a'", " ~ 'a'", 100000), chain("1", " * 1", 100000), chain("1", " ** 1", 100000),
           chain("x", " and x", 100000), chain("x", " or x", 100000), chain("1", " == 1", 100000),
           chain("x", " in x", 100000), chain("x", "[0:1]", 100000),
       }) {
    EXPECT_HAS(error_of(src), "expression nested deeper than the limit of 256 levels");
  }
  // Inside the limit these are ordinary expressions.
  EXPECT_EQ(error_of(chain("1", " + 1", 200)), "");
}

TEST(JinjaLimits, HugeRangeIsRefusedBeforeAllocating) {
  auto t0 = Clock::now();
  std::string e = error_of("{% for i in range(10**12) %}{% endfor %}");
  EXPECT_HAS(e, "a list, dict or range of 1000000000000 items is over the limit of 1048576");
  EXPECT_HAS(error_of("{{ range(-9223372036854775807 - 1, 9223372036854775807, 1) | length }}"), "over the limit");
  EXPECT_HAS(error_of("{{ [0] * 10**12 }}"), "items is over the limit");
  EXPECT_LT(seconds_since(t0), 2.0);
}

TEST(JinjaLimits, HugeStringIsRefusedBeforeAllocating) {
  auto t0 = Clock::now();
  EXPECT_HAS(error_of("{{ 'a' * 10**12 }}"), "a string of 1000000000000 bytes is over the limit of 32 MiB");
  EXPECT_HAS(error_of("{{ 'ab' * 9223372036854775807 }}"), "over the limit of 32 MiB");
  EXPECT_HAS(error_of("{{ 'x' | center(10**12) }}"), "over the limit of 32 MiB");
  EXPECT_HAS(error_of("{{ 'x\nx' | indent(10**12) }}"), "over the limit of 32 MiB");
  EXPECT_HAS(error_of("{{ [1] | tojson(indent=10**9) }}"), "indent 1000000000 is over the limit");
  EXPECT_HAS(error_of("{{ '%999999999999s' % 'x' }}"), "is too long");
  EXPECT_LT(seconds_since(t0), 2.0);
}

TEST(JinjaLimits, NestedLoopsRunOutOfSteps) {
  // About the step count (the next test is about the clock): a tenth of the
  // default keeps it quick under sanitizers, where 20M steps can outlast 10 s.
  // tests/cli/inspect_test.sh runs the same loops with the default limits.
  ms::ChatTemplateOptions o = named("evil.jinja");
  o.render_limits.max_steps = 2'000'000;
  o.render_limits.max_seconds = 600;
  std::string e = error_of(
      "{% for i in range(1000000) %}{% for j in range(1000000) %}{% for k in range(1000000) %}"
      "{% endfor %}{% endfor %}{% endfor %}", o);
  EXPECT_HAS(e, "more than 2000000 steps");
}

TEST(JinjaLimits, WallClockLimit) {
  ms::ChatTemplateOptions o = named("slow.jinja");
  o.render_limits.max_steps = int64_t(1) << 60;
  o.render_limits.max_seconds = 0.2;
  auto t0 = Clock::now();
  std::string e = error_of("{% for i in range(1000000) %}{% for j in range(1000000) %}{% endfor %}{% endfor %}", o);
  EXPECT_HAS(e, "slow.jinja: render error: template render limit: rendering took longer than 0.2 s");
  EXPECT_LT(seconds_since(t0), 30.0);  // checked every 256 steps; one step here builds a 1M list
}

// --- memory ---------------------------------------------------------------

TEST(JinjaLimits, OutputSize) {
  EXPECT_HAS(error_of("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}"), "output over 32 MiB");
  // Strings built by joining are capped as they grow.
  EXPECT_HAS(error_of("{{ range(1000000) | join('x' * 100) }}"), "over the limit of 32 MiB");
  EXPECT_HAS(error_of("{{ ('x' * 1000000).replace('x', 'y' * 100) }}"), "over the limit of 32 MiB");
}

TEST(JinjaLimits, LiveBytesBoundWhatAccumulates) {
  ms::ChatTemplateOptions o = named("hoard.jinja");
  o.render_limits.max_live_bytes = 8 << 20;
  o.render_limits.max_seconds = 600;  // about memory, not time (sanitizer builds are slow)
  // 1 MB strings kept in a list: the 9th does not fit.
  std::string e = error_of(
      "{% set ns = namespace(l=[]) %}{% for i in range(100) %}{% do ns.l.append('a' * 1000000) %}{% endfor %}", o);
  EXPECT_HAS(e, "hoard.jinja: render error: template render limit: more than 8 MiB of strings and lists alive at once");
  // The same strings made and dropped one at a time are fine.
  EXPECT_EQ(error_of("{% for i in range(100) %}{% set s = 'a' * 1000000 %}{% endfor %}", o), "");
  // A list doubling itself in place.
  e = error_of("{% set l = [1] %}{% for i in range(40) %}{% do l.extend(l) %}{% endfor %}", o);
  EXPECT_HAS(e, "template render limit");
}

// Also the reference cycles a render can make (a macro stored in the frame
// it closes over, a list that contains itself, a list holding its own bound
// method): found by LeakSanitizer, freed by ~Interpreter and break_cycles().
TEST(JinjaLimits, EveryChargedByteIsGivenBack) {
  ms::jinja::Template t(
      "{% macro m(x) %}<{{ x }}>{% endmacro %}{% set c = [] %}{% do c.append(c) %}{% do c.append(c.append) %}"
      "{% set d = {} %}{% do d.update({'d': d}) %}"
      "{% set ns = namespace(l=[], d={}) %}{% for i in range(50) %}{% do ns.l.append('x' * i) %}"
      "{% do ns.d.update({i|string: [i] * i}) %}{% set _ = ns.d.pop('3', none) %}{% endfor %}"
      "{{ ns.l | length }} {{ ns.d | length }} {{ m(messages[0].content) }}");
  ms::jinja::RenderBudget budget{ms::jinja::RenderLimits{}};
  {
    ms::jinja::ScopedBudget active(&budget);
    {
      ms::jinja::Value ctx = ms::jinja::Value::from_json(
          ordered_json{{"messages", ordered_json::array({{{"role", "user"}, {"content", "hi"}}})}});
      EXPECT_GT(budget.live_bytes(), 0u);
      EXPECT_EQ(t.render(ctx, {}, budget), "50 49 <hi>");
      EXPECT_GT(budget.peak_live_bytes(), 50u * 49 / 2);
    }
    budget.break_cycles();  // as ChatTemplate::render does
  }
  EXPECT_EQ(budget.live_bytes(), 0u);
}

// --- values that contain themselves, integer edge cases ----------------------

TEST(JinjaLimits, SelfContainingValues) {
  const std::string mk = "{% set a = [] %}{% do a.append(a) %}{% set b = [] %}{% do b.append(b) %}";
  EXPECT_HAS(error_of(mk + "{{ a }}"), "a value nested deeper than 256 levels");
  EXPECT_HAS(error_of(mk + "{{ a | tojson }}"), "a value nested deeper than 256 levels");
  EXPECT_HAS(error_of(mk + "{{ a == b }}"), "a value nested deeper than 256 levels");
  EXPECT_HAS(error_of(mk + "{{ a < b }}"), "a value nested deeper than 256 levels");
  EXPECT_HAS(error_of("{% set d = {} %}{% do d.update({'d': d}) %}{{ d }}"), "nested deeper than 256 levels");
  EXPECT_EQ(error_of(mk + "{{ a == a }}"), "");  // identity, as in Python
  // map('map', 'map', ...) over a list that contains itself: one level of
  // filter nesting per argument, bounded like any evaluation.
  std::string maps;
  for (int i = 0; i < 1000; ++i) maps += "'map', ";
  EXPECT_HAS(error_of(mk + "{{ a | map(" + maps + "'string') | list }}"), "nested deeper than 512 levels");
}

TEST(JinjaLimits, IntegerOverflowIsAnErrorNotUndefinedBehaviour) {
  for (const char* src : {"{{ 9223372036854775807 + 1 }}", "{{ -9223372036854775807 - 2 }}",
                          "{{ 4294967296 * 4294967296 }}", "{{ 2 ** 64 }}", "{{ 3 ** 100 }}",
                          "{{ -(-9223372036854775807 - 1) }}", "{{ (-9223372036854775807 - 1) // -1 }}",
                          "{{ (-9223372036854775807 - 1) | abs }}", "{{ [9223372036854775807, 1] | sum }}"}) {
    EXPECT_HAS(error_of(src), "integer overflow") << src;
  }
  for (const char* src : {"{{ (1e300 * 1e300) | int }}", "{{ range(1e300 * 1e300 / (1e300 * 1e300)) }}",
                          "{{ [1, 2, 3][1e300 * 1e300:] }}"}) {
    EXPECT_NE(error_of(src), "") << src;
  }
  auto r = ms::ChatTemplate::create("{{ 10 ** 12 }} {{ 2 ** 62 }} {{ (-9223372036854775807 - 1) % -1 }} "
                                    "{{ -7 % 3 }} {{ 7 % -3 }} {{ [1, 2, 3][::9223372036854775807] }} "
                                    "{{ [1, 2, 3][::-9223372036854775807 - 1] }} {{ 'abc'[-9223372036854775807 - 1:] }}");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  auto out = r->render(ordered_json::object());
  ASSERT_TRUE(out.is_ok()) << out.status().message();
  EXPECT_EQ(*out, "1000000000000 4611686018427387904 0 2 -2 [1] [3] abc");
}

// --- the budget is enough for real work -------------------------------------

std::string fixture(const std::string& name) {
  const char* env = std::getenv("MEGASERVE_SOURCE_DIR");
  std::ifstream f(std::string(env ? env : MEGASERVE_SOURCE_DIR) + "/tests/fixtures/templates/" + name);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// 2,000 messages and 50 tools through a real tools template: well inside
// every limit (steps are printed so the margin is visible).
TEST(JinjaLimits, LargeRealConversationFitsComfortably) {
  const std::string src = fixture("Qwen-Qwen3-0.6B.jinja");
  ASSERT_FALSE(src.empty());
  ordered_json msgs = ordered_json::array();
  for (int i = 0; i < 2000; ++i) {
    msgs.push_back({{"role", i % 2 ? "assistant" : "user"}, {"content", "message " + std::to_string(i)}});
  }
  ordered_json tools = ordered_json::array();
  for (int i = 0; i < 50; ++i) {
    tools.push_back({{"type", "function"},
                     {"function",
                      {{"name", "tool" + std::to_string(i)},
                       {"description", "does thing " + std::to_string(i)},
                       {"parameters",
                        {{"type", "object"},
                         {"properties", {{"a", {{"type", "string"}}}, {"b", {{"type", "integer"}}}}}}}}}});
  }
  ms::jinja::Template t(src);
  ms::jinja::RenderBudget budget{ms::jinja::RenderLimits{}};
  ms::jinja::ScopedBudget active(&budget);
  ms::jinja::Value ctx = ms::jinja::Value::from_json(
      ordered_json{{"messages", msgs}, {"tools", tools}, {"add_generation_prompt", true}});
  auto t0 = Clock::now();
  std::string out = t.render(ctx, {}, budget);
  const double s = seconds_since(t0);
  EXPECT_GT(out.size(), 40000u);
  EXPECT_LT(budget.steps(), budget.limits().max_steps / 20);
  std::printf("[limits] 2000 messages + 50 tools (Qwen3): %lld steps (limit %lld), peak %zu KiB live, %.1f ms\n",
              static_cast<long long>(budget.steps()), static_cast<long long>(budget.limits().max_steps),
              budget.peak_live_bytes() >> 10, s * 1e3);
}

// The worst case the limits allow (evaluation nested max_eval_depth deep)
// fits a small thread stack, so a render can never overflow an HTTP thread's
// 8 MiB stack. Sanitizers grow every frame, hence the larger stack there.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr size_t kStack = size_t(8) << 20;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr size_t kStack = size_t(8) << 20;
#else
constexpr size_t kStack = size_t(2) << 20;
#endif
#else
constexpr size_t kStack = size_t(2) << 20;
#endif

void* render_deepest(void* out) {
  ms::ChatTemplateOptions o;
  o.render_limits.max_call_depth = 1 << 20;  // let the evaluation depth be what stops it
  std::string chain = "x";
  for (int i = 0; i < 250; ++i) chain += " ~ x";
  *static_cast<std::string*>(out) =
      error_of("{% macro f(n) %}{% if true %}{% for i in [1] %}{{ f(n + 1) | trim }}{% endfor %}{% endif %}"
               "{% endmacro %}{{ f(0) }}",
               o) +
      "|" + error_of("{% set x = 'a' %}{{ " + chain + " }}", o);
  return nullptr;
}

TEST(JinjaLimits, DeepestRenderFitsASmallStack) {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, kStack);
  std::string result;
  pthread_t th;
  ASSERT_EQ(pthread_create(&th, &attr, render_deepest, &result), 0);
  pthread_join(th, nullptr);
  pthread_attr_destroy(&attr);
  EXPECT_HAS(result, "statements and expressions nested deeper than 512 levels");
  EXPECT_EQ(result.substr(result.find('|')), "|");  // the 251-deep expression renders
}

}  // namespace
