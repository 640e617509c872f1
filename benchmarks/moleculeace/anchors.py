"""Published per-target MoleculeACE results, read from a checkout of JacksonBurns/chemeleon.

The CheMeleon paper's repository keeps one markdown file per model under
``analysis/moleculeace_results/`` (5 seeds: 42, 117, 709, 1701, 9001; per seed and target the
overall, non-cliff and cliff test RMSE). This script averages the seeds per target and writes
``anchors.json`` next to it, with the source repository, commit and file of every model, so the
table can quote the published numbers offline and say where they come from:

    git clone https://github.com/JacksonBurns/chemeleon /tmp/chemeleon
    python benchmarks/moleculeace/anchors.py /tmp/chemeleon            # -> anchors.json

Nothing here is our measurement; ``run.py`` puts these rows beside ours as ``anchors``.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ANCHORS = HERE / "anchors.json"
REPO = "JacksonBurns/chemeleon"
RESULTS_DIR = "analysis/moleculeace_results"
#: tool name in our table -> the file of the published results
MODELS = {"chemeleon": "CheMeleon.md", "rf_morgan": "RF_Morgan.md", "minimol": "minimol.md", "chemprop": "Chemprop.md"}
METRIC_KEYS = {"overall test rmse": "rmse", "cliff test rmse": "rmse_cliff", "noncliff test rmse": "rmse_noncliff"}


def parse_results(text: str) -> dict[int, dict[str, dict[str, float]]]:
    """``{seed: {target: {"rmse", "rmse_cliff", "rmse_noncliff"}}}`` from one results file."""
    out: dict[int, dict[str, dict[str, float]]] = {}
    seed = target = None
    for line in text.splitlines():
        if m := re.match(r"^## Random Seed (\d+)", line):
            seed, target = int(m.group(1)), None
            out[seed] = {}
        elif m := re.match(r"^### `(CHEMBL\w+)`", line):
            target = m.group(1)
        elif seed is not None and target is not None and (m := re.match(r"^\|\s*([a-z -]+?)\s*\|\s*([-0-9.eE]+)\s*\|", line)):
            key = METRIC_KEYS.get(m.group(1))
            if key:
                out[seed].setdefault(target, {})[key] = float(m.group(2))
    return out


def per_target_means(parsed: dict[int, dict[str, dict[str, float]]]) -> dict[str, dict]:
    """Mean over the seeds per target and metric, with the seeds that had the target."""
    targets = sorted({t for by_target in parsed.values() for t in by_target})
    means = {}
    for t in targets:
        seeds = [s for s in parsed if t in parsed[s]]
        means[t] = {k: statistics.mean(parsed[s][t][k] for s in seeds) for k in METRIC_KEYS.values()}
        means[t]["seeds"] = seeds
    return means


def build(checkout: Path) -> dict:
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(checkout), *args], check=True, capture_output=True, text=True).stdout

    commit = git("rev-parse", "HEAD").strip()
    tools = {}
    for tool, fname in MODELS.items():
        parsed = parse_results(git("show", f"HEAD:{RESULTS_DIR}/{fname}"))
        tools[tool] = {"file": f"{RESULTS_DIR}/{fname}", "per_target": per_target_means(parsed)}
    return {"source": {"repository": REPO, "commit": commit, "seeds": sorted({s for v in tools.values()
                                                                              for t in v["per_target"].values()
                                                                              for s in t["seeds"]})},
            "note": "published results, mean over 5 seeds per target; RF on Morgan: 100 trees, radius 2, 2,048 bits, "
                    "standardised target, trained on the whole train split",
            "tools": tools}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("checkout", type=Path, help="a git checkout (or bare repository) of JacksonBurns/chemeleon")
    p.add_argument("--out", type=Path, default=ANCHORS)
    args = p.parse_args(argv)
    anchors = build(args.checkout)
    args.out.write_text(json.dumps(anchors, indent=1, sort_keys=True) + "\n")
    for tool, v in anchors["tools"].items():
        print(f"{tool}: {len(v['per_target'])} targets, mean RMSE "
              f"{statistics.mean(t['rmse'] for t in v['per_target'].values()):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
