// The KV-cache manager: which physical blocks back each sequence, per KV
// group (one BlockPool per group), plus prefix caching across sequences.
//
// Block tables: table[g][b] is the physical block of logical block b (token
// positions [b*bs, (b+1)*bs)) in group g. Sliding-window groups set entries
// to -1 (and return the block to the pool) once no future step can read
// them: a step starting at position s reads positions >= s - window + 1.
//
// Prefix caching: every FULL block of a sequence's tokens gets a chained hash
// h_b = H(h_{b-1}, tokens of block b), with h_{-1} = the salt (which keys the
// model, block size and KV dtype: anything that changes the cached bytes).
// Blocks are registered in the pool's hash map once their KV is computed
// (commit()). A new sequence claims the longest cached prefix, capped so that
// at least its last token is recomputed (its logits are needed).
//
// Sliding-window policy for hits: k blocks are a hit when every full-
// attention group holds blocks 0..k-1 AND every sliding group holds the
// blocks the first recomputed token (position k*bs) can see, i.e. blocks
// first_live(k*bs)..k-1. Older sliding blocks are not needed (table -1).
//
// Running out of blocks: allocate() returns false and changes nothing; the
// scheduler then preempts. Not thread-safe: owned by the engine loop thread.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "kv/block_pool.h"

namespace ms {

struct KvGroupConfig {
  int window = 0;      // 0: full attention; else sliding window in tokens
  int num_blocks = 0;  // physical blocks of this group
};

struct KvCacheConfig {
  int block_size = 64;
  std::vector<KvGroupConfig> groups;
  bool prefix_caching = true;
  uint64_t salt = 0;  // see make_cache_salt
};

// Chained block hash: mixes the parent hash and the block's token ids.
uint64_t hash_block(uint64_t parent, std::span<const int32_t> tokens);
// Salt from a description of everything that changes cached KV bytes (model
// config, block size, KV dtype, backend).
uint64_t make_cache_salt(std::string_view identity);

// Whether one sequence of `total_tokens`, run in steps of at most `chunk`
// tokens, fits a cache of this layout when alone (else it could never run).
// ResourceExhausted with the numbers if not.
Status check_sequence_fits(const KvCacheConfig& cfg, int64_t total_tokens, int chunk);
// The longest sequence check_sequence_fits accepts (the same rule, solved for
// the length): full-attention groups hold num_blocks * block_size tokens, a
// sliding group either holds its window plus a chunk (no bound) or bounds it
// like a full group. INT64_MAX when no group bounds it.
int64_t max_sequence_tokens(const KvCacheConfig& cfg, int chunk);

class KvCacheManager {
 public:
  explicit KvCacheManager(KvCacheConfig cfg);

  int block_size() const { return cfg_.block_size; }
  int num_groups() const { return static_cast<int>(pools_.size()); }
  const KvCacheConfig& config() const { return cfg_; }
  const BlockPool& pool(int g) const { return pools_[g]; }
  int num_blocks_total() const;
  int num_blocks_used() const;
  int num_blocks_free() const;

  // First logical block a step starting at position `start` reads in group g.
  int first_live_block(int g, int64_t start) const;
  // Cached prefix a new sequence with these tokens would get, in tokens
  // (a multiple of the block size, < tokens.size()). No side effects.
  int find_cached_prefix(std::span<const int32_t> tokens) const;
  Status check_fits_alone(int64_t total_tokens, int chunk) const { return check_sequence_fits(cfg_, total_tokens, chunk); }

  // New sequence: claims its first `num_cached` tokens from the cache
  // (num_cached from find_cached_prefix in the current state) and allocates
  // blocks to cover positions [0, end). Returns false, changing nothing,
  // when blocks run short.
  bool admit(int64_t seq, std::span<const int32_t> tokens, int num_cached, int64_t end);
  // Existing sequence: covers positions [0, end) for a step starting at `start`.
  bool allocate(int64_t seq, int64_t start, int64_t end);
  // Positions [0, num_computed) now hold KV: registers newly full blocks in
  // the prefix cache (tokens = the sequence's tokens so far) and releases
  // sliding-window blocks no later step reads.
  void commit(int64_t seq, std::span<const int32_t> tokens, int64_t num_computed);
  // Releases all blocks of the sequence (tail blocks first, so that the
  // head of a cached prefix is evicted last).
  void free(int64_t seq);

  bool has(int64_t seq) const { return seqs_.count(seq) > 0; }
  const std::vector<std::vector<int32_t>>& block_tables(int64_t seq) const { return seqs_.at(seq).tables; }
  int num_sequences() const { return static_cast<int>(seqs_.size()); }

  // Every refcount equals the number of table entries pointing at the block;
  // pools are consistent; no block twice in one table.
  Status check_invariants() const;

 private:
  struct SeqKv {
    std::vector<std::vector<int32_t>> tables;  // [group][logical block] -> block id or -1
    std::vector<uint64_t> hashes;              // chained hashes of the full blocks seen so far
    std::vector<int> released;                 // [group] logical blocks below this are released
  };
  // Chained hashes of the first n full blocks of tokens.
  std::vector<uint64_t> chain_hashes(std::span<const int32_t> tokens, int n) const;
  bool grow(SeqKv& s, int64_t start, int64_t end, const std::vector<std::vector<int32_t>>* hits);

  KvCacheConfig cfg_;
  std::vector<BlockPool> pools_;
  std::unordered_map<int64_t, SeqKv> seqs_;
};

}  // namespace ms
