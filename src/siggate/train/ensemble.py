"""Ensembles: ``siggate train --ensemble N`` trains N members that differ only in their seed
into one run folder, and ``siggate predict`` on that folder averages them.

Layout of an ensemble folder::

    OUT/ensemble.json        members (checkpoint paths relative to OUT), seeds, per-member and
                             ensemble val/test metrics
    OUT/test_predictions.csv the ensemble's test predictions (CSV runs; also splits.csv and
                             data_report.csv)
    OUT/member0/ ... member{N-1}/   ordinary ``siggate train`` run folders (best.pt, ...)

Member ``i`` trains with seed ``train.seed + i``. The ensemble predicts the mean of its
members' predictions (probabilities for classification, target units for regression) and
reports their standard deviation over members (``ddof=0``: 0 for one member) as the
uncertainty.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import torch

from ..files import atomic_write_bytes

ENSEMBLE_FILE = "ensemble.json"


class EnsembleError(ValueError):
    """A folder that is not a usable ensemble or run."""


def member_dir(out: Path, i: int) -> Path:
    return Path(out) / f"member{i}"


def checkpoints(path: str | Path) -> list[Path]:
    """The member checkpoints behind ``path``: an ensemble folder (its ``ensemble.json``), a
    run folder (its ``best.pt``) or a checkpoint file."""
    path = Path(path)
    if path.is_dir():
        manifest = path / ENSEMBLE_FILE
        if manifest.is_file():
            try:
                members = json.loads(manifest.read_text())["members"]
            except (ValueError, KeyError, TypeError) as exc:
                raise EnsembleError(f"{manifest}: not a siggate ensemble manifest ({exc}); retrain with "
                                    "siggate train --ensemble N") from None
            files = [path / m for m in members]
            missing = [str(f) for f in files if not f.is_file()]
            if missing:
                raise EnsembleError(f"{manifest}: member checkpoint(s) missing: {', '.join(missing)}")
            return files
        if (path / "best.pt").is_file():
            return [path / "best.pt"]
        raise EnsembleError(f"{path}: a folder with neither {ENSEMBLE_FILE} nor best.pt; give a run folder, an "
                            "ensemble folder or a .pt checkpoint")
    return [path]


def ensemble_predict(members: list[tuple], batch) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and standard deviation (``ddof=0``) over members of the predictions for ``batch``.

    Args:
        members: ``(model, target_mean, target_std, task)`` per member.
        batch: a PyG ``Batch``.

    Returns:
        ``(mean [G, T], std [G, T])`` in target units (probabilities for classification).
    """
    outs = []
    for model, mean, std, task in members:
        out = model(batch)
        outs.append(out * std + mean if task == "regression" else torch.sigmoid(out))
    stacked = torch.stack(outs)  # members, G, T
    return stacked.mean(0), stacked.std(0, correction=0)


def train_ensemble(cfg, out: Path, n: int, resume: bool = False, progress: bool = True, device=None) -> dict:
    """Train ``n`` members (seeds ``train.seed + i``) into ``out/member{i}`` and write
    ``out/ensemble.json`` with each member's and the ensemble's val/test metrics (and the
    ensemble's ``val_metrics``/``test_metrics`` summaries); a CSV ensemble also writes its
    ``test_predictions.csv`` (mean and standard deviation over members), ``splits.csv`` and
    ``data_report.csv`` into ``out``."""
    from torch_geometric.loader import DataLoader

    from .distributed import DistContext
    from .loop import load_trained, prepare_data, split_summary, train, write_csv_run_tables
    from .metrics import compute_metric

    if n < 1:
        raise EnsembleError(f"--ensemble must be >= 1, got {n}")
    out = Path(out)
    # one dataset (split drawn from the base seed) for every member: a member's seed must not
    # move molecules between train, val and test, or the ensemble's test set would leak
    ds = prepare_data(cfg, progress=False)
    runs = []
    for i in range(n):
        c = copy.deepcopy(cfg)
        c.train.seed = cfg.train.seed + i
        d = member_dir(out, i)
        runs.append(train(c, d, resume=resume and (d / "last.pt").exists(), progress=progress, dataset=ds,
                          dist=DistContext(device=device) if device is not None else None))
    members = []
    for i in range(n):
        model, ckpt, _, info = load_trained(member_dir(out, i) / "best.pt")
        model.eval()
        members.append((model, ckpt["target_mean"], ckpt["target_std"], info.task))
    scores, summaries, test_mean, test_std = {}, {}, None, None
    with torch.no_grad():
        for split in ("val", "test"):
            graphs = ds.splits[split]
            parts = [ensemble_predict(members, b) for b in DataLoader(graphs, batch_size=256, shuffle=False)]
            mean, std = torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
            y = torch.cat([g.y.view(1, -1) for g in graphs])
            scores[split] = float(compute_metric(ds.info.metric, y.numpy(), mean.numpy()))
            summaries[split] = split_summary(ds.info, graphs, mean, split)
            if split == "test":
                test_mean, test_std = mean, std
    res = {
        "members": [f"member{i}/best.pt" for i in range(n)],
        "seeds": [cfg.train.seed + i for i in range(n)],
        "metric": ds.info.metric,
        "member_val": [r["val"] for r in runs],
        "member_test": [r["test"] for r in runs],
        "val": scores["val"],
        "test": scores["test"],
        "val_metrics": summaries["val"],
        "test_metrics": summaries["test"],
    }
    if cfg.data.name == "csv":  # the ensemble's own test predictions, with their spread over members
        write_csv_run_tables(out, ds, test_mean, test_std, data=cfg.data)
    atomic_write_bytes(out / ENSEMBLE_FILE, (json.dumps(res, indent=2) + "\n").encode())
    return res
