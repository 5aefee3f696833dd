"""/metrics under vLLM's names: families, types, labels, and values checked against what the test
sent and received (usage fields, finish reasons, token counts), parsed with prometheus_client."""
import http.client
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from prometheus_client.parser import text_string_to_metric_families

from server_util import DEFAULT_MODEL, Server, limit

MODEL = os.path.basename(DEFAULT_MODEL)
LABELS = {"model_name": MODEL, "engine": "0"}

FAMILIES = {
    "vllm:num_requests_running": "gauge",
    "vllm:num_requests_waiting": "gauge",
    "vllm:kv_cache_usage_perc": "gauge",
    "vllm:prefix_cache_queries": "counter",
    "vllm:prefix_cache_hits": "counter",
    "vllm:prompt_tokens": "counter",
    "vllm:generation_tokens": "counter",
    "vllm:num_preemptions": "counter",
    "vllm:request_success": "counter",
    "vllm:time_to_first_token_seconds": "histogram",
    "vllm:inter_token_latency_seconds": "histogram",
    "vllm:time_per_output_token_seconds": "histogram",
    "vllm:e2e_request_latency_seconds": "histogram",
}
# radixlm's histogram of the same observations under each vLLM name.
TWINS = {
    "vllm:time_to_first_token_seconds": "radixlm_time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds": "radixlm_inter_token_latency_seconds",
    "vllm:time_per_output_token_seconds": "radixlm_inter_token_latency_seconds",
    "vllm:e2e_request_latency_seconds": "radixlm_e2e_request_latency_seconds",
}


@pytest.fixture(scope="module")
def server():
    s = Server("--max-running-requests", "8", "--max-total-tokens", "8192")
    yield s
    assert s.stop() == 0


def scrape(server):
    _, text = server.get("/metrics")
    return {f.name: f for f in text_string_to_metric_families(text)}


def value(families, family, sample=None, **labels):
    """The one sample of `family` named `sample` (default: the family's name) with `labels`."""
    want = {**LABELS, **labels} if family.startswith("vllm:") else labels
    name = sample or family
    got = [s.value for s in families[family].samples if s.name == name and all(
        s.labels.get(k) == v for k, v in want.items())]
    assert len(got) == 1, (family, name, labels, families[family].samples)
    return got[0]


def buckets(families, family, labels):
    return {s.labels["le"]: s.value for s in families[family].samples
            if s.name == family + "_bucket" and all(s.labels.get(k) == v for k, v in labels.items())}


def test_families_types_and_labels(server):
    fams = scrape(server)
    for name, kind in FAMILIES.items():
        assert name in fams, name
        assert fams[name].type == kind, (name, fams[name].type)
        for s in fams[name].samples:
            assert s.labels["model_name"] == MODEL and s.labels["engine"] == "0", s
    # radixlm's own names stay.
    for name in ("radixlm_num_running_reqs", "radixlm_kv_usage", "radixlm_time_to_first_token_seconds"):
        assert name in fams


def completion(server, prompt, max_tokens):
    status, body = server.post("/v1/completions", {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0})
    assert status == 200, body
    return body


def test_values_after_a_load(server):
    server.wait_idle()
    before = scrape(server)
    shared = "Here is a long shared instruction that every request repeats word for word. " * 6
    prompts = [shared + f"Question {i}: name a colour." for i in range(12)]
    with ThreadPoolExecutor(6) as pool:
        bodies = list(pool.map(lambda a: completion(server, *a),
                               [(p, 3 + i % 5) for i, p in enumerate(prompts)]))
    server.wait_idle()
    after = scrape(server)

    def delta(family, sample=None, **labels):
        return value(after, family, sample, **labels) - value(before, family, sample, **labels)

    usage = [b["usage"] for b in bodies]
    reasons = [b["choices"][0]["finish_reason"] for b in bodies]
    prompt_tokens = sum(u["prompt_tokens"] for u in usage)
    completion_tokens = sum(u["completion_tokens"] for u in usage)
    cached = sum(u["prompt_tokens_details"]["cached_tokens"] for u in usage)
    assert cached > 0  # the shared prefix was served from the cache
    assert delta("vllm:prompt_tokens", "vllm:prompt_tokens_total") == prompt_tokens
    assert delta("vllm:prefix_cache_queries", "vllm:prefix_cache_queries_total") == prompt_tokens
    assert delta("vllm:prefix_cache_hits", "vllm:prefix_cache_hits_total") == cached
    assert delta("vllm:generation_tokens", "vllm:generation_tokens_total") == completion_tokens
    for reason in ("stop", "length"):
        assert delta("vllm:request_success", "vllm:request_success_total",
                     finished_reason=reason) == reasons.count(reason)
    # One TTFT and one E2E observation per request, one ITL per token after the first.
    n = len(bodies)
    for family, count in (("vllm:time_to_first_token_seconds", n), ("vllm:e2e_request_latency_seconds", n),
                          ("vllm:inter_token_latency_seconds", completion_tokens - n),
                          ("vllm:time_per_output_token_seconds", completion_tokens - n)):
        assert delta(family, family + "_count") == count, family
        assert delta(family, family + "_sum") >= 0
    # Idle: nothing runs or waits, the KV left is evictable prefix cache, which vLLM counts as free.
    assert value(after, "vllm:num_requests_running") == 0
    assert value(after, "vllm:num_requests_waiting") == 0
    assert value(after, "vllm:kv_cache_usage_perc") == 0
    assert value(after, "radixlm_kv_usage") > 0


def test_histograms_agree_with_radixlm_buckets(server):
    completion(server, "One more request for the histograms.", 4)
    server.wait_idle()
    fams = scrape(server)
    for vname, rname in TWINS.items():
        vb, rb = buckets(fams, vname, LABELS), buckets(fams, rname, {})
        counts = list(vb.values())
        assert counts == sorted(counts), vname  # cumulative
        assert vb["+Inf"] == value(fams, vname, vname + "_count") == value(fams, rname, rname + "_count")
        assert value(fams, vname, vname + "_sum") == pytest.approx(value(fams, rname, rname + "_sum"), rel=1e-5)
        shared = set(vb) & set(rb)
        assert len(shared) >= 2, (vname, shared)
        for le in shared:  # the same observations, counted under both bucket lists
            assert vb[le] == rb[le], (vname, le)


def open_stream(server, prompt, max_tokens):
    """A streaming completion that runs until its client leaves; returns the open connection."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=limit(120))
    conn.request("POST", "/v1/completions", json.dumps({
        "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True, "stream": True}),
        {"Content-Type": "application/json"})
    return conn


def test_gauges_under_load(server):
    server.wait_idle()
    server.post("/flush_cache", {})
    prompts = [f"Stream number {i} tells a long story about the number {i * 7919}." for i in range(4)]
    prompt_ids = [server.post("/tokenize", {"prompt": p})[1]["tokens"] for p in prompts]
    # KV tokens of the prompts: shared prefixes are held once (the tokens of their prefix trie).
    prompt_kv = len({tuple(ids[:k]) for ids in prompt_ids for k in range(1, len(ids) + 1)})
    before = scrape(server)
    max_tokens = 1000  # all four fit the 8192-token pool with their whole budget: admitted at once
    conns = [open_stream(server, p, max_tokens) for p in prompts]
    try:
        deadline = time.time() + limit(60)
        while time.time() < deadline:  # all admitted and decoding (each runs for seconds)
            fams = scrape(server)
            if value(fams, "vllm:num_requests_running") == len(conns) and value(fams, "vllm:generation_tokens",
                    "vllm:generation_tokens_total") > value(before, "vllm:generation_tokens",
                                                             "vllm:generation_tokens_total") + len(conns):
                break
            time.sleep(0.02)
        assert value(fams, "vllm:num_requests_running") == len(conns)
        assert value(fams, "vllm:num_requests_waiting") == 0
        total_pages = value(fams, "radixlm_kv_pages_total")
        used = value(fams, "vllm:kv_cache_usage_perc") * total_pages  # page size 1: tokens
        assert prompt_kv <= round(used) <= prompt_kv + len(conns) * max_tokens
    finally:
        for c in conns:
            c.close()  # the server aborts requests whose client left
    deadline = time.time() + limit(60)
    while time.time() < deadline:
        fams = scrape(server)
        aborted = value(fams, "vllm:request_success", "vllm:request_success_total", finished_reason="abort") - \
            value(before, "vllm:request_success", "vllm:request_success_total", finished_reason="abort")
        if aborted == len(conns) and value(fams, "vllm:num_requests_running") == 0:
            break
        time.sleep(0.05)
    assert aborted == len(conns)
    assert value(fams, "vllm:kv_cache_usage_perc") == 0
