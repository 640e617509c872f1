"""Scoring: a model's predictions in target units, the rows a split scores, its metric and
summary, and the mean gate per layer.
"""

from __future__ import annotations

import numpy as np
import torch

from ..data.base import GraphDataset, TaskInfo, split_mask, stacked_labels
from .dataprep import graph_loader
from .metrics import compute_metric, summary


@torch.no_grad()
def predict(model, loader, mean=None, std=None, task: str = "regression", device=None) -> torch.Tensor:
    """Raw model outputs in target units (denormalised for regression), on CPU: ``[G, T]``
    per graph, or ``[N, T]`` per node of every graph, in loader order (logits for
    classification)."""
    model.eval()
    outs = []
    for batch in loader:
        if device is not None:
            batch = batch.to(device)
        out = model(batch)
        if task == "regression" and mean is not None:
            out = out * std.to(out.device) + mean.to(out.device)
        outs.append(out.cpu())
    return torch.cat(outs) if outs else torch.empty(0)


def predict_graphs(model, graphs, info: TaskInfo, mean, std, batch_size: int = 256, device=None) -> torch.Tensor:
    """:func:`predict` on the list ``graphs``, in order, ``batch_size`` graphs at a time."""
    return predict(model, graph_loader(graphs, batch_size), mean, std, info.task, device=device)


def scored_rows(info: TaskInfo, graphs, pred: torch.Tensor, split: str | None) -> tuple[np.ndarray, np.ndarray]:
    """``(labels, predictions)`` as numpy arrays, one row per prediction that ``split`` scores:
    every graph (or node), or the rows of ``split``'s mask for a transductive dataset."""
    y = stacked_labels(graphs, info, split)
    if info.transductive:
        pred = pred[torch.cat([split_mask(g, info, split) for g in graphs])]
    return y.numpy(), pred.numpy()


def split_metric(info: TaskInfo, graphs, pred: torch.Tensor, split: str | None) -> float:
    """``info.metric`` of the predictions ``pred`` for ``graphs`` (rows of ``split``'s mask
    for a transductive dataset)."""
    return float(compute_metric(info.metric, *scored_rows(info, graphs, pred, split)))


def probabilities(pred: torch.Tensor, task: str) -> torch.Tensor:
    """Model outputs as people read them: unchanged for regression (already in target units)
    and multiclass (scores), the sigmoid of the logits for binary and multilabel tasks."""
    return torch.sigmoid(pred) if task in ("binary", "multilabel") else pred


def split_summary(info: TaskInfo, graphs, pred: torch.Tensor, split: str | None) -> dict:
    """:func:`siggate.train.metrics.summary` of ``pred`` (target units, or probabilities for
    classification) on the rows ``split`` scores."""
    y, p = scored_rows(info, graphs, pred, split)
    return summary(info.task, y, p, info.target_names or None)


def evaluate_split(model, graphs, info: TaskInfo, mean, std, batch_size: int = 256, device=None,
                   split: str | None = None) -> float:
    """The official metric ``info.metric`` of ``model`` on ``graphs`` (predictions in target
    units); for a transductive dataset on the nodes of ``split``'s mask."""
    return split_metric(info, graphs, predict_graphs(model, graphs, info, mean, std, batch_size, device), split)


def evaluate_splits(model, ds: GraphDataset, splits, mean, std, batch_size: int = 256, device=None,
                    scale: np.ndarray | None = None) -> dict:
    """``{split: metric}`` of ``model`` on each of ``splits`` of ``ds``. A transductive
    dataset's graph is predicted once and each split scored on its mask. ``scale`` (per-target
    divisors, :func:`selection_scale`; graph-level datasets): also ``"select"``, the first split's
    metric of the labels and predictions divided by it."""
    if not ds.info.transductive:
        preds = {s: predict_graphs(model, ds.splits[s], ds.info, mean, std, batch_size, device) for s in splits}
        out = {s: split_metric(ds.info, ds.splits[s], preds[s], None) for s in splits}
        if scale is not None:
            y, p = scored_rows(ds.info, ds.splits[splits[0]], preds[splits[0]], None)
            out["select"] = float(compute_metric(ds.info.metric, y / scale, p / scale))
        return out
    graphs = ds.splits[splits[0]]  # every split holds the same graph
    pred = predict_graphs(model, graphs, ds.info, mean, std, batch_size, device)
    return {s: split_metric(ds.info, graphs, pred, s) for s in splits}


def selection_scale(ds: GraphDataset) -> np.ndarray | None:
    """The per-target divisors by which a run compares its epochs (``train.select: best``): a CSV's
    regression of several target columns, each in its own units, compares each target's error
    divided by the standard deviation of its training labels, so that no target's units choose
    the epoch alone (the mean of the errors in the targets' units, the run's reported metric,
    follows the target of the largest numbers). None for one target, for classification and for
    the benchmarks, which keep their own convention (peptides-struct's mean MAE over its 11
    targets)."""
    info = ds.info
    if info.name != "csv" or info.task != "regression" or info.num_tasks < 2 or info.transductive:
        return None
    with np.errstate(all="ignore"):  # (a target without training labels: its divisor is 1)
        sd = np.nanstd(stacked_labels(ds.train, info, None).numpy().astype(np.float64), axis=0)
    return np.where(np.isfinite(sd) & (sd > 0), sd, 1.0)


def split_probabilities(model, ds: GraphDataset, splits, mean, std, batch_size: int = 256, device=None) -> dict:
    """``{split: predictions}`` of ``model`` on ``splits`` of ``ds``, in target units
    (probabilities for classification, :func:`probabilities`, in float64: float32's sigmoid is
    exactly 1 above a logit of about 17, so confident predictions tied, and the run's per-target
    ROC-AUC read 0.5 where its headline metric, of the logits, did not)."""
    return {s: probabilities(predict_graphs(model, ds.splits[s], ds.info, mean, std, batch_size, device).double(),
                             ds.info.task) for s in splits}


#: Most nodes :func:`gate_means` reads at once (it runs the reference attention, ``O(N^2)``).
GATE_MEANS_MAX_NODES = 8192


@torch.no_grad()
def gate_means(model, graphs, n: int = 64, device=None) -> list[float]:
    """Mean gate value per layer on the first ``n`` graphs, as many as fit in
    :data:`GATE_MEANS_MAX_NODES` nodes (empty for ``gate='none'``, or when the first graph
    alone is larger, e.g. a large transductive graph)."""
    if not model.attention_modules() or model.attention_modules()[0].gate == "none":
        return []
    sizes = np.cumsum([int(g.num_nodes) for g in graphs[:n]])
    n = int(np.searchsorted(sizes, GATE_MEANS_MAX_NODES, side="right"))
    if n == 0:
        return []
    model.eval()
    batch = next(iter(graph_loader(graphs[:n], n)))
    if device is not None:
        batch = batch.to(device)
    _, det = model(batch, return_details=True)
    mask = det["mask"]
    return [float(a["gate"][mask].mean()) for a in det["attn"]]
