#!/usr/bin/env python3
"""Dumps HF transformers' RoPE inverse frequencies and cos/sin tables for a few configurations to
tests/data/rope_reference.json, the reference of tests/unit/ops_rotary_test.cpp.

Run from the repo root:  .venv/bin/python tools/make_rope_reference.py
The rotary modules of the models themselves are used (LlamaRotaryEmbedding for default / linear /
llama3, GPTNeoXRotaryEmbedding for partial rotary), so the tables are exactly what HF computes.
"""
import json
import os

import torch
import transformers
from transformers import GPTNeoXConfig, LlamaConfig
from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXRotaryEmbedding
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

POSITIONS = [0, 1, 5, 127, 1000, 4097, 30000]


def llama(head_dim, theta, max_pos, **scaling):
    rope = {"rope_type": scaling.pop("rope_type", "default"), "rope_theta": theta, **scaling}
    cfg = LlamaConfig(hidden_size=head_dim * 2, num_attention_heads=2, head_dim=head_dim,
                      max_position_embeddings=max_pos, rope_parameters=rope)
    return LlamaRotaryEmbedding(cfg), head_dim


def neox(head_dim, theta, partial):
    cfg = GPTNeoXConfig(hidden_size=head_dim * 2, num_attention_heads=2, max_position_embeddings=32768,
                        rope_parameters={"rope_type": "default", "rope_theta": theta,
                                         "partial_rotary_factor": partial})
    return GPTNeoXRotaryEmbedding(cfg), int(head_dim * partial)


CASES = [
    # name, (module, rotary_dim), fields of our RopeConfig
    ("default_hd64", llama(64, 10000.0, 32768), {"theta": 10000.0, "scaling_type": "default"}),
    ("default_hd64_theta1e5", llama(64, 100000.0, 32768), {"theta": 100000.0, "scaling_type": "default"}),
    ("linear_hd128", llama(128, 10000.0, 32768, rope_type="linear", factor=4.0),
     {"theta": 10000.0, "scaling_type": "linear", "factor": 4.0}),
    ("llama3_hd128", llama(128, 500000.0, 131072, rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                           high_freq_factor=4.0, original_max_position_embeddings=8192),
     {"theta": 500000.0, "scaling_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
      "high_freq_factor": 4.0, "original_max_position": 8192}),
    ("partial_neox_hd64_0.25", neox(64, 10000.0, 0.25), {"theta": 10000.0, "scaling_type": "default"}),
]


def main():
    out = {"transformers": transformers.__version__, "torch": torch.__version__, "positions": POSITIONS,
           "cases": []}
    for name, (module, rotary_dim), fields in CASES:
        inv_freq = module.inv_freq.to(torch.float32)
        assert inv_freq.numel() == rotary_dim // 2, name
        x = torch.zeros(1, dtype=torch.float32)
        cos, sin = module(x, torch.tensor([POSITIONS], dtype=torch.int64))
        half = rotary_dim // 2
        out["cases"].append({
            "name": name,
            "rotary_dim": rotary_dim,
            **fields,
            "inv_freq": [float(v) for v in inv_freq.tolist()],
            "cos": [[float(v) for v in row[:half]] for row in cos[0].tolist()],
            "sin": [[float(v) for v in row[:half]] for row in sin[0].tolist()],
        })
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "rope_reference.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"wrote {os.path.normpath(path)} ({len(out['cases'])} cases)")


if __name__ == "__main__":
    main()
