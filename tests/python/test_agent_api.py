"""The lenient, agent-facing parts of the API on `radixlm serve` (default SmolLM2 model), driven by
the official `openai` client and raw HTTP: `model` optional and several served names, unknown
fields ignored (logged once), logit_bias, logprobs 0, echo with logprobs and vLLM's
prompt_logprobs, system_fingerprint, GET /v1/models/{id},
CORS, vLLM's /tokenize fields (references from the `tokenizers` and `jinja2` packages), any
message role the template renders."""
import json
import os
import urllib.request

import jinja2
import openai
import pytest
import tokenizers

from server_util import DEFAULT_MODEL, ROOT, Server, limit

pytestmark = pytest.mark.skipif(not os.path.exists(DEFAULT_MODEL), reason="default model not installed")

MODEL = os.path.basename(DEFAULT_MODEL)
ALIAS = "smol-alias"
ORIGIN = "https://agent.example"
PARIS = [{"role": "user", "content": "What is the capital of France?"}]
TOKENIZER = tokenizers.Tokenizer.from_file(os.path.join(ROOT, "tests", "data", "tokenizer", "smollm2", "tokenizer.json"))
TEMPLATE = os.path.join(ROOT, "tests", "data", "chat_templates", "smollm2.jinja")


@pytest.fixture(scope="module")
def server():
    s = Server(DEFAULT_MODEL, "--served-model-name", MODEL, ALIAS, "--allowed-origins", ORIGIN,
               "--max-total-tokens", "16384")
    yield s
    assert s.stop() == 0


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=limit(300))


def raw(server, method, path, body=None, headers=None):
    req = urllib.request.Request(server.url + path, method=method, headers=headers or {},
                                 data=json.dumps(body).encode() if body is not None else None)
    try:
        with urllib.request.urlopen(req, timeout=limit(120)) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def test_model_optional_and_aliases(server, client):
    code, a = server.post("/v1/chat/completions", {"messages": PARIS, "max_tokens": 8, "temperature": 0})
    assert code == 200 and a["model"] == MODEL
    b = client.chat.completions.create(model=ALIAS, messages=PARIS, max_tokens=8, temperature=0)
    assert b.model == MODEL and b.choices[0].message.content == a["choices"][0]["message"]["content"]
    assert [m.id for m in client.models.list().data] == [MODEL, ALIAS]
    assert client.models.retrieve(ALIAS).id == ALIAS
    assert client.models.retrieve(MODEL).id == MODEL
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no-such-model")
    code, err = server.post("/v1/completions", {"model": "no-such-model", "prompt": "hi"})
    assert code == 404 and err["error"]["param"] == "model"


def test_unknown_fields_ignored_known_fields_checked(server):
    body = {"prompt": "Hello", "max_tokens": 2, "temperature": 0, "x_agent_field": {"a": 1}}
    for _ in range(3):
        code, r = server.post("/v1/completions", body)
        assert code == 200 and r["usage"]["completion_tokens"] >= 1
    code, err = server.post("/v1/completions", {**body, "temperature": "hot"})
    assert code == 400 and err["error"]["param"] == "temperature"
    code, err = server.post("/v1/completions", {**body, "max_tokens": -1})
    assert code == 400 and err["error"]["param"] == "max_tokens"


def test_logit_bias_steers_sampling(client):
    # +100 on one token makes greedy decoding pick it every step; -100 on the unbiased greedy first
    # token makes the model choose another.
    token = TOKENIZER.encode(" banana", add_special_tokens=False).ids[0]
    r = client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=5, temperature=0,
                                  logit_bias={str(token): 100}, logprobs=0, extra_body={"ignore_eos": True})
    assert r.choices[0].text == TOKENIZER.decode([token] * 5)
    free = client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=1, temperature=0,
                                     logprobs=0)
    first = TOKENIZER.encode(free.choices[0].text, add_special_tokens=False).ids[0]
    banned = client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=1, temperature=0,
                                       logit_bias={str(first): -100})
    assert banned.choices[0].text != free.choices[0].text
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=MODEL, prompt="x", max_tokens=1, logit_bias={"10000000": 5})
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=MODEL, prompt="x", max_tokens=1, logit_bias={"5": 101})


def test_logprobs_zero_shapes_and_fingerprint(client):
    r = client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=3, temperature=0,
                                  logprobs=0, extra_body={"ignore_eos": True})
    lp = r.choices[0].logprobs
    assert lp.top_logprobs == [{}, {}, {}] and len(lp.token_logprobs) == 3
    assert r.system_fingerprint and r.system_fingerprint.startswith("fp_")
    c = client.chat.completions.create(model=MODEL, messages=PARIS, max_tokens=3, temperature=0, logprobs=True,
                                       top_logprobs=0)
    assert all(t.top_logprobs == [] for t in c.choices[0].logprobs.content)
    assert c.system_fingerprint == r.system_fingerprint
    chunks = list(client.chat.completions.create(model=MODEL, messages=PARIS, max_tokens=3, stream=True))
    assert {ch.system_fingerprint for ch in chunks} == {r.system_fingerprint}


def test_echo_with_logprobs_and_prompt_logprobs(client, server):
    prompt = "The capital of France is Paris. The capital of Italy is"
    ids = TOKENIZER.encode(prompt, add_special_tokens=True).ids
    body = dict(model=MODEL, prompt=prompt, max_tokens=3, temperature=0, logprobs=2,
                extra_body={"ignore_eos": True, "prompt_logprobs": 2})
    plain = client.completions.create(**{**body, "extra_body": {"ignore_eos": True}})
    r = client.completions.create(echo=True, **body)
    c = r.choices[0]
    assert c.text == prompt + plain.choices[0].text
    assert r.usage.prompt_tokens == len(ids) and r.usage.prompt_tokens_details.cached_tokens == 0
    lp = c.logprobs
    n = len(ids)
    assert len(lp.tokens) == n + 3 and lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert lp.tokens[n:] == plain.choices[0].logprobs.tokens
    # Not bit for bit: `plain` extends the cached "The capital of France is" while the echo request
    # prefills the whole prompt, and in the f32-activation reference mode the suite runs the two
    # round differently (differences of 5e-7 to 2e-6 seen).
    assert lp.token_logprobs[n:] == pytest.approx(plain.choices[0].logprobs.token_logprobs, abs=1e-5)
    # vLLM's prompt_logprobs: one entry per prompt token (null first), keyed by token id, holding the
    # prompt token (whose logprob the echoed logprobs repeat) and the top alternatives.
    pl = c.model_extra["prompt_logprobs"]
    assert len(pl) == n and pl[0] is None
    for j in range(1, n):
        entry = pl[j]
        assert str(ids[j]) in entry and lp.token_logprobs[j] == entry[str(ids[j])]["logprob"]
        ranks = sorted(v["rank"] for v in entry.values() if "rank" in v)
        assert ranks[:2] == [1, 2] and all(v["logprob"] <= 0 for v in entry.values())
        best = max(entry.values(), key=lambda v: v["logprob"])
        assert best["rank"] == 1 and set(lp.top_logprobs[j].values()) <= {v["logprob"] for v in entry.values()}
    # The prompt's logprob of a token equals the decode step's logprob of the same token after the
    # same prefix: extend the prompt by the first generated token.
    code, g = server.post("/generate", {"input_ids": ids, "return_logprob": True,
                                        "sampling_params": {"max_new_tokens": 1, "temperature": 0}})
    assert code == 200
    longer = client.completions.create(model=MODEL, prompt=ids + g["output_ids"], max_tokens=1, temperature=0,
                                       extra_body={"prompt_logprobs": 0})
    last = longer.choices[0].model_extra["prompt_logprobs"][-1]
    assert list(last) == [str(g["output_ids"][0])]
    assert last[str(g["output_ids"][0])]["logprob"] == pytest.approx(g["meta_info"]["output_token_logprobs"][0][0],
                                                                     abs=2e-3)
    # Streamed: the first chunk echoes the prompt with its logprobs; the chunks add up to the whole.
    chunks = list(client.completions.create(echo=True, stream=True, **body))
    assert "".join(ch.choices[0].text for ch in chunks) == c.text
    streamed = [t for ch in chunks if ch.choices[0].logprobs for t in ch.choices[0].logprobs.token_logprobs]
    assert streamed == lp.token_logprobs
    assert chunks[0].choices[0].model_extra["prompt_logprobs"] == pl
    # A second run finds the prompt in the prefix cache, which prompt logprobs do not use.
    again = client.completions.create(echo=True, **body)
    assert again.usage.prompt_tokens_details.cached_tokens == 0
    assert again.choices[0].logprobs.token_logprobs == lp.token_logprobs
    # Chat: the rendered prompt's logprobs, as vLLM's top-level field.
    chat = client.chat.completions.create(model=MODEL, messages=PARIS, max_tokens=2, temperature=0,
                                          extra_body={"prompt_logprobs": 1})
    assert len(chat.model_extra["prompt_logprobs"]) == chat.usage.prompt_tokens
    code, err = server.post("/v1/completions", {"prompt": "x", "prompt_logprobs": 21})
    assert code == 400 and err["error"]["param"] == "prompt_logprobs"


def test_any_role_the_template_renders(client, server):
    messages = [{"role": "wizard", "content": "Speak."}, {"role": "user", "content": "Hi"}]
    r = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=2)
    assert r.choices[0].finish_reason in ("stop", "length")
    code, t = server.post("/tokenize", {"messages": messages, "add_generation_prompt": True})
    with open(TEMPLATE) as f:
        text = jinja2.Environment().from_string(f.read()).render(messages=messages, add_generation_prompt=True)
    assert code == 200 and t["tokens"] == TOKENIZER.encode(text, add_special_tokens=False).ids


def test_tokenize_fields_like_vllm(server):
    code, t = server.post("/tokenize", {"prompt": "Hello world", "return_token_strs": True})
    ref = TOKENIZER.encode("Hello world", add_special_tokens=True)
    assert code == 200 and t["tokens"] == ref.ids and t["token_strs"] == ref.tokens
    assert t["count"] == len(ref.ids) and t["max_model_len"] > 0
    code, t = server.post("/tokenize", {"prompt": "Hello world"})
    assert t["token_strs"] is None
    messages = PARIS + [{"role": "assistant", "content": "The capital of France is"}]
    code, t = server.post("/tokenize", {"messages": messages, "continue_final_message": True,
                                        "add_generation_prompt": False, "return_token_strs": True})
    with open(TEMPLATE) as f:
        text = jinja2.Environment().from_string(f.read()).render(messages=messages, add_generation_prompt=False)
    text = text[: text.rindex(messages[-1]["content"]) + len(messages[-1]["content"])]
    ref = TOKENIZER.encode(text, add_special_tokens=False)
    assert code == 200 and t["tokens"] == ref.ids and t["token_strs"] == ref.tokens
    code, d = server.post("/detokenize", {"tokens": ref.ids, "model": ALIAS})
    assert code == 200 and d["prompt"] == TOKENIZER.decode(ref.ids, skip_special_tokens=False)
    code, _ = server.post("/tokenize", {"prompt": "x", "return_token_strs": "yes"})
    assert code == 400


def test_continue_final_message_generates_the_continuation(client, server):
    messages = PARIS + [{"role": "assistant", "content": "The capital of France is"}]
    r = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=4, temperature=0,
                                       extra_body={"continue_final_message": True, "add_generation_prompt": False})
    _, t = server.post("/tokenize", {"messages": messages, "continue_final_message": True})
    code, g = server.post("/generate", {"input_ids": t["tokens"], "sampling_params": {"max_new_tokens": 4,
                                                                                       "temperature": 0}})
    assert code == 200 and r.choices[0].message.content == g["text"]


def test_cors(server):
    code, headers, _ = raw(server, "OPTIONS", "/v1/chat/completions",
                           headers={"Origin": ORIGIN, "Access-Control-Request-Method": "POST",
                                    "Access-Control-Request-Headers": "authorization, content-type"})
    assert code == 204 and headers["Access-Control-Allow-Origin"] == ORIGIN
    assert "POST" in headers["Access-Control-Allow-Methods"]
    assert headers["Access-Control-Allow-Headers"] == "authorization, content-type"
    code, headers, body = raw(server, "GET", "/v1/models", headers={"Origin": ORIGIN})
    assert code == 200 and headers["Access-Control-Allow-Origin"] == ORIGIN
    code, headers, _ = raw(server, "GET", "/v1/models", headers={"Origin": "https://other.example"})
    assert code == 200 and "Access-Control-Allow-Origin" not in headers
    code, headers, _ = raw(server, "OPTIONS", "/nope", headers={"Origin": ORIGIN})
    assert code == 404


def test_zz_unknown_fields_logged_once(server):
    """Runs last in the module: stops the server and reads its log."""
    assert server.stop() == 0
    log = server.proc.stdout.read()
    assert log.count("ignoring unknown request field \"x_agent_field\"") == 1, log
