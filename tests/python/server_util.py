"""Start and stop `radixlm serve` on loopback for the end-to-end tests."""
import json
import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("RADIXLM_BIN", os.path.join(ROOT, "build", "radixlm"))
DEFAULT_MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
# Instrumented builds (scripts/sanitize.sh: ASan + UBSan at -O0) run the model several times slower;
# RADIXLM_TEST_TIME_SCALE multiplies every wait and client timeout of the tests (not their latency
# assertions), so that a slow step is not mistaken for a hang.
TIME_SCALE = float(os.environ.get("RADIXLM_TEST_TIME_SCALE", "1"))


def limit(seconds):
    """A wait or client timeout of `seconds`, scaled for instrumented builds."""
    return seconds * TIME_SCALE



class Server:
    def __init__(self, *args, timeout=limit(120), env=None):
        self.proc = subprocess.Popen([BIN, "serve", "--port", "0", *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, env=env)
        self.lines = []
        deadline = time.time() + timeout
        self.port = None
        while time.time() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            self.lines.append(line)
            m = re.search(r"on http://127\.0\.0\.1:(\d+)", line)
            if m:
                self.port = int(m.group(1))
                break
        if self.port is None:
            self.proc.kill()
            raise RuntimeError("server did not start:\n" + "".join(self.lines) + self.proc.stdout.read())
        self.url = f"http://127.0.0.1:{self.port}"

    def post(self, path, body, headers=None, raw=None, timeout=limit(300)):
        data = raw if raw is not None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method="POST",
                                     headers={"Content-Type": "application/json", **(headers or {})})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def get(self, path, headers=None):
        req = urllib.request.Request(self.url + path, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=limit(60)) as r:
                body = r.read()
                return r.status, (json.loads(body) if r.headers.get_content_type() == "application/json"
                                  else body.decode())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def wait_idle(self, timeout=limit(120)):
        """Waits until no request runs or waits, then returns /debug/kv."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            _, kv = self.get("/debug/kv")
            if kv["running"] == 0 and kv["queued"] == 0 and kv["cache_protected_tokens"] == 0:
                return kv
            time.sleep(0.05)
        raise AssertionError(f"server not idle: {kv}")

    def assert_kv_free(self):
        """Every KV page is back in the pool once the prefix cache is flushed."""
        self.wait_idle()
        self.post("/flush_cache", {})
        deadline = time.time() + limit(30)
        while time.time() < deadline:
            _, kv = self.get("/debug/kv")
            if kv["kv_pages_free"] == kv["kv_pages_total"]:
                return kv
            time.sleep(0.05)
        raise AssertionError(f"KV pages not all free: {kv}")

    def stop(self, sig=signal.SIGTERM, timeout=limit(60)):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def metric(server, name):
    """The value of one Prometheus sample (name with labels) from the server's /metrics."""
    _, text = server.get("/metrics")
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")
