#!/usr/bin/env python3
"""Writes tests/data/tokenizer/tiny512/tokenizer.json: a byte-level BPE tokenizer with exactly 512
ids (256 bytes + merges + 2 special tokens), trained with Hugging Face `tokenizers` on the English
lines of the tokenizer parity corpus. It lets the tiny random test models (vocab 512, e.g. the
Qwen3-Next goldens) be served through `radixlm serve --tokenizer` with text in and text out.
Deterministic: same corpus and settings give the same file.

  .venv/bin/python tools/make_tiny_tokenizer.py
"""
import json
import os

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
VOCAB = 512


def corpus():
    with open(os.path.join(ROOT, "tests/data/tokenizer/corpus.jsonl")) as f:
        for line in f:
            text = json.loads(line).get("text", "")
            if isinstance(text, str) and text.isascii():
                yield text


def main() -> None:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<|endoftext|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus(), trainer=trainer)
    assert tok.get_vocab_size() == VOCAB, tok.get_vocab_size()
    out = os.path.join(ROOT, "tests/data/tokenizer/tiny512")
    os.makedirs(out, exist_ok=True)
    tok.save(os.path.join(out, "tokenizer.json"), pretty=True)
    print(f"wrote {out}/tokenizer.json ({tok.get_vocab_size()} ids)")


if __name__ == "__main__":
    main()
