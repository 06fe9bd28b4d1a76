#!/usr/bin/env python3
"""tools/check_layers.py: the real tree passes, and each kind of breach is caught with its file,
line and rule (the build runs the same check before compiling the library)."""
import os
import shutil
import sys
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import check_layers  # noqa: E402


class Layers(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="prioccl-layers-")
        for top in ("src", "transports"):
            shutil.copytree(os.path.join(ROOT, top), os.path.join(self.tmp, top))

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def prepend(self, rel, line):
        path = os.path.join(self.tmp, rel)
        with open(path) as fh:
            text = fh.read()
        with open(path, "w") as fh:
            fh.write(line + "\n" + text)

    def test_the_tree_keeps_its_layers(self):
        self.assertEqual(check_layers.check(ROOT), [])
        self.assertEqual(check_layers.check(self.tmp), [])

    def test_an_algorithm_including_the_engine_is_refused(self):
        self.prepend("src/algo/ring.cpp", '#include "core/op.h"')
        self.assertEqual(check_layers.check(self.tmp), [
            'src/algo/ring.cpp:1: #include "core/op.h": algo may not include core '
            "(layers below algo: common, reduce)"])

    def test_a_transport_reaching_into_the_scheduler_is_refused(self):
        self.prepend("transports/tcp/tcp_transport.cpp", '#include "core/scheduler.h"')
        problems = check_layers.check(self.tmp)
        self.assertEqual(len(problems), 1)
        self.assertIn("transports/tcp/tcp_transport.cpp:1:", problems[0])
        self.assertIn("transports may not include core", problems[0])

    def test_common_may_include_nothing_of_the_library(self):
        self.prepend("src/common/log.cpp", '#include "algo/registry.h"')
        self.assertIn("common may not include algo (layers below common: none)",
                      check_layers.check(self.tmp)[0])

    def test_the_seams_and_the_public_api_are_allowed(self):
        self.prepend("src/core/op_stats.cpp", '#include "transport.h"')
        self.prepend("src/algo/ring.cpp", '#include "prioccl/prioccl.h"')
        self.assertEqual(check_layers.check(self.tmp), [])

    def test_headers_and_folders_of_no_layer_are_named(self):
        self.prepend("src/core/op_stats.cpp", '#include "nowhere/thing.h"')
        os.makedirs(os.path.join(self.tmp, "src", "newlayer"))
        with open(os.path.join(self.tmp, "src", "newlayer", "x.cpp"), "w") as fh:
            fh.write("int x;\n")
        problems = check_layers.check(self.tmp)
        self.assertIn('src/core/op_stats.cpp:1: #include "nowhere/thing.h" is in no layer',
                      problems)
        self.assertTrue(any(p.startswith("src/newlayer/x.cpp: in no layer") for p in problems))


if __name__ == "__main__":
    unittest.main()
