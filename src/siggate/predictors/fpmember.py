"""What the fingerprint members (:mod:`.svr`, :mod:`.forest`) share: one model per target learned
from that target's labelled training rows, options chosen on its labelled validation rows, and
storage as ``predictor.json`` + ``arrays.pt``.

:class:`FingerprintMember` is their base class. ``fit(ds)`` reads the SMILES and labels of
``ds.train`` and ``ds.val`` (never ``ds.test``) and calls the subclass's ``_fit_target`` per target
with a :class:`TargetData`. A target is refused when it has no labelled training row, and is a
:class:`ConstantModel` when it has one row or one class (the mean, or the smoothed rate
``(positives + 0.5) / (rows + 1)``). :class:`Selection` keeps the option with the lowest val score
(:func:`val_score`), the earlier on ties; a target without labelled val rows is fitted with the
first option only (the grid's first point, :meth:`Grid.fallback`; for the svr, whose C is averaged
over, the first candidate, all C values).

**Refit** (``refit=True``, the members' default): once a target's options are chosen on val, the
chosen option is fitted again on the target's labelled train *and* val rows (``_fit_target`` with
that one point), so the val molecules teach the model that predicts test and new molecules (on the
20 public MoleculeACE targets this lowered the svr member's mean test RMSE, ``members_check.py``).
The predictions the train-only fit made for the val molecules are kept in ``held_out_["val"]``
(saved with the arrays): they are the member's out-of-sample val predictions, which the
combination's weights, the conformal calibration and the reported val metric read
(:func:`~.base.out_of_sample`). The refitted model's ``meta`` keeps the selection record, its own
fields (the svr's ``basis``, Nyström in both fits where train and val rows exceed ``exact_max``)
and says ``refit``. A target that was a constant on its training rows chose nothing on val: it is
learned again from its train and val rows as a target without val rows is (the first option, or a
constant of those rows where they still hold one row or one class). A member saved before the refit (no ``refit`` option) loads with
``refit=False`` and no kept predictions: it learned from the train rows alone, so its own val
predictions are out of sample.

Every per-target model answers ``output(table) -> float64 [n]`` (target units or probabilities)
for a :class:`FingerprintTable` of the molecules to predict, ``fields()`` (JSON, into the manifest's
``targets`` list, with ``mode``) and ``arrays(prefix)`` (plain arrays, into ``arrays.pt`` under
``t{j}.``); the subclass's ``_restore`` builds it back.

**Atom contributions** (``siggate explain``, :meth:`FingerprintMember.atom_contributions`) are
occlusions of the fingerprint each target's model reads (:func:`fingerprint_of`), in the manner of
Riniker and Landrum's similarity maps (J. Cheminform. 5, 43 (2013),
https://doi.org/10.1186/1758-2946-5-43): for a molecule with counts ``c``, bin ``b`` contributes
``f(c) - f(c with c_b = 0)``, the change in the prediction (target units or probability) when every
environment that falls into ``b`` is removed (:func:`occlusion`). That change is shared equally by
the ``c_b`` environments of the bin, and each environment's share equally by its atoms
(:func:`share_over_atoms`; :func:`~siggate.data.fingerprints.bit_atoms`: a Morgan environment's
centre and the atoms within the radius, an atom pair's two atoms, a torsion's four), so the
atoms' total is the bins' total. The baseline reported beside them is the prediction of the
empty fingerprint. The same rule serves the kernel SVR (whose MinMax kernel is not
differentiable in the counts) and the forest (a step function of them, whose gradients are
zero): it needs only predictions, one batch of them per molecule, is exact and deterministic,
and a bin's number reads in target units. It is not *complete*: the bins' total differs from
``f(c) - f(empty)`` by the model's interactions between bins (it equals it for a model linear in
the counts). A constant target contributes nothing (its baseline is its prediction).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import ClassVar, Mapping, Sequence

import numpy as np

from ..data.base import DataError
from ..options import grids_given
from .base import (
    ARRAYS,
    AtomContributions,
    Prediction,
    PredictorFileError,
    check_saved_files,
    load_arrays,
    read_manifest,
    save_arrays,
    task_info,
    write_manifest,
)

#: tasks the fingerprint members learn (one model per target; ``multiclass`` and node-level tasks are refused)
TASKS = ("regression", "binary", "multilabel")


def check_task(info, kind: str) -> None:
    """Refuse a task a fingerprint member cannot learn, naming the task and the fix.

    Raises:
        DataError: a node-level or multiclass task."""
    if info.level != "graph":
        raise DataError(f"the {kind} member predicts one value per molecule; {info.name} is a node-level task "
                         f"(choose other members)")
    if info.task not in TASKS:
        raise DataError(f"the {kind} member learns {', '.join(TASKS)} tasks, not {info.task!r} ({info.name}); "
                         f"choose other members")


def graph_smiles(graphs: Sequence, kind: str) -> list[str]:
    """The ``smiles`` of each graph.

    Raises:
        DataError: a graph without a SMILES string (a dataset of typed atoms such as ZINC).
    """
    out = []
    for i, g in enumerate(graphs):
        s = getattr(g, "smiles", None)
        if not isinstance(s, str):
            raise DataError(f"the {kind} member reads molecules from SMILES, and graph {i} carries none; "
                             "use it on molecule datasets (a CSV of SMILES, MoleculeACE, ...)")
        out.append(s)
    return out


def graph_labels(graphs: Sequence, info) -> np.ndarray:
    """Labels ``float64 [G, T]`` of graph-level ``graphs`` (``NaN`` where missing)."""
    from ..data.base import label_rows

    if not len(graphs):
        return np.zeros((0, info.num_tasks), dtype=np.float64)
    return np.concatenate([label_rows(g, info).double().numpy().reshape(-1, info.num_tasks) for g in graphs])


def standardizer(y: np.ndarray) -> tuple[float, float]:
    """``(mean, std)`` of labelled values (population std; ``1`` where it is 0 or not finite)."""
    mean, std = float(np.mean(y)), float(np.std(y))
    return mean, (std if std > 0 and math.isfinite(std) else 1.0)


def val_score(task: str, y: np.ndarray, pred: np.ndarray) -> float:
    """The val score options are chosen by (lower is better): RMSE for regression, mean log-loss of
    the probabilities for classification (a proper score: it rewards calibrated probabilities, and
    it is defined when the val rows hold one class, where ROC-AUC is not)."""
    if task == "regression":
        return float(np.sqrt(np.mean((pred - y) ** 2)))
    p = np.clip(pred, 1e-12, 1 - 1e-12)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log1p(-p)))


def sigmoid(f: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * f))  # = 1 / (1 + exp(-f)), without overflow


@dataclass(frozen=True)
class Grid:
    """Options to choose among on the validation split: each field a tuple of values; the grid is
    their product, in field order, and the first value of every field is the fallback (used alone
    when a target has no labelled val row, and the winner of ties). Subclasses name the fields."""

    @classmethod
    def make(cls, grid: "Grid | Mapping | None") -> "Grid":
        """``grid`` as this class: ``None`` -> the defaults; a mapping -> its fields (lists or scalars)."""
        if grid is None:
            return cls()
        if isinstance(grid, cls):
            return grid
        if not isinstance(grid, Mapping):
            raise TypeError(f"grid must be a {cls.__name__} or a mapping, got {type(grid).__name__}")
        names = [f.name for f in fields(cls)]
        bad = sorted(set(grid) - set(names))
        if bad:
            raise ValueError(f"unknown grid option(s) {bad}; {cls.__name__} takes {names}")
        return cls(**{k: tuple(v) if isinstance(v, (list, tuple)) else (v,) for k, v in grid.items()})

    def __post_init__(self) -> None:
        grids_given(self, [f.name for f in fields(self)])

    def points(self, average: Sequence[str] = ()) -> list[dict]:
        """Every combination, in order (the first is the fallback). A field named in ``average``
        holds all its values (as a list) in every point instead of being chosen among."""
        names = [f.name for f in fields(self)]
        bad = sorted(set(average) - set(names))
        if bad:
            raise ValueError(f"cannot average over {bad}: {type(self).__name__} has the fields {names}")
        vary = [(getattr(self, n) if n not in average else (None,)) for n in names]
        return [{n: (list(getattr(self, n)) if n in average else v) for n, v in zip(names, vals)}  # a list per point
                for vals in itertools.product(*vary)]

    def fallback(self) -> dict:
        return self.points()[0]

    def to_dict(self) -> dict:
        return {f.name: list(getattr(self, f.name)) for f in fields(self)}


@dataclass
class FingerprintTable:
    """Count fingerprints of a fixed list of SMILES, computed once per ``(radius, size, fingerprint)``
    and kept (CSR ``int32``, :func:`~siggate.data.fingerprints.count_fingerprints`: ``fingerprint``
    names the kinds side by side, ``"morgan"`` by default)."""

    smiles: list[str]
    _cache: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.smiles)

    def get(self, radius: int, size: int, fingerprint: str = "morgan"):
        from ..data.fingerprints import count_fingerprints

        key = (int(radius), int(size), fingerprint)
        if key not in self._cache:
            self._cache[key] = count_fingerprints(self.smiles, fingerprint, key[0], key[1], sparse=True)
        return self._cache[key]

    @classmethod
    def joined(cls, first: "FingerprintTable", second: "FingerprintTable") -> "FingerprintTable":
        """The table of ``first``'s molecules then ``second``'s, reusing the fingerprints both hold."""
        import scipy.sparse as sp

        out = cls(first.smiles + second.smiles)
        for key in first._cache.keys() & second._cache.keys():
            out._cache[key] = sp.vstack([first._cache[key], second._cache[key]], format="csr", dtype=np.int32)
        return out


def csr_to_arrays(prefix: str, x) -> dict:
    """``{prefix.indptr, prefix.indices, prefix.counts}`` (int64, int64, int32) of a CSR matrix."""
    return {f"{prefix}.indptr": np.asarray(x.indptr, dtype=np.int64),
            f"{prefix}.indices": np.asarray(x.indices, dtype=np.int64),
            f"{prefix}.counts": np.asarray(x.data, dtype=np.int32)}


def csr_from_arrays(arrays: Mapping, prefix: str, size: int):
    """The CSR matrix stored by :func:`csr_to_arrays`, checked for shape and bounds.

    Raises:
        PredictorFileError: a missing or inconsistent array.
    """
    import scipy.sparse as sp

    try:
        indptr, indices, counts = (np.asarray(arrays[f"{prefix}.{k}"]) for k in ("indptr", "indices", "counts"))
    except KeyError as exc:
        raise PredictorFileError(f"stored arrays lack {exc.args[0]!r}") from None
    ok = (indptr.ndim == indices.ndim == counts.ndim == 1 and indptr.size >= 1 and indptr[0] == 0
          and indptr[-1] == indices.size == counts.size and bool(np.all(np.diff(indptr) >= 0))
          and (indices.size == 0 or (indices.min() >= 0 and indices.max() < size))
          and (counts.size == 0 or counts.min() >= 0))
    if not ok:
        raise PredictorFileError(f"stored fingerprints {prefix!r} are inconsistent (indptr/indices/counts)")
    return sp.csr_matrix((counts.astype(np.int32), indices, indptr), shape=(indptr.size - 1, int(size)))


def stored_number(t: Mapping, key: str, positive: bool = False, probability: bool = False) -> float:
    """A target's stored number ``t[key]``, refused (:class:`PredictorFileError`) unless it is
    finite, and positive or in [0, 1] where told: a damaged file must not load and predict."""
    try:
        v = float(t[key])
    except (TypeError, ValueError):
        raise PredictorFileError(f"stored {key} {t[key]!r} is not a number") from None
    if not math.isfinite(v) or (positive and v <= 0) or (probability and not 0 <= v <= 1):
        raise PredictorFileError(f"stored {key} {t[key]!r} is not a "
                                 f"{'positive' if positive else 'probability (0 to 1)' if probability else 'finite'} "
                                 "number")
    return v


def stored_count(t: Mapping, key: str, least: int, most: int | None = None) -> int:
    """A target's stored integer ``t[key]`` (a radius, a size), refused below ``least`` or above ``most``."""
    v = t[key]
    if isinstance(v, bool) or not isinstance(v, int) or v < least or (most is not None and v > most):
        raise PredictorFileError(f"stored {key} {v!r} is not an integer "
                                 + (f">= {least}" if most is None else f"from {least} to {most}"))
    return v


def finite_array(a, name: str, probability: bool = False) -> np.ndarray:
    """``a`` as float64, refused if it holds NaN or inf (or, for probabilities, a value outside [0, 1])."""
    a = np.asarray(a, dtype=np.float64)
    if not np.isfinite(a).all() or (probability and a.size and (a.min() < 0 or a.max() > 1)):
        raise PredictorFileError(f"stored {name} holds {'values outside [0, 1]' if np.isfinite(a).all() else 'NaN or inf'}")
    return a


@dataclass
class ConstantModel:
    """A target learned from one labelled row or one class: ``value`` for every molecule."""

    value: float
    meta: dict = field(default_factory=dict)

    @classmethod
    def of(cls, y: np.ndarray, classify: bool, why: str) -> "ConstantModel":
        value = (float(np.sum(y)) + 0.5) / (y.size + 1.0) if classify else float(np.mean(y))
        return cls(value, {"why": why})

    def output(self, table: FingerprintTable) -> np.ndarray:
        return np.full(len(table), self.value)

    def fields(self) -> dict:
        return {"mode": "constant", "value": self.value}

    def arrays(self, prefix: str) -> dict:
        return {}


@dataclass
class TargetData:
    """One target's view of the data ``fit`` reads: fingerprints of every train/val molecule and
    the indices and labels of the rows labelled for this target."""

    index: int
    name: str
    task: str
    train: FingerprintTable
    val: FingerprintTable
    rows: np.ndarray
    y: np.ndarray
    val_rows: np.ndarray
    val_y: np.ndarray

    @property
    def classify(self) -> bool:
        return self.task != "regression"

    def x(self, radius: int, size: int, fingerprint: str = "morgan"):
        """Count fingerprints (CSR) of the labelled training rows."""
        return self.train.get(radius, size, fingerprint)[self.rows]


class Selection:
    """The val-only choice: :meth:`offer` each fitted option in grid order; :meth:`result` is the
    one with the lowest val score (the earlier on ties; without labelled val rows the score is
    ``None`` and the first, the only one offered, is kept), with the scores of all in its ``meta``."""

    #: the keys :meth:`result` adds to the chosen model's ``meta``
    RECORD = ("chosen", "scores", "n_train", "n_val", "choice")

    def __init__(self, data: TargetData) -> None:
        self.data, self.scores = data, []
        self.best, self.best_at, self.best_score = None, 0, math.inf

    def offer(self, model, point: dict) -> None:
        d = self.data
        score = (val_score(d.task, d.val_y, model.output(_Rows(d.val, d.val_rows))) if d.val_rows.size else math.nan)
        self.scores.append({**point, "val_score": score if d.val_rows.size else None})  # JSON has no NaN
        if self.best is None or score < self.best_score:  # strict: the earlier option wins ties; NaN never wins
            self.best, self.best_at, self.best_score = model, len(self.scores) - 1, score

    def result(self):
        d = self.data
        self.best.meta = {**self.best.meta,
                          "chosen": {k: v for k, v in self.scores[self.best_at].items() if k != "val_score"},
                          "scores": self.scores, "n_train": int(d.rows.size), "n_val": int(d.val_rows.size),
                          "choice": "val" if d.val_rows.size else "fallback: no labelled val row"}
        return self.best


@dataclass(frozen=True)
class CountFingerprint:
    """A fingerprint a target's model reads: folded count fingerprints of the ``kinds`` side by
    side (``"morgan"``, ``"morgan+atompair+torsion"``, ...), Morgan of ``radius``, each kind in
    ``size`` bins (:func:`~siggate.data.fingerprints.count_fingerprints`). What
    :meth:`FingerprintMember.atom_contributions` asks of a fingerprint: ``counts(smiles)`` (SciPy
    CSR ``int32``) and ``bin_atoms(smiles)`` (of one molecule: ``{bin: (environment, ...)}``, one
    environment per count, each the tuple of its atoms)."""

    radius: int
    size: int
    kinds: str = "morgan"

    def counts(self, smiles: Sequence[str]):
        from ..data.fingerprints import count_fingerprints

        return count_fingerprints(list(smiles), self.kinds, self.radius, self.size, sparse=True)

    def bin_atoms(self, smiles: str) -> dict:
        from ..data.fingerprints import bit_atoms

        return bit_atoms(smiles, self.radius, self.size, self.kinds)


def fingerprint_of(model) -> CountFingerprint:
    """The fingerprint a target's ``model`` reads: its ``radius``, ``size`` and ``fingerprint``
    (the kinds; Morgan alone for a model without one, as the forest)."""
    return CountFingerprint(int(model.radius), int(model.size), getattr(model, "fingerprint", "morgan"))


def occlusion_rows(x):
    """The fingerprints whose predictions :func:`occlusion` needs, for CSR counts ``x [n, size]``:
    the empty fingerprint (row 0), then per molecule ``i`` its own row followed by one row per
    non-zero bin of it (in ``x``'s order) with that bin emptied. Returns ``(CSR rows, start)``:
    molecule ``i``'s own row is ``start[i]``."""
    import scipy.sparse as sp

    indptr, indices, data, start = [0, 0], [], [], []
    for i in range(x.shape[0]):
        cols, vals = x.indices[x.indptr[i]:x.indptr[i + 1]], x.data[x.indptr[i]:x.indptr[i + 1]]
        start.append(len(indptr) - 1)
        keep = ~np.eye(cols.size, dtype=bool)  # row k: every bin but the k-th
        for c, v in [(cols, vals), *((cols[k], vals[k]) for k in keep)]:
            indices.append(c)
            data.append(v)
            indptr.append(indptr[-1] + c.size)
    rows = sp.csr_matrix((np.concatenate(data or [np.zeros(0)]).astype(np.int32),
                          np.concatenate(indices or [np.zeros(0)]).astype(np.int64), np.asarray(indptr)),
                         shape=(len(indptr) - 1, x.shape[1]))
    return rows, start


def occlusion(output, x) -> tuple[np.ndarray, float, list[np.ndarray]]:
    """Occlusion of fingerprint bins: for CSR counts ``x [n, size]`` and a model ``output(rows)
    -> float64 [rows]`` of CSR counts, ``(prediction [n], prediction of the empty fingerprint,
    [per molecule i: f(x_i) - f(x_i with bin b emptied) for its non-zero bins b, in x's order])``.
    One call of ``output`` on every row at once (:func:`occlusion_rows`)."""
    rows, start = occlusion_rows(x)
    out = np.asarray(output(rows), dtype=np.float64)
    nnz = np.diff(x.indptr)
    own = out[start] if start else np.zeros(0)
    return own, float(out[0]), [own[i] - out[s + 1:s + 1 + nnz[i]] for i, s in enumerate(start)]


def share_over_atoms(bins: np.ndarray, deltas: np.ndarray, where: Mapping, n_atoms: int) -> np.ndarray:
    """Per atom ``float64 [n_atoms]``: each bin's ``delta`` shared equally by the environments that
    set it (``where[bin]``, one per count), each environment's share equally by its atoms. The
    atoms' total is the bins' total."""
    atoms = np.zeros(n_atoms)
    for b, d in zip(np.asarray(bins).tolist(), np.asarray(deltas).tolist()):
        envs = where[b]
        for env in envs:
            np.add.at(atoms, list(env), d / len(envs) / len(env))
    return atoms


class _Fixed:
    """A :class:`FingerprintTable` stand-in that answers every ``get`` with the fingerprints ``x``
    (already computed as the one fingerprint its model reads, :func:`fingerprint_of`)."""

    def __init__(self, x) -> None:
        self.x = x

    def __len__(self) -> int:
        return int(self.x.shape[0])

    def get(self, radius: int, size: int, fingerprint: str = "morgan"):
        return self.x


class _Rows:
    """A :class:`FingerprintTable` restricted to some of its rows (shares the parent's cache)."""

    def __init__(self, parent: FingerprintTable, rows: np.ndarray) -> None:
        self.parent, self.rows = parent, rows

    def __len__(self) -> int:
        return int(self.rows.size)

    def get(self, radius: int, size: int, fingerprint: str = "morgan"):
        return self.parent.get(radius, size, fingerprint)[self.rows]


class FingerprintMember:
    """Base of the fingerprint members (module docstring). Subclasses set ``kind``, store their
    options in ``__init__`` (and list them in :meth:`options`, the constructor's keyword arguments),
    and implement ``_fit_target(data) -> model`` and ``_restore(fields, arrays, prefix) -> model``."""

    kind: ClassVar[str] = ""
    #: the options a member saved before they existed was fitted with (:meth:`load`): before the
    #: refit, fitted on the train rows alone
    SAVED_BEFORE: ClassVar[dict] = {"refit": False}

    def __init__(self, refit: bool = True) -> None:
        self.info = None
        self.models_: list = []
        self.refit = bool(refit)
        #: ``{"val": float64 [n_val, T]}``: the predictions for the validation molecules made before
        #: refitting on them (out of sample: what the combination's weights, the calibration and the
        #: val metrics read, :func:`~.base.out_of_sample`); empty without a refit
        self.held_out_: dict = {}

    def options(self) -> dict:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.options().items())})"

    def check_trainable(self, ds) -> None:
        """Refuse (:class:`DataError`) a task this member cannot learn, or a target without a labelled
        training row: called by :meth:`fit`, and by a run of several members before any member
        trains (a multilabel run's GNN trained first, then this member refused its data)."""
        check_task(ds.info, self.kind)
        labels = graph_labels(list(ds.train), ds.info)
        for j, name in enumerate(ds.info.target_names):
            if not np.isfinite(labels[:, j]).any():
                raise DataError(f"target {name!r} has no labelled training row, so the {self.kind} member cannot learn "
                                "it; label some training molecules, or leave the target out")

    def fit(self, ds) -> "FingerprintMember":
        """Learn each target from ``ds.train``'s labelled rows; choose its options on ``ds.val``'s.

        Raises:
            DataError: a task or data the member cannot learn (node level, multiclass, graphs
                without SMILES, labels other than 0/1 for classification, a target without a
                labelled training row)."""
        self.check_trainable(ds)
        self.info = ds.info
        train, val = list(ds.train), list(ds.val)
        fp_tr, fp_va = FingerprintTable(graph_smiles(train, self.kind)), FingerprintTable(graph_smiles(val, self.kind))
        y_tr, y_va = graph_labels(train, ds.info), graph_labels(val, ds.info)
        if ds.info.task != "regression":
            seen = np.concatenate([y_tr[np.isfinite(y_tr)], y_va[np.isfinite(y_va)]])
            if not np.all((seen == 0) | (seen == 1)):
                raise DataError(f"the {self.kind} member needs 0/1 labels for a {ds.info.task} task")
        self.models_, self.held_out_ = [], {}
        held = np.empty((len(val), len(ds.info.target_names))) if self.refit else None
        both = None
        for j, name in enumerate(ds.info.target_names):
            rows, vrows = np.flatnonzero(np.isfinite(y_tr[:, j])), np.flatnonzero(np.isfinite(y_va[:, j]))
            data = TargetData(j, name, ds.info.task, fp_tr, fp_va, rows, y_tr[rows, j], vrows, y_va[vrows, j])
            self.models_.append(self._fit_or_constant(data))
            if self.refit:  # the train-only fit's val predictions, kept for out_of_sample
                held[:, j] = self.models_[j].output(fp_va)
            if self.refit and vrows.size:
                both = FingerprintTable.joined(fp_tr, fp_va) if both is None else both
                joined = TargetData(j, name, ds.info.task, both, FingerprintTable([]),
                                    np.concatenate([rows, len(train) + vrows]), np.concatenate([data.y, data.val_y]),
                                    vrows[:0], data.val_y[:0])
                # a constant chose nothing on val: it is learned again from the train and val rows as a
                # target without val rows is (a constant of one training row ignored every val label)
                self.models_[j] = (self._fit_or_constant(joined, train_only=self.models_[j])
                                   if isinstance(self.models_[j], ConstantModel) else self._refit(self.models_[j], joined))
        if self.refit:
            self.held_out_ = {"val": held}
        return self

    def _fit_or_constant(self, data: TargetData, train_only: ConstantModel | None = None):
        """The target's model (:meth:`_fit_target`), or a :class:`ConstantModel` where ``data``
        holds one labelled row or, to classify, one class. ``train_only``: ``data`` is the train
        and val rows of a target that was that constant on its training rows (the model's
        ``meta`` says so, and why it was)."""
        rows = "training rows" if train_only is None else "train and val rows"
        if data.rows.size < 2 or (data.classify and np.unique(data.y).size < 2):
            why = f"one labelled row among the {rows}" if data.rows.size < 2 else f"one class among the {rows}"
            model = ConstantModel.of(data.y, data.classify, why)
        else:
            model = self._fit_target(data)
        if train_only is not None:
            extra = {} if isinstance(model, ConstantModel) else {
                "choice": "fallback: a constant on the training rows, fitted on the train and val rows"}
            model.meta = {**model.meta, **extra, "train_only": dict(train_only.meta),
                          "refit": {"rows": "train+val", "n": int(data.rows.size)}}
        return model

    def _refit(self, model, data: TargetData):
        """``model``'s chosen options fitted again on ``data`` (the train and val rows), its
        selection record kept in ``meta`` with ``refit``: the rows it was refitted on."""
        again = self._fit_target(data, [model.meta["chosen"]])
        own = {k: v for k, v in again.meta.items() if k not in Selection.RECORD}  # e.g. the basis it was fitted on
        again.meta = {**model.meta, **own, "refit": {"rows": "train+val", "n": int(data.rows.size)}}
        return again

    def _fit_target(self, data: TargetData, points: list[dict] | None = None):
        """The target's model, the val-best of ``points`` (``None``: the grid's, or its fallback
        without labelled val rows; with one point, that point's model)."""
        raise NotImplementedError

    def predict_array(self, smiles: list[str]) -> np.ndarray:
        """Predictions (float64 ``[G, T]``: target units or probabilities) for SMILES."""
        if not self.models_:
            raise RuntimeError(f"{type(self).__name__}: call fit (or load) before predict")
        table = FingerprintTable(list(smiles))
        out = np.empty((len(table), len(self.models_)))
        for j, m in enumerate(self.models_):
            out[:, j] = m.output(table)
        return out

    def predict(self, graphs: Sequence) -> Prediction:
        import torch

        # float32: the kernel's sums in float64 move by 1e-16 with the other molecules of the batch (BLAS blocking),
        # and the float32 value a molecule gets is its own, whatever it is predicted beside
        return Prediction(mean=torch.from_numpy(self.predict_array(graph_smiles(graphs, self.kind)).astype(np.float32)))

    def atom_contributions(self, graphs: Sequence, **options) -> AtomContributions:
        """Each atom's share of the prediction for ``graphs`` by occlusion of the bins of the
        fingerprint each target's model reads (the module docstring says how and why).
        ``options`` (the GNN's ``steps``) do not apply and are ignored.

        Returns:
            an :class:`~.base.AtomContributions`: per molecule ``float64 [n_atoms, T]`` (RDKit's
            atom order of the SMILES as written), the empty fingerprint's prediction as the
            baseline, and the prediction (:meth:`predict`'s, up to float rounding).
        """
        import torch

        from ..data.fingerprints import to_mols

        if not self.models_:
            raise RuntimeError(f"{type(self).__name__}: call fit (or load) before atom_contributions")
        smiles = graph_smiles(graphs, self.kind)
        t = len(self.models_)
        atoms = [np.zeros((mol.GetNumAtoms(), t)) for mol in to_mols(smiles)]
        pred, base = np.empty((len(smiles), t)), np.empty((len(smiles), t))
        counts, where = {}, {}  # per fingerprint: the molecules' counts, and which atoms set each bin
        for j, m in enumerate(self.models_):
            if isinstance(m, ConstantModel):
                pred[:, j] = base[:, j] = m.value
                continue
            fp = fingerprint_of(m)
            x = counts[fp] = counts[fp] if fp in counts else fp.counts(smiles)
            pred[:, j], base[:, j], deltas = occlusion(lambda rows, m=m: m.output(_Fixed(rows)), x)
            for i, s in enumerate(smiles):
                if (fp, i) not in where:
                    where[fp, i] = fp.bin_atoms(s)
                atoms[i][:, j] = share_over_atoms(x.indices[x.indptr[i]:x.indptr[i + 1]], deltas[i], where[fp, i],
                                                  atoms[i].shape[0])
        method = (f"occlusion of fingerprint bins ({self.kind}): each bin's change in the prediction when it is "
                  "emptied, shared equally by the atoms of the environments that set it; baseline: the empty "
                  "fingerprint's prediction")
        return AtomContributions([torch.from_numpy(a) for a in atoms], torch.from_numpy(base), torch.from_numpy(pred),
                                 method)

    def save(self, folder: str | Path) -> None:
        """``folder/predictor.json`` (options; per target its fields and meta) and ``folder/arrays.pt``."""
        if not self.models_:
            raise RuntimeError(f"{type(self).__name__}: nothing to save before fit")
        folder = Path(folder)
        arrays, targets = {}, []
        for j, m in enumerate(self.models_):
            arrays.update(m.arrays(f"t{j}"))
            targets.append({"name": self.info.target_names[j], **m.fields(), "meta": m.meta})
        arrays.update({f"held_out.{split}": np.asarray(v, dtype=np.float64) for split, v in self.held_out_.items()})
        folder.mkdir(parents=True, exist_ok=True)
        save_arrays(folder / ARRAYS, arrays)
        write_manifest(folder, self.kind, self.info, files=[ARRAYS], options=self.options(), arrays=ARRAYS,
                       targets=targets)

    @classmethod
    def load(cls, folder: str | Path) -> "FingerprintMember":
        """The member saved in ``folder``, equal in its predictions.

        Raises:
            PredictorFileError: another kind, a missing, corrupt or unsafe file (a pickle is refused
                unrun, :func:`~.base.load_arrays`), or arrays that do not fit the manifest.
        """
        doc = read_manifest(folder)
        if doc["kind"] != cls.kind:
            raise PredictorFileError(f"{folder}: holds a {doc['kind']!r} predictor, not {cls.kind!r}")
        check_saved_files(folder, doc)
        arrays = {k: v.numpy() if hasattr(v, "numpy") else v for k, v in load_arrays(Path(folder) / ARRAYS).items()}
        try:
            self = cls(**{**cls.SAVED_BEFORE, **doc["options"]})  # options it was fitted without
            self.info = task_info(doc, folder)
            for j, t in enumerate(doc["targets"]):
                model = (ConstantModel(stored_number(t, "value", probability=self.info.task != "regression"))
                         if t["mode"] == "constant" else self._restore(t, arrays, f"t{j}"))
                model.meta = dict(t["meta"])
                self.models_.append(model)
            for key, value in arrays.items():
                if key.startswith("held_out."):
                    held = np.asarray(value, dtype=np.float64)
                    if held.ndim != 2 or held.shape[1] != self.info.num_tasks:
                        raise PredictorFileError(f"{key} has shape {held.shape} for {self.info.num_tasks} targets")
                    self.held_out_[key.split(".", 1)[1]] = held
        except PredictorFileError as exc:
            raise PredictorFileError(f"{folder}: {exc}") from None
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise PredictorFileError(f"{folder}: {cls.kind} manifest or arrays incomplete ({type(exc).__name__}: "
                                     f"{exc})") from None
        if len(self.models_) != self.info.num_tasks:
            raise PredictorFileError(f"{folder}: {len(self.models_)} target models for {self.info.num_tasks} targets")
        return self

    def _restore(self, fields: dict, arrays: Mapping, prefix: str):
        raise NotImplementedError
