// The continuous-batching scheduler (vLLM v1 style): schedule() builds one
// step's plan, the caller runs the backend and samples, update_from_output()
// advances the sequences. There are no separate prefill and decode phases: a
// sequence has tokens [0, num_computed) in the KV cache and computes the rest,
// one token when decoding, a chunk when prefilling.
//
// A step: first the running sequences in admission order (decode rows take one
// token each; prefilling ones take chunks out of a shared budget of
// prefill_chunk tokens), then waiting sequences are admitted (FCFS, prefix
// cache consulted) while rows < max_batch and budget remains. So a long prompt
// delays the running decodes by at most one chunk per step.
//
// Preemption (recompute): when a running sequence cannot get blocks, the most
// recently admitted running sequence is the victim: its blocks are freed and
// it goes back to the FRONT of the waiting queue with all its tokens (prompt +
// generated) to recompute; nothing sampled is lost, and since sampling is
// per-sequence and counter-based its output is unchanged. The earliest-
// admitted sequence is never a victim of a later one, and add() rejects a
// sequence that cannot fit the cache alone, so the scheduler never deadlocks.
//
// n > 1: the siblings of a choice wait (not admitted) until the first
// choice's prompt is in the cache, then hit its prefix blocks.
//
// Not thread-safe: owned by the engine loop thread.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "engine/backend.h"
#include "engine/request.h"
#include "kv/kv_cache_manager.h"

namespace ms {

struct SchedulerOptions {
  int max_batch = 8;        // sequences per step, 1..8
  int prefill_chunk = 512;  // prefill tokens per step, over all sequences
};

struct SequenceSpec {
  int64_t seq_id = 0;
  std::vector<int32_t> prompt;
  int max_tokens = 16;
  std::vector<int32_t> stop_ids;  // eos ids (unless ignore_eos) and stop_token_ids
  int64_t wait_for = -1;          // sibling whose prompt must be cached first (n > 1), or -1
};

struct Sequence {
  int64_t id = 0;
  std::vector<int32_t> tokens;  // prompt, then generated tokens
  int prompt_len = 0;
  int max_tokens = 0;
  std::vector<int32_t> stop_ids;
  int num_computed = 0;         // tokens whose KV is in the cache
  int cached_prompt_tokens = 0; // prefix-cache hit at first admission
  bool admitted_once = false;
  int preemptions = 0;
  uint64_t admit_order = 0;     // larger = admitted later (victim policy)

  int num_output() const { return static_cast<int>(tokens.size()) - prompt_len; }
};

struct StepPlan {
  std::vector<SeqWork> work;          // the backend batch, <= max_batch rows
  std::vector<int64_t> preempted;     // sequences preempted while planning
  // Sequences that cannot run (internal inconsistency); already removed.
  std::vector<std::pair<int64_t, Status>> failed;
  bool empty() const { return work.empty(); }
};

struct SeqUpdate {
  int64_t seq_id = 0;
  int32_t token = 0;                  // the token sampled this step
  FinishReason finish = FinishReason::kNone;
};

struct SchedulerStats {
  int running = 0, waiting = 0;
  uint64_t preemptions = 0;
  uint64_t prefix_query_tokens = 0, prefix_hit_tokens = 0;
};

class Scheduler {
 public:
  Scheduler(const KvSpec& spec, const SchedulerOptions& opt, bool prefix_caching, uint64_t cache_salt);

  // Queues a sequence. Fails (InvalidArgument / ResourceExhausted) if it is
  // malformed or could not fit the KV cache even alone.
  Status add(SequenceSpec spec);
  // Removes a sequence wherever it is and frees its blocks at once.
  void abort(int64_t seq_id);

  StepPlan schedule();
  // sampled[i]: the token for plan.work[i] when it had need_logits.
  // Returns one update per sampled token; finished sequences are removed.
  std::vector<SeqUpdate> update_from_output(const StepPlan& plan, const std::vector<int32_t>& sampled);

  bool has(int64_t seq_id) const { return seqs_.count(seq_id) > 0; }
  const Sequence& sequence(int64_t seq_id) const { return seqs_.at(seq_id); }
  bool idle() const { return seqs_.empty(); }
  SchedulerStats stats() const;
  const KvCacheManager& kv() const { return kv_; }
  const std::vector<int64_t>& running() const { return running_; }
  const std::deque<int64_t>& waiting() const { return waiting_; }
  // KV invariants plus: every sequence is in exactly one of running /
  // waiting / pending, running ones hold KV, waiting ones hold none.
  Status check_invariants() const;

 private:
  void preempt(int64_t seq_id);
  void release_siblings(int64_t leader);
  SeqWork make_work(const Sequence& s, int n) const;
  void remove(int64_t seq_id);

  SchedulerOptions opt_;
  KvCacheManager kv_;
  std::unordered_map<int64_t, Sequence> seqs_;
  std::vector<int64_t> running_;  // admission order
  std::deque<int64_t> waiting_;   // front = next to admit
  std::unordered_map<int64_t, std::vector<int64_t>> pending_;  // leader -> siblings waiting for its prefix
  uint64_t next_admit_ = 0;
  SchedulerStats stats_;
};

// KV-manager groups of a backend's KvSpec.
KvCacheConfig kv_cache_config(const KvSpec& spec, bool prefix_caching, uint64_t salt);

}  // namespace ms
