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
* :class:`_GroupedAttention`: the core on a given projection (optionally gated) as one
  autograd node (gate positions ``"value"`` and ``"post"``, and autocast);
* :class:`_AttentionBranch`: the whole branch ``[x +] out_proj(attention(in_proj(x)) * gate)``
  as one autograd node (no gate or the output gate).

Reference: :meth:`siggate.nn.GatedMultiheadAttention.forward` with ``impl="reference"``
(padded batch, ``q k^T``, mask, softmax spelled out, plain autograd). Pinned by
``tests/test_fast_path.py``: ``test_training_step_fast_equals_readable`` (outputs and
every gradient, every gate kind and position, several groupings, chunked),
``test_grouped_attention_gradcheck_with_dropout``,
``test_attention_branch_gradcheck_with_dropout``, ``test_dropout_keep_is_bernoulli`` and
``test_chunked_training_memory_is_not_quadratic``. What each piece bought:
``benchmarks/README.md`` (steps 3, 5, 7, 9 and 11).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from .layout import PackedLayout

#: On CPU in training, groups with more nodes than this use the chunked kernel
#: (memory ``O(n * chunk)`` instead of ``O(n^2)``, see :func:`_chunk_forward`).
CHUNKED_MIN_NODES = 384
#: Query rows per chunk of the chunked kernel.
CHUNK_ROWS = 128


def _dropout_keep(shape, p: float, like: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """Dropout multiplier: ``1 / (1 - p)`` with probability ``1 - p``, else 0.

    ``rand >= p`` is the same Bernoulli(1 - p) draw as ``bernoulli_``, but cheaper on CPU
    (measured in ``benchmarks/README.md``, step 3)."""
    u = torch.rand(shape, dtype=like.dtype, device=like.device, generator=generator)
    return u.ge_(p).mul_(1.0 / (1.0 - p))


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
            a.mul_(_dropout_keep(a.shape, p, a, gen))
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
            keep = _dropout_keep(a.shape, p, a, gen)
            dv.baddbmm_((a * keep).transpose(1, 2), do)
            dp.mul_(keep)
        else:
            dv.baddbmm_(a.transpose(1, 2), do)
        ds = dp.sub_(delta[:, sl]).mul_(a)
        torch.baddbmm(dq[:, sl], ds, k, beta=0.0, alpha=scale, out=dq[:, sl])
        dk.baddbmm_(ds.transpose(1, 2), q[:, sl], alpha=scale)


def _qkv_rows(proj: Tensor, d: int, dh: int) -> tuple[Tensor, int, bool]:
    """``proj [num_nodes, 3d + g]`` as rows of ``d_head`` values: ``(rows, stride, copied)``
    with ``q, k, v`` of node ``i``, part ``j``, head ``h`` at row ``i * stride + j H + h``.
    Without a copy when the width is a multiple of ``d_head`` (no gate, elementwise gate);
    otherwise (headwise gate) the ``q | k | v`` columns are copied out first."""
    n, width = proj.shape
    if proj.is_contiguous() and width % dh == 0:
        return proj.view(n * (width // dh), dh), width // dh, False
    return proj[:, : 3 * d].contiguous().view(n * (3 * d // dh), dh), 3 * d // dh, True


def _project(x: Tensor, weight: Tensor, bias: Tensor | None, dh: int) -> tuple[Tensor, Tensor, int]:
    """The input projection ``x W^T + b`` ``[N, 3d + g]`` written with a row stride that is
    a multiple of ``d_head`` (padding columns when needed, e.g. a headwise gate), so that
    it is also ``rows [N * stride, d_head]`` without a copy. Returns ``(proj, rows, stride)``."""
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


def _core_forward(rows: Tensor, stride: int, layout: PackedLayout, heads: int, p: float, scale: float,
                  train: bool):
    """Softmax attention (with dropout ``p``) of every size group of ``layout``, reading
    ``q, k, v`` from projection ``rows`` (see :func:`_qkv_rows`).

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
            ad = a * _dropout_keep(a.shape, p, a) if train else a.mul_(_dropout_keep(a.shape, p, a))
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


def _gate_apply(o: Tensor, gate: Tensor, heads: int) -> Tensor:
    n, d = o.shape
    return (o.view(n, heads, d // heads) * gate.view(n, heads, -1)).view(n, d)


def _gate_backward(d_og: Tensor, o: Tensor, gate: Tensor, heads: int) -> tuple[Tensor, Tensor]:
    """Gradients of ``o * gate`` (gate per head or per head dimension): ``(d_o, d_gate)``."""
    n, d = o.shape
    go = d_og.view(n, heads, d // heads)
    dg = go * o.view(n, heads, d // heads)
    dg = dg.sum(-1) if gate.size(1) == heads and d // heads > 1 else dg.view(n, -1)
    return (go * gate.view(n, heads, -1)).view(n, d), dg.view(n, -1)


class _GroupedAttention(torch.autograd.Function):
    """:func:`_core_forward` on a given projection, optionally gated, as one autograd
    node with the backward written out (:func:`_core_backward`).

    Input ``proj [num_nodes, 3d + g]`` (``q | k | v | gate logits``); outputs the
    attention ``[num_nodes, d]`` (multiplied by the gate when ``gate_output``) and the
    gate ``sigmoid(logits) [num_nodes, g]``. Used for the ``"value"`` and ``"post"`` gate
    positions; the output gate and no gate take :class:`_AttentionBranch`.
    """

    @staticmethod
    def forward(ctx, proj, layout, heads, p, scale, gate_dim, gate_output):
        n_nodes, width = proj.shape
        d = (width - gate_dim) // 3
        dh = d // heads
        rows, stride, copied = _qkv_rows(proj, d, dh)
        o, state = _core_forward(rows, stride, layout, heads, p, scale, True)
        out = o.view(n_nodes, d)
        gate = o_plain = None
        if gate_dim:
            gate = torch.sigmoid(proj[:, 3 * d :])
            if gate_output:
                o_plain, out = out, _gate_apply(out, gate, heads)
        blks, outs, saved, plan, seed = state
        ctx.save_for_backward(blks, outs, gate, o_plain, *saved)
        ctx.layout, ctx.heads, ctx.p, ctx.scale, ctx.plan, ctx.seed = layout, heads, p, scale, plan, seed
        ctx.dims = (n_nodes, width, d, dh, stride, copied, gate_dim)
        if gate is None:
            return out, proj.new_empty(n_nodes, 0)
        return out, gate

    @staticmethod
    def backward(ctx, grad_out, grad_gate):
        layout, heads = ctx.layout, ctx.heads
        blks, outs, gate, o_plain, *saved = ctx.saved_tensors
        n_nodes, width, d, dh, stride, copied, gate_dim = ctx.dims
        grad_out = grad_out.contiguous()
        d_gate = grad_gate if gate_dim else None
        if o_plain is not None:
            grad_out, dg = _gate_backward(grad_out, o_plain, gate, heads)
            d_gate = dg if d_gate is None else d_gate + dg
        extra = 0 if copied else stride - 3 * heads  # gate rows carried through the gather
        state = (blks, outs, saved, ctx.plan, ctx.seed)
        d_blks = _core_backward(grad_out.view(n_nodes * heads, dh), layout, heads, ctx.p, ctx.scale, state,
                                n_nodes * extra)
        d_logits = None
        if gate_dim:
            d_logits = (torch.ops.aten.sigmoid_backward(d_gate, gate) if d_gate is not None
                        else gate.new_zeros(gate.shape))
            if extra:
                d_blks[-n_nodes * extra :].view(n_nodes, gate_dim).copy_(d_logits)
        d_rows = d_blks.index_select(0, layout.block_source(heads, stride))  # n_nodes * stride, dh
        if not copied:
            return d_rows.view(n_nodes, width), None, None, None, None, None, None
        d_proj = d_rows.view(n_nodes, 3 * d)
        if gate_dim:
            d_proj = torch.cat([d_proj, d_logits], 1)
        return d_proj, None, None, None, None, None, None


class _AttentionBranch(torch.autograd.Function):
    """The whole attention branch ``[x +] out_proj(attention(in_proj(x)) * gate)`` as one
    autograd node (no gate, or the output gate), with the backward written out.

    Replaces the autograd nodes and bookkeeping of two linear layers with their
    transposes, the slices and views of ``q, k, v`` and of the gate, sigmoid, product and
    residual by one; the projection is written with a ``d_head``-aligned row
    stride (:func:`_project`), so even a headwise gate needs no copy of ``q, k, v``.
    """

    @staticmethod
    def forward(ctx, x, w_in, b_in, w_out, b_out, layout, heads, p, gate_dim, residual):
        n_nodes, d = x.size(0), w_out.size(0)
        dh = d // heads
        scale = 1.0 / math.sqrt(dh)
        proj, rows, stride = _project(x, w_in, b_in, dh)
        o, state = _core_forward(rows, stride, layout, heads, p, scale, True)
        o = o.view(n_nodes, d)
        gate = None
        og = o
        if gate_dim:
            gate = torch.sigmoid(proj[:, 3 * d :])
            og = _gate_apply(o, gate, heads)
        y = torch.addmm(b_out, og, w_out.t()) if b_out is not None else og.mm(w_out.t())
        if residual:
            y.add_(x)
        blks, outs, saved, plan, seed = state
        ctx.save_for_backward(x, w_in, w_out, og, o if gate_dim else None, gate, blks, outs, *saved)
        ctx.layout, ctx.heads, ctx.p, ctx.scale, ctx.plan, ctx.seed = layout, heads, p, scale, plan, seed
        ctx.dims = (n_nodes, d, dh, stride, gate_dim, residual, b_in is not None, b_out is not None)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, w_in, w_out, og, o, gate, blks, outs, *saved = ctx.saved_tensors
        n_nodes, d, dh, stride, gate_dim, residual, has_b_in, has_b_out = ctx.dims
        heads = ctx.heads
        width = 3 * d + gate_dim
        dy = dy.contiguous()
        d_og = dy.mm(w_out)
        dw_out = dy.t().mm(og)
        db_out = dy.sum(0) if has_b_out else None
        d_o, d_logits = d_og, None
        if gate_dim:
            d_o, dg = _gate_backward(d_og, o, gate, heads)
            d_logits = torch.ops.aten.sigmoid_backward(dg, gate)
        extra = stride - 3 * heads
        state = (blks, outs, saved, ctx.plan, ctx.seed)
        d_blks = _core_backward(d_o.view(n_nodes * heads, dh), ctx.layout, heads, ctx.p, ctx.scale, state,
                                n_nodes * extra)
        if extra:
            d_blks[-n_nodes * extra :].view(n_nodes, extra * dh)[:, :gate_dim].copy_(d_logits)
        d_proj = d_blks.index_select(0, ctx.layout.block_source(heads, stride)).view(n_nodes, stride * dh)
        if stride * dh != width:
            d_proj = d_proj[:, :width]
        dw_in = d_proj.t().mm(x)
        db_in = d_proj.sum(0) if has_b_in else None
        dx = torch.addmm(dy, d_proj, w_in) if residual else d_proj.mm(w_in)
        return dx, dw_in, db_in, dw_out, db_out, None, None, None, None, None
