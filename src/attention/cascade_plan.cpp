#include "attention/cascade_plan.h"

#include <algorithm>

namespace rlm {

StatusOr<CascadeMode> parse_cascade_mode(const std::string& name) {
  if (name == "auto") return CascadeMode::kAuto;
  if (name == "on") return CascadeMode::kOn;
  if (name == "off") return CascadeMode::kOff;
  return invalid_argument(str("cascade attention mode must be auto, on or off, got '", name, "'"));
}

const char* cascade_mode_name(CascadeMode mode) {
  switch (mode) {
    case CascadeMode::kAuto: return "auto";
    case CascadeMode::kOn: return "on";
    case CascadeMode::kOff: return "off";
  }
  return "?";
}

namespace {

// Leading tokens (in whole pages, at most `limit` rounded down to pages) whose KV slots are the
// same in both rows: a page is shared when its first slot is (slots of a page are consecutive).
int64_t common_pages_tokens(const int32_t* a, const int32_t* b, int64_t limit, int64_t page_size) {
  const int64_t pages = limit / page_size;
  int64_t p = 0;
  while (p < pages && a[p * page_size] == b[p * page_size]) ++p;
  return p * page_size;
}

// The prefill kernels' work is about (query tiles) x (keys walked): each tile of up to
// kQueryTile rows of one request reads and multiplies every visible key. A group pays when its
// level-1 tiles over the shared prefix plus the members' level-2 tiles over the rest cost at most
// kMaxCostRatio of the single pass (the rest pays for the extra pass and the merge): many requests
// with few new tokens each over a long shared prefix, not a few long prompts.
constexpr int64_t kQueryTile = 128;
constexpr double kMaxCostRatio = 0.8;
// Level-1 key chunks: up to kMaxChunks, at least kMinChunkKeys keys each, aiming at kTargetTiles
// query tiles (chunks x group tiles) per head.
constexpr int64_t kTargetTiles = 16;
constexpr int64_t kMaxChunks = 16;
constexpr int64_t kMinChunkKeys = 64;

bool group_pays(const ForwardBatch& batch, int64_t first, int64_t end, int64_t shared) {
  auto tiles = [](int64_t rows) { return (rows + kQueryTile - 1) / kQueryTile; };
  double single = 0, cascade = 0;
  int64_t rows = 0;
  for (int64_t r = first; r < end; ++r) {
    const int64_t qo = batch.extend_lens_cpu[r], seq = batch.seq_lens_cpu[r];
    single += static_cast<double>(tiles(qo) * seq);
    cascade += static_cast<double>(tiles(qo) * (seq - shared));
    rows += qo;
  }
  cascade += static_cast<double>(tiles(rows) * shared);
  return cascade <= kMaxCostRatio * single;
}

}  // namespace

int64_t cascade_num_chunks(int64_t level1_tiles, int64_t max_shared) {
  const int64_t tiles = std::max<int64_t>(level1_tiles, 1);
  const int64_t by_tiles = (kTargetTiles + tiles - 1) / tiles;
  const int64_t by_keys = std::max<int64_t>(1, (max_shared + kMinChunkKeys - 1) / kMinChunkKeys);
  return std::clamp<int64_t>(std::min(by_tiles, by_keys), 1, kMaxChunks);
}

CascadePlan make_cascade_plan(CascadeMode mode, const ForwardBatch& batch, const std::vector<int32_t>& kv_indptr,
                              const Tensor& req_to_token, int64_t page_size) {
  CascadePlan plan;
  const int64_t bs = batch.batch_size;
  if (mode == CascadeMode::kOff || batch.mode != ForwardMode::kExtend || bs == 0) return plan;
  RLM_CHECK(static_cast<int64_t>(batch.seq_lens_cpu.size()) == bs &&
            static_cast<int64_t>(batch.extend_lens_cpu.size()) == bs &&
            static_cast<int64_t>(batch.req_pool_indices_cpu.size()) == bs &&
            static_cast<int64_t>(kv_indptr.size()) == bs + 1)
      << "make_cascade_plan: ForwardBatch without host seq_lens/extend_lens/req_pool_indices";
  RLM_CHECK(req_to_token.device().is_cpu() && req_to_token.dim() == 2) << "make_cascade_plan: req_to_token "
                                                                        << req_to_token.describe();
  const int32_t* table = req_to_token.data<int32_t>();
  const int64_t row_len = req_to_token.size(1);
  auto row = [&](int64_t r) { return table + static_cast<int64_t>(batch.req_pool_indices_cpu[r]) * row_len; };
  auto prefix = [&](int64_t r) { return static_cast<int64_t>(batch.seq_lens_cpu[r] - batch.extend_lens_cpu[r]); };

  bool any_prefix = false;
  plan.first.push_back(0);
  for (int64_t r = 0; r < bs;) {
    any_prefix = any_prefix || prefix(r) > 0;
    // Grow a group while the next request shares >= kMinSharedPrefix tokens of whole pages.
    int64_t shared = prefix(r) / page_size * page_size;
    int64_t j = r + 1;
    while (j < bs && shared >= kMinSharedPrefix) {
      const int64_t c = common_pages_tokens(row(r), row(j), std::min(shared, prefix(j)), page_size);
      if (c < kMinSharedPrefix) break;
      shared = c;
      any_prefix = true;
      ++j;
    }
    int64_t len = 0;
    if (j - r >= 2 && mode == CascadeMode::kAuto && !group_pays(batch, r, j, shared)) j = r + 1;
    if (j - r >= 2) {
      len = shared;
      plan.grouped = true;
      plan.saved_prefix_reads += (j - r - 1) * shared;
    } else if (mode == CascadeMode::kOn) {
      len = prefix(r);  // a lone request: its own cached prefix, at its true positions
    }
    plan.first.push_back(static_cast<int32_t>(j));
    plan.shared_len.push_back(static_cast<int32_t>(len));
    r = j;
  }
  plan.enabled = mode == CascadeMode::kOn ? any_prefix : plan.grouped;
  if (!plan.enabled) return CascadePlan{};

  // Level-1 entries: chunk k of every group's shared prefix, k = 0 .. num_chunks - 1. A group of few
  // query tiles is one block per head; splitting its prefix into chunks (each on its own copy of the
  // group's rows, merged afterwards) gives the GPU about kTargetTiles tiles per head to run at once.
  const int64_t num_groups = static_cast<int64_t>(plan.shared_len.size());
  int64_t tiles = 0, max_shared = 0;
  std::vector<int32_t> group_rows(num_groups, 0);
  for (int64_t g = 0; g < num_groups; ++g) {
    for (int32_t r = plan.first[g]; r < plan.first[g + 1]; ++r) group_rows[g] += batch.extend_lens_cpu[r];
    if (plan.shared_len[g] > 0) tiles += (group_rows[g] + kQueryTile - 1) / kQueryTile;
    max_shared = std::max<int64_t>(max_shared, plan.shared_len[g]);
  }
  plan.num_chunks = cascade_num_chunks(tiles, max_shared);
  plan.num_rows = 0;
  for (int32_t e : batch.extend_lens_cpu) plan.num_rows += e;

  plan.num_entries = plan.num_chunks * num_groups;
  plan.l1_qo_indptr.push_back(0);
  for (int64_t k = 0; k < plan.num_chunks; ++k) {
    for (int64_t g = 0; g < num_groups; ++g) {
      const int32_t a = plan.first[g], b = plan.first[g + 1];
      const int64_t shared = plan.shared_len[g];
      plan.l1_qo_indptr.push_back(plan.l1_qo_indptr.back() + group_rows[g]);
      plan.l1_kv_indptr.push_back(kv_indptr[a]);
      // A lone request keeps its true positions (sliding windows stay exact); a group's rows are
      // placed right after the shared prefix.
      const int32_t seq_len = b - a == 1 ? batch.seq_lens_cpu[a] : static_cast<int32_t>(shared + group_rows[g]);
      plan.l1_seq_lens.push_back(seq_len);
      plan.l1_kv_begin.push_back(static_cast<int32_t>(shared * k / plan.num_chunks));
      plan.l1_kv_end.push_back(static_cast<int32_t>(shared * (k + 1) / plan.num_chunks));
      plan.max_entry_rows = std::max<int64_t>(plan.max_entry_rows, group_rows[g]);
      plan.max_entry_seq_len = std::max<int64_t>(plan.max_entry_seq_len, seq_len);
    }
  }
  plan.l1_kv_indptr.push_back(kv_indptr[bs]);
  for (int64_t g = 0; g < num_groups; ++g) {
    for (int32_t r = plan.first[g]; r < plan.first[g + 1]; ++r) {
      plan.l2_kv_begin.push_back(plan.shared_len[g]);
      plan.l2_kv_end.push_back(batch.seq_lens_cpu[r]);
    }
  }
  return plan;
}

}  // namespace rlm
