"""``siggate.SigGateRegressor`` / ``SigGateClassifier``: scikit-learn estimators on SMILES that
train through the command line's own path (``train_members``), inside scikit-learn's
model-selection tools."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import yaml
from rdkit import Chem

from recipe_flags import ESTIMATOR_GNN, SCRATCH_SET
from test_predict import nci_smiles, one_thread, read_output, run_cli

# the GNN alone from scratch (with ESTIMATOR_GNN): a tiny architecture the fine-tuned recipe refuses
TINY = ("model.layers=1", "model.dim=16", "model.heads=2", "model.pe_steps=4", "model.pe_dim=4",
        "model.head_layers=2", "train.warmup_epochs=0", "train.batch_size=16", SCRATCH_SET)
SRC = Path(__file__).resolve().parents[1] / "src"


@pytest.fixture(scope="module")
def molecules():
    smiles = [s for s in nci_smiles(90) if Chem.MolFromSmiles(s).GetNumAtoms() <= 40][:60]
    y = np.array([Chem.MolFromSmiles(s).GetNumAtoms() / 10 for s in smiles])
    return smiles, y


def test_import_siggate_stays_light_and_serves_the_estimators_on_first_use():
    probe = ("import sys, siggate; heavy = sorted({m.split('.')[0] for m in sys.modules} & "
             "{'torch', 'sklearn', 'rdkit', 'pandas', 'matplotlib'}); print(heavy); "
             "print(siggate.SigGateRegressor.__module__, siggate.SigGateClassifier.__name__)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(SRC)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["[]", "siggate.estimator SigGateClassifier"]
    import siggate

    with pytest.raises(AttributeError, match="no attribute 'SigGateRegresor'"):
        siggate.SigGateRegresor  # noqa: B018


def test_params_clone_and_set_params():
    from sklearn.base import clone

    import siggate

    est = siggate.SigGateRegressor(epochs=3, overrides=TINY, ensemble=2, random_state=4)
    params = est.get_params()
    assert params == {"epochs": 3, "members": None, "ensemble": 2, "config": None, "overrides": TINY,
                      "random_state": 4, "val_fraction": 0.1, "threads": 1, "device": "cpu", "out_dir": None,
                      "verbose": False, "weights": None, "seed": None}
    copy = clone(est)
    assert copy is not est and copy.get_params() == params
    assert copy.set_params(epochs=5).epochs == 5 and est.epochs == 3
    with pytest.raises(ValueError, match="Invalid parameter 'layers'"):
        est.set_params(layers=2)
    assert not hasattr(est, "predictor_")  # __init__ stores, fit learns
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError):
        est.predict(["CCO"])


def test_cross_val_score_with_three_folds_trains_through_train_members(molecules, monkeypatch):
    """3 folds of 60 molecules, 2 epochs: three finite R² scores, each fold one call of the CLI's
    train_members; the held-out fold is never in the training CSV."""
    from sklearn.model_selection import KFold, cross_val_score

    import siggate
    from siggate.train import ensemble

    smiles, y = molecules
    calls = []
    real = ensemble.train_members

    def spy(cfg, out, *args, **kw):
        calls.append([g.smiles for split in kw["dataset"].splits.values() for g in split])
        assert not kw["dataset"].test  # no test split: the caller holds the test fold
        return real(cfg, out, *args, **kw)

    monkeypatch.setattr(ensemble, "train_members", spy)
    folds = KFold(3, shuffle=True, random_state=0)
    with one_thread():
        scores = cross_val_score(siggate.SigGateRegressor(epochs=2, overrides=TINY, **ESTIMATOR_GNN), smiles, y, cv=folds)
    assert scores.shape == (3,) and np.all(np.isfinite(scores))
    assert len(calls) == 3
    for seen, (train_idx, test_idx) in zip(calls, folds.split(smiles)):
        assert sorted(seen) == sorted(smiles[i] for i in train_idx)
        assert not set(seen) & {smiles[i] for i in test_idx}


def test_grid_search_picks_among_parameters(molecules):
    from sklearn.model_selection import GridSearchCV

    import siggate

    smiles, y = molecules
    search = GridSearchCV(siggate.SigGateRegressor(epochs=1, overrides=TINY, **ESTIMATOR_GNN), {"epochs": [1, 2]}, cv=2,
                          scoring="neg_mean_absolute_error")
    with one_thread():
        search.fit(smiles[:40], y[:40])
    scores = search.cv_results_["mean_test_score"]
    assert len(scores) == 2 and scores[0] != scores[1]  # set_params(epochs=...) reached training
    assert search.best_params_ == {"epochs": [1, 2][int(np.argmax(scores))]}
    assert search.best_estimator_.epochs == search.best_params_["epochs"]
    assert search.predict(smiles[40:45]).shape == (5,)


def test_a_kept_run_is_a_cli_run_and_predicts_the_same(molecules, tmp_path, capsys):
    """With out_dir, the fitted run is an ordinary run folder: its config is the command line's
    resolution of the same flags, siggate predict on it gives the estimator's numbers; two
    targets with missing labels train, and bad SMILES are refused with predict's reasons."""
    import siggate

    smiles, y = molecules
    two = np.stack([y, np.where(np.arange(len(y)) % 4 == 0, np.nan, y * 2)], axis=1)
    est = siggate.SigGateRegressor(epochs=2, overrides=TINY, ensemble=2, **ESTIMATOR_GNN, out_dir=str(tmp_path / "run"))
    with one_thread():
        est.fit(smiles[:50], two[:50])
        mean, std = est.predict(smiles[50:], return_std=True)
    assert mean.shape == std.shape == (10, 2) and np.all(std >= 0) and std.any()
    cfg = yaml.safe_load((tmp_path / "run" / "member0" / "config.yaml").read_text())
    assert cfg["data"]["split"] == "column:split" and cfg["data"]["target_cols"] == ["y0", "y1"]
    assert cfg["train"]["epochs"] == 2 and cfg["model"]["layers"] == 1 and cfg["model"]["dim"] == 16
    assert cfg["train"]["threads"] == 1 and cfg["model"]["pooling"] == "norm"  # the csv recipe's
    m = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert m["test"] is None and m["splits"] == {"train": 45, "val": 5, "test": 0}
    src = tmp_path / "in.csv"
    src.write_text("smiles\n" + "\n".join(smiles[50:]) + "\n")
    rc, _, err = run_cli(["predict", "--checkpoint", str(tmp_path / "run"), "--input", str(src), "--output",
                          str(tmp_path / "p.csv")], capsys)
    assert rc == 0, err
    rows = read_output(tmp_path / "p.csv")
    np.testing.assert_allclose([[float(r["y0"]), float(r["y1"])] for r in rows], mean, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"2 of 3 SMILES cannot be predicted: row 1: SMILES parse error.*row 2: "
                                         r"empty SMILES"):
        est.predict(["CCO", "C1CC(", ""])
    # --resume named fit's removed CSV of X and y, and told to give its new path
    rc, _, err = run_cli(["train", "--resume", str(tmp_path / "run"), "--epochs", "3"], capsys)
    assert rc == 2 and err == (f"siggate train: error: --resume {tmp_path / 'run'}: the run was made by "
                               "SigGateRegressor.fit, whose CSV of X and y is removed when fit returns, so the run "
                               "cannot go on from here; fit the estimator again\n"), err
    with pytest.raises(ValueError, match="X has 3 SMILES and y 2 rows"):
        siggate.SigGateRegressor().fit(["C", "CC", "CCC"], [1.0, 2.0])


def test_the_classifier_takes_any_two_labels_and_its_run_offers_prediction_sets(molecules, tmp_path, capsys):
    from sklearn.base import is_classifier

    import siggate

    smiles, y = molecules
    labels = np.where(y > np.median(y), "large", "small")
    clf = siggate.SigGateClassifier(epochs=2, overrides=TINY, **ESTIMATOR_GNN, out_dir=str(tmp_path / "clf"))
    assert is_classifier(clf)
    with one_thread():
        clf.fit(smiles[:50], labels[:50])
        proba = clf.predict_proba(smiles[50:])
        pred = clf.predict(smiles[50:])
    assert list(clf.classes_) == ["large", "small"]
    assert proba.shape == (10, 2) and np.allclose(proba.sum(1), 1.0) and np.all((proba >= 0) & (proba <= 1))
    assert list(pred) == [clf.classes_[int(p >= 0.5)] for p in proba[:, 1]]
    cal = json.loads((tmp_path / "clf" / "calibration.json").read_text())
    scores = cal["targets"]["y"]["scores"]  # 1 - p(true class) of the validation molecules
    k = int(np.ceil((len(scores) + 1) * 0.8))
    q = scores[k - 1] if k <= len(scores) else float("inf")
    rc, out, err = run_cli(["predict", "--checkpoint", str(tmp_path / "clf"), *smiles[50:], "--coverage", "0.8"], capsys)
    assert rc == 0, err
    rows = list(csv.DictReader(out.splitlines()))
    assert list(rows[0])[:4] == ["smiles", "y", "y_uncertainty", "y_set"]  # a run of one member: its spread is 0
    for row, p in zip(rows, proba[:, 1]):
        assert float(row["y"]) == pytest.approx(p, abs=1e-5) and float(row["y_uncertainty"]) == 0.0
        if min(abs(p - q), abs(1 - p - q)) > 1e-4:  # not on the boundary (p is printed to 6 digits)
            assert row["y_set"] == "{" + ",".join(c for c, s in (("0", p), ("1", 1 - p)) if s <= q) + "}"
    far = ["FC(F)(F)C(F)(F)C(F)(F)F", "C[Si](C)(C)[Si](C)(C)C"]  # nothing like the training molecules
    rc, out, err = run_cli(["predict", "--checkpoint", str(tmp_path / "clf"), *far, "--coverage", "0.8"], capsys)
    assert rc == 0 and "outside the run's applicability domain" in err, err
    assert "their predictions and sets are extrapolations" in err  # (a classifier's: it said "intervals")
    with pytest.raises(ValueError, match="binary: y must hold two classes, got 3; only binary classification is "
                                         "supported: binarise y"):
        siggate.SigGateClassifier().fit(smiles[:3], ["a", "b", "c"])
    with pytest.raises(ValueError, match=r"got 4; y looks continuous \(Unknown label type: continuous\): use "
                                         r"SigGateRegressor, or binarise y$"):
        siggate.SigGateClassifier().fit(smiles[:4], [5.2, 6.1, 7.3, 4.4])
    with pytest.raises(ValueError, match=r"binary: y must hold two classes, got 3; only binary classification is "
                                         r"supported"):  # (scikit-learn's 'Input contains infinity' before)
        siggate.SigGateClassifier().fit(smiles[:4], [0, 1, np.inf, 1])
    # a refit that fails leaves the fitted classifier as it was: its classes were set before the
    # run trained, so the old model answered in the new labels
    with pytest.raises(ValueError, match=r"the training rows of class 0 hold 1 distinct molecule\(s\); val_fraction "
                                         "needs at least 2"):
        clf.set_params(out_dir=None).fit(smiles[:3], [0, 1, 1])
    assert list(clf.classes_) == ["large", "small"] and list(clf.predict(smiles[50:])) == list(pred)
    from sklearn.exceptions import NotFittedError
    from sklearn.utils.validation import check_is_fitted

    failed = siggate.SigGateClassifier()
    with pytest.raises(ValueError):
        failed.fit(smiles[:3], [0, 1, 1])
    with pytest.raises(NotFittedError):  # a failed first fit is no fit (it looked fitted, then AttributeError)
        check_is_fitted(failed)
    for call in (failed.predict, failed.predict_proba):
        with pytest.raises(NotFittedError):
            call(["CCO"])
    with pytest.raises(NotFittedError):
        failed.score(["CCO"], ["a"])


def test_a_y_of_one_class_names_the_class_and_the_fix():
    """A classifier's y of one class (a screen of actives alone) said "y must hold two classes, got
    1": neither the class found nor what to do."""
    import siggate

    for labels, named in (([1, 1, 1], "1"), (["active"] * 3, "'active'")):
        with pytest.raises(ValueError) as caught:
            siggate.SigGateClassifier().fit(["CCO", "CCN", "CCC"], labels)
        assert str(caught.value) == (f"SigGateClassifier is binary: y holds one class, {named}, in every row; give "
                                     "molecules of both classes (for a screen of one class, add negatives, or fit a "
                                     "SigGateRegressor on a measured value)")


def test_a_std_that_is_zero_by_construction_is_warned_about(molecules):
    """predict(return_std=True) of a fit whose weights give one member everything (the default
    members did so for both targets of a small fit) or of one member returned zeros without a word
    (the command line's warning went to a logger that fit silences): a UserWarning names the
    targets; a spread over members warns of nothing."""
    import warnings

    import siggate

    smiles, y = molecules
    two = np.stack([y, -y], axis=1)
    alone = siggate.SigGateRegressor(members="svr")
    spread = siggate.SigGateRegressor(members="svr,rf", weights="equal")
    with one_thread():
        alone.fit(smiles[:50], two[:50])
        spread.fit(smiles[:50], two[:50])
    with pytest.warns(UserWarning, match=r"^return_std is 0 for every molecule for 'y0', 'y1': the run holds one "
                                         r"member, so there is no spread over members; it is no sign of certainty "
                                         r"\(predict_interval gives calibrated intervals\)$") as caught:
        mean, std = alone.predict(smiles[50:], return_std=True)
    assert caught[0].filename == __file__ and not std.any() and mean.shape == (10, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _, std = spread.predict(smiles[50:], return_std=True)
        alone.predict(smiles[50:])  # (no std asked for)
    assert std.all()


def test_the_data_layers_warnings_reach_an_estimators_caller(molecules, caplog):
    """fit silenced the logger that warns about the data (conflicting duplicates, a target of one
    value in every training row): a caller heard nothing. Each is a UserWarning in the estimator's
    words, at the caller's line; with verbose=True they are logged instead, as for the command line."""
    import warnings

    import siggate

    smiles, y = molecules
    X, labels = [*smiles[:40], smiles[0]], [*y[:40], y[0] + 5.0]  # the first molecule twice, 5 apart
    with one_thread(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        siggate.SigGateRegressor(members="rf").fit(X, labels)
    said = [w for w in caught if issubclass(w.category, UserWarning) and "several rows" in str(w.message)]
    assert len(said) == 1 and said[0].filename == __file__, [str(w.message) for w in caught]
    assert str(said[0].message).startswith("1 molecule appears in several rows (2 rows) with labels that differ by "
                                           "more than 0.01 of the target's std")
    assert "overrides=['data.duplicates=average']" in str(said[0].message) and "--duplicates" not in str(said[0].message)
    assert str(said[0].message).endswith("to keep the first row")  # (no data_report.csv outlives a fit without out_dir)
    from siggate.estimator import _data_warning_in_fit_words

    assert _data_warning_in_fit_words("they train, but siggate predict refuses them unless --max-atoms is raised, and",
                                      True) == ("they train, but predict takes them (its atom limit is the largest "
                                                "molecule fit trained on), and")
    assert _data_warning_in_fit_words("(salts; data_report.csv lists them)", False) == "(salts)"
    assert _data_warning_in_fit_words("(salts; data_report.csv lists them)", True) == "(salts; data_report.csv lists them)"
    # a flag the estimator has no parameter for is said in its words: another class, an override
    from siggate.estimator import _in_estimator_words

    assert _in_estimator_words("target column 'y' holds only 0 and 1, and is trained as regression (MAE); if it is a "
                               "class label, pass --task binary (data.task)").endswith("class label, use SigGateClassifier")
    assert _in_estimator_words("or train from scratch: --set train.init=none (siggate train: --init none)") == (
        "or train from scratch: overrides=['train.init=none'] (siggate train: --init none)")
    assert _in_estimator_words("or skip such batches: --set train.on_nan=skip (siggate train: --on-nan skip).") == (
        "or skip such batches: overrides=['train.on_nan=skip'] (siggate train: --on-nan skip).")
    assert _in_estimator_words("class label, pass --task multilabel (data.task)") == (
        "class label, fit a SigGateClassifier per target")
    assert _in_estimator_words("give --set members.svr.C=5") == "give overrides=['members.svr.C=5']"
    with one_thread(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        siggate.SigGateRegressor(members="rf", verbose=True).fit(X, labels)
    assert not [w for w in caught if "several rows" in str(w.message)]
    assert any("1 molecule appears in several rows" in m for m in caplog.messages)


def test_another_threads_data_warnings_are_not_a_fits(caplog):
    """fit keeps the data layer's warnings for its caller: another thread's load during a fit gave
    its warnings to the fit's caller and took them from its own logging."""
    import logging
    import threading

    from siggate.estimator import _data_warnings

    logger = logging.getLogger("siggate.data.csvdata")
    with caplog.at_level(logging.WARNING), _data_warnings(True) as said:
        logger.warning("fit's own.csv: a warning")
        other = threading.Thread(target=logger.warning, args=("another thread's.csv: a warning",))
        other.start()
        other.join()
    assert said == ["fit's own.csv: a warning"]
    assert caplog.messages == ["another thread's.csv: a warning"]


def test_a_diverged_fit_names_the_override_that_skips_such_batches(molecules):
    """A non-finite loss in fit was no ValueError, so it kept the command line's words (--on-nan
    skip) and named a checkpoint in fit's own folder, removed when fit returned."""
    import siggate
    from siggate.train.loop import NonFiniteLossError

    smiles, y = molecules
    est = siggate.SigGateRegressor(members="gnn", epochs=2, overrides=[
        "train.lr=1e30", "train.init=none", "model.layers=1", "model.dim=32", "model.heads=4", "train.warmup_epochs=0"])
    with one_thread(), pytest.raises(NonFiniteLossError) as exc:
        est.fit(smiles[:40], y[:40])
    text = str(exc.value)
    assert text.endswith("Lower train.lr, check the data for NaN features, or skip such batches: "
                         "overrides=['train.on_nan=skip'] (siggate train: --on-nan skip).") and "siggate-fit-" not in text


def test_unknown_weights_are_refused_before_any_training(tmp_path):
    import siggate

    est = siggate.SigGateRegressor(members="svr,rf", weights="median", out_dir=tmp_path / "run")
    with pytest.raises(ValueError, match="weights='median': choose from 'equal', 'val'"):
        est.fit(["CCO", "CCN", "CCC", "CCCl"], [1.0, 2.0, 3.0, 4.0])
    assert not (tmp_path / "run").exists()


def test_empty_members_are_refused_as_the_cli_refuses_them(tmp_path):
    """``members=""`` names no kind (``siggate train --members ""`` is refused the same way); only
    ``None`` means the recipe's members."""
    import siggate

    est = siggate.SigGateRegressor(members="", out_dir=tmp_path / "run")
    with pytest.raises(ValueError, match="^members: no member kind given; known kinds: gnn, rf, svr$"):
        est.fit(["CCO", "CCN", "CCC", "CCCl"], [1.0, 2.0, 3.0, 4.0])
    assert not (tmp_path / "run").exists()


def test_refusals_name_the_estimators_parameters_not_the_command_lines_flags(tmp_path):
    """fit runs ``siggate train``'s checks; their words name the parameter the caller set, and the
    error keeps its class (a :class:`ValueError` subclass)."""
    import siggate
    from siggate.config import ConfigError
    from siggate.train.members import MemberError

    cases = [({"members": "svr", "ensemble": 2}, MemberError,
              "ensemble 2 multiplies the GNN members and members svr holds none; add gnn to members, or drop ensemble"),
             ({"members": "gnn,foo"}, MemberError, "members: unknown member kind 'foo'; known kinds: gnn, rf, svr"),
             ({"overrides": ("nodot",)}, ConfigError, "overrides expects key.path=value, got 'nodot'"),
             # the second member's seed overflowed numpy's after the first had trained (helper-178)
             ({"members": "gnn", "ensemble": 2, "random_state": 2**32 - 1}, ValueError,
              "ensemble 2 trains its GNN members with seeds 4294967295..4294967296, past the largest seed 4294967295; "
              "give random_state 4294967294 or lower")]
    for params, kind, message in cases:
        with pytest.raises(kind) as caught:
            siggate.SigGateRegressor(out_dir=tmp_path / "run", **params).fit(["CCO", "CCN", "CCC", "CCCl"],
                                                                              [1.0, 2.0, 3.0, 4.0])
        assert str(caught.value) == message and "--" not in str(caught.value)
        assert not (tmp_path / "run").exists()
    # a config of the other task: its loss's refusal named no config and no estimator
    for est, labels, message in (
            (siggate.SigGateRegressor(config="molhiv"), [1.0, 2.0, 3.0, 4.0],
             "config 'molhiv' is a binary-classification recipe (train.loss 'bce'), and SigGateRegressor fits "
             "regression: use SigGateClassifier or another config (config=None: csv, which fits either)"),
            (siggate.SigGateClassifier(config="zinc"), [0, 1, 0, 1],
             "config 'zinc' is a regression recipe (train.loss 'l1'), and SigGateClassifier fits two classes: use "
             "SigGateRegressor or another config (config=None: csv, which fits either)"),
            (siggate.SigGateRegressor(overrides=("train.loss=bce",)), [1.0, 2.0, 3.0, 4.0],  # the caller's own loss
             "train.loss: 'bce' does not fit data.task='regression'; allowed values: auto, l1, mse.")):
        with pytest.raises(ConfigError) as caught:
            est.fit(["CCO", "CCN", "CCC", "CCCl"], labels)
        assert str(caught.value) == message
    # keys fit sets itself: an override was set over (train.seed, train.threads) or refused in the flags' words
    for item, message in (("train.seed=7", "overrides 'train.seed=7': fit sets it from random_state; drop it from "
                                           "overrides and set random_state instead"),
                          ("train.threads=4", "overrides 'train.threads=4': fit sets it from threads; drop it "
                                              "from overrides and set threads instead"),
                          ("data.val_fraction=0.3", "overrides 'data.val_fraction=0.3': fit sets it from "
                                                    "val_fraction; drop it from overrides and set val_fraction instead"),
                          ("data.split=scaffold", "overrides 'data.split=scaffold': fit sets it itself (a random "
                                                  "val_fraction of X's molecules validates, the rest train, and no "
                                                  "test split is held out: split X yourself, e.g. by scaffold, "
                                                  "before fit); drop it from overrides"),
                          ("data.name=zinc", "overrides 'data.name=zinc': fit sets it itself (it trains on the "
                                             "SMILES of X); drop it from overrides"),
                          ("data.task=binary", "overrides 'data.task=binary': fit sets it from the estimator's class "
                                               "(SigGateRegressor or SigGateClassifier); drop it from overrides"),
                          ("data.sep=;", "overrides 'data.sep=;': fit sets it itself (it writes its own CSV of X "
                                         "and y); drop it from overrides"),
                          ("data.max_graphs=3", "overrides 'data.max_graphs=3': fit sets it itself (it "
                                                "writes its own CSV of X and y); drop it from overrides"),
                          (" train.seed =7", "overrides ' train.seed =7': fit sets it from random_state; drop it "
                                             "from overrides and set random_state instead"),  # as the config reads it
                          ("seed=7", "overrides 'seed=7': seed is this estimator's parameter; set random_state=7 "
                                     "instead"),
                          ("threads=2", "overrides 'threads=2': threads is this estimator's parameter; set threads=2 "
                                        "instead"),
                          ("dim=32", "overrides key must look like section.key (e.g. model.gate), got 'dim'. Did you "
                                     "mean 'model.dim'?")):
        with pytest.raises(ValueError) as caught:
            siggate.SigGateRegressor(out_dir=tmp_path / "run", overrides=(item,)).fit(["CCO", "CCN"], [1.0, 2.0])
        assert str(caught.value) == message and not (tmp_path / "run").exists()
    with pytest.raises(ValueError) as caught:  # train.epochs is fit's only where epochs is given
        siggate.SigGateRegressor(out_dir=tmp_path / "run", epochs=2, overrides=("train.epochs=5",)).fit(
            ["CCO", "CCN"], [1.0, 2.0])
    assert str(caught.value) == ("overrides 'train.epochs=5': fit sets it from epochs; drop it from overrides and set "
                                 "epochs instead") and not (tmp_path / "run").exists()
    # a refusal of the command line's own (CLIError, no ValueError before: not caught, flags named)
    with pytest.raises(ValueError) as caught:
        siggate.SigGateRegressor(out_dir=tmp_path / "run", epochs=2, overrides=("train.warmup_epochs=5",)).fit(
            ["CCO", "CCN", "CCC", "CCCl"], [1.0, 2.0, 3.0, 4.0])
    assert "warmup" in str(caught.value) and "--" not in str(caught.value) and "data.csv" not in str(caught.value)
    assert not (tmp_path / "run").exists()
    from siggate.data.csvdata import DataError

    with pytest.raises(DataError) as caught:  # the data's checks too: --target-col is y here
        siggate.SigGateRegressor(out_dir=tmp_path / "run", members="svr").fit(["CCO", "CCN", "CCC", "CCCl"], [1.0] * 4)
    assert "so there is nothing to learn" in str(caught.value) and str(caught.value).endswith(
        "choose the y that holds the property") and "--" not in str(caught.value)
    with pytest.raises(DataError) as caught:  # the lines of fit's own CSV are positions in X
        siggate.SigGateRegressor(members="svr").fit(["xx", "yy", "C1CC"], [1.0, 3.0, 2.0])
    text = str(caught.value)
    assert text.startswith("none of the 3 rows can be used (X[0]: SMILES parse error: syntax error while parsing: xx")
    assert "; X[2]: SMILES parse error: " in text and "check the SMILES column (X)" in text
    # a line read with its newline is that SMILES (its CSV row spanned two lines, so X[i] was off by one
    # after it); a line break inside one is refused; a config file's "line N" stays a line
    with pytest.raises(DataError, match=r"\(X\[0\]: SMILES parse error: .*xx.*; X\[1\]: .*yy.*; X\[2\]: "):
        siggate.SigGateRegressor(members="svr").fit(["xx\n", "yy\r\n", "zz"], [1.0, 3.0, 2.0])
    with pytest.raises(ValueError, match=r"^X\[1\] holds a line break inside its SMILES \('C\\nC'\)"):
        siggate.SigGateRegressor(members="svr").fit(["CCO", "C\nC", "CCC"], [1.0, 3.0, 2.0])
    bad = tmp_path / "bad.yaml"
    bad.write_text("model:\n  dim: 8\n dim: 9\n")
    with pytest.raises(Exception, match=r"line 3") as caught:
        siggate.SigGateRegressor(members="svr", config=str(bad)).fit(["CCO", "CCN", "CCC"], [1.0, 3.0, 2.0])
    assert "X[" not in str(caught.value) and "line" not in text and "--" not in text, text
    # a data key the overrides may set: its fix names that override, not the flag (--duplicates first)
    with pytest.raises(ValueError) as caught:
        siggate.SigGateClassifier(members="svr", overrides=("data.duplicates=average",)).fit(
            ["CCO", "CCN", "CCC", "CCCl"], [0, 1, 0, 1])
    assert str(caught.value).endswith("a binary label has no mean, use overrides=['data.duplicates=first'] or "
                                      "overrides=['data.duplicates=keep']"), str(caught.value)


FP = {"members": "svr,rf", "threads": 1}


def test_fit_leaves_the_callers_random_state_and_threads_alone(molecules):
    """Training seeds Python's, NumPy's and torch's global generators and sets torch's threads;
    before, every bootstrap draw after a fit repeated the one after the first fit."""
    import random

    import torch

    import siggate

    smiles, y = molecules
    threads = torch.get_num_threads()
    np.random.seed(42), random.seed(42), torch.manual_seed(42)
    expected = (np.random.rand(3).tolist(), random.random(), torch.rand(2).tolist())
    np.random.seed(42), random.seed(42), torch.manual_seed(42)
    siggate.SigGateRegressor(epochs=1, overrides=TINY, **ESTIMATOR_GNN, threads=1).fit(smiles[:30], y[:30])
    assert (np.random.rand(3).tolist(), random.random(), torch.rand(2).tolist()) == expected
    assert torch.get_num_threads() == threads


def test_rows_of_one_molecule_stay_on_one_side_of_the_validation_draw(molecules, tmp_path, capsys):
    """Two rows of each molecule (written differently: RDKit's canonical SMILES groups them):
    the validation rows hold no molecule that the training rows hold, so the members' weights
    and the calibration are fitted out of sample (the estimator drew rows, not molecules);
    --val-fraction on a binary task draws from each class, in the CLI as in the classifier."""
    from rdkit import Chem

    import siggate

    smiles, y = molecules
    twice = smiles[:30] + [Chem.MolToSmiles(Chem.MolFromSmiles(s), doRandom=True) for s in smiles[:30]]
    assert twice[30:] != smiles[:30]
    est = siggate.SigGateRegressor(**FP, out_dir=tmp_path / "run", val_fraction=0.2)
    est.fit(twice, np.r_[y[:30], y[:30] + 0.01])
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["splits"] == {"train": 48, "val": 12, "test": 0}
    # its splits.csv (none was written: a fit has no test split) names each row of X, so that evaluate counts the
    # molecules the run fitted and says their scores are in sample (on an out_dir, it said nothing)
    with open(tmp_path / "run" / "splits.csv") as fh:
        fitted = list(csv.DictReader(fh))
    assert [int(r["row"]) for r in fitted] == list(range(60)) and {r["split"] for r in fitted} == {"train", "val"}
    own = tmp_path / "own.csv"
    own.write_text("smiles,y\n" + "".join(f"{s},{v}\n" for s, v in zip(smiles[:35], y[:35])))
    rc, out, err = run_cli(["evaluate", "--checkpoint", str(tmp_path / "run"), "--data", str(own)], capsys)
    assert rc == 0, err
    scored = json.loads(out)
    assert scored["rows"]["fitted"] == 30 and scored["warnings"][-1].startswith(
        "30 of the 35 rows scored are molecules the run fitted (its train or val rows), so their scores are in sample")
    data = tmp_path / "d.csv"  # the same rows through the CLI, whose splits.csv names each row's split
    label = (np.arange(60) % 10 == 0).astype(int)  # class 1: 6 rows of 6 molecules, class 0: 54 rows
    data.write_text("smiles,y,split\n" + "".join(f"{s},{v},train\n" for s, v in zip(twice, label))
                    + "".join(f"{s},{i % 2},test\n" for i, s in enumerate(smiles[30:40])))
    rc, _, err = run_cli(["train", "--data", str(data), "--target-col", "y", "--task", "binary", "--split",
                          "column:split", "--val-fraction", "0.2", "--members", "svr,rf", "--out", str(tmp_path / "cli")],
                         capsys)
    assert rc == 0, err
    with open(tmp_path / "cli" / "splits.csv") as fh:
        rows = list(csv.DictReader(fh))
    canon = {split: {Chem.CanonSmiles(r["smiles"]) for r in rows if r["split"] == split} for split in ("train", "val")}
    assert not canon["val"] & canon["train"]
    assert {int(label[int(r["row"])]) for r in rows if r["split"] == "val"} == {0, 1}


def test_bad_data_and_parameters_are_named_before_training(molecules, tmp_path):
    import siggate

    smiles, y = molecules
    cases = [
        ({}, smiles[:20], np.r_[np.inf, y[1:20]], r"y holds an infinite label at row\(s\) \[0\]"),
        # beside another target's label the cell was read as missing, without a word
        ({}, smiles[:20], np.c_[np.r_[y[:3], 1e39, y[4:20]], y[:20]], r"y holds a label beyond float32's range \(about "
         r"±3.4e38\), in which labels are kept, at row\(s\) \[3\]; rescale y"),
        ({}, ["CCO"] * 5, y[:5], "the training rows hold 1 distinct molecule.*at least 2, one to train on and one"),
        ({"random_state": -1}, smiles[:5], y[:5], r"random_state must be a whole number from 0 to 2\*\*32 - 1, None, "
         "or a NumPy RandomState or Generator, got -1"),
        ({"random_state": "1"}, smiles[:5], y[:5], "random_state must be a whole number .* got '1'"),
        ({"random_state": True}, smiles[:5], y[:5], "random_state must be a whole number .* got True"),
        ({"seed": 1, "random_state": 2}, smiles[:5], y[:5], "seed=1 and random_state=2 name two seeds; give "
         "random_state alone"),
        ({"seed": -1}, smiles[:5], y[:5], r"seed must be a whole number from 0 to 2\*\*32 - 1, got -1"),
        ({"val_fraction": "0.2"}, smiles[:5], y[:5], "val_fraction must be a number between 0 and 1, got '0.2'"),
        ({"overrides": "members.rf.n_estimators=50"}, smiles[:5], y[:5], "overrides must be a sequence of"),
        ({"device": "gpu"}, smiles[:5], y[:5], r"device must be 'cpu' or 'cuda' \(or 'cuda:N'\), got 'gpu'"),
        ({"epochs": 0}, smiles[:5], y[:5], "epochs must be a whole number >= 1 or None, got 0"),
        ({"verbose": "yes"}, smiles[:5], y[:5], r"^verbose must be True or False \(or a whole number, as "
         r"scikit-learn's verbose\), got 'yes', a str$"),  # (taken as True)
        ({"verbose": None}, smiles[:5], y[:5], r"^verbose must be True or False .*, got None, a NoneType$"),
    ]
    for params, X, labels, message in cases:
        with pytest.raises(ValueError, match=message):
            siggate.SigGateRegressor(**FP, out_dir=tmp_path / "run", **params).fit(X, labels)
        assert not (tmp_path / "run").exists()
    with pytest.raises(ValueError, match=r"^the training rows of class 'b' hold 1 distinct molecule\(s\); val_fraction "
                                         "needs at least 2, one to train on and one to validate on$"):
        siggate.SigGateClassifier(**FP).fit(smiles[:20], ["a"] * 19 + ["b"])
    with pytest.raises(ValueError, match="class 'b' hold 1 distinct molecule"):  # one molecule written twice
        siggate.SigGateClassifier(**FP).fit([*smiles[:18], "OCC", "CCO"], ["a"] * 18 + ["b"] * 2)
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="out_dir .*file is a file; give a folder"):
        siggate.SigGateRegressor(**FP, out_dir=tmp_path / "file").fit(smiles[:20], y[:20])


def test_molecules_left_out_are_named_by_their_place_in_X(molecules):
    import siggate

    smiles, y = molecules
    X = list(smiles[:30])
    X[4], X[9] = "C1CC", "not a smiles"
    with pytest.warns(UserWarning, match=r"2 of 30 molecules left out \(their positions in X: 4: .*unclosed ring.*; 9: "):
        est = siggate.SigGateRegressor(**FP).fit(X, y[:30])
    assert est.predict(smiles[30:33]).shape == (3,)
    assert [i for i, _ in est.left_out_] == [4, 9] and "unclosed ring" in est.left_out_[0][1]
    # several targets: a row without any label has none to learn and is not "left out"; beyond the
    # first three, the warning says more and left_out_ lists them all
    X = [*smiles[:30], "C1CC", "C1CC", "C1CC", "C1CC"]
    two = np.stack([np.r_[y[:30], [1.0] * 4], np.r_[y[:30], [2.0] * 4]], axis=1)
    two[0] = np.nan
    with pytest.warns(UserWarning, match=r"^4 of 34 molecules left out \(their positions in X: 30: .*; 31: .*; 32: .*; "
                                         r"\.\.\.\)$"):
        est = siggate.SigGateRegressor(**FP).fit(X, two)
    assert [i for i, _ in est.left_out_] == [30, 31, 32, 33]
    with pytest.raises(ValueError, match=r"^y's target\(s\) 'y1' have no label \(NaN in every row\); drop them"):
        siggate.SigGateRegressor(**FP).fit(smiles[:30], np.stack([y[:30], np.full(30, np.nan)], axis=1))
    with pytest.raises(ValueError, match="^SigGateRegressor requires y to be passed, but the target y is None"):
        siggate.SigGateRegressor(**FP).fit(smiles[:30], None)


def test_an_out_dir_of_an_unexpanded_tilde_or_empty_is_refused_as_the_command_line_refuses_it(molecules, tmp_path,
                                                                                              monkeypatch):
    """out_dir="~/runs" made a literal ./~/runs folder, and out_dir="" wrote the run into the current
    folder; both are refused before any work, '~' by the command line's rule of --out
    (files.tilde_problem)."""
    import siggate

    smiles, y = molecules
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError) as caught:
        siggate.SigGateRegressor(**FP, out_dir="~/runs").fit(smiles[:30], y[:30])
    assert str(caught.value) == (f"out_dir ~/runs: '~' is not expanded to a home folder here (a quoted path?); give "
                                 f"{os.path.expanduser('~')}/runs instead")
    with pytest.raises(ValueError) as caught:
        siggate.SigGateRegressor(**FP, out_dir="").fit(smiles[:30], y[:30])
    assert str(caught.value) == ("out_dir is '', an empty path (the run would go into the current folder); give a "
                                 "folder's path, or None for a temporary folder removed after fit")
    assert list(tmp_path.iterdir()) == []


def test_a_control_character_in_x_or_a_target_name_is_named_as_predict_names_it(molecules):
    """A NUL in a SMILES of X or in y's name was fit's own CSV refused as a binary file, in Excel's
    words; a SMILES with a control character is left out as predict refuses it, by its place in X,
    and a target name with one falls back to y as one with a comma does."""
    import pandas as pd

    import siggate

    smiles, y = molecules
    X = list(smiles[:30])
    X[3], X[7] = "C\x00C", "CC\x01O"
    with pytest.warns(UserWarning) as said:
        est = siggate.SigGateRegressor(**FP).fit(X, pd.Series(y[:30], name="p\x00IC50"))
    assert [str(w.message) for w in said] == [
        "2 of 30 molecules left out (their positions in X: 3: contains a control character ('\\x00') at position 2; "
        "7: contains a control character ('\\x01') at position 3)"]
    assert est.left_out_ == [(3, "contains a control character ('\\x00') at position 2"),
                             (7, "contains a control character ('\\x01') at position 3")]
    assert est.target_names_ == ["y"]
    with pytest.raises(ValueError, match=r"^1 of 1 SMILES cannot be predicted: row 0: contains a control character "
                                         r"\('\\x00'\) at position 2$"):
        est.predict(["C\x00C"])


def test_rows_of_one_molecule_are_said_merged_or_left_out_in_the_estimators_words(molecules):
    """left_out_ and the warning said the command line's flags ('duplicate of row 0 (--duplicates
    first)'), and called the rows that data.duplicates=average merged into another row "left out";
    the reasons are in the estimator's words, and merged rows are said to be merged."""
    import siggate

    smiles, y = molecules
    X, labels = [*smiles[:30], smiles[0], smiles[1]], [*y[:30], y[0], y[1]]
    with pytest.warns(UserWarning) as said:
        est = siggate.SigGateRegressor(**FP, overrides=("data.duplicates=average",)).fit(X, labels)
    assert [str(w.message) for w in said] == [
        "2 of 32 molecules merged into an earlier row of the same molecule, which trains on their mean label (their "
        "positions in X: 30: merged into row 0 (overrides=['data.duplicates=average']); 31: merged into row 1 "
        "(overrides=['data.duplicates=average']))"]
    assert est.left_out_ == [(30, "merged into row 0 (overrides=['data.duplicates=average'])"),
                             (31, "merged into row 1 (overrides=['data.duplicates=average'])")]
    X[5] = "C1CC"
    with pytest.warns(UserWarning) as said:
        est = siggate.SigGateRegressor(**FP, overrides=("data.duplicates=first",)).fit(X, labels)
    assert [str(w.message) for w in said] == [
        "3 of 32 molecules left out (their positions in X: 5: SMILES parse error: unclosed ring for input: 'C1CC'; 30: "
        "duplicate of row 0 (overrides=['data.duplicates=first']); 31: duplicate of row 1 "
        "(overrides=['data.duplicates=first']))"]
    assert [why for _, why in est.left_out_][1:] == ["duplicate of row 0 (overrides=['data.duplicates=first'])",
                                                     "duplicate of row 1 (overrides=['data.duplicates=first'])"]


def test_complex_labels_are_refused_as_scikit_learn_refuses_them(molecules):
    """A complex y was cast to real with only NumPy's ComplexWarning (its imaginary parts dropped);
    it is refused, in scikit-learn's words, before any work."""
    import pandas as pd

    import siggate

    smiles, y = molecules
    said = ("Complex data not supported: y holds complex numbers; give real labels (y.real, if the imaginary parts "
            "are 0)")
    for labels in (y[:30] + 1j, pd.Series(y[:30] + 1j), pd.DataFrame({"a": y[:30] + 1j}), [1 + 1j, *y[1:30]]):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # (NumPy's ComplexWarning is no answer)
            with pytest.raises(ValueError) as caught:
                siggate.SigGateRegressor(**FP).fit(smiles[:30], labels)
        assert str(caught.value) == said
    with pytest.raises(ValueError) as caught:
        siggate.SigGateClassifier(**FP).fit(smiles[:30], np.r_[[0j] * 15, [1j] * 15])
    assert str(caught.value) == said


def test_verbose_shows_siggates_log_lines_while_fitting_once(molecules, capsys, caplog, monkeypatch):
    """verbose=True showed only WARNING lines (through Python's last-resort handler), where its
    docstring promised siggate's log lines: with no logging configured, fit shows its INFO lines on
    stderr as the command line does, through a handler of its own that it removes after; where the
    caller configured a handler, the lines go there alone (not printed twice)."""
    import logging

    import siggate

    smiles, y = molecules
    logger = logging.getLogger("siggate")
    before = (logger.level, list(logger.handlers))
    with monkeypatch.context() as patched:  # no handler anywhere (pytest's own on the root's set aside)
        patched.setattr(logging.getLogger(), "handlers", [])
        siggate.SigGateRegressor(**FP, verbose=True).fit(smiles[:30], y[:30])
    err = capsys.readouterr().err
    assert any(line.startswith("INFO siggate.") for line in err.splitlines()), err
    assert (logger.level, logger.handlers) == before
    with caplog.at_level(logging.INFO, logger="siggate"):  # the caller's handler: the lines go there
        siggate.SigGateRegressor(**FP, verbose=True).fit(smiles[:30], y[:30])
    assert "INFO siggate." not in capsys.readouterr().err
    assert any(r.levelno == logging.INFO and r.name.startswith("siggate.") for r in caplog.records)


def test_tags_say_the_input_is_smiles_strings():
    import siggate

    reg, clf = siggate.SigGateRegressor().__sklearn_tags__(), siggate.SigGateClassifier().__sklearn_tags__()
    for tags in (reg, clf):
        assert tags.input_tags.string and tags.input_tags.one_d_array and not tags.input_tags.two_d_array
    assert reg.target_tags.multi_output and not clf.classifier_tags.multi_class


def test_out_dir_replaces_its_own_fit_and_never_a_cli_run(molecules, tmp_path, capsys):
    """A second fit into out_dir replaces the first; a folder that siggate train made is refused
    (its files were left beside the estimator's before), and so is one another live run holds."""
    import siggate
    from siggate.files import FolderLock

    smiles, y = molecules
    out = tmp_path / "run"
    siggate.SigGateRegressor(**FP, out_dir=out).fit(smiles[:30], y[:30])
    first = (out / "predictor.json").read_text()
    # fits refused for their data or parameters leave the earlier fit's run as it was (they cleared it)
    kept = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    refusals = [(ValueError, dict(), y[:30] * 0 + 1.0),  # one label for every molecule: nothing to learn
                (ValueError, dict(members="svr,xgb"), y[:30]),
                (ValueError, dict(overrides=("members.rf.n_estimators=0",)), y[:30]),
                (ValueError, dict(members="svr", ensemble=3), y[:30]),  # (refused as training starts, before)
                (ValueError, dict(members="gnn", overrides=("model.layers=2",)), y[:30]),  # shipped init: 4 layers
                # the cliff term with no GNN to train with it: `siggate train` refused it, fit ignored it
                (ValueError, dict(members="svr,rf", overrides=("train.cliff_weight=1",)), y[:30])]
    for error, params, labels in refusals:
        with pytest.raises(error):
            siggate.SigGateRegressor(**{**FP, **params}, out_dir=out, random_state=1).fit(smiles[:30], labels)
        assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == kept, params
    siggate.SigGateRegressor(**FP, out_dir=out, random_state=1).fit(smiles[:30], y[:30])
    assert (out / "predictor.json").read_text() != first and (out / "estimator.json").is_file()
    data = tmp_path / "d.csv"
    data.write_text("smiles,y\n" + "".join(f"{s},{v}\n" for s, v in zip(smiles, y)))
    rc, _, err = run_cli(["train", "--data", str(data), "--target-col", "y", "--members", "svr,rf", "--split", "random",
                          "--out", str(tmp_path / "cli")], capsys)
    assert rc == 0, err
    before = sorted(p.name for p in (tmp_path / "cli").iterdir())
    with pytest.raises(ValueError, match=r"cli holds metrics.json, members.yaml: a run that "
                                         "siggate train made, or files of its names; fit would replace them"):
        siggate.SigGateRegressor(**FP, out_dir=tmp_path / "cli").fit(smiles[:30], y[:30])
    assert sorted(p.name for p in (tmp_path / "cli").iterdir()) == before
    (tmp_path / "own").mkdir()
    (tmp_path / "own" / "metrics.json").write_text("{}")  # a user's own file of a run's name: named as it is
    with pytest.raises(ValueError, match=r"own holds metrics.json: a run that siggate train made, or files of its"):
        siggate.SigGateRegressor(**FP, out_dir=tmp_path / "own").fit(smiles[:30], y[:30])
    # a fit that fails once the run has started leaves a folder that the next fit still replaces
    import siggate.train.ensemble as ensemble

    def fail_midway(cfg, out, *args, **kwargs):
        (out / "members.yaml").write_text("{}\n")
        raise RuntimeError("stopped by the test")

    def fit_failing(folder, **params):  # a fit whose training stops midway
        real = ensemble.train_members
        ensemble.train_members = fail_midway
        try:
            with pytest.raises(RuntimeError, match="stopped by the test"):
                siggate.SigGateRegressor(**FP, out_dir=folder, **params).fit(smiles[:30], y[:30])
        finally:
            ensemble.train_members = real

    fit_failing(tmp_path / "failed")
    siggate.SigGateRegressor(**FP, out_dir=tmp_path / "failed").fit(smiles[:30], y[:30])
    assert json.loads((tmp_path / "failed" / "estimator.json").read_text())["estimator"] == "SigGateRegressor"
    # a refit that fails (or is interrupted) once training has started puts the earlier fit's run back:
    # it cleared that run first, which left a folder that siggate predict could not read
    earlier = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    fit_failing(out, random_state=2)
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == earlier
    rc, _, err = run_cli(["predict", "--checkpoint", str(out), "CCO"], capsys)
    assert rc == 0, err
    # a refit killed outright (no except clause ran): its partial run and the earlier fit set aside; the next fit
    # puts the earlier one back first, so that one failing too leaves it (set_aside dropped it before)
    from siggate.train.rundir import ASIDE, set_aside

    set_aside(out)
    (out / "estimator.json").write_text('{"estimator": "fitting"}\n')
    (out / "members.yaml").write_text("{}\n")
    fit_failing(out, random_state=2)
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == earlier
    assert not (out / ASIDE).exists()
    with FolderLock(tmp_path / "busy"):
        with pytest.raises(ValueError, match="busy: .*two runs must not write into one folder"):
            siggate.SigGateRegressor(**FP, out_dir=tmp_path / "busy").fit(smiles[:30], y[:30])
    # a folder that cannot be made (under a file) is refused by name, as the CLI refuses its --out
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(ValueError, match=r"out_dir .*a_file/run: cannot create the folder \(.*\); choose a folder "
                                         "you can write to for the fit"):
        siggate.SigGateRegressor(**FP, out_dir=tmp_path / "a_file" / "run").fit(smiles[:30], y[:30])


def test_predictions_keep_full_precision_and_score_skips_missing_labels(molecules, tmp_path):
    """predict read its numbers back from siggate predict's 6-digit text; score refused the
    [n, T] y with NaN that fit takes (sklearn's r2_score sees no NaN)."""
    from sklearn.metrics import r2_score

    import siggate

    smiles, y = molecules
    two = np.stack([y, y * 2], axis=1)
    est = siggate.SigGateRegressor(**FP).fit(smiles[:40], two[:40])
    pred = est.predict(smiles[40:])
    direct = est.predictor_.predict([est.smiles_predictor_.featurize(s) for s in smiles[40:]]).mean.numpy()
    np.testing.assert_array_equal(pred, direct.astype(np.float64))
    assert any(len(f"{v:.6g}") < len(repr(float(v))) for v in pred.ravel())  # more than 6 digits survive
    holes = two[40:].copy()
    holes[::3, 1] = np.nan
    ok = ~np.isnan(holes[:, 1])
    want = (r2_score(holes[:, 0], pred[:, 0]) + r2_score(holes[ok, 1], pred[ok, 1])) / 2
    assert est.score(smiles[40:], holes) == pytest.approx(want)
    assert est.score(smiles[40:], two[40:]) == pytest.approx(r2_score(two[40:], pred))


def test_the_run_records_target_names_and_classes(molecules, tmp_path):
    """A DataFrame's columns (or a Series' name) name the run's targets, so siggate predict's
    columns say what they are; the classifier's estimator.json says which class the run's
    probability is of. Labels without a class are refused by row."""
    import pandas as pd

    import siggate

    smiles, y = molecules
    frame = pd.DataFrame({"logS": y[:40], "logP": y[:40] * 2})
    est = siggate.SigGateRegressor(**FP, out_dir=tmp_path / "reg").fit(smiles[:40], frame)
    assert est.target_names_ == ["logS", "logP"] and est.predict(smiles[40:42]).shape == (2, 2)
    cfg = yaml.safe_load((tmp_path / "reg" / "members.yaml").read_text())
    assert cfg["data"]["target_cols"] == ["logS", "logP"]
    assert siggate.SigGateRegressor(**FP).fit(smiles[:40], pd.Series(y[:40], name="a,b")).target_names_ == ["y"]
    minus = siggate.SigGateRegressor(**FP).fit(smiles[:40], pd.Series(y[:40], name="-logIC50"))  # no flag: a name
    assert minus.target_names_ == ["-logIC50"] and minus.predict(smiles[40:42]).shape == (2,)
    labels = pd.Series(np.where(y[:40] > np.median(y[:40]), "weak", "potent"), name="activity")
    siggate.SigGateClassifier(**FP, out_dir=tmp_path / "clf").fit(smiles[:40], labels)
    record = json.loads((tmp_path / "clf" / "estimator.json").read_text())
    assert record == {"estimator": "SigGateClassifier", "target_names": ["activity"], "classes": ["potent", "weak"],
                      "probability_of": "weak"}
    for bad in ([None] + ["a", "b"] * 10, [float("nan")] + [0.0, 1.0] * 10):
        with pytest.raises(ValueError, match=r"y has no class at row\(s\) \[0\] \(None or NaN\)"):
            siggate.SigGateClassifier(**FP).fit(smiles[:21], bad)


def test_fit_never_replaces_files_no_fit_made(molecules, tmp_path):
    """fit cleared its out_dir of every name a run writes, whoever wrote them: someone's own
    best.pt, splits.csv and tb/ in a folder that held no run were deleted. Only an earlier fit's
    run (its estimator record) is cleared; files of those names without one are refused."""
    import siggate

    smiles, y = molecules
    out = tmp_path / "mine"
    (out / "tb").mkdir(parents=True)
    for name in ("best.pt", "splits.csv", "notes.txt"):
        (out / name).write_text("mine\n")
    (out / "tb" / "events.txt").write_text("mine\n")
    est = siggate.SigGateRegressor(members="svr", threads=1, out_dir=out)
    with pytest.raises(ValueError) as caught:
        est.fit(smiles[:30], y[:30])
    assert str(caught.value) == (f"out_dir {out} holds best.pt, splits.csv, tb/, of the names siggate's runs write (a "
                                 "fit writes some of them, by its members), and no earlier fit made them: choose "
                                 "another out_dir, or move them")
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == [
        "best.pt", "notes.txt", "splits.csv", "tb", "tb/events.txt"]
    for name in ("best.pt", "splits.csv"):
        (out / name).unlink()
    shutil.rmtree(out / "tb")
    est.fit(smiles[:30], y[:30])  # a folder of other files: fitted, they stay
    assert (out / "notes.txt").read_text() == "mine\n" and (out / "predictor.json").is_file()
    est.fit(smiles[:30], y[:30])  # its own earlier fit is replaced
    assert (out / "notes.txt").read_text() == "mine\n"


def test_a_dataframes_column_name_is_kept_and_checked_at_predict(molecules):
    """Fitted on a one-column DataFrame, the estimator keeps its name (``feature_names_in_``, as
    scikit-learn's estimators do) and refuses a DataFrame of another column at predict (a table
    whose SMILES sit elsewhere); a list still predicts, with scikit-learn's warning. A refit on a list
    forgets the name."""
    import pandas as pd

    import siggate

    smiles, y = molecules
    est = siggate.SigGateRegressor(**FP).fit(pd.DataFrame({"smiles": smiles[:40]}), y[:40])
    assert est.feature_names_in_.tolist() == ["smiles"] and est.n_features_in_ == 1
    same = est.predict(pd.DataFrame({"smiles": smiles[40:43]}))
    with pytest.warns(UserWarning, match="^X does not have valid feature names, but SigGateRegressor was fitted with "
                                         "feature names$") as caught:  # (scikit-learn's own warning, both ways)
        assert same.tolist() == est.predict(smiles[40:43]).tolist()
        est.score(smiles[40:43], y[40:43])
    assert [w.filename for w in caught] == [__file__] * 2  # the caller's line, from predict and score alike
    with pytest.raises(ValueError) as caught:
        est.predict(pd.DataFrame({"name": smiles[40:43]}))
    assert str(caught.value) == ("X's column is ['name'], but the estimator was fitted on a DataFrame of column "
                                 "['smiles']; give the SMILES in a column of that name (or as a list)")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # refused before the calibration's own warning
        with pytest.raises(ValueError, match=r"X's column is \['SMILES'\]"):
            est.predict_interval(pd.DataFrame({"SMILES": smiles[40:43]}))
    with pytest.raises(ValueError, match=r"X must be a sequence of SMILES strings \(\[n\] or \[n, 1\]\), got shape"):
        est.predict(pd.DataFrame({"smiles": smiles[40:43], "y": y[40:43]}))
    for call in (est.predict, est.predict_interval, siggate.SigGateRegressor().fit):  # one SMILES: "got shape ()"
        with pytest.raises(ValueError) as caught:
            call("CCO", *([[1.0]] if call.__name__ == "fit" else []))
        assert str(caught.value) == ("X is one SMILES string ('CCO'), and X must be a sequence of SMILES: give a list, "
                                     "e.g. ['CCO']")
    for missing in (np.nan, None, pd.NA):  # an empty CSV cell: "row 1 is float" named no cause
        with pytest.raises(ValueError, match=r"X must hold SMILES strings; row 1 is a missing value \(.*, an empty "
                                             r"cell\): drop the rows without a SMILES first"):
            est.predict(pd.DataFrame({"smiles": [smiles[40], missing, smiles[41]]}))
    with pytest.raises(ValueError, match=r"X must hold SMILES strings; row 0 is int$"):
        est.predict([5])
    est.fit(smiles[:40], y[:40])
    assert not hasattr(est, "feature_names_in_")
    with pytest.warns(UserWarning, match="^X has feature names, but SigGateRegressor was fitted without feature names$"):
        assert est.predict(pd.DataFrame({"name": smiles[40:43]})).shape == (3,)


def test_fragments_parent_in_overrides_reads_salts_as_their_parents(molecules):
    """data.fragments is the caller's to set: with 'parent' the fitted estimator predicts a salt,
    its charged form and its free base alike (as siggate predict of such a run does)."""
    import siggate

    smiles, y = molecules
    est = siggate.SigGateRegressor(**FP, overrides=("data.fragments=parent",)).fit(smiles[:40], y[:40])
    salt, base, other_salt = est.predict([f"{smiles[40]}.Cl", smiles[40], f"[Na+].{smiles[40]}"])
    assert salt == base == other_salt
    plain = siggate.SigGateRegressor(**FP).fit(smiles[:40], y[:40])
    assert plain.predict([f"{smiles[40]}.Cl"])[0] != plain.predict([smiles[40]])[0]  # read with its counterion


def test_predict_takes_every_molecule_fit_trained_on(molecules):
    """fit trained on molecules predict then refused: a wildcard atom and only hydrogens (now left
    out at fit, named in its warning), and a molecule above predict's atom limit (it trains, with a
    note, so the fitted estimator predicts it too)."""
    import siggate

    smiles, y = molecules
    big = "C" * 1200
    X = [*smiles[:40], "*C", "[H][H]", big]
    with pytest.warns(UserWarning, match=r"2 of 43 molecules left out \(their positions in X: 40: contains a wildcard "
                                         r"atom .*; 41: no heavy atoms"):
        est = siggate.SigGateRegressor(members="rf", threads=1).fit(X, [*y[:40], 1.0, 2.0, 3.0])
    pred = est.predict([*smiles[:40], big])
    assert pred.shape == (41,) and np.isfinite(pred).all()
    with pytest.raises(ValueError, match=r"1 of 1 SMILES cannot be predicted: row 0: contains a wildcard atom"):
        est.predict(["*C"])


def test_conformal_intervals_are_the_runs_own_and_outlive_its_folder(molecules, tmp_path, capsys):
    """Chemists asked for calibrated intervals from the estimator: the run computed them
    (``calibration.json``) but the estimator offered only the members' spread, and with no out_dir
    the calibration went with the temporary folder. ``predict_interval`` gives what ``siggate
    predict --coverage`` gives from the same run, after the run folder is gone too; the classifier's
    ``predict_set`` likewise."""
    import pickle

    import siggate

    smiles, y = molecules
    est = siggate.SigGateRegressor(**FP, out_dir=tmp_path / "reg", val_fraction=0.3).fit(smiles[:50], y[:50])
    lower, upper = est.predict_interval(smiles[50:], coverage=0.8)
    rc, out, err = run_cli(["predict", "--checkpoint", str(tmp_path / "reg"), *smiles[50:], "--coverage", "0.8"], capsys)
    assert rc == 0, err
    rows = list(csv.DictReader(out.splitlines()))
    assert [float(r["y_lower"]) for r in rows] == pytest.approx(lower.tolist(), abs=1e-5)
    assert [float(r["y_upper"]) for r in rows] == pytest.approx(upper.tolist(), abs=1e-5)
    mean = est.predict(smiles[50:])
    assert np.all(lower < mean) and np.all(mean < upper)
    # scaled by each molecule's similarity to the training ones: width = 2 q exp(-1.75 s); a higher coverage is wider
    assert est.calibration_.scale == "similarity"
    sim = est.smiles_predictor_._similarity_from.similarity(smiles[50:])
    q = est.calibration_.targets["y"].quantile(0.8)
    assert (upper - lower).tolist() == pytest.approx((2 * q * np.exp(-1.75 * sim)).tolist(), rel=1e-4)
    assert len(np.unique(np.round(upper - lower, 9))) > 1
    wide = est.predict_interval(smiles[50:], coverage=0.9)
    assert np.all(wide[1] - wide[0] >= upper - lower)
    shutil.rmtree(tmp_path / "reg")
    again = pickle.loads(pickle.dumps(est)).predict_interval(smiles[50:], coverage=0.8)
    assert np.array_equal(again[0], lower) and np.array_equal(again[1], upper)
    old = pickle.loads(pickle.dumps(est))
    del old.calibration_  # as an estimator pickled before it kept one
    with pytest.raises(ValueError, match="^this estimator was fitted by an older siggate, which kept no calibration"):
        old.predict_interval(smiles[50:])
    # 15 validation molecules bound at most 15/16 coverage: beyond it, infinite intervals and a warning
    with pytest.warns(UserWarning, match=r"^coverage 0.99: the run's calibration holds too few validation molecules "
                                         r"for it \('y' on 15; 99 are needed\).*fit again \(a larger val_fraction\) with more validation rows$"):
        assert np.isinf(est.predict_interval(smiles[50:], coverage=0.99)[1]).all()
    with pytest.raises(ValueError, match="coverage must be a number between 0 and 1"):
        est.predict_interval(smiles[50:], coverage=90)
    for given in ("0.9", True):  # a string was read as its number
        with pytest.raises(ValueError) as caught:
            est.predict_interval(smiles[50:], coverage=given)
        assert str(caught.value) == ("coverage must be a number between 0 and 1 (e.g. 0.9 for 90% intervals), got "
                                     f"{given!r}, a {type(given).__name__}")
    labels = np.where(y > np.median(y), "large", "small")
    clf = siggate.SigGateClassifier(**FP, out_dir=tmp_path / "clf", val_fraction=0.3).fit(smiles[:50], labels[:50])
    sets = clf.predict_set(smiles[50:], coverage=0.8)
    rc, out, err = run_cli(["predict", "--checkpoint", str(tmp_path / "clf"), *smiles[50:], "--coverage", "0.8"], capsys)
    assert rc == 0, err
    expected = [[c in r["y_set"].strip("{}").split(",") for c in ("0", "1")] for r in csv.DictReader(out.splitlines())]
    assert sets.dtype == bool and sets.tolist() == expected


def test_fits_in_threads_take_turns(molecules, monkeypatch):
    """Training seeds the process's global random generators and fit restores them and siggate's
    log level after it: two fits in threads at once interleaved those (a thread's warnings showed
    through the other's quiet level). They take turns, and each gives what it gives alone."""
    import threading

    import siggate
    from siggate.train import ensemble

    smiles, y = molecules
    alone = [siggate.SigGateRegressor(**FP, random_state=s).fit(smiles[:30], y[:30]).predict(smiles[30:35]) for s in (0, 1)]
    inside, most = [0], [0]
    real = ensemble.train_members

    def counted(*a, **k):
        inside[0] += 1
        most[0] = max(most[0], inside[0])
        try:
            return real(*a, **k)
        finally:
            inside[0] -= 1

    monkeypatch.setattr(ensemble, "train_members", counted)
    got = [None, None]

    def fit(s):
        got[s] = siggate.SigGateRegressor(**FP, random_state=s).fit(smiles[:30], y[:30]).predict(smiles[30:35])

    threads = [threading.Thread(target=fit, args=(s,)) for s in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most[0] == 1 and all(np.array_equal(g, a) for g, a in zip(got, alone))


def test_classifier_labels_as_scikit_learn_takes_them(molecules):
    """A column vector y is read as [n] with scikit-learn's DataConversionWarning (it was refused);
    text mixed with numbers is refused (NumPy turned it all into text, classes '1' and 'a')."""
    from sklearn.exceptions import DataConversionWarning

    import siggate

    smiles, y = molecules
    labels = np.where(y[:30] > np.median(y[:30]), "large", "small")
    with pytest.warns(DataConversionWarning, match=r"y is a column vector"):
        clf = siggate.SigGateClassifier(**FP).fit(smiles[:30], labels[:, None])
    assert list(clf.classes_) == ["large", "small"]
    with pytest.raises(ValueError, match="^y mixes text and number labels"):
        siggate.SigGateClassifier(**FP).fit(smiles[:30], [1, "a"] * 15)
    import pandas as pd

    with pytest.raises(ValueError, match="^y mixes text and number labels"):  # a one-column DataFrame's values
        siggate.SigGateClassifier(**FP).fit(smiles[:30], pd.DataFrame({"act": [1, "a"] * 15}))
    text = pd.Series(list(labels), dtype=object)
    text[2] = np.nan  # pandas' missing value in a text column: a missing class, not a mixed type
    with pytest.raises(ValueError, match=r"^y has no class at row\(s\) \[2\] \(None or NaN\)"):
        siggate.SigGateClassifier(**FP).fit(smiles[:30], text)
    listed = list(labels)
    listed[2] = np.nan  # in a list NumPy made it the text 'nan': a third class
    with pytest.raises(ValueError, match=r"^y has no class at row\(s\) \[2\] \(None or NaN\)"):
        siggate.SigGateClassifier(**FP).fit(smiles[:30], listed)
    strings = pd.Series(list(labels), dtype="string")
    strings[2] = None  # pandas' NA, neither None nor a float
    with pytest.raises(ValueError, match=r"^y has no class at row\(s\) \[2\] \(None or NaN\)"):
        siggate.SigGateClassifier(**FP).fit(smiles[:30], strings)


def test_score_refuses_labels_of_another_shape_and_y_reads_pandas_missing_values(molecules):
    """score reshaped y to X's rows: 40 SMILES against 20 labels, or one target's labels against a
    two-target model, gave an R² of mismatched rows (sklearn's r2_score raises). A nullable
    pandas y with pd.NA raised a TypeError; a y of three dimensions too."""
    import pandas as pd

    import siggate

    smiles, y = molecules
    two = np.stack([y, 2 * y + 1], axis=1)
    est = siggate.SigGateRegressor(**FP).fit(smiles[:40], two[:40])
    want = est.score(smiles[40:], two[40:])
    with pytest.raises(ValueError, match=r"score: y has shape \[20\], and X 20 SMILES of this model's 2 target"):
        est.score(smiles[40:], two[40:, 1])
    with pytest.raises(ValueError, match=r"score: y has shape \[10, 2\], and X 20 SMILES"):
        est.score(smiles[40:], two[40:50])
    frame = pd.DataFrame(two[40:], columns=["a", "b"]).astype("Float64")
    assert est.score(smiles[40:], frame) == pytest.approx(want, rel=1e-12)
    frame.iloc[3, 0] = pd.NA  # a missing label, skipped as NaN is
    nan = two[40:].copy()
    nan[3, 0] = np.nan
    assert est.score(smiles[40:], frame) == pytest.approx(est.score(smiles[40:], nan), rel=1e-12)
    # a DataFrame whose columns name the targets is read by name (by position, each column was scored
    # against the other target's predictions: R² -14 for a 0.92 model); names that are not all targets: refused
    named = siggate.SigGateRegressor(**FP).fit(smiles[:40], pd.DataFrame(two[:40], columns=["pki", "logd"]))
    right = named.score(smiles[40:], pd.DataFrame(two[40:], columns=["pki", "logd"]))
    assert right == pytest.approx(want, rel=1e-12)
    assert named.score(smiles[40:], pd.DataFrame(two[40:, ::-1], columns=["logd", "pki"])) == pytest.approx(right, rel=1e-12)
    with pytest.raises(ValueError, match=r"^score: y's columns \['pki', 'other'\] are not this model's targets "):
        named.score(smiles[40:], pd.DataFrame(two[40:], columns=["pki", "other"]))
    # columns that cannot name a CSV column (" logd" from a header "smiles, pki, logd") became y0, y1: the
    # same frame reordered was scored by position (R² -27), silently; they are matched as fit was given them
    spaced = siggate.SigGateRegressor(**FP).fit(smiles[:40], pd.DataFrame(two[:40], columns=[" pki", " logd"]))
    assert spaced.target_names_ == ["y0", "y1"]
    right = spaced.score(smiles[40:], pd.DataFrame(two[40:], columns=[" pki", " logd"]))
    assert spaced.score(smiles[40:], pd.DataFrame(two[40:, ::-1], columns=[" logd", " pki"])) == \
        pytest.approx(right, rel=1e-12)
    with pytest.raises(ValueError, match=r"^score: y's columns \[' pki', 'other'\] are not this model's targets "
                                         r"\[' pki', ' logd'\]"):
        spaced.score(smiles[40:], pd.DataFrame(two[40:], columns=[" pki", "other"]))
    assert spaced.score(smiles[40:], pd.DataFrame(two[40:, ::-1], columns=["y1", "y0"])) == \
        pytest.approx(right, rel=1e-12)  # (its target_names_ still name them)
    # repeated column names: fit read them by position (y0, y1), and score refused the same frame as "not
    # this model's targets ['a', 'a']" (helper-178): read by position too
    twice = siggate.SigGateRegressor(**FP).fit(smiles[:40], pd.DataFrame(two[:40], columns=["a", "a"]))
    assert twice.target_names_ == ["y0", "y1"]
    assert twice.score(smiles[40:], pd.DataFrame(two[40:], columns=["a", "a"])) == pytest.approx(want, rel=1e-12)
    inf = two[40:].copy()
    inf[2, 1] = np.inf  # named as fit names it (it was scikit-learn's 'Input contains infinity')
    with pytest.raises(ValueError, match=r"^score: y holds an infinite label at row\(s\) \[2\]; give a number"):
        est.score(smiles[40:], inf)
    with pytest.raises(ValueError, match=r"above the limit of 1000 \(1,000 atoms, or the largest molecule fit trained "
                                         r"on\)$"):  # (it named --max-atoms, which the estimator has not)
        est.predict(["C" * 1001])
    with pytest.raises(ValueError, match=r"^score: sample_weight has shape \[5\], and X 20 SMILES: give one weight"):
        est.score(smiles[40:], two[40:], sample_weight=np.ones(5))  # (a bare IndexError of numpy's)
    with pytest.raises(ValueError, match=r"y has shape \[40, 1, 1\]; give one label per SMILES"):
        siggate.SigGateRegressor(**FP).fit(smiles[:40], y[:40].reshape(-1, 1, 1))
    # nothing to fit on: said so (it read 'y's target(s) 'y' have no label', and a CLI flag for [n, 0])
    with pytest.raises(ValueError, match=r"^X holds no SMILES; fit needs molecules and their labels$"):
        siggate.SigGateRegressor(**FP).fit([], [])
    with pytest.raises(ValueError, match=r"^y has shape \[40, 0\]: no target"):
        siggate.SigGateRegressor(**FP).fit(smiles[:40], np.zeros((40, 0)))
    # a y with no rows to count, and an out_dir that is no path: named (they were bare TypeErrors)
    for bad, name in ((5.0, "float"), ((v for v in y[:40]), "generator")):
        with pytest.raises(ValueError, match=rf"^y must be an array-like of labels, one per SMILES .*got {name}$"):
            siggate.SigGateRegressor(**FP).fit(smiles[:40], bad)
    with pytest.raises(ValueError, match=r"^out_dir must be a folder's path \(a str or pathlib.Path\) or None, got 123$"):
        siggate.SigGateRegressor(**FP, out_dir=123).fit(smiles[:40], y[:40])
    # score before fit: scikit-learn's NotFittedError, as predict gives (it was an AttributeError)
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError):
        siggate.SigGateRegressor(**FP).score(smiles[:2], y[:2])


def test_intervals_in_threads_share_no_state(molecules):
    """predict_interval set the shared reader's domain for its call and cleared it after: a
    prediction in another thread meanwhile lost its similarity column (ValueError: could not
    convert string to float). Each call measures on its own copy; plain predictions stay without."""
    import threading

    import siggate

    smiles, y = molecules
    est = siggate.SigGateRegressor(**FP, val_fraction=0.3).fit(smiles[:40], y[:40])
    want_interval, want_mean = est.predict_interval(smiles[40:45], 0.8), est.predict(smiles[40:45])
    errors, wrong = [], []

    def work():
        for _ in range(8):
            try:
                got = est.predict_interval(smiles[40:45], 0.8)
                mean = est.predict(smiles[40:45])
            except Exception as exc:  # noqa: BLE001 (the test counts them)
                errors.append(repr(exc))
                continue
            wrong.extend(not (np.array_equal(got[0], want_interval[0]) and np.array_equal(got[1], want_interval[1])
                              and np.array_equal(mean, want_mean)) for _ in [0])

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and not any(wrong) and len(wrong) == 32
    assert est.smiles_predictor_.domain is None  # the shared reader never measures


def test_a_target_named_like_the_domain_column_keeps_its_intervals(molecules):
    """predict_interval read the similarity from the column 'nearest_train_similarity', which a
    target of that name takes (the reader then names the domain's column ..._pred): the
    intervals were scaled by the target's predictions."""
    import pandas as pd

    import siggate

    smiles, y = molecules
    plain = siggate.SigGateRegressor(**FP).fit(smiles[:45], pd.Series(y[:45], name="y"))
    named = siggate.SigGateRegressor(**FP).fit(smiles[:45], pd.Series(y[:45], name="nearest_train_similarity"))
    assert named.predict(smiles[45:]) == pytest.approx(plain.predict(smiles[45:]), rel=1e-12)
    for a, b in zip(named.predict_interval(smiles[45:], coverage=0.8), plain.predict_interval(smiles[45:], coverage=0.8)):
        assert a == pytest.approx(b, rel=1e-12)


def test_the_command_line_names_the_class_a_fit_classifiers_probability_is_of(molecules, tmp_path, capsys):
    """A SigGateClassifier's out_dir holds a run whose label 1 is classes_[1] (sorted: 'inactive');
    predict/evaluate/explain on it wrote P(1) without saying of which class, so a file whose 1 means
    'active' scored ROC-AUC 0 without a word. They name it on stderr."""
    import siggate
    from test_predict import run_cli

    smiles, y = molecules
    labels = np.where(y > np.median(y), "active", "inactive")
    clf = siggate.SigGateClassifier(**FP, out_dir=tmp_path / "clf").fit(smiles[:40], labels[:40])
    assert list(clf.classes_) == ["active", "inactive"]
    note = ("note: this run was fit by SigGateClassifier on the classes 'active', 'inactive': its y is the probability "
            "of 'inactive', and a scored file's labels are 1 for 'inactive' and 0 for 'active'\n")
    rc, out, err = run_cli(["predict", "--checkpoint", str(tmp_path / "clf"), smiles[41]], capsys)
    assert rc == 0 and f"siggate predict: {note}" in err
    p = float(out.splitlines()[1].split(",")[1])
    assert p == pytest.approx(clf.predict_proba([smiles[41]])[0, 1], abs=1e-6)  # the probability of 'inactive'
    data = tmp_path / "d.csv"
    data.write_text("smiles,inactive\n" + "".join(f"{s},{int(v == 'inactive')}\n" for s, v in zip(smiles[40:], labels[40:])))
    rc, _, err = run_cli(["evaluate", "--checkpoint", str(tmp_path / "clf"), "--data", str(data), "--target-col",
                          "inactive"], capsys)
    assert rc == 0 and f"siggate evaluate: {note}" in err
    # its own splits: the run's training CSV was fit's temporary file (it was named, as if the user had lost it)
    rc, _, err = run_cli(["evaluate", "--checkpoint", str(tmp_path / "clf")], capsys)
    assert rc == 2 and err.endswith(f"siggate evaluate: error: {tmp_path / 'clf'} is the run of SigGateClassifier.fit, "
                                    "whose training CSV was temporary (and held no test split); score it on a labelled "
                                    "file with --data FILE.csv\n")
    reg = siggate.SigGateRegressor(**FP, out_dir=tmp_path / "reg").fit(smiles[:40], y[:40])
    rc, _, err = run_cli(["predict", "--checkpoint", str(reg.out_dir), smiles[41]], capsys)
    assert rc == 0 and "note:" not in err  # a regressor's run: nothing to say
    # a damaged or edited record dropped the note without a word, or printed classes a fit never writes
    record = tmp_path / "clf" / "estimator.json"
    kept = json.loads(record.read_text())
    for text, said in (("{", "cannot be read, so which class a probability here is of is not known"),
                       (json.dumps({**kept, "classes": ["a", "b", "c"], "probability_of": "zzz"}),
                        "names the classes ['a', 'b', 'c'] and a probability of 'zzz', which a fit never writes")):
        record.write_text(text)
        rc, _, err = run_cli(["predict", "--checkpoint", str(tmp_path / "clf"), smiles[41]], capsys)
        assert rc == 0 and f"siggate predict: note: {record} {said}" in err, err


def test_threads_zero_is_torchs_choice_not_the_recipes_one(molecules, tmp_path):
    """threads=0 (torch's choice, as --threads 0) left the csv recipe's train.threads: 1 in place:
    fit passed train.threads only when threads was not 0."""
    import siggate

    smiles, y = molecules
    siggate.SigGateRegressor(members="rf", threads=0, out_dir=tmp_path / "run",
                             overrides=("members.rf.n_estimators=10",)).fit(smiles[:30], y[:30])
    assert yaml.safe_load((tmp_path / "run" / "members.yaml").read_text())["train"]["threads"] == 0


def test_predict_on_a_dataframe_fits_out_dir_reads_the_column_fit_read(molecules, tmp_path, capsys):
    """A fit on df[["Drug"]] did not record the column, so `siggate predict --input` of its
    out_dir looked for 'smiles' in a file of the same layout; estimator.json names it now."""
    import pandas as pd

    import siggate
    from test_predict import run_cli

    smiles, y = molecules
    est = siggate.SigGateRegressor(**FP, out_dir=tmp_path / "run").fit(pd.DataFrame({"Drug": smiles[:40]}), y[:40])
    assert json.loads((tmp_path / "run" / "estimator.json").read_text())["smiles_column"] == "Drug"
    data = tmp_path / "new.csv"
    data.write_text("id,Drug\n" + "".join(f"m{i},{s}\n" for i, s in enumerate(smiles[40:43])))
    rc, out, err = run_cli(["predict", "--checkpoint", str(tmp_path / "run"), "--input", str(data)], capsys)
    assert rc == 0, err
    rows = list(csv.DictReader(out.splitlines()))
    assert [r["Drug"] for r in rows] == smiles[40:43]
    assert [float(r["y"]) for r in rows] == pytest.approx(est.predict(pd.DataFrame({"Drug": smiles[40:43]})), rel=1e-5)


def test_random_state_is_the_seed_as_scikit_learn_reads_it(molecules):
    """scikit-learn's name for the seed: a whole number is the seed (``seed_``); None draws one from
    NumPy's global generator and a RandomState or Generator from itself, as scikit-learn's
    estimators do; the former ``seed`` still works, with a FutureWarning. The draw decides the
    validation molecules, so the same seed gives the same model and another seed another one."""
    import warnings

    import siggate

    smiles, y = molecules
    X, labels, new = smiles[:30], y[:30], smiles[30:35]

    def fitted(**params):
        est = siggate.SigGateRegressor(**FP, **params).fit(X, labels)
        return est.seed_, est.predict(new)

    seed3, pred3 = fitted(random_state=3)
    assert seed3 == 3
    with pytest.warns(FutureWarning, match="^seed is deprecated: it is scikit-learn's random_state now"):
        old = fitted(seed=3)
    assert old[0] == 3 and np.array_equal(old[1], pred3)
    drawn = int(np.random.RandomState(5).randint(2**31 - 1))
    np.random.seed(5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (no deprecation for the new name)
        got = fitted(random_state=None)
    assert got[0] == drawn
    assert np.random.randint(2**31 - 1) == np.random.RandomState(5).randint(2**31 - 1, size=2)[1]  # one draw used
    assert fitted(random_state=np.random.RandomState(5))[0] == drawn
    assert fitted(random_state=np.random.default_rng(5))[0] == int(np.random.default_rng(5).integers(2**31 - 1))
    assert not np.array_equal(fitted(random_state=drawn)[1], pred3)  # another seed, other validation molecules


def test_an_estimator_pickled_before_random_state_loads_with_its_seed():
    """Its state has ``seed`` and no ``random_state``: get_params, repr and clone raised
    AttributeError. It loads with that seed as random_state."""
    import pickle

    from sklearn.base import clone

    import siggate

    est = siggate.SigGateRegressor(epochs=2, random_state=5)
    state = est.__getstate__()
    state.pop("random_state")
    state["seed"] = 7
    old = siggate.SigGateRegressor.__new__(siggate.SigGateRegressor)
    old.__setstate__(state)
    assert old.get_params()["random_state"] == 7 and old.get_params()["seed"] is None
    assert clone(old).random_state == 7 and "random_state=7" in repr(old)
    assert pickle.loads(pickle.dumps(old)).get_params() == old.get_params()


def test_a_class_left_out_with_its_molecules_is_named_as_such():
    """Every molecule of one class unreadable: the refusal said 'the same value (0) in all 40
    labelled rows', the run's code for a class, and not why; it names the class as y gives it and the
    molecules left out, at their positions in X."""
    import siggate

    X = ["CCO", "CCN", "CCC", "CCCC", "CCCCC", "CCCCCC", "c1ccccc1", "Cc1ccccc1", "CCc1ccccc1", "Oc1ccccc1"] * 4
    with pytest.raises(ValueError) as caught:
        siggate.SigGateClassifier(members="rf").fit(X + ["C1CC"] * 4, ["a"] * 40 + ["b"] * 4)
    assert str(caught.value) == (
        "target column 'y' holds the same class 'a' in all 40 labelled rows, so there is nothing to learn (every "
        "error would be 0) (4 row(s) were left out for their molecule, first X[40]: SMILES parse error: unclosed ring "
        "for input: 'C1CC'; where they hold the other values, mend those SMILES); choose the y that holds the property")


def test_fit_refuses_a_warmup_that_leaves_no_epoch_before_it_reads_the_data(tmp_path, monkeypatch):
    """The warmup check moved from the config's reading into run_refusal, which fit asked only after
    prepare_data: a schedule refused from the parameters alone read and featurised X first (its
    data warnings said before the refusal). Training's refusals come before the data is read."""
    import siggate
    import siggate.train.dataprep as dataprep

    def no_reading(*args, **kwargs):
        raise AssertionError("the data was read before the refusal")

    monkeypatch.setattr(dataprep, "prepare_data", no_reading)
    with pytest.raises(ValueError) as caught:
        siggate.SigGateRegressor(out_dir=tmp_path / "run", epochs=2, overrides=("train.warmup_epochs=5",)).fit(
            ["CCO", "CCN", "CCC", "CCCl"], [1.0, 2.0, 3.0, 4.0])
    assert "train.warmup_epochs=5 leaves no epoch after the warmup of a 2-epoch run" in str(caught.value)
    assert not (tmp_path / "run").exists()
