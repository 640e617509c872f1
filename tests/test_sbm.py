"""``siggate.data.sbm.sbm_large_graph``: the graph's contract, its statistics against the
SBM it claims to sample, determinism, and a graph of 10^5 nodes (its speed is the benchmarks'
to report, ``siggate bench --scaling-large``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from siggate.data.sbm import sbm_edge_probabilities, sbm_large_graph


def test_contract_of_the_returned_graph():
    d = sbm_large_graph(3000, num_blocks=7, num_features=5, seed=3)
    n = 3000
    assert d.num_nodes == n and d.x.shape == (n, 5) and d.x.dtype == torch.float32
    assert d.y.dtype == torch.long and d.y.shape == (n,) and set(d.y.tolist()) == set(range(7))
    assert torch.bincount(d.y).max() - torch.bincount(d.y).min() <= 1  # balanced blocks
    src, dst = d.edge_index
    assert d.edge_index.dtype == torch.long and not (src == dst).any()  # no self-loops
    key = src * n + dst
    assert bool((key[1:] > key[:-1]).all())  # sorted by source then target: no duplicates
    assert torch.equal(torch.sort(dst * n + src).values, key)  # both directions stored
    masks = torch.stack([d.train_mask, d.val_mask, d.test_mask])
    assert masks.dtype == torch.bool and torch.equal(masks.sum(0), torch.ones(n, dtype=torch.long))
    assert masks.sum(1).tolist() == [1800, 600, 600]


def test_degree_and_block_ratio_match_the_model():
    """Average degree and the inside/between density ratio, against the SBM's expectations
    (E ~ sum of binomials: a 4-sigma window)."""
    n, blocks, deg, ratio = 20000, 10, 10.0, 4.0
    d = sbm_large_graph(n, num_blocks=blocks, avg_degree=deg, p_ratio=ratio, seed=1)
    src, dst = d.edge_index
    m = src.numel() / 2
    assert abs(m - n * deg / 2) < 4 * (n * deg / 2) ** 0.5
    same = d.y[src] == d.y[dst]
    size = torch.bincount(d.y).double()
    within_pairs = float((size * (size - 1) / 2).sum())
    between_pairs = n * (n - 1) / 2 - within_pairs
    p_in = float(same.sum()) / 2 / within_pairs
    p_out = float((~same).sum()) / 2 / between_pairs
    assert abs(p_in / p_out - ratio) < 0.15 * ratio
    p_in_model, p_out_model = sbm_edge_probabilities(size.long().numpy(), deg, ratio)
    assert p_in_model == pytest.approx(ratio * p_out_model)


def _test_accuracy(d, h) -> float:
    """Multinomial logistic regression fitted on ``train_mask``, accuracy on ``test_mask``."""
    w = torch.zeros(h.size(1), int(d.y.max()) + 1, dtype=h.dtype, requires_grad=True)
    b = torch.zeros(w.size(1), dtype=h.dtype, requires_grad=True)
    opt = torch.optim.LBFGS([w, b], max_iter=200)
    tr, te = d.train_mask, d.test_mask

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(h[tr] @ w + b, d.y[tr])
        loss.backward()
        return loss

    opt.step(closure)
    return float(((h[te] @ w + b).argmax(1) == d.y[te]).double().mean())


def test_features_carry_the_block_and_structure_helps():
    """A linear classifier on the features alone is above chance (0.1) but far from
    perfect; given the neighbours' mean features too (structure), it does clearly better."""
    d = sbm_large_graph(5000, seed=0)
    x = d.x.double()
    src, dst = d.edge_index
    deg = torch.bincount(dst, minlength=d.num_nodes).double().clamp(min=1)
    neighbours = torch.zeros_like(x).index_add_(0, dst, x[src]) / deg[:, None]
    alone, with_graph = _test_accuracy(d, x), _test_accuracy(d, torch.cat([x, neighbours], 1))
    assert 0.2 < alone < 0.6
    assert with_graph > alone + 0.04


def test_same_seed_same_graph_other_seed_other_graph():
    a, b, c = sbm_large_graph(2000, seed=5), sbm_large_graph(2000, seed=5), sbm_large_graph(2000, seed=6)
    for key in ("x", "y", "edge_index", "train_mask", "val_mask", "test_mask"):
        assert torch.equal(a[key], b[key]), key
    assert not torch.equal(a.y, c.y)


def test_small_graph_with_too_high_degree_is_refused():
    with pytest.raises(ValueError, match="intra-block edge probability"):
        sbm_large_graph(20, num_blocks=10, avg_degree=10.0)
    with pytest.raises(ValueError, match="num_blocks"):
        sbm_large_graph(5, num_blocks=6)


def test_every_block_pair_gets_its_exact_edge_count_even_when_dense():
    """Tiny blocks (2 nodes: one possible pair) force the redraw loop; counts stay within
    the number of node pairs and the graph stays simple."""
    d = sbm_large_graph(40, num_blocks=20, avg_degree=3.0, p_ratio=10.0, seed=2)
    src, dst = d.edge_index
    key = np.unique((src * 40 + dst).numpy())
    assert key.size == src.numel() and not (src == dst).any()


def test_a_hundred_thousand_nodes_at_the_mean_degree():
    """A graph of 10^5 nodes is drawn (linear-time sampling; its speed is the module's and
    ``siggate bench --scaling-large``'s to report) at the recipe's mean degree."""
    d = sbm_large_graph(100_000, seed=0)
    assert abs(d.edge_index.size(1) / 100_000 - 10.0) < 0.2
