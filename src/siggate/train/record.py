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

from ..config import DataConfig
from ..data.base import GraphDataset
from ..files import atomic_write_bytes, finite_or_none
from ..options import keeps_last
from ..version import __version__
from .checkpoint import FORMAT_VERSION, atomic_save, rng_state
from .loop import EpochEnd, Run
from .runfiles import BEST, CONFIG, LAST, METRICS
from .tblog import TBLogger

log = logging.getLogger("siggate.train")


def init_record(report: dict) -> dict:
    """What a run records of the weights ``train.init`` started it from (``metrics.json``'s
    ``init``, the checkpoints'): :func:`~.init_weights.load_init`'s report without its lists."""
    return {**{k: report[k] for k in ("source", "path", "sha256", "copied")},
            **({"chirality": report["chirality"]} if report.get("chirality") else {})}  # (where the weights say)


def checkpoint_dict(run: Run, config: dict, rng_ranks: list) -> dict:
    """The checkpoint of ``run`` after an epoch (``best.pt``, ``last.pt``): everything
    :func:`~.loop.resume_run` restores, ``config`` (the run's whole config, as the user gave it), the
    values resolved from the data and the task (which :func:`~.modelprep.load_trained` rebuilds
    the model from), and every rank's RNG states ``rng_ranks``."""
    return {
        "format": FORMAT_VERSION,
        "siggate_version": __version__,
        "config": config,
        "resolved": dict(run.resolved),  # values resolved from the data (resolve_pool_norm)
        "info": run.info.to_dict(),
        "model": run.model.state_dict(),
        "optimizer": run.optimizer.state_dict(),
        "scheduler": run.scheduler.state_dict(),
        "rng": rng_state(),
        "rng_ranks": rng_ranks,  # every rank's generators (CPU, and CUDA on GPU)
        "world_size": len(rng_ranks),
        "target_mean": run.mean.cpu(),
        "target_std": run.std.cpu(),
        "state": dict(run.state.__dict__),
        "history": run.history,
        "params": run.params,
        **({"init": init_record(run.init)} if run.init else {}),  # what a resume keeps (setup_run)
    }


def git_commit() -> str | None:
    """The git commit of the siggate source tree, or None outside a checkout of siggate: an
    installed siggate inside another git repository (a project's ``.venv``) is not that project's
    commit."""
    package = Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(["git", "rev-parse", "--show-toplevel", "HEAD"], cwd=package, capture_output=True,
                             text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = out.stdout.split("\n")
    if out.returncode != 0 or len(lines) < 2 or not lines[1].strip():
        return None
    top = Path(lines[0])
    try:
        ours = (top / "src" / "siggate").resolve() == package and 'name = "siggate"' in (top / "pyproject.toml").read_text()
    except OSError:
        ours = False
    return lines[1].strip() if ours else None


def data_source(data: DataConfig) -> dict | None:
    """Where a CSV run's data came from, ``{"csv": absolute path, "sha256": the file's hash,
    "reading": how siggate read it}`` (:data:`~siggate.data.csvdata.CSV_VERSION`),
    stored in its checkpoints so that ``siggate evaluate`` finds the file from any directory and
    notices an edit (:func:`siggate.train.evaluate.stored_csv`); ``None`` for a named dataset
    (or a dataset handed to :func:`~siggate.train.pipeline.train` whose config names no existing file)."""
    if data.name != "csv" or not data.csv or not Path(data.csv).is_file():
        return None
    from ..data.cache import fingerprint_file
    from ..data.csvdata import CSV_VERSION

    path = Path(data.csv).resolve()
    return {"csv": str(path), "sha256": fingerprint_file(path), "reading": CSV_VERSION}


def write_config(path: str | Path, config: dict, **meta) -> None:
    """A run's config (``config``, the whole config as a dict) as YAML at ``path``, with ``_meta``:
    the siggate version, the git commit and ``meta`` (what ``--resume`` and the readers of the
    run need beyond the config). Atomic.

    A record already at ``path`` (a resumed run's) keeps the commit and the siggate version that
    started the run as ``git_commit`` (what :func:`~siggate.train.rundir.run_commit` reads) and
    ``siggate_version``; each later commit or version that went on with it, in the order they did,
    is listed in ``resumed_at`` and ``resumed_versions`` (a resume at another checkout relabelled
    the whole run; A, B, then A again lists B, A)."""
    old = _recorded_meta(Path(path))
    commits = _went_on(old, "git_commit", "resumed_at", git_commit())
    versions = _went_on(old, "siggate_version", "resumed_versions", __version__)
    history = {**({"resumed_at": commits[1:]} if len(commits) > 1 else {}),
               **({"resumed_versions": versions[1:]} if len(versions) > 1 else {})}
    doc = {**config, "_meta": {"siggate_version": versions[0] if versions else __version__,
                               "git_commit": commits[0] if commits else None, **history, **meta}}
    atomic_write_bytes(Path(path), yaml.safe_dump(doc, sort_keys=False).encode("utf-8"))


def _recorded_meta(path: Path) -> dict:
    """The ``_meta`` of the record at ``path``; empty for a missing or unreadable record (a new run's)."""
    from .rundir import read_record

    try:
        meta = read_record(path).get("_meta")
    except (OSError, ValueError):  # no record yet, or one siggate does not read (ConfigError)
        return {}
    return meta if isinstance(meta, dict) else {}


def _went_on(meta: dict, first: str, later: str, now: str | None) -> list:
    """The values ``meta`` records under ``first`` then ``later`` (a list), with ``now`` appended
    when it is not the last of them (the same checkout resuming again adds nothing)."""
    rest = meta.get(later)
    values = [v for v in [meta.get(first), *(rest if isinstance(rest, list) else [])] if v]
    if now and (not values or values[-1] != now):
        values.append(now)
    return values


def resume_checkpoint(out: Path) -> Path:
    """The checkpoint a resume of the run in ``out`` continues from: ``last.pt``, or ``best.pt``
    where the run stopped between the two writes of an epoch that improved (:class:`RunFiles`
    writes ``best.pt`` first, and both hold the whole training state). That ``best.pt`` is then the
    newer state: resuming from ``last.pt`` would train its epoch again and, where the epoch came
    out otherwise (GPU kernels are not deterministic), leave a ``best.pt`` of an epoch that the
    run's history does not hold. The epochs they hold decide (not the files' times, which a copy
    changes); a training job reads it on rank 0 and hands it to the others."""
    best, last = out / BEST, out / LAST
    if not (best.is_file() and last.is_file()):  # no best.pt, or no last.pt yet (stopped in the first epoch)
        return last
    from .checkpoint import CheckpointError, trained_epochs

    try:
        newer = trained_epochs(best) > trained_epochs(last)
    except CheckpointError:  # a damaged file: last.pt's own reading names it
        return last
    if newer:
        log.warning("%s: the run stopped after writing %s and before %s; resuming from %s, its newer epoch",
                    out, BEST, LAST, BEST)
    return best if newer else last


class RunFiles:
    """Checkpoint step and logs of a run (rank 0): ``config.yaml`` (``config``, the run's whole
    config as a dict, with ``_meta``), ``log.csv``, TensorBoard events, ``best.pt`` and
    ``last.pt`` after every epoch; the checkpoints also record ``source`` (:func:`data_source`)."""

    def __init__(self, run: Run, out: Path, config: dict, source: dict | None, progress: bool) -> None:
        write_config(out / CONFIG, config, task=run.info.to_dict(), resolved=dict(run.resolved), source=source)
        self.out, self.config, self.source, self.progress = out, config, source, progress
        self.writer = EpochLog(out / "log.csv", run.history)
        self.tb = TBLogger(out / "tb", purge_step=run.state.epoch + 1 if run.state.epoch else None)

    def __call__(self, run: Run, end: EpochEnd) -> None:
        """Write the epoch: log row, checkpoints, TensorBoard, one line on the console (``*``: the
        best validation score so far, kept as ``best.pt``; none where the run keeps its last epoch,
        which starred every epoch)."""
        row, info = end.row, run.info
        self.writer.write(row)
        ckpt = checkpoint_dict(run, self.config, end.rng_ranks)
        ckpt["data_source"] = self.source
        if end.improved:  # best.pt first: a stop between the two is resumed from it (resume_checkpoint)
            atomic_save(ckpt, self.out / BEST)
        atomic_save(ckpt, self.out / LAST)
        self.tb.log_epoch(row, info.metric)
        test = "" if row["test"] is None else f"test {info.metric} {row['test']:.4f}  "
        msg = (f"epoch {row['epoch']:4d}/{run.train_cfg.epochs}  loss {row['train_loss']:.4f}  "
               f"val {info.metric} {row['val']:.4f}  {test}lr {row['lr']:.2e}  "
               f"{row['seconds']:.1f}s{'  *' if end.improved and not keeps_last(run.train_cfg.select) else ''}")
        tqdm.write(msg) if self.progress else log.info(msg)

    def close(self) -> None:
        """Flush and close the TensorBoard writer."""
        self.tb.close()


class EpochLog:
    """One CSV row per epoch (``log.csv``), rewritten from history on resume; ``seconds`` is the
    epoch's wall time (training and evaluation), ``cpu_seconds`` the process's CPU time in it,
    ``eval_norm`` the BatchNorm statistics its scores used (:func:`~.bn_stats.epoch_norm`); the last
    two are empty in rows of runs recorded before they were added."""

    FIELDS = ["epoch", "train_loss", "val", "test", "lr", "grad_norm", "seconds", "cpu_seconds", "eval_norm"]

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
        "world_size": run.ctx.world_size,  # the last stretch's; each epoch's in its history row
        "splits": run.ds.sizes(),
        **({"split_nodes": run.ds.node_counts()} if run.info.level == "node" else {}),
        **({"init": init_record(run.init)} if run.init else {}),
        **({"dataset_stats": run.ds.stats} if run.ds.stats else {}),
        "history": run.history,
    }


def write_metrics(out: Path, metrics: dict) -> Path:
    """``out/metrics.json``, atomically: ``siggate compare`` and the studies reuse a run that holds it."""
    path = Path(out) / METRICS
    atomic_write_bytes(path, json.dumps(metrics, indent=2).encode())
    return path


def write_csv_run_tables(out: Path, ds: GraphDataset, test_pred: torch.Tensor | None,
                         test_std: torch.Tensor | None = None, data: DataConfig | None = None) -> None:
    """A CSV run's row-level files in ``out``: ``test_predictions.csv`` (the test molecules'
    rows, SMILES, labels and ``test_pred`` ``[G, T]``, and an ensemble's ``test_std``; none for
    a run without a test split, ``test_pred`` None), ``splits.csv`` and ``data_report.csv``
    (:func:`siggate.data.csvdata.write_run_tables`; every run, so that ``evaluate`` knows the
    molecules it fitted); with the run's data config ``data`` they carry the input's other
    columns (IDs)."""
    from ..data.csvdata import carried_columns, write_run_tables
    from .rundir import TEST_PREDICTIONS, write_test_predictions

    carried = carried_columns(ds, data.sep, data.smiles_col, data.split) if data is not None else None
    test = ds.test
    if test_pred is not None:
        labels = torch.cat([g.y.reshape(1, -1) for g in test]).tolist() if test else []
        write_test_predictions(out / TEST_PREDICTIONS, [int(g.idx) for g in test], [str(g.smiles) for g in test],
                               list(ds.info.target_names), labels, test_pred.tolist(),
                               None if test_std is None else test_std.tolist(), carried=carried)
    write_run_tables(ds, out, carried=carried)


def write_calibration(out: Path, ds: GraphDataset, preds: dict, spreads: dict | None = None,
                      warn: bool = True, similarity: dict | None = None) -> dict | None:
    """Calibrate the predictions ``preds`` (``{split: [G, T]}``, target units or probabilities;
    ``spreads``: an ensemble's ``{split: [G, T]}``) on the validation split
    (:class:`~siggate.predictors.conformal.Calibration`) and write ``out/calibration.json``: the
    validation scores ``siggate predict --coverage`` reads, and ``summary``, the nominal and
    empirical coverage on val and test at :data:`~siggate.predictors.conformal.RECORDED_COVERAGES`
    with the intervals' mean width (or the sets' mean size). ``similarity``: ``{split: [G]}``, the
    molecules' nearest-training similarities (:func:`fit_domain`), by which a regression's
    intervals are scaled (``scale`` ``similarity``; without them, by the spread). Returns ``summary``
    (for ``metrics.json``), or ``None`` for a run that is not calibrated (node level, multiclass)."""
    from ..predictors.conformal import (
        CALIBRATED_TASKS,
        RECORDED_COVERAGES,
        Calibration,
        below_nominal,
        below_nominal_text,
        fewest_for,
        unbounded_text,
    )
    from .rundir import CALIBRATION
    from .scoring import scored_rows

    info, spreads = ds.info, spreads or {}
    if info.level != "graph" or info.task not in CALIBRATED_TASKS or not ds.val:
        return None
    names = list(info.target_names or [f"target{t}" for t in range(info.num_tasks)])
    rows = {s: scored_rows(info, ds.splits[s], preds[s], s) for s in ("val", "test") if s in preds and ds.splits.get(s)}
    spread = {s: None if spreads.get(s) is None else spreads[s].numpy() for s in rows}
    similarity = similarity or {}
    cal = Calibration.fit(info.task, names, *rows["val"], spread["val"], similarity.get("val"))
    scale = {s: cal.row_scale(spread[s], similarity.get(s)) for s in rows}
    summary = {"method": "split conformal on the validation split", "scale": cal.scale,
               "calibration_molecules": {n: c.n for n, c in cal.targets.items()},
               "coverage": {f"{c:g}": {s: cal.covered(*rows[s], scale[s], c) for s in rows} for c in RECORDED_COVERAGES}}
    summary = finite_or_none(summary)
    summary["test_below_nominal"] = below_nominal(summary["coverage"], {n: c.n for n, c in cal.targets.items()})
    split_hint = ("--split random calibrates on molecules drawn like the others" if info.name == "csv" else
                  "the benchmark's split is its own, so read its intervals with that in mind")
    lowest = min(RECORDED_COVERAGES)
    for name, n in cal.too_few(lowest).items() if warn else ():  # (predict --coverage said so only when asked)
        log.warning("target %r has %d labelled validation molecule(s), and coverage %g needs %d: at that coverage "
                    "and above its %s; give it more validation labels", name, n, lowest, fewest_for(lowest),
                    unbounded_text(info.task))
    for item in summary["test_below_nominal"] if warn else ():
        log.warning(below_nominal_text(item, info.task, "test molecules", "the recorded coverages and targets")
                    + ": the validation molecules they are calibrated on are not like the test ones (a scaffold split "
                    "holds out rarer scaffolds; a GNN's validation rows also chose its epoch), so intervals for new "
                    f"molecules may cover less than asked; {split_hint}")
    atomic_write_bytes(Path(out) / CALIBRATION, json.dumps({**cal.to_dict(), "summary": summary}, indent=2).encode())
    return summary


def fit_domain(ds: GraphDataset):
    """The applicability domain of ``ds``'s training molecules (:class:`~siggate.data.similarity.Domain`:
    their fingerprints, the threshold from the validation molecules), or ``None`` when the graphs
    carry no SMILES (node-level and benchmark sets without them)."""
    from ..data.similarity import Domain

    if ds.info.level != "graph" or not ds.train or not ds.val:
        return None
    if not all(isinstance(getattr(g, "smiles", None), str) for split in ("train", "val") for g in ds.splits[split]):
        return None
    return Domain.fit([g.smiles for g in ds.train], [g.smiles for g in ds.val])


def write_domain(out: Path, ds: GraphDataset, domain, test_similarity=None, warn: bool = True) -> dict | None:
    """``domain`` (:func:`fit_domain`) into ``out``, with the fraction of test molecules outside
    it (``test_similarity``: their nearest-training similarities). Returns its record (for
    ``metrics.json``), or ``None`` without a domain."""
    from ..data.similarity import DOMAIN_MIN_VAL, DOMAIN_PERCENTILE

    if domain is None:
        return None
    if len(ds.val) < DOMAIN_MIN_VAL and warn:
        log.warning(f"the applicability domain's threshold rests on {len(ds.val)} validation molecule(s) (its "
                    f"{DOMAIN_PERCENTILE:g}th percentile needs {DOMAIN_MIN_VAL} or more to lie between two of them): "
                    "'outside_domain' is rough; a larger validation split steadies it")
    if test_similarity is not None and len(test_similarity):
        domain.record["test_outside"] = float(1.0 - domain.inside(test_similarity).mean())
    domain.save(out)
    return domain.to_dict()


def write_pictures(out: Path, ds: GraphDataset, test_pred: torch.Tensor, test_spread: torch.Tensor | None = None,
                   histories: dict | None = None) -> list[Path]:
    """A CSV run's pictures (:func:`siggate.train.plots.write_run_plots`): the test parity plot
    (cliff compounds marked when the CSV has a cliff column), the learning curves of
    ``histories`` (``{member name: history}``) and, with a spread, the residuals against it."""
    from .plots import cliff_marks, write_run_plots
    from .scoring import scored_rows

    if ds.info.level != "graph" or not ds.test:
        return []
    y, p = scored_rows(ds.info, ds.test, test_pred, "test")
    names = list(ds.info.target_names or [f"target{t}" for t in range(ds.info.num_tasks)])
    cliff = cliff_marks(ds.source, [int(g.idx) for g in ds.test])
    return write_run_plots(out, names, ds.info.metric, y, p, None if test_spread is None else test_spread.numpy(),
                           histories, cliff, task=ds.info.task)


def record_results(out: Path, ds: GraphDataset, preds: dict, spreads: dict | None, histories: dict | None,
                   pictures: bool) -> dict:
    """What a finished run records beside its metrics: :func:`write_calibration`,
    :func:`write_domain` and, with ``pictures`` (CSV runs), :func:`write_pictures`. Returns the
    ``metrics.json`` entries ``calibration`` and ``domain`` (those that apply)."""
    from .rundir import is_members_folder

    spreads = spreads or {}
    # a member of a combination records its own, but the combination's record says it to the user (once)
    warn = not is_members_folder(Path(out).parent)
    domain = fit_domain(ds)
    similarity = {} if domain is None else {"val": domain.val_nearest}
    if domain is not None and ds.test:
        similarity["test"] = domain.graph_similarity(ds.test)
    entries = {"calibration": write_calibration(out, ds, preds, spreads, warn=warn, similarity=similarity),
               "domain": write_domain(out, ds, domain, similarity.get("test"), warn=warn)}
    if pictures and "test" in preds:
        write_pictures(out, ds, preds["test"], spreads.get("test"), histories)
    return {k: v for k, v in entries.items() if v is not None}
