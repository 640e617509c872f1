"""``siggate explain``: integrated-gradient atom contributions (completeness, the attribution of
a synthetic additive target to the atoms that carry it), combinations by their weights, and the
command's CSVs and pictures with ``predict``'s per-row refusals."""

from __future__ import annotations

import csv
import json
import logging
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from rdkit import Chem

from siggate.data.base import GraphDataset, TaskInfo
from siggate.data.chem import smiles_to_graph
from siggate.predictors.base import AtomContributions, Prediction
from siggate.predictors.combine import Combination
from test_predict import nci_smiles, one_thread, run_cli, tiny_config

N_INFO = TaskInfo(name="nitrogens", task="regression", num_tasks=1, metric="mae", target_names=["nN"])


def _nitrogens(smiles: str) -> int:
    return sum(a.GetSymbol() == "N" for a in Chem.MolFromSmiles(smiles).GetAtoms())


def _nitrogen_molecules(n: int) -> list[str]:
    """The first ``n`` NCI molecules of at most 40 atoms."""
    return [s for s in nci_smiles(500) if Chem.MolFromSmiles(s).GetNumAtoms() <= 40][:n]


def _nitrogen_graphs(smiles: list[str]) -> list:
    """Graphs of ``smiles`` labelled y = number of nitrogen atoms + N(0, 0.05^2) noise (seed 0)."""
    rng = np.random.default_rng(0)
    graphs = []
    for i, s in enumerate(smiles):
        g = smiles_to_graph(s)
        g.y = torch.tensor([[_nitrogens(s) + 0.05 * rng.standard_normal()]], dtype=torch.float32)
        g.idx = i
        graphs.append(g)
    return graphs


@pytest.fixture(scope="module")
def nitrogen_model(tmp_path_factory):
    """A small GNN trained on y = number of nitrogen atoms + N(0, 0.05^2) noise (NCI molecules
    of at most 40 atoms: 180 train, 30 val, 60 test), 25 epochs."""
    from siggate.train.gnn_member import GNNMember

    graphs = _nitrogen_graphs(_nitrogen_molecules(270))
    ds = GraphDataset(info=N_INFO, splits={"train": graphs[:180], "val": graphs[180:210], "test": graphs[210:]})
    cfg = tiny_config(model={"pe": "none", "pe_steps": 0, "pe_dim": 0, "dim": 32, "pooling": "add"},
                      train={"epochs": 25, "lr": 0.005, "batch_size": 16})
    with one_thread():
        member = GNNMember(cfg, tmp_path_factory.mktemp("nitrogen") / "run", progress=False).fit(ds)
    return member, ds


def test_the_attribution_mass_falls_on_the_nitrogens(nitrogen_model):
    """Per atom: nitrogens get a mean contribution near +1 and every other element far less;
    the contributions rank nitrogens above the other atoms (ROC-AUC), and per molecule the
    nitrogens' summed contribution follows their count (Spearman)."""
    from sklearn.metrics import roc_auc_score

    member, ds = nitrogen_model
    with one_thread():
        c = member.atom_contributions(ds.test, steps=50)
    is_n, values, per_mol = [], [], []
    for g, atoms in zip(ds.test, c.atoms):
        symbols = [a.GetSymbol() for a in Chem.MolFromSmiles(g.smiles).GetAtoms()]
        assert atoms.shape == (len(symbols), 1)
        is_n += [s == "N" for s in symbols]
        values += atoms[:, 0].tolist()
        per_mol.append((sum(v for s, v in zip(symbols, atoms[:, 0].tolist()) if s == "N"), symbols.count("N")))
    is_n, values = np.array(is_n), np.array(values)
    assert is_n.sum() >= 20  # enough nitrogens to tell
    assert values[is_n].mean() > 0.6 and values[is_n].mean() - values[~is_n].mean() > 0.6
    assert roc_auc_score(is_n, values) > 0.95
    from scipy.stats import spearmanr

    assert spearmanr([m[0] for m in per_mol], [m[1] for m in per_mol]).statistic > 0.9


def test_contributions_add_up_to_prediction_minus_baseline(nitrogen_model):
    """Completeness: per molecule the atoms' sum equals the prediction minus the zero-embedding
    baseline's prediction, up to the Riemann sum's error, which shrinks as the steps grow; the
    prediction is the member's own."""
    member, _ = nitrogen_model
    graphs = [smiles_to_graph(s) for s in nci_smiles(30, start=600)]
    with one_thread():
        coarse = member.atom_contributions(graphs, steps=10)
        fine = member.atom_contributions(graphs, steps=400)
        assert torch.allclose(fine.prediction, member.predict(graphs).mean, atol=1e-5)
    assert torch.equal(fine.baseline, coarse.baseline)
    gaps = {}
    for name, c in (("coarse", coarse), ("fine", fine)):
        delta = (c.prediction - c.baseline)[:, 0].numpy()
        gaps[name] = np.array([float(a.sum()) for a in c.atoms]) - delta
    delta = (fine.prediction - fine.baseline)[:, 0].numpy()
    assert np.abs(delta).mean() > 0.5  # the baseline is far from the prediction: completeness says something
    assert np.all(np.abs(gaps["fine"]) <= 0.01 + 0.01 * np.abs(delta)), gaps["fine"]
    assert np.abs(gaps["fine"]).max() < np.abs(gaps["coarse"]).max() / 4


class NitrogenCounter:
    """A member that predicts the number of nitrogens, each nitrogen contributing exactly 1."""

    kind = "counter"
    info = N_INFO

    def predict(self, graphs):
        return Prediction(torch.tensor([[float(_nitrogens(g.smiles))] for g in graphs]))

    def atom_contributions(self, graphs, steps=50):
        atoms = [torch.tensor([[1.0 if a.GetSymbol() == "N" else 0.0] for a in Chem.MolFromSmiles(g.smiles).GetAtoms()],
                              dtype=torch.float64) for g in graphs]
        pred = self.predict(graphs).mean.double()
        return AtomContributions(atoms, torch.zeros_like(pred), pred, "exact count")


def test_a_combination_sums_its_members_contributions_with_its_weights(nitrogen_model):
    member, _ = nitrogen_model
    graphs = [smiles_to_graph(s) for s in nci_smiles(12, start=700)]
    combo = Combination([member, NitrogenCounter()], weights=[0.25, 0.75])
    with one_thread():
        got = combo.atom_contributions(graphs, steps=20)
        gnn = member.atom_contributions(graphs, steps=20)
        mean = combo.predict(graphs).mean
    exact = NitrogenCounter().atom_contributions(graphs)
    for g in range(len(graphs)):
        assert torch.allclose(got.atoms[g], 0.25 * gnn.atoms[g] + 0.75 * exact.atoms[g], atol=1e-12)
    assert torch.allclose(got.prediction, mean.double(), atol=1e-5)
    assert torch.allclose(got.baseline, 0.25 * gnn.baseline.double(), atol=1e-12)
    assert "integrated gradients" in got.method and "exact count" in got.method

    class Opaque:  # a member kind without the hook
        kind, info = "opaque", N_INFO

    with pytest.raises(ValueError, match=r"member member1 \(opaque\) cannot attribute its predictions to atoms"):
        Combination([member, Opaque()]).atom_contributions(graphs)


def _rows(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_explain_writes_pictures_and_csvs_and_refuses_rows_as_predict_does(nitrogen_model, tmp_path, capsys):
    """Two molecules and three bad rows: one SVG and PNG per molecule, each atom row in
    atoms.csv, the bad rows' reasons exactly predict's, exit code 1; the SVG fills the atom of
    the largest absolute contribution pure red (positive) or blue (negative), and says the scale."""
    from PIL import Image

    from siggate.train.predict import SmilesPredictor

    member, _ = nitrogen_model
    run = member.checkpoint.parent
    smiles = ["NCCN", "c1ccccc1O", "not-a-smiles", "", "C(C)(C)(C)(C)C"]
    out = tmp_path / "explained"
    rc, _, err = run_cli(["explain", "--checkpoint", str(run), *smiles[:2], "--out", str(out), "--steps", "20"], capsys)
    assert rc == 0, err
    src = tmp_path / "in.csv"
    src.write_text("id,smiles\n" + "".join(f"m{i},{s}\n" for i, s in enumerate(smiles)))
    rc, _, err = run_cli(["explain", "--checkpoint", str(run), "--input", str(src), "--out", str(out),
                          "--steps", "20"], capsys)
    assert rc == 1 and "5 rows, 2 explained, 3 failed" in err
    mols = _rows(out / "molecules.csv")
    want = {r["smiles"]: r["error"] for r in SmilesPredictor(run).predict_rows(smiles)}
    assert [r["smiles"] for r in mols] == smiles and [r["row"] for r in mols] == ["0", "1", "2", "3", "4"]
    assert [r["error"] for r in mols] == [want[s] for s in smiles] and all(want[s] for s in smiles[2:])
    atoms = _rows(out / "atoms.csv")
    assert [(r["row"], r["atom"], r["element"]) for r in atoms] == (
        [("0", str(i), e) for i, e in enumerate("NCCN")] + [("1", str(i), e) for i, e in enumerate("CCCCCCO")])
    shared = max(abs(float(r["nN"])) for r in atoms)  # one scale for the explanation's pictures, so they compare
    for row in mols[:2]:
        values = [float(r["nN"]) for r in atoms if r["row"] == row["row"]]
        assert float(row["nN_atoms_sum"]) == pytest.approx(sum(values), abs=1e-4)
        assert row["pictures"] == f"mol{row['row']}"
        with Image.open(out / f"mol{row['row']}.png") as im:
            assert im.size == (460, 440) and len(im.convert("RGB").getcolors(1 << 16)) > 20
        svg = (out / f"mol{row['row']}.svg").read_text()
        desc = re.search(r"<desc>(.*)</desc>", svg).group(1)
        assert svg.startswith("<?xml") and desc.startswith(f"nN = {float(row['nN']):.4g}   baseline ")
        low, high = re.search(r"\(red raises it, blue lowers it\), from (\S+) to (\S+)$", desc).groups()
        assert float(low) == pytest.approx(-shared, rel=1e-5) and float(high) == pytest.approx(shared, rel=1e-5)
        top = max(values, key=abs)  # the largest contribution of all in full colour (the bar stops short of it)
        full = re.search(r"fill:#FF0000" if top > 0 else r"fill:#0000FF", svg, re.IGNORECASE)
        assert bool(full) == (abs(top) >= shared * (1 - 1e-9))
    assert float(atoms[0]["nN"]) > float(atoms[1]["nN"])  # N before C in NCCN
    assert not (out / "mol2.png").exists()
    rc, _, err = run_cli(["explain", "--checkpoint", str(run), "--out", str(out)], capsys)
    assert rc == 2 and "give SMILES as arguments or --input FILE" in err
    rc, _, err = run_cli(["explain", "--checkpoint", str(run), "CCO", "--out", str(out), "--steps", "0"], capsys)
    assert rc == 2 and "--steps must be at least 1" in err
    # a fixed scale, to compare explanations: every picture's bar says it
    rc, _, err = run_cli(["explain", "--checkpoint", str(run), *smiles[:2], "--out", str(out), "--steps", "20",
                          "--scale", "2.5", "--overwrite"], capsys)
    assert rc == 0, err
    for k in (0, 1):
        assert "from -2.5 to +2.5</desc>" in (out / f"mol{k}.svg").read_text()
    rc, _, err = run_cli(["explain", "--checkpoint", str(run), "CCO", "--out", str(out), "--scale", "0"], capsys)
    assert rc == 2 and "--scale must be a positive number" in err


@pytest.mark.parametrize("steps", [1, 2, 20])
def test_atom_sums_that_miss_prediction_minus_baseline_are_warned_about(nitrogen_model, tmp_path, capsys, caplog, steps):
    """At too few --steps the GNN's atom contributions did not add up to prediction minus baseline
    (121% off at the default for one model), and nothing said so: each molecule whose sum misses
    by more than 5% of that change (or of its contributions' absolute sum, where larger: a change
    near 0 is no reason) is counted in one warning, with the first and the fix."""
    import logging

    member, _ = nitrogen_model
    smiles = ["NCCN", "c1ccccc1O", "CC(=O)Nc1ccc(O)cc1", "CCCCN", "NC(=O)c1ccncc1"]
    out = tmp_path / "x"
    with caplog.at_level(logging.WARNING, logger="siggate"):
        rc, _, err = run_cli(["explain", "--checkpoint", str(member.checkpoint.parent), *smiles, "--out", str(out),
                              "--steps", str(steps)], capsys)
    assert rc == 0, err
    missed = []
    atoms = _rows(out / "atoms.csv")
    for row in _rows(out / "molecules.csv"):  # from the tables themselves
        change, total = float(row["nN"]) - float(row["nN_baseline"]), float(row["nN_atoms_sum"])
        drawn = sum(abs(float(a["nN"])) for a in atoms if a["row"] == row["row"])
        if abs(total - change) > 0.05 * max(abs(change), drawn):
            missed.append((row["row"], total, change))
    said = [r.getMessage() for r in caplog.records if "miss prediction minus baseline" in r.getMessage()]
    if not missed:
        assert said == []
    else:
        row, total, change = missed[0]
        assert said == [f"the atom contributions of {len(missed)} molecule(s) miss prediction minus baseline by more "
                        "than 5% (of it, or of the contributions' absolute sum where larger; first: row "
                        f"{row}, nN: sum {total:.4g} against {change:.4g}): the path integral has too few points for "
                        f"this model; explain again with more --steps (now {steps}; e.g. {4 * steps}) for "
                        "contributions that add up"]
    if steps == 1:
        assert missed  # (one point misses: the check can fail)


# ------------------------------------------------------------------ fingerprint members (occlusion)

FP_SPLITS = {"train": (0, 100), "val": (100, 120), "test": (120, 150)}


def test_an_input_without_rows_is_warned_about_by_explain_and_predict(nitrogen_model, tmp_path, capsys):
    """A header alone: an empty output and exit 0 as before, and now a warning that nothing was
    done (evaluate, which has no score to give, refuses such a file)."""
    member, _ = nitrogen_model
    run = member.checkpoint.parent
    src = tmp_path / "empty.csv"
    src.write_text("smiles\n")
    rc, _, err = run_cli(["explain", "--checkpoint", str(run), "--input", str(src), "--out", str(tmp_path / "x"),
                          "--steps", "5"], capsys)
    assert rc == 0 and ("siggate explain: warning: the input holds no rows (a header alone, or nothing); nothing was "
                        "explained") in err, err
    rc, out, err = run_cli(["predict", "--checkpoint", str(run), "--input", str(src)], capsys)
    assert rc == 0 and out.strip().splitlines()[0].startswith("smiles,") and len(out.strip().splitlines()) == 1
    assert "siggate predict: 0 rows, 0 predicted, 0 failed" in err
    assert "siggate predict: warning: the input holds no rows (a header alone, or nothing); nothing was predicted" in err
    rc, out, err = run_cli(["predict", "--checkpoint", str(run), "CCO"], capsys)
    assert rc == 0 and "warning" not in err


def test_explain_carries_the_inputs_other_columns_and_refuses_a_malformed_row(nitrogen_model, tmp_path, capsys):
    """molecules.csv keeps a CSV's IDs and a .smi file's names beside each row (a name
    molecules.csv uses itself takes ``_input``); a row with more fields than the header is refused
    with predict's reason instead of being explained from whatever field sits in the SMILES column."""
    member, _ = nitrogen_model
    run = member.checkpoint.parent
    src = tmp_path / "in.csv"
    src.write_text("id,error,smiles\nm0,x,NCCN\nm1,y,c1ccccc1O,extra\nm2,,CCN\n")
    out = tmp_path / "explained"
    rc, _, err = run_cli(["explain", "--checkpoint", str(run), "--input", str(src), "--out", str(out),
                          "--steps", "5"], capsys)
    assert rc == 1 and "3 rows, 2 explained, 1 failed" in err, err
    mols = _rows(out / "molecules.csv")
    assert list(mols[0])[:4] == ["row", "smiles", "id", "error_input"] and list(mols[0])[-1] == "error"
    assert [(r["row"], r["id"], r["error_input"], r["smiles"]) for r in mols] == [
        ("0", "m0", "x", "NCCN"), ("1", "m1", "y", "c1ccccc1O"), ("2", "m2", "", "CCN")]
    rc, _, err = run_cli(["predict", "--checkpoint", str(run), "--input", str(src), "--output",
                          str(tmp_path / "p.csv")], capsys)
    want = [r["error_pred"] for r in _rows(tmp_path / "p.csv")]  # predict's reasons, word for word
    assert rc == 1 and [r["error"] for r in mols] == want and want[0] == want[2] == "" and "line 3" in want[1]
    assert sorted(p.name for p in out.glob("mol*.svg")) == ["mol0.svg", "mol2.svg"]
    assert [r["row"] for r in _rows(out / "atoms.csv")] == ["0"] * 4 + ["2"] * 3
    smi = tmp_path / "in.smi"
    smi.write_text("NCCN ethylenediamine\nCCN\n")
    rc, _, err = run_cli(["explain", "--checkpoint", str(run), "--input", str(smi), "--out", str(out),
                          "--steps", "5"], capsys)
    assert rc == 0, err
    assert [(r["smiles"], r["name"]) for r in _rows(out / "molecules.csv")] == [("NCCN", "ethylenediamine"),
                                                                                 ("CCN", "")]


@pytest.fixture(scope="module")
def nitrogen_fingerprints():
    """The svr and rf members (default grids, chosen on val) fitted on y = number of nitrogens +
    noise: 150 NCI molecules of at most 40 atoms, 100 train, 20 val, 30 test."""
    from siggate.predictors.forest import RandomForest
    from siggate.predictors.svr import KernelSVR

    graphs = _nitrogen_graphs(_nitrogen_molecules(150))
    ds = GraphDataset(info=N_INFO, splits={k: graphs[a:b] for k, (a, b) in FP_SPLITS.items()})
    return {"svr": KernelSVR(seed=0).fit(ds), "rf": RandomForest(seed=0).fit(ds)}, ds


def _nitrogen_scores(graphs, contrib) -> dict:
    """How the atom contributions of ``graphs`` pick out the nitrogens: the per-atom ROC-AUC
    (nitrogens against the other atoms), the mean contribution of each group, the nitrogens' share
    of the positive mass against their share of the atoms, and the Spearman correlation of each
    molecule's nitrogen total with its nitrogen count."""
    from scipy.stats import spearmanr
    from sklearn.metrics import roc_auc_score

    is_n, values, per_mol = [], [], []
    for g, atoms in zip(graphs, contrib.atoms):
        symbols = [a.GetSymbol() for a in Chem.MolFromSmiles(g.smiles).GetAtoms()]
        assert atoms.shape == (len(symbols), 1) and atoms.dtype == torch.float64
        is_n += [s == "N" for s in symbols]
        values += atoms[:, 0].tolist()
        per_mol.append((sum(v for s, v in zip(symbols, atoms[:, 0].tolist()) if s == "N"), symbols.count("N")))
    is_n, values = np.array(is_n), np.array(values)
    positive = values.clip(min=0)
    return {"nitrogens": int(is_n.sum()), "auc": roc_auc_score(is_n, values), "mean_n": values[is_n].mean(),
            "mean_other": values[~is_n].mean(), "positive_share": positive[is_n].sum() / positive.sum(),
            "atom_share": is_n.mean(),
            "spearman": spearmanr([m[0] for m in per_mol], [m[1] for m in per_mol]).statistic}


@pytest.mark.parametrize("which", ["svr", "rf", "svr+rf"])
def test_fingerprint_attribution_mass_falls_on_the_nitrogens(nitrogen_fingerprints, which):
    """On the 30 held-out molecules, for the svr and rf members and their equal-weight
    combination: nitrogens rank above the other atoms (per-atom ROC-AUC), hold several times their
    share of the atoms in the positive mass, and their per-molecule total follows their count."""
    members, ds = nitrogen_fingerprints
    model = Combination([members["svr"], members["rf"]]) if which == "svr+rf" else members[which]
    c = model.atom_contributions(ds.test)
    got = _nitrogen_scores(ds.test, c)
    assert got["nitrogens"] >= 20  # enough nitrogens to tell
    assert got["auc"] > 0.9, got
    assert got["mean_n"] - got["mean_other"] > 0.05, got
    assert got["positive_share"] > 4 * got["atom_share"], got
    assert got["spearman"] > 0.6, got  # 30 molecules, many without nitrogen (ties)
    assert torch.allclose(c.prediction, model.predict(ds.test).mean.double(), atol=1e-5)


def test_a_combination_of_fingerprint_members_weighs_their_occlusions(nitrogen_fingerprints):
    members, ds = nitrogen_fingerprints
    combo = Combination([members["svr"], members["rf"]], weights=[0.3, 0.7])
    got = combo.atom_contributions(ds.test[:8])
    parts = [members[k].atom_contributions(ds.test[:8]) for k in ("svr", "rf")]
    for g in range(8):
        assert torch.allclose(got.atoms[g], 0.3 * parts[0].atoms[g] + 0.7 * parts[1].atoms[g], rtol=0, atol=1e-12)
    assert torch.allclose(got.baseline, 0.3 * parts[0].baseline + 0.7 * parts[1].baseline, rtol=0, atol=1e-12)
    assert got.method.count("occlusion of fingerprint bins") == 2 and "(svr)" in got.method and "(rf)" in got.method


def test_fingerprint_contributions_are_deterministic(nitrogen_fingerprints, tmp_path):
    """The same numbers on a second call, from the saved and loaded member, and for one molecule
    alone as in a batch (up to the rounding of the kernel products over other shapes); the
    baseline is the empty fingerprint's prediction, the same for every molecule."""
    from siggate.predictors.forest import RandomForest
    from siggate.predictors.svr import KernelSVR

    members, ds = nitrogen_fingerprints
    graphs = ds.test[:10]
    for kind, cls in (("svr", KernelSVR), ("rf", RandomForest)):
        member = members[kind]
        first, again = member.atom_contributions(graphs), member.atom_contributions(graphs, steps=7)
        member.save(tmp_path / kind)
        loaded = cls.load(tmp_path / kind).atom_contributions(graphs)
        for other in (again, loaded):
            assert all(torch.equal(a, b) for a, b in zip(first.atoms, other.atoms))
            assert torch.equal(first.baseline, other.baseline) and torch.equal(first.prediction, other.prediction)
        alone = member.atom_contributions(graphs[3:4])
        assert torch.allclose(alone.atoms[0], first.atoms[3], rtol=0, atol=1e-12)
        assert torch.unique(first.baseline).numel() == 1


class LinearCounts:
    """A target model linear in the count fingerprint it reads: ``counts @ w + b``."""

    def __init__(self, radius, size, w, b):
        self.radius, self.size, self.w, self.b, self.meta = radius, size, w, b, {}

    def output(self, table):
        return np.asarray(table.get(self.radius, self.size) @ self.w, dtype=np.float64).reshape(-1) + self.b


def _linear_member(models):
    from siggate.predictors.fpmember import FingerprintMember

    member = FingerprintMember()
    member.kind, member.info = "linear", TaskInfo(name="lin", task="regression", num_tasks=len(models), metric="mae")
    member.models_ = list(models)
    return member


def test_a_bins_change_is_shared_by_its_environments_and_their_atoms():
    """Bin 5 (one environment of atoms 0, 1, 2) changes the prediction by 0.6: 0.2 to each atom;
    bin 9 (two environments, atoms 1 and 2 alone) by -0.3: -0.15 to each; atom 3 sets neither."""
    from siggate.predictors.fpmember import share_over_atoms

    got = share_over_atoms(np.array([5, 9]), np.array([0.6, -0.3]), {5: ((0, 1, 2),), 9: ((1,), (2,))}, 4)
    assert got.tolist() == pytest.approx([0.2, 0.05, 0.05, 0.0], abs=1e-15)
    repeated = share_over_atoms(np.array([4]), np.array([0.9]), {4: ((0, 1, 0),)}, 2)  # an atom twice in one environment
    assert repeated.tolist() == pytest.approx([0.6, 0.3], abs=1e-15) and repeated.sum() == pytest.approx(0.9)


def test_occlusion_of_a_model_linear_in_the_counts_is_exact():
    """For a model linear in radius-0 counts, each atom's contribution is the weight of its own
    bin (found here with RDKit's ``fromAtoms``, not through the bit-to-atoms map), the baseline is
    the intercept, and the atoms add up exactly to the prediction minus the baseline. At radius 2
    (environments of many atoms, shared among them) the sum is still exact. A constant target
    contributes nothing."""
    from rdkit.Chem import rdFingerprintGenerator

    from siggate.predictors.fpmember import ConstantModel

    size, rng = 1024, np.random.default_rng(1)
    w0, w2 = rng.normal(size=size), rng.normal(size=size)
    member = _linear_member([LinearCounts(0, size, w0, 0.25), LinearCounts(2, size, w2, -1.0), ConstantModel(3.5)])
    smiles = ["NCCN", "c1ccccc1O", "CC(=O)Nc1ccc(O)cc1", "C1CC1N(C)C"]
    graphs = [smiles_to_graph(s) for s in smiles]
    c = member.atom_contributions(graphs)
    gen = rdFingerprintGenerator.GetMorganGenerator(radius=0, fpSize=size)
    for g, s in enumerate(smiles):
        mol = Chem.MolFromSmiles(s)
        own = [int(np.flatnonzero(gen.GetCountFingerprintAsNumPy(mol, fromAtoms=[a]))[0]) for a in range(mol.GetNumAtoms())]
        assert np.allclose(c.atoms[g][:, 0].numpy(), w0[own], rtol=0, atol=1e-12)
        assert np.allclose(c.atoms[g].sum(0)[:2].numpy(), (c.prediction - c.baseline)[g, :2].numpy(), rtol=0, atol=1e-9)
        assert torch.equal(c.atoms[g][:, 2], torch.zeros(mol.GetNumAtoms(), dtype=torch.float64))
    assert torch.equal(c.baseline[:, 0], torch.full((4,), 0.25, dtype=torch.float64))
    assert torch.equal(c.baseline[:, 2], c.prediction[:, 2]) and float(c.prediction[0, 2]) == 3.5
    assert np.allclose(c.prediction[:, :2].numpy(), member.predict_array(smiles)[:, :2], rtol=0, atol=1e-12)


def _nitrogen_svr_run(tmp_path, capsys, targets: list[str]):
    """``siggate train --members svr`` on the first 150 nitrogen molecules (FP_SPLITS), its first
    target the nitrogen count and a second, if named, the SMILES' length; the run folder."""
    smiles = _nitrogen_molecules(150)
    graphs = _nitrogen_graphs(smiles)
    data = tmp_path / "n.csv"
    split = {i: k for k, (a, b) in FP_SPLITS.items() for i in range(a, b)}
    data.write_text(",".join(["smiles", *targets, "split"]) + "\n" + "".join(
        ",".join([s, f"{float(g.y):.6f}", *[str(len(s))] * (len(targets) - 1), split[i]]) + "\n"
        for i, (s, g) in enumerate(zip(smiles, graphs))))
    run = tmp_path / "run"
    rc, _, err = run_cli(["train", "--data", str(data), "--target-col", ",".join(targets), "--split", "column:split",
                          "--members", "svr", "--out", str(run), "--cache-dir", str(tmp_path / "cache"),
                          "--no-progress"], capsys)
    assert rc == 0, err
    return run


def test_explain_on_a_run_of_the_svr_member(tmp_path, capsys, caplog):
    """``siggate train --members svr`` on the nitrogen CSV, then ``siggate explain``: the per-atom
    CSV holds the member's occlusions, the molecules' CSV predict's predictions, the empty
    fingerprint's baseline and the atoms' sum; a bad row fails as in predict."""
    from siggate.predictors.svr import KernelSVR

    run = _nitrogen_svr_run(tmp_path, capsys, ["nN"])
    asked = ["NCCN", "CC(=O)Nc1ccc(O)cc1", "C1CC1", "C1CC"]
    out = tmp_path / "explained"
    caplog.set_level(logging.WARNING, logger="siggate")
    caplog.clear()
    rc, _, err = run_cli(["explain", "--checkpoint", str(run), *asked, "--out", str(out)], capsys)
    assert rc == 1 and "4 rows, 3 explained, 1 failed" in err
    # predict's warning about its _uncertainty column, which explain never writes, is predict's alone;
    # and it said the validation weights gave one member all the weight, of a run of one member
    assert not [r for r in caplog.records if "_uncertainty" in r.getMessage()]
    rc, _, err = run_cli(["predict", "--checkpoint", str(run), "NCCN"], capsys)
    assert rc == 0, err
    assert [r.getMessage() for r in caplog.records if "_uncertainty" in r.getMessage()] == [
        f"{run}: the run holds one member for 'nN', so its _uncertainty column is 0 for every molecule, not a sign "
        "of certainty; conformal intervals (--coverage, or an estimator's predict_interval) of a run calibrated on "
        "the similarity to its training molecules widen away from them"]
    member = KernelSVR.load(run / "member0")
    want = member.atom_contributions([smiles_to_graph(s) for s in asked[:3]])
    atoms, mols = _rows(out / "atoms.csv"), _rows(out / "molecules.csv")
    for g, s in enumerate(asked[:3]):
        got = [r for r in atoms if r["row"] == str(g)]
        assert [r["element"] for r in got] == [a.GetSymbol() for a in Chem.MolFromSmiles(s).GetAtoms()]
        assert [float(r["nN"]) for r in got] == pytest.approx(want.atoms[g][:, 0].tolist(), rel=1e-5, abs=1e-9)
        row = mols[g]
        assert float(row["nN"]) == pytest.approx(float(want.prediction[g, 0]), rel=1e-5)
        assert float(row["nN_baseline"]) == pytest.approx(float(want.baseline[g, 0]), rel=1e-5)
        assert float(row["nN_atoms_sum"]) == pytest.approx(sum(float(r["nN"]) for r in got), abs=1e-5)
        assert row["pictures"] == f"mol{g}" and (out / f"mol{g}.svg").is_file() and (out / f"mol{g}.png").is_file()
    ncc = [float(r["nN"]) for r in atoms if r["row"] == "0"]
    assert min(ncc[0], ncc[3]) > max(ncc[1], ncc[2])  # the nitrogens of NCCN above its carbons
    assert mols[3]["error"].startswith("SMILES parse error") and not (out / "mol3.svg").exists()
    predicted = _rows(_predict_csv(run, asked[:3], tmp_path / "p.csv", capsys))
    assert [float(r["nN"]) for r in predicted] == pytest.approx([float(r["nN"]) for r in mols[:3]], rel=1e-5)
    # explained again into the same folder with fewer molecules: only this explanation's pictures
    (out / "notes.txt").write_text("mine")
    (out / "mol3_final.png").write_bytes(b"mine too")  # not a name this model's pictures take
    rc, _, err = run_cli(["explain", "--checkpoint", str(run), "C1CC1", "--out", str(out)], capsys)
    assert rc == 0, err
    assert sorted(p.name for p in out.iterdir()) == ["atoms.csv", "explanation.json", "mol0.png", "mol0.svg",
                                                     "mol3_final.png", "molecules.csv", "notes.txt"]
    assert json.loads((out / "explanation.json").read_text()) == {"format": 1, "targets": ["nN"], "finished": True,
                                                                   "rows": 1, "failed": 0}
    # a picture of the user's beside that explanation, of a name it did not write (it drew mol0 only): it was
    # deleted when the folder was explained again; refused now, kept; --overwrite replaces it
    (out / "mol5.png").write_bytes(b"my own picture")
    rc, _, err = run_cli(["explain", "--checkpoint", str(run), "C1CC1", "CCO", "--out", str(out)], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and f"--out {out} holds mol5.png, names an explanation " \
        "writes, but no explanation wrote them" in err, err
    assert (out / "mol5.png").read_bytes() == b"my own picture" and (out / "mol0.png").is_file()
    rc, _, err = run_cli(["explain", "--checkpoint", str(run), "C1CC1", "--out", str(out), "--overwrite"], capsys)
    assert rc == 0 and not (out / "mol5.png").exists(), err
    # a folder of the user's own molecules.csv and pictures (no explanation.json): refused, kept;
    # --overwrite replaces them
    own = tmp_path / "own"
    own.mkdir()
    (own / "molecules.csv").write_text("smiles\nCCO\n")
    (own / "mol7.png").write_bytes(b"mine")
    rc, _, err = run_cli(["explain", "--checkpoint", str(run), "C1CC1", "--out", str(own)], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert (f"--out {own} holds mol7.png, molecules.csv, names an explanation writes, but no explanation wrote them: "
            "move them or choose another --out (--overwrite replaces them)") in err
    assert (own / "molecules.csv").read_text() == "smiles\nCCO\n" and (own / "mol7.png").read_bytes() == b"mine"
    rc, _, err = run_cli(["explain", "--checkpoint", str(run), "C1CC1", "--out", str(own), "--overwrite"], capsys)
    assert rc == 0 and not (own / "mol7.png").exists() and (own / "mol0.png").is_file(), err
    # an explanation made before explanation.json was written: its own molecules.csv header says so
    (own / "explanation.json").unlink()
    rc, _, err = run_cli(["explain", "--checkpoint", str(run), "NCCN", "--out", str(own)], capsys)
    assert rc == 0 and (own / "explanation.json").is_file(), err
    # another explain holds the folder: refused, nothing of its explanation touched
    from siggate.files import FolderLock

    kept = {p.name: p.read_bytes() for p in out.iterdir()}
    lock = FolderLock(out)
    lock.acquire()
    try:
        rc, _, err = run_cli(["explain", "--checkpoint", str(run), "NCCN", "--out", str(out)], capsys)
    finally:
        lock.release()
    assert rc == 2 and "two runs must not write into one folder" in err and len(err.strip().splitlines()) == 1
    assert {p.name: p.read_bytes() for p in out.iterdir()} == kept
    # an explanation that stops midway (Ctrl-C while a picture is drawn) leaves the one before as it was,
    # and nothing of its own (it removed the earlier CSVs first, and left its own pictures)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    import importlib

    def broken(*a, **k):
        raise KeyboardInterrupt  # Ctrl-C while the first picture is drawn

    explain = importlib.import_module("siggate.train.explain")
    real = explain.draw_contributions
    explain.draw_contributions = broken
    try:
        rc, _, err = run_cli(["explain", "--checkpoint", str(run), "NCCN", "--out", str(out)], capsys)
    finally:
        explain.draw_contributions = real
    assert rc == 130 and "interrupted" in err
    assert sorted(p.name for p in out.iterdir()) == sorted(before)  # no .explaining, no lock
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    # input refused partway (a quote never closed) likewise: exit 2, the earlier explanation kept
    bad = tmp_path / "bad.csv"
    bad.write_text('smiles,note\nNCCN,a\nC1CC1,"open\nCCO,b\n')
    rc, _, err = run_cli(["explain", "--checkpoint", str(run), "--input", str(bad), "--out", str(out)], capsys)
    assert rc == 2 and "bad.csv, line 3: a quoted field opened on this line is never closed" in err, err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    rc, _, err = run_cli(["explain", "--checkpoint", str(run), "C1CC1", "--out", str(out)], capsys)
    assert rc == 0, err
    kept = (out / "molecules.csv").read_bytes()  # an explanation's CSV read back into its own folder: refused
    rc, _, err = run_cli(["explain", "--checkpoint", str(run), "--input", str(out / "molecules.csv"), "--out",
                          str(out)], capsys)
    assert rc == 2 and "which this explanation replaces" in err and (out / "molecules.csv").read_bytes() == kept


def _predict_csv(run, smiles, path, capsys):
    rc, _, err = run_cli(["predict", "--checkpoint", str(run), *smiles, "--output", str(path)], capsys)
    assert rc == 0, err
    return path


def test_two_targets_of_one_file_name_keep_their_pictures_and_a_new_model_replaces_all_old_ones(tmp_path, capsys):
    """Targets 'IC50 (nM)' and 'IC50 [nM]' both became the file name tag IC50_nM_: the second's
    pictures were drawn over the first's. And explaining into the folder with a model of other
    targets removed only the pictures of the new model's names, leaving the old explanation's."""
    (tmp_path / "two").mkdir()
    (tmp_path / "one").mkdir()
    run = _nitrogen_svr_run(tmp_path / "two", capsys, ["IC50 (nM)", "IC50 [nM]"])
    out = tmp_path / "explained"
    rc, _, err = run_cli(["explain", "--checkpoint", str(run), "NCCN", "C1CC1", "--out", str(out)], capsys)
    assert rc == 0, err
    pictures = ["mol0_IC50_nM_", "mol0_IC50_nM__1", "mol1_IC50_nM_", "mol1_IC50_nM__1"]
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["atoms.csv", "explanation.json", "molecules.csv", *[f"{p}.{x}" for p in pictures for x in ("png", "svg")]])
    assert [r["pictures"] for r in _rows(out / "molecules.csv")] == ["mol0_IC50_nM_;mol0_IC50_nM__1",
                                                                     "mol1_IC50_nM_;mol1_IC50_nM__1"]
    assert (out / "mol0_IC50_nM_.svg").read_text() != (out / "mol0_IC50_nM__1.svg").read_text()
    one = _nitrogen_svr_run(tmp_path / "one", capsys, ["nN"])
    rc, _, err = run_cli(["explain", "--checkpoint", str(one), "NCCN", "--out", str(out)], capsys)
    assert rc == 0, err
    assert sorted(p.name for p in out.iterdir()) == ["atoms.csv", "explanation.json", "mol0.png", "mol0.svg",
                                                     "molecules.csv"]
    rc, _, err = run_cli(["explain", "--checkpoint", str(run), "NCCN", "C1CC1", "CCO", "--out", str(out)], capsys)
    assert rc == 0, err  # and back: the one-target pictures go too
    assert not (out / "mol0.png").exists() and (out / "mol2_IC50_nM__1.png").is_file()


def test_a_replacement_that_fails_keeps_the_earlier_explanation(tmp_path, capsys, monkeypatch):
    """A second explain whose files could not be moved in (a folder ``mol1.png`` in the way: a
    traceback) had deleted the earlier explanation's files first, and its own went with its staging
    folder: nothing was left but a record saying "not finished" (helper-155). A folder in the way is
    refused before any work, and a move that fails puts the earlier explanation back as it was."""
    import os

    run = _nitrogen_svr_run(tmp_path, capsys, ["nN"])
    out = tmp_path / "explained"
    rc, _, err = run_cli(["explain", "--checkpoint", str(run), "NCCN", "CCO", "--out", str(out)], capsys)
    assert rc == 0, err
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    (out / "mol1.png").unlink()
    (out / "mol1.png").mkdir()
    rc, _, err = run_cli(["explain", "--checkpoint", str(run), "NCCN", "CCO", "--out", str(out)], capsys)
    assert rc == 2 and err.strip().endswith(f"--out {out} holds the folder mol1.png, of names an explanation writes "
                                            "its files by: move them or choose another --out"), err
    (out / "mol1.png").rmdir()
    (out / "mol1.png").write_bytes(before["mol1.png"])

    real = os.replace

    def failing(src, dst):  # the third file moved in fails: a full disk
        if Path(src).parent.name == ".explaining" and failing.moved == 2:
            raise OSError(28, "No space left on device", str(dst))
        if Path(src).parent.name == ".explaining":
            failing.moved += 1
        return real(src, dst)

    failing.moved = 0
    monkeypatch.setattr(os, "replace", failing)
    rc, _, err = run_cli(["explain", "--checkpoint", str(run), "NCCN", "CCO", "CCCN", "--out", str(out)], capsys)
    monkeypatch.undo()
    assert rc == 2 and "No space left on device" in err, err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # the earlier one, its record too

    from siggate.train.explain import foreign_files  # no record before (a user's own files, --overwrite): none after

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "mol0.svg").write_text("<svg>mine</svg>")
    failing.moved = 0
    monkeypatch.setattr(os, "replace", failing)
    rc, _, err = run_cli(["explain", "--checkpoint", str(run), "NCCN", "CCO", "CCCN", "--out", str(mine),
                          "--overwrite"], capsys)
    monkeypatch.undo()
    assert rc == 2 and sorted(p.name for p in mine.iterdir()) == ["mol0.svg"], err
    assert foreign_files(mine, ["nN"]) == ["mol0.svg"]  # still the user's: the next explain asks first


def test_explain_names_a_target_that_takes_its_own_columns_as_predict_does(tmp_path, capsys):
    """Targets named ``error`` and ``atom``: ``molecules.csv`` wrote two ``error`` columns (the
    prediction and the row's error) and ``atoms.csv`` two ``atom`` columns; each target is now
    ``<target>_pred`` in both files where one of them has that name already, ``siggate predict``'s rule."""
    run = _nitrogen_svr_run(tmp_path, capsys, ["error", "atom"])
    out = tmp_path / "explained"
    rc, _, err = run_cli(["explain", "--checkpoint", str(run), "NCCN", "C1CC", "--out", str(out)], capsys)
    assert rc == 1 and "2 rows, 1 explained, 1 failed" in err
    with open(out / "molecules.csv", newline="") as fh:
        header = next(csv.reader(fh))
    assert header == ["row", "smiles", "error_pred", "error_pred_baseline", "error_pred_atoms_sum", "atom_pred",
                      "atom_pred_baseline", "atom_pred_atoms_sum", "pictures", "error"]
    mols = _rows(out / "molecules.csv")
    predicted = _rows(_predict_csv(run, ["NCCN"], tmp_path / "p.csv", capsys))
    assert float(mols[0]["error_pred"]) == pytest.approx(float(predicted[0]["error_pred"]), rel=1e-5)  # predict names it so
    assert mols[0]["error"] == "" and mols[1]["error"].startswith("SMILES parse error")
    with open(out / "atoms.csv", newline="") as fh:
        assert next(csv.reader(fh)) == ["row", "atom", "element", "error_pred", "atom_pred"]  # as in molecules.csv
    atoms = _rows(out / "atoms.csv")
    assert [r["atom"] for r in atoms] == ["0", "1", "2", "3"]
    assert sum(float(r["error_pred"]) for r in atoms) == pytest.approx(float(mols[0]["error_pred_atoms_sum"]), abs=1e-5)


def test_drawn_names_are_ascii_cut_and_kept_apart():
    """RDKit draws a legend byte by byte: 'pKä' came out as 'pK' and two empty boxes, 'µM' as ' M',
    and a long name overran the colour bar's caption. The drawn names are ASCII, cut, and told
    apart by their target number where two would look alike."""
    from siggate.train.explain import drawn_names
    from siggate.train.plots import NAME_CHARS as DRAWN_CHARS

    assert drawn_names(["pKä", "IC50 µM", "Ki μM", "ΔG"]) == ["pKa", "IC50 uM", "Ki uM", "?G"]
    assert drawn_names(["pKa", "pKä", "x"]) == ["pKa (target 1)", "pKa (target 2)", "x"]
    long = "logD7.4 measured at pH 7.4 in octanol buffer"
    assert drawn_names([long]) == [long[:DRAWN_CHARS - 3] + "..."] and len(drawn_names([long])[0]) == DRAWN_CHARS
    assert drawn_names(["a" * DRAWN_CHARS]) == ["a" * DRAWN_CHARS]


def test_pictures_draw_ascii_legends_and_describe_the_names_as_they_are(tmp_path, capsys, monkeypatch):
    """The legend drawn names a target in ASCII and the colour bar's caption no longer repeats the
    name (a 30-character name ran past the picture's edges); the SVG's <desc> keeps the name."""
    import siggate.train.explain as explain

    run = _nitrogen_svr_run(tmp_path, capsys, ["pKä", "pKa"])
    drawn = []
    real = explain.draw_contributions

    def spy(mol, values, legend, caption=explain.CAPTION, **kw):
        drawn.append((legend, caption))
        return real(mol, values, legend, caption, **kw)

    monkeypatch.setattr(explain, "draw_contributions", spy)
    out = tmp_path / "explained"
    rc, _, err = run_cli(["explain", "--checkpoint", str(run), "NCCN", "--out", str(out)], capsys)
    assert rc == 0, err
    legends = sorted({legend.split(" = ")[0] for legend, _ in drawn})
    assert legends == ["pKa (target 1)", "pKa (target 2)"] and {c for _, c in drawn} == {explain.CAPTION}
    assert all(legend.isascii() for legend, _ in drawn) and len(drawn) == 4  # two targets, SVG and PNG
    descs = sorted(re.search(r"<desc>(.*?) = ", p.read_text()).group(1) for p in out.glob("*.svg"))
    assert descs == ["pKa", "pKä"]


def test_picture_names_differing_only_in_case_are_kept_apart():
    """Targets pKa and PKA gave mol0_pKa.png and mol0_PKA.png: one file on a case-insensitive file
    system (macOS, Windows), the second drawn over the first."""
    from siggate.train.explain import _tags

    assert _tags(["pKa", "PKA", "pka", "logS"]) == ["pKa", "PKA_1", "pka_2", "logS"]
    assert _tags(["IC50 (nM)", "IC50 [nM]"]) == ["IC50_nM_", "IC50_nM__1"]
