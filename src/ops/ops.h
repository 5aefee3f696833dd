// ops:: — the numeric operations the models use. Each op checks shapes, dtypes and devices at
// the boundary (naming the offending tensor) and dispatches on the device: kernels/cpu/ holds the
// plain CPU versions, which are also the test references for the CUDA twins in kernels/cuda/.
//
// Conventions: activations are f32 on the CPU; weights may be f32, bf16 or f16. Index tensors are
// i32 unless stated. "[n, d]" tensors must have a unit stride in the last dimension; the row stride
// may be larger (views into a fused QKV buffer are fine) unless the op says "contiguous".
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace rlm::ops {

// out[i, :] = weight[ids[i], :] (converted to out's dtype).
//   ids: i32 [num_tokens]; weight: f32/bf16/f16 or block-quantized [vocab_size, hidden] (rows are
//   dequantized; out f32 then); out: f32/bf16/f16 [num_tokens, hidden].
// Fails with a clear error (naming the position and the id) when an id is outside [0, vocab_size);
// nothing is written then.
void embedding(const Tensor& ids, const Tensor& weight, const Tensor& out);

// out = x / sqrt(mean(x^2) + eps) * weight (HF LlamaRMSNorm: the norm in f32, then * weight).
//   x, out: f32 [n, d] or [n, heads, d] (per-head norms on a strided view of a fused QKV buffer;
//   out may alias x); weight: f32/bf16/f16 [d].
void rms_norm(const Tensor& x, const Tensor& weight, float eps, const Tensor& out);

// residual += x; x = rms_norm(residual) * weight (SGLang's fused_add_rmsnorm). In place on both.
//   x, residual: f32 [n, d] or [n, heads, d]; weight: f32/bf16/f16 [d].
void fused_add_rms_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, float eps);

// Rotary-embedding tables. inv_freq follows HF's rope init functions ("default", "linear",
// "llama3", "dynamic" is not supported); cos/sin are computed in f32 like transformers.
struct RopeConfig {
  int64_t rotary_dim = 0;          // dims rotated per head (head_dim * partial_rotary_factor)
  double theta = 10000.0;
  bool is_neox = true;             // neox: rotate halves; GPT-J: rotate interleaved pairs
  std::string scaling_type;        // "", "default", "linear", "llama3"
  double factor = 1.0;             // linear / llama3
  double low_freq_factor = 1.0;    // llama3
  double high_freq_factor = 4.0;   // llama3
  int64_t original_max_position = 8192;  // llama3
};
// cos_sin: f32 [max_positions, rotary_dim] — first half cos, second half sin, per position.
Tensor make_rope_cos_sin_cache(const RopeConfig& cfg, int64_t max_positions);
// Applies rotary embedding in place to the first rotary_dim dims of every head (the rest is
// untouched). neox: x[i], x[i + rotary_dim/2] rotate together; GPT-J: x[2i], x[2i + 1]; pair i uses
// column i of the cache row: (x1, x2) -> (x1*cos - x2*sin, x2*cos + x1*sin).
//   q: f32 [num_tokens, num_qo_heads, head_dim]; k: f32 [num_tokens, num_kv_heads, head_dim];
//   positions: i32/i64 [num_tokens], each in [0, max_positions); cos_sin: from make_rope_cos_sin_cache.
void rotary_embedding(const Tensor& q, const Tensor& k, const Tensor& positions, const Tensor& cos_sin,
                      bool is_neox);

// out[m, n] = x[m, k] @ weight[n, k]^T (+ bias[n]). Weight f32/bf16/f16 (converted exactly to
// f32 block by block, so a 16-bit weight gives the same bits as its f32 copy), bias f32/bf16/f16,
// x and out f32 (row strides may exceed k / n; out must not overlap x). Through BLAS (sgemm) on the CPU.
// A block-quantized weight (GGUF q4_k, q8_0, ...; core/dtype.h) is multiplied in its blocks: by
// default the activations are quantized to 8 bits per block and multiplied with integer dot
// products (kernels/cpu/quant_matmul.h; CUDA: kernels/cuda/quant_matmul.h); with
// set_quantized_linear_activations(kF32) the CPU dequantizes the weight rows block by block and
// keeps x in f32 (a reference mode: the dequantized-f32 result up to summation order).
void linear(const Tensor& x, const Tensor& weight, const std::optional<Tensor>& bias, const Tensor& out);

enum class QuantizedActivations { kInt8, kF32 };
// Process-wide; the initial value is kF32 when RADIXLM_QUANT_ACTIVATIONS=f32 is set, else kInt8.
void set_quantized_linear_activations(QuantizedActivations mode);
QuantizedActivations quantized_linear_activations();
// Scales of an f8e4m3 weight (core/dtype.h): its value at [j, c] is weight[j, c] * scale(j, c).
struct Fp8Scales {
  Tensor weight_scale;  // f32 [n] per output channel, or [ceil(n / block_n), ceil(k / block_k)] per block
  int64_t block_n = 0;  // > 0 together with block_k: block scales (128 x 128 in published checkpoints)
  int64_t block_k = 0;
  Tensor input_scale;   // f32 [1]: static activation scale (per-channel weights only); undefined: dynamic
  bool defined() const { return weight_scale.defined(); }
};
// linear() with an f8e4m3 weight, on the FP8 tensor-core path (docs/design/fp8.md): x is quantized
// to e4m3 per token (per token and block_k-column group for block scales; with input_scale one
// static scale), the products of e4m3 values are summed in f32 and scaled by the activation and
// weight scales (kernels/cpu/fp8_linear.h states the arithmetic; CUDA: kernels/cuda/fp8_linear.h).
// With set_fp8_linear_activations(kF32) the CPU keeps x in f32 and multiplies the dequantized
// weight instead (the reference that transformers computes on the upcast checkpoint).
//   weight: f8e4m3 [n, k] (unit last stride); the rest as in linear().
void linear(const Tensor& x, const Tensor& weight, const std::optional<Tensor>& bias, const Tensor& out,
            const Fp8Scales& scales);

// out = linear(silu_and_mul(gate_up), weight, bias, scales) with an f8e4m3 weight. On CUDA, for
// per-channel weights and more than 8 rows, the SiLU-and-mul is folded into the activation
// quantization (cuda::fp8_linear_silu_and_mul: bit-identical, no f32 intermediate) and `act` is
// not written; elsewhere (the CPU, decode-sized batches, block scales, RADIXLM_FP8_FUSED_SILU=0)
// silu_and_mul(gate_up, act) then linear(act, ...).   gate_up: f32 [n, 2 * k]; act: f32 [n, k].
void silu_and_mul_linear(const Tensor& gate_up, const Tensor& act, const Tensor& weight,
                         const std::optional<Tensor>& bias, const Tensor& out, const Fp8Scales& scales);

// The norm of a pre-norm residual stream, then linear(x, weight, bias, out, scales) with an
// f8e4m3 weight: with `residual`, fused_add_rms_norm(x, *residual, norm_weight, eps), else
// rms_norm(x, norm_weight, eps, x). x (and the residual) are written as by the norm alone. On CUDA,
// for per-channel weights, the activation quantization is folded into the norm
// (cuda::fp8_linear_rms_norm: one kernel fewer, bit-identical; RADIXLM_FP8_FUSED_NORM=0 turns it
// off); elsewhere the norm, then linear().   x: f32 [n, k]; residual: f32 [n, k]; norm_weight: [k].
void rms_norm_linear(const Tensor& x, const Tensor* residual, const Tensor& norm_weight, float eps,
                     const Tensor& weight, const std::optional<Tensor>& bias, const Tensor& out,
                     const Fp8Scales& scales);

// What a decode GEMV does around its dot products in the same launch (ops::fused_linear).
struct LinearFusion {
  const Tensor* norm_weight = nullptr;  // x -> rms_norm(x, *norm_weight, eps) first (x not written)
  float eps = 0.0f;
  bool silu_and_mul = false;  // out = silu_and_mul(the linear's [m, n]): out [m, n / 2]
  bool accumulate = false;    // out += the result (a residual stream) instead of out = it
};

// out (=, or += with f.accumulate) [silu_and_mul of] linear(rms_norm(x) or x, weight, bias) in one
// kernel where there is one: on CUDA, with 1-2 rows of x, a bf16/f16 weight on the GEMV path
// (cuda::linear_fused) or, when switched on below, a block-quantized weight
// (cuda::quant_linear_fused). The dot products are those of linear() on the same rows, so without
// the norm the result has the bits of the ops in turn, and with it the norm's inverse RMS is
// rms_norm's (squares summed in double). Returns false having done nothing elsewhere (the CPU,
// f32 / f8e4m3 weights, more rows, unaligned weights, the switches off): callers run the ops in
// turn then. Bad arguments are errors either way.   x: f32 [m, k]; weight: [n, k]; bias: [n];
// out: f32 [m, n] ([m, n / 2] with f.silu_and_mul; n even), not overlapping x; f.norm_weight:
// f32/bf16/f16 [k].
bool fused_linear(const Tensor& x, const Tensor& weight, const std::optional<Tensor>& bias, const Tensor& out,
                  const LinearFusion& f);
// Process-wide switches for fused_linear: all of it (default on; RADIXLM_FUSED_GEMV=0 in the
// environment starts it off: the reference for its speed), and its block-quantized weights
// (default off, RADIXLM_FUSED_GEMV_QUANT=1 starts it on: measured slower than the ops in turn for
// the Llama-3.1-8B shape with Q4_K weights, 2.630 against 2.528 ms a batch-1 step on an H200;
// docs/perf/decode_kernels.md). Not synchronized with calls in flight.
void set_fused_linear_enabled(bool enabled);
bool fused_linear_enabled();
void set_fused_linear_quantized_enabled(bool enabled);
bool fused_linear_quantized_enabled();

enum class Fp8Activations { kFp8, kF32 };
// Process-wide; starts as kF32 when RADIXLM_FP8_ACTIVATIONS=f32 is set, else kFp8. kF32 is CPU-only.
void set_fp8_linear_activations(Fp8Activations mode);
Fp8Activations fp8_linear_activations();

// out[n, i] = silu(x[n, :i]) * x[n, i:].   x: [n, 2*i]; out: [n, i].
void silu_and_mul(const Tensor& x, const Tensor& out);
// out[n, i] = gelu_tanh(x[n, :i]) * x[n, i:] with PyTorch's gelu(approximate="tanh") in f32
// (Gemma's gelu_pytorch_tanh).   x: [n, 2*i]; out: [n, i].
void gelu_tanh_and_mul(const Tensor& x, const Tensor& out);
// x *= s in place (Gemma's embedding scale).   x: f32 [n, d].
void scale(const Tensor& x, float s);
// x = cap * tanh(x / cap) in place (Gemma's final logit soft-capping); cap > 0.   x: f32 [n, d].
void soft_cap(const Tensor& x, float cap);

// Writes new keys/values into the paged pool at slot indices (converting to the cache's dtype).
//   k, v: f32/bf16/f16 [num_tokens, num_kv_heads, head_dim]; k_cache, v_cache: f32/bf16/f16/f8e4m3
//   [num_slots, num_kv_heads, head_dim] (num_slots = num_pages * page_size, NHD layout); v and
//   v_cache may have their own head size v_head_dim (split sizes); v has the dtype of k (one CUDA
//   launch writes both);
//   out_cache_loc: i32/i64 [num_tokens]. A slot outside [0, num_slots) is an error (nothing written).
// On CUDA inside a ModelRunner step (deferred checks, kernels/cuda/index_check.h) a bad slot is
// skipped and reported at the step's end instead, and -1 marks a padded CUDA-graph row (skipped).
// An f8e4m3 cache stores e4m3(k / k_scale) and e4m3(v / v_scale) (round to nearest even,
// saturating at +-448); other caches need k_scale = v_scale = 1.
void store_kv_cache(const Tensor& k, const Tensor& v, const Tensor& k_cache, const Tensor& v_cache,
                    const Tensor& out_cache_loc, float k_scale = 1.0f, float v_scale = 1.0f);

// [rms_norm(q, *q_norm, norm_eps, q) and rms_norm(k, *k_norm, norm_eps, k),] then
// rotary_embedding(q, k, positions, cos_sin, is_neox), then store_kv_cache(k, v, k_cache, v_cache,
// out_cache_loc, k_scale, v_scale), with the checks of each: on CUDA one kernel (the attention
// prologue of a step: one launch instead of two to four; without norms the same bits as the ops,
// with them rms_norm's arithmetic), elsewhere -- and for heads past the kernel's sizes
// (cuda::rotary_store_kv_fits) -- the ops in turn (on the CPU after checking every position and
// slot, so that a bad one modifies nothing, as on CUDA). v is f32 (it has k's dtype). The norms:
// both or neither, contiguous [head_dim], f32/bf16/f16.
void rotary_store_kv_cache(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& positions,
                           const Tensor& cos_sin, bool is_neox, const Tensor& k_cache, const Tensor& v_cache,
                           const Tensor& out_cache_loc, float k_scale = 1.0f, float v_scale = 1.0f,
                           const Tensor* q_norm = nullptr, const Tensor* k_norm = nullptr,
                           float norm_eps = 0.0f);

// Per-layer attention parameters that are not tensors.
struct AttentionParams {
  float scale = 1.0f;        // usually 1/sqrt(head_dim)
  int64_t sliding_window = -1;  // > 0: a query at position p sees keys in (p - window, p] (HF); -1: off
  float logit_soft_cap = 0.0f;  // 0: off, else cap * tanh(s / cap)
  // f8e4m3 caches: a cached key/value reads as e4m3 * k_scale / v_scale (KVPool's per-layer
  // scales); other caches need 1.
  float k_scale = 1.0f;
  float v_scale = 1.0f;
};

// Causal attention with GQA over a paged KV cache, for a batch of requests in one call (extend
// and decode alike). Request r owns query rows [qo_indptr[r], qo_indptr[r+1]) and a KV sequence of
// seq_lens[r] tokens stored in pages kv_indices[kv_indptr[r] .. kv_indptr[r+1]) of `page_size`
// slots each (slot = page * page_size + offset). The queries are the LAST (qo_len) tokens of the
// sequence: query j sits at position seq_len - qo_len + j and sees keys at positions <= its own.
//   q: [num_tokens, num_qo_heads, head_dim]; k_cache: [num_slots, num_kv_heads, head_dim];
//   v_cache: [num_slots, num_kv_heads, v_head_dim] (v_head_dim = head_dim, or a size of its own);
//   qo_indptr, kv_indptr: i32 [bs + 1]; kv_indices: i32 [nnz_pages]; seq_lens: i32 [bs];
//   out: [num_tokens, num_qo_heads, v_head_dim]. num_qo_heads must be a multiple of num_kv_heads
//   (qo head h reads kv head h / (num_qo_heads / num_kv_heads)). On CUDA head_dim and v_head_dim
//   must be multiples of 16 from 16 to 256.
// q and out are f32; the caches f32/bf16/f16/f8e4m3 (same dtype; f8e4m3 values are scaled by
// params.k_scale / v_scale on load). Scores, softmax (max-subtracted) and
// the weighted sum are in f32; s = scale * q.k, then the soft-cap. Each output row depends only on
// its own request, so a batched call gives the same bits as one call per request. Index data are
// validated (qo_len <= seq_len, enough pages, pages inside the pool) with errors naming the request.
void paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& qo_indptr,
                     const Tensor& kv_indptr, const Tensor& kv_indices, const Tensor& seq_lens,
                     int64_t page_size, const AttentionParams& params, const Tensor& out);

// What the caller already knows about a paged-attention batch on the host (the ModelRunner's *_cpu
// vectors). With it the CUDA path copies nothing to the host and never synchronises, so the call
// can be captured in a CUDA graph; the device index arrays are then trusted, not re-validated (the
// caller built them from validated host data). The CPU path ignores the plan and validates.
struct PagedAttentionPlan {
  int64_t max_qo_len = 0;   // longest query run of the batch
  int64_t max_seq_len = 0;  // longest KV sequence (an upper bound for decode with num_kv_splits > 0)
  bool all_decode = false;  // every request has exactly one query token
  int num_kv_splits = 0;    // decode: > 0 fixes the split count (graph-safe); 0 picks by max_seq_len
};
void paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& qo_indptr,
                     const Tensor& kv_indptr, const Tensor& kv_indices, const Tensor& seq_lens,
                     int64_t page_size, const AttentionParams& params, const Tensor& out,
                     const PagedAttentionPlan& plan);

// Cascade attention, first part: paged_attention where request r sees only keys at positions in
// [kv_begin[r], kv_end[r]) (besides the causal and sliding-window rules), also writing each row's
// softmax log-sum-exp lse = max + log(sum exp(s - max)) (natural log). A row that sees no key gets
// zeros and lse = -inf. Always runs the prefill kernels on CUDA. `plan` as above (null: the index
// data, key ranges included, are validated on a host copy).
//   kv_begin, kv_end: i32 [bs], 0 <= kv_begin <= kv_end <= seq_len; lse: f32 [num_tokens,
//   num_qo_heads] contiguous; the rest as in paged_attention.
void paged_attention_partial(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& qo_indptr,
                             const Tensor& kv_indptr, const Tensor& kv_indices, const Tensor& seq_lens,
                             const Tensor& kv_begin, const Tensor& kv_end, int64_t page_size,
                             const AttentionParams& params, const Tensor& out, const Tensor& lse,
                             const PagedAttentionPlan* plan = nullptr);

// Cascade attention, second part: merges K results over disjoint key sets of the same rows.
//   m = max_k lse_k, w_k = exp(lse_k - m): out = sum_k w_k o_k / sum_k w_k, lse_out =
//   m + log(sum_k w_k); all -inf: zeros and -inf.
//   parts: f32 [K, n, heads, head_dim]; lse: f32 [K, n, heads]; out: f32 [n, heads, head_dim];
//   lse_out: f32 [n, heads] (optional: undefined is not written); all contiguous on one device;
//   out and lse_out must not overlap the inputs.
void merge_attention_states(const Tensor& parts, const Tensor& lse, const Tensor& out,
                            const Tensor& lse_out = Tensor());

// Row-wise softmax / log-softmax in place (max-subtracted).   x: f32 [n, v].
void softmax(const Tensor& x);
void log_softmax(const Tensor& x);
// Row-wise argmax (first index of the maximum; NaNs are skipped).  x: f32 [n, v]; out: i32 [n].
void argmax(const Tensor& x, const Tensor& out);

// Per-row sampling parameters (the sampler batches them).
struct SamplingRow {
  float temperature = 1.0f;  // <= 0 (or < 1e-5): greedy
  int32_t top_k = -1;        // <= 0: off
  float top_p = 1.0f;        // 1: off
  float min_p = 0.0f;        // 0: off
  uint64_t seed = 0;         // with `step`, fixes the random draw: same seed+step => same token
  uint64_t step = 0;         // index of the token being sampled within its request
};
// Samples one token per row from logits (f32 [n, v], not modified). Order: temperature scaling,
// softmax, top-k, top-p (smallest set, in descending-probability order with ties to the lower id,
// whose cumulative mass within the top-k set reaches top_p), min-p (p >= min_p * max probability),
// renormalise, then one uniform draw from a counter-based RNG keyed by (seed, step) only, so the
// token does not depend on the batch. Greedy rows (temperature < 1e-5 or top_k == 1) take argmax.
// top_p must be in (0, 1], min_p in [0, 1], temperature finite.
//   out: i32 [n].
void sample(const Tensor& logits, const std::vector<SamplingRow>& rows, const Tensor& out);

}  // namespace rlm::ops
