#!/usr/bin/env python3
"""Writes the reference model configs for tests/unit/model_config_test.cpp.

Each case becomes tests/data/configs/<name>/config.json: either a config written by the installed
transformers (5.x layout: `rope_parameters`, `dtype`) or a hand-written dict in the layout that
transformers 4.x wrote (`rope_theta` + `rope_scaling`, `torch_dtype`), some with fields left out so
that the per-model defaults apply. transformers then loads every config.json and instantiates the
model on the meta device; what it derives (head_dim, num_key_value_heads, rope parameters, q/k/v
bias, the sliding window of each layer, ...) goes to tests/data/configs/expected.json.

Rerun from the repo root:  .venv/bin/python tools/make_config_reference.py
"""
import json
import os
import shutil
import sys

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM, LlamaConfig, Qwen2Config, Qwen3Config

OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "configs")


def v5_cases():
    """Configs written by the installed transformers."""
    yield "llama3_v5", LlamaConfig(
        architectures=["LlamaForCausalLM"],
        vocab_size=1000, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
        num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=131072,
        rms_norm_eps=1e-5, tie_word_embeddings=True, bos_token_id=128000,
        eos_token_id=[128001, 128008, 128009], dtype="bfloat16",
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192},
    )
    yield "qwen2_sliding_v5", Qwen2Config(
        architectures=["Qwen2ForCausalLM"],
        vocab_size=1000, hidden_size=128, intermediate_size=384, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, use_sliding_window=True, sliding_window=64,
        max_window_layers=1, tie_word_embeddings=True, eos_token_id=151645, dtype="float16",
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
    )
    yield "qwen3_v5", Qwen3Config(
        architectures=["Qwen3ForCausalLM"],
        vocab_size=1000, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
        num_attention_heads=8, num_key_value_heads=4, head_dim=64, rms_norm_eps=1e-6,
        tie_word_embeddings=True, bos_token_id=151643, eos_token_id=151645, dtype="bfloat16",
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
    )


def v4_cases():
    """config.json files in the layout transformers 4.x wrote, typed out as such checkpoints ship."""
    yield "llama31_v4", {  # Llama-3.1 style
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
        "num_attention_heads": 8, "num_key_value_heads": 2, "max_position_embeddings": 131072,
        "rms_norm_eps": 1e-05, "hidden_act": "silu", "attention_bias": False, "mlp_bias": False,
        "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009],
        "rope_theta": 500000.0,
        "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192, "rope_type": "llama3"},
        "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.43.0",
    }
    yield "llama_linear_minimal_v4", {  # old "type" key, top-level partial_rotary_factor, defaults
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "vocab_size": 1000, "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
        "num_attention_heads": 4, "head_dim": None,
        "rope_scaling": {"type": "linear", "factor": 2.0}, "partial_rotary_factor": 0.5,
        "torch_dtype": "float16", "transformers_version": "4.40.0",
    }
    yield "llama3_no_original_max_v4", {  # llama3 scaling without original_max_position_embeddings
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "vocab_size": 1000, "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 1,
        "num_attention_heads": 4, "num_key_value_heads": 1, "max_position_embeddings": 4096,
        "rope_theta": 50000, "mlp_bias": True, "attention_bias": True,
        "rope_scaling": {"rope_type": "llama3", "factor": 4, "low_freq_factor": 2.0,
                         "high_freq_factor": 8.0},
        "torch_dtype": "float32", "transformers_version": "4.45.0",
    }
    yield "qwen25_v4", {  # Qwen2.5 style: sliding window configured but switched off
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
        "vocab_size": 1000, "hidden_size": 128, "intermediate_size": 384, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 32768,
        "max_window_layers": 21, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
        "rope_scaling": None, "sliding_window": 32768, "use_sliding_window": False,
        "hidden_act": "silu", "bos_token_id": 151643, "eos_token_id": 151645,
        "tie_word_embeddings": True, "torch_dtype": "bfloat16", "transformers_version": "4.43.1",
    }
    yield "qwen2_sliding_default_window_v4", {  # use_sliding_window without a window: 4096
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
        "vocab_size": 1000, "hidden_size": 128, "intermediate_size": 384, "num_hidden_layers": 3,
        "num_attention_heads": 4, "num_key_value_heads": 4, "use_sliding_window": True,
        "max_window_layers": 2, "torch_dtype": "bfloat16", "transformers_version": "4.43.1",
    }
    yield "qwen3_minimal_v4", {  # Qwen3 defaults: head_dim 128, 32 kv heads
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
        "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
        "num_attention_heads": 32, "attention_bias": True, "rope_theta": 1000000,
        "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
    }
    yield "unknown_arch_v4", {  # an architecture we do not implement: parses, keeps the name
        "architectures": ["FancyNewForCausalLM"], "model_type": "llama",
        "vocab_size": 1000, "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 1,
        "num_attention_heads": 4, "torch_dtype": "bfloat16",
    }


def derive(config_dir):
    """What transformers itself makes of config_dir/config.json."""
    cfg = AutoConfig.from_pretrained(config_dir)
    arch = (cfg.architectures or [""])[0]
    model_cfg = cfg
    if arch == "FancyNewForCausalLM":
        model_cfg = LlamaConfig.from_dict(cfg.to_dict())  # instantiate as the model_type's model
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(model_cfg)
    layers = model.model.layers
    attn = layers[0].self_attn
    head_dim = attn.head_dim
    windows = [getattr(layer.self_attn, "sliding_window", None) for layer in layers]
    active = [w for w in windows if w is not None]
    assert len(set(active)) <= 1
    rope = dict(cfg.rope_parameters)
    rope.pop("type", None)
    eos = cfg.eos_token_id
    eos_ids = [] if eos is None else (list(eos) if isinstance(eos, (list, tuple)) else [eos])
    dtype = cfg.dtype
    return {
        "architecture": arch,
        "model_type": cfg.model_type,
        "vocab_size": model.model.embed_tokens.num_embeddings,
        "hidden_size": model.model.embed_tokens.embedding_dim,
        "intermediate_size": layers[0].mlp.gate_proj.out_features,
        "num_hidden_layers": len(layers),
        "num_attention_heads": attn.q_proj.out_features // head_dim,
        "num_key_value_heads": attn.k_proj.out_features // head_dim,
        "head_dim": head_dim,
        "max_position_embeddings": cfg.max_position_embeddings,
        "rms_norm_eps": model.model.norm.variance_epsilon,
        "rope": rope,
        "rotary_dim": int(head_dim * rope.get("partial_rotary_factor", 1.0)),
        "tie_word_embeddings": model.lm_head.weight is model.model.embed_tokens.weight,
        "attention_bias": attn.q_proj.bias is not None,
        "mlp_bias": layers[0].mlp.gate_proj.bias is not None,
        "hidden_act": cfg.hidden_act,
        "sliding_window": active[0] if active else -1,
        "layer_types": ["sliding_attention" if w is not None else "full_attention" for w in windows],
        "bos_token_id": cfg.bos_token_id,
        "eos_token_ids": eos_ids,
        "pad_token_id": cfg.pad_token_id,
        "dtype": None if dtype is None else str(dtype).replace("torch.", ""),
    }


def main():
    shutil.rmtree(OUT_DIR, ignore_errors=True)
    os.makedirs(OUT_DIR)
    expected = {"transformers_version": transformers.__version__, "cases": {}}
    for name, config in list(v5_cases()) + list(v4_cases()):
        case_dir = os.path.join(OUT_DIR, name)
        os.makedirs(case_dir)
        if isinstance(config, dict):
            with open(os.path.join(case_dir, "config.json"), "w") as f:
                json.dump(config, f, indent=2, sort_keys=True)
                f.write("\n")
        else:
            config.save_pretrained(case_dir)  # exactly what transformers writes
        expected["cases"][name] = derive(case_dir)
    with open(os.path.join(OUT_DIR, "expected.json"), "w") as f:
        json.dump(expected, f, indent=2, sort_keys=True)
        f.write("\n")
    print(f"wrote {len(expected['cases'])} configs to {os.path.normpath(OUT_DIR)}", file=sys.stderr)


if __name__ == "__main__":
    main()
