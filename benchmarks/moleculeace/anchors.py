"""Published per-target MoleculeACE results, read from git checkouts of the papers' repositories.

Each source is read at its checkout's ``HEAD`` and recorded with its repository, commit and
path, so the table can quote the published numbers offline and say where they come from:

* ``--chemeleon``: JacksonBurns/chemeleon keeps one markdown file per model under
  ``analysis/moleculeace_results/`` (5 seeds: 42, 117, 709, 1701, 9001; per seed and target the
  overall, non-cliff and cliff test RMSE): CheMeleon, RF on Morgan, minimol, chemprop. The
  seeds are averaged per target.
* ``--moleculeace``: molML/MoleculeACE's ``MoleculeACE/Data/results/MoleculeACE_results.csv``
  (the current data version; ``_old.csv`` is the earlier one): one row per target, algorithm
  and descriptor with the test and cliff RMSE of one run (the classical models are
  deterministic). We take ``SVM`` on ``ECFP``.
* ``--acanet``: shenwanxiang/ACANet's
  ``experiment/03_HSSMS_performance/benchmark_performance/{mae,mse}_aca_opt_cliff/<target>/results.json``:
  per target the test and cliff RMSE of one run whose test prediction is the mean of 5
  cross-validation models; ``mae`` is ACANet's default loss (``acanet``), ``mse`` its squared
  variant (``acanet_mse``).

::

    git clone https://github.com/JacksonBurns/chemeleon /tmp/chemeleon
    git clone https://github.com/molML/MoleculeACE /tmp/MoleculeACE
    git clone https://github.com/shenwanxiang/ACANet /tmp/ACANet
    python benchmarks/moleculeace/anchors.py --chemeleon /tmp/chemeleon --moleculeace /tmp/MoleculeACE \\
        --acanet /tmp/ACANet                                               # -> anchors.json

A source left out keeps its tools as ``anchors.json`` has them. Nothing here is our
measurement; ``run.py`` puts these rows beside ours as ``anchors``.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ANCHORS = HERE / "anchors.json"
METRICS = ("rmse", "rmse_cliff", "rmse_noncliff")

CHEMELEON = "JacksonBurns/chemeleon"
RESULTS_DIR = "analysis/moleculeace_results"
#: tool name in our table -> the file of the published results
MODELS = {"chemeleon": "CheMeleon.md", "rf_morgan": "RF_Morgan.md", "minimol": "minimol.md", "chemprop": "Chemprop.md"}
METRIC_KEYS = {"overall test rmse": "rmse", "cliff test rmse": "rmse_cliff", "noncliff test rmse": "rmse_noncliff"}

MOLECULEACE = "molML/MoleculeACE"
MOLECULEACE_CSV = "MoleculeACE/Data/results/MoleculeACE_results.csv"
#: tool name in our table -> (algorithm, descriptor) in MoleculeACE's results
MOLECULEACE_MODELS = {"svm_ecfp": ("SVM", "ECFP")}

ACANET = "shenwanxiang/ACANet"
ACANET_DIR = "experiment/03_HSSMS_performance/benchmark_performance"
#: tool name in our table -> the folder of its per-target results.json
ACANET_MODELS = {"acanet": "mae_aca_opt_cliff", "acanet_mse": "mse_aca_opt_cliff"}


def parse_results(text: str) -> dict[int, dict[str, dict[str, float]]]:
    """``{seed: {target: {"rmse", "rmse_cliff", "rmse_noncliff"}}}`` from one chemeleon results file."""
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


def parse_moleculeace_csv(text: str, algorithm: str, descriptor: str) -> dict[str, dict]:
    """``{target: {"rmse", "rmse_cliff", "rmse_noncliff": None}}`` of one algorithm and
    descriptor in MoleculeACE's results CSV (it has no non-cliff RMSE); a target listed twice
    is an error."""
    out: dict[str, dict] = {}
    for row in csv.DictReader(io.StringIO(text), skipinitialspace=True):
        if row["algorithm"].strip() != algorithm or row["descriptor"].strip() != descriptor:
            continue
        target = row["dataset"].strip()
        if target in out:
            raise ValueError(f"{target} has two {algorithm}_{descriptor} rows")
        out[target] = {"rmse": float(row["rmse"]), "rmse_cliff": float(row["cliff_rmse"]), "rmse_noncliff": None}
    return out


def parse_acanet(files: dict[str, str]) -> dict[str, dict]:
    """``{target: {"rmse", "rmse_cliff", "rmse_noncliff": None}}`` from ACANet's per-target
    ``results.json`` texts (``{path: text}``; each names its ``dataset``, which must be its folder)."""
    out: dict[str, dict] = {}
    for path, text in files.items():
        r = json.loads(text)
        if r["dataset"] != Path(path).parent.name:
            raise ValueError(f"{path} holds the results of {r['dataset']}")
        out[r["dataset"]] = {"rmse": float(r["rmse"]), "rmse_cliff": float(r["cliff_rmse"]), "rmse_noncliff": None}
    return out


def _git(checkout: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(checkout), *args], check=True, capture_output=True, text=True).stdout


def _source(repository: str, checkout: Path, path: str, seeds, note: str, **more) -> dict:
    return {"repository": repository, "commit": _git(checkout, "rev-parse", "HEAD").strip(), "path": path,
            "seeds": seeds, "note": note, **more}


def from_chemeleon(checkout: Path) -> dict:
    tools = {}
    for tool, fname in MODELS.items():
        per_target = per_target_means(parse_results(_git(checkout, "show", f"HEAD:{RESULTS_DIR}/{fname}")))
        seeds = sorted({s for t in per_target.values() for s in t["seeds"]})
        note = ("mean over 5 seeds per target" + ("; RF on Morgan: 100 trees, radius 2, 2,048 bits, standardised "
                                                  "target, trained on the whole train split" if tool == "rf_morgan" else ""))
        tools[tool] = {"source": _source(CHEMELEON, checkout, f"{RESULTS_DIR}/{fname}", seeds, note),
                       "per_target": per_target}
    return tools


def from_moleculeace(checkout: Path) -> dict:
    text = _git(checkout, "show", f"HEAD:{MOLECULEACE_CSV}")
    return {tool: {"source": _source(MOLECULEACE, checkout, MOLECULEACE_CSV, None,
                                     "one run per target (deterministic); grid-searched by 5-fold cross-validation "
                                     "on the train split, refitted on it; no non-cliff RMSE published",
                                     rows={"algorithm": algo, "descriptor": desc}),
                   "per_target": parse_moleculeace_csv(text, algo, desc)}
            for tool, (algo, desc) in MOLECULEACE_MODELS.items()}


def from_acanet(checkout: Path) -> dict:
    tools = {}
    for tool, folder in ACANET_MODELS.items():
        paths = [p for p in _git(checkout, "ls-tree", "-r", "--name-only", "HEAD", f"{ACANET_DIR}/{folder}").split()
                 if p.endswith("/results.json")]
        files = {p: _git(checkout, "show", f"HEAD:{p}") for p in paths}
        tools[tool] = {"source": _source(ACANET, checkout, f"{ACANET_DIR}/{folder}/*/results.json", None,
                                         "one run per target, its test prediction the mean of 5 cross-validation "
                                         "models, loss parameters tuned per target; no non-cliff RMSE published"),
                       "per_target": parse_acanet(files)}
    return tools


READERS = {"chemeleon": from_chemeleon, "moleculeace": from_moleculeace, "acanet": from_acanet}


def build(checkouts: dict[str, Path], current: dict | None = None) -> dict:
    """``anchors.json``: the tools of every source in ``checkouts`` (``{reader: path}``) read
    afresh, the others kept from ``current``."""
    tools = dict((current or {}).get("tools", {}))
    for reader, checkout in checkouts.items():
        tools.update(READERS[reader](checkout))
    return {"note": "published results, never our measurement; each tool's source says where they come from",
            "tools": dict(sorted(tools.items()))}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for name in READERS:
        p.add_argument(f"--{name}", type=Path, metavar="CHECKOUT", help=f"a git checkout of the {name} source")
    p.add_argument("--out", type=Path, default=ANCHORS)
    args = p.parse_args(argv)
    checkouts = {name: getattr(args, name) for name in READERS if getattr(args, name) is not None}
    if not checkouts:
        p.error(f"give at least one source: {', '.join('--' + n for n in READERS)}")
    current = json.loads(args.out.read_text()) if args.out.exists() else None
    anchors = build(checkouts, current)
    args.out.write_text(json.dumps(anchors, indent=1, sort_keys=True) + "\n")
    for tool, v in anchors["tools"].items():
        print(f"{tool}: {len(v['per_target'])} targets, mean RMSE "
              f"{statistics.mean(t['rmse'] for t in v['per_target'].values()):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
