"""The ``impl="packed"`` attention core of the ``"full"`` type: softmax attention of every
graph with itself on node rows over a :class:`~siggate.nn.kernels.layout.PackedLayout`.

What it computes: ``q, k, v [num_nodes, H, d_head]`` -> ``[num_nodes, H, d_head]``, the
same attention as the reference core of :class:`~siggate.nn.GatedMultiheadAttention`
(padded batch, ``softmax(q k^T / sqrt(d_head) + mask) v``), but only each size group of
the layout sees a padded shape. The projections and the gate stay outside, in
:meth:`siggate.nn.attention.GatedAttentionBase.gated`. The kernel depends on where it
runs (the table is in :func:`siggate.nn.impl.resolve_impl`):

* CPU: :func:`~siggate.nn.kernels.attention_cpu.packed_core_cpu` (hand-written backward
  under autograd, batched matmuls without);
* accelerators: one :func:`F.scaled_dot_product_attention` per size group under autograd
  (:func:`sdpa_groups`).

Pinned by ``tests/test_nn.py::test_every_impl_matches_reference`` (outputs and gradients,
every gate kind and position), ``tests/test_fast_path.py`` (the whole model in training
and eval, and ``test_accelerator_kernel_matches_cpu_kernel``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .attention_cpu import packed_core_cpu, projected_core_cpu, qkv_rows
from .layout import PackedLayout


def packed_core(q: Tensor, k: Tensor, v: Tensor, layout: PackedLayout, dropout_p: float = 0.0) -> Tensor:
    """Softmax attention (dropout ``dropout_p`` on the probabilities) of every graph of
    ``layout`` with itself. Shapes: ``q, k, v [num_nodes, H, d_head]`` -> ``[num_nodes, H, d_head]``."""
    if not layout.groups:  # no nodes
        return v * 0.0
    if q.device.type == "cpu":
        return packed_core_cpu(q, k, v, layout, dropout_p)
    return sdpa_groups(q, k, v, layout, dropout_p)


class PackedAttend:
    """The core :meth:`~siggate.nn.attention.GatedAttentionBase.gated` calls over a
    :class:`PackedLayout`: ``(q, k, v) -> o`` is :func:`packed_core`; :meth:`projected`
    offers the input projection and the core as one autograd node where a kernel has one."""

    def __init__(self, layout: PackedLayout, dropout_p: float = 0.0) -> None:
        self.layout, self.dropout_p = layout, dropout_p

    def __call__(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        return packed_core(q, k, v, self.layout, self.dropout_p)

    def projected(self, x: Tensor, weight: Tensor, bias: Tensor | None, dim: int, heads: int):
        """``x W^T + b`` (``[N, 3 dim + r]``), then :func:`packed_core` on its ``q | k | v``,
        in one step on CPU (:func:`~siggate.nn.kernels.attention_cpu.projected_core_cpu`: one
        autograd node in training, no copy of ``q, k, v`` for any width): ``(o [N, H,
        d_head], the other r columns [N, r])``; ``None`` elsewhere (the caller projects, then
        calls the core)."""
        if x.device.type != "cpu" or not self.layout.groups:
            return None
        return projected_core_cpu(x, weight, bias, dim, self.layout, heads, self.dropout_p)


def sdpa_groups(q: Tensor, k: Tensor, v: Tensor, layout: PackedLayout, dropout_p: float = 0.0) -> Tensor:
    """Accelerator core: :func:`F.scaled_dot_product_attention` per size group on the
    gathered ``q, k, v`` (the fused kernels, which also do dropout); shapes as
    :func:`packed_core`."""
    n, heads, dh = q.shape
    rows, stride = qkv_rows(q, k, v)
    outs = []
    for i, (g, size) in enumerate(layout.groups):
        blk = rows.index_select(0, layout.gather_index(i, heads, stride, heads_inner=True))
        qq, kk, vv = blk.view(3, g, size, heads, dh).transpose(2, 3).unbind(0)  # g, H, n, dh (memory g, n, H, dh)
        o = F.scaled_dot_product_attention(qq, kk, vv, attn_mask=layout.bias(i, q.dtype), dropout_p=dropout_p)
        outs.append(o.transpose(1, 2).reshape(-1, dh))  # g, n, H: no copy, the output follows q's layout
    o = outs[0] if len(outs) == 1 else torch.cat(outs)
    return o.index_select(0, layout.out_index(heads, heads_inner=True)).view(n, heads, dh)
