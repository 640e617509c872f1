"""``rf``: a random forest on count Morgan fingerprints, stored as plain tree arrays.

**Model.** Per target, scikit-learn's ``RandomForestRegressor`` on the labelled training rows'
standardized target (predictions mapped back to target units), or ``RandomForestClassifier`` for
``binary``/``multilabel`` (the probability of class 1), on count fingerprints
(:func:`~siggate.data.fingerprints.morgan_counts`; 100 trees, radius 2, 2,048 bins, 30% of the
features tried at each split by default).

**Options.** :class:`ForestGrid` (``max_features``: the features tried at each split, a fraction or
``"sqrt"``) is searched per target on its labelled validation rows (RMSE, or log-loss for
classification, :func:`.fpmember.val_score`); the first value is the fallback when there is no
labelled val row, and wins ties. As for :mod:`.svr`, with ``refit`` (the default) the winner is
fitted again on the train and val rows, its train-only val predictions kept out of sample for the
combination's weights and the calibration; the test split is never read. A target with
fewer than two labelled training rows, or one class, is a constant (:class:`.fpmember.ConstantModel`)
on them; with ``refit`` it is learned again from its train and val rows (:mod:`.fpmember`).

**Prediction** runs on the stored arrays with :func:`forest_predict`, a vectorized traversal in
numpy (every row walks every tree at once, leaves point to themselves), equal to scikit-learn's
``predict``/``predict_proba`` on the fitted object: the same comparisons (float32 features against
float64 thresholds, left when ``x <= threshold``) and the trees' values summed in tree order.

**Storage** (no pickle, :class:`.fpmember.FingerprintMember`): ``predictor.json`` holds the options
and, per target, ``mode`` (``forest`` or ``constant``), ``y_mean``/``y_std`` and ``meta`` (the chosen
option, the val scores); ``arrays.pt`` holds, per target ``j``, all trees
concatenated: ``t{j}.left``, ``t{j}.right`` (int64 node indices into the concatenation; a leaf points
to itself), ``t{j}.feature`` (int64; 0 at leaves), ``t{j}.threshold`` (float64; +inf at leaves),
``t{j}.value`` (float64: the leaf's mean standardized target, or its fraction of class 1) and
``t{j}.roots`` (int64, each tree's first node).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from ..options import FP_SIZE_MAX, ForestMemberOptions
from .base import PredictorFileError
from .fpmember import (
    FingerprintMember,
    FingerprintTable,
    Grid,
    Selection,
    TargetData,
    finite_array,
    standardizer,
    stored_count,
    stored_number,
)

TREE_ARRAYS = ("left", "right", "feature", "threshold", "value", "roots")
#: rows traversed at once (bounds the ``[rows, trees]`` node matrix and the dense feature block)
_ROW_BLOCK = 2048


@dataclass(frozen=True)
class ForestGrid(Grid):
    """The options :class:`RandomForest` chooses among on validation (the first: fallback).

    Args:
        max_features: features tried at each split: a fraction of them (``1.0``: all, scikit-learn's
            regression default) or ``"sqrt"``.

    The default is one point, 0.3: against 1.0 (the published MoleculeACE RF's setting) it had
    the lower validation RMSE on 16 of the 20 public MoleculeACE targets and on their mean, and
    it fits about three times faster (``benchmarks/moleculeace/members_check.py``), so a
    per-target choice between the two is not worth a second forest. Give more values to choose.
    """

    max_features: tuple = ForestMemberOptions.max_features

    def __post_init__(self) -> None:
        super().__post_init__()
        # a fraction, as a float: scikit-learn reads an integer as a count of features (1: one feature)
        object.__setattr__(self, "max_features", tuple(
            float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v for v in self.max_features))


def flatten_trees(estimators, classify: bool) -> dict:
    """The arrays of :data:`TREE_ARRAYS` for fitted scikit-learn trees (module docstring)."""
    parts = {k: [] for k in TREE_ARRAYS}
    offset = 0
    for est in estimators:
        t = est.tree_
        n = t.node_count
        leaf = t.children_left == -1
        ids = np.arange(n, dtype=np.int64) + offset
        parts["left"].append(np.where(leaf, ids, t.children_left.astype(np.int64) + offset))
        parts["right"].append(np.where(leaf, ids, t.children_right.astype(np.int64) + offset))
        parts["feature"].append(np.where(leaf, 0, t.feature).astype(np.int64))
        parts["threshold"].append(np.where(leaf, np.inf, t.threshold).astype(np.float64))
        v = np.asarray(t.value, dtype=np.float64)[:, 0, :]
        if classify:
            norm = v.sum(axis=1)
            norm[norm == 0] = 1.0
            parts["value"].append(v[:, 1] / norm)  # predict_proba's normalization, class 1
        else:
            parts["value"].append(v[:, 0].copy())
        parts["roots"].append(np.array([offset], dtype=np.int64))
        offset += n
    return {k: np.concatenate(v) for k, v in parts.items()}


def forest_predict(x, trees: Mapping) -> np.ndarray:
    """Mean over the trees of each row's leaf value (float64 ``[n]``).

    Args:
        x: ``[n, F]`` features (dense or SciPy sparse; compared as float32, as scikit-learn does).
        trees: the arrays of :data:`TREE_ARRAYS`.
    """
    import scipy.sparse as sp

    left, right, feature = trees["left"], trees["right"], trees["feature"]
    threshold, value, roots = trees["threshold"], trees["value"], trees["roots"]
    n = x.shape[0]
    out = np.zeros(n, dtype=np.float64)
    for lo in range(0, n, _ROW_BLOCK):
        xb = x[lo : lo + _ROW_BLOCK]
        xb = np.asarray(xb.toarray() if sp.issparse(xb) else xb, dtype=np.float32)
        rows = np.arange(xb.shape[0])[:, None]
        node = np.repeat(roots[None, :], xb.shape[0], axis=0)  # [rows, trees]
        while True:
            nxt = np.where(xb[rows, feature[node]] <= threshold[node], left[node], right[node])
            if np.array_equal(nxt, node):
                break
            node = nxt
        leaf = value[node]
        acc = np.zeros(xb.shape[0], dtype=np.float64)
        for t in range(leaf.shape[1]):  # tree order, as scikit-learn accumulates
            acc += leaf[:, t]
        out[lo : lo + xb.shape[0]] = acc / leaf.shape[1]
    return out


def check_trees(trees: Mapping, n_features: int) -> None:
    """Refuse stored tree arrays that are missing, mis-shaped, point outside themselves, or
    split at a threshold that is no number.

    Raises:
        PredictorFileError: naming what is wrong.
    """
    missing = [k for k in TREE_ARRAYS if k not in trees]
    if missing:
        raise PredictorFileError(f"stored forest lacks {missing}")
    n = trees["left"].shape[0]
    if any(trees[k].shape != (n,) for k in TREE_ARRAYS[:5]) or trees["roots"].ndim != 1:
        raise PredictorFileError("stored forest arrays have inconsistent shapes")
    if trees["roots"].size == 0:  # (a mean over no tree: NaN for every molecule)
        raise PredictorFileError("stored forest has no tree (its roots are empty)")
    for k in ("left", "right", "roots"):
        if trees[k].size and (trees[k].min() < 0 or trees[k].max() >= n):
            raise PredictorFileError(f"stored forest's {k} points outside its {n} nodes")
    if trees["feature"].size and (trees["feature"].min() < 0 or trees["feature"].max() >= n_features):
        raise PredictorFileError(f"stored forest's feature indices exceed its {n_features} features")
    if not np.all((trees["left"] > np.arange(n)) | (trees["left"] == np.arange(n))) or \
            not np.all((trees["right"] > np.arange(n)) | (trees["right"] == np.arange(n))):
        raise PredictorFileError("stored forest's children must follow their parents (a tree, no cycles)")
    split = trees["left"] != np.arange(n)  # (a leaf's threshold is inf: its rows stay)
    if np.isnan(trees["threshold"]).any() or not np.isfinite(trees["threshold"][split]).all():
        raise PredictorFileError("stored forest's threshold holds NaN, or inf at a split")


@dataclass
class ForestModel:
    """One target's forest: the arrays of :data:`TREE_ARRAYS` on ``(radius, size)`` count fingerprints."""

    trees: dict
    radius: int
    size: int
    classify: bool = False
    y_mean: float = 0.0
    y_std: float = 1.0
    meta: dict = field(default_factory=dict)

    def output(self, table: FingerprintTable) -> np.ndarray:
        f = forest_predict(table.get(self.radius, self.size), self.trees)
        return f if self.classify else self.y_mean + self.y_std * f

    def fields(self) -> dict:
        return {"mode": "forest", "radius": self.radius, "size": self.size, "y_mean": self.y_mean, "y_std": self.y_std}

    def arrays(self, prefix: str) -> dict:
        return {f"{prefix}.{k}": v for k, v in self.trees.items()}


class RandomForest(FingerprintMember):
    """Random forest on count Morgan fingerprints, one per target, options chosen on validation
    (module docstring).

    Args:
        n_estimators: trees per forest.
        radius: Morgan radius of the fingerprints.
        size: fingerprint bins.
        grid: a :class:`ForestGrid` or a mapping of its fields; ``None``: the defaults.
        seed: ``random_state`` of every forest.
        n_jobs: scikit-learn's threads for fitting (predictions do not depend on it).
        refit: after choosing on val, fit the chosen option again on the train and val rows
            (:class:`.fpmember.FingerprintMember`).
    """

    kind = "rf"

    def __init__(self, n_estimators: int = ForestMemberOptions.n_estimators, radius: int = ForestMemberOptions.radius,
                 size: int = ForestMemberOptions.size,
                 grid: ForestGrid | Mapping | None = None, seed: int = 0, n_jobs: int = 1, refit: bool = True) -> None:
        super().__init__(refit)
        self.grid = ForestGrid.make(grid)
        ForestMemberOptions(n_estimators, radius, size, tuple(self.grid.max_features)).check()  # its one home
        self.n_estimators, self.radius, self.size = int(n_estimators), int(radius), int(size)
        self.seed, self.n_jobs = int(seed), int(n_jobs)

    def options(self) -> dict:
        return {"n_estimators": self.n_estimators, "radius": self.radius, "size": self.size,
                "grid": self.grid.to_dict(), "seed": self.seed, "n_jobs": self.n_jobs, "refit": self.refit}

    def _fit_target(self, data: TargetData, points: list[dict] | None = None) -> ForestModel:
        from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor

        mean, std = (0.0, 1.0) if data.classify else standardizer(data.y)
        x = data.x(self.radius, self.size).astype(np.float32).tocsc()
        target = data.y.astype(np.int64) if data.classify else (data.y - mean) / std
        cls = RandomForestClassifier if data.classify else RandomForestRegressor
        choice = Selection(data)
        if points is None:
            points = self.grid.points() if data.val_rows.size else [self.grid.fallback()]
        for p in points:
            est = cls(n_estimators=self.n_estimators, max_features=p["max_features"], random_state=self.seed,
                      n_jobs=self.n_jobs).fit(x, target)
            choice.offer(ForestModel(flatten_trees(est.estimators_, data.classify), self.radius, self.size,
                                     data.classify, mean, std), p)
        return choice.result()

    def _restore(self, t: dict, arrays: Mapping, prefix: str) -> ForestModel:
        if t["mode"] != "forest":
            raise PredictorFileError(f"unknown {self.kind} target mode {t['mode']!r}")
        trees = {k: np.asarray(arrays[f"{prefix}.{k}"], dtype=np.float64 if k in ("threshold", "value") else np.int64)
                 for k in TREE_ARRAYS if f"{prefix}.{k}" in arrays}
        radius, size = stored_count(t, "radius", 0), stored_count(t, "size", 1, FP_SIZE_MAX)
        classify = self.info.task != "regression"
        check_trees(trees, size)
        finite_array(trees["value"], f"{prefix}.value", probability=classify)  # a classifier's leaves: P(class 1)
        return ForestModel(trees, radius, size, classify, stored_number(t, "y_mean"),
                           stored_number(t, "y_std", positive=True))
