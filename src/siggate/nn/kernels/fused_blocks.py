"""Fused blocks of the GPS layer's fast path (``impl="packed"``).

What it computes:

* :class:`MLPResidual`: ``res + W2 ReLU(W1 x + b1) + b2`` (the FFN with its residual) and
  :class:`GINEResidual`: ``x + MLP((1 + eps) x_i + sum_j ReLU(x_j + e_ji))`` (GINE with its
  residual, messages in chunks of edges, recomputed in the backward), each as one autograd
  node with the backward written out;
* :class:`FoldedGPSLayer`: a trained GPS layer for inference with its eval BatchNorms
  folded into the maps before them (the transform ``GPSLayer.for_inference``).

Reference: :class:`siggate.nn.GPSLayer` with ``impl="reference"`` (plain modules and
autograd; the same operations, reassociated in the folded case). Pinned by
``tests/test_fast_path.py``: ``test_gine_and_mlp_blocks_gradcheck``,
``test_training_step_fast_equals_readable`` (training) and
``test_for_inference_equals_eval`` (folding). What
each bought: ``benchmarks/README.md`` (steps 6 and 8).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from .layout import batch_vector, check_edge_features


def _linear(x: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
    return torch.addmm(b, x, w.t()) if b is not None else x.mm(w.t())


def _linear_backward(dy: Tensor, x: Tensor, w: Tensor, has_bias: bool, need_x: bool = True):
    """Gradients of ``x w^T + b``: ``(dx, dw, db)``."""
    return (dy.mm(w) if need_x else None), dy.t().mm(x), (dy.sum(0) if has_bias else None)


class MLPResidual(torch.autograd.Function):
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
    @once_differentiable
    def backward(ctx, dy):
        x, h, w1, w2 = ctx.saved_tensors
        dh, dw2, db2 = _linear_backward(dy, h, w2, ctx.bias[1])
        dh = torch.ops.aten.threshold_backward(dh, h, 0)
        dx, dw1, db1 = _linear_backward(dh, x, w1, ctx.bias[0], ctx.needs_input_grad[0])
        return dx, dy, dw1, db1, dw2, db2


#: Edges per chunk in :class:`GINEResidual` (gathers and scatters that stay in cache).
GINE_EDGE_CHUNK = 16384


def _edge_chunks(num_edges: int):
    for s in range(0, num_edges, GINE_EDGE_CHUNK):
        yield slice(s, min(s + GINE_EDGE_CHUNK, num_edges))


class GINEResidual(torch.autograd.Function):
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
    @once_differentiable
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


def bn_affine(bn: nn.BatchNorm1d) -> tuple[Tensor, Tensor]:
    """Eval BatchNorm as ``z * s + t``."""
    if not (bn.track_running_stats and bn.running_var is not None):
        raise ValueError("folding a BatchNorm needs its running statistics (track_running_stats=True)")
    s = torch.rsqrt(bn.running_var + bn.eps)
    if bn.weight is not None:
        s = s * bn.weight
    t = -bn.running_mean * s
    if bn.bias is not None:
        t = t + bn.bias
    return s, t


def _snapshot_key(layer) -> tuple | None:
    """The tensors of a GPS layer that :class:`FoldedGPSLayer` snapshots (the norms'
    parameters and statistics, GINE's last linear, the FFN's second linear), each with its
    storage and version; ``None`` if one is an inference tensor (it has no version)."""
    mods = [layer.norm_local, layer.norm_attn, layer.norm_ff, layer.ff2]
    if hasattr(layer.local, "aggregate"):
        mods.append(layer.local.mlp[-1])
    try:
        return tuple((t, t.data_ptr(), t._version) for m in mods if m is not None
                     for ts in (m._parameters, m._buffers) for t in ts.values() if t is not None)
    except RuntimeError:  # "Inference tensors do not track version counter"
        return None


class FoldedGPSLayer(nn.Module):
    r"""A trained :class:`~siggate.nn.GPSLayer` for inference, its eval BatchNorms folded
    into the maps before them (built by :meth:`GPSLayer.for_inference`).

    ``BN_L(x + g) + BN_A(x + a) = x (s_L + s_A) + g' + s_A a + (t_L + t_A)``, where ``g'`` is
    GINE's last linear carrying ``s_L`` (another branch is scaled by ``s_L``; one that holds
    its residual, ``updates_edges`` as GatedGCN, adds no ``x s_L``), and
    ``BN_F(h + f) = h s_F + f'`` with ``s_F`` folded into the FFN's second linear: two fused
    multiply-adds replace three normalisations and four additions. Same math as the layer
    in eval, reassociated. The local branch, the attention and the FFN's first linear are
    the layer's own modules (shared, not copied); the folded tensors are a snapshot of the
    parameters and statistics when it was built. Shapes as :meth:`GPSLayer.forward`.
    """

    def __init__(self, layer) -> None:
        super().__init__()
        self._source = _snapshot_key(layer)
        # their values too: an edit through .data (older EMA or pruning code) bumps no version
        self._values = None if self._source is None else [t.detach().clone() for t, *_ in self._source]
        self.local, self.attn, self.ff1, self.impl = layer.local, layer.attn, layer.ff1, layer.impl
        self.local_kind = layer.local_kind
        self.gine = hasattr(layer.local, "aggregate")
        zero = torch.zeros_like(layer.ff2.bias)
        with torch.no_grad():
            x_scale, const = zero.clone(), zero.clone()
            if self.local is not None:
                s, t = bn_affine(layer.norm_local)
                const += t
                if self.gine:  # BN_L(x + g): g's last linear carries s_L, x gets s_L
                    lin = layer.local.mlp[-1]
                    self.register_buffer("local_w", lin.weight * s[:, None])
                    const += lin.bias * s
                    x_scale += s
                else:  # BN_L(h) = h s_L + t_L when h holds its residual (GatedGCN), else BN_L(x + h)
                    self.register_buffer("local_s", s)
                    if not layer.local.updates_edges:
                        x_scale += s
            if self.attn is not None:
                s, t = bn_affine(layer.norm_attn)
                self.register_buffer("attn_s", s)
                x_scale, const = x_scale + s, const + t
            self.register_buffer("x_scale", x_scale)
            self.register_buffer("const", const)
            s, t = bn_affine(layer.norm_ff)
            self.register_buffer("ff_w", layer.ff2.weight * s[:, None])
            self.register_buffer("ff_b", layer.ff2.bias * s + t)
            self.register_buffer("ff_s", s)
        self.training = False  # its modules are the layer's, already in eval (set directly: no recursion into them)

    def is_current(self, layer) -> bool:
        """Whether ``layer`` still holds the tensors this snapshot was folded from, unchanged:
        the same tensors, storages, versions (an optimizer step, new running statistics,
        ``load_state_dict`` or ``.to()`` each change one) and values (an edit through ``.data``
        changes no version). Never for inference tensors, which have no version."""
        now = _snapshot_key(layer)
        return (now is not None and self._source is not None and len(now) == len(self._source)
                and all(a[0] is b[0] and a[1:] == b[1:] for a, b in zip(now, self._source))
                and not bool(torch.stack([((a[0] != kept) & ~(a[0].isnan() & kept.isnan())).any()
                                          for a, kept in zip(now, self._values)]).any()))  # (one wait, NaN = NaN)

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor, batch: Tensor | None = None, layout=None,
                return_details: bool = False):
        if self.training or return_details:
            raise ValueError("a folded GPS layer is for inference only: train, or ask for details, on the layer "
                             "it was built from")
        if self.local is not None:
            check_edge_features(x, edge_index, edge_attr, self.local_kind)
        if layout is None and self.attn is not None:
            layout = self.attn.make_layout(batch_vector(x, batch), edge_index, impl=self.impl)
        acc, edge_in = torch.addcmul(self.const, x, self.x_scale), edge_attr
        if self.local is not None:
            check_edge_features(x, edge_index, edge_attr)
        if self.gine:
            h = F.relu(self.local.mlp[0](self.local.aggregate(x, edge_index, edge_attr)))
            acc = acc.addmm_(h, self.local_w.t())
        elif self.local is not None:
            h, edge_attr = self.local(x, edge_index, edge_attr)
            acc = acc.addcmul_(h, self.local_s)
        if self.attn is not None:
            acc = acc.addcmul_(self.attn.forward_nodes(x, layout, edge_attr=edge_in), self.attn_s)
        ff = F.linear(F.relu(self.ff1(acc)), self.ff_w, self.ff_b)
        return ff.addcmul_(acc, self.ff_s), edge_attr
