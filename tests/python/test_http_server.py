"""The HTTP front end of `radixlm serve` on loopback (default SmolLM2 model): protocol answers the
transport gives itself, request-id isolation and exact aborts, aborts when a non-streaming client
leaves, the API key on operator routes, and the port not being shared with a second server. Raw
sockets where the point is what goes over the wire."""
import gzip
import http.client
import json
import os
import re
import socket
import subprocess
import threading
import time

import pytest

from server_util import BIN, DEFAULT_MODEL, Server, limit, metric

pytestmark = pytest.mark.skipif(not os.path.exists(DEFAULT_MODEL), reason="default model not installed")

MODEL = os.path.basename(DEFAULT_MODEL)


@pytest.fixture(scope="module")
def server():
    s = Server("--max-running-requests", "16")
    yield s
    assert s.stop() == 0


def raw_exchange(port, data, timeout=limit(30)):
    """Sends `data` and returns everything the server sends until it closes (or the timeout)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass
        out = b""
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                out += chunk
        except (socket.timeout, ConnectionResetError):
            pass
        return out


def status_of(response):
    return int(response.split(b" ", 2)[1])


def test_protocol_errors_are_answered(server):
    body = json.dumps({"model": MODEL, "prompt": "Hi", "max_tokens": 1}).encode()
    cases = [
        ("missing Host", b"GET /health HTTP/1.1\r\n\r\n", 400),
        ("two Content-Lengths", b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}", 400),
        ("a field without a colon", b"GET /health HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n", 400),
        ("Transfer-Encoding xchunked", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: xchunked\r\n\r\n" + body, 501),
        ("a wrong method", b"GET /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 405),
        ("an unsupported Content-Encoding", b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Encoding: br\r\nContent-Length: 2\r\n\r\n{}", 415),
        ("a head over the limit", b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"x" * 40000 + b"\r\n\r\n", 431),
        ("a 70 MB body", b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 70000000\r\n\r\n", 413),
    ]
    for what, request, status in cases:
        response = raw_exchange(server.port, request)
        assert response, what
        assert status_of(response) == status, (what, response[:300])
        if status == 405:
            assert b"\r\nAllow: POST\r\n" in response
        assert b'"error"' in response, what
    assert server.get("/health") == (200, {"status": "ok"})


def test_bodies_are_limited_after_decoding(server):
    # A gzip bomb (100 MB of zeros in ~100 KB) stops at the 64 MiB limit; a chunked body is counted
    # as it arrives; a small gzip body works.
    bomb = gzip.compress(b"0" * 100_000_000, compresslevel=9)
    response = raw_exchange(server.port, b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Encoding: gzip\r\nConnection: close\r\n"
                            + f"Content-Length: {len(bomb)}\r\n\r\n".encode() + bomb)
    assert status_of(response) == 413, response[:300]
    piece = b"x" * (1 << 20)
    chunked = b"".join(f"{len(piece):x}\r\n".encode() + piece + b"\r\n" for _ in range(66)) + b"0\r\n\r\n"
    response = raw_exchange(server.port, b"POST /tokenize HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked)
    assert status_of(response) == 413, response[:300]
    small = gzip.compress(json.dumps({"prompt": "Hello world"}).encode())
    code, t = server.post("/tokenize", None, raw=small, headers={"Content-Encoding": "gzip"})
    assert code == 200 and t["count"] > 0
    assert server.post("/tokenize", {"prompt": "Hello world"})[1]["tokens"] == t["tokens"]


def test_keep_alive_and_pipelining(server):
    body = json.dumps({"prompt": "Hello"}).encode()
    requests = (b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
                + b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode() + body
                + b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    response = raw_exchange(server.port, requests)
    statuses = re.findall(rb"HTTP/1\.1 (\d{3}) ", response)
    assert statuses == [b"200", b"200", b"200"], response[:500]
    assert b'"status":"ok"' in response and b'"tokens"' in response and MODEL.encode() in response


def test_server_ids_are_fresh_128_bit_hex(server):
    _, a = server.post("/v1/completions", {"model": MODEL, "prompt": "Hi", "max_tokens": 1})
    _, b = server.post("/v1/completions", {"model": MODEL, "prompt": "Hi", "max_tokens": 1})
    _, c = server.post("/v1/chat/completions", {"model": MODEL, "max_tokens": 1,
                                                "messages": [{"role": "user", "content": "Hi"}]})
    _, g = server.post("/generate", {"text": "Hi", "sampling_params": {"max_new_tokens": 1}})
    assert re.fullmatch(r"cmpl-[0-9a-f]{32}", a["id"]) and a["id"] != b["id"]
    assert re.fullmatch(r"chatcmpl-[0-9a-f]{32}", c["id"])
    assert re.fullmatch(r"[0-9a-f]{32}-0", g["meta_info"]["id"])


class SseReader(threading.Thread):
    """Reads one streaming request in the background; `first` is set at the first event."""

    def __init__(self, port, path, body, headers=None):
        super().__init__(daemon=True)
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=limit(300))
        self.conn.request("POST", path, json.dumps(body).encode(),
                          {"Content-Type": "application/json", **(headers or {})})
        self.resp = self.conn.getresponse()
        self.events, self.first = [], threading.Event()
        self.start()

    def run(self):
        for line in self.resp:
            line = line.decode().strip()
            if line == "data: [DONE]":
                break
            if line.startswith("data: "):
                self.events.append(json.loads(line[6:]))
                self.first.set()
        self.first.set()
        self.conn.close()


def test_rid_aliases_are_private_and_aborts_are_exact(server):
    def gen(auth, tokens):
        return SseReader(server.port, "/generate",
                         {"text": "Once upon a time", "rid": "shared", "stream": True,
                          "sampling_params": {"max_new_tokens": tokens, "ignore_eos": True, "temperature": 0}},
                         {"Authorization": auth})
    alice = gen("Bearer alice", 120)
    bob = gen("Bearer bob", 120)  # the same rid from another client is no conflict
    assert alice.resp.status == 200 and bob.resp.status == 200
    chat = SseReader(server.port, "/v1/chat/completions",
                     {"model": MODEL, "messages": [{"role": "user", "content": "Tell a story."}], "stream": True,
                      "max_tokens": 120, "ignore_eos": True, "temperature": 0})
    for r in (alice, bob, chat):
        assert r.first.wait(120) and r.events
    # Alice's rid is live in her namespace only.
    code, err = server.post("/generate", {"text": "x", "rid": "shared", "sampling_params": {"max_new_tokens": 1}},
                            headers={"Authorization": "Bearer alice"})
    assert code == 400 and "already in use" in err["error"]["message"]
    # A prefix of every chat id aborts nothing; Bob's abort of "shared" reaches only his request.
    assert server.post("/abort_request", {"rid": "chatcmpl"})[0] == 200
    assert server.post("/abort_request", {"rid": "chatcmpl-"})[0] == 200
    assert server.post("/abort_request", {"rid": "shared"}, headers={"Authorization": "Bearer bob"})[0] == 200
    for r in (alice, bob, chat):
        r.join(300)
    assert bob.events[-1]["meta_info"]["finish_reason"]["type"] == "abort"
    assert bob.events[-1]["meta_info"]["completion_tokens"] < 120
    assert alice.events[-1]["meta_info"]["finish_reason"]["type"] == "length"
    assert alice.events[-1]["meta_info"]["completion_tokens"] == 120
    assert chat.events[-1]["choices"][0]["finish_reason"] == "length"
    # A server id is a capability: whoever holds it (the client it was sent to) can abort.
    victim = SseReader(server.port, "/v1/chat/completions",
                       {"model": MODEL, "messages": [{"role": "user", "content": "Count to 100."}], "stream": True,
                        "max_tokens": 200, "ignore_eos": True})
    assert victim.first.wait(120)
    assert server.post("/abort_request", {"rid": victim.events[0]["id"]})[0] == 200
    victim.join(300)
    assert victim.events[-1]["choices"][0]["finish_reason"] == "abort"
    server.assert_kv_free()


def test_a_non_streaming_client_that_leaves_is_aborted(server):
    aborted_before = metric(server, 'radixlm_requests_finished_total{reason="abort"}')
    body = json.dumps({"model": MODEL, "prompt": "Once upon a time", "max_tokens": 3000, "ignore_eos": True}).encode()
    s = socket.create_connection(("127.0.0.1", server.port))
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    deadline = time.time() + limit(60)
    while server.get("/debug/kv")[1]["running"] == 0:
        assert time.time() < deadline, "the request never started"
        time.sleep(0.02)
    time.sleep(0.3)
    s.close()
    start = time.time()
    while server.get("/debug/kv")[1]["running"] > 0:
        assert time.time() - start < 5, "the abandoned request kept running"
        time.sleep(0.01)
    assert time.time() - start < 2.0
    assert metric(server, 'radixlm_requests_finished_total{reason="abort"}') == aborted_before + 1
    server.assert_kv_free()


def test_a_second_server_on_the_same_port_fails(server):
    proc = subprocess.run([BIN, "serve", "--port", str(server.port)], capture_output=True, text=True, timeout=limit(300))
    assert proc.returncode != 0
    assert "in use" in proc.stderr, proc.stderr
    assert server.get("/health")[0] == 200


def test_api_key_guards_every_route_but_health_and_metrics():
    s = Server("--api-key", "sekret")
    try:
        key = {"Authorization": "Bearer sekret"}
        for path, body in [("/tokenize", {"prompt": "x"}), ("/detokenize", {"tokens": [1]}),
                           ("/flush_cache", {}), ("/abort_request", {"rid": "x"}),
                           ("/generate", {"text": "x", "sampling_params": {"max_new_tokens": 1}}),
                           ("/v1/completions", {"model": MODEL, "prompt": "x", "max_tokens": 1})]:
            assert s.post(path, body)[0] == 401, path
            assert s.post(path, body, headers={"Authorization": "Bearer sekret2"})[0] == 401, path
            assert s.post(path, body, headers=key)[0] == 200, path
        for path in ["/debug/kv", "/v1/models"]:
            assert s.get(path)[0] == 401, path
            assert s.get(path, headers=key)[0] == 200, path
        assert s.get("/health")[0] == 200 and s.get("/metrics")[0] == 200
        for auth in ["bearer sekret", "BEARER   sekret", "Bearer sekret "]:
            assert s.get("/v1/models", headers={"Authorization": auth})[0] == 200, auth
        for auth in ["Basic sekret", "Bearer Sekret", "sekret", "Bearer"]:
            assert s.get("/v1/models", headers={"Authorization": auth})[0] == 401, auth
        response = raw_exchange(s.port, b"GET /debug/kv HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert status_of(response) == 401 and b"\r\nWWW-Authenticate: Bearer\r\n" in response
    finally:
        assert s.stop() == 0
