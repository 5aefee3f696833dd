#!/usr/bin/env python3
"""Writes the GGUF reader/dequantization fixtures under tests/data/gguf/ with the `gguf` package.

  tests/data/gguf/fixture.gguf           metadata of every value type + small tensors of
                                         F32/F16/BF16/Q8_0/Q4_0/Q4_1 (and Q5_0, which we reject)
  tests/data/gguf/fixture_expected.json  the metadata values, and per tensor its row-major shape,
                                         ggml type and the values gguf.quants.dequantize gives
  tests/data/gguf/tiny_llama.gguf        a tiny random llama (untied lm_head, GQA, mixed types),
                                         q/k permuted the way llama.cpp's converter does
  tests/data/gguf/tiny_qwen2.gguf, tiny_qwen3.gguf
                                         the same for qwen2 (q/k/v biases, tied embeddings) and
                                         qwen3 (q/k norms, head_dim != hidden / heads; no permutation)
  tests/data/gguf/tiny_<arch>_expected.json / .bin
                                         what transformers makes of it (AutoConfig with gguf_file=,
                                         load_gguf_checkpoint): config, and every tensor under its
                                         HF name as raw little-endian float32 in the .bin
  tests/data/gguf/tiny_llama3_rope.gguf  llama3 rope scaling stored as rope_freqs.weight (factors
                                         from transformers' llama3 inv_freq); *_bad has them perturbed

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


# ---- tiny llama ---------------------------------------------------------------------------------

TINY = dict(vocab=40, hidden=64, heads=4, kv_heads=2, ffn=64, layers=2, ctx=256, eps=1e-5, theta=500000.0)
# qwen2: q/k/v biases, tied embeddings. qwen3: q/k norms, head_dim 128 (transformers' Qwen3Config
# default; its GGUF loader does not read attention.key_length) != hidden / heads.
TINY_QWEN2 = dict(TINY, hidden=32, ffn=32, heads=4, kv_heads=1, theta=1000000.0, eps=1e-6)
TINY_QWEN3 = dict(TINY, hidden=32, ffn=32, heads=2, kv_heads=1, head_dim=128, theta=1000000.0, eps=1e-6)


def llama_cpp_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp convert_hf_to_gguf LlamaModel.permute: HF rotate-half rows -> interleaved pairs."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_llama_metadata(w, cfg, with_tokens=True) -> None:
    w.add_context_length(cfg["ctx"])
    w.add_embedding_length(cfg["hidden"])
    w.add_block_count(cfg["layers"])
    w.add_feed_forward_length(cfg["ffn"])
    w.add_head_count(cfg["heads"])
    w.add_head_count_kv(cfg["kv_heads"])
    w.add_layer_norm_rms_eps(cfg["eps"])
    w.add_rope_freq_base(cfg["theta"])
    hd = cfg.get("head_dim", cfg["hidden"] // cfg["heads"])
    w.add_rope_dimension_count(hd)
    if "head_dim" in cfg:
        w.add_key_length(hd)
        w.add_value_length(hd)
    if with_tokens:
        w.add_tokenizer_model("gpt2")
        w.add_token_list([f"tok{i}" for i in range(cfg["vocab"])])
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        w.add_pad_token_id(3)


def make_tiny(rng, arch="llama", c=TINY, tied=False) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    hd = c.get("head_dim", c["hidden"] // c["heads"])
    # GGUF name, HF name, HF shape, ggml type
    specs = [("token_embd.weight", "model.embed_tokens.weight", (c["vocab"], c["hidden"]), T.Q8_0),
             ("output_norm.weight", "model.norm.weight", (c["hidden"],), T.F32)]
    if not tied:
        specs.append(("output.weight", "lm_head.weight", (c["vocab"], c["hidden"]), T.F16))
    layer_types = [
        {"attn_q": T.F32, "attn_k": T.F32, "attn_v": T.F16, "attn_output": T.BF16,
         "ffn_gate": T.Q4_0, "ffn_up": T.Q4_1, "ffn_down": T.Q8_0},
        {"attn_q": T.Q8_0, "attn_k": T.Q4_1, "attn_v": T.Q4_0, "attn_output": T.Q8_0,
         "ffn_gate": T.F16, "ffn_up": T.F32, "ffn_down": T.BF16},
    ]
    hf_of = {"attn_q": ("self_attn.q_proj", c["heads"] * hd, c["hidden"]),
             "attn_k": ("self_attn.k_proj", c["kv_heads"] * hd, c["hidden"]),
             "attn_v": ("self_attn.v_proj", c["kv_heads"] * hd, c["hidden"]),
             "attn_output": ("self_attn.o_proj", c["hidden"], c["heads"] * hd),
             "ffn_gate": ("mlp.gate_proj", c["ffn"], c["hidden"]),
             "ffn_up": ("mlp.up_proj", c["ffn"], c["hidden"]),
             "ffn_down": ("mlp.down_proj", c["hidden"], c["ffn"])}
    for layer in range(c["layers"]):
        specs.append((f"blk.{layer}.attn_norm.weight", f"model.layers.{layer}.input_layernorm.weight", (c["hidden"],), T.F32))
        specs.append((f"blk.{layer}.ffn_norm.weight", f"model.layers.{layer}.post_attention_layernorm.weight", (c["hidden"],), T.F32))
        for g, qtype in layer_types[layer % 2].items():
            hf, rows, cols = hf_of[g]
            specs.append((f"blk.{layer}.{g}.weight", f"model.layers.{layer}.{hf}.weight", (rows, cols), qtype))
            if arch == "qwen2" and g in ("attn_q", "attn_k", "attn_v"):
                specs.append((f"blk.{layer}.{g}.bias", f"model.layers.{layer}.{hf}.bias", (rows,), T.F32))
        if arch == "qwen3":
            for g, hf in (("attn_q_norm", "self_attn.q_norm"), ("attn_k_norm", "self_attn.k_norm")):
                specs.append((f"blk.{layer}.{g}.weight", f"model.layers.{layer}.{hf}.weight", (hd,), T.F32))

    stem = f"tiny_{arch}"
    path = os.path.join(OUT, stem + ".gguf")
    w = gguf.GGUFWriter(path, arch=arch)
    write_llama_metadata(w, c)
    originals = {}
    for gname, hfname, shape, qtype in specs:
        x = (rng.standard_normal(shape) * 0.5).astype(np.float32)
        if "norm" in gname:
            x = (1.0 + 0.1 * x).astype(np.float32)
        stored = x
        if arch == "llama" and ".attn_q." in gname:
            stored = llama_cpp_permute(x, c["heads"])
        elif arch == "llama" and ".attn_k." in gname:
            stored = llama_cpp_permute(x, c["kv_heads"])
        if qtype == T.F32:
            data, raw = stored, None
        elif qtype == T.F16:
            data, raw = stored.astype(np.float16), None
        else:
            data, raw = gguf.quants.quantize(stored, qtype), qtype
        w.add_tensor(gname, data, raw_dtype=raw)
        # What the HF model should see: the original values after one quantization round trip.
        roundtrip = np.asarray(gguf.quants.dequantize(gguf.quants.quantize(x, qtype), qtype), np.float32)
        originals[hfname] = roundtrip.reshape(shape) if qtype != T.F32 else x
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    # transformers' view of the file.
    config = AutoConfig.from_pretrained(OUT, gguf_file=stem + ".gguf")
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    ckpt = load_gguf_checkpoint(path, return_tensors=True, model_to_load=model)
    tensors = ckpt["tensors"]
    assert set(tensors) == set(originals), (set(tensors) ^ set(originals))
    # Cross-check our permutation against transformers' un-permutation: quantization of a
    # permuted tensor equals permutation of the quantized one (rows are whole blocks).
    for name, x in originals.items():
        np.testing.assert_allclose(tensors[name].numpy(), x, rtol=1e-6, atol=1e-7, err_msg=name)

    # Reference logits and greedy tokens of the loaded model.
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    assert not unexpected and set(missing) == ({"lm_head.weight"} if tied else set()), (missing, unexpected)
    assert config.tie_word_embeddings == tied
    if tied:
        model.tie_weights()
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr() or not tied
    model.eval()
    prompt = [int(t) for t in rng.integers(4, c["vocab"], size=9)]
    with torch.no_grad():
        logits = model(torch.tensor([prompt])).logits[0].numpy().astype(np.float32)
        out = model.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False,
                             eos_token_id=None, pad_token_id=0)
    greedy = [int(t) for t in out[0, len(prompt):]]

    index, blobs, offset = [], [], 0
    for name in sorted(tensors):
        arr = tensors[name].numpy().astype("<f4")
        index.append({"name": name, "shape": list(arr.shape), "offset": offset})
        blobs.append(arr.tobytes())
        offset += arr.size
    with open(os.path.join(OUT, stem + "_expected.bin"), "wb") as f:
        f.write(b"".join(blobs))
    rope = getattr(config, "rope_parameters", None) or {}
    expected = {
        "config": {
            "architectures": [type(model).__name__], "model_type": config.model_type,
            "vocab_size": config.vocab_size, "hidden_size": config.hidden_size,
            "intermediate_size": config.intermediate_size, "num_hidden_layers": config.num_hidden_layers,
            "num_attention_heads": config.num_attention_heads, "num_key_value_heads": config.num_key_value_heads,
            "head_dim": getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads,
            "max_position_embeddings": config.max_position_embeddings,
            "rms_norm_eps": config.rms_norm_eps, "rope_theta": rope.get("rope_theta"),
            "rope_type": rope.get("rope_type", "default"), "tie_word_embeddings": config.tie_word_embeddings,
            "bos_token_id": config.bos_token_id, "eos_token_id": config.eos_token_id,
            "pad_token_id": config.pad_token_id,
        },
        "tensors": index,  # offsets in floats into tiny_llama_expected.bin
        "prompt_ids": prompt,
        "logits": [[float(v) for v in row] for row in logits],  # [len(prompt), vocab]
        "greedy_ids": greedy,
    }
    with open(os.path.join(OUT, stem + "_expected.json"), "w") as f:
        json.dump(expected, f, indent=1)
        f.write("\n")
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


def make_llama3_rope() -> None:
    """Metadata-only llama files whose rope_freqs.weight encodes llama3 rope scaling."""
    import torch
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    c = dict(TINY, ctx=131072)
    params = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
              "original_max_position_embeddings": 8192, "rope_theta": c["theta"]}
    hd = c["hidden"] // c["heads"]
    base = LlamaConfig(hidden_size=c["hidden"], num_attention_heads=c["heads"], head_dim=hd,
                       rope_parameters={"rope_type": "default", "rope_theta": c["theta"]})
    scaled = LlamaConfig(hidden_size=c["hidden"], num_attention_heads=c["heads"], head_dim=hd,
                         max_position_embeddings=c["ctx"], rope_parameters=params)
    inv_default = 1.0 / (c["theta"] ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
    inv_scaled, _ = ROPE_INIT_FUNCTIONS["llama3"](scaled)
    factors = (inv_default / inv_scaled).numpy().astype(np.float32)
    del base
    for name, f_values in (("tiny_llama3_rope.gguf", factors),
                           ("tiny_llama3_rope_bad.gguf", factors * np.float32(1.01))):
        path = os.path.join(OUT, name)
        w = gguf.GGUFWriter(path, arch="llama")
        write_llama_metadata(w, c)
        w.add_tensor("rope_freqs.weight", f_values)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
    with open(os.path.join(OUT, "tiny_llama3_rope_expected.json"), "w") as f:
        json.dump({"rope_parameters": params, "rope_freqs": [float(x) for x in factors]}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
    make_tiny(np.random.default_rng(7))
    make_tiny(np.random.default_rng(8), "qwen2", TINY_QWEN2, tied=True)
    make_tiny(np.random.default_rng(9), "qwen3", TINY_QWEN3)
    make_llama3_rope()
