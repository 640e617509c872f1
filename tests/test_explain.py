"""``siggate explain``: integrated-gradient atom contributions (completeness, the attribution of
a synthetic additive target to the atoms that carry it), combinations by their weights, and the
command's CSVs and pictures with ``predict``'s per-row refusals."""

from __future__ import annotations

import csv
import re

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


@pytest.fixture(scope="module")
def nitrogen_model(tmp_path_factory):
    """A small GNN trained on y = number of nitrogen atoms + N(0, 0.05^2) noise (NCI molecules
    of at most 40 atoms: 180 train, 30 val, 60 test), 25 epochs."""
    from siggate.train.gnn_member import GNNMember

    smiles = [s for s in nci_smiles(500) if Chem.MolFromSmiles(s).GetNumAtoms() <= 40][:270]
    rng = np.random.default_rng(0)
    graphs = []
    for i, s in enumerate(smiles):
        g = smiles_to_graph(s)
        g.y = torch.tensor([[_nitrogens(s) + 0.05 * rng.standard_normal()]], dtype=torch.float32)
        g.idx = i
        graphs.append(g)
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
    for row in mols[:2]:
        values = [float(r["nN"]) for r in atoms if r["row"] == row["row"]]
        assert float(row["nN_atoms_sum"]) == pytest.approx(sum(values), abs=1e-4)
        assert row["pictures"] == f"mol{row['row']}"
        with Image.open(out / f"mol{row['row']}.png") as im:
            assert im.size == (460, 440) and len(im.convert("RGB").getcolors(1 << 16)) > 20
        svg = (out / f"mol{row['row']}.svg").read_text()
        desc = re.search(r"<desc>(.*)</desc>", svg).group(1)
        assert svg.startswith("<?xml") and desc.startswith(f"nN = {float(row['nN']):.4g}   baseline ")
        scale = max(abs(v) for v in values)
        assert desc.endswith(f"(red raises it, blue lowers it), from {-scale:+.6g} to {scale:+.6g}")
        top = max(values, key=abs)  # the largest contribution in full colour (the bar stops short of it)
        assert re.search(r"fill:#FF0000" if top > 0 else r"fill:#0000FF", svg, re.IGNORECASE)
    assert float(atoms[0]["nN"]) > float(atoms[1]["nN"])  # N before C in NCCN
    assert not (out / "mol2.png").exists()
    rc, _, err = run_cli(["explain", "--checkpoint", str(run), "--out", str(out)], capsys)
    assert rc == 2 and "give SMILES as arguments or --input FILE" in err
    rc, _, err = run_cli(["explain", "--checkpoint", str(run), "CCO", "--out", str(out), "--steps", "0"], capsys)
    assert rc == 2 and "--steps must be at least 1" in err
