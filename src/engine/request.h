// What the HTTP layer hands the engine and what flows back: a generation
// request (token ids already rendered and tokenized) and a per-request
// channel of outputs. HTTP threads never touch the model: they submit a
// Request to the Engine and read its RequestChannel.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "sampling/sampling_params.h"

namespace ms {

enum class FinishReason { kNone, kStop, kLength, kCancelled, kError };
const char* finish_reason_name(FinishReason r);  // "stop", "length", ...

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.f;
};

// One decoded token of one choice (index in 0..n-1).
struct TokenEvent {
  int choice = 0;
  int32_t token = 0;
  float logprob = 0.f;                 // valid when params.logprobs >= 0
  std::vector<TokenLogprob> top;       // params.logprobs alternatives
};

// A finished choice. Stop strings are matched by the server on detokenized
// text (it cancels the request when all choices stopped); stop token ids
// (eos, stop_token_ids) by the engine.
struct FinishEvent {
  int choice = 0;
  FinishReason reason = FinishReason::kNone;
  int prompt_tokens = 0;
  int completion_tokens = 0;
  int cached_prompt_tokens = 0;  // prefix-cache hits
  Status error;                  // reason == kError
};

class RequestChannel {
 public:
  struct Item {
    std::optional<TokenEvent> token;
    std::optional<FinishEvent> finish;
  };
  // Engine side.
  void push_token(TokenEvent e);
  void push_finish(FinishEvent e);
  // HTTP side: waits up to timeout_ms for items; returns what is there (may be empty).
  std::vector<Item> pop_all(int timeout_ms);
  // HTTP side: ask the engine to stop this request (client gone, stop string hit).
  void cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }
  bool finished_all(int n) const;

 private:
  mutable std::mutex mu_;  // guards items_ and finished_
  std::condition_variable cv_;
  std::deque<Item> items_;
  int finished_ = 0;
  std::atomic<bool> cancelled_{false};
};

struct Request {
  std::string id;                   // e.g. "chatcmpl-..."
  std::vector<int32_t> prompt;      // token ids
  int max_tokens = 16;              // completion tokens per choice
  int n = 1;                        // choices; each is its own sequence sharing the prompt's cached blocks
  SamplingParams sampling;
  std::vector<int32_t> stop_token_ids;  // besides eos (unless ignore_eos)
  std::shared_ptr<RequestChannel> channel;
};

}  // namespace ms
