"""LRGB peptide benchmarks Peptides-func and Peptides-struct (Dwivedi et al. 2022), built
from the released SMILES CSVs with the official stratified split.  Registered as
``peptides-func`` and ``peptides-struct``; the common loader options are described in
:mod:`siggate.data.sources`."""

from __future__ import annotations

import ast
import pickle
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np

from .base import DataError, GraphDataset, TaskInfo
from .registry import register_dataset

if TYPE_CHECKING:
    from torch_geometric.data import Data
from .sources import (
    RESTORE,
    Layout,
    LoadOptions,
    download_url,
    featurize,
    fingerprints,
    finish,
    graphs_by_split,
    md5,
    mol_parts,
    resolve_dirs,
    restricted_pickle,
)

__all__ = ["PEPTIDES_STRUCT_TARGETS", "peptides_func", "peptides_struct", "standardize_targets"]

PEPTIDES_STRUCT_TARGETS = [
    "Inertia_mass_a",
    "Inertia_mass_b",
    "Inertia_mass_c",
    "Inertia_valence_a",
    "Inertia_valence_b",
    "Inertia_valence_c",
    "length_a",
    "length_b",
    "length_c",
    "Spherocity",
    "Plane_best_fit",
]


_PEP_FUNC_CSV_URL = "https://www.dropbox.com/s/ol2v01usvaxbsr8/peptide_multi_class_dataset.csv.gz?dl=1"
_PEP_FUNC_SPLIT_URL = "https://www.dropbox.com/s/j4zcnx2eipuo0xz/splits_random_stratified_peptide.pickle?dl=1"
_PEP_STRUCT_CSV_URL = "https://www.dropbox.com/s/0d4aalmq4b4e2nh/peptide_structure_normalized_dataset.csv.gz?dl=1"
_PEP_STRUCT_SPLIT_URL = (
    "https://www.dropbox.com/s/9dfifzft1hqgow6/splits_random_stratified_peptide_structure.pickle?dl=1"
)
# MD5s hard-coded in the LRGB / GraphGPS loaders.
_PEP_FUNC_CSV_MD5 = "701eb743e899f4d793f0e13c8fa5a1b4"
_PEP_STRUCT_CSV_MD5 = "c240c1c15466b5c907c63e180fa8aa89"
_PEP_SPLIT_MD5 = "5a0114bdadc80b94fc7ae974f13ef061"  # same for the functional and structural split
_PEP_STRUCT_RAW_CSV_MD5 = "9786061a34298a0684150f2e4ff13f47"  # peptide_structure_dataset.csv.gz (unnormalized)
#: the official releases' CSVs, whose split is LRGB's split file (:data:`_PEP_SPLIT_MD5`)
_PEP_OFFICIAL_CSV_MD5 = (_PEP_FUNC_CSV_MD5, _PEP_STRUCT_CSV_MD5, _PEP_STRUCT_RAW_CSV_MD5)


#: what an LRGB split file may name: numpy arrays (both numpy module paths) in a dict
_SPLIT_GLOBALS = frozenset({("numpy", "dtype"), ("numpy", "ndarray"), ("numpy.core.multiarray", "_reconstruct"),
                            ("numpy._core.multiarray", "_reconstruct")})


def _load_split_pickle(path: Path, name: str) -> dict:
    """The LRGB split file's train/val/test indices. It is a pickle: its unpickler finds numpy's
    arrays only (:func:`~.sources.restricted_pickle`), so a crafted file runs nothing."""
    with open(path, "rb") as f:
        try:
            raw = restricted_pickle(_SPLIT_GLOBALS, "an LRGB split file").Unpickler(f).load()
        except (EOFError, pickle.UnpicklingError, ValueError) as exc:
            raise DataError(f"{f.name}: the split file is truncated, corrupt or not LRGB's ({exc})") from None
    try:
        return {key: np.asarray(raw[key], dtype=np.int64).reshape(-1) for key in ("train", "val", "test")}
    except KeyError as exc:
        raise DataError(f"{name}: {path} lacks split {exc}") from None
    except (TypeError, ValueError, IndexError) as exc:
        raise DataError(f"{name}: {path} is not a dict of train/val/test index arrays ({exc})") from None


def _fetch_peptides(folder: str, csv_name: str, csv_url: str, csv_md5: str, split_name: str, split_url: str):
    def fetch(dl_root: Path) -> None:
        target = dl_root / folder
        csv = download_url(csv_url, target / "raw", csv_name)
        if md5(csv) != csv_md5:
            csv.unlink()
            raise ValueError(f"downloaded {csv_name} has an unexpected MD5 (want {csv_md5})")
        split = download_url(split_url, target, split_name)
        if md5(split) != _PEP_SPLIT_MD5:
            split.unlink()
            raise ValueError(f"downloaded {split_name} has an unexpected MD5 (want {_PEP_SPLIT_MD5})")
        (target / csv_md5).touch()  # LRGB release tag

    return fetch


def _load_peptides(
    name: str,
    folder: str,
    base: Path,
    csv_rel: str,
    split_rel: str,
    targets: Callable[[object, Path], np.ndarray],
    info: TaskInfo,
    cache_dir: Path,
    opts: LoadOptions,
) -> GraphDataset:
    """A Peptides dataset once its files are found under ``base``: graphs from the CSV's
    SMILES with the targets ``targets(dataframe, csv_path)``, cut by the LRGB split pickle."""
    progress, allow_unsanitized = opts.progress, opts.allow_unsanitized
    split_md5 = md5(base / split_rel)
    if split_md5 != _PEP_SPLIT_MD5 and md5(base / csv_rel) in _PEP_OFFICIAL_CSV_MD5:  # (before any featurizing)
        raise DataError(f"{name}: {base / split_rel} is not LRGB's split file (MD5 {split_md5}, the release's "
                        f"{_PEP_SPLIT_MD5}), and {base / csv_rel} is the official release's: a split file cut or "
                        "re-written scores the run on another test set; restore the split file from the official "
                        "release")
    parts = mol_parts(name, allow_unsanitized, base, [csv_rel])

    def build(df) -> list[Data]:
        values = targets(df, base / csv_rel)
        graphs, _ = featurize(df["smiles"].astype(str).tolist(), values, allow_unsanitized, progress, name)
        return graphs

    def split_idx_of() -> dict:
        return _load_split_pickle(base / split_rel, name)

    splits, invalid = graphs_by_split(name, base / csv_rel, parts, cache_dir, build, split_idx_of, allow_unsanitized,
                                      str(base / split_rel))
    parts = dict(parts, split=fingerprints(base, [split_rel]))
    return finish(name, info, splits, invalid, str(base / folder), parts, cache_dir, opts.rwse_steps, opts.lap_dim,
                  progress)


def _peptides_func_labels(df, csv: Path) -> np.ndarray:
    """The 10 function labels, stored as a list literal per row.

    Raises:
        DataError: no ``labels`` column, or a row that is not a list of 10 numbers."""
    if "labels" not in df.columns:
        raise DataError(f"{csv}: no 'labels' column; {RESTORE}")
    rows = []
    for i, text in enumerate(df["labels"]):
        try:
            row = np.asarray(ast.literal_eval(str(text)), dtype=np.float64)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            row = None
        if row is None or row.shape != (10,):
            raise DataError(f"{csv}: row {i}'s labels {str(text)[:60]!r} are not a list of 10 numbers; {RESTORE}")
        rows.append(row)
    return np.stack(rows) if rows else np.zeros((0, 10))


@register_dataset(
    "peptides-func",
    "Peptides-func (LRGB): 10 peptide functions, multilabel, AP",
    needs_root=True,
)
def peptides_func(root=None, cache_dir=None, **options) -> GraphDataset:
    """Peptides-func from ``<root>/peptides-functional/raw/peptide_multi_class_dataset.csv.gz``
    and ``<root>/peptides-functional/splits_random_stratified_peptide.pickle``."""
    opts = LoadOptions.take("peptides-func", options)
    root, cache_dir = resolve_dirs(root, cache_dir)
    csv_rel = "peptides-functional/raw/peptide_multi_class_dataset.csv.gz"
    split_rel = "peptides-functional/splits_random_stratified_peptide.pickle"
    fetch = _fetch_peptides(
        "peptides-functional", "peptide_multi_class_dataset.csv.gz", _PEP_FUNC_CSV_URL, _PEP_FUNC_CSV_MD5,
        "splits_random_stratified_peptide.pickle", _PEP_FUNC_SPLIT_URL,
    )  # fmt: skip
    origin = f"LRGB (Dwivedi et al. 2022) via GraphGPS PeptidesFunctionalDataset: {_PEP_FUNC_CSV_URL} and {_PEP_FUNC_SPLIT_URL}"
    base = Layout("peptides-func", [csv_rel, split_rel], origin, _PEP_FUNC_CSV_URL, fetch).locate(
        root, cache_dir, opts.download
    )
    info = TaskInfo(name="peptides-func", task="multilabel", num_tasks=10, metric="ap")
    return _load_peptides(
        "peptides-func", "peptides-functional", base, csv_rel, split_rel, _peptides_func_labels, info, cache_dir,
        opts,
    )  # fmt: skip


_STRUCT_DIR = "peptides-structural"
_STRUCT_NORM_REL = f"{_STRUCT_DIR}/raw/peptide_structure_normalized_dataset.csv.gz"
_STRUCT_RAW_REL = f"{_STRUCT_DIR}/raw/peptide_structure_dataset.csv.gz"
_STRUCT_SPLIT_REL = f"{_STRUCT_DIR}/splits_random_stratified_peptide_structure.pickle"
_FUNC_SPLIT_REL = "peptides-functional/splits_random_stratified_peptide.pickle"


def standardize_targets(values: np.ndarray) -> np.ndarray:
    """Column-wise z-score over the whole dataset with the sample std (``ddof=1``),
    i.e. LRGB's ``(x - x.mean()) / x.std()`` in pandas."""
    values = np.asarray(values, dtype=np.float64)
    return (values - values.mean(axis=0)) / values.std(axis=0, ddof=1)


def _peptides_struct_targets(df, csv: Path, normalized: bool) -> np.ndarray:
    """The 11 shape targets: checked to be standardized already (``normalized``) or
    standardized here."""
    missing_cols = [c for c in ["smiles"] + PEPTIDES_STRUCT_TARGETS if c not in df.columns]
    if missing_cols:
        raise DataError(f"{csv}: missing columns {missing_cols}; {RESTORE}")
    try:
        values = df[PEPTIDES_STRUCT_TARGETS].to_numpy(dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise DataError(f"{csv}: a target column holds a value that is not a number ({exc}); {RESTORE}") from None
    if normalized:
        mean, std = values.mean(axis=0), values.std(axis=0, ddof=1)
        if not (np.all(np.abs(mean) < 1e-6) and np.all(np.abs(std - 1.0) < 1e-6)):
            raise DataError(
                f"{csv}: targets are not standardized (means {mean.round(4).tolist()}, "
                f"stds {std.round(4).tolist()})"
            )
        return values
    return standardize_targets(values)


@register_dataset(
    "peptides-struct",
    "Peptides-struct (LRGB): 11 standardized 3D-shape targets, regression, MAE",
    needs_root=True,
)
def peptides_struct(root=None, cache_dir=None, **options) -> GraphDataset:
    """Peptides-struct (LRGB), 11 regression targets.

    Files: ``<root>/peptides-structural/raw/peptide_structure_normalized_dataset.csv.gz``
    and ``<root>/peptides-structural/splits_random_stratified_peptide_structure.pickle``.

    Target standardization, as in GraphGPS: GraphGPS reads the *normalized* CSV
    (targets already z-scored over all 15,535 peptides) and only asserts that every
    target column has mean 0 and std 1 (pandas, ``ddof=1``); it does not rescale.
    The original LRGB loader instead read the unnormalized
    ``peptide_structure_dataset.csv.gz`` and z-scored each column over the whole
    dataset (``(x - mean) / std``, ``ddof=1``, all splits together).  This loader does
    both: the normalized CSV is used as is after checking mean 0 / std 1 (``ValueError``
    otherwise); if only the unnormalized CSV is present it is z-scored the LRGB way,
    which yields the same targets.  MAE is reported on these standardized targets.

    The structural split pickle has the same MD5 in every LRGB loader as the
    functional one; when it is absent, ``peptides-functional``'s split is used if its
    MD5 is that official value.
    """
    opts = LoadOptions.take("peptides-struct", options)
    root, cache_dir = resolve_dirs(root, cache_dir)
    fetch = _fetch_peptides(
        _STRUCT_DIR, "peptide_structure_normalized_dataset.csv.gz", _PEP_STRUCT_CSV_URL, _PEP_STRUCT_CSV_MD5,
        "splits_random_stratified_peptide_structure.pickle", _PEP_STRUCT_SPLIT_URL,
    )  # fmt: skip
    origin = (
        "LRGB (Dwivedi et al. 2022) via GraphGPS PeptidesStructuralDataset: "
        f"{_PEP_STRUCT_CSV_URL} and {_PEP_STRUCT_SPLIT_URL}"
    )
    base = None
    csv_rel, split_rel = _STRUCT_NORM_REL, _STRUCT_SPLIT_REL
    if root is not None:  # alternatives accepted under the root only
        for c in (_STRUCT_NORM_REL, _STRUCT_RAW_REL):
            for s in (_STRUCT_SPLIT_REL, _FUNC_SPLIT_REL):
                if base is None and (root / c).is_file() and (root / s).is_file():
                    if s == _FUNC_SPLIT_REL and md5(root / s) != _PEP_SPLIT_MD5:
                        continue
                    base, csv_rel, split_rel = root, c, s
    if base is None:
        hint = (
            f"Also accepted under the root: {_STRUCT_RAW_REL} (unnormalized; standardized here as LRGB does) "
            f"instead of the normalized CSV, and {_FUNC_SPLIT_REL} (when its MD5 is the official "
            f"{_PEP_SPLIT_MD5}) instead of the structural split."
        )
        base = Layout(
            "peptides-struct", [_STRUCT_NORM_REL, _STRUCT_SPLIT_REL], origin, _PEP_STRUCT_CSV_URL, fetch
        ).locate(root, cache_dir, opts.download, hint)
    normalized = csv_rel == _STRUCT_NORM_REL
    info = TaskInfo(
        name="peptides-struct",
        task="regression",
        num_tasks=11,
        metric="mae",
        target_names=list(PEPTIDES_STRUCT_TARGETS),
    )
    return _load_peptides(
        "peptides-struct", _STRUCT_DIR, base, csv_rel, split_rel,
        lambda df, csv: _peptides_struct_targets(df, csv, normalized), info, cache_dir,
        opts,
    )  # fmt: skip
