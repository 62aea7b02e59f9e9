#include "server/generation_defaults.h"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/json_parse.h"

namespace ms::server {

void GenerationDefaults::apply(SamplingParams* s) const {
  if (temperature) s->temperature = *temperature;
  if (top_p) s->top_p = *top_p;
  if (top_k) s->top_k = *top_k;
  if (min_p) s->min_p = *min_p;
  if (repetition_penalty) s->repetition_penalty = *repetition_penalty;
}

std::string GenerationDefaults::describe() const {
  std::ostringstream o;
  auto put = [&](const char* k, auto v) {
    if (!v) return;
    if (o.tellp() > 0) o << ", ";
    o << k << "=" << *v;
  };
  put("temperature", temperature);
  put("top_p", top_p);
  put("top_k", top_k);
  put("min_p", min_p);
  put("repetition_penalty", repetition_penalty);
  return o.tellp() > 0 ? o.str() : "none";
}

Result<GenerationDefaults> parse_generation_defaults(const nlohmann::json& j, const std::string& what,
                                                     GenerationDefaults base) {
  if (!j.is_object()) return invalid_argument(what + ": not a JSON object");
  // lo_open: the range excludes lo; range: how the error names it.
  auto number = [&](const char* key, double lo, double hi, bool lo_open, const char* range,
                    std::optional<float>* out) -> Status {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return Status::ok();
    if (!it->is_number()) return invalid_argument(what + ": '" + key + "' must be a number, got " + it->dump());
    const double v = it->get<double>();
    if (!(lo_open ? v > lo : v >= lo) || !(v <= hi))
      return invalid_argument(what + ": '" + key + "' = " + it->dump() + " is outside " + range);
    *out = static_cast<float>(v);
    return Status::ok();
  };
  GenerationDefaults d = base;
  MS_RETURN_IF_ERROR(number("temperature", 0, 2, false, "[0, 2]", &d.temperature));
  MS_RETURN_IF_ERROR(number("top_p", 0, 1, true, "(0, 1]", &d.top_p));
  MS_RETURN_IF_ERROR(number("min_p", 0, 1, false, "[0, 1]", &d.min_p));
  MS_RETURN_IF_ERROR(number("repetition_penalty", 0, 2, true, "(0, 2]", &d.repetition_penalty));
  if (auto it = j.find("top_k"); it != j.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<int64_t>() < -1 || it->get<int64_t>() > INT32_MAX)
      return invalid_argument(what + ": 'top_k' must be an integer >= -1, got " + it->dump());
    d.top_k = it->get<int64_t>() < 0 ? 0 : static_cast<int>(it->get<int64_t>());
  }
  return d;
}

Result<GenerationDefaults> load_generation_defaults(const std::string& model_dir, const std::string& mode,
                                                    const std::string& override_json) {
  GenerationDefaults d;
  if (mode == "auto") {
    const std::string path = model_dir + "/generation_config.json";
    if (std::filesystem::exists(path)) {
      MS_ASSIGN_OR_RETURN(const nlohmann::json j, read_json_file(path));
      MS_ASSIGN_OR_RETURN(d, parse_generation_defaults(j, path));
    }
  } else if (mode != "none") {
    return invalid_argument("--generation-config must be auto or none, got '" + mode + "'");
  }
  if (!override_json.empty()) {
    auto j = parse_json(override_json);
    if (!j.is_ok()) return invalid_argument("--override-generation-config: not valid JSON (" + j.status().message() + ")");
    MS_ASSIGN_OR_RETURN(d, parse_generation_defaults(*j, "--override-generation-config", d));
  }
  return d;
}

}  // namespace ms::server
