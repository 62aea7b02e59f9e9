// Cost of grammar-constrained decoding on the host, per token per row: the
// allowed-token mask (GrammarMatcher::fill_mask) and the advance by the
// chosen token (accept_token), for realistic schemas and outputs, at batch 8
// (eight rows decoding eight different documents in lockstep).
//
//   build-cpu/bench_grammar_mask [--tokenizer DIR_OR_JSON] [--vocab N] [--repeat R] [--json OUT]
//
// --tokenizer: the tokenizer whose encodings are the outputs (default: the
// demo model's). --vocab N pads the mask vocabulary to N tokens (262144: North
// Mini Code's size) with Llama 3's tokens not in it and then concatenations of
// two random tokens of it, so that masks are computed over N entries while the
// outputs stay real encodings. Per schema: compile time; precompute() (what
// the server does in the request's thread before submitting a new schema);
// "first use": decoding right after precompute (what the engine thread sees
// for a new schema: masks of recursive rules' contexts still computed on
// first use); warm (the same grammar again, as later requests see it); and
// "no precompute": a fresh grammar whose every mask is computed on first use.
// --repeat R runs all of it R times and reports the median of each number
// (worst: the largest), so that a shared machine's noise shows less.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/flags.h"
#include "sampling/grammar_runtime.h"
#include "sampling/json_schema.h"
#include "sampling/token_mask.h"
#include "sampling/vocab_from_tokenizer.h"

namespace ms {
namespace {

using Json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

double us_since(Clock::time_point t0) { return std::chrono::duration<double, std::micro>(Clock::now() - t0).count(); }

struct Case {
  const char* name;
  std::string schema;  // "" = json_object
  std::vector<std::string> docs;
};

std::vector<Case> cases() {
  const char* names[] = {"Ada Lovelace", "Zoë Brontë", "李小龙", "José Álvarez", "Nguyễn Văn An", "Олег Петров",
                         "Grace Hopper", "Søren Kierkegaard"};
  const char* cities[] = {"London", "Zürich", "上海", "São Paulo", "Hà Nội", "Москва", "New York", "København"};
  std::vector<Case> out;
  Case person{"person ($defs, enum, nullable, array)",
              R"({"$defs":{"Address":{"type":"object","properties":{"street":{"type":"string"},
        "city":{"type":"string"},"zip":{"anyOf":[{"type":"string"},{"type":"null"}]}},
        "required":["street","city","zip"],"additionalProperties":false},
        "Role":{"type":"string","enum":["admin","editor","viewer"]}},
        "type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer","minimum":0,"maximum":150},
        "email":{"type":"string"},"role":{"$ref":"#/$defs/Role"},"address":{"$ref":"#/$defs/Address"},
        "tags":{"type":"array","items":{"type":"string"}},"active":{"type":"boolean"}},
        "required":["name","age","email","role","address","tags","active"],"additionalProperties":false})",
              {}};
  for (int i = 0; i < 8; ++i) {
    Json d;
    d["name"] = names[i];
    d["age"] = 20 + 7 * i;
    d["email"] = "user" + std::to_string(i) + "@example.com";
    d["role"] = i % 3 == 0 ? "admin" : (i % 3 == 1 ? "editor" : "viewer");
    d["address"] = {{"street", std::to_string(10 + i) + " Baker Street, flat " + std::to_string(i)},
                    {"city", cities[i]},
                    {"zip", i % 2 ? Json(nullptr) : Json("NW1 6XE")}};
    d["tags"] = Json::array({"mathematics", "poetry \"quoted\"", "engines"});
    d["active"] = i % 2 == 0;
    person.docs.push_back(i % 2 ? d.dump() : d.dump(2));
  }
  out.push_back(person);

  Case tool{"tool arguments (nested objects, enums, numbers)",
            R"({"type":"object","properties":{"query":{"type":"string","maxLength":200},
        "filters":{"type":"array","items":{"type":"object","properties":{"field":{"type":"string",
        "enum":["price","rating","distance","date"]},"op":{"enum":["lt","gt","eq"]},"value":{"type":"number"}},
        "required":["field","op","value"],"additionalProperties":false},"maxItems":4},
        "limit":{"type":"integer","minimum":1,"maximum":100},"sort":{"type":["string","null"]}},
        "required":["query","filters","limit","sort"],"additionalProperties":false})",
            {}};
  for (int i = 0; i < 8; ++i) {
    Json d;
    d["query"] = std::string("hotels near ") + cities[i] + " with a pool and free breakfast, quiet rooms";
    d["filters"] = Json::array();
    for (int f = 0; f <= i % 4; ++f)
      d["filters"].push_back({{"field", f % 2 ? "rating" : "price"}, {"op", f % 2 ? "gt" : "lt"}, {"value", 3.5 + f * 100}});
    d["limit"] = 10 + i;
    d["sort"] = i % 2 ? Json(nullptr) : Json("price");
    tool.docs.push_back(d.dump(i % 2 ? -1 : 2));
  }
  out.push_back(tool);

  Case any{"json_object (free-form, nested)", "", {}};
  for (int i = 0; i < 8; ++i) {
    Json d;
    d["title"] = std::string("Report for ") + cities[i];
    d["summary"] = "Sales rose 12% in Q3; the new store in " + std::string(cities[i]) + " opened on time.";
    d["metrics"] = {{"revenue", 1250000.5 + i}, {"growth", 0.12}, {"stores", Json::array({1, 2, 3, i})}};
    d["people"] = Json::array({{{"name", names[i]}, {"roles", Json::array({"lead", "analyst"})}}});
    d["ok"] = true;
    any.docs.push_back(d.dump(i % 2 ? -1 : 2));
  }
  out.push_back(any);

  Case tree{"recursive tree ($ref cycle)",
            R"({"$defs":{"Node":{"type":"object","properties":{"label":{"type":"string"},
        "children":{"type":"array","items":{"$ref":"#/$defs/Node"}}},"required":["label","children"],
        "additionalProperties":false}},"$ref":"#/$defs/Node"})",
            {}};
  for (int i = 0; i < 8; ++i) {
    Json leaf = {{"label", names[i]}, {"children", Json::array()}};
    Json mid = {{"label", cities[i]}, {"children", Json::array({leaf, leaf})}};
    Json root = {{"label", "root " + std::to_string(i)}, {"children", Json::array({mid, leaf, mid})}};
    tree.docs.push_back(root.dump(i % 2 ? -1 : 2));
  }
  out.push_back(tree);

  // What zod 4 through openai's zodResponseFormat emits for .email() / .uuid() /
  // .datetime(): format plus zod's own pattern (the grammar is their product).
  Case zod{"zod 4 (email, uuid, datetime: format + pattern)",
           R"({"type":"object","properties":{"name":{"type":"string"},
        "email":{"type":"string","format":"email","pattern":"^(?:[A-Za-z0-9_'+\\-]+\\.)*[A-Za-z0-9_'+\\-]*[A-Za-z0-9_+-]@(?:[A-Za-z0-9][A-Za-z0-9\\-]*\\.)+[A-Za-z]{2,}$"},
        "id":{"type":"string","format":"uuid","pattern":"^([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[1-8][0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12})$"},
        "at":{"type":"string","format":"date-time"}},"required":["name","email","id","at"],"additionalProperties":false})",
           {}};
  for (int i = 0; i < 8; ++i) {
    Json d;
    d["name"] = names[i];
    d["email"] = "user." + std::to_string(i) + "@mail.example.org";
    d["id"] = "123e4567-e89b-42d3-a456-42661417400" + std::to_string(i);
    d["at"] = "2026-0" + std::to_string(1 + i) + "-1" + std::to_string(i) + "T12:3" + std::to_string(i) + ":00Z";
    zod.docs.push_back(d.dump(i % 2 ? -1 : 2));
  }
  out.push_back(zod);
  return out;
}

struct RunStats {
  double mask_us = 0, accept_us = 0, worst_us = 0;
  int tokens = 0, rejected = 0;
  std::vector<double> per_token;
};

// Eight rows in lockstep, each following one document's tokens.
RunStats run(const std::shared_ptr<CompiledGrammar>& cg, const std::vector<std::vector<int32_t>>& docs, int words) {
  RunStats st;
  std::vector<std::unique_ptr<GrammarMatcher>> rows;
  for (size_t r = 0; r < docs.size(); ++r) rows.push_back(std::make_unique<GrammarMatcher>(cg));
  std::vector<uint32_t> mask(words);
  size_t longest = 0;
  for (const auto& d : docs) longest = std::max(longest, d.size());
  for (size_t step = 0; step < longest; ++step)
    for (size_t r = 0; r < docs.size(); ++r) {
      if (step >= docs[r].size()) continue;
      const int32_t t = docs[r][step];
      auto t0 = Clock::now();
      rows[r]->fill_mask(mask);
      const double m = us_since(t0);
      if (!token_bit(mask, t)) ++st.rejected;
      auto t1 = Clock::now();
      rows[r]->accept_token(t);
      const double a = us_since(t1);
      st.mask_us += m;
      st.accept_us += a;
      st.per_token.push_back(m + a);
      st.worst_us = std::max(st.worst_us, m + a);
      ++st.tokens;
    }
  return st;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1)))];
}

std::shared_ptr<const TokenVocab> padded_vocab(const Tokenizer& base, const std::string& extra_dir, int target) {
  std::vector<std::string> bytes;
  std::vector<uint8_t> excluded;
  std::set<std::string> seen;
  for (int32_t id = 0; id < base.vocab_size(); ++id) {
    bytes.emplace_back(base.token_bytes(id));
    excluded.push_back(base.is_special(id));
    seen.insert(bytes.back());
  }
  if (!extra_dir.empty()) {
    auto extra = Tokenizer::load(extra_dir);
    if (extra.is_ok())
      for (int32_t id = 0; id < extra->vocab_size() && static_cast<int>(bytes.size()) < target; ++id) {
        std::string b(extra->token_bytes(id));
        if (extra->is_special(id) || !seen.insert(b).second) continue;
        bytes.push_back(b);
        excluded.push_back(0);
      }
  }
  std::mt19937 rng(7);
  const size_t n0 = bytes.size();
  while (static_cast<int>(bytes.size()) < target) {
    std::string b = bytes[rng() % n0] + bytes[rng() % n0];
    if (b.size() > 24 || !seen.insert(b).second) continue;
    bytes.push_back(b);
    excluded.push_back(0);
  }
  return TokenVocab::create(std::move(bytes), std::move(excluded));
}

int bench_main(int argc, char** argv) {
  Flags flags;
  flags.add("tokenizer", "tokenizer directory or tokenizer.json whose encodings are the outputs",
            std::string(MEGASERVE_SOURCE_DIR) + "/models/north-mini-demo");
  flags.add("vocab", "pad the mask vocabulary to this many tokens (0: the tokenizer's own)", "0");
  flags.add("pad-from", "tokenizer whose extra tokens pad the vocabulary first",
            std::string(MEGASERVE_SOURCE_DIR) + "/tests/fixtures/tokenizer/llama3");
  flags.add("json", "append one JSON row per schema to this file", "");
  flags.add("repeat", "repetitions; medians are reported", "3");
  std::vector<std::string> args(argv + 1, argv + argc);
  if (Status s = flags.parse(args); !s.is_ok()) {
    std::fprintf(stderr, "%s\n%s", s.message().c_str(), flags.usage("bench_grammar_mask").c_str());
    return 2;
  }
  if (flags.help_requested()) {
    std::printf("%s", flags.usage("bench_grammar_mask").c_str());
    return 0;
  }
  auto vocab_n = flags.integer("vocab", 0, 1 << 20);
  if (!vocab_n.is_ok()) {
    std::fprintf(stderr, "%s\n", vocab_n.status().message().c_str());
    return 2;
  }
  auto repeat = flags.integer("repeat", 1, 100);
  if (!repeat.is_ok()) {
    std::fprintf(stderr, "%s\n", repeat.status().message().c_str());
    return 2;
  }
  auto tok = Tokenizer::load(flags.str("tokenizer"));
  if (!tok.is_ok()) {
    std::fprintf(stderr, "%s\n", tok.status().to_string().c_str());
    return 1;
  }
  auto t0 = Clock::now();
  std::shared_ptr<const TokenVocab> vocab =
      *vocab_n > tok->vocab_size() ? padded_vocab(*tok, flags.str("pad-from"), static_cast<int>(*vocab_n))
                                   : vocab_from_tokenizer(*tok);
  const double vocab_ms = us_since(t0) / 1000;
  t0 = Clock::now();
  vocab->string_scan();
  const double scan_ms = us_since(t0) / 1000;
  std::printf("vocabulary: %d tokens (%s%s), trie %d nodes: built in %.1f ms; string pre-scan %.1f ms\n",
              vocab->size(), flags.str("tokenizer").c_str(), *vocab_n > tok->vocab_size() ? ", padded" : "",
              vocab->num_nodes(), vocab_ms, scan_ms);
  std::printf("| schema | DFA states | compile ms | precompute ms | first use us/token | first use worst us | "
              "warm us/token | warm p99 us | no precompute us/token | no precompute worst us | tokens | "
              "%% of a 12 ms bs-8 step (first use) |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  std::FILE* jf = flags.str("json").empty() ? nullptr : std::fopen(flags.str("json").c_str(), "a");
  for (const Case& c : cases()) {
    const Json schema = c.schema.empty() ? Json() : Json::parse(c.schema);
    t0 = Clock::now();
    auto g = c.schema.empty() ? compile_any_json_object() : compile_json_schema(schema);
    double compile_ms = us_since(t0) / 1000;
    if (!g.is_ok()) {
      std::fprintf(stderr, "%s: %s\n", c.name, g.status().to_string().c_str());
      return 1;
    }
    std::vector<std::vector<int32_t>> docs;
    for (const std::string& d : c.docs) {
      if (!grammar_accepts(*g, d)) {
        std::fprintf(stderr, "%s: the grammar rejects its own document:\n%s\n", c.name, d.c_str());
        return 1;
      }
      docs.push_back(tok->encode(d, false, false));
    }
    const int states = g->num_states();
    std::vector<double> colds, warms, p99s, pres, firsts, compiles = {compile_ms};
    double worst = 0, first_worst = 0;
    int tokens = 0, rejected = 0;
    for (int rep = 0; rep < *repeat; ++rep) {
      auto t1 = Clock::now();
      auto gr = c.schema.empty() ? compile_any_json_object() : compile_json_schema(schema);
      compiles.push_back(us_since(t1) / 1000);
      auto cold = CompiledGrammar::create(*gr, vocab);
      const RunStats a = run(cold, docs, vocab->words());
      const RunStats w = run(cold, docs, vocab->words());
      auto pre = CompiledGrammar::create(std::move(gr).value(), vocab);
      t1 = Clock::now();
      pre->precompute();
      pres.push_back(us_since(t1) / 1000);
      const RunStats f = run(pre, docs, vocab->words());
      firsts.push_back((f.mask_us + f.accept_us) / f.tokens);
      first_worst = std::max(first_worst, f.worst_us);
      colds.push_back((a.mask_us + a.accept_us) / a.tokens);
      warms.push_back((w.mask_us + w.accept_us) / w.tokens);
      p99s.push_back(percentile(w.per_token, 0.99));
      worst = std::max(worst, a.worst_us);
      tokens = a.tokens;
      rejected += a.rejected + w.rejected;
    }
    const double cold_us = percentile(colds, 0.5), warm_us = percentile(warms, 0.5);
    const double pre_ms = percentile(pres, 0.5), first_us = percentile(firsts, 0.5);
    compile_ms = percentile(compiles, 0.5);
    const double p99 = percentile(p99s, 0.5);
    std::printf("| %s | %d | %.2f | %.1f | %.2f | %.0f | %.2f | %.2f | %.2f | %.0f | %d | %.3f%% |\n", c.name, states,
                compile_ms, pre_ms, first_us, first_worst, warm_us, p99, cold_us, worst, tokens,
                100.0 * first_us * 8 / 12000.0);
    if (rejected) std::printf("  (!) %d document tokens were not in the mask\n", rejected);
    if (jf) {
      Json row = {{"bench", "grammar_mask"},        {"schema", c.name},       {"vocab", vocab->size()},
                  {"tokenizer", flags.str("tokenizer")}, {"dfa_states", states}, {"compile_ms", compile_ms},
                  {"precompute_ms", pre_ms},         {"cold_us_per_token", cold_us},
                  {"warm_us_per_token", warm_us},    {"warm_p99_us", p99},     {"cold_worst_us", worst},
                  {"tokens", tokens},                {"mask_not_covering_doc_tokens", rejected},
                  {"string_scan_ms", scan_ms},       {"repeat", *repeat},
                  {"first_use_us_per_token", first_us}, {"first_use_worst_us", first_worst}};
      std::fprintf(jf, "%s\n", row.dump().c_str());
    }
  }
  if (jf) std::fclose(jf);
  return 0;
}

}  // namespace
}  // namespace ms

int main(int argc, char** argv) { return ms::bench_main(argc, argv); }
