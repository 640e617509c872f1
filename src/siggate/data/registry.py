"""Registry of named datasets.

>>> from siggate.data.catalog import get_dataset, list_datasets
>>> [d["name"] for d in list_datasets()][:3]  # doctest: +SKIP
['cluster', 'molhiv', 'molpcba']
>>> ds = get_dataset("nci5k")  # doctest: +SKIP

Loaders are registered with :func:`register_dataset`; each is called as
``loader(root=..., cache_dir=..., **kw)`` and returns a
:class:`~siggate.data.base.GraphDataset`.  This module holds only the registry: every
loader module registers itself on import, and :mod:`siggate.data.catalog` imports them
all (use ``siggate.data.catalog.get_dataset`` to see every built-in dataset).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from ..options import closest_name
from .base import GraphDataset, cache_root, default_data_root

__all__ = ["DATASETS", "DATASET_META", "register_dataset", "get_dataset", "list_datasets"]

#: name -> loader ``(root=None, cache_dir=None, **kw) -> GraphDataset``
DATASETS: dict[str, Callable[..., GraphDataset]] = {}
#: name -> {"name", "description", "needs_root", "options", "level"}
DATASET_META: dict[str, dict] = {}


def _same_loader(a: Callable, b: Callable) -> bool:
    ident = lambda f: (getattr(f, "__module__", None), getattr(f, "__qualname__", None))  # noqa: E731
    return a is b or ident(a) == ident(b)


def register_dataset(name: str, description: str, needs_root: bool,
                     options: tuple[str, ...] = (), level: str = "graph") -> Callable[[Callable], Callable]:
    """Decorator registering ``loader(root=None, cache_dir=None, **kw)`` under ``name``.

    Args:
        name: registry name (lower case, e.g. ``"zinc"``).
        description: one line for ``siggate data list``.
        needs_root: whether the loader reads files from a data root.
        options: ``data.*`` config keys the loader takes as keyword arguments of the same
            name (e.g. ``("num_nodes",)``); the training loop passes those that are set, and
            the config refuses them for datasets that do not list them.
        level: ``"graph"`` or ``"node"``: what one prediction is for (also in the
            dataset's :class:`~siggate.data.base.TaskInfo`; here it is known without loading).

    Re-registering the same function (e.g. after a module reload) is allowed;
    registering a different function under a taken name raises ``ValueError``.
    """
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"dataset name must be a non-empty string, got {name!r}")
    key = name.strip().lower()

    def deco(loader: Callable) -> Callable:
        if not callable(loader):
            raise TypeError(f"register_dataset({name!r}) needs a callable, got {type(loader).__name__}")
        old = DATASETS.get(key)
        if old is not None and not _same_loader(old, loader):
            raise ValueError(
                f"dataset {key!r} is already registered to {old.__module__}.{old.__qualname__}"
            )
        DATASETS[key] = loader
        DATASET_META[key] = {"name": key, "description": str(description), "needs_root": bool(needs_root),
                             "options": tuple(options), "level": str(level)}
        loader.dataset_meta = DATASET_META[key]
        return loader

    return deco


def list_datasets() -> list[dict]:
    """``[{"name", "description", "needs_root", "options", "level"}, ...]`` sorted by name."""
    return [dict(DATASET_META[k]) for k in sorted(DATASETS)]


def _unknown(name: str) -> ValueError:
    known = sorted(DATASETS)
    close = closest_name(str(name).lower(), known, cutoff=0.0)
    hint = f"; did you mean {close!r}?" if close else ""
    return ValueError(f"unknown dataset {name!r}; known datasets: {', '.join(known) or '(none)'}{hint}")


def get_dataset(name: str, root=None, cache_dir=None, **kw) -> GraphDataset:
    """Load the dataset registered as ``name``.

    ``root`` defaults to :func:`default_data_root` and ``cache_dir`` to
    :func:`default_cache_dir`; other keyword arguments go to the loader.

    Raises:
        ValueError: unknown ``name`` (the message lists the known names and the
            closest match).
    """
    key = str(name).strip().lower()
    if key not in DATASETS:
        raise _unknown(name)
    if root is None:
        root = default_data_root()
    root = Path(root) if root is not None else None
    return DATASETS[key](root=root, cache_dir=cache_root(cache_dir), **kw)
