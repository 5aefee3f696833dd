#include "server/openai_protocol.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <set>

namespace rlm {

namespace {

// Small checked accessors; each failure fills *err and returns false.
class Fields {
 public:
  Fields(const ojson& body, ApiError* err) : body_(body), err_(err) {}

  bool fail(const std::string& field, const std::string& msg) {
    *err_ = ApiError::bad_request(msg, field);
    return false;
  }
  bool has(const char* k) const { return body_.contains(k) && !body_[k].is_null(); }

  bool number(const char* k, float* out, double lo, double hi) {
    if (!has(k)) return true;
    const ojson& v = body_[k];
    if (!v.is_number()) return fail(k, str("'", k, "' must be a number"));
    const double d = v.get<double>();
    if (!std::isfinite(d) || d < lo || d > hi) return fail(k, str("'", k, "' must be in [", lo, ", ", hi, "], got ", d));
    *out = static_cast<float>(d);
    return true;
  }
  bool integer(const char* k, int64_t* out, int64_t lo, int64_t hi) {
    if (!has(k)) return true;
    const ojson& v = body_[k];
    if (!v.is_number_integer()) return fail(k, str("'", k, "' must be an integer"));
    const int64_t i = v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)
                          ? INT64_MAX
                          : v.get<int64_t>();
    if (i < lo || i > hi) return fail(k, str("'", k, "' must be in [", lo, ", ", hi, "], got ", i));
    *out = i;
    return true;
  }
  bool boolean(const char* k, bool* out) {
    if (!has(k)) return true;
    if (!body_[k].is_boolean()) return fail(k, str("'", k, "' must be a boolean"));
    *out = body_[k].get<bool>();
    return true;
  }
  bool string(const char* k, std::string* out) {
    if (!has(k)) return true;
    if (!body_[k].is_string()) return fail(k, str("'", k, "' must be a string"));
    *out = body_[k].get<std::string>();
    return true;
  }
  bool nonempty_string(const char* k, std::string* out) {
    if (!string(k, out)) return false;
    if (has(k) && out->empty()) return fail(k, str("'", k, "' must be non-empty when given"));
    return true;
  }
  bool token_ids(const ojson& v, const char* k, std::vector<int32_t>* out) {
    for (const auto& x : v) {
      if (!x.is_number_integer()) return fail(k, str("'", k, "' token ids must be integers"));
      const int64_t id = x.get<int64_t>();
      if (id < 0 || id > INT32_MAX) return fail(k, str("token id ", id, " in '", k, "' is out of range"));
      out->push_back(static_cast<int32_t>(id));
    }
    return true;
  }
  bool stop(SamplingParams* p) {
    if (!has("stop")) return true;
    const ojson& v = body_["stop"];
    if (v.is_string()) {
      p->stop = {v.get<std::string>()};
    } else if (v.is_array()) {
      for (const auto& s : v) {
        if (!s.is_string()) return fail("stop", "'stop' must be a string or an array of strings");
        p->stop.push_back(s.get<std::string>());
      }
    } else {
      return fail("stop", "'stop' must be a string or an array of strings");
    }
    for (const auto& s : p->stop) {
      if (s.empty()) return fail("stop", "stop strings must not be empty");
    }
    return true;
  }
  // Nested objects (sampling_params, stream_options) stay strict: a typo there is an error.
  bool unknown(const std::set<std::string>& allowed) {
    for (auto it = body_.begin(); it != body_.end(); ++it) {
      if (!allowed.count(it.key())) {
        return fail(it.key(), str("Unrecognized request argument supplied: ", it.key()));
      }
    }
    return true;
  }
  // Top level: unknown fields are ignored, as vLLM and SGLang do.
  void ignore_unknown(const std::set<std::string>& allowed, std::vector<std::string>* ignored) const {
    for (auto it = body_.begin(); it != body_.end(); ++it) {
      if (!allowed.count(it.key())) ignored->push_back(it.key());
    }
  }

 private:
  const ojson& body_;
  ApiError* err_;
};

// OpenAI's logit_bias: {"token id": bias in [-100, 100], ...}; the ids are checked against the
// vocabulary at submission (SamplingParams::validate).
bool parse_logit_bias(Fields& f, const ojson& v, SamplingParams* p) {
  if (!v.is_object()) return f.fail("logit_bias", "'logit_bias' must be an object mapping token ids to numbers");
  if (v.size() > 1024) return f.fail("logit_bias", str("'logit_bias' has ", v.size(), " entries; at most 1024"));
  for (auto it = v.begin(); it != v.end(); ++it) {
    const std::string& key = it.key();
    int64_t id = -1;
    const bool digits = !key.empty() && key.size() <= 10 &&
                        key.find_first_not_of("0123456789") == std::string::npos;
    if (digits) id = std::stoll(key);
    if (!digits || id > INT32_MAX) {
      return f.fail("logit_bias", str("'logit_bias' key '", key, "' is not a token id"));
    }
    if (!it.value().is_number()) return f.fail("logit_bias", str("'logit_bias' value of token ", key, " must be a number"));
    const double b = it.value().get<double>();
    if (!(b >= -100.0 && b <= 100.0)) {
      return f.fail("logit_bias", str("'logit_bias' value of token ", key, " must be in [-100, 100], got ", b));
    }
    for (const auto& [seen, _] : p->logit_bias) {
      if (seen == id) return f.fail("logit_bias", str("'logit_bias' lists token ", id, " twice"));
    }
    p->logit_bias.emplace_back(static_cast<int32_t>(id), static_cast<float>(b));
  }
  return true;
}

// Sampling fields shared by completions and chat (OpenAI names plus vLLM/SGLang extensions).
bool parse_sampling(Fields& f, const ojson& body, ParsedRequest* r) {
  SamplingParams& p = r->params;
  int64_t top_k = -1, n = 1, min_tokens = 0;
  if (!f.number("temperature", &p.temperature, 0.0, 2.0) || !f.number("top_p", &p.top_p, 0.0, 1.0) ||
      !f.number("presence_penalty", &p.presence_penalty, -2.0, 2.0) ||
      !f.number("frequency_penalty", &p.frequency_penalty, -2.0, 2.0) ||
      !f.number("repetition_penalty", &p.repetition_penalty, 1e-6, 2.0) || !f.number("min_p", &p.min_p, 0.0, 1.0) ||
      !f.integer("top_k", &top_k, -1, 1 << 30) || !f.integer("n", &n, 1, 16) ||
      !f.integer("min_tokens", &min_tokens, 0, 1 << 30) || !f.boolean("ignore_eos", &p.ignore_eos) ||
      !f.boolean("skip_special_tokens", &p.skip_special_tokens) || !f.boolean("stream", &r->stream) || !f.stop(&p)) {
    return false;
  }
  std::string user;
  if (!f.string("user", &user)) return false;
  if (f.has("top_p") && p.top_p <= 0.0f) return f.fail("top_p", "'top_p' must be in (0, 1]");
  p.top_k = static_cast<int32_t>(top_k == 0 ? -1 : top_k);
  p.min_new_tokens = min_tokens;
  r->n = static_cast<int>(n);
  if (f.has("seed")) {
    if (!body["seed"].is_number_integer()) return f.fail("seed", "'seed' must be an integer");
    p.seed = body["seed"].is_number_unsigned() ? body["seed"].get<uint64_t>()
                                               : static_cast<uint64_t>(body["seed"].get<int64_t>());
  }
  if (f.has("stop_token_ids")) {
    if (!body["stop_token_ids"].is_array()) return f.fail("stop_token_ids", "'stop_token_ids' must be an array");
    if (!f.token_ids(body["stop_token_ids"], "stop_token_ids", &p.stop_token_ids)) return false;
  }
  if (f.has("logit_bias") && !parse_logit_bias(f, body["logit_bias"], &p)) return false;
  if (f.has("best_of")) {
    int64_t best_of = 1;
    if (!f.integer("best_of", &best_of, 1, 16)) return false;
    if (best_of != n) return f.fail("best_of", "'best_of' different from 'n' is not supported");
  }
  if (f.has("stream_options")) {
    const ojson& so = body["stream_options"];
    if (!so.is_object()) return f.fail("stream_options", "'stream_options' must be an object");
    if (!r->stream) return f.fail("stream_options", "'stream_options' is only allowed when 'stream' is true");
    for (auto it = so.begin(); it != so.end(); ++it) {
      if (it.key() == "include_usage" && it.value().is_boolean()) {
        r->include_usage = it.value().get<bool>();
      } else if (it.key() == "continuous_usage_stats" && it.value().is_boolean()) {
        r->continuous_usage = it.value().get<bool>();
      } else {
        return f.fail("stream_options", str("unsupported stream_options field '", it.key(), "'"));
      }
    }
  }
  return true;
}

// ---- output constraints ----------------------------------------------------------------------

// Records the request's one output constraint; a second one is a 400.
bool set_grammar(Fields& f, ParsedRequest* r, const std::string& field, grammar::GrammarKind kind, std::string source,
                 bool strict = false) {
  if (r->grammar.active()) {
    return f.fail(field, str("'", field, "' and '", r->grammar_field, "' both constrain the output; give one"));
  }
  r->grammar = grammar::GrammarSpec{kind, std::move(source), strict};
  r->grammar_field = field;
  return true;
}

// A JSON schema given as an object (or boolean), or as its JSON text.
bool schema_text(Fields& f, const std::string& field, const ojson& v, std::string* out) {
  if (v.is_object() || v.is_boolean()) {
    *out = v.dump();
    return true;
  }
  if (v.is_string()) {
    ojson parsed = ojson::parse(v.get<std::string>(), nullptr, /*allow_exceptions=*/false);
    if (parsed.is_object() || parsed.is_boolean()) {
      *out = parsed.dump();
      return true;
    }
  }
  return f.fail(field, str("'", field, "' must be a JSON schema (an object, or its JSON text)"));
}

bool nonempty_text(Fields& f, const std::string& field, const ojson& v, std::string* out) {
  if (!v.is_string() || v.get_ref<const std::string&>().empty()) {
    return f.fail(field, str("'", field, "' must be a non-empty string"));
  }
  *out = v.get<std::string>();
  return true;
}

// OpenAI's response_format: text, json_object, or json_schema {name, schema, strict}.
bool parse_response_format(Fields& f, const ojson& rf, ParsedRequest* r) {
  using grammar::GrammarKind;
  const std::string type = rf.is_object() && rf.contains("type") && rf["type"].is_string() ? rf["type"].get<std::string>() : "";
  if (type == "text") return true;
  if (type == "json_object") return set_grammar(f, r, "response_format", GrammarKind::kJsonObject, "");
  if (type != "json_schema") {
    return f.fail("response_format", "'response_format.type' must be \"text\", \"json_object\" or \"json_schema\"");
  }
  if (!rf.contains("json_schema") || !rf["json_schema"].is_object()) {
    return f.fail("response_format", "'response_format.json_schema' must be an object with a 'schema'");
  }
  const ojson& js = rf["json_schema"];
  bool strict = false;
  if (js.contains("strict") && !js["strict"].is_null()) {
    if (!js["strict"].is_boolean()) return f.fail("response_format", "'response_format.json_schema.strict' must be a boolean");
    strict = js["strict"].get<bool>();
  }
  if (!js.contains("schema") || js["schema"].is_null()) {
    return set_grammar(f, r, "response_format", GrammarKind::kJsonObject, "");  // no schema: any object
  }
  std::string schema;
  if (!schema_text(f, "response_format", js["schema"], &schema)) return false;
  return set_grammar(f, r, "response_format", GrammarKind::kJsonSchema, std::move(schema), strict);
}

// The constraint fields of chat and completions: response_format, SGLang's regex / ebnf, vLLM's
// guided_json / guided_regex / guided_grammar and structured_outputs {json, regex, grammar,
// json_object}.
bool parse_constraints(Fields& f, const ojson& body, ParsedRequest* r) {
  using grammar::GrammarKind;
  std::string text;
  if (f.has("response_format") && !parse_response_format(f, body["response_format"], r)) return false;
  for (const auto& [field, kind] : {std::pair<const char*, GrammarKind>{"regex", GrammarKind::kRegex},
                                    {"guided_regex", GrammarKind::kRegex},
                                    {"ebnf", GrammarKind::kEbnf},
                                    {"guided_grammar", GrammarKind::kEbnf}}) {
    if (f.has(field) && (!nonempty_text(f, field, body[field], &text) || !set_grammar(f, r, field, kind, text))) {
      return false;
    }
  }
  if (f.has("guided_json") && (!schema_text(f, "guided_json", body["guided_json"], &text) ||
                               !set_grammar(f, r, "guided_json", GrammarKind::kJsonSchema, text))) {
    return false;
  }
  if (f.has("structured_outputs")) {
    const ojson& so = body["structured_outputs"];
    if (!so.is_object()) return f.fail("structured_outputs", "'structured_outputs' must be an object");
    for (auto it = so.begin(); it != so.end(); ++it) {
      const std::string field = "structured_outputs." + it.key();
      const ojson& v = it.value();
      if (v.is_null()) continue;
      bool ok = true;
      if (it.key() == "json") {
        ok = schema_text(f, field, v, &text) && set_grammar(f, r, field, GrammarKind::kJsonSchema, text);
      } else if (it.key() == "regex") {
        ok = nonempty_text(f, field, v, &text) && set_grammar(f, r, field, GrammarKind::kRegex, text);
      } else if (it.key() == "grammar") {
        ok = nonempty_text(f, field, v, &text) && set_grammar(f, r, field, GrammarKind::kEbnf, text);
      } else if (it.key() == "json_object") {
        if (!v.is_boolean()) return f.fail(field, str("'", field, "' must be a boolean"));
        ok = !v.get<bool>() || set_grammar(f, r, field, GrammarKind::kJsonObject, "");
      } else {
        return f.fail("structured_outputs", str("unsupported 'structured_outputs' field '", it.key(),
                                                "' (json, regex, grammar or json_object)"));
      }
      if (!ok) return false;
    }
  }
  return true;
}

// Optional, as in vLLM / SGLang: without it the request goes to the served model.
bool parse_model(Fields& f, ParsedRequest* r) { return f.nonempty_string("model", &r->model); }

// OpenAI's `metadata`: an object of at most 16 strings.
bool parse_metadata(Fields& f, const ojson& body) {
  if (!f.has("metadata")) return true;
  const ojson& m = body["metadata"];
  if (!m.is_object()) return f.fail("metadata", "'metadata' must be an object of strings");
  if (m.size() > 16) return f.fail("metadata", str("'metadata' has ", m.size(), " keys; at most 16 are allowed"));
  for (auto it = m.begin(); it != m.end(); ++it) {
    if (!it.value().is_string()) return f.fail("metadata", str("'metadata' value of '", it.key(), "' must be a string"));
  }
  return true;
}

// Each tool: {"type": "function", "function": {"name": non-empty string, "parameters": object, ...}}.
bool parse_tools(Fields& f, const ojson& tools) {
  if (!tools.is_array()) return f.fail("tools", "'tools' must be an array");
  for (size_t i = 0; i < tools.size(); ++i) {
    const ojson& t = tools[i];
    const std::string where = str("tools[", i, "]");
    if (!t.is_object()) return f.fail("tools", str("'", where, "' must be an object"));
    if (!t.contains("type") || !t["type"].is_string() || t["type"].get_ref<const std::string&>() != "function") {
      return f.fail("tools", str("'", where, ".type' must be \"function\""));
    }
    if (!t.contains("function") || !t["function"].is_object()) {
      return f.fail("tools", str("'", where, ".function' must be an object"));
    }
    const ojson& fn = t["function"];
    if (!fn.contains("name") || !fn["name"].is_string() || fn["name"].get_ref<const std::string&>().empty()) {
      return f.fail("tools", str("'", where, ".function.name' must be a non-empty string"));
    }
    if (fn.contains("parameters") && !fn["parameters"].is_null() && !fn["parameters"].is_object()) {
      return f.fail("tools", str("'", where, ".function.parameters' must be an object"));
    }
  }
  return true;
}

// vLLM's prompt_logprobs: how many alternatives to give beside each prompt token's logprob.
bool parse_prompt_logprobs(Fields& f, ParsedRequest* r) {
  int64_t k = -1;
  if (!f.integer("prompt_logprobs", &k, 0, 20)) return false;
  r->prompt_logprobs = static_cast<int32_t>(k);
  r->params.prompt_logprobs = r->prompt_logprobs;
  return true;
}

// The "type" of a content part or response_format; "" when missing or not a string.
std::string type_of(const ojson& v) {
  if (!v.is_object() || !v.contains("type") || !v["type"].is_string()) return "";
  return v["type"].get<std::string>();
}

}  // namespace

void log_ignored_fields(const std::vector<std::string>& fields) {
  if (fields.empty()) return;
  static std::mutex mu;
  static std::set<std::string> logged;
  std::lock_guard<std::mutex> lock(mu);
  for (const std::string& name : fields) {
    if (logged.size() >= 1024 || !logged.insert(name).second) continue;  // a bounded set: clients choose the names
    const std::string shown = ojson(name.substr(0, 100)).dump(-1, ' ', true, ojson::error_handler_t::replace);
    std::fprintf(stderr, "radixlm: ignoring unknown request field %s (logged once)\n", shown.c_str());
  }
}

std::optional<ParsedRequest> parse_completion_request(const ojson& body, ApiError* err) {
  if (!body.is_object()) {
    *err = ApiError::bad_request("the request body must be a JSON object");
    return std::nullopt;
  }
  Fields f(body, err);
  static const std::set<std::string> allowed = {
      "model", "prompt", "max_tokens", "temperature", "top_p", "n", "stream", "stream_options", "logprobs", "echo",
      "stop", "presence_penalty", "frequency_penalty", "seed", "user", "best_of", "logit_bias", "suffix", "top_k",
      "min_p", "repetition_penalty", "ignore_eos", "min_tokens", "stop_token_ids", "skip_special_tokens",
      "add_special_tokens", "prompt_logprobs", "response_format", "regex", "ebnf", "guided_json", "guided_regex",
      "guided_grammar", "structured_outputs"};
  ParsedRequest r;
  r.kind = ApiKind::kCompletion;
  r.params.max_new_tokens = 16;  // OpenAI's default for completions
  f.ignore_unknown(allowed, &r.ignored_fields);
  if (!parse_model(f, &r) || !parse_sampling(f, body, &r) || !parse_constraints(f, body, &r)) return std::nullopt;
  int64_t max_tokens = 16, logprobs = -1;
  if (!f.integer("max_tokens", &max_tokens, 1, INT32_MAX) || !f.integer("logprobs", &logprobs, 0, 20) ||
      !f.boolean("echo", &r.echo) || !f.boolean("add_special_tokens", &r.add_special_tokens)) {
    return std::nullopt;
  }
  r.params.max_new_tokens = max_tokens;
  r.max_tokens_given = f.has("max_tokens");
  r.params.logprobs = f.has("logprobs") ? static_cast<int32_t>(logprobs) : -1;
  if (f.has("suffix")) {
    f.fail("suffix", "'suffix' is not supported");
    return std::nullopt;
  }
  if (!parse_prompt_logprobs(f, &r)) return std::nullopt;
  // echo with logprobs: the echoed prompt's tokens come with their logprobs too.
  if (r.echo && r.params.logprobs >= 0) {
    r.params.prompt_logprobs = std::max(r.params.prompt_logprobs, r.params.logprobs);
  }
  if (!body.contains("prompt") || body["prompt"].is_null()) {
    f.fail("prompt", "'prompt' is required");
    return std::nullopt;
  }
  const ojson& p = body["prompt"];
  auto bad_prompt = [&] {
    f.fail("prompt", "'prompt' must be a string, an array of strings, an array of token ids, or an array of arrays "
                     "of token ids");
    return std::nullopt;
  };
  if (p.is_string()) {
    r.prompts.push_back({p.get<std::string>(), {}});
  } else if (p.is_array() && !p.empty() && p[0].is_number_integer()) {
    PromptInput in;
    if (!f.token_ids(p, "prompt", &in.ids)) return std::nullopt;
    r.prompts.push_back(std::move(in));
  } else if (p.is_array() && !p.empty()) {
    for (const auto& e : p) {
      if (e.is_string()) {
        r.prompts.push_back({e.get<std::string>(), {}});
      } else if (e.is_array()) {
        PromptInput in;
        if (!f.token_ids(e, "prompt", &in.ids)) return std::nullopt;
        r.prompts.push_back(std::move(in));
      } else {
        return bad_prompt();
      }
    }
  } else {
    return bad_prompt();
  }
  for (const auto& in : r.prompts) {
    if (!in.text && in.ids.empty()) {
      f.fail("prompt", "a prompt must not be empty");
      return std::nullopt;
    }
  }
  return r;
}

std::optional<ParsedRequest> parse_chat_request(const ojson& body, ApiError* err) {
  if (!body.is_object()) {
    *err = ApiError::bad_request("the request body must be a JSON object");
    return std::nullopt;
  }
  Fields f(body, err);
  static const std::set<std::string> allowed = {
      "model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "n", "stream",
      "stream_options", "logprobs", "top_logprobs", "stop", "presence_penalty", "frequency_penalty", "seed", "user",
      "tools", "tool_choice", "parallel_tool_calls", "response_format", "logit_bias", "metadata", "store",
      "service_tier", "top_k", "min_p", "repetition_penalty", "ignore_eos", "min_tokens", "stop_token_ids",
      "skip_special_tokens", "chat_template_kwargs", "add_generation_prompt", "continue_final_message",
      "prompt_logprobs", "regex", "ebnf", "guided_json", "guided_regex", "guided_grammar", "structured_outputs"};
  ParsedRequest r;
  r.kind = ApiKind::kChat;
  f.ignore_unknown(allowed, &r.ignored_fields);
  if (!parse_model(f, &r) || !parse_sampling(f, body, &r)) return std::nullopt;
  int64_t max_tokens = 0, top_logprobs = 0;
  if (f.has("max_tokens") && f.has("max_completion_tokens")) {
    f.fail("max_tokens", "give either 'max_tokens' or 'max_completion_tokens', not both");
    return std::nullopt;
  }
  const char* mt = f.has("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  bool store = false, parallel_tool_calls = true;
  if (!f.integer(mt, &max_tokens, 1, INT32_MAX) || !f.boolean("logprobs", &r.chat_logprobs) ||
      !f.integer("top_logprobs", &top_logprobs, 0, 20) ||
      !f.boolean("add_generation_prompt", &r.add_generation_prompt) ||
      !f.boolean("continue_final_message", &r.continue_final_message) || !f.boolean("store", &store) ||
      !f.boolean("parallel_tool_calls", &parallel_tool_calls) || !parse_metadata(f, body)) {
    return std::nullopt;
  }
  r.max_tokens_given = f.has(mt);
  if (r.max_tokens_given) r.params.max_new_tokens = max_tokens;
  if (r.continue_final_message && r.add_generation_prompt && f.has("add_generation_prompt")) {
    f.fail("continue_final_message", "'continue_final_message' and 'add_generation_prompt' cannot both be true");
    return std::nullopt;
  }
  if (r.continue_final_message) r.add_generation_prompt = false;
  if (f.has("top_logprobs") && !r.chat_logprobs) {
    f.fail("top_logprobs", "'top_logprobs' requires 'logprobs': true");
    return std::nullopt;
  }
  r.params.logprobs = r.chat_logprobs ? static_cast<int32_t>(top_logprobs) : -1;
  if (!parse_prompt_logprobs(f, &r)) return std::nullopt;
  if (!body.contains("messages") || !body["messages"].is_array() || body["messages"].empty()) {
    f.fail("messages", "'messages' must be a non-empty array");
    return std::nullopt;
  }
  for (const auto& m : body["messages"]) {
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
      f.fail("messages", "each message must be an object with a string 'role'");
      return std::nullopt;
    }
    // Any role: the chat template decides (a template that rejects it answers 400).
    if (m.contains("content") && !m["content"].is_null() && !m["content"].is_string() && !m["content"].is_array()) {
      f.fail("messages", "message 'content' must be a string, an array of content parts, or null");
      return std::nullopt;
    }
  }
  // Content parts: only text parts are supported; join them into one string per message.
  r.messages = ojson::array();
  for (const auto& m : body["messages"]) {
    ojson msg = m;
    if (m.contains("content") && m["content"].is_array()) {
      std::string text;
      for (const auto& part : m["content"]) {
        if (type_of(part) != "text" || !part.contains("text") || !part["text"].is_string()) {
          f.fail("messages", "only content parts of type 'text' are supported");
          return std::nullopt;
        }
        text += part["text"].get<std::string>();
      }
      msg["content"] = text;
    }
    r.messages.push_back(std::move(msg));
  }
  if (f.has("tools")) {
    if (!parse_tools(f, body["tools"])) return std::nullopt;
    r.tools = body["tools"];
  }
  if (f.has("tool_choice")) {
    const ojson& tc = body["tool_choice"];
    const bool named = tc.is_object() && type_of(tc) == "function" && tc.contains("function") &&
                       tc["function"].is_object() && tc["function"].contains("name") && tc["function"]["name"].is_string();
    if (!named && !(tc.is_string() && (tc == "none" || tc == "auto" || tc == "required"))) {
      f.fail("tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                            "\"function\": {\"name\": ...}}");
      return std::nullopt;
    }
    r.tool_choice = named ? "function" : tc.get<std::string>();
    if (named) r.tool_choice_function = tc["function"]["name"].get<std::string>();
    if (tc == "none") r.tools = nullptr;  // hidden from the template, as vLLM does
  }
  if (r.tool_choice == "required" || r.tool_choice == "function") {
    if (!r.tools.is_array() || r.tools.empty()) {
      f.fail("tool_choice", str("'tool_choice' \"", r.tool_choice, "\" needs 'tools'"));
      return std::nullopt;
    }
    if (r.tool_choice == "function") {
      bool found = false;
      for (const auto& t : r.tools) found = found || t["function"]["name"] == r.tool_choice_function;
      if (!found) {
        f.fail("tool_choice", str("'tool_choice' names the function '", r.tool_choice_function,
                                  "', which is not among 'tools'"));
        return std::nullopt;
      }
    }
  }
  if (!parse_constraints(f, body, &r)) return std::nullopt;
  if (r.grammar.active() && (r.tool_choice == "required" || r.tool_choice == "function")) {
    f.fail(r.grammar_field, str("'", r.grammar_field, "' cannot be combined with 'tool_choice' \"", r.tool_choice,
                                "\", which constrains the output to tool calls"));
    return std::nullopt;
  }
  if (f.has("chat_template_kwargs")) {
    if (!body["chat_template_kwargs"].is_object()) {
      f.fail("chat_template_kwargs", "'chat_template_kwargs' must be an object");
      return std::nullopt;
    }
    r.chat_template_kwargs = body["chat_template_kwargs"];
  }
  return r;
}

std::optional<ParsedRequest> parse_generate_request(const ojson& body, ApiError* err) {
  if (!body.is_object()) {
    *err = ApiError::bad_request("the request body must be a JSON object");
    return std::nullopt;
  }
  Fields f(body, err);
  static const std::set<std::string> allowed = {"text", "input_ids", "sampling_params", "stream", "rid",
                                                "return_logprob", "top_logprobs_num", "model"};
  ParsedRequest r;
  r.kind = ApiKind::kGenerate;
  r.params.max_new_tokens = 128;  // SGLang's default
  f.ignore_unknown(allowed, &r.ignored_fields);
  if (!f.boolean("stream", &r.stream) || !f.string("rid", &r.rid) ||
      !f.nonempty_string("model", &r.model)) {
    return std::nullopt;
  }
  const bool has_text = f.has("text"), has_ids = f.has("input_ids");
  if (has_text == has_ids) {
    f.fail("text", "give exactly one of 'text' and 'input_ids'");
    return std::nullopt;
  }
  if (has_text) {
    if (!body["text"].is_string()) {
      f.fail("text", "'text' must be a string");
      return std::nullopt;
    }
    r.prompts.push_back({body["text"].get<std::string>(), {}});
  } else {
    if (!body["input_ids"].is_array() || body["input_ids"].empty()) {
      f.fail("input_ids", "'input_ids' must be a non-empty array of token ids");
      return std::nullopt;
    }
    PromptInput in;
    if (!f.token_ids(body["input_ids"], "input_ids", &in.ids)) return std::nullopt;
    r.prompts.push_back(std::move(in));
  }
  bool return_logprob = false;
  int64_t top_num = 0;
  if (!f.boolean("return_logprob", &return_logprob) || !f.integer("top_logprobs_num", &top_num, 0, 20)) {
    return std::nullopt;
  }
  r.params.logprobs = return_logprob ? static_cast<int32_t>(top_num) : -1;
  if (f.has("sampling_params")) {
    const ojson& sp = body["sampling_params"];
    if (!sp.is_object()) {
      f.fail("sampling_params", "'sampling_params' must be an object");
      return std::nullopt;
    }
    Fields g(sp, err);
    static const std::set<std::string> sp_allowed = {
        "max_new_tokens", "min_new_tokens", "temperature", "top_p", "top_k", "min_p", "stop", "stop_token_ids",
        "ignore_eos", "skip_special_tokens", "frequency_penalty", "presence_penalty", "repetition_penalty", "seed",
        "n", "json_schema", "regex", "ebnf"};
    SamplingParams& p = r.params;
    int64_t max_new = 128, min_new = 0, top_k = -1, n = 1;
    if (!g.unknown(sp_allowed) || !g.integer("max_new_tokens", &max_new, 1, INT32_MAX) ||
        !g.integer("min_new_tokens", &min_new, 0, INT32_MAX) || !g.number("temperature", &p.temperature, 0.0, 100.0) ||
        !g.number("top_p", &p.top_p, 1e-9, 1.0) || !g.integer("top_k", &top_k, -1, 1 << 30) ||
        !g.number("min_p", &p.min_p, 0.0, 1.0) || !g.stop(&p) || !g.boolean("ignore_eos", &p.ignore_eos) ||
        !g.boolean("skip_special_tokens", &p.skip_special_tokens) ||
        !g.number("frequency_penalty", &p.frequency_penalty, -2.0, 2.0) ||
        !g.number("presence_penalty", &p.presence_penalty, -2.0, 2.0) ||
        !g.number("repetition_penalty", &p.repetition_penalty, 1e-6, 2.0) || !g.integer("n", &n, 1, 16)) {
      return std::nullopt;
    }
    std::string text;
    if (g.has("json_schema") && (!schema_text(g, "json_schema", sp["json_schema"], &text) ||
                                 !set_grammar(g, &r, "json_schema", grammar::GrammarKind::kJsonSchema, text))) {
      return std::nullopt;
    }
    for (const auto& [field, kind] : {std::pair<const char*, grammar::GrammarKind>{"regex", grammar::GrammarKind::kRegex},
                                      {"ebnf", grammar::GrammarKind::kEbnf}}) {
      if (g.has(field) && (!nonempty_text(g, field, sp[field], &text) || !set_grammar(g, &r, field, kind, text))) {
        return std::nullopt;
      }
    }
    p.max_new_tokens = max_new;
    p.min_new_tokens = min_new;
    p.top_k = static_cast<int32_t>(top_k == 0 ? -1 : top_k);
    r.n = static_cast<int>(n);
    if (g.has("seed")) {
      if (!sp["seed"].is_number_integer()) {
        g.fail("seed", "'seed' must be an integer");
        return std::nullopt;
      }
      p.seed = static_cast<uint64_t>(sp["seed"].get<int64_t>());
    }
    if (g.has("stop_token_ids")) {
      if (!sp["stop_token_ids"].is_array() || !g.token_ids(sp["stop_token_ids"], "stop_token_ids", &p.stop_token_ids)) {
        if (err->message.empty()) g.fail("stop_token_ids", "'stop_token_ids' must be an array of token ids");
        return std::nullopt;
      }
    }
  }
  return r;
}

}  // namespace rlm
