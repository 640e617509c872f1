"""siggate.data.cache: keys, atomic writes, graph storage, the cached() helper."""

from __future__ import annotations

import hashlib
import multiprocessing as mp
import os
import time
from pathlib import Path

import pytest
import torch
from torch_geometric.data import Data

import siggate.data.cache as cache_mod
from siggate.data.base import GraphDataset, InvalidRow, TaskInfo
from siggate.data.cache import (
    atomic_torch_save,
    atomic_write_bytes,
    cache_key,
    cached,
    fingerprint_file,
    load_dataset,
    load_graphs,
    save_dataset,
    save_graphs,
)
from siggate.data.chem import smiles_to_graph


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


# ---------------------------------------------------------------------- keys


def test_fingerprint_file(tmp_path):
    p = tmp_path / "f.bin"
    data = os.urandom(3_000_000)  # spans several read chunks
    p.write_bytes(data)
    assert fingerprint_file(p) == hashlib.sha256(data).hexdigest()
    assert fingerprint_file(str(p)) == hashlib.sha256(data).hexdigest()


def test_cache_key(monkeypatch):
    a = cache_key({"x": 1, "y": [1, 2], "p": Path("/a/b")})
    b = cache_key({"p": "/a/b", "y": [1, 2], "x": 1})
    assert a == b and len(a) == 16 and int(a, 16) >= 0
    assert cache_key({"x": 2, "y": [1, 2], "p": "/a/b"}) != a
    monkeypatch.setattr(cache_mod, "FEATURIZATION_VERSION", cache_mod.FEATURIZATION_VERSION + 1)
    assert cache_key({"x": 1, "y": [1, 2], "p": "/a/b"}) != a
    with pytest.raises(TypeError):
        cache_key({"obj": object()})


def test_featurization_version_is_int():
    assert isinstance(cache_mod.FEATURIZATION_VERSION, int)


# ------------------------------------------------------------- atomic writes


def test_atomic_write_bytes(tmp_path):
    p = tmp_path / "sub" / "a.bin"
    atomic_write_bytes(p, b"hello")
    assert p.read_bytes() == b"hello"
    atomic_write_bytes(p, b"world")
    assert p.read_bytes() == b"world"
    with pytest.raises(TypeError):
        atomic_write_bytes(p, "not bytes")  # type: ignore[arg-type]
    assert p.read_bytes() == b"world"
    assert _leftovers(p.parent) == []
    assert (p.stat().st_mode & 0o777) == (0o666 & ~_umask())


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


def test_atomic_torch_save_keeps_old_file_on_failure(tmp_path):
    p = tmp_path / "obj.pt"
    atomic_torch_save({"a": torch.arange(3)}, p)
    before = p.read_bytes()
    with pytest.raises(Exception):
        atomic_torch_save({"a": torch.arange(5), "f": lambda x: x}, p)  # lambdas cannot be pickled
    assert p.read_bytes() == before
    assert torch.equal(torch.load(p, weights_only=True)["a"], torch.arange(3))
    assert _leftovers(tmp_path) == []


def test_atomic_torch_save_keeps_old_file_when_replace_fails(tmp_path, monkeypatch):
    p = tmp_path / "obj.pt"
    atomic_torch_save([1, 2, 3], p)
    before = p.read_bytes()

    def boom(*a, **k):
        raise OSError("disk on fire")

    monkeypatch.setattr(cache_mod.os, "replace", boom)
    with pytest.raises(OSError, match="disk on fire"):
        atomic_torch_save([4, 5, 6], p)
    monkeypatch.undo()
    assert p.read_bytes() == before
    assert _leftovers(tmp_path) == []


# ------------------------------------------------------------- graph storage


def _graphs(n: int = 6) -> list[Data]:
    smiles = ["CCO", "c1ccccc1O", "[Na+].[Cl-]", "C", "CC(=O)Nc1ccc(O)cc1", "F/C=C/F"]
    out = []
    for i in range(n):
        g = smiles_to_graph(smiles[i % len(smiles)])
        k = g.num_nodes
        g.y = torch.tensor([[float(i), float("nan")]])
        g.idx = i
        g.rwse = torch.randn(k, 16)
        g.lap_vec = torch.randn(k, 4)
        g.lap_val = torch.full((k, 4), float("nan"))
        g.lap_val[:, : min(k, 4)] = torch.randn(min(k, 4))
        out.append(g)
    return out


def _assert_same_graphs(a: list[Data], b: list[Data]) -> None:
    assert len(a) == len(b)
    for ga, gb in zip(a, b):
        assert set(ga.keys()) == set(gb.keys())
        for key in ga.keys():
            va, vb = ga[key], gb[key]
            if isinstance(va, torch.Tensor):
                assert vb.dtype == va.dtype and vb.shape == va.shape, key
                assert torch.equal(torch.nan_to_num(va, 123.0), torch.nan_to_num(vb, 123.0)), key
                assert torch.isnan(va).equal(torch.isnan(vb)) if va.is_floating_point() else True
            else:
                assert va == vb, key


def test_save_load_graphs_round_trip(tmp_path):
    graphs = _graphs(12)
    graphs[3].extra_scalar = torch.tensor(2.5)  # only in one graph, a 0-dim tensor
    graphs[4].note = "hello"
    p = tmp_path / "g.pt"
    save_graphs(graphs, p)
    blob = torch.load(p, weights_only=True)  # plain tensors and lists only
    assert isinstance(blob, dict)
    back = load_graphs(p)
    _assert_same_graphs(graphs, back)
    # edge_index is relative to each graph and contiguous
    for g in back:
        assert g.edge_index.is_contiguous()
        if g.edge_index.numel():
            assert int(g.edge_index.max()) < g.num_nodes
    assert "extra_scalar" in back[3] and "extra_scalar" not in back[2]
    assert back[4].note == "hello" and "note" not in back[5]
    # a collated batch works on loaded graphs
    from torch_geometric.data import Batch

    batch = Batch.from_data_list(back)
    assert batch.x.shape[0] == sum(g.num_nodes for g in graphs)


def test_save_load_empty_and_bad_types(tmp_path):
    save_graphs([], tmp_path / "e.pt")
    assert load_graphs(tmp_path / "e.pt") == []
    g = Data(x=torch.zeros(2, 9, dtype=torch.long), bad=object())
    with pytest.raises(TypeError, match="bad"):
        save_graphs([g], tmp_path / "b.pt")
    assert not (tmp_path / "b.pt").exists()
    with pytest.raises(TypeError, match="dtype"):
        save_graphs([Data(x=torch.zeros(1, 2)), Data(x=torch.zeros(1, 2, dtype=torch.long))], tmp_path / "c.pt")


def test_save_load_graphs_of_forty_thousand_round_trip(tmp_path):
    base = _graphs(6)
    graphs = []
    n = 40_000
    for i in range(n):
        b = base[i % 6]
        graphs.append(
            Data(x=b.x, edge_index=b.edge_index, edge_attr=b.edge_attr, y=b.y, idx=i, smiles="CCO",
                 rwse=b.rwse, lap_vec=b.lap_vec, lap_val=b.lap_val)
        )
    t0 = time.perf_counter()
    save_graphs(graphs, tmp_path / "big.pt")
    t1 = time.perf_counter()
    back = load_graphs(tmp_path / "big.pt")
    t2 = time.perf_counter()
    print(f"40k graphs: save {t1 - t0:.2f}s, load {t2 - t1:.2f}s")
    assert len(back) == n
    assert back[-1].idx == n - 1 and torch.equal(back[-1].x, graphs[-1].x)
    assert torch.equal(back[12345].edge_index, graphs[12345].edge_index)


def test_save_load_dataset(tmp_path):
    graphs = _graphs(6)
    ds = GraphDataset(
        info=TaskInfo(name="t", task="regression", num_tasks=2, metric="mae", target_names=["a", "b"]),
        splits={"train": graphs[:4], "val": graphs[4:5], "test": graphs[5:]},
        invalid=[InvalidRow(7, "C1CC(", "SMILES parse error")],
        source="somewhere.csv",
    )
    save_dataset(ds, tmp_path / "d.pt")
    back = load_dataset(tmp_path / "d.pt")
    assert back.info == ds.info and back.invalid == ds.invalid and back.source == ds.source
    assert back.sizes() == {"train": 4, "val": 1, "test": 1}
    for k in ("train", "val", "test"):
        _assert_same_graphs(ds.splits[k], back.splits[k])


# -------------------------------------------------------------------- cached


def test_cached_hit_and_miss(tmp_path):
    calls = []

    def build():
        calls.append(1)
        return {"v": torch.arange(4)}

    a = cached(tmp_path, "thing", {"a": 1}, build)
    assert cached.last_hit is False and len(calls) == 1
    path = cached.last_path
    assert path.parent == tmp_path / "thing" and path.name == cache_key({"a": 1}) + ".pt" and path.exists()
    b = cached(tmp_path, "thing", {"a": 1}, build)
    assert cached.last_hit is True and len(calls) == 1  # no rebuild
    assert torch.equal(a["v"], b["v"])
    cached(tmp_path, "thing", {"a": 2}, build)
    assert cached.last_hit is False and len(calls) == 2
    cached(tmp_path, "thing", {"a": 1}, build, rebuild=True)
    assert cached.last_hit is False and len(calls) == 3
    assert _leftovers(tmp_path / "thing") == []


def test_cached_with_graph_save_load(tmp_path):
    graphs = _graphs(5)
    out = cached(tmp_path, "g", {"k": 1}, lambda: graphs, save=save_graphs, load=load_graphs)
    assert out is graphs and cached.last_hit is False
    again = cached(tmp_path, "g", {"k": 1}, lambda: pytest.fail("rebuilt"), save=save_graphs, load=load_graphs)
    assert cached.last_hit is True
    _assert_same_graphs(graphs, again)


def test_cached_rebuilds_corrupt_file(tmp_path, caplog):
    import logging
    import warnings

    calls = []

    def build():
        calls.append(1)
        return {"v": torch.arange(1000)}

    cached(tmp_path, "c", {"a": 1}, build)
    path = cached.last_path
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])  # truncated
    with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.WARNING, "siggate.data.cache"):
        warnings.simplefilter("always")
        out = cached(tmp_path, "c", {"a": 1}, build)
    # said once (a log record), not also as a Python warning: the CLI printed both
    said = [r.getMessage() for r in caplog.records if "corrupt cache file" in r.getMessage()]
    assert len(said) == 1 and str(path) in said[0] and said[0].endswith("; deleting and rebuilding"), said
    assert not [w for w in caught if "corrupt" in str(w.message)]
    assert cached.last_hit is False and len(calls) == 2
    assert torch.equal(out["v"], torch.arange(1000))
    # the rebuilt file is valid again
    cached(tmp_path, "c", {"a": 1}, build)
    assert cached.last_hit is True and len(calls) == 2
    path.write_bytes(b"garbage")
    caplog.clear()
    with caplog.at_level(logging.WARNING, "siggate.data.cache"):
        cached(tmp_path, "c", {"a": 1}, build)
    assert len(calls) == 3 and sum("corrupt cache file" in r.getMessage() for r in caplog.records) == 1


def test_a_flipped_byte_in_a_cache_file_is_rebuilt_not_loaded(tmp_path, caplog, monkeypatch):
    """torch reads a zip without checking its CRCs: a byte flipped inside a tensor's data loaded as
    a label of -3.4e35 (a run reported MAE 8.6e33 and exit 0; helper-179). Every load checks the
    SHA-256 the sidecar recorded when the file was written; a sidecar without one (an older cache)
    loads as before."""
    import json
    import logging

    calls = []

    def build():
        calls.append(1)
        return {"v": torch.arange(1000, dtype=torch.float32)}

    cached(tmp_path, "c", {"a": 1}, build)
    path = cached.last_path
    data = bytearray(path.read_bytes())
    at = data.index(torch.arange(1000, dtype=torch.float32)[500:501].numpy().tobytes())  # inside the tensor's bytes
    data[at + 3] ^= 0xFF
    path.write_bytes(bytes(data))
    assert torch.load(path, weights_only=True)["v"][500] != 500  # torch itself reads the damage as data
    with caplog.at_level(logging.WARNING, "siggate.data.cache"):
        out = cached(tmp_path, "c", {"a": 1}, build)
    said = [r.getMessage() for r in caplog.records if "corrupt cache file" in r.getMessage()]
    assert len(said) == 1 and "its bytes changed since it was written (SHA-256 " in said[0], said
    assert cached.last_hit is False and len(calls) == 2 and torch.equal(out["v"], torch.arange(1000.0))
    cached(tmp_path, "c", {"a": 1}, build)
    assert cached.last_hit is True and len(calls) == 2
    # a sidecar written before digests were recorded: loaded as it was (nothing to check against)
    side = path.with_suffix(".json")
    meta = json.loads(side.read_text())
    side.write_text(json.dumps({k: v for k, v in meta.items() if k != "sha256"}))
    cached(tmp_path, "c", {"a": 1}, build)
    assert cached.last_hit is True and len(calls) == 2
    # a rebuild whose sidecar cannot be written leaves no older digest beside the new file (it failed the
    # new file at every load; helper-185): the file then loads unchecked
    side.write_text(json.dumps(meta))
    from siggate.data import cache as cache_module

    def no_sidecar(path, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cache_module, "atomic_write_bytes", no_sidecar)
    cached(tmp_path, "c", {"a": 1}, lambda: {"v": torch.zeros(3)}, rebuild=True)
    monkeypatch.undo()
    assert not side.exists()
    assert torch.equal(cached(tmp_path, "c", {"a": 1}, build)["v"], torch.zeros(3)) and cached.last_hit is True


def test_cached_failed_build_leaves_nothing(tmp_path):
    def build():
        raise RuntimeError("no")

    with pytest.raises(RuntimeError, match="no"):
        cached(tmp_path, "f", {"a": 1}, build)
    assert not list((tmp_path / "f").glob("*.pt"))

    def bad_obj():
        return {"f": lambda: 1}

    with pytest.raises(Exception):
        cached(tmp_path, "f", {"a": 1}, bad_obj)
    assert not list((tmp_path / "f").glob("*.pt"))
    assert _leftovers(tmp_path / "f") == []


def _worker(cache_dir: str, counter: str, out: str) -> None:
    def build():
        with open(counter, "a") as fh:
            fh.write("x")
        time.sleep(1.0)
        return {"v": torch.arange(10_000)}

    res = cached(Path(cache_dir), "conc", {"a": 1}, build)
    torch.save({"ok": bool(torch.equal(res["v"], torch.arange(10_000))), "hit": cached.last_hit}, out)


def test_cached_concurrent_processes(tmp_path):
    ctx = mp.get_context("fork")
    counter = tmp_path / "count.txt"
    procs = [
        ctx.Process(target=_worker, args=(str(tmp_path / "cache"), str(counter), str(tmp_path / f"out{i}.pt")))
        for i in range(3)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert counter.read_text() == "x"  # built exactly once
    results = [torch.load(tmp_path / f"out{i}.pt", weights_only=True) for i in range(3)]
    assert all(r["ok"] for r in results)
    assert sorted(r["hit"] for r in results) == [False, True, True]


def test_target_stats_keep_the_labels_own_spread_however_small():
    """The std was floored at 1e-8: labels in molar units (Ki ~1e-9 M) or smaller were divided by
    the floor instead of their spread, so the GNN learned targets of ~1e-4 and predicted values
    300x off with the wrong sign, silently. The normalised labels must not depend on the units;
    a constant target normalises to 0 (std 1); a target without training labels stays NaN."""
    from siggate.train.dataprep import target_stats

    info = TaskInfo(name="t", task="regression", num_tasks=3, metric="mae", target_names=["a", "b", "c"])
    base = torch.tensor([1.0, 2.5, 4.0, 3.0])
    for unit in (1.0, 1e-9, 1e-12, 1e6):
        ys = torch.stack([base * unit, torch.full_like(base, 5.0 * unit), torch.full_like(base, float("nan"))], 1)
        mean, std = target_stats([Data(y=row[None]) for row in ys], info)
        normalised = (ys[:, 0] - mean[0]) / std[0]
        want = ((base - base.mean()) / base.std(unbiased=False)).double()
        torch.testing.assert_close(normalised.double(), want, rtol=1e-5, atol=1e-6)
        assert std[1] == 1.0 and mean[1] == pytest.approx(5.0 * unit, rel=1e-6)
        assert torch.isnan(mean[2]) and torch.isnan(std[2])
