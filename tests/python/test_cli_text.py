"""`radixlm generate` with text and `radixlm chat` on the embedded SmolLM2 GGUF."""
import json
import os
import subprocess

import pytest

from server_util import BIN, DEFAULT_MODEL, limit

pytestmark = pytest.mark.skipif(not os.path.exists(DEFAULT_MODEL), reason="default model not installed")


def test_generate_chat_answers_paris():
    out = subprocess.run([BIN, "generate", "--chat", "--prompt", "What is the capital of France?",
                          "--max-tokens", "32"], capture_output=True, text=True, timeout=limit(300), check=True).stdout
    line = json.loads(out.splitlines()[0])
    assert "Paris" in line["text"] and line["finish_reason"] == "stop"


def test_generate_text_batch_equals_single():
    prompts = ["The quick brown fox", "In the beginning", "Water boils at"]
    args = [BIN, "generate", "--max-tokens", "12", "--ignore-eos"]
    batched = [json.loads(l) for l in subprocess.run(
        args + sum([["--prompt", p] for p in prompts], []), capture_output=True, text=True, timeout=limit(300),
        check=True).stdout.splitlines()]
    for i, p in enumerate(prompts):
        single = json.loads(subprocess.run(args + ["--prompt", p], capture_output=True, text=True, timeout=limit(300),
                                           check=True).stdout)
        assert single["output_ids"] == batched[i]["output_ids"]
        assert single["text"] == batched[i]["text"] and len(single["output_ids"]) == 12


def test_generate_bad_input_is_a_clear_error():
    p = subprocess.run([BIN, "generate", "--prompt-ids", "1,x"], capture_output=True, text=True, timeout=limit(300))
    assert p.returncode == 2 and "bad token id 'x'" in p.stderr
    p = subprocess.run([BIN, "generate", "--model", "/no/such/model", "--prompt", "hi"], capture_output=True,
                       text=True, timeout=limit(60))
    assert p.returncode == 1 and "does not exist" in p.stderr


def test_chat_keeps_history_and_streams():
    p = subprocess.run([BIN, "chat", "--temperature", "0"], input="What is the capital of France?\n"
                       "And what about Germany?\n/exit\n", capture_output=True, text=True, timeout=limit(300))
    assert p.returncode == 0, p.stderr
    answers = [a for a in p.stdout.split(">>> ") if a.strip()]
    assert "Paris" in answers[0]
    assert "Berlin" in answers[1]  # only answerable with the first turn in the history
