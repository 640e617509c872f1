"""Fast path of the ``"exphormer"`` attention: softmax attention over (query, key) pairs.

What it computes: exactly :func:`siggate.nn.exphormer.sparse_attention` with ``fast=False``. The
reference gathers ``q[dst]``, ``k[src]`` and ``v[src]`` for all ``P`` pairs at once
(``[P, d]`` tensors, which autograd keeps for the backward); here the two pair-wise
products are autograd nodes with hand-written backward passes that walk the pairs in
chunks of :data:`PAIR_CHUNK`, so no ``[P, d]`` tensor is formed or kept (memory
``O(P H)``, the scores) and each chunk's gathers stay in cache:

* :class:`_PairDot`: ``s[p, h] = <a[dst_p, h], b[src_p, h]>`` (an SDDMM); backward
  ``da[dst_p] += ds_p b[src_p]``, ``db[src_p] += ds_p a[dst_p]``;
* :class:`_PairAggregate`: ``out[i, h] = sum_{p: dst_p = i} w[p, h] b[src_p, h]`` (an
  SpMM); backward ``dw[p] = <dout[dst_p], b[src_p]>``, ``db[src_p] += w_p dout[dst_p]``.

:func:`siggate.nn.exphormer.sparse_attention` (``fast=True``) swaps these, and
:func:`pair_max` (the softmax stabiliser, ``torch.segment_reduce`` over the CSR
``row_ptr``: pairs are sorted by query), for its plain gathers; the softmax between them
stays plain autograd on ``[P, H]``. Pinned by ``tests/test_attention_types.py``
(``test_fast_path_equals_reference``, ``test_pair_kernels_gradcheck``); what the chunking
bought is in ``benchmarks/README.md``.
"""

from __future__ import annotations

import torch
from torch import Tensor

#: Pairs per chunk in :class:`_PairDot` and :class:`_PairAggregate`.
PAIR_CHUNK = 8192


def _chunks(total: int):
    for s in range(0, total, PAIR_CHUNK):
        yield slice(s, min(s + PAIR_CHUNK, total))


class _PairDot(torch.autograd.Function):
    """``[P, H]`` scores ``scale * <a[dst_p, h], b[src_p, h]>`` of ``a, b [N, H, d_head]``."""

    @staticmethod
    def forward(ctx, a, b, src, dst, scale):
        out = a.new_empty(src.numel(), a.size(1))
        for c in _chunks(src.numel()):
            prod = a.index_select(0, dst[c]).mul_(b.index_select(0, src[c]))  # c, H, dh
            torch.sum(prod, -1, out=out[c])
        ctx.save_for_backward(a, b, src, dst)
        ctx.scale = scale
        return out.mul_(scale)

    @staticmethod
    def backward(ctx, ds):
        a, b, src, dst = ctx.saved_tensors
        ds = ds * ctx.scale
        da = torch.zeros_like(a) if ctx.needs_input_grad[0] else None
        db = torch.zeros_like(b) if ctx.needs_input_grad[1] else None
        for c in _chunks(src.numel()):
            w = ds[c].unsqueeze(-1)  # c, H, 1
            if da is not None:
                da.index_add_(0, dst[c], b.index_select(0, src[c]).mul_(w))
            if db is not None:
                db.index_add_(0, src[c], a.index_select(0, dst[c]).mul_(w))
        return da, db, None, None, None


class _PairAggregate(torch.autograd.Function):
    """``[N, H, d_head]`` sums ``out[i] = sum_{p: dst_p = i} w[p] b[src_p]`` for
    ``w [P, H]``, ``b [N, H, d_head]``."""

    @staticmethod
    def forward(ctx, w, b, src, dst, num_nodes):
        out = b.new_zeros(num_nodes, b.size(1), b.size(2))
        for c in _chunks(src.numel()):
            out.index_add_(0, dst[c], b.index_select(0, src[c]).mul_(w[c].unsqueeze(-1)))
        ctx.save_for_backward(w, b, src, dst)
        return out

    @staticmethod
    def backward(ctx, dout):
        w, b, src, dst = ctx.saved_tensors
        dw = w.new_empty(w.shape) if ctx.needs_input_grad[0] else None
        db = torch.zeros_like(b) if ctx.needs_input_grad[1] else None
        for c in _chunks(src.numel()):
            g = dout.index_select(0, dst[c])  # c, H, dh
            if dw is not None:
                torch.sum(g * b.index_select(0, src[c]), -1, out=dw[c])
            if db is not None:
                db.index_add_(0, src[c], g.mul_(w[c].unsqueeze(-1)))
        return dw, db, None, None, None


def pair_dot(a: Tensor, b: Tensor, graph, scale: float) -> Tensor:
    """``[P, H]``: ``scale * <a[dst_p], b[src_p]>`` per head, chunked (:class:`_PairDot`)."""
    return _PairDot.apply(a, b, graph.src, graph.dst, scale)


def pair_aggregate(w: Tensor, b: Tensor, graph) -> Tensor:
    """``[N, H, d_head]``: ``sum_{p: dst_p = i} w_p b[src_p]``, chunked (:class:`_PairAggregate`)."""
    return _PairAggregate.apply(w, b, graph.src, graph.dst, graph.num_nodes)


def pair_max(logits: Tensor, graph) -> Tensor:
    """``[N, H]``: the maximum of each query's pairs (pairs sorted by query, CSR ``row_ptr``)."""
    return torch.segment_reduce(logits, "max", offsets=graph.row_ptr, axis=0, unsafe=True)
