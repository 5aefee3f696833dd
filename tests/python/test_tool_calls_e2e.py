"""Tool calls end to end: for the Qwen3, Llama-3.1 and Mistral families (their real chat templates
and vocabularies), tools/make_steered_model.py builds a tiny model whose greedy answer to any
prompt is one tool call in that family's format; `radixlm serve --tool-call-parser auto` must then
return that call as structured output through the official clients on every route: chat
completions (streamed and not), the Responses API and the Anthropic Messages API (streamed and
not), also after reasoning (a Qwen3 answer that thinks first, read by --reasoning-parser qwen3).
The expected call is the JSON value the script was given; the server sees only the model.
Tool results sent back (chat `tool` messages, Responses function_call_output items, Messages
tool_result blocks) render to the same prompt on every route."""
import json
import os
import subprocess
import sys

import anthropic
import openai
import pytest

from server_util import ROOT, Server, limit

KEY = "steered-test-key"
GREEDY = {"temperature": 0}  # this anthropic client has no temperature argument; the API field still works
CALL_ID = "call00001"  # nine characters: the Mistral template's requirement
ARGS = {"city": "Paris"}
TOOL_PARAMS = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
               "required": ["city"]}
CHAT_TOOLS = [{"type": "function", "function": {"name": "forecast", "description": "Weather forecast",
                                                "parameters": TOOL_PARAMS}}]
RESPONSES_TOOLS = [{"type": "function", "name": "forecast", "description": "Weather forecast",
                    "parameters": TOOL_PARAMS}]
MESSAGES_TOOLS = [{"name": "forecast", "description": "Weather forecast", "input_schema": TOOL_PARAMS}]
QUESTION = "What will the weather be in Paris?"
THOUGHT = "Check the forecast."
TOK = os.path.join(ROOT, "tests", "data", "tokenizer")
TEMPLATES = os.path.join(ROOT, "tests", "data", "chat_templates")

FAMILIES = {
    "qwen3": dict(tokenizer=os.path.join(TOK, "generated", "qwen3"), template=os.path.join(TEMPLATES, "qwen3.jinja"),
                  prefix="<tool_call>", suffix="</tool_call>", value={"name": "forecast", "arguments": ARGS},
                  end="<|im_end|>", avoid="<|im_start|>assistant\n", bos=None),
    "llama3.1": dict(tokenizer=os.path.join(TOK, "generated", "llama3"),
                     template=os.path.join(TEMPLATES, "llama3.1.jinja"), prefix="", suffix="",
                     value={"name": "forecast", "parameters": ARGS}, end="<|eot_id|>",
                     avoid="<|start_header_id|>assistant<|end_header_id|>\n\n", bos="<|begin_of_text|>"),
    # Reasoning first (a --reasoning-parser server): the call after it is still found.
    "qwen3-thinking": dict(tokenizer=os.path.join(TOK, "generated", "qwen3"),
                           template=os.path.join(TEMPLATES, "qwen3.jinja"),
                           prefix="<think>" + THOUGHT + "</think><tool_call>", suffix="</tool_call>",
                           value={"name": "forecast", "arguments": ARGS}, end="<|im_end|>",
                           avoid="<|im_start|>assistant\n", bos=None, reasoning="qwen3"),
    "mistral": dict(tokenizer=os.path.join(TOK, "mistral_v1_hf"),
                    template=os.path.join(TEMPLATES, "extra", "mistralai-Mistral-Nemo-Instruct-2407.jinja"),
                    prefix="[TOOL_CALLS]", suffix="", value=[{"name": "forecast", "arguments": ARGS}],
                    end="</s>", avoid="[/INST]", bos="<s>"),
}


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request, tmp_path_factory):
    f = FAMILIES[request.param]
    if not os.path.exists(os.path.join(f["tokenizer"], "tokenizer.json")):
        pytest.skip(f"{f['tokenizer']} not generated (scripts/setup.sh makes it)")
    out = tmp_path_factory.mktemp(request.param)
    cmd = [sys.executable, os.path.join(ROOT, "tools", "make_steered_model.py"), "--tokenizer-dir", f["tokenizer"],
           "--chat-template", f["template"], "--prefix", f["prefix"], "--json", json.dumps(f["value"]),
           "--suffix", f["suffix"], "--end-token", f["end"], "--avoid-text", f["avoid"], "--out", str(out)]
    if f["bos"]:
        cmd += ["--bos-token", f["bos"]]
    subprocess.run(cmd, check=True)
    flags = ["--reasoning-parser", f["reasoning"]] if f.get("reasoning") else []
    server = Server(str(out), "--tool-call-parser", "auto", "--api-key", KEY, "--served-model-name", "steered", *flags)
    yield request.param, server
    assert server.stop() == 0


@pytest.fixture(scope="module")
def oai(family):
    return openai.OpenAI(base_url=family[1].url + "/v1", api_key=KEY, max_retries=0, timeout=limit(120))


@pytest.fixture(scope="module")
def claude(family):
    return anthropic.Anthropic(base_url=family[1].url, api_key=KEY, max_retries=0, timeout=limit(120))


def test_chat_completions(oai):
    user = [{"role": "user", "content": QUESTION}]
    r = oai.chat.completions.create(model="steered", messages=user, tools=CHAT_TOOLS, temperature=0, max_tokens=200)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert not choice.message.content
    [call] = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "forecast" and call.id
    assert json.loads(call.function.arguments) == ARGS

    stream = oai.chat.completions.create(model="steered", messages=user, tools=CHAT_TOOLS, temperature=0,
                                         max_tokens=200, stream=True)
    calls, finish = {}, None
    for chunk in stream:
        for d in chunk.choices[0].delta.tool_calls or []:
            c = calls.setdefault(d.index, {"id": None, "name": "", "arguments": ""})
            c["id"] = c["id"] or d.id
            c["name"] += d.function.name or ""
            c["arguments"] += d.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls"
    assert list(calls) == [0] and calls[0]["name"] == "forecast" and calls[0]["id"]
    assert json.loads(calls[0]["arguments"]) == ARGS


def test_responses(oai):
    r = oai.responses.create(model="steered", input=QUESTION, tools=RESPONSES_TOOLS, temperature=0,
                             max_output_tokens=200)
    assert r.status == "completed"
    [item] = [o for o in r.output if o.type == "function_call"]
    assert item.name == "forecast" and item.call_id and item.status == "completed"
    assert json.loads(item.arguments) == ARGS
    assert r.usage.output_tokens > 0 and r.usage.input_tokens > 0

    events = list(oai.responses.create(model="steered", input=QUESTION, tools=RESPONSES_TOOLS, temperature=0,
                                       max_output_tokens=200, stream=True))
    types = [e.type for e in events]
    assert types[:2] == ["response.created", "response.in_progress"] and types[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    added = [e for e in events if e.type == "response.output_item.added" and e.item.type == "function_call"]
    assert len(added) == 1 and added[0].item.name == "forecast"
    deltas = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    [done] = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert deltas == done.arguments and json.loads(done.arguments) == ARGS
    final = events[-1].response
    [fc] = [o for o in final.output if o.type == "function_call"]
    assert fc.call_id == added[0].item.call_id and json.loads(fc.arguments) == ARGS


def test_messages(claude):
    user = [{"role": "user", "content": QUESTION}]
    m = claude.messages.create(model="steered", max_tokens=200, messages=user, tools=MESSAGES_TOOLS, extra_body=GREEDY)
    assert m.stop_reason == "tool_use" and m.type == "message" and m.role == "assistant"
    [block] = [b for b in m.content if b.type == "tool_use"]
    assert block.name == "forecast" and block.input == ARGS and block.id
    assert m.usage.output_tokens > 0

    with claude.messages.stream(model="steered", max_tokens=200, messages=user, tools=MESSAGES_TOOLS,
                                extra_body=GREEDY) as s:
        types = [e.type for e in s]
        final = s.get_final_message()
    assert types[0] == "message_start" and types[-1] == "message_stop"
    assert "content_block_start" in types and "input_json" in types and "message_delta" in types
    assert final.stop_reason == "tool_use"
    [block] = [b for b in final.content if b.type == "tool_use"]
    assert block.name == "forecast" and block.input == ARGS


def test_reasoning_before_the_call(family, oai, claude):
    if not FAMILIES[family[0]].get("reasoning"):
        pytest.skip("no reasoning in this family's answer")
    user = [{"role": "user", "content": QUESTION}]
    c = oai.chat.completions.create(model="steered", messages=user, tools=CHAT_TOOLS, temperature=0, max_tokens=200)
    assert c.choices[0].message.model_extra["reasoning_content"] == THOUGHT
    r = oai.responses.create(model="steered", input=QUESTION, tools=RESPONSES_TOOLS, temperature=0,
                             max_output_tokens=200)
    assert [o.type for o in r.output] == ["reasoning", "function_call"]
    assert r.output[0].content[0].text == THOUGHT and r.usage.output_tokens_details.reasoning_tokens > 0
    events = list(oai.responses.create(model="steered", input=QUESTION, tools=RESPONSES_TOOLS, temperature=0,
                                       max_output_tokens=200, stream=True))
    assert "".join(e.delta for e in events if e.type == "response.reasoning_text.delta") == THOUGHT
    m = claude.messages.create(model="steered", max_tokens=200, messages=user, tools=MESSAGES_TOOLS,
                               extra_body=GREEDY)
    assert [b.type for b in m.content] == ["thinking", "tool_use"] and m.content[0].thinking == THOUGHT
    with claude.messages.stream(model="steered", max_tokens=200, messages=user, tools=MESSAGES_TOOLS,
                                extra_body=GREEDY) as s:
        final = s.get_final_message()
    assert [b.type for b in final.content] == ["thinking", "tool_use"] and final.content[0].thinking == THOUGHT


def test_wrong_key_is_refused(family):
    bad = anthropic.Anthropic(base_url=family[1].url, api_key="wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError):
        bad.messages.create(model="steered", max_tokens=5, messages=[{"role": "user", "content": "hi"}])


def test_tool_results_render_alike_on_every_route(oai, claude):
    # One conversation with a call and its result, in each API's terms: the prompts must agree.
    arguments = json.dumps(ARGS)
    chat = oai.chat.completions.create(
        model="steered", temperature=0, max_tokens=200, tools=CHAT_TOOLS,
        messages=[{"role": "user", "content": QUESTION},
                  {"role": "assistant", "content": "",
                   "tool_calls": [{"id": CALL_ID, "type": "function",
                                   "function": {"name": "forecast", "arguments": arguments}}]},
                  {"role": "tool", "tool_call_id": CALL_ID, "content": "sunny, 21 C"}])
    resp = oai.responses.create(
        model="steered", temperature=0, max_output_tokens=200, tools=RESPONSES_TOOLS,
        input=[{"role": "user", "content": QUESTION},
               {"type": "function_call", "call_id": CALL_ID, "name": "forecast", "arguments": arguments},
               {"type": "function_call_output", "call_id": CALL_ID, "output": "sunny, 21 C"}])
    messages = [{"role": "user", "content": QUESTION},
                {"role": "assistant", "content": [{"type": "tool_use", "id": CALL_ID, "name": "forecast",
                                                   "input": ARGS}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": CALL_ID,
                                              "content": "sunny, 21 C"}]}]
    msg = claude.messages.create(model="steered", max_tokens=200, extra_body=GREEDY, tools=MESSAGES_TOOLS,
                                 messages=messages)
    count = claude.messages.count_tokens(model="steered", tools=MESSAGES_TOOLS, messages=messages)
    prompt = chat.usage.prompt_tokens
    assert resp.usage.input_tokens == prompt
    assert msg.usage.input_tokens + (msg.usage.cache_read_input_tokens or 0) == prompt
    assert count.input_tokens == prompt
    # The steered model answers with its call again, on every route.
    assert json.loads(chat.choices[0].message.tool_calls[0].function.arguments) == ARGS
    assert [o.name for o in resp.output if o.type == "function_call"] == ["forecast"]
    assert [b.input for b in msg.content if b.type == "tool_use"] == [ARGS]
