// Single-sequence generation over any Backend, with its own linear block
// allocation: what `megaserve generate`, the golden tests and the decode
// benchmark use. The serving path goes through the scheduler instead.
#pragma once

#include <functional>
#include <vector>

#include "engine/backend.h"

namespace ms {

struct GenerateOptions {
  int max_new_tokens = 32;
  int prefill_chunk = 0;        // 0: whole prompt in one step
  bool stop_at_eos = true;
  // Called with each step's logits before the greedy pick (step 0: last prompt position).
  std::function<void(int step, const std::vector<float>& logits)> on_logits;
  // Called with each generated token; return false to stop.
  std::function<bool(int32_t token)> on_token;
};

// Greedy decoding. Sliding-window groups release (mark -1) blocks that fell out
// of the window, exercising the same table shape the KV manager produces.
Result<std::vector<int32_t>> generate_greedy(Backend& backend, const std::vector<int32_t>& prompt,
                                             const GenerateOptions& opt);

int32_t argmax(const std::vector<float>& logits);

}  // namespace ms
