"""``siggate train --data --members svr,rf`` (no GNN member) and ``--members gnn,svr,rf`` end to end:
train, the terminal's and metrics.json's per-member scores, resume (finished members are reused, a
finished run is never overwritten), ``predict`` (``--coverage``, the domain columns), ``evaluate``
and ``explain`` on the combination; what is refused; the scikit-learn estimators with
``members="svr"``. Data: y = number of nitrogens + noise on 150 NCI molecules (``test_explain``)."""

from __future__ import annotations

import csv
import json
import math
import re
import shutil

import numpy as np
import pytest
import torch
import yaml

from recipe_flags import EQUAL_WEIGHTS, GNN_SCRATCH, SCRATCH
from siggate.data.base import DataError, GraphDataset
from siggate.data.chem import smiles_to_graph
from siggate.data.fingerprints import minmax_kernel, morgan_counts
from siggate.predictors.forest import RandomForest
from siggate.predictors.svr import KernelSVR
from siggate.train.rundir import holds_run
from test_bad_inputs import _TRAIN_ARGS
from test_explain import FP_SPLITS, N_INFO, _nitrogen_graphs, _nitrogen_molecules
from test_predict import run_cli


def _rows(path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _one_line(err: str) -> str:
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err.strip()


@pytest.fixture(scope="module")
def nitrogen_csv(tmp_path_factory):
    """The nitrogen CSV: 150 molecules, ``smiles,nN,split`` (100 train, 20 val, 30 test)."""
    smiles = _nitrogen_molecules(150)
    graphs = _nitrogen_graphs(smiles)
    split = {i: k for k, (a, b) in FP_SPLITS.items() for i in range(a, b)}
    path = tmp_path_factory.mktemp("nitrogen") / "n.csv"
    path.write_text("smiles,nN,split\n" + "".join(f"{s},{float(g.y):.6f},{split[i]}\n"
                                                  for i, (s, g) in enumerate(zip(smiles, graphs))))
    return path


def _train(capsys, data, out, *extra, cache=None):
    args = ["train", "--data", str(data), "--target-col", "nN", "--split", "column:split", "--out", str(out),
            "--no-progress", *extra]
    return run_cli(args + (["--cache-dir", str(cache)] if cache else []), capsys)


def _member_rows(stdout: str) -> dict:
    """``{name: (kind or weighting, {split: (MAE, RMSE, R2)})}`` of the terminal's members table."""
    out = {}
    for line in stdout.splitlines():
        m = re.match(r"\s*(member\d+|combined)\s+(\S+)", line)
        if m:
            scores = {s: tuple(float(v) for v in re.search(s + r" MAE (\S+)\s+RMSE (\S+)\s+R2 (\S+)", line).groups())
                      for s in ("val", "test")}
            out[m.group(1)] = (m.group(2), scores)
    return out


def test_svr_and_rf_without_a_gnn_train_resume_predict_and_evaluate(nitrogen_csv, tmp_path, capsys, monkeypatch,
                                                                   caplog):
    run, cache = tmp_path / "run", tmp_path / "cache"
    rc, stdout, err = _train(capsys, nitrogen_csv, run, "--members", "svr,rf", *EQUAL_WEIGHTS, cache=cache)
    assert rc == 0, err
    res = json.loads((run / "metrics.json").read_text())
    assert [(m["name"], m["kind"], m["seed"]) for m in res["members"]] == [("member0", "svr", 0), ("member1", "rf", 0)]
    assert res["weighting"] == "equal" and res["splits"] == {"train": 100, "val": 20, "test": 30}
    assert not (cache / "pe").exists()  # no GNN member: no positional encoding computed
    assert sorted(p.name for p in (run / "member0").iterdir()) == ["arrays.pt", "fitted_with.yaml", "predictor.json"]

    # every member's and the combination's test scores, recomputed from the saved members
    test = _rows(run / "splits.csv")
    test_smiles = [r["smiles"] for r in test if r["split"] == "test"]
    labels = np.array([float(r["nN"]) for r in _rows(nitrogen_csv) if r["split"] == "test"])
    preds = [KernelSVR.load(run / "member0").predict_array(test_smiles)[:, 0],
             RandomForest.load(run / "member1").predict_array(test_smiles)[:, 0]]
    for m, p in zip(res["members"] + [res], preds + [(preds[0] + preds[1]) / 2]):
        want = {"mae": np.abs(p - labels).mean(), "rmse": math.sqrt(((p - labels) ** 2).mean()),
                "r2": 1 - ((p - labels) ** 2).sum() / ((labels - labels.mean()) ** 2).sum()}
        assert m["test_metrics"]["mean"] == pytest.approx(want, rel=1e-5)
        assert m["test"] == pytest.approx(want["mae"], rel=1e-5)
    table = _member_rows(stdout)
    assert list(table) == ["member0", "member1", "combined"] and [table[k][0] for k in table] == ["svr", "rf", "equal"]
    for name, m in zip(table, res["members"] + [res]):
        for split in ("val", "test"):
            mean = m[f"{split}_metrics"]["mean"]
            assert table[name][1][split] == pytest.approx((mean["mae"], mean["rmse"], mean["r2"]), rel=1e-3)
    written = _rows(run / "test_predictions.csv")
    assert [r["smiles"] for r in written] == test_smiles
    assert [float(r["nN_pred"]) for r in written] == pytest.approx((preds[0] + preds[1]) / 2, rel=1e-5, abs=1e-6)
    assert [float(r["nN_pred_uncertainty"]) for r in written] == pytest.approx(np.abs(preds[0] - preds[1]) / 2,
                                                                               rel=1e-4, abs=1e-6)

    # the same command again: refused, nothing touched; --resume: the members are reused, not refitted
    stamps = {p: p.stat().st_mtime_ns for p in run.rglob("*") if p.is_file()}
    rc, _, err = _train(capsys, nitrogen_csv, run, "--members", "svr,rf", *EQUAL_WEIGHTS, cache=cache)
    assert rc == 2 and "holds a run (metrics.json, members.yaml)" in _one_line(err)
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps

    def refit(self, ds):
        raise AssertionError("a finished member was fitted again")

    monkeypatch.setattr(KernelSVR, "fit", refit)
    monkeypatch.setattr(RandomForest, "fit", refit)
    rc, stdout2, err = _train(capsys, nitrogen_csv, run, "--members", "svr,rf", *EQUAL_WEIGHTS, "--resume", cache=cache)
    assert rc == 0, err
    assert json.loads((run / "metrics.json").read_text()) == res and _member_rows(stdout2) == table
    for p in (run / "member0" / "arrays.pt", run / "member1" / "arrays.pt"):
        assert p.stat().st_mtime_ns == stamps[p]
    rc, _, err = _train(capsys, nitrogen_csv, run, "--members", "svr", *EQUAL_WEIGHTS, "--resume", cache=cache)
    assert rc == 2 and "was trained with --members svr,rf, not --members svr;" in _one_line(err)
    rc, stdout4, err = _train(capsys, nitrogen_csv, run, "--members", "svr,rf", "--resume", cache=cache)
    assert rc == 0, err  # --members alone: the run's recorded weights (equal), not the recipe's
    assert _member_rows(stdout4) == table
    rc, stdout3, err = _train(capsys, nitrogen_csv, run, "--resume", cache=cache)  # no flags: the run's own members
    assert rc == 0, err
    assert json.loads((run / "metrics.json").read_text()) == res and _member_rows(stdout3) == table
    monkeypatch.undo()

    # predict: the mean of the members, the spread, the conformal interval and the domain columns
    asked = ["NCCN", "c1ccccc1O", "C1CC", "FC(F)(F)C(F)(F)C(F)(F)C(F)(F)F"]
    rc, _, err = run_cli(["predict", "--checkpoint", str(run), *asked, "--coverage", "0.9", "--output",
                          str(tmp_path / "p.csv")], capsys)
    assert rc == 1 and "4 rows, 3 predicted, 1 failed" in err
    rows = _rows(tmp_path / "p.csv")
    assert list(rows[0]) == ["smiles", "nN", "nN_uncertainty", "nN_lower", "nN_upper", "nearest_train_similarity",
                             "outside_domain", "error"]
    assert rows[2]["error"].startswith("SMILES parse error") and rows[2]["nN"] == ""
    good = [asked[i] for i in (0, 1, 3)]
    mp = [KernelSVR.load(run / "member0").predict_array(good)[:, 0],
          RandomForest.load(run / "member1").predict_array(good)[:, 0]]
    mean, spread = (mp[0] + mp[1]) / 2, np.abs(mp[0] - mp[1]) / 2
    cal = json.loads((run / "calibration.json").read_text())["targets"]["nN"]
    scores = sorted(cal["scores"])
    q = scores[math.ceil((len(scores) + 1) * 0.9) - 1]
    domain = json.loads((run / "domain.json").read_text())
    train = [r["smiles"] for r in test if r["split"] == "train"]
    sim = minmax_kernel(morgan_counts(good, domain["radius"], domain["n_bits"], sparse=True),
                        morgan_counts(train, domain["radius"], domain["n_bits"], sparse=True)).max(1)
    sigma = np.exp(-1.75 * sim)  # the intervals widen as a molecule is less like the training ones, whatever the spread
    for k, r in enumerate(rows[i] for i in (0, 1, 3)):
        assert float(r["nN"]) == pytest.approx(mean[k], rel=1e-5, abs=1e-6)
        assert float(r["nN_uncertainty"]) == pytest.approx(spread[k], rel=1e-4, abs=1e-6)
        assert float(r["nN_lower"]) == pytest.approx(mean[k] - q * sigma[k], rel=1e-4, abs=1e-5)
        assert float(r["nN_upper"]) == pytest.approx(mean[k] + q * sigma[k], rel=1e-4, abs=1e-5)
        assert float(r["nearest_train_similarity"]) == pytest.approx(sim[k], abs=1e-4)
        assert r["outside_domain"] == ("true" if sim[k] < domain["threshold"] else "false")
    assert rows[3]["outside_domain"] == "true"  # a perfluoroalkane is far from every training molecule

    import logging

    from siggate.predictors.combine import Combination
    from siggate.train.members import load_predictor
    from siggate.train.predict import SmilesPredictor

    combo = load_predictor(run)  # equal weights: the spread is the members' disagreement, no warning
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="siggate"):
        SmilesPredictor(combo, domain=False)
        assert not [r for r in caplog.records if "all the weight" in r.getMessage()]
        combo.weighting, combo.weights_ = "val", np.array([[1.0], [0.0]])  # as --weights val can fit them
        reader = SmilesPredictor(combo, domain=False)
    assert [r.getMessage() for r in caplog.records if "all the weight" in r.getMessage()] == ["this run: the validation weights give one member all the weight for 'nN', so its _uncertainty "
                    "column is 0 for every molecule, not a sign of certainty; conformal intervals (--coverage, or an "
                    "estimator's predict_interval) of a run calibrated on the similarity to its training molecules "
                    "widen away from them"]
    assert isinstance(combo, Combination) and float(reader.predict_rows(["NCCN"])[0]["nN_uncertainty"]) == 0.0
    from siggate.train.evaluate import external_graphs

    labelled = tmp_path / "labelled.csv"
    labelled.write_text("smiles,nN\nNCCN,2\nCCO,0\n")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="siggate"):  # evaluate writes no _uncertainty column: no warning
        graphs, _, _ = external_graphs(combo, labelled, "smiles", None, combo.info, [])
    assert len(graphs) == 2 and not [r for r in caplog.records if "all the weight" in r.getMessage()]

    copied = tmp_path / "copied"  # a member folder copied out of its run: the run is what is calibrated
    shutil.copytree(run / "member0", copied)
    rc, _, err = run_cli(["predict", "--checkpoint", str(copied), "CCO", "--coverage", "0.9"], capsys)
    assert rc == 2 and err.strip().splitlines() == [
        f"siggate predict: error: --coverage: {copied} holds one svr member, calibrated only as part of the run it was "
        "trained in; predict with that run's folder, or drop --coverage"]

    # evaluate: the combination on its own splits, and on a labelled file
    rc, stdout, err = run_cli(["evaluate", "--checkpoint", str(run)], capsys)
    assert rc == 0, err
    got = json.loads(stdout[:stdout.rindex("}") + 1])
    assert got["members"] == 2 and got["test"] == pytest.approx(res["test"], rel=1e-6)
    assert got["metrics"]["test"]["mean"] == pytest.approx(res["test_metrics"]["mean"], rel=1e-5)
    for name, member in zip(("member0", "member1"), res["members"]):  # a member's folder: its run's data and splits
        rc, stdout, err = run_cli(["evaluate", "--checkpoint", str(run / name)], capsys)
        assert rc == 0, err
        got = json.loads(stdout[:stdout.rindex("}") + 1])
        assert got["members"] == 1 and got["metrics"]["test"]["mean"] == pytest.approx(
            member["test_metrics"]["mean"], rel=1e-5)
    ext = tmp_path / "ext.csv"
    ext.write_text("smiles,activity\n" + "".join(f"{s},{v}\n" for s, v in zip(good, (2.0, 0.0, 0.0))))
    rc, stdout, err = run_cli(["evaluate", "--checkpoint", str(run), "--data", str(ext), "--target-col", "activity"],
                              capsys)
    assert rc == 0, err
    assert json.loads(stdout[:stdout.rindex("}") + 1])["metrics"]["data"]["mean"]["mae"] == pytest.approx(
        np.abs(mean - [2.0, 0.0, 0.0]).mean(), rel=1e-5)

    # explain: the combination's atoms are the equal-weight mean of its members' occlusions
    rc, _, err = run_cli(["explain", "--checkpoint", str(run), *good, "--out", str(tmp_path / "ex")], capsys)
    assert rc == 0, err
    parts = [cls.load(run / f"member{i}").atom_contributions([smiles_to_graph(s) for s in good])
             for i, cls in enumerate((KernelSVR, RandomForest))]
    atoms = _rows(tmp_path / "ex" / "atoms.csv")
    for g in range(3):
        want = (0.5 * parts[0].atoms[g] + 0.5 * parts[1].atoms[g])[:, 0].tolist()
        assert [float(r["nN"]) for r in atoms if r["row"] == str(g)] == pytest.approx(want, rel=1e-5, abs=1e-9)


def test_an_interrupted_fingerprint_run_resumes_to_the_uninterrupted_numbers(nitrogen_csv, tmp_path, capsys,
                                                                            monkeypatch, caplog):
    """Stopped while the forest fits (Ctrl-C): exit 130 with the command that resumes it; the
    folder holds the run (the same command without --resume is refused); --resume reuses the
    finished svr member and ends with the metrics and predictions of an uninterrupted run."""
    whole, cut, cache = tmp_path / "whole", tmp_path / "cut", tmp_path / "cache"
    rc, _, err = _train(capsys, nitrogen_csv, whole, "--members", "svr,rf", "--weights", "val", cache=cache)
    assert rc == 0, err

    def stop(self, ds):
        raise KeyboardInterrupt

    monkeypatch.setattr(RandomForest, "fit", stop)
    rc, _, err = _train(capsys, nitrogen_csv, cut, "--members", "svr,rf", "--weights", "val", cache=cache)
    assert rc == 130 and f"resume with: siggate train --resume {cut} --members svr,rf --weights val" in err
    assert (cut / "member0" / "predictor.json").is_file() and not (cut / "member1").exists()
    assert not (cut / "metrics.json").exists()
    monkeypatch.undo()
    rc, _, err = run_cli(["predict", "--checkpoint", str(cut), "CCO"], capsys)  # (it said: give a run folder)
    assert rc == 2 and err == (f"siggate predict: error: {cut}: a run that was stopped before it finished (members.yaml, "
                               f"no predictor.json or best.pt yet); finish it with siggate train --resume {cut}\n"), err
    project = tmp_path / "project"  # a folder with a config.yaml of its own is no stopped run
    project.mkdir()
    (project / "config.yaml").write_text("lr: 0.1\n")
    rc, _, err = run_cli(["predict", "--checkpoint", str(project), "CCO"], capsys)
    assert rc == 2 and "a folder with no predictor.json and neither ensemble.json nor best.pt" in err, err
    rc, _, err = _train(capsys, nitrogen_csv, cut, "--members", "svr,rf", "--weights", "val", cache=cache)
    assert rc == 2 and "holds a run (members.yaml)" in _one_line(err)
    stamp = (cut / "member0" / "arrays.pt").stat().st_mtime_ns

    def refit(self, ds):
        raise AssertionError("the finished svr member was fitted again")

    monkeypatch.setattr(KernelSVR, "fit", refit)
    caplog.set_level("INFO", logger="siggate.train")
    rc, _, err = run_cli(["train", "--resume", str(cut), "--members", "svr,rf", "--weights", "val", "--no-progress"],
                         capsys)
    assert rc == 0, err
    assert f"{cut / 'member0'}: the svr member fitted before is reused, not fitted again" in caplog.messages  # (said)
    assert (cut / "member0" / "arrays.pt").stat().st_mtime_ns == stamp
    assert json.loads((cut / "metrics.json").read_text()) == json.loads((whole / "metrics.json").read_text())
    assert (cut / "test_predictions.csv").read_bytes() == (whole / "test_predictions.csv").read_bytes()


def test_gnn_svr_and_rf_in_one_run(nitrogen_csv, tmp_path, capsys):
    """``--members gnn,svr,rf --ensemble 2``: two GNN members (seeds 0 and 1) then svr and rf, each
    scored on the terminal and in metrics.json; the combination predicts their mean; --resume
    reuses all four."""
    run = tmp_path / "run"
    assert _TRAIN_ARGS[:len(GNN_SCRATCH)] == GNN_SCRATCH  # the tiny GNN's flags without --members gnn
    tiny = [a for a in _TRAIN_ARGS[len(GNN_SCRATCH):]
            if a not in ("--target-col", "y", "--split", "column:split", "--no-progress")]
    rc, stdout, err = _train(capsys, nitrogen_csv, run, "--members", "gnn,svr,rf", "--ensemble", "2", "--epochs", "1",
                             *EQUAL_WEIGHTS, *SCRATCH, *tiny, cache=tmp_path / "cache")
    assert rc == 0, err
    res = json.loads((run / "metrics.json").read_text())
    assert [(m["kind"], m["seed"]) for m in res["members"]] == [("gnn", 0), ("gnn", 1), ("svr", 0), ("rf", 0)]
    assert list(_member_rows(stdout)) == ["member0", "member1", "member2", "member3", "combined"]
    assert (run / "member0" / "best.pt").is_file() and (run / "member3" / "arrays.pt").is_file()
    # the svr and rf keep the config they were fitted under; a GNN's run folder has its own config.yaml (helper-185)
    assert [(run / f"member{i}" / "fitted_with.yaml").is_file() for i in range(4)] == [False, False, True, True]
    assert (tmp_path / "cache" / "pe").is_dir()  # the GNN members read their positional encoding
    asked = ["NCCN", "c1ccccc1O"]
    singles = []
    for i in range(4):
        rc, _, err = run_cli(["predict", "--checkpoint", str(run / f"member{i}"), *asked, "--output",
                              str(tmp_path / f"m{i}.csv")], capsys)
        assert rc == 0, err
        singles.append([float(r["nN"]) for r in _rows(tmp_path / f"m{i}.csv")])
    rc, _, err = run_cli(["predict", "--checkpoint", str(run), *asked, "--output", str(tmp_path / "all.csv")], capsys)
    assert rc == 0, err
    rows = _rows(tmp_path / "all.csv")
    assert [float(r["nN"]) for r in rows] == pytest.approx(np.mean(singles, 0), rel=1e-4, abs=1e-5)
    assert [float(r["nN_uncertainty"]) for r in rows] == pytest.approx(np.std(singles, 0), rel=1e-3, abs=1e-5)
    stamps = {p: p.stat().st_mtime_ns for p in (run / "member0" / "best.pt", run / "member1" / "last.pt",
                                                 run / "member2" / "arrays.pt", run / "member3" / "arrays.pt")}
    rc, _, err = run_cli(["train", "--resume", str(run), "--members", "gnn,svr,rf", "--ensemble", "2",
                          *EQUAL_WEIGHTS, "--no-progress"], capsys)
    assert rc == 0, err
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    assert json.loads((run / "metrics.json").read_text())["test"] == pytest.approx(res["test"], rel=1e-6)


@pytest.mark.parametrize("argv, message", [
    (["--config", "pattern", "--members", "svr"],
     "--members svr: the svr member predicts one value per molecule, and pattern is a node-level dataset; train it "
     "with the GNN alone (drop --members)"),
    (["--config", "cluster", "--members", "gnn,svr,rf"],
     "--members gnn,svr,rf: the svr and rf members predict one value per molecule, and cluster is a node-level "
     "dataset"),
    (["--data", "x.csv", "--target-col", "y", "--members", "svr,rf", "--ensemble", "3"],
     "--ensemble 3 multiplies the GNN members and --members svr,rf holds none; add gnn to --members, or drop "
     "--ensemble"),
])
def test_what_the_fingerprint_members_refuse(tmp_path, capsys, argv, message):
    """Node-level (multiclass) benchmarks and --ensemble without a GNN: one line, exit 2, before
    any data is read or folder made."""
    rc, _, err = run_cli(["train", *argv, "--out", str(tmp_path / "o")], capsys)
    assert rc == 2 and message in _one_line(err)
    assert not (tmp_path / "o").exists()


def test_data_runs_take_the_csv_recipe_s_members_and_weights(nitrogen_csv, tmp_path, capsys, monkeypatch):
    """``siggate train --data`` without --members/--weights holds the members and weights the csv
    recipe names (``options.RECIPE_MEMBERS``); --members and --weights given win, --members alone
    keeps the recipe's weights for several kinds and averages one kind equally; another config
    keeps the GNN alone."""
    from siggate import options

    monkeypatch.setitem(options.RECIPE_MEMBERS, "csv", ("svr,rf", "val"))
    run = tmp_path / "r"
    rc, stdout, err = _train(capsys, nitrogen_csv, run, cache=tmp_path / "c")
    assert rc == 0, err
    rec = yaml.safe_load((run / "members.yaml").read_text())["_meta"]["members"]
    assert rec["kinds"] == ["svr", "rf"] and rec["weights"] == "val"
    assert [row[0] for row in _member_rows(stdout).values()] == ["svr", "rf", "val"]
    rc, _, err = _train(capsys, nitrogen_csv, tmp_path / "e", "--members", "svr", cache=tmp_path / "c")
    assert rc == 0, err
    rec = yaml.safe_load((tmp_path / "e" / "members.yaml").read_text())["_meta"]["members"]
    assert rec["kinds"] == ["svr"] and rec["weights"] == "equal"
    assert options.recipe_members("nci5k") == options.recipe_members(None) == ("gnn", "equal")
    assert options.recipe_members("csv", "rf,svr") == ("rf,svr", "val")
    assert options.recipe_members("csv", ["gnn"]) == (["gnn"], "val")
    assert options.run_weights(["gnn"], "val") == options.run_weights("gnn,gnn", "val") == "equal"
    assert options.run_weights("gnn,svr", "val") == "val" and options.run_weights("gnn,svr", "equal") == "equal"
    assert options.run_weights("gnn,svr", None) == "equal"
    with pytest.raises(ValueError, match="weights='Val': choose from 'equal', 'val'"):
        options.run_weights("gnn,svr", "Val")
    assert options.recipe_members("nci5k", "gnn,svr") == ("gnn,svr", "equal")


def test_the_member_kinds_the_help_names_are_the_registered_ones():
    from siggate.options import DEFAULT_MEMBERS, MEMBER_KIND_NAMES
    from siggate.train.members import MEMBER_KINDS, parse_kinds

    assert list(MEMBER_KIND_NAMES) == list(MEMBER_KINDS) and parse_kinds(DEFAULT_MEMBERS) == ["gnn"]
    # each kind's options section is a kind's, and each fingerprint kind's class says its own name
    import dataclasses

    from siggate.config import MembersConfig
    from siggate.predictors.forest import RandomForest
    from siggate.predictors.svr import KernelSVR

    assert {f.name for f in dataclasses.fields(MembersConfig)} <= set(MEMBER_KINDS)
    assert {cls.kind for cls in (KernelSVR, RandomForest)} == {f.name for f in dataclasses.fields(MembersConfig)}


def test_the_estimator_with_the_svr_member(nitrogen_csv):
    """``SigGateRegressor(members="svr")``: cloneable with its members, a run of the svr member
    alone (predictions equal to that member's), and inside ``cross_val_score``."""
    from sklearn.base import clone
    from sklearn.model_selection import cross_val_score

    from siggate import SigGateRegressor
    from siggate.options import DEFAULT_MEMBERS
    from siggate.train.members import members_of

    assert SigGateRegressor().get_params()["members"] is None  # the csv recipe's (recipe_members)
    assert DEFAULT_MEMBERS == "gnn"
    est = SigGateRegressor(members="svr", random_state=3)
    copy = clone(est)
    assert copy.get_params() == est.get_params() and copy.members == "svr"
    rows = _rows(nitrogen_csv)[:60]
    smiles, y = [r["smiles"] for r in rows], np.array([float(r["nN"]) for r in rows])
    copy.fit(smiles[:50], y[:50])
    (member,) = members_of(copy.predictor_)
    assert member.kind == "svr"
    assert copy.predict(smiles[50:]) == pytest.approx(member.predict_array(smiles[50:])[:, 0], rel=1e-5, abs=1e-6)
    scores = cross_val_score(est, smiles, y, cv=3, scoring="neg_mean_absolute_error")
    assert scores.shape == (3,) and np.all(np.isfinite(scores)) and np.all(scores < 0)


def test_the_shipped_default_trains_three_members_weighted_on_val_from_the_pretrained_gnn(nitrogen_csv, tmp_path,
                                                                                          capsys):
    """``siggate train --data`` with no member flags is the csv recipe as shipped: the GNN
    fine-tuned from the shipped weights (their pool_norm kept), ``svr`` and ``rf``, with weights
    fitted on validation that sum to one."""
    run = tmp_path / "default"
    rc, stdout, err = _train(capsys, nitrogen_csv, run, "--epochs", "1", cache=tmp_path / "c")
    assert rc == 0, err
    rec = yaml.safe_load((run / "members.yaml").read_text())["_meta"]["members"]
    assert rec == {"kinds": ["gnn", "svr", "rf"], "ensemble": 1, "weights": "val"}
    gnn = json.loads((run / "member0" / "metrics.json").read_text())
    assert gnn["init"]["source"] == "pretrained" and gnn["init"]["copied"] > 0
    assert gnn["resolved"]["model.pool_norm"] == pytest.approx(21.64, abs=0.01)
    m = json.loads((run / "metrics.json").read_text())
    assert [x["kind"] for x in m["members"]] == ["gnn", "svr", "rf"] and m["weighting"] == "val"
    assert np.sum(m["weights"], 0) == pytest.approx([1.0]) and min(min(w) for w in m["weights"]) >= 0
    assert [row[0] for row in _member_rows(stdout).values()] == ["gnn", "svr", "rf", "val"]


def test_resume_of_an_older_run_that_recorded_val_weights_for_copies_of_one_kind(tmp_path):
    """A run of GNN copies saved before options.run_weights recorded ``weights: val``; its copies
    averaged equally all the same, so a resume without --weights (or with either) is accepted,
    and another --ensemble is still refused."""
    import argparse

    from siggate import cli
    from siggate.train.rundir import MEMBERS_RECORD, saved_members

    (tmp_path / MEMBERS_RECORD).write_text(yaml.safe_dump({"_meta": {"members": {"kinds": ["gnn"], "ensemble": 2,
                                                                                 "weights": "val"}}}))
    assert saved_members(tmp_path) == {"kinds": ["gnn"], "ensemble": 2, "weights": "equal"}  # what every reader sees
    for weights in ("equal", "val"):
        cli._check_saved_members(tmp_path, ["gnn"], weights, argparse.Namespace(ensemble=2))
    with pytest.raises(cli.CLIError, match="the run was trained with --ensemble 2, not --ensemble 3; give them as it was trained"):
        cli._check_saved_members(tmp_path, ["gnn"], "equal", argparse.Namespace(ensemble=3))
    # a run that weighed its members on val, resumed with --weights equal: the message names the flag that differs
    (tmp_path / MEMBERS_RECORD).write_text(yaml.safe_dump({"_meta": {"members": {"kinds": ["gnn", "svr"], "ensemble": 2,
                                                                                 "weights": "val"}}}))
    with pytest.raises(cli.CLIError, match="trained with --members gnn,svr --ensemble 2 --weights val, not --members "
                                           "gnn,svr --ensemble 2 --weights equal;"):
        cli._check_saved_members(tmp_path, ["gnn", "svr"], "equal", argparse.Namespace(ensemble=2))
    (tmp_path / MEMBERS_RECORD).write_text(yaml.safe_dump({"_meta": {"members": {"kinds": ["gnn"], "weights": "mean"}}}))
    with pytest.raises(cli.CLIError, match=r"members.yaml records weights='mean': choose from 'equal', 'val'; restore"):
        cli._check_saved_members(tmp_path, ["gnn"], "equal", argparse.Namespace(ensemble=None))
    with pytest.raises(cli.CLIError, match=r"^--resume \S+: \S+members.yaml records weights='mean'"):
        cli._no_run_to_resume(tmp_path, ensemble=False)


def test_the_members_section_sets_the_fingerprint_members_options(nitrogen_csv, tmp_path, capsys):
    """``--set members.svr.*`` / ``members.rf.*`` reach the members: the saved predictors hold the
    grid given (the svr choosing C on val among the values given, nothing averaged; a forest of 7
    trees choosing between two max_features), the run's members.yaml records them, and a member
    refitted from those options by hand predicts what the run's member predicts."""
    run = tmp_path / "run"
    rc, _, err = _train(capsys, nitrogen_csv, run, "--members", "svr,rf", *EQUAL_WEIGHTS,
                        "--set", "members.svr.C=1,8", "--set", "members.svr.average=", "--set",
                        "members.svr.radius=1", "--set", "members.svr.fingerprint=morgan",
                        "--set", "members.rf.n_estimators=7", "--set", "members.rf.max_features=0.5,sqrt")
    assert rc == 0, err
    svr = KernelSVR.load(run / "member0")
    rf = RandomForest.load(run / "member1")
    assert svr.grid.to_dict() == {"fingerprint": ["morgan"], "radius": [1], "size": [2048], "C": [1.0, 8.0],
                                  "epsilon": [0.05]} and svr.average == ()
    chosen = svr.models_[0].meta["chosen"]
    assert chosen["C"] in (1.0, 8.0) and chosen["radius"] == 1  # one C chosen, not a list averaged over
    assert rf.n_estimators == 7 and rf.grid.to_dict() == {"max_features": [0.5, "sqrt"]}
    saved = yaml.safe_load((run / "members.yaml").read_text())["members"]
    assert saved["svr"]["C"] == [1.0, 8.0] and saved["svr"]["average"] == [] and saved["rf"]["n_estimators"] == 7

    # the same options through the Python API give the same predictions (labels as the CSV holds them)
    graphs = _nitrogen_graphs(_nitrogen_molecules(150))
    for g in graphs:
        g.y = torch.tensor([[float(f"{float(g.y):.6f}")]], dtype=g.y.dtype)
    ds = GraphDataset(info=N_INFO, splits={k: graphs[a:b] for k, (a, b) in FP_SPLITS.items()})
    hand = KernelSVR({"fingerprint": ["morgan"], "radius": [1], "C": [1.0, 8.0]}, average=()).fit(ds)
    assert hand.models_[0].meta["chosen"] == chosen
    smiles = [r["smiles"] for r in _rows(run / "splits.csv") if r["split"] == "test"]
    assert hand.predict_array(smiles) == pytest.approx(svr.predict_array(smiles), rel=1e-4, abs=1e-6)


@pytest.mark.parametrize("setting, message", [
    ("members.svr.C=0,5", "members.svr.C: 0.0 is out of range; allowed values: > 0."),
    ("members.svr.average=radius", "members.svr.average: 'radius' is not allowed. Allowed values: C, epsilon"),
    ("members.svr.fingerprint=morgan+ecfp", "members.svr.fingerprint: fingerprint 'morgan+ecfp': give distinct kinds"),
    ("members.rf.max_features=1.5", "members.rf.max_features: 1.5 is out of range; allowed values: fractions in "
     "(0, 1] or sqrt / log2."),
    ("members.svr.radius=2.5", "members.svr.radius: 2.5 is not allowed; expected a list of integers"),
    ("members.svr.C=", "members.svr.C: give at least one value"),
    ("members.svr.C=5,5", "members.svr.C: 5.0 is given twice; list each value once"),
    ("members.svr.fingerprint=morgan+path,path+morgan", "members.svr.fingerprint: ['morgan+path', 'path+morgan'] "
     "names one kernel twice (the same kinds in another order); list each once"),
    ("members.svr.epsilon=1e400", "members.svr.epsilon: '1e400' is not allowed; expected a list of finite numbers"),
    ("members.svm.C=1", "unknown config key 'members.svm' (value {'C': 1}). Did you mean 'members.svr'?"),
])
def test_bad_member_options_are_one_line_before_any_work(tmp_path, capsys, setting, message):
    rc, _, err = run_cli(["train", "--data", "x.csv", "--target-col", "y", "--members", "svr,rf", "--set", setting,
                          "--out", str(tmp_path / "o")], capsys)
    assert rc == 2 and message in _one_line(err)
    assert not (tmp_path / "o").exists()


def test_the_default_members_section_builds_the_members_constructors_defaults(tmp_path):
    """The config's ``members`` defaults are the constructors' (one home: siggate.options), so a run
    without ``--set members.*`` holds what ``KernelSVR()`` and ``RandomForest()`` are."""
    from siggate.config import load_config
    from siggate.train.members import build_members

    cfg = load_config("csv", ["data.csv=x.csv", "data.target_cols=y", "train.seed=3"])
    (_, _, svr), (_, _, rf) = build_members(["svr", "rf"], cfg, tmp_path)
    assert svr.options() == KernelSVR(seed=3).options()
    assert rf.options() == RandomForest(seed=3, n_jobs=rf.n_jobs).options()
    assert svr.average == ("C",) and svr.grid.C == (5.0, 20.0) and rf.grid.max_features == (0.3,)

    # every option reaches its member (none left at its default by the factory)
    sets = ["members.svr.fingerprint=atompair,morgan+path", "members.svr.radius=1", "members.svr.size=512",
            "members.svr.C=2,3", "members.svr.epsilon=0.1,0.2", "members.svr.average=epsilon",
            "members.svr.exact_max=77", "members.svr.landmarks=33", "members.rf.n_estimators=9",
            "members.rf.radius=3", "members.rf.size=256", "members.rf.max_features=log2"]
    cfg = load_config("csv", ["data.csv=x.csv", "data.target_cols=y", "train.seed=3", *sets])
    (_, _, svr), (_, _, rf) = build_members(["svr", "rf"], cfg, tmp_path)
    assert svr.options() == KernelSVR({"fingerprint": ["atompair", "morgan+path"], "radius": [1], "size": [512],
                                       "C": [2.0, 3.0], "epsilon": [0.1, 0.2]}, exact_max=77, landmarks=33, seed=3,
                                      average=("epsilon",)).options()
    assert svr.options()["exact_max"] == 77 and svr.average == ("epsilon",)
    assert rf.options() == RandomForest(9, 3, 256, {"max_features": ["log2"]}, seed=3, n_jobs=rf.n_jobs).options()
    assert (rf.n_estimators, rf.radius, rf.size) == (9, 3, 256)


def test_a_config_saved_before_the_members_section_or_a_field_of_it_reads_as_the_defaults():
    """Runs saved before ``members`` existed (or before one of its fields) resume and are reused
    without a difference; a saved value that differs from the flags is still one."""
    from siggate.config import load_config, upgrade_config_dict
    from siggate.train.rundir import resume_differences

    current = load_config("csv", ["data.csv=x.csv", "data.target_cols=y"]).to_dict()
    old = {k: v for k, v in current.items() if k != "members"}
    assert resume_differences(upgrade_config_dict(old), current) == []
    partial = {**old, "members": {"svr": {"C": [5.0, 20.0]}}}  # a field added later is missing here
    assert resume_differences(upgrade_config_dict(partial), current) == []
    other = {**old, "members": {"rf": {"n_estimators": 7}}}
    assert resume_differences(upgrade_config_dict(other), current) == [
        "members.rf.n_estimators: checkpoint has 7, current config has 100"]


def test_data_refused_before_any_member_leaves_no_run_behind(nitrogen_csv, tmp_path, capsys):
    """A run of several members whose data is refused (a split column without val rows) exits 2
    with one line and leaves no record in its folder, so the same command with the flag mended
    trains into it without --overwrite (before, ``members.yaml`` was written first and the mended
    command was refused: "holds a run")."""
    no_val = tmp_path / "noval.csv"
    no_val.write_text(nitrogen_csv.read_text().replace(",val\n", ",train\n"))
    out = tmp_path / "o"
    rc, _, err = _train(capsys, no_val, out, "--members", "svr,rf", "--weights", "val")
    assert rc == 2 and "the val split is empty (150 usable rows)" in _one_line(err)
    assert not holds_run(out)
    rc, _, err = _train(capsys, no_val, out, "--members", "svr,rf", "--weights", "val", "--val-fraction", "0.2")
    assert rc == 0, err
    splits = json.loads((out / "metrics.json").read_text())["splits"]
    assert splits == {"train": 96, "val": 24, "test": 30}


def test_a_refusal_while_fitting_forgets_only_a_bare_record(nitrogen_csv, tmp_path, capsys, monkeypatch):
    """A new run refused while its first member fits (exit 2, one line) leaves no run, so the
    same command runs afterwards without --overwrite, also beside the user's own files of other
    names (they stay); refused after a member was saved, the folder keeps everything (nothing
    trained is lost) and holds the run. A file of its own named like a run's log is refused
    before any work (a run would write over it)."""
    def refuse(self, ds):
        raise DataError("refused by the test")

    bare, kept = tmp_path / "bare", tmp_path / "kept"
    monkeypatch.setattr(KernelSVR, "fit", refuse)
    rc, _, err = _train(capsys, nitrogen_csv, bare, "--members", "svr,rf", "--weights", "val")
    assert rc == 2 and "refused by the test" in _one_line(err)
    assert not holds_run(bare) and not (bare.exists() and any(bare.iterdir()))
    own = tmp_path / "own"
    own.mkdir()
    (own / "log.csv").write_text("the user's own\n")
    rc, _, err = _train(capsys, nitrogen_csv, own, "--members", "svr,rf", "--weights", "val")
    assert rc == 2 and f"--out {own} holds log.csv, names a run writes, but no run" in _one_line(err)
    assert (own / "log.csv").read_text() == "the user's own\n" and not holds_run(own)
    (own / "log.csv").rename(own / "notes.csv")
    rc, _, err = _train(capsys, nitrogen_csv, own, "--members", "svr,rf", "--weights", "val")
    assert rc == 2 and "refused by the test" in _one_line(err)
    assert (own / "notes.csv").read_text() == "the user's own\n" and not holds_run(own)
    assert sorted(p.name for p in own.iterdir()) == ["notes.csv"]
    monkeypatch.undo()
    rc, _, err = _train(capsys, nitrogen_csv, bare, "--members", "svr,rf", "--weights", "val")
    assert rc == 0, err
    monkeypatch.setattr(RandomForest, "fit", refuse)
    rc, _, err = _train(capsys, nitrogen_csv, kept, "--members", "svr,rf", "--weights", "val")
    assert rc == 2 and "refused by the test" in _one_line(err)
    assert holds_run(kept) and (kept / "members.yaml").is_file() and (kept / "member0" / "predictor.json").is_file()


def test_overwrite_clears_the_fingerprint_members_too(nitrogen_csv, tmp_path, capsys):
    """--overwrite removed the members' manifests but not their arrays.pt, so member0/ and
    member1/ of an svr,rf run stayed beside the new run's files."""
    out = tmp_path / "o"
    rc, _, err = _train(capsys, nitrogen_csv, out, "--members", "svr,rf", "--weights", "val")
    assert rc == 0, err
    assert (out / "member1" / "arrays.pt").is_file()
    rc, _, err = _train(capsys, nitrogen_csv, out, "--members", "rf", "--overwrite")
    assert rc == 0, err
    assert not (out / "member1").exists()  # the old rf member: kept before, beside the new run
    # a member or tb/ that is a symbolic link: --overwrite removes the link, never what it points to
    victim = tmp_path / "victim"
    (victim / "tb").mkdir(parents=True)
    for name in ("best.pt", "metrics.json", "config.yaml", "notes.txt"):
        (victim / name).write_text("precious\n")
    (victim / "tb" / "keep.txt").write_text("precious\n")
    (out / "member3").symlink_to(victim, target_is_directory=True)
    shutil.rmtree(out / "member0")
    (out / "member0").symlink_to(victim, target_is_directory=True)
    (out / "tb").symlink_to(victim / "tb", target_is_directory=True)
    rc, _, err = _train(capsys, nitrogen_csv, out, "--members", "rf", "--overwrite")
    assert rc == 0, err
    assert sorted(p.relative_to(victim).as_posix() for p in victim.rglob("*")) == [
        "best.pt", "config.yaml", "metrics.json", "notes.txt", "tb", "tb/keep.txt"]
    assert not (out / "member3").exists() and not (out / "member0").is_symlink() and not (out / "tb").is_symlink()


def test_a_damaged_or_crafted_run_record_is_one_line_on_resume(nitrogen_csv, tmp_path, capsys):
    """members.yaml (read as config.yaml is) that is not YAML, not a mapping, or holds a Python
    tag ended --resume in a ParserError, AttributeError, ConstructorError or TypeError traceback;
    each is refused in one line naming the file, exit 2, and nothing is trained."""
    out = tmp_path / "run"
    rc, _, err = _train(capsys, nitrogen_csv, out, "--members", "svr,rf", "--weights", "val")
    assert rc == 0, err
    kept = {name: (out / name).read_text() for name in ("members.yaml",)}
    marker = tmp_path / "ran"
    bad = {"not yaml": "a: [1, 2\n", "a list": "- 1\n- 2\n",
           "a python tag": f"!!python/object/apply:os.makedirs ['{marker}']\n", "_meta a list": "_meta: [1]\n"}
    for name in kept:
        for what, text in bad.items():
            (out / name).write_text(text)
            rc, _, err = run_cli(["train", "--resume", str(out), "--no-progress"], capsys)
            line = _one_line(err)
            assert rc == 2 and f"{out / name}: not a run record siggate reads" in line, (name, what, line)
        (out / name).write_text(kept[name])
    assert not marker.exists()  # safe_load never constructs the tag's object


def test_resume_refuses_a_saved_member_of_another_kind(nitrogen_csv, tmp_path, capsys):
    """With member0 and member1 swapped, --resume reused the rf saved as member0 for the svr the
    record names (its scores printed as the svr's) and went on. Refused in one line."""
    out = tmp_path / "run"
    rc, _, err = _train(capsys, nitrogen_csv, out, "--members", "svr,rf", "--weights", "val")
    assert rc == 0, err
    (out / "member0").rename(out / "swap")
    (out / "member1").rename(out / "member0")
    (out / "swap").rename(out / "member1")
    kept = (out / "metrics.json").read_bytes()
    rc, _, err = run_cli(["train", "--resume", str(out), "--no-progress"], capsys)
    assert rc == 2 and (f"{out / 'member0'} holds a saved rf member where the run's record puts its svr member"
                        in _one_line(err))
    assert (out / "metrics.json").read_bytes() == kept


def test_resume_refuses_members_yaml_edited_since_a_saved_member_was_fitted(nitrogen_csv, tmp_path, capsys):
    """A run without a GNN member, its members.yaml edited (another split, another C) before --resume:
    the svr fitted on the old split was reused beside an rf fitted on the new one, and the weights were
    fitted on val molecules the svr had trained on; exit 0 (helper-179). Refused in one line, before the
    record is rewritten; the record as it was resumes."""
    out = tmp_path / "run"
    rc, _, err = _train(capsys, nitrogen_csv, out, "--members", "svr,rf", "--weights", "val")
    assert rc == 0, err
    assert (out / "member0" / "fitted_with.yaml").is_file() and (out / "member1" / "fitted_with.yaml").is_file()
    import shutil

    shutil.rmtree(out / "member1")
    (out / "metrics.json").unlink()  # stopped after its svr
    record = (out / "members.yaml").read_text()
    for edit in (("  split: column:split\n", "  split: random\n"), ("    - 5.0\n    - 20.0\n", "    - 1.0\n")):
        assert edit[0] in record
        (out / "members.yaml").write_text(record.replace(*edit, 1))
        rc, _, err = run_cli(["train", "--resume", str(out), "--no-progress"], capsys)
        line = _one_line(err)
        assert rc == 2 and f"cannot reuse the svr member in {out / 'member0'}: it was fitted under another config (" in line
        assert ("data.split" if "split" in edit[0] else "members.svr.C") in line and "train into a new --out" in line
        assert not (out / "member1").exists() and not (out / "metrics.json").exists()
    (out / "members.yaml").write_text(record)
    rc, _, err = run_cli(["train", "--resume", str(out), "--no-progress"], capsys)
    assert rc == 0, err
    assert (out / "member1" / "predictor.json").is_file() and (out / "metrics.json").is_file()


def test_the_svr_scored_on_val_is_the_kind_of_model_it_ships():
    """A target of at most exact_max training rows but more train and val rows was fitted exactly
    on train (its val predictions weighed the members, calibrated the intervals and were the
    reported val score) and refitted as a Nyström ridge on train and val (the model that predicts,
    never scored: test error 2.3x and 90% intervals covering 67% in one case). The rows that
    decide are those of the refit: its train-only fit is the ridge on the same landmarks that a
    member without refit, of that kind, fits on the training rows."""
    graphs = _nitrogen_graphs(_nitrogen_molecules(150))
    ds = GraphDataset(info=N_INFO, splits={k: graphs[a:b] for k, (a, b) in FP_SPLITS.items()})
    grid = {"fingerprint": ["morgan"], "radius": [1], "C": [5.0]}
    n_train = len(ds.train)
    shipped = KernelSVR(grid, exact_max=n_train, landmarks=30, seed=0).fit(ds)  # train <= 100 < train + val
    assert shipped.models_[0].mode == "ridge" and shipped.models_[0].meta["basis"] == "nystrom 30"
    alike = KernelSVR(grid, exact_max=n_train - 1, landmarks=30, seed=0, refit=False).fit(ds)  # the same kind
    assert alike.models_[0].mode == "ridge"
    val_smiles = [g.smiles for g in ds.val]
    assert shipped.held_out_["val"][:, 0] == pytest.approx(alike.predict_array(val_smiles)[:, 0], rel=1e-10, abs=1e-12)
    exact = KernelSVR(grid, exact_max=n_train + len(ds.val), seed=0).fit(ds)  # both fits exact
    assert exact.models_[0].mode == "svr" and exact.models_[0].meta["basis"] == "exact"
