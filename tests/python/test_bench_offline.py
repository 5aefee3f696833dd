"""`radixlm bench offline` on a tiny golden model (CPU): the generated dataset respects the length
flags, a dataset written with --dataset-out runs again with --dataset and gives the same token
counts, and malformed datasets are rejected with a clear message; `radixlm bench one-batch` reserves
the KV pages of the run, not of the context length."""
import json
import os
import subprocess
from server_util import limit

RADIXLM_BIN = os.environ.get("RADIXLM_BIN", "build/radixlm")
MODEL = "tests/golden/qwen3_gqa2_hd128"


def bench(*args):
    return subprocess.run([RADIXLM_BIN, "bench", "offline", "--model", MODEL, "--load-format", "auto", "--device", "cpu",
                           *args], capture_output=True, text=True, timeout=limit(300))


def test_dataset_round_trip(tmp_path):
    ds, res1, res2 = tmp_path / "ds.json", tmp_path / "r1.json", tmp_path / "r2.json"
    p = bench("--num-prompts", "6", "--input-len", "30", "--output-len", "12", "--random-range-ratio", "0.5",
              "--max-running-requests", "4", "--dataset-out", str(ds), "--result-out", str(res1))
    assert p.returncode == 0, p.stderr
    data = json.loads(ds.read_text())
    assert len(data["prompts"]) == 6 and len(data["output_lens"]) == 6
    assert all(15 <= len(x) <= 30 for x in data["prompts"])
    assert all(6 <= n <= 12 for n in data["output_lens"])
    r1 = json.loads(res1.read_text())
    assert r1["total_input_tokens"] == sum(len(x) for x in data["prompts"])
    assert r1["total_output_tokens"] == sum(data["output_lens"])
    assert r1["num_requests"] == 6 and r1["duration_s"] > 0
    assert abs(r1["output_throughput"] * r1["duration_s"] - r1["total_output_tokens"]) < 1e-6 * r1["total_output_tokens"]
    p = bench("--dataset", str(ds), "--result-out", str(res2), "--max-running-requests", "2")
    assert p.returncode == 0, p.stderr
    r2 = json.loads(res2.read_text())
    assert (r2["total_input_tokens"], r2["total_output_tokens"]) == (r1["total_input_tokens"], r1["total_output_tokens"])


def test_bad_datasets(tmp_path):
    cases = {
        "not json": "{",
        "missing keys": json.dumps({"prompts": [[1, 2]]}),
        "length mismatch": json.dumps({"prompts": [[1, 2]], "output_lens": [3, 4]}),
        "token outside vocab": json.dumps({"prompts": [[1, 100000]], "output_lens": [3]}),
        "empty prompt": json.dumps({"prompts": [[]], "output_lens": [3]}),
    }
    for name, text in cases.items():
        f = tmp_path / "bad.json"
        f.write_text(text)
        p = bench("--dataset", str(f))
        assert p.returncode == 1, name
        assert "radixlm bench offline:" in p.stderr and "bad.json" in p.stderr, (name, p.stderr)


def test_one_batch_reserves_the_run_not_the_context_length():
    """`bench one-batch` gives each request the KV pages its input + output tokens fill: with a
    --context-length four times the run's length and a pool that holds the run but not the batch x
    the context length, it runs; a pool too small for the run itself is refused with the sizes."""
    def one_batch(total_tokens):
        return subprocess.run([RADIXLM_BIN, "bench", "one-batch", "--model", MODEL, "--load-format", "auto",
                               "--device", "cpu", "--threads", "1", "--batch-size", "4", "--input-len", "48",
                               "--output-len", "16", "--context-length", "256", "--max-total-tokens",
                               str(total_tokens)], capture_output=True, text=True, timeout=limit(300))
    p = one_batch(512)  # the run: 4 x 64 tokens; 4 x 256 would not fit
    assert p.returncode == 0, p.stderr
    p = one_batch(128)
    assert p.returncode == 1 and "the KV pool holds" in p.stderr and "but the batch needs" in p.stderr, p.stderr
