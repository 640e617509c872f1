"""One table of the probes' results (``probe.py``): per task and way of scoring, the selected
epoch, its val and test metric, the last epoch's test metric and the spread of the validation
metric over the schedule's floor (where the weights barely move).

    python benchmarks/stable_eval/summarize.py benchmarks/results/stable_eval/probe_*_seed0.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

LABELS = {
    "running": "running statistics (before)",
    "train": "recomputed on train (`train.eval_norm=train`)",
    "epoch": "epoch-cumulative statistics",
}


def label(way: str) -> str:
    if way in LABELS:
        return LABELS[way]
    horizon = way[3:].rstrip("b")
    return (f"weight average over {horizon} epochs, " +
            ("its running statistics averaged too" if way.endswith("b") else "statistics recomputed on train"))


def table(paths: list[Path]) -> str:
    lines = ["| task | seed | scoring | selected epoch | val | test | last-epoch test | floor val min..max |",
             "|---|---|---|---|---|---|---|---|"]
    for path in paths:
        d = json.loads(path.read_text())
        for way, s in d["summary"].items():
            floor = (f"{s['floor_min']:.3f}..{s['floor_max']:.3f} ({s['floor_epochs']} ep.)"
                     if s.get("floor_epochs") else "")
            lines.append(f"| {d['task']} | {d['seed']} | {label(way)} | {s['best_epoch']} | {s['val']:.3f} | "
                         f"{s['test']:.3f} | {s['last_test']:.3f} | {floor} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("probes", nargs="+", type=Path)
    args = p.parse_args(argv)
    print(table(args.probes))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
