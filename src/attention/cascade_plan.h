// Cascade attention for extend batches (seed 000's two-pass extend, FlashInfer's cascade): the
// attention of each query is split over two disjoint key sets — level 1, a cached prefix, and
// level 2, the rest of its sequence (the tail of the prefix and the new tokens, causal) — and the
// two partial results are merged by their log-sum-exps (ops::merge_attention_states).
//
// Level 1 is where sharing pays: adjacent requests of a batch whose KV pages begin with the same
// pages (a shared system prompt, n > 1 samples of one prompt) form one group, and the group's
// queries attend the shared prefix together, as one entry of the level-1 pass, so its K/V tiles are
// read once per tile of the group's queries instead of once per request. A lone request's level 1
// is its own cached prefix (mode `on`) or empty (mode `auto`, where a batch without a group runs the
// ordinary single pass).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/forward_batch.h"

namespace rlm {

enum class CascadeMode : uint8_t {
  kAuto,  // cascade when some group of >= 2 requests shares >= kMinSharedPrefix tokens and the
          // split saves work (see group_pays in cascade_plan.cpp: few new tokens per request)
  kOn,    // cascade whenever some request has a cached prefix (every group kept, paying or not)
  kOff,   // always the single pass
};

// Shortest shared prefix (tokens) worth a group.
inline constexpr int64_t kMinSharedPrefix = 64;

StatusOr<CascadeMode> parse_cascade_mode(const std::string& name);  // "auto", "on", "off"
const char* cascade_mode_name(CascadeMode mode);

// The host side of one extend step's cascade (uploaded by the backend). Level-1 entries cover all
// query rows in batch order: entry g is requests [first[g], first[g + 1]) with their query rows
// concatenated, attending keys [0, shared_len[g]) of the first member's pages. A group of several
// requests is given positions shared_len + i (every shared key is visible to every row, as there is
// no window), so grouped plans are only valid for layers without a sliding window (`grouped`).
struct CascadePlan {
  bool enabled = false;
  bool grouped = false;  // some entry has >= 2 requests
  int64_t num_entries = 0;
  int64_t max_entry_rows = 0;
  int64_t max_entry_seq_len = 0;
  std::vector<int32_t> first;         // [num_entries + 1] first request of each entry
  std::vector<int32_t> shared_len;    // [num_entries]
  // Level-1 batch (num_entries requests): qo_indptr, kv_indptr [num_entries + 1], seq_lens,
  // kv_begin (zeros), kv_end (= shared_len) [num_entries].
  std::vector<int32_t> l1_qo_indptr, l1_kv_indptr, l1_seq_lens, l1_kv_begin, l1_kv_end;
  // Level-2 key ranges of the batch's own requests [bs]: [shared_len of its entry, seq_len).
  std::vector<int32_t> l2_kv_begin, l2_kv_end;
  int64_t saved_prefix_reads = 0;  // sum over groups of (members - 1) * shared_len
};

// Plans an extend step. `kv_indptr`: [bs + 1] the batch's page offsets into kv_indices (pages of
// request r in req_to_token order); `req_to_token`: the host table (i32 [max_reqs, max_ctx]).
// Returns a plan with enabled == false when the mode or the batch calls for the single pass
// (mode off, decode batches, no cached prefix, or in auto no group).
CascadePlan make_cascade_plan(CascadeMode mode, const ForwardBatch& batch, const std::vector<int32_t>& kv_indptr,
                              const Tensor& req_to_token, int64_t page_size);

}  // namespace rlm
