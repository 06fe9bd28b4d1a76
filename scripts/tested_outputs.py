#!/usr/bin/env python3
"""Prints the build outputs (paths relative to BUILD, one per line) that the tests CTest selects
with the given arguments run: every argument or environment value of their commands inside BUILD
that Ninja knows how to build. scripts/test.sh builds only these for the sanitizer runs, which
select a subset of the tests (the rest of the tree would be compiled with the sanitizer for
nothing: CI's time).
  tested_outputs.py BUILD [ctest selection arguments...]"""
import json
import os
import re
import subprocess
import sys


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    build = os.path.realpath(sys.argv[1])
    listing = subprocess.run(["ctest", "-N", "--show-only=json-v1", *sys.argv[2:]], cwd=build,
                             check=True, capture_output=True, text=True).stdout
    names = {t["name"] for t in json.loads(listing).get("tests", [])}
    if not names:
        sys.exit("tested_outputs.py: the selection has no tests")
    # The commands come from the CTestTestfile.cmake files: ctest leaves out the command of a test
    # whose program is not built yet, and here nothing is.
    words = []
    for folder, _, files in os.walk(build):
        if "CTestTestfile.cmake" not in files:
            continue
        for line in open(os.path.join(folder, "CTestTestfile.cmake"), encoding="utf-8"):
            m = re.match(r'(add_test|set_tests_properties)\((\S+)\s(.*)$', line.strip())
            if m and m.group(2) in names:
                words += [w.split("=", 1)[-1] for w in re.findall(r'"((?:[^"\\]|\\.)*)"', m.group(3))]
    candidates = set()
    for word in words:
        for part in word.split(":"):
            path = os.path.realpath(part) if part.startswith("/") else ""
            if path.startswith(build + os.sep):
                candidates.add(os.path.relpath(path, build))
    known = [c for c in sorted(candidates)
             if subprocess.run(["ninja", "-C", build, "-t", "query", c],
                               capture_output=True).returncode == 0]
    if not known:
        sys.exit("tested_outputs.py: the selected tests run nothing this build makes")
    print("\n".join(known))


if __name__ == "__main__":
    main()
