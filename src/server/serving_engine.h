// ServingEngine: what the front ends talk to — the tokenizer, the chat template, and the scheduler
// running the model. `serve` (HTTP) and `chat` start its scheduler thread; OfflineEngine
// (`generate`, bench offline) runs the scheduler on the caller's thread instead. build_engine
// (server/engine_builder.h) makes one from EngineArgs. Thread-safe: the HTTP server's I/O threads submit at once.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/model_runner.h"
#include "grammar/grammar.h"
#include "scheduler/scheduler.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace rlm {

class ServingEngine {
 public:
  // `tokenizer` may be null (models given token ids only): requests then stream ids and no text.
  ServingEngine(std::string model_name, std::unique_ptr<ModelRunner> runner, std::unique_ptr<Tokenizer> tokenizer,
                std::optional<ChatTemplate> chat_template, const SchedulerConfig& config);
  ~ServingEngine();

  const std::string& model_name() const { return model_name_; }
  int64_t max_context_len() const { return scheduler_->config().max_context_len; }
  bool has_tokenizer() const { return tokenizer_ != nullptr; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }  // requires has_tokenizer()
  bool has_chat_template() const { return chat_template_.has_value(); }
  const std::string& chat_template_source() const { return chat_template_->source(); }  // requires has_chat_template()
  int64_t vocab_size() const { return runner_->model_config().vocab_size; }

  // Renders a conversation with the model's chat template (kInvalidArgument on template errors).
  StatusOr<std::string> render_chat(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                                    bool add_generation_prompt, const nlohmann::ordered_json& kwargs) const;
  std::vector<int32_t> encode(const std::string& text, bool add_special_tokens) const;
  // Text of one token for logprobs output.
  std::string token_text(int32_t id) const;
  // Compiles an output constraint against the model's vocabulary (kInvalidArgument for a bad schema,
  // regex or grammar, or an engine without a tokenizer). The compiler is built on first use (it
  // indexes the vocabulary once) and caches compiled grammars; thread-safe.
  StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> compile_grammar(const grammar::GrammarSpec& spec);

  // Submits one sequence; events arrive on the returned request's stream. `group`: n > 1 siblings
  // of one prompt; `parent_rid`: the API request's id, shared by all its sequences (abort target).
  StatusOr<std::shared_ptr<Req>> submit(std::vector<int32_t> prompt_ids, const SamplingParams& params,
                                        const std::string& rid, const std::string& group,
                                        const std::string& parent_rid = "");
  // Aborts the sequence with this exact id, or every sequence of the API request with this id.
  void abort(const std::string& rid) { scheduler_->abort(rid); }

  ServingMetrics& metrics() { return *metrics_; }
  ModelRunner& runner() { return *runner_; }
  const ModelRunner& runner() const { return *runner_; }
  // The scheduler; its scheduler-thread API (step(), flush_cache(), ...) only while start() has not
  // been called.
  Scheduler& scheduler() { return *scheduler_; }
  // The limits the scheduler and runner run with (chosen for the hardware unless given), as one
  // log line and as the /server_info document.
  std::string describe_limits() const;
  nlohmann::ordered_json server_info() const;
  void start() {
    started_ = true;
    scheduler_->start();
  }
  bool started() const { return started_; }
  // Stops taking requests (503) — in-flight ones continue until shutdown().
  void begin_drain() { draining_ = true; }
  bool draining() const { return draining_; }
  // Waits for in-flight requests up to timeout_ms (drain), then aborts the rest and stops.
  void shutdown(int64_t timeout_ms);
  // Asks for every unlocked prefix-cache entry to be evicted when the scheduler is next idle;
  // flush_done(ticket) tells, without waiting, whether that has happened.
  uint64_t request_flush() { return scheduler_->request_flush(); }
  bool flush_done(uint64_t ticket) { return scheduler_->wait_flush(ticket, std::chrono::milliseconds(0)); }

 private:
  std::string model_name_;
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::optional<ChatTemplate> chat_template_;
  std::shared_ptr<ServingMetrics> metrics_;
  std::unique_ptr<ModelStepExecutor> executor_;
  std::unique_ptr<Scheduler> scheduler_;
  std::once_flag grammar_once_;
  std::unique_ptr<grammar::GrammarCompiler> grammar_compiler_;
  std::atomic<bool> draining_{false};
  bool started_ = false;
};

}  // namespace rlm
