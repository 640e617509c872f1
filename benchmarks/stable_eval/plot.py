"""Validation curves of finished ``siggate train`` runs, before and after a change (issue 30,
item 4): the whole run (log scale) and its low-learning-rate tail, the learning rate beside it.

    python benchmarks/stable_eval/plot.py \\
        --run "running statistics (before)=RUN_A" --run "recomputed on train (after)=RUN_B" \\
        --title "zincmr4k, seed 0" --out benchmarks/results/stable_eval/val_curves_zincmr4k_seed0

``RUN`` is a run folder (its ``metrics.json`` and ``config.yaml``). Writes ``OUT.png`` and
``OUT.json`` (the command, this checkout's commit, each run's commit, seed, command-line
config, per-epoch val/test/lr and the spread of its tail).
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def tail_stats(vals: list[float], n: int) -> dict:
    """Spread of the last ``n`` values: range and mean absolute step between epochs."""
    tail = vals[-n:]
    return {"epochs": len(tail), "min": min(tail), "max": max(tail), "range": max(tail) - min(tail),
            "mean_abs_step": sum(abs(a - b) for a, b in zip(tail, tail[1:])) / max(len(tail) - 1, 1)}


def read_run(folder: Path, tail: int) -> dict:
    m = json.loads((folder / "metrics.json").read_text())
    cfg = yaml.safe_load((folder / "config.yaml").read_text())
    h = m["history"]
    vals = [r["val"] for r in h]
    return {"folder": str(folder), "git_commit": cfg.get("_meta", {}).get("git_commit"), "seed": m["seed"],
            "dataset": m["dataset"], "metric": m["metric"], "train": cfg["train"],
            "best_epoch": m["best_epoch"], "val": m["val"], "test": m["test"],
            "tail": tail_stats(vals, tail), "epoch": [r["epoch"] for r in h], "lr": [r["lr"] for r in h],
            "val_curve": vals, "test_curve": [r["test"] for r in h], "train_loss": [r["train_loss"] for r in h]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--run", action="append", required=True, metavar="LABEL=FOLDER")
    p.add_argument("--title", default="")
    p.add_argument("--tail", type=int, default=30, help="epochs in the right panel (30)")
    p.add_argument("--out", type=Path, required=True, help="OUT.png and OUT.json")
    args = p.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = {}
    for item in args.run:
        label, _, folder = item.partition("=")
        runs[label] = read_run(Path(folder).expanduser(), args.tail)
    fig, (ax_all, ax_tail) = plt.subplots(1, 2, figsize=(12, 4.5))
    for label, r in runs.items():
        line, = ax_all.plot(r["epoch"], r["val_curve"], lw=1, label=label)
        ax_all.plot([r["best_epoch"]], [r["val"]], "o", color=line.get_color())
        ax_tail.plot(r["epoch"][-args.tail:], r["val_curve"][-args.tail:], lw=1.5, marker=".", label=label,
                     color=line.get_color())
        ax_tail.plot([r["best_epoch"]], [r["val"]], "o", ms=9, mfc="none", color=line.get_color())
    metric = next(iter(runs.values()))["metric"]
    ax_all.set_yscale("log")
    ax_all.set_xlabel("epoch")
    ax_all.set_ylabel(f"validation {metric}")
    ax_all.set_title("whole run (o: the selected epoch)")
    ax_all.legend(fontsize=8)
    ax_tail.set_xlabel("epoch")
    ax_tail.set_ylabel(f"validation {metric}")
    ax_tail.set_title(f"last {args.tail} epochs")
    lr = ax_tail.twinx()
    first = next(iter(runs.values()))
    lr.plot(first["epoch"][-args.tail:], first["lr"][-args.tail:], color="grey", ls="--", lw=1)
    lr.set_yscale("log")
    lr.set_ylabel("learning rate (dashed)", color="grey")
    fig.suptitle(args.title)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out.with_suffix(".png"), dpi=120)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    record = {"what": "validation curves of siggate train runs (benchmarks/stable_eval/plot.py)",
              "command": " ".join(["python", "benchmarks/stable_eval/plot.py", *map(shlex.quote, argv or sys.argv[1:])]),
              "git_commit": commit, "runs": runs}
    args.out.with_suffix(".json").write_text(json.dumps(record, indent=1))
    for label, r in runs.items():
        print(f"{label}: best epoch {r['best_epoch']} val {r['val']:.4f} test {r['test']:.4f}; last {args.tail} "
              f"epochs: val {r['tail']['min']:.4f}..{r['tail']['max']:.4f}, mean step {r['tail']['mean_abs_step']:.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
