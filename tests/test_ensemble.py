"""``siggate train --ensemble N`` and ``siggate predict`` on the ensemble folder: the prediction
is the members' mean and the uncertainty their standard deviation (0 for one member)."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest
import torch
import yaml

from test_bad_inputs import _TRAIN_ARGS, _write_train_csv
from test_predict import nci_smiles, run_cli

QUERIES = ["CCO", "c1ccccc1O", "CC(=O)Nc1ccc(O)cc1", "not-a-smiles"]


def _read(path: Path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="module")
def ensemble3(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ens")
    data = tmp / "d.csv"
    _write_train_csv(data, n=60)
    out = tmp / "ens"
    import io
    from contextlib import redirect_stderr, redirect_stdout

    from siggate.cli import main

    with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
        rc = main(["train", "--data", str(data), *_TRAIN_ARGS, "--epochs", "2", "--ensemble", "3", "--out", str(out),
                   "--cache-dir", str(tmp / "c")])
    assert rc == 0
    return out, data, tmp


def test_equal_weights_keep_each_member_s_best_epoch(ensemble3):
    """``train.select: auto`` with equal weights: the validation split chooses each member's
    epoch (nothing is fitted on it after), as in a run of its own."""
    out, _, _ = ensemble3
    assert yaml.safe_load((out / "members.yaml").read_text())["train"]["select"] == "auto"
    assert [yaml.safe_load((out / f"member{i}" / "config.yaml").read_text())["train"]["select"]
            for i in range(3)] == ["best"] * 3


def test_members_differ_only_in_their_seed(ensemble3):
    out, _, _ = ensemble3
    man = json.loads((out / "predictor.json").read_text())
    assert man["kind"] == "combination" and man["members"] == ["member0", "member1", "member2"]
    assert man["weighting"] == "equal" and man["weights"] is None and man["split_seed"] == 0
    res = json.loads((out / "metrics.json").read_text())
    assert [(m["name"], m["kind"], m["seed"]) for m in res["members"]] == [
        ("member0", "gnn", 0), ("member1", "gnn", 1), ("member2", "gnn", 2)]
    for i in range(3):
        m = json.loads((out / f"member{i}" / "metrics.json").read_text())
        assert m["seed"] == i and res["members"][i]["test"] == m["test"] and res["members"][i]["val"] == m["val"]
        assert res["members"][i]["test_metrics"] == m["test_metrics"]
        assert json.loads((out / f"member{i}" / "predictor.json").read_text())["split_seed"] == 0
    assert res["metric"] == "mae" and res["test"] > 0


def test_prediction_is_the_member_mean_and_uncertainty_their_std(ensemble3, tmp_path, capsys):
    out, _, _ = ensemble3
    rc, _, _ = run_cli(["predict", "--checkpoint", str(out), *QUERIES, "--output", str(tmp_path / "e.csv")], capsys)
    assert rc == 1  # one invalid row
    rows = _read(tmp_path / "e.csv")
    assert list(rows[0]) == ["smiles", "y", "y_uncertainty", "nearest_train_similarity", "outside_domain", "error"]
    members = []
    for i in range(3):
        run_cli(["predict", "--checkpoint", str(out / f"member{i}" / "best.pt"), *QUERIES, "--output",
                 str(tmp_path / f"m{i}.csv")], capsys)
        members.append(_read(tmp_path / f"m{i}.csv"))
    for k, row in enumerate(rows):
        if k == 3:
            assert row["y"] == "" and row["y_uncertainty"] == "" and "SMILES parse error" in row["error"]
            continue
        vals = torch.tensor([float(m[k]["y"]) for m in members], dtype=torch.float64)
        assert float(row["y"]) == pytest.approx(float(vals.mean()), rel=1e-5, abs=1e-5)
        assert float(row["y_uncertainty"]) == pytest.approx(float(vals.std(correction=0)), rel=1e-4, abs=1e-5)
        assert float(row["y_uncertainty"]) > 0  # seeds differ, so the members disagree


def test_one_member_has_zero_uncertainty(tmp_path, capsys):
    data = tmp_path / "d.csv"
    _write_train_csv(data, n=60)
    out = tmp_path / "one"
    rc, _, err = run_cli(["train", "--data", str(data), *_TRAIN_ARGS, "--epochs", "1", "--ensemble", "1", "--out",
                          str(out), "--cache-dir", str(tmp_path / "c")], capsys)
    assert rc == 0, err
    smiles = nci_smiles(5)
    run_cli(["predict", "--checkpoint", str(out), *smiles, "--output", str(tmp_path / "e.csv")], capsys)
    run_cli(["predict", "--checkpoint", str(out / "member0" / "best.pt"), *smiles, "--output",
             str(tmp_path / "m.csv")], capsys)
    ens, single = _read(tmp_path / "e.csv"), _read(tmp_path / "m.csv")
    assert [float(r["y_uncertainty"]) for r in ens] == [0.0] * 5
    assert [r["y"] for r in ens] == [r["y"] for r in single]


def test_a_folder_that_is_no_run(tmp_path, capsys):
    rc, _, err = run_cli(["predict", "--checkpoint", str(tmp_path), "CCO"], capsys)
    assert rc == 2 and "neither ensemble.json nor best.pt" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    rc, _, err = run_cli(["train", "--ensemble", "0", "--out", str(tmp_path / "x")], capsys)
    assert rc == 2 and "--ensemble must be >= 1" in err
    # the last member's seed past numpy's largest: refused before any member trains (the second failed in numpy)
    csv = tmp_path / "d.csv"
    csv.write_text("smiles,y\n" + "".join(f"{'C' * (i + 1)}O,{i}\n" for i in range(12)))
    rc, _, err = run_cli(["train", "--data", str(csv), "--target-col", "y", "--ensemble", "3", "--seed",
                          str(2**32 - 2), "--out", str(tmp_path / "x")], capsys)
    assert rc == 2 and err.endswith("--ensemble 3 trains its GNN members with seeds 4294967294..4294967296, past the "
                                    "largest seed 4294967295; give --seed 4294967293 or lower\n"), err
    assert not (tmp_path / "x").exists()


def test_ensemble_writes_its_own_test_predictions_at_the_top(ensemble3):
    out, _, _ = ensemble3
    rows = _read(out / "test_predictions.csv")
    assert list(rows[0]) == ["row", "smiles", "y", "y_pred", "y_pred_uncertainty"]
    assert [int(r["row"]) for r in rows] == list(range(50, 60))
    mae = sum(abs(float(r["y"]) - float(r["y_pred"])) for r in rows) / len(rows)
    man = json.loads((out / "metrics.json").read_text())
    assert man["test"] == pytest.approx(mae, rel=1e-4)
    assert man["test_metrics"]["per_target"]["y"]["mae"] == pytest.approx(man["test"], rel=1e-6)
    assert all(float(r["y_pred_uncertainty"]) > 0 for r in rows)
    assert (out / "splits.csv").is_file() and (out / "data_report.csv").is_file()


def test_val_weights_and_the_members_table(tmp_path, capsys):
    """``--weights val`` over the seeds of one kind: they average equally (fitted weights across
    kinds: tests/test_predictors.py), each member's and the combination's scores on the
    terminal and in metrics.json, and
    ``siggate predict`` giving the weighted mean and weighted spread of the members. The input's
    ID column is carried into the combination's ``test_predictions.csv`` and ``splits.csv``, and
    ``evaluate --data`` on the combination names a renamed label column."""
    data = tmp_path / "d.csv"
    _write_train_csv(data, n=60)
    lines = data.read_text().splitlines()
    data.write_text("\n".join([lines[0] + ",id", *(f"{line},m{i}" for i, line in enumerate(lines[1:]))]) + "\n")
    out = tmp_path / "w"
    rc, stdout, err = run_cli(["train", "--data", str(data), *_TRAIN_ARGS, "--epochs", "1", "--ensemble", "2",
                               "--members", "gnn", "--weights", "val", "--out", str(out),
                               "--cache-dir", str(tmp_path / "c")], capsys)
    assert rc == 0, err
    res = json.loads((out / "metrics.json").read_text())
    # one kind: val weights weigh kinds, never seeds, so nothing is fitted among the seeds: they
    # average equally, the run records equal weights, and train.select "auto" keeps each one's
    # best validation epoch (options.run_weights)
    assert res["weighting"] == "equal" and res["weights"] is None
    assert yaml.safe_load((out / "members.yaml").read_text())["_meta"]["members"]["weights"] == "equal"
    w0 = w1 = 0.5
    for i in range(2):
        assert yaml.safe_load((out / f"member{i}" / "config.yaml").read_text())["train"]["select"] == "best"
    lines = [line.split() for line in stdout.splitlines() if line.strip().startswith(("member", "combined"))]
    assert [row[:2] for row in lines] == [["member0", "gnn"], ["member1", "gnn"], ["combined", "equal"]]
    for row, m in zip(lines, [*res["members"], res]):  # val and test: MAE, RMSE and R2 (4 significant digits)
        for split in ("val", "test"):
            got = re.search(split + r" MAE (\S+)\s+RMSE (\S+)\s+R2 (\S+)", " ".join(row))
            want = m[f"{split}_metrics"]["mean"]
            assert [float(v) for v in got.groups()] == pytest.approx([want["mae"], want["rmse"], want["r2"]], rel=1e-3)
    smiles = nci_smiles(4)
    run_cli(["predict", "--checkpoint", str(out), *smiles, "--output", str(tmp_path / "e.csv")], capsys)
    members = []
    for i in range(2):
        run_cli(["predict", "--checkpoint", str(out / f"member{i}"), *smiles, "--output", str(tmp_path / f"m{i}.csv")],
                capsys)
        members.append([float(r["y"]) for r in _read(tmp_path / f"m{i}.csv")])
    for k, row in enumerate(_read(tmp_path / "e.csv")):
        a, b = members[0][k], members[1][k]
        mean = w0 * a + w1 * b
        assert float(row["y"]) == pytest.approx(mean, rel=1e-4, abs=1e-5)
        assert float(row["y_uncertainty"]) == pytest.approx((w0 * (a - mean) ** 2 + w1 * (b - mean) ** 2) ** 0.5,
                                                            rel=1e-3, abs=1e-5)
    rows = _read(out / "test_predictions.csv")
    assert list(rows[0]) == ["row", "smiles", "id", "y", "y_pred", "y_pred_uncertainty"]
    assert [(r["row"], r["id"]) for r in rows] == [(str(i), f"m{i}") for i in range(50, 60)]
    splits = _read(out / "splits.csv")
    assert list(splits[0]) == ["row", "smiles", "id", "split", "reason"] and splits[7]["id"] == "m7"
    ext = tmp_path / "ext.csv"
    ext.write_text("smiles,logS\n" + "".join(f"{s},{i}\n" for i, s in enumerate(smiles)))
    rc, stdout, err = run_cli(["evaluate", "--checkpoint", str(out), "--data", str(ext), "--target-col", "logS"],
                              capsys)
    assert rc == 0, err
    res = json.loads(stdout)
    assert res["members"] == 2 and res["rows"]["scored"] == 4
    assert res["warnings"] == ["scored column 'logS' as the model's target 'y': the names differ, so make sure each "
                               "is the same property in the same units",  # trained without target statistics
                               "4 of the 4 rows scored are molecules the run fitted (its train or val rows), so their "
                               "scores are in sample; score a file of other molecules for an external estimate"]


def test_the_members_table_says_what_val_weights_mean_for_its_numbers():
    """With --weights val the combination's val score is of the rows its weights were fitted on
    (a run of one val molecule printed `val MAE 0`), and a target whose weights rest on one member
    has a spread, its uncertainty column, of 0 for every molecule. The table now says both."""
    from siggate.train.ensemble import member_lines, single_member_targets

    def scored(v):
        return {"val": v, "test": v, "val_metrics": {"per_target": {"a": {"mae": v}, "b": {"mae": v}}, "mean": {"mae": v}},
                "test_metrics": {"mean": {"mae": v}}}

    members = [{"name": f"member{i}", "kind": k, "seed": 0, **scored(0.5)} for i, k in enumerate(("gnn", "svr", "rf"))]
    metrics = {"metric": "mae", "members": members, "weighting": "val",
               "weights": [[0.0, 0.2], [1.0, 0.5], [0.0, 0.3]], **scored(0.4)}
    assert single_member_targets(metrics) == ["a"]
    lines = member_lines(metrics)
    assert [ln.split()[0] for ln in lines[:4]] == ["member0", "member1", "member2", "combined"]
    assert lines[4].strip() == ("the combination's val scores are in-sample (its weights were fitted on the val "
                                "rows); its test scores are out of sample")
    assert lines[5].strip().startswith("the val weights give 'a' to one member alone: its uncertainty") and len(lines) == 6
    equal = {**metrics, "weighting": "equal", "weights": [[1 / 3] * 2] * 3}
    assert single_member_targets(equal) == [] and len(member_lines(equal)) == 4
    assert single_member_targets({**metrics, "weights": None}) == []


def test_a_members_mean_over_fewer_targets_says_so_as_the_splits_mean_line_does():
    """helper-175: a member's line printed test ROC-AUC 0.8469 right above the split's 'ROC-AUC 0.8469
    (1 of 2)' (a target of one class in test), and a regression's test MAE over 1 of 2 targets
    beside its val MAE over both, unmarked."""
    from siggate.train.ensemble import member_lines
    from siggate.train.metrics import format_summary

    val = {"per_target": {"a": {"rocauc": 0.8, "prauc": 0.7}, "t2": {"rocauc": 0.6, "prauc": 0.5}},
           "mean": {"rocauc": 0.7, "prauc": 0.6}}
    test = {"per_target": {"a": {"rocauc": 0.8469, "prauc": 0.8471}, "t2": {"rocauc": None, "prauc": None}},
            "mean": {"rocauc": 0.8469, "prauc": 0.8471}}
    member = {"name": "member0", "kind": "svr", "seed": 0, "val": 0.7, "test": 0.8469, "val_metrics": val,
              "test_metrics": test}
    lines = member_lines({"metric": "rocauc", "members": [member], "weighting": "equal", "weights": [[1.0, 1.0]],
                          **{k: member[k] for k in ("val", "test", "val_metrics", "test_metrics")}})
    assert lines[0].split("   ")[-1] == "test ROC-AUC 0.8469 (1 of 2)  PR-AUC 0.8471 (1 of 2)", lines[0]
    assert "val ROC-AUC 0.7  PR-AUC 0.6   " in lines[0]
    assert format_summary("test", test)[-1] == ("test  mean over targets (1 of 2; no score for t2)  ROC-AUC 0.8469  "
                                                "PR-AUC 0.8471")
