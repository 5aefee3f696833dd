// `radixlm generate`: offline generation for a batch of prompts — text (--prompt, optionally
// wrapped in the model's chat template with --chat) or token ids (--prompt-ids, or a JSONL file) —
// through the same scheduler and engine as `serve` (server/offline_engine.h). Prints one JSON line
// per prompt with the output ids and, when the model has a tokenizer, text.
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "core/json.h"
#include "server/engine_builder.h"
#include "server/offline_engine.h"

namespace rlm::cli {

namespace {

struct GenerateArgs {
  EngineArgs engine;
  std::vector<std::string> prompts;
  std::vector<std::string> prompt_ids;
  std::string prompts_file;
  bool chat = false;
  std::string system;
  int64_t max_tokens = 16;
  float temperature = 0.0f;
  float top_p = 1.0f;
  int32_t top_k = -1;
  float min_p = 0.0f;
  bool ignore_eos = false;

  GenerateArgs() {
    engine.page_size = 16;
    engine.max_running_requests = 0;  // --max-batch-size 0: every prompt at once (up to 64)
  }
};

StatusOr<std::vector<int32_t>> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      long long v = std::stoll(item, &used);
      if (used != item.size() || v < 0 || v > INT32_MAX) throw std::invalid_argument("bad");
      ids.push_back(static_cast<int32_t>(v));
    } catch (const std::exception&) {
      return invalid_argument(str("bad token id '", item, "' in --prompt-ids '", text, "'"));
    }
  }
  if (ids.empty()) return invalid_argument("--prompt-ids is empty");
  return ids;
}

OfflineRequest base_request(const GenerateArgs& a) {
  OfflineRequest r;
  r.params.max_new_tokens = a.max_tokens;
  r.params.temperature = a.temperature;
  r.params.top_p = a.top_p;
  r.params.top_k = a.top_k;
  r.params.min_p = a.min_p;
  r.params.seed = a.engine.seed;  // every prompt samples with --seed (default 0): reproducible runs
  r.params.ignore_eos = a.ignore_eos;
  return r;
}

// Text prompt -> ids: plain (with the tokenizer's BOS rules) or through the chat template.
StatusOr<std::vector<int32_t>> encode_prompt(const GenerateArgs& a, const std::string& text, const Tokenizer* tok,
                                             const std::optional<ChatTemplate>& tmpl) {
  if (tok == nullptr) return invalid_argument("this model has no tokenizer; give --prompt-ids instead of text");
  if (!a.chat) return tok->encode(text, /*add_special_tokens=*/true);
  if (!tmpl) return invalid_argument("--chat: this model has no chat template");
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  if (!a.system.empty()) messages.push_back({{"role", "system"}, {"content", a.system}});
  messages.push_back({{"role", "user"}, {"content", text}});
  RLM_ASSIGN_OR_RETURN(std::string rendered, tmpl->render(messages, /*add_generation_prompt=*/true));
  return tok->encode(rendered, /*add_special_tokens=*/false);
}

StatusOr<std::vector<OfflineRequest>> collect_requests(const GenerateArgs& a, const Tokenizer* tok,
                                                       const std::optional<ChatTemplate>& tmpl) {
  std::vector<OfflineRequest> reqs;
  for (const std::string& text : a.prompts) {
    OfflineRequest r = base_request(a);
    RLM_ASSIGN_OR_RETURN(r.prompt_ids, encode_prompt(a, text, tok, tmpl));
    reqs.push_back(std::move(r));
  }
  for (const std::string& text : a.prompt_ids) {
    OfflineRequest r = base_request(a);
    RLM_ASSIGN_OR_RETURN(r.prompt_ids, parse_ids(text));
    reqs.push_back(std::move(r));
  }
  if (!a.prompts_file.empty()) {
    std::ifstream in(a.prompts_file);
    if (!in) return not_found(str("cannot open prompts file '", a.prompts_file, "'"));
    std::string line;
    int line_no = 0;
    while (std::getline(in, line)) {
      ++line_no;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      StatusOr<nlohmann::json> parsed = parse_json(line, kFileJsonLimits);
      const std::string where = str(a.prompts_file, ":", line_no, ": ");
      if (!parsed.is_ok()) return invalid_argument(where + parsed.status().message());
      nlohmann::json& j = *parsed;
      if (!j.is_object()) return invalid_argument(where + "not a JSON object");
      OfflineRequest r = base_request(a);
      if (j.contains("prompt") && j["prompt"].is_string()) {
        RLM_ASSIGN_OR_RETURN(r.prompt_ids, encode_prompt(a, j["prompt"].get<std::string>(), tok, tmpl));
      } else if (j.contains("prompt_ids") && j["prompt_ids"].is_array()) {
        for (const auto& v : j["prompt_ids"]) {
          if (!v.is_number_integer()) return invalid_argument(where + "non-integer id in prompt_ids");
          r.prompt_ids.push_back(v.get<int32_t>());
        }
      } else {
        return invalid_argument(where + "expected {\"prompt\": \"...\"} or {\"prompt_ids\": [...]}");
      }
      if (j.contains("max_tokens")) {
        if (!j["max_tokens"].is_number_integer()) return invalid_argument(where + "max_tokens must be an integer");
        r.params.max_new_tokens = j["max_tokens"].get<int64_t>();
      }
      reqs.push_back(std::move(r));
    }
  }
  if (reqs.empty()) return invalid_argument("no prompts: give --prompt, --prompt-ids and/or --prompts-file");
  return reqs;
}

int fail(const char* what, const Status& st, int code = 1) {
  std::fprintf(stderr, "radixlm generate: %s%s\n", what, st.to_string().c_str());
  return code;
}

int run_generate(GenerateArgs a) {
  EngineArgs check = a.engine;  // --max-batch-size 0 is resolved below, once the prompts are known
  check.max_running_requests = std::max<int64_t>(1, check.max_running_requests);
  if (Status st = check.validate(); !st.is_ok()) return fail("", st, 2);
  // A tokenizer is optional (the tiny test models have none); text needs one.
  auto files = load_engine_files(a.engine, a.prompts.empty() ? TokenizerUse::kOptional : TokenizerUse::kRequired);
  if (!files.is_ok()) return fail("", files.status());
  auto reqs = collect_requests(a, files->tokenizer.get(), files->chat_template);
  if (!reqs.is_ok()) return fail("", reqs.status(), 2);
  const int64_t n = static_cast<int64_t>(reqs->size());
  // --max-batch-size is the scheduler's running-request limit (0: all prompts, up to 64 at once).
  if (a.engine.max_running_requests == 0) a.engine.max_running_requests = std::min<int64_t>(64, n);
  a.engine.max_running_requests = std::min(a.engine.max_running_requests, n);
  if (a.engine.context_length == 0) {
    int64_t longest = 0;
    for (const auto& r : *reqs) {
      longest = std::max<int64_t>(longest, static_cast<int64_t>(r.prompt_ids.size()) + r.params.max_new_tokens);
    }
    a.engine.context_length = std::min<int64_t>(files->model.config.max_position_embeddings, longest);
  }
  auto engine = build_engine(a.engine, std::move(files).value());
  if (!engine.is_ok()) return fail("", engine.status());
  OfflineEngine offline(**engine);
  auto outs = offline.generate(*reqs);
  if (!outs.is_ok()) return fail("", outs.status());
  for (size_t i = 0; i < outs->size(); ++i) {
    const OfflineOutput& o = (*outs)[i];
    nlohmann::json j;
    j["index"] = i;
    if ((*engine)->has_tokenizer()) j["text"] = o.text;
    j["output_ids"] = o.output_ids;
    j["finish_reason"] = o.finish.reason;
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  }
  return 0;
}

}  // namespace

void add_generate_command(CLI::App& app, std::vector<std::pair<CLI::App*, Runner>>& out) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* sub = app.add_subcommand("generate", "Generate continuations for a batch of prompts");
  sub->add_option("--prompt", args->prompts, "A text prompt (repeatable)");
  sub->add_flag("--chat", args->chat, "Wrap each --prompt as a user message in the model's chat template");
  sub->add_option("--system", args->system, "System message for --chat");
  sub->add_option("--prompt-ids", args->prompt_ids, "Comma-separated prompt token ids (repeatable)");
  sub->add_option("--prompts-file", args->prompts_file,
                  "JSONL file of {\"prompt\": \"...\"} or {\"prompt_ids\": [...]}, optional \"max_tokens\"");
  sub->add_option("--max-tokens", args->max_tokens, "Tokens to generate per prompt")->check(CLI::PositiveNumber);
  sub->add_option("--temperature", args->temperature, "Sampling temperature (0: greedy)")->check(CLI::NonNegativeNumber);
  sub->add_option("--top-p", args->top_p, "Nucleus sampling mass")->check(CLI::Range(0.0f, 1.0f));
  sub->add_option("--top-k", args->top_k, "Top-k sampling (-1: off)");
  sub->add_option("--min-p", args->min_p, "Min-p sampling")->check(CLI::Range(0.0f, 1.0f));
  sub->add_flag("--ignore-eos", args->ignore_eos, "Do not stop at the model's EOS token");
  EngineFlagOptions flags;
  flags.model_help = "Model directory (config.json + safetensors) or .gguf file (default: the embedded SmolLM2)";
  flags.seed_help = "Random seed (sampling; dummy weights)";
  flags.context_flag = "--max-context-len";
  flags.context_help = "Context length (0: from the prompts)";
  flags.running_flag = "--max-batch-size";
  flags.running_help = "Prompts decoding at once (0: all, up to 64)";
  add_engine_flags(sub, args->engine, flags);
  out.emplace_back(sub, [args] { return run_generate(*args); });
}

}  // namespace rlm::cli
