#!/usr/bin/env python3
"""Writes the tiny qwen3moe and gemma3 GGUF fixtures under tests/data/gguf/ with the `gguf` package.

  tests/data/gguf/tiny_qwen3moe.gguf   a tiny random Qwen3-MoE: q/k norms, 4 experts top-2 per layer
                                       (router F32, stacked experts ffn_{gate,up,down}_exps in
                                       F32/F16/Q8_0), attention matrices in F32/F16/BF16/Q8_0, tied
  tests/data/gguf/tiny_gemma3.gguf     a tiny random Gemma 3 text model: 6 layers (every 6th global,
                                       llama.cpp's pattern), a 4-token sliding window, linear rope
                                       scaling on the global layer, norm weights stored as 1 + w
                                       (as llama.cpp's converter writes them), mixed types
  tests/data/gguf/tiny_<arch>_expected.json
                                       what transformers makes of the file (AutoConfig with gguf_file=,
                                       load_gguf_checkpoint): config, the prompt, its logits and 12
                                       greedy tokens (KV-cached generate), each winning by at least
                                       MIN_GREEDY_GAP (else the next seed)

transformers' GGUF loader is told what llama.cpp does but the file does not say: Gemma 3's
attention scale is 1/sqrt(head_dim) (query_pre_attn_scalar = head_dim; transformers would take its
default 256) and its global layers' RoPE is scaled by gemma3.rope.scaling.* (transformers drops
the keys), and Qwen3-MoE renormalises the top-k weights (transformers' GGUF defaults do too);
its config map also lacks qwen3moe.expert_feed_forward_length (moe_intermediate_size), set here.

Rerun:  .venv/bin/python tools/make_gguf_arch_fixtures.py
"""
import json
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_gguf_fixtures import OUT, write_llama_metadata  # noqa: E402

QWEN3MOE = dict(vocab=40, hidden=32, heads=2, kv_heads=1, head_dim=32, ffn=32, layers=2, ctx=256,
                eps=1e-6, theta=1000000.0, experts=4, experts_used=2, expert_ffn=32)
# Greedy steps must win by this much: the 8-bit activation path moves logits by up to ~0.3.
MIN_GREEDY_GAP = 0.3
GEMMA3 = dict(vocab=40, hidden=32, heads=2, kv_heads=1, head_dim=32, ffn=64, layers=6, ctx=256,
              eps=1e-6, theta=1000000.0, window=4, rope_factor=4.0)


def quantized(x: np.ndarray, qtype):
    """(data, raw_dtype) for GGUFWriter.add_tensor."""
    if qtype == T.F32:
        return x, None
    if qtype == T.F16:
        return x.astype(np.float16), None
    return gguf.quants.quantize(x, qtype), qtype


def tensor_specs(arch: str, c: dict) -> list:
    """(GGUF name, row-major shape, ggml type, kind) for every tensor; kind 'norm' or 'matrix'."""
    hd, h = c["head_dim"], c["hidden"]
    specs = [("token_embd.weight", (c["vocab"], h), T.Q8_0, "matrix"),
             ("output_norm.weight", (h,), T.F32, "norm")]
    attn_types = [{"attn_q": T.F32, "attn_k": T.F16, "attn_v": T.Q8_0, "attn_output": T.Q4_1},
                  {"attn_q": T.Q8_0, "attn_k": T.Q4_0, "attn_v": T.F32, "attn_output": T.BF16}]
    if arch == "qwen3moe":
        # Top-k routing is discontinuous: the 4-bit matrices' 8-bit-activation error (~0.3 logits
        # on dense models) can flip an expert choice, so the MoE model keeps to F32/F16/BF16/Q8_0.
        attn_types = [{"attn_q": T.F32, "attn_k": T.F16, "attn_v": T.Q8_0, "attn_output": T.BF16},
                      {"attn_q": T.Q8_0, "attn_k": T.BF16, "attn_v": T.F32, "attn_output": T.Q8_0}]
    for layer in range(c["layers"]):
        b = f"blk.{layer}."
        types = attn_types[layer % 2]
        specs += [(b + "attn_norm.weight", (h,), T.F32, "norm"),
                  (b + "attn_q.weight", (c["heads"] * hd, h), types["attn_q"], "matrix"),
                  (b + "attn_k.weight", (c["kv_heads"] * hd, h), types["attn_k"], "matrix"),
                  (b + "attn_v.weight", (c["kv_heads"] * hd, h), types["attn_v"], "matrix"),
                  (b + "attn_output.weight", (h, c["heads"] * hd), types["attn_output"], "matrix"),
                  (b + "attn_q_norm.weight", (hd,), T.F32, "norm"),
                  (b + "attn_k_norm.weight", (hd,), T.F32, "norm"),
                  (b + "ffn_norm.weight", (h,), T.F32, "norm")]
        if arch == "qwen3moe":
            e, f = c["experts"], c["expert_ffn"]
            exp_type = [T.F32, T.Q8_0][layer % 2]
            specs += [(b + "ffn_gate_inp.weight", (e, h), T.F32, "matrix"),
                      (b + "ffn_gate_exps.weight", (e, f, h), exp_type, "matrix"),
                      (b + "ffn_up_exps.weight", (e, f, h), T.F16, "matrix"),
                      (b + "ffn_down_exps.weight", (e, h, f), exp_type, "matrix")]
        else:
            specs += [(b + "post_attention_norm.weight", (h,), T.F32, "norm"),
                      (b + "post_ffw_norm.weight", (h,), T.F32, "norm"),
                      (b + "ffn_gate.weight", (c["ffn"], h), [T.Q4_0, T.F16][layer % 2], "matrix"),
                      (b + "ffn_up.weight", (c["ffn"], h), [T.Q8_0, T.F32][layer % 2], "matrix"),
                      (b + "ffn_down.weight", (h, c["ffn"]), [T.BF16, T.Q4_1][layer % 2], "matrix")]
    return specs


def write_gguf(arch: str, c: dict, rng) -> str:
    path = os.path.join(OUT, f"tiny_{arch}.gguf")
    w = gguf.GGUFWriter(path, arch=arch)
    write_llama_metadata(w, c)
    if arch == "qwen3moe":
        w.add_expert_count(c["experts"])
        w.add_expert_used_count(c["experts_used"])
        w.add_expert_feed_forward_length(c["expert_ffn"])
    else:
        w.add_sliding_window(c["window"])
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(c["rope_factor"])
    for name, shape, qtype, kind in tensor_specs(arch, c):
        x = (rng.standard_normal(shape) * 0.5).astype(np.float32)
        if kind == "norm":
            x = (0.1 * x).astype(np.float32) if arch == "gemma3" else (1.0 + 0.1 * x).astype(np.float32)
            if arch == "gemma3":
                x = (np.float32(1.0) + x).astype(np.float32)  # llama.cpp stores Gemma norms as 1 + w
        data, raw = quantized(x, qtype)
        w.add_tensor(name, data, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def reference(arch: str, c: dict, path: str, rng, seed: int):
    """Writes the expected json; returns None, or the smallest greedy gap when it is too small."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    stem = f"tiny_{arch}"
    config = AutoConfig.from_pretrained(OUT, gguf_file=stem + ".gguf")
    if arch == "gemma3":
        config.query_pre_attn_scalar = c["head_dim"]  # llama.cpp: 1/sqrt(head_dim)
        # llama.cpp scales the global layers' RoPE by gemma3.rope.scaling.*; transformers' GGUF
        # loader drops those keys.
        assert config.rope_parameters["full_attention"]["rope_type"] == "default"
        config.rope_parameters["full_attention"].update(rope_type="linear", factor=c["rope_factor"])
        assert config.layer_types == ["sliding_attention"] * 5 + ["full_attention"], config.layer_types
        assert config.sliding_window == c["window"]
    else:
        assert config.norm_topk_prob, "llama.cpp renormalises qwen3moe's top-k weights"
        config.moe_intermediate_size = c["expert_ffn"]  # transformers' GGUF config map lacks the key
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    ckpt = load_gguf_checkpoint(path, return_tensors=True, model_to_load=model)
    missing, unexpected = model.load_state_dict(ckpt["tensors"], strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    assert config.tie_word_embeddings
    model.tie_weights()
    model.eval()
    prompt = [int(t) for t in rng.integers(4, c["vocab"], size=9)]
    with torch.no_grad():
        logits = model(torch.tensor([prompt])).logits[0].numpy().astype(np.float32)
        out = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                             max_new_tokens=12, min_new_tokens=12, do_sample=False, eos_token_id=None,
                             pad_token_id=0, output_scores=True, return_dict_in_generate=True)
    top2 = [torch.topk(step[0], 2).values for step in out.scores]
    min_gap = min(float(t[0] - t[1]) for t in top2)
    if min_gap < MIN_GREEDY_GAP:
        return min_gap
    out = out.sequences
    rope = getattr(config, "rope_parameters", None) or {}
    expected = {
        "config": {
            "architectures": [type(model).__name__], "model_type": config.model_type,
            "vocab_size": config.vocab_size, "hidden_size": config.hidden_size,
            "num_hidden_layers": config.num_hidden_layers, "head_dim": config.head_dim,
            "rope": rope, "tie_word_embeddings": config.tie_word_embeddings,
        },
        "seed": seed,
        "greedy_min_gap": min_gap,
        "prompt_ids": prompt,
        "logits": [[float(v) for v in row] for row in logits],  # [len(prompt), vocab]
        "greedy_ids": [int(t) for t in out[0, len(prompt):]],
    }
    with open(os.path.join(OUT, stem + "_expected.json"), "w") as f:
        json.dump(expected, f, indent=1)
        f.write("\n")
    print(f"wrote {path} ({os.path.getsize(path)} bytes, seed {seed}, min greedy gap {min_gap:.3f})")
    return None


def main() -> None:
    for arch, c, seed in (("qwen3moe", QWEN3MOE, 31), ("gemma3", GEMMA3, 32)):
        for attempt in range(20):
            rng = np.random.default_rng(seed + 1000 * attempt)
            path = write_gguf(arch, c, rng)
            gap = reference(arch, c, path, rng, seed + 1000 * attempt)
            if gap is None:
                break
            print(f"{arch}: seed {seed + 1000 * attempt} has a greedy gap of {gap:.3f}; next seed")
        else:
            raise RuntimeError(f"{arch}: no seed gave greedy gaps >= {MIN_GREEDY_GAP}")


if __name__ == "__main__":
    main()
