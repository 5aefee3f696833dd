"""The Anthropic Messages API (/v1/messages, /v1/messages/count_tokens) and the OpenAI Responses API
(/v1/responses) on `radixlm serve` (default SmolLM2 model), driven by the official `anthropic` and
`openai` clients. Both are the chat path in another shape, so greedy answers must equal those of
/v1/chat/completions for the same conversation, streams must add up to the non-streamed answers,
and finish reasons, stop sequences, usage and errors must be reported in each API's terms. Tool
calls on these routes are tested with steered models in test_tool_calls_e2e.py."""
import json
import os
import urllib.request

import anthropic
import openai
import pytest

from server_util import DEFAULT_MODEL, Server, limit

pytestmark = pytest.mark.skipif(not os.path.exists(DEFAULT_MODEL), reason="default model not installed")

MODEL = os.path.basename(DEFAULT_MODEL)
GREEDY = {"temperature": 0}  # this anthropic client has no temperature argument; the API field still works
SYSTEM = "You are a geography teacher."
QUESTION = "What is the capital of France?"
CHAT = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]


@pytest.fixture(scope="module")
def server():
    s = Server(DEFAULT_MODEL, "--max-total-tokens", "16384")
    yield s
    assert s.stop() == 0


@pytest.fixture(scope="module")
def oai(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=limit(300))


@pytest.fixture(scope="module")
def claude(server):
    return anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=limit(300))


def chat_answer(oai, max_tokens, **kw):
    return oai.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=max_tokens, temperature=0, **kw)


def test_messages_answer_like_chat(oai, claude):
    ref = chat_answer(oai, 24)
    m = claude.messages.create(model=MODEL, max_tokens=24, extra_body=GREEDY, system=SYSTEM,
                               messages=[{"role": "user", "content": QUESTION}])
    assert m.type == "message" and m.role == "assistant" and m.model == MODEL and m.id.startswith("msg_")
    assert [b.type for b in m.content] == ["text"] and m.content[0].text == ref.choices[0].message.content
    assert m.stop_reason == {"stop": "end_turn", "length": "max_tokens"}[ref.choices[0].finish_reason]
    assert m.stop_sequence is None
    assert m.usage.output_tokens == ref.usage.completion_tokens
    assert m.usage.input_tokens + m.usage.cache_read_input_tokens == ref.usage.prompt_tokens
    # System as text blocks and user content as text blocks render the same.
    m2 = claude.messages.create(model=MODEL, max_tokens=24, extra_body=GREEDY, system=[{"type": "text", "text": SYSTEM}],
                                messages=[{"role": "user", "content": [{"type": "text", "text": QUESTION}]}])
    assert m2.content[0].text == m.content[0].text


def test_messages_stream_adds_up(claude):
    kw = dict(model=MODEL, max_tokens=24, extra_body=GREEDY, system=SYSTEM, messages=[{"role": "user", "content": QUESTION}])
    whole = claude.messages.create(**kw)
    with claude.messages.stream(**kw) as s:
        events = list(s)
        text = "".join(e.delta.text for e in events if e.type == "content_block_delta")
        final = s.get_final_message()
    types = [e.type for e in events if e.type not in ("text",)]
    assert types[0] == "message_start" and types[1] == "content_block_start" and types[-1] == "message_stop"
    assert types[-3:-1] == ["content_block_stop", "message_delta"]
    assert text == whole.content[0].text == final.content[0].text
    assert final.stop_reason == whole.stop_reason and final.usage.output_tokens == whole.usage.output_tokens


def test_messages_stop_sequence_and_max_tokens(claude):
    kw = dict(model=MODEL, extra_body=GREEDY, system=SYSTEM, messages=[{"role": "user", "content": QUESTION}])
    text = claude.messages.create(max_tokens=24, **kw).content[0].text
    words = text.split()
    assert len(words) >= 3, text
    stop = " " + words[2]
    m = claude.messages.create(max_tokens=24, stop_sequences=[stop], **kw)
    assert m.stop_reason == "stop_sequence" and m.stop_sequence == stop
    assert m.content[0].text == text[: text.index(stop)]
    short = claude.messages.create(max_tokens=2, **kw)
    assert short.stop_reason == "max_tokens" and short.usage.output_tokens == 2


def test_messages_count_tokens(server, claude):
    n = claude.messages.count_tokens(model=MODEL, system=SYSTEM, messages=[{"role": "user", "content": QUESTION}])
    code, t = server.post("/tokenize", {"messages": CHAT, "add_generation_prompt": True})
    assert code == 200 and n.input_tokens == t["count"]


def test_messages_errors(server, claude):
    with pytest.raises(anthropic.BadRequestError) as e:
        claude.messages.create(model=MODEL, max_tokens=0, messages=[{"role": "user", "content": "hi"}])
    assert e.value.body["type"] == "error" and e.value.body["error"]["type"] == "invalid_request_error"
    code, body = server.post("/v1/messages", {"messages": [{"role": "user", "content": "hi"}]})
    assert code == 400 and body["type"] == "error" and "max_tokens" in body["error"]["message"]
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}
    code, body = server.post("/v1/messages", {"max_tokens": 4, "messages": [{"role": "user", "content": [image]}]})
    assert code == 400 and "image" in body["error"]["message"]
    code, body = server.post("/v1/messages", None, raw=b"{not json")
    assert code == 400 and body["type"] == "error"
    with pytest.raises(anthropic.NotFoundError):
        claude.messages.create(model="no-such-model", max_tokens=4, messages=[{"role": "user", "content": "hi"}])


def test_responses_answer_like_chat(oai):
    ref = chat_answer(oai, 24)
    r = oai.responses.create(model=MODEL, instructions=SYSTEM, input=QUESTION, max_output_tokens=24, temperature=0)
    assert r.object == "response" and r.id.startswith("resp_") and r.model == MODEL and r.store is False
    assert r.output_text == ref.choices[0].message.content
    assert [o.type for o in r.output] == ["message"] and r.output[0].content[0].type == "output_text"
    assert r.status == ("completed" if ref.choices[0].finish_reason == "stop" else "incomplete")
    assert r.usage.input_tokens == ref.usage.prompt_tokens and r.usage.output_tokens == ref.usage.completion_tokens
    # Input as message items with input_text parts, the system message as a developer item.
    items = [{"type": "message", "role": "developer", "content": SYSTEM},
             {"type": "message", "role": "user", "content": [{"type": "input_text", "text": QUESTION}]}]
    r2 = oai.responses.create(model=MODEL, input=items, max_output_tokens=24, temperature=0)
    assert r2.output_text == r.output_text
    short = oai.responses.create(model=MODEL, input=QUESTION, max_output_tokens=2, temperature=0)
    assert short.status == "incomplete" and short.incomplete_details.reason == "max_output_tokens"


def test_responses_stream_events(oai):
    kw = dict(model=MODEL, instructions=SYSTEM, input=QUESTION, max_output_tokens=24, temperature=0)
    whole = oai.responses.create(**kw)
    events = list(oai.responses.create(stream=True, **kw))
    types = [e.type for e in events]
    assert types[:5] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added", "response.output_text.delta"]
    assert types[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.completed" if whole.status == "completed" else "response.incomplete"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    [done] = [e for e in events if e.type == "response.output_text.done"]
    assert deltas == done.text == whole.output_text
    assert events[-1].response.output_text == whole.output_text
    item_ids = {e.item_id for e in events if hasattr(e, "item_id")}
    assert item_ids == {events[-1].response.output[0].id}


def test_responses_errors(server, oai):
    with pytest.raises(openai.BadRequestError) as e:
        oai.responses.create(model=MODEL, input="hi", previous_response_id="resp_123")
    assert e.value.body["param"] == "previous_response_id"
    code, err = server.post("/v1/responses", {"input": [{"type": "input_image", "image_url": "x"}]})
    assert code == 400 and err["error"]["param"] == "input"
    code, err = server.post("/v1/responses", {"input": "hi", "tools": [{"type": "web_search"}]})
    assert code == 400 and err["error"]["param"] == "tools"
    code, err = server.post("/v1/responses", {"input": "hi", "max_output_tokens": 0})
    assert code == 400 and err["error"]["param"] == "max_output_tokens"
    req = urllib.request.Request(server.url + "/v1/responses", data=json.dumps({"input": "hi", "max_output_tokens": 4}).encode(),
                                 method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=limit(120)) as r:  # model is optional
        assert r.status == 200 and json.loads(r.read())["status"] in ("completed", "incomplete")
