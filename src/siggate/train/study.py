"""A study: a set of training runs, planned, executed and aggregated one way.

Every sweep of siggate (``siggate compare``, the ``siggate analyze`` sweeps, and through
``siggate compare`` the campaigns of ``benchmarks/results/campaign/``) goes through three steps:

1. **Plan.** Each run is a :class:`StudyRun`: a key, its folder, the config it must hold and
   the request that trains it (a ``siggate train`` process, :class:`~.executor.RunRequest`,
   or a function call, :class:`~.executor.CallRequest`). :func:`plan` gives each run its
   state by the one rule that says whether a folder's run can be reused,
   :func:`reuse_status`.
2. **Execute.** :func:`execute` hands the runs still to train (``new``, ``resume``) to an
   executor (:mod:`siggate.train.executor`: local processes, Ray tasks, or calls in this
   process) and records what comes back.
3. **Aggregate.** The caller reads the finished runs (:func:`finished`) and computes its
   statistics (``compare``'s paired tests, an analysis's table).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import yaml

from ..config import split_resolved, upgrade_config_dict
from .checkpoint import config_differences
from .executor import read_metrics

#: a run's states: to train from scratch, to resume from its ``last.pt``, finished (its
#: ``metrics.json`` is there), its folder holds another config, or its training failed
STATES = ("new", "resume", "done", "conflict", "failed")


def saved_run_config(run_dir: str | Path) -> tuple[dict, dict] | None:
    """A run folder's ``config.yaml``: ``(config as the user gave it, values resolved from
    the data)`` (see :func:`siggate.config.split_resolved`), or ``None`` without one."""
    path = Path(run_dir) / "config.yaml"
    if not path.exists():
        return None
    saved = yaml.safe_load(path.read_text()) or {}
    meta = saved.pop("_meta", None) or {}
    return split_resolved(upgrade_config_dict(saved), meta.get("resolved"))


@dataclass
class RunStatus:
    """What a run folder holds for a config (:func:`reuse_status`)."""

    state: str  # new | resume | done | conflict
    reason: str = ""  # conflict: the config values that differ
    metrics: dict | None = None  # done: its metrics.json


def reuse_status(run_dir: str | Path, config: dict) -> RunStatus:
    """The one rule that decides whether the run in ``run_dir`` can be reused for ``config``
    (a ``Config.to_dict()``, as the user gave it):

    - ``conflict``: its ``config.yaml`` holds another config (values that say where and how a
      run executes aside, :data:`~.checkpoint.RUN_LOCAL_KEYS`). Such a run is never mixed in
      and never overwritten; ``reason`` names the values that differ.
    - ``done``: its ``metrics.json`` is there (``siggate train`` writes it last, atomically):
      it is reused as it is, never trained again.
    - ``resume``: its ``last.pt`` is there: training continues from it, exactly.
    - ``new``: otherwise.
    """
    run_dir = Path(run_dir)
    saved = saved_run_config(run_dir)
    if saved is not None:
        diffs = config_differences(saved[0], config)
        if diffs:
            return RunStatus("conflict", "; ".join(diffs))
    metrics = read_metrics(run_dir)
    if metrics is not None:
        return RunStatus("done", metrics=metrics)
    return RunStatus("resume" if (run_dir / "last.pt").exists() else "new")


@dataclass
class StudyRun:
    """One run of a study: ``key`` (unique in the study), its folder, the config it must hold
    (``Config.to_dict()``), the executor request that trains it and the caller's ``tag``
    (``compare``: the arm and the seed). :func:`plan` and :func:`execute` fill in the rest."""

    key: object
    run_dir: Path
    config: dict
    request: object  # executor.RunRequest | executor.CallRequest
    tag: object = None
    state: str = "new"  # one of STATES
    metrics: dict | None = None
    error: str = ""
    returncode: int | None = None


def plan(runs: Iterable[StudyRun]) -> list[StudyRun]:
    """Give every run its state by :func:`reuse_status`; a ``conflict`` gets an ``error``
    naming the folder, the values that differ and the fix. Returns the runs."""
    runs = list(runs)
    for r in runs:
        status = reuse_status(r.run_dir, r.config)
        r.state, r.metrics = status.state, status.metrics
        if status.state == "conflict":
            r.error = f"{r.run_dir} holds a run of another config ({status.reason}); delete it or choose another --out"
    return runs


def execute(runs: list[StudyRun], executor, desc: str = "runs", progress: bool = True,
            on_result: Callable[[StudyRun], None] | None = None) -> None:
    """Train the runs in state ``new`` or ``resume`` on ``executor`` (anything with
    ``run(requests, on_done)``, :mod:`siggate.train.executor`); each becomes ``done`` with its
    metrics or ``failed`` with the reason, and is handed to ``on_result`` as it finishes."""
    from tqdm.auto import tqdm

    todo = {r.key: r for r in runs if r.state in ("new", "resume")}
    bar = tqdm(total=len(runs), initial=len(runs) - len(todo), desc=desc, unit="run", disable=not progress)

    def done(result) -> None:
        r = todo[result.key]
        r.returncode = result.returncode
        if result.ok:
            r.state, r.metrics = "done", result.metrics
        else:
            r.state, r.error = "failed", result.error
        if on_result is not None:
            on_result(r)
        bar.update(1)

    try:
        executor.run([r.request for r in todo.values()], done)
    finally:
        bar.close()


def finished(runs: Iterable[StudyRun]) -> dict:
    """``{key: metrics}`` of the runs that are done."""
    return {r.key: r.metrics for r in runs if r.state == "done"}
