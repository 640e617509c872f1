"""NCI-5K: the first 4,999 NCI molecules shipped with RDKit, penalized-logP regression.

Source: ``$RDDataDir/NCI/first_5K.smi`` (tab-separated ``SMILES<TAB>id``), which
comes with every RDKit install, so this dataset needs no download and no data
root.  With strict sanitization 4,991 molecules become graphs and 8 rows (metal
complexes and hypervalent atoms) are reported as :class:`InvalidRow` in
``dataset.invalid`` and in ``<cache_dir>/nci5k/invalid.csv``.

Target: un-normalized penalized logP (Crippen logP - SA score - large-ring
penalty) as ``y`` ``[1, 1]``.  Split: deterministic Bemis-Murcko scaffold split
80/10/10 over the valid molecules, ``"scaffold_balanced"`` by default.

Why balanced: the OGB/DeepChem order (``split="scaffold"``: largest scaffold groups
first) sends every singleton scaffold to val and test.  Here that leaves **no**
molecule with a ring larger than six atoms in the training set (all 29 sit in val
and test), so the ring term of penalized logP, ``max(largest ring - 6, 0)``, is zero
for every training label and cannot be learnt; six test macrocycles (penalties up
to 22) then dominate the test error whatever the model.  The balanced order (as in
chemprop) still keeps every scaffold inside one split, but fills val and test from
the whole range of chemistry.  ``split="scaffold"`` remains available.
"""

from __future__ import annotations

import logging
import math
import os
import warnings
from pathlib import Path

from ..options import SPLITS
from .base import GraphDataset, InvalidRow, TaskInfo, cache_root
from .registry import register_dataset

__all__ = ["nci5k_source", "nci5k_cache_path", "load_nci5k", "build_nci5k"]

logger = logging.getLogger(__name__)

NAME = "nci5k"
DEFAULT_SPLIT = "scaffold_balanced"


def _check_split(split: str) -> str:
    if split not in SPLITS:
        raise ValueError(f"nci5k: unknown split {split!r}; choose one of {', '.join(SPLITS)}")
    return split


def nci5k_source() -> Path:
    """Path of RDKit's ``NCI/first_5K.smi``."""
    from rdkit import RDConfig

    return Path(RDConfig.RDDataDir) / "NCI" / "first_5K.smi"


def nci5k_info() -> TaskInfo:
    return TaskInfo(
        name=NAME,
        task="regression",
        num_tasks=1,
        metric="mae",
        node_features="ogb",
        target_names=["penalized_logp"],
    )


def build_nci5k(source: str | os.PathLike | None = None, frac=(0.8, 0.1, 0.1),
                split: str = DEFAULT_SPLIT) -> GraphDataset:
    """Featurize the .smi file (no caching); see :func:`load_nci5k`."""
    import torch
    from rdkit import Chem

    from .chem import InvalidSmiles, mol_to_graph, murcko_scaffold, parse_smiles, penalized_logp, split_indices

    _check_split(split)
    source = Path(source) if source is not None else nci5k_source()
    graphs = []
    scaffolds, molecules = [], []
    invalid: list[InvalidRow] = []
    with open(source, encoding="utf-8") as fh:
        lines = fh.read().splitlines()
    for i, line in enumerate(lines):
        smiles = line.split("\t")[0].strip() if line.strip() else ""
        if smiles and " " in smiles:  # tolerate space-separated files
            smiles = smiles.split()[0]
        try:
            mol = parse_smiles(smiles, allow_unsanitized=False)
            data = mol_to_graph(mol)
            y = penalized_logp(mol)
            if not math.isfinite(y):
                raise InvalidSmiles(f"penalized logP is not finite ({y})")
            scaffold = murcko_scaffold(mol)
            same = Chem.MolToSmiles(mol)  # the molecule, however it is written (first_5K.smi repeats 88)
        except InvalidSmiles as exc:
            invalid.append(InvalidRow(i, smiles, str(exc)))
            continue
        except Exception as exc:  # RDKit failures inside descriptors: report, never raise
            invalid.append(InvalidRow(i, smiles, f"{type(exc).__name__}: {exc}"))
            continue
        data.y = torch.tensor([[y]], dtype=torch.float32)
        data.smiles = smiles
        data.idx = i
        graphs.append(data)
        scaffolds.append(scaffold)
        molecules.append(same)
    # rows of one molecule in one split: a random split put 16 test molecules' copies in training
    idx = split_indices(split, scaffolds, frac, seed=0, molecules=molecules)
    return GraphDataset(
        info=nci5k_info(),
        splits={k: [graphs[j] for j in idx[k]] for k in ("train", "val", "test")},
        invalid=invalid,
        source=str(source),
    )


@register_dataset(
    "nci5k",
    "NCI first 5K molecules shipped with RDKit: penalized logP regression, balanced scaffold split (no download)",
    needs_root=False,
    options=("split",),
)
def load_nci5k(
    root=None,
    cache_dir=None,
    *,
    frac=(0.8, 0.1, 0.1),
    split: str | None = None,
    rebuild: bool = False,
    progress: bool = False,
    **kw,
) -> GraphDataset:
    """Load NCI-5K (built once, then cached).

    Args:
        root: ignored (the source ships with RDKit); accepted for the registry.
        cache_dir: cache root; defaults to :func:`default_cache_dir`.
        frac: train/val/test fractions of the split.
        split: ``"scaffold_balanced"`` (default; None means the default),
            ``"scaffold"`` (OGB order) or ``"random"`` (seed 0); all three fixed, so
            every training seed sees the same split.  See the module docstring.
        rebuild: ignore an existing cache file and rebuild it.
        progress: accepted as every loader takes it; NCI-5K builds in seconds, without a bar.

    Returns:
        A :class:`GraphDataset`; ``dataset.invalid`` lists the 8 rows RDKit rejects,
        also written to ``<cache_dir>/nci5k/invalid.csv``.
    """
    from .cache import cached, load_dataset, report_invalid, save_dataset, write_invalid_rows

    if kw:
        warnings.warn(f"load_nci5k: ignoring unknown arguments {sorted(kw)}", stacklevel=2)
    cache_dir = cache_root(cache_dir)
    source = nci5k_source()
    if not source.is_file():
        raise FileNotFoundError(f"NCI-5K source not found at {source}; is RDKit installed with its data files?")
    split = _check_split(split or DEFAULT_SPLIT)
    parts = _key_parts(source, frac, split)
    ds = cached(
        cache_dir,
        NAME,
        parts,
        lambda: build_nci5k(source, frac, split),
        save=save_dataset,
        load=load_dataset,
        rebuild=rebuild,
    )
    fresh = cached.last_hit is False
    log_path = None
    try:
        log_path = write_invalid_rows(cache_dir / NAME / "invalid.csv", ds.invalid)
    except OSError as exc:  # a read-only cache must not break loading
        logger.warning("nci5k: could not write the invalid-row log: %s", exc)
    total = sum(ds.sizes().values()) + len(ds.invalid)
    report_invalid(NAME, ds.invalid, total, log_path, fresh, logger)
    return ds


def _key_parts(source: Path, frac, split: str) -> dict:
    from .cache import fingerprint_file

    return {
        "dataset": NAME,
        "source_sha256": fingerprint_file(source),
        "frac": [float(f) for f in frac],
        "split": split,
        "allow_unsanitized": False,
        "target": "penalized_logp",
        # a random split keeps a molecule's rows together since then (the scaffold splits always did)
        **({"molecules_together": True} if split == "random" else {}),
    }


def nci5k_cache_path(cache_dir=None, frac=(0.8, 0.1, 0.1), split: str | None = None) -> Path:
    """Where :func:`load_nci5k` keeps its cache file."""
    from .cache import cache_key

    cache_dir = cache_root(cache_dir)
    parts = _key_parts(nci5k_source(), frac, _check_split(split or DEFAULT_SPLIT))
    return cache_dir / NAME / f"{cache_key(parts)}.pt"
