#!/usr/bin/env python3
"""Writes tests/data/safetensors/fixture.safetensors with the `safetensors` package, and
fixture.json listing every tensor's dtype, shape and values (as stored, converted exactly to
float/int), for tests/unit/safetensors_test.cpp.

Rerun from the repo root:  .venv/bin/python tools/make_safetensors_fixture.py
"""
import json
import os

import torch
from safetensors.torch import save_file

OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "safetensors")
ST_DTYPE = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.int32: "I32",
            torch.int64: "I64", torch.uint8: "U8", torch.int8: "I8"}


def main():
    g = torch.Generator().manual_seed(1234)
    tensors = {
        "model.embed_tokens.weight": torch.randn(3, 4, generator=g),
        "model.norm.weight": torch.randn(5, generator=g).to(torch.float16),
        "model.layers.0.self_attn.q_proj.weight": torch.randn(2, 3, generator=g).to(torch.bfloat16),
        "position_ids": torch.randint(-2**40, 2**40, (3,), generator=g, dtype=torch.int64),
        "counts": torch.randint(-2**31, 2**31 - 1, (2, 2), generator=g, dtype=torch.int32),
        "bytes": torch.randint(0, 256, (4,), generator=g, dtype=torch.uint8),
        "signed_bytes": torch.randint(-128, 128, (3,), generator=g, dtype=torch.int8),
        "scale": torch.randn((), generator=g),
        "empty": torch.zeros(0, 4),
    }
    metadata = {"format": "pt", "producer": "make_safetensors_fixture.py"}
    os.makedirs(OUT_DIR, exist_ok=True)
    save_file(tensors, os.path.join(OUT_DIR, "fixture.safetensors"), metadata=metadata)

    reference = {"__metadata__": metadata, "tensors": {}}
    for name, t in tensors.items():
        values = t.float().flatten().tolist() if t.is_floating_point() else t.flatten().tolist()
        reference["tensors"][name] = {"dtype": ST_DTYPE[t.dtype], "shape": list(t.shape), "values": values}
    with open(os.path.join(OUT_DIR, "fixture.json"), "w") as f:
        json.dump(reference, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
