#!/usr/bin/env python3
"""The kernel timeline of one decode step, from a profiling build (cmake -DRADIXLM_KERNEL_TIMELINE=ON):

  RADIXLM_KERNEL_TIMELINE_OUT=/tmp/t.csv radixlm bench one-batch ... --output-len 8
  python3 tools/timeline.py /tmp/t.csv [--layer-from N] [--launches K]

Every block of every kernel that calls pdl_wait() left one row (kernels/cuda/pdl.h): the GPU's
global timer before and after its wait, its grid, and up to four marks (ns after the wait). A
kernel's blocks pass their wait only once every earlier kernel of the stream has ended, so the
gap between one launch's first wait-exit and the next launch's is what that launch adds to the
step on the critical path -- inside a CUDA graph, under programmatic dependent launch, where eager
per-kernel times (ncu) overstate it. Kernels launched without PDL or that never wait (cuBLAS,
sampling) leave no rows; their time lands in the gap of the launch before them.

Prints the launches from --layer-from on (K of them) and a summary by kernel (source file, grid):
launches, their share of the step, the mean gap and the mean marks (max over blocks)."""
import argparse
import collections
import csv
import math


def launches(rows):
    """Rows (sorted by t_wait) grouped into launches: consecutive rows of one (unit, grid,
    threads) until the grid's count of blocks is reached."""
    out = []
    for r in rows:
        sig = (r["unit"], r["grid"], r["threads"])
        if out and out[-1]["sig"] == sig and len(out[-1]["rows"]) < r["grid"]:
            out[-1]["rows"].append(r)
        else:
            out.append({"sig": sig, "rows": [r]})
    for l in out:
        rs = l["rows"]
        l["enter"] = min(r["t_enter"] for r in rs)
        l["wait"] = min(r["t_wait"] for r in rs)
        l["wait_last"] = max(r["t_wait"] for r in rs)
        l["marks"] = [max(r[f"mark{k}"] for r in rs) for k in range(4)]
        ends = [r["t_wait"] + r["mark3"] for r in rs if r["mark3"] > 0]
        l["end"] = max(ends) if ends else None
    for a, b in zip(out, out[1:]):
        a["gap"] = b["wait"] - a["wait"]
    if out:
        out[-1]["gap"] = (out[-1]["end"] or out[-1]["wait_last"]) - out[-1]["wait"]
    return out


def name(sig):
    unit, grid, threads = sig
    return f"{unit.replace('.cu', '')}[{grid}x{threads}]"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--layer-from", type=int, default=-1, help="first launch printed (default: the middle)")
    ap.add_argument("--launches", type=int, default=24, help="launches printed")
    args = ap.parse_args()
    rows = []
    with open(args.csv) as f:
        for r in csv.DictReader(f):
            rows.append({k: (v if k == "unit" else int(v)) for k, v in r.items()})
    rows.sort(key=lambda r: r["t_wait"])
    if not rows:
        raise SystemExit("no rows")
    ls = launches(rows)
    t0 = ls[0]["wait"]
    span = ls[-1]["wait"] + ls[-1]["gap"] - t0
    diffs = sorted({r["t_wait"] - rows[0]["t_wait"] for r in rows[:2000]})
    g = 0
    for d in diffs:
        g = math.gcd(g, d)
    print(f"{len(rows)} blocks in {len(ls)} launches; first wait-exit to last launch's end {span / 1e3:.1f} us; "
          f"timer granularity {g} ns")
    start = args.layer_from if args.layer_from >= 0 else len(ls) // 2
    print(f"\nlaunches {start}..{start + args.launches - 1} (us; 'gap': first wait-exit to the next launch's; "
          "'early': how long before its wait-exit the first block arrived; marks: max over blocks, after the wait)")
    print(f"{'#':>4} {'kernel':<44} {'at':>8} {'gap':>7} {'early':>7} {'spread':>7}  marks 0-3")
    for i in range(start, min(len(ls), start + args.launches)):
        l = ls[i]
        marks = " ".join(f"{m / 1e3:6.2f}" if m else "     -" for m in l["marks"])
        print(f"{i:>4} {name(l['sig']):<44} {(l['wait'] - t0) / 1e3:8.1f} {l['gap'] / 1e3:7.2f} "
              f"{(l['wait'] - l['enter']) / 1e3:7.2f} {(l['wait_last'] - l['wait']) / 1e3:7.2f}  {marks}")
    by = collections.OrderedDict()
    for l in ls:
        by.setdefault(l["sig"], []).append(l)
    print(f"\nby kernel (share of the {span / 1e3:.1f} us; means over launches, us)")
    print(f"{'kernel':<44} {'n':>4} {'total':>8} {'share':>6} {'gap':>7}  marks 0-3")
    for sig, group in sorted(by.items(), key=lambda kv: -sum(l["gap"] for l in kv[1])):
        total = sum(l["gap"] for l in group)
        marks = " ".join(f"{sum(l['marks'][k] for l in group) / len(group) / 1e3:6.2f}" for k in range(4))
        print(f"{name(sig):<44} {len(group):>4} {total / 1e3:8.1f} {total / span:6.1%} {total / len(group) / 1e3:7.2f}  {marks}")


if __name__ == "__main__":
    main()
