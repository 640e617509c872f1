"""NCI-5K loader (built once per session) and the dataset registry."""

from __future__ import annotations

import csv
import time

import pytest
import torch
from rdkit import Chem
from rdkit.Chem.Scaffolds import MurckoScaffold

from siggate.data.base import GraphDataset, InvalidRow, TaskInfo
from siggate.data.cache import cached
from siggate.data.catalog import DATASETS, get_dataset, list_datasets
from siggate.data.chem import penalized_logp
from siggate.data.nci5k import load_nci5k, nci5k_cache_path, nci5k_source
from siggate.data.registry import register_dataset

EXPECTED_INVALID = [2097, 2897, 3226, 3369, 4508, 4595, 4596, 4780]
EXPECTED_SIZES = {"train": 3992, "val": 499, "test": 500}


@pytest.fixture(scope="session")
def nci(tmp_path_factory):
    cache_dir = tmp_path_factory.mktemp("nci5k_cache")
    t0 = time.perf_counter()
    ds = load_nci5k(cache_dir=cache_dir)
    build_s = time.perf_counter() - t0
    hit = cached.last_hit
    print(f"\nnci5k build: {build_s:.1f}s, sizes {ds.sizes()}, invalid {len(ds.invalid)}")
    return ds, cache_dir, build_s, hit


@pytest.fixture(scope="session")
def lines():
    with open(nci5k_source(), encoding="utf-8") as fh:
        return fh.read().splitlines()


def test_source_file(lines):
    assert len(lines) == 4999
    assert all("\t" in ln for ln in lines)


def test_counts(nci):
    ds, _, build_s, hit = nci
    assert hit is False  # fresh tmp cache: built
    assert isinstance(ds, GraphDataset)
    n_valid = sum(ds.sizes().values())
    print(f"valid {n_valid}, invalid {len(ds.invalid)}, split {ds.sizes()}, build {build_s:.1f}s")
    assert n_valid == 4991
    assert len(ds.invalid) == 8
    assert ds.sizes() == EXPECTED_SIZES


def test_invalid_rows(nci, lines):
    ds, cache_dir, _, _ = nci
    assert all(isinstance(r, InvalidRow) for r in ds.invalid)
    assert [r.index for r in ds.invalid] == EXPECTED_INVALID
    for r in ds.invalid:
        assert r.smiles == lines[r.index].split("\t")[0]
        assert r.reason.startswith("Explicit valence for atom #"), r.reason
    by_idx = {r.index: r.reason for r in ds.invalid}
    assert by_idx[2897] == "Explicit valence for atom # 3 Al, 6, is greater than permitted"
    log = cache_dir / "nci5k" / "invalid.csv"
    with open(log, newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [int(r["index"]) for r in rows] == EXPECTED_INVALID
    assert [r["reason"] for r in rows] == [r.reason for r in ds.invalid]


def test_task_info(nci):
    info = nci[0].info
    assert info == TaskInfo(
        name="nci5k", task="regression", num_tasks=1, metric="mae", node_features="ogb",
        target_names=["penalized_logp"],
    )
    assert info.higher_is_better is False


def test_graph_contents(nci, lines):
    ds = nci[0]
    seen = set()
    for split in ("train", "val", "test"):
        for g in ds.splits[split]:
            assert g.x.dtype == torch.long and g.x.dim() == 2 and g.x.shape[1] == 9
            assert g.edge_index.dtype == torch.long and g.edge_index.shape[0] == 2
            assert g.edge_attr.dtype == torch.long and g.edge_attr.shape == (g.edge_index.shape[1], 3)
            assert g.y.dtype == torch.float32 and g.y.shape == (1, 1)
            assert g.smiles == lines[g.idx].split("\t")[0]
            seen.add(g.idx)
    assert seen == set(range(4999)) - set(EXPECTED_INVALID)
    for g in ds.train[:5] + ds.test[:5]:
        mol = Chem.MolFromSmiles(g.smiles)
        assert g.y.item() == pytest.approx(penalized_logp(mol), abs=1e-5)
        assert g.x.shape[0] == mol.GetNumAtoms()


def test_scaffold_split_disjoint(nci):
    ds = nci[0]
    scaf = {}
    for split in ("train", "val", "test"):
        scaf[split] = {
            MurckoScaffold.MurckoScaffoldSmiles(mol=Chem.MolFromSmiles(g.smiles), includeChirality=False)
            for g in ds.splits[split]
        }
    assert not (scaf["train"] & scaf["val"])
    assert not (scaf["train"] & scaf["test"])
    assert not (scaf["val"] & scaf["test"])
    # the acyclic molecules (scaffold "") form the largest group and sit in train
    assert "" in scaf["train"]


def test_cache_hit(nci):
    ds, cache_dir, build_s, _ = nci
    assert nci5k_cache_path(cache_dir).exists()
    t0 = time.perf_counter()
    again = load_nci5k(cache_dir=cache_dir)
    load_s = time.perf_counter() - t0
    print(f"nci5k cache hit: {load_s:.2f}s (build {build_s:.1f}s)")
    assert cached.last_hit is True
    assert again.sizes() == ds.sizes() and again.invalid == ds.invalid and again.info == ds.info
    for a, b in zip(ds.val, again.val):
        assert a.idx == b.idx and a.smiles == b.smiles
        assert torch.equal(a.x, b.x) and torch.equal(a.edge_index, b.edge_index) and torch.equal(a.y, b.y)


# ------------------------------------------------------------------- registry


def test_registry_lists_nci5k():
    assert "nci5k" in DATASETS
    entry = {d["name"]: d for d in list_datasets()}["nci5k"]
    assert entry["needs_root"] is False and entry["description"]
    assert set(entry) >= {"name", "description", "needs_root"}


def test_registry_get_dataset_uses_cache(nci):
    ds, cache_dir, _, _ = nci
    got = get_dataset("nci5k", cache_dir=cache_dir)
    assert cached.last_hit is True
    assert got.sizes() == ds.sizes()


def test_registry_default_dirs(monkeypatch, tmp_path):
    seen = {}

    @register_dataset("_probe_test", "probe", needs_root=True)
    def probe(root=None, cache_dir=None, **kw):
        seen.update(root=root, cache_dir=cache_dir, kw=kw)
        return "ok"

    try:
        monkeypatch.setenv("SIGGATE_CACHE", str(tmp_path / "c"))
        monkeypatch.setenv("SIGGATE_DATA", str(tmp_path / "d"))
        assert get_dataset("_probe_test", flag=3) == "ok"
        assert seen == {"root": tmp_path / "d", "cache_dir": tmp_path / "c", "kw": {"flag": 3}}
        get_dataset("_probe_test", root=tmp_path / "r", cache_dir=tmp_path / "cc")
        assert seen["root"] == tmp_path / "r" and seen["cache_dir"] == tmp_path / "cc"
        with pytest.raises(ValueError, match="already registered"):
            register_dataset("_probe_test", "other", needs_root=False)(lambda **kw: None)
    finally:
        DATASETS.pop("_probe_test", None)
        from siggate.data import registry

        registry.DATASET_META.pop("_probe_test", None)


def test_registry_unknown_name():
    with pytest.raises(ValueError) as err:
        get_dataset("nci5kk")
    msg = str(err.value)
    assert "unknown dataset 'nci5kk'" in msg
    assert "did you mean 'nci5k'" in msg
    for name in DATASETS:
        assert name in msg


def _largest_ring(smiles: str) -> int:
    mol = Chem.MolFromSmiles(smiles)
    return max((len(r) for r in mol.GetRingInfo().AtomRings()), default=0)


def test_default_split_is_balanced_and_why(nci, tmp_path_factory):
    """The OGB-order scaffold split leaves no ring > 6 atoms in train (the ring term of
    penalized logP is then never seen in training); the default balanced one does not."""
    ds, cache_dir, _, _ = nci
    plain = load_nci5k(cache_dir=cache_dir, split="scaffold")
    assert plain.sizes() == EXPECTED_SIZES
    assert len(plain.invalid) == 8
    big = {s: sum(_largest_ring(g.smiles) > 6 for g in plain.splits[s]) for s in ("train", "val", "test")}
    assert big == {"train": 0, "val": 14, "test": 15}
    big_bal = {s: sum(_largest_ring(g.smiles) > 6 for g in ds.splits[s]) for s in ("train", "val", "test")}
    assert sum(big_bal.values()) == 29 and big_bal["train"] > 0
    assert [g.idx for g in ds.test] != [g.idx for g in plain.test]
    assert nci5k_cache_path(cache_dir) != nci5k_cache_path(cache_dir, split="scaffold")
    assert nci5k_cache_path(cache_dir) == nci5k_cache_path(cache_dir, split="scaffold_balanced")
    with pytest.raises(ValueError, match="unknown split 'scafold'.*scaffold_balanced"):
        load_nci5k(cache_dir=cache_dir, split="scafold")


def test_a_random_split_keeps_a_molecule_in_one_split(tmp_path):
    """first_5K.smi repeats 88 molecules (one penalized logP each): the random split put 16 test
    molecules' copies in training. Their rows share a split now; the scaffold splits (which group
    them by scaffold) are as they were, and so is their cache entry."""
    from siggate.data.nci5k import _key_parts

    ds = load_nci5k(cache_dir=tmp_path, split="random")
    where: dict = {}
    for name, graphs in ds.splits.items():
        for g in graphs:
            where.setdefault(Chem.MolToSmiles(Chem.MolFromSmiles(g.smiles)), set()).add(name)
    repeated = sum(1 for g in sum(ds.splits.values(), []) if g.smiles) - len(where)
    assert repeated > 0 and all(len(s) == 1 for s in where.values())
    assert sum(ds.sizes().values()) == 4999 - len(EXPECTED_INVALID)  # every valid row of the file's 4999
    assert "molecules_together" in _key_parts(nci5k_source(), (0.8, 0.1, 0.1), "random")
    assert "molecules_together" not in _key_parts(nci5k_source(), (0.8, 0.1, 0.1), "scaffold_balanced")
