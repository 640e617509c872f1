"""An Exphormer run scores a molecule the same whatever the batch around it, its position
and the path (``siggate predict``, ``siggate evaluate``, the training run's own metrics):
each graph's expander is seeded by the graph itself (``siggate.nn.exphormer.graph_keys``)."""

from __future__ import annotations

import csv
import io
import json
from contextlib import redirect_stderr, redirect_stdout

import numpy as np
import pytest
from rdkit import Chem

from test_bad_inputs import _TRAIN_ARGS, _write_train_csv
from test_ensemble import _read
from test_predict import run_cli


@pytest.fixture(scope="module")
def exphormer_run(tmp_path_factory):
    from siggate.cli import main

    tmp = tmp_path_factory.mktemp("exphormer")
    _write_train_csv(tmp / "d.csv", n=60)
    with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
        rc = main(["train", "--data", str(tmp / "d.csv"), *_TRAIN_ARGS, "--set", "model.attn=true",
                   "--set", "model.attn_type=exphormer", "--epochs", "1", "--out", str(tmp / "run"),
                   "--cache-dir", str(tmp / "c")])
    assert rc == 0
    with open(tmp / "d.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    return tmp / "run", rows, tmp


def _predict(run, smiles, out, capsys) -> list[float]:
    rc, _, err = run_cli(["predict", "--checkpoint", str(run), *smiles, "--output", str(out)], capsys)
    assert rc == 0, err
    return [float(r["y"]) for r in _read(out)]


def test_a_molecule_scores_the_same_in_any_order_and_company(exphormer_run, tmp_path, capsys):
    run, rows, _ = exphormer_run
    smiles = [r["smiles"] for r in rows[:24]]
    assert sum(Chem.MolFromSmiles(s).GetNumAtoms() > 10 for s in smiles) >= 12  # random expanders, not complete graphs
    ordered = np.array(_predict(run, smiles, tmp_path / "a.csv", capsys))
    backwards = np.array(_predict(run, smiles[::-1], tmp_path / "b.csv", capsys))[::-1]
    shuffled_order = np.random.default_rng(0).permutation(len(smiles))
    shuffled = np.empty(len(smiles))
    shuffled[shuffled_order] = _predict(run, [smiles[i] for i in shuffled_order], tmp_path / "c.csv", capsys)
    alone = np.array([_predict(run, [s], tmp_path / "d.csv", capsys)[0] for s in smiles[:6]])
    assert np.abs(backwards - ordered).max() <= 1e-6
    assert np.abs(shuffled - ordered).max() <= 1e-6
    assert np.abs(alone - ordered[:6]).max() <= 1e-6


def test_predict_equals_evaluate_and_the_run_s_own_score(exphormer_run, tmp_path, capsys):
    run, rows, tmp = exphormer_run
    test = [r for r in rows if r["split"] == "test"]
    rc, out, err = run_cli(["evaluate", "--checkpoint", str(run), "--split", "test", "--cache-dir", str(tmp / "c")],
                           capsys)
    assert rc == 0, err
    res = json.loads(out)
    pred = np.array(_predict(run, [r["smiles"] for r in test], tmp_path / "p.csv", capsys))
    mae = float(np.mean(np.abs(pred - np.array([float(r["y"]) for r in test]))))
    assert res["n"]["test"] == len(test)
    assert abs(res["test"] - mae) <= 1e-6
    assert abs(json.loads((run / "metrics.json").read_text())["test"] - mae) <= 1e-6
