"""Tensor parallelism through `radixlm serve` on the CPU: each tiny golden model of the Llama
family (tests/golden) served with --tp 2 and --tp 4 (rank processes over loopback) answers the same
greedy tokens as --tp 1, with logprobs within 1e-4, for prompts that share prefixes (the radix
cache serves them: cached_tokens > 0). A rank process that dies ends the server with a clear error
instead of a hang."""
import concurrent.futures
import json
import os
import signal
import subprocess
import time

import pytest

from server_util import DEFAULT_MODEL, ROOT, Server

GOLDEN = os.path.join(ROOT, "tests", "golden")
pytestmark = pytest.mark.skipif(not os.path.exists(DEFAULT_MODEL), reason="default model (tokenizer) not installed")


def llama_family_goldens():
    names = json.load(open(os.path.join(GOLDEN, "index.json")))["models"]
    return [n for n in names
            if json.load(open(os.path.join(GOLDEN, n, "config.json")))["model_type"] in ("llama", "qwen2", "qwen3")]


# Token-id prompts (the tiny models' vocabulary is 512): a shared 40-token prefix and its branches.
PREFIX = [(7 * i + 3) % 500 + 1 for i in range(40)]
PROMPTS = [PREFIX + [11, 12, 13], PREFIX + [11, 12, 14, 15], PREFIX[:20] + [99], PREFIX + [200] * 5]


def serve(model, tp):
    # The golden directories have no tokenizer: the SmolLM2 one (ids below 512 decode to text).
    server = Server("--model", os.path.join(GOLDEN, model), "--tokenizer", DEFAULT_MODEL, "--device", "cpu",
                    "--threads", "1", "--tp", str(tp))
    server.model = model
    return server


def complete(server, prompt):
    status, body = server.post("/v1/completions", {"model": server.model, "prompt": prompt, "max_tokens": 8, "temperature": 0,
                                                   "ignore_eos": True, "logprobs": 1})
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


@pytest.mark.parametrize("model", llama_family_goldens())
def test_tp_serves_the_same_tokens_as_tp1(model):
    results = {}
    for tp in (1, 2, 4):
        server = serve(model, tp)
        try:
            results[tp] = run(server)
        finally:
            assert server.stop() == 0
    want_seq, want_conc = results[1]
    assert want_seq[1][2]["prompt_tokens_details"]["cached_tokens"] >= len(PREFIX)
    for tp in (2, 4):
        got_seq, got_conc = results[tp]
        for want, got in zip(want_seq + want_conc, got_seq + got_conc):
            assert got[0] == want[0], f"--tp {tp}"
            assert max(abs(a - b) for a, b in zip(got[1], want[1])) <= 1e-4, f"--tp {tp}"
            assert got[2]["prompt_tokens_details"]["cached_tokens"] == want[2]["prompt_tokens_details"]["cached_tokens"]


def children(pid):
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def test_a_dead_rank_ends_the_server_with_an_error():
    server = serve(llama_family_goldens()[0], 2)
    try:
        workers = children(server.proc.pid)
        assert len(workers) == 1
        complete(server, PROMPTS[0])
        os.kill(workers[0], signal.SIGKILL)
        with pytest.raises(Exception):
            complete(server, PROMPTS[1])
        server.proc.wait(timeout=30)
        output = "".join(server.lines) + server.proc.stdout.read()
        assert server.proc.returncode != 0
        assert "tensor-parallel group failed" in output and "rank 1" in output, output
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
            server.proc.wait()


def test_tp_flags_errors():
    """A split that does not divide, and a hybrid model, are clear errors at start-up."""
    for args, message in [(["--model", DEFAULT_MODEL, "--tp", "2"], "9 attention heads do not split over --tp 2"),
                          (["--model", os.path.join(GOLDEN, "qwen3next_gqa2_int2_moe4top2"), "--tokenizer",
                            DEFAULT_MODEL, "--tp", "2"], "not yet for Qwen3NextForCausalLM"),
                          (["--tp", "2", "--nnodes", "2"], "--dist-init-addr")]:
        proc = subprocess.run([os.environ.get("RADIXLM_BIN", os.path.join(ROOT, "build", "radixlm")), "serve",
                               "--port", "0", "--device", "cpu", *args], capture_output=True, text=True, timeout=120)
        assert proc.returncode != 0
        assert message in proc.stderr, proc.stderr
