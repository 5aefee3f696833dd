"""Mixed steps end to end: `radixlm serve` with the embedded SmolLM2, streams decoding while a long
prompt is prefilled in chunks beside them. With mixed steps on (the default) and off (prefill-first)
every request gets the same greedy tokens; only the mixed server runs mixed steps; /server_info
reports the limits the server chose or was given."""
import concurrent.futures
import os
import time

import openai
import pytest

from server_util import DEFAULT_MODEL, Server, limit, metric

pytestmark = pytest.mark.skipif(not os.path.exists(DEFAULT_MODEL), reason="default model not installed")

MODEL = os.path.basename(DEFAULT_MODEL)
FLAGS = ["--chunked-prefill-size", "64", "--max-prefill-tokens", "96"]
LONG_PROMPT = " ".join(f"Item {i}: the {['red', 'green', 'blue'][i % 3]} box holds {i * 7 % 13} stones." for i in range(40))


def run_workload(server):
    """Three streams start decoding; then the long prompt arrives. Returns every request's text and
    the long prompt's token count."""
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=limit(300))
    started = [0]

    def stream(i):
        text = ""
        for chunk in client.completions.create(model=MODEL, prompt=f"Count slowly from {i} to {i + 30}:",
                                               max_tokens=32, temperature=0, stream=True,
                                               extra_body={"ignore_eos": True}):
            text += chunk.choices[0].text
            started[0] += 1
        return text

    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        streams = [ex.submit(stream, i) for i in range(3)]
        deadline = time.time() + limit(120)
        while started[0] < 6 and time.time() < deadline:  # the streams are decoding
            time.sleep(0.01)
        r = client.completions.create(model=MODEL, prompt=LONG_PROMPT, max_tokens=8, temperature=0)
        return [s.result() for s in streams] + [r.choices[0].text], r.usage.prompt_tokens


def test_mixed_steps_on_and_off_give_identical_outputs():
    mixed = Server(*FLAGS)
    plain = Server(*FLAGS, "--disable-mixed-chunk")
    try:
        out_mixed, prompt_tokens = run_workload(mixed)
        out_plain, _ = run_workload(plain)
        assert prompt_tokens > 4 * 96, "the long prompt must take several chunks"
        assert out_mixed == out_plain
        assert metric(mixed, "radixlm_mixed_steps_total") > 0
        assert metric(plain, "radixlm_mixed_steps_total") == 0
        for s, on in ((mixed, True), (plain, False)):
            status, info = s.get("/server_info")
            assert status == 200
            assert info["enable_mixed_chunk"] is on
            assert info["chunked_prefill_size"] == 64
            assert info["max_prefill_tokens"] == 96
            assert info["max_running_requests"] >= 1
            assert info["max_total_tokens"] > 0
            assert info["model"] == MODEL
            s.assert_kv_free()
        # The start-up log names the chosen limits.
        assert any("limits: max-running-requests" in line for line in mixed.lines)
    finally:
        assert mixed.stop() == 0
        assert plain.stop() == 0
