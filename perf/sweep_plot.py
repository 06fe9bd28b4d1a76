"""Plot a perf/sweep CSV: training throughput vs equivalent bandwidth, one panel per model (like
the P3 paper's figure). Imported by perf/sweep; also runnable as `sweep_plot.py CSV PNG [SUBTITLE]`
so that sweep can fall back to the system python (Debian's python3-matplotlib) when the python
running it has no matplotlib."""
import csv
import math
import statistics
import sys

try:
    import matplotlib
except ImportError:
    if __name__ != "__main__":
        raise  # perf/sweep handles it
    sys.exit("sweep_plot.py: matplotlib missing (apt-get install python3-matplotlib)")

matplotlib.use("Agg")  # files only, never a display
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter  # noqa: E402

# Fixed styles so a mode looks the same in every panel and every sweep; keyed by the mode's base name
# (delayed:2 -> delayed). Modes not listed, or a second delayed:K, take the next spare style.
STYLES = {
    "wfbp": ("tab:blue", "o"), "fused": ("tab:orange", "s"), "ddp": ("tab:green", "^"),
    "slice": ("tab:purple", "v"), "p3": ("tab:red", "*"), "lagged": ("tab:brown", "D"),
    "delayed": ("tab:pink", "P"),
}
SPARE = [("tab:olive", "X"), ("tab:cyan", "h"), ("tab:gray", "<"), ("gold", ">"), ("navy", "p"),
         ("teal", "d"), ("maroon", "8")]


NEEDED = ("model", "rate", "mode", "equiv_gbit", "ranks", "samples_per_s", "bound_samples_per_s", "compute_ms")


def num(s):
    """CSV cell -> float; empty or unparsable cells (loopback's bandwidth, no wfbp...) -> NaN."""
    try:
        return float(s)
    except (TypeError, ValueError):
        return math.nan


def samples_per_s(ms, ranks, compute_scale=1.0):
    """Batch 128 x compute-scale per rank (128: the batch the profiles were measured at) in `ms`."""
    ms, ranks, c = num(ms), num(ranks), num(compute_scale)
    c = c if c > 0 else 1.0
    return 128 * c * ranks * 1000 / ms if ms > 0 else math.nan


def med(cells):
    """Median of the finite values (NaN if none): one bad cell must not sink the whole plot."""
    vals = [v for v in map(num, cells) if math.isfinite(v)]
    return statistics.median(vals) if vals else math.nan


def read_rows(path):
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
    missing = set(NEEDED) - set(reader.fieldnames or ())
    if missing:
        raise ValueError(f"{path}: not a sweep CSV (no columns {', '.join(sorted(missing))})")
    if not rows:
        raise ValueError(f"{path}: no results in it")
    return rows


def styles_for(modes):
    out, spare = {}, iter(SPARE * 3)
    for m in modes:
        base = m.split(":")[0]
        taken = base in {b.split(":")[0] for b in out}
        out[m] = STYLES[base] if base in STYLES and not taken else next(spare)
    return out


def plot_rows(rows, png, subtitle=""):
    models = list(dict.fromkeys(r["model"] for r in rows))
    modes = list(dict.fromkeys(r["mode"] for r in rows))
    style = styles_for(modes)
    # One legend below the panels, ~1.45 inch per entry; the figure grows by its rows so that a
    # single panel keeps its plot area.
    entries = len(modes) + 2
    ncol = min(entries, max(2, int(len(models) * 5 / 1.45)))
    legend_in = 0.28 * math.ceil(entries / ncol) + 0.15
    fig, axes = plt.subplots(1, len(models), figsize=(5 * len(models), 4 + legend_in), dpi=120, squeeze=False)
    handles = {}
    for ax, model in zip(axes[0], models):
        mrows = [r for r in rows if r["model"] == model and math.isfinite(num(r["equiv_gbit"]))]
        ax.set_title(model)
        if not mrows:  # loopback only: there is no bandwidth to put on the x axis
            ax.text(0.5, 0.5, "no bandwidth points\n(loopback run)", ha="center", va="center",
                    transform=ax.transAxes, color="gray")
            ax.set_xticks([]), ax.set_yticks([])
            continue
        xs = sorted({num(r["equiv_gbit"]) for r in mrows})
        for mode in modes:
            pts = sorted((num(r["equiv_gbit"]), num(r["samples_per_s"])) for r in mrows if r["mode"] == mode)
            if not pts:
                continue
            color, marker = style[mode]
            big = mode == "p3"  # the paper's subject: drawn on top and heavier
            (h,) = ax.plot(*zip(*pts), color=color, marker=marker, label=mode, lw=2.6 if big else 1.4,
                           ms=11 if big else 6, zorder=5 if big else 3)
            handles.setdefault(mode, h)
        # Every mode of one run shares the model's bound; take the median in case comm_ms was
        # measured per mode and differs slightly.
        bound = [med(r["bound_samples_per_s"] for r in mrows if num(r["equiv_gbit"]) == x) for x in xs]
        (h,) = ax.plot(xs, bound, "k--", lw=1.2, label="bound (max(compute, comm))", zorder=2)
        handles.setdefault(h.get_label(), h)
        compute = med(samples_per_s(r["compute_ms"], r["ranks"], r.get("compute_scale", 1)) for r in mrows)
        if math.isfinite(compute):
            h = ax.axhline(compute, color="gray", ls=":", lw=1.5, label="compute only", zorder=1)
            handles.setdefault(h.get_label(), h)
        ax.set_xscale("log")
        # Ticks at the measured bandwidths, in plain numbers (log axes would say 10^0).
        ax.xaxis.set_major_locator(FixedLocator(xs))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlim(xs[0] / 1.3, xs[-1] * 1.3)
        top = [v for v in [compute, *bound, *(num(r["samples_per_s"]) for r in mrows)] if math.isfinite(v)]
        ax.set_ylim(bottom=0, top=max(top, default=1) * 1.1)
        ax.set_xlabel("equivalent bandwidth (Gbit/s)")
        ax.grid(True, which="major", alpha=0.3)
    axes[0][0].set_ylabel("training throughput (samples/s)")
    ranks = sorted({r["ranks"] for r in rows})
    fig.suptitle(f"{'/'.join(ranks)} ranks" + (f", {subtitle}" if subtitle else ""))
    if handles:
        fig.legend(handles.values(), handles.keys(), loc="lower center", ncol=ncol, frameon=False)
    fig.tight_layout(rect=(0, legend_in / (4 + legend_in), 1, 0.95))
    fig.savefig(png)
    plt.close(fig)


def plot_csv(csv_path, png, subtitle=""):
    plot_rows(read_rows(csv_path), png, subtitle)


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        sys.exit("usage: sweep_plot.py SWEEP_CSV OUT_PNG [SUBTITLE]")
    try:
        plot_csv(*sys.argv[1:])
    except (OSError, ValueError) as e:
        sys.exit(f"sweep_plot.py: {e}")
