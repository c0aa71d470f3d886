#!/usr/bin/env python3
"""Measures each fault troupe injects (and a real kill -9 and SIGSTOP of a worker): when it
was detected, how long recovery took, and what the requests saw. The numbers behind the
table in docs/faults.md.

    python3 tools/bench_faults.py BUILD_DIR [--json OUT.json] [--only SUBSTRING]

Each case runs `troupe generate` on the embedded model (CPU) with 16 requests (greedy and
seeded alternately, 40 tokens each) and compares every request's tokens with a run without
faults. Times come from the log lines' timestamps (milliseconds): the injection point's own
line (or the moment this script sent the signal), the scheduler's line naming the loss, and
its "executors replaced in X s". For a worker that leaves (drain, SIGTERM) the same columns
hold the scheduler's "moving ..." line and its "the move took X s".
"""
import argparse
import datetime
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]

# (name, layout flags, --fault specs, external signal or None, extra flags)
CASES = [
    ("kill-executor (in-process)", [], ["kill-executor:step=8"], None, []),
    ("freeze (in-process executor)", [], ["freeze:step=8"], None, ["--execute-timeout", "3"]),
    ("drop execute (in-process)", [], ["drop:message=execute,step=8"], None,
     ["--execute-timeout", "3"]),
    ("drop result (in-process)", [], ["drop:message=result,step=8"], None,
     ["--execute-timeout", "3"]),
    ("delay execute 300 ms", [], ["delay:message=execute,step=8,ms=300"], None, []),
    ("slow x3", [], ["slow:factor=3,step=8"], None, []),
    ("refuse-kv 4 steps", ["--block-size", "4"], ["refuse-kv:step=8,count=4"], None, []),
    ("kill-worker (tp 2)", ["-tp", "2"], ["kill-worker:rank=1,step=8"], None, []),
    ("kill-executor (tp 2)", ["-tp", "2"], ["kill-executor:rank=1,step=8"], None, []),
    ("freeze worker (tp 2)", ["-tp", "2"], ["freeze:rank=1,step=8"], None, []),
    ("drop result (tp 2)", ["-tp", "2"], ["drop:message=result,rank=1,step=8"], None,
     ["--execute-timeout", "3"]),
    ("ucx-fail (pp 2)", ["-pp", "2"], ["ucx-fail:rank=0,step=8"], None, []),
    ("kill -9 of a worker (tp 2)", ["-tp", "2"], [], signal.SIGKILL, []),
    ("SIGSTOP of a worker (tp 2)", ["-tp", "2"], [], signal.SIGSTOP, []),
    # Not faults: a worker asked to leave hands its rank and KV cache to a fresh one.
    ("drain (tp 2)", ["-tp", "2"], ["drain:rank=1,step=8"], None, []),
    ("SIGTERM to a worker (tp 2)", ["-tp", "2"], [], signal.SIGTERM, []),
]

HEAD = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3})\] \[troupe\] \[\w+\] (.*)$")
WORKER = re.compile(r"^[IWE] (\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) (.*)$")


def stamp(line):
    """(seconds since the epoch, message) of a log line, or None."""
    m = HEAD.match(line)
    if m:
        t = datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S.%f")
        return t.timestamp(), m.group(2)
    m = WORKER.match(line)
    if m:
        year = datetime.date.today().year
        t = datetime.datetime.strptime(f"{year}-{m.group(1)}", "%Y-%m-%d %H:%M:%S.%f")
        return t.timestamp(), m.group(2)
    return None


def inputs(path, count=16, tokens=40):
    """`count` requests of `tokens` tokens, greedy and seeded sampling alternately (the system
    tests use it too)."""
    path.write_text("".join(json.dumps({"prompt": f"Fortune {i}:", "max_tokens": tokens,
                                        "ignore_eos": True,
                                        **({"temperature": 1.0, "seed": 100 + i} if i % 2
                                           else {"temperature": 0})}) + "\n"
                            for i in range(count)))


def worker_pids(parent):
    """The `troupe worker` processes started by process `parent`."""
    pids = []
    for stat in pathlib.Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmd = (stat.parent / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if int(fields[1]) == parent and b"worker" in cmd:
            pids.append(int(stat.parent.name))
    return sorted(pids)


def generate(troupe, layout, faults, extra, src, dst, sig=None):
    args = [troupe, "--log-level", "info", "generate", *layout, *extra, "--max-num-seqs", "4",
            "--disable-progress-bar", "--input", str(src), "--output", str(dst)]
    for f in faults:
        args += ["--fault", f]
    t0 = time.time()
    p = subprocess.Popen(args, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                         cwd=REPO)
    sent = None
    if sig is not None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and (not dst.exists() or dst.read_text().count("\n") < 2):
            time.sleep(0.02)
        victims = worker_pids(p.pid)
        if victims:
            sent = time.time()
            os.kill(victims[-1], sig)
    err = p.communicate(timeout=300)[1]
    return p.returncode, err, time.time() - t0, sent


def measure(troupe, case, src, want, d):
    name, layout, faults, sig, extra = case
    dst = d / "out.jsonl"
    if dst.exists():
        dst.unlink()
    rc, err, wall, sent = generate(troupe, layout, faults, extra, src, dst, sig)
    injected = detected = None
    recovery = None
    for line in err.splitlines():
        s = stamp(line)
        if s is None:
            continue
        t, msg = s
        if injected is None and "injected fault" in msg:
            injected = t
        if detected is None and msg.startswith("scheduler:") and (
                "replacing the executors" in msg or "cannot run steps" in msg or
                msg.startswith("scheduler: moving ")):
            detected = t
        m = re.search(r"(?:executors replaced in|the move took) ([0-9.]+) s", msg)
        if m:
            recovery = float(m.group(1))
    start = sent if sent is not None else injected
    got = [o["outputs"][0]["token_ids"] for o in
           (json.loads(l) for l in dst.read_text().splitlines())] if dst.exists() else []
    same = sum(1 for a, b in zip(got, want) if a == b)
    return {
        "case": name,
        "faults": faults,
        "signal": signal.Signals(sig).name if sig else None,
        "exit": rc,
        "detected_s": round(detected - start, 3) if detected and start else None,
        "recovery_s": recovery,
        "requests": len(want),
        "finished": len(got),
        "same_tokens": same,
        "wall_s": round(wall, 2),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--json")
    ap.add_argument("--only", help="run the cases whose name contains this")
    a = ap.parse_args()
    troupe = str(pathlib.Path(a.build) / "tools" / "troupe")
    rows = []
    with tempfile.TemporaryDirectory() as d:
        d = pathlib.Path(d)
        src = d / "in.jsonl"
        inputs(src)
        refs = {}
        for case in CASES:
            if a.only and a.only not in case[0]:
                continue
            layout = tuple(case[1])
            if layout not in refs:
                ref = d / "ref.jsonl"
                rc, err, _, _ = generate(troupe, list(layout), [], [], src, ref)
                assert rc == 0, err
                refs[layout] = [json.loads(l)["outputs"][0]["token_ids"]
                                for l in ref.read_text().splitlines()]
            row = measure(troupe, case, src, refs[layout], d)
            rows.append(row)
            print(json.dumps(row), flush=True)
    print("\n| fault | detected after | recovery | requests finished with the fault-free tokens | exit |")
    print("| --- | --- | --- | --- | --- |")
    for r in rows:
        det = f"{r['detected_s'] * 1000:.0f} ms" if r["detected_s"] is not None else "(no loss)"
        rec = f"{r['recovery_s'] * 1000:.0f} ms" if r["recovery_s"] is not None else "-"
        print(f"| {r['case']} | {det} | {rec} | {r['same_tokens']} of {r['requests']} | {r['exit']} |")
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0 if all(r["same_tokens"] == r["requests"] and r["exit"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
