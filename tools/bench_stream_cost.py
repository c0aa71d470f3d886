#!/usr/bin/env python3
"""What a streamed request costs the server as its output grows: `troupe serve` on the embedded
model, 16 concurrent streamed completions of 240 and then 480 tokens, without and with
`logprobs: 5`; prints the server process's CPU seconds (utime + stime from /proc) and the wall
time of each set. Doubling the output doubles what is linear per token; what grows faster is
per-token work that depends on the output so far: the model's attention over a longer context,
and, before the server's streams took delta outputs (docs/engine.md "Delta outputs"), copying
the whole output so far every step.

    python3 tools/bench_stream_cost.py build/tools/troupe [ROUNDS, default 2]
"""
import http.client
import json
import os
import re
import subprocess
import sys
import threading
import time


def server_cpu(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stream(port, max_tokens, logprobs, events):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    body = {"prompt": [0, 5, 6, 7], "max_tokens": max_tokens, "ignore_eos": True,
            "stream": True, "temperature": 1.0}
    if logprobs:
        body["logprobs"] = 5
    conn.request("POST", "/v1/completions", json.dumps(body),
                 {"Content-Type": "application/json"})
    events.append(sum(1 for line in conn.getresponse() if line.startswith(b"data:")))


def main():
    troupe, rounds = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 2
    proc = subprocess.Popen([troupe, "--log-level", "info", "serve", "--host", "127.0.0.1",
                             "--port", "0", "--generation-config", "vllm",
                             "--disable-uvicorn-access-log", "--disable-log-stats"],
                            stderr=subprocess.PIPE, text=True)
    try:
        port = None
        deadline = time.monotonic() + 120
        while port is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                raise SystemExit("the server ended before it listened")
            m = re.search(r"http://127\.0\.0\.1:(\d+)", line)
            port = int(m.group(1)) if m else None
        if port is None:
            raise SystemExit("the server did not listen within 120 s")
        threading.Thread(target=proc.stderr.read, daemon=True).start()  # keep the pipe drained
        for r in range(rounds):
            for max_tokens in (240, 480):
                for logprobs in (False, True):
                    events = []
                    cpu0, t0 = server_cpu(proc.pid), time.monotonic()
                    threads = [threading.Thread(target=stream,
                                                args=(port, max_tokens, logprobs, events))
                               for _ in range(16)]
                    for t in threads:
                        t.start()
                    for t in threads:
                        t.join(600)
                    print(f"round {r + 1}: 16 x {max_tokens} tokens, logprobs "
                          f"{5 if logprobs else 'none'}: server CPU "
                          f"{server_cpu(proc.pid) - cpu0:.2f} s, wall "
                          f"{time.monotonic() - t0:.2f} s, {sum(events)} events", flush=True)
    finally:
        proc.terminate()
        proc.wait(30)


if __name__ == "__main__":
    main()
