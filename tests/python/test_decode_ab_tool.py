"""tools/decode_ab.sh (same-run A/B of decode steps, docs/perf/decode_kernels.md) on the CPU with a
tiny golden model: every variant runs `bench one-batch` under its own settings and gets a row with
its median step and its ratio to the first variant; RLM=PATH among a variant's settings runs that
binary (a wrapper that records how it was called) without putting RLM in its environment; a
malformed variant is refused before anything runs."""
import os
import re
import stat
import subprocess

from server_util import limit

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "tools", "decode_ab.sh")
RADIXLM_BIN = os.path.abspath(os.environ.get("RADIXLM_BIN", "build/radixlm"))
MODEL = os.path.join(ROOT, "tests", "golden", "llama_gqa1_hd64")


def run(tmp_path, variants, rounds="1"):
    env = dict(os.environ, RLM=RADIXLM_BIN, DEVICE="cpu", MODEL=MODEL, VARIANTS=variants, BATCHES="1 2",
               ROUNDS=rounds, INPUT="8", STEPS="4", OUT=str(tmp_path / "out"))
    env.pop("RADIXLM_PROBE", None)
    return subprocess.run(["bash", SCRIPT], env=env, capture_output=True, text=True, timeout=limit(300))


def test_variants_run_their_own_binary_and_settings(tmp_path):
    calls = tmp_path / "calls.log"
    wrapper = tmp_path / "wrap.sh"
    wrapper.write_text(f'#!/bin/sh\necho "probe=${{RADIXLM_PROBE:-unset}} rlm=${{RLM:-unset}}" >> {calls}\n'
                       f'exec {RADIXLM_BIN} "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    p = run(tmp_path, f"plain: wrapped:RLM={wrapper},RADIXLM_PROBE=7", rounds="2")
    assert p.returncode == 0, p.stderr
    rows = [line.split() for line in p.stdout.splitlines()[1:]]
    assert [(r[0], r[1]) for r in rows] == [("1", "plain"), ("1", "wrapped"), ("2", "plain"), ("2", "wrapped")]
    for r in rows:
        assert float(r[2]) > 0 and len(r) == 6  # batch, label, median, ratio, two rounds
    assert rows[0][3] == "1.000" and rows[2][3] == "1.000"
    assert abs(float(rows[1][3]) - float(rows[1][2]) / float(rows[0][2])) < 2e-3
    # The wrapper ran once per batch and round (the plain variant never), with the variant's
    # setting and without its RLM (the script's own RLM, the real binary, is what it inherits).
    assert calls.read_text().splitlines() == [f"probe=7 rlm={RADIXLM_BIN}"] * 4
    logs = sorted(os.listdir(tmp_path / "out"))
    assert "b1_wrapped_r2.log" in logs and "b2_plain_r1.log" in logs
    assert re.search(r"^decode step \(", (tmp_path / "out" / "b2_wrapped_r1.log").read_text(), re.M)


def test_a_missing_binary_fails_its_rows_and_a_bad_variant_is_refused(tmp_path):
    p = run(tmp_path, f"ok: gone:RLM={tmp_path / 'nonexistent'}")
    assert p.returncode == 1
    assert "batch 1 gone round 1 failed" in p.stderr
    assert [line.split()[1:3] for line in p.stdout.splitlines()[1:] if line.split()[1] == "gone"] == [
        ["gone", "failed"], ["gone", "failed"]]
    p = run(tmp_path, "bad-variant-without-colon")
    assert p.returncode == 2 and "is not label:ENV=VALUE" in p.stderr
