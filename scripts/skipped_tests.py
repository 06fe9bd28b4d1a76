#!/usr/bin/env python3
"""Lists the tests CTest did not run (skipped), each with the reason its output gives, from the
JUnit files `ctest --output-junit` wrote: a skipped test is reported, never counted as passed.
Usage: skipped_tests.py JUNIT.xml..."""
import re
import sys
import xml.etree.ElementTree as ET

REASON = re.compile(r"SKIPPED|skipp|no usable GPU|not installed|needs |cannot run", re.I)


def reason(out):
    lines = [l.strip() for l in (out or "").splitlines()]
    for line in lines:
        if REASON.search(line) and not re.match(r"^\S+:\d+: Skipped$", line):
            return line[:200]
    return "(no reason printed)"


def main(paths):
    skipped = []
    for path in paths:
        try:
            root = ET.parse(path).getroot()
        except (OSError, ET.ParseError) as e:
            print(f"skipped_tests.py: cannot read {path}: {e}")
            return 1
        for case in root.iter("testcase"):
            if case.get("status") == "notrun" or case.find("skipped") is not None:
                out = case.findtext("system-out")
                skipped.append((case.get("name"), reason(out)))
    print(f"=== {len(skipped)} test(s) skipped")
    for name, why in skipped:
        print(f"  {name}: {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
