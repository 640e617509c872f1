"""``train.eval_norm: train``: BatchNorm statistics recomputed on the training set before
every evaluation (:mod:`siggate.train.bn_stats`). The statistics must be the training set's
(against independent computations), must not depend on what training saw last, must leave
the training trajectory, the random streams and exact resume untouched, and a trained
model must save, reload and fold them like any other buffer."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
from torch import nn

from siggate.options import resolve_select
from siggate.train.bn_stats import batch_norms, graph_batches, recompute_bn_stats
from siggate.train.dataprep import graph_loader
from siggate.train.distributed import CPUSyncBatchNorm, convert_sync_batchnorm
from siggate.train.modelprep import build_model, load_trained
from siggate.train.pipeline import train
from siggate.train.scoring import evaluate_split
from test_engine import _float32, synthetic_dataset, tiny_cfg, train_until_a_crash_after_epoch_one  # noqa: F401

NO_DROPOUT = ["model.dropout=0", "model.attn_dropout=0"]


def _batch_of(graphs):
    return next(iter(graph_loader(graphs, len(graphs))))


def _trained_a_little(model, graphs, steps: int = 3, order=None):
    """``steps`` training-mode forwards (no optimiser): the running statistics move, the
    weights do not; ``order`` permutes the graphs first."""
    graphs = [graphs[i] for i in order] if order is not None else list(graphs)
    model.train()
    with torch.no_grad():
        for batch, _ in zip(graph_loader(graphs, 8), range(steps)):
            model(batch)
    return model


def test_stats_equal_the_moments_of_all_rows_over_uneven_batches():
    torch.manual_seed(0)
    model = nn.Sequential(nn.BatchNorm1d(3), nn.Linear(3, 4), nn.ReLU(), nn.BatchNorm1d(4))
    batches = [torch.randn(n, 3) * torch.tensor([1.0, 5.0, 0.1]) + torch.tensor([2.0, -3.0, 100.0])
               for n in (7, 3, 30, 2)]
    assert recompute_bn_stats(model, batches) == 2
    rows = torch.cat(batches).double()
    first = model[0]
    assert torch.allclose(first.running_mean.double(), rows.mean(0), rtol=1e-6, atol=1e-6)
    # channel 3 (mean 100, std 0.1) defeats a float32 sum of squares; a merge of per-batch moments holds
    assert torch.allclose(first.running_var.double(), rows.var(0, unbiased=True), rtol=1e-5)
    # the second norm reads the first one's output normalised per batch, as in training
    with torch.no_grad():
        after = torch.cat([model[2](model[1](nn.functional.batch_norm(b, None, None, first.weight, first.bias,
                                                                       True, 0.0, first.eps))) for b in batches])
    assert torch.allclose(model[3].running_mean, after.mean(0), rtol=1e-5, atol=1e-6)
    assert torch.allclose(model[3].running_var, after.var(0, unbiased=True), rtol=1e-5, atol=1e-6)
    # a batch of one row (a lone one-atom molecule) cannot be normalised by itself; it still counts
    recompute_bn_stats(model, batches + [torch.full((1, 3), 50.0)])
    rows = torch.cat(batches + [torch.full((1, 3), 50.0)]).double()
    assert torch.allclose(first.running_mean.double(), rows.mean(0), rtol=1e-6, atol=1e-6)


def test_stats_of_the_model_equal_pytorch_batchnorm_over_the_whole_training_set():
    """One batch holding every training graph: each layer's statistics are what PyTorch's own
    BatchNorm records with momentum 1 in one training-mode pass over that batch."""
    ds = synthetic_dataset(48)
    model = build_model(tiny_cfg(*NO_DROPOUT).model, ds.info)
    _trained_a_little(model, ds.train)
    reference = copy.deepcopy(model)
    for bn in batch_norms(reference):
        bn.momentum = 1.0
    reference.train()
    with torch.no_grad():
        reference(_batch_of(ds.train))
    model.eval()
    assert recompute_bn_stats(model, graph_batches(ds.train)) == len(batch_norms(model)) >= 3
    for bn, ref in zip(batch_norms(model), batch_norms(reference)):
        assert torch.allclose(bn.running_mean, ref.running_mean, rtol=1e-5, atol=1e-6)
        assert torch.allclose(bn.running_var, ref.running_var, rtol=1e-5, atol=1e-6)
    assert not model.training  # left in the mode it was in


def test_graph_batches_hold_consecutive_graphs_within_the_node_budget():
    ds = synthetic_dataset(40)
    graphs = ds.train
    assert [b.num_graphs for b in graph_batches(graphs)] == [len(graphs)]  # the whole set fits the default
    sizes = [int(g.num_nodes) for g in graphs]
    batches = list(graph_batches(graphs, max_nodes=20))
    assert [int(i) for b in batches for i in b.idx] == [int(g.idx) for g in graphs]  # every graph once, in order
    assert all(b.num_nodes <= 20 for b in batches)
    assert all(b.num_nodes + sizes[sum(c.num_graphs for c in batches[:k + 1])] > 20  # each batch is as full as it can be
               for k, b in enumerate(batches[:-1]))
    assert [b.num_graphs for b in graph_batches(graphs, max_nodes=1)] == [1] * len(graphs)  # larger graphs alone
    assert list(graph_batches([])) == []


def test_eval_output_does_not_depend_on_the_batches_seen_last():
    ds = synthetic_dataset(48)
    base = build_model(tiny_cfg(*NO_DROPOUT).model, ds.info)
    a = _trained_a_little(copy.deepcopy(base), ds.train)
    b = _trained_a_little(copy.deepcopy(base), ds.train, order=list(reversed(range(len(ds.train)))))
    val = _batch_of(ds.val)
    a.eval(), b.eval()
    with torch.no_grad():
        assert not torch.allclose(a(val), b(val), atol=1e-4)  # the running statistics differ
        for m in (a, b):
            recompute_bn_stats(m, graph_loader(ds.train, 8))
        assert torch.equal(a(val), b(val))
    for x, y in zip(batch_norms(a), batch_norms(b)):
        assert torch.equal(x.running_mean, y.running_mean) and torch.equal(x.running_var, y.running_var)


def test_the_pass_changes_nothing_but_the_statistics():
    ds = synthetic_dataset(32)
    model = _trained_a_little(build_model(tiny_cfg("model.dropout=0.3").model, ds.info), ds.train)
    params = {k: v.clone() for k, v in model.named_parameters()}
    tracked = [int(bn.num_batches_tracked) for bn in batch_norms(model)]
    rng = torch.get_rng_state()
    recompute_bn_stats(model, graph_batches(ds.train, max_nodes=50))
    assert torch.equal(torch.get_rng_state(), rng)  # no dropout mask and no loader seed drawn
    assert model.training  # left in training mode
    assert all(torch.equal(v, params[k]) for k, v in model.named_parameters())
    assert [int(bn.num_batches_tracked) for bn in batch_norms(model)] == tracked
    assert recompute_bn_stats(model, []) == 0  # no batch: nothing is replaced
    assert recompute_bn_stats(nn.Linear(2, 2), [torch.ones(1, 2)]) == 0  # no BatchNorm


def test_sync_batchnorm_layers_get_the_same_statistics_without_a_process_group():
    ds = synthetic_dataset(32)
    model = build_model(tiny_cfg(*NO_DROPOUT).model, ds.info)
    synced = convert_sync_batchnorm(copy.deepcopy(model), torch.device("cpu"))
    assert any(isinstance(m, CPUSyncBatchNorm) for m in synced.modules())
    for m in (model, synced):
        recompute_bn_stats(m, graph_loader(ds.train, 8))
    for x, y in zip(batch_norms(model), batch_norms(synced)):
        assert torch.equal(x.running_mean, y.running_mean) and torch.equal(x.running_var, y.running_var)


# --------------------------------------------------------------------------- in training


COMMON = ["train.epochs=3", "train.warmup_epochs=0", "model.dropout=0.2", "model.attn_dropout=0.3"]


def test_training_is_unchanged_and_the_best_checkpoint_holds_the_statistics_it_was_scored_with(tmp_path):
    ds = synthetic_dataset()
    running = train(tiny_cfg(*COMMON), tmp_path / "running", progress=False, dataset=ds)
    recomputed = train(tiny_cfg(*COMMON, "train.eval_norm=train"), tmp_path / "train", progress=False, dataset=ds)
    for key in ("train_loss", "grad_norm", "lr"):  # the statistics never enter a training step
        assert [h[key] for h in recomputed["history"]] == [h[key] for h in running["history"]], key
    assert [h["val"] for h in recomputed["history"]] != [h["val"] for h in running["history"]]

    model, ckpt, cfg, info = load_trained(tmp_path / "train" / "best.pt")
    assert cfg.train.eval_norm == "train"
    saved = [(bn.running_mean.clone(), bn.running_var.clone()) for bn in batch_norms(model)]
    recompute_bn_stats(model, graph_batches(ds.train))
    assert all(torch.equal(m, bn.running_mean) and torch.equal(v, bn.running_var)
               for (m, v), bn in zip(saved, batch_norms(model)))
    val = evaluate_split(model, ds.val, info, ckpt["target_mean"], ckpt["target_std"])
    assert val == pytest.approx(recomputed["val"], rel=1e-6)
    assert recomputed["val"] == recomputed["history"][recomputed["best_epoch"] - 1]["val"]
    # BatchNorm folding reads the saved statistics like any others
    batch = _batch_of(ds.val)
    with torch.no_grad():
        assert torch.allclose(model.for_inference()(batch), model.eval()(batch), rtol=1e-4, atol=1e-5)


def test_resume_with_recomputed_statistics_equals_an_uninterrupted_run(tmp_path, monkeypatch):
    ds = synthetic_dataset()
    cfg = tiny_cfg(*COMMON, "train.eval_norm=train")
    whole = train(cfg, tmp_path / "whole", progress=False, dataset=ds)
    train_until_a_crash_after_epoch_one(monkeypatch, cfg, tmp_path / "cut", dataset=ds)
    resumed = train(cfg, tmp_path / "cut", resume=True, progress=False, dataset=ds)
    keys = ("train_loss", "val", "test", "grad_norm")
    assert [[h[k] for k in keys] for h in resumed["history"]] == [[h[k] for k in keys] for h in whole["history"]]
    for name in ("last.pt", "best.pt"):
        a = torch.load(tmp_path / "whole" / name, weights_only=True)["model"]
        b = torch.load(tmp_path / "cut" / name, weights_only=True)["model"]
        assert all(torch.equal(a[k], b[k]) for k in a), name


def test_a_run_without_the_key_loads_evaluates_and_resumes_as_it_was(tmp_path, monkeypatch):
    """Checkpoints written before ``train.eval_norm`` existed: their config lacks the key,
    which then means the running statistics they were scored with; they predict as before
    and the run resumes."""
    ds = synthetic_dataset()
    whole = train(tiny_cfg(*COMMON), tmp_path / "whole", progress=False, dataset=ds)
    train_until_a_crash_after_epoch_one(monkeypatch, tiny_cfg(*COMMON), tmp_path / "old", dataset=ds)
    for name in ("best.pt", "last.pt"):
        path = tmp_path / "old" / name
        ckpt = torch.load(path, weights_only=True)
        del ckpt["config"]["train"]["eval_norm"], ckpt["config"]["train"]["select"]  # neither key existed then
        torch.save(ckpt, path)
    model, ckpt, cfg, info = load_trained(tmp_path / "old" / "best.pt")
    assert cfg.train.eval_norm == "running" and resolve_select(cfg.train.select, weighs_on_val=False) == "best"
    assert evaluate_split(model, ds.val, info, ckpt["target_mean"], ckpt["target_std"]) == whole["history"][0]["val"]
    resumed = train(tiny_cfg(*COMMON), tmp_path / "old", resume=True, progress=False, dataset=ds)
    assert [h["val"] for h in resumed["history"]] == [h["val"] for h in whole["history"]]


def test_the_csv_recipe_recomputes_and_the_benchmark_protocols_keep_their_running_statistics():
    from siggate.config import CONFIG_DIR, load_config

    assert load_config("csv", ["data.csv=x.csv", "data.target_cols=[y]"]).train.eval_norm == "train"
    protocols = sorted(p.stem for p in CONFIG_DIR.glob("*.yaml") if p.stem != "csv")
    assert len(protocols) >= 5
    assert {name: load_config(name).train.eval_norm for name in protocols} == dict.fromkeys(protocols, "running")


def test_select_last_keeps_the_last_epoch_and_scores_it_as_the_run_s(tmp_path):
    """``train.select: last``: best.pt is the schedule's last epoch whatever its val, so a
    combination's weights fitted on val read scores the selection never looked at."""
    ds = synthetic_dataset()
    best = train(tiny_cfg(*COMMON, "train.epochs=4"), tmp_path / "best", progress=False, dataset=ds)
    last = train(tiny_cfg(*COMMON, "train.epochs=4", "train.select=last"), tmp_path / "last", progress=False, dataset=ds)
    assert [h["val"] for h in last["history"]] == [h["val"] for h in best["history"]]  # the same training
    assert last["best_epoch"] == 4 and last["val"] == last["history"][-1]["val"]
    a = torch.load(tmp_path / "last" / "best.pt", weights_only=True)["model"]
    b = torch.load(tmp_path / "last" / "last.pt", weights_only=True)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    vals = [h["val"] for h in best["history"]]
    assert best["best_epoch"] == 1 + vals.index(min(vals))
    with pytest.raises(Exception, match=r"train.select: 'median' is not allowed\. Allowed values: auto, best, last"):
        tiny_cfg("train.select=median")


def test_a_run_keeping_its_last_epoch_recomputes_only_before_the_last_evaluation(tmp_path, monkeypatch):
    """``select: last`` with ``eval_norm: train``: the statistics are recomputed once, after the
    last epoch (the earlier scores choose nothing); the saved model, its scores and the training
    equal those of a run that recomputes after every epoch, and log.csv says which statistics
    each epoch's scores used."""
    import csv

    import siggate.train.bn_stats as bn_stats
    import siggate.train.loop as loop

    ds = synthetic_dataset()
    cfg = tiny_cfg(*COMMON, "train.epochs=4", "train.select=last", "train.eval_norm=train")
    calls = []
    real = bn_stats.recompute_bn_stats
    monkeypatch.setattr(loop, "recompute_bn_stats", lambda *a, **k: calls.append(1) or real(*a, **k))
    once = train(cfg, tmp_path / "once", progress=False, dataset=ds)
    assert len(calls) == 1
    with open(tmp_path / "once" / "log.csv", newline="") as fh:
        assert [r["eval_norm"] for r in csv.DictReader(fh)] == ["running", "running", "running", "train"]
    monkeypatch.setattr(loop, "epoch_norm", lambda train_cfg, epoch, last=None: "train")  # the rule before: every epoch
    every = train(cfg, tmp_path / "every", progress=False, dataset=ds)
    assert len(calls) == 1 + 4
    for key in ("train_loss", "grad_norm", "lr"):
        assert [h[key] for h in once["history"]] == [h[key] for h in every["history"]], key
    assert (once["val"], once["test"], once["best_epoch"]) == (every["val"], every["test"], every["best_epoch"])
    assert once["history"][-1]["val"] == every["history"][-1]["val"]
    assert [h["val"] for h in once["history"][:-1]] != [h["val"] for h in every["history"][:-1]]
    for name in ("best.pt", "last.pt"):
        a = torch.load(tmp_path / "once" / name, weights_only=True)["model"]
        b = torch.load(tmp_path / "every" / name, weights_only=True)["model"]
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name
    # select best, or the running statistics: every epoch as before
    assert [bn_stats.epoch_norm(tiny_cfg(*COMMON, "train.epochs=4", "train.eval_norm=train").train, e)
            for e in range(4)] == ["train"] * 4
    assert [bn_stats.epoch_norm(tiny_cfg(*COMMON, "train.epochs=4", "train.select=last").train, e)
            for e in range(4)] == ["running"] * 4


def test_a_run_keeping_its_last_epoch_cannot_end_on_running_statistics_by_a_shorter_resume(tmp_path, monkeypatch):
    """Resumed with train.epochs at or below the epochs it has done, a run keeping its last epoch
    would end on an epoch scored with the running statistics: refused, naming the fix; a longer
    schedule resumes and ends recomputed."""
    from siggate.train.checkpoint import CheckpointError

    ds = synthetic_dataset()
    cfg = tiny_cfg(*COMMON, "train.epochs=4", "train.select=last", "train.eval_norm=train")
    train_until_a_crash_after_epoch_one(monkeypatch, cfg, tmp_path / "cut", dataset=ds)
    short = tiny_cfg(*COMMON, "train.epochs=1", "train.select=last", "train.eval_norm=train")
    with pytest.raises(CheckpointError, match=r"its epoch 1 was scored with the running BatchNorm statistics .* "
                                              r"resume with --epochs above 1"):
        train(short, tmp_path / "cut", resume=True, progress=False, dataset=ds)
    done = train(cfg, tmp_path / "cut", resume=True, progress=False, dataset=ds)
    assert [h["eval_norm"] for h in done["history"]] == ["running", "running", "running", "train"]


def test_the_best_epoch_of_several_targets_does_not_follow_their_units(tmp_path, capsys):
    """A CSV's GNN with two targets kept the epoch of the best mean MAE in the targets' own units:
    with molecular weight in micrograms beside logP, the weight's numbers chose the epoch alone (the
    12th here, 9th with the weight in other units), and logP's scores changed with the weight's unit.
    Epochs are compared on each target's error over its training labels' spread, so the two runs keep
    one epoch (their losses are equal: training standardises each target)."""
    from rdkit import RDConfig
    from rdkit.Chem import Crippen, Descriptors

    from siggate.cli import main
    from siggate.data.chem import parse_smiles

    rows = []
    with open(Path(RDConfig.RDDataDir) / "NCI" / "first_5K.smi") as fh:
        for line in fh:
            mol = parse_smiles(line.split()[0]) if len(rows) < 200 else None
            if mol is not None and mol.GetNumAtoms() >= 2:
                rows.append((line.split()[0], Crippen.MolLogP(mol), Descriptors.MolWt(mol)))
    kept = {}
    for name, unit in (("ug", 1e6), ("small", 1e-8)):
        data = tmp_path / f"{name}.csv"
        data.write_text("smiles,logp,mw\n" + "".join(f"{s},{lp:.4f},{w * unit:.6g}\n" for s, lp, w in rows))
        out = tmp_path / name
        assert main(["train", "--data", str(data), "--target-col", "logp,mw", "--members", "gnn", "--init", "none",
                     "--epochs", "12", "--set", "train.lr=0.01", "--set", "model.layers=2", "--set", "model.dim=32",
                     "--set", "model.pe_dim=8", "--out", str(out), "--no-progress", "--threads", "1", "--cache-dir",
                     str(tmp_path / "c")]) == 0
        kept[name] = json.loads((out / "metrics.json").read_text())
    ug, small = kept["ug"], kept["small"]
    assert [h["train_loss"] for h in ug["history"]] == pytest.approx([h["train_loss"] for h in small["history"]],
                                                                     rel=1e-5)
    scaled = [h["val_scaled"] for h in ug["history"]]
    assert ug["best_epoch"] == small["best_epoch"] == 1 + scaled.index(min(scaled))
    raw = [h["val"] for h in ug["history"]]
    assert 1 + raw.index(min(raw)) != ug["best_epoch"]  # (the units' choice would differ here: the check can fail)
    # a run begun before siggate kept the compared score (no best_select in its state) goes on comparing its metric
    last = tmp_path / "ug" / "last.pt"
    ckpt = torch.load(last, weights_only=True)
    del ckpt["state"]["best_select"]
    torch.save(ckpt, last)
    assert main(["train", "--resume", "--out", str(tmp_path / "ug"), "--epochs", "14", "--no-progress"]) == 0
    resumed = json.loads((tmp_path / "ug" / "metrics.json").read_text())
    assert [("val_scaled" in h) for h in resumed["history"]] == [True] * 12 + [False] * 2
    best, val = ug["best_epoch"], ug["val"]
    for epoch, row in enumerate(resumed["history"][12:], start=13):
        if row["val"] < val:
            best, val = epoch, row["val"]
    assert resumed["best_epoch"] == best and resumed["val"] == val
    capsys.readouterr()
