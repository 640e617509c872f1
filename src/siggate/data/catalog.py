"""Every built-in dataset, registered: load datasets by name through this module.

Each loader module registers its loaders with
:func:`siggate.data.registry.register_dataset` when it is imported; this module imports
them all and re-exports the registry's look-ups.  To add a dataset, write a module with
a decorated loader ``fn(root=None, cache_dir=None, **kw) -> GraphDataset`` and import it
here.
"""

from __future__ import annotations

from . import nci5k, ogb_mol, peptides, sbm_benchmarks, sbm_large, zinc  # noqa: F401  (imported to register their loaders)
from .registry import DATASET_META, DATASETS, get_dataset, list_datasets

__all__ = ["DATASETS", "DATASET_META", "get_dataset", "list_datasets"]
