#include "server/serving_engine.h"

#include <chrono>
#include <thread>

#include "tokenizer/incremental_detokenizer.h"

namespace rlm {

namespace {

class DetokenizerAdapter : public TokenTextDecoder {
 public:
  DetokenizerAdapter(const Tokenizer& tok, bool skip, const std::vector<int32_t>& prompt)
      : detok_(tok, skip, prompt) {}
  std::string push(int32_t token) override { return detok_.push(token); }
  std::string flush() override { return detok_.finish(); }

 private:
  IncrementalDetokenizer detok_;
};

// Without a tokenizer there is no text.
class NoText : public TokenTextDecoder {
 public:
  std::string push(int32_t) override { return {}; }
  std::string flush() override { return {}; }
};

}  // namespace

ServingEngine::ServingEngine(std::string model_name, std::unique_ptr<ModelRunner> runner,
                             std::unique_ptr<Tokenizer> tokenizer, std::optional<ChatTemplate> chat_template,
                             const SchedulerConfig& config)
    : model_name_(std::move(model_name)),
      runner_(std::move(runner)),
      tokenizer_(std::move(tokenizer)),
      chat_template_(std::move(chat_template)),
      metrics_(std::make_shared<ServingMetrics>()) {
  executor_ = std::make_unique<ModelStepExecutor>(*runner_);
  const Tokenizer* tok = tokenizer_.get();
  scheduler_ = std::make_unique<Scheduler>(
      *executor_, config,
      [tok](bool skip, const std::vector<int32_t>& prompt) -> std::unique_ptr<TokenTextDecoder> {
        if (tok == nullptr) return std::make_unique<NoText>();
        return std::make_unique<DetokenizerAdapter>(*tok, skip, prompt);
      },
      metrics_);
}

ServingEngine::~ServingEngine() { scheduler_->stop(false); }

StatusOr<std::string> ServingEngine::render_chat(const nlohmann::ordered_json& messages,
                                                 const nlohmann::ordered_json& tools, bool add_generation_prompt,
                                                 const nlohmann::ordered_json& kwargs) const {
  if (!chat_template_) {
    return invalid_argument("this model has no chat template; use /v1/completions");
  }
  return chat_template_->render(messages, add_generation_prompt, tools,
                                kwargs.is_null() ? nlohmann::ordered_json::object() : kwargs);
}

std::vector<int32_t> ServingEngine::encode(const std::string& text, bool add_special_tokens) const {
  RLM_CHECK(tokenizer_ != nullptr) << "encode() on an engine without a tokenizer";
  return tokenizer_->encode(text, add_special_tokens, /*allow_special=*/true);
}

std::string ServingEngine::token_text(int32_t id) const {
  RLM_CHECK(tokenizer_ != nullptr) << "token_text() on an engine without a tokenizer";
  const int32_t ids[1] = {id};
  return tokenizer_->decode(std::span<const int32_t>(ids, 1), /*skip_special_tokens=*/false);
}

StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> ServingEngine::compile_grammar(
    const grammar::GrammarSpec& spec) {
  if (tokenizer_ == nullptr) return invalid_argument("constrained decoding needs the model's tokenizer");
  std::call_once(grammar_once_, [this] {
    // Stop tokens: the model's EOS ids and the tokenizer's.
    std::vector<int32_t> stop;
    for (int64_t id : runner_->model_config().eos_token_ids) stop.push_back(static_cast<int32_t>(id));
    if (std::optional<int32_t> eos = tokenizer_->eos_id()) stop.push_back(*eos);
    grammar_compiler_ = std::make_unique<grammar::GrammarCompiler>(*tokenizer_, vocab_size(), std::move(stop));
  });
  return grammar_compiler_->compile(spec);
}

StatusOr<std::shared_ptr<Req>> ServingEngine::submit(std::vector<int32_t> prompt_ids, const SamplingParams& params,
                                                     const std::string& rid, const std::string& group,
                                                     const std::string& parent_rid) {
  if (draining_) return Status(StatusCode::kUnavailable, "the server is shutting down");
  auto req = std::make_shared<Req>();
  req->rid = rid;
  req->prompt_ids = std::move(prompt_ids);
  req->params = params;
  req->group = group;
  req->parent_rid = parent_rid;
  req->stream = std::make_shared<RequestStream>();
  RLM_RETURN_IF_ERROR(scheduler_->submit(req));
  return req;
}

std::string ServingEngine::describe_limits() const {
  const SchedulerConfig& c = scheduler_->config();
  const std::vector<int64_t> graphs = runner_->cuda_graph_batch_sizes();
  return str("max-running-requests ", c.max_running_requests, ", max-total-tokens ", runner_->kv_pool().num_slots(),
             ", chunked-prefill-size ", c.chunked_prefill_size, ", max-prefill-tokens ", c.max_prefill_tokens,
             ", mixed steps ", c.enable_mixed_chunk ? "on" : "off",
             c.enable_mixed_chunk && c.mixed_prefill_tokens > 0 ? str(" (<= ", c.mixed_prefill_tokens, " prompt tokens)") : std::string(),
             ", overlap ", c.overlap_schedule ? "on" : "off",
             ", CUDA graphs ", graphs.empty() ? std::string("off") : str("up to batch ", graphs.back()));
}

nlohmann::ordered_json ServingEngine::server_info() const {
  const SchedulerConfig& c = scheduler_->config();
  const std::vector<int64_t> graphs = runner_->cuda_graph_batch_sizes();
  nlohmann::ordered_json j;
  j["model"] = model_name_;
  j["device"] = runner_->config().device.to_string();
  j["max_running_requests"] = c.max_running_requests;
  j["max_total_tokens"] = runner_->kv_pool().num_slots();
  j["page_size"] = runner_->kv_pool().page_size();
  j["context_length"] = c.max_context_len;
  j["chunked_prefill_size"] = c.chunked_prefill_size;
  j["max_prefill_tokens"] = c.max_prefill_tokens;
  j["enable_mixed_chunk"] = c.enable_mixed_chunk;
  j["mixed_prefill_tokens"] = c.mixed_prefill_tokens;
  j["overlap_schedule"] = c.overlap_schedule;
  j["schedule_policy"] = schedule_policy_name(c.policy);
  j["cache"] = cache_kind_name(c.cache);
  j["max_queued_requests"] = c.max_queued_requests;
  j["cuda_graph_max_bs"] = graphs.empty() ? 0 : graphs.back();
  j["cuda_graph_batch_sizes"] = graphs;
  if (const auto& plan = runner_->memory_plan()) {
    nlohmann::ordered_json m;
    m["mem_fraction_static"] = plan->fraction;
    m["total_bytes"] = plan->profile.total_bytes;
    m["fixed_bytes"] = plan->fixed_bytes;
    m["activation_bytes"] = plan->profile.activation_bytes;
    m["cuda_graph_bytes"] = plan->profile.graph_bytes;
    m["kv_bytes"] = plan->kv_bytes;
    j["memory"] = std::move(m);
  }
  return j;
}

void ServingEngine::shutdown(int64_t timeout_ms) {
  draining_ = true;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    const SchedulerGauges g = metrics_->gauges();
    if (g.running == 0 && g.queued == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  scheduler_->stop(/*drain=*/false);
}

}  // namespace rlm
