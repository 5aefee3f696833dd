#include "scheduler/hybrid_state.h"

namespace rlm {

HybridStateSlots::HybridStateSlots(MambaPool& pool, PrefixCache& cache, PageAllocator& pages, int64_t page_size)
    : pool_(pool), cache_(cache), pages_(pages), page_size_(page_size), align_(cache.mamba_align()) {}

int32_t HybridStateSlots::alloc() {
  int32_t slot = pool_.alloc();
  if (slot < 0 && cache_.mamba_size() > 0) {
    std::vector<int32_t> freed = cache_.evict_mamba(1);  // its slot returns through the cache's callback
    ++evictions_;
    if (!freed.empty()) pages_.free(slots_to_pages(freed, static_cast<int32_t>(page_size_)));
    slot = pool_.alloc();
  }
  return slot;
}

void HybridStateSlots::free(Req& req) {
  if (req.mamba_slot >= 0) pool_.free(req.mamba_slot);
  if (req.mamba_track_slot >= 0) pool_.free(req.mamba_track_slot);
  req.mamba_slot = -1;
  req.mamba_track_slot = -1;
  req.mamba_track_len = 0;
  req.mamba_branch_len = 0;
}

void HybridStateSlots::resume(Req& req, const MatchResult& m) {
  if (req.kv_len > 0) pool_.copy_slot(m.mamba_slot, req.mamba_slot);  // copy-on-write
  if (align_ > 0) {
    const int64_t branch = m.length() / align_ * align_;
    req.mamba_branch_len = branch > req.kv_len ? branch : 0;
  }
}

void HybridStateSlots::plan(Req& req, BatchEntry& entry) {
  entry.mamba_slot = req.mamba_slot;
  if (align_ == 0) return;  // the cache keeps no snapshots (--cache naive)
  const int64_t from = entry.prefix_len;
  const int64_t to = from + static_cast<int64_t>(entry.new_ids.size());
  int64_t pos = to / align_ * align_;  // the last aligned position this step reaches
  if (req.mamba_branch_len > from && req.mamba_branch_len <= to) pos = req.mamba_branch_len;
  if (req.mamba_branch_len <= to) req.mamba_branch_len = 0;
  if (pos <= from) return;
  if (req.mamba_track_slot < 0) req.mamba_track_slot = alloc();
  if (req.mamba_track_slot < 0) return;  // the pool is dry: this step leaves no snapshot
  entry.mamba_track_slot = req.mamba_track_slot;
  entry.mamba_track_pos = static_cast<int32_t>(pos);
  req.mamba_track_len = pos;  // the step runs right after planning
}

HybridStateSlots::Snapshot HybridStateSlots::take_snapshot(Req& req, int64_t base) {
  // A hybrid model can only resume where a state snapshot is, so KV is cached up to the newest
  // snapshot (nothing new without one); the rest stays the request's.
  Snapshot s;
  const bool fresh = req.mamba_track_len > base;
  s.len = fresh ? req.mamba_track_len : base;
  s.slot = fresh ? req.mamba_track_slot : -1;
  req.mamba_track_len = 0;
  return s;
}

Status HybridStateSlots::check_integrity(const std::vector<const Req*>& holders) const {
  int64_t held = 0;
  for (const Req* r : holders) {
    for (const int32_t s : {r->mamba_slot, r->mamba_track_slot}) {
      if (s < 0) continue;
      if (!pool_.in_use(s)) return internal_error(str("request ", r->rid, " holds mamba slot ", s, " that is free"));
      ++held;
    }
    if ((r->mamba_slot >= 0) != (r->req_slot >= 0)) {
      return internal_error(str("request ", r->rid, " has a request slot xor a mamba state slot"));
    }
  }
  if (pool_.num_free() + cache_.mamba_size() + held != pool_.num_slots()) {
    return internal_error(str("mamba slots do not add up: free ", pool_.num_free(), " + cache ", cache_.mamba_size(),
                              " + requests ", held, " != ", pool_.num_slots()));
  }
  return Status::ok();
}

}  // namespace rlm
