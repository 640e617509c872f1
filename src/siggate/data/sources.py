"""Shared code of the downloadable benchmark loaders (:mod:`siggate.data.zinc`,
:mod:`siggate.data.ogb_mol`, :mod:`siggate.data.peptides`): where their files are, how
they are downloaded and checked, and how SMILES become cached, split graphs.

Every loader is offline-first.  It looks for the official files under a data root
(``root=``, default :func:`siggate.data.base.default_data_root`, i.e. ``$SIGGATE_DATA``)
in the official folder layout, and never writes there (the root is read-only in
CI).  Processed graphs are cached under ``cache_dir`` (default
:func:`siggate.data.base.default_cache_dir`) with :func:`siggate.data.cache.cached`,
keyed by fingerprints of the source files, so the slow SMILES featurization runs once.

When the files are not under the root, a previous download under
``<cache_dir>/downloads`` is used; failing that, the files are downloaded there
(from the official URLs, through PyG/OGB helpers) if the network is reachable,
and otherwise a :class:`FileNotFoundError` names every expected file and where it
comes from.  ``download=False`` forbids downloading, ``download=True`` forces the
attempt; the default ``None`` downloads only when the source host answers
(``SIGGATE_OFFLINE=1`` turns this off).

Common keyword arguments of every loader (``fn(root=None, cache_dir=None, **kw)``):

* ``download``: see above;
* ``progress`` (``None``: on a terminal only): tqdm bars while building;
* ``rwse_steps`` / ``lap_dim`` (``0``): add positional encodings with
  :func:`siggate.data.pe.cached_pe` (cached as well);
* ``allow_unsanitized`` (molecule loaders, ``True``): keep molecules that fail RDKit
  sanitization by building them from a partially sanitized molecule, so the
  official molecule set is kept whole (ogbg-molhiv has 7 such molecules).
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request
import warnings
import zlib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np
from tqdm.auto import tqdm

from ..files import file_digest
from .base import DataError, GraphDataset, InvalidRow, TaskInfo, cache_root, default_data_root

if TYPE_CHECKING:  # torch and PyG load when a dataset is built, not when its loader registers
    from torch_geometric.data import Data

__all__ = [
    "BUILD_VERSION", "Layout", "md5", "restricted_pickle", "network_ok", "download_url", "resolve_dirs", "fingerprints",
    "LoadOptions", "cache_graphs", "check_kwargs", "featurize", "invalid_rows", "split_graphs", "check_split", "finish",
    "mol_parts", "graphs_by_split", "read_csv", "read_index_csv",
]

#: Bump when the graphs a loader builds change, so older caches are not reused.
BUILD_VERSION = 1

def md5(path: Path) -> str:
    """MD5 hex digest of the file ``path``."""
    return file_digest(path, "md5")


def restricted_pickle(allowed: frozenset, what: str):
    """A ``pickle`` module (for ``torch.load(pickle_module=...)``, or its ``Unpickler(file).load()``)
    whose unpickler finds only the ``(module, name)`` pairs ``allowed`` and refuses any other
    before importing it, naming it and ``what`` the file should be. For the benchmarks' files
    that are pickles (LRGB's split files, PyG's processed files): a crafted one under a data root,
    which a run folder received from someone else records, would otherwise run code."""
    import pickle
    import types

    class Unpickler(pickle.Unpickler):
        def find_class(self, module, name):
            if (module, name) not in allowed:
                raise pickle.UnpicklingError(f"it names {module}.{name}, which {what} does not hold: refused unread")
            return super().find_class(module, name)

    module = types.ModuleType("siggate_restricted_pickle")
    module.__dict__.update({k: getattr(pickle, k) for k in dir(pickle) if not k.startswith("__")})
    module.Unpickler = Unpickler
    return module


def offline() -> bool:
    """Whether ``SIGGATE_OFFLINE`` forbids network access (``1``, ``true`` or ``yes``)."""
    return os.environ.get("SIGGATE_OFFLINE", "").strip().lower() in ("1", "true", "yes")


def network_ok(url: str, timeout: float = 5.0) -> bool:
    """Whether ``url``'s host answers (any HTTP status counts); honours proxy settings."""
    if offline():
        return False
    try:
        urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout).close()
        return True
    except urllib.error.HTTPError:
        return True
    except (urllib.error.URLError, OSError, ValueError):
        return False


def download_url(url: str, folder: Path, filename: str) -> Path:
    """Download ``url`` to ``folder/filename`` (PyG's ``download_url``); returns the path."""
    from torch_geometric.data import download_url

    folder.mkdir(parents=True, exist_ok=True)
    return Path(download_url(url, str(folder), log=True, filename=filename))



class Layout:
    """A dataset's expected files, relative to a data root, and how to fetch them."""

    def __init__(self, name: str, files: list[str], origin: str, url: str, fetch: Callable[[Path], None]):
        self.name = name
        self.files = files
        self.origin = origin
        self.url = url
        self.fetch = fetch

    def locate(self, root, cache_dir: Path, download: bool | None, extra_hint: str = "") -> Path:
        """Return the base folder holding every file (the root or the download cache)."""
        dl_root = cache_dir / "downloads"
        bases = ([Path(root)] if root is not None else []) + [dl_root]
        for base in bases:
            if all((base / f).is_file() for f in self.files):
                return base
        want = download if download is not None else network_ok(self.url)
        if want:
            from filelock import FileLock

            dl_root.mkdir(parents=True, exist_ok=True)
            with FileLock(str(dl_root / f".{self.name}.lock")):
                if not all((dl_root / f).is_file() for f in self.files):
                    self.fetch(dl_root)
            missing = [str(dl_root / f) for f in self.files if not (dl_root / f).is_file()]
            if missing:
                raise FileNotFoundError(f"{self.name}: download finished but these files are missing: {missing}")
            return dl_root
        shown = Path(root) if root is not None else None
        why = "downloads are disabled (download=False)" if download is False else (
            "the download source is not reachable (no network, or SIGGATE_OFFLINE=1)"
        )
        lines = [f"{self.name}: required files not found, and {why}."]
        if shown is not None:
            lines.append(f"Expected under the data root {shown}:")
            lines += [f"  {shown / f}" + ("" if (shown / f).is_file() else "   (missing)") for f in self.files]
        else:
            lines.append(
                "No data root: give --data-root DIR (root=... in Python) or set SIGGATE_DATA to a folder holding "
                + ", ".join(self.files) + "."
            )
        lines.append(f"(a download would go to {dl_root})")
        lines.append(f"Source: {self.origin}")
        if extra_hint:
            lines.append(extra_hint)
        raise FileNotFoundError("\n".join(lines))


def resolve_dirs(root, cache_dir) -> tuple[Path | None, Path]:
    """The data root (default :func:`default_data_root`, may be None) and the cache folder."""
    if root is None:
        root = default_data_root()
    cache_dir = cache_root(cache_dir)
    return (Path(root) if root is not None else None), cache_dir


def fingerprints(base: Path, files: list[str]) -> dict:
    """``{relative path: fingerprint}`` of ``files`` under ``base`` (cache-key parts)."""
    from .cache import fingerprint_file

    return {f: fingerprint_file(base / f) for f in files}


def cache_graphs(cache_dir: Path, name: str, parts: dict, build: Callable[[], list]) -> list[Data]:
    """Graphs cached under ``<cache_dir>/datasets/<name>`` keyed by ``parts``, built by ``build()`` on a miss."""
    from .cache import cached, load_graphs, save_graphs

    return cached(cache_dir / "datasets", name, parts, build, save=save_graphs, load=load_graphs)


def check_kwargs(loader: str, kw: dict, stacklevel: int = 3) -> None:
    """Warn about loader options nobody reads (a typo would otherwise pass silently)."""
    if kw:
        warnings.warn(f"{loader}: ignoring unknown options {sorted(kw)}", stacklevel=stacklevel)


@dataclass(frozen=True)
class LoadOptions:
    """The keyword options every benchmark molecule loader takes
    (``get_dataset(name, root, cache_dir, **options)``).

    Attributes:
        download: fetch missing raw files (None: unless ``SIGGATE_OFFLINE`` is set).
        progress: show featurization progress (None: only when stderr is a terminal, so that
            no bar is written into a piped log).
        allow_unsanitized: keep molecules RDKit parses only without sanitization (OGB's
            rule; loaders of pre-featurized graphs, e.g. ZINC, ignore it).
        rwse_steps: add RWSE with this many steps (0: none).
        lap_dim: add LapPE with this many eigenvectors (0: none).
    """

    download: bool | None = None
    progress: bool | None = None
    allow_unsanitized: bool = True
    rwse_steps: int = 0
    lap_dim: int = 0

    @classmethod
    def take(cls, loader: str, kw: dict) -> "LoadOptions":
        """The options in ``kw`` (a loader's ``**kw``); a warning names any other key."""
        known = {f.name for f in fields(cls)}
        rest = {k: v for k, v in kw.items() if k not in known}
        check_kwargs(loader, rest, stacklevel=4)
        return cls(**{k: v for k, v in kw.items() if k in known})

    def __post_init__(self) -> None:
        if self.progress is None:
            object.__setattr__(self, "progress", sys.stderr.isatty())


def featurize(
    smiles: list[str], labels: np.ndarray, allow_unsanitized: bool, progress: bool, desc: str
) -> tuple[list[Data], list[InvalidRow]]:
    """SMILES -> OGB graphs with ``y [1, T]`` and ``idx``; failures become :class:`InvalidRow`."""
    import torch

    from .chem import InvalidSmiles, quiet_rdkit, smiles_to_graph

    y_all = torch.as_tensor(np.asarray(labels, dtype=np.float32).reshape(len(smiles), -1))
    graphs, invalid = [], []
    with quiet_rdkit():
        for i, smi in enumerate(tqdm(smiles, desc=desc, unit="mol", disable=not progress, mininterval=1.0)):
            try:
                g = smiles_to_graph(smi, allow_unsanitized=allow_unsanitized)
            except InvalidSmiles as exc:
                invalid.append(InvalidRow(index=i, smiles=str(smi), reason=str(exc)))
                continue
            g.y = y_all[i : i + 1].clone()
            g.idx = i
            graphs.append(g)
    return graphs, invalid


def invalid_rows(smiles: list[str], indices, allow_unsanitized: bool, source: str = "the source file") -> list[InvalidRow]:
    """Recompute the reasons for rows that produced no graph (cheap: only those rows) of the SMILES
    file ``source`` (named in the error).

    Raises:
        DataError: a split index beyond the file's rows (a split file of another release)."""
    from .chem import InvalidSmiles, quiet_rdkit, smiles_to_graph

    out = []
    with quiet_rdkit():
        for i in sorted(indices):
            if not 0 <= i < len(smiles):
                raise DataError(f"split index {i} is beyond the {len(smiles)} rows of {source}: the split files and "
                                "the SMILES file are of different releases; restore both from the official release")
            try:
                smiles_to_graph(smiles[i], allow_unsanitized=allow_unsanitized)
                reason = "no graph in the cache for this row"
            except InvalidSmiles as exc:
                reason = str(exc)
            out.append(InvalidRow(index=int(i), smiles=str(smiles[i]), reason=reason))
    return out


def split_graphs(graphs: list[Data], split_idx: dict) -> tuple[dict, set]:
    """Cut ``graphs`` (by their ``idx``) into the splits; also returns the split rows without a graph."""
    by_idx = {int(g.idx): g for g in graphs}
    splits, missing = {}, set()
    for key, idx in split_idx.items():
        splits[key] = [by_idx[int(i)] for i in idx if int(i) in by_idx]
        missing.update(int(i) for i in idx if int(i) not in by_idx)
    return splits, missing


def check_split(split_idx: dict, name: str, files: str = "") -> None:
    """Splits must hold non-negative, distinct, pairwise disjoint row indices.

    Raises:
        DataError: one that does not, naming the split and the split ``files``."""
    seen = set()
    where = f" ({files})" if files else ""
    for key, idx in split_idx.items():
        idx = np.asarray(idx)
        rows = set(idx.tolist())  # (built once: a split holds up to ~400,000 rows)
        why = ("negative indices" if idx.size and idx.min() < 0
               else "repeated or overlapping indices" if len(rows) != idx.size or seen & rows else None)
        if why:
            raise DataError(f"{name}: split {key!r} has {why}{where}; restore the split files from the official release")
        seen |= rows


def finish(
    name: str,
    info: TaskInfo,
    splits: dict,
    invalid: list,
    source: str,
    parts: dict,
    cache_dir: Path,
    rwse_steps: int,
    lap_dim: int,
    progress: bool,
) -> GraphDataset:
    """The :class:`GraphDataset` of ``splits``, with positional encodings added (and cached)
    when ``rwse_steps`` or ``lap_dim`` is positive."""
    ds = GraphDataset(info=info, splits=splits, invalid=invalid, source=source)
    if rwse_steps > 0 or lap_dim > 0:
        from .cache import cache_key
        from .pe import cached_pe

        everything = [g for key in ("train", "val", "test") for g in splits[key]]
        cached_pe(
            everything,
            f"{name}-{cache_key(parts)}",
            cache_dir,
            rwse_steps=rwse_steps,
            lap_dim=lap_dim,
            progress=progress,
        )
    return ds


def mol_parts(name: str, allow_unsanitized: bool, base: Path, files: list[str]) -> dict:
    """Cache-key parts of a loader that builds graphs from SMILES in ``files`` (under ``base``)."""
    return {
        "loader": name,
        "version": BUILD_VERSION,
        "allow_unsanitized": bool(allow_unsanitized),
        "files": fingerprints(base, files),
    }


def graphs_by_split(
    name: str,
    csv_path: Path,
    parts: dict,
    cache_dir: Path,
    build: Callable[[object], list[Data]],
    split_idx_of: Callable[[], dict],
    allow_unsanitized: bool,
    split_files: str = "",
) -> tuple[dict, list[InvalidRow]]:
    """Graphs of the SMILES CSV ``csv_path``, built by ``build(dataframe)`` and cached under
    ``parts``, cut by the split ``split_idx_of()`` (checked; ``split_files`` names where it came
    from); rows of the split without a graph become :class:`InvalidRow`.  The CSV is read at most
    once, and only when needed."""
    frame: dict = {}

    def read():
        if "df" not in frame:
            frame["df"] = read_csv(csv_path)
        return frame["df"]

    graphs = cache_graphs(cache_dir, name, parts, lambda: build(read()))
    split_idx = split_idx_of()
    check_split(split_idx, name, split_files)
    splits, missing = split_graphs(graphs, split_idx)
    source = f"{csv_path} (split files: {split_files})" if split_files else str(csv_path)
    invalid = invalid_rows(read()["smiles"].astype(str).tolist(), missing, allow_unsanitized, source) if missing else []
    return splits, invalid


#: the remedy of a raw file that is damaged or not the release's
RESTORE = "restore it from the official release (or delete it so it is downloaded again)"


def read_csv(path, *args, **kwargs):
    """``pandas.read_csv`` that reports a damaged file by name instead of a bare
    ``EOFError``/``zlib.error`` (a cut download, a flipped bit)."""
    import pandas as pd

    try:
        return pd.read_csv(path, *args, **kwargs)
    except (EOFError, OSError, zlib.error, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise DataError(
            f"{path}: the file is truncated or corrupt ({type(exc).__name__}: {exc}). "
            "Restore it from the official release (or delete it so it is downloaded again)."
        ) from None


def read_index_csv(path: Path) -> np.ndarray:
    """The first column of a header-less CSV of row indices (the OGB split files), as int64.

    Raises:
        DataError: a damaged file (:func:`read_csv`), or one whose first column is not integers."""
    column = read_csv(path, header=None).iloc[:, 0]
    try:
        values = column.to_numpy(dtype=np.float64)
    except (TypeError, ValueError):
        values = np.array([np.nan])
    if not np.all(np.isfinite(values) & (values == np.round(values))):
        raise DataError(f"{path}: not a file of whole numbers (row indices or counts: its first column holds values "
                        "that are not integers); "
                        + RESTORE)
    return values.astype(np.int64)

