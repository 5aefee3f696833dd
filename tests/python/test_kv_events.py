"""KV events (--kv-events-endpoint): a pyzmq subscriber rebuilds the prefix cache's content from the
published BlockStored / BlockRemoved / AllBlocksCleared events (vLLM's msgpack wire format) and the
rebuilt content is checked against the server: the cache's token count, and probes that the cache
matches each rebuilt leaf whole; through eviction and /flush_cache (AllBlocksCleared, sent when the
cache is reset, is covered by tests/unit/cache_events_test.cpp). The replay socket returns the
same batches the subscriber saw, numbered from 0 without gaps."""
import socket
import time

import msgpack
import pytest
import zmq

from server_util import Server

TOPIC = b"kv"
FNV_OFFSET, FNV_PRIME, MASK = 0xcbf29ce484222325, 0x100000001b3, (1 << 64) - 1


def block_hash(parent, tokens):
    """The documented chain: FNV-1a-64 over le64(parent) then le32 of each token."""
    h = FNV_OFFSET
    for b in parent.to_bytes(8, "little") + b"".join(t.to_bytes(4, "little") for t in tokens):
        h = ((h ^ b) * FNV_PRIME) & MASK
    return h


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class CacheMirror:
    """The cache's blocks as the events tell them: hash -> (parent hash or None, tokens)."""

    def __init__(self, block_size):
        self.block_size = block_size
        self.blocks = {}
        self.counts = {"BlockStored": 0, "BlockRemoved": 0, "AllBlocksCleared": 0}

    def apply(self, event):
        kind = event["type"]
        self.counts[kind] += 1
        if kind == "AllBlocksCleared":
            self.blocks.clear()
        elif kind == "BlockStored":
            assert event["block_size"] == self.block_size and event["medium"] == "GPU"
            assert event["lora_id"] is None and event["lora_name"] is None
            hashes, tokens, parent = event["block_hashes"], event["token_ids"], event["parent_block_hash"]
            assert len(tokens) == len(hashes) * self.block_size
            assert parent is None or parent in self.blocks, "stored under an unknown parent"
            for i, h in enumerate(hashes):
                block = tokens[i * self.block_size:(i + 1) * self.block_size]
                assert h == block_hash(parent or 0, block), "block hash is not the documented chain"
                assert h not in self.blocks, "block stored twice"
                self.blocks[h] = (parent, block)
                parent = h
        else:
            assert kind == "BlockRemoved" and event["medium"] == "GPU"
            for h in event["block_hashes"]:
                assert h in self.blocks, "removed a block that is not cached"
                del self.blocks[h]
            parents = {p for p, _ in self.blocks.values()}
            assert not parents - set(self.blocks) - {None}, "a removed block still has cached children"

    def sequence(self, h):
        out = []
        while h is not None:
            parent, block = self.blocks[h]
            out[:0] = block
            h = parent
        return out

    def leaves(self):
        parents = {p for p, _ in self.blocks.values()}
        return sorted(h for h in self.blocks if h not in parents)

    def num_tokens(self):
        return len(self.blocks) * self.block_size


class Subscriber:
    def __init__(self, ctx, endpoint):
        self.sock = ctx.socket(zmq.SUB)
        self.sock.connect(endpoint)
        self.sock.setsockopt(zmq.SUBSCRIBE, TOPIC)
        self.batches = []  # (seq, payload bytes)

    def drain(self, settle=0.3):
        """Reads until nothing arrived for `settle` seconds."""
        while self.sock.poll(int(settle * 1000)):
            topic, seq, payload = self.sock.recv_multipart()
            assert topic == TOPIC
            self.batches.append((int.from_bytes(seq, "big"), payload))


def decode(payload):
    batch = msgpack.unpackb(payload, raw=False)
    assert set(batch) == {"ts", "events", "data_parallel_rank"}, batch.keys()
    assert batch["data_parallel_rank"] == 0 and abs(batch["ts"] - time.time()) < 600
    return batch["events"]


def replay_from(ctx, endpoint, start):
    dealer = ctx.socket(zmq.DEALER)
    dealer.connect(endpoint)
    dealer.send_multipart([b"", start.to_bytes(8, "big")])
    out = []
    try:
        while True:
            assert dealer.poll(10000), "replay did not answer"
            empty, seq, payload = dealer.recv_multipart()
            assert empty == b""
            if seq == b"\xff" * 8:
                assert payload == b""
                return out
            out.append((int.from_bytes(seq, "big"), payload))
    finally:
        dealer.close(linger=0)


def generate(server, ids, max_new_tokens):
    status, body = server.post("/generate", {"input_ids": ids, "sampling_params": {
        "max_new_tokens": max_new_tokens, "temperature": 0, "ignore_eos": True}})
    assert status == 200, body
    return body


@pytest.mark.parametrize("page_size", [1, 4])
def test_events_rebuild_the_cache(page_size):
    pub, rep = free_port(), free_port()
    server = Server("--page-size", str(page_size), "--max-total-tokens", "512", "--max-running-requests", "4",
                    "--kv-events-endpoint", f"tcp://127.0.0.1:{pub}",
                    "--kv-events-replay-endpoint", f"tcp://127.0.0.1:{rep}", "--kv-events-topic", TOPIC.decode())
    ctx = zmq.Context()
    try:
        sub = Subscriber(ctx, f"tcp://127.0.0.1:{pub}")
        time.sleep(0.5)  # the subscription reaches the publisher before the first event
        mirror = CacheMirror(page_size)

        def sync():
            server.wait_idle()
            before = len(sub.batches)
            sub.drain()
            for _, payload in sub.batches[before:]:
                for ev in decode(payload):
                    mirror.apply(ev)
            _, kv = server.get("/debug/kv")
            assert mirror.num_tokens() == kv["cache_tokens"], (mirror.num_tokens(), kv)

        # Prompts sharing prefixes (a tree), more than the 512-token pool holds: eviction.
        stems = [[(7 * s + i) % 300 + 10 for i in range(40)] for s in range(3)]
        for round_ in range(4):
            for s, stem in enumerate(stems):
                tail = [(11 * round_ + 3 * s + i) % 200 + 400 for i in range(30 + 4 * round_)]
                generate(server, stem + tail, 6)
            sync()
        assert mirror.counts["BlockStored"] > 0 and mirror.counts["BlockRemoved"] > 0, mirror.counts

        # Probes: each rebuilt leaf (still cached when probed) matches whole. A probe also caches,
        # and may evict, so the mirror is brought up to date before each one.
        probed = 0
        for h in mirror.leaves()[:6]:
            sync()
            if h not in mirror.blocks:
                continue
            seq = mirror.sequence(h)
            body = generate(server, seq + [seq[-1]], 1)
            assert body["meta_info"]["cached_tokens"] == len(seq), (len(seq), body["meta_info"])
            probed += 1
        assert probed >= 2
        sync()

        # /flush_cache evicts every block: each one is reported removed.
        removed = mirror.counts["BlockRemoved"]
        status, _ = server.post("/flush_cache", {})
        assert status == 200
        sync()
        assert not mirror.blocks and mirror.counts["BlockRemoved"] > removed

        # Replay from 0: the same batches the subscriber saw, numbered 0, 1, 2, ...
        replayed = replay_from(ctx, f"tcp://127.0.0.1:{rep}", 0)
        assert [s for s, _ in replayed] == list(range(len(replayed)))
        assert replayed == sub.batches
        assert replay_from(ctx, f"tcp://127.0.0.1:{rep}", len(replayed) - 2) == replayed[-2:]
    finally:
        assert server.stop() == 0
        ctx.destroy(linger=0)


def test_endpoint_errors_are_clear():
    port = free_port()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", port))
        busy.listen()
        with pytest.raises(RuntimeError, match=f"--kv-events-endpoint tcp://127.0.0.1:{port}"):
            Server("--kv-events-endpoint", f"tcp://127.0.0.1:{port}")
    with pytest.raises(RuntimeError, match="kv-events-endpoint not-an-endpoint"):
        Server("--kv-events-endpoint", "not-an-endpoint")
