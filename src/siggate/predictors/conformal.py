"""Split-conformal calibration of a predictor: intervals for regression, prediction sets for
binary and multilabel tasks, from the validation split's nonconformity scores.

Split conformal prediction (Vovk et al. 2005; Lei et al. 2018, https://arxiv.org/abs/1604.04173;
the tutorial of Angelopoulos & Bates, https://arxiv.org/abs/2107.07511): with ``n`` calibration
scores ``s_1..s_n`` of molecules exchangeable with a new one, the interval built from

    ``q = the k-th smallest score, k = ceil((n + 1) * coverage)``   (``q = inf`` when ``k > n``)

holds the new label with probability at least ``coverage`` (and, for continuous scores, at most
``coverage + 1 / (n + 1)``), marginally over the draw of the calibration and test molecules.

Scores, per target, over the labelled validation rows:

* regression: ``|y - mean| / sigma``, and the interval is ``mean -/+ q * sigma``. ``sigma`` (the
  calibration's ``scale``) is, for a run of molecules with SMILES, ``exp(-SIMILARITY_RATE * s)``
  (``similarity``): ``s`` is the molecule's count-Tanimoto similarity to its nearest training
  molecule (the applicability domain's, :mod:`siggate.data.similarity`), so a molecule like none
  of the training set (``s = 0``) gets an interval ``e^1.75``, about 5.8, times as wide as a
  training molecule's twin (``s = 1``). Any ``sigma`` that is a
  function of the molecule alone keeps split conformal's guarantee; this one was chosen on the
  validation splits of the 20 public MoleculeACE targets (``benchmarks/moleculeace/interval_check.py``:
  the narrowest median width among the rates it tries; the README's *Intervals* has its figures),
  against ``sigma = 1`` (median width 5% wider) and the members' spread (more than twice as wide). Older runs (format 1) and runs without
  SMILES keep ``spread``: the predictor's spread (an ensemble's standard deviation over members)
  floored at ``SPREAD_FLOOR`` times its median on the validation rows, or ``sigma = 1``
  without one (``none``).
* binary and multilabel (per label, marginally): ``1 - p(true class)`` with ``p`` the predicted
  probability; the prediction set at ``coverage`` is ``{c in {0, 1}: 1 - p(c) <= q}``:
  ``{0}``, ``{1}``, both (``{0,1}``: the model cannot tell at this coverage) or, rarely, none.
* multiclass: not calibrated (node-level benchmarks only).

The calibration split is also the split early stopping and ``--weights val`` chose on, so the
validation scores are slightly optimistic; the test coverage, recorded beside it, says by how
much. Functions here are pure numpy (:func:`below_nominal`, the test of a coverage below nominal, imports
SciPy when called); :class:`Calibration` is stored as JSON.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

#: the spread's floor, as a fraction of its median over the validation rows
SPREAD_FLOOR = 0.1
#: ``sigma = exp(-SIMILARITY_RATE * s)`` for a molecule of nearest-training similarity ``s`` (scale ``similarity``)
SIMILARITY_RATE = 1.75
#: what a regression's ``sigma`` is (the module docstring)
SCALES = ("similarity", "spread", "none")
#: the coverages a run records in ``metrics.json`` (``siggate predict --coverage`` takes any)
RECORDED_COVERAGES = (0.8, 0.9, 0.95)
#: version of the stored calibration (2: its ``scale``; a format-1 file scales by the spread)
CALIBRATION_FORMAT = 2
#: the task types that are calibrated
CALIBRATED_TASKS = ("regression", "binary", "multilabel")


class CalibrationError(ValueError):
    """A coverage or stored calibration that cannot be used."""


def check_coverage(coverage: float) -> float:
    """``coverage`` as a float strictly between 0 and 1.

    Raises:
        CalibrationError: anything else.
    """
    try:
        c = float(coverage)
    except (TypeError, ValueError):
        c = float("nan")
    if not 0.0 < c < 1.0:
        raise CalibrationError(f"coverage must be a number between 0 and 1 (e.g. 0.9 for 90% intervals), got {coverage!r}")
    return c


def conformal_rank(n: int, coverage: float) -> int:
    """``k = ceil((n + 1) * coverage)``: the rank (1-based) of the calibration score that bounds
    a new score with probability ``>= coverage``; ``k > n`` means no finite bound exists. At
    least 1: the smallest score, however small the coverage (not the last one, index -1)."""
    # the small tolerance keeps (n + 1) * coverage that is an integer in exact arithmetic one
    return max(1, int(math.ceil((n + 1) * check_coverage(coverage) - 1e-9)))


def fewest_for(coverage: float) -> int:
    """The fewest calibration molecules with a finite bound at ``coverage``
    (:func:`conformal_rank` ``<= n``)."""
    c = check_coverage(coverage)
    # bisection over n (ceil((n + 1) c) <= n holds from about c / (1 - c) on): counting n up from 0
    # took 1 / (1 - c) steps, and a coverage of 1 - 1e-12 never finished
    lo, hi = 0, 1  # conformal_rank(lo) > lo; hi: one that holds
    while conformal_rank(hi, c) > hi:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if conformal_rank(mid, c) <= mid else (mid, hi)
    return hi


def conformal_quantile(scores, coverage: float) -> float:
    """The split-conformal quantile of ``scores`` (``[n]``): the ``ceil((n + 1) * coverage)``-th
    smallest score, ``inf`` when that exceeds ``n`` (too few calibration molecules for this
    coverage)."""
    s = np.sort(np.asarray(scores, dtype=np.float64).reshape(-1))
    k = conformal_rank(len(s), coverage)
    return float(s[k - 1]) if k <= len(s) else math.inf


def regression_scores(y, mean, sigma=None) -> np.ndarray:
    """``|y - mean| / sigma`` (``sigma`` 1 when ``None``), elementwise."""
    y, mean = np.asarray(y, dtype=np.float64), np.asarray(mean, dtype=np.float64)
    err = np.abs(y - mean)
    return err if sigma is None else err / np.asarray(sigma, dtype=np.float64)


def similarity_scale(similarity, targets: int = 1) -> np.ndarray:
    """``[n, targets]``: ``exp(-SIMILARITY_RATE * s)`` of nearest-training similarities ``s [n]``
    (clipped to [0, 1]), the same for every target."""
    sigma = np.exp(-SIMILARITY_RATE * np.clip(np.asarray(similarity, dtype=np.float64).reshape(-1, 1), 0.0, 1.0))
    return np.repeat(sigma, targets, axis=1)


def class_scores(y, prob) -> np.ndarray:
    """``1 - p(true class)`` for 0/1 labels ``y`` and probabilities of class 1 ``prob``."""
    y, p = np.asarray(y, dtype=np.float64), np.asarray(prob, dtype=np.float64)
    return np.where(y == 1, 1.0 - p, p)


@dataclass
class TargetCalibration:
    """One target's calibration: its sorted validation ``scores`` and, for a normalised
    regression, the scale's ``floor`` (``None``: ``sigma = 1``)."""

    scores: list
    floor: float | None = None

    @property
    def n(self) -> int:
        return len(self.scores)

    def quantile(self, coverage: float) -> float:
        return conformal_quantile(self.scores, coverage)

    def sigma(self, scale) -> np.ndarray | None:
        """The scale of each row's interval: ``scale`` (:meth:`Calibration.row_scale`) floored, or ``None`` (1)."""
        if self.floor is None or scale is None:
            return None
        return np.maximum(np.asarray(scale, dtype=np.float64), self.floor)


@dataclass
class Calibration:
    """A predictor's split-conformal calibration (see the module docstring).

    Attributes:
        task: ``regression``, ``binary`` or ``multilabel``.
        targets: ``{target name: TargetCalibration}``, in the predictor's target order.
        scale: what a regression's scores are divided by, one of :data:`SCALES`.
    """

    task: str
    targets: dict = field(default_factory=dict)
    scale: str = "none"

    @property
    def normalized(self) -> bool:
        """Whether regression scores are divided by a per-row scale."""
        return self.scale != "none"

    @property
    def needs_similarity(self) -> bool:
        """Whether :meth:`row_scale` needs the molecules' nearest-training similarities."""
        return self.scale == "similarity"

    def __setstate__(self, state: dict) -> None:
        """Unpickle; one pickled before :attr:`scale` (an estimator's ``calibration_``) kept
        ``normalized``: the spread, or none."""
        if "scale" not in state:
            state = {**state, "scale": "spread" if state.pop("normalized", False) else "none"}
        self.__dict__.update(state)

    def row_scale(self, spread=None, similarity=None) -> np.ndarray | None:
        """The per-row input of :meth:`intervals` and :meth:`covered` for predictions of spread
        ``spread [n, T]`` (None: one model) of molecules of nearest-training similarity
        ``similarity [n]``: what the calibration's :attr:`scale` divides by.

        Raises:
            CalibrationError: a ``similarity`` calibration given no similarities."""
        if self.needs_similarity:
            if similarity is None:
                raise CalibrationError("this calibration scales intervals by the similarity to the training "
                                       "molecules; give their similarities")
            return similarity_scale(similarity, len(self.targets))
        return spread if self.scale == "spread" else None

    @classmethod
    def fit(cls, task: str, names, y, mean, spread=None, similarity=None) -> "Calibration":
        """From validation labels ``y [n, T]`` (NaN: missing), predictions ``mean [n, T]``
        (target units or probabilities), the spread ``[n, T]`` (or ``None``) and the molecules'
        nearest-training similarity ``[n]``: given, a regression's scale is ``similarity``,
        else ``spread`` (``none`` without a spread whose validation median is positive).

        Raises:
            CalibrationError: a task that is not calibrated.
        """
        if task not in CALIBRATED_TASKS:
            raise CalibrationError(f"a {task} task is not calibrated (only {', '.join(CALIBRATED_TASKS)})")
        y, mean = as_2d(y), as_2d(mean)
        spread = None if spread is None else as_2d(spread)
        out, normalized = {}, False
        by_similarity = task == "regression" and similarity is not None
        scale = similarity_scale(similarity, len(names)) if by_similarity else spread
        for t, name in enumerate(names):
            ok = ~np.isnan(y[:, t])
            if task != "regression":
                out[name] = TargetCalibration(sorted(class_scores(y[ok, t], mean[ok, t]).tolist()))
                continue
            floor = None
            if by_similarity:
                floor = math.exp(-SIMILARITY_RATE)  # the least sigma (s = 1): every row's scale is at or above it
            elif spread is not None and ok.any():
                median = float(np.median(spread[ok, t]))
                if median > 0 and np.isfinite(median):
                    floor = SPREAD_FLOOR * median
                    normalized = True
            cal = TargetCalibration([], floor)
            cal.scores = sorted(regression_scores(y[ok, t], mean[ok, t],
                                                  cal.sigma(None if scale is None else scale[ok, t])).tolist())
            out[name] = cal
        return cls(task, out, "similarity" if by_similarity else "spread" if normalized else "none")

    # ------------------------------------------------------------------ use

    def too_few(self, coverage: float) -> dict[str, int]:
        """``{target: n}`` of the targets calibrated on too few molecules for ``coverage``: their
        intervals are infinite (their sets hold every class)."""
        return {name: t.n for name, t in self.targets.items() if conformal_rank(t.n, coverage) > t.n}

    def intervals(self, mean, scale, coverage: float) -> tuple[np.ndarray, np.ndarray]:
        """Regression: ``(lower, upper)`` ``[G, T]`` at ``coverage`` around ``mean [G, T]``
        (``-inf``/``inf`` where the calibration has too few molecules for it); ``scale``: the
        rows' :meth:`row_scale`."""
        mean = as_2d(mean)
        scale = None if scale is None else as_2d(scale)
        lower, upper = np.empty_like(mean), np.empty_like(mean)
        for t, cal in enumerate(self.targets.values()):
            sigma = cal.sigma(None if scale is None else scale[:, t])
            half = cal.quantile(coverage) * (1.0 if sigma is None else sigma)
            lower[:, t], upper[:, t] = mean[:, t] - half, mean[:, t] + half
        return lower, upper

    def sets(self, prob, coverage: float) -> list[list[str]]:
        """Binary/multilabel: per row and target the prediction set at ``coverage`` as text,
        ``"{0}"``, ``"{1}"``, ``"{0,1}"`` or ``"{}"``."""
        inside = self.set_members(prob, coverage)
        return [["{" + ",".join(str(c) for c in (0, 1) if row[t, c]) + "}" for t in range(inside.shape[1])]
                for row in inside]

    def set_members(self, prob, coverage: float) -> np.ndarray:
        """Binary/multilabel: ``[G, T, 2]`` booleans, whether class 0 and class 1 are in each row's
        and target's prediction set at ``coverage`` (a class is in when its score ``1 - p(class)``
        is at most the calibration's quantile)."""
        prob = as_2d(prob)
        out = np.zeros((*prob.shape, 2), dtype=bool)
        for t, cal in enumerate(self.targets.values()):
            q = cal.quantile(coverage)
            out[:, t, 0], out[:, t, 1] = prob[:, t] <= q, 1.0 - prob[:, t] <= q
        return out

    def covered(self, y, mean, scale, coverage: float) -> dict:
        """``{target: {"n", "coverage", "mean_width" | "mean_set_size"}}`` of the labelled rows of
        ``y [n, T]``: the fraction whose label falls in its interval (set) at ``coverage``, and
        the intervals' mean width (``inf`` when infinite) or the sets' mean size; ``scale``: the
        rows' :meth:`row_scale`."""
        y, mean = as_2d(y), as_2d(mean)
        res = {}
        if self.task == "regression":
            lower, upper = self.intervals(mean, scale, coverage)
        for t, (name, cal) in enumerate(self.targets.items()):
            ok = ~np.isnan(y[:, t])
            if not ok.any():
                res[name] = {"n": 0, "coverage": None}
                continue
            if self.task == "regression":
                inside = (y[ok, t] >= lower[ok, t]) & (y[ok, t] <= upper[ok, t])
                res[name] = {"n": int(ok.sum()), "coverage": float(inside.mean()),
                             "mean_width": float(np.mean(upper[ok, t] - lower[ok, t]))}
            else:
                q = cal.quantile(coverage)
                p = mean[ok, t]
                inside = class_scores(y[ok, t], p) <= q
                size = (p <= q).astype(int) + ((1.0 - p) <= q).astype(int)
                res[name] = {"n": int(ok.sum()), "coverage": float(inside.mean()), "mean_set_size": float(size.mean())}
        return res

    # ------------------------------------------------------------------ storage

    def to_dict(self) -> dict:
        return {"format": CALIBRATION_FORMAT, "task": self.task, "scale": self.scale,
                "normalized": self.normalized, "spread_floor": SPREAD_FLOOR, "similarity_rate": SIMILARITY_RATE,
                "targets": {n: {"scores": c.scores, "floor": c.floor} for n, c in self.targets.items()}}

    @classmethod
    def from_dict(cls, doc: dict) -> "Calibration":
        """Raises:
            CalibrationError: not a calibration of this siggate's format."""
        try:
            if int(doc["format"]) > CALIBRATION_FORMAT:
                raise CalibrationError(f"calibration format {doc['format']} is newer than this siggate's "
                                       f"({CALIBRATION_FORMAT}); upgrade siggate")
            targets = {str(n): TargetCalibration([float(s) for s in t["scores"]],
                                                 None if t.get("floor") is None else float(t["floor"]))
                       for n, t in doc["targets"].items()}
            for name, t in targets.items():  # NaN scores gave NaN intervals, silently
                if not all(math.isfinite(v) and v >= 0 for v in t.scores) or (
                        t.floor is not None and not (math.isfinite(t.floor) and t.floor >= 0)):
                    raise ValueError(f"target {name!r}: scores and floor must be finite and >= 0")
            if str(doc["task"]) not in ("regression", "binary", "multilabel"):
                raise ValueError(f"task {doc['task']!r} is not one that siggate calibrates")
            if int(doc["format"]) >= 2 and "scale" not in doc:  # read as format 1, it would scale by the spread
                raise ValueError("a format-2 calibration without its scale")
            scale = str(doc.get("scale") or ("spread" if doc.get("normalized") else "none"))  # format 1: no scale
            if scale not in SCALES:
                raise ValueError(f"unknown scale {scale!r}")
            if scale == "similarity" and str(doc["task"]) == "regression":  # its sigma: exp(-this siggate's rate s)
                rate = float(doc.get("similarity_rate", math.nan))
                if rate != SIMILARITY_RATE or any(t.floor is None for t in targets.values()):
                    raise ValueError(f"a similarity scale of rate {doc.get('similarity_rate')!r} and floors "
                                     f"{[t.floor for t in targets.values()]} (this siggate's rate is "
                                     f"{SIMILARITY_RATE:g}, every floor set)")
            return cls(str(doc["task"]), targets, scale)
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:  # (a format of Infinity)
            if isinstance(exc, CalibrationError):
                raise
            raise CalibrationError(f"not a siggate calibration ({type(exc).__name__}: {exc})") from None


def as_2d(a) -> np.ndarray:
    """``[n]`` or ``[n, T]`` values as a float64 ``[n, T]`` array."""
    a = np.asarray(a, dtype=np.float64)
    return a.reshape(len(a), -1) if a.ndim != 2 else a


def below_nominal(coverage: dict, calibrated: dict, alpha: float = 0.05, least: int = 20,
                  split: str = "test") -> list[dict]:
    """The (nominal coverage, target) pairs whose ``split``'s coverage (``coverage``: ``{nominal:
    {split: Calibration.covered(...)}}``) is below nominal by more than chance
    allows, on at least ``least`` test molecules. For molecules exchangeable with the ``calibrated[target]``
    validation ones, split conformal's coverage is itself random, Beta(k, n + 1 - k) with
    ``k = ceil((n + 1) * nominal)``, so the covered count of m test molecules is beta-binomial; its
    one-sided p-values are Holm-adjusted over every (coverage, target) tested, and those below
    ``alpha`` are returned (a binomial test at the nominal rate, ignoring the quantile's own
    randomness and the several tests, warned on 17-44% of exchangeable runs)."""
    from scipy import stats  # here: the rest of the module is numpy alone

    from ..stats import holm

    tests = []
    for nominal, splits in coverage.items():
        for target, got in (splits.get(split) or {}).items():
            m, cov, n = got.get("n") or 0, got.get("coverage"), int(calibrated.get(target) or 0)
            if m < least or cov is None or n < 1:
                continue
            k = conformal_rank(n, float(nominal))
            if k > n:  # infinite intervals: everything covered
                continue
            p = float(stats.betabinom.cdf(round(cov * m), m, k, n + 1 - k))
            tests.append({"nominal": nominal, "target": target, "n": m, "coverage": cov, "p": p})
    for t, adjusted in zip(tests, holm([t["p"] for t in tests])):
        t["p"] = adjusted
    return [t for t in tests if t["p"] < alpha]


def conformal_output(task: str) -> str:
    """What a ``task``'s calibration gives, in words: ``"intervals"`` (regression) or ``"sets"``."""
    return "intervals" if task == "regression" else "sets"


def unbounded_text(task: str) -> str:
    """What a ``task``'s calibration gives where it has too few molecules for a coverage
    (:meth:`Calibration.too_few`), in words: infinite intervals, or sets of every class."""
    return "intervals are infinite" if task == "regression" else "sets hold every class"


def below_nominal_text(item: dict, task: str, molecules: str, holm_over: str) -> str:
    """The sentence that names one :func:`below_nominal` finding (``item``) of a ``task``'s
    intervals (sets, for a classifier) on ``molecules`` (``"test molecules"``), its p-value
    Holm-adjusted over ``holm_over``; the caller says why it may happen and what to do."""
    what = conformal_output(task)
    return (f"the conformal {what} of {item['target']!r} at coverage {item['nominal']} hold {item['coverage']:.0%} of "
            f"the {item['n']} {molecules}, fewer than chance allows (one-sided beta-binomial p = {item['p']:.2g}, Holm "
            f"over {holm_over})")
