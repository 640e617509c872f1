"""Split-conformal calibration (``siggate.predictors.conformal``): the finite-sample quantile
against hand computations, and empirical coverage on held-out molecules and on exchangeable
synthetic data within the finite-sample bounds of the nominal coverage (many draws, the
beta-binomial law of split conformal's coverage)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from siggate.predictors.conformal import (
    SIMILARITY_RATE,
    SPREAD_FLOOR,
    Calibration,
    CalibrationError,
    conformal_quantile,
    conformal_rank,
)


def test_a_similarity_calibration_widens_intervals_as_molecules_leave_the_training_set():
    """Given the molecules' nearest-training similarities s, the scores are |y - mean| / exp(-1.75 s)
    whatever the spread, and a new molecule's interval is q exp(-1.75 s): e^1.75 times as wide at
    s = 0 as at s = 1. The file keeps its scale; a format-1 file (no scale) scales by the spread as it
    did, and a similarity calibration given no similarities is refused."""
    y = np.array([[1.0, 0.0], [2.0, np.nan], [3.0, 1.0], [5.0, 2.0]])
    mean = np.array([[1.5, 0.5], [1.0, 0.0], [3.0, 0.0], [4.0, 4.0]])
    sim = np.array([1.0, 0.5, 0.2, 0.0])
    spread = np.array([[9.0, 9.0], [0.1, 0.1], [5.0, 5.0], [1.0, 1.0]])  # not read
    cal = Calibration.fit("regression", ["a", "b"], y, mean, spread, sim)
    assert cal.scale == "similarity" and cal.normalized
    sigma = np.exp(-1.75 * sim)
    assert SIMILARITY_RATE == 1.75 and cal.targets["a"].floor == pytest.approx(math.exp(-1.75))
    assert cal.targets["a"].scores == pytest.approx(sorted(np.abs(y[:, 0] - mean[:, 0]) / sigma))
    assert cal.targets["b"].scores == pytest.approx(sorted(np.abs([0.5, 1.0, 2.0]) / sigma[[0, 2, 3]]))  # row 1: no label
    lower, upper = cal.intervals([[0.0, 0.0]] * 3, cal.row_scale(spread[:3], [1.0, 0.0, 1.7]), 0.6)
    q = cal.targets["a"].quantile(0.6)  # n = 4: rank ceil(3.0) = 3
    wide = [math.exp(-1.75) * q, q, math.exp(-1.75) * q]  # s = 1.7 is clipped to 1
    assert upper[:, 0] == pytest.approx(wide) and upper[1, 0] / upper[0, 0] == pytest.approx(math.exp(1.75))
    assert np.array_equal(lower, -upper)
    with pytest.raises(CalibrationError, match="scales intervals by the similarity to the training molecules"):
        cal.row_scale(spread)
    again = Calibration.from_dict(cal.to_dict())
    assert again == cal and again.to_dict()["format"] == 2 and again.to_dict()["scale"] == "similarity"
    old = {"format": 1, "task": "regression", "normalized": True, "spread_floor": 0.1,
           "targets": {"a": {"scores": [0.5, 1.0, 2.0], "floor": 0.2}}}
    spread_cal = Calibration.from_dict(old)
    assert spread_cal.scale == "spread" and spread_cal.row_scale([[3.0]], [0.9]) == [[3.0]]
    lower, upper = spread_cal.intervals([[1.0], [1.0]], spread_cal.row_scale([[3.0], [0.0]]), 0.5)  # q = 1.0
    assert upper[:, 0] == pytest.approx([1.0 + 3.0, 1.0 + 0.2])
    plain = Calibration.from_dict({**old, "normalized": False, "targets": {"a": {"scores": [1.0], "floor": None}}})
    assert plain.scale == "none" and plain.row_scale([[3.0]], [0.9]) is None
    with pytest.raises(CalibrationError, match="unknown scale 'width'"):
        Calibration.from_dict({**cal.to_dict(), "scale": "width"})
    with pytest.raises(CalibrationError, match=r"not a siggate calibration \(OverflowError"):  # (a traceback)
        Calibration.from_dict({**cal.to_dict(), "format": float("inf")})
    with pytest.raises(CalibrationError, match="a similarity scale of rate 2"):  # another sigma than this siggate's
        Calibration.from_dict({**cal.to_dict(), "similarity_rate": 2.0})
    unfloored = cal.to_dict()
    unfloored["targets"]["a"]["floor"] = None  # would read as intervals of one width
    with pytest.raises(CalibrationError, match="every floor set"):
        Calibration.from_dict(unfloored)
    no_rate = {k: v for k, v in cal.to_dict().items() if k != "similarity_rate"}  # another sigma's file, e.g. 1.5 - s
    with pytest.raises(CalibrationError, match="a similarity scale of rate None"):
        Calibration.from_dict(no_rate)
    with pytest.raises(CalibrationError, match="a format-2 calibration without its scale"):  # not read as the spread
        Calibration.from_dict({k: v for k, v in cal.to_dict().items() if k != "scale"})
    binary = Calibration.fit("binary", ["x"], np.array([[1.0], [0.0]]), np.array([[0.9], [0.2]]), None, sim[:2])
    assert binary.scale == "none"  # sets are not scaled
    import pickle

    pickled = Calibration.__new__(Calibration)  # an estimator's calibration_ pickled before the scale
    pickled.__setstate__({"task": "regression", "targets": spread_cal.targets, "normalized": True})
    assert pickled.scale == "spread" and pickle.loads(pickle.dumps(pickled)) == spread_cal


def test_the_finite_sample_quantile_is_the_ceil_n_plus_one_rank():
    scores = [5.0, 1.0, 4.0, 2.0, 3.0, 9.0, 7.0, 8.0, 6.0]  # n = 9
    assert conformal_rank(9, 0.9) == 9 and conformal_quantile(scores, 0.9) == 9.0  # ceil(10 * 0.9) = 9
    assert conformal_rank(9, 0.5) == 5 and conformal_quantile(scores, 0.5) == 5.0  # ceil(5.0) = 5, not 6
    assert conformal_quantile(scores, 0.8) == 8.0  # ceil(8.0) = 8
    assert conformal_quantile(scores, 0.95) == math.inf  # ceil(9.5) = 10 > n: no finite bound
    assert conformal_rank(99, 0.9) == 90 and conformal_rank(100, 0.9) == 91
    # a coverage so small that (n + 1) * coverage is under the tolerance: rank 1, the smallest score; it
    # was 0, which read the largest (index -1: wider than at any larger coverage) and failed on no scores
    assert conformal_rank(4, 1e-11) == 1 and conformal_quantile([0.1, 0.2, 0.3, 0.4, 5.0], 1e-11) == 0.1
    assert conformal_rank(0, 1e-11) == 1 and conformal_quantile([], 1e-11) == math.inf
    for bad in (0, 1, 1.5, -0.1, "x", None):
        with pytest.raises(CalibrationError, match="coverage must be a number between 0 and 1"):
            conformal_rank(10, bad)


def test_intervals_are_the_quantile_times_the_floored_spread_and_sets_follow_the_scores():
    y = np.array([[1.0], [2.0], [3.0], [np.nan], [5.0]])
    mean = np.array([[1.5], [1.0], [3.0], [0.0], [4.0]])
    spread = np.array([[0.5], [1.0], [0.0], [9.0], [2.0]])
    cal = Calibration.fit("regression", ["a"], y, mean, spread)
    floor = SPREAD_FLOOR * np.median([0.5, 1.0, 0.0, 2.0])  # the labelled rows' spreads
    assert cal.normalized and cal.targets["a"].floor == pytest.approx(floor)
    want = sorted([0.5 / 0.5, 1.0 / 1.0, 0.0 / floor, 1.0 / 2.0])
    assert cal.targets["a"].scores == pytest.approx(want)
    lower, upper = cal.intervals([[10.0], [10.0]], [[2.0], [0.0]], 0.5)  # n = 4: rank ceil(2.5) = 3
    q = want[2]
    assert lower[:, 0] == pytest.approx([10 - 2 * q, 10 - floor * q]) and upper[:, 0] == pytest.approx([10 + 2 * q, 10 + floor * q])
    plain = Calibration.fit("regression", ["a"], y, mean)  # no spread: |y - mean|
    assert not plain.normalized and plain.targets["a"].scores == pytest.approx([0.0, 0.5, 1.0, 1.0])

    labels, prob = np.array([1, 0, 1, 0, 1, 1]), np.array([0.9, 0.2, 0.6, 0.7, 0.95, 0.4])
    binary = Calibration.fit("binary", ["active"], labels[:, None], prob[:, None])
    assert binary.targets["active"].scores == pytest.approx(sorted([0.1, 0.2, 0.4, 0.7, 0.05, 0.6]))
    q = binary.targets["active"].quantile(0.7)  # rank ceil(7 * 0.7) = 5 of 6: 0.6
    assert q == pytest.approx(0.6)
    # {c : 1 - p(c) <= 0.6}: p1 = 0.97 -> {1}; 0.5 -> {0,1}; 0.1 -> {0}
    assert binary.sets([[0.97], [0.5], [0.1]], 0.7) == [["{1}"], ["{0,1}"], ["{0}"]]
    assert binary.sets([[0.97]], 0.99) == [["{0,1}"]]  # rank 7 > 6: every class
    # its own rows at 0.7: scores <= 0.6 on 5 of 6; sets {1}, {0}, {0,1}, {1}, {1}, {0,1}
    assert binary.covered(labels[:, None], prob[:, None], None, 0.7) == {
        "active": {"n": 6, "coverage": pytest.approx(5 / 6), "mean_set_size": pytest.approx(8 / 6)}}
    assert binary.set_members(prob[:, None], 0.7)[:, 0].tolist() == [
        [False, True], [True, False], [True, True], [False, True], [False, True], [True, True]]
    with pytest.raises(CalibrationError, match="multiclass task is not calibrated"):
        Calibration.fit("multiclass", ["c"], labels[:, None], prob[:, None])
    back = Calibration.from_dict(cal.to_dict())
    assert back.targets["a"].scores == cal.targets["a"].scores and back.targets["a"].floor == cal.targets["a"].floor


def _beta_binomial_check(coverages: np.ndarray, n_cal: int, n_test: int, coverage: float) -> dict:
    """Split conformal's coverage on ``n_test`` held-out points, given ``n_cal`` calibration
    points with continuous scores, is BetaBinomial(n_test, k, n_cal + 1 - k) / n_test with
    ``k = ceil((n_cal + 1) coverage)``: its mean ``k / (n_cal + 1)`` lies in ``[coverage,
    coverage + 1 / (n_cal + 1)]``. Returns the observed mean, its bounds and the fraction of
    draws outside the law's central 99% interval."""
    k = conformal_rank(n_cal, coverage)
    law = stats.betabinom(n_test, k, n_cal + 1 - k)
    lo, hi = law.ppf(0.005) / n_test, law.ppf(0.995) / n_test
    se = coverages.std(ddof=1) / math.sqrt(len(coverages))
    return {"mean": float(coverages.mean()), "low": coverage - 4 * se, "high": coverage + 1 / (n_cal + 1) + 4 * se,
            "expected": k / (n_cal + 1), "outside": float(np.mean((coverages < lo - 1e-12) | (coverages > hi + 1e-12)))}


@pytest.fixture(scope="module")
def held_out(tmp_path_factory):
    """A trained model's predictions on 600 molecules it never saw (NCI rows 300-900), with a
    label that is their size plus noise: exchangeable scores for a fixed predictor."""
    import torch

    from siggate.data.chem import smiles_to_graph
    from siggate.data.pe import add_pe
    from siggate.train.members import load_predictor
    from test_predict import nci_smiles, one_thread, shared_checkpoint

    model = load_predictor(shared_checkpoint(tmp_path_factory))
    graphs = add_pe([smiles_to_graph(s) for s in nci_smiles(600, start=300)], rwse_steps=4)
    with one_thread(), torch.no_grad():
        pred = model.predict(graphs).mean.numpy()
    rng = np.random.default_rng(7)
    y = np.array([[g.num_nodes / 10 + 0.3 * rng.standard_normal()] for g in graphs])
    return y, pred


@pytest.mark.parametrize("coverage", [0.8, 0.9])
def test_coverage_on_held_out_molecules_is_within_the_finite_sample_bounds(held_out, coverage):
    """300 random splits of the 600 held-out molecules into 100 calibration and 500 test
    molecules: the mean test coverage lies in [coverage, coverage + 1/101] (within 4 standard
    errors) and the draws follow the beta-binomial law (few outside its 99% interval)."""
    y, pred = held_out
    rng = np.random.default_rng(0)
    coverages = []
    for _ in range(300):
        order = rng.permutation(len(y))
        cal_rows, test_rows = order[:100], order[100:]
        cal = Calibration.fit("regression", ["y"], y[cal_rows], pred[cal_rows])
        coverages.append(cal.covered(y[test_rows], pred[test_rows], None, coverage)["y"]["coverage"])
    res = _beta_binomial_check(np.asarray(coverages), 100, 500, coverage)
    assert res["low"] <= res["mean"] <= res["high"], res
    assert res["outside"] <= 0.03, res
    assert abs(res["mean"] - res["expected"]) < 0.01, res


def test_normalised_intervals_and_prediction_sets_cover_synthetic_exchangeable_data():
    """Heteroscedastic regression with an informative spread (normalised scores), and a binary
    task (prediction sets): 400 draws of 200 calibration and 300 test points each."""
    rng = np.random.default_rng(1)
    reg, sets, widths, plain_widths = [], [], [], []
    for _ in range(400):
        sigma = rng.uniform(0.1, 2.0, size=(500, 1))
        mean = rng.normal(size=(500, 1))
        y = mean + sigma * rng.standard_normal((500, 1))
        cal = Calibration.fit("regression", ["y"], y[:200], mean[:200], sigma[:200])
        got = cal.covered(y[200:], mean[200:], sigma[200:], 0.9)["y"]
        reg.append(got["coverage"])
        widths.append(got["mean_width"])
        plain = Calibration.fit("regression", ["y"], y[:200], mean[:200])
        plain_widths.append(plain.covered(y[200:], mean[200:], None, 0.9)["y"]["mean_width"])
        p = rng.uniform(size=(500, 1))
        labels = (rng.uniform(size=(500, 1)) < p).astype(float)  # calibrated probabilities
        bcal = Calibration.fit("binary", ["active"], labels[:200], p[:200])
        got = bcal.covered(labels[200:], p[200:], None, 0.9)["active"]
        inside = bcal.set_members(p[200:], 0.9)[:, 0]  # the sets themselves: the true class in its set
        assert got["coverage"] == pytest.approx(np.mean(inside[np.arange(300), labels[200:, 0].astype(int)]))
        assert got["mean_set_size"] == pytest.approx(inside.sum(axis=1).mean())
        sets.append(got["coverage"])
    res = _beta_binomial_check(np.asarray(reg), 200, 300, 0.9)
    assert res["low"] <= res["mean"] <= res["high"] and res["outside"] <= 0.03, res
    # an informative spread gives narrower intervals on average than unnormalised ones at the same
    # coverage: 2 q E[sigma] with q the normal 95% point, against twice the 90% point of sigma |Z|
    assert np.mean(widths) == pytest.approx(2 * stats.norm.ppf(0.95) * 1.05, rel=0.03)
    assert np.mean(widths) < 0.9 * np.mean(plain_widths)
    # binary scores take ties (discrete labels): coverage still at least nominal on average
    assert np.mean(sets) >= 0.9 - 4 * np.std(sets) / math.sqrt(len(sets))
    # continuous probabilities: no ties, so not above nominal by more than 1 / (n + 1) either
    assert np.mean(sets) <= 0.9 + 1 / 201 + 4 * np.std(sets) / math.sqrt(len(sets))


def test_the_fewest_calibration_molecules_are_found_without_counting_up_to_them():
    """fewest_for counted n up from 0, 1 / (1 - coverage) steps: predict --coverage 0.999999999
    hung in the warning it writes. It bisects now, and agrees with the count where that ends."""
    import random
    import signal

    from siggate.predictors.conformal import conformal_rank, fewest_for

    def counted(c):
        n = 0
        while conformal_rank(n, c) > n:
            n += 1
        return n

    rng = random.Random(0)
    for c in [0.5, 0.8, 0.9, 0.95, 0.99, 0.999, 0.01, 1 / 3, 2 / 3] + [rng.random() * 0.999 for _ in range(200)]:
        assert fewest_for(c) == counted(c), c
    signal.signal(signal.SIGALRM, lambda *_: pytest.fail("fewest_for counted up again"))
    signal.alarm(10)
    try:
        n = fewest_for(1 - 1e-12)
    finally:
        signal.alarm(0)
    assert n > 1e11 and conformal_rank(n, 1 - 1e-12) <= n < 2e12
