#!/usr/bin/env python3
"""Writes the FP8 checkpoint fixtures under tests/data/fp8/ (the only way they are made) and their
reference logits, for tests/unit/fp8_checkpoint_test.cpp.

Each fixture is a tiny model from tests/golden/ whose projections (q/k/v/o, gate/up/down) are
quantized to float8_e4m3fn in one of the published layouts:
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
Scales: weights max|w| / 448 per block, channel or tensor; static input scales and KV scales are
calibrated as max|x| / 448 over the prompts on the unquantized model (forward hooks). The other
tensors (embeddings, norms, lm_head) are stored as bfloat16 to keep the files small.

The reference: transformers' own model class, in float32, loaded with the DEQUANTIZED weights
(float32(e4m3) * scale, the value the checkpoint stands for) and the stored bfloat16 tensors
upcast; activations are not quantized. reference.json lists the prompts (the first three golden
prompts) and logits_<i>.f32 holds each prompt's logits [len, vocab].

Run from the repo root with torch + transformers + ml_dtypes (scripts/setup.sh --golden):
  .venv/bin/python tools/make_fp8_fixtures.py
The output is deterministic.
"""
from __future__ import annotations

import json
import os
import shutil

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
NUM_PROMPTS = 3

FIXTURES = [
    # name, base golden, layout
    ("qwen3_fp8_block", "qwen3_gqa1_hd64_f16_tied", "block"),
    ("llama_ct_channel_dynamic", "llama_gqa1_hd64", "ct_channel"),
    ("llama_ct_tensor_static", "llama_gqa1_hd64", "ct_tensor_static"),
    ("llama_modelopt", "llama_gqa1_hd64", "modelopt"),
]
BLOCK = 64


def to_e4m3(x: np.ndarray) -> torch.Tensor:
    """float32 -> float8_e4m3fn, saturating at +-448 (torch rounds to nearest even)."""
    return torch.from_numpy(np.clip(x, -E4M3_MAX, E4M3_MAX).astype(np.float32)).to(torch.float8_e4m3fn)


def amax_scale(a: np.ndarray) -> np.float32:
    m = np.float32(np.max(np.abs(a))) if a.size else np.float32(0)
    return np.float32(m / np.float32(E4M3_MAX)) if m > 0 else np.float32(1)


def quantize(w: np.ndarray, layout: str):
    """Returns (e4m3 weight, scale array, dequantized float32 weight)."""
    n, k = w.shape
    if layout == "block":
        nb, kb = -(-n // BLOCK), -(-k // BLOCK)
        s = np.empty((nb, kb), np.float32)
        for i in range(nb):
            for j in range(kb):
                s[i, j] = amax_scale(w[i * BLOCK:(i + 1) * BLOCK, j * BLOCK:(j + 1) * BLOCK])
        full = np.repeat(np.repeat(s, BLOCK, 0), BLOCK, 1)[:n, :k]
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
    for name, base, layout in FIXTURES:
        src = os.path.join(GOLDEN, base)
        config = json.load(open(os.path.join(src, "config.json")))
        golden = json.load(open(os.path.join(src, "golden.json")))
        prompts = [c["prompt_ids"] for c in golden["cases"][:NUM_PROMPTS]]
        weights = {k: v.astype(np.float32) for k, v in load_file(os.path.join(src, "model.safetensors")).items()}
        num_layers = config["num_hidden_layers"]
        amax = calibrate(build_model(config, weights), prompts, num_layers)

        stored: dict[str, torch.Tensor] = {}
        reference: dict[str, np.ndarray] = {}
        for key, w in sorted(weights.items()):
            proj = next((p for p in PROJ if key.endswith(p + ".weight")), None)
            if proj is None:
                t = torch.from_numpy(w).to(torch.bfloat16)
                stored[key] = t
                reference[key] = t.to(torch.float32).numpy()
                continue
            prefix = key[: -len(".weight")]
            q, s, deq = quantize(w, layout)
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
                  "weight_block_size": [BLOCK, BLOCK]}
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

        model = build_model(config, reference)
        cases = []
        with torch.no_grad():
            for i, p in enumerate(prompts):
                logits = model(torch.tensor([p])).logits[0].to(torch.float32).numpy()
                logits.astype("<f4").tofile(os.path.join(out, f"logits_{i}.f32"))
                cases.append({"prompt_ids": p, "logits_file": f"logits_{i}.f32", "logits_shape": list(logits.shape)})
        with open(os.path.join(out, "reference.json"), "w") as f:
            json.dump({"name": name, "base": base, "layout": layout, "transformers_version": transformers.__version__,
                       "torch_version": torch.__version__, "cases": cases}, f, indent=2)
            f.write("\n")
        index.append(name)
        print(f"wrote {os.path.relpath(out)}")
    with open(os.path.join(OUT, "index.json"), "w") as f:
        json.dump({"fixtures": index}, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
