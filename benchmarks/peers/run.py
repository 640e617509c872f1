"""Side-by-side benchmark: siggate vs chemprop 2.x on the same CSVs and the same splits.

What a new user gets: each tool runs its own CLI with its DEFAULT settings; only the
data, the split, the training seed and the hardware (CPU, one thread) are set. Per
(tool, task, seed) the runner records the test metric, computed HERE from each tool's
test predictions with one implementation for both (MAE for regression, ROC-AUC for
binary tasks), the wall time of the whole train command, the parameter count and the
exact command.

    python benchmarks/peers/run.py                      # all tasks, both tools, seeds 0,1,2
    python benchmarks/peers/run.py --tasks nci5k --tools chemprop --seeds 0
    python benchmarks/peers/run.py --smoke --tasks freesolv,molhiv4k --seeds 0   # 2 epochs each
    python benchmarks/peers/run.py --report             # README table from results.json only
    python benchmarks/peers/run.py --tools siggate --recipe svr_minmax \
        --siggate-args "--members svr" --results benchmarks/peers/results/recipe.json   # a named recipe

Run it from siggate's venv (it builds the tasks with siggate's code). chemprop runs
from its own venv (``benchmarks/peers/setup_chemprop.sh``; ``--chemprop-venv`` or
``$CHEMPROP_VENV``). The runs are one study (:mod:`siggate.train.study`): planned against
the results file (a :class:`~siggate.train.study.RowStore`, ``runs``: one row per tool, task,
seed and variant, written under a lock), where a run whose ``ok`` row is there is skipped and
a failed one is tried again, then executed one after another, each row recorded as it
finishes; an interrupted benchmark resumes where it stopped. ``--smoke`` rows are marked
``"smoke": true`` and never enter the README table.
"""

from __future__ import annotations

import argparse
import collections
import csv
import json
import math
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from siggate.config import ConfigError, override_key
from siggate.files import FolderBusy, FolderLock
from siggate.train.ensemble import member_shares
from siggate.train.executor import CallRequest, InlineExecutor
from siggate.train.predict import DOMAIN_COLUMNS
from siggate.train.rundir import run_commit
from siggate.train.study import ResultsFileError, RowStore, StudyRun, execute, plan, reuse_status

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import tasks as T  # noqa: E402

TOOLS = ("siggate", "chemprop")
DEFAULT_RESULTS = HERE / "results" / "results.json"
DEFAULT_WORK = Path(os.environ.get("SIGGATE_PEERS_WORK", "~/.cache/siggate/peers/runs")).expanduser()
DEFAULT_CHEMPROP_VENV = Path(os.environ.get("CHEMPROP_VENV", "~/.cache/siggate/peers/chemprop-venv")).expanduser()
README = HERE / "README.md"
TABLE_START, TABLE_END = "<!-- peers-table:start -->", "<!-- peers-table:end -->"
RECIPE_START, RECIPE_END = "<!-- peers-recipe:start -->", "<!-- peers-recipe:end -->"
#: recipe experiments: siggate with --siggate-args variants (and its defaults), next to chemprop
DEFAULT_RECIPE_RESULTS = HERE / "results" / "recipe.json"
SMOKE_EPOCHS = 3  # chemprop refuses --epochs <= its 2 default warmup epochs

#: one intra-op thread for both tools (set in the environment of every tool command)
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}

TTY = sys.stderr.isatty()


def progress(msg: str) -> None:
    """Progress lines: only on a terminal."""
    if TTY:
        print(f"[peers {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- metrics


def mae(y_true: list[float], y_pred: list[float]) -> float:
    return sum(abs(a - b) for a, b in zip(y_true, y_pred)) / len(y_true)


def roc_auc(y_true: list[float], score: list[float]) -> float:
    """ROC-AUC as the Mann-Whitney U statistic with average ranks for ties."""
    n = len(score)
    order = sorted(range(n), key=lambda i: score[i])
    ranks = [0.0] * n
    i = 0
    while i < n:
        j = i
        while j + 1 < n and score[order[j + 1]] == score[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    pos = [r for r, t in zip(ranks, y_true) if t == 1]
    n_pos, n_neg = len(pos), n - len(pos)
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    return (sum(pos) - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def rmse(y_true: list[float], y_pred: list[float]) -> float:
    return math.sqrt(sum((a - b) ** 2 for a, b in zip(y_true, y_pred)) / len(y_true))


METRICS = {"mae": mae, "rocauc": roc_auc, "rmse": rmse}


def score(metric: str, smiles_true: list[str], y_true: list[float], smiles_pred: list[str], y_pred: list[float]) -> float:
    """The test metric; predictions must be for exactly the test rows, in the same order."""
    if smiles_pred != smiles_true:
        bad = next((i for i, (a, b) in enumerate(zip(smiles_true, smiles_pred)) if a != b), min(len(smiles_true), len(smiles_pred)))
        raise RuntimeError(
            f"predictions do not match the test rows ({len(smiles_pred)} vs {len(smiles_true)} rows; first difference at row {bad})"
        )
    if any(not math.isfinite(v) for v in y_pred):
        raise RuntimeError("non-finite test predictions")
    return METRICS[metric](y_true, y_pred)


# ----------------------------------------------------------------------------- tools


def _tilde(s: str) -> str:
    home = str(Path.home())
    return s.replace(home + "/", "~/") if home not in ("", "/") else s


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _run(argv: list[str], log: Path, env: dict) -> tuple[int, float, float]:
    """Run ``argv`` with stdout+stderr to ``log``; (returncode, wall seconds, CPU seconds).

    CPU seconds are the user + system time of the process and the children it waited for
    (``wait4``'s resource usage): with one thread per tool they measure the work done and,
    unlike wall time, barely move when other processes share the cores."""
    t0 = time.perf_counter()
    with open(log, "w") as fh:
        proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, time.perf_counter() - t0, usage.ru_utime + usage.ru_stime


def _tail(log: Path, n: int = 15) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


def _env() -> dict:
    env = dict(os.environ)
    env.update(ONE_THREAD)
    env["PYTHONUNBUFFERED"] = "1"
    return env


class Tool:
    """A command-line tool under test: ``exe``, its ``train_args`` and a ``run`` that scores it."""

    name = "tool"
    exe = ""

    def train_args(self, task: T.Task, tdir: Path, out: Path, seed: int, epochs: int | None) -> list[str]:
        raise NotImplementedError

    def train(self, task: T.Task, tdir: Path, out: Path, seed: int, epochs: int | None):
        """Run the train command, its output in ``out/train.log``: (argv, wall s, CPU s, env)."""
        env = _env()
        argv = self.train_args(task, tdir, out, seed, epochs)
        rc, wall, cpu = _run([self.exe, *argv], out / "train.log", env)
        if rc != 0:
            raise RuntimeError(f"{self.name} train exited {rc}:\n{_tail(out / 'train.log')}")
        return argv, wall, cpu, env


def _without_set(argv: list[str], key: str) -> list[str]:
    """``argv`` without its ``--set KEY=...`` items (a smoke run's ``--epochs`` replaces a recipe's
    ``train.epochs``: siggate refuses the flag and its key together). An item is read by siggate's
    own parser (:func:`siggate.config.override_key`); a malformed one stays, for siggate to refuse."""
    def sets_key(item: str) -> bool:
        try:
            return override_key(item) == key
        except ConfigError:
            return False

    out, skip = [], False
    for i, a in enumerate(argv):
        if skip:
            skip = False
            continue
        if a == "--set" and i + 1 < len(argv) and sets_key(argv[i + 1]):
            skip = True
            continue
        if a.startswith("--set=") and sets_key(a[len("--set="):]):
            continue
        out.append(a)
    return out


class Siggate(Tool):
    name = "siggate"

    def __init__(self, exe: str | None = None, extra: str = ""):
        self.extra = shlex.split(extra)
        self.exe = (shutil.which(exe) or exe) if exe else str(Path(sys.executable).with_name("siggate"))
        if not Path(self.exe).exists() and shutil.which("siggate") and exe is None:
            self.exe = shutil.which("siggate")
        if not Path(self.exe).is_file():
            refuse(f"siggate executable {self.exe} not found: give the one of a siggate install with --siggate PATH "
                   "(pip install -e . puts it next to the venv's python)")

    def version(self) -> str:
        out = subprocess.run([self.exe, "--version"], capture_output=True, text=True).stdout.strip()
        return out.replace("siggate ", "") or "?"

    def train_args(self, task: T.Task, tdir: Path, out: Path, seed: int, epochs: int | None) -> list[str]:
        extra = self.extra if epochs is None else _without_set(self.extra, "train.epochs")  # the smoke budget's
        argv = ["train", "--data", str(tdir / "data.csv"), "--smiles-col", "smiles", "--target-col", "y", "--task", task.task,
                "--split", "column:split", "--seed", str(seed), "--out", str(out / "model"),
                "--cache-dir", str(out / "cache"), "--no-progress", *extra]
        if epochs is not None:
            argv += ["--epochs", str(epochs)]
        return argv

    def run(self, task: T.Task, tdir: Path, out: Path, seed: int, epochs: int | None) -> dict:
        argv, wall, cpu, env = self.train(task, tdir, out, seed, epochs)
        model = out / "model"
        metrics = json.loads((model / "metrics.json").read_text())
        combined = (model / "predictor.json").exists()  # --members/--ensemble: the folder is the predictor
        pred_argv = ["predict", "--checkpoint", str(model if combined else model / "best.pt"), "--input", str(tdir / "test.csv"),
                     "--output", str(out / "test_predictions.csv")]
        t0 = time.perf_counter()
        with open(out / "predict.log", "w") as fh:
            prc = subprocess.run([self.exe, *pred_argv], stdout=fh, stderr=subprocess.STDOUT, env=env).returncode
        predict_s = time.perf_counter() - t0
        if prc != 0:
            raise RuntimeError(f"siggate predict exited {prc}:\n{_tail(out / 'predict.log')}")
        with open(out / "test_predictions.csv", newline="") as fh:
            rows = list(csv.DictReader(fh))
        col = prediction_column(tdir / "test.csv", rows)
        errors = [r["error"] for r in rows if r.get("error")]
        if errors:
            raise RuntimeError(f"siggate predict failed on {len(errors)} test rows, e.g. {errors[0]}")
        return {
            "wall_s": wall,
            "cpu_s": cpu,
            "predict_s": predict_s,
            "params": int(metrics["params"]) if "params" in metrics else None,  # a GNN's; fingerprint members have none
            "pred_smiles": [r["smiles"] for r in rows],
            "pred": [float(r[col]) for r in rows],
            "tool_reported_test": metrics.get("test"),
            "best_epoch": metrics.get("best_epoch"),
            **({"member_shares": member_shares(metrics)} if "members" in metrics else {}),  # what each adds
            "git_commit": run_commit(model),
            "git_src_modified": _src_modified(),
            "command": " ".join(["siggate", *map(shlex.quote, argv)]),
            "predict_command": " ".join(["siggate", *map(shlex.quote, pred_argv)]),
            "split_check": _siggate_split_check(out, tdir),
        }


def prediction_column(input_csv: Path, rows: list[dict]) -> str:
    """The column ``siggate predict`` wrote its prediction into: the one that is neither an input
    column carried through nor ``error``/``*uncertainty*`` nor the applicability domain's columns (so
    a prediction named after the target, ``y``, next to the input's own ``y`` column, is not
    mistaken for the label)."""
    with open(input_csv, newline="") as fh:
        inputs = set(next(csv.reader(fh)))
    extra = ("error", *DOMAIN_COLUMNS)
    cols = [c for c in (rows[0] if rows else []) if c not in inputs and c not in extra and "uncertainty" not in c]
    if len(cols) != 1:
        raise RuntimeError(f"cannot tell siggate's prediction column among {list(rows[0]) if rows else []}")
    return cols[0]


def _src_modified() -> bool | None:
    """Whether siggate's ``src/`` differs from its commit (the recorded commit is then not the code that ran)."""
    try:
        out = subprocess.run(["git", "status", "--porcelain", "--", "src"], cwd=HERE.parents[1],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return bool(out.stdout.strip()) if out.returncode == 0 else None


def _siggate_split_check(out: Path, tdir: Path) -> dict:
    """Sizes of the split siggate trained on, from its processed-data cache."""
    try:
        import torch  # noqa: F401

        from siggate.data.cache import load_dataset

        files = sorted((out / "cache" / "csv").rglob("*.pt"))
        ds = load_dataset(files[0])
        sizes = ds.sizes()
        test_idx = sorted(int(g.idx) for g in ds.splits["test"])
        want = json.loads((tdir / "splits.json").read_text())[0]
        return {"sizes": sizes, "test_rows_equal_splits_json": test_idx == sorted(want["test"]),
                "train_rows_equal_splits_json": sorted(int(g.idx) for g in ds.splits["train"]) == sorted(want["train"]),
                "val_rows_equal_splits_json": sorted(int(g.idx) for g in ds.splits["val"]) == sorted(want["val"])}
    except Exception as exc:  # a check only: never fail a finished run on it
        return {"error": f"{type(exc).__name__}: {exc}"}


class Chemprop(Tool):
    name = "chemprop"

    def __init__(self, venv: Path):
        self.venv = Path(venv)
        self.exe = str(self.venv / "bin" / "chemprop")
        self.python = str(self.venv / "bin" / "python")
        if not Path(self.exe).exists():
            refuse(f"chemprop not found at {self.exe}: run benchmarks/peers/setup_chemprop.sh "
                   f"(or pass --chemprop-venv / set CHEMPROP_VENV)")

    def version(self) -> str:
        code = "import chemprop; print(chemprop.__version__)"
        return subprocess.run([self.python, "-c", code], capture_output=True, text=True, env=_env()).stdout.strip() or "?"

    def train_args(self, task: T.Task, tdir: Path, out: Path, seed: int, epochs: int | None) -> list[str]:
        argv = ["train", "--data-path", str(tdir / "data.csv"), "--smiles-columns", "smiles", "--target-columns", "y",
                "--task-type", task.chemprop_task, "--splits-file", str(tdir / "splits.json"),
                "--output-dir", str(out / "model"), "--pytorch-seed", str(seed), "--data-seed", str(seed),
                "--accelerator", "cpu", "--devices", "1", "--num-workers", "0"]
        if epochs is not None:
            argv += ["--epochs", str(epochs)]
        return argv

    def run(self, task: T.Task, tdir: Path, out: Path, seed: int, epochs: int | None) -> dict:
        argv, wall, cpu, env = self.train(task, tdir, out, seed, epochs)
        mdir = out / "model" / "model_0"
        with open(mdir / "test_predictions.csv", newline="") as fh:
            rows = list(csv.DictReader(fh))
        used = json.loads((out / "model" / "splits.json").read_text())
        want = json.loads((tdir / "splits.json").read_text())
        code = ("import sys, torch; from chemprop.models import MPNN; "
                "m = MPNN.load_from_file(sys.argv[1], map_location='cpu'); "
                "print(sum(p.numel() for p in m.parameters()))")
        params = subprocess.run([self.python, "-c", code, str(mdir / "best.pt")], capture_output=True, text=True, env=env)
        if params.returncode != 0:
            raise RuntimeError(f"could not count chemprop's parameters:\n{params.stderr[-2000:]}")
        reported = None
        m = re.findall(r"test/(mae|mse|rmse|roc|prc)\S*:\s*([-+0-9.eE]+|nan)", (out / "train.log").read_text(errors="replace"))
        if m:
            reported = {k: float(v) for k, v in m}
        return {
            "wall_s": wall,
            "cpu_s": cpu,
            "params": int(params.stdout.strip().splitlines()[-1]),
            "pred_smiles": [r["smiles"] for r in rows],
            "pred": [float(r["y"]) for r in rows],
            "tool_reported_test": reported,
            "command": " ".join(["chemprop", *map(shlex.quote, argv)]),
            "split_check": {"splits_json_used_equals_task": used == want,
                            "sizes": {k: len(used[0][k]) for k in ("train", "val", "test")}},
        }


# ----------------------------------------------------------------------------- results


def _slug(text: str) -> str:
    """A folder name for a --siggate-args variant."""
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", text).strip("_")[:80] or "default"


def run_key(tool: str, task: str, seed: int, smoke: bool, epochs: int | None = None, variant: str = "") -> tuple:
    """What makes two runs the same run (the epochs override is None outside --smoke; the
    variant is siggate's --siggate-args, '' for its defaults)."""
    return (tool, task, int(seed), bool(smoke), epochs, variant)


def row_key(r: dict) -> tuple:
    return run_key(r["tool"], r["task"], r["seed"], r.get("smoke", False), r.get("epochs"), r.get("variant", ""))


def results_store(path: Path) -> RowStore:
    """The results file (``runs``: one row per tool, task, seed and variant) as a
    :class:`~siggate.train.study.RowStore`."""
    return RowStore(path, key=row_key, rows_field="runs")


def load_results(path: Path) -> dict:
    """The results file ``path`` (empty where there is none), its rows checked (:func:`checked_rows`)."""
    res = results_store(path).load()
    checked_rows(res.get("runs", []), path, ("tool", "task"), ("value", "wall_s"), ok_names=("metric",))
    return res


def checked_rows(rows: list, path: Path, names: tuple, numbers: tuple, ok_names: tuple = (),
                 prog: str = "peers") -> list:
    """``rows`` of a harness's results file ``path`` (both harnesses'), their seeds made integers in
    place. Exits (2) naming the row, one line (``prog``: the harness): a row that is not a record of
    its ``names`` (text) and a whole-number seed, or an ``ok`` row without its ``ok_names`` (text)
    and a finite number of each of ``numbers`` (a hand-edited or imported row: every later report,
    comparison and import ended in a KeyError, TypeError or AttributeError)."""
    fix = "restore the file (git checkout) or mend that row"
    for r in rows:
        if not isinstance(r, dict) or not all(isinstance(r.get(k), str) for k in names):
            refuse(f"{path} holds a row that is not a record of its {', '.join(names)} and seed ({str(r)[:80]}); {fix}",
                   prog)
        where = "/".join(r[k] for k in names) + f" seed {r.get('seed')!r}"
        seed = r.get("seed")
        whole = ((isinstance(seed, int) and not isinstance(seed, bool) and seed >= 0)
                 or (isinstance(seed, str) and seed.isascii() and seed.isdecimal()))  # ("²" is a digit int() refuses)
        if not whole:  # (int() made a seed 1.7 into 1)
            refuse(f"{path} holds a row without a whole-number seed ({where}); {fix}", prog)
        r["seed"] = int(seed)
        if r.get("status") != "ok":
            continue
        bad = next((k for k in ok_names if not isinstance(r.get(k), str)), None) or next(
            (k for k in numbers if not isinstance(r.get(k), (int, float)) or isinstance(r.get(k), bool)
             or not math.isfinite(r[k])), None)
        if bad:
            refuse(f"{path} holds an ok row without {'its' if bad in ok_names else 'a finite'} {bad} ({where}: "
                   f"{r.get(bad)!r}); {fix}", prog)
    return rows


def refuse(message: str, prog: str = "peers"):
    """Bad input: one line on stderr naming the cause and the fix, exit code 2 (both harnesses)."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def run_study(runs: list[StudyRun], store: RowStore, what: str, describe=lambda row: "") -> int:
    """Plan ``runs`` against ``store`` (:func:`siggate.train.study.plan`: a run whose ok row is
    there is skipped), refuse conflicts before anything runs (exit 2, one line each), then
    execute the rest one after another in this process, each row added to the store as it
    finishes (``describe(row)`` says what it measured on the progress line). The exit status: 1
    if a run failed, else 0. Shared with ``moleculeace/run.py``."""
    plan(runs, store)
    conflicts = [r.error for r in runs if r.state == "conflict"]
    if conflicts:
        for line in conflicts:
            print(f"{what}: {line}", file=sys.stderr)
        raise SystemExit(2)
    for r in runs:
        if r.state == "done":
            progress(f"skip {' '.join(map(str, r.tag))}: done")

    def finished_one(r: StudyRun) -> None:
        if r.state == "done":
            progress(f"done {' '.join(map(str, r.tag))}: {describe(r.metrics)}")
        else:
            print(f"{what}: {' '.join(map(str, r.tag))} failed: {r.error}", file=sys.stderr)

    execute(runs, InlineExecutor(), desc=what, progress=False, on_result=finished_one, store=store)
    return 1 if any(r.state == "failed" for r in runs) else 0


def fresh_dir(out: Path) -> Path:
    """An empty run folder (a harness run starts afresh, so its CPU time is the whole run's);
    its :class:`~siggate.files.FolderLock` file, the claim of the process that empties it, stays."""
    out.mkdir(parents=True, exist_ok=True)
    for p in out.iterdir():
        if p.name != FolderLock.NAME:
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
    return out


def claimed_row(out: str | Path, identity: dict, store: RowStore, key: tuple, fields: dict, body) -> dict:
    """A harness row: ``body(out)`` run in its folder ``out``, emptied first, while this process
    holds the folder's :class:`~siggate.files.FolderLock`. Two harnesses on one results file (or
    two lanes) never train one row into one folder, the second emptying the folder the first
    trains in: the second gets a ``failed`` row naming the other process, which
    :meth:`~siggate.train.study.RowStore.put` never writes over a finished one. The row another
    process finished meanwhile is returned as it is; a finished row of other arguments
    (``conflict``) is not run again. ``fields``: the row's key fields, for those failed rows."""
    now = reuse_status(out, identity, store, key)
    if now.state == "conflict":  # never run: its result could only be refused
        return {**fields, "status": "failed", "error": f"{store.path} holds this row with other arguments ({now.reason})"}
    if now.state == "done":
        return now.metrics
    lock = FolderLock(out)
    try:
        lock.acquire()
    except FolderBusy as e:
        return {**fields, "status": "failed", "error": f"{e}: it runs this row now; run it again once that one ends"}
    try:
        now = reuse_status(out, identity, store, key)  # finished before this process held the folder
        return now.metrics if now.state == "done" else body(fresh_dir(Path(out)))
    finally:
        lock.release()


def run_row(runner: Tool, task: str, seed: int, out: str, data_dir: str, base: dict, store: RowStore,
            key: tuple) -> dict:
    """One (tool, task, seed) run: train, predict and score it here; its row (``ok`` with the
    metric, or ``failed`` with the error), in its folder claimed by :func:`claimed_row`."""
    return claimed_row(out, {}, store, key, base, lambda out: _run_row(runner, task, seed, out, data_dir, base))


def _run_row(runner: Tool, task: str, seed: int, out: Path, data_dir: str, base: dict) -> dict:
    t, tdir = T.TASKS[task], T.task_dir(task, Path(data_dir))
    test_smiles, test_y, _ = T.read_task_csv(tdir / "test.csv")
    row = {**base, "load_avg_1m_at_start": round(os.getloadavg()[0], 2)}
    row["command"] = " ".join([runner.name, *map(shlex.quote, runner.train_args(t, tdir, out, seed, base["epochs"]))])
    progress(f"run  {runner.name} {task} seed {seed} -> {out}")
    try:
        r = runner.run(t, tdir, out, seed, base["epochs"])
        pred_smiles, pred = r.pop("pred_smiles"), r.pop("pred")
        value = score(t.metric, test_smiles, test_y, pred_smiles, pred)
        if t.metric == "mae":  # same code for both tools; cross-checks chemprop's own test/mse
            r["test_mse"] = sum((a - b) ** 2 for a, b in zip(test_y, pred)) / len(test_y)
        row.update(status="ok", value=value, n_test=len(test_y), **r)
    except Exception as exc:
        row.update(status="failed", error=f"{type(exc).__name__}: {exc}")
    row["command"] = _tilde(row["command"])
    if "predict_command" in row:
        row["predict_command"] = _tilde(row["predict_command"])
    row["finished"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return row


def cmd_run(args) -> int:
    names = [t.strip() for t in args.tasks.split(",") if t.strip()] if args.tasks else list(T.TASKS)
    unknown = [n for n in names if n not in T.TASKS]
    if unknown:
        refuse(f"--tasks: unknown task(s) {', '.join(unknown)}; choose from {', '.join(T.TASKS)}")
    tools = [t.strip() for t in args.tools.split(",") if t.strip()]
    if any(t not in TOOLS for t in tools):
        refuse(f"--tools: choose from {', '.join(TOOLS)}")
    try:
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError:
        refuse(f"--seeds {args.seeds!r}: give comma-separated integers, e.g. 0,1,2")
    epochs = SMOKE_EPOCHS if args.smoke else None
    load_results(args.results)  # a file that is not a results file: refused before any task is built

    runners = {}
    if "siggate" in tools:
        runners["siggate"] = Siggate(args.siggate, args.siggate_args)
    if "chemprop" in tools:
        runners["chemprop"] = Chemprop(args.chemprop_venv)
    versions = {k: r.version() for k, r in runners.items()}

    store = results_store(args.results)
    runs = []
    for name in names:
        progress(f"building task {name}")
        meta = T.build(name, args.data_dir)
        store.update(lambda res, name=name, meta=meta: res.setdefault("tasks", {}).__setitem__(
            name, {k: v for k, v in meta.items() if k not in ("builder_version",)}))
        for seed in seeds:
            for tool in tools:
                variant = args.siggate_args.strip() if tool == "siggate" else ""
                recipe = args.recipe if tool == "siggate" and args.recipe else None
                key = run_key(tool, name, seed, args.smoke, epochs, variant)
                out = (args.work_dir / ("smoke" if args.smoke else "full") / name / tool
                       / (f"variant-{_slug(variant)}" if variant else "") / f"seed{seed}")
                base = {"tool": tool, "task": name, "seed": seed, "smoke": bool(args.smoke), "epochs": epochs,
                        **({"variant": variant} if variant else {}), **({"recipe": recipe} if recipe else {}),
                        "metric": T.TASKS[name].metric, "tool_version": versions[tool],
                        "data_sha256": meta["data_sha256"], "splits_sha256": meta["splits_sha256"],
                        "cpu": _cpu_model(), "threads": 1}
                request = CallRequest(key, f"{__name__}:run_row", {
                    "runner": runners[tool], "task": name, "seed": seed, "out": str(out),
                    "data_dir": str(args.data_dir), "base": base, "store": store, "key": key}, out)
                runs.append(StudyRun(key, out, {}, request, tag=(tool, name, "seed", seed)))
    status = run_study(runs, store, "peers", lambda r: f"{r['metric']}={r['value']:.4f} wall={r['wall_s']:.0f}s "
                                                       f"cpu={r['cpu_s']:.0f}s params={r['params']}")
    if args.results.resolve() == DEFAULT_RESULTS.resolve():
        write_readme(store.load(), README)
    return status


# ----------------------------------------------------------------------------- report


def _fmt(vals: list[float], digits: int) -> str:
    if not vals:
        return "–"
    if len(vals) == 1:
        return f"{vals[0]:.{digits}f}"
    return f"{statistics.mean(vals):.{digits}f} ± {statistics.stdev(vals):.{digits}f}"


def report_markdown(res: dict) -> str:
    rows = [r for r in res.get("runs", []) if r.get("status") == "ok" and not r.get("smoke") and not r.get("variant")]
    if not rows:
        return "_Not run yet: no finished non-smoke runs in `results/results.json`._"
    lines = [
        "| task | type | metric | tool | version | test metric (mean ± std) | seeds | wall time per run, s "
        "| CPU time per run, s | params |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    order = [n for n in T.TASKS if any(r["task"] == n for r in rows)]
    for name in order:
        meta = res.get("tasks", {}).get(name, {})
        for tool in TOOLS:
            rr = sorted((r for r in rows if r["task"] == name and r["tool"] == tool), key=lambda r: r["seed"])
            if not rr:
                continue
            metric = rr[0]["metric"]
            better = "lower is better" if metric == "mae" else "higher is better"
            label = {"mae": "MAE", "rocauc": "ROC-AUC"}.get(metric, metric)
            params = sorted({r["params"] for r in rr if r.get("params") is not None})  # None: several members
            lines.append(
                f"| {name} | {meta.get('task', '?')} | {label} ({better}) | {tool} | "
                f"{', '.join(sorted({r['tool_version'] for r in rr}))} | {_fmt([r['value'] for r in rr], 3)} | "
                f"{','.join(str(r['seed']) for r in rr)} | {_fmt([r['wall_s'] for r in rr], 0)} | "
                f"{_fmt([r['cpu_s'] for r in rr if 'cpu_s' in r], 0)} | "
                f"{', '.join(f'{p:,}' for p in params) or '–'} |"
            )
    lines += ["", "Tasks as run (built locally by `tasks.py`):", "",
              "| task | size | train/val/test | split | sha256 of data.csv |", "|---|---|---|---|---|"]
    for name in order:
        m = res["tasks"].get(name, {})
        s = m.get("split_sizes", {})
        lines.append(f"| {name} | {m.get('size', '?')} | {s.get('train')}/{s.get('val')}/{s.get('test')} | "
                     f"{m.get('split_rule', '?')} | `{m.get('data_sha256', '?')[:16]}…` |")
    cpus = sorted({r.get("cpu", "?") for r in rows})
    commits = collections.Counter((r.get("git_commit") or "not recorded")[:7] for r in rows if r["tool"] == "siggate")
    lines += ["", f"CPU: {'; '.join(cpus)}; one thread per run (`OMP_NUM_THREADS=1`, `MKL_NUM_THREADS=1`).",
              "", "siggate commits of these rows (runs each; `git_commit` per row in the JSON): "
              + ", ".join(f"`{c}` ({n})" for c, n in sorted(commits.items())) + ".", "",
              "Exact commands (seed 0 shown; the other seeds differ only in the seed values):", ""]
    for name in order:
        for tool in TOOLS:
            r = next((r for r in sorted(rows, key=lambda r: r["seed"]) if r["task"] == name and r["tool"] == tool), None)
            if r is None:
                continue
            lines.append(f"- {name}, {tool}: `{r['command']}`")
            if r.get("predict_command"):
                lines.append(f"  then `{r['predict_command']}`")
    return "\n".join(lines)


def recipe_markdown(recipe: dict, res: dict) -> str:
    """Per task, siggate's recipe variants (rows of ``recipe``) beside both tools' default rows
    of ``res``: mean ± std of the test metric and CPU time, seeds."""
    ok = lambda r: r.get("status") == "ok" and not r.get("smoke")  # noqa: E731
    rows = [r for r in recipe.get("runs", []) if ok(r) and r["tool"] == "siggate" and r.get("variant")]
    rows += [r for r in res.get("runs", []) if ok(r) and not r.get("variant")]
    if not rows:
        return "_No recipe experiment yet._"
    lines = ["| task | metric | tool | variant | test metric (mean ± std) | seeds | CPU time per run, s |",
             "|---|---|---|---|---|---|---|"]
    for name in (n for n in T.TASKS if any(r["task"] == n for r in rows)):
        groups: dict = {}
        for r in sorted(rows, key=lambda r: (r["tool"] != "chemprop", r.get("variant", ""), r["seed"])):
            if r["task"] == name:
                groups.setdefault((r["tool"], r.get("variant", "")), []).append(r)
        for (tool, variant), rr in groups.items():
            label = {"mae": "MAE ↓", "rocauc": "ROC-AUC ↑"}.get(rr[0]["metric"], rr[0]["metric"])
            cpu = [r["cpu_s"] for r in rr if "cpu_s" in r]
            named = next((r["recipe"] for r in rr if r.get("recipe")), None)
            shown = (f"{named}: `{variant}`" if named else f"`{variant}`") if variant else "defaults"
            lines.append(f"| {name} | {label} | {tool} | {shown} | "
                         f"{_fmt([r['value'] for r in rr], 3)} | {','.join(str(r['seed']) for r in rr)} | "
                         f"{_fmt(cpu, 0) if cpu else 'not recorded'}"
                         f"{f' ({len(cpu)} of {len(rr)} runs recorded)' if cpu and len(cpu) < len(rr) else ''} |")
    return "\n".join(lines)


def _replace_section(text: str, start: str, end: str, body: str, path: Path) -> str:
    if start not in text or end not in text:
        raise SystemExit(f"{path}: markers {start} / {end} not found")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}\n{body}\n{end}{tail}"


def write_readme(res: dict, path: Path, recipe: dict | None = None) -> bool:
    """Replace the generated sections of the README (the results table, and the recipe
    experiments when ``recipe`` is given); True if it changed."""
    text = path.read_text()
    new = _replace_section(text, TABLE_START, TABLE_END, report_markdown(res), path)
    if recipe is not None:
        new = _replace_section(new, RECIPE_START, RECIPE_END, recipe_markdown(recipe, res), path)
    if new != text:
        path.write_text(new)
        return True
    return False


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="siggate vs chemprop on the same CSVs and splits (issue 13, item 1)")
    p.add_argument("--tasks", default=None, help=f"comma-separated tasks (default: all: {','.join(T.TASKS)})")
    p.add_argument("--tools", default=",".join(TOOLS), help="comma-separated tools (default: siggate,chemprop)")
    p.add_argument("--seeds", default="0,1,2", help="comma-separated training seeds (default: 0,1,2)")
    p.add_argument("--smoke", action="store_true",
                   help=f"tiny budget ({SMOKE_EPOCHS} epochs per tool) to test the pipeline; rows marked smoke, kept out of the table")
    p.add_argument("--report", action="store_true", help="only regenerate the README table from the results JSON")
    p.add_argument("--results", type=Path, default=DEFAULT_RESULTS, help="results JSON (default: results/results.json)")
    p.add_argument("--recipe-results", type=Path, default=DEFAULT_RECIPE_RESULTS,
                   help="recipe experiments' JSON that --report renders (default: results/recipe.json)")
    p.add_argument("--data-dir", type=Path, default=T.DEFAULT_DATA_DIR, help="task cache (default: ~/.cache/siggate/peers/data)")
    p.add_argument("--work-dir", type=Path, default=DEFAULT_WORK, help="run outputs (default: ~/.cache/siggate/peers/runs)")
    p.add_argument("--chemprop-venv", type=Path, default=DEFAULT_CHEMPROP_VENV,
                   help="chemprop's venv (default: $CHEMPROP_VENV or ~/.cache/siggate/peers/chemprop-venv)")
    p.add_argument("--siggate", default=None, help="siggate executable (default: the one next to this Python)")
    p.add_argument("--siggate-args", default="", metavar="ARGS",
                   help="extra arguments for siggate train, e.g. \"--set model.attn=false\" (recipe experiments; "
                        "recorded in each row's command, and rows with them never enter the README table)")
    p.add_argument("--recipe", default=None, metavar="NAME",
                   help="a name for the --siggate-args variant, shown in the recipe table (e.g. svr_minmax)")
    args = p.parse_args(argv)
    if args.recipe and not args.siggate_args.strip():
        p.error("--recipe names a --siggate-args variant; give both (siggate's defaults are the rows without one)")
    if args.report:  # the README's tables are the committed results' alone
        if not args.results.is_file():
            p.error(f"--report --results {args.results}: no such file")
        if args.results.resolve() != DEFAULT_RESULTS.resolve():
            p.error(f"--report writes {README}, whose tables come from {DEFAULT_RESULTS}; drop --results")
        try:
            recipe = load_results(args.recipe_results) if args.recipe_results.exists() else None
            changed = write_readme(load_results(args.results), README, recipe)
        except ResultsFileError as e:
            refuse(str(e))
        print(f"{README}: {'updated' if changed else 'unchanged'}")
        return 0
    try:
        return cmd_run(args)
    except ResultsFileError as e:
        refuse(str(e))


if __name__ == "__main__":
    sys.exit(main())
