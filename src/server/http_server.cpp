#include "server/http_server.h"

#include <httplib.h>

#include <chrono>
#include <random>

#include "server/openai_protocol.h"

namespace rlm {

namespace {

using Clock = std::chrono::steady_clock;

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string random_id(const char* prefix) {
  thread_local std::mt19937_64 rng(std::random_device{}());
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%s%016llx%08llx", prefix, static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(rng() & 0xffffffffULL));
  return buf;
}

void send_json(httplib::Response& res, int status, const ojson& j) {
  res.status = status;
  res.set_content(j.dump(-1, ' ', false, ojson::error_handler_t::replace), "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) { send_json(res, e.http_status, e.to_json()); }

bool parse_body(const httplib::Request& req, ojson* out, ApiError* err) {
  try {
    *out = ojson::parse(req.body);
  } catch (const std::exception& e) {
    *err = ApiError::bad_request(str("invalid JSON body: ", e.what()));
    return false;
  }
  if (!out->is_object()) {
    *err = ApiError::bad_request("the request body must be a JSON object");
    return false;
  }
  return true;
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

// Everything one HTTP request needs across the calls of a streaming provider.
struct Job {
  ApiKind kind = ApiKind::kCompletion;
  std::string id;
  int64_t created = 0;
  std::string model;
  bool include_usage = false;
  bool chat_logprobs = false;
  int32_t logprobs = -1;
  bool echo = false;
  std::vector<std::string> prompt_texts;   // for echo
  std::vector<int64_t> prompt_lens;
  std::vector<Choice> choices;
  bool done_sent = false;
  Clock::time_point start = Clock::now();
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

class Routes {
 public:
  Routes(ServingEngine& engine) : engine_(engine), started_(unix_now()) {}

  ojson token_bytes(const std::string& s) const {
    ojson b = ojson::array();
    for (unsigned char ch : s) b.push_back(static_cast<int>(ch));
    return b;
  }

  ojson completion_logprobs(const std::vector<TokenLogprob>& lps, size_t text_offset) const {
    ojson tokens = ojson::array(), token_lps = ojson::array(), tops = ojson::array(), offsets = ojson::array();
    size_t off = text_offset;
    for (const TokenLogprob& lp : lps) {
      const std::string t = engine_.token_text(lp.token);
      tokens.push_back(t);
      token_lps.push_back(lp.logprob);
      ojson top = ojson::object();
      for (const auto& [id, v] : lp.top) top[engine_.token_text(id)] = v;
      tops.push_back(lp.top.empty() ? ojson(nullptr) : top);
      offsets.push_back(off);
      off += t.size();
    }
    return {{"tokens", tokens}, {"token_logprobs", token_lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
  }

  ojson chat_logprobs(const std::vector<TokenLogprob>& lps) const {
    ojson content = ojson::array();
    for (const TokenLogprob& lp : lps) {
      const std::string t = engine_.token_text(lp.token);
      ojson top = ojson::array();
      for (const auto& [id, v] : lp.top) {
        const std::string tt = engine_.token_text(id);
        top.push_back({{"token", tt}, {"logprob", v}, {"bytes", token_bytes(tt)}});
      }
      content.push_back({{"token", t}, {"logprob", lp.logprob}, {"bytes", token_bytes(t)}, {"top_logprobs", top}});
    }
    return {{"content", content}};
  }

  // Tokenizes, checks the model name and submits every choice. On failure nothing stays queued.
  std::optional<std::shared_ptr<Job>> start_job(ParsedRequest& r, ApiError* err) {
    if (!r.model.empty() && r.model != engine_.model_name()) {
      *err = {404, str("The model `", r.model, "` does not exist."), "not_found_error", "model"};
      return std::nullopt;
    }
    auto job = std::make_shared<Job>();
    job->kind = r.kind;
    job->created = unix_now();
    job->model = engine_.model_name();
    job->include_usage = r.include_usage;
    job->chat_logprobs = r.chat_logprobs;
    job->logprobs = r.params.logprobs;
    job->echo = r.echo;
    job->id = r.kind == ApiKind::kChat ? random_id("chatcmpl-") : r.kind == ApiKind::kGenerate ? random_id("")
                                                                                              : random_id("cmpl-");
    if (r.kind == ApiKind::kGenerate && !r.rid.empty()) job->id = r.rid;
    std::vector<std::vector<int32_t>> prompt_ids;
    if (r.kind == ApiKind::kChat) {
      auto text = engine_.render_chat(r.messages, r.tools, r.add_generation_prompt, r.chat_template_kwargs);
      if (!text.is_ok()) {
        *err = ApiError::from_status(text.status());
        return std::nullopt;
      }
      prompt_ids.push_back(engine_.encode(*text, /*add_special_tokens=*/false));
      job->prompt_texts.push_back(*text);
    } else {
      for (const PromptInput& in : r.prompts) {
        if (in.text) {
          prompt_ids.push_back(engine_.encode(*in.text, r.add_special_tokens));
          job->prompt_texts.push_back(*in.text);
        } else {
          prompt_ids.push_back(in.ids);
          bool ok = true;
          for (int32_t id : in.ids) ok = ok && id < engine_.vocab_size();
          job->prompt_texts.push_back(ok ? engine_.tokenizer().decode(in.ids, false) : std::string());
        }
      }
    }
    for (size_t p = 0; p < prompt_ids.size(); ++p) {
      if (prompt_ids[p].empty()) {
        *err = ApiError::bad_request("the prompt is empty after tokenization", "prompt");
        return std::nullopt;
      }
      job->prompt_lens.push_back(static_cast<int64_t>(prompt_ids[p].size()));
    }
    int index = 0;
    for (size_t p = 0; p < prompt_ids.size(); ++p) {
      SamplingParams params = r.params;
      if (r.kind == ApiKind::kChat && !r.max_tokens_given) {
        params.max_new_tokens = engine_.max_context_len() - static_cast<int64_t>(prompt_ids[p].size());
        if (params.max_new_tokens < 1) {
          *err = ApiError::bad_request(str("the prompt has ", prompt_ids[p].size(),
                                           " tokens, which leaves no room in the context of ",
                                           engine_.max_context_len(), " tokens"),
                                       "messages");
          abort_job(*job);
          return std::nullopt;
        }
      }
      for (int i = 0; i < r.n; ++i) {
        SamplingParams pi = params;
        if (pi.seed && i > 0) pi.seed = *pi.seed + static_cast<uint64_t>(i);
        const std::string group = r.n > 1 ? str(job->id, "-p", p) : std::string();
        auto req = engine_.submit(prompt_ids[p], pi, str(job->id, "-", index), group);
        if (!req.is_ok()) {
          *err = ApiError::from_status(req.status());
          if (req.status().code() == StatusCode::kInvalidArgument) err->param = "prompt";
          abort_job(*job);
          return std::nullopt;
        }
        Choice c;
        c.index = index++;
        c.prompt_index = static_cast<int>(p);
        c.req = *req;
        job->choices.push_back(std::move(c));
      }
    }
    return job;
  }

  void abort_job(Job& job) {
    for (Choice& c : job.choices) {
      if (!c.finish) engine_.abort(c.req->rid);
    }
  }

  // Pulls available events into the choices; returns the events per choice (for streaming).
  std::vector<std::pair<int, StreamEvent>> poll(Job& job, std::chrono::milliseconds wait) {
    std::vector<std::pair<int, StreamEvent>> out;
    const auto deadline = Clock::now() + wait;
    while (out.empty()) {
      bool all_done = true;
      for (Choice& c : job.choices) {
        if (c.finish) continue;
        all_done = false;
        while (auto e = c.req->stream->pop(std::chrono::milliseconds(0))) {
          c.text += e->text;
          c.tokens.insert(c.tokens.end(), e->token_ids.begin(), e->token_ids.end());
          c.logprobs.insert(c.logprobs.end(), e->logprobs.begin(), e->logprobs.end());
          if (e->finish) c.finish = e->finish;
          out.emplace_back(c.index, std::move(*e));
          if (c.finish) break;
        }
      }
      if (all_done || Clock::now() >= deadline) break;
      if (out.empty()) {
        // Block briefly on the first unfinished choice.
        for (Choice& c : job.choices) {
          if (c.finish) continue;
          if (auto e = c.req->stream->pop(std::chrono::milliseconds(5))) {
            c.text += e->text;
            c.tokens.insert(c.tokens.end(), e->token_ids.begin(), e->token_ids.end());
            c.logprobs.insert(c.logprobs.end(), e->logprobs.begin(), e->logprobs.end());
            if (e->finish) c.finish = e->finish;
            out.emplace_back(c.index, std::move(*e));
          }
          break;
        }
      }
    }
    return out;
  }

  static bool all_finished(const Job& job) {
    for (const Choice& c : job.choices) if (!c.finish) return false;
    return true;
  }

  static std::optional<std::string> engine_error(const Job& job) {
    for (const Choice& c : job.choices) {
      if (c.finish && !c.finish->error.empty()) return c.finish->error;
    }
    return std::nullopt;
  }

  ojson final_response(const Job& job) const {
    ojson choices = ojson::array();
    if (job.kind == ApiKind::kGenerate) {
      ojson outs = ojson::array();
      for (const Choice& c : job.choices) outs.push_back(generate_json(job, c));
      return outs.size() == 1 ? outs[0] : outs;
    }
    for (const Choice& c : job.choices) {
      ojson ch;
      ch["index"] = c.index;
      if (job.kind == ApiKind::kChat) {
        ch["message"] = {{"role", "assistant"}, {"content", c.text}};
        ch["logprobs"] = job.chat_logprobs ? chat_logprobs(c.logprobs) : ojson(nullptr);
      } else {
        const std::string prefix = job.echo ? job.prompt_texts[c.prompt_index] : std::string();
        ch["text"] = prefix + c.text;
        ch["logprobs"] = job.logprobs >= 0 ? completion_logprobs(c.logprobs, prefix.size()) : ojson(nullptr);
      }
      ch["finish_reason"] = finish_reason_json(c.finish);
      if (c.finish && c.finish->matched_stop_str) ch["stop_reason"] = *c.finish->matched_stop_str;
      else if (c.finish && c.finish->matched_stop_token) ch["stop_reason"] = *c.finish->matched_stop_token;
      else ch["stop_reason"] = nullptr;
      choices.push_back(ch);
    }
    ojson j;
    j["id"] = job.id;
    j["object"] = job.kind == ApiKind::kChat ? "chat.completion" : "text_completion";
    j["created"] = job.created;
    j["model"] = job.model;
    j["choices"] = choices;
    j["usage"] = usage_json(job);
    return j;
  }

  ojson generate_json(const Job& job, const Choice& c) const {
    ojson meta;
    meta["id"] = c.req->rid;
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

  // SSE chunks for the events of one poll.
  std::string stream_chunks(Job& job, const std::vector<std::pair<int, StreamEvent>>& events) const {
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
        ch["logprobs"] = job.chat_logprobs && !ev.logprobs.empty() ? chat_logprobs(ev.logprobs) : ojson(nullptr);
      } else {
        ch["text"] = ev.text;
        ch["logprobs"] = job.logprobs >= 0 && !ev.logprobs.empty() ? completion_logprobs(ev.logprobs, 0)
                                                                   : ojson(nullptr);
      }
      ch["finish_reason"] = ev.finish ? ojson(ev.finish->reason) : ojson(nullptr);
      if (ev.finish && ev.finish->matched_stop_str) ch["stop_reason"] = *ev.finish->matched_stop_str;
      ojson j;
      j["id"] = job.id;
      j["object"] = job.kind == ApiKind::kChat ? "chat.completion.chunk" : "text_completion";
      j["created"] = job.created;
      j["model"] = job.model;
      j["choices"] = ojson::array({ch});
      out += sse(j);
    }
    return out;
  }

  void handle_generation(const httplib::Request& hreq, httplib::Response& res, ApiKind kind) {
    ojson body;
    ApiError err;
    if (!parse_body(hreq, &body, &err)) return send_error(res, err);
    std::optional<ParsedRequest> parsed = kind == ApiKind::kChat       ? parse_chat_request(body, &err)
                                          : kind == ApiKind::kGenerate ? parse_generate_request(body, &err)
                                                                       : parse_completion_request(body, &err);
    if (!parsed) return send_error(res, err);
    if (engine_.draining()) return send_error(res, {503, "the server is shutting down", "service_unavailable", ""});
    auto job_opt = start_job(*parsed, &err);
    if (!job_opt) return send_error(res, err);
    std::shared_ptr<Job> job = *job_opt;
    if (!parsed->stream) {
      while (!all_finished(*job)) poll(*job, std::chrono::milliseconds(200));
      if (auto e = engine_error(*job)) return send_error(res, {500, *e, "internal_error", ""});
      return send_json(res, 200, final_response(*job));
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, job](size_t, httplib::DataSink& sink) {
          if (!sink.is_writable()) return false;
          auto events = poll(*job, std::chrono::milliseconds(50));
          std::string out = stream_chunks(*job, events);
          if (all_finished(*job) && !job->done_sent) {
            if (auto e = engine_error(*job)) out += sse(ApiError{500, *e, "internal_error", ""}.to_json());
            if (job->include_usage && job->kind != ApiKind::kGenerate) {
              ojson j;
              j["id"] = job->id;
              j["object"] = job->kind == ApiKind::kChat ? "chat.completion.chunk" : "text_completion";
              j["created"] = job->created;
              j["model"] = job->model;
              j["choices"] = ojson::array();
              j["usage"] = usage_json(*job);
              out += sse(j);
            }
            out += "data: [DONE]\n\n";
            job->done_sent = true;
          }
          if (!out.empty() && !sink.write(out.data(), out.size())) return false;
          if (job->done_sent) sink.done();
          return true;
        },
        [this, job](bool success) {
          if (!success || !all_finished(*job)) abort_job(*job);  // client went away
        });
  }

  void handle_tokenize(const httplib::Request& hreq, httplib::Response& res) {
    ojson body;
    ApiError err;
    if (!parse_body(hreq, &body, &err)) return send_error(res, err);
    if (body.contains("model") && !body["model"].is_null() &&
        (!body["model"].is_string() || body["model"].get<std::string>() != engine_.model_name())) {
      return send_error(res, {404, "The model does not exist.", "not_found_error", "model"});
    }
    bool add_special = !body.contains("messages");
    if (body.contains("add_special_tokens")) {
      if (!body["add_special_tokens"].is_boolean()) {
        return send_error(res, ApiError::bad_request("'add_special_tokens' must be a boolean", "add_special_tokens"));
      }
      add_special = body["add_special_tokens"].get<bool>();
    }
    std::string text;
    if (body.contains("prompt") && body["prompt"].is_string()) {
      text = body["prompt"].get<std::string>();
    } else if (body.contains("messages")) {
      ojson chat = body;
      chat.erase("add_special_tokens");
      if (!chat.contains("model")) chat["model"] = engine_.model_name();
      auto parsed = parse_chat_request(chat, &err);
      if (!parsed) return send_error(res, err);
      auto rendered = engine_.render_chat(parsed->messages, parsed->tools, parsed->add_generation_prompt,
                                          parsed->chat_template_kwargs);
      if (!rendered.is_ok()) return send_error(res, ApiError::from_status(rendered.status()));
      text = *rendered;
    } else {
      return send_error(res, ApiError::bad_request("give 'prompt' (a string) or 'messages'", "prompt"));
    }
    std::vector<int32_t> ids = engine_.encode(text, add_special);
    send_json(res, 200,
              {{"tokens", ids}, {"count", static_cast<int64_t>(ids.size())}, {"max_model_len", engine_.max_context_len()}});
  }

  void handle_detokenize(const httplib::Request& hreq, httplib::Response& res) {
    ojson body;
    ApiError err;
    if (!parse_body(hreq, &body, &err)) return send_error(res, err);
    if (!body.contains("tokens") || !body["tokens"].is_array()) {
      return send_error(res, ApiError::bad_request("'tokens' must be an array of token ids", "tokens"));
    }
    std::vector<int32_t> ids;
    for (const auto& t : body["tokens"]) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= engine_.vocab_size()) {
        return send_error(res, ApiError::bad_request(str("token ", t.dump(), " is not a valid id"), "tokens"));
      }
      ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
    send_json(res, 200, {{"prompt", engine_.tokenizer().decode(ids, false)}});
  }

  void handle_models(httplib::Response& res) {
    ojson m = {{"id", engine_.model_name()}, {"object", "model"},         {"created", started_},
               {"owned_by", "radixlm"},       {"root", engine_.model_name()}, {"max_model_len", engine_.max_context_len()}};
    send_json(res, 200, {{"object", "list"}, {"data", ojson::array({m})}});
  }

  void handle_debug_kv(httplib::Response& res) {
    const SchedulerGauges g = engine_.metrics().gauges();
    send_json(res, 200,
              {{"kv_pages_total", g.kv_pages_total},
               {"kv_pages_free", g.kv_pages_free},
               {"page_size", g.page_size},
               {"cache_tokens", g.cache_tokens},
               {"cache_evictable_tokens", g.cache_evictable},
               {"cache_protected_tokens", g.cache_tokens - g.cache_evictable},
               {"running", g.running},
               {"queued", g.queued}});
  }

  ServingEngine& engine_;
  int64_t started_;
};

}  // namespace

HttpServer::HttpServer(ServingEngine& engine, HttpServerConfig config)
    : engine_(engine), config_(std::move(config)), server_(std::make_unique<httplib::Server>()) {
  install_routes();
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::install_routes() {
  auto routes = std::make_shared<Routes>(engine_);
  httplib::Server& s = *server_;
  const int threads = config_.num_threads;
  s.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  s.set_payload_max_length(64 * 1024 * 1024);
  const std::string key = config_.api_key;
  s.set_pre_routing_handler([key](const httplib::Request& req, httplib::Response& res) {
    if (key.empty() || req.path == "/health" || req.path == "/metrics") return httplib::Server::HandlerResponse::Unhandled;
    const std::string auth = req.get_header_value("Authorization");
    if (auth != "Bearer " + key) {
      send_error(res, {401, auth.empty() ? "missing API key (Authorization: Bearer ...)" : "invalid API key",
                       "authentication_error", ""});
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string msg = "internal error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      msg = str("internal error: ", e.what());
    } catch (...) {
    }
    send_error(res, {500, msg, "internal_error", ""});
  });
  s.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    if (res.status == 404) {
      send_error(res, {404, str("no route for ", req.method, " ", req.path), "not_found_error", ""});
    } else {
      send_error(res, {res.status, str("HTTP error ", res.status), "invalid_request_error", ""});
    }
    return httplib::Server::HandlerResponse::Handled;
  }));
  s.Post("/v1/completions", [routes](const httplib::Request& q, httplib::Response& r) {
    routes->handle_generation(q, r, ApiKind::kCompletion);
  });
  s.Post("/v1/chat/completions", [routes](const httplib::Request& q, httplib::Response& r) {
    routes->handle_generation(q, r, ApiKind::kChat);
  });
  s.Post("/generate", [routes](const httplib::Request& q, httplib::Response& r) {
    routes->handle_generation(q, r, ApiKind::kGenerate);
  });
  s.Get("/v1/models", [routes](const httplib::Request&, httplib::Response& r) { routes->handle_models(r); });
  s.Post("/tokenize", [routes](const httplib::Request& q, httplib::Response& r) { routes->handle_tokenize(q, r); });
  s.Post("/detokenize", [routes](const httplib::Request& q, httplib::Response& r) { routes->handle_detokenize(q, r); });
  ServingEngine* engine = &engine_;
  // The limits chosen at start-up (serving_engine.h).
  s.Get("/server_info", [engine](const httplib::Request&, httplib::Response& r) {
    send_json(r, 200, engine->server_info());
  });
  s.Get("/health", [engine](const httplib::Request&, httplib::Response& r) {
    if (engine->draining()) return send_json(r, 503, {{"status", "shutting down"}});
    send_json(r, 200, {{"status", "ok"}});
  });
  s.Get("/metrics", [engine](const httplib::Request&, httplib::Response& r) {
    r.set_content(engine->metrics().render_prometheus(), "text/plain; version=0.0.4");
  });
  s.Post("/abort_request", [engine](const httplib::Request& q, httplib::Response& r) {
    ojson body;
    ApiError err;
    if (!parse_body(q, &body, &err)) return send_error(r, err);
    if (!body.contains("rid") || !body["rid"].is_string() || body["rid"].get<std::string>().empty()) {
      return send_error(r, ApiError::bad_request("'rid' (the request id to abort) must be a non-empty string", "rid"));
    }
    engine->abort(body["rid"].get<std::string>());
    send_json(r, 200, {{"status", "abort requested"}});
  });
  s.Get("/debug/kv", [routes](const httplib::Request&, httplib::Response& r) { routes->handle_debug_kv(r); });
  s.Post("/flush_cache", [engine](const httplib::Request&, httplib::Response& r) {
    // Like SGLang's /flush_cache: answers once the cache is flushed, which happens when no request
    // is running; a busy server answers 202 and flushes when it is next idle.
    if (engine->flush_cache(std::chrono::seconds(10))) {
      send_json(r, 200, {{"status", "flushed"}});
    } else {
      send_json(r, 202, {{"status", "flush pending: requests are running; the cache is flushed when the server is idle"}});
    }
  });
}

bool HttpServer::listen() { return server_->listen(config_.host, config_.port); }

int HttpServer::bind() {
  if (config_.port == 0) return server_->bind_to_any_port(config_.host);
  return server_->bind_to_port(config_.host, config_.port) ? config_.port : -1;
}

bool HttpServer::listen_after_bind() { return server_->listen_after_bind(); }

void HttpServer::stop() {
  if (server_) server_->stop();
}

}  // namespace rlm
