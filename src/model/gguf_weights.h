// One GGUF file as a whole model: a ModelConfig synthesised from its metadata and a WeightSource
// that serves its tensors under Hugging Face names, kept in their stored (block-quantized) types
// or dequantized to f32.
//
// Supported general.architecture: "llama" (LlamaForCausalLM), "qwen2" (Qwen2ForCausalLM), "qwen3"
// (Qwen3ForCausalLM), "qwen3moe" (Qwen3MoeForCausalLM), "gemma3" (Gemma3ForCausalLM, read as
// llama.cpp runs it); metadata keys are read under that prefix ("llama.block_count", ...).
// Tensor names:
//   token_embd.weight            model.embed_tokens.weight
//   output_norm.weight           model.norm.weight
//   output.weight                lm_head.weight (absent: tied embeddings, has() is false)
//   blk.N.attn_norm.*            model.layers.N.input_layernorm.*
//   blk.N.ffn_norm.*             model.layers.N.post_attention_layernorm.*
//   blk.N.attn_{q,k,v,output}.*  model.layers.N.self_attn.{q,k,v,o}_proj.*
//   blk.N.ffn_{gate,up,down}.*   model.layers.N.mlp.{gate,up,down}_proj.*
//   blk.N.attn_{q,k}_norm.*      model.layers.N.self_attn.{q,k}_norm.* (qwen3, qwen3moe, gemma3)
//   blk.N.ffn_gate_inp.weight    model.layers.N.mlp.gate.weight (qwen3moe router)
//   blk.N.ffn_{gate,up,down}_exps.weight
//                                model.layers.N.mlp.experts.{gate,up,down}_proj (qwen3moe; stacked
//                                [experts, rows, cols]; block types kept as stored when weights
//                                are kept quantized, float types dequantized to f32)
//   gemma3: blk.N.post_attention_norm, blk.N.ffn_norm, blk.N.post_ffw_norm are the
//   post_attention_layernorm, pre_feedforward_layernorm, post_feedforward_layernorm; every gemma3
//   norm weight is served as stored - 1 (f32), undoing the converter's 1 + w.
// For "llama" only, llama.cpp's converter permutes the rows of q_proj/k_proj (weights and biases) within each
// head from HF's rotate-half order into interleaved pairs; they are un-permuted here, so the tensors match
// the Hugging Face checkpoint (and transformers' own GGUF loader).
#pragma once

#include <memory>

#include "core/status.h"
#include "formats/gguf.h"
#include "model/model_config.h"
#include "model/weight_source.h"

namespace rlm {

// Maps <arch>.* / tokenizer.ggml.* metadata onto a ModelConfig (dtype kF32, `raw` holds the
// equivalent HF config.json object). kUnimplemented for another general.architecture or an
// unsupported rope scaling; kInvalidArgument naming the key for a missing or invalid value.
StatusOr<ModelConfig> gguf_model_config(const GgufFile& file);

// How open_gguf_weights serves 2-D tensors (matrices).
enum class GgufWeights {
  kDequantized,  // every tensor dequantized at get() to `dtype`
  kQuantized,    // matrices as stored (F16, BF16 and the block types: views of the mapping, or a
                 // row-permuted copy for llama q/k); F32 matrices and every 1-D tensor in f32
};

// The tensors of `file` under HF names (see above). kDequantized: CPU tensors of `dtype` (kF32,
// kBF16 or kF16; via f32, rounding to nearest even). kQuantized: `dtype` must be kF32.
StatusOr<std::unique_ptr<WeightSource>> open_gguf_weights(std::shared_ptr<GgufFile> file,
                                                          DType dtype = DType::kF32,
                                                          GgufWeights mode = GgufWeights::kDequantized);

// Undoes llama.cpp's q/k permutation on rows: `w` is [num_heads * head_dim] or
// [num_heads * head_dim, in] (any dtype, block-quantized included: rows move whole);
// row h*head_dim + 2*i + p moves to h*head_dim + p*head_dim/2 + i.
Tensor unpermute_llama_qk(const Tensor& w, int64_t num_heads);

}  // namespace rlm
