"""The peers harness (benchmarks/peers/run.py) plans and executes through the study API
(``siggate.train.study``): one row per run in a locked results file, done rows skipped, failed
ones tried again, named recipes (issue 31 item 4); and its tasks read the shared data from
siggate's data root (issue 30 item 7)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmark_scripts import load

peers = load("peers_run", "peers/run.py")

TEST = [("CCO", 1.0), ("CCN", 2.0), ("CCC", 4.0)]


def _fake_build(name, data_dir):
    """A task folder as tasks.build writes one (data.csv, test.csv) and its meta."""
    d = Path(data_dir) / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "data.csv").write_text("smiles,y,split\nC,0.5,train\nCC,0.7,val\n" + "".join(f"{s},{y},test\n" for s, y in TEST))
    (d / "test.csv").write_text("smiles,y\n" + "".join(f"{s},{y}\n" for s, y in TEST))
    return {"name": name, "size": 5, "data_sha256": "d" * 64, "splits_sha256": "s" * 64, "builder_version": 1}


class _FakeSiggate(peers.Tool):
    """siggate's place in the harness, predicting each test label + 0.5 (or failing)."""

    name = "siggate"
    calls: list = []
    fail = False

    def __init__(self, exe=None, extra=""):
        self.extra = extra

    def version(self):
        return "0.0"

    def train_args(self, task, tdir, out, seed, epochs):
        return ["train", "--seed", str(seed), *self.extra.split()]

    def run(self, task, tdir, out, seed, epochs):
        type(self).calls.append((task.name, seed, self.extra))
        if type(self).fail:
            raise RuntimeError("boom")
        smiles, y, _ = peers.T.read_task_csv(tdir / "test.csv")
        return {"wall_s": 1.0, "cpu_s": 2.0, "params": 7, "pred_smiles": smiles, "pred": [v + 0.5 for v in y]}


def test_peers_runs_are_one_study_over_a_locked_results_file(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(peers.T, "build", _fake_build)
    monkeypatch.setattr(peers, "Siggate", _FakeSiggate)
    results = tmp_path / "results.json"
    where = ["--tools", "siggate", "--tasks", "freesolv", "--results", str(results), "--data-dir", str(tmp_path / "data"),
             "--work-dir", str(tmp_path / "runs")]
    assert peers.main([*where, "--seeds", "0,1"]) == 0
    res = json.loads(results.read_text())
    assert [(r["task"], r["seed"], r["status"]) for r in res["runs"]] == [("freesolv", 0, "ok"), ("freesolv", 1, "ok")]
    assert all(r["value"] == pytest.approx(0.5) and r["metric"] == "mae" for r in res["runs"])
    assert res["tasks"] == {"freesolv": {"name": "freesolv", "size": 5, "data_sha256": "d" * 64,
                                         "splits_sha256": "s" * 64}}
    assert _FakeSiggate.calls == [("freesolv", 0, ""), ("freesolv", 1, "")]

    _FakeSiggate.fail = True
    assert peers.main([*where, "--seeds", "0,1,2"]) == 1  # 0 and 1 are done: only 2 runs, and fails
    assert _FakeSiggate.calls[2:] == [("freesolv", 2, "")]
    failed = [r for r in json.loads(results.read_text())["runs"] if r["status"] == "failed"]
    assert [(r["seed"], r["error"]) for r in failed] == [(2, "RuntimeError: boom")]
    _FakeSiggate.fail = False
    assert peers.main([*where, "--seeds", "2"]) == 0  # a failed row is tried again
    assert [r["status"] for r in json.loads(results.read_text())["runs"]] == ["ok"] * 3

    assert peers.main([*where, "--seeds", "0", "--recipe", "svr_minmax", "--siggate-args", "--members svr"]) == 0
    row = next(r for r in json.loads(results.read_text())["runs"] if r.get("variant"))
    assert (row["recipe"], row["variant"], row["command"]) == ("svr_minmax", "--members svr",
                                                              "siggate train --seed 0 --members svr")
    table = peers.recipe_markdown(json.loads(results.read_text()), {"runs": []})
    assert "| freesolv | MAE ↓ | siggate | svr_minmax: `--members svr` | 0.500 | 0 | 2 |" in table
    with pytest.raises(SystemExit) as exc:
        peers.main([*where, "--recipe", "x"])
    assert exc.value.code == 2 and "--recipe names a --siggate-args variant" in capsys.readouterr().err


def test_the_shared_data_root_is_siggates(tmp_path, monkeypatch):
    """The peers' tasks read shared data where siggate does ($SIGGATE_DATA), not at a path of
    one machine; without a data root a builder says how to set one."""
    monkeypatch.setenv("SIGGATE_DATA", str(tmp_path))
    assert peers.T.shared_data() == tmp_path
    monkeypatch.delenv("SIGGATE_DATA")
    monkeypatch.setattr(peers.T, "default_data_root", lambda: None)
    with pytest.raises(SystemExit, match=r"set \$SIGGATE_DATA"):
        peers.T.shared_data()


def test_a_siggate_row_keeps_what_each_member_scored_and_weighed(tmp_path):
    """The real ``siggate`` on a small task with fingerprint members: the row keeps the run's
    ``member_shares`` (each member's val/test scores and weight, and the combination's), read from
    the ``metrics.json`` it wrote, so a row outlives its run folder."""
    from types import SimpleNamespace

    from siggate.train.ensemble import member_shares

    alkanes = ["C" * n for n in range(1, 13)] + ["C" * n + "O" for n in range(1, 13)] + ["C" * n + "N" for n in range(1, 13)]
    split = ["train"] * 24 + ["val"] * 6 + ["test"] * 6
    tdir = tmp_path / "task"
    tdir.mkdir()
    rows = [(s, 0.5 * len(s) + (0.3 if s.endswith("O") else 0.0), sp) for s, sp in zip(alkanes, split)]
    (tdir / "data.csv").write_text("smiles,y,split\n" + "".join(f"{s},{y},{sp}\n" for s, y, sp in rows))
    (tdir / "test.csv").write_text("smiles,y\n" + "".join(f"{s},{y}\n" for s, y, sp in rows if sp == "test"))
    idx = {k: [i for i, r in enumerate(rows) if r[2] == k] for k in ("train", "val", "test")}
    (tdir / "splits.json").write_text(json.dumps([idx]))
    out = tmp_path / "run"
    out.mkdir()
    r = peers.Siggate(extra="--members svr,rf --weights val").run(SimpleNamespace(task="regression"), tdir, out, 0, None)
    metrics = json.loads((out / "model" / "metrics.json").read_text())
    assert r["member_shares"] == member_shares(metrics)
    assert [m["kind"] for m in r["member_shares"]["members"]] == ["svr", "rf"]
    assert sum(m["weight"] for m in r["member_shares"]["members"]) == pytest.approx(1.0)
    assert r["member_shares"]["combination"]["test"] == r["tool_reported_test"]
    assert len(r["pred"]) == 6 and r["split_check"]["test_rows_equal_splits_json"]


def test_report_of_another_results_file_leaves_the_readme_alone(tmp_path, capsys):
    """``--report --results OTHER`` (a typo included) rewrote the committed README from that file:
    a missing one replaced both tables with "Not run yet", exit 0."""
    before = peers.README.read_text()
    for path in (tmp_path / "typo.json", tmp_path / "other.json"):
        if path.name == "other.json":
            path.write_text(json.dumps({"runs": []}))
        with pytest.raises(SystemExit) as exc:
            peers.main(["--report", "--results", str(path)])
        err = capsys.readouterr().err
        assert exc.value.code == 2 and (
            "no such file" in err if path.name == "typo.json" else "drop --results" in err), err
    assert peers.README.read_text() == before


def test_a_row_claimed_by_another_process_is_not_run_into_its_folder(tmp_path):
    """Two harnesses on one row: the second emptied the folder the first was training in. The
    folder's lock refuses it (a failed row naming the holder) and leaves the folder as it is; a
    finished row of other arguments is not run again either; an unclaimed row is run in an
    emptied folder and its lock is gone afterwards."""
    from siggate.files import FolderLock
    from siggate.train.study import RowStore

    store = RowStore(tmp_path / "r.json", key=lambda r: (r["tool"], r["task"], int(r["seed"])), identity=("args",))
    out = tmp_path / "runs" / "seed0"
    fields = {"tool": "siggate", "task": "t", "seed": 0}
    calls = []

    def body(folder):
        calls.append(sorted(p.name for p in folder.iterdir()))
        return {**fields, "status": "ok", "args": ""}

    held = FolderLock(out).acquire()
    (out / "model.pt").write_text("the other process's run")
    row = peers.claimed_row(out, {"args": ""}, store, ("siggate", "t", 0), fields, body)
    assert row["status"] == "failed" and row["error"].startswith("another siggate process (pid ")
    assert row["error"].endswith(": it runs this row now; run it again once that one ends") and not calls
    assert (out / "model.pt").read_text() == "the other process's run"
    held.release()
    assert peers.claimed_row(out, {"args": ""}, store, ("siggate", "t", 0), fields, body)["status"] == "ok"
    assert calls == [[FolderLock.NAME]] and not (out / FolderLock.NAME).exists()  # emptied, run, released
    store.put({**fields, "status": "ok", "args": "--old"})
    row = peers.claimed_row(out, {"args": ""}, store, ("siggate", "t", 0), fields, body)
    assert row["status"] == "failed" and "holds this row with other arguments (args: " in row["error"]
    assert len(calls) == 1


@pytest.mark.parametrize("argv, message", [
    (["--tasks", "nope"], "peers: error: --tasks: unknown task(s) nope; choose from "),
    (["--tools", "nope"], "peers: error: --tools: choose from "),
    (["--seeds", "0,x"], "peers: error: --seeds '0,x': give comma-separated integers, e.g. 0,1,2"),
    (["--tools", "siggate", "--siggate", "/nonexistent/siggate"],
     "peers: error: siggate executable /nonexistent/siggate not found: give the one of a siggate install with "),
])
def test_bad_harness_arguments_get_one_line_and_exit_2(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as exc:
        peers.main([*argv, "--results", str(tmp_path / "r.json"), "--work-dir", str(tmp_path / "w"), "--data-dir",
                    str(tmp_path / "data")])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.startswith(message) and err.count("\n") == 1
    bad = tmp_path / "bad.json"
    bad.write_text("not json")
    with pytest.raises(SystemExit) as exc:
        peers.main(["--tasks", "freesolv", "--tools", "siggate", "--results", str(bad), "--work-dir", str(tmp_path / "w"),
                    "--data-dir", str(tmp_path / "data")])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.startswith(f"peers: error: {bad} cannot be read as a results file")
    assert not (tmp_path / "data").exists()  # refused before any task was built


def test_a_results_row_without_its_scores_is_named_not_a_traceback(tmp_path, capsys):
    """--report on a recipe file with a row lacking its value, a string for a row, or a seed "x"
    ended in a KeyError, AttributeError or TypeError (helper-180): one line, exit 2, naming the row."""
    good = {"tool": "siggate", "task": "freesolv", "seed": 0, "status": "ok", "metric": "mae", "value": 0.5,
            "wall_s": 10.0}
    for row, said in (({k: v for k, v in good.items() if k != "value"}, "holds an ok row without a finite value "
                                                                       "(siggate/freesolv seed 0: None)"),
                      ({**good, "value": "abc"}, "without a finite value"),
                      ({k: v for k, v in good.items() if k != "metric"}, "without its metric"),
                      ({**good, "seed": "x"}, "holds a row without a whole-number seed (siggate/freesolv seed 'x')"),
                      ({**good, "seed": 1.7}, "without a whole-number seed (siggate/freesolv seed 1.7)"),  # (was 1)
                      ({**good, "seed": "²"}, "without a whole-number seed"), ({**good, "seed": -1}, "whole-number seed"),
                      ({k: v for k, v in good.items() if k != "task"}, "holds a row that is not a record of its tool, task and seed"),
                      ("a row", "holds a row that is not a record of its tool, task and seed")):
        path = tmp_path / "r.json"
        path.write_text(json.dumps({"runs": [row]}))
        with pytest.raises(SystemExit) as exc:
            peers.load_results(path)
        err = capsys.readouterr().err
        assert exc.value.code == 2 and said in err and err.count("\n") == 1, err
    path.write_text(json.dumps({"runs": [good, {**good, "seed": 1, "status": "failed", "value": None}]}))
    assert len(peers.load_results(path)["runs"]) == 2  # a failed row holds no score


def test_a_smoke_run_replaces_the_recipes_epochs_rather_than_give_both():
    """siggate refuses --epochs with --set train.epochs; a smoke run of a 60-epoch recipe gave both."""
    tool = peers.Siggate(peers.shutil.which("siggate"), "--members gnn,svr --set train.epochs=60 --set=train.epochs=9 "
                                                        "--set train.lr=0.001")
    task = peers.T.TASKS["freesolv"]
    argv = tool.train_args(task, Path("t"), Path("o"), 0, 3)
    assert "train.epochs=60" not in argv and "--set=train.epochs=9" not in argv and argv[-2:] == ["--epochs", "3"]
    assert argv[argv.index("--members"):][:5] == ["--members", "gnn,svr", "--set", "train.lr=0.001", "--epochs"]
    assert "train.epochs=60" in tool.train_args(task, Path("t"), Path("o"), 0, None)
    # the key is read as siggate reads it (spaces around it), and a malformed item stays for siggate to refuse
    tool = peers.Siggate(peers.shutil.which("siggate"), "--set ' train.epochs =60' --set epochs=4 --set train.epochsx=1")
    argv = tool.train_args(task, Path("t"), Path("o"), 0, 3)
    assert " train.epochs =60" not in argv and "epochs=4" in argv and "train.epochsx=1" in argv
