"""Tensor parallelism through `radixlm serve` on the CPU: each tiny golden model (tests/golden:
Llama, Qwen2, Qwen3, Qwen3-Next) served with --tp 2 and --tp 4 (rank processes over loopback) answers the same
greedy tokens as --tp 1, with logprobs within 1e-4, for prompts that share prefixes (the radix
cache serves them: cached_tokens > 0). A rank process that dies ends the server with a clear error
instead of a hang.

RADIXLM_TP_TEST_DEVICE=cuda runs the same tests on GPUs (one rank per GPU, at most
RADIXLM_TP_TEST_GPUS of them, default 2; the two-machine tests give each "machine" its own GPUs
through CUDA_VISIBLE_DEVICES)."""
import concurrent.futures
import json
import os
import signal
import subprocess
import time

import pytest

from server_util import DEFAULT_MODEL, ROOT, Server, limit

GOLDEN = os.path.join(ROOT, "tests", "golden")
DEVICE = os.environ.get("RADIXLM_TP_TEST_DEVICE", "cpu")
MAX_TP = 4 if DEVICE == "cpu" else int(os.environ.get("RADIXLM_TP_TEST_GPUS", "2"))
# The servers' tokenizer: the default model's, or RADIXLM_TP_TEST_TOKENIZER (a tokenizer.json directory).
TOKENIZER = os.environ.get("RADIXLM_TP_TEST_TOKENIZER", DEFAULT_MODEL)
pytestmark = pytest.mark.skipif(not os.path.exists(TOKENIZER), reason="default model (tokenizer) not installed")


def goldens():
    return json.load(open(os.path.join(GOLDEN, "index.json")))["models"]


def splits(name, tp):
    """Whether --tp tp can split the golden (the rules of model/tensor_parallel.h; tp_parity_test
    checks that the others are refused with a clear error)."""
    c = json.load(open(os.path.join(GOLDEN, name, "config.json")))
    if c["architectures"][0] in ("Gemma3ForCausalLM", "Gemma3ForConditionalGeneration", "Qwen3MoeForCausalLM"):
        return False
    heads = [c.get(k) for k in ("num_attention_heads", "num_key_value_heads", "linear_num_key_heads")]
    sizes = [c.get(k) for k in ("intermediate_size", "moe_intermediate_size", "shared_expert_intermediate_size")]
    return (all(h is None or h % tp == 0 or tp % h == 0 for h in heads)
            and all(s is None or s % tp == 0 for s in sizes))


def is_hybrid(name):
    return json.load(open(os.path.join(GOLDEN, name, "config.json")))["model_type"] == "qwen3_next"


# Token-id prompts (the tiny models' vocabulary is 512): a shared 40-token prefix and its branches.
PREFIX = [(7 * i + 3) % 500 + 1 for i in range(40)]
PROMPTS = [PREFIX + [11, 12, 13], PREFIX + [11, 12, 14, 15], PREFIX[:20] + [99], PREFIX + [200] * 5]


def serve(model, tp):
    # The golden directories have no tokenizer: the SmolLM2 one (ids below 512 decode to text).
    server = Server("--model", os.path.join(GOLDEN, model), "--tokenizer", TOKENIZER, "--device", DEVICE,
                    "--threads", "1", "--tp", str(tp))
    server.model = model
    return server


def complete(server, prompt, timeout=limit(300)):
    status, body = server.post("/v1/completions", {"model": server.model, "prompt": prompt, "max_tokens": 8, "temperature": 0,
                                                   "ignore_eos": True, "logprobs": 1}, timeout=timeout)
    assert status == 200, body
    choice = body["choices"][0]
    return choice["text"], choice["logprobs"]["token_logprobs"], body["usage"]


def run(server):
    """The prompts one after another (the later ones hit the cache), then all at once."""
    sequential = [complete(server, p) for p in PROMPTS]
    with concurrent.futures.ThreadPoolExecutor(len(PROMPTS)) as ex:
        concurrent_ = list(ex.map(lambda p: complete(server, p), PROMPTS))
    server.assert_kv_free()
    return sequential, concurrent_


@pytest.mark.parametrize("model", goldens())
def test_tp_serves_the_same_tokens_as_tp1(model):
    sizes = [tp for tp in (2, 4) if splits(model, tp) and tp <= MAX_TP]
    if not sizes:
        pytest.skip(f"{model} cannot be split at --tp 2 or 4 (tp_parity_test checks the error)")
    results = {}
    for tp in [1] + sizes:
        server = serve(model, tp)
        try:
            results[tp] = run(server)
        finally:
            assert server.stop() == 0
    want_seq, want_conc = results[1]
    if not is_hybrid(model):  # the hybrid cache keeps recurrent states at 64-token boundaries only
        assert want_seq[1][2]["prompt_tokens_details"]["cached_tokens"] >= len(PREFIX)
    for tp in sizes:
        got_seq, got_conc = results[tp]
        for want, got in zip(want_seq + want_conc, got_seq + got_conc):
            assert got[0] == want[0], f"--tp {tp}"
            assert max(abs(a - b) for a, b in zip(got[1], want[1])) <= 1e-4, f"--tp {tp}"
            assert got[2]["prompt_tokens_details"]["cached_tokens"] == want[2]["prompt_tokens_details"]["cached_tokens"]


def exits_after_the_death(server, what):
    """The request made after a rank's death fails (the server ends or, at worst, times out) and the
    server exits non-zero within 30 s: a hang fails here, naming itself, instead of stalling the run."""
    with pytest.raises(Exception):
        complete(server, PROMPTS[1], timeout=limit(60))
    try:
        server.proc.wait(timeout=limit(30))
    except subprocess.TimeoutExpired:
        pytest.fail(f"the server still runs 30 s after {what} died (a hang):\n" + "".join(server.lines))
    output = "".join(server.lines) + server.proc.stdout.read()
    assert server.proc.returncode != 0
    return output


def children(pid):
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def test_a_dead_rank_ends_the_server_with_an_error():
    server = serve(goldens()[0], 2)
    try:
        workers = children(server.proc.pid)
        assert len(workers) == 1
        complete(server, PROMPTS[0])
        os.kill(workers[0], signal.SIGKILL)
        output = exits_after_the_death(server, "rank 1")
        assert "tensor-parallel group failed" in output and "rank 1" in output, output
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
            server.proc.wait()


def test_tp_flags_errors():
    """A split that does not divide, FP8 and a missing address are clear errors at start-up."""
    for args, message in [(["--model", DEFAULT_MODEL, "--tp", "2"], "9 attention heads do not split over --tp 2"),
                          (["--model", DEFAULT_MODEL, "--quantization", "fp8", "--tp", "3"],
                           "--tp 3 with --quantization fp8 is not supported yet"),
                          (["--tp", "2", "--nnodes", "2"], "--dist-init-addr")]:
        proc = subprocess.run([os.environ.get("RADIXLM_BIN", os.path.join(ROOT, "build", "radixlm")), "serve",
                               "--port", "0", "--device", "cpu", *args], capture_output=True, text=True, timeout=limit(120))
        assert proc.returncode != 0
        assert message in proc.stderr, proc.stderr


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def node_env(node, per_node):
    """The environment of "machine" `node`: on GPUs, its own per_node GPUs as cuda:0.."""
    env = dict(os.environ)
    if DEVICE == "cuda":
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(node * per_node + i) for i in range(per_node))
    return env


def test_two_nodes_on_one_machine():
    """--nnodes 2: machine 0 (rank 0 and, on the CPU, its rank 1) and machine 1 (the other ranks)
    meet at --dist-init-addr; `generate` on machine 0 gives the tokens of --tp 1, machine 1 exits 0
    when rank 0 ends the group."""
    binary = os.environ.get("RADIXLM_BIN", os.path.join(ROOT, "build", "radixlm"))
    model = os.path.join(GOLDEN, goldens()[1])
    common = ["generate", "--model", model, "--device", DEVICE, "--threads", "1", "--prompt-ids", "5,6,7,8",
              "--max-tokens", "8", "--ignore-eos"]
    want = subprocess.run([binary, *common], capture_output=True, text=True, timeout=limit(120),
                          env=node_env(0, 1))
    assert want.returncode == 0, want.stderr
    addr = f"127.0.0.1:{free_port()}"
    per_node = 2 if DEVICE == "cpu" else MAX_TP // 2
    tp = ["--tp", str(2 * per_node), "--nnodes", "2", "--dist-init-addr", addr]
    node1 = subprocess.Popen([binary, *common, *tp, "--node-rank", "1"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=node_env(1, per_node))
    try:
        got = subprocess.run([binary, *common, *tp, "--node-rank", "0"], capture_output=True, text=True,
                             timeout=limit(120), env=node_env(0, per_node))
        assert got.returncode == 0, got.stderr
        assert json.loads(got.stdout.splitlines()[-1])["output_ids"] == json.loads(want.stdout.splitlines()[-1])["output_ids"]
        assert node1.wait(timeout=limit(60)) == 0, node1.stderr.read()
        assert node1.stdout.read() == ""  # the worker machine prints nothing on stdout
    finally:
        if node1.poll() is None:
            node1.kill()
            node1.wait()


def test_a_dead_machine_ends_the_server_with_an_error():
    """--nnodes 2: the server on machine 0 ends with a clear error, not a hang, when machine 1's
    process dies between requests."""
    binary = os.environ.get("RADIXLM_BIN", os.path.join(ROOT, "build", "radixlm"))
    model = goldens()[0]
    per_node = 1 if DEVICE == "cpu" else MAX_TP // 2
    tp = ["--tp", str(2 * per_node), "--nnodes", "2", "--dist-init-addr", f"127.0.0.1:{free_port()}"]
    args = ["--model", os.path.join(GOLDEN, model), "--tokenizer", TOKENIZER, "--device", DEVICE,
            "--threads", "1", *tp]
    node1 = subprocess.Popen([binary, "serve", "--port", "0", *args, "--node-rank", "1"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=node_env(1, per_node))
    server = None
    try:
        server = Server(*args, "--node-rank", "0", env=node_env(0, per_node))
        server.model = model
        complete(server, PROMPTS[0])
        node1.kill()
        node1.wait()
        output = exits_after_the_death(server, "machine 1's process")
        assert "tensor-parallel group failed" in output, output
    finally:
        for proc in [node1] + ([server.proc] if server is not None else []):
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_bench_one_batch_prints_the_per_rank_floor_and_the_all_reduce_table():
    """`bench one-batch --tp 2` (every rank runs the all-reduce benchmark through the step stream)
    prints the per-rank floor and one row per message size, here the CPU group's TCP all-reduce:
    sizes from 8 KB in steps of 4x, positive times, bus bandwidth = bytes / time * 2(n-1)/n."""
    binary = os.environ.get("RADIXLM_BIN", os.path.join(ROOT, "build", "radixlm"))
    proc = subprocess.run([binary, "bench", "one-batch", "--model", os.path.join(GOLDEN, goldens()[1]), "--device",
                           "cpu", "--threads", "1", "--tp", "2", "--batch-size", "2", "--input-len", "8",
                           "--output-len", "3"], capture_output=True, text=True, timeout=limit(300))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert any(line.startswith("per-rank floor at --tp 2: ") for line in lines), proc.stdout
    start = next(i for i, line in enumerate(lines) if line.startswith("all-reduce over 2 ranks"))
    rows = [line.split() for line in lines[start + 1:] if line.strip().endswith("GB/s bus")]
    assert [int(r[0]) for r in rows] == [8 * 4 ** i for i in range(len(rows))] and len(rows) >= 3, proc.stdout
    for kb, unit, algo, us, _, bus, *_ in rows:
        assert unit == "KB" and algo == "tcp" and float(us) > 0
        assert abs(float(bus) - int(kb) * 1024 / (float(us) * 1e-6) / 1e9) <= 0.06 + 0.01 * float(bus)
