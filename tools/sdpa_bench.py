#!/usr/bin/env python3
"""PyTorch SDPA (flash backend, causal) TFLOP/s on the shapes of `radixlm bench attention`'s prefill
runs, printed as JSON, so that the ratio ours / SDPA can be taken in the same session on the same GPU.

Shapes: for each length L, batch = max(1, tokens // L) fresh causal prompts, num_qo_heads query
heads, num_kv_heads KV heads (GQA through enable_gqa; if the flash backend refuses that, K and V are
expanded to num_qo_heads heads first, which changes no FLOPs), head_dim, bf16 (or f16) inputs.
FLOPs = 4 * num_qo_heads * head_dim * batch * L * (L + 1) / 2, the count radixlm's bench uses.
Times: median of --iters runs bracketed by CUDA events after warm-up; inputs random normal.

Usage: python3 tools/sdpa_bench.py [--lens 1024,4096] [--tokens 16384] [--json out.json]
"""
import argparse
import json
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def median_seconds(fn, iters):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / 1e3)
    return statistics.median(times)


def run(length, args, dtype):
    batch = max(1, args.tokens // length)
    hq, hk, d = args.num_qo_heads, args.num_kv_heads, args.head_dim
    q = torch.randn(batch, hq, length, d, device="cuda", dtype=dtype)
    k = torch.randn(batch, hk, length, d, device="cuda", dtype=dtype)
    v = torch.randn(batch, hk, length, d, device="cuda", dtype=dtype)
    mode = "enable_gqa"

    def call_gqa():
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=hq != hk)

    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        fn = call_gqa
        try:
            fn()
            torch.cuda.synchronize()
        except RuntimeError as e:  # flash without GQA support: expand K/V (same FLOPs)
            print(f"note: enable_gqa refused ({str(e).splitlines()[0]}); expanding K/V", file=sys.stderr)
            ke = k.repeat_interleave(hq // hk, dim=1)
            ve = v.repeat_interleave(hq // hk, dim=1)
            mode = "expanded_kv"

            def fn():
                return F.scaled_dot_product_attention(q, ke, ve, is_causal=True)

        t = median_seconds(fn, args.iters)
    flops = 4.0 * hq * d * batch * length * (length + 1) / 2.0
    return {"seq_len": length, "batch": batch, "ms": t * 1e3, "tflops": flops / t / 1e12, "gqa": mode}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lens", default="1024,4096")
    p.add_argument("--tokens", type=int, default=16384)
    p.add_argument("--num-qo-heads", type=int, default=32)
    p.add_argument("--num-kv-heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--dtype", choices=["bf16", "f16"], default="bf16")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--json", default="")
    args = p.parse_args()
    if not torch.cuda.is_available():
        print("sdpa_bench: no CUDA device", file=sys.stderr)
        return 2
    if args.num_qo_heads % args.num_kv_heads:
        print("sdpa_bench: --num-qo-heads must be a multiple of --num-kv-heads", file=sys.stderr)
        return 2
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    torch.manual_seed(0)
    result = {
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "backend": "flash",
        "dtype": args.dtype,
        "num_qo_heads": args.num_qo_heads,
        "num_kv_heads": args.num_kv_heads,
        "head_dim": args.head_dim,
        "prefill": [run(int(x), args, dtype) for x in args.lens.split(",") if x],
    }
    for r in result["prefill"]:
        print(f"sdpa flash causal len {r['seq_len']} batch {r['batch']}: {r['ms']:.3f} ms, {r['tflops']:.1f} TFLOP/s "
              f"({r['gqa']})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
