"""CPU attention kernels over a :class:`~siggate.nn.kernels.layout.PackedLayout`, with
hand-written backward passes.

What it computes: softmax attention ``dropout(softmax(q k^T / sqrt(d_head) + mask)) v`` of
every graph with itself, per size group of the layout, reading ``q, k, v`` straight from
the input-projection rows of the nodes:

* :func:`_core_forward` / :func:`_core_backward`: one gather builds every group's
  ``(3, g H, n, d_head)`` block; per group ``baddbmm`` (scale and key mask), softmax,
  dropout, ``bmm``; the backward uses ``dS = P_d * dP - P * rowsum(P_d * dP)`` and one
  gather back to projection rows. Groups of :data:`CHUNKED_MIN_NODES` nodes or more run
  chunked (:func:`_chunk_forward` / :func:`_chunk_backward`: memory ``O(n * chunk)``,
  probabilities and dropout masks recomputed in the backward from a seed);
* :class:`PackedCore`: that attention on ``q, k, v [N, H, d_head]`` as one autograd node
  (:func:`packed_core_cpu` picks it under autograd). ``q, k, v`` are read in place when
  they are column blocks of one projection (:func:`qkv_rows`);
* :class:`ProjectedCore`: the input projection and that attention as one autograd node
  (what :meth:`siggate.nn.attention.GatedAttentionBase.gated` runs in training on the fast
  path, through :class:`~siggate.nn.kernels.packed.PackedAttend`), returning the
  projection's other columns untouched. Nothing here knows the gate: ``gated`` applies it
  around the core.

Reference: :meth:`siggate.nn.GatedMultiheadAttention.forward` with ``impl="reference"``
(padded batch, ``q k^T``, mask, softmax spelled out, plain autograd). Pinned by
``tests/test_fast_path.py``: ``test_training_step_fast_equals_readable`` (outputs and
every gradient, every gate kind and position, several groupings, chunked),
``test_packed_core_gradcheck_with_dropout``,
``test_projected_core_gradcheck_and_equals_projection_then_core``, ``test_dropout_keep_is_bernoulli`` and
``test_chunked_training_memory_is_not_quadratic``. What each piece bought:
``benchmarks/README.md`` (steps 3, 5, 7, 9 and 11).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable

from .layout import PackedLayout, dropout_keep

#: On CPU in training, groups with more nodes than this use the chunked kernel
#: (memory ``O(n * chunk)`` instead of ``O(n^2)``, see :func:`_chunk_forward`).
CHUNKED_MIN_NODES = 384
#: Query rows per chunk of the chunked kernel.
CHUNK_ROWS = 128


def _chunk_forward(q, k, v, bias, p, scale, chunk, gen, out):
    """Chunked ``dropout(softmax(q k^T scale + bias)) v`` into ``out``; returns the
    per-row log-sum-exp. ``q, k, v, out (B, n, d_head)``, ``bias (B, 1, n)`` or None."""
    n = q.size(1)
    lse = q.new_empty(q.shape[:2])
    kt = k.transpose(1, 2)
    for s in range(0, n, chunk):
        sc = torch.bmm(q[:, s : s + chunk], kt).mul_(scale)  # B, c, n
        if bias is not None:
            sc.add_(bias)
        m = sc.logsumexp(dim=-1, keepdim=True)
        lse[:, s : s + chunk] = m.squeeze(-1)
        a = sc.sub_(m).exp_()
        if p > 0.0:
            a.mul_(dropout_keep(a.shape, p, a, gen))
        torch.bmm(a, v, out=out[:, s : s + chunk])
    return lse


def _chunk_backward(q, k, v, bias, out, lse, d_out, p, scale, chunk, gen, dq, dk, dv):
    """Backward of :func:`_chunk_forward`, recomputing probabilities and dropout masks
    chunk by chunk (``gen`` replays the forward's draws); writes ``dq, dk, dv``."""
    n = q.size(1)
    kt = k.transpose(1, 2)
    delta = (d_out * out).sum(-1, keepdim=True)  # B, n, 1
    dk.zero_()
    dv.zero_()
    for s in range(0, n, chunk):
        sl = slice(s, s + chunk)
        sc = torch.bmm(q[:, sl], kt).mul_(scale)
        if bias is not None:
            sc.add_(bias)
        a = sc.sub_(lse[:, sl, None]).exp_()  # probabilities, B, c, n
        do = d_out[:, sl]
        dp = torch.bmm(do, v.transpose(1, 2))  # B, c, n
        if p > 0.0:
            keep = dropout_keep(a.shape, p, a, gen)
            dv.baddbmm_((a * keep).transpose(1, 2), do)
            dp.mul_(keep)
        else:
            dv.baddbmm_(a.transpose(1, 2), do)
        ds = dp.sub_(delta[:, sl]).mul_(a)
        torch.baddbmm(dq[:, sl], ds, k, beta=0.0, alpha=scale, out=dq[:, sl])
        dk.baddbmm_(ds.transpose(1, 2), q[:, sl], alpha=scale)


def _core_forward(rows: Tensor, stride: int, layout: PackedLayout, heads: int, p: float, scale: float,
                  train: bool):
    """Softmax attention (with dropout ``p``) of every size group of ``layout``, reading
    ``q, k, v`` from projection ``rows`` (see :func:`qkv_rows`, :func:`_project`).

    One gather builds every group's ``(3, g H, n, d_head)`` block; per group a
    ``baddbmm`` (scale and key mask in one call), softmax, dropout and ``bmm`` write into
    the concatenated output; one gather returns node order. Groups with at least
    :data:`CHUNKED_MIN_NODES` nodes run chunked (training, or dropout) or through the CPU
    flash kernel (inference): memory ``O(n)``, not ``O(n^2)``.

    Returns ``(o [num_nodes * H, d_head], state)``; ``state`` feeds
    :func:`_core_backward` when ``train``.
    """
    dh = rows.size(1)
    offs, boffs = layout.out_offsets(heads), layout.block_offsets(heads)
    blks = rows.index_select(0, layout.gather_all(heads, stride))
    outs = rows.new_empty(offs[-1], dh)
    saved, plan, seed = [], [], None
    for k, (g, n) in enumerate(layout.groups):
        q, kk, v = blks[boffs[k] : boffs[k + 1]].view(3, g * heads, n, dh).unbind(0)
        o = outs[offs[k] : offs[k + 1]].view(g * heads, n, dh)
        bias = layout.bias_bmm(k, heads, rows.dtype)
        if n >= CHUNKED_MIN_NODES:
            if train:
                if seed is None:
                    seed = int(torch.randint(0, 2**62, (1,)).item())
                gen = torch.Generator(device=rows.device).manual_seed(seed + k)
                saved.append(_chunk_forward(q, kk, v, bias, p, scale, CHUNK_ROWS, gen, o))
                plan.append("chunk")
            elif p > 0.0:
                _chunk_forward(q, kk, v, bias, p, scale, CHUNK_ROWS, None, o)
            else:  # 4-D, or SDPA would pick its O(n^2) math kernel
                v4 = [t.view(g, heads, n, dh) for t in (q, kk, v)]
                o.view(g, heads, n, dh).copy_(F.scaled_dot_product_attention(*v4, attn_mask=layout.bias(k, rows.dtype)))
            continue
        if bias is None:
            s = torch.baddbmm(o.new_empty(1, 1, 1), q, kk.transpose(1, 2), beta=0.0, alpha=scale)
        else:
            s = torch.baddbmm(bias, q, kk.transpose(1, 2), alpha=scale)  # gH, n, n
        a = torch.softmax(s, dim=-1)
        if p > 0.0:
            ad = a * dropout_keep(a.shape, p, a) if train else a.mul_(dropout_keep(a.shape, p, a))
        else:
            ad = a
        torch.bmm(ad, v, out=o)
        if train:
            saved += [a, ad]
            plan.append("math")
    return outs.index_select(0, layout.out_index(heads)), (blks, outs, saved, plan, seed)


def _core_backward(d_o: Tensor, layout: PackedLayout, heads: int, p: float, scale: float, state,
                   extra_rows: int = 0) -> Tensor:
    """Backward of :func:`_core_forward` for ``d_o [num_nodes * H, d_head]``.

    ``dS = P_d * dP - P * rowsum(P_d * dP)`` (``P_d`` the dropped probabilities); each
    group's ``dq, dk, dv`` go into one buffer laid out like the forward's blocks, with
    ``extra_rows`` free rows appended (for gate gradients); gather it with
    :meth:`PackedLayout.block_source` to get projection-row gradients. Padding never
    leaks: padded query rows get a zero output gradient, masked keys have probability 0.
    """
    blks, outs, saved, plan, seed = state
    dh = d_o.size(1)
    src, pad = layout.out_source(heads)
    d_outs = d_o.index_select(0, src)
    if pad is not None:
        d_outs.index_fill_(0, pad, 0.0)
    offs, boffs = layout.out_offsets(heads), layout.block_offsets(heads)
    d_blks = d_o.new_empty(boffs[-1] + extra_rows, dh)
    i = 0
    for k, ((g, n), mode) in enumerate(zip(layout.groups, plan)):
        do = d_outs[offs[k] : offs[k + 1]].view(g * heads, n, dh)
        q, kk, v = blks[boffs[k] : boffs[k + 1]].view(3, g * heads, n, dh).unbind(0)
        dq, dk, dv = d_blks[boffs[k] : boffs[k + 1]].view(3, g * heads, n, dh).unbind(0)
        if mode == "chunk":
            gen = torch.Generator(device=d_o.device).manual_seed(seed + k)
            o = outs[offs[k] : offs[k + 1]].view(g * heads, n, dh)
            _chunk_backward(q, kk, v, layout.bias_bmm(k, heads, d_o.dtype), o, saved[i], do, p, scale, CHUNK_ROWS,
                            gen, dq, dk, dv)
            i += 1
        else:
            a, ad = saved[i : i + 2]
            i += 2
            torch.bmm(ad.transpose(1, 2), do, out=dv)
            x = torch.bmm(do, v.transpose(1, 2)).mul_(ad)  # P_d * dP, gH, n, n
            ds = x.addcmul_(a, x.sum(-1, keepdim=True), value=-1.0)
            torch.baddbmm(dq, ds, kk, beta=0.0, alpha=scale, out=dq)
            torch.baddbmm(dk, ds.transpose(1, 2), q, beta=0.0, alpha=scale, out=dk)
    return d_blks


def qkv_rows(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, int]:
    """``q, k, v [N, H, d_head]`` as rows of ``d_head`` values: ``(rows, stride)`` with part
    ``j`` (q, k, v), head ``h`` of node ``i`` at row ``i * stride + j H + h``.

    When the three are the adjacent column blocks of one projection ``[N, W]`` (what
    :meth:`~siggate.nn.attention.GatedAttentionBase.split` returns) and ``W`` is a multiple
    of ``d_head`` (no gate, an elementwise gate), the rows are a view of that projection
    (``stride = W / d_head``); otherwise (a headwise gate: ``W = 3d + H``), or when
    autograd would have to see through the view (it cannot split it back into ``q, k, v``),
    they are stacked into a copy (``stride = 3H``)."""
    n, H, dh = q.shape
    es = q.element_size()
    w = q.stride(0)
    tracked = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
    # n > 1: a size-1 dimension's stride says nothing about the memory
    if (n > 1 and not tracked and q.stride()[1:] == (dh, 1) and k.stride() == q.stride() == v.stride()
            and w % dh == 0 and k.data_ptr() == q.data_ptr() + H * dh * es and v.data_ptr() == q.data_ptr() + 2 * H * dh * es):
        return q.as_strided((n * (w // dh), dh), (dh, 1)), w // dh
    return torch.stack([q, k, v], 1).view(n * 3 * H, dh), 3 * H


class PackedCore(torch.autograd.Function):
    """Softmax attention of every graph with itself over a
    :class:`~siggate.nn.kernels.layout.PackedLayout`, as one autograd node:
    :func:`_core_forward` forward, :func:`_core_backward` backward.

    ``q, k, v [N, H, d_head]``, dropout ``p``, ``scale`` -> ``o [N, H, d_head]``; the
    gradients of ``q, k, v`` come back as views of one buffer (one gather, no scatter-add).
    """

    @staticmethod
    def forward(ctx, q, k, v, layout, p, scale):
        n, H, dh = q.shape
        rows, stride = qkv_rows(q, k, v)
        o, state = _core_forward(rows, stride, layout, H, p, scale, True)
        blks, outs, saved, plan, seed = state
        ctx.save_for_backward(blks, outs, *saved)
        ctx.layout, ctx.p, ctx.scale, ctx.plan, ctx.seed = layout, p, scale, plan, seed
        return o.view(n, H, dh)

    @staticmethod
    @once_differentiable
    def backward(ctx, d_o):
        blks, outs, *saved = ctx.saved_tensors
        n, H, dh = d_o.shape
        state = (blks, outs, saved, ctx.plan, ctx.seed)
        d_blks = _core_backward(d_o.contiguous().view(n * H, dh), ctx.layout, H, ctx.p, ctx.scale, state)
        d = d_blks.index_select(0, ctx.layout.block_source(H, 3 * H)).view(n, 3, H, dh)
        return d[:, 0], d[:, 1], d[:, 2], None, None, None


def _project(x: Tensor, weight: Tensor, bias: Tensor | None, dh: int) -> tuple[Tensor, Tensor, int]:
    """The input projection ``x W^T + b`` ``[N, W]`` written with a row stride that is a
    multiple of ``d_head`` (spare columns after ``W`` when needed, e.g. a headwise gate's
    ``W = 3d + H``), so that it is also ``rows [N * stride, d_head]`` without a copy.
    Returns ``(proj, rows, stride)``."""
    n, width = x.size(0), weight.size(0)
    stride = -(-width // dh)
    if stride * dh == width:
        proj = torch.addmm(bias, x, weight.t()) if bias is not None else x.mm(weight.t())
        return proj, proj.view(n * stride, dh), stride
    buf = x.new_empty(n, stride * dh)
    proj = buf[:, :width]
    if bias is not None:
        torch.addmm(bias, x, weight.t(), out=proj)
    else:
        torch.mm(x, weight.t(), out=proj)
    return proj, buf.view(n * stride, dh), stride


class ProjectedCore(torch.autograd.Function):
    """The input projection ``proj = x W^T + b`` (``[N, 3d + r]``: ``q | k | v`` and ``r``
    more columns) and :class:`PackedCore`'s attention on its ``q, k, v`` as one autograd
    node. Returns ``o [N, H, d_head]`` and the other ``r`` columns ``[N, r]`` untouched (the
    attention's gate logits; nothing here knows what they are). The same operations as the
    projection followed by :class:`PackedCore`; the projection is written ``d_head``-aligned
    (:func:`_project`), so ``q, k, v`` are read in place, and the backward gathers the
    projection's gradient, the ``r`` columns' included, in one go before
    ``dx = dproj W``, ``dW = dproj^T x``, ``db``."""

    @staticmethod
    def forward(ctx, x, w, b, d, layout, heads, p, scale):
        n, width, dh = x.size(0), w.size(0), d // heads
        proj, rows, stride = _project(x, w, b, dh)
        o, state = _core_forward(rows, stride, layout, heads, p, scale, True)
        blks, outs, saved, plan, seed = state
        ctx.save_for_backward(x, w, blks, outs, *saved)
        ctx.layout, ctx.p, ctx.scale, ctx.plan, ctx.seed = layout, p, scale, plan, seed
        ctx.dims = (n, width, d, heads, stride, b is not None)
        return o.view(n, heads, dh), proj[:, 3 * d :]

    @staticmethod
    @once_differentiable
    def backward(ctx, d_o, d_rest):
        x, w, blks, outs, *saved = ctx.saved_tensors
        n, width, d, heads, stride, has_bias = ctx.dims
        dh, extra = d // heads, stride - 3 * heads  # rows of the other columns, carried through the gather
        state = (blks, outs, saved, ctx.plan, ctx.seed)
        d_blks = _core_backward(d_o.contiguous().view(n * heads, dh), ctx.layout, heads, ctx.p, ctx.scale, state,
                                n * extra)
        if extra:
            d_blks[-n * extra :].view(n, extra * dh)[:, : width - 3 * d].copy_(d_rest)
        dy = d_blks.index_select(0, ctx.layout.block_source(heads, stride)).view(n, stride * dh)
        if stride * dh != width:
            dy = dy[:, :width]
        dx = dy.mm(w) if ctx.needs_input_grad[0] else None
        return dx, dy.t().mm(x), (dy.sum(0) if has_bias else None), None, None, None, None, None


def projected_core_cpu(x: Tensor, weight: Tensor, bias: Tensor | None, d: int, layout: PackedLayout, heads: int,
                       p: float) -> tuple[Tensor, Tensor]:
    """The input projection and the CPU attention core: :class:`ProjectedCore` under
    autograd, else :func:`_project` and :func:`_core_forward`'s batched matmuls.
    ``x [N, d_in]`` -> ``(o [N, H, d_head], the projection's columns after q | k | v [N, r])``."""
    scale = 1.0 / math.sqrt(d // heads)
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad)):
        return ProjectedCore.apply(x, weight, bias, d, layout, heads, p, scale)
    proj, rows, stride = _project(x, weight, bias, d // heads)
    o = _core_forward(rows, stride, layout, heads, p, scale, False)[0]
    return o.view(x.size(0), heads, d // heads), proj[:, 3 * d :]


def packed_core_cpu(q: Tensor, k: Tensor, v: Tensor, layout: PackedLayout, p: float) -> Tensor:
    """The CPU attention core: :class:`PackedCore` under autograd, else the batched matmuls
    of :func:`_core_forward` alone. ``q, k, v [N, H, d_head]`` -> ``[N, H, d_head]``."""
    n, H, dh = q.shape
    scale = 1.0 / math.sqrt(dh)
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return PackedCore.apply(q, k, v, layout, p, scale)
    rows, stride = qkv_rows(q, k, v)
    return _core_forward(rows, stride, layout, H, p, scale, False)[0].view(n, H, dh)
