#!/usr/bin/env python3
"""Throughput of a batch that mixes grammar-constrained and free requests against the same batch
unconstrained, on a running `radixlm serve` (standard library only, so it runs on a bare GPU
machine). Each round sends --batch concurrent /v1/completions requests of --max-tokens tokens
(free ones with ignore_eos, so every request runs its full length); in the mixed rounds every
other request carries a JSON schema of an array of exactly --items one-digit integers, whose
output is about as long. Rounds alternate (free, mixed) after one warm-up round; the report gives
each round's generated tokens per second and the ratio of the medians. Every constrained output is
checked (it parses, has the items, each an integer 0-9, and ends with finish_reason "stop" or
"length" at the token limit only if it could not finish)."""
import argparse
import concurrent.futures
import json
import statistics
import time
import urllib.request


def schema(items):
    return {"type": "object", "properties": {"v": {"type": "array", "items": {"type": "integer", "minimum": 0,
                                                                                "maximum": 9},
                                                   "minItems": items, "maxItems": items}},
            "required": ["v"], "additionalProperties": False}


def post(url, body):
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def one(url, i, constrained, args):
    body = {"prompt": f"Request {i}: write numbers.", "max_tokens": args.max_tokens, "temperature": 1.0, "seed": i}
    if constrained:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "v", "schema": schema(args.items)}}
    else:
        body["ignore_eos"] = True
    out = post(url, body)
    choice = out["choices"][0]
    if constrained and choice["finish_reason"] == "stop":
        v = json.loads(choice["text"])["v"]
        assert len(v) == args.items and all(isinstance(x, int) and 0 <= x <= 9 for x in v), choice["text"]
    return out["usage"]["completion_tokens"], constrained, choice["finish_reason"]


def round_(url, mixed, args):
    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(args.batch) as ex:
        results = list(ex.map(lambda i: one(url, i, mixed and i % 2 == 0, args), range(args.batch)))
    dt = time.perf_counter() - t0
    tokens = sum(r[0] for r in results)
    stops = sum(1 for r in results if r[1] and r[2] == "stop")
    return tokens / dt, tokens, dt, stops


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--items", type=int, default=120)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    round_(args.url, False, args)  # warm-up
    free, mixed = [], []
    for r in range(args.rounds):
        for is_mixed, acc in ((False, free), (True, mixed)):
            tps, tokens, dt, stops = round_(args.url, is_mixed, args)
            acc.append(tps)
            print(f"round {r} {'mixed' if is_mixed else 'free '}: {tokens} tokens in {dt:.2f} s = {tps:.0f} tok/s"
                  + (f" ({stops} of {args.batch // 2} constrained finished by the grammar)" if is_mixed else ""))
    f, m = statistics.median(free), statistics.median(mixed)
    print(f"median free {f:.0f} tok/s, mixed (half constrained) {m:.0f} tok/s, ratio {m / f:.3f}")


if __name__ == "__main__":
    main()
