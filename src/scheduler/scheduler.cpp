#include "scheduler/scheduler.h"

#include <algorithm>
#include <cstdio>

#include "grammar/grammar.h"
#include "scheduler/prefill_adder.h"

namespace rlm {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}
}  // namespace

StatusOr<SchedulePolicy> parse_schedule_policy(std::string_view name) {
  if (name == "fcfs") return SchedulePolicy::kFcfs;
  if (name == "lpm") return SchedulePolicy::kLpm;
  return invalid_argument(str("unknown schedule policy '", name, "' (fcfs or lpm)"));
}

const char* schedule_policy_name(SchedulePolicy policy) {
  return policy == SchedulePolicy::kLpm ? "lpm" : "fcfs";
}

StatusOr<CacheKind> parse_cache_kind(std::string_view name) {
  if (name == "radix") return CacheKind::kRadix;
  if (name == "naive") return CacheKind::kNaive;
  return invalid_argument(str("unknown prefix cache '", name, "' (radix or naive)"));
}

const char* cache_kind_name(CacheKind kind) { return kind == CacheKind::kNaive ? "naive" : "radix"; }

Scheduler::Scheduler(StepExecutor& executor, const SchedulerConfig& config, TokenTextDecoderFactory decoders,
                     std::shared_ptr<ServingMetrics> metrics)
    : exec_(executor),
      config_(config),
      decoders_(std::move(decoders)),
      metrics_(metrics ? std::move(metrics) : std::make_shared<ServingMetrics>()),
      kv_(executor.req_to_token(), executor.num_pages(), executor.page_size(), config.cache, executor.mamba_pool(),
          config.mamba_chunk_size),
      eos_ids_(executor.eos_token_ids()),
      seed_rng_(std::random_device{}()),
      new_token_ratio_(config.init_new_token_ratio) {
  config_.max_running_requests = std::min(config_.max_running_requests, exec_.req_to_token().max_requests());
  if (config_.max_context_len <= 0 || config_.max_context_len > exec_.req_to_token().max_context_len()) {
    config_.max_context_len = exec_.req_to_token().max_context_len();
  }
  RLM_CHECK(config_.chunked_prefill_size > 0 && config_.max_prefill_tokens > 0) << "prefill budgets must be positive";
  RLM_CHECK(config_.mixed_prefill_tokens >= 0) << "mixed_prefill_tokens must not be negative";
  publish_gauges();
}

Scheduler::~Scheduler() { stop(false); }

Status Scheduler::validate(const Req& req) const {
  const int64_t vocab = exec_.vocab_size();
  if (req.prompt_ids.empty()) return invalid_argument("the prompt is empty");
  for (int32_t id : req.prompt_ids) {
    if (id < 0 || id >= vocab) {
      return invalid_argument(str("prompt token id ", id, " is outside the vocabulary [0, ", vocab, ")"));
    }
  }
  RLM_RETURN_IF_ERROR(req.params.validate(vocab));
  if (req.params.prompt_logprobs >= 0 && !exec_.supports_prompt_logprobs()) {
    return invalid_argument("prompt_logprobs are not supported by this engine");
  }
  const int64_t prompt_len = static_cast<int64_t>(req.prompt_ids.size());
  if (prompt_len + req.params.max_new_tokens > config_.max_context_len) {
    return invalid_argument(str("this request needs ", prompt_len + req.params.max_new_tokens, " tokens (",
                                prompt_len, " in the prompt + ", req.params.max_new_tokens,
                                " to generate) but the context length is ", config_.max_context_len));
  }
  const int64_t capacity = kv_.num_total_pages() * kv_.page_size();
  if (prompt_len + req.params.max_new_tokens > capacity) {
    return invalid_argument(str("this request needs ", prompt_len + req.params.max_new_tokens,
                                " tokens of KV cache but the pool holds ", capacity, " tokens"));
  }
  return Status::ok();
}

Status Scheduler::submit(std::shared_ptr<Req> req) {
  RLM_CHECK(req != nullptr && req->stream != nullptr) << "submit() needs a request with a stream";
  RLM_RETURN_IF_ERROR(validate(*req));
  return inbox_.submit(std::move(req), config_.max_queued_requests);
}

void Scheduler::abort(const std::string& rid) { inbox_.abort(rid); }

// ---------------------------------------------------------------------------------------------
// Drain the inbox.

void Scheduler::drain_inbox() {
  Inbox::Drained d = inbox_.drain();
  for (auto& req : d.requests) {
    req->state = ReqState::kPending;
    req->seed = req->params.seed ? *req->params.seed : seed_rng_();
    req->output = std::make_unique<OutputProcessor>(decoders_(req->params.skip_special_tokens, req->prompt_ids),
                                                    req->params.stop);
    if (req->params.grammar) req->grammar = std::make_shared<grammar::GrammarMatcher>(req->params.grammar);
    pending_.push_back(std::move(req));
  }
  // An abort names a request id, or the parent id shared by the choices of one API request.
  auto matches = [](const Req& r, const std::string& target) {
    return r.rid == target || (!r.parent_rid.empty() && r.parent_rid == target);
  };
  for (const std::string& target : d.aborts) {
    for (auto& r : pending_) if (matches(*r, target)) r->abort_requested = true;
    for (auto& r : running_) if (matches(*r, target)) r->abort_requested = true;
  }
  finish_aborted();
}

void Scheduler::finish_aborted() {
  std::vector<std::shared_ptr<Req>> doomed;
  for (auto& r : pending_) if (r->abort_requested) doomed.push_back(r);
  for (auto& r : running_) if (r->abort_requested) doomed.push_back(r);
  for (auto& r : doomed) {
    FinishInfo info;
    info.reason = "abort";
    finish(*r, std::move(info));
  }
}

// ---------------------------------------------------------------------------------------------
// Schedule.

bool Scheduler::overlap_ok() const {
  if (!config_.overlap_schedule || !exec_.supports_overlap()) return false;
  // Hybrid models keep one snapshot slot per request, which a step launched ahead could overwrite
  // before the previous step's snapshot is cached (SGLang uses ping-pong slots): no overlap yet.
  // Penalties and logprobs run on the device too (ModelStepExecutor), so they never pause it.
  return kv_.hybrid() == nullptr;
}

std::optional<ScheduledBatch> Scheduler::schedule(bool ahead) {
  ScheduledBatch b;
  if (!config_.enable_mixed_chunk) {
    // Prefill first: a step with prompt chunks carries no decode items.
    add_prefill_chunks(b, config_.max_prefill_tokens);
    if (!b.empty()) return b;
  }
  const DecodeRoom room = add_decode_items(b, ahead);
  if (room == DecodeRoom::kShort) return std::nullopt;
  // Mixed step: prompt chunks share the token budget with the decode items. Not after a
  // retraction, which means KV is short.
  if (config_.enable_mixed_chunk && room == DecodeRoom::kFits) {
    int64_t budget = config_.max_prefill_tokens - b.num_decode;
    if (config_.mixed_prefill_tokens > 0 && b.num_decode > 0) budget = std::min(budget, config_.mixed_prefill_tokens);
    add_prefill_chunks(b, budget);
  }
  return b;
}

Scheduler::DecodeRoom Scheduler::add_decode_items(ScheduledBatch& b, bool ahead) {
  // Ahead of an in-flight step, requests that step ends by length are left out; those it ends by
  // EOS or a stop string are not known yet: they run one extra step whose token is dropped.
  auto decodes = [&](const Req& r) {
    return !ahead || (r.outputs_after_inflight() < r.params.max_new_tokens &&
                      r.seq_len() + r.inflight_outputs < config_.max_context_len);
  };
  auto pages_short = [&] {
    int64_t need = 0;
    for (const auto& r : running_) {
      if (decodes(*r)) need += kv_.pages_needed(*r, r->scheduled_len() + 1);
    }
    return need > kv_.room_pages();
  };
  DecodeRoom room = DecodeRoom::kFits;
  if (pages_short()) {
    if (ahead) return DecodeRoom::kShort;
    room = DecodeRoom::kRetracted;
    // Retract the least advanced request (fewest outputs, then latest arrival) until it fits.
    while (running_.size() > 1 && pages_short()) {
      auto victim = std::min_element(running_.begin(), running_.end(), [](const auto& x, const auto& y) {
        if (x->output_ids.size() != y->output_ids.size()) return x->output_ids.size() < y->output_ids.size();
        return x->arrival > y->arrival;
      });
      retract(**victim);
    }
  }
  const std::vector<std::shared_ptr<Req>> batch = running_;
  for (const auto& rp : batch) {
    Req& req = *rp;
    if (!decodes(req)) continue;
    StepItem item;
    const int64_t pos = req.scheduled_len();
    if (!kv_.extend(req, pos, pos + 1, item.entry.new_slots)) {
      RLM_CHECK(!ahead) << "decode slots ran out after the room check";
      retract(req);
      room = DecodeRoom::kRetracted;
      continue;
    }
    item.entry.req_slot = req.req_slot;
    item.entry.prefix_len = static_cast<int32_t>(pos);
    item.entry.new_ids = {req.inflight_outputs > 0 ? kFutureToken : req.output_ids.back()};
    if (HybridStateSlots* h = kv_.hybrid()) h->plan(req, item.entry);
    item.decode = true;
    item.req = &req;
    item.pending_outputs = req.inflight_outputs;
    b.items.push_back(std::move(item));
    b.reqs.push_back(rp);
    ++b.num_decode;
  }
  return room;
}

void Scheduler::add_prefill_chunks(ScheduledBatch& b, int64_t token_budget) {
  if (pending_.empty() || token_budget <= 0) return;
  order_pending(pending_, config_.policy, kv_.cache(), kv_.hybrid() != nullptr);
  PrefillBudget budget;
  budget.tokens = token_budget;
  budget.chunk = config_.chunked_prefill_size;
  budget.requests = config_.max_running_requests - static_cast<int64_t>(running_.size());
  const std::set<std::string> busy = inflight_ ? inflight_->batch.prefill_groups : std::set<std::string>{};
  PrefillAdder adder(kv_, config_, *metrics_, new_token_ratio_);
  std::vector<PrefillChunk> chunks = adder.take(pending_, running_, budget, busy, running_.empty() && b.empty());
  for (PrefillChunk& c : chunks) {
    b.num_prefill_tokens += static_cast<int64_t>(c.item.entry.new_ids.size());
    if (!c.req->group.empty()) b.prefill_groups.insert(c.req->group);
    b.items.push_back(std::move(c.item));
    b.reqs.push_back(std::move(c.req));
  }
  if (!chunks.empty()) b.mode = ForwardMode::kExtend;
}

// ---------------------------------------------------------------------------------------------
// Launch.

void Scheduler::commit(const ScheduledBatch& b, bool launched) {
  for (size_t i = 0; i < b.items.size(); ++i) {
    const StepItem& it = b.items[i];
    Req& req = *b.reqs[i];
    req.inflight_tokens += static_cast<int64_t>(it.entry.new_ids.size());
    if (!it.sample) continue;
    ++req.inflight_outputs;
    if (it.decode) continue;
    // The prompt completes in this step: the request decodes from the next step on.
    pending_.erase(std::find(pending_.begin(), pending_.end(), b.reqs[i]));
    inbox_.count_queued(-1);
    req.state = ReqState::kRunning;
    running_.push_back(b.reqs[i]);
  }
  if (b.num_prefill_tokens > 0) metrics_->add_prefill_computed(b.num_prefill_tokens);
  if (b.num_decode > 0) {
    metrics_->add_decode_step(/*overlapped=*/launched);
    if (b.num_prefill_tokens > 0) metrics_->add_mixed_step();
    new_token_ratio_ = std::max(config_.min_new_token_ratio, new_token_ratio_ - config_.new_token_ratio_decay);
  }
}

void Scheduler::run_now(ScheduledBatch& b) {
  commit(b, /*launched=*/false);
  const std::vector<SampleResult> results = exec_.run(b.mode, b.items);
  process_results(b, results);
}

std::unique_ptr<LaunchedStep> Scheduler::launch(ScheduledBatch& b) {
  commit(b, /*launched=*/true);
  return exec_.launch(b.mode, b.items);
}

// ---------------------------------------------------------------------------------------------
// Process results.

void Scheduler::complete_inflight() {
  if (!inflight_) return;
  Inflight done = std::move(*inflight_);
  inflight_.reset();
  const std::vector<SampleResult> results = exec_.wait(*done.step);
  process_results(done.batch, results);
}

void Scheduler::process_results(const ScheduledBatch& b, const std::vector<SampleResult>& results) {
  std::vector<PromptLogprobs> prompt_lps = exec_.take_prompt_logprobs();
  size_t k = 0, p = 0;
  for (size_t i = 0; i < b.items.size(); ++i) {
    const StepItem& it = b.items[i];
    Req& req = *b.reqs[i];
    if (p < prompt_lps.size() && prompt_lps[p].item == i) push_prompt_logprobs(req, std::move(prompt_lps[p++]));
    const SampleResult* res = it.sample ? &results.at(k++) : nullptr;
    // Finished (EOS, stop string, abort) while this step was in flight: its token is dropped.
    if (req.state == ReqState::kFinished) continue;
    const int64_t n = static_cast<int64_t>(it.entry.new_ids.size());
    req.kv_len += n;
    req.inflight_tokens -= n;
    if (res == nullptr) {
      // A prompt chunk is done; the request stays first in pending_ and is continued next step.
      if (req.mamba_track_len > 0) kv_.cache_prefix(req, /*finished=*/false);  // keep the chunk's snapshot
      continue;
    }
    --req.inflight_outputs;
    if (!it.decode) kv_.cache_prefix(req, /*finished=*/false);  // the prompt's KV joins the cache
    on_token(req, *res);
  }
  RLM_CHECK_EQ(k, results.size()) << " step results vs sampled items";
  RLM_CHECK_EQ(p, prompt_lps.size()) << " prompt logprobs vs items that asked for them";
}

void Scheduler::push_prompt_logprobs(Req& req, PromptLogprobs lps) {
  if (req.state == ReqState::kFinished) return;
  // A chunk computed again after a retraction repeats positions already delivered.
  StreamEvent ev;
  for (size_t j = 0; j < lps.tokens.size(); ++j) {
    if (lps.first_pos + static_cast<int64_t>(j) == req.prompt_logprobs_next) {
      ev.prompt_logprobs.push_back(std::move(lps.tokens[j]));
      ++req.prompt_logprobs_next;
    }
  }
  if (!ev.prompt_logprobs.empty()) req.stream->push(std::move(ev));
}

void Scheduler::on_token(Req& req, const SampleResult& res) {
  const auto now = Clock::now();
  if (req.output_ids.empty()) {
    metrics_->ttft.observe(seconds_between(req.arrival, now));
    req.first_token_time = now;
  } else {
    metrics_->itl.observe(seconds_between(req.last_token_time, now));
  }
  req.last_token_time = now;
  req.output_ids.push_back(res.token);
  metrics_->add_generation_tokens(1);
  // The sampled token was one the grammar allowed (its mask): a refusal is an engine bug, which
  // ends this request with an error rather than an output that breaks the grammar.
  if (req.grammar && !req.grammar->accept(res.token)) {
    FinishInfo info;
    info.reason = "abort";
    info.error = str("internal error: the grammar rejected sampled token ", res.token);
    finish(req, std::move(info));
    return;
  }

  StreamEvent ev;
  OutputProcessor::Result text = req.output->push(res.token);
  ev.text = std::move(text.text);
  ev.token_ids = {res.token};
  if (res.logprob) ev.logprobs.push_back(*res.logprob);

  const int64_t n_out = static_cast<int64_t>(req.output_ids.size());
  const bool min_reached = n_out >= req.params.min_new_tokens;
  std::optional<FinishInfo> fin;
  if (text.matched_stop) {
    fin = FinishInfo{};
    fin->reason = "stop";
    fin->matched_stop_str = text.matched_stop;
  } else if (req.grammar && req.grammar->terminated()) {
    fin = FinishInfo{};
    fin->reason = "stop";
    fin->matched_stop_token = res.token;
  } else if (min_reached && !req.params.ignore_eos &&
             std::find(eos_ids_.begin(), eos_ids_.end(), res.token) != eos_ids_.end()) {
    fin = FinishInfo{};
    fin->reason = "stop";
    fin->matched_stop_token = res.token;
  } else if (min_reached && std::find(req.params.stop_token_ids.begin(), req.params.stop_token_ids.end(),
                                      res.token) != req.params.stop_token_ids.end()) {
    fin = FinishInfo{};
    fin->reason = "stop";
    fin->matched_stop_token = res.token;
  } else if (n_out >= req.params.max_new_tokens || req.seq_len() >= config_.max_context_len) {
    fin = FinishInfo{};
    fin->reason = "length";
  }
  if (!fin) {
    req.stream->push(std::move(ev));
    return;
  }
  if (!text.matched_stop) ev.text += req.output->flush();
  fin->prompt_tokens = static_cast<int64_t>(req.prompt_ids.size());
  fin->completion_tokens = n_out;
  fin->cached_tokens = req.cached_tokens;
  ev.finish = std::move(fin);
  metrics_->e2e.observe(seconds_between(req.arrival, now));
  metrics_->add_finished(ev.finish->reason);
  release(req, /*cache_kv=*/true);
  req.stream->push(std::move(ev));
  remove_running(req);
}

void Scheduler::finish(Req& req, FinishInfo info) {
  // Finishing outside the token path (abort / error): flush text, release, remove.
  StreamEvent ev;
  if (info.reason != "abort" || info.error.empty()) ev.text = req.output ? req.output->flush() : "";
  info.prompt_tokens = static_cast<int64_t>(req.prompt_ids.size());
  info.completion_tokens = static_cast<int64_t>(req.output_ids.size());
  info.cached_tokens = req.cached_tokens;
  metrics_->add_finished(info.reason);
  metrics_->e2e.observe(seconds_between(req.arrival, Clock::now()));
  const bool was_pending = req.state == ReqState::kPending;
  release(req, /*cache_kv=*/false);
  ev.finish = std::move(info);
  req.stream->push(std::move(ev));
  remove_running(req);
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(), [&](const auto& r) { return r.get() == &req; }),
                 pending_.end());
  if (was_pending) inbox_.count_queued(-1);
}

void Scheduler::release(Req& req, bool cache_kv) {
  kv_.release(req, cache_kv);
  req.state = ReqState::kFinished;
  inbox_.forget(req.rid);
}

void Scheduler::remove_running(const Req& req) {
  running_.erase(std::remove_if(running_.begin(), running_.end(), [&](const auto& r) { return r.get() == &req; }),
                 running_.end());
}

void Scheduler::retract(Req& req) {
  RLM_CHECK(req.inflight_tokens == 0 && req.inflight_outputs == 0)
      << "retraction of request " << req.rid << " while a step of it is in flight";
  kv_.drop(req);
  req.state = ReqState::kPending;
  ++req.retractions;
  metrics_->add_retraction();
  auto it = std::find_if(running_.begin(), running_.end(), [&](const auto& r) { return r.get() == &req; });
  RLM_CHECK(it != running_.end()) << "retract of a request that is not running";
  std::shared_ptr<Req> keep = *it;
  running_.erase(it);
  // Retracted requests go first, but behind a partially prefilled request, which must finish.
  auto pos = pending_.begin();
  if (pos != pending_.end() && (*pos)->req_slot >= 0) ++pos;
  pending_.insert(pos, keep);
  inbox_.count_queued(+1);
  new_token_ratio_ = config_.init_new_token_ratio;
}

// ---------------------------------------------------------------------------------------------
// The loop.

bool Scheduler::step() {
  drain_inbox();
  bool did = true;
  if (inflight_) {
    // Overlap: launch the next step from the state the in-flight one leaves, then process that one
    // while the device runs the next.
    std::optional<ScheduledBatch> next;
    if (overlap_ok()) next = schedule(/*ahead=*/true);
    std::unique_ptr<LaunchedStep> launched;
    if (next && !next->empty()) launched = launch(*next);
    complete_inflight();
    if (launched) {
      exec_.finish_launch(*launched);  // grammar masks need the results just processed
      inflight_ = Inflight{std::move(launched), std::move(*next)};
    }
  } else {
    const int64_t retractions = metrics_->retractions();
    ScheduledBatch b = std::move(*schedule(/*ahead=*/false));
    if (b.empty()) {
      did = metrics_->retractions() != retractions;  // all retracted: they are admitted again next step
    } else if (overlap_ok()) {
      std::unique_ptr<LaunchedStep> launched = launch(b);
      exec_.finish_launch(*launched);
      inflight_ = Inflight{std::move(launched), std::move(b)};
    } else {
      run_now(b);
    }
  }
  publish_gauges();
  return did;
}

bool Scheduler::has_work() const {
  return !pending_.empty() || !running_.empty() || inflight_.has_value() || inbox_.has_messages();
}

void Scheduler::flush_cache() {
  kv_.flush();
  publish_gauges();
}

Status Scheduler::check_integrity() const {
  std::vector<const Req*> holders;
  for (const auto& r : running_) holders.push_back(r.get());
  for (const auto& r : pending_) holders.push_back(r.get());
  RLM_RETURN_IF_ERROR(kv_.check_integrity(holders));
  for (const auto& r : running_) {
    if (r->req_slot < 0) return internal_error(str("running request ", r->rid, " has no request slot"));
  }
  return Status::ok();
}

void Scheduler::publish_gauges() {
  SchedulerGauges g;
  g.running = static_cast<int64_t>(running_.size());
  g.queued = static_cast<int64_t>(pending_.size()) + inbox_.num_waiting();
  g.kv_pages_total = kv_.num_total_pages();
  g.kv_pages_free = kv_.num_free_pages();
  g.page_size = kv_.page_size();
  g.cache_tokens = kv_.cache().total_size();
  g.cache_evictable = kv_.cache().evictable_size();
  metrics_->set_gauges(g);
}

void Scheduler::fail_all(const std::string& error) {
  std::vector<std::shared_ptr<Req>> all(running_.begin(), running_.end());
  all.insert(all.end(), pending_.begin(), pending_.end());
  for (auto& r : all) {
    FinishInfo info;
    info.reason = "abort";
    info.error = error;
    finish(*r, std::move(info));
  }
}

void Scheduler::loop() {
  while (true) {
    if (inbox_.closed() && (!drain_ || !has_work())) break;
    bool did = false;
    try {
      did = step();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "radixlm: scheduler step failed: %s\n", e.what());
      inflight_.reset();  // its results are lost with the failed step
      fail_all(str("internal error: ", e.what()));
      did = true;
    }
    if (did) continue;
    if (const uint64_t ticket = inbox_.flush_due()) {
      flush_cache();
      inbox_.flush_served(ticket);
    }
    if (config_.check_integrity_when_idle) {
      Status st = check_integrity();
      if (!st.is_ok()) std::fprintf(stderr, "radixlm: integrity check failed: %s\n", st.to_string().c_str());
    }
    inbox_.wait(std::chrono::milliseconds(20));
  }
  // Not draining: abort whatever is left (queued requests included).
  try {
    complete_inflight();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "radixlm: the last step failed: %s\n", e.what());
  }
  drain_inbox();
  fail_all("the server is shutting down");
}

void Scheduler::start() {
  RLM_CHECK(!thread_.joinable()) << "scheduler already started";
  thread_ = std::thread([this] { loop(); });
}

void Scheduler::stop(bool drain) {
  drain_ = drain;
  inbox_.close();
  if (thread_.joinable()) thread_.join();
}

}  // namespace rlm
