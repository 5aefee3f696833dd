#!/usr/bin/env python3
"""Writes the GGUF reader/dequantization fixtures under tests/data/gguf/ with the `gguf` package.

  tests/data/gguf/fixture.gguf           metadata of every value type + small tensors of
                                         F32/F16/BF16/Q8_0/Q4_0/Q4_1 (and Q5_0, which we reject)
  tests/data/gguf/fixture_expected.json  the metadata values, and per tensor its row-major shape,
                                         ggml type and the values gguf.quants.dequantize gives

Rerun:  .venv/bin/python tools/make_gguf_fixtures.py
"""
import json
import os

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf import GGUFValueType as V

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "gguf")

# name, row-major shape [outer..., inner], ggml type
TENSORS = [
    ("t.f32", (3, 64), T.F32),
    ("t.f32_1d", (33,), T.F32),
    ("t.f32_3d", (2, 3, 32), T.F32),
    ("t.f16", (5, 64), T.F16),
    ("t.bf16", (4, 32), T.BF16),
    ("t.q8_0", (7, 64), T.Q8_0),
    ("t.q4_0", (6, 96), T.Q4_0),
    ("t.q4_1", (5, 128), T.Q4_1),
    ("t.q4_1_3d", (2, 3, 64), T.Q4_1),
    ("t.q5_0", (2, 64), T.Q5_0),
]

# key, value, GGUF value type (None: scalar type from the key), array element type
METADATA = [
    ("general.architecture", "fixture", V.STRING),
    ("test.u8", 200, V.UINT8),
    ("test.i8", -100, V.INT8),
    ("test.u16", 60000, V.UINT16),
    ("test.i16", -30000, V.INT16),
    ("test.u32", 4000000000, V.UINT32),
    ("test.i32", -2000000000, V.INT32),
    ("test.f32", 0.1, V.FLOAT32),
    ("test.bool_true", True, V.BOOL),
    ("test.bool_false", False, V.BOOL),
    ("test.string", "héllo wörld ✓", V.STRING),
    ("test.empty_string", "", V.STRING),
    ("test.u64", 18000000000000000000, V.UINT64),
    ("test.i64", -9000000000000000000, V.INT64),
    ("test.f64", 2.718281828459045, V.FLOAT64),
    ("test.int_array", [1, -2, 3, 2147483647], V.ARRAY, V.INT32),
    ("test.u8_array", [0, 1, 255], V.ARRAY, V.UINT8),
    ("test.float_array", [0.5, -1.25, 3.0e-5], V.ARRAY, V.FLOAT32),
    ("test.string_array", ["a", "", "<|im_end|>", "Ġthe", "日本"], V.ARRAY, V.STRING),
    ("test.bool_array", [True, False, True], V.ARRAY, V.BOOL),
    ("test.nested_array", [[1, 2], [3], [4, 5, 6]], V.ARRAY, None),
]


def main() -> None:
    rng = np.random.default_rng(20261122)
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, "fixture.gguf")
    w = gguf.GGUFWriter(path, arch="fixture")
    # GGUFWriter adds general.architecture itself; the rest go through add_key_value.
    meta_json = {}
    for entry in METADATA:
        key, value, vtype = entry[0], entry[1], entry[2]
        sub = entry[3] if len(entry) > 3 else None
        if key != "general.architecture":
            w.add_key_value(key, value, vtype, sub_type=sub)
        if vtype == V.FLOAT32:
            value = float(np.float32(value))
        elif vtype == V.ARRAY and sub == V.FLOAT32:
            value = [float(np.float32(x)) for x in value]
        meta_json[key] = {"type": vtype.name.lower(), "value": value}
        if sub is not None:
            meta_json[key]["array_type"] = sub.name.lower()

    tensors_json = []
    for name, shape, qtype in TENSORS:
        # A spread of magnitudes so that block scales differ; a few exact zeros and a constant block.
        x = (rng.standard_normal(shape) * rng.uniform(0.01, 3.0, size=shape[:-1] + (1,))).astype(np.float32)
        x.reshape(-1)[:5] = 0.0
        if qtype in (T.F32,):
            data, raw = x, None
        elif qtype == T.F16:
            data, raw = x.astype(np.float16), None
        else:
            data, raw = gguf.quants.quantize(x, qtype), qtype
        w.add_tensor(name, data, raw_dtype=raw)
        stored = data if raw is None else data
        deq = gguf.quants.dequantize(stored.view(np.uint8) if raw is not None else stored, qtype)
        deq = np.asarray(deq, dtype=np.float32).reshape(shape)
        entry = {"name": name, "shape": list(shape), "type": qtype.name}
        if qtype != T.Q5_0:
            entry["values"] = [float(v) for v in deq.reshape(-1)]
        tensors_json.append(entry)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    reader = gguf.GGUFReader(path)
    expected = {
        "file": "fixture.gguf",
        "version": 3,
        "alignment": 32,
        "data_offset": int(reader.data_offset),
        "metadata": meta_json,
        "key_order": list(reader.fields.keys())[3:],  # skip GGUF.version/tensor_count/kv_count
        "tensor_count": len(reader.tensors),
        "tensors": tensors_json,
    }
    # Value types (nested: outer first) and offsets as the gguf package reads them back.
    for key, m in meta_json.items():
        m["types"] = [t.name.lower() for t in reader.fields[key].types]
    offsets = {t.name: int(t.data_offset) - int(reader.data_offset) for t in reader.tensors}
    for t in tensors_json:
        t["offset"] = offsets[t["name"]]
    with open(os.path.join(OUT, "fixture_expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, indent=None, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
    main()
