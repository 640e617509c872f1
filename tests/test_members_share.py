"""``benchmarks/members_share.py``: each member's score and weight from the run folders that the
harness rows name, averaged per target over the seeds every target has."""

from __future__ import annotations

import json

import pytest

from benchmark_scripts import load

share = load("members_share", "members_share.py")


def _run(folder, combination, members):
    """A run folder whose metrics.json holds ``members`` as ``(kind, test_rmse, task_metric, weight)``."""
    folder.mkdir(parents=True)
    metrics = {"test": combination + 1, "test_metrics": {"mean": {"rmse": combination}},
               "weights": [[w, w] for *_, w in members],  # two targets, one weight each
               "members": [{"kind": k, "test": t, "test_metrics": {"mean": {"rmse": r}}} for k, r, t, _ in members]}
    (folder / "metrics.json").write_text(json.dumps(metrics))
    (folder / "members.yaml").write_text("_meta:\n  git_commit: abc1234def\n")  # the commit _row gives A


def _row(tmp_path, target, seed):
    out = tmp_path / target / f"seed{seed}"
    return {"target": target, "seed": seed, "command": f"siggate train --data x.csv --out {out} --members gnn,svr",
            **({"git_commit": "abc1234def"} if target == "A" else {})}, out


def test_members_are_averaged_over_the_seeds_every_target_has(tmp_path):
    rows = []
    for target, seed, comb, gnn, svr, w in [("A", 0, 0.5, 0.7, 0.6, 0.25), ("A", 1, 0.9, 0.9, 0.9, 0.5),
                                            ("B", 0, 0.3, 0.2, 0.4, 1.0)]:
        row, out = _row(tmp_path, target, seed)
        _run(out, comb, [("gnn", gnn, gnn + 10, w), ("svr", svr, svr + 10, 1 - w)])
        rows.append(row)
    gone, _ = _row(tmp_path, "C", 0)
    s = share.summarize([*rows, gone], "rmse")
    assert s["seeds"] == [0] and s["groups"] == 2  # A's seed 1 is not counted: B has no seed 1
    assert s["commits"] == ["abc1234", "unknown"]  # the commits of the rows counted (B's records none)
    assert s["missing"] == ["C seed 0"]
    assert s["read_from"] == {"kept": 0, "folder": 2}  # the rows counted (A's seed 1 is not)
    assert s["mean"]["combination"] == pytest.approx([0.4])
    assert s["mean"]["gnn"] == pytest.approx([0.45, 0.625]) and s["mean"]["svr"] == pytest.approx([0.5, 0.375])
    task = share.summarize(rows[:1], "task")  # the task's own metric: the record's "test"
    assert task["mean"]["gnn"] == pytest.approx([10.7, 0.25]) and task["mean"]["combination"] == [1.5]
    lines = share.table("scores", s, "mean")
    assert lines[0] == "| scores | gnn alone (weight) | svr alone (weight) | combination | seeds |"
    assert lines[2] == "| mean | 0.450 (0.62) | 0.500 (0.38) | **0.400** | 0 |"


def test_copies_of_a_kind_are_one_column_and_no_common_seed_is_refused(tmp_path):
    row, out = _row(tmp_path, "A", 0)
    _run(out, 0.5, [("gnn", 0.6, 0, 0.2), ("gnn", 0.8, 0, 0.3), ("svr", 0.4, 0, 0.5)])
    s = share.summarize([row], "rmse")
    assert s["kinds"] == ["combination", "gnn", "svr"] and s["mean"]["gnn"] == pytest.approx([0.7, 0.5])
    other, out = _row(tmp_path, "B", 1)
    _run(out, 0.5, [("gnn", 0.6, 0, 1.0)])
    none = share.summarize([row, other], "rmse")
    assert none["groups"] == 0 and none["error"] == "no seed is run on every target; nothing is comparable"
    assert "mean" not in share.summarize([row], "task", mean=False)


def test_the_run_folder_is_the_command_s_out():
    assert str(share.run_folder("siggate train --out '/a b/c' --seed 0")) == "/a b/c"


def test_rows_are_chosen_by_recipe_and_the_peers_default_rows_answer_to_default():
    rows = [{"tool": "siggate", "status": "ok", "recipe": "cand-ens60", "seed": 0},
            {"tool": "siggate", "status": "ok", "seed": 1},  # a later default row: no recipe recorded
            {"tool": "siggate", "status": "ok", "variant": "--members gnn", "recipe": "gnn-alone", "seed": 2},
            {"tool": "siggate", "status": "failed", "recipe": "cand-ens60", "seed": 3},
            {"tool": "siggate", "status": "ok", "recipe": "cand-ens60", "smoke": True, "seed": 4},
            {"tool": "chemprop", "status": "ok", "seed": 5}]
    seeds = lambda names, defaults: [r["seed"] for r in share.recipe_rows(rows, names, defaults)]  # noqa: E731
    assert seeds(["cand-ens60"], False) == [0]
    assert seeds(["default"], True) == [0, 1] and seeds(["default"], False) == []
    assert seeds(["cand-ens60", "default"], True) == [0, 1] and seeds(["gnn-alone"], True) == [2]


def test_main_reads_the_peers_default_rows_from_results_json_only(tmp_path, monkeypatch, capsys):
    """``--recipe default`` takes the peers' rows without a variant from results.json, not a
    recipe.json row (whose variants are never defaults), and names the rows' commit."""
    row, out = _row(tmp_path, "A", 0)
    _run(out, 0.5, [("gnn", 0.6, 0.7, 0.5), ("svr", 0.4, 0.3, 0.5)])
    other, out2 = _row(tmp_path, "B", 0)
    _run(out2, 0.5, [("gnn", 0.6, 0.7, 0.5), ("svr", 0.4, 0.3, 0.5)])
    peer = {**row, "task": "A", "tool": "siggate", "status": "ok", "metric": "mae"}
    variant = {**other, "task": "B", "tool": "siggate", "status": "ok", "metric": "mae", "variant": "--members svr"}
    files = {"results": tmp_path / "results.json", "recipe": tmp_path / "recipe.json", "mace": tmp_path / "m.json"}
    files["results"].write_text(json.dumps({"runs": [peer]}))
    files["recipe"].write_text(json.dumps({"runs": [{**variant, "variant": None, "recipe": "x"}, variant]}))
    files["mace"].write_text(json.dumps({"rows": []}))
    monkeypatch.setattr(share, "SOURCES", {"moleculeace": [files["mace"]], "peers": [files["results"], files["recipe"]]})
    assert share.main(["--recipe", "default", "--out", str(tmp_path / "o.json")]) == 0
    doc = json.loads((tmp_path / "o.json").read_text())
    assert "moleculeace" not in doc and list(doc["peers"]["per_group"]) == ["A (mae)"]
    assert doc["peers"]["commits"] == ["abc1234"]
    assert "peers: rows of commit abc1234; shares read from 0 rows, 1 run folder\n" in capsys.readouterr().out
    # a misspelt recipe has no rows anywhere: refused, and no README table is emptied
    readme = tmp_path / "R.md"
    readme.write_text("a\n<!-- members-share:start -->\nkept\n<!-- members-share:end -->\n")
    assert share.main(["--recipe", "defualt", "--out", str(tmp_path / "none.json"), "--readme", str(readme)]) == 2
    assert "no rows of recipe 'defualt' in " in capsys.readouterr().err and "kept" in readme.read_text()
    assert not (tmp_path / "none.json").exists()


def test_a_row_that_keeps_its_member_shares_needs_no_run_folder(tmp_path):
    """The harness rows keep ``member_shares`` (:func:`siggate.train.ensemble.member_shares`), which
    is read before the folder: a row whose folder is gone still counts, with the same figures as
    from the folder."""
    row, out = _row(tmp_path, "A", 0)
    _run(out, 0.5, [("gnn", 0.7, 10.7, 0.25), ("svr", 0.6, 10.6, 0.75)])
    from_folder = share.summarize([row], "rmse")
    kept = {**row, "member_shares": share.member_shares(json.loads((out / "metrics.json").read_text()))}
    (out / "metrics.json").unlink()
    assert share.summarize([row], "rmse")["missing"] == ["A seed 0"]
    from_row = share.summarize([kept], "rmse")
    assert from_row["mean"] == from_folder["mean"] and from_row["mean"]["gnn"] == pytest.approx([0.7, 0.25])
    assert (from_folder["read_from"], from_row["read_from"]) == ({"kept": 0, "folder": 1}, {"kept": 1, "folder": 0})
    other, out_b = _row(tmp_path, "B", 0)
    _run(out_b, 0.3, [("gnn", 0.2, 10.2, 0.5), ("svr", 0.4, 10.4, 0.5)])
    mixed = share.summarize([kept, other], "rmse")  # one row keeps its shares, the other has its folder
    assert mixed["read_from"] == {"kept": 1, "folder": 1} and mixed["mean"]["combination"] == pytest.approx([0.4])
    assert share.summarize([kept], "task")["mean"]["combination"] == [1.5]


def test_rerun_missing_counts_a_folder_only_when_it_reproduces_its_row(tmp_path):
    """``--rerun-missing SIGGATE`` trains a lost folder again with the row's own command; the
    rerun counts only with the row's commit and test metric. A row of another commit is left
    alone, and a rerun that differs is moved aside, never read."""
    import stat
    import subprocess
    import sys

    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    python = bin_dir / "python"  # this venv's python: the commit its siggate reports is the checkout's
    python.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    commit = subprocess.run([str(bin_dir / "python"), "-c",
                             "from siggate.train.record import git_commit; print(git_commit())"],
                            capture_output=True, text=True).stdout.strip()
    fake = bin_dir / "siggate"  # writes what siggate train would: metrics.json, config.yaml with its commit
    fake.write_text(f"#!{sys.executable}\n" + f"""
import json, os, sys
from pathlib import Path
out = Path(sys.argv[sys.argv.index("--out") + 1]); out.mkdir(parents=True)
test = float(sys.argv[sys.argv.index("--test") + 1])
(out / "config.yaml").write_text("_meta:\\n  git_commit: {commit}\\n")
(out / "metrics.json").write_text(json.dumps({{"test": test, "test_metrics": {{"mean": {{"rmse": test}}}},
    "weights": [[1.0]], "members": [{{"kind": "svr", "test": test, "test_metrics": {{"mean": {{"rmse": test}}}}}}]}}))
assert os.environ["OMP_NUM_THREADS"] == "1"  # as the harness ran it
""")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)

    def row(target, test, recorded, row_commit=commit):
        out = tmp_path / "runs" / target / "seed0" / "model"
        return {"target": target, "seed": 0, "git_commit": row_commit, "tool_reported_test": recorded,
                "command": f"siggate train --out {out} --members svr --test {test}"}, out

    same, same_out = row("A", 0.5, 0.5)
    other, other_out = row("B", 0.6, 0.7)
    old, old_out = row("C", 0.4, 0.4, row_commit="0" * 40)
    notes = share.rerun_missing([same, other, old], str(fake))
    assert commit and notes[0].startswith("A seed 0: reproduced (test 0.5, ")
    assert notes[1].startswith("B seed 0: NOT reproduced") and len(notes) == 2  # C: another commit, not rerun
    assert (same_out / "metrics.json").is_file() and not other_out.exists() and not old_out.parent.exists()
    assert (other_out.parent / "model.unreproduced" / "metrics.json").is_file()
    s = share.summarize([same, other, old], "rmse")
    assert s["groups"] == 1 and s["missing"] == ["B seed 0", "C seed 0"] and s["mean"]["svr"] == pytest.approx([0.5, 1.0])
    assert share.rerun_missing([same], str(fake)) == []  # its folder is back: nothing to do
    assert share.rerun_missing([other], str(fake)) == []  # moved aside: not tried again
    # a rerun that was stopped (its pid file names a process that is gone) is done again, said as it goes
    (same_out / "metrics.json").unlink()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    (same_out.parent / "rerun.pid").write_text(str(gone.pid))
    said = []
    assert share.rerun_missing([same], str(fake), said.append) == said and said[0].startswith("A seed 0: reproduced")
    assert not (same_out.parent / "rerun.pid").exists()
    # a stale pid file beside a finished folder: the folder stays
    (same_out.parent / "rerun.pid").write_text(str(gone.pid))
    assert share.rerun_missing([same], str(fake)) == [] and (same_out / "metrics.json").is_file()
    assert not (same_out.parent / "rerun.pid").exists()
    # a rerun ended by a signal is no result: removed, said, and trained again next time
    killed = {**same, "command": same["command"] + " --die"}
    fake_text = fake.read_text()
    fake.write_text(fake_text.replace("test = float(", "import signal\nif '--die' in sys.argv: os.kill(os.getpid(), "
                                      "signal.SIGTERM)\ntest = float("))
    import shutil as _shutil

    _shutil.rmtree(same_out)
    said = share.rerun_missing([killed], str(fake))
    assert said == ["A seed 0: stopped by a signal (exit -15); it is trained again on the next call"]
    assert not same_out.exists() and not (same_out.parent / "model.unreproduced").exists()
    # siggate itself stops on SIGTERM with exit status 143 (as after Ctrl-C, 130): no result either
    fake.write_text(fake_text.replace("test = float(", "if '--die' in sys.argv: sys.exit(143)\ntest = float("))
    assert share.rerun_missing([killed], str(fake)) == [
        "A seed 0: stopped by a signal (exit 143); it is trained again on the next call"]
    assert not same_out.exists() and not (same_out.parent / "model.unreproduced").exists()
    fake.write_text(fake_text)
    assert share.rerun_missing([same], str(fake))[0].startswith("A seed 0: reproduced")
    # a folder without a pid file is someone else's, running or not: left alone
    (same_out / "metrics.json").unlink()
    assert share.rerun_missing([same], str(fake)) == [] and same_out.exists()
    # a single-member run has no shares to give: never rerun
    single = {**old, "git_commit": commit, "command": old["command"].replace(" --members svr", "")}
    assert share.rerun_missing([single], str(fake)) == []


def test_a_folder_is_read_only_when_it_holds_the_row_s_own_run(tmp_path):
    """Recipes of the peers harness share folders by their flags, so a later run of another commit
    can stand in an old row's folder: its figures are not the row's, and the row is counted as
    missing, saying why."""
    row, out = _row(tmp_path, "A", 0)
    _run(out, 0.5, [("gnn", 0.7, 10.7, 0.25), ("svr", 0.6, 10.6, 0.75)])
    assert share.member_scores(row, "rmse")[0]["svr"] == pytest.approx((0.6, 0.75))
    other_commit = {**row, "git_commit": "fedcba9876"}
    assert share.member_scores(other_commit, "rmse") == (None, "its folder holds a run of commit abc1234")
    other_test = {**row, "tool_reported_test": 1.25}
    assert share.member_scores(other_test, "rmse") == (
        None, "its folder holds another run (test 1.5 against the row's 1.25)")
    assert share.summarize([other_test], "rmse")["missing"] == [
        "A seed 0 (its folder holds another run (test 1.5 against the row's 1.25))"]
    assert share.member_scores({**row, "tool_reported_test": 1.5}, "rmse")[1] == "folder"


def test_member_shares_under_equal_weights_give_each_member_one_nth():
    shares = share.member_shares({"weighting": "equal", "weights": None, "test": 1.0, "val": 2.0,
                                  "members": [{"name": "m0", "kind": "gnn", "test": 1.1},
                                              {"name": "m1", "kind": "gnn", "test": 0.9},
                                              {"name": "m2", "kind": "svr", "test": 1.3, "test_metrics": {"mean": {"rmse": 2}}}]})
    assert [m["weight"] for m in shares["members"]] == pytest.approx([1 / 3] * 3)
    assert shares["combination"] == {"val": 2.0, "test": 1.0, "val_summary": None, "test_summary": None}
    assert shares["members"][2]["test_summary"] == {"rmse": 2} and shares["weighting"] == "equal"


def test_keep_writes_the_folders_shares_into_the_rows_so_that_no_folder_is_needed(tmp_path, monkeypatch, capsys):
    """``--keep`` writes each row's ``member_shares`` from its own run's folder into the results
    file; a row whose folder holds another run gains none, a row that keeps them is not touched,
    and the table read afterwards without any folder is the same."""
    import shutil

    base = {"tool": "siggate", "status": "ok", "recipe": "cand"}
    rows, folders = [], []
    for target, comb, gnn in (("A", 0.5, 0.7), ("B", 0.4, 0.6), ("C", 0.3, 0.5)):
        row, out = _row(tmp_path / "runs", target, 0)
        _run(out, comb, [("gnn", gnn, gnn + 10, 0.25), ("svr", 0.6, 10.6, 0.75)])
        rows.append({**base, **row})
        folders.append(out)
    for r in rows:
        r["tool_reported_test"] = 1 + {"A": 0.5, "B": 0.4, "C": 0.3}[r["target"]]  # the folders' test metric
    rows[1]["tool_reported_test"] = 9.0  # B's folder holds another run than its row's
    kept_before = share.member_shares(json.loads((folders[2] / "metrics.json").read_text()))
    kept_before["members"][0]["weight"] = 0.5  # what the row keeps, unlike its folder: never overwritten
    rows[2]["member_shares"] = kept_before
    other, out = _row(tmp_path / "other", "A", 0)  # another recipe, whose folder would serve: untouched
    _run(out, 0.5, [("gnn", 0.7, 10.7, 0.25), ("svr", 0.6, 10.6, 0.75)])
    rows.append({**base, **other, "recipe": "other", "tool_reported_test": 1.5})
    mace, peers = tmp_path / "m.json", tmp_path / "p.json"
    mace.write_text(json.dumps({"rows": rows, "summary": ["kept as it is"]}, indent=1) + "\n")
    peers.write_text(json.dumps({"runs": []}))
    monkeypatch.setattr(share, "SOURCES", {"moleculeace": [mace], "peers": [peers]})
    assert share.main(["--recipe", "cand", "--out", str(tmp_path / "before.json")]) == 0
    before = json.loads((tmp_path / "before.json").read_text())
    assert "kept" not in before and json.loads(mace.read_text())["rows"] == rows  # without --keep: nothing written
    assert share.main(["--recipe", "cand", "--keep", "--out", str(tmp_path / "kept.json")]) == 0
    doc = json.loads(mace.read_text())
    assert json.loads((tmp_path / "kept.json").read_text())["kept"] == {"moleculeace": 1}  # the peers hold no row of it
    assert doc["summary"] == ["kept as it is"] and [r["target"] for r in doc["rows"]] == ["A", "B", "C", "A"]
    assert doc["rows"][0]["member_shares"] == share.member_shares(json.loads((folders[0] / "metrics.json").read_text()))
    assert "member_shares" not in doc["rows"][1] and "member_shares" not in doc["rows"][3]
    assert doc["rows"][2]["member_shares"] == kept_before
    for out in folders:
        shutil.rmtree(out)
    written = mace.read_bytes()
    readme = tmp_path / "README.md"
    readme.write_text("top\n<!-- members-share:start -->\nold\n<!-- members-share:end -->\n")
    assert share.main(["--recipe", "cand", "--keep", "--out", str(tmp_path / "after.json"), "--readme", str(readme)]) == 2
    assert "README.md not updated: rows without member shares or their run's folder (moleculeace: B seed 0)" \
        in capsys.readouterr().err and "old" in readme.read_text()  # a table with a hole is not written
    assert mace.read_bytes() == written  # no row gained shares: the file is not rewritten
    after = json.loads((tmp_path / "after.json").read_text())
    assert after["kept"] == {"moleculeace": 0}
    assert after["moleculeace"]["per_group"]["A"] == before["moleculeace"]["per_group"]["A"]  # from the row alone
    assert after["moleculeace"]["per_group"]["C"]["gnn"][1] == 0.5  # C's kept shares, not its folder's
    assert after["moleculeace"]["missing"] == ["B seed 0"] and before["moleculeace"]["missing"] == [
        "B seed 0 (its folder holds another run (test 1.4 against the row's 9.0))"]
