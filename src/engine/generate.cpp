#include "engine/generate.h"

#include <algorithm>

namespace ms {

int32_t argmax(const std::vector<float>& logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

Result<std::vector<int32_t>> generate_greedy(Backend& backend, const std::vector<int32_t>& prompt,
                                             const GenerateOptions& opt) {
  const KvSpec& kv = backend.kv_spec();
  const ModelConfig& cfg = backend.config();
  if (prompt.empty()) return invalid_argument("empty prompt");
  int64_t total = int64_t(prompt.size()) + opt.max_new_tokens;
  int64_t blocks = (total + kv.block_size - 1) / kv.block_size;
  for (const auto& g : kv.groups)
    if (blocks > g.num_blocks)
      return resource_exhausted("sequence of " + std::to_string(total) + " tokens needs " + std::to_string(blocks) +
                                " KV blocks, the cache has " + std::to_string(g.num_blocks));
  SeqWork w;
  w.seq_id = 0;
  w.block_tables.assign(kv.groups.size(), {});
  auto grow_tables = [&](int64_t end_pos) {
    int64_t need = (end_pos + kv.block_size - 1) / kv.block_size;
    for (size_t g = 0; g < kv.groups.size(); ++g) {
      auto& t = w.block_tables[g];
      while (static_cast<int64_t>(t.size()) < need) t.push_back(static_cast<int32_t>(t.size()));
      int window = kv.groups[g].window;
      if (window > 0) {
        // Blocks wholly before the oldest position the next token can see.
        int64_t first_live = std::max<int64_t>(0, w.start_pos - window + 1);
        for (int64_t b = 0; b < first_live / kv.block_size; ++b) t[b] = -1;
      }
    }
  };
  std::vector<int32_t> out;
  StepResult res;
  int64_t chunk = opt.prefill_chunk > 0 ? opt.prefill_chunk : static_cast<int64_t>(prompt.size());
  for (size_t p = 0; p < prompt.size(); p += chunk) {
    size_t e = std::min(prompt.size(), p + static_cast<size_t>(chunk));
    w.tokens.assign(prompt.begin() + p, prompt.begin() + e);
    w.start_pos = static_cast<int32_t>(p);
    w.need_logits = e == prompt.size();
    grow_tables(e);
    MS_RETURN_IF_ERROR(backend.step({w}, &res));
  }
  for (int step = 0; step < opt.max_new_tokens; ++step) {
    const std::vector<float>& logits = res.logits[0];
    if (opt.on_logits) opt.on_logits(step, logits);
    int32_t tok = argmax(logits);
    out.push_back(tok);
    if (opt.on_token && !opt.on_token(tok)) break;
    if (opt.stop_at_eos && std::find(cfg.eos_ids.begin(), cfg.eos_ids.end(), tok) != cfg.eos_ids.end()) break;
    if (step + 1 == opt.max_new_tokens) break;
    w.start_pos = static_cast<int32_t>(prompt.size() + out.size() - 1);
    w.tokens = {tok};
    w.need_logits = true;
    grow_tables(w.start_pos + 1);
    MS_RETURN_IF_ERROR(backend.step({w}, &res));
  }
  return out;
}

}  // namespace ms
