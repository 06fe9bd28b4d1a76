#!/usr/bin/env python3
"""Runs the examples under valgrind memcheck (2 ranks) and fails on any leak or memory error
whose innermost frame outside the C/C++ runtime is prioccl's or an example's own. Open MPI, PMIx, hwloc and UCX keep
allocations until exit and read uninitialised bytes of their own: those records are counted and
shown apart, never fatal. Usage: memcheck_examples.py MPIRUN EXAMPLE..."""
import glob
import os
import re
import subprocess
import sys
import tempfile

RUNTIME = re.compile(r"vgpreload|libc\.so|libstdc\+\+|libgcc_s|ld-linux|\(in /usr/libexec/valgrind")
FOREIGN = re.compile(r"libmpi|libopen-(pal|rte)|libpmix|libhwloc|libuc[spmt]|libevent|mca_|\?\?\?")
OURS = re.compile(r"libprioccl|prioccl::|\bprioccl[A-Z]\w*|/src/|/transports/|examples/|: main \(")


def records(text):
    """Valgrind's report blocks: a headline, then 'at'/'by' frames, ended by an empty line."""
    block = []
    for line in text.splitlines():
        m = re.match(r"==\d+== ?(.*)", line)
        if not m:
            continue
        body = m.group(1)
        if not body.strip():
            if block:
                yield block
            block = []
        else:
            block.append(body)
    if block:
        yield block


def ours(block):
    for frame in block[1:]:
        if not re.match(r"\s+(at|by) 0x", frame) or RUNTIME.search(frame):
            continue
        if FOREIGN.search(frame):
            return False
        return bool(OURS.search(frame))
    return False


def main():
    mpirun, examples = sys.argv[1], sys.argv[2:]
    bad = foreign = 0
    for example in examples:
        # One log file per process: the ranks' reports, written to one stream, interleave line
        # by line, and a headline of one rank followed by another rank's frames misreads.
        with tempfile.TemporaryDirectory() as logs:
            cmd = [mpirun, "-np", "2", "valgrind", "-q", "--leak-check=full",
                   "--show-leak-kinds=definite,indirect,possible", "--num-callers=30",
                   "--suppressions=/usr/share/openmpi/openmpi-valgrind.supp",
                   "--log-file=" + os.path.join(logs, "vg.%p.log"), example]
            run = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            reports = [open(f).read() for f in sorted(glob.glob(os.path.join(logs, "*.log")))]
        if len(reports) < 2:
            print(f"{example}: {len(reports)} valgrind logs for 2 ranks")
            bad += 1
        for block in (b for text in reports for b in records(text)):
            kind = block[0]
            if not re.search(r"lost in loss record|Invalid|uninitialised|Mismatched|free", kind):
                continue
            if ours(block):
                bad += 1
                print("PRIOCCL:", "\n  ".join(block))
            else:
                foreign += 1
        if run.returncode != 0:
            print(f"{example}: exit status {run.returncode}")
            bad += 1
    print(f"MEMCHECK examples={len(examples)} prioccl_records={bad} "
          f"other_library_records={foreign}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
