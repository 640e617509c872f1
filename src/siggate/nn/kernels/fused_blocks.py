"""Fused blocks of the GPS layer's fast path (``impl="packed"``).

What it computes:

* :class:`_MLPResidual`: ``res + W2 ReLU(W1 x + b1) + b2`` (the FFN with its residual) and
  :class:`_GINEResidual`: ``x + MLP((1 + eps) x_i + sum_j ReLU(x_j + e_ji))`` (GINE with its
  residual, messages in chunks of edges, recomputed in the backward), each as one autograd
  node with the backward written out;
* :func:`forward_folded`: a whole GPS layer in inference with its eval BatchNorms folded
  into the linear maps before them (:func:`folded_params`).

Reference: :class:`siggate.nn.GPSLayer` with ``impl="reference"`` (plain modules and
autograd; the same operations, reassociated in the folded case). Pinned by
``tests/test_fast_path.py``: ``test_gine_and_mlp_blocks_gradcheck``,
``test_training_step_fast_equals_readable`` (training) and
``test_inference_fast_equals_readable`` (folding, including cache invalidation). What
each bought: ``benchmarks/README.md`` (steps 6 and 8).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .layout import PackedLayout


def _linear(x: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
    return torch.addmm(b, x, w.t()) if b is not None else x.mm(w.t())


def _linear_backward(dy: Tensor, x: Tensor, w: Tensor, has_bias: bool, need_x: bool = True):
    """Gradients of ``x w^T + b``: ``(dx, dw, db)``."""
    return (dy.mm(w) if need_x else None), dy.t().mm(x), (dy.sum(0) if has_bias else None)


class _MLPResidual(torch.autograd.Function):
    """``res + W2 ReLU(W1 x + b1) + b2`` (a residual two-layer MLP), one autograd node.

    The same operations as ``res + Linear(ReLU(Linear(x)))`` with autograd, with the
    backward written out: ``dh = (dy W2) * [h > 0]``, ``dx = dh W1``, ``dW = dy^T h`` and
    ``dh^T x``, ``db`` the column sums, ``dres = dy``. It replaces seven autograd nodes
    (two ``addmm``, two transposes, ReLU, the residual add) by one.
    """

    @staticmethod
    def forward(ctx, x, res, w1, b1, w2, b2):
        h = _linear(x, w1, b1).relu_()
        y = _linear(h, w2, b2).add_(res)
        ctx.save_for_backward(x, h, w1, w2)
        ctx.bias = (b1 is not None, b2 is not None)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, h, w1, w2 = ctx.saved_tensors
        dh, dw2, db2 = _linear_backward(dy, h, w2, ctx.bias[1])
        dh = torch.ops.aten.threshold_backward(dh, h, 0)
        dx, dw1, db1 = _linear_backward(dh, x, w1, ctx.bias[0], ctx.needs_input_grad[0])
        return dx, dy, dw1, db1, dw2, db2


#: Edges per chunk in :class:`_GINEResidual` (gathers and scatters that stay in cache).
GINE_EDGE_CHUNK = 16384


def _edge_chunks(num_edges: int):
    for s in range(0, num_edges, GINE_EDGE_CHUNK):
        yield slice(s, min(s + GINE_EDGE_CHUNK, num_edges))


class _GINEResidual(torch.autograd.Function):
    """``x + MLP((1 + eps) x_i + sum_j ReLU(x_j + e_ji))``, GINE plus its residual, as one
    autograd node (the same operations as :meth:`GINELocal.forward` and the residual,
    backward written out; replaces about a dozen autograd nodes).

    Messages are formed and summed :data:`GINE_EDGE_CHUNK` edges at a time and never kept:
    the backward recomputes each chunk's ``x_j + e_ji`` for ReLU's mask, so no ``[E, d]``
    tensor lives between forward and backward (the only one formed is ``e``'s gradient,
    when ``e`` needs it)."""

    @staticmethod
    def forward(ctx, x, src, dst, e, eps, w1, b1, w2, b2):
        agg = torch.addcmul(x, x, eps)  # (1 + eps) x
        for c in _edge_chunks(src.numel()):
            agg.index_add_(0, dst[c], torch.add(x.index_select(0, src[c]), e[c]).relu_())  # + sum of messages
        h = _linear(agg, w1, b1).relu_()
        y = _linear(h, w2, b2).add_(x)
        ctx.save_for_backward(x, src, dst, e, eps, agg, h, w1, w2)
        ctx.bias = (b1 is not None, b2 is not None)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, src, dst, e, eps, agg, h, w1, w2 = ctx.saved_tensors
        dh, dw2, db2 = _linear_backward(dy, h, w2, ctx.bias[1])
        dh = torch.ops.aten.threshold_backward(dh, h, 0)
        dagg, dw1, db1 = _linear_backward(dh, agg, w1, ctx.bias[0])
        d_eps = (dagg * x).sum().view(1) if ctx.needs_input_grad[4] else None
        dx = torch.add(dy, dagg).addcmul_(dagg, eps)
        de = x.new_empty(src.numel(), x.size(1)) if ctx.needs_input_grad[3] else None
        for c in _edge_chunks(src.numel()):
            pre = torch.add(x.index_select(0, src[c]), e[c])  # the message before ReLU, recomputed
            dmsg = torch.ops.aten.threshold_backward(dagg.index_select(0, dst[c]), pre, 0)
            dx.index_add_(0, src[c], dmsg)
            if de is not None:
                de[c] = dmsg
        return dx, None, None, de, d_eps, dw1, db1, dw2, db2


# ----------------------------------------------------------------------------- BatchNorm folding


def _norms(layer) -> list:
    return [m for m in (layer.norm_local, layer.norm_attn, layer.norm_ff) if m is not None]


def foldable(layer) -> bool:
    """Whether every BatchNorm of ``layer`` has running statistics to fold."""
    return all(bn.track_running_stats and bn.running_var is not None for bn in _norms(layer))


def bn_affine(bn: nn.BatchNorm1d) -> tuple[Tensor, Tensor]:
    """Eval BatchNorm as ``z * s + t``."""
    s = torch.rsqrt(bn.running_var + bn.eps)
    if bn.weight is not None:
        s = s * bn.weight
    t = -bn.running_mean * s
    if bn.bias is not None:
        t = t + bn.bias
    return s, t


def folded_params(layer, gine: bool) -> dict:
    """Eval BatchNorms of a :class:`~siggate.nn.GPSLayer` folded into the linear maps
    before them (cached on the layer until any of the parameters or statistics changes).

    ``BN_L(x + g) + BN_A(x + a) = x (s_L + s_A) + g' + a' + (t_L + t_A)`` where ``g'``
    (GINE's last linear, when ``gine``) and ``a'`` (the output projection) carry the scales
    ``s``; ``BN_F(h + f) = h s_F + f'`` likewise. Same math as the unfolded layer, reassociated.
    """
    mods = [layer.ff2, *_norms(layer)]
    if layer.attn is not None:
        mods.append(layer.attn.out_proj)
    if gine:
        mods.append(layer.local.mlp[-1])
    tensors = [t for m in mods for t in list(m.parameters(recurse=False)) + list(m.buffers(recurse=False))]
    key = tuple((t.data_ptr(), t._version) for t in tensors)
    if key == layer._fold_key:
        return layer._fold
    f: dict = {}
    x_scale, const = None, None
    if layer.local is not None:
        s, t = bn_affine(layer.norm_local)
        const = t
        if gine:
            lin = layer.local.mlp[-1]
            f["local_w"], f["local_b"] = lin.weight * s[:, None], lin.bias * s
            x_scale = s
        else:
            f["local_s"] = s
    if layer.attn is not None:
        s, t = bn_affine(layer.norm_attn)
        lin = layer.attn.out_proj
        f["attn_w"] = lin.weight * s[:, None]
        f["attn_b"] = lin.bias * s if lin.bias is not None else None
        x_scale = s if x_scale is None else x_scale + s
        const = t if const is None else const + t
    if "local_b" in f:  # the constant rides on GINE's bias
        f["local_b"], const = f["local_b"] + const, None
    f["x_scale"], f["const"] = x_scale, const
    s, t = bn_affine(layer.norm_ff)
    f["ff_w"], f["ff_b"], f["ff_s"] = layer.ff2.weight * s[:, None], layer.ff2.bias * s + t, s
    layer._fold_key, layer._fold = key, f
    return f


def forward_folded(layer, x: Tensor, edge_index: Tensor, edge_attr: Tensor, layout: PackedLayout, gine: bool):
    """A :class:`~siggate.nn.GPSLayer` in inference with the BatchNorms folded
    (:func:`folded_params`): two fused multiply-adds replace three normalisations and four
    additions. Shapes as :meth:`GPSLayer.forward`."""
    f = folded_params(layer, gine)
    acc, graph_data = None, layer._graph_data(edge_attr)
    if gine:
        h = layer.local.aggregate(x, edge_index, edge_attr)
        acc = F.linear(F.relu(layer.local.mlp[0](h)), f["local_w"], f["local_b"])
    elif layer.local is not None:
        h, edge_attr = layer.local(x, edge_index, edge_attr)
        acc = h * f["local_s"]
    if layer.attn is not None:
        a = layer.attn.forward_nodes(x, layout, impl="packed", out_weight=f["attn_w"], out_bias=f["attn_b"],
                                     **graph_data)
        acc = a if acc is None else acc.add_(a)
    if f["const"] is not None:
        acc = acc.add_(f["const"])
    if f["x_scale"] is not None:
        acc = acc.addcmul_(x, f["x_scale"])
    ff = F.linear(F.relu(layer.ff1(acc)), f["ff_w"], f["ff_b"])
    return ff.addcmul_(acc, f["ff_s"]), edge_attr
