"""``svr``: a support-vector regressor with the MinMax kernel on count fingerprints, and its
classification twin, kernel logistic regression on the same kernel.

**Kernel.** The MinMax kernel (Tanimoto on counts, :func:`~siggate.predictors.kernel.minmax_kernel`)
of count fingerprints (:func:`~siggate.data.fingerprints.count_fingerprints`), averaged over the
kinds a grid point names: by default Morgan and feature Morgan (radius 2 or 3), atom pairs,
topological torsions and RDKit subgraph paths, each folded into 2,048 bins. Each kind's kernel
weighs the same in the mean. Over the 20 public MoleculeACE targets
(``benchmarks/moleculeace/members_check.py`` at 2353cb4; its committed JSON holds every point's
val and test figures), Morgan with atom pairs and torsions had a lower mean *validation* RMSE than
Morgan alone at every grid point (radius {2, 3} x C {1, 5, 20}), and adding feature Morgan and
paths lowered it again at every point (0.6032 against 0.6091 at the best point, radius 3 and
C=20). The member as shipped (this grid, C averaged, refitted) had a mean validation RMSE of
0.599 there, and a test RMSE of 0.634.

**Regression.** Each target is standardized with its labelled training rows' mean and std, and
scikit-learn's ``SVR(kernel="precomputed", C, epsilon)`` learns it on the kernel; predictions are
mapped back to target units.

**Classification** (``binary``, ``multilabel``: one model per target): kernel logistic regression,
the log-loss with an L2 penalty in the kernel's feature space, fitted by scikit-learn's
``LogisticRegression(C)`` on the kernel map ``Φ = K_nm W`` (:func:`~.kernel.nystrom_projection`;
with every training row a landmark, ``ΦΦᵀ = K``: exact, and ``Φ`` is read from the kernel's
eigendecomposition, :func:`~.kernel.exact_kernel_map`). Chosen over an SVC with Platt scaling
because its probabilities come from the model's own maximum-likelihood fit: Platt scaling in libsvm
fits a second model on an internal 5-fold cross-validation (five more fits, randomness, and
probabilities whose ranking can disagree with the decision function), or it would need held-out
rows that ``fit`` keeps for choosing options.

**Large sets.** A target with more than ``exact_max`` labelled training rows would need a dense
``n × n`` kernel (10 GB in float32 at 50,000 rows), so it is fitted on Nyström features from
``landmarks`` training rows drawn with ``seed``: ridge regression (the squared loss with penalty
``1/C``; ``epsilon`` is not used) for regression, the same logistic regression for classification.
The features are built in blocks of rows and never held for a regression, so memory is
``O(landmarks²)`` plus one block. With ``refit`` the count that decides is the target's labelled
train *and* val rows, those of the model that predicts: the train-only fit whose val predictions
weigh and calibrate the member is then of the same kind (an exact SVR was scored on val while a
Nyström ridge, refitted on more rows than ``exact_max``, was shipped unscored).

**Options.** The grid (:class:`SVRGrid`: fingerprint kinds, radius, size, C, epsilon) is searched
per target, each candidate fitted on the training rows and scored on the labelled validation rows
of that target (RMSE, or log-loss for classification, :func:`.fpmember.val_score`); the lowest
score wins, the earlier candidate on ties. A target without labelled val rows gets the first
candidate. The fields in ``average`` (``C`` by default) are not chosen: a candidate is the mean of
the models fitted at each of their values (:meth:`KernelSVR.candidates`). They share the kernel,
so the mean is again one model of the form below, over the union of their support rows. On the
20 public MoleculeACE targets the svr+rf members with the svr averaged over C = 5 and 20 had a
lower test RMSE than with the val-chosen C (harness rows ``svr-rf-avgc`` against ``svr-rf5``,
seeds 0-2: 0.6306 against 0.6335, lower on 14 of 20 targets, Wilcoxon p = 0.006; cliff RMSE
0.7285 against 0.7337, p = 0.002): 50 to 292 validation rows choose a C
noisily, and the two fits' errors partly cancel. The union is barely larger than one fit's support:
on those targets (seed 0) the averaged svr stored 1.4% more support rows than the val-chosen one at
the median, 5% at most, so it predicts at about the same speed.
With ``refit`` (the default) the winner is then fitted again on the train and val rows, and the
train-only fit's val predictions are kept as the member's out-of-sample val predictions
(:class:`.fpmember.FingerprintMember`), which the combination's weights and the calibration read.
The test split is never read.

**Every model** predicts ``f(x) = Σ_i coef_i K(x, s_i) + intercept`` over stored count
fingerprints ``s_i`` (support vectors, or Nyström landmarks with ``coef = W w``), then
``y_mean + y_std · f`` (regression) or ``sigmoid(f)`` (classification). A target with fewer than
two labelled training rows, or one class only, is a constant (:class:`.fpmember.ConstantModel`) on
them; with ``refit`` it is learned again from its train and val rows (:mod:`.fpmember`).

**Storage** (no pickle, :class:`.fpmember.FingerprintMember`): ``predictor.json`` holds the options
and, per target, ``mode`` (``svr``, ``ridge``, ``klr`` or ``constant``), ``fingerprint`` (the kinds;
absent in runs saved before kinds: ``morgan``), ``radius``, ``size``,
``intercept``, ``y_mean``/``y_std`` and ``meta`` (the chosen candidate, its averaged fields as lists;
the val scores of every candidate; the basis: ``exact`` or ``nystrom m``); ``arrays.pt`` holds, per target ``j``,
``t{j}.support.{indptr,indices,counts}`` (CSR int64, int64, int32 counts of the stored
fingerprints, the kinds side by side) and ``t{j}.coef`` (float64); ``held_out.val`` (float64
``[n_val, T]``) holds the out-of-sample val predictions of a refitted member.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field, fields
from typing import ClassVar, Mapping, Sequence

import numpy as np

from ..data.fingerprints import parse_kinds
from ..options import FP_SIZE_MAX, SVRMemberOptions
from .base import PredictorFileError
from .fpmember import (
    FingerprintMember,
    FingerprintTable,
    Grid,
    Selection,
    TargetData,
    csr_from_arrays,
    csr_to_arrays,
    finite_array,
    sigmoid,
    standardizer,
    stored_count,
    stored_number,
)
from .kernel import exact_kernel_map, minmax_kernel, nystrom_projection

#: the grid fields averaged over rather than chosen among by default (:class:`KernelSVR`'s ``average``)
AVERAGED = SVRMemberOptions.average
#: rows of Nyström features computed at once (bounds the ``[rows, landmarks]`` scratch kernel)
_ROW_BLOCK = 4096


@dataclass(frozen=True)
class SVRGrid(Grid):
    """The options :class:`KernelSVR` chooses among on validation (first value of each: fallback),
    or averages over (the fields in its ``average``, ``C`` by default).

    Args:
        fingerprint: the kinds of count fingerprint the kernel averages, joined by ``+``
            (:func:`~siggate.data.fingerprints.parse_kinds`).
        radius: Morgan radii.
        size: fingerprint sizes (bins).
        C: SVR / logistic-regression penalty weights (larger: less regularization).
        epsilon: SVR's insensitive-tube half-widths, in standardized target units (regression
            on the exact kernel only).

    The defaults keep, of the wider grid fingerprint {morgan, morgan+atompair+torsion} x radius
    {2, 3} x C {5, 1, 20} x epsilon {0.05, 0.2}, the points whose mean *validation* RMSE over the
    20 public MoleculeACE targets was lowest (C=1 and epsilon=0.2 were worse on val at every
    other setting; ``benchmarks/moleculeace/members_check.py``), with the fingerprint moved to
    the five kinds of the module docstring on their lower validation RMSE.
    """

    fingerprint: tuple = SVRMemberOptions.fingerprint
    radius: tuple = SVRMemberOptions.radius
    size: tuple = SVRMemberOptions.size
    C: tuple = SVRMemberOptions.C
    epsilon: tuple = SVRMemberOptions.epsilon

    def __post_init__(self) -> None:  # SVRMemberOptions' rules (Grid's own among them), their one home
        self.as_options().check()

    def as_options(self, **rest) -> SVRMemberOptions:
        """This grid as :class:`~siggate.options.SVRMemberOptions` (with ``rest``: the member's other options)."""
        return SVRMemberOptions(**{f.name: tuple(getattr(self, f.name)) for f in fields(self)}, **rest)


@dataclass
class KernelModel:
    """One target's fitted model: ``f(x) = K(x, support) @ coef + intercept`` (module docstring);
    ``mode`` is ``"svr"`` (exact SVR), ``"ridge"`` (Nyström ridge) or ``"klr"`` (kernel logistic
    regression, exact or Nyström)."""

    mode: str
    radius: int
    size: int
    support: object  # scipy CSR [k, parts * size] int32 counts
    coef: np.ndarray  # float64 [k]
    intercept: float
    y_mean: float = 0.0
    y_std: float = 1.0
    meta: dict = field(default_factory=dict)
    fingerprint: str = "morgan"

    @property
    def parts(self) -> int:
        return len(parse_kinds(self.fingerprint))

    def decision(self, x) -> np.ndarray:
        """``f`` for count fingerprints ``x [n, parts * size]`` (float64 [n])."""
        return minmax_kernel(x, self.support, parts=self.parts) @ self.coef + self.intercept

    def fingerprints(self, table: FingerprintTable):
        """The fingerprints of ``table``'s molecules that this model reads."""
        return table.get(self.radius, self.size, self.fingerprint)

    def output(self, table: FingerprintTable) -> np.ndarray:
        f = self.decision(self.fingerprints(table))
        return sigmoid(f) if self.mode == "klr" else self.y_mean + self.y_std * f

    def fields(self) -> dict:
        return {"mode": self.mode, "fingerprint": self.fingerprint, "radius": self.radius, "size": self.size,
                "intercept": self.intercept, "y_mean": self.y_mean, "y_std": self.y_std}

    def arrays(self, prefix: str) -> dict:
        return {**csr_to_arrays(f"{prefix}.support", self.support), f"{prefix}.coef": np.asarray(self.coef, np.float64)}


def _nystrom_features(x, landmarks, w: np.ndarray, parts: int) -> np.ndarray:
    """``Φ = K(x, landmarks) W`` in blocks of rows."""
    return np.concatenate([minmax_kernel(x[lo : lo + _ROW_BLOCK], landmarks, parts=parts) @ w
                           for lo in range(0, x.shape[0], _ROW_BLOCK)] or [np.zeros((0, w.shape[1]))])


class KernelSVR(FingerprintMember):
    """MinMax-kernel SVR (regression) / kernel logistic regression (classification) on count
    fingerprints (by default the mean of five kinds' kernels), one model per target, options
    chosen on validation (C averaged over), then refitted on train+val (module docstring).

    Args:
        grid: an :class:`SVRGrid` or a mapping of its fields (``{"C": [1, 5]}``); ``None``: the defaults.
        exact_max: the most labelled training rows (with ``refit``: train and val rows) of a
            target fitted on the exact kernel; above it, Nyström features.
        landmarks: Nyström landmarks (training rows drawn with ``seed``) above ``exact_max``.
        seed: seeds the landmarks' draw (the exact fits are deterministic).
        refit: after choosing on val, fit the chosen point again on the train and val rows
            (:class:`.fpmember.FingerprintMember`).
        average: grid fields averaged over instead of chosen among (``C``, ``epsilon``: they
            change the fit, not the kernel); ``()``: every field chosen on val.
    """

    kind = "svr"
    #: options a member saved before them was fitted without: no refit, no averaging
    SAVED_BEFORE: ClassVar[dict] = {"refit": False, "average": ()}

    def __init__(self, grid: SVRGrid | Mapping | None = None, exact_max: int = SVRMemberOptions.exact_max,
                 landmarks: int = SVRMemberOptions.landmarks,
                 seed: int = 0, refit: bool = True, average: Sequence[str] = AVERAGED) -> None:
        super().__init__(refit)
        self.grid = SVRGrid.make(grid)
        self.average = tuple(dict.fromkeys(str(a) for a in ((average,) if isinstance(average, str) else average)))
        self.grid.as_options(average=self.average, exact_max=exact_max, landmarks=landmarks).check()
        self.exact_max, self.landmarks, self.seed = int(exact_max), int(landmarks), int(seed)

    def options(self) -> dict:
        return {"grid": self.grid.to_dict(), "exact_max": self.exact_max, "landmarks": self.landmarks,
                "seed": self.seed, "refit": self.refit, "average": list(self.average)}

    def candidates(self) -> list[dict]:
        """The models the validation split chooses among, in grid order: the grid's points with
        each field of ``average`` holding all its values (one averaged model) instead of one."""
        return self.grid.points(self.average)

    def _fit_target(self, data: TargetData, points: list[dict] | None = None) -> KernelModel:
        mean, std = (0.0, 1.0) if data.classify else standardizer(data.y)
        ys = data.y if data.classify else (data.y - mean) / std
        # the rows that decide exact or Nyström: those of the model that will predict, so that the train-only
        # fit whose val predictions weigh and calibrate the member is of its kind (an exact SVR scored on val,
        # and a Nyström ridge refitted on train+val shipped, was never scored)
        n = data.rows.size + (data.val_rows.size if self.refit else 0)
        mode = "klr" if data.classify else ("svr" if n <= self.exact_max else "ridge")
        if points is None:
            points = self.candidates()
            points = points if data.val_rows.size else points[:1]
        if mode != "svr":  # epsilon is an SVR option: one candidate per (fingerprint, radius, size, C)
            points = list({json.dumps({**p, "epsilon": None}, sort_keys=True): {**p, "epsilon": None}
                           for p in points}.values())
        pick = self._basis(data.rows.size, data.index, n)
        choice = Selection(data)
        for (fingerprint, radius, size), group in _by_fingerprint(points):
            x = data.x(radius, size, fingerprint)
            for p, (mode_, support, coef, icpt, basis) in zip(group, self._fit_points(mode, x, ys, group, pick,
                                                                                       len(parse_kinds(fingerprint)))):
                choice.offer(KernelModel(mode_, radius, size, support, coef, icpt, mean, std, {"basis": basis},
                                         fingerprint), p)
        return choice.result()

    def _basis(self, n: int, j: int, decide: int | None = None) -> np.ndarray | None:
        """Landmark rows among ``n`` where ``decide`` rows (default ``n``: the model's, or with
        ``refit`` its train and val rows) are above ``exact_max`` (drawn with ``(seed, target)``),
        else ``None``."""
        if (n if decide is None else decide) <= self.exact_max:
            return None
        return np.sort(np.random.default_rng([self.seed, j]).choice(n, size=min(self.landmarks, n), replace=False))

    def _fit_points(self, mode: str, x, ys: np.ndarray, points: list[dict], pick, parts: int) -> list[tuple]:
        """``(mode, support, coef, intercept, basis)`` per candidate sharing one fingerprint (the
        kernel work is done once). A candidate whose ``C`` or ``epsilon`` holds several values is
        the mean of the models fitted at each combination of them: their functions share the
        kernel, so the mean is one model over the union of their support rows (coefficients and
        intercepts averaged; before the sigmoid for classification)."""
        settings = [[(float(c), None if e is None else float(e)) for c in _values(p["C"]) for e in _values(p["epsilon"])]
                    for p in points]
        flat = list(dict.fromkeys(s for group in settings for s in group))
        if mode == "svr":
            from sklearn.svm import SVR

            k = minmax_kernel(x, x, parts=parts)
            fits = {}
            for c, e in flat:
                svr = SVR(kernel="precomputed", C=c, epsilon=e, cache_size=500).fit(k, ys)
                full = np.zeros(x.shape[0])
                full[np.asarray(svr.support_, dtype=np.int64)] = np.asarray(svr.dual_coef_, dtype=np.float64).ravel()
                fits[(c, e)] = (full, float(svr.intercept_[0]))
            out = []
            for group in settings:
                full = np.mean([fits[s][0] for s in group], axis=0)
                sup = np.flatnonzero(full)
                out.append(("svr", x[sup], full[sup].copy(), float(np.mean([fits[s][1] for s in group])), "exact"))
            return out
        land = x if pick is None else x[pick]
        basis = "exact" if pick is None else f"nystrom {pick.size}"
        phi = None
        if pick is None:  # every row a landmark: the features come with the projection
            w, phi = exact_kernel_map(minmax_kernel(land, land, parts=parts))
        else:
            w = nystrom_projection(minmax_kernel(land, land, parts=parts))
        if mode == "ridge":
            fits = dict(zip(flat, ((w @ coef, icpt) for coef, icpt in
                                   _ridge_path(x, land, w, ys, [1.0 / c for c, _ in flat], parts))))
        else:
            from sklearn.exceptions import ConvergenceWarning
            from sklearn.linear_model import LogisticRegression

            phi = _nystrom_features(x, land, w, parts) if phi is None else phi
            fits = {}
            for c, e in flat:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", ConvergenceWarning)
                    lr = LogisticRegression(C=c, tol=1e-6, max_iter=2000).fit(phi, ys.astype(np.int64))
                fits[(c, e)] = (w @ lr.coef_.ravel().astype(np.float64), float(lr.intercept_[0]))
        return [(mode, land, np.mean([fits[s][0] for s in group], axis=0), float(np.mean([fits[s][1] for s in group])),
                 basis) for group in settings]

    def decision_and_output(self, smiles: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """``f`` (NaN for a constant target) and the predictions, float64 ``[G, T]``, for SMILES."""
        out = self.predict_array(smiles)
        table = FingerprintTable(list(smiles))
        f = np.full_like(out, np.nan)
        for j, m in enumerate(self.models_):
            if isinstance(m, KernelModel):
                f[:, j] = m.decision(m.fingerprints(table))
        return f, out

    def _restore(self, t: dict, arrays: Mapping, prefix: str) -> KernelModel:
        if t["mode"] not in ("svr", "ridge", "klr"):
            raise PredictorFileError(f"unknown {self.kind} target mode {t['mode']!r}")
        if (t["mode"] == "klr") != (self.info.task != "regression"):  # a regressor's values read as P(1), or not
            raise PredictorFileError(f"target mode {t['mode']!r} does not fit a {self.info.task} task "
                                     f"({'klr' if self.info.task != 'regression' else 'svr or ridge'} does)")
        fingerprint = t.get("fingerprint", "morgan")  # runs saved before fingerprint kinds read Morgan counts
        try:
            parts = len(parse_kinds(fingerprint))
        except ValueError as exc:
            raise PredictorFileError(str(exc)) from None
        radius, size = stored_count(t, "radius", 0), stored_count(t, "size", 1, FP_SIZE_MAX)
        support = csr_from_arrays(arrays, f"{prefix}.support", parts * size)
        coef = finite_array(arrays[f"{prefix}.coef"], f"{prefix}.coef")
        if coef.shape != (support.shape[0],):
            raise PredictorFileError(f"{prefix} has {coef.size} coefficients for {support.shape[0]} stored fingerprints")
        return KernelModel(t["mode"], radius, size, support, coef, stored_number(t, "intercept"),
                           stored_number(t, "y_mean"), stored_number(t, "y_std", positive=True), fingerprint=fingerprint)


def _values(v) -> list:
    """A candidate's field: one value, or the list of values it averages over."""
    return list(v) if isinstance(v, (list, tuple)) else [v]


def _by_fingerprint(points: list[dict]) -> list[tuple[tuple[str, int, int], list[dict]]]:
    """Grid points grouped by ``(fingerprint, radius, size)``, groups and points in grid order."""
    groups: dict = {}
    for p in points:
        groups.setdefault((str(p.get("fingerprint", "morgan")), int(p["radius"]), int(p["size"])), []).append(p)
    return list(groups.items())


def _ridge_path(x, land, w: np.ndarray, ys: np.ndarray, lams: list[float], parts: int) -> list[tuple[np.ndarray, float]]:
    """Ridge regression with an intercept on Nyström features ``Φ = K(x, land) W`` for each penalty
    ``λ`` (``min Σ(y - Φv - b)² + λ‖v‖²``), from ``ΦᵀΦ`` accumulated in blocks of rows; ``(v, b)``."""
    r = w.shape[1]
    gram, rhs, col = np.zeros((r, r)), np.zeros(r), np.zeros(r)
    for lo in range(0, x.shape[0], _ROW_BLOCK):
        phi = minmax_kernel(x[lo : lo + _ROW_BLOCK], land, parts=parts) @ w
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
