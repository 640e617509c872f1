"""``siggate analyze mad``: each trained model of a ``siggate compare`` folder gains its
last-layer MAD in ``results.json``, through the campaign driver's ``snapshot`` as the ZINC
depth campaign runs it. One tiny comparison (fake ZINC files, ``data.max_graphs``, a 2-layer
model, 2 arms x 2 seeds, 1 epoch) is trained once for the module."""

from __future__ import annotations

import json
import math
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import fixtures_data as fx
from siggate.analysis import compare_mad
from siggate.analysis.smoothing import representation_stats
from siggate.cli import main
from siggate.train.compare import with_mad_section
from test_engine import _float32, subprocess_env  # noqa: F401

REPO = Path(__file__).resolve().parents[1]
NAME = "depth-test"
LAYERS = 2
VAL_GRAPHS = 6  # data.max_graphs: the first 6 of the 8 validation graphs


def _part_args(data: Path, cache: Path) -> str:
    sets = [f"model.layers={LAYERS}", "model.dim=16", "model.heads=2", "model.pe_steps=4", "model.pe_dim=4",
            "model.head_layers=2", "train.batch_size=4", "train.warmup_epochs=0", f"data.max_graphs={VAL_GRAPHS}"]
    return (f"--config zinc --seeds 0-1 --gates none,elementwise --epochs 1 --data-root {data} --cache-dir {cache} "
            + " ".join(f"--set {s}" for s in sets))


def _executable(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    """A checkout (a git repository with the campaign driver and a campaign ``NAME`` whose
    ``study.conf`` sets ``ANALYZE=(mad)``), its study folder with the pinned commit's worktree
    stood in by this source tree, and the comparison trained there (its checkpoints)."""
    tmp = tmp_path_factory.mktemp("campaign")
    data, cache = tmp / "data", tmp / "cache"
    fx.make_zinc(data, sizes=(16, 8, 8))
    part = _part_args(data, cache)
    root, study = tmp / "checkout", tmp / "study"
    here = root / "benchmarks" / "results" / "campaign" / NAME
    here.mkdir(parents=True)
    shutil.copy(REPO / "benchmarks" / "results" / "campaign" / "study.sh", here.parent / "study.sh")
    shutil.copy(REPO / "benchmarks" / "worktree.sh", root / "benchmarks" / "worktree.sh")  # which study.sh sources
    (here / "study.conf").write_text(f'COMMIT=pinned\nPARTS=(".|{part}")\nANALYZE=(mad)\n')
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    # the pinned worktree's venv and this checkout's venv: both this interpreter on this source tree
    bin_dir = tmp / "bin"
    _executable(bin_dir / "siggate", f'#!/bin/sh\nexec "{sys.executable}" -m siggate "$@"\n')
    _executable(study / "wt-pinned" / ".venv" / "bin" / "activate", f'export PATH="{bin_dir}:$PATH"\n')
    (study / "wt-pinned" / ".venv" / "installed").write_text("base\n")  # else study.sh installs the venv again
    _executable(root / ".venv" / "bin" / "python", f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    env = {**subprocess_env(), "STUDY_DIR": str(study), "SIGGATE_CACHE": str(cache)}
    out = study / NAME
    proc = subprocess.run([sys.executable, "-m", "siggate", "compare", *part.split(), "--threads", "1", "--jobs", "2", "--out",
                           str(out), "--no-progress"], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {"root": root, "here": here, "out": out, "env": env, "part": part}


def _snapshot(campaign) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(campaign["here"].parent / "study.sh"), "snapshot", NAME], cwd=campaign["root"],
                          env=campaign["env"], capture_output=True, text=True, timeout=600)


def _numpy_mad(x: np.ndarray, batch: np.ndarray) -> float:
    """MAD written out: per graph with >= 2 nodes, the mean of 1 - cos over ordered pairs i != j; mean over graphs."""
    per_graph = []
    for g in np.unique(batch):
        h = x[batch == g].astype(np.float64)
        n = len(h)
        if n < 2:
            continue
        unit = h / np.linalg.norm(h, axis=1, keepdims=True)
        dist = 1.0 - unit @ unit.T
        per_graph.append((dist.sum() - np.trace(dist)) / (n * (n - 1)))
    return float(np.mean(per_graph))


def _last_layer_by_hook(run: Path):
    """The run's ``best.pt`` model on its validation graphs, read by a forward hook on its last GPS
    layer during a plain forward pass (not the analysis's ``return_details`` path)."""
    from torch_geometric.loader import DataLoader

    from siggate.train.dataprep import prepare_data
    from siggate.train.modelprep import load_trained

    model, _, cfg, _ = load_trained(run / "best.pt")
    ds = prepare_data(cfg.data, cfg.model, cfg.train.seed, progress=False)
    seen = []
    hook = model.layers[-1].register_forward_hook(lambda mod, inp, out: seen.append(out[0].detach()))
    batch = next(iter(DataLoader(ds.val, batch_size=len(ds.val))))
    with torch.no_grad():
        model(batch)
    hook.remove()
    assert len(model.layers) == LAYERS and len(seen) == 1
    return model, ds, seen[0].numpy(), batch.batch.numpy()


def test_snapshot_adds_each_trained_models_mad(campaign):
    proc = _snapshot(campaign)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    here, out = campaign["here"], campaign["out"]
    res = json.loads((here / "results.json").read_text())
    mad = res["mad"]
    # exact counts: 2 arms x 2 seeds, every finished run measured once, on its 6 validation graphs
    assert res["gates"] == ["none", "elementwise"] and res["n"] == {"none": 2, "elementwise": 2}
    assert {arm: sorted(v) for arm, v in mad["per_seed"].items()} == {"none": ["0", "1"], "elementwise": ["0", "1"]}
    assert mad["n"] == {"none": 2, "elementwise": 2}
    assert mad["n_graphs"] == {arm: {"0": VAL_GRAPHS, "1": VAL_GRAPHS} for arm in ("none", "elementwise")}
    for arm in ("none", "elementwise"):
        for seed in ("0", "1"):
            run = out / "runs" / arm / f"seed{seed}"
            model, ds, x, batch = _last_layer_by_hook(run)
            assert len(ds.val) == VAL_GRAPHS
            assert mad["per_seed"][arm][seed] == pytest.approx(_numpy_mad(x, batch), rel=1e-5)
            layers = mad["per_layer"][arm][seed]
            assert len(layers) == LAYERS + 1 and layers[-1] == mad["per_seed"][arm][seed]
            # the measured weights are the best epoch's: they score the validation metric the run recorded
            assert mad["val"][arm][seed] == pytest.approx(res["per_seed_val"][arm][seed], rel=1e-6)
            assert mad["epoch"][arm][seed] == res["best_epoch"][arm][seed] == 1
            # the smoothing analysis's function measures MAD alone the same way as with every measure
            full = representation_stats(model, ds.val, 4)
            assert representation_stats(model, ds.val, 4, measures=("mad",)) == {
                "mad": full["mad"], "n_graphs": VAL_GRAPHS}
    [c] = mad["comparisons"]
    d = [mad["per_seed"]["elementwise"][s] - mad["per_seed"]["none"][s] for s in ("0", "1")]
    assert (c["a"], c["b"], c["n_pairs"]) == ("none", "elementwise", 2)
    assert c["diff_mean"] == pytest.approx(np.mean(d)) and c["higher_is_better"] is True
    assert mad["mean"]["none"] == pytest.approx(np.mean(list(mad["per_seed"]["none"].values())))
    assert mad["relative_gain"]["elementwise"] == pytest.approx(
        (mad["mean"]["elementwise"] - mad["mean"]["none"]) / mad["mean"]["none"])
    assert mad["gain_tests"]["elementwise"]["n_pairs"] == 2
    assert mad["command"] == f"siggate analyze mad {out}"
    # the study folder holds the same results; the snapshot copies no checkpoint
    assert json.loads((out / "results.json").read_text())["mad"]["per_seed"] == mad["per_seed"]
    assert not list(here.rglob("*.pt")) and len(list(here.glob("runs/*/seed*/metrics.json"))) == 4
    md = (here / "results.md").read_text()
    assert md.count(compare_mad.MD_START) == 1 and "## Last-layer diversity (MAD) at the best epoch" in md
    assert f"| `elementwise` | 2 | {compare_mad.fmt(mad['mean']['elementwise'])} ±" in md
    # the committed snapshot has no checkpoints, but each run's measurement: measuring it again
    # gives the same block (a fresh clone's campaign resumes from these runs)
    assert sorted(p.relative_to(here).as_posix() for p in here.glob("runs/*/seed*/mad.json")) == [
        f"runs/{arm}/seed{s}/mad.json" for arm in ("elementwise", "none") for s in (0, 1)]
    assert main(["analyze", "mad", str(here), "--no-progress"]) == 0
    again = json.loads((here / "results.json").read_text())["mad"]
    assert {k: again[k] for k in ("per_seed", "per_layer", "val", "epoch")} == {
        k: mad[k] for k in ("per_seed", "per_layer", "val", "epoch")}


def test_a_model_that_does_not_score_its_record_is_refused(campaign, tmp_path, capsys):
    """The measuring code may be newer than the training code: a best.pt whose validation metric
    is not the one its run recorded is not measured, and nothing is written."""
    folder = tmp_path / "cmp"
    shutil.copytree(campaign["out"], folder)
    res = json.loads((folder / "results.json").read_text())
    res.pop("mad", None)
    res["per_seed_val"]["elementwise"]["1"] *= 1.01
    (folder / "results.json").write_text(json.dumps(res))
    before = (folder / "results.json").read_text()
    assert main(["analyze", "mad", str(folder), "--threads", "1", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "seed1" in err and "recorded" in err and len(err.strip().splitlines()) == 1
    assert (folder / "results.json").read_text() == before


def test_summarize_pairs_the_seeds_both_arms_finished():
    def run(v):
        return {"mad": v, "per_layer": [0.5, v], "n_graphs": 10, "epoch": 3, "val": 0.2}

    measured = {"none": {"0": run(0.40), "1": run(0.50), "2": run(0.60)},
                "elementwise": {"0": run(0.52), "2": run(0.66)}}  # seed 1 unfinished
    block = compare_mad.summarize(measured, ["none", "elementwise"], ["0", "1", "2"])
    assert block["n"] == {"none": 3, "elementwise": 2}
    assert block["mean"]["none"] == pytest.approx(0.5) and block["std"]["none"] == pytest.approx(0.1)
    [c] = block["comparisons"]
    assert c["n_pairs"] == 2 and c["diff_mean"] == pytest.approx((0.12 + 0.06) / 2) and c["better"] == "b"
    assert block["relative_gain"]["elementwise"] == pytest.approx((0.59 - 0.5) / 0.5)
    t = block["gain_tests"]["elementwise"]
    assert (t["n_pairs"], t["n_positive"]) == (2, 2) and t["mean"] == pytest.approx((0.3 + 0.1) / 2)
    empty = compare_mad.summarize({}, ["none", "elementwise"], ["0"])  # a campaign before its first run
    assert empty["n"] == {"none": 0, "elementwise": 0} and empty["gain_tests"]["elementwise"]["n_pairs"] == 0
    assert math.isnan(empty["mean"]["none"]) and empty["relative_gain"]["elementwise"] is None


def test_the_markdown_section_is_replaced_not_repeated():
    first = compare_mad.MD_START + "\nold\n" + compare_mad.MD_END + "\n"
    doc = "# results\n\ntable\n"
    once = with_mad_section(doc, first)
    assert once == doc + "\n" + first
    new = compare_mad.MD_START + "\nnew\n" + compare_mad.MD_END + "\n"
    twice = with_mad_section(once + "after\n", new)
    assert twice == doc + "\n" + new + "after\n"


def test_aggregate_only_keeps_the_comparison_and_its_mad(campaign, tmp_path, capsys):
    """`siggate compare --out DIR --aggregate-only`, as the README shows it, rebuilt the comparison
    from the flags' defaults (nci5k, none,elementwise, seeds 0-4): every run a conflict, results.json
    rewritten with n=0, and any re-aggregation dropped the MAD block. The flags not given now come
    from DIR's results.json; flags of another comparison are refused before anything is written;
    the MAD block stays while it measured the runs finished now, and is dropped by name otherwise."""
    folder = tmp_path / "cmp"
    shutil.copytree(campaign["out"], folder)
    assert main(["analyze", "mad", str(folder), "--threads", "1", "--no-progress"]) == 0
    before = json.loads((folder / "results.json").read_text())
    capsys.readouterr()
    assert main(["compare", "--out", str(folder), "--aggregate-only", "--no-progress"]) == 0
    after = json.loads((folder / "results.json").read_text())
    assert after["gates"] == before["gates"] and after["seeds"] == before["seeds"] == [0, 1]
    assert after["per_seed"] == before["per_seed"] and after["n"] == {"none": 2, "elementwise": 2}
    assert after["mad"] == before["mad"]
    ran = [r["command"].rsplit(" --out ", 1)[0] for r in (before, after)]  # the folder was copied: --out differs
    assert ran[0].endswith("--jobs 2 --threads 1") and ran[1] == ran[0]  # how the runs ran, not this call's defaults
    assert (after["jobs"], after["threads"]) == (before["jobs"], before["threads"]) == (2, 1)
    md = (folder / "results.md").read_text()
    assert md.count(compare_mad.MD_START) == 1 and "## Last-layer diversity (MAD) at the best epoch" in md
    # the block's own val scores are the analysis's recomputation (equal to the record within
    # VAL_RTOL, not bit for bit): what decides is the runs' recorded scores, which did not change
    doc = json.loads((folder / "results.json").read_text())
    doc["mad"]["val"]["none"]["0"] *= 1 + 1e-9
    (folder / "results.json").write_text(json.dumps(doc))
    assert main(["compare", "--out", str(folder), "--aggregate-only", "--no-progress"]) == 0
    assert json.loads((folder / "results.json").read_text())["mad"] == doc["mad"]
    kept = (folder / "results.json").read_text()
    capsys.readouterr()
    for flags, why in ((["--seeds", "5-6"], "a comparison with seed 0, seed 1, which these flags leave out"),
                       # no effect, and written into the record
                       (["--data-root", "/nonexistent"], f"--data-root /nonexistent: --aggregate-only reads no data, "
                                                         f"and the comparison in {folder} records --data-root "),
                       (["--cache-dir", str(tmp_path)], "--aggregate-only reads no data"),
                       (["--config", "nci5k"], "describe another comparison"),
                       # an arm the comparison never trained: written into its record with n 0, and a
                       # later --aggregate-only without it dropped it again
                       (["--gates", "none,elementwise,headwise"], f"the comparison in {folder} never started the "
                                                                   "arm(s) headwise (it records: siggate compare")):
        assert main(["compare", "--out", str(folder), "--aggregate-only", *flags, "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and why in err and "siggate compare" in err, err
        assert (folder / "results.json").read_text() == kept
    unread = json.loads(kept)
    unread["command"] = unread["command"] + " --workers 2"  # a flag this siggate does not know
    (folder / "results.json").write_text(json.dumps(unread))
    assert main(["compare", "--out", str(folder), "--aggregate-only", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "records no command this siggate reads" in err and "give --config, --gates and --seeds" in err
    (folder / "results.json").write_text(kept)
    capsys.readouterr()
    (folder / "runs" / "elementwise" / "seed1" / "metrics.json").unlink()  # one run no longer finished
    assert main(["compare", "--out", str(folder), "--aggregate-only", "--no-progress"]) == 0
    out = capsys.readouterr().out
    res = json.loads((folder / "results.json").read_text())
    assert res["n"] == {"none": 2, "elementwise": 1} and "mad" not in res
    assert compare_mad.MD_START not in (folder / "results.md").read_text()
    assert ("the MAD block of the earlier results was dropped (it measured 4 run(s), and 3 are finished now, or "
            f"their scores changed): run 'siggate analyze mad {folder}' again") in out


def test_a_full_disk_leaves_the_earlier_results_whole(campaign, tmp_path, capsys, monkeypatch):
    """results.json and results.md were written in place: a full disk left a truncated results.json
    (unreadable by the next --aggregate-only) and a traceback. They are written atomically now,
    and the failure is one line that says the runs are kept."""
    from siggate.train import compare

    folder = tmp_path / "cmp"
    shutil.copytree(campaign["out"], folder)
    kept = {name: (folder / name).read_bytes() for name in ("results.json", "results.md")}
    real = compare.atomic_write_bytes

    def full(path, data):  # the first file is written, the disk is full for the second
        if Path(path).name == "results.md":
            raise OSError(28, "No space left on device")
        real(path, data)

    monkeypatch.setattr(compare, "atomic_write_bytes", full)
    capsys.readouterr()
    assert main(["compare", "--out", str(folder), "--aggregate-only", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert f"cannot write the comparison's results into {folder} (No space left on device); its runs are kept" in err
    assert (folder / "results.md").read_bytes() == kept["results.md"]
    json.loads((folder / "results.json").read_text())  # whole, not cut


def test_a_second_comparison_into_a_busy_folder_is_refused(campaign, tmp_path, capsys):
    """Two `siggate compare` processes into one --out took no lock: the second launched the first's
    pending runs again (each then failed on its run folder's lock) and wrote its results, failures
    included, over the first's. A comparison now holds the folder's lock while it trains and
    writes; a second one is refused in one line naming the holder, and writes nothing. An
    --aggregate-only snapshot trains nothing and still runs beside it."""
    from siggate.files import FolderLock

    folder = tmp_path / "cmp"
    shutil.copytree(campaign["out"], folder)
    kept = (folder / "results.json").read_text()
    flags = ["compare", *campaign["part"].split(), "--threads", "1", "--out", str(folder), "--no-progress"]
    capsys.readouterr()
    with FolderLock(folder):  # a live comparison in another process
        assert main(flags) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1, err
        assert f"--out {folder}: another siggate process (pid " in err and "must not write into one folder" in err
        assert (folder / "results.json").read_text() == kept
        assert main(["compare", "--out", str(folder), "--aggregate-only", "--no-progress"]) == 0
        # analyze mad read results.json, measured for minutes and wrote it back over the live comparison's
        kept = (folder / "results.json").read_text()
        capsys.readouterr()
        assert main(["analyze", "mad", str(folder), "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and f"siggate analyze mad {folder}: another siggate process" in err
        assert "a comparison writes into it: wait for it to end" in err and (folder / "results.json").read_text() == kept
    capsys.readouterr()
    assert main(flags) == 0  # the folder is free again: all runs are done, nothing is trained
    assert "(4 already done, 0 to resume)" in capsys.readouterr().out
    assert not (folder / FolderLock.NAME).exists()


def test_an_aggregate_only_snapshot_never_replaces_results_written_meanwhile(campaign, tmp_path, capsys, monkeypatch):
    """--aggregate-only beside a live comparison that finished while the snapshot was made wrote the
    older snapshot over the comparison's final results.json; it keeps them now."""
    import siggate.train.compare as compare
    from siggate.files import FolderLock

    folder = tmp_path / "cmp"
    shutil.copytree(campaign["out"], folder)
    final = json.dumps({"final": "written by the comparison"})
    real = compare.aggregate

    def finishing(*args, **kwargs):  # the live comparison writes its results as the snapshot is made
        (folder / "results.json").write_text(final)
        return real(*args, **kwargs)

    monkeypatch.setattr(compare, "aggregate", finishing)
    capsys.readouterr()
    with FolderLock(folder):
        assert main(["compare", "--out", str(folder), "--aggregate-only", "--no-progress"]) == 0
    assert (folder / "results.json").read_text() == final
    assert "was written by the comparison while this snapshot was made; it is newer and is kept" in capsys.readouterr().out


def test_a_run_without_checkpoints_counts_with_its_kept_measurement(campaign, tmp_path, capsys):
    """A campaign resumed in a fresh clone gets its finished runs back without their checkpoints:
    the snapshot's `analyze mad` then failed on the first run without best.pt, and no snapshot could
    be taken again. A run measured once keeps its measurement (mad.json) and counts with it; a
    kept measurement of another model, or of no recognisable form, is refused and nothing is written."""
    folder = tmp_path / "cmp"
    shutil.copytree(campaign["out"], folder)
    assert main(["analyze", "mad", str(folder), "--threads", "1", "--no-progress"]) == 0
    first = json.loads((folder / "results.json").read_text())["mad"]
    run = folder / "runs" / "elementwise" / "seed1"
    for pt in run.glob("*.pt"):
        pt.unlink()
    assert main(["analyze", "mad", str(folder), "--threads", "1", "--no-progress"]) == 0
    again = json.loads((folder / "results.json").read_text())["mad"]
    assert again["per_seed"] == first["per_seed"] and again["comparisons"] == first["comparisons"]
    kept = json.loads((run / compare_mad.KEPT).read_text())
    before = (folder / "results.json").read_text()
    capsys.readouterr()
    for change, why in (({"val": kept["val"] * 1.01}, "it is another model's measurement"),
                        ({"definition": "MAD of something else"}, "is not a MAD measurement of this definition"),
                        ({"mad": "high"}, "is not a MAD measurement of this definition")):
        (run / compare_mad.KEPT).write_text(json.dumps({**kept, **change}))
        assert main(["analyze", "mad", str(folder), "--threads", "1", "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and why in err and str(run) in err, err
        assert (folder / "results.json").read_text() == before
    (folder / "results.json").write_text("[" * 100000 + "]" * 100000)  # a RecursionError traceback before
    assert main(["analyze", "mad", str(folder), "--threads", "1", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "not the results of 'siggate compare' (ValueError: JSON nested too deep to read)" in err
    (folder / "results.json").write_text(before)
    (run / compare_mad.KEPT).unlink()
    assert main(["analyze", "mad", str(folder), "--threads", "1", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "does not exist and no measurement of it is kept (mad.json)" in err and len(err.strip().splitlines()) == 1
    assert (folder / "results.json").read_text() == before


def test_a_run_without_a_score_wins_no_seed(campaign, tmp_path, capsys):
    """A finished run whose test score is NaN was called the better arm of its seed in results.md
    (for an MAE, `nan > 0` is False); its row is now n/a, as a missing run's."""
    folder = tmp_path / "cmp"
    shutil.copytree(campaign["out"], folder)
    path = folder / "runs" / "elementwise" / "seed1" / "metrics.json"
    doc = json.loads(path.read_text())
    doc["test"] = float("nan")
    path.write_text(json.dumps(doc))
    capsys.readouterr()
    assert main(["compare", "--out", str(folder), "--aggregate-only", "--no-progress"]) == 0
    md = (folder / "results.md").read_text()
    section = md.split("paired differences by seed", 1)[1].split("\n## ", 1)[0]  # the table of the seeds' pairs
    rows = [ln for ln in section.splitlines() if ln.startswith("| 1 |")]
    assert len(rows) == 1 and rows[0].endswith("| n/a | (no score) |"), rows
    [row0] = [ln for ln in section.splitlines() if ln.startswith("| 0 |")]
    assert row0.endswith(("`none` |", "`elementwise` |", "`tie` |"))


def test_aggregate_only_into_a_folder_of_no_comparison_is_refused(tmp_path, capsys):
    """`siggate compare --out NEW --aggregate-only` wrote an empty nci5k comparison there and exited 0."""
    new = tmp_path / "new"
    assert main(["compare", "--out", str(new), "--aggregate-only", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and f"--aggregate-only: {new} holds no comparison" in err
    assert not new.exists()
    # a first comparison still running: runs, no results.json yet; its flags cannot come from there (the
    # refusal said a run "holds another config" and to give no flags, to take them from a file that did not exist)
    (new / "runs" / "elementwise" / "seed0").mkdir(parents=True)
    assert main(["compare", "--out", str(new), "--aggregate-only", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(f"--aggregate-only: {new} has no results.json yet (its first comparison is still running, or "
                        "stopped before aggregating); give its --config, --gates and --seeds (and any --set, --epochs "
                        "or --budget) as it was started"), err
    assert not (new / "results.json").exists()


def test_a_rerun_of_other_flags_is_refused_before_training_and_the_runs_threads_are_reported(campaign, tmp_path,
                                                                                              capsys):
    """A finished comparison rerun with one flag changed made every run a conflict, trained
    nothing and still rewrote results.json with no run in it (n = 0, its MAD block gone). It is
    refused now, before any run, and the results stay as they were. A rerun of the same flags
    with another --threads reuses every run: the results report the threads those runs trained
    with (they reported this call's), and so does their command."""
    folder = tmp_path / "cmp"
    shutil.copytree(campaign["out"], folder)
    kept = (folder / "results.json").read_bytes()
    flags = campaign["part"].split()
    capsys.readouterr()
    assert "model.dim=16" in flags  # another width (a second --set of the key is refused as such)
    other = [f.replace("model.dim=16", "model.dim=32") for f in flags]
    assert main(["compare", *other, "--threads", "1", "--jobs", "2", "--out", str(folder), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "holds a run of another config (model.dim" in err, err
    assert err.endswith("nothing was trained") and "it records: siggate compare" in err
    assert (folder / "results.json").read_bytes() == kept
    assert main(["compare", *flags, "--threads", "2", "--jobs", "2", "--out", str(folder), "--no-progress"]) == 0
    res = json.loads((folder / "results.json").read_text())
    assert res["threads"] == 1 and " --threads 1 " in res["command"] and res["n"] == json.loads(kept)["n"]
    assert "1 thread(s) per run" in (folder / "results.md").read_text()
    # threads named by --set: the command records them once, and runs again as recorded
    assert main(["compare", *flags, "--set", "train.threads=1", "--jobs", "2", "--out", str(folder),
                 "--no-progress"]) == 0
    command = json.loads((folder / "results.json").read_text())["command"]
    assert "--set train.threads=1" in command and "--threads" not in command.replace("train.threads", "")
    assert main(shlex.split(command)[1:] + ["--no-progress"]) == 0
