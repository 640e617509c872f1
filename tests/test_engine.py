"""Experiment engine: gate-only differences between runs, the applied LR schedule,
TensorBoard logging, DDP pieces that run in one process, and ``siggate compare``.

Also holds the tiny CSV dataset that ``test_resume.py`` and ``test_ddp.py`` train on in
subprocesses.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from rdkit import Chem, RDConfig
from rdkit.Chem import Crippen
from torch_geometric.data import Data

from siggate.config import load_config
from siggate.data.base import GraphDataset, TaskInfo
from siggate.train import compare as cmp
from siggate.train.distributed import CPUSyncBatchNorm, DistContext, convert_sync_batchnorm
from siggate.train.loop import epoch_loader
from siggate.train.modelprep import build_model
from siggate.train.pipeline import train

REPO = Path(__file__).resolve().parents[1]

# Small model used by every test here and in test_resume.py / test_ddp.py.
TINY = ["model.layers=1", "model.dim=16", "model.heads=2", "model.pe_dim=4", "model.pe_steps=4",
        "model.head_layers=2"]


@pytest.fixture(autouse=True)
def _float32():
    # another test module sets float64 as the default dtype at import time
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float32)
    yield
    torch.set_default_dtype(old)


def write_tiny_csv(path: Path, n: int = 120, train_frac: float = 0.8) -> Path:
    """``n`` molecules of RDKit's NCI file with their Crippen logP and a fixed split column
    (``train`` for the first ``train_frac``, then ``val`` and ``test`` halves)."""
    rows = []
    with open(Path(RDConfig.RDDataDir) / "NCI" / "first_5K.smi") as fh:
        for line in fh:
            mol = Chem.MolFromSmiles(line.split()[0])
            if mol is None or mol.GetNumAtoms() < 2:
                continue
            rows.append((Chem.MolToSmiles(mol), round(Crippen.MolLogP(mol), 4)))
            if len(rows) == n:
                break
    n_train = int(n * train_frac)
    n_val = (n - n_train) // 2
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["smiles", "logp", "split"])
        for i, (smi, y) in enumerate(rows):
            w.writerow([smi, y, "train" if i < n_train else ("val" if i < n_train + n_val else "test")])
    return path


def csv_train_args(csv_path: Path, cache: Path) -> list[str]:
    """``siggate train`` arguments selecting the tiny CSV dataset."""
    return ["--data", str(csv_path), "--target-col", "logp", "--task", "regression", "--split", "column:split",
            "--cache-dir", str(cache)]


def subprocess_env(threads: int = 1) -> dict:
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = str(REPO / "src") + os.pathsep + env.get("PYTHONPATH", "")
    return env


# --------------------------------------------------------------------------- in-process data


def synthetic_dataset(n: int = 64, seed: int = 0) -> GraphDataset:
    """Small OGB-featured graphs (chains and rings) whose target depends on their atoms."""
    g = torch.Generator().manual_seed(seed)
    graphs = []
    for i in range(n):
        N = int(torch.randint(3, 9, (1,), generator=g))
        x = torch.zeros(N, 9, dtype=torch.long)
        x[:, 0] = torch.randint(0, 8, (N,), generator=g)
        x[:, 2] = torch.randint(0, 4, (N,), generator=g)
        src = torch.arange(N - 1)
        dst = src + 1
        if N > 4:
            src, dst = torch.cat([src, torch.tensor([0])]), torch.cat([dst, torch.tensor([N - 1])])
        ei = torch.stack([torch.cat([src, dst]), torch.cat([dst, src])])
        ea = torch.zeros(ei.size(1), 3, dtype=torch.long)
        ea[:, 0] = torch.randint(0, 3, (ei.size(1) // 2,), generator=g).repeat(2)
        y = torch.tensor([[float((x[:, 0] == 1).sum()) - 0.3 * N]])
        graphs.append(Data(x=x, edge_index=ei, edge_attr=ea, y=y, idx=i))
    info = TaskInfo(name="synthetic", task="regression", num_tasks=1, metric="mae")
    a, b = int(n * 0.75), int(n * 0.875)
    return GraphDataset(info=info, splits={"train": graphs[:a], "val": graphs[a:b], "test": graphs[b:]})


def tiny_cfg(*extra: str):
    return load_config("nci5k", TINY + ["model.pe=none", "train.batch_size=8", "train.threads=1", *extra])


def train_until_a_crash_after_epoch_one(monkeypatch, cfg, out: Path, **kwargs) -> None:
    """``train(cfg, out, **kwargs)`` that crashes right after the first epoch's files and
    checkpoints are written, leaving a run to resume."""
    from siggate.train import record

    original = record.RunFiles.__call__

    class Crash(Exception):
        pass

    def crash_after_first_epoch(self, run, end):
        original(self, run, end)
        if end.row["epoch"] == 1:
            raise Crash

    with monkeypatch.context() as m:
        m.setattr(record.RunFiles, "__call__", crash_after_first_epoch)
        with pytest.raises(Crash):
            train(cfg, out, progress=False, **kwargs)


# --------------------------------------------------------------------------- gate-only differences


def _shared_state(model) -> dict:
    """Every parameter and buffer except the gate rows of the attention in-projection."""
    out = {}
    for name, t in model.state_dict().items():
        if name.endswith("attn.in_proj.weight") or name.endswith("attn.in_proj.bias"):
            t = t[: 3 * model.attention_modules()[0].dim]
        out[name] = t
    return out


def _build(cfg, info):
    return build_model(cfg.model, info, cfg.train.seed)


@pytest.mark.parametrize("gate,position", [("elementwise", "output"), ("headwise", "output"),
                                           ("elementwise", "value"), ("headwise", "post")])
def test_gated_and_ungated_models_share_all_non_gate_initial_weights(gate, position):
    info = synthetic_dataset(8).info
    base = _shared_state(_build(tiny_cfg("model.layers=2", "model.gate=none"), info))
    torch.manual_seed(1234)  # the global RNG state before building must not matter
    gated_model = _build(tiny_cfg("model.layers=2", f"model.gate={gate}", f"model.gate_position={position}"), info)
    gated = _shared_state(gated_model)
    assert gated.keys() == base.keys()
    for name in base:
        assert torch.equal(base[name], gated[name]), name
    assert gated_model.gate_parameter_count() > 0
    other_seed = _shared_state(_build(tiny_cfg("model.layers=2", "model.gate=none", "train.seed=1"), info))
    assert not torch.equal(other_seed["layers.0.ff1.weight"], base["layers.0.ff1.weight"])


def test_data_order_is_a_function_of_seed_and_epoch_only():
    graphs = synthetic_dataset(40).train

    def order(seed, epoch, rank=0, world=1, batch=8):
        return [b.idx.tolist() for b in epoch_loader(graphs, batch, seed, epoch, rank, world)]

    torch.manual_seed(0)
    a = order(3, 1)
    torch.manual_seed(99)
    assert order(3, 1) == a  # independent of the global RNG
    assert order(3, 2) != a and order(4, 1) != a
    assert sorted(sum(a, [])) == sorted(g.idx for g in graphs)
    # two ranks with half the batch together read exactly the single-process global batches
    r0, r1 = order(3, 1, 0, 2, 8), order(3, 1, 1, 2, 8)
    assert [sorted(x + y) for x, y in zip(r0, r1)] == [sorted(x) for x in a]


def test_gate_at_one_trains_exactly_like_no_gate(tmp_path):
    """With the gate bias at 30 an output gate is exactly 1.0 in float32 (and its gradient
    exactly 0), so the gated model computes the ungated one. Identical losses and metrics
    then show that both runs start from the same non-gate weights, read the batches in
    the same order and draw the same dropout masks."""
    ds = synthetic_dataset()
    common = ["train.epochs=3", "train.warmup_epochs=0", "model.dropout=0.2", "model.attn_dropout=0.3"]
    m0 = train(tiny_cfg(*common, "model.gate=none"), tmp_path / "none", progress=False, dataset=ds)
    m1 = train(tiny_cfg(*common, "model.gate=elementwise", "model.gate_bias_init=30"), tmp_path / "gate1",
               progress=False, dataset=ds)
    assert m1["gate_params"] > 0 and m0["gate_params"] == 0
    assert all(g == pytest.approx(1.0) for h in m1["history"] for g in h["gate_mean"])
    for key in ("train_loss", "val", "test"):
        a, b = [h[key] for h in m0["history"]], [h[key] for h in m1["history"]]
        assert b == pytest.approx(a, rel=1e-5, abs=1e-6), key
    assert m0["history"][0]["train_loss"] != m0["history"][2]["train_loss"]  # it did train
    # a gate that is not at 1 does change training
    m2 = train(tiny_cfg(*common, "model.gate=elementwise"), tmp_path / "gate05", progress=False, dataset=ds)
    assert m2["history"][0]["train_loss"] != pytest.approx(m0["history"][0]["train_loss"], rel=1e-4)


# --------------------------------------------------------------------------- schedule and logs


def test_applied_learning_rate_follows_warmup_then_cosine(tmp_path):
    lr, warmup, epochs = 2e-3, 2, 6
    cfg = tiny_cfg(f"train.lr={lr}", f"train.warmup_epochs={warmup}", f"train.epochs={epochs}")
    m = train(cfg, tmp_path / "run", progress=False, dataset=synthetic_dataset(32))
    # hand-computed: linear warmup from ~0 (floored at 1e-6 of the base), then half a cosine to 0
    expected = [lr * 1e-6, lr * 0.5] + [lr * 0.5 * (1 + math.cos(math.pi * k / 4)) for k in range(4)]
    assert expected[2] == lr and expected[4] == pytest.approx(lr / 2)
    assert [h["lr"] for h in m["history"]] == pytest.approx(expected, rel=1e-9)
    with open(tmp_path / "run" / "log.csv") as fh:
        logged = [float(r["lr"]) for r in csv.DictReader(fh)]
    assert logged == pytest.approx(expected, rel=1e-9)


def _scalars(tb_dir: Path) -> dict:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tb_dir))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_tensorboard_events_hold_the_history(tmp_path):
    cfg = tiny_cfg("train.epochs=2", "train.warmup_epochs=0", "model.layers=2")
    m = train(cfg, tmp_path / "run", progress=False, dataset=synthetic_dataset(32))
    sc = _scalars(tmp_path / "run" / "tb")
    h = m["history"]
    assert {"train/loss", "train/lr", "train/grad_norm", "val/mae", "test/mae",
            "gate/mean_layer0", "gate/mean_layer1"} <= set(sc)
    assert [s for s, _ in sc["train/loss"]] == [1, 2]
    assert [v for _, v in sc["train/loss"]] == pytest.approx([r["train_loss"] for r in h], rel=1e-6)
    assert [v for _, v in sc["val/mae"]] == pytest.approx([r["val"] for r in h], rel=1e-6)
    assert [v for _, v in sc["train/grad_norm"]] == pytest.approx([r["grad_norm"] for r in h], rel=1e-6)
    assert [v for _, v in sc["gate/mean_layer1"]] == pytest.approx([r["gate_mean"][1] for r in h], rel=1e-6)
    assert 0 < sc["gate/mean_layer0"][0][1] < 1


def test_tensorboard_failures_never_break_a_run(tmp_path, monkeypatch, caplog):
    import torch.utils.tensorboard as tbmod

    def boom(self, *a, **k):
        raise OSError("No space left on device")

    monkeypatch.setattr(tbmod.SummaryWriter, "add_scalar", boom)
    with caplog.at_level(logging.WARNING, logger="siggate.train"):
        m = train(tiny_cfg("train.epochs=2"), tmp_path / "a", progress=False, dataset=synthetic_dataset(24))
    assert (tmp_path / "a" / "metrics.json").exists() and len(m["history"]) == 2
    assert "TensorBoard logging failed" in caplog.text

    def no_writer(*a, **k):
        raise ImportError("tensorboard is not installed")

    monkeypatch.setattr(tbmod, "SummaryWriter", no_writer)
    m = train(tiny_cfg("train.epochs=1"), tmp_path / "b", progress=False, dataset=synthetic_dataset(24))
    assert (tmp_path / "b" / "metrics.json").exists() and (tmp_path / "b" / "log.csv").exists()


def test_config_yaml_records_version_and_commit(tmp_path):
    import yaml

    import siggate

    train(tiny_cfg("train.epochs=1"), tmp_path / "r", progress=False, dataset=synthetic_dataset(24))
    saved = yaml.safe_load((tmp_path / "r" / "config.yaml").read_text())
    assert saved["_meta"]["siggate_version"] == siggate.__version__
    assert "git_commit" in saved["_meta"]
    assert saved["model"]["layers"] == 1 and saved["train"]["epochs"] == 1


def test_the_commit_is_siggates_own_checkout_and_not_a_project_repository_around_an_install(tmp_path):
    """An installed siggate inside a user's own git repository (``project/.venv``) recorded that
    project's HEAD as siggate's ``git_commit`` in every run; only siggate's own checkout names one."""
    import siggate
    from siggate.train.record import git_commit

    def git(*args, cwd):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                       capture_output=True)

    here = Path(siggate.__file__).resolve().parent
    top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=here, capture_output=True, text=True)
    expected = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True).stdout.strip()
    assert top.returncode == 0 and (Path(top.stdout.strip()) / "src" / "siggate").resolve() == here  # a checkout
    assert git_commit() == expected and len(expected) == 40

    for layout in ("venv/lib/site-packages", "src"):  # installed in a project, or a project's own src/siggate
        project = tmp_path / layout.split("/")[0]
        shutil.copytree(here, project / layout / "siggate", ignore=shutil.ignore_patterns("__pycache__", "*.pt"))
        (project / "pyproject.toml").write_text('[project]\nname = "someones-project"\n')
        git("init", "-q", cwd=project)
        git("add", "-A", cwd=project)
        git("commit", "-q", "-m", "project", cwd=project)
        out = subprocess.run([sys.executable, "-c", "from siggate.train.record import git_commit; print(git_commit())"],
                             cwd=tmp_path, capture_output=True, text=True,
                             env={**os.environ, "PYTHONPATH": str(project / layout)})
        assert out.returncode == 0 and out.stdout.strip() == "None", (layout, out.stdout, out.stderr)


# --------------------------------------------------------------------------- DDP pieces (one process)


def test_cpu_sync_batchnorm_is_batchnorm_outside_a_process_group():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.BatchNorm1d(6), torch.nn.Sequential(torch.nn.BatchNorm1d(6)))
    ref = [m.state_dict() for m in model]
    conv = convert_sync_batchnorm(model, torch.device("cpu"))
    assert isinstance(conv[1], CPUSyncBatchNorm) and isinstance(conv[2][0], CPUSyncBatchNorm)
    assert set(conv[1].state_dict()) == set(ref[1])  # checkpoints stay loadable by plain models
    x = torch.randn(10, 4)
    plain = torch.nn.BatchNorm1d(6)
    plain.load_state_dict(ref[1])
    h = conv[0](x)
    assert torch.allclose(conv[1](h), plain(h))
    assert torch.equal(conv[1].running_mean, plain.running_mean)
    assert not DistContext().distributed and DistContext().all_reduce_sum([1.0, 2.0]) == [1.0, 2.0]


def test_unused_parameters_are_detected_for_ddp():
    from torch_geometric.loader import DataLoader

    from siggate.train.distributed import has_unused_parameters

    ds = synthetic_dataset(8)
    batch = next(iter(DataLoader(ds.train[:2], batch_size=2)))
    gine = _build(tiny_cfg("model.local=gine"), ds.info).train()
    rng = torch.get_rng_state()
    assert not has_unused_parameters(gine, batch)
    assert gine.training and all(p.grad is None for p in gine.parameters())
    assert torch.equal(torch.get_rng_state(), rng)
    # GatedGCN updates edge features; the last layer's updated edges feed nothing
    assert has_unused_parameters(_build(tiny_cfg("model.local=gatedgcn"), ds.info), batch)


def test_ddp_refuses_to_run_outside_torchrun(monkeypatch):
    from siggate.train.distributed import init_distributed

    for var in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(RuntimeError, match="torchrun"):
        init_distributed()


def test_global_batch_must_split_evenly_over_ranks(tmp_path):
    from siggate.config import ConfigError

    with pytest.raises(ConfigError, match="multiple of the world size"):
        train(tiny_cfg("train.batch_size=9"), tmp_path, progress=False, dataset=synthetic_dataset(16),
              dist=DistContext(rank=0, world_size=2))


# --------------------------------------------------------------------------- siggate compare


def test_seed_and_gate_specs():
    assert cmp.parse_seeds("0-4") == [0, 1, 2, 3, 4]
    assert cmp.parse_seeds("3, 0-1,7") == [3, 0, 1, 7]
    for bad in ("4-2", "a", "", "-1"):
        with pytest.raises(ValueError):
            cmp.parse_seeds(bad)
    # a seed twice or an empty entry: refused (0,0 ran one seed; ',elementwise' made a one-arm comparison)
    for bad, why in (("0,0", "seed 0 is listed twice in '0,0'"), ("0-4,3-6", "seed 3 is listed twice"),
                     ("0,,1", "cannot read '' in '0,,1'"),
                     ("0-99999999999", "names more than 10,000 seeds"),  # it walked the range: hung for minutes
                     ("0-5000,6000-11000", "names more than 10,000 seeds")):
        with pytest.raises(ValueError, match=why):
            cmp.parse_seeds(bad)
    assert len(cmp.parse_seeds("0-9999")) == 10_000
    for bad in (",elementwise", "none,,elementwise", "none,"):
        with pytest.raises(ValueError, match="has an empty entry"):
            cmp.parse_gates(bad)
    specs = cmp.parse_gates("none,elementwise@value,headwise")
    assert [s.overrides() for s in specs] == [
        ["model.gate=none"], ["model.gate=elementwise", "model.gate_position=value"], ["model.gate=headwise"]]
    # "elementwise@" ran as its own arm beside elementwise, the same model under another label
    with pytest.raises(ValueError, match=r"^--gates: 'elementwise@' names no position after '@'; give elementwise, "
                                         r"or elementwise@POSITION \(output, value"):
        cmp.parse_gates("none,elementwise@")
    with pytest.raises(ValueError, match=r"^--gates: 'none@' names no position after '@'; give none, or "
                                         r"none@matched-ffn, the parameter-matched control$"):
        cmp.parse_gates("none@,elementwise")
    with pytest.raises(ValueError, match=r"^--gates: unknown gate 'foo' in 'foo@'"):
        cmp.parse_gates("none,foo@")
    # the comparison an earlier siggate ran with that spelling: its arm keeps its label (and run folders)
    assert [s.label for s in cmp.parse_gates("none,elementwise@", recorded=("none", "elementwise@"))] == [
        "none", "elementwise@"]
    for bad in ("none@value", "sigmoid", "elementwise@middle", "none,none", "elementwise@matched",
                "none@matched,none@matched-ffn"):
        with pytest.raises(ValueError):
            cmp.parse_gates(bad)
    # the parameter-matched control: the rule is named in the label and in the config
    [m] = cmp.parse_gates("none@matched")
    assert m.label == "none@matched-ffn" and m.overrides() == ["model.gate=none", "model.param_match=ffn"]


def _compare(argv: list[str]) -> int:
    """``siggate compare ARGV`` through its own argument parser."""
    import argparse

    from siggate.config import ConfigError
    from siggate.config_args import CLIError

    parser = argparse.ArgumentParser(prog="siggate")
    cmp.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["compare", *argv])
    try:
        return args.func(args)
    except (CLIError, ConfigError) as exc:  # as siggate.cli.main reports them
        print(f"siggate compare: error: {exc}", file=sys.stderr)
        return 2


def test_compare_refuses_two_arms_of_one_model(tmp_path, capsys):
    """elementwise@output beside elementwise, where the config's position is output: two labels, one
    model; refused before any run, in one line."""
    out = tmp_path / "cmp"
    assert _compare(["--seeds", "0", "--gates", "elementwise,elementwise@output", "--epochs", "1", "--out", str(out),
                     "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("siggate compare: error: --gates: arms elementwise and elementwise@output train the same model "
                   "(their model configs are equal); list each arm once")
    assert not (out / "runs").exists()
    # runs an earlier siggate trained under both labels still aggregate (nothing trains)
    for seed in (0, 1):
        for gate in ("elementwise", "elementwise@output"):
            _fake_run(out / "runs" / gate / f"seed{seed}", seed, "elementwise", 1.0 + seed, 1.0)
    assert _compare(["--seeds", "0-1", "--gates", "elementwise,elementwise@output", "--epochs", "3", "--out", str(out),
                     "--no-progress", "--aggregate-only"]) == 0
    assert json.loads((out / "results.json").read_text())["n"] == {"elementwise": 2, "elementwise@output": 2}


def _fake_run(run_dir: Path, seed: int, gate: str, test: float, val: float, epochs: int = 3) -> None:
    run_dir.mkdir(parents=True)
    hist = [{"epoch": e + 1, "val": val + 0.1 * (epochs - 1 - e), "train_loss": 1.0} for e in range(epochs)]
    (run_dir / "metrics.json").write_text(json.dumps({
        "dataset": "nci5k", "metric": "mae", "higher_is_better": False, "test": test, "val": val, "seed": seed,
        "gate": gate, "best_epoch": epochs, "seconds": 10.0, "params": 100 + (20 if gate != "none" else 0),
        "gate_params": 20 if gate != "none" else 0, "history": hist}))


def test_compare_aggregates_finished_runs_without_training(tmp_path, monkeypatch, capsys):
    from scipy import stats

    scores = {"none": [1.0, 1.2, 0.9, 1.1, 1.05], "elementwise": [0.9, 1.0, 0.85, 1.0, 1.06],
              "headwise": [1.1, 1.2, 1.0, 1.0, 1.1]}
    out = tmp_path / "cmp"
    for gate, vals in scores.items():
        for seed, v in enumerate(vals):
            _fake_run(out / "runs" / gate / f"seed{seed}", seed, gate, v, v + 0.5)

    popen = subprocess.Popen

    def no_training(cmd, *a, **k):
        assert "train" not in cmd, f"a finished pair was trained again: {cmd}"
        return popen(cmd, *a, **k)

    monkeypatch.setattr(subprocess, "Popen", no_training)
    assert _compare(["--seeds", "0-4", "--gates", "none,elementwise", "--epochs", "3", "--out", str(out),
                     "--no-progress"]) == 0
    res = json.loads((out / "results.json").read_text())
    a, b = scores["none"], scores["elementwise"]
    assert res["per_seed"]["elementwise"] == {str(i): v for i, v in enumerate(b)}
    assert res["per_seed_val"]["none"]["2"] == pytest.approx(1.4)
    assert res["mean"]["none"] == pytest.approx(sum(a) / 5)
    assert res["std"]["elementwise"] == pytest.approx(float(torch.tensor(b, dtype=torch.float64).std()))
    assert res["p_paired_t"] == pytest.approx(stats.ttest_rel(b, a).pvalue)
    assert res["p_wilcoxon"] == pytest.approx(stats.wilcoxon(b, a).pvalue)
    assert res["p_welch"] == pytest.approx(stats.ttest_ind(b, a, equal_var=False).pvalue)
    c = res["vs_baseline"]["elementwise"]
    assert (c["wins"], c["losses"], c["better"]) == (4, 1, "b")  # lower MAE wins
    [pair] = res["comparisons"]
    d = [y - x for x, y in zip(a, b)]
    assert (pair["a"], pair["b"]) == ("none", "elementwise")
    assert pair["diff_mean"] == pytest.approx(sum(d) / 5)
    ci = stats.ttest_rel(b, a).confidence_interval(0.95)
    assert pair["ci95"] == pytest.approx([ci.low, ci.high])
    assert pair["cohen_dz"] == pytest.approx(sum(d) / 5 / float(torch.tensor(d, dtype=torch.float64).std()))
    assert pair["p_holm"] == pytest.approx(pair["p_paired_t"])  # one comparison: nothing to adjust
    assert res["params"] == {"none": 100, "elementwise": 120}
    assert res["failed"] == [] and res["epochs"] == 3
    md = (out / "results.md").read_text()
    assert "test MAE (lower is better)" in md and "score = test MAE at the epoch of best validation MAE." in md
    assert "| `elementwise` | 5 | 0.9620 ± 0.0850 |" in md
    assert "| 4 | 1.0500 | 1.0600 | +0.0100 | `none` |" in md
    assert f"paired t = {res['p_paired_t']:.3g}" in md
    assert "the Wilcoxon test cannot reach p < 0.05" in md  # 5 pairs
    assert "cannot reach p < 0.05" in capsys.readouterr().out
    assert (out / "val_curves.png").read_bytes()[:4] == b"\x89PNG"
    # three gates: p-values per non-baseline gate
    assert _compare(["--seeds", "0-4", "--gates", "none,elementwise,headwise", "--epochs", "3", "--out", str(out),
                     "--no-progress"]) == 0
    res = json.loads((out / "results.json").read_text())
    assert set(res["p_paired_t"]) == {"elementwise", "headwise"}
    assert res["p_welch"]["headwise"] == pytest.approx(stats.ttest_ind(scores["headwise"], a, equal_var=False).pvalue)
    assert [(c["a"], c["b"]) for c in res["comparisons"]] == [
        ("none", "elementwise"), ("none", "headwise"), ("elementwise", "headwise")]
    raw = [c["p_paired_t"] for c in res["comparisons"]]
    order = sorted(range(3), key=raw.__getitem__)
    holm, running = [0.0] * 3, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (3 - rank) * raw[i]))
        holm[i] = running
    assert [c["p_holm"] for c in res["comparisons"]] == pytest.approx(holm)
    assert "## All pairs of arms" in (out / "results.md").read_text()


def test_val_curve_plot_scales_to_what_it_shows(tmp_path, monkeypatch):
    """A loss that falls 10x gets a log axis on the full panel; a flat curve keeps a linear one;
    the right panel starts after half the epochs; one-epoch and missing curves still draw."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    from siggate.train.compare import plot_val_curves

    shown, means, labels = {}, {}, {}
    real_savefig = plt.Figure.savefig

    def savefig(fig, target, **kw):  # a handle on a temporary file beside the picture (it is written atomically)
        shown[drawing] = [(ax.get_yscale(), ax.get_title(), [list(line.get_xdata()) for line in ax.get_lines()])
                          for ax in fig.axes]
        # every epoch drawn is marked: a lone point drew nothing as a line (an --epochs 1 comparison; helper-183)
        assert all(line.get_marker() not in (None, "None", "", " ") for ax in fig.axes for line in ax.get_lines())
        means[drawing] = [list(line.get_ydata()) for line in fig.axes[0].get_lines()]
        labels[drawing] = [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
        return real_savefig(fig, target, **kw)

    def res(curves):
        return {"gates": list(curves), "val_curves": curves, "metric": "mae", "higher_is_better": False,
                "dataset": "zinc"}

    monkeypatch.setattr(plt.Figure, "savefig", savefig)
    falling = {"none": {"0": [2.0, 1.0, 0.5, 0.2, 0.2], "1": [2.1, 0.9, 0.4, 0.2]}, "elementwise": {"0": [], "1": []}}
    diverged = {"none": {"0": [1.0, None, 0.5], "1": [1.2, float("nan"), 0.7]}}  # an epoch no seed scored
    flat = {"none": {"0": [0.30, 0.29]}, "elementwise": {"0": [0.31]}}
    for drawing, curves in (("falling.png", falling), ("flat.png", flat), ("empty.png", {"none": {"0": []}}),
                            ("diverged.png", diverged)):
        plot_val_curves(res(curves), tmp_path / drawing)
        assert (tmp_path / drawing).stat().st_size > 0
    # every epoch over the seeds that reached it (the fifth was cut, unsaid); the right panel shows epochs 3-5
    assert shown["falling.png"] == [("log", "every epoch", [[1, 2, 3, 4, 5]]),
                                    ("linear", "second half of the budget", [[3, 4, 5]])]
    assert means["falling.png"][0] == pytest.approx([2.05, 0.95, 0.45, 0.2, 0.2])
    assert labels["falling.png"] == ["none (n=2; 1 ended before epoch 5)"]
    assert labels["diverged.png"] == ["none (n=2; 2 with non-finite epochs, left out there)"]
    assert means["diverged.png"][0][0] == pytest.approx(1.1) and math.isnan(means["diverged.png"][0][1])
    assert shown["flat.png"] == [("linear", "every epoch", [[1, 2], [1]]),
                                 ("linear", "second half of the budget", [[2], [1]])]
    assert shown["empty.png"][0][2] == [] and (tmp_path / "empty.png").read_bytes()[:4] == b"\x89PNG"


def test_compare_snapshot_and_budget(tmp_path, monkeypatch):
    """``--aggregate-only`` writes results from the finished runs and trains nothing;
    ``--budget`` scales the warmup with the epochs, as ``siggate train --budget`` does."""
    out = tmp_path / "cmp"
    for seed, (x, y) in enumerate([(1.0, 0.9), (1.2, 1.0), (0.9, 0.8)]):
        _fake_run(out / "runs" / "none" / f"seed{seed}", seed, "none", x, x)
        _fake_run(out / "runs" / "none@matched-ffn" / f"seed{seed}", seed, "none", y, y)
    popen = subprocess.Popen

    def no_training(cmd, *a, **k):
        assert "train" not in cmd, f"trained in a snapshot: {cmd}"
        return popen(cmd, *a, **k)

    monkeypatch.setattr(subprocess, "Popen", no_training)
    argv = ["--config", "zinc", "--seeds", "0-3", "--gates", "none,none@matched", "--budget", "60",
            "--out", str(out), "--no-progress", "--aggregate-only"]
    assert _compare(argv) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["missing"] == [{"gate": "none", "seed": 3}, {"gate": "none@matched-ffn", "seed": 3}]
    assert res["n"] == {"none": 3, "none@matched-ffn": 3} and res["failed"] == []
    assert (res["epochs"], res["warmup_epochs"]) == (60, 2)  # zinc: 50 of 2000 epochs -> round(1.5)
    assert res["arms"]["none@matched-ffn"]["overrides"] == ["model.gate=none", "model.param_match=ffn"]
    assert "FFN hidden width 160" in res["arms"]["none@matched-ffn"]["rule"]
    assert "--budget 60" in res["command"] and "--aggregate-only" not in res["command"]
    md = (out / "results.md").read_text()
    assert "Runs not finished yet" in md and "FFN hidden width 160" in md
    assert "| train s/run |" in md  # (the runs' training seconds, to 3 digits: "0" before for short runs)
    # another snapshot keeps the comparison's own wall time, not its own few seconds
    res["wall_seconds"] = 1234.5
    (out / "results.json").write_text(json.dumps(res))
    assert _compare(argv) == 0 and json.loads((out / "results.json").read_text())["wall_seconds"] == 1234.5
    assert _compare(argv[:-1] + ["--epochs", "60"]) == 2  # --epochs and --budget: one of them


def test_compare_end_to_end(tmp_path, monkeypatch):
    """Real ``siggate compare``: two ``python -m siggate train`` processes at a time. One pair
    trains; the other holds a corrupt ``last.pt``: it is resumed, fails, and is reported.
    A rerun skips the finished pair."""
    csv_path = write_tiny_csv(tmp_path / "tiny.csv", n=60)
    out = tmp_path / "cmp"
    broken = out / "runs" / "headwise@value" / "seed0"
    broken.mkdir(parents=True)
    (broken / "last.pt").write_bytes(b"\x00\x01not a checkpoint")  # binary damage (a text file is named as one)
    sets = ["data.name=csv", f"data.csv={csv_path}", "data.target_cols=logp", "data.split=column:split",
            *TINY, "train.warmup_epochs=0", "train.batch_size=16"]
    argv = ["--seeds", "0", "--gates", "none,headwise@value", "--epochs", "2", "--jobs", "2",
            "--threads", "1", "--cache-dir", str(tmp_path / "cache"), "--out", str(out), "--no-progress"]
    for s in sets:
        argv += ["--set", s]
    monkeypatch.setenv("PYTHONPATH", subprocess_env()["PYTHONPATH"])
    assert _compare(argv) == 1  # a pair failed
    res = json.loads((out / "results.json").read_text())
    assert res["metric"] == "mae" and res["higher_is_better"] is False
    done = out / "runs" / "none" / "seed0"
    m = json.loads((done / "metrics.json").read_text())
    assert res["per_seed"]["none"] == {"0": m["test"]} and res["per_seed_val"]["none"] == {"0": m["val"]}
    assert res["val_curves"]["none"]["0"] == [h["val"] for h in m["history"]]
    assert m["gate"] == "none" and m["epochs"] == 2 and m["seed"] == 0 and m["dataset"] == "csv"
    assert "--set model.gate=none" in (done / "train.log").read_text()
    assert "--members gnn" in (done / "train.log").read_text() and not (done / "members.yaml").exists()
    assert "--threads 1" in (done / "train.log").read_text()  # the comparison's threads, as train.threads

    assert [(f["gate"], f["seed"]) for f in res["failed"]] == [("headwise@value", 0)]
    assert "exit status 2" in res["failed"][0]["error"] and "corrupt" in res["failed"][0]["error"]
    log = (broken / "train.log").read_text()
    assert "--resume" in log and "--set model.gate=headwise --set model.gate_position=value" in log
    assert res["per_seed"]["headwise@value"] == {} and res["p_paired_t"] is None  # not hidden, not invented
    # the failure's own cause in its one line, not "exit status 2; see .../train.log:" alone (helper-183)
    failed = next(ln for ln in (out / "results.md").read_text().splitlines() if ln.startswith("- `headwise@value` seed 0"))
    assert failed.startswith(f"- `headwise@value` seed 0: exit status 2; see {broken / 'train.log'}: siggate train: "
                             "error: ") and "corrupt" in failed, failed
    assert res["command"].startswith("siggate compare --config nci5k --seeds 0 --gates none,headwise@value")

    # rerun after removing the broken pair's folder from the comparison: nothing is retrained
    stamp = (done / "metrics.json").stat().st_mtime_ns
    argv[argv.index("none,headwise@value")] = "none"
    assert _compare(argv) == 0
    assert (done / "metrics.json").stat().st_mtime_ns == stamp
    assert json.loads((out / "results.json").read_text())["per_seed"]["none"] == {"0": m["test"]}


def test_a_compared_run_trains_on_the_comparisons_threads():
    """compare --threads N set only OMP_NUM_THREADS for each run, which the nci5k and csv configs'
    train.threads: 1 then undid (the results reported N); each run gets --threads N, unless its
    --set gives train.threads."""
    from siggate.train.executor import RunRequest, train_command

    cmd = train_command(RunRequest("a/seed0", ["--config", "nci5k", "--set", "model.gate=none"], "out/r", 3), False)
    assert cmd[cmd.index("--threads") + 1] == "3"
    for item in ("train.threads=2", " train.threads = 2"):  # the key as the config reads it (override_key)
        given = RunRequest("a/seed0", ["--config", "nci5k", "--set", item], "out/r", 3)
        assert "--threads" not in train_command(given, True)


def test_compare_reports_the_threads_its_set_gives_the_runs(tmp_path, capsys):
    """--set train.threads=M trained each run on M threads while the results reported --threads
    (or cores / jobs); both given contradicted each other silently."""
    out = tmp_path / "cmp"
    for gate in ("none", "elementwise"):
        _fake_run(out / "runs" / gate / "seed0", 0, gate, 1.0, 1.5)
    argv = ["--seeds", "0", "--gates", "none,elementwise", "--epochs", "3", "--out", str(out), "--no-progress",
            "--set", "train.threads=2"]
    assert _compare([*argv, "--threads", "3"]) == 2
    assert "--threads and --set train.threads both set train.threads; give one" in capsys.readouterr().err
    assert not (out / "results.json").exists()
    assert _compare(argv) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["threads"] == 2 and "--set train.threads=2" in res["command"] and "--threads" not in res["command"]
    assert _compare(argv) == 0  # again, over its own results: the stored threads are not made a --threads
    res = json.loads((out / "results.json").read_text())
    assert res["threads"] == 2 and "--threads" not in res["command"]


def test_compare_refuses_a_run_dir_of_another_config(tmp_path, capsys):
    """A run folder holding another config is refused before any run trains (it was listed as
    failed after the others ran, and the results written without it), and nothing is written."""
    out = tmp_path / "cmp"
    run = out / "runs" / "none" / "seed0"
    run.mkdir(parents=True)
    import yaml

    cfg = load_config("nci5k", ["model.gate=none", "train.seed=0", "train.epochs=7"]).to_dict()
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    (run / "metrics.json").write_text(json.dumps({"test": 1.0, "val": 1.0, "metric": "mae"}))
    capsys.readouterr()
    rc = _compare(["--seeds", "0-1", "--gates", "none", "--epochs", "3", "--out", str(out), "--no-progress"])
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{run} holds a run of another config (train.epochs" in err, err
    assert err.endswith("nothing was trained")
    assert not (out / "results.json").exists() and not (out / "runs" / "none" / "seed1").exists()
    assert json.loads((run / "metrics.json").read_text())["test"] == 1.0  # never overwritten


def test_compare_refuses_a_file_where_a_run_folder_goes(tmp_path, capsys):
    """A file at a run folder's path (or at its arm's folder) ended compare in a FileExistsError
    traceback (exit 1) from the worker, the other runs stopped with it: one line, exit 2, before
    any run trains. A worker that cannot make its folder fails that run alone."""
    from siggate.train.executor import RunRequest, run_one

    for blocked in ("runs/none/seed0", "runs/none"):
        out = tmp_path / blocked.replace("/", "_")
        (out / blocked).parent.mkdir(parents=True)
        (out / blocked).write_text("x")
        capsys.readouterr()
        rc = _compare(["--seeds", "0", "--gates", "none", "--epochs", "1", "--out", str(out), "--no-progress"])
        err = capsys.readouterr().err.strip()
        assert rc == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
        assert f"{out / blocked} is a file where the run folder {out / 'runs/none/seed0'} goes; move it away" in err
    result = run_one(RunRequest("k", ["--config", "nci5k"], tmp_path / "runs_none" / "runs" / "none" / "seed0", 1))
    assert result.metrics is None and result.error.startswith("cannot make the run folder")


def test_compare_rejects_bad_arguments(tmp_path, capsys):
    assert _compare(["--gates", "none,sigmoid", "--out", str(tmp_path)]) == 2
    assert "unknown gate 'sigmoid'" in capsys.readouterr().err
    assert _compare(["--set", "model.gate=none", "--out", str(tmp_path)]) == 2
    assert _compare(["--set", "model.layerz=2", "--out", str(tmp_path)]) == 2
    assert _compare(["--epochs", "0", "--out", str(tmp_path)]) == 2
    assert _compare(["--seeds", "3-1", "--out", str(tmp_path)]) == 2
    assert not (tmp_path / "runs").exists()
    capsys.readouterr()
    # a model without attention: every arm the same model (the csv recipe's GNN); both scored the same
    assert _compare(["--set", "model.attn=false", "--seeds", "0", "--out", str(tmp_path / "noattn")]) == 2
    err = capsys.readouterr().err
    assert "this config's model has no attention branch (model.attn: false" in err and "train.init" not in err
    # the csv recipe with attention: its shipped pretrained weights have none, so every arm failed after its data loaded
    csv_sets = ["--set", f"data.csv={tmp_path / 'x.csv'}", "--set", "data.target_cols=[y]", "--set", "model.attn=true"]
    # (and the fix of the recipe without attention led there: it names training from scratch too)
    assert _compare(["--config", "csv", *csv_sets[:4], "--seeds", "0", "--out", str(tmp_path / "csv")]) == 2
    assert capsys.readouterr().err.rstrip().endswith("add --set model.attn=true --set train.init=none (the pretrained "
                                                     "weights have no attention)")
    assert _compare(["--config", "csv", *csv_sets, "--seeds", "0", "--out", str(tmp_path / "init")]) == 2
    assert "arm none: train.init:" in capsys.readouterr().err and not (tmp_path / "init" / "runs").exists()
    # the cliff term on a dataset without SMILES: every run failed once its data loaded; one line before any
    assert _compare(["--set", "train.cliff_weight=1", "--seeds", "0", "--out", str(tmp_path / "cliff")]) == 2
    err = capsys.readouterr().err
    assert "arm none: train.cliff_weight compares a GNN's predictions" in err and "has no SMILES" in err
    assert not (tmp_path / "cliff" / "runs").exists()
    # an arm trained before compare trained the GNN alone: a combination's scores, not the GNN's
    arm = tmp_path / "old" / "runs" / "none" / "seed0"
    arm.mkdir(parents=True)
    (arm / "members.yaml").write_text("{}\n")
    assert _compare(["--seeds", "0", "--gates", "none,elementwise", "--out", str(tmp_path / "old")]) == 2
    assert f"{arm} holds a run of several members" in capsys.readouterr().err


def test_compare_needs_an_arms_init_file_only_where_a_run_starts(tmp_path, monkeypatch, capsys):
    """Every run of the arms finished: their weights are in their folders, so the pretrained file
    the arms started from may have moved (compare refused them all before planning); a run still
    to start is refused, naming the file, before any run."""
    out = tmp_path / "cmp"
    for gate in ("none", "elementwise"):
        for seed, v in enumerate([1.0, 1.1]):
            _fake_run(out / "runs" / gate / f"seed{seed}", seed, gate, v, v + 0.5)
    gone = tmp_path / "moved" / "pretrained.pt"
    argv = ["--seeds", "0-1", "--gates", "none,elementwise", "--set", f"train.init={gone}", "--out", str(out),
            "--no-progress", "--aggregate-only"]
    assert _compare(argv) == 0, capsys.readouterr().err
    assert json.loads((out / "results.json").read_text())["n"] == {"none": 2, "elementwise": 2}
    assert _compare(["--seeds", "0-2", *argv[2:-1]]) == 2  # seed 2 would start from the file
    assert f"train.init: {gone} does not exist" in capsys.readouterr().err
    assert not (out / "runs" / "none" / "seed2").exists()


@pytest.mark.parametrize("select, said", [("best", "at the epoch of best validation MAE"), ("auto", "at the epoch of best "
                                          "validation MAE"), ("last", "at the schedule's last epoch (train.select=last")])
def test_results_md_names_the_epoch_its_scores_are_taken_at(select, said):
    # results.md said "at the epoch of best validation" for runs of train.select=last, which keep the last
    from siggate.train.compare import _scored_epoch

    assert _scored_epoch({"config": {"train": {"select": select}}}, "MAE").startswith(said)


def test_compare_refuses_a_flag_with_the_key_it_sets_before_any_run(tmp_path, capsys):
    """--epochs 2 --set train.epochs=5 went to every run, each of which refuses the pair."""
    out = tmp_path / "cmp"
    for argv, message in ((["--epochs", "2", "--set", "train.epochs=5"], "--epochs and --set train.epochs both set "
                                                                         "train.epochs; give one"),
                          (["--cache-dir", str(tmp_path / "c"), "--set", f"data.cache_dir={tmp_path / 'd'}"],
                           "--cache-dir and --set data.cache_dir both set data.cache_dir; give one")):
        assert _compare(["--seeds", "0", "--gates", "none,elementwise", "--out", str(out), "--no-progress", *argv]) == 2
        assert message in capsys.readouterr().err
    assert not (out / "runs").exists()


def test_a_comparison_that_would_leave_out_arms_or_seeds_of_the_recorded_one_is_refused(tmp_path, capsys):
    """A second comparison into one --out with fewer gates or seeds replaced results.json with its own,
    and the first comparison's record was gone without a word; one that adds to it still runs."""
    out = tmp_path / "cmp"
    for gate in ("none", "elementwise"):
        for seed in (0, 1):
            _fake_run(out / "runs" / gate / f"seed{seed}", seed, gate, 1.0 + seed, 1.5)
    common = ["--epochs", "3", "--out", str(out), "--no-progress"]
    assert _compare(["--seeds", "0,1", "--gates", "none,elementwise", *common]) == 0
    kept = (out / "results.json").read_bytes()
    for argv, left in ((["--seeds", "0", "--gates", "none,elementwise"], "seed 1"),
                       (["--seeds", "0,1", "--gates", "none"], "arm elementwise"),
                       (["--seeds", "1", "--gates", "none", "--aggregate-only"], "arm elementwise, seed 0")):
        capsys.readouterr()
        assert _compare([*argv, *common]) == 2
        assert capsys.readouterr().err.strip() == (
            f"siggate compare: error: {out} holds the results of a comparison with {left}, which these flags leave out; "
            "give them too (a comparison in a folder grows, it is not cut), or another --out (or move "
            f"{out / 'results.json'} away to keep the smaller one)")
        assert (out / "results.json").read_bytes() == kept
    # a value this siggate refuses, recorded by an older one: named as the record's
    doc = json.loads(kept)
    (out / "results.json").write_text(json.dumps({**doc, "command": doc["command"].replace("--seeds 0,1", "--seeds 0,0")}))
    capsys.readouterr()
    assert _compare(["--out", str(out), "--aggregate-only", "--no-progress"]) == 2
    assert capsys.readouterr().err.strip() == (f"siggate compare: error: the comparison in {out} records this --seeds: "
                                               "--seeds: seed 0 is listed twice in '0,0'; list each seed once; give "
                                               "--seeds as it should be")
    (out / "results.json").write_bytes(kept)
    _fake_run(out / "runs" / "none" / "seed2", 2, "none", 3.0, 1.5)
    _fake_run(out / "runs" / "elementwise" / "seed2", 2, "elementwise", 3.0, 1.5)
    assert _compare(["--seeds", "0-2", "--gates", "none,elementwise", *common]) == 0  # it grows
    assert json.loads((out / "results.json").read_text())["n"] == {"none": 3, "elementwise": 3}


def test_an_interrupted_comparison_says_how_to_resume(tmp_path, capsys, monkeypatch):
    """Ctrl-C printed 'siggate compare: interrupted' alone, where train and pretrain say how to go on."""
    from siggate.cli import main

    def stop(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cmp, "compare", stop)
    assert main(["compare", "--seeds", "0", "--gates", "none", "--epochs", "1", "--out", str(tmp_path / "c")]) == 130
    assert capsys.readouterr().err == ("siggate compare: interrupted; run the same command again to resume (finished "
                                       "runs are kept, unfinished ones resume)\n")


def test_a_comparison_records_its_paths_absolute(tmp_path, monkeypatch):
    """The command results.json records named --config myz.yaml and --set data.csv=mine.csv as
    typed: --aggregate-only from another folder looked for them there, and called the runs another
    config (helper-183). Paths are absolute with ~ expanded; a built-in config stays a name."""
    import argparse

    from siggate.train.compare import _absolute_paths

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "myz.yaml").write_text("data: {name: zinc}\n")
    nulls = ["data.cache_dir=null", "data.cache_dir=~", "data.root=Null", "train.init=pretrained", "train.init=none"]
    args = argparse.Namespace(config="myz.yaml", data_root="data", cache_dir="~/c",
                              overrides=["data.csv=mine.csv", "data.root='~/r'", "model.dim=16", "train.init=w.pt",
                                         "data.csv='it''s.csv'", *nulls])
    _absolute_paths(args)
    assert (args.config, args.data_root, args.cache_dir) == (str(tmp_path / "myz.yaml"), str(tmp_path / "data"),
                                                             str(tmp_path / "home" / "c"))
    # read as the config reads them: YAML's nulls stay null, shipped weights stay named (helper-188)
    assert args.overrides == [f'data.csv="{tmp_path / "mine.csv"}"', f'data.root="{tmp_path / "home" / "r"}"',
                              "model.dim=16", f'train.init="{tmp_path / "w.pt"}"', f'data.csv="{tmp_path / "it"}\'s.csv"',
                              *nulls]
    builtin = argparse.Namespace(config="zinc", data_root=None, cache_dir=None, overrides=[])
    _absolute_paths(builtin)
    assert builtin.config == "zinc"


def test_a_comparison_whose_runs_all_failed_says_no_run_scored(tmp_path):
    """Every run failed: results.md's title read "?, test metric (lower is better)" (no direction is
    known), its time column 'nan', stdout 'test None n/a ± n/a' (helper-183)."""
    from siggate.train.compare import aggregate, parse_gates, render_markdown
    from siggate.train.study import StudyRun

    specs = parse_gates("none,elementwise")
    pairs = [StudyRun((s.label, 0), tmp_path / s.label, {}, None, tag=(s, 0), state="failed", returncode=2,
                      error=f"exit status 2; see {tmp_path}/train.log:\nsiggate train: error: non-finite loss (nan)")
             for s in specs]
    res = {**aggregate(pairs, specs, [0]), "command": "siggate compare ...", "epochs": 1, "threads": 1}
    md = render_markdown(res)
    assert md.splitlines()[0] == "# siggate compare: no run scored, test metric"
    assert "| `none` | 0 | n/a (no run scored) | n/a (no run scored) | n/a | n/a | n/a |" in md
    assert f"- `none` seed 0: exit status 2; see {tmp_path}/train.log: siggate train: error: non-finite loss (nan)" in md


def test_a_failed_runs_line_names_its_own_attempts_cause():
    """The cause is this attempt's last error line after its "$ command" line: the command line
    (an --out named cmp_error) and an earlier attempt's error were taken for it (helper-188)."""
    from siggate.train.executor import failure_line

    head = "exit status -9; see runs/cmp_error/none/seed0/train.log:"
    assert failure_line(f"{head}\n$ python -m siggate train --out runs/cmp_error/none/seed0\nepoch 1 ...") == \
        "exit status -9; see runs/cmp_error/none/seed0/train.log: epoch 1 ..."
    old = f"{head}\n$ python -m siggate train\nsiggate train: error: an old cause\n$ python -m siggate train --resume\n"
    assert failure_line(old + "siggate train: error: non-finite loss (nan)") == \
        "exit status -9; see runs/cmp_error/none/seed0/train.log: siggate train: error: non-finite loss (nan)"
    assert failure_line(old) == "exit status -9; see runs/cmp_error/none/seed0/train.log"  # killed before a word
    assert failure_line("") == failure_line(None) == "failed"
