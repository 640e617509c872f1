"""Official evaluation metrics for the SigGate-GT benchmarks.

All metric functions take ``y_true`` and ``y_pred`` of shape ``[G, T]``
(``G`` graphs, ``T`` targets/tasks) as numpy arrays or torch tensors (1-D
inputs are treated as ``[G, 1]``). ``NaN`` in ``y_true`` marks a missing label
and the corresponding entry is ignored. For classification ``y_pred`` holds raw
scores / logits (any monotone score works: ROC-AUC and AP only depend on the
ranking).

Metrics
-------
``mae``
    Mean absolute error, computed per target over that target's labelled
    entries, then averaged over the targets that have at least one label.
    This is scikit-learn's ``mean_absolute_error(..., multioutput="uniform_average")``
    used by LRGB for Peptides-struct; with no missing labels it equals the
    plain mean of ``|y_true - y_pred|`` over all entries.
``rocauc``
    OGB ``ogbg-molhiv`` semantics (``ogb.graphproppred.Evaluator._eval_rocauc``,
    replicated exactly for any ``T``): for every task that has at least one
    label ``1`` and one label ``0``, ROC-AUC over the labelled entries; the
    result is the unweighted mean over those tasks.
``ap``
    OGB ``ogbg-molpcba`` semantics (``Evaluator._eval_ap``, replicated exactly
    for any ``T``): same task selection as ``rocauc``, per-task
    ``sklearn.metrics.average_precision_score``, unweighted mean over tasks.
    This is also the LRGB Peptides-func metric.

``accuracy`` / ``weighted_accuracy`` (node and graph classification, ``task="multiclass"``)
    take class ids ``y_true [n]`` and scores ``y_pred [n, C]`` (logits; the predicted class is
    the argmax); both are percentages. ``weighted_accuracy`` is Benchmarking-GNNs'
    ``accuracy_SBM``, the PATTERN/CLUSTER metric GraphGPS reports: each class's recall,
    averaged over classes (see :func:`weighted_accuracy`).

:func:`summary` (the metrics a run or an evaluation reports next to its selection metric)
    regression: ``mae``, ``rmse`` and ``r2`` per target, in target units; classification:
    ``rocauc``, ``prauc`` (average precision, as ``ap``) and ``accuracy`` (the fraction of
    labels matched by ``probability >= 0.5``) per target; each also as the mean over targets.

For ``rocauc`` / ``ap`` a :class:`MetricUndefinedError` is raised when no
task has both classes. If a prediction needed for a metric is non-finite
(e.g. a diverged model) the metric returns ``nan`` with a warning instead of
raising, so training loops can record the failure; :func:`is_better` treats
``nan`` as worse than any number.
"""

from __future__ import annotations

import math
import warnings
from typing import Callable, Dict

import numpy as np
from sklearn.metrics import average_precision_score, roc_auc_score

from ..options import HIGHER_IS_BETTER  # direction of each metric: True when larger is better

__all__ = [
    "MetricUndefinedError",
    "mae",
    "rocauc",
    "average_precision",
    "accuracy",
    "weighted_accuracy",
    "METRIC_FNS",
    "HIGHER_IS_BETTER",
    "compute_metric",
    "higher_is_better",
    "is_better",
    "SUMMARY_METRICS",
    "summary",
    "format_summary",
]


class MetricUndefinedError(RuntimeError, ValueError):
    """A metric is undefined for the given labels (e.g. no task has both classes).

    Subclasses both ``RuntimeError`` (what OGB's Evaluator raises) and
    ``ValueError``.
    """


def _float64(a) -> np.ndarray:
    """A float64 array of ``a`` (a torch tensor of any dtype, bf16/int/bool included, or array-like)."""
    if hasattr(a, "detach"):
        a = a.detach().cpu().double().numpy()
    return np.asarray(a, dtype=np.float64)


def _to_numpy_2d(y_true, y_pred):
    def conv(a, name):
        a = _float64(a)
        if a.ndim == 1:
            a = a.reshape(-1, 1)
        if a.ndim != 2:
            raise ValueError(f"{name} must be 1-D or 2-D [G, T], got shape {a.shape}")
        return a

    yt = conv(y_true, "y_true")
    yp = conv(y_pred, "y_pred")
    if yt.shape != yp.shape:
        raise ValueError(f"y_true and y_pred must have the same shape, got {yt.shape} and {yp.shape}")
    return yt, yp


def mae(y_true, y_pred) -> float:
    """Mean absolute error ignoring ``NaN`` labels.

    ``MAE = mean_t [ mean_{g : y_true[g, t] not NaN} |y_true[g, t] - y_pred[g, t]| ]``
    over targets ``t`` with at least one label (LRGB Peptides-struct
    convention: per-target MAE, then uniform average over targets). Equal to
    the overall mean absolute error when no label is missing.

    Raises :class:`MetricUndefinedError` when there is no label at all.
    """
    yt, yp = _to_numpy_2d(y_true, y_pred)
    labelled = ~np.isnan(yt)
    per_target = []
    for t in range(yt.shape[1]):
        m = labelled[:, t]
        if m.any():
            per_target.append(float(np.mean(np.abs(yt[m, t] - yp[m, t]))))
    if not per_target:
        raise MetricUndefinedError("No labelled entries in y_true; cannot compute MAE.")
    return float(np.mean(per_target))


def _per_task_binary(yt: np.ndarray, yp: np.ndarray, score_fn, metric_name: str) -> float:
    scores = []
    for t in range(yt.shape[1]):
        col = yt[:, t]
        # OGB: a task counts only if it has at least one positive and one negative label.
        if np.sum(col == 1) > 0 and np.sum(col == 0) > 0:
            labelled = ~np.isnan(col)
            preds = yp[labelled, t]
            if not np.all(np.isfinite(preds)):
                warnings.warn(
                    f"{metric_name}: non-finite predictions for task {t}; returning nan",
                    RuntimeWarning,
                    stacklevel=3,
                )
                return float("nan")
            scores.append(float(score_fn(col[labelled], preds)))
    if not scores:
        raise MetricUndefinedError(
            f"No task has both positive (1) and negative (0) labels; cannot compute {metric_name}."
        )
    return float(sum(scores) / len(scores))


def rocauc(y_true, y_pred) -> float:
    """ROC-AUC averaged over tasks, OGB ``ogbg-molhiv`` semantics.

    Per task ``t``: skipped unless ``y_true[:, t]`` contains at least one ``1``
    and one ``0``; otherwise ``roc_auc_score`` over the non-``NaN`` entries.
    Returns the unweighted mean over evaluated tasks. Raises
    :class:`MetricUndefinedError` if no task is evaluable.
    """
    yt, yp = _to_numpy_2d(y_true, y_pred)
    return _per_task_binary(yt, yp, roc_auc_score, "ROC-AUC")


def average_precision(y_true, y_pred) -> float:
    """Average precision averaged over tasks, OGB ``ogbg-molpcba`` semantics.

    Per task ``t``: skipped unless ``y_true[:, t]`` contains at least one ``1``
    and one ``0``; otherwise ``average_precision_score`` over the non-``NaN``
    entries. Returns the unweighted mean over evaluated tasks (also the LRGB
    Peptides-func metric). Raises :class:`MetricUndefinedError` if no task is
    evaluable.
    """
    yt, yp = _to_numpy_2d(y_true, y_pred)
    return _per_task_binary(yt, yp, average_precision_score, "average precision")


def _classes(y_true, y_pred) -> tuple[np.ndarray, np.ndarray]:
    """Class ids ``[n]`` and predicted classes ``[n]`` (argmax of scores ``[n, C]``); a
    missing (NaN) label is not allowed."""
    yt, yp = _float64(y_true).reshape(-1), _float64(y_pred)
    if yp.ndim != 2 or yp.shape[0] != yt.shape[0]:
        raise ValueError(f"y_pred must be scores [n, C] for the {yt.shape[0]} labels, got shape {yp.shape}")
    if np.isnan(yt).any():
        raise ValueError("class labels must not be NaN")
    if not yt.size:
        raise MetricUndefinedError("no labels; cannot compute an accuracy")
    if not np.all(np.isfinite(yp)):
        return yt.astype(np.int64), None
    return yt.astype(np.int64), yp.argmax(axis=1)


def accuracy(y_true, y_pred) -> float:
    """Percentage of rows whose argmax score is the label: ``100 * mean(argmax(y_pred) == y_true)``.

    Non-finite scores give ``nan`` with a warning."""
    yt, pred = _classes(y_true, y_pred)
    if pred is None:
        warnings.warn("accuracy: non-finite scores; returning nan", RuntimeWarning, stacklevel=2)
        return float("nan")
    return float(100.0 * np.mean(pred == yt))


def weighted_accuracy(y_true, y_pred) -> float:
    """Benchmarking-GNNs' ``accuracy_SBM`` (``train/metrics.py``; GraphGPS's ``accuracy-SBM``):
    the mean over classes of each class's recall, in percent.

    ``100 / |K| * sum_{c in K} #{i : y_i = c, argmax_i = c} / #{i : y_i = c}``, where ``K`` is
    every class that occurs as a label or as a prediction (the rows of sklearn's confusion
    matrix); a class only ever predicted counts with recall 0. On PATTERN and CLUSTER, where
    every class is labelled, it is plain balanced accuracy. (Their code indexes the confusion
    matrix by class id, which equals the class's row only when the classes present are
    ``0..|K|-1``; here each class is counted by id, so a gap in the ids does not shift the
    rows.) Computed over all rows at once, as GraphGPS does for a split (Benchmarking-GNNs
    averaged it over batches), and in percent as Benchmarking-GNNs returns it and both papers
    report it (GraphGPS's copy, ``graphgps/logger.py``, returns the fraction). Non-finite
    scores give ``nan`` with a warning.
    """
    yt, pred = _classes(y_true, y_pred)
    if pred is None:
        warnings.warn("weighted_accuracy: non-finite scores; returning nan", RuntimeWarning, stacklevel=2)
        return float("nan")
    classes = np.union1d(yt, pred)
    recall = [np.mean(pred[yt == c] == c) if np.any(yt == c) else 0.0 for c in classes]
    return float(100.0 * np.sum(recall) / len(classes))


METRIC_FNS: Dict[str, Callable[..., float]] = {
    "mae": mae,
    "rocauc": rocauc,
    "ap": average_precision,
    "accuracy": accuracy,
    "weighted_accuracy": weighted_accuracy,
}



def _check_name(name: str) -> str:
    if name not in METRIC_FNS:
        raise ValueError(f"Unknown metric {name!r}; expected one of {sorted(METRIC_FNS)}")
    return name


def compute_metric(name: str, y_true, y_pred) -> float:
    """Compute metric ``name`` (one of ``METRIC_FNS``) on ``y_true`` / ``y_pred``."""
    return METRIC_FNS[_check_name(name)](y_true, y_pred)


def higher_is_better(name: str) -> bool:
    """``True`` for ``rocauc``, ``ap`` and the accuracies, ``False`` for ``mae``."""
    return HIGHER_IS_BETTER[_check_name(name)]


def is_better(name: str, a: float, b: float) -> bool:
    """Whether score ``a`` is strictly better than score ``b`` for metric ``name``.

    ``mae``: lower is better; ``rocauc`` / ``ap``: higher is better. ``nan``
    is worse than every number: ``is_better(name, x, nan)`` is ``True`` for
    any non-``nan`` ``x`` and ``is_better(name, nan, b)`` is always ``False``.
    """
    hib = higher_is_better(name)
    a = float(a)
    b = float(b)
    if math.isnan(a):
        return False
    if math.isnan(b):
        return True
    return a > b if hib else a < b


#: the metrics :func:`summary` reports for each task type (``multiclass``: percentages)
SUMMARY_METRICS = {"regression": ("mae", "rmse", "r2"), "binary": ("rocauc", "prauc", "accuracy"),
                   "multilabel": ("rocauc", "prauc", "accuracy"), "multiclass": ("accuracy", "weighted_accuracy")}

#: how :func:`format_summary` names each metric
SUMMARY_LABELS = {"mae": "MAE", "rmse": "RMSE", "r2": "R2", "rocauc": "ROC-AUC", "prauc": "PR-AUC",
                  "accuracy": "accuracy", "weighted_accuracy": "weighted accuracy"}


def _one_target(task: str, y: np.ndarray, p: np.ndarray) -> dict:
    """The :data:`SUMMARY_METRICS` of one target: labels ``y [n]`` (NaN: missing) and
    predictions ``p [n]`` in target units, or probabilities for classification. A metric that
    is undefined here (no label, one class only, constant labels for R²) is ``None``."""
    keep = ~np.isnan(y)
    y, p = y[keep], p[keep]
    if not y.size or not np.all(np.isfinite(p)):
        return dict.fromkeys(SUMMARY_METRICS[task])
    if task == "regression":
        err = p - y
        ss_tot = float(np.sum((y - y.mean()) ** 2))
        return {"mae": float(np.mean(np.abs(err))), "rmse": float(np.sqrt(np.mean(err ** 2))),
                "r2": 1.0 - float(np.sum(err ** 2)) / ss_tot if ss_tot > 0 else None}
    both = bool(np.any(y == 1) and np.any(y == 0))
    return {"rocauc": float(roc_auc_score(y, p)) if both else None,
            "prauc": float(average_precision_score(y, p)) if both else None,
            "accuracy": float(np.mean((p >= 0.5) == (y == 1)))}


def summary(task: str, y_true, y_pred, names: list[str] | None = None) -> dict:
    """The metrics people read off a model, per target and averaged: ``{"per_target": {name:
    {metric: value}}, "mean": {metric: value}}`` with the metrics of :data:`SUMMARY_METRICS`.

    Args:
        task: ``"regression"``, ``"binary"``, ``"multilabel"`` or ``"multiclass"``.
        y_true: labels ``[G, T]`` in target units, ``NaN`` where missing (``multiclass``:
            class ids ``[n]``).
        y_pred: predictions ``[G, T]`` in target units for regression, probabilities in
            ``[0, 1]`` for classification (``accuracy`` thresholds them at 0.5; ROC-AUC and
            PR-AUC depend on the ranking only); ``multiclass``: scores ``[n, C]``.
        names: one name per target (default ``target0``, ...); ValueError if their count differs.

    Definitions per target, over its labelled rows: ``mae = mean|p - y|``, ``rmse =
    sqrt(mean (p - y)^2)``, ``r2 = 1 - sum (p - y)^2 / sum (y - mean y)^2`` (``None`` for
    constant labels); ``rocauc`` and ``prauc`` (average precision) as sklearn computes them
    (``None`` unless both classes occur); ``accuracy`` the fraction of rows with ``(p >= 0.5)
    == y``. ``mean`` averages each metric over the targets where it is defined (``None`` if
    none). ``multiclass`` reports :func:`accuracy` and :func:`weighted_accuracy` (percent) for
    its one target. Non-finite predictions make a target's metrics ``None``.
    """
    if task == "multiclass":
        name = (names or ["target0"])[0]
        scores = {"accuracy": accuracy(y_true, y_pred), "weighted_accuracy": weighted_accuracy(y_true, y_pred)}
        return {"per_target": {name: scores}, "mean": dict(scores)}
    if task not in SUMMARY_METRICS:
        raise ValueError(f"unknown task {task!r}; expected one of {sorted(SUMMARY_METRICS)}")
    yt, yp = _to_numpy_2d(y_true, y_pred)
    names = list(names) if names else [f"target{t}" for t in range(yt.shape[1])]
    if len(names) != yt.shape[1]:  # zip would score the first targets under the names given, silently
        raise ValueError(f"names: {len(names)} names for {yt.shape[1]} targets; give one name per column")
    per_target = {n: _one_target(task, yt[:, t], yp[:, t]) for t, n in enumerate(names)}
    mean = {}
    for k in SUMMARY_METRICS[task]:
        vals = [m[k] for m in per_target.values() if m[k] is not None]
        mean[k] = float(np.mean(vals)) if vals else None
    return {"per_target": per_target, "mean": mean}


def metric_texts(scores: dict, counts: dict | None = None, of: int = 0) -> list[str]:
    """``scores`` (``{metric: value}``) as the terminal writes them (``MAE 0.512``, ``n/a``), each
    with ``(k of n)`` where ``counts[metric]`` (the targets a mean is over) is below ``of``."""
    return [f"{SUMMARY_LABELS.get(k, k)} {'n/a' if v is None else f'{v:.4g}'}"
            + (f" ({counts[k]} of {of})" if counts and v is not None and counts[k] < of else "")
            for k, v in scores.items()]


def mean_counts(res: dict) -> dict:
    """``{metric: the targets with a value}`` of a :func:`summary` ``res``: the targets its mean is over."""
    return {k: sum(scores.get(k) is not None for scores in res["per_target"].values()) for k in res["mean"]}


def format_summary(split: str, res: dict) -> list[str]:
    """Terminal lines for a :func:`summary` ``res`` of ``split``: one per target, and the mean
    when there are several, e.g. ``test  logS  MAE 0.512  RMSE 0.701  R2 0.813``; a mean over
    fewer targets than were scored (a metric undefined for some) says over how many."""
    lines = [f"{split:5s} {name}  " + "  ".join(metric_texts(scores)) for name, scores in res["per_target"].items()]
    if len(res["per_target"]) > 1:  # a target this split has no label of is no part of its mean: said
        unscored = [name for name, scores in res["per_target"].items() if all(v is None for v in scores.values())]
        scored = len(res["per_target"]) - len(unscored)
        of = f" ({scored} of {len(res['per_target'])}; no score for {', '.join(unscored)})" if unscored else ""
        # a metric undefined for some scored targets (a ROC-AUC of one class) is the mean over fewer: said per metric
        lines.append(f"{split:5s} mean over targets{of}  " + "  ".join(metric_texts(res["mean"], mean_counts(res), scored)))
    return lines
