"""``siggate analyze``: every sub-command end to end on a tiny budget, plus the pieces
whose values can be checked exactly (constant-gate sanity case, gate-parameter formulas,
stable-range logic)."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from ogb.utils.features import get_atom_feature_dims, get_bond_feature_dims
from torch_geometric.data import Data

from siggate.analysis import common, lrsweep, smoothing, synthetic
from siggate.analysis.metrics import numerical_rank, stable_rank
from siggate.cli import main
from siggate.data.base import GraphDataset, TaskInfo

REPO = Path(__file__).resolve().parents[1]

#: a tiny model; smoothing sets model.layers from --depths (a --set of it is refused there)
TINY_ANY_DEPTH = ["--set", "model.dim=16", "--set", "model.heads=2", "--set", "model.pe=none",
                  "--set", "train.batch_size=8", "--threads", "1", "--no-progress"]
TINY = ["--set", "model.layers=1", *TINY_ANY_DEPTH]


def fake_graph(g: torch.Generator, n: int) -> Data:
    atom, bond = get_atom_feature_dims(), get_bond_feature_dims()
    x = torch.stack([torch.randint(0, min(d, 4), (n,), generator=g) for d in atom], 1)
    src = torch.arange(n - 1)
    extra = torch.randint(0, n, (2, 2), generator=g)
    und = torch.cat([torch.stack([src, src + 1]), extra[:, extra[0] != extra[1]]], 1)
    ei = torch.cat([und, und.flip(0)], 1)
    ea = torch.stack([torch.randint(0, min(d, 3), (und.shape[1],), generator=g) for d in bond], 1).repeat(2, 1)
    return Data(x=x, edge_index=ei, edge_attr=ea, y=torch.randn(1, 1, generator=g), num_nodes=n)


@pytest.fixture(scope="module")
def tiny_dataset():
    g = torch.Generator().manual_seed(0)
    sizes = {"train": 24, "val": 12, "test": 8}
    splits = {k: [fake_graph(g, int(torch.randint(3, 10, (1,), generator=g))) for _ in range(n)]
              for k, n in sizes.items()}
    info = TaskInfo(name="nci5k", task="regression", num_tasks=1, metric="mae")
    return GraphDataset(info=info, splits=splits, source="fake")


@pytest.fixture(autouse=True)
def fake_data(monkeypatch, tiny_dataset):
    monkeypatch.setattr(common, "prepare_data", lambda cfg, progress=True: tiny_dataset)


@pytest.fixture(autouse=True)
def _restore_threads():
    n = torch.get_num_threads()  # the commands' --threads must not leak into other tests
    yield
    torch.set_num_threads(n)


def run(*argv) -> None:
    assert main(["analyze", *argv]) == 0


def load(path):
    return json.loads(path.read_text())


# ------------------------------------------------------------------- synthetic


@pytest.mark.parametrize("gate", ["elementwise", "headwise"])
@pytest.mark.parametrize("family", synthetic.FAMILIES)
def test_constant_gate_leaves_stable_rank_unchanged(gate, family):
    for mode in synthetic.ATTENTION_MODES:
        for bias in (-3.0, 0.0, 2.0):
            (e,) = synthetic.one_draw(0, 1, family, mode, [gate], n=10, dim=8, heads=2, noise=0.05, steps=1,
                                      bias=bias, weight_std=0.0)
            np.testing.assert_allclose(e["gated"], e["ungated"], rtol=1e-9)
            assert e["prep_mismatch"] == 0.0  # matched q, k, v: identical ungated head outputs


def test_graph_attention_on_complete_graph_equals_global():
    torch.manual_seed(0)
    x = torch.randn(7, 8, dtype=torch.float64)
    _, att = synthetic.matched_pair(8, 2, "elementwise", 0.0, None, seed=3)
    full = torch.ones(7, 7, dtype=torch.bool)
    b1, a1, g1 = synthetic.head_outputs(att, x, None)
    b2, a2, g2 = synthetic.head_outputs(att, x, full)
    torch.testing.assert_close(b1, b2)
    torch.testing.assert_close(a1, a2)
    # the gated output is the head output times the gate, per head
    torch.testing.assert_close(a1, b1 * g1)
    assert abs(stable_rank(a1[0]) - float(synthetic.stable_rank_batched(a1)[0])) < 1e-9


def test_synthetic_cli(tmp_path, monkeypatch):
    run("synthetic", "--draws", "3", "--nodes", "8", "--dim", "8", "--heads", "2", "--sweep-draws", "2",
        "--biases=-2,2", "--noises", "0.1", "--no-progress", "--out", str(tmp_path))
    res = load(tmp_path / "synthetic.json")
    for k in ("per_draw", "mean_ungated", "mean_gated", "frac_gated_higher", "by_family", "by_gate",
              "sanity_constant_gate", "bias_sweep", "not_raised"):
        assert k in res
    assert len(res["per_draw"]) == 3 * 3 * 2 * 2  # draws x families x attention modes x gates
    assert all(len(e["ungated"]) == 2 and len(e["gated"]) == 2 for e in res["per_draw"])
    assert res["sanity_constant_gate"]["holds"]
    assert set(res["by_gate"]) == {"elementwise", "headwise"}
    assert 0.0 <= res["frac_gated_higher"] <= 1.0
    # the summary's numbers, from the draws themselves (they were only checked to exist)
    u = np.array([np.mean(e["ungated"]) for e in res["per_draw"]])
    g = np.array([np.mean(e["gated"]) for e in res["per_draw"]])
    assert res["mean_ungated"] == pytest.approx(u.mean(), rel=1e-12)
    assert res["mean_gated"] == pytest.approx(g.mean(), rel=1e-12)
    assert res["frac_gated_higher"] == pytest.approx(np.mean(g - u > 1e-9 * np.abs(u)))
    assert res["overall"]["frac_gated_lower"] == pytest.approx(np.mean(u - g > 1e-9 * np.abs(u)))
    assert (tmp_path / "synthetic.png").stat().st_size > 0
    # the weight-std panel: each sweep a line in weight-std order, the Xavier row a star of its own (it was joined
    # onto the sweep's line); the two right panels' titles say which statistic each shows
    drawn = {}
    monkeypatch.setattr(synthetic, "save", lambda fig, path: drawn.setdefault("fig", fig) and path)
    synthetic.plot(res, tmp_path / "again.png")
    axes = drawn["fig"].axes
    lines = [ln for ln in axes[4].get_lines() if ln.get_label() and not ln.get_label().startswith("_")]
    stars = [ln for ln in lines if ln.get_marker() == "*"]
    sweeps = [ln for ln in lines if ln.get_marker() != "*"]
    rows = res["gate_weight_std_sweep"]
    assert len(stars) == len(sweeps) == len({(r["gate"], r["family"]) for r in rows})
    assert all(len(ln.get_xdata()) == 1 and ln.get_linestyle() == "None" for ln in stars)
    stds = sorted({r["gate_weight_std"] for r in rows if r["gate_weight_std"] != "xavier"})
    assert all(len(ln.get_xdata()) == len(stds) for ln in sweeps)
    titles = [a.get_title() for a in axes]
    assert len(set(titles)) == len(titles), titles


# ------------------------------------------------------------------------ rank


def test_rank_untrained_and_checkpoint(tmp_path, capsys):
    run("rank", "--config", "nci5k", *TINY, "--epochs", "0", "--out", str(tmp_path / "a"))
    res = load(tmp_path / "a" / "rank.json")
    assert res["trained"] is False and "untrained" in res["model_source"][0]
    assert len(res["before"]) == 1 and len(res["before"][0]) == 2
    assert "per graph" in res["pooling"]
    # trained for one epoch, then the same model read back from its checkpoint
    run("rank", "--config", "nci5k", *TINY, "--epochs", "1", "--out", str(tmp_path / "b"))
    trained = load(tmp_path / "b" / "rank.json")
    assert trained["trained"] is True
    ckpt = next((tmp_path / "b" / "runs").glob("*/last.pt"))
    run("rank", "--checkpoint", str(ckpt), "--no-progress", "--out", str(tmp_path / "c"))
    again = load(tmp_path / "c" / "rank.json")
    np.testing.assert_allclose(again["after"], trained["after"], rtol=1e-6)
    assert (tmp_path / "c" / "rank.png").exists()
    # the run's folder, as predict and evaluate take it (refused before: "pass best.pt"): its best.pt, here the last
    run("rank", "--checkpoint", str(ckpt.parent), "--no-progress", "--out", str(tmp_path / "folder"))
    assert load(tmp_path / "folder" / "rank.json")["after"] == again["after"]
    members = tmp_path / "members"  # a run of members: no GNN run of its own to measure
    members.mkdir()
    (members / "predictor.json").write_text(json.dumps({"format": 1, "kind": "combination"}))
    capsys.readouterr()
    assert main(["analyze", "rank", "--checkpoint", str(members), "--out", str(tmp_path / "m")]) == 2
    assert capsys.readouterr().err == (f"siggate analyze: error: --checkpoint {members} holds no GNN run of its own (a "
                                       "run of members, or no run): give a GNN member's folder (e.g. RUN/member0) or "
                                       "its best.pt\n")
    run("rank", "--checkpoint", str(ckpt), "--max-graphs", "4", "--no-progress", "--out", str(tmp_path / "c4"))
    assert load(tmp_path / "c4" / "rank.json")["n_graphs"] <= 4 < again["n_graphs"]  # (the cut was ignored)
    # flags that --checkpoint ignored (its own config, seed and epochs were measured): refused
    capsys.readouterr()
    assert main(["analyze", "rank", "--checkpoint", str(ckpt), "--set", "model.dim=999", "--epochs", "7", "--seeds",
                 "3", "--no-progress", "--out", str(tmp_path / "d")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--set, --epochs, --seeds with --checkpoint: the checkpoint is " \
        "measured as it was trained" in err and not (tmp_path / "d" / "rank.json").exists()


def test_analysis_values_out_of_range_are_refused_in_one_line(tmp_path, capsys):
    """smoothing --rank-tol -1 counted every direction (every rank d, exit 0); mad --batch-size 0
    ended in a traceback."""
    for argv, why in ((["smoothing", "--rank-tol", "-1", "--out", str(tmp_path / "s")], "--rank-tol -1: give a "
                       "relative singular-value threshold between 0 and 1"),
                      (["mad", str(tmp_path), "--batch-size", "0"], "--batch-size must be >= 1, got 0")):
        capsys.readouterr()
        assert main(["analyze", *argv]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and why in err and "Traceback" not in err, err


def test_rank_no_gate_is_unchanged(tmp_path):
    run("rank", "--config", "nci5k", *TINY, "--set", "model.gate=none", "--epochs", "0", "--out", str(tmp_path))
    res = load(tmp_path / "rank.json")
    np.testing.assert_allclose(res["before"], res["after"])
    assert res["gate_mean"] is None


@pytest.mark.parametrize("analysis", ["rank", "entropy"])
def test_head_analyses_of_a_model_without_attention_are_refused_before_training(tmp_path, capsys, analysis):
    """``analyze rank/entropy`` on the --data recipe's GNN (model.attn: false) trained it and then
    failed with "TypeError: 'NoneType' object is not subscriptable"; refused in one line, before
    any data is read, and no run is left."""
    extra = ["--gates", "none"] if analysis == "entropy" else []
    rc = main(["analyze", analysis, "--config", "nci5k", *TINY, *extra, "--set", "model.attn=false", "--epochs", "1",
               "--out", str(tmp_path / "a")])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert (f"analyze {analysis} measures the attention heads, and this model has no attention branch (model.attn: "
            "false, the --data recipe's GNN); use a model trained with --set model.attn=true") in err
    assert not (tmp_path / "a" / "runs").exists()


def test_the_attention_fix_on_a_pretrained_recipe_names_training_from_scratch():
    """On the csv recipe, fine-tuned from pretrained weights without attention, 'add --set
    model.attn=true' led into the architecture refusal of those weights (helper-164): the fix
    names --set train.init=none too, and only there."""
    from siggate.analysis.common import require_attention
    from siggate.config import load_config
    from siggate.config_args import CLIError

    sets = ["data.csv=x.csv", "data.target_cols=[y]", "model.attn=false"]
    for extra, tail in (([], " --set train.init=none (the pretrained weights have no attention)"),
                        (["train.init=none"], "")):
        cfg = load_config("csv", [*sets, *extra])
        with pytest.raises(CLIError) as exc:
            require_attention(cfg, "rank")
        assert str(exc.value).endswith("use a model trained with --set model.attn=true" + tail)


# ------------------------------------------------------------------- smoothing


def test_smoothing_cli_and_reuse(tmp_path, capsys):
    args = ["smoothing", "--config", "nci5k", *TINY_ANY_DEPTH, "--depths", "1,2", "--gates", "none,elementwise",
            "--epochs", "1", "--out", str(tmp_path)]
    run(*args)
    res = load(tmp_path / "smoothing.json")
    assert set(res["per_depth"]) == {"1", "2"}
    for L in ("1", "2"):
        for g in ("none", "elementwise"):
            e = res["per_depth"][L][g]
            assert len(e["mad"]) == len(e["dirichlet"]) == len(e["rank"]) == int(L) + 1
            assert all(0.0 <= v <= 2.0 for v in e["mad"])
    gains = res["relative_mad_gain"]["elementwise"]
    assert res["mean_relative_mad_gain"] == pytest.approx(np.mean(list(gains.values())))
    for L in ("1", "2"):  # the gain of the gated model's last-layer MAD over the ungated one's, with its sign
        base = res["per_depth"][L]["none"]["mad"][-1]
        assert gains[L] == pytest.approx((res["per_depth"][L]["elementwise"]["mad"][-1] - base) / base, rel=1e-9)
    t = res["gain_tests"]["elementwise"]
    assert t["n_pairs"] == 2 and t["n_positive"] + t["n_negative"] <= 2
    assert "mad" in res["definitions"] and "dirichlet" in res["definitions"]
    assert (tmp_path / "smoothing.png").exists()
    # rerun: the finished runs are reused, with the same numbers
    mtime = (tmp_path / "runs" / "L2-none-s0" / "last.pt").stat().st_mtime
    run(*args)
    assert (tmp_path / "runs" / "L2-none-s0" / "last.pt").stat().st_mtime == mtime
    assert load(tmp_path / "smoothing.json")["mean_relative_mad_gain"] == pytest.approx(res["mean_relative_mad_gain"])
    # a depth or seed given twice is one run: each copy was another pair of the sign test (a 'holds' of nothing)
    run(*[a if a != "1,2" else "1,2,2,1" for a in args], "--seeds", "0,0")
    again = load(tmp_path / "smoothing.json")
    assert (again["depths"], again["seeds"], again["gain_tests"]["elementwise"]["n_pairs"]) == ([1, 2], [0], 2)
    # runs of all the graphs are not those of --max-graphs 30: they were reused, their val and models
    # in a smoothing.json that said max_graphs 30; the conflict is one line (a RuntimeError traceback)
    capsys.readouterr()
    assert main(["analyze", *args, "--max-graphs", "30"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "holds a run of another config (data.max_graphs" in err, err
    assert "3 more run(s) of this --out likewise" in err and "delete it or choose another --out" in err
    assert load(tmp_path / "smoothing.json")["mean_relative_mad_gain"] == pytest.approx(res["mean_relative_mad_gain"])


def test_gain_tests():
    t = smoothing.gain_tests(np.array([0.40, 0.42, 0.44, 0.46, 0.48, 0.50, 0.52, 0.54]))
    assert t["n_positive"] == 8 and t["p_sign"] == pytest.approx(2 / 2**8)
    assert t["p_t_vs_target"] < 0.05  # mean 0.47 vs 0.30
    # by hand: t = (0.47 - 0.30) / (s / sqrt 8), s the deviations' root mean square over 7 (0.0168 / 7), two-sided
    from scipy.stats import t as student

    stat = 0.17 / np.sqrt(0.0168 / 7 / 8)
    assert t["p_t_vs_target"] == pytest.approx(2 * student.sf(stat, 7), rel=1e-9)
    assert t["mean"] == pytest.approx(0.47) and smoothing.gain_tests(np.array([0.1, -0.2, 0.0]))["n_positive"] == 1


def test_numerical_rank_batched_matches_metrics():
    torch.manual_seed(0)
    X = torch.randn(3, 6, 5) @ torch.diag(torch.tensor([1.0, 1.0, 1e-5, 1.0, 1e-1]))
    got = smoothing.numerical_rank_batched(X, 1e-3)
    assert got.tolist() == [numerical_rank(x, rel_tol=1e-3) for x in X]


# --------------------------------------------------------------------- entropy


def test_entropy_cli(tmp_path):
    run("entropy", "--config", "nci5k", *TINY, "--epochs", "2", "--out", str(tmp_path))
    res = load(tmp_path / "entropy.json")
    for g in ("none", "elementwise"):
        h = res["per_gate"][g]
        assert h["epoch"] == [0, 1, 2]
        ent = np.asarray(h["entropy"])
        assert ent.shape == (3, 1, 2)  # epochs + 1, layers, heads
        assert np.all(ent >= 0) and np.all(np.asarray(h["normalized_entropy"]) <= 1 + 1e-6)
    assert res["per_gate"]["none"]["gate_mean"] is None
    assert "collapsed_heads" in res["summary"]["elementwise"]
    assert (tmp_path / "entropy.png").exists()


def test_entropy_tracker_matches_train_loop(tmp_path, tiny_dataset):
    """The analysis' own epoch loop follows the protocol of ``siggate train`` exactly."""
    from siggate.analysis import entropy
    from siggate.config import load_config
    from siggate.train.pipeline import train

    torch.set_num_threads(1)  # restored by _restore_threads
    cfg = common.variant(load_config("nci5k", [v for v in TINY[1:-3:2]]), epochs=2)
    m = train(cfg, tmp_path, progress=False, dataset=tiny_dataset)
    # measuring between epochs must not disturb the run (no draws from the global RNG)
    h = entropy.train_tracked(cfg.model, cfg.train, tiny_dataset, tiny_dataset.val,
                              lambda model: entropy.entropy_stats(model, tiny_dataset.val), progress=False)
    np.testing.assert_allclose(h["val"][1:], [r["val"] for r in m["history"]], rtol=1e-6)
    np.testing.assert_allclose(h["train_loss"][1:], [r["train_loss"] for r in m["history"]], rtol=1e-6)


# ----------------------------------------------------------------------- lr sweep


def test_widest_range():
    lrs = [1e-4, 3e-4, 1e-3, 3e-3, 1e-2]
    r = lrsweep.widest_range(lrs, [False, True, True, True, False])
    assert r["ratio"] == pytest.approx(10.0) and r["min_lr"] == 3e-4 and not r["at_sweep_edge"]
    assert lrsweep.widest_range(lrs, [True, False, True, False, True])["ratio"] == 1.0
    assert lrsweep.widest_range(lrs, [False] * 5)["ratio"] == 0.0
    assert lrsweep.widest_range(lrs, [True] * 5)["ratio"] == pytest.approx(100.0)


def test_diverged_rules():
    ok = {"val": 1.0, "skipped_batches": 0, "history": [{"train_loss": 1.0}, {"train_loss": 0.8}]}
    assert not lrsweep.diverged(ok)
    assert lrsweep.diverged({**ok, "skipped_batches": 2})
    assert lrsweep.diverged({**ok, "val": float("nan")})
    assert lrsweep.diverged({**ok, "history": [{"train_loss": 1.0}, {"train_loss": 0.4}, {"train_loss": 0.9}]})
    assert lrsweep.within(1.05, 1.0, 0.1, False) and not lrsweep.within(1.2, 1.0, 0.1, False)
    assert lrsweep.within(0.95, 1.0, 0.1, True) and not lrsweep.within(0.8, 1.0, 0.1, True)


def test_lr_sweep_cli(tmp_path):
    run("lr-sweep", "--config", "nci5k", *TINY, "--lrs", "1e-3,1e-2", "--epochs", "1", "--out", str(tmp_path))
    res = load(tmp_path / "lrsweep.json")
    assert res["lrs"] == [1e-3, 1e-2]
    for g in ("none", "elementwise"):
        assert len(res["per_lr"][g]) == 2
        assert set(res["per_lr"][g][0]) == {"lr", "score", "score_std", "scores", "diverged", "n_diverged",
                                            "skipped_batches", "final_train_loss", "loss_spread", "curves"}
        assert res["stable_range"][g]["ratio"] in (0.0, 1.0, pytest.approx(10.0))
        assert res["no_divergence_range"][g]["ratio"] in (0.0, 1.0, pytest.approx(10.0))
        # each rate's score is its run's val; the best is the lowest MAE among rates that did not diverge
        for p in res["per_lr"][g]:
            run_val = json.loads((tmp_path / "runs" / f"lr{lrsweep.rate_text(p['lr'])}-{g}-s0" / "metrics.json").read_text())["val"]
            assert p["score"] == pytest.approx(run_val, rel=1e-12)
        fine = [p["score"] for p in res["per_lr"][g] if p["score"] is not None and not any(p["diverged"])]
        assert res["best_score"][g] == (min(fine) if fine else None)
        assert res["stable_range"][g]["within"] == [
            not any(p["diverged"]) and lrsweep.within(p["score"], res["best_score"][g], res["tolerance"], False)
            for p in res["per_lr"][g]]
    assert (tmp_path / "runs" / "lr0.01-none-s0" / "metrics.json").exists()
    assert (tmp_path / "lrsweep.png").exists()


# --------------------------------------------------------------------- overhead


def test_overhead_param_formulas(tmp_path):
    run("overhead", "--config", "nci5k", *TINY_ANY_DEPTH, "--set", "model.layers=2", "--batches", "2", "--reps", "2",
        "--warmup", "1", "--out", str(tmp_path))
    res = load(tmp_path / "overhead.json")
    d, H, L = 16, 2, 2
    extra = res["param_overhead_abs"]
    assert extra["none"] == 0
    assert extra["elementwise"] == L * (d * d + d)
    assert extra["headwise"] == L * (d * H + H)
    for g in ("headwise", "elementwise"):
        assert res["param_overhead"][g] == pytest.approx(extra[g] / res["params"]["none"])
        assert res["formula_ok"][g]
        assert g in res["time_overhead"] and res["n_measurements"][g] == 2 * 2
    assert res["time_overhead"]["none"] == 0.0
    assert (tmp_path / "overhead.png").exists()
    # four timings judge nothing (helper-176: one or two 'held', a gated model 24% faster from noise)
    from siggate.analysis.report import INCONCLUSIVE, MIN_TIMINGS, verdict_overhead

    timed = [r for r in verdict_overhead(res) if "wall-clock" in r["claim"]]
    assert len(timed) == 2 and {r["verdict"] for r in timed} == {INCONCLUSIVE} and MIN_TIMINGS == 20
    assert all(r["rule"].startswith("with at least 20 paired measurements: ") for r in timed)
    sure = {**res, "n_measurements": {k: 20 for k in res["n_measurements"]},
            "time_ratio_ci95": {k: [0.99, 1.01] for k in res["time_ratio_ci95"]}}
    assert {r["verdict"] for r in verdict_overhead(sure) if "wall-clock" in r["claim"]} == {"holds"}


# ----------------------------------------------------------------------- report


def test_report(tmp_path):
    run("synthetic", "--draws", "2", "--nodes", "6", "--dim", "8", "--heads", "2", "--sweep-draws", "1",
        "--biases", "0", "--noises", "0.1", "--attention", "global", "--families", "er,cycle", "--no-progress", "--out", str(tmp_path / "syn"))
    run("overhead", "--config", "nci5k", *TINY, "--batches", "1", "--reps", "1", "--warmup", "0",
        "--out", str(tmp_path / "ovh"))
    cmp = tmp_path / "cmp"  # a `siggate compare` result is rendered as an ablation row
    cmp.mkdir()
    (cmp / "results.json").write_text(json.dumps({
        "metric": "mae", "gates": ["none", "elementwise"], "baseline": "none", "epochs": 2,
        "per_seed": {"none": {"0": 1.0}, "elementwise": {"0": 0.9}}, "n": {"none": 1, "elementwise": 1},
        "mean": {"none": 1.0, "elementwise": 0.9}, "std": {"none": 0.0, "elementwise": 0.0},
        "val_mean": {"none": 1.1, "elementwise": 1.0}, "params": {"none": 10, "elementwise": 12},
        "comparisons": {"elementwise": {"p_paired_t": None}}, "config": {"model": {"gate_bias_init": 0.0}}}))
    out = tmp_path / "report" / "REPORT.md"
    run("report", str(tmp_path / "syn"), str(tmp_path / "ovh"), str(cmp), "--out", str(out))
    text = out.read_text()
    assert "## Summary" in text and "stable rank" in text and "extra parameters" in text
    assert "](../syn/synthetic.png)" in text and "](../ovh/overhead.png)" in text
    assert "## Ablations" in text and "| elementwise | ? | mae | 1 | 0.9 |" in text and "-0.1" in text
    assert text.count("**holds**") + text.count("**does not hold**") + text.count("**inconclusive at this budget**") >= 4


def test_overheads_help_lists_no_flag_it_refuses(capsys):
    """`analyze overhead --help` described --epochs and --seeds, which it refuses (it trains nothing)."""
    with pytest.raises(SystemExit):
        main(["analyze", "overhead", "--help"])
    text = capsys.readouterr().out
    assert "--gates" in text and "--reps" in text and "--epochs" not in text and "--seeds" not in text


def test_report_without_results_fails(tmp_path):
    assert main(["analyze", "report", str(tmp_path), "--out", str(tmp_path / "r.md")]) == 2


@pytest.mark.parametrize("command, name", [("report", "REPORT.md"), ("claims", "CLAIMS.md")])
def test_a_report_into_a_folder_is_refused_and_into_a_new_folder_is_written(tmp_path, capsys, command, name):
    """`--out` an existing folder ended in an IsADirectoryError traceback (after the report was
    made); claims' `--out new/c.md` failed with a bare errno where report made the folder."""
    (tmp_path / "d").mkdir()
    capsys.readouterr()
    assert main(["analyze", command, str(REPO / "benchmarks" / "results" / "analysis"), "--out", str(tmp_path / "d")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and f"--out {tmp_path / 'd'} is a folder; give a file name, e.g. " \
        f"{tmp_path / 'd' / name}" in err, err
    assert main(["analyze", command, str(REPO / "benchmarks" / "results" / "analysis"), "--out", str(tmp_path / "new" / name)]) == 0
    assert (tmp_path / "new" / name).read_text().startswith(("#", "|"))
    (tmp_path / "empty").mkdir()  # nothing to report: refused, and no folder made for it
    assert main(["analyze", command, str(tmp_path / "empty"), "--out", str(tmp_path / "none" / name)]) == 2
    assert not (tmp_path / "none").exists()
    # written again over its own earlier file; a file that is not one (a result it reads, a CSV) was replaced too
    assert main(["analyze", command, str(REPO / "benchmarks" / "results" / "analysis"), "--out", str(tmp_path / "new" / name)]) == 0
    for theirs, text in (("synthetic.json", '{"analysis": "synthetic"}\n'), ("mols.csv", "smiles,y\nCCO,1\n")):
        (tmp_path / theirs).write_text(text)
        capsys.readouterr()
        assert main(["analyze", command, str(REPO / "benchmarks" / "results" / "analysis"), "--out",
                     str(tmp_path / theirs)]) == 2
        err = capsys.readouterr().err
        assert err.strip().splitlines() == [
            f"siggate analyze: error: --out {tmp_path / theirs} holds a file that is not the "
            f"{'report' if command == 'report' else 'claims table'}, which writing it would replace: give a new file "
            f"name, e.g. {tmp_path / name}"], err
        assert (tmp_path / theirs).read_text() == text


def test_report_names_a_result_file_it_cannot_read(tmp_path, caplog):
    """A damaged rank.json beside a good result was skipped without a word: the report left that
    analysis out (and one folder of damaged files only read as 'no analysis results')."""
    import shutil

    folder = tmp_path / "an"
    shutil.copytree(REPO / "benchmarks" / "results" / "analysis", folder)
    (folder / "rank.json").write_text('{"x":')
    assert main(["analyze", "report", str(folder), "--out", str(tmp_path / "R.md")]) == 0
    said = [r.getMessage() for r in caplog.records if "cannot be read as JSON" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith(f"{folder / 'rank.json'} cannot be read as JSON (") and said[0].endswith(
        "), so it is left out: restore it, or run its analysis again")


@pytest.mark.parametrize("argv, message", [
    (["rank", "--config", "nci5k", "--batch-size", "0"], "--batch-size must be >= 1, got 0"),
    (["rank", "--config", "nci5k", "--epochs", "-1"], "--epochs must be >= 0, got -1"),
    (["entropy", "--config", "nci5k", "--epochs", "0"], "--epochs must be >= 1, got 0"),
    (["entropy", "--config", "nci5k", "--set", "model.attn_type=performer"],
     "only model.attn_type=full forms (performer never builds them); pass --set model.attn_type=full"),
    (["synthetic", "--heads", "0"], "--heads must be >= 1, got 0"),
    # a list of nothing: an empty analysis written over the last one's results, or a traceback
    (["entropy", "--config", "nci5k", "--gates", ","], "--gates: ',' names nothing; give at least one"),
    (["lr-sweep", "--config", "nci5k", "--lrs", ","], "--lrs: ',' names nothing; give at least one"),
    # named by the config key they set (model.layers, train.lr), after the dataset was read
    (["smoothing", "--config", "nci5k", "--depths", "0,4"], "--depths: '0' is not a number above 0; give whole numbers >= 1"),
    (["lr-sweep", "--config", "nci5k", "--lrs", "0,1e-3"], "--lrs: '0' is not a number above 0; give finite numbers"),
    (["lr-sweep", "--config", "nci5k", "--lrs", "nan"], "--lrs: 'nan' is not a number above 0; give finite numbers"),
    (["rank", "--config", "nci5k", "--seeds", ","], "--seeds: ',' names nothing; give at least one"),
    (["overhead", "--config", "nci5k", "--gates", " , "], "--gates: ' , ' names nothing; give at least one"),
    (["smoothing", "--config", "nci5k", "--depths", ","], "--depths: ',' names nothing; give at least one"),
    (["synthetic", "--families", ","], "--families: ',' names nothing; give at least one"),
    (["synthetic", "--noise", "-1"], "--noise: -1.0 is not a noise scale >= 0"),
    (["synthetic", "--noises", "0.1,nan"], "--noises: nan is not a noise scale >= 0"),
    (["entropy", "--config", "nci5k", "--collapse", "5"], "--collapse: 5.0 is no normalized entropy; give a threshold"),
    (["entropy", "--config", "nci5k", "--collapse", "-1"], "--collapse: -1.0 is no normalized entropy"),
    (["smoothing", "--config", "nci5k", "--seeds", "0,x"], "--seeds: 'x' is not an integer"),
    (["synthetic", "--dim", "10", "--heads", "3"], "--dim 10 must be divisible by --heads 3"),
    (["synthetic", "--families", "er,foo"], "--families: unknown 'foo'; choose from er, cycle, regular"),
    (["synthetic", "--draws", "0"], "--draws must be >= 1, got 0"),
    (["synthetic", "--biases", "0,high"], "--biases: 'high' is not a number"),
    # the flag, appended after the --set items, or the later of two values silently won
    (["smoothing", "--depths", "2", "--data-root", "a", "--set", "data.root=b"],
     "--data-root and --set data.root both set data.root; give one"),
    (["rank", "--config", "nci5k", "--set", "model.dim=8", "--set", "model.dim=16"],
     "--set model.dim is given twice (8 and 16); give it once"),
    # a key the analysis sets in each run itself (the --set was replaced silently)
    (["smoothing", "--depths", "2", "--set", "model.layers=7"],
     "--set model.layers: analyze smoothing sets it in each run from --depths; drop --set model.layers and give "
     "--depths instead"),
    (["rank", "--config", "nci5k", "--set", "train.epochs=9"],
     "--set train.epochs: analyze rank sets it in each run from --epochs; drop --set train.epochs and give --epochs "
     "instead"),
    (["entropy", "--config", "nci5k", "--set", "train.seed=3"],
     "--set train.seed: analyze entropy sets it in each run from --seeds; drop --set train.seed and give --seeds "
     "instead"),
    (["lr-sweep", "--config", "nci5k", "--set", "train.on_nan=stop"],
     "--set train.on_nan: analyze lr-sweep sets it in each run to skip (a diverging rate must not stop the sweep); "
     "drop --set train.on_nan"),
    (["overhead", "--config", "nci5k", "--epochs", "3"], "--epochs: analyze overhead trains nothing"),
    (["overhead", "--config", "nci5k", "--seeds", "0,1"], "--seeds: analyze overhead builds one model per gate"),
    (["overhead", "--config", "nci5k", "--set", "model.gate_position=value"],
     "--set model.gate_position: analyze overhead sets it in each run from --gates (GATE@POSITION); drop --set "
     "model.gate_position and give --gates instead"),
    # a misspelt gate or a negative seed was refused as the config key (model.gate, train.seed) once the data
    # was read, and analyze entropy trained every gate before the bad one first; synthetic's --seed -1 was a
    # numpy ValueError traceback (exit 1)
    (["smoothing", "--depths", "2", "--gates", "none,elementwse"],
     "--gates: unknown 'elementwse'; choose from none, headwise, elementwise"),
    (["entropy", "--config", "nci5k", "--gates", "none,foo"], "--gates: unknown 'foo'; choose from none, headwise"),
    (["lr-sweep", "--config", "nci5k", "--gates", "Elementwise"], "--gates: unknown 'Elementwise'"),
    (["overhead", "--config", "nci5k", "--gates", "none,elementwise@values"],
     "--gates: unknown 'elementwise@values'; choose from none, headwise, elementwise; a position after @: output, "
     "value, post"),
    (["smoothing", "--depths", "2", "--seeds", "0,-1"], "--seeds: -1 is no seed; give whole numbers from 0 to 4294967295"),
    (["entropy", "--config", "nci5k", "--seeds", "-3"], "--seeds: -3 is no seed"),
    (["lr-sweep", "--config", "nci5k", "--seeds", "4294967296"], "--seeds: 4294967296 is no seed"),
    (["rank", "--config", "nci5k", "--seeds", "-1"], "--seeds: -1 is no seed"),
    (["synthetic", "--seed", "-1"], "--seed must be >= 0, got -1"),
])
def test_bad_analysis_arguments_are_one_line_refusals(argv, message, tmp_path, capsys, monkeypatch):
    """These ended in ValueError tracebacks (exit 1), or ran with another value than given; each is
    refused before the data is read."""
    def no_data(cfg, progress=True):
        raise AssertionError("the data was read before the flag was checked")

    monkeypatch.setattr(common, "prepare_data", no_data)
    out = tmp_path / "an"
    capsys.readouterr()
    rc = main(["analyze", *argv, "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert message in err and not out.exists()


def test_a_range_of_exactly_ten_times_is_ten_times():
    """3e-4 / 3e-5 is 9.999999999999998 in floats: lr-sweep printed "10x" and the report and the
    claims table judged the stability claim ">= 10x" as "does not hold". The range is 10x, and
    a JSON written before (its ratio 9.999999999999998) is judged so too."""
    from siggate.analysis.report import HOLDS, verdict_lr

    lrs = [3e-5, 1e-4, 3e-4]
    assert lrs[2] / lrs[0] < 10 and lrsweep.widest_range(lrs, [True] * 3)["ratio"] == 10.0
    for ratio in (10.0, lrs[2] / lrs[0]):
        rng = {g: {"ratio": ratio, "min_lr": lrs[0], "max_lr": lrs[2], "at_sweep_edge": True}
               for g in ("none", "elementwise")}
        doc = {"lrs": lrs, "gates": ["none", "elementwise"], "tolerance": 0.1, "epochs": 5, "protocol_epochs": 5,
               "seeds": [0], "metric": "mae", "best_score": {"none": 1.0, "elementwise": 1.0}, "stable_range": rng,
               "no_divergence_range": rng, "range_widening": {"elementwise": 1.0}}
        stable, within = verdict_lr(doc)[:2]
        assert "across a 10x learning-rate range" in stable["claim"] and stable["verdict"] == within["verdict"] == HOLDS
    short = {**rng, "elementwise": {**rng["elementwise"], "ratio": 9.9}}
    assert verdict_lr({**doc, "no_divergence_range": short, "stable_range": short})[0]["verdict"] != HOLDS
    # before the protocol's epochs no divergence decides nothing (a run can diverge later): it said holds at 2 of 2000
    from siggate.analysis.report import INCONCLUSIVE

    assert [r["verdict"] for r in verdict_lr({**doc, "epochs": 2})[:2]] == [INCONCLUSIVE, INCONCLUSIVE]


def test_the_rank_claim_holds_only_when_its_sign_test_rejects():
    """"every head's stable rank is higher" said holds from a share of heads (>= 95%) with no test:
    it needs the one-sided sign test over the (layer, head) pairs to reject too."""
    from scipy import stats

    from siggate.analysis.report import HOLDS, INCONCLUSIVE, verdict_rank

    def doc(before, after):
        b, a = np.asarray(before, dtype=float), np.asarray(after, dtype=float)
        return {"gate": "elementwise", "gate_position": "output", "trained": True, "dataset": "zinc", "split": "val",
                "n_graphs": 10, "model_source": ["ckpt"], "before": b.tolist(), "after": a.tolist(),
                "frac_heads_higher": float(np.mean(a > b)), "mean_before": float(b.mean()), "mean_after": float(a.mean())}

    few = verdict_rank(doc([[1.0, 1.0]], [[1.2, 1.3]]))  # all higher, but 2 pairs: p = 0.25
    assert few["verdict"] == INCONCLUSIVE and "(2 higher, 0 lower; one-sided sign test p = 0.25)" in few["measured"]
    many = verdict_rank(doc(np.ones((10, 4)), np.full((10, 4), 1.1)))
    p = stats.binomtest(40, 40, 0.5, alternative="greater").pvalue
    from siggate.analysis.common import fmt

    assert many["verdict"] == HOLDS and f"p = {fmt(p)}" in many["measured"]


def test_the_ablation_table_subtracts_only_within_a_dataset_and_metric():
    """The ablation table took the first comparison with a `none` arm as every row's baseline
    and checked only the epochs: a molhiv ROC-AUC row got "diff vs none" against ZINC's MAE, and
    the header named the last file's metric for every row."""
    from siggate.analysis.report import _compare_section

    def comparison(dataset, metric, gates, scores):
        return {"metric": metric, "gates": gates, "epochs": 100, "config": {"data": {"name": dataset}},
                "per_seed": {g: {"0": v, "1": v} for g, v in zip(gates, scores)}, "n": {g: 2 for g in gates},
                "mean": dict(zip(gates, scores)), "std": {g: 0.0 for g in gates}, "val_mean": dict(zip(gates, scores)),
                "params": {g: 1 for g in gates}, "vs_baseline": {}}

    text = _compare_section([("zinc/results.json", comparison("zinc", "mae", ["none", "elementwise"], [0.21, 0.20])),
                             ("hiv/results.json", comparison("molhiv", "rocauc", ["headwise"], [0.77])),
                             ("hiv2/results.json", comparison("molhiv", "rocauc", ["none"], [0.75]))])
    rows = {ln.split("|")[1].strip() + "@" + ln.split("|")[2].strip(): [c.strip() for c in ln.split("|")[1:-1]]
            for ln in text.splitlines() if ln.startswith("| ") and "variant" not in ln}
    assert rows["headwise@molhiv"][2] == "rocauc" and rows["headwise@molhiv"][9] == "0.02"  # against molhiv's none
    assert rows["elementwise@zinc"][2] == "mae" and rows["elementwise@zinc"][9] == "-0.01"
    lone = _compare_section([("hiv/results.json", comparison("molhiv", "rocauc", ["headwise"], [0.77])),
                             ("zinc/results.json", comparison("zinc", "mae", ["none"], [0.21]))])
    [row] = [ln for ln in lone.splitlines() if ln.startswith("| headwise")]
    assert row.split("|")[10].strip() == "-"  # no molhiv baseline: no difference
    # two comparisons of one dataset at other widths: each against its own ungated arm (the second's
    # elementwise was measured against the first's none); a gate-only one against the same config's
    wide = comparison("zinc", "mae", ["none", "elementwise"], [0.30, 0.25])
    wide["config"] = {"data": {"name": "zinc"}, "model": {"dim": 32}}
    narrow = comparison("zinc", "mae", ["none", "elementwise"], [0.21, 0.20])
    narrow["config"] = {"data": {"name": "zinc", "root": "/a"}, "model": {"dim": 16}}
    biased = comparison("zinc", "mae", ["elementwise"], [0.27])
    biased["config"] = {"data": {"name": "zinc", "root": "/b"}, "model": {"dim": 32, "gate_bias_init": 2.0},
                        "train": {"seed": 5}}  # its first seed another: the runs pair by seed
    wide["config"]["train"] = {"seed": 0}
    text = _compare_section([("a/results.json", narrow), ("b/results.json", wide), ("c/results.json", biased)])
    diffs = {ln.split("|")[1].strip() + " " + ln.split("|")[12].strip(): ln.split("|")[10].strip()
             for ln in text.splitlines() if ln.startswith("| elementwise")}
    assert diffs == {"elementwise `a/results.json`": "-0.01", "elementwise `b/results.json`": "-0.05",
                     "elementwise (gate_bias_init=2) `c/results.json`": "-0.03"}, diffs


def test_the_ablation_tables_p_is_of_the_pair_its_diff_is_of():
    """The p column came from the comparison's first arm against each other one (``vs_baseline``),
    while the diff was against the ungated arm: with ``--gates elementwise,none,headwise`` the
    headwise row showed headwise-vs-elementwise's p beside its diff against none, and none got a p."""
    from scipy import stats

    from siggate.analysis.common import fmt
    from siggate.analysis.report import _compare_section

    seeds = ["0", "1", "2", "3", "4"]
    scores = {"elementwise": [0.10, 0.11, 0.12, 0.10, 0.11], "none": [0.20, 0.23, 0.19, 0.22, 0.21],
              "headwise": [0.21, 0.22, 0.20, 0.23, 0.20]}
    res = {"metric": "mae", "higher_is_better": False, "gates": list(scores), "epochs": 10,
           "config": {"data": {"name": "zinc"}}, "per_seed": {g: dict(zip(seeds, v)) for g, v in scores.items()},
           "n": {g: 5 for g in scores}, "mean": {g: float(np.mean(v)) for g, v in scores.items()},
           "std": {g: 0.0 for g in scores}, "val_mean": {g: 0.0 for g in scores}, "params": {g: 1 for g in scores},
           "vs_baseline": {"none": {"p_paired_t": 1e-6}, "headwise": {"p_paired_t": 5e-7}}}  # against elementwise
    text = _compare_section([("z/results.json", res)])
    rows = {ln.split("|")[1].strip(): [c.strip() for c in ln.split("|")[1:-1]]
            for ln in text.splitlines() if ln.startswith("| ") and "variant" not in ln}
    for gate in ("elementwise", "headwise"):
        want = stats.ttest_rel(scores[gate], scores["none"]).pvalue
        assert rows[gate][10] == fmt(want), (gate, rows[gate])
        assert rows[gate][9] == fmt(float(np.mean(np.subtract(scores[gate], scores["none"]))))
    assert rows["none"][9] == rows["none"][10] == "-"


def test_synthetic_on_the_smallest_graphs_is_drawn_or_refused_in_one_line(tmp_path, capsys):
    """--nodes 3 with the default families ended in networkx's traceback (no 4-regular graph on 3
    nodes); --nodes 2 gave stable ranks of 1, ratios of 0, and a traceback from the log axis of
    the picture after synthetic.json was written. One line for the first; the second is drawn."""
    capsys.readouterr()
    assert main(["analyze", "synthetic", "--draws", "2", "--nodes", "3", "--no-progress", "--out", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--nodes 3: the regular family's" in err and "at least 4 nodes" in err
    run("synthetic", "--draws", "2", "--nodes", "2", "--dim", "4", "--heads", "1", "--families", "cycle",
        "--sweep-draws", "1", "--no-progress", "--out", str(tmp_path / "b"))
    assert (tmp_path / "b" / "synthetic.png").stat().st_size > 0 and (tmp_path / "b" / "synthetic.json").is_file()


@pytest.mark.parametrize("analysis", ["rank", "smoothing"])
def test_a_diverged_training_run_is_named_not_measured(analysis, tmp_path, capsys):
    """rank measured a diverged run's last.pt (a LinAlgError traceback from the SVD of NaNs);
    smoothing raised a RuntimeError traceback. Both name the run and the fix in one line."""
    extra = ["--depths", "1", "--seeds", "0"] if analysis == "smoothing" else []
    capsys.readouterr()
    tiny = TINY_ANY_DEPTH if analysis == "smoothing" else TINY
    rc = main(["analyze", analysis, "--config", "nci5k", *tiny, "--set", "train.lr=1e30", "--epochs", "2", *extra,
               "--no-progress", "--out", str(tmp_path / analysis)])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert "diverged (non-finite loss" in err and "cannot be measured; lower the learning rate" in err


def test_an_untrained_epoch_stops_siggate_train_but_the_analyses_record_divergence(tmp_path, capsys):
    """Whole epochs skipped under train.on_nan=skip stop `siggate train`; entropy and the lr sweep,
    which skip to measure divergence, record such a run instead of aborting every other one."""
    capsys.readouterr()
    rc = main(["analyze", "entropy", "--config", "nci5k", *TINY, "--max-graphs", "40", "--set", "train.lr=1e30",
               "--epochs", "2", "--gates", "none", "--seeds", "0", "--out", str(tmp_path / "e")])
    assert rc == 0, capsys.readouterr().err
    res = json.loads((tmp_path / "e" / "entropy.json").read_text())
    from siggate.analysis.report import INCONCLUSIVE, verdict_entropy

    s = res["summary"]["none"]  # NaN entropies are below no threshold: they counted as no collapsed head
    assert s["collapsed_heads"] is None and s["diverged_seeds"] == [0]
    assert verdict_entropy({**res, "summary": {"elementwise": s}, "epochs": 99})["verdict"] == INCONCLUSIVE
    rc = main(["analyze", "lr-sweep", "--config", "nci5k", *TINY, "--max-graphs", "40", "--lrs", "1e30,1e-3",
               "--epochs", "2", "--gates", "none", "--out", str(tmp_path / "s")])
    assert rc == 0, capsys.readouterr().err
    res = json.loads((tmp_path / "s" / "lrsweep.json").read_text())
    assert res["per_lr"]["none"][-1]["lr"] == 1e30 and res["per_lr"]["none"][-1]["diverged"] == [True]


def test_a_nan_learning_rate_is_refused_by_its_flag(tmp_path, capsys):
    """NaN passes every comparison, so `--lrs nan` reached torch's Adam (a ValueError traceback);
    it was then refused by the config key it sets, after the dataset was read; now by the flag."""
    capsys.readouterr()
    rc = main(["analyze", "lr-sweep", "--config", "nci5k", *TINY, "--max-graphs", "20", "--lrs", "nan,1e-3",
               "--gates", "none", "--seeds", "0", "--epochs", "1", "--out", str(tmp_path / "lr")])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "--lrs: 'nan' is not a number above 0" in err, err


def test_gate_means_do_not_depend_on_how_the_graphs_are_batched(tiny_dataset):
    """A one-node graph's gate values counted when it shared a batch with a larger graph and were
    dropped when its batch held only one-node graphs; a set of one-node graphs alone raised a
    TypeError (entropy) or a plain ValueError (rank), tracebacks at the CLI."""
    from siggate.analysis.entropy import entropy_stats
    from siggate.analysis.rank import head_ranks
    from siggate.config import load_config
    from siggate.data.base import DataError
    from siggate.train.modelprep import build_model

    cfg = load_config("nci5k", ["model.layers=2", "model.dim=16", "model.heads=2", "model.pe=none"])
    model = build_model(cfg.model, tiny_dataset.info, 0, tiny_dataset.train).eval()
    one = fake_graph(torch.Generator().manual_seed(3), 1)
    graphs = list(tiny_dataset.val[:6]) + [one]
    for measure in (head_ranks, entropy_stats):
        together, alone = measure(model, graphs, 64), measure(model, graphs, 1)
        assert together["n_graphs"] == alone["n_graphs"] == 6  # the statistics of heads: graphs of 2+ nodes
        np.testing.assert_allclose(together["gate_mean"], alone["gate_mean"], rtol=1e-6)  # float32 forwards
        nodes = sum(int(g.num_nodes) for g in graphs)  # the gate mean counts every node, the one-node graph's too
        with torch.no_grad():
            _, det = model(common.batches(graphs, 64).__iter__().__next__(), return_details=True)
        want = [float(a["gate"][det["mask"]].double().mean()) for a in det["attn"]]
        assert int(det["mask"].sum()) == nodes
        np.testing.assert_allclose(alone["gate_mean"], want, rtol=1e-6)
        with pytest.raises(DataError, match=r"^no graph with at least two nodes among the graphs analysed"):
            measure(model, [one], 64)


def _per_graph_details(model, graphs):
    """Each graph's attention details from a forward of its own: ``[(n_nodes, det)]``."""
    out = []
    with torch.no_grad():
        for g in graphs:
            _, det = model(next(iter(common.batches([g], 1))), return_details=True)
            out.append((int(g.num_nodes), det))
    return out


def _np_stable_rank(a: np.ndarray) -> float:
    s = np.linalg.svd(a, compute_uv=False)
    return float((s ** 2).sum() / s[0] ** 2) if s[0] > 0 else 0.0


def test_head_ranks_and_entropies_equal_a_per_graph_computation(tiny_dataset):
    """The rank and entropy analyses' numbers, against numpy on each graph's own forward: the
    stable rank of each head's output before and after its gate, and the mean row entropy of its
    attention (normalised by log n). A gate left out of the rank ('after' read from the ungated
    output) or entropy normalised otherwise passed every test before."""
    from siggate.analysis.entropy import entropy_stats
    from siggate.analysis.rank import head_ranks
    from siggate.config import load_config
    from siggate.train.modelprep import build_model

    cfg = load_config("nci5k", ["model.layers=2", "model.dim=16", "model.heads=2", "model.pe=none",
                                "model.gate=elementwise", "model.gate_bias_init=-1"])
    model = build_model(cfg.model, tiny_dataset.info, 0, tiny_dataset.train).eval()
    graphs = list(tiny_dataset.val[:8])
    per = _per_graph_details(model, graphs)
    L, H = 2, 2
    before, after, ent, nent = (np.zeros((L, H)) for _ in range(4))
    for n, det in per:
        for li, a in enumerate(det["attn"]):
            for h in range(H):
                before[li, h] += _np_stable_rank(a["head_out"][0, :n, h].double().numpy())
                after[li, h] += _np_stable_rank(a["head_out_gated"][0, :n, h].double().numpy())
                p_ = a["attn"][0, h, :n, :n].double().numpy()
                rows = -(np.where(p_ > 0, p_ * np.log(np.where(p_ > 0, p_, 1)), 0)).sum(1)
                ent[li, h] += rows.mean()
                nent[li, h] += rows.mean() / np.log(n)
    k = len(per)
    ranks = head_ranks(model, graphs, 64)
    np.testing.assert_allclose(ranks["before"], before / k, rtol=1e-5)
    np.testing.assert_allclose(ranks["after"], after / k, rtol=1e-5)
    assert not np.allclose(before, after, rtol=1e-3)  # the gate changes the ranks: the check can tell them apart
    stats = entropy_stats(model, graphs, 64)
    np.testing.assert_allclose(stats["entropy"], ent / k, rtol=1e-5)
    np.testing.assert_allclose(stats["normalized_entropy"], nent / k, rtol=1e-5)


@pytest.mark.parametrize("scale", [1e-20, 1.0, 1e20])
def test_stable_rank_of_a_float32_matrix_does_not_depend_on_its_scale(scale):
    """Squared singular values under- or overflowed float32: 0.21 and nan for a matrix of stable rank 2.01."""
    from siggate.analysis.metrics import stable_rank_batched

    a = torch.randn(6, 4, generator=torch.Generator().manual_seed(0))
    want = stable_rank(a.double())
    assert float(stable_rank_batched(a * scale)) == pytest.approx(want, rel=1e-5)


def test_a_range_short_of_ten_times_fails_only_when_bounded_inside_the_sweep():
    """A sweep of 1e-3..3e-3 cannot show a 10x range: every rate stable and within tolerance was
    judged "does not hold" (contradicted in the claims table). Short of 10x is a failure only where
    rates on both sides fell out; a range that reaches an end of the sweep might go on past it."""
    from siggate.analysis.report import FAILS, INCONCLUSIVE, verdict_lr

    def doc(lrs, lo, hi):
        rng = {g: {"ratio": hi / lo, "min_lr": lo, "max_lr": hi} for g in ("none", "elementwise")}
        return {"lrs": lrs, "gates": ["none", "elementwise"], "tolerance": 0.1, "epochs": 5, "protocol_epochs": 5,
                "seeds": [0], "metric": "mae", "best_score": {"none": 1.0, "elementwise": 1.0}, "stable_range": rng,
                "no_divergence_range": rng, "range_widening": {"elementwise": 1.0}}

    whole = verdict_lr(doc([1e-3, 3e-3], 1e-3, 3e-3))[:2]
    assert [r["verdict"] for r in whole] == [INCONCLUSIVE, INCONCLUSIVE]
    edge = verdict_lr(doc([1e-4, 3e-4, 1e-3, 3e-3, 1e-2], 1e-4, 3e-4))[:2]  # may reach below 1e-4
    assert [r["verdict"] for r in edge] == [INCONCLUSIVE, INCONCLUSIVE]
    inside = verdict_lr(doc([1e-4, 3e-4, 1e-3, 3e-3, 1e-2], 3e-4, 1e-3))[:2]  # 1e-4 and 3e-3 fell out
    assert [r["verdict"] for r in inside] == [FAILS, FAILS]
    assert "rates on both sides of it" in inside[0]["rule"]


def test_a_collapsed_head_of_one_seed_is_not_averaged_away():
    """Each (layer, head)'s normalized entropy was averaged over seeds before heads were counted:
    a head at 0.05 in seed 0 and its namesake at 0.6 in seed 1 (two heads) made 0.325, no collapse,
    and the claim held. Each seed's heads count on their own."""
    from siggate.analysis.entropy import gate_entry, summarize
    from siggate.analysis.report import HOLDS, verdict_entropy

    def history(final):
        stats = [{"entropy": [[1.0, 1.0]], "normalized_entropy": [[0.9, 0.9]], "gate_mean": None},
                 {"entropy": [[0.1, 1.0]], "normalized_entropy": [final], "gate_mean": None}]
        return {"epoch": [0, 1], "stats": stats, "val": [1.0, 0.5], "train_loss": [None, 0.3], "skipped_batches": [0]}

    entry = gate_entry([history([0.05, 0.8]), history([0.6, 0.8])], [0, 1])
    assert entry["final_normalized_per_seed"] == [[[0.05, 0.8]], [[0.6, 0.8]]]
    s = summarize({"elementwise": entry}, 0.2)["elementwise"]
    assert s["collapsed_heads"] == 1 and s["heads_total"] == 4 and s["final_min_normalized"] == 0.05
    assert s["final_mean_normalized"] == pytest.approx((0.325 + 0.8) / 2)
    res = {"gates": ["elementwise"], "epochs": 5, "protocol_epochs": 5, "collapse_threshold": 0.2,
           "summary": {"elementwise": s}}
    v = verdict_entropy(res)
    assert v["verdict"] != HOLDS and "1/4 heads below 0.2" in v["measured"]
    # a result written before the per-seed finals: its means, as then
    old = {k: v for k, v in entry.items() if k != "final_normalized_per_seed"}
    assert summarize({"g": old}, 0.2)["g"]["heads_total"] == 2


def test_lr_sweep_refuses_a_tolerance_that_is_no_share(tmp_path, capsys):
    """--tolerance nan or -0.1 kept no rate within tolerance and printed "does not hold"."""
    for value in ("nan", "-0.1", "1", "0"):
        capsys.readouterr()
        assert main(["analyze", "lr-sweep", "--config", "nci5k", "--tolerance", value, "--out",
                     str(tmp_path / "s")]) == 2
        err = capsys.readouterr().err
        assert f"--tolerance: {value if value != '1' else '1.0'}" in err or f"--tolerance: {float(value)}" in err, err
        assert "give a share of the best score in (0, 1)" in err and "Traceback" not in err
    assert not (tmp_path / "s").exists()


def test_report_and_claims_name_a_result_of_another_shape(tmp_path, capsys):
    """A result file with its analysis named but its tables missing, or a results.json holding a
    list or lacking its dataset, ended report and claims in a traceback (exit 1)."""
    cases = [("smoothing.json", {"analysis": "smoothing"}, "report", "analyze smoothing"),
             ("rank.json", {"analysis": "rank"}, "report", "analyze rank"),
             # claims made that rank file a row, "not applicable (gate=None, position=None)" (helper-172)
             ("rank.json", {"analysis": "rank"}, "claims", "analyze rank"),
             # a gate study of another shape lost its row without a word, or read "Holm p = none" (helper-180)
             ("results.json", {"gate_study": "pending"}, "claims", "compare or study"),
             ("results.json", {"gate_study": {"tests": [{"n_pairs": 20, "arm": "gate-elementwise", "base": "gate-none",
                                                         "complete": True, "diff_mean": 0.0, "ci95": [0, 0],
                                                         "wins": 10}]}}, "claims", "compare or study"),
             ("results.json", [1, 2], "claims", "compare or study"),
             ("results.json", {"per_seed": {"none": {"0": 1}}, "metric": "mae"}, "claims", "compare or study")]
    for i, (name, doc, command, what) in enumerate(cases):
        d = tmp_path / f"r{i}"
        d.mkdir()
        (d / name).write_text(json.dumps(doc))
        capsys.readouterr()
        assert main(["analyze", command, str(d), "--out", str(tmp_path / f"out{i}.md")]) == 2
        err = capsys.readouterr().err
        assert f"{d / name}: not a complete siggate {what} result (" in err and "Traceback" not in err, err
        assert len(err.strip().splitlines()) == 1, err


def test_a_collapsed_head_counts_beside_a_seed_that_diverged():
    """A diverged seed made the whole gate's count unknown, hiding a head that collapsed in a seed
    that trained: it is counted (the claim then fails); no collapse beside a divergence stays unknown."""
    from siggate.analysis.entropy import _collapsed

    nan = float("nan")
    assert _collapsed(np.array([[[0.05, 0.8]], [[nan, nan]]]), 0.2) == 1
    assert _collapsed(np.array([[[0.5, 0.8]], [[nan, nan]]]), 0.2) is None
    assert _collapsed(np.array([[[0.5, 0.8]], [[0.6, 0.1]]]), 0.2) == 1
    from siggate.analysis.entropy import collapsed_text

    assert collapsed_text({"collapsed_heads": 1, "heads_total": 4, "diverged_seeds": [1]}) == "1/4 (seed 1 diverged)"
    assert collapsed_text({"collapsed_heads": None, "heads_total": 4, "diverged_seeds": [1]}) == "diverged (seed 1)"
    assert collapsed_text({"collapsed_heads": 0, "heads_total": 4, "diverged_seeds": []}) == "0/4"


def test_learning_rates_that_differ_past_six_digits_get_folders_of_their_own():
    """--lrs 0.0010000001,0.001 named both runs lr0.001-...: the second was refused as the first's folder
    (helper-174). Rates of six digits or fewer keep their names, so earlier sweeps resume."""
    assert lrsweep.rate_text(0.0010000001) == "0.0010000001" and lrsweep.rate_text(0.001) == "0.001"
    assert [lrsweep.rate_text(x) for x in (3e-5, 1e-4, 1.0, 0.0015, 1 / 3)] == ["3e-05", "0.0001", "1", "0.0015",
                                                                              "0.3333333333333333"]


def test_a_sweep_whose_gated_runs_diverged_at_every_rate_is_judged_not_refused(tmp_path, capsys):
    """Every rate of the gated arm diverging leaves it no range (ratio 0, bounds None): the
    report and the claims table refused that lrsweep.json as 'not a complete siggate analyze
    lrsweep result (TypeError ...)', a sweep result as valid as any. No rate stable: does not hold."""
    from siggate.analysis.report import FAILS, verdict_lr

    lrs, gates = [1e-3, 1e-2], ["none", "elementwise"]
    runs = {}
    for lr in lrs:
        runs[(lr, "none", 0)] = {"val": 0.5, "history": [{"train_loss": 1.0}, {"train_loss": 0.9}]}
        runs[(lr, "elementwise", 0)] = {"val": float("nan"), "diverged": True, "history": []}
    res = lrsweep.analyse(runs, lrs, gates, [0], 0.1, False)
    assert res["no_divergence_range"]["elementwise"]["min_lr"] is None
    res.update({"analysis": "lr-sweep", "metric": "mae", "higher_is_better": False, "lrs": lrs, "gates": gates,
                "seeds": [0], "epochs": 3, "tolerance": 0.1, "protocol_epochs": 3,
                "range_widening": {"elementwise": 0.0}})
    rows = verdict_lr(res)
    assert [r["verdict"] for r in rows[:2]] == [FAILS, FAILS]
    assert rows[0]["measured"].startswith("a seed diverged at every learning rate of the sweep")
    assert rows[1]["measured"].startswith("no learning rate of the sweep within tolerance")
    an = tmp_path / "an"
    an.mkdir()
    common.write_json(res, an / "lrsweep.json")
    assert main(["analyze", "report", str(an), "--out", str(tmp_path / "REPORT.md")]) == 0
    assert "does not hold" in capsys.readouterr().out
    assert main(["analyze", "claims", str(an), "--out", str(tmp_path / "claims.md")]) == 0


def test_the_tolerance_is_written_as_given_in_the_plot_and_the_report(monkeypatch):
    """The lr-sweep plot's title truncated 100 * 0.29 = 28.999... to 28% and the report rounded 12.5%
    to 12% (Python rounds half to even): neither was the tolerance the JSON and the table name."""
    from siggate.analysis.report import verdict_lr

    drawn = {}
    monkeypatch.setattr(lrsweep, "save", lambda fig, path: drawn.setdefault("fig", fig) and path)
    runs = {(lr, "none", 0): {"val": 1.0 + lr, "history": [{"train_loss": 1.0}]} for lr in (1e-3, 1e-2)}
    res = lrsweep.analyse(runs, [1e-3, 1e-2], ["none"], [0], 0.29, False)
    res.update({"metric": "mae", "tolerance": 0.29})
    lrsweep.plot(res, Path("unused.png"))
    assert "within 29% of best" in drawn["fig"].axes[0].get_title()
    doc = {"lrs": [1e-3, 1e-2], "gates": ["none", "elementwise"], "tolerance": 0.125, "epochs": 5,
           "protocol_epochs": 5, "seeds": [0], "metric": "mae", "best_score": {"none": 1.0, "elementwise": 1.0},
           "stable_range": {g: {"ratio": 10.0, "min_lr": 1e-3, "max_lr": 1e-2} for g in ("none", "elementwise")},
           "range_widening": {"elementwise": 1.0}}
    row = verdict_lr(doc)[0]
    assert "stays within 12.5% of its best" in row["claim"] and row["measured"].startswith("within 12.5% of its best")


def test_synthetic_of_er_graphs_alone_draws_its_plot_without_a_warning(tmp_path, capsys):
    """--families er draws no anchor-free graph, so the noise-sweep panels hold no line: their
    legends made matplotlib warn 'No artists with labels found to put in legend' on a valid run."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="No artists with labels")
        assert main(["analyze", "synthetic", "--families", "er", "--draws", "2", "--nodes", "6", "--dim", "4",
                     "--heads", "2", "--sweep-draws", "1", "--no-progress", "--out", str(tmp_path)]) == 0
    assert "warning" not in capsys.readouterr().err
    assert load(tmp_path / "synthetic.json")["noise_sweep"] == []


def test_the_lowest_entropy_over_training_is_of_a_seeds_own_head():
    """min_normalized_over_training took the minimum of the seed-mean curves: a head of seed 0 at
    0.05 in epoch 1 beside its namesake at 0.85 in seed 1 read 0.45, a dip no head made."""
    from siggate.analysis.entropy import DEFINITIONS, gate_entry, summarize

    def history(mid):
        stats = [{"entropy": [[1.0]], "normalized_entropy": [[0.9]], "gate_mean": None},
                 {"entropy": [[0.1]], "normalized_entropy": [[mid]], "gate_mean": None},
                 {"entropy": [[1.0]], "normalized_entropy": [[0.8]], "gate_mean": None}]
        return {"epoch": [0, 1, 2], "stats": stats, "val": [1.0, 0.6, 0.5], "train_loss": [None, 0.4, 0.3],
                "skipped_batches": [0, 0, 0]}

    entry = gate_entry([history(0.05), history(0.85)], [0, 1])
    s = summarize({"elementwise": entry}, 0.2)["elementwise"]
    assert s["min_normalized_over_training"] == pytest.approx(0.05)
    assert s["final_min_normalized"] == pytest.approx(0.8)
    assert "min_normalized_over_training" in DEFINITIONS


def test_the_stable_range_is_the_widest_run_as_its_definition_says():
    """The definitions called the range the longest contiguous run; the code takes the widest (the
    largest max_lr / min_lr), which a 10x claim asks for: two rates 10x apart beat three within 1.5x."""
    r = lrsweep.widest_range([1e-4, 1e-3, 1.5e-3, 2e-3, 2.5e-3, 3e-3], [True, True, False, True, True, True])
    assert (r["min_lr"], r["max_lr"], r["ratio"]) == (1e-4, 1e-3, 10.0)
    for key in ("stable_range", "no_divergence_range"):
        assert "widest contiguous run" in lrsweep.DEFINITIONS[key] and "longest" not in lrsweep.DEFINITIONS[key]


def test_smoothing_gains_are_against_none_wherever_it_is_listed(capsys):
    """`analyze smoothing --help` said "'none' first is the baseline" and named no default: the
    gains are of each other kind against none, in whatever order --gates lists them."""
    def stats(v):
        return {"mad": [1.0, v], "dirichlet": [1.0, 1.0], "dirichlet_rel": [1.0, 1.0], "rank": [2.0, 2.0],
                "stable_rank": [1.5, 1.5], "val": 0.5}

    per_seed = {"L2-none-s0": stats(0.4), "L2-elementwise-s0": stats(0.5)}
    first = smoothing.analyse(per_seed, [2], ["none", "elementwise"], [0])
    last = smoothing.analyse(per_seed, [2], ["elementwise", "none"], [0])
    assert first["relative_mad_gain"] == last["relative_mad_gain"] == {"elementwise": {"2": pytest.approx(0.25)}}
    with pytest.raises(SystemExit):
        main(["analyze", "smoothing", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "each other kind's MAD gain is against none, wherever it is listed (default: none,elementwise)" in text


def test_the_regular_family_is_defined_with_the_degree_it_drew():
    """With an odd --nodes a 3-regular graph cannot exist and make_graph draws a 4-regular one; the
    result's definitions still said "random 3-regular graph"."""
    odd = synthetic.run_synthetic(draws=1, nodes=7, dim=4, heads=2, families=("regular",), modes=("global",),
                                  gates=("headwise",), biases=(0.0,), weight_stds=(None,), noises=(0.05,),
                                  sweep_draws=1, progress=False)
    A = synthetic.make_graph("regular", 7, np.random.default_rng(0))
    assert set(A.sum(1).tolist()) == {4}
    assert odd["definitions"]["families"]["regular"].startswith("random 4-regular graph")
    even = synthetic._definitions(4.0, 0.05, 1, nodes=8)
    assert even["families"]["regular"].startswith("random 3-regular graph")
