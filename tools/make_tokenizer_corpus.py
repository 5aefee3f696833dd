#!/usr/bin/env python3
"""Writes tests/data/tokenizer/corpus.jsonl: the tokenizer parity corpus.

Deterministic (fixed seed, no network): handwritten seed strings that stress the pre-tokenizer
rules, plus generated combinations of fragments. One JSON object per line:
  {"text": "..."}   a valid UTF-8 line
  {"hex": "..."}    a line whose bytes are NOT valid UTF-8 (hex of the raw bytes)
Tokenizers treat invalid UTF-8 like Python's bytes.decode("utf-8", errors="replace"): every
maximal ill-formed subsequence becomes U+FFFD before tokenization.

  .venv/bin/python tools/make_tokenizer_corpus.py [--out tests/data/tokenizer/corpus.jsonl]
"""
import argparse
import json
import random

SPECIALS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|begin_of_text|>", "<|end_of_text|>",
    "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>", "<s>", "</s>", "<unk>",
    "<think>", "</think>", "<tool_call>", "<|fim_prefix|>", "<repo_name>", "<file_sep>",
]

SEEDS = [
    "Hello world", "Hello, world!", " leading space", "trailing space ", "  two leading",
    "trailing two  ", "\ttab\tseparated\tvalues", "a\n\nb", "line one\nline two\r\nline three\r",
    "   ", "\n", "\n\n\n", " \n ", "\t\t\t", "x  y   z    w", "end with newline\n",
    "It's", "it's", "IT'S", "They're", "THEY'RE", "we've", "WE'VE", "I'm", "I'M", "you'll",
    "YOU'LL", "he'd", "HE'D", "don't", "DON'T", "can't won't shan't", "'s 't 're 've 'm 'll 'd",
    "'S 'T 'RE 'VE 'M 'LL 'D", "rock'n'roll", "o'clock", "dogs' toys", "the dog's bone",
    "1", "12", "123", "1234", "12345", "123456", "1234567", "12345678901234567890",
    "3.14159", "1,000,000", "-42", "+7", "1e10", "0x1F", "2024-01-31", "10:45:59", "$19.99",
    "١٢٣٤٥", "१२३४५", "一二三", "½ ¾ ²", "Ⅻ", "①②③",
    "你好，世界！", "我爱自然语言处理。", "東京は日本の首都です。", "ひらがな カタカナ 漢字",
    "안녕하세요 세계", "مرحبا بالعالم", "السلام عليكم ورحمة الله", "नमस्ते दुनिया",
    "हिन्दी भाषा बहुत सुंदर है।", "Привет, мир!", "ПРИВЕТ МИР", "Съешь же ещё этих мягких булок",
    "สวัสดีชาวโลก", "ภาษาไทยไม่มีช่องว่างระหว่างคำ", "Γειά σου Κόσμε", "שלום עולם",
    "Ελληνικά και English mixed", "Zürich Straße Ørsted façade naïve coöperate",
    "e\u0301", "cafe\u0301", "\u00e9", "A\u030a", "\u212b", "\u1e9b\u0323", "\uac00\u11a8",
    "\u1100\u1161\u11a8", "Ω\u2126", "ﬁ ligature", "ｆｕｌｌｗｉｄｔｈ", "ǅ ǈ ǋ", "ſ s ſt",
    "K\u212a", "İstanbul ıi", "ß ẞ", "ΣΑΣ σας",
    "😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "❤️", "🇯🇵🇺🇸", "👩🏾‍💻 coding", "🤷‍♂️", "emoji😀in😀text",
    "🧑🏻‍🤝‍🧑🏿", "1️⃣ keycap", "☺ ☻ ♥", "𝕳𝖊𝖑𝖑𝖔", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "\U0001f600\U0001f601\U0001f602",
    "def foo(x):\n    return x * 2\n", "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}",
    "if x == 1 and y != 2:\n        pass", "#include <stdio.h>\nint main(void) { return 0; }",
    "SELECT * FROM users WHERE id = 42;", "x=>x+1; const f = (a, b) => a ?? b;",
    "<div class=\"a\">text</div>", "https://example.com/path?q=1&r=2#frag", "user@example.com",
    "C:\\Windows\\System32", "a_b_c __init__ __main__", "camelCaseIdentifier snake_case_id",
    "{\"key\": [1, 2, {\"nested\": null}]}", "    indented four", "\t\tindented tabs",
    "!!!???...", "...", "—–-", "«quotes» „low“ ‚single‘", "“smart quotes” ‘single’",
    "a\u00a0b", "a\u2009b", "a\u3000b", "a\u180eb", "a\u2028b", "a\u0085b", "a\u200bb",
    "\u200d", "\ufeffBOM", "a\x0bb\x0cc", "nul\x00byte", "\x01\x02\x03", "\x7f del",
    "\ufffd", "\U0010fffd", "\ue000 private use", "\u0301 leading combining",
    "Ǆemo", "ⅰⅱⅲ", "µ", "℃ ℉", "™ ® ©", "∑∫∂√∞≈≠≤≥", "→ ← ↑ ↓", "▁ lower one eighth block",
    "<0x41>", "<0xE4><0xB8>", "Ġ Ċ ĉ", "âĢĶ",
]

FRAGMENTS_WORDS = [
    "the", "The", "THE", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "tokenizer",
    "Tokenization", "internationalization", "über", "naïve", "日本語", "中文", "한국어", "العربية",
    "हिन्दी", "русский", "ไทย", "Ελληνικά", "emoji", "😀", "👍🏻", "👨‍💻", "🇫🇷", "I'm", "you're",
    "WE'LL", "it's", "don't", "x", "y_z", "__dunder__", "foo.bar()", "a+b", "i++", "0", "007",
    "42", "3.5", "1000000", "99999999999", "-1", "½", "٣", "४", "$", "%", "@", "#", "&&", "||",
]
SEPARATORS = [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n", "\n ", "", "", " ", " ", ", ", ". "]


def invalid_lines(rng):
    """Byte strings that are not valid UTF-8 (each line has at least one ill-formed sequence)."""
    fixed = [
        b"\xff", b"\xfe\xff", b"abc\x80def", b"\xc3", b"\xc3(", b"\xe2\x82", b"\xe2\x82(",
        b"\xf0\x9f\x98", b"\xf0\x9f\x98 smile", b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xc0\xaf",
        b"\xe0\x80\xaf", b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80", b"\xf8\x88\x80\x80\x80",
        b"ok \xe4\xbd\xa0\xe5 cut", b"\x80\x80\x80", b"tail\xe6\x97", b"\xe6\x97\xe6\x97\xa5",
        b"Hello \xf0\x28\x8c\x28 world", b"\xc2\x80ok", b"<|im_start|>\xff<|im_end|>",
    ]
    out = list(fixed)
    pieces = [b"a", b" ", b"\xc3\xa9", b"\xe4\xbd\xa0", b"\xf0\x9f\x98\x80", b"\n", b"12", b"'s"]
    for _ in range(90):
        parts = []
        for _ in range(rng.randint(2, 8)):
            if rng.random() < 0.3:
                parts.append(bytes([rng.randint(0x80, 0xFF)]))
            else:
                p = rng.choice(pieces)
                if len(p) > 1 and rng.random() < 0.3:
                    p = p[: rng.randint(1, len(p) - 1)]  # truncated multi-byte sequence
                parts.append(p)
        b = b"".join(parts)
        try:
            b.decode("utf-8")
            b += b"\xc3"  # make sure it is invalid
        except UnicodeDecodeError:
            pass
        out.append(b)
    return out


def generated_lines(rng, count):
    lines = []
    for i in range(count):
        kind = i % 6
        if kind == 0:  # word soup with varied separators
            n = rng.randint(1, 12)
            s = "".join(rng.choice(FRAGMENTS_WORDS) + rng.choice(SEPARATORS) for _ in range(n))
        elif kind == 1:  # numbers of many lengths, in text
            n = rng.randint(1, 30)
            num = "".join(rng.choice("0123456789") for _ in range(n))
            s = rng.choice(["", "abc", " ", "x=", "$", "v"]) + num + rng.choice(["", " ", "km", ".5", "\n"])
        elif kind == 2:  # special-token strings embedded in text
            s = rng.choice(SEEDS[:40]) + rng.choice(["", " ", "\n"]) + rng.choice(SPECIALS)
            s += rng.choice(["", " ", "\n", "  "]) + rng.choice(FRAGMENTS_WORDS)
        elif kind == 3:  # whitespace runs
            s = rng.choice(FRAGMENTS_WORDS)
            for _ in range(rng.randint(1, 5)):
                s += "".join(rng.choice([" ", "\t", "\n", "\r\n", "\u00a0", "\u3000"])
                             for _ in range(rng.randint(1, 6)))
                s += rng.choice(FRAGMENTS_WORDS)
            s += rng.choice(["", " ", "  ", "\n", "\t "])
        elif kind == 4:  # two seeds glued
            s = rng.choice(SEEDS) + rng.choice(SEPARATORS) + rng.choice(SEEDS)
        else:  # random code points from interesting blocks
            blocks = [(0x20, 0x7E), (0xA0, 0x24F), (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x6FF),
                      (0x900, 0x97F), (0xE00, 0xE7F), (0x3040, 0x30FF), (0x4E00, 0x4FFF),
                      (0xAC00, 0xACFF), (0x1F300, 0x1F64F), (0x2000, 0x206F), (0x300, 0x36F)]
            s = ""
            for _ in range(rng.randint(1, 20)):
                lo, hi = rng.choice(blocks)
                s += chr(rng.randint(lo, hi))
        lines.append(s)
    return lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/data/tokenizer/corpus.jsonl")
    ap.add_argument("--generated", type=int, default=2100)
    args = ap.parse_args()
    rng = random.Random(20261122)
    texts = list(SEEDS)
    texts += [s.upper() for s in SEEDS[:60]]
    texts += [f"{a}{s}{b}" for s in SPECIALS for a, b in [("", ""), ("x", "y"), (" ", " "), ("\n", "\n")]]
    texts += [" ".join(SPECIALS), "".join(SPECIALS)]
    # Long words and runs: exercise the merge loop and the regexes on big inputs.
    texts += ["a" * 3000, "ab" * 1500, "1234567890" * 50, " " * 1000 + "x", "\n" * 200 + "end",
              "日本語" * 300, "😀" * 200, "The quick brown fox. " * 100, "x" + "\t " * 400]
    texts += generated_lines(rng, args.generated)
    with open(args.out, "w", encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps({"text": t}, ensure_ascii=True) + "\n")
        for b in invalid_lines(rng):
            f.write(json.dumps({"hex": b.hex()}) + "\n")
    print(f"wrote {len(texts)} valid + invalid lines to {args.out}")


if __name__ == "__main__":
    main()
