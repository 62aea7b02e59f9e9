// chat_template_golden_test.cpp: renders every real chat template in
// tests/fixtures/templates/ over the conversations of
// tools/gen_template_fixtures.js and compares byte for byte with the goldens
// that @huggingface/jinja produced. Prints how many templates match.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "chat/chat_template.h"

namespace {

std::string fixtures_dir() {
  const char* env = std::getenv("MEGASERVE_SOURCE_DIR");
  return std::string(env ? env : MEGASERVE_SOURCE_DIR) + "/tests/fixtures/templates/";
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A window of `s` around byte `at`, newlines shown as \n.
std::string excerpt(const std::string& s, size_t at) {
  std::string out;
  for (char c : s.substr(at > 30 ? at - 30 : 0, 80)) out += c == '\n' ? std::string("\\n") : std::string(1, c);
  return out;
}

std::tm pinned_time() {
  std::tm tm{};
  tm.tm_year = 2025 - 1900;
  tm.tm_mon = 2;
  tm.tm_mday = 14;
  tm.tm_hour = 10;
  tm.tm_min = 30;
  tm.tm_wday = 5;
  tm.tm_yday = 72;
  return tm;
}

struct Tally {
  int templates = 0, identical_templates = 0;
  int cases = 0, identical = 0, ref_errors = 0, both_error = 0, python_identical = 0;
  int py_cases = 0, py_identical = 0, py_errors = 0, py_both_error = 0;
};

TEST(ChatTemplateGolden, RealTemplatesMatchReference) {
  std::ifstream index(fixtures_dir() + "index.txt");
  ASSERT_TRUE(index.good()) << "missing " << fixtures_dir() << "index.txt";
  Tally t;
  std::vector<std::string> failures, py_failures, py_lenient;
  std::string name;
  while (std::getline(index, name)) {
    if (name.empty()) continue;
    ++t.templates;
    std::string source = read_file(fixtures_dir() + name + ".jinja");
    auto golden = nlohmann::ordered_json::parse(read_file(fixtures_dir() + name + ".json"));
    ms::ChatTemplateOptions opts;
    opts.hf_js_repr = true;
    opts.now = pinned_time();
    auto tpl = ms::ChatTemplate::create(source, opts);
    ms::ChatTemplateOptions py_opts;
    py_opts.now = pinned_time();
    auto py_tpl = ms::ChatTemplate::create(source, py_opts);
    bool all_ok = true;
    for (const auto& c : golden["cases"]) {
      ++t.cases;
      if (py_tpl.is_ok() && c.contains("python_output")) {
        // Python jinja2 as transformers runs it: the ground truth for serving.
        ++t.py_cases;
        auto py = py_tpl->render(c["context"]);
        const std::string want = c["python_output"].get<std::string>();
        if (py.is_ok() && *py == want) {
          ++t.py_identical;
        } else {
          std::string why = py.is_ok() ? "" : py.status().message();
          if (py.is_ok()) {
            size_t i = 0;
            while (i < want.size() && i < py->size() && want[i] == (*py)[i]) ++i;
            why = "differs from Python jinja2 at byte " + std::to_string(i) + ": want ..." +
                  excerpt(want, i) + "... got ..." + excerpt(*py, i) + "...";
          }
          py_failures.push_back(name + "/" + c["name"].get<std::string>() + ": " + why);
        }
      } else if (py_tpl.is_ok() && c.contains("python_error")) {
        ++t.py_errors;
        if (!py_tpl->render(c["context"]).is_ok()) ++t.py_both_error;
        else py_lenient.push_back(name + "/" + c["name"].get<std::string>() + " (" +
                                  c["python_error"].get<std::string>() + ")");
      }
      std::string case_name = name + "/" + c["name"].get<std::string>();
      if (!tpl.is_ok()) {
        failures.push_back(case_name + ": parse error: " + tpl.status().message());
        all_ok = false;
        continue;
      }
      auto out = tpl->render(c["context"]);
      if (c.contains("error")) {
        ++t.ref_errors;
        if (!out.is_ok()) ++t.both_error;
        continue;  // the reference failed; Python jinja2 may still render it
      }
      const std::string want = c["output"].get<std::string>();
      if (!out.is_ok()) {
        failures.push_back(case_name + ": error: " + out.status().message());
        all_ok = false;
        continue;
      }
      if (*out == want) {
        ++t.identical;
      } else {
        size_t i = 0;
        while (i < want.size() && i < out->size() && want[i] == (*out)[i]) ++i;
        failures.push_back(case_name + ": differs at byte " + std::to_string(i) + ": want ..." +
                           excerpt(want, i) + "... got ..." + excerpt(*out, i) + "...");
        all_ok = false;
      }
      auto py = py_tpl->render(c["context"]);
      if (py.is_ok() && *py == want) ++t.python_identical;
    }
    if (all_ok) ++t.identical_templates;
  }
  std::printf("[templates] %d/%d templates identical to @huggingface/jinja on every case\n", t.identical_templates,
              t.templates);
  std::printf("[templates] %d/%d rendered cases identical (%d also identical with Python repr); %d cases where the "
              "reference itself errors (%d of them also error here)\n",
              t.identical, t.cases - t.ref_errors, t.python_identical, t.ref_errors, t.both_error);
  std::printf("[templates] Python jinja2 (transformers setup): %d/%d cases identical; %d cases where jinja2 errors "
              "(%d of them also error here)\n",
              t.py_identical, t.py_cases, t.py_errors, t.py_both_error);
  for (const auto& f : py_lenient) std::printf("[templates]   renders where Python jinja2 errors: %s\n", f.c_str());
  for (const auto& f : failures) ADD_FAILURE() << f;
  for (const auto& f : py_failures) ADD_FAILURE() << f;
}

}  // namespace
