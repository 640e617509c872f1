"""ZINC-12k (the benchmarking-gnns subset, as PyG's ``ZINC(subset=True)``): penalized logP
regression from PyG's processed files.  Registered as ``zinc``; the common loader
options are described in :mod:`siggate.data.sources`."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from .base import DataError, GraphDataset, TaskInfo
from .registry import register_dataset
from .sources import (
    BUILD_VERSION,
    RESTORE,
    Layout,
    LoadOptions,
    cache_graphs,
    fingerprints,
    finish,
    resolve_dirs,
    restricted_pickle,
)

if TYPE_CHECKING:  # torch and PyG load when the dataset is built, not when its loader registers
    from torch_geometric.data import Data

__all__ = ["zinc"]

_ZINC_URL = "https://www.dropbox.com/s/feo9qle74kg48gy/molecules.zip?dl=1"  # torch_geometric.datasets.ZINC.url


#: the only classes and functions a PyG processed ZINC file may name: its containers, tensors and
#: PyG's data classes (the files of PyG 2.x, old and new layouts). PyG's ``fs.torch_load`` falls
#: back to unpickling anything (``weights_only`` cannot load their ``defaultdict``).
_PROCESSED_GLOBALS = frozenset({
    ("builtins", "dict"), ("builtins", "list"), ("__builtin__", "dict"), ("__builtin__", "list"),
    ("collections", "OrderedDict"), ("collections", "defaultdict"),
    ("torch._utils", "_rebuild_tensor_v2"), ("torch._utils", "_rebuild_tensor"),
    ("torch_geometric.data.data", "Data"), ("torch_geometric.data.data", "DataEdgeAttr"),
    ("torch_geometric.data.data", "DataTensorAttr"), ("torch_geometric.data.storage", "GlobalStorage"),
})


def _read_pyg_processed(path: Path) -> list[Data]:
    """Split a PyG ``InMemoryDataset`` processed file into per-graph ``Data`` objects.

    Handles the old ``(Data, slices)`` 2-tuple and the PyG >= 2.4 ``(dict, slices,
    cls)`` / ``(dict, slices, sizes, cls)`` tuples.  ``edge_index`` is stored per graph
    with local node ids (``InMemoryDataset.collate`` does not increment it).
    """
    import pickle

    import torch
    from torch_geometric.data import Data

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            out = torch.load(str(path), map_location="cpu", weights_only=False,  # only _PROCESSED_GLOBALS
                             pickle_module=restricted_pickle(_PROCESSED_GLOBALS, "a PyG processed file"))
        except pickle.UnpicklingError as exc:
            raise DataError(f"{path}: not a PyG processed ZINC file: {exc}") from None
        except (RuntimeError, EOFError, OSError, ValueError) as exc:  # a cut or emptied file (torch's zip reader)
            raise DataError(f"{path}: the file is truncated or corrupt ({type(exc).__name__}: {str(exc)[:120]}); "
                            f"{RESTORE}") from None
    if not isinstance(out, tuple) or len(out) not in (2, 3, 4):
        raise DataError(f"{path}: not a PyG processed (data, slices) file")
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
            raise DataError(f"{path}: missing {key!r}")
    counts = {k: torch.diff(torch.as_tensor(slices[k])).tolist() for k in need}
    num = len(counts["x"])
    if any(len(c) != num for c in counts.values()):
        raise DataError(f"{path}: inconsistent slices")
    xs = torch.split(data.x.reshape(data.x.shape[0], -1).long(), counts["x"], dim=0)
    eis = torch.split(data.edge_index.long(), counts["edge_index"], dim=1)
    eas = torch.split(data.edge_attr.reshape(data.edge_attr.shape[0], -1).long(), counts["edge_attr"], dim=0)
    ys = torch.split(data.y.reshape(data.y.shape[0], -1).float(), counts["y"], dim=0)
    graphs = []
    for i in range(num):
        x, ei, ea, y = xs[i], eis[i], eas[i], ys[i]
        if ei.numel() and int(ei.max()) >= x.shape[0]:
            raise DataError(f"{path}: graph {i} has edge ids beyond its {x.shape[0]} nodes")
        graphs.append(Data(x=x.clone(), edge_index=ei.clone(), edge_attr=ea.clone(), y=y.reshape(1, -1).clone(), idx=i))
    return graphs


def _fetch_zinc(dl_root: Path) -> None:
    from torch_geometric.datasets import ZINC

    for split in ("train", "val", "test"):  # downloads molecules.zip and processes the 12k subset
        ZINC(str(dl_root / "ZINC"), subset=True, split=split)


_ZINC_SPLITS = {"train": "train", "val": "val", "test": "test"}


@register_dataset(
    "zinc",
    "ZINC-12k subset (benchmarking-gnns / PyG ZINC(subset=True)), penalized logP regression, MAE",
    needs_root=True,
)
def zinc(root=None, cache_dir=None, **options) -> GraphDataset:
    """ZINC-12k from PyG's processed files ``<root>/ZINC/subset/processed/{train,val,test}.pt``.

    The files are read directly (PyG's ``ZINC`` class insists on the raw pickles).
    ``x`` is ``[N, 1]`` atom types (28), ``edge_attr`` ``[E, 1]`` bond types 1..3,
    ``y`` ``[1, 1]``; ``idx`` is the graph's position in its split file.
    Options: :class:`~siggate.data.sources.LoadOptions` (``allow_unsanitized`` does not apply:
    the graphs come featurized).
    """
    opts = LoadOptions.take("zinc", options)
    download, progress, rwse_steps, lap_dim = opts.download, opts.progress, opts.rwse_steps, opts.lap_dim
    root, cache_dir = resolve_dirs(root, cache_dir)
    files = [f"ZINC/subset/processed/{s}.pt" for s in _ZINC_SPLITS.values()]
    layout = Layout(
        "zinc", files, f"PyG torch_geometric.datasets.ZINC(subset=True), raw data {_ZINC_URL}", _ZINC_URL, _fetch_zinc
    )
    base = layout.locate(root, cache_dir, download)
    prints = fingerprints(base, files)
    splits = {}
    for key, fname in _ZINC_SPLITS.items():
        rel = f"ZINC/subset/processed/{fname}.pt"
        parts = {"loader": "zinc", "version": BUILD_VERSION, "split": key, "file": prints[rel]}
        splits[key] = cache_graphs(cache_dir, f"zinc-{key}", parts, lambda rel=rel: _read_pyg_processed(base / rel))
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
    return finish("zinc", info, splits, [], str(base / "ZINC"), parts, cache_dir, rwse_steps, lap_dim, progress)

