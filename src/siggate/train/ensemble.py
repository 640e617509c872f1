"""A run of several members combined into one predictor: ``siggate train --ensemble N`` (N GNN
members that differ only in their seed) and ``--members KIND,...`` (members of several kinds,
:data:`~siggate.train.members.MEMBER_KINDS`).

:func:`train_members` is a short pipeline:

1. prepare the data once, split with the first seed (``cfg.data``): a member's seed must not
   move molecules between train, val and test, or the combination's test set would leak;
2. build the members (:func:`~siggate.train.members.build_members`);
3. fit each into its folder (:func:`~siggate.train.members.fit_member`): a finished member is
   reused, an interrupted GNN member resumes from its ``last.pt``;
4. combine them (:class:`~siggate.predictors.combine.Combination`: equal weights, or weights
   fitted on the validation split) and score every member and the combination on val and test;
5. record it.

Layout of the folder::

    OUT/predictor.json        the combination: its members' folders, the weights, the run's
                              config, split seed and data source
    OUT/metrics.json          each member's and the combination's val/test metric and summaries
                              (``members``), as the terminal shows them
    OUT/test_predictions.csv  the combination's test predictions with their spread over members
                              (CSV runs; also splits.csv and data_report.csv)
    OUT/member0/ ...          the members' folders (a GNN member's is an ordinary run folder)

Member ``i`` of ``--ensemble N`` trains with seed ``train.seed + i``. The combination predicts the
(weighted) mean of its members' predictions (probabilities for classification, target units for
regression) and reports their standard deviation over members (``ddof=0``: 0 for one member) as
the uncertainty. Folders written before ``predictor.json`` (``ensemble.json``) still load
(:func:`~siggate.train.members.load_predictor`).
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..config import Config
from ..data.base import GraphDataset
from ..predictors.combine import Combination
from .dataprep import prepare_data
from .members import build_members, fit_member
from .record import data_source, write_csv_run_tables, write_metrics
from .scoring import split_metric, split_summary

SPLITS = ("val", "test")


def train_members(cfg: Config, out: str | Path, kinds=("gnn",), gnn_copies: int = 1, weights: str | None = None,
                  resume: bool = False, progress: bool = True, device: torch.device | None = None,
                  dataset: GraphDataset | None = None) -> dict:
    """Train the members ``kinds`` (``gnn_copies`` GNN members) of ``cfg`` into ``out``, combine
    them with ``weights`` (``None``: equal; ``"val"``: fitted on the validation split) and write
    the folder the module docstring describes. ``dataset``: the prepared data (default: prepared
    from ``cfg.data``). Returns its ``metrics.json``.

    Raises:
        MemberError: an unknown kind or ``gnn_copies < 1``.
    """
    out = Path(out)
    ds = dataset if dataset is not None else prepare_data(cfg.data, cfg.model, cfg.train.seed, progress=False)
    built = build_members(kinds, cfg, out, gnn_copies, progress, device, resume)
    fitted = [fit_member(member, out / name, ds, resume, device) for name, _, member in built]
    record = {"config": cfg.to_dict(), "split_seed": cfg.train.seed, "data_source": data_source(cfg.data)}
    combo = Combination(fitted, weights, [name for name, _, _ in built], record).fit_weights(ds)
    preds = {s: [m.predict(ds.splits[s]) for m in fitted] for s in SPLITS}
    both = {s: combo.combine(preds[s]) for s in SPLITS}
    metrics = {
        "dataset": ds.info.name, "level": ds.info.level, "task": ds.info.task, "metric": ds.info.metric,
        "higher_is_better": ds.info.higher_is_better, "seed": cfg.train.seed,
        "members": [{"name": name, "kind": member.kind, "seed": seed,
                     **_scores(ds, {s: preds[s][i].mean for s in SPLITS})}
                    for i, (name, seed, member) in enumerate(built)],
        "weighting": combo.weighting, "weights": None if combo.weights_ is None else combo.weights_.tolist(),
        **_scores(ds, {s: both[s].mean for s in SPLITS}),
        "splits": ds.sizes(),
    }
    combo.save(out)
    if cfg.data.name == "csv":  # the combination's own test predictions, with their spread over members
        write_csv_run_tables(out, ds, both["test"].mean, both["test"].spread, data=cfg.data)
    write_metrics(out, metrics)
    return metrics


def _scores(ds, preds: dict) -> dict:
    """``{split: metric, <split>_metrics: summary}`` of the predictions ``preds`` per split
    (target units, or probabilities for classification)."""
    out = {s: split_metric(ds.info, ds.splits[s], p, s) for s, p in preds.items()}
    out.update({f"{s}_metrics": split_summary(ds.info, ds.splits[s], p, s) for s, p in preds.items()})
    return out


def member_lines(metrics: dict) -> list[str]:
    """One line per member and one for the combination: kind, seed and the val and test metric
    of :func:`train_members`' ``metrics``."""
    name = metrics["metric"]
    lines = [f"{m['name']:>9}  {m['kind']:<5} seed {m['seed']:<4} val {name} {m['val']:.4f}  test {name} "
             f"{m['test']:.4f}" for m in metrics["members"]]
    weights = metrics.get("weighting", "equal")
    return lines + [f"{'combined':>9}  {weights + ' weights':<15} val {name} {metrics['val']:.4f}  test {name} "
                    f"{metrics['test']:.4f}"]
