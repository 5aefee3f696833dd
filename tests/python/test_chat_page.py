"""The built-in chat page at `/` in headless Chromium (selenium + Debian's chromium-driver): the
page loads from the binary with no external resources, a question to the default model streams
its answer (the text grows chunk by chunk) equal to the same request over HTTP, the conversation
and system prompt are kept, and Stop aborts the request server-side (the abort counter of
/metrics rises and nothing runs any more)."""
import os
import re
import shutil
import time

import pytest

from server_util import DEFAULT_MODEL, Server, limit

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
pytestmark = [
    pytest.mark.skipif(not os.path.exists(DEFAULT_MODEL), reason="default model not installed"),
    pytest.mark.skipif(CHROMIUM is None or CHROMEDRIVER is None,
                       reason="chromium and chromium-driver are not installed (scripts/setup.sh installs them)"),
]

MODEL = os.path.basename(DEFAULT_MODEL)

# Records every text the last assistant message shows, to see it grow.
RECORD_SNAPSHOTS = """
window.snapshots = [];
new MutationObserver(() => {
  const msgs = document.querySelectorAll('.msg.assistant');
  if (msgs.length) window.snapshots.push(msgs[msgs.length - 1].textContent);
}).observe(document.getElementById('messages'), {subtree: true, childList: true, characterData: true});
"""


@pytest.fixture(scope="module")
def server():
    s = Server("--max-running-requests", "8")
    yield s
    assert s.stop() == 0


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


def wait_for(predicate, timeout=limit(120), what="condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def open_page(browser, server, temperature, max_tokens, system=""):
    browser.get(server.url + "/")
    wait_for(lambda: MODEL in browser.find_element("id", "model").text, 30, "the model name")
    for field, value in (("temperature", temperature), ("max-tokens", max_tokens), ("system", system)):
        browser.execute_script("document.getElementById(arguments[0]).value = arguments[1];", field, str(value))
    browser.execute_script(RECORD_SNAPSHOTS)


def ask(browser, question, timeout=limit(120)):
    """Sends a question and waits for the answer to finish; returns its text."""
    browser.find_element("id", "input").send_keys(question)
    browser.find_element("id", "send").click()
    wait_for(lambda: browser.execute_script("return document.body.dataset.state") == "generating", 10, "generating")
    wait_for(lambda: browser.execute_script("return document.body.dataset.state") == "idle", timeout, "the answer")
    return browser.find_elements("css selector", ".msg.assistant")[-1].text


def http_answer(server, messages, max_tokens, temperature=0):
    code, r = server.post("/v1/chat/completions", {"model": MODEL, "messages": messages, "max_tokens": max_tokens,
                                                   "temperature": temperature})
    assert code == 200, r
    return r["choices"][0]["message"]["content"]


def metric(server, name):
    _, text = server.get("/metrics")
    m = re.search("^" + re.escape(name) + r" (\S+)$", text, re.M)
    assert m, name
    return float(m.group(1))


def test_page_is_served_without_external_resources(server):
    code, html = server.get("/")
    assert code == 200 and "<title>radixlm chat</title>" in html
    assert "http://" not in html and "https://" not in html and "<link" not in html and " src=" not in html


def test_answer_streams_and_matches_the_api(server, browser):
    open_page(browser, server, temperature=0, max_tokens=32)
    question = "What is the capital of France?"
    answer = ask(browser, question)
    assert "Paris" in answer
    assert answer == http_answer(server, [{"role": "user", "content": question}], 32)
    growing = [s for s in dict.fromkeys(browser.execute_script("return window.snapshots")) if s]
    assert len(growing) >= 3, growing  # the text appeared piece by piece, not at once
    assert all(answer.startswith(s) for s in growing)
    stats = browser.find_element("id", "stats").text
    assert re.search(r"\d+ tokens · TTFT \d+ ms · [\d.]+ tokens/s", stats), stats


def test_conversation_and_system_prompt_are_kept(server, browser):
    system = "You are a geography teacher."
    open_page(browser, server, temperature=0, max_tokens=24, system=system)
    first = ask(browser, "What is the capital of France?")
    second = ask(browser, "And of Italy?")
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "What is the capital of France?"},
                {"role": "assistant", "content": first}, {"role": "user", "content": "And of Italy?"}]
    assert second == http_answer(server, messages, 24)
    assert browser.execute_script("return conversation.length") == 4


def test_stop_aborts_the_request(server, browser):
    server.wait_idle()
    aborted = metric(server, 'radixlm_requests_finished_total{reason="abort"}')
    open_page(browser, server, temperature=0, max_tokens=4000)
    browser.find_element("id", "input").send_keys("Count from 1 to 1000, one number per line.")
    browser.find_element("id", "send").click()
    wait_for(lambda: len(browser.execute_script("return window.snapshots.at(-1) || ''")) > 40, 120, "streamed text")
    assert server.get("/debug/kv")[1]["running"] == 1  # still generating when Stop is pressed
    browser.find_element("id", "stop").click()
    wait_for(lambda: browser.execute_script("return document.body.dataset.state") == "idle", 10, "the page to stop")
    assert browser.execute_script("return document.body.dataset.last") == "stopped"
    assert "stopped" in browser.find_elements("css selector", ".msg.assistant")[-1].get_attribute("class")
    # The closed stream aborted the request on the server, long before its 4000 tokens.
    wait_for(lambda: metric(server, 'radixlm_requests_finished_total{reason="abort"}') == aborted + 1, 10,
             "the server-side abort")
    assert server.wait_idle()["running"] == 0
    shown = browser.find_elements("css selector", ".msg.assistant")[-1].text
    time.sleep(0.5)
    assert browser.find_elements("css selector", ".msg.assistant")[-1].text == shown  # nothing arrives any more
