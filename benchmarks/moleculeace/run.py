"""MoleculeACE benchmark: siggate beside fingerprint models (a random forest and MoleculeACE's own
SVM), chemprop and the published results of CheMeleon, RF, SVM, minimol, chemprop and ACANet
(van Tilborg et al., JCIM 2022).

* **Data.** The 30 CSVs inside the installed ``MoleculeACE==3.0.0`` wheel
  (``pip install --no-deps MoleculeACE==3.0.0``), found through the package's file list and read
  as files: its Python modules are never imported. The sha256 of every file is recorded.
* **Protocol.** The file's ``split`` column is train/test. Validation is 10% of train, drawn with a
  fixed seed per target (``crc32`` of the target's name), the same for every tool and training seed.
  The random forest has no use for a validation set and trains on the whole train split, as the
  published RF rows do; the SVM chooses its grid point on the validation rows, then refits on
  the whole train split.
* **Metrics.** Test RMSE overall, on ``cliff_mol == 1`` compounds and on the rest, per target and as
  the mean over targets (of each target's mean over seeds). A (tool, recipe) is complete only when
  every target has the same seeds.
* **Targets.** The 20 public targets only; the 10 reserved ones are refused everywhere.

    python benchmarks/moleculeace/run.py --tools rf_morgan,svm_ecfp --seeds 0,1,2   # calibration rows
    python benchmarks/moleculeace/run.py --tools siggate --seeds 0,1,2       # siggate train --data defaults
    python benchmarks/moleculeace/run.py --tools siggate --recipe gate-none \\
        --siggate-args "--set model.attn=true --set model.gate=none"          # a named recipe
    python benchmarks/moleculeace/run.py --report                              # summary, tests and README table

The runs are one study (:mod:`siggate.train.study`): every (tool, recipe, target, seed) is planned
against the results file (a :class:`~siggate.train.study.RowStore` of ``rows``) by the study's
reuse rule (an ``ok`` row is skipped, a failed one tried again, a recipe name with other
arguments refused), then executed one after another here, each row recorded under the file's
lock as it finishes; earlier versions of this script take the same lock, so several processes
may add rows to one file. It shares its runners, metric code and study driver with
``benchmarks/peers/run.py``.
"""

from __future__ import annotations

import argparse
import csv
import importlib.metadata
import io
import json
import math
import os
import statistics
import sys
import time
import zlib
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from siggate.files import atomic_write_bytes
from siggate.stats import p_text
from siggate.train.executor import CallRequest, load_script
from siggate.train.study import ResultsFileError, RowStore, StudyRun, reuse_status

HERE = Path(__file__).resolve().parent


#: ``benchmarks/peers/run.py`` (tools, subprocess runner, metrics, results I/O), under its own name
peers = load_script("peers_run", HERE.parent / "peers" / "run.py", reuse=True)

PACKAGE, VERSION = "MoleculeACE", "3.0.0"
DATA_IN_WHEEL = "MoleculeACE/Data/benchmark_data"
PUBLIC = ("CHEMBL1871_Ki", "CHEMBL2034_Ki", "CHEMBL2047_EC50", "CHEMBL214_Ki", "CHEMBL219_Ki", "CHEMBL231_Ki",
          "CHEMBL233_Ki", "CHEMBL234_Ki", "CHEMBL235_EC50", "CHEMBL236_Ki", "CHEMBL237_EC50", "CHEMBL239_EC50",
          "CHEMBL262_Ki", "CHEMBL264_Ki", "CHEMBL2971_Ki", "CHEMBL3979_EC50", "CHEMBL4005_Ki", "CHEMBL4203_Ki",
          "CHEMBL4616_EC50", "CHEMBL4792_Ki")
#: kept to check the work from outside: never trained, tuned or evaluated on here
RESERVED = ("CHEMBL1862_Ki", "CHEMBL204_Ki", "CHEMBL2147_Ki", "CHEMBL218_EC50", "CHEMBL228_Ki", "CHEMBL237_Ki",
            "CHEMBL238_Ki", "CHEMBL244_Ki", "CHEMBL2835_Ki", "CHEMBL287_Ki")
VAL_FRACTION = 0.1
TOOLS = ("rf_morgan", "svm_ecfp", "svr_minmax", "siggate", "chemprop")
DEFAULT_RESULTS = HERE / "results" / "results.json"
ANCHORS = HERE / "anchors.json"
README = HERE / "README.md"
CACHE = Path(os.environ.get("SIGGATE_MOLECULEACE_WORK", "~/.cache/siggate/moleculeace")).expanduser()
TABLE_START, TABLE_END = "<!-- moleculeace-table:start -->", "<!-- moleculeace-table:end -->"
METRICS = ("rmse", "rmse_cliff", "rmse_noncliff")
#: the published RF and SVM rows must be reproduced within this mean RMSE (the data and split check)
CALIBRATION_TOLERANCE = 0.01


def refuse(message: str):
    """Bad input: one line on stderr naming the cause and the fix, exit code 2."""
    peers.refuse(message, "moleculeace")


@dataclass(frozen=True)
class Target:
    """A MoleculeACE target as the peers' tools take a task."""

    name: str
    task: str = "regression"
    chemprop_task: str = "regression"
    metric: str = "rmse"


# ----------------------------------------------------------------------------- data


def source_csv(target: str) -> Path:
    """The target's CSV inside the installed wheel (the package is located, never imported)."""
    from siggate.data.corpus import wheel_file

    check_public(target)
    try:
        return wheel_file(PACKAGE, VERSION, f"{DATA_IN_WHEEL}/{target}.csv")
    except FileNotFoundError as exc:
        raise SystemExit(str(exc)) from None


def check_public(target: str) -> None:
    if target in RESERVED:
        refuse(f"{target} is a reserved MoleculeACE target (kept to check the work from outside): "
                         f"use one of the {len(PUBLIC)} public targets")
    if target not in PUBLIC:
        refuse(f"unknown target {target!r}; public targets: {', '.join(PUBLIC)}")


def val_seed(target: str) -> int:
    """The fixed seed of a target's validation draw (never the training seed)."""
    return zlib.crc32(target.encode())


def split_labels(file_split: list[str], seed: int, frac: float = VAL_FRACTION) -> list[str]:
    """``train``/``val``/``test`` per row: the file's test rows stay test; ``round(frac * n_train)``
    of its train rows, drawn with ``seed``, become validation."""
    import numpy as np

    bad = sorted(set(file_split) - {"train", "test"})
    if bad:
        raise ValueError(f"split column holds {bad}; expected train/test")
    train = [i for i, s in enumerate(file_split) if s == "train"]
    val = set(np.random.default_rng(seed).choice(train, size=int(round(frac * len(train))), replace=False).tolist())
    return ["test" if s == "test" else ("val" if i in val else "train") for i, s in enumerate(file_split)]


def read_target(target: str) -> list[dict]:
    """Rows of the target's CSV: ``smiles``, ``y`` (float), ``cliff`` (0/1), ``file_split``."""
    with open(source_csv(target), newline="", encoding="utf-8") as fh:
        return [{"smiles": r["smiles"], "y": float(r["y"]), "cliff": int(r["cliff_mol"]), "file_split": r["split"]}
                for r in csv.DictReader(fh)]


def _csv_bytes(header: list[str], rows) -> bytes:
    text = io.StringIO(newline="")
    w = csv.writer(text)
    w.writerow(header)
    w.writerows(rows)
    return text.getvalue().encode("utf-8")


def _write_if_changed(path: Path, data: bytes) -> None:
    """``path`` holding ``data``: written whole (a run of another process reading it never sees
    it half-written: every harness invocation builds its targets, and two lanes share the data
    folder), and not touched when it holds them already."""
    if not (path.is_file() and path.read_bytes() == data):
        atomic_write_bytes(path, data)


def build(target: str, data_dir: Path) -> dict:
    """Write the target's ``data.csv`` (smiles, y, split), ``test.csv`` (smiles, y, cliff) and
    ``splits.json`` (chemprop's format) under ``data_dir/target``; its meta dict."""
    rows = read_target(target)
    labels = split_labels([r["file_split"] for r in rows], val_seed(target))
    d = data_dir / target
    d.mkdir(parents=True, exist_ok=True)
    split = {k: [i for i, lab in enumerate(labels) if lab == k] for k in ("train", "val", "test")}
    _write_if_changed(d / "data.csv", _csv_bytes(["smiles", "y", "split"], (
        [r["smiles"], repr(r["y"]), lab] for r, lab in zip(rows, labels))))
    _write_if_changed(d / "test.csv", _csv_bytes(["smiles", "y", "cliff"], (
        [r["smiles"], repr(r["y"]), r["cliff"]] for r, lab in zip(rows, labels) if lab == "test")))
    _write_if_changed(d / "splits.json", json.dumps([split]).encode())
    return {"target": target, "source": f"{PACKAGE}=={VERSION}:{DATA_IN_WHEEL}/{target}.csv",
            "source_sha256": peers.T._sha256(source_csv(target)), "size": len(rows),
            "split_sizes": {k: len(v) for k, v in split.items()}, "val_seed": val_seed(target),
            "test_cliff": sum(r["cliff"] for r, lab in zip(rows, labels) if lab == "test"),
            "data_sha256": peers.T._sha256(d / "data.csv"), "splits_sha256": peers.T._sha256(d / "splits.json")}


def read_test(tdir: Path) -> tuple[list[str], list[float], list[int]]:
    with open(tdir / "test.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    return [r["smiles"] for r in rows], [float(r["y"]) for r in rows], [int(r["cliff"]) for r in rows]


# ----------------------------------------------------------------------------- metrics


def cliff_metrics(smiles: list[str], y: list[float], cliff: list[int], pred_smiles: list[str], pred: list[float]) -> dict:
    """Test RMSE overall, on cliff compounds and on the rest (predictions in test-row order)."""
    out = {"rmse": peers.score("rmse", smiles, y, pred_smiles, pred)}
    for key, flag in (("rmse_cliff", 1), ("rmse_noncliff", 0)):
        idx = [i for i, c in enumerate(cliff) if c == flag]
        out[key] = peers.rmse([y[i] for i in idx], [pred[i] for i in idx]) if idx else float("nan")
    return out


# ----------------------------------------------------------------------------- fingerprint models


def morgan_bits(smiles: list[str], size: int):
    """Radius-2 Morgan (ECFP4) bit vectors of ``size`` bits, ``[n, size]`` uint8 (RDKit's
    generator; the same bits as ``GetMorganFingerprintAsBitVect(mol, 2, nBits=size)``)."""
    import numpy as np
    from rdkit import Chem
    from rdkit.Chem import rdFingerprintGenerator

    gen = rdFingerprintGenerator.GetMorganGenerator(radius=2, fpSize=size)
    return np.stack([gen.GetFingerprintAsNumPy(Chem.MolFromSmiles(s)) for s in smiles]).astype(np.uint8)


def _rows_by_split(tdir: Path):
    """``(smiles, y, {split: row indices})`` of a target's ``data.csv``."""
    import numpy as np

    smiles, y, split = peers.T.read_task_csv(tdir / "data.csv")
    return smiles, np.asarray(y, dtype=float), {k: [i for i, s in enumerate(split) if s == k] for k in ("train", "val", "test")}


class RandomForestMorgan:
    """The published baseline: ``RandomForestRegressor`` (100 trees, defaults) on 2,048-bit
    radius-2 Morgan bit vectors, target standardised with the training mean and std, trained on the
    whole train split (train + our validation rows). Runs in this process; CPU time from
    ``time.process_time`` (one thread)."""

    name = "rf_morgan"

    @staticmethod
    def fingerprints(smiles: list[str]):
        return morgan_bits(smiles, 2048)

    def version(self) -> str:
        return "scikit-learn " + importlib.metadata.version("scikit-learn")

    def run(self, task: Target, tdir: Path, out: Path, seed: int, epochs: int | None) -> dict:
        from sklearn.compose import TransformedTargetRegressor
        from sklearn.ensemble import RandomForestRegressor
        from sklearn.preprocessing import StandardScaler

        t0, c0 = time.perf_counter(), time.process_time()
        smiles, y, rows = _rows_by_split(tdir)
        fit, test = rows["train"] + rows["val"], rows["test"]
        x = self.fingerprints(smiles)
        model = TransformedTargetRegressor(regressor=RandomForestRegressor(n_estimators=100, random_state=seed, n_jobs=1),
                                           transformer=StandardScaler())
        model.fit(x[fit], y[fit])
        pred = model.predict(x[test]).ravel().tolist()
        return {"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0,
                "pred_smiles": [smiles[i] for i in test], "pred": pred, "fit_rows": len(fit),
                "command": f"RandomForestRegressor(n_estimators=100, random_state={seed}) on Morgan r2 2048 bits, "
                           "StandardScaler target, train+val rows"}


class SvmEcfp:
    """MoleculeACE's own best classical model (``SVM_ECFP`` in its results): scikit-learn's
    ``SVR`` with an RBF kernel on 1,024-bit radius-2 Morgan (ECFP4) bit vectors, on the raw
    target (MoleculeACE scales nothing for it), ``epsilon`` 0.1, ``C`` and ``gamma`` from
    MoleculeACE's grid (:data:`GRID`, its ``Data/configures/default/SVM.yml``).

    MoleculeACE picks the grid point by 5-fold cross-validation on its train split and refits
    on the whole train split. Here the grid point is the one with the lowest RMSE on our
    validation rows (fitted on the train rows; the first in grid order on a tie), then the model
    is refitted on train + validation, the whole train split, as MoleculeACE's final model is.
    Nothing depends on the seed (SVR is deterministic and the validation draw is fixed per
    target): the seeds repeat one result. The kernel is computed once per target from the
    bit vectors and handed to ``SVR(kernel="precomputed")``: the same kernel values as
    ``kernel="rbf"`` (``exp(-gamma * |a - b|^2)``), without recomputing them for every grid
    point. Runs in this process; CPU time from ``time.process_time`` (one thread)."""

    name = "svm_ecfp"
    #: MoleculeACE's grid (molML/MoleculeACE, MoleculeACE/Data/configures/default/SVM.yml)
    GRID = {"C": (1, 10, 100, 1000, 10000), "gamma": (1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1)}
    EPSILON = 0.1
    BITS = 1024

    def version(self) -> str:
        return "scikit-learn " + importlib.metadata.version("scikit-learn")

    @staticmethod
    def sq_distances(x):
        """Squared Euclidean distances between the rows of a 0/1 matrix: ``|a| + |b| - 2 a.b``."""
        import numpy as np

        x = x.astype(np.float64)
        n = x.sum(1)
        return np.maximum(n[:, None] + n[None, :] - 2.0 * (x @ x.T), 0.0)

    def run(self, task: Target, tdir: Path, out: Path, seed: int, epochs: int | None) -> dict:
        from threadpoolctl import threadpool_limits

        with threadpool_limits(1):  # one thread, as every tool gets
            return self._run(tdir)

    def _run(self, tdir: Path) -> dict:
        import numpy as np
        from sklearn.svm import SVR

        t0, c0 = time.perf_counter(), time.process_time()
        smiles, y, rows = _rows_by_split(tdir)
        tr, va, te = (np.asarray(rows[k]) for k in ("train", "val", "test"))
        fit = np.concatenate([tr, va])
        d2 = self.sq_distances(morgan_bits(smiles, self.BITS))
        grid = []
        for c in self.GRID["C"]:
            for gamma in self.GRID["gamma"]:
                k = np.exp(-gamma * d2)
                model = SVR(kernel="precomputed", C=c, epsilon=self.EPSILON).fit(k[np.ix_(tr, tr)], y[tr])
                val = float(np.sqrt(np.mean((model.predict(k[np.ix_(va, tr)]) - y[va]) ** 2)))
                grid.append({"C": c, "gamma": gamma, "val_rmse": val})
        best = min(grid, key=lambda g: g["val_rmse"])  # the first of equals: grid order
        k = np.exp(-best["gamma"] * d2)
        model = SVR(kernel="precomputed", C=best["C"], epsilon=self.EPSILON).fit(k[np.ix_(fit, fit)], y[fit])
        pred = model.predict(k[np.ix_(te, fit)]).tolist()
        return {"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0,
                "pred_smiles": [smiles[i] for i in te], "pred": pred, "fit_rows": len(fit),
                "selected": {"C": best["C"], "gamma": best["gamma"], "epsilon": self.EPSILON},
                "val_rmse": best["val_rmse"], "grid": grid,
                "command": f"SVR(kernel=rbf, C={best['C']}, gamma={best['gamma']}, epsilon={self.EPSILON}) on ECFP4 "
                           f"{self.BITS} bits, raw target, C and gamma chosen on the validation rows from MoleculeACE's "
                           "grid, refitted on train+val rows"}


class SvrMinmax:
    """Issue 32's baseline, "as a new user would": scikit-learn's ``SVR`` on the MinMax kernel
    (Tanimoto on counts) of 2,048-bit radius-2 count Morgan fingerprints, target standardised with
    the fitted rows' mean and std, ``C=5``, ``epsilon=0.05``, fitted on the whole train split
    (train + our validation rows); nothing is chosen, on validation or elsewhere. The issue
    reports 0.650 mean test RMSE for it. The kernel and fingerprints are siggate's
    (:func:`siggate.data.fingerprints.minmax_kernel`, ``morgan_counts``), the model is not
    siggate's ``svr`` member (which chooses kinds, radius and C on val and refits). Deterministic:
    the seeds repeat one result. Runs in this process; CPU time from ``time.process_time``."""

    name = "svr_minmax"
    C, EPSILON, BITS = 5.0, 0.05, 2048

    def version(self) -> str:
        return "scikit-learn " + importlib.metadata.version("scikit-learn")

    def run(self, task: Target, tdir: Path, out: Path, seed: int, epochs: int | None) -> dict:
        from threadpoolctl import threadpool_limits

        with threadpool_limits(1):
            return self._run(tdir)

    def _run(self, tdir: Path) -> dict:
        import numpy as np
        from sklearn.svm import SVR

        from siggate.data.fingerprints import minmax_kernel, morgan_counts

        t0, c0 = time.perf_counter(), time.process_time()
        smiles, y, rows = _rows_by_split(tdir)
        fit, te = np.asarray(rows["train"] + rows["val"]), np.asarray(rows["test"])
        x = morgan_counts(smiles, 2, self.BITS, sparse=True)
        mean, std = y[fit].mean(), y[fit].std()
        model = SVR(kernel="precomputed", C=self.C, epsilon=self.EPSILON).fit(minmax_kernel(x[fit], x[fit]),
                                                                             (y[fit] - mean) / std)
        pred = (mean + std * model.predict(minmax_kernel(x[te], x[fit]))).tolist()
        return {"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0,
                "pred_smiles": [smiles[i] for i in te], "pred": pred, "fit_rows": len(fit),
                "command": f"SVR(kernel=MinMax, C={self.C}, epsilon={self.EPSILON}) on count Morgan r2 {self.BITS} "
                           "bins, standardised target, train+val rows, nothing chosen"}


#: the tools that run in this process, by name
FINGERPRINT_TOOLS = {t.name: t for t in (RandomForestMorgan, SvmEcfp, SvrMinmax)}


# ----------------------------------------------------------------------------- results


def row_key(r: dict) -> tuple:
    return (r["tool"], r["recipe"], r["target"], int(r["seed"]))


#: what a row means beyond its key: a recipe name run again with other arguments is a conflict
IDENTITY = ("siggate_args", "epochs")


def identity(extra: dict, epochs: int | None) -> dict:
    """The values of :data:`IDENTITY` a run's row will hold."""
    return {"siggate_args": extra.get("siggate_args"), "epochs": epochs}


def results_store(path: Path) -> RowStore:
    """The results file (``rows``: one per tool, recipe, target and seed; ``targets``: each
    target's data) as a :class:`~siggate.train.study.RowStore`, written under ``PATH.lock`` like
    the harness's earlier versions, so they can keep adding rows to it."""
    return RowStore(path, key=row_key, rows_field="rows", identity=IDENTITY,
                    order=lambda r: (r["tool"], r["recipe"], PUBLIC.index(r["target"]), r["seed"]))


def load_results(path: Path) -> dict:
    """The results file (empty when there is none), its rows' seeds as integers.

    Exits (2): a row that breaks the harnesses' row rule, or two rows of one key
    (:func:`checked_rows`)."""
    res = results_store(path).load()
    res.setdefault("targets", {})
    checked_rows(res["rows"], path)
    return res


#: what an ``ok`` row must hold as finite numbers: the scores the summary, ``--compare`` and
#: ``--best-of`` average
OK_ROW_NUMBERS = (*METRICS, "cpu_s")


def checked_rows(rows: list[dict], path: Path) -> list[dict]:
    """``rows`` of the results file ``path``, their seeds made integers (in place), by the
    harnesses' one row rule (:func:`peers.checked_rows`: a record of its tool, recipe and target
    and a whole-number seed; an ``ok`` row with a finite number of each of :data:`OK_ROW_NUMBERS`).

    Exits (2): a row that breaks it; two rows of one key (a hand-merged file: each would be
    averaged in)."""
    peers.checked_rows(rows, path, ("tool", "recipe", "target"), OK_ROW_NUMBERS, prog="moleculeace")
    seen = set()
    for r in rows:
        if row_key(r) in seen:
            refuse(f"{path} holds two rows of {row_key(r)}; keep one (each would be averaged in)")
        seen.add(row_key(r))
    return rows


def _git_commit() -> str | None:
    import subprocess

    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=HERE, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def run_row(runner, recipe: str, target: str, seed: int, meta: dict, tdir: str, out: str, epochs: int | None,
            extra: dict, store: RowStore, key: tuple) -> dict:
    """One (tool, recipe, target, seed) run in a fresh folder: its row, ``ok`` with the test
    RMSEs or ``failed`` with the error (``extra``: fields the row carries, e.g. siggate's
    arguments), in its folder claimed by :func:`peers.claimed_row`."""
    fields = {"tool": runner.name, "recipe": recipe, "target": target, "seed": seed, "epochs": epochs, **extra}
    return peers.claimed_row(out, identity(extra, epochs), store, key, fields,
                             lambda out: _run_row(runner, fields, meta, Path(tdir), out))


def _run_row(runner, fields: dict, meta: dict, tdir: Path, out: Path) -> dict:
    """:func:`run_row`'s run in its claimed folder ``out``; ``fields`` the row's identity
    (tool, recipe, target, seed, epochs, then the fields it carries)."""
    target, seed, epochs = fields["target"], fields["seed"], fields["epochs"]
    row = {k: fields[k] for k in ("tool", "recipe", "target", "seed", "epochs")}
    row.update({"source_sha256": meta["source_sha256"], "data_sha256": meta["data_sha256"],
                "cpu": peers._cpu_model(), "threads": 1, "load_avg_1m_at_start": round(os.getloadavg()[0], 2)})
    smiles, y, cliff = read_test(tdir)
    peers.progress(f"run  {runner.name} {fields['recipe']} {target} seed {seed}")
    try:
        row["tool_version"] = runner.version()  # a tool that is not there fails its row, not the harness
        r = runner.run(Target(target), tdir, out, seed, epochs)
        pred_smiles, pred = r.pop("pred_smiles"), r.pop("pred")
        row.update(status="ok", **cliff_metrics(smiles, y, cliff, pred_smiles, pred), n_test=len(y), **r)
        row["commit"] = r.get("git_commit") or _git_commit()
    except Exception as exc:
        row.update(status="failed", error=f"{type(exc).__name__}: {exc}", commit=_git_commit())
    for k in ("command", "predict_command"):
        if k in row:
            row[k] = peers._tilde(row[k])
    row.update(fields)  # the carried fields last (they were given, not measured)
    row["finished"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return row


def make_runner(tool: str, args):
    if tool == "siggate":
        return peers.Siggate(args.siggate, args.siggate_args)
    if tool == "chemprop":
        return peers.Chemprop(args.chemprop_venv)
    return FINGERPRINT_TOOLS[tool]()


def row_extra(tool: str, args) -> dict:
    """The fields a run's row carries beside its results: siggate's arguments, the smoke mark."""
    return {**({"siggate_args": args.siggate_args} if tool == "siggate" else {}), **({"smoke": True} if args.smoke else {})}


def recipe_of(tool: str, args) -> str:
    """The row's recipe: siggate's ``--recipe`` (``default`` without arguments), else ``default``
    (the other tools have one recipe each); with ``--smoke``, ``smoke`` (``RECIPE-smoke``), rows
    marked ``smoke`` that no table or test counts."""
    if args.smoke:  # never under a real recipe's name
        return f"{args.recipe}-smoke" if tool == "siggate" and args.recipe else "smoke"
    return args.recipe if tool == "siggate" and args.recipe else "default"


def cmd_run(args) -> int:
    targets = parse_targets(args.targets)
    tools = [t.strip() for t in args.tools.split(",") if t.strip()]
    if any(t not in TOOLS for t in tools):
        refuse(f"--tools: choose from {', '.join(TOOLS)}")
    if args.siggate_args.strip() and not args.recipe:
        refuse("--siggate-args needs --recipe NAME: the name of its rows in the table (e.g. svr_minmax)")
    if args.recipe and args.recipe != "default" and not args.siggate_args.strip() and "siggate" in tools:
        # rows of a named recipe without arguments (gnn-alone) are an old default's: today's would differ
        refuse(f"--recipe {args.recipe} needs its --siggate-args; siggate's defaults are the recipe "
                         "'default' (give no --recipe), whose meaning follows the commit that runs them")
    seeds = parse_seeds(args.seeds)
    epochs = peers.SMOKE_EPOCHS if args.smoke else None
    rows = load_results(args.results)["rows"]
    for tool in tools:
        check_same_recipe(rows, {"tool": tool, "recipe": recipe_of(tool, args),
                                 **identity(row_extra(tool, args), epochs)}, args.results)
    runners = {t: make_runner(t, args) for t in tools}
    store = results_store(args.results)
    runs = []
    for target in targets:
        meta = build(target, args.data_dir)
        store.update(lambda res, meta=meta: res.setdefault("targets", {}).__setitem__(meta["target"], meta))
        for seed in seeds:
            for tool, runner in runners.items():
                rec = recipe_of(tool, args)
                key = (tool, rec, target, seed)
                extra = row_extra(tool, args)
                out = args.work_dir / tool / rec / target / f"seed{seed}"
                request = CallRequest(key, f"{__name__}:run_row", {
                    "runner": runner, "recipe": rec, "target": target, "seed": seed, "meta": meta,
                    "tdir": str(args.data_dir / target), "out": str(out), "epochs": epochs, "extra": extra,
                    "store": store, "key": key}, out)
                runs.append(StudyRun(key, out, identity(extra, epochs), request, tag=(tool, rec, target, "seed", seed)))
    status = peers.run_study(runs, store, "moleculeace", lambda r: f"rmse {r['rmse']:.4f} cliff {r['rmse_cliff']:.4f} "
                                                                   f"cpu {r['cpu_s']:.0f}s")
    report(args.results)
    return status


def check_same_recipe(rows: list[dict], row: dict, results: Path) -> None:
    """Refuse ``row`` (its ``tool``, ``recipe`` and identity fields) where ``rows`` hold the same
    (tool, recipe) run with other arguments on any target or seed: one name, one recipe."""
    for r in rows:
        if r["tool"] == row["tool"] and r["recipe"] == row["recipe"]:
            differ = [f for f in IDENTITY if f in row and r.get(f) != row.get(f)]
            if differ:
                f = differ[0]
                refuse(f"{results} holds {row['tool']} rows of recipe {row['recipe']!r} with {f} {r.get(f)!r}, not "
                       f"{row.get(f)!r}: one recipe name is one recipe; choose another --recipe")


def import_rows(source: Path, results: Path) -> tuple[int, int]:
    """Add the ``ok`` rows of ``source`` to ``results`` with their targets' data records: a row
    whose key is ``new`` there (:func:`~siggate.train.study.reuse_status`) is added, a ``done``
    one is kept as it is, and a ``conflict`` (the same key run with other arguments) refuses the
    whole import (exit 2). Returns ``(added, already there)``."""
    if not Path(source).is_file():
        refuse(f"--import-rows {source}: no such file; give the results.json of the other worktree")
    src = load_results(source)
    rows = [r for r in src["rows"] if r.get("status") == "ok"]
    here = load_results(results)["rows"]
    for r in rows:  # a reserved target first: no row of one is read further
        check_public(r["target"])
    store = results_store(results)
    states = [reuse_status(results, {f: r.get(f) for f in IDENTITY}, store, row_key(r)) for r in rows]
    conflicts = [f"{row_key(r)}: {s.reason}" for r, s in zip(rows, states) if s.state == "conflict"]
    if conflicts:
        for line in conflicts:
            print(f"moleculeace: {results} holds another run of {line}", file=sys.stderr)
        raise SystemExit(2)
    new = [r for r, s in zip(rows, states) if s.state == "new"]
    for i, r in enumerate(new):  # a row already there is kept as it is, whatever else its recipe's rows hold;
        check_same_recipe(here + new[:i], r, results)  # the new rows of one recipe agree among themselves too

    def add(res: dict) -> None:
        for r in new:
            res.setdefault("targets", {}).setdefault(r["target"], src["targets"].get(r["target"]))
            res["rows"] = [x for x in res["rows"] if row_key(x) != row_key(r)] + [r]
        res["rows"].sort(key=store.order)

    store.update(add)
    return len(new), len(rows) - len(new)


def parse_targets(text: str | None) -> list[str]:
    targets = [t.strip() for t in text.split(",") if t.strip()] if text else list(PUBLIC)
    for t in targets:
        check_public(t)
    return targets


# ----------------------------------------------------------------------------- summary and report


def parse_seeds(text: str) -> list[int]:
    """``--seeds`` (``"0,1,2"``) as integers from 0, at least one, each once; ValueError on anything
    else (``0,,1`` and ``" "`` were read as 0,1 and no seed, a negative seed as one)."""
    seeds = [int(x) for x in text.split(",")]
    if not seeds or min(seeds) < 0 or len(set(seeds)) != len(seeds):
        raise ValueError(text)
    return seeds


def counted(rows: list[dict], tool: str, recipe: str) -> list[dict]:
    """The rows of one (tool, recipe) that results count: ``ok``, not a smoke run, of a public target."""
    return [r for r in rows if r["tool"] == tool and r["recipe"] == recipe and r.get("status") == "ok"
            and not r.get("smoke") and r["target"] in PUBLIC]


def per_target(rows: list[dict], tool: str, recipe: str, key: str) -> dict[str, float]:
    """``{target: mean over seeds of key}`` for one (tool, recipe)."""
    by: dict[str, list[float]] = {}
    for r in counted(rows, tool, recipe):
        by.setdefault(r["target"], []).append(float(r[key]))
    return {t: statistics.mean(v) for t, v in by.items()}


def seed_coverage(rows: list[dict], tool: str, recipe: str) -> dict[str, list[int]]:
    """``{target: sorted seeds with an ok row}`` of one (tool, recipe)."""
    by: dict[str, set[int]] = {}
    for r in counted(rows, tool, recipe):
        by.setdefault(r["target"], set()).add(int(r["seed"]))
    return {t: sorted(v) for t, v in by.items()}


def partial_reason(coverage: dict[str, list[int]]) -> str:
    """Why a (tool, recipe) is not complete: '' when every public target has the same seeds."""
    missing = len(PUBLIC) - len(coverage)
    if missing:
        return f"{len(coverage)} of {len(PUBLIC)} targets"
    if len({tuple(v) for v in coverage.values()}) > 1:
        return "seeds differ across targets"
    return ""


def _mean_or_none(values: list) -> float | None:
    return None if any(v is None for v in values) else statistics.mean(values)


def summarize(rows: list[dict], anchors: dict) -> list[dict]:
    """Per (tool, recipe): the mean over targets of each target's mean over seeds, which seeds
    it covers and the commits its rows were measured at (``commits``). It is ``complete`` only when every public target has the same seeds
    (``seeds``); otherwise ``partial`` says why and ``seed_targets`` how many targets each seed
    has. The published anchors follow, over the same 20 public targets."""
    out = []
    for tool, recipe in sorted({(r["tool"], r["recipe"]) for r in rows if r.get("status") == "ok"}):
        commits = sorted({(r.get("commit") or "?")[:7] for r in rows
                          if (r["tool"], r["recipe"], r.get("status")) == (tool, recipe, "ok")})
        # one recipe name run at several commits is named so: the table does not say the code was one
        # rows of one recipe name run with other arguments before check_same_recipe refused it (two --init
        # paths): named so, as the commits are
        argsets = len({tuple(repr(r.get(f)) for f in IDENTITY) for r in counted(rows, tool, recipe)})
        entry = {"tool": tool, "recipe": recipe, "commits": commits, "argument_sets": argsets,
                 "source": f"measured here at {commits[0] if len(commits) == 1 else f'{len(commits)} commits'}"
                           + (f", {argsets} argument sets" if argsets > 1 else "")}
        for key in (*METRICS, "cpu_s"):
            pt = per_target(rows, tool, recipe, key)
            entry[key] = statistics.mean(pt.values()) if pt else float("nan")
        coverage = seed_coverage(rows, tool, recipe)
        entry["targets"] = len(coverage)
        entry["seeds"] = sorted({s for v in coverage.values() for s in v})
        entry["seed_targets"] = {str(s): sum(s in v for v in coverage.values()) for s in entry["seeds"]}
        entry["runs"] = sum(len(v) for v in coverage.values())
        entry["partial"] = partial_reason(coverage)
        entry["complete"] = not entry["partial"]
        out.append(entry)
    for tool, a in anchors.get("tools", {}).items():
        pt, src = a["per_target"], a["source"]
        out.append({"tool": tool, "recipe": "published", "source": f"{src['repository']}@{src['commit'][:7]}",
                    **{k: _mean_or_none([pt[t].get(k) for t in PUBLIC]) for k in METRICS},
                    "targets": len(PUBLIC), "seeds": src["seeds"], "complete": True, "partial": ""})
    return out


#: local rows that must reproduce the published row of the same model (the data and split check)
CALIBRATED = ("rf_morgan", "svm_ecfp")


def calibration(summary: list[dict]) -> dict:
    """Each of :data:`CALIBRATED`'s local ``default`` rows against its published row, over the
    public targets: ``pass`` within :data:`CALIBRATION_TOLERANCE` mean RMSE, ``fail``, or
    ``not run`` (no complete local row)."""
    out: dict = {"tolerance": CALIBRATION_TOLERANCE}
    for tool in CALIBRATED:
        local = next((s for s in summary if s["tool"] == tool and s["recipe"] == "default"), None)
        pub = next((s for s in summary if s["tool"] == tool and s["recipe"] == "published"), None)
        if local is None or pub is None or not local["complete"]:
            out[tool] = {"status": "not run"}
            continue
        diff = local["rmse"] - pub["rmse"]
        out[tool] = {"status": "pass" if abs(diff) <= CALIBRATION_TOLERANCE else "fail", "local_rmse": local["rmse"],
                     "published_rmse": pub["rmse"], "diff": diff, "local_seeds": local["seeds"],
                     "local_cliff_rmse": local["rmse_cliff"], "published_cliff_rmse": pub["rmse_cliff"]}
    return out


#: the seeds the gate study plans on every public target (issue 28: seed 0 first, then 1 and 2)
GATE_STUDY_SEEDS = (0, 1, 2)


def paired_recipes(rows: list[dict], base: str, arm: str, metric: str = "rmse", seeds=None) -> dict:
    """siggate recipe ``arm`` against recipe ``base``, paired by target: each target's mean over the
    seeds both ran (of ``seeds``, default all), :func:`siggate.stats.compare_paired` over the targets
    (``p_wilcoxon``: the Wilcoxon signed-rank test) and the 95% t interval of the mean difference
    (``arm - base``; negative is lower). Records the pairs, the seeds both ran (``run_seeds``) and
    whether it is ``complete``: every public target with all of ``seeds`` (default
    :data:`GATE_STUDY_SEEDS`) in both."""
    import numpy as np

    from siggate import stats

    planned = set(GATE_STUDY_SEEDS) if seeds is None else {int(s) for s in seeds}
    seeds_of = lambda rec: {(t, s) for t, ss in seed_coverage(rows, "siggate", rec).items()  # noqa: E731
                            for s in ss if seeds is None or s in planned}
    common = seeds_of(base) & seeds_of(arm)
    pick = lambda rec: per_target([r for r in rows if (r["target"], int(r["seed"])) in common], "siggate", rec, metric)  # noqa: E731
    a, b = pick(base), pick(arm)
    c = stats.compare_paired(a, b, higher_is_better=False)
    c.update(stats.paired_effect(stats.rounded_difference(np.array([a[t] for t in c["seeds"]]),
                                                         np.array([b[t] for t in c["seeds"]]))))
    by_target = {t: {s for u, s in common if u == t} for t in PUBLIC}
    c.update(arm=arm, base=base, metric=metric, pairs=[{"target": t, "base": a[t], "arm": b[t]} for t in c["seeds"]],
             seed_pairs=len(common), run_seeds=sorted({s for _, s in common}), planned_seeds=sorted(planned),
             complete=all(done >= planned for done in by_target.values()))
    return c


def gate_study(rows: list[dict], base: str, arms: list[str], claims: dict | None = None, budget: str | None = None) -> dict:
    """Each recipe of ``arms`` against ``base`` (for the gate: ``gate=none``) by
    :func:`paired_recipes` on the test RMSE, Holm over the arms (``p_holm_wilcoxon``). ``claims``
    (arm -> the claim a rejection would support) and ``budget`` (how the arms were trained) are
    recorded for the claims table (:class:`Study`)."""
    from siggate import stats
    from siggate.analysis.claims import MOLECULEACE_STUDY

    # the planned seeds alone: a seed 3 run beside them is outside the study its verdict is about
    tests = [paired_recipes(rows, base, arm, seeds=GATE_STUDY_SEEDS) for arm in arms]
    for c, adj in zip(tests, stats.holm([c["p_wilcoxon"] for c in tests], untested_count=True)):
        c["p_holm_wilcoxon"] = adj
        if claims and c["arm"] in claims:
            c["claim"] = claims[c["arm"]]
    return {"kind": MOLECULEACE_STUDY, "base": base, "arms": arms, "metric": "rmse", "planned_targets": len(PUBLIC),
            "planned_seeds": list(GATE_STUDY_SEEDS), **({"budget": budget} if budget else {}), "tests": tests}


@dataclass(frozen=True)
class Study:
    """A paired study of siggate recipes that :func:`report` keeps in ``results.json`` (issue 28):
    each arm against ``base``, Holm over the arms, which are fixed in advance (a win is not judged
    before a planned arm has rows). ``claims``: arm -> the claim a rejection supports, as the
    claims table states it; ``budget``: how the arms were trained."""

    base: str
    claims: dict
    budget: str

    @property
    def arms(self) -> list[str]:
        return list(self.claims)


def _recipe_seeds(rows: list[dict], recipe: str) -> str:
    return ",".join(map(str, sorted({s for v in seed_coverage(rows, "siggate", recipe).values() for s in v}))) or "none"


def compare_text(rows: list[dict], base: str, arm: str, seeds=None) -> str | None:
    """``--compare BASE,ARM``: :func:`paired_recipes` on the test RMSE and the cliff RMSE, one line
    each; ``None`` when the two share no (target, seed)."""
    out = []
    for metric in ("rmse", "rmse_cliff"):
        c = paired_recipes(rows, base, arm, metric, seeds)
        n = c["n_pairs"]
        if n == 0:
            return None
        p = c["p_wilcoxon"]
        lo, hi = c["ci95"]
        out.append(f"{metric}: {arm} {c['mean_b']:.4f} vs {base} {c['mean_a']:.4f}, difference {c['diff_mean']:+.4f} "
                   f"(95% CI {lo:+.4f} to {hi:+.4f}), lower on {c['wins']} of {n} targets, Wilcoxon p = "
                   + p_text(p, missing="–"))
    coverage = "complete" if c["complete"] else "incomplete"
    return (f"{arm} against {base}: {n} targets, seeds {','.join(map(str, c['run_seeds']))} "
            f"({c['seed_pairs']} target-seed pairs; {coverage}: every target with seeds "
            f"{','.join(map(str, c['planned_seeds']))})\n"
            + "\n".join(out))


def best_of_text(results: dict, recipe: str) -> str | None:
    """``--best-of RECIPE``: for the test RMSE and the cliff RMSE, the mean over the public targets
    of each target's lowest published row (``anchors``), of the lowest of those and RECIPE's mean
    over its seeds, and of RECIPE alone, with on how many targets RECIPE is below every published
    row: what picking the best tool per target after the fact would score, the bound a default
    that is one model for every target is measured against. ``None`` when RECIPE lacks a public
    target."""
    tools = (results.get("anchors") or {}).get("tools", {})
    out = []
    for metric in ("rmse", "rmse_cliff"):
        ours = per_target([r for r in results["rows"] if r["target"] in PUBLIC], "siggate", recipe, metric)
        if len(ours) < len(PUBLIC):
            return None
        published = {t: min((v["per_target"][t][metric] for v in tools.values()
                             if (v.get("per_target", {}).get(t) or {}).get(metric) is not None), default=math.inf)
                     for t in PUBLIC}
        known = [t for t in PUBLIC if math.isfinite(published[t])]
        if not known:  # (a mean of no targets: a StatisticsError)
            refuse("--best-of: the results file holds no published rows (its 'anchors'); run the harness's --report "
                   "with the committed anchors.json beside it, or give the committed results file")
        out.append(f"{metric}: the lowest published row per target {statistics.mean(published[t] for t in known):.4f} "
                   f"({len(known)} targets), the lowest of those and {recipe} "
                   f"{statistics.mean(min(published[t], ours[t]) for t in PUBLIC):.4f}, {recipe} alone "
                   f"{statistics.mean(ours.values()):.4f} (below every published row on "
                   f"{sum(ours[t] < published[t] for t in PUBLIC)} of {len(PUBLIC)} targets)")
    return "\n".join(out)


def _fmt(v: float | None, d: int = 3) -> str:
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{d}f}"


def _seeds_cell(s: dict) -> str:
    """The seeds of a summary row: the list when every target has them, else each seed's targets."""
    if s["seeds"] is None:
        return "one run"
    if s["complete"]:
        return ",".join(map(str, s["seeds"]))
    return ", ".join(f"{seed} ({n} of {len(PUBLIC)})" for seed, n in s["seed_targets"].items())


def table_markdown(res: dict) -> str:
    summary, cal = res.get("summary", []), res.get("calibration", {})
    if not summary:
        return "_Not run yet._"
    lines = ["Mean over the 20 public targets of each target's mean over seeds (test RMSE, lower is better). "
             "A row is complete only when every target has the same seeds; a partial row is listed last and is "
             "not comparable:", "",
             "| tool | recipe | source | RMSE | cliff RMSE | non-cliff RMSE | targets | seeds | CPU s per run, as the RMSE is averaged |",
             "|---|---|---|---|---|---|---|---|---|"]
    for s in sorted(summary, key=lambda s: (not s["complete"], s.get("rmse", 9), s["tool"])):
        targets = s["targets"] if s["complete"] else f"{s['targets']} (partial: {s['partial']})"
        lines.append(f"| {s['tool']} | {s['recipe']} | {s['source']} | {_fmt(s['rmse'])} | {_fmt(s['rmse_cliff'])} | "
                     f"{_fmt(s['rmse_noncliff'])} | {targets} | {_seeds_cell(s)} | {_fmt(s.get('cpu_s'), 0)} |")
    checked = [(t, c) for t, c in cal.items() if isinstance(c, dict) and c.get("status") not in (None, "not run")]
    if checked:
        lines += ["", f"Calibration (each local row against the published row of the same model, tolerance "
                      f"{cal['tolerance']} mean RMSE): " + "; ".join(
                          f"{t} **{c['status']}**, {_fmt(c['local_rmse'], 4)} vs {_fmt(c['published_rmse'], 4)} "
                          f"(difference {c['diff']:+.4f}, local seeds {','.join(map(str, c['local_seeds']))})"
                          for t, c in checked) + "."]
    anchors = res.get("anchors", {}).get("tools", {})
    ours = [(s["tool"], s["recipe"]) for s in summary if s["recipe"] != "published"]
    lines += ["", "Per target (ours: mean over seeds; published: as each source gives it, see `anchors.json`):", "",
              "| target | " + " | ".join(f"{t} (pub.)" for t in anchors) + " | "
              + " | ".join(f"{t}/{r}" for t, r in ours) + " |",
              "|---|" + "---|" * (len(anchors) + len(ours))]
    rows = res.get("rows", [])
    cols = [per_target(rows, t, r, "rmse") for t, r in ours]
    for target in PUBLIC:
        lines.append(f"| {target} | " + " | ".join(_fmt(a["per_target"][target]["rmse"]) for a in anchors.values())
                     + " | " + " | ".join(_fmt(c.get(target)) for c in cols) + " |")
    return "\n".join(lines)


_FINE_TUNED = ("the csv recipe's schedule at f285fbd (as `pretrained-gine`), attention on, fine-tuned from each "
               "transformer's own descriptor pretraining (benchmarks/pretrain_gate)")
#: the studies :func:`report` keeps, by their key in ``results.json`` (issue 28 items 1 and 3)
STUDIES = {
    "gate_study": Study("gate-none", {
        "gate-elementwise": "the elementwise gate beats GraphGPS on MoleculeACE from scratch (20 public targets, "
                            "p < 0.05)"}, "the csv recipe's full schedule, attention on, from scratch"),
    "pretrained_gate_study": Study("pt-attn-none", {
        "pt-attn-elementwise": "the elementwise gate beats GraphGPS on MoleculeACE after descriptor pretraining "
                               "(20 public targets, p < 0.05)"}, _FINE_TUNED),
    "pretrained_vs_gine": Study("pretrained-gine", {
        "pt-attn-elementwise": "the pretrained gated transformer beats the pretrained GINE on MoleculeACE "
                               "(20 public targets, p < 0.05)",
        "pt-attn-none": "the pretrained ungated transformer beats the pretrained GINE on MoleculeACE "
                        "(20 public targets, p < 0.05)"}, _FINE_TUNED),
}
#: the from-scratch gate study's arms (its Holm family)
GATE_STUDY_ARMS = tuple(STUDIES["gate_study"].arms)


def report(path: Path, studies: dict = STUDIES) -> dict:
    """Recompute ``anchors``, ``summary``, ``calibration`` and each of ``studies`` in the results
    file and the README table from its rows (a study once its base and every arm have rows, else
    ``null``)."""
    def change(res: dict) -> None:
        res.setdefault("targets", {})
        checked_rows(res["rows"], path)
        res["anchors"] = json.loads(ANCHORS.read_text())
        res["summary"] = summarize(res["rows"], res["anchors"])
        res["calibration"] = calibration(res["summary"])
        recipes = {r["recipe"] for r in res["rows"] if r["tool"] == "siggate"}
        for key, st in studies.items():
            ready = st.base in recipes and all(a in recipes for a in st.arms)
            res[key] = gate_study(res["rows"], st.base, st.arms, st.claims, st.budget) if ready else None

    res = results_store(path).update(change)
    if path.resolve() == DEFAULT_RESULTS.resolve() and README.exists():
        text = README.read_text()
        new = peers._replace_section(text, TABLE_START, TABLE_END, table_markdown(res), README)
        if new != text:
            README.write_text(new)
    return res


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--targets", default=None, help="comma-separated public targets (default: all 20)")
    p.add_argument("--tools", default="rf_morgan,siggate", help=f"comma-separated, from {', '.join(TOOLS)}")
    p.add_argument("--seeds", default="0,1,2", help="training seeds (default: 0,1,2)")
    p.add_argument("--recipe", default=None, metavar="NAME",
                   help="name of siggate's rows (default: 'default'; required with --siggate-args), e.g. svr_minmax")
    p.add_argument("--siggate-args", default="", metavar="ARGS",
                   help="arguments added to siggate train, e.g. \"--members svr\" (a recipe; needs --recipe)")
    p.add_argument("--siggate", default=None, help="siggate executable (default: the one next to this Python)")
    p.add_argument("--chemprop-venv", type=Path, default=peers.DEFAULT_CHEMPROP_VENV)
    p.add_argument("--smoke", action="store_true", help=f"{peers.SMOKE_EPOCHS} epochs per tool, recipe 'smoke'")
    p.add_argument("--report", action="store_true", help="only recompute the summary, tests and README table")
    p.add_argument("--compare", default=None, metavar="BASE,ARM",
                   help="only print ARM's recipe against BASE's, paired by target over the seeds both ran "
                        "(of --seeds): mean difference, 95%% CI, wins and the Wilcoxon p, for RMSE and cliff RMSE")
    p.add_argument("--best-of", default=None, metavar="RECIPE",
                   help="print what picking, per target, the lowest of every published row (and of RECIPE) scores")
    p.add_argument("--import-rows", type=Path, default=None, metavar="FILE",
                   help="add the ok rows of another results file (e.g. one written in another worktree) to "
                        "--results, by the study's reuse rule: rows already there are kept, conflicts refused")
    p.add_argument("--results", type=Path, default=DEFAULT_RESULTS)
    p.add_argument("--data-dir", type=Path, default=CACHE / "data")
    p.add_argument("--work-dir", type=Path, default=CACHE / "runs")
    args = p.parse_args(argv)
    try:
        seeds = parse_seeds(args.seeds)
    except ValueError:
        p.error(f"--seeds {args.seeds!r}: give distinct comma-separated whole numbers from 0, e.g. 0,1,2")
    try:
        return _main(p, args, seeds)
    except ResultsFileError as e:  # --results or --import-rows names a file that is not one
        refuse(str(e))


def _main(p: argparse.ArgumentParser, args, seeds) -> int:
    for flag, given in (("--compare", args.compare), ("--best-of", args.best_of)):
        if given is not None and not args.results.is_file():  # (it read as a file without that recipe's rows)
            refuse(f"{flag} --results {args.results}: no such file; name the results file to read")
    if args.compare is not None:
        names = [x.strip() for x in args.compare.split(",")]
        if len(names) != 2 or not all(names) or names[0] == names[1]:
            p.error(f"--compare {args.compare!r}: give two different recipe names, BASE,ARM")
        rows = load_results(args.results)["rows"]
        have = {r["recipe"] for r in rows if r["tool"] == "siggate"}
        missing = [n for n in names if n not in have]
        if missing:
            p.error(f"--compare: {args.results} has no siggate rows of recipe {missing[0]!r}; "
                    f"its recipes: {', '.join(sorted(have)) or 'none'}")
        text = compare_text(rows, *names, seeds=seeds)
        if text is None:
            refuse(f"--compare: {names[1]} and {names[0]} have no target with a seed in common of --seeds "
                   f"{args.seeds}; {names[0]} has seeds {_recipe_seeds(rows, names[0])}, {names[1]} "
                   f"{_recipe_seeds(rows, names[1])}")
        print(text)
        return 0
    if args.best_of is not None:
        text = best_of_text(load_results(args.results), args.best_of)
        if text is None:
            refuse(f"--best-of {args.best_of}: {args.results} has no siggate rows of that recipe on every public target")
        print(text)
        return 0
    if args.import_rows is not None:
        added, kept = import_rows(args.import_rows, args.results)
        print(f"{args.results}: {added} rows added from {args.import_rows}, {kept} already there")
    if args.report or args.import_rows is not None:
        if args.report and args.import_rows is None and not args.results.is_file():  # a typo made an empty file
            refuse(f"--report --results {args.results}: no such file; name the results file to report on")
        res = report(args.results)
        print(table_markdown(res))
        return 0
    return cmd_run(args)


if __name__ == "__main__":
    sys.exit(main())
