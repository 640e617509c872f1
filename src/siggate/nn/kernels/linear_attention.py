"""Fast path of the ``"performer"`` attention: FAVOR+ features and linear attention of each
graph with itself.

What it computes: exactly :func:`siggate.nn.performer.performer_reference` (features
:func:`~siggate.nn.performer.favor_features`, then
``o_i = phi_q_i^T S_g / (phi_q_i^T z_g)`` with ``S_g = sum_j keep_j phi_k_j v_j^T`` and
``z_g = sum_j phi_k_j`` over the nodes of graph ``g``). The reference works per node
(``[N, H, m]`` features, one ``[m, d_head]`` outer product per node and head, gathered back
to every node, plain autograd); here

* a graph with at least :data:`BIG_GRAPH` nodes (a node-level graph, or large ones in a
  batch) is one autograd node, :class:`_GraphFavor`: head-major batched matmuls over its
  contiguous rows, ``S_g = Phi_K^T V`` and ``Phi_Q S_g`` per head (BLAS, nothing of size
  ``N m d_head``), features recomputed in the backward
  (``dx = (dphi * phi) W - rowsum(dphi * phi) x`` for keys);
* the other graphs run in chunks of :data:`CHUNK_ROWS` rows (outer products summed per
  graph, then gathered back), so memory stays bounded.

Neither pads graphs to a common size nor mixes graphs. Needs the batch sorted by graph
(:class:`~siggate.nn.kernels.layout.GraphSegments`). Pinned by
``tests/test_attention_types.py`` (``test_fast_path_equals_reference``: outputs and
gradients, both branches, with key dropout; ``test_fast_path_gradcheck_finite_differences``).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from .layout import GraphSegments

#: Graphs with at least this many nodes take :class:`_GraphFavor`.
BIG_GRAPH = 64
#: Rows per block in :class:`_GraphFavor`, and per chunk for the graphs below :data:`BIG_GRAPH`.
CHUNK_ROWS = 2048


def _blocks(n: int):
    for s in range(0, n, CHUNK_ROWS):
        yield slice(s, min(s + CHUNK_ROWS, n))


class _GraphFavor(torch.autograd.Function):
    r"""FAVOR+ attention of one graph's nodes with each other, in blocks of rows.

    ``q, k`` (scaled by ``d_head^{-1/4}``), ``v [n, H, d_head]``, ``omega [m, d_head]``,
    ``keep [n, H]`` or ``None`` -> ``[n, H, d_head]``. With ``u = x W^T``:
    ``phi_k = exp(u_k - |k|^2 / 2 - c)``, ``c [H, 1, m]`` the graph's maximum per head and
    feature, and ``phi_q = exp(u_q + c - max_r(u_q + c))`` (the reference's query features
    times a per-row constant: ``|q|^2 / 2`` and ``1 / sqrt(m)`` cancel in the ratio); so the
    denominator is at least 1. One pass over
    key blocks sums ``S = sum_j phi_k_j [keep_j v_j | 1]`` (``[H, m, d_head + 1]``: numerator
    and denominator in one matmul), one over query blocks gives ``phi_q S``. Blocks are
    head-major (``[H, rows, m]``, batched matmuls over heads); no ``[n, H, m]`` tensor is
    kept: the backward recomputes each block's features.
    """

    @staticmethod
    def forward(ctx, q, k, v, omega, keep):
        n, H, dh = q.shape
        qt, kt = q.transpose(0, 1).contiguous(), k.transpose(0, 1).contiguous()  # H, n, dh
        vt = _values(v, keep)  # H, n, dh + 1
        wt = omega.t()
        c = q.new_full((H, 1, omega.size(0)), -math.inf)  # key stabiliser per head and feature
        for b in _blocks(n):
            kb = kt[:, b]
            c = torch.maximum(c, (kb @ wt).sub_(kb.pow(2).sum(-1, keepdim=True).mul_(0.5)).amax(1, keepdim=True))
        s = q.new_zeros(H, omega.size(0), dh + 1)
        for b in _blocks(n):
            s.baddbmm_(_key_features(kt[:, b], wt, c).transpose(1, 2), vt[:, b])
        r = torch.empty_like(vt)  # H, n, dh + 1: numerator | denominator
        for b in _blocks(n):
            torch.bmm(_query_features(qt[:, b], wt, c), s, out=r[:, b])
        den = r[..., dh:]
        out = r[..., :dh] / den
        ctx.save_for_backward(qt, kt, vt, omega, keep, c, s, out, den)
        return out.transpose(0, 1)

    @staticmethod
    @once_differentiable
    def backward(ctx, dout):
        qt, kt, vt, omega, keep, c, s, out, den = ctx.saved_tensors
        H, n, dh = out.shape
        wt = omega.t()
        do = dout.transpose(0, 1)  # H, n, dh
        g = torch.cat([do, -(do * out).sum(-1, keepdim=True)], -1).div_(den)  # d numerator | d denominator
        dq, dk, dv = torch.empty_like(qt), torch.empty_like(kt), torch.empty_like(vt)
        ds = torch.zeros_like(s)
        for b in _blocks(n):
            phi = _query_features(qt[:, b], wt, c)  # H, rows, m
            ds.baddbmm_(phi.transpose(1, 2), g[:, b])
            torch.bmm(torch.bmm(g[:, b], s.transpose(1, 2)).mul_(phi), omega.expand(H, -1, -1), out=dq[:, b])
        for b in _blocks(n):
            phi = _key_features(kt[:, b], wt, c)
            torch.bmm(phi, ds, out=dv[:, b])
            dz = torch.bmm(vt[:, b], ds.transpose(1, 2)).mul_(phi)
            torch.bmm(dz, omega.expand(H, -1, -1), out=dk[:, b]).sub_(dz.sum(-1, keepdim=True) * kt[:, b])
        dv = dv[..., :dh].transpose(0, 1)
        if keep is not None:
            dv = dv * keep[..., None]
        return dq.transpose(0, 1), dk.transpose(0, 1), dv, None, None


def _query_features(x: Tensor, wt: Tensor, c: Tensor) -> Tensor:
    u = (x @ wt).add_(c)  # H, rows, m
    return u.sub_(u.amax(-1, keepdim=True)).exp_()


def _key_features(x: Tensor, wt: Tensor, c: Tensor) -> Tensor:
    u = x @ wt
    return u.sub_(x.pow(2).sum(-1, keepdim=True).mul_(0.5)).sub_(c).exp_()


def _values(v: Tensor, keep: Tensor | None) -> Tensor:
    """``[keep v | 1]``, head-major: ``[H, n, d_head + 1]``."""
    vk = v if keep is None else v * keep[..., None]
    return torch.cat([vk, vk.new_ones(vk.shape[:-1] + (1,))], -1).transpose(0, 1).contiguous()


def performer_fast(q: Tensor, k: Tensor, v: Tensor, omega: Tensor, segments: GraphSegments,
                   key_keep: Tensor | None = None, features=None, big_graph: int | None = None) -> Tensor:
    """Same arguments and result as :func:`siggate.nn.performer.performer_reference`:
    ``q, k`` (scaled by ``d_head^{-1/4}``), ``v [N, H, d_head]``, ``omega [m, d_head]``,
    ``key_keep [N, H]`` (optional) -> ``[N, H, d_head]``. ``features``: the reference's
    feature map (:func:`~siggate.nn.performer.favor_features`), used for the graphs below
    :data:`BIG_GRAPH` nodes (``big_graph``, if given); needed only when there are such graphs.
    Graphs from ``big_graph`` nodes on take :class:`_GraphFavor` (softmax features only: a
    ``big_graph`` beyond every graph's size sends all graphs through ``features``)."""
    big, small = segments.runs(BIG_GRAPH if big_graph is None else big_graph)
    pieces, rows = [], []
    # one dtype throughout: under autocast q, k, v arrive at the autocast dtype while omega stays
    # float32, and the backward runs outside autocast, where the mixed matmuls would fail
    omega_q = omega.to(q.dtype)
    for _, a, b in big:
        keep = None if key_keep is None else key_keep[a:b]
        pieces.append(_GraphFavor.apply(q[a:b], k[a:b].to(q.dtype), v[a:b].to(q.dtype), omega_q, keep))
        rows.append((a, b))
    if len(pieces) == 1 and rows[0] == (0, segments.num_nodes):
        return pieces[0]  # one graph: no reassembly
    order = [torch.arange(a, b, device=v.device) for a, b in rows]
    if small is not None:
        batch = segments.batch[small]
        phi_q, phi_k = features(q[small], k[small], omega, batch, segments.num_graphs)
        weighted = phi_k if key_keep is None else phi_k * key_keep[small][..., None]
        pieces.append(_small_graphs(phi_q, phi_k, weighted, v[small], batch, segments.num_graphs))
        order.append(small)
    out = v.new_zeros(v.shape)
    if not pieces:
        return out
    return out.index_copy(0, torch.cat(order), torch.cat(pieces))


def _small_graphs(phi_q: Tensor, phi_k: Tensor, weighted: Tensor, v: Tensor, batch: Tensor, num_graphs: int) -> Tensor:
    """The reference's outer products on the nodes of the small graphs (``[n, H, ...]``
    rows, graph ids ``batch``, sorted) in chunks; each chunk's sums cover only the graphs it
    touches (contiguous)."""
    H, m, dh = phi_k.size(1), phi_k.size(2), v.size(-1)
    sums, ids = [], []
    for r in _blocks(v.size(0)):
        g = batch[r]
        g0, g1 = int(g[0]), int(g[-1])
        outer = weighted[r][..., :, None] * v[r][..., None, :]  # c, H, m, dh
        sums.append(outer.new_zeros(g1 - g0 + 1, H, m, dh).index_add(0, g - g0, outer))
        ids.append(torch.arange(g0, g1 + 1, device=v.device))
    s = v.new_zeros(num_graphs, H, m, dh).index_add(0, torch.cat(ids), torch.cat(sums))  # G, H, m, dh
    z = phi_k.new_zeros(num_graphs, H, m).index_add(0, batch, phi_k)  # G, H, m
    outs = []
    for r in _blocks(v.size(0)):
        g = batch[r]
        num = torch.einsum("nhm,nhmd->nhd", phi_q[r], s[g])
        den = torch.einsum("nhm,nhm->nh", phi_q[r], z[g])
        outs.append(num / den[..., None])
    return torch.cat(outs)
