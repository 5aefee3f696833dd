#!/usr/bin/env python3
"""Writes a GGUF file holding random blocks of every ggml type radixlm reads, and what the `gguf`
package's numpy dequantizer (gguf.quants.dequantize) makes of them.

  OUT/quant_blocks.gguf           one 2-D tensor per type: random bytes, with every f16 scale field
                                  replaced by a random finite half (subnormals and large values
                                  included), so each bit of the block layouts is exercised
  OUT/quant_blocks_expected.bin   the dequantized values of every tensor, little-endian float32,
                                  in the order of the index
  OUT/quant_blocks_expected.json  index: name, ggml type, row-major shape, offset (in floats)

The C++ test (tests/unit/gguf_dequant_test.cpp) runs this script into a temporary directory and
requires bit-identical floats. Deterministic: the same seed writes the same bytes.

Run:  .venv/bin/python tools/make_gguf_quant_fixtures.py --out DIR [--seed N]
"""
import argparse
import json
import os

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T

# type, row-major shape [rows, cols], byte offsets of the f16 scale fields inside a block
TYPES = [
    (T.F16, (3, 64), None),
    (T.BF16, (3, 64), None),
    (T.Q8_0, (5, 96), [0]),
    (T.Q4_0, (5, 96), [0]),
    (T.Q4_1, (5, 96), [0, 2]),
    (T.Q5_0, (5, 96), [0]),
    (T.Q5_1, (5, 96), [0, 2]),
    (T.IQ4_NL, (5, 96), [0]),
    (T.Q2_K, (3, 512), [80, 82]),
    (T.Q3_K, (3, 512), [108]),
    (T.Q4_K, (3, 512), [0, 2]),
    (T.Q5_K, (3, 512), [0, 2]),
    (T.Q6_K, (3, 512), [208]),
    (T.IQ4_XS, (3, 512), [0]),
]


def finite_halves(rng, n):
    """n random f16 bit patterns that are neither inf nor NaN (subnormals and zeros included)."""
    bits = rng.integers(0, 1 << 16, size=n, dtype=np.uint32)
    all_ones = (bits & 0x7C00) == 0x7C00
    bits[all_ones] &= ~np.uint32(0x4000)  # clear the top exponent bit
    return bits.astype(np.uint16)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=20261125)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "quant_blocks.gguf")
    w = gguf.GGUFWriter(path, arch="quant_fixture")
    index, values = [], []
    offset = 0
    for qtype, shape, scale_fields in TYPES:
        block_size, type_size = gguf.GGML_QUANT_SIZES[qtype]
        rows, cols = shape
        row_bytes = cols // block_size * type_size
        if qtype in (T.F16, T.BF16):
            # Plain halves: finite values only (NaN payloads are not part of what we compare).
            halves = finite_halves(rng, rows * cols)
            raw = halves.view(np.uint8).reshape(rows, row_bytes)
        else:
            raw = rng.integers(0, 256, size=(rows * cols // block_size, type_size), dtype=np.uint8)
            for field in scale_fields:
                raw[:, field:field + 2] = finite_halves(rng, raw.shape[0]).view(np.uint8).reshape(-1, 2)
            raw = raw.reshape(rows, row_bytes)
        name = f"t.{qtype.name.lower()}"
        w.add_tensor(name, raw, raw_dtype=qtype)
        deq = np.asarray(gguf.quants.dequantize(raw, qtype), dtype=np.float32).reshape(shape)
        index.append({"name": name, "type": qtype.name, "shape": list(shape), "offset": offset})
        values.append(deq.reshape(-1))
        offset += deq.size
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    np.concatenate(values).astype("<f4").tofile(os.path.join(args.out, "quant_blocks_expected.bin"))
    with open(os.path.join(args.out, "quant_blocks_expected.json"), "w", encoding="utf-8") as f:
        json.dump({"file": "quant_blocks.gguf", "seed": args.seed, "tensors": index}, f, indent=1)
        f.write("\n")
    print(f"wrote {path} ({os.path.getsize(path)} bytes, {len(index)} tensors)")


if __name__ == "__main__":
    main()
