"""``rf``: a random forest on count Morgan fingerprints, stored as plain tree arrays.

**Model.** Per target, scikit-learn's ``RandomForestRegressor`` on the labelled training rows'
standardized target (predictions mapped back to target units), or ``RandomForestClassifier`` for
``binary``/``multilabel`` (the probability of class 1), on count fingerprints
(:func:`~siggate.data.fingerprints.morgan_counts`; 100 trees, radius 2, 2,048 bins by default).

**Options.** :class:`ForestGrid` (``max_features``: the features tried at each split, a fraction or
``"sqrt"``) is searched per target on its labelled validation rows (RMSE, or log-loss for
classification, :func:`.fpinputs.val_score`); the first value is the fallback when there is no
labelled val row, and wins ties. As for :mod:`.svr`, the winner is not refitted on train+val (its
val predictions feed the combination's weights) and the test split is never read. A target with
fewer than two labelled training rows, or one class, is a constant (the mean, or the smoothed rate
``(positives + 0.5) / (rows + 1)``).

**Prediction** runs on the stored arrays with :func:`forest_predict`, a vectorized traversal in
numpy (every row walks every tree at once, leaves point to themselves), equal to scikit-learn's
``predict``/``predict_proba`` on the fitted object: the same comparisons (float32 features against
float64 thresholds, left when ``x <= threshold``) and the trees' values summed in tree order.

**Storage** (no pickle): ``predictor.json`` holds the options and, per target, the chosen option,
``y_mean``/``y_std`` and the val scores; ``arrays.pt`` holds, per target ``j``, all trees
concatenated: ``t{j}.left``, ``t{j}.right`` (int64 node indices into the concatenation; a leaf points
to itself), ``t{j}.feature`` (int64; 0 at leaves), ``t{j}.threshold`` (float64; +inf at leaves),
``t{j}.value`` (float64: the leaf's mean standardized target, or its fraction of class 1) and
``t{j}.roots`` (int64, each tree's first node).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Mapping, Sequence

import numpy as np

from .base import Prediction, PredictorFileError, load_arrays, read_manifest, save_arrays, task_info, write_manifest
from .fpinputs import (
    FingerprintTable,
    Grid,
    check_task,
    graph_labels,
    graph_smiles,
    standardizer,
    target_rows,
    val_score,
)

ARRAYS = "arrays.pt"
TREE_ARRAYS = ("left", "right", "feature", "threshold", "value", "roots")
#: rows traversed at once (bounds the ``[rows, trees]`` node matrix and the dense feature block)
_ROW_BLOCK = 2048


@dataclass(frozen=True)
class ForestGrid(Grid):
    """The options :class:`RandomForest` chooses among on validation (the first: fallback).

    Args:
        max_features: features tried at each split: a fraction of them (``1.0``: all, scikit-learn's
            regression default) or ``"sqrt"``.
    """

    max_features: tuple = (1.0, 0.3)


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
    """Refuse stored tree arrays that are missing, mis-shaped or point outside themselves.

    Raises:
        PredictorFileError: naming what is wrong.
    """
    missing = [k for k in TREE_ARRAYS if k not in trees]
    if missing:
        raise PredictorFileError(f"stored forest lacks {missing}")
    n = trees["left"].shape[0]
    if any(trees[k].shape != (n,) for k in TREE_ARRAYS[:5]) or trees["roots"].ndim != 1:
        raise PredictorFileError("stored forest arrays have inconsistent shapes")
    for k in ("left", "right", "roots"):
        if trees[k].size and (trees[k].min() < 0 or trees[k].max() >= n):
            raise PredictorFileError(f"stored forest's {k} points outside its {n} nodes")
    if trees["feature"].size and (trees["feature"].min() < 0 or trees["feature"].max() >= n_features):
        raise PredictorFileError(f"stored forest's feature indices exceed its {n_features} features")
    if not np.all((trees["left"] > np.arange(n)) | (trees["left"] == np.arange(n))) or \
            not np.all((trees["right"] > np.arange(n)) | (trees["right"] == np.arange(n))):
        raise PredictorFileError("stored forest's children must follow their parents (a tree, no cycles)")


@dataclass
class ForestModel:
    """One target's forest (arrays of :data:`TREE_ARRAYS`) or a constant (``trees`` empty)."""

    trees: dict
    constant: float = 0.0
    y_mean: float = 0.0
    y_std: float = 1.0
    classify: bool = False
    meta: dict = field(default_factory=dict)

    def output(self, x) -> np.ndarray:
        if not self.trees:
            return np.full(x.shape[0], self.constant)
        f = forest_predict(x, self.trees)
        return f if self.classify else self.y_mean + self.y_std * f


class RandomForest:
    """Random forest on count Morgan fingerprints, one per target, options chosen on validation
    (module docstring).

    Args:
        n_estimators: trees per forest.
        radius: Morgan radius of the fingerprints.
        size: fingerprint bins.
        grid: a :class:`ForestGrid` or a mapping of its fields; ``None``: the defaults.
        seed: ``random_state`` of every forest.
        n_jobs: scikit-learn's threads for fitting (predictions do not depend on it).
    """

    kind: ClassVar[str] = "rf"

    def __init__(self, n_estimators: int = 100, radius: int = 2, size: int = 2048,
                 grid: ForestGrid | Mapping | None = None, seed: int = 0, n_jobs: int = 1) -> None:
        if n_estimators < 1:
            raise ValueError(f"n_estimators must be >= 1, got {n_estimators}")
        self.n_estimators, self.radius, self.size = int(n_estimators), int(radius), int(size)
        self.grid = ForestGrid.make(grid)
        self.seed, self.n_jobs = int(seed), int(n_jobs)
        self.info = None
        self.models_: list[ForestModel] = []

    def __repr__(self) -> str:
        return (f"RandomForest(n_estimators={self.n_estimators}, radius={self.radius}, size={self.size}, "
                f"grid={self.grid.to_dict()}, seed={self.seed})")

    def options(self) -> dict:
        return {"n_estimators": self.n_estimators, "radius": self.radius, "size": self.size,
                "grid": self.grid.to_dict(), "seed": self.seed}

    def fit(self, ds) -> "RandomForest":
        """Learn each target from ``ds.train``'s labelled rows; choose its options on ``ds.val``'s."""
        check_task(ds.info, self.kind)
        self.info = ds.info
        classify = ds.info.task != "regression"
        train, val = list(ds.train), list(ds.val)
        x = FingerprintTable(graph_smiles(train, self.kind)).get(self.radius, self.size)
        xv = FingerprintTable(graph_smiles(val, self.kind)).get(self.radius, self.size)
        y_tr, y_va = graph_labels(train, ds.info), graph_labels(val, ds.info)
        self.models_ = [self._fit_target(j, x, y_tr, xv, y_va, classify) for j in range(ds.info.num_tasks)]
        return self

    def _fit_target(self, j: int, x, y_tr, xv, y_va, classify: bool) -> ForestModel:
        from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor

        name = self.info.target_names[j]
        rows, vrows = target_rows(y_tr, j), target_rows(y_va, j)
        if rows.size == 0:
            raise ValueError(f"target {name!r} has no labelled training row; the {self.kind} member cannot learn it")
        y, yv = y_tr[rows, j], y_va[vrows, j]
        if classify and not np.all((y == 0) | (y == 1)):
            raise ValueError(f"the {self.kind} member needs 0/1 labels for a {self.info.task} task (target {name!r})")
        if rows.size < 2 or (classify and np.unique(y).size < 2):
            const = (float(y.sum()) + 0.5) / (y.size + 1.0) if classify else float(np.mean(y))
            why = "one labelled training row" if rows.size < 2 else "one class among the training rows"
            return ForestModel({}, constant=const, classify=classify, meta={"why": why})
        mean, std = (0.0, 1.0) if classify else standardizer(y)
        xt = x[rows].astype(np.float32).tocsc()
        target = y.astype(np.int64) if classify else (y - mean) / std
        points = self.grid.points() if vrows.size else [self.grid.fallback()]
        best, best_at, best_score, scores = None, 0, np.inf, []
        for p in points:
            cls = RandomForestClassifier if classify else RandomForestRegressor
            est = cls(n_estimators=self.n_estimators, max_features=p["max_features"], random_state=self.seed,
                      n_jobs=self.n_jobs).fit(xt, target)
            model = ForestModel(flatten_trees(est.estimators_, classify), y_mean=mean, y_std=std, classify=classify)
            score = val_score(self.info.task, yv, model.output(xv[vrows])) if vrows.size else np.nan
            scores.append({**p, "val_score": score})
            if best is None or score < best_score:  # strict: the earlier option wins ties; NaN never wins
                best, best_at, best_score = model, len(scores) - 1, score
        best.meta = {"chosen": {k: v for k, v in scores[best_at].items() if k != "val_score"}, "scores": scores,
                     "n_train": int(rows.size), "n_val": int(vrows.size),
                     "choice": "val" if vrows.size else "fallback: no labelled val row"}
        return best

    def predict_array(self, smiles: list[str]) -> np.ndarray:
        """Predictions (float64 ``[G, T]``) for SMILES."""
        if not self.models_:
            raise RuntimeError("RandomForest: call fit (or load) before predict")
        x = FingerprintTable(smiles).get(self.radius, self.size)
        out = np.empty((len(smiles), len(self.models_)))
        for j, m in enumerate(self.models_):
            out[:, j] = m.output(x)
        return out

    def predict(self, graphs: Sequence) -> Prediction:
        import torch

        return Prediction(mean=torch.from_numpy(self.predict_array(graph_smiles(graphs, self.kind)).astype(np.float32)))

    def save(self, folder: str | Path) -> None:
        if not self.models_:
            raise RuntimeError("RandomForest: nothing to save before fit")
        folder = Path(folder)
        arrays, targets = {}, []
        for j, m in enumerate(self.models_):
            arrays.update({f"t{j}.{k}": v for k, v in m.trees.items()})
            targets.append({"name": self.info.target_names[j], "forest": bool(m.trees), "constant": m.constant,
                            "y_mean": m.y_mean, "y_std": m.y_std, **m.meta})
        folder.mkdir(parents=True, exist_ok=True)
        save_arrays(folder / ARRAYS, arrays)
        write_manifest(folder, self.kind, self.info, options=self.options(), arrays=ARRAYS, targets=targets)

    @classmethod
    def load(cls, folder: str | Path) -> "RandomForest":
        doc = read_manifest(folder)
        if doc["kind"] != cls.kind:
            raise PredictorFileError(f"{folder}: holds a {doc['kind']!r} predictor, not {cls.kind!r}")
        arrays = load_arrays(Path(folder) / ARRAYS)
        try:
            self = cls(**doc["options"])
            self.info = task_info(doc)
            classify = self.info.task != "regression"
            for j, t in enumerate(doc["targets"]):
                trees = {}
                if t["forest"]:
                    trees = {k: np.asarray(arrays.get(f"t{j}.{k}"), dtype=np.float64 if k in ("threshold", "value")
                                           else np.int64) for k in TREE_ARRAYS if f"t{j}.{k}" in arrays}
                    check_trees(trees, self.size)
                meta = {k: v for k, v in t.items() if k not in ("name", "forest", "constant", "y_mean", "y_std")}
                self.models_.append(ForestModel(trees, float(t["constant"]), float(t["y_mean"]), float(t["y_std"]),
                                                classify, meta))
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, PredictorFileError):
                raise
            raise PredictorFileError(f"{folder}: {cls.kind} manifest or arrays incomplete ({type(exc).__name__}: "
                                     f"{exc})") from None
        if len(self.models_) != self.info.num_tasks:
            raise PredictorFileError(f"{folder}: {len(self.models_)} target models for {self.info.num_tasks} targets")
        return self
