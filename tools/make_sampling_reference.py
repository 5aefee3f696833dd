"""Reference values for logit penalties (tests/data/sampling/penalties.json).

Repetition penalty: transformers' RepetitionPenaltyLogitsProcessor over prompt + output ids (what
vLLM and SGLang apply). Frequency/presence penalties: OpenAI's documented formula over the output
ids, logit[j] -= count[j] * frequency + (count[j] > 0) * presence, computed with numpy.
Run: .venv/bin/python tools/make_sampling_reference.py  (needs torch + transformers)
"""
import json
import os

import numpy as np
import torch
from transformers.generation.logits_process import RepetitionPenaltyLogitsProcessor

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "data", "sampling", "penalties.json")


def main():
    rng = np.random.default_rng(20261122)
    cases = []
    for i in range(24):
        vocab = int(rng.integers(5, 64))
        logits = rng.normal(0, 3, vocab).astype(np.float32)
        prompt = rng.integers(0, vocab, int(rng.integers(1, 12))).tolist()
        output = rng.integers(0, vocab, int(rng.integers(0, 16))).tolist()
        rep = float([1.0, 1.3, 0.7, 2.0][i % 4])
        freq = float([0.0, 0.5, -0.4, 1.5][(i // 4) % 4])
        pres = float([0.0, 1.0, -1.0][(i // 2) % 3])
        x = torch.tensor(logits)[None, :]
        if rep != 1.0:
            x = RepetitionPenaltyLogitsProcessor(rep)(torch.tensor([prompt + output]), x)
        y = x[0].numpy().astype(np.float64)
        counts = np.bincount(np.array(output, dtype=np.int64), minlength=vocab) if output else np.zeros(vocab)
        y = y - counts * freq - (counts > 0) * pres
        cases.append({"logits": logits.tolist(), "prompt": prompt, "output": output, "repetition_penalty": rep,
                      "frequency_penalty": freq, "presence_penalty": pres,
                      "expected": y.astype(np.float32).tolist()})
    with open(OUT, "w") as f:
        json.dump({"cases": cases}, f)
    print(f"wrote {len(cases)} cases to {OUT}")


if __name__ == "__main__":
    main()
