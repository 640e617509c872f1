"""The training loop with exact resume: :func:`read_resume` -> :func:`setup_run` -> :func:`resume_run` -> :func:`fit`
(:func:`train_epoch`, :func:`evaluate_epoch`, the ``on_epoch_end`` hook).

Data order is a pure function of ``(seed, epoch)``, and every epoch ends by writing
``last.pt`` atomically with the model, optimizer, scheduler and RNG states. A run that is
killed at any moment and restarted with ``resume=True`` repeats the unfinished epoch from
the same state and ends with exactly the same metrics as an uninterrupted run (on CPU).

Every source of randomness is part of that state: the global torch/numpy/Python RNGs
(dropout, LapPE sign flips) are saved in the checkpoint, BatchNorm statistics live in the
model's buffers, and the data loaders draw nothing from the global RNG (the shuffling
sampler is seeded by ``(seed, epoch)``, see :func:`epoch_loader`, and every loader gets its
own generator for the worker base seed).

Under ``torchrun`` (``--ddp``, :mod:`.distributed`) each rank reads ``batch_size / world_size``
graphs of every global batch; rank 0 evaluates and writes. The whole run: :func:`.pipeline.train`.
"""

from __future__ import annotations

import functools
import logging
import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DistributedSampler
from torch_geometric.loader import DataLoader
from tqdm.auto import tqdm

from ..config import ConfigError, ModelConfig, TrainConfig
from ..data.base import GraphDataset, TaskInfo, label_rows, split_mask
from ..nn.model import SigGateGT
from ..options import keeps_last
from .bn_stats import epoch_norm, graph_batches, recompute_bn_stats
from .checkpoint import (
    CheckpointError,
    config_differences,
    damaged_state,
    load_checkpoint,
    rng_state,
    set_rng_state,
    shrink_refusal,
)
from .dataprep import check_labelled, check_scorable, graph_loader, loader_generator, target_stats
from .distributed import DistContext, convert_sync_batchnorm, has_unused_parameters
from .losses import CliffPairLoss, cliff_term_refusal, loss_fn, loss_name, loss_share
from .metrics import is_better
from .modelprep import build_model, resolve_pool_norm
from .runfiles import CONFIG
from .schedule import make_scheduler
from .scoring import evaluate_splits, gate_means, selection_scale

log = logging.getLogger("siggate.train")

#: Multiplier that spreads run seeds apart before offsets (rank, epoch) are added: the one
#: seed-mixing constant of siggate (sampler seeds, training random streams).
SEED_STRIDE = 1_000_003


class NonFiniteLossError(RuntimeError):
    """Training produced a NaN or infinite loss or gradient."""


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and torch's global generators with ``seed``."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


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
    return DataLoader(graphs, batch_size=batch_size // world_size, sampler=sampler, generator=loader_generator())


@dataclass
class RunState:
    """Progress of a run, saved in every checkpoint: next epoch, best epoch and scores, skipped batches."""

    epoch: int = 0  # next epoch to run
    best_epoch: int = -1
    best_val: float | None = None
    best_test: float | None = None
    skipped_batches: int = 0
    best_select: float | None = None  # the best epoch's score as epochs are compared (scoring.selection_scale);
    # None in a run begun before siggate kept it, which goes on comparing its metric


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


def read_resume(path: Path, ctx: DistContext | None = None) -> dict | None:
    """The checkpoint a run resumes from, ``path`` (``None`` if there is none): rank 0 reads it
    and every rank receives it, or the same error."""
    ctx = ctx or DistContext()
    res: tuple = (None, None)
    if ctx.is_main and path.exists():
        try:
            res = (load_checkpoint(path, finite=False), None)  # (a diverged run an analysis records resumes too)
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

    model_cfg: ModelConfig
    train_cfg: TrainConfig
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
    cliff: CliffPairLoss | None = None  # train.cliff_weight > 0: the activity-cliff term
    lone_skipped: int = 0  # batches of one node left out by this process (BatchNorm; train_epoch)

    @property
    def info(self) -> TaskInfo:
        """The dataset's task description."""
        return self.ds.info

    @property
    def device(self) -> torch.device:
        """This process's device."""
        return self.ctx.device

    @functools.cached_property
    def batchnorm(self) -> bool:
        """The model normalises with BatchNorm, which cannot train on a batch of one node."""
        return any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in self.model.modules())


@dataclass
class EpochEnd:
    """What :func:`fit` hands its ``on_epoch_end`` hook after each epoch."""

    row: dict  # the epoch's history row (also written to log.csv)
    improved: bool  # the validation metric is the best so far
    train_graphs: int  # labels whose loss counted, graphs or nodes (all ranks)
    skipped: int  # batches skipped this epoch (non-finite loss or gradient, on_nan="skip")
    rng_ranks: list  # every rank's RNG states after the epoch (for the checkpoint)


def setup_run(model_cfg: ModelConfig, train_cfg: TrainConfig, ds: GraphDataset, ctx: DistContext | None = None,
              resumed: dict | None = None) -> Run:
    """Set-up step: the seeded model ``model_cfg`` describes (gate initialised last), the
    training stream seed, DDP wrapper, AdamW, the warmup-cosine schedule, target normalisation
    and the loss of ``train_cfg``.

    ``resumed`` is the checkpoint the run will resume from (:func:`read_resume`). When it records
    the weights ``train.init`` started the run from, they are not read again (the weights come from
    the checkpoint; the file may have moved or changed since): the run keeps that record and the
    pretrained ``model.pool_norm`` it resolved."""
    ctx = ctx or DistContext()
    resolved = resolve_pool_norm(model_cfg, ds.train)
    weights = None
    started = (resumed or {}).get("init") if train_cfg.init else None
    saved = (resumed or {}).get("resolved")
    if not (isinstance(started, dict) and isinstance(saved, dict)):  # none, or not siggate's: read the file
        started = None
    if started is not None:  # the pretrained divisor the run started with, not the file's now
        resolved.update({k: v for k, v in saved.items() if k == "model.pool_norm"})
    elif train_cfg.init:  # read once; pretrained layers keep the pool_norm they were trained with
        from .init_weights import init_resolved, read_init

        weights = read_init(train_cfg.init)
        resolved = init_resolved(weights, model_cfg, resolved)
    t_cfg, info, device = train_cfg, ds.info, ctx.device
    seed_everything(t_cfg.seed)
    model = build_model(model_cfg, info, t_cfg.seed, ds.train, resolved=resolved)
    init = dict(started) if started is not None else None
    if weights is not None:
        from .init_weights import load_init

        init = load_init(model, weights, model_cfg.to_dict(), chirality=info.chirality)
        log.info("initialised %d tensors from %s (%d fresh: the head's last layer%s)", init["copied"], init["path"],
                 len(init["fresh"]), " and the head layers of another shape" if len(init["fresh"]) > 2 else "")
    params = sum(p.numel() for p in model.parameters())
    torch.manual_seed(stream_seed(t_cfg.seed, ctx.rank))
    model.to(device)
    if ctx.distributed:
        model = convert_sync_batchnorm(model, device)
        probe = next(iter(graph_loader(ds.train[:2], 2))).to(device)
        net = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None,
                                      find_unused_parameters=has_unused_parameters(model, probe))
    else:
        net = model
    optimizer = torch.optim.AdamW(model.parameters(), lr=t_cfg.lr, weight_decay=t_cfg.weight_decay)
    scheduler = make_scheduler(optimizer, t_cfg.warmup_epochs, t_cfg.epochs, t_cfg.warmup_start)
    criterion = loss_fn(t_cfg.loss, info.task)
    cliff = None
    if t_cfg.cliff_weight > 0:
        why = cliff_term_refusal(all(hasattr(g, "smiles") for g in ds.train[:1]), info.task, info.level,
                                 dataset=info.name, distributed=ctx.distributed)
        if why:
            raise ConfigError(why)
        cliff = CliffPairLoss()
    labels = check_labelled(ds)  # (stacked once: the normalisation reads them too)
    check_scorable(ds)
    if info.task == "regression" and t_cfg.normalize_targets:
        mean, std = target_stats(ds.train, info, labels)
    else:
        mean, std = torch.zeros(info.num_tasks), torch.ones(info.num_tasks)
    return Run(model_cfg, t_cfg, ctx, ds, model, net, optimizer, scheduler, criterion,
               mean.to(device), std.to(device), params, t_cfg.on_nan, init=init, resolved=resolved, cliff=cliff)


def resume_run(run: Run, path: Path, config: dict, ckpt: dict) -> bool:
    """Restore ``run`` from the checkpoint ``ckpt`` that :func:`read_resume` read from ``path``
    (named in errors): weights, optimizer, schedule, RNG streams, best scores and history.
    Returns ``True`` (it resumed).

    Raises:
        CheckpointError: the checkpoint's config differs from ``config``, the run's whole config
            (``train.epochs`` aside).
    """
    ctx, t_cfg = run.ctx, run.train_cfg
    source = ckpt.get("data_source")
    diffs = config_differences(ckpt["config"], config, ignore=("train.epochs",),
                               csv_sha256=source.get("sha256") if isinstance(source, dict) else None)
    saved = ckpt["resolved"]
    diffs += [f"{k} (resolved from the training data): checkpoint has {saved.get(k)!r}, this run has "
              f"{run.resolved.get(k)!r}" for k in sorted(set(saved) | set(run.resolved)) if saved.get(k) != run.resolved.get(k)]
    if diffs:
        gone = not (Path(path).parent / CONFIG).is_file()  # (the flags given were all it had to go by)
        raise CheckpointError(f"cannot resume from {path}: the config differs ({'; '.join(diffs)}); "
                              + ("the run's config.yaml is gone: restore it (a copy of the run folder), or give the "
                                 "flags that started the run" if gone else
                                 "resume with the run's own flags, or train into a new --out"))
    then = (ckpt.get("info") or {}).get("chirality", "tag")  # (runs recorded before it was kept read the tag)
    if then != run.info.chirality:
        raise CheckpointError(f"cannot resume from {path}: the run read its atoms' chirality as {then!r}, this siggate "
                              f"reads them as {run.info.chirality!r} (R/S, however a SMILES is written); train into a "
                              "new --out, or resume with the siggate version that started the run")
    try:
        _restore(run, ckpt)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        raise damaged_state(path, exc) from None
    shrink = shrink_refusal(path, t_cfg.epochs, run.state.epoch)
    if shrink:
        raise CheckpointError(shrink)
    if (run.state.epoch >= t_cfg.epochs and run.history and run.history[-1].get("eval_norm") == "running"
            and epoch_norm(t_cfg, run.state.epoch - 1) == "train"):  # it would end on the running statistics
        raise CheckpointError(
            f"cannot resume from {path} with train.epochs={t_cfg.epochs}: its epoch {run.state.epoch} was scored with "
            f"the running BatchNorm statistics (a run that keeps its last epoch recomputes them only after the last "
            f"one), so it cannot end there; resume with --epochs above {run.state.epoch}")
    if ctx.is_main:
        log.info("resumed from %s at epoch %d", path, run.state.epoch)
    return True


def _restore(run: Run, ckpt: dict) -> None:
    """Load the training state of a resume checkpoint into ``run`` (see :func:`resume_run`)."""
    ctx, t_cfg = run.ctx, run.train_cfg
    try:  # torch names a state that does not fit with a RuntimeError (an out-of-memory error is none of ours)
        run.model.load_state_dict(ckpt["model"])
        run.optimizer.load_state_dict(ckpt["optimizer"])
        run.scheduler.load_state_dict(ckpt["scheduler"])
    except torch.OutOfMemoryError:
        raise
    except RuntimeError as exc:
        raise ValueError(str(exc)) from None
    # the saved lr is the saved schedule's; a run grown with --epochs goes on along its new one
    # (the same number when the epochs did not change: LambdaLR computes it this way)
    for group, base, factor in zip(run.optimizer.param_groups, run.scheduler.base_lrs, run.scheduler.lr_lambdas):
        group["lr"] = base * factor(run.scheduler.last_epoch)
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
    state = RunState(**ckpt["state"])
    history = list(ckpt["history"])
    before = history[-1].get("threads") if history and isinstance(history[-1], dict) else None
    if isinstance(before, int) and before != torch.get_num_threads():
        log.warning("resuming a run trained on %d thread%s on %d: another count sums in another order, so its next "
                    "epochs differ from an uninterrupted run's, and over many epochs its best epoch and test scores by "
                    "about as much as another seed's; --threads %d continues it as it ran (each epoch's row records "
                    "its threads)", before, "" if before == 1 else "s", torch.get_num_threads(), before)
    if not isinstance(state.epoch, int) or isinstance(state.epoch, bool) or state.epoch < 0:
        raise ValueError(f"state.epoch {state.epoch!r} is not a count of epochs")
    if not all(isinstance(h, dict) for h in history):
        raise ValueError("its history holds entries that are not records of an epoch")
    run.state, run.history = state, history

def _non_finite(what: str, epoch: int, step: int | None, checkpoint: Path | None, hint: str) -> NonFiniteLossError:
    kept = checkpoint if checkpoint is not None and checkpoint.exists() else "(none yet)"
    where = f"at epoch {epoch + 1}" + (f", step {step + 1}" if step is not None else "")
    return NonFiniteLossError(f"{what} {where}. The last good checkpoint is kept at {kept}. {hint}")


def train_batch_loss(run: Run, batch) -> tuple[torch.Tensor, int, float]:
    """Forward ``batch`` and return ``(loss, rows, weight)``: the loss over its training labels
    (normalised for regression), how many rows it counted (graphs, or nodes; for a transductive
    dataset only the train mask's nodes: no other label enters the loss), and the weight of the
    loss in the logged epoch loss (the rows; under DDP, the whole batch's rows over the ranks,
    since each rank's loss is its share of the whole batch's, :func:`~.losses.loss_share`)."""
    pred = run.net(batch)
    info = run.info
    y = label_rows(batch, info, "train")
    mask = split_mask(batch, info, "train")
    if mask is not None:
        pred = pred[mask]
    if info.task == "regression":
        y = (y - run.mean) / run.std
    if run.ctx.distributed:
        loss, weight = loss_share(loss_name(run.train_cfg.loss, info.task), pred, y, run.ctx.all_reduce_sum)
    else:
        loss, weight = run.criterion(pred, y), float(y.shape[0])
    if run.cliff is not None:
        loss = loss + run.train_cfg.cliff_weight * run.cliff(pred, y, batch.smiles)
    return loss, int(y.shape[0]), weight


def train_epoch(run: Run, epoch: int, progress: bool = True, checkpoint: Path | None = None) -> dict:
    """One epoch of training steps (forward, normalised loss, backward, clipping, AdamW).
    A transductive dataset (one graph) takes one full-graph step per epoch.

    A non-finite loss or gradient norm raises :class:`NonFiniteLossError` (naming
    ``checkpoint``), or skips the batch when ``run.on_nan == "skip"``. A batch of one node (a
    one-atom molecule alone at the end of an epoch) is no step for a model with BatchNorm in one
    process, which cannot train on it (under DDP the synced BatchNorms see every rank's nodes);
    it is not counted as skipped, and the first of a run is logged. Returns this rank's
    weighted loss (its losses times their weights, :func:`train_batch_loss`: summed over the
    ranks and divided by the summed rows, the epoch's loss) and row count (graphs or nodes), the
    summed gradient norms and the number of steps.
    """
    t_cfg, ctx, model, opt = run.train_cfg, run.ctx, run.model, run.optimizer
    run.net.train()
    loader = epoch_loader(run.ds.train, t_cfg.batch_size, t_cfg.seed, epoch, ctx.rank, ctx.world_size)
    total, count, weights, gnorm_sum, skipped = 0.0, 0, 0.0, 0.0, 0
    bar = tqdm(loader, desc=f"epoch {epoch + 1}/{t_cfg.epochs}", leave=False, disable=not progress)
    for step, batch in enumerate(bar):
        # BatchNorm cannot train on one node (a one-atom molecule alone in an epoch's last batch);
        # under DDP the BatchNorms are synced over every rank's nodes, which are never fewer than two
        if batch.num_nodes < 2 and run.batchnorm and not ctx.distributed:
            if not run.lone_skipped:
                log.warning("epoch %d: a batch of one node (a one-atom molecule alone) is no training step: "
                            "BatchNorm cannot train on it (said once per run; with train.batch_size=1 every "
                            "one-atom molecule is left out: use a larger batch)", epoch + 1)
            run.lone_skipped += 1
            continue
        batch = batch.to(run.device)
        opt.zero_grad(set_to_none=True)
        loss, rows, weight = train_batch_loss(run, batch)
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
                              "Lower train.lr, check the data for NaN features, or skip such batches: --set "
                              "train.on_nan=skip (siggate train: --on-nan skip).")
        loss.backward()
        # DDP has averaged the gradients: the norm is the same on every rank
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), t_cfg.clip if t_cfg.clip > 0 else float("inf"))
        if not torch.isfinite(gnorm):
            if run.on_nan == "skip":
                opt.zero_grad(set_to_none=True)
                skipped += 1
                continue
            raise _non_finite("non-finite gradient norm", epoch, step, checkpoint,
                              "Lower train.lr or skip such batches: --set train.on_nan=skip (siggate train: "
                              "--on-nan skip).")
        opt.step()
        total += loss.item() * weight
        count += rows
        weights += weight
        gnorm_sum += float(gnorm)
        bar.set_postfix(loss=f"{total / max(weights, 1e-12):.4f}")  # (under DDP: this rank's shares' mean)
    return {"loss_sum": total, "rows": count, "grad_norm_sum": gnorm_sum, "steps": len(loader),
            "skipped": skipped}


def evaluate_epoch(run: Run, full: bool = True, norm: str | None = None,
                   scale: np.ndarray | None = None) -> tuple[float, float | None, list[float], float]:
    """Evaluation step: ``(val, test, gate means, val as epochs are compared)`` computed on rank 0
    and broadcast; ``full=False`` (or no test split: the estimators') scores val only (``test``
    None, no gate means). ``norm`` (default ``train.eval_norm``) ``"train"`` first recomputes the
    BatchNorm statistics on the training set (:mod:`.bn_stats`; weights unchanged, the checkpoints
    carry the new statistics). ``scale``: :func:`~.scoring.selection_scale` (None: val itself)."""
    val = test = select = None
    gates: list[float] = []
    if run.ctx.is_main:
        dev = run.device
        if (norm or run.train_cfg.eval_norm) == "train":
            recompute_bn_stats(run.model, graph_batches(run.ds.train), dev)
        splits = ["val", "test"] if full and run.ds.splits.get("test") else ["val"]
        scores = evaluate_splits(run.model, run.ds, splits, run.mean, run.std, run.train_cfg.eval_batch_size, dev,
                                 scale)
        val, test = scores["val"], scores.get("test")
        select = scores.get("select", val)
        if full:
            gates = gate_means(run.model, run.ds.val, device=dev)
    return run.ctx.broadcast((val, test, gates, select))


def fit(run: Run, progress: bool = True, on_epoch_end: Callable[[Run, EpochEnd], None] | None = None,
        checkpoint: Path | None = None, full_eval: bool = True, stop_untrained: bool = True) -> Run:
    """Run the remaining epochs of ``run``: :func:`train_epoch`, the schedule step,
    :func:`evaluate_epoch`, best-score tracking and one history row per epoch, then
    ``on_epoch_end(run, EpochEnd)`` (on every rank) -- where :func:`train` writes its
    checkpoints and logs, and analyses take their measurements.

    An epoch whose every batch ``on_nan="skip"`` left out trained nothing (its train loss is
    NaN): ``stop_untrained`` raises :class:`NonFiniteLossError` then (``siggate train``: such a
    run finished with exit 0 and NaN metrics); the analyses that measure divergence (the
    learning-rate sweep, entropy) pass ``False`` and record it."""
    t_cfg, state = run.train_cfg, run.state
    last = keeps_last(t_cfg.select)  # the epoch kept is the last: val scores choose nothing
    scale = selection_scale(run.ds)
    kept = state.best_select is not None or state.best_val is None  # (a run begun before compares its metric)
    for epoch in range(state.epoch, t_cfg.epochs):
        t_ep, c_ep = time.time(), time.process_time()
        stats = train_epoch(run, epoch, progress, checkpoint)
        state.skipped_batches += stats["skipped"]
        total, count, skipped = run.ctx.all_reduce_sum([stats["loss_sum"], stats["rows"], stats["skipped"]])
        if count == 0 and skipped and stop_untrained:  # --on-nan skip left every step out: nothing trained
            raise _non_finite(f"every training batch had a non-finite loss or gradient ({int(skipped)} skipped under "
                              "--on-nan skip): the model trained on none of them", epoch, None, checkpoint,
                              "Lower train.lr, check the data for NaN features and --init for NaN weights "
                              "(--on-nan skip is for a rare batch, not every one).")
        lr = run.optimizer.param_groups[0]["lr"]
        run.scheduler.step()
        norm = epoch_norm(t_cfg, epoch, last)
        val, test, gates, select = evaluate_epoch(run, full_eval, norm, scale if kept else None)
        improved = (state.best_val is None or last
                    or (math.isfinite(select) and is_better(run.info.metric, select,
                                                            state.best_select if kept else state.best_val)))
        if improved:
            state.best_val, state.best_test, state.best_epoch = val, test, epoch
            state.best_select = select if kept else None
        row = {
            "epoch": epoch + 1, "train_loss": total / count if count else math.nan, "val": val, "test": test, "lr": lr,
            "grad_norm": stats["grad_norm_sum"] / max(stats["steps"], 1), "seconds": time.time() - t_ep,
            "cpu_seconds": time.process_time() - c_ep,  # this process's CPU (all its threads): wall time counts waits
            "eval_norm": norm, "gate_mean": gates,
            "world_size": run.ctx.world_size,  # its processes (a resume may run on another number)
            "threads": torch.get_num_threads(),  # and their threads (another count sums in another order)
            **({"val_scaled": select} if scale is not None and kept else {}),  # (what compared the epochs)
        }
        run.history.append(row)
        state.epoch = epoch + 1
        rng_ranks = run.ctx.all_gather(_process_rng(run.device))
        if on_epoch_end is not None:
            on_epoch_end(run, EpochEnd(row, improved, int(count), stats["skipped"], rng_ranks))
    return run
