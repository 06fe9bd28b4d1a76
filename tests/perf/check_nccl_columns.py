#!/usr/bin/python3
"""Checks that all_reduce_perf's output reads the way tools written for nccl-tests read
all_reduce_perf's: runs it (under the given launcher) and parses the text with nccl-tests'
column layout, then checks --json and -F (CSV) against the text.

  check_nccl_columns.py MPIRUN PERF_BINARY WORKDIR

nccl-tests' layout: comment lines start with '#'; a data line has 13 whitespace-separated fields
(1-based) size count type redop root | out-of-place time algbw busbw #wrong | in-place time algbw
busbw #wrong, so busbw is field 8 (out-of-place) and 12 (in-place); the output ends with
'# Out of bounds values : N OK|FAILED' and '# Avg bus bandwidth    : X'.
Standard library only. Exit 0 when every check passes, 1 with the failures listed otherwise.
"""
import csv
import json
import re
import subprocess
import sys
from pathlib import Path

# The element size of every type name nccl-tests prints.
TYPE_SIZE = {"int8": 1, "uint8": 1, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8,
             "half": 2, "float": 4, "double": 8, "bfloat16": 2}
OPS = {"sum", "prod", "max", "min", "avg"}
failures = []


def fail(msg):
    failures.append(msg)


def run(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        fail(f"exit {out.returncode}: {' '.join(cmd)}\n{out.stdout}\n{out.stderr}")
    return out.stdout


def data_lines(text):
    """The lines nccl-tests' parsers treat as results: not empty, not starting with '#'."""
    return [l for l in text.splitlines() if l.strip() and not l.lstrip().startswith("#")]


def parse(text, label, checked=True, sizes=None, types=None, ops=None):
    """Rows as dicts, checking every data line against nccl-tests' layout."""
    rows = []
    for line in data_lines(text):
        f = line.split()
        if len(f) != 13:
            fail(f"{label}: {len(f)} fields, not 13: {line!r}")
            continue
        size, count, typ, redop, root = f[:5]
        if not size.isdigit() or not count.isdigit():
            fail(f"{label}: size/count not integers: {line!r}")
            continue
        if typ not in TYPE_SIZE:
            fail(f"{label}: type {typ!r} is not one of nccl-tests' names: {line!r}")
            continue
        if int(count) != int(size) // TYPE_SIZE[typ]:
            fail(f"{label}: count {count} != size {size} / sizeof({typ}): {line!r}")
        if redop not in OPS:
            fail(f"{label}: redop {redop!r}: {line!r}")
        if root != "-1":
            fail(f"{label}: root {root!r} is not -1: {line!r}")
        row = {"size": int(size), "count": int(count), "type": typ, "redop": redop}
        for name, base in (("oop", 5), ("ip", 9)):  # 0-based index of time
            try:
                row[name] = [float(f[base]), float(f[base + 1]), float(f[base + 2])]
            except ValueError:
                fail(f"{label}: time/algbw/busbw at fields {base + 1}-{base + 3} not floats: "
                     f"{line!r}")
                continue
            wrong = f[base + 3]
            if checked and wrong != "0":
                fail(f"{label}: #wrong at field {base + 4} is {wrong!r}, not 0: {line!r}")
            if not checked and wrong != "N/A":
                fail(f"{label}: #wrong at field {base + 4} is {wrong!r} under -c 0: {line!r}")
            row[name + "_wrong"] = wrong
        rows.append(row)
    if not rows:
        fail(f"{label}: no data lines")
    if sizes is not None and sorted({r["size"] for r in rows if r["type"] == "double"}) != sizes:
        fail(f"{label}: double sizes {sorted({r['size'] for r in rows})} != {sizes}")
    if types is not None and {r["type"] for r in rows} != types:
        fail(f"{label}: types {sorted({r['type'] for r in rows})} != {sorted(types)}")
    if ops is not None and {r["redop"] for r in rows} != ops:
        fail(f"{label}: ops {sorted({r['redop'] for r in rows})}")
    m = re.search(r"^# Out of bounds values : (\d+) (OK|FAILED)", text, re.M)
    if not m or m.group(1) != "0" or m.group(2) != "OK":
        fail(f"{label}: no '# Out of bounds values : 0 OK' line")
    m = re.search(r"^# Avg bus bandwidth\s*: ([0-9.eE+-]+)", text, re.M)
    if not m:
        fail(f"{label}: no '# Avg bus bandwidth' line")
    else:
        # nccl-tests' average: over every line, both placements.
        busbws = [r[p][2] for r in rows for p in ("oop", "ip") if p in r]
        avg = sum(busbws) / len(busbws) if busbws else 0.0
        if abs(float(m.group(1)) - avg) > 1e-3 + 1e-3 * avg:
            fail(f"{label}: Avg bus bandwidth {m.group(1)} != mean of the busbw fields {avg:.4f}")
    return rows


def close(a, b):
    """The text rounds times to 0.01 us and bandwidths to 0.001 GB/s."""
    return abs(a - b) <= 0.006 + 1e-6 * abs(b)


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    mpirun, perf, work = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    work.mkdir(parents=True, exist_ok=True)
    jpath, cpath = work / "nccl_columns.json", work / "nccl_columns.csv"
    for p in (jpath, cpath):
        p.unlink(missing_ok=True)
    base = [mpirun, "-np", "2", perf, "-b", "8", "-e", "64K", "-f", "8", "-n", "3", "-w", "1"]

    # Every datatype, sum; --json and -F on the same run.
    text = run(base + ["-d", "all", "-o", "sum", "--json", str(jpath), "-F", str(cpath)])
    rows = parse(text, "-d all", sizes=[8, 64, 512, 4096, 32768], types=set(TYPE_SIZE),
                 ops={"sum"})
    if not re.search(r"^#\s+size\s+count\s+type\s+redop\s+root\s+time\s+algbw\s+busbw\s+#wrong"
                     r"\s+time\s+algbw\s+busbw\s+#wrong\s*$", text, re.M):
        fail("-d all: no nccl-tests column header line")
    if not re.search(r"^#\s+Rank\s+0 Group\s+0 Pid\s+\d+ on\s+\S+ cpu", text, re.M):
        fail("-d all: no '#  Rank  0 Group  0 Pid ... on HOST cpu' line")

    # --json: loads, and says what the text says.
    try:
        j = json.loads(jpath.read_text())
        res = j["results"]
        if j["nranks"] != 2 or len(res) != len(rows):
            fail(f"json: nranks {j['nranks']}, {len(res)} results for {len(rows)} lines")
        for r, t in zip(res, rows):
            same = (r["size"] == t["size"] and r["count"] == t["count"]
                    and r["type"] == t["type"] and r["redop"] == t["redop"] and r["root"] == -1)
            for name, key in (("oop", "out_of_place"), ("ip", "in_place")):
                o = r[key]
                same = same and close(o["time_us"], t[name][0]) and \
                    close(o["busbw_gbs"], t[name][2]) and str(o["wrong"]) == t[name + "_wrong"]
            if not same:
                fail(f"json result {r} does not match the line {t}")
        if j["out_of_bounds"] != 0 or j["ok"] is not True:
            fail(f"json: out_of_bounds {j['out_of_bounds']}, ok {j['ok']}")
        if "all_reduce_perf" not in j["command_line"] or not j["date"]:
            fail("json: command_line / date missing")
    except (OSError, ValueError, KeyError, TypeError) as e:
        fail(f"json: {e!r}")

    # -F: one CSV row per line, the same values.
    try:
        with open(cpath) as f:
            crow = list(csv.DictReader(f))
        if len(crow) != len(rows):
            fail(f"csv: {len(crow)} rows for {len(rows)} lines")
        for c, t in zip(crow, rows):
            if int(c["size"]) != t["size"] or c["type"] != t["type"] or \
                    not close(float(c["oop_busbw"]), t["oop"][2]) or \
                    not close(float(c["ip_time_us"]), t["ip"][0]):
                fail(f"csv row {c} does not match the line {t}")
    except (OSError, ValueError, KeyError) as e:
        fail(f"csv: {e!r}")

    # Every op, a few types; -c 0: #wrong is N/A, nothing checked, still exit 0.
    parse(run(base + ["-d", "int32", "-o", "all"]), "-o all", ops=OPS)
    parse(run(base + ["-d", "float", "-c", "0"]), "-c 0", checked=False)
    # Async submission and aggregated ops, 3 checked iterations, the mean over ranks.
    parse(run(base + ["-d", "bfloat16", "-o", "avg", "-z", "0", "-m", "2", "-c", "3", "-a", "1"]),
          "-z 0 -m 2 -c 3")

    # --osu: OSU's columns.
    osu = run(base + ["-d", "int64", "--osu"])
    hdr = re.search(r"^# Size\s+Avg Latency\(us\)\s+Min Latency\(us\)\s+Max Latency\(us\)"
                    r"\s+Iterations\s*$", osu, re.M)
    orows = [l.split() for l in data_lines(osu)]
    if not hdr or len(orows) != 5 or any(len(r) != 5 for r in orows) or \
            any(not (float(r[2]) <= float(r[1]) <= float(r[3])) for r in orows):
        fail(f"--osu layout:\n{osu}")

    if failures:
        print("\n".join(["FAILED:"] + failures))
        return 1
    print(f"nccl-tests columns OK ({len(rows)} lines with -d all, JSON and CSV match)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
