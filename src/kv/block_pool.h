// The physical KV blocks of one KV group: refcounts, a free queue in eviction
// order and the prefix-cache map (block hash -> block id).
//
// Free queue: blocks with refcount 0, front = next to be allocated. At start
// it holds 0..N-1 in order. A block whose refcount drops to 0 goes to the
// back, so cached blocks (those with a hash) are evicted least recently
// freed first (LRU). Allocating a cached block drops its hash from the map.
// A cache hit on a free block takes it out of the queue (refcount 0 -> 1).
//
// Cache keys are verified exactly: a cached block stores its parent hash and
// token ids, and a lookup compares both, so a 64-bit hash collision between
// different token blocks can never return wrong KV.
//
// Not thread-safe: owned by the KvCacheManager, itself owned by the engine
// loop thread.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace ms {

// Identity of a full block of tokens: chained hash of (parent hash, tokens).
struct BlockKey {
  uint64_t hash = 0;
  uint64_t parent = 0;
  std::vector<int32_t> tokens;
};

class BlockPool {
 public:
  explicit BlockPool(int num_blocks);

  int num_blocks() const { return static_cast<int>(ref_.size()); }
  // Blocks with refcount 0 (never used, or cached and evictable).
  int num_free() const { return num_free_; }
  int num_used() const { return num_blocks() - num_free_; }
  int num_cached() const { return static_cast<int>(by_hash_.size()); }
  int ref_count(int32_t id) const { return ref_[id]; }
  bool is_cached(int32_t id) const { return keys_[id].has_value(); }

  // Takes the block at the front of the free queue (refcount 0 -> 1),
  // evicting its cache entry. nullopt when no block is free.
  std::optional<int32_t> allocate();
  // Adds a reference to a block (a prefix-cache hit); a free block leaves the queue.
  void touch(int32_t id);
  // Drops a reference; at 0 the block goes to the back of the free queue
  // (its cache entry stays until the block is reallocated).
  void release(int32_t id);

  // The cached block holding exactly this key, if any.
  std::optional<int32_t> lookup(uint64_t hash, uint64_t parent, std::span<const int32_t> tokens) const;
  // Records that block `id` (in use) holds `key`. No-op when the block is
  // already cached or another block already holds this hash (duplicates stay
  // uncached and are simply freed later).
  void cache(int32_t id, BlockKey key);

  // Free queue, front first (tests assert eviction order).
  std::vector<int32_t> free_queue() const;
  // Checks refcounts against the free queue and the hash map.
  Status check_invariants() const;

 private:
  void queue_remove(int32_t id);
  void queue_push_back(int32_t id);

  std::vector<int> ref_;                       // (num_blocks) refcount per block
  std::vector<std::optional<BlockKey>> keys_;  // (num_blocks) cache key of cached blocks
  std::unordered_map<uint64_t, int32_t> by_hash_;
  // Intrusive doubly linked free queue; -1 = none. in_queue_ mirrors membership.
  std::vector<int32_t> prev_, next_;
  std::vector<bool> in_queue_;
  int32_t head_ = -1, tail_ = -1;
  int num_free_ = 0;
};

}  // namespace ms
