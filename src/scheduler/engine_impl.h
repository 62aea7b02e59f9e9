// The serving engine (implements engine/engine.h): one loop thread owns the
// Backend, the KV-cache manager (inside the Scheduler) and the Scheduler, and
// runs schedule -> backend.step -> sample -> push events -> update. HTTP
// threads only call submit() (validated, then queued under one mutex) and read
// their RequestChannel.
//
// It lives in src/scheduler/ (not src/engine/) because it needs the scheduler,
// which itself depends on ms_engine for the Backend / Request types.
//
// Errors: a backend step error fails the requests of that step with
// FinishReason::kError; an Internal error (device fault) also fails every
// other request and marks the engine unhealthy (submit() then answers
// Unavailable). shutdown() finishes pending requests with kError
// (Unavailable: "engine shut down") and joins the thread. No exception
// leaves the loop thread.
#pragma once

#include <memory>
#include <string>

#include "engine/engine.h"

namespace ms {

// Bound on Request::n.
inline constexpr int kMaxChoices = 16;

// Starts the loop thread. InvalidArgument for options out of range
// (max_batch 1..the backend's limits().max_batch_rows, prefill_chunk >= 1, max_waiting >= 1, max_model_len >= 0).
// cache_identity: extra text mixed into the prefix-cache salt (besides the
// model config, block size and backend name), e.g. the checkpoint path.
Result<std::unique_ptr<Engine>> make_engine(std::unique_ptr<Backend> backend, const EngineOptions& opt,
                                            const std::string& cache_identity = "");

}  // namespace ms
