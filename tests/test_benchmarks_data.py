"""Benchmark loaders: real data (exact counts, spot checks) and official-format fixtures.

Tests on the real data read ``default_data_root()`` (``$SIGGATE_DATA`` or
``../shared/data``).  If the data is missing they fail when ``CI=true`` and skip
otherwise.  The slow builds (ogbg-molhiv, Peptides-func: minutes on 2 cores) run
once per session into a cache under ``$SIGGATE_TEST_CACHE`` (default
``<tmp>/siggate-test-cache``) that later runs reuse.
"""

from __future__ import annotations

import ast
import hashlib
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from rdkit import Chem

import fixtures_data as fx
from siggate.data import ogb_mol, peptides, sources, zinc
from siggate.data.base import GraphDataset, default_data_root
from siggate.data.cache import cached
from siggate.data.verify import verify

IN_CI = os.environ.get("CI", "").strip().lower() == "true"


def need_real(*rel: str) -> Path:
    root = default_data_root()
    missing = [r for r in rel if root is None or not (Path(root) / r).exists()]
    if root is None or not Path(root).is_dir() or missing:
        what = ", ".join(missing or rel) or "the data root folder"
        msg = f"real benchmark data missing under {root} (set SIGGATE_DATA): {what}"
        if IN_CI:
            pytest.fail(msg)
        pytest.skip(msg)
    return Path(root)


@pytest.fixture(scope="session")
def real_cache() -> Path:
    env = os.environ.get("SIGGATE_TEST_CACHE")
    path = Path(env) if env else Path(tempfile.gettempdir()) / "siggate-test-cache"
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def zinc_ds(real_cache) -> GraphDataset:
    root = need_real("ZINC/subset/processed/train.pt", "ZINC/subset/processed/val.pt", "ZINC/subset/processed/test.pt")
    return zinc.zinc(root=root, cache_dir=real_cache, download=False)


@pytest.fixture(scope="session")
def molhiv_ds(real_cache) -> GraphDataset:
    root = need_real("ogbg_molhiv/mapping/mol.csv.gz", "ogbg_molhiv/split/scaffold/train.csv.gz")
    return ogb_mol.molhiv(root=root, cache_dir=real_cache, download=False)


@pytest.fixture(scope="session")
def pepfunc_ds(real_cache) -> GraphDataset:
    root = need_real("peptides-functional/raw/peptide_multi_class_dataset.csv.gz")
    return peptides.peptides_func(root=root, cache_dir=real_cache, download=False)


def no_network(monkeypatch):
    def fail(url, timeout=5.0):
        return False

    monkeypatch.setattr(sources, "network_ok", fail)


# ============================================================================ real data: ZINC


def test_zinc_real_counts(zinc_ds):
    assert zinc_ds.sizes() == {"train": 10000, "val": 1000, "test": 1000}
    info = zinc_ds.info
    assert (info.name, info.task, info.num_tasks, info.metric) == ("zinc", "regression", 1, "mae")
    assert (info.node_features, info.num_node_types, info.num_edge_types) == ("typed", 28, 4)
    y = torch.cat([g.y for g in zinc_ds.train])
    assert y.shape == (10000, 1)
    assert abs(y.mean().item() - 0.0153) < 1e-3
    assert abs(y.std().item() - 2.011) < 1e-2
    nodes = sum(g.num_nodes for g in zinc_ds.train)
    edges = sum(g.edge_index.shape[1] for g in zinc_ds.train)
    assert (nodes, edges) == (231664, 498558)  # MANIFEST totals for train
    types = set()
    for split in ("train", "val", "test"):
        for g in zinc_ds.splits[split]:
            assert g.x.dtype == torch.long and g.x.dim() == 2 and g.x.shape[1] == 1
            assert g.edge_attr.dtype == torch.long and g.edge_attr.shape == (g.edge_index.shape[1], 1)
            assert g.y.shape == (1, 1) and g.y.dtype == torch.float32
            types.update(g.x.view(-1).tolist())
            assert int(g.edge_attr.min()) >= 1 and int(g.edge_attr.max()) <= 3
    assert min(types) >= 0 and max(types) < 28


def test_zinc_real_matches_independent_csv(zinc_ds):
    """Atom/bond counts and y of every val/test graph against the JT-VAE SMILES exports
    (and the graph-derived train export), read independently."""
    root = need_real("ZINC/smiles/zinc12k_val_smiles.csv", "ZINC/smiles/zinc12k_test_smiles.csv",
                     "ZINC/smiles/zinc12k_train_smiles_from_graph.csv")
    for split, fname in (("val", "zinc12k_val_smiles.csv"), ("test", "zinc12k_test_smiles.csv")):
        df = pd.read_csv(root / "ZINC" / "smiles" / fname)
        graphs = zinc_ds.splits[split]
        assert len(df) == len(graphs)
        got_atoms = np.array([g.num_nodes for g in graphs])
        got_bonds = np.array([g.edge_index.shape[1] // 2 for g in graphs])
        got_y = np.array([g.y.item() for g in graphs])
        order = df["subset_idx"].to_numpy()
        assert np.array_equal(got_atoms[order], df["num_atoms"].to_numpy())
        assert np.array_equal(got_bonds[order], df["num_bonds"].to_numpy())
        assert np.allclose(got_y[order], df["y"].to_numpy(), atol=1e-4)
        for row in df.sample(5, random_state=0).itertuples():  # RDKit on the raw SMILES
            mol = Chem.MolFromSmiles(row.smiles)
            assert graphs[row.subset_idx].num_nodes == mol.GetNumAtoms()
    df = pd.read_csv(root / "ZINC" / "smiles" / "zinc12k_train_smiles_from_graph.csv")
    ys = np.array([g.y.item() for g in zinc_ds.train])
    atoms = np.array([g.num_nodes for g in zinc_ds.train])
    assert len(df) == len(zinc_ds.train) == 10000
    assert np.array_equal(atoms[df["subset_idx"].to_numpy()], df["num_atoms"].to_numpy())
    assert np.allclose(ys[df["subset_idx"].to_numpy()], df["y"].to_numpy(), atol=1e-4)


def test_zinc_real_cache_hit_and_read_only_root(real_cache):
    root = need_real("ZINC/subset/processed/train.pt")
    before = fx.snapshot(root / "ZINC")
    zinc.zinc(root=root, cache_dir=real_cache, download=False)
    ds = zinc.zinc(root=root, cache_dir=real_cache, download=False)
    assert cached.last_hit is True
    assert len(ds.train) == 10000
    assert fx.snapshot(root / "ZINC") == before


def test_zinc_real_pe(zinc_ds, tmp_path):
    from siggate.data.pe import cached_pe, lap_pe, rwse

    graphs = zinc_ds.val[:50]
    out = cached_pe([g.clone() for g in graphs], "zinc-val-50", tmp_path, rwse_steps=8, lap_dim=6, progress=False)
    for g, h in zip(graphs, out):
        assert h.rwse.shape == (g.num_nodes, 8)
        torch.testing.assert_close(h.rwse, rwse(g.edge_index, g.num_nodes, 8))
        torch.testing.assert_close(h.lap_val, lap_pe(g.edge_index, g.num_nodes, 6)[1])


def test_verify_zinc_real(real_cache):
    root = need_real("ZINC/subset/processed/train.pt")
    v = verify("zinc", root=root, cache_dir=real_cache, download=False)
    assert v["splits"] == {"train": 10000, "val": 1000, "test": 1000}
    assert v["num_graphs"] == 12000 and v["num_tasks"] == 1
    assert v["node_feature_dim"] == 1 and v["edge_feature_dim"] == 1
    assert v["nodes_per_graph"]["min"] == 9 and v["nodes_per_graph"]["max"] == 37
    assert abs(v["labels"]["train"]["per_task"][0]["mean"] - 0.0153) < 1e-3


# ============================================================================ real data: ogbg-molhiv

UNSANITIZABLE_HIV_ROWS = [137, 987, 12882, 18293, 30784, 30785, 35728]


def test_molhiv_real_counts(molhiv_ds):
    root = default_data_root()
    assert molhiv_ds.sizes() == {"train": 32901, "val": 4113, "test": 4113}
    assert molhiv_ds.invalid == []
    info = molhiv_ds.info
    assert (info.task, info.num_tasks, info.metric, info.node_features) == ("binary", 1, "rocauc", "ogb")
    graphs = [g for s in ("train", "val", "test") for g in molhiv_ds.splits[s]]
    assert len(graphs) == 41127
    assert sorted(int(g.idx) for g in graphs) == list(range(41127))
    assert sum(g.num_nodes for g in graphs) == 1049163
    assert sum(g.edge_index.shape[1] for g in graphs) == 2259376
    for split, fname in (("train", "train"), ("val", "valid"), ("test", "test")):
        want = pd.read_csv(root / "ogbg_molhiv" / "split" / "scaffold" / f"{fname}.csv.gz", header=None)[0].tolist()
        assert [int(g.idx) for g in molhiv_ds.splits[split]] == want


def test_molhiv_real_spot_checks(molhiv_ds):
    from ogb.utils import smiles2graph

    root = default_data_root()
    mol = pd.read_csv(root / "ogbg_molhiv" / "mapping" / "mol.csv.gz")
    nodes = pd.read_csv(root / "ogbg_molhiv" / "raw" / "num-node-list.csv.gz", header=None)[0]
    edges = pd.read_csv(root / "ogbg_molhiv" / "raw" / "num-edge-list.csv.gz", header=None)[0]
    by_idx = {int(g.idx): g for s in ("train", "val", "test") for g in molhiv_ds.splits[s]}
    rng = np.random.default_rng(0)
    rows = sorted(set(rng.choice(41127, 25, replace=False).tolist()) | {0, 41126})
    for i in rows:
        g = by_idx[i]
        smi = mol.smiles[i]
        rd = Chem.MolFromSmiles(smi)
        if rd is None:
            continue
        assert g.num_nodes == rd.GetNumAtoms()
        assert g.edge_index.shape[1] == 2 * rd.GetNumBonds()
        assert g.y.item() == float(mol.HIV_active[i])
        ref = smiles2graph(smi)  # identical OGB featurization
        assert torch.equal(g.x, torch.from_numpy(ref["node_feat"]).long())
        assert torch.equal(g.edge_index, torch.from_numpy(ref["edge_index"]).long())
        assert torch.equal(g.edge_attr, torch.from_numpy(ref["edge_feat"]).long())
    for i in UNSANITIZABLE_HIV_ROWS:  # kept through partial sanitization, official counts
        assert Chem.MolFromSmiles(mol.smiles[i]) is None
        g = by_idx[i]
        assert g.num_nodes == nodes[i] and g.edge_index.shape[1] == 2 * edges[i]
        assert g.y.item() == 0.0 and g.x.shape[1] == 9 and g.smiles == mol.smiles[i]
    assert sum(int(g.y.item()) for g in by_idx.values()) == int(mol.HIV_active.sum()) == 1443


# ============================================================================ real data: Peptides-func


def test_peptides_func_real_counts(pepfunc_ds):
    assert pepfunc_ds.sizes() == {"train": 10873, "val": 2331, "test": 2331}
    assert pepfunc_ds.invalid == []
    info = pepfunc_ds.info
    assert (info.task, info.num_tasks, info.metric) == ("multilabel", 10, "ap")
    graphs = [g for s in ("train", "val", "test") for g in pepfunc_ds.splits[s]]
    assert len(graphs) == 15535
    assert sorted(int(g.idx) for g in graphs) == list(range(15535))
    assert sum(g.num_nodes for g in graphs) == 2344859  # LRGB Table 1
    assert sum(g.edge_index.shape[1] for g in graphs) == 4773974
    y = torch.cat([g.y for g in graphs])
    assert y.shape == (15535, 10)
    rates = [0.0887, 0.0351, 0.064, 0.0624, 0.6273, 0.1981, 0.107, 0.1845, 0.0192, 0.2603]
    assert torch.allclose(y.mean(0), torch.tensor(rates), atol=6e-5)


def test_peptides_func_real_spot_checks(pepfunc_ds):
    import pickle

    root = default_data_root()
    df = pd.read_csv(root / "peptides-functional" / "raw" / "peptide_multi_class_dataset.csv.gz")
    with open(root / "peptides-functional" / "splits_random_stratified_peptide.pickle", "rb") as f:
        split = pickle.load(f)
    for key in ("train", "val", "test"):
        assert [int(g.idx) for g in pepfunc_ds.splits[key]] == [int(i) for i in split[key]]
    by_idx = {int(g.idx): g for s in ("train", "val", "test") for g in pepfunc_ds.splits[s]}
    for i in np.random.default_rng(1).choice(15535, 12, replace=False).tolist() + [0, 15534]:
        g = by_idx[i]
        rd = Chem.MolFromSmiles(df.smiles[i])
        assert g.num_nodes == rd.GetNumAtoms()
        assert g.edge_index.shape[1] == 2 * rd.GetNumBonds()
        assert g.y.view(-1).tolist() == [float(v) for v in ast.literal_eval(df.labels[i])]
        assert g.x.shape == (g.num_nodes, 9) and g.edge_attr.shape == (g.edge_index.shape[1], 3)


# ============================================================================ real data: missing sets


def test_molpcba_real_missing_is_clear_error(tmp_path, monkeypatch):
    """A data root without the full ogbg-molpcba, beside the real partial one where the real root
    has it (a root of its own: the test never skips where the full set is present)."""
    real = need_real()
    root = tmp_path / "root"
    root.mkdir()
    if (real / "ogbg_molpcba_partial").is_dir():
        (root / "ogbg_molpcba_partial").symlink_to(real / "ogbg_molpcba_partial")
    no_network(monkeypatch)
    partial = (root / "ogbg_molpcba_partial").is_dir()
    before = fx.snapshot(root)
    for download in (None, False):
        with pytest.raises(FileNotFoundError) as err:
            ogb_mol.molpcba(root=root, cache_dir=tmp_path, download=download)
        msg = str(err.value)
        assert str(root / "ogbg_molpcba" / "mapping" / "mol.csv.gz") in msg
        assert str(root / "ogbg_molpcba" / "split" / "scaffold" / "train.csv.gz") in msg
        assert "snap.stanford.edu/ogb/data/graphproppred/csv_mol_download/pcba.zip" in msg
        assert "ogb" in msg
        assert ("ogbg_molpcba_partial" in msg) == partial
    assert fx.snapshot(root) == before
    assert not (root / "ogbg_molpcba").exists()


def test_peptides_struct_real_missing_is_clear_error(tmp_path, monkeypatch):
    """A data root with the real Peptides-func but no Peptides-struct (a root of its own: the test
    never skips where Peptides-struct is present)."""
    real = need_real("peptides-functional")
    root = tmp_path / "root"
    root.mkdir()
    (root / "peptides-functional").symlink_to(real / "peptides-functional")
    no_network(monkeypatch)
    with pytest.raises(FileNotFoundError) as err:
        peptides.peptides_struct(root=root, cache_dir=tmp_path)
    msg = str(err.value)
    assert str(root / "peptides-structural" / "raw" / "peptide_structure_normalized_dataset.csv.gz") in msg
    assert str(root / "peptides-structural" / "splits_random_stratified_peptide_structure.pickle") in msg
    assert "dropbox.com" in msg and "LRGB" in msg


# ============================================================================ fixtures: ogbg-molpcba


def test_molpcba_fixture(tmp_path):
    root = tmp_path / "data"
    src = fx.make_molpcba(root, n=16)
    ds = ogb_mol.molpcba(root=root, cache_dir=tmp_path / "cache", download=False, progress=False)
    assert ds.sizes() == {k: len(v) for k, v in src["split"].items()}
    assert ds.info.task == "multilabel" and ds.info.num_tasks == 128 and ds.info.metric == "ap"
    assert ds.info.target_names == src["task_names"]
    assert ds.invalid == []
    for split in ("train", "val", "test"):
        assert [g.idx for g in ds.splits[split]] == list(src["split"][split])
        for g in ds.splits[split]:
            want = torch.tensor(src["labels"][g.idx], dtype=torch.float32).view(1, 128)
            assert g.y.shape == (1, 128)
            torch.testing.assert_close(g.y, want, equal_nan=True)
            assert g.num_nodes == src["counts"][g.idx][0]
            assert g.smiles == src["smiles"][g.idx]
    assert torch.isnan(torch.cat([g.y for g in ds.train])).any()


def test_molpcba_fixture_column_order_and_no_raw(tmp_path):
    root = tmp_path / "data"
    fx.make_molpcba(root, n=8, raw=False, label_first=False)
    ds = ogb_mol.molpcba(root=root, cache_dir=tmp_path / "cache", download=False, progress=False)
    assert sum(ds.sizes().values()) == 8 and ds.info.num_tasks == 128


def test_ogb_count_mismatch_raises(tmp_path):
    root = tmp_path / "data"
    src = fx.make_molpcba(root, n=10)
    counts = [a for a, _ in src["counts"]]
    counts[3] += 1
    fx.write_index_csv_gz(root / "ogbg_molpcba" / "raw" / "num-node-list.csv.gz", counts)
    with pytest.raises(ValueError, match="row 3"):
        ogb_mol.molpcba(root=root, cache_dir=tmp_path / "cache", download=False, progress=False)


def test_ogb_label_mismatch_raises(tmp_path):
    root = tmp_path / "data"
    src = fx.make_molhiv(root, smiles=fx.SMILES[:10])
    labels = src["labels"].copy()
    labels[5, 0] = 1 - labels[5, 0]
    fx.write_csv_gz(root / "ogbg_molhiv" / "raw" / "graph-label.csv.gz", pd.DataFrame(labels), header=False)
    with pytest.raises(ValueError, match="row 5"):
        ogb_mol.molhiv(root=root, cache_dir=tmp_path / "cache", download=False, progress=False)


def test_molhiv_fixture_unsanitizable_and_invalid(tmp_path):
    root = tmp_path / "data"
    smiles = fx.SMILES[:8] + [fx.UNSANITIZABLE, fx.UNPARSABLE]
    fx.make_molhiv(root, smiles=smiles, split={"train": range(0, 6), "val": [6, 7], "test": [8, 9]})
    ds = ogb_mol.molhiv(root=root, cache_dir=tmp_path / "cache", download=False, progress=False)
    assert [g.idx for g in ds.test] == [8]  # unsanitizable kept, unparsable dropped
    assert ds.test[0].num_nodes == 6
    assert len(ds.invalid) == 1 and ds.invalid[0].index == 9 and ds.invalid[0].smiles == fx.UNPARSABLE
    assert "parse" in ds.invalid[0].reason.lower()
    # on a cache hit the invalid rows are reported the same way
    ds2 = ogb_mol.molhiv(root=root, cache_dir=tmp_path / "cache", download=False, progress=False)
    assert cached.last_hit is True
    assert [(r.index, r.reason) for r in ds2.invalid] == [(r.index, r.reason) for r in ds.invalid]
    strict = ogb_mol.molhiv(
        root=root, cache_dir=tmp_path / "cache", download=False, progress=False, allow_unsanitized=False
    )
    assert sorted(r.index for r in strict.invalid) == [8, 9]


def test_every_molecule_loader_takes_the_same_options_and_names_unknown_ones(tmp_path, monkeypatch):
    """One set of keyword options (LoadOptions) for every benchmark molecule loader; a typo
    is named in a warning that points at the caller's line, and the load still happens.
    Progress bars default to on only when stderr is a terminal (none in a piped log)."""
    import io
    import sys

    from siggate.data.sources import LoadOptions

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    root = tmp_path / "data"
    fx.make_molhiv(root, smiles=fx.SMILES[:10])
    with pytest.warns(UserWarning, match=r"molhiv: ignoring unknown options \['rwse_step'\]") as rec:
        ds = ogb_mol.molhiv(root=root, cache_dir=tmp_path / "cache", download=False, progress=False, rwse_step=4)
    assert rec[0].filename == __file__ and len(ds.train) + len(ds.val) + len(ds.test) == 10
    monkeypatch.setattr(sys, "stderr", Terminal())
    opts = LoadOptions.take("x", {"download": False, "lap_dim": 3})
    assert (opts.download, opts.progress, opts.allow_unsanitized, opts.rwse_steps, opts.lap_dim) == (False, True, True, 0, 3)
    monkeypatch.setattr(sys, "stderr", io.StringIO())  # a pipe
    assert LoadOptions.take("x", {}).progress is False and LoadOptions.take("x", {"progress": True}).progress is True


# ============================================================================ fixtures: caching, read-only root


def test_cache_hit_does_not_rebuild_and_root_untouched(tmp_path, monkeypatch):
    root = tmp_path / "data"
    fx.make_molhiv(root)
    before = fx.snapshot(root)
    os.chmod(root / "ogbg_molhiv", 0o555)
    try:
        first = ogb_mol.molhiv(root=root, cache_dir=tmp_path / "cache", download=False, progress=False)
        assert cached.last_hit is False

        def boom(*a, **k):
            raise AssertionError("rebuilt despite a cache hit")

        monkeypatch.setattr(ogb_mol, "featurize", boom)
        second = ogb_mol.molhiv(root=root, cache_dir=tmp_path / "cache", download=False, progress=False)
        assert cached.last_hit is True
    finally:
        os.chmod(root / "ogbg_molhiv", 0o755)
    assert fx.snapshot(root) == before
    for a, b in zip(first.train, second.train):
        assert torch.equal(a.x, b.x) and torch.equal(a.edge_index, b.edge_index) and torch.equal(a.y, b.y)
        assert a.idx == b.idx and a.smiles == b.smiles


def test_changed_source_file_rebuilds(tmp_path):
    root = tmp_path / "data"
    fx.make_molhiv(root, seed=0)
    a = ogb_mol.molhiv(root=root, cache_dir=tmp_path / "cache", download=False, progress=False)
    src = fx.make_molhiv(root, seed=1)  # new labels -> new fingerprint
    b = ogb_mol.molhiv(root=root, cache_dir=tmp_path / "cache", download=False, progress=False)
    assert cached.last_hit is False
    got = {g.idx: g.y.item() for s in ("train", "val", "test") for g in b.splits[s]}
    assert got == {i: float(src["labels"][i, 0]) for i in range(len(src["smiles"]))}
    assert a.train[0].y is not b.train[0].y


def test_pe_options(tmp_path):
    root = tmp_path / "data"
    fx.make_zinc(root)
    ds = zinc.zinc(root=root, cache_dir=tmp_path / "cache", download=False, rwse_steps=4, lap_dim=3, progress=False)
    for g in ds.train + ds.val + ds.test:
        assert g.rwse.shape == (g.num_nodes, 4) and g.lap_vec.shape == (g.num_nodes, 3)
    ds2 = zinc.zinc(root=root, cache_dir=tmp_path / "cache", download=False, rwse_steps=4, lap_dim=3, progress=False)
    assert cached.last_hit is True  # the PE cache
    torch.testing.assert_close(ds.val[1].rwse, ds2.val[1].rwse)


def test_unknown_option_warns(tmp_path):
    root = tmp_path / "data"
    fx.make_zinc(root)
    with pytest.warns(UserWarning, match="bogus"):
        zinc.zinc(root=root, cache_dir=tmp_path / "cache", download=False, bogus=1)


# ============================================================================ fixtures: ZINC


def test_zinc_fixture_both_pyg_formats(tmp_path):
    root = tmp_path / "data"
    src = fx.make_zinc(root, sizes=(9, 3, 4), old_format=("val",))  # train, test: new 3-tuple
    ds = zinc.zinc(root=root, cache_dir=tmp_path / "cache", download=False, progress=False)
    assert ds.sizes() == {"train": 9, "val": 3, "test": 4}
    for split in ("train", "val", "test"):
        for i, (g, ref) in enumerate(zip(ds.splits[split], src[split])):
            assert g.idx == i
            assert torch.equal(g.x, ref.x) and g.x.shape[1] == 1
            assert torch.equal(g.edge_index, ref.edge_index)
            assert torch.equal(g.edge_attr, ref.edge_attr.view(-1, 1))
            assert g.y.shape == (1, 1) and g.y.item() == pytest.approx(ref.y.item())


def test_zinc_missing_files_message(tmp_path, monkeypatch):
    no_network(monkeypatch)
    with pytest.raises(FileNotFoundError) as err:
        zinc.zinc(root=tmp_path / "empty", cache_dir=tmp_path / "cache")
    msg = str(err.value)
    for split in ("train", "val", "test"):
        assert str(tmp_path / "empty" / "ZINC" / "subset" / "processed" / f"{split}.pt") in msg
    assert "torch_geometric.datasets.ZINC" in msg


def test_no_root_message(tmp_path, monkeypatch):
    no_network(monkeypatch)
    monkeypatch.setattr(sources, "default_data_root", lambda: None)
    with pytest.raises(FileNotFoundError, match="SIGGATE_DATA"):
        peptides.peptides_func(cache_dir=tmp_path / "cache")


# ============================================================================ fixtures: Peptides


def test_peptides_func_fixture(tmp_path):
    root = tmp_path / "data"
    src = fx.make_peptides_func(root)
    ds = peptides.peptides_func(root=root, cache_dir=tmp_path / "cache", download=False, progress=False)
    assert ds.info.num_tasks == 10 and ds.info.task == "multilabel"
    assert ds.sizes() == {k: len(v) for k, v in src["split"].items()}
    for split in ("train", "val", "test"):
        for g in ds.splits[split]:
            assert g.y.shape == (1, 10)
            assert g.y.view(-1).tolist() == src["labels"][g.idx].tolist()
            assert g.num_nodes == fx.atom_bond_counts(src["smiles"][g.idx])[0]


def test_peptides_struct_fixture_normalized(tmp_path):
    root = tmp_path / "data"
    src = fx.make_peptides_struct(root)
    ds = peptides.peptides_struct(root=root, cache_dir=tmp_path / "cache", download=False, progress=False)
    info = ds.info
    assert (info.task, info.num_tasks, info.metric) == ("regression", 11, "mae")
    assert info.target_names == fx.PEPTIDES_STRUCT_TARGETS
    for split in ("train", "val", "test"):
        for g in ds.splits[split]:
            want = torch.tensor(src["standardized"][g.idx], dtype=torch.float32).view(1, 11)
            torch.testing.assert_close(g.y, want)
    y = torch.cat([g.y for s in ("train", "val", "test") for g in ds.splits[s]]).double()
    assert torch.allclose(y.mean(0), torch.zeros(11, dtype=torch.float64), atol=1e-6)
    assert torch.allclose(y.std(0), torch.ones(11, dtype=torch.float64), atol=1e-6)


def test_peptides_struct_unnormalized_is_standardized_like_lrgb(tmp_path):
    norm = fx.make_peptides_struct(tmp_path / "a", normalized=True)
    fx.make_peptides_struct(tmp_path / "b", normalized=False)
    a = peptides.peptides_struct(root=tmp_path / "a", cache_dir=tmp_path / "cache", download=False, progress=False)
    b = peptides.peptides_struct(root=tmp_path / "b", cache_dir=tmp_path / "cache", download=False, progress=False)
    for split in ("train", "val", "test"):
        for ga, gb in zip(a.splits[split], b.splits[split]):
            torch.testing.assert_close(ga.y, gb.y, atol=1e-5, rtol=0)
    np.testing.assert_allclose(peptides.standardize_targets(norm["raw"]), norm["standardized"], atol=1e-12)


def test_peptides_struct_not_normalized_raises(tmp_path):
    root = tmp_path / "data"
    fx.make_peptides_struct(root, break_normalization=True)
    with pytest.raises(ValueError, match="not standardized"):
        peptides.peptides_struct(root=root, cache_dir=tmp_path / "cache", download=False, progress=False)


def test_peptides_struct_uses_functional_split_with_official_md5(tmp_path, monkeypatch):
    root = tmp_path / "data"
    src = fx.make_peptides_struct(root, write_split=False)
    split = {"train": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9], "val": [10, 11, 12], "test": [13, 14, 15]}
    fx.write_split_pickle(root / "peptides-functional" / "splits_random_stratified_peptide.pickle", split)
    no_network(monkeypatch)
    with pytest.raises(FileNotFoundError):  # MD5 is not the official one
        peptides.peptides_struct(root=root, cache_dir=tmp_path / "cache", progress=False)
    md5 = sources.md5(root / "peptides-functional" / "splits_random_stratified_peptide.pickle")
    monkeypatch.setattr(peptides, "_PEP_SPLIT_MD5", md5)
    ds = peptides.peptides_struct(root=root, cache_dir=tmp_path / "cache", progress=False)
    assert ds.sizes() == {"train": 10, "val": 3, "test": 3}
    assert len(src["smiles"]) == 16


def test_download_branch_uses_cache_dir(tmp_path, monkeypatch):
    """With the network 'up', files are fetched into <cache>/downloads, never into the root."""
    staged = tmp_path / "staged"
    fx.make_peptides_func(staged)
    calls = []

    def fake_fetch_factory(folder, *a, **k):
        def fetch(dl_root):
            calls.append(dl_root)
            shutil.copytree(staged / folder, dl_root / folder)

        return fetch

    monkeypatch.setattr(peptides, "_fetch_peptides", fake_fetch_factory)
    monkeypatch.setattr(sources, "network_ok", lambda url, timeout=5.0: True)
    root = tmp_path / "root"
    root.mkdir()
    ds = peptides.peptides_func(root=root, cache_dir=tmp_path / "cache", progress=False)
    assert calls == [tmp_path / "cache" / "downloads"]
    assert sum(ds.sizes().values()) == len(fx.SMILES)
    assert list(root.iterdir()) == []
    no_network(monkeypatch)  # second time: the earlier download is reused offline
    ds = peptides.peptides_func(root=root, cache_dir=tmp_path / "cache", progress=False)
    assert len(calls) == 1 and sum(ds.sizes().values()) == len(fx.SMILES)


def test_offline_env_disables_network(monkeypatch):
    """SIGGATE_OFFLINE=1 answers "no network" without asking; unset, the same answering host counts.
    (A host that cannot answer would say "no network" either way.)"""
    import urllib.request

    asked = []

    class _Answer:
        def close(self):
            pass

    monkeypatch.setattr(urllib.request, "urlopen", lambda request, timeout: asked.append(request.full_url) or _Answer())
    monkeypatch.setenv("SIGGATE_OFFLINE", "1")
    assert sources.network_ok("http://example.org/x") is False and asked == []
    monkeypatch.delenv("SIGGATE_OFFLINE")
    assert sources.network_ok("http://example.org/x") is True and asked == ["http://example.org/x"]


# ============================================================================ verify / registry


def test_verify_fixture(tmp_path, monkeypatch):
    root = tmp_path / "data"
    fx.make_molpcba(root, n=12)
    v = verify("molpcba", root=root, cache_dir=tmp_path / "cache", download=False, progress=False)
    assert v["num_graphs"] == 12 and v["num_tasks"] == 128
    assert v["node_feature_dim"] == 9 and v["edge_feature_dim"] == 3
    total = sum(fx.atom_bond_counts(s)[0] for s in fx.SMILES[:12])
    assert v["total_nodes"] == total
    assert 0.2 < v["labels"]["train"]["missing_fraction"] < 0.6
    assert len(v["labels"]["train"]["positive_rate"]) == 128
    with pytest.raises(KeyError, match=r"unknown dataset 'nope'; known: \['cluster', 'molhiv'"):
        verify("nope")


def test_loaders_are_registered():
    from siggate.data import catalog

    names = {"zinc", "molhiv", "molpcba", "peptides-func", "peptides-struct"}
    assert names <= set(catalog.DATASETS)  # one registry: no second table of loaders
    known = {d["name"] for d in catalog.list_datasets()}
    assert names <= known


class _Payload:
    """A pickled object that would create the folder ``marker`` when unpickled."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.makedirs, (str(self.marker),)


def test_a_crafted_pickle_under_a_data_root_is_refused_unread(tmp_path):
    """`siggate evaluate --checkpoint RUN` rebuilds the run's dataset from the data root the run
    records, so a run folder received from someone else chose which files were read: LRGB's split
    pickle was read with pickle.load and PyG's processed ZINC files with PyG's fs.torch_load (which
    falls back to unpickling anything), and a crafted file ran code. Each is now read by an
    unpickler that finds only what the real files hold (the real files' loads are the tests above)."""
    from siggate.data.base import DataError

    marker = tmp_path / "ran"
    split = tmp_path / "splits_random_stratified_peptide.pickle"
    import pickle

    split.write_bytes(pickle.dumps({"train": _Payload(marker), "val": [0], "test": [1]}))
    with pytest.raises(DataError, match=r"it names (os|posix)\.makedirs, which an LRGB split file does not hold"):
        peptides._load_split_pickle(split, "peptides-func")
    processed = tmp_path / "train.pt"
    torch.save((_Payload(marker), {}, None), processed)
    with pytest.raises(DataError, match=r"not a PyG processed ZINC file: it names (os|posix)\.makedirs"):
        zinc._read_pyg_processed(processed)
    assert not marker.exists()
    # what the real files hold still loads: a dict of numpy arrays; PyG's (dict, slices, cls) layout
    split.write_bytes(pickle.dumps({k: np.arange(3, dtype=np.int64) for k in ("train", "val", "test")}))
    assert {k: v.tolist() for k, v in peptides._load_split_pickle(split, "peptides-func").items()} == {
        k: [0, 1, 2] for k in ("train", "val", "test")}
    split.write_bytes(pickle.dumps([1, 2]))
    with pytest.raises(DataError, match="is not a dict of train/val/test index arrays"):
        peptides._load_split_pickle(split, "peptides-func")


def test_pretraining_drops_every_benchmarks_test_molecules(tmp_path, monkeypatch):
    """The corpus of ``siggate pretrain`` (``build_corpus`` as the CLI calls it: no ``test_sets``)
    drops the test molecules of every benchmark: each reader returns its split's SMILES exactly
    (read here with pandas and the NCI-5K loader), and a corpus that holds some of them, written in
    other SMILES, keeps none. Only reader counts were checked before: reading ``val`` for NCI-5K's
    test molecules, or a default of no test sets, passed every test. MoleculeACE's reader (every
    target's test split, the reserved ones included) is stood in for here; its exclusion is the
    same code."""
    root = need_real("ZINC/smiles/zinc12k_test_smiles.csv", "ogbg_molhiv/split/scaffold/test.csv.gz",
                     "ogbg_molhiv/mapping/mol.csv.gz")
    from siggate.data import corpus
    from siggate.data.nci5k import load_nci5k
    from siggate.options import SPLITS
    from siggate.train.pretrain import build_corpus

    zinc_test = pd.read_csv(root / "ZINC/smiles/zinc12k_test_smiles.csv")["smiles"].tolist()
    hiv_all = pd.read_csv(root / "ogbg_molhiv/mapping/mol.csv.gz")["smiles"].tolist()
    hiv_test = [hiv_all[i] for i in pd.read_csv(root / "ogbg_molhiv/split/scaffold/test.csv.gz", header=None)[0]]
    nci_test = sorted({g.smiles for s in SPLITS for g in load_nci5k(split=s).splits["test"]})
    assert (len(zinc_test), len(hiv_test)) == (1000, 4113)
    assert corpus.TEST_SETS["zinc"](root) == zinc_test and corpus.TEST_SETS["molhiv"](root) == hiv_test
    assert corpus.TEST_SETS["nci5k"](root) == nci_test
    ace = ["CC(=O)Nc1ccc(O)cc1"]
    monkeypatch.setitem(corpus.TEST_SETS, "moleculeace", lambda _root: ace)

    def key(smiles: str) -> str | None:  # RDKit's standard InChIKey; None where RDKit reads no molecule
        mol = Chem.MolFromSmiles(smiles)
        return (Chem.MolToInchiKey(mol) or None) if mol is not None else None

    def keys(smiles: list[str]) -> set:
        return {k for k in map(key, smiles) if k}

    def other_spelling(smiles: str) -> str:
        mol = Chem.MolFromSmiles(smiles)
        return Chem.MolToSmiles(mol, rootedAtAtom=mol.GetNumAtoms() - 1, canonical=False)

    planted = [zinc_test[0], hiv_test[0], nci_test[0], ace[0]]
    free = ["CCCCCCCCCCCCCCCCCCCCO", "CCCCCCCCCCCCCCCCCCCCN", "CCCCCCCCCCCCCCCCCCCCCl", "CCCCCCCCCCCCCCCCCCCCBr",
            "CCCCCCCCCCCCCCCCCCCCF", "CCCCCCCCCCCCCCCCCCCCS", "OCCCCCCCCCCCCCCCCCCCO", "NCCCCCCCCCCCCCCCCCCCN",
            "ClCCCCCCCCCCCCCCCCCCCl", "BrCCCCCCCCCCCCCCCCCCBr", "CCCCCCCCCCCCCCCCCCC(C)O", "CCCCCCCCCCCCCCCCCC(C)(C)O"]
    source = tmp_path / "corpus.smi"
    source.write_text("\n".join([*map(other_spelling, planted), *free]) + "\n")
    assert not keys(free) & keys([*zinc_test, *hiv_test, *nci_test, *ace])
    meta = build_corpus(source, tmp_path / "c", molecules=1000, seed=0, data_root=root, progress=False)
    pcba = meta["test_sets"].pop("molpcba")  # the shared data's molpcba is partial: no SMILES, skipped and named
    assert "ogbg_molpcba" in pcba["skipped"] and "test.csv.gz" in pcba["skipped"]
    digest = {k: v.pop("sha256") for k, v in meta["test_sets"].items()}  # (of the sorted InChIKeys)
    assert meta["test_sets"] == {"zinc": {"molecules": 1000, "inchikeys": len(keys(zinc_test))},
                                 "molhiv": {"molecules": 4113, "inchikeys": len(keys(hiv_test))},
                                 "nci5k": {"molecules": len(nci_test), "inchikeys": len(keys(nci_test))},
                                 "moleculeace": {"molecules": 1, "inchikeys": 1}}
    assert digest["zinc"] == hashlib.sha256("\n".join(sorted(keys(zinc_test))).encode()).hexdigest()
    assert meta["in_test_set"] == 4 and meta["kept"] == len(free)
    kept = pd.read_csv(tmp_path / "c" / "corpus.csv")["smiles"]
    assert len(kept) == len(free) and keys(list(kept)) == keys(free)
