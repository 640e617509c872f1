"""Time and peak memory of siggate on 1k, 10k and 50k molecules drawn from MOSES, with RDKit's
Crippen logP as the target (issue 32: "a 50,000-molecule CSV trains with the default in under
8 GiB of memory").

    python benchmarks/scale/run.py                                  # members mode: svr and rf at 1k, 10k, 50k
    python benchmarks/scale/run.py --sizes 1000 --members svr --out /tmp/scale.json
    python benchmarks/scale/run.py --mode train --sizes 1000,10000,50000 \\
        --train-args "--members gnn,svr,rf --weights val --init pretrained --epochs 2"
    python benchmarks/scale/run.py --mode train --train-args ""     # the plain default, full schedule
    python benchmarks/scale/run.py --report                         # benchmarks/scale/README.md from the JSONs

The molecules: ``n`` SMILES drawn without replacement (``--seed``, 0) from the MOSES training set
inside the installed ``molsets`` 0.3.1 wheel (read as a file, streamed; the package is never
imported), with Crippen logP as ``y``, written by this process to ``WORK/moses-<n>-seed<seed>.csv``
(columns ``smiles``, ``y``; ``--work``, default a temporary folder) before anything is measured.
Every run is one fresh process with one thread (``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS``,
``MKL_NUM_THREADS`` = 1), started by a wrapper process (this script with ``--child``), itself fresh
for every run so that no earlier child enters its maximum, and light: it imports no torch, since a
child's ``ru_maxrss`` starts from the RSS of the process it was forked from (Linux keeps the
pre-exec high-water mark). The wrapper reports ``getrusage(RUSAGE_CHILDREN)``'s deltas: wall
seconds, CPU seconds (user + system) and the child's peak resident memory (``ru_maxrss``: Python,
torch, RDKit and the molecules included). ``--timeout`` stops a run that takes longer (status
``timeout``; what was measured until then is kept: its CPU seconds and peak so far, and in train
mode the GNN epochs it finished, which are not extrapolated).

Two modes, each with its own JSON under ``benchmarks/results/scale/``:

* ``members`` (``fpmembers.json``): the fingerprint members alone (``svr``, ``rf``, defaults). The
  child reads the CSV, splits it 80/10/10 at random (``--seed``), fits the member (its options
  chosen on the validation rows; the svr's C averaged since 46a976c) and predicts the test rows. Besides the wrapper's figures it
  reports the wall and CPU seconds of reading and splitting, of the fit (the fingerprints of the
  train and val molecules included) and of the prediction, its peak after reading the molecules
  (``RUSAGE_SELF``), the test RMSE and the member's choices.
* ``train`` (``train.json``): a whole ``siggate train --data CSV --target-col y`` command plus
  ``--train-args`` (split with ``shlex``; an empty string is the plain default), with siggate's own
  default split (no ``--split`` is passed: scaffold for ``--data``), a fresh ``--cache-dir`` and a
  fresh ``--out``. From the run folder the row takes ``metrics.json`` (the test metric and summary;
  the per-member rows of a run of several members) and each GNN member's ``log.csv`` (the epochs
  it ran).

  The seconds per GNN epoch come from the run's own ``log.csv``: the mean of ``cpu_seconds`` (the
  process's CPU time in the epoch) and of ``seconds`` (its wall time) over the epochs after the
  first (the first alone in a one-epoch run), summed over the GNN members. Since a full schedule
  on 50k molecules takes hours on one thread, a run with fewer epochs is *extrapolated* to
  ``--full-epochs`` (60 and 150): the measured run plus (full epochs - epochs run) times the cost of
  one epoch. That assumes an epoch costs the same at any point of the schedule (its work does not
  depend on the learning rate) and leaves out the checkpoint writes between epochs (not in
  ``log.csv``'s times). It is stored under ``extrapolated`` with its rule in ``note`` and printed as
  "EXTRAPOLATED"; it is never a measurement. Peak memory is not extrapolated: compare runs of one
  size with different epoch counts (``--report`` prints them side by side).

Rows are merged into their JSON by key (member, n, seed; or train arguments, n, seed), so sizes and
arguments can be measured by separate invocations; each row records the command that made it, the
commit and the package versions. ``--report`` writes ``benchmarks/scale/README.md``, every number
in it read from the two JSONs.
"""

from __future__ import annotations

import argparse
import csv
import importlib.metadata
import json
import os
import platform
import re
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# No siggate (torch) import at the top: the wrapper process of a train run is this script, and a
# child's ru_maxrss starts from the RSS of the process it was forked from (Linux keeps the
# pre-exec high-water mark), so a wrapper holding torch would put its ~0.45 GiB under every peak.
# tests/test_scale_benchmark.py runs main(), which imports what the script uses.

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "scale"
DEFAULT_OUT = {"members": RESULTS / "fpmembers.json", "train": RESULTS / "train.json"}
README = Path(__file__).resolve().parent / "README.md"
MEMBERS = ("svr", "rf")
MOSES_ROWS = 1_584_663  # SMILES in MOSES's train.csv.gz (siggate.data.corpus)
FORMAT = 2  # rows carry their own command, commit and versions (format 1: one command per file)
KEYS = {"members": ("member", "n", "seed"), "train": ("train_args", "n", "seed")}
PACKAGES = ("siggate", "torch", "torch_geometric", "rdkit", "scikit-learn", "numpy")
ONE_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
#: the keys of an extrapolation that are not a schedule: the rule, and ``upper_bound`` when the GNN epoch
#: measured after the first was the one that recomputed the BatchNorm statistics (:func:`epoch_cost`)
EXTRAPOLATION_META = ("note", "upper_bound")
EXTRAPOLATION_NOTE = ("EXTRAPOLATED, not measured: the measured run + (full epochs - epochs run) x the GNN epoch's "
                      "cpu_seconds/seconds from log.csv (mean over the epochs after the first, summed over GNN members)")


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def moses_sample(n: int, seed: int) -> list[str]:
    """``n`` MOSES training SMILES drawn without replacement, in file order, streamed."""
    import gzip

    import numpy as np

    from siggate.data.corpus import moses_train_path

    keep = set(np.random.default_rng(seed).choice(MOSES_ROWS, size=n, replace=False).tolist())
    out = []
    with gzip.open(moses_train_path(), "rt", newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader)
        col = header.index("SMILES")
        for i, row in enumerate(reader):
            if i in keep:
                out.append(row[col])
    if len(out) != n:
        raise SystemExit(f"MOSES file holds fewer rows than {MOSES_ROWS}: got {len(out)} of {n}")
    return out


def molecules_csv(n: int, seed: int, work: Path) -> Path:
    """``WORK/moses-<n>-seed<seed>.csv`` (``smiles``, ``y`` = Crippen logP) of :func:`moses_sample`,
    written once and reused."""
    from rdkit import Chem
    from rdkit.Chem import Crippen

    path = work / f"moses-{n}-seed{seed}.csv"
    if not path.is_file():
        smiles = moses_sample(n, seed)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")  # two invocations may share --work
        with open(tmp, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["smiles", "y"])
            w.writerows([s, repr(Crippen.MolLogP(Chem.MolFromSmiles(s)))] for s in smiles)
        tmp.replace(path)
    return path


def read_molecules(path: Path) -> tuple[list[str], list[float]]:
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    return [r["smiles"] for r in rows], [float(r["y"]) for r in rows]


# --- the children: one fresh process per run --------------------------------------------------

def member_child(member: str, csv_path: Path, seed: int) -> dict:
    """Fit one fingerprint member on the molecules of ``csv_path`` (80/10/10 random split) and
    report the times of its steps, the peak after reading the molecules and the test RMSE."""
    import numpy as np
    import torch
    from torch_geometric.data import Data

    from siggate.data.base import GraphDataset, TaskInfo
    from siggate.predictors.forest import RandomForest
    from siggate.predictors.svr import KernelSVR

    t0, c0 = time.perf_counter(), time.process_time()
    smiles, y = read_molecules(csv_path)
    n = len(smiles)
    order = np.random.default_rng(seed).permutation(n)
    cut = [int(0.8 * n), int(0.9 * n)]
    graphs = [Data(smiles=smiles[i], y=torch.tensor([[y[i]]])) for i in order]
    ds = GraphDataset(info=TaskInfo(name=f"moses{n}", task="regression", num_tasks=1, metric="mae"),
                      splits={"train": graphs[: cut[0]], "val": graphs[cut[0] : cut[1]], "test": graphs[cut[1] :]})
    prep = {"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0, "peak_mib": peak_mib()}
    model = KernelSVR(seed=seed) if member == "svr" else RandomForest(seed=seed)
    t0, c0 = time.perf_counter(), time.process_time()
    model.fit(ds)
    fit = {"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0}
    t0, c0 = time.perf_counter(), time.process_time()
    pred = model.predict(ds.test).mean.double().numpy()[:, 0]
    predict = {"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0}
    yt = np.array([g.y.item() for g in ds.test])
    m = model.models_[0]
    return {"sizes": ds.sizes(), "repr": repr(model), "prepare": prep, "fit": fit, "predict": predict,
            "test_rmse": float(np.sqrt(np.mean((pred - yt) ** 2))), "target_std": float(np.std(yt)),
            "mode": getattr(m, "mode", "forest"), "basis": m.meta.get("basis"), "chosen": m.meta.get("chosen")}


def measure_command(cmd: list[str], log: Path, timeout: float | None = None) -> dict:
    """Run ``cmd`` (its output to ``log``) and return its status, wall and CPU seconds and peak
    resident memory from ``getrusage(RUSAGE_CHILDREN)``. Meant for a fresh, light process (no
    torch) whose only child it is: ``ru_maxrss`` is the maximum over every child a process has
    waited for, and a child's starts from the RSS of its parent at the fork."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    status = "ok"
    with open(log, "w") as fh:
        try:
            rc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, timeout=timeout).returncode
        except subprocess.TimeoutExpired:  # subprocess.run killed and reaped it: its usage is counted
            rc, status = None, "timeout"
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if status == "ok" and rc != 0:
        status = "failed"
    return {"status": status, "returncode": rc, "wall_s": time.perf_counter() - t0,
            "cpu_s": (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
            "peak_mib": after.ru_maxrss / 1024.0}


def measure(cmd: list[str], log: Path, env: dict, timeout: float | None = None) -> dict:
    """:func:`measure_command` of ``cmd`` in a fresh wrapper process (this script with
    ``--child``); ``{"status": "failed", "error": ...}`` when the wrapper itself fails. Every run of
    both modes goes through here."""
    spec = {"cmd": cmd, "log": str(log), "timeout": timeout}
    proc = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)], capture_output=True, text=True,
                          env=env)
    if proc.returncode != 0:
        return {"status": "failed", "error": proc.stderr.strip()[-2000:]}
    row = json.loads(proc.stdout.strip().splitlines()[-1])
    if row["status"] != "ok":
        row["error"] = log.read_text()[-2000:]
    return row


def member_run(member: str, csv_path: Path, seed: int, work: Path, env: dict) -> dict:
    """One fingerprint member (:func:`member_child`) measured in a fresh process."""
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        result = Path(tmp) / "result.json"
        spec = {"member": member, "csv": str(csv_path), "seed": seed, "result": str(result)}
        row = measure([sys.executable, __file__, "--member-child", json.dumps(spec)], Path(tmp) / "member.log", env)
        if row["status"] == "ok":
            row.update(json.loads(result.read_text()))
    return row


# --- what a train run left in its folder --------------------------------------------------------

def _mean_of(m: dict | None) -> dict | None:
    return (m or {}).get("mean")


def gnn_logs(run: Path) -> dict[str, list[dict]]:
    """``{member folder ('.' for a plain run): log.csv rows}`` of the GNN runs in ``run``."""
    return {("." if p.parent == run else p.parent.relative_to(run).as_posix()): list(csv.DictReader(open(p)))
            for p in sorted(run.rglob("log.csv"))}


def epoch_cost(rows: list[dict]) -> dict | None:
    """The CPU and wall seconds of one epoch in ``rows`` (``log.csv``): their mean over the epochs
    after the first, or the first epoch's alone in a one-epoch run. A run that recomputed the
    BatchNorm statistics only before its last evaluation (``eval_norm`` running, then train: a GNN
    member weighed on val) repeats its other epochs in a longer schedule, so those are used when
    there are any after the first; otherwise the figure holds one recompute (``upper_bound``)."""
    use = rows[1:] or rows
    if not use:
        return None
    mixed = {"running", "train"} <= {r.get("eval_norm") for r in rows}  # recomputed before the last only
    plain = [r for r in use if r.get("eval_norm") == "running"]
    chosen = mixed and bool(plain)  # the epochs without the recompute, named one by one
    if chosen:
        use = plain
    cpu = [float(r["cpu_seconds"]) for r in use if r.get("cpu_seconds")]
    return {"cpu_s": sum(cpu) / len(cpu) if len(cpu) == len(use) else None,
            "wall_s": sum(float(r["seconds"]) for r in use) / len(use),
            "from": f"log.csv epochs {','.join(str(int(r['epoch'])) for r in use)}"
                    if chosen else f"log.csv epochs {int(use[0]['epoch'])}-{int(use[-1]['epoch'])}",
            **({"upper_bound": True} if mixed and not plain else {})}


def extrapolate(measured: dict, logs: dict[str, list[dict]], full_epochs: list[int]) -> dict | None:
    """The measured run's CPU and wall seconds extended to ``full_epochs`` epochs of every GNN
    member (:data:`EXTRAPOLATION_NOTE`); ``None`` without a GNN member."""
    costs = {name: epoch_cost(rows) for name, rows in logs.items()}
    if not costs or any(c is None for c in costs.values()):
        return None
    out: dict = {"note": EXTRAPOLATION_NOTE}
    if any(c.get("upper_bound") for c in costs.values()):  # the epoch measured held the one recompute
        out["upper_bound"] = True
    for full in full_epochs:
        extra = {name: max(full - len(logs[name]), 0) for name in logs}
        out[str(full)] = {
            "cpu_s": None if any(c["cpu_s"] is None for c in costs.values())
            else measured["cpu_s"] + sum(extra[k] * costs[k]["cpu_s"] for k in costs),
            "wall_s": measured["wall_s"] + sum(extra[k] * costs[k]["wall_s"] for k in costs)}
    return out


def run_summary(run: Path) -> dict:
    """What ``siggate train`` wrote into ``run``: the test metric and summaries from
    ``metrics.json`` (its members' rows when it has several), the epochs each GNN member ran and
    the cost of one GNN epoch (summed over the GNN members)."""
    out: dict = {}
    logs = gnn_logs(run)
    out["epochs_by_member"] = {name: len(rows) for name, rows in logs.items()}
    out["epochs"] = max(out["epochs_by_member"].values(), default=0)
    costs = [epoch_cost(rows) for rows in logs.values()]
    if costs and all(costs):
        cpu = [c["cpu_s"] for c in costs]
        out["gnn_epoch"] = {"cpu_s": None if None in cpu else sum(cpu), "wall_s": sum(c["wall_s"] for c in costs),
                            "from": "; ".join(f"{name}: {c['from']}" for name, c in zip(logs, costs))}
    path = run / "metrics.json"
    if path.is_file():
        m = json.loads(path.read_text())
        out.update({"metric": m.get("metric"), "val": m.get("val"), "test": m.get("test"), "splits": m.get("splits"),
                    "val_summary": _mean_of(m.get("val_metrics")), "test_summary": _mean_of(m.get("test_metrics"))})
        if "members" in m:
            out.update({"weighting": m.get("weighting"), "weights": m.get("weights"),
                        "members": [{"name": r["name"], "kind": r["kind"], "seed": r.get("seed"), "val": r.get("val"),
                                     "test": r.get("test"), "val_summary": _mean_of(r.get("val_metrics")),
                                     "test_summary": _mean_of(r.get("test_metrics"))} for r in m["members"]]})
    return out


def train_run(csv_path: Path, train_args: str, work: Path, env: dict, full_epochs: list[int],
              timeout: float | None, keep: bool) -> dict:
    """One ``siggate train`` on ``csv_path`` measured in a fresh wrapper process."""
    folder = Path(tempfile.mkdtemp(prefix=f"{csv_path.stem}-", dir=work))
    run, cache = folder / "run", folder / "cache"
    tail = ["--target-col", "y", "--no-progress", *shlex.split(train_args)]
    cmd = [sys.executable, "-m", "siggate", "train", "--data", str(csv_path), "--out", str(run), "--cache-dir",
           str(cache), *tail]
    try:
        row = measure(cmd, folder / "train.log", env, timeout)
        if "returncode" in row:  # the command ran: what it left
            row.update(run_summary(run))
            # a stopped run's times are not a whole run's: its GNN epochs are kept, not extended
            row["extrapolated"] = extrapolate(row, gnn_logs(run), full_epochs) if row["status"] == "ok" else None
    finally:
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)
    row["train_command"] = shlex.join(["siggate", "train", "--data", csv_path.name, "--out", "RUN", "--cache-dir",
                                       "FRESH", *tail])
    return row


# --- results files ---------------------------------------------------------------------------

def versions() -> dict:
    out = {"python": platform.python_version(), "machine": platform.machine()}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def load_doc(path: Path, mode: str) -> dict:
    """The results file of ``mode`` (a new one when missing or written in an older format)."""
    if path.is_file():
        doc = json.loads(path.read_text())
        if doc.get("format") == FORMAT and doc.get("mode") == mode:
            return doc
    return {"format": FORMAT, "mode": mode, "threads": 1,
            "description": __doc__.split("\n\n")[0].replace("\n", " "), "runs": []}


def store_row(path: Path, mode: str, row: dict) -> None:
    """Put ``row`` into ``path``, replacing the row of the same key (:data:`KEYS`)."""
    from siggate.files import atomic_write_bytes

    doc = load_doc(path, mode)
    key = tuple(row.get(k) for k in KEYS[mode])
    doc["runs"] = [r for r in doc["runs"] if tuple(r.get(k) for k in KEYS[mode]) != key] + [row]
    doc["runs"].sort(key=lambda r: (r["n"], str(r.get("member") or r.get("train_args"))))
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, (json.dumps(doc, indent=1) + "\n").encode())


def gib(mib: float | None) -> str:
    return "-" if mib is None else f"{mib / 1024:.2f}"


def num(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def members_line(row: dict) -> str:
    if row["status"] != "ok":
        return f"{row['member']} n={row['n']}: {row['status']}: {row.get('error', '')[-300:]}"
    return (f"{row['member']:4s} n={row['n']:6d}: fit {row['fit']['cpu_s']:.1f} CPU s ({row['fit']['wall_s']:.1f} wall s), "
            f"predict {row['predict']['cpu_s']:.1f} CPU s, peak {gib(row['peak_mib'])} GiB, "
            f"test rmse {row['test_rmse']:.3f}, {row['mode']} {row['basis'] or ''}")


def train_line(row: dict) -> str:
    args = row["train_args"] or "(default)"
    rmse = (row.get("test_summary") or {}).get("rmse")
    line = (f"train n={row['n']:6d} [{args}]: {row['status']}, {num(row.get('cpu_s'), 0)} CPU s "
            f"({num(row.get('wall_s'), 0)} wall s), peak {gib(row.get('peak_mib'))} GiB, "
            f"{_epochs(row.get('epochs', 0))}, test rmse {num(rmse, 3)}")
    ep, ex = row.get("gnn_epoch"), row.get("extrapolated")
    if ep:
        line += f"; GNN epoch {num(ep['cpu_s'])} CPU s ({num(ep['wall_s'])} wall s)"
    if ex:
        line += "; EXTRAPOLATED (not measured): " + ", ".join(
            f"{e} epochs {num(v['cpu_s'], 0)} CPU s ({num(v['wall_s'], 0)} wall s)"
            for e, v in ex.items() if e not in EXTRAPOLATION_META) + (" (upper bounds)" if ex.get("upper_bound") else "")
    if row["status"] != "ok":
        line += f": {row.get('error', '')[-300:]}"
    return line


# --- the report --------------------------------------------------------------------------------

def _table(headers: list[str], rows: list[list[str]]) -> str:
    from siggate.analysis.common import table

    return table(headers, rows, markdown=True)


def _commits(rows: list[dict]) -> str:
    return ", ".join(f"`{c[:7]}`" for c in sorted({r.get("commit") or "?" for r in rows}))


def _section(title: str, command: str, rows: list[dict], how: str) -> list[str]:
    """A section's heading and the paragraph that says how its rows were made."""
    return [f"## {title}", "", f"`{command}` ({_commits(rows)}; seed 0, one thread, each run in a fresh process): "
            + how, ""]


def _epochs(k: int) -> str:
    return f"{k} epoch{'s' if k != 1 else ''}"


def _without_epochs(args: str) -> str:
    return re.sub(r"\s*(--epochs[ =]\d+|--set[ =]train\.epochs=\d+)", "", args).strip()


def train_report(doc: dict) -> list[str]:
    rows = doc["runs"]
    lines = _section("`siggate train --data` at scale", "python benchmarks/scale/run.py --mode train ...", rows,
                     "the whole command with each row's arguments and a fresh cache, from reading the CSV to the "
                     "last file it writes, with siggate's default split. Peak is the command's resident memory "
                     "(`ru_maxrss`); the test RMSE is the run's (the combination's), each member's beside it.")
    body = []
    for r in rows:
        members = ", ".join(f"{m['kind']} {num((m.get('test_summary') or {}).get('rmse'), 3)}"
                            for m in r.get("members") or [])
        sizes = r.get("splits") or {}
        body.append([f"{r['n']:,}", f"`{r['train_args']}`" if r["train_args"] else "(default)", r["status"],
                     "/".join(f"{sizes[s]:,}" for s in ("train", "val", "test") if s in sizes) or "-",
                     str(r.get("epochs", 0)), num(r.get("cpu_s"), 0), num(r.get("wall_s"), 0),
                     gib(r.get("peak_mib")), num((r.get("test_summary") or {}).get("rmse"), 3), members or "-"])
    lines.append(_table(["molecules", "train arguments", "status", "train/val/test", "epochs", "CPU s", "wall s",
                         "peak GiB", "test RMSE", "members' test RMSE"], body))
    if any(r["status"] == "timeout" for r in rows):
        lines += ["", "A `timeout` row was stopped by `--timeout` at its wall seconds: its CPU seconds and peak are "
                  "those until then, its epochs the GNN epochs it finished (it wrote no metrics)."]
    epochs = {}
    for r in rows:
        if r["status"] == "ok":
            epochs.setdefault((r["n"], _without_epochs(r["train_args"])), []).append(r)
    same = [(key, sorted(rr, key=lambda r: r["epochs"])) for key, rr in epochs.items()
            if len({r["epochs"] for r in rr}) > 1]
    if same:
        lines += ["", "Peak memory against the number of epochs (same size and arguments otherwise): "
                  + "; ".join(f"{n:,} molecules: " + ", ".join(f"{_epochs(r['epochs'])} {gib(r['peak_mib'])} GiB"
                                                               for r in rr) for (n, _), rr in same) + "."]
    ex = [r for r in rows if r.get("extrapolated")]
    if ex:
        fulls = [e for e in ex[0]["extrapolated"] if e not in EXTRAPOLATION_META]
        lines += ["", "### Extrapolated to the full schedule (not measured)", "",
                  f"{ex[0]['extrapolated']['note']}.", ""]
        body = [[f"{r['n']:,}", f"`{r['train_args']}`" if r["train_args"] else "(default)", str(r["epochs"]),
                 num(r["gnn_epoch"]["cpu_s"]), num(r["gnn_epoch"]["wall_s"]),
                 *[f"{num(r['extrapolated'][e]['cpu_s'], 0)} ({num(r['extrapolated'][e]['wall_s'], 0)})"
                   + (", an upper bound" if r["extrapolated"].get("upper_bound") else "") for e in fulls]] for r in ex]
        lines.append(_table(["molecules", "train arguments", "epochs run", "CPU s per GNN epoch",
                             "wall s per GNN epoch", *[f"{e} epochs: CPU s (wall s), extrapolated" for e in fulls]],
                            body))
    return lines


def members_report(doc: dict) -> list[str]:
    rows = doc["runs"]
    lines = _section("The fingerprint members alone", "python benchmarks/scale/run.py --mode members", rows,
                     "80/10/10 random split, each member with its defaults (options chosen on the validation rows). "
                     "Fit includes the train and val fingerprints; peak is the whole process (Python, torch, RDKit, "
                     "the molecules: the `peak after reading` of it before the member starts).")
    body = [[f"`{r['member']}`", f"{r['n']:,}", r["status"],
             f"{r['mode']} {r['basis'] or ''}".strip() if r["status"] == "ok" else "-",
             num(r.get("fit", {}).get("cpu_s")), num(r.get("fit", {}).get("wall_s")),
             num(r.get("predict", {}).get("cpu_s")), gib(r.get("prepare", {}).get("peak_mib")),
             gib(r.get("peak_mib")),
             f"{r['test_rmse']:.3f} ({r['target_std']:.3f})" if r["status"] == "ok" else "-"] for r in rows]
    lines.append(_table(["member", "molecules", "status", "how it fits", "fit CPU s", "fit wall s",
                         "predict CPU s (10%)", "peak after reading GiB", "peak GiB", "test RMSE (target std)"], body))
    return lines


def report(paths: dict[str, Path]) -> str:
    """``benchmarks/scale/README.md``: the tables of the results files that exist."""
    lines = ["# siggate at scale (issue 32)", "",
             "Generated by `python benchmarks/scale/run.py --report` from "
             + " and ".join(f"`{p.relative_to(ROOT).as_posix() if p.is_relative_to(ROOT) else p}`"
                            for p in paths.values()) + "; do not edit by hand. How the numbers are made: the "
             "docstring of `run.py`. Molecules are drawn from MOSES (seed 0), the target is RDKit's Crippen logP. "
             "The machine is a 2-core CPU shared with other runs, so wall times are inflated; CPU seconds are "
             "the time to compare.", ""]
    peaks = []
    for mode, part in (("train", train_report), ("members", members_report)):
        if paths[mode].is_file():
            doc = load_doc(paths[mode], mode)
            if doc["runs"]:
                lines += [*part(doc), ""]
                peaks += [(r["peak_mib"], r["n"], mode) for r in doc["runs"] if r["status"] == "ok"]
    if peaks:
        top = max(peaks)
        lines += [f"Largest peak of a finished run: {gib(top[0])} GiB ({top[2]} mode, {top[1]:,} molecules); issue "
                  "32's limit is 8 GiB at 50,000 molecules.", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=("members", "train"), default="members")
    p.add_argument("--sizes", default="1000,10000,50000")
    p.add_argument("--members", default=",".join(MEMBERS), help="members mode: the members to fit")
    p.add_argument("--train-args", default="", help="train mode: arguments added to siggate train ('': the default)")
    p.add_argument("--full-epochs", default="60,150", help="train mode: the schedules to extrapolate to")
    p.add_argument("--timeout", type=float, default=None, help="train mode: stop a run after this many seconds")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=None, help="the results file (default: the mode's under "
                                                          "benchmarks/results/scale/)")
    p.add_argument("--work", type=Path, default=None, help="where the CSVs (and kept runs) go (default: a temporary "
                                                           "folder, removed at the end)")
    p.add_argument("--keep-runs", action="store_true", help="train mode: keep the run folders under --work")
    p.add_argument("--report", action="store_true", help="write the README from the results files and stop")
    p.add_argument("--readme", type=Path, default=README)
    p.add_argument("--child", help=argparse.SUPPRESS)  # the wrapper: measure_command of a JSON spec
    p.add_argument("--member-child", help=argparse.SUPPRESS)  # member_child of a JSON spec
    args = p.parse_args(argv)
    if args.child:
        spec = json.loads(args.child)
        print(json.dumps(measure_command(spec["cmd"], Path(spec["log"]), spec.get("timeout"))))
        return 0
    if args.member_child:
        spec = json.loads(args.member_child)
        Path(spec["result"]).write_text(json.dumps(member_child(spec["member"], Path(spec["csv"]), spec["seed"])))
        return 0
    if args.report:
        paths = dict(DEFAULT_OUT)
        if args.out is not None:
            paths[args.mode] = args.out
        args.readme.write_text(report(paths))
        print(f"wrote {args.readme}")
        return 0
    from siggate.train.record import git_commit

    out = args.out or DEFAULT_OUT[args.mode]
    members = [m.strip() for m in args.members.split(",") if m.strip()]
    if any(m not in MEMBERS for m in members):
        raise SystemExit(f"--members: choose from {', '.join(MEMBERS)}")
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    full_epochs = [int(e) for e in args.full_epochs.split(",") if e.strip()]
    env = {**os.environ, **ONE_THREAD}
    meta = {"command": "python benchmarks/scale/run.py " + shlex.join(argv if argv is not None else sys.argv[1:]),
            "commit": git_commit(), "versions": versions(), "seed": args.seed, "threads": 1}
    with tempfile.TemporaryDirectory(prefix="siggate-scale-") as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        ok = True
        for n in sizes:
            csv_path = molecules_csv(n, args.seed, work)
            for member in members if args.mode == "members" else [None]:
                if args.mode == "members":
                    row = {**member_run(member, csv_path, args.seed, work, env), "member": member, "n": n, **meta}
                    line = members_line(row)
                else:
                    row = train_run(csv_path, args.train_args, work, env, full_epochs, args.timeout, args.keep_runs)
                    row = {**row, "n": n, "train_args": args.train_args, **meta}
                    line = train_line(row)
                store_row(out, args.mode, row)
                ok &= row["status"] == "ok"
                print(line, flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
