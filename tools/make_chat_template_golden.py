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


if __name__ == "__main__":
    main()
