"""How large should the batches of the statistics pass be? (issue 30, item 4)

``recompute_bn_stats`` normalises each batch of its pass with the batch's own statistics, as
training does, so the deeper layers' statistics depend on the batch size; with the whole
training set in one batch every layer's input is what it receives in eval. This scores saved
weights (``last.pt`` and ``best.pt`` of finished ``siggate train --data`` runs) on val and test
with the statistics they were saved with and with statistics recomputed in batches of 32 and
256 graphs and of at most 8,192, 32,768 and 10^7 nodes (``graph_batches``; 10^7: the whole
training set at once).

    python benchmarks/stable_eval/norm_batch.py RUN [RUN ...] --out benchmarks/results/stable_eval/norm_batch.json

``RUN`` is a folder holding ``model/`` (the run) and ``cache/`` (its processed data), as
``benchmarks/peers/run.py`` writes them.
"""

from __future__ import annotations

import argparse
import copy
import json
import shlex
import sys
from pathlib import Path

GRAPH_BATCHES = (32, 256)
NODE_BUDGETS = (8192, 32768, 10**7)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("runs", nargs="+", type=Path)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    import torch

    from siggate.config import load_config
    from siggate.train.bn_stats import graph_batches, recompute_bn_stats
    from siggate.train.dataprep import graph_loader, prepare_data
    from siggate.train.modelprep import load_trained
    from siggate.train.record import git_commit
    from siggate.train.rundir import run_commit
    from siggate.train.scoring import evaluate_split

    torch.set_num_threads(1)
    commit = git_commit()
    rows = []
    for run in args.runs:
        cfg = load_config(str(run / "model" / "config.yaml"))
        chirality = load_trained(run / "model" / "best.pt")[3].chirality  # its molecules read as it trained
        ds = prepare_data(cfg.data, cfg.model, cfg.train.seed, progress=False, chirality=chirality)
        for name in ("last.pt", "best.pt"):
            model, ckpt, _, info = load_trained(run / "model" / name)
            mean, std = ckpt["target_mean"], ckpt["target_std"]

            def score(m):
                return [evaluate_split(m, ds.val, info, mean, std), evaluate_split(m, ds.test, info, mean, std)]

            row = {"run": str(run), "checkpoint": name, "task": cfg.data.csv and Path(cfg.data.csv).parent.name,
                   "epoch": ckpt["state"]["epoch"], "eval_norm": cfg.train.eval_norm,
                   "run_commit": run_commit(run / "model"), "saved": score(model)}
            for bs in GRAPH_BATCHES:
                m = copy.deepcopy(model)
                recompute_bn_stats(m, graph_loader(ds.train, bs))
                row[f"graphs{bs}"] = score(m)
            for nodes in NODE_BUDGETS:
                m = copy.deepcopy(model)
                recompute_bn_stats(m, graph_batches(ds.train, nodes))
                row[f"nodes{nodes}"] = score(m)
            rows.append(row)
            print(json.dumps({k: (v if not isinstance(v, list) else [round(x, 4) for x in v]) for k, v in row.items()
                              if k != "run"}), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "what": "val/test [metric, metric] of saved weights under BatchNorm statistics recomputed in batches of "
                "several sizes (benchmarks/stable_eval/norm_batch.py)",
        "command": " ".join(["python", "benchmarks/stable_eval/norm_batch.py",
                             *map(shlex.quote, sys.argv[1:] if argv is None else argv)]),
        "git_commit": commit, "threads": 1, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
