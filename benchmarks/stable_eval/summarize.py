"""Tables of the stable-evaluation results: the probes (``probe.py``: per task and way of
scoring, the selected epoch, its val and test metric, the last epoch's test metric and the
spread of the validation metric over the schedule's floor, where the weights barely move) and,
with ``--peers``, the peer benchmark's runs before and after (``benchmarks/peers/run.py
--results``: per task and seed, the test metric scored from ``siggate predict``, the selected
epoch and the CPU time).

    python benchmarks/stable_eval/summarize.py benchmarks/results/stable_eval/probe_*_seed0.json \
        --peers benchmarks/results/stable_eval/peers.json
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


def peers_table(path: Path) -> str:
    """Before/after per task and seed from a peer-benchmark results JSON: the rows whose variant
    is ``--set train.eval_norm=running`` are the old scoring, the recipe's default the new."""
    runs = [r for r in json.loads(path.read_text())["runs"] if r.get("status") == "ok" and r["tool"] == "siggate"]
    lines = ["| task | metric | seed | running statistics (before) | recomputed on train (after, default) | "
             "selected epoch before / after | CPU s before / after | commit |", "|---|---|---|---|---|---|---|---|"]
    by = {(r["task"], r["seed"], r.get("variant", "")): r for r in runs}
    for task, seed in sorted({(r["task"], r["seed"]) for r in runs}, key=lambda k: (TASK_ORDER.index(k[0]), k[1])):
        a, b = by.get((task, seed, "--set train.eval_norm=running")), by.get((task, seed, ""))
        if not (a and b):
            continue
        lines.append(f"| {task} | {a['metric']} | {seed} | {a['value']:.3f} | {b['value']:.3f} | "
                     f"{a['best_epoch']} / {b['best_epoch']} | {a['cpu_s']:.0f} / {b['cpu_s']:.0f} | "
                     f"`{(a.get('git_commit') or '?')[:7]}`, `{(b.get('git_commit') or '?')[:7]}` |")
    return "\n".join(lines)


TASK_ORDER = ["nci5k", "zinc2k", "molhiv4k", "zincmr4k", "freesolv", "solubility"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("probes", nargs="*", type=Path)
    p.add_argument("--peers", type=Path, help="a peer-benchmark results JSON with both variants")
    args = p.parse_args(argv)
    if args.probes:
        print(table(args.probes))
    if args.peers:
        print(peers_table(args.peers))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
