"""Re-checks the committed model goldens in tests/golden/ (made by tools/make_golden.py).

Structural checks (json, file sizes, safetensors headers, shard index) need only numpy. The
reproduction checks reload each committed model with transformers (float32, eager) and demand
that the committed logits and greedy tokens come out again, so a golden that no longer matches
its weights, or a generator change that was not re-run, fails here.
"""
import json
import os
import struct
import sys

import numpy as np
import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
GOLDEN = os.path.join(ROOT, "tests", "golden")
sys.path.insert(0, os.path.join(ROOT, "tools"))

# Logits must reproduce within |got - want| <= LOGITS_TOL * max(1, max|want|) (max over the case):
# fp32 rounding differs with the summation order (threads, CPU kernels) in proportion to the
# magnitudes summed, not to each element; a stale golden differs by O(1).
LOGITS_TOL = 1e-5
NUM_GREEDY = 32
MIN_GAP = 1e-3
ST_DTYPES = {"float32": "F32", "bfloat16": "BF16", "float16": "F16"}


def model_names():
    with open(os.path.join(GOLDEN, "index.json")) as f:
        return json.load(f)["models"]


def load_golden(name):
    with open(os.path.join(GOLDEN, name, "golden.json")) as f:
        return json.load(f)


def load_config(name):
    with open(os.path.join(GOLDEN, name, "config.json")) as f:
        return json.load(f)


def text_config(cfg):
    """The language model's config: text_config for a text-and-vision model, else cfg itself."""
    return cfg.get("text_config", cfg)


# Where the language model's tensors are stored: Gemma3ForConditionalGeneration checkpoints keep
# it under language_model.* (beside the vision tower), as transformers saves them.
def text_prefix(cfg):
    return "language_model." if cfg["architectures"][0] == "Gemma3ForConditionalGeneration" else ""


def read_logits(name, case):
    path = os.path.join(GOLDEN, name, case["logits_file"])
    return np.fromfile(path, dtype="<f4").reshape(case["logits_shape"])


def safetensors_header(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    return n, header


def weight_files(name):
    """Maps tensor name -> safetensors file for a golden directory (sharded or not)."""
    d = os.path.join(GOLDEN, name)
    index = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            return dict(json.load(f)["weight_map"])
    _, header = safetensors_header(os.path.join(d, "model.safetensors"))
    return {k: "model.safetensors" for k in header}


def logits_mismatch(got, want):
    """Returns a message naming the worst element if got is not within tolerance of want."""
    if got.shape != want.shape:
        return f"shape {got.shape} != {want.shape}"
    if not np.all(np.isfinite(got)):
        return "non-finite logits"
    bound = LOGITS_TOL * max(1.0, float(np.max(np.abs(want))))
    diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
    worst = tuple(int(i) for i in np.unravel_index(int(np.argmax(diff)), diff.shape))
    if diff[worst] > bound:
        return (f"logits{list(worst)} = {float(got[worst])!r}, want {float(want[worst])!r} "
                f"(|diff| {diff[worst]:.3e} > {bound:.3e})")
    return None


NAMES = model_names()


def test_index_lists_every_directory():
    dirs = sorted(d for d in os.listdir(GOLDEN) if os.path.isdir(os.path.join(GOLDEN, d)))
    assert sorted(NAMES) == dirs
    assert len(NAMES) == len(set(NAMES))


@pytest.mark.parametrize("name", NAMES)
def test_golden_structure(name):
    g = load_golden(name)
    cfg = load_config(name)
    assert g["name"] == name
    assert g["architecture"] == cfg["architectures"][0]
    assert g["architecture"] in ("LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
                                "Qwen3NextForCausalLM", "Qwen3MoeForCausalLM", "Gemma3ForCausalLM",
                                "Gemma3ForConditionalGeneration", "MistralForCausalLM")
    assert g["disk_dtype"] == cfg["dtype"]
    vocab = text_config(cfg)["vocab_size"]
    assert g["cases"], "no cases"
    for i, case in enumerate(g["cases"]):
        assert case["logits_file"] == f"logits_{i}.f32"
        prompt = case["prompt_ids"]
        assert len(prompt) >= 1 and all(0 <= t < vocab for t in prompt)
        assert case["logits_shape"] == [len(prompt), vocab]
        path = os.path.join(GOLDEN, name, case["logits_file"])
        assert os.path.getsize(path) == len(prompt) * vocab * 4
        logits = read_logits(name, case)
        assert np.all(np.isfinite(logits))
        ids = case["greedy_ids"]
        assert len(ids) == NUM_GREEDY and all(0 <= t < vocab for t in ids)
        gaps = case["greedy_gaps"]
        assert len(gaps) == NUM_GREEDY
        assert case["greedy_min_gap"] == min(gaps) >= MIN_GAP
        # The first greedy token and its gap follow from the last committed logits row.
        last = np.sort(logits[-1])[::-1]
        assert int(np.argmax(logits[-1])) == ids[0]
        assert abs(float(last[0] - last[1]) - gaps[0]) <= 1e-6 * max(1.0, abs(float(last[0])))


@pytest.mark.parametrize("name", NAMES)
def test_weight_files(name):
    g = load_golden(name)
    cfg = load_config(name)
    d = os.path.join(GOLDEN, name)
    index = os.path.join(d, "model.safetensors.index.json")
    assert g["sharded"] == os.path.exists(index)
    assert g["sharded"] != os.path.exists(os.path.join(d, "model.safetensors"))
    wmap = weight_files(name)
    files = sorted(set(wmap.values()))
    if g["sharded"]:
        assert len(files) >= 2
    seen = {}
    for fname in files:
        path = os.path.join(d, fname)
        n, header = safetensors_header(path)
        end = 0
        for tname, info in header.items():
            assert info["dtype"] == ST_DTYPES[g["disk_dtype"]], f"{fname}:{tname}"
            begin, stop = info["data_offsets"]
            elem = 4 if info["dtype"] == "F32" else 2
            assert stop - begin == elem * int(np.prod(info["shape"])), f"{fname}:{tname}"
            end = max(end, stop)
            seen[tname] = fname
        assert os.path.getsize(path) == 8 + n + end, f"{fname}: size does not match header"
    assert seen == wmap, "index weight_map does not match the shard headers"
    # Tied models store no head, except the golden of the rule "a stored head wins".
    stored_head = not cfg["tie_word_embeddings"] or g.get("stored_lm_head", False)
    prefix = text_prefix(cfg)
    assert (prefix + "lm_head.weight" in seen) == stored_head
    assert prefix + "model.embed_tokens.weight" in seen


@pytest.fixture(scope="module")
def tf():
    """torch and tools/make_golden.py, with the generator's thread/determinism settings."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import make_golden

    threads = torch.get_num_threads()
    deterministic = torch.are_deterministic_algorithms_enabled()
    make_golden.setup_determinism()
    yield torch, make_golden
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(deterministic)


@pytest.mark.parametrize("name", NAMES)
def test_reference_reproduces_golden(tf, name):
    torch, mg = tf
    model = mg.load_reference(os.path.join(GOLDEN, name))
    assert type(model).__name__ == load_golden(name)["architecture"]
    for p in model.parameters():
        assert p.dtype == torch.float32
    for i, case in enumerate(load_golden(name)["cases"]):
        want = read_logits(name, case)
        got = mg.forward_logits(model, case["prompt_ids"])
        msg = logits_mismatch(got, want)
        assert msg is None, f"{name} case {i}: {msg}"
        ids, gaps = mg.greedy(model, case["prompt_ids"], got)
        assert ids == case["greedy_ids"], f"{name} case {i}: greedy tokens differ"
        assert np.allclose(gaps, case["greedy_gaps"], rtol=0, atol=1e-4)


def test_logits_mismatch_detects_small_change():
    want = np.linspace(-8, 8, 64, dtype=np.float32).reshape(4, 16)
    assert logits_mismatch(want.copy(), want) is None
    bad = want.copy()
    bad[2, 3] += 1e-3
    assert "logits[2, 3]" in logits_mismatch(bad, want)
    bad = want.copy()
    bad[0, 0] = np.nan
    assert logits_mismatch(bad, want) is not None


def test_llama3_rope_golden_changes_frequencies(tf):
    """The llama3-scaled golden must exercise all three llama3 bands (kept, smoothed, scaled)."""
    torch, mg = tf
    cfgs = {n: text_config(load_config(n)) for n in NAMES}
    # (Gemma3's rope_parameters hold one dict per layer type, without a top-level rope_type.)
    llama3 = [n for n, c in cfgs.items() if c["rope_parameters"].get("rope_type") == "llama3"]
    assert llama3, "no golden uses llama3 rope scaling"
    for name in llama3:
        cfg = cfgs[name]
        rp = cfg["rope_parameters"]
        model = mg.load_reference(os.path.join(GOLDEN, name))
        inv = model.model.rotary_emb.inv_freq.double().numpy()
        hd = cfg["head_dim"]
        base = 1.0 / (rp["rope_theta"] ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
        ratio = inv / base
        assert np.any(np.isclose(ratio, 1.0, rtol=1e-5)), "no unscaled frequency"
        assert np.any(np.isclose(ratio, 1.0 / rp["factor"], rtol=1e-5)), "no scaled frequency"
        between = (ratio < 1.0 - 1e-5) & (ratio > 1.0 / rp["factor"] + 1e-5)
        assert np.any(between), "no smoothed frequency"


def test_index_matches_generator(tf):
    _, mg = tf
    assert NAMES == [m.name for m in mg.MODELS]


@pytest.mark.parametrize("name", NAMES)
def test_generator_matches_committed(tf, tmp_path, name):
    """Rebuilding with make_golden.py's current spec and the recorded seed gives the committed
    config, weights and prompts, so an edit to the generator that was not re-run fails here."""
    torch, mg = tf
    from safetensors.torch import load_file

    spec = {m.name: m for m in mg.MODELS}[name]
    g = load_golden(name)
    assert g["architecture"] == spec.architecture
    assert g["disk_dtype"] == spec.disk_dtype
    assert g["sharded"] == (spec.max_shard_size is not None)
    mg.save_model(mg.build_model(spec, g["seed"]), spec, str(tmp_path))
    with open(tmp_path / "config.json") as f:
        fresh_cfg = json.load(f)
    committed_cfg = load_config(name)
    for c in (fresh_cfg, committed_cfg):
        c.pop("transformers_version", None)
    assert fresh_cfg == committed_cfg
    committed = {}
    for fname in sorted(set(weight_files(name).values())):
        committed.update(load_file(os.path.join(GOLDEN, name, fname)))
    fresh = {}
    for fname in os.listdir(tmp_path):
        if fname.endswith(".safetensors"):
            fresh.update(load_file(str(tmp_path / fname)))
    assert sorted(fresh) == sorted(committed)
    for k in fresh:
        assert fresh[k].dtype == committed[k].dtype, k
        assert torch.equal(fresh[k], committed[k]), f"{name}: weight {k} differs"
    prompts = mg.make_prompts(spec, g["seed"])
    assert prompts == [c["prompt_ids"] for c in g["cases"]]


@pytest.mark.parametrize("name", NAMES)
def test_greedy_matches_kv_cached_generate(tf, name):
    """The goldens' greedy loop (full forward per step) agrees with transformers' KV-cached
    generate(), the decoding an engine does. An explicit all-ones attention mask is needed:
    generate() would otherwise mask prompt tokens equal to pad_token_id."""
    torch, mg = tf
    model = mg.load_reference(os.path.join(GOLDEN, name))
    cfg = text_config(load_config(name))
    vocab = cfg["vocab_size"]
    for i, case in enumerate(load_golden(name)["cases"]):
        ids = torch.tensor([case["prompt_ids"]], dtype=torch.long)
        kwargs = {}
        if cfg["model_type"] == "llama" and cfg.get("sliding_window"):
            # LlamaAttention ignores `sliding_window`, but the DynamicCache generate() builds from
            # the config would keep only the last `sliding_window` keys: a cache without the config
            # keeps them all, as the model's own forward sees them.
            from transformers import DynamicCache
            kwargs["past_key_values"] = DynamicCache()
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                 max_new_tokens=NUM_GREEDY, min_new_tokens=NUM_GREEDY,
                                 pad_token_id=vocab - 1, **kwargs)
        got = out[0, ids.shape[1]:].tolist()
        assert got == case["greedy_ids"], f"{name} case {i}"
