#!/usr/bin/env python3
"""Random JSON schemas for the structured-output tests and benchmark, deterministic in the seed.

Each schema is an object with nested objects, arrays, enums, consts, anyOf, string formats and
patterns, integers and numbers with bounds — the shapes clients send in response_format. Strings,
arrays and nesting are bounded so that a model sampling at random among the allowed tokens still
finishes (an unbounded string ends only when a closing quote happens to be drawn).

    python tools/make_json_schemas.py --count 200 --seed 0 > schemas.jsonl
"""
import argparse
import json
import random

# Formats whose grammar is bounded and agrees with the `jsonschema` checker. Left out: xgrammar's
# "date" also allows days such as 02-31 and its "ipv6" embedded IPv4 parts with leading zeros, which
# the checker rejects; an email's local part is unbounded. ("ipv4" with leading zeros is fixed by
# scripts/setup.sh.)
FORMATS = ["ipv4", "uuid"]
WORDS = ["alpha", "beta", "gamma", "delta", "red", "green", "blue", "north", "south", "x", "y", "id", "name",
         "count", "items", "value", "kind", "tags", "meta", "score", "ok", "level", "unit", "label"]


def scalar(rng):
    kind = rng.choice(["string", "string", "integer", "number", "boolean", "enum", "const", "null", "format",
                       "pattern", "int_enum"])
    if kind == "string":
        lo = rng.randint(0, 3)
        return {"type": "string", "minLength": lo, "maxLength": lo + rng.randint(0, 10)}
    if kind == "integer":
        s = {"type": "integer"}
        lo = rng.randint(-1000, 1000)
        if rng.random() < 0.8:
            s["minimum"] = lo
        if rng.random() < 0.8:
            s["maximum"] = lo + rng.randint(0, 5000)
        if "minimum" in s and rng.random() < 0.2:
            s["exclusiveMinimum"] = s.pop("minimum")
        return s
    if kind == "number":
        lo = round(rng.uniform(-100, 100), 2)
        return {"type": "number", "minimum": lo, "maximum": round(lo + rng.uniform(0.5, 1000), 2)}
    if kind == "boolean":
        return {"type": "boolean"}
    if kind == "enum":
        return {"enum": rng.sample(WORDS, rng.randint(1, 5))}
    if kind == "int_enum":
        return {"type": "integer", "enum": rng.sample(range(-50, 50), rng.randint(1, 4))}
    if kind == "const":
        return {"const": rng.choice(WORDS)}
    if kind == "null":
        return {"type": "null"}
    if kind == "format":
        return {"type": "string", "format": rng.choice(FORMATS)}
    return {"type": "string", "pattern": rng.choice(["^[a-z]{2,5}$", "^[A-Z][0-9]{3}$", "^(yes|no)-[0-9]$"])}


def value(rng, depth):
    r = rng.random()
    if depth < 2 and r < 0.18:
        return obj(rng, depth + 1)
    if depth < 3 and r < 0.33:
        s = {"type": "array", "items": value(rng, depth + 1), "maxItems": rng.randint(1, 4)}
        if rng.random() < 0.5:
            s["minItems"] = rng.randint(0, s["maxItems"])
        return s
    if depth < 3 and r < 0.43:
        return {"anyOf": [value(rng, depth + 1) for _ in range(rng.randint(2, 3))]}
    return scalar(rng)


def obj(rng, depth):
    names = rng.sample(WORDS, rng.randint(1, 5))
    props = {n: value(rng, depth) for n in names}
    s = {"type": "object", "properties": props, "required": [n for n in names if rng.random() < 0.7],
         "additionalProperties": False}
    return s


def schemas(count, seed):
    rng = random.Random(seed)
    return [obj(rng, 0) for _ in range(count)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    for s in schemas(args.count, args.seed):
        print(json.dumps(s))


if __name__ == "__main__":
    main()
