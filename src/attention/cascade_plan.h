// Cascade attention for extend batches (SGLang's two-pass ragged + paged extend, FlashInfer's cascade): the
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
#include "attention/forward_batch.h"

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

// The host side of one extend step's cascade (uploaded by the backend). Groups cover all query rows
// in batch order: group g is requests [first[g], first[g + 1]) with their query rows concatenated,
// attending keys [0, shared_len[g]) of the first member's pages. A group of several requests is
// given positions shared_len + i (every shared key is visible to every row, as there is no window),
// so grouped plans are only valid for layers without a sliding window (`grouped`).
// The level-1 pass runs num_chunks times over the rows, on num_chunks stacked copies of q (rows
// [k * num_rows, (k + 1) * num_rows) are copy k): entry k * num_groups + g takes copy k of group
// g's rows and chunk k of its shared keys, [shared * k / num_chunks, shared * (k + 1) / num_chunks).
// The num_chunks level-1 results and the level-2 result are merged in one K-way merge.
struct CascadePlan {
  bool enabled = false;
  bool grouped = false;  // some group has >= 2 requests
  int64_t num_chunks = 1;
  int64_t num_rows = 0;     // query rows of the batch
  int64_t num_entries = 0;  // num_chunks * groups
  int64_t max_entry_rows = 0;
  int64_t max_entry_seq_len = 0;
  std::vector<int32_t> first;         // [groups + 1] first request of each group
  std::vector<int32_t> shared_len;    // [groups]
  // Level-1 batch (num_entries requests over num_chunks * num_rows query rows): qo_indptr,
  // kv_indptr [num_entries + 1], seq_lens, kv_begin, kv_end [num_entries].
  std::vector<int32_t> l1_qo_indptr, l1_kv_indptr, l1_seq_lens, l1_kv_begin, l1_kv_end;
  // Level-2 key ranges of the batch's own requests [bs]: [shared_len of its entry, seq_len).
  std::vector<int32_t> l2_kv_begin, l2_kv_end;
  int64_t saved_prefix_reads = 0;  // sum over groups of (members - 1) * shared_len
};

// Level-1 key chunks for groups totalling `level1_tiles` query tiles (128 rows) over shared
// prefixes of at most `max_shared` tokens: about 16 tiles per head in all, chunks of >= 64 keys, at
// most 16 chunks.
int64_t cascade_num_chunks(int64_t level1_tiles, int64_t max_shared);

// Plans an extend step. `kv_indptr`: [bs + 1] the batch's page offsets into kv_indices (pages of
// request r in req_to_token order); `req_to_token`: the host table (i32 [max_reqs, max_ctx]).
// Returns a plan with enabled == false when the mode or the batch calls for the single pass
// (mode off, decode batches, no cached prefix, or in auto no group).
CascadePlan make_cascade_plan(CascadeMode mode, const ForwardBatch& batch, const std::vector<int32_t>& kv_indptr,
                              const Tensor& req_to_token, int64_t page_size);

}  // namespace rlm
