"""Where the training runs of a sweep execute: one interface, a local and a Ray back-end.

A sweep (``siggate compare``, the analysis sweeps) describes each training run as a
:class:`RunRequest`: the ``siggate train`` arguments and the run's folder. An executor runs
the requests and reports each :class:`RunResult` as it finishes. Every run is one
``python -m siggate train`` process, whichever the back-end, so a run computes the same
numbers on both. Whether a run resumes is decided when it starts, from the run files (``config.yaml``, ``last.pt``) in
its folder: a run that was interrupted (a killed worker, a stopped sweep) continues from its
last epoch, exactly (see :mod:`siggate.train.loop`).

- :class:`LocalExecutor`: ``jobs`` processes at a time on this machine (the default; needs
  nothing extra).
- :class:`RayExecutor`: each run is one Ray task with declared resources (CPUs, GPUs),
  retried up to ``max_retries`` times when its worker dies. It starts an embedded local Ray
  instance, or joins a cluster with ``address="auto"`` or ``"HOST:PORT"``. Run folders must
  be on a filesystem every node sees (a shared or synced path): a retried run may resume on
  another node. Install with ``pip install siggate[ray]``.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import threading
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from ..files import read_json
from .rundir import holds_run
from .runfiles import METRICS

BACKENDS = ("local", "ray")


class ExecutorError(RuntimeError):
    """An executor that cannot start (a missing extra, an unreachable cluster)."""


@dataclass
class RunRequest:
    """One training run: ``siggate train ARGV --out RUN_DIR`` with ``threads`` torch threads."""

    key: str
    argv: list[str]
    run_dir: Path
    threads: int = 1
    env: dict = field(default_factory=dict)


@dataclass
class CallRequest:
    """One run done by a function instead of a ``siggate train`` process: ``fn``
    (``"module:function"``, importable on every worker, or a script :func:`load_script`
    registered under ``module``) called with ``kwargs``. It must be
    safe to call again after an interruption (resume from ``run_dir``) and return a dict.
    Used by the analysis sweeps, whose runs train on an in-memory (e.g. truncated) dataset."""

    key: str
    fn: str
    kwargs: dict
    run_dir: Path


def load_script(name: str, path: str | Path, reuse: bool = False):
    """The module of the Python file at ``path`` that is not part of a package (a benchmark
    harness), executed and registered in ``sys.modules`` as ``name``, so that a
    :class:`CallRequest` naming ``"name:function"`` and the scripts that share it find it.
    ``reuse``: the module already registered as ``name`` when it was loaded from the same file
    (not executed again); otherwise the file is executed afresh and replaces it. A file that
    fails to execute leaves ``name``'s entry as it was (modules the file imported before failing
    stay imported)."""
    import importlib.util

    path = Path(path).resolve()
    have = sys.modules.get(name)
    if reuse and getattr(have, "__file__", None) and Path(have.__file__).resolve() == path:
        return have
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None or not path.is_file():
        raise ImportError(f"cannot load {path} as module {name!r}: no such Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        if have is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = have
        raise
    return module


@dataclass
class RunResult:
    """What came back from a run: its exit status, its ``metrics.json`` (``None`` if it wrote
    none) and, for a failed run, the reason with the end of its log."""

    key: str
    returncode: int | None
    metrics: dict | None
    error: str = ""
    attempts: int = 1

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and self.metrics is not None


def train_command(req: RunRequest, resume: bool) -> list[str]:
    """The ``python -m siggate train`` command line of a request, with ``--threads`` (its
    ``train.threads``: the environment's thread count alone was undone by a config's own
    ``train.threads``, the csv and nci5k recipes' 1) unless its ``--set`` gives ``train.threads``."""
    from ..config import override_key

    sets = [a for prev, a in zip(req.argv, req.argv[1:]) if prev == "--set"]  # compare checked each item
    threads = [] if any(override_key(s) == "train.threads" for s in sets) else ["--threads", str(req.threads)]
    cmd = [sys.executable, "-m", "siggate", "train", *req.argv, *threads, "--out", str(req.run_dir), "--no-progress"]
    return cmd + (["--resume"] if resume else [])


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """Linux: the training process gets SIGKILL when the process that started it dies, so a
    killed Ray worker leaves no orphan writing into the run folder."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _log_tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def read_metrics(run_dir: Path) -> dict | None:
    """A finished run's ``metrics.json``, or ``None``."""
    try:
        return read_json(Path(run_dir) / METRICS)
    except (OSError, ValueError):
        return None


def run_one(req: RunRequest, started: Callable[[subprocess.Popen], None] | None = None) -> RunResult:
    """Run one request to the end in a child process (its output appended to
    ``RUN_DIR/train.log``); resume when the folder holds a run (:func:`~siggate.train.rundir.holds_run`)."""
    run_dir = Path(req.run_dir)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "worker.pid").write_text(f"{os.getpid()}\n")
    except OSError as exc:  # this run fails, said; the other runs go on
        return RunResult(req.key, None, None, f"cannot make the run folder {run_dir}: {exc.strerror or exc}")
    # a folder with a config.yaml but no last.pt yet (stopped in its first epoch) is a run too:
    # siggate train refuses it without --resume, and --resume starts it at epoch 1
    cmd = train_command(req, resume=holds_run(run_dir))
    env = {**os.environ, **req.env, "OMP_NUM_THREADS": str(req.threads), "MKL_NUM_THREADS": str(req.threads)}
    env.setdefault("PYTHONUNBUFFERED", "1")
    log = run_dir / "train.log"
    with open(log, "a") as fh:
        fh.write(f"$ {shlex.join(cmd)}\n")
        fh.flush()
        preexec = _die_with_parent if sys.platform.startswith("linux") else None
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, preexec_fn=preexec)
        if started is not None:
            started(proc)
        rc = proc.wait()
    metrics = read_metrics(run_dir)
    if rc == 0 and metrics is not None:
        return RunResult(req.key, rc, metrics)
    return RunResult(req.key, rc, None, f"exit status {rc}; see {log}:\n" + _log_tail(log))


def failure_line(error: str | None) -> str:
    """A failed run's ``error`` in one line: its first (the exit status and the log, as
    :func:`run_one` writes it) and the run's own cause from the log's tail, its last line that
    names an error (``siggate train: error: non-finite loss ...``, a traceback's last line), else
    the tail's last line. (Failures read "exit status 2; see .../train.log:" and nothing more.)"""
    lines = [ln.strip() for ln in (error or "").splitlines() if ln.strip()]
    if not lines:
        return "failed"
    head, tail = lines[0].rstrip(":"), lines[1:]
    # this attempt's lines only: the log is appended to, each attempt after its "$ command" line, which is
    # never the cause (an --out with 'error' in its name was read as one; helper-188)
    starts = [i for i, ln in enumerate(tail) if ln.startswith("$ ")]
    tail = tail[starts[-1] + 1:] if starts else tail
    cause = next((ln for ln in reversed(tail) if "error" in ln.lower()), tail[-1] if tail else "")
    return f"{head}: {cause}" if cause else head


def run_call(req: CallRequest) -> RunResult:
    """Import and call a :class:`CallRequest`'s function; its dict is the result's ``metrics``."""
    import importlib

    module, _, name = req.fn.partition(":")
    Path(req.run_dir).mkdir(parents=True, exist_ok=True)
    (Path(req.run_dir) / "worker.pid").write_text(f"{os.getpid()}\n")
    return RunResult(req.key, 0, getattr(importlib.import_module(module), name)(**req.kwargs))


def _execute(req, started=None) -> RunResult:
    return run_call(req) if isinstance(req, CallRequest) else run_one(req, started)


class LocalExecutor:
    """Up to ``jobs`` runs at a time, each a child process of this one."""

    def __init__(self, jobs: int = 1) -> None:
        if jobs < 1:
            raise ExecutorError(f"--jobs must be >= 1, got {jobs}")
        self.jobs = jobs
        self._procs: set[subprocess.Popen] = set()
        self._lock = threading.Lock()

    def _started(self, proc: subprocess.Popen) -> None:
        with self._lock:
            self._procs.add(proc)

    def run(self, requests: Iterable[RunRequest], on_done: Callable[[RunResult], None]) -> None:
        """Run every request; call ``on_done`` in this thread as each one finishes. An
        interrupt stops the running children (they resume on the next call). Function
        requests run in threads of this process: give them ``jobs=1`` unless they are
        thread-safe (the analysis sweeps run them one at a time, as before)."""
        requests = list(requests)
        with ThreadPoolExecutor(max_workers=self.jobs) as pool:
            pending = {pool.submit(_execute, r, self._started) for r in requests}
            try:
                while pending:
                    done, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
                    for fut in done:
                        on_done(fut.result())
            except BaseException:
                for fut in pending:
                    fut.cancel()
                self.stop()
                raise

    def stop(self) -> None:
        with self._lock:
            procs = list(self._procs)
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()


class InlineExecutor:
    """Each request in this thread, one after another: function requests that use this
    process's memory (an analysis sweep's in-memory, possibly truncated, dataset). An
    interrupt stops the sweep at once; the run in progress resumes on the next call."""

    def run(self, requests: Iterable, on_done: Callable[[RunResult], None]) -> None:
        """Run every request in turn and call ``on_done`` with each result."""
        for req in requests:
            on_done(_execute(req))


def _ray_run(req) -> RunResult:
    return _execute(req)


def _stop_handlers() -> dict:
    """This process's handlers of the signals that stop a command (SIGTERM, SIGHUP, SIGINT), as
    Python holds them; empty outside the main thread (where no handler can be set)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    from ..files import stop_signals

    return {k: signal.getsignal(k) for k in stop_signals()}


def _restore_handlers(kept: dict) -> None:
    """Set the handlers :func:`_stop_handlers` kept again: ``ray.init`` installs its own
    failure handler for SIGTERM in C++, under Python's, which then dumps a stack trace and aborts
    (exit status 134), so a sweep on Ray stopped by ``kill`` said nothing of how to resume it,
    where siggate's own handler ends it as Ctrl-C does (exit status 143)."""
    for kind, handler in kept.items():
        if handler is not None:  # (None: a handler set outside Python, which cannot be put back)
            signal.signal(kind, handler)


def _relay(handler: Callable, raised: list) -> Callable:
    """``handler`` (a Python signal handler) that also keeps what it raised in ``raised``."""

    def on_signal(signum, frame):
        try:
            return handler(signum, frame)
        except BaseException as exc:
            raised.append(exc)
            raise

    return on_signal


def ray_failure(exc: BaseException, task_error: type) -> str:
    """The error line of a Ray task that failed with ``exc``: the run's own exception (its type
    and message) where the task raised one (``task_error``: Ray's ``RayTaskError``, whose text
    begins with the task's name, pid and address in terminal colours, and names no cause), else
    why Ray gave up on it."""
    cause = getattr(exc, "cause", None) if isinstance(exc, task_error) else None
    if isinstance(cause, BaseException):
        said = " ".join(ln.strip() for ln in str(cause).splitlines() if ln.strip())
        return f"Ray task failed (the run raised an error): {type(cause).__name__}" + (f": {said}" if said else "")
    why = "the run raised an error" if isinstance(exc, task_error) else \
        "its worker died more often than --max-retries allows"
    first = next((ln.strip() for ln in re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).splitlines() if ln.strip()), "")
    return f"Ray task failed ({why}): {type(exc).__name__}" + (f": {first}" if first else "")


class RayExecutor:
    """Each run is one Ray task with ``num_cpus=cpus_per_run`` and ``num_gpus=gpus_per_run``,
    retried up to ``max_retries`` times if its worker dies (it then resumes from its last
    checkpoint). ``address=None`` starts an embedded local instance; ``"auto"`` or
    ``"HOST:PORT"`` joins a running cluster. The dashboard is off unless ``dashboard``."""

    def __init__(self, address: str | None = None, cpus_per_run: float = 1, gpus_per_run: float | None = None,
                 max_retries: int = 3, dashboard: bool = False) -> None:
        try:
            import ray
        except ImportError:
            raise ExecutorError("--backend ray needs Ray, an optional extra: pip install 'siggate[ray]'") from None
        self.ray = ray
        check_resources(cpus_per_run, gpus_per_run, max_retries)
        check_address(address)
        self.address, self.cpus, self.gpus_requested = address, cpus_per_run, gpus_per_run
        self.max_retries, self.dashboard = max_retries, dashboard
        self._owns = False

    def _start(self) -> None:
        ray = self.ray
        if ray.is_initialized():
            return
        # the workers must import the same siggate as this process (a source checkout too)
        here = str(Path(__file__).resolve().parents[2])
        env = {"PYTHONPATH": os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH", "")) if p)}
        kept = _stop_handlers()
        try:
            ray.init(address=self.address, include_dashboard=self.dashboard, log_to_driver=False,
                     runtime_env={"env_vars": env}, configure_logging=False)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            where = self.address or "a local instance"
            raise ExecutorError(f"cannot start Ray ({where}): {exc}") from None
        finally:
            _restore_handlers(kept)
        self._owns = True

    def gpus_per_run(self) -> float:
        """``gpus_per_run`` as given, else 1 when the cluster has GPUs, else 0."""
        if self.gpus_requested is not None:
            return self.gpus_requested
        return 1.0 if self.ray.cluster_resources().get("GPU", 0) > 0 else 0.0

    def _unschedulable(self, gpus: float) -> str:
        """Why no node of the Ray instance can hold one run (a task's CPUs and GPUs must fit on one
        node: Ray keeps a task that fits none waiting, without a word, for ever), or ``""``."""
        alive = [n.get("Resources") or {} for n in self.ray.nodes() if n.get("Alive", True)]
        for flag, key, want in (("--cpus-per-run", "CPU", self.cpus), ("--gpus-per-run", "GPU", gpus)):
            most = max((float(r.get(key, 0)) for r in alive), default=0.0)
            if want > 0 and not any(float(r.get(key, 0)) >= want for r in alive):
                return (f"{flag} {want:g}: no node of the Ray instance has {want:g} {key}(s) (the most on one node: "
                        f"{most:g}), so no run could start and the command would wait for ever; lower {flag}"
                        + (" (0: the runs train on CPU)" if key == "GPU" else ""))
        if gpus > 0 and not any(float(r.get("CPU", 0)) >= self.cpus and float(r.get("GPU", 0)) >= gpus for r in alive):
            return (f"--cpus-per-run {self.cpus:g} --gpus-per-run {gpus:g}: no node of the Ray instance has both (the "
                    "nodes with the CPUs have too few GPUs, and those with the GPUs too few CPUs), so no run could "
                    "start and the command would wait for ever; lower --cpus-per-run or --gpus-per-run")
        return ""

    def run(self, requests: Iterable[RunRequest], on_done: Callable[[RunResult], None]) -> None:
        """Submit every request as a task; call ``on_done`` on the driver as each finishes.
        A task that still fails after its retries becomes a failed :class:`RunResult`. With no
        request (every run finished) Ray is not started."""
        requests = list(requests)
        if not requests:  # (nor is a run no node could hold refused: there is none to hold)
            return
        self._start()
        ray = self.ray
        gpus = self.gpus_per_run()
        short = self._unschedulable(gpus)
        if short and self._owns and self.address is None:  # the instance siggate started here: no node will come
            if self._owns:
                ray.shutdown()
                self._owns = False
            raise ExecutorError(short)
        if short:  # a cluster's autoscaler may yet add such a node
            print(f"siggate: warning: {short} (unless the cluster adds such a node)", file=sys.stderr)
        task = ray.remote(_ray_run).options(num_cpus=self.cpus, num_gpus=gpus,
                                             max_retries=self.max_retries, retry_exceptions=False)
        refs = {task.remote(r): r for r in requests}
        kept, raised = _stop_handlers(), []
        for kind, handler in kept.items():
            if callable(handler):
                signal.signal(kind, _relay(handler, raised))
        try:
            while refs:
                done, _ = ray.wait(list(refs), num_returns=1)
                for ref in done:
                    req = refs.pop(ref)
                    try:
                        on_done(ray.get(ref))
                    except ray.exceptions.RayError as exc:
                        on_done(RunResult(req.key, None, None, ray_failure(exc, ray.exceptions.RayTaskError)))
        except BaseException as exc:
            for ref in refs:
                ray.cancel(ref, force=True)
            if isinstance(exc, KeyboardInterrupt) and raised and exc is not raised[-1]:
                # Ray's wait turns whatever a signal handler raised into a bare KeyboardInterrupt:
                # SIGTERM then read as Ctrl-C ("interrupted", exit status 130, not 143)
                raise raised[-1] from None
            raise
        finally:
            _restore_handlers(kept)
            if self._owns:
                ray.shutdown()
                self._owns = False


def make_executor(backend: str, jobs: int = 1, address: str | None = None, cpus_per_run: float = 1,
                  gpus_per_run: float | None = None, max_retries: int = 3, dashboard: bool = False):
    """The executor for ``--backend``: ``local`` (``jobs`` at a time) or ``ray``."""
    if backend == "local":
        return LocalExecutor(jobs)
    if backend == "ray":
        return RayExecutor(address, cpus_per_run, gpus_per_run, max_retries, dashboard)
    raise ExecutorError(f"--backend: unknown back-end {backend!r}; choose one of {', '.join(BACKENDS)}")


def add_executor_args(p) -> None:
    """The back-end flags shared by ``siggate compare`` and the analysis sweeps."""
    p.add_argument("--backend", choices=BACKENDS, default="local",
                   help="where runs execute: local processes (default) or Ray tasks (pip install 'siggate[ray]')")
    p.add_argument("--ray-address", default=None, metavar="auto|HOST:PORT",
                   help="join a running Ray cluster (default: start an embedded local instance)")
    p.add_argument("--cpus-per-run", type=float, default=None, help="Ray: CPUs declared per run (default: 1)")
    p.add_argument("--gpus-per-run", type=float, default=None,
                   help="Ray: GPUs declared per run (default: 1 if the cluster has GPUs, else 0)")
    p.add_argument("--max-retries", type=int, default=None,
                   help="Ray: retries of a run whose worker died; it resumes from its last checkpoint (default: 3)")
    p.add_argument("--ray-dashboard", action="store_true", help="Ray: start the dashboard (off by default)")


def check_resources(cpus_per_run, gpus_per_run, max_retries) -> None:
    """A Ray task's resources as :class:`RayExecutor` takes them (``None``: its default): CPUs a
    finite number above 0, GPUs a finite number from 0, retries a whole number from 0; else
    :class:`ExecutorError` naming the flag (a negative or NaN count failed inside Ray, or as a
    conversion to int, with a traceback after Ray had started)."""
    import math

    for flag, value, low, strict in (("--cpus-per-run", cpus_per_run, 0, True), ("--gpus-per-run", gpus_per_run, 0, False),
                                     ("--max-retries", max_retries, 0, False)):
        if value is None:
            continue
        if flag == "--max-retries" and math.isfinite(value) and value != int(value):  # (RayExecutor called directly)
            raise ExecutorError(f"{flag} must be a whole number, got {value}")
        if not math.isfinite(value) or value < low or (strict and value == low):
            raise ExecutorError(f"{flag} must be {'>' if strict else '>='} {low}, got {value}")


#: seconds :func:`check_address` waits for a cluster's port to answer
CONNECT_TIMEOUT = 10.0


def check_address(address: str | None) -> None:
    """``--ray-address`` as :class:`RayExecutor` takes it: ``None`` (an embedded instance),
    ``"auto"`` (Ray finds the cluster this machine started) or ``[ray://]HOST:PORT``, whose port
    must answer within :data:`CONNECT_TIMEOUT` seconds; else :class:`ExecutorError` naming the
    address. (Ray itself retried an address where nothing listens for minutes, printing a
    warning every few seconds, before it failed.)"""
    import socket

    if address is None or address == "auto":
        return
    where = address[len("ray://"):] if address.startswith("ray://") else address
    host, _, port = where.rpartition(":")
    host = host.strip("[]")  # an IPv6 address in brackets
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ExecutorError(f"--ray-address {address!r}: give 'auto' or HOST:PORT (e.g. 10.0.0.5:6379, the "
                            "address 'ray start --head' prints)")
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT).close()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ExecutorError(f"--ray-address {address}: nothing answers there ({reason}); start the cluster "
                            "('ray start --head' on that machine) or give the address it printed") from None


def check_backend_flags(args) -> None:
    """Refuse the Ray-only flags of :func:`add_executor_args` without ``--backend ray`` (they were
    accepted and ignored, invalid values too), their values out of range
    (:func:`check_resources`) and an address where no cluster answers (:func:`check_address`):
    :class:`ExecutorError`. ``siggate``'s CLI calls it as soon as the
    arguments are parsed, before any data is prepared."""
    ray_only = {"--ray-address": args.ray_address, "--ray-dashboard": args.ray_dashboard or None,
                "--cpus-per-run": args.cpus_per_run, "--gpus-per-run": args.gpus_per_run,
                "--max-retries": args.max_retries}
    given = [flag for flag, value in ray_only.items() if value is not None]
    if args.backend != "ray" and given:  # accepted and ignored, invalid values too
        raise ExecutorError(f"{', '.join(given)} need{'s' if len(given) == 1 else ''} --backend ray; drop "
                            f"{'it' if len(given) == 1 else 'them'}, or add --backend ray")
    check_resources(args.cpus_per_run, args.gpus_per_run, args.max_retries)
    if args.backend == "ray":
        check_address(args.ray_address)


def task_threads(args) -> int:
    """The torch threads of one Ray task of parsed :func:`add_executor_args` arguments: each task
    owns ``--cpus-per-run`` cores (not given: 1), whole ones at least one. (An analysis sweep on Ray
    ran each task at torch's default, all of the node's cores, beside its declared one.)"""
    import math

    return max(1, math.floor(args.cpus_per_run or 1))


def executor_from_args(args):
    """:func:`make_executor` from parsed :func:`add_executor_args` arguments (checked by
    :func:`check_backend_flags`)."""
    check_backend_flags(args)
    return make_executor(args.backend, getattr(args, "jobs", 1), args.ray_address,
                         1 if args.cpus_per_run is None else args.cpus_per_run, args.gpus_per_run,
                         3 if args.max_retries is None else args.max_retries, args.ray_dashboard)
