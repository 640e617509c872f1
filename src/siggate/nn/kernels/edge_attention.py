"""Fast path of the ``"exphormer"`` attention: softmax attention over (query, key) pairs.

What it computes: exactly :func:`siggate.nn.exphormer.sparse_attention`. The reference
gathers ``q[dst]``, ``k[src]`` and ``v[src]`` for all ``P`` pairs at once and leaves the
softmax to autograd (``[P, d]`` and several ``[P, H]`` tensors kept for the backward).
Here the pairs' part (with each pair's edge scale ``w[edge_id]`` on its score) is one
autograd node, :class:`_PairSoftmax`, that works like a flash attention on sparse rows: the pairs are sorted by query, so it walks blocks of whole query
rows (about :data:`PAIR_CHUNK` pairs each), computes scores, softmax and the weighted sum
of values per block, and keeps only the output and each row's log-sum-exp ``[N, H]``.
The backward recomputes a block's probabilities from the log-sum-exp and uses
``dS = P * (keep * dP - rowsum(do * o) + dlse)`` (and ``dw[edge_id] += dS q k``), so no ``[P, d]`` or ``[P, H]`` tensor
lives between forward and backward (the dropout multipliers apart). The extra keys of
each query (the virtual nodes) join through the log-sum-exp:
``out = exp(lse_pairs - L) o_pairs + sum_r exp(s_r - L) w_r`` with ``L`` the log-sum-exp
over both.

Pinned by ``tests/test_attention_types.py`` (``test_fast_path_equals_reference``: outputs
and gradients, with dropout and virtual nodes, several blocks;
``test_pair_softmax_gradcheck``; ``test_fast_path_gradcheck_finite_differences``).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

#: Pairs per block of whole query rows in :class:`_PairSoftmax`.
PAIR_CHUNK = 8192


def _row_blocks(graph) -> list[tuple[int, int, int, int]]:
    """``(first row, end row, first pair, end pair)`` of consecutive blocks of whole query
    rows with about :data:`PAIR_CHUNK` pairs each (cached on ``graph``)."""
    key = ("row_blocks", PAIR_CHUNK)
    if key not in graph.cache:
        ptr = graph.row_ptr.cpu().numpy()
        n, total = len(ptr) - 1, int(ptr[-1])
        cuts = np.searchsorted(ptr, np.arange(PAIR_CHUNK, total, PAIR_CHUNK), side="right") - 1
        rows = np.unique(np.concatenate([[0], cuts, [n]]))
        graph.cache[key] = [(int(a), int(b), int(ptr[a]), int(ptr[b])) for a, b in zip(rows[:-1], rows[1:])]
    return graph.cache[key]


class _PairSoftmax(torch.autograd.Function):
    """For queries ``i`` and their pairs ``p = (src_p, i)``: ``o_i = sum_p P_p keep_p
    v[src_p]`` and ``lse_i = log sum_p exp(s_p)``, with ``s_p = scale * sum_c q_ic
    k[src_p]_c w_pc`` (``w_p = w[edge_id_p]``; ``w`` ``None``: ones) and ``P_p = exp(s_p -
    lse_i)``, per head. ``q, k, v [N, H, d_head]``, ``w [T, H, d_head]`` or ``None``,
    ``keep [P, H]`` or ``None`` -> ``(o [N, H, d_head], lse [N, H])``."""

    @staticmethod
    def forward(ctx, q, k, v, w, keep, graph, scale):
        N, H, dh = q.shape
        o = v.new_empty(N, H, dh)
        lse = q.new_empty(N, H)
        for r0, r1, p0, p1 in _row_blocks(graph):
            local, src = graph.dst[p0:p1] - r0, graph.src[p0:p1]
            qk = q[r0:r1].index_select(0, local) * k.index_select(0, src)  # c, H, dh
            if w is not None:
                qk.mul_(w.index_select(0, graph.edge_id[p0:p1]))
            s = qk.sum(-1).mul_(scale)  # c, H
            offsets = graph.row_ptr[r0 : r1 + 1] - p0
            m = torch.segment_reduce(s, "max", offsets=offsets, axis=0, unsafe=True)  # rows, H
            e = s.sub_(m.index_select(0, local)).exp_()
            z = e.new_zeros(r1 - r0, H).index_add_(0, local, e)
            lse[r0:r1] = z.log().add_(m)
            p = e.div_(z.index_select(0, local))
            if keep is not None:
                p.mul_(keep[p0:p1])
            o[r0:r1] = v.new_zeros(r1 - r0, H, dh).index_add_(0, local, v.index_select(0, src).mul_(p[..., None]))
        ctx.save_for_backward(q, k, v, w, keep, o, lse)
        ctx.graph, ctx.scale = graph, scale
        return o, lse

    @staticmethod
    @once_differentiable
    def backward(ctx, do, dlse):
        q, k, v, w, keep, o, lse = ctx.saved_tensors
        graph, scale = ctx.graph, ctx.scale
        do = do.contiguous()
        delta = (do * o).sum(-1)  # N, H: rowsum(P keep dP)
        if dlse is not None:
            delta = delta - dlse
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        dw = None if w is None else torch.zeros_like(w)
        for r0, r1, p0, p1 in _row_blocks(graph):
            local, src = graph.dst[p0:p1] - r0, graph.src[p0:p1]
            q_p, k_p, v_p = q[r0:r1].index_select(0, local), k.index_select(0, src), v.index_select(0, src)
            w_p = None if w is None else w.index_select(0, graph.edge_id[p0:p1])
            qk = q_p * k_p  # c, H, dh
            p = (qk if w_p is None else qk * w_p).sum(-1).mul_(scale).sub_(lse[r0:r1].index_select(0, local)).exp_()
            do_p = do[r0:r1].index_select(0, local)
            dp = (do_p * v_p).sum(-1)
            pk = p if keep is None else p * keep[p0:p1]
            dv.index_add_(0, src, do_p.mul_(pk[..., None]))
            if keep is not None:
                dp.mul_(keep[p0:p1])
            ds = dp.sub_(delta[r0:r1].index_select(0, local)).mul_(p).mul_(scale)[..., None]  # c, H, 1
            if w_p is not None:
                dw.index_add_(0, graph.edge_id[p0:p1], qk.mul_(ds))
                k_p.mul_(w_p)
                q_p.mul_(w_p)
            dq[r0:r1].index_add_(0, local, k_p.mul_(ds))
            dk.index_add_(0, src, q_p.mul_(ds))
        return dq, dk, dv, dw, None, None, None


def sparse_attention_fast(q: Tensor, k: Tensor, v: Tensor, graph, extra_logits: Tensor | None = None,
                          extra_values: Tensor | None = None, edge_keep: Tensor | None = None,
                          extra_keep: Tensor | None = None, edge_scale: Tensor | None = None) -> Tensor:
    """Same arguments and result as :func:`siggate.nn.exphormer.sparse_attention` (``graph``
    an :class:`~siggate.nn.exphormer.AttentionGraph`: ``src``, ``dst`` sorted by query,
    ``edge_id``, ``row_ptr``, ``cache``)."""
    o, lse = _PairSoftmax.apply(q, k, v, edge_scale, edge_keep, graph, 1.0 / math.sqrt(q.size(-1)))
    if extra_logits is None:
        return o
    total = torch.logaddexp(lse, extra_logits.logsumexp(-1))  # N, H: over pairs and extra keys
    beta = torch.exp(extra_logits - total[..., None])  # N, H, r
    if extra_keep is not None:
        beta = beta * extra_keep
    out = torch.exp(lse - total)[..., None] * o
    for r in range(beta.size(-1)):  # extra_values may be a broadcast view: no [N, H, r, d_head] product
        out = out + beta[..., r, None] * extra_values[:, :, r]
    return out
