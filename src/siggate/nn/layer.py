"""GPS layer: a local message-passing branch and a global attention branch, summed.

GraphGPS semantics (Rampášek et al., "Recipe for a General, Powerful, Scalable Graph
Transformer", https://arxiv.org/abs/2205.12454): both branches read the layer input;
each applies dropout, adds the residual and applies BatchNorm; the two are summed; then
a feed-forward block ``d -> 2d -> d`` with a residual and BatchNorm.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .attention import GatedMultiheadAttention, PackedLayout


@dataclass
class DenseIndex:
    """Where each node of a PyG batch sits in the padded ``(B, N_max)`` layout.

    Computed once per forward pass and shared by every layer (PyG's ``to_dense_batch``
    recomputes it in each layer).
    """

    flat: Tensor  # [num_nodes] position in the flattened (B * N_max) layout
    mask: Tensor  # [B, N_max] True for real nodes
    batch_size: int
    max_nodes: int

    @classmethod
    def from_batch(cls, batch: Tensor, batch_size: int | None = None) -> "DenseIndex":
        if batch_size is None:
            batch_size = int(batch.max()) + 1 if batch.numel() else 0
        counts = torch.bincount(batch, minlength=batch_size)
        max_nodes = int(counts.max()) if counts.numel() else 0
        ptr = torch.zeros(batch_size + 1, dtype=torch.long, device=batch.device)
        ptr[1:] = counts.cumsum(0)
        pos = torch.arange(batch.numel(), device=batch.device) - ptr[batch]
        flat = batch * max_nodes + pos
        mask = torch.zeros(batch_size * max_nodes, dtype=torch.bool, device=batch.device)
        mask[flat] = True
        return cls(flat, mask.view(batch_size, max_nodes), batch_size, max_nodes)

    def to_dense(self, x: Tensor) -> Tensor:
        """``[num_nodes, d] -> [B, N_max, d]`` (zeros at padding)."""
        out = x.new_zeros(self.batch_size * self.max_nodes, x.size(-1))
        out[self.flat] = x
        return out.view(self.batch_size, self.max_nodes, -1)

    def to_sparse(self, x: Tensor) -> Tensor:
        """``[B, N_max, d] -> [num_nodes, d]``."""
        return x.reshape(self.batch_size * self.max_nodes, -1)[self.flat]


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


class _GINEResidual(torch.autograd.Function):
    """``x + MLP((1 + eps) x_i + sum_j ReLU(x_j + e_ji))``, GINE plus its residual, as one
    autograd node (the same operations as :meth:`GINELocal.forward` and the residual,
    backward written out; replaces about a dozen autograd nodes)."""

    @staticmethod
    def forward(ctx, x, src, dst, e, eps, w1, b1, w2, b2):
        msg = torch.add(x.index_select(0, src), e).relu_()  # E, d
        agg = torch.addcmul(x, x, eps).index_add_(0, dst, msg)  # (1 + eps) x + sum
        h = _linear(agg, w1, b1).relu_()
        y = _linear(h, w2, b2).add_(x)
        ctx.save_for_backward(x, src, dst, eps, msg, agg, h, w1, w2)
        ctx.bias = (b1 is not None, b2 is not None)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, src, dst, eps, msg, agg, h, w1, w2 = ctx.saved_tensors
        dh, dw2, db2 = _linear_backward(dy, h, w2, ctx.bias[1])
        dh = torch.ops.aten.threshold_backward(dh, h, 0)
        dagg, dw1, db1 = _linear_backward(dh, agg, w1, ctx.bias[0])
        d_eps = (dagg * x).sum().view(1) if ctx.needs_input_grad[4] else None
        dmsg = torch.ops.aten.threshold_backward(dagg.index_select(0, dst), msg, 0)  # E, d
        dx = torch.add(dy, dagg).addcmul_(dagg, eps).index_add_(0, src, dmsg)
        return dx, None, None, dmsg, d_eps, dw1, db1, dw2, db2


def _scatter_sum(src: Tensor, index: Tensor, num: int) -> Tensor:
    out = src.new_zeros(num, src.size(-1))
    return out.index_add_(0, index, src)


class GINELocal(nn.Module):
    """GINE message passing (Hu et al. 2020): ``h_i' = MLP((1 + eps) h_i + sum_j ReLU(h_j + e_ji))``.

    Shapes: ``x [N, d]``, ``edge_index [2, E]``, ``edge_attr [E, d]`` -> ``(x' [N, d], edge_attr)``;
    the edge stream is passed through unchanged (GraphGPS).
    """

    updates_edges = False

    def __init__(self, dim: int, dropout: float = 0.0, train_eps: bool = False) -> None:
        super().__init__()
        self.dim = dim
        self.mlp = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, dim))
        self.train_eps = train_eps
        self.eps = nn.Parameter(torch.zeros(1), requires_grad=train_eps)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for m in self.mlp:
            if isinstance(m, nn.Linear):
                m.reset_parameters()
        nn.init.zeros_(self.eps)

    def aggregate(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor) -> Tensor:
        """``(1 + eps) h_i + sum_j ReLU(h_j + e_ji)``, the MLP's input ``[N, d]``."""
        src, dst = edge_index
        msg = torch.add(x.index_select(0, src), edge_attr).relu_()  # E, d
        h = torch.addcmul(x, x, self.eps)  # (1 + eps) x
        return h.index_add_(0, dst, msg)

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor):
        return self.mlp(self.aggregate(x, edge_index, edge_attr)), edge_attr

    def forward_residual(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor) -> Tensor:
        """``x + forward(x)[0]`` as one autograd node (:class:`_GINEResidual`), for the
        GPS layer's fast path; ``[N, d]``."""
        l1, l2 = self.mlp[0], self.mlp[2]
        return _GINEResidual.apply(x, edge_index[0], edge_index[1], edge_attr, self.eps, l1.weight, l1.bias,
                                   l2.weight, l2.bias)


class GatedGCNLocal(nn.Module):
    """Residual gated graph conv with an edge stream (Bresson & Laurent 2017; GraphGPS's GatedGCN).

    ``e_ij' = C e_ij + D h_i + E h_j``, ``s_ij = sigmoid(e_ij')``,
    ``h_i' = A h_i + sum_j s_ij * B h_j / (sum_j s_ij + 1e-6)``; both streams then go through
    BatchNorm, ReLU, dropout and a residual, and the updated edge features feed the next layer.
    Here ``i`` is the target and ``j`` the source of edge ``j -> i``.

    Shapes: ``x [N, d]``, ``edge_index [2, E]``, ``edge_attr [E, d]`` -> ``(x' [N, d], edge_attr' [E, d])``.
    """

    updates_edges = True

    def __init__(self, dim: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.dim = dim
        self.dropout = dropout
        # A, B, D, E read node features; one matmul for all four.
        self.node_proj = nn.Linear(dim, 4 * dim)
        self.C = nn.Linear(dim, dim)
        self.bn_node = nn.BatchNorm1d(dim)
        self.bn_edge = nn.BatchNorm1d(dim)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.node_proj.reset_parameters()
        self.C.reset_parameters()
        self.bn_node.reset_parameters()
        self.bn_edge.reset_parameters()

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor):
        src, dst = edge_index
        Ax, Bx, Dx, Ex = self.node_proj(x).chunk(4, dim=-1)
        e = self.C(edge_attr) + Dx[dst] + Ex[src]
        sigma = torch.sigmoid(e)
        num = _scatter_sum(sigma * Bx[src], dst, x.size(0))
        den = _scatter_sum(sigma, dst, x.size(0))
        h = Ax + num / (den + 1e-6)
        h = F.dropout(F.relu(self.bn_node(h)), self.dropout, self.training)
        e = F.dropout(F.relu(self.bn_edge(e)), self.dropout, self.training)
        return x + h, edge_attr + e


LOCAL_MODELS = {"gine": GINELocal, "gatedgcn": GatedGCNLocal}


class GPSLayer(nn.Module):
    r"""One GraphGPS layer with SigGate-GT attention.

    .. math::
        h_L = \mathrm{BN}(x + \mathrm{Drop}(\mathrm{MPNN}(x))),\quad
        h_A = \mathrm{BN}(x + \mathrm{Drop}(\mathrm{Attn}(x))),\quad
        h = h_L + h_A,\quad x' = \mathrm{BN}(h + \mathrm{FFN}(h))

    (GatedGCN already applies its own dropout and residual, as in GraphGPS.)

    Args:
        dim (int): hidden width ``d``.
        heads (int): attention heads. (default: ``4``)
        local (str): ``"gine"``, ``"gatedgcn"`` or ``"none"``. (default: ``"gine"``)
        attn (bool): use the global attention branch. (default: ``True``)
        gate (str): ``"none"``, ``"headwise"`` or ``"elementwise"``; see
            :class:`GatedMultiheadAttention`. (default: ``"elementwise"``)
        gate_position (str): ``"output"``, ``"value"`` or ``"post"``. (default: ``"output"``)
        gate_bias_init (float): initial gate bias. (default: ``0.0``)
        gate_weight_std (float, optional): std of the gate weights' normal initialisation;
            ``None`` for Xavier-uniform. (default: ``None``)
        dropout (float): dropout after each branch and in the FFN. (default: ``0.0``)
        attn_dropout (float): dropout on attention probabilities. (default: ``0.0``)
        fused (bool): fused ``scaled_dot_product_attention`` path. (default: ``True``)
        ffn_dim (int, optional): hidden width of the feed-forward block; ``None`` for
            GraphGPS's ``2 * dim``. (default: ``None``)

    Shapes:
        ``x [N, d]``, ``edge_index [2, E]``, ``edge_attr [E, d]``, ``batch [N]`` ->
        ``(x' [N, d], edge_attr' [E, d])``.
    """

    def __init__(
        self,
        dim: int,
        heads: int = 4,
        local: str = "gine",
        attn: bool = True,
        gate: str = "elementwise",
        gate_position: str = "output",
        gate_bias_init: float = 0.0,
        dropout: float = 0.0,
        attn_dropout: float = 0.0,
        fused: bool = True,
        gate_weight_std: float | None = None,
        ffn_dim: int | None = None,
    ) -> None:
        super().__init__()
        if local != "none" and local not in LOCAL_MODELS:
            raise ValueError(f"local must be one of {sorted(LOCAL_MODELS) + ['none']}, got {local!r}")
        if local == "none" and not attn:
            raise ValueError("a GPS layer needs at least one branch (local or attention)")
        self.dim = dim
        self.local_kind = local
        self.dropout = dropout
        self.local = None if local == "none" else LOCAL_MODELS[local](dim, dropout=dropout)
        self.norm_local = nn.BatchNorm1d(dim) if self.local is not None else None
        self.attn = (
            GatedMultiheadAttention(
                dim, heads, gate=gate, gate_position=gate_position, gate_bias_init=gate_bias_init,
                gate_weight_std=gate_weight_std, attn_dropout=attn_dropout, fused=fused,
            )
            if attn
            else None
        )
        self.norm_attn = nn.BatchNorm1d(dim) if attn else None
        ffn_dim = 2 * dim if ffn_dim is None else ffn_dim
        self.ff1 = nn.Linear(dim, ffn_dim)
        self.ff2 = nn.Linear(ffn_dim, dim)
        self.norm_ff = nn.BatchNorm1d(dim)
        self._fold_key = None
        self._fold = None
        self.reset_parameters()

    def reset_parameters(self, reset_gate: bool = True) -> None:
        if self.local is not None:
            self.local.reset_parameters()
            self.norm_local.reset_parameters()
        if self.attn is not None:
            self.attn.reset_parameters(reset_gate=reset_gate)
            self.norm_attn.reset_parameters()
        self.ff1.reset_parameters()
        self.ff2.reset_parameters()
        self.norm_ff.reset_parameters()

    def forward(
        self,
        x: Tensor,
        edge_index: Tensor,
        edge_attr: Tensor,
        batch: Tensor | None = None,
        dense: DenseIndex | PackedLayout | None = None,
        return_details: bool = False,
    ):
        """``dense`` is the batch layout shared by all layers (``None``: built here). The
        packed fast path (:meth:`GatedMultiheadAttention.forward_packed`) runs when the
        attention is fused, no details are requested and ``dense`` is not a
        :class:`DenseIndex`; otherwise the padded readable/SDPA path runs."""
        autocast = torch.is_autocast_enabled(x.device.type)  # the fused blocks run in one dtype
        if (not self.training and not torch.is_grad_enabled() and not return_details and not autocast
                and isinstance(dense, PackedLayout) and self._foldable()):
            return self._forward_folded(x, edge_index, edge_attr, dense)
        branches = []
        details = None
        fast = self.attn is not None and self.attn.fused and not return_details and not isinstance(dense, DenseIndex)
        # fused blocks (one autograd node each) need the dropout between them to be off
        fuse = fast and (self.dropout == 0.0 or not self.training) and not autocast
        if self.local is not None:
            if fuse and isinstance(self.local, GINELocal):
                h = self.local.forward_residual(x, edge_index, edge_attr)
            else:
                h, edge_attr = self.local(x, edge_index, edge_attr)
                if not self.local.updates_edges:
                    h = x + self._drop(h)
            branches.append(self.norm_local(h))
        if fast:
            if dense is None:
                if batch is None:
                    batch = x.new_zeros(x.size(0), dtype=torch.long)
                dense = PackedLayout.from_batch(batch)
            if fuse:
                h = self.attn.forward_packed(x, dense, residual=True)
            else:
                h = x + self._drop(self.attn.forward_packed(x, dense))
            branches.append(self.norm_attn(h))
        elif self.attn is not None:
            if not isinstance(dense, DenseIndex):  # None or a PackedLayout
                if batch is None:
                    batch = x.new_zeros(x.size(0), dtype=torch.long)
                dense = DenseIndex.from_batch(batch)
            xd = dense.to_dense(x)
            res = self.attn(xd, dense.mask, return_details=return_details)
            if return_details:
                res, details = res
            h = x + self._drop(dense.to_sparse(res))
            branches.append(self.norm_attn(h))
        out = branches[0] if len(branches) == 1 else branches[0] + branches[1]
        if fuse:
            x = self.norm_ff(_MLPResidual.apply(out, out, self.ff1.weight, self.ff1.bias, self.ff2.weight,
                                                self.ff2.bias))
        else:
            ff = self.ff2(self._drop(F.relu(self.ff1(out))))
            x = self.norm_ff(out + self._drop(ff))
        if return_details:
            return x, edge_attr, details
        return x, edge_attr

    # ------------------------------------------------------------------ eval fast path

    def _norms(self) -> list:
        return [m for m in (self.norm_local, self.norm_attn, self.norm_ff) if m is not None]

    def _foldable(self) -> bool:
        return all(bn.track_running_stats and bn.running_var is not None for bn in self._norms())

    @staticmethod
    def _bn_affine(bn: nn.BatchNorm1d) -> tuple[Tensor, Tensor]:
        """Eval BatchNorm as ``z * s + t``."""
        s = torch.rsqrt(bn.running_var + bn.eps)
        if bn.weight is not None:
            s = s * bn.weight
        t = -bn.running_mean * s
        if bn.bias is not None:
            t = t + bn.bias
        return s, t

    def _folded(self) -> dict:
        """Eval BatchNorms folded into the linear maps before them (cached until any of
        the parameters or statistics changes).

        ``BN_L(x + g) + BN_A(x + a) = x (s_L + s_A) + g' + a' + (t_L + t_A)`` where ``g'``
        (GINE's last linear) and ``a'`` (the output projection) carry the scales ``s``;
        ``BN_F(h + f) = h s_F + f'`` likewise. Same math as the unfolded layer, reassociated.
        """
        mods = [self.ff2, *self._norms()]
        if self.attn is not None:
            mods.append(self.attn.out_proj)
        if isinstance(self.local, GINELocal):
            mods.append(self.local.mlp[-1])
        tensors = [t for m in mods for t in list(m.parameters(recurse=False)) + list(m.buffers(recurse=False))]
        key = tuple((t.data_ptr(), t._version) for t in tensors)
        if key == self._fold_key:
            return self._fold
        f: dict = {}
        x_scale, const = None, None
        if self.local is not None:
            s, t = self._bn_affine(self.norm_local)
            const = t
            if isinstance(self.local, GINELocal):
                lin = self.local.mlp[-1]
                f["local_w"], f["local_b"] = lin.weight * s[:, None], lin.bias * s
                x_scale = s
            else:
                f["local_s"] = s
        if self.attn is not None:
            s, t = self._bn_affine(self.norm_attn)
            lin = self.attn.out_proj
            f["attn_w"] = lin.weight * s[:, None]
            f["attn_b"] = lin.bias * s if lin.bias is not None else None
            x_scale = s if x_scale is None else x_scale + s
            const = t if const is None else const + t
        if "local_b" in f:  # the constant rides on GINE's bias
            f["local_b"], const = f["local_b"] + const, None
        f["x_scale"], f["const"] = x_scale, const
        s, t = self._bn_affine(self.norm_ff)
        f["ff_w"], f["ff_b"], f["ff_s"] = self.ff2.weight * s[:, None], self.ff2.bias * s + t, s
        self._fold_key, self._fold = key, f
        return f

    def _forward_folded(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor, layout: PackedLayout):
        """Inference with the BatchNorms folded (:meth:`_folded`): two fused
        multiply-adds replace three normalisations and four additions."""
        f = self._folded()
        acc = None
        if isinstance(self.local, GINELocal):
            h = self.local.aggregate(x, edge_index, edge_attr)
            acc = F.linear(F.relu(self.local.mlp[0](h)), f["local_w"], f["local_b"])
        elif self.local is not None:
            h, edge_attr = self.local(x, edge_index, edge_attr)
            acc = h * f["local_s"]
        if self.attn is not None:
            a = self.attn.forward_packed(x, layout, f["attn_w"], f["attn_b"])
            acc = a if acc is None else acc.add_(a)
        if f["const"] is not None:
            acc = acc.add_(f["const"])
        if f["x_scale"] is not None:
            acc = acc.addcmul_(x, f["x_scale"])
        ff = F.linear(F.relu(self.ff1(acc)), f["ff_w"], f["ff_b"])
        return ff.addcmul_(acc, f["ff_s"]), edge_attr

    def _drop(self, x: Tensor) -> Tensor:
        return F.dropout(x, self.dropout, self.training) if self.dropout > 0.0 else x

    def extra_repr(self) -> str:
        return f"dim={self.dim}, local={self.local_kind!r}, dropout={self.dropout}"
