#!/usr/bin/env python3
"""Summarises perf/real_training/sweep.sh's results.txt: per model and link rate, the median over
runs of each variant's median step time, its throughput relative to DDP over gloo in the same
sitting, and the physical bound

    bound = max(compute alone, 2 (p - 1) / p x gradient bytes / link rate)

(ring all-reduce's bytes on each host's link, at the link's full rate, fully overlapped with
compute). Writes a Markdown table and, when matplotlib is there, a PNG (throughput vs link rate,
one line per variant, the bound dashed).

    report.py results.txt [--hosts 4] [--md table.md] [--png sweep.png]
"""
import argparse
import collections
import re
import statistics
import sys

ORDER = ("compute", "gloo", "sync", "p3", "lagged", "ddp_prioccl")


def rate_bps(rate):
    m = re.fullmatch(r"([0-9.]+)([kmg]?)bit", rate.lower())
    if not m:
        raise ValueError(f"link rate {rate!r} (expected e.g. 300mbit, 1gbit)")
    return float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)]


def parse(path):
    runs = []
    for line in open(path):
        if not line.startswith("REAL_TRAINING "):
            continue
        fields = dict(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv)
        tag = dict(kv.split("=", 1) for kv in fields.pop("tag", "").split(",") if "=" in kv)
        fields.update(tag)
        runs.append(fields)
    return runs


def summarise(runs, hosts):
    """{(model, rate): {variant: dict(ms=median, runs=[...], weights=set, failed=n)}}"""
    cells = collections.defaultdict(lambda: collections.defaultdict(
        lambda: {"ms": [], "cpu": [], "weights": set(), "failed": 0, "grad": 0, "batch": 0}))
    for r in runs:
        c = cells[(r["model"], r["rate"])][r["variant"]]
        if r.get("failed"):
            c["failed"] += 1
            continue
        c["ms"].append(float(r["median_ms"]))
        if "cpu_ms" in r:  # results before 2026-11-28's second sweep lack it
            c["cpu"].append(float(r["cpu_ms"]))
        c["weights"].add(r["weights"])
        c["grad"] = int(r["grad_bytes"])
        c["batch"] = int(r["batch"]) * int(r["ranks"])
    table = {}
    for key, variants in cells.items():
        model, rate = key
        row = {}
        for v, c in variants.items():
            row[v] = dict(c, median=statistics.median(c["ms"]) if c["ms"] else None)
        grad = max(c["grad"] for c in row.values())
        comm = 2 * (hosts - 1) / hosts * grad * 8 / rate_bps(rate) * 1e3
        compute = row.get("compute", {}).get("median")
        row["_bound"] = max(compute or 0, comm)
        row["_comm"] = comm
        table[key] = row
    return table


def markdown(table):
    present = [v for v in ORDER if any(v in row for row in table.values())]
    head = ["model", "link", "bound ms"] + [f"{v} ms" for v in present]
    head += ["best prioccl / gloo", "p3 / gloo", "p3 / sync", "best / bound",
             "CPU ms per step: gloo, p3", "same weights over runs"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (model, rate), row in sorted(table.items(), key=lambda kv: (kv[0][0], rate_bps(kv[0][1]))):
        gloo = row.get("gloo", {}).get("median")
        cells = [model, rate, f"{row['_bound']:.0f}"]
        for v in present:
            c = row.get(v)
            if not c or c["median"] is None:
                cells.append("failed" if c and c["failed"] else "")
                continue
            spread = f" ({min(c['ms']):.0f}-{max(c['ms']):.0f})" if len(c["ms"]) > 1 else ""
            cells.append(f"{c['median']:.0f}{spread}" + (f", {c['failed']} failed" if c["failed"] else ""))
        ours = {v: row[v]["median"] for v in ("sync", "p3", "lagged", "ddp_prioccl")
                if v in row and row[v]["median"]}
        best = min(ours.values()) if ours else None
        cells.append(f"{gloo / best:.2f}x" if gloo and best else "")
        p3 = ours.get("p3")
        cells.append(f"{gloo / p3:.2f}x" if gloo and p3 else "")
        sync = ours.get("sync")
        cells.append(f"{sync / p3:.2f}x" if sync and p3 else "")
        cells.append(f"{best / row['_bound']:.2f}" if best else "")
        cpu = [statistics.median(row[v]["cpu"]) if v in row and row[v]["cpu"] else None
               for v in ("gloo", "p3")]
        cells.append(", ".join(f"{c:.0f}" if c else "-" for c in cpu))
        same = [v for v in present if v != "compute" and v in row and len(row[v]["ms"]) > 1
                and len(row[v]["weights"]) == 1]
        differ = [v for v in present if v != "compute" and v in row and len(row[v]["weights"]) > 1]
        cells.append(("differ: " + ", ".join(differ)) if differ else ("all" if same else ""))
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("Medians of each run's median step time (range over runs in brackets); x = "
                 "throughput relative to DDP over gloo measured in the same sitting; bound = "
                 "max(compute alone, 2(p-1)/p x gradient bytes / link rate); CPU = rank 0's "
                 "CPU time per step, every thread (median over runs).")
    return "\n".join(lines) + "\n"


def plot(table, path):
    try:
        import matplotlib
    except ImportError:
        print("report.py: matplotlib missing, no PNG", file=sys.stderr)
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    models = sorted({m for m, _ in table})
    fig, axes = plt.subplots(1, len(models), figsize=(4.5 * len(models), 4), squeeze=False)
    for ax, model in zip(axes[0], models):
        rows = sorted(((rate_bps(r), row) for (m, r), row in table.items() if m == model),
                      key=lambda x: x[0])
        xs = [x / 1e6 for x, _ in rows]
        for v in ORDER:
            if v == "compute":
                continue
            pts = [(x / 1e6, row[v]["batch"] / row[v]["median"] * 1e3) for x, row in rows
                   if v in row and row[v]["median"]]
            if pts:
                ax.plot(*zip(*pts), marker="o", label=v)
        batch = max((c["batch"] for _, row in rows for k, c in row.items()
                     if not k.startswith("_")), default=0)
        ax.plot(xs, [batch / row["_bound"] * 1e3 for _, row in rows], "k--", label="bound")
        ax.set_xscale("log")
        ax.set_xlabel("link rate (Mbit/s)")
        ax.set_ylabel("samples/s (all ranks)")
        ax.set_title(model)
        ax.grid(True, alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results")
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--md")
    ap.add_argument("--png")
    args = ap.parse_args()
    table = summarise(parse(args.results), args.hosts)
    if not table:
        sys.exit(f"report.py: no REAL_TRAINING lines in {args.results}")
    md = markdown(table)
    print(md, end="")
    if args.md:
        open(args.md, "w").write(md)
    if args.png:
        plot(table, args.png)


if __name__ == "__main__":
    main()
