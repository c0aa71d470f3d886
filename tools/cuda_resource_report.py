#!/usr/bin/env python3
"""The compiler's resource report for every CUDA kernel (no GPU needed).

Recompiles each .cu file of build/compile_commands.json with `-Xptxas=-v` (output to a temp
file) and prints one line per kernel: registers, spill stores/loads, static shared memory,
stack frame and constant bank bytes, from ptxas's own report. Usage:
    python3 tools/cuda_resource_report.py [build dir, default build] [name filter regex]
Kernels are named by their demangled signature, cut to the function name and template list.
"""
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

build = sys.argv[1] if len(sys.argv) > 1 else "build"
pattern = re.compile(sys.argv[2]) if len(sys.argv) > 2 else None
entries = [e for e in json.load(open(os.path.join(build, "compile_commands.json")))
           if e["file"].endswith(".cu")]
if not entries:
    sys.exit("cuda_resource_report: no .cu files in compile_commands.json (built without nvcc?)")

def demangle(names):
    try:
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True,
                             check=True).stdout.splitlines()
        return out if len(out) == len(names) else names
    except (OSError, subprocess.CalledProcessError):
        return names

def short(sig):
    # "void troupe::cuda::(anonymous namespace)::k<float, 128>(args...)" -> "k<float, 128>"
    sig = sig.replace("(anonymous namespace)::", "").replace("troupe::cuda::", "")
    depth, cut = 0, len(sig)
    for i, ch in enumerate(sig):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            cut = i
            break
    head = sig[:cut]
    head = re.sub(r"^\s*void\s+", "", head)
    return head

rows = []
with tempfile.TemporaryDirectory() as tmp:
    for e in entries:
        args = shlex.split(e["command"])
        if "-o" in args:
            args[args.index("-o") + 1] = os.path.join(tmp, "out.o")
        args.insert(1, "-Xptxas=-v")
        r = subprocess.run(args, cwd=e["directory"], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"cuda_resource_report: {e['file']} failed to compile:\n{r.stderr[-2000:]}")
        func = None
        for line in r.stderr.splitlines():
            m = re.search(r"Compiling entry function '([^']+)'", line)
            if m:
                func = {"file": os.path.basename(e["file"]), "mangled": m.group(1), "regs": 0,
                        "spill_st": 0, "spill_ld": 0, "smem": 0, "stack": 0}
                rows.append(func)
                continue
            if func is None:
                continue
            m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
            if m:
                func["stack"], func["spill_st"], func["spill_ld"] = map(int, m.groups())
            m = re.search(r"Used (\d+) registers", line)
            if m:
                func["regs"] = int(m.group(1))
                s = re.search(r"(\d+) bytes smem", line)
                func["smem"] = int(s.group(1)) if s else 0

names = demangle([r["mangled"] for r in rows])
print(f"{'kernel':90s} {'file':26s} {'regs':>4s} {'spill st/ld':>11s} {'stack':>5s} {'smem':>6s}")
for r, n in sorted(zip(rows, names), key=lambda p: (p[0]["file"], short(p[1]))):
    name = short(n)
    if pattern and not pattern.search(name):
        continue
    spill = f"{r['spill_st']}/{r['spill_ld']}"
    print(f"{name[:90]:90s} {r['file']:26s} {r['regs']:4d} {spill:>11s} {r['stack']:5d} {r['smem']:6d}")
