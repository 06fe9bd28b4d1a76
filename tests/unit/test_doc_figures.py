#!/usr/bin/env python3
"""docs/architecture.md states layouts and constants only where this test can check them:
"`Name` (N bytes...)" must be a `static_assert(sizeof(Name) == N)` of the sources, and
"`kName` (N...)" the value of `constexpr ... kName = N` (or `kName{N}`, `kName(N)`; N may be
a product or shift of literals, and the claim may say KiB or MiB). A figure that changes in
the code fails here until the document follows; figures nobody checks (line counts) are not
written at all."""
import os
import re
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DOC = os.path.join(ROOT, "docs", "architecture.md")
SIZE_CLAIM = re.compile(r"`([A-Z]\w*)` \((\d+) bytes\b")
CONST_CLAIM = re.compile(r"`(k[A-Z]\w*)` \((\d+)(?: ?(KiB|MiB))?\b")
LINES_CLAIM = re.compile(r"`((?:include|src|transports|python|tools)/[\w/.]+)` \(\d+\)")
SIZEOF = re.compile(r"sizeof\((\w+)\)\s*==\s*(\d+)")
STATEMENT = re.compile(r"\bconstexpr\b([^;]*);")
DECLARATOR = re.compile(r"\b(k[A-Z]\w*)\s*(?:=\s*([0-9][0-9 <*]*?)\s*(?:,|$)|[{(]\s*([0-9][0-9 <*]*?)\s*[})])")
UNITS = {None: 1, "": 1, "KiB": 1 << 10, "MiB": 1 << 20}


def read(path):
    with open(path, encoding="utf-8", errors="replace") as fh:
        return fh.read()


def source_facts(root):
    sizes, consts = {}, {}
    for top in ("src", "transports", "include"):
        for d, _, files in os.walk(os.path.join(root, top)):
            for f in files:
                if not f.endswith((".h", ".hpp", ".cpp")):
                    continue
                text = read(os.path.join(d, f))
                for assertion in re.findall(r"static_assert\(([^;]*?)\);", text, re.S):
                    for name, n in SIZEOF.findall(assertion):
                        sizes.setdefault(name, set()).add(int(n))
                for statement in STATEMENT.findall(text):
                    for name, a, b in DECLARATOR.findall(statement.strip()):
                        # only digits, spaces, "<<" and "*": safe to evaluate
                        consts.setdefault(name, set()).add(int(eval(a or b)))
    return sizes, consts


def stale_figures(doc_text, sizes, consts):
    problems = []

    def compare(n, name, value, known, unit, missing):
        if not known:
            problems.append(f"line {n}: `{name}` ({value}{unit}): {missing}")
        elif known != {value}:
            problems.append(f"line {n}: `{name}` is {sorted(known)}{unit} in the sources, "
                            f"not {value}")

    for n, line in enumerate(doc_text.splitlines(), 1):
        for name, value in SIZE_CLAIM.findall(line):
            compare(n, name, int(value), sizes.get(name), " bytes",
                    f"no static_assert on sizeof({name}) in the sources to check it against")
        for name, number, unit in CONST_CLAIM.findall(line):
            compare(n, name, int(number) * UNITS[unit], consts.get(name), "",
                    f"no constexpr {name} with a literal value in the sources")
        for path in LINES_CLAIM.findall(line):
            problems.append(f"line {n}: `{path}` with a figure after it (a line count rots; "
                            "say what the file does instead)")
    return problems


class DocFigures(unittest.TestCase):
    def test_architecture_figures_match_the_sources(self):
        sizes, consts = source_facts(ROOT)
        self.assertEqual(stale_figures(read(DOC), sizes, consts), [])

    def test_the_document_states_checked_figures(self):
        # The check must have something to check: the wire layouts named in section 2.
        text = read(DOC)
        for name in ("AgreementHeader", "Announce", "CachedEntry"):
            self.assertRegex(text, rf"`{name}` \(\d+ bytes")
        self.assertRegex(text, r"`kControlVersion` \(\d+\)")

    def test_stale_figures_are_named(self):
        sizes = {"Announce": {72}}
        consts = {"kControlVersion": {7}}
        text = ("`Announce` (88 bytes) and `kControlVersion` (6)\n`Decision` (176 bytes)\n"
                "`kNowhere` (3)\n| `src/core/engine.h` (169) |\n`Announce` (72 bytes), "
                "`kControlVersion` (7)")
        self.assertEqual(stale_figures(text, sizes, consts), [
            "line 1: `Announce` is [72] bytes in the sources, not 88",
            "line 1: `kControlVersion` is [7] in the sources, not 6",
            "line 2: `Decision` (176 bytes): no static_assert on sizeof(Decision) in the "
            "sources to check it against",
            "line 3: `kNowhere` (3): no constexpr kNowhere with a literal value in the sources",
            "line 4: `src/core/engine.h` with a figure after it (a line count rots; say what "
            "the file does instead)"])

    def test_the_sources_are_read(self):
        sizes, consts = source_facts(ROOT)
        self.assertEqual(sizes.get("AgreementHeader"), {168})
        self.assertEqual(consts.get("kControlBytes"), {4096})
        self.assertEqual(consts.get("kEndToEndSendMax"), {64 << 10})  # two in one statement
        self.assertEqual(consts.get("kAbortFlush"), {200})  # chrono, parenthesised


if __name__ == "__main__":
    unittest.main()
