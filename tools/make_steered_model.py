#!/usr/bin/env python3
"""Writes a tiny Llama model that, decoding greedily, answers any prompt with one chosen text and
then an end token: the end-to-end tests use it to make a server emit an exact tool call through a
real tokenizer and chat template.

The text is PREFIX + a JSON value + SUFFIX. The JSON is written with white space chosen (seeded)
between its tokens until the whole text can be spelled as a sequence of DISTINCT vocabulary
tokens t1..tm: the tokenizer's own spelling, a few repeated tokens re-spelled with a neighbour
from the vocabulary's pieces; `tokenizers` checks that the chain decodes to the text. The JSON's
value (what a parser reads) is the one given. The model has one layer
whose attention and MLP weights are zero, so the hidden state is the token's embedding: token t_i
embeds as the unit vector e_i, every other token as e_0; lm_head row t1 is e_0, row t_{i+1} is
e_i and the end token's row is e_m. Greedy decoding after any prompt whose last token is not one
of t1..tm therefore spells t1..tm and ends. The last token of each --avoid-text (how a chat
template's generation prompt ends) is kept out of the chain.

  make_steered_model.py --tokenizer-dir DIR --chat-template FILE --prefix TEXT --json JSON \\
                        --suffix TEXT --end-token TOKEN --out DIR [--avoid-text TEXT ...]

The output directory holds config.json, model.safetensors (float16), tokenizer.json,
tokenizer_config.json (with the chat template) and steered.json (the text and the chain's ids).
"""
import argparse
import json
import os
import random
import shutil

import numpy as np
import tokenizers
from safetensors.numpy import save_file

from make_tokenizer_fixtures import bytes_to_unicode  # GPT-2's byte <-> character table


def piece_texts(spec, tok):
    """id -> the text a token stands for (None when it is not plain text)."""
    byte_level = "ByteLevel" in json.dumps(spec.get("decoder"))
    inverse = {c: b for b, c in bytes_to_unicode().items()}
    out = {}
    for piece, i in spec["model"]["vocab"].items():
        if byte_level:
            try:
                out[i] = bytes(inverse[c] for c in piece).decode("utf-8")
            except (KeyError, UnicodeDecodeError):
                continue
        elif piece.startswith("<0x") and piece.endswith(">"):  # byte fallback: ASCII bytes only
            if int(piece[3:-1], 16) < 0x80:
                out[i] = chr(int(piece[3:-1], 16))
        else:
            out[i] = piece.replace("\u2581", " ")
    for a in spec.get("added_tokens", []):
        if not a.get("special", True):
            out[a["id"]] = a["content"]
    return out


def spell_span(text, index, banned, budget=2000):
    """Distinct ids outside `banned` whose pieces concatenate to `text` (depth-first, longest pieces
    first, at most `budget` steps), or None. index: piece text -> ids."""
    used, chain, steps = set(), [], [0]

    def go(pos):
        if pos == len(text):
            return True
        for end in range(len(text), pos, -1):
            for i in index.get(text[pos:end], []):
                steps[0] += 1
                if steps[0] > budget:
                    return False
                if i in used or i in banned:
                    continue
                used.add(i)
                chain.append(i)
                if go(end):
                    return True
                used.discard(i)
                chain.pop()
        return False

    return chain if go(0) else None


def spell(text, tok, pieces, index, avoid, max_repairs=6):
    """Distinct token ids whose pieces concatenate to `text`, or None: the tokenizer's own spelling,
    with a few repeated (or avoided) tokens re-spelled together with a neighbour."""
    enc = tok.encode(text, add_special_tokens=False)
    segs = [(a, b, i) for (a, b), i in zip(enc.offsets, enc.ids)]
    for _ in range(max_repairs + 1):
        seen, bad = set(), None
        for k, (a, b, i) in enumerate(segs):
            # A piece that is not exactly its text (a word-initial space at the start) is re-spelled too.
            if i in seen or i in avoid or pieces.get(i) != text[a:b]:
                bad = k
                break
            seen.add(i)
        if bad is None:
            return [i for _, _, i in segs]
        for width in (0, 1, 2):
            lo, hi = max(0, bad - width), min(len(segs), bad + width + 1)
            s, e = segs[lo][0], segs[hi - 1][1]
            banned = avoid | {i for k, (_, _, i) in enumerate(segs) if k < lo or k >= hi}
            sub = spell_span(text[s:e], index, banned)
            if sub is not None:
                new, pos = [], s
                for i in sub:
                    new.append((pos, pos + len(pieces[i]), i))
                    pos += len(pieces[i])
                segs = segs[:lo] + new + segs[hi:]
                break
        else:
            return None
    return None


def write_json(value, rng):
    """`value` as JSON text with random white space between its tokens."""
    ws = lambda: rng.choice(["", "", " ", " ", "  ", "\t", "\n"])  # noqa: E731
    if isinstance(value, dict):
        items = [ws() + json.dumps(k) + ws() + ":" + ws() + write_json(v, rng) + ws() for k, v in value.items()]
        return "{" + ",".join(items) + "}"
    if isinstance(value, list):
        return "[" + ",".join(ws() + write_json(v, rng) + ws() for v in value) + "]"
    return json.dumps(value)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer-dir", required=True)
    ap.add_argument("--chat-template", required=True)
    ap.add_argument("--prefix", default="")
    ap.add_argument("--json", required=True, help="the JSON value between prefix and suffix")
    ap.add_argument("--suffix", default="")
    ap.add_argument("--end-token", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--avoid-text", action="append", default=[])
    ap.add_argument("--bos-token", default=None)
    args = ap.parse_args()

    tok_path = os.path.join(args.tokenizer_dir, "tokenizer.json")
    with open(tok_path, encoding="utf-8") as f:
        spec = json.load(f)
    tok = tokenizers.Tokenizer.from_file(tok_path)
    end = tok.token_to_id(args.end_token)
    if end is None:
        raise SystemExit(f"end token {args.end_token!r} is not in the vocabulary")
    avoid = {end}
    for t in args.avoid_text:  # a prompt's end: its last token
        avoid.add(tok.encode(t, add_special_tokens=False).ids[-1])
    pieces = piece_texts(spec, tok)
    index = {}
    for i, p in sorted(pieces.items()):
        if p and i not in avoid:
            index.setdefault(p, []).append(i)
    value = json.loads(args.json)
    rng = random.Random(0)
    text = args.prefix + json.dumps(value) + args.suffix
    for _ in range(50000):
        chain = spell(text, tok, pieces, index, avoid)
        if chain is not None:
            break
        text = args.prefix + write_json(value, rng) + args.suffix
    else:
        raise SystemExit(f"no spelling of {args.json} with distinct tokens in 50000 layouts")
    decoded = tok.decode(chain, skip_special_tokens=False)
    if decoded != text:
        raise SystemExit(f"the chain decodes to {decoded!r}, not {text!r}")

    vocab = tok.get_vocab_size(with_added_tokens=True)
    hidden = 64 * ((len(chain) + 1) // 64 + 1)
    emb = np.zeros((vocab, hidden), np.float16)
    head = np.zeros((vocab, hidden), np.float16)
    emb[:, 0] = 1
    for k, t in enumerate(chain, start=1):
        emb[t] = 0
        emb[t, k] = 1
    head[chain[0], 0] = 1
    for k in range(1, len(chain)):
        head[chain[k], k] = 1
    head[end, len(chain)] = 1

    heads, head_dim, inter = 2, 64, 64
    zeros = lambda *shape: np.zeros(shape, np.float16)  # noqa: E731
    tensors = {
        "model.embed_tokens.weight": emb,
        "lm_head.weight": head,
        "model.norm.weight": np.ones(hidden, np.float16),
        "model.layers.0.input_layernorm.weight": np.ones(hidden, np.float16),
        "model.layers.0.post_attention_layernorm.weight": np.ones(hidden, np.float16),
        "model.layers.0.self_attn.q_proj.weight": zeros(heads * head_dim, hidden),
        "model.layers.0.self_attn.k_proj.weight": zeros(heads * head_dim, hidden),
        "model.layers.0.self_attn.v_proj.weight": zeros(heads * head_dim, hidden),
        "model.layers.0.self_attn.o_proj.weight": zeros(hidden, heads * head_dim),
        "model.layers.0.mlp.gate_proj.weight": zeros(inter, hidden),
        "model.layers.0.mlp.up_proj.weight": zeros(inter, hidden),
        "model.layers.0.mlp.down_proj.weight": zeros(hidden, inter),
    }
    os.makedirs(args.out, exist_ok=True)
    save_file(tensors, os.path.join(args.out, "model.safetensors"))
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
        "intermediate_size": inter, "num_hidden_layers": 1, "num_attention_heads": heads,
        "num_key_value_heads": heads, "head_dim": head_dim, "hidden_act": "silu", "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": False, "vocab_size": vocab,
        "eos_token_id": end, "torch_dtype": "float16",
    }
    if args.bos_token is not None:
        config["bos_token_id"] = tok.token_to_id(args.bos_token)
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    shutil.copy(tok_path, os.path.join(args.out, "tokenizer.json"))
    with open(args.chat_template, encoding="utf-8") as f:
        template = f.read()
    tok_config = {"chat_template": template, "eos_token": args.end_token, "bos_token": args.bos_token}
    with open(os.path.join(args.out, "tokenizer_config.json"), "w") as f:
        json.dump(tok_config, f, indent=1)
    with open(os.path.join(args.out, "steered.json"), "w") as f:
        json.dump({"text": text, "chain": chain, "end": end}, f, indent=1)


if __name__ == "__main__":
    main()
