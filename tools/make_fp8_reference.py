#!/usr/bin/env python3
"""Writes tests/data/fp8/e4m3_reference.bin, the reference of the f32 -> FP8 E4M3 rounding test
(tests/unit/fp8_test.cpp): random and edge-case float32 values and their float8_e4m3fn codes as
`ml_dtypes` computes them (the numpy implementation of the OCP E4M3 format that JAX uses; round to
nearest even). Values beyond +-448 are clipped to +-448 first, as vLLM does before converting
(float8_e4m3fn itself has no infinity and would give NaN); that is our saturating conversion.
When torch is importable the codes are also checked against torch's float8_e4m3fn.

Layout: N little-endian float32 values, then their N uint8 codes.

Run from the repo root:  .venv/bin/python tools/make_fp8_reference.py
"""
import os

import ml_dtypes
import numpy as np

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "fp8", "e4m3_reference.bin")


def values():
    rng = np.random.default_rng(1234)
    parts = []
    for scale in (1e-4, 1e-3, 1e-2, 0.1, 1.0, 10.0, 100.0, 1000.0):
        parts.append(rng.standard_normal(400) * scale)
    # Every finite code, the midpoints between neighbours (ties: round to even) and values just
    # beside the midpoints.
    codes = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    finite = np.sort(np.unique(codes[np.isfinite(codes)]))
    mids = (finite[:-1].astype(np.float64) + finite[1:]) / 2
    parts += [finite, mids, np.nextafter(mids.astype(np.float32), np.float32(np.inf)),
              np.nextafter(mids.astype(np.float32), np.float32(-np.inf))]
    parts.append(np.array([0.0, -0.0, 448.0, -448.0, 449.0, 463.9, 464.0, 480.0, 1e6, -1e6, 2.0 ** -9, 2.0 ** -10,
                           2.0 ** -10 * 1.0001, 3 * 2.0 ** -11, 1e-30, -1e-30, np.inf, -np.inf]))
    return np.concatenate(parts).astype(np.float32)


def main():
    x = values()
    codes = np.clip(x, -448.0, 448.0).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    try:
        import torch
        t = torch.from_numpy(np.clip(x, -448.0, 448.0)).to(torch.float8_e4m3fn).view(torch.uint8).numpy()
        assert np.array_equal(t, codes), "torch and ml_dtypes disagree"
        print("torch float8_e4m3fn agrees on all", len(x), "values")
    except ImportError:
        pass
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "wb") as f:
        f.write(x.astype("<f4").tobytes())
        f.write(codes.tobytes())
    print(f"wrote {len(x)} values to {os.path.relpath(OUT)}")


if __name__ == "__main__":
    main()
