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
    assert float(rows[0]["seconds"]) > 0 and float(rows[0]["cpu_seconds"]) > 0  # wall and CPU time of the epoch


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
    assert list(rows[0]) == ["smiles", "penalized_logp", "nearest_train_similarity", "outside_domain", "error"]
    for r in (rows[0], rows[2]):
        assert r["error"] == "" and float(r["penalized_logp"]) == float(r["penalized_logp"])
    assert "SMILES Parse Error" in rows[1]["error"] or "parse" in rows[1]["error"].lower()
    assert "empty" in rows[3]["error"].lower()
    assert "ring" in rows[4]["error"].lower() or "unclosed" in rows[4]["error"].lower()
    for r in (rows[1], rows[3], rows[4]):
        assert r["penalized_logp"] == ""


def test_prediction_matches_model_in_python(trained):
    from siggate.train.predict import SmilesPredictor

    out, _ = trained
    p = SmilesPredictor(out / "best.pt")
    a = p.predict_rows(["CCO", "c1ccccc1O"])
    b = p.predict_rows(["c1ccccc1O"])
    # independent of batch composition, up to float32 summation order (the packed layout
    # groups graphs by size, so other batch-mates change the order of some reductions)
    assert float(a[1]["penalized_logp"]) == pytest.approx(float(b[0]["penalized_logp"]), rel=1e-5, abs=1e-5)
    assert a[1]["penalized_logp"] != a[0]["penalized_logp"]


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
    """``--data`` alone trains configs/csv.yaml's recipe (no attention, 60 epochs, the GNN fine-tuned
    from the shipped weights); an explicit
    ``--config`` wins; the csv recipe without a file says what is missing."""
    import argparse

    from siggate.config import ConfigError, load_config
    from siggate.config_args import add_config_args, config_from_args

    parser = argparse.ArgumentParser()
    add_config_args(parser)
    data = ["--data", str(tmp_path / "my.csv"), "--target-col", "y"]
    cfg = config_from_args(parser.parse_args(data))
    csv_recipe = load_config("csv", [f"data.csv={tmp_path / 'my.csv'}", "data.target_cols=[y]"])
    assert (cfg.model.attn, cfg.train.epochs, cfg.train.init, cfg.data.name, cfg.data.target_cols) == (
        False, 60, "pretrained", "csv", ["y"])
    assert cfg.model.to_dict() == csv_recipe.model.to_dict() and cfg.train.to_dict() == csv_recipe.train.to_dict()
    nci = config_from_args(parser.parse_args(["--config", "nci5k", *data]))
    assert (nci.model.attn, nci.train.epochs, nci.train.init, nci.data.name) == (True, 60, "", "csv")
    assert config_from_args(parser.parse_args([])).data.name == "nci5k"  # no --data: the nci5k default
    with pytest.raises(ConfigError, match="data.csv: a CSV path is required"):
        load_config("csv")


def test_csv_recipe_pools_over_the_training_molecules_mean_size(tmp_path):
    """The csv recipe's ``pool_norm: 0`` becomes the training graphs' mean node count in the
    run's checkpoint and metadata (``resolved``), never in its config, which stays as the user
    gave it; the checkpoint rebuilds the same model, resumes, and refuses to resume on data
    that resolves another number; other configs resolve nothing, and no training graphs is a
    config error."""
    from siggate.config import ConfigError, load_config
    from siggate.train.checkpoint import CheckpointError, atomic_save, load_checkpoint
    from siggate.train.modelprep import build_model, load_trained, resolve_pool_norm
    from test_predict import tiny_config, tiny_dataset, train_tiny

    assert load_config("csv", ["data.csv=x.csv", "data.target_cols=[y]"]).model.pooling == "norm"
    ds = tiny_dataset(40)
    want = round(sum(int(g.num_nodes) for g in ds.train) / len(ds.train), 2)
    cfg = tiny_config(model={"pooling": "norm", "pool_norm": 0.0}, train={"epochs": 1})
    metrics = train_tiny(tmp_path, cfg, ds)
    saved = yaml.safe_load((tmp_path / "config.yaml").read_text())
    assert (saved["model"]["pooling"], saved["model"]["pool_norm"]) == ("norm", 0.0)
    assert saved["_meta"]["resolved"] == {"model.pool_norm": want} == metrics["resolved"]
    assert json.loads((tmp_path / "metrics.json").read_text())["resolved"] == {"model.pool_norm": want}
    ckpt = load_checkpoint(tmp_path / "best.pt")
    assert ckpt["config"] == cfg.to_dict() and ckpt["resolved"] == {"model.pool_norm": want}
    model, _, loaded_cfg, _ = load_trained(tmp_path / "best.pt")
    assert model.pool_norm == want and loaded_cfg == cfg
    legacy = {**ckpt, "format": 1, "config": {**cfg.to_dict(), "model": {**cfg.to_dict()["model"], "pool_norm": want}}}
    del legacy["resolved"]  # written before the resolved number left the config
    atomic_save(legacy, tmp_path / "legacy.pt")
    model, old, loaded_cfg, _ = load_trained(tmp_path / "legacy.pt")
    assert (model.pool_norm, loaded_cfg, old["resolved"]) == (want, cfg, {"model.pool_norm": want})
    assert all(torch.equal(v, ckpt["model"][k]) for k, v in model.state_dict().items())
    assert train_tiny(tmp_path, tiny_config(model={"pooling": "norm"}, train={"epochs": 2}), ds,
                      resume=True)["history"][0] == metrics["history"][0]  # resumed, not restarted
    with pytest.raises(CheckpointError, match=rf"model.pool_norm \(resolved from the training data\): checkpoint "
                                              rf"has {want}, this run has"):
        train_tiny(tmp_path, tiny_config(model={"pooling": "norm"}, train={"epochs": 3}), tiny_dataset(60),
                   resume=True)
    fixed, plain = tiny_config(model={"pooling": "norm", "pool_norm": 3.0}), tiny_config()
    assert resolve_pool_norm(fixed.model, ds.train) == {} and resolve_pool_norm(plain.model, []) == {}
    assert build_model(fixed.model, ds.info).pool_norm == 3.0
    with pytest.raises(ConfigError, match="no training graphs; set model.pool_norm"):
        resolve_pool_norm(cfg.model, [])
    with pytest.raises(ConfigError, match="only training resolves; set model.pool_norm to a positive number"):
        build_model(cfg.model, ds.info)  # an analysis building the csv recipe's model without training
    assert build_model(cfg.model, ds.info, 0, ds.train).pool_norm == want  # ... or with its training graphs
    assert cfg.model.pool_norm == 0.0  # nothing wrote the resolved number back


def test_runs_of_a_resolved_pool_norm_count_as_runs_of_their_config(tmp_path):
    """A run keeps ``pool_norm: 0`` in its config.yaml and the resolved number in ``_meta``;
    the one reuse rule (:func:`siggate.train.study.reuse_status`) recognises it as a run of
    the config with 0 and refuses it for another config. A run written before the two were
    kept apart (the number in the config, no ``_meta.resolved``) reads the same way. An old
    config without the key reads as 0."""
    from siggate.config import load_config, split_resolved, upgrade_config_dict
    from siggate.train.study import reuse_status, saved_run_config

    cfg = load_config("csv", ["data.csv=x.csv", "data.target_cols=[y]"])
    legacy = cfg.to_dict()
    legacy["model"]["pool_norm"] = 23.47
    task = {"name": "csv", "chirality": "cip"}  # (a record without it read stereocentres by the tag: another reading)
    records = {"new": {**cfg.to_dict(), "_meta": {"git_commit": "x", "resolved": {"model.pool_norm": 23.47},
                                                   "task": task}},
               "legacy": {**legacy, "_meta": {"git_commit": "x", "task": task}}}
    other = load_config("csv", ["data.csv=x.csv", "data.target_cols=[y]", "model.pooling=add"])
    fixed = load_config("csv", ["data.csv=x.csv", "data.target_cols=[y]", "model.pool_norm=25"])
    for name, record in records.items():
        run = tmp_path / name
        run.mkdir()
        (run / "config.yaml").write_text(yaml.safe_dump(record))
        (run / "metrics.json").write_text('{"test": 1.5}')
        assert saved_run_config(run) == (cfg.to_dict(), {"model.pool_norm": 23.47}), name
        status = reuse_status(run, cfg.to_dict())
        assert (status.state, status.metrics) == ("done", {"test": 1.5}), name
        assert reuse_status(run, other.to_dict()).state == "conflict"
        assert "model.pooling: checkpoint has 'norm', current config has 'add'" in reuse_status(run, other.to_dict()).reason
        assert "model.pool_norm: checkpoint has 0.0, current config has 25.0" in reuse_status(run, fixed.to_dict()).reason
    assert split_resolved(other.to_dict(), None) == (other.to_dict(), {})  # pooling add: nothing was resolved
    assert upgrade_config_dict({"model": {"pooling": "add"}})["model"]["pool_norm"] == 0.0


def test_short_runs_keep_the_protocols_warmup_fraction():
    """``--budget``/``--epochs`` N and the analyses' short variants share one rule: the warmup
    becomes ``round(warmup * N / epochs)`` (zinc: 50 of 2000 epochs, so 2 of 60 and 0 of 10);
    ``--set train.warmup_epochs`` keeps its value; ``--set train.epochs`` is taken literally."""
    import argparse

    from siggate.analysis.common import variant
    from siggate.config import load_config
    from siggate.config_args import add_config_args, config_from_args
    from siggate.train.members import run_refusal

    parser = argparse.ArgumentParser()
    add_config_args(parser)

    def train_of(*argv):
        t = config_from_args(parser.parse_args(["--config", "zinc", *argv])).train
        return t.epochs, t.warmup_epochs

    assert train_of("--budget", "60") == (60, 2) == train_of("--epochs", "60")
    assert train_of("--budget", "10") == (10, 0)
    assert train_of("--budget", "60", "--set", "train.warmup_epochs=7") == (60, 7)
    assert train_of("--set", "train.epochs=600") == (600, 50)
    zinc = load_config("zinc")
    assert [(v.train.epochs, v.train.warmup_epochs) for v in (variant(zinc, epochs=60), variant(zinc, epochs=1000),
                                                              variant(zinc))] == [(60, 2), (1000, 25), (2000, 50)]
    # what training refuses (run_refusal, asked by train, compare and the estimators), where a GNN trains
    long = config_from_args(parser.parse_args(["--config", "zinc", "--set", "train.epochs=50"]))
    assert run_refusal(long, ["gnn", "svr"], 1, several=True) == (
        "train.warmup_epochs=50 leaves no epoch after the warmup of a 50-epoch run; train for more epochs or lower it "
        "(--set train.warmup_epochs=N with N < 50)")
    assert run_refusal(long, ["svr", "rf"], 1, several=True) is None  # fingerprint members have no epochs


def test_relative_data_and_cache_folders_are_recorded_absolute(tmp_path, monkeypatch):
    """A run trained with ``--cache-dir cache`` recorded 'cache', so ``evaluate`` from another
    folder built a second cache there; ``--data`` was already made absolute, and now the
    folders given by flag are too."""
    import argparse

    from siggate.config_args import add_config_args, config_from_args

    parser = argparse.ArgumentParser()
    add_config_args(parser)
    monkeypatch.chdir(tmp_path)
    cfg = config_from_args(parser.parse_args(["--data", "my.csv", "--target-col", "y", "--cache-dir", "cache",
                                              "--data-root", "data: raw"]))
    assert (cfg.data.cache_dir, cfg.data.root, cfg.data.csv) == (
        str(tmp_path / "cache"), str(tmp_path / "data: raw"), str(tmp_path / "my.csv"))


def test_siggates_own_warnings_are_one_line_on_the_command_line(tmp_path):
    """A deprecated config key's FutureWarning printed Python's two lines, the file and line of
    siggate's code and that line of source; the command says it in one line, as it says errors.
    Other packages' warnings keep Python's format, and the format is restored after the command."""
    import warnings

    from siggate.cli import _one_line_warnings
    from test_predict import subprocess_env

    data = tmp_path / "d.csv"
    data.write_text("smiles,y\nCCO,1\nCCN,2\n")
    done = subprocess.run([sys.executable, "-m", "siggate", "train", "--data", str(data), "--target-col", "y",
                           "--set", "model.performer_features=32", "--set", "model.dim=0", "--out",
                           str(tmp_path / "r")], capture_output=True, text=True, env=subprocess_env(), timeout=300)
    assert done.returncode == 2 and done.stderr == (
        "siggate train: warning: model.performer_features is deprecated: write "
        "model.attention.performer.num_features (it was read as that)\n"
        "siggate train: error: model.dim: 0 is out of range; allowed values: >= 1 and <= 16384.\n"), done.stderr
    python_format = warnings.formatwarning
    with _one_line_warnings("train"):
        assert warnings.formatwarning("x", UserWarning, "/elsewhere/pkg.py", 3) == python_format(
            "x", UserWarning, "/elsewhere/pkg.py", 3)
    assert warnings.formatwarning is python_format


def test_other_packages_warnings_named_at_siggates_line_and_odd_file_names_keep_pythons_format():
    """The one-line format took any warning attributed to a file of siggate's for siggate's own:
    another package's deprecation that names its caller's line (pandas' find_stack_level, torch's
    stacklevel=2) read as 'siggate CMD: warning: ...', its category and origin gone; and a file name
    Python cannot resolve ('embedded null byte') raised from inside warnings.warn."""
    import warnings

    import siggate.config
    from siggate.cli import _one_line_warnings

    python_format = warnings.formatwarning
    ours = str(Path(siggate.config.__file__).resolve())
    with _one_line_warnings("train"):
        # called here, by no code of siggate's, as pandas' warning is called by pandas
        assert warnings.formatwarning("x", FutureWarning, ours, 3) == python_format("x", FutureWarning, ours, 3)
        for name in ("sys", "<string>", "", "a\0b"):
            assert warnings.formatwarning("x", UserWarning, name, 1) == python_format("x", UserWarning, name, 1)
