"""End to end through the real ``siggate`` command line: train, evaluate, predict."""

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

TINY = ["--set", "model.layers=1", "--set", "model.dim=16", "--set", "model.pe_dim=4",
        "--set", "model.pe_steps=4", "--set", "train.batch_size=128", "--set", "train.warmup_epochs=0"]


def siggate(*args, check=True, timeout=900):
    proc = subprocess.run([sys.executable, "-m", "siggate", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    if check and proc.returncode != 0:
        raise AssertionError(f"siggate {' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    proc = siggate("train", "--epochs", "1", "--out", str(out), "--no-progress", *TINY)
    return out, proc


def test_train_one_epoch_writes_everything(trained):
    out, proc = trained
    m = json.loads((out / "metrics.json").read_text())
    for key in ("dataset", "metric", "best_epoch", "val", "test", "params", "seconds"):
        assert key in m
    assert m["dataset"] == "nci5k" and m["metric"] == "mae" and m["best_epoch"] == 1
    assert m["splits"] == {"train": 3992, "val": 499, "test": 500}
    assert m["val"] > 0 and m["test"] > 0
    assert "epoch    1/1" in proc.stdout + proc.stderr
    for f in ("best.pt", "last.pt", "config.yaml", "log.csv"):
        assert (out / f).exists(), f
    ckpt = torch.load(out / "best.pt", weights_only=True)
    assert ckpt["config"]["model"]["layers"] == 1
    assert set(ckpt) >= {"model", "config", "target_mean", "target_std"}
    rows = list(csv.DictReader(open(out / "log.csv")))
    assert len(rows) == 1 and float(rows[0]["epoch"]) == 1


def test_evaluate_reproduces_the_reported_test_metric(trained):
    out, _ = trained
    m = json.loads((out / "metrics.json").read_text())
    proc = siggate("evaluate", "--checkpoint", str(out / "best.pt"), "--split", "test")
    res = json.loads(proc.stdout)
    assert res["metric"] == "mae"
    assert res["test"] == pytest.approx(m["test"], rel=1e-5)


def test_predict_mix_of_valid_and_invalid_smiles(trained, tmp_path):
    out, _ = trained
    dest = tmp_path / "pred.csv"
    smiles = ["CCO", "not_a_smiles", "c1ccccc1O", "", "C1CC"]
    proc = siggate("predict", "--checkpoint", str(out / "best.pt"), *smiles, "--output", str(dest), check=False)
    assert proc.returncode == 1  # some rows failed
    rows = list(csv.DictReader(open(dest)))
    assert [r["smiles"] for r in rows] == smiles
    assert list(rows[0]) == ["smiles", "prediction", "error"]
    for r in (rows[0], rows[2]):
        assert r["error"] == "" and float(r["prediction"]) == float(r["prediction"])
    assert "SMILES Parse Error" in rows[1]["error"] or "parse" in rows[1]["error"].lower()
    assert "empty" in rows[3]["error"].lower()
    assert "ring" in rows[4]["error"].lower() or "unclosed" in rows[4]["error"].lower()
    for r in (rows[1], rows[3], rows[4]):
        assert r["prediction"] == ""


def test_prediction_matches_model_in_python(trained):
    from siggate.train.predict import Predictor

    out, _ = trained
    p = Predictor(out / "best.pt")
    a = p.predict_rows(["CCO", "c1ccccc1O"])
    b = p.predict_rows(["c1ccccc1O"])
    # independent of batch composition, up to float32 summation order (the packed layout
    # groups graphs by size, so other batch-mates change the order of some reductions)
    assert float(a[1]["prediction"]) == pytest.approx(float(b[0]["prediction"]), rel=1e-5, abs=1e-5)
    assert a[1]["prediction"] != a[0]["prediction"]


def test_all_valid_predict_exits_zero(trained, tmp_path):
    out, _ = trained
    src = tmp_path / "in.csv"
    src.write_text("name,smiles\nethanol,CCO\nphenol,c1ccccc1O\n")
    proc = siggate("predict", "--checkpoint", str(out / "best.pt"), "--input", str(src))
    rows = list(csv.DictReader(proc.stdout.splitlines()))
    assert [r["smiles"] for r in rows] == ["CCO", "c1ccccc1O"]
    assert all(r["error"] == "" for r in rows)


def test_unknown_config_key_is_refused_before_work(tmp_path):
    proc = siggate("train", "--set", "model.gaet=none", "--out", str(tmp_path / "x"), check=False)
    assert proc.returncode == 2
    assert "model.gaet" in proc.stderr and "Did you mean 'model.gate'" in proc.stderr
    assert not (tmp_path / "x").exists()


def test_all_builtin_configs_load():
    from siggate.config import CONFIG_DIR, load_config

    names = sorted(p.stem for p in Path(CONFIG_DIR).glob("*.yaml"))
    base = ["molhiv", "molpcba", "nci5k", "peptides-func", "peptides-struct", "zinc"]
    paper = [n + "-paper" for n in base if n != "nci5k"]  # the public SigGate-GT code's settings
    node = ["cluster", "pattern", "sbm-large"]  # node-level datasets (GraphGPS's settings; ours for sbm-large)
    assert names == sorted(base + paper + node + ["csv"])  # csv: the recipe of --data
    for n in names:
        cfg = load_config(n, ["data.csv=x.csv", "data.target_cols=[y]"] if n == "csv" else [])
        assert cfg.data.name == n.removesuffix("-paper")
    for n in paper:  # 8 heads, no attention dropout, gate bias 0.5, no warmup in every paper variant
        m, t = load_config(n).model, load_config(n).train
        assert (m.heads, m.attn_dropout, m.gate_bias_init, t.warmup_epochs, m.local) == (8, 0.0, 0.5, 0, "gatedgcn")
    zp = load_config("zinc-paper")
    assert (zp.model.pooling, zp.model.head_layers, zp.model.pe_steps) == (("mean", 2, 16))
    z = load_config("zinc")
    assert (z.model.layers, z.model.dim, z.model.heads, z.model.local, z.model.pe_dim) == (10, 64, 4, "gine", 28)
    p = load_config("peptides-func")
    assert (p.model.layers, p.model.dim, p.model.local, p.model.pe, p.train.batch_size) == (4, 96, "gatedgcn", "lappe", 128)
    pat, clu = load_config("pattern"), load_config("cluster")  # GraphGPS pattern-GPS.yaml / cluster-GPS.yaml
    assert (pat.model.layers, pat.model.dim, pat.model.heads, pat.model.pe, pat.model.pe_steps, pat.train.batch_size,
            pat.train.lr, pat.train.loss) == (6, 64, 4, "lappe", 16, 32, 0.0005, "weighted_ce")
    assert (clu.model.layers, clu.model.dim, clu.model.heads, clu.model.dropout, clu.model.pe_steps,
            clu.train.batch_size) == (16, 48, 8, 0.1, 10, 16)


def test_data_without_config_takes_the_csv_recipe(tmp_path):
    """``--data`` alone trains configs/csv.yaml's recipe (no attention, 150 epochs); an explicit
    ``--config`` wins; the csv recipe without a file says what is missing."""
    import argparse

    from siggate.config import ConfigError, load_config
    from siggate.config_args import add_config_args, config_from_args

    parser = argparse.ArgumentParser()
    add_config_args(parser)
    data = ["--data", str(tmp_path / "my.csv"), "--target-col", "y"]
    cfg = config_from_args(parser.parse_args(data))
    csv_recipe = load_config("csv", [f"data.csv={tmp_path / 'my.csv'}", "data.target_cols=[y]"])
    assert (cfg.model.attn, cfg.train.epochs, cfg.data.name, cfg.data.target_cols) == (False, 150, "csv", ["y"])
    assert cfg.model.to_dict() == csv_recipe.model.to_dict() and cfg.train.to_dict() == csv_recipe.train.to_dict()
    nci = config_from_args(parser.parse_args(["--config", "nci5k", *data]))
    assert (nci.model.attn, nci.train.epochs, nci.data.name) == (True, 60, "csv")
    assert config_from_args(parser.parse_args([])).data.name == "nci5k"  # no --data: the nci5k default
    with pytest.raises(ConfigError, match="data.csv: a CSV path is required"):
        load_config("csv")


def test_csv_recipe_pools_over_the_training_molecules_mean_size(tmp_path):
    """The csv recipe's ``pool_norm: 0`` becomes the training graphs' mean node count in the
    run's config and checkpoint (which rebuild the same model); other configs are untouched,
    and no training graphs is a config error."""
    from siggate.config import ConfigError, load_config
    from siggate.train.checkpoint import load_checkpoint
    from siggate.train.loop import build_model, load_trained, resolve_pool_norm
    from test_predict import tiny_config, tiny_dataset, train_tiny

    assert load_config("csv", ["data.csv=x.csv", "data.target_cols=[y]"]).model.pooling == "norm"
    ds = tiny_dataset(40)
    want = round(sum(int(g.num_nodes) for g in ds.train) / len(ds.train), 2)
    cfg = tiny_config(model={"pooling": "norm", "pool_norm": 0.0}, train={"epochs": 1})
    train_tiny(tmp_path, cfg, ds)
    saved = yaml.safe_load((tmp_path / "config.yaml").read_text())["model"]
    assert (saved["pooling"], saved["pool_norm"]) == ("norm", want)
    assert load_checkpoint(tmp_path / "best.pt")["config"]["model"]["pool_norm"] == want
    assert load_trained(tmp_path / "best.pt")[0].pool_norm == want
    fixed, plain = tiny_config(model={"pooling": "norm", "pool_norm": 3.0}), tiny_config()
    assert resolve_pool_norm(fixed, ds.train) is fixed and resolve_pool_norm(plain, []) is plain
    with pytest.raises(ConfigError, match="no training graphs; set model.pool_norm"):
        resolve_pool_norm(cfg, [])
    with pytest.raises(ConfigError, match="only training resolves; set model.pool_norm to a positive number"):
        build_model(cfg, ds.info)  # an analysis building the csv recipe's model without training
    assert build_model(cfg, ds.info, ds.train).pool_norm == want  # ... or with its training graphs


def test_runs_of_a_resolved_pool_norm_count_as_runs_of_their_config(tmp_path):
    """A run saves ``pool_norm: 0`` resolved (e.g. 23.47); compare and the analyses rebuild the
    config with 0 and must still recognise the run as theirs (skip or resume it), and still
    refuse a run of another config. An old config without the key reads as 0."""
    from siggate.analysis.common import run_finished
    from siggate.config import load_config, upgrade_config_dict, with_resolved
    from siggate.train.compare import _stale_reason

    cfg = load_config("csv", ["data.csv=x.csv", "data.target_cols=[y]"])
    saved = cfg.to_dict()
    saved["model"]["pool_norm"] = 23.47
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(yaml.safe_dump({**saved, "_meta": {"git_commit": "x"}}))
    (run / "metrics.json").write_text("{}")
    (run / "last.pt").write_bytes(b"")
    assert _stale_reason(run, cfg.to_dict()) == "" and run_finished(run, cfg)
    assert with_resolved(cfg.to_dict(), saved) == saved and cfg.model.pool_norm == 0.0  # expected not mutated
    other = load_config("csv", ["data.csv=x.csv", "data.target_cols=[y]", "model.pooling=add"])
    assert "model.pooling" in _stale_reason(run, other.to_dict()) and not run_finished(run, other)
    fixed = load_config("csv", ["data.csv=x.csv", "data.target_cols=[y]", "model.pool_norm=25"])
    assert "model.pool_norm" in _stale_reason(run, fixed.to_dict()) and not run_finished(run, fixed)
    assert upgrade_config_dict({"model": {"pooling": "add"}})["model"]["pool_norm"] == 0.0
