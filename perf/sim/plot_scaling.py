#!/usr/bin/env python3
"""docs/scaling.md's figures, from prioccl_sim runs (default settings, without payload).

    perf/sim/plot_scaling.py [--sim build/perf/prioccl_sim] [--out docs/scaling] [--max-ranks 256]

Runs the simulator for each point (a few minutes in all at up to 256 ranks), prints every
point as a table row, and writes three PNGs:
  scaling_train.png    VGG-19 iteration time vs ranks (8 per host), 10 Gbit/s: wfbp, p3, lagged
  scaling_urgent.png   the urgent op's slowdown behind a 16 MiB bulk op vs ranks, priority and
                       FIFO schedules, 10, 100 and 400 Gbit/s
  scaling_named.png    a 64 KiB op's time vs ranks, unnamed against named (rank 0 negotiates),
                       100 Gbit/s, and rank 0's messages against the mean rank's
Run it from the repository root (the train workload's default profile is relative to it).
"""
import argparse
import os
import subprocess
import sys

try:
    import matplotlib
except ImportError:
    print("plot_scaling.py: SKIPPED: matplotlib missing (apt-get install python3-matplotlib)",
          file=sys.stderr)
    sys.exit(77)  # CTest's skip code (perf.sim_plot_smoke)
matplotlib.use("Agg")  # files only, never a display
import matplotlib.pyplot as plt  # noqa: E402


def run(sim, args):
    """One prioccl_sim run; returns each output line's key=value fields."""
    cmd = [sim, "--no-payload"] + args
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    rows = []
    for line in out.splitlines():
        fields = dict(f.split("=", 1) for f in line.split()[1:] if "=" in f)
        rows.append(fields)
        print(" ".join(cmd[1:]), "|", line, flush=True)
    return rows


def ranks_up_to(candidates, most):
    return [r for r in candidates if r <= most]


def ranks_axis(ax, ranks, xlabel="ranks"):
    """Rank counts on a log2 axis, labelled with the counts themselves."""
    ax.set_xscale("log", base=2)
    ax.set_xticks(ranks, [str(r) for r in ranks])
    ax.set_xlabel(xlabel)
    ax.legend()


def save(fig, out, name):
    fig.tight_layout()
    path = os.path.join(out, name)
    fig.savefig(path, dpi=110)
    print("wrote", path, flush=True)


def train_figure(sim, out, most):
    ranks = ranks_up_to([16, 64, 256, 1024], most)
    series = {}
    for mode in ("wfbp", "p3", "lagged"):
        rows = run(sim, ["--ranks", ",".join(map(str, ranks)), "--ranks-per-host", "8",
                         "--rate", "10G", "--workload", "train", "--mode", mode])
        series[mode] = [float(r["iteration_ms"]) for r in rows]
    compute = float(rows[0]["compute_ms"])
    fig, ax = plt.subplots(figsize=(6, 4))
    for mode, times in series.items():
        ax.plot(ranks, times, marker="o", label=mode)
    ax.axhline(compute, color="gray", linestyle=":", label="compute alone")
    ax.set_ylabel("iteration time, ms")
    ax.set_title("VGG-19, one iteration, 10 Gbit/s (prioccl_sim)")
    ranks_axis(ax, ranks, "ranks (8 per host)")
    save(fig, out, "scaling_train.png")


def urgent_figure(sim, out, most):
    ranks = ranks_up_to([4, 16, 64], most)
    fig, ax = plt.subplots(figsize=(6, 4))
    for rate in ("10G", "100G", "400G"):
        for schedule in ("priority", "fifo"):
            rows = run(sim, ["--ranks", ",".join(map(str, ranks)), "--rate", rate,
                             "--workload", "priority", "--bytes", "16M",
                             "--schedule", schedule])
            ax.plot(ranks, [float(r["slowdown"]) for r in rows], marker="o",
                    linestyle="-" if schedule == "priority" else "--",
                    label=f"{rate}bit/s, {schedule}")
    ax.set_yscale("log")  # priority's 1-2x and FIFO's 2-13x on one axis
    ax.set_ylabel("urgent 1 MiB op: time behind bulk / alone")
    ax.set_title("Urgent op behind a 16 MiB bulk op (prioccl_sim)")
    ranks_axis(ax, ranks)
    save(fig, out, "scaling_urgent.png")


def named_figure(sim, out, most):
    ranks = ranks_up_to([4, 16, 64, 256], most)
    common = ["--ranks", ",".join(map(str, ranks)), "--rate", "100G", "--bytes", "64K"]
    unnamed = run(sim, common)
    named = run(sim, common + ["--named"])
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 4))
    left.plot(ranks, [float(r["time_us"]) for r in unnamed], marker="o", label="unnamed")
    left.plot(ranks, [float(r["time_us"]) for r in named], marker="o", label="named")
    left.set_ylabel("64 KiB all-reduce, us")
    right.plot(ranks, [float(r["rank0_messages"]) for r in named], marker="o", label="rank 0")
    right.plot(ranks, [float(r["mean_rank_messages"]) for r in named], marker="o",
               label="mean rank")
    right.set_ylabel("messages per named op")
    for ax in (left, right):
        ranks_axis(ax, ranks)
    fig.suptitle("Named ops: rank 0's negotiation, 100 Gbit/s (prioccl_sim)")
    save(fig, out, "scaling_named.png")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sim", default="build/perf/prioccl_sim")
    p.add_argument("--out", default="docs/scaling")
    p.add_argument("--max-ranks", type=int, default=256,
                   help="largest rank count run (1024 adds about 5 minutes per point)")
    a = p.parse_args()
    if not os.access(a.sim, os.X_OK):
        sys.exit(f"plot_scaling.py: {a.sim} is not an executable (build prioccl_sim first)")
    os.makedirs(a.out, exist_ok=True)
    train_figure(a.sim, a.out, a.max_ranks)
    urgent_figure(a.sim, a.out, a.max_ranks)
    named_figure(a.sim, a.out, a.max_ranks)


if __name__ == "__main__":
    main()
