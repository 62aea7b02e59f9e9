#include "scheduler/scheduler.h"

#include <algorithm>
#include <string>

namespace ms {

KvCacheConfig kv_cache_config(const KvSpec& spec, bool prefix_caching, uint64_t salt) {
  KvCacheConfig c;
  c.block_size = spec.block_size;
  c.prefix_caching = prefix_caching;
  c.salt = salt;
  for (const auto& g : spec.groups) c.groups.push_back({g.window, g.num_blocks});
  return c;
}

Scheduler::Scheduler(const KvSpec& spec, const SchedulerOptions& opt, bool prefix_caching, uint64_t cache_salt)
    : opt_(opt), kv_(kv_cache_config(spec, prefix_caching, cache_salt)) {
  opt_.max_batch = std::max(1, opt_.max_batch);
  opt_.prefill_chunk = std::max(1, opt_.prefill_chunk);
}

Status Scheduler::add(SequenceSpec spec) {
  if (seqs_.count(spec.seq_id)) return invalid_argument("duplicate sequence id " + std::to_string(spec.seq_id));
  if (spec.prompt.empty()) return invalid_argument("empty prompt");
  if (spec.max_tokens < 1) return invalid_argument("max_tokens must be >= 1");
  int64_t total = int64_t(spec.prompt.size()) + spec.max_tokens;
  MS_RETURN_IF_ERROR(kv_.check_fits_alone(total, opt_.prefill_chunk));
  Sequence s;
  s.id = spec.seq_id;
  s.prompt_len = static_cast<int>(spec.prompt.size());
  s.tokens = std::move(spec.prompt);
  s.max_tokens = spec.max_tokens;
  s.stop_ids = std::move(spec.stop_ids);
  seqs_.emplace(s.id, std::move(s));
  if (spec.wait_for >= 0 && seqs_.count(spec.wait_for) &&
      seqs_.at(spec.wait_for).num_computed < seqs_.at(spec.wait_for).prompt_len) {
    pending_[spec.wait_for].push_back(spec.seq_id);
  } else {
    waiting_.push_back(spec.seq_id);
  }
  return Status::ok();
}

void Scheduler::release_siblings(int64_t leader) {
  auto it = pending_.find(leader);
  if (it == pending_.end()) return;
  // To the front, in their original order: they belong to an admitted request.
  for (auto s = it->second.rbegin(); s != it->second.rend(); ++s) waiting_.push_front(*s);
  pending_.erase(it);
}

void Scheduler::remove(int64_t seq_id) {
  kv_.free(seq_id);
  running_.erase(std::remove(running_.begin(), running_.end(), seq_id), running_.end());
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), seq_id), waiting_.end());
  for (auto& [leader, sibs] : pending_) sibs.erase(std::remove(sibs.begin(), sibs.end(), seq_id), sibs.end());
  release_siblings(seq_id);
  seqs_.erase(seq_id);
}

void Scheduler::abort(int64_t seq_id) {
  if (seqs_.count(seq_id)) remove(seq_id);
}

void Scheduler::preempt(int64_t seq_id) {
  Sequence& s = seqs_.at(seq_id);
  kv_.free(seq_id);
  s.num_computed = 0;
  ++s.preemptions;
  ++stats_.preemptions;
  running_.erase(std::remove(running_.begin(), running_.end(), seq_id), running_.end());
  waiting_.push_front(seq_id);
}

SeqWork Scheduler::make_work(const Sequence& s, int n) const {
  SeqWork w;
  w.seq_id = s.id;
  w.start_pos = s.num_computed;
  w.tokens.assign(s.tokens.begin() + s.num_computed, s.tokens.begin() + s.num_computed + n);
  w.block_tables = kv_.block_tables(s.id);
  w.need_logits = s.num_computed + n == static_cast<int>(s.tokens.size());
  return w;
}

StepPlan Scheduler::schedule() {
  StepPlan plan;
  int budget = opt_.prefill_chunk;
  // Work is built after the loop: a later preemption never touches an
  // earlier-scheduled sequence (victims are the most recently admitted).
  std::vector<std::pair<int64_t, int>> picked;
  for (size_t i = 0; i < running_.size();) {
    Sequence& s = seqs_.at(running_[i]);
    int remaining = static_cast<int>(s.tokens.size()) - s.num_computed;
    int n = remaining == 1 ? 1 : std::min(remaining, budget);
    if (n == 0) {
      ++i;
      continue;
    }
    bool self_preempted = false;
    while (!kv_.allocate(s.id, s.num_computed, int64_t(s.num_computed) + n)) {
      int64_t victim = running_.back();
      if (victim == s.id && running_.size() == 1) {
        // Cannot happen when add() checked the fit; fail rather than loop.
        plan.failed.emplace_back(s.id, internal_error("sequence " + std::to_string(s.id) +
                                                      " does not fit the KV cache alone"));
        remove(s.id);
        self_preempted = true;
        break;
      }
      preempt(victim);
      plan.preempted.push_back(victim);
      if (victim == s.id) {
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) break;  // s was the last running sequence
    if (remaining > 1) budget -= n;
    picked.emplace_back(s.id, n);
    ++i;
  }
  // Admit waiting sequences (not in a step that had to preempt).
  while (plan.preempted.empty() && !waiting_.empty() && static_cast<int>(running_.size()) < opt_.max_batch &&
         budget > 0) {
    Sequence& s = seqs_.at(waiting_.front());
    int cached = kv_.find_cached_prefix(s.tokens);
    int n = std::min(static_cast<int>(s.tokens.size()) - cached, budget);
    if (!kv_.admit(s.id, s.tokens, cached, int64_t(cached) + n)) break;
    waiting_.pop_front();
    stats_.prefix_query_tokens += s.tokens.size();
    stats_.prefix_hit_tokens += cached;
    if (!s.admitted_once) s.cached_prompt_tokens = std::min(cached, s.prompt_len);
    s.admitted_once = true;
    s.num_computed = cached;
    s.admit_order = next_admit_++;
    running_.push_back(s.id);
    budget -= n;
    picked.emplace_back(s.id, n);
  }
  for (const auto& [id, n] : picked) plan.work.push_back(make_work(seqs_.at(id), n));
  return plan;
}

std::vector<SeqUpdate> Scheduler::update_from_output(const StepPlan& plan, const std::vector<int32_t>& sampled) {
  std::vector<SeqUpdate> out;
  for (size_t i = 0; i < plan.work.size(); ++i) {
    const SeqWork& w = plan.work[i];
    auto it = seqs_.find(w.seq_id);
    if (it == seqs_.end()) continue;  // aborted since schedule()
    Sequence& s = it->second;
    if (s.num_computed != w.start_pos || !kv_.has(s.id)) continue;  // preempted since (not expected)
    s.num_computed += static_cast<int>(w.tokens.size());
    kv_.commit(s.id, s.tokens, s.num_computed);
    if (s.num_computed >= s.prompt_len) release_siblings(s.id);
    if (!w.need_logits) continue;
    int32_t tok = i < sampled.size() ? sampled[i] : 0;
    s.tokens.push_back(tok);
    SeqUpdate u{s.id, tok, FinishReason::kNone};
    if (std::find(s.stop_ids.begin(), s.stop_ids.end(), tok) != s.stop_ids.end())
      u.finish = FinishReason::kStop;
    else if (s.num_output() >= s.max_tokens)
      u.finish = FinishReason::kLength;
    out.push_back(u);
    if (u.finish != FinishReason::kNone) remove(s.id);
  }
  return out;
}

SchedulerStats Scheduler::stats() const {
  SchedulerStats st = stats_;
  st.running = static_cast<int>(running_.size());
  st.waiting = static_cast<int>(seqs_.size() - running_.size());
  return st;
}

Status Scheduler::check_invariants() const {
  MS_RETURN_IF_ERROR(kv_.check_invariants());
  std::unordered_map<int64_t, int> where;
  for (int64_t id : running_) {
    ++where[id];
    if (!kv_.has(id)) return internal_error("running sequence " + std::to_string(id) + " holds no KV");
  }
  for (int64_t id : waiting_) {
    ++where[id];
    if (kv_.has(id)) return internal_error("waiting sequence " + std::to_string(id) + " holds KV");
  }
  for (const auto& [leader, sibs] : pending_)
    for (int64_t id : sibs) ++where[id];
  if (where.size() != seqs_.size() || kv_.num_sequences() != static_cast<int>(running_.size()))
    return internal_error("sequence bookkeeping out of sync");
  for (const auto& [id, n] : where) {
    if (n != 1) return internal_error("sequence " + std::to_string(id) + " queued " + std::to_string(n) + " times");
    if (!seqs_.count(id)) return internal_error("unknown sequence " + std::to_string(id) + " queued");
  }
  if (static_cast<int>(running_.size()) > opt_.max_batch) return internal_error("more running than max_batch");
  return Status::ok();
}

}  // namespace ms
