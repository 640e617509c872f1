"""Exact resume after a hard kill: ``python -m siggate train`` is SIGKILLed in the middle of
an epoch, restarted with ``--resume``, and must end with exactly the metrics of an
uninterrupted run (dropout, attention dropout and LapPE sign flips all draw random numbers)."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from test_engine import TINY, _float32, csv_train_args, subprocess_env, write_tiny_csv  # noqa: F401

EPOCHS = 4


def _rows(path: Path) -> list[dict]:
    try:
        with open(path) as fh:
            return list(csv.DictReader(fh))
    except FileNotFoundError:
        return []


def _config_args(tmp_path: Path) -> list[str]:
    csv_path = write_tiny_csv(tmp_path / "tiny.csv", n=300)
    sets = TINY + ["model.pe=lappe", "model.dropout=0.1", "model.attn_dropout=0.2", "train.batch_size=8",
                   "train.warmup_epochs=1", "train.threads=1"]
    args = ["--config", "nci5k", *csv_train_args(csv_path, tmp_path / "cache"), "--seed", "3",
            "--epochs", str(EPOCHS)]
    for s in sets:
        args += ["--set", s]
    return args


def _start(args: list[str], out: Path, log: Path, resume: bool = False) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "siggate", "train", *args, "--out", str(out), "--no-progress"]
    # SIGHUP at its default in the run: under nohup (a suite started so) it inherited SIG_IGN, which siggate
    # rightly keeps, and the SIGHUP case then trained to its end
    return subprocess.Popen(cmd + (["--resume"] if resume else []), stdout=open(log, "a"),
                            stderr=subprocess.STDOUT, env=subprocess_env(),
                            preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL))


def _first_checkpoint(proc: subprocess.Popen, run: Path, log: Path) -> None:
    """Wait until the training ``proc`` into ``run`` has checkpointed its first epoch."""
    deadline = time.time() + 600
    while not (_rows(run / "log.csv") and (run / "last.pt").exists()):
        assert proc.poll() is None, f"training ended before its first checkpoint:\n{log.read_text()}"
        assert time.time() < deadline, "no checkpoint after 10 minutes"
        time.sleep(0.02)


def test_sigkill_in_the_middle_of_an_epoch_then_resume_is_exact(tmp_path):
    args = _config_args(tmp_path)
    run, log = tmp_path / "killed", tmp_path / "killed.log"
    started = [_start(args, run, log)]
    # the uninterrupted reference run, same config, alongside (a process too, so that both
    # run the very same code from the same starting state)
    started.append(_start(args, tmp_path / "reference", tmp_path / "reference.log"))
    proc, reference = started
    try:
        _first_checkpoint(proc, run, log)  # then kill during a later epoch
        epoch_seconds = float(_rows(run / "log.csv")[-1]["seconds"])
        time.sleep(0.4 * epoch_seconds)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        done = len(_rows(run / "log.csv"))
        assert proc.returncode == -signal.SIGKILL
        assert 1 <= done < EPOCHS and not (run / "metrics.json").exists(), "the kill must land inside the run"
        ckpt_epoch = torch.load(run / "last.pt", weights_only=True)["state"]["epoch"]
        assert ckpt_epoch >= 1 and ckpt_epoch in (done - 1, done)

        started.append(_start(args, run, log, resume=True))
        assert started[-1].wait(timeout=600) == 0, log.read_text()
        assert reference.wait(timeout=600) == 0, (tmp_path / "reference.log").read_text()
    finally:
        for p in started:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert f"resumed from {run / 'last.pt'} at epoch {ckpt_epoch}" in log.read_text()

    ref = json.loads((tmp_path / "reference" / "metrics.json").read_text())
    got = json.loads((run / "metrics.json").read_text())
    for key in ("val", "test", "best_epoch", "epochs", "params"):
        assert got[key] == ref[key], key
    for key in ("train_loss", "val", "test", "lr", "grad_norm", "gate_mean"):
        assert [h[key] for h in got["history"]] == [h[key] for h in ref["history"]], key
    assert len({h["train_loss"] for h in got["history"]}) == EPOCHS  # it trained
    rows = _rows(run / "log.csv")
    assert [int(r["epoch"]) for r in rows] == list(range(1, EPOCHS + 1))  # no duplicated epochs
    assert not list(run.glob(".*.tmp"))


def test_a_resume_of_another_config_is_refused_in_one_line(tmp_path):
    """The refusal listed each difference on a line of its own after 'the config differs:'."""
    import pytest

    from siggate.train.checkpoint import CheckpointError
    from test_predict import tiny_config, train_tiny

    train_tiny(tmp_path / "run", tiny_config(train={"epochs": 1}))
    with pytest.raises(CheckpointError) as exc:
        train_tiny(tmp_path / "run", tiny_config(train={"epochs": 2, "lr": 0.01}, model={"dropout": 0.3}), resume=True)
    text = str(exc.value)
    assert "\n" not in text and text.startswith(f"cannot resume from {tmp_path / 'run' / 'last.pt'}: the config differs (")
    assert "model.dropout" in text and "train.lr" in text
    assert text.endswith("); resume with the run's own flags, or train into a new --out")


def test_a_stop_between_best_and_last_resumes_from_the_newer_best(tmp_path, monkeypatch, caplog):
    """An epoch that improved writes best.pt, then last.pt. A run stopped between the two resumes
    from best.pt, the newer whole state: from last.pt it trained that epoch again, and where the
    epoch came out otherwise (GPU kernels), best.pt held an epoch its history did not. The stored
    epoch is marked (its ``seconds``, as a rerun would change them) to tell the two apart."""
    import logging

    import siggate.train.record as record
    from siggate.train.runfiles import BEST, LAST
    from test_predict import tiny_config, train_tiny

    cfg = tiny_config(train={"epochs": 4})
    ref = train_tiny(tmp_path / "reference", cfg)
    improved = [e for e in range(2, 4) if ref["history"][e - 1]["val"] < min(h["val"] for h in ref["history"][:e - 1])]
    assert improved, ref["history"]  # the tiny run improves after its first epoch
    stop_at = improved[0]
    save = record.atomic_save

    class Stopped(Exception):
        pass

    def stop_before_last(ckpt, path):
        if Path(path).name == LAST and ckpt["state"]["epoch"] == stop_at:
            ckpt["history"][-1]["seconds"] = 12345.0  # the mark of the stored epoch
            save(ckpt, Path(path).with_name(BEST))  # the best.pt of this epoch, with the mark
            raise Stopped
        return save(ckpt, path)

    monkeypatch.setattr(record, "atomic_save", stop_before_last)
    try:
        train_tiny(tmp_path / "run", cfg)
    except Stopped:
        pass
    monkeypatch.setattr(record, "atomic_save", save)
    run = tmp_path / "run"
    assert torch.load(run / "last.pt", weights_only=True)["state"]["epoch"] == stop_at - 1
    assert record.resume_checkpoint(run) == run / "best.pt"
    os.utime(run / "best.pt", ns=(10**9, 10**9))  # copied without its times (cp -r): the epochs still decide
    assert record.resume_checkpoint(run) == run / "best.pt"
    with caplog.at_level(logging.WARNING, logger="siggate.train"):
        got = train_tiny(run, cfg, resume=True)
    assert "stopped after writing best.pt and before last.pt" in caplog.text
    assert got["history"][stop_at - 1]["seconds"] == 12345.0  # not trained again
    for key in ("val", "test", "best_epoch"):
        assert got[key] == ref[key], key
    assert [h["val"] for h in got["history"]] == [h["val"] for h in ref["history"]]
    # an ordinary run: last.pt is written after best.pt, and a best.pt of an older epoch is never taken
    assert record.resume_checkpoint(tmp_path / "reference") == tmp_path / "reference" / "last.pt"
    os.utime(tmp_path / "reference" / "best.pt", ns=(time.time_ns() + 10**9,) * 2)  # newer file, older epoch
    assert record.resume_checkpoint(tmp_path / "reference") == tmp_path / "reference" / "last.pt"


@pytest.mark.parametrize("kind, status, said", [("SIGTERM", 143, "terminated (SIGTERM)"),
                                                ("SIGHUP", 129, "hung up (SIGHUP)")])
def test_sigterm_stops_a_run_as_ctrl_c_does_and_it_resumes(tmp_path, kind, status, said):
    """SIGTERM (a scheduler, kill, lanes.sh stop) and SIGHUP (the terminal closed, an ssh session
    lost) ended the process at once: nothing said, no cleanup (temporary files stayed). They stop
    the command as Ctrl-C does: one line naming the signal and how to resume, exit status 128 +
    the signal's number, no temporary file left; the run then resumes to its end."""
    args = _config_args(tmp_path)
    run, log = tmp_path / "run", tmp_path / "run.log"
    proc = _start(args, run, log)
    try:
        _first_checkpoint(proc, run, log)
        os.kill(proc.pid, getattr(signal, kind))
        assert proc.wait(timeout=120) == status, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text()
    assert f"siggate train: {said}; " in text and "--resume" in text and "Traceback" not in text, text
    assert not list(run.glob(".*.tmp")) and not list(run.glob("*.tmp"))
    assert not (run / "metrics.json").exists()
    resumed = _start(args, run, log, resume=True)
    assert resumed.wait(timeout=600) == 0, log.read_text()
    assert json.loads((run / "metrics.json").read_text())["epochs"] == EPOCHS


def test_a_signal_before_the_command_runs_is_one_line(monkeypatch, capsys):
    """Ctrl-C or SIGTERM in the first half second (while the commands' modules are imported to
    build the parser) ended in a traceback: one line, the signal's status."""
    import siggate.cli as cli

    for stop, status, said in ((KeyboardInterrupt(), 130, "interrupted"),
                               (cli.Terminated(signal.SIGTERM), 143, "terminated (SIGTERM)"),
                               (cli.Terminated(signal.SIGHUP), 129, "hung up (SIGHUP)")):
        def build_parser(stop=stop):
            raise stop

        monkeypatch.setattr(cli, "build_parser", build_parser)
        assert cli.main(["train", "--help"]) == status
        assert capsys.readouterr().err == f"siggate: {said}\n"


def test_a_hang_up_keeps_its_status_where_the_terminal_is_gone_and_nohup_is_kept(monkeypatch):
    """After SIGHUP stderr is often the closed terminal: writing the stop line raised EIO, and the
    command ended in a traceback with status 1. The handlers are put back after the command, and
    a SIGHUP that nohup ignores stays ignored."""
    import errno

    import siggate.cli as cli

    class Gone:
        def write(self, text):
            raise OSError(errno.EIO, "Input/output error")

        def flush(self):
            raise OSError(errno.EIO, "Input/output error")

    def build_parser():
        raise cli.Terminated(signal.SIGHUP)

    monkeypatch.setattr(cli, "build_parser", build_parser)
    monkeypatch.setattr(cli, "_open_standard_streams", lambda: frozenset())
    monkeypatch.setattr(sys, "stderr", Gone())
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGHUP)
    assert cli.main(["train"]) == 129
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGHUP)) == before
    seen = []

    def ran(argv):
        seen.append(signal.getsignal(signal.SIGHUP))
        return 0

    monkeypatch.setattr(cli, "_main", ran)
    old = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # (nohup)
    try:
        assert cli.main([]) == 0 and seen == [signal.SIG_IGN]
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, old)
    import copy

    assert copy.copy(cli.Terminated(signal.SIGHUP)).signum == signal.SIGHUP
