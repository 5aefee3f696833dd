"""End-to-end test of `radixlm bench serve` against a mock OpenAI-compatible streaming server.

The mock (http.server on 127.0.0.1, free port) answers /v1/models, and streams /v1/completions,
/v1/chat/completions and SGLang's /generate: a first chunk after TTFT_S, then one chunk per token
every ITL_S, then a usage chunk and [DONE]. It produces exactly max_tokens tokens and reports
prompt_tokens = len(prompt ids) (or the word count of a text prompt). The checks compare the
benchmark's JSON result with what the mock did, and recompute the aggregate metrics from the
per-request details with numpy (the reference for the metric definitions).
"""
import json
import os
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
from server_util import limit

RADIXLM_BIN = os.environ.get("RADIXLM_BIN", "build/radixlm")
TTFT_S = 0.05
ITL_S = 0.02
MODEL = "mock-model"


class MockHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    requests_seen = []  # (path, body) of every POST
    auth_seen = []  # Authorization header of every POST
    flaky_count = 0
    lock = threading.Lock()

    def log_message(self, *args):
        pass

    def _json(self, status, obj):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": MODEL, "object": "model"}]})
        else:
            self._json(404, {"error": {"message": "not found"}})

    def _write(self, data):
        if self.chunked:
            data = f"{len(data):x}\r\n".encode() + data + b"\r\n"
        self.wfile.write(data)
        self.wfile.flush()

    def _event(self, obj):
        payload = obj if isinstance(obj, str) else json.dumps(obj)
        # Split each event over two writes to exercise the client's incremental parser.
        data = f"data: {payload}\n\n".encode()
        mid = len(data) // 2
        self._write(data[:mid])
        self._write(data[mid:])

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with MockHandler.lock:
            MockHandler.requests_seen.append((self.path, body))
            MockHandler.auth_seen.append(self.headers.get("Authorization"))
        if self.path == "/v1/completions":
            prompt = body["prompt"]
            prompt_tokens = len(prompt) if isinstance(prompt, list) else len(prompt.split())
            n = body["max_tokens"]
        elif self.path == "/v1/chat/completions":
            prompt_tokens = sum(len(m["content"].split()) for m in body["messages"])
            n = body["max_tokens"]
        elif self.path == "/generate":
            prompt_tokens = len(body["input_ids"]) if "input_ids" in body else len(body["text"].split())
            n = body["sampling_params"]["max_new_tokens"]
        else:
            self._json(404, {"error": {"message": "not found"}})
            return
        if body.get("model") == "flaky":  # every second request is turned away
            with MockHandler.lock:
                MockHandler.flaky_count += 1
                turned_away = MockHandler.flaky_count % 2 == 0
            if turned_away:
                self._json(503, {"error": {"message": "busy"}})
                return
            body["model"] = MODEL
        if body.get("model") == "cut":  # one chunk of the stream, then the connection drops mid-body
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.chunked = True
            self._event({"choices": [{"index": 0, "text": " w0", "finish_reason": None}]})
            self.wfile.write(b"40\r\ndata: partial")
            self.wfile.flush()
            self.close_connection = True
            return
        if body.get("model", MODEL) != MODEL and self.path != "/generate":
            self._json(404, {"error": {"message": f"model {body.get('model')} not found"}})
            return
        # /v1/completions streams with chunked transfer encoding (as uvicorn and most servers do);
        # the other endpoints end the body by closing the connection.
        self.chunked = self.path == "/v1/completions"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        if self.chunked:
            self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()
        time.sleep(TTFT_S)
        text = ""
        for i in range(n):
            if i > 0:
                time.sleep(ITL_S)
            piece = f" w{i}"
            text += piece
            last = i == n - 1
            if self.path == "/v1/completions":
                self._event({"choices": [{"index": 0, "text": piece,
                                          "finish_reason": "length" if last else None}]})
            elif self.path == "/v1/chat/completions":
                self._event({"choices": [{"index": 0, "delta": {"content": piece},
                                          "finish_reason": "length" if last else None}]})
            else:
                self._event({"text": text, "meta_info": {
                    "prompt_tokens": prompt_tokens, "completion_tokens": i + 1,
                    "finish_reason": {"type": "length"} if last else None}})
        if self.path != "/generate":
            self._event({"choices": [], "usage": {"prompt_tokens": prompt_tokens,
                                                  "completion_tokens": n,
                                                  "total_tokens": prompt_tokens + n}})
        self._event("[DONE]")
        if self.chunked:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        self.close_connection = True


@pytest.fixture(scope="module")
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), MockHandler)
    srv.daemon_threads = True
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv.server_address[1]
    srv.shutdown()
    srv.server_close()


def run_bench(port, tmp_path, *args):
    out = tmp_path / "result.json"
    MockHandler.requests_seen.clear()
    MockHandler.auth_seen.clear()
    cmd = [RADIXLM_BIN, "bench", "serve", "--host", "127.0.0.1", "--port", str(port),
           "--output-file", str(out), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=limit(120))
    assert proc.returncode == 0, f"{cmd}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert "Serving Benchmark Result" in proc.stdout
    return json.loads(out.read_text()), proc


def check_against_numpy(result):
    """Recompute the aggregate metrics from the per-request details with numpy."""
    ok = [r for r in result["requests"] if r["success"]]
    assert result["completed"] == len(ok)
    dur = result["duration"]
    total_in = sum(r["input_len"] for r in ok)
    total_out = sum(r["output_len"] for r in ok)
    assert result["total_input_tokens"] == total_in
    assert result["total_output_tokens"] == total_out
    assert result["request_throughput"] == pytest.approx(len(ok) / dur)
    assert result["output_throughput"] == pytest.approx(total_out / dur)
    assert result["total_throughput"] == pytest.approx((total_in + total_out) / dur)
    series = {
        "ttft": [r["ttft"] for r in ok],
        "e2e_latency": [r["latency"] for r in ok],
        "itl": [g for r in ok for g in r["itl"]],
        "tpot": [(r["latency"] - r["ttft"]) / (r["output_len"] - 1) for r in ok if r["output_len"] > 1],
    }
    for name, values in series.items():
        v = np.array(values) * 1000.0
        assert result[f"mean_{name}_ms"] == pytest.approx(v.mean(), rel=1e-9), name
        assert result[f"median_{name}_ms"] == pytest.approx(np.median(v), rel=1e-9), name
        assert result[f"std_{name}_ms"] == pytest.approx(v.std(), rel=1e-6, abs=1e-9), name
        for q in (90, 95, 99):
            assert result[f"p{q}_{name}_ms"] == pytest.approx(np.percentile(v, q), rel=1e-9), name


def test_random_completions(server, tmp_path):
    n, in_len, out_len = 12, 20, 6
    result, _ = run_bench(server, tmp_path, "--num-prompts", str(n), "--random-input-len", str(in_len),
                          "--random-output-len", str(out_len), "--random-range-ratio", "1",
                          "--max-concurrency", "4", "--warmup-requests", "2")
    assert result["completed"] == n
    assert result["failed"] == 0
    assert result["args"]["model"] == MODEL  # read from GET /v1/models
    posts = MockHandler.requests_seen
    assert len(posts) == n + 2  # warm-up requests are sent but not counted
    for path, body in posts:
        assert path == "/v1/completions"
        assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
        assert body["ignore_eos"] is True and body["max_tokens"] == out_len
        assert isinstance(body["prompt"], list) and len(body["prompt"]) == in_len
    assert result["total_output_tokens"] == n * out_len
    assert result["total_input_tokens"] == n * in_len
    for r in result["requests"]:
        assert r["success"] and r["usage_reported"]
        assert r["output_len"] == out_len and r["num_chunks"] == out_len
        assert len(r["itl"]) == out_len - 1
    # Timing: the mock sleeps TTFT_S before the first token and ITL_S between tokens.
    assert TTFT_S * 0.9 <= result["median_ttft_ms"] / 1000 <= TTFT_S + 0.5
    assert ITL_S * 0.9 <= result["median_itl_ms"] / 1000 <= ITL_S + 0.2
    assert ITL_S * 0.9 <= result["median_tpot_ms"] / 1000 <= ITL_S + 0.2
    check_against_numpy(result)


def test_chat_multi_turn(server, tmp_path):
    convs, turns = 3, 3
    result, _ = run_bench(server, tmp_path, "--backend", "openai-chat", "--dataset-name", "multi-turn",
                          "--num-prompts", str(convs), "--multi-turn-num-turns", str(turns),
                          "--random-input-len", "8", "--random-output-len", "4",
                          "--random-range-ratio", "1", "--warmup-requests", "0",
                          "--model", MODEL, "--request-rate", "50")
    assert result["completed"] == convs * turns
    # Each turn carries the accumulated history: 2k+1 messages for turn k, answers included.
    by_len = sorted(len(body["messages"]) for _, body in MockHandler.requests_seen)
    assert by_len == sorted([2 * k + 1 for k in range(turns)] * convs)
    for _, body in MockHandler.requests_seen:
        for k, m in enumerate(body["messages"]):
            assert m["role"] == ("user" if k % 2 == 0 else "assistant")
            if m["role"] == "assistant":
                assert m["content"] == " w0 w1 w2 w3"
    for r in result["requests"]:
        assert r["output_len"] == 4
        assert r["input_len"] == 8 * (r["turn"] + 1) + 4 * r["turn"]  # words = mock's token count
    check_against_numpy(result)


def test_shared_prefix_sglang(server, tmp_path):
    result, _ = run_bench(server, tmp_path, "--backend", "sglang", "--api-key", "sk-test", "--dataset-name",
                          "generated-shared-prefix", "--gsp-num-groups", "2", "--gsp-prompts-per-group",
                          "3", "--gsp-system-prompt-len", "16", "--gsp-question-len", "4",
                          "--gsp-output-len", "3", "--warmup-requests", "1")
    assert result["completed"] == 6
    bodies = [b for _, b in MockHandler.requests_seen][1:]
    assert all(len(b["input_ids"]) == 20 and b["sampling_params"]["max_new_tokens"] == 3 for b in bodies)
    assert len({tuple(b["input_ids"][:16]) for b in bodies}) == 2
    assert result["total_output_tokens"] == 18
    assert MockHandler.auth_seen and all(a == "Bearer sk-test" for a in MockHandler.auth_seen)
    check_against_numpy(result)


def run_failing(port, model, num_prompts, tmp_path, *extra):
    """A benchmark (no warm-up, so the run proceeds) whose requests fail; the process and its result."""
    out = tmp_path / "r.json"
    proc = subprocess.run([RADIXLM_BIN, "bench", "serve", "--port", str(port), "--model", model,
                           "--num-prompts", str(num_prompts), "--random-input-len", "4", "--random-output-len", "2",
                           "--warmup-requests", "0", "--output-file", str(out), *extra],
                          capture_output=True, text=True, timeout=limit(60))
    return proc, json.loads(out.read_text())


def test_failures_are_reported_not_fatal(server, tmp_path):
    # The mock rejects an unknown model with HTTP 404.
    proc, result = run_failing(server, "nope", 3, tmp_path)
    assert proc.returncode == 1  # nothing completed
    assert result["completed"] == 0 and result["failed"] == 3
    assert "HTTP 404" in result["first_error"] and "nope" in result["first_error"]
    assert "First error" in proc.stdout
    assert result["failures_by_kind"] == {"HTTP status 404": 3}
    assert "Failures by kind:" in proc.stdout and "HTTP status 404:" in proc.stdout
    assert all(r["error_kind"] == "HTTP status 404" for r in result["requests"])


def test_failure_kinds_are_counted_and_fail_the_run(server, tmp_path):
    # A stream cut mid-body is a read error.
    proc, result = run_failing(server, "cut", 2, tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert result["failures_by_kind"] == {"read error": 2}
    # Some requests succeed, some fail: still a failed run.
    proc, result = run_failing(server, "flaky", 4, tmp_path, "--max-concurrency", "1")
    assert proc.returncode == 1 and result["completed"] == 2 and result["failures_by_kind"] == {"HTTP status 503": 2}
    # A refused connection is counted as such.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc, result = run_failing(port, MODEL, 3, tmp_path)
    assert proc.returncode == 1
    assert result["failures_by_kind"] == {"connect refused": 3}
    assert "connect refused:" in proc.stdout and "Connection refused" in result["first_error"]


def test_unreachable_server_gives_clear_error(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.run([RADIXLM_BIN, "bench", "serve", "--port", str(port), "--model", MODEL,
                           "--num-prompts", "2", "--random-input-len", "4", "--random-output-len", "2"],
                          capture_output=True, text=True, timeout=limit(60))
    assert proc.returncode != 0
    assert "warm-up requests failed" in proc.stderr and "Connection" in proc.stderr


def test_bad_arguments(server):
    proc = subprocess.run([RADIXLM_BIN, "bench", "serve", "--port", str(server), "--dataset-name", "sharegpt"],
                          capture_output=True, text=True, timeout=limit(60))
    assert proc.returncode == 2 and "sharegpt" in proc.stderr
    proc = subprocess.run([RADIXLM_BIN, "bench", "serve", "--port", str(server), "--random-range-ratio", "2"],
                          capture_output=True, text=True, timeout=limit(60))
    assert proc.returncode == 2 and "--random-range-ratio" in proc.stderr
    proc = subprocess.run([RADIXLM_BIN, "bench", "serve", "--port", str(server), "--request-rate", "0"],
                          capture_output=True, text=True, timeout=limit(60))
    assert proc.returncode == 2 and "--request-rate" in proc.stderr
