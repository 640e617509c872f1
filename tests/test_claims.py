"""``siggate analyze claims``: verdict rules on hand-made results, and the results page's claims
table (``benchmarks/RESULTS.md``) is exactly what the command generates from the committed results."""

import json
import re
import shlex
from pathlib import Path

import pytest

from siggate.analysis.claims import (
    BUDGET,
    CONTRADICTED,
    END,
    HOLDS,
    INTERIM,
    INTERIM_AGAINST,
    MOLECULEACE_STUDY,
    NOT_SUPPORTED,
    PRETRAIN_GATE,
    START,
    accuracy_rows,
    answer,
    claims_table,
    comparison_sources,
    config_deviations,
    replace_between_markers,
    study_rows,
)

ROOT = Path(__file__).resolve().parents[1]
#: the page that holds the generated claims table (the README links it)
RESULTS_PAGE = "benchmarks/RESULTS.md"


def _results(per_seed: dict, epochs: int, dataset: str = "zinc") -> dict:
    return {"dataset": dataset, "metric": "mae", "higher_is_better": False, "per_seed": per_seed, "epochs": epochs}


def _rows(per_seed, epochs):
    return {r["claim"]: r for r in accuracy_rows(comparison_sources(Path("r.json"), _results(per_seed, epochs)))}


BEATS = "the elementwise gate beats GraphGPS on zinc (p < 0.05)"
MATCHED_CLAIM = ("on zinc, the elementwise gate's gain comes from gating, not from the extra parameters "
                 "(against `none@matched-ffn`)")
NONE = {str(s): 0.30 + 0.01 * s for s in range(6)}
WIN = {str(s): 0.20 + 0.01 * s + 0.001 * (s % 2) for s in range(6)}  # 0.1 lower every seed: a clear win
MATCHED = {str(s): 0.29 + 0.01 * s - 0.002 * (s % 3) for s in range(6)}


def test_a_clear_win_holds_at_any_budget_and_survives_the_matched_control():
    rows = _rows({"none": NONE, "elementwise": WIN, "none@matched-ffn": MATCHED}, epochs=60)
    assert rows[BEATS]["verdict"] == HOLDS
    matched = rows[MATCHED_CLAIM]
    assert matched["verdict"] == HOLDS and "`elementwise` − `none@matched-ffn` = -0.0875 " in matched["measured"]
    assert rows["ZINC test MAE 0.059"]["verdict"] == BUDGET  # 0.225 after 60 of 2000 epochs
    assert rows["ZINC test MAE 0.059"]["budget"] == "60 of 2000 epochs, 6 seed(s)"


def test_a_win_in_a_campaign_still_running_is_interim_until_its_last_run():
    """zinc16 read "holds" at 3 of its 5 planned pairs (paired t, p = 0.009): a campaign whose
    results.json lists runs still missing is tested at every snapshot, so its win is an interim
    reading (as a gate study's), and holds only once every planned run is in."""
    data = _results({"none": NONE, "elementwise": WIN}, epochs=60)
    running = {**data, "missing": [{"gate": "elementwise", "seed": 6}, {"gate": "none", "seed": 6}]}
    rows = {r["claim"]: r for r in accuracy_rows(comparison_sources(Path("r.json"), running))}
    assert rows[BEATS]["verdict"] == INTERIM and rows[BEATS]["measured"].endswith("; 2 planned run(s) still to come")
    done = {r["claim"]: r for r in accuracy_rows(comparison_sources(Path("r.json"), {**data, "missing": []}))}
    assert done[BEATS]["verdict"] == HOLDS and "still to come" not in done[BEATS]["measured"]
    tie = {**running, "per_seed": {"none": NONE, "elementwise": NONE}}  # no win: the budget decides, as before
    assert {r["claim"]: r for r in accuracy_rows(comparison_sources(Path("r.json"), tie))}[BEATS]["verdict"] == BUDGET
    # a run that failed is resumed by the next call: still to come, as a missing one (it read "holds")
    failed = {**data, "missing": [], "failed": [{"gate": "elementwise", "seed": 6, "returncode": -9, "error": ""}]}
    rows = {r["claim"]: r for r in accuracy_rows(comparison_sources(Path("r.json"), failed))}
    assert rows[BEATS]["verdict"] == INTERIM and rows[BEATS]["measured"].endswith("; 1 planned run(s) still to come")
    # a loss at the full protocol with runs to come is no final verdict either (it read "contradicted")
    loss = {**running, "epochs": 2000, "per_seed": {"none": WIN, "elementwise": NONE}}
    rows = {r["claim"]: r for r in accuracy_rows(comparison_sources(Path("r.json"), loss))}
    assert rows[BEATS]["verdict"] == INTERIM_AGAINST
    tie = {**tie, "epochs": 2000}
    assert {r["claim"]: r for r in accuracy_rows(comparison_sources(Path("r.json"), tie))}[BEATS]["verdict"] == BUDGET
    assert {r["claim"]: r for r in accuracy_rows(comparison_sources(Path("r.json"), {**loss, "missing": []}))}[
        BEATS]["verdict"] == CONTRADICTED
    # the plain answer says it is a reading too (it said "beats" as if final)
    matched = {**running, "per_seed": {"none": NONE, "elementwise": WIN, "none@matched-ffn": MATCHED}}
    text = answer(comparison_sources(Path("r.json"), matched)[0])
    assert text.endswith(" Interim: 2 planned run(s) still to come, and every snapshot tests again, so these are "
                         "readings, not verdicts.")
    assert "Interim" not in answer(comparison_sources(Path("r.json"), {**matched, "missing": []})[0])


def test_an_arm_without_its_runs_yet_still_counts_in_the_holm_family():
    """With headwise at one seed (no test yet) the family shrank to the questions with a p-value,
    so the elementwise rows' adjusted p fell, and a verdict flipped, as another arm's runs came in.
    An untested question counts as p = 1 now, and the family is the same at every snapshot."""
    from siggate.stats import holm

    assert holm([0.01, float("nan"), 0.02]) == pytest.approx([0.02, float("nan"), 0.02], nan_ok=True)
    assert holm([0.01, float("nan"), 0.02], untested_count=True) == pytest.approx([0.03, float("nan"), 0.04],
                                                                                     nan_ok=True)
    gate = {s: v - 0.004 + 0.003 * (int(s) % 3) for s, v in MATCHED.items()}
    early = _rows({"none": NONE, "elementwise": gate, "none@matched-ffn": MATCHED, "headwise": {"0": 0.3}}, 60)
    noisy = {s: v + (0.01 if int(s) % 2 else -0.008) for s, v in NONE.items()}  # a finite p of its own
    later = _rows({"none": NONE, "elementwise": gate, "none@matched-ffn": MATCHED, "headwise": noisy}, 60)
    assert early[MATCHED_CLAIM]["measured"].split("Holm p = ")[1][:6] == \
        later[MATCHED_CLAIM]["measured"].split("Holm p = ")[1][:6]


def test_no_significant_difference_is_never_contradicted_and_a_significant_loss_is_at_full_protocol():
    noise = {str(s): v + (0.004 if s % 2 else -0.004) for s, v in enumerate(NONE.values())}
    for epochs, verdict in ((60, BUDGET), (2000, "not supported")):  # no rejection: never contradicted
        row = _rows({"none": NONE, "elementwise": noise}, epochs)[BEATS]
        assert row["verdict"] == verdict
        assert "95% CI" in row["measured"] and "Holm p" in row["measured"]
    for epochs, verdict in ((60, BUDGET), (2000, CONTRADICTED)):
        worse = {s: v + 0.2 + 0.001 * (int(s) % 2) for s, v in NONE.items()}  # MAE 0.2 higher: clearly worse
        row = _rows({"none": NONE, "elementwise": worse}, epochs)
        assert row[BEATS]["verdict"] == verdict
    hit = {str(s): 0.059 + 0.001 * s for s in range(3)}
    assert _rows({"elementwise": hit}, 2000)["ZINC test MAE 0.059"]["verdict"] == HOLDS
    nan = {"none": {**NONE, "9": None}, "elementwise": {**WIN, "9": None}}  # results.json writes NaN as null
    assert _rows(nan, 60)[BEATS]["verdict"] == HOLDS


def test_a_headline_figure_holds_only_when_its_one_sided_test_rejects():
    """ZINC MAE 0.059 held whenever the mean was within 10%, from one seed too: the one-sided t-test
    that the mean is at most 0.0649 must reject (the guide's rule for a verdict), and the
    p-value is scipy's."""
    from scipy import stats as st

    claim = "ZINC test MAE 0.059"
    close = {str(s): 0.060 + 0.001 * (s % 3) for s in range(6)}
    row = _rows({"elementwise": close}, 2000)[claim]
    p = st.ttest_1samp(list(close.values()), 0.059 * 1.1, alternative="less").pvalue
    assert row["verdict"] == HOLDS and p < 0.05
    assert f"one-sided t-test of mean <= 0.0649 (the paper's 0.059 + 10%): p = {p:.3g}" in row["measured"]
    assert _rows({"elementwise": close}, 60)[claim]["verdict"] == HOLDS  # a rejection holds at any budget
    # a mean inside the tolerance that the seeds do not pin down: not shown (it held before)
    wide = {"0": 0.050, "1": 0.075, "2": 0.055}
    assert sum(wide.values()) / 3 < 0.0649
    assert _rows({"elementwise": wide}, 2000)[claim]["verdict"] == NOT_SUPPORTED
    assert _rows({"elementwise": wide}, 60)[claim]["verdict"] == BUDGET
    # one seed, or seeds that all score the same, make no test and decide nothing
    for one in ({"0": 0.059}, {str(s): 0.06 for s in range(3)}):
        row = _rows({"elementwise": one}, 2000)[claim]
        assert row["verdict"] == BUDGET and "no one-sided t-test of mean <= 0.0649 (" in row["measured"]
    # clearly above the tolerance at the full protocol: contradicted; before it: not at this budget
    high = {str(s): 0.09 + 0.001 * s for s in range(3)}
    assert _rows({"elementwise": high}, 2000)[claim]["verdict"] == CONTRADICTED
    assert _rows({"elementwise": high}, 60)[claim]["verdict"] == BUDGET


def test_one_pair_gives_no_interval_and_no_verdict():
    rows = _rows({"none": {"0": 0.30}, "elementwise": {"0": 0.20}, "none@matched-ffn": {"0": 0.25}}, epochs=60)
    row = rows[BEATS]
    assert row["verdict"] == BUDGET and "(1 pair: no interval or test yet)" in row["measured"]
    uneven = _rows({"none": {"0": 0.30, "1": 0.31}, "elementwise": {"0": 0.20}}, epochs=60)
    assert uneven["ZINC test MAE 0.059"]["budget"] == "60 of 2000 epochs, 1 seed(s)"  # the arm's own seeds
    assert uneven[BEATS]["budget"] == "60 of 2000 epochs, 1 seed(s)"  # shared
    assert "nan" not in row["measured"]


def test_markers():
    text = f"a\n{START}\nold\n{END}\nb\n"
    assert replace_between_markers(text, "| new |") == f"a\n{START}\n| new |\n{END}\nb\n"
    with pytest.raises(ValueError, match="claims:start"):
        replace_between_markers("no markers", "x")


def test_results_page_table_is_generated_from_the_committed_results(monkeypatch):
    readme = (ROOT / RESULTS_PAGE).read_text()
    [cmd] = [line for line in readme.splitlines() if line.startswith("siggate analyze claims ")]
    args = shlex.split(cmd)[3:]
    dirs = args[: args.index("--readme")]
    assert args[args.index("--readme") + 1] == RESULTS_PAGE  # the command refreshes the page it is on
    readme_lines = (ROOT / "README.md").read_text().splitlines()
    assert START not in readme_lines  # one generated table, on the results page
    monkeypatch.chdir(ROOT)
    md, rows = claims_table(dirs)
    assert rows, "no results found"
    section = re.search(re.escape(START) + r"\n(.*)\n" + re.escape(END), readme, re.S).group(1)
    assert section == md.strip(), f"{RESULTS_PAGE} claims table is stale: rerun `{cmd}`"
    for r in rows:  # every row names a committed file that exists
        assert (ROOT / r["source"].strip("`")).is_file()
    json.dumps(rows, default=str)


def test_an_undecided_pair_says_how_large_a_gain_could_hide():
    # diff = elementwise - none = -0.01, +0.01, +0.03: mean 0.01, sd 0.02, n 3;
    # t(0.975, 2) = 4.302653 from tables -> CI 0.01 -/+ 4.302653 * 0.02 / sqrt(3) = -0.039683 .. 0.059683
    none = {"0": 0.30, "1": 0.31, "2": 0.32}
    gated = {"0": 0.29, "1": 0.32, "2": 0.35}
    row = _rows({"none": none, "elementwise": gated}, 60)[BEATS]
    assert "95% CI -0.03968 to 0.05968" in row["measured"]
    # MAE: the largest gain inside the interval is 0.03968, 12.8% of none's mean 0.31
    assert row["measured"].endswith("the interval rules out a gain above 0.03968 (13% of `none`'s mean)")
    worse = {s: v + 0.2 + 0.001 * (int(s) % 2) for s, v in NONE.items()}
    assert _rows({"none": NONE, "elementwise": worse}, 60)[BEATS]["measured"].endswith("rules out any gain")
    assert "rules out" not in _rows({"none": NONE, "elementwise": WIN}, 60)[BEATS]["measured"]  # a win is a win


def test_every_gate_gets_its_rows_and_the_matched_control_only_the_gate_it_matches():
    rows = _rows({"none": NONE, "headwise": WIN, "elementwise": NONE, "none@matched-ffn": MATCHED}, 60)
    assert rows["the headwise gate beats GraphGPS on zinc (p < 0.05)"]["verdict"] == HOLDS
    assert rows[BEATS]["verdict"] == BUDGET  # identical to none: no win
    assert MATCHED_CLAIM in rows and MATCHED_CLAIM.replace("elementwise", "headwise") not in rows  # no params: elementwise
    per_seed = {"none": NONE, "headwise": WIN, "elementwise": NONE, "none@matched-ffn": MATCHED}
    res = {**_results(per_seed, 60), "params": {"none": 100, "headwise": 101, "elementwise": 110, "none@matched-ffn": 110}}
    claims = [r["claim"] for r in accuracy_rows(comparison_sources(Path("r.json"), res))]
    assert claims == ["ZINC test MAE 0.059", BEATS, MATCHED_CLAIM, "the headwise gate beats GraphGPS on zinc (p < 0.05)"]
    res["params"]["none@matched-ffn"] = 101.5  # now within 1% of headwise, 7.7% off elementwise
    claims = [r["claim"] for r in accuracy_rows(comparison_sources(Path("r.json"), res))]
    assert claims == ["ZINC test MAE 0.059", BEATS, "the headwise gate beats GraphGPS on zinc (p < 0.05)",
                      MATCHED_CLAIM.replace("elementwise", "headwise")]


def test_largest_gain_for_a_higher_is_better_metric_and_a_zero_mean():
    # ROC-AUC: diff = gate - none = +0.01, -0.01, +0.03 -> CI -0.039683 .. 0.059683 (see above); the
    # largest gain is the upper end, 0.059683, 8.29% of none's mean 0.72
    none = {"0": 0.70, "1": 0.72, "2": 0.74}
    gate = {"0": 0.71, "1": 0.71, "2": 0.77}
    src = comparison_sources(Path("r.json"), {**_results({"none": none, "elementwise": gate}, 1, "molhiv"),
                                              "metric": "rocauc", "higher_is_better": True})[0]
    row = accuracy_rows([src])[1]
    assert row["measured"].endswith("the interval rules out a gain above 0.05968 (8.3% of `none`'s mean)")
    zero = {"0": 0.0, "1": 0.0, "2": 0.0}
    src = comparison_sources(Path("r.json"), _results({"none": zero, "elementwise": {"0": 0.01, "1": -0.01, "2": 0.03}}, 60))
    assert accuracy_rows(src)[1]["measured"].endswith("rules out a gain above 0.03968")  # no share of a zero mean


def test_a_results_set_off_the_protocol_says_so_in_its_budget():
    from siggate.config import load_config

    cfg = load_config("zinc", ["model.layers=16", "model.gate=none", "train.epochs=60", "train.warmup_epochs=2",
                               "train.seed=3", "train.threads=1"]).to_dict()
    arms = {"none@matched-ffn": {"overrides": ["model.gate=none", "model.param_match=ffn"]}}
    res = {**_results({"none": NONE, "elementwise": WIN}, 60), "config": cfg, "arms": arms}
    assert config_deviations(res) == {"model.layers": {"protocol": 10, "used": 16}}
    rows = {r["claim"]: r for r in accuracy_rows(comparison_sources(Path("r.json"), res))}
    assert rows[BEATS]["budget"] == "60 of 2000 epochs, 6 seed(s); model.layers 16 (protocol 10)"
    protocol = {**res, "config": load_config("zinc", ["train.epochs=60"]).to_dict()}
    assert config_deviations(protocol) == {}
    stated = {**res, "deviations": {"model.layers": {"protocol": 10, "used": 1}}}  # the short-budget runner's
    assert config_deviations(stated) == stated["deviations"]
    # a compare of the paper's setting is measured against that config, and says which it is
    paper = load_config("zinc-paper", ["model.layers=16", "model.gate=none", "train.epochs=60"]).to_dict()
    res = {**res, "config": paper, "command": "siggate compare --config zinc-paper --set model.layers=16 --budget 60"}
    assert config_deviations(res) == {"model.layers": {"protocol": load_config("zinc-paper").model.layers, "used": 16}}
    src = comparison_sources(Path("r.json"), res)[0]
    assert src["deviation"] == f"config zinc-paper, model.layers 16 (protocol {load_config('zinc-paper').model.layers})"
    other = {**res, "config": {**paper, "data": {**paper["data"], "name": "nci5k"}}}
    assert config_deviations(other) == {}  # not a run of the config its command names


def test_the_answer_names_wins_their_fate_against_the_matched_control_and_hidden_gains():
    def ans(per_seed, epochs=60):
        return answer(comparison_sources(Path("r.json"), _results(per_seed, epochs))[0])

    survives = ans({"none": NONE, "elementwise": WIN, "none@matched-ffn": MATCHED})
    assert re.search(r"`elementwise` beats `none` \(Holm p = [0-9.e-]+\) and still beats `none@matched-ffn` "
                     r"\(Holm p = [0-9.e-]+\), the ungated model of its parameter count", survives)
    assert "60 of 2000 epochs, at least 6 seeds per arm" in survives and survives.endswith("is not excluded.")
    capacity = {s: v - 0.0005 * (int(s) % 2) for s, v in WIN.items()}  # the matched control does as well
    assert "and is not shown to beat `none@matched-ffn`" in ans({"none": NONE, "elementwise": WIN,
                                                               "none@matched-ffn": capacity})
    one = ans({"none": NONE, "elementwise": WIN, "none@matched-ffn": {"0": 0.29, "7": 0.3}})  # 1 common seed
    assert "cannot be tested against `none@matched-ffn` yet (1 pair)" in one
    # the hand-computed pair of the test above: gain bound 0.03968, 12.8% of none's 0.31
    text = ans({"none": {"0": 0.30, "1": 0.31, "2": 0.32}, "elementwise": {"0": 0.29, "1": 0.32, "2": 0.35},
                "none@matched-ffn": {"0": 0.30, "1": 0.31, "2": 0.33}}, epochs=2000)
    # raw p 0.48 (see above), two claim questions (against none and the matched control): Holm p 0.96
    assert "`elementwise` is not shown to beat `none` (Holm p = 0.96): its 95% interval rules out a mae gain above " \
           "0.04 (13% of `none`'s mean)" in text
    assert "not excluded" not in text  # at the full protocol
    assert ans({"none": NONE, "elementwise": WIN}) is None  # no matched control: not a study of the question
    null = {str(s): None for s in range(6)}  # results.json writes a diverged run's NaN as null
    assert ans({"none": NONE, "elementwise": WIN, "none@matched-ffn": null}) is None


def test_a_win_the_holm_correction_withholds_is_not_called_a_bound():
    from scipy import stats

    # the gate is better on every seed: the unadjusted interval excludes 0, but with 2 claim
    # questions (against none and against the matched control) Holm doubles the smallest p-value
    none = {str(s): 0.30 + 0.01 * s for s in range(5)}
    gate = {s: v - d for (s, v), d in zip(none.items(), (0.001, 0.012, 0.004, 0.009, 0.003))}
    matched = {s: v + (0.02 if int(s) % 2 else -0.02) for s, v in none.items()}
    raw = stats.ttest_rel(list(gate.values()), list(none.values())).pvalue
    assert raw < 0.05 < 2 * raw
    rows = _rows({"none": none, "elementwise": gate, "none@matched-ffn": matched}, 60)
    assert rows[BEATS]["verdict"] == BUDGET
    assert rows[BEATS]["measured"].endswith("the unadjusted interval holds only gains, but the Holm correction over "
                                            "the set's claim questions withholds the win")


# ------------------------------------------------- verdicts follow from the claims' own tests


def _smoothing(gains: dict, epochs: int, protocol: int = 2000) -> dict:
    """A smoothing result with ``gains {(depth, seed): gain}`` of the elementwise gate."""
    depths = sorted({d for d, _ in gains})
    return {"analysis": "smoothing", "primary_gate": "elementwise", "epochs": epochs, "protocol_epochs": protocol,
            "seeds": sorted({s for _, s in gains}),
            "paired_gains": {"elementwise": [{"depth": d, "seed": s, "gain": g} for (d, s), g in gains.items()]},
            "relative_mad_gain": {"elementwise": {str(d): sum(g for (dd, _), g in gains.items() if dd == d)
                                                  / sum(dd == d for dd, _ in gains) for d in depths}}}


def _smoothing_rows(res: dict) -> dict:
    from siggate.analysis.claims import mechanism_rows

    return {r["claim"]: r for r in mechanism_rows({"smoothing": [(Path("smoothing.json"), res)]})}


SLOWS = "gating slows over-smoothing (more diverse last-layer representations than without the gate)"
PLUS30 = "the diversity gain is +30% on average across 4-16 layers"


def test_a_one_seed_two_depth_smoothing_run_never_holds():
    # the audit's case: 1 epoch, 1 seed, depths 4 and 8, gains far above +30%
    rows = _smoothing_rows(_smoothing({(4, 0): 0.45, (8, 0): 0.52}, epochs=1))
    for claim in (SLOWS, PLUS30):
        assert rows[claim]["verdict"] == BUDGET
        assert "no pairs at depth(s) 12, 16 of the claimed 4-16" in rows[claim]["measured"]
    # two pairs above +30%: the one-sided sign test can only reach 0.25, and is shown
    assert "one-sided sign test p = 0.25" in rows[SLOWS]["measured"]
    # the full range but one seed per depth: 4 pairs, sign test p = 1/16 = 0.0625, not below 0.05
    one_seed = _smoothing({(d, 0): 0.5 + 0.01 * d for d in (4, 8, 12, 16)}, epochs=1)
    assert _smoothing_rows(one_seed)[SLOWS]["verdict"] == BUDGET
    assert "p = 0.0625" in _smoothing_rows(one_seed)[SLOWS]["measured"]
    # a campaign outside depths 4-16 (helper-172: "in 0/0 (depth, seed) pairs at depth(s) , lower in 0")
    shallow = _smoothing_rows(_smoothing({(2, 0): 0.4, (2, 1): 0.5}, epochs=1))[SLOWS]
    assert "in 0/0 (depth, seed) pairs at depths 4-16, where none was measured, lower in 0" in shallow["measured"]
    assert shallow["verdict"] == BUDGET


def test_a_significant_result_over_the_full_range_holds_and_the_p_values_match_scipy():
    from scipy import stats as st

    gains = {(d, s): 0.40 + 0.01 * d + 0.02 * s for d in (4, 8, 12, 16) for s in (0, 1)}
    rows = _smoothing_rows(_smoothing(gains, epochs=3))
    x = list(gains.values())
    p_sign = st.binomtest(8, 8, 0.5, alternative="greater").pvalue  # = 1/256
    p_t = st.ttest_1samp(x, 0.30, alternative="greater").pvalue
    assert p_sign == pytest.approx(1 / 256)
    assert f"one-sided sign test p = {p_sign:.3g}" in rows[SLOWS]["measured"]
    assert f"t-test of mean gain > +30%: p = {p_t:.3g}" in rows[PLUS30]["measured"] and p_t < 0.05
    assert rows[SLOWS]["verdict"] == HOLDS and rows[PLUS30]["verdict"] == HOLDS
    # the same gains of untrained models (--epochs 0: the gate at its initialisation) are measured, not judged
    for untrained in (_smoothing(gains, epochs=0), {**_smoothing(gains, epochs=3), "trained": False}):
        rows0 = _smoothing_rows(untrained)
        assert rows0[SLOWS]["verdict"] == BUDGET and rows0[PLUS30]["verdict"] == BUDGET
        assert "epochs (untrained models, at their initialisation) (protocol: 2000)" in rows0[SLOWS]["measured"]
        assert f"one-sided sign test p = {p_sign:.3g}" in rows0[SLOWS]["measured"]
    # depths outside the claimed 4-16 do not count, and a depth beyond them does not make up a missing one
    partial = {k: v for k, v in gains.items() if k[0] != 12} | {(20, 0): 0.9, (20, 1): 0.9}
    assert _smoothing_rows(_smoothing(partial, epochs=3))[PLUS30]["verdict"] == BUDGET


def test_a_smoothing_claim_without_a_rejection_at_the_full_protocol_is_not_supported():
    from siggate.analysis.claims import NOT_SUPPORTED

    # mean gain +17.5%, spread: the one-sided test of > +30% does not reject, nor does < +30% at 2 seeds
    gains = {(d, s): g + (0.3 if s else -0.3) for d, g in zip((4, 8, 12, 16), (0.02, 0.08, 0.21, 0.39))
             for s in (0, 1)}
    rows = _smoothing_rows(_smoothing(gains, epochs=2000))
    assert rows[PLUS30]["verdict"] == NOT_SUPPORTED
    assert _smoothing_rows(_smoothing(gains, epochs=60))[PLUS30]["verdict"] == BUDGET
    # clearly below +30% at the full protocol: contradicted
    low = {(d, s): 0.05 + 0.01 * s for d in (4, 8, 12, 16) for s in (0, 1)}
    assert _smoothing_rows(_smoothing(low, epochs=2000))[PLUS30]["verdict"] == CONTRADICTED
    # an accuracy comparison without a significant difference, at the full protocol
    noise = {str(s): v + (0.004 if s % 2 else -0.004) for s, v in enumerate(NONE.values())}
    assert _rows({"none": NONE, "elementwise": noise}, 2000)[BEATS]["verdict"] == NOT_SUPPORTED


def test_the_holm_family_is_the_claim_questions_and_matches_a_hand_computation():
    from scipy import stats as st

    from siggate.analysis.claims import claim_comparisons, claim_questions

    headwise = {str(s): 0.30 + 0.01 * s - 0.003 * (s % 3) for s in range(6)}
    per_seed = {"none": NONE, "headwise": headwise, "elementwise": WIN, "none@matched-ffn": MATCHED}
    res = {**_results(per_seed, 60), "params": {"none": 100, "headwise": 101, "elementwise": 110,
                                                "none@matched-ffn": 110}}
    [src] = comparison_sources(Path("r.json"), res)
    # 4 arms make 6 pairs; the claims ask 3 questions: each gate against none, elementwise against its control
    assert claim_questions(src) == [("none", "elementwise"), ("none@matched-ffn", "elementwise"), ("none", "headwise")]
    comps = claim_comparisons(src)
    assert [c["holm_family"] for c in comps] == [3, 3, 3]
    raw = [st.ttest_rel([per_seed[b][k] for k in NONE], [per_seed[a][k] for k in NONE]).pvalue
           for a, b in claim_questions(src)]
    order = sorted(range(3), key=lambda i: raw[i])  # Holm step-down by hand
    expect, running = [0.0] * 3, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (3 - rank) * raw[i]))
        expect[i] = running
    assert [c["p_holm"] for c in comps] == pytest.approx(expect, rel=1e-12)
    row = {r["claim"]: r for r in accuracy_rows([src])}["the headwise gate beats GraphGPS on zinc (p < 0.05)"]
    assert f"Holm p = {expect[2]:.3g}" in row["measured"]
    assert "over the 3 claim questions" in answer(src)


def _gate_test(diff: float, p: float, complete: bool) -> dict:
    """One arm of a ``gate_study``: complete is 20 targets x seeds 0-2; else 9 targets of seed 0.
    The unadjusted p is half the Holm p: the rows must read the Holm one."""
    return {"arm": "gate-elementwise", "base": "gate-none", "n_pairs": 20 if complete else 9, "wins": 14,
            "diff_mean": diff, "ci95": [diff - 0.01, diff + 0.01], "p_wilcoxon": p / 2, "p_holm_wilcoxon": p,
            "run_seeds": [0, 1, 2] if complete else [0], "complete": complete}


@pytest.mark.parametrize("diff, p, complete, verdict", [(-0.02, 0.01, False, INTERIM), (-0.02, 0.01, True, HOLDS),
                                                       (-0.01, 0.08, False, BUDGET), (-0.01, 0.08, True, NOT_SUPPORTED),
                                                       (0.02, 0.01, False, BUDGET), (0.02, 0.01, True, CONTRADICTED),
                                                       (-0.01, None, True, BUDGET)])
def test_the_moleculeace_gate_study_is_judged_by_its_own_wilcoxon_and_is_full_only_when_complete(diff, p, complete,
                                                                                                   verdict):
    test = _gate_test(diff, 1.0 if p is None else p, complete)
    test["p_holm_wilcoxon"] = p
    (row,) = study_rows(Path("mace.json"), {"gate_study": {"planned_targets": 20, "tests": [test]}})
    assert row["verdict"] == verdict
    assert row["claim"] == "the elementwise gate beats GraphGPS on MoleculeACE from scratch (20 public targets, p < 0.05)"
    assert f"Holm p = {'none' if p is None else f'{p:.3g}'}" in row["measured"]
    assert ("20 of 20 targets, seed(s) 0,1,2" if complete else "9 of 20 targets, seed(s) 0 (incomplete") in row["budget"]


def test_a_gate_study_written_before_it_recorded_completeness_or_with_one_pair_decides_nothing():
    old = {k: v for k, v in _gate_test(-0.02, 0.20, True).items() if k not in ("complete", "run_seeds")}
    (row,) = study_rows(Path("mace.json"), {"gate_study": {"tests": [old]}})
    assert row["verdict"] == BUDGET and row["budget"].endswith(
        "20 targets (completeness not recorded: rerun `python benchmarks/moleculeace/run.py --report`)")
    one = {**_gate_test(-0.02, 0.01, False), "n_pairs": 1, "ci95": [float("nan")] * 2}
    (row,) = study_rows(Path("mace.json"), {"gate_study": {"tests": [one]}})
    assert row["verdict"] == BUDGET and "(1 pair(s): no interval or test yet; its `gate_study`)" in row["measured"]


def test_every_moleculeace_study_becomes_rows_in_its_own_words():
    """A study the harness records beside ``gate_study`` (its claim per arm and its budget) gives
    one row per arm, judged by the same rule, naming the study's key; files that are not studies
    give none."""
    test = {**_gate_test(-0.03, 0.004, True), "arm": "pt-attn-elementwise", "base": "pretrained-gine",
            "claim": "the pretrained gated transformer beats the pretrained GINE on MoleculeACE (20 public targets, p < 0.05)"}
    data = {"gate_study": None, "summary": [], "pretrained_vs_gine": {
        "kind": MOLECULEACE_STUDY, "planned_targets": 20, "budget": "fine-tuned from its own pretraining",
        "tests": [test]}}
    (row,) = study_rows(Path("mace.json"), data)
    assert row["claim"] == test["claim"] and row["verdict"] == HOLDS
    assert row["budget"] == "fine-tuned from its own pretraining; 20 of 20 targets, seed(s) 0,1,2"
    assert "`pt-attn-elementwise` − `pretrained-gine` test RMSE" in row["measured"]
    assert row["measured"].endswith("; its `pretrained_vs_gine`)")
    assert study_rows(Path("x.json"), {"tests": [], "runs": {}}) == []
    # the kind, not the shape, makes a study: the same mapping without it gives no row
    del data["pretrained_vs_gine"]["kind"]
    assert study_rows(Path("mace.json"), data) == []


def test_the_pretraining_pair_rows_name_descriptors_parameters_and_seconds():
    comp = {"a": "none", "b": "elementwise", "n_pairs": 189, "diff_mean": -0.004, "ci95": [-0.006, -0.002],
            "p_wilcoxon": 0.001, "p_holm_wilcoxon": 0.001}
    data = {"kind": PRETRAIN_GATE, "corpus": {"molecules": 100000, "source": "moses.csv", "seed": 0}, "comparisons": [comp],
            "runs": [{"label": "none", "gate": "none", "params": 1000, "train_seconds": 50.0, "epochs": 30},
                     {"label": "elementwise", "gate": "elementwise", "params": 1010, "train_seconds": 51.0, "epochs": 30}]}
    (row,) = study_rows(Path("pt.json"), data)
    assert "Wilcoxon over 189 descriptors" in row["measured"] and "one pretraining run per arm" in row["measured"]
    assert "1,010 vs 1,000 parameters, 51 vs 50 training s" in row["measured"]
    assert row["budget"] == "30 epochs on 100000 moses.csv molecules, seed 0"
    # one run per arm: a test over its descriptors compares two trained models, not runs, so it decides
    # nothing either way (it said holds, or contradicted, from one seed)
    for diff, p in ((-0.004, 0.001), (-0.004, 0.3), (0.004, 0.001), (0.0, None)):
        (row,) = study_rows(Path("pt.json"), {**data, "comparisons": [{**comp, "diff_mean": diff, "p_holm_wilcoxon": p}]})
        assert row["verdict"] == BUDGET
    assert study_rows(Path("zinc.json"), _results(NONE, 60)) == []  # a compare results file holds no study
    assert study_rows(Path("pt.json"), {k: v for k, v in data.items() if k != "kind"}) == []


def test_a_seed_without_a_score_does_not_decide_the_headline_figure(tmp_path):
    """One diverged seed (NaN, null in the JSON) made the mean NaN and the ZINC headline claim
    "contradicted", while the budget counted the 7 seeds that scored. The mean is theirs now."""
    none = {str(s): 0.070 + 0.001 * (s % 3) for s in range(8)}
    gated = {str(s): 0.057 + 0.001 * (s % 2) for s in range(8)}
    gated["3"] = None
    (tmp_path / "results.json").write_text(json.dumps({"dataset": "zinc", "metric": "mae", "higher_is_better": False,
                                                        "epochs": 2000, "per_seed": {"none": none, "elementwise": gated}}))
    from siggate.analysis import claims

    [row] = [r for r in claims.claims_table([tmp_path])[1] if r["claim"].startswith("ZINC test MAE")]
    none_scored = tmp_path / "none_scored"
    none_scored.mkdir()
    (none_scored / "results.json").write_text(json.dumps({
        "dataset": "zinc", "metric": "mae", "higher_is_better": False, "epochs": 2000,
        "per_seed": {"none": none, "elementwise": {"0": None, "1": None}}}))
    # no seed scored: no headline row (it read "nan (1 seed, no spread)", contradicted)
    assert not [r for r in claims.claims_table([none_scored])[1] if r["claim"].startswith("ZINC test MAE")]
    scored = [v for v in gated.values() if v is not None]
    assert row["measured"].startswith(f"`elementwise` test mae {claims.fmt(sum(scored) / len(scored))} ±")
    assert "7 seed(s)" in row["budget"] and row["verdict"] == claims.HOLDS


def test_a_results_file_named_twice_counts_once_and_bad_files_are_one_line(tmp_path, capsys):
    """`analyze claims DIR DIR/results.json` listed every row twice; an unreadable results.json and
    a --readme without the markers ended in tracebacks. One row each; one line, exit 2."""
    from siggate.analysis import claims
    from siggate.cli import main

    per_seed = {"none": {str(s): 0.07 + 0.001 * s for s in range(3)},
                "elementwise": {str(s): 0.06 + 0.001 * s for s in range(3)}}
    (tmp_path / "results.json").write_text(json.dumps({"dataset": "zinc", "metric": "mae", "higher_is_better": False,
                                                        "epochs": 60, "per_seed": per_seed}))
    once = claims.claims_table([tmp_path])[1]
    assert claims.claims_table([tmp_path, tmp_path / "results.json"])[1] == once and len(once) >= 2
    readme = tmp_path / "README.md"
    readme.write_text("# no markers\n")
    bad = tmp_path / "bad" / "results.json"
    bad.parent.mkdir()
    bad.write_text("not json")
    capsys.readouterr()
    for argv, why in ((["analyze", "claims", str(tmp_path / "results.json"), "--readme", str(readme), "--out",
                        str(tmp_path / "claims.md")], f"--readme {readme}: the file has no"),
                      (["analyze", "claims", str(tmp_path)], f"{bad}: not a results file this siggate reads"),
                      (["analyze", "claims", str(bad.parent / "deep.json")], "JSON nested too deep to read")):
        (bad.parent / "deep.json").write_text("[" * 100000 + "]" * 100000)  # a RecursionError traceback before
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and why in err, err
    assert readme.read_text() == "# no markers\n"
    assert not (tmp_path / "claims.md").exists()  # (refused after --out was written: helper-176)


def test_a_campaigns_last_layer_mad_is_judged_by_the_smoothing_rules_at_its_one_depth():
    """A campaign's ``mad`` (issue 28's depth study) gives the two smoothing rows: the seeds both
    arms finished are the pairs, the gain is relative to the ungated MAD, and one depth never
    covers the claimed 4-16, so neither row can hold, however the pairs fall."""
    from siggate.config import load_config

    none = {"0": 0.80, "1": 0.82, "2": 0.86, "3": 0.84, "4": 0.88}
    gated = {"0": 0.88, "1": 0.86, "2": 0.87, "3": 0.83}  # seed 4 still running
    cfg = load_config("zinc", ["model.layers=16", "train.epochs=60", "train.warmup_epochs=2"]).to_dict()
    res = {**_results({"none": none, "elementwise": gated}, 60), "config": cfg,
           "missing": [{"gate": "elementwise", "seed": 4}],
           "mad": {"baseline": "none", "checkpoint": "best.pt", "split": "val",
                   "per_seed": {"none": none, "elementwise": gated}}}
    rows = study_rows(Path("c.json"), res)
    assert [r["claim"] for r in rows] == [
        "gating slows over-smoothing (more diverse last-layer representations than without the gate)",
        "the diversity gain is +30% on average across 4-16 layers"]
    slows, thirty = rows
    assert "higher with elementwise in 3/4 (depth, seed) pairs at depth(s) 16," in slows["measured"] and "lower in 1" in slows["measured"]
    assert "one-sided sign test p = 0.312" in slows["measured"]  # binomial: P(X >= 3 | n=4) = 5/16
    mean_gain = sum((gated[s] - none[s]) / none[s] for s in gated) / 4
    assert f"{100 * mean_gain:+.1f}% over 4 (depth, seed) pairs" in thirty["measured"]
    pooled = (sum(gated.values()) / 4 - sum(none[s] for s in gated) / 4) / (sum(none[s] for s in gated) / 4)
    assert f"(per depth: 16: {100 * pooled:+.1f}%)" in thirty["measured"]
    for r in rows:
        assert r["verdict"] == BUDGET and r["budget"] == "60 of 2000 epochs, 4 seed(s); model.layers 16 (protocol 10)"
        assert "no pairs at depth(s) 4, 8, 12 of the claimed 4-16" in r["measured"]
        assert r["measured"].endswith("(best.pt, val split); 1 planned run(s) still to come")
    every = {s: v + 0.2 for s, v in none.items()}  # the gate higher in all 5 pairs, at the full protocol
    full = {**res, "epochs": 2000, "missing": [], "mad": {**res["mad"], "per_seed": {"none": none, "elementwise": every}}}
    slows = study_rows(Path("c.json"), full)[0]
    assert "in 5/5 (depth, seed) pairs" in slows["measured"] and "p = 0.0312" in slows["measured"]
    assert slows["verdict"] == BUDGET  # rejects at depth 16, but the claim is over 4-16
    assert study_rows(Path("c.json"), {k: v for k, v in res.items() if k != "mad"}) == []


def test_p_values_beside_a_verdict_are_not_rounded_across_005_and_a_constant_shift_says_its_test_is_undefined():
    """helper-172: the matched control's Holm p of 0.0498 was written "0.05" beside "still beats";
    a constant shift whose differences carry float noise read "the Holm correction withholds the
    win" (the t-test is undefined, Holm did nothing), the same shift without noise said nothing."""
    from siggate.analysis.claims import EQUAL_PAIRS, UNDEFINED_T
    from siggate.stats import compared_pairs

    none = dict(enumerate([0.75196, 0.74297, 0.74120, 0.77026, 0.75333, 0.73130]))
    gate = dict(enumerate([0.78737, 0.78552, 0.77472, 0.79182, 0.78743, 0.75974]))
    matched = dict(enumerate([0.76961, 0.76576, 0.76441, 0.79484, 0.77740, 0.75838]))
    src = comparison_sources(Path("r.json"), {**_results({"none": none, "elementwise": gate,
                                                         "none@matched-ffn": matched}, 60), "metric": "accuracy",
                                              "higher_is_better": True})[0]
    pair = next(c for c in compared_pairs(src["per_seed"], [("none@matched-ffn", "elementwise"),
                                                            ("none", "elementwise")], True)
                if c["a"] == "none@matched-ffn")
    assert 0.0495 < pair["p_holm"] < 0.05  # the hand-picked case: below 0.05, "0.05" in two digits
    text = answer(src)
    assert "still beats `none@matched-ffn` (Holm p = 0.0498)" in text, text
    shifted = {s: round(v + 0.6, 1) for s, v in {0: 71.3, 1: 71.5, 2: 70.9, 3: 72.1, 4: 71.7, 5: 70.2}.items()}
    none = {0: 71.3, 1: 71.5, 2: 70.9, 3: 72.1, 4: 71.7, 5: 70.2}
    rows = {r["claim"]: r for r in accuracy_rows(comparison_sources(Path("r.json"), {
        **_results({"none": none, "elementwise": shifted}, 60), "metric": "accuracy", "higher_is_better": True}))}
    measured = next(r["measured"] for claim, r in rows.items() if claim.startswith("the elementwise gate beats"))
    assert measured.endswith(UNDEFINED_T) and "withholds" not in measured, measured
    same = {r["claim"]: r for r in accuracy_rows(comparison_sources(Path("r.json"), {
        **_results({"none": none, "elementwise": dict(none)}, 60), "metric": "accuracy", "higher_is_better": True}))}
    assert next(r["measured"] for claim, r in same.items()
                if claim.startswith("the elementwise gate beats")).endswith(EQUAL_PAIRS)


def test_results_under_a_folder_named_runs_are_read_and_a_comparisons_own_runs_are_not(tmp_path, monkeypatch):
    """The README's examples write --out runs/cmp: claims and report skipped every file whose path
    held a 'runs' part, the folder given included, and said there were no results (helper-176)."""
    from siggate.analysis import claims, report

    per_seed = {"none": {str(s): 0.07 + 0.001 * s for s in range(3)},
                "elementwise": {str(s): 0.06 + 0.001 * s for s in range(3)}}
    cmp = tmp_path / "runs" / "cmp"
    (cmp / "runs" / "none" / "seed0").mkdir(parents=True)
    doc = {"dataset": "zinc", "metric": "mae", "higher_is_better": False, "epochs": 60, "per_seed": per_seed,
           "gates": list(per_seed), "comparisons": {}}  # (what report takes for a comparison)
    (cmp / "results.json").write_text(json.dumps(doc))
    (cmp / "runs" / "none" / "seed0" / "results.json").write_text(json.dumps(doc))  # a run's own: not a result
    monkeypatch.chdir(tmp_path)
    def seen(folder):
        return [{k: v for k, v in r.items() if k != "source"} for r in claims.claims_table([folder])[1]]

    rows = seen(Path("runs/cmp"))
    assert len(rows) >= 2 and rows == seen(cmp) == seen(Path("runs"))  # (the run's own file not counted twice)
    assert [p for p, _ in report.find_results([Path("runs/cmp")])["compare"]] == [Path("runs/cmp/results.json")]
    assert report.in_runs(cmp / "runs" / "x" / "results.json", cmp) and not report.in_runs(cmp / "results.json", cmp)


def test_a_campaigns_mad_judges_only_its_gates_and_each_against_none():
    """The smoothing rows of a campaign's ``mad`` judged every arm but the first: the matched control
    (none@matched-ffn, an ungated model) got its own "gating slows over-smoothing" rows, and a
    comparison listing the gate first judged ``none`` as the gate against it."""
    from siggate.config import load_config

    none = {"0": 0.80, "1": 0.82, "2": 0.86, "3": 0.84, "4": 0.88}
    gated = {"0": 0.88, "1": 0.86, "2": 0.87, "3": 0.83, "4": 0.90}
    matched = {s: v + 0.3 for s, v in none.items()}
    cfg = load_config("zinc", ["model.layers=16"]).to_dict()
    arms = {"none": none, "elementwise": gated, "none@matched-ffn": matched}
    res = {**_results(arms, 60), "config": cfg,
           "mad": {"baseline": "none", "checkpoint": "best.pt", "split": "val", "per_seed": arms}}
    rows = study_rows(Path("c.json"), res)
    assert len(rows) == 2 and "higher with elementwise in 4/5" in rows[0]["measured"]
    assert "gain of elementwise over none" in rows[1]["measured"]
    assert not any("matched-ffn" in r["measured"] for r in rows)
    gain = sum((gated[s] - none[s]) / none[s] for s in none) / 5
    assert f"{100 * gain:+.1f}% over 5 (depth, seed) pairs" in rows[1]["measured"]
    # the gate listed first (compare's baseline): the claims' baseline is still none
    first = {"elementwise": gated, "none": none}
    res = {**_results(first, 60), "config": cfg,
           "mad": {"baseline": "elementwise", "checkpoint": "best.pt", "split": "val", "per_seed": first}}
    rows = study_rows(Path("c.json"), res)
    assert len(rows) == 2 and "higher with elementwise in 4/5" in rows[0]["measured"]
    assert f"{100 * gain:+.1f}% over 5 (depth, seed) pairs" in rows[1]["measured"]


def test_a_rank_result_of_several_or_untrained_models_is_named_as_such():
    """A rank.json of --seeds 0,1 (the mean of two models) named the first model alone beside the
    mean, and the claims table's budget read "one trained checkpoint" for models at their
    initialisation (--epochs 0) too; one trained checkpoint still reads so."""
    from siggate.analysis.claims import mechanism_rows

    rank = {"analysis": "rank", "gate": "elementwise", "gate_position": "output", "dataset": "zinc", "split": "val",
            "n_graphs": 20, "trained": False, "before": [[1.0, 1.1]], "after": [[1.2, 1.3]], "frac_heads_higher": 1.0,
            "mean_before": 1.05, "mean_after": 1.25,
            "model_source": ["untrained (initialisation of seed 0)", "untrained (initialisation of seed 1)"]}
    row = mechanism_rows({"rank": [(Path("rank.json"), rank)]})[0]
    assert row["measured"].endswith("20 graphs; mean of 2 models: untrained (initialisation of seed 0); untrained "
                                    "(initialisation of seed 1)")
    assert row["budget"] == "2 untrained models (see measured)"
    one = {**rank, "trained": True, "model_source": ["checkpoint runs/x/best.pt (after epoch 4, best epoch 4)"]}
    row = mechanism_rows({"rank": [(Path("rank.json"), one)]})[0]
    assert row["measured"].endswith("20 graphs; checkpoint runs/x/best.pt (after epoch 4, best epoch 4)")
    assert row["budget"] == "one trained checkpoint (see measured)"
