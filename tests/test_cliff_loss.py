"""The activity-cliff term (``train.cliff_weight``, :class:`siggate.train.losses.CliffPairLoss`):
its value against a direct computation with RDKit's own Tanimoto, its invariances, and a run."""

from __future__ import annotations

import csv
import math

import pytest
import torch
import yaml
from rdkit import Chem, DataStructs
from rdkit.Chem import AllChem

from siggate.train.losses import CliffPairLoss
from test_bad_inputs import _TRAIN_ARGS, _write_train_csv
from test_predict import run_cli

#: two near twins (a methyl moved on toluene's ring), one unrelated molecule, the first twin again
SMILES = ["Cc1ccccc1CCN", "Cc1cccc(C)c1CCN", "OC(=O)CCCCCCCCC", "Cc1ccccc1CCN"]


def reference(pred, y, smiles, threshold=0.5):
    """The term written out pair by pair (ECFP4 bits from RDKit's older Morgan API); rows of one
    SMILES form no pair."""
    fps = [AllChem.GetMorganFingerprintAsBitVect(Chem.MolFromSmiles(s), 2, nBits=2048) for s in smiles]
    num = den = 0.0
    for t in range(len(pred[0])):
        for i in range(len(smiles)):
            for j in range(i + 1, len(smiles)):
                if math.isnan(y[i][t]) or math.isnan(y[j][t]) or smiles[i] == smiles[j]:
                    continue
                s = DataStructs.TanimotoSimilarity(fps[i], fps[j])
                w = max(0.0, (s - threshold) / (1 - threshold))
                num += w * abs((pred[i][t] - pred[j][t]) - (y[i][t] - y[j][t]))
                den += w
    return num / den if den else 0.0


def test_the_term_equals_the_pairs_written_out_with_missing_labels_skipped():
    pred = [[0.1, 2.0], [0.9, 1.0], [-3.0, 0.5], [0.4, -1.0]]
    y = [[1.0, float("nan")], [-1.0, 0.0], [5.0, 1.0], [0.0, 2.0]]
    got = CliffPairLoss()(torch.tensor(pred, dtype=torch.float64), torch.tensor(y, dtype=torch.float64), SMILES)
    want = reference(pred, y, SMILES)
    assert want > 0 and float(got) == pytest.approx(want, rel=1e-12)
    sim = CliffPairLoss().similarity(SMILES)
    assert sim[0, 3] == 1.0 and 0.5 < sim[0, 1] < 1.0 and sim[0, 2] < 0.5  # the pairs the test relies on


def test_a_shift_of_every_prediction_costs_nothing_and_the_gradient_flows():
    y = torch.tensor([[1.0], [-1.0], [5.0], [0.0]], dtype=torch.float64)
    pred = (y + 3.25).requires_grad_()
    loss = CliffPairLoss()(pred, y, SMILES)
    assert float(loss) == pytest.approx(0.0, abs=1e-12)
    wrong = torch.tensor([[0.0], [0.0], [0.0], [0.0]], dtype=torch.float64, requires_grad=True)
    CliffPairLoss()(wrong, y, SMILES).backward()
    assert wrong.grad.abs().sum() > 0 and wrong.grad[2].item() == 0.0  # the unrelated molecule is in no pair


def test_rows_of_one_molecule_form_no_pair():
    """Duplicate rows (kept by --duplicates keep) are predicted alike by any model: their label
    difference is not a cliff to learn, so the term ignores the pair."""
    y = torch.tensor([[0.0], [2.0], [1.0]], dtype=torch.float64)
    twins = ["Cc1ccccc1CCN", "Cc1ccccc1CCN", "Cc1cccc(C)c1CCN"]
    for pred in ([[0.0], [0.0], [1.0]], [[5.0], [5.0], [6.0]]):  # the third one fits both its pairs exactly
        assert float(CliffPairLoss()(torch.tensor(pred, dtype=torch.float64), y, twins)) == pytest.approx(1.0)


def test_a_batch_without_similar_pairs_gives_zero():
    pred = torch.tensor([[1.0], [2.0]], requires_grad=True)
    loss = CliffPairLoss()(pred, torch.tensor([[0.0], [5.0]]), ["CCO", "c1ccccc1C(=O)O"])
    assert float(loss) == 0.0 and loss.requires_grad


def test_a_run_with_the_term_trains_and_records_it(tmp_path, capsys):
    data = tmp_path / "d.csv"
    _write_train_csv(data, n=60)
    common = ["train", "--data", str(data), *_TRAIN_ARGS, "--epochs", "2", "--cache-dir", str(tmp_path / "c")]
    rc, _, err = run_cli([*common, "--out", str(tmp_path / "a")], capsys)
    assert rc == 0, err
    rc, _, err = run_cli([*common, "--set", "train.cliff_weight=1.0", "--out", str(tmp_path / "b")], capsys)
    assert rc == 0, err
    assert yaml.safe_load((tmp_path / "b" / "config.yaml").read_text())["train"]["cliff_weight"] == 1.0
    la, lb = (list(csv.DictReader(open(tmp_path / k / "log.csv"))) for k in "ab")
    assert len(la) == len(lb) == 2
    # the same seed, data and first batch: the term (>= 0) adds to the first epoch's training loss
    assert float(lb[0]["train_loss"]) > float(la[0]["train_loss"])


def test_the_term_is_refused_where_it_has_no_meaning(tmp_path, capsys):
    data = tmp_path / "b.csv"
    _write_train_csv(data, n=60)
    lines = data.read_text().splitlines()  # y -> 0/1: a binary task
    data.write_text("\n".join([lines[0], *(f"{s},{int(float(y) > 1.5)},{sp}" for s, y, sp in
                                           (line.rsplit(",", 2) for line in lines[1:]))]) + "\n")
    rc, out, err = run_cli(["train", "--data", str(data), *_TRAIN_ARGS[:-5], "--task", "binary", "--epochs", "1",
                            "--set", "train.cliff_weight=1", "--members", "gnn,svr", "--out", str(tmp_path / "x"),
                            "--no-progress"], capsys)
    assert rc == 2 and "here the task is graph-level binary: drop --set train.cliff_weight" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "x").exists()  # refused before a folder is claimed: the corrected command runs
    regression = tmp_path / "r.csv"
    _write_train_csv(regression, n=30)
    for extra, why in ((["--set", "train.cliff_weight=1", "--members", "svr"], "here no GNN member trains with it"),
                       (["--set", "train.cliff_weight=nan"], "'nan' is not allowed; expected a finite number")):
        rc, out, err = run_cli(["train", "--data", str(regression), *_TRAIN_ARGS, "--epochs", "1", *extra, "--out",
                                str(tmp_path / "y")], capsys)
        assert rc == 2 and why in err and not (tmp_path / "y").exists(), err
    rc, out, err = run_cli(["train", "--data", "x.csv", "--target-col", "y", "--set", "train.cliff_weight=-1",
                            "--out", str(tmp_path / "y")], capsys)
    assert rc == 2 and "train.cliff_weight" in err
