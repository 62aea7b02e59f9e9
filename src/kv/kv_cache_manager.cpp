#include "kv/kv_cache_manager.h"

#include <algorithm>
#include <string>

#include "core/int_math.h"

namespace ms {
namespace {

// splitmix64 finalizer: a full-avalanche 64-bit mix.
uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t hash_block(uint64_t parent, std::span<const int32_t> tokens) {
  uint64_t h = mix64(parent ^ 0x6b76626c6f636bull);  // "kvblock"
  for (int32_t t : tokens) h = mix64(h ^ static_cast<uint32_t>(t));
  return mix64(h ^ tokens.size());
}

uint64_t make_cache_salt(std::string_view identity) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a, then a final mix
  for (unsigned char c : identity) h = (h ^ c) * 0x100000001b3ull;
  return mix64(h);
}

KvCacheManager::KvCacheManager(KvCacheConfig cfg) : cfg_(std::move(cfg)) {
  for (const auto& g : cfg_.groups) pools_.emplace_back(g.num_blocks);
}

int KvCacheManager::num_blocks_total() const {
  int n = 0;
  for (const auto& p : pools_) n += p.num_blocks();
  return n;
}
int KvCacheManager::num_blocks_used() const {
  int n = 0;
  for (const auto& p : pools_) n += p.num_used();
  return n;
}
int KvCacheManager::num_blocks_free() const {
  int n = 0;
  for (const auto& p : pools_) n += p.num_free();
  return n;
}

int KvCacheManager::first_live_block(int g, int64_t start) const {
  int window = cfg_.groups[g].window;
  if (window <= 0) return 0;
  return static_cast<int>(std::max<int64_t>(0, start - window + 1) / cfg_.block_size);
}

std::vector<uint64_t> KvCacheManager::chain_hashes(std::span<const int32_t> tokens, int n) const {
  std::vector<uint64_t> h(n);
  uint64_t parent = cfg_.salt;
  for (int b = 0; b < n; ++b) {
    h[b] = hash_block(parent, tokens.subspan(size_t(b) * cfg_.block_size, cfg_.block_size));
    parent = h[b];
  }
  return h;
}

int KvCacheManager::find_cached_prefix(std::span<const int32_t> tokens) const {
  if (!cfg_.prefix_caching || tokens.size() < 2) return 0;
  const int bs = cfg_.block_size;
  const int max_blocks = static_cast<int>((tokens.size() - 1) / bs);
  std::vector<uint64_t> h = chain_hashes(tokens, max_blocks);
  auto present = [&](int g, int b) {
    uint64_t parent = b == 0 ? cfg_.salt : h[b - 1];
    return pools_[g].lookup(h[b], parent, tokens.subspan(size_t(b) * bs, bs)).has_value();
  };
  // Full-attention groups: the hit is a contiguous run from block 0.
  int m = max_blocks;
  for (int g = 0; g < num_groups(); ++g) {
    if (cfg_.groups[g].window > 0) continue;
    int k = 0;
    while (k < m && present(g, k)) ++k;
    m = k;
  }
  // Sliding groups: the blocks visible from position k*bs must be present.
  for (int k = m; k > 0; --k) {
    bool ok = true;
    for (int g = 0; g < num_groups() && ok; ++g) {
      if (cfg_.groups[g].window <= 0) continue;
      for (int b = first_live_block(g, int64_t(k) * bs); b < k && ok; ++b) ok = present(g, b);
    }
    if (ok) return k * bs;
  }
  return 0;
}

Status check_sequence_fits(const KvCacheConfig& cfg, int64_t total_tokens, int chunk) {
  const int bs = cfg.block_size;
  chunk = std::max(chunk, 1);
  for (size_t g = 0; g < cfg.groups.size(); ++g) {
    int64_t need = ceil_div(total_tokens, bs);
    int window = cfg.groups[g].window;
    if (window > 0) need = std::min<int64_t>(need, ceil_div(window - 1 + chunk, bs) + 1);
    if (need > cfg.groups[g].num_blocks)
      return resource_exhausted("a sequence of " + std::to_string(total_tokens) + " tokens needs " +
                                std::to_string(need) + " KV blocks in group " + std::to_string(g) +
                                ", the cache has " + std::to_string(cfg.groups[g].num_blocks));
  }
  return Status::ok();
}

int64_t max_sequence_tokens(const KvCacheConfig& cfg, int chunk) {
  const int bs = cfg.block_size;
  chunk = std::max(chunk, 1);
  int64_t most = INT64_MAX;
  for (const KvGroupConfig& g : cfg.groups) {
    const bool window_fits = g.window > 0 && ceil_div(g.window - 1 + chunk, bs) + 1 <= g.num_blocks;
    if (!window_fits) most = std::min<int64_t>(most, int64_t(g.num_blocks) * bs);
  }
  return most;
}

bool KvCacheManager::grow(SeqKv& s, int64_t start, int64_t end, const std::vector<std::vector<int32_t>>* hits) {
  const int64_t need = ceil_div(end, cfg_.block_size);
  // Count first: fail without side effects.
  for (int g = 0; g < num_groups(); ++g) {
    int64_t have = hits ? static_cast<int64_t>((*hits)[g].size()) : static_cast<int64_t>(s.tables[g].size());
    int64_t lo = std::max<int64_t>(have, first_live_block(g, start));
    int64_t wanted = std::max<int64_t>(0, need - lo);
    if (hits)
      for (int32_t id : (*hits)[g])
        if (id >= 0 && pools_[g].ref_count(id) == 0) ++wanted;  // leaves the free queue
    if (wanted > pools_[g].num_free()) return false;
  }
  for (int g = 0; g < num_groups(); ++g) {
    auto& t = s.tables[g];
    if (hits) {
      for (int32_t id : (*hits)[g]) {
        if (id >= 0) pools_[g].touch(id);
        t.push_back(id);
      }
    }
    const int live = first_live_block(g, start);
    while (static_cast<int64_t>(t.size()) < need) {
      if (static_cast<int>(t.size()) < live) {
        t.push_back(-1);
      } else {
        t.push_back(*pools_[g].allocate());
      }
    }
    if (s.released[g] < live) {
      for (int b = s.released[g]; b < live && b < static_cast<int>(t.size()); ++b) {
        if (t[b] >= 0) pools_[g].release(t[b]);
        t[b] = -1;
      }
      s.released[g] = live;
    }
  }
  return true;
}

bool KvCacheManager::admit(int64_t seq, std::span<const int32_t> tokens, int num_cached, int64_t end) {
  assert(!has(seq));
  const int bs = cfg_.block_size;
  const int k = num_cached / bs;
  SeqKv s;
  s.tables.assign(num_groups(), {});
  s.released.assign(num_groups(), 0);
  s.hashes = chain_hashes(tokens, k);
  std::vector<std::vector<int32_t>> hits(num_groups());
  for (int g = 0; g < num_groups(); ++g) {
    const int live = first_live_block(g, num_cached);
    for (int b = 0; b < k; ++b) {
      if (b < live) {
        hits[g].push_back(-1);
        continue;
      }
      uint64_t parent = b == 0 ? cfg_.salt : s.hashes[b - 1];
      auto id = pools_[g].lookup(s.hashes[b], parent, tokens.subspan(size_t(b) * bs, bs));
      if (!id) return false;  // caller did not use find_cached_prefix's answer
      hits[g].push_back(*id);
    }
  }
  if (!grow(s, num_cached, end, &hits)) return false;
  for (int g = 0; g < num_groups(); ++g) s.released[g] = first_live_block(g, num_cached);
  seqs_.emplace(seq, std::move(s));
  return true;
}

bool KvCacheManager::allocate(int64_t seq, int64_t start, int64_t end) {
  return grow(seqs_.at(seq), start, end, nullptr);
}

void KvCacheManager::commit(int64_t seq, std::span<const int32_t> tokens, int64_t num_computed) {
  SeqKv& s = seqs_.at(seq);
  const int bs = cfg_.block_size;
  if (cfg_.prefix_caching) {
    const int64_t full = std::min<int64_t>(num_computed, static_cast<int64_t>(tokens.size())) / bs;
    while (static_cast<int64_t>(s.hashes.size()) < full) {
      size_t b = s.hashes.size();
      uint64_t parent = b == 0 ? cfg_.salt : s.hashes[b - 1];
      auto blk = tokens.subspan(b * bs, bs);
      uint64_t h = hash_block(parent, blk);
      s.hashes.push_back(h);
      for (int g = 0; g < num_groups(); ++g) {
        if (b >= s.tables[g].size() || s.tables[g][b] < 0) continue;
        pools_[g].cache(s.tables[g][b], BlockKey{h, parent, std::vector<int32_t>(blk.begin(), blk.end())});
      }
    }
  }
  for (int g = 0; g < num_groups(); ++g) {
    const int live = first_live_block(g, num_computed);
    auto& t = s.tables[g];
    for (int b = s.released[g]; b < live && b < static_cast<int>(t.size()); ++b) {
      if (t[b] >= 0) pools_[g].release(t[b]);
      t[b] = -1;
    }
    s.released[g] = std::max(s.released[g], live);
  }
}

void KvCacheManager::free(int64_t seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  for (int g = 0; g < num_groups(); ++g) {
    const auto& t = it->second.tables[g];
    for (auto b = t.rbegin(); b != t.rend(); ++b)
      if (*b >= 0) pools_[g].release(*b);
  }
  seqs_.erase(it);
}

Status KvCacheManager::check_invariants() const {
  for (int g = 0; g < num_groups(); ++g) {
    MS_RETURN_IF_ERROR(pools_[g].check_invariants().with_context("group " + std::to_string(g)));
    std::vector<int> refs(pools_[g].num_blocks(), 0);
    for (const auto& [id, s] : seqs_) {
      std::vector<bool> mine(pools_[g].num_blocks(), false);
      for (int32_t b : s.tables[g]) {
        if (b < 0) continue;
        if (b >= pools_[g].num_blocks()) return internal_error("block id out of range in sequence " + std::to_string(id));
        if (mine[b]) return internal_error("block " + std::to_string(b) + " twice in sequence " + std::to_string(id));
        mine[b] = true;
        ++refs[b];
      }
    }
    for (int b = 0; b < pools_[g].num_blocks(); ++b)
      if (refs[b] != pools_[g].ref_count(b))
        return internal_error("group " + std::to_string(g) + " block " + std::to_string(b) + ": refcount " +
                              std::to_string(pools_[g].ref_count(b)) + ", referenced by " + std::to_string(refs[b]));
  }
  return Status::ok();
}

}  // namespace ms
