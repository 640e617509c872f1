"""Graph datasets from a user's CSV of SMILES and targets.

>>> ds = load_csv("solubility.csv", "smiles", ["logS"], task="regression")  # doctest: +SKIP

Rows that cannot become a graph (bad SMILES, non-numeric targets, no target at
all for regression/binary, unknown split label) are never fatal: they are
collected as :class:`~siggate.data.base.InvalidRow` in ``dataset.invalid``,
written to ``<cache_dir>/csv/<file stem>/<key>.invalid.csv`` and summarized in
one logged warning.  The processed dataset is cached under a key made of the
file's SHA-256 and every argument.
"""

from __future__ import annotations

import csv
import gzip
import logging
import os
import re
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
import torch

from .base import TASK_TYPES, DataError, GraphDataset, InvalidRow, TaskInfo, default_cache_dir
from .cache import cached, fingerprint_file, load_dataset, report_invalid, save_dataset, write_invalid_rows
from .chem import SPLITS, InvalidSmiles, mol_to_graph, murcko_scaffold, parse_smiles, split_indices

__all__ = ["load_csv", "check_trainable", "detect_sep", "TASK_METRIC"]

logger = logging.getLogger(__name__)

#: metric used for each task type
TASK_METRIC = {"regression": "mae", "binary": "rocauc", "multilabel": "ap"}

_SPLIT_LABELS = {"train": "train", "val": "val", "valid": "val", "validation": "val", "test": "test"}
_MISSING = {"", "nan", "na", "n/a", "none", "null"}


def _parse_split(split: str) -> str | None:
    """``"scaffold"``/``"scaffold_balanced"``/``"random"`` -> None; ``"column:NAME"`` -> NAME."""
    if split in SPLITS:
        return None
    if isinstance(split, str) and split.startswith("column:") and split[len("column:"):].strip():
        return split[len("column:"):].strip()
    raise ValueError(f"split must be 'scaffold', 'scaffold_balanced', 'random' or 'column:NAME', got {split!r}")


#: delimiters :func:`detect_sep` chooses from
DELIMITERS = (",", ";", "\t", "|")


def detect_sep(path: Path) -> str:
    """The field delimiter of a CSV file, guessed by ``csv.Sniffer`` from its first 64 KiB
    among :data:`DELIMITERS` (``","`` when it cannot tell, e.g. a one-column file)."""
    opener = gzip.open if str(path).endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8-sig", errors="replace", newline="") as fh:
            sample = fh.read(65536)
    except (OSError, EOFError):
        return ","
    lines = sample.splitlines()
    if len(lines) > 1 and not sample.endswith(("\n", "\r")):
        sample = "\n".join(lines[:-1])  # drop a line cut by the sample's end
    try:
        return csv.Sniffer().sniff(sample, delimiters="".join(DELIMITERS)).delimiter
    except csv.Error:
        return ","


def _read_header(path: Path, sep: str) -> list[str]:
    try:
        header = pd.read_csv(path, sep=sep, nrows=0, encoding="utf-8-sig")
    except pd.errors.EmptyDataError:
        raise DataError(f"{path}: the file is empty (no header row); give a CSV whose first line names the "
                        "columns, e.g. smiles,y") from None
    return [str(c) for c in header.columns]


def _check_columns(path: Path, columns: list[str], wanted: list[tuple[str, str]], sep: str) -> None:
    """Raise a ValueError naming each missing column and listing the available ones."""
    missing = [(role, col) for role, col in wanted if col not in columns]
    if not missing:
        return
    what = ", ".join(f"{role} column {col!r}" for role, col in missing)
    msg = f"{path}: {what} not found; available columns: {columns}"
    if len(columns) == 1:
        for delim, label in ((";", "';'"), ("\t", "a tab"), (",", "','"), ("|", "'|'")):
            if delim != sep and delim in columns[0]:
                msg += (
                    f". The header was read as a single column containing {label}: "
                    f"the file looks delimited by {label}, not {sep!r} (wrong delimiter? pass sep={delim!r}, "
                    f"--sep {delim!r} on the command line)"
                )
                break
    stripped = {c.strip(): c for c in columns}
    near = [f"{col!r} (found {stripped[col.strip()]!r} with spaces)" for _, col in missing if col.strip() in stripped]
    if near:
        msg += "; note: " + ", ".join(near)
    flags = {"SMILES": "--smiles-col", "target": "--target-col", "split": "--split column:NAME"}
    msg += "; name the right column with " + ", ".join(dict.fromkeys(flags[role] for role, _ in missing))
    raise DataError(msg)


def _targets(frame: pd.DataFrame, target_cols: list[str], task: str) -> tuple[np.ndarray, list[str | None]]:
    """Parse target columns: float array [n, T] (NaN = missing) and a per-row error (or None)."""
    n = len(frame)
    y = np.full((n, len(target_cols)), np.nan, dtype=np.float64)
    errors: list[str | None] = [None] * n
    for t, col in enumerate(target_cols):
        raw = frame[col].astype(str).str.strip()
        missing = raw.str.lower().isin(_MISSING).to_numpy()
        values = np.array(pd.to_numeric(raw.where(~missing, None), errors="coerce"), dtype=np.float64)
        for i in np.flatnonzero(~missing & np.isnan(values)):
            errors[i] = errors[i] or f"target column {col!r}: {raw.iat[i]!r} is not a number"
        values[missing] = np.nan
        bad_inf = np.isinf(values)
        for i in np.flatnonzero(bad_inf):
            errors[i] = errors[i] or f"target column {col!r}: {raw.iat[i]!r} is not finite"
        if task in ("binary", "multilabel"):
            ok = np.isnan(values) | (values == 0) | (values == 1)
            for i in np.flatnonzero(~ok & ~bad_inf):
                errors[i] = errors[i] or f"target column {col!r}: label {raw.iat[i]!r} is not 0 or 1"
        y[:, t] = values
    if task in ("regression", "binary"):
        for i in np.flatnonzero(np.isnan(y).all(axis=1)):
            errors[i] = errors[i] or (
                "no target value" if len(target_cols) == 1 else f"no target value in any of {target_cols}"
            )
    return y, errors


def _check_any_numeric(path: Path, frame: pd.DataFrame, target_cols: list[str], y: np.ndarray) -> None:
    """A target column in which no row holds a number is a wrong column, not bad rows."""
    for t, col in enumerate(target_cols):
        if np.isfinite(y[:, t]).any():
            continue
        raw = [v for v in frame[col].astype(str).str.strip() if v.lower() not in _MISSING]
        if not raw:
            raise DataError(f"{path}: target column {col!r} is empty in every row; name the column that holds "
                            "the values with --target-col")
        first = ", ".join(repr(v) for v in list(dict.fromkeys(raw))[:3])
        raise DataError(f"{path}: target column {col!r} holds no numeric value (first values: {first}); "
                        "targets must be numbers (0/1 for classification): choose another --target-col or "
                        "encode the labels as numbers")


def check_trainable(path: Path, ds: GraphDataset) -> None:
    """Raise :class:`DataError` when a model cannot be trained on ``ds``: no usable row, or an
    empty split (``siggate train`` calls this; :func:`load_csv` itself only warns)."""
    n_valid = sum(ds.sizes().values())
    if n_valid == 0 and not ds.invalid:
        raise DataError(f"{path}: the file has a header but no data rows; add one row per molecule")
    if n_valid == 0:
        reasons = "; ".join(f"line {r.index + 2}: {r.reason}" for r in ds.invalid[:3])
        raise DataError(f"{path}: none of the {len(ds.invalid)} rows can be used ({reasons}); check the SMILES "
                        "column (--smiles-col) and the targets")
    empty = [name for name, graphs in ds.splits.items() if not graphs]
    if empty:
        raise DataError(f"{path}: the {' and '.join(empty)} split{'s are' if len(empty) > 1 else ' is'} empty "
                        f"({n_valid} usable rows); add rows, or choose another --split")


def build_csv(
    path: str | os.PathLike,
    smiles_col: str,
    target_cols: list[str],
    task: str,
    split: str = "scaffold",
    seed: int = 0,
    *,
    frac: Sequence[float] = (0.8, 0.1, 0.1),
    sep: str = ",",
    allow_unsanitized: bool = False,
) -> GraphDataset:
    """Featurize a CSV (no caching); see :func:`load_csv`."""
    path = Path(path)
    split_col = _parse_split(split)
    usecols = list(dict.fromkeys([smiles_col, *target_cols, *([split_col] if split_col else [])]))
    frame = pd.read_csv(
        path, sep=sep, dtype=str, keep_default_na=False, na_filter=False, usecols=usecols, encoding="utf-8-sig"
    )
    if frame.empty:
        raise DataError(f"{path}: the file has a header but no data rows; add one row per molecule")
    y_all, errors = _targets(frame, target_cols, task)
    _check_any_numeric(path, frame, target_cols, y_all)
    smiles_all = frame[smiles_col].astype(str).tolist()
    split_all = frame[split_col].astype(str).tolist() if split_col else None

    graphs, keys, invalid = [], [], []
    for i, smi in enumerate(smiles_all):
        smi = smi.strip()
        try:
            if errors[i] is not None:
                raise InvalidSmiles(errors[i])
            label = None
            if split_all is not None:
                label = _SPLIT_LABELS.get(split_all[i].strip().lower())
                if label is None:
                    raise InvalidSmiles(
                        f"split column {split_col!r}: unknown value {split_all[i]!r} "
                        "(expected train, val, valid or test)"
                    )
            mol = parse_smiles(smi, allow_unsanitized=allow_unsanitized)
            data = mol_to_graph(mol)
            if split in ("scaffold", "scaffold_balanced"):
                try:
                    key = murcko_scaffold(mol)
                except Exception:  # partially sanitized molecules: own group
                    key = "\x00row:" + str(i)
            else:
                key = label
        except InvalidSmiles as exc:
            invalid.append(InvalidRow(i, smi, str(exc)))
            continue
        except Exception as exc:  # never let one odd row stop the whole file
            invalid.append(InvalidRow(i, smi, f"{type(exc).__name__}: {exc}"))
            continue
        data.y = torch.from_numpy(y_all[i : i + 1].astype(np.float32))
        data.smiles = smi
        data.idx = i
        graphs.append(data)
        keys.append(key)

    if split in SPLITS:
        idx = split_indices(split, keys, frac, seed)
    else:
        idx = {name: [j for j, k in enumerate(keys) if k == name] for name in ("train", "val", "test")}

    info = TaskInfo(
        name="csv",
        task=task,
        num_tasks=len(target_cols),
        metric=TASK_METRIC[task],
        node_features="ogb",
        target_names=list(target_cols),
    )
    return GraphDataset(
        info=info,
        splits={k: [graphs[j] for j in idx[k]] for k in ("train", "val", "test")},
        invalid=invalid,
        source=str(path),
    )


def load_csv(
    path: str | os.PathLike,
    smiles_col: str,
    target_cols: list[str],
    task: str,
    split: str = "scaffold",
    cache_dir=None,
    seed: int = 0,
    *,
    frac: Sequence[float] = (0.8, 0.1, 0.1),
    sep: str | None = ",",
    allow_unsanitized: bool = False,
    rebuild: bool = False,
) -> GraphDataset:
    """Load a CSV of SMILES and targets as a :class:`GraphDataset` (cached).

    Args:
        path: the CSV file (``.csv`` or compressed, e.g. ``.csv.gz``).
        smiles_col: column holding SMILES.
        target_cols: target column(s); empty cells (or NA/NaN/None) are missing labels.
        task: ``"regression"`` (metric MAE), ``"binary"`` (one 0/1 column, ROC-AUC)
            or ``"multilabel"`` (0/1 columns with missing labels allowed, AP).
        split: ``"scaffold"`` (deterministic Bemis-Murcko, largest scaffold groups to
            train), ``"scaffold_balanced"`` (large groups to train, the others in a fixed
            shuffled order: see :func:`~siggate.data.chem.split_by_groups`), ``"random"``
            (seeded) or ``"column:NAME"`` (column NAME says train/val/valid/test per row).
        cache_dir: cache root; defaults to :func:`default_cache_dir`.
        seed: seed of the random split and of the balanced scaffold order.
        frac: train/val/test fractions for the scaffold and random splits.
        sep: field delimiter; ``None`` detects it (:func:`detect_sep`; ``siggate train``
            passes ``None`` unless ``--sep`` is given).
        allow_unsanitized: keep molecules that only fail RDKit sanitization
            (partially sanitized) instead of reporting them as invalid rows.
        rebuild: ignore an existing cache file.

    Raises:
        ValueError: bad arguments. :class:`~siggate.data.base.DataError` (a
            ``ValueError``): an empty file, missing columns (the message lists the
            available columns and hints at a wrong delimiter), no data rows, a target
            column without a single number, no usable row, or an empty split.
        FileNotFoundError: no such file.
    """
    path = Path(path)
    if sep is None:
        sep = detect_sep(path) if path.is_file() else ","
    target_cols = _check_arguments(path, smiles_col, target_cols, task, split, sep)
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    parts = {
        "dataset": "csv",
        "path": str(path.resolve()),
        "source_sha256": fingerprint_file(path),
        "smiles_col": smiles_col,
        "target_cols": target_cols,
        "task": task,
        "split": split,
        "seed": int(seed),
        "frac": [float(f) for f in frac],
        "sep": sep,
        "allow_unsanitized": bool(allow_unsanitized),
    }
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", path.name.split(".")[0]) or "data"
    folder = f"csv/{stem}"
    ds = cached(
        cache_dir,
        folder,
        parts,
        lambda: build_csv(
            path, smiles_col, target_cols, task, split, seed, frac=frac, sep=sep, allow_unsanitized=allow_unsanitized
        ),
        save=save_dataset,
        load=load_dataset,
        rebuild=rebuild,
    )
    _report(path, ds, fresh=cached.last_hit is False)
    return ds


def _check_arguments(path: Path, smiles_col: str, target_cols, task: str, split: str, sep: str) -> list[str]:
    """Check :func:`load_csv`'s arguments and the file's header; returns the target columns
    as a list of strings.  Raises ``ValueError`` / ``FileNotFoundError`` as documented there."""
    if isinstance(target_cols, str):
        target_cols = [target_cols]
    target_cols = [str(c) for c in target_cols]
    if task not in TASK_TYPES:
        raise ValueError(f"task must be one of {TASK_TYPES}, got {task!r}")
    if not target_cols:
        raise ValueError("target_cols: name at least one target column")
    if len(set(target_cols)) != len(target_cols):
        raise ValueError(f"target_cols has repeated columns: {target_cols}")
    if task == "binary" and len(target_cols) != 1:
        raise ValueError(
            f"task 'binary' takes exactly one target column, got {len(target_cols)}; use task='multilabel'"
        )
    split_col = _parse_split(split)
    if not path.is_file():
        raise FileNotFoundError(f"CSV file not found: {path}" + (" (it is a folder)" if path.is_dir() else ""))
    columns = _read_header(path, sep)
    wanted = [("SMILES", smiles_col)] + [("target", c) for c in target_cols]
    if split_col:
        wanted.append(("split", split_col))
    _check_columns(path, columns, wanted, sep)
    return target_cols


def _report(path: Path, ds: GraphDataset, fresh: bool) -> None:
    """Log the invalid rows (written next to the cache file) and any empty split."""
    log_path = None
    if ds.invalid:
        try:
            log_path = write_invalid_rows(Path(cached.last_path).with_suffix(".invalid.csv"), ds.invalid)
        except OSError as exc:
            logger.warning("%s: could not write the invalid-row log: %s", path, exc)
    total = sum(ds.sizes().values()) + len(ds.invalid)
    report_invalid(path.name, ds.invalid, total, log_path, fresh, logger)
    for name, graphs in ds.splits.items():
        if not graphs:
            logger.warning("%s: the %s split is empty", path.name, name)
