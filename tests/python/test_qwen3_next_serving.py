"""A tiny random Qwen3-Next (hybrid Gated DeltaNet + gated attention + MoE; a golden from
tools/make_golden.py) served by `radixlm serve` and driven by the official `openai` client, with
the tiny 512-id tokenizer (tools/make_tiny_tokenizer.py).

Prefix caching must be exact for the recurrent layers: prompts sharing prefixes whose lengths sit
around the 64-token snapshot boundaries give the same greedy tokens with the hybrid radix cache as
with `--cache naive`, the hybrid cache reports hits, and every KV page returns to the pool."""
import concurrent.futures
import glob
import json
import os
import random

import openai
import pytest

from server_util import ROOT, Server, limit

TOKENIZER = os.path.join(ROOT, "tests", "data", "tokenizer", "tiny512")


def hybrid_goldens():
    out = []
    for cfg in sorted(glob.glob(os.path.join(ROOT, "tests", "golden", "*", "config.json"))):
        with open(cfg) as f:
            if "Qwen3NextForCausalLM" in json.load(f).get("architectures", []):
                out.append(os.path.dirname(cfg))
    return out


MODELS = hybrid_goldens()


def test_hybrid_goldens_exist():
    assert MODELS, "no Qwen3-Next golden model under tests/golden (run tools/make_golden.py)"


def workload(seed=5):
    """(prompt ids, max_tokens): shared prefixes of lengths around multiples of 64, distinct tails."""
    rng = random.Random(seed)
    prefixes = {n: [rng.randrange(512) for _ in range(n)] for n in (63, 64, 65, 127, 128, 150)}
    reqs = []
    for n, prefix in prefixes.items():
        for tail_len in (1, 7, 70):
            reqs.append((prefix + [rng.randrange(512) for _ in range(tail_len)], 8))
        reqs.append((list(prefix), 8))  # the prefix alone: its cached snapshot is the whole prompt
    return reqs


def run_all(server, reqs, concurrent_part=True):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=limit(300))

    def one(r):
        out = client.completions.create(model=server.model_id, prompt=r[0], max_tokens=r[1], temperature=0,
                                         extra_body={"ignore_eos": True})
        return out.choices[0].text, out.usage.prompt_tokens_details.cached_tokens if out.usage.prompt_tokens_details else 0

    # First half one by one (so later requests find earlier ones cached), the rest concurrently.
    half = len(reqs) // 2
    results = [one(r) for r in reqs[:half]]
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        results += list(ex.map(one, reqs[half:]))
    return results


@pytest.mark.parametrize("model", MODELS, ids=[os.path.basename(m) for m in MODELS])
def test_hybrid_cache_equals_naive(model):
    radix = Server("--model", model, "--tokenizer", TOKENIZER, "--page-size", "1", "--max-running-requests", "8")
    naive = Server("--model", model, "--tokenizer", TOKENIZER, "--page-size", "1", "--cache", "naive")
    try:
        for s in (radix, naive):
            s.model_id = s.get("/v1/models")[1]["data"][0]["id"]
        reqs = workload()
        a = run_all(radix, reqs)
        b = run_all(naive, reqs)
        assert [t for t, _ in a] == [t for t, _ in b]
        assert all(c == 0 for _, c in b)
        hits = [c for _, c in a]
        assert sum(hits) > 0, "the hybrid radix cache reported no hits"
        # Hits are whole snapshots: a multiple of the 64-token chunk.
        assert all(c % 64 == 0 for c in hits), hits
        # Text in, text out through the tiny tokenizer, streaming equals non-streaming.
        client = openai.OpenAI(base_url=radix.url + "/v1", api_key="unused", max_retries=0, timeout=limit(300))
        kw = dict(model=radix.model_id, prompt="Hello world, the sea is", max_tokens=10, temperature=0,
                  extra_body={"ignore_eos": True})
        full = client.completions.create(**kw).choices[0].text
        streamed = "".join(c.choices[0].text for c in client.completions.create(stream=True, **kw) if c.choices)
        assert full == streamed and len(full) > 0
        radix.assert_kv_free()
        naive.assert_kv_free()
    finally:
        assert radix.stop() == 0
        assert naive.stop() == 0
