// The Engine: sole owner of a Backend, the KV-cache manager and the scheduler.
// One loop thread runs schedule() -> backend.step() -> sample -> update;
// HTTP threads only call submit() and read their RequestChannel.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "engine/backend.h"
#include "engine/kv_sizing.h"
#include "engine/request.h"

namespace ms {

struct EngineOptions {
  int max_batch = 8;           // decode rows per step, 1..8
  int prefill_chunk = 512;     // max prompt tokens prefilled per step (chunked prefill)
  int max_waiting = 256;       // queue bound: submit() beyond it fails with ResourceExhausted (HTTP 429)
  // 0: the model's max_position_embeddings, lowered to what one sequence can
  // hold in the KV cache (kv_capacity says so); > 0: exactly this, refused at
  // start when the cache cannot hold it.
  int max_model_len = 0;
  bool prefix_caching = true;
};

// Counters for /metrics, read under the engine's stats mutex.
struct EngineStats {
  KvCapacity kv_capacity;  // fixed at start
  int running = 0, waiting = 0;
  int kv_blocks_total = 0, kv_blocks_used = 0, kv_blocks_free = 0;
  uint64_t prompt_tokens = 0, generation_tokens = 0;
  uint64_t prefix_cache_queries = 0, prefix_cache_hits = 0;  // in tokens
  uint64_t preemptions = 0;
  uint64_t requests_finished = 0;
  bool healthy = true;
  std::string unhealthy_reason;
};

class Engine {
 public:
  virtual ~Engine() = default;
  // Validates and queues. Errors: InvalidArgument (bad params), OutOfRange
  // (prompt + max_tokens over the context, message with the numbers),
  // ResourceExhausted (queue full), Unavailable (shutting down / unhealthy).
  virtual Status submit(Request req) = 0;
  virtual EngineStats stats() const = 0;
  virtual const ModelConfig& config() const = 0;
  virtual int max_model_len() const = 0;
  virtual void shutdown() = 0;
};

}  // namespace ms
