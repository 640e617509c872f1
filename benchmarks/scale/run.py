"""Time and peak memory of the fingerprint members (``svr``, ``rf``; issue 32) on 1k, 10k and 50k
molecules drawn from MOSES, with RDKit's Crippen logP as the target.

    python benchmarks/scale/fpmembers.py                          # sizes 1000,10000,50000; both members
    python benchmarks/scale/fpmembers.py --sizes 1000 --members svr --out /tmp/scale.json

Each (member, size) runs in a fresh process, one thread (``OMP_NUM_THREADS=1``): ``n`` SMILES are
drawn without replacement (seed 0) from the MOSES training set inside the installed ``molsets``
0.3.1 wheel (read as a file, streamed, the package is never imported), split 80/10/10 at random
(seed 0), and the member with its defaults is fitted (options chosen on the 10% validation rows)
and predicts the test rows. The child reports wall and CPU seconds of the data preparation, the fit
and the prediction, the test RMSE, the member's choices, and its peak resident memory
(``getrusage``'s ``ru_maxrss``) after the data preparation and at the end (the whole process:
Python, torch, RDKit, the SMILES and graphs included). Writes ``benchmarks/results/scale/fpmembers.json``
with the command and commit.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

from siggate.train.record import git_commit  # at the top: a move breaks tests/test_benchmarks_import.py

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "scale" / "fpmembers.json"
MEMBERS = ("svr", "rf")
MOSES_ROWS = 1_584_663  # SMILES in MOSES's train.csv.gz (siggate.data.corpus)


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def moses_sample(n: int, seed: int) -> list[str]:
    """``n`` MOSES training SMILES drawn without replacement, in file order, streamed."""
    import csv
    import gzip

    import numpy as np

    from siggate.data.corpus import moses_train_path

    keep = set(np.random.default_rng(seed).choice(MOSES_ROWS, size=n, replace=False).tolist())
    out = []
    with gzip.open(moses_train_path(), "rt", newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader)
        col = header.index("SMILES")
        for i, row in enumerate(reader):
            if i in keep:
                out.append(row[col])
    if len(out) != n:
        raise SystemExit(f"MOSES file holds fewer rows than {MOSES_ROWS}: got {len(out)} of {n}")
    return out


def child(member: str, n: int, seed: int) -> dict:
    import numpy as np
    import torch
    from rdkit import Chem
    from rdkit.Chem import Crippen
    from torch_geometric.data import Data

    from siggate.data.base import GraphDataset, TaskInfo
    from siggate.predictors.forest import RandomForest
    from siggate.predictors.svr import KernelSVR

    t0, c0 = time.perf_counter(), time.process_time()
    smiles = moses_sample(n, seed)
    y = np.array([Crippen.MolLogP(Chem.MolFromSmiles(s)) for s in smiles])
    order = np.random.default_rng(seed).permutation(n)
    cut = [int(0.8 * n), int(0.9 * n)]
    graphs = [Data(smiles=smiles[i], y=torch.tensor([[y[i]]])) for i in order]
    ds = GraphDataset(info=TaskInfo(name=f"moses{n}", task="regression", num_tasks=1, metric="mae"),
                      splits={"train": graphs[: cut[0]], "val": graphs[cut[0] : cut[1]], "test": graphs[cut[1] :]})
    prep = {"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0, "peak_mib": peak_mib()}
    model = KernelSVR(seed=seed) if member == "svr" else RandomForest(seed=seed)
    t0, c0 = time.perf_counter(), time.process_time()
    model.fit(ds)
    fit = {"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0}
    t0, c0 = time.perf_counter(), time.process_time()
    pred = model.predict(ds.test).mean.double().numpy()[:, 0]
    predict = {"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0}
    yt = np.array([g.y.item() for g in ds.test])
    m = model.models_[0]
    return {"member": member, "n": n, "sizes": ds.sizes(), "repr": repr(model), "prepare": prep, "fit": fit,
            "predict": predict, "peak_mib": peak_mib(), "test_rmse": float(np.sqrt(np.mean((pred - yt) ** 2))),
            "target_std": float(np.std(yt)), "mode": getattr(m, "mode", "forest"), "basis": m.meta.get("basis"),
            "chosen": m.meta.get("chosen")}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="1000,10000,50000")
    p.add_argument("--members", default=",".join(MEMBERS))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--child", nargs=2, metavar=("MEMBER", "N"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child[0], int(args.child[1]), args.seed)))
        return 0
    members = [m.strip() for m in args.members.split(",") if m.strip()]
    if any(m not in MEMBERS for m in members):
        raise SystemExit(f"--members: choose from {', '.join(MEMBERS)}")
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    doc = {"command": "python benchmarks/scale/fpmembers.py " + " ".join(argv if argv is not None else sys.argv[1:]),
           "commit": git_commit(), "python": platform.python_version(), "machine": platform.machine(),
           "seed": args.seed, "threads": 1, "runs": []}
    for n in sizes:
        for member in members:
            proc = subprocess.run([sys.executable, __file__, "--child", member, str(n), "--seed", str(args.seed)],
                                  capture_output=True, text=True, env=env)
            if proc.returncode != 0:
                row = {"member": member, "n": n, "status": "failed", "error": proc.stderr.strip()[-2000:]}
            else:
                row = {"status": "ok", **json.loads(proc.stdout.strip().splitlines()[-1])}
            doc["runs"].append(row)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(doc, indent=1) + "\n")
            if row["status"] == "ok":
                print(f"{member:4s} n={n:6d}: fit {row['fit']['wall_s']:.1f}s, predict {row['predict']['wall_s']:.1f}s, "
                      f"peak {row['peak_mib'] / 1024:.2f} GiB, test rmse {row['test_rmse']:.3f}, {row['mode']} "
                      f"{row['basis'] or ''}", flush=True)
            else:
                print(f"{member} n={n}: failed: {row['error'][-300:]}", flush=True)
    return 0 if all(r["status"] == "ok" for r in doc["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
