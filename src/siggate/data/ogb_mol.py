"""OGB molecule benchmarks ogbg-molhiv and ogbg-molpcba, built from OGB's SMILES mapping
with the official scaffold split.  Registered as ``molhiv`` and ``molpcba``; the common
loader options are described in :mod:`siggate.data.sources`."""

from __future__ import annotations

import shutil
import tempfile
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
    finish,
    graphs_by_split,
    mol_parts,
    read_csv,
    read_index_csv,
    resolve_dirs,
)

__all__ = ["molhiv", "molpcba"]

_OGB_MOL_URL = "http://snap.stanford.edu/ogb/data/graphproppred/csv_mol_download/{}.zip"  # ogb master.csv


def _fetch_ogb(download_name: str, folder: str) -> Callable[[Path], None]:
    def fetch(dl_root: Path) -> None:
        from torch_geometric.data import extract_zip

        url = _OGB_MOL_URL.format(download_name)
        with tempfile.TemporaryDirectory(dir=dl_root) as tmp:
            path = download_url(url, Path(tmp), f"{download_name}.zip")
            extract_zip(str(path), tmp)
            target = dl_root / folder
            if target.exists():
                shutil.rmtree(target)
            shutil.move(str(Path(tmp) / download_name), str(target))

    return fetch


_OGB_SPLITS = {"train": "train", "val": "valid", "test": "test"}
#: each set's molecules in its official release and the train/valid/test sizes of its scaffold split
_OFFICIAL_SPLIT_SIZES = {"molhiv": (41_127, (32_901, 4_113, 4_113)), "molpcba": (437_929, (350_343, 43_793, 43_793))}


def _check_official_split(name: str, mol_csv: Path, split_idx: dict, split_dir: Path) -> None:
    """Refuse split files of other sizes than the official scaffold split's beside the official
    release's molecules (a cut or re-written split file): the run would otherwise be scored on
    part of the test set, or on another split, under the benchmark's name.

    Raises:
        DataError: naming the sizes found and the official ones."""
    if name not in _OFFICIAL_SPLIT_SIZES:
        return
    rows, sizes = _OFFICIAL_SPLIT_SIZES[name]
    got = tuple(len(split_idx[key]) for key in _OGB_SPLITS)
    if got == sizes:
        return
    if len(read_csv(mol_csv, usecols=["smiles"])) != rows:  # another release or a set of one's own: its split
        return
    raise DataError(f"{name}: the split files in {split_dir} hold {'/'.join(f'{n:,}' for n in got)} molecules "
                    f"(train/valid/test), but {mol_csv} is the official release's {rows:,}, whose scaffold split is "
                    f"{'/'.join(f'{n:,}' for n in sizes)}: a split file is cut or not OGB's; restore the split "
                    "files from the official release")


def _verify_ogb_raw(ddir: Path, graphs: list[Data], labels: np.ndarray, n_rows: int, name: str) -> None:
    """Compare per-molecule atom/bond counts and labels with the official raw files, if present."""

    problems = []
    by_idx = {int(g.idx): g for g in graphs}
    raw = ddir / "raw"
    for fname, what in (("num-node-list.csv.gz", "atoms"), ("num-edge-list.csv.gz", "bonds")):
        path = raw / fname
        if not path.is_file():
            continue
        ref = read_index_csv(path)
        if ref.shape[0] != n_rows:
            problems.append(f"{fname} has {ref.shape[0]} rows, mol.csv.gz has {n_rows}")
            continue
        for i, g in by_idx.items():
            got = int(g.num_nodes) if what == "atoms" else int(g.edge_index.shape[1]) // 2
            if got != int(ref[i]):
                problems.append(f"row {i}: {got} {what}, official {int(ref[i])} ({g.smiles})")
    path = raw / "graph-label.csv.gz"
    if path.is_file():
        try:
            ref = read_csv(path, header=None).to_numpy(dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise DataError(f"{path}: a label that is not a number ({exc}); {RESTORE}") from None
        if ref.shape != labels.shape:
            problems.append(f"graph-label.csv.gz has shape {ref.shape}, mol.csv.gz labels {labels.shape}")
        else:
            same = (ref == labels) | (np.isnan(ref) & np.isnan(labels))
            for i in np.nonzero(~same.all(axis=1))[0][:20]:
                problems.append(f"row {int(i)}: label {labels[i].tolist()} != official {ref[i].tolist()}")
    if problems:
        head = "\n  ".join(problems[:20])
        more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
        raise DataError(f"{name}: {len(problems)} mismatches of mapping/mol.csv.gz against the official raw files in "
                        f"{ddir / 'raw'}:\n  {head}{more}\nrestore the files of one release together")


def _load_ogb_mol(
    name: str,
    folder: str,
    download_name: str,
    num_tasks: int,
    task: str,
    metric: str,
    root,
    cache_dir,
    opts: LoadOptions,
    extra_hint: str = "",
) -> GraphDataset:
    download, progress, allow_unsanitized = opts.download, opts.progress, opts.allow_unsanitized

    root, cache_dir = resolve_dirs(root, cache_dir)
    split_files = [f"{folder}/split/scaffold/{s}.csv.gz" for s in _OGB_SPLITS.values()]
    files = [f"{folder}/mapping/mol.csv.gz"] + split_files
    url = _OGB_MOL_URL.format(download_name)
    origin = f"OGB (PyPI package `ogb`, PygGraphPropPredDataset('{name}')), {url}"
    layout = Layout(name, files, origin, url, _fetch_ogb(download_name, folder))
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
    columns = list(read_csv(mol_csv, nrows=0).columns)
    task_cols = [c for c in columns if c not in ("smiles", "mol_id")]
    if "smiles" not in columns or len(task_cols) != num_tasks:
        raise DataError(f"{mol_csv}: expected a smiles column and {num_tasks} task columns, got {columns}; {RESTORE}")
    split_idx = {key: read_index_csv(ddir / "split" / "scaffold" / f"{s}.csv.gz") for key, s in _OGB_SPLITS.items()}
    _check_official_split(name, mol_csv, split_idx, ddir / "split" / "scaffold")
    parts = mol_parts(name, allow_unsanitized, base, [files[0]] + raw_files)

    def build(df) -> list[Data]:
        try:
            labels = df[task_cols].to_numpy(dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise DataError(f"{mol_csv}: a task column holds a value that is not a number ({exc}); {RESTORE}") from None
        graphs, _ = featurize(df["smiles"].astype(str).tolist(), labels, allow_unsanitized, progress, name)
        _verify_ogb_raw(ddir, graphs, labels, len(df), name)
        return graphs

    splits, invalid = graphs_by_split(name, mol_csv, parts, cache_dir, build, lambda: split_idx, allow_unsanitized,
                                      str(ddir / "split" / "scaffold"))
    info = TaskInfo(name=name, task=task, num_tasks=num_tasks, metric=metric, target_names=task_cols)
    return finish(name, info, splits, invalid, str(ddir), parts, cache_dir, opts.rwse_steps, opts.lap_dim, progress)


@register_dataset(
    "molhiv",
    "ogbg-molhiv (OGB): HIV inhibition, binary, ROC-AUC; graphs built from the SMILES mapping",
    needs_root=True,
)
def molhiv(root=None, cache_dir=None, **options) -> GraphDataset:
    """ogbg-molhiv from ``<root>/ogbg_molhiv/mapping/mol.csv.gz`` + the official scaffold split.

    Graphs are built from the SMILES (OGB features); the per-molecule atom and bond
    counts and labels are checked against ``raw/num-{node,edge}-list.csv.gz`` and
    ``raw/graph-label.csv.gz`` when present (a mismatch raises ``ValueError``).
    Options: :class:`~siggate.data.sources.LoadOptions`.
    """
    return _load_ogb_mol(
        "molhiv", "ogbg_molhiv", "hiv", 1, "binary", "rocauc",
        root, cache_dir, LoadOptions.take("molhiv", options),
    )  # fmt: skip


@register_dataset(
    "molpcba",
    "ogbg-molpcba (OGB): 128 bioassays, multilabel with missing labels, AP",
    needs_root=True,
)
def molpcba(root=None, cache_dir=None, **options) -> GraphDataset:
    """ogbg-molpcba from ``<root>/ogbg_molpcba/mapping/mol.csv.gz`` (128 task columns,
    ``smiles``, ``mol_id``) + the official scaffold split; missing labels stay NaN.
    Options: :class:`~siggate.data.sources.LoadOptions`."""
    return _load_ogb_mol(
        "molpcba", "ogbg_molpcba", "pcba", 128, "multilabel", "ap",
        root, cache_dir, LoadOptions.take("molpcba", options),
    )  # fmt: skip
