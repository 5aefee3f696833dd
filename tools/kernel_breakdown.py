#!/usr/bin/env python3
"""Per-kernel time of the decode (or prefill) steps in an Nsight Compute CSV (tools/kernel_breakdown.sh).

Usage: kernel_breakdown.py KERNELS.csv STEPS BATCH [decode|prefill]
The CSV holds one gpu__time_duration.sum row per kernel of STEPS decode (or prefill) steps (the
profiler range `bench one-batch` opens). Prints, per kernel name, launches per step, microseconds per step and
share of the step; exits 1 when the launches do not split into STEPS equal steps.
"""
import collections
import csv
import sys

UNIT_US = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "second": 1e6}


def read_kernels(path):
    out = []  # (name, microseconds) in launch order
    for r in csv.DictReader(open(path)):
        if r.get("Metric Name") == "gpu__time_duration.sum":
            v = float(r["Metric Value"].replace(",", "")) * UNIT_US.get(r.get("Metric Unit", "nsecond"), 1e-3)
            out.append((r["Kernel Name"].split("(")[0][:70], v))
    return out


def table(kernels, steps, batch, phase="decode"):
    t, n = collections.defaultdict(float), collections.Counter()
    for name, v in kernels:
        t[name] += v
        n[name] += 1
    total = sum(t.values())
    if not kernels or len(kernels) % steps:
        raise SystemExit(f"kernel_breakdown: {len(kernels)} kernels are not {steps} equal steps")
    lines = [f"batch {batch}: {total / steps:.1f} us of kernels per {phase} step ({len(kernels) // steps} launches)",
             f"{'kernel':<72} {'per step':>8} {'us/step':>9} {'share':>6}"]
    for name, v in sorted(t.items(), key=lambda kv: -kv[1]):
        lines.append(f"{name:<72} {n[name] / steps:>8.1f} {v / steps:>9.1f} {100 * v / total:>5.1f}%")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(read_kernels(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else "decode"))
