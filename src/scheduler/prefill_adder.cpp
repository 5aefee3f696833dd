#include "scheduler/prefill_adder.h"

#include <algorithm>

namespace rlm {

void order_pending(std::deque<std::shared_ptr<Req>>& pending, SchedulePolicy policy, PrefixCache& cache,
                   bool resume_at_snapshots) {
  if (policy != SchedulePolicy::kLpm || pending.empty()) return;
  std::vector<std::pair<int64_t, std::shared_ptr<Req>>> keyed;
  for (auto& r : pending) {
    int64_t key = INT64_MAX;  // holds KV already (partly prefilled): stays first
    if (r->req_slot < 0) {
      const std::vector<int32_t> ids = r->fill_ids();
      const MatchResult m = cache.match_prefix(std::span<const int32_t>(ids.data(), ids.size() - 1));
      key = resume_at_snapshots ? m.mamba_len() : m.length();
    }
    keyed.emplace_back(key, r);
  }
  std::stable_sort(keyed.begin(), keyed.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  pending.clear();
  for (auto& [key, r] : keyed) pending.push_back(r);
}

std::vector<PrefillChunk> PrefillAdder::take(const std::deque<std::shared_ptr<Req>>& pending,
                                             const std::vector<std::shared_ptr<Req>>& running, PrefillBudget budget,
                                             const std::set<std::string>& busy_groups, bool first_work) {
  std::vector<PrefillChunk> out;
  std::set<std::string> groups = busy_groups;
  const int64_t page_size = kv_.page_size();
  double reserved = 0.0;  // tokens kept for running requests' future decode steps
  for (const auto& r : running) reserved += static_cast<double>(r->remaining_tokens()) * new_token_ratio_;

  for (const auto& rp : pending) {
    Req& req = *rp;
    if (budget.tokens <= 0 || budget.requests <= 0) break;
    const bool sibling_prefilling =
        !req.group.empty() && config_.cache == CacheKind::kRadix && groups.count(req.group) > 0;
    const std::vector<int32_t> ids = req.fill_ids();
    const int64_t len = static_cast<int64_t>(ids.size());
    bool started_now = false;
    if (req.req_slot < 0) {
      // Match tokens[0, n-1): at least one token is computed, so the step yields logits. A request
      // that wants prompt logprobs computes its whole prompt (as vLLM does): no cached prefix.
      const size_t match_len = req.needs_prompt_logprobs() ? 0 : ids.size() - 1;
      if (!kv_.admit(req, std::span<const int32_t>(ids.data(), match_len))) break;
      if (sibling_prefilling && !req.needs_prompt_logprobs() && req.kv_len + page_size <= len - 1) {
        // A sibling (n > 1) prefills this prompt now; wait a step and reuse its KV.
        kv_.drop(req);
        continue;
      }
      if (!req.counted_cache_hit) {
        req.cached_tokens = std::min<int64_t>(req.kv_len, static_cast<int64_t>(req.prompt_ids.size()));
        req.counted_cache_hit = true;
        metrics_.add_prompt_tokens(static_cast<int64_t>(req.prompt_ids.size()), req.cached_tokens);
      }
      started_now = true;
    }
    const int64_t from = req.scheduled_len();
    const int64_t remaining = len - from;
    RLM_CHECK(remaining > 0) << "pending request " << req.rid << " has no prompt tokens left to prefill";
    const bool prompt_logprobs = req.needs_prompt_logprobs();
    // Prompt logprobs take a logits row per token: such chunks stay small.
    const int64_t chunk_cap = prompt_logprobs ? std::min(budget.chunk, kPromptLogprobsChunk) : budget.chunk;
    const int64_t chunk = std::min({remaining, budget.tokens, chunk_cap});
    const bool completes = chunk == remaining;
    // KV room: pages for this chunk, plus (when the prompt completes) a share of its future tokens.
    const int64_t need_pages = kv_.pages_needed(req, from + chunk);
    const double own_reserve = completes ? static_cast<double>(req.remaining_tokens()) * new_token_ratio_ : 0.0;
    const double available = static_cast<double>(kv_.room_tokens()) - reserved;
    const bool first = first_work && out.empty();
    const bool fits = first ? need_pages <= kv_.room_pages()
                            : static_cast<double>(need_pages * page_size) + own_reserve <= available;
    PrefillChunk c;
    if (!fits || !kv_.extend(req, from, from + chunk, c.item.entry.new_slots)) {
      if (started_now) kv_.drop(req);  // undo the admission (no pages were taken); the request waits
      break;
    }
    reserved += own_reserve;
    c.item.entry.req_slot = req.req_slot;
    c.item.entry.prefix_len = static_cast<int32_t>(from);
    c.item.entry.new_ids.assign(ids.begin() + from, ids.begin() + from + chunk);
    if (HybridStateSlots* h = kv_.hybrid()) h->plan(req, c.item.entry);
    c.item.sample = completes;
    c.item.prompt_logprobs = prompt_logprobs ? req.params.prompt_logprobs : -1;
    c.item.req = &req;
    c.req = rp;
    out.push_back(std::move(c));
    if (!req.group.empty()) groups.insert(req.group);
    budget.tokens -= chunk;
    --budget.requests;
    if (!completes) break;  // a chunked request ends the step; it goes first next step
  }
  return out;
}

}  // namespace rlm
