// Server-side defaults for the sampling fields a request leaves out, as vLLM
// does: the model's generation_config.json (HF's `temperature`, `top_p`,
// `top_k`, `min_p`, `repetition_penalty`) unless --generation-config none,
// then --override-generation-config JSON on top. A field the request sends
// (also an explicit value equal to OpenAI's default) always wins; `null` is
// absent. Without either source the defaults are OpenAI's (temperature 1,
// top_p 1, no top-k / min-p / repetition penalty).
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>
#include "core/status.h"
#include "sampling/sampling_params.h"

namespace ms::server {

struct GenerationDefaults {
  std::optional<float> temperature, top_p, min_p, repetition_penalty;
  std::optional<int> top_k;

  bool empty() const { return !temperature && !top_p && !min_p && !repetition_penalty && !top_k; }
  // Writes the set defaults into s (before the request's own fields are parsed).
  void apply(SamplingParams* s) const;
  // "temperature=0, top_k=20" (or "none") for the startup log.
  std::string describe() const;
};

// Reads the sampling keys of a generation config object (unknown keys are
// ignored, as HF's other generation settings are). `what` names the source
// in errors: a key of the wrong type or out of range is an error naming it.
Result<GenerationDefaults> parse_generation_defaults(const nlohmann::json& j, const std::string& what,
                                                     GenerationDefaults base = {});

// mode: "auto" (the model directory's generation_config.json, if present) or
// "none"; override_json: "" or a JSON object applied on top.
Result<GenerationDefaults> load_generation_defaults(const std::string& model_dir, const std::string& mode,
                                                    const std::string& override_json);

}  // namespace ms::server
