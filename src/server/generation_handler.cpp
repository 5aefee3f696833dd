#include "server/generation_handler.h"

#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "server/http_router.h"

namespace rlm {

namespace {

using Clock = std::chrono::steady_clock;

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string sse(const ojson& j) {
  return "data: " + j.dump(-1, ' ', false, ojson::error_handler_t::replace) + "\n\n";
}

// One sequence of a request: prompt index p, sample i of n.
struct Choice {
  int index = 0;
  int prompt_index = 0;
  std::shared_ptr<Req> req;
  std::string text;              // accumulated (non-streaming / SGLang cumulative)
  std::vector<int32_t> tokens;   // accumulated
  std::vector<TokenLogprob> logprobs;
  std::optional<FinishInfo> finish;
  bool sent_role = false;
};

// Everything one HTTP request needs from submission to its last byte. Owned by the exchange's
// disconnect callback (and briefly by posted pumps), so it dies with the exchange; dying, it
// aborts whatever has not finished and releases its client alias.
struct Job : std::enable_shared_from_this<Job> {
  ServingEngine* engine = nullptr;
  ApiKind kind = ApiKind::kCompletion;
  std::string id;         // server id: unguessable, the parent_rid of every sequence
  std::string public_id;  // what responses show: `id`, or the client's rid (/generate)
  int64_t created = 0;
  std::string model;
  bool stream = false;
  bool include_usage = false;
  bool chat_logprobs = false;
  int32_t logprobs = -1;
  bool echo = false;
  std::vector<std::string> prompt_texts;   // for echo
  std::vector<int64_t> prompt_lens;
  std::vector<Choice> choices;
  bool answered = false;  // the response (or the stream's end) has been handed to the exchange
  bool aborted = false;
  Clock::time_point start = Clock::now();
  std::weak_ptr<HttpExchange> exchange;
  std::atomic<bool> pump_posted{false};
  RidAliases* aliases = nullptr;  // set when `public_id` is a registered client alias
  std::string alias_namespace;

  ~Job() {
    for (Choice& c : choices) c.req->stream->set_listener(nullptr);
    abort_unfinished();
    if (aliases != nullptr) aliases->remove(alias_namespace, public_id);
  }

  void abort_unfinished() {
    if (aborted) return;
    for (const Choice& c : choices) {
      if (!c.finish) {
        engine->abort(id);  // every sequence of this request (exact parent id)
        aborted = true;
        return;
      }
    }
  }

  bool all_finished() const {
    for (const Choice& c : choices) {
      if (!c.finish) return false;
    }
    return true;
  }

  std::optional<std::string> engine_error() const {
    for (const Choice& c : choices) {
      if (c.finish && !c.finish->error.empty()) return c.finish->error;
    }
    return std::nullopt;
  }

  // Takes every waiting event of every unfinished choice into the choices; returns them in order
  // (the stream's chunks).
  std::vector<std::pair<int, StreamEvent>> collect() {
    std::vector<std::pair<int, StreamEvent>> out;
    for (Choice& c : choices) {
      while (!c.finish) {
        std::optional<StreamEvent> e = c.req->stream->try_pop();
        if (!e) break;
        c.text += e->text;
        c.tokens.insert(c.tokens.end(), e->token_ids.begin(), e->token_ids.end());
        c.logprobs.insert(c.logprobs.end(), e->logprobs.begin(), e->logprobs.end());
        if (e->finish) c.finish = e->finish;
        out.emplace_back(c.index, std::move(*e));
      }
    }
    return out;
  }
};

ojson usage_json(const Job& job) {
  int64_t prompt = 0, completion = 0, cached = 0;
  for (size_t p = 0; p < job.prompt_lens.size(); ++p) prompt += job.prompt_lens[p];
  std::vector<bool> counted(job.prompt_lens.size(), false);
  for (const Choice& c : job.choices) {
    if (!c.finish) continue;
    completion += c.finish->completion_tokens;
    if (!counted[c.prompt_index]) {
      cached += c.finish->cached_tokens;
      counted[c.prompt_index] = true;
    }
  }
  ojson u;
  u["prompt_tokens"] = prompt;
  u["completion_tokens"] = completion;
  u["total_tokens"] = prompt + completion;
  u["prompt_tokens_details"] = {{"cached_tokens", cached}};
  return u;
}

ojson finish_reason_json(const std::optional<FinishInfo>& f) {
  if (!f) return nullptr;
  return f->reason;
}

ojson token_bytes(const std::string& s) {
  ojson b = ojson::array();
  for (unsigned char ch : s) b.push_back(static_cast<int>(ch));
  return b;
}

ojson completion_logprobs(const ServingEngine& engine, const std::vector<TokenLogprob>& lps, size_t text_offset) {
  ojson tokens = ojson::array(), token_lps = ojson::array(), tops = ojson::array(), offsets = ojson::array();
  size_t off = text_offset;
  for (const TokenLogprob& lp : lps) {
    const std::string t = engine.token_text(lp.token);
    tokens.push_back(t);
    token_lps.push_back(lp.logprob);
    ojson top = ojson::object();
    for (const auto& [id, v] : lp.top) top[engine.token_text(id)] = v;
    tops.push_back(lp.top.empty() ? ojson(nullptr) : top);
    offsets.push_back(off);
    off += t.size();
  }
  return {{"tokens", tokens}, {"token_logprobs", token_lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

ojson chat_logprobs_json(const ServingEngine& engine, const std::vector<TokenLogprob>& lps) {
  ojson content = ojson::array();
  for (const TokenLogprob& lp : lps) {
    const std::string t = engine.token_text(lp.token);
    ojson top = ojson::array();
    for (const auto& [id, v] : lp.top) {
      const std::string tt = engine.token_text(id);
      top.push_back({{"token", tt}, {"logprob", v}, {"bytes", token_bytes(tt)}});
    }
    content.push_back({{"token", t}, {"logprob", lp.logprob}, {"bytes", token_bytes(t)}, {"top_logprobs", top}});
  }
  return {{"content", content}};
}

ojson generate_json(const Job& job, const Choice& c) {
  ojson meta;
  meta["id"] = str(job.public_id, "-", c.index);
  if (c.finish) {
    ojson fr = {{"type", c.finish->reason}};
    if (c.finish->matched_stop_str) fr["matched"] = *c.finish->matched_stop_str;
    if (c.finish->matched_stop_token) fr["matched"] = *c.finish->matched_stop_token;
    meta["finish_reason"] = fr;
  } else {
    meta["finish_reason"] = nullptr;
  }
  meta["prompt_tokens"] = job.prompt_lens[c.prompt_index];
  meta["completion_tokens"] = static_cast<int64_t>(c.tokens.size());
  meta["cached_tokens"] = c.finish ? c.finish->cached_tokens : 0;
  meta["e2e_latency"] = std::chrono::duration<double>(Clock::now() - job.start).count();
  if (job.logprobs >= 0) {
    ojson lps = ojson::array();
    for (const TokenLogprob& lp : c.logprobs) lps.push_back({lp.logprob, lp.token, nullptr});
    meta["output_token_logprobs"] = lps;
  }
  return {{"text", c.text}, {"output_ids", c.tokens}, {"meta_info", meta}};
}

ojson final_response(const Job& job) {
  if (job.kind == ApiKind::kGenerate) {
    ojson outs = ojson::array();
    for (const Choice& c : job.choices) outs.push_back(generate_json(job, c));
    return outs.size() == 1 ? outs[0] : outs;
  }
  ojson choices = ojson::array();
  for (const Choice& c : job.choices) {
    ojson ch;
    ch["index"] = c.index;
    if (job.kind == ApiKind::kChat) {
      ch["message"] = {{"role", "assistant"}, {"content", c.text}};
      ch["logprobs"] = job.chat_logprobs ? chat_logprobs_json(*job.engine, c.logprobs) : ojson(nullptr);
    } else {
      const std::string prefix = job.echo ? job.prompt_texts[c.prompt_index] : std::string();
      ch["text"] = prefix + c.text;
      ch["logprobs"] =
          job.logprobs >= 0 ? completion_logprobs(*job.engine, c.logprobs, prefix.size()) : ojson(nullptr);
    }
    ch["finish_reason"] = finish_reason_json(c.finish);
    if (c.finish && c.finish->matched_stop_str) ch["stop_reason"] = *c.finish->matched_stop_str;
    else if (c.finish && c.finish->matched_stop_token) ch["stop_reason"] = *c.finish->matched_stop_token;
    else ch["stop_reason"] = nullptr;
    choices.push_back(ch);
  }
  ojson j;
  j["id"] = job.public_id;
  j["object"] = job.kind == ApiKind::kChat ? "chat.completion" : "text_completion";
  j["created"] = job.created;
  j["model"] = job.model;
  j["choices"] = choices;
  j["usage"] = usage_json(job);
  return j;
}

// SSE chunks for the events of one pump.
std::string stream_chunks(Job& job, const std::vector<std::pair<int, StreamEvent>>& events) {
  std::string out;
  for (const auto& [idx, ev] : events) {
    Choice& c = job.choices[idx];
    if (job.kind == ApiKind::kGenerate) {
      out += sse(generate_json(job, c));
      continue;
    }
    ojson ch;
    ch["index"] = idx;
    if (job.kind == ApiKind::kChat) {
      ojson delta = ojson::object();
      if (!c.sent_role) {
        delta["role"] = "assistant";
        c.sent_role = true;
      }
      if (!ev.text.empty() || delta.contains("role")) delta["content"] = ev.text;
      ch["delta"] = delta;
      ch["logprobs"] =
          job.chat_logprobs && !ev.logprobs.empty() ? chat_logprobs_json(*job.engine, ev.logprobs) : ojson(nullptr);
    } else {
      ch["text"] = ev.text;
      ch["logprobs"] = job.logprobs >= 0 && !ev.logprobs.empty() ? completion_logprobs(*job.engine, ev.logprobs, 0)
                                                                 : ojson(nullptr);
    }
    ch["finish_reason"] = ev.finish ? ojson(ev.finish->reason) : ojson(nullptr);
    if (ev.finish && ev.finish->matched_stop_str) ch["stop_reason"] = *ev.finish->matched_stop_str;
    ojson j;
    j["id"] = job.public_id;
    j["object"] = job.kind == ApiKind::kChat ? "chat.completion.chunk" : "text_completion";
    j["created"] = job.created;
    j["model"] = job.model;
    j["choices"] = ojson::array({ch});
    out += sse(j);
  }
  return out;
}

// The stream's tail once every choice has finished: an engine error, the usage chunk, [DONE].
std::string stream_tail(const Job& job) {
  std::string out;
  if (auto e = job.engine_error()) out += sse(ApiError{500, *e, "internal_error", ""}.to_json());
  if (job.include_usage && job.kind != ApiKind::kGenerate) {
    ojson j;
    j["id"] = job.public_id;
    j["object"] = job.kind == ApiKind::kChat ? "chat.completion.chunk" : "text_completion";
    j["created"] = job.created;
    j["model"] = job.model;
    j["choices"] = ojson::array();
    j["usage"] = usage_json(job);
    out += sse(j);
  }
  return out + "data: [DONE]\n\n";
}

// On the exchange's executor: moves what the streams hold to the client.
void pump(const std::shared_ptr<Job>& job) {
  std::shared_ptr<HttpExchange> ex = job->exchange.lock();
  if (!ex || ex->disconnected()) {
    job->abort_unfinished();
    return;
  }
  if (job->answered) return;
  std::vector<std::pair<int, StreamEvent>> events = job->collect();
  if (job->stream) {
    std::string out = stream_chunks(*job, events);
    if (job->all_finished()) {
      out += stream_tail(*job);
      job->answered = true;
    }
    if (!out.empty() && !ex->write(std::move(out))) {
      job->abort_unfinished();  // the client is gone or does not read
      return;
    }
    if (job->answered) ex->end_stream();
  } else if (job->all_finished()) {
    job->answered = true;
    if (auto e = job->engine_error()) return ex->respond(error_response({500, *e, "internal_error", ""}));
    ex->respond(json_response(200, final_response(*job)));
  }
}

// From any thread (the scheduler's, through a stream listener): one pending pump at a time.
void schedule_pump(const std::shared_ptr<Job>& job) {
  if (job->pump_posted.exchange(true)) return;
  std::shared_ptr<HttpExchange> ex = job->exchange.lock();
  if (!ex) {
    job->pump_posted = false;
    return;
  }
  ex->post([job] {
    job->pump_posted = false;
    pump(job);
  });
}

// Tokenizes and submits every choice. On failure nothing stays queued (the job's destructor
// aborts what was submitted).
std::optional<ApiError> submit_all(ServingEngine& engine, Job& job, ParsedRequest& r) {
  std::vector<std::vector<int32_t>> prompt_ids;
  if (r.kind == ApiKind::kChat) {
    auto text = engine.render_chat(r.messages, r.tools, r.add_generation_prompt, r.chat_template_kwargs);
    if (!text.is_ok()) return ApiError::from_status(text.status());
    prompt_ids.push_back(engine.encode(*text, /*add_special_tokens=*/false));
    job.prompt_texts.push_back(*text);
  } else {
    for (const PromptInput& in : r.prompts) {
      if (in.text) {
        prompt_ids.push_back(engine.encode(*in.text, r.add_special_tokens));
        job.prompt_texts.push_back(*in.text);
      } else {
        prompt_ids.push_back(in.ids);
        bool ok = true;
        for (int32_t id : in.ids) ok = ok && id < engine.vocab_size();
        job.prompt_texts.push_back(ok ? engine.tokenizer().decode(in.ids, false) : std::string());
      }
    }
  }
  for (size_t p = 0; p < prompt_ids.size(); ++p) {
    if (prompt_ids[p].empty()) return ApiError::bad_request("the prompt is empty after tokenization", "prompt");
    job.prompt_lens.push_back(static_cast<int64_t>(prompt_ids[p].size()));
  }
  int index = 0;
  for (size_t p = 0; p < prompt_ids.size(); ++p) {
    SamplingParams params = r.params;
    if (r.kind == ApiKind::kChat && !r.max_tokens_given) {
      params.max_new_tokens = engine.max_context_len() - static_cast<int64_t>(prompt_ids[p].size());
      if (params.max_new_tokens < 1) {
        return ApiError::bad_request(str("the prompt has ", prompt_ids[p].size(),
                                         " tokens, which leaves no room in the context of ",
                                         engine.max_context_len(), " tokens"),
                                     "messages");
      }
    }
    for (int i = 0; i < r.n; ++i) {
      SamplingParams pi = params;
      if (pi.seed && i > 0) pi.seed = *pi.seed + static_cast<uint64_t>(i);
      const std::string group = r.n > 1 ? str(job.id, "-p", p) : std::string();
      auto req = engine.submit(prompt_ids[p], pi, str(job.id, "-", index), group, job.id);
      if (!req.is_ok()) {
        ApiError err = ApiError::from_status(req.status());
        if (req.status().code() == StatusCode::kInvalidArgument) err.param = "prompt";
        return err;
      }
      Choice c;
      c.index = index++;
      c.prompt_index = static_cast<int>(p);
      c.req = *req;
      job.choices.push_back(std::move(c));
    }
  }
  return std::nullopt;
}

}  // namespace

GenerationHandler::GenerationHandler(ServingEngine& engine, RidAliases& aliases)
    : engine_(engine), aliases_(aliases) {}

void GenerationHandler::handle(const std::shared_ptr<HttpExchange>& ex, ApiKind kind, const ojson& body) {
  ApiError err;
  std::optional<ParsedRequest> parsed = kind == ApiKind::kChat       ? parse_chat_request(body, &err)
                                        : kind == ApiKind::kGenerate ? parse_generate_request(body, &err)
                                                                     : parse_completion_request(body, &err);
  if (!parsed) return ex->respond(error_response(err));
  if (engine_.draining()) {
    return ex->respond(error_response({503, "the server is shutting down", "service_unavailable", ""}));
  }
  if (!parsed->model.empty() && parsed->model != engine_.model_name()) {
    return ex->respond(
        error_response({404, str("The model `", parsed->model, "` does not exist."), "not_found_error", "model"}));
  }
  auto job = std::make_shared<Job>();
  job->engine = &engine_;
  job->kind = kind;
  job->id = new_request_id(kind == ApiKind::kChat ? "chatcmpl-" : kind == ApiKind::kGenerate ? "" : "cmpl-");
  job->public_id = job->id;
  job->created = unix_now();
  job->model = engine_.model_name();
  job->stream = parsed->stream;
  job->include_usage = parsed->include_usage;
  job->chat_logprobs = parsed->chat_logprobs;
  job->logprobs = parsed->params.logprobs;
  job->echo = parsed->echo;
  job->exchange = ex;
  if (kind == ApiKind::kGenerate && !parsed->rid.empty()) {
    if (parsed->rid.size() > RidAliases::kMaxAliasLength) {
      return ex->respond(error_response(
          ApiError::bad_request(str("'rid' is longer than ", RidAliases::kMaxAliasLength, " characters"), "rid")));
    }
    const std::string ns = RidAliases::namespace_of(ex->request());
    if (!aliases_.add(ns, parsed->rid, job->id)) {
      return ex->respond(error_response(ApiError::bad_request(
          str("request id '", parsed->rid, "' is already in use by another of your requests"), "rid")));
    }
    job->public_id = parsed->rid;
    job->aliases = &aliases_;
    job->alias_namespace = ns;
  }
  if (std::optional<ApiError> e = submit_all(engine_, *job, *parsed)) return ex->respond(error_response(*e));
  ex->on_disconnect([job] { job->abort_unfinished(); });
  if (job->stream) {
    HttpHeaders headers;
    headers.add("Cache-Control", "no-cache");
    ex->begin_stream(200, "text/event-stream", std::move(headers));
  }
  std::weak_ptr<Job> weak = job;
  for (Choice& c : job->choices) {
    c.req->stream->set_listener([weak] {
      if (std::shared_ptr<Job> j = weak.lock()) schedule_pump(j);
    });
  }
}

}  // namespace rlm
