"""Fast path of the ``"performer"`` attention: linear attention of each graph with itself.

What it computes: exactly :func:`siggate.nn.performer.linear_attention_reference`,
``o_i = phi_q_i^T S_g / (phi_q_i^T z_g)`` with the per-graph sums
``S_g = sum_j keep_j phi_k_j v_j^T`` and ``z_g = sum_j phi_k_j``, with plain autograd.
The reference forms one ``[m, d_head]`` outer product per node and head and gathers
``S_g`` back to every node (``O(N H m d_head)`` memory); here

* a graph with at least :data:`BIG_GRAPH` nodes (a node-level graph, or large ones in a
  batch) takes two batched matmuls over its contiguous rows (``S_g = Phi_K^T V``,
  ``Phi_Q S_g``): BLAS, and nothing of size ``N m d_head``;
* the other graphs run in chunks of :data:`CHUNK_ROWS` rows (outer products summed per
  graph, then gathered back), so memory stays bounded.

Neither pads graphs to a common size nor mixes graphs. Needs the batch sorted by graph
(:class:`~siggate.nn.kernels.layout.GraphSegments`). Pinned by
``tests/test_attention_types.py::test_fast_path_equals_reference`` (outputs and
gradients, both branches, with key dropout).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .layout import GraphSegments

#: Graphs with at least this many nodes take the per-graph matmul branch.
BIG_GRAPH = 64
#: Rows per chunk for the graphs below :data:`BIG_GRAPH` nodes.
CHUNK_ROWS = 2048


def linear_attention_fast(phi_q: Tensor, phi_k: Tensor, v: Tensor, segments: GraphSegments,
                          key_keep: Tensor | None = None) -> Tensor:
    """Shapes: ``phi_q, phi_k [N, H, m]``, ``v [N, H, d_head]``, ``key_keep [N, H]``
    (optional) -> ``[N, H, d_head]``."""
    weighted = phi_k if key_keep is None else phi_k * key_keep[..., None]
    big, small = segments.runs(BIG_GRAPH)
    pieces, rows = [], []
    for _, a, b in big:
        s = torch.einsum("nhm,nhd->hmd", weighted[a:b], v[a:b])  # H, m, dh
        z = phi_k[a:b].sum(0)  # H, m
        num = torch.einsum("nhm,hmd->nhd", phi_q[a:b], s)
        den = torch.einsum("nhm,hm->nh", phi_q[a:b], z)
        pieces.append(num / den[..., None])
        rows.append((a, b))
    if len(pieces) == 1 and rows[0] == (0, segments.num_nodes):
        return pieces[0]  # one graph: no reassembly
    order = [torch.arange(a, b, device=v.device) for a, b in rows]
    if small is not None:
        pieces.append(_small_graphs(phi_q, phi_k, weighted, v, segments, small))
        order.append(small)
    out = v.new_zeros(v.shape)
    if not pieces:
        return out
    return out.index_copy(0, torch.cat(order), torch.cat(pieces))


def _small_graphs(phi_q: Tensor, phi_k: Tensor, weighted: Tensor, v: Tensor, segments: GraphSegments,
                  rows: Tensor) -> Tensor:
    """The reference's outer products, on ``rows`` (nodes of small graphs) in chunks; each
    chunk's sums cover only the graphs it touches (contiguous, since the batch is sorted)."""
    batch = segments.batch
    H, m, dh = phi_k.size(1), phi_k.size(2), v.size(-1)
    sums, ids = [], []
    for c in range(0, rows.numel(), CHUNK_ROWS):
        r = rows[c : c + CHUNK_ROWS]
        g = batch[r]
        g0, g1 = int(g[0]), int(g[-1])
        outer = weighted[r][..., :, None] * v[r][..., None, :]  # c, H, m, dh
        sums.append(outer.new_zeros(g1 - g0 + 1, H, m, dh).index_add(0, g - g0, outer))
        ids.append(torch.arange(g0, g1 + 1, device=v.device))
    G = segments.num_graphs
    s = v.new_zeros(G, H, m, dh).index_add(0, torch.cat(ids), torch.cat(sums))  # G, H, m, dh
    z = phi_k.new_zeros(G, H, m).index_add(0, batch[rows], phi_k[rows])  # G, H, m
    outs = []
    for c in range(0, rows.numel(), CHUNK_ROWS):
        r = rows[c : c + CHUNK_ROWS]
        g = batch[r]
        num = torch.einsum("nhm,nhmd->nhd", phi_q[r], s[g])
        den = torch.einsum("nhm,nhm->nh", phi_q[r], z[g])
        outs.append(num / den[..., None])
    return torch.cat(outs)
