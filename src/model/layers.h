// Weight-loading helpers shared by the model files: fetch checked tensors by HF name, and fuse
// QKV / gate_up projections at load time by stacking rows; FP8 projections (f8e4m3 weights with
// their scales, from the checkpoint or quantized at load) and the per-layer FP8 KV-cache scales.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "cache/kv_pool.h"
#include "core/status.h"
#include "core/tensor.h"
#include "model/model_config.h"
#include "model/weight_source.h"
#include "ops/ops.h"

namespace rlm {

struct Linear {
  Tensor weight;               // [out_features, in_features] (f32/bf16/f16, block-quantized, or f8e4m3 with fp8 scales)
  std::optional<Tensor> bias;  // [out_features]
  ops::Fp8Scales fp8;          // f8e4m3 weights: per-channel or block scales (undefined otherwise)
  // A fused projection whose parts are stored in different dtypes (GGUF files mix quantization
  // types, e.g. a Q6_K v_proj beside Q4_K q/k) keeps its row blocks here, each in its own dtype,
  // stacked in order; `weight` is then undefined (never with fp8 scales).
  std::vector<Tensor> parts;   // [rows_i, in_features] each
  int64_t out_features() const;
};

// out = x @ l^T (+ bias): one ops::linear (through the FP8 path when the weight is f8e4m3), or one
// per part writing its columns of out.
//   x: f32 [m, in_features]; out: f32 [m, out_features].
void apply_linear(const Linear& l, const Tensor& x, const Tensor& out);

// The pre-norm residual stream's norm, then apply_linear(l, x, out): with `residual`,
// fused_add_rms_norm(x, *residual, norm_weight, eps), else rms_norm(x, norm_weight, eps, x). With
// an FP8 weight through ops::rms_norm_linear (on CUDA the activation quantization folds into the
// norm). x (and the residual) end as the norm leaves them either way.
//   x, residual: f32 [m, in_features]; out: f32 [m, out_features].
void apply_norm_linear(const Tensor& x, const Tensor* residual, const Tensor& norm_weight, float eps,
                       const Linear& l, const Tensor& out);

// out = l(silu_and_mul(gate_up)): with an FP8 weight through ops::silu_and_mul_linear (on CUDA the
// SiLU-and-mul folds into the activation quantization for prefill-sized batches and `act` stays
// unwritten), else silu_and_mul into act and apply_linear.
//   gate_up: f32 [m, 2 * in_features]; act: f32 [m, in_features]; out: f32 [m, out_features].
void apply_silu_and_mul_linear(const Linear& l, const Tensor& gate_up, const Tensor& act, const Tensor& out);

// ops::fused_linear(x, l.weight, l.bias, out, f) for a Linear of one tensor (no parts, no FP8
// scales); false, having done nothing, for the others or where fused_linear has no kernel.
bool try_fused_linear(const Linear& l, const Tensor& x, const Tensor& out, const ops::LinearFusion& f);

// out = l(rms_norm(input) * norm_weight) with input (the residual stream) unchanged: one kernel
// where try_fused_linear has one, else ops::rms_norm(input -> scratch), then apply_linear(l,
// scratch, out).   input, scratch: f32 [m, in_features]; out: f32 [m, out_features].
void apply_rms_norm_linear(const Tensor& input, const Tensor& norm_weight, float eps, const Tensor& scratch,
                           const Linear& l, const Tensor& out);

// act = silu_and_mul(l(rms_norm(input) * norm_weight)), input unchanged: one kernel where
// try_fused_linear has one, else apply_rms_norm_linear into gate_up, then ops::silu_and_mul.
//   input, scratch: f32 [m, in]; gate_up: f32 [m, 2 * inter]; act: f32 [m, inter].
void apply_rms_norm_linear_silu(const Tensor& input, const Tensor& norm_weight, float eps,
                                const Tensor& scratch, const Linear& l, const Tensor& gate_up,
                                const Tensor& act);

// Moves a Linear's tensors (weight or parts, bias, scales) to `device` (contiguous).
void move_linear(Linear& l, Device device);

// Stacks tensors with equal trailing dims along dim 0 into one new tensor of their dtype.
Tensor concat_rows(const std::vector<Tensor>& parts);

// Loads `prefix + ".weight"` of shape [out, in] (and `prefix + ".bias"` [out] when with_bias).
// An f8e4m3 weight comes with its scales: `weight_scale_inv` (block scales, the Hugging Face
// "fp8" layout), or `weight_scale` (per tensor: [] or [1]; per channel: [out] or [out, 1];
// compressed-tensors / ModelOpt) and optionally a static `input_scale` ([] or [1]); per-tensor
// scales become per-channel ones (exactly). With ws.load_options.quantize_fp8 a float weight is
// quantized to f8e4m3 per output channel.
StatusOr<Linear> load_linear(WeightSource& ws, const std::string& prefix, int64_t out, int64_t in,
                             bool with_bias);
// Loads several projections sharing the input and stacks them: fused QKV or gate_up (adjacent
// parts of one dtype in one tensor; when the dtypes differ, Linear::parts). FP8 parts stack their
// scales too (block scales need each part but the last to be a whole number of blocks; static
// input scales take the largest of the parts', as vLLM does).
StatusOr<Linear> load_fused_linear(WeightSource& ws, const std::vector<std::string>& prefixes,
                                   const std::vector<int64_t>& outs, int64_t in, bool with_bias);
StatusOr<Tensor> load_tensor(WeightSource& ws, const std::string& name, const Shape& shape);

// Quantizes l's float (f32/bf16/f16) weight to f8e4m3 in place with one scale per output channel,
// max|w_j| / 448 (l.fp8.weight_scale [out_features]): what load_linear does under
// ws.load_options.quantize_fp8 (`--quantization fp8`). Other dtypes are an error naming `name`.
Status quantize_linear_fp8(Linear& l, const std::string& name);

// A zero-centred RMSNorm weight (Qwen3-Next, Gemma3: norm(x) * (1 + w)) as the f32 factor 1 + w,
// bit-identical to transformers' `1.0 + w.float()`.   name: [n].
StatusOr<Tensor> load_zero_centred_norm(WeightSource& ws, const std::string& name, int64_t n);

// The neox rotary cos/sin table of `rope` for heads of `head_dim` (rotary_dim = head_dim *
// partial_rotary_factor): f32 [max_positions, rotary_dim] (ops::make_rope_cos_sin_cache).
Tensor make_rope_cache(const RopeParameters& rope, int64_t head_dim, int64_t max_positions);

// t = t.contiguous().to(device) when t is defined.
void move_tensor(Tensor& t, Device device);

// The input norm of decoder layer `layer` in a pre-norm residual stream: layer 0 starts the
// residual (residual = x; x = norm(x)), later layers add x to it first (fused_add_rms_norm).
//   x, residual: f32 [num_tokens, hidden]; weight: [hidden].
void residual_input_norm(size_t layer, const Tensor& x, const Tensor& residual, const Tensor& weight, float eps);

// f32 logits [num_outputs, vocab_size] = hidden_states[indices] @ lm_head^T.
//   hidden_states: f32 [num_tokens, hidden]; indices: i32 [num_outputs]; lm_head: [vocab_size, hidden].
Tensor lm_head_logits(const Tensor& hidden_states, const Tensor& indices, const Tensor& lm_head, int64_t vocab_size);

// The LM head [vocab, hidden]: a stored `lm_head.weight`, even when tie_word_embeddings is set
// (transformers 5 loads the stored matrix then; the checkpoint says what was trained), else
// `embed` when tie_word_embeddings (also for sources that synthesize every name), else kNotFound.
// Under tensor parallelism a stored head is this rank's vocabulary shard (load_vocab_parallel) and
// `embed` must be the embedding's shard.
StatusOr<Tensor> load_lm_head(WeightSource& ws, const ModelConfig& config, const Tensor& embed);

// Dequantization scales of a layer's FP8 KV cache: `<attn_prefix>.k_scale` / `.v_scale`
// (compressed-tensors, transformers) or `<attn_prefix>.k_proj.k_scale` / `.v_proj.v_scale`
// (ModelOpt), scalars; 1.0 when absent or when ws.load_options.read_kv_scales is off (vLLM's
// default). A scale that is not positive and finite is an error.
StatusOr<KvScales> load_kv_scales(WeightSource& ws, const std::string& attn_prefix);

}  // namespace rlm
