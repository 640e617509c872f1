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
two labelled training rows, or one class only, is a constant (:class:`.fpmember.ConstantModel`).

**Storage** (no pickle, :class:`.fpmember.FingerprintMember`): ``predictor.json`` holds the options
and, per target, ``mode`` (``svr``, ``ridge``, ``klr`` or ``constant``), ``radius``, ``size``,
``intercept``, ``y_mean``/``y_std`` and ``meta`` (the chosen point, the val scores of every grid
point, the basis: ``exact`` or ``nystrom m``); ``arrays.pt`` holds, per target ``j``,
``t{j}.support.{indptr,indices,counts}`` (CSR int64, int64, int32 counts of the stored
fingerprints) and ``t{j}.coef`` (float64).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from .base import PredictorFileError
from .fpmember import (
    FingerprintMember,
    FingerprintTable,
    Grid,
    Selection,
    TargetData,
    csr_from_arrays,
    csr_to_arrays,
    sigmoid,
    standardizer,
)
from .kernel import minmax_kernel, nystrom_projection

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

    The defaults keep, of the wider grid radius {2, 3} x C {5, 1, 20} x epsilon {0.05, 0.2},
    the points whose mean *validation* RMSE over the 20 public MoleculeACE targets was lowest:
    C=1 and epsilon=0.2 were worse on val at every other setting
    (``benchmarks/moleculeace/members_check.py``; its JSON holds every point's figures).
    """

    radius: tuple = (2, 3)
    size: tuple = (2048,)
    C: tuple = (5.0, 20.0)
    epsilon: tuple = (0.05,)


@dataclass
class KernelModel:
    """One target's fitted model: ``f(x) = K(x, support) @ coef + intercept`` (module docstring);
    ``mode`` is ``"svr"`` (exact SVR), ``"ridge"`` (Nyström ridge) or ``"klr"`` (kernel logistic
    regression, exact or Nyström)."""

    mode: str
    radius: int
    size: int
    support: object  # scipy CSR [k, size] int32 counts
    coef: np.ndarray  # float64 [k]
    intercept: float
    y_mean: float = 0.0
    y_std: float = 1.0
    meta: dict = field(default_factory=dict)

    def decision(self, x) -> np.ndarray:
        """``f`` for count fingerprints ``x [n, size]`` (float64 [n])."""
        return minmax_kernel(x, self.support) @ self.coef + self.intercept

    def output(self, table: FingerprintTable) -> np.ndarray:
        f = self.decision(table.get(self.radius, self.size))
        return sigmoid(f) if self.mode == "klr" else self.y_mean + self.y_std * f

    def fields(self) -> dict:
        return {"mode": self.mode, "radius": self.radius, "size": self.size, "intercept": self.intercept,
                "y_mean": self.y_mean, "y_std": self.y_std}

    def arrays(self, prefix: str) -> dict:
        return {**csr_to_arrays(f"{prefix}.support", self.support), f"{prefix}.coef": np.asarray(self.coef, np.float64)}


def _nystrom_features(x, landmarks, w: np.ndarray) -> np.ndarray:
    """``Φ = K(x, landmarks) W`` in blocks of rows."""
    return np.concatenate([minmax_kernel(x[lo : lo + _ROW_BLOCK], landmarks) @ w
                           for lo in range(0, x.shape[0], _ROW_BLOCK)] or [np.zeros((0, w.shape[1]))])


class KernelSVR(FingerprintMember):
    """MinMax-kernel SVR (regression) / kernel logistic regression (classification) on count Morgan
    fingerprints, one model per target, options chosen on validation (module docstring).

    Args:
        grid: an :class:`SVRGrid` or a mapping of its fields (``{"C": [1, 5]}``); ``None``: the defaults.
        exact_max: the most labelled training rows of a target fitted on the exact kernel; above
            it, Nyström features.
        landmarks: Nyström landmarks (training rows drawn with ``seed``) above ``exact_max``.
        seed: seeds the landmarks' draw (the exact fits are deterministic).
    """

    kind = "svr"

    def __init__(self, grid: SVRGrid | Mapping | None = None, exact_max: int = 5000, landmarks: int = 2000,
                 seed: int = 0) -> None:
        super().__init__()
        self.grid = SVRGrid.make(grid)
        if exact_max < 1 or landmarks < 1:
            raise ValueError(f"exact_max and landmarks must be >= 1, got {exact_max} and {landmarks}")
        self.exact_max, self.landmarks, self.seed = int(exact_max), int(landmarks), int(seed)

    def options(self) -> dict:
        return {"grid": self.grid.to_dict(), "exact_max": self.exact_max, "landmarks": self.landmarks,
                "seed": self.seed}

    def _fit_target(self, data: TargetData) -> KernelModel:
        mean, std = (0.0, 1.0) if data.classify else standardizer(data.y)
        ys = data.y if data.classify else (data.y - mean) / std
        points = self.grid.points() if data.val_rows.size else [self.grid.fallback()]
        mode = "klr" if data.classify else ("svr" if data.rows.size <= self.exact_max else "ridge")
        if mode != "svr":  # epsilon is an SVR option: keep one point per (radius, size, C)
            points = [{**p, "epsilon": None} for p in points if p["epsilon"] == self.grid.epsilon[0]]
        pick = self._basis(data.rows.size, data.index)
        choice = Selection(data)
        for (radius, size), group in _by_fingerprint(points):
            for p, (mode_, support, coef, icpt, basis) in zip(group, self._fit_points(mode, data.x(radius, size), ys,
                                                                                       group, pick)):
                choice.offer(KernelModel(mode_, radius, size, support, coef, icpt, mean, std, {"basis": basis}), p)
        return choice.result()

    def _basis(self, n: int, j: int) -> np.ndarray | None:
        """Landmark rows above ``exact_max`` (drawn with ``(seed, target)``), else ``None``."""
        if n <= self.exact_max:
            return None
        return np.sort(np.random.default_rng([self.seed, j]).choice(n, size=min(self.landmarks, n), replace=False))

    def _fit_points(self, mode: str, x, ys: np.ndarray, points: list[dict], pick) -> list[tuple]:
        """``(mode, support, coef, intercept, basis)`` per grid point sharing one fingerprint (the
        kernel work is done once)."""
        if mode == "svr":
            from sklearn.svm import SVR

            k = minmax_kernel(x, x)
            out = []
            for p in points:
                svr = SVR(kernel="precomputed", C=float(p["C"]), epsilon=float(p["epsilon"]), cache_size=500).fit(k, ys)
                sup = np.asarray(svr.support_, dtype=np.int64)
                out.append(("svr", x[sup], np.asarray(svr.dual_coef_, dtype=np.float64).ravel().copy(),
                            float(svr.intercept_[0]), "exact"))
            return out
        land = x if pick is None else x[pick]
        basis = "exact" if pick is None else f"nystrom {pick.size}"
        w = nystrom_projection(minmax_kernel(land, land))
        if mode == "ridge":
            return [("ridge", land, w @ coef, icpt, basis)
                    for coef, icpt in _ridge_path(x, land, w, ys, [1.0 / float(p["C"]) for p in points])]
        from sklearn.exceptions import ConvergenceWarning
        from sklearn.linear_model import LogisticRegression

        phi = _nystrom_features(x, land, w)
        out = []
        for p in points:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                lr = LogisticRegression(C=float(p["C"]), tol=1e-6, max_iter=2000).fit(phi, ys.astype(np.int64))
            out.append(("klr", land, w @ lr.coef_.ravel().astype(np.float64), float(lr.intercept_[0]), basis))
        return out

    def decision_and_output(self, smiles: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """``f`` (NaN for a constant target) and the predictions, float64 ``[G, T]``, for SMILES."""
        out = self.predict_array(smiles)
        table = FingerprintTable(list(smiles))
        f = np.full_like(out, np.nan)
        for j, m in enumerate(self.models_):
            if isinstance(m, KernelModel):
                f[:, j] = m.decision(table.get(m.radius, m.size))
        return f, out

    def _restore(self, t: dict, arrays: Mapping, prefix: str) -> KernelModel:
        if t["mode"] not in ("svr", "ridge", "klr"):
            raise PredictorFileError(f"unknown {self.kind} target mode {t['mode']!r}")
        support = csr_from_arrays(arrays, f"{prefix}.support", int(t["size"]))
        coef = np.asarray(arrays[f"{prefix}.coef"], dtype=np.float64)
        if coef.shape != (support.shape[0],):
            raise PredictorFileError(f"{prefix} has {coef.size} coefficients for {support.shape[0]} stored fingerprints")
        return KernelModel(t["mode"], int(t["radius"]), int(t["size"]), support, coef, float(t["intercept"]),
                           float(t["y_mean"]), float(t["y_std"]))


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
