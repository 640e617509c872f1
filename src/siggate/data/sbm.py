"""PLACEHOLDER, to be replaced at merge: the large stochastic-block-model graph for scaling.

Another branch (Performer/Exphormer attention and the scaling benchmark) writes the real
:func:`sbm_large_graph` with exactly this signature and return contract; the ``sbm-large``
dataset (:mod:`siggate.data.sbm_large`) and the node-level tests only rely on that contract.
This version exists so that the node-task branch runs on its own: simple, vectorized,
deterministic, and not tuned.
"""

from __future__ import annotations

import numpy as np
import torch
from torch_geometric.data import Data

__all__ = ["sbm_large_graph"]


def sbm_large_graph(num_nodes: int, num_blocks: int = 10, avg_degree: float = 10.0, p_ratio: float = 4.0,
                    num_features: int = 16, feature_noise: float = 1.0, seed: int = 0) -> Data:
    """One ``num_nodes``-node SBM graph for full-batch node classification (PLACEHOLDER).

    Returns a ``Data`` with ``x`` ``FloatTensor [N, F]`` (each block's random centre plus
    ``feature_noise`` times standard normal noise), ``y`` ``LongTensor [N]`` (block ids, blocks
    of near-equal size), ``edge_index`` ``[2, E]`` (undirected, both directions, no
    self-loops or duplicates; about ``avg_degree`` per node, an edge inside a block
    ``p_ratio`` times as likely as one between two given blocks) and boolean
    ``train_mask``/``val_mask``/``test_mask`` ``[N]`` (a random 50/25/25 partition).
    """
    if num_nodes < num_blocks or num_blocks < 2:
        raise ValueError(f"need num_blocks >= 2 and num_nodes >= num_blocks, got {num_nodes} and {num_blocks}")
    rng = np.random.default_rng(seed)
    y = rng.permutation(np.arange(num_nodes) % num_blocks)
    centres = rng.standard_normal((num_blocks, num_features))
    x = centres[y] + feature_noise * rng.standard_normal((num_nodes, num_features))
    # each sampled edge stays inside its source's block with the SBM's odds p / (p + (K-1) q)
    m = int(round(num_nodes * avg_degree / 2))
    src = rng.integers(num_nodes, size=m)
    inside = rng.random(m) < p_ratio / (p_ratio + num_blocks - 1)
    members = np.argsort(y, kind="stable")
    starts = np.searchsorted(y[members], np.arange(num_blocks))
    counts = np.bincount(y, minlength=num_blocks)
    block = np.where(inside, y[src], (y[src] + rng.integers(1, num_blocks, size=m)) % num_blocks)
    dst = members[starts[block] + (rng.random(m) * counts[block]).astype(np.int64)]
    keep = src != dst
    pairs = np.unique(np.sort(np.stack([src[keep], dst[keep]]), axis=0), axis=1)
    edge_index = torch.from_numpy(np.concatenate([pairs, pairs[::-1]], axis=1))
    order = rng.permutation(num_nodes)
    cut1, cut2 = num_nodes // 2, (3 * num_nodes) // 4
    masks = []
    for lo, hi in ((0, cut1), (cut1, cut2), (cut2, num_nodes)):
        mask = torch.zeros(num_nodes, dtype=torch.bool)
        mask[torch.from_numpy(order[lo:hi])] = True
        masks.append(mask)
    return Data(x=torch.from_numpy(x).float(), y=torch.from_numpy(y).long(), edge_index=edge_index,
                train_mask=masks[0], val_mask=masks[1], test_mask=masks[2], num_nodes=num_nodes)
