"""The run record: what a training run leaves in its folder. ``config.yaml`` before the first
epoch, ``log.csv``, TensorBoard events, ``best.pt`` and ``last.pt`` after every epoch
(:class:`RunFiles`), ``metrics.json`` at the end (:func:`final_metrics`), and a CSV run's
row-level tables (:func:`write_csv_run_tables`).
"""

from __future__ import annotations

import csv
import json
import logging
import os
import subprocess
from pathlib import Path

import torch
import yaml
from tqdm.auto import tqdm

import siggate

from ..config import DataConfig
from ..data.base import GraphDataset
from ..files import atomic_write_bytes
from .checkpoint import atomic_save
from .loop import EpochEnd, Run, checkpoint_dict
from .tblog import TBLogger

log = logging.getLogger("siggate.train")

#: the checkpoints of a run folder: the best validation epoch's, and the last epoch's
BEST, LAST = "best.pt", "last.pt"
#: the record a finished run leaves last (atomically): ``siggate compare`` skips runs that hold it
METRICS = "metrics.json"


def git_commit() -> str | None:
    """The git commit of the siggate source tree, or None outside a checkout."""
    try:
        here = Path(__file__).resolve().parent
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def data_source(data: DataConfig) -> dict | None:
    """Where a CSV run's data came from, ``{"csv": absolute path, "sha256": the file's hash}``,
    stored in its checkpoints so that ``siggate evaluate`` finds the file from any directory and
    notices an edit (:func:`siggate.train.evaluate.stored_csv`); ``None`` for a named dataset
    (or a dataset handed to :func:`~siggate.train.pipeline.train` whose config names no existing file)."""
    if data.name != "csv" or not data.csv or not Path(data.csv).is_file():
        return None
    from ..data.cache import fingerprint_file

    path = Path(data.csv).resolve()
    return {"csv": str(path), "sha256": fingerprint_file(path)}


class RunFiles:
    """Checkpoint step and logs of a run (rank 0): ``config.yaml`` (``config``, the run's whole
    config as a dict, with ``_meta``), ``log.csv``, TensorBoard events, ``best.pt`` and
    ``last.pt`` after every epoch; the checkpoints also record ``source`` (:func:`data_source`)."""

    def __init__(self, run: Run, out: Path, config: dict, source: dict | None, progress: bool) -> None:
        (out / "config.yaml").write_text(yaml.safe_dump(
            {**config, "_meta": {"siggate_version": siggate.__version__, "git_commit": git_commit(),
                                 "task": run.info.to_dict(), "resolved": dict(run.resolved)}},
            sort_keys=False))
        self.out, self.config, self.source, self.progress = out, config, source, progress
        self.writer = EpochLog(out / "log.csv", run.history)
        self.tb = TBLogger(out / "tb", purge_step=run.state.epoch + 1 if run.state.epoch else None)

    def __call__(self, run: Run, end: EpochEnd) -> None:
        """Write the epoch: log row, checkpoints, TensorBoard, one line on the console."""
        row, info = end.row, run.info
        self.writer.write(row)
        ckpt = checkpoint_dict(run, self.config, end.rng_ranks)
        ckpt["data_source"] = self.source
        if end.improved:
            atomic_save(ckpt, self.out / BEST)
        atomic_save(ckpt, self.out / LAST)
        self.tb.log_epoch(row, info.metric)
        msg = (f"epoch {row['epoch']:4d}/{run.train_cfg.epochs}  loss {row['train_loss']:.4f}  "
               f"val {info.metric} {row['val']:.4f}  test {info.metric} {row['test']:.4f}  lr {row['lr']:.2e}  "
               f"{row['seconds']:.1f}s{'  *' if end.improved else ''}")
        tqdm.write(msg) if self.progress else log.info(msg)

    def close(self) -> None:
        """Flush and close the TensorBoard writer."""
        self.tb.close()


class EpochLog:
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


def final_metrics(run: Run, seconds: float) -> dict:
    """``metrics.json``: best epoch and scores, sizes, timing and the whole history."""
    m_cfg, t_cfg, state = run.model_cfg, run.train_cfg, run.state
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
        "epochs": t_cfg.epochs,
        "seed": t_cfg.seed,
        "attn": m_cfg.attn,
        "gate": m_cfg.gate if m_cfg.attn else None,  # no attention branch, no gate
        "resolved": dict(run.resolved),
        "skipped_batches": state.skipped_batches,
        "world_size": run.ctx.world_size,
        "splits": run.ds.sizes(),
        **({"split_nodes": run.ds.node_counts()} if run.info.level == "node" else {}),
        **({"init": {k: run.init[k] for k in ("source", "path", "sha256", "copied")}} if run.init else {}),
        **({"dataset_stats": run.ds.stats} if run.ds.stats else {}),
        "history": run.history,
    }


def write_metrics(out: Path, metrics: dict) -> Path:
    """``out/metrics.json``, atomically: ``siggate compare`` and the studies reuse a run that holds it."""
    path = Path(out) / METRICS
    atomic_write_bytes(path, json.dumps(metrics, indent=2).encode())
    return path


def write_csv_run_tables(out: Path, ds: GraphDataset, test_pred: torch.Tensor, test_std: torch.Tensor | None = None,
                         data: DataConfig | None = None) -> None:
    """A CSV run's row-level files in ``out``: ``test_predictions.csv`` (the test molecules'
    rows, SMILES, labels and ``test_pred`` ``[G, T]``, and an ensemble's ``test_std``),
    ``splits.csv`` and ``data_report.csv`` (:func:`siggate.data.csvdata.write_run_tables`);
    with the run's data config ``data`` both carry the input's other columns (IDs)."""
    from ..data.csvdata import carried_columns, write_run_tables
    from .rundir import TEST_PREDICTIONS, write_test_predictions

    carried = carried_columns(ds, data.sep, data.smiles_col, data.split) if data is not None else None
    test = ds.test
    labels = torch.cat([g.y.reshape(1, -1) for g in test]).tolist() if test else []
    write_test_predictions(out / TEST_PREDICTIONS, [int(g.idx) for g in test], [str(g.smiles) for g in test],
                           list(ds.info.target_names), labels, test_pred.tolist(),
                           None if test_std is None else test_std.tolist(), carried=carried)
    write_run_tables(ds, out, carried=carried)
