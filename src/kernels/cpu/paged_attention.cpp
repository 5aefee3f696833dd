#include "kernels/cpu/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/thread_pool.h"

namespace rlm::cpu {
namespace {

// Query rows handled by one work item (with all qo heads of one kv head).
constexpr int64_t kQueryBlock = 16;

struct WorkItem {
  int64_t request;
  int64_t kv_head;
  int64_t q_begin, q_end;  // query indices within the request
};

void validate(const PagedBatch& b) {
  RLM_CHECK(b.page_size > 0) << "paged_attention: page_size must be positive, got " << b.page_size;
  auto req = [](int64_t r) { return str("paged_attention: request ", r, ": "); };
  for (int64_t r = 0; r <= b.batch_size; ++r) {
    if (b.qo_indptr[r] < 0 || (r > 0 && b.qo_indptr[r] < b.qo_indptr[r - 1]) || b.qo_indptr[r] > b.num_tokens) {
      fail(str("paged_attention: qo_indptr[", r, "] = ", b.qo_indptr[r],
               " is negative, decreasing or past the number of query rows ", b.num_tokens));
    }
    if (b.kv_indptr[r] < 0 || (r > 0 && b.kv_indptr[r] < b.kv_indptr[r - 1]) ||
        b.kv_indptr[r] > b.num_pages_indexed) {
      fail(str("paged_attention: kv_indptr[", r, "] = ", b.kv_indptr[r],
               " is negative, decreasing or past the length of kv_indices ", b.num_pages_indexed));
    }
  }
  for (int64_t r = 0; r < b.batch_size; ++r) {
    const int64_t qo_len = b.qo_indptr[r + 1] - b.qo_indptr[r];
    const int64_t seq_len = b.seq_lens[r];
    const int64_t num_pages = b.kv_indptr[r + 1] - b.kv_indptr[r];
    if (seq_len < qo_len) fail(req(r) + str("seq_len ", seq_len, " is smaller than its query count ", qo_len));
    if (num_pages * b.page_size < seq_len) {
      fail(req(r) + str(num_pages, " pages of ", b.page_size, " slots cannot hold seq_len ", seq_len));
    }
    const int64_t used = (seq_len + b.page_size - 1) / b.page_size;
    for (int64_t i = 0; i < used; ++i) {
      const int64_t page = b.kv_indices[b.kv_indptr[r] + i];
      if (page < 0 || (page + 1) * b.page_size > b.num_slots) {
        fail(req(r) + str("page index ", page, " (kv_indices[", b.kv_indptr[r] + i, "]) is outside the KV pool of ",
                          b.num_slots, " slots"));
      }
    }
  }
}

inline float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
  }
  for (int l = 0; i < n; ++i, ++l) acc[l] += a[i] * b[i];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

// Pointers to f32 rows of one kv head for key positions [0, count); 16-bit caches are widened into
// `storage` (exact conversion, so the result does not depend on how items are formed).
void gather_rows(const AttnRows& cache, const PagedBatch& b, int64_t request, int64_t kv_head, int64_t count,
                 int64_t head_dim, std::vector<float>& storage, std::vector<const float*>& rows) {
  rows.resize(static_cast<size_t>(count));
  const bool widen = cache.dtype != DType::kF32;
  if (widen) storage.resize(static_cast<size_t>(count * head_dim));
  const int32_t* pages = b.kv_indices + b.kv_indptr[request];
  const size_t es = dtype_size(cache.dtype);
  for (int64_t pos = 0; pos < count; ++pos) {
    const int64_t slot = static_cast<int64_t>(pages[pos / b.page_size]) * b.page_size + pos % b.page_size;
    const char* src = static_cast<const char*>(cache.data) +
                      static_cast<size_t>(slot * cache.token_stride + kv_head * cache.head_stride) * es;
    if (widen) {
      float* dst = storage.data() + pos * head_dim;
      convert_to_f32(src, cache.dtype, dst, static_cast<size_t>(head_dim));
      rows[pos] = dst;
    } else {
      rows[pos] = reinterpret_cast<const float*>(src);
    }
  }
}

void run_item(const WorkItem& item, const AttnRows& q, const AttnRows& k_cache, const AttnRows& v_cache,
              const PagedBatch& b, const AttnConfig& cfg, float* out, int64_t out_ts, int64_t out_hs) {
  thread_local std::vector<float> k_store, v_store, scores, acc;
  thread_local std::vector<const float*> k_rows, v_rows;
  const int64_t r = item.request;
  const int64_t qo_begin = b.qo_indptr[r];
  const int64_t qo_len = b.qo_indptr[r + 1] - qo_begin;
  const int64_t seq_len = b.seq_lens[r];
  const int64_t d = cfg.head_dim;
  // Keys visible to the last query of the block: positions [0, last_pos].
  const int64_t last_pos = seq_len - qo_len + item.q_end - 1;
  gather_rows(k_cache, b, r, item.kv_head, last_pos + 1, d, k_store, k_rows);
  gather_rows(v_cache, b, r, item.kv_head, last_pos + 1, d, v_store, v_rows);
  scores.resize(static_cast<size_t>(last_pos + 1));
  acc.resize(static_cast<size_t>(d));
  const int64_t group = cfg.num_qo_heads / cfg.num_kv_heads;
  const float* qbase = static_cast<const float*>(q.data);
  for (int64_t j = item.q_begin; j < item.q_end; ++j) {
    const int64_t pos = seq_len - qo_len + j;
    const int64_t lo = cfg.sliding_window > 0 ? std::max<int64_t>(0, pos - cfg.sliding_window + 1) : 0;
    const int64_t row = qo_begin + j;
    for (int64_t h = item.kv_head * group; h < (item.kv_head + 1) * group; ++h) {
      const float* qr = qbase + row * q.token_stride + h * q.head_stride;
      float m = -std::numeric_limits<float>::infinity();
      for (int64_t t = lo; t <= pos; ++t) {
        float s = dot(qr, k_rows[t], d) * cfg.scale;
        if (cfg.logit_soft_cap > 0.0f) s = cfg.logit_soft_cap * std::tanh(s / cfg.logit_soft_cap);
        scores[t] = s;
        m = std::max(m, s);
      }
      std::fill(acc.begin(), acc.end(), 0.0f);
      float sum = 0.0f;
      for (int64_t t = lo; t <= pos; ++t) {
        const float p = std::exp(scores[t] - m);
        sum += p;
        const float* vr = v_rows[t];
        for (int64_t c = 0; c < d; ++c) acc[c] += p * vr[c];
      }
      const float inv = 1.0f / sum;
      float* o = out + row * out_ts + h * out_hs;
      for (int64_t c = 0; c < d; ++c) o[c] = acc[c] * inv;
    }
  }
}

}  // namespace

void paged_attention(const AttnRows& q, const AttnRows& k_cache, const AttnRows& v_cache, const PagedBatch& batch,
                     const AttnConfig& cfg, float* out, int64_t out_token_stride, int64_t out_head_stride) {
  RLM_CHECK(cfg.num_kv_heads > 0 && cfg.num_qo_heads % cfg.num_kv_heads == 0)
      << "paged_attention: num_qo_heads " << cfg.num_qo_heads << " is not a multiple of num_kv_heads "
      << cfg.num_kv_heads;
  validate(batch);
  std::vector<WorkItem> items;
  for (int64_t r = 0; r < batch.batch_size; ++r) {
    const int64_t qo_len = batch.qo_indptr[r + 1] - batch.qo_indptr[r];
    for (int64_t g = 0; g < cfg.num_kv_heads; ++g) {
      for (int64_t j = 0; j < qo_len; j += kQueryBlock) items.push_back({r, g, j, std::min(qo_len, j + kQueryBlock)});
    }
  }
  parallel_for(static_cast<int64_t>(items.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      run_item(items[i], q, k_cache, v_cache, batch, cfg, out, out_token_stride, out_head_stride);
    }
  });
}

}  // namespace rlm::cpu
