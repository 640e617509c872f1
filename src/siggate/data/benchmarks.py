"""Benchmark loaders: ZINC-12k, ogbg-molhiv, ogbg-molpcba, Peptides-func, Peptides-struct.

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
* ``progress`` (``True``): tqdm bars while building;
* ``rwse_steps`` / ``lap_dim`` (``0``): add positional encodings with
  :func:`siggate.data.pe.cached_pe` (cached as well);
* ``allow_unsanitized`` (molecule loaders, ``True``): keep molecules that fail RDKit
  sanitization by building them from a partially sanitized molecule, so the
  official molecule set is kept whole (ogbg-molhiv has 7 such molecules).
"""

from __future__ import annotations

import ast
import hashlib
import os
import pickle
import shutil
import tempfile
import urllib.error
import urllib.request
import warnings
import zlib
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from torch_geometric.data import Data
from tqdm.auto import tqdm

from siggate.data.base import DataError, GraphDataset, InvalidRow, TaskInfo, default_cache_dir, default_data_root
from siggate.data.registry import register_dataset

__all__ = [
    "BUILD_VERSION",
    "PEPTIDES_STRUCT_TARGETS",
    "zinc",
    "molhiv",
    "molpcba",
    "peptides_func",
    "peptides_struct",
    "verify",
    "standardize_targets",
    "LOADERS",
]

#: Bump when the graphs a loader builds change, so older caches are not reused.
BUILD_VERSION = 1

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

# Official sources (URLs as published by PyG / OGB / LRGB).
_ZINC_URL = "https://www.dropbox.com/s/feo9qle74kg48gy/molecules.zip?dl=1"  # torch_geometric.datasets.ZINC.url
_OGB_MOL_URL = "http://snap.stanford.edu/ogb/data/graphproppred/csv_mol_download/{}.zip"  # ogb master.csv
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

LOADERS: dict[str, Callable[..., GraphDataset]] = {}


def _register(name: str, description: str, needs_root: bool = True):
    def deco(fn):
        LOADERS[name] = fn
        return register_dataset(name, description, needs_root)(fn)

    return deco


# ----------------------------------------------------------------------------- helpers


def _md5(path: Path) -> str:
    h = hashlib.md5()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _offline() -> bool:
    return os.environ.get("SIGGATE_OFFLINE", "").strip().lower() in ("1", "true", "yes")


def _network_ok(url: str, timeout: float = 5.0) -> bool:
    """Whether ``url``'s host answers (any HTTP status counts); honours proxy settings."""
    if _offline():
        return False
    try:
        urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout).close()
        return True
    except urllib.error.HTTPError:
        return True
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _download_url(url: str, folder: Path, filename: str) -> Path:
    from torch_geometric.data import download_url

    folder.mkdir(parents=True, exist_ok=True)
    return Path(download_url(url, str(folder), log=True, filename=filename))


@contextmanager
def _quiet_rdkit():
    try:
        from rdkit import rdBase

        block = rdBase.BlockLogs()
    except Exception:  # pragma: no cover - very old RDKit
        block = None
    try:
        yield
    finally:
        del block


class _Layout:
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
        want = download if download is not None else _network_ok(self.url)
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
                "No data root: pass root=... or set SIGGATE_DATA to a folder holding " + ", ".join(self.files) + "."
            )
        lines.append(f"(a download would go to {dl_root})")
        lines.append(f"Source: {self.origin}")
        if extra_hint:
            lines.append(extra_hint)
        raise FileNotFoundError("\n".join(lines))


def _resolve_dirs(root, cache_dir) -> tuple[Path | None, Path]:
    if root is None:
        root = default_data_root()
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return (Path(root) if root is not None else None), cache_dir


def _fingerprints(base: Path, files: list[str]) -> dict:
    from siggate.data.cache import fingerprint_file

    return {f: fingerprint_file(base / f) for f in files}


def _cache_graphs(cache_dir: Path, name: str, parts: dict, build: Callable[[], list]) -> list[Data]:
    from siggate.data.cache import cached, load_graphs, save_graphs

    return cached(cache_dir / "datasets", name, parts, build, save=save_graphs, load=load_graphs)


def _check_kwargs(loader: str, kw: dict) -> None:
    if kw:
        warnings.warn(f"{loader}: ignoring unknown options {sorted(kw)}", stacklevel=3)


def _featurize(
    smiles: list[str], labels: np.ndarray, allow_unsanitized: bool, progress: bool, desc: str
) -> tuple[list[Data], list[InvalidRow]]:
    """SMILES -> OGB graphs with ``y [1, T]`` and ``idx``; failures become :class:`InvalidRow`."""
    from siggate.data.chem import InvalidSmiles, smiles_to_graph

    y_all = torch.as_tensor(np.asarray(labels, dtype=np.float32).reshape(len(smiles), -1))
    graphs, invalid = [], []
    with _quiet_rdkit():
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


def _invalid_rows(smiles: list[str], indices, allow_unsanitized: bool) -> list[InvalidRow]:
    """Recompute the reasons for rows that produced no graph (cheap: only those rows)."""
    from siggate.data.chem import InvalidSmiles, smiles_to_graph

    out = []
    with _quiet_rdkit():
        for i in sorted(indices):
            if not 0 <= i < len(smiles):
                raise ValueError(f"split index {i} is beyond the {len(smiles)} rows of the source file")
            try:
                smiles_to_graph(smiles[i], allow_unsanitized=allow_unsanitized)
                reason = "no graph in the cache for this row"
            except InvalidSmiles as exc:
                reason = str(exc)
            out.append(InvalidRow(index=int(i), smiles=str(smiles[i]), reason=reason))
    return out


def _split_graphs(graphs: list[Data], split_idx: dict) -> tuple[dict, set]:
    by_idx = {int(g.idx): g for g in graphs}
    splits, missing = {}, set()
    for key, idx in split_idx.items():
        splits[key] = [by_idx[int(i)] for i in idx if int(i) in by_idx]
        missing.update(int(i) for i in idx if int(i) not in by_idx)
    return splits, missing


def _check_split(split_idx: dict, name: str) -> None:
    """Splits must hold non-negative, distinct, pairwise disjoint row indices."""
    seen = set()
    for key, idx in split_idx.items():
        idx = np.asarray(idx)
        if idx.size and idx.min() < 0:
            raise ValueError(f"{name}: split {key!r} has negative indices")
        s = set(idx.tolist())
        if len(s) != idx.size or seen & s:
            raise ValueError(f"{name}: split {key!r} has repeated or overlapping indices")
        seen |= s


def _finish(
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
    ds = GraphDataset(info=info, splits=splits, invalid=invalid, source=source)
    if rwse_steps > 0 or lap_dim > 0:
        from siggate.data.cache import cache_key
        from siggate.data.pe import cached_pe

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


def _mol_parts(name: str, allow_unsanitized: bool, base: Path, files: list[str]) -> dict:
    """Cache-key parts of a loader that builds graphs from SMILES in ``files`` (under ``base``)."""
    return {
        "loader": name,
        "version": BUILD_VERSION,
        "allow_unsanitized": bool(allow_unsanitized),
        "files": _fingerprints(base, files),
    }


def _graphs_by_split(
    name: str,
    csv_path: Path,
    parts: dict,
    cache_dir: Path,
    build: Callable[[object], list[Data]],
    split_idx_of: Callable[[], dict],
    allow_unsanitized: bool,
) -> tuple[dict, list[InvalidRow]]:
    """Graphs of the SMILES CSV ``csv_path``, built by ``build(dataframe)`` and cached under
    ``parts``, cut by the split ``split_idx_of()`` (checked); rows of the split without a
    graph become :class:`InvalidRow`.  The CSV is read at most once, and only when needed."""
    frame: dict = {}

    def read():
        if "df" not in frame:
            frame["df"] = _read_csv(csv_path)
        return frame["df"]

    graphs = _cache_graphs(cache_dir, name, parts, lambda: build(read()))
    split_idx = split_idx_of()
    _check_split(split_idx, name)
    splits, missing = _split_graphs(graphs, split_idx)
    invalid = _invalid_rows(read()["smiles"].astype(str).tolist(), missing, allow_unsanitized) if missing else []
    return splits, invalid


def _read_csv(path, *args, **kwargs):
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


def _read_index_csv(path: Path) -> np.ndarray:
    import pandas as pd

    return _read_csv(path, header=None).iloc[:, 0].to_numpy(dtype=np.int64)


# ----------------------------------------------------------------------------- ZINC


def _read_pyg_processed(path: Path) -> list[Data]:
    """Split a PyG ``InMemoryDataset`` processed file into per-graph ``Data`` objects.

    Handles the old ``(Data, slices)`` 2-tuple and the PyG >= 2.4 ``(dict, slices,
    cls)`` / ``(dict, slices, sizes, cls)`` tuples.  ``edge_index`` is stored per graph
    with local node ids (``InMemoryDataset.collate`` does not increment it).
    """
    from torch_geometric.io import fs

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = fs.torch_load(str(path))
    if not isinstance(out, tuple) or len(out) not in (2, 3, 4):
        raise ValueError(f"{path}: not a PyG processed (data, slices) file")
    if len(out) == 2:
        data, slices = out
        if isinstance(data, dict):
            data = Data.from_dict(data)
    else:
        data_dict, slices = out[0], out[1]
        data_cls = out[-1]
        data = data_cls.from_dict(data_dict) if isinstance(data_dict, dict) else data_dict
    need = ("x", "edge_index", "edge_attr", "y")
    for key in need:
        if key not in slices or data[key] is None:
            raise ValueError(f"{path}: missing {key!r}")
    counts = {k: torch.diff(torch.as_tensor(slices[k])).tolist() for k in need}
    num = len(counts["x"])
    if any(len(c) != num for c in counts.values()):
        raise ValueError(f"{path}: inconsistent slices")
    xs = torch.split(data.x.reshape(data.x.shape[0], -1).long(), counts["x"], dim=0)
    eis = torch.split(data.edge_index.long(), counts["edge_index"], dim=1)
    eas = torch.split(data.edge_attr.reshape(data.edge_attr.shape[0], -1).long(), counts["edge_attr"], dim=0)
    ys = torch.split(data.y.reshape(data.y.shape[0], -1).float(), counts["y"], dim=0)
    graphs = []
    for i in range(num):
        x, ei, ea, y = xs[i], eis[i], eas[i], ys[i]
        if ei.numel() and int(ei.max()) >= x.shape[0]:
            raise ValueError(f"{path}: graph {i} has edge ids beyond its {x.shape[0]} nodes")
        graphs.append(Data(x=x.clone(), edge_index=ei.clone(), edge_attr=ea.clone(), y=y.reshape(1, -1).clone(), idx=i))
    return graphs


def _fetch_zinc(dl_root: Path) -> None:
    from torch_geometric.datasets import ZINC

    for split in ("train", "val", "test"):  # downloads molecules.zip and processes the 12k subset
        ZINC(str(dl_root / "ZINC"), subset=True, split=split)


_ZINC_SPLITS = {"train": "train", "val": "val", "test": "test"}


@_register("zinc", "ZINC-12k subset (benchmarking-gnns / PyG ZINC(subset=True)), penalized logP regression, MAE")
def zinc(
    root=None,
    cache_dir=None,
    *,
    download: bool | None = None,
    progress: bool = True,
    rwse_steps: int = 0,
    lap_dim: int = 0,
    **kw,
) -> GraphDataset:
    """ZINC-12k from PyG's processed files ``<root>/ZINC/subset/processed/{train,val,test}.pt``.

    The files are read directly (PyG's ``ZINC`` class insists on the raw pickles).
    ``x`` is ``[N, 1]`` atom types (28), ``edge_attr`` ``[E, 1]`` bond types 1..3,
    ``y`` ``[1, 1]``; ``idx`` is the graph's position in its split file.
    """
    _check_kwargs("zinc", kw)
    root, cache_dir = _resolve_dirs(root, cache_dir)
    files = [f"ZINC/subset/processed/{s}.pt" for s in _ZINC_SPLITS.values()]
    layout = _Layout(
        "zinc", files, f"PyG torch_geometric.datasets.ZINC(subset=True), raw data {_ZINC_URL}", _ZINC_URL, _fetch_zinc
    )
    base = layout.locate(root, cache_dir, download)
    prints = _fingerprints(base, files)
    splits = {}
    for key, fname in _ZINC_SPLITS.items():
        rel = f"ZINC/subset/processed/{fname}.pt"
        parts = {"loader": "zinc", "version": BUILD_VERSION, "split": key, "file": prints[rel]}
        splits[key] = _cache_graphs(cache_dir, f"zinc-{key}", parts, lambda rel=rel: _read_pyg_processed(base / rel))
    for key, graphs in splits.items():
        for g in graphs:
            if g.x.shape[1] != 1 or g.edge_attr.shape[1] != 1:
                raise ValueError(f"zinc/{key}: expected one atom-type and one bond-type column")
    info = TaskInfo(
        name="zinc",
        task="regression",
        num_tasks=1,
        metric="mae",
        node_features="typed",
        num_node_types=28,
        num_edge_types=4,
        target_names=["penalized_logp"],
    )
    parts = {"loader": "zinc", "version": BUILD_VERSION, "files": prints}
    return _finish("zinc", info, splits, [], str(base / "ZINC"), parts, cache_dir, rwse_steps, lap_dim, progress)


# ----------------------------------------------------------------------------- OGB molecules


def _fetch_ogb(download_name: str, folder: str) -> Callable[[Path], None]:
    def fetch(dl_root: Path) -> None:
        from torch_geometric.data import extract_zip

        url = _OGB_MOL_URL.format(download_name)
        with tempfile.TemporaryDirectory(dir=dl_root) as tmp:
            path = _download_url(url, Path(tmp), f"{download_name}.zip")
            extract_zip(str(path), tmp)
            target = dl_root / folder
            if target.exists():
                shutil.rmtree(target)
            shutil.move(str(Path(tmp) / download_name), str(target))

    return fetch


_OGB_SPLITS = {"train": "train", "val": "valid", "test": "test"}


def _verify_ogb_raw(ddir: Path, graphs: list[Data], labels: np.ndarray, n_rows: int, name: str) -> None:
    """Compare per-molecule atom/bond counts and labels with the official raw files, if present."""
    import pandas as pd

    problems = []
    by_idx = {int(g.idx): g for g in graphs}
    raw = ddir / "raw"
    for fname, what in (("num-node-list.csv.gz", "atoms"), ("num-edge-list.csv.gz", "bonds")):
        path = raw / fname
        if not path.is_file():
            continue
        ref = _read_index_csv(path)
        if ref.shape[0] != n_rows:
            problems.append(f"{fname} has {ref.shape[0]} rows, mol.csv.gz has {n_rows}")
            continue
        for i, g in by_idx.items():
            got = int(g.num_nodes) if what == "atoms" else int(g.edge_index.shape[1]) // 2
            if got != int(ref[i]):
                problems.append(f"row {i}: {got} {what}, official {int(ref[i])} ({g.smiles})")
    path = raw / "graph-label.csv.gz"
    if path.is_file():
        ref = _read_csv(path, header=None).to_numpy(dtype=np.float64)
        if ref.shape != labels.shape:
            problems.append(f"graph-label.csv.gz has shape {ref.shape}, mol.csv.gz labels {labels.shape}")
        else:
            same = (ref == labels) | (np.isnan(ref) & np.isnan(labels))
            for i in np.nonzero(~same.all(axis=1))[0][:20]:
                problems.append(f"row {int(i)}: label {labels[i].tolist()} != official {ref[i].tolist()}")
    if problems:
        head = "\n  ".join(problems[:20])
        more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
        raise ValueError(f"{name}: {len(problems)} mismatches against the official raw files:\n  {head}{more}")


def _load_ogb_mol(
    name: str,
    folder: str,
    download_name: str,
    num_tasks: int,
    task: str,
    metric: str,
    root,
    cache_dir,
    download,
    progress: bool,
    allow_unsanitized: bool,
    rwse_steps: int,
    lap_dim: int,
    extra_hint: str = "",
) -> GraphDataset:
    import pandas as pd

    root, cache_dir = _resolve_dirs(root, cache_dir)
    split_files = [f"{folder}/split/scaffold/{s}.csv.gz" for s in _OGB_SPLITS.values()]
    files = [f"{folder}/mapping/mol.csv.gz"] + split_files
    url = _OGB_MOL_URL.format(download_name)
    origin = f"OGB (PyPI package `ogb`, PygGraphPropPredDataset('{name}')), {url}"
    layout = _Layout(name, files, origin, url, _fetch_ogb(download_name, folder))
    if root is not None and extra_hint == "" and (root / f"{folder}_partial").is_dir():
        extra_hint = f"Note: {root / (folder + '_partial')} exists but holds only split/count files, not the SMILES."
    base = layout.locate(root, cache_dir, download, extra_hint)
    ddir = base / folder
    raw_files = [
        f"{folder}/raw/{f}"
        for f in ("num-node-list.csv.gz", "num-edge-list.csv.gz", "graph-label.csv.gz")
        if (ddir / "raw" / f).is_file()
    ]
    mol_csv = ddir / "mapping" / "mol.csv.gz"
    columns = list(_read_csv(mol_csv, nrows=0).columns)
    task_cols = [c for c in columns if c not in ("smiles", "mol_id")]
    if "smiles" not in columns or len(task_cols) != num_tasks:
        raise ValueError(f"{mol_csv}: expected a smiles column and {num_tasks} task columns, got {columns}")
    split_idx = {key: _read_index_csv(ddir / "split" / "scaffold" / f"{s}.csv.gz") for key, s in _OGB_SPLITS.items()}
    parts = _mol_parts(name, allow_unsanitized, base, [files[0]] + raw_files)

    def build(df) -> list[Data]:
        labels = df[task_cols].to_numpy(dtype=np.float64)
        graphs, _ = _featurize(df["smiles"].astype(str).tolist(), labels, allow_unsanitized, progress, name)
        _verify_ogb_raw(ddir, graphs, labels, len(df), name)
        return graphs

    splits, invalid = _graphs_by_split(name, mol_csv, parts, cache_dir, build, lambda: split_idx, allow_unsanitized)
    info = TaskInfo(name=name, task=task, num_tasks=num_tasks, metric=metric, target_names=task_cols)
    return _finish(name, info, splits, invalid, str(ddir), parts, cache_dir, rwse_steps, lap_dim, progress)


@_register("molhiv", "ogbg-molhiv (OGB): HIV inhibition, binary, ROC-AUC; graphs built from the SMILES mapping")
def molhiv(
    root=None,
    cache_dir=None,
    *,
    download: bool | None = None,
    progress: bool = True,
    allow_unsanitized: bool = True,
    rwse_steps: int = 0,
    lap_dim: int = 0,
    **kw,
) -> GraphDataset:
    """ogbg-molhiv from ``<root>/ogbg_molhiv/mapping/mol.csv.gz`` + the official scaffold split.

    Graphs are built from the SMILES (OGB features); the per-molecule atom and bond
    counts and labels are checked against ``raw/num-{node,edge}-list.csv.gz`` and
    ``raw/graph-label.csv.gz`` when present (a mismatch raises ``ValueError``).
    """
    _check_kwargs("molhiv", kw)
    return _load_ogb_mol(
        "molhiv", "ogbg_molhiv", "hiv", 1, "binary", "rocauc",
        root, cache_dir, download, progress, allow_unsanitized, rwse_steps, lap_dim,
    )  # fmt: skip


@_register("molpcba", "ogbg-molpcba (OGB): 128 bioassays, multilabel with missing labels, AP")
def molpcba(
    root=None,
    cache_dir=None,
    *,
    download: bool | None = None,
    progress: bool = True,
    allow_unsanitized: bool = True,
    rwse_steps: int = 0,
    lap_dim: int = 0,
    **kw,
) -> GraphDataset:
    """ogbg-molpcba from ``<root>/ogbg_molpcba/mapping/mol.csv.gz`` (128 task columns,
    ``smiles``, ``mol_id``) + the official scaffold split; missing labels stay NaN."""
    _check_kwargs("molpcba", kw)
    return _load_ogb_mol(
        "molpcba", "ogbg_molpcba", "pcba", 128, "multilabel", "ap",
        root, cache_dir, download, progress, allow_unsanitized, rwse_steps, lap_dim,
    )  # fmt: skip


# ----------------------------------------------------------------------------- Peptides (LRGB)


def _load_split_pickle(path: Path, name: str) -> dict:
    with open(path, "rb") as f:
        try:
            raw = pickle.load(f)
        except (EOFError, pickle.UnpicklingError, ValueError) as exc:
            raise DataError(f"{f.name}: the split file is truncated or corrupt ({exc})") from None
    try:
        return {key: np.asarray(raw[key], dtype=np.int64).reshape(-1) for key in ("train", "val", "test")}
    except KeyError as exc:
        raise ValueError(f"{name}: {path} lacks split {exc}") from None


def _fetch_peptides(folder: str, csv_name: str, csv_url: str, csv_md5: str, split_name: str, split_url: str):
    def fetch(dl_root: Path) -> None:
        target = dl_root / folder
        csv = _download_url(csv_url, target / "raw", csv_name)
        if _md5(csv) != csv_md5:
            csv.unlink()
            raise ValueError(f"downloaded {csv_name} has an unexpected MD5 (want {csv_md5})")
        split = _download_url(split_url, target, split_name)
        if _md5(split) != _PEP_SPLIT_MD5:
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
    progress: bool,
    allow_unsanitized: bool,
    rwse_steps: int,
    lap_dim: int,
) -> GraphDataset:
    """A Peptides dataset once its files are found under ``base``: graphs from the CSV's
    SMILES with the targets ``targets(dataframe, csv_path)``, cut by the LRGB split pickle."""
    parts = _mol_parts(name, allow_unsanitized, base, [csv_rel])

    def build(df) -> list[Data]:
        values = targets(df, base / csv_rel)
        graphs, _ = _featurize(df["smiles"].astype(str).tolist(), values, allow_unsanitized, progress, name)
        return graphs

    def split_idx_of() -> dict:
        return _load_split_pickle(base / split_rel, name)

    splits, invalid = _graphs_by_split(name, base / csv_rel, parts, cache_dir, build, split_idx_of, allow_unsanitized)
    parts = dict(parts, split=_fingerprints(base, [split_rel]))
    return _finish(name, info, splits, invalid, str(base / folder), parts, cache_dir, rwse_steps, lap_dim, progress)


def _peptides_func_labels(df, csv: Path) -> np.ndarray:
    """The 10 function labels, stored as a list literal per row."""
    labels = np.stack([np.asarray(ast.literal_eval(s), dtype=np.float64) for s in df["labels"]])
    if labels.ndim != 2 or labels.shape[1] != 10:
        raise ValueError(f"{csv}: expected 10-dim label lists, got shape {labels.shape}")
    return labels


@_register("peptides-func", "Peptides-func (LRGB): 10 peptide functions, multilabel, AP")
def peptides_func(
    root=None,
    cache_dir=None,
    *,
    download: bool | None = None,
    progress: bool = True,
    allow_unsanitized: bool = True,
    rwse_steps: int = 0,
    lap_dim: int = 0,
    **kw,
) -> GraphDataset:
    """Peptides-func from ``<root>/peptides-functional/raw/peptide_multi_class_dataset.csv.gz``
    and ``<root>/peptides-functional/splits_random_stratified_peptide.pickle``."""
    _check_kwargs("peptides-func", kw)
    root, cache_dir = _resolve_dirs(root, cache_dir)
    csv_rel = "peptides-functional/raw/peptide_multi_class_dataset.csv.gz"
    split_rel = "peptides-functional/splits_random_stratified_peptide.pickle"
    fetch = _fetch_peptides(
        "peptides-functional", "peptide_multi_class_dataset.csv.gz", _PEP_FUNC_CSV_URL, _PEP_FUNC_CSV_MD5,
        "splits_random_stratified_peptide.pickle", _PEP_FUNC_SPLIT_URL,
    )  # fmt: skip
    origin = f"LRGB (Dwivedi et al. 2022) via GraphGPS PeptidesFunctionalDataset: {_PEP_FUNC_CSV_URL} and {_PEP_FUNC_SPLIT_URL}"
    base = _Layout("peptides-func", [csv_rel, split_rel], origin, _PEP_FUNC_CSV_URL, fetch).locate(
        root, cache_dir, download
    )
    info = TaskInfo(name="peptides-func", task="multilabel", num_tasks=10, metric="ap")
    return _load_peptides(
        "peptides-func", "peptides-functional", base, csv_rel, split_rel, _peptides_func_labels, info, cache_dir,
        progress, allow_unsanitized, rwse_steps, lap_dim,
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
        raise ValueError(f"{csv}: missing columns {missing_cols}")
    values = df[PEPTIDES_STRUCT_TARGETS].to_numpy(dtype=np.float64)
    if normalized:
        mean, std = values.mean(axis=0), values.std(axis=0, ddof=1)
        if not (np.all(np.abs(mean) < 1e-6) and np.all(np.abs(std - 1.0) < 1e-6)):
            raise ValueError(
                f"{csv}: targets are not standardized (means {mean.round(4).tolist()}, "
                f"stds {std.round(4).tolist()})"
            )
        return values
    return standardize_targets(values)


@_register("peptides-struct", "Peptides-struct (LRGB): 11 standardized 3D-shape targets, regression, MAE")
def peptides_struct(
    root=None,
    cache_dir=None,
    *,
    download: bool | None = None,
    progress: bool = True,
    allow_unsanitized: bool = True,
    rwse_steps: int = 0,
    lap_dim: int = 0,
    **kw,
) -> GraphDataset:
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
    _check_kwargs("peptides-struct", kw)
    root, cache_dir = _resolve_dirs(root, cache_dir)
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
                    if s == _FUNC_SPLIT_REL and _md5(root / s) != _PEP_SPLIT_MD5:
                        continue
                    base, csv_rel, split_rel = root, c, s
    if base is None:
        hint = (
            f"Also accepted under the root: {_STRUCT_RAW_REL} (unnormalized; standardized here as LRGB does) "
            f"instead of the normalized CSV, and {_FUNC_SPLIT_REL} (when its MD5 is the official "
            f"{_PEP_SPLIT_MD5}) instead of the structural split."
        )
        base = _Layout(
            "peptides-struct", [_STRUCT_NORM_REL, _STRUCT_SPLIT_REL], origin, _PEP_STRUCT_CSV_URL, fetch
        ).locate(root, cache_dir, download, hint)
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
        progress, allow_unsanitized, rwse_steps, lap_dim,
    )  # fmt: skip


# ----------------------------------------------------------------------------- verify


def _label_stats(y: torch.Tensor, task: str) -> dict:
    y = y.double()
    present = ~torch.isnan(y)
    stats = {"missing_fraction": float(1.0 - present.double().mean()) if y.numel() else 0.0}
    if task == "regression":
        per = []
        for t in range(y.shape[1]):
            col = y[present[:, t], t]
            per.append(
                {
                    "mean": float(col.mean()),
                    "std": float(col.std()) if col.numel() > 1 else 0.0,
                    "min": float(col.min()),
                    "max": float(col.max()),
                }
            )
        stats["per_task"] = per
    else:
        filled = torch.where(present, y, torch.zeros_like(y))
        pos = filled.sum(0) / present.sum(0).clamp_min(1)
        stats["positive_rate"] = [round(float(p), 4) for p in pos]
        stats["num_labels"] = int(present.sum())
    return stats


def verify(name: str, root=None, cache_dir=None, **kw) -> dict:
    """Load ``name`` and return its counts, for ``siggate data verify NAME``.

    Keys: name, source, task, metric, num_tasks, num_graphs, splits (sizes),
    node_feature_dim, edge_feature_dim, total_nodes (atoms), total_edges (directed),
    total_bonds, nodes_per_graph (min/mean/max), invalid (count and rows), labels
    (per split: regression mean/std/min/max per task, or positive rates).
    """
    if name not in LOADERS:
        raise KeyError(f"unknown dataset {name!r}; known: {sorted(LOADERS)}")
    ds = LOADERS[name](root=root, cache_dir=cache_dir, **kw)
    graphs = [g for key in ("train", "val", "test") for g in ds.splits[key]]
    nodes = torch.tensor([int(g.num_nodes) for g in graphs], dtype=torch.float64)
    edges = sum(int(g.edge_index.shape[1]) for g in graphs)
    out = {
        "name": name,
        "source": ds.source,
        "task": ds.info.task,
        "metric": ds.info.metric,
        "num_tasks": ds.info.num_tasks,
        "num_graphs": len(graphs),
        "splits": ds.sizes(),
        "node_features": ds.info.node_features,
        "node_feature_dim": int(graphs[0].x.shape[1]) if graphs else 0,
        "edge_feature_dim": int(graphs[0].edge_attr.shape[1]) if graphs else 0,
        "total_nodes": int(nodes.sum()),
        "total_edges": edges,
        "total_bonds": edges // 2,
        "nodes_per_graph": {
            "min": int(nodes.min()) if graphs else 0,
            "mean": round(float(nodes.mean()), 3) if graphs else 0.0,
            "max": int(nodes.max()) if graphs else 0,
        },
        "invalid": {"count": len(ds.invalid), "rows": [r.index for r in ds.invalid]},
        "labels": {},
    }
    for key in ("train", "val", "test"):
        if ds.splits[key]:
            y = torch.cat([g.y.reshape(1, -1) for g in ds.splits[key]], dim=0)
            out["labels"][key] = _label_stats(y, ds.info.task)
    return out
