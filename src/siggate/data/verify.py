"""``siggate data verify NAME``: load any registered dataset and summarize it (counts,
feature widths, invalid rows, label statistics per split; for node-level datasets the nodes
and the class balance of each split)."""

from __future__ import annotations

import torch

from .base import DataError, stacked_labels
from .catalog import DATASETS, get_dataset

__all__ = ["UnknownDatasetError", "verify"]


class UnknownDatasetError(DataError, KeyError):
    """:func:`verify` of a name that is not registered (a ``KeyError`` and a :class:`DataError`)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


def _label_stats(y: torch.Tensor, task: str) -> dict:
    """Label statistics of one split: missing fraction, and per-task mean/std/min/max
    (regression) or positive rates and label counts (classification)."""
    y = y.double()
    present = ~torch.isnan(y)
    stats = {"missing_fraction": float(1.0 - present.double().mean()) if y.numel() else 0.0}
    if task == "regression":
        per = []
        for t in range(y.shape[1]):
            col = y[present[:, t], t]
            per.append(
                {
                    "mean": float(col.mean()),
                    "std": float(col.std()) if col.numel() > 1 else 0.0,
                    "min": float(col.min()),
                    "max": float(col.max()),
                }
            )
        stats["per_task"] = per
    else:
        filled = torch.where(present, y, torch.zeros_like(y))
        pos = filled.sum(0) / present.sum(0).clamp_min(1)
        stats["positive_rate"] = [round(float(p), 4) for p in pos]
        stats["num_labels"] = int(present.sum())
    return stats


def _class_balance(y: torch.Tensor, num_classes: int) -> dict:
    """Node count, and count and fraction of each class, of the class ids ``y [n]``."""
    counts = torch.bincount(y.view(-1).long(), minlength=num_classes)
    total = int(counts.sum())
    return {"nodes": total, "class_count": counts.tolist(),
            "class_fraction": [round(float(c) / max(total, 1), 4) for c in counts]}


def verify(name: str, root=None, cache_dir=None, **kw) -> dict:
    """Load ``name`` and return its counts, for ``siggate data verify NAME``.

    Keys: name, source, task, level, metric, num_tasks, num_graphs, splits (graphs per
    split), node_feature_dim, edge_feature_dim, total_nodes (atoms), total_edges (directed),
    total_bonds, nodes_per_graph (min/mean/max), edges_per_graph (mean, directed), invalid
    (count and rows), labels (per split: regression mean/std/min/max per task, positive
    rates, or for node classification the node count and each class's count and fraction).
    A transductive dataset (one graph, split by node masks) is counted once. ``max_graphs``
    generates that many graphs of a dataset that takes it as an option (cluster, pattern), and
    keeps the first ``max_graphs`` of each split of any other, as ``data.max_graphs`` does in training.
    """
    if str(name).strip().lower() not in DATASETS:
        raise UnknownDatasetError(f"unknown dataset {name!r}; known: {sorted(DATASETS)}")
    from .catalog import DATASET_META

    cut = None
    if "max_graphs" not in DATASET_META[str(name).strip().lower()]["options"]:
        cut = kw.pop("max_graphs", None)  # not a generator's option: each split's first graphs, as training cuts them
    ds = get_dataset(name, root=root, cache_dir=cache_dir, **kw).first(cut)
    info = ds.info
    keys = ("train",) if info.transductive else ("train", "val", "test")
    graphs = [g for key in keys for g in ds.splits[key]]
    nodes = torch.tensor([int(g.num_nodes) for g in graphs], dtype=torch.float64)
    edges = sum(int(g.edge_index.shape[1]) for g in graphs)
    out = {
        "name": name,
        "source": ds.source,
        "task": ds.info.task,
        "level": info.level,
        "transductive": info.transductive,
        "metric": ds.info.metric,
        "num_tasks": ds.info.num_tasks,
        "num_graphs": len(graphs),
        "splits": ds.sizes(),
        "node_features": ds.info.node_features,
        "node_feature_dim": int(graphs[0].x.shape[1]) if graphs else 0,
        "edge_feature_dim": int(graphs[0].edge_attr.shape[1]) if graphs and "edge_attr" in graphs[0] else 0,
        "total_nodes": int(nodes.sum()),
        "total_edges": edges,
        "total_bonds": edges // 2,
        "nodes_per_graph": {
            "min": int(nodes.min()) if graphs else 0,
            "mean": round(float(nodes.mean()), 3) if graphs else 0.0,
            "max": int(nodes.max()) if graphs else 0,
        },
        "edges_per_graph": {"mean": round(edges / len(graphs), 3) if graphs else 0.0},
        "invalid": {"count": len(ds.invalid), "rows": [r.index for r in ds.invalid]},
        "labels": {},
    }
    if info.level == "node":
        out["split_nodes"] = ds.node_counts()
    for key in ("train", "val", "test"):
        if ds.splits[key]:
            y = stacked_labels(ds.splits[key], info, key)
            out["labels"][key] = (_class_balance(y, info.num_classes) if info.task == "multiclass"
                                  else _label_stats(y, ds.info.task))
    return out
