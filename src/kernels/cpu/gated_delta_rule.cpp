#include "kernels/cpu/gated_delta_rule.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/thread_pool.h"

namespace rlm::cpu {
namespace {

constexpr float kL2NormEps = 1e-6f;  // FLA / HF l2norm

// dst = src * (l2norm ? 1 / sqrt(sum(src^2) + eps) : 1) * scale.
void load_normalized(const float* src, int64_t n, bool l2norm, float scale, float* dst) {
  float inv = 1.0f;
  if (l2norm) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(src[i]) * src[i];
    inv = 1.0f / std::sqrt(static_cast<float>(sum) + kL2NormEps);
  }
  for (int64_t i = 0; i < n; ++i) dst[i] = (src[i] * inv) * scale;
}

// Eight interleaved partial sums (vectorisable without reassociation flags), then a fixed tree.
float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int64_t j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  }
  for (; i < n; ++i) acc[i % 8] += a[i] * b[i];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

// Per-thread buffers for one (request, head) work item.
struct Scratch {
  std::vector<float> q, k, v, g, beta;  // [chunk, dk] / [chunk, dv] / [chunk]
  std::vector<float> cum, a, u, w, vnew, tmp;
  void reserve(int64_t c, int64_t dk, int64_t dv) {
    q.resize(c * dk);
    k.resize(c * dk);
    v.resize(c * dv);
    g.resize(c);
    beta.resize(c);
    cum.resize(c);
    a.resize(c * c);
    u.resize(c * dv);
    w.resize(c * dk);
    vnew.resize(c * dv);
    tmp.resize(std::max(dk, dv));
  }
};

class HeadRunner {
 public:
  HeadRunner(const GdrInputs& in, float scale, bool l2norm, float* out, Scratch& s)
      : in_(in), scale_(scale), l2norm_(l2norm), out_(out), s_(s), dk_(in.head_k_dim), dv_(in.head_v_dim) {}

  void set_head(int64_t h) {
    h_ = h;
    kh_ = h / (in_.num_v_heads / in_.num_k_heads);
  }

  // Loads the normalised q, k and v, g, beta of rows [row0, row0 + n) into the scratch.
  void load(int64_t row0, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t t = row0 + i;
      load_normalized(in_.q + t * in_.q_st + kh_ * in_.q_sh, dk_, l2norm_, scale_, &s_.q[i * dk_]);
      load_normalized(in_.k + t * in_.k_st + kh_ * in_.k_sh, dk_, l2norm_, 1.0f, &s_.k[i * dk_]);
      std::memcpy(&s_.v[i * dv_], in_.v + t * in_.v_st + h_ * in_.v_sh, dv_ * sizeof(float));
      s_.g[i] = in_.g[t * in_.ldg + h_];
      s_.beta[i] = in_.beta[t * in_.ldbeta + h_];
    }
  }

  // Token by token over rows [row0, row0 + n); S: [dk, dv].
  void recurrent(int64_t row0, int64_t n, float* S) {
    for (int64_t i0 = 0; i0 < n; i0 += kLoadBlock) {
      const int64_t nb = std::min(kLoadBlock, n - i0);
      load(row0 + i0, nb);
      for (int64_t i = 0; i < nb; ++i) {
        const float* q = &s_.q[i * dk_];
        const float* k = &s_.k[i * dk_];
        const float* v = &s_.v[i * dv_];
        const float decay = std::exp(s_.g[i]);
        float* delta = s_.tmp.data();
        for (int64_t e = 0; e < dv_; ++e) delta[e] = 0.0f;
        for (int64_t d = 0; d < dk_; ++d) {
          float* row = S + d * dv_;
          for (int64_t e = 0; e < dv_; ++e) {
            row[e] *= decay;
            delta[e] += row[e] * k[d];
          }
        }
        for (int64_t e = 0; e < dv_; ++e) delta[e] = (v[e] - delta[e]) * s_.beta[i];
        float* o = out_ + ((row0 + i0 + i) * in_.num_v_heads + h_) * dv_;
        for (int64_t e = 0; e < dv_; ++e) o[e] = 0.0f;
        for (int64_t d = 0; d < dk_; ++d) {
          float* row = S + d * dv_;
          for (int64_t e = 0; e < dv_; ++e) {
            row[e] += k[d] * delta[e];
            o[e] += row[e] * q[d];
          }
        }
      }
    }
  }

  // Chunk by chunk (HF torch_chunk_gated_delta_rule) over rows [row0, row0 + n).
  void chunked(int64_t row0, int64_t n, int64_t chunk, float* S) {
    for (int64_t c0 = 0; c0 < n; c0 += chunk) {
      const int64_t L = std::min(chunk, n - c0);
      load(row0 + c0, L);
      one_chunk(row0 + c0, L, S);
    }
  }

 private:
  static constexpr int64_t kLoadBlock = 64;

  void one_chunk(int64_t row0, int64_t L, float* S) {
    float* cum = s_.cum.data();
    float acc = 0.0f;
    for (int64_t i = 0; i < L; ++i) cum[i] = acc += s_.g[i];
    // A[i][j] = (beta_i k_i . k_j) exp(cum_i - cum_j), j < i: the strictly lower part of the UT system.
    float* A = s_.a.data();
    for (int64_t i = 0; i < L; ++i) {
      for (int64_t j = 0; j < i; ++j) {
        A[i * L + j] = (s_.beta[i] * dot(&s_.k[i * dk_], &s_.k[j * dk_], dk_)) * std::exp(cum[i] - cum[j]);
      }
    }
    // Forward substitution with the unit lower-triangular (I + A):
    //   U = (I + A)^-1 (beta v)            (new values)
    //   W = (I + A)^-1 (beta k exp(cum))   (decayed keys that read the old state)
    float* U = s_.u.data();
    float* W = s_.w.data();
    for (int64_t i = 0; i < L; ++i) {
      float* ui = U + i * dv_;
      float* wi = W + i * dk_;
      const float b = s_.beta[i], ec = std::exp(cum[i]);
      for (int64_t e = 0; e < dv_; ++e) ui[e] = s_.v[i * dv_ + e] * b;
      for (int64_t d = 0; d < dk_; ++d) wi[d] = (s_.k[i * dk_ + d] * b) * ec;
      for (int64_t j = 0; j < i; ++j) {
        const float aij = A[i * L + j];
        for (int64_t e = 0; e < dv_; ++e) ui[e] -= aij * U[j * dv_ + e];
        for (int64_t d = 0; d < dk_; ++d) wi[d] -= aij * W[j * dk_ + d];
      }
    }
    // v_new = U - W S;  out_i = (q_i exp(cum_i)) S + sum_{j <= i} (q_i . k_j) exp(cum_i - cum_j) v_new_j.
    float* vnew = s_.vnew.data();
    for (int64_t i = 0; i < L; ++i) {
      float* vi = vnew + i * dv_;
      for (int64_t e = 0; e < dv_; ++e) vi[e] = U[i * dv_ + e];
      for (int64_t d = 0; d < dk_; ++d) {
        const float wd = W[i * dk_ + d];
        const float* row = S + d * dv_;
        for (int64_t e = 0; e < dv_; ++e) vi[e] -= wd * row[e];
      }
    }
    for (int64_t i = 0; i < L; ++i) {
      float* o = out_ + ((row0 + i) * in_.num_v_heads + h_) * dv_;
      const float* qi = &s_.q[i * dk_];
      const float ec = std::exp(cum[i]);
      for (int64_t e = 0; e < dv_; ++e) o[e] = 0.0f;
      for (int64_t d = 0; d < dk_; ++d) {
        const float qd = qi[d] * ec;
        const float* row = S + d * dv_;
        for (int64_t e = 0; e < dv_; ++e) o[e] += qd * row[e];
      }
      for (int64_t j = 0; j <= i; ++j) {
        const float a = dot(qi, &s_.k[j * dk_], dk_) * std::exp(cum[i] - cum[j]);
        const float* vj = vnew + j * dv_;
        for (int64_t e = 0; e < dv_; ++e) o[e] += a * vj[e];
      }
    }
    // S = exp(cum_last) S + sum_j (k_j exp(cum_last - cum_j)) v_new_j^T.
    const float last = cum[L - 1];
    const float chunk_decay = std::exp(last);
    for (int64_t d = 0; d < dk_; ++d) {
      float* row = S + d * dv_;
      for (int64_t e = 0; e < dv_; ++e) row[e] *= chunk_decay;
    }
    for (int64_t j = 0; j < L; ++j) {
      const float dj = std::exp(last - cum[j]);
      const float* vj = vnew + j * dv_;
      for (int64_t d = 0; d < dk_; ++d) {
        const float kd = s_.k[j * dk_ + d] * dj;
        float* row = S + d * dv_;
        for (int64_t e = 0; e < dv_; ++e) row[e] += kd * vj[e];
      }
    }
  }

  const GdrInputs& in_;
  float scale_;
  bool l2norm_;
  float* out_;
  Scratch& s_;
  int64_t dk_, dv_;
  int64_t h_ = 0, kh_ = 0;
};

}  // namespace

void gated_delta_rule(const GdrInputs& in, float* state, const SegmentIndex& seg, float scale, bool l2norm,
                      int64_t chunk_size, float* out) {
  const int64_t hv = in.num_v_heads, dk = in.head_k_dim, dv = in.head_v_dim;
  const int64_t head_floats = dk * dv;
  parallel_for(seg.batch_size * hv, 1, [&](int64_t begin, int64_t end) {
    Scratch scratch;
    scratch.reserve(std::max<int64_t>(chunk_size, 64), dk, dv);
    std::vector<float> S(static_cast<size_t>(head_floats));
    HeadRunner runner(in, scale, l2norm, out, scratch);
    for (int64_t item = begin; item < end; ++item) {
      const int64_t r = item / hv, h = item % hv;
      const int64_t len = seg.length(r);
      if (len == 0) continue;
      float* slot = state + (static_cast<int64_t>(seg.state_slots[r]) * hv + h) * head_floats;
      if (seg.has_initial_state[r] != 0) {
        std::memcpy(S.data(), slot, head_floats * sizeof(float));
      } else {
        std::fill(S.begin(), S.end(), 0.0f);
      }
      runner.set_head(h);
      auto run = [&](int64_t row0, int64_t n) {
        if (n <= 0) return;
        if (chunk_size > 0) {
          runner.chunked(row0, n, chunk_size, S.data());
        } else {
          runner.recurrent(row0, n, S.data());
        }
      };
      const int64_t track = seg.track_len(r);
      if (track > 0) {
        run(seg.begin(r), track);
        float* snap = state + (static_cast<int64_t>(seg.track_slots[r]) * hv + h) * head_floats;
        std::memcpy(snap, S.data(), head_floats * sizeof(float));
        run(seg.begin(r) + track, len - track);
      } else {
        run(seg.begin(r), len);
      }
      std::memcpy(slot, S.data(), head_floats * sizeof(float));
    }
  });
}

}  // namespace rlm::cpu
