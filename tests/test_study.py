"""The study API (``siggate.train.study``): the one reuse rule, planning and execution."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from siggate.config import load_config
from siggate.train.executor import CallRequest, InlineExecutor, RunResult
from siggate.train.study import StudyRun, execute, finished, plan, reuse_status

#: the task record of a CSV run's GNN since siggate kept how it read stereocentres (a record without it read the tag)
CIP = {"name": "csv", "chirality": "cip"}


def _cfg(*sets):
    return load_config("nci5k", ["model.dim=32", *sets]).to_dict()


def _write_run(run: Path, cfg: dict | None, metrics: dict | None = None, last: bool = False) -> Path:
    run.mkdir(parents=True, exist_ok=True)
    if cfg is not None:
        (run / "config.yaml").write_text(yaml.safe_dump({**cfg, "_meta": {"git_commit": "x", "resolved": {}}}))
    if metrics is not None:
        (run / "metrics.json").write_text(json.dumps(metrics))
    if last:
        (run / "last.pt").write_bytes(b"")
    return run


def test_reuse_status_is_one_rule_with_four_states(tmp_path):
    """new (nothing there), resume (last.pt), done (metrics.json, whether or not the weights
    were kept), conflict (another config, even when finished); the keys that say where a run
    executes (data.root, data.cache_dir, train.threads) are not a conflict."""
    cfg = _cfg()
    assert reuse_status(tmp_path / "absent", cfg).state == "new"
    assert reuse_status(_write_run(tmp_path / "started", cfg), cfg).state == "new"
    assert reuse_status(_write_run(tmp_path / "cut", cfg, last=True), cfg).state == "resume"
    done = reuse_status(_write_run(tmp_path / "done", cfg, {"test": 0.5}), cfg)
    assert (done.state, done.metrics, done.reason) == ("done", {"test": 0.5}, "")
    assert reuse_status(_write_run(tmp_path / "snapshot", None, {"test": 0.5}), cfg).state == "done"
    other = reuse_status(tmp_path / "done", _cfg("model.layers=3"))
    assert other.state == "conflict" and other.metrics is None
    assert other.reason.startswith("model.layers: checkpoint has ") and other.reason.endswith("current config has 3")
    moved = _cfg("data.root=/elsewhere", "data.cache_dir=/c", "train.threads=4")
    assert reuse_status(tmp_path / "done", moved).state == "done"
    # grown by --resume --epochs N and stopped before its new record: the old record (fewer epochs) beside the
    # config of N was "done", and a run of members kept its GNN member at the stopped epoch, recorded as finished
    epochs = cfg["train"]["epochs"]
    grown = _write_run(tmp_path / "grown", cfg, {"test": 0.5, "epochs": epochs - 1}, last=True)
    assert reuse_status(grown, cfg).state == "resume"
    assert reuse_status(_write_run(tmp_path / "full", cfg, {"test": 0.5, "epochs": epochs}), cfg).state == "done"


def _finished_csv_run(tmp_path):
    """A CSV ``tmp_path/mol.csv``, its config and a finished run of it in ``tmp_path/run`` (its
    record holds the file's hash)."""
    import hashlib

    data = tmp_path / "mol.csv"
    data.write_text("smiles,y\nCCO,1\nCCN,2\n")
    cfg = load_config("csv", [f"data.csv={data}", "data.target_cols=[y]"]).to_dict()
    run = tmp_path / "run"
    run.mkdir()
    sha = hashlib.sha256(data.read_bytes()).hexdigest()
    (run / "config.yaml").write_text(yaml.safe_dump({**cfg, "_meta": {"git_commit": "x", "resolved": {}, "task": CIP,
                                                                       "source": {"csv": str(data), "sha256": sha}}}))
    (run / "metrics.json").write_text(json.dumps({"test": 0.5}))
    return data, cfg, run


def test_reuse_status_refuses_a_finished_run_of_a_csv_changed_since(tmp_path):
    """A compare rerun reused finished runs trained on an older version of the same CSV (the
    path is the same) and mixed their scores into its statistics: a conflict now, naming it."""
    import hashlib

    data, cfg, run = _finished_csv_run(tmp_path)
    assert reuse_status(run, cfg).state == "done"
    data.write_text("smiles,y\nCCO,10\nCCN,20\n")
    status = reuse_status(run, cfg)
    assert status.state == "conflict" and status.metrics is None
    assert status.reason.startswith(f"{data} changed since the run started") and status.reason.endswith(
        ": its scores are of the file as it was then"), status.reason
    [planned] = plan([StudyRun("k", run, cfg, None)])
    assert planned.state == "conflict" and planned.error.startswith(f"{run} holds a run of other data ("), planned.error
    # the same file, read otherwise by this siggate than by the one that started the run: other splits.
    # This one holds no bad cell, so every reading reads it alike; a file with a censored cell beside
    # another target's label is read otherwise from reading 4 (a run that records none started there)
    from siggate.data.csvdata import CSV_VERSION

    def record(reading, csv_file, config):
        sha = hashlib.sha256(csv_file.read_bytes()).hexdigest()
        source = {"csv": str(csv_file), "sha256": sha, **({"reading": reading} if reading is not None else {})}
        (run / "config.yaml").write_text(yaml.safe_dump({**config, "_meta": {"git_commit": "x", "resolved": {}, "task": CIP,
                                                                              "source": source}}))

    for reading in (CSV_VERSION, 4, None):
        record(reading, data, cfg)
        assert reuse_status(run, cfg).state == "done", reading
    two = tmp_path / "two.csv"
    two.write_text("smiles,a,b\nCCO,1,2\nCCN,2,>5\nCCC,3,4\n")
    cfg2 = load_config("csv", [f"data.csv={two}", "data.target_cols=[a,b]"]).to_dict()
    for reading, state in ((CSV_VERSION, "done"), (5, "done"), (4, "conflict"), (None, "conflict")):
        record(reading, two, cfg2)
        status = reuse_status(run, cfg2)
        assert status.state == state, (reading, status.reason)
    assert status.reason == (f"this siggate reads {two} otherwise than the one that started the run did (CSV reading "
                             f"4, now {CSV_VERSION}: rows with a label cell that is no number beside another target's "
                             "label are kept, a copy of a molecule labelling a heavy atom's isotope ([13CH3]) is one "
                             "molecule with it, (data.fragments: parent) an acid salted with its own anion "
                             "(CC(=O)[O-].CC(=O)O.[Na+]) has the acid for parent, and a multilabel row without any "
                             "label is dropped, and a line ending with a delimiter the header lacks is read, so the "
                             "splits differ): its rows and "
                             "splits were read as the siggate that "
                             "started it read them")
    [planned] = plan([StudyRun("k", run, cfg2, None)])
    assert planned.error.startswith(f"{run} holds a run of other data (this siggate reads"), planned.error
    # reading 5 to 6: only a file that labels a heavy atom's isotope is read otherwise (a deuterium is not)
    heavy = tmp_path / "heavy.csv"
    for text, state in (("smiles,y\nCCO,1\n[2H]OCC,2\n", "done"), ("smiles,y\nCCO,1\n[13CH3]CO,2\n", "conflict")):
        heavy.write_text(text)
        cfg3 = load_config("csv", [f"data.csv={heavy}", "data.target_cols=[y]"]).to_dict()
        record(5, heavy, cfg3)
        status = reuse_status(run, cfg3)
        assert status.state == state, (text, status.reason)
    assert f"(CSV reading 5, now {CSV_VERSION}: a copy of a molecule labelling a heavy atom's isotope ([13CH3]) is one" \
        in status.reason
    def reading(then, path, cases, changes):  # each case: file text, its --set items, the expected state
        for text, sets, state in cases:
            path.write_text(text)
            cfg_n = load_config("csv", [f"data.csv={path}", *sets]).to_dict()
            record(then, path, cfg_n)
            status = reuse_status(run, cfg_n)
            assert status.state == state, (text, sets, status.reason)
            if state == "conflict":
                assert f"(CSV reading {then}, now {CSV_VERSION}: {changes}, so the splits differ)" in status.reason, \
                    status.reason

    # reading 6 to 7: only a run that reads salts as their parents, and only where a SMILES is an acid
    # salted with its own anion (it had no parent then); an isotope is no change since 6
    y, parent, whole = "data.target_cols=[y]", "data.fragments=parent", "data.fragments=all"
    reading(6, tmp_path / "salty.csv", (("smiles,y\nCCO,1\nCC(=O)[O-].CC(=O)O.[Na+],2\n", [y, parent], "conflict"),
                                        ("smiles,y\nCCO,1\nCC(=O)[O-].CC(=O)O.[Na+],2\n", [y, whole], "done"),
                                        ("smiles,y\nCCO,1\nCC(=O)[O-].[Na+],2\n[13CH3]CO,3\n", [y, parent], "done"),
                                        ("smiles,y\nCCO,1\nc1ccccc1.c1ccncc1,2\n", [y, parent], "done")),
            "(data.fragments: parent) an acid salted with its own anion (CC(=O)[O-].CC(=O)O.[Na+]) has the acid for "
            "parent, and a multilabel row without any label is dropped, and a line ending with a delimiter the header "
            "lacks is read")
    # reading 7 to 8: a multilabel run where a row has no label (it was kept), and any run where a
    # line ends with a delimiter the header lacks (it failed)
    ab, tags, regression = "data.target_cols=[a,b]", "data.task=multilabel", "data.task=regression"
    reading(7, tmp_path / "tags.csv", (("smiles,a,b\nCCO,1,0\nCCN,,\nCCC,0,1\n", [ab, tags], "conflict"),
                                       ("smiles,a,b\nCCO,1,0\nCCN,,1\nCCC,0,1\n", [ab, tags], "done"),
                                       ("smiles,a,b\nCCO,1,0\n,,\nxyz,,\nCCC,0,1\n", [ab, tags], "done"),  # no molecule
                                       ("smiles,a,b\nCCO,1,0\nCCN,,\nCCC,0,1\n", [ab, regression], "done"),
                                       ("smiles,a,b\nCCO,1,0,\nCCN,2,1\nCCC,0,1\n", [ab, regression], "conflict"),
                                       ("smiles,a,b\nCCO,1,0,x\nCCN,2,1\nCCC,0,1\n", [ab, regression], "done")),
            "a multilabel row without any label is dropped, and a line ending with a delimiter the header lacks is "
            "read")


def _call(key, run_dir, value):
    return CallRequest(key, "test_study:_answer", {"value": value}, run_dir)


def _answer(value):
    if value is None:
        raise AssertionError("not reached: a planned-done run is never executed")
    return {"test": value}


class _Failing:
    """An executor whose every run fails, recording what it was given."""

    def __init__(self):
        self.keys = []

    def run(self, requests, on_done):
        for r in requests:
            self.keys.append(r.key)
            on_done(RunResult(r.key, 3, None, "exit status 3"))


def test_plan_then_execute_trains_only_what_is_left(tmp_path):
    """plan() states each run by reuse_status; execute() hands only new/resume runs to the
    executor, records done/failed, and calls on_result once per executed run; finished()
    gives the metrics of the done ones, reused or new."""
    cfg = _cfg()
    _write_run(tmp_path / "a", cfg, {"test": 1.0})
    _write_run(tmp_path / "b", cfg, last=True)
    _write_run(tmp_path / "c", _cfg("model.layers=3"), {"test": 9.0})
    runs = plan([StudyRun(k, tmp_path / k, cfg, _call(k, tmp_path / k, None if k == "a" else 2.0), tag=k)
                 for k in ("a", "b", "c", "d")])
    assert [r.state for r in runs] == ["done", "resume", "conflict", "new"]
    assert str(tmp_path / "c") in runs[2].error and "model.layers" in runs[2].error and "delete it" in runs[2].error
    seen = []
    execute(runs, InlineExecutor(), progress=False, on_result=lambda r: seen.append((r.tag, r.state)))
    assert seen == [("b", "done"), ("d", "done")]
    assert finished(runs) == {"a": {"test": 1.0}, "b": {"test": 2.0}, "d": {"test": 2.0}}
    assert runs[2].state == "conflict"  # never executed, never overwritten
    _write_run(tmp_path / "f", cfg, last=True)
    again = plan([StudyRun(k, tmp_path / k, cfg, _call(k, tmp_path / k, 0.0)) for k in ("a", "f", "e")])
    failing = _Failing()
    execute(again, failing, progress=False)
    assert failing.keys == ["f", "e"] and [(r.state, r.returncode, r.error) for r in again[1:]] == [
        ("failed", 3, "exit status 3")] * 2


def test_analysis_sweep_refuses_a_conflict_before_training(tmp_path, monkeypatch):
    """train_many plans the whole sweep first: a folder holding another config stops it
    before any run trains, with the folder and the differing value in the message."""
    import argparse

    from siggate.analysis import common

    trained = []
    monkeypatch.setattr(common, "train_run", lambda **kw: trained.append(kw) or {"test": 0.0})
    cfg = load_config("nci5k", ["model.dim=32"])
    _write_run(tmp_path / "x", _cfg("model.layers=3"), {"test": 9.0})
    with pytest.raises(common.RunConflict, match=r"x holds a run of another config \(model.layers"):
        common.train_many({"ok": (cfg, tmp_path / "ok"), "x": (cfg, tmp_path / "x")}, None,
                          argparse.Namespace(backend="local"), progress=False)
    assert trained == []
    _write_run(tmp_path / "done", _cfg(), {"test": 0.25})
    out = common.train_many({"done": (cfg, tmp_path / "done"), "ok": (cfg, tmp_path / "ok")}, "DATA",
                            argparse.Namespace(backend="local"), progress=False)
    assert out == {"done": {"test": 0.25, "reused": True}, "ok": {"test": 0.0, "reused": False}}
    assert [kw["dataset"] for kw in trained] == ["DATA"] and trained[0]["run_dir"] == tmp_path / "ok"


# ---------------------------------------------------------------------- results files (the harnesses)


def _store(path):
    from siggate.train.study import RowStore

    return RowStore(path, key=lambda r: (r["tool"], r["task"], int(r["seed"])), identity=("args",),
                    order=lambda r: (r["tool"], r["task"], r["seed"]))


def _put_rows(path, tool, n):
    store = _store(path)
    for i in range(n):
        store.put({"tool": tool, "task": "t", "seed": i, "status": "ok"})


def test_row_store_replaces_a_key_and_keeps_concurrent_writers_rows(tmp_path):
    """put() replaces the row of its key and keeps the rest sorted; two processes writing
    one file at once lose no row (every write re-reads the file under PATH.lock)."""
    import multiprocessing

    path = tmp_path / "results.json"
    store = _store(path)
    assert store.load() == {"schema": 1, "rows": []} and not path.exists()
    store.put({"tool": "b", "task": "t", "seed": 0, "status": "failed", "error": "x"})
    store.put({"tool": "a", "task": "t", "seed": 0, "status": "ok"})
    store.put({"tool": "b", "task": "t", "seed": 0, "status": "ok", "args": ""})
    assert [(r["tool"], r["status"]) for r in store.rows()] == [("a", "ok"), ("b", "ok")]
    store.update(lambda res: res.setdefault("tasks", {}).update(t={"size": 3}))
    assert store.load()["tasks"] == {"t": {"size": 3}} and len(store.rows()) == 2
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_put_rows, args=(path, tool, 15)) for tool in ("p", "q")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    rows = store.rows()
    assert len(rows) == 2 + 30 and {(r["tool"], r["seed"]) for r in rows} >= {(t, i) for t in "pq" for i in range(15)}
    before = store.path.read_bytes(), store.path.stat().st_mtime_ns
    seen = store.update(lambda res: False)  # a change that changed nothing: the file is not rewritten
    assert len(seen["rows"]) == 32 and (store.path.read_bytes(), store.path.stat().st_mtime_ns) == before


def test_a_row_is_judged_by_the_one_reuse_rule(tmp_path):
    """No row or a failed one: new (tried again; never resume, a harness run starts afresh);
    an ok row with the same identity: done, its metrics the row; an ok row with other identity
    values (a name run before with other arguments): conflict naming the field."""
    store = _store(tmp_path / "results.json")
    key = ("siggate", "t", 0)
    assert reuse_status(tmp_path / "run", {"args": "--x"}, store, key).state == "new"
    store.put({"tool": "siggate", "task": "t", "seed": 0, "status": "failed", "args": "--y"})
    assert reuse_status(tmp_path / "run", {"args": "--x"}, store, key).state == "new"
    ok = {"tool": "siggate", "task": "t", "seed": 0, "status": "ok", "args": "--x", "value": 0.5}
    store.put(ok)
    done = reuse_status(tmp_path / "run", {"args": "--x"}, store, key)
    assert (done.state, done.metrics) == ("done", ok)
    other = reuse_status(tmp_path / "run", {"args": "--z"}, store, key)
    assert other.state == "conflict" and other.reason == "args: the results file has '--x', this run has '--z'"


def _row(tool, task, seed, status="ok", args=""):
    row = {"tool": tool, "task": task, "seed": seed, "status": status, "args": args}
    return row if status == "ok" else {**row, "error": "RuntimeError: it broke"}


def test_plan_and_execute_with_a_store_record_each_row_as_it_finishes(tmp_path):
    """A run's function returns its row, ok or failed: execute() puts it into the store at
    once and the run's state follows its status; a done row is not run again; a conflict is
    named with the file, the key and the fix."""
    store = _store(tmp_path / "results.json")
    store.put(_row("a", "t", 0))
    store.put(_row("c", "t", 0, args="--old"))
    keys = [("a", "t", 0), ("b", "t", 0), ("b", "t", 1), ("c", "t", 0)]
    rows = {("b", "t", 0): _row("b", "t", 0), ("b", "t", 1): _row("b", "t", 1, "failed")}
    runs = plan([StudyRun(k, tmp_path / "_".join(map(str, k)), {"args": ""},
                          CallRequest(k, "test_study:_row_of", {"row": rows.get(k)}, tmp_path)) for k in keys], store)
    assert [r.state for r in runs] == ["done", "new", "new", "conflict"]
    assert runs[3].error.startswith(f"{store.path} holds a finished run ('c', 't', 0) of another kind (args: ")
    seen = []

    def check(r):  # the row is in the file by the time on_result sees the run
        seen.append((r.key, r.state, store.row(r.key)["status"]))

    execute(runs[:3], InlineExecutor(), progress=False, on_result=check, store=store)
    assert seen == [(("b", "t", 0), "done", "ok"), (("b", "t", 1), "failed", "failed")]
    assert runs[2].error == "RuntimeError: it broke" and finished(runs) == {("a", "t", 0): _row("a", "t", 0),
                                                                           ("b", "t", 0): _row("b", "t", 0)}
    assert [r["tool"] for r in store.rows()] == ["a", "b", "b", "c"]


def _row_of(row):
    assert row is not None, "not reached: a done row is never run again"
    return row


def test_a_run_saved_with_select_best_or_without_it_is_the_same_run_under_auto(tmp_path):
    """``train.select``'s default became ``auto``, which a run of its own applies as ``best``:
    finished runs saved with ``best`` (or before the key existed) are reused, not conflicts; a
    run saved with ``last`` is another run."""
    import yaml

    from siggate.config import load_config
    from siggate.train.study import reuse_status

    current = load_config("nci5k").to_dict()
    assert current["train"]["select"] == "auto"
    for name, select in (("best", "best"), ("missing", None), ("last", "last")):
        run = tmp_path / name
        run.mkdir()
        saved = yaml.safe_load(yaml.safe_dump(current))
        if select is None:
            del saved["train"]["select"]
        else:
            saved["train"]["select"] = select
        (run / "config.yaml").write_text(yaml.safe_dump(saved))
        (run / "metrics.json").write_text("{}")
        status = reuse_status(run, current)
        if select == "last":
            assert status.state == "conflict" and "train.select" in status.reason
        else:
            assert status.state == "done", status.reason


def test_load_script_registers_a_file_for_call_requests_and_reuses_only_the_same_file(tmp_path, monkeypatch):
    """A script loaded under a name is what a ``"name:function"`` request calls; ``reuse`` gives
    back the module of the same file (by any path to it) without executing it again, a fresh load
    executes it again, another file under the name replaces it, and a file that fails leaves the
    name's registration as it was (none, or the module before)."""
    from siggate.train.executor import load_script, run_call

    for name in ("sg_script", "sg_fails"):
        monkeypatch.setitem(sys.modules, name, None)  # restored (removed) after the test, whatever happens
        del sys.modules[name]
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("WHO = 'a'\n"
                 "def row(x):\n    return {'who': WHO, 'x': x}\n")
    b.write_text("WHO = 'b'\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "link.py").symlink_to(a)
    first = load_script("sg_script", a)
    assert sys.modules["sg_script"] is first and first.WHO == "a"
    assert load_script("sg_script", tmp_path / "sub" / ".." / "a.py", reuse=True) is first
    assert load_script("sg_script", tmp_path / "link.py", reuse=True) is first  # the same file, by a link
    monkeypatch.chdir(tmp_path)
    assert load_script("sg_script", "a.py", reuse=True) is first  # and by a relative path
    result = run_call(CallRequest("k", "sg_script:row", {"x": 3}, tmp_path / "run"))
    assert result.ok and result.metrics == {"who": "a", "x": 3}
    again = load_script("sg_script", a)
    assert again is not first and sys.modules["sg_script"] is again
    other = load_script("sg_script", b, reuse=True)
    assert other.WHO == "b" and sys.modules["sg_script"] is other
    (tmp_path / "bad.py").write_text("raise ValueError('broken script')\n")
    with pytest.raises(ValueError, match="broken script"):
        load_script("sg_script", tmp_path / "bad.py")
    assert sys.modules["sg_script"] is other
    with pytest.raises(ValueError, match="broken script"):
        load_script("sg_fails", tmp_path / "bad.py")
    assert "sg_fails" not in sys.modules
    with pytest.raises(ImportError, match="no such Python file"):
        load_script("sg_fails", tmp_path / "missing.py")
    assert "sg_fails" not in sys.modules


def test_a_finished_row_is_never_overwritten_and_a_run_finished_meanwhile_is_taken_as_it_is(tmp_path):
    """Two harnesses on one file: the first finishes a row, the second (which planned it before)
    then fails or finishes it with other arguments. put() replaced the first's row, so a failed
    run erased a result; now a finished row stays, and the second run reads it (the same
    arguments: done with the first's metrics) or is failed naming the row it did not replace."""
    store = _store(tmp_path / "results.json")
    first = _row("a", "t", 0)
    assert store.put(first) is first
    assert store.put(_row("a", "t", 0, "failed")) == first and store.rows() == [first]  # the failed one is not written
    assert store.put({**first, "value": 9}) == first and store.rows() == [first]
    keys = [("a", "t", 0), ("a", "t", 1)]
    other = {("a", "t", 0): _row("a", "t", 0, "failed"), ("a", "t", 1): _row("a", "t", 1, args="--new")}
    runs = [StudyRun(k, tmp_path / f"run{k[2]}", {"args": ""}, CallRequest(k, "test_study:_row_of", {"row": other[k]},
                                                                           tmp_path)) for k in keys]
    store.put(_row("a", "t", 1))  # both rows finished by "another process" after planning, before these end
    execute(runs, InlineExecutor(), progress=False, store=store)
    assert (runs[0].state, runs[0].metrics) == ("done", first)
    assert runs[1].state == "failed" and runs[1].error == (
        f"{store.path} holds a finished run ('a', 't', 1) of another kind, recorded meanwhile by another process "
        "(args: the results file has '', this run has '--new'); it is kept, this run's result is not")
    assert store.rows() == [first, _row("a", "t", 1)]


def test_a_results_file_that_is_not_one_is_named_with_the_fix(tmp_path):
    from siggate.train.study import ResultsFileError

    path = tmp_path / "results.json"
    for text, why in (("not json", "cannot be read as a results file (Expecting value"), ("[]", "is not a results file"),
                      ('{"rows": {}}', "is not a results file"), ('{"runs": []}', "is not a results file")):
        path.write_text(text)
        with pytest.raises(ResultsFileError, match="restore it") as e:
            _store(path).load()
        assert str(e.value).startswith(f"{path} {why}")


def test_reuse_status_takes_a_moved_csv_of_the_recorded_content_as_the_runs(tmp_path):
    """A finished run whose CSV was moved (or copied to another machine) with its content kept
    was called a conflict by the study (data.csv differs), while --resume takes such a file as the
    run's: the study reuses it now; a moved file of other content stays a conflict."""
    import hashlib
    import shutil

    from siggate.data.csvdata import CSV_VERSION

    data, cfg, run = _finished_csv_run(tmp_path)
    moved = tmp_path / "elsewhere" / "mol.csv"
    moved.parent.mkdir()
    shutil.move(data, moved)
    there = load_config("csv", [f"data.csv={moved}", "data.target_cols=[y]"]).to_dict()
    assert reuse_status(run, there).state == "done"
    # the reading is judged on the file that will be read: a moved reading-5 file labelling an isotope is read otherwise
    labelled = "smiles,y\nCCO,1\n[13CH3]CN,2\n"
    moved.write_text(labelled)
    record = yaml.safe_load((run / "config.yaml").read_text())
    record["_meta"]["source"] = {"csv": str(data), "sha256": hashlib.sha256(labelled.encode()).hexdigest(), "reading": 5}
    (run / "config.yaml").write_text(yaml.safe_dump(record))
    status = reuse_status(run, there)
    assert status.state == "conflict" and f"CSV reading 5, now {CSV_VERSION}" in status.reason, status.reason
    moved.write_text("smiles,y\nCCO,10\nCCN,20\n")
    status = reuse_status(run, there)
    assert status.state == "conflict" and "data.csv" in status.reason, status.reason


def test_recorded_chirality_of_runs_recorded_before_it_was_kept(tmp_path):
    """A run's record says how its GNN read stereocentres (``_meta.task.chirality``); one written
    before siggate kept it read RDKit's tag; a run of members without a GNN read no stereo."""
    from siggate.train.rundir import reading_changed, recorded_chirality

    def record(name, meta):
        path = tmp_path / name
        path.write_text(yaml.safe_dump({"data": {"name": "csv"}, "_meta": meta}))
        return path

    assert recorded_chirality(record("new.yaml", {"task": {"name": "csv", "chirality": "cip"}})) == "cip"
    assert recorded_chirality(record("old.yaml", {"task": {"name": "csv"}})) == "tag"
    assert recorded_chirality(record("members.yaml", {"members": {"kinds": ["gnn", "svr"]}})) == "tag"
    assert recorded_chirality(record("fp.yaml", {"members": {"kinds": ["svr", "rf"]}})) is None
    # a members record written before it held the task: its GNN members' records say
    run = tmp_path / "run"
    (run / "member0").mkdir(parents=True)
    (run / "member0" / "config.yaml").write_text(yaml.safe_dump({"_meta": {"task": {"chirality": "cip"}}}))
    (run / "members.yaml").write_text(yaml.safe_dump({"_meta": {"members": {"kinds": ["gnn", "svr"]}}}))
    assert recorded_chirality(run / "members.yaml") == "cip"
    assert recorded_chirality(tmp_path / "missing.yaml") is None
    assert reading_changed(None, {"name": "csv"}, "tag").startswith("its GNN read the molecules' stereocentres")
    assert reading_changed(None, {"name": "csv"}, "cip") is None and reading_changed(None, {"name": "zinc"}, "tag") is None


def test_an_analysis_run_that_another_process_trains_is_refused_not_trained_twice(tmp_path, monkeypatch):
    """Two ``siggate analyze`` commands into one --out: the second found the first's run
    unfinished, resumed it from its last.pt while the first trained it on, and both appended to
    its log.csv (510 rows for 300 epochs) and wrote its checkpoints and metrics in turn (the
    sweep read 'diverged 1/1'). A run now holds its folder's lock as a ``siggate train`` run does."""
    from siggate.analysis import common
    from siggate.config_args import CLIError
    from siggate.files import FolderLock
    from siggate.train import pipeline

    trained = []
    monkeypatch.setattr(pipeline, "train", lambda *a, **k: trained.append(a) or {"val": 1.0})
    run_dir = tmp_path / "an" / "runs" / "lr0.001-none-s0"
    cfg = load_config("nci5k")
    held = FolderLock(run_dir).acquire()  # (flock: another open of the file conflicts, in this process too)
    try:
        with pytest.raises(CLIError) as err:
            common.train_run(cfg, run_dir, dataset=None, progress=False)
    finally:
        held.release()
    assert trained == []
    assert str(err.value).startswith(f"run {run_dir}: another siggate process (pid ")
    assert str(err.value).endswith("; two analyses must not train one run: wait for the other to end, or give this "
                                   "one another --out")
    assert common.train_run(cfg, run_dir, dataset=None, progress=False) == {"val": 1.0, "reused": False}
    assert len(trained) == 1 and not (run_dir / FolderLock.NAME).exists()  # released once the run ends
