#!/usr/bin/env python3
"""llama.cpp's test vocabularies and Hugging Face references for radixlm's GGUF vocabulary loader.

1. Downloads the PyPI source distribution llama-cpp-python==0.3.36 once (pip download, cached in
   build/tokenizer_wheels/) and copies its vendor/llama.cpp/models/ggml-vocab-<family>.gguf files
   with their .gguf.inp / .gguf.out into tests/data/tokenizer/generated/gguf_vocab/. The .inp
   holds test strings separated by "\\n__ggml_vocab_test__\\n", the .out the ids Hugging Face's
   tokenizer of the original model gave for each (encode with add_special_tokens=False).
2. For each family, builds the Hugging Face tokenizer.json equivalent to the GGUF: the GGUF's
   tokens (and merges or scores), with the normalizer / pre-tokenizer / model / decoder /
   post-processor of the original model's tokenizer.json (FAMILIES below), and CHECKS with the
   `tokenizers` package that it reproduces every .out line exactly; a family that does not is
   an error (nothing is written for it).
3. Writes generated/gguf_vocab/<family>.tokenizer.json and the goldens of that tokenizer on the
   corpus, generated/gguf_vocab/<family>.ref.jsonl (fields as in make_tokenizer_golden.py); also
   for VARIANTS, a rebuilt tokenizer.json with other normalizer / decoder / model options.

Token types (tokenizer.ggml.token_type): 3 (control) becomes a special added token, 4 (user-
defined) a non-special one; 2 (unknown) is a special added token for byte-level vocabularies and
stays a model token for SentencePiece-style ones (model llama). Phi-3 (general.architecture phi3): its control and user-defined added
tokens strip the white space on their right (rstrip), except <unk>, <s> and <|endoftext|>, as in
the original tokenizer.json (the GGUF does not record rstrip).

  .venv/bin/python tools/make_gguf_vocab_fixtures.py [--only gpt-2,bert-bge,...]
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tarfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_tokenizer_golden import compact, corpus_texts  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "tokenizer", "generated", "gguf_vocab")
CACHE = os.path.join(ROOT, "build", "tokenizer_wheels")
SDIST = "llama-cpp-python==0.3.36"
SPACE = "\u2581"

GPT2_REGEX = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
               r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN35_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}|"
                r" ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# The deepseek-llm tokenizer.json regexes, with code points written as \x{..} escapes.
DEEPSEEK_LLM_LETTERS = (
    r"\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}\x{295}"
    r"-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C}\x{38E}"
    r"-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}"
    r"-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}"
    r"\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}"
    r"-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}"
    r"\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}"
    r"-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}"
    r"\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}"
    r"\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}"
    r"\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}"
    r"-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}"
    r"\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF}"
    r"\x{1E900}-\x{1E943}]+")
DEEPSEEK_LLM_PUNCT = r"\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+"
CJK = r"[\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+"


def byte_level(use_regex=True):
    return {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": use_regex}


def split(regex, behavior="Isolated"):
    return {"type": "Split", "pattern": {"Regex": regex}, "behavior": behavior, "invert": False}


def seq(*parts):
    return {"type": "Sequence", "pretokenizers": list(parts)}


NFC = {"type": "NFC"}
DIGITS = {"type": "Digits", "individual_digits": True}
# The normalizer and pre-tokenizer of each byte-level family's original tokenizer.json.
BYTE_LEVEL_PRE = {
    "gpt-2": (None, byte_level()),
    "mpt": (NFC, byte_level()),  # mosaicml/mpt-7b = EleutherAI/gpt-neox-20b's tokenizer
    "starcoder": (None, seq(DIGITS, byte_level())),
    "refact": (None, seq(DIGITS, byte_level())),
    "command-r": (NFC, seq(DIGITS, byte_level())),
    "falcon": (None, seq({"type": "Punctuation", "behavior": "Contiguous"}, byte_level(),
                         {"type": "Digits", "individual_digits": False}, split(r"[0-9][0-9][0-9]"))),
    "deepseek-llm": (None, seq(split(r"[\r\n]"), split(DEEPSEEK_LLM_LETTERS), split(DEEPSEEK_LLM_PUNCT),
                               split(r"\s+$"), split(CJK), DIGITS, byte_level(False))),
    "deepseek-coder": (None, seq(split(r"[\r\n]"), split(r"\s?\p{L}+"), split(r"\s?\p{P}+"), split(CJK),
                                 DIGITS, byte_level(False))),
    "llama-bpe": (None, seq(split(LLAMA3_REGEX), byte_level(False))),
    "qwen2": (NFC, seq(split(QWEN2_REGEX), byte_level(False))),
    "qwen35": (None, seq(split(QWEN35_REGEX), byte_level(False))),
}
# Variants of a family's rebuilt tokenizer.json with other options (no .out to check them against:
# goldens only), covering the BertNormalizer / WordPiece options bert-bge leaves at one value.
VARIANTS = {
    "bert-cased": ("bert-bge", {
        "normalizer": {"type": "BertNormalizer", "clean_text": False, "handle_chinese_chars": False,
                       "strip_accents": None, "lowercase": False}}),
    "bert-accents": ("bert-bge", {
        "normalizer": {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
                       "strip_accents": True, "lowercase": False},
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": False},
        "model.max_input_chars_per_word": 8}),
}
FAMILIES = ["gpt-2", "mpt", "starcoder", "refact", "command-r", "falcon", "deepseek-llm", "deepseek-coder",
            "llama-bpe", "qwen2", "qwen35", "llama-spm", "phi-3", "gemma-4", "bert-bge"]


def fetch():
    """Copies the vocab files out of the cached sdist into OUT (once)."""
    os.makedirs(CACHE, exist_ok=True)
    found = glob.glob(os.path.join(CACHE, "llama_cpp_python-0.3.36.tar.gz"))
    if not found:
        subprocess.check_call([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary",
                               "llama-cpp-python", "-d", CACHE, SDIST])
        found = glob.glob(os.path.join(CACHE, "llama_cpp_python-0.3.36.tar.gz"))
    os.makedirs(OUT, exist_ok=True)
    prefix = "llama_cpp_python-0.3.36/vendor/llama.cpp/models/ggml-vocab-"
    with tarfile.open(found[0]) as tar:
        for m in tar.getmembers():
            if not m.name.startswith(prefix):
                continue
            base = m.name[len(prefix):]
            family = base.split(".gguf")[0]
            dst = os.path.join(OUT, base)
            if family in FAMILIES and not os.path.exists(dst):
                with tar.extractfile(m) as src, open(dst + ".tmp", "wb") as f:
                    f.write(src.read())
                os.replace(dst + ".tmp", dst)


def read_gguf(path):
    import gguf
    r = gguf.GGUFReader(path)

    def get(key, default=None):
        f = r.fields.get(key)
        if f is None:
            return default
        if key in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges"):
            return [bytes(f.parts[i]).decode("utf-8") for i in f.data]
        if key in ("tokenizer.ggml.token_type", "tokenizer.ggml.scores"):
            return [f.parts[i][0].item() for i in f.data]
        return f.contents()
    return get


def added_token(i, content, special, rstrip=False):
    return {"id": i, "content": content, "single_word": False, "lstrip": False, "rstrip": rstrip,
            "normalized": False, "special": special}


def template(prefix, suffix):
    """TemplateProcessing adding the (content, id) pairs in prefix/suffix around a sequence."""
    single = [{"SpecialToken": {"id": t, "type_id": 0}} for t, _ in prefix] + \
        [{"Sequence": {"id": "A", "type_id": 0}}] + [{"SpecialToken": {"id": t, "type_id": 0}} for t, _ in suffix]
    specials = {t: {"id": t, "ids": [i], "tokens": [t]} for t, i in prefix + suffix}
    return {"type": "TemplateProcessing", "single": single, "pair": single, "special_tokens": specials}


def score_merges(tokens, scores, types, vocab):
    """Merges of a SentencePiece-style vocabulary, as radixlm derives them (gguf_vocab.cpp): every
    split of an ordinary piece into two pieces, by the merged piece's score, higher first."""
    merges = []
    for i, piece in enumerate(tokens):
        if types[i] not in (1, 4):
            continue
        for k in range(1, len(piece)):
            left, right = piece[:k], piece[k:]
            if left in vocab and right in vocab:
                merges.append((-scores[i], i, vocab[left], vocab[right]))
    merges.sort()
    return [[tokens[left], tokens[right]] for _, _, left, right in merges]


def split_merges(merges):
    """GGUF merges are "left right", split at the first space after the first character."""
    return [[m[:m.index(" ", 1)], m[m.index(" ", 1) + 1:]] for m in merges]


def build(family, get):
    """The tokenizer.json equivalent to the GGUF read by `get`, and add_special_tokens' bos/eos."""
    model, tokens = get("tokenizer.ggml.model"), get("tokenizer.ggml.tokens")
    types = get("tokenizer.ggml.token_type", [1] * len(tokens))
    arch = get("general.architecture")
    bos, eos, unk = (get(f"tokenizer.ggml.{k}_token_id") for k in ("bos", "eos", "unknown"))
    add_bos = bool(get("tokenizer.ggml.add_bos_token", model != "gpt2"))
    add_eos = bool(get("tokenizer.ggml.add_eos_token", False))
    spm = model == "llama"
    rstrip_keep = {"<unk>", "<s>", "<|endoftext|>"}
    added = [added_token(i, tokens[i], types[i] != 4, arch == "phi3" and tokens[i] not in rstrip_keep)
             for i in range(len(tokens)) if tokens[i] and (types[i] in (3, 4) or (types[i] == 2 and not spm))]
    tj = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added}

    if model == "bert":
        # llama.cpp's converter writes word-initial pieces with a leading U+2581 and continuation
        # pieces without their "##"; [..] pieces stay as they are.
        vocab = {}
        for i, t in enumerate(tokens):
            orig = t if types[i] == 3 or (t.startswith("[") and t.endswith("]")) else \
                t[1:] if t.startswith(SPACE) else "##" + t
            vocab.setdefault(orig, i)
        tj["normalizer"] = {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
                            "strip_accents": None, "lowercase": True}
        tj["pre_tokenizer"] = {"type": "BertPreTokenizer"}
        cls, sep = get("tokenizer.ggml.cls_token_id"), get("tokenizer.ggml.seperator_token_id")
        tj["post_processor"] = template([(tokens[cls], cls)], [(tokens[sep], sep)])
        tj["decoder"] = {"type": "WordPiece", "prefix": "##", "cleanup": True}
        tj["model"] = {"type": "WordPiece", "unk_token": tokens[unk], "continuing_subword_prefix": "##",
                       "max_input_chars_per_word": 100, "vocab": vocab}
        return tj

    vocab = {}
    for i, t in enumerate(tokens):
        vocab.setdefault(t, i)
    prefix = [(tokens[bos], bos)] if add_bos and bos is not None else []
    suffix = [(tokens[eos], eos)] if add_eos and eos is not None else []
    tj["post_processor"] = template(prefix, suffix) if prefix or suffix else None

    if model == "gpt2":
        normalizer, pre = BYTE_LEVEL_PRE[family]
        merges = split_merges(get("tokenizer.ggml.merges"))
        tj["normalizer"], tj["pre_tokenizer"], tj["decoder"] = normalizer, pre, byte_level()
        tj["model"] = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                       "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                       "ignore_merges": family == "llama-bpe", "vocab": vocab, "merges": merges}
    elif model == "llama":
        # transformers' legacy Llama conversion (Llama 2, Phi-3).
        scores = get("tokenizer.ggml.scores")
        tj["normalizer"] = {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": SPACE}, {"type": "Replace", "pattern": {"String": " "}, "content": SPACE}]}
        tj["pre_tokenizer"] = None
        tj["decoder"] = {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": SPACE}, "content": " "}, {"type": "ByteFallback"},
            {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
        tj["model"] = {"type": "BPE", "dropout": None, "unk_token": tokens[unk], "continuing_subword_prefix": None,
                       "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                       "vocab": vocab, "merges": score_merges(tokens, scores, types, vocab)}
    elif model == "gemma4":
        # transformers' GemmaTokenizer: spaces become U+2581, BPE with the GGUF's merges.
        merges = split_merges(get("tokenizer.ggml.merges"))
        tj["normalizer"] = {"type": "Replace", "pattern": {"String": " "}, "content": SPACE}
        tj["pre_tokenizer"] = {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious",
                               "invert": False}
        tj["decoder"] = {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": SPACE}, "content": " "}, {"type": "ByteFallback"},
            {"type": "Fuse"}]}
        tj["model"] = {"type": "BPE", "dropout": None, "unk_token": tokens[unk], "continuing_subword_prefix": None,
                       "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                       "vocab": vocab, "merges": merges}
    else:
        raise SystemExit(f"{family}: unexpected tokenizer.ggml.model {model}")
    return tj


def check_out(family, tok):
    """Every .inp string must encode to its .out ids; returns the number of strings checked."""
    base = os.path.join(OUT, f"{family}.gguf")
    with open(base + ".inp", encoding="utf-8") as f:
        inputs = f.read().split("\n__ggml_vocab_test__\n")
    with open(base + ".out", encoding="utf-8") as f:
        outputs = f.read().split("\n")
    if inputs and inputs[-1] == "":
        inputs.pop()
    bad = 0
    for i, text in enumerate(inputs):
        want = [int(x) for x in outputs[i].split()]
        got = tok.encode(text, add_special_tokens=False).ids
        if got != want:
            bad += 1
            if bad <= 3:
                print(f"  {family} .out mismatch on {text!r}:\n    want {want}\n    got  {got}")
    if bad:
        raise SystemExit(f"{family}: {bad} of {len(inputs)} .inp strings differ from .out")
    return len(inputs)


def variant(name):
    base, changes = VARIANTS[name]
    with open(os.path.join(OUT, f"{base}.tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    for key, value in changes.items():
        obj = tj
        *path, last = key.split(".")
        for k in path:
            obj = obj[k]
        obj[last] = value
    return tj


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default=",".join(FAMILIES + list(VARIANTS)))
    args = ap.parse_args()
    from tokenizers import Tokenizer
    fetch()
    for family in args.only.split(","):
        if family in VARIANTS:
            tj = variant(family)
        else:
            tj = build(family, read_gguf(os.path.join(OUT, f"{family}.gguf")))
        text = json.dumps(tj, ensure_ascii=False)
        tok = Tokenizer.from_str(text)
        n = 0 if family in VARIANTS else check_out(family, tok)
        plain = Tokenizer.from_str(text)
        plain.encode_special_tokens = True
        lines = 0
        with open(os.path.join(OUT, f"{family}.ref.jsonl.tmp"), "w", encoding="utf-8") as f:
            for s, was_hex in corpus_texts():
                ids = tok.encode(s, add_special_tokens=False).ids
                ids_special = tok.encode(s, add_special_tokens=True).ids
                rec = compact(s, was_hex, ids, ids_special, plain.encode(s, add_special_tokens=False).ids,
                              tok.decode(ids, skip_special_tokens=False),
                              tok.decode(ids_special, skip_special_tokens=True))
                f.write(json.dumps(rec, ensure_ascii=False, separators=(",", ":")) + "\n")
                lines += 1
        os.replace(os.path.join(OUT, f"{family}.ref.jsonl.tmp"), os.path.join(OUT, f"{family}.ref.jsonl"))
        with open(os.path.join(OUT, f"{family}.tokenizer.json"), "w", encoding="utf-8") as f:
            f.write(text)
        checked = "a variant" if family in VARIANTS else f"{n} .inp strings match .out"
        print(f"{family}: {checked}; wrote {family}.ref.jsonl ({lines} lines)")


if __name__ == "__main__":
    main()
