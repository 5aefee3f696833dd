"""End to end: `radixlm serve` with the embedded SmolLM2 GGUF, driven by the official `openai`
client (and raw HTTP for error cases) on loopback."""
import concurrent.futures
import http.client
import json
import os
import random
import signal
import threading
import time

import openai
import pytest

from server_util import DEFAULT_MODEL, Server, limit, metric

pytestmark = pytest.mark.skipif(not os.path.exists(DEFAULT_MODEL), reason="default model not installed")

MODEL = os.path.basename(DEFAULT_MODEL)
PARIS = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def server():
    s = Server("--max-running-requests", "64", "--max-total-tokens", "65536")
    yield s
    assert s.stop() == 0


@pytest.fixture(autouse=True)
def kv_pool_is_free_after_each_test(request):
    """After every test that used the shared server, no request holds KV and every page returns."""
    yield
    if "server" in request.fixturenames:
        request.getfixturevalue("server").assert_kv_free()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=limit(300))


def test_models(client):
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL]


def test_chat_answers_paris(client, server):
    r = client.chat.completions.create(model=MODEL, messages=PARIS, max_tokens=24, temperature=0)
    assert "Paris" in r.choices[0].message.content
    assert r.choices[0].finish_reason == "stop"
    assert r.usage.completion_tokens >= 1
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    server.assert_kv_free()


def test_chat_stream_equals_non_stream(client):
    ref = client.chat.completions.create(model=MODEL, messages=PARIS, max_tokens=24, temperature=0)
    chunks = list(client.chat.completions.create(model=MODEL, messages=PARIS, max_tokens=24, temperature=0,
                                                 stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == ref.choices[0].message.content
    assert chunks[0].choices[0].delta.role == "assistant"
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["stop"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == ref.usage.completion_tokens


def test_completion_max_tokens_and_stream(client):
    kw = dict(model=MODEL, prompt="Once upon a time", max_tokens=12, temperature=0, extra_body={"ignore_eos": True})
    r = client.completions.create(**kw)
    assert r.usage.completion_tokens == 12 and r.choices[0].finish_reason == "length"
    streamed = "".join(c.choices[0].text for c in client.completions.create(stream=True, **kw) if c.choices)
    assert streamed == r.choices[0].text


def test_max_completion_tokens(client):
    r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Count to fifty."}],
                                       max_completion_tokens=5, temperature=0, extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 5 and r.choices[0].finish_reason == "length"


def test_stop_strings_are_cut_and_never_leaked(client):
    kw = dict(model=MODEL, prompt="The history of Rome", max_tokens=40, temperature=0,
              extra_body={"ignore_eos": True})
    full = client.completions.create(**kw).choices[0].text
    assert len(full) > 20
    stop = full[10:14]
    for stream in (False, True):
        if stream:
            text = "".join(c.choices[0].text for c in client.completions.create(stop=[stop], stream=True, **kw)
                           if c.choices)
        else:
            r = client.completions.create(stop=[stop], **kw)
            assert r.choices[0].finish_reason == "stop"
            text = r.choices[0].text
        assert text == full[:full.index(stop)]
        assert stop not in text


def test_logprobs(client):
    r = client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=6, temperature=0,
                                  logprobs=3, extra_body={"ignore_eos": True})
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 6
    for tok, val, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert val <= 0.0 and len(top) == 3
        assert max(top.values()) == pytest.approx(val, abs=1e-5)  # greedy picks the most likely
    assert "".join(lp.tokens) == r.choices[0].text
    c = client.chat.completions.create(model=MODEL, messages=PARIS, max_tokens=5, temperature=0, logprobs=True,
                                       top_logprobs=2)
    content = c.choices[0].logprobs.content
    assert len(content) == c.usage.completion_tokens
    assert all(len(t.top_logprobs) == 2 and t.logprob <= 0 for t in content)


def test_n_choices_and_seed_reproducibility(client):
    kw = dict(model=MODEL, messages=[{"role": "user", "content": "Tell me a short story."}], max_tokens=16,
              temperature=1.0, seed=1234, n=3)
    a = client.chat.completions.create(**kw)
    b = client.chat.completions.create(**kw)
    assert len(a.choices) == 3 and [c.index for c in a.choices] == [0, 1, 2]
    assert [c.message.content for c in a.choices] == [c.message.content for c in b.choices]
    assert len({c.message.content for c in a.choices}) > 1  # siblings differ
    c = client.chat.completions.create(**{**kw, "seed": 99})
    assert [x.message.content for x in c.choices] != [x.message.content for x in a.choices]


def test_concurrent_greedy_equals_sequential_and_disconnects_free_kv(client, server):
    prompts = [f"Write a sentence about the number {i}." for i in range(64)]

    def one(p):
        r = client.completions.create(model=MODEL, prompt=p, max_tokens=10, temperature=0,
                                      extra_body={"ignore_eos": True})
        return r.choices[0].text

    sequential = [one(p) for p in prompts[:8]]
    rng = random.Random(7)

    def stream(i):
        """A stream that is either read to the end or dropped after a few chunks."""
        body = json.dumps({"model": MODEL, "prompt": prompts[i], "max_tokens": 10, "temperature": 0,
                           "ignore_eos": True, "stream": True}).encode()
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=limit(300))
        conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 200
        drop_after = rng.randint(1, 4) if i % 3 == 2 else None
        text, events = "", 0
        for line in resp:
            line = line.decode().strip()
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                break
            events += 1
            chunk = json.loads(line[6:])
            text += chunk["choices"][0]["text"]
            if drop_after is not None and events >= drop_after:
                conn.close()  # client goes away mid-stream
                return None
        conn.close()
        return text

    with concurrent.futures.ThreadPoolExecutor(64) as ex:
        results = list(ex.map(stream, range(64)))
    for i in range(8):
        if results[i] is not None:
            assert results[i] == sequential[i]
    assert sum(r is None for r in results) > 0
    server.assert_kv_free()


def test_error_cases_and_server_keeps_serving(server):
    cases = [
        ("/v1/completions", None, b"{not json", 400),
        ("/v1/completions", {"model": MODEL, "prompt": "hi", "temperature": "hot"}, None, 400),
        ("/v1/completions", {"model": MODEL, "prompt": "hi", "max_tokens": 0}, None, 400),
        ("/v1/completions", {"model": MODEL, "prompt": "hi", "top_p": 2}, None, 400),
        ("/v1/completions", {"model": MODEL, "prompt": "hi", "frobnicate": 1, "temperature": "hot"}, None, 400),
        ("/v1/completions", {"model": MODEL}, None, 400),
        ("/v1/completions", {"model": MODEL, "prompt": "hi", "max_tokens": 100000}, None, 400),
        ("/v1/completions", {"model": MODEL, "prompt": [1, 2, 10 ** 6]}, None, 400),
        ("/v1/completions", {"model": MODEL, "prompt": "hi", "stream_options": {"include_usage": True}}, None, 400),
        ("/v1/chat/completions", {"model": MODEL, "messages": []}, None, 400),
        ("/v1/chat/completions", {"model": MODEL, "messages": [{"role": 7, "content": "x"}]}, None, 400),
        ("/v1/chat/completions", {"model": MODEL, "messages": PARIS, "n": 0}, None, 400),
        ("/v1/chat/completions", {"model": "no-such-model", "messages": PARIS}, None, 404),
        ("/generate", {"text": "hi", "input_ids": [1]}, None, 400),
        ("/detokenize", {"tokens": [-1]}, None, 400),
    ]
    for path, body, raw, status in cases:
        code, err = server.post(path, body, raw=raw)
        assert code == status, (path, body, err)
        assert set(err["error"]) >= {"message", "type", "code"} and err["error"]["code"] == status
    code, err = server.post("/v1/completions", {"model": MODEL, "prompt": "x " * 9000, "max_tokens": 4})
    assert code == 400 and "context" in err["error"]["message"]
    assert server.get("/nope")[0] == 404
    assert server.get("/health") == (200, {"status": "ok"})
    code, r = server.post("/v1/completions", {"model": MODEL, "prompt": "Hello", "max_tokens": 3})
    assert code == 200 and r["usage"]["completion_tokens"] >= 1


def test_tokenize_detokenize_and_generate(server):
    code, t = server.post("/tokenize", {"prompt": "Hello world"})
    assert code == 200 and t["count"] == len(t["tokens"]) > 0
    code, d = server.post("/detokenize", {"tokens": t["tokens"]})
    assert code == 200 and d["prompt"].endswith("Hello world")
    code, g = server.post("/generate", {"text": "The capital of France is",
                                        "sampling_params": {"max_new_tokens": 4, "temperature": 0}})
    assert code == 200 and len(g["output_ids"]) == g["meta_info"]["completion_tokens"] <= 4
    assert g["meta_info"]["finish_reason"]["type"] in ("length", "stop")


def test_shared_prefix_reports_cached_tokens(client, server):
    system = "You are a meticulous assistant. " * 20
    before = metric(server, "radixlm_cached_tokens_total")
    usages = []
    for q in ["What is 2+2?", "Name a color.", "Say hi."]:
        r = client.chat.completions.create(model=MODEL, max_tokens=4, temperature=0,
                                           messages=[{"role": "system", "content": system},
                                                     {"role": "user", "content": q}])
        usages.append(r.usage)
    assert usages[0].prompt_tokens_details.cached_tokens < usages[1].prompt_tokens_details.cached_tokens
    assert usages[2].prompt_tokens_details.cached_tokens > 100
    assert metric(server, "radixlm_cached_tokens_total") > before


def test_radix_and_naive_give_identical_outputs(client, server):
    naive = Server("--cache", "naive")
    try:
        nclient = openai.OpenAI(base_url=naive.url + "/v1", api_key="unused", max_retries=0, timeout=limit(300))
        system = "Answer in one short sentence. " * 8
        radix_before = metric(server, "radixlm_prefill_computed_tokens_total")
        naive_before = metric(naive, "radixlm_prefill_computed_tokens_total")
        for q in ["Why is the sky blue?", "Why is the sea salty?", "Why is the sky blue?"]:
            msgs = [{"role": "system", "content": system}, {"role": "user", "content": q}]
            a = client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=16, temperature=0)
            b = nclient.chat.completions.create(model=MODEL, messages=msgs, max_tokens=16, temperature=0)
            assert a.choices[0].message.content == b.choices[0].message.content
            assert b.usage.prompt_tokens_details.cached_tokens == 0
        radix_work = metric(server, "radixlm_prefill_computed_tokens_total") - radix_before
        naive_work = metric(naive, "radixlm_prefill_computed_tokens_total") - naive_before
        assert radix_work < naive_work  # the shared system prompt was computed once, not three times
        naive.assert_kv_free()
    finally:
        assert naive.stop() == 0


def test_api_key_and_queue_limit():
    s = Server("--api-key", "sekret", "--max-queued-requests", "1", "--max-running-requests", "1")
    try:
        body = {"model": MODEL, "prompt": "Hi", "max_tokens": 2}
        assert s.post("/v1/completions", body)[0] == 401
        assert s.post("/v1/completions", body, headers={"Authorization": "Bearer wrong"})[0] == 401
        assert s.get("/health")[0] == 200  # health stays open
        ok = {"Authorization": "Bearer sekret"}
        assert s.post("/v1/completions", body, headers=ok)[0] == 200
        # Flood: with a queue of one, some requests are turned away with 503 and the rest succeed.
        long = {"model": MODEL, "prompt": "Hi", "max_tokens": 64, "ignore_eos": True}
        with concurrent.futures.ThreadPoolExecutor(8) as ex:
            codes = list(ex.map(lambda _: s.post("/v1/completions", long, headers=ok)[0], range(8)))
        assert 503 in codes and 200 in codes and set(codes) <= {200, 503}
        assert s.post("/v1/completions", body, headers=ok)[0] == 200
    finally:
        assert s.stop() == 0


def test_sigterm_drains_in_flight_requests():
    # The drain deadline is generous: this checks that in-flight work finishes, not how fast (an
    # instrumented -O0 build on a loaded machine takes longer than the default 30 s for 24 tokens).
    s = Server("--shutdown-timeout", "900")
    result = {}

    def run():
        c = openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0, timeout=limit(900))
        r = c.completions.create(model=MODEL, prompt="Once", max_tokens=24, temperature=0,
                                 extra_body={"ignore_eos": True})
        result["tokens"] = r.usage.completion_tokens

    t = threading.Thread(target=run)
    t.start()
    # SIGTERM only once the request is running (a fixed sleep raced the request on a loaded machine).
    deadline = time.time() + limit(60)
    while t.is_alive() and metric(s, "radixlm_num_running_reqs") < 1:
        assert time.time() < deadline, "the request never started running"
        time.sleep(0.02)
    assert s.stop(signal.SIGTERM, timeout=limit(960)) == 0
    t.join()
    assert result.get("tokens") == 24


def test_bench_serve_against_our_server(server, tmp_path):
    import subprocess
    from server_util import BIN
    for dataset, extra in [("random", ["--random-input-len", "64", "--random-output-len", "8"]),
                           ("generated-shared-prefix", ["--gsp-num-groups", "2", "--gsp-prompts-per-group", "4",
                                                        "--gsp-system-prompt-len", "128", "--gsp-question-len", "16",
                                                        "--gsp-output-len", "8"]),
                           ("multi-turn", ["--backend", "openai-chat", "--multi-turn-num-turns", "2",
                                           "--random-input-len", "16", "--random-output-len", "8"])]:
        out = tmp_path / f"{dataset}.json"
        proc = subprocess.run([BIN, "bench", "serve", "--host", "127.0.0.1", "--port", str(server.port),
                               "--dataset-name", dataset, "--num-prompts", "8", "--max-concurrency", "4",
                               "--seed", "1", "--output-file", str(out), *extra],
                              capture_output=True, text=True, timeout=limit(600))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        result = json.loads(out.read_text())
        assert result["completed"] > 0 and result["failed"] == 0, result.get("first_error")
        assert result["mean_ttft_ms"] > 0 and result["output_throughput"] > 0
    server.assert_kv_free()


def test_penalties_reach_the_sampler(client):
    kw = dict(model=MODEL, prompt="I like apples. I like apples. I like", max_tokens=40, temperature=0, logprobs=0,
              extra_body={"ignore_eos": True})
    plain = client.completions.create(**kw).choices[0].logprobs.tokens
    penalized = client.completions.create(frequency_penalty=2.0, presence_penalty=2.0, **kw).choices[0].logprobs.tokens
    assert len(set(penalized)) > len(set(plain))
    rep = client.completions.create(**{**kw, "extra_body": {"ignore_eos": True, "repetition_penalty": 1.8}})
    assert len(set(rep.choices[0].logprobs.tokens)) > len(set(plain))


def test_explicit_abort_by_request_id(server):
    body = json.dumps({"text": "Once upon a time", "rid": "abort-me", "stream": True,
                       "sampling_params": {"max_new_tokens": 500, "ignore_eos": True, "temperature": 0}}).encode()
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=limit(300))
    conn.request("POST", "/generate", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200
    last, aborted = None, False
    for line in resp:
        line = line.decode().strip()
        if line == "data: [DONE]":
            break
        if line.startswith("data: "):
            last = json.loads(line[6:])
            if not aborted:
                assert server.post("/abort_request", {"rid": "abort-me"})[0] == 200
                aborted = True
    conn.close()
    assert last["meta_info"]["finish_reason"]["type"] == "abort"
    assert last["meta_info"]["completion_tokens"] < 500
    assert server.post("/abort_request", {"rid": ""})[0] == 400


def test_overlap_schedule_on_and_off_give_identical_outputs(client, server):
    """Greedy and seeded sampled outputs do not depend on overlap scheduling (the seeded sampler's
    step index must count tokens still in flight), nor do penalties (which count the token still in
    flight through the runner's table) and logprobs."""
    plain = Server("--disable-overlap-schedule")
    try:
        pclient = openai.OpenAI(base_url=plain.url + "/v1", api_key="unused", max_retries=0, timeout=limit(300))
        prompts = [f"List three facts about the number {i}." for i in range(6)]

        def run(c):
            def one(i):
                kw = dict(temperature=0) if i % 2 == 0 else dict(temperature=0.9, top_p=0.95, seed=100 + i)
                extra = {"ignore_eos": True}
                if i >= 4:  # penalties and logprobs: computed on the device, overlap keeps going
                    kw.update(frequency_penalty=0.7, presence_penalty=0.4, logprobs=2)
                    extra["repetition_penalty"] = 1.2
                r = c.completions.create(model=MODEL, prompt=prompts[i], max_tokens=24, extra_body=extra, **kw)
                lp = r.choices[0].logprobs
                return r.choices[0].text, (lp.tokens, lp.token_logprobs, lp.top_logprobs) if lp else None
            with concurrent.futures.ThreadPoolExecutor(6) as ex:
                return list(ex.map(one, range(6)))

        seq_name = 'radixlm_decode_steps_total{mode="sequential"}'
        ovl_name = 'radixlm_decode_steps_total{mode="overlap"}'
        seq_before, ovl_before = metric(server, seq_name), metric(server, ovl_name)
        overlapped, sequential = run(client), run(pclient)
        # The penalty/logprob requests did not pause overlap: no decode step ran sequentially.
        assert metric(server, seq_name) == seq_before
        assert metric(server, ovl_name) > ovl_before
        assert metric(plain, ovl_name) == 0
        assert [o[0] for o in overlapped] == [o[0] for o in sequential]
        for (_, a), (_, b) in zip(overlapped[4:], sequential[4:]):
            assert a[0] == b[0]
            assert a[1] == pytest.approx(b[1], abs=1e-4)
            assert [sorted(x) for x in a[2]] == [sorted(x) for x in b[2]]
        plain.assert_kv_free()
        server.wait_idle()
        server.assert_kv_free()
    finally:
        assert plain.stop() == 0
