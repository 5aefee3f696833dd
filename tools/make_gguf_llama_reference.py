#!/usr/bin/env python3
"""Reference values for the real SmolLM2 GGUF (models/SmolLM2-135M-Instruct.Q4_1.gguf).

Writes two files under tests/data/gguf/:
  smollm2_expected.json     read with the `gguf` package: header/metadata summary and, for a few
                            tensors under their GGUF names, shape, type and checksums of
                            gguf.quants.dequantize (raw GGUF layout, q/k still permuted)
  smollm2_hf_expected.json  loaded with transformers (AutoModelForCausalLM.from_pretrained(...,
                            gguf_file=...), which dequantizes and un-permutes q/k): the config and,
                            for selected Hugging Face tensor names, shape, sum, sum |x|, per-row
                            sums and the first values of a few rows; the logits of a chat
                            prompt (argmax per position, a strided sample of the vocab per
                            position, and the whole last row in smollm2_hf_last_logits.bin)
                            and 16 greedy tokens

Rerun:  .venv/bin/python tools/make_gguf_llama_reference.py [models_dir]
"""
import json
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "gguf")
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MAX_ROW_SUMS = 2048  # per-row sums for tensors with at most this many rows
HEAD_VALUES = 16     # values written for each sampled row
LOGIT_STRIDE = 193   # every 193rd vocab entry of each prompt position's logits


def summarize(x: np.ndarray) -> dict:
    x = np.asarray(x, dtype=np.float32)
    rows = x.reshape(-1, x.shape[-1]) if x.ndim > 1 else x.reshape(1, -1)
    n = rows.shape[0]
    sample = sorted({min(r, n - 1) for r in (0, 1, 63, 64, 65)} | {n // 2, n - 1})
    out = {
        "shape": list(x.shape),
        "sum": float(rows.astype(np.float64).sum()),
        "sum_abs": float(np.abs(rows.astype(np.float64)).sum()),
        "rows": {str(r): [float(v) for v in rows[r, :HEAD_VALUES]] for r in sample},
    }
    if n <= MAX_ROW_SUMS:
        out["row_sums"] = [float(s) for s in rows.astype(np.float64).sum(axis=1)]
    return out


def gguf_reference(path: str) -> dict:
    import gguf

    r = gguf.GGUFReader(path)
    names = ["token_embd.weight", "blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.attn_norm.weight",
             "blk.29.ffn_down.weight", "output_norm.weight"]
    tensors = {}
    by_name = {t.name: t for t in r.tensors}
    for name in names:
        t = by_name[name]
        deq = gguf.quants.dequantize(t.data, t.tensor_type)
        # GGUFReader's shape is innermost first; ours is row-major.
        shape = [int(d) for d in reversed(t.shape.tolist())]
        entry = summarize(deq.reshape(shape))
        entry["type"] = t.tensor_type.name
        tensors[name] = entry
    fields = {k: f for k, f in r.fields.items() if not k.startswith("GGUF.")}
    return {
        "version": int(r.fields["GGUF.version"].parts[-1][0]),
        "tensor_count": len(r.tensors),
        "kv_count": len(fields),
        "keys": list(fields.keys()),
        "tensor_names": [t.name for t in r.tensors],
        "token_count": len(r.fields["tokenizer.ggml.tokens"].data),
        "token_samples": {str(i): r.fields["tokenizer.ggml.tokens"].contents(i) for i in (0, 1, 2, 100, 49151)},
        "tensors": tensors,
    }


def hf_reference(models_dir: str) -> dict:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    # The same path AutoModelForCausalLM.from_pretrained(models_dir, gguf_file=...) takes (config from
    # the GGUF metadata, tensors dequantized and q/k un-permuted by load_gguf_checkpoint), without
    # from_pretrained's dependency on `accelerate`.
    config = AutoConfig.from_pretrained(models_dir, gguf_file=GGUF_NAME)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    ckpt = load_gguf_checkpoint(os.path.join(models_dir, GGUF_NAME), return_tensors=True, model_to_load=model)
    missing, unexpected = model.load_state_dict(ckpt["tensors"], strict=False)
    assert not unexpected, unexpected
    assert set(missing) <= {"lm_head.weight"}, missing
    model.tie_weights()
    c = model.config
    rope = getattr(c, "rope_parameters", None) or {}
    config = {
        "architectures": [type(model).__name__],
        "model_type": c.model_type,
        "vocab_size": c.vocab_size,
        "hidden_size": c.hidden_size,
        "intermediate_size": c.intermediate_size,
        "num_hidden_layers": c.num_hidden_layers,
        "num_attention_heads": c.num_attention_heads,
        "num_key_value_heads": c.num_key_value_heads,
        "head_dim": getattr(c, "head_dim", c.hidden_size // c.num_attention_heads),
        "max_position_embeddings": c.max_position_embeddings,
        "rms_norm_eps": c.rms_norm_eps,
        "rope_theta": rope.get("rope_theta", getattr(c, "rope_theta", None)),
        "rope_type": rope.get("rope_type", "default"),
        "tie_word_embeddings": c.tie_word_embeddings,
        "bos_token_id": c.bos_token_id,
        "eos_token_id": c.eos_token_id,
        "pad_token_id": c.pad_token_id,
    }
    state = model.state_dict()
    names = ["model.embed_tokens.weight", "model.norm.weight"]
    for layer in (0, 15, 29):
        for proj in ("self_attn.q_proj", "self_attn.k_proj"):
            names.append(f"model.layers.{layer}.{proj}.weight")
    for layer in (0, 29):
        for proj in ("self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj",
                     "input_layernorm", "post_attention_layernorm"):
            names.append(f"model.layers.{layer}.{proj}.weight")
    tensors = {n: summarize(state[n].detach().cpu().numpy()) for n in names}
    # lm_head is tied to the embedding when the GGUF has no output.weight.
    lm_head_tied = bool(model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr())
    # Logits and greedy tokens for a chat prompt.
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(models_dir, gguf_file=GGUF_NAME)
    prompt = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                     add_generation_prompt=True)
    prompt = list(prompt["input_ids"] if isinstance(prompt, dict) or hasattr(prompt, "keys") else prompt)
    model.eval()
    with torch.no_grad():
        logits = model(torch.tensor([prompt])).logits[0].float().numpy()
        out = model.generate(torch.tensor([prompt]), max_new_tokens=16, do_sample=False, eos_token_id=None,
                             pad_token_id=c.pad_token_id)
    with open(os.path.join(OUT, "smollm2_hf_last_logits.bin"), "wb") as f:
        f.write(logits[-1].astype("<f4").tobytes())
    logits_ref = {
        "prompt_ids": [int(t) for t in prompt],
        "argmax": [int(t) for t in logits.argmax(axis=-1)],
        "vocab_stride": LOGIT_STRIDE,
        "sampled": [[float(v) for v in row[::LOGIT_STRIDE]] for row in logits],
        "last_row_file": "smollm2_hf_last_logits.bin",
        "greedy_ids": [int(t) for t in out[0, len(prompt):]],
    }
    return {"config": config, "lm_head_tied": lm_head_tied, "tensors": tensors, "logits": logits_ref}


def main() -> None:
    models_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "models")
    path = os.path.join(models_dir, GGUF_NAME)
    os.makedirs(OUT, exist_ok=True)
    for out_name, data in (("smollm2_expected.json", gguf_reference(path)),
                           ("smollm2_hf_expected.json", hf_reference(models_dir))):
        data = {"file": GGUF_NAME, **data}
        out = os.path.join(OUT, out_name)
        with open(out, "w", encoding="utf-8") as f:
            json.dump(data, f, ensure_ascii=False)
            f.write("\n")
        print(f"wrote {out} ({os.path.getsize(out)} bytes)")


if __name__ == "__main__":
    main()
