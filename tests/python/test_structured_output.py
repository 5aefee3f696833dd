"""Grammar-constrained decoding end to end on `radixlm serve` with a random tiny model (Llama shape,
dummy weights, SmolLM2's 49k byte-level vocabulary): its next-token distribution is close to
uniform, so unconstrained it writes garbage, and every constrained output here is judged by a
reference implementation — `jsonschema` (with its format checker) for 200 generated schemas
(tools/make_json_schemas.py), Python's `re` for regexes and EBNF, `json` for json_object — always
with finish_reason "stop" (the grammar completed). Constrained and free requests run in the same
batches, with n > 1, penalties, logit_bias, overlap scheduling on and off, and KV retractions;
tool_choice "required" / named function through the official `openai` client give tool_calls that
validate against the tool's parameters. Bad schemas, regexes and grammars are 400s."""
import concurrent.futures
import json
import os
import re
import sys

import jsonschema
import openai
import pytest

from server_util import ROOT, Server, limit

sys.path.insert(0, os.path.join(ROOT, "tools"))
import make_json_schemas  # noqa: E402

TOKENIZER = os.path.join(ROOT, "tests", "data", "tokenizer", "smollm2")
QWEN3_TEMPLATE = os.path.join(ROOT, "tests", "data", "chat_templates", "qwen3.jinja")
NUM_SCHEMAS = 200
CHECKER = jsonschema.Draft202012Validator.FORMAT_CHECKER


def tiny_model(path):
    """A config directory for --load-format dummy: 2 layers, hidden 64, SmolLM2's vocabulary."""
    os.makedirs(path, exist_ok=True)
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 49152, "hidden_size": 64,
              "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "head_dim": 16, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
              "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": True, "torch_dtype": "float32"}
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f)
    return path


def start(model_dir, *extra):
    s = Server("--model", model_dir, "--load-format", "dummy", "--tokenizer", TOKENIZER, "--chat-template",
               QWEN3_TEMPLATE, "--context-length", "4096", "--served-model-name", "m", *extra)
    s.client = openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0, timeout=limit(600))
    return s


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_model(str(tmp_path_factory.mktemp("tiny_llama")))


@pytest.fixture(scope="module")
def server(model_dir):
    s = start(model_dir, "--tool-call-parser", "hermes")
    yield s
    assert s.stop() == 0


def chat_schema(client, schema, seed, **kw):
    r = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "Answer in JSON."}], seed=seed, temperature=1.0,
        max_tokens=1500,
        response_format={"type": "json_schema", "json_schema": {"name": "s", "schema": schema, "strict": True}}, **kw)
    return r


def check_schema_output(schema, choice):
    assert choice.finish_reason == "stop", (schema, choice.message.content)
    value = json.loads(choice.message.content)
    jsonschema.validate(value, schema, format_checker=CHECKER)
    return value


def free_request(client, seed):
    r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Say something."}],
                                       seed=seed, temperature=1.0, max_tokens=40)
    return r.choices[0]


def test_generated_schemas_all_validate(server):
    schemas = make_json_schemas.schemas(NUM_SCHEMAS, seed=0)
    with concurrent.futures.ThreadPoolExecutor(24) as ex:
        constrained = [ex.submit(chat_schema, server.client, s, i) for i, s in enumerate(schemas)]
        free = [ex.submit(free_request, server.client, 1000 + i) for i in range(40)]  # same batches, no grammar
        for s, fut in zip(schemas, constrained):
            check_schema_output(s, fut.result().choices[0])
        free_texts = [f.result().message.content for f in free]
    # The free requests in those batches were not constrained: the random model writes non-JSON.
    def is_json(t):
        try:
            json.loads(t)
            return True
        except ValueError:
            return False
    assert sum(is_json(t) for t in free_texts) < len(free_texts) // 2


def test_schema_with_n_penalties_logit_bias_and_streaming(server):
    schema = make_json_schemas.schemas(5, seed=7)[3]
    # logit_bias pushes '{' and '"' (as single tokens) down and penalties are on: the grammar still rules.
    brace = server.post("/tokenize", {"prompt": "{", "add_special_tokens": False})[1]["tokens"][0]
    r = chat_schema(server.client, schema, 3, n=3, frequency_penalty=1.5, presence_penalty=1.0,
                    logit_bias={str(brace): -100})
    assert len(r.choices) == 3
    for c in r.choices:
        check_schema_output(schema, c)
    stream = server.client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "JSON"}], seed=11, max_tokens=1500, stream=True,
        response_format={"type": "json_schema", "json_schema": {"name": "s", "schema": schema}})
    text, finish = "", None
    for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
    assert finish == "stop"
    jsonschema.validate(json.loads(text), schema, format_checker=CHECKER)


def test_json_object_regex_ebnf_on_every_route(server):
    client = server.client
    for seed in range(4):
        r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "JSON please"}],
                                           seed=seed, max_tokens=1500, response_format={"type": "json_object"})
        if r.choices[0].finish_reason == "stop":  # any object may nest deeply: a finished one parses
            assert isinstance(json.loads(r.choices[0].message.content), dict)
    regex = r"[A-Z]{2}-\d{3}(-[a-f]{1,4})?"
    ebnf = 'root ::= "yes" | "no" | ("maybe " [0-9] [0-9]?)'
    ebnf_re = r"yes|no|maybe [0-9][0-9]?"
    schema = {"type": "object", "properties": {"k": {"type": "integer", "minimum": 3, "maximum": 9}},
              "required": ["k"], "additionalProperties": False}
    cases = [({"regex": regex}, lambda t: re.fullmatch(regex, t)),
             ({"guided_regex": regex}, lambda t: re.fullmatch(regex, t)),
             ({"ebnf": ebnf}, lambda t: re.fullmatch(ebnf_re, t)),
             ({"guided_grammar": ebnf}, lambda t: re.fullmatch(ebnf_re, t)),
             ({"guided_json": schema}, lambda t: jsonschema.validate(json.loads(t), schema) is None),
             ({"structured_outputs": {"json": schema}}, lambda t: jsonschema.validate(json.loads(t), schema) is None),
             ({"response_format": {"type": "json_schema", "json_schema": {"name": "k", "schema": schema}}},
              lambda t: jsonschema.validate(json.loads(t), schema) is None)]
    for i, (extra, ok) in enumerate(cases):
        c = client.completions.create(model="m", prompt="Write:", max_tokens=200, seed=i, n=2, extra_body=extra)
        for choice in c.choices:
            assert choice.finish_reason == "stop" and ok(choice.text), (extra, choice.text)
        m = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "go"}], max_tokens=200,
                                           seed=i, extra_body=extra)
        assert m.choices[0].finish_reason == "stop" and ok(m.choices[0].message.content), (extra, m.choices[0])
    for field, value, ok in [("json_schema", json.dumps(schema), cases[4][1]), ("regex", regex, cases[0][1]),
                             ("ebnf", ebnf, cases[2][1])]:
        status, out = server.post("/generate", {"text": "Write:", "sampling_params": {
            field: value, "max_new_tokens": 200, "temperature": 1.0, "seed": 5}})
        assert status == 200, out
        assert out["meta_info"]["finish_reason"]["type"] == "stop" and ok(out["text"]), out


def test_bad_constraints_are_400(server):
    bad = [({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": 5}}}},
            "response_format"),
           ({"regex": "(ab"}, "regex"),
           ({"ebnf": "root ::= missing"}, "ebnf"),
           ({"response_format": {"type": "xml"}}, "response_format")]
    for extra, param in bad:
        with pytest.raises(openai.BadRequestError) as e:
            server.client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}],
                                                  max_tokens=5, extra_body=extra)
        err = e.value.body
        assert err["type"] == "invalid_request_error" and err["param"] == param, err
    # The server keeps serving.
    assert server.client.completions.create(model="m", prompt="a", max_tokens=2).choices[0].text is not None


TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                           "parameters": {"type": "object", "properties": {
                                               "city": {"type": "string", "maxLength": 12},
                                               "unit": {"enum": ["celsius", "fahrenheit"]}},
                                               "required": ["city", "unit"]}}},
         {"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {
             "a": {"type": "integer", "minimum": 0, "maximum": 99},
             "b": {"type": "integer", "minimum": 0, "maximum": 99}}, "required": ["a", "b"]}}}]


def check_calls(calls, names):
    assert calls, "no tool_calls"
    params = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    for call in calls:
        assert call.type == "function" and call.id
        assert call.function.name in names
        jsonschema.validate(json.loads(call.function.arguments), params[call.function.name])


def test_tool_choice_required_and_named(server):
    msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
    for seed in range(3):
        r = server.client.chat.completions.create(model="m", messages=msgs, tools=TOOLS, tool_choice="required",
                                                  seed=seed, max_tokens=400)
        assert r.choices[0].finish_reason == "tool_calls", r.choices[0]
        check_calls(r.choices[0].message.tool_calls, {"get_weather", "add"})
        r = server.client.chat.completions.create(
            model="m", messages=msgs, tools=TOOLS, seed=seed, max_tokens=400,
            tool_choice={"type": "function", "function": {"name": "add"}})
        assert r.choices[0].finish_reason == "tool_calls", r.choices[0]
        check_calls(r.choices[0].message.tool_calls, {"add"})
    # Streamed: the deltas assemble into the same kind of call.
    stream = server.client.chat.completions.create(
        model="m", messages=msgs, tools=TOOLS, seed=9, max_tokens=400, stream=True,
        tool_choice={"type": "function", "function": {"name": "get_weather"}})
    name, args, finish = "", "", None
    for chunk in stream:
        if not chunk.choices:
            continue
        for d in chunk.choices[0].delta.tool_calls or []:
            name += d.function.name or ""
            args += d.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls" and name == "get_weather"
    jsonschema.validate(json.loads(args), TOOLS[0]["function"]["parameters"])


def test_without_overlap_and_with_retractions(model_dir):
    # A KV pool of 1536 tokens for 24 concurrent requests, half of them forced to write about 330
    # tokens (an array of exactly 150 digits): requests are retracted and resumed, and their
    # matchers keep their state. Overlap scheduling off here.
    long = {"type": "object", "properties": {"v": {"type": "array", "items": {"type": "integer", "minimum": 0,
                                                                               "maximum": 9},
                                                    "minItems": 150, "maxItems": 150}},
            "required": ["v"], "additionalProperties": False}
    s = start(model_dir, "--disable-overlap-schedule", "--max-total-tokens", "1536", "--page-size", "1")
    try:
        schemas = [long if i % 2 == 0 else sc for i, sc in enumerate(make_json_schemas.schemas(24, seed=3))]
        with concurrent.futures.ThreadPoolExecutor(24) as ex:
            futs = [ex.submit(s.client.chat.completions.create, model="m",
                              messages=[{"role": "user", "content": "JSON"}], seed=i, max_tokens=1000,
                              response_format={"type": "json_schema", "json_schema": {"name": "s", "schema": sc}})
                    for i, sc in enumerate(schemas)]
            for sc, f in zip(schemas, futs):
                check_schema_output(sc, f.result().choices[0])
        _, metrics = s.get("/metrics")
        m = re.search(r"^radixlm_retractions_total (\S+)", metrics, re.M)
        assert m and float(m.group(1)) > 0, "the test meant to exercise retractions saw none"
    finally:
        assert s.stop() == 0
