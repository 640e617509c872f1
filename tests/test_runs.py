"""Run folders of ``siggate train`` (issue 24, items 1, 2 and 5): no run is overwritten
without ``--overwrite``, CSV runs get a free default folder named after the file, a run
resumes from its folder alone, Ctrl-C prints the resume command, schedules start at 1% of
the learning rate, and an unwritable ``--out`` is one line with exit code 2 in every command."""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
from pathlib import Path

import pytest
import yaml

from recipe_flags import GNN_ALONE
from test_bad_inputs import _TRAIN_ARGS, _rows
from test_predict import run_cli


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("data") / "solubility.csv"
    path.write_text(_rows(","))
    return path


def _train(capsys, data: Path, *extra) -> tuple[int, str, str]:
    """``siggate train`` with the tiny flags; a key ``extra`` sets with --set replaces the tiny flags' own
    (siggate refuses one key given twice)."""
    cache = data.parent / "cache"
    mine = {extra[i + 1].split("=")[0] for i, a in enumerate(extra[:-1]) if a == "--set"}
    base, i = [], 0
    while i < len(_TRAIN_ARGS):
        if _TRAIN_ARGS[i] == "--set" and _TRAIN_ARGS[i + 1].split("=")[0] in mine:
            i += 2
            continue
        base.append(_TRAIN_ARGS[i])
        i += 1
    return run_cli(["train", "--data", str(data), *base, "--cache-dir", str(cache), *extra], capsys)


def _one_line(err: str) -> str:
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err


# ----------------------------------------------------------------- no run is lost


def test_out_holding_a_run_is_refused_and_overwrite_replaces_it(tmp_path, capsys, data):
    out = tmp_path / "run"
    rc, _, err = _train(capsys, data, "--epochs", "1", "--out", str(out))
    assert rc == 0, err
    last = (out / "last.pt").read_bytes()
    events = sorted(p.name for p in (out / "tb").iterdir())
    assert events
    (out / "notes.txt").write_text("mine")
    rc, stdout, err = _train(capsys, data, "--epochs", "1", "--out", str(out))
    assert rc == 2 and stdout == ""
    assert f"--out {out} holds a run (config.yaml, last.pt, metrics.json)" in _one_line(err)
    assert "pass --resume to continue it, --overwrite to replace it" in err
    assert (out / "last.pt").read_bytes() == last
    rc, _, err = _train(capsys, data, "--epochs", "1", "--out", str(out), "--resume", "--overwrite")
    assert rc == 2 and "give one" in _one_line(err)
    # a typo in a column: refused before the run it would replace is cleared (it was cleared, then refused)
    rc, _, err = run_cli(["train", "--data", str(data), *_TRAIN_ARGS, "--cache-dir", str(data.parent / "cache"),
                          "--target-col", "LOGS", "--epochs", "1", "--out", str(out), "--overwrite"], capsys)
    assert rc == 2 and "'LOGS'" in _one_line(err) and (out / "last.pt").read_bytes() == last
    # a file refused only once it is read (no numeric label, here): the finished run was already
    # deleted and the folder left empty; it is set aside and comes back, for GNN and member runs
    words = data.parent / "words.csv"
    words.write_text("\n".join(line if i == 0 else ",".join([line.split(",")[0], "high", line.split(",")[2]])
                               for i, line in enumerate(data.read_text().splitlines())) + "\n")
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    for extra in ([], ["--members", "gnn,svr"]):
        rc, _, err = run_cli(["train", "--data", str(words), *_TRAIN_ARGS, "--cache-dir", str(data.parent / "cache"),
                              "--epochs", "1", "--out", str(out), "--overwrite", *extra], capsys)
        assert rc == 2 and "holds no numeric value" in _one_line(err), err
        assert sorted(p.relative_to(out) for p in out.rglob("*")) == before
        assert (out / "last.pt").read_bytes() == last

    rc, _, err = _train(capsys, data, "--epochs", "2", "--out", str(out), "--overwrite")
    assert rc == 0, err
    m = json.loads((out / "metrics.json").read_text())
    assert m["epochs"] == 2 and [h["epoch"] for h in m["history"]] == [1, 2]  # trained anew, not resumed
    assert len((out / "log.csv").read_text().splitlines()) == 3
    assert not set(events) & {p.name for p in (out / "tb").iterdir()}  # the old TensorBoard events are gone
    assert (out / "notes.txt").read_text() == "mine"  # what siggate did not write stays
    assert not (out / ".siggate-replaced").exists()  # the replaced run is gone once the new one ran


def test_default_csv_folder_is_named_after_file_and_recipe_and_never_collides(tmp_path, capsys, data, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for _ in range(2):
        rc, _, err = _train(capsys, data, "--epochs", "1")
        assert rc == 0, err
    first, second = Path("runs/solubility-csv-attnoff-seed0"), Path("runs/solubility-csv-attnoff-seed0-2")
    assert sorted(Path("runs").iterdir()) == [first, second]
    for run in (first, second):
        m = json.loads((run / "metrics.json").read_text())
        assert (m["attn"], m["gate"]) == (False, None)  # no attention branch: no gate either
    assert json.loads((first / "metrics.json").read_text())["test"] == json.loads(
        (second / "metrics.json").read_text())["test"]  # the same run twice, both kept


def test_default_folder_names_the_gate_or_attention_off(tmp_path):
    from siggate.cli import default_out_dir
    from siggate.config import load_config

    assert default_out_dir(load_config("nci5k")) == Path("runs/nci5k-elementwise-seed0")
    assert default_out_dir(load_config("zinc", ["model.attn=false", "train.seed=3"])) == Path("runs/zinc-attnoff-seed3")
    csv = load_config("csv", ["data.csv=some/dir/my.data.csv", "data.target_cols=[y]", "model.attn=true",
                              "model.gate=headwise"])
    assert default_out_dir(csv) == Path("runs/my.data-csv-headwise-seed0")
    assert default_out_dir(csv, str(tmp_path / "x")) == tmp_path / "x"


def test_free_run_dir_skips_folders_that_hold_runs(tmp_path):
    from siggate.train.rundir import free_run_dir, holds_run

    base = tmp_path / "r"
    assert free_run_dir(base) == base
    base.mkdir()
    (base / "tb").mkdir()  # no run files: still free
    assert free_run_dir(base) == base and not holds_run(base)
    for path, marker in ((base, "config.yaml"), (tmp_path / "r-2", "metrics.json")):
        path.mkdir(exist_ok=True)
        (path / marker).write_text("")
    assert free_run_dir(base) == tmp_path / "r-3"
    ens = tmp_path / "e" / "member1"
    ens.mkdir(parents=True)
    (ens / "last.pt").write_bytes(b"")
    assert holds_run(tmp_path / "e")  # an ensemble folder holds runs in its members


def test_run_commit_reads_the_members_record_first(tmp_path):
    from siggate.train.rundir import run_commit

    assert run_commit(tmp_path / "none") is None
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"train": {}, "_meta": {"git_commit": "c" * 40}}))
    assert run_commit(tmp_path) == "c" * 40
    (tmp_path / "members.yaml").write_text(yaml.safe_dump({"_meta": {"git_commit": "m" * 40}}))
    assert run_commit(tmp_path) == "m" * 40  # a run of several members: its own record, not a member's config
    (tmp_path / "members.yaml").write_text(yaml.safe_dump({"train": {}}))
    assert run_commit(tmp_path) is None  # a record without the commit says none, rather than the config's


def test_ensemble_folders_follow_the_same_rules(tmp_path, capsys, data):
    out = tmp_path / "ens"
    rc, _, err = _train(capsys, data, "--epochs", "1", "--ensemble", "2", "--out", str(out))
    assert rc == 0, err
    rc, _, err = _train(capsys, data, "--epochs", "1", "--ensemble", "2", "--out", str(out))
    assert rc == 2 and "metrics.json, members.yaml, member0/config.yaml" in _one_line(err) and "--overwrite" in err
    rc, _, err = run_cli(["train", "--resume", str(out), "--ensemble", "3"], capsys)
    assert rc == 2 and "the run was trained with --ensemble 2, not --ensemble 3" in _one_line(err)
    rc, _, err = run_cli(["train", "--resume", str(out), "--ensemble", "2", "--no-progress"], capsys)
    assert rc == 0, err
    rc, _, err = run_cli(["train", "--resume", str(out), "--no-progress"], capsys)  # no flags: the run's own
    assert rc == 0, err
    from siggate.train.record import git_commit
    from siggate.train.rundir import run_commit

    assert run_commit(out) == git_commit() == run_commit(out / "member0")  # what the harnesses' rows record
    record = out / "members.yaml"  # a folder written before the members record: the flags are asked for
    kept = record.read_text()
    doc = yaml.safe_load(kept)
    del doc["_meta"]["members"]
    record.write_text(yaml.safe_dump(doc))
    rc, _, err = run_cli(["train", "--resume", str(out)], capsys)
    assert rc == 2 and "this is an ensemble folder of several members; resume it with --ensemble N, N as it was " \
        "trained" in _one_line(err)
    record.write_text(kept)
    stale = (out / "member1" / "last.pt").stat().st_mtime_ns
    (out / "member2").mkdir()  # a member of an earlier, larger ensemble
    (out / "member2" / "best.pt").write_bytes(b"")
    rc, _, err = _train(capsys, data, "--epochs", "1", "--ensemble", "2", "--out", str(out), "--overwrite")
    assert rc == 0, err
    assert sorted(p.name for p in out.iterdir()) == ["calibration.json", "data_report.csv", "domain.json",
                                                     "domain_fingerprints.npz", "fitted_molecules.json",
                                                     "learning_curves.png", "member0",
                                                     "member1", "members.yaml", "metrics.json", "parity.png",
                                                     "predictor.json",
                                                     "residuals.png", "splits.csv", "test_predictions.csv"]
    assert (out / "member1" / "last.pt").stat().st_mtime_ns != stale


# ---------------------------------------------------------- resume from the folder


def test_resume_needs_only_the_folder(tmp_path, capsys, data, monkeypatch):
    out = tmp_path / "run"
    rc, _, err = _train(capsys, data, "--epochs", "2", "--set", "train.warmup_epochs=1", "--out", str(out))
    assert rc == 0, err
    first = json.loads((out / "metrics.json").read_text())
    base_lr = yaml.safe_load((out / "config.yaml").read_text())["train"]["lr"]
    assert first["history"][0]["lr"] == pytest.approx(0.01 * base_lr)  # the warmup starts at 1%, not 1e-6
    assert first["history"][1]["lr"] == pytest.approx(base_lr)

    rc, _, err = run_cli(["train", "--resume", str(out), "--epochs", "3", "--no-progress"], capsys)
    assert rc == 0, err
    got = json.loads((out / "metrics.json").read_text())
    assert got["epochs"] == 3 and got["history"][:2] == first["history"]  # continued, not retrained
    rc, _, err = run_cli(["train", "--resume", "--out", str(out), "--epochs", "4", "--no-progress"], capsys)
    assert rc == 0, err
    assert json.loads((out / "metrics.json").read_text())["epochs"] == 4
    rc, _, err = _train(capsys, data, "--set", "train.warmup_epochs=1", "--resume", "--out", str(out),
                        "--epochs", "4")  # every flag again: they agree
    assert rc == 0, err
    # a run may grow, not shrink: fewer epochs than it trained left a record saying 2 epochs with 4 in its history
    kept = {name: (out / name).read_bytes() for name in ("metrics.json", "config.yaml", "last.pt")}
    import siggate.train.pipeline as pipeline

    def no_data(*args, **kwargs):
        raise AssertionError("the data were loaded before the epochs were checked")

    monkeypatch.setattr(pipeline, "prepare_data_ranked", no_data)  # refused before the data load
    rc, _, err = run_cli(["train", "--resume", str(out), "--epochs", "2", "--no-progress"], capsys)
    assert rc == 2 and "the run has trained 4 epochs, and a resumed run may grow, not shrink; give --epochs 4 or " \
        "more" in _one_line(err)
    monkeypatch.undo()
    assert {name: (out / name).read_bytes() for name in kept} == kept
    rc, _, err = run_cli(["train", "--resume", str(out), "--no-progress"], capsys)  # finished: its record stays
    assert rc == 0 and {name: (out / name).read_bytes() for name in kept} == kept, err


def test_a_resume_on_another_count_of_threads_warns_and_each_epoch_records_its_own(tmp_path, capsys, data, caplog):
    """A run resumed with another ``--threads`` went on without a word and its record then named
    only the new count, though 30 epochs of a GNN resumed on 2 threads after 5 on 1 ended 11% off
    the uninterrupted run's test MAE (float sums in another order; helper-156). Each epoch's history
    row records its threads, and a resume on another count warns."""
    out = tmp_path / "run"
    rc, _, err = _train(capsys, data, "--epochs", "2", "--threads", "1", "--out", str(out))
    assert rc == 0, err
    caplog.clear()
    rc, _, err = run_cli(["train", "--resume", str(out), "--epochs", "3", "--threads", "2", "--no-progress"], capsys)
    assert rc == 0, err
    history = json.loads((out / "metrics.json").read_text())["history"]
    assert [h["threads"] for h in history] == [1, 1, 2]
    assert [r.getMessage() for r in caplog.records if "threads" in r.getMessage()] == [
        "resuming a run trained on 1 thread on 2: another count sums in another order, so its next epochs differ "
        "from an uninterrupted run's, and over many epochs its best epoch and test scores by about as much as another "
        "seed's; --threads 1 continues it as it ran (each epoch's row records its threads)"]
    caplog.clear()
    rc, _, err = run_cli(["train", "--resume", str(out), "--epochs", "4", "--threads", "2", "--no-progress"], capsys)
    assert rc == 0 and not [r for r in caplog.records if "threads" in r.getMessage()], err  # as its last epoch ran


def test_a_run_whose_csv_moved_is_resumed_with_data_alone(tmp_path, capsys, data):
    """``--resume RUN`` of a run whose CSV had moved stopped at "CSV file not found" without a
    word of ``--data NEW_PATH``, and ``--resume RUN --data NEW_PATH`` was refused for a
    ``--target-col`` the run's config already names. The refusal names the fix, which works."""
    here = tmp_path / "d.csv"
    shutil.copy(data, here)
    out = tmp_path / "run"
    rc, _, err = _train(capsys, here, "--epochs", "1", "--out", str(out))
    assert rc == 0, err
    moved = tmp_path / "moved.csv"
    here.rename(moved)
    rc, _, err = run_cli(["train", "--resume", str(out), "--epochs", "2", "--no-progress"], capsys)
    assert rc == 2 and _one_line(err).strip() == (
        f"siggate train: error: --resume {out}: the run's CSV {here} is gone; if it moved, give its new path with "
        "--data NEW_PATH (the file must be the one the run trained on: its SHA-256 is checked)")
    rc, _, err = run_cli(["train", "--resume", str(out), "--data", str(moved), "--epochs", "2", "--no-progress"],
                         capsys)
    assert rc == 0, err
    assert json.loads((out / "metrics.json").read_text())["epochs"] == 2


def test_a_finished_run_of_members_with_a_damaged_file_is_mended_by_its_resume(tmp_path, capsys, data, caplog):
    """``--resume`` of a finished run of members whose member arrays, top-level predictor.json or
    calibration.json was cut short said the run had finished and exited 0, leaving a folder that
    predict refused (helper-155). The resume reads what it can, fits a member it cannot read again
    (deterministic: the same test predictions) and writes the record again; predict then reads it."""
    out = tmp_path / "run"
    rc, _, err = _train(capsys, data, "--members", "svr,rf", "--out", str(out))
    assert rc == 0, err
    first = (out / "test_predictions.csv").read_bytes()
    for damaged in ("member0/arrays.pt", "predictor.json", "calibration.json"):
        whole = (out / damaged).read_bytes()
        (out / damaged).write_bytes(whole[: len(whole) // 3])
        caplog.clear()
        rc, _, err = run_cli(["train", "--resume", str(out), "--no-progress"], capsys)
        assert rc == 0, err
        said = [r.getMessage() for r in caplog.records if "cannot be read" in r.getMessage()]
        assert said and said[0].startswith(f"{out}: the finished run cannot be read ("), said
        assert (out / "test_predictions.csv").read_bytes() == first
        rc, _, err = run_cli(["predict", "--checkpoint", str(out), "CCO", "--coverage", "0.9"], capsys)
        assert rc == 0, (damaged, err)


def test_a_resume_removes_what_a_killed_run_left_of_its_writes(tmp_path, capsys, data):
    """``kill -9`` between writing a checkpoint's temporary file and moving it in left a
    ``.last.pt.XXXXXXXX.tmp`` (1.4 MB for a small GNN) in the run folder for good (helper-155). The
    process that claims the folder removes those of the run's files, its members' too; a user's own
    file of that shape and another name stays."""
    out = tmp_path / "run"
    rc, _, err = _train(capsys, data, "--members", "svr,rf", "--out", str(out))
    assert rc == 0, err
    left = [out / ".last.pt.k2j_9xq1.tmp", out / ".metrics.json.abcdefgh.tmp", out / "member0" / ".arrays.pt.0a1b2c3d.tmp"]
    mine = out / ".notes.txt.abcdefgh.tmp"
    for p in (*left, mine):
        p.write_bytes(b"half")
    rc, _, err = run_cli(["train", "--resume", str(out), "--no-progress"], capsys)
    assert rc == 0, err
    assert not any(p.exists() for p in left) and mine.read_bytes() == b"half"


def test_a_resume_without_the_runs_config_names_what_is_gone(tmp_path, capsys, data):
    """A run whose config.yaml was lost, resumed by its folder alone, listed a dozen differences
    from the default config and told the user to "resume with the run's own flags" (helper-155). It
    says that config.yaml is gone and what to do; the flags that started the run resume it."""
    out = tmp_path / "run"
    rc, _, err = _train(capsys, data, "--epochs", "1", "--out", str(out))
    assert rc == 0, err
    (out / "config.yaml").unlink()
    rc, _, err = run_cli(["train", "--resume", str(out), "--epochs", "2", "--no-progress"], capsys)
    assert rc == 2 and _one_line(err).strip().endswith(
        "the run's config.yaml is gone: restore it (a copy of the run folder), or give the flags that started the "
        "run"), err
    rc, _, err = _train(capsys, data, "--epochs", "2", "--resume", str(out))
    assert rc == 0, err


def test_a_member_of_a_run_is_no_folder_to_train_into(tmp_path, capsys, data):
    """``train --overwrite --out RUN/member0`` replaced a member of a run of several members with a
    run of its own, breaking that run without a word (helper-155). Refused, the run as it was; a
    folder of such a name elsewhere is a folder like any."""
    out = tmp_path / "run"
    rc, _, err = _train(capsys, data, "--members", "rf,svr", "--out", str(out))
    assert rc == 0, err
    kept = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    rc, _, err = _train(capsys, data, "--members", "rf", "--out", str(out / "member0"), "--overwrite")
    assert rc == 2 and err.strip().splitlines()[-1] == (  # (after the warning of the tiny flags' GNN keys)
        f"siggate train: error: --out {out / 'member0'} is a member of the run {out.resolve()}: a run trained into it "
        f"would replace that run's member; continue that run with --resume {out.resolve()}, or choose another --out")
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == kept
    rc, _, err = _train(capsys, data, "--members", "rf", "--out", str(tmp_path / "mine" / "member0"))
    assert rc == 0, err


def test_overwrite_refuses_to_set_aside_what_the_run_reads(tmp_path, capsys, data):
    """``--overwrite`` set aside the run's files before the new run read its inputs: a CSV of a run
    file's name in the folder (``--data OUT/test_predictions.csv``) was then "not found", and
    ``--init OUT`` "held no pretrained.pt, best.pt or last.pt" (helper-155). Both are refused before
    anything moves."""
    out = tmp_path / "run"
    rc, _, err = _train(capsys, data, "--epochs", "1", "--out", str(out))
    assert rc == 0, err
    inside = out / "test_predictions.csv"
    shutil.copy(data, inside)  # the user's CSV, of a name the run writes, in its folder
    kept = sorted(p.name for p in out.iterdir())
    rc, _, err = _train(capsys, inside, "--epochs", "1", "--out", str(out), "--overwrite")
    assert rc == 2 and err.strip().endswith(
        f"--data {inside} is a file of the run in the folder that --overwrite replaces, so it would be gone before it is "
        f"read; copy it out of {out}, or choose another --out"), err
    rc, _, err = _train(capsys, data, "--epochs", "1", "--init", str(out), "--out", str(out), "--overwrite")
    assert rc == 2 and err.strip().endswith(
        f"--init {out} is the folder that --overwrite replaces, so it would be gone before it is read; copy it out of "
        f"{out}, or choose another --out"), err
    assert sorted(p.name for p in out.iterdir()) == kept


def test_the_fixes_named_never_lead_into_a_run(tmp_path, capsys, data):
    """``--resume RUN/member0`` said "drop --resume to start a new run there" (inside another run),
    and ``predict --output RUN/tb`` suggested ``RUN/tb/predictions.csv``, a file in the run's own
    folders (helper-155). Each names a fix outside the run: the run's own resume, a file name here."""
    out = tmp_path / "run"
    rc, _, err = _train(capsys, data, "--members", "rf,svr", "--out", str(out))
    assert rc == 0, err
    rc, _, err = run_cli(["train", "--resume", str(out / "member0"), "--no-progress"], capsys)
    assert rc == 2 and _one_line(err).strip() == (
        f"siggate train: error: --resume {out / 'member0'}: this is a member of the run {out.resolve()}, which resumes "
        f"as a whole (its members with it): siggate train --resume {out.resolve()}")
    (out / "tb").mkdir()
    for folder, suggested in ((out / "tb", "predictions.csv"), (out, "predictions.csv"),
                              (tmp_path, str(tmp_path / "predictions.csv"))):
        rc, _, err = run_cli(["predict", "--checkpoint", str(out), "CCO", "--output", str(folder)], capsys)
        assert rc == 2 and err.strip() == (f"siggate predict: error: --output {folder} is a folder; give a file name, "
                                           f"e.g. {suggested}"), err


def test_members_flags_never_turn_a_run_of_one_gnn_into_another_run(tmp_path, capsys, data):
    """``--resume RUN --members svr,rf`` (or ``--ensemble 2``) on a finished run of one GNN found no
    members record, took the run's last.pt for a member's and trained a new run over it: other data,
    the default config, its metrics replaced. Refused, the folder as it was."""
    out = tmp_path / "run"
    rc, _, err = _train(capsys, data, "--epochs", "1", "--out", str(out))
    assert rc == 0, err
    kept = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    for flags in (["--members", "svr,rf"], ["--ensemble", "2"], ["--members", "gnn,rf"]):
        rc, _, err = run_cli(["train", "--resume", str(out), *flags, "--no-progress"], capsys)
        assert rc == 2 and f"--resume {out}: the folder holds the run of one GNN, and --members/--ensemble would " \
            "train a run of several members over it; drop them" in _one_line(err)
        assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == kept


@pytest.mark.parametrize(
    "extra, expected",
    [
        (["--set", "model.dim=32"], "model.dim: checkpoint has 16, current config has 32"),
        (["--seed", "5"], "train.seed: checkpoint has 0, current config has 5"),
        (["--set", "train.warmup_epochs=0"], "train.warmup_epochs: checkpoint has 1, current config has 0"),
    ],
    ids=["set", "seed", "schedule"],
)
def test_resume_names_a_flag_that_differs(tmp_path, capsys, data, extra, expected):
    out = tmp_path / "run"
    rc, _, err = _train(capsys, data, "--epochs", "2", "--set", "train.warmup_epochs=1", "--out", str(out))
    assert rc == 0, err
    last = (out / "last.pt").read_bytes()
    rc, _, err = run_cli(["train", "--resume", str(out), "--epochs", "3", *extra], capsys)
    assert rc == 2 and f"--resume {out}: the flags differ from the run's config" in _one_line(err)
    assert expected in err and "drop them to continue the run" in err
    assert (out / "last.pt").read_bytes() == last


def test_resume_of_a_folder_without_a_run_fails(tmp_path, capsys):
    missing = tmp_path / "typo"
    rc, _, err = run_cli(["train", "--resume", str(missing)], capsys)
    assert rc == 2 and f"--resume {missing}: no such folder, so there is no run to resume" in _one_line(err)
    assert not missing.exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    rc, _, err = run_cli(["train", "--resume", "--out", str(empty)], capsys)
    assert rc == 2 and "holds no run to resume (no config.yaml)" in _one_line(err)
    assert list(empty.iterdir()) == []
    rc, _, err = run_cli(["train", "--resume", str(empty), "--out", str(missing)], capsys)
    assert rc == 2 and "name two folders" in _one_line(err)
    rc, _, err = run_cli(["train", "--resume"], capsys)
    assert rc == 2 and "--resume needs the run folder" in _one_line(err)


def test_saved_config_is_a_config(tmp_path, capsys, data):
    from siggate.config import load_config

    out = tmp_path / "run"
    rc, _, err = _train(capsys, data, "--epochs", "1", "--out", str(out))
    assert rc == 0, err
    saved = yaml.safe_load((out / "config.yaml").read_text())
    assert "_meta" in saved
    del saved["_meta"]
    assert load_config(str(out / "config.yaml")).to_dict() == saved
    rc, _, err = run_cli(["train", "--config", str(out / "config.yaml"), "--out", str(tmp_path / "again"),
                          "--no-progress"], capsys)
    assert rc == 0, err
    again = json.loads((tmp_path / "again" / "metrics.json").read_text())
    assert again["test"] == json.loads((out / "metrics.json").read_text())["test"]


def test_interrupt_prints_the_command_that_resumes(tmp_path, capsys, data, monkeypatch):
    import siggate.train.dataprep as dataprep
    import siggate.train.pipeline as pipeline

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    out = tmp_path / "my run"
    monkeypatch.setattr(pipeline, "fit", interrupted)  # Ctrl-C after config.yaml, before the first epoch ends
    rc, _, err = _train(capsys, data, "--epochs", "1", "--out", str(out))
    assert rc == 130
    # the flags that chose the members come back with the command (_TRAIN_ARGS names the GNN alone)
    assert _one_line(err).strip() == ("siggate train: interrupted; resume with: siggate train --resume "
                                      f"'{out}' {' '.join(GNN_ALONE)}")
    monkeypatch.undo()
    argv = shlex.split(err.split("resume with: ")[1])
    rc, _, err = run_cli(argv[1:] + ["--no-progress"], capsys)  # the printed command, as it is
    assert rc == 0, err
    assert json.loads((out / "metrics.json").read_text())["epochs"] == 1

    monkeypatch.setattr(dataprep, "prepare_data", interrupted)  # Ctrl-C while featurizing: nothing to resume
    rc, _, err = _train(capsys, data, "--epochs", "1", "--out", str(tmp_path / "early"))
    assert rc == 130 and "nothing was saved; run the same command again" in _one_line(err)


# ------------------------------------------------------------------- schedules


def _config(*argv):
    from siggate.config_args import add_config_args, config_from_args

    parser = argparse.ArgumentParser()
    add_config_args(parser)
    return config_from_args(parser.parse_args(list(argv)))


def test_epochs_scale_the_warmup_as_budget_does():
    from siggate.config_args import CLIError

    epochs, budget = _config("--config", "zinc", "--epochs", "50").train, _config("--config", "zinc", "--budget", "50").train
    assert (epochs.epochs, epochs.warmup_epochs, epochs.warmup_start) == (50, 1, 0.01)  # round(50 * 50 / 2000)
    assert (budget.epochs, budget.warmup_epochs, budget.warmup_start) == (50, 1, 0.0)  # the published start
    assert _config("--config", "zinc", "--epochs", "400").train.warmup_epochs == 10
    full = _config("--config", "zinc").train
    assert (full.epochs, full.warmup_epochs, full.warmup_start) == (2000, 50, 0.01)
    given = _config("--config", "zinc", "--epochs", "50", "--set", "train.warmup_epochs=7",
                    "--set", "train.warmup_start=0.2").train
    assert (given.warmup_epochs, given.warmup_start) == (7, 0.2)  # --set wins over the rules
    from siggate.train.members import run_refusal

    assert run_refusal(_config("--epochs", "5", "--set", "train.warmup_epochs=5"), ["gnn"], 1, several=False) == (
        "train.warmup_epochs=5 leaves no epoch after the warmup of a 5-epoch run; train for more epochs or lower it "
        "(--set train.warmup_epochs=N with N < 5)")
    with pytest.raises(CLIError, match="--epochs and --budget both set the number of epochs"):
        _config("--epochs", "5", "--budget", "5")


@pytest.mark.parametrize("warmup", [1, 3, 50, 200, 1000])
def test_no_warmup_epoch_trains_below_one_percent(warmup):
    from siggate.train.schedule import warmup_cosine_factor

    factors = [warmup_cosine_factor(e, warmup, warmup + 10, 0.01) for e in range(warmup + 1)]
    assert factors[0] == pytest.approx(0.01) and factors[warmup] == 1.0
    assert all(0.01 <= a < b for a, b in zip(factors, factors[1:]))  # rising from 1% to the base
    # start 0 is GraphGPS's cosine_with_warmup, unchanged: epoch / warmup floored at 1e-6
    assert [warmup_cosine_factor(e, warmup, warmup + 10) for e in range(warmup)] == [
        max(1e-6, e / warmup) for e in range(warmup)]


def test_resume_keeps_the_runs_schedule():
    from siggate.config import load_config
    from siggate.train.rundir import keep_run_schedule

    saved = load_config("zinc", ["train.warmup_epochs=50", "train.warmup_start=0"]).to_dict()
    longer = load_config("zinc", ["train.epochs=4000", "train.warmup_epochs=100", "train.warmup_start=0.01"])
    kept = keep_run_schedule(longer, saved, set()).train
    assert (kept.epochs, kept.warmup_epochs, kept.warmup_start) == (4000, 50, 0.0)
    assert keep_run_schedule(longer, saved, {"train.warmup_epochs"}).train.warmup_epochs == 100


def test_older_saved_configs_read_as_the_published_schedule():
    from siggate.config import upgrade_config_dict

    # select is left unset: its default "auto" keeps the best epoch in a run of its own, as older runs did
    assert upgrade_config_dict({"train": {"epochs": 3}})["train"] == {"epochs": 3, "warmup_start": 0.0, "init": "",
                                                                          "eval_norm": "running", "cliff_weight": 0.0}


# -------------------------------------------------------- --out that cannot be one


def _blocked(monkeypatch, folder: Path) -> None:
    """``folder`` behaves as /sys does for root: os.access says yes, creating anything fails."""
    import tempfile

    from siggate import files

    real = tempfile.mkdtemp

    def mkdtemp(prefix=None, dir=None):
        if dir is not None and Path(dir) == folder:
            raise PermissionError(1, "Operation not permitted")
        return real(prefix=prefix, dir=dir)

    monkeypatch.setattr(files.tempfile, "mkdtemp", mkdtemp)


@pytest.mark.parametrize(
    "argv, what",
    [
        (["train", "--epochs", "1", "--out", "{x}/run"], "for the run"),
        (["compare", "--seeds", "0", "--gates", "none", "--epochs", "1", "--out", "{x}/cmp"], "for the comparison"),
        (["analyze", "synthetic", "--out", "{x}/syn"], "for the analysis"),
        (["analyze", "report", "{x}", "--out", "{x}/report.md"], "for the report"),
        (["analyze", "claims", "{x}", "--out", "{x}/claims.md"], "for the claims table"),
        (["bench", "--out", "{x}/bench"], "for the benchmark"),
    ],
    ids=["train", "compare", "synthetic", "report", "claims", "bench"],
)
def test_unwritable_out_is_one_line_in_every_command(tmp_path, capsys, monkeypatch, argv, what):
    locked = tmp_path / "locked"
    locked.mkdir()
    _blocked(monkeypatch, locked)
    rc, stdout, err = run_cli([a.replace("{x}", str(locked)) for a in argv], capsys)
    assert rc == 2, err
    assert f"{locked} is not writable (Operation not permitted); choose a folder you can write to {what}" in _one_line(err)
    assert list(locked.iterdir()) == []


def test_out_under_sys_is_refused(capsys):
    rc, _, err = run_cli(["train", "--epochs", "1", "--out", "/sys/siggate-run"], capsys)
    assert rc == 2 and "/sys" in _one_line(err) and "choose a folder you can write to" in err


def test_no_epoch_of_the_whole_schedule_trains_below_the_start():
    """The cosine tail stops at ``start`` too (1% for siggate train); ``start=0`` (--budget, the
    published protocol) decays to 0 as GraphGPS's does."""
    import math

    from siggate.train.schedule import warmup_cosine_factor

    total, warmup = 150, 3
    tail = [warmup_cosine_factor(e, warmup, total, 0.01) for e in range(total)]
    assert min(tail) == pytest.approx(0.01) and tail[-1] == pytest.approx(0.01)
    graphgps = [warmup_cosine_factor(e, warmup, total) for e in range(warmup, total)]
    assert graphgps == pytest.approx([0.5 * (1 + math.cos(math.pi * (e - warmup) / (total - warmup)))
                                      for e in range(warmup, total)], rel=1e-12, abs=1e-15)
    assert graphgps[-1] < 0.001


def test_a_single_run_resumes_as_one_whatever_the_recipe_s_default_members(tmp_path, capsys, data, monkeypatch):
    """``--resume`` of a run of the GNN alone, with ``--data`` given again, stays a run of the GNN
    alone even when the csv recipe's default is several members (``options.RECIPE_MEMBERS``): no
    members are trained into a single run's folder."""
    from siggate import options

    out = tmp_path / "one"
    rc, _, err = _train(capsys, data, "--epochs", "1", "--out", str(out))
    assert rc == 0, err
    monkeypatch.setitem(options.RECIPE_MEMBERS, "csv", ("gnn,svr", "val"))
    i = _TRAIN_ARGS.index("--members")
    no_members = _TRAIN_ARGS[:i] + _TRAIN_ARGS[i + 2:]  # the resume names no members: the folder decides
    assert "--members" not in no_members
    rc, _, err = run_cli(["train", "--data", str(data), *no_members, "--cache-dir", str(data.parent / "cache"),
                          "--epochs", "2", "--resume", str(out)], capsys)
    assert rc == 0, err
    assert not (out / "members.yaml").exists() and not (out / "member0").exists()
    assert json.loads((out / "metrics.json").read_text())["best_epoch"] in (1, 2)
    assert len(json.loads((out / "metrics.json").read_text())["history"]) == 2


def test_a_last_pt_with_damaged_training_state_is_one_line_and_keeps_the_run(tmp_path, capsys, data):
    """A last.pt whose entries only a resume reads were of the wrong type (state a string, history
    a string, an optimizer without param_groups) ended --resume in a TypeError, AttributeError or
    KeyError traceback, after log.csv had been cut. Refused in one line; the run's files as they were."""
    import torch

    out = tmp_path / "run"
    rc, _, err = _train(capsys, data, "--epochs", "2", "--set", "train.warmup_epochs=1", "--out", str(out))
    assert rc == 0, err
    good = torch.load(out / "last.pt", weights_only=True)
    for entry, value in (("state", "x"), ("history", "x"), ("optimizer", {}), ("history", [1, 2])):
        torch.save({**good, entry: value}, out / "last.pt")
        kept = {name: (out / name).read_bytes() for name in ("metrics.json", "log.csv", "last.pt")}
        rc, _, err = run_cli(["train", "--resume", str(out), "--epochs", "3", "--no-progress"], capsys)
        line = _one_line(err)
        assert rc == 2 and f"cannot resume from {out / 'last.pt'}: its training state is not one siggate wrote" in line
        assert line.strip().endswith("restore it, or train the run again with --overwrite"), line
        assert {name: (out / name).read_bytes() for name in kept} == kept, entry


def test_out_holding_files_of_run_names_but_no_run_is_refused(tmp_path, capsys, data):
    """A folder of someone's own splits.csv, best.pt and tb/ (no run record) was trained into, its
    files replaced. Refused in one line, the files as they were; --overwrite replaces them."""
    out = tmp_path / "mine"
    (out / "tb").mkdir(parents=True)
    for name in ("splits.csv", "best.pt", "notes.txt"):
        (out / name).write_text("mine\n")
    rc, stdout, err = _train(capsys, data, "--epochs", "1", "--out", str(out))
    assert rc == 2 and stdout == ""
    assert (f"--out {out} holds best.pt, splits.csv, tb/, names a run writes, but no run: move them or choose "
            "another --out (--overwrite replaces them)") in _one_line(err)
    assert all((out / name).read_text() == "mine\n" for name in ("splits.csv", "best.pt", "notes.txt"))
    rc, _, err = _train(capsys, data, "--epochs", "1", "--out", str(out), "--overwrite")
    assert rc == 0, err
    assert (out / "notes.txt").read_text() == "mine\n" and (out / "splits.csv").read_text() != "mine\n"


def test_threads_flag_sets_the_runs_threads_over_the_configs(tmp_path, capsys, data):
    """``train --threads 2`` on the csv recipe (whose config sets train.threads: 1) trained on one
    thread and recorded 1: the config's value was applied after the flag's."""
    import torch

    before = torch.get_num_threads()
    try:
        rc, _, err = _train(capsys, data, "--epochs", "1", "--threads", "2", "--out", str(tmp_path / "r"))
        assert rc == 0, err
        assert yaml.safe_load((tmp_path / "r" / "config.yaml").read_text())["train"]["threads"] == 2
        rc, _, err = _train(capsys, data, "--epochs", "1", "--threads", "2", "--set", "train.threads=1",
                            "--out", str(tmp_path / "s"))
        assert rc == 2 and "--threads and --set train.threads both set train.threads; give one" in _one_line(err)
    finally:
        torch.set_num_threads(before)


def test_a_run_resumed_at_another_commit_keeps_the_commit_that_started_it(tmp_path, capsys, data, monkeypatch):
    """Resuming an interrupted run at another checkout rewrote its record's git_commit with the new
    one: the whole run was attributed to a commit that trained none of it (``run_commit``, which the
    harnesses match rows by). The first commit stays; the later ones are listed. (Here each resume
    goes on from a run stopped before its last record; a finished run resumed is left as it is.)"""
    import siggate.train.record as record
    from siggate.train.rundir import run_commit

    out = tmp_path / "run"
    runs = (("a", "1.0", []), ("b", "1.1", ["--resume"]), ("b", "1.1", ["--resume"]), ("c", "1.1", ["--resume"]),
            ("a", "1.0", ["--resume"]))
    for commit, version, extra in runs:
        monkeypatch.setattr(record, "git_commit", lambda commit=commit: commit * 40)
        monkeypatch.setattr(record, "__version__", version)
        if extra:  # stopped after its members were saved, before the run's record
            (out / "metrics.json").unlink()
        rc, _, err = run_cli(["train", "--data", str(data), "--target-col", "y", "--split", "column:split",
                              "--members", "svr,rf", "--cache-dir", str(data.parent / "cache"), "--out", str(out),
                              *extra], capsys)
        assert rc == 0, err
    kept = (out / "members.yaml").read_text()
    monkeypatch.setattr(record, "git_commit", lambda: "d" * 40)  # finished: nothing goes on, nothing is recorded
    rc, _, err = run_cli(["train", "--resume", str(out)], capsys)
    assert rc == 0 and (out / "members.yaml").read_text() == kept, err
    meta = yaml.safe_load((out / "members.yaml").read_text())["_meta"]
    # the first commit and version stay; each later one, in order (back at a: listed again)
    assert meta["git_commit"] == "a" * 40 and meta["resumed_at"] == ["b" * 40, "c" * 40, "a" * 40]
    assert meta["siggate_version"] == "1.0" and meta["resumed_versions"] == ["1.1", "1.0"]
    assert run_commit(out) == "a" * 40


def test_a_replacement_stopped_before_it_saved_anything_leaves_the_old_run(tmp_path, capsys, data, monkeypatch):
    """--overwrite sets the finished run aside; Ctrl-C (or a crash) while the new run had saved
    only its record removed the old run all the same, and a replacement killed outright (kill -9)
    left it in .siggate-replaced, which the next command into the folder deleted. Both come back."""
    from siggate.cli import _refusal_takes_back, claim_out_dir
    from siggate.train import rundir

    out = tmp_path / "run"
    rc, _, err = run_cli(["train", "--data", str(data), "--target-col", "y", "--split", "column:split", "--members",
                          "svr,rf", "--cache-dir", str(data.parent / "cache"), "--out", str(out)], capsys)
    assert rc == 0, err

    def files():
        return {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()}

    before = files()
    for stop in (KeyboardInterrupt, RuntimeError):
        lock = claim_out_dir(out, overwrite=True)
        assert not rundir.run_files(out) and (out / rundir.ASIDE).is_dir()
        with pytest.raises(stop) as stopped:
            with _refusal_takes_back(lock):
                (out / "members.yaml").write_text("{}\n")  # the new run's record, nothing more
                raise stop("stopped")
        lock.release()
        assert files() == before
        assert getattr(stopped.value, "earlier_run_kept", False) == (stop is KeyboardInterrupt)
    # Ctrl-C then said "resume with: siggate train --resume run", which resumed the earlier, finished
    # run ("nothing to train"): the new run was never trained, and nothing said so
    import siggate.train.ensemble as ensemble

    def stopped_at_once(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(ensemble, "train_members", stopped_at_once)
    rc, _, err = run_cli(["train", "--data", str(data), "--target-col", "y", "--split", "column:split", "--members",
                          "svr,rf", "--cache-dir", str(data.parent / "cache"), "--out", str(out), "--overwrite"], capsys)
    assert rc == 130 and err.splitlines()[-1] == (f"siggate train: interrupted; nothing of the new run was saved, and "
                                                  f"the earlier run in {out} is kept; run the same command again to "
                                                  "replace it"), err
    assert files() == before
    monkeypatch.undo()
    rundir.set_aside(out)  # what a replacement killed outright leaves
    assert not rundir.run_files(out)
    rc, _, err = run_cli(["train", "--data", str(data), "--target-col", "y", "--split", "column:split", "--members",
                          "svr,rf", "--cache-dir", str(data.parent / "cache"), "--out", str(out)], capsys)
    assert rc == 2 and "holds a run" in err, err
    assert files() == before
    # killed after the new run wrote its record: the old run stays aside, and the refusal names it
    rundir.set_aside(out)
    (out / "members.yaml").write_text((out / rundir.ASIDE / "members.yaml").read_text())
    rc, _, err = run_cli(["train", "--data", str(data), "--target-col", "y", "--split", "column:split", "--members",
                          "svr,rf", "--cache-dir", str(data.parent / "cache"), "--out", str(out)], capsys)
    assert rc == 2 and "(the run an interrupted --overwrite replaced is in .siggate-replaced/: move it out to keep " \
        "it)" in _one_line(err)
    assert (out / rundir.ASIDE / "member0").is_dir()


def test_compare_hands_each_given_flag_to_its_runs_and_its_command_line(tmp_path):
    """Every flag ``siggate compare`` passes through reaches each run's ``siggate train`` (after
    the compare's own ``--set``, the arm's) and the command line that reproduces it; an absent
    flag reaches neither."""
    import argparse

    from siggate.train import compare as cmp

    sub = argparse.ArgumentParser().add_subparsers(dest="command")
    cmp.register(sub)
    parser = sub.choices["compare"]
    full = parser.parse_args(["--config", "zinc", "--seeds", "0-1", "--gates", "none,elementwise", "--set",
                              "model.layers=2", "--epochs", "3", "--data-root", "/d", "--cache-dir", "/c",
                              "--out", str(tmp_path)])
    spec = cmp.parse_gates("elementwise")[0]
    run = cmp._config_args(full, spec, 1)
    assert run[:4] == ["--config", "zinc", "--seed", "1"]
    sets = [run[i + 1] for i, a in enumerate(run) if a == "--set"]
    assert sets[0] == "model.layers=2" and sets[1:] == spec.overrides()
    for flag, value in (("--epochs", "3"), ("--data-root", "/d"), ("--cache-dir", "/c")):
        assert run[run.index(flag) + 1] == value
        assert f"{flag} {value}" in cmp.command_line(full)
    assert "--budget" not in run
    bare = parser.parse_args(["--seeds", "0", "--gates", "none", "--out", str(tmp_path)])
    assert cmp._config_args(bare, spec, 0) == ["--config", "nci5k", "--seed", "0", "--set", "model.gate=elementwise"]
    for flag in ("--epochs", "--budget", "--data-root", "--cache-dir", "--set"):
        assert flag not in cmp.command_line(bare)


def test_a_lone_one_atom_molecule_closing_an_epoch_trains_on(tmp_path, capsys, caplog):
    # 17 training molecules of one atom each and batches of 16: every epoch ends on a batch of one
    # node, on which BatchNorm cannot train (it raised "Expected more than 1 value per channel", on
    # resume too, so such a run could never finish); that step is skipped, the others are taken
    atoms = ["C", "N", "O", "F", "S", "P", "Cl", "Br", "I", "B", "[Si]", "[Se]", "[Na+]", "[K+]", "[Cl-]", "[Br-]", "[I-]"]
    rows = [(s, "train") for s in atoms] + [(s, "val") for s in ("CC", "CCC", "CCCC")] + [(s, "test") for s in ("CCO", "CCN")]
    data = tmp_path / "ions.csv"
    data.write_text("smiles,y,split\n" + "".join(f"{s},{0.1 * i:.1f},{sp}\n" for i, (s, sp) in enumerate(rows)))
    out = tmp_path / "run"
    with caplog.at_level("WARNING", "siggate.train"):
        rc, _, err = _train(capsys, data, "--epochs", "2", "--out", str(out))
    assert rc == 0, err
    said = [r.getMessage() for r in caplog.records if "a batch of one node" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("epoch 1: "), said  # once per run, though both epochs skip one
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["epochs"] == 2 and metrics["skipped_batches"] == 0
    assert len((out / "log.csv").read_text().strip().splitlines()) == 3  # header and both epochs
