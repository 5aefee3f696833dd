"""Data-parallel serving behind the real `sglang-router` (PyPI) in cache-aware mode: three CPU
`radixlm serve` workers on loopback. Prompts sharing a long prefix land on one worker (seen in each
worker's own counters), distinct prompts spread over the workers, the fleet's prefix-cache hit rate
on a shared-prefix workload is within 10% of one server's, and a worker killed mid-load loses no
request (the router retries elsewhere). Also: `vllm-router` routes to a worker unchanged."""
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
from prometheus_client.parser import text_string_to_metric_families

from server_util import DEFAULT_MODEL, ROOT, Server, limit

MODEL = os.path.basename(DEFAULT_MODEL)

LOG_DIR = os.path.join(ROOT, "build", "test_router_logs")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(url, body=None, timeout=limit(120)):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="GET" if body is None else "POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read()
            return r.status, (json.loads(raw) if raw[:1] in (b"{", b"[") else raw.decode())
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


class Router:
    """A router process (`python -m <module>` with `args`) in front of the workers."""

    def __init__(self, module, workers, *args, timeout=limit(90)):
        os.makedirs(LOG_DIR, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = os.path.join(LOG_DIR, f"{module}.log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, "--host", "127.0.0.1", "--port", str(self.port),
             "--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port()),
             "--worker-urls", *[w.url for w in workers], *args],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + timeout
        while time.time() < deadline:
            assert self.proc.poll() is None, self.output()
            try:
                status, _ = http(self.url + "/generate", {"text": "Hi", "sampling_params": {"max_new_tokens": 1}},
                                 timeout=limit(10))
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.5)
        self.stop()
        raise RuntimeError("router did not become ready:\n" + self.output())

    def output(self):
        self.log.flush()
        with open(self.log_path) as f:
            return f.read()[-4000:]

    def completion(self, prompt, max_tokens=4):
        status, body = http(self.url + "/v1/completions",
                            {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0})
        assert status == 200, (status, body)
        return body

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=limit(15))
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def counters(worker):
    """(requests finished, prompt tokens, cached prompt tokens) from a worker's vLLM-named metrics."""
    _, text = http(worker.url + "/metrics")
    fams = {f.name: f for f in text_string_to_metric_families(text)}

    def total(family, sample):
        return sum(s.value for s in fams[family].samples if s.name == sample)
    return (total("vllm:request_success", "vllm:request_success_total"),
            total("vllm:prefix_cache_queries", "vllm:prefix_cache_queries_total"),
            total("vllm:prefix_cache_hits", "vllm:prefix_cache_hits_total"))


def deltas(workers, before):
    return [tuple(a - b for a, b in zip(counters(w), before[i])) for i, w in enumerate(workers)]


def shared_prefix_workload(seed, groups=3, per_group=6):
    """Prompts of `groups` long shared prefixes with short distinct questions, interleaved."""
    rng = random.Random(seed)
    words = ("river mountain lantern orchard violet copper harbor meadow falcon granite willow ember "
             "canyon saffron glacier thistle").split()
    prompts = []
    for g in range(groups):
        prefix = f"Document {seed}-{g}. " + " ".join(rng.choice(words) for _ in range(120)) + ". "
        prompts += [prefix + f"Question {q}: which word comes first?" for q in range(per_group)]
    rng.shuffle(prompts)
    return prompts


@pytest.fixture(scope="module")
def workers():
    ws = [Server("--max-running-requests", "8", "--max-total-tokens", "16384") for _ in range(3)]
    yield ws
    for w in ws:
        w.stop()


@pytest.fixture(scope="module")
def router(workers):
    r = Router("sglang_router.launch_router", workers, "--policy", "cache_aware",
               "--health-check-interval-secs", "1", "--health-failure-threshold", "1",
               "--retry-max-retries", "6", "--retry-initial-backoff-ms", "50", "--retry-max-backoff-ms", "1000",
               "--log-level", "warn")
    yield r
    r.stop()


def test_shared_prefixes_land_on_one_worker(workers, router):
    for g in range(3):
        prefix = f"Group {g} handbook. " + "Each section repeats the same long rules about routing. " * 12
        before = [counters(w) for w in workers]
        bodies = [router.completion(prefix + f"Question {q}?") for q in range(5)]
        d = deltas(workers, before)
        served = [i for i, (n, _, _) in enumerate(d) if n > 0]
        assert len(served) == 1 and d[served[0]][0] == 5, d  # one worker took the whole group
        # The worker's cache served the shared prefix to every request after the first.
        cached = [b["usage"]["prompt_tokens_details"]["cached_tokens"] for b in bodies]
        assert all(c >= 0.8 * bodies[0]["usage"]["prompt_tokens"] for c in cached[1:]), cached
        assert d[served[0]][2] == sum(cached)


def test_distinct_prompts_spread_over_the_workers(workers, router):
    before = [counters(w) for w in workers]
    rng = random.Random(7)
    # No two share more than a few leading characters, so no worker has a useful cached prefix.
    prompts = [" ".join(f"{rng.getrandbits(24):06x}" for _ in range(6)) + ": say something." for _ in range(24)]
    with ThreadPoolExecutor(6) as pool:
        list(pool.map(router.completion, prompts))
    d = deltas(workers, before)
    assert sum(n for n, _, _ in d) == len(prompts)
    assert all(n >= 2 for n, _, _ in d), d


def test_router_reads_the_worker_routes(workers, router):
    # The router's load view comes from each worker's /get_load (-1 when it cannot parse it).
    status, loads = http(router.url + "/get_loads")
    assert status == 200 and len(loads["workers"]) == 3, loads
    assert all(w["load"] >= 0 for w in loads["workers"]), loads
    status, info = http(router.url + "/get_model_info")
    assert status == 200 and info["model_path"] == MODEL and info["is_generation"] is True, info
    status, flushed = http(router.url + "/flush_cache", {})
    assert status == 200 and flushed["workers_flushed"] == 3, flushed
    for w in workers:
        status, load = w.get("/get_load")
        assert status == 200 and set(load[0]) == {"dp_rank", "num_reqs", "num_waiting_reqs", "num_tokens"}, load
        status, body = w.get("/health_generate")
        assert status == 200 and len(body["output_ids"]) == 1, body
        status, info = w.get("/get_server_info")
        assert status == 200 and info["served_model_name"] == MODEL and info["dp_size"] == 1, info


def test_fleet_hit_rate_matches_one_server(workers, router):
    prompts = shared_prefix_workload(seed=1)
    for w in workers:
        assert w.post("/flush_cache", {})[0] == 200
    before = [counters(w) for w in workers]
    for p in prompts:  # in order, one at a time: the same sequence for both runs
        router.completion(p)
    d = deltas(workers, before)
    fleet = sum(c for _, _, c in d) / sum(q for _, q, _ in d)

    alone = workers[0]
    assert alone.post("/flush_cache", {})[0] == 200
    before = counters(alone)
    for p in prompts:
        status, body = alone.post("/v1/completions", {"prompt": p, "max_tokens": 4, "temperature": 0})
        assert status == 200, body
    _, queries, hits = (a - b for a, b in zip(counters(alone), before))
    single = hits / queries
    print(f"prefix-cache hit rate: fleet of 3 {fleet:.4f}, one server {single:.4f}")
    assert fleet >= 0.9 * single, (fleet, single)
    assert single > 0.5  # the workload is mostly shared prefixes


def running(worker):
    _, text = http(worker.url + "/metrics")
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    return fams["vllm:num_requests_running"].samples[0].value


def test_killing_a_worker_mid_load_loses_no_request(workers, router):
    rng = random.Random(11)
    prompts = [" ".join(f"{rng.getrandbits(24):06x}" for _ in range(6)) + ": count from one to five."
               for _ in range(40)]
    victim = workers[2]
    done = []

    def one(p):
        body = router.completion(p, max_tokens=12)
        done.append(body)
        return body

    with ThreadPoolExecutor(6) as pool:
        futures = [pool.submit(one, p) for p in prompts]
        deadline = time.time() + limit(60)
        while (len(done) < 6 or running(victim) == 0) and time.time() < deadline:
            time.sleep(0.01)
        assert running(victim) > 0, "the victim had no request to lose"
        victim.proc.kill()  # mid-load: requests are running on it
        results = [f.result(timeout=limit(180)) for f in futures]
    victim.proc.wait()
    assert len(results) == len(prompts)
    assert all(r["choices"][0]["finish_reason"] in ("stop", "length") for r in results)


def test_vllm_router_routes_to_radixlm(workers):
    live = [w for w in workers if w.proc.poll() is None]
    r = Router("vllm_router.launch_router", live, "--policy", "round_robin", "--log-level", "warning")
    try:
        before = [counters(w) for w in live]
        for i in range(6):
            r.completion(f"vllm-router request {i}")
        status, body = http(r.url + "/generate", {"text": "Hello", "sampling_params": {"max_new_tokens": 3}})
        assert status == 200 and "text" in body, body
        d = deltas(live, before)
        assert sum(n for n, _, _ in d) == 7 and all(n >= 3 for n, _, _ in d), d
    finally:
        r.stop()
