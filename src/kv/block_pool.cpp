#include "kv/block_pool.h"

#include <algorithm>
#include <string>

namespace ms {

BlockPool::BlockPool(int num_blocks)
    : ref_(num_blocks, 0), keys_(num_blocks), prev_(num_blocks, -1), next_(num_blocks, -1),
      in_queue_(num_blocks, false) {
  for (int32_t i = 0; i < num_blocks; ++i) queue_push_back(i);
}

void BlockPool::queue_remove(int32_t id) {
  int32_t p = prev_[id], n = next_[id];
  (p >= 0 ? next_[p] : head_) = n;
  (n >= 0 ? prev_[n] : tail_) = p;
  prev_[id] = next_[id] = -1;
  in_queue_[id] = false;
  --num_free_;
}

void BlockPool::queue_push_back(int32_t id) {
  prev_[id] = tail_;
  next_[id] = -1;
  (tail_ >= 0 ? next_[tail_] : head_) = id;
  tail_ = id;
  in_queue_[id] = true;
  ++num_free_;
}

std::optional<int32_t> BlockPool::allocate() {
  if (head_ < 0) return std::nullopt;
  int32_t id = head_;
  queue_remove(id);
  if (keys_[id]) {
    auto it = by_hash_.find(keys_[id]->hash);
    if (it != by_hash_.end() && it->second == id) by_hash_.erase(it);
    keys_[id].reset();
  }
  ref_[id] = 1;
  return id;
}

void BlockPool::touch(int32_t id) {
  if (ref_[id] == 0) queue_remove(id);
  ++ref_[id];
}

void BlockPool::release(int32_t id) {
  assert(ref_[id] > 0);
  if (--ref_[id] == 0) queue_push_back(id);
}

std::optional<int32_t> BlockPool::lookup(uint64_t hash, uint64_t parent, std::span<const int32_t> tokens) const {
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return std::nullopt;
  const BlockKey& k = *keys_[it->second];
  if (k.parent != parent || !std::equal(k.tokens.begin(), k.tokens.end(), tokens.begin(), tokens.end()))
    return std::nullopt;
  return it->second;
}

void BlockPool::cache(int32_t id, BlockKey key) {
  if (keys_[id] || by_hash_.count(key.hash)) return;
  by_hash_.emplace(key.hash, id);
  keys_[id] = std::move(key);
}

std::vector<int32_t> BlockPool::free_queue() const {
  std::vector<int32_t> out;
  for (int32_t id = head_; id >= 0; id = next_[id]) out.push_back(id);
  return out;
}

Status BlockPool::check_invariants() const {
  std::vector<int32_t> q = free_queue();
  if (static_cast<int>(q.size()) != num_free_)
    return internal_error("free queue has " + std::to_string(q.size()) + " blocks, counter says " +
                          std::to_string(num_free_));
  std::vector<bool> seen(ref_.size(), false);
  for (int32_t id : q) {
    if (seen[id]) return internal_error("block " + std::to_string(id) + " twice in the free queue");
    seen[id] = true;
    if (ref_[id] != 0) return internal_error("block " + std::to_string(id) + " free with refcount " +
                                             std::to_string(ref_[id]));
  }
  for (size_t id = 0; id < ref_.size(); ++id) {
    if (ref_[id] < 0) return internal_error("negative refcount on block " + std::to_string(id));
    if (ref_[id] == 0 && !seen[id]) return internal_error("block " + std::to_string(id) + " leaked");
    if (in_queue_[id] != seen[id]) return internal_error("queue flag wrong on block " + std::to_string(id));
  }
  for (const auto& [h, id] : by_hash_)
    if (!keys_[id] || keys_[id]->hash != h) return internal_error("hash map points at block " + std::to_string(id));
  return Status::ok();
}

}  // namespace ms
