"""Fuzz every route of `radixlm serve` (default SmolLM2 model, CPU) with 10,000 generated inputs:
malformed JSON, deep nesting, huge strings and arrays, wrong types for every known field, invalid
UTF-8 in strings and raw bytes, random valid-ish requests (max_tokens <= 2), random headers and
methods. Requires 0 crashes, 0 hangs (per-request timeout), 0 5xx answers, every error in
OpenAI's JSON shape, and the server answering a normal chat request correctly afterwards.

The inputs come from one seeded generator (printed; RADIXLM_FUZZ_SEED=<seed> reproduces a run,
RADIXLM_FUZZ_INPUTS=<n> changes the count, RADIXLM_FUZZ_TIMEOUT=<s> the per-request limit).
Requests go out from several threads over keep-alive connections so the run stays within a few
minutes."""
import concurrent.futures
import http.client
import json
import os
import random
import socket
import threading
import time

import openai
import pytest

from server_util import DEFAULT_MODEL, Server, limit

pytestmark = pytest.mark.skipif(not os.path.exists(DEFAULT_MODEL), reason="default model not installed")

MODEL = os.path.basename(DEFAULT_MODEL)
SEED = int(os.environ.get("RADIXLM_FUZZ_SEED", "20240613"))
NUM_INPUTS = int(os.environ.get("RADIXLM_FUZZ_INPUTS", "10000"))
WORKERS = 12
# Per request: a request that takes longer is a hang (sanitized -O0 builds need more: sanitize.sh sets it).
TIMEOUT_S = float(os.environ.get("RADIXLM_FUZZ_TIMEOUT", "60"))

# Known fields of each route, with a valid value generator (max_tokens <= 2 where it matters).
CHAT_FIELDS = ["model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "n", "stream",
               "stream_options", "logprobs", "top_logprobs", "stop", "presence_penalty", "frequency_penalty", "seed",
               "user", "tools", "tool_choice", "parallel_tool_calls", "response_format", "logit_bias", "metadata",
               "store", "service_tier", "top_k", "min_p", "repetition_penalty", "ignore_eos", "min_tokens",
               "stop_token_ids", "skip_special_tokens", "chat_template_kwargs", "add_generation_prompt"]
COMPLETION_FIELDS = ["model", "prompt", "max_tokens", "temperature", "top_p", "n", "stream", "stream_options",
                     "logprobs", "echo", "stop", "presence_penalty", "frequency_penalty", "seed", "user", "best_of",
                     "logit_bias", "suffix", "top_k", "min_p", "repetition_penalty", "ignore_eos", "min_tokens",
                     "stop_token_ids", "skip_special_tokens", "add_special_tokens"]
GENERATE_FIELDS = ["text", "input_ids", "sampling_params", "stream", "rid", "return_logprob", "top_logprobs_num",
                   "model"]
SAMPLING_FIELDS = ["max_new_tokens", "min_new_tokens", "temperature", "top_p", "top_k", "min_p", "stop",
                   "stop_token_ids", "ignore_eos", "skip_special_tokens", "frequency_penalty", "presence_penalty",
                   "repetition_penalty", "seed", "n"]
# Fields whose accepted values bound the generation (replaced only by values that are rejected).
LENGTH_FIELDS = {"max_tokens", "max_completion_tokens", "max_new_tokens", "sampling_params"}
POST_ROUTES = ["/v1/chat/completions", "/v1/completions", "/generate", "/tokenize", "/detokenize", "/abort_request"]
GET_ROUTES = ["/v1/models", "/health", "/metrics", "/debug/kv", "/"]
WORDS = ["Paris", "hello", "the", "é", "日本", "🎉", "\n", " ", "<|im_start|>", "<|endoftext|>", "{{", "%}", "\\",
         "\"", "\u0000", "\u2028", "a" * 50]
BAD_UTF8 = [b"\xff", b"\xc3(", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe2\x82", b"\xc0\xaf", b"\x80"]


class Gen:
    def __init__(self, seed):
        self.r = random.Random(seed)

    def text(self, n=None):
        n = self.r.randint(0, 6) if n is None else n
        return "".join(self.r.choice(WORDS) for _ in range(n))

    def ids(self, n=None):
        n = self.r.randint(1, 8) if n is None else n
        return [self.r.choice([0, 1, 2, 100, 1000, 49151, self.r.randint(0, 49151)]) for _ in range(n)]

    def any_value(self, depth=0):
        """A JSON value of any type, sometimes huge."""
        k = self.r.randint(0, 13 if depth < 3 else 9)
        if k == 0:
            return None
        if k == 1:
            return self.r.choice([True, False])
        if k == 2:
            return self.r.choice([0, -1, 1, 2, 3, 17, 2 ** 31, -2 ** 31 - 1, 2 ** 63, 2 ** 64 - 1, -2 ** 63])
        if k == 3:
            return self.r.choice([0.0, -0.0, 0.5, 1e308, -1e308, 1e-320, 2.0000001, 3.5])
        if k == 4:
            return self.text()
        if k == 5:
            return ""
        if k == 6:
            return self.r.choice(["text", "function", "user", "auto", "none", "json_object", "stop", MODEL])
        if k == 7:
            return "x" * self.r.choice([1000, 100_000]) if self.r.random() < 0.02 else self.text(20)
        if k == 8:
            return self.ids()
        if k == 9:
            return [0] * self.r.choice([1000, 100_000]) if self.r.random() < 0.02 else []
        if k in (10, 11):
            return [self.any_value(depth + 1) for _ in range(self.r.randint(0, 3))]
        return {self.r.choice(["type", "text", "role", "content", "name", "a", ""]): self.any_value(depth + 1)
                for _ in range(self.r.randint(0, 3))}

    def message(self):
        m = {"role": self.r.choice(["system", "user", "assistant", "user", "user", "tool", "developer"])}
        c = self.r.random()
        if c < 0.7:
            m["content"] = self.text(self.r.randint(1, 6))
        elif c < 0.9:
            m["content"] = [{"type": "text", "text": self.text()} for _ in range(self.r.randint(1, 3))]
        else:
            m["content"] = None
        return m

    def sampling(self, body, max_key="max_tokens"):
        r = self.r
        body[max_key] = r.randint(1, 2)
        for key, gen in [("temperature", lambda: r.choice([0, 0.5, 1.0, 2.0])), ("top_p", lambda: r.choice([0.1, 1])),
                         ("top_k", lambda: r.choice([-1, 0, 1, 50])), ("min_p", lambda: r.choice([0, 0.1])),
                         ("seed", lambda: r.randint(0, 2 ** 64 - 1)), ("stop", lambda: r.choice(["\n", ["a", "b"]])),
                         ("presence_penalty", lambda: r.uniform(-2, 2)), ("frequency_penalty", lambda: r.uniform(-2, 2)),
                         ("repetition_penalty", lambda: r.uniform(0.5, 2)), ("ignore_eos", lambda: r.random() < 0.5),
                         ("min_tokens", lambda: r.randint(0, 3)), ("stop_token_ids", lambda: self.ids(2)),
                         ("skip_special_tokens", lambda: r.random() < 0.5), ("n", lambda: r.randint(1, 2)),
                         ("stream", lambda: r.random() < 0.5)]:
            if r.random() < 0.25:
                body[key] = gen()
        if body.get("stream") and r.random() < 0.5:
            body["stream_options"] = {"include_usage": r.random() < 0.5}
        return body

    def valid(self, path):
        r = self.r
        if path == "/v1/chat/completions":
            body = {"model": MODEL, "messages": [self.message() for _ in range(r.randint(1, 4))]}
            if r.random() < 0.2:
                body["logprobs"] = True
                body["top_logprobs"] = r.randint(0, 5)
            if r.random() < 0.2:
                body["tools"] = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
            if r.random() < 0.1:
                body["metadata"] = {"k": "v"}
            return self.sampling(body, r.choice(["max_tokens", "max_completion_tokens"]))
        if path == "/v1/completions":
            prompt = r.choice([self.text(r.randint(1, 6)), self.ids(), [self.text(2), self.text(1)], [self.ids(), self.ids()]])
            body = {"model": MODEL, "prompt": prompt}
            if r.random() < 0.2:
                body["logprobs"] = r.randint(0, 5)
            elif r.random() < 0.1:
                body["echo"] = True
            return self.sampling(body)
        if path == "/generate":
            body = {"text": self.text(r.randint(1, 6))} if r.random() < 0.6 else {"input_ids": self.ids()}
            body["sampling_params"] = {"max_new_tokens": r.randint(1, 2), "temperature": r.choice([0, 1])}
            if r.random() < 0.3:
                body["stream"] = True
            if r.random() < 0.2:
                body["return_logprob"] = True
                body["top_logprobs_num"] = r.randint(0, 3)
            return body
        if path == "/tokenize":
            return {"prompt": self.text(r.randint(1, 8))} if r.random() < 0.6 else {
                "messages": [self.message() for _ in range(r.randint(1, 3))], "model": MODEL}
        if path == "/detokenize":
            return {"tokens": self.ids()}
        if path == "/abort_request":
            return {"rid": r.choice(["x", "nonexistent", self.text(2) or "y"])}
        return {}

    def fields(self, path):
        return {"/v1/chat/completions": CHAT_FIELDS, "/v1/completions": COMPLETION_FIELDS, "/generate": GENERATE_FIELDS,
                "/tokenize": ["prompt", "messages", "model", "add_special_tokens"], "/detokenize": ["tokens"],
                "/abort_request": ["rid"]}[path]

    def wrong_value(self, key):
        """A value for `key`; length limits only get values that cannot be accepted (an accepted
        null or large integer would make a long generation, and the inputs stay max_tokens <= 2)."""
        while True:
            v = self.any_value()
            if key not in LENGTH_FIELDS or not (v is None or isinstance(v, (int, dict)) and not isinstance(v, bool)):
                return v

    def wrong_types(self, path):
        body = self.valid(path)
        for _ in range(self.r.randint(1, 3)):
            sp, msgs = body.get("sampling_params"), body.get("messages")
            if isinstance(sp, dict) and self.r.random() < 0.4:
                key = self.r.choice(SAMPLING_FIELDS)
                sp[key] = self.wrong_value(key)
            elif isinstance(msgs, list) and msgs and isinstance(msgs[0], dict) and self.r.random() < 0.3:
                msgs[0][self.r.choice(["role", "content", "name", "tool_calls"])] = self.any_value()
            else:
                key = self.r.choice(self.fields(path) + ["frobnicate"])
                body[key] = self.wrong_value(key)
        return json.dumps(body).encode()

    def deep(self, path):
        depth = 200_000 if self.r.random() < 0.01 else self.r.choice([100, 127, 128, 129, 1000, 10_000, 70_000])
        opener, closer = self.r.choice([("[", "]"), ('{"a":', "}")])
        inner = opener * depth + "1" + closer * depth
        body = json.dumps(self.valid(path))
        key = self.r.choice(self.fields(path) + ["b"])
        text = '{"%s":%s,%s' % (key, inner, body[1:]) if body != "{}" else '{"%s":%s}' % (key, inner)
        if self.r.random() < 0.2:
            text = text[: self.r.randint(0, len(text))]  # unbalanced
        return text.encode()

    def malformed(self, path):
        b = bytearray(json.dumps(self.valid(path)).encode())
        for _ in range(self.r.randint(1, 4)):
            op = self.r.randint(0, 4)
            pos = self.r.randint(0, len(b))
            if op == 0 and b:
                del b[self.r.randrange(len(b)):][: self.r.randint(1, 8)]
            elif op == 1:
                b[pos:pos] = self.r.choice([b"{", b"}", b"[", b"]", b",", b":", b'"', b"\\", b"nul", b"1e999",
                                            b"-", b"\\u", b"\\ud800", b"NaN", b"\x00"])
            elif op == 2 and b:
                b[self.r.randrange(len(b))] = self.r.randrange(256)
            elif op == 3:
                b = b[:pos]
            else:
                b[pos:pos] = b[: self.r.randint(0, 32)]
        return bytes(b)

    def bad_utf8(self, path):
        text = json.dumps(self.valid(path), ensure_ascii=False).encode()
        # Inside a string value (after a quote) or anywhere.
        quotes = [i for i, c in enumerate(text) if c == 0x22]
        pos = self.r.choice(quotes) + 1 if quotes and self.r.random() < 0.8 else self.r.randint(0, len(text))
        return text[:pos] + self.r.choice(BAD_UTF8) + text[pos:]

    def raw_bytes(self, path):
        return self.r.randbytes(self.r.choice([0, 1, 2, 16, 300, 70_000]))

    def huge(self, path):
        body = self.valid(path)
        key = self.r.choice(self.fields(path))
        body[key] = self.r.choice(["x" * 3_000_000, [1] * 500_000, [{"a": "b"}] * 50_000, {str(i): i for i in range(50_000)}])
        return json.dumps(body).encode()

    def request(self):
        """(category, method, path, headers, body)."""
        r = self.r
        kind = r.choices(["valid", "wrong_types", "malformed", "deep", "bad_utf8", "raw_bytes", "huge", "get",
                          "method_header", "flush"], weights=[5, 30, 20, 8, 8, 8, 0.15, 8, 6, 0.15])[0]
        path = r.choice(POST_ROUTES)
        headers = {"Content-Type": "application/json"}
        if kind == "get":
            return kind, "GET", r.choice(GET_ROUTES), {}, None
        if kind == "flush":
            return kind, "POST", "/flush_cache", headers, b"{}"
        if kind == "method_header":
            method = r.choice(["GET", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD", "POST", "TRACE", "FOO"])
            path = r.choice(POST_ROUTES + GET_ROUTES + ["/nope", "/v1", "/v1/chat", "//", "/%00", "/v1/models/x",
                                                        "/" + "a" * 2000])
            headers = {r.choice(["Content-Type", "Accept", "X-Fuzz", "Authorization", "User-Agent", "Cookie",
                                 "Accept-Encoding"]): r.choice(["", "text/plain", "application/json; charset=latin1",
                                                                "Bearer x", "\t", "gzip", "é".encode().decode("latin1"),
                                                                "v" * r.choice([10, 4000])])
                       for _ in range(r.randint(0, 4))}
            body = json.dumps(self.valid(path)).encode() if path in POST_ROUTES and method == "POST" else (
                r.choice([None, b"", b"{}", b"garbage"]))
            return kind, method, path, headers, body
        body = getattr(self, kind)(path) if kind != "valid" else json.dumps(self.valid(path)).encode()
        return kind, "POST", path, headers, body


class Client:
    """One keep-alive connection per thread."""

    def __init__(self, port):
        self.port = port
        self.local = threading.local()

    def conn(self, fresh=False):
        c = getattr(self.local, "conn", None)
        if c is None or fresh:
            if c is not None:
                c.close()
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=TIMEOUT_S)
            self.local.conn = c
        return c

    def send(self, method, path, headers, body):
        """(status, body bytes); raises TimeoutError on a hang."""
        for attempt in range(2):
            c = self.conn(fresh=attempt > 0)
            try:
                c.request(method, path, body=body, headers=headers)
                resp = c.getresponse()
                data = resp.read()
                if resp.getheader("Connection", "").lower() == "close":
                    self.conn(fresh=True)
                return resp.status, data
            except (socket.timeout, TimeoutError):
                self.conn(fresh=True)
                raise TimeoutError(f"{method} {path}: no answer within {TIMEOUT_S} s")
            except (ConnectionError, http.client.HTTPException, OSError):
                # The server may close a kept-alive connection (after an error, or idle); retry once
                # on a fresh one. A second failure is reported.
                if attempt == 1:
                    raise
        raise AssertionError("unreachable")


def check_answer(kind, status, data):
    """Problems with one answer (empty list when fine). Errors of the API are OpenAI-shaped; those of
    the HTTP layer for odd methods, paths and headers (414, 405, ...) need only not be 5xx."""
    problems = []
    if status >= 500:
        problems.append(f"HTTP {status}")
    if status >= 400 and kind != "method_header":
        try:
            err = json.loads(data)["error"]
            if not ({"message", "type", "code"} <= set(err)) or err["code"] != status:
                problems.append(f"error not in OpenAI's shape: {data[:200]!r}")
        except (ValueError, KeyError, TypeError):
            problems.append(f"error body is not OpenAI-shaped JSON: {data[:200]!r}")
    if status == 200 and data.startswith(b"data: "):
        # An error event is an object with an "error" member; a chunk whose text is the token
        # "error" (`"content":"error"`, sampled at temperature 1) is not one.
        for line in data.split(b"\n"):
            if not line.startswith(b"data: {"):
                continue
            try:
                event = json.loads(line[len(b"data: "):])
            except ValueError:
                problems.append(f"stream event is not JSON: {line[:200]!r}")
                continue
            if "error" in event:
                problems.append(f"error event in the stream: {line[:200]!r}")
    return problems


@pytest.fixture(scope="module")
def server():
    # Unknown fields are ignored (as vLLM does), so a mutation that breaks the `max_tokens` key leaves
    # a request without a length: the short context bounds every generation (prompts here are short).
    s = Server("--max-running-requests", "64", "--max-queued-requests", "100000", "--max-total-tokens", "65536",
               "--context-length", "256")
    yield s
    assert s.stop() == 0


def ask_capital(server):
    oa = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=limit(120))
    r = oa.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "What is the capital of France?"}],
                                   max_tokens=24, temperature=0)
    return r.choices[0].message.content


def test_every_route_survives_generated_inputs(server):
    print(f"fuzz seed {SEED} (rerun with RADIXLM_FUZZ_SEED={SEED}), {NUM_INPUTS} inputs")
    before = ask_capital(server)  # the greedy answer of the fresh server
    client = Client(server.port)
    failures, statuses, kinds = [], {}, {}
    lock = threading.Lock()

    def run(i):
        # Input i comes from its own generator, so any input is reproduced alone from (seed, i).
        kind, method, path, headers, body = Gen(f"{SEED}-{i}").request()
        try:
            status, data = client.send(method, path, headers, body)
            problems = check_answer(kind, status, data)
        except Exception as e:  # noqa: BLE001 - every transport failure is a finding
            status, problems = None, [f"{type(e).__name__}: {e}"]
        with lock:
            statuses[status] = statuses.get(status, 0) + 1
            kinds[kind] = kinds.get(kind, 0) + 1
            if problems:
                failures.append((i, kind, method, path, (body or b"")[:300], problems))
        if server.proc.poll() is not None:
            raise AssertionError(f"the server died (exit {server.proc.returncode}) on input {i} ({kind} {method} {path})")

    t0 = time.time()
    with concurrent.futures.ThreadPoolExecutor(WORKERS) as pool:
        for f in concurrent.futures.as_completed([pool.submit(run, i) for i in range(NUM_INPUTS)]):
            f.result()
    elapsed = time.time() - t0
    print(f"{NUM_INPUTS} inputs in {elapsed:.1f} s; by kind {dict(sorted(kinds.items()))}; "
          f"by status {dict(sorted(statuses.items(), key=str))}")
    assert server.proc.poll() is None, "the server died"
    assert not failures, f"seed {SEED}: {len(failures)} failures, first ones:\n" + "\n".join(map(repr, failures[:10]))
    assert statuses.get(200, 0) > NUM_INPUTS // 20 and statuses.get(400, 0) > NUM_INPUTS // 3

    # Still serving: nothing holds KV, and a normal greedy chat request gets the same answer as
    # before the fuzzing.
    server.assert_kv_free()
    assert before and ask_capital(server) == before
