"""Tables of the stable-evaluation results: the probes (``probe.py``: per task and way of
scoring, the selected epoch, its val and test metric, the last epoch's test metric and the
spread of the validation metric over the schedule's floor, where the weights barely move) and,
with ``--peers``, the peer benchmark's runs before and after (``benchmarks/peers/run.py
--results``: per task and seed, the test metric scored from ``siggate predict``, the selected
epoch and the CPU time).

    python benchmarks/stable_eval/summarize.py benchmarks/results/stable_eval/probe_*_seed0.json \
        --peers benchmarks/results/stable_eval/peers.json

The peer rows pair a run whose variant is ``--set train.eval_norm=running`` (before) with the
default run of the same task and seed (after); with ``--before RECIPE --after RECIPE`` they pair
two named recipes of the peers' recipe file instead (the recipe that ships, with and without the
flag: ``--peers benchmarks/peers/results/recipe.json --before cand-avgc-running --after cand-avgc``).
"""

from __future__ import annotations

import argparse
import json
import sys
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


def read_probes(paths: list[Path]) -> list[dict]:
    """The ``probe.py`` results among ``paths`` (a glob also matches ``plot.py``'s
    ``probe_curves_*.json``, which holds curves, not a probe: skipped with a note)."""
    probes = []
    for path in paths:
        d = json.loads(path.read_text())
        if "summary" not in d or "task" not in d:
            print(f"summarize.py: {path} is not a probe.py result (no summary): skipped", file=sys.stderr)
            continue
        probes.append(d)
    return probes


def table(probes: list[dict]) -> str:
    lines = ["| task | seed | scoring | selected epoch | val | test | last-epoch test | floor val min..max |",
             "|---|---|---|---|---|---|---|---|"]
    for d in probes:
        for way, s in d["summary"].items():
            floor = (f"{s['floor_min']:.3f}..{s['floor_max']:.3f} ({s['floor_epochs']} ep.)"
                     if s.get("floor_epochs") else "")
            lines.append(f"| {d['task']} | {d['seed']} | {label(way)} | {s['best_epoch']} | {s['val']:.3f} | "
                         f"{s['test']:.3f} | {s['last_test']:.3f} | {floor} |")
    return "\n".join(lines)


def compare_table(probes: list[dict]) -> str:
    """Per task, each way's test metric at its selected epoch, seed by seed and averaged over
    the seeds every way has, beside the width of its validation floor (max - min over the
    schedule's floor epochs, averaged over those seeds)."""
    ways = list(dict.fromkeys(w for d in probes for w in d["summary"]))
    lines = [", ".join(f"`{w}`: {label(w)}" for w in ways) + ".", "",
             "| task | metric | seeds | " + " | ".join(f"`{w}`" for w in ways) + " |",
             "|---|---|---|" + "---|" * len(ways)]
    tasks = sorted({d["task"] for d in probes}, key=lambda t: (TASK_ORDER.index(t) if t in TASK_ORDER else 99, t))
    for task in tasks:
        runs = sorted((d for d in probes if d["task"] == task), key=lambda d: d["seed"])
        cells = []
        for way in ways:
            have = [d for d in runs if way in d["summary"]]
            tests = [d["summary"][way]["test"] for d in have]
            widths = [d["summary"][way]["floor_max"] - d["summary"][way]["floor_min"] for d in have
                      if d["summary"][way].get("floor_epochs")]
            per_seed = ", ".join(f"{t:.3f}" for t in tests)
            cells.append(f"{sum(tests) / len(tests):.3f} ({per_seed}); floor {sum(widths) / len(widths):.3f}"
                         if tests and widths else "")
        seeds = ",".join(str(d["seed"]) for d in runs)
        lines.append(f"| {task} | {runs[0]['metric']} | {seeds} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


RUNNING = "--set train.eval_norm=running"


def peers_table(path: Path, before: str | None = None, after: str | None = None) -> str:
    """Before/after per task and seed from a peer-benchmark results JSON: by default the rows whose
    variant is :data:`RUNNING` are the old scoring and the default rows the new; with ``before``
    and ``after``, the rows of those two recipes. A run of several members has no selected epoch
    of its own ("–")."""
    runs = [r for r in json.loads(path.read_text())["runs"] if r.get("status") == "ok" and r["tool"] == "siggate"]
    if before or after:
        if not (before and after):
            raise SystemExit("summarize.py: --before and --after name two recipes; give both")
        side = lambda r: {before: "before", after: "after"}.get(r.get("recipe"))  # noqa: E731
    else:
        side = lambda r: {RUNNING: "before", "": "after", None: "after"}.get(r.get("variant"))  # noqa: E731
    lines = ["| task | metric | seed | running statistics (before) | recomputed on train (after, default) | "
             "selected epoch before / after | CPU s before / after | commit |", "|---|---|---|---|---|---|---|---|"]
    by = {(r["task"], r["seed"], side(r)): r for r in runs if side(r)}
    epoch = lambda r: "–" if r.get("best_epoch") is None else str(r["best_epoch"])  # noqa: E731
    for task, seed in sorted({(t, s) for t, s, _ in by}, key=lambda k: (TASK_ORDER.index(k[0]), k[1])):
        a, b = by.get((task, seed, "before")), by.get((task, seed, "after"))
        if not (a and b):
            continue
        lines.append(f"| {task} | {a['metric']} | {seed} | {a['value']:.3f} | {b['value']:.3f} | "
                     f"{epoch(a)} / {epoch(b)} | {a['cpu_s']:.0f} / {b['cpu_s']:.0f} | "
                     f"`{(a.get('git_commit') or '?')[:7]}`, `{(b.get('git_commit') or '?')[:7]}` |")
    return "\n".join(lines)


TASK_ORDER = ["nci5k", "zinc2k", "molhiv4k", "zincmr4k", "freesolv", "solubility"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("probes", nargs="*", type=Path)
    p.add_argument("--peers", type=Path, help="a peer-benchmark results JSON with both variants")
    p.add_argument("--before", default=None, metavar="RECIPE", help="with --peers: the recipe of the before rows")
    p.add_argument("--after", default=None, metavar="RECIPE", help="with --peers: the recipe of the after rows")
    args = p.parse_args(argv)
    probes = read_probes(args.probes)
    if probes:
        print(table(probes))
        print()
        print(compare_table(probes))
    if args.peers:
        print(peers_table(args.peers, args.before, args.after))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
