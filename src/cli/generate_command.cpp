// `radixlm generate`: offline generation for a batch of prompts — text (--prompt, optionally
// wrapped in the model's chat template with --chat) or token ids (--prompt-ids, or a JSONL file).
// Prints one JSON line per prompt with the output ids and, when the model has a tokenizer, text.
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "cli/commands.h"
#include "cli/runner_flags.h"
#include "core/json.h"
#include "engine/generator.h"
#include "engine/model_loader.h"
#include "tokenizer/chat_template_loader.h"
#include "tokenizer/tokenizer.h"

namespace rlm::cli {

namespace {

struct GenerateArgs {
  std::string model;
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
  uint64_t seed = 0;
  bool ignore_eos = false;
  std::string load_format = "auto";
  std::string attention_backend;  // "" = default for the device
  std::string prefill_attention_backend;  // "": as attention_backend
  std::string decode_attention_backend;
  std::string device = "auto";
  int64_t page_size = 16;
  int64_t max_batch_size = 0;
  int64_t max_context_len = 0;
  RunnerFlags runner;
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

GenerateRequest base_request(const GenerateArgs& a) {
  GenerateRequest r;
  r.max_tokens = a.max_tokens;
  r.sampling.temperature = a.temperature;
  r.sampling.top_p = a.top_p;
  r.sampling.top_k = a.top_k;
  r.sampling.min_p = a.min_p;
  r.sampling.seed = a.seed;
  r.ignore_eos = a.ignore_eos;
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

StatusOr<std::vector<GenerateRequest>> collect_requests(const GenerateArgs& a, const Tokenizer* tok,
                                                        const std::optional<ChatTemplate>& tmpl) {
  std::vector<GenerateRequest> reqs;
  for (const std::string& text : a.prompts) {
    GenerateRequest r = base_request(a);
    RLM_ASSIGN_OR_RETURN(r.prompt_ids, encode_prompt(a, text, tok, tmpl));
    reqs.push_back(std::move(r));
  }
  for (const std::string& text : a.prompt_ids) {
    GenerateRequest r = base_request(a);
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
      GenerateRequest r = base_request(a);
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
        r.max_tokens = j["max_tokens"].get<int64_t>();
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

int run_generate(const GenerateArgs& a) {
  const std::string path = a.model.empty() ? default_model_path() : a.model;
  LoadOptions lo;
  lo.load_format = a.load_format;
  lo.dummy_seed = a.seed;
  a.runner.apply_load(lo);
  auto loaded = load_model(path, lo);
  if (!loaded.is_ok()) return fail("", loaded.status());
  // A tokenizer is optional (the tiny test models have none); text needs one.
  std::unique_ptr<Tokenizer> tok;
  std::optional<ChatTemplate> tmpl;
  if (auto t = load_tokenizer(path); t.is_ok()) {
    tok = std::move(t).value();
    auto ct = load_chat_template(path, *tok);
    if (!ct.is_ok()) return fail("", ct.status());
    tmpl = std::move(ct).value();
  } else if (!a.prompts.empty()) {
    return fail("tokenizer: ", t.status());
  }
  auto reqs = collect_requests(a, tok.get(), tmpl);
  if (!reqs.is_ok()) return fail("", reqs.status(), 2);
  auto device = resolve_device(a.device);
  if (!device.is_ok()) return fail("", device.status(), 2);
  ModelRunnerConfig rc;
  rc.device = *device;
  rc.attention_backend = a.attention_backend.empty() ? default_attention_backend(*device) : a.attention_backend;
  rc.prefill_attention_backend = a.prefill_attention_backend;
  rc.decode_attention_backend = a.decode_attention_backend;
  rc.page_size = a.page_size;
  rc.max_requests = std::max<int64_t>(1, std::min<int64_t>(64, static_cast<int64_t>(reqs->size())));
  int64_t longest = 0;
  for (const auto& r : *reqs) {
    longest = std::max<int64_t>(longest, static_cast<int64_t>(r.prompt_ids.size()) + r.max_tokens);
  }
  rc.max_context_len = a.max_context_len > 0 ? a.max_context_len
                                             : std::min<int64_t>(loaded->config.max_position_embeddings, longest);
  a.runner.apply(rc, /*size_from_memory=*/true);
  auto runner = ModelRunner::create(std::move(loaded->model), rc);
  if (!runner.is_ok()) return fail("", runner.status());
  Generator gen(**runner);
  auto outs = gen.generate(*reqs, a.max_batch_size);
  if (!outs.is_ok()) return fail("", outs.status());
  for (size_t i = 0; i < outs->size(); ++i) {
    nlohmann::json j;
    j["index"] = i;
    if (tok) j["text"] = tok->decode((*outs)[i].output_ids, /*skip_special_tokens=*/true);
    j["output_ids"] = (*outs)[i].output_ids;
    j["finish_reason"] = (*outs)[i].finish_reason;
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  }
  return 0;
}

}  // namespace

void add_generate_command(CLI::App& app, std::vector<std::pair<CLI::App*, Runner>>& out) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* sub = app.add_subcommand("generate", "Generate continuations for a batch of prompts");
  sub->add_option("--model", args->model,
                  "Model directory (config.json + safetensors) or .gguf file (default: the embedded SmolLM2)");
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
  sub->add_option("--seed", args->seed, "Random seed (sampling; dummy weights)");
  sub->add_flag("--ignore-eos", args->ignore_eos, "Do not stop at the model's EOS token");
  sub->add_option("--load-format", args->load_format, "auto | safetensors | gguf | dummy");
  sub->add_option("--device", args->device, "auto | cpu | cuda | cuda:N (auto: CUDA when a GPU is visible)");
  sub->add_option("--attention-backend", args->attention_backend, "Attention backend (default: native on CUDA, cpu)");
  sub->add_option("--prefill-attention-backend", args->prefill_attention_backend,
                 "Backend for prefill/extend steps (default: --attention-backend)");
  sub->add_option("--decode-attention-backend", args->decode_attention_backend,
                 "Backend for decode steps (default: --attention-backend); two different names make 'hybrid'");
  sub->add_option("--page-size", args->page_size, "KV page size in tokens")->check(CLI::PositiveNumber);
  sub->add_option("--max-batch-size", args->max_batch_size, "Prompts per batch (0: all)");
  sub->add_option("--max-context-len", args->max_context_len, "Context length (0: from the prompts)");
  args->runner.add_to(sub);
  out.emplace_back(sub, [args] { return run_generate(*args); });
}

}  // namespace rlm::cli
