#!/usr/bin/env python3
"""System tests of the distributed runtime: tensor and pipeline parallel `troupe generate`
runs (the engine starts its own worker processes), `troupe launch` of a cluster file, bad
cluster files, and a cluster of network namespaces (its own test hosts, joined by veth pairs)
with a link cut mid-run.

    python3 tests/system/cluster_cases.py CASE TROUPE_BINARY

Every run compares against a one-rank `troupe generate` of the same prompts (greedy: the same
tokens). Network namespaces need root and iproute2; where they cannot be made the case says so
and passes as skipped.
"""
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

REPO = pathlib.Path(__file__).resolve().parents[2]
MODEL = REPO / "models" / "troupe-fortunes"
ENV = dict(os.environ, TROUPE_DEFAULT_MODEL=str(MODEL))
PROMPTS = ["Once upon a time", "The future of AI is", "A wise man", "In the morning"]
GREEDY = ["--temperature", "0", "--max-tokens", "24", "--ignore-eos"]


def run(*args, ok=True, env=None, timeout=300, prefix=()):
    p = subprocess.run([*prefix, TROUPE, "--log-level", "info", *args], capture_output=True,
                       text=True, env=ENV if env is None else env, timeout=timeout, cwd=REPO)
    if ok and p.returncode != 0:
        raise AssertionError(f"troupe {' '.join(args)} exited {p.returncode}:\n{p.stderr[-4000:]}")
    return p


def tokens(p):
    out = [json.loads(l) for l in p.stdout.splitlines() if l.strip()]
    return [o["outputs"][0]["token_ids"] for o in out]


def reference():
    return tokens(run("generate", *GREEDY, *PROMPTS))


def case_parallel_generate():
    """TP=2, PP=2 and TP=2 x PP=2 started by `troupe generate` itself: one rank's tokens."""
    want = reference()
    for flags in (["-tp", "2"], ["-pp", "2"], ["-tp", "2", "-pp", "2"]):
        p = run("generate", *flags, *GREEDY, *PROMPTS)
        assert tokens(p) == want, f"{flags}: {tokens(p)} != {want}"
        assert "rank 1" in p.stderr, f"{flags}: no topology printed:\n{p.stderr[-2000:]}"


def case_launch_local():
    """The shipped configs/cluster/local.toml works as is: head and two workers on 127.0.0.1."""
    want = reference()
    p = run("launch", "configs/cluster/local.toml", "--", "generate", *GREEDY, *PROMPTS)
    assert tokens(p) == want, f"{tokens(p)} != {want}"
    assert "every worker joined" in p.stderr, p.stderr[-2000:]
    # The workers exit with the head: none is left behind.
    time.sleep(0.5)
    left = subprocess.run(["pgrep", "-f", f"{TROUPE} worker --head"], capture_output=True,
                          text=True).stdout.split()
    assert not left, f"workers left running: {left}"


def case_launch_serve():
    """`troupe launch local.toml -- serve`: the OpenAI server on the cluster's two ranks answers
    a greedy completion with one rank's tokens; SIGTERM stops it and its workers."""
    with tempfile.TemporaryDirectory() as d:
        log = pathlib.Path(d, "serve.log")
        with open(log, "w") as err:
            proc = subprocess.Popen([TROUPE, "--log-level", "info", "launch",
                                     "configs/cluster/local.toml", "--", "serve", "--host",
                                     "127.0.0.1", "--port", "0"], stdout=subprocess.DEVNULL,
                                    stderr=err, env=ENV, cwd=REPO)
        try:
            url = None
            deadline = time.time() + 60
            while time.time() < deadline and proc.poll() is None and url is None:
                for word in log.read_text().split():
                    if word.startswith("http://127.0.0.1:"):
                        url = word
                time.sleep(0.1)
            assert url, f"no server address:\n{log.read_text()[-3000:]}"
            models = json.load(urllib.request.urlopen(url + "/v1/models", timeout=30))
            body = json.dumps({"model": models["data"][0]["id"], "prompt": PROMPTS[2],
                               "max_tokens": 24, "temperature": 0,
                               "ignore_eos": True}).encode()
            req = urllib.request.Request(url + "/v1/completions", data=body,
                                         headers={"Content-Type": "application/json"})
            out = json.load(urllib.request.urlopen(req, timeout=60))
            text = out["choices"][0]["text"]
            local = json.loads(run("generate", *GREEDY, PROMPTS[2]).stdout.splitlines()[0])
            assert text == local["outputs"][0]["text"], (text, local["outputs"][0]["text"])
            assert "every worker joined" in log.read_text()
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
    time.sleep(0.5)
    left = subprocess.run(["pgrep", "-f", f"{TROUPE} worker --head"], capture_output=True,
                          text=True).stdout.split()
    assert not left, f"workers left running: {left}"


def case_launch_faults():
    """A cluster file's [faults]: a worker killed by an injected fault (and one frozen) is
    restarted by the launcher, a spare takes a lost rank, and a worker asked to leave hands its
    rank and KV cache to the spare; every request finishes with the tokens of a run without
    faults."""
    want = reference()
    base = (REPO / "configs" / "cluster" / "local.toml").read_text()
    with tempfile.TemporaryDirectory() as d:
        for fault in ("kill-worker:rank=1,step=5", "freeze:rank=0,step=5"):
            path = write(d, "faults.toml", base + f'\n[faults]\ninject = ["{fault}"]\n')
            p = run("launch", path, "--", "generate", *GREEDY, *PROMPTS)
            assert tokens(p) == want, f"{fault}: {tokens(p)} != {want}"
            assert "restarting rank" in p.stderr and "executors replaced" in p.stderr, \
                p.stderr[-3000:]
        # A spare node: it takes the lost rank's place (no restart), and a second loss of the
        # same rank, with no spare left, restarts the rank's worker with the spare's command.
        spare = ('\n[[node]]\nname = "standby"\nhost = "127.0.0.1"\nworkers = 1\n'
                 'launcher = "local"\nspare = true\n')
        path = write(d, "spare.toml", base + spare + '\n[faults]\ninject = '
                     '["kill-worker:rank=1,step=5", "kill-worker:rank=1,step=12"]\n')
        p = run("launch", path, "--", "generate", *GREEDY, *PROMPTS)
        assert tokens(p) == want, f"spare: {tokens(p)} != {want}"
        assert "rank 1 is taken over by the spare" in p.stderr, p.stderr[-3000:]
        assert "restarting rank 1 on node standby" in p.stderr, p.stderr[-3000:]
        # A worker asked to leave (the drain fault, as a SIGTERM to it): its rank moves to the
        # spare with its KV cache, no restart, nothing recomputed; with no spare it stays.
        path = write(d, "drain.toml", base + spare + '\n[faults]\ninject = ["drain:rank=1,step=5"]\n')
        p = run("launch", path, "--", "generate", *GREEDY, *PROMPTS)
        assert tokens(p) == want, f"drain: {tokens(p)} != {want}"
        assert "rank 1 moves to the spare" in p.stderr, p.stderr[-3000:]
        assert "with its KV cache" in p.stderr and "no sequence was recomputed" in p.stderr, \
            p.stderr[-3000:]
        assert "executors replaced" not in p.stderr, p.stderr[-3000:]
        path = write(d, "nospare.toml", base + '\n[faults]\ninject = ["drain:rank=1,step=5"]\n')
        p = run("launch", path, "--", "generate", *GREEDY, *PROMPTS)
        assert tokens(p) == want, f"drain without a spare: {tokens(p)} != {want}"
        assert "stays where it is" in p.stderr and "spare = true" in p.stderr, p.stderr[-3000:]


def write(d, name, text):
    path = pathlib.Path(d) / name
    path.write_text(text)
    return str(path)


def expect_cluster_error(path, *needles):
    p = run("launch", path, "--", "generate", *GREEDY, "Hello", ok=False, timeout=120)
    assert p.returncode != 0, f"{path}: exit 0"
    for n in needles:
        assert n in p.stderr, f"{path}: stderr lacks {n!r}:\n{p.stderr[-3000:]}"


def case_bad_clusters():
    """Bad cluster files and launches are refused naming the field, the rank or the host."""
    with tempfile.TemporaryDirectory() as d:
        base = (REPO / "configs" / "cluster" / "local.toml").read_text()
        expect_cluster_error(write(d, "unknown.toml", base + "\n[head]\nprot = 1\n"),
                             "unknown.toml")
        expect_cluster_error(write(d, "typo.toml", base.replace("workers = 2", "wrokers = 2")),
                             "typo.toml", "wrokers")
        expect_cluster_error(
            write(d, "dup.toml", base.replace("workers = 2", "workers = 1\nfirst_rank = 0") +
                  '\n[[node]]\nname = "b"\nworkers = 1\nfirst_rank = 0\n'), "rank 0")
        expect_cluster_error(write(d, "few.toml", base.replace("workers = 2", "workers = 1")),
                             "tensor_parallel_size")
        # A worker that cannot start (its launch command fails): named with its command and
        # how it exited, within the join timeout.
        never = base.replace('launcher = "local"', 'launcher = "command"\ncommand = "exit 3 # {troupe} {worker_args}"')
        never = never.replace("join_timeout_ms = 30000", "join_timeout_ms = 3000")
        expect_cluster_error(write(d, "never.toml", never), "did not join", "exited with status 3")
        # What the file may say but troupe cannot do yet is refused, never ignored.
        expect_cluster_error(write(d, "faults.toml", base + '\n[faults]\nkill_rank = 1\n'),
                             "faults.kill_rank", "allowed: inject, max_executor_restarts")

        # TP that does not divide the model's heads, before any worker starts.
        p = run("generate", "-tp", "3", *GREEDY, "Hello", ok=False)
        assert p.returncode != 0 and "num_attention_heads" in p.stderr, p.stderr[-2000:]
        # The command line and the file disagree.
        p = run("launch", "configs/cluster/local.toml", "--", "generate", "-tp", "4", "Hello",
                ok=False)
        assert p.returncode != 0 and "give them in one place" in p.stderr, p.stderr[-2000:]
        p = run("launch", "configs/cluster/local.toml", "generate", "Hello", ok=False)
        assert p.returncode != 0 and "expected `--`" in p.stderr, p.stderr[-2000:]


def start_worker(prefix=()):
    """A `troupe worker --port 0` (under `prefix`, e.g. a mount namespace); returns the process
    and its endpoint."""
    w = subprocess.Popen([*prefix, TROUPE, "--log-level", "warn", "worker", "--port", "0"],
                         stdout=subprocess.PIPE, text=True, env=ENV, cwd=REPO)
    line = w.stdout.readline()
    assert "listening on" in line, line
    return w, line.strip().split()[-1]


def case_checkpoints():
    """Every rank must read the same checkpoint: a worker whose model directory holds other
    files (here: a private mount over the same path, as on another host) is refused naming
    both ranks; --max-parallel-loading-workers 1 loads the ranks one at a time with the same
    tokens as one rank."""
    want = reference()
    with tempfile.TemporaryDirectory() as d:
        model, other = pathlib.Path(d, "model"), pathlib.Path(d, "other")
        shutil.copytree(MODEL, model)
        shutil.copytree(MODEL, other)
        with open(other / "config.json", "a") as f:
            f.write("\n")  # another file at the same path: another fingerprint
        w0, e0 = start_worker()
        mnt = ("unshare", "--mount", "--propagation", "private", "sh", "-c",
               'mount --bind "$0" "$1" && shift && exec "$@"', str(other), str(model))
        try:
            if os.geteuid() != 0 or shutil.which("unshare") is None or subprocess.run(
                    ["unshare", "--mount", "true"], capture_output=True).returncode != 0:
                print("mount namespaces cannot be made here; the checkpoint case is skipped")
            else:
                w1, e1 = start_worker(mnt)
                try:
                    p = run("generate", "--model", str(model), "-tp", "2",
                            "--executor-endpoints", f"{e0},{e1}", *GREEDY, "Hello", ok=False)
                    assert p.returncode != 0, "two checkpoints were accepted"
                    assert "different checkpoint" in p.stderr and e1 in p.stderr, p.stderr[-2000:]
                finally:
                    w1.kill()
                    w1.wait(timeout=30)
        finally:
            w0.kill()
            w0.wait(timeout=30)
    p = run("generate", "-tp", "2", "-pp", "2", "--max-parallel-loading-workers", "1", *GREEDY,
            *PROMPTS)
    assert tokens(p) == want, f"{tokens(p)} != {want}"


# ---- network namespaces --------------------------------------------------------------------

NS = ["trp-h", "trp-a", "trp-b"]


def sh(*args, check=True):
    return subprocess.run(list(args), capture_output=True, text=True, check=check, timeout=30)


def make_hosts():
    """Three namespaces: trp-h (the head, 10.77.0.1) bridging trp-a (10.77.0.2) and trp-b
    (10.77.0.3), each over its own veth pair. Returns False where they cannot be made."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        return False
    drop_hosts()
    try:
        for ns in NS:
            sh("ip", "netns", "add", ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "-n", "trp-h", "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", "trp-h", "addr", "add", "10.77.0.1/24", "dev", "br0")
        sh("ip", "-n", "trp-h", "link", "set", "br0", "up")
        for i, ns in enumerate(("trp-a", "trp-b")):
            h, w = f"vh{i}", f"vw{i}"
            sh("ip", "-n", "trp-h", "link", "add", h, "type", "veth", "peer", "name", w,
               "netns", ns)
            sh("ip", "-n", "trp-h", "link", "set", h, "master", "br0", "up")
            sh("ip", "-n", ns, "addr", "add", f"10.77.0.{i + 2}/24", "dev", w)
            sh("ip", "-n", ns, "link", "set", w, "up")
        # trp-a reaches trp-b through trp-h's bridge (a TCP connection; no ping here).
        listener = subprocess.Popen(
            ["ip", "netns", "exec", "trp-b", sys.executable, "-c",
             "import socket; s = socket.socket(); s.settimeout(10); "
             "s.bind(('10.77.0.3', 29599)); s.listen(); print('up', flush=True); s.accept()"],
            stdout=subprocess.PIPE, text=True)
        try:
            assert listener.stdout.readline().strip() == "up", "no listener in trp-b"
            sh("ip", "netns", "exec", "trp-a", sys.executable, "-c",
               "import socket; socket.create_connection(('10.77.0.3', 29599), timeout=5)")
        finally:
            listener.kill()
            listener.wait(timeout=10)
        return True
    except (subprocess.CalledProcessError, FileNotFoundError, AssertionError) as e:
        print(f"network namespaces cannot be made here ({e}); skipped")
        drop_hosts()
        return False


def drop_hosts():
    for ns in NS:
        sh("ip", "netns", "pids", ns, check=False)
        for pid in sh("ip", "netns", "pids", ns, check=False).stdout.split():
            sh("kill", "-9", pid, check=False)
        sh("ip", "netns", "del", ns, check=False)


def cluster_file(d, timeout_ms):
    node = '''
[[node]]
name = "{name}"
host = "{ip}"
workers = 1
launcher = "command"
command = "ip netns exec {ns} {{troupe}} worker {{worker_args}}"
'''
    return write(d, "ns.toml", f'''
[head]
address = "10.77.0.1"
port = 29577
join_timeout_ms = 20000
[parallel]
tensor_parallel_size = 2
[transport]
ucx_tls = "tcp"
collectives = "ucx"
[heartbeat]
interval_ms = 200
timeout_ms = {timeout_ms}
''' + node.format(name="a", ip="10.77.0.2", ns="trp-a") +
        node.format(name="b", ip="10.77.0.3", ns="trp-b"))


def case_namespaces():
    """Head and workers on three test hosts (network namespaces joined by veth pairs): the
    same tokens as one rank; then a link cut mid-run fails the run naming the worker, within
    the heartbeat timeout."""
    if not make_hosts():
        return
    try:
        want = reference()
        with tempfile.TemporaryDirectory() as d:
            path = cluster_file(d, 2000)
            prefix = ("ip", "netns", "exec", "trp-h")
            p = run("launch", path, "--", "generate", *GREEDY, *PROMPTS, prefix=prefix)
            assert tokens(p) == want, f"{tokens(p)} != {want}"
            # Again, with many long requests, and trp-b's link cut once it runs.
            inputs = write(d, "many.jsonl", "".join(
                json.dumps({"prompt": PROMPTS[i % 4], "max_tokens": 400, "temperature": 0,
                            "ignore_eos": True}) + "\n" for i in range(16)))
            log = pathlib.Path(d) / "head.log"
            with open(log, "w") as err_file:
                proc = subprocess.Popen([*prefix, TROUPE, "--log-level", "info", "launch", path,
                                         "--", "generate", "--input", inputs, "--max-model-len",
                                         "512"], stdout=subprocess.PIPE, stderr=err_file,
                                        text=True, env=ENV, cwd=REPO)
                # Cut trp-b's link once every worker joined and the run is under way.
                deadline = time.time() + 120
                while time.time() < deadline and proc.poll() is None and \
                        "every worker joined" not in log.read_text():
                    time.sleep(0.1)
                time.sleep(1.0)
                sh("ip", "-n", "trp-h", "link", "set", "vh1", "down")
                cut = time.time()
                proc.communicate(timeout=120)
                took = time.time() - cut
            err = log.read_text()
            assert proc.returncode != 0, f"exit 0 after the cut:\n{err[-3000:]}"
            assert "10.77.0.3" in err, f"the lost worker is not named:\n{err[-3000:]}"
            assert took < 60, f"{took:.1f} s from the cut to the end"
            print(f"link cut: the run ended {took:.1f} s later, naming the worker")
    finally:
        drop_hosts()


if __name__ == "__main__":
    name, TROUPE = sys.argv[1], os.path.abspath(sys.argv[2])
    globals()["case_" + name]()
    print(f"{name}: ok")
