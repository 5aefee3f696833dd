#!/usr/bin/env python3
"""Reference token ids for the tokenizer parity tests: tests/data/tokenizer/<name>.ref.jsonl.

One output line per line of tests/data/tokenizer/corpus.jsonl. The input text is the line's
"text", or its "hex" bytes decoded with errors="replace" (the documented treatment of invalid
UTF-8: each maximal ill-formed subsequence becomes U+FFFD). Fields, omitted when equal to the
field in brackets:
  ids            encode(text, add_special_tokens=False)
  ids_special    encode(text, add_special_tokens=True)                           [ids]
  ids_nospecial  encode(text, add_special_tokens=False) with special-token strings treated as
                 plain text (tokenizers: encode_special_tokens=True)              [ids]
  decode         decode(ids, skip_special_tokens=False)     [the input text; always given for "hex"]
  decode_skip    decode(ids_special, skip_special_tokens=True)                   [decode]

Hugging Face tokenizer.json fixtures use the `tokenizers` package. The SentencePiece fixture
(mistral_v1/tokenizer.model) uses the `sentencepiece` package with the rule radixlm implements:
with special tokens allowed, the text is split on control-piece strings (<s>, </s>;
leftmost-longest), each ordinary segment is encoded by SentencePiece on its own, and
add_special_tokens prepends bos. decode with skip_special_tokens is SentencePiece's decode (which
drops control tokens); without it, control tokens are written as their piece text and each run of
ordinary ids between them is decoded by SentencePiece, keeping the run's leading space unless the
output is still empty (so [bos] + "Hello" decodes to "<s> Hello", as in transformers).

  .venv/bin/python tools/make_tokenizer_golden.py [--only smollm2,llama3,...]
"""
import argparse
import json
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "data", "tokenizer")
HF_FIXTURES = {
    "smollm2": "smollm2/tokenizer.json",
    "llama3": "generated/llama3/tokenizer.json",
    "qwen3": "generated/qwen3/tokenizer.json",
    "mistral_v1_hf": "mistral_v1_hf/tokenizer.json",
}
SPM_FIXTURES = {"mistral_v1": "mistral_v1/tokenizer.model"}
# Variants: a committed tokenizer.json with some top-level fields replaced (variants.json), to
# cover pre-tokenizer/normalizer/decoder types the real files above do not use.
VARIANTS = json.load(open(os.path.join(DATA, "variants.json"), encoding="utf-8"))


def variant_json(name):
    v = VARIANTS[name]
    tj = json.load(open(os.path.join(DATA, v["base"]), encoding="utf-8"))
    tj.update(v["set"])
    return json.dumps(tj)


def corpus_texts():
    with open(os.path.join(DATA, "corpus.jsonl"), encoding="utf-8") as f:
        for line in f:
            obj = json.loads(line)
            if "text" in obj:
                yield obj["text"], False
            else:
                yield bytes.fromhex(obj["hex"]).decode("utf-8", "replace"), True


def compact(text, was_hex, ids, ids_special, ids_nospecial, decode, decode_skip):
    rec = {"ids": ids}
    if ids_special != ids:
        rec["ids_special"] = ids_special
    if ids_nospecial != ids:
        rec["ids_nospecial"] = ids_nospecial
    if decode != text or was_hex:  # for invalid UTF-8 lines, always spell out the decoded text
        rec["decode"] = decode
    if decode_skip != decode:
        rec["decode_skip"] = decode_skip
    return rec


def hf_records(path=None, variant=None):
    from tokenizers import Tokenizer
    load = (lambda: Tokenizer.from_str(variant_json(variant))) if variant else (lambda: Tokenizer.from_file(path))
    tok = load()
    plain = load()
    plain.encode_special_tokens = True
    for text, was_hex in corpus_texts():
        ids = tok.encode(text, add_special_tokens=False).ids
        ids_special = tok.encode(text, add_special_tokens=True).ids
        ids_nospecial = plain.encode(text, add_special_tokens=False).ids
        yield compact(text, was_hex, ids, ids_special, ids_nospecial,
                      tok.decode(ids, skip_special_tokens=False),
                      tok.decode(ids_special, skip_special_tokens=True))


def spm_split(text, specials):
    """Leftmost-longest split of text on the special strings; yields (is_special, piece)."""
    i, start = 0, 0
    while i < len(text):
        best = max((s for s in specials if text.startswith(s, i)), key=len, default=None)
        if best is None:
            i += 1
            continue
        if start < i:
            yield False, text[start:i]
        yield True, best
        i += len(best)
        start = i
    if start < len(text):
        yield False, text[start:]


def spm_records(path):
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=path)
    specials = [sp.id_to_piece(i) for i in range(sp.get_piece_size()) if sp.is_control(i)]

    def decode_keep_special(ids):
        out, run = "", []

        def flush():
            nonlocal out
            if run:
                text = sp.decode(run)
                if out and sp.id_to_piece(run[0]).startswith("\u2581"):
                    text = " " + text
                out += text
                run.clear()

        for i in ids:
            if sp.is_control(i):
                flush()
                out += sp.id_to_piece(i)
            else:
                run.append(i)
        flush()
        return out

    def encode(text, allow_special):
        if not allow_special:
            return sp.encode(text) if text else []
        out = []
        for is_special, piece in spm_split(text, specials):
            out += [sp.piece_to_id(piece)] if is_special else sp.encode(piece)
        return out

    for text, was_hex in corpus_texts():
        ids = encode(text, True)
        ids_special = ([sp.bos_id()] if sp.bos_id() >= 0 else []) + ids
        ids_nospecial = encode(text, False)
        yield compact(text, was_hex, ids, ids_special, ids_nospecial, decode_keep_special(ids),
                      sp.decode(ids_special))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default=",".join(list(HF_FIXTURES) + list(SPM_FIXTURES) + list(VARIANTS)))
    args = ap.parse_args()
    for name in args.only.split(","):
        if name in HF_FIXTURES:
            records = hf_records(os.path.join(DATA, HF_FIXTURES[name]))
        elif name in VARIANTS:
            records = hf_records(variant=name)
        else:
            records = spm_records(os.path.join(DATA, SPM_FIXTURES[name]))
        out = os.path.join(DATA, f"{name}.ref.jsonl")
        n = 0
        with open(out, "w", encoding="utf-8") as f:
            for rec in records:
                f.write(json.dumps(rec, ensure_ascii=False, separators=(",", ":")) + "\n")
                n += 1
        print(f"wrote {n} lines to {os.path.relpath(out, ROOT)} ({os.path.getsize(out)} bytes)")


if __name__ == "__main__":
    main()
