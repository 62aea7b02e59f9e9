#include "server/generation.h"

#include <algorithm>
#include <random>

#include "chat/chat_prompt.h"
#include "core/log.h"
#include "server/responses_stream.h"

namespace ms::server {
namespace {

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

double secs(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

ApiError Generation::start(ServerContext& ctx, Endpoint endpoint, const Json& body, std::shared_ptr<Generation>* out) {
  if (ctx.shutting_down) {
    ApiError e = api_error_from_status(unavailable("the server is shutting down"));
    return e;
  }
  std::shared_ptr<Generation> g(new Generation(ctx));
  g->t0_ = Clock::now();
  ApiError err;
  switch (endpoint) {
    case Endpoint::kChat: err = parse_chat_request(body, ctx.limits, &g->req_); break;
    case Endpoint::kCompletions: err = parse_completion_request(body, ctx.limits, &g->req_); break;
    case Endpoint::kResponses:
      g->responses_ = std::make_unique<ResponsesRequest>();
      err = parse_responses_request(body, ctx.limits, ctx.response_store, &g->req_, g->responses_.get());
      break;
  }
  if (!err.ok()) return err;
  GenRequest& r = g->req_;
  if (!r.model.empty() && r.model != ctx.model_name) {
    return not_found_error("The model `" + r.model + "` does not exist.", "model_not_found");
  }
  if (r.echo && r.logprobs) return bad_request("'echo' together with 'logprobs' is not supported", "echo", "unsupported_parameter");
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::string> texts;
  err = g->prepare_prompts(&prompts, &texts);
  if (!err.ok()) return err;

  const int max_len = ctx.engine->max_model_len();
  g->meta_.id = random_item_id(endpoint == Endpoint::kResponses ? "resp_"
                               : endpoint == Endpoint::kChat    ? "chatcmpl-"
                                                                : "cmpl-");
  g->meta_.created = unix_now();
  g->meta_.model = ctx.model_name;
  g->meta_.usage_null = r.include_usage;

  // Per-choice output pipelines.
  ChoiceOptions co;
  co.stop = r.stop;
  co.skip_special = r.skip_special_tokens;
  std::string forced;  // tool_choice required / named: the reply starts inside a call
  // With tools (even under tool_choice "none") the output is parsed, so call
  // markup never reaches content: calls are dropped when none are allowed.
  const bool has_tools = !r.tool_choice.tool_names.empty();
  if (g->chat_like() && (r.tool_choice.parse() || has_tools) && ctx.tool_format != ToolCallFormat::kNone) {
    co.tool_format = ctx.tool_format;
    co.skip_special = false;  // call markers are special tokens in some vocabularies
    co.parser.allowed_names = r.tool_choice.allowed_names();
    co.parser.calls_allowed = r.tool_choice.parse();
    co.parser.max_calls = r.parallel_tool_calls ? 0 : 1;
    forced = forced_call_prefix(ctx.tool_format, r.tool_choice);
    co.parser.starts_in_reasoning =
        forced.empty() && prompt_opens_reasoning(ctx.tool_format, texts.empty() ? "" : texts[0]);
    if (!forced.empty()) {
      std::vector<int32_t> ids = ctx.tokenizer->encode(forced, /*add_special_tokens=*/false, /*parse_special=*/true);
      prompts[0].insert(prompts[0].end(), ids.begin(), ids.end());
    }
  }
  StructuredRequest sreq{endpoint == Endpoint::kChat, ctx.tool_format, co.tool_format != ToolCallFormat::kNone,
                         &r.response_format, &r.tool_choice, &r.tools};
  StructuredOutput so;
  err = plan_structured_output(ctx.structured_outputs, *ctx.tokenizer, sreq, &so);
  if (!err.ok()) return err;
  r.sampling.grammar = so.grammar;
  if (!so.prompt_suffix.empty()) {
    std::vector<int32_t> ids = ctx.tokenizer->encode(so.prompt_suffix, /*add_special_tokens=*/false, /*parse_special=*/true);
    for (auto& p : prompts) p.insert(p.end(), ids.begin(), ids.end());
  }
  if (!r.sampling.ignore_eos) {
    co.hidden_ids = ctx.tokenizer->eos_ids();
    for (int id : ctx.engine->config().eos_ids) co.hidden_ids.push_back(id);
  }
  co.hidden_ids.insert(co.hidden_ids.end(), r.stop_token_ids.begin(), r.stop_token_ids.end());
  co.logprobs_special = !r.skip_special_tokens && co.tool_format == ToolCallFormat::kNone;
  const std::string prompt_param = endpoint == Endpoint::kChat        ? "messages"
                                   : endpoint == Endpoint::kResponses ? "input"
                                                                      : "prompt";

  std::mt19937_64 id_rng(std::random_device{}());
  for (size_t p = 0; p < prompts.size(); ++p) {
    // Chat-like endpoints default to all that fits, completions to 16 (OpenAI's).
    const int prompt_len = static_cast<int>(prompts[p].size());
    int max_tokens = 0;
    err = fit_context(prompt_len, r.max_tokens, g->chat_like() ? max_len : 16, max_len, r.strict_max_tokens,
                      prompt_param, r.max_tokens_param, &max_tokens);
    if (!err.ok()) {
      if (err.code == "context_length_exceeded" && !ctx.context_note.empty()) err.message += " " + ctx.context_note;
      return err;
    }
    if (r.max_tokens && max_tokens < *r.max_tokens) {
      MS_LOG(Debug) << g->meta_.id << ": " << r.max_tokens_param << " " << *r.max_tokens << " clamped to "
                    << max_tokens << " (prompt " << prompt_len << " of " << max_len << " tokens)";
    }
    for (int j = 0; j < r.n; ++j) {
      ChoiceState cs;
      ChoiceOptions o = co;
      o.parser.id_seed = id_rng();
      cs.stream = std::make_unique<ChoiceStream>(*ctx.tokenizer, std::move(o));
      if (!forced.empty()) cs.stream->prime(forced);
      g->choices_.push_back(std::move(cs));
    }
    Sub sub;
    sub.prompt_tokens = prompt_len;
    sub.max_tokens = max_tokens;
    if (r.echo) sub.echo = r.prompts[p].is_tokens ? ctx.tokenizer->decode(prompts[p], r.skip_special_tokens) : texts[p];
    g->subs_.push_back(std::move(sub));
  }
  // Submit; a failure withdraws the parts already queued.
  for (size_t p = 0; p < prompts.size(); ++p) {
    Request er;
    er.id = prompts.size() == 1 ? g->meta_.id : g->meta_.id + "-" + std::to_string(p);
    er.prompt = std::move(prompts[p]);
    er.max_tokens = g->subs_[p].max_tokens;
    er.n = r.n;
    er.sampling = r.sampling;
    er.stop_token_ids = r.stop_token_ids;
    er.channel = std::make_shared<RequestChannel>();
    g->subs_[p].channel = er.channel;
    Status s = ctx.engine->submit(std::move(er));
    if (!s.is_ok()) {
      for (size_t q = 0; q < p; ++q) g->subs_[q].channel->cancel();
      g->subs_.resize(p);  // nothing of ours is left in the engine
      g->done_ = true;
      return api_error_from_status(s);
    }
  }
  *out = std::move(g);
  return no_error();
}

ApiError Generation::prepare_prompts(std::vector<std::vector<int32_t>>* prompts, std::vector<std::string>* texts) {
  const Tokenizer& tok = *ctx_.tokenizer;
  if (chat_like()) {
    const char* param = req_.endpoint == Endpoint::kChat ? "messages" : "input";
    if (!ctx_.chat_template) {
      return bad_request("this model has no chat template; use /v1/completions", param, "no_chat_template");
    }
    Json context = req_.chat_template_kwargs;
    context["messages"] = req_.messages;
    // tool_choice "none": the model is not shown the tools, so it does not
    // try to call them (its output is still parsed and any call dropped).
    if (!req_.tools.is_null() && req_.tool_choice.parse()) context["tools"] = req_.tools;
    context["add_generation_prompt"] = req_.add_generation_prompt;
    context["bos_token"] = tok.bos_token();
    context["eos_token"] = tok.eos_token();
    ChatPromptOptions po;
    po.special_tokens_in_content = ctx_.special_tokens_in_content;
    auto prompt = render_chat_prompt(*ctx_.chat_template, tok, std::move(context), po);
    if (!prompt.is_ok()) return bad_request("chat template error: " + prompt.status().message(), param);
    prompts->push_back(std::move(prompt->ids));
    texts->push_back(std::move(prompt->text));
  } else {
    for (const auto& p : req_.prompts) {
      if (p.is_tokens) {
        prompts->push_back(p.tokens);
        texts->push_back("");
      } else {
        prompts->push_back(tok.encode(p.text, /*add_special_tokens=*/true));
        texts->push_back(p.text);
      }
    }
  }
  for (const auto& p : *prompts) {
    if (p.empty()) {
      return bad_request("the prompt is empty after tokenization",
                         req_.endpoint == Endpoint::kChat ? "messages" : chat_like() ? "input" : "prompt");
    }
  }
  return no_error();
}

Generation::~Generation() { cancel(); }

void Generation::cancel() {
  for (auto& s : subs_) {
    if (s.channel) s.channel->cancel();
  }
}

bool Generation::pump(const std::function<void(int, const ChoiceDelta&)>& emit) {
  const int n = req_.n;
  int timeout = subs_.size() == 1 ? ctx_.poll_ms : std::max(1, ctx_.poll_ms / static_cast<int>(subs_.size()));
  for (size_t p = 0; p < subs_.size(); ++p) {
    auto items = subs_[p].channel->pop_all(timeout);
    for (auto& item : items) {
      if (item.token) {
        int c = static_cast<int>(p) * n + item.token->choice;
        if (item.token->choice < 0 || item.token->choice >= n) continue;
        ChoiceState& cs = choices_[c];
        if (cs.stream->finished()) continue;
        auto now = Clock::now();
        if (!ttft_recorded_) {
          ttft_recorded_ = true;
          if (ctx_.metrics) ctx_.metrics->observe_ttft(secs(now - t0_));
        }
        if (cs.got_token && ctx_.metrics) ctx_.metrics->observe_itl(secs(now - cs.last));
        if (!cs.got_token) cs.first = now;
        cs.got_token = true;
        cs.last = now;
        ChoiceDelta d = cs.stream->on_token(*item.token);
        emit(c, d);
      } else if (item.finish) {
        int choice = item.finish->choice;
        if (choice < 0 || choice >= n) continue;
        int c = static_cast<int>(p) * n + choice;
        cached_tokens_ = std::max(cached_tokens_, item.finish->cached_prompt_tokens);
        ChoiceDelta d = choices_[c].stream->on_finish(*item.finish);
        if (d.error && !error_) error_ = *d.error;
        emit(c, d);
      }
    }
  }
  bool all = std::all_of(choices_.begin(), choices_.end(), [](const ChoiceState& c) { return c.stream->finished(); });
  if (all) {
    cancel();  // choices ended on stop strings: free the engine's work at once
    done_ = true;
    record_finish_metrics();
    for (const auto& c : choices_) {
      if (c.stream->dropped_calls() > 0) {
        MS_LOG(Info) << meta_.id << ": dropped " << c.stream->dropped_calls()
                     << " tool-call region(s) from the output (malformed, not allowed, or over the call limit)";
      }
    }
  }
  return !all;
}

void Generation::record_finish_metrics() {
  if (!ctx_.metrics) return;
  ctx_.metrics->observe_e2e(secs(Clock::now() - t0_));
  uint64_t completion = 0;
  for (const auto& c : choices_) {
    completion += c.stream->completion_tokens();
    int k = c.stream->completion_tokens();
    if (k > 1) ctx_.metrics->observe_tpot(secs(c.last - c.first) / (k - 1));
  }
  uint64_t prompt = 0;
  for (const auto& s : subs_) prompt += s.prompt_tokens;
  ctx_.metrics->add_tokens(prompt, completion);
}

Json Generation::usage() const {
  int prompt = 0, completion = 0;
  for (const auto& s : subs_) prompt += s.prompt_tokens;
  for (const auto& c : choices_) completion += c.stream->completion_tokens();
  return usage_json(prompt, completion, cached_tokens_);
}

namespace {

ApiError client_closed() {
  ApiError e;
  e.status = 499;
  e.type = "client_closed_request";
  e.message = "client closed the connection";
  return e;
}

}  // namespace

ApiError Generation::run_to_completion(Json* response, const std::function<bool()>& client_gone) {
  if (responses_) return run_responses(response, nullptr, client_gone);
  auto emit = [&](int c, const ChoiceDelta& d) { choices_[c].acc.add(d); };
  while (pump(emit)) {
    if (client_gone && client_gone()) {
      cancel();
      MS_LOG(Info) << meta_.id << ": client closed the connection; request cancelled (499)";
      return client_closed();
    }
  }
  if (error_) {
    ApiError e = internal_api_error("generation failed: " + error_->message());
    return e;
  }
  Json arr = Json::array();
  const Tokenizer& tok = *ctx_.tokenizer;
  for (size_t c = 0; c < choices_.size(); ++c) {
    const ChoiceState& cs = choices_[c];
    if (req_.endpoint == Endpoint::kChat) {
      if (req_.tool_choice.required() && !cs.stream->made_tool_call()) {
        MS_LOG(Warn) << meta_.id << ": tool_choice requires a call but the model made none; returning content";
      }
      arr.push_back(chat_choice_json(tok, static_cast<int>(c), cs.acc, req_.logprobs));
    } else {
      arr.push_back(completion_choice_json(tok, static_cast<int>(c), subs_[c / req_.n].echo, cs.acc, req_.logprobs));
    }
  }
  *response = req_.endpoint == Endpoint::kChat ? chat_response(meta_, std::move(arr), usage())
                                               : completion_response(meta_, std::move(arr), usage());
  return no_error();
}

ApiError Generation::run_responses(Json* response, const std::function<bool(const std::string&)>* write,
                                   const std::function<bool()>& client_gone) {
  bool ok = true;
  ResponseBuilder::Sink sink;
  if (write) sink = [&](const Json& e) { ok = ok && (*write)(sse_typed_event(e)); };
  ResponseBuilder b(meta_.id, meta_.created, meta_.model, *responses_, *ctx_.tokenizer, sink);
  b.start();
  std::string finish_reason = "stop";
  auto emit = [&](int, const ChoiceDelta& d) {
    if (!ok) return;
    b.add(d);
    if (d.finish_reason) finish_reason = *d.finish_reason;
  };
  while (ok && pump(emit)) {
    if (client_gone && client_gone()) ok = false;
  }
  if (!ok) {
    MS_LOG(Info) << meta_.id << ": client disconnected; cancelling" << (write ? "" : " (499)");
    cancel();
    return client_closed();
  }
  const int completion = choices_[0].stream->completion_tokens();
  Json u = responses_usage(subs_[0].prompt_tokens, completion, cached_tokens_, b.reasoning_tokens());
  Json r = b.finish(finish_reason, u, error_ ? "generation failed: " + error_->message() : "");
  if (!write && error_) return internal_api_error("generation failed: " + error_->message());
  if (responses_->store && !error_) ctx_.response_store.put(meta_.id, stored_response(r, *responses_));
  if (response) *response = std::move(r);
  return no_error();
}

void Generation::run_streaming(const std::function<bool(const std::string&)>& write) {
  if (responses_) {
    run_responses(nullptr, &write, {});
    return;
  }
  const bool chat = req_.endpoint == Endpoint::kChat;
  bool ok = true;
  auto send = [&](const Json& j) {
    if (ok && !write(sse_event(j))) ok = false;
  };
  for (size_t c = 0; c < choices_.size(); ++c) {
    if (chat) {
      send(chat_role_chunk(meta_, static_cast<int>(c)));
    } else if (!subs_[c / req_.n].echo.empty()) {
      send(completion_chunk(meta_, static_cast<int>(c), subs_[c / req_.n].echo, nullptr, nullptr));
    }
  }
  const Tokenizer& tok = *ctx_.tokenizer;
  auto emit = [&](int c, const ChoiceDelta& d) {
    if (!ok) return;
    ChoiceState& cs = choices_[c];
    bool want_lp = req_.logprobs && !d.tokens.empty();
    if (d.has_payload() || want_lp) {
      ChoiceDelta body = d;
      body.finish_reason.reset();
      if (chat) {
        send(chat_delta_chunk(meta_, c, body, want_lp ? chat_logprobs_entries(tok, d.tokens) : Json(nullptr)));
      } else {
        send(completion_chunk(meta_, c, d.content,
                              want_lp ? completion_logprobs(tok, d.tokens, &cs.logprob_offset) : Json(nullptr),
                              nullptr));
      }
    }
    if (d.finish_reason && !d.error) {
      if (chat) {
        ChoiceDelta fin;
        fin.finish_reason = d.finish_reason;
        send(chat_delta_chunk(meta_, c, fin, nullptr));
      } else {
        send(completion_chunk(meta_, c, "", nullptr, *d.finish_reason));
      }
    }
  };
  while (ok && pump(emit)) {
  }
  if (!ok) {
    MS_LOG(Info) << meta_.id << ": client disconnected; cancelling";
    cancel();
    return;
  }
  if (error_) {
    ApiError e = internal_api_error("generation failed: " + error_->message());
    send(e.to_json());
  } else if (req_.include_usage) {
    send(usage_chunk(meta_, chat ? "chat.completion.chunk" : "text_completion", usage()));
  }
  if (ok) write(sse_done());
}

}  // namespace ms::server
