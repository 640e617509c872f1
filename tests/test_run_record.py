"""What a ``siggate train --data`` run records beside its metrics, on one two-target CSV with
missing labels and a cliff column, trained as an ensemble of two GNN members: per-target
metrics with the missing cells masked, the split-conformal calibration and ``predict
--coverage``, the applicability domain and ``predict``'s domain columns, and the pictures
(also ``evaluate --data``'s parity plot). Every number is recomputed here from the run's
CSV outputs or from RDKit directly."""

from __future__ import annotations

import gzip
import json
import math
import shutil

import numpy as np
import pytest
import torch
from rdkit import Chem
from rdkit.Chem import rdFingerprintGenerator

from recipe_flags import GNN_SCRATCH
from test_predict import nci_smiles, read_output, run_cli

# a seed ensemble of the GNN alone from scratch (tiny architecture), not the fine-tuned csv recipe
TINY = [*GNN_SCRATCH, "--set", "model.layers=1", "--set", "model.dim=16", "--set", "model.heads=2", "--set", "model.pe_dim=4",
        "--set", "model.pe_steps=4", "--set", "model.head_layers=2", "--set", "train.warmup_epochs=0",
        "--set", "train.batch_size=16", "--no-progress"]
N_TRAIN, N_VAL, N_TEST = 80, 24, 24


def _kept(lo: int, hi: int) -> list[int]:
    """The rows of ``lo..hi-1`` that keep a label (rows 10, 45, 80, 115 lose both and are dropped)."""
    return [r for r in range(lo, hi) if not (r % 5 == 0 and r % 7 == 3)]


def _nitrogens(smiles: str) -> int:
    return sum(a.GetSymbol() == "N" for a in Chem.MolFromSmiles(smiles).GetAtoms())


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """The CSV (``a`` = nitrogens + noise with every 5th cell empty, ``b`` = atoms / 10 + noise
    with every 7th empty, ``cliff_mol`` on every 4th row, a split column) and the run folder."""
    tmp = tmp_path_factory.mktemp("record")
    smiles = [s for s in nci_smiles(200) if Chem.MolFromSmiles(s).GetNumAtoms() <= 40][:N_TRAIN + N_VAL + N_TEST]
    rng = np.random.default_rng(3)
    lines = ["smiles,a,b,cliff_mol,split"]
    for i, s in enumerate(smiles):
        a = "" if i % 5 == 0 else f"{_nitrogens(s) + 0.1 * rng.standard_normal():.4f}"
        b = "" if i % 7 == 3 else f"{Chem.MolFromSmiles(s).GetNumAtoms() / 10 + 0.1 * rng.standard_normal():.4f}"
        split = "train" if i < N_TRAIN else "val" if i < N_TRAIN + N_VAL else "test"
        lines.append(f"{s},{a},{b},{int(i % 4 == 0)},{split}")
    data = tmp / "d.csv"
    data.write_text("\n".join(lines) + "\n")
    out = tmp / "run"
    from siggate.cli import main
    from test_predict import one_thread

    with one_thread():  # module scope has no capsys: the command's output goes to the log
        rc = main(["train", "--data", str(data), "--target-col", "a,b", "--split", "column:split", "--ensemble", "2",
                   "--epochs", "3", "--out", str(out), "--cache-dir", str(tmp / "cache"), *TINY])
    assert rc == 0
    return data, out, smiles


def _labels(smiles_rows: list[int], data) -> np.ndarray:
    rows = read_output(data)
    return np.array([[float(rows[r][c]) if rows[r][c] else np.nan for c in ("a", "b")] for r in smiles_rows])


# ------------------------------------------------------------------ multi-target, missing labels


def test_two_targets_with_empty_cells_train_and_are_scored_per_target_on_their_labelled_rows(run):
    from siggate.train.losses import loss_fn

    data, out, _ = run
    m = json.loads((out / "metrics.json").read_text())
    preds = read_output(out / "test_predictions.csv")
    assert list(preds[0]) == ["row", "smiles", "cliff_mol", "a", "b", "a_pred", "b_pred", "a_pred_uncertainty",
                              "b_pred_uncertainty"]  # the input's other columns (cliff_mol) are carried
    rows = [int(r["row"]) for r in preds]
    assert rows == _kept(N_TRAIN + N_VAL, N_TRAIN + N_VAL + N_TEST) != list(range(N_TRAIN + N_VAL, 128))
    for t in ("a", "b"):
        pairs = [(float(r[t]), float(r[f"{t}_pred"])) for r in preds if r[t] != ""]
        assert len(pairs) == sum(1 for r in rows if (r % 5 != 0 if t == "a" else r % 7 != 3)) < len(rows)
        err = np.array([p - y for y, p in pairs])
        got = m["test_metrics"]["per_target"][t]
        assert got["mae"] == pytest.approx(np.abs(err).mean(), rel=1e-4)
        assert got["rmse"] == pytest.approx(np.sqrt((err ** 2).mean()), rel=1e-4)
    assert m["test_metrics"]["mean"]["mae"] == pytest.approx(
        (m["test_metrics"]["per_target"]["a"]["mae"] + m["test_metrics"]["per_target"]["b"]["mae"]) / 2, rel=1e-6)
    assert m["test"] == pytest.approx(m["test_metrics"]["mean"]["mae"], rel=1e-5)
    for member in ("member0", "member1"):  # each GNN member: a finite loss every epoch (NaN cells masked)
        history = json.loads((out / member / "metrics.json").read_text())["history"]
        assert len(history) == 3 and all(math.isfinite(h["train_loss"]) and math.isfinite(h["val"]) for h in history)
    y = torch.tensor([[1.0, float("nan")], [float("nan"), 2.0], [3.0, 5.0]])
    p = torch.tensor([[2.0, 100.0], [100.0, 2.5], [1.0, 5.0]])
    assert float(loss_fn("auto", "regression")(p, y)) == pytest.approx((1.0 + 0.5 + 2.0 + 0.0) / 4)


# ------------------------------------------------------------------ calibration and predict --coverage


def _predict(out, smiles, capsys, *extra) -> list[dict]:
    path = out.parent / "pred.csv"
    src = out.parent / "pred_in.csv"
    src.write_text("smiles\n" + "\n".join(smiles) + "\n")
    rc, _, err = run_cli(["predict", "--checkpoint", str(out), "--input", str(src), "--output", str(path), *extra],
                         capsys)
    assert rc == 0, err
    return read_output(path)


def test_the_calibration_is_the_validation_scores_and_predict_coverage_uses_it(run, capsys):
    """calibration.json's scores are |y - mean| / exp(-1.75 s) of the validation molecules, s their
    nearest-training similarity (recomputed from predict's output); predict --coverage 0.9 gives
    mean -/+ q exp(-1.75 s) with q their ceil((n + 1) 0.9)-th smallest; the test coverage metrics.json
    records is the fraction of test labels inside those intervals."""
    data, out, smiles = run
    cal = json.loads((out / "calibration.json").read_text())
    assert cal["task"] == "regression" and cal["scale"] == "similarity" and cal["format"] == 2
    val = _predict(out, smiles[N_TRAIN:N_TRAIN + N_VAL], capsys, "--coverage", "0.9")
    y_val = _labels(list(range(N_TRAIN, N_TRAIN + N_VAL)), data)
    test = _predict(out, smiles[N_TRAIN + N_VAL:], capsys, "--coverage", "0.9")
    y_test = _labels(list(range(N_TRAIN + N_VAL, len(smiles))), data)
    m = json.loads((out / "metrics.json").read_text())
    assert m["calibration"] == cal["summary"]
    for t, name in enumerate(("a", "b")):
        sigma = np.exp(-1.75 * np.array([float(r["nearest_train_similarity"]) for r in val]))
        labelled = ~np.isnan(y_val[:, t])
        assert cal["targets"][name]["floor"] == pytest.approx(math.exp(-1.75))
        mean = np.array([float(r[name]) for r in val])
        scores = np.sort(np.abs(y_val[labelled, t] - mean[labelled]) / sigma[labelled])
        assert cal["targets"][name]["scores"] == pytest.approx(scores.tolist(), rel=2e-3, abs=2e-3)
        n = len(scores)
        assert m["calibration"]["calibration_molecules"][name] == n
        q = scores[math.ceil((n + 1) * 0.9) - 1]
        mean_t = np.array([float(r[name]) for r in test])
        sigma_t = np.exp(-1.75 * np.array([float(r["nearest_train_similarity"]) for r in test]))
        lower, upper = np.array([float(r[f"{name}_lower"]) for r in test]), np.array([float(r[f"{name}_upper"]) for r in test])
        assert lower == pytest.approx(mean_t - q * sigma_t, rel=2e-3, abs=2e-3)
        assert upper == pytest.approx(mean_t + q * sigma_t, rel=2e-3, abs=2e-3)
        ok = ~np.isnan(y_test[:, t])
        inside = (y_test[ok, t] >= lower[ok]) & (y_test[ok, t] <= upper[ok])
        assert isinstance(m["calibration"]["test_below_nominal"], list)
        recorded = m["calibration"]["coverage"]["0.9"]["test"][name]
        assert recorded["n"] == ok.sum() and recorded["coverage"] == pytest.approx(inside.mean())
        assert recorded["mean_width"] == pytest.approx(np.mean(upper[ok] - lower[ok]), rel=2e-3)
        assert m["calibration"]["coverage"]["0.9"]["val"][name]["coverage"] >= 0.9  # in-sample: at least nominal
    assert list(test[0])[:7] == ["smiles", "a", "b", "a_uncertainty", "b_uncertainty", "a_lower", "b_lower"]
    rc, _, err = run_cli(["predict", "--checkpoint", str(out), "CCO", "--coverage", "1.5"], capsys)
    assert rc == 2 and "--coverage: coverage must be a number between 0 and 1" in err and len(err.splitlines()) == 1
    (out / "member0" / "calibration.json").rename(out / "member0" / "moved.json")
    try:
        rc, _, err = run_cli(["predict", "--checkpoint", str(out / "member0"), "CCO", "--coverage", "0.9"], capsys)
    finally:
        (out / "member0" / "moved.json").rename(out / "member0" / "calibration.json")
    assert rc == 2 and f"{out / 'member0'} is a member of the run {out}" in err and f"predict with {out}," in err
    # a checkpoint of a run that is not the model its calibration is of: refused, not given those intervals
    assert (out / "member0" / "last.pt").is_file()
    rc, _, err = run_cli(["predict", "--checkpoint", str(out / "member0" / "last.pt"), "CCO", "--coverage", "0.9"],
                         capsys)
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert "calibrates the run's predictions with its best.pt, not last.pt" in err and "drop --coverage" in err
    rc, _, err = run_cli(["predict", "--checkpoint", str(out / "member0" / "best.pt"), "CCO", "--coverage", "0.9"],
                         capsys)
    assert rc == 0, err


def test_a_run_calibrated_before_the_similarity_scale_keeps_its_spread_intervals(run, capsys, tmp_path, caplog):
    """A run whose calibration.json is format 1 (scores divided by the floored spread, no scale)
    predicts the intervals it always did, mean -/+ q max(spread, floor); with its domain files gone, a
    similarity-scaled run refuses --coverage in one line instead of guessing."""
    data, out, smiles = run
    old = tmp_path / "old"
    shutil.copytree(out, old)
    floors = {"a": 0.05, "b": 0.02}
    scores = {"a": [0.2, 0.4, 0.8, 1.6, 3.2], "b": [0.1, 0.3, 0.9, 2.7, 8.1]}
    (old / "calibration.json").write_text(json.dumps({
        "format": 1, "task": "regression", "normalized": True, "spread_floor": 0.1,
        "targets": {n: {"scores": scores[n], "floor": floors[n]} for n in ("a", "b")}}))
    rows = _predict(old, smiles[:6], capsys, "--coverage", "0.8")  # n = 5: rank ceil(4.8) = 5
    for name in ("a", "b"):
        mean = np.array([float(r[name]) for r in rows])
        sigma = np.maximum(np.array([float(r[f"{name}_uncertainty"]) for r in rows]), floors[name])
        assert [float(r[f"{name}_upper"]) for r in rows] == pytest.approx(mean + scores[name][4] * sigma, rel=1e-4)
    for f in ("domain.json", "domain_fingerprints.npz"):
        (old / f).unlink()
    shutil.copy(out / "calibration.json", old / "calibration.json")
    rc, _, err = run_cli(["predict", "--checkpoint", str(old), "CCO", "--coverage", "0.9"], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "holds no domain.json and domain_fingerprints.npz" in err
    caplog.clear()  # without intervals it predicts, and says why the domain's columns are missing
    rc, stdout, err = run_cli(["predict", "--checkpoint", str(old), "CCO"], capsys)
    assert rc == 0 and "outside_domain" not in stdout.splitlines()[0], err
    assert f"{old}: the run recorded its applicability domain, but its domain.json is gone: the output has no " \
        "nearest_train_similarity and outside_domain columns; copy the whole run folder" in caplog.text
    shutil.copy(out / "domain.json", old / "domain.json")
    (old / "domain_fingerprints.npz").write_bytes(b"not an archive")  # damaged: not offered to be deleted
    rc, _, err = run_cli(["predict", "--checkpoint", str(old), "CCO", "--coverage", "0.9"], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "cannot read the applicability domain" in err
    assert "or drop --coverage" in err and "delete domain.json" not in err
    rc, _, err = run_cli(["predict", "--checkpoint", str(old), "CCO"], capsys)  # no intervals: it may be deleted
    assert rc == 2 and "delete domain.json to predict without it" in err
    (old / "domain_fingerprints.npz").write_bytes((out / "domain_fingerprints.npz").read_bytes()[:500])  # truncated
    for argv in (["CCO"], ["CCO", "--coverage", "0.9"]):
        rc, _, err = run_cli(["predict", "--checkpoint", str(old), *argv], capsys)
        assert rc == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
        assert "cannot read the applicability domain (BadZipFile" in err
    shutil.copy(out / "domain_fingerprints.npz", old / "domain_fingerprints.npz")
    other = json.loads((out / "domain.json").read_text())  # another run's domain: other training molecules
    (old / "domain.json").write_text(json.dumps({**other, "n_train": other["n_train"] + 7}))
    for argv, remedy in ((["CCO"], "or delete domain.json to predict without it"),
                         (["CCO", "--coverage", "0.9"], "or drop --coverage")):
        rc, _, err = run_cli(["predict", "--checkpoint", str(old), *argv], capsys)
        assert rc == 2 and len(err.strip().splitlines()) == 1, err
        assert (f"its domain.json describes {other['n_train'] + 7} training molecules, but the run trained on "
                f"{other['n_train']}: the domain files belong to another run; restore the run's own, {remedy}") in err
    rc, _, err = run_cli(["predict", "--checkpoint", str(out), "CCO", "--coverage", "abc"], capsys)
    assert rc == 2 and err.strip().splitlines() == [
        "siggate predict: error: --coverage: coverage must be a number between 0 and 1 (e.g. 0.9 for 90% intervals), "
        "got 'abc'"]


def test_evaluate_coverage_is_the_share_of_labels_inside_predicts_intervals(run, capsys, tmp_path, caplog):
    """evaluate --coverage C checks the intervals predict --coverage C draws: on the run's test split
    and on an external labelled file (the test rows, written again) the coverage it reports is the
    share of labels inside predict's [lower, upper], recomputed here, with the mean width; the
    test split's is the one metrics.json recorded at training. A bad coverage is refused in one line."""
    data, out, smiles = run
    test = _predict(out, smiles[N_TRAIN + N_VAL:], capsys, "--coverage", "0.8")
    y_test = _labels(list(range(N_TRAIN + N_VAL, len(smiles))), data)
    ext = tmp_path / "ext.csv"
    rows = read_output(data)[N_TRAIN + N_VAL:]
    ext.write_text("smiles,a,b\n" + "".join(f"{r['smiles']},{r['a']},{r['b']}\n" for r in rows))
    m = json.loads((out / "metrics.json").read_text())
    for args, split in ((["--split", "test"], "test"), (["--data", str(ext)], "data")):
        rc, text, err = run_cli(["evaluate", "--checkpoint", str(out), *args, "--coverage", "0.8"], capsys)
        assert rc == 0, err
        res = json.loads(text)
        assert res["coverage"]["nominal"] == 0.8 and set(res["coverage"]) == {"nominal", split}
        assert isinstance(res["coverage_below_nominal"][split], list)
        for t, name in enumerate(("a", "b")):
            ok = ~np.isnan(y_test[:, t])
            lower = np.array([float(r[f"{name}_lower"]) for r in test])[ok]
            upper = np.array([float(r[f"{name}_upper"]) for r in test])[ok]
            got = res["coverage"][split][name]
            assert got["n"] == ok.sum() > 10
            assert got["coverage"] == pytest.approx(np.mean((y_test[ok, t] >= lower) & (y_test[ok, t] <= upper)))
            assert got["mean_width"] == pytest.approx(np.mean(upper - lower), rel=2e-3)
            if split == "test":
                assert got == pytest.approx(m["calibration"]["coverage"]["0.8"]["test"][name], rel=1e-4)
        held = [line for line in err.splitlines() if "at coverage 0.8" in line]
        assert held == [f"siggate evaluate: at coverage 0.8 the {split} labels fall inside: "
                        + ", ".join(f"{n} {res['coverage'][split][n]['coverage']:.0%} of {res['coverage'][split][n]['n']}"
                                    for n in ("a", "b"))]
    # labels far from the model's: named below nominal on their 19 molecules, and warned about
    shifted = tmp_path / "shifted.csv"
    shifted.write_text("smiles,a,b\n" + "".join(
        f"{r['smiles']},{float(r['a']) + 50 if r['a'] else ''},{r['b']}\n" for r in rows))
    rc, text, err = run_cli(["evaluate", "--checkpoint", str(out), "--data", str(shifted), "--coverage", "0.8"], capsys)
    low = json.loads(text)["coverage_below_nominal"]["data"]
    assert rc == 0 and [(i["target"], i["coverage"], i["n"]) for i in low] == [("a", 0.0, 19)], text
    warned = [r.getMessage() for r in caplog.records if "fewer than chance allows" in r.getMessage()]
    assert len(warned) == 1 and warned[0].startswith(
        f"--data {shifted}: the conformal intervals of 'a' at coverage 0.8 hold 0% of the 19 labelled molecules")
    # a coverage beyond what the calibration bounds: infinite widths are JSON null, not Infinity
    rc, text, err = run_cli(["evaluate", "--checkpoint", str(out), "--data", str(ext), "--coverage", "0.99"], capsys)
    res = json.loads(text, parse_constant=lambda c: pytest.fail(f"not JSON: {c}"))
    assert rc == 0 and res["coverage"]["data"]["a"]["mean_width"] is None and res["coverage"]["data"]["a"]["coverage"] == 1
    rc, _, err = run_cli(["evaluate", "--checkpoint", str(out), "--coverage", "1.5"], capsys)
    assert rc == 2 and "--coverage: coverage must be a number between 0 and 1" in err and len(err.splitlines()) == 1
    rc, _, err = run_cli(["evaluate", "--checkpoint", str(out / "member0" / "last.pt"), "--coverage", "0.9"], capsys)
    assert rc == 2 and "calibrates the run's predictions with its best.pt, not last.pt" in err, err


def test_resuming_a_run_of_several_members_with_fewer_epochs_is_refused_before_the_data_load(run, capsys):
    """Each GNN member's last.pt says how far it trained: --epochs below that is refused in one
    line naming the member's checkpoint, and the run is left as it was."""
    _, out, _ = run
    kept = {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    rc, _, err = run_cli(["train", "--resume", str(out), "--epochs", "2", "--no-progress"], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert (f"cannot resume from {out / 'member0' / 'last.pt'} with train.epochs=2: the run has trained 3 epochs, and "
            "a resumed run may grow, not shrink; give --epochs 3 or more") in err
    assert {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()} == kept


def test_a_coverage_beyond_the_calibration_is_named_not_silently_infinite(run, capsys, caplog):
    """With n calibration molecules no finite bound holds beyond n / (n + 1): predict wrote
    -inf/inf intervals and said nothing. It still writes them (the honest answer) and says which
    targets, how many molecules are needed and the highest coverage that has a finite bound."""
    from siggate.predictors.conformal import conformal_rank, fewest_for

    data, out, smiles = run
    cal = json.loads((out / "calibration.json").read_text())
    n = {name: len(t["scores"]) for name, t in cal["targets"].items()}
    assert fewest_for(0.99) == 99 and fewest_for(0.9) == 9 and fewest_for(0.5) == 1
    assert all(conformal_rank(k, c) <= k for c in (0.5, 0.9, 0.99) for k in [fewest_for(c)])
    assert all(conformal_rank(fewest_for(c) - 1, c) > fewest_for(c) - 1 for c in (0.9, 0.99))
    caplog.clear()
    rows = _predict(out, smiles[:2], capsys, "--coverage", "0.99")
    assert all(r[f"{name}_lower"] == "-inf" and r[f"{name}_upper"] == "inf" for r in rows for name in n)
    [warning] = [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and "--coverage" in r.getMessage()]
    assert warning == (f"--coverage 0.99: the run's calibration holds too few validation molecules for it ('a' on {n['a']}, "
                       f"'b' on {n['b']}; 99 are needed): those targets' intervals are infinite; ask a coverage of at most "
                       f"{math.floor(min(n.values()) / (min(n.values()) + 1) * 1000) / 1000:g}, or retrain with more "
                       "validation rows")
    advised = warning.split("ask a coverage of at most ")[1].split(",")[0]  # rounded down: it works as advised
    caplog.clear()
    rows = _predict(out, smiles[:2], capsys, "--coverage", advised)
    assert all(r[f"{name}_upper"] != "inf" for r in rows for name in n)
    assert not [r for r in caplog.records if "too few" in r.getMessage()]
    caplog.clear()
    _predict(out, smiles[:2], capsys, "--coverage", "0.9")
    assert not [r for r in caplog.records if "--coverage" in r.getMessage()]


# ------------------------------------------------------------------ applicability domain


def _count_tanimoto(a: dict, b: dict) -> float:
    keys = set(a) | set(b)
    return sum(min(a.get(k, 0), b.get(k, 0)) for k in keys) / sum(max(a.get(k, 0), b.get(k, 0)) for k in keys)


def test_the_domain_threshold_comes_from_the_validation_molecules_and_predict_flags_a_huge_alkane(run, capsys):
    _, out, smiles = run
    gen = rdFingerprintGenerator.GetMorganGenerator(radius=2, fpSize=2048)

    def counts(s):
        return gen.GetCountFingerprint(Chem.MolFromSmiles(s)).GetNonzeroElements()

    train = [counts(smiles[r]) for r in _kept(0, N_TRAIN)]
    val_rows = _kept(N_TRAIN, N_TRAIN + N_VAL)
    nearest = [max(_count_tanimoto(counts(smiles[r]), t) for t in train) for r in val_rows]
    dom = json.loads((out / "domain.json").read_text())
    assert dom["threshold"] == pytest.approx(np.percentile(nearest, 5)) and dom["percentile"] == 5.0
    assert dom["n_train"] == N_TRAIN - 2 and dom["n_val"] == N_VAL - 1
    assert json.loads((out / "metrics.json").read_text())["domain"]["threshold"] == dom["threshold"]
    with np.load(out / "domain_fingerprints.npz", allow_pickle=False) as z:
        assert len(z["offsets"]) == len(train) + 1 and z["offsets"][-1] == len(z["bits"]) == len(z["counts"])
        assert dict(zip(z["bits"][:z["offsets"][1]].tolist(), z["counts"][:z["offsets"][1]].tolist())) == train[0]
    alkane = "C" * 900
    rows = _predict(out, [alkane, smiles[5], smiles[val_rows[1]]], capsys)
    assert [r["error"] for r in rows] == ["", "", ""]
    sims = [float(r["nearest_train_similarity"]) for r in rows]
    assert sims[0] == pytest.approx(max(_count_tanimoto(counts(alkane), t) for t in train), abs=1e-4)
    assert sims[0] < 0.05 < dom["threshold"] and rows[0]["outside_domain"] == "true"
    assert sims[1] == 1.0 and rows[1]["outside_domain"] == "false"  # a training molecule
    assert sims[2] == pytest.approx(nearest[1], abs=1e-4)
    assert rows[2]["outside_domain"] == ("false" if nearest[1] >= dom["threshold"] else "true")


def test_counts_see_size_where_bits_do_not():
    """What similarity.py and the README say: the 900-carbon alkane and hexane share nearly all
    bits, but not their counts."""
    from rdkit import DataStructs

    from siggate.data.similarity import domain_fingerprints, nearest_similarity

    gen = rdFingerprintGenerator.GetMorganGenerator(radius=2, fpSize=2048)
    hexane, alkane = Chem.MolFromSmiles("CCCCCC"), Chem.MolFromSmiles("C" * 900)
    assert DataStructs.TanimotoSimilarity(gen.GetFingerprint(hexane), gen.GetFingerprint(alkane)) > 0.85
    count = nearest_similarity(domain_fingerprints(["C" * 900]), domain_fingerprints(["CCCCCC", "CCO"]))[0]
    want = _count_tanimoto(gen.GetCountFingerprint(alkane).GetNonzeroElements(),
                           gen.GetCountFingerprint(hexane).GetNonzeroElements())
    assert count == pytest.approx(want) and count < 0.01


# ------------------------------------------------------------------ pictures


def test_the_run_folder_holds_its_pictures_and_they_show_the_test_set(run):
    from PIL import Image

    from siggate.train.plots import LEARNING, PARITY, RESIDUALS, cliff_marks, learning_figure, parity_figure

    data, out, _ = run
    for folder, names in ((out, (PARITY, LEARNING, RESIDUALS)), (out / "member0", (PARITY, LEARNING))):
        for name in names:
            with Image.open(folder / name) as im:
                assert im.format == "PNG" and im.size[0] > 400 and im.size[1] > 300
                assert len(im.convert("RGB").getcolors(1 << 16)) > 10  # more than a blank canvas
    assert not (out / "member0" / RESIDUALS).exists()  # one model: no spread to plot against
    preds = read_output(out / "test_predictions.csv")
    rows = [int(r["row"]) for r in preds]
    cliff = cliff_marks(data, rows)
    assert cliff.tolist() == [r % 4 == 0 for r in rows]
    spaced = data.parent / "spaced.csv"  # " cliff_mol" after a comma and space names it, as predict reads headers
    spaced.write_text(data.read_text().replace(",cliff_mol", ", cliff_mol", 1))
    assert ", cliff_mol" in spaced.read_text() and cliff_marks(spaced, rows).tolist() == cliff.tolist()
    y = np.array([[float(r[t]) if r[t] else np.nan for t in ("a", "b")] for r in preds])
    p = np.array([[float(r[f"{t}_pred"]) for t in ("a", "b")] for r in preds])
    fig = parity_figure(y, p, ["a", "b"], cliff)
    for t, ax in enumerate(fig.axes):
        ok = ~np.isnan(y[:, t])
        counts = [len(c.get_offsets()) for c in ax.collections]
        assert counts == [int((ok & ~cliff).sum()), int((ok & cliff).sum())]
        assert ax.get_title().startswith(f"test {'ab'[t]}: n {int(ok.sum())}, MAE {np.mean(np.abs(p[ok, t] - y[ok, t])):.3g}")
    histories = {m: json.loads((out / m / "metrics.json").read_text())["history"] for m in ("member0", "member1")}
    fig = learning_figure(histories, "mae")
    loss_ax, metric_ax = fig.axes
    assert len(loss_ax.lines) == 2 and len(metric_ax.lines) == 4  # val and test per member
    assert list(loss_ax.lines[0].get_ydata()) == [h["train_loss"] for h in histories["member0"]]
    # a member scored with running statistics until its last epoch: the recomputed point is circled and named
    mixed = [{**h, "eval_norm": "running"} for h in histories["member0"]]
    mixed[-1]["eval_norm"] = "train"
    _, metric_ax = learning_figure({"member0": mixed}, "mae").axes
    circled = metric_ax.lines[-1]
    assert list(circled.get_xdata()) == [mixed[-1]["epoch"]] and list(circled.get_ydata()) == [mixed[-1]["val"]]
    assert "recomputed BatchNorm statistics" in circled.get_label() and len(metric_ax.lines) == 3
    # five such members: the marker is named once (it was named per member, 15 legend entries over
    # the curves), the legend sits beside the axes, and the epochs are whole numbers
    fig = learning_figure({f"member{k}": mixed for k in range(5)}, "mae")
    _, metric_ax = fig.axes
    labels = metric_ax.get_legend_handles_labels()[1]
    assert sum("recomputed BatchNorm statistics" in label for label in labels) == 1 and len(labels) == 11
    fig.canvas.draw()
    assert metric_ax.get_legend().get_window_extent().x0 >= metric_ax.get_window_extent().x1 - 1  # beside, not over
    assert all(float(t).is_integer() for t in metric_ax.get_xticks())


def test_panels_score_what_the_metrics_score_and_fit_their_names():
    """helper-171: a target with non-finite predictions was scored on its finite rows where the
    run's metrics are None; a 101-character name overran the next panels; a one-epoch run's test
    point was an invisible one-point line, its epoch axis ticked 0.945 ... 1.050."""
    from siggate.train.metrics import summary
    from siggate.train.plots import NAME_CHARS, learning_figure, parity_figure, residual_figure, roc_figure

    y = np.arange(20.0).reshape(-1, 1)
    p = y + 0.1
    p[:5] = np.nan
    assert summary("regression", y, p)["mean"]["mae"] is None  # (the run records no score)
    long = "pKä_" + "x" * 97
    for fig in (parity_figure(y, p, [long]), residual_figure(y, p, np.ones_like(p), [long]),
                roc_figure((y > 9).astype(float), p / 20, [long])):
        ax = fig.axes[0]
        assert ax.get_title() == f"test {long[:NAME_CHARS - 1]}…: 5 non-finite predictions, not scored"
    assert parity_figure(y, y + 0.1, ["a"]).axes[0].get_title().startswith("test a: n 20, MAE 0.1")
    history = [{"epoch": 1, "train_loss": 0.9, "val": 0.6, "test": 0.526}]
    _, metric_ax = learning_figure({"member0": history}, "mae").axes
    test_line = [line for line in metric_ax.lines if line.get_label() == "member0 test"][0]
    assert test_line.get_marker() == "x" and list(metric_ax.get_xticks()) == [1]


def test_evaluate_data_draws_its_parity_plot_next_to_its_output(run, capsys):
    from PIL import Image

    data, out, _ = run
    scores = out.parent / "scores.json"
    rc, stdout, err = run_cli(["evaluate", "--checkpoint", str(out), "--data", str(data), "--target-col", "a,b",
                               "--output", str(scores)], capsys)
    assert rc == 0, err
    res = json.loads(stdout)
    png = out.parent / "scores_parity.png"
    assert res["parity_plot"] == str(png) and f"parity plot {png}" in err
    with Image.open(png) as im:
        assert im.format == "PNG" and im.size[0] > 600
    # names with dots: each evaluation its own plot (both were 'ext_parity.png', the second over the first)
    for name in ("ext.scaffold.csv", "ext.random.csv.gz"):
        dotted = out.parent / name
        dotted.write_bytes(gzip.compress(data.read_bytes()) if name.endswith(".gz") else data.read_bytes())
        rc, stdout, err = run_cli(["evaluate", "--checkpoint", str(out), "--data", str(dotted), "--target-col", "a,b"],
                                  capsys)
        assert rc == 0, err
        assert json.loads(stdout)["parity_plot"] == str(out.parent / f"{name.split('.csv')[0]}_parity.png")
    # drawn again: siggate's own picture is replaced; a picture of the user's of that name (or any other file) was
    # replaced too, without a word: refused before scoring, kept
    before = png.stat().st_mtime_ns
    rc, _, err = run_cli(["evaluate", "--checkpoint", str(out), "--data", str(data), "--target-col", "a,b",
                          "--output", str(scores)], capsys)
    assert rc == 0 and png.stat().st_mtime_ns != before, err
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for mine in (lambda p: plt.figure().savefig(p), lambda p: p.write_bytes(b"my notes")):
        mine(png)
        kept = png.read_bytes()
        rc, stdout, err = run_cli(["evaluate", "--checkpoint", str(out), "--data", str(data), "--target-col", "a,b",
                                   "--output", str(scores)], capsys)
        assert rc == 2 and stdout == "" and err == (
            f"siggate evaluate: error: {png} is not marked as a picture siggate drew (one drawn before siggate marked "
            f"them is not either), and scoring --data {data} would replace it: move it away, or give an --output of "
            "another name (the picture is named after it)\n")
        assert png.read_bytes() == kept
    plt.close("all")


def test_a_run_of_many_targets_draws_its_first_twelve_in_rows_of_four():
    """A pretraining regresses ~190 descriptors: one panel each was a picture 90,000 pixels wide
    that took most of a small run's time; the pictures show the first MAX_PANELS and say so."""
    from siggate.train.plots import MAX_PANELS, PANEL_COLUMNS, parity_figure, residual_figure

    rng = np.random.default_rng(0)
    y, p = rng.normal(size=(30, 40)), rng.normal(size=(30, 40))
    names = [f"d{i}" for i in range(40)]
    for fig in (parity_figure(y, p, names), residual_figure(y, p, np.abs(p), names)):
        assert len(fig.axes) == MAX_PANELS == 12 and PANEL_COLUMNS == 4
        assert [ax.get_xlabel().split()[-1] for ax in fig.axes] == names[:12]
        assert fig._suptitle.get_text() == "the first 12 of 40 targets"
        w, h = fig.get_size_inches()
        assert (round(w / 4.4), round(h / 4.2)) == (4, 3)
    few = parity_figure(y[:, :3], p[:, :3], names[:3])
    assert len(few.axes) == 3 and few._suptitle is None and round(few.get_size_inches()[0] / 4.4) == 3
    # a title given where the figure is saved goes before the note, which it replaced
    from siggate.train import plots

    fig, kept = parity_figure(y, p, names), {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("siggate.files.atomic_write", lambda path, write: kept.setdefault("t", fig._suptitle.get_text()))
        plots.save_figure(fig, "unused.png", title="molecules.csv")
    assert kept["t"] == "molecules.csv; the first 12 of 40 targets"


def test_residuals_of_a_target_without_spread_say_so_instead_of_0_percent_within_sigma():
    """A combination whose validation weights give one member all of a target has no spread for it:
    its panel read '0% within 1 sigma, 0% within 2', which looks like miscalibration."""
    from siggate.train.plots import residual_figure

    y = np.array([[1.0, 2.0], [2.0, 3.0], [3.0, 5.0], [4.0, 4.0]])
    p = y + np.array([[0.1, 0.5], [-0.2, -0.5], [0.3, 0.2], [0.0, -0.1]])
    spread = np.array([[0.2, 0.0], [0.1, 0.0], [0.4, 0.0], [0.05, 0.0]])
    fig = residual_figure(y, p, spread, ["a", "b"])
    titles = [ax.get_title() for ax in fig.axes]
    assert titles[0] == "test a: 75% within 1 sigma, 100% within 2"  # |err| 0.1, 0.2, 0.3, 0 against 0.2, 0.1, 0.4, 0.05
    assert titles[1] == "test b: spread 0 for every molecule\n(one member holds all the weight): no sigma to compare"
    fig.canvas.draw()  # every title within its figure: one line of it overran the panel and its neighbour
    box = fig.bbox
    extents = [ax.title.get_window_extent() for ax in fig.axes]
    for ax, title in zip(fig.axes, extents):
        assert box.x0 <= title.x0 and title.x1 <= box.x1, (ax.get_title(), title, box)
    assert extents[0].x1 < extents[1].x0  # side by side, not over each other
    assert len(fig.axes[0].lines) == 2 and not fig.axes[1].lines  # the sigma lines only where there is a sigma


def test_evaluate_data_scores_the_targets_a_file_has_columns_of(run, tmp_path, capsys, caplog):
    """A file labelled for one of a two-target model's targets (no column of the other) was refused
    ("no column 'b'"), and the suggested --target-col a then failed on the target count: only an
    added empty column got it scored. Without --target-col the targets the file has columns of are
    scored by name, the others are named as not scored; a file with none of them is still refused."""
    data, out, _ = run
    rows = read_output(data)
    only_a = tmp_path / "only_a.csv"
    only_a.write_text("smiles,a\n" + "".join(f"{r['smiles']},{r['a']}\n" for r in rows))
    with_empty_b = tmp_path / "empty_b.csv"
    with_empty_b.write_text("smiles,a,b\n" + "".join(f"{r['smiles']},{r['a']},\n" for r in rows))
    caplog.clear()
    rc, stdout, err = run_cli(["evaluate", "--checkpoint", str(out), "--data", str(only_a)], capsys)
    assert rc == 0, err
    scored = json.loads(stdout)
    assert [r.getMessage() for r in caplog.records if "no column of the model's" in r.getMessage()] == [
        f"--data {only_a}: no column of the model's target(s) 'b'; 'a' scored, the others are not"]
    # the scores say it too (only the terminal did), and so do the panels without labels (one was empty, and a
    # classifier's said "one class only")
    assert scored["warnings"][0] == "no column of the model's target(s) 'b'; 'a' scored, the others are not"
    from siggate.train.plots import parity_figure, roc_figure

    labels = np.array([[1.0, np.nan], [2.0, np.nan], [0.0, np.nan]])
    assert [ax.get_title() for ax in parity_figure(labels, labels * 0.9, ["a", "b"], title="f").axes] == [
        "f a: n 3, MAE 0.1, R² 0.975", "f b: no labels, not scored"]
    labels = np.array([[1.0, np.nan, 1.0], [0.0, np.nan, 1.0]])
    assert [ax.get_title() for ax in roc_figure(labels, labels * 0.5 + 0.2, ["a", "b", "c"], title="f").axes] == [
        "f a: n 2, ROC-AUC 1.000", "f b: no labels, not scored", "f c: one class only, no ROC curve"]
    rc, stdout, err = run_cli(["evaluate", "--checkpoint", str(out), "--data", str(with_empty_b)], capsys)
    assert rc == 0, err
    reference = json.loads(stdout)
    for key in ("per_target", "mean"):
        assert scored["metrics"]["data"][key] == reference["metrics"]["data"][key]
    assert scored["per_target"]["data"]["b"] is None and scored["per_target"]["data"]["a"] > 0
    rc, _, err = run_cli(["evaluate", "--checkpoint", str(out), "--data", str(only_a), "--target-col", "a"], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "or drop --target-col to score the targets" in err
    neither = tmp_path / "neither.csv"
    neither.write_text("smiles,c\n" + "".join(f"{r['smiles']},1\n" for r in rows))
    rc, _, err = run_cli(["evaluate", "--checkpoint", str(out), "--data", str(neither)], capsys)
    assert rc == 2 and "no column 'a'" in err
    # the one target measured under another name: TARGET=COL scores it, and the other is not scored
    renamed = tmp_path / "renamed.csv"
    renamed.write_text("smiles,a_measured,b\n" + "".join(f"{r['smiles']},{r['a']},\n" for r in rows))
    caplog.clear()
    rc, stdout, err = run_cli(["evaluate", "--checkpoint", str(out), "--data", str(renamed), "--target-col",
                               " a = a_measured"], capsys)
    assert rc == 0, err
    mapped = json.loads(stdout)
    for key in ("per_target", "mean"):
        assert mapped["metrics"]["data"][key] == reference["metrics"]["data"][key]
    assert mapped["warnings"][0] == ("scored column 'a_measured' as the model's target 'a': the names differ, so make "
                                     "sure each is the same property in the same units")
    assert not [r for r in caplog.records if "another order" in r.getMessage()]
    no_b = tmp_path / "no_b.csv"
    no_b.write_text("smiles,a_measured\n" + "".join(f"{r['smiles']},{r['a']}\n" for r in rows))
    rc, stdout, err = run_cli(["evaluate", "--checkpoint", str(out), "--data", str(no_b), "--target-col",
                               "a=a_measured"], capsys)
    assert rc == 0, err
    assert json.loads(stdout)["metrics"]["data"]["per_target"] == mapped["metrics"]["data"]["per_target"]
    assert "no column of the model's target(s) 'b'; 'a_measured' scored, the others are not" in json.loads(stdout)[
        "warnings"]
    for given, message in [("x=a_measured", "--target-col x=a_measured: the model has no target 'x'; its targets are a, b"),
                           ("a=a_measured,b", "--target-col a=a_measured,b: give every entry as TARGET=COLUMN ('b' is not)"),
                           ("a=a_measured,a=b", "--target-col names the target 'a' twice (a_measured, b); name each once"),
                           ("a=b,b=b", "--target-col gives the column 'b' to two targets; give each its own column"),
                           ("b=a_measured,a=", "give every entry as TARGET=COLUMN ('a=' is not)"),
                           ("b=a", "--target-col b=a: 'a' is also the column of the model's target 'a', which would be "
                                   "scored on it too; name that target as well (a=COLUMN)"),
                           ("a=nothere", f"--data {no_b}: no column 'nothere'")]:
        rc, _, err = run_cli(["evaluate", "--checkpoint", str(out), "--data", str(no_b), "--target-col", given], capsys)
        assert rc == 2 and len(err.strip().splitlines()) == 1 and message in err, (given, err)
    # one column as the molecules and a target: merged into one, every row read as no molecule; refused
    rc, _, err = run_cli(["evaluate", "--checkpoint", str(out), "--data", str(no_b), "--smiles-col", "a_measured",
                          "--target-col", "a=a_measured"], capsys)
    assert rc == 2 and "column 'a_measured' is named as both the SMILES column and a target" in err, err
    # a column whose name holds a '=' is still a column where the file has it
    eq = tmp_path / "eq.csv"
    eq.write_text("smiles,a (M=1),b\n" + "".join(f"{r['smiles']},{r['a']},\n" for r in rows))
    rc, stdout, err = run_cli(["evaluate", "--checkpoint", str(out), "--data", str(eq), "--target-col", "a (M=1),b"],
                              capsys)
    assert rc == 0, err
    assert json.loads(stdout)["metrics"]["data"]["per_target"] == mapped["metrics"]["data"]["per_target"]


def test_a_calibration_of_another_task_or_with_nan_scores_is_refused(run, capsys):
    """calibration.json was read without checking it against the model: a regression run whose
    calibration said "binary" got prediction sets of {0,1}, and NaN scores gave NaN intervals,
    both with exit 0. Each is refused in one line."""
    _, out, _ = run
    path = out / "calibration.json"
    kept = path.read_text()
    doc = json.loads(kept)
    nan_scores = json.loads(kept)
    nan_scores["targets"]["a"]["scores"][0] = float("nan")
    try:
        for edited, why in (({**doc, "task": "binary"}, "calibrates a binary task, the model's is regression"),
                            (nan_scores, "target 'a': scores and floor must be finite and >= 0"),
                            ({**doc, "task": "ranking"}, "task 'ranking' is not one that siggate calibrates"),
                            ("[" * 100000 + "]" * 100000, "JSON nested too deep to read"),
                            ("{broken", "calibration.json cannot be read (Expecting property name enclosed in double "
                                        "quotes: line 1 column 2 (char 1)); copy the run folder again or train it "
                                        "again, or drop --coverage")):
            path.write_text(edited if isinstance(edited, str) else json.dumps(edited))
            rc, stdout, err = run_cli(["predict", "--checkpoint", str(out), "CCO", "--coverage", "0.9"], capsys)
            assert rc == 2 and stdout == "" and len(err.strip().splitlines()) == 1 and why in err, err
    finally:
        path.write_text(kept)


@pytest.mark.parametrize("n_val, warned", [(3, True), (19, True), (20, False)])
def test_a_domain_threshold_from_few_validation_molecules_is_warned_about(tmp_path, caplog, n_val, warned):
    """The applicability domain's threshold is the 5th percentile of the validation molecules'
    similarities: from one molecule it was that molecule's similarity, and predict's
    'outside_domain' flags rested on it without a word."""
    import logging
    from types import SimpleNamespace

    from siggate.train.record import fit_domain, write_domain

    smiles = nci_smiles(40 + n_val)
    graphs = [SimpleNamespace(smiles=s) for s in smiles]
    train, val = graphs[:40], graphs[40:]
    ds = SimpleNamespace(info=SimpleNamespace(level="graph"), train=train, val=val, test=[],
                         splits={"train": train, "val": val})
    with caplog.at_level(logging.WARNING, logger="siggate"):
        record = write_domain(tmp_path, ds, fit_domain(ds))
    assert record["n_val"] == n_val and record["n_train"] == 40
    messages = [r.getMessage() for r in caplog.records if "applicability domain" in r.getMessage()]
    assert bool(messages) == warned
    if warned:
        assert messages == [f"the applicability domain's threshold rests on {n_val} validation molecule(s) (its 5th "
                            "percentile needs 20 or more to lie between two of them): 'outside_domain' is rough; a "
                            "larger validation split steadies it"]


def test_test_coverage_below_nominal_is_named_when_chance_cannot_explain_it():
    """A run's test coverage far below nominal passed in silence (0.67-0.77 at 0.8 under a scaffold
    split, in metrics.json only). Split conformal's coverage is itself random (Beta(k, n + 1 - k)
    over the n validation molecules), so the covered count of the test molecules is beta-binomial;
    its one-sided p-values, Holm-adjusted over the coverages and targets, name what chance cannot
    explain. On exchangeable data it warns about as often as its level says (a plain binomial test
    at the nominal rate warned on 17-44% of such runs)."""
    import math

    from scipy import stats

    from siggate.predictors.conformal import Calibration, below_nominal
    from siggate.stats import holm

    coverage = {"0.9": {"test": {"a": {"n": 100, "coverage": 0.70}, "b": {"n": 100, "coverage": 0.86},
                                 "c": {"n": 10, "coverage": 0.5}, "d": {"n": 0, "coverage": None}},
                        "val": {"a": {"n": 30, "coverage": 0.5}}},
                "0.8": {"test": {"a": {"n": 100, "coverage": 0.81}}}}
    calibrated = {"a": 50, "b": 50, "c": 50, "d": 50}
    got = below_nominal(coverage, calibrated)
    assert [(g["nominal"], g["target"]) for g in got] == [("0.9", "a")]  # c: too few; val: not test
    k90, k80 = math.ceil(51 * 0.9), math.ceil(51 * 0.8)
    raw = [stats.betabinom.cdf(70, 100, k90, 51 - k90), stats.betabinom.cdf(86, 100, k90, 51 - k90),
           stats.betabinom.cdf(81, 100, k80, 51 - k80)]
    assert got[0]["p"] == pytest.approx(holm(raw)[0])
    assert holm(raw)[1] > 0.05  # 0.86 of 100 at 0.9 over 50 calibration molecules: chance
    rng = np.random.default_rng(0)
    warned = 0
    for _ in range(300):  # exchangeable scores: the promise holds, so warnings are false alarms
        cal = Calibration.fit("regression", ["y"], rng.normal(size=(50, 1)), np.zeros((50, 1)))
        y = rng.normal(size=(500, 1))
        cov = {f"{c:g}": {"test": cal.covered(y, np.zeros((500, 1)), None, c)} for c in (0.8, 0.9, 0.95)}
        warned += bool(below_nominal(cov, {"y": 50}))
    assert warned / 300 <= 0.08


def test_a_classification_run_draws_roc_curves_and_no_spread_draws_no_residuals(tmp_path):
    """A binary run's pictures were a parity plot of probabilities titled with an MAE and R² that
    metrics.json does not hold, and a run whose members' spread is zero everywhere drew residuals
    against a spread of 0 ("0% within 1 sigma"). A classification run draws ROC curves with the
    ROC-AUC; zero spread draws no residuals."""
    from sklearn.metrics import roc_auc_score

    from siggate.train.plots import PARITY, RESIDUALS, ROC, roc_figure, write_run_plots

    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, size=(40, 1)).astype(float)
    p = np.clip(0.6 * y + 0.4 * rng.uniform(size=(40, 1)), 0, 1)
    paths = write_run_plots(tmp_path / "bin", ["active"], "rocauc", y, p, np.zeros_like(p), task="binary")
    assert [x.name for x in paths] == [ROC] and not (tmp_path / "bin" / PARITY).exists()
    fig = roc_figure(y, p, ["active"])
    assert fig.axes[0].get_title() == f"test active: n 40, ROC-AUC {roc_auc_score(y[:, 0], p[:, 0]):.3f}"
    reg = rng.normal(size=(40, 1))
    paths = write_run_plots(tmp_path / "reg", ["y"], "mae", reg, reg + 0.1, np.zeros_like(reg))
    assert [x.name for x in paths] == [PARITY]  # spread 0 everywhere: nothing to draw residuals against
    paths = write_run_plots(tmp_path / "reg2", ["y"], "mae", reg, reg + 0.1, np.full_like(reg, 0.2))
    assert [x.name for x in paths] == [PARITY, RESIDUALS]


def test_a_member_of_a_combination_leaves_the_warnings_to_the_combination(tmp_path, caplog):
    """Every CSV run with a GNN member printed the domain warning twice (the member's record, then
    the combination's); a member folder records the same files and says nothing."""
    import torch
    from torch_geometric.data import Data

    from siggate.data.base import GraphDataset, TaskInfo
    from siggate.train.record import record_results

    smiles = ["CCO", "CCN", "CCC", "CCCl", "CCBr", "c1ccccc1", "CC(=O)O", "CCOC", "CNC", "CCCC", "OCCO", "NCCN"]
    graphs = [Data(y=torch.tensor([[float(i)]]), smiles=s, idx=i, num_nodes=1) for i, s in enumerate(smiles)]
    info = TaskInfo(name="csv", task="regression", num_tasks=1, metric="mae", target_names=["y"])
    ds = GraphDataset(info=info, splits={"train": graphs[:6], "val": graphs[6:9], "test": graphs[9:]})
    preds = {s: torch.tensor([[float(g.idx) + 0.1] for g in ds.splits[s]]) for s in ("val", "test")}
    caplog.set_level("WARNING", logger="siggate.train")
    (tmp_path / "members.yaml").write_text("{}\n")
    record_results(tmp_path / "member0", ds, preds, None, None, False)
    assert (tmp_path / "member0" / "domain.json").is_file() and not caplog.records
    record_results(tmp_path / "own" / "alone", ds, preds, None, None, False)  # a run of its own: it says it
    assert [r for r in caplog.records if "applicability domain's threshold rests on 3" in r.getMessage()]


def test_evaluate_matches_target_columns_named_in_another_order_by_name(run, capsys, caplog):
    """``--target-col b,a`` for a model of targets ``a,b`` scored column b as target a and column a
    as target b (by position) and said "the names differ", though they did not. Each column is
    now scored as the target it names, with one warning; the scores equal those of ``a,b``."""
    data, out, _ = run
    scores = {}
    for order in ("a,b", "b,a"):
        caplog.clear()
        rc, stdout, err = run_cli(["evaluate", "--checkpoint", str(out), "--data", str(data), "--target-col", order,
                                   "--output", str(out.parent / f"order-{order.replace(',', '')}.json")], capsys)
        assert rc == 0, err
        scores[order] = json.loads(stdout)
        assert not any("names differ" in w for w in scores[order].get("warnings", [])), scores[order]["warnings"]
    assert scores["b,a"]["per_target"] == scores["a,b"]["per_target"]
    assert [r.getMessage() for r in caplog.records if "another order" in r.getMessage()] == [
        "--target-col b,a names the model's targets in another order; each column is scored as the target of its "
        "name (a, b)"]


def test_evaluate_data_counts_the_rows_the_run_fitted(run, capsys, caplog):
    """``evaluate --data`` on the run's own training file printed R2 0.95 with no word that most
    rows were molecules it had fitted (train and val: the fingerprint members refit on both).
    It now counts them (``rows.fitted``, by canonical SMILES) and warns that their scores are in
    sample; a file of other molecules gets no such count."""
    data, out, smiles = run
    labelled = {i for i, r in enumerate(read_output(data)) if r["a"] or r["b"]}
    fitted = {i for i in labelled if i < N_TRAIN + N_VAL}
    caplog.clear()
    rc, stdout, err = run_cli(["evaluate", "--checkpoint", str(out), "--data", str(data), "--target-col", "a,b",
                               "--output", str(out.parent / "own.json")], capsys)
    assert rc == 0, err
    assert json.loads(stdout)["rows"]["fitted"] == len(fitted) > 0
    assert any(f"{len(fitted)} of the {len(labelled)} rows scored are molecules the run fitted" in r.getMessage()
               for r in caplog.records)
    other = out.parent / "test_only.csv"
    rows = read_output(data)
    other.write_text("smiles,a,b\n" + "".join(f"{r['smiles']},{r['a']},{r['b']}\n" for i, r in enumerate(rows)
                                             if i >= N_TRAIN + N_VAL and i in labelled))
    rc, stdout, err = run_cli(["evaluate", "--checkpoint", str(out), "--data", str(other), "--target-col", "a,b",
                               "--output", str(out.parent / "other.json")], capsys)
    assert rc == 0, err
    assert json.loads(stdout)["rows"]["fitted"] == 0


def test_evaluate_data_names_censored_labels_and_labels_in_another_unit(run, capsys):
    """``evaluate --data`` of a ChEMBL-style file scored '>' bounds and labels in another unit as
    measurements, without a word (as training did). The scored rows among them are counted and
    warned about with the first one's line; unscored rows (no label) are not counted."""
    data, out, _ = run
    rows = read_output(data)
    lines = ["smiles;a;b;Relation;Units"]
    for i, r in enumerate(rows):
        relation = "'>'" if i % 6 == 1 else "'='"
        unit = "uM" if i % 9 == 2 else "nM"
        lines.append(f"{r['smiles']};{r['a']};{r['b']};{relation};{unit}")
    scored_rows = [i for i, r in enumerate(rows) if r["a"] or r["b"]]
    censored = [i for i in scored_rows if i % 6 == 1]
    other = [i for i in scored_rows if i % 9 == 2]
    path = out.parent / "qualified.csv"
    path.write_text("\n".join(lines) + "\n")
    rc, stdout, err = run_cli(["evaluate", "--checkpoint", str(out), "--data", str(path), "--target-col", "a,b",
                               "--output", str(out.parent / "qualified.json")], capsys)
    assert rc == 0, err
    res = json.loads(stdout)
    assert res["rows"]["scored"] == len(scored_rows)
    assert (res["rows"]["censored"], res["rows"]["other_unit"]) == (len(censored), len(other)) and censored and other
    common = len(scored_rows) - len(other)
    assert res["warnings"][:2] == [
        f"{len(censored)} of the {len(scored_rows)} rows scored have a censored label, a bound scored as if it were a "
        f"measurement; score the rows whose relation is '=' (first: line {censored[0] + 2}, 'Relation' is '>': the "
        "label is a bound)",
        f"{len(other)} of the {len(scored_rows)} rows scored give their label in another unit than most, so their "
        "errors are off by the units' ratio; convert them, or score one unit's rows (first: line "
        f"{other[0] + 2}, 'Units' is 'uM', not 'nM' as in {common} of the labelled rows)"]


def test_the_molecules_a_run_fitted_are_keyed_once_when_it_trains(run, tmp_path, monkeypatch):
    """``evaluate --data`` keyed every molecule a run fitted again at each call (about 0.3 ms each:
    1 s of a 1.1 s slowdown against a run of 2,651 training molecules, 15 s for 50,000). Training
    writes the keys beside ``splits.csv``; they are read while they are that file's under this
    RDKit, and keyed again, to the same set, when the file was changed, RDKit is another or the
    run predates them."""
    from siggate.data import csvdata
    from siggate.data.base import FITTED_FILE

    _, out, _ = run
    copy = tmp_path / "run"
    shutil.copytree(out, copy)
    (copy / FITTED_FILE).unlink()
    again = csvdata.fitted_molecules(copy)  # a run made before the keys were written
    fitted = [r["smiles"] for r in read_output(out / "splits.csv") if r["split"] in ("train", "val")]
    assert again == {Chem.MolToSmiles(Chem.MolFromSmiles(s)) for s in fitted} and len(fitted) > N_TRAIN

    keyed = []
    real = csvdata.canonical_smiles
    monkeypatch.setattr(csvdata, "canonical_smiles", lambda s: keyed.append(s) or real(s))
    assert csvdata.fitted_molecules(out) == again and keyed == []  # the run's own keys: none keyed again

    monkeypatch.setattr(csvdata, "_rdkit_version", lambda: "another")
    assert csvdata.fitted_molecules(out) == again and keyed == fitted
    monkeypatch.undo()
    shutil.copytree(out, copy, dirs_exist_ok=True)  # keys of another CSV reading (siggate's key may change): again
    kept = json.loads((copy / FITTED_FILE).read_text())
    (copy / FITTED_FILE).write_text(json.dumps({**kept, "reading": kept["reading"] - 1}))
    keyed.clear()
    monkeypatch.setattr(csvdata, "canonical_smiles", lambda s: keyed.append(s) or real(s))
    assert csvdata.fitted_molecules(copy) == again and keyed == fitted
    monkeypatch.undo()

    shutil.copytree(out, copy, dirs_exist_ok=True)  # the keys back, then a train row taken out of splits.csv
    lines = (copy / "splits.csv").read_text().splitlines(keepends=True)
    (copy / "splits.csv").write_text("".join(lines[:1] + lines[2:]))
    assert lines[1].split(",")[1] == fitted[0]
    assert csvdata.fitted_molecules(copy) == again - {Chem.MolToSmiles(Chem.MolFromSmiles(fitted[0]))}


def test_domain_fingerprints_and_similarities_are_the_same_in_chunks(monkeypatch):
    """The training fingerprints are computed a chunk of molecules at a time (a million RDKit
    molecules held at once ran a pretraining out of memory after its last epoch), and the
    nearest-training similarities a few rows at a time when the training set is large: the same
    values either way, unparsable rows (at a chunk's edge too) empty and at similarity 0."""
    import siggate.data.similarity as sim

    smiles = ["CCO", "c1ccccc1", "not a smiles", "CCN", "CC(=O)O", "C1CC1", "CCCl"] * 5
    whole = sim.domain_fingerprints(smiles)
    monkeypatch.setattr(sim, "_FINGERPRINT_CHUNK", 3)
    chunked = sim.domain_fingerprints(smiles)
    assert chunked.shape == whole.shape == (35, sim.N_BITS) and (chunked != whole).nnz == 0
    assert np.diff(chunked.indptr)[2] == 0 and chunked.dtype == np.int32
    query = sim.domain_fingerprints(["CCO", "CCCCl", "xx"])
    at_once = sim.nearest_similarity(query, whole)
    monkeypatch.setattr(sim, "_SIMILARITIES_AT_ONCE", 2 * sim._QUERY_BLOCK)  # the training set 2 rows at a time
    assert np.array_equal(sim.nearest_similarity(query, whole), at_once) and at_once[0] == 1.0 and at_once[2] == 0.0


def test_training_warns_of_a_target_too_short_of_validation_labels_to_bound(tmp_path, capsys, caplog):
    """A target with 2 labelled validation molecules (or none) gets unbounded conformal intervals at
    every recorded coverage; only a later predict --coverage said so. Training warns, naming it."""
    import logging

    from siggate.predictors.conformal import fewest_for

    smiles = nci_smiles(60)
    lines = ["smiles,a,b,split"]
    for i, s in enumerate(smiles):
        split = "train" if i < 40 else "val" if i < 50 else "test"
        b = "" if split == "val" and i > 41 else f"{len(s) / 10:.3f}"  # 2 of the 10 val rows labelled
        lines.append(f"{s},{_nitrogens(s)},{b},{split}")
    data = tmp_path / "d.csv"
    data.write_text("\n".join(lines) + "\n")
    assert fewest_for(0.8) == 4
    with caplog.at_level(logging.WARNING):
        rc, _, err = run_cli(["train", "--data", str(data), "--target-col", "a,b", "--split", "column:split",
                              "--members", "svr", "--out", str(tmp_path / "run"), "--cache-dir", str(tmp_path / "c"),
                              "--no-progress"], capsys)
    assert rc == 0, err
    said = [r.getMessage() for r in caplog.records if "labelled validation molecule" in r.getMessage()]
    assert said == ["target 'b' has 2 labelled validation molecule(s), and coverage 0.8 needs 4: at that coverage and "
                    "above its intervals are infinite; give it more validation labels"]
    cal = json.loads((tmp_path / "run" / "calibration.json").read_text())
    assert cal["summary"]["calibration_molecules"] == {"a": 10, "b": 2}
    # a classifier's sets are never unbounded: with too few molecules they hold every class (helper-177)
    lines = ["smiles,a,b,split"]
    for i, s in enumerate(smiles):
        split = "train" if i < 40 else "val" if i < 50 else "test"
        lines.append(f"{s},{i % 3 == 0:d},{'' if split == 'val' and i > 41 else i % 2},{split}")
    data.write_text("\n".join(lines) + "\n")
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        rc, _, err = run_cli(["train", "--data", str(data), "--target-col", "a,b", "--task", "multilabel", "--split",
                              "column:split", "--members", "svr", "--out", str(tmp_path / "clf"), "--cache-dir",
                              str(tmp_path / "c"), "--no-progress"], capsys)
    assert rc == 0, err
    said = [r.getMessage() for r in caplog.records if "labelled validation molecule" in r.getMessage()]
    assert said == ["target 'b' has 2 labelled validation molecule(s), and coverage 0.8 needs 4: at that coverage and "
                    "above its sets hold every class; give it more validation labels"]
