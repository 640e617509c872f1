"""Molecule-level features (``model.mol_features``): shapes per kind, the raw values against
RDKit called directly, train-only scaling, the model's readout, and a CLI round trip
(train -> checkpoint -> predict) whose predictions equal the model's own."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest
import torch
from rdkit import Chem
from rdkit.Chem import Descriptors, rdFingerprintGenerator

from recipe_flags import GNN_SCRATCH
from siggate.data import molfeatures as mf
from siggate.options import MOL_FEATURE_DIMS, MOL_FEATURES, mol_features_dim

SMILES = ["CCO", "c1ccccc1O", "CC(=O)Nc1ccc(O)cc1", "[Na+].[Cl-]"]


@pytest.mark.parametrize("kind, dim", [("none", 0), ("morgan_count", 2048), ("rdkit2d", 217),
                                       ("morgan_count+rdkit2d", 2265), ("rdkit2d+morgan_count", 2265)])
def test_shape_dtype_and_determinism_per_kind(kind, dim):
    x = mf.compute(SMILES, kind)
    assert x.shape == (len(SMILES), dim) and x.dtype == np.float32 and np.isfinite(x).all()
    assert mf.feature_dim(kind) == mol_features_dim(kind) == dim
    mols = [Chem.MolFromSmiles(s) for s in SMILES]
    assert np.array_equal(mf.compute(mols, kind), x)  # molecules and SMILES give the same rows
    assert np.array_equal(mf.compute(SMILES[::-1], kind), x[::-1])  # per molecule, not per batch


def test_recorded_dims_and_names():
    assert set(MOL_FEATURE_DIMS) == set(MOL_FEATURES)
    assert len(mf.RDKIT2D_NAMES) == MOL_FEATURE_DIMS["rdkit2d"] == 217
    assert list(mf.RDKIT2D_NAMES) == sorted(mf.RDKIT2D_NAMES) and len(set(mf.RDKIT2D_NAMES)) == 217


def test_values_equal_rdkit_called_directly():
    mol = Chem.MolFromSmiles("CC(=O)Nc1ccc(O)cc1")  # paracetamol
    gen = rdFingerprintGenerator.GetMorganGenerator(radius=2, fpSize=2048)
    counts = gen.GetSparseCountFingerprint(mol).GetNonzeroElements()
    ref = np.zeros(2048)
    for bit, c in counts.items():
        ref[bit % 2048] += c
    assert np.array_equal(mf.compute([mol], "morgan_count")[0], ref)
    row = dict(zip(mf.RDKIT2D_NAMES, mf.compute([mol], "rdkit2d")[0]))
    assert row["MolWt"] == pytest.approx(151.165, abs=1e-3)
    assert (row["NumHDonors"], row["NumHAcceptors"], row["RingCount"], row["HeavyAtomCount"]) == (2, 2, 1, 11)
    assert row["TPSA"] == pytest.approx(Descriptors.TPSA(mol), rel=1e-6)
    # combined kinds are the blocks concatenated in the order written
    both = mf.compute([mol], "rdkit2d+morgan_count")[0]
    assert np.array_equal(both[:217], mf.compute([mol], "rdkit2d")[0]) and np.array_equal(both[217:], ref)


def test_non_finite_and_huge_values_are_replaced_as_documented():
    c = mf.CLIP_AT
    got = mf._compress(np.array([np.nan, 5.0, -7.0, c, 2 * c, -2 * c, 1e30, np.inf]))
    want = [0.0, 5.0, -7.0, c, c * (1 + math.log(2)), -c * (1 + math.log(2)), c * (1 + math.log(1e26)),
            c * (1 + math.log(np.finfo(np.float64).max / c))]
    assert got == pytest.approx(want, rel=1e-12)
    big = Chem.MolFromSmiles("c1ccc2cc3ccccc3cc2c1" * 3)  # three anthracenes: Ipc ~1e10
    ipc = Descriptors.Ipc(big)
    assert ipc > 1e9
    col = mf.RDKIT2D_NAMES.index("Ipc")
    assert mf.compute([big], "rdkit2d")[0, col] == pytest.approx(c * (1 + math.log(ipc / c)), rel=1e-5)


def test_bad_kinds_and_smiles_are_named():
    with pytest.raises(ValueError, match="unknown molecule feature 'maccs'"):
        mf.compute(SMILES, "maccs")
    with pytest.raises(ValueError, match="repeat"):
        mf.feature_dim("rdkit2d+rdkit2d")
    with pytest.raises(ValueError, match="invalid SMILES 'C1CC'"):
        mf.compute(["C1CC"], "rdkit2d")


def test_scaler_uses_training_statistics_only(tmp_path):
    train = np.array([[1.0, 5.0, 0.0], [3.0, 5.0, 10.0]])
    val = np.array([[4.0, 7.0, 5.0]])
    s = mf.FeatureScaler.fit(train)
    # hand-computed: means (2, 5, 5), population stds (1, 0 -> 1, 5)
    assert s.mean.tolist() == [2.0, 5.0, 5.0] and s.std.tolist() == [1.0, 1.0, 5.0]
    assert s.transform(train).tolist() == [[-1.0, 0.0, -1.0], [1.0, 0.0, 1.0]]
    assert s.transform(val).tolist() == [[2.0, 2.0, 0.0]]
    x = mf.compute([Chem.MolToSmiles(Chem.MolFromSmiles(s)) for s in SMILES[:3]] + ["CCCCCCN", "OCC(O)CO"], "rdkit2d")
    t = mf.FeatureScaler.fit(x).transform(x).astype(np.float64)
    varying = x.std(axis=0) > 0
    assert np.abs(t.mean(axis=0)).max() < 1e-5
    assert np.allclose(t.std(axis=0)[varying], 1.0, atol=1e-5) and np.all(t[:, ~varying] == 0)
    torch.save(s.state_dict(), tmp_path / "s.pt")
    back = mf.FeatureScaler.from_state(torch.load(tmp_path / "s.pt", weights_only=True))
    assert np.array_equal(back.transform(val), s.transform(val))
    with pytest.raises(ValueError, match="3 columns got shape"):
        s.transform(np.zeros((1, 2)))


def test_cache_is_keyed_by_kind_and_needs_smiles(tmp_path):
    from torch_geometric.data import Data

    from siggate.data.chem import smiles_to_graph

    graphs = [smiles_to_graph(s) for s in SMILES]
    mf.cached_mol_features(graphs, "rdkit2d", "toy:train", tmp_path)
    assert graphs[1].mol_x.shape == (1, 217)
    assert np.array_equal(graphs[1].mol_x.numpy(), mf.compute([SMILES[1]], "rdkit2d"))
    mf.cached_mol_features(graphs, "morgan_count", "toy:train", tmp_path)
    assert graphs[1].mol_x.shape == (1, 2048)
    assert len(list((tmp_path / "molfeatures").glob("*.pt"))) == 2
    with pytest.raises(ValueError, match="carry none; set model.mol_features=none"):
        mf.cached_mol_features([Data(x=torch.zeros(2, 1, dtype=torch.long))], "rdkit2d", "zinc:train", tmp_path)


def test_config_validates_the_kind():
    from siggate.config import ConfigError, load_config

    base = ["data.csv=x.csv", "data.target_cols=[y]"]
    assert load_config("csv", base).model.mol_features == "none"
    assert load_config("csv", base + ["model.mol_features=morgan_count+rdkit2d"]).model.mol_features
    with pytest.raises(ConfigError, match=r"model.mol_features: 'rdkit' is not allowed\. Allowed values: none, "
                                          r"morgan_count, rdkit2d.*Did you mean 'rdkit2d'"):
        load_config("csv", base + ["model.mol_features=rdkit"])
    with pytest.raises(ConfigError, match="pattern predicts per node"):
        load_config("pattern", ["model.mol_features=rdkit2d"])


def _batch(mol_x=None):
    from torch_geometric.data import Batch

    from siggate.data.chem import smiles_to_graph

    graphs = [smiles_to_graph(s) for s in SMILES]
    if mol_x is not None:
        for g, row in zip(graphs, mol_x):
            g.mol_x = row.view(1, -1)
    return Batch.from_data_list(graphs)


def test_model_concatenates_scaled_features_to_the_pooled_embedding():
    """With the features' first-layer weights zero the model is the featureless one
    (the features only add columns to the head's input); otherwise the output depends on
    them exactly through ``(mol_x - mean) / std``."""
    from siggate.nn.model import SigGateGT

    kw = dict(num_tasks=2, dim=16, layers=1, heads=2, head_layers=2, attn_dropout=0.0)
    torch.manual_seed(0)
    plain = SigGateGT(**kw).eval()
    torch.manual_seed(0)
    same = SigGateGT(mol_features_dim=0, **kw).eval()
    assert plain.state_dict().keys() == same.state_dict().keys()
    assert all(torch.equal(a, b) for a, b in zip(plain.state_dict().values(), same.state_dict().values()))
    feat = SigGateGT(mol_features_dim=3, **kw).eval()
    state = dict(plain.state_dict())
    w = state["head.0.weight"]
    state["head.0.weight"] = torch.cat([w, torch.zeros(w.size(0), 3)], dim=1)
    state["mol_mean"], state["mol_std"] = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([2.0, 4.0, 8.0])
    feat.load_state_dict(state)
    mol_x = torch.randn(len(SMILES), 3)
    with torch.no_grad():
        # Not torch.equal: the first head layer is a 19-column product here and a 16-column one
        # in ``plain``; BLAS may block and accumulate the two in different orders (MKL on AMD
        # EPYC does), so they agree to float32 rounding of sums of ~16 terms of size ~1, not bit
        # for bit. 1e-5 is ~100 ulps at these magnitudes; a feature that reached the output
        # (randn inputs, unit-scale weights) would move it by ~0.1 or more.
        torch.testing.assert_close(feat(_batch(mol_x)), plain(_batch()), rtol=1e-5, atol=1e-5)
        feat.head[0].weight[:, 16:] = torch.randn(w.size(0), 3)
        g = feat(_batch(mol_x), return_details=True)[1]["graph_emb"]
        want = feat.head(torch.cat([g, (mol_x - state["mol_mean"]) / state["mol_std"]], dim=1))
        assert torch.allclose(feat(_batch(mol_x)), want, atol=1e-6)
    with pytest.raises(ValueError, match=r"molecule features mol_x \[4, 3\] per batch, got none"):
        feat(_batch())
    with pytest.raises(ValueError, match="0 at node level"):
        SigGateGT(mol_features_dim=3, level="node", **kw)


def test_held_out_features_are_clipped_and_constant_columns_ignored():
    """A column constant on the training rows gave a held-out molecule |z| up to 5,790 through
    untrained weights; it now enters the head as 0, and every other column is clipped to
    +-Z_CLIP standard deviations."""
    from siggate.nn.model import SigGateGT
    from siggate.options import Z_CLIP
    from siggate.train.modelprep import fit_mol_feature_scaling

    torch.manual_seed(0)
    model = SigGateGT(num_tasks=1, dim=16, layers=1, heads=2, head_layers=2, mol_features_dim=3).eval()
    train = _batch(torch.tensor([[1.0, 0.0, 10.0], [3.0, 0.0, 20.0], [5.0, 0.0, 30.0], [7.0, 0.0, 40.0]]))
    graphs = train.to_data_list()
    fit_mol_feature_scaling(model, graphs)
    assert model.mol_std[1] == float("inf") and torch.isfinite(model.mol_std[[0, 2]]).all()
    g = torch.zeros(4, 16)
    held_out = _batch(torch.tensor([[4.0, 5790.0, 25.0], [4.0, -3.0, 25.0], [1e6, 0.0, -1e6], [6.0, 7.0, 35.0]]))
    x = model.readout_input(g, held_out)[:, 16:]
    assert x[:, 1].tolist() == [0.0, 0.0, 0.0, 0.0]  # the constant column says nothing, whatever its value
    assert x[2, 0] == Z_CLIP and x[2, 2] == -Z_CLIP  # far outside the training range: clipped
    std = torch.tensor([1.0, 3.0, 5.0, 7.0]).std(correction=0)
    assert torch.allclose(x[3, [0, 2]], torch.stack([2.0 / std, 10.0 / (std * 5)]))  # (x - mean) / std inside
    same = _batch(torch.tensor([[4.0, 0.0, 25.0], [4.0, 0.0, 25.0], [1e6, 0.0, -1e6], [6.0, 0.0, 35.0]]))
    with torch.no_grad():  # the same operation on the same shapes: exactly the same predictions
        assert torch.equal(model(held_out), model(same))


def test_csv_round_trip_train_checkpoint_predict(tmp_path, capsys):
    """2 epochs with rdkit2d features through ``siggate train``; the checkpoint loads with
    ``weights_only`` and holds the training rows' statistics; ``siggate predict`` on the
    training SMILES gives the model's own predictions for the training graphs."""
    from siggate.train.dataprep import prepare_data
    from siggate.train.modelprep import load_trained
    from siggate.train.scoring import predict_graphs
    from test_predict import nci_smiles, run_cli

    smiles = nci_smiles(48)
    src = tmp_path / "mols.csv"
    with open(src, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["smiles", "y"])
        for i, s in enumerate(smiles):
            w.writerow([s, Chem.MolFromSmiles(s).GetNumAtoms() / 10 + (i % 3)])
    out = tmp_path / "run"
    tiny = ["model.layers=1", "model.dim=16", "model.heads=2", "model.pe=none", "train.batch_size=16",
            "train.warmup_epochs=0", "model.mol_features=rdkit2d"]
    rc, _, err = run_cli(["train", "--data", str(src), "--target-col", "y", "--epochs", "2", "--out", str(out),
                          "--no-progress", "--cache-dir", str(tmp_path / "cache"), *GNN_SCRATCH,
                          *[a for s in tiny for a in ("--set", s)]], capsys)
    assert rc == 0, err
    ckpt = torch.load(out / "best.pt", weights_only=True)
    assert ckpt["config"]["model"]["mol_features"] == "rdkit2d"
    model, _, cfg, info = load_trained(out / "best.pt")
    ds = prepare_data(cfg.data, cfg.model, cfg.train.seed, progress=False)
    train_smiles = [g.smiles for g in ds.train]
    raw = mf.compute(train_smiles, "rdkit2d")
    ref = mf.FeatureScaler.fit(raw)
    assert torch.allclose(ckpt["model"]["mol_mean"], torch.from_numpy(ref.mean).float())
    constant = torch.from_numpy(np.ptp(raw, axis=0) == 0)  # columns that carry nothing: std inf, scaled to 0
    assert 0 < int(constant.sum()) < 217 and torch.equal(torch.isinf(ckpt["model"]["mol_std"]), constant)
    assert torch.allclose(ckpt["model"]["mol_std"][~constant], torch.from_numpy(ref.std).float()[~constant])
    own = predict_graphs(model, ds.train, info, ckpt["target_mean"], ckpt["target_std"])[:, 0]
    dest = tmp_path / "pred.csv"
    rc, _, err = run_cli(["predict", "--checkpoint", str(out / "best.pt"), *train_smiles, "--output", str(dest)],
                         capsys)
    assert rc == 0, err
    with open(dest, newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["smiles"] for r in rows] == train_smiles and all(r["error"] == "" for r in rows)
    got = torch.tensor([float(r["y"]) for r in rows])
    assert torch.allclose(got, own, rtol=1e-5, atol=1e-5)
    assert own.std() > 0  # the predictions differ per molecule
