"""``siggate evaluate``: a run's own splits from any directory, a changed training CSV named with
both hashes before anything is scored, an external labelled CSV (``--data``), ensembles (the
members' mean) and per-target metrics, each checked against predictions made independently
by ``siggate predict``."""

from __future__ import annotations

import csv
import hashlib
import io
import json
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import numpy as np
import pytest
import torch

from siggate.data.csvdata import CSV_VERSION, HEADER_AGAIN
from test_bad_inputs import _TRAIN_ARGS, _write_train_csv
from test_ensemble import _read
from test_predict import nci_smiles, run_cli


@pytest.fixture(scope="module")
def ensemble2(tmp_path_factory):
    """An ensemble of two members trained on ``d.csv`` given by a *relative* path."""
    import os

    from siggate.cli import main

    tmp = tmp_path_factory.mktemp("evalrun")
    _write_train_csv(tmp / "d.csv", n=60)
    old = os.getcwd()
    os.chdir(tmp)
    try:
        with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
            rc = main(["train", "--data", "d.csv", *_TRAIN_ARGS, "--epochs", "1", "--ensemble", "2",
                       "--out", "ens", "--cache-dir", "c"])
    finally:
        os.chdir(old)
    assert rc == 0
    return tmp / "ens", tmp / "d.csv", tmp


def _predict(run: Path, smiles: list[str], tmp: Path, capsys) -> list[float]:
    """Predictions of ``siggate predict`` (its own featurization and averaging)."""
    out = tmp / "pred.csv"
    run_cli(["predict", "--checkpoint", str(run), *smiles, "--output", str(out)], capsys)
    return [float(r["y"]) if r["y"] else float("nan") for r in _read(out)]


def test_own_split_from_another_directory_matches_the_run(ensemble2, tmp_path, capsys, monkeypatch):
    ens, data, _ = ensemble2
    member = ens / "member0"
    monkeypatch.chdir(tmp_path)  # the run stored d.csv relative to its own directory
    rc, out, err = run_cli(["evaluate", "--checkpoint", str(member), "--split", "all",
                            "--cache-dir", str(tmp_path / "c")], capsys)
    assert rc == 0, err
    res = json.loads(out)
    m = json.loads((member / "metrics.json").read_text())
    assert res["test"] == pytest.approx(m["test"], rel=1e-5) and res["val"] == pytest.approx(m["val"], rel=1e-5)
    assert res["data_file"] == str(data.resolve()) and res["members"] == 1
    assert res["per_target"]["test"] == {"y": pytest.approx(res["test"])}
    assert res["n"] == {"train": 40, "val": 10, "test": 10}


def test_ensemble_on_its_test_split_scores_the_members_mean(ensemble2, tmp_path, capsys):
    ens, data, _ = ensemble2
    rc, out, err = run_cli(["evaluate", "--checkpoint", str(ens), "--cache-dir", str(tmp_path / "c"),
                            "--output", str(tmp_path / "s.json")], capsys)
    assert rc == 0, err
    res = json.loads(out)
    assert res["members"] == 2 and json.loads((tmp_path / "s.json").read_text()) == res
    rows = [r for r in _read(data) if r["split"] == "test"]
    pred = np.array(_predict(ens, [r["smiles"] for r in rows], tmp_path, capsys))
    want = float(np.mean(np.abs(pred - np.array([float(r["y"]) for r in rows]))))
    assert res["test"] == pytest.approx(want, rel=1e-4, abs=1e-5)
    singles = [json.loads((ens / f"member{i}" / "metrics.json").read_text())["test"] for i in range(2)]
    assert all(abs(res["test"] - s) > 1e-7 for s in singles)  # the mean, not one member


@pytest.mark.parametrize("which", ["member0", "ensemble"])
def test_external_csv_with_bad_and_unlabelled_rows(ensemble2, tmp_path, capsys, caplog, which):
    ens, _, _ = ensemble2
    run = ens / "member0" if which == "member0" else ens
    smiles = nci_smiles(80)[60:72]
    labels = [0.1 * (i + 5) for i in range(len(smiles))]
    ext = tmp_path / "external.csv"
    with open(ext, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "mol", "logS"])
        for i, (s, y) in enumerate(zip(smiles, labels)):
            w.writerow([f"m{i}", s, y])
        w.writerow(["bad", "not-a-smiles", 1.0])
        w.writerow(["nolabel", "CCO", ""])
    rc, out, err = run_cli(["evaluate", "--checkpoint", str(run), "--data", str(ext), "--smiles-col", "mol",
                            "--target-col", "logS"], capsys)
    assert rc == 0, err
    res = json.loads(out)
    assert res["rows"] == {"rows": 14, "scored": 12, "invalid": 1, "unlabelled": 1, "bad_label": 0, "bad_label_cell": 0, "malformed": 0,
                           "empty": 0, "header_again": 0, "fitted": 0}  # none of the training molecules
    # the invalid row is named with its line and reason, as a bad label is (it was only counted)
    [warned] = [r.getMessage() for r in caplog.records if "cannot be scored" in r.getMessage()]
    assert warned.startswith(f"--data {ext}: 1 row(s) hold a SMILES that cannot be scored (first: line 14, ")
    pred = np.array(_predict(run, smiles, tmp_path, capsys))
    want = float(np.mean(np.abs(pred - np.array(labels))))
    assert res["data"] == pytest.approx(want, rel=1e-4, abs=1e-5) and res["n"] == {"data": 12}
    assert res["members"] == (1 if which == "member0" else 2)


def test_external_csv_molecules_above_max_atoms(ensemble2, tmp_path, capsys, caplog):
    """evaluate --data dropped molecules above predict's atom limit as 'invalid', without a word
    and without a way to score them: --max-atoms sets the limit, and each dropped row is named."""
    ens, _, _ = ensemble2
    ext = tmp_path / "big.csv"
    ext.write_text("smiles,y\nCCO,0.1\nCCCO,0.2\nCCCCCCCCCCCC,0.3\n")
    rc, out, err = run_cli(["evaluate", "--checkpoint", str(ens), "--data", str(ext), "--max-atoms", "8"], capsys)
    assert rc == 0, err
    res = json.loads(out)
    assert (res["rows"]["scored"], res["rows"]["invalid"]) == (2, 1)
    [warned] = [r.getMessage() for r in caplog.records if "cannot be scored" in r.getMessage()]
    assert "(first: line 4, molecule has 12 heavy atoms, above the limit of 8 (--max-atoms))" in warned
    rc, out, err = run_cli(["evaluate", "--checkpoint", str(ens), "--data", str(ext), "--max-atoms", "12"], capsys)
    assert rc == 0 and json.loads(out)["rows"]["scored"] == 3
    big = tmp_path / "onlybig.csv"
    big.write_text("smiles,y\nCCCCCCCCCCCC,0.3\n")
    rc, out, err = run_cli(["evaluate", "--checkpoint", str(ens), "--data", str(big), "--max-atoms", "8"], capsys)
    assert rc == 2 and err.strip().splitlines()[-1] == (
        f"siggate evaluate: error: --data {big}: no row with a valid SMILES and a label to score (1 whose SMILES cannot "
        "be scored (first: molecule has 12 heavy atoms, above the limit of 8 (--max-atoms)), 0 without a label, 0 with "
        "a label that cannot be scored, 0 with more fields than the header)")
    for argv, why in ((["--max-atoms", "0", "--data", str(ext)], "max_atoms (--max-atoms) must be a positive integer, "
                                                                  "got 0"),
                      (["--max-atoms", "5"], "--max-atoms limits the molecules of --data FILE.csv"),
                      (["--max-atoms", "1000"], "--max-atoms limits the molecules of --data FILE.csv")):
        rc, out, err = run_cli(["evaluate", "--checkpoint", str(ens), *argv], capsys)
        assert rc == 2 and out == "" and why in err and len(err.strip().splitlines()) == 1


def test_changed_training_csv_is_named_with_both_hashes(ensemble2, tmp_path, capsys, caplog):
    ens, data, _ = ensemble2
    member = ens / "member1"
    recorded = torch.load(member / "best.pt", weights_only=True)["data_source"]
    assert recorded == {"csv": str(data.resolve()), "sha256": hashlib.sha256(data.read_bytes()).hexdigest(),
                        "reading": CSV_VERSION}
    original = data.read_bytes()
    try:
        data.write_bytes(original.replace(b",0.", b",9.", 1))
        now = hashlib.sha256(data.read_bytes()).hexdigest()
        rc, out, err = run_cli(["evaluate", "--checkpoint", str(member), "--cache-dir", str(tmp_path / "c")], capsys)
        assert rc == 2 and out == "" and "Traceback" not in err
        assert len(err.strip().splitlines()) == 1
        assert recorded["sha256"][:16] in err and now[:16] in err and "--allow-changed" in err and "--data" in err
        rc, out, err = run_cli(["evaluate", "--checkpoint", str(member), "--cache-dir", str(tmp_path / "c"),
                                "--allow-changed"], capsys)
        assert rc == 0 and json.loads(out)["test"] >= 0
        assert any("changed since training" in r.getMessage() and "--allow-changed" in r.getMessage()
                   for r in caplog.records if r.levelname == "WARNING")
    finally:
        data.write_bytes(original)


def test_refusals_are_one_line(ensemble2, tmp_path, capsys):
    ens, data, _ = ensemble2
    member = str(ens / "member0")
    cases = [
        (["--target-col", "y"], "give --data too"),
        (["--data", str(data), "--split", "val"], "drop --split"),
        (["--data", str(tmp_path / "none.csv")], "no such file"),
        (["--data", str(data), "--target-col", "nope"], "no column 'nope'"),
        (["--data", str(data), "--target-col", "y,split"], "predicts 1 target(s)"),
        (["--split", "dev"], "unknown split 'dev'"),
    ]
    for argv, needle in cases:
        rc, _, err = run_cli(["evaluate", "--checkpoint", member, "--cache-dir", str(tmp_path / "c"), *argv], capsys)
        assert rc == 2 and needle in err and len(err.strip().splitlines()) == 1, (argv, err)


def test_predicts_output_is_not_scored_as_labels(ensemble2, tmp_path, capsys):
    """``evaluate --data`` on predict's output of unlabelled molecules read its prediction column,
    named after the target, as the labels: MAE 0, R2 1, without a word. It is refused; the output
    of a labelled file (labels kept, predictions in ``y_pred``) is still scored, on its labels."""
    run, data, _ = ensemble2
    rows = list(csv.DictReader(data.open()))[:12]
    unlabelled, labelled = tmp_path / "new.csv", tmp_path / "lab.csv"
    unlabelled.write_text("id,smiles\n" + "".join(f"m{i},{r['smiles']}\n" for i, r in enumerate(rows)))
    labelled.write_text("smiles,y\n" + "".join(f"{r['smiles']},{r['y']}\n" for r in rows))
    outs = {}
    for name, src in (("new", unlabelled), ("lab", labelled)):
        outs[name] = tmp_path / f"{name}_pred.csv"
        rc, _, err = run_cli(["predict", "--checkpoint", str(run), "--input", str(src), "--output", str(outs[name])],
                             capsys)
        assert rc == 0, err
    header = next(csv.reader(outs["new"].open()))
    assert header[:3] == ["id", "smiles", "y"] and header[-1] == "error" and "y_uncertainty" in header
    rc, out, err = run_cli(["evaluate", "--checkpoint", str(run), "--data", str(outs["new"])], capsys)
    assert rc == 2 and out == "" and err == (
        f"siggate evaluate: error: --data {outs['new']} is siggate predict's output: its column 'y' holds the model's "
        "predictions (a labelled input's would be named 'y_pred'), not measured labels, and would score a perfect "
        "fit; give the file of measured labels, or name its label column with --target-col\n")
    rc, out, err = run_cli(["evaluate", "--checkpoint", str(run), "--data", str(outs["lab"]), "--output",
                            str(tmp_path / "s.json")], capsys)
    assert rc == 0, err
    scored = json.loads((tmp_path / "s.json").read_text())
    y = np.array([float(r["y"]) for r in rows])
    p = np.array([float(r["y_pred"]) for r in csv.DictReader(outs["lab"].open())])
    assert scored["n"]["data"] == 12
    assert scored["metrics"]["data"]["mean"]["mae"] == pytest.approx(float(np.mean(np.abs(y - p))), abs=1e-5)


def test_a_run_read_with_decimal_commas_scores_its_own_file_without_the_flag_again(tmp_path, capsys):
    """A run trained with ``--decimal ,`` made ``evaluate --data`` of its own CSV refuse the file
    until ``--decimal ,`` was given again: the run's mark reads its own file; another file still
    takes '.' unless told."""
    src = tmp_path / "d.csv"
    _write_train_csv(src)
    rows = list(csv.DictReader(src.open()))
    own = tmp_path / "eu.csv"
    own.write_text("smiles;y;split\n" + "".join(f"{r['smiles']};{r['y'].replace('.', ',')};{r['split']}\n"
                                               for r in rows))
    run = tmp_path / "run"
    rc, _, err = run_cli(["train", "--data", str(own), "--target-col", "y", "--split", "column:split", "--decimal", ",",
                          "--members", "rf", "--out", str(run)], capsys)
    assert rc == 0, err
    scores = {}
    for flags in ([], ["--decimal", ","]):
        rc, out, err = run_cli(["evaluate", "--checkpoint", str(run), "--data", str(own), *flags], capsys)
        assert rc == 0, err
        scores[len(flags)] = json.loads(out)
    assert scores[0]["rows"] == scores[2]["rows"] and scores[0]["rows"]["scored"] == len(rows)
    assert scores[0]["data"] == scores[2]["data"]
    other = tmp_path / "other.csv"
    other.write_bytes(own.read_bytes())  # the same text, not the run's file: '.' unless told
    rc, out, err = run_cli(["evaluate", "--checkpoint", str(run), "--data", str(other)], capsys)
    assert rc == 2 and "written with a decimal comma" in err and "--decimal ," in err


def test_score_per_target_against_numpy():
    from torch_geometric.data import Data

    from siggate.data.base import TaskInfo
    from siggate.train.evaluate import score
    from siggate.train.scoring import scored_rows

    info = TaskInfo(name="toy", task="regression", num_tasks=2, metric="mae", target_names=["a", "b"])
    g = torch.Generator().manual_seed(0)
    y = torch.randn(7, 2, generator=g) * torch.tensor([1.0, 100.0])
    y[2, 1] = float("nan")  # a missing label
    pred = torch.randn(7, 2, generator=g)
    graphs = [Data(y=y[i:i + 1]) for i in range(7)]
    res = score(info, *scored_rows(info, graphs, pred, None))
    yn, pn = y.numpy(), pred.numpy()
    a = np.mean(np.abs(yn[:, 0] - pn[:, 0]))
    ok = ~np.isnan(yn[:, 1])
    b = np.mean(np.abs(yn[ok, 1] - pn[ok, 1]))
    assert res["per_target"] == {"a": pytest.approx(a, rel=1e-6), "b": pytest.approx(b, rel=1e-6)}
    assert res["n"] == 7 and np.isfinite(res["metric"])


def test_random_split_ensemble_is_evaluated_on_the_split_it_trained_on(tmp_path, capsys):
    """The members of an ensemble share the split drawn with its first seed; a member's own
    checkpoint records seed+i, and evaluate must not re-split with that (its 'test' would then
    hold molecules the member trained on)."""
    _write_train_csv(tmp_path / "d.csv", n=60)
    args = [a if a != "column:split" else "random" for a in _TRAIN_ARGS]
    rc, _, err = run_cli(["train", "--data", str(tmp_path / "d.csv"), *args, "--epochs", "1", "--ensemble", "2",
                          "--out", str(tmp_path / "ens"), "--cache-dir", str(tmp_path / "c")], capsys)
    assert rc == 0, err
    ens = json.loads((tmp_path / "ens" / "metrics.json").read_text())
    for member in ("member0", "member1"):
        rc, out, err = run_cli(["evaluate", "--checkpoint", str(tmp_path / "ens" / member), "--split", "all",
                                "--cache-dir", str(tmp_path / "c")], capsys)
        assert rc == 0, err
        m = json.loads((tmp_path / "ens" / member / "metrics.json").read_text())
        assert json.loads(out)["test"] == pytest.approx(m["test"], rel=1e-5), member
    rc, out, err = run_cli(["evaluate", "--checkpoint", str(tmp_path / "ens"), "--cache-dir", str(tmp_path / "c")],
                           capsys)
    assert rc == 0, err
    assert json.loads(out)["test"] == pytest.approx(ens["test"], rel=1e-5)


def _fingerprint_run(tmp_path: Path, capsys, members: str) -> tuple[Path, Path]:
    """A run of fingerprint ``members`` on ``_write_train_csv``'s file: (the CSV, the run)."""
    data, run = tmp_path / "d.csv", tmp_path / "run"
    _write_train_csv(data)
    rc, _, err = run_cli(["train", "--data", str(data), "--target-col", "y", "--split", "column:split", "--members",
                          members, "--out", str(run)], capsys)
    assert rc == 0, err
    return data, run


def test_refit_members_scores_on_their_own_rows_are_marked_in_sample(tmp_path, capsys):
    """svr and rf are refit on train+val, so evaluate --split val gave them val MAE far below
    metrics.json's without a word; the output now says which scores are in sample (test: none)."""
    data, run = _fingerprint_run(tmp_path, capsys, "svr,rf")
    manifest = json.loads((run / "predictor.json").read_text())

    def weigh(rf: float) -> None:  # the combination's weights as if val had fitted these
        manifest["weighting"], manifest["weights"] = "val", [[rf] if g == "rf" else [1 - rf] for g in manifest["groups"]]
        (run / "predictor.json").write_text(json.dumps(manifest))

    weigh(0.5)
    rc, out, err = run_cli(["evaluate", "--checkpoint", str(run), "--split", "val"], capsys)
    assert rc == 0, err
    res = json.loads(out[:out.rindex("}") + 1])
    assert res["warnings"] == ["rf, svr member(s) were refit on the train and val rows, so the train and val scores "
                               "here are in sample; the run's metrics.json holds the out-of-sample val scores"]
    assert res["val"] < json.loads((run / "metrics.json").read_text())["val"]  # in sample: lower
    rc, out, err = run_cli(["evaluate", "--checkpoint", str(run), "--split", "test"], capsys)
    assert rc == 0 and "warnings" not in json.loads(out[:out.rindex("}") + 1])
    # a refit member the combination gives no weight adds nothing in sample: it is not named
    weigh(0.0)
    rc, out, err = run_cli(["evaluate", "--checkpoint", str(run), "--split", "val"], capsys)
    assert rc == 0, err
    assert json.loads(out[:out.rindex("}") + 1])["warnings"] == [
        "svr member(s) were refit on the train and val rows, so the train and val scores here are in sample; the "
        "run's metrics.json holds the out-of-sample val scores"]


def test_empty_rows_and_the_header_again_are_counted_and_not_scored(ensemble2, tmp_path, capsys, caplog):
    """evaluate --data counted rows of empty fields as 'unlabelled' and a second header (files joined
    with ``cat``) as a bad label ('y' is not a number), where training names both: they are counted
    as ``empty`` and ``header_again``, the second header named in a warning, and the scores are those
    of the file without them."""
    ens, _, _ = ensemble2
    smiles = nci_smiles(80)[60:70]
    rows = [f"{s},{0.1 * (i + 5)}" for i, s in enumerate(smiles)]
    clean, joined = tmp_path / "clean.csv", tmp_path / "joined.csv"
    clean.write_text("smiles,y\n" + "\n".join(rows) + "\n")
    joined.write_text("smiles,y\n" + "\n".join(rows[:4] + [",", " , "] + rows[4:7] + ["\ufeffSMILES,Y"] + rows[7:]
                                               + ["y,smiles"]) + "\n")
    scores = []
    for path in (clean, joined):
        caplog.clear()
        rc, out, err = run_cli(["evaluate", "--checkpoint", str(ens), "--data", str(path)], capsys)
        assert rc == 0, err
        scores.append(json.loads(out))
    assert scores[1]["rows"] == {**scores[0]["rows"], "rows": 14, "empty": 2, "header_again": 2}
    assert scores[0]["rows"]["empty"] == scores[0]["rows"]["header_again"] == 0 and scores[0]["rows"]["scored"] == 10
    assert scores[1]["data"] == scores[0]["data"]
    [warned] = [r.getMessage() for r in caplog.records if "header again" in r.getMessage()]
    assert warned == f"--data {joined}: 2 row(s) are the header again, not scored (first: line 11, {HEADER_AGAIN})"


def test_external_labels_are_read_as_training_reads_them(ensemble2, tmp_path, capsys, caplog):
    """evaluate --data read labels with pandas' to_numeric: 'inf' was scored (an infinite MAE),
    '5 nM' and '0,55' became missing in silence. Labels are now read as training reads them:
    a label that is no finite number is counted under ``bad_label`` and named, not scored; a
    decimal comma is refused naming --decimal, and read with it."""
    ens, _, _ = ensemble2
    smiles = nci_smiles(80)[60:70]
    labels = [0.1 * (i + 5) for i in range(len(smiles))]
    ext = tmp_path / "ext.csv"
    rows = [f"{s},{y}" for s, y in zip(smiles, labels)] + ["CCO,inf", "CCN,5 nM", "CCC,"]
    ext.write_text("smiles,y\n" + "\n".join(rows) + "\n")
    rc, out, err = run_cli(["evaluate", "--checkpoint", str(ens), "--data", str(ext)], capsys)
    assert rc == 0, err
    res = json.loads(out)
    assert res["rows"] == {"rows": 13, "scored": 10, "invalid": 0, "unlabelled": 1, "bad_label": 2, "bad_label_cell": 0, "malformed": 0,
                           "empty": 0, "header_again": 0, "fitted": 0}
    pred = np.array(_predict(ens, smiles, tmp_path, capsys))
    assert res["data"] == pytest.approx(float(np.mean(np.abs(pred - np.array(labels)))), rel=1e-4, abs=1e-5)
    assert [r.getMessage() for r in caplog.records if "cannot be scored" in r.getMessage()] == [
        f"--data {ext}: 2 row(s) have a label that cannot be scored (first: line 12, target column 'y': 'inf' is not "
        "finite); they are not scored"]
    comma = tmp_path / "comma.csv"
    comma.write_text("smiles;y\n" + "".join(f"{s};{str(y).replace('.', ',')}\n" for s, y in zip(smiles, labels)))
    rc, out, err = run_cli(["evaluate", "--checkpoint", str(ens), "--data", str(comma)], capsys)
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "written with a decimal comma" in err and "--decimal ," in err
    rc, out, err = run_cli(["evaluate", "--checkpoint", str(ens), "--data", str(comma), "--decimal", ","], capsys)
    assert rc == 0, err
    assert json.loads(out)["data"] == pytest.approx(res["data"], rel=1e-6)
    rc, out, err = run_cli(["evaluate", "--checkpoint", str(ens), "--decimal", ","], capsys)
    assert rc == 2 and "--decimal reads the labels of --data FILE.csv; give --data too" in err
    words = tmp_path / "words.csv"
    words.write_text("smiles,y\nCCO,active\nCCN,n.d.\n")
    rc, out, err = run_cli(["evaluate", "--checkpoint", str(ens), "--data", str(words)], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "holds no numeric value" in err
    spaced = tmp_path / "spaced.csv"  # spaces after the commas: the columns smiles and y, as predict reads them
    spaced.write_text("id, smiles, y\n" + "".join(f"m{i}, {s}, {y}\n" for i, (s, y) in enumerate(zip(smiles, labels))))
    for flags in ([], ["--smiles-col", " smiles", "--target-col", " y"]):  # (it refused both: 'no column smiles')
        rc, out, err = run_cli(["evaluate", "--checkpoint", str(ens), "--data", str(spaced), *flags], capsys)
        assert rc == 0, err
        assert json.loads(out)["data"] == pytest.approx(res["data"], rel=1e-6)
    twice = tmp_path / "twice.csv"  # "y" and " y" are one name as predict reads them: which is meant cannot be known
    twice.write_text("smiles,y, y\n" + "".join(f"{s},{y},0\n" for s, y in zip(smiles, labels)))
    rc, out, err = run_cli(["evaluate", "--checkpoint", str(ens), "--data", str(twice)], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "the header names column 'y' 2 times (columns 2, 3); rename the copies" in err
    header = tmp_path / "header.csv"
    header.write_text("smiles,y\n")  # no row: said as training says it, not blamed on the target column
    rc, out, err = run_cli(["evaluate", "--checkpoint", str(ens), "--data", str(header)], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert f"{header}: the file has a header but no data rows; add one row per molecule" in err


def test_units_warning_without_a_gnn_member(tmp_path, capsys):
    """The warning that an external file's labels look like another property or other units read
    the GNN's normalization only, so an svr run never gave it; the fingerprint members' training
    statistics serve now."""
    data, run = _fingerprint_run(tmp_path, capsys, "svr")
    rows = [r for r in _read(data) if r["split"] == "test"]  # (train and val rows would be scored in sample)
    same, other = tmp_path / "same.csv", tmp_path / "other.csv"
    same.write_text("smiles,y\n" + "".join(f"{r['smiles']},{r['y']}\n" for r in rows))
    other.write_text("smiles,y\n" + "".join(f"{r['smiles']},{float(r['y']) * 1000}\n" for r in rows))
    rc, out, err = run_cli(["evaluate", "--checkpoint", str(run), "--data", str(same)], capsys)
    assert rc == 0 and "warnings" not in json.loads(out), err
    rc, out, err = run_cli(["evaluate", "--checkpoint", str(run), "--data", str(other)], capsys)
    assert rc == 0, err
    train_y = np.array([float(r["y"]) for r in _read(data) if r["split"] != "test"])  # the svr refits on train+val
    (warning,) = json.loads(out)["warnings"]
    assert warning.endswith(f"are far from the training targets 'y' (mean {train_y.mean():.4g}, std "
                            f"{train_y.std():.4g}): another property, or other units?")


def test_a_changed_csv_that_no_longer_splits_names_evaluates_own_fix(tmp_path, capsys, caplog):
    """--allow-changed on a training CSV that lost its val rows ended in training's advice (choose
    another --split, --val-fraction: flags evaluate has not), after a warning that said it first."""
    data, run = _fingerprint_run(tmp_path, capsys, "svr")
    rc, out, err = run_cli(["evaluate", "--checkpoint", str(run), "--data", str(data), "--allow-changed"], capsys)
    assert rc == 2 and out == "" and err == (f"siggate evaluate: error: --allow-changed applies to the run's own "
                                             f"training CSV; --data {data} is scored as it is (drop --allow-changed)\n")
    data.write_text(data.read_text().replace(",val\n", ",train\n"))
    caplog.clear()
    rc, out, err = run_cli(["evaluate", "--checkpoint", str(run), "--allow-changed"], capsys)
    assert rc == 2 and out == "" and err.startswith(f"siggate evaluate: error: {data}: the val split is empty (")
    assert err.endswith(f"usable rows), so the run's splits cannot be rebuilt from the changed file (--allow-changed); "
                        f"score it whole with --data {data}, or restore the file the run was trained on\n")
    assert not [r for r in caplog.records if "split is empty" in r.getMessage()]  # said once, as the error


def test_a_changed_files_test_split_that_holds_fitted_molecules_is_named(tmp_path, capsys, caplog):
    """``evaluate --allow-changed`` rebuilds the splits from the changed file: where its test rows
    are molecules the run fitted (here 4 of its training rows moved to test), the test score was
    reported with no word that it is partly in sample; it is named, as ``--data`` names them."""
    data = tmp_path / "d.csv"
    _write_train_csv(data)
    run = tmp_path / "run"
    rc, _, err = run_cli(["train", "--data", str(data), "--target-col", "y", "--split", "column:split", "--members",
                          "svr", "--out", str(run), "--cache-dir", str(tmp_path / "c")], capsys)
    assert rc == 0, err
    rc, out, err = run_cli(["evaluate", "--checkpoint", str(run), "--allow-changed", "--cache-dir",
                            str(tmp_path / "c")], capsys)
    assert rc == 0 and "warnings" not in json.loads(out), err  # unchanged: its own test rows
    lines = data.read_text().splitlines()
    moved = [i for i, line in enumerate(lines) if line.endswith(",train")][:4]
    for i in moved:
        lines[i] = lines[i][: -len("train")] + "test"
    data.write_text("\n".join(lines) + "\n")
    caplog.clear()
    rc, out, err = run_cli(["evaluate", "--checkpoint", str(run), "--allow-changed", "--cache-dir",
                            str(tmp_path / "c")], capsys)
    assert rc == 0, err
    res = json.loads(out)
    note = ("4 of the 14 test molecules of the changed file's split are molecules the run fitted (its train or val rows "
            "in splits.csv), so the test score is partly in sample")
    assert res["n"]["test"] == 14 and res["warnings"] == [note]
    assert note in [r.getMessage() for r in caplog.records]
