// One OpenAI generation request from parsed body to finished response,
// independent of the HTTP library: validate, render the chat template,
// tokenize, check the context, submit to the Engine, then read the request
// channels and turn engine events into a response body or SSE events. The
// HTTP thread running it only waits on its channels; it never touches the model.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "chat/tool_call_parser.h"
#include "engine/engine.h"
#include "server/api_error.h"
#include "server/choice_stream.h"
#include "server/metrics.h"
#include "server/openai_protocol.h"
#include "server/response_store.h"
#include "server/responses.h"
#include "server/responses_api.h"
#include "tokenizer/tokenizer.h"

namespace ms::server {

// What every handler shares. Set up once by the serve command; read-only after.
struct ServerContext {
  Engine* engine = nullptr;
  const Tokenizer* tokenizer = nullptr;
  const ChatTemplate* chat_template = nullptr;  // null: /v1/chat/completions answers 400
  std::string model_name;
  ToolCallFormat tool_format = ToolCallFormat::kNone;
  Metrics* metrics = nullptr;
  ProtocolLimits limits;
  // Appended to context_length_exceeded messages when the KV cache, not the
  // model, sets max_model_len (which memory flags give it more).
  std::string context_note;
  int poll_ms = 50;                     // channel wait granularity
  StructuredOutputCache structured_outputs;  // compiled response_format / strict-tool grammars
  bool special_tokens_in_content = false;  // chat_prompt.h: client text may carry control tokens
  std::atomic<bool> shutting_down{false};
  ResponseStore response_store;         // Responses API: stored responses (store: true)
  // Unix time the server started: the model's `created` in /v1/models.
  int64_t started_at = std::chrono::duration_cast<std::chrono::seconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
};

class Generation {
 public:
  // Validates and submits. On failure returns the error (nothing left queued).
  static ApiError start(ServerContext& ctx, Endpoint endpoint, const Json& body, std::shared_ptr<Generation>* out);
  ~Generation();  // cancels whatever is still running in the engine

  bool stream() const { return req_.stream; }
  // Non-streaming: waits for every choice; fills the response body or returns an error.
  // `client_gone` (optional) is polled between channel waits; when it turns
  // true the request is cancelled in the engine at once (its KV freed) and
  // the call returns an error nobody will read, with status 499 (nginx's
  // "client closed request") so logs and metrics do not count it as a 500.
  ApiError run_to_completion(Json* response, const std::function<bool()>& client_gone = {});
  // Streaming: writes SSE events through `write`; a failed write (client gone)
  // cancels the request in the engine and returns at once.
  void run_streaming(const std::function<bool(const std::string&)>& write);
  void cancel();

 private:
  struct Sub {  // one engine request (one per completions prompt)
    std::shared_ptr<RequestChannel> channel;
    int prompt_tokens = 0;
    int max_tokens = 0;  // fitted to the context
    std::string echo;  // completions echo prefix
  };
  struct ChoiceState {
    std::unique_ptr<ChoiceStream> stream;
    ChoiceAccumulator acc;
    int logprob_offset = 0;
    bool got_token = false;
    std::chrono::steady_clock::time_point first, last;
  };
  using Clock = std::chrono::steady_clock;
  Generation(ServerContext& ctx) : ctx_(ctx) {}
  ApiError prepare_prompts(std::vector<std::vector<int32_t>>* prompts, std::vector<std::string>* texts);
  // Pulls engine events; calls emit(choice index, delta) for each. Returns false
  // when every choice is finished.
  bool pump(const std::function<void(int, const ChoiceDelta&)>& emit);
  void record_finish_metrics();
  Json usage() const;
  bool chat_like() const { return req_.endpoint != Endpoint::kCompletions; }
  // Responses API: the reply, streamed through `write` or returned.
  ApiError run_responses(Json* response, const std::function<bool(const std::string&)>* write,
                         const std::function<bool()>& client_gone);

  ServerContext& ctx_;
  GenRequest req_;
  std::unique_ptr<ResponsesRequest> responses_;  // kResponses only
  ResponseMeta meta_;
  std::vector<Sub> subs_;
  std::vector<ChoiceState> choices_;  // prompts x n
  int cached_tokens_ = 0;
  Clock::time_point t0_;
  bool ttft_recorded_ = false;
  bool done_ = false;
  std::optional<Status> error_;
};

}  // namespace ms::server
