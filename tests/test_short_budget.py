"""The short-budget benchmark (benchmarks/short_budget): its runs are one ``siggate compare``
(the study API), and its summary never overwrites the committed results with less than they
hold (issue 30 item 7, issue 31 item 4)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from benchmark_scripts import load
from siggate.config import load_config

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "benchmarks" / "results" / "short_budget"


def _summarize(tmp_path, monkeypatch):
    """summarize.py over a copy of the committed result set in ``tmp_path``."""
    mod = load("short_budget_summarize", "short_budget/summarize.py")
    here = tmp_path / "short_budget"
    shutil.copytree(COMMITTED, here)
    monkeypatch.setattr(mod, "HERE", here)
    monkeypatch.setattr(mod, "RUNS", here / "runs")
    return mod, here


def test_summarize_without_runs_keeps_the_committed_results(tmp_path, monkeypatch, capsys):
    summ, here = _summarize(tmp_path, monkeypatch)
    before = {f: (here / f).read_bytes() for f in ("results.json", "results.md")}
    assert summ.main() == 2
    assert {f: (here / f).read_bytes() for f in before} == before
    assert capsys.readouterr().err.startswith(f"summarize: no runs under {here / 'runs'}: run benchmarks/short_budget/run.sh")


def _compare_run(run: Path, gate: str, seed: int, test: float) -> None:
    """A finished run folder as siggate compare leaves it."""
    run.mkdir(parents=True)
    cfg = load_config("molhiv", [f"model.gate={gate}", "model.layers=1", f"train.seed={seed}", "train.epochs=1",
                                 "train.threads=1"]).to_dict()
    (run / "config.yaml").write_text(yaml.safe_dump({**cfg, "_meta": {"git_commit": "c0ffee"}}))
    (run / "metrics.json").write_text(json.dumps({"metric": "rocauc", "higher_is_better": True, "epochs": 1, "test": test,
                                                  "val": test + 0.01, "best_epoch": 1, "seconds": 30.0, "params": 999,
                                                  "history": [{"seconds": 30.0}]}))
    (run / "train.log").write_text(f"$ python -m siggate train --seed {seed} --set model.gate={gate}\nepoch 1\n")


def test_summarize_reads_the_compare_runs_and_keeps_the_datasets_it_has_no_runs_of(tmp_path, monkeypatch):
    summ, here = _summarize(tmp_path, monkeypatch)
    committed = json.loads((here / "results.json").read_text())
    tests = {"none": [0.60, 0.62, 0.64], "elementwise": [0.61, 0.65, 0.66]}
    for gate, values in tests.items():
        for seed, v in enumerate(values):
            _compare_run(here / "runs" / "molhiv" / "runs" / gate / f"seed{seed}", gate, seed, v)
    assert summ.main() == 0
    res = json.loads((here / "results.json").read_text())
    molhiv = res["datasets"]["molhiv"]
    assert {g: list(v.values()) for g, v in molhiv["per_seed"].items()} == tests
    assert molhiv["commands"]["none"]["1"] == "python -m siggate train --seed 1 --set model.gate=none"
    assert molhiv["deviations"] == {"model.layers": {"protocol": 10, "used": 1}} and molhiv["git_commit"] == "c0ffee"
    assert molhiv["compare_elementwise_vs_none"]["mean_diff"] == pytest.approx(0.02)
    assert res["datasets"]["peptides-func"] == committed["datasets"]["peptides-func"]
    assert res["timing"] == committed["timing"]


def test_run_sh_runs_one_siggate_compare_with_the_python_in_use(tmp_path):
    """No machine's venv path: the siggate that runs is `python -m siggate` of the environment
    (PYTHON overrides it), and the runs are one `siggate compare` of both gates over seeds 0-2."""
    stub = tmp_path / "python"
    stub.write_text(f"#!/usr/bin/env bash\nprintf '%s\\n' \"$@\" > {tmp_path / 'argv'}\n")
    stub.chmod(0o755)
    env = {**os.environ, "PYTHON": str(stub)}
    out = subprocess.run(["bash", str(ROOT / "benchmarks" / "short_budget" / "run.sh"), "molhiv", "1", "--set",
                          "model.layers=1"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "argv").read_text().split("\n")[:-1] == [
        "-m", "siggate", "compare", "--config", "molhiv", "--budget", "1", "--gates", "none,elementwise", "--seeds",
        "0-2", "--jobs", "1", "--threads", "1", "--no-progress", "--out", "benchmarks/results/short_budget/runs/molhiv",
        "--set", "model.layers=1"]
