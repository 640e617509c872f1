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

A run's record is its folder (``config.yaml``, ``last.pt``, ``metrics.json``), or, for the
benchmark harnesses (``benchmarks/peers/run.py``, ``benchmarks/moleculeace/run.py``), a row of
a results file (:class:`RowStore`): the one format of their results, one row per run with its
key, its ``status`` and its metrics, written under a lock so several processes can share one
file. :func:`plan` and :func:`execute` take the store; :func:`reuse_status` judges a row by the
same rule as a folder.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from ..files import atomic_write_bytes, read_json
from .checkpoint import config_differences
from .executor import read_metrics
from .rundir import (
    READ_OTHERWISE,
    changed_since,
    reading_changed,
    recorded_chirality,
    recorded_sha256,
    recorded_source,
    records_epochs,
    saved_config_and_resolved,
)
from .runfiles import CONFIG, LAST

#: a run's states: to train from scratch, to resume from its ``last.pt``, finished (its
#: ``metrics.json`` is there), its folder holds another config, or its training failed
STATES = ("new", "resume", "done", "conflict", "failed")
#: the end of a conflict's reason when the run's CSV changed since it trained (same config)
DATA_CHANGED = ": its scores are of the file as it was then"


def saved_run_config(run_dir: str | Path) -> tuple[dict, dict] | None:
    """A run folder's ``config.yaml``: ``(config as the user gave it, values resolved from
    the data)`` (see :func:`siggate.config.split_resolved`), or ``None`` without one."""
    path = Path(run_dir) / CONFIG
    if not path.exists():
        return None
    return saved_config_and_resolved(path)


@dataclass
class RunStatus:
    """What a run folder (or a results row) holds for a config (:func:`reuse_status`)."""

    state: str  # new | resume | done | conflict
    reason: str = ""  # conflict: the config values that differ
    metrics: dict | None = None  # done: its metrics.json (or its row)


class ResultsFileError(ValueError):
    """A results file that is not one (:meth:`RowStore.load`); the message names it and the fix."""


class RowStore:
    """A harness's results file: a JSON object whose list ``rows_field`` holds one row per run
    (a dict with the run's key fields, ``"status": "ok"`` or ``"failed"`` with ``error``, its
    metrics and where it came from), beside whatever the harness keeps next to it (the tasks it
    built, its summary). Every write re-reads the file under ``PATH.lock`` and replaces it
    atomically, so several processes (and older versions of a harness, which take the same
    lock) can add rows to one file.

    Args:
        path: the JSON file (created on the first write).
        key: a row's key, e.g. ``lambda r: (r["tool"], r["target"], int(r["seed"]))``.
        rows_field: the name of the list of rows (``"rows"``; the peers' file says ``"runs"``).
        identity: row fields a run must share with a finished row of its key to reuse it
            (what the run means beyond its key, e.g. a recipe's arguments); see
            :func:`reuse_status`.
        order: sort key of the rows as written (default: as they came).
    """

    def __init__(self, path: str | Path, key: Callable[[dict], tuple], rows_field: str = "rows",
                 identity: tuple[str, ...] = (), order: Callable[[dict], object] | None = None) -> None:
        self.path, self.key, self.rows_field = Path(path), key, rows_field
        self.identity, self.order = tuple(identity), order

    def load(self) -> dict:
        """The file's content (``{"schema": 1, rows_field: []}`` when there is none yet).

        Raises:
            ResultsFileError: the file is not a results file (not JSON, not an object, its rows
                not a list), in words that name it and the fix.
        """
        if not self.path.is_file():
            return {"schema": 1, self.rows_field: []}
        try:
            res = read_json(self.path)
        except (ValueError, OSError) as e:  # UnicodeDecodeError is a ValueError
            raise ResultsFileError(f"{self.path} cannot be read as a results file ({e}); restore it (git checkout "
                             f"{self.path.name}) or name another file") from None
        # an existing file without the rows field is another harness's (a peers file holds "runs"), not an empty one
        if not isinstance(res, dict) or not isinstance(res.get(self.rows_field), list):
            raise ResultsFileError(f"{self.path} is not a results file (a JSON object with a list of {self.rows_field!r}); "
                             "restore it or name another file")
        return res

    def rows(self) -> list[dict]:
        return self.load()[self.rows_field]

    def row(self, key: tuple) -> dict | None:
        """The row of ``key`` as the file holds it now, or ``None``."""
        return next((r for r in self.rows() if self.key(r) == key), None)

    def _lock(self):
        from filelock import FileLock

        self.path.parent.mkdir(parents=True, exist_ok=True)
        return FileLock(str(self.path) + ".lock")

    def update(self, change: Callable[[dict], object]) -> dict:
        """Apply ``change`` to the file's content under the lock and write it back; the new content.
        A ``change`` that returns ``False`` (it changed nothing) leaves the file untouched."""
        with self._lock():
            res = self.load()
            if change(res) is False:
                return res
            atomic_write_bytes(self.path, (json.dumps(res, indent=1) + "\n").encode())
        return res

    def put(self, row: dict) -> dict:
        """Add ``row``, replacing a failed row of its key; a finished (``ok``) row of its key is
        kept as it is: another process (two harnesses on one file) finished it meanwhile, and
        nothing finished is overwritten. Returns the row the file holds for the key now."""
        key, held = self.key(row), []

        def change(res: dict) -> bool | None:
            old = next((r for r in res[self.rows_field] if self.key(r) == key), None)
            if old is not None and old.get("status") == "ok":
                held.append(old)
                return False
            rows = [r for r in res[self.rows_field] if self.key(r) != key] + [row]
            res[self.rows_field] = sorted(rows, key=self.order) if self.order else rows
            return None

        self.update(change)
        return held[0] if held else row


def _row_differences(row: dict, config: dict, fields: tuple[str, ...]) -> list[str]:
    return [f"{f}: the results file has {row.get(f)!r}, this run has {config.get(f)!r}"
            for f in fields if row.get(f) != config.get(f)]


def reuse_status(run_dir: str | Path, config: dict, store: RowStore | None = None, key: tuple | None = None) -> RunStatus:
    """The one rule that decides whether a run can be reused for ``config``.

    A run folder (``run_dir``; ``config`` is a ``Config.to_dict()``, as the user gave it):

    - ``conflict``: its ``config.yaml`` holds another config (values that say where and how a
      run executes aside, :data:`~siggate.options.RUN_LOCAL_KEYS`), or was trained on a CSV whose
      content has changed since (:func:`~.rundir.changed_since`). Such a run is never mixed in
      and never overwritten; ``reason`` names the values that differ.
    - ``done``: its ``metrics.json`` is there (``siggate train`` writes it last, atomically) and
      records the config's epochs: it is reused as it is, never trained again.
    - ``resume``: its ``last.pt`` is there: training continues from it, exactly.
    - ``new``: otherwise.

    A run recorded in a results file (``store`` and the run's ``key``; ``config`` holds the
    values of the store's ``identity`` fields), by the same rule on its row:

    - ``conflict``: the row is ``ok`` but holds other identity values (a recipe name run
      before with other arguments): never mixed in, never overwritten.
    - ``done``: the row is ``ok``; ``metrics`` is the row.
    - ``new``: no row, or a failed one (tried again). A harness run always starts afresh, so
      that its recorded CPU time is the whole run's: there is no ``resume``.
    """
    if store is not None:
        row = store.row(key)
        if row is None or row.get("status") != "ok":
            return RunStatus("new")
        diffs = _row_differences(row, config, store.identity)
        return RunStatus("conflict", "; ".join(diffs)) if diffs else RunStatus("done", metrics=row)
    run_dir = Path(run_dir)
    saved = saved_run_config(run_dir)
    if saved is not None:
        # a CSV moved or copied since, of the content the run recorded, is the run's file (as --resume takes it)
        diffs = config_differences(saved[0], config, csv_sha256=recorded_sha256(run_dir / CONFIG))
        if not diffs:  # the same config, a CSV of another content since: its scores are of other data
            changed = changed_since(run_dir / CONFIG, config.get("data") or {}, DATA_CHANGED)
            if not changed:  # the same file, read otherwise by this siggate: other rows, other splits
                changed = reading_changed(recorded_source(run_dir / CONFIG), config.get("data") or {},
                                          recorded_chirality(run_dir / CONFIG))
                changed = changed and changed + READ_OTHERWISE
            diffs = [changed] if changed else []
        if diffs:
            return RunStatus("conflict", "; ".join(diffs))
    metrics = read_metrics(run_dir)
    if metrics is not None and records_epochs(metrics, (config.get("train") or {}).get("epochs")):
        return RunStatus("done", metrics=metrics)
    return RunStatus("resume" if (run_dir / LAST).exists() else "new")


@dataclass
class StudyRun:
    """One run of a study: ``key`` (unique in the study), its folder, the config it must hold
    (``Config.to_dict()``; for a run recorded in a :class:`RowStore`, the values of the store's
    identity fields), the executor request that trains it and the caller's ``tag``
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


def plan(runs: Iterable[StudyRun], store: RowStore | None = None) -> list[StudyRun]:
    """Give every run its state by :func:`reuse_status` (from its folder, or from its row in
    ``store``); a ``conflict`` gets an ``error`` naming where, the values that differ and the
    fix. Returns the runs."""
    runs = list(runs)
    for r in runs:
        status = reuse_status(r.run_dir, r.config, store, r.key)
        r.state, r.metrics = status.state, status.metrics
        if status.state == "conflict" and store is None:
            what = ("a run of other data" if status.reason.endswith((DATA_CHANGED, READ_OTHERWISE))
                    else "a run of another config")
            r.error = f"{r.run_dir} holds {what} ({status.reason}); delete it or choose another --out"
        elif status.state == "conflict":
            r.error = (f"{store.path} holds a finished run {r.key} of another kind ({status.reason}); "
                       "give this one another name, or delete that row")
    return runs


def execute(runs: list[StudyRun], executor, desc: str = "runs", progress: bool = True,
            on_result: Callable[[StudyRun], None] | None = None, store: RowStore | None = None) -> None:
    """Train the runs in state ``new`` or ``resume`` on ``executor`` (anything with
    ``run(requests, on_done)``, :mod:`siggate.train.executor`); each becomes ``done`` with its
    metrics or ``failed`` with the reason, and is handed to ``on_result`` as it finishes.

    With a ``store``, a run's result is its row (an ``ok`` or a ``failed`` one, returned by the
    request's function): it is added to the store as soon as the run finishes, and the run's
    state follows the row's ``status``."""
    from tqdm.auto import tqdm

    todo = {r.key: r for r in runs if r.state in ("new", "resume")}
    bar = tqdm(total=len(runs), initial=len(runs) - len(todo), desc=desc, unit="run", disable=not progress)

    def done(result) -> None:
        r = todo[result.key]
        r.returncode = result.returncode
        row = result.metrics if store is not None and result.ok else None
        if row is not None and (kept := store.put(row)) is not row:  # finished by another process meanwhile
            diffs = _row_differences(kept, row, store.identity)
            row = kept if not diffs else {"status": "failed", "error": (
                f"{store.path} holds a finished run {r.key} of another kind, recorded meanwhile by another "
                f"process ({'; '.join(diffs)}); it is kept, this run's result is not")}
        if row is not None and row.get("status") != "ok":
            r.state, r.error = "failed", row.get("error", "failed")
        elif result.ok:
            r.state, r.metrics = "done", (row if row is not None else result.metrics)
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
