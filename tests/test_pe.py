"""Positional encodings checked against independent closed forms and brute force."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from siggate.data import pe
from siggate.data.pe import PE_VERSION, add_pe, cached_pe, lap_pe, rwse


def undirected(pairs, n=None):
    pairs = list(pairs)
    if not pairs:
        return torch.zeros((2, 0), dtype=torch.long)
    src = [a for a, b in pairs] + [b for a, b in pairs]
    dst = [b for a, b in pairs] + [a for a, b in pairs]
    return torch.tensor([src, dst], dtype=torch.long)


def cycle(n):
    return undirected([(i, (i + 1) % n) for i in range(n)])


def path(n):
    return undirected([(i, i + 1) for i in range(n - 1)])


def star(leaves):
    return undirected([(0, i) for i in range(1, leaves + 1)])


def random_graph(n, p, seed):
    rng = np.random.default_rng(seed)
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n) if rng.random() < p]
    return undirected(pairs)


def cycle_return_prob(n, t):
    """P(simple walk on C_n is back at its start after t steps): sum of binomials
    over the numbers j of +1 steps with (2j - t) divisible by n."""
    return sum(math.comb(t, j) for j in range(t + 1) if (2 * j - t) % n == 0) / 2**t


def brute_rwse(edge_index, n, k):
    adj = torch.zeros((n, n), dtype=torch.float64)
    for a, b in edge_index.t().tolist():
        adj[a, b] += 1
    deg = adj.sum(1)
    inv = torch.where(deg > 0, 1.0 / deg, torch.zeros_like(deg))
    trans = inv[:, None] * adj
    return torch.stack([torch.linalg.matrix_power(trans, t).diagonal() for t in range(1, k + 1)], dim=1)


# ----------------------------------------------------------------------------- RWSE


@pytest.mark.parametrize("n,k", [(10, 8), (8, 16), (5, 12), (7, 20), (3, 6)])
def test_rwse_cycle_closed_form(n, k):
    out = rwse(cycle(n), n, k)
    assert out.shape == (n, k) and out.dtype == torch.float32
    expected = torch.tensor([cycle_return_prob(n, t) for t in range(1, k + 1)], dtype=torch.float32)
    for i in range(n):
        torch.testing.assert_close(out[i], expected, atol=1e-6, rtol=0)
    if n % 2 == 0:
        # bipartite: odd return times are impossible
        assert torch.all(out[:, 0::2].abs() < 1e-7)
    for t in range(2, min(k, n - 1) + 1, 2):  # below the wrap-around: central binomial
        assert out[0, t - 1].item() == pytest.approx(math.comb(t, t // 2) / 2**t, abs=1e-6)


def test_rwse_path_by_hand():
    out = rwse(path(3), 3, 4)
    expected = torch.tensor([[0, 0.5, 0, 0.5], [0, 1, 0, 1], [0, 0.5, 0, 0.5]], dtype=torch.float32)
    torch.testing.assert_close(out, expected, atol=1e-6, rtol=0)


def test_rwse_star_by_hand():
    leaves = 4
    out = rwse(star(leaves), leaves + 1, 6)
    center = torch.tensor([0, 1, 0, 1, 0, 1], dtype=torch.float32)
    leaf = torch.tensor([0, 1 / leaves, 0, 1 / leaves, 0, 1 / leaves], dtype=torch.float32)
    torch.testing.assert_close(out[0], center, atol=1e-6, rtol=0)
    for i in range(1, leaves + 1):
        torch.testing.assert_close(out[i], leaf, atol=1e-6, rtol=0)


def test_rwse_isolated_nodes_are_zero():
    ei = undirected([(0, 1), (1, 2)])
    out = rwse(ei, 5, 4)  # nodes 3 and 4 have no edges
    assert torch.all(out[3:] == 0)
    torch.testing.assert_close(out[:3], rwse(ei, 3, 4))
    assert rwse(torch.zeros((2, 0), dtype=torch.long), 3, 4).eq(0).all()
    assert rwse(torch.zeros((2, 0), dtype=torch.long), 0, 4).shape == (0, 4)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rwse_matches_matrix_powers(seed):
    n = 30
    ei = random_graph(n, 0.12, seed)
    torch.testing.assert_close(rwse(ei, n, 16), brute_rwse(ei, n, 16).float(), atol=1e-6, rtol=0)


def test_rwse_directed_falls_back_to_powers():
    ei = torch.tensor([[0, 1, 2, 2, 3], [1, 2, 0, 3, 0]])  # not symmetric
    torch.testing.assert_close(rwse(ei, 4, 7), brute_rwse(ei, 4, 7).float(), atol=1e-6, rtol=0)


def test_rwse_rejects_out_of_range():
    with pytest.raises(ValueError):
        rwse(torch.tensor([[0], [5]]), 3, 2)


# ----------------------------------------------------------------------------- LapPE


@pytest.mark.parametrize("n,m", [(8, 8), (9, 5), (12, 4)])
def test_lap_cycle_eigenvalues(n, m):
    vec, val = lap_pe(cycle(n), n, m)
    expected = sorted(2 - 2 * math.cos(2 * math.pi * j / n) for j in range(n))[:m]
    assert vec.shape == (n, m) and val.shape == (n, m)
    for i in range(n):
        torch.testing.assert_close(val[i], torch.tensor(expected, dtype=torch.float32), atol=1e-5, rtol=0)
    assert val.min() >= 0  # round-off clamped


@pytest.mark.parametrize("seed", [3, 4, 5])
def test_lap_eigenpairs(seed):
    n, m = 25, 10
    ei = random_graph(n, 0.15, seed)
    vec, val = lap_pe(ei, n, m)
    adj = torch.zeros((n, n), dtype=torch.float64)
    adj[ei[0], ei[1]] = 1
    lap = torch.diag(adj.sum(1)) - adj
    all_vals = torch.linalg.eigvalsh(lap)
    torch.testing.assert_close(val[0].double(), all_vals[:m].clamp_min(0), atol=1e-5, rtol=0)
    v = vec.double()
    torch.testing.assert_close(lap @ v, v * val[0].double()[None, :], atol=1e-4, rtol=0)
    torch.testing.assert_close(v.norm(dim=0), torch.ones(m, dtype=torch.float64), atol=1e-5, rtol=0)
    assert torch.all(val == val[0:1])  # same eigenvalues on every row
    assert torch.all(val[0, 1:] >= val[0, :-1])  # ascending


def test_lap_nan_padding_small_graph():
    vec, val = lap_pe(path(3), 3, 8)
    assert vec.shape == (3, 8) and val.shape == (3, 8)
    assert torch.isfinite(vec[:, :3]).all() and torch.isfinite(val[:, :3]).all()
    assert torch.isnan(vec[:, 3:]).all() and torch.isnan(val[:, 3:]).all()
    torch.testing.assert_close(val[0, :3], torch.tensor([0.0, 1.0, 3.0]), atol=1e-5, rtol=0)  # path P3
    torch.testing.assert_close(vec[:, :3].norm(dim=0), torch.ones(3), atol=1e-5, rtol=0)


def test_lap_disconnected_and_directed_input():
    # two components -> two zero eigenvalues; a one-direction edge list is symmetrized
    ei = torch.tensor([[0, 1, 3], [1, 2, 4]])
    vec, val = lap_pe(ei, 5, 5)
    assert (val[0] < 1e-6).sum().item() == 2
    vec2, val2 = lap_pe(undirected([(0, 1), (1, 2), (3, 4)]), 5, 5)
    torch.testing.assert_close(val, val2)


def test_lap_single_node():
    vec, val = lap_pe(torch.zeros((2, 0), dtype=torch.long), 1, 3)
    assert vec[0, 0].abs().item() == pytest.approx(1.0)
    assert val[0, 0].item() == 0.0
    assert torch.isnan(vec[0, 1:]).all()


# ----------------------------------------------------------------------------- add_pe / cached_pe


def small_graphs():
    return [
        Data(edge_index=cycle(6), num_nodes=6),
        Data(edge_index=path(3), num_nodes=3),
        Data(edge_index=star(5), num_nodes=6),
        Data(edge_index=random_graph(20, 0.2, 7), num_nodes=20),
    ]


def test_add_pe_sets_fields():
    graphs = add_pe(small_graphs(), rwse_steps=5, lap_dim=4)
    for g in graphs:
        n = g.num_nodes
        assert g.rwse.shape == (n, 5) and g.lap_vec.shape == (n, 4) and g.lap_val.shape == (n, 4)
        torch.testing.assert_close(g.rwse, rwse(g.edge_index, n, 5))
    assert torch.isnan(graphs[1].lap_vec[:, 3]).all()
    only_rw = add_pe(small_graphs(), rwse_steps=3)
    assert "rwse" in only_rw[0] and "lap_vec" not in only_rw[0]


def test_cached_pe_second_call_loads(tmp_path, monkeypatch):
    first = cached_pe(small_graphs(), "toy", tmp_path, rwse_steps=4, lap_dim=3, progress=False)

    def boom(*a, **k):
        raise AssertionError("recomputed despite a cache hit")

    monkeypatch.setattr(pe, "_compute_pe", boom)
    second = cached_pe(small_graphs(), "toy", tmp_path, rwse_steps=4, lap_dim=3, progress=False)
    for a, b in zip(first, second):
        torch.testing.assert_close(a.rwse, b.rwse)
        torch.testing.assert_close(a.lap_vec, b.lap_vec, equal_nan=True)
        torch.testing.assert_close(a.lap_val, b.lap_val, equal_nan=True)
    # other settings are another cache entry and must be computed
    with pytest.raises(AssertionError, match="recomputed"):
        cached_pe(small_graphs(), "toy", tmp_path, rwse_steps=5, lap_dim=3, progress=False)
    monkeypatch.undo()
    third = cached_pe(small_graphs(), "toy", tmp_path, rwse_steps=5, lap_dim=3, progress=False)
    assert third[0].rwse.shape[1] == 5
    assert isinstance(PE_VERSION, int)


def test_cached_pe_key_includes_graph_structure(tmp_path, monkeypatch):
    cached_pe(small_graphs(), "toy", tmp_path, rwse_steps=3, progress=False)
    changed = small_graphs()
    changed[1] = Data(edge_index=path(4), num_nodes=4)
    out = cached_pe(changed, "toy", tmp_path, rwse_steps=3, progress=False)
    torch.testing.assert_close(out[1].rwse, rwse(path(4), 4, 3))


def test_lap_large_graph_subset_path():
    n, m = 120, 10  # takes the partial-eigendecomposition path
    ei = random_graph(n, 0.05, 11)
    vec, val = lap_pe(ei, n, m)
    adj = torch.zeros((n, n), dtype=torch.float64)
    adj[ei[0], ei[1]] = 1
    lap = torch.diag(adj.sum(1)) - adj
    torch.testing.assert_close(val[0].double(), torch.linalg.eigvalsh(lap)[:m].clamp_min(0), atol=1e-5, rtol=0)
    v = vec.double()
    torch.testing.assert_close(lap @ v, v * val[0].double()[None, :], atol=1e-4, rtol=0)
    torch.testing.assert_close(v.norm(dim=0), torch.ones(m, dtype=torch.float64), atol=1e-5, rtol=0)
    big = rwse(ei, n, 12)
    torch.testing.assert_close(big, brute_rwse(ei, n, 12).float(), atol=1e-6, rtol=0)


def test_cached_pe_tells_apart_graphs_that_trade_places_with_an_edgeless_one(tmp_path):
    """Node counts and one joined edge list were the digest: a two-atom graph without bonds
    ([Na+].[Cl-]) and a bonded one (CC) trading places hashed alike, and each got the other's
    cached encodings."""
    bonded = Data(edge_index=torch.tensor([[0, 1], [1, 0]]), num_nodes=2)
    apart = Data(edge_index=torch.zeros((2, 0), dtype=torch.long), num_nodes=2)
    cached_pe([bonded, apart], "toy", tmp_path, rwse_steps=4, progress=False)
    out = cached_pe([apart.clone(), bonded.clone()], "toy", tmp_path, rwse_steps=4, progress=False)
    torch.testing.assert_close(out[0].rwse, rwse(apart.edge_index, 2, 4))
    torch.testing.assert_close(out[1].rwse, rwse(bonded.edge_index, 2, 4))
    assert not torch.equal(out[0].rwse, out[1].rwse)
