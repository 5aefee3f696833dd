#include "scheduler/scheduler.h"

#include <algorithm>
#include <cstdio>
#include <set>

namespace rlm {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}
}  // namespace

Scheduler::Scheduler(StepExecutor& executor, const SchedulerConfig& config, TokenTextDecoderFactory decoders,
                     std::shared_ptr<ServingMetrics> metrics)
    : exec_(executor),
      config_(config),
      decoders_(std::move(decoders)),
      metrics_(metrics ? std::move(metrics) : std::make_shared<ServingMetrics>()),
      page_size_(executor.page_size()),
      allocator_(static_cast<int32_t>(executor.num_pages())),
      eos_ids_(executor.eos_token_ids()),
      seed_rng_(std::random_device{}()),
      new_token_ratio_(config.init_new_token_ratio) {
  mamba_ = exec_.mamba_pool();
  RLM_CHECK(mamba_ == nullptr || config_.mamba_chunk_size > 0)
      << "a hybrid model needs a positive mamba_chunk_size, got " << config_.mamba_chunk_size;
  auto cache = mamba_ != nullptr
                   ? make_prefix_cache(config_.cache, static_cast<int32_t>(page_size_),
                                       static_cast<int32_t>(config_.mamba_chunk_size),
                                       [this](int32_t slot) { mamba_->free(slot); })
                   : make_prefix_cache(config_.cache, static_cast<int32_t>(page_size_));
  RLM_CHECK(cache.is_ok()) << cache.status().to_string();
  cache_ = std::move(cache).value();
  mamba_align_ = mamba_ != nullptr ? cache_->mamba_align() : 0;
  RLM_CHECK(config_.policy == "fcfs" || config_.policy == "lpm") << "unknown schedule policy '" << config_.policy
                                                                 << "' (fcfs or lpm)";
  config_.max_running_requests = std::min(config_.max_running_requests, exec_.req_to_token().max_requests());
  if (config_.max_context_len <= 0 || config_.max_context_len > exec_.req_to_token().max_context_len()) {
    config_.max_context_len = exec_.req_to_token().max_context_len();
  }
  RLM_CHECK(config_.chunked_prefill_size > 0 && config_.max_prefill_tokens > 0) << "prefill budgets must be positive";
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
  const int64_t prompt_len = static_cast<int64_t>(req.prompt_ids.size());
  if (prompt_len + req.params.max_new_tokens > config_.max_context_len) {
    return invalid_argument(str("this request needs ", prompt_len + req.params.max_new_tokens, " tokens (",
                                prompt_len, " in the prompt + ", req.params.max_new_tokens,
                                " to generate) but the context length is ", config_.max_context_len));
  }
  const int64_t capacity = exec_.num_pages() * page_size_;
  if (prompt_len + req.params.max_new_tokens > capacity) {
    return invalid_argument(str("this request needs ", prompt_len + req.params.max_new_tokens,
                                " tokens of KV cache but the pool holds ", capacity, " tokens"));
  }
  return Status::ok();
}

Status Scheduler::submit(std::shared_ptr<Req> req) {
  RLM_CHECK(req != nullptr && req->stream != nullptr) << "submit() needs a request with a stream";
  RLM_RETURN_IF_ERROR(validate(*req));
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return Status(StatusCode::kUnavailable, "the server is shutting down");
    if (queued_count_ >= config_.max_queued_requests) {
      return Status(StatusCode::kUnavailable, str("the request queue is full (", config_.max_queued_requests, ")"));
    }
    auto it = live_.find(req->rid);
    if (it != live_.end() && !it->second.expired()) {
      return invalid_argument(str("request id '", req->rid, "' is already in use"));
    }
    live_[req->rid] = req;
    ++queued_count_;
    inbox_.push_back(std::move(req));
  }
  cv_.notify_all();
  return Status::ok();
}

void Scheduler::abort(const std::string& rid) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    abort_inbox_.push_back(rid);
  }
  cv_.notify_all();
}

void Scheduler::drain_inbox() {
  std::vector<std::shared_ptr<Req>> fresh;
  std::vector<std::string> aborts;
  {
    std::lock_guard<std::mutex> lock(mu_);
    fresh.swap(inbox_);
    aborts.swap(abort_inbox_);
  }
  for (auto& r : fresh) admit_new(std::move(r));
  // An abort names a request id, or the parent id shared by the choices of one API request.
  auto matches = [](const Req& r, const std::string& target) {
    return r.rid == target || (!r.parent_rid.empty() && r.parent_rid == target);
  };
  for (const std::string& target : aborts) {
    for (auto& r : pending_) if (matches(*r, target)) r->abort_requested = true;
    for (auto& r : running_) if (matches(*r, target)) r->abort_requested = true;
  }
  do_aborts();
}

void Scheduler::admit_new(std::shared_ptr<Req> req) {
  req->state = ReqState::kPending;
  req->seed = req->params.seed ? *req->params.seed : seed_rng_();
  req->output = std::make_unique<OutputProcessor>(decoders_(req->params.skip_special_tokens, req->prompt_ids), req->params.stop);
  pending_.push_back(std::move(req));
}

void Scheduler::do_aborts() {
  std::vector<std::shared_ptr<Req>> doomed;
  for (auto& r : pending_) if (r->abort_requested) doomed.push_back(r);
  for (auto& r : running_) if (r->abort_requested) doomed.push_back(r);
  for (auto& r : doomed) {
    FinishInfo info;
    info.reason = "abort";
    finish(*r, std::move(info));
  }
}

int64_t Scheduler::pages_needed(const Req& req, int64_t to) const {
  const int64_t base = req.cache_handle.length;
  const int64_t have = static_cast<int64_t>(req.own_pages.size());
  const int64_t want = (to - base + page_size_ - 1) / page_size_;
  return std::max<int64_t>(0, want - have);
}

bool Scheduler::alloc_pages(int64_t n, std::vector<int32_t>& out) {
  out.clear();
  if (n <= 0) return true;
  if (allocator_.num_free() < n) {
    std::vector<int32_t> freed = cache_->evict((n - allocator_.num_free()) * page_size_);
    if (!freed.empty()) allocator_.free(slots_to_pages(freed, static_cast<int32_t>(page_size_)));
  }
  auto got = allocator_.alloc(static_cast<int32_t>(n));
  if (!got) return false;
  out = std::move(*got);
  return true;
}

bool Scheduler::extend_slots(Req& req, int64_t from, int64_t to, std::vector<int32_t>& slots) {
  std::vector<int32_t> pages;
  if (!alloc_pages(pages_needed(req, to), pages)) return false;
  req.own_pages.insert(req.own_pages.end(), pages.begin(), pages.end());
  const int64_t base = req.cache_handle.length;
  slots.clear();
  for (int64_t pos = from; pos < to; ++pos) {
    const int64_t page = req.own_pages[(pos - base) / page_size_];
    slots.push_back(static_cast<int32_t>(page * page_size_ + pos % page_size_));
  }
  return true;
}

bool Scheduler::run_prefill() {
  if (pending_.empty()) return false;
  if (config_.policy == "lpm") {
    // Longest cached prefix first; requests already holding KV (chunked, in progress) stay first.
    std::vector<std::pair<int64_t, std::shared_ptr<Req>>> keyed;
    for (auto& r : pending_) {
      int64_t key = r->req_slot >= 0 ? INT64_MAX : 0;
      if (r->req_slot < 0) {
        std::vector<int32_t> ids = r->fill_ids();
        const MatchResult m = cache_->match_prefix(std::span<const int32_t>(ids.data(), ids.size() - 1));
        key = mamba_ != nullptr ? m.mamba_len() : m.length();
      }
      keyed.emplace_back(key, r);
    }
    std::stable_sort(keyed.begin(), keyed.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    pending_.clear();
    for (auto& [k, r] : keyed) pending_.push_back(r);
  }

  std::vector<StepItem> items;
  std::vector<std::shared_ptr<Req>> admitted;
  std::set<std::string> groups;
  int64_t budget = config_.max_prefill_tokens;
  double reserved = 0.0;  // tokens kept for running requests' future decode steps
  for (auto& r : running_) reserved += static_cast<double>(r->remaining_tokens()) * new_token_ratio_;
  int64_t running = static_cast<int64_t>(running_.size());

  for (auto& rp : pending_) {
    Req& req = *rp;
    if (budget <= 0 || running + static_cast<int64_t>(admitted.size()) >= config_.max_running_requests) break;
    const bool sibling_prefilling = !req.group.empty() && config_.cache == "radix" && groups.count(req.group) > 0;
    const std::vector<int32_t> ids = req.fill_ids();
    const int64_t len = static_cast<int64_t>(ids.size());
    bool started_now = false;
    if (req.req_slot < 0) {
      const int32_t slot = exec_.req_to_token().alloc();
      if (slot < 0) break;
      req.req_slot = slot;
      const std::span<const int32_t> prompt(ids.data(), ids.size() - 1);
      MatchResult m = cache_->match_prefix(prompt);
      if (mamba_ != nullptr) {
        // The match made its snapshot the most recently used one, so allocating the working slot
        // evicts other snapshots first; it may still free the match's (or its KV), so match again
        // when it evicted anything.
        const int64_t evictions = mamba_evictions_;
        req.mamba_slot = alloc_mamba_slot();
        if (req.mamba_slot < 0) {
          drop_kv(req);
          break;
        }
        if (mamba_evictions_ != evictions) m = cache_->match_prefix(prompt);
      }
      // A hybrid model resumes at the deepest snapshot and recomputes the rest of the KV match.
      const CacheHandle use = mamba_ != nullptr ? m.mamba_handle : m.handle;
      cache_->lock(use);
      req.cache_handle = use;
      m.slots.resize(static_cast<size_t>(use.length));
      exec_.req_to_token().write(slot, 0, m.slots);
      req.kv_len = use.length;
      if (mamba_ != nullptr && use.length > 0) mamba_->copy_slot(m.mamba_slot, req.mamba_slot);  // copy-on-write
      if (mamba_align_ > 0) {
        const int64_t branch = m.length() / mamba_align_ * mamba_align_;
        req.mamba_branch_len = branch > req.kv_len ? branch : 0;
      }
      if (sibling_prefilling && req.kv_len + page_size_ <= static_cast<int64_t>(ids.size()) - 1) {
        // A sibling (n > 1) prefills this prompt now; wait one step and reuse its KV.
        drop_kv(req);
        continue;
      }
      if (!req.counted_cache_hit) {
        req.cached_tokens = std::min<int64_t>(req.kv_len, static_cast<int64_t>(req.prompt_ids.size()));
        req.counted_cache_hit = true;
        metrics_->add_prompt_tokens(static_cast<int64_t>(req.prompt_ids.size()), req.cached_tokens);
      }
      started_now = true;
    }
    const int64_t remaining = len - req.kv_len;
    const int64_t chunk = std::min({remaining, budget, config_.chunked_prefill_size});
    const bool completes = chunk == remaining;
    // KV room: pages for this chunk, plus (when the prompt completes) a share of its future tokens.
    const int64_t need_pages = pages_needed(req, req.kv_len + chunk);
    const double own_reserve = completes ? static_cast<double>(req.remaining_tokens()) * new_token_ratio_ : 0.0;
    const double available = static_cast<double>((allocator_.num_free() * page_size_) + cache_->evictable_size()) -
                             reserved;
    const bool first_work = running_.empty() && items.empty();
    const bool fits = first_work ? need_pages <= allocator_.num_free() + cache_->evictable_size() / page_size_
                                 : static_cast<double>(need_pages * page_size_) + own_reserve <= available;
    std::vector<int32_t> slots;
    if (!fits || !extend_slots(req, req.kv_len, req.kv_len + chunk, slots)) {
      if (started_now) drop_kv(req);  // undo the admission (no pages were taken); the request waits
      break;
    }
    reserved += own_reserve;
    StepItem item;
    item.entry.req_slot = req.req_slot;
    item.entry.prefix_len = static_cast<int32_t>(req.kv_len);
    item.entry.new_ids.assign(ids.begin() + req.kv_len, ids.begin() + req.kv_len + chunk);
    item.entry.new_slots = std::move(slots);
    plan_mamba(req, item.entry);
    item.sample = completes;
    item.req = &req;
    items.push_back(std::move(item));
    admitted.push_back(rp);
    if (!req.group.empty()) groups.insert(req.group);
    budget -= chunk;
    if (!completes) break;  // a chunked request ends the batch; it goes first next step
  }
  if (items.empty()) return false;
  int64_t computed = 0;
  for (const StepItem& it : items) computed += static_cast<int64_t>(it.entry.new_ids.size());
  metrics_->add_prefill_computed(computed);
  std::vector<SampleResult> results = exec_.run(ForwardMode::kExtend, items);
  process_results(items, results, ForwardMode::kExtend);
  return true;
}

bool Scheduler::decode_items(int64_t ahead, std::vector<StepItem>& items) {
  items.clear();
  for (auto& rp : running_) {
    Req& req = *rp;
    StepItem item;
    const int64_t pos = req.kv_len + ahead;
    if (!extend_slots(req, pos, pos + 1, item.entry.new_slots)) return false;
    item.entry.req_slot = req.req_slot;
    item.entry.prefix_len = static_cast<int32_t>(pos);
    item.entry.new_ids = {ahead == 0 ? req.output_ids.back() : kFutureToken};
    item.req = &req;
    item.pending_outputs = static_cast<int32_t>(ahead);
    items.push_back(std::move(item));
  }
  return true;
}

bool Scheduler::overlap_ok() const {
  if (!config_.overlap_schedule || !exec_.supports_overlap()) return false;
  // Hybrid models keep one snapshot slot per request, which a step launched ahead could overwrite
  // before the previous step's snapshot is cached (SGLang uses ping-pong slots): no overlap yet.
  // Penalties and logprobs run on the device too (ModelStepExecutor), so they never pause it.
  return mamba_ == nullptr;
}

bool Scheduler::run_decode() {
  if (running_.empty()) return false;
  // Make room for one more token per running request, retracting the least advanced if needed.
  while (true) {
    int64_t need = 0;
    for (auto& r : running_) need += pages_needed(*r, r->kv_len + 1);
    const int64_t have = allocator_.num_free() + cache_->evictable_size() / page_size_;
    if (need <= have || running_.size() <= 1) break;
    auto victim = std::min_element(running_.begin(), running_.end(), [](const auto& a, const auto& b) {
      if (a->output_ids.size() != b->output_ids.size()) return a->output_ids.size() < b->output_ids.size();
      return a->arrival > b->arrival;
    });
    retract(**victim);
  }
  std::vector<StepItem> items;
  std::vector<std::shared_ptr<Req>> batch = running_;
  for (auto& rp : batch) {
    Req& req = *rp;
    StepItem item;
    if (!extend_slots(req, req.kv_len, req.kv_len + 1, item.entry.new_slots)) {
      retract(req);
      continue;
    }
    item.entry.req_slot = req.req_slot;
    item.entry.prefix_len = static_cast<int32_t>(req.kv_len);
    item.entry.new_ids = {req.output_ids.back()};
    plan_mamba(req, item.entry);
    item.req = &req;
    items.push_back(std::move(item));
  }
  if (items.empty()) return true;  // everything was retracted; prefill picks them up next step
  new_token_ratio_ = std::max(config_.min_new_token_ratio, new_token_ratio_ - config_.new_token_ratio_decay);
  if (overlap_ok()) {
    // Launch and return; the next step() launches the step after it before reading this one.
    inflight_ = exec_.launch(ForwardMode::kDecode, items);
    metrics_->add_decode_step(/*overlapped=*/true);
    inflight_reqs_ = running_;
    inflight_items_ = std::move(items);
    return true;
  }
  std::vector<SampleResult> results = exec_.run(ForwardMode::kDecode, items);
  metrics_->add_decode_step(/*overlapped=*/false);
  process_results(items, results, ForwardMode::kDecode);
  return true;
}

bool Scheduler::launch_next_decode() {
  if (!pending_.empty() || !overlap_ok()) return false;
  // Requests that end by length with the in-flight token are left out; those that end by EOS or
  // a stop string are not known yet: they run one extra step whose token is dropped.
  std::vector<std::shared_ptr<Req>> saved = running_;
  std::vector<std::shared_ptr<Req>> next;
  for (auto& r : running_) {
    const int64_t outputs_after = static_cast<int64_t>(r->output_ids.size()) + 1;
    if (outputs_after >= r->params.max_new_tokens || r->seq_len() + 1 >= config_.max_context_len) continue;
    next.push_back(r);
  }
  if (next.empty()) return false;
  int64_t need = 0;
  for (auto& r : next) need += pages_needed(*r, r->kv_len + 2);
  if (need > allocator_.num_free() + cache_->evictable_size() / page_size_) return false;
  running_ = next;  // decode_items walks running_
  std::vector<StepItem> items;
  const bool ok = decode_items(1, items);
  running_ = std::move(saved);
  RLM_CHECK(ok) << "decode slots ran out after the room check";
  std::unique_ptr<LaunchedStep> launched = exec_.launch(ForwardMode::kDecode, items);
  metrics_->add_decode_step(/*overlapped=*/true);
  new_token_ratio_ = std::max(config_.min_new_token_ratio, new_token_ratio_ - config_.new_token_ratio_decay);
  complete_inflight();
  inflight_ = std::move(launched);
  inflight_items_ = std::move(items);
  inflight_reqs_ = std::move(next);
  return true;
}

void Scheduler::complete_inflight() {
  if (!inflight_) return;
  std::unique_ptr<LaunchedStep> step = std::move(inflight_);
  std::vector<StepItem> items = std::move(inflight_items_);
  std::vector<std::shared_ptr<Req>> keep = std::move(inflight_reqs_);  // alive until processed
  inflight_items_.clear();
  inflight_reqs_.clear();
  std::vector<SampleResult> results = exec_.wait(*step);
  process_results(items, results, ForwardMode::kDecode, /*skip_finished=*/true);
}

void Scheduler::process_results(const std::vector<StepItem>& items, const std::vector<SampleResult>& results,
                                ForwardMode mode, bool skip_finished) {
  size_t k = 0;
  // Items point at requests owned by pending_/running_; look each up by pointer.
  auto find_shared = [&](const Req* p) -> std::shared_ptr<Req> {
    for (auto& r : pending_) if (r.get() == p) return r;
    for (auto& r : running_) if (r.get() == p) return r;
    return nullptr;
  };
  for (const StepItem& it : items) {
    if (skip_finished && it.req->state != ReqState::kRunning) {
      if (it.sample) ++k;  // finished (EOS, stop string, abort) while this step was in flight: token dropped
      continue;
    }
    std::shared_ptr<Req> rp = find_shared(it.req);
    RLM_CHECK(rp != nullptr) << "step result for an unknown request";
    Req& req = *rp;
    req.kv_len += static_cast<int64_t>(it.entry.new_ids.size());
    if (!it.sample) {
      // A chunk is done: the request goes first in pending_ so it is continued next step (only
      // one partially prefilled request exists at a time, so it can never be starved of pages).
      pending_.erase(std::find(pending_.begin(), pending_.end(), rp));
      pending_.push_front(rp);
      if (req.mamba_track_len > 0) cache_prefix(req, /*finished=*/false);  // keep the chunk's snapshot
      continue;
    }
    const SampleResult& res = results.at(k++);
    if (mode == ForwardMode::kExtend) {
      pending_.erase(std::find(pending_.begin(), pending_.end(), rp));
      {
        std::lock_guard<std::mutex> lock(mu_);
        --queued_count_;
      }
      req.state = ReqState::kRunning;
      running_.push_back(rp);
      cache_prefix(req, /*finished=*/false);
    }
    on_token(req, res);
  }
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
  running_.erase(std::remove_if(running_.begin(), running_.end(), [&](const auto& r) { return r.get() == &req; }),
                 running_.end());
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
  auto same = [&](const auto& r) { return r.get() == &req; };
  running_.erase(std::remove_if(running_.begin(), running_.end(), same), running_.end());
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(), same), pending_.end());
  if (was_pending) {
    std::lock_guard<std::mutex> lock(mu_);
    --queued_count_;
  }
}

void Scheduler::release(Req& req, bool cache_kv) {
  if (req.req_slot >= 0) {
    if (cache_kv && req.kv_len > 0) {
      cache_prefix(req, /*finished=*/true);
      if (mamba_ != nullptr) free_mamba_slots(req);
      exec_.req_to_token().free(req.req_slot);
      req.req_slot = -1;
    } else {
      drop_kv(req);
    }
  }
  req.kv_len = 0;
  req.state = ReqState::kFinished;
  std::lock_guard<std::mutex> lock(mu_);
  live_.erase(req.rid);
}

void Scheduler::cache_prefix(Req& req, bool finished) {
  const int64_t base = req.cache_handle.length;
  int64_t len = req.kv_len;
  int32_t snapshot = -1;
  if (mamba_ != nullptr) {
    // A hybrid model can only resume where a state snapshot is, so KV is cached up to the newest
    // snapshot (nothing new without one); the rest stays the request's.
    const bool fresh = req.mamba_track_len > base;
    len = fresh ? req.mamba_track_len : base;
    snapshot = fresh ? req.mamba_track_slot : -1;
    req.mamba_track_len = 0;
  }
  std::vector<int32_t> ids = req.fill_ids();
  ids.resize(len);
  const std::vector<int32_t> slots = exec_.req_to_token().read(req.req_slot, 0, len);
  InsertResult ins = cache_->insert_with_snapshot(ids, slots, snapshot);
  if (ins.mamba_taken) req.mamba_track_slot = -1;  // the cache owns it now; else it is reused
  RLM_CHECK(ins.prefix_len >= base) << "cache insert returned prefix " << ins.prefix_len << " below the locked "
                                    << base;
  const int64_t dup_pages = (ins.prefix_len - base) / page_size_;
  const int64_t moved_end = (ins.handle.length - base) / page_size_;
  if (ins.handle.length > base) {
    RLM_CHECK_LE(moved_end, static_cast<int64_t>(req.own_pages.size())) << " cache took more pages than the request owns";
  }
  if (dup_pages > 0) {  // another request cached these tokens first; ours are duplicates
    allocator_.free(std::span<const int32_t>(req.own_pages.data(), dup_pages));
  }
  std::vector<int32_t> rest;
  if (ins.handle.length > base) {
    rest.assign(req.own_pages.begin() + moved_end, req.own_pages.end());
  } else {
    rest = req.own_pages;
  }
  if (finished) {
    if (!rest.empty()) allocator_.free(rest);
    req.own_pages.clear();
    cache_->unlock(req.cache_handle);
    req.cache_handle = CacheHandle{};
    return;
  }
  MatchResult m = cache_->match_prefix(std::span<const int32_t>(ids.data(), ins.handle.length));
  RLM_CHECK_EQ(m.length(), ins.handle.length) << " re-match after insert";
  cache_->lock(m.handle);
  cache_->unlock(req.cache_handle);
  req.cache_handle = m.handle;
  exec_.req_to_token().write(req.req_slot, 0, m.slots);
  req.own_pages = std::move(rest);
}

int32_t Scheduler::alloc_mamba_slot() {
  int32_t slot = mamba_->alloc();
  if (slot < 0 && cache_->mamba_size() > 0) {
    std::vector<int32_t> freed = cache_->evict_mamba(1);  // its slot returns through the callback
    ++mamba_evictions_;
    if (!freed.empty()) allocator_.free(slots_to_pages(freed, static_cast<int32_t>(page_size_)));
    slot = mamba_->alloc();
  }
  return slot;
}

void Scheduler::free_mamba_slots(Req& req) {
  if (req.mamba_slot >= 0) mamba_->free(req.mamba_slot);
  if (req.mamba_track_slot >= 0) mamba_->free(req.mamba_track_slot);
  req.mamba_slot = -1;
  req.mamba_track_slot = -1;
  req.mamba_track_len = 0;
  req.mamba_branch_len = 0;
}

void Scheduler::plan_mamba(Req& req, BatchEntry& entry) {
  if (mamba_ == nullptr) return;
  entry.mamba_slot = req.mamba_slot;
  if (mamba_align_ == 0) return;  // the cache keeps no snapshots (--cache naive)
  const int64_t from = entry.prefix_len;
  const int64_t to = from + static_cast<int64_t>(entry.new_ids.size());
  int64_t pos = to / mamba_align_ * mamba_align_;  // the last aligned position this step reaches
  if (req.mamba_branch_len > from && req.mamba_branch_len <= to) pos = req.mamba_branch_len;
  if (req.mamba_branch_len <= to) req.mamba_branch_len = 0;
  if (pos <= from) return;
  if (req.mamba_track_slot < 0) req.mamba_track_slot = alloc_mamba_slot();
  if (req.mamba_track_slot < 0) return;  // the pool is dry: this step leaves no snapshot
  entry.mamba_track_slot = req.mamba_track_slot;
  entry.mamba_track_pos = static_cast<int32_t>(pos);
  req.mamba_track_len = pos;  // the step runs right after planning
}

void Scheduler::drop_kv(Req& req) {
  if (mamba_ != nullptr) free_mamba_slots(req);
  if (!req.own_pages.empty()) allocator_.free(req.own_pages);
  req.own_pages.clear();
  cache_->unlock(req.cache_handle);
  req.cache_handle = CacheHandle{};
  exec_.req_to_token().free(req.req_slot);
  req.req_slot = -1;
  req.kv_len = 0;
}

void Scheduler::retract(Req& req) {
  drop_kv(req);
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
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++queued_count_;
  }
  new_token_ratio_ = config_.init_new_token_ratio;
}

bool Scheduler::step() {
  drain_inbox();
  bool did = true;
  if (inflight_) {
    if (!launch_next_decode()) complete_inflight();
  } else {
    did = run_prefill() || run_decode();
  }
  publish_gauges();
  return did;
}

bool Scheduler::has_work() const {
  if (!pending_.empty() || !running_.empty() || inflight_) return true;
  std::lock_guard<std::mutex> lock(mu_);
  return !inbox_.empty() || !abort_inbox_.empty();
}

uint64_t Scheduler::request_flush() {
  uint64_t ticket = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ticket = ++flush_requested_;
  }
  cv_.notify_all();
  return ticket;
}

bool Scheduler::wait_flush(uint64_t ticket, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return flush_cv_.wait_for(lock, timeout, [&] { return flush_done_ >= ticket; });
}

void Scheduler::flush_cache() {
  std::vector<int32_t> freed = cache_->evict(cache_->evictable_size());
  std::vector<int32_t> more = cache_->evict_mamba(cache_->mamba_size());  // snapshots on locked paths
  freed.insert(freed.end(), more.begin(), more.end());
  if (!freed.empty()) allocator_.free(slots_to_pages(freed, static_cast<int32_t>(page_size_)));
  publish_gauges();
}

Status Scheduler::check_integrity() const {
  RLM_RETURN_IF_ERROR(cache_->check_integrity());
  int64_t req_pages = 0;
  for (const auto& r : running_) req_pages += static_cast<int64_t>(r->own_pages.size());
  for (const auto& r : pending_) req_pages += static_cast<int64_t>(r->own_pages.size());
  if (cache_->total_size() % page_size_ != 0) {
    return internal_error(str("prefix cache holds ", cache_->total_size(), " tokens, not a page multiple"));
  }
  const int64_t total = allocator_.num_free() + cache_->total_size() / page_size_ + req_pages;
  if (total != allocator_.num_total()) {
    return internal_error(str("KV pages do not add up: free ", allocator_.num_free(), " + cache ",
                              cache_->total_size() / page_size_, " + requests ", req_pages, " != ",
                              allocator_.num_total()));
  }
  for (const auto& r : running_) {
    if (r->req_slot < 0) return internal_error(str("running request ", r->rid, " has no request slot"));
  }
  if (mamba_ != nullptr) {
    // Every state slot is free, a cached snapshot, or a request's working / snapshot slot.
    int64_t held = 0;
    auto count = [&](const Req& r) -> Status {
      for (const int32_t s : {r.mamba_slot, r.mamba_track_slot}) {
        if (s < 0) continue;
        if (!mamba_->in_use(s)) return internal_error(str("request ", r.rid, " holds mamba slot ", s, " that is free"));
        ++held;
      }
      if ((r.mamba_slot >= 0) != (r.req_slot >= 0)) {
        return internal_error(str("request ", r.rid, " has a request slot xor a mamba state slot"));
      }
      return Status::ok();
    };
    for (const auto& r : running_) RLM_RETURN_IF_ERROR(count(*r));
    for (const auto& r : pending_) RLM_RETURN_IF_ERROR(count(*r));
    if (mamba_->num_free() + cache_->mamba_size() + held != mamba_->num_slots()) {
      return internal_error(str("mamba slots do not add up: free ", mamba_->num_free(), " + cache ",
                                cache_->mamba_size(), " + requests ", held, " != ", mamba_->num_slots()));
    }
  }
  return Status::ok();
}

void Scheduler::publish_gauges() {
  SchedulerGauges g;
  g.running = static_cast<int64_t>(running_.size());
  {
    std::lock_guard<std::mutex> lock(mu_);
    g.queued = static_cast<int64_t>(pending_.size() + inbox_.size());
  }
  g.kv_pages_total = allocator_.num_total();
  g.kv_pages_free = allocator_.num_free();
  g.page_size = page_size_;
  g.cache_tokens = cache_->total_size();
  g.cache_evictable = cache_->evictable_size();
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
    if (stop_ && (!drain_ || !has_work())) break;
    bool did = false;
    try {
      did = step();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "radixlm: scheduler step failed: %s\n", e.what());
      fail_all(str("internal error: ", e.what()));
      did = true;
    }
    if (did) continue;
    uint64_t flush_ticket = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (flush_requested_ > flush_done_) flush_ticket = flush_requested_;
    }
    if (flush_ticket > 0) {
      flush_cache();
      {
        std::lock_guard<std::mutex> lock(mu_);
        flush_done_ = flush_ticket;
      }
      flush_cv_.notify_all();
    }
    if (config_.check_integrity_when_idle) {
      Status st = check_integrity();
      if (!st.is_ok()) std::fprintf(stderr, "radixlm: integrity check failed: %s\n", st.to_string().c_str());
    }
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::milliseconds(20),
                 [&] { return !inbox_.empty() || !abort_inbox_.empty() || stop_.load() || flush_requested_ > flush_done_; });
  }
  // Not draining: abort whatever is left (queued requests included).
  drain_inbox();
  fail_all("the server is shutting down");
}

void Scheduler::start() {
  RLM_CHECK(!thread_.joinable()) << "scheduler already started";
  thread_ = std::thread([this] { loop(); });
}

void Scheduler::stop(bool drain) {
  drain_ = drain;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

}  // namespace rlm
