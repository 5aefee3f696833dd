#!/usr/bin/env python3
"""xgrammar's Python package on the walks `radixlm bench grammar --walks` recorded: the same
vocabulary (each id's token string from tokenizer.json, "" for special tokens, the same encoding
detection as src/grammar/grammar.cpp), the same JSON schemas compiled the same way (compact
separators, strict), and the same token sequences replayed, so both fill masks for exactly the
same matcher states. Prints the per-token mask-fill and accept times beside radixlm's (its
--json summary) and their ratio.

    radixlm bench grammar --tokenizer tests/data/tokenizer/generated/llama3/tokenizer.json \\
        --schemas schemas.jsonl --walks walks.jsonl --json radixlm.json
    python tools/bench_grammar_xgrammar.py --tokenizer tests/data/tokenizer/generated/llama3/tokenizer.json \\
        --walks walks.jsonl --radixlm radixlm.json

Needs `pip install xgrammar==0.2.8` (it pulls torch and transformers) and `tokenizers`.
"""
import argparse
import importlib.metadata
import json
import statistics
import time

import tokenizers
import xgrammar as xgr


def encoded_vocab(path):
    tok = tokenizers.Tokenizer.from_file(path)
    special = {i for i, t in tok.get_added_tokens_decoder().items() if t.special}
    n = tok.get_vocab_size(with_added_tokens=True)
    vocab = ["" if i in special else (tok.id_to_token(i) or "") for i in range(n)]
    if tok.token_to_id("<0x0A>") is not None:
        vtype = xgr.VocabType.BYTE_FALLBACK
    elif tok.token_to_id("\u010a") is not None:
        vtype = xgr.VocabType.BYTE_LEVEL
    else:
        vtype = xgr.VocabType.RAW
    return vocab, vtype


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--walks", required=True)
    ap.add_argument("--radixlm", required=True, help="radixlm bench grammar --json output")
    args = ap.parse_args()
    ours = json.load(open(args.radixlm))
    vocab, vtype = encoded_vocab(args.tokenizer)
    assert len(vocab) == ours["vocab_size"], (len(vocab), ours["vocab_size"])
    info = xgr.TokenizerInfo(vocab, vocab_type=vtype, vocab_size=len(vocab), stop_token_ids=ours["stop_ids"],
                             add_prefix_space=False)
    compiler = xgr.GrammarCompiler(info, max_threads=8, cache_enabled=True)
    bitmask = xgr.allocate_token_bitmask(1, len(vocab))
    fill, accept, compile_ms = [], [], []
    for line in open(args.walks):
        w = json.loads(line)
        t0 = time.perf_counter()
        g = compiler.compile_json_schema(w["schema"], any_whitespace=False, strict_mode=True)
        compile_ms.append((time.perf_counter() - t0) * 1e3)
        m = xgr.GrammarMatcher(g)
        for token in w["tokens"]:
            t0 = time.perf_counter()
            m.fill_next_token_bitmask(bitmask)
            t1 = time.perf_counter()
            ok = m.accept_token(token)
            t2 = time.perf_counter()
            assert ok, f"xgrammar refused token {token} that radixlm's matcher allowed"
            fill.append((t1 - t0) * 1e6)
            accept.append((t2 - t1) * 1e6)
    fill_mean, accept_mean = statistics.fmean(fill), statistics.fmean(accept)
    print(f"xgrammar {importlib.metadata.version('xgrammar')} (Python): {len(fill)} tokens replayed")
    print(f"  mask fill per token: mean {fill_mean:.2f} us, p50 {statistics.median(fill):.2f} us; "
          f"accept mean {accept_mean:.2f} us; compile mean {statistics.fmean(compile_ms):.2f} ms")
    print(f"  radixlm (C++ core, same walks): fill mean {ours['fill_us_mean']:.2f} us, p50 {ours['fill_us_p50']:.2f} us; "
          f"accept mean {ours['accept_us_mean']:.2f} us; compile mean {ours['compile_ms_mean']:.2f} ms")
    print(f"  ratio radixlm / xgrammar-python: fill {ours['fill_us_mean'] / fill_mean:.2f}, "
          f"fill+accept {(ours['fill_us_mean'] + ours['accept_us_mean']) / (fill_mean + accept_mean):.2f}")
    assert ours["tokens"] == len(fill), (ours["tokens"], len(fill))


if __name__ == "__main__":
    main()
