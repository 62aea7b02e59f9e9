#include "scheduler/engine_impl.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>

#include "sampling/grammar_constraint.h"
#include "sampling/sampler.h"
#include "scheduler/scheduler.h"

namespace ms {
namespace {

class EngineImpl final : public Engine {
 public:
  EngineImpl(std::unique_ptr<Backend> backend, const EngineOptions& opt, int max_model_len, uint64_t salt,
             KvCapacity capacity)
      : backend_(std::move(backend)), opt_(opt), max_model_len_(max_model_len), capacity_(std::move(capacity)),
        sched_(backend_->kv_spec(), SchedulerOptions{opt.max_batch, opt.prefill_chunk}, opt.prefix_caching, salt),
        kv_cfg_(sched_.kv().config()), seed_rng_(std::random_device{}()) {
    stats_.kv_capacity = capacity_;
    publish_stats();
    thread_ = std::thread([this] { loop(); });
  }
  ~EngineImpl() override { shutdown(); }

  Status submit(Request req) override;
  EngineStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    EngineStats s = stats_;
    s.waiting += static_cast<int>(incoming_.size());
    return s;
  }
  const ModelConfig& config() const override { return backend_->config(); }
  int max_model_len() const override { return max_model_len_; }
  void shutdown() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    std::lock_guard<std::mutex> join_lock(join_mu_);
    if (thread_.joinable()) thread_.join();
  }

 private:
  // One request in flight (loop thread only).
  struct Active {
    Request req;
    uint64_t seed = 0;
    std::vector<int64_t> seq_ids;     // one per choice
    std::vector<int> completion;      // tokens per choice
    std::vector<bool> done;           // finished per choice
    int num_done = 0;
    std::vector<std::unique_ptr<GrammarConstraint>> constraints;  // per choice; empty: unconstrained
  };
  struct SeqRef {
    std::shared_ptr<Active> req;
    int choice = 0;
  };

  void loop();
  bool run_step();  // false when nothing could be scheduled
  void admit(Request req);
  void finish_choice(Active& a, int choice, FinishReason reason, Status error = Status::ok());
  void fail_all(const Status& st);
  void check_cancellations();
  void publish_stats();

  // Immutable after construction (read by any thread).
  std::unique_ptr<Backend> backend_;
  const EngineOptions opt_;
  const int max_model_len_;
  const KvCapacity capacity_;

  // Owned by the loop thread.
  Scheduler sched_;
  const KvCacheConfig kv_cfg_;  // copy: submit() checks fits without touching sched_
  std::mt19937_64 seed_rng_;
  int64_t next_seq_ = 0;
  std::unordered_map<int64_t, SeqRef> seqs_;
  std::vector<std::shared_ptr<Active>> active_;
  uint64_t prompt_tokens_ = 0, generation_tokens_ = 0, finished_ = 0;
  bool healthy_loop_ = true;
  std::string unhealthy_reason_loop_;

  // mu_ guards incoming_, stopping_ and stats_ (shared by submit(), stats()
  // and the loop thread); cv_ wakes the loop.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Request> incoming_;
  bool stopping_ = false;
  EngineStats stats_;
  std::mutex join_mu_;  // serialises shutdown() callers around join()
  std::thread thread_;
};

Status EngineImpl::submit(Request req) {
  const ModelConfig& cfg = backend_->config();
  if (req.prompt.empty()) return invalid_argument("prompt is empty");
  for (int32_t t : req.prompt)
    if (t < 0 || t >= cfg.vocab_size)
      return invalid_argument("prompt token id " + std::to_string(t) + " out of range [0, " +
                              std::to_string(cfg.vocab_size) + ")");
  for (int32_t t : req.stop_token_ids)
    if (t < 0 || t >= cfg.vocab_size)
      return invalid_argument("stop token id " + std::to_string(t) + " out of range [0, " +
                              std::to_string(cfg.vocab_size) + ")");
  if (req.n < 1 || req.n > kMaxChoices)
    return invalid_argument("n must be in [1, " + std::to_string(kMaxChoices) + "], got " + std::to_string(req.n));
  if (req.max_tokens < 1) return invalid_argument("max_tokens must be >= 1, got " + std::to_string(req.max_tokens));
  MS_RETURN_IF_ERROR(validate_sampling_params(req.sampling));
  if (req.sampling.grammar && req.sampling.grammar->vocab().size() > cfg.vocab_size)
    return invalid_argument("the grammar's vocabulary (" + std::to_string(req.sampling.grammar->vocab().size()) +
                            " tokens) is larger than the model's (" + std::to_string(cfg.vocab_size) + ")");
  if (!req.channel) return invalid_argument("request has no channel");
  int64_t total = int64_t(req.prompt.size()) + req.max_tokens;
  if (total > max_model_len_)
    return out_of_range("prompt (" + std::to_string(req.prompt.size()) + " tokens) + max_tokens (" +
                        std::to_string(req.max_tokens) + ") = " + std::to_string(total) +
                        " tokens exceeds the maximum context length of " + std::to_string(max_model_len_) +
                        " tokens" + (capacity_.bounds_context ? " (what the KV cache holds: " + describe(capacity_) + ")"
                                                           : std::string()));
  if (Status st = check_sequence_fits(kv_cfg_, total, opt_.prefill_chunk); !st.is_ok())
    return out_of_range("request does not fit the KV cache: " + st.message());
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return unavailable("engine is shutting down");
    if (!stats_.healthy) return unavailable("engine unhealthy: " + stats_.unhealthy_reason);
    if (static_cast<int>(incoming_.size()) + stats_.waiting >= opt_.max_waiting)
      return resource_exhausted("request queue full (" + std::to_string(opt_.max_waiting) + " waiting)");
    incoming_.push_back(std::move(req));
  }
  cv_.notify_all();
  return Status::ok();
}

void EngineImpl::admit(Request req) {
  auto a = std::make_shared<Active>();
  a->req = std::move(req);
  a->seed = a->req.sampling.seed ? *a->req.sampling.seed : seed_rng_();
  a->completion.assign(a->req.n, 0);
  a->done.assign(a->req.n, false);
  std::vector<int32_t> stop = a->req.stop_token_ids;
  if (!a->req.sampling.ignore_eos) {
    const auto& eos = backend_->config().eos_ids;
    stop.insert(stop.end(), eos.begin(), eos.end());
  }
  if (a->req.sampling.grammar)
    for (int c = 0; c < a->req.n; ++c)
      a->constraints.push_back(
          std::make_unique<GrammarConstraint>(a->req.sampling.grammar, stop, backend_->config().vocab_size));
  prompt_tokens_ += a->req.prompt.size();
  active_.push_back(a);
  for (int c = 0; c < a->req.n; ++c) {
    int64_t id = next_seq_++;
    a->seq_ids.push_back(id);
    SequenceSpec spec{id, a->req.prompt, a->req.max_tokens, stop, c == 0 ? -1 : a->seq_ids[0]};
    if (Status st = sched_.add(std::move(spec)); !st.is_ok()) {
      finish_choice(*a, c, FinishReason::kError, st);
      continue;
    }
    seqs_[id] = {a, c};
  }
}

void EngineImpl::finish_choice(Active& a, int choice, FinishReason reason, Status error) {
  if (a.done[choice]) return;
  int64_t id = a.seq_ids.size() > size_t(choice) ? a.seq_ids[choice] : -1;
  FinishEvent e;
  e.choice = choice;
  e.reason = reason;
  e.prompt_tokens = static_cast<int>(a.req.prompt.size());
  e.completion_tokens = a.completion[choice];
  if (id >= 0 && sched_.has(id)) {
    e.cached_prompt_tokens = sched_.sequence(id).cached_prompt_tokens;
    sched_.abort(id);
  } else if (id >= 0) {
    e.cached_prompt_tokens = 0;
  }
  e.error = std::move(error);
  seqs_.erase(id);
  a.done[choice] = true;
  if (++a.num_done == a.req.n) ++finished_;
  a.req.channel->push_finish(std::move(e));
}

void EngineImpl::fail_all(const Status& st) {
  for (auto& a : active_)
    for (int c = 0; c < a->req.n; ++c) finish_choice(*a, c, FinishReason::kError, st);
  active_.clear();
}

void EngineImpl::check_cancellations() {
  for (auto& a : active_)
    if (a->req.channel->cancelled())
      for (int c = 0; c < a->req.n; ++c) finish_choice(*a, c, FinishReason::kCancelled);
  std::erase_if(active_, [](const std::shared_ptr<Active>& a) { return a->num_done == a->req.n; });
}

void EngineImpl::publish_stats() {
  SchedulerStats ss = sched_.stats();
  const KvCacheManager& kv = sched_.kv();
  std::lock_guard<std::mutex> lock(mu_);
  stats_.running = ss.running;
  stats_.waiting = ss.waiting;
  stats_.kv_blocks_total = kv.num_blocks_total();
  stats_.kv_blocks_used = kv.num_blocks_used();
  stats_.kv_blocks_free = kv.num_blocks_free();
  stats_.prompt_tokens = prompt_tokens_;
  stats_.generation_tokens = generation_tokens_;
  stats_.prefix_cache_queries = ss.prefix_query_tokens;
  stats_.prefix_cache_hits = ss.prefix_hit_tokens;
  stats_.preemptions = ss.preemptions;
  stats_.requests_finished = finished_;
  stats_.healthy = healthy_loop_;
  stats_.unhealthy_reason = unhealthy_reason_loop_;
}

bool EngineImpl::run_step() {
  StepPlan plan = sched_.schedule();
  for (auto& [id, st] : plan.failed) {
    auto it = seqs_.find(id);
    if (it != seqs_.end()) finish_choice(*it->second.req, it->second.choice, FinishReason::kError, st);
  }
  if (plan.empty()) return !plan.failed.empty();
  // What each sequence needing a token samples with; the histories are
  // spans into the scheduler's sequences, unchanged until update_from_output.
  const int vocab = backend_->config().vocab_size;
  std::vector<SampleSpec> spec_store(plan.work.size());
  std::vector<int64_t> grammar_stuck;  // sequences whose grammar allows no token
  std::vector<const SampleSpec*> specs(plan.work.size(), nullptr);
  for (size_t i = 0; i < plan.work.size(); ++i) {
    const SeqWork& w = plan.work[i];
    if (!w.need_logits) continue;
    auto it = seqs_.find(w.seq_id);
    if (it == seqs_.end()) continue;
    const Sequence& s = sched_.sequence(w.seq_id);
    const Active& a = *it->second.req;
    SampleSpec& spec = spec_store[i];
    spec.params = a.req.sampling;
    spec.prompt = std::span<const int32_t>(s.tokens.data(), s.prompt_len);
    spec.output = std::span<const int32_t>(s.tokens.data() + s.prompt_len, s.tokens.size() - s.prompt_len);
    spec.seed = a.seed + static_cast<uint64_t>(it->second.choice);
    if (!a.constraints.empty()) {
      GrammarConstraint& gc = *a.constraints[it->second.choice];
      if (gc.compute_mask())
        spec.allowed = gc.mask();
      else
        grammar_stuck.push_back(w.seq_id);  // sampled unconstrained, then failed below
    }
    specs[i] = &spec;
  }
  // Device sampling when the backend offers it (only tokens and logprobs come
  // back); else the logits rows and the CPU sampler. Both give SampleResults.
  const bool on_device = backend_->supports_sampling();
  StepResult res;
  std::vector<SampleResult> device_samples;
  Status st = on_device ? backend_->step_sample(plan.work, specs, &device_samples) : backend_->step(plan.work, &res);
  if (st.is_ok() && on_device) {
    if (device_samples.size() != plan.work.size()) {
      st = internal_error("backend returned " + std::to_string(device_samples.size()) + " samples for " +
                          std::to_string(plan.work.size()) + " sequences");
    } else {
      for (size_t i = 0; i < plan.work.size(); ++i)
        if (specs[i] && (device_samples[i].token < 0 || device_samples[i].token >= vocab)) {
          st = internal_error("backend sampled token " + std::to_string(device_samples[i].token) +
                              " out of range for sequence " + std::to_string(plan.work[i].seq_id));
          break;
        }
    }
  } else if (st.is_ok()) {
    for (size_t i = 0; i < plan.work.size(); ++i)
      if (plan.work[i].need_logits && (i >= res.logits.size() || static_cast<int>(res.logits[i].size()) != vocab)) {
        st = internal_error("backend returned no logits row for sequence " + std::to_string(plan.work[i].seq_id));
        break;
      }
  }
  if (!st.is_ok()) {
    Status err = st.with_context(std::string("backend ") + backend_->name() + " step");
    if (st.code() == StatusCode::kInternal) {
      healthy_loop_ = false;
      unhealthy_reason_loop_ = err.message();
      fail_all(err);
      return true;
    }
    for (const auto& w : plan.work) {
      auto it = seqs_.find(w.seq_id);
      if (it != seqs_.end()) finish_choice(*it->second.req, it->second.choice, FinishReason::kError, err);
    }
    return true;
  }
  std::vector<int32_t> sampled(plan.work.size(), 0);
  std::unordered_map<int64_t, SampleResult> samples;
  for (size_t i = 0; i < plan.work.size(); ++i) {
    if (!specs[i]) continue;
    const SampleSpec& spec = *specs[i];
    SampleResult r;
    if (on_device) {
      r = std::move(device_samples[i]);
    } else {
      SamplerContext ctx;
      ctx.prompt = spec.prompt;
      ctx.output = spec.output;
      ctx.seed = spec.seed;
      ctx.allowed = spec.allowed;
      r = sample_token(res.logits[i], spec.params, ctx);
    }
    sampled[i] = r.token;
    samples[plan.work[i].seq_id] = std::move(r);
  }
  // Structured outputs: advance each constrained choice by its token; a
  // token the grammar refuses (a device fault, or no token was allowed) fails
  // that choice, never the others.
  std::vector<int64_t> grammar_failed = grammar_stuck;
  for (size_t i = 0; i < plan.work.size(); ++i) {
    if (!specs[i] || specs[i]->allowed.empty()) continue;
    const SeqRef& ref = seqs_.at(plan.work[i].seq_id);
    if (!ref.req->constraints[ref.choice]->accept(sampled[i])) grammar_failed.push_back(plan.work[i].seq_id);
  }
  // Cached-prompt counts are read before update removes finished sequences.
  std::unordered_map<int64_t, int> cached;
  for (const auto& w : plan.work)
    if (sched_.has(w.seq_id)) cached[w.seq_id] = sched_.sequence(w.seq_id).cached_prompt_tokens;
  std::vector<SeqUpdate> updates = sched_.update_from_output(plan, sampled);
  for (const SeqUpdate& u : updates) {
    auto it = seqs_.find(u.seq_id);
    if (it == seqs_.end()) continue;
    Active& a = *it->second.req;
    int c = it->second.choice;
    if (std::find(grammar_failed.begin(), grammar_failed.end(), u.seq_id) != grammar_failed.end()) {
      finish_choice(a, c, FinishReason::kError,
                    internal_error("structured output: the grammar allows no continuation with this vocabulary "
                                   "(or the backend sampled a token outside the mask)"));
      continue;
    }
    TokenEvent e;
    e.choice = c;
    e.token = u.token;
    if (a.req.sampling.logprobs >= 0) {
      const SampleResult& r = samples[u.seq_id];
      e.logprob = r.logprob;
      for (const auto& t : r.top) e.top.push_back({t.token, t.logprob});
    }
    ++a.completion[c];
    ++generation_tokens_;
    a.req.channel->push_token(std::move(e));
    if (u.finish != FinishReason::kNone) {
      // The scheduler already freed the sequence; report its cache hit.
      FinishEvent f;
      f.choice = c;
      f.reason = u.finish;
      f.prompt_tokens = static_cast<int>(a.req.prompt.size());
      f.completion_tokens = a.completion[c];
      f.cached_prompt_tokens = cached[u.seq_id];
      seqs_.erase(u.seq_id);
      a.done[c] = true;
      if (++a.num_done == a.req.n) ++finished_;
      a.req.channel->push_finish(std::move(f));
    } else if (!a.constraints.empty() && a.constraints[c]->complete()) {
      finish_choice(a, c, FinishReason::kStop);  // the structured output is complete
    }
  }
  std::erase_if(active_, [](const std::shared_ptr<Active>& a) { return a->num_done == a->req.n; });
  return true;
}

void EngineImpl::loop() {
  bool stalled = false;  // last step scheduled nothing: wait briefly instead of spinning
  for (;;) {
    std::deque<Request> fresh;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (sched_.idle())
        cv_.wait(lock, [&] { return stopping_ || !incoming_.empty(); });
      else if (stalled)
        cv_.wait_for(lock, std::chrono::milliseconds(1), [&] { return stopping_ || !incoming_.empty(); });
      if (stopping_) break;
      fresh.swap(incoming_);
    }
    try {
      for (auto& r : fresh) admit(std::move(r));
      check_cancellations();
      if (!healthy_loop_) {
        fail_all(unavailable("engine unhealthy: " + unhealthy_reason_loop_));
      } else if (!sched_.idle()) {
        stalled = !run_step();
      }
    } catch (const std::exception& e) {
      healthy_loop_ = false;
      unhealthy_reason_loop_ = std::string("exception in engine loop: ") + e.what();
      fail_all(internal_error(unhealthy_reason_loop_));
    }
    publish_stats();
  }
  // Shutdown: finish what is queued or running.
  std::deque<Request> rest;
  {
    std::lock_guard<std::mutex> lock(mu_);
    rest.swap(incoming_);
  }
  Status down = unavailable("engine shut down");
  for (auto& r : rest)
    for (int c = 0; c < r.n; ++c) {
      FinishEvent f;
      f.choice = c;
      f.reason = FinishReason::kError;
      f.prompt_tokens = static_cast<int>(r.prompt.size());
      f.error = down;
      r.channel->push_finish(std::move(f));
    }
  fail_all(down);
  publish_stats();
}

}  // namespace

Result<std::unique_ptr<Engine>> make_engine(std::unique_ptr<Backend> backend, const EngineOptions& opt,
                                            const std::string& cache_identity) {
  if (!backend) return invalid_argument("no backend");
  const int max_rows = backend->limits().max_batch_rows;
  if (opt.max_batch < 1 || opt.max_batch > max_rows)
    return invalid_argument("max_batch must be in [1, " + std::to_string(max_rows) + "] for backend " +
                            backend->name() + ", got " + std::to_string(opt.max_batch));
  if (opt.prefill_chunk < 1) return invalid_argument("prefill_chunk must be >= 1");
  if (opt.max_waiting < 1) return invalid_argument("max_waiting must be >= 1");
  if (opt.max_model_len < 0) return invalid_argument("max_model_len must be >= 0");
  const ModelConfig& cfg = backend->config();
  // A longer context than the model was trained for is refused, never clamped
  // in silence (positions past it are out of distribution, or out of range).
  if (cfg.max_position > 0 && opt.max_model_len > cfg.max_position) {
    return invalid_argument("max_model_len " + std::to_string(opt.max_model_len) +
                            " exceeds the model's context length of " + std::to_string(cfg.max_position) +
                            " tokens (max_position_embeddings in config.json)");
  }
  int max_len = cfg.max_position > 0 ? cfg.max_position : opt.max_model_len;
  if (opt.max_model_len > 0) max_len = std::min(max_len > 0 ? max_len : opt.max_model_len, opt.max_model_len);
  if (max_len <= 0) return invalid_argument("unknown context length: set max_model_len");
  KvCapacity cap = kv_capacity(backend->kv_spec(), opt.prefill_chunk);
  if (cap.max_request_tokens < max_len) {
    // The model's own length is lowered to what the cache holds (a default
    // that cannot serve its longest request would 400 every chat request
    // that leaves max_tokens unset); an explicit one is the user's promise.
    if (opt.max_model_len > 0)
      return invalid_argument("max_model_len " + std::to_string(opt.max_model_len) +
                              " does not fit the KV cache: one sequence can hold at most " +
                              std::to_string(cap.max_request_tokens) + " tokens (" + describe(cap) +
                              "): lower it, or give the KV cache more memory (--gpu-memory-utilization, --kv-cache-mb)");
    max_len = static_cast<int>(cap.max_request_tokens);
    cap.bounds_context = true;
  }
  cap.max_request_tokens = max_len;
  // Salt: everything that changes cached KV bytes.
  std::string identity = cfg.to_json().dump() + "|block=" + std::to_string(backend->kv_spec().block_size) +
                         "|backend=" + backend->name() + "|" + cache_identity;
  uint64_t salt = make_cache_salt(identity);
  return std::unique_ptr<Engine>(new EngineImpl(std::move(backend), opt, max_len, salt, std::move(cap)));
}

}  // namespace ms
