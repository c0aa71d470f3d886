#!/usr/bin/env python3
"""System tests of `troupe serve`: a real server process on 127.0.0.1, real HTTP clients (the
official `openai` npm package, raw sockets), the embedded model.

    python3 tests/server/server_cases.py CASE TROUPE_BINARY

CTest runs one process per case (tests/server/CMakeLists.txt). Every wait has a timeout and
every server is stopped (SIGTERM, then SIGKILL) when a case ends, pass or fail.
"""
import asyncio
import contextlib
import json
import os
import pathlib
import re
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

REPO = pathlib.Path(__file__).resolve().parents[2]
MODEL = REPO / "models" / "troupe-fortunes"
CLIENT_DIR = REPO / "tests" / "server" / "client"
ENV = dict(os.environ, TROUPE_DEFAULT_MODEL=str(MODEL))
TROUPE = None
NAME = str(MODEL)  # the default served model name: the model path


class Server:
    """`troupe serve` on an ephemeral loopback port; stderr kept for the log checks."""

    def __init__(self, *args, env=None, start_timeout=90, log_level="info"):
        self.lines = []
        self.proc = subprocess.Popen(
            [TROUPE, "--log-level", log_level, "serve", "--host", "127.0.0.1", "--port", "0",
             *args],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=REPO,
            env=env or ENV)
        self.ready = threading.Event()
        self.port = None
        threading.Thread(target=self._read, daemon=True).start()
        if not self.ready.wait(start_timeout):
            self.stop()
            raise AssertionError("troupe serve did not start:\n" + self.log())
        assert self.port, "troupe serve exited before listening:\n" + self.log()
        self.url = f"http://127.0.0.1:{self.port}"

    def _read(self):
        for line in self.proc.stderr:
            self.lines.append(line)
            m = re.search(r"API server on http://127\.0\.0\.1:(\d+)", line)
            if m and not self.port:
                self.port = int(m.group(1))
                self.ready.set()
        self.ready.set()

    def log(self):
        return "".join(self.lines)

    def wait_log(self, needle, timeout=10):
        """Whether `needle` shows in the log within `timeout` s (the access line of a request is
        written after its response is sent)."""
        deadline = time.time() + timeout
        while needle not in self.log() and time.time() < deadline:
            time.sleep(0.05)
        return needle in self.log()

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def http(url, body=None, method=None, headers=None, timeout=60, raw=None):
    """(status, parsed JSON or text) of one request; never raises for an HTTP status."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(url, data=data, method=method or ("POST" if data else "GET"),
                                 headers={"content-type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, text = r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode()
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def metrics(server):
    """/metrics as {sample name with labels: value}."""
    status, text = http(server.url + "/metrics")
    assert status == 200, text
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
    return out


def gauge(server, name):
    return metrics(server)[f'{name}{{engine="0",model_name="{NAME}"}}']


def background_stream(server, body):
    """Starts a streamed /v1/completions in a thread; returns (thread, result dict) with the
    status and body once the thread ends."""
    got = {}

    def run():
        got["status"], got["body"] = http(server.url + "/v1/completions", {**body, "stream": True},
                                          timeout=120)

    t = threading.Thread(target=run)
    t.start()
    return t, got


def sse_data(body):
    """The data payloads of a Server-Sent Events body, in order."""
    return [l[6:] for l in body.split("\n\n") if l.startswith("data: ")]


def generate(*args):
    """`troupe generate` (the offline path): the reference the server must agree with."""
    p = subprocess.run([TROUPE, "--log-level", "warn", "generate", *args], capture_output=True,
                       text=True, env=ENV, timeout=300, cwd=REPO)
    assert p.returncode == 0, p.stderr
    return [json.loads(l) for l in p.stdout.splitlines() if l.strip()]


def node_client():
    if (CLIENT_DIR / "node_modules" / "openai").exists():
        return True
    msg = ("the openai npm package is not installed: run tests/server/client/fetch_client.sh "
           "(CI does)")
    if os.environ.get("TROUPE_REQUIRE_NODE_CLIENT"):
        raise AssertionError(msg)
    print("SKIP: " + msg)
    return False


def openai_case(server, case, **args):
    p = subprocess.run(["node", str(CLIENT_DIR / "openai_cases.mjs"), server.url, case,
                        json.dumps(args)], capture_output=True, text=True, timeout=300)
    out = json.loads(p.stdout.strip().splitlines()[-1]) if p.stdout.strip() else {}
    assert p.returncode == 0, f"openai client {case} failed: {out}\n{p.stderr}\n{server.log()}"
    return out


# ---- cases -------------------------------------------------------------------------------

def case_endpoints():
    """/health, /ping, /version, /v1/models, /tokenize and /detokenize as vLLM answers them;
    unknown paths and methods; ids compared with `troupe tokenize`."""
    with Server() as s:
        assert http(s.url + "/health") == (200, ""), http(s.url + "/health")
        assert http(s.url + "/ping")[0] == 200
        assert http(s.url + "/ping", method="POST", raw=b"")[0] == 200
        st, v = http(s.url + "/version")
        assert st == 200 and isinstance(v["version"], str), v
        st, models = http(s.url + "/v1/models")
        assert st == 200 and models["object"] == "list", models
        card = models["data"][0]
        assert card["id"] == NAME and card["root"] == NAME and card["object"] == "model", card
        assert card["max_model_len"] == 512, card
        ids = json.loads(subprocess.run([TROUPE, "tokenize", "Hello world"], capture_output=True,
                                        text=True, env=ENV, cwd=REPO).stdout)
        st, t = http(s.url + "/tokenize", {"prompt": "Hello world"})
        assert st == 200 and t == {"count": len(ids), "max_model_len": 512, "tokens": ids,
                                   "token_strs": None}, t
        st, t = http(s.url + "/tokenize", {"prompt": "Hello world", "add_special_tokens": False,
                                           "return_token_strs": True})
        assert t["tokens"] == ids[1:] and len(t["token_strs"]) == len(ids) - 1, t
        st, d = http(s.url + "/detokenize", {"tokens": ids[1:]})
        assert st == 200 and d == {"prompt": "Hello world"}, d
        st, e = http(s.url + "/detokenize", {"tokens": [99999]})
        assert st == 400 and e["error"]["param"] == "tokens", e
        st, e = http(s.url + "/v1/nothing-here")
        assert st == 404 and e["error"]["type"] == "NotFoundError", e
        st, e = http(s.url + "/v1/completions")  # GET
        assert st == 405, (st, e)


def case_openai_completions():
    """The openai client: completions plain and streamed, n > 1, logprobs, echo, stop strings,
    several prompts; greedy text equals `troupe generate`'s."""
    if not node_client():
        return
    prompt = "Once upon a time"
    ref = generate("--temperature", "0", "--max-tokens", "24", "--ignore-eos", prompt)[0]
    text = ref["outputs"][0]["text"]
    words = text.split(" ")
    stop = " " + words[len(words) // 2]  # a word the greedy text contains
    with Server() as s:
        r = openai_case(s, "completions", model=NAME, prompt=prompt, max_tokens=24, stop=stop)
        plain = r["plain"]
        c = plain["choices"][0]
        # Same greedy tokens as the offline path, unless EOS came first.
        assert text.startswith(c["text"]) and c["text"], (c["text"], text)
        assert plain["object"] == "text_completion" and plain["model"] == NAME, plain
        assert plain["system_fingerprint"] is None, plain
        assert plain["usage"]["prompt_tokens"] == len(ref["prompt_token_ids"]), plain["usage"]
        assert plain["usage"]["completion_tokens"] <= 24, plain["usage"]
        assert plain["usage"]["total_tokens"] == (plain["usage"]["prompt_tokens"] +
                                                  plain["usage"]["completion_tokens"])
        st = r["streamed"]
        assert st["texts"]["0"] == c["text"] and st["finish"]["0"] == c["finish_reason"], st
        assert st["chunks"] > 2 and st["usage"] == {k: plain["usage"][k] for k in
                                                    ("prompt_tokens", "completion_tokens",
                                                     "total_tokens")}, st
        # n = 3 with a seed: three samples, the same streamed or not.
        n = r["n"]
        assert sorted(x["index"] for x in n["choices"]) == [0, 1, 2], n
        assert {str(x["index"]): x["text"] for x in n["choices"]} == r["nStreamed"]["texts"], r
        assert len({x["text"] for x in n["choices"]}) > 1, n  # sampled, not copies
        lp = r["logprobs"]["choices"][0]["logprobs"]
        assert len(lp["tokens"]) == r["logprobs"]["usage"]["completion_tokens"], lp
        assert "".join(lp["tokens"]) == r["logprobs"]["choices"][0]["text"], lp
        for tok, lpv, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
            assert lpv <= 0 and tok in top and len(top) <= 3, (tok, lpv, top)
            assert abs(max(top.values()) - lpv) < 1e-6, top  # greedy: the chosen is the best
        assert lp["text_offset"][0] == 0, lp
        echo = r["echo"]["choices"][0]
        assert echo["text"].startswith("<|bos|>" + prompt) or echo["text"].startswith(prompt), echo
        stopped = r["stopped"]["choices"][0]
        assert stopped["finish_reason"] == "stop" and stopped["stop_reason"] == stop, stopped
        assert stopped["text"] == text[:text.index(stop)], (stopped, text, stop)
        assert r["stopStream"]["texts"]["0"] == stopped["text"], r["stopStream"]
        assert r["stopStream"]["stop"]["0"] == stop, r["stopStream"]
        batch = r["batch"]["choices"]
        assert [b["index"] for b in batch] == [0, 1] and batch[0]["text"] == text[:len(batch[0]["text"])]


def case_openai_chat():
    """The openai client: chat completions plain and streamed, n > 1, logprobs, stop strings;
    the prompt is the model's chat template rendered (checked through /tokenize)."""
    if not node_client():
        return
    messages = [{"role": "system", "content": "You tell fortunes."},
                {"role": "user", "content": "What will happen tomorrow?"}]
    with Server() as s:
        st, t = http(s.url + "/tokenize", {"messages": messages})
        assert st == 200, t
        # The embedded model's template: bos, then <|role|>content<|eos|>, then <|assistant|>.
        want = "<|bos|><|system|>You tell fortunes.<|eos|><|user|>What will happen tomorrow?" \
               "<|eos|><|assistant|>"
        st, d = http(s.url + "/detokenize", {"tokens": t["tokens"]})
        assert d["prompt"] == want, d
        ref = generate("--temperature", "0", "--max-tokens", "20", "--ignore-eos",
                       "--input", write_ids(t["tokens"]))[0]["outputs"][0]["text"]
        words = ref.split(" ")
        stop = " " + words[len(words) // 2] if len(words) > 2 else ref[-2:]
        r = openai_case(s, "chat", model=NAME, messages=messages, max_tokens=20, stop=[stop])
        plain = r["plain"]
        msg = plain["choices"][0]["message"]
        assert plain["object"] == "chat.completion" and msg["role"] == "assistant", plain
        assert ref.startswith(msg["content"]) and msg["content"], (msg, ref)
        assert plain["usage"]["prompt_tokens"] == t["count"], plain["usage"]
        assert r["streamed"]["texts"]["0"] == msg["content"], r["streamed"]
        assert r["streamed"]["roles"]["0"] == "assistant", r["streamed"]
        assert r["streamed"]["usage"]["completion_tokens"] == plain["usage"]["completion_tokens"]
        assert {str(c["index"]): c["message"]["content"] for c in r["n"]["choices"]} == \
            r["nStreamed"]["texts"], r
        content = r["logprobs"]["choices"][0]["logprobs"]["content"]
        assert "".join(x["token"] for x in content) == r["logprobs"]["choices"][0]["message"]["content"]
        for x in content:
            assert len(x["top_logprobs"]) == 2 and x["logprob"] <= 0, x
            assert x["top_logprobs"][0]["token"] == x["token"], x  # greedy: chosen is rank 1
        streamed_lp = r["logprobsStreamed"]["logprobs"]["0"]
        assert [x["token"] for x in streamed_lp] == [x["token"] for x in content]
        stopped = r["stopped"]["choices"][0]
        assert stopped["finish_reason"] == "stop" and stopped["stop_reason"] == stop, stopped
        assert stopped["message"]["content"] == ref[:ref.index(stop)], (stopped, ref)


def write_ids(ids):
    f = tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False)
    f.write(json.dumps({"prompt_token_ids": ids}) + "\n")
    f.close()
    return f.name


def case_disconnect_frees_kv():
    """A client that goes away mid-stream aborts its request: its KV blocks come back at once
    (KV usage back to 0 within a second, long before the request would have ended)."""
    if not node_client():
        return
    with Server() as s:
        p = subprocess.Popen(["node", str(CLIENT_DIR / "openai_cases.mjs"), s.url, "disconnect",
                              json.dumps({"model": NAME, "prompt": "Once upon a time " * 20,
                                          "max_tokens": 400, "read_chunks": 3})],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            line = p.stdout.readline()
            assert "mid_stream" in line, line
            busy = gauge(s, "vllm:kv_cache_usage_perc")
            assert busy > 0, "the stream holds no KV blocks?"
            assert gauge(s, "vllm:num_requests_running") == 1
            t0 = time.time()
            p.stdin.write("go\n")
            p.stdin.flush()
            while gauge(s, "vllm:kv_cache_usage_perc") > 0:
                assert time.time() - t0 < 1.0, "KV blocks not freed within a second of the abort"
                time.sleep(0.005)
            freed_after = time.time() - t0
            assert p.wait(30) == 0, p.stdout.read()
            m = metrics(s)
            assert m[f'vllm:request_success_total{{engine="0",finished_reason="abort",model_name="{NAME}"}}'] == 1
            assert gauge(s, "vllm:num_requests_running") == 0
            print(f"openai client: KV freed {freed_after * 1e3:.0f} ms after its abort")
        finally:
            if p.poll() is None:
                p.kill()
        # The same with a raw socket closed mid-stream: no client library in between.
        host, port = "127.0.0.1", s.port
        body = json.dumps({"prompt": "Once upon a time " * 20, "max_tokens": 60,
                           "ignore_eos": True, "stream": True}).encode()
        sock = socket.create_connection((host, port), timeout=10)
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: "
                     b"application/json\r\ncontent-length: %d\r\n\r\n" % len(body) + body)
        assert sock.recv(65536).startswith(b"HTTP/1.1 200"), "no stream"
        assert gauge(s, "vllm:kv_cache_usage_perc") > 0
        t0 = time.time()
        sock.close()
        while gauge(s, "vllm:kv_cache_usage_perc") > 0:
            assert time.time() - t0 < 0.5, "KV blocks not freed within 0.5 s of the close"
            time.sleep(0.002)
        print(f"raw socket: KV freed {(time.time() - t0) * 1e3:.0f} ms after the close")


def case_bad_inputs():
    """Every bad input gets an OpenAI-style error with the right status, while a concurrent good
    streaming request completes untouched."""
    with Server("--max-request-body-bytes", "65536") as s:
        t, good = background_stream(s, {"model": NAME, "prompt": "A wise man", "max_tokens": 60,
                                        "ignore_eos": True, "temperature": 0,
                                        "stream_options": {"include_usage": True}})
        cases = [
            (400, None, b"{not json", "/v1/completions"),
            (400, None, b"[1, 2]", "/v1/completions"),
            (400, None, b'{"prompt": "x", "max_tokens": 1e400}', "/v1/completions"),
            (400, "max_tokens", {"prompt": "x", "max_tokens": "many"}, "/v1/completions"),
            (400, "temperature", {"prompt": "x", "temperature": -0.5}, "/v1/completions"),
            (400, "top_p", {"prompt": "x", "top_p": 2}, "/v1/completions"),
            (400, "n", {"prompt": "x", "n": 0}, "/v1/completions"),
            (400, "prompt", {"prompt": "word " * 600}, "/v1/completions"),
            (400, "max_tokens", {"prompt": "x", "max_tokens": 100000}, "/v1/completions"),
            (400, "logprobs", {"prompt": "x", "logprobs": 50}, "/v1/completions"),
            (400, "prompt", {"prompt": [1, 2, 999999]}, "/v1/completions"),
            (404, "model", {"prompt": "x", "model": "gpt-17"}, "/v1/completions"),
            (400, "best_of", {"prompt": "x", "use_beam_search": True}, "/v1/completions"),
            (400, "temperature", {"prompt": "x", "use_beam_search": True, "n": 2},
             "/v1/completions"),
            (400, "length_penalty", {"prompt": "x", "length_penalty": 0.5}, "/v1/completions"),
            (400, "early_stopping", {"messages": [{"role": "user", "content": "hi"}],
                                     "early_stopping": True}, "/v1/chat/completions"),
            (400, "beam_width", {"prompt": "x", "beam_width": 2}, "/generate"),
            (400, "best_of", {"prompt": "x", "n": 3, "best_of": 2}, "/v1/completions"),
            (400, "logits_processors", {"prompt": "x", "logits_processors": ["m.P"]}, "/v1/completions"),
            (400, "guided_json", {"prompt": "x", "guided_json": {"type": "object"}}, "/v1/completions"),
            (400, "response_format", {"prompt": "x", "response_format": {"type": "json_object"}},
             "/v1/completions"),
            (400, "messages", {"messages": "hi"}, "/v1/chat/completions"),
            (400, "messages[0].role", {"messages": [{"content": "hi"}]}, "/v1/chat/completions"),
            (413, None, {"prompt": "x" * 100000}, "/v1/completions"),
        ]
        for status, param, body, path in cases:
            raw = body if isinstance(body, bytes) else None
            st, e = http(s.url + path, None if raw else body, raw=raw)
            assert st == status, (status, param, st, e)
            assert isinstance(e, dict) and set(e) == {"error"}, e
            err = e["error"]
            assert set(err) == {"message", "type", "param", "code"} and err["code"] == status, e
            assert err["param"] == param, (param, e)
            # The message names the field too, except vLLM's own context-length wording.
            if param and "maximum context length" not in err["message"]:
                assert param.split("[")[0] in err["message"], e
        # Unknown fields: accepted (200) and logged once.
        for _ in range(2):
            st, r = http(s.url + "/v1/completions",
                         {"prompt": "x", "max_tokens": 2, "frobnicate": 1, "zz_extra": True})
            assert st == 200, r
        t.join(120)
        assert good["status"] == 200, good
        events = sse_data(good["body"])
        assert events[-1] == "[DONE]", events[-3:]
        chunks = [json.loads(e) for e in events[:-1]]
        assert not any("error" in c for c in chunks), chunks
        # The last chunk is the usage (no choices); the one before it finishes the choice. A
        # chunk may carry more than one token when the stream's writer falls behind (a loaded
        # machine), so the tokens are counted by the usage, not by the chunks.
        assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 60, \
            chunks[-1]
        assert chunks[-2]["choices"][0]["finish_reason"] == "length", chunks[-2]
        assert all(len(c["choices"]) == 1 for c in chunks[:-1]), chunks
        # Each unknown field is logged once, not once per request.
        log = s.log()
        assert log.count("frobnicate") == 1 and log.count("zz_extra") == 1, log
        assert gauge(s, "vllm:num_requests_running") == 0


def case_api_key():
    """--api-key (and VLLM_API_KEY): /v1 needs "Authorization: Bearer KEY" (401 otherwise, an
    OpenAI-style error); /health and /metrics do not."""
    env = dict(ENV, VLLM_API_KEY="second-key")
    with Server("--api-key", "first-key", env=env) as s:
        body = {"prompt": "x", "max_tokens": 2}
        st, e = http(s.url + "/v1/completions", body)
        assert st == 401 and e["error"]["code"] == 401, e
        assert e["error"]["type"] == "AuthenticationError", e
        st, e = http(s.url + "/v1/completions", body, headers={"authorization": "Bearer nope"})
        assert st == 401, e
        st, e = http(s.url + "/v1/models", headers={"authorization": "Bearer nope"})
        assert st == 401, e
        for key in ("first-key", "second-key"):
            st, r = http(s.url + "/v1/completions", body, headers={"authorization": f"Bearer {key}"})
            assert st == 200, r
        assert http(s.url + "/health")[0] == 200
        assert http(s.url + "/metrics")[0] == 200
        if node_client():
            # The official client sees a 401 as its AuthenticationError.
            p = subprocess.run(["node", str(CLIENT_DIR / "auth_check.mjs"), s.url, "wrong"],
                               capture_output=True, text=True, timeout=60)
            assert p.returncode == 0, p.stdout + p.stderr


async def _stream_raw(host, port, body, state):
    reader, writer = await asyncio.open_connection(host, port)
    state["open"] += 1
    state["peak"] = max(state["peak"], state["open"])
    data = json.dumps(body).encode()
    writer.write(b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                 b"content-length: " + str(len(data)).encode() + b"\r\n\r\n" + data)
    await writer.drain()
    buf = b""
    while b"data: [DONE]" not in buf:
        chunk = await reader.read(65536)
        if not chunk:
            break
        buf += chunk
    writer.close()
    state["open"] -= 1
    return buf


def case_streams_2000():
    """2,000 simultaneous streaming requests on loopback, each completing with its [DONE]; the
    server holds them all at once (its connection count is sampled at the peak)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 2000 + 200
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(want, soft)), hard))
    n = 2000
    with Server("--max-num-seqs", "2048", "--max-num-batched-tokens", "16384",
                "--http-threads", "2", "--disable-uvicorn-access-log") as s:
        async def main():
            state = {"open": 0, "peak": 0}
            body = {"model": NAME, "prompt": "A wise man", "max_tokens": 8, "ignore_eos": True,
                    "stream": True}
            tasks = [asyncio.create_task(_stream_raw("127.0.0.1", s.port, body, state))
                     for _ in range(n)]
            results = await asyncio.wait_for(asyncio.gather(*tasks), 120)
            return state, results

        t0 = time.time()
        state, results = asyncio.run(main())
        took = time.time() - t0
        done = sum(1 for r in results if r.startswith(b"HTTP/1.1 200") and b"data: [DONE]" in r)
        tokens = sum(r.count(b'"finish_reason":"length"') for r in results)
        assert done == n and tokens == n, (done, tokens)
        assert state["peak"] == n, state  # every stream was open at once
        print(f"{n} streams in {took:.1f} s")
        assert gauge(s, "vllm:num_requests_running") == 0
        assert gauge(s, "vllm:kv_cache_usage_perc") == 0


def case_engine_death():
    """The engine dying is fatal and visible: a `troupe worker` killed under the server makes
    /health answer 503 at once, the in-flight stream ends with an error event, and the server
    exits 1."""
    w = subprocess.Popen([TROUPE, "--log-level", "warn", "worker", "--port", "0"],
                         stdout=subprocess.PIPE, text=True, env=ENV, cwd=REPO)
    try:
        line = w.stdout.readline()
        assert "listening on" in line, line
        endpoint = line.strip().split()[-1]
        # vLLM caps max_tokens at generation_config.json's max_new_tokens (64 here): "vllm"
        # drops that cap, so the stream outlives the kill.
        s = Server("--executor-endpoints", endpoint, "--generation-config", "vllm")
        try:
            assert http(s.url + "/health")[0] == 200
            t, got = background_stream(s, {"prompt": "Once", "max_tokens": 400,
                                            "ignore_eos": True})
            time.sleep(1.0)  # mid-stream
            w.kill()
            t0 = time.time()
            # /health answers 503 until the server, having ended the stream with an error,
            # closes its listening socket to drain and exit; on a busy machine it may already
            # have closed it (connection refused) by the first look: then it must be exiting.
            # Either way it no longer claims to be healthy.
            while True:
                try:
                    if http(s.url + "/health", timeout=5)[0] == 503:
                        print(f"/health 503 {1e3 * (time.time() - t0):.0f} ms after the kill")
                        break
                except urllib.error.URLError:
                    try:
                        s.proc.wait(30)
                    except subprocess.TimeoutExpired:
                        raise AssertionError("/health unreachable, the server still running "
                                             "30 s later:\n" + s.log())
                    print(f"the server closed its socket {1e3 * (time.time() - t0):.0f} ms "
                          "after the kill and exited")
                    break
                assert time.time() - t0 < 5, "/health still 200 after the executor died"
                time.sleep(0.02)
            t.join(60)
            events = sse_data(got["body"])
            assert events[-1] == "[DONE]", events[-3:]
            err = json.loads(events[-2])
            assert "error" in err and err["error"]["code"] == 500, err
            rc = s.proc.wait(30)
            assert rc == 1, (rc, s.log())
        finally:
            s.stop(signal.SIGKILL)
    finally:
        if w.poll() is None:
            w.kill()


def stream_through(fault):
    """A greedy stream from `troupe serve -tp 2 --fault FAULT`: asserts it ends normally with
    the tokens of an undisturbed run and that /health stays 200; returns the server (running:
    the caller stops it) and its /metrics, keyed by name and labels."""
    body = {"prompt": "Once upon a time", "max_tokens": 48, "temperature": 0, "ignore_eos": True}
    want = generate("-tp", "2", "--temperature", "0", "--max-tokens", "48", "--ignore-eos",
                    "Once upon a time")[0]["outputs"][0]["text"]
    s = Server("-tp", "2", "--fault", fault)
    try:
        t, got = background_stream(s, body)
        t.join(120)
        assert got["status"] == 200, got
        events = sse_data(got["body"])
        assert events[-1] == "[DONE]", events[-3:]
        text = "".join(json.loads(e)["choices"][0]["text"] for e in events[:-1]
                       if json.loads(e).get("choices"))
        assert text == want, (text, want)
        assert http(s.url + "/health")[0] == 200
        return s, metrics(s)
    except BaseException:
        s.stop()
        raise


def case_fault_recovery():
    """A worker of `troupe serve -tp 2` killed by an injected fault mid-stream: the stream ends
    normally with the tokens of a run without the fault, /health stays 200, and /metrics counts
    the fault, the recovery and the recomputed sequences."""
    s, m = stream_through("kill-worker:rank=1,step=10")
    try:
        key = f'{{engine="0",model_name="{NAME}"}}'
        assert m["troupe:executor_faults_total" + key] == 1.0, m
        assert m["troupe:executor_recoveries_total" + key] == 1.0, m
        assert m["troupe:sequences_recomputed_total" + key] == 1.0, m
        assert m["troupe:recovery_seconds_total" + key] > 0, m
    finally:
        s.stop()


def case_drain_mid_stream():
    """A worker of `troupe serve -tp 2` asked to leave mid-stream (the drain fault; SIGTERM to
    it does the same): its rank moves to a fresh worker with its KV cache, the stream ends
    normally with the tokens of an undisturbed run, and /metrics counts the move and no fault."""
    s, m = stream_through("drain:rank=1,step=10")
    try:
        assert s.wait_log("with its KV cache"), s.log()
        key = f'{{engine="0",model_name="{NAME}"}}'
        assert m["troupe:rank_moves_total" + key] == 1.0, m
        assert m["troupe:kv_blocks_moved_total" + key] > 0, m
        assert m["troupe:rank_move_seconds_total" + key] > 0, m
        assert m["troupe:executor_faults_total" + key] == 0.0, m
        assert m["troupe:sequences_recomputed_total" + key] == 0.0, m
    finally:
        s.stop()


def case_graceful_shutdown():
    """SIGTERM stops new work but lets an in-flight stream finish with its [DONE]; exit 0."""
    s = Server("--generation-config", "vllm", "--shutdown-timeout", "20")
    try:
        t, got = background_stream(s, {"prompt": "Once", "max_tokens": 120, "ignore_eos": True})
        time.sleep(0.5)
        s.proc.send_signal(signal.SIGTERM)
        t.join(60)
        assert got["status"] == 200, got
        events = sse_data(got["body"])
        assert events[-1] == "[DONE]", events[-3:]
        assert sum(len(json.loads(e)["choices"]) for e in events[:-1]) == 120
        assert s.proc.wait(30) == 0, s.log()
        assert s.wait_log("SIGTERM received"), s.log()
    finally:
        s.stop(signal.SIGKILL)


def case_logging_flags():
    """--enable-log-requests with --max-log-len cuts logged prompts; --disable-log-requests and
    --disable-log-stats silence the request log and the periodic stats line."""
    prompt = "Once upon a time in a land far away"
    with Server("--enable-log-requests", "--max-log-len", "9") as loud, \
            Server("--disable-log-requests", "--disable-log-stats") as quiet:
        for s in (loud, quiet):
            assert http(s.url + "/v1/completions", {"prompt": prompt, "max_tokens": 3})[0] == 200
        time.sleep(6)  # past one stats interval (5 s)
        a, b = loud.log(), quiet.log()
        assert "prompt: 'Once upon...'" in a, a
        assert prompt not in a.split("Received request")[1].split("\n")[0], a
        assert "Received request" not in b, b
        assert "Avg prompt throughput" in a, a
        assert "Avg prompt throughput" not in b, b
        # --disable-log-requests is the old spelling: a one-line notice says what it maps to.
        assert "--disable-log-requests" in b, b


def case_metrics_reference():
    """/metrics parses with prometheus_client's own parser and has the families, types, labels
    and histogram buckets of vLLM's PrometheusStatLogger (tests/server/metrics_reference.py
    builds them with prometheus_client for comparison); the phase histograms (queue, prefill,
    decode, inference) observe each sequence once, with intervals that add up."""
    sys.path.insert(0, str(REPO / "tests" / "server"))
    import metrics_reference
    if not metrics_reference.available():
        msg = "python3-prometheus-client is not installed (tools/install-deps.sh installs it)"
        if os.environ.get("TROUPE_REQUIRE_NODE_CLIENT"):
            raise AssertionError(msg)
        print("SKIP: " + msg)
        return
    with Server() as s:
        for stream in (False, True):
            assert http(s.url + "/v1/completions", {"prompt": "x", "max_tokens": 5,
                                                    "stream": stream})[0] == 200
        # n = 2: each sequence is observed, as vLLM observes each child request.
        assert http(s.url + "/v1/completions", {"prompt": "y", "max_tokens": 4, "n": 2,
                                                "temperature": 1.0, "seed": 3})[0] == 200
        status, text = http(s.url + "/metrics")
        metrics_reference.compare(text, model_name=NAME, max_model_len=512)
        m = metrics(s)
        lab = f'{{engine="0",model_name="{NAME}"}}'
        phases = ("request_queue_time", "request_prefill_time", "request_decode_time",
                  "request_inference_time", "e2e_request_latency")
        for name in phases:
            assert m[f"vllm:{name}_seconds_count{lab}"] == 4, (name, m)
        total = {name: m[f"vllm:{name}_seconds_sum{lab}"] for name in phases}
        # inference = prefill + decode for every sequence; each phase is a real interval; the
        # client saw at least the queue and the inference (e2e starts earlier, ends later).
        assert abs(total["request_inference_time"] - total["request_prefill_time"]
                   - total["request_decode_time"]) < 1e-6, total
        assert all(v >= 0 for v in total.values()), total
        assert total["request_prefill_time"] > 0 and total["request_decode_time"] > 0, total
        assert total["e2e_request_latency"] >= (total["request_queue_time"]
                                                + total["request_inference_time"]), total
        # Tokens per engine step: every prompt token is computed (one- and two-token prompts fill
        # no block to reuse) and every generated token but each sequence's last is fed back.
        steps = m[f"vllm:iteration_tokens_total_count{lab}"]
        assert 0 < steps, m
        assert m[f"vllm:iteration_tokens_total_sum{lab}"] == (
            m[f"vllm:prompt_tokens_total{lab}"] + m[f"vllm:generation_tokens_total{lab}"] - 4), m


def case_bench_serving():
    """`troupe bench serving` against the server: every request completes, token counts are the
    server's, and the JSON has vLLM's keys."""
    with Server() as s, tempfile.TemporaryDirectory() as d:
        p = subprocess.run(
            [TROUPE, "--log-level", "warn", "bench", "serving", "--base-url", s.url,
             "--dataset-name", "random", "--random-input-len", "12", "--random-output-len", "6",
             "--num-prompts", "24", "--request-rate", "50", "--max-concurrency", "8",
             "--ignore-eos", "--num-warmups", "2", "--metric-percentiles", "50,99",
             "--percentile-metrics", "ttft,tpot,itl,e2el", "--goodput", "ttft:60000",
             "--save-result", "--result-dir", d, "--result-filename", "r.json"],
            capture_output=True, text=True, env=ENV, cwd=REPO, timeout=300)
        assert p.returncode == 0, p.stdout + p.stderr
        assert "Serving Benchmark Result" in p.stdout and "Median TTFT (ms)" in p.stdout, p.stdout
        j = json.loads(pathlib.Path(d, "r.json").read_text())
        assert j["completed"] == 24 and j["failed"] == 0, j
        assert j["total_output_tokens"] == 24 * 6 and j["total_input_tokens"] == 24 * 12, j
        assert j["request_goodput"] == j["request_throughput"], j  # a generous SLO
        for k in ("mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "p50_itl_ms", "mean_tpot_ms",
                  "p99_e2el_ms", "output_throughput", "total_token_throughput"):
            assert j[k] > 0, (k, j[k])
        # One gap per streamed text piece after the first (a token that decodes to no text,
        # as some random ids do, streams none).
        assert all(len(itl) <= 5 for itl in j["itls"]), j["itls"]
        assert sum(len(itl) == 5 for itl in j["itls"]) > 12, j["itls"]
        m = metrics(s)
        ok = m[f'vllm:request_success_total{{engine="0",finished_reason="length",model_name="{NAME}"}}']
        assert ok == 24 + 2, ok  # the warm-ups too
    # A server without a tokenizer (--skip-tokenizer-init, as the GPU benchmarks run the dummy
    # Llama-3-8B) streams no text: the token ids it returns time the tokens instead.
    with Server("--skip-tokenizer-init") as s, tempfile.TemporaryDirectory() as d:
        p = subprocess.run(
            [TROUPE, "--log-level", "warn", "bench", "serving", "--base-url", s.url,
             "--dataset-name", "random", "--random-input-len", "12", "--random-output-len", "6",
             "--num-prompts", "8", "--request-rate", "inf", "--ignore-eos", "--save-result",
             "--result-dir", d, "--result-filename", "r.json"],
            capture_output=True, text=True, env=ENV, cwd=REPO, timeout=300)
        assert p.returncode == 0, p.stdout + p.stderr
        j = json.loads(pathlib.Path(d, "r.json").read_text())
        assert j["completed"] == 8 and j["failed"] == 0, j
        assert j["total_output_tokens"] == 8 * 6, j
        assert all(len(itl) == 5 for itl in j["itls"]), j["itls"]  # every token timed


def case_bench_serving_client():
    """`troupe bench serving` spreads its requests over several client threads: against a
    plain Python server that counts open requests, --max-concurrency is never exceeded and is
    reached, every request is answered once, and a burst (--request-rate inf) arrives whole."""
    import http.server

    state = {"open": 0, "most": 0, "bodies": 0}
    lock = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_GET(self):
            body = b'{"object":"list","data":[{"id":"fake-model","object":"model"}]}'
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):
            req = json.loads(self.rfile.read(int(self.headers["content-length"])))
            with lock:
                state["open"] += 1
                state["most"] = max(state["most"], state["open"])
                state["bodies"] += 1
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()

            def chunk(obj):
                data = b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode())
                data += b"\n\n"
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

            n = req["max_tokens"]
            for _ in range(n):
                time.sleep(0.04)
                chunk({"choices": [{"index": 0, "text": "x", "finish_reason": None}]})
            chunk({"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": n}})
            with lock:
                state["open"] -= 1
            chunk(b"[DONE]")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    class Srv(http.server.ThreadingHTTPServer):
        request_queue_size = 128  # the listen backlog (socketserver's default is 5)

    srv = Srv(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}"
    try:
        for args, concurrency in ((["--request-rate", "inf", "--max-concurrency", "3"], 3),
                                  (["--request-rate", "inf"], 16)):
            state.update(open=0, most=0, bodies=0)
            with tempfile.TemporaryDirectory() as d:
                p = subprocess.run(
                    [TROUPE, "--log-level", "warn", "bench", "serving", "--base-url", url,
                     "--dataset-name", "random", "--random-input-len", "4",
                     "--random-output-len", "5", "--num-prompts", "16", "--ignore-eos",
                     "--save-result", "--result-dir", d, "--result-filename", "r.json", *args],
                    capture_output=True, text=True, env=ENV, cwd=REPO, timeout=120)
                assert p.returncode == 0, p.stdout + p.stderr
                j = json.loads(pathlib.Path(d, "r.json").read_text())
            assert j["completed"] == 16 and j["failed"] == 0, j
            assert j["total_output_tokens"] == 16 * 5, j
            assert all(len(itl) == 4 for itl in j["itls"]), j["itls"]
            assert state["bodies"] == 16, state
            # 16 requests of >= 200 ms each: the limit is reached, and never passed.
            assert state["most"] == concurrency, (args, state)
    finally:
        srv.shutdown()


def case_sampling_fields():
    """vLLM's sampling fields reach the engine: for each set, /v1/completions answers what
    `troupe generate` answers for the same SamplingParams (the offline path); prompt_logprobs,
    continuous usage stats and vLLM's plain POST /generate as well."""
    prompt = "Once upon a time"
    with Server("--enable-prompt-tokens-details") as s:
        ids = http(s.url + "/tokenize", {"prompt": " the"})[1]["tokens"][1:]
        greedy = generate("--temperature", "0", "--max-tokens", "16", "--ignore-eos",
                          prompt)[0]["outputs"][0]
        third = greedy["token_ids"][2]
        sets = [
            {"temperature": 0, "repetition_penalty": 1.5},
            {"temperature": 0, "presence_penalty": 1.5, "frequency_penalty": 1.0},
            {"temperature": 1.0, "top_k": 5, "seed": 7},
            {"temperature": 1.0, "top_p": 0.9, "min_p": 0.2, "seed": 11},
            {"temperature": 0, "logit_bias": {str(ids[0]): 100}},
            {"temperature": 0, "min_tokens": 6, "logit_bias": {"1": 100}},  # 1: <|eos|>
            {"temperature": 0, "stop_token_ids": [third], "ignore_eos": True},
            {"temperature": 0, "logit_bias": {"0": 100}, "skip_special_tokens": False},
            {"temperature": 0, "logit_bias": {"0": 100}, "skip_special_tokens": True},
            {"temperature": 0, "prompt_logprobs": 2},
            {"temperature": 0, "bad_words": [greedy["text"].split()[1]]},
            {"temperature": 0, "allowed_token_ids": sorted(set(greedy["token_ids"][::2]))},
            {"temperature": 0, "truncate_prompt_tokens": 2},
            {"temperature": 0, "use_beam_search": True, "best_of": 3, "ignore_eos": True,
             "length_penalty": 0.5, "early_stopping": "never"},
            {"temperature": 0, "use_beam_search": True, "n": 2, "early_stopping": True},
        ]
        inputs = tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False)
        for fields in sets:
            inputs.write(json.dumps({"prompt": prompt, "max_tokens": 16, **fields}) + "\n")
        inputs.close()
        refs = generate("--input", inputs.name)
        os.unlink(inputs.name)
        for fields, ref in zip(sets, refs):
            st, r = http(s.url + "/v1/completions", {"prompt": prompt, "max_tokens": 16, **fields})
            assert st == 200, (fields, r)
            c, want = r["choices"][0], ref["outputs"][0]
            assert c["text"] == want["text"], (fields, c, want)
            assert c["finish_reason"] == want["finish_reason"], (fields, c, want)
            assert r["usage"]["completion_tokens"] == sum(
                len(o["token_ids"]) for o in ref["outputs"]), (fields, r, ref)  # all n choices
            if "stop_token_ids" in fields:
                assert c["finish_reason"] == "stop" and c["stop_reason"] == third, c
                assert len(want["token_ids"]) == 3, want  # vLLM keeps the stop token's id
            if "min_tokens" in fields:
                assert r["usage"]["completion_tokens"] == 7 and c["finish_reason"] == "stop", r
            if "bad_words" in fields:
                assert c["text"] != greedy["text"], (fields, c)
            if "allowed_token_ids" in fields:
                assert set(want["token_ids"]) <= set(fields["allowed_token_ids"]), (fields, want)
            if "truncate_prompt_tokens" in fields:
                assert r["usage"]["prompt_tokens"] == 2, r
            if "prompt_logprobs" in fields:
                got, ref_lp = c["prompt_logprobs"], ref["prompt_logprobs"]
                assert got[0] is None and len(got) == len(ref["prompt_token_ids"]), got
                for g, w in zip(got[1:], ref_lp[1:]):
                    assert set(g) == {str(k) for k in w}, (g, w)
                    for k, v in g.items():
                        want_lp = w[k]["logprob"] if k in w else w[int(k)]["logprob"]
                        assert abs(v["logprob"] - want_lp) < 1e-5, (k, v, w)
            if "use_beam_search" in fields:  # every beam result, in the same order
                assert [x["text"] for x in r["choices"]] == [
                    o["text"] for o in ref["outputs"]], (fields, r, ref)
        # A streamed beam request gets its whole result in one chunk at the end (vLLM's server
        # stops streaming beam search), then [DONE].
        beam = {"prompt": prompt, "max_tokens": 8, "temperature": 0, "use_beam_search": True,
                "n": 2, "ignore_eos": True}
        st, plain = http(s.url + "/v1/completions", beam)
        st2, body = http(s.url + "/v1/completions", {**beam, "stream": True})
        assert st == 200 and st2 == 200, (plain, body)
        events = sse_data(body)
        assert events[-1] == "[DONE]", events
        texts = {}
        for e in events[:-1]:
            for ch in json.loads(e)["choices"]:
                texts[ch["index"]] = texts.get(ch["index"], "") + ch["text"]
        assert [texts[i] for i in range(2)] == [c["text"] for c in plain["choices"]], (texts, plain)
        special = [r for f, r in zip(sets, refs) if "skip_special_tokens" in f]
        assert "<|bos|>" in special[0]["outputs"][0]["text"], special
        assert "<|bos|>" not in special[1]["outputs"][0]["text"], special
        # best_of > n: the n samples with the highest cumulative logprob of best_of, best first,
        # as an exhaustive ranking of the same seeded samples (n = best_of) gives them.
        sample = {"prompt": prompt, "max_tokens": 8, "ignore_eos": True, "temperature": 1.0,
                  "seed": 5, "logprobs": 0}
        st, every = http(s.url + "/v1/completions", {**sample, "n": 5})
        assert st == 200 and len(every["choices"]) == 5, every
        score = lambda c: sum(c["logprobs"]["token_logprobs"])
        ranked = sorted(every["choices"], key=lambda c: -score(c))
        for stream in (False, True):
            st, body = http(s.url + "/v1/completions",
                            {**sample, "n": 2, "best_of": 5, "stream": stream})
            assert st == 200, body
            if stream:  # the ranking is known at the end: one chunk per choice, then [DONE]
                chunks = [json.loads(e) for e in sse_data(body)[:-1]]
                texts = {}
                for ch in chunks:
                    for c in ch["choices"]:
                        texts[c["index"]] = texts.get(c["index"], "") + c["text"]
                assert texts == {0: ranked[0]["text"], 1: ranked[1]["text"]}, (texts, ranked)
            else:
                got = body["choices"]
                assert [c["index"] for c in got] == [0, 1], got
                assert [c["text"] for c in got] == [ranked[0]["text"], ranked[1]["text"]], got
                assert abs(score(got[0]) - score(ranked[0])) < 1e-5, (got, ranked)
                # usage counts the returned samples only, as vLLM's
                assert body["usage"]["completion_tokens"] == 16, body
        # --enable-prompt-tokens-details: a prompt sent twice is served from the prefix cache
        # the second time (vLLM's num_cached_tokens: full 16-token blocks of all but the last
        # token); none cached is null, as vLLM writes it.
        story = ("Once upon a time there was a little girl who lived in a village near the "
                 "forest, and every day she walked")
        n_ids = http(s.url + "/tokenize", {"prompt": story})[1]["count"]
        assert n_ids > 17, n_ids
        body = {"prompt": story, "max_tokens": 2, "temperature": 0}
        first = http(s.url + "/v1/completions", body)[1]
        assert first["usage"]["prompt_tokens_details"] is None, first
        second = http(s.url + "/v1/completions", body)[1]
        cached = (n_ids - 1) // 16 * 16
        assert second["usage"]["prompt_tokens_details"] == {"cached_tokens": cached}, second
        st, body = http(s.url + "/v1/completions",
                        {**body, "stream": True, "stream_options": {"include_usage": True}})
        last = json.loads(sse_data(body)[-2])
        assert last["usage"]["prompt_tokens_details"] == {"cached_tokens": cached}, last
        st, chat = http(s.url + "/v1/chat/completions",
                        {"messages": [{"role": "user", "content": story}], "max_tokens": 2})
        st, chat = http(s.url + "/v1/chat/completions",
                        {"messages": [{"role": "user", "content": story}], "max_tokens": 2})
        assert chat["usage"]["prompt_tokens_details"]["cached_tokens"] >= 16, chat
        # stream_options.continuous_usage_stats: every chunk carries the usage so far.
        st, body = http(s.url + "/v1/completions",
                        {"prompt": prompt, "max_tokens": 5, "ignore_eos": True, "stream": True,
                         "temperature": 0, "stream_options": {"include_usage": True,
                                                              "continuous_usage_stats": True}})
        chunks = [json.loads(e) for e in sse_data(body)[:-1]]
        counts = [c["usage"]["completion_tokens"] for c in chunks if c["choices"]]
        assert counts == [1, 2, 3, 4, 5], chunks
        assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 5
        # vLLM's plain api_server: {"text": [prompt + output]}.
        st, g = http(s.url + "/generate", {"prompt": prompt, "max_tokens": 16, "temperature": 0,
                                           "ignore_eos": True})
        assert st == 200 and g == {"text": [prompt + greedy["text"]]}, (g, greedy)


def case_stream_interval():
    """--stream-interval 4 (vLLM's flag): a streamed completion's chunks carry its first token,
    then 4 at a time, then the rest with the finish; together the same text and token ids as
    the plain response and as the default server's one-token chunks. The inter-token latency
    histogram still counts one observation per token after the first (vLLM observes each
    engine step)."""
    body = {"prompt": "Once upon a time", "max_tokens": 10, "temperature": 0, "ignore_eos": True,
            "return_token_ids": True}

    def streamed(server):
        st, events = http(server.url + "/v1/completions", {**body, "stream": True})
        assert st == 200, events
        events = sse_data(events)
        assert events[-1] == "[DONE]", events
        return [json.loads(e)["choices"][0] for e in events[:-1]]

    with Server() as s:
        every = streamed(s)
    assert [len(c["token_ids"]) for c in every] == [1] * 10, every
    with Server("--stream-interval", "4") as s:
        st, plain = http(s.url + "/v1/completions", body)
        assert st == 200, plain
        plain = plain["choices"][0]
        itl_key = f'vllm:inter_token_latency_seconds_count{{engine="0",model_name="{NAME}"}}'
        before = metrics(s).get(itl_key, 0.0)
        chunks = streamed(s)
        after = metrics(s)[itl_key]
        chat = {"messages": [{"role": "user", "content": "Tell me a story."}], "max_tokens": 10,
                "temperature": 0, "ignore_eos": True}
        st, whole = http(s.url + "/v1/chat/completions", chat)
        assert st == 200, whole
        st, events = http(s.url + "/v1/chat/completions", {**chat, "stream": True})
        assert st == 200, events
        deltas = [json.loads(e)["choices"][0]["delta"] for e in sse_data(events)[:-1]]
        content = [d["content"] for d in deltas if d.get("content")]
        assert 2 <= len(content) <= 4, deltas  # 10 tokens: 1 + 4 + 4 + 1 at most
        assert "".join(content) == whole["choices"][0]["message"]["content"], (deltas, whole)
    assert [len(c["token_ids"]) for c in chunks] == [1, 4, 4, 1], chunks
    assert [c["finish_reason"] for c in chunks] == [None, None, None, "length"], chunks
    assert "".join(c["text"] for c in chunks) == plain["text"] == "".join(c["text"] for c in every)
    ids = [t for c in chunks for t in c["token_ids"]]
    assert ids == plain["token_ids"] == [t for c in every for t in c["token_ids"]], (ids, plain)
    assert after - before == 9, (before, after)


def case_stop_fields():
    """stop, include_stop_str_in_output and spaces_between_special_tokens through
    /v1/completions with raw HTTP, plain and streamed: each field changes the text the way vLLM's
    does, so a server that dropped one would fail here."""
    prompt = "Once upon a time"
    greedy = {"prompt": prompt, "max_tokens": 16, "temperature": 0, "ignore_eos": True}

    def complete(server, body):
        """(the whole choice, the streamed text) of one request, sent plain and streamed."""
        st, r = http(server.url + "/v1/completions", body)
        assert st == 200, (body, r)
        st, events = http(server.url + "/v1/completions", {**body, "stream": True})
        assert st == 200, (body, events)
        events = sse_data(events)
        assert events[-1] == "[DONE]", events
        chunks = [json.loads(e)["choices"][0] for e in events[:-1]]
        assert chunks[-1]["finish_reason"] == r["choices"][0]["finish_reason"], (chunks, r)
        assert chunks[-1]["stop_reason"] == r["choices"][0]["stop_reason"], (chunks, r)
        return r["choices"][0], "".join(c["text"] for c in chunks), r["usage"]

    with Server() as s:
        full, _, _ = complete(s, greedy)
        full = full["text"]
        assert full and full.count(" ") >= 8, full  # 16 greedy tokens of words
        # The stop string: two words from the middle of the greedy text (so it spans tokens and
        # is met after some text), e.g. " man who" in ', a man is a man who has a man ...'.
        stop = " " + " ".join(full.split()[5:7])
        cut = full.index(stop)
        assert cut > 0, (full, stop)
        # stop (a string and a list): the text ends just before the first match and generation
        # stops there (fewer than max_tokens tokens, finish_reason "stop", stop_reason the
        # string). A server that ignored stop would answer the whole 16-token `full` with
        # finish_reason "length".
        for stops in (stop, [stop], ["never-generated-xyz", stop]):
            c, streamed, usage = complete(s, {**greedy, "stop": stops})
            assert c["text"] == full[:cut] and streamed == full[:cut], (stops, c, streamed, full)
            assert c["finish_reason"] == "stop" and c["stop_reason"] == stop, c
            assert usage["completion_tokens"] < 16, usage
        # include_stop_str_in_output: false (and absent) cuts before the stop string, true keeps
        # it, and the two differ by exactly the stop string; ignoring the field would give the
        # same text for both.
        for include, want in ((False, full[:cut]), (True, full[:cut + len(stop)])):
            c, streamed, _ = complete(s, {**greedy, "stop": [stop],
                                          "include_stop_str_in_output": include})
            assert c["text"] == want and streamed == want, (include, c, streamed, want)
            assert c["finish_reason"] == "stop" and c["stop_reason"] == stop, (include, c)
        # The embedded tokenizer's added tokens (<|bos|> ... <|system|>) are spelled in ASCII,
        # which the ByteLevel decoder writes unchanged, so spaces_between_special_tokens cannot
        # change their text (as vLLM's fast detokenizer): two added tokens in a row read the
        # same either way.
        forced = {"prompt": prompt, "max_tokens": 4, "temperature": 0,
                  "allowed_token_ids": [3, 4], "skip_special_tokens": False}
        texts = {sp: complete(s, {**forced, "spaces_between_special_tokens": sp})[0]["text"]
                 for sp in (True, False)}
        assert texts[True] == texts[False] and texts[True].startswith("<|"), texts
    # spaces_between_special_tokens: a copy of the tokenizer where the added tokens 3 and 4 are
    # spelled "<Ġu>" and "<Ġa>" (as tests/actors/test_sampling_gaps.cpp does): the ByteLevel
    # decoder writes them "< u>" and "< a>", and with skip_special_tokens false and
    # spaces_between_special_tokens false vLLM's fast detokenizer writes an added token that
    # follows another output added token as its raw content. A server that dropped the field
    # (or skip_special_tokens) would answer the decoder's text both times.
    with tempfile.TemporaryDirectory() as tok_dir:
        tj = json.loads((MODEL / "tokenizer.json").read_text())
        spelled = {3: "<\u0120u>", 4: "<\u0120a>"}  # Ġ: the byte-level spelling of a space
        for t in tj["added_tokens"]:
            t["content"] = spelled.get(t["id"], t["content"])
        pathlib.Path(tok_dir, "tokenizer.json").write_text(json.dumps(tj))
        pathlib.Path(tok_dir, "tokenizer_config.json").write_text(
            (MODEL / "tokenizer_config.json").read_text())
        with Server("--tokenizer", tok_dir) as s:
            decoded = {3: "< u>", 4: "< a>"}
            got = {}
            for sp in (True, False, None):  # None: the field left out (vLLM's default, true)
                body = {**forced, "return_token_ids": True}
                if sp is not None:
                    body["spaces_between_special_tokens"] = sp
                c, streamed, _ = complete(s, body)
                ids = c["token_ids"]
                assert len(ids) == 4 and set(ids) <= {3, 4}, c
                want = "".join(decoded[i] if sp is not False or k == 0 else spelled[i]
                               for k, i in enumerate(ids))
                assert c["text"] == want and streamed == want, (sp, c, streamed, want)
                got[sp] = c["text"]
            assert got[True] == got[None] != got[False], got
            assert got[True] == http(s.url + "/detokenize", {"tokens": ids})[1]["prompt"], got


def case_chat_template_flags():
    """The chat template: a tokenizer without one answers vLLM's 400 for chat (and for /tokenize
    with messages); --chat-template FILE renders instead, with the tokenizer's special tokens;
    a request's chat_template needs --trust-request-chat-template. --uvicorn-log-level warning
    silences the access log but not the start line; --log-level warn alone does neither."""
    with tempfile.TemporaryDirectory() as d:
        tok = pathlib.Path(d, "tokenizer")
        tok.mkdir()
        (tok / "tokenizer.json").write_bytes((MODEL / "tokenizer.json").read_bytes())
        config = json.loads((MODEL / "tokenizer_config.json").read_text())
        del config["chat_template"]
        (tok / "tokenizer_config.json").write_text(json.dumps(config))
        template = pathlib.Path(d, "template.jinja")
        template.write_text("{{ bos_token }}{% for m in messages %}[{{ m.role | upper }}] "
                            "{{ m.content | trim }}\n{% endfor %}"
                            "{% if add_generation_prompt %}[ASSISTANT]{% endif %}")
        messages = [{"role": "user", "content": " Will it rain? "}]
        chat = {"messages": messages, "max_tokens": 4}
        # The model as vLLM's positional argument.
        with Server(str(MODEL), "--tokenizer", str(tok), "--uvicorn-log-level", "warning") as s:
            for path, body in (("/v1/chat/completions", chat), ("/tokenize", chat)):
                st, e = http(s.url + path, body)
                assert st == 400, (path, st, e)
                assert e == {"error": {
                    "message": "As of transformers v4.44, default chat template is no longer "
                               "allowed, so you must provide a chat template if the tokenizer "
                               "does not define one.",
                    "type": "BadRequestError", "param": None, "code": 400}}, e
            assert http(s.url + "/v1/completions", {"prompt": "x", "max_tokens": 2})[0] == 200
            assert "POST /v1/completions HTTP/1.1\" 200" not in s.log(), s.log()
        with Server("--tokenizer", str(tok), "--chat-template", str(template)) as s:
            st, t = http(s.url + "/tokenize", {"messages": messages})
            assert st == 200, t
            st, d2 = http(s.url + "/detokenize", {"tokens": t["tokens"]})
            assert d2["prompt"] == "<|bos|>[USER] Will it rain?\n[ASSISTANT]", d2
            st, r = http(s.url + "/v1/chat/completions", chat)
            assert st == 200 and r["usage"]["prompt_tokens"] == t["count"], r
            # max_completion_tokens: the chat API's name for max_tokens.
            st, r = http(s.url + "/v1/chat/completions",
                         {"messages": messages, "max_completion_tokens": 3, "ignore_eos": True})
            assert st == 200 and r["usage"]["completion_tokens"] == 3, r
            assert r["choices"][0]["finish_reason"] == "length", r
            st, e = http(s.url + "/v1/chat/completions", {**chat, "chat_template": "{{ 'x' }}"})
            assert st == 400 and "--trust-request-chat-template" in e["error"]["message"], e
            assert s.wait_log("POST /v1/chat/completions HTTP/1.1\" 200"), s.log()
        with Server("--tokenizer", str(tok), log_level="warn") as s:
            assert http(s.url + "/v1/completions", {"prompt": "x", "max_tokens": 2})[0] == 200
            assert s.wait_log("POST /v1/completions HTTP/1.1\" 200"), s.log()


def case_readme_examples():
    """README's `troupe serve` examples run as written (the port aside): the curl completion
    gives `troupe generate`'s greedy text, and the openai client example streams a reply."""
    readme = (REPO / "README.md").read_text()
    sh = next(b for b in re.findall(r"```sh\n(.*?)```", readme, re.S) if "troupe serve" in b)
    serve_line = next(l for l in sh.splitlines() if "troupe serve" in l)
    args = serve_line.split("troupe serve", 1)[1].replace("&", "").split()
    i = args.index("--port")
    del args[i:i + 2]  # the test's own port
    curl = sh[sh.index("curl"):]
    js = re.search(r"```js\n(.*?)```", readme, re.S).group(1)
    ref = generate("--temperature", "0", "--max-tokens", "16", "Once upon a time")[0]
    with Server(*args) as s:
        here = f"127.0.0.1:{s.port}"
        p = subprocess.run(["bash", "-c", curl.replace("localhost:8000", here)],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        out = json.loads(p.stdout)
        assert out["model"] == "fortunes", out
        assert out["choices"][0]["text"] == ref["outputs"][0]["text"], (out, ref)
        if node_client():
            script = CLIENT_DIR / "readme_example.mjs"  # beside node_modules, so imports resolve
            script.write_text(js.replace("localhost:8000", here))
            try:
                p = subprocess.run(["node", str(script)], capture_output=True, text=True,
                                   timeout=120)
            finally:
                script.unlink()
            assert p.returncode == 0, p.stderr
            assert len(p.stdout.strip()) > 0, p.stdout


if __name__ == "__main__":
    name, TROUPE = sys.argv[1], sys.argv[2]
    globals()["case_" + name]()
    print(f"{name}: ok")
