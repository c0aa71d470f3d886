#!/usr/bin/env python3
"""Every Catch2 TEST_CASE name can be registered as one CTest test.

catch_discover_tests turns each test case into a CTest test whose name is the test case's
name; a ';' in it is a CMake list separator, so the test is registered under a shortened name
that matches no test case, and it then "passes" without running anything. This fails, naming
the file and line, for any such name under tests/.

    python3 tests/system/test_names.py [tests dir]
"""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parent.parent)
bad = []
for path in sorted(root.rglob("*.cpp")):
    text = path.read_text(encoding="utf-8", errors="replace")
    for m in re.finditer(r'TEST_CASE\(\s*"((?:[^"\\]|\\.)*)"', text):
        if ";" in m.group(1):
            line = text.count("\n", 0, m.start()) + 1
            bad.append(f"{path}:{line}: TEST_CASE name contains ';': {m.group(1)!r}")
for b in bad:
    print(b)
print(f"{len(bad)} bad test names" if bad else "test names: ok")
sys.exit(1 if bad else 0)
