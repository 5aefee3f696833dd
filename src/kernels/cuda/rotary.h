// CUDA rotary embedding, in place on q and k (twin of kernels/cpu/rotary.h; pointers on `device`).
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "kernels/cuda/kv_store.h"

namespace rlm::cuda {

// Heads of one tensor: head h of token t starts at data + t*token_stride + h*head_stride.
struct Heads {
  float* data = nullptr;
  int64_t num_heads = 0;
  int64_t token_stride = 0;
  int64_t head_stride = 0;
};

// Rotates the first rotary_dim dims of every head of q and k. neox: pairs (i, i + half); GPT-J:
// pairs (2i, 2i + 1); pair i uses cos/sin column i of row positions[t] of cos_sin
// (f32 [max_positions, rotary_dim], contiguous, on the device). positions: i32/i64 [num_tokens]
// (element stride positions_stride); validated on the device before anything is modified.
void rotary_embedding(int device, const Heads& q, const Heads& k, int64_t num_tokens, const void* positions,
                      DType positions_dtype, int64_t positions_stride, const float* cos_sin, int64_t max_positions,
                      int64_t rotary_dim, bool is_neox);

// Per-head RMSNorm weights applied to q and k before the rotation (Qwen3's q_norm / k_norm):
// [head_dim] each, f32/bf16/f16 (`dtype`), on the device; q == nullptr: none.
struct HeadNorms {
  const void* q = nullptr;
  const void* k = nullptr;
  DType dtype = DType::kF32;
  float eps = 0.0f;
};

// Whether rotary_store_kv_cache takes these head sizes (rotary_dim, head_dim - rotary_dim and
// v_head_dim at most 256: a warp holds a head in registers).
bool rotary_store_kv_fits(int64_t head_dim, int64_t rotary_dim, int64_t v_head_dim);

// [rms_norm(q), rms_norm(k) with `norms`,] rotary_embedding(q, k, ...) and store_kv_cache(k, v, ...)
// in one launch: q and k normalised and rotated in place, the keys and the values written to the
// pool (f32 sources; the cache dtypes and FP8 scales of store_kv_cache). Without norms the results
// are those of the two ops bit for bit; the norms are rms_norm's arithmetic (squares summed in
// double, w * (x * inv)). Positions and slots are checked as the ops check them (on the host first,
// or deferred inside a DeferredIndexChecks scope: a token with a bad position is left unrotated, one
// with a bad slot is not stored). The position, slot and cos / sin of a token are read before the
// PDL wait (they are written before the layers run). v rows have v_head_dim columns.
void rotary_store_kv_cache(int device, const Heads& q, const Heads& k, const KvRows& v, const KvRows& k_cache,
                           const KvRows& v_cache, int64_t num_tokens, const void* positions,
                           DType positions_dtype, int64_t positions_stride, const float* cos_sin,
                           int64_t max_positions, int64_t rotary_dim, bool is_neox, const void* out_cache_loc,
                           DType loc_dtype, int64_t loc_stride, int64_t head_dim, int64_t v_head_dim,
                           int64_t num_slots, float k_scale, float v_scale, const HeadNorms& norms = {});

}  // namespace rlm::cuda
