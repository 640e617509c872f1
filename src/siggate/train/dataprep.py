"""Data assembly, the first stage of a run: the dataset of a ``data`` config with the per-graph
encodings its model reads (:class:`Encodings`), the target normalisation and the evaluation
loaders. Used by training, ``evaluate``, ``predict``, the ensembles and the analyses.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import torch
from torch_geometric.loader import DataLoader

from ..config import ConfigError, DataConfig, ModelConfig
from ..data.base import CSV_CHIRALITY, GraphDataset, TaskInfo, stacked_labels
from .distributed import DistContext, PeerFailed

log = logging.getLogger("siggate.train")

#: Largest graph for which :func:`prepare_data` computes RWSE/LapPE (dense ``N x N`` algebra).
MAX_PE_NODES = 5000


@dataclass(frozen=True)
class Encodings:
    """What a model reads from its graphs beyond OGB's atom and bond features: a positional
    encoding (``pe``: ``"none"``, ``"rwse"`` or ``"lappe"``, with ``pe_steps`` random-walk steps or
    Laplacian eigenvectors) and molecule-level features (``mol_features``, see
    :mod:`siggate.data.molfeatures`). The model config's keys of the same names set them."""

    pe: str = "none"
    pe_steps: int = 0
    mol_features: str = "none"

    @classmethod
    def of(cls, model: ModelConfig) -> "Encodings":
        """The encodings a :class:`~siggate.config.ModelConfig` reads."""
        return cls(model.pe, model.pe_steps, model.mol_features)

    @property
    def rwse_steps(self) -> int:
        """Random-walk steps of RWSE (0: none)."""
        return self.pe_steps if self.pe == "rwse" else 0

    @property
    def lap_dim(self) -> int:
        """Eigenvectors of LapPE (0: none)."""
        return self.pe_steps if self.pe == "lappe" else 0


def prepare_data(data: DataConfig, encodings: Encodings | ModelConfig = Encodings(), seed: int = 0,
                 progress: bool = True, require_test: bool = True, chirality: str = CSV_CHIRALITY) -> GraphDataset:
    """Load the dataset ``data`` names and add ``encodings`` to its graphs (both cached).

    Args:
        data: the config's ``data`` section.
        encodings: what the model reads from the graphs: an :class:`Encodings`, or the model
            config (``cfg.model``) whose encodings they are.
        seed: the seed a user CSV's random or scaffold split is drawn with (``cfg.train.seed``,
            or an ensemble's first seed).
        progress: progress bars while featurizing.
        require_test: refuse a CSV whose test split is empty (``False``: the scikit-learn
            estimators, which train on everything they are given but the validation rows).
        chirality: a user CSV's atom chirality feature (:func:`~siggate.data.csvdata.load_csv`):
            ``"cip"`` for training, a run's own ``info.chirality`` to rebuild its graphs.

    Raises:
        ConfigError: encodings that cannot be computed for these graphs.
    """
    from ..data.catalog import get_dataset
    from ..data.pe import cached_pe

    if not isinstance(encodings, Encodings):
        encodings = Encodings.of(encodings)
    d = data
    if d.name == "csv":
        from ..data.csvdata import check_trainable, load_csv

        ds = load_csv(d.csv, d.smiles_col, list(d.target_cols), d.task, split=d.split or "scaffold",
                      cache_dir=Path(d.cache_dir) if d.cache_dir else None, seed=seed, sep=d.sep,
                      decimal=d.decimal, duplicates=d.duplicates, val_fraction=d.val_fraction,
                      fragments=d.fragments, chirality=chirality)
        check_trainable(Path(d.csv), ds, require_test, split=d.split or "scaffold", val_fraction=d.val_fraction or 0.0)
    else:  # the data.* keys the dataset takes (registered options; validate() refuses the others)
        from ..data.catalog import DATASET_META

        extra = {k: getattr(d, k) for k in DATASET_META[d.name]["options"] if getattr(d, k)}
        ds = get_dataset(d.name, root=d.root, cache_dir=d.cache_dir, progress=progress, **extra)
    if d.max_graphs:
        ds = ds.first(d.max_graphs)
    from ..data.base import cache_root

    cache_dir = cache_root(d.cache_dir)
    key = ds.source or d.name
    if encodings.mol_features != "none":
        from ..data.molfeatures import cached_mol_features

        for split in list(ds.splits):
            try:
                cached_mol_features(ds.splits[split], encodings.mol_features, f"{key}:{split}", cache_dir,
                                    progress=progress)
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
    rwse, lap = encodings.rwse_steps, encodings.lap_dim
    if rwse or lap:
        largest = max((int(g.num_nodes) for v in ds.splits.values() for g in v), default=0)
        if largest > MAX_PE_NODES:
            raise ConfigError(f"model.pe: {encodings.pe!r} takes a dense eigendecomposition of each graph, and "
                              f"{ds.info.name} has a graph of {largest} nodes (limit {MAX_PE_NODES}); set model.pe=none.")
        for split in list(ds.splits):
            ds.splits[split] = cached_pe(ds.splits[split], f"{key}:{split}", cache_dir,
                                         rwse_steps=rwse, lap_dim=lap, progress=progress)
    return ds


def prepare_data_ranked(data: DataConfig, encodings: Encodings | ModelConfig, seed: int, ctx: DistContext,
                        progress: bool) -> GraphDataset:
    """:func:`prepare_data` in a ``torchrun`` job: rank 0 builds the caches first; the other
    ranks then read them. Data that rank 0 refuses (a CSV without a numeric label, an empty
    split) stops the other ranks with :class:`~.distributed.PeerFailed` (rank 0 says why): they
    waited in a barrier that rank 0 never reached, and its exit ended each in a gloo traceback
    ("Connection closed by peer") below rank 0's one-line error."""
    if not ctx.distributed:
        return prepare_data(data, encodings, seed, progress)
    if not ctx.is_main:
        failed = ctx.broadcast(None)
        if failed:
            raise PeerFailed(failed)
        return prepare_data(data, encodings, seed, progress)
    try:
        ds = prepare_data(data, encodings, seed, progress)
    except Exception as exc:
        ctx.broadcast(f"rank 0 could not prepare the data: {type(exc).__name__}: {exc}")
        raise
    ctx.broadcast(None)
    return ds


def check_labelled(ds: GraphDataset) -> torch.Tensor | None:
    """A target with no label among the training rows, which the GNN cannot learn: refused
    (:class:`~siggate.data.base.DataError`) for a regression, whose normalisation was NaN and so
    was every prediction of it (the fingerprint members refuse it too); a warning for a classifier,
    whose logit of it stays untrained. Returns the training labels it stacked (``[n, T]``, for
    :func:`target_stats`; None for a multiclass task or no training rows)."""
    info = ds.info
    if info.task == "multiclass" or not len(ds.train):
        return None

    def counts(split: str) -> list[int]:
        graphs = ds.splits.get(split) or []
        if not len(graphs):
            return [0] * info.num_tasks
        return torch.isfinite(stacked_labels(graphs, info, split)).sum(0).tolist()

    labels = stacked_labels(ds.train, info, "train")
    empty = [t for t, c in enumerate(torch.isfinite(labels).sum(0).tolist()) if c == 0]
    if not empty:
        return labels
    val, test = counts("val"), counts("test")
    t = empty[0]
    text = (f"target {info.target_names[t]!r}{f' (and {len(empty) - 1} more)' if len(empty) > 1 else ''} has no label "
            f"among the training rows ({val[t]} in val, {test[t]} in test), so the GNN cannot learn it")
    if info.task != "regression":
        log.warning("%s: its predictions are those of an untrained output", text)
        return labels
    from ..data.base import DataError

    raise DataError(f"{text}: label some training molecules, or leave the target out")


def check_scorable(ds: GraphDataset) -> None:
    """Refuse (:class:`~siggate.data.base.DataError`), before training, a val or test split on
    which the run's ROC-AUC or AP is undefined (:func:`~siggate.data.base.one_class_split`; a
    small cut of a rare-positive set): each epoch's scoring failed with the metric's words alone,
    naming neither the split nor the fix. A CSV's splits were refused so when it was read."""
    from ..data.base import DataError, one_class_split

    if ds.info.metric not in ("rocauc", "ap"):
        return
    found = one_class_split(ds, ("val", "test"))
    if found:
        raise DataError(f"the {found[0]} split ({found[1]} rows) holds no target with both classes (0 and 1), so its "
                        f"{ds.info.metric} is undefined: give it rows of both classes (a larger data.max_graphs, or "
                        "another split)")


def target_stats(train, info: TaskInfo, labels: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-target mean and std over the training labels (graphs, or nodes of the train
    split; NaN labels ignored). A constant target's std is 1 (its labels normalise to 0); any
    other std is its own, however small the labels' units (an absolute floor would shrink labels
    in molar units, ~1e-9, to nothing). ``labels``: the training labels already stacked
    (:func:`check_labelled`'s), not stacked again."""
    y = (stacked_labels(train, info, "train") if labels is None else labels).double()
    mean = torch.nanmean(y, dim=0)
    std = torch.sqrt(torch.nanmean((y - mean) ** 2, dim=0))
    std = torch.where(std == 0, torch.ones_like(std), std)
    return mean.float(), std.float()


def loader_generator() -> torch.Generator:
    """A fixed generator for a loader's worker base seed.

    A DataLoader without a generator draws its worker base seed from the *global* RNG;
    giving each loader its own keeps dropout's RNG stream independent of data loading."""
    return torch.Generator().manual_seed(0)


def graph_loader(graphs, batch_size: int) -> DataLoader:
    """``graphs`` in order, ``batch_size`` at a time, drawing nothing from the global RNG."""
    return DataLoader(graphs, batch_size=batch_size, shuffle=False, generator=loader_generator())
