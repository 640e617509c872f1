"""The scale benchmark (``benchmarks/scale/run.py``, issue 32): a whole ``siggate train`` command
measured in a fresh wrapper process, the fingerprint members alone, the per-epoch extrapolation
and the README generated from the results files. The molecules come from RDKit's NCI file in
place of MOSES (the sampler is replaced), so these tests need no molsets wheel."""

from __future__ import annotations

import csv
import json
import os
import sys

import pytest

from benchmark_scripts import load
from recipe_flags import SCRATCH
from test_predict import nci_smiles

scale = load("scale_run", "scale/run.py")

#: a small GNN (from scratch: the recipe's pretrained weights fit only their own size), so that the
#: whole command takes seconds
TINY = (f"--members gnn,svr,rf --weights val {' '.join(SCRATCH)} --epochs 2 --set model.layers=1 --set model.dim=16 "
        "--set model.pe_dim=4 --set model.pe_steps=4 --set train.batch_size=16")


@pytest.fixture
def nci_sampler(monkeypatch):
    drawn = []

    def sample(n, seed):
        drawn.append((n, seed))
        return nci_smiles(n)

    monkeypatch.setattr(scale, "moses_sample", sample)
    return drawn


def test_train_mode_measures_the_command_and_the_report_shows_it(tmp_path, nci_sampler):
    out, work = tmp_path / "train.json", tmp_path / "work"
    rc = scale.main(["--mode", "train", "--sizes", "60", "--train-args", TINY, "--full-epochs", "5,10",
                     "--out", str(out), "--work", str(work), "--keep-runs"])
    assert rc == 0 and nci_sampler == [(60, 0)]
    with open(work / "moses-60-seed0.csv", newline="") as fh:
        molecules = list(csv.DictReader(fh))
    assert len(molecules) == 60 and set(molecules[0]) == {"smiles", "y"}
    from rdkit import Chem
    from rdkit.Chem import Crippen
    assert float(molecules[7]["y"]) == Crippen.MolLogP(Chem.MolFromSmiles(molecules[7]["smiles"]))

    doc = json.loads(out.read_text())
    assert doc["format"] == scale.FORMAT and doc["mode"] == "train" and doc["threads"] == 1
    [row] = doc["runs"]
    assert row["status"] == "ok" and row["returncode"] == 0 and row["n"] == 60 and row["train_args"] == TINY
    assert row["command"].startswith("python benchmarks/scale/run.py --mode train") and len(row["commit"]) in (7, 40)
    assert row["versions"]["torch"] and row["versions"]["rdkit"] and row["threads"] == 1 and row["seed"] == 0
    assert row["train_command"].startswith("siggate train --data moses-60-seed0.csv --out RUN")
    assert row["train_command"].endswith(TINY)

    # the run folder the measured command wrote: the row reads its metrics and logs
    [run] = [p / "run" for p in work.iterdir() if p.is_dir()]
    metrics = json.loads((run / "metrics.json").read_text())
    assert row["test"] == metrics["test"] and row["metric"] == "mae"
    assert row["test_summary"] == metrics["test_metrics"]["mean"] and row["splits"] == metrics["splits"]
    assert sum(row["splits"].values()) == 60
    assert [(m["name"], m["kind"]) for m in row["members"]] == [("member0", "gnn"), ("member1", "svr"),
                                                                 ("member2", "rf")]
    assert [m["test_summary"] for m in row["members"]] == [m["test_metrics"]["mean"] for m in metrics["members"]]
    assert row["weighting"] == "val" and row["epochs"] == 2 and row["epochs_by_member"] == {"member0": 2}
    with open(run / "member0" / "log.csv", newline="") as fh:
        log = list(csv.DictReader(fh))
    assert row["gnn_epoch"]["cpu_s"] == float(log[1]["cpu_seconds"])  # epoch 2: the epochs after the first
    assert row["gnn_epoch"]["wall_s"] == float(log[1]["seconds"])
    # the wrapper's CPU time is the whole command's: more than its epochs', less than the wall x 2 cores
    assert sum(float(r["cpu_seconds"]) for r in log) < row["cpu_s"] and row["peak_mib"] > 100
    ex = row["extrapolated"]
    # the GNN member (weighed on val) recomputed the statistics only in its last epoch, the one measured
    assert [r["eval_norm"] for r in log] == ["running", "train"]
    assert "EXTRAPOLATED" in ex["note"] and set(ex) == {"note", "upper_bound", "5", "10"} and ex["upper_bound"]
    assert ex["10"]["cpu_s"] == pytest.approx(row["cpu_s"] + 8 * row["gnn_epoch"]["cpu_s"])
    assert ex["5"]["wall_s"] == pytest.approx(row["wall_s"] + 3 * row["gnn_epoch"]["wall_s"])

    text = scale.report({"train": out, "members": tmp_path / "absent.json"})
    assert "## The fingerprint members alone" not in text
    cells = ["60", f"`{TINY}`", "ok", "/".join(str(row["splits"][s]) for s in ("train", "val", "test")), "2",
             f"{row['cpu_s']:,.0f}", f"{row['wall_s']:,.0f}", f"{row['peak_mib'] / 1024:.2f}",
             f"{row['test_summary']['rmse']:.3f}",
             ", ".join(f"{m['kind']} {m['test_summary']['rmse']:.3f}" for m in row["members"])]
    assert "| " + " | ".join(cells) + " |" in text.splitlines()
    assert "### Extrapolated to the full schedule (not measured)" in text
    assert f"{ex['10']['cpu_s']:,.0f} ({ex['10']['wall_s']:,.0f})" in text


def test_members_mode_fits_a_member_and_rows_merge_by_key(tmp_path, nci_sampler):
    out = tmp_path / "fpmembers.json"
    args = ["--mode", "members", "--sizes", "60", "--members", "svr", "--out", str(out), "--work", str(tmp_path)]
    assert scale.main(args) == 0
    [row] = json.loads(out.read_text())["runs"]
    assert row["status"] == "ok" and (row["member"], row["n"], row["seed"]) == ("svr", 60, 0)
    assert row["sizes"] == {"train": 48, "val": 6, "test": 6} and row["basis"] == "exact"
    assert row["prepare"]["peak_mib"] <= row["peak_mib"] and row["fit"]["cpu_s"] > 0 and row["test_rmse"] > 0
    # the wrapper's CPU time is the whole child's: its measured steps are a part of it
    assert row["prepare"]["cpu_s"] + row["fit"]["cpu_s"] + row["predict"]["cpu_s"] < row["cpu_s"]
    first = row["fit"]
    assert scale.main(args) == 0  # measured again: the row is replaced, not added
    [again] = json.loads(out.read_text())["runs"]
    assert again["fit"] != first and again["test_rmse"] == row["test_rmse"]
    assert nci_sampler == [(60, 0)]  # the CSV of the first call is reused

    text = scale.report({"train": tmp_path / "absent.json", "members": out})
    assert "| `svr` | 60 | ok | svr exact |" in text
    assert f"{again['test_rmse']:.3f} ({again['target_std']:.3f})" in text
    assert f"Largest peak of a finished run: {again['peak_mib'] / 1024:.2f} GiB (members mode, 60 molecules)" in text


def test_epoch_cost_and_extrapolation_read_the_log():
    rows = [{"epoch": "1", "seconds": "9", "cpu_seconds": "5"}, {"epoch": "2", "seconds": "4", "cpu_seconds": "3"},
            {"epoch": "3", "seconds": "6", "cpu_seconds": "4"}]
    assert scale.epoch_cost(rows) == {"cpu_s": 3.5, "wall_s": 5.0, "from": "log.csv epochs 2-3"}
    assert scale.epoch_cost(rows[:1]) == {"cpu_s": 5.0, "wall_s": 9.0, "from": "log.csv epochs 1-1"}
    # a GNN member that recomputed the statistics only before its last evaluation: the epochs that did not
    last = [{**r, "eval_norm": n} for r, n in zip(rows, ("running", "running", "train"))]
    assert scale.epoch_cost(last) == {"cpu_s": 3.0, "wall_s": 4.0, "from": "log.csv epochs 2"}
    two = last[:1] + last[2:]  # epoch 1 running, epoch 2 (the last) recomputed: one recompute in the figure
    assert scale.epoch_cost(two) == {"cpu_s": 4.0, "wall_s": 6.0, "from": "log.csv epochs 3-3", "upper_bound": True}
    old = [{k: v for k, v in r.items() if k != "cpu_seconds"} for r in rows]  # a log written before cpu_seconds
    assert scale.epoch_cost(old)["cpu_s"] is None
    ex = scale.extrapolate({"cpu_s": 20.0, "wall_s": 30.0}, {"member0": rows, "member1": rows[:1]}, [10])
    assert ex["10"] == {"cpu_s": 20.0 + 7 * 3.5 + 9 * 5.0, "wall_s": 30.0 + 7 * 5.0 + 9 * 9.0}
    assert scale.extrapolate({"cpu_s": 1.0, "wall_s": 1.0}, {}, [10]) is None  # no GNN member
    assert scale.extrapolate({"cpu_s": 1.0, "wall_s": 1.0}, {"member0": old}, [4])["4"]["cpu_s"] is None


def test_each_measurement_is_a_fresh_process_whose_peak_is_its_own_command(tmp_path):
    """A large child measured first does not raise the peak of a small one measured next (the
    maximum of ``RUSAGE_CHILDREN`` is per process; the wrapper holds no torch, whose RSS a child
    would start from), and ``--timeout`` stops a command."""
    env = {**os.environ, **scale.ONE_THREAD}
    grow = "b = bytearray(400 * 2**20); b[::4096] = b'x' * len(b[::4096])"
    big = scale.measure([sys.executable, "-c", grow], tmp_path / "a.log", env)
    small = scale.measure([sys.executable, "-c", "pass"], tmp_path / "b.log", env)
    assert big["status"] == small["status"] == "ok" and big["returncode"] == 0
    assert big["peak_mib"] > 400 > 100 > small["peak_mib"]
    slow = scale.measure([sys.executable, "-c", "import time; time.sleep(60)"], tmp_path / "c.log", env, timeout=1)
    assert slow["status"] == "timeout" and slow["returncode"] is None and 1 <= slow["wall_s"] < 30
    failed = scale.measure([sys.executable, "-c", "print('the cause'); raise SystemExit(3)"], tmp_path / "d.log", env)
    assert failed["status"] == "failed" and failed["returncode"] == 3 and failed["error"] == "the cause\n"


def test_the_readme_is_what_the_report_makes_of_the_committed_results():
    """``benchmarks/scale/README.md`` holds no number typed by hand: it is ``--report``'s output
    for the results files (rerun ``python benchmarks/scale/run.py --report`` after a measurement)."""
    assert all(p.is_file() for p in scale.DEFAULT_OUT.values())
    assert scale.README.read_text() == scale.report(dict(scale.DEFAULT_OUT))
