"""What the fingerprint members (:mod:`.svr`, :mod:`.forest`) share: reading SMILES and labels off
graphs, standardizing a target, the val-only choice among options, the fingerprints of a list of
molecules computed once per (radius, size), and storing a sparse fingerprint matrix as plain arrays.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, fields
from typing import Mapping, Sequence

import numpy as np

from .base import PredictorFileError

#: tasks the fingerprint members learn (one model per target; ``multiclass`` and node-level tasks are refused)
TASKS = ("regression", "binary", "multilabel")


def check_task(info, kind: str) -> None:
    """Refuse a task a fingerprint member cannot learn, naming the task and the fix."""
    if info.level != "graph":
        raise ValueError(f"the {kind} member predicts one value per molecule; {info.name} is a node-level task "
                         f"(choose other members)")
    if info.task not in TASKS:
        raise ValueError(f"the {kind} member learns {', '.join(TASKS)} tasks, not {info.task!r} ({info.name}); "
                         f"choose other members")


def graph_smiles(graphs: Sequence, kind: str) -> list[str]:
    """The ``smiles`` of each graph.

    Raises:
        ValueError: a graph without a SMILES string (a dataset of typed atoms such as ZINC).
    """
    out = []
    for i, g in enumerate(graphs):
        s = getattr(g, "smiles", None)
        if not isinstance(s, str):
            raise ValueError(f"the {kind} member reads molecules from SMILES, and graph {i} carries none; "
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
        for f in fields(self):
            if not getattr(self, f.name):
                raise ValueError(f"grid option {f.name!r} needs at least one value")

    def points(self) -> list[dict]:
        """Every combination, in order (the first is the fallback)."""
        names = [f.name for f in fields(self)]
        return [dict(zip(names, vals)) for vals in itertools.product(*(getattr(self, n) for n in names))]

    def fallback(self) -> dict:
        return self.points()[0]

    def to_dict(self) -> dict:
        return {f.name: list(getattr(self, f.name)) for f in fields(self)}


@dataclass
class FingerprintTable:
    """Count fingerprints of a fixed list of SMILES, computed once per ``(radius, size)`` and kept."""

    smiles: list[str]
    sparse: bool = True
    _cache: dict = field(default_factory=dict)

    def get(self, radius: int, size: int):
        from ..data.fingerprints import morgan_counts

        key = (int(radius), int(size))
        if key not in self._cache:
            self._cache[key] = morgan_counts(self.smiles, radius=key[0], size=key[1], sparse=self.sparse)
        return self._cache[key]


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
        ok = (indptr.ndim == indices.ndim == counts.ndim == 1 and indptr.size >= 1 and indptr[0] == 0
              and indptr[-1] == indices.size == counts.size and bool(np.all(np.diff(indptr) >= 0))
              and (indices.size == 0 or (indices.min() >= 0 and indices.max() < size)))
    except KeyError as exc:
        raise PredictorFileError(f"stored arrays lack {exc.args[0]!r}") from None
    if not ok:
        raise PredictorFileError(f"stored fingerprints {prefix!r} are inconsistent (indptr/indices/counts)")
    return sp.csr_matrix((counts.astype(np.int32), indices, indptr), shape=(indptr.size - 1, int(size)))


def target_rows(y: np.ndarray, j: int) -> np.ndarray:
    """Indices of the rows labelled for target ``j``."""
    return np.flatnonzero(np.isfinite(y[:, j]))
