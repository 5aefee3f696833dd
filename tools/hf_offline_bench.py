#!/usr/bin/env python3
"""Offline throughput of Hugging Face `transformers.generate` on the same work as
`radixlm bench offline` (the reference for its offline-throughput ratio, docs/perf/).

Reads the dataset JSON written by `radixlm bench offline --dataset-out FILE` (token-id prompts and
per-request output lengths), builds the model from a directory (weights when present, otherwise
random weights from config.json, like radixlm's `--load-format dummy`), and runs greedy
`generate` in batches of --batch-size requests (left padding, in dataset order, every request of a
batch generating the batch's longest output length with EOS ignored). Only the requested output
tokens count as output. Prints one JSON object with the same keys as radixlm's --result-out.

  .venv/bin/python tools/hf_offline_bench.py --model configs/qwen3-0.6b --dataset ds.json \
      --device cuda --dtype bfloat16 --batch-size 64 [--result-out hf.json]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch
import transformers


def load_model(path: str, dtype: torch.dtype, device: str):
    config = transformers.AutoConfig.from_pretrained(path)
    has_weights = any(f.endswith((".safetensors", ".bin")) for f in os.listdir(path))
    if has_weights:
        model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    else:
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model.to(device).eval(), config


def run(model, prompts, output_lens, batch_size: int, device: str, pad_id: int) -> None:
    for start in range(0, len(prompts), batch_size):
        batch = prompts[start:start + batch_size]
        new_tokens = max(output_lens[start:start + batch_size])
        width = max(len(p) for p in batch)
        ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for i, p in enumerate(batch):
            ids[i, width - len(p):] = torch.tensor(p)
            mask[i, width - len(p):] = 1
        with torch.no_grad():
            out = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), do_sample=False,
                                 max_new_tokens=new_tokens, min_new_tokens=new_tokens, pad_token_id=pad_id,
                                 eos_token_id=None)
        if out.shape[1] != width + new_tokens:
            raise RuntimeError(f"generate returned {out.shape[1] - width} new tokens, wanted {new_tokens}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--result-out", default="")
    args = ap.parse_args()

    with open(args.dataset) as f:
        data = json.load(f)
    prompts, output_lens = data["prompts"], data["output_lens"]
    if len(prompts) != len(output_lens) or not prompts:
        print(f"{args.dataset}: {len(prompts)} prompts but {len(output_lens)} output lengths", file=sys.stderr)
        return 1
    model, config = load_model(args.model, getattr(torch, args.dtype), args.device)
    pad_id = 0
    # Warm-up on the first request (kernel selection, allocator), like radixlm's warm-up.
    run(model, prompts[:1], output_lens[:1], 1, args.device, pad_id)
    if args.device.startswith("cuda"):
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    run(model, prompts, output_lens, args.batch_size, args.device, pad_id)
    if args.device.startswith("cuda"):
        torch.cuda.synchronize()
    secs = time.perf_counter() - t0
    n_in = sum(len(p) for p in prompts)
    n_out = sum(output_lens)
    result = {
        "backend": f"transformers {transformers.__version__} generate (batch {args.batch_size})",
        "model": config.architectures[0] if config.architectures else config.model_type,
        "device": args.device,
        "num_requests": len(prompts),
        "total_input_tokens": n_in,
        "total_output_tokens": n_out,
        "duration_s": secs,
        "request_throughput": len(prompts) / secs,
        "input_throughput": n_in / secs,
        "output_throughput": n_out / secs,
        "total_throughput": (n_in + n_out) / secs,
    }
    print(json.dumps(result, indent=1))
    if args.result_out:
        with open(args.result_out, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
