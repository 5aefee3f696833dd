#include "server/generation_handler.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "server/http_router.h"
#include "server/tool_grammar.h"

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
  std::vector<TokenLogprob> prompt_logprobs;  // of prompt tokens 1.. (prompt_logprobs, echo + logprobs)
  std::optional<FinishInfo> finish;
  bool sent_role = false;  // the first chunk has been sent
  std::unique_ptr<OutputParser> parser;  // streamed chat with tool-call or reasoning parsing
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
  std::string fingerprint;  // system_fingerprint of chat and completion responses
  bool stream = false;
  bool include_usage = false;
  bool chat_logprobs = false;
  std::optional<OutputFormats> formats;  // chat: read tool calls / reasoning from the output
  std::shared_ptr<ChatAnswerFormat> format;  // another API's answer shape (one chat choice), or null
  int32_t logprobs = -1;
  bool echo = false;
  int32_t prompt_logprobs = -1;  // the request's prompt_logprobs field
  std::vector<std::string> prompt_texts;   // for echo
  std::vector<std::vector<int32_t>> prompt_ids;
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
        c.prompt_logprobs.insert(c.prompt_logprobs.end(), e->prompt_logprobs.begin(), e->prompt_logprobs.end());
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

// OpenAI's tool_calls entries for a delta (id, type and name on a call's first piece).
ojson tool_calls_json(const std::vector<ToolCallDelta>& calls) {
  ojson out = ojson::array();
  for (const ToolCallDelta& d : calls) {
    ojson c = {{"index", d.index}};
    if (!d.id.empty()) {
      c["id"] = d.id;
      c["type"] = "function";
      c["function"] = {{"name", d.name}, {"arguments", d.arguments}};
    } else {
      c["function"] = {{"arguments", d.arguments}};
    }
    out.push_back(std::move(c));
  }
  return out;
}

// The non-streamed assistant message read by a finished parser.
ojson message_json(const OutputFormats& formats, const OutputParser& parser) {
  const OutputView& v = parser.view();
  ojson m = {{"role", "assistant"}};
  m["content"] = v.content.empty() && !v.calls.empty() ? ojson(nullptr) : ojson(v.content);
  if (formats.reasoning != ReasoningFormat::kNone) {
    m["reasoning_content"] = v.reasoning.empty() ? ojson(nullptr) : ojson(v.reasoning);
  }
  if (!v.calls.empty()) {
    ojson calls = ojson::array();
    for (size_t i = 0; i < v.calls.size(); ++i) {
      calls.push_back({{"id", parser.call_ids()[i]},
                       {"type", "function"},
                       {"function", {{"name", v.calls[i].name}, {"arguments", v.calls[i].arguments}}}});
    }
    m["tool_calls"] = calls;
  }
  return m;
}

// Two deltas of one pump as one (same-index argument pieces joined).
void merge(OutputDelta& into, OutputDelta more) {
  into.reasoning += more.reasoning;
  into.content += more.content;
  for (ToolCallDelta& d : more.calls) {
    if (!into.calls.empty() && into.calls.back().index == d.index && d.id.empty()) {
      into.calls.back().arguments += d.arguments;
    } else {
      into.calls.push_back(std::move(d));
    }
  }
}

ojson token_bytes(const std::string& s) {
  ojson b = ojson::array();
  for (unsigned char ch : s) b.push_back(static_cast<int>(ch));
  return b;
}

// Completions' logprobs object; with `echo` (echo + logprobs) the prompt's tokens come first, the
// first one without a logprob.
ojson completion_logprobs(const ServingEngine& engine, const std::vector<TokenLogprob>& lps, size_t text_offset,
                          const std::vector<int32_t>* echo_ids = nullptr,
                          const std::vector<TokenLogprob>* echo_lps = nullptr) {
  ojson tokens = ojson::array(), token_lps = ojson::array(), tops = ojson::array(), offsets = ojson::array();
  size_t off = text_offset;
  std::vector<TokenLogprob> all;
  if (echo_ids != nullptr && !echo_ids->empty()) {
    const std::string t = engine.token_text((*echo_ids)[0]);
    tokens.push_back(t);
    token_lps.push_back(nullptr);
    tops.push_back(nullptr);
    offsets.push_back(off);
    off += t.size();
    all = *echo_lps;
  }
  all.insert(all.end(), lps.begin(), lps.end());
  for (const TokenLogprob& lp : all) {
    const std::string t = engine.token_text(lp.token);
    tokens.push_back(t);
    token_lps.push_back(lp.logprob);
    ojson top = ojson::object();
    for (const auto& [id, v] : lp.top) top[engine.token_text(id)] = v;
    tops.push_back(top);  // logprobs: 0 gives {} per token, as vLLM does
    offsets.push_back(off);
    off += t.size();
  }
  return {{"tokens", tokens}, {"token_logprobs", token_lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

// vLLM's prompt_logprobs: null for the first prompt token, then per token an object keyed by token
// id holding the prompt token and its top alternatives ({"logprob", "rank", "decoded_token"}; the
// prompt token's rank is given when it is among the alternatives).
ojson prompt_logprobs_json(const ServingEngine& engine, const std::vector<TokenLogprob>& lps) {
  ojson out = ojson::array({nullptr});
  for (const TokenLogprob& lp : lps) {
    ojson entry = ojson::object();
    ojson own = {{"logprob", lp.logprob}};
    for (size_t r = 0; r < lp.top.size(); ++r) {
      if (lp.top[r].first == lp.token) own["rank"] = r + 1;
    }
    own["decoded_token"] = engine.token_text(lp.token);
    entry[std::to_string(lp.token)] = own;
    for (size_t r = 0; r < lp.top.size(); ++r) {
      const auto& [id, v] = lp.top[r];
      if (id == lp.token) continue;
      entry[std::to_string(id)] = {{"logprob", v}, {"rank", r + 1}, {"decoded_token", engine.token_text(id)}};
    }
    out.push_back(std::move(entry));
  }
  return out;
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

// The fields every response and chunk of a job starts with (OpenAI's envelope).
ojson envelope(const Job& job, const char* object) {
  ojson j;
  j["id"] = job.public_id;
  j["object"] = object;
  j["created"] = job.created;
  j["model"] = job.model;
  j["system_fingerprint"] = job.fingerprint;
  return j;
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

// The answer of a job with a ChatAnswerFormat: its one choice read by a parser.
ChatResult chat_result(const Job& job) {
  const Choice& c = job.choices[0];
  ChatResult r;
  if (c.parser) {
    r.view = c.parser->view();
    r.call_ids = c.parser->call_ids();
  } else {
    OutputParser parser(*job.formats);
    parser.feed(c.text);
    parser.finish();
    r.view = parser.view();
    r.call_ids = parser.call_ids();
  }
  if (c.finish) r.finish = *c.finish;
  r.finish.prompt_tokens = job.prompt_lens[0];
  return r;
}

ojson final_response(const Job& job) {
  if (job.format) return job.format->response(chat_result(job));
  if (job.kind == ApiKind::kGenerate) {
    ojson outs = ojson::array();
    for (const Choice& c : job.choices) outs.push_back(generate_json(job, c));
    return outs.size() == 1 ? outs[0] : outs;
  }
  ojson choices = ojson::array();
  for (const Choice& c : job.choices) {
    ojson ch;
    ch["index"] = c.index;
    std::string finish_reason = c.finish ? c.finish->reason : "";
    if (job.kind == ApiKind::kChat && job.formats) {
      OutputParser parser(*job.formats);
      parser.feed(c.text);
      parser.finish();
      ch["message"] = message_json(*job.formats, parser);
      if (!parser.view().calls.empty() && finish_reason == "stop") finish_reason = "tool_calls";
      ch["logprobs"] = job.chat_logprobs ? chat_logprobs_json(*job.engine, c.logprobs) : ojson(nullptr);
    } else if (job.kind == ApiKind::kChat) {
      ch["message"] = {{"role", "assistant"}, {"content", c.text}};
      ch["logprobs"] = job.chat_logprobs ? chat_logprobs_json(*job.engine, c.logprobs) : ojson(nullptr);
    } else {
      const std::string prefix = job.echo ? job.prompt_texts[c.prompt_index] : std::string();
      ch["text"] = prefix + c.text;
      ch["logprobs"] = job.logprobs >= 0 ? completion_logprobs(*job.engine, c.logprobs, 0,
                                                               job.echo ? &job.prompt_ids[c.prompt_index] : nullptr,
                                                               &c.prompt_logprobs)
                                         : ojson(nullptr);
      if (job.prompt_logprobs >= 0) ch["prompt_logprobs"] = prompt_logprobs_json(*job.engine, c.prompt_logprobs);
    }
    ch["finish_reason"] = c.finish ? ojson(finish_reason) : ojson(nullptr);
    if (c.finish && c.finish->matched_stop_str) ch["stop_reason"] = *c.finish->matched_stop_str;
    else if (c.finish && c.finish->matched_stop_token) ch["stop_reason"] = *c.finish->matched_stop_token;
    else ch["stop_reason"] = nullptr;
    choices.push_back(ch);
  }
  ojson j = envelope(job, job.kind == ApiKind::kChat ? "chat.completion" : "text_completion");
  j["choices"] = choices;
  j["usage"] = usage_json(job);
  if (job.kind == ApiKind::kChat && job.prompt_logprobs >= 0) {  // one prompt: vLLM's top-level field
    j["prompt_logprobs"] = prompt_logprobs_json(*job.engine, job.choices[0].prompt_logprobs);
  }
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
    // Prompt logprobs arrive before the first token; they go out with the choice's first chunk.
    if (ev.text.empty() && ev.token_ids.empty() && !ev.finish && !ev.prompt_logprobs.empty()) continue;
    if (job.format) {
      OutputDelta d = c.parser->feed(ev.text);
      if (ev.finish) merge(d, c.parser->finish());
      if (!d.empty()) out += job.format->stream_delta(d);
      continue;
    }
    const bool first_chunk = !c.sent_role;
    ojson ch;
    ch["index"] = idx;
    std::string finish_reason = ev.finish ? ev.finish->reason : "";
    if (job.kind == ApiKind::kChat) {
      ojson delta = ojson::object();
      const bool first = !c.sent_role;
      if (first) {
        delta["role"] = "assistant";
        c.sent_role = true;
      }
      if (c.parser) {
        OutputDelta d = c.parser->feed(ev.text);
        if (ev.finish) merge(d, c.parser->finish());
        if (!d.content.empty() || first) delta["content"] = d.content;
        if (!d.reasoning.empty()) delta["reasoning_content"] = d.reasoning;
        if (!d.calls.empty()) delta["tool_calls"] = tool_calls_json(d.calls);
        if (ev.finish && !c.parser->view().calls.empty() && finish_reason == "stop") finish_reason = "tool_calls";
        // A step whose text is all held back sends nothing (unless it carries logprobs or the end).
        if (!first && d.empty() && !ev.finish && !(job.chat_logprobs && !ev.logprobs.empty())) continue;
      } else if (!ev.text.empty() || first) {
        delta["content"] = ev.text;
      }
      ch["delta"] = delta;
      ch["logprobs"] =
          job.chat_logprobs && !ev.logprobs.empty() ? chat_logprobs_json(*job.engine, ev.logprobs) : ojson(nullptr);
    } else {
      // The first chunk echoes the prompt (with its logprobs), as the whole response does.
      const bool echo = job.echo && first_chunk;
      c.sent_role = true;
      ch["text"] = echo ? job.prompt_texts[c.prompt_index] + ev.text : ev.text;
      ch["logprobs"] = job.logprobs >= 0 && (!ev.logprobs.empty() || echo)
                           ? completion_logprobs(*job.engine, ev.logprobs, 0,
                                                 echo ? &job.prompt_ids[c.prompt_index] : nullptr, &c.prompt_logprobs)
                           : ojson(nullptr);
      if (job.prompt_logprobs >= 0 && first_chunk) {
        ch["prompt_logprobs"] = prompt_logprobs_json(*job.engine, c.prompt_logprobs);
      }
    }
    ch["finish_reason"] = ev.finish ? ojson(finish_reason) : ojson(nullptr);
    if (ev.finish && ev.finish->matched_stop_str) ch["stop_reason"] = *ev.finish->matched_stop_str;
    ojson j = envelope(job, job.kind == ApiKind::kChat ? "chat.completion.chunk" : "text_completion");
    if (job.kind == ApiKind::kChat && job.prompt_logprobs >= 0 && first_chunk) {
      j["prompt_logprobs"] = prompt_logprobs_json(*job.engine, c.prompt_logprobs);
    }
    j["choices"] = ojson::array({ch});
    out += sse(j);
  }
  return out;
}

// The stream's tail once every choice has finished: an engine error, the usage chunk, [DONE].
std::string stream_tail(const Job& job) {
  if (job.format) {
    if (auto e = job.engine_error()) return job.format->stream_error(*e);
    return job.format->stream_end(chat_result(job));
  }
  std::string out;
  if (auto e = job.engine_error()) out += sse(ApiError{500, *e, "internal_error", ""}.to_json());
  if (job.include_usage && job.kind != ApiKind::kGenerate) {
    ojson j = envelope(job, job.kind == ApiKind::kChat ? "chat.completion.chunk" : "text_completion");
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
    if (auto e = job->engine_error()) {
      const ApiError err{500, *e, "internal_error", ""};
      return ex->respond(job->format ? job->format->error(err) : error_response(err));
    }
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
    auto text = render_chat_prompt(engine, r);
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
  job.prompt_ids = prompt_ids;
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
      if (job.formats && job.stream) c.parser = std::make_unique<OutputParser>(*job.formats);
      job.choices.push_back(std::move(c));
    }
  }
  return std::nullopt;
}

}  // namespace

StatusOr<std::string> render_chat_prompt(const ServingEngine& engine, const ParsedRequest& r) {
  StatusOr<std::string> text = engine.render_chat(r.messages, r.tools, r.add_generation_prompt, r.chat_template_kwargs);
  if (!text.is_ok() || !r.continue_final_message) return text;
  // As vLLM: the rendered text up to the end of the last message's content.
  const ojson& last = r.messages.back();
  const std::string content = last.contains("content") && last["content"].is_string() ? last["content"].get<std::string>() : "";
  if (content.empty()) return invalid_argument("continue_final_message needs a final message with text content");
  const size_t at = text->rfind(content);
  if (at == std::string::npos) {
    return invalid_argument("continue_final_message: the chat template does not render the final message's content");
  }
  return text->substr(0, at + content.size());
}

std::string system_fingerprint(const ServingEngine& engine) {
  // FNV-1a over what shapes the outputs: the model, its vocabulary and context.
  const std::string key = str("radixlm|", engine.model_name(), "|", engine.vocab_size(), "|", engine.max_context_len());
  uint64_t h = 1469598103934665603ull;
  for (char c : key) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  char buf[24];
  std::snprintf(buf, sizeof(buf), "fp_%012llx", static_cast<unsigned long long>(h & 0xffffffffffffull));
  return buf;
}

GenerationHandler::GenerationHandler(ServingEngine& engine, RidAliases& aliases, std::vector<std::string> model_names,
                                     ToolFormat tool_format, ReasoningFormat reasoning_format)
    : engine_(engine),
      aliases_(aliases),
      model_names_(std::move(model_names)),
      fingerprint_(system_fingerprint(engine)),
      tool_format_(tool_format),
      reasoning_format_(reasoning_format) {}

void GenerationHandler::handle(const std::shared_ptr<HttpExchange>& ex, ApiKind kind, const ojson& body) {
  ApiError err;
  std::optional<ParsedRequest> parsed = kind == ApiKind::kChat       ? parse_chat_request(body, &err)
                                        : kind == ApiKind::kGenerate ? parse_generate_request(body, &err)
                                                                     : parse_completion_request(body, &err);
  if (!parsed) return ex->respond(error_response(err));
  start(ex, kind, *parsed, nullptr);
}

void GenerationHandler::handle_chat(const std::shared_ptr<HttpExchange>& ex, ParsedRequest parsed,
                                    std::shared_ptr<ChatAnswerFormat> format) {
  RLM_CHECK(parsed.kind == ApiKind::kChat && parsed.n == 1) << "handle_chat() takes one chat choice";
  start(ex, ApiKind::kChat, parsed, std::move(format));
}

void GenerationHandler::start(const std::shared_ptr<HttpExchange>& ex, ApiKind kind, ParsedRequest& req,
                              std::shared_ptr<ChatAnswerFormat> format) {
  ParsedRequest* parsed = &req;
  auto fail = [&](const ApiError& e) { ex->respond(format ? format->error(e) : error_response(e)); };
  log_ignored_fields(parsed->ignored_fields);
  if (engine_.draining()) return fail({503, "the server is shutting down", "service_unavailable", ""});
  if (!parsed->model.empty() &&
      std::find(model_names_.begin(), model_names_.end(), parsed->model) == model_names_.end()) {
    return fail({404, str("The model `", parsed->model, "` does not exist."), "not_found_error", "model"});
  }
  auto job = std::make_shared<Job>();
  job->engine = &engine_;
  job->kind = kind;
  job->id = new_request_id(kind == ApiKind::kChat ? "chatcmpl-" : kind == ApiKind::kGenerate ? "" : "cmpl-");
  job->public_id = job->id;
  job->created = unix_now();
  job->model = engine_.model_name();
  job->fingerprint = fingerprint_;
  job->stream = parsed->stream;
  job->include_usage = parsed->include_usage;
  job->chat_logprobs = parsed->chat_logprobs;
  const bool read_tools = kind == ApiKind::kChat && tool_format_ != ToolFormat::kNone && parsed->tools.is_array() &&
                          !parsed->tools.empty() && parsed->tool_choice != "none";
  if (read_tools || (kind == ApiKind::kChat && reasoning_format_ != ReasoningFormat::kNone) || format) {
    job->formats = OutputFormats{read_tools ? tool_format_ : ToolFormat::kNone, reasoning_format_, parsed->tools};
  }
  job->format = format;
  if (parsed->tool_choice == "required" || parsed->tool_choice == "function") {
    // Constrained to calls in the format of the active parser, which reads them back.
    StatusOr<std::string> tag = tool_call_structural_tag(tool_format_, parsed->tools, parsed->tool_choice_function);
    if (!tag.is_ok()) return fail(ApiError::bad_request(tag.status().message(), "tool_choice"));
    parsed->grammar = grammar::GrammarSpec{grammar::GrammarKind::kStructuralTag, std::move(*tag)};
    parsed->grammar_field = "tool_choice";
  }
  if (parsed->grammar.active()) {
    auto compiled = engine_.compile_grammar(parsed->grammar);
    if (!compiled.is_ok()) {
      return fail(ApiError::bad_request(compiled.status().message(), parsed->grammar_field));
    }
    parsed->params.grammar = std::move(*compiled);
  }
  job->logprobs = parsed->params.logprobs;
  job->echo = parsed->echo;
  job->prompt_logprobs = parsed->prompt_logprobs;
  job->exchange = ex;
  if (kind == ApiKind::kGenerate && !parsed->rid.empty()) {
    if (parsed->rid.size() > RidAliases::kMaxAliasLength) {
      return fail(ApiError::bad_request(str("'rid' is longer than ", RidAliases::kMaxAliasLength, " characters"), "rid"));
    }
    const std::string ns = RidAliases::namespace_of(ex->request());
    if (!aliases_.add(ns, parsed->rid, job->id)) {
      return fail(ApiError::bad_request(str("request id '", parsed->rid, "' is already in use by another of your requests"),
                                        "rid"));
    }
    job->public_id = parsed->rid;
    job->aliases = &aliases_;
    job->alias_namespace = ns;
  }
  if (std::optional<ApiError> e = submit_all(engine_, *job, req)) return fail(*e);
  ex->on_disconnect([job] { job->abort_unfinished(); });
  if (job->stream) {
    HttpHeaders headers;
    headers.add("Cache-Control", "no-cache");
    ex->begin_stream(200, "text/event-stream", std::move(headers));
    if (format) ex->write(format->stream_begin(job->prompt_lens[0]));
  }
  std::weak_ptr<Job> weak = job;
  for (Choice& c : job->choices) {
    c.req->stream->set_listener([weak] {
      if (std::shared_ptr<Job> j = weak.lock()) schedule_pump(j);
    });
  }
}

}  // namespace rlm
