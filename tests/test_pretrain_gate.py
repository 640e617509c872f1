"""``benchmarks/pretrain_gate/compare.py`` (issue 28, item 2): two tiny pretraining runs that differ
only in the gate, compared; what it refuses."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml
from scipy import stats as st

from benchmark_scripts import load
from siggate.files import file_digest
from siggate.train.pretrain import build_corpus, pretrain
from test_pretrain import _corpus_file

cmp = load("pretrain_gate_compare", "pretrain_gate/compare.py")

TINY = ["model.layers=2", "model.dim=16", "model.pe_steps=4", "model.pe_dim=4", "model.attn=true"]
VAL = 8  # val molecules of the test corpus (its 1% split gives one: too few to average over)


def _corpus(folder: Path, src: Path) -> Path:
    """A corpus as ``siggate pretrain`` builds it, with :data:`VAL` rows moved to ``val`` (its meta
    updated, so ``pretrain`` reuses it)."""
    corpus = folder / "corpus"
    meta = build_corpus(src, corpus, molecules=1000, seed=0, data_root=folder / "none", progress=False, test_sets=())
    rows = list(csv.reader(open(corpus / "corpus.csv", newline="")))
    for k, row in enumerate(rows[1:]):
        row[1] = "val" if k < VAL else ("test" if k == VAL else "train")
    with open(corpus / "corpus.csv", "w", newline="") as fh:
        csv.writer(fh).writerows(rows)
    meta.update(csv_sha256=file_digest(corpus / "corpus.csv"),
                split_sizes={"train": len(rows) - 2 - VAL, "val": VAL, "test": 1})
    (corpus / "meta.json").write_text(json.dumps(meta))
    return corpus


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """``{gate: folder}``: a 2-epoch pretraining of a tiny attention model per gate, one corpus."""
    root = tmp_path_factory.mktemp("pretrain_gate")
    src = _corpus_file(root)
    corpus = _corpus(root / "shared", src)
    out = {}
    for gate in ("elementwise", "none"):
        shutil.copytree(corpus, root / gate / "corpus")
        pretrain(src, root / gate, molecules=1000, epochs=2, seed=0, data_root=root / "none",
                 overrides=[*TINY, f"model.gate={gate}", "train.warmup_epochs=0"], progress=False, test_sets=())
        out[gate] = root / gate
    return out


def _main(capsys, *args) -> tuple[int, str]:
    rc = cmp.main(list(args))
    return rc, capsys.readouterr().err


def _val_mae_by_hand(folder: Path) -> dict:
    """Each descriptor's MAE on the val rows: ``siggate predict``'s path (SMILES in) against the
    labels of ``corpus.csv``, averaged here."""
    from siggate.train.predict import SmilesPredictor

    rows = [r for r in csv.DictReader(open(folder / "corpus" / "corpus.csv", newline="")) if r["split"] == "val"]
    names = [c for c in rows[0] if c not in ("smiles", "split")]
    pred = SmilesPredictor(str(folder / "model" / "best.pt"), domain=False).predict_rows([r["smiles"] for r in rows])
    assert not any(p["error"] for p in pred)
    y = np.array([[float(r[n]) for n in names] for r in rows])
    p = np.array([[float(q[n]) for n in names] for q in pred])
    return dict(zip(names, np.abs(p - y).mean(axis=0)))


def test_compare_reports_both_runs_and_the_paired_test(runs, tmp_path, capsys):
    from siggate.train.modelprep import load_trained

    out = tmp_path / "out"
    rc, err = _main(capsys, "--run", f"gate={runs['elementwise']}", "--run", f"none={runs['none']}", "--out", str(out))
    assert rc == 0, err
    res = json.loads((out / "results.json").read_text())
    assert res["command"].startswith("python benchmarks/pretrain_gate/compare.py --run gate=")
    assert len(res["git_commit"]) == 40 and res["baseline"] == "none"
    corpus = json.loads((runs["none"] / "corpus" / "meta.json").read_text())
    assert res["corpus"]["molecules"] == corpus["kept"] and res["corpus"]["descriptors"] == len(corpus["descriptors"])
    assert res["corpus"]["csv_sha256"] == file_digest(runs["none"] / "corpus" / "corpus.csv")

    by = {r["label"]: r for r in res["runs"]}
    assert [r["label"] for r in res["runs"]] == ["gate", "none"]
    for label, gate in (("gate", "elementwise"), ("none", "none")):
        run, folder = by[label], runs[gate]
        metrics = json.loads((folder / "model" / "metrics.json").read_text())
        model = load_trained(folder / "model" / "best.pt")[0]
        assert (run["gate"], run["attn"]) == (gate, True)
        assert run["params"] == sum(p.numel() for p in model.parameters())
        assert (run["gate_params"] > 0) == (gate != "none")
        assert run["epoch"] == [1, 2] and run["val_curve"] == [h["val"] for h in metrics["history"]]
        assert run["best_epoch"] == metrics["best_epoch"] and run["train_seconds"] == metrics["seconds"] > 0
        assert run["n_val"] == VAL
        by_hand = _val_mae_by_hand(folder)
        assert list(run["val_mae_per_descriptor"]) == list(by_hand) == corpus["descriptors"]
        for name, mae in by_hand.items():
            assert run["val_mae_per_descriptor"][name] == pytest.approx(mae, rel=1e-4, abs=1e-5), name
        assert run["val_mae"] == pytest.approx(np.mean(list(by_hand.values())), rel=1e-4)
        # the best epoch's logged val MAE is the same weights on the same molecules
        assert run["val_mae"] == pytest.approx(run["val_mae_logged"], rel=1e-5)
    assert by["gate"]["params"] - by["none"]["params"] == by["gate"]["gate_params"]

    (c,) = res["comparisons"]
    assert (c["a"], c["b"], c["n_pairs"]) == ("none", "gate", len(corpus["descriptors"]))
    diff = np.array([by["gate"]["val_mae_per_descriptor"][d] - by["none"]["val_mae_per_descriptor"][d]
                     for d in c["descriptors"]])
    assert np.allclose([c["diff_per_descriptor"][d] for d in c["descriptors"]], diff)
    assert c["diff_mean"] == pytest.approx(diff.mean())
    half = st.t.ppf(0.975, len(diff) - 1) * diff.std(ddof=1) / np.sqrt(len(diff))
    assert c["ci95"] == pytest.approx([diff.mean() - half, diff.mean() + half])
    assert c["p_wilcoxon"] == pytest.approx(st.wilcoxon(diff).pvalue)
    assert c["verdict"] == ("holds" if c["p_wilcoxon"] < 0.05 and diff.mean() < 0 else "not shown")
    # the claims table finds the pair in the file by its kind
    from siggate.analysis.claims import study_rows

    (row,) = study_rows(out / "results.json", res)
    assert row["claim"].startswith("the elementwise gate lowers the validation MAE of descriptor pretraining")

    png = (out / "val_curves.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def test_verdict_holds_only_for_a_significantly_lower_mae():
    n = {"n_pairs": 189}
    assert cmp.verdict({"p_holm_wilcoxon": 0.01, "diff_mean": -0.1, **n}) == "holds"
    assert cmp.verdict({"p_holm_wilcoxon": 0.01, "diff_mean": 0.1, **n}) == "not shown"  # significantly worse
    assert cmp.verdict({"p_holm_wilcoxon": 0.2, "diff_mean": -0.1, **n}) == "not shown"
    assert cmp.verdict({"p_holm_wilcoxon": float("nan"), "diff_mean": -0.1, **n}) == "not shown"
    assert cmp.verdict({"p_holm_wilcoxon": 0.01, "diff_mean": -0.1, "n_pairs": 1}) == "not shown"


def _copy(folder: Path, dest: Path, **config) -> Path:
    """``folder`` copied to ``dest`` with ``config`` (``{"train.lr": 0.1}``) written into its run's config.yaml."""
    shutil.copytree(folder, dest)
    path = dest / "model" / "config.yaml"
    doc = yaml.safe_load(path.read_text())
    for key, value in config.items():
        section, name = key.split(".")
        doc[section][name] = value
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return dest


@pytest.mark.parametrize("case", ["train config", "corpus", "same gate", "no baseline", "unfinished"])
def test_runs_that_cannot_be_compared_are_refused_in_one_line(runs, tmp_path, capsys, case):
    gate, none, out = runs["elementwise"], runs["none"], tmp_path / "out"
    if case == "train config":
        pair, want = (gate, _copy(none, tmp_path / "lr", **{"train.lr": 0.1})), "differ in train.lr (0.1 vs 0.002)"
    elif case == "corpus":
        other = _copy(none, tmp_path / "c")
        with open(other / "corpus" / "corpus.csv", "a") as fh:
            fh.write("C,train" + ",0" * (len(json.loads((none / "corpus" / "meta.json").read_text())["descriptors"])) + "\n")
        pair, want = (gate, other), "pretrained on different corpora"
    elif case == "same gate":
        pair, want = (gate, gate), "same gate (a=elementwise, b=elementwise); give one run per gate"
    elif case == "no baseline":
        pair, want = (gate, _copy(none, tmp_path / "hw", **{"model.gate": "headwise"})), "no run has gate=none"
    else:
        unfinished = _copy(none, tmp_path / "u")
        (unfinished / "model" / "metrics.json").unlink()
        pair, want = (gate, unfinished), "metrics.json: not found; is the pretraining finished?"
    rc, err = _main(capsys, "--run", f"a={pair[0]}", "--run", f"b={pair[1]}", "--out", str(out))
    assert rc == 2 and want in err, err
    assert err.startswith("compare.py: error: ") and err.count("\n") == 1 and "Traceback" not in err
    assert not out.exists()


def test_bad_run_arguments_are_refused(runs, capsys):
    rc, err = _main(capsys, "--run", f"x={runs['none']}")
    assert rc == 2 and "give two or more --run LABEL=FOLDER (got 1)" in err
    rc, err = _main(capsys, "--run", f"x={runs['none']}", "--run", f"x={runs['elementwise']}")
    assert rc == 2 and "--run labels must differ" in err
    rc, err = _main(capsys, "--run", str(runs["none"]), "--run", f"x={runs['elementwise']}")
    assert rc == 2 and "give LABEL=FOLDER" in err

