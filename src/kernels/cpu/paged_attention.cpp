#include "kernels/cpu/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cpu/vec_exp.h"

namespace rlm::cpu {
namespace {

// Query rows handled by one work item (with all qo heads of one kv head).
constexpr int64_t kQueryBlock = 16;

struct WorkItem {
  int64_t request;
  int64_t kv_head;
  int64_t q_begin, q_end;  // query indices within the request
};

}  // namespace

void validate_paged_batch(const PagedBatch& b) {
  RLM_CHECK(b.page_size > 0) << "paged_attention: page_size must be positive, got " << b.page_size;
  auto req = [](int64_t r) { return str("paged_attention: request ", r, ": "); };
  for (int64_t r = 0; r <= b.batch_size; ++r) {
    if (b.qo_indptr[r] < 0 || (r > 0 && b.qo_indptr[r] < b.qo_indptr[r - 1]) || b.qo_indptr[r] > b.num_tokens) {
      fail(str("paged_attention: qo_indptr[", r, "] = ", b.qo_indptr[r],
               " is negative, decreasing or past the number of query rows ", b.num_tokens));
    }
    // With key ranges kv_indptr[r] is only the offset of request r's page list (the cascade's
    // level-1 chunks of one group share it), so it need not increase; otherwise it is CSR.
    const bool csr = b.kv_end == nullptr;
    if (b.kv_indptr[r] < 0 || (csr && r > 0 && b.kv_indptr[r] < b.kv_indptr[r - 1]) ||
        b.kv_indptr[r] > b.num_pages_indexed) {
      fail(str("paged_attention: kv_indptr[", r, "] = ", b.kv_indptr[r],
               " is negative, decreasing or past the length of kv_indices ", b.num_pages_indexed));
    }
  }
  for (int64_t r = 0; r < b.batch_size; ++r) {
    const int64_t qo_len = b.qo_indptr[r + 1] - b.qo_indptr[r];
    const int64_t seq_len = b.seq_lens[r];
    if (seq_len < qo_len) fail(req(r) + str("seq_len ", seq_len, " is smaller than its query count ", qo_len));
    const int64_t kb = b.kv_begin != nullptr ? b.kv_begin[r] : 0;
    const int64_t ke = b.kv_end != nullptr ? b.kv_end[r] : seq_len;
    if (kb < 0 || kb > ke || ke > seq_len) {
      fail(req(r) + str("key range [", kb, ", ", ke, ") is not inside [0, seq_len ", seq_len, "]"));
    }
    // Pages of the keys that can be read: all of seq_len, or below kv_end with key ranges.
    const int64_t used = ((b.kv_end != nullptr ? ke : seq_len) + b.page_size - 1) / b.page_size;
    const int64_t num_pages =
        b.kv_end == nullptr ? b.kv_indptr[r + 1] - b.kv_indptr[r] : b.num_pages_indexed - b.kv_indptr[r];
    if (num_pages < used) {
      fail(req(r) + str(num_pages, " pages of ", b.page_size, " slots cannot hold ",
                        b.kv_end != nullptr ? "kv_end " : "seq_len ", b.kv_end != nullptr ? ke : seq_len));
    }
    for (int64_t i = 0; i < used; ++i) {
      const int64_t page = b.kv_indices[b.kv_indptr[r] + i];
      if (page < 0 || (page + 1) * b.page_size > b.num_slots) {
        fail(req(r) + str("page index ", page, " (kv_indices[", b.kv_indptr[r] + i, "]) is outside the KV pool of ",
                          b.num_slots, " slots"));
      }
    }
  }
}

namespace {

inline float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
  }
  for (int l = 0; i < n; ++i, ++l) acc[l] += a[i] * b[i];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

// 8-float vectors (GCC/Clang vector extensions: SSE/AVX/NEON as available, elementwise and in a
// fixed order, so results do not depend on alignment, the batch or the instruction set; no FMA
// contraction under ISO C++). The helpers that take or return vectors are forced inline, at -O0
// too: run_item has an AVX2 clone, and a real call from it to a helper compiled without AVX
// would pass the 32-byte vector in a ymm register where the callee expects memory (the ABI
// difference -Wpsabi warns about) — Debug builds crashed on exactly that.
#pragma GCC diagnostic ignored "-Wpsabi"
typedef float V8 __attribute__((vector_size(32)));
constexpr int64_t kMaxVecs = 32;  // head_dim <= 256 on the vector path
#define RLM_VEC_INLINE inline __attribute__((always_inline))

RLM_VEC_INLINE V8 load8(const float* p) {
  V8 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

RLM_VEC_INLINE void store8(float* p, V8 v) { std::memcpy(p, &v, sizeof(v)); }

RLM_VEC_INLINE float hsum(V8 v) { return ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7])); }

// head_dim % 8 == 0: two accumulators over alternating vectors.
RLM_VEC_INLINE float dot_v8(const float* a, const float* b, int64_t nv) {
  V8 acc0 = {}, acc1 = {};
  int64_t i = 0;
  for (; i + 2 <= nv; i += 2) {
    acc0 += load8(a + 8 * i) * load8(b + 8 * i);
    acc1 += load8(a + 8 * i + 8) * load8(b + 8 * i + 8);
  }
  if (i < nv) acc0 += load8(a + 8 * i) * load8(b + 8 * i);
  return hsum(acc0 + acc1);
}

typedef float V4 __attribute__((vector_size(16)));
typedef int I4 __attribute__((vector_size(16)));

// lane i: v[i] + v[i + 4], the first level of hsum.
RLM_VEC_INLINE V4 fold4(V8 v) {
  V4 lo, hi;
  std::memcpy(&lo, &v, sizeof(lo));
  std::memcpy(&hi, reinterpret_cast<const char*>(&v) + sizeof(lo), sizeof(hi));
  return lo + hi;
}

// sc[t - lo] = dot_v8(q, rows[t], nv) * scale for t in [lo, hi], bit for bit: four keys at a time
// share the loads of q, each keeps dot_v8's two accumulator chains, and the four horizontal sums
// ((v0 + v4) + (v1 + v5)) + ((v2 + v6) + (v3 + v7)) run as one 4x4 transpose and two adds.
RLM_VEC_INLINE void score_keys(const float* q, const float* const* rows, int64_t lo, int64_t hi, int64_t nv,
                               float scale, float* sc) {
  int64_t t = lo;
  for (; t + 3 <= hi; t += 4) {
    const float* k0 = rows[t];
    const float* k1 = rows[t + 1];
    const float* k2 = rows[t + 2];
    const float* k3 = rows[t + 3];
    V8 a0 = {}, a1 = {}, a2 = {}, a3 = {}, b0 = {}, b1 = {}, b2 = {}, b3 = {};
    int64_t i = 0;
    for (; i + 2 <= nv; i += 2) {
      const V8 qa = load8(q + 8 * i), qb = load8(q + 8 * i + 8);
      a0 += qa * load8(k0 + 8 * i);
      b0 += qb * load8(k0 + 8 * i + 8);
      a1 += qa * load8(k1 + 8 * i);
      b1 += qb * load8(k1 + 8 * i + 8);
      a2 += qa * load8(k2 + 8 * i);
      b2 += qb * load8(k2 + 8 * i + 8);
      a3 += qa * load8(k3 + 8 * i);
      b3 += qb * load8(k3 + 8 * i + 8);
    }
    if (i < nv) {
      const V8 qa = load8(q + 8 * i);
      a0 += qa * load8(k0 + 8 * i);
      a1 += qa * load8(k1 + 8 * i);
      a2 += qa * load8(k2 + 8 * i);
      a3 += qa * load8(k3 + 8 * i);
    }
    const V4 h0 = fold4(a0 + b0), h1 = fold4(a1 + b1), h2 = fold4(a2 + b2), h3 = fold4(a3 + b3);
    // Transpose: r_j = (h0[j], h1[j], h2[j], h3[j]).
    const V4 t0 = __builtin_shuffle(h0, h1, I4{0, 4, 1, 5}), t1 = __builtin_shuffle(h0, h1, I4{2, 6, 3, 7});
    const V4 t2 = __builtin_shuffle(h2, h3, I4{0, 4, 1, 5}), t3 = __builtin_shuffle(h2, h3, I4{2, 6, 3, 7});
    const V4 r0 = __builtin_shuffle(t0, t2, I4{0, 1, 4, 5}), r1 = __builtin_shuffle(t0, t2, I4{2, 3, 6, 7});
    const V4 r2 = __builtin_shuffle(t1, t3, I4{0, 1, 4, 5}), r3 = __builtin_shuffle(t1, t3, I4{2, 3, 6, 7});
    const V4 s = ((r0 + r1) + (r2 + r3)) * scale;
    std::memcpy(sc + (t - lo), &s, sizeof(s));
  }
  for (; t <= hi; ++t) sc[t - lo] = dot_v8(q, rows[t], nv) * scale;
}

// o[c] = inv * sum over t in [lo, hi] of p[t - lo] * rows[t][c0 * 8 + c], for W vectors of
// columns starting at vector c0: the accumulators stay in registers, and each column adds its
// keys' products in key order, as a loop over keys with the accumulator in memory does.
template <int W>
RLM_VEC_INLINE void weigh_values(const float* const* rows, const float* p, int64_t lo, int64_t hi, int64_t c0,
                                 float inv, float* o) {
  V8 a[W] = {};
  for (int64_t t = lo; t <= hi; ++t) {
    const V8 pt = V8{} + p[t - lo];
    const float* vr = rows[t] + 8 * c0;
#pragma GCC unroll 8
    for (int c = 0; c < W; ++c) a[c] += pt * load8(vr + 8 * c);
  }
#pragma GCC unroll 8
  for (int c = 0; c < W; ++c) store8(o + 8 * (c0 + c), a[c] * inv);
}

// Pointers to f32 rows of one kv head for key positions [first, first + count) (rows[i] is
// position first + i); 16-bit caches are widened into `storage` (exact conversion, so the result
// does not depend on how items are formed), f8e4m3 ones widened and multiplied by `scale`.
void gather_rows(const AttnRows& cache, float scale, const PagedBatch& b, int64_t request, int64_t kv_head,
                 int64_t first, int64_t count, int64_t head_dim, std::vector<float>& storage,
                 std::vector<const float*>& rows) {
  count = std::max<int64_t>(count, 0);
  rows.resize(static_cast<size_t>(count));
  const bool widen = cache.dtype != DType::kF32;
  if (widen) storage.resize(static_cast<size_t>(count * head_dim));
  const int32_t* pages = b.kv_indices + b.kv_indptr[request];
  const size_t es = dtype_size(cache.dtype);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t pos = first + i;
    const int64_t slot = static_cast<int64_t>(pages[pos / b.page_size]) * b.page_size + pos % b.page_size;
    const char* src = static_cast<const char*>(cache.data) +
                      static_cast<size_t>(slot * cache.token_stride + kv_head * cache.head_stride) * es;
    if (widen) {
      float* dst = storage.data() + i * head_dim;
      convert_to_f32(src, cache.dtype, dst, static_cast<size_t>(head_dim));
      if (cache.dtype == DType::kF8E4M3) {
        for (int64_t c = 0; c < head_dim; ++c) dst[c] *= scale;
      }
      rows[i] = dst;
    } else {
      rows[i] = reinterpret_cast<const float*>(src);
    }
  }
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
// An AVX2 clone of the hot loop where the CPU has it (same arithmetic, wider registers).
__attribute__((target_clones("avx2", "default")))
#endif
void run_item(const WorkItem& item, const AttnRows& q, const AttnRows& k_cache, const AttnRows& v_cache,
              const PagedBatch& b, const AttnConfig& cfg, float* out, int64_t out_ts, int64_t out_hs, float* lse,
              int64_t lse_ts) {
  // Accumulators are plain floats (a std::vector<V8> would not honour the vector's alignment).
  thread_local std::vector<float> k_store, v_store, scores, sums, acc;
  thread_local std::vector<const float*> k_rows, v_rows, q_rows;
  const int64_t r = item.request;
  const int64_t qo_begin = b.qo_indptr[r];
  const int64_t qo_len = b.qo_indptr[r + 1] - qo_begin;
  const int64_t seq_len = b.seq_lens[r];
  const int64_t d = cfg.head_dim, dv = cfg.v_dim();  // q/k and v/out head sizes
  const int64_t nv = d / 8, nvv = dv / 8;
  const bool vec = d % 8 == 0 && nv <= kMaxVecs;
  const bool vec_v = dv % 8 == 0 && nvv <= kMaxVecs;
  // Keys visible to some query of the block: positions [kb, ke) (score and row buffers are
  // indexed by position - kb).
  const int64_t kb = b.kv_begin != nullptr ? b.kv_begin[r] : 0;
  const int64_t ke = std::min<int64_t>(b.kv_end != nullptr ? b.kv_end[r] : seq_len, seq_len - qo_len + item.q_end);
  const int64_t n_keys = std::max<int64_t>(ke - kb, 0);
  gather_rows(k_cache, cfg.k_scale, b, r, item.kv_head, kb, n_keys, d, k_store, k_rows);
  gather_rows(v_cache, cfg.v_scale, b, r, item.kv_head, kb, n_keys, dv, v_store, v_rows);
  // The qo heads of one kv head share each loaded K/V row; every head's arithmetic (order of the
  // dot product, the max, the exp sum and the weighted sum over keys) is the same as alone.
  const int64_t group = cfg.num_qo_heads / cfg.num_kv_heads;
  scores.resize(static_cast<size_t>(group * n_keys));
  sums.resize(static_cast<size_t>(group));
  q_rows.resize(static_cast<size_t>(group));
  acc.resize(static_cast<size_t>(group * dv));
  const float* qbase = static_cast<const float*>(q.data);
  for (int64_t j = item.q_begin; j < item.q_end; ++j) {
    const int64_t pos = seq_len - qo_len + j;
    // Visible keys of this query, as indices into k_rows/v_rows: [lo, hi].
    const int64_t lo =
        std::max<int64_t>(cfg.sliding_window > 0 ? std::max<int64_t>(0, pos - cfg.sliding_window + 1) : 0, kb) - kb;
    const int64_t hi = std::min<int64_t>(pos, ke - 1) - kb;
    const int64_t row = qo_begin + j;
    for (int64_t hh = 0; hh < group; ++hh) {
      q_rows[hh] = qbase + row * q.token_stride + (item.kv_head * group + hh) * q.head_stride;
    }
    for (int64_t hh = 0; hh < group; ++hh) {
      float* sc = scores.data() + hh * n_keys;
      if (vec) {
        if (hi >= lo) score_keys(q_rows[hh], k_rows.data(), lo, hi, nv, cfg.scale, sc + lo);
      } else {
        for (int64_t t = lo; t <= hi; ++t) sc[t] = dot(q_rows[hh], k_rows[t], d) * cfg.scale;
      }
      if (cfg.logit_soft_cap > 0.0f) {
        for (int64_t t = lo; t <= hi; ++t) sc[t] = cfg.logit_soft_cap * std::tanh(sc[t] / cfg.logit_soft_cap);
      }
    }
    for (int64_t hh = 0; hh < group; ++hh) {
      // The max, the exponentials (vectorised, the same arithmetic for every key) and their sum.
      const MaxExpSum ms = exp_minus_max(scores.data() + hh * n_keys + lo, std::max<int64_t>(hi - lo + 1, 0));
      sums[hh] = ms.sum;
      if (lse != nullptr) {
        lse[row * lse_ts + item.kv_head * group + hh] =
            hi < lo ? -std::numeric_limits<float>::infinity() : ms.max + std::log(ms.sum);
      }
    }
    if (vec_v) {
      // Head by head, 64 output columns at a time in registers.
      for (int64_t hh = 0; hh < group; ++hh) {
        const float inv = hi < lo ? 0.0f : 1.0f / sums[hh];  // no visible key: zeros
        float* o = out + row * out_ts + (item.kv_head * group + hh) * out_hs;
        const float* p = scores.data() + hh * n_keys + lo;
        const float* const* vr = v_rows.data();
        int64_t c0 = 0;
        for (; c0 + 8 <= nvv; c0 += 8) weigh_values<8>(vr, p, lo, hi, c0, inv, o);
        for (; c0 + 4 <= nvv; c0 += 4) weigh_values<4>(vr, p, lo, hi, c0, inv, o);
        for (; c0 < nvv; ++c0) weigh_values<1>(vr, p, lo, hi, c0, inv, o);
      }
      continue;
    }
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int64_t t = lo; t <= hi; ++t) {
      const float* vr = v_rows[t];
      for (int64_t hh = 0; hh < group; ++hh) {
        const float p = scores[hh * n_keys + t];
        float* a = acc.data() + hh * dv;
        for (int64_t c = 0; c < dv; ++c) a[c] += p * vr[c];
      }
    }
    for (int64_t hh = 0; hh < group; ++hh) {
      const float inv = hi < lo ? 0.0f : 1.0f / sums[hh];  // no visible key: zeros
      float* o = out + row * out_ts + (item.kv_head * group + hh) * out_hs;
      const float* a = acc.data() + hh * dv;
      for (int64_t c = 0; c < dv; ++c) o[c] = a[c] * inv;
    }
  }
}

}  // namespace

void paged_attention(const AttnRows& q, const AttnRows& k_cache, const AttnRows& v_cache, const PagedBatch& batch,
                     const AttnConfig& cfg, float* out, int64_t out_token_stride, int64_t out_head_stride,
                     float* lse, int64_t lse_token_stride) {
  RLM_CHECK(cfg.num_kv_heads > 0 && cfg.num_qo_heads % cfg.num_kv_heads == 0)
      << "paged_attention: num_qo_heads " << cfg.num_qo_heads << " is not a multiple of num_kv_heads "
      << cfg.num_kv_heads;
  validate_paged_batch(batch);
  std::vector<WorkItem> items;
  for (int64_t r = 0; r < batch.batch_size; ++r) {
    const int64_t qo_len = batch.qo_indptr[r + 1] - batch.qo_indptr[r];
    for (int64_t g = 0; g < cfg.num_kv_heads; ++g) {
      for (int64_t j = 0; j < qo_len; j += kQueryBlock) items.push_back({r, g, j, std::min(qo_len, j + kQueryBlock)});
    }
  }
  // A prefill's items (16 queries over up to all keys each) are long: finer chunks, so the threads
  // finish together.
  const int chunks_per_thread =
      batch.num_tokens >= 64 ? ThreadPool::kLongCallChunksPerThread : ThreadPool::kChunksPerThread;
  parallel_for(static_cast<int64_t>(items.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      run_item(items[i], q, k_cache, v_cache, batch, cfg, out, out_token_stride, out_head_stride, lse,
               lse_token_stride);
    }
  }, chunks_per_thread);
}

void merge_attention_states(const float* parts, const float* lse, int64_t num_parts, int64_t n, int64_t heads,
                            int64_t head_dim, float* out, float* lse_out) {
  RLM_CHECK(num_parts >= 1 && n >= 0 && heads > 0 && head_dim > 0)
      << "merge_attention_states: bad shape [" << num_parts << ", " << n << ", " << heads << ", " << head_dim << "]";
  const int64_t rows = n * heads;
  parallel_for(rows, 64, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      float m = -std::numeric_limits<float>::infinity();
      for (int64_t k = 0; k < num_parts; ++k) m = std::max(m, lse[k * rows + i]);
      float* o = out + i * head_dim;
      if (m == -std::numeric_limits<float>::infinity()) {
        for (int64_t c = 0; c < head_dim; ++c) o[c] = 0.0f;
        if (lse_out != nullptr) lse_out[i] = m;
        continue;
      }
      float sum = 0.0f;
      for (int64_t c = 0; c < head_dim; ++c) o[c] = 0.0f;
      for (int64_t k = 0; k < num_parts; ++k) {
        const float w = std::exp(lse[k * rows + i] - m);
        sum += w;
        const float* p = parts + (k * rows + i) * head_dim;
        for (int64_t c = 0; c < head_dim; ++c) o[c] += w * p[c];
      }
      const float inv = 1.0f / sum;
      for (int64_t c = 0; c < head_dim; ++c) o[c] *= inv;
      if (lse_out != nullptr) lse_out[i] = m + std::log(sum);
    }
  });
}

}  // namespace rlm::cpu
