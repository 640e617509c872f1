"""Training and evaluation loop with exact resume.

Data order is a pure function of ``(seed, epoch)``, and every epoch ends by writing
``last.pt`` atomically with the model, optimizer, scheduler and RNG states. A run that is
killed at any moment and restarted with ``resume=True`` repeats the unfinished epoch from
the same state and ends with exactly the same metrics as an uninterrupted run (on CPU).

Every source of randomness is part of that state: the global torch/numpy/Python RNGs
(dropout, LapPE sign flips) are saved in the checkpoint, BatchNorm statistics live in the
model's buffers, and the data loaders draw nothing from the global RNG (the shuffling
sampler is seeded by ``(seed, epoch)``, see :func:`epoch_loader`, and every loader gets its
own generator for the worker base seed).

The same loop runs under ``torchrun`` (``siggate train --ddp``, see
:mod:`siggate.train.distributed`): each rank reads ``batch_size / world_size`` graphs of
every global batch, rank 0 evaluates and writes every file.
"""

from __future__ import annotations

import copy
import csv
import json
import logging
import math
import os
import random
import subprocess
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
import yaml
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DistributedSampler
from torch_geometric.loader import DataLoader
from tqdm.auto import tqdm

import siggate

from ..config import Config, ConfigError, from_dict
from ..data.base import GraphDataset, TaskInfo, label_rows, split_mask
from ..files import atomic_write_bytes
from ..nn.model import SigGateGT
from ..options import TASK_LOSSES
from .bn_stats import graph_batches, recompute_bn_stats
from .checkpoint import (
    FORMAT_VERSION,
    CheckpointError,
    atomic_save,
    config_differences,
    describe_weight_mismatch,
    load_checkpoint,
    rng_state,
    set_rng_state,
)
from .distributed import DistContext, convert_sync_batchnorm, has_unused_parameters
from .metrics import compute_metric, is_better, summary
from .schedule import make_scheduler
from .tblog import TBLogger

log = logging.getLogger("siggate.train")

#: Multiplier that spreads run seeds apart before offsets (rank, epoch) are added: the one
#: seed-mixing constant of siggate (sampler seeds, training random streams).
SEED_STRIDE = 1_000_003


class NonFiniteLossError(RuntimeError):
    """Training produced a NaN or infinite loss or gradient."""


#: Largest graph for which :func:`prepare_data` computes RWSE/LapPE (dense ``N x N`` algebra).
MAX_PE_NODES = 5000


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and torch's global generators with ``seed``."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def prepare_data(cfg: Config, progress: bool = True) -> GraphDataset:
    """Load the dataset named in ``cfg.data`` and add the positional encodings the model needs."""
    from ..data.catalog import get_dataset
    from ..data.pe import cached_pe

    d = cfg.data
    if d.name == "csv":
        from ..data.csvdata import check_trainable, load_csv

        ds = load_csv(d.csv, d.smiles_col, list(d.target_cols), d.task, split=d.split or "scaffold",
                      cache_dir=Path(d.cache_dir) if d.cache_dir else None, seed=cfg.train.seed, sep=d.sep,
                      decimal=d.decimal, duplicates=d.duplicates)
        check_trainable(Path(d.csv), ds)
    else:  # the benchmarks have official splits; validate() lets data.split through for nci5k only
        from ..data.catalog import DATASET_META

        extra = {"split": d.split} if d.split is not None else {}
        extra.update({k: getattr(d, k) for k in DATASET_META[d.name]["options"] if getattr(d, k)})
        ds = get_dataset(d.name, root=d.root, cache_dir=d.cache_dir, progress=progress, **extra)
    if d.max_graphs:
        ds.splits = {k: v[:d.max_graphs] for k, v in ds.splits.items()}
    m = cfg.model
    from ..data.base import default_cache_dir

    cache_dir = Path(d.cache_dir) if d.cache_dir else default_cache_dir()
    key = ds.source or d.name
    if m.mol_features != "none":
        from ..data.molfeatures import cached_mol_features

        for split in list(ds.splits):
            try:
                cached_mol_features(ds.splits[split], m.mol_features, f"{key}:{split}", cache_dir, progress=progress)
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
    rwse = m.pe_steps if m.pe == "rwse" else 0
    lap = m.pe_steps if m.pe == "lappe" else 0
    if rwse or lap:
        largest = max((int(g.num_nodes) for v in ds.splits.values() for g in v), default=0)
        if largest > MAX_PE_NODES:
            raise ConfigError(f"model.pe: {m.pe!r} takes a dense eigendecomposition of each graph, and "
                              f"{ds.info.name} has a graph of {largest} nodes (limit {MAX_PE_NODES}); set model.pe=none.")
        for split in list(ds.splits):
            ds.splits[split] = cached_pe(ds.splits[split], f"{key}:{split}", cache_dir,
                                         rwse_steps=rwse, lap_dim=lap, progress=progress)
    return ds


def target_stats(train, info: TaskInfo) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-target mean and std over the training labels (graphs, or nodes of the train
    split; NaN labels ignored)."""
    y = torch.cat([label_rows(g, info, "train") for g in train]).double()
    mean = torch.nanmean(y, dim=0)
    std = torch.sqrt(torch.nanmean((y - mean) ** 2, dim=0)).clamp_min(1e-8)
    return mean.float(), std.float()


def sbm_class_weights(y: torch.Tensor, num_classes: int) -> torch.Tensor:
    """Benchmarking-GNNs' class weights for the SBM tasks (their GatedGCN ``loss``, GraphGPS's
    ``weighted_cross_entropy``), from the labels ``y [n]`` of one batch: ``w_c = (n - n_c) / n``
    for a class present ``n_c > 0`` times, ``0`` for an absent class; ``[num_classes]``. When
    only one class is present its weight is 1 (their formula gives 0 and the loss 0/0)."""
    counts = torch.bincount(y, minlength=num_classes).to(torch.float32)
    n = float(y.numel())
    weight = (n - counts) / max(n, 1.0) * (counts > 0)
    return weight if bool(weight.any()) else (counts > 0).to(torch.float32)


def _masked(loss):
    """``loss(pred, y)`` over the entries whose label is not NaN."""
    def fn(pred: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        valid = ~torch.isnan(y)
        return loss(pred[valid], y[valid])

    return fn


#: ``train.loss`` -> ``fn(pred, y)``; regression and binary labels may be NaN (missing)
LOSSES = {
    "l1": _masked(F.l1_loss),
    "mse": _masked(F.mse_loss),
    "bce": _masked(F.binary_cross_entropy_with_logits),
    "ce": lambda pred, y: F.cross_entropy(pred, y),
    "weighted_ce": lambda pred, y: F.cross_entropy(pred, y, weight=sbm_class_weights(y, pred.shape[1])),
}


def loss_fn(name: str, task: str):
    """The training loss ``fn(pred, y)``: ``"l1"``, ``"mse"`` (regression) or ``"bce"``
    (binary/multilabel logits) over the labelled entries (NaN labels masked); ``"ce"`` or
    ``"weighted_ce"`` (multiclass: logits ``[n, C]``, class ids ``[n]``; weighted by
    :func:`sbm_class_weights` of each batch). ``"auto"``: L1, BCE or CE (first of
    :data:`siggate.options.TASK_LOSSES`).

    Raises:
        ConfigError: a loss that does not fit ``task``.
    """
    allowed = TASK_LOSSES[task]
    if name == "auto":
        name = allowed[0]
    if name not in allowed:
        raise ConfigError(f"train.loss: {name!r} does not fit a {task} task; allowed values: "
                          + ", ".join(("auto",) + allowed) + ".")
    return LOSSES[name]


def resolve_pool_norm(cfg: Config, train_graphs) -> dict:
    """The values training resolves from the data, as ``{"model.pool_norm": x}``: with
    ``pooling: norm`` and ``pool_norm: 0`` the divisor is the mean number of nodes of the
    training graphs (rounded to 0.01, at least 1); any other config resolves nothing (``{}``).
    They live in the checkpoint (``"resolved"``), ``config.yaml``'s ``_meta.resolved`` and
    ``metrics.json``; the config itself stays as the user gave it."""
    m = cfg.model
    if not m.pool_norm_unresolved:
        return {}
    if not len(train_graphs):
        raise ConfigError("model.pool_norm: 0 takes the training graphs' mean size, and there are no training "
                          "graphs; set model.pool_norm to a positive number")
    mean_nodes = sum(int(g.num_nodes) for g in train_graphs) / len(train_graphs)
    return {"model.pool_norm": max(round(mean_nodes, 2), 1.0)}


def fit_mol_feature_scaling(model: SigGateGT, train_graphs) -> SigGateGT:
    """Standardize the model's molecule features with the training graphs' ``mol_x``
    (:class:`siggate.data.molfeatures.FeatureScaler`); the statistics are buffers of the model,
    so its checkpoint carries them to ``predict``, ``evaluate``, ensembles and resume."""
    if not model.mol_features_dim:
        return model
    from ..data.molfeatures import FeatureScaler

    if not len(train_graphs) or any(getattr(g, "mol_x", None) is None for g in train_graphs):
        raise ConfigError("model.mol_features: the training graphs carry no molecule features (mol_x) to fit "
                          "their scaling on; load the data with siggate.train.loop.prepare_data")
    state = FeatureScaler.fit(torch.cat([g.mol_x for g in train_graphs]).numpy()).state_dict()
    model.set_mol_feature_scaling(state["mean"], state["std"])
    return model


def resolved_model_config(cfg: Config, resolved: dict):
    """``cfg.model`` with the ``model.*`` values of ``resolved`` (:func:`resolve_pool_norm`)
    filled in: the model config a run built its model from.

    Raises:
        ConfigError: ``model.pool_norm: 0`` and nothing resolved it.
    """
    model = replace(cfg.model, **{k.split(".", 1)[1]: v for k, v in resolved.items() if k.startswith("model.")})
    if model.pool_norm_unresolved:
        raise ConfigError("model.pool_norm: 0 stands for the training graphs' mean size, which only training "
                          "resolves; set model.pool_norm to a positive number to build this model without data")
    return model


def build_model(cfg: Config, info: TaskInfo, train_graphs=None, resolved: dict | None = None) -> SigGateGT:
    """Build the model for ``info`` with seed-controlled, gate-last initialisation; the values
    resolved from the data are ``resolved``, or resolved from ``train_graphs`` as training does
    (:func:`resolve_pool_norm`); ``train_graphs`` also fit the molecule features' scaling
    (:func:`fit_mol_feature_scaling`); without them the features are left unscaled."""
    if resolved is None:
        resolved = resolve_pool_norm(cfg, train_graphs) if train_graphs is not None else {}
    model_cfg = resolved_model_config(cfg, resolved)
    torch.manual_seed(cfg.train.seed)
    model = SigGateGT.from_config(model_cfg, info)
    # Re-seed and re-initialise so that models that differ only in the gate share every
    # other initial weight (the gate parameters are initialised last).
    torch.manual_seed(cfg.train.seed)
    model.reset_parameters()
    return model if train_graphs is None else fit_mol_feature_scaling(model, train_graphs)


def _loader_generator() -> torch.Generator:
    # A DataLoader without a generator draws its worker base seed from the *global* RNG;
    # giving each loader its own keeps dropout's RNG stream independent of data loading.
    return torch.Generator().manual_seed(0)


def epoch_loader(graphs, batch_size: int, seed: int, epoch: int, rank: int = 0, world_size: int = 1) -> DataLoader:
    """Training loader of ``epoch``: a seeded ``DistributedSampler`` shuffle, a pure function
    of ``(seed, epoch)``.

    With ``world_size`` ranks each rank gets ``batch_size // world_size`` graphs per step and
    step ``k`` of all ranks together covers positions ``[k*B, (k+1)*B)`` of the same epoch
    permutation as a single process with batch ``B`` (up to the sampler's padding of the
    last step when ``len(graphs)`` is not a multiple of ``world_size``).
    """
    sampler = DistributedSampler(graphs, num_replicas=world_size, rank=rank, shuffle=True,
                                 seed=seed * SEED_STRIDE, drop_last=False)
    sampler.set_epoch(epoch)
    return DataLoader(graphs, batch_size=batch_size // world_size, sampler=sampler, generator=_loader_generator())


@torch.no_grad()
def predict(model, loader, mean=None, std=None, task: str = "regression", device=None) -> torch.Tensor:
    """Raw model outputs in target units (denormalised for regression), on CPU: ``[G, T]``
    per graph, or ``[N, T]`` per node of every graph, in loader order (logits for
    classification)."""
    model.eval()
    outs = []
    for batch in loader:
        if device is not None:
            batch = batch.to(device)
        out = model(batch)
        if task == "regression" and mean is not None:
            out = out * std.to(out.device) + mean.to(out.device)
        outs.append(out.cpu())
    return torch.cat(outs) if outs else torch.empty(0)


def eval_loader(graphs, batch_size: int = 256) -> DataLoader:
    """``graphs`` in order, ``batch_size`` at a time, drawing nothing from the global random
    generator (evaluation never moves a run's random streams)."""
    return DataLoader(graphs, batch_size=batch_size, shuffle=False, generator=_loader_generator())


def predict_graphs(model, graphs, info: TaskInfo, mean, std, batch_size: int = 256, device=None) -> torch.Tensor:
    """:func:`predict` on the list ``graphs``, in order, ``batch_size`` graphs at a time."""
    return predict(model, eval_loader(graphs, batch_size), mean, std, info.task, device=device)


def scored_rows(info: TaskInfo, graphs, pred: torch.Tensor, split: str | None) -> tuple[np.ndarray, np.ndarray]:
    """``(labels, predictions)`` as numpy arrays, one row per prediction that ``split`` scores:
    every graph (or node), or the rows of ``split``'s mask for a transductive dataset."""
    y = torch.cat([label_rows(g, info, split) for g in graphs])
    if info.transductive:
        pred = pred[torch.cat([split_mask(g, info, split) for g in graphs])]
    return y.numpy(), pred.numpy()


def _score(info: TaskInfo, graphs, pred: torch.Tensor, split: str | None) -> float:
    """``info.metric`` of the predictions ``pred`` for ``graphs`` (rows of ``split``'s mask
    for a transductive dataset)."""
    return float(compute_metric(info.metric, *scored_rows(info, graphs, pred, split)))


def probabilities(pred: torch.Tensor, task: str) -> torch.Tensor:
    """Model outputs as people read them: unchanged for regression (already in target units)
    and multiclass (scores), the sigmoid of the logits for binary and multilabel tasks."""
    return torch.sigmoid(pred) if task in ("binary", "multilabel") else pred


def split_summary(info: TaskInfo, graphs, pred: torch.Tensor, split: str | None) -> dict:
    """:func:`siggate.train.metrics.summary` of ``pred`` (target units, or probabilities for
    classification) on the rows ``split`` scores."""
    y, p = scored_rows(info, graphs, pred, split)
    return summary(info.task, y, p, info.target_names or None)


def evaluate_split(model, graphs, info: TaskInfo, mean, std, batch_size: int = 256, device=None,
                   split: str | None = None) -> float:
    """The official metric ``info.metric`` of ``model`` on ``graphs`` (predictions in target
    units); for a transductive dataset on the nodes of ``split``'s mask."""
    return _score(info, graphs, predict_graphs(model, graphs, info, mean, std, batch_size, device), split)


def evaluate_splits(model, ds: GraphDataset, splits, mean, std, batch_size: int = 256, device=None) -> dict:
    """``{split: metric}`` of ``model`` on each of ``splits`` of ``ds``. A transductive
    dataset's graph is predicted once and each split scored on its mask."""
    if not ds.info.transductive:
        return {s: evaluate_split(model, ds.splits[s], ds.info, mean, std, batch_size, device) for s in splits}
    graphs = ds.splits[splits[0]]  # every split holds the same graph
    pred = predict_graphs(model, graphs, ds.info, mean, std, batch_size, device)
    return {s: _score(ds.info, graphs, pred, s) for s in splits}


#: Most nodes :func:`gate_means` reads at once (it runs the reference attention, ``O(N^2)``).
GATE_MEANS_MAX_NODES = 8192


@torch.no_grad()
def gate_means(model, graphs, n: int = 64, device=None) -> list[float]:
    """Mean gate value per layer on the first ``n`` graphs, as many as fit in
    :data:`GATE_MEANS_MAX_NODES` nodes (empty for ``gate='none'``, or when the first graph
    alone is larger, e.g. a large transductive graph)."""
    if not model.attention_modules() or model.attention_modules()[0].gate == "none":
        return []
    sizes = np.cumsum([int(g.num_nodes) for g in graphs[:n]])
    n = int(np.searchsorted(sizes, GATE_MEANS_MAX_NODES, side="right"))
    if n == 0:
        return []
    model.eval()
    batch = next(iter(DataLoader(graphs[:n], batch_size=n, generator=_loader_generator())))
    if device is not None:
        batch = batch.to(device)
    _, det = model(batch, return_details=True)
    mask = det["mask"]
    return [float(a["gate"][mask].mean()) for a in det["attn"]]


def git_commit() -> str | None:
    """The git commit of the siggate source tree, or None outside a checkout."""
    try:
        here = Path(__file__).resolve().parent
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


@dataclass
class RunState:
    """Progress of a run, saved in every checkpoint: next epoch, best epoch and scores, skipped batches."""

    epoch: int = 0  # next epoch to run
    best_epoch: int = -1
    best_val: float | None = None
    best_test: float | None = None
    skipped_batches: int = 0


def _checkpoint(model, optimizer, scheduler, cfg, info, mean, std, state: RunState, history, params,
                rng_ranks: list, resolved: dict) -> dict:
    return {
        "format": FORMAT_VERSION,
        "siggate_version": siggate.__version__,
        "config": cfg.to_dict(),
        "resolved": dict(resolved),  # values resolved from the data (resolve_pool_norm)
        "info": info.to_dict(),
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "rng": rng_state(),
        "rng_ranks": rng_ranks,  # every rank's generators (CPU, and CUDA on GPU)
        "world_size": len(rng_ranks),
        "target_mean": mean.cpu(),
        "target_std": std.cpu(),
        "state": dict(state.__dict__),
        "history": history,
        "params": params,
    }


def data_source(cfg: Config) -> dict | None:
    """Where a CSV run's data came from, ``{"csv": absolute path, "sha256": the file's hash}``,
    stored in its checkpoints so that ``siggate evaluate`` finds the file from any directory and
    notices an edit (:func:`siggate.train.evaluate.stored_csv`); ``None`` for a named dataset
    (or a dataset handed to :func:`train` whose config names no existing file)."""
    if cfg.data.name != "csv" or not cfg.data.csv or not Path(cfg.data.csv).is_file():
        return None
    from ..data.cache import fingerprint_file

    path = Path(cfg.data.csv).resolve()
    return {"csv": str(path), "sha256": fingerprint_file(path)}


def _process_rng(device: torch.device) -> dict:
    """This process's RNG states (CPU generators, and the CUDA one of ``device``)."""
    state = {"cpu": rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def _set_process_rng(state: dict, device: torch.device) -> None:
    set_rng_state(state["cpu"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


def _load_resume(path: Path, ctx: DistContext) -> dict | None:
    """Rank 0 reads ``path`` (if it exists) and every rank receives it, or the same error."""
    res: tuple = (None, None)
    if ctx.is_main and path.exists():
        try:
            res = (load_checkpoint(path), None)
        except CheckpointError as exc:
            res = (None, str(exc))
    ckpt, err = ctx.broadcast(res)
    if err:
        raise CheckpointError(err)
    return ckpt


def stream_seed(seed: int, rank: int = 0, epoch: int = 0) -> int:
    """Seed of the training random stream (dropout, LapPE sign flips) of ``rank``: a function
    of the run's seed only, not of how many numbers the initialisation drew, so runs that
    differ only in the gate draw the same dropout masks. ``epoch`` re-seeds a rank that
    resumes without its own saved generator state."""
    return seed * SEED_STRIDE + 7919 * rank + 1 + epoch


@dataclass
class Run:
    """Everything one training run holds between its steps (see :func:`setup_run`)."""

    cfg: Config
    ctx: DistContext
    ds: GraphDataset
    model: SigGateGT
    net: torch.nn.Module  # the model, or its DistributedDataParallel wrapper
    optimizer: torch.optim.Optimizer
    scheduler: object
    criterion: Callable
    mean: torch.Tensor
    std: torch.Tensor
    params: int
    on_nan: str
    state: RunState = field(default_factory=RunState)
    history: list = field(default_factory=list)
    init: dict | None = None  # what train.init copied (siggate.train.init_weights.load_init's report)
    resolved: dict = field(default_factory=dict)  # values resolved from the data (resolve_pool_norm)

    @property
    def info(self) -> TaskInfo:
        """The dataset's task description."""
        return self.ds.info

    @property
    def device(self) -> torch.device:
        """This process's device."""
        return self.ctx.device


@dataclass
class EpochEnd:
    """What :func:`fit` hands its ``on_epoch_end`` hook after each epoch."""

    row: dict  # the epoch's history row (also written to log.csv)
    improved: bool  # the validation metric is the best so far
    train_graphs: int  # labels whose loss counted, graphs or nodes (all ranks)
    skipped: int  # batches skipped this epoch (non-finite loss or gradient, on_nan="skip")
    rng_ranks: list  # every rank's RNG states after the epoch (for the checkpoint)


def setup_run(cfg: Config, ds: GraphDataset, ctx: DistContext | None = None) -> Run:
    """Set-up step: seeded model (gate initialised last), training stream seed, DDP wrapper,
    AdamW, the warmup-cosine schedule, target normalisation and the loss."""
    ctx = ctx or DistContext()
    resolved = resolve_pool_norm(cfg, ds.train)
    t_cfg, info, device = cfg.train, ds.info, ctx.device
    seed_everything(t_cfg.seed)
    model = build_model(cfg, info, ds.train, resolved=resolved)
    init = None
    if t_cfg.init:
        from .init_weights import load_init

        init = load_init(model, t_cfg.init, cfg.model.to_dict())
        log.info("initialised %d tensors from %s (%d fresh: the head's last layer%s)", init["copied"], init["path"],
                 len(init["fresh"]), " and the head layers of another shape" if len(init["fresh"]) > 2 else "")
    params = sum(p.numel() for p in model.parameters())
    torch.manual_seed(stream_seed(t_cfg.seed, ctx.rank))
    model.to(device)
    if ctx.distributed:
        model = convert_sync_batchnorm(model, device)
        probe = next(iter(DataLoader(ds.train[:2], batch_size=2, generator=_loader_generator()))).to(device)
        net = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None,
                                      find_unused_parameters=has_unused_parameters(model, probe))
    else:
        net = model
    optimizer = torch.optim.AdamW(model.parameters(), lr=t_cfg.lr, weight_decay=t_cfg.weight_decay)
    scheduler = make_scheduler(optimizer, t_cfg.warmup_epochs, t_cfg.epochs, t_cfg.warmup_start)
    criterion = loss_fn(t_cfg.loss, info.task)
    if info.task == "regression" and t_cfg.normalize_targets:
        mean, std = target_stats(ds.train, info)
    else:
        mean, std = torch.zeros(info.num_tasks), torch.ones(info.num_tasks)
    return Run(cfg, ctx, ds, model, net, optimizer, scheduler, criterion,
               mean.to(device), std.to(device), params, t_cfg.on_nan, init=init, resolved=resolved)


def resume_run(run: Run, path: Path) -> bool:
    """Restore ``run`` from the checkpoint ``path`` (if it exists): weights, optimizer,
    schedule, RNG streams, best scores and history. Returns whether it resumed.

    Raises:
        CheckpointError: the checkpoint's config differs from the run's (``train.epochs`` aside).
    """
    ctx, t_cfg = run.ctx, run.cfg.train
    ckpt = _load_resume(path, ctx)
    if ckpt is None:
        return False
    diffs = config_differences(ckpt["config"], run.cfg.to_dict(), ignore=("train.epochs",))
    saved = ckpt["resolved"]
    diffs += [f"{k} (resolved from the training data): checkpoint has {saved.get(k)!r}, this run has "
              f"{run.resolved.get(k)!r}" for k in sorted(set(saved) | set(run.resolved)) if saved.get(k) != run.resolved.get(k)]
    if diffs:
        raise CheckpointError(f"cannot resume from {path}: the config differs:\n  " + "\n  ".join(diffs))
    run.model.load_state_dict(ckpt["model"])
    run.optimizer.load_state_dict(ckpt["optimizer"])
    run.scheduler.load_state_dict(ckpt["scheduler"])
    ranks = ckpt.get("rng_ranks") or []
    if len(ranks) == ctx.world_size:
        _set_process_rng(ranks[ctx.rank], run.device)
    else:
        set_rng_state(ckpt["rng"])
        if ctx.rank:
            torch.manual_seed(stream_seed(t_cfg.seed, ctx.rank, ckpt["state"]["epoch"]))
        if ctx.world_size != ckpt.get("world_size", 1):
            log.warning("resuming a %d-process run on %d processes: the global batches stay the same, "
                        "the dropout random streams do not", ckpt.get("world_size", 1), ctx.world_size)
    run.state = RunState(**ckpt["state"])
    run.history = list(ckpt["history"])
    if ctx.is_main:
        log.info("resumed from %s at epoch %d", path, run.state.epoch)
    return True


def _non_finite(what: str, epoch: int, step: int, checkpoint: Path | None, hint: str) -> NonFiniteLossError:
    kept = checkpoint if checkpoint is not None and checkpoint.exists() else "(none yet)"
    return NonFiniteLossError(f"{what} at epoch {epoch + 1}, step {step + 1}. The last good checkpoint "
                              f"is kept at {kept}. {hint}")


def train_batch_loss(run: Run, batch) -> tuple[torch.Tensor, int]:
    """Forward ``batch`` and return ``(loss, rows)``: the loss over its training labels
    (normalised for regression) and how many labels it counted (graphs, or nodes; for a
    transductive dataset only the train mask's nodes: no other label enters the loss)."""
    pred = run.net(batch)
    info = run.info
    y = label_rows(batch, info, "train")
    mask = split_mask(batch, info, "train")
    if mask is not None:
        pred = pred[mask]
    if info.task == "regression":
        y = (y - run.mean) / run.std
    return run.criterion(pred, y), int(y.shape[0])


def train_epoch(run: Run, epoch: int, progress: bool = True, checkpoint: Path | None = None) -> dict:
    """One epoch of training steps (forward, normalised loss, backward, clipping, AdamW).
    A transductive dataset (one graph) takes one full-graph step per epoch.

    A non-finite loss or gradient norm raises :class:`NonFiniteLossError` (naming
    ``checkpoint``), or skips the batch when ``run.on_nan == "skip"``. Returns the summed
    loss and label count (graphs or nodes) of this rank, the summed gradient norms and the
    number of steps.
    """
    t_cfg, ctx, model, opt = run.cfg.train, run.ctx, run.model, run.optimizer
    run.net.train()
    loader = epoch_loader(run.ds.train, t_cfg.batch_size, t_cfg.seed, epoch, ctx.rank, ctx.world_size)
    total, count, gnorm_sum, skipped = 0.0, 0, 0.0, 0
    bar = tqdm(loader, desc=f"epoch {epoch + 1}/{t_cfg.epochs}", leave=False, disable=not progress)
    for step, batch in enumerate(bar):
        batch = batch.to(run.device)
        opt.zero_grad(set_to_none=True)
        loss, rows = train_batch_loss(run, batch)
        finite = bool(torch.isfinite(loss))
        if ctx.distributed:
            finite = not ctx.any(not finite)  # every rank takes the same decision
        if not finite:
            if run.on_nan == "skip":
                if ctx.distributed:  # DDP expects the backward of every forward
                    loss.backward()
                    opt.zero_grad(set_to_none=True)
                skipped += 1
                continue
            raise _non_finite(f"non-finite loss ({loss.item()})", epoch, step, checkpoint,
                              "Lower train.lr, check the data for NaN features, or pass --on-nan skip "
                              "to skip such batches.")
        loss.backward()
        # DDP has averaged the gradients: the norm is the same on every rank
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), t_cfg.clip if t_cfg.clip > 0 else float("inf"))
        if not torch.isfinite(gnorm):
            if run.on_nan == "skip":
                opt.zero_grad(set_to_none=True)
                skipped += 1
                continue
            raise _non_finite("non-finite gradient norm", epoch, step, checkpoint,
                              "Lower train.lr or pass --on-nan skip.")
        opt.step()
        total += loss.item() * rows
        count += rows
        gnorm_sum += float(gnorm)
        bar.set_postfix(loss=f"{total / max(count, 1):.4f}")
    return {"loss_sum": total, "rows": count, "grad_norm_sum": gnorm_sum, "steps": len(loader),
            "skipped": skipped}


def evaluate_epoch(run: Run, full: bool = True) -> tuple[float, float | None, list[float]]:
    """Evaluation step: ``(val, test, gate means)`` computed on rank 0 and broadcast;
    ``full=False`` evaluates the validation split only (``test`` None, no gate means).
    With ``train.eval_norm: train`` the BatchNorm statistics are first recomputed on the
    training set (:func:`siggate.train.bn_stats.recompute_bn_stats`; the weights and the
    training trajectory are unchanged, the checkpoints carry the new statistics)."""
    val = test = None
    gates: list[float] = []
    if run.ctx.is_main:
        bs, dev = run.cfg.train.eval_batch_size, run.device
        if run.cfg.train.eval_norm == "train":
            recompute_bn_stats(run.model, graph_batches(run.ds.train), dev)
        scores = evaluate_splits(run.model, run.ds, ["val", "test"] if full else ["val"], run.mean, run.std, bs, dev)
        val, test = scores["val"], scores.get("test")
        if full:
            gates = gate_means(run.model, run.ds.val, device=dev)
    return run.ctx.broadcast((val, test, gates))


def fit(run: Run, progress: bool = True, on_epoch_end: Callable[[Run, EpochEnd], None] | None = None,
        checkpoint: Path | None = None, full_eval: bool = True) -> Run:
    """Run the remaining epochs of ``run``: :func:`train_epoch`, the schedule step,
    :func:`evaluate_epoch`, best-score tracking and one history row per epoch, then
    ``on_epoch_end(run, EpochEnd)`` (on every rank) -- where :func:`train` writes its
    checkpoints and logs, and analyses take their measurements."""
    t_cfg, state = run.cfg.train, run.state
    for epoch in range(state.epoch, t_cfg.epochs):
        t_ep = time.time()
        stats = train_epoch(run, epoch, progress, checkpoint)
        state.skipped_batches += stats["skipped"]
        total, count = run.ctx.all_reduce_sum([stats["loss_sum"], stats["rows"]])
        lr = run.optimizer.param_groups[0]["lr"]
        run.scheduler.step()
        val, test, gates = evaluate_epoch(run, full_eval)
        improved = state.best_val is None or (math.isfinite(val) and is_better(run.info.metric, val, state.best_val))
        if improved:
            state.best_val, state.best_test, state.best_epoch = val, test, epoch
        row = {
            "epoch": epoch + 1, "train_loss": total / max(count, 1), "val": val, "test": test, "lr": lr,
            "grad_norm": stats["grad_norm_sum"] / max(stats["steps"], 1), "seconds": time.time() - t_ep,
            "gate_mean": gates,
        }
        run.history.append(row)
        state.epoch = epoch + 1
        rng_ranks = run.ctx.all_gather(_process_rng(run.device))
        if on_epoch_end is not None:
            on_epoch_end(run, EpochEnd(row, improved, int(count), stats["skipped"], rng_ranks))
    return run


def _prepare_data_ranked(cfg: Config, ctx: DistContext, progress: bool) -> GraphDataset:
    """Rank 0 builds the caches first; the other ranks then read them."""
    if not ctx.is_main:
        ctx.barrier()
    ds = prepare_data(cfg, progress)
    if ctx.is_main:
        ctx.barrier()
    return ds


class _RunFiles:
    """Checkpoint step and logs of :func:`train` (rank 0): ``config.yaml``, ``log.csv``,
    TensorBoard events, ``best.pt`` and ``last.pt`` after every epoch."""

    def __init__(self, run: Run, out: Path, progress: bool) -> None:
        cfg = run.cfg
        (out / "config.yaml").write_text(yaml.safe_dump(
            {**cfg.to_dict(), "_meta": {"siggate_version": siggate.__version__, "git_commit": git_commit(),
                                        "task": run.info.to_dict(), "resolved": dict(run.resolved)}},
            sort_keys=False))
        self.out, self.progress = out, progress
        self.source = data_source(cfg)
        self.writer = _EpochLog(out / "log.csv", run.history)
        self.tb = TBLogger(out / "tb", purge_step=run.state.epoch + 1 if run.state.epoch else None)

    def __call__(self, run: Run, end: EpochEnd) -> None:
        """Write the epoch: log row, checkpoints, TensorBoard, one line on the console."""
        row, info = end.row, run.info
        self.writer.write(row)
        ckpt = _checkpoint(run.model, run.optimizer, run.scheduler, run.cfg, info, run.mean, run.std, run.state,
                           run.history, run.params, end.rng_ranks, run.resolved)
        ckpt["data_source"] = self.source
        if end.improved:
            atomic_save(ckpt, self.out / "best.pt")
        atomic_save(ckpt, self.out / "last.pt")
        self.tb.log_epoch(row, info.metric)
        msg = (f"epoch {row['epoch']:4d}/{run.cfg.train.epochs}  loss {row['train_loss']:.4f}  "
               f"val {info.metric} {row['val']:.4f}  test {info.metric} {row['test']:.4f}  lr {row['lr']:.2e}  "
               f"{row['seconds']:.1f}s{'  *' if end.improved else ''}")
        tqdm.write(msg) if self.progress else log.info(msg)

    def close(self) -> None:
        """Flush and close the TensorBoard writer."""
        self.tb.close()


def _final_metrics(run: Run, seconds: float) -> dict:
    """``metrics.json``: best epoch and scores, sizes, timing and the whole history."""
    cfg, state = run.cfg, run.state
    return {
        "dataset": run.info.name,
        "level": run.info.level,
        "task": run.info.task,
        "metric": run.info.metric,
        "higher_is_better": run.info.higher_is_better,
        "best_epoch": state.best_epoch + 1,
        "val": state.best_val,
        "test": state.best_test,
        "params": run.params,
        "gate_params": run.model.gate_parameter_count(),
        "seconds": seconds,
        "epochs": cfg.train.epochs,
        "seed": cfg.train.seed,
        "attn": cfg.model.attn,
        "gate": cfg.model.gate if cfg.model.attn else None,  # no attention branch, no gate
        "resolved": dict(run.resolved),
        "skipped_batches": state.skipped_batches,
        "world_size": run.ctx.world_size,
        "splits": run.ds.sizes(),
        **({"split_nodes": run.ds.node_counts()} if run.info.level == "node" else {}),
        **({"init": {k: run.init[k] for k in ("source", "path", "sha256", "copied")}} if run.init else {}),
        **({"dataset_stats": run.ds.stats} if run.ds.stats else {}),
        "history": run.history,
    }


def train(cfg: Config, out_dir: str | Path, resume: bool = False, progress: bool = True,
          dataset: GraphDataset | None = None, dist: DistContext | None = None) -> dict:
    """Train ``cfg`` and write ``metrics.json``, ``best.pt``, ``last.pt``, ``config.yaml``,
    ``log.csv`` and TensorBoard events (``tb/``) under ``out_dir``. Returns the metrics dict.

    The steps: :func:`setup_run`, :func:`resume_run` (with ``resume``), then :func:`fit`
    with the checkpoint step as its epoch hook. ``dist`` is the process's place in a
    ``torchrun`` job (see :func:`siggate.train.distributed.init_distributed`); by default a
    single process on CPU.
    """
    ctx = dist or DistContext()
    out = Path(out_dir)
    t_cfg = cfg.train
    if t_cfg.batch_size % ctx.world_size:
        raise ConfigError(f"train.batch_size: {t_cfg.batch_size} is the global batch and must be a multiple "
                          f"of the world size {ctx.world_size} (each rank takes batch_size / world_size)")
    if ctx.is_main:
        out.mkdir(parents=True, exist_ok=True)
    if t_cfg.threads:
        torch.set_num_threads(t_cfg.threads)
    ds = dataset if dataset is not None else _prepare_data_ranked(cfg, ctx, progress)
    run = setup_run(cfg, ds, ctx)
    last_path = out / "last.pt"
    if resume:
        resume_run(run, last_path)
    files = _RunFiles(run, out, progress) if ctx.is_main else None
    t0 = time.time() - sum(h.get("seconds", 0.0) for h in run.history)
    try:
        fit(run, progress, on_epoch_end=files, checkpoint=last_path)
    finally:
        if files is not None:
            files.close()
    metrics = _final_metrics(run, time.time() - t0)
    if ctx.is_main and (out / "best.pt").is_file():
        preds = best_predictions(run, out / "best.pt")
        metrics.update({f"{split}_metrics": split_summary(run.info, run.ds.splits[split], p, split)
                        for split, p in preds.items()})
        if cfg.data.name == "csv":
            write_csv_run_tables(out, run.ds, preds["test"])
    if ctx.is_main:
        # atomic: ``siggate compare`` skips runs whose metrics.json exists
        atomic_write_bytes(out / "metrics.json", json.dumps(metrics, indent=2).encode())
    return metrics


def best_predictions(run: Run, best_path: Path, splits=("val", "test")) -> dict:
    """``{split: predictions}`` of the best epoch's weights (``best_path``) on ``splits``, in
    target units (probabilities for classification, :func:`probabilities`)."""
    model = copy.deepcopy(run.model)
    model.load_state_dict(load_checkpoint(best_path)["model"])
    bs, dev = run.cfg.train.eval_batch_size, run.device
    return {s: probabilities(predict_graphs(model, run.ds.splits[s], run.info, run.mean, run.std, bs, dev), run.info.task)
            for s in splits}


def write_csv_run_tables(out: Path, ds: GraphDataset, test_pred: torch.Tensor, test_std: torch.Tensor | None = None) -> None:
    """A CSV run's row-level files in ``out``: ``test_predictions.csv`` (the test molecules'
    rows, SMILES, labels and ``test_pred`` ``[G, T]``, and an ensemble's ``test_std``),
    ``splits.csv`` and ``data_report.csv`` (:func:`siggate.data.csvdata.write_run_tables`)."""
    from ..data.csvdata import write_run_tables
    from .rundir import TEST_PREDICTIONS, write_test_predictions

    test = ds.test
    labels = torch.cat([g.y.reshape(1, -1) for g in test]).tolist() if test else []
    write_test_predictions(out / TEST_PREDICTIONS, [int(g.idx) for g in test], [str(g.smiles) for g in test],
                           list(ds.info.target_names), labels, test_pred.tolist(),
                           None if test_std is None else test_std.tolist())
    write_run_tables(ds, out)


class _EpochLog:
    """One CSV row per epoch (``log.csv``), rewritten from history on resume."""

    FIELDS = ["epoch", "train_loss", "val", "test", "lr", "grad_norm", "seconds"]

    def __init__(self, path: Path, history: list) -> None:
        self.path = path
        if path.exists():
            path.unlink()
        for row in history:
            self.write(row)

    def write(self, row: dict) -> None:
        new = not self.path.exists()
        with open(self.path, "a", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=self.FIELDS, extrasaction="ignore")
            if new:
                w.writeheader()
            w.writerow(row)
            fh.flush()
            os.fsync(fh.fileno())


def load_trained(path: str | Path):
    """Load a checkpoint written by :func:`train`: returns ``(model, ckpt, cfg, info)``."""
    ckpt = load_checkpoint(path)
    try:
        cfg = from_dict(ckpt["config"])
    except Exception as exc:  # incompatible config from another version
        raise CheckpointError(f"{path}: its config does not fit this siggate version: {exc}") from None
    info = TaskInfo(**ckpt["info"])
    try:
        model_cfg = resolved_model_config(cfg, ckpt["resolved"])
    except ConfigError as exc:
        raise CheckpointError(f"{path}: {exc}") from None
    model = SigGateGT.from_config(model_cfg, info)
    diffs = describe_weight_mismatch(model.state_dict(), ckpt["model"])
    if diffs:
        raise CheckpointError(
            f"{path}: the weights do not fit the model its config describes: "
            + "; ".join(diffs[:5]) + (f" (+{len(diffs) - 5} more)" if len(diffs) > 5 else "")
            + f". It was written by siggate {ckpt.get('siggate_version')}; this is {siggate.__version__}."
        )
    model.load_state_dict(ckpt["model"])
    model.eval()
    return model, ckpt, cfg, info
