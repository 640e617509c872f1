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

import csv
import json
import logging
import math
import os
import random
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

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
from ..data.base import GraphDataset, TaskInfo
from ..data.cache import atomic_write_bytes
from ..nn.model import SigGateGT
from .checkpoint import (
    FORMAT_VERSION,
    CheckpointError,
    atomic_save,
    describe_incompatibility,
    describe_weight_mismatch,
    load_checkpoint,
    rng_state,
    set_rng_state,
)
from .distributed import DistContext, convert_sync_batchnorm, has_unused_parameters
from .metrics import compute_metric, is_better
from .schedule import make_scheduler
from .tblog import TBLogger

log = logging.getLogger("siggate.train")


class NonFiniteLossError(RuntimeError):
    """Training produced a NaN or infinite loss or gradient."""


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def prepare_data(cfg: Config, progress: bool = True) -> GraphDataset:
    """Load the dataset named in ``cfg.data`` and add the positional encodings the model needs."""
    from ..data.catalog import get_dataset
    from ..data.pe import cached_pe

    d = cfg.data
    if d.name == "csv":
        from ..data.csvdata import load_csv

        ds = load_csv(d.csv, d.smiles_col, list(d.target_cols), d.task, split=d.split or "scaffold",
                      cache_dir=Path(d.cache_dir) if d.cache_dir else None, seed=cfg.train.seed)
    else:  # the benchmarks have official splits; validate() lets data.split through for nci5k only
        extra = {"split": d.split} if d.split is not None else {}
        ds = get_dataset(d.name, root=d.root, cache_dir=d.cache_dir, **extra)
    m = cfg.model
    rwse = m.pe_steps if m.pe == "rwse" else 0
    lap = m.pe_steps if m.pe == "lappe" else 0
    if rwse or lap:
        from ..data.base import default_cache_dir

        cache_dir = Path(d.cache_dir) if d.cache_dir else default_cache_dir()
        key = ds.source or d.name
        for split in list(ds.splits):
            ds.splits[split] = cached_pe(ds.splits[split], f"{key}:{split}", cache_dir,
                                         rwse_steps=rwse, lap_dim=lap, progress=progress)
    return ds


def target_stats(train, num_tasks: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-target mean and std over the training graphs (NaN labels ignored)."""
    y = torch.cat([g.y.view(1, -1) for g in train]).double()
    mean = torch.nanmean(y, dim=0)
    std = torch.sqrt(torch.nanmean((y - mean) ** 2, dim=0)).clamp_min(1e-8)
    return mean.float(), std.float()


def loss_fn(name: str, task: str):
    if name == "auto":
        name = "l1" if task == "regression" else "bce"

    def fn(pred: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        valid = ~torch.isnan(y)
        if name == "bce":
            return F.binary_cross_entropy_with_logits(pred[valid], y[valid])
        if name == "mse":
            return F.mse_loss(pred[valid], y[valid])
        return F.l1_loss(pred[valid], y[valid])

    return fn


def build_model(cfg: Config, info: TaskInfo) -> SigGateGT:
    """Build the model for ``info`` with seed-controlled, gate-last initialisation."""
    torch.manual_seed(cfg.train.seed)
    model = SigGateGT.from_config(cfg.model, info)
    # Re-seed and re-initialise so that models that differ only in the gate share every
    # other initial weight (the gate parameters are initialised last).
    torch.manual_seed(cfg.train.seed)
    model.reset_parameters()
    return model


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
                                 seed=seed * 1_000_003, drop_last=False)
    sampler.set_epoch(epoch)
    return DataLoader(graphs, batch_size=batch_size // world_size, sampler=sampler, generator=_loader_generator())


@torch.no_grad()
def predict(model, loader, mean=None, std=None, task: str = "regression", device=None) -> torch.Tensor:
    """Raw model outputs in target units (denormalised for regression) ``[G, T]``, on CPU."""
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


def evaluate_split(model, graphs, info: TaskInfo, mean, std, batch_size: int = 256, device=None) -> float:
    loader = DataLoader(graphs, batch_size=batch_size, shuffle=False, generator=_loader_generator())
    pred = predict(model, loader, mean, std, info.task, device=device)
    y = torch.cat([g.y.view(1, -1) for g in graphs])
    return float(compute_metric(info.metric, y.numpy(), pred.numpy()))


@torch.no_grad()
def gate_means(model, graphs, n: int = 64, device=None) -> list[float]:
    """Mean gate value per layer on the first ``n`` graphs (empty for ``gate='none'``)."""
    if not model.attention_modules() or model.attention_modules()[0].gate == "none":
        return []
    model.eval()
    batch = next(iter(DataLoader(graphs[:n], batch_size=n, generator=_loader_generator())))
    if device is not None:
        batch = batch.to(device)
    _, det = model(batch, return_details=True)
    mask = det["mask"]
    return [float(a["gate"][mask].mean()) for a in det["attn"]]


def git_commit() -> str | None:
    try:
        here = Path(__file__).resolve().parent
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


@dataclass
class RunState:
    epoch: int = 0  # next epoch to run
    best_epoch: int = -1
    best_val: float | None = None
    best_test: float | None = None
    skipped_batches: int = 0


def _checkpoint(model, optimizer, scheduler, cfg, info, mean, std, state: RunState, history, params,
                rng_ranks: list) -> dict:
    return {
        "format": FORMAT_VERSION,
        "siggate_version": siggate.__version__,
        "config": cfg.to_dict(),
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


def train(cfg: Config, out_dir: str | Path, resume: bool = False, progress: bool = True,
          dataset: GraphDataset | None = None, dist: DistContext | None = None) -> dict:
    """Train ``cfg`` and write ``metrics.json``, ``best.pt``, ``last.pt``, ``config.yaml``,
    ``log.csv`` and TensorBoard events (``tb/``) under ``out_dir``. Returns the metrics dict.

    ``dist`` is the process's place in a ``torchrun`` job (see
    :func:`siggate.train.distributed.init_distributed`); by default a single process on CPU.
    """
    ctx = dist or DistContext()
    main = ctx.is_main
    out = Path(out_dir)
    t_cfg = cfg.train
    if t_cfg.batch_size % ctx.world_size:
        raise ConfigError(f"train.batch_size: {t_cfg.batch_size} is the global batch and must be a multiple "
                          f"of the world size {ctx.world_size} (each rank takes batch_size / world_size)")
    if main:
        out.mkdir(parents=True, exist_ok=True)
    if t_cfg.threads:
        torch.set_num_threads(t_cfg.threads)
    if dataset is not None:
        ds = dataset
    else:
        # rank 0 builds the caches first; the other ranks then read them
        if not main:
            ctx.barrier()
        ds = prepare_data(cfg, progress)
        if main:
            ctx.barrier()
    info = ds.info
    device = ctx.device
    seed_everything(t_cfg.seed)
    model = build_model(cfg, info)
    params = sum(p.numel() for p in model.parameters())
    # The training random stream (dropout, LapPE sign flips) starts from a state that depends
    # only on the seed and the rank, not on how many numbers the initialisation drew: runs
    # that differ only in the gate then draw the same dropout masks. Each rank has its own.
    torch.manual_seed(t_cfg.seed * 1_000_003 + 7919 * ctx.rank + 1)
    model.to(device)
    if ctx.distributed:
        model = convert_sync_batchnorm(model, device)
        probe = next(iter(DataLoader(ds.train[:2], batch_size=2, generator=_loader_generator()))).to(device)
        net = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None,
                                      find_unused_parameters=has_unused_parameters(model, probe))
    else:
        net = model
    optimizer = torch.optim.AdamW(model.parameters(), lr=t_cfg.lr, weight_decay=t_cfg.weight_decay)
    scheduler = make_scheduler(optimizer, t_cfg.warmup_epochs, t_cfg.epochs)
    if info.task == "regression" and t_cfg.normalize_targets:
        mean, std = target_stats(ds.train, info.num_tasks)
    else:
        mean, std = torch.zeros(info.num_tasks), torch.ones(info.num_tasks)
    mean, std = mean.to(device), std.to(device)
    criterion = loss_fn(t_cfg.loss, info.task)
    state, history = RunState(), []
    last_path, best_path = out / "last.pt", out / "best.pt"
    ckpt = _load_resume(last_path, ctx) if resume else None
    if ckpt is not None:
        diffs = [d for d in describe_incompatibility(ckpt["config"], cfg.to_dict())
                 if not d.startswith("train.epochs")]
        if diffs:
            raise CheckpointError(f"cannot resume from {last_path}: the config differs:\n  " + "\n  ".join(diffs))
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["scheduler"])
        ranks = ckpt.get("rng_ranks") or []
        if len(ranks) == ctx.world_size:
            _set_process_rng(ranks[ctx.rank], device)
        else:
            set_rng_state(ckpt["rng"])
            if ctx.rank:
                torch.manual_seed(t_cfg.seed * 1_000_003 + 7919 * ctx.rank + 1 + ckpt["state"]["epoch"])
            if ctx.world_size != ckpt.get("world_size", 1):
                log.warning("resuming a %d-process run on %d processes: the global batches stay the same, "
                            "the dropout random streams do not", ckpt.get("world_size", 1), ctx.world_size)
        state = RunState(**ckpt["state"])
        history = list(ckpt["history"])
        if main:
            log.info("resumed from %s at epoch %d", last_path, state.epoch)
    del ckpt
    writer = tb = None
    if main:
        (out / "config.yaml").write_text(yaml.safe_dump(
            {**cfg.to_dict(), "_meta": {"siggate_version": siggate.__version__, "git_commit": git_commit()}},
            sort_keys=False))
        writer = _EpochLog(out / "log.csv", history)
        tb = TBLogger(out / "tb", purge_step=state.epoch + 1 if state.epoch else None)
    t0 = time.time() - sum(h.get("seconds", 0.0) for h in history)
    try:
        for epoch in range(state.epoch, t_cfg.epochs):
            net.train()
            loader = epoch_loader(ds.train, t_cfg.batch_size, t_cfg.seed, epoch, ctx.rank, ctx.world_size)
            t_ep = time.time()
            total, count, gnorm_sum = 0.0, 0, 0.0
            bar = tqdm(loader, desc=f"epoch {epoch + 1}/{t_cfg.epochs}", leave=False, disable=not progress)
            for step, batch in enumerate(bar):
                batch = batch.to(device)
                optimizer.zero_grad(set_to_none=True)
                pred = net(batch)
                y = (batch.y.view(pred.shape) - mean) / std
                loss = criterion(pred, y)
                finite = bool(torch.isfinite(loss))
                if ctx.distributed:
                    finite = not ctx.any(not finite)  # every rank takes the same decision
                if not finite:
                    if t_cfg.on_nan == "skip":
                        if ctx.distributed:  # DDP expects the backward of every forward
                            loss.backward()
                            optimizer.zero_grad(set_to_none=True)
                        state.skipped_batches += 1
                        continue
                    raise NonFiniteLossError(
                        f"non-finite loss ({loss.item()}) at epoch {epoch + 1}, step {step + 1}. "
                        f"The last good checkpoint is kept at {last_path if last_path.exists() else '(none yet)'}. "
                        f"Lower train.lr, check the data for NaN features, or pass --on-nan skip to skip such batches."
                    )
                loss.backward()
                # DDP has averaged the gradients: the norm is the same on every rank
                gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), t_cfg.clip if t_cfg.clip > 0 else float("inf"))
                if not torch.isfinite(gnorm):
                    if t_cfg.on_nan == "skip":
                        optimizer.zero_grad(set_to_none=True)
                        state.skipped_batches += 1
                        continue
                    raise NonFiniteLossError(
                        f"non-finite gradient norm at epoch {epoch + 1}, step {step + 1}. The last good checkpoint "
                        f"is kept at {last_path if last_path.exists() else '(none yet)'}. Lower train.lr or pass --on-nan skip."
                    )
                optimizer.step()
                total += loss.item() * batch.num_graphs
                count += batch.num_graphs
                gnorm_sum += float(gnorm)
                bar.set_postfix(loss=f"{total / max(count, 1):.4f}")
            total, count = ctx.all_reduce_sum([total, count])
            lr = optimizer.param_groups[0]["lr"]
            scheduler.step()
            val = test = None
            gates: list[float] = []
            if main:
                val = evaluate_split(model, ds.val, info, mean, std, t_cfg.eval_batch_size, device=device)
                test = evaluate_split(model, ds.test, info, mean, std, t_cfg.eval_batch_size, device=device)
                gates = gate_means(model, ds.val, device=device)
            val, test, gates = ctx.broadcast((val, test, gates))
            improved = state.best_val is None or (math.isfinite(val) and is_better(info.metric, val, state.best_val))
            if improved:
                state.best_val, state.best_test, state.best_epoch = val, test, epoch
            row = {
                "epoch": epoch + 1, "train_loss": total / max(count, 1), "val": val, "test": test, "lr": lr,
                "grad_norm": gnorm_sum / max(len(loader), 1), "seconds": time.time() - t_ep,
                "gate_mean": gates,
            }
            history.append(row)
            state.epoch = epoch + 1
            rng_ranks = ctx.all_gather(_process_rng(device))
            if not main:
                continue
            writer.write(row)
            ckpt = _checkpoint(model, optimizer, scheduler, cfg, info, mean, std, state, history, params, rng_ranks)
            if improved:
                atomic_save(ckpt, best_path)
            atomic_save(ckpt, last_path)
            tb.log_epoch(row, info.metric)
            msg = (f"epoch {epoch + 1:4d}/{t_cfg.epochs}  loss {row['train_loss']:.4f}  "
                   f"val {info.metric} {val:.4f}  test {info.metric} {test:.4f}  lr {lr:.2e}  "
                   f"{row['seconds']:.1f}s{'  *' if improved else ''}")
            tqdm.write(msg) if progress else log.info(msg)
    finally:
        if tb is not None:
            tb.close()
    metrics = {
        "dataset": info.name,
        "metric": info.metric,
        "higher_is_better": info.higher_is_better,
        "best_epoch": state.best_epoch + 1,
        "val": state.best_val,
        "test": state.best_test,
        "params": params,
        "gate_params": model.gate_parameter_count(),
        "seconds": time.time() - t0,
        "epochs": t_cfg.epochs,
        "seed": t_cfg.seed,
        "gate": cfg.model.gate,
        "skipped_batches": state.skipped_batches,
        "world_size": ctx.world_size,
        "splits": ds.sizes(),
        "history": history,
    }
    if main:
        # atomic: ``siggate compare`` skips runs whose metrics.json exists
        atomic_write_bytes(out / "metrics.json", json.dumps(metrics, indent=2).encode())
    return metrics


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
    model = SigGateGT.from_config(cfg.model, info)
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
