#!/usr/bin/env python3
"""Generates the model goldens under tests/golden/ (the only way they are made).

For every tiny random model in MODELS this script
  1. builds it with transformers' own config/model classes (eager attention, float32),
  2. re-initialises all weights with a larger scale than the default (std 0.02 gives nearly
     flat logits and near-ties in greedy decoding),
  3. saves it with save_pretrained in its disk dtype (float32/bfloat16/float16), sharded or not,
  4. RELOADS the saved directory with dtype=torch.float32, so the reference sees exactly the
     weights on disk (after rounding), and
  5. for each prompt records the full-prompt logits (one forward) and 32 greedy tokens (a full
     forward per step, no KV cache, no EOS stop), with the top-1/top-2 logit gap of every step.
If any greedy step has a gap below MIN_GAP, the model's seed is bumped and the model rebuilt.

The output is deterministic: running the script twice gives byte-identical files. The file
format is documented in tests/golden/README.md.

Usage:
  scripts/setup.sh --golden && .venv/bin/python tools/make_golden.py [--out DIR] [--only NAME ...]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from dataclasses import dataclass, field

import numpy as np
import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers import (Gemma3Config, Gemma3ForCausalLM, Gemma3ForConditionalGeneration,
                          Gemma3TextConfig, LlamaConfig, LlamaForCausalLM,
                          MistralConfig, MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM,
                          Qwen3Config, Qwen3ForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM,
                          Qwen3NextConfig, Qwen3NextForCausalLM)

VOCAB = 512
MAX_POS = 256
NUM_GREEDY = 32
MIN_GAP = 1e-3
PROMPT_LENGTHS = [1, 5, 17, 40]
MAX_SEED_TRIES = 50

# Weight scales for the re-initialisation (see init_weights).
EMBED_STD = 0.3
LINEAR_STD = 0.15
NORM_NOISE_STD = 0.1
BIAS_STD = 0.1
# Qwen3-Next extras: the depthwise conv taps, log(A) and dt_bias of the Gated DeltaNet gates
# (g = -exp(A_log) * softplus(a + dt_bias) then spans long and short memories).
CONV_STD = 0.3
A_LOG_MEAN, A_LOG_STD = -1.0, 0.5
DT_BIAS_STD = 0.5

ARCHS = {
    "LlamaForCausalLM": (LlamaConfig, LlamaForCausalLM),
    "Qwen2ForCausalLM": (Qwen2Config, Qwen2ForCausalLM),
    "Qwen3ForCausalLM": (Qwen3Config, Qwen3ForCausalLM),
    "Qwen3NextForCausalLM": (Qwen3NextConfig, Qwen3NextForCausalLM),
    "Qwen3MoeForCausalLM": (Qwen3MoeConfig, Qwen3MoeForCausalLM),
    "Gemma3ForCausalLM": (Gemma3TextConfig, Gemma3ForCausalLM),
    # Text and vision model: spec.config holds text_config (vocab/max positions added to it) and
    # vision_config; the goldens run it on text alone.
    "Gemma3ForConditionalGeneration": (Gemma3Config, Gemma3ForConditionalGeneration),
    "MistralForCausalLM": (MistralConfig, MistralForCausalLM),
}

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

LLAMA3_ROPE = {
    "rope_type": "llama3",
    "rope_theta": 500000.0,
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 32,
}


@dataclass
class ModelSpec:
    name: str
    architecture: str
    seed: int
    config: dict  # kwargs for the config class (vocab/max positions added automatically)
    disk_dtype: str = "float32"
    max_shard_size: str | None = None  # set: save sharded with this shard size
    prompt_lengths: list = field(default_factory=lambda: list(PROMPT_LENGTHS))
    covers: str = ""  # one line for the README
    # Config-rule goldens: keys removed from the saved config.json (a transformers 4.x-style file
    # that makes transformers derive them again), and an lm_head.weight N(0, LINEAR_STD) stored
    # beside tie_word_embeddings=true (drawn from the seed after the weights).
    drop_config_keys: list = field(default_factory=list)
    stored_lm_head: bool = False


MODELS = [
    ModelSpec("llama_gqa1_hd64", "LlamaForCausalLM", 1001,
              dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                   num_attention_heads=2, num_key_value_heads=2, head_dim=64,
                   tie_word_embeddings=False, rms_norm_eps=1e-6,
                   rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
              covers="MHA (GQA 1), head_dim 64 = hidden/heads, untied, default RoPE"),
    ModelSpec("llama_gqa2_hd64_tied", "LlamaForCausalLM", 1002,
              dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                   tie_word_embeddings=True, rms_norm_eps=1e-6,
                   rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
              covers="GQA 2, heads*head_dim (256) != hidden (128), tied embeddings"),
    ModelSpec("llama_gqa4_hd128_llama3rope", "LlamaForCausalLM", 1003,
              dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=1, head_dim=128,
                   tie_word_embeddings=False, rms_norm_eps=1e-5,
                   rope_parameters=dict(LLAMA3_ROPE)),
              prompt_lengths=PROMPT_LENGTHS + [100],
              covers="GQA 4, head_dim 128, llama3 RoPE scaling (factor 8, low 1, high 4, "
                     "original_max_position_embeddings 32, theta 5e5), prompt up to 100"),
    ModelSpec("llama_gqa2_hd64_bf16_sharded", "LlamaForCausalLM", 1004,
              dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                   tie_word_embeddings=False, rms_norm_eps=1e-5,
                   rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
              disk_dtype="bfloat16", max_shard_size="300KB",
              covers="bf16 on disk, sharded safetensors (4 shards) + index, rms_norm_eps 1e-5"),
    ModelSpec("qwen2_gqa2_hd64_tied", "Qwen2ForCausalLM", 2001,
              dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                   num_attention_heads=2, num_key_value_heads=1,
                   tie_word_embeddings=True, rms_norm_eps=1e-6,
                   rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
              covers="Qwen2 q/k/v bias, GQA 2, head_dim 64 derived (no head_dim key), tied"),
    ModelSpec("qwen2_gqa4_hd128", "Qwen2ForCausalLM", 2002,
              dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=1, head_dim=128,
                   tie_word_embeddings=False, rms_norm_eps=1e-6,
                   rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
              covers="Qwen2 q/k/v bias, GQA 4, explicit head_dim 128, untied"),
    ModelSpec("qwen3_gqa2_hd128", "Qwen3ForCausalLM", 3001,
              dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                   num_attention_heads=2, num_key_value_heads=1, head_dim=128,
                   tie_word_embeddings=False, rms_norm_eps=1e-6,
                   rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
              covers="Qwen3 q/k RMSNorm, GQA 2, head_dim 128, untied"),
    ModelSpec("qwen3_gqa1_hd64_f16_tied", "Qwen3ForCausalLM", 3002,
              dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                   num_attention_heads=2, num_key_value_heads=2, head_dim=64,
                   tie_word_embeddings=True, rms_norm_eps=1e-6,
                   rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
              disk_dtype="float16",
              covers="Qwen3 q/k RMSNorm, MHA (GQA 1), head_dim 64, f16 on disk, tied"),
    ModelSpec("qwen3next_gqa2_int2_moe4top2", "Qwen3NextForCausalLM", 4001,
              dict(hidden_size=64, intermediate_size=96, num_hidden_layers=4,
                   num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                   linear_num_key_heads=2, linear_num_value_heads=2,
                   linear_key_head_dim=16, linear_value_head_dim=16, linear_conv_kernel_dim=4,
                   full_attention_interval=2, num_experts=4, num_experts_per_tok=2,
                   norm_topk_prob=True, moe_intermediate_size=32,
                   shared_expert_intermediate_size=48, tie_word_embeddings=False,
                   rms_norm_eps=1e-6,
                   rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                    "partial_rotary_factor": 0.25}),
              prompt_lengths=PROMPT_LENGTHS + [100],
              covers="Qwen3-Next: GDN + gated attention every 2nd layer (full_attention_interval "
                     "2), GQA 2, partial rotary 0.25, GDN 2 key = 2 value heads, MoE 4 experts "
                     "top-2 renormalised + shared expert, prompt up to 100 (2 GDN chunks)"),
    ModelSpec("qwen3next_vgroup2_int4_moe8top3", "Qwen3NextForCausalLM", 4002,
              dict(hidden_size=64, intermediate_size=80, num_hidden_layers=4,
                   num_attention_heads=4, num_key_value_heads=1, head_dim=64,
                   linear_num_key_heads=2, linear_num_value_heads=4,
                   linear_key_head_dim=16, linear_value_head_dim=8, linear_conv_kernel_dim=4,
                   full_attention_interval=4, num_experts=8, num_experts_per_tok=3,
                   norm_topk_prob=False, moe_intermediate_size=24,
                   shared_expert_intermediate_size=40, mlp_only_layers=[1],
                   tie_word_embeddings=False, rms_norm_eps=1e-6,
                   rope_parameters={"rope_type": "default", "rope_theta": 1000000.0,
                                    "partial_rotary_factor": 0.5}),
              prompt_lengths=PROMPT_LENGTHS + [130],
              covers="Qwen3-Next: 3 GDN layers then full attention (interval 4), GQA 4, partial "
                     "rotary 0.5, grouped value heads (4 value / 2 key heads, dk 16 != dv 8), MoE "
                     "8 experts top-3 without renormalisation, layer 1 a dense MLP "
                     "(mlp_only_layers), prompt up to 130 (3 GDN chunks)"),
    ModelSpec("qwen3next_layertypes_sparse2_tied", "Qwen3NextForCausalLM", 4003,
              dict(hidden_size=48, intermediate_size=64, num_hidden_layers=5,
                   num_attention_heads=2, num_key_value_heads=2, head_dim=64,
                   linear_num_key_heads=1, linear_num_value_heads=3,
                   linear_key_head_dim=12, linear_value_head_dim=16, linear_conv_kernel_dim=3,
                   layer_types=["full_attention", "linear_attention", "linear_attention",
                                "full_attention", "linear_attention"],
                   decoder_sparse_step=2, num_experts=4, num_experts_per_tok=1,
                   norm_topk_prob=True, moe_intermediate_size=16,
                   shared_expert_intermediate_size=32, attention_bias=True,
                   tie_word_embeddings=True, rms_norm_eps=1e-5,
                   rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                    "partial_rotary_factor": 0.5}),
              prompt_lengths=PROMPT_LENGTHS + [100],
              covers="Qwen3-Next: explicit layer_types starting with full attention, MHA with "
                     "q/k/v/o bias, 3 value heads per key head, conv kernel 3, MoE only on odd "
                     "layers (decoder_sparse_step 2) with top-1, tied embeddings, eps 1e-5"),
    # Head sizes other than 64 / 128 / 256 (the GPU's padded attention kernels).
    ModelSpec("llama_gqa2_hd32", "LlamaForCausalLM", 1005,
              dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                   tie_word_embeddings=False, rms_norm_eps=1e-6,
                   rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
              covers="head_dim 32 = hidden/heads, GQA 2, untied"),
    ModelSpec("qwen2_gqa3_hd48", "Qwen2ForCausalLM", 2003,
              dict(hidden_size=96, intermediate_size=192, num_hidden_layers=2,
                   num_attention_heads=6, num_key_value_heads=2, head_dim=48,
                   tie_word_embeddings=False, rms_norm_eps=1e-6,
                   rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
              covers="Qwen2 q/k/v bias, head_dim 48, GQA 3 (heads-per-block 1 on the GPU)"),
    ModelSpec("qwen3_gqa2_hd80", "Qwen3ForCausalLM", 3003,
              dict(hidden_size=160, intermediate_size=256, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, head_dim=80,
                   tie_word_embeddings=False, rms_norm_eps=1e-6,
                   rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
              covers="Qwen3 q/k RMSNorm over head_dim 80 (Phi-2's size), GQA 2"),
    ModelSpec("llama_gqa1_hd96_bf16", "LlamaForCausalLM", 1006,
              dict(hidden_size=192, intermediate_size=256, num_hidden_layers=2,
                   num_attention_heads=2, num_key_value_heads=2, head_dim=96,
                   tie_word_embeddings=False, rms_norm_eps=1e-5,
                   rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
              disk_dtype="bfloat16",
              covers="MHA with head_dim 96 (Phi-3/Phi-4-mini's size), bf16 on disk"),
    ModelSpec("qwen3next_gqa2_hd48_int2", "Qwen3NextForCausalLM", 4004,
              dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, head_dim=48,
                   linear_num_key_heads=2, linear_num_value_heads=2,
                   linear_key_head_dim=16, linear_value_head_dim=16, linear_conv_kernel_dim=4,
                   full_attention_interval=2, num_experts=4, num_experts_per_tok=2,
                   norm_topk_prob=True, moe_intermediate_size=32,
                   shared_expert_intermediate_size=48, tie_word_embeddings=False,
                   rms_norm_eps=1e-6,
                   rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                    "partial_rotary_factor": 0.5}),
              prompt_lengths=PROMPT_LENGTHS + [100],
              covers="Qwen3-Next gated attention with head_dim 48 and partial rotary 0.5 "
                     "(rotary_dim 24), GDN then full attention, GQA 2, prompt up to 100 "
                     "(2 GDN chunks)"),
    # Qwen3-MoE, Gemma3, Mistral and the config rules (Llama ignores sliding_window; 4.x-style Qwen2
    # sliding layers; a stored lm_head beside tie_word_embeddings).
    ModelSpec("qwen3moe_gqa2_moe8top2_dense1", "Qwen3MoeForCausalLM", 5001,
              dict(hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                   num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                   num_experts=8, num_experts_per_tok=2, norm_topk_prob=True,
                   moe_intermediate_size=32, mlp_only_layers=[1], tie_word_embeddings=False,
                   rms_norm_eps=1e-6,
                   rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
              prompt_lengths=PROMPT_LENGTHS + [100],
              covers="Qwen3-MoE: q/k RMSNorm, GQA 2, MoE 8 experts top-2 renormalised, layer 1 a "
                     "dense MLP (mlp_only_layers), prompt up to 100"),
    ModelSpec("qwen3moe_sparse2_top3_bias_sw16_tied", "Qwen3MoeForCausalLM", 5002,
              dict(hidden_size=48, intermediate_size=64, num_hidden_layers=4,
                   num_attention_heads=2, num_key_value_heads=1, head_dim=64,
                   num_experts=4, num_experts_per_tok=3, norm_topk_prob=False,
                   moe_intermediate_size=24, decoder_sparse_step=2, attention_bias=True,
                   use_sliding_window=True, sliding_window=16, tie_word_embeddings=True,
                   rms_norm_eps=1e-5,
                   rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
              covers="Qwen3-MoE: MoE on odd layers (decoder_sparse_step 2), top-3 of 4 not "
                     "renormalised, q/k/v/o bias, a 16-token sliding window on every layer "
                     "(use_sliding_window), tied, eps 1e-5"),
    ModelSpec("gemma3_gqa2_hd64_sw8_softcap", "Gemma3ForCausalLM", 6001,
              dict(hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                   num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                   layer_types=["sliding_attention", "sliding_attention", "full_attention",
                                "sliding_attention"],
                   sliding_window=8, query_pre_attn_scalar=48, final_logit_softcapping=5.0,
                   tie_word_embeddings=True, rms_norm_eps=1e-6,
                   rope_parameters={"sliding_attention": {"rope_type": "default",
                                                          "rope_theta": 10000.0},
                                    "full_attention": {"rope_type": "linear", "factor": 8.0,
                                                       "rope_theta": 1000000.0}}),
              prompt_lengths=PROMPT_LENGTHS + [100],
              covers="Gemma3 text: embedding * sqrt(hidden), (1 + w) RMSNorms before/after "
                     "attention and MLP, q/k norms, GeLU-tanh MLP, query_pre_attn_scalar 48, "
                     "8-token sliding window on layers 0, 1, 3 (local RoPE 1e4), layer 2 global "
                     "(RoPE 1e6, linear factor 8), final logit soft-cap 5, tied, prompt up to 100"),
    ModelSpec("gemma3_pattern3_bf16", "Gemma3ForCausalLM", 6002,
              dict(hidden_size=48, intermediate_size=96, num_hidden_layers=3,
                   num_attention_heads=2, num_key_value_heads=1, head_dim=64,
                   sliding_window=16, sliding_window_pattern=3, tie_word_embeddings=False,
                   rms_norm_eps=1e-6),
              disk_dtype="bfloat16", drop_config_keys=["layer_types"],
              covers="Gemma3 text, transformers 4.x style: no layer_types (sliding_window_pattern "
                     "3: layers 0, 1 local, 2 global), default RoPE dicts, query_pre_attn_scalar "
                     "256, hidden 48 (embedding scale sqrt(48)), bf16 on disk, untied"),
    ModelSpec("gemma3cg_gqa2_hd32_sw4", "Gemma3ForConditionalGeneration", 6003,
              dict(text_config=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                                    num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                                    layer_types=["sliding_attention", "sliding_attention",
                                                 "full_attention"],
                                    sliding_window=4, rms_norm_eps=1e-6),
                   vision_config=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                      num_attention_heads=2, image_size=28, patch_size=14),
                   mm_tokens_per_image=4, tie_word_embeddings=True),
              covers="Gemma3ForConditionalGeneration (Gemma 3 4B-27B checkpoints) on text: the "
                     "text model under model.language_model.*, its config in text_config, a tiny "
                     "SigLIP vision tower and projector in the checkpoint (not loaded), 4-token "
                     "sliding window on layers 0, 1, tied"),
    ModelSpec("mistral_gqa2_hd64_sw8", "MistralForCausalLM", 7001,
              dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                   sliding_window=8, tie_word_embeddings=False, rms_norm_eps=1e-5,
                   rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
              covers="Mistral: the Llama decoder with an 8-token sliding window on every layer"),
    ModelSpec("llama_sliding_window_key_ignored", "LlamaForCausalLM", 8001,
              dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                   sliding_window=8, tie_word_embeddings=False, rms_norm_eps=1e-6,
                   rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
              covers="config rule: a Llama config.json with \"sliding_window\": 8 attends to the "
                     "whole prompt (transformers' Llama ignores the key)"),
    ModelSpec("qwen2_v4_sliding_max_window_layers1", "Qwen2ForCausalLM", 8002,
              dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                   num_attention_heads=2, num_key_value_heads=1, head_dim=64,
                   use_sliding_window=True, sliding_window=8, max_window_layers=1,
                   tie_word_embeddings=False, rms_norm_eps=1e-6,
                   rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
              drop_config_keys=["layer_types"],
              covers="config rule: a transformers 4.x-style Qwen2 config (use_sliding_window, "
                     "max_window_layers 1, no layer_types) slides layer 1 only"),
    ModelSpec("llama_tied_with_stored_lm_head", "LlamaForCausalLM", 8003,
              dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                   tie_word_embeddings=True, rms_norm_eps=1e-6,
                   rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
              stored_lm_head=True,
              covers="config rule: tie_word_embeddings true with a different stored "
                     "lm_head.weight: transformers 5 uses the stored matrix"),
]


def setup_determinism() -> None:
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)


def build_model(spec: ModelSpec, seed: int) -> torch.nn.Module:
    config_cls, model_cls = ARCHS[spec.architecture]
    if "text_config" in spec.config:
        kwargs = dict(spec.config)
        kwargs["text_config"] = dict(vocab_size=VOCAB, max_position_embeddings=MAX_POS,
                                     **spec.config["text_config"])
        config = config_cls(**kwargs)
    else:
        config = config_cls(vocab_size=VOCAB, max_position_embeddings=MAX_POS, **spec.config)
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = model_cls(config).to(torch.float32)
    model.eval()
    init_weights(model, seed)
    if spec.stored_lm_head:
        # A head that differs from the embedding, saved beside tie_word_embeddings=true.
        gen = torch.Generator().manual_seed(seed + 1)
        shape = model.model.embed_tokens.weight.shape
        model.golden_stored_lm_head = torch.randn(shape, generator=gen) * LINEAR_STD
    return model


def init_weights(model: torch.nn.Module, seed: int) -> None:
    """Re-initialises every parameter with a scale that gives well-separated logits.

    Embeddings: N(0, EMBED_STD); linear weights (and stacked MoE experts): N(0, LINEAR_STD);
    norm weights (RMSNorm, incl. Qwen3 q/k norm and Qwen3-Next's gated norm): 1 + N(0,
    NORM_NOISE_STD), except Qwen3-Next's zero-centred RMSNorms ((1 + w) * norm): N(0,
    NORM_NOISE_STD); biases: N(0, BIAS_STD); Qwen3-Next GDN conv taps N(0, CONV_STD), A_log
    N(A_LOG_MEAN, A_LOG_STD), dt_bias N(0, DT_BIAS_STD). Parameters are
    visited in sorted name order with one seeded generator, so the result depends only on the
    seed and the architecture. Tied weights appear once in named_parameters(). A vision tower
    and its projector (Gemma3ForConditionalGeneration) keep transformers' seeded initialisation:
    text-only prompts never reach them.
    """
    gen = torch.Generator().manual_seed(seed)
    # Qwen3-Next's RMSNorms scale by (1 + weight): their weights get the noise alone.
    zero_centred = {f"{mname}.weight" for mname, m in model.named_modules()
                    if type(m).__name__ in ("Qwen3NextRMSNorm", "Gemma3RMSNorm")}
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            if "vision_tower" in name or "multi_modal_projector" in name:
                continue
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if name in zero_centred:
                p.copy_(noise * NORM_NOISE_STD)
            elif name.endswith(".A_log"):
                p.copy_(A_LOG_MEAN + noise * A_LOG_STD)
            elif name.endswith(".dt_bias"):
                p.copy_(noise * DT_BIAS_STD)
            elif name.endswith(".conv1d.weight"):
                p.copy_(noise * CONV_STD)
            elif name.endswith((".experts.gate_up_proj", ".experts.down_proj")):
                p.copy_(noise * LINEAR_STD)
            elif name.endswith(".bias"):
                p.copy_(noise * BIAS_STD)
            elif "norm" in name:
                p.copy_(1.0 + noise * NORM_NOISE_STD)
            elif "embed_tokens" in name:
                p.copy_(noise * EMBED_STD)
            elif p.dim() == 2:
                p.copy_(noise * LINEAR_STD)
            else:
                raise RuntimeError(f"init_weights: unexpected parameter {name} {tuple(p.shape)}")


def load_reference(model_dir: str) -> torch.nn.Module:
    """Loads a saved golden directory as the float32 eager reference."""
    with open(os.path.join(model_dir, "config.json")) as f:
        arch = json.load(f)["architectures"][0]
    # AutoModelForCausalLM would build Gemma3ForCausalLM from a Gemma3ForConditionalGeneration
    # checkpoint; the class the checkpoint names is the reference.
    cls = ARCHS[arch][1] if arch == "Gemma3ForConditionalGeneration" else transformers.AutoModelForCausalLM
    model = cls.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    return model


def forward_logits(model: torch.nn.Module, ids: list[int]) -> np.ndarray:
    """One full forward; returns float32 logits [len(ids), vocab]."""
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids], dtype=torch.long), use_cache=False)
    return out.logits[0].to(torch.float32).numpy().copy()


def top_gap(row: np.ndarray) -> tuple[int, float]:
    """Returns (argmax, top1 - top2) of one logits row."""
    order = np.argsort(-row, kind="stable")
    return int(order[0]), float(row[order[0]] - row[order[1]])


def greedy(model: torch.nn.Module, prompt: list[int], prompt_logits: np.ndarray,
           n: int = NUM_GREEDY) -> tuple[list[int], list[float]]:
    """n greedy tokens: a full forward over prompt+generated per step, never stopping at EOS.

    The first token comes from the last row of the prompt logits. Returns (ids, gaps).
    """
    ids = list(prompt)
    out, gaps = [], []
    row = prompt_logits[-1]
    for step in range(n):
        tok, gap = top_gap(row)
        out.append(tok)
        gaps.append(gap)
        ids.append(tok)
        if step + 1 < n:
            row = forward_logits(model, ids)[-1]
    return out, gaps


def make_prompts(spec: ModelSpec, seed: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed * 7919 + 17)
    return [torch.randint(0, VOCAB, (n,), generator=gen).tolist() for n in spec.prompt_lengths]


def save_model(model: torch.nn.Module, spec: ModelSpec, out_dir: str) -> None:
    model = model.to(DTYPES[spec.disk_dtype])
    kwargs = {}
    if spec.max_shard_size is not None:
        kwargs["max_shard_size"] = spec.max_shard_size
    model.save_pretrained(out_dir, **kwargs)
    sharded = os.path.exists(os.path.join(out_dir, "model.safetensors.index.json"))
    if sharded != (spec.max_shard_size is not None):
        raise RuntimeError(f"{spec.name}: expected sharded={spec.max_shard_size is not None}")
    if spec.drop_config_keys:
        path = os.path.join(out_dir, "config.json")
        with open(path) as f:
            cfg = json.load(f)
        for key in spec.drop_config_keys:
            del cfg[key]
        with open(path, "w") as f:
            json.dump(cfg, f, indent=2, sort_keys=True)
            f.write("\n")
    if spec.stored_lm_head:
        if sharded:
            raise RuntimeError(f"{spec.name}: stored_lm_head needs an unsharded checkpoint")
        path = os.path.join(out_dir, "model.safetensors")
        tensors = load_file(path)
        assert "lm_head.weight" not in tensors
        tensors["lm_head.weight"] = model.golden_stored_lm_head.to(DTYPES[spec.disk_dtype])
        save_file(tensors, path, metadata={"format": "pt"})


def rel_l2_16bit_operands(model: torch.nn.Module, ids: list[int], ref: np.ndarray, dtype: torch.dtype) -> float:
    """Relative L2 distance from `ref` of a forward that rounds what a 16-bit GPU path rounds:
    every linear's input (cuBLAS and the GEMVs take x in the weight dtype; products and sums stay
    f32) and the k/v projections' outputs (the KV cache is in the model dtype). It measures how far
    16-bit operands alone move these random models' logits, the floor under the GPU test's bound."""
    def round_input(_mod, args):
        return (args[0].to(dtype).to(torch.float32),) + tuple(args[1:])

    def round_output(_mod, _args, out):
        return out.to(dtype).to(torch.float32)

    hooks = []
    try:
        for name, mod in model.named_modules():
            if isinstance(mod, torch.nn.Linear):
                hooks.append(mod.register_forward_pre_hook(round_input))
                if name.endswith(("k_proj", "v_proj")):
                    hooks.append(mod.register_forward_hook(round_output))
        got = forward_logits(model, ids)
    finally:
        for h in hooks:
            h.remove()
    return float(np.sqrt(((got.astype(np.float64) - ref) ** 2).sum() / (ref.astype(np.float64) ** 2).sum()))


def generate_one(spec: ModelSpec, root: str) -> dict:
    out_dir = os.path.join(root, spec.name)
    for attempt in range(MAX_SEED_TRIES):
        seed = spec.seed + 100000 * attempt
        if os.path.exists(out_dir):
            shutil.rmtree(out_dir)
        os.makedirs(out_dir)
        save_model(build_model(spec, seed), spec, out_dir)
        ref = load_reference(out_dir)
        cases, logits = [], []
        ok = True
        for i, prompt in enumerate(make_prompts(spec, seed)):
            lg = forward_logits(ref, prompt)
            ids, gaps = greedy(ref, prompt, lg)
            if min(gaps) < MIN_GAP:
                print(f"  {spec.name}: seed {seed} case {i} min gap {min(gaps):.2e} < {MIN_GAP}"
                      f"; retrying with another seed", file=sys.stderr)
                ok = False
                break
            case = {
                "prompt_ids": prompt,
                "logits_file": f"logits_{i}.f32",
                "logits_shape": [int(lg.shape[0]), int(lg.shape[1])],
                "greedy_ids": ids,
                "greedy_min_gap": min(gaps),
                "greedy_gaps": gaps,
            }
            if spec.disk_dtype != "float32":
                case["rel_l2_16bit_operands"] = rel_l2_16bit_operands(ref, prompt, lg, DTYPES[spec.disk_dtype])
            cases.append(case)
            logits.append(lg)
        if not ok:
            continue
        for case, lg in zip(cases, logits):
            lg.astype("<f4").tofile(os.path.join(out_dir, case["logits_file"]))
        golden = {
            "name": spec.name,
            "architecture": spec.architecture,
            "disk_dtype": spec.disk_dtype,
            "sharded": spec.max_shard_size is not None,
            "transformers_version": transformers.__version__,
            "torch_version": torch.__version__,
            "seed": seed,
            "covers": spec.covers,
            "cases": cases,
        }
        if spec.stored_lm_head:
            golden["stored_lm_head"] = True
        with open(os.path.join(out_dir, "golden.json"), "w") as f:
            json.dump(golden, f, indent=1)
            f.write("\n")
        return golden
    raise RuntimeError(f"{spec.name}: no seed in {MAX_SEED_TRIES} tries gave gaps >= {MIN_GAP}")


def main() -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "golden"),
                    help="output root (default: tests/golden)")
    ap.add_argument("--only", nargs="*", default=None, help="generate only these model names")
    args = ap.parse_args()
    setup_determinism()
    root = os.path.abspath(args.out)
    os.makedirs(root, exist_ok=True)
    names = [m.name for m in MODELS]
    unknown = set(args.only or []) - set(names)
    if unknown:
        ap.error(f"unknown model name(s): {sorted(unknown)}; known: {names}")
    for spec in MODELS:
        if args.only is not None and spec.name not in args.only:
            continue
        g = generate_one(spec, root)
        gaps = min(c["greedy_min_gap"] for c in g["cases"])
        print(f"{spec.name}: seed {g['seed']}, {len(g['cases'])} cases, min gap {gaps:.4f}")
    with open(os.path.join(root, "index.json"), "w") as f:
        json.dump({"models": names}, f, indent=1)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
