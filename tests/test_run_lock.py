"""One run per output folder (issue 30): a second ``train`` (plain, ``--ensemble``, ``--resume``,
``--overwrite``) or ``pretrain`` into a folder that another live process is writing into is
refused in one line with exit code 2; a killed run leaves no stale lock; a run refused before
it wrote anything leaves no folder behind.

The other process is real: a ``siggate train`` subprocess, or a small Python process that
holds the folder's lock (cheaper to start, and it can be killed at a known moment).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from test_bad_inputs import _TRAIN_ARGS, _write_train_csv
from test_predict import one_thread, run_cli, subprocess_env


@pytest.fixture(autouse=True)
def _single_thread(monkeypatch):
    monkeypatch.setenv("SIGGATE_OFFLINE", "1")
    with one_thread():
        yield


def _wait_for(cond, proc: subprocess.Popen, what: str, timeout: float = 240.0) -> None:
    t0 = time.time()
    while not cond():
        if proc.poll() is not None:
            raise AssertionError(f"the other process ended (rc {proc.returncode}) before {what}: "
                                 f"{proc.stdout.read() if proc.stdout else ''}")
        if time.time() - t0 > timeout:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _holder(folder: Path) -> subprocess.Popen:
    """A separate process that holds ``folder``'s lock until it is killed."""
    code = textwrap.dedent(f"""
        import sys, time
        from siggate.files import FolderLock
        FolderLock({str(folder)!r}).acquire()
        print("held", flush=True)
        time.sleep(600)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], env=subprocess_env(), stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def _refusal(err: str, command: str, folder: Path, pid: int) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.startswith(f"siggate {command}: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert (f"another siggate process (pid {pid} on {socket.gethostname()}) is writing into {folder}; two runs "
            "must not write into one folder") in lines[0]
    return lines[0]


def test_a_second_train_into_a_live_runs_folder_is_refused(tmp_path, capsys):
    """A real ``siggate train`` is running into OUT: a second run there is refused in every
    form (new, --overwrite, --resume, --ensemble) and changes nothing; once the first is killed
    (no clean exit), its folder can be taken over at once."""
    data = tmp_path / "d.csv"
    _write_train_csv(data)
    out = tmp_path / "run"
    cache = str(tmp_path / "c")
    first = subprocess.Popen([sys.executable, "-m", "siggate", "train", "--data", str(data), *_TRAIN_ARGS,
                              "--epochs", "400", "--out", str(out), "--cache-dir", cache],
                             env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        _wait_for(lambda: (out / "log.csv").is_file(), first, "its first epoch")
        epochs = (out / "log.csv").read_text()
        for extra in ([], ["--overwrite"], ["--ensemble", "2"]):
            rc, _, err = run_cli(["train", "--data", str(data), *_TRAIN_ARGS, "--epochs", "1", "--out", str(out),
                                  "--cache-dir", cache, *extra], capsys)
            assert rc == 2
            _refusal(err, "train", out, first.pid)
        rc, _, err = run_cli(["train", "--resume", str(out)], capsys)
        assert rc == 2
        _refusal(err, "train", out, first.pid)
        assert (out / "log.csv").read_text().startswith(epochs)  # the first run's log, nobody else's
        assert first.poll() is None  # and it still runs
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    assert (out / "config.yaml").is_file() and not (out / "metrics.json").exists()
    rc, _, err = run_cli(["train", "--data", str(data), *_TRAIN_ARGS, "--epochs", "1", "--out", str(out),
                          "--cache-dir", cache, "--overwrite"], capsys)
    assert rc == 0, err  # the killed run left no stale lock
    assert json.loads((out / "metrics.json").read_text())["epochs"] == 1
    assert not (out / ".siggate.lock").exists()


def test_pretrain_into_a_held_folder_is_refused_and_a_dead_holder_frees_it(tmp_path, capsys):
    out = tmp_path / "pt"
    holder = _holder(out)
    try:
        rc, _, err = run_cli(["pretrain", "--smiles", str(tmp_path / "none.smi"), "--out", str(out)], capsys)
        assert rc == 2
        _refusal(err, "pretrain", out, holder.pid)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    rc, _, err = run_cli(["pretrain", "--smiles", str(tmp_path / "none.smi"), "--out", str(out)], capsys)
    assert rc == 2 and "--smiles" in err and "no such file" in err  # past the lock: the next check speaks


def test_a_default_folder_in_use_is_skipped(tmp_path, capsys, monkeypatch):
    """Without --out the run takes the next free default name instead of the one in use."""
    monkeypatch.chdir(tmp_path)
    data = tmp_path / "d.csv"
    _write_train_csv(data)
    busy = Path("runs/d-csv-attnoff-seed0")
    holder = _holder(tmp_path / busy)
    try:
        rc, stdout, err = run_cli(["train", "--data", str(data), *_TRAIN_ARGS, "--epochs", "1", "--cache-dir",
                                   str(tmp_path / "c")], capsys)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert rc == 0, err
    assert "-> runs/d-csv-attnoff-seed0-2" in stdout
    assert (tmp_path / "runs/d-csv-attnoff-seed0-2/metrics.json").is_file()
    assert list((tmp_path / busy).iterdir()) == [tmp_path / busy / ".siggate.lock"]  # the holder's, untouched


def test_a_run_refused_at_its_data_stage_leaves_no_folder(tmp_path, capsys):
    """The folder (and parents) this run created are removed; a folder that was there stays."""
    data = tmp_path / "d.csv"
    data.write_text("smiles,y,split\nCCO,1,train\nCCC,2,train\n")  # val and test empty: refused
    for out, existed in ((tmp_path / "a" / "b" / "run", False), (tmp_path / "mine", True)):
        if existed:
            out.mkdir()
        rc, _, err = run_cli(["train", "--data", str(data), *_TRAIN_ARGS, "--epochs", "1", "--out", str(out),
                              "--cache-dir", str(tmp_path / "c")], capsys)
        assert rc == 2 and "the val and test splits are empty" in err
        assert out.is_dir() == existed and (not existed or list(out.iterdir()) == [])
    assert not (tmp_path / "a").exists()


def test_the_lock_names_its_holder_and_is_free_after_release(tmp_path):
    from siggate.files import FolderBusy, FolderLock, folder_busy

    folder = tmp_path / "x"
    with FolderLock(folder):
        assert folder_busy(folder) == f"pid {os.getpid()} on {socket.gethostname()}"
        assert folder_busy(folder, others=True) is None  # this process's own lock
        (folder / FolderLock.NAME).write_text(f"pid {os.getpid()}0 on {socket.gethostname()}\n")  # another's text
        assert folder_busy(folder, others=True) == f"pid {os.getpid()}0 on {socket.gethostname()}"
        with pytest.raises(FolderBusy, match=f"pid {os.getpid()}"):
            FolderLock(folder).acquire()  # one process, two claims: refused as well
    assert folder_busy(folder) is None and not folder.exists()


def test_a_run_of_several_members_holds_its_folder(tmp_path, capsys, monkeypatch):
    """``--members``, ``--ensemble`` and ``--weights`` (issue 31) go through the same claim:
    refused in one line while another process holds OUT, and the folder is this process's for
    the whole of ``train_members`` (seen from inside it), free again when it ends."""
    import siggate.train.ensemble as ensemble
    from siggate.files import folder_busy

    data = tmp_path / "d.csv"
    _write_train_csv(data)
    out = tmp_path / "run"
    holder = _holder(out)
    try:
        for extra in (["--members", "gnn", "--weights", "val"], ["--ensemble", "2", "--weights", "val"]):
            rc, _, err = run_cli(["train", "--data", str(data), *_TRAIN_ARGS, "--epochs", "1", "--out", str(out),
                                  "--cache-dir", str(tmp_path / "c"), *extra], capsys)
            assert rc == 2
            _refusal(err, "train", out, holder.pid)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    seen = []

    def inside(cfg, folder, kinds, *args, **kwargs):  # stands in for the members' training
        seen.append((folder, list(kinds), args[0], kwargs["weights"], folder_busy(folder)))
        raise KeyboardInterrupt

    monkeypatch.setattr(ensemble, "train_members", inside)
    rc, _, err = run_cli(["train", "--data", str(data), *_TRAIN_ARGS, "--epochs", "1", "--out", str(out),
                          "--cache-dir", str(tmp_path / "c"), "--members", "gnn", "--ensemble", "2", "--weights", "val"],
                          capsys)
    assert rc == 130, err
    assert seen == [(out, ["gnn"], 2, "val", f"pid {os.getpid()} on {socket.gethostname()}")]
    assert folder_busy(out) is None and not (out / ".siggate.lock").exists()


def test_a_member_trained_on_its_own_claims_its_run_of_members(tmp_path, capsys, monkeypatch):
    """``train --resume run/member0`` while the run of members trained that member was let in (the
    run locks only its own folder): both wrote member0's log.csv and last.pt. The member's run of
    members is claimed too: refused in one line while another process holds it, and held (then
    freed) while the member trains on its own, so the run of members is refused meanwhile."""
    import siggate.train.pipeline as pipeline
    from siggate.files import folder_busy

    data = tmp_path / "d.csv"
    _write_train_csv(data)
    run = tmp_path / "run"
    member = run / "member0"
    rc, _, err = run_cli(["train", "--data", str(data), *_TRAIN_ARGS, "--epochs", "1", "--out", str(member),
                          "--cache-dir", str(tmp_path / "c")], capsys)
    assert rc == 0, err
    (run / "members.yaml").write_text("kinds: [gnn]\nensemble: 1\nweights: equal\n")
    holder = _holder(run)
    try:
        rc, _, err = run_cli(["train", "--resume", str(member), "--epochs", "2"], capsys)
        from siggate.cli import claim_out_dir  # a folder of another name in the run's (an explanation's) is no member

        claim_out_dir(run / "explained", resume=True, what="the explanations").release()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert err == (f"siggate train: error: --out {member} is a member of the run in {run}, and another siggate process "
                   f"(pid {holder.pid} on {socket.gethostname()}) is writing into {run}: two runs must not train one "
                   "member; wait for it to end\n")
    assert json.loads((member / "metrics.json").read_text())["epochs"] == 1
    seen = []

    def inside(cfg, out, *args, **kwargs):  # stands in for the member's training
        seen.append((out, folder_busy(out), folder_busy(run)))
        raise KeyboardInterrupt

    monkeypatch.setattr(pipeline, "train", inside)
    rc, _, err = run_cli(["train", "--resume", str(member), "--epochs", "2"], capsys)
    assert rc == 130, err
    me = f"pid {os.getpid()} on {socket.gethostname()}"
    assert seen == [(member, me, me)]
    assert folder_busy(run) is None and not (run / ".siggate.lock").exists() and folder_busy(member) is None


def test_predict_from_a_folder_a_run_is_training_into_names_it(tmp_path, capsys, caplog):
    """predict on a run still training said 'a folder with no predictor.json and neither
    ensemble.json nor best.pt; give a run folder' (it was one); once its first best.pt was written it
    predicted from that epoch without a word. The training run is named: refused before its first
    checkpoint, a warning after."""
    import logging

    data = tmp_path / "d.csv"
    _write_train_csv(data)
    done = tmp_path / "done"
    rc, _, err = run_cli(["train", "--data", str(data), *_TRAIN_ARGS, "--epochs", "1", "--out", str(done),
                          "--cache-dir", str(tmp_path / "c")], capsys)
    assert rc == 0, err
    live = tmp_path / "live"
    holder = _holder(live)
    try:
        rc, _, err = run_cli(["predict", "--checkpoint", str(live), "CCO"], capsys)
        assert rc == 2 and err == (f"siggate predict: error: {live}: a run is still training there (pid {holder.pid} "
                                   f"on {socket.gethostname()}), and its predictor is written when it finishes; try "
                                   "again then\n"), err
        (live / "best.pt").write_bytes((done / "best.pt").read_bytes())  # its best epoch so far
        with caplog.at_level(logging.WARNING, logger="siggate"):
            rc, out, err = run_cli(["predict", "--checkpoint", str(live), "CCO"], capsys)
        assert rc == 0 and out.startswith("smiles,"), err
        assert f"{live}: a run is training there now (pid {holder.pid} on {socket.gethostname()}): what is read is " \
            "the run as it stands" in caplog.text
    finally:
        holder.kill()
        holder.wait()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="siggate"):
        assert run_cli(["predict", "--checkpoint", str(live), "CCO"], capsys)[0] == 0
    assert "training there" not in caplog.text
