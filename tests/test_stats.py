import math

import numpy as np
import pytest
from scipy import stats

from siggate.stats import compare_paired, mean_std, summarize

A = {0: 0.70, 1: 0.72, 2: 0.69, 3: 0.75, 4: 0.71}
B = {0: 0.74, 1: 0.73, 2: 0.72, 3: 0.74, 4: 0.76}


def _arr(d, seeds):
    return np.array([d[s] for s in seeds])


def test_mean_std():
    m, s = mean_std([1.0, 2.0, 3.0, 4.0])
    assert m == pytest.approx(2.5)
    assert s == pytest.approx(np.std([1, 2, 3, 4], ddof=1))
    assert mean_std([3.0]) == (3.0, 0.0)
    assert mean_std({"a": 1.0, "b": 3.0}) == pytest.approx((2.0, math.sqrt(2)))
    m, s = mean_std([])
    assert math.isnan(m) and math.isnan(s)


def test_compare_pvalues_match_scipy():
    r = compare_paired(A, B, higher_is_better=True)
    seeds = sorted(A)
    a, b = _arr(A, seeds), _arr(B, seeds)
    assert r["n_pairs"] == 5
    assert r["mean_diff"] == pytest.approx(np.mean(b - a))
    assert r["std_diff"] == pytest.approx(np.std(b - a, ddof=1))
    assert r["p_paired_t"] == pytest.approx(stats.ttest_rel(b, a).pvalue)
    assert r["p_wilcoxon"] == pytest.approx(stats.wilcoxon(b - a).pvalue)
    assert r["p_welch"] == pytest.approx(stats.ttest_ind(b, a, equal_var=False).pvalue)
    assert r["better"] == "b"
    assert r["wins"] == 4 and r["losses"] == 1 and r["ties"] == 0


def test_direction_handling():
    # Lower is better (MAE): B has the larger mean, so A is better.
    r = compare_paired(A, B, higher_is_better=False)
    assert r["better"] == "a"
    assert r["wins"] == 1 and r["losses"] == 4
    # p-values are two-sided and direction-free
    r2 = compare_paired(A, B, higher_is_better=True)
    assert r["p_paired_t"] == pytest.approx(r2["p_paired_t"])
    assert r["mean_diff"] == pytest.approx(r2["mean_diff"])
    # swapping roles flips the sign of the difference
    r3 = compare_paired(B, A, higher_is_better=True)
    assert r3["mean_diff"] == pytest.approx(-r2["mean_diff"])
    assert r3["better"] == "a"


def test_common_seeds_and_nan_dropped():
    a = {0: 1.0, 1: 2.0, 2: 3.0, 3: float("nan"), 9: 5.0}
    b = {0: 1.5, 1: 2.0, 2: 4.0, 3: 1.0, 7: 0.0}
    r = compare_paired(a, b, higher_is_better=True)
    assert r["seeds"] == [0, 1, 2]
    assert r["n_pairs"] == 3
    assert r["ties"] == 1 and r["wins"] == 2
    assert r["p_paired_t"] == pytest.approx(stats.ttest_rel([1.5, 2.0, 4.0], [1.0, 2.0, 3.0]).pvalue)
    assert len(r["notes"]) == 2


def test_n1_edge_case():
    r = compare_paired({0: 0.5}, {0: 0.6}, higher_is_better=True)
    assert r["n_pairs"] == 1
    assert r["mean_diff"] == pytest.approx(0.1)
    assert r["std_diff"] == 0.0
    assert r["better"] == "b" and r["wins"] == 1
    for k in ("p_paired_t", "p_wilcoxon", "p_welch"):
        assert math.isnan(r[k])
    assert any("n_pairs < 2" in n for n in r["notes"])


def test_no_common_seeds():
    r = compare_paired({0: 0.5}, {1: 0.6}, higher_is_better=True)
    assert r["n_pairs"] == 0 and r["better"] == "tie"
    assert math.isnan(r["mean_diff"]) and math.isnan(r["p_welch"])


def test_degenerate_differences():
    a = {0: 1.0, 1: 2.0, 2: 3.0}
    r = compare_paired(a, dict(a), higher_is_better=True)
    assert r["better"] == "tie" and r["ties"] == 3
    assert math.isnan(r["p_wilcoxon"]) and math.isnan(r["p_paired_t"])
    assert r["p_welch"] == pytest.approx(1.0)
    # constant shift: paired t undefined, Wilcoxon defined
    b = {k: v + 0.5 for k, v in a.items()}
    r = compare_paired(a, b, higher_is_better=True)
    assert math.isnan(r["p_paired_t"])
    assert r["p_wilcoxon"] == pytest.approx(stats.wilcoxon([0.5, 0.5, 0.5]).pvalue)
    # only one non-zero difference: Wilcoxon undefined
    r = compare_paired(a, {0: 1.0, 1: 2.0, 2: 3.5}, higher_is_better=True)
    assert math.isnan(r["p_wilcoxon"])
    assert not math.isnan(r["p_paired_t"])


def test_summarize():
    C = {0: 0.60, 1: 0.65, 2: 0.62}
    s = summarize({"base": A, "gate": B, "other": C}, baseline="base", higher_is_better=True)
    assert s["baseline"] == "base"
    assert set(s["variants"]) == {"base", "gate", "other"}
    assert s["variants"]["gate"]["mean"] == pytest.approx(np.mean(list(B.values())))
    assert s["variants"]["other"]["std"] == pytest.approx(np.std(list(C.values()), ddof=1))
    assert set(s["comparisons"]) == {"gate", "other"}
    assert s["comparisons"]["gate"] == compare_paired(A, B, True)
    assert s["comparisons"]["other"]["n_pairs"] == 3
    assert s["comparisons"]["other"]["better"] == "a"
    with pytest.raises(KeyError):
        summarize({"x": A}, baseline="y", higher_is_better=True)


# ----------------------------------------------------------------- intervals, effect size, Holm


from siggate.stats import BOOTSTRAP_RESAMPLES, all_pairs, holm, paired_effect, wilcoxon_min_p  # noqa: E402


def test_t_interval_and_effect_size_match_scipy_and_hand_values():
    seeds = sorted(A)
    d = _arr(B, seeds) - _arr(A, seeds)
    r = paired_effect(d)
    ci = stats.ttest_rel(_arr(B, seeds), _arr(A, seeds)).confidence_interval(0.95)
    assert r["diff_mean"] == pytest.approx(np.mean(d))
    assert r["ci95"] == pytest.approx([ci.low, ci.high])
    assert r["cohen_dz"] == pytest.approx(np.mean(d) / np.std(d, ddof=1))
    # by hand: d = [1, 2, 3]: mean 2, sd 1, t_{0.975, 2} = 4.302653, half-width 4.302653 / sqrt(3)
    r = paired_effect([1.0, 2.0, 3.0])
    assert r["cohen_dz"] == pytest.approx(2.0)
    assert r["ci95"] == pytest.approx([2 - 4.302653 / math.sqrt(3), 2 + 4.302653 / math.sqrt(3)], abs=1e-6)


def _exact_bootstrap_ci(d: np.ndarray) -> list[float]:
    """The 2.5th and 97.5th percentiles of the mean of n draws with replacement from ``d``, from
    the exact distribution: each count vector k (sum n) has probability n! / prod(k_i!) / n^n."""
    n = len(d)
    means, probs = [], []

    def walk(i: int, left: int, counts: list[int]) -> None:
        if i == n - 1:
            k = [*counts, left]
            means.append(float(np.dot(k, d)) / n)
            probs.append(math.factorial(n) / math.prod(math.factorial(c) for c in k) / n ** n)
            return
        for c in range(left + 1):
            walk(i + 1, left - c, [*counts, c])

    walk(0, n, [])
    order = np.argsort(means)
    m, cdf = np.asarray(means)[order], np.cumsum(np.asarray(probs)[order])
    assert cdf[-1] == pytest.approx(1.0)
    return [float(m[np.searchsorted(cdf, q)]) for q in (0.025, 0.975)]


def test_bootstrap_interval():
    # two pairs d = [0, 1]: resampled means are 0, 0.5, 1 with probabilities 1/4, 1/2, 1/4
    assert paired_effect([0.0, 1.0])["ci95_bootstrap"] == [0.0, 1.0]
    # identical differences: every resample has the same mean; d_z undefined
    r = paired_effect([0.3, 0.3, 0.3])
    assert r["ci95_bootstrap"] == pytest.approx([0.3, 0.3]) and math.isnan(r["cohen_dz"])
    # against scipy's percentile bootstrap (another generator: agree to Monte-Carlo error)
    d = np.array([0.12, -0.05, 0.3, 0.08, 0.21, -0.02, 0.15, 0.04, 0.11, 0.27])
    ref = stats.bootstrap((d,), np.mean, n_resamples=BOOTSTRAP_RESAMPLES, method="percentile",
                          random_state=np.random.default_rng(1)).confidence_interval
    got = paired_effect(d)["ci95_bootstrap"]
    assert got == pytest.approx([ref.low, ref.high], abs=0.004)
    # against the exact bootstrap distribution of the mean (every resample of the 10 pairs, by its
    # multinomial probability), at 200,000 resamples: a Monte-Carlo error of about 0.0002 at the
    # tails, where the 4th/96th percentiles or resamples of n - 1 pairs move the ends by 0.003 or more
    assert paired_effect(d, resamples=200_000)["ci95_bootstrap"] == pytest.approx(_exact_bootstrap_ci(d), abs=0.001)
    assert got == paired_effect(d)["ci95_bootstrap"]  # fixed seed: reproducible
    # undefined with fewer than two pairs
    one = paired_effect([0.5])
    assert one["diff_mean"] == 0.5 and all(math.isnan(x) for x in one["ci95"] + one["ci95_bootstrap"])


def test_holm_by_hand():
    # sorted: 0.005*4 = 0.02, 0.01*3 = 0.03, 0.03*2 = 0.06, 0.04*1 = 0.04 -> max(0.06, 0.04) = 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])  # capped at 1
    out = holm([0.02, float("nan"), None, 0.04])  # undefined p-values stay undefined and do not count
    assert out[0] == pytest.approx(0.04) and out[3] == pytest.approx(0.04)
    assert math.isnan(out[1]) and math.isnan(out[2])
    assert holm([]) == []


def test_wilcoxon_floor_matches_the_exact_test():
    for n in range(1, 9):
        d = np.arange(1, n + 1, dtype=float)  # all positive, no ties: the most extreme sample
        if n >= 2:
            assert wilcoxon_min_p(n) == pytest.approx(stats.wilcoxon(d, method="exact").pvalue)
    assert wilcoxon_min_p(5) == pytest.approx(0.0625) and wilcoxon_min_p(6) == pytest.approx(0.03125)


def test_all_pairs_holds_every_pair_and_adjusts_over_them():
    C = {0: 0.60, 1: 0.65, 2: 0.62, 3: 0.70, 4: 0.66}
    per_seed = {"base": A, "gate": B, "other": C}
    pairs = all_pairs(per_seed, ["base", "gate", "other"], higher_is_better=True)
    assert [(c["a"], c["b"]) for c in pairs] == [("base", "gate"), ("base", "other"), ("gate", "other")]
    for c in pairs:
        for key in ("a", "b", "diff_mean", "ci95", "cohen_dz", "p_paired_t", "p_wilcoxon", "p_holm"):
            assert key in c
        seeds = sorted(per_seed[c["a"]])
        a, b = _arr(per_seed[c["a"]], seeds), _arr(per_seed[c["b"]], seeds)
        assert c["diff_mean"] == pytest.approx(np.mean(b - a))
        assert c["p_paired_t"] == pytest.approx(stats.ttest_rel(b, a).pvalue)
        assert c["p_wilcoxon"] == pytest.approx(stats.wilcoxon(b, a).pvalue)
        assert any("cannot reach p < 0.05" in n for n in c["notes"])  # 5 pairs
    raw = sorted(c["p_paired_t"] for c in pairs)
    by_hand = [min(1, 3 * raw[0]), max(min(1, 3 * raw[0]), min(1, 2 * raw[1]))]
    by_hand.append(max(by_hand[1], raw[2]))
    assert sorted(c["p_holm"] for c in pairs) == pytest.approx(by_hand)


def test_wilcoxon_floor_counts_only_non_zero_differences():
    # 7 pairs, 2 of them tied (difference 0): the exact test ranks 5 differences, so its
    # floor is 2/2^5 = 0.0625 and the note must say 5, not 7
    a = {s: 1.0 for s in range(7)}
    b = {0: 1.0, 1: 1.0, 2: 1.1, 3: 1.2, 4: 1.3, 5: 1.4, 6: 1.5}
    (c,) = all_pairs({"a": a, "b": b}, ["a", "b"], higher_is_better=True)
    assert c["n_pairs"] == 7 and c["n_nonzero"] == 5
    assert c["wilcoxon_min_p"] == pytest.approx(0.0625)
    d = np.array([b[s] - a[s] for s in range(7)])
    assert stats.wilcoxon(d[d != 0], method="exact").pvalue == pytest.approx(0.0625)
    from siggate.train.compare import wilcoxon_warnings

    (note,) = wilcoxon_warnings({"comparisons": [c]})
    assert note.startswith("with 5 pair(s) of non-zero difference") and "0.0625" in note


@pytest.mark.parametrize("shift", [0.5, 0.6, 0.1, -0.3])
def test_a_constant_shift_is_one_verdict_however_its_decimals_round(shift):
    """71.3 + 0.6 - 71.3 and 72.0 + 0.6 - 72.0 differ in the 14th digit: a shift of 0.6 got paired
    t p = 7.9e-71 and d_z = 3e15 ("holds"), a shift of 0.5 (exact in binary) an undefined t-test.
    Differences equal up to float rounding are one difference."""
    from siggate.stats import compare_paired, paired_effect

    a = {i: v for i, v in enumerate([71.3, 71.5, 70.9, 72.0, 71.1, 70.7])}
    res = compare_paired(a, {i: v + shift for i, v in a.items()}, True)
    assert math.isnan(res["p_paired_t"])
    assert "all differences are identical (zero variance): paired t-test undefined (nan)" in res["notes"]
    assert res["p_wilcoxon"] == pytest.approx(stats.wilcoxon([shift] * 6).pvalue)  # exact: 2 / 2^6
    assert math.isnan(paired_effect([b - a for a, b in zip(a.values(), [v + shift for v in a.values()])])["cohen_dz"])
    noisy = {i: v + shift + 0.01 * (i % 3) for i, v in a.items()}  # a real spread keeps its tests
    res = compare_paired(a, noisy, True)
    assert res["p_paired_t"] == pytest.approx(stats.ttest_rel(list(noisy.values()), list(a.values())).pvalue)


def test_one_large_score_does_not_erase_the_other_seeds_differences():
    """The rounding tolerance was scaled by the largest score of either arm: one seed at 3e9 made
    the others' real differences of 0.01-0.02 count as zero (Wilcoxon "fewer than 2 non-zero
    differences"). The tolerance is each pair's own."""
    a = dict(enumerate([0.20, 0.21, 0.19, 0.22, 0.20, 0.5]))
    b = dict(enumerate([0.18, 0.20, 0.17, 0.21, 0.19, 3e9]))
    res = compare_paired(a, b, False)
    # the exact differences in hundredths (-2, -1, -2, -1, -1 and the large one): scipy on b - a ranked the
    # -0.02s and -0.01s apart by their float noise
    assert res["p_wilcoxon"] == pytest.approx(stats.wilcoxon(np.array([-2, -1, -2, -1, -1, 3e11]) / 100).pvalue)
    assert res["p_paired_t"] == pytest.approx(stats.ttest_rel(list(b.values()), list(a.values())).pvalue)


def test_a_difference_at_float_rounding_is_a_tie_everywhere():
    """One of 6 pairs differing only by rounding: the Wilcoxon test dropped it (p = 0.0625 over
    5), while n_nonzero, wilcoxon_min_p's note and wins/losses counted it as a real loss (6, 0.031
    and no note, 6 losses). One reading of equal now serves them all."""
    from siggate.stats import compared_pairs

    a = {i: 0.3 + i / 100 for i in range(6)}
    b = {i: a[i] + 0.01 * (i + 1) for i in range(5)}
    b[5] = a[5] * (1 + 1e-12)
    c = compared_pairs({"a": a, "b": b}, [("a", "b")], higher_is_better=False)[0]
    assert (c["n_pairs"], c["n_nonzero"], c["wins"], c["losses"], c["ties"]) == (6, 5, 0, 5, 1)
    assert c["wilcoxon_min_p"] == pytest.approx(0.0625) == c["p_wilcoxon"]
    assert any("cannot reach p < 0.05" in n for n in c["notes"])


def test_one_run_is_shown_without_a_spread():
    """An arm of one run read "0.2500 ± 0.0000", as if its runs agreed exactly."""
    from siggate.train.compare import _spread

    assert _spread(0.0, 1) == " (1 run, no spread)"
    assert _spread(0.0123, 3) == " ± 0.0123"


def test_rank_sign_is_the_side_of_the_signed_rank_sums():
    """W+ - W- by hand: zeros dropped, tied |differences| share their average rank."""
    from siggate.stats import rank_sign

    assert rank_sign([0.0, 1.0, -2.0, -3.0]) == -1  # ranks 1, 2, 3: W+ = 1, W- = 5
    assert rank_sign([1.0, 1.0, -2.0]) == 0  # ranks 1.5, 1.5, 3: W+ = 3 = W-
    assert rank_sign([-0.1] * 18 + [5.0, 6.0]) == -1  # the mean is positive, the ranks lean lower
    assert rank_sign([0.0, 0.0]) == 0 and rank_sign([]) == 0


def test_p_text_never_rounds_a_p_value_across_alpha():
    from siggate.stats import p_text

    assert p_text(0.049961) == "0.04996" and float(p_text(0.049961)) < 0.05  # %.3g gave "0.05"
    assert p_text(0.049961, 2) == "0.04996"
    assert p_text(0.0123456) == "0.0123" and p_text(0.0512) == "0.0512" and p_text(0.05) == "0.05"
    assert p_text(None) == "n/a" and p_text(float("nan"), missing="none") == "none"


def test_compare_s_verdict_names_the_seeds_and_means_it_compares(tmp_path):
    """One arm's seed 4 failed: the table averages each arm's own runs (0.90 against 0.95, the
    baseline ahead), the test the four seeds both scored (1.00 against 0.95, the arm ahead). The
    verdict said "`elementwise` has the better mean" beside a table where it has the worse."""
    from siggate.train.compare import GateSpec, aggregate, render_markdown
    from siggate.train.study import StudyRun

    specs = [GateSpec.parse("none"), GateSpec.parse("elementwise")]
    scores = {"none": {0: 1.0, 1: 1.0, 2: 1.0, 3: 1.0, 4: 0.5}, "elementwise": {0: 0.95, 1: 0.96, 2: 0.94, 3: 0.95}}
    runs = []
    for spec in specs:
        for seed in range(5):
            run = StudyRun((spec.label, seed), tmp_path, {}, None, tag=(spec, seed))
            if seed in scores[spec.label]:
                run.state, run.metrics = "done", {"metric": "mae", "dataset": "zinc", "test": scores[spec.label][seed],
                                                  "val": 0.0, "history": []}
            else:
                run.state, run.error = "failed", "exit status 1"
            runs.append(run)
    res = aggregate(runs, specs, list(range(5)))
    res.update(command="siggate compare ...", epochs=1, threads=1)
    (verdict,) = [line for line in render_markdown(res).splitlines() if line.startswith("- Verdict")]
    assert verdict.startswith("- Verdict (lower is better): on the 4 seed(s) both scored (0.9500 against 1.0000), "
                              "`elementwise` has the better mean; the difference is significant")


def test_an_effect_of_rounding_noise_is_no_effect():
    """compared_pairs gave paired_effect the raw differences: with every pair a tie at float
    rounding (0.1 + 0.2 against 0.3) the tests were NaN and said so, but Cohen's d_z was -0.58,
    printed as a medium effect."""
    from siggate.stats import compared_pairs

    c = compared_pairs({"A": {0: 0.1 + 0.2, 1: 0.5, 2: 0.7}, "B": {0: 0.3, 1: 0.5, 2: 0.7}}, [("A", "B")], False)[0]
    assert c["n_nonzero"] == 0 and math.isnan(c["cohen_dz"]) and c["diff_mean"] == 0.0
    real = compared_pairs({"A": {0: 0.30, 1: 0.5, 2: 0.7}, "B": {0: 0.31, 1: 0.52, 2: 0.70}}, [("A", "B")], False)[0]
    assert real["n_nonzero"] == 2 and real["cohen_dz"] == pytest.approx(0.01 / np.std([0.01, 0.02, 0.0], ddof=1))


def test_compare_takes_a_null_score_as_no_number(tmp_path):
    """A run record whose test score is null (JSON's NaN) ended compare's aggregation in a
    TypeError (float(None)); it is a score that is not a number: dropped from the pair with a note."""
    from siggate.train.compare import GateSpec, aggregate
    from siggate.train.study import StudyRun

    specs = [GateSpec.parse("none"), GateSpec.parse("elementwise")]
    runs = []
    for spec in specs:
        for seed in range(3):
            run = StudyRun((spec.label, seed), tmp_path, {}, None, tag=(spec, seed))
            test = None if (spec.label, seed) == ("elementwise", 2) else 1.0 + 0.1 * seed + (spec.label == "none")
            run.state, run.metrics = "done", {"metric": "mae", "dataset": "zinc", "test": test, "val": None,
                                              "history": []}
            runs.append(run)
    res = aggregate(runs, specs, [0, 1, 2])
    assert math.isnan(res["per_seed"]["elementwise"][2]) and math.isnan(res["per_seed_val"]["none"][0])
    (c,) = res["comparisons"]
    assert c["n_pairs"] == 2


def test_a_null_score_is_a_score_that_is_not_a_number():
    """results.json writes a NaN score as null; the paired test read it with float(None), so the
    ablation table of `analyze report` refused siggate's own file as incomplete."""
    from siggate.stats import compare_paired

    c = compare_paired({"0": 1.0, "1": 1.1, "2": None}, {"0": 0.9, "1": 1.0, "2": 0.8}, False)
    assert c["n_pairs"] == 2 and c["seeds"] == ["0", "1"] and c["mean_diff"] == pytest.approx(-0.1)


def test_wilcoxon_ranks_differences_equal_in_decimals_as_ties_and_equal_means_tie():
    """helper-172: percentages of k/N and two-decimal scores differ by amounts equal in decimals but
    not in float (0.01999999999999602 and 0.020000000000010232): Wilcoxon ranked them apart, and
    its p-value moved across 0.05 both ways. The reference is scipy on the exact differences."""
    from scipy import stats as st

    from siggate.stats import compare_paired

    cases = [([70.0, 72.0, 68.0, 76.0, 71.33333333333334, 66.66666666666666, 70.0, 70.0],
              [69.66666666666667, 73.33333333333333, 69.66666666666667, 77.0, 71.0, 67.33333333333333,
               70.33333333333334, 71.0], [-1, 4, 5, 3, -1, 2, 1, 3], 3),  # thirds: differences in units of 1/3
             ([70.23, 70.83, 70.98, 72.42, 72.79, 71.11, 70.1, 70.6],
              [70.21, 70.85, 71.01, 72.45, 72.81, 71.17, 70.11, 70.64], [-2, 2, 3, 3, 2, 6, 1, 4], 100)]
    for a, b, exact, unit in cases:
        c = compare_paired(dict(enumerate(a)), dict(enumerate(b)), True)
        assert c["p_wilcoxon"] == pytest.approx(st.wilcoxon(np.array(exact, float) / unit).pvalue, rel=1e-12)
    assert compare_paired(dict(enumerate(cases[0][0])), dict(enumerate(cases[0][1])), True)["p_wilcoxon"] == 0.0625
    # a pair of large scores ties no other pair's real difference (helper-177: 0.0005 on scores near 1 was made 0
    # beside a tied pair near 1e6)
    c = compare_paired({0: 1e6, 1: 1.0, 2: 2.0, 3: 3.0}, {0: 1e6, 1: 1.0005, 2: 2.001, 3: 3.002}, True)
    assert (c["wins"], c["ties"]) == (3, 1)
    tie = compare_paired({0: 0.1 + 0.2, 1: 1.1 + 2.2}, {0: 0.3, 1: 3.3}, True)
    assert (tie["better"], tie["wins"], tie["losses"], tie["ties"]) == ("tie", 0, 0, 2)
