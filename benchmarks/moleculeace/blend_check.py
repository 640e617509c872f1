"""Offline check: siggate's test predictions averaged 50/50 with a random forest's (weight fixed
beforehand, never tuned), per public target, from the run folders ``run.py`` left behind.

    python benchmarks/moleculeace/blend_check.py --recipe default --seed 0

Prints per target the test RMSE of siggate, the RF (``random_state`` = the seed) and their mean,
and the mean over targets. Not a recipe: an offline check made before siggate had its own
``rf`` member (``--members gnn,svr,rf`` now combines them with weights fitted on validation).
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv=None) -> int:
    import numpy as np

    from siggate.train.executor import load_script

    mace = load_script("mace_run", HERE / "run.py", reuse=True)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--recipe", default="default")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-dir", type=Path, default=mace.CACHE / "data")
    p.add_argument("--work-dir", type=Path, default=mace.CACHE / "runs")
    args = p.parse_args(argv)
    rf, rows = mace.RandomForestMorgan(), []
    for target in mace.PUBLIC:
        tdir = args.data_dir / target
        preds = args.work_dir / "siggate" / args.recipe / target / f"seed{args.seed}" / "test_predictions.csv"
        with open(preds, newline="") as fh:
            got = list(csv.DictReader(fh))
        col = mace.peers.prediction_column(tdir / "test.csv", got)
        g = np.array([float(r[col]) for r in got])
        f = np.array(rf.run(mace.Target(target), tdir, None, args.seed, None)["pred"])
        y = np.array(mace.read_test(tdir)[1])
        rmse = [float(np.sqrt(np.mean((p - y) ** 2))) for p in (g, f, (g + f) / 2)]
        rows.append(rmse)
        print(target, *(f"{v:.3f}" for v in rmse))
    print("mean", *(f"{v:.4f}" for v in np.mean(rows, axis=0)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
