#include "model/model_loader.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/json_parse.h"
#include "model/weight_check.h"

#include "core/byte_progress.h"

namespace ms {

Result<ModelConfig> load_model_config(const std::string& dir) {
  MS_ASSIGN_OR_RETURN(ModelConfig cfg, ModelConfig::from_file(dir + "/config.json"));
  std::string gen = dir + "/generation_config.json";
  if (std::filesystem::exists(gen)) {
    MS_ASSIGN_OR_RETURN(const nlohmann::json j, read_json_file(gen));
    if (j.is_object() && j.contains("eos_token_id")) {
      const auto& e = j["eos_token_id"];
      std::vector<int> ids;
      if (e.is_number_integer()) ids.push_back(e.get<int>());
      else if (e.is_array())
        for (auto& x : e)
          if (x.is_number_integer()) ids.push_back(x.get<int>());
      for (int id : ids)
        if (std::find(cfg.eos_ids.begin(), cfg.eos_ids.end(), id) == cfg.eos_ids.end()) cfg.eos_ids.push_back(id);
    }
  }
  return cfg;
}

Result<std::unique_ptr<LoadedModel>> load_model(const std::string& dir,
                                                const std::function<void(const std::string&)>& progress) {
  auto m = std::make_unique<LoadedModel>();
  MS_ASSIGN_OR_RETURN(m->config, load_model_config(dir));
  MS_ASSIGN_OR_RETURN(m->checkpoint, Checkpoint::open(dir, progress));
  MS_ASSIGN_OR_RETURN(m->weights, bind_weights(m->config, *m->checkpoint));
  if (progress) progress("mapped " + format_gb(m->checkpoint->total_bytes()) + " of weights");
  FiniteCheckStats st;
  FiniteCheckProgress meter;
  meter.emit = progress;
  MS_RETURN_IF_ERROR(check_finite(*m->checkpoint, 0, &st, meter));
  if (progress) {
    char line[160];
    std::snprintf(line, sizeof(line), "weights are finite: %.2f GB checked in %.2f s (%.1f GB/s, %d threads)",
                  st.bytes / 1e9, st.seconds, st.seconds > 0 ? st.bytes / 1e9 / st.seconds : 0.0, st.threads);
    progress(line);
  }
  return m;
}

}  // namespace ms
