"""The ``impl="packed"`` attention: :class:`~siggate.nn.GatedMultiheadAttention` on node
rows over a :class:`~siggate.nn.kernels.layout.PackedLayout`.

What it computes: the same gated multi-head self-attention as the module's reference
``forward``, but on node rows ``[num_nodes, d]``: the projections and gates run on real
nodes only, and only the attention itself sees each size group's padded shape. The kernel
under it depends on where it runs (the table is in
:func:`siggate.nn.attention.resolve_impl`):

* CPU, no autocast, gate none or at the output: :class:`_AttentionBranch` (training) or
  the batched-matmul :func:`_core_forward` (no autograd);
* CPU otherwise: :func:`grouped_attention` -> :class:`_GroupedAttention` or
  :func:`_core_forward`;
* accelerators: one :func:`F.scaled_dot_product_attention` per size group under autograd
  (:func:`_grouped_attention_sdpa`).

Reference: :meth:`siggate.nn.GatedMultiheadAttention.forward` with ``impl="reference"``.
Pinned by ``tests/test_nn.py::test_every_impl_matches_reference`` (outputs and gradients,
every gate kind and position), ``tests/test_fast_path.py`` (the whole model in training
and eval, and ``test_accelerator_kernel_matches_cpu_kernel``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from .attention_cpu import _AttentionBranch, _core_forward, _gate_apply, _GroupedAttention, _project, _qkv_rows
from .layout import PackedLayout


def grouped_attention(proj: Tensor, layout: PackedLayout, heads: int, dropout_p: float,
                      gate_dim: int = 0, gate_output: bool = False) -> tuple[Tensor, Tensor | None]:
    """Softmax attention of every graph with itself, over a :class:`PackedLayout`.

    ``proj [num_nodes, 3d + gate_dim]`` (``q | k | v | gate logits``) ->
    ``(attention [num_nodes, d], sigmoid(gate logits) [num_nodes, gate_dim] or None)``;
    with ``gate_output`` the attention is returned already multiplied by the gate (per
    head, or per head dimension). Kernels:

    * CPU with gradients: :class:`_GroupedAttention` (hand-written backward, fast
      dropout; chunked for large groups, so memory is not ``O(n^2)``);
    * CPU without gradients: :func:`_core_forward` (batched matmuls per group; the CPU
      flash kernel, memory ``O(n)``, for large groups; see ``benchmarks/README.md``, step 5);
    * accelerators: one :func:`F.scaled_dot_product_attention` per group on the gathered
      ``q, k, v`` under autograd (the fused kernels, which also do dropout).
    """
    n_nodes, width = proj.shape
    d = (width - gate_dim) // 3
    dh = d // heads
    scale = 1.0 / math.sqrt(dh)
    if not layout.groups:  # no nodes
        o = proj[:, :d] * 0.0
    elif proj.device.type == "cpu" and torch.is_grad_enabled() and proj.requires_grad:
        o, gate = _GroupedAttention.apply(proj, layout, heads, dropout_p, scale, gate_dim, gate_output)
        return o, (gate if gate_dim else None)
    elif proj.device.type == "cpu":
        rows, stride, _ = _qkv_rows(proj, d, dh)
        o = _core_forward(rows, stride, layout, heads, dropout_p, scale, False)[0].view(n_nodes, d)
    else:
        o = _grouped_attention_sdpa(proj, layout, heads, dropout_p, d, dh)
    gate = torch.sigmoid(proj[:, 3 * d :]) if gate_dim else None
    if gate is not None and gate_output:
        o = _gate_apply(o, gate, heads)
    return o, gate


def _grouped_attention_sdpa(proj, layout, heads, dropout_p, d, dh) -> Tensor:
    """Accelerator attention: SDPA per group under autograd (see :func:`grouped_attention`)."""
    rows, stride, _ = _qkv_rows(proj, d, dh)
    outs = []
    for k, (g, n) in enumerate(layout.groups):
        blk = rows.index_select(0, layout.gather_index(k, heads, stride, heads_inner=True))
        q, kk, v = blk.view(3, g, n, heads, dh).transpose(2, 3).unbind(0)  # g, H, n, dh (memory g, n, H, dh)
        o = F.scaled_dot_product_attention(q, kk, v, attn_mask=layout.bias(k, proj.dtype), dropout_p=dropout_p)
        outs.append(o.transpose(1, 2).reshape(-1, dh))  # g, n, H: no copy, the output follows q's layout
    o = outs[0] if len(outs) == 1 else torch.cat(outs)
    return o.index_select(0, layout.out_index(heads, heads_inner=True)).view(proj.size(0), d)


def packed_attention(attn, x: Tensor, layout: PackedLayout, out_weight: Tensor | None = None,
                     out_bias: Tensor | None = None, residual: bool = False) -> Tensor:
    """``attn`` (a :class:`~siggate.nn.GatedMultiheadAttention`) on node rows.

    ``out_weight``/``out_bias`` replace the output projection's parameters (the GPS layer
    passes BatchNorm-folded ones in eval); ``residual=True`` returns ``x + attention(x)``.

    Shapes: ``x [num_nodes, d]`` -> ``[num_nodes, d]``.
    """
    n_rows = x.size(0)
    d, H, dh = attn.dim, attn.heads, attn.head_dim
    p_drop = attn.attn_dropout if attn.training else 0.0
    w_out = attn.out_proj.weight if out_weight is None else out_weight
    b_out = attn.out_proj.bias if out_weight is None else out_bias
    if (x.device.type == "cpu" and layout.groups and (not attn.gate_dim or attn.gate_position == "output")
            and not torch.is_autocast_enabled("cpu")):
        if torch.is_grad_enabled():  # one autograd node for the whole branch
            return _AttentionBranch.apply(x, attn.in_proj.weight, attn.in_proj.bias, w_out, b_out, layout, H,
                                          p_drop, attn.gate_dim, residual)
        proj, rows, stride = _project(x, attn.in_proj.weight, attn.in_proj.bias, dh)
        o = _core_forward(rows, stride, layout, H, p_drop, 1.0 / math.sqrt(dh), False)[0].view(n_rows, d)
        if attn.gate_dim:
            o = _gate_apply(o, torch.sigmoid(proj[:, 3 * d :]), H)
        out = F.linear(o, w_out, b_out)
        return out.add_(x) if residual else out
    proj = attn.in_proj(x)  # num_nodes, 3d + g
    if attn.gate_dim and attn.gate_position == "value":
        gate = torch.sigmoid(proj[:, 3 * d :]).view(n_rows, H, -1)
        v = (proj[:, 2 * d : 3 * d].view(n_rows, H, dh) * gate).view(n_rows, d)
        o, _ = grouped_attention(torch.cat([proj[:, : 2 * d], v], dim=1), layout, H, p_drop)
    else:  # the output gate is applied inside grouped_attention
        o, gate = grouped_attention(proj, layout, H, p_drop, attn.gate_dim, attn.gate_position == "output")
        gate = gate.view(n_rows, H, -1) if attn.gate_dim else None  # num_nodes, H, dh|1
    out = F.linear(o, w_out, b_out)
    if gate is not None and attn.gate_position == "post":
        out = (out.view(n_rows, H, dh) * gate).view(n_rows, d)
    return x + out if residual else out


def packed_from_padded(attn, x: Tensor, mask: Tensor | None) -> Tensor:
    """:func:`packed_attention` on a padded batch ``x (B, N, d)`` with node ``mask (B, N)``
    (``True`` for real nodes): the real rows are taken out, attended over a layout built
    from the mask, and put back. Padding rows of the result are 0.

    Shapes: ``(B, N, d)`` -> ``(B, N, d)``.
    """
    B, N, d = x.shape
    if mask is None:
        mask = torch.ones(B, N, dtype=torch.bool, device=x.device)
    batch = torch.arange(B, device=x.device).repeat_interleave(mask.sum(1))
    out = x.new_zeros(B, N, d)
    out[mask] = packed_attention(attn, x[mask], PackedLayout.from_batch(batch, B))
    return out
