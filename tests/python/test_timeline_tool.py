"""tools/timeline.py (the kernel timeline of a profiling build, docs/perf/decode_kernels.md): rows
are grouped into launches by (unit, grid, threads) and grid size, and each launch's cost is the gap
to the next launch's first wait-exit (the last one: its latest end mark). Synthetic dumps whose
answers follow from their construction; a run of the script on one of them."""
import csv
import importlib.util
import os
import random
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "tools", "timeline.py")
FIELDS = ["unit", "grid", "block", "threads", "sm", "t_enter", "t_wait", "mark0", "mark1", "mark2", "mark3"]


def load():
    spec = importlib.util.spec_from_file_location("timeline", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def make(launch_specs, rng):
    """launch_specs: (unit, grid, threads, first_wait, end_after_wait or 0). Blocks of a launch
    leave their wait within 100 ns of the first, arrive up to 2 us before it, in random order."""
    rows = []
    for unit, grid, threads, wait, end in launch_specs:
        for b in range(grid):
            w = wait + (0 if b == 0 else rng.randrange(1, 100))
            rows.append({"unit": unit, "grid": grid, "block": b, "threads": threads, "sm": b % 132,
                         "t_enter": w - rng.randrange(0, 2000), "t_wait": w, "mark0": 0, "mark1": 0,
                         "mark2": 0, "mark3": end - (w - wait) if end else 0})
    rng.shuffle(rows)
    rows.sort(key=lambda r: r["t_wait"])
    return rows


def test_launches_are_split_by_signature_and_grid_size_and_gaps_follow():
    rng = random.Random(7)
    tl = load()
    # Two back-to-back launches of the same kernel (same signature) must stay two launches.
    specs = [("gemv.cu", 3, 256, 10_000, 9_000), ("gemv.cu", 3, 256, 20_000, 4_000),
             ("rms_norm.cu", 1, 256, 30_000, 1_500), ("paged_attention_decode.cu", 5, 128, 33_000, 12_000)]
    ls = tl.launches(make(specs, rng))
    assert [l["sig"] for l in ls] == [(u, g, t) for u, g, t, _, _ in specs]
    assert [len(l["rows"]) for l in ls] == [3, 3, 1, 5]
    assert [l["gap"] for l in ls] == [10_000, 10_000, 3_000, 12_000]
    assert all(l["wait"] == w for l, (_, _, _, w, _) in zip(ls, specs))


def test_the_script_prints_the_launches_and_the_summary(tmp_path):
    rng = random.Random(11)
    specs = [("rms_norm.cu", 1, 256, 1_000, 1_000), ("gemv.cu", 4, 256, 6_000, 20_000),
             ("rms_norm.cu", 1, 256, 27_000, 1_000), ("gemv.cu", 4, 256, 32_000, 20_000)]
    path = tmp_path / "t.csv"
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(make(specs, rng))
    out = subprocess.run([sys.executable, SCRIPT, str(path), "--layer-from", "0", "--launches", "4"],
                         capture_output=True, text=True, check=True).stdout
    assert "10 blocks in 4 launches" in out
    assert "first wait-exit to last launch's end 51.0 us" in out  # 1 us .. 32 us + 20 us
    summary = out.split("by kernel")[1]
    gemv = next(line for line in summary.splitlines() if line.startswith("gemv[4x256]"))
    assert gemv.split()[1:5] == ["2", "41.0", "80.4%", "20.50"]  # gaps 21 and 20 us
