"""Quick per-batch timing probe used to choose the depth of the short-budget runs.

Times a few training steps (forward + backward + AdamW step) of the protocol model at several
depths and extrapolates one epoch (train batches + forward-only val/test passes). Only a guide
for choosing the budget; the reported per-epoch times are the measured ones in the runs' log.csv.

    python benchmarks/short_budget/timing_probe.py molhiv 10,2,1 [THREADS]     # siggate's environment active
"""

from __future__ import annotations

import json
import sys
import time

import torch

from siggate.config import load_config
from siggate.train.dataprep import prepare_data
from siggate.train.loop import epoch_loader
from siggate.train.losses import loss_fn
from siggate.train.modelprep import build_model


def probe(name: str, layers: int, steps: int = 6) -> dict:
    cfg = load_config(name, [f"model.layers={layers}"])
    ds = prepare_data(cfg.data, cfg.model, cfg.train.seed, progress=False)
    torch.manual_seed(0)
    model = build_model(cfg.model, ds.info, cfg.train.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.train.lr)
    crit = loss_fn(cfg.train.loss, ds.info.task)
    loader = epoch_loader(ds.train, cfg.train.batch_size, 0, 0)
    n_batches = len(loader)
    model.train()
    times = []
    for i, batch in enumerate(loader):
        t = time.time()
        opt.zero_grad()
        pred = model(batch)
        loss = crit(pred, batch.y.view(pred.shape).float())
        loss.backward()
        opt.step()
        times.append(time.time() - t)
        if i + 1 >= steps:
            break
    per = sorted(times[1:])[len(times[1:]) // 2]  # median, first step dropped
    n_eval = len(ds.val) + len(ds.test)
    eval_batches = n_eval / cfg.train.batch_size
    est = n_batches * per + eval_batches * per / 3  # forward-only ~ 1/3 of a train step
    return {"dataset": name, "layers": layers, "train_batches": n_batches, "sec_per_train_batch": round(per, 3),
            "est_epoch_seconds": round(est), "threads": torch.get_num_threads(), "sizes": ds.sizes()}


if __name__ == "__main__":
    name = sys.argv[1]
    if len(sys.argv) > 3:
        torch.set_num_threads(int(sys.argv[3]))
    for layers in [int(x) for x in sys.argv[2].split(",")]:
        print(json.dumps(probe(name, layers)), flush=True)
