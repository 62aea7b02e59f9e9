#include "engine/backend.h"

#include <algorithm>

namespace ms {

KvSpec make_kv_spec(const ModelConfig& cfg, int block_size, size_t kv_bytes_budget, size_t bytes_per_elem) {
  KvSpec spec;
  spec.block_size = block_size;
  spec.layer_group.assign(cfg.n_layers, -1);
  int full = -1, sliding = -1;
  for (int i = 0; i < cfg.n_layers; ++i) {
    int& g = cfg.layers[i].sliding ? sliding : full;
    if (g < 0) {
      g = static_cast<int>(spec.groups.size());
      spec.groups.push_back({});
      spec.groups.back().window = cfg.layers[i].sliding ? cfg.sliding_window : 0;
    }
    spec.groups[g].layers.push_back(i);
    spec.layer_group[i] = g;
  }
  // K and V, all kv heads, per layer of the group.
  size_t per_layer = size_t(2) * cfg.n_kv_heads * cfg.head_dim * block_size * bytes_per_elem;
  size_t total_layers = cfg.n_layers;
  for (auto& g : spec.groups) {
    g.bytes_per_block = per_layer * g.layers.size();
    // Budget split in proportion to the layers of each group.
    size_t share = kv_bytes_budget / total_layers * g.layers.size();
    g.num_blocks = static_cast<int>(std::max<size_t>(1, share / g.bytes_per_block));
  }
  return spec;
}

KvSpec make_kv_spec_blocks(const ModelConfig& cfg, int block_size, const std::vector<int>& blocks,
                           size_t bytes_per_elem) {
  KvSpec spec = make_kv_spec(cfg, block_size, 0, bytes_per_elem);
  for (size_t g = 0; g < spec.groups.size(); ++g)
    spec.groups[g].num_blocks = g < blocks.size() ? std::max(1, blocks[g]) : 1;
  return spec;
}

Status validate_batch(const KvSpec& spec, const ModelConfig& cfg, const std::vector<SeqWork>& batch) {
  for (const auto& w : batch) {
    std::string who = "sequence " + std::to_string(w.seq_id);
    if (w.tokens.empty()) return invalid_argument(who + ": no tokens in step");
    if (w.start_pos < 0) return invalid_argument(who + ": negative start position");
    for (int32_t t : w.tokens)
      if (t < 0 || t >= cfg.vocab_size)
        return invalid_argument(who + ": token id " + std::to_string(t) + " out of range [0, " +
                                std::to_string(cfg.vocab_size) + ")");
    if (w.block_tables.size() != spec.groups.size())
      return invalid_argument(who + ": expected " + std::to_string(spec.groups.size()) + " block tables");
    int64_t end = int64_t(w.start_pos) + int64_t(w.tokens.size());
    int64_t need = (end + spec.block_size - 1) / spec.block_size;
    for (size_t g = 0; g < spec.groups.size(); ++g) {
      const auto& table = w.block_tables[g];
      if (static_cast<int64_t>(table.size()) < need)
        return invalid_argument(who + ": block table of group " + std::to_string(g) + " covers " +
                                std::to_string(table.size()) + " blocks, needs " + std::to_string(need));
      int window = spec.groups[g].window;
      // Oldest position any new token attends to.
      int64_t first_live = window > 0 ? std::max<int64_t>(0, w.start_pos - window + 1) : 0;
      for (int64_t b = first_live / spec.block_size; b < need; ++b) {
        int32_t id = table[b];
        if (id < 0 || id >= spec.groups[g].num_blocks)
          return invalid_argument(who + ": block " + std::to_string(b) + " of group " + std::to_string(g) +
                                  " has invalid id " + std::to_string(id));
      }
    }
  }
  return Status::ok();
}

}  // namespace ms
