#!/usr/bin/env python3
"""Renders every chat template in tests/data/chat_templates over every conversation with the
reference implementation (transformers' render_jinja_template: jinja2's
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) + raise_exception, the tojson
override, strftime_now, namespace/dict, loopcontrols, reasoning-field aliasing) and writes
tests/data/chat_templates/expected.jsonl, which tests/unit/jinja_chat_template_test.cpp compares
byte for byte. It also renders the small feature templates of feature_cases.json (each jinja feature
the interpreter supports, plus runtime and syntax errors) into feature_expected.jsonl for
tests/unit/jinja_features_test.cpp.

strftime_now() is pinned to FIXED_NOW so the goldens are stable; the C++ test pins the same time.

Usage: .venv/bin/python tools/make_chat_template_golden.py
"""
import datetime as _dt
import json
import pathlib
import random

import jinja2
import transformers
from transformers.utils import chat_template_utils

ROOT = pathlib.Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "chat_templates"
FIXED_NOW = _dt.datetime(2025, 3, 7, 14, 5, 9)  # keep in sync with kFixedNow in the C++ test


class _FixedDatetime(_dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return FIXED_NOW


RANDOM_SEED = 20250307
RANDOM_COUNT = 60

_PIECES = [
    "hello", "world", "The answer is 42.", "héllo", "naïve café", "你好，世界", "🎉", "👩‍💻", "Ελληνικά", "مرحبا",
    " ", "  ", "\n", "\n\n", "\t", "\r\n", "\u00a0", "{{ x }}", "{% if %}", "{#", "}}", "'", "\"", "\\", "<b>", "&amp;",
    "<think>", "</think>", "<tool_response>", "</tool_response>", "<|im_end|>", "```json\n{\"a\": 1}\n```",
]
_TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Get the weather.",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "search", "description": "Search — fast 🔎",
     "parameters": {"type": "object", "properties": {"q": {"type": "string"}, "k": {"type": "integer", "default": 3}}}}},
    {"type": "function", "function": {"name": "noargs", "description": "", "parameters": {"type": "object", "properties": {}}}},
]


def _text(rng, allow_empty=True):
    n = rng.randint(0 if allow_empty else 1, 6)
    return "".join(rng.choice(_PIECES) for _ in range(n))


def _json_value(rng, depth=0):
    kind = rng.randint(0, 8 if depth < 2 else 5)
    if kind == 0:
        return rng.randint(-10**12, 10**12)
    if kind == 1:
        return rng.choice([0.1, 1.5, -2.25, 1e-9, 3.0, 1e22, 123456.789, rng.random()])
    if kind == 2:
        return rng.choice([True, False])
    if kind == 3:
        return None
    if kind in (4, 5):
        return _text(rng)
    if kind in (6, 7):
        return {_text(rng, False): _json_value(rng, depth + 1) for _ in range(rng.randint(0, 3))}
    return [_json_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]


def make_random_conversations():
    """Seeded random conversations: odd text, tool calls with arbitrary JSON, reasoning, thinking flags."""
    rng = random.Random(RANDOM_SEED)
    convs = []
    for i in range(RANDOM_COUNT):
        messages = []
        if rng.random() < 0.5:
            messages.append({"role": "system", "content": _text(rng)})
        for turn in range(rng.randint(1, 4)):
            messages.append({"role": "user", "content": _text(rng, False)})
            if rng.random() < 0.2 and turn > 0:
                break
            msg = {"role": "assistant", "content": _text(rng)}
            if rng.random() < 0.3:
                msg["reasoning_content"] = _text(rng)
            if rng.random() < 0.3:
                calls = []
                for _ in range(rng.randint(1, 2)):
                    args = {_text(rng, False): _json_value(rng) for _ in range(rng.randint(0, 3))}
                    if rng.random() < 0.3:
                        args = json.dumps(args, ensure_ascii=False)
                    calls.append({"type": "function", "function": {"name": rng.choice(_TOOLS)["function"]["name"],
                                                                   "arguments": args}})
                msg["tool_calls"] = calls
                messages.append(msg)
                for _ in calls:
                    messages.append({"role": "tool", "content": _text(rng)})
            else:
                messages.append(msg)
        conv = {"name": f"random_{i:02d}", "add_generation_prompt": rng.random() < 0.6, "messages": messages}
        if rng.random() < 0.4:
            conv["tools"] = rng.sample(_TOOLS, rng.randint(1, len(_TOOLS)))
        r = rng.random()
        if r < 0.25:
            conv["extra_context"] = {"enable_thinking": False}
        elif r < 0.4:
            conv["extra_context"] = {"enable_thinking": True}
        convs.append(conv)
    (DATA / "conversations_random.json").write_text(json.dumps(convs, ensure_ascii=False, indent=1) + "\n",
                                                    encoding="utf-8")
    return convs


MUTANT_SEED = 7
MUTANT_COUNT = 1500
CORE_TEMPLATES = ["smollm2.jinja", "llama3.1.jinja", "llama3.2.jinja", "qwen2.5.jinja", "qwen3.jinja"]
_MUTATION_PIECES = [
    "{", "}", "%", "#", "-", "+", "(", ")", "[", "]", "'", "\"", "\\", "|", ".", ",", ":", "~", "=", "!", "<", ">",
    "*", "/", " ", "\n", "x", "0", "1.5", "if", "for", "endif", "endfor", "in", "is", "not", "and", "or", "set",
    "macro", "loop", "none", "é", "🎉", "{{", "}}", "{%", "%}", "{#", "#}", "[::-1]", "|tojson", "|length",
    "is defined", "else", "elif", "-%}", "{%-", "{{-", "-}}", "\t", "  ",
]


def fnv1a64(text):
    h = 0xCBF29CE484222325
    for b in text.encode("utf-8"):
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def make_mutants(conversations):
    """Seeded random edits of the core templates, each rendered (or rejected) by jinja2: a
    differential test of syntax-error reporting and of rendering slightly-off templates. Outputs
    are stored as length + FNV-1a 64 to keep the file small."""
    rng = random.Random(MUTANT_SEED)
    lines = []
    for i in range(MUTANT_COUNT):
        base = CORE_TEMPLATES[i % len(CORE_TEMPLATES)]
        src = (DATA / base).read_text(encoding="utf-8")
        edits = []
        for _ in range(rng.randint(1, 3)):
            if not src:
                break
            p = rng.randrange(len(src))
            op = rng.randrange(3)
            delete = 1 + rng.randrange(5) if op == 0 else (1 if op == 2 else 0)
            insert = "" if op == 0 else rng.choice(_MUTATION_PIECES)
            src = src[:p] + insert + src[p + delete:]
            edits.append([p, delete, insert])
        conv = rng.choice(conversations)
        ctx = {"messages": conv["messages"], "tools": conv.get("tools"), "documents": None,
               "add_generation_prompt": conv["add_generation_prompt"], "bos_token": "<s>", "eos_token": "</s>"}
        record = {"name": f"mutant_{i:04d}", "base": base, "edits": edits, "conversation": conv["name"]}
        try:
            compiled = chat_template_utils._compile_jinja_template(src)
        except jinja2.TemplateSyntaxError as e:
            record.update(phase="parse", error_type=type(e).__name__, error=e.message, lineno=e.lineno)
            lines.append(json.dumps(record, ensure_ascii=False))
            continue
        try:
            out = compiled.render(**ctx)
            record.update(output_len=len(out.encode("utf-8")), output_fnv1a64=fnv1a64(out))
        except Exception as e:
            record.update(phase="render", error_type=type(e).__name__, error=str(e))
        lines.append(json.dumps(record, ensure_ascii=False))
    (DATA / "mutants.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"{MUTANT_COUNT} template mutants -> {DATA / 'mutants.jsonl'}")


def render(source, conv, bos_token, eos_token):
    kwargs = {}
    if bos_token is not None:
        kwargs["bos_token"] = bos_token
    if eos_token is not None:
        kwargs["eos_token"] = eos_token
    kwargs.update(conv.get("extra_context", {}))
    rendered, _ = chat_template_utils.render_jinja_template(
        conversations=[conv["messages"]],
        tools=conv.get("tools"),
        chat_template=source,
        add_generation_prompt=conv["add_generation_prompt"],
        **kwargs,
    )
    return rendered[0]


def render_features():
    cases = json.loads((DATA / "feature_cases.json").read_text(encoding="utf-8"))
    lines = []
    for case in cases:
        record = {"name": case["name"]}
        try:
            compiled = chat_template_utils._compile_jinja_template(case["template"])
        except jinja2.TemplateSyntaxError as e:  # includes TemplateAssertionError (unknown filter/test)
            record.update(phase="parse", error_type=type(e).__name__, error=e.message, lineno=e.lineno)
            lines.append(json.dumps(record, ensure_ascii=False))
            continue
        try:
            record["output"] = compiled.render(**case["context"])
        except Exception as e:
            record.update(phase="render", error_type=type(e).__name__, error=str(e))
        lines.append(json.dumps(record, ensure_ascii=False))
    (DATA / "feature_expected.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"{len(cases)} feature cases -> {DATA / 'feature_expected.jsonl'}")


def main():
    chat_template_utils.datetime = _FixedDatetime  # strftime_now() reads the module's datetime
    templates = json.loads((DATA / "templates.json").read_text(encoding="utf-8"))
    conversations = json.loads((DATA / "conversations.json").read_text(encoding="utf-8"))
    conversations += make_random_conversations()
    lines = []
    counts = {"ok": 0, "error": 0}
    for t in templates:
        source = (DATA / t["file"]).read_text(encoding="utf-8")
        for conv in conversations:
            record = {"template": t["name"], "conversation": conv["name"]}
            try:
                record["output"] = render(source, conv, t["bos_token"], t["eos_token"])
                counts["ok"] += 1
            except Exception as e:  # the expected failure is part of the golden
                record["error_type"] = type(e).__name__
                record["error"] = str(e)
                counts["error"] += 1
            lines.append(json.dumps(record, ensure_ascii=False))
    (DATA / "expected.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"jinja2 {jinja2.__version__}, transformers {transformers.__version__}: "
          f"{counts['ok']} renders, {counts['error']} expected errors -> {DATA / 'expected.jsonl'}")
    render_features()
    make_mutants(json.loads((DATA / "conversations.json").read_text(encoding="utf-8")))


if __name__ == "__main__":
    main()
