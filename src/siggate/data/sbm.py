"""A large stochastic-block-model graph with a planted node-classification task.

:func:`sbm_large_graph` builds one graph of up to millions of nodes in seconds: it never
forms an ``N x N`` matrix, it draws how many edges each pair of blocks gets and then
which node pairs they join. It feeds ``siggate bench --scaling-large`` and node-level
training; it imports nothing from :mod:`siggate.nn`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:
    from torch_geometric.data import Data

__all__ = ["sbm_large_graph", "sbm_edge_probabilities"]


def sbm_edge_probabilities(block_sizes: np.ndarray, avg_degree: float, p_ratio: float) -> tuple[float, float]:
    """``(p_in, p_out)``: the edge probabilities inside a block and between two blocks,
    with ``p_in = p_ratio * p_out``, that give an expected average degree ``avg_degree``.

    The expected number of undirected edges is ``p_in * sum_a C(n_a, 2) + p_out *
    sum_{a<b} n_a n_b``, which must equal ``N * avg_degree / 2``. Raises ``ValueError``
    when that needs ``p_in > 1`` (a graph too small for the degree asked).
    """
    n = block_sizes.astype(np.float64)
    total = n.sum()
    within = float((n * (n - 1) / 2).sum())
    between = float((total * total - (n * n).sum()) / 2)
    denom = p_ratio * within + between
    if denom <= 0:
        raise ValueError(f"an SBM graph needs at least 2 nodes, got {int(total)}")
    p_out = total * avg_degree / 2 / denom
    p_in = p_ratio * p_out
    if p_in > 1.0 or p_out > 1.0:
        raise ValueError(f"avg_degree={avg_degree} with p_ratio={p_ratio} needs an intra-block edge probability "
                         f"{p_in:.3g} > 1 for {int(total)} nodes in {len(n)} blocks; use more nodes or a lower degree")
    return p_in, p_out


def _sample_pairs(rng: np.random.Generator, counts: np.ndarray, pair_a: np.ndarray, pair_b: np.ndarray,
                  start: np.ndarray, size: np.ndarray, order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``counts[p]`` node pairs drawn uniformly in block pair ``p = (pair_a[p], pair_b[p])``
    (with replacement, so possibly repeated); returns global node ids ``(u, v)``."""
    which = np.repeat(np.arange(len(counts)), counts)
    a, b = pair_a[which], pair_b[which]
    u = start[a] + (rng.random(len(which)) * size[a]).astype(np.int64)
    v = start[b] + (rng.random(len(which)) * size[b]).astype(np.int64)
    return order[u], order[v]


def sbm_large_graph(num_nodes: int, num_blocks: int = 10, avg_degree: float = 10.0, p_ratio: float = 4.0,
                    num_features: int = 16, feature_noise: float = 1.0, seed: int = 0) -> Data:
    r"""One stochastic-block-model graph with a planted node-classification task.

    Nodes are split into ``num_blocks`` blocks of (almost) equal size, at random. Each
    pair of nodes is joined independently with probability ``p_in`` inside a block and
    ``p_out = p_in / p_ratio`` between blocks, chosen so that the expected average degree
    is ``avg_degree`` (:func:`sbm_edge_probabilities`). Sampling is exact and
    ``O(N + E)``: the number of edges of each block pair is drawn from its binomial
    distribution, then that many distinct node pairs uniformly (drawn with replacement,
    duplicates and self-pairs dropped and redrawn until the count is met).

    Features are a noisy signal of the block: ``x_i = mu_{y_i} + feature_noise * eps_i``
    with ``mu_b`` a random unit vector per block and ``eps_i ~ N(0, I)``; with the
    defaults (16 features, noise 1) features alone identify the block poorly, and the
    neighbourhood (a ``p_ratio`` times denser inside blocks) helps.

    Args:
        num_nodes (int): ``N``.
        num_blocks (int): blocks, i.e. classes. (default: ``10``)
        avg_degree (float): expected average (undirected) degree. (default: ``10.0``)
        p_ratio (float): ``p_in / p_out``. (default: ``4.0``)
        num_features (int): feature width ``F``. (default: ``16``)
        feature_noise (float): standard deviation of the feature noise. (default: ``1.0``)
        seed (int): everything (blocks, edges, features, masks) is a function of it.
            (default: ``0``)

    Returns:
        ``torch_geometric.data.Data`` with ``x`` float ``[N, F]``, ``y`` long ``[N]``
        (block ids), ``edge_index`` long ``[2, E]`` (undirected, both directions stored,
        sorted by source then target, no self-loops, no duplicates), and ``train_mask``,
        ``val_mask``, ``test_mask`` bool ``[N]`` (a random 60/20/20 split).

    Example:
        >>> data = sbm_large_graph(1000, seed=0)
        >>> data.num_nodes, data.y.max().item()
        (1000, 9)
    """
    from torch_geometric.data import Data

    if num_nodes < 2:
        raise ValueError(f"num_nodes must be >= 2, got {num_nodes}")
    if not 1 <= num_blocks <= num_nodes:
        raise ValueError(f"num_blocks must be in 1..num_nodes={num_nodes}, got {num_blocks}")
    if avg_degree < 0 or p_ratio <= 0:
        raise ValueError(f"avg_degree must be >= 0 and p_ratio > 0, got {avg_degree} and {p_ratio}")
    if num_features < 1 or feature_noise < 0:
        raise ValueError(f"num_features must be >= 1 and feature_noise >= 0, got {num_features} and {feature_noise}")
    rng = np.random.default_rng(seed)
    n = num_nodes
    y = rng.permutation(np.arange(n) % num_blocks)  # balanced blocks, random members
    order = np.argsort(y, kind="stable")  # nodes grouped by block
    size = np.bincount(y, minlength=num_blocks).astype(np.int64)
    start = np.concatenate([[0], np.cumsum(size)[:-1]])
    p_in, p_out = sbm_edge_probabilities(size, avg_degree, p_ratio)

    # block pairs a <= b, their node-pair counts and probabilities
    pair_a, pair_b = np.triu_indices(num_blocks)
    same = pair_a == pair_b
    pairs = np.where(same, size[pair_a] * (size[pair_a] - 1) // 2, size[pair_a] * size[pair_b])
    target = rng.binomial(pairs, np.where(same, p_in, p_out))

    keys = np.empty(0, dtype=np.int64)  # undirected edges as lo * n + hi, sorted
    have = np.zeros(len(pairs), dtype=np.int64)
    while (have < target).any():  # draw the missing pairs of each block pair until its count is met
        u, v = _sample_pairs(rng, target - have, pair_a, pair_b, start, size, order)
        ok = u != v
        new = _sorted_unique(np.minimum(u[ok], v[ok]) * n + np.maximum(u[ok], v[ok]))
        if keys.size:  # a block pair's draws stay in that pair, so it never gets more than it misses
            pos = np.minimum(np.searchsorted(keys, new), keys.size - 1)
            new = new[keys[pos] != new]
        keys = np.sort(np.concatenate([keys, new]), kind="stable")
        have += np.bincount(_block_pair_index(y[new // n], y[new % n], num_blocks), minlength=len(pairs))

    lo, hi = keys // n, keys % n
    directed = np.sort(np.concatenate([keys, hi * n + lo]))  # both directions, by source then target
    ei = np.stack([directed // n, directed % n])

    mu = rng.standard_normal((num_blocks, num_features))
    mu /= np.linalg.norm(mu, axis=1, keepdims=True)
    x = mu[y] + feature_noise * rng.standard_normal((n, num_features))

    perm = rng.permutation(n)
    n_train, n_val = int(round(0.6 * n)), int(round(0.2 * n))
    masks = {}
    for name, idx in (("train_mask", perm[:n_train]), ("val_mask", perm[n_train : n_train + n_val]),
                      ("test_mask", perm[n_train + n_val :])):
        m = torch.zeros(n, dtype=torch.bool)
        m[torch.from_numpy(idx)] = True
        masks[name] = m
    return Data(x=torch.from_numpy(x.astype(np.float32)), y=torch.from_numpy(y.astype(np.int64)),
                edge_index=torch.from_numpy(np.ascontiguousarray(ei)), num_nodes=n, **masks)


def _sorted_unique(a: np.ndarray) -> np.ndarray:
    """``np.unique(a)`` by sorting (NumPy's hash-based unique is much slower on millions of int64)."""
    a = np.sort(a)
    return a[np.concatenate([[True], a[1:] != a[:-1]])] if a.size else a


def _block_pair_index(a: np.ndarray, b: np.ndarray, num_blocks: int) -> np.ndarray:
    """Index of the unordered block pair ``(min, max)`` in ``np.triu_indices(num_blocks)`` order."""
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    return lo * num_blocks - lo * (lo - 1) // 2 + (hi - lo)

