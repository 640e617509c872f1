"""Which scale makes a run's conformal intervals cover molecules far from the training set?

    python benchmarks/moleculeace/interval_check.py                  # the 20 public targets
    python benchmarks/moleculeace/interval_check.py --targets CHEMBL1871_Ki --members gnn,svr,rf

For each public MoleculeACE target, ``siggate train --data`` on its molecules (all of them, the
csv recipe's own scaffold split, ``--members svr,rf --weights val`` by default, one thread) keeps
its members' out-of-sample validation predictions, their test predictions and every molecule's
nearest-training similarity ``s`` (the run's applicability domain). The intervals ``mean -/+ q
sigma`` of split conformal are then compared for ``sigma``:

* ``one width``: 1;
* ``spread``: the combination's spread, floored at 10% of its validation median (what siggate
  scaled by before ``scale: similarity``; 1 where that median is 0);
* ``exp(-k s)`` for the rates ``k`` of :data:`RATES` (``k = 0`` is one width).

Each is judged on the validation split alone: halved :data:`HALVINGS` times at random, each half
calibrating the other, at the coverage ``--coverage``: the coverage, the median width and the
coverage in each third of the molecules by ``s`` (the thirds' edges from the calibrating half).
The chosen scale is the one of narrowest median width on val; the test split (calibrated on all
of val) is reported beside, not used. Writes ``--out`` (JSON) and prints the table. The runs
stay in ``--work-dir`` and are reused. Seeds: the runs' ``--seed 0``, the halvings' ``--seed``.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: the rates ``k`` of ``sigma = exp(-k s)``: a molecule like none of the training set (``s = 0``) gets
#: an interval ``e^k`` times as wide as a training molecule's twin (``s = 1``)
RATES = (0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 4.0)
HALVINGS = 20


def collect(mace, target: str, work: Path, members: str) -> dict:
    """The target's run (trained once into ``work/<target>``) as arrays: per split ``val`` and
    ``test``, the labels ``y``, the combination's prediction ``mean`` and spread ``spread`` (val:
    out of sample, as the calibration sees it) and the nearest-training similarity ``sim``."""
    import numpy as np

    from siggate.data.similarity import Domain
    from siggate.predictors.base import out_of_sample
    from siggate.train.members import load_predictor
    from siggate.train.predict import SmilesPredictor

    folder = work / target
    folder.mkdir(parents=True, exist_ok=True)
    data, run = folder / "data.csv", folder / "run"
    if not data.is_file():
        data.write_text("smiles,y\n" + "".join(f"{r['smiles']},{r['y']}\n" for r in mace.read_target(target)))
    if not (run / "metrics.json").is_file():
        subprocess.run([sys.executable, "-m", "siggate", "train", "--data", str(data), "--target-col", "y",
                        "--members", members, "--weights", "val", "--out", str(run), "--cache-dir",
                        str(work / "cache"), "--threads", "1", "--no-progress", "--overwrite"], check=True)
    with open(data, newline="") as fh:
        labels = [float(r["y"]) for r in csv.DictReader(fh)]
    with open(run / "splits.csv", newline="") as fh:
        splits = list(csv.DictReader(fh))
    reader, combo, domain = SmilesPredictor(run, domain=False), load_predictor(run), Domain.load(run, required=True)
    if domain is None:
        raise SystemExit(f"{run}: no domain.json beside the run; train it again (delete {run})")
    out = {}
    for split in ("val", "test"):
        rows = [r for r in splits if r["split"] == split]
        graphs = [reader.featurize(r["smiles"]) for r in rows]
        parts = [out_of_sample(m, split, graphs) if split == "val" else m.predict(graphs) for m in combo.members]
        both = combo.combine(parts)
        out[split] = {"y": np.array([labels[int(r["row"])] for r in rows]),
                      "mean": both.mean.double().numpy()[:, 0], "spread": both.spread.double().numpy()[:, 0],
                      "sim": domain.graph_similarity(graphs)}
    return out


def scales() -> dict:
    """``{name: sigma(rows, calibrating rows)}`` of the compared scales."""
    import numpy as np

    from siggate.predictors.conformal import SPREAD_FLOOR

    def one(d, ref):
        return np.ones_like(d["y"])

    def spread(d, ref):
        median = float(np.median(ref["spread"]))
        return np.ones_like(d["y"]) if median <= 0 else np.maximum(d["spread"], SPREAD_FLOOR * median)

    out = {"one width": one, "spread": spread}
    for k in RATES:
        out[f"exp(-{k:g} s)"] = lambda d, ref, k=k: np.exp(-k * d["sim"])
    return out


def judge(sigma, cal: dict, ev: dict, coverage: float) -> list[float]:
    """``[coverage, median width, coverage in the thirds by similarity (least alike first)]`` of
    the rows ``ev`` under intervals calibrated on the rows ``cal``."""
    import numpy as np

    from siggate.predictors.conformal import conformal_quantile

    half = conformal_quantile(np.abs(cal["y"] - cal["mean"]) / sigma(cal, cal), coverage) * sigma(ev, cal)
    inside = np.abs(ev["y"] - ev["mean"]) <= half
    third = np.digitize(ev["sim"], np.quantile(cal["sim"], [1 / 3, 2 / 3]))
    return [float(inside.mean()), float(np.median(2 * half))] + [
        float(inside[third == b].mean()) if (third == b).any() else math.nan for b in range(3)]


def main(argv=None) -> int:
    import numpy as np

    from siggate.train.executor import load_script

    mace = load_script("mace_run", HERE / "run.py", reuse=True)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--targets", default=None, help="comma-separated public targets (default: all 20)")
    p.add_argument("--members", default="svr,rf")
    p.add_argument("--coverage", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=0, help="seed of the validation halvings")
    p.add_argument("--work-dir", type=Path, default=mace.CACHE / "intervals")
    p.add_argument("--out", type=Path, default=HERE / "results" / "intervals.json")
    args = p.parse_args(argv)
    targets = mace.parse_targets(args.targets) if args.targets else list(mace.PUBLIC)
    work = args.work_dir / args.members.replace(",", "-")
    from siggate.train.record import git_commit

    rng, found = np.random.default_rng(args.seed), scales()
    table = {name: {"val": [], "test": []} for name in found}
    for target in targets:
        data = collect(mace, target, work, args.members)
        val, test = data["val"], data["test"]
        pairs = []  # (calibrating half, evaluated half), the same for every scale
        for perm in (rng.permutation(len(val["y"])) for _ in range(HALVINGS)):
            a, b = perm[: len(perm) // 2], perm[len(perm) // 2:]
            halves = [{k: v[rows] for k, v in val.items()} for rows in (a, b)]
            pairs += [(halves[0], halves[1]), (halves[1], halves[0])]
        for name, sigma in found.items():
            rows = [judge(sigma, c, e, args.coverage) for c, e in pairs]
            table[name]["val"].append(np.nanmean(rows, axis=0).tolist())
            table[name]["test"].append(judge(sigma, val, test, args.coverage))
        print(f"{target}: {len(val['y'])} val, {len(test['y'])} test molecules", flush=True)
    means = {name: {s: np.mean(v[s], axis=0).tolist() for s in ("val", "test")} for name, v in table.items()}
    chosen = min(means, key=lambda n: means[n]["val"][1])
    doc = {"targets": targets, "members": args.members, "coverage": args.coverage, "seed": args.seed,
           "halvings": HALVINGS, "columns": ["coverage", "median width", "least alike third", "middle third",
                                             "most alike third"],
           "chosen_on_val": chosen, "mean_over_targets": means, "per_target": table,
           "command": " ".join(["python", *sys.argv]), "git_commit": git_commit()}  # (the runs: reused from --work-dir)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{len(targets)} targets, coverage {args.coverage:g}; columns: {', '.join(doc['columns'])}")
    for name, m in means.items():
        mark = "  <- chosen (narrowest on val)" if name == chosen else ""
        print(f"{name:18s} val " + " ".join(f"{x:.3f}" for x in m["val"]) + "  | test "
              + " ".join(f"{x:.3f}" for x in m["test"]) + mark)
    return 0


if __name__ == "__main__":
    sys.exit(main())
