"""Distributed data parallel on CPU: two gloo processes launched by torchrun train like one
process with the same global batch, and only rank 0 writes files."""

from __future__ import annotations

import argparse
import csv
import json
import socket
import subprocess
import sys

import pytest
import torch

from test_engine import TINY, _float32, csv_train_args, subprocess_env, write_tiny_csv  # noqa: F401

EPOCHS = 3
# Tolerances of the DDP/single-process comparison. Both see the same global batches and
# BatchNorm statistics are synchronised over the two ranks (CPUSyncBatchNorm), so the
# training losses and gradient norms differ only by float32 rounding (the batch statistics
# and the gradients are summed in another order): about 1e-7 relative after 18 steps.
LOSS_RTOL = 1e-5
# Validation/test metrics use the BatchNorm running means, and those follow the biases of
# the layers just before a BatchNorm. Such a bias cancels in training mode, so its gradient
# is pure rounding noise, which Adam rescales into lr-sized steps: these biases (and with
# them the running means) drift differently in any two runs that round differently, while
# the training loss does not move. Hence a loose tolerance on the evaluated metrics.
EVAL_RTOL = 5e-2
# With the statistics recomputed on the training set before each evaluation
# (train.eval_norm=train, rank 0 alone, no collective), such a bias cancels in eval as it
# does in training: the metrics then agree about as closely as the losses.
EVAL_RTOL_RECOMPUTED = 1e-4


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("eval_norm, eval_rtol", [("running", EVAL_RTOL), ("train", EVAL_RTOL_RECOMPUTED)])
def test_two_rank_ddp_matches_one_process_and_writes_once(tmp_path, eval_norm, eval_rtol):
    from siggate.config_args import add_config_args, config_from_args
    from siggate.train.pipeline import train

    csv_path = write_tiny_csv(tmp_path / "tiny.csv", n=120)  # 96 training graphs
    sets = TINY + ["model.dropout=0", "model.attn_dropout=0", "train.batch_size=16", "train.warmup_epochs=0",
                   "train.threads=1", "train.lr=0.002", f"train.eval_norm={eval_norm}"]
    args = ["--config", "nci5k", *csv_train_args(csv_path, tmp_path / "cache"), "--epochs", str(EPOCHS)]
    for s in sets:
        args += ["--set", s]
    out = tmp_path / "ddp"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc_per_node=2",
           "--master_addr=127.0.0.1", f"--master_port={_free_port()}",
           "-m", "siggate", "train", "--ddp", *args, "--out", str(out), "--no-progress"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=subprocess_env())
    # meanwhile: the single-process reference with the same global batch, in this process
    parser = argparse.ArgumentParser()
    add_config_args(parser)
    ref = train(config_from_args(parser.parse_args(args)), tmp_path / "single", progress=False)
    log, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, log
    assert "world_size=2" in log

    got = json.loads((out / "metrics.json").read_text())
    assert got["world_size"] == 2 and ref["world_size"] == 1
    assert [h["lr"] for h in got["history"]] == [h["lr"] for h in ref["history"]]
    for key, rtol in (("train_loss", LOSS_RTOL), ("grad_norm", LOSS_RTOL), ("val", eval_rtol), ("test", eval_rtol)):
        a, b = [h[key] for h in ref["history"]], [h[key] for h in got["history"]]
        assert b == pytest.approx(a, rel=rtol), key
    losses = [h["train_loss"] for h in ref["history"]]
    assert losses[-1] < losses[0]  # it trained, so the match is not trivial

    # rank 0 alone wrote: one set of files, no leftovers of atomic writes, one event file,
    # one log row per epoch
    assert sorted(p.name for p in out.iterdir()) == ["best.pt", "calibration.json", "config.yaml", "data_report.csv",
                                                     "domain.json", "domain_fingerprints.npz", "fitted_molecules.json", "last.pt",
                                                     "learning_curves.png", "log.csv", "metrics.json", "parity.png",
                                                     "predictor.json", "splits.csv", "tb", "test_predictions.csv"]
    assert len(list((out / "tb").iterdir())) == 1
    with open(out / "log.csv") as fh:
        assert [int(r["epoch"]) for r in csv.DictReader(fh)] == list(range(1, EPOCHS + 1))
    ckpt = torch.load(out / "last.pt", weights_only=True)
    assert ckpt["world_size"] == 2 and len(ckpt["rng_ranks"]) == 2
    assert ckpt["state"]["epoch"] == EPOCHS
    # the checkpoint is a plain model's (SyncBatchNorm leaves no trace in the keys)
    assert set(ckpt["model"]) == set(torch.load(tmp_path / "single" / "last.pt", weights_only=True)["model"])
    assert [h["world_size"] for h in got["history"]] == [2] * EPOCHS and [h["world_size"] for h in ref["history"]] == \
        [1] * EPOCHS
    if eval_norm == "train":  # resumed in one process: the record said world_size 1 for the whole run
        from siggate.cli import main

        assert main(["train", "--resume", "--out", str(out), "--epochs", str(EPOCHS + 1), "--no-progress"]) == 0
        again = json.loads((out / "metrics.json").read_text())
        assert [h["world_size"] for h in again["history"]] == [2] * EPOCHS + [1] and again["world_size"] == 1


@pytest.mark.parametrize("name", ["l1", "mse", "bce", "ce", "weighted_ce"])
def test_the_ranks_loss_shares_step_as_the_whole_batch_does(name):
    """DDP averages the ranks' gradients, and each rank's loss was the mean over its own labels:
    a rank holding fewer labels (a target missing on its molecules; smaller graphs of a node
    task, ce) weighed as much as one holding many, so --ddp trained another model than one
    process (a relative gradient difference of 0.3 on a two-target CSV). The mean of the ranks'
    shares' gradients is now the whole batch's loss gradient, on unequal shares; the collective
    is played here by summing what each rank gives it."""
    from siggate.train.losses import LOSSES, loss_share

    g = torch.Generator().manual_seed(0)
    if name in ("ce", "weighted_ce"):
        pred = torch.randn(11, 4, generator=g)  # (the SBM weights are float32, as training's logits)
        y = torch.tensor([0, 1, 1, 2, 0, 3, 3, 3, 1, 0, 2])
        cuts = [slice(0, 8), slice(8, 11)]  # 8 nodes on one rank, 3 on the other
    else:
        pred = torch.randn(10, 2, generator=g, dtype=torch.float64)
        y = torch.rand(10, 2, generator=g, dtype=torch.float64)
        y = (y > 0.5).double() if name == "bce" else y
        y[5:, 1] = float("nan")  # the second target missing on the second rank's molecules
        y[0, 0] = float("nan")
        cuts = [slice(0, 5), slice(5, 10)]
    whole = pred.clone().requires_grad_(True)
    LOSSES[name](whole, y).backward()
    answers: list[list[float]] = []  # each collective's sum over the ranks, found one round at a time

    def played(record):
        def all_sum(values):
            record.append(list(values))
            i = len(record) - 1
            return answers[i] if i < len(answers) else list(values)
        return all_sum

    while True:
        given = [[] for _ in cuts]
        for cut, record in zip(cuts, given):
            loss_share(name, pred[cut], y[cut], played(record))
        if len(answers) == len(given[0]):
            break
        answers.append([sum(v) for v in zip(*(record[len(answers)] for record in given))])
    shared = pred.clone().requires_grad_(True)
    logged = 0.0
    for cut in cuts:
        loss, weight = loss_share(name, shared[cut], y[cut], played([]))
        (loss / len(cuts)).backward()  # DDP's mean over the ranks
        logged += float(loss) * weight
    tol = 1e-12 if pred.dtype == torch.float64 else 1e-6
    assert torch.allclose(shared.grad, whole.grad, rtol=tol, atol=tol * 1e-3)
    assert logged / len(y) == pytest.approx(float(LOSSES[name](pred, y)), rel=tol)  # the batch's mean, as logged


def test_the_cliff_term_is_refused_under_ddp(tmp_path, capsys):
    """The cliff term pairs similar molecules of a batch; --ddp splits each batch over the ranks,
    so the pairs across them were lost without a word: refused, naming the cause, by the command
    line before a folder is claimed (no rank started) and by the training loop."""
    from siggate.train.losses import cliff_term_refusal
    from test_bad_inputs import _TRAIN_ARGS, _write_train_csv
    from test_predict import run_cli

    data = tmp_path / "d.csv"
    _write_train_csv(data)
    rc, _, err = run_cli(["train", "--ddp", "--data", str(data), *_TRAIN_ARGS, "--set", "train.cliff_weight=1",
                          "--out", str(tmp_path / "run")], capsys)
    assert rc == 2 and "--ddp splits each batch over the ranks" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "run").exists()

    assert cliff_term_refusal(True, "regression") is None
    assert cliff_term_refusal(True, "regression", distributed=True) == (
        "train.cliff_weight compares a GNN's predictions for similar molecules of a regression task; here --ddp "
        "splits each batch over the ranks, and the pairs across them would be lost (train without --ddp): drop --set "
        "train.cliff_weight")


def test_ddp_with_members_names_the_recipes_members_or_the_users(tmp_path, capsys):
    """--ddp --data without --members blamed '--ensemble/--members', flags the user never gave: the
    --data recipe's own members (gnn,svr,rf) are named, with --members gnn as the way."""
    from test_bad_inputs import _write_train_csv
    from test_predict import run_cli

    data = tmp_path / "d.csv"
    _write_train_csv(data)
    for extra, message in (([], "--ddp trains one GNN, and this recipe trains the members gnn,svr,rf one after the "
                                "other: add --members gnn to train its GNN under torchrun"),
                           (["--members", "gnn,svr"], "--ensemble/--members train their members one after the other; "
                                                      "they do not combine with --ddp"),
                           (["--ensemble", "2"], "--ensemble/--members train their members one after the other; "
                                                 "they do not combine with --ddp")):
        rc, _, err = run_cli(["train", "--ddp", "--data", str(data), "--target-col", "y", *extra, "--out",
                              str(tmp_path / "run")], capsys)
        assert rc == 2 and err == f"siggate train: error: {message}\n", err
        assert not (tmp_path / "run").exists()
    run = tmp_path / "members"  # a run of members resumed under --ddp: its record's members are named
    assert run_cli(["train", "--data", str(data), "--target-col", "y", "--members", "svr,rf", "--out", str(run)],
                   capsys)[0] == 0
    rc, _, err = run_cli(["train", "--ddp", "--resume", "--out", str(run)], capsys)
    assert rc == 2 and err == (f"siggate train: error: --ddp trains one GNN, and the run in {run} trains the members "
                               "svr,rf one after the other: resume it without --ddp\n"), err


def test_data_rank_0_refuses_stops_the_other_ranks_without_a_traceback(tmp_path):
    """A CSV without a numeric label under ``--ddp``: rank 0 says why in one line, and the other
    rank stops quietly (exit status 2). It waited in a barrier rank 0 never reached, and rank 0's
    exit ended it in a gloo traceback ("Connection closed by peer") below the error line."""
    bad = tmp_path / "bad.csv"
    bad.write_text("smiles,y\nCCO,abc\nCCC,def\nCCN,x\n")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc_per_node=2",
           "--master_addr=127.0.0.1", f"--master_port={_free_port()}", "-m", "siggate", "train", "--ddp",
           "--data", str(bad), "--target-col", "y", "--members", "gnn", "--init", "none", "--epochs", "1",
           "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "run"), "--no-progress"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=subprocess_env(), timeout=300)
    log = r.stdout + r.stderr
    assert r.returncode != 0
    assert log.count("siggate train: error: ") == 1 and "target column 'y' holds no numeric value" in log
    assert "[rank1]" not in log and "Connection closed by peer" not in log, log
    assert "exitcode: 2" in log and "exitcode: 1" not in log, log  # both ranks: a refusal's status


def test_a_terminated_ddp_run_says_once_how_to_resume_it(tmp_path):
    """SIGTERM to torchrun (a scheduler ending the job): torchrun passes it to every rank, and each
    printed 'siggate train: terminated (SIGTERM)' with no resume command, which a run in one
    process prints. Rank 0 alone now says it, with the torchrun command that resumes the run."""
    import time

    csv_path = write_tiny_csv(tmp_path / "tiny.csv", n=60)
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc_per_node=2",
           "--master_addr=127.0.0.1", f"--master_port={_free_port()}", "-m", "siggate", "train", "--ddp",
           "--config", "nci5k", *csv_train_args(csv_path, tmp_path / "cache"), "--epochs", "500", "--out", str(out),
           "--no-progress"]
    for s in TINY + ["train.batch_size=8"]:
        cmd += ["--set", s]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=subprocess_env())
    deadline = time.time() + 120
    while not ((out / "log.csv").is_file() and len((out / "log.csv").read_text().splitlines()) >= 2):
        assert proc.poll() is None and time.time() < deadline, proc.communicate()
        time.sleep(0.1)
    proc.terminate()
    log, _ = proc.communicate(timeout=120)
    said = [ln for ln in log.splitlines() if ln.startswith("siggate train: terminated")]
    assert said == [f"siggate train: terminated (SIGTERM); resume with: torchrun --nproc_per_node=2 -m siggate train "
                    f"--ddp --resume {out}"], log


def test_the_ddp_resume_line_of_a_job_on_several_nodes_is_no_one_node_command(tmp_path, monkeypatch):
    """The resume line named ``torchrun --nproc_per_node=WORLD_SIZE``: on 2 nodes of 4 ranks it told
    one node to start 8 ranks, without the job's rendezvous. A job on one node keeps the command."""
    from siggate.cli import _ddp_resume_hint
    from siggate.train import rundir

    monkeypatch.setattr(rundir, "holds_run", lambda out: True)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert _ddp_resume_hint(tmp_path, 8) == ("resume with the same torchrun command on each node, running siggate "
                                             f"train --ddp --resume {tmp_path}")
    assert _ddp_resume_hint(tmp_path, 4) == f"resume with: torchrun --nproc_per_node=4 -m siggate train --ddp --resume {tmp_path}"
    monkeypatch.delenv("LOCAL_WORLD_SIZE")
    assert _ddp_resume_hint(tmp_path, 2) == f"resume with: torchrun --nproc_per_node=2 -m siggate train --ddp --resume {tmp_path}"
