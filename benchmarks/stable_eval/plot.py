"""Validation curves of finished ``siggate train`` runs, before and after a change (issue 30,
item 4): the whole run (log scale) and its low-learning-rate tail, the learning rate beside it.

    python benchmarks/stable_eval/plot.py \\
        --run "running statistics (before)=RUN_A" --run "recomputed on train (after)=RUN_B" \\
        --title "zincmr4k, seed 0" --out benchmarks/results/stable_eval/val_curves_zincmr4k_seed0

``RUN`` is a run folder (its ``metrics.json`` and ``config.yaml``). ``--probe PROBE.json
--ways running,train,ema3`` draws ways of scoring one run from a ``probe.py`` result instead.
Writes ``OUT.png`` and ``OUT.json`` (the command, this checkout's commit, each curve's commit,
seed, config, per-epoch val/test/lr and the spread of its tail).
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


def read_probe(path: Path, ways: list[str], tail: int) -> dict:
    """The curves of ``ways`` (keys of a ``probe.py`` history row) as :func:`read_run` gives a run's."""
    d = json.loads(path.read_text())
    h = d["history"]
    out = {}
    for way in ways:
        key = "epoch_avg" if way == "epoch" else way
        vals = [r[key][0] for r in h]
        s = d["summary"][way]
        out[way] = {"probe": str(path), "git_commit": d["git_commit"], "seed": d["seed"], "dataset": d["task"],
                    "metric": d["metric"], "command": d["command"], "best_epoch": s["best_epoch"], "val": s["val"],
                    "test": s["test"], "tail": tail_stats(vals, tail), "epoch": [r["epoch"] for r in h],
                    "lr": [r["lr"] for r in h], "val_curve": vals, "test_curve": [r[key][1] for r in h]}
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--run", action="append", default=[], metavar="LABEL=FOLDER")
    p.add_argument("--probe", type=Path, help="a probe.py result: draw its --ways instead of runs")
    p.add_argument("--ways", default="running,train", help="with --probe: ways of scoring to draw")
    p.add_argument("--title", default="")
    p.add_argument("--tail", type=int, default=30, help="epochs in the right panel (30)")
    p.add_argument("--out", type=Path, required=True, help="OUT.png and OUT.json")
    args = p.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not args.run and not args.probe:
        p.error("give --run LABEL=FOLDER (repeatable) or --probe PROBE.json")
    runs = read_probe(args.probe, args.ways.split(","), args.tail) if args.probe else {}
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
