#!/usr/bin/env python3
"""Writes the FP8 checkpoint fixtures under tests/data/fp8/ (the only way they are made) and their
reference logits, for tests/unit/fp8_checkpoint_test.cpp.

Each fixture is a tiny model from tests/golden/ (or, for the MoE fixture, a tiny random model made
here) whose projections (q/k/v/o, gate/up/down, MoE experts) are quantized to float8_e4m3fn in one
of the published layouts:
  qwen3_fp8_block            Hugging Face `quant_method: fp8`, block scales `weight_scale_inv`
                             (weight_block_size 64 x 64 here: the layout of Qwen3-*-FP8 and
                             DeepSeek checkpoints, which use 128 x 128, at a block the tiny shapes
                             have several of), dynamic activations
  llama_ct_channel_dynamic   compressed-tensors, per-channel `weight_scale` [n, 1], dynamic
                             per-token activations (RedHatAI *-FP8-dynamic)
  llama_ct_tensor_static     compressed-tensors, per-tensor `weight_scale` [1], static per-tensor
                             `input_scale` [1], FP8 KV cache with `self_attn.k_scale` / `v_scale`
  llama_modelopt             ModelOpt (nvidia/*-FP8): per-tensor scalar `weight_scale` and static
                             `input_scale`, `k_proj.k_scale` / `v_proj.v_scale`, and
                             hf_quant_config.json
  qwen3moe_fp8_block         Qwen3MoeForCausalLM (a random model of MOE_CONFIG: hidden 256, 8
                             experts of moe_intermediate_size 128, top-2, 2 layers) in the
                             Qwen/Qwen3-30B-A3B-FP8 layout: `quant_method: fp8`, 128 x 128 block
                             scales `weight_scale_inv` on the attention projections and on every
                             expert's gate/up/down_proj (per expert, as the published checkpoints
                             store them); the router `mlp.gate` stays unquantized (bfloat16 here)
Scales: weights max|w| / 448 per block, channel or tensor; static input scales and KV scales are
calibrated as max|x| / 448 over the prompts on the unquantized model (forward hooks). The other
tensors (embeddings, norms, lm_head) are stored as bfloat16 to keep the files small.

The reference: transformers' own model class, in float32, loaded with the DEQUANTIZED weights
(float32(e4m3) * scale, the value the checkpoint stands for) and the stored bfloat16 tensors
upcast; activations are not quantized. (The MoE model is loaded with from_pretrained from a
float32 copy of those weights in a temporary directory, so that transformers maps the per-expert
checkpoint names onto its stacked expert parameters itself.) reference.json lists the prompts (the first three golden
prompts) and logits_<i>.f32 holds each prompt's logits [len, vocab].

Run from the repo root with torch + transformers + ml_dtypes (scripts/setup.sh --golden):
  .venv/bin/python tools/make_fp8_fixtures.py
The output is deterministic.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import tempfile

import numpy as np
import torch
import transformers
from safetensors.numpy import load_file
from safetensors.torch import save_file

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
GOLDEN = os.path.join(ROOT, "tests", "golden")
OUT = os.path.join(ROOT, "tests", "data", "fp8")
E4M3_MAX = 448.0
PROJ = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
        "mlp.up_proj", "mlp.down_proj"]
EXPERT_PROJ = re.compile(r"\.mlp\.experts\.\d+\.(gate|up|down)_proj\.weight$")
NUM_PROMPTS = 3

FIXTURES = [
    # name, base golden (None: the random MoE model of MOE_CONFIG), layout, block size
    ("qwen3_fp8_block", "qwen3_gqa1_hd64_f16_tied", "block", 64),
    ("llama_ct_channel_dynamic", "llama_gqa1_hd64", "ct_channel", 0),
    ("llama_ct_tensor_static", "llama_gqa1_hd64", "ct_tensor_static", 0),
    ("llama_modelopt", "llama_gqa1_hd64", "modelopt", 0),
    ("qwen3moe_fp8_block", None, "block", 128),
]

# The random Qwen3-MoE model (a Qwen3-30B-A3B in miniature: every layer sparse, top-k renormalised).
MOE_CONFIG = {
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "vocab_size": 256,
    "hidden_size": 256, "intermediate_size": 384, "moe_intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64, "num_experts": 8,
    "num_experts_per_tok": 2, "norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": [],
    "hidden_act": "silu", "max_position_embeddings": 256, "rms_norm_eps": 1e-6,
    "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"},
    "attention_bias": False, "tie_word_embeddings": False, "dtype": "float32",
}
MOE_SEED = 6001
MOE_PROMPT_LENGTHS = [1, 6, 40]
EMBED_STD, LINEAR_STD, NORM_NOISE_STD = 0.3, 0.08, 0.1


def to_e4m3(x: np.ndarray) -> torch.Tensor:
    """float32 -> float8_e4m3fn, saturating at +-448 (torch rounds to nearest even)."""
    return torch.from_numpy(np.clip(x, -E4M3_MAX, E4M3_MAX).astype(np.float32)).to(torch.float8_e4m3fn)


def amax_scale(a: np.ndarray) -> np.float32:
    m = np.float32(np.max(np.abs(a))) if a.size else np.float32(0)
    return np.float32(m / np.float32(E4M3_MAX)) if m > 0 else np.float32(1)


def quantize(w: np.ndarray, layout: str, block: int):
    """Returns (e4m3 weight, scale array, dequantized float32 weight)."""
    n, k = w.shape
    if layout == "block":
        nb, kb = -(-n // block), -(-k // block)
        s = np.empty((nb, kb), np.float32)
        for i in range(nb):
            for j in range(kb):
                s[i, j] = amax_scale(w[i * block:(i + 1) * block, j * block:(j + 1) * block])
        full = np.repeat(np.repeat(s, block, 0), block, 1)[:n, :k]
    elif layout == "ct_channel":
        s = np.array([amax_scale(w[j]) for j in range(n)], np.float32).reshape(n, 1)
        full = np.broadcast_to(s, (n, k))
    else:  # per tensor (ct_tensor_static: shape [1]; modelopt: a scalar)
        s = np.array(amax_scale(w), np.float32)
        full = np.broadcast_to(s, (n, k))
    q = to_e4m3((w / full).astype(np.float32))
    deq = (q.to(torch.float32).numpy() * full).astype(np.float32)
    if layout == "ct_tensor_static":
        s = s.reshape(1)
    return q, s, deq


def build_model(config: dict, state: dict):
    cfg = transformers.AutoConfig.for_model(**{k: v for k, v in config.items() if k != "quantization_config"})
    cfg._attn_implementation = "eager"
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    missing, unexpected = model.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in state.items()},
                                                strict=False)
    missing = [m for m in missing if not (m == "lm_head.weight" and cfg.tie_word_embeddings)]
    assert not missing and not unexpected, (missing, unexpected)
    if cfg.tie_word_embeddings:
        model.tie_weights()
    return model.eval()


def random_moe_model():
    """MOE_CONFIG's checkpoint tensors (per-expert names, as published checkpoints store them),
    float32, from one seeded generator in sorted name order, and prompts."""
    c = MOE_CONFIG
    h, d, e, inter, v = c["hidden_size"], c["head_dim"], c["num_experts"], c["moe_intermediate_size"], c["vocab_size"]
    shapes = {"model.embed_tokens.weight": (v, h), "lm_head.weight": (v, h), "model.norm.weight": (h,)}
    for l in range(c["num_hidden_layers"]):
        p = f"model.layers.{l}"
        shapes.update({
            f"{p}.input_layernorm.weight": (h,), f"{p}.post_attention_layernorm.weight": (h,),
            f"{p}.self_attn.q_proj.weight": (c["num_attention_heads"] * d, h),
            f"{p}.self_attn.k_proj.weight": (c["num_key_value_heads"] * d, h),
            f"{p}.self_attn.v_proj.weight": (c["num_key_value_heads"] * d, h),
            f"{p}.self_attn.o_proj.weight": (h, c["num_attention_heads"] * d),
            f"{p}.self_attn.q_norm.weight": (d,), f"{p}.self_attn.k_norm.weight": (d,),
            f"{p}.mlp.gate.weight": (e, h)})
        for x in range(e):
            shapes.update({f"{p}.mlp.experts.{x}.gate_proj.weight": (inter, h),
                           f"{p}.mlp.experts.{x}.up_proj.weight": (inter, h),
                           f"{p}.mlp.experts.{x}.down_proj.weight": (h, inter)})
    rng = np.random.default_rng(MOE_SEED)
    weights = {}
    for name in sorted(shapes):
        noise = rng.standard_normal(shapes[name]).astype(np.float32)
        if "norm" in name:
            weights[name] = (1.0 + noise * NORM_NOISE_STD).astype(np.float32)
        elif "embed_tokens" in name:
            weights[name] = (noise * EMBED_STD).astype(np.float32)
        else:
            weights[name] = (noise * LINEAR_STD).astype(np.float32)
    prompts = [rng.integers(0, c["vocab_size"], n).tolist() for n in MOE_PROMPT_LENGTHS]
    return dict(c), weights, prompts


def build_pretrained(config: dict, state: dict):
    """transformers' model from a float32 checkpoint directory of `state` (its own name mapping)."""
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "config.json"), "w") as f:
            json.dump({k: v for k, v in config.items() if k != "quantization_config"}, f)
        save_file({k: torch.from_numpy(np.ascontiguousarray(v, np.float32)) for k, v in state.items()},
                  os.path.join(tmp, "model.safetensors"), metadata={"format": "pt"})
        model, info = transformers.AutoModelForCausalLM.from_pretrained(
            tmp, dtype=torch.float32, attn_implementation="eager", output_loading_info=True)
    bad = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
    assert not bad, bad
    return model.eval()


def check_transformers_fp8_loading(out: str, cases: list) -> None:
    """transformers' own loading of the written FP8 checkpoint (FineGrainedFP8Config(dequantize=True):
    its conversion of the per-expert e4m3 tensors and weight_scale_inv blocks, in float32) must give
    the reference logits exactly. Needs accelerate; skipped (with a note) without it."""
    if importlib.util.find_spec("accelerate") is None:
        print("  (accelerate not installed: transformers' FP8 loading of the fixture not cross-checked)")
        return
    qc = transformers.FineGrainedFP8Config(dequantize=True)
    model = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, quantization_config=qc,
                                                              attn_implementation="eager").eval()
    worst = 0.0
    with torch.no_grad():
        for c in cases:
            want = np.fromfile(os.path.join(out, c["logits_file"]), "<f4").reshape(c["logits_shape"])
            got = model(torch.tensor([c["prompt_ids"]])).logits[0].to(torch.float32).numpy()
            worst = max(worst, float(np.abs(got - want).max()))
    assert worst <= 1e-5, f"transformers' FP8 loading of {out} differs from the reference by {worst}"
    print(f"  transformers' FP8 loading (dequantize=True) matches the reference: max |diff| {worst:.1e}")


def calibrate(model, prompts, num_layers):
    """max|input| of every projection and max|k|, max|v| (k_proj / v_proj outputs) per layer."""
    amax: dict[str, float] = {}
    hooks = []
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear) and any(name.endswith(p) for p in PROJ):
            def hook(m, inp, out, name=name):
                amax[name + ".in"] = max(amax.get(name + ".in", 0.0), float(inp[0].abs().max()))
                amax[name + ".out"] = max(amax.get(name + ".out", 0.0), float(out.abs().max()))
            hooks.append(mod.register_forward_hook(hook))
    with torch.no_grad():
        for p in prompts:
            model(torch.tensor([p]))
    for h in hooks:
        h.remove()
    return amax


def main():
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    index = []
    for name, base, layout, block in FIXTURES:
        if base is None:
            config, weights, prompts = random_moe_model()
        else:
            src = os.path.join(GOLDEN, base)
            config = json.load(open(os.path.join(src, "config.json")))
            golden = json.load(open(os.path.join(src, "golden.json")))
            prompts = [c["prompt_ids"] for c in golden["cases"][:NUM_PROMPTS]]
            weights = {k: v.astype(np.float32) for k, v in load_file(os.path.join(src, "model.safetensors")).items()}
        num_layers = config["num_hidden_layers"]
        amax = calibrate(build_model(config, weights), prompts, num_layers) if layout != "block" else {}

        stored: dict[str, torch.Tensor] = {}
        reference: dict[str, np.ndarray] = {}
        for key, w in sorted(weights.items()):
            proj = next((p for p in PROJ if key.endswith(p + ".weight")), None)
            if proj is None and EXPERT_PROJ.search(key):
                proj = key  # an expert's projection (the router, mlp.gate, stays unquantized)
            if proj is None:
                t = torch.from_numpy(w).to(torch.bfloat16)
                stored[key] = t
                reference[key] = t.to(torch.float32).numpy()
                continue
            prefix = key[: -len(".weight")]
            q, s, deq = quantize(w, layout, block)
            stored[key] = q
            reference[key] = deq
            scale_name = prefix + (".weight_scale_inv" if layout == "block" else ".weight_scale")
            stored[scale_name] = torch.from_numpy(np.ascontiguousarray(s))
            if layout in ("ct_tensor_static", "modelopt"):
                in_scale = np.float32(amax[prefix + ".in"] / E4M3_MAX)
                arr = np.array([in_scale], np.float32) if layout == "ct_tensor_static" else np.array(in_scale, np.float32)
                stored[prefix + ".input_scale"] = torch.from_numpy(arr)
        # KV-cache scales (per layer): max|k| and max|v| of the projections' outputs over 448, times 2
        # for the rotation and the norms that come after k_proj.
        if layout in ("ct_tensor_static", "modelopt"):
            for l in range(num_layers):
                p = f"model.layers.{l}.self_attn"
                ks = np.float32(2 * amax[p + ".k_proj.out"] / E4M3_MAX)
                vs = np.float32(amax[p + ".v_proj.out"] / E4M3_MAX)
                if layout == "ct_tensor_static":
                    stored[p + ".k_scale"] = torch.tensor([ks])
                    stored[p + ".v_scale"] = torch.tensor([vs])
                else:
                    stored[p + ".k_proj.k_scale"] = torch.tensor(ks)
                    stored[p + ".v_proj.v_scale"] = torch.tensor(vs)

        qc: dict
        if layout == "block":
            qc = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                  "weight_block_size": [block, block]}
        elif layout.startswith("ct_"):
            static = layout == "ct_tensor_static"
            qc = {"quant_method": "compressed-tensors", "format": "float-quantized", "quantization_status": "compressed",
                  "ignore": ["lm_head"],
                  "config_groups": {"group_0": {
                      "targets": ["Linear"],
                      "weights": {"num_bits": 8, "type": "float", "symmetric": True, "dynamic": False,
                                  "strategy": "tensor" if static else "channel"},
                      "input_activations": {"num_bits": 8, "type": "float", "symmetric": True, "dynamic": not static,
                                            "strategy": "tensor" if static else "token"}}}}
            if static:
                qc["kv_cache_scheme"] = {"num_bits": 8, "type": "float", "symmetric": True, "dynamic": False,
                                         "strategy": "tensor"}
        else:
            qc = {"quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_quant_algo": "FP8",
                  "exclude_modules": ["lm_head"]}

        out = os.path.join(OUT, name)
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        cfg_out = dict(config)
        cfg_out["quantization_config"] = qc
        cfg_out["dtype"] = "bfloat16"
        with open(os.path.join(out, "config.json"), "w") as f:
            json.dump(cfg_out, f, indent=2, sort_keys=True)
            f.write("\n")
        if layout == "modelopt":
            with open(os.path.join(out, "hf_quant_config.json"), "w") as f:
                json.dump({"producer": {"name": "modelopt"}, "quantization": {
                    "quant_algo": "FP8", "kv_cache_quant_algo": "FP8", "exclude_modules": ["lm_head"]}}, f, indent=2)
                f.write("\n")
        save_file(stored, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})

        model = build_model(config, reference) if base is not None else build_pretrained(config, reference)
        cases = []
        with torch.no_grad():
            for i, p in enumerate(prompts):
                logits = model(torch.tensor([p])).logits[0].to(torch.float32).numpy()
                logits.astype("<f4").tofile(os.path.join(out, f"logits_{i}.f32"))
                cases.append({"prompt_ids": p, "logits_file": f"logits_{i}.f32", "logits_shape": list(logits.shape)})
        with open(os.path.join(out, "reference.json"), "w") as f:
            json.dump({"name": name, "base": base or f"random (MOE_CONFIG, seed {MOE_SEED})", "layout": layout,
                       "transformers_version": transformers.__version__,
                       "torch_version": torch.__version__, "cases": cases}, f, indent=2)
            f.write("\n")
        if layout == "block" and base is None:
            check_transformers_fp8_loading(out, cases)
        index.append(name)
        print(f"wrote {os.path.relpath(out)}")
    with open(os.path.join(OUT, "index.json"), "w") as f:
        json.dump({"fixtures": index}, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
