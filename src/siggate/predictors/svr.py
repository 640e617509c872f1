"""``svr``: a support-vector regressor with the MinMax kernel on count Morgan fingerprints, and its
classification twin, kernel logistic regression on the same kernel.

**Regression.** Each target is standardized with its labelled training rows' mean and std, and
scikit-learn's ``SVR(kernel="precomputed", C, epsilon)`` learns it on the MinMax kernel
(:func:`~siggate.predictors.kernel.minmax_kernel`) of the count fingerprints
(:func:`~siggate.data.fingerprints.morgan_counts`); predictions are mapped back to target units.

**Classification** (``binary``, ``multilabel``: one model per target): kernel logistic regression,
the log-loss with an L2 penalty in the kernel's feature space, fitted by scikit-learn's
``LogisticRegression(C)`` on the kernel map ``Φ = K_nm W`` (:func:`~.kernel.nystrom_projection`;
with every training row a landmark, ``ΦΦᵀ = K``: exact). Chosen over an SVC with Platt scaling
because its probabilities come from the model's own maximum-likelihood fit: Platt scaling in libsvm
fits a second model on an internal 5-fold cross-validation (five more fits, randomness, and
probabilities whose ranking can disagree with the decision function), or it would need held-out
rows that ``fit`` keeps for choosing options.

**Large sets.** A target with more than ``exact_max`` labelled training rows would need a dense
``n × n`` kernel (10 GB in float32 at 50,000 rows), so it is fitted on Nyström features from
``landmarks`` training rows drawn with ``seed``: ridge regression (the squared loss with penalty
``1/C``; ``epsilon`` is not used) for regression, the same logistic regression for classification.
The features are built in blocks of rows and never held for a regression, so memory is
``O(landmarks²)`` plus one block.

**Options.** The grid (:class:`SVRGrid`: radius, size, C, epsilon) is searched per target, each
point fitted on the training rows and scored on the labelled validation rows of that target (RMSE,
or log-loss for classification, :func:`.fpinputs.val_score`); the lowest score wins, the earlier
point on ties. A target without labelled val rows gets the grid's first point (the defaults start
with the issue's baseline: radius 2, 2,048 bins, C=5, epsilon=0.05). The winner is **not** refitted
on train+val: the members' val predictions must stay out-of-sample, because the combination of
members learns its weights on the validation split. The test split is never read.

**Every model** predicts ``f(x) = Σ_i coef_i K(x, s_i) + intercept`` over stored count
fingerprints ``s_i`` (support vectors, or Nyström landmarks with ``coef = W w``), then
``y_mean + y_std · f`` (regression) or ``sigmoid(f)`` (classification). A target with fewer than
two labelled training rows, or one class only, is a constant: the mean, or the smoothed rate
``(positives + 0.5) / (rows + 1)``.

**Storage** (no pickle): ``predictor.json`` holds the options and, per target, the chosen point,
the mode, ``intercept``, ``y_mean``/``y_std`` and the val scores of every grid point;
``arrays.pt`` holds, per target ``j``, ``t{j}.support.{indptr,indices,counts}`` (CSR int64, int64,
int32 counts of the stored fingerprints) and ``t{j}.coef`` (float64).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Mapping, Sequence

import numpy as np

from .base import Prediction, PredictorFileError, load_arrays, read_manifest, save_arrays, task_info, write_manifest
from .fpinputs import (
    FingerprintTable,
    Grid,
    check_task,
    csr_from_arrays,
    csr_to_arrays,
    graph_labels,
    graph_smiles,
    sigmoid,
    standardizer,
    target_rows,
    val_score,
)
from .kernel import minmax_kernel, nystrom_projection

ARRAYS = "arrays.pt"
#: rows of Nyström features computed at once (bounds the ``[rows, landmarks]`` scratch kernel)
_ROW_BLOCK = 4096


@dataclass(frozen=True)
class SVRGrid(Grid):
    """The options :class:`KernelSVR` chooses among on validation (first value of each: fallback).

    Args:
        radius: Morgan radii.
        size: fingerprint sizes (bins).
        C: SVR / logistic-regression penalty weights (larger: less regularization).
        epsilon: SVR's insensitive-tube half-widths, in standardized target units (regression
            on the exact kernel only).
    """

    radius: tuple = (2, 3)
    size: tuple = (2048,)
    C: tuple = (5.0, 1.0, 20.0)
    epsilon: tuple = (0.05, 0.2)


@dataclass
class KernelModel:
    """One target's fitted model: ``f(x) = K(x, support) @ coef + intercept`` (module docstring).

    ``mode`` is ``"svr"`` (exact SVR), ``"ridge"`` (Nyström ridge), ``"klr"`` (kernel logistic
    regression, exact or Nyström) or ``"constant"``."""

    mode: str
    radius: int
    size: int
    support: object  # scipy CSR [k, size] int32 counts
    coef: np.ndarray  # float64 [k]
    intercept: float
    y_mean: float = 0.0
    y_std: float = 1.0
    classify: bool = False
    meta: dict = field(default_factory=dict)

    def decision(self, x) -> np.ndarray:
        """``f`` for count fingerprints ``x [n, size]`` (float64 [n])."""
        if self.coef.size == 0:
            return np.full(x.shape[0], self.intercept)
        return minmax_kernel(x, self.support) @ self.coef + self.intercept

    def output(self, f: np.ndarray) -> np.ndarray:
        return sigmoid(f) if self.classify else self.y_mean + self.y_std * f


def _constant(y: np.ndarray, classify: bool, radius: int, size: int, why: str) -> KernelModel:
    import scipy.sparse as sp

    if classify:
        p = (float(np.sum(y)) + 0.5) / (y.size + 1.0)
        intercept, mean = float(np.log(p / (1 - p))), 0.0
    else:
        intercept, mean = 0.0, float(np.mean(y))
    return KernelModel("constant", radius, size, sp.csr_matrix((0, size), dtype=np.int32), np.zeros(0), intercept,
                       y_mean=mean, classify=classify, meta={"why": why})


def _nystrom_features(x, landmarks, w: np.ndarray) -> np.ndarray:
    """``Φ = K(x, landmarks) W`` in blocks of rows."""
    return np.concatenate([minmax_kernel(x[lo : lo + _ROW_BLOCK], landmarks) @ w
                           for lo in range(0, x.shape[0], _ROW_BLOCK)] or [np.zeros((0, w.shape[1]))])


class KernelSVR:
    """MinMax-kernel SVR (regression) / kernel logistic regression (classification) on count Morgan
    fingerprints, one model per target, options chosen on validation (module docstring).

    Args:
        grid: an :class:`SVRGrid` or a mapping of its fields (``{"C": [1, 5]}``); ``None``: the defaults.
        exact_max: the most labelled training rows of a target fitted on the exact kernel; above
            it, Nyström features.
        landmarks: Nyström landmarks (training rows drawn with ``seed``) above ``exact_max``.
        seed: seeds the landmarks' draw (the exact fits are deterministic).
    """

    kind: ClassVar[str] = "svr"

    def __init__(self, grid: SVRGrid | Mapping | None = None, exact_max: int = 5000, landmarks: int = 2000,
                 seed: int = 0) -> None:
        self.grid = SVRGrid.make(grid)
        if exact_max < 1 or landmarks < 1:
            raise ValueError(f"exact_max and landmarks must be >= 1, got {exact_max} and {landmarks}")
        self.exact_max, self.landmarks, self.seed = int(exact_max), int(landmarks), int(seed)
        self.info = None
        self.models_: list[KernelModel] = []

    def __repr__(self) -> str:
        return (f"KernelSVR(grid={self.grid.to_dict()}, exact_max={self.exact_max}, landmarks={self.landmarks}, "
                f"seed={self.seed})")

    def options(self) -> dict:
        return {"grid": self.grid.to_dict(), "exact_max": self.exact_max, "landmarks": self.landmarks,
                "seed": self.seed}

    # ------------------------------------------------------------------------------------- fit

    def fit(self, ds) -> "KernelSVR":
        """Learn each target from ``ds.train``'s labelled rows; choose its options on ``ds.val``'s."""
        check_task(ds.info, self.kind)
        self.info = ds.info
        classify = ds.info.task != "regression"
        train, val = list(ds.train), list(ds.val)
        fp_tr, fp_va = FingerprintTable(graph_smiles(train, self.kind)), FingerprintTable(graph_smiles(val, self.kind))
        y_tr, y_va = graph_labels(train, ds.info), graph_labels(val, ds.info)
        if classify:
            labels = np.concatenate([y_tr[np.isfinite(y_tr)], y_va[np.isfinite(y_va)]])
            if not np.all((labels == 0) | (labels == 1)):
                raise ValueError(f"the {self.kind} member needs 0/1 labels for a {ds.info.task} task")
        self.models_ = [self._fit_target(j, fp_tr, y_tr, fp_va, y_va, classify) for j in range(ds.info.num_tasks)]
        return self

    def _fit_target(self, j: int, fp_tr, y_tr, fp_va, y_va, classify: bool) -> KernelModel:
        name = self.info.target_names[j]
        rows, vrows = target_rows(y_tr, j), target_rows(y_va, j)
        if rows.size == 0:
            raise ValueError(f"target {name!r} has no labelled training row; the {self.kind} member cannot learn it")
        y, yv = y_tr[rows, j], y_va[vrows, j]
        first = self.grid.fallback()
        if rows.size < 2 or (classify and np.unique(y).size < 2):
            why = "one labelled training row" if rows.size < 2 else "one class among the training rows"
            return _constant(y, classify, first["radius"], first["size"], why)
        mean, std = (0.0, 1.0) if classify else standardizer(y)
        ys = y if classify else (y - mean) / std
        points = self.grid.points() if vrows.size else [first]
        mode = "klr" if classify else ("svr" if rows.size <= self.exact_max else "ridge")
        if mode != "svr":  # epsilon is an SVR option: keep one point per (radius, size, C)
            points = [p for p in points if p["epsilon"] == self.grid.epsilon[0]]
        best, best_at, best_score, scores = None, 0, np.inf, []
        for (radius, size), group in _by_fingerprint(points):
            x = fp_tr.get(radius, size)[rows]
            xv = fp_va.get(radius, size)[vrows]
            for p, model in zip(group, self._fit_points(mode, x, ys, group, j)):
                model.radius, model.size, model.y_mean, model.y_std, model.classify = radius, size, mean, std, classify
                score = val_score(self.info.task, yv, model.output(model.decision(xv))) if vrows.size else np.nan
                scores.append({**p, "epsilon": p["epsilon"] if mode == "svr" else None, "val_score": score})
                if best is None or score < best_score:  # strict: the earlier point wins ties; NaN never wins
                    best, best_at, best_score = model, len(scores) - 1, score
        best.meta = {**best.meta, "chosen": {k: v for k, v in scores[best_at].items() if k != "val_score"}, "scores": scores,
                     "n_train": int(rows.size), "n_val": int(vrows.size),
                     "choice": "val" if vrows.size else "fallback: no labelled val row"}
        return best

    def _fit_points(self, mode: str, x, ys: np.ndarray, points: list[dict], j: int) -> list[KernelModel]:
        """One model per grid point sharing one fingerprint (the kernel work is done once)."""
        if mode == "svr":
            from sklearn.svm import SVR

            k = minmax_kernel(x, x)
            out = []
            for p in points:
                svr = SVR(kernel="precomputed", C=float(p["C"]), epsilon=float(p["epsilon"]), cache_size=500).fit(k, ys)
                sup = np.asarray(svr.support_, dtype=np.int64)
                out.append(KernelModel("svr", 0, 0, x[sup], np.asarray(svr.dual_coef_, dtype=np.float64).ravel().copy(),
                                       float(svr.intercept_[0]), meta={"basis": "exact"}))
            return out
        exact = x.shape[0] <= self.exact_max
        pick = (np.arange(x.shape[0]) if exact else
                np.sort(np.random.default_rng([self.seed, j]).choice(x.shape[0], size=self.landmarks, replace=False)))
        land = x[pick]
        w = nystrom_projection(minmax_kernel(land, land))
        basis = "exact" if exact else f"nystrom {pick.size}"
        if mode == "ridge":
            return [KernelModel("ridge", 0, 0, land, w @ coef, icpt, meta={"basis": basis})
                    for coef, icpt in _ridge_path(x, land, w, ys, [1.0 / float(p["C"]) for p in points])]
        from sklearn.exceptions import ConvergenceWarning
        from sklearn.linear_model import LogisticRegression

        phi = _nystrom_features(x, land, w)
        out = []
        for p in points:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                lr = LogisticRegression(C=float(p["C"]), tol=1e-6, max_iter=2000).fit(phi, ys.astype(np.int64))
            out.append(KernelModel("klr", 0, 0, land, w @ lr.coef_.ravel().astype(np.float64),
                                   float(lr.intercept_[0]), meta={"basis": basis}))
        return out

    # ------------------------------------------------------------------------------------- predict

    def decision_and_output(self, smiles: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """``f`` and the predictions (float64 ``[G, T]``) for SMILES."""
        if not self.models_:
            raise RuntimeError("KernelSVR: call fit (or load) before predict")
        table = FingerprintTable(smiles)
        f = np.empty((len(smiles), len(self.models_)))
        out = np.empty_like(f)
        for j, m in enumerate(self.models_):
            f[:, j] = m.decision(table.get(m.radius, m.size))
            out[:, j] = m.output(f[:, j])
        return f, out

    def predict(self, graphs: Sequence) -> Prediction:
        import torch

        _, out = self.decision_and_output(graph_smiles(graphs, self.kind))
        return Prediction(mean=torch.from_numpy(out.astype(np.float32)))

    # ------------------------------------------------------------------------------------- storage

    def save(self, folder: str | Path) -> None:
        if not self.models_:
            raise RuntimeError("KernelSVR: nothing to save before fit")
        folder = Path(folder)
        arrays, targets = {}, []
        for j, m in enumerate(self.models_):
            arrays.update(csr_to_arrays(f"t{j}.support", m.support))
            arrays[f"t{j}.coef"] = np.asarray(m.coef, dtype=np.float64)
            targets.append({"name": self.info.target_names[j], "mode": m.mode, "radius": m.radius, "size": m.size,
                            "intercept": m.intercept, "y_mean": m.y_mean, "y_std": m.y_std, **m.meta})
        folder.mkdir(parents=True, exist_ok=True)
        save_arrays(folder / ARRAYS, arrays)
        write_manifest(folder, self.kind, self.info, options=self.options(), arrays=ARRAYS, targets=targets)

    @classmethod
    def load(cls, folder: str | Path) -> "KernelSVR":
        doc = read_manifest(folder)
        if doc["kind"] != cls.kind:
            raise PredictorFileError(f"{folder}: holds a {doc['kind']!r} predictor, not {cls.kind!r}")
        arrays = load_arrays(Path(folder) / ARRAYS)
        self = cls(**doc["options"])
        self.info = task_info(doc)
        classify = self.info.task != "regression"
        try:
            for j, t in enumerate(doc["targets"]):
                support = csr_from_arrays(arrays, f"t{j}.support", int(t["size"]))
                coef = np.asarray(arrays[f"t{j}.coef"], dtype=np.float64)
                if coef.shape != (support.shape[0],):
                    raise PredictorFileError(f"{folder}: target {j} has {coef.size} coefficients for "
                                             f"{support.shape[0]} stored fingerprints")
                meta = {k: v for k, v in t.items()
                        if k not in ("name", "mode", "radius", "size", "intercept", "y_mean", "y_std")}
                self.models_.append(KernelModel(t["mode"], int(t["radius"]), int(t["size"]), support, coef,
                                                float(t["intercept"]), float(t["y_mean"]), float(t["y_std"]),
                                                classify, meta))
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, PredictorFileError):
                raise
            raise PredictorFileError(f"{folder}: {cls.kind} manifest or arrays incomplete ({type(exc).__name__}: "
                                     f"{exc})") from None
        if len(self.models_) != self.info.num_tasks:
            raise PredictorFileError(f"{folder}: {len(self.models_)} target models for {self.info.num_tasks} targets")
        return self


def _by_fingerprint(points: list[dict]) -> list[tuple[tuple[int, int], list[dict]]]:
    """Grid points grouped by ``(radius, size)``, groups and points in grid order."""
    groups: dict = {}
    for p in points:
        groups.setdefault((int(p["radius"]), int(p["size"])), []).append(p)
    return list(groups.items())


def _ridge_path(x, land, w: np.ndarray, ys: np.ndarray, lams: list[float]) -> list[tuple[np.ndarray, float]]:
    """Ridge regression with an intercept on Nyström features ``Φ = K(x, land) W`` for each penalty
    ``λ`` (``min Σ(y - Φv - b)² + λ‖v‖²``), from ``ΦᵀΦ`` accumulated in blocks of rows; ``(v, b)``."""
    r = w.shape[1]
    gram, rhs, col = np.zeros((r, r)), np.zeros(r), np.zeros(r)
    for lo in range(0, x.shape[0], _ROW_BLOCK):
        phi = minmax_kernel(x[lo : lo + _ROW_BLOCK], land) @ w
        gram += phi.T @ phi
        rhs += phi.T @ ys[lo : lo + _ROW_BLOCK]
        col += phi.sum(axis=0)
    n = x.shape[0]
    mu, ybar = col / n, float(np.mean(ys))
    gram_c = gram - n * np.outer(mu, mu)
    rhs_c = rhs - n * mu * ybar
    out = []
    for lam in lams:
        v = np.linalg.solve(gram_c + lam * np.eye(r), rhs_c)
        out.append((v, ybar - float(mu @ v)))
    return out
