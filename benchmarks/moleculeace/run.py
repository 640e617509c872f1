"""MoleculeACE benchmark: siggate beside a random forest on Morgan fingerprints, chemprop and the
published results of CheMeleon, RF, minimol and chemprop (van Tilborg et al., JCIM 2022).

* **Data.** The 30 CSVs inside the installed ``MoleculeACE==3.0.0`` wheel
  (``pip install --no-deps MoleculeACE==3.0.0``), found through the package's file list and read
  as files: its Python modules are never imported. The sha256 of every file is recorded.
* **Protocol.** The file's ``split`` column is train/test. Validation is 10% of train, drawn with a
  fixed seed per target (``crc32`` of the target's name), the same for every tool and training seed.
  The random forest has no use for a validation set and trains on the whole train split, as the
  published RF rows do.
* **Metrics.** Test RMSE overall, on ``cliff_mol == 1`` compounds and on the rest, per target and as
  the mean over targets (of each target's mean over seeds).
* **Targets.** The 20 public targets only; the 10 reserved ones are refused everywhere.

    python benchmarks/moleculeace/run.py --tools rf_morgan --seeds 0,1,2     # calibration row (minutes)
    python benchmarks/moleculeace/run.py --tools siggate --seeds 0,1,2       # siggate train --data defaults
    python benchmarks/moleculeace/run.py --tools siggate --recipe gate-none \\
        --siggate-args "--set model.attn=true --set model.gate=none"          # a named recipe
    python benchmarks/moleculeace/run.py --report                              # summary, tests and README table

Runs resume: a (tool, recipe, target, seed) row with ``"status": "ok"`` is skipped. Several
processes may run at once on one results file (it is updated under a lock). It shares its runner
and metric code with ``benchmarks/peers/run.py``.
"""

from __future__ import annotations

import argparse
import csv
import importlib.metadata
import json
import math
import os
import shutil
import statistics
import sys
import time
import zlib
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _load_peers():
    """``benchmarks/peers/run.py`` (tools, subprocess runner, metrics, results I/O), under its own name."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("peers_run", HERE.parent / "peers" / "run.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["peers_run"] = mod
    spec.loader.exec_module(mod)
    return mod


peers = _load_peers()

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
TOOLS = ("rf_morgan", "siggate", "chemprop")
DEFAULT_RESULTS = HERE / "results" / "results.json"
ANCHORS = HERE / "anchors.json"
README = HERE / "README.md"
CACHE = Path(os.environ.get("SIGGATE_MOLECULEACE_WORK", "~/.cache/siggate/moleculeace")).expanduser()
TABLE_START, TABLE_END = "<!-- moleculeace-table:start -->", "<!-- moleculeace-table:end -->"
METRICS = ("rmse", "rmse_cliff", "rmse_noncliff")
#: the published RF row must be reproduced within this mean RMSE (the data and split check)
CALIBRATION_TOLERANCE = 0.01


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
        raise SystemExit(f"{target} is a reserved MoleculeACE target (kept to check the work from outside): "
                         f"use one of the {len(PUBLIC)} public targets")
    if target not in PUBLIC:
        raise SystemExit(f"unknown target {target!r}; public targets: {', '.join(PUBLIC)}")


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


def build(target: str, data_dir: Path) -> dict:
    """Write the target's ``data.csv`` (smiles, y, split), ``test.csv`` (smiles, y, cliff) and
    ``splits.json`` (chemprop's format) under ``data_dir/target``; its meta dict."""
    rows = read_target(target)
    labels = split_labels([r["file_split"] for r in rows], val_seed(target))
    d = data_dir / target
    d.mkdir(parents=True, exist_ok=True)
    with open(d / "data.csv", "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["smiles", "y", "split"])
        w.writerows([r["smiles"], repr(r["y"]), lab] for r, lab in zip(rows, labels))
    with open(d / "test.csv", "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["smiles", "y", "cliff"])
        w.writerows([r["smiles"], repr(r["y"]), r["cliff"]] for r, lab in zip(rows, labels) if lab == "test")
    split = {k: [i for i, lab in enumerate(labels) if lab == k] for k in ("train", "val", "test")}
    (d / "splits.json").write_text(json.dumps([split]))
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


# ----------------------------------------------------------------------------- the random forest


class RandomForestMorgan:
    """The published baseline: ``RandomForestRegressor`` (100 trees, defaults) on 2,048-bit
    radius-2 Morgan bit vectors, target standardised with the training mean and std, trained on the
    whole train split (train + our validation rows). Runs in this process; CPU time from
    ``time.process_time`` (one thread)."""

    name = "rf_morgan"

    @staticmethod
    def fingerprints(smiles: list[str]):
        import numpy as np
        from rdkit import Chem
        from rdkit.Chem import rdFingerprintGenerator

        gen = rdFingerprintGenerator.GetMorganGenerator(radius=2, fpSize=2048)
        return np.stack([gen.GetFingerprintAsNumPy(Chem.MolFromSmiles(s)) for s in smiles]).astype(np.uint8)

    def version(self) -> str:
        return "scikit-learn " + importlib.metadata.version("scikit-learn")

    def run(self, task: Target, tdir: Path, out: Path, seed: int, epochs: int | None) -> dict:
        import numpy as np
        from sklearn.compose import TransformedTargetRegressor
        from sklearn.ensemble import RandomForestRegressor
        from sklearn.preprocessing import StandardScaler

        t0, c0 = time.perf_counter(), time.process_time()
        smiles, y, split = peers.T.read_task_csv(tdir / "data.csv")
        fit = [i for i, s in enumerate(split) if s in ("train", "val")]
        test = [i for i, s in enumerate(split) if s == "test"]
        x = self.fingerprints(smiles)
        model = TransformedTargetRegressor(regressor=RandomForestRegressor(n_estimators=100, random_state=seed, n_jobs=1),
                                           transformer=StandardScaler())
        model.fit(x[fit], np.asarray(y)[fit])
        pred = model.predict(x[test]).ravel().tolist()
        return {"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0,
                "pred_smiles": [smiles[i] for i in test], "pred": pred, "fit_rows": len(fit),
                "command": f"RandomForestRegressor(n_estimators=100, random_state={seed}) on Morgan r2 2048 bits, "
                           "StandardScaler target, train+val rows"}


# ----------------------------------------------------------------------------- results


def _locked(path: Path):
    from filelock import FileLock

    path.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(str(path) + ".lock")


def load_results(path: Path) -> dict:
    res = peers.load_results(path)
    res.setdefault("rows", [])
    res.pop("runs", None)
    res.setdefault("targets", {})
    return res


def row_key(r: dict) -> tuple:
    return (r["tool"], r["recipe"], r["target"], int(r["seed"]))


def put(path: Path, row: dict | None = None, target_meta: dict | None = None) -> dict:
    """Merge one row (replacing its key) and/or a target's meta into the results file, under a lock."""
    with _locked(path):
        res = load_results(path)
        if target_meta is not None:
            res["targets"][target_meta["target"]] = target_meta
        if row is not None:
            res["rows"] = [r for r in res["rows"] if row_key(r) != row_key(row)] + [row]
            res["rows"].sort(key=lambda r: (r["tool"], r["recipe"], PUBLIC.index(r["target"]), r["seed"]))
        peers.save_results(path, res)
    return res


def _git_commit() -> str | None:
    import subprocess

    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=HERE, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def run_one(runner, recipe: str, target: str, seed: int, meta: dict, tdir: Path, work: Path, epochs: int | None) -> dict:
    out = work / runner.name / recipe / target / f"seed{seed}"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    row = {"tool": runner.name, "recipe": recipe, "target": target, "seed": seed, "epochs": epochs,
           "tool_version": runner.version(), "source_sha256": meta["source_sha256"], "data_sha256": meta["data_sha256"],
           "cpu": peers._cpu_model(), "threads": 1, "load_avg_1m_at_start": round(os.getloadavg()[0], 2)}
    smiles, y, cliff = read_test(tdir)
    try:
        r = runner.run(Target(target), tdir, out, seed, epochs)
        pred_smiles, pred = r.pop("pred_smiles"), r.pop("pred")
        row.update(status="ok", **cliff_metrics(smiles, y, cliff, pred_smiles, pred), n_test=len(y), **r)
        row["commit"] = r.get("git_commit") or _git_commit()
    except Exception as exc:
        row.update(status="failed", error=f"{type(exc).__name__}: {exc}", commit=_git_commit())
        print(f"moleculeace: {runner.name} {recipe} {target} seed {seed} failed: {exc}", file=sys.stderr)
    for k in ("command", "predict_command"):
        if k in row:
            row[k] = peers._tilde(row[k])
    row["finished"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return row


def cmd_run(args) -> int:
    targets = parse_targets(args.targets)
    tools = [t.strip() for t in args.tools.split(",") if t.strip()]
    if any(t not in TOOLS for t in tools):
        raise SystemExit(f"--tools: choose from {', '.join(TOOLS)}")
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    epochs = peers.SMOKE_EPOCHS if args.smoke else None
    recipe = args.recipe or ("smoke" if args.smoke else "default")
    runners = {}
    for t in tools:
        if t == "rf_morgan":
            runners[t] = RandomForestMorgan()
        elif t == "siggate":
            runners[t] = peers.Siggate(args.siggate, args.siggate_args)
        else:
            runners[t] = peers.Chemprop(args.chemprop_venv)
    failures = 0
    for target in targets:
        meta = build(target, args.data_dir)
        put(args.results, target_meta=meta)
        tdir = args.data_dir / target
        for seed in seeds:
            for tool, runner in runners.items():
                rec = recipe if tool == "siggate" else ("smoke" if args.smoke else "default")
                if tool == "siggate" and args.siggate_args:
                    rec = args.recipe or "custom"
                done = {row_key(r) for r in load_results(args.results)["rows"] if r.get("status") == "ok"}
                if (tool, rec, target, seed) in done:
                    peers.progress(f"skip {tool} {rec} {target} seed {seed}: done")
                    continue
                peers.progress(f"run  {tool} {rec} {target} seed {seed}")
                row = run_one(runner, rec, target, seed, meta, tdir, args.work_dir, epochs)
                if tool == "siggate":
                    row["siggate_args"] = args.siggate_args
                failures += row["status"] != "ok"
                put(args.results, row)
                if row["status"] == "ok":
                    peers.progress(f"done {tool} {rec} {target} seed {seed}: rmse {row['rmse']:.4f} "
                                   f"cliff {row['rmse_cliff']:.4f} cpu {row['cpu_s']:.0f}s")
    report(args.results)
    return 1 if failures else 0


def parse_targets(text: str | None) -> list[str]:
    targets = [t.strip() for t in text.split(",") if t.strip()] if text else list(PUBLIC)
    for t in targets:
        check_public(t)
    return targets


# ----------------------------------------------------------------------------- summary and report


def per_target(rows: list[dict], tool: str, recipe: str, key: str) -> dict[str, float]:
    """``{target: mean over seeds of key}`` for one (tool, recipe)."""
    by: dict[str, list[float]] = {}
    for r in rows:
        if r["tool"] == tool and r["recipe"] == recipe and r.get("status") == "ok" and not r.get("smoke"):
            by.setdefault(r["target"], []).append(float(r[key]))
    return {t: statistics.mean(v) for t, v in by.items()}


def summarize(rows: list[dict], anchors: dict) -> list[dict]:
    """Per (tool, recipe): the mean over targets of each target's mean over seeds, with the targets
    and seeds it covers; the published anchors over the same 20 public targets."""
    out = []
    for tool, recipe in sorted({(r["tool"], r["recipe"]) for r in rows if r.get("status") == "ok"}):
        entry = {"tool": tool, "recipe": recipe, "source": "measured here"}
        for key in (*METRICS, "cpu_s"):
            pt = per_target(rows, tool, recipe, key)
            entry[key] = statistics.mean(pt.values()) if pt else float("nan")
        ok = [r for r in rows if r["tool"] == tool and r["recipe"] == recipe and r.get("status") == "ok"]
        entry["targets"] = len({r["target"] for r in ok})
        entry["seeds"] = sorted({r["seed"] for r in ok})
        entry["runs"] = len(ok)
        entry["complete"] = entry["targets"] == len(PUBLIC)
        out.append(entry)
    for tool, a in anchors.get("tools", {}).items():
        pt = a["per_target"]
        out.append({"tool": tool, "recipe": "published", "source": f"{anchors['source']['repository']}@"
                    f"{anchors['source']['commit'][:7]}", **{k: statistics.mean(pt[t][k] for t in PUBLIC) for k in METRICS},
                    "targets": len(PUBLIC), "seeds": anchors["source"]["seeds"], "complete": True})
    return out


def calibration(summary: list[dict]) -> dict:
    """The local RF row against the published RF row, over the public targets."""
    local = next((s for s in summary if s["tool"] == "rf_morgan" and s["recipe"] == "default"), None)
    pub = next((s for s in summary if s["tool"] == "rf_morgan" and s["recipe"] == "published"), None)
    if local is None or pub is None or not local["complete"]:
        return {"status": "not run", "tolerance": CALIBRATION_TOLERANCE}
    diff = local["rmse"] - pub["rmse"]
    return {"status": "pass" if abs(diff) <= CALIBRATION_TOLERANCE else "fail", "local_rmse": local["rmse"],
            "published_rmse": pub["rmse"], "diff": diff, "tolerance": CALIBRATION_TOLERANCE,
            "local_seeds": local["seeds"]}


def gate_study(rows: list[dict], base: str, arms: list[str]) -> dict:
    """Each gate recipe against ``base`` (``gate=none``), paired by target (each target's mean over
    the seeds both recipes ran), Wilcoxon signed-rank over the targets, Holm over the arms, and the
    95% t interval of the mean difference (arm - base; negative is a lower RMSE)."""
    from siggate import stats

    tests = []
    seeds_of = lambda rec: {(r["target"], r["seed"]) for r in rows  # noqa: E731
                            if r["tool"] == "siggate" and r["recipe"] == rec and r.get("status") == "ok"}
    for arm in arms:
        common = seeds_of(base) & seeds_of(arm)
        pick = lambda rec: per_target([r for r in rows if (r["target"], r["seed"]) in common], "siggate", rec, "rmse")  # noqa: E731
        a, b = pick(base), pick(arm)
        c = stats.compare_paired(a, b, higher_is_better=False)
        c.update(stats.paired_effect([b[t] - a[t] for t in c["seeds"]]))
        c.update(arm=arm, base=base, pairs=[{"target": t, "base": a[t], "arm": b[t]} for t in c["seeds"]],
                 seed_pairs=len(common))
        tests.append(c)
    for c, adj in zip(tests, stats.holm([c["p_wilcoxon"] for c in tests])):
        c["p_holm_wilcoxon"] = adj
    return {"base": base, "arms": arms, "metric": "rmse", "tests": tests}


def _fmt(v: float | None, d: int = 3) -> str:
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{d}f}"


def table_markdown(res: dict) -> str:
    summary, cal = res.get("summary", []), res.get("calibration", {})
    if not summary:
        return "_Not run yet._"
    lines = ["Mean over the 20 public targets of each target's mean over seeds (test RMSE, lower is better):", "",
             "| tool | recipe | source | RMSE | cliff RMSE | non-cliff RMSE | targets | seeds | CPU s per run |",
             "|---|---|---|---|---|---|---|---|---|"]
    for s in sorted(summary, key=lambda s: (not s["complete"], s.get("rmse", 9), s["tool"])):
        targets = s["targets"] if s["complete"] else f"{s['targets']} of {len(PUBLIC)} (partial: not comparable)"
        lines.append(f"| {s['tool']} | {s['recipe']} | {s['source']} | {_fmt(s['rmse'])} | {_fmt(s['rmse_cliff'])} | "
                     f"{_fmt(s['rmse_noncliff'])} | {targets} | {','.join(map(str, s['seeds']))} | "
                     f"{_fmt(s.get('cpu_s'), 0)} |")
    if cal.get("status") != "not run":
        lines += ["", f"Calibration (local RF against the published RF row, tolerance {cal['tolerance']}): "
                      f"**{cal['status']}**, {_fmt(cal['local_rmse'], 4)} vs {_fmt(cal['published_rmse'], 4)} "
                      f"(difference {cal['diff']:+.4f}, local seeds {','.join(map(str, cal['local_seeds']))})."]
    anchors = res.get("anchors", {}).get("tools", {})
    ours = [(s["tool"], s["recipe"]) for s in summary if s["recipe"] != "published"]
    lines += ["", "Per target (ours: mean over seeds; published: mean over 5 seeds):", "",
              "| target | " + " | ".join(f"{t} (pub.)" for t in anchors) + " | "
              + " | ".join(f"{t}/{r}" for t, r in ours) + " |",
              "|---|" + "---|" * (len(anchors) + len(ours))]
    rows = res.get("rows", [])
    cols = [per_target(rows, t, r, "rmse") for t, r in ours]
    for target in PUBLIC:
        lines.append(f"| {target} | " + " | ".join(_fmt(a["per_target"][target]["rmse"]) for a in anchors.values())
                     + " | " + " | ".join(_fmt(c.get(target)) for c in cols) + " |")
    return "\n".join(lines)


def report(path: Path, gate_base: str = "gate-none", gate_arms: tuple = ("gate-elementwise", "gate-headwise")) -> dict:
    """Recompute ``anchors``, ``summary``, ``calibration`` and ``gate_study`` in the results file and
    the README table from its rows."""
    with _locked(path):
        res = load_results(path)
        res["anchors"] = json.loads(ANCHORS.read_text())
        res["summary"] = summarize(res["rows"], res["anchors"])
        res["calibration"] = calibration(res["summary"])
        recipes = {r["recipe"] for r in res["rows"] if r["tool"] == "siggate"}
        arms = [a for a in gate_arms if a in recipes]
        res["gate_study"] = gate_study(res["rows"], gate_base, arms) if gate_base in recipes and arms else None
        peers.save_results(path, res)
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
    p.add_argument("--recipe", default=None, help="name of siggate's recipe (default: 'default', or 'custom' "
                                                   "with --siggate-args)")
    p.add_argument("--siggate-args", default="", metavar="ARGS", help="extra arguments for siggate train")
    p.add_argument("--siggate", default=None, help="siggate executable (default: the one next to this Python)")
    p.add_argument("--chemprop-venv", type=Path, default=peers.DEFAULT_CHEMPROP_VENV)
    p.add_argument("--smoke", action="store_true", help=f"{peers.SMOKE_EPOCHS} epochs per tool, recipe 'smoke'")
    p.add_argument("--report", action="store_true", help="only recompute the summary, tests and README table")
    p.add_argument("--results", type=Path, default=DEFAULT_RESULTS)
    p.add_argument("--data-dir", type=Path, default=CACHE / "data")
    p.add_argument("--work-dir", type=Path, default=CACHE / "runs")
    args = p.parse_args(argv)
    if args.report:
        res = report(args.results)
        print(table_markdown(res))
        return 0
    return cmd_run(args)


if __name__ == "__main__":
    sys.exit(main())
