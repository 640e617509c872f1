"""``siggate compare --backend ray``: the same per-seed numbers as the local back-end, a killed
worker's run retried and resumed, and a clear error when Ray is not installed."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from test_engine import TINY, _float32, subprocess_env, write_tiny_csv  # noqa: F401


def _compare(argv: list[str], env: dict, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "siggate", "compare", *argv], env=env, capture_output=True,
                          text=True, timeout=900, **kw)


def test_ray_gives_the_local_numbers_on_nci5k(tmp_path):
    env = subprocess_env()
    common = ["--config", "nci5k", "--seeds", "0-1", "--gates", "none,elementwise", "--epochs", "1", "--threads", "1",
              "--cache-dir", str(tmp_path / "cache"), "--no-progress"]
    local = _compare(common + ["--out", str(tmp_path / "local")], env)
    assert local.returncode == 0, local.stderr
    ray = _compare(common + ["--out", str(tmp_path / "ray"), "--backend", "ray", "--cpus-per-run", "1"], env)
    assert ray.returncode == 0, ray.stderr
    a = json.loads((tmp_path / "local" / "results.json").read_text())
    b = json.loads((tmp_path / "ray" / "results.json").read_text())
    assert a["per_seed"] == b["per_seed"] and a["per_seed_val"] == b["per_seed_val"]  # exactly, not approximately
    assert sorted(a["per_seed"]["elementwise"]) == ["0", "1"]
    assert "--backend ray" in b["command"]
    assert "as Ray schedules them, 1 thread(s) each" in ray.stdout + ray.stderr  # (it named --jobs, which Ray ignores)
    for seed in (0, 1):  # per-run logs land in each run's folder, as with the local back-end
        log = (tmp_path / "ray" / "runs" / "elementwise" / f"seed{seed}" / "train.log").read_text()
        assert "siggate train" in log and "test" in log


def test_a_killed_worker_is_retried_and_resumes(tmp_path):
    """Kill the Ray worker of a run after its first epoch: the run is retried, resumes from
    its last checkpoint, and ends with the numbers of an uninterrupted run."""
    csv_path = write_tiny_csv(tmp_path / "tiny.csv", n=200)
    sets = ["data.name=csv", f"data.csv={csv_path}", "data.target_cols=logp", "data.split=column:split", *TINY,
            "train.warmup_epochs=0", "train.batch_size=8"]
    common = ["--seeds", "0", "--gates", "elementwise", "--epochs", "6", "--threads", "1",
              "--cache-dir", str(tmp_path / "cache"), "--no-progress"]
    for s in sets:
        common += ["--set", s]
    env = subprocess_env()
    out = tmp_path / "ray"
    run = out / "runs" / "elementwise" / "seed0"
    proc = subprocess.Popen([sys.executable, "-m", "siggate", "compare", *common, "--out", str(out), "--backend", "ray",
                             "--max-retries", "2"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while time.time() < deadline:  # wait for the first finished epoch
        log = run / "log.csv"
        if log.exists() and len(log.read_text().splitlines()) >= 2 and (run / "last.pt").exists():
            break
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    else:
        proc.kill()
        pytest.fail("the run never finished an epoch")
    victim = int((run / "worker.pid").read_text())
    os.kill(victim, signal.SIGKILL)
    stdout, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 0, stderr
    assert int((run / "worker.pid").read_text()) != victim  # a new worker ran it again
    log = (run / "train.log").read_text()
    assert log.count("$ ") == 2 and "--resume" in log.split("$ ")[2]
    res = json.loads((out / "results.json").read_text())
    local = _compare(common + ["--out", str(tmp_path / "local")], env)
    assert local.returncode == 0, local.stderr
    ref = json.loads((tmp_path / "local" / "results.json").read_text())
    assert res["per_seed"] == ref["per_seed"] and res["val_curves"] == ref["val_curves"]


def test_without_ray_the_error_names_the_extra(tmp_path):
    fake = tmp_path / "no_ray" / "ray"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('No module named ray')\n")
    env = subprocess_env()
    env["PYTHONPATH"] = str(fake.parent) + os.pathsep + env["PYTHONPATH"]
    ok = subprocess.run([sys.executable, "-c", "import siggate.cli, siggate.train.compare, siggate.train.executor"],
                        env=env, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr  # importing siggate does not need Ray
    r = _compare(["--seeds", "0", "--gates", "none", "--epochs", "1", "--out", str(tmp_path / "x"), "--backend",
                  "ray", "--no-progress"], env)
    assert r.returncode == 2
    assert "pip install 'siggate[ray]'" in r.stderr and "Traceback" not in r.stderr
    r = _compare(["--seeds", "0", "--gates", "none", "--out", str(tmp_path / "y"), "--ray-address", "auto"], env)
    assert r.returncode == 2 and "--ray-address needs --backend ray; drop it, or add --backend ray" in r.stderr


def test_analysis_sweep_on_ray_gives_the_local_numbers(tmp_path):
    """``siggate analyze lr-sweep --backend ray``: each training run is a Ray task that loads the
    (cut) dataset itself; the sweep's numbers equal the in-process ones."""
    env = subprocess_env()
    argv = ["analyze", "lr-sweep", "--config", "nci5k", "--lrs", "1e-3,1e-2", "--gates", "none,elementwise",
            "--epochs", "1", "--max-graphs", "64", "--threads", "1", "--cache-dir", str(tmp_path / "cache"),
            "--no-progress"]
    for s in TINY:
        argv += ["--set", s]
    res = {}
    for backend in ("local", "ray"):
        out = tmp_path / backend
        r = subprocess.run([sys.executable, "-m", "siggate", *argv, "--backend", backend, "--out", str(out)],
                           env=env, capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, r.stderr
        res[backend] = json.loads((out / "lrsweep.json").read_text())
        assert (out / "runs" / "lr0.01-elementwise-s0" / "metrics.json").exists()
    for g in ("none", "elementwise"):
        assert [p["scores"] for p in res["ray"]["per_lr"][g]] == [p["scores"] for p in res["local"]["per_lr"][g]]


def test_ray_only_flags_without_ray_are_refused_not_ignored():
    """--cpus-per-run 0, --gpus-per-run -1 or --max-retries -1 with the local back-end trained as
    if they were not there (Ray's own checks never ran)."""
    import argparse

    from siggate.train.executor import (
        ExecutorError,
        LocalExecutor,
        add_executor_args,
        check_backend_flags,
        check_resources,
        executor_from_args,
        task_threads,
    )

    p = argparse.ArgumentParser()
    add_executor_args(p)
    for argv, named in ((["--cpus-per-run", "0"], "--cpus-per-run needs"), (["--gpus-per-run", "-1"], "--gpus-per-run needs"),
                        (["--max-retries", "-1", "--ray-dashboard"], "--ray-dashboard, --max-retries need")):
        with pytest.raises(ExecutorError) as e:
            executor_from_args(p.parse_args(argv))
        assert str(e.value).startswith(f"{named} --backend ray; drop")
    assert isinstance(executor_from_args(p.parse_args([])), LocalExecutor)
    # with Ray, refused before it starts (helper-174: Ray's ValueError, or a NaN's int(), as a traceback)
    for argv, said in ((["--gpus-per-run", "-1"], "--gpus-per-run must be >= 0, got -1.0"),
                       (["--gpus-per-run", "nan"], "--gpus-per-run must be >= 0, got nan"),
                       (["--cpus-per-run", "nan"], "--cpus-per-run must be > 0, got nan"),
                       (["--cpus-per-run", "0"], "--cpus-per-run must be > 0, got 0.0"),
                       (["--cpus-per-run", "inf"], "--cpus-per-run must be > 0, got inf"),
                       (["--max-retries", "-1"], "--max-retries must be >= 0, got -1")):
        with pytest.raises(ExecutorError, match=f"^{re.escape(said)}$"):
            check_backend_flags(p.parse_args(["--backend", "ray", *argv]))
    check_backend_flags(p.parse_args(["--backend", "ray", "--gpus-per-run", "0", "--cpus-per-run", "0.5"]))
    with pytest.raises(ExecutorError, match=r"^--max-retries must be a whole number, got 1.5$"):  # (a direct call)
        check_resources(1, None, 1.5)
    # a Ray task's torch threads: its declared cores (an analysis sweep ran each at all of the node's)
    assert [task_threads(p.parse_args(["--backend", "ray", *a])) for a in ([], ["--cpus-per-run", "0.5"],
                                                                           ["--cpus-per-run", "3.7"])] == [1, 1, 3]


def test_analyze_refuses_ray_only_flags_before_it_prepares_any_data(tmp_path, capsys):
    """``analyze smoothing`` refused --cpus-per-run without --backend ray only after preparing its
    dataset (55 s): the refusal comes when the command line is parsed, before the data is read
    (here a data root that does not exist is never looked at)."""
    from test_predict import run_cli

    for cmd in (["analyze", "smoothing", "--depths", "2"], ["analyze", "lr-sweep"]):
        rc, _, err = run_cli([*cmd, "--cpus-per-run", "2", "--data-root", str(tmp_path / "nowhere"), "--out",
                              str(tmp_path / "an")], capsys)
        assert rc == 2 and err == f"siggate {cmd[0]}: error: --cpus-per-run needs --backend ray; drop it, or add --backend ray\n"
        assert not (tmp_path / "an").exists() and not (tmp_path / "nowhere").exists()


def test_an_address_where_no_cluster_answers_is_refused_at_once(tmp_path, capsys):
    """``--ray-address HOST:PORT`` where nothing listens waited minutes inside Ray's connect
    (a warning every few seconds) before it failed: refused before any data is read, naming the
    address; a malformed address names the form; a port that answers and 'auto' pass the check."""
    import socket

    from siggate.train.executor import ExecutorError, RayExecutor, check_address
    from test_predict import run_cli

    with socket.socket() as s:  # a port nothing listens on once it is closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for address in (f"127.0.0.1:{port}", f"ray://127.0.0.1:{port}"):
        start = time.monotonic()
        with pytest.raises(ExecutorError, match=rf"^--ray-address {re.escape(address)}: nothing answers there "
                                                r"\(Connection refused\); start the cluster \('ray start --head' on that"):
            check_address(address)
        assert time.monotonic() - start < 5
    for bad in ("localhost", "host:", ":6379", "host:99999", "host:port"):
        with pytest.raises(ExecutorError, match=rf"^--ray-address {re.escape(repr(bad))}: give 'auto' or HOST:PORT"):
            check_address(bad)
    with socket.socket() as s:  # a port that answers
        s.bind(("127.0.0.1", 0))
        s.listen()
        check_address(f"127.0.0.1:{s.getsockname()[1]}")
    check_address(None)
    check_address("auto")
    # the CLI: one line, exit 2, before the data root is looked at
    rc, _, err = run_cli(["analyze", "lr-sweep", "--backend", "ray", "--ray-address", f"127.0.0.1:{port}",
                          "--data-root", str(tmp_path / "nowhere"), "--out", str(tmp_path / "an")], capsys)
    assert rc == 2 and err.startswith(f"siggate analyze: error: --ray-address 127.0.0.1:{port}: nothing answers there")
    assert err.count("\n") == 1 and not (tmp_path / "nowhere").exists()
    with pytest.raises(ExecutorError, match="nothing answers there"):  # a direct RayExecutor too
        RayExecutor(address=f"127.0.0.1:{port}")


def test_a_run_that_raises_on_ray_is_reported_with_its_cause(tmp_path):
    """A Ray task whose run raised (a damaged checkpoint of an analysis run) is reported with
    the run's own error, its type and message: Ray's text is the task's name, pid and address
    in terminal colours, and the report read only that."""
    from siggate.train.executor import CallRequest, RayExecutor

    bad = tmp_path / "last.pt"
    bad.write_text("not a checkpoint\n")
    results = []
    RayExecutor(cpus_per_run=1, max_retries=0).run(
        [CallRequest("k", "siggate.train.checkpoint:load_checkpoint", {"path": str(bad)}, tmp_path / "run")],
        results.append)
    (res,) = results
    assert not res.ok
    assert res.error.startswith("Ray task failed (the run raised an error): CheckpointError: ")
    assert f"{bad} is a text file (CSV or other text), not a checkpoint" in res.error
    assert "\x1b[" not in res.error and "ray::" not in res.error and "\n" not in res.error


def test_runs_failed_on_ray_end_an_analysis_in_one_line_naming_each_cause(tmp_path, monkeypatch):
    """An analysis sweep whose Ray runs failed stops with one line (a CLIError: exit 2), naming
    each failed run and its cause (it raised a RuntimeError: a traceback, exit 1)."""
    import siggate.train.executor as executor
    from siggate.analysis.common import train_many
    from siggate.config import load_config
    from siggate.config_args import CLIError

    class Failing:
        def run(self, requests, on_done):
            for r in requests:
                on_done(executor.RunResult(r.key, None, None, "Ray task failed (the run raised an error): "
                                           "CheckpointError: last.pt is damaged"))

    monkeypatch.setattr(executor, "executor_from_args", lambda args: Failing())
    cfg = load_config("nci5k")
    args = type("A", (), {"backend": "ray", "threads": 1, "cpus_per_run": None})()
    with pytest.raises(CLIError) as err:
        train_many({"a": (cfg, tmp_path / "a"), "b": (cfg, tmp_path / "b")}, None, args, progress=False)
    assert str(err.value) == (
        "2 of 2 runs failed on Ray: run a: Ray task failed (the run raised an error): CheckpointError: last.pt is "
        "damaged; run b: Ray task failed (the run raised an error): CheckpointError: last.pt is damaged (the finished "
        "runs are kept: mend the cause and run the command again to train the others)")


def test_sigterm_stops_a_comparison_on_ray_as_it_stops_a_local_one(tmp_path):
    """``kill`` of a ``siggate compare --backend ray``: exit status 143 and the line that says how
    to resume, as on the local back-end. ray.init put its own SIGTERM handler under siggate's (a
    stack dump, then abort: exit status 134, nothing said), and once that was undone Ray's wait
    turned siggate's Terminated into a bare KeyboardInterrupt ("interrupted", 130)."""
    csv_path = write_tiny_csv(tmp_path / "tiny.csv", n=60)
    argv = ["--seeds", "0", "--gates", "none", "--epochs", "50", "--threads", "1", "--no-progress",
            "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "ray"), "--backend", "ray"]
    for s in ["data.name=csv", f"data.csv={csv_path}", "data.target_cols=logp", "data.split=column:split", *TINY]:
        argv += ["--set", s]
    proc = subprocess.Popen([sys.executable, "-m", "siggate", "compare", *argv], env=subprocess_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pid = tmp_path / "ray" / "runs" / "none" / "seed0" / "worker.pid"
    deadline = time.time() + 120
    while not pid.exists():  # the run's task has started: the driver waits in ray.wait
        assert proc.poll() is None and time.time() < deadline, proc.communicate()
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 143, stderr
    assert stderr.rstrip().endswith("siggate compare: terminated (SIGTERM); run the same command again to resume "
                                    "(finished runs are kept, unfinished ones resume)"), stderr
    assert "SIGTERM received" not in stderr and "Traceback" not in stderr


class _FakeRay:
    """Ray as RayExecutor.run asks it, of the nodes ``nodes``: a run submitted is waited for (an
    AssertionError); ``started``: an instance the caller started, which siggate does not own."""

    def __init__(self, nodes: list, started: bool = False):
        self._nodes, self.started = nodes, started

    def is_initialized(self):
        return self.started

    def init(self, **kw):  # siggate starts this machine's instance
        pass

    def shutdown(self):
        pass

    def nodes(self):
        return self._nodes

    def cluster_resources(self):
        return {}

    def remote(self, fn):
        return self

    def options(self, **kw):
        return self

    def wait(self, refs, num_returns=1):
        raise AssertionError("the runs were submitted, and waited for")

    def cancel(self, ref, force=False):
        pass


def test_a_run_no_node_can_hold_is_refused_not_waited_for_for_ever(tmp_path, capsys):
    """``--gpus-per-run 1`` on a machine without a GPU (or ``--cpus-per-run`` above its cores):
    Ray keeps a task that fits no node waiting, without a word, and the comparison hung for ever
    (killed by a timeout after 90 s, nothing said). This machine's instance now refuses it in one
    line naming the flag; a cluster's, which an autoscaler may grow, warns and goes on."""
    from siggate.train.executor import ExecutorError, RayExecutor, RunRequest

    nodes = [{"Alive": True, "Resources": {"CPU": 2.0}}, {"Alive": False, "Resources": {"CPU": 8.0, "GPU": 1.0}}]
    req = [RunRequest("k", [], tmp_path / "run")]
    for cpus, gpus, said in ((1, 1, "--gpus-per-run 1: no node of the Ray instance has 1 GPU(s) (the most on one node: "
                                    "0), so no run could start and the command would wait for ever; lower "
                                    "--gpus-per-run (0: the runs train on CPU)"),
                             (3, 0, "--cpus-per-run 3: no node of the Ray instance has 3 CPU(s) (the most on one node: "
                                    "2), so no run could start and the command would wait for ever; lower "
                                    "--cpus-per-run")):
        ex = RayExecutor(cpus_per_run=cpus, gpus_per_run=gpus)
        ex.ray = _FakeRay(nodes)
        with pytest.raises(ExecutorError) as err:
            ex.run(req, lambda r: None)
        assert str(err.value) == said
    idle = RayExecutor(cpus_per_run=1, gpus_per_run=1)  # every run finished: nothing to hold, nothing refused
    idle.ray = _FakeRay(nodes)
    idle.run([], lambda r: None)
    fits = RayExecutor(cpus_per_run=2, gpus_per_run=0)
    fits.ray = _FakeRay(nodes)
    with pytest.raises(AssertionError, match="waited for"):  # a run that fits is submitted as before
        fits.run(req, lambda r: None)
    # an instance the caller started (ray.init before siggate's executor) may be a cluster that grows: a warning
    theirs = RayExecutor(cpus_per_run=3, gpus_per_run=0)
    theirs.ray = _FakeRay(nodes, started=True)
    capsys.readouterr()
    with pytest.raises(AssertionError, match="waited for"):
        theirs.run(req, lambda r: None)
    assert capsys.readouterr().err.startswith("siggate: warning: --cpus-per-run 3: no node of the Ray instance has 3")


def test_a_run_whose_cpus_and_gpus_no_one_node_holds_together_is_refused(tmp_path):
    """A task's CPUs and GPUs must fit on one node: --cpus-per-run 2 --gpus-per-run 1 on a node of 8
    CPUs without a GPU beside a node of 1 CPU and 1 GPU passed the check of each resource alone, and
    Ray kept the run waiting for ever."""
    from siggate.train.executor import ExecutorError, RayExecutor, RunRequest

    req = [RunRequest("k", [], tmp_path / "run")]
    nodes = [{"Alive": True, "Resources": {"CPU": 8.0}}, {"Alive": True, "Resources": {"CPU": 1.0, "GPU": 1.0}}]
    ex = RayExecutor(cpus_per_run=2, gpus_per_run=1)
    ex.ray = _FakeRay(nodes)
    with pytest.raises(ExecutorError) as err:
        ex.run(req, lambda r: None)
    assert str(err.value).startswith("--cpus-per-run 2 --gpus-per-run 1: no node of the Ray instance has both")
    fits = RayExecutor(cpus_per_run=1, gpus_per_run=1)  # the GPU node holds one run
    fits.ray = _FakeRay(nodes)
    with pytest.raises(AssertionError, match="waited for"):
        fits.run(req, lambda r: None)
