"""``siggate train`` of one model: a short pipeline of stages, each taking only its part of
the config.

1. prepare the data (``cfg.data`` and the encodings ``cfg.model`` reads; :mod:`.dataprep`);
2. build the model and its training state (``cfg.model``, ``cfg.train``, the task;
   :func:`.loop.setup_run`, :mod:`.modelprep`), resumed from ``last.pt`` if asked;
3. fit (:func:`.loop.fit`), the run record's checkpoint step as its epoch hook (:mod:`.record`);
4. score the best epoch's weights on val and test (:mod:`.scoring`);
5. record ``metrics.json``, the split-conformal calibration, the applicability domain, and a CSV
   run's tables and pictures (:mod:`.record`).

A run of several members (``--ensemble``, ``--members``) is :mod:`siggate.train.ensemble`.
"""

from __future__ import annotations

import copy
import json
import logging
import time
from pathlib import Path

import torch

from ..config import Config, ConfigError, TrainConfig
from ..data.base import GraphDataset
from ..files import read_json
from .checkpoint import load_checkpoint
from .dataprep import prepare_data_ranked
from .distributed import DistContext
from .loop import Run, fit, read_resume, resume_run, setup_run
from .record import (
    RunFiles,
    data_source,
    final_metrics,
    record_results,
    resume_checkpoint,
    write_csv_run_tables,
    write_metrics,
)
from .runfiles import BEST, LAST, METRICS
from .scoring import split_probabilities, split_summary

log = logging.getLogger(__name__)


def train(cfg: Config, out_dir: str | Path, resume: bool = False, progress: bool = True,
          dataset: GraphDataset | None = None, dist: DistContext | None = None, stop_untrained: bool = True) -> dict:
    """Train ``cfg`` and write ``metrics.json``, ``best.pt``, ``last.pt``, ``config.yaml``,
    ``log.csv`` and TensorBoard events (``tb/``) under ``out_dir``. Returns the metrics dict.

    ``dataset`` is the prepared data (default: prepared from ``cfg.data``); ``resume``
    continues from ``out_dir/last.pt`` (:func:`~.record.resume_checkpoint`); ``dist`` is the process's place in a ``torchrun`` job
    (see :func:`siggate.train.distributed.init_distributed`); by default a single process on CPU.
    ``stop_untrained``: an epoch that ``train.on_nan=skip`` left wholly untrained stops the run
    (:func:`~.loop.fit`); the analyses that record divergence pass ``False``.
    """
    ctx = dist or DistContext()
    out = _start(Path(out_dir), cfg.train, ctx)
    ds = dataset if dataset is not None else prepare_data_ranked(cfg.data, cfg.model, cfg.train.seed, ctx, progress)
    source = ctx.broadcast(resume_checkpoint(out) if resume and ctx.is_main else out / LAST)  # (rank 0 reads)
    resumed = read_resume(source, ctx) if resume else None
    run = setup_run(cfg.model, cfg.train, ds, ctx, resumed=resumed)
    restored = resumed is not None and resume_run(run, source, cfg.to_dict(), resumed)
    del resumed  # the whole checkpoint (weights, optimizer state) is not kept through the training
    if restored:
        done = _finished_record(out, cfg.train.epochs, run.history)
        if done is not None:  # a finished run resumed: its record stays as it is
            if ctx.is_main:
                log.info("%s: the run has finished its %d epochs; nothing to train", out, cfg.train.epochs)
            return done
    seconds = _fit_recorded(run, out, cfg.to_dict(), data_source(cfg.data), progress, stop_untrained)
    metrics = final_metrics(run, seconds)
    if ctx.is_main and (out / BEST).is_file():
        preds = best_predictions(run, out / BEST, [s for s in ("val", "test") if run.ds.splits.get(s)])
        metrics.update({f"{split}_metrics": split_summary(run.info, run.ds.splits[split], p, split)
                        for split, p in preds.items()})
        metrics.update(record_results(out, run.ds, preds, None, {"gnn": run.history}, cfg.data.name == "csv"))
        if cfg.data.name == "csv":
            write_csv_run_tables(out, run.ds, preds.get("test"), data=cfg.data)
    if ctx.is_main:
        write_metrics(out, metrics)
    return metrics


def _finished_record(out: Path, epochs: int, history: list) -> dict | None:
    """The ``metrics.json`` of the run in ``out`` when it records this run finished: ``epochs``
    epochs, and the resumed ``history`` of its last checkpoint; else None (not finished, or
    stopped between its last checkpoint and its record)."""
    try:
        metrics = read_json(out / METRICS)
    except (OSError, ValueError):
        return None
    if (isinstance(metrics, dict) and metrics.get("epochs") == epochs == len(history)
            and json.dumps(metrics.get("history")) == json.dumps(history)):  # as text: a NaN equals a NaN
        return metrics
    return None


def _start(out: Path, t_cfg: TrainConfig, ctx: DistContext) -> Path:
    """Check the global batch against the world size, make the run folder (rank 0) and set
    ``train.threads``."""
    if t_cfg.batch_size % ctx.world_size:
        raise ConfigError(f"train.batch_size: {t_cfg.batch_size} is the global batch and must be a multiple "
                          f"of the world size {ctx.world_size} (each rank takes batch_size / world_size)")
    if ctx.is_main:
        out.mkdir(parents=True, exist_ok=True)
    if t_cfg.threads:
        torch.set_num_threads(t_cfg.threads)
    return out


def _fit_recorded(run: Run, out: Path, config: dict, source: dict | None, progress: bool,
                  stop_untrained: bool = True) -> float:
    """:func:`~.loop.fit` with the run record's checkpoint step (rank 0) as its epoch hook;
    returns the run's seconds (its resumed epochs' included)."""
    files = RunFiles(run, out, config, source, progress) if run.ctx.is_main else None
    t0 = time.time() - sum(h.get("seconds", 0.0) for h in run.history)
    try:
        fit(run, progress, on_epoch_end=files, checkpoint=out / LAST, stop_untrained=stop_untrained)
    finally:
        if files is not None:
            files.close()
    return time.time() - t0


def best_predictions(run: Run, best_path: Path, splits=("val", "test")) -> dict:
    """``{split: predictions}`` of the best epoch's weights (``best_path``) on ``splits``, in
    target units (probabilities for classification)."""
    model = copy.deepcopy(run.model)
    model.load_state_dict(load_checkpoint(best_path, finite=False)["model"])  # (a recorded diverged run's too)
    return split_probabilities(model, run.ds, splits, run.mean, run.std, run.train_cfg.eval_batch_size, run.device)
