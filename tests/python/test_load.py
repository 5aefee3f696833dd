"""Load on `radixlm serve` (CPU, default SmolLM2, loopback), with asyncio raw-socket clients:

- 1,000 streaming requests opened in one burst all complete (no refused or reset connection);
- 300 slowloris connections (a byte of an unfinished request head every second) do not delay a
  normal request by more than 1 s (its time outside the engine: client latency minus the server's
  own e2e latency, which CPU contention on the model would otherwise blur);
- when 20% of the clients leave mid-stream or mid-wait (non-streaming), every KV page returns to
  the pool and the server's resident memory stays within 2%: VmRSS from /proc/PID/status with the
  server idle and its prefix cache flushed, after a warm-up round of the same requests vs after the
  round with the disconnects.
"""
import asyncio
import json
import os
import resource
import statistics
import time

import pytest

from server_util import DEFAULT_MODEL, Server, metric

pytestmark = pytest.mark.skipif(not os.path.exists(DEFAULT_MODEL), reason="default model not installed")

MODEL = os.path.basename(DEFAULT_MODEL)


@pytest.fixture(scope="module")
def server():
    # Room for 1,000 client sockets in this process (the server raises its own limit).
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))
    s = Server("--max-running-requests", "64")
    yield s
    assert s.stop() == 0


def request_bytes(path, body):
    data = json.dumps(body).encode()
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n").encode() + data


async def read_head(reader):
    head = await reader.readuntil(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), head


async def stream_completion(port, prompt, max_tokens, leave_after=None):
    """One streaming completion; returns the number of text events, or raises. With leave_after,
    closes the connection after that many events and returns None."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request_bytes("/v1/completions", {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens,
                                                       "ignore_eos": True, "stream": True}))
        await writer.drain()
        status, head = await read_head(reader)
        assert status == 200, head
        events, done = 0, False
        while not done:
            line = await reader.readline()
            if not line:
                break
            line = line.strip()
            if line == b"data: [DONE]":
                done = True
            elif line.startswith(b"data: "):
                events += 1
                if leave_after is not None and events >= leave_after:
                    return None
        assert done, "the stream ended without [DONE]"
        return events
    finally:
        writer.close()


async def plain_completion(port, prompt, max_tokens, leave_after_s=None):
    """One non-streaming completion; returns its completion_tokens (None if the client left)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request_bytes("/v1/completions", {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens,
                                                       "ignore_eos": True}))
        await writer.drain()
        if leave_after_s is not None:
            await asyncio.sleep(leave_after_s)
            return None
        status, head = await read_head(reader)
        assert status == 200, head
        return json.loads(await reader.read())["usage"]["completion_tokens"]
    finally:
        writer.close()


def test_a_burst_of_1000_streams_all_complete(server):
    async def burst():
        tasks = [stream_completion(server.port, f"Request number {i} says", 3) for i in range(1000)]
        return await asyncio.gather(*tasks, return_exceptions=True)

    start = time.time()
    results = asyncio.run(burst())
    failures = [repr(r)[:120] for r in results if isinstance(r, BaseException)]
    assert not failures, f"{len(failures)} of 1000 failed, e.g. {failures[:3]}"
    assert all(r >= 1 for r in results)
    print(f"1000 streams in {time.time() - start:.1f} s")
    server.assert_kv_free()


def test_slowloris_connections_do_not_delay_requests(server):
    """A normal request's time outside the engine (client-side latency minus the server's own
    meta_info.e2e_latency, so that CPU contention on the model does not blur it) grows by less than
    1 s with 300 slowloris connections open; /health answers within 1 s."""
    async def http_overhead():
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        t = time.perf_counter()
        writer.write(request_bytes("/generate", {"text": "The capital of France is",
                                                 "sampling_params": {"max_new_tokens": 2}}))
        await writer.drain()
        status, head = await read_head(reader)
        body = json.loads(await reader.read())
        latency = time.perf_counter() - t
        writer.close()
        assert status == 200, head
        return latency - body["meta_info"]["e2e_latency"]

    async def scenario():
        quiet = [await http_overhead() for _ in range(3)]
        slow = []
        for _ in range(300):
            _, w = await asyncio.open_connection("127.0.0.1", server.port)
            w.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
            slow.append(w)
        stop = asyncio.Event()

        async def drip():
            while not stop.is_set():
                for w in slow:
                    w.write(b"X")
                await asyncio.sleep(1.0)

        dripper = asyncio.create_task(drip())
        await asyncio.sleep(2.5)
        loaded = [await asyncio.wait_for(http_overhead(), 30) for _ in range(3)]
        t = time.perf_counter()
        r, w = await asyncio.open_connection("127.0.0.1", server.port)
        w.write(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        status, _ = await asyncio.wait_for(read_head(r), 30)
        health_s = time.perf_counter() - t
        w.close()
        stop.set()
        await dripper
        for w in slow:
            w.close()
        return quiet, loaded, status, health_s

    quiet, loaded, status, health_s = asyncio.run(scenario())
    print(f"time outside the engine without/with 300 slowloris connections: {quiet} / {loaded} s; "
          f"/health {health_s:.3f} s")
    assert status == 200 and health_s < 1.0
    assert statistics.median(loaded) - statistics.median(quiet) < 1.0


def vm_rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_disconnects_free_the_kv_pool_and_memory(server):
    n = 50  # per round; every 5th client leaves (half of them mid-stream, half while waiting)

    async def round_(leave):
        tasks = []
        for i in range(n):
            prompt = f"Client {i} writes a story about"
            leaving = leave and i % 5 == 0
            if i % 2 == 0:
                tasks.append(stream_completion(server.port, prompt, 200 if leaving else 24,
                                               leave_after=3 if leaving else None))
            else:
                tasks.append(plain_completion(server.port, prompt, 200 if leaving else 24,
                                              leave_after_s=1.0 if leaving else None))
        return await asyncio.gather(*tasks)

    def settle():
        server.assert_kv_free()  # idle, flushed, every page back
        time.sleep(0.5)
        return vm_rss_kb(server.proc.pid)

    asyncio.run(round_(leave=False))
    asyncio.run(round_(leave=True))  # warm-up of both paths
    settle()
    asyncio.run(round_(leave=False))
    rss_after_warmup = settle()
    aborted_before = metric(server, 'radixlm_requests_finished_total{reason="abort"}')
    results = asyncio.run(round_(leave=True))
    assert sum(r is None for r in results) == n // 5
    kv = server.assert_kv_free()
    assert kv["kv_pages_free"] == kv["kv_pages_total"]
    assert metric(server, 'radixlm_requests_finished_total{reason="abort"}') - aborted_before == n // 5
    rss_after_disconnects = settle()
    print(f"VmRSS after warm-up {rss_after_warmup} kB, after the disconnect round {rss_after_disconnects} kB")
    assert abs(rss_after_disconnects - rss_after_warmup) <= 0.02 * rss_after_warmup
