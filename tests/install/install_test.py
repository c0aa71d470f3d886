#!/usr/bin/env python3
"""`cmake --install` into a temporary prefix, then use it as a newcomer would:

- the installed `troupe` generates with the installed model, run from an unrelated directory;
- a host application (tests/install/host_app: a fresh CMake project outside the source tree)
  configures with find_package(troupe), builds against the installed headers and libraries,
  and, run from another directory, embeds the engine in its own actor system and generates
  with the installed model.

    python3 tests/install/install_test.py BUILD_DIR [CMake options for the host app...]

Reuses the libraries already built in BUILD_DIR (the install step copies them); the only
compile is the host application's one file.
"""
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent


def run(cmd, cwd=None, env=None, timeout=600):
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, cmd))} exited {p.returncode}:\n"
                             f"{p.stdout[-4000:]}\n{p.stderr[-4000:]}")
    return p


def main():
    build = pathlib.Path(sys.argv[1]).resolve()
    host_options = sys.argv[2:]
    # No variable that would point troupe at a model: it must find the installed one.
    env = {k: v for k, v in os.environ.items() if k != "TROUPE_DEFAULT_MODEL"}
    with tempfile.TemporaryDirectory(prefix="troupe_install_") as tmp:
        tmp = pathlib.Path(tmp)
        prefix = tmp / "prefix"
        run(["cmake", "--install", str(build), "--prefix", str(prefix)])
        model = prefix / "share" / "troupe" / "models" / "troupe-fortunes"
        for f in ("config.json", "model.safetensors", "tokenizer.json"):
            assert (model / f).is_file(), f"{model / f} not installed"
        for f in ("troupeConfig.cmake", "troupeConfigVersion.cmake", "troupeTargets.cmake",
                  "FindCAF.cmake"):
            assert (prefix / "lib" / "cmake" / "troupe" / f).is_file(), f"{f} not installed"
        assert (prefix / "include" / "troupe" / "actors" / "engine.hpp").is_file()

        elsewhere = tmp / "elsewhere"
        elsewhere.mkdir()
        troupe = prefix / "bin" / "troupe"
        p = run([troupe, "--version"], cwd=elsewhere, env=env)
        assert p.stdout.startswith("troupe "), p.stdout
        p = run([troupe, "generate", "--log-level", "warn", "--max-tokens", "4",
                 "--temperature", "0", "Once upon a time"], cwd=elsewhere, env=env)
        assert '"finish_reason":"length"' in p.stdout.replace(" ", ""), p.stdout

        # The host application: its own project, configured against the prefix only.
        src = tmp / "host_src"
        shutil.copytree(HERE / "host_app", src)
        host_build = tmp / "host_build"
        run(["cmake", "-S", str(src), "-B", str(host_build), f"-DCMAKE_PREFIX_PATH={prefix}",
             "-DCMAKE_BUILD_TYPE=Release", *host_options], env=env)
        run(["cmake", "--build", str(host_build)], env=env, timeout=900)
        p = run([host_build / "host_app", "Once upon a time"], cwd=elsewhere, env=env)
        # spdlog's default logger (troupe's logs, the host's choice) also writes to stdout.
        lines = [l for l in p.stdout.splitlines() if not l.startswith("[")]
        assert lines[0] == f"model: {model}", (lines, model)
        assert lines[1].startswith("Once upon a time") and len(lines[1]) > len("Once upon a time")
        assert lines[2] == "(16 tokens, length)", p.stdout
        # The same greedy tokens as the installed command gives for the prompt.
        p = run([troupe, "generate", "--log-level", "warn", "--max-tokens", "16",
                 "--temperature", "0", "Once upon a time"], cwd=elsewhere, env=env)
        text = json.loads(p.stdout)["outputs"][0]["text"]
        assert lines[1] == "Once upon a time" + text, (lines[1], text)
    print("install: ok")


if __name__ == "__main__":
    main()
