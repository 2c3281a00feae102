"""The figures of the tuning and batch benches, drawn from their JSON documents:
``python -m specdec_lib bench plots --tuning T.json --batches B.json --out DIR``.

Notebook 06 calls the same functions on the shipped JSON files, so the figures in the course and the ones the
bench renders are the same code. Each function draws on the matplotlib axes it is given (or new ones) and
returns them; matplotlib is imported only here (it is a course extra, not a library dependency).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path


def _axes(ax):
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=(6, 3.6))
    return ax


def sweep_series(document: dict, task: str, drafter: str) -> dict[str, list]:
    """One drafter's gamma sweep on one task: gammas and the measured and predicted speed-ups (None: no value)."""
    rows = [row for row in document["tasks"][task]["rows"] if row["method"] == drafter]
    rows.sort(key=lambda row: row["gamma"])
    return {key: [row[source] for row in rows] for key, source in (
        ("gamma", "gamma"), ("measured", "speedup"), ("predicted", "predicted_speedup"),
        ("predicted_with_verify", "predicted_with_verify"))}


def plot_gamma_sweep(document: dict, task: str, drafters: Sequence[str] | None = None, ax=None):
    """Measured speed-up against gamma per drafter (solid), with Leviathan's prediction (dotted) and the prediction
    with the measured verify cost (dashed); the best measured gamma of each drafter is circled, the best gamma of
    the priced prediction marked by a triangle on the x axis."""
    ax = _axes(ax)
    drafters = drafters or document["settings"]["drafters"]
    for index, drafter in enumerate(drafters):
        series = sweep_series(document, task, drafter)
        colour = f"C{index}"
        ax.plot(series["gamma"], series["measured"], "o-", color=colour, label=f"{drafter}: measured")
        for key, style in (("predicted", ":"), ("predicted_with_verify", "--")):
            points = [(g, y) for g, y in zip(series["gamma"], series[key]) if y is not None]
            if points:
                ax.plot(*zip(*points), style, color=colour, alpha=0.8)
        best = document["tasks"][task]["best"].get(drafter, {})
        if best.get("found") is not None:
            ax.plot([best["found"]], [series["measured"][series["gamma"].index(best["found"])]], "o", markersize=13,
                    mfc="none", color=colour)
        if best.get("predicted_with_verify") is not None:  # where the priced prediction puts the best gamma
            ax.plot([best["predicted_with_verify"]], [0.03 + 0.04 * index], "^", markersize=8, color=colour,
                    transform=ax.get_xaxis_transform())  # x in gamma, y in axes fractions: a row above the axis
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set(xlabel="gamma (draft tokens per round)", ylabel="speed-up over the target alone",
           title=f"{task}: measured (solid), Leviathan (dotted), with verify cost (dashed)")
    ax.set_xticks(sorted({g for d in drafters for g in sweep_series(document, task, d)["gamma"]}))
    ax.legend(fontsize=7)
    return ax


FIXED_LABEL = "draft-model, best fixed gamma"


def adaptive_bars(document: dict, task: str) -> dict[str, float]:
    """Speed-ups on one task: the draft model's best fixed gamma, and every adaptive row (name -> speed-up)."""
    result = document["tasks"][task]
    best = result["best"].get("draft-model")
    bars = {} if best is None else {FIXED_LABEL: best["found_speedup"]}
    bars.update({row["method"]: row["speedup"] for row in result["rows"] if "+" in row["method"]})
    return bars


def plot_adaptive(document: dict, ax=None):
    """Grouped bars: per task, the best fixed gamma against each adaptive schedule."""
    ax = _axes(ax)
    tasks = list(document["tasks"])
    per_task = [adaptive_bars(document, task) for task in tasks]
    names = list(dict.fromkeys(name for bars in per_task for name in bars))
    width = 0.8 / max(len(names), 1)
    for index, name in enumerate(names):
        values = [bars.get(name) or 0.0 for bars in per_task]
        ax.bar([t + index * width for t in range(len(tasks))], values, width, label=name, color=f"C{index}")
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xticks([t + width * (len(names) - 1) / 2 for t in range(len(tasks))], tasks)
    ax.set(ylabel="speed-up", title="best fixed gamma against adaptive draft length (capped at the largest gamma)")
    ax.legend(fontsize=7)
    return ax


def plot_batches(document: dict, ax=None, key: str = "speedup"):
    """Per speculative method, ``key`` (default the speed-up over plain batched decoding) against batch size."""
    ax = _axes(ax)
    methods = list(dict.fromkeys(row["method"] for row in document["rows"]))
    for index, method in enumerate(methods):
        rows = sorted((r for r in document["rows"] if r["method"] == method), key=lambda r: r["batch"])
        values = [r[key] if key in r else r["latency"][key] for r in rows]
        ax.plot([r["batch"] for r in rows], values, "o-", color=f"C{index}", label=method)
    if key == "speedup":
        ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xscale("log", base=2)
    sizes = sorted({r["batch"] for r in document["rows"]})
    ax.set_xticks(sizes, [str(size) for size in sizes])
    ax.set(xlabel="batch size", ylabel=key.replace("_", " "), title=f"{key.replace('_', ' ')} against batch size")
    ax.legend(fontsize=7)
    return ax


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specdec_lib bench plots", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tuning", type=Path, default=None, metavar="JSON", help="from `bench tuning --json`")
    parser.add_argument("--batches", type=Path, default=None, metavar="JSON", help="from `bench batches --json`")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR", help="folder for the PNG files")
    args = parser.parse_args(argv)
    if args.tuning is None and args.batches is None:
        parser.error("give at least one of --tuning, --batches")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    args.out.mkdir(parents=True, exist_ok=True)
    written = []
    if args.tuning is not None:
        document = json.loads(args.tuning.read_text(encoding="utf-8"))
        for task in document["tasks"]:
            written.append(_save(plt, plot_gamma_sweep(document, task), args.out / f"gamma-sweep-{task}.png"))
        if document["settings"].get("adaptive"):
            written.append(_save(plt, plot_adaptive(document), args.out / "adaptive.png"))
    if args.batches is not None:
        document = json.loads(args.batches.read_text(encoding="utf-8"))
        written.append(_save(plt, plot_batches(document), args.out / "batches-speedup.png"))
        written.append(_save(plt, plot_batches(document, key="itl_p95_s"), args.out / "batches-itl-p95.png"))
    print("wrote " + ", ".join(str(path) for path in written))
    return 0


def _save(plt, ax, path: Path) -> Path:
    ax.figure.tight_layout()
    ax.figure.savefig(path, dpi=100)
    plt.close(ax.figure)
    return path


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
