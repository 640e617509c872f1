"""``benchmarks/lanes.sh``: the actions that start nothing answer as documented (bad input: one
line and exit 2), against an empty study folder."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _lanes(tmp_path, *args):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "STUDY_DIR": str(tmp_path / "study")}
    return subprocess.run(["bash", str(ROOT / "benchmarks/lanes.sh"), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)


def test_bad_actions_and_lane_names_are_refused_in_one_line(tmp_path):
    r = _lanes(tmp_path, "frobnicate")
    assert r.returncode == 2 and r.stderr == ("error: unknown action 'frobnicate' "
                                              "(start, status, stop, pause, cont, snapshot, run)\n")
    for action in ("start", "stop"):
        r = _lanes(tmp_path, action, "nosuch")
        assert r.returncode == 2 and r.stderr == "error: no lane 'nosuch' (lanes: recipe pretrain)\n", action
    assert not (tmp_path / "study" / "lanes" / "nosuch.pid").exists()
    r = _lanes(tmp_path, "run", "1e81f55")
    assert r.returncode == 2 and r.stderr.startswith("error: run needs a commit and run.py's arguments: ")
    r = _lanes(tmp_path, "run", "nocommit", "--tools", "siggate")
    assert r.returncode == 2 and r.stderr == "error: run: 'nocommit' is not a commit of this repository\n"
    first = subprocess.run(["git", "rev-list", "--max-parents=0", "HEAD"], cwd=ROOT, capture_output=True,
                           text=True).stdout.split()[0]
    r = _lanes(tmp_path, "run", first, "--tools", "siggate")
    assert r.returncode == 2 and r.stderr == (f"error: run: {first} has no benchmarks/moleculeace/run.py "
                                              "(the harness came at 1e81f55)\n")
    assert not (tmp_path / "study" / "moleculeace-results.json").exists()  # refused before anything


def test_run_refuses_a_recipe_whose_rows_hold_other_arguments(tmp_path):
    """The older harnesses skip rows by target and seed alone, so ``run`` refuses to add rows with
    other ``--siggate-args`` to a recipe (before any worktree is made)."""
    study = tmp_path / "study"
    study.mkdir()
    rows = [{"tool": "siggate", "status": "ok", "recipe": "r", "seed": 0, "target": "T", "siggate_args": "--set a=1"}]
    (study / "moleculeace-results.json").write_text(json.dumps({"rows": rows}))
    r = _lanes(tmp_path, "run", "HEAD", "--tools", "siggate", "--recipe", "r", "--siggate-args", "--set a=2")
    assert r.returncode == 2 and r.stderr == "rows of r hold other arguments: ['--set a=1']; not mixing\n"
    assert not list(study.glob("wt-*"))


def test_status_and_stop_of_lanes_that_do_not_run(tmp_path):
    study = tmp_path / "study"
    study.mkdir()
    rows = [{"tool": "siggate", "status": "ok", "recipe": "gate-none", "seed": 0, "target": f"T{i}"} for i in range(3)]
    rows.append({"tool": "siggate", "status": "failed", "recipe": "gate-none", "seed": 0, "target": "T9"})
    (study / "moleculeace-results.json").write_text(json.dumps({"rows": rows}))
    r = _lanes(tmp_path, "status")
    assert r.returncode == 0, r.stderr
    assert "recipe: stopped\n" in r.stdout and "pretrain: stopped\n" in r.stdout
    assert "  gate-none: seed 0 3/20, seed 1 0/20, seed 2 0/20\n" in r.stdout  # the failed row is not counted
    (study / "lanes").mkdir(exist_ok=True)
    (study / "lanes" / "recipe.pid").write_text("1\n")  # a stale pid file names another process: left alone
    r = _lanes(tmp_path, "stop", "recipe")
    assert r.returncode == 0 and r.stdout == "lane recipe: stopped (0 signals sent)\n"
    assert _lanes(tmp_path, "pause").stdout == "paused: 0 processes\n"


def test_stop_ends_every_process_that_carries_the_lane_s_mark(tmp_path):
    """A lane's processes carry ``SIGGATE_LANE=<study>/<lane>`` (start sets it, children inherit
    it), so ``stop`` finds a training whose parent has already ended; another study folder's
    processes are left alone."""
    import os
    import signal
    import time

    (tmp_path / "study" / "lanes").mkdir(parents=True)
    mine = subprocess.Popen(["sleep", "60"], env={"SIGGATE_LANE": f"{tmp_path / 'study'}/recipe"})
    other = subprocess.Popen(["sleep", "60"], env={"SIGGATE_LANE": f"{tmp_path / 'elsewhere'}/recipe"})
    try:
        r = _lanes(tmp_path, "stop", "recipe")
        assert r.returncode == 0 and r.stdout == "lane recipe: stopped (1 signals sent)\n", r.stderr
        for _ in range(50):
            if mine.poll() is not None:
                break
            time.sleep(0.1)
        assert mine.returncode == -signal.SIGTERM and other.poll() is None
    finally:
        for p in (mine, other):
            if p.poll() is None:
                os.kill(p.pid, signal.SIGKILL)
                p.wait()


def _lanes_function(tmp_path, script, **env):
    """``script`` run in bash with lanes.sh's functions loaded (sourced: main does not run)."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "STUDY_DIR": str(tmp_path / "study"), **env}
    return subprocess.run(["bash", "-c", f"source benchmarks/lanes.sh; mkdir -p \"$STUDY\"; {script}"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)  # each hash imports torch


def test_the_committed_members_calibration_stands_in_for_a_fresh_clone_s_missing_copy(tmp_path):
    """A fresh clone has no ``.study`` copy of the members' calibration; the committed file, made
    at the lane's commit over the 20 targets, counts as done (the lane does not redo ~1 CPU-hour),
    while a partial copy of the lane's own is kept and resumed, not replaced."""
    committed = json.loads((ROOT / "benchmarks/moleculeace/results/members_check.json").read_text())
    assert committed["commit"].startswith("2353cb4") and len(committed["targets"]) == 20
    r = _lanes_function(tmp_path, "mcheck_done && echo done")
    assert r.returncode == 0 and r.stdout == "done\n", r.stderr
    copy = tmp_path / "study" / "members_check-2353cb4.json"
    assert json.loads(copy.read_text()) == committed
    partial = {"commit": committed["commit"], "targets": dict(list(committed["targets"].items())[:3])}
    copy.write_text(json.dumps(partial))
    r = _lanes_function(tmp_path, "mcheck_done || echo unfinished")
    assert r.stdout == "unfinished\n" and json.loads(copy.read_text()) == partial


def _weights_file(path, value):
    """A pretraining's weights file: a ``model`` state dict (and a record, which the hash skips)."""
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"model": {"w": torch.full((2, 3), value), "b": torch.zeros(3)}, "record": {"seconds": value}}, path)


def _tensor_sha(path):
    """The hash of a weights file's tensors, restated: keys sorted, each name then its bytes."""
    import hashlib

    import torch

    m = torch.load(path, map_location="cpu", weights_only=True)["model"]
    h = hashlib.sha256()
    for k in sorted(m):
        h.update(k.encode())
        h.update(m[k].contiguous().numpy().tobytes())
    return h.hexdigest()[:12]


def test_a_fresh_clone_fine_tunes_from_the_kept_weights_at_the_path_its_rows_name(tmp_path):
    """snapshot keeps the pair's finished weights under their tensors' hash; without the runs (a
    fresh clone) ``weights`` restores each to the path the rows' ``--init`` names, checking the
    hash against the name; a kept file that does not hash to its name is refused there, in one
    line (the arm is not pretrained again in silence), and other kept weights of an arm make
    keep_weights refuse."""
    import sys

    study, kept = tmp_path / "study", tmp_path / "kept"
    env = {"PT_KEPT_DIR": str(kept), "PT_PYTHON": sys.executable}
    _weights_file(study / "pt-gate-elementwise" / "pretrained.pt", 1.0)  # a finished run here
    sha = _tensor_sha(study / "pt-gate-elementwise" / "pretrained.pt")
    r = _lanes_function(tmp_path, "pair_weights || echo no-pair; keep_weights; keep_weights; ls \"$KEPT\"", **env)
    assert r.returncode == 0 and r.stdout == f"no-pair\npt-gate-elementwise-{sha}.pt\n", r.stderr
    (study / "pt-gate-elementwise").rename(tmp_path / "run-gone")  # a fresh clone: no run folder
    _weights_file(kept / "pt-gate-none-000000000000.pt", 2.0)  # a name its tensors do not hash to
    r = _lanes_function(tmp_path, "pair_weights && echo pair; arm_weights pt-gate-elementwise && echo arm; "
                                  "weights pt-gate-elementwise; weights pt-gate-none || echo refused", **env)
    assert r.stdout == f"pair\narm\n{study}/pt-gate-elementwise/pretrained-{sha}.pt\nrefused\n", r.stderr
    assert r.stderr.endswith("pt-gate-none-000000000000.pt: its tensors do not hash to its name\n")
    restored = study / "pt-gate-elementwise" / f"pretrained-{sha}.pt"
    assert restored.read_bytes() == (kept / f"pt-gate-elementwise-{sha}.pt").read_bytes()
    assert not list(study.glob("pt-gate-none/pretrained-*"))
    # a run of an arm whose kept weights differ (it was pretrained again): keep_weights refuses
    _weights_file(study / "pt-gate-elementwise" / "pretrained.pt", 3.0)
    r = _lanes_function(tmp_path, "keep_weights", **env)
    assert r.returncode == 1 and "holds other weights of pt-gate-elementwise than the run's" in r.stderr
    assert sorted(p.name for p in kept.iterdir()) == [f"pt-gate-elementwise-{sha}.pt", "pt-gate-none-000000000000.pt"]


def test_the_pretrain_lane_pretrains_only_the_arms_without_weights(tmp_path):
    """The lane's queue with its commands stubbed: an arm with valid kept weights is not pretrained
    again (a redo comes out different), and the fine-tunes start only once both arms have weights,
    each from its own restored file."""
    import sys

    study, kept = tmp_path / "study", tmp_path / "kept"
    env = {"PT_KEPT_DIR": str(kept), "PT_PYTHON": sys.executable}
    _weights_file(tmp_path / "w.pt", 1.0)
    sha = _tensor_sha(tmp_path / "w.pt")
    kept.mkdir()
    (tmp_path / "w.pt").rename(kept / f"pt-gate-elementwise-{sha}.pt")
    stubs = ('pretrain_run() { echo "pretrain $1"; }; mace() { echo "mace ${*: -1}"; }; zinc16() { :; }; '
             'pretrain_in() { echo "pretrain_in $*"; }; say() { echo "$*"; }; lane_pretrain')
    # issue 32's pretraining on a million molecules follows the pair's items, before zinc16
    million = ("pretrain_in pt-gine-1m 242115b --smiles moses --molecules 1000000 --epochs 5 --seed 0 --threads 2 "
               "--set train.warmup_epochs=1\n")
    # then the width-128 pretraining (on the 300k corpus, when that one's folder has it) and no fine-tune yet
    million += (f"no corpus in {study}/pt-gine-300k to copy: pt-gine-w128 builds its own\n"
                "pretrain_in pt-gine-w128 a3e2c32 --smiles moses --molecules 300000 --epochs 6 --seed 0 --threads 2 "
                "--set train.warmup_epochs=1 --set model.dim=128\n")
    r = _lanes_function(tmp_path, stubs, **env)
    assert "the width-128 pretraining" in r.stderr and "no cand-w128" in r.stderr
    assert r.returncode == 0 and r.stdout == ("pretrain none\na pretraining of elementwise none is unfinished: "
                                              "no fine-tunes (start the lane again to resume it)\n" + million), r.stderr
    _weights_file(study / "pt-gate-none" / "pretrained.pt", 2.0)  # the none arm's run finished
    r = _lanes_function(tmp_path, stubs, **env)
    sha_none = _tensor_sha(study / "pt-gate-none" / "pretrained.pt")
    tunes = [f"mace --init {study}/pt-gate-elementwise/pretrained-{sha}.pt --set model.attn=true "
             f"--set model.gate=elementwise",
             f"mace --init {study}/pt-gate-none/pretrained-{sha_none}.pt --set model.attn=true --set model.gate=none"]
    assert r.returncode == 0 and r.stdout == "".join(t + "\n" for t in tunes * 3) + million, r.stderr
    # every fine-tune in (both arms, seeds 0-2, 20 targets): none is started, not even to be skipped
    (study / "moleculeace-results.json").write_text(json.dumps({"rows": [
        {"tool": "siggate", "recipe": f"pt-attn-{g}", "seed": s, "target": f"T{t}", "status": "ok"}
        for g in ("elementwise", "none") for s in (0, 1, 2) for t in range(20)]}))
    r = _lanes_function(tmp_path, stubs, **env)
    assert r.returncode == 0 and r.stdout == ("the pair's fine-tunes are all in: both arms, seeds 0-2, the 20 "
                                              "public targets\n" + million), r.stderr
    (study / "moleculeace-results.json").unlink()
    # snapshot keeps the one arm this clone pretrained, beside the other arm's kept weights
    r = _lanes_function(tmp_path, "keep_weights", **env)
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in kept.iterdir()) == [f"pt-gate-elementwise-{sha}.pt", f"pt-gate-none-{sha_none}.pt"]


def test_the_recipe_lane_fine_tunes_from_the_longer_pretraining_once_it_is_finished(tmp_path):
    """Issue 32's longer pretraining: the shipped pretraining's command at its commit with only the
    epochs changed (resumed where a run was left), and `cand-ptlong`, cand-avgc's flags with only
    --init changed to the weights' hashed copy, queued once the pretraining has finished."""
    import sys

    study, kept = tmp_path / "study", tmp_path / "kept"
    env = {"PT_PYTHON": sys.executable, "PT_KEPT_DIR": str(kept)}
    stubs = ('in_wt() { echo "in_wt $*"; }; mace() { echo "mace $*"; }; members_rerun() { :; }; mcheck_done() { :; }; '
             'zinc16() { :; }; say() { echo "$*"; }; lane_recipe 2>&1 | grep -v -e "--recipe gate-" -e "peers/run.py"')
    r = _lanes_function(tmp_path, stubs, **env)
    pretrain = (f"in_wt f285fbd siggate pretrain --smiles moses --molecules 100000 --epochs 45 --seed 0 "
                f"--out {study}/pt-gine-long --no-progress")
    unfinished = f"the longer pretraining ({study}/pt-gine-long) is unfinished: no cand-ptlong (start the lane again to resume it)"
    lines = r.stdout.splitlines()
    # first the pretraining on 300,000 molecules (its own commit and arguments), then the longer one
    assert r.returncode == 0 and lines[1:3] == [
        f"in_wt f619654 siggate pretrain --smiles moses --molecules 300000 --epochs 15 --seed 0 --threads 2 "
        f"--out {study}/pt-gine-300k --no-progress", f"the pretraining on 300,000 molecules ({study}/pt-gine-300k) "
        "is unfinished: no cand-pt300k (start the lane again to resume it)"], r.stdout + r.stderr
    million = (f"the pretraining on 1,000,000 molecules (pretrain lane) ({study}/pt-gine-1m) is unfinished: "
               "no cand-pt1m (start the lane again to resume it)")
    peers = (f"the pretraining on 300,000 molecules ({study}/pt-gine-300k) is unfinished: no cand-pt300k's peer rows "
             "(start the lane again to resume it)")
    assert lines[3:] == [peers, million, pretrain, unfinished], r.stdout + r.stderr
    # the pair's arms keep the shipped command (15 epochs) with their --set options
    r = _lanes_function(tmp_path, 'in_wt() { echo "in_wt $*"; }; pretrain_run none', **env)
    assert r.stdout == (f"in_wt f285fbd siggate pretrain --smiles moses --molecules 100000 --epochs 15 --seed 0 "
                        f"--out {study}/pt-gate-none --no-progress --set model.attn=true --set model.gate=none\n")
    (study / "pt-gine-long" / "model").mkdir(parents=True)
    (study / "pt-gine-long" / "model" / "last.pt").write_bytes(b"")  # a run left unfinished: resumed
    r = _lanes_function(tmp_path, stubs, **env)
    assert r.stdout.splitlines()[5:] == [pretrain + " --resume", unfinished], r.stdout + r.stderr
    _weights_file(study / "pt-gine-long" / "pretrained.pt", 1.0)
    sha = _tensor_sha(study / "pt-gine-long" / "pretrained.pt")
    r = _lanes_function(tmp_path, stubs, **env)
    assert r.returncode == 0 and r.stdout.splitlines()[5:] == [
        "mace 46a976c --tools siggate --recipe cand-ptlong --siggate-args --members gnn,svr,rf --weights val "
        f"--init {study}/pt-gine-long/pretrained-{sha}.pt --set train.epochs=60 --seeds 0"], r.stdout + r.stderr
    assert (study / "pt-gine-long" / f"pretrained-{sha}.pt").read_bytes() == \
        (study / "pt-gine-long" / "pretrained.pt").read_bytes()
    # snapshot keeps its weights as the pair's; a fresh clone restores them and does not pretrain again
    r = _lanes_function(tmp_path, "keep_weights", **env)
    assert r.returncode == 0 and [p.name for p in kept.iterdir()] == [f"pt-gine-long-{sha}.pt"], r.stderr
    (study / "pt-gine-long").rename(tmp_path / "run-gone")
    r = _lanes_function(tmp_path, stubs, **env)
    assert r.returncode == 0 and r.stdout.splitlines()[5:] == [
        "mace 46a976c --tools siggate --recipe cand-ptlong --siggate-args --members gnn,svr,rf --weights val "
        f"--init {study}/pt-gine-long/pretrained-{sha}.pt --set train.epochs=60 --seeds 0"], r.stdout + r.stderr
    def finished(run, recipe, seeds, line):  # the run's pretraining done: its recipe queued at that line
        _weights_file(study / run / "pretrained.pt", float(len(run)))
        sha_run = _tensor_sha(study / run / "pretrained.pt")
        r = _lanes_function(tmp_path, stubs, **env)
        assert r.returncode == 0 and r.stdout.splitlines()[line:line + 1] == [
            f"mace 46a976c --tools siggate --recipe {recipe} --siggate-args --members gnn,svr,rf --weights val "
            f"--init {study}/{run}/pretrained-{sha_run}.pt --set train.epochs=60 --seeds {seeds}"], r.stdout + r.stderr
        return sha_run

    # the pretraining on 300,000 molecules finished: cand-pt300k is queued by the same rule, its weights kept;
    # its seed 0 gained, so seeds 1 and 2 follow in the same item (a finished seed's rows are skipped)
    sha300 = finished("pt-gine-300k", "cand-pt300k", "0,1,2", 1)
    # and its rows on the six peer tasks, seeds 0-2, by the same flags at the same commit
    r = _lanes_function(tmp_path, stubs.replace(' -e "peers/run.py"', ""), **env)
    assert r.returncode == 0 and r.stdout.splitlines()[3:5] == [
        f"in_wt 46a976c python benchmarks/peers/run.py --results {ROOT}/benchmarks/peers/results/recipe.json "
        "--tools siggate --recipe cand-pt300k --siggate-args --members gnn,svr,rf --weights val "
        f"--init {study}/pt-gine-300k/pretrained-{sha300}.pt --set train.epochs=60 --seeds 0,1,2",
        f"the pretraining on 1,000,000 molecules (pretrain lane) ({study}/pt-gine-1m) is unfinished: no cand-pt1m "
        "(start the lane again to resume it)"], r.stdout + r.stderr
    r = _lanes_function(tmp_path, "keep_weights", **env)
    assert r.returncode == 0 and sorted(p.name for p in kept.iterdir()) == [
        f"pt-gine-300k-{sha300}.pt", f"pt-gine-long-{sha}.pt"], r.stderr
    # the million-molecule pretraining (the pretrain lane's) finished: cand-pt1m, seed 0, its weights kept
    sha1m = finished("pt-gine-1m", "cand-pt1m", "0", 2)
    r = _lanes_function(tmp_path, "keep_weights", **env)
    assert r.returncode == 0 and f"pt-gine-1m-{sha1m}.pt" in {p.name for p in kept.iterdir()}, r.stderr


def test_zinc16_takes_both_cores_once_the_pretrained_pairs_fine_tunes_are_in(tmp_path):
    """The campaign runs one at a time while the pretrain lane still fine-tunes, and two at a time
    once every fine-tune (both arms, seeds 0-2, 20 targets) is in: that lane then only finds the
    campaign locked and ends, leaving its core idle. ZINC16_JOBS overrides."""
    study = tmp_path / "study"
    study.mkdir()
    (study / "lanes").mkdir()

    def rows(seeds_of_none):
        return {"rows": [{"tool": "siggate", "recipe": f"pt-attn-{g}", "seed": s, "target": f"T{t}", "status": "ok"}
                         for g in ("elementwise", "none") for s in ((0, 1, 2) if g == "elementwise" else seeds_of_none)
                         for t in range(20)]}

    stub = 'flock() { shift 4; echo "$@"; }; zinc16'  # the locked command line, not the campaign
    results = study / "moleculeace-results.json"
    for seeds, extra, jobs in (((0, 1), {}, "1"), ((0, 1, 2), {}, "2"), ((0, 1, 2), {"ZINC16_JOBS": "1"}, "1")):
        results.write_text(json.dumps(rows(seeds)))
        r = _lanes_function(tmp_path, stub, **extra)
        assert r.returncode == 0 and f" JOBS={jobs} " in r.stdout and r.stdout.startswith("env FOREGROUND=1"), \
            r.stdout + r.stderr
    results.unlink()  # no results yet: one at a time
    r = _lanes_function(tmp_path, stub)
    assert " JOBS=1 " in r.stdout, r.stdout + r.stderr


def test_the_wider_pretraining_reuses_the_300k_corpus_and_its_fine_tune_keeps_the_width(tmp_path):
    """Issue 32's width-128 GNN member: its pretraining starts from a copy of the 300k run's corpus
    (not built again, the source left as it was), and once its weights are in,
    `cand-w128` is cand-avgc's flags with --init those weights and the width after them."""
    import sys

    study, kept = tmp_path / "study", tmp_path / "kept"
    env = {"PT_PYTHON": sys.executable, "PT_KEPT_DIR": str(kept)}
    for d in ("corpus", "cache/csv"):
        (study / "pt-gine-300k" / d).mkdir(parents=True)
    (study / "pt-gine-300k" / "corpus" / "meta.json").write_text("{}")
    (study / "pt-gine-300k" / "cache" / "csv" / "g.pt").write_text("graphs")
    stubs = ('pretrain_in() { echo "pretrain_in $1"; }; mace() { echo "mace $*"; }; say() { echo "$*"; }; '
             'copied_corpus pt-gine-300k pt-gine-w128 && copied_corpus pt-gine-300k pt-gine-w128; '
             'arm_weights pt-gine-w128 || echo unfinished')
    r = _lanes_function(tmp_path, stubs, **env)
    assert r.returncode == 0 and r.stdout == "unfinished\n", r.stdout + r.stderr
    assert (study / "pt-gine-w128" / "corpus" / "meta.json").read_text() == "{}"
    assert not (study / "pt-gine-w128" / "cache").exists()  # keyed by the corpus's path: of no use there
    assert (study / "pt-gine-300k" / "corpus" / "meta.json").is_file()
    assert not list((study / "pt-gine-w128").glob("*.tmp"))
    _weights_file(study / "pt-gine-w128" / "pretrained.pt", 3.0)
    sha = _tensor_sha(study / "pt-gine-w128" / "pretrained.pt")
    r = _lanes_function(tmp_path, 'mace() { echo "mace $*"; }; cand_from pt-gine-w128 cand-w128 wide 0 '
                        '"$PT_W128_SET"', **env)
    assert r.returncode == 0 and r.stdout == (
        "mace 46a976c --tools siggate --recipe cand-w128 --siggate-args --members gnn,svr,rf --weights val "
        f"--init {study}/pt-gine-w128/pretrained-{sha}.pt --set train.epochs=60 --set model.dim=128 --seeds 0\n"), \
        r.stdout + r.stderr
