#include "scheduler/kv_ledger.h"

namespace rlm {

KvLedger::KvLedger(ReqToTokenPool& table, int64_t num_pages, int64_t page_size, CacheKind kind, MambaPool* mamba,
                   int64_t mamba_chunk)
    : table_(table), page_size_(page_size), pages_(static_cast<int32_t>(num_pages)) {
  RLM_CHECK(mamba == nullptr || mamba_chunk > 0) << "a hybrid model needs a positive mamba_chunk_size, got "
                                                 << mamba_chunk;
  const int32_t ps = static_cast<int32_t>(page_size);
  auto cache = mamba != nullptr ? make_prefix_cache(cache_kind_name(kind), ps, static_cast<int32_t>(mamba_chunk),
                                                    [mamba](int32_t slot) { mamba->free(slot); })
                                : make_prefix_cache(cache_kind_name(kind), ps);
  RLM_CHECK(cache.is_ok()) << cache.status().to_string();
  cache_ = std::move(cache).value();
  if (mamba != nullptr) hybrid_ = std::make_unique<HybridStateSlots>(*mamba, *cache_, pages_, page_size_);
}

int64_t KvLedger::pages_needed(const Req& req, int64_t to) const {
  const int64_t base = req.cache_handle.length;
  const int64_t have = static_cast<int64_t>(req.own_pages.size());
  const int64_t want = (to - base + page_size_ - 1) / page_size_;
  return std::max<int64_t>(0, want - have);
}

bool KvLedger::alloc_pages(int64_t n, std::vector<int32_t>& out) {
  out.clear();
  if (n <= 0) return true;
  if (pages_.num_free() < n) {
    std::vector<int32_t> freed = cache_->evict((n - pages_.num_free()) * page_size_);
    if (!freed.empty()) pages_.free(slots_to_pages(freed, static_cast<int32_t>(page_size_)));
  }
  auto got = pages_.alloc(static_cast<int32_t>(n));
  if (!got) return false;
  out = std::move(*got);
  return true;
}

bool KvLedger::admit(Req& req, std::span<const int32_t> prompt) {
  RLM_CHECK(req.req_slot < 0) << "admit() of request " << req.rid << " that holds request row " << req.req_slot;
  const int32_t row = table_.alloc();
  if (row < 0) return false;
  req.req_slot = row;
  MatchResult m = cache_->match_prefix(prompt);
  if (hybrid_ != nullptr) {
    // The match made its snapshot the most recently used one, so allocating the working slot evicts
    // other snapshots first; it may still free the match's (or its KV), so match again when it
    // evicted anything.
    const int64_t evictions = hybrid_->evictions();
    req.mamba_slot = hybrid_->alloc();
    if (req.mamba_slot < 0) {
      drop(req);
      return false;
    }
    if (hybrid_->evictions() != evictions) m = cache_->match_prefix(prompt);
  }
  // A hybrid model resumes at the deepest snapshot and recomputes the rest of the KV match.
  const CacheHandle use = hybrid_ != nullptr ? m.mamba_handle : m.handle;
  cache_->lock(use);
  req.cache_handle = use;
  std::vector<int32_t> slots(m.slots.begin(), m.slots.begin() + use.length);
  table_.write(row, 0, slots);
  req.kv_len = use.length;
  if (hybrid_ != nullptr) hybrid_->resume(req, m);
  return true;
}

bool KvLedger::extend(Req& req, int64_t from, int64_t to, std::vector<int32_t>& slots) {
  const int64_t base = req.cache_handle.length;
  RLM_CHECK(from >= base && to >= from) << "extend [" << from << ", " << to << ") of request " << req.rid
                                        << " below its cached prefix " << base;
  std::vector<int32_t> pages;
  if (!alloc_pages(pages_needed(req, to), pages)) return false;
  req.own_pages.insert(req.own_pages.end(), pages.begin(), pages.end());
  slots.clear();
  for (int64_t pos = from; pos < to; ++pos) {
    const int64_t page = req.own_pages[(pos - base) / page_size_];
    slots.push_back(static_cast<int32_t>(page * page_size_ + pos % page_size_));
  }
  return true;
}

void KvLedger::cache_prefix(Req& req, bool finished) {
  const int64_t base = req.cache_handle.length;
  int64_t len = req.kv_len;
  int32_t snapshot = -1;
  if (hybrid_ != nullptr) {
    const HybridStateSlots::Snapshot s = hybrid_->take_snapshot(req, base);
    len = s.len;
    snapshot = s.slot;
  }
  std::vector<int32_t> ids = req.fill_ids();
  ids.resize(len);
  const std::vector<int32_t> slots = table_.read(req.req_slot, 0, len);
  InsertResult ins = cache_->insert_with_snapshot(ids, slots, snapshot);
  if (ins.mamba_taken) hybrid_->snapshot_taken(req);  // the cache owns it now; else it is reused
  RLM_CHECK(ins.prefix_len >= base) << "cache insert returned prefix " << ins.prefix_len << " below the locked "
                                    << base;
  const int64_t dup_pages = (ins.prefix_len - base) / page_size_;
  const int64_t moved_end = (ins.handle.length - base) / page_size_;
  if (ins.handle.length > base) {
    RLM_CHECK_LE(moved_end, static_cast<int64_t>(req.own_pages.size())) << " cache took more pages than the request owns";
  }
  if (dup_pages > 0) {  // another request cached these tokens first; ours are duplicates
    pages_.free(std::span<const int32_t>(req.own_pages.data(), dup_pages));
  }
  std::vector<int32_t> rest;
  if (ins.handle.length > base) {
    rest.assign(req.own_pages.begin() + moved_end, req.own_pages.end());
  } else {
    rest = req.own_pages;
  }
  if (finished) {
    if (!rest.empty()) pages_.free(rest);
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
  table_.write(req.req_slot, 0, m.slots);
  req.own_pages = std::move(rest);
}

void KvLedger::drop(Req& req) {
  if (hybrid_ != nullptr) hybrid_->free(req);
  if (!req.own_pages.empty()) pages_.free(req.own_pages);
  req.own_pages.clear();
  cache_->unlock(req.cache_handle);
  req.cache_handle = CacheHandle{};
  if (req.req_slot >= 0) table_.free(req.req_slot);
  req.req_slot = -1;
  req.kv_len = 0;
}

void KvLedger::release(Req& req, bool cache_kv) {
  if (req.req_slot >= 0) {
    if (cache_kv && req.kv_len > 0) {
      cache_prefix(req, /*finished=*/true);
      if (hybrid_ != nullptr) hybrid_->free(req);
      table_.free(req.req_slot);
      req.req_slot = -1;
    } else {
      drop(req);
    }
  }
  req.kv_len = 0;
}

void KvLedger::flush() {
  std::vector<int32_t> freed = cache_->evict(cache_->evictable_size());
  std::vector<int32_t> more = cache_->evict_mamba(cache_->mamba_size());  // snapshots on locked paths
  freed.insert(freed.end(), more.begin(), more.end());
  if (!freed.empty()) pages_.free(slots_to_pages(freed, static_cast<int32_t>(page_size_)));
}

Status KvLedger::check_integrity(const std::vector<const Req*>& holders) const {
  RLM_RETURN_IF_ERROR(cache_->check_integrity());
  int64_t req_pages = 0;
  for (const Req* r : holders) req_pages += static_cast<int64_t>(r->own_pages.size());
  if (cache_->total_size() % page_size_ != 0) {
    return internal_error(str("prefix cache holds ", cache_->total_size(), " tokens, not a page multiple"));
  }
  const int64_t total = pages_.num_free() + cache_->total_size() / page_size_ + req_pages;
  if (total != pages_.num_total()) {
    return internal_error(str("KV pages do not add up: free ", pages_.num_free(), " + cache ",
                              cache_->total_size() / page_size_, " + requests ", req_pages, " != ",
                              pages_.num_total()));
  }
  if (hybrid_ != nullptr) RLM_RETURN_IF_ERROR(hybrid_->check_integrity(holders));
  return Status::ok();
}

}  // namespace rlm
