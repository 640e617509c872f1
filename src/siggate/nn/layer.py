"""GPS layer: a local message-passing branch and a global attention branch, summed.

GraphGPS semantics (Rampášek et al., "Recipe for a General, Powerful, Scalable Graph
Transformer", https://arxiv.org/abs/2205.12454): both branches read the layer input;
each applies dropout, adds the residual and applies BatchNorm; the two are summed; then
a feed-forward block ``d -> 2d -> d`` with a residual and BatchNorm.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..options import GPSOptions
from .attention import ATTN_IMPLS, check_real, check_whole
from .attention_types import check_shared_options, check_type_options, make_attention, params, shared_options
from .kernels.fused_blocks import FoldedGPSLayer, GINEResidual, MLPResidual
from .kernels.layout import DenseIndex, batch_vector, check_edge_features  # noqa: F401 (DenseIndex re-exported: siggate.nn.layer.DenseIndex)


def _scatter_sum(src: Tensor, index: Tensor, num: int) -> Tensor:
    out = src.new_zeros(num, src.size(-1))
    return out.index_add_(0, index, src)


class GINELocal(nn.Module):
    """GINE message passing (Hu et al. 2020): ``h_i' = MLP((1 + eps) h_i + sum_j ReLU(h_j + e_ji))``.

    Shapes: ``x [N, d]``, ``edge_index [2, E]``, ``edge_attr [E, d]`` -> ``(x' [N, d], edge_attr)``;
    the edge stream is passed through unchanged (GraphGPS).
    """

    #: the branch's output is the layer's to add (with dropout and the residual); edges pass through
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
        """``x + forward(x)[0]`` as one autograd node
        (:class:`~siggate.nn.kernels.fused_blocks.GINEResidual`), for the GPS layer's fast
        path; ``[N, d]``."""
        l1, l2 = self.mlp[0], self.mlp[2]
        return GINEResidual.apply(x, edge_index[0], edge_index[1], edge_attr, self.eps, l1.weight, l1.bias,
                                   l2.weight, l2.bias)


class GatedGCNLocal(nn.Module):
    """Residual gated graph conv with an edge stream (Bresson & Laurent 2017; GraphGPS's GatedGCN).

    ``e_ij' = C e_ij + D h_i + E h_j``, ``s_ij = sigmoid(e_ij')``,
    ``h_i' = A h_i + sum_j s_ij * B h_j / (sum_j s_ij + 1e-6)``; both streams then go through
    BatchNorm, ReLU, dropout and a residual, and the updated edge features feed the next layer.
    Here ``i`` is the target and ``j`` the source of edge ``j -> i``.

    Shapes: ``x [N, d]``, ``edge_index [2, E]``, ``edge_attr [E, d]`` -> ``(x' [N, d], edge_attr' [E, d])``.
    """

    #: updated edges, and the branch applies its own dropout and residual (GraphGPS's GatedGCN)
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


#: ``model.local`` -> the branch: built as ``cls(dim, dropout=dropout)``, called as
#: ``forward(x, edge_index, edge_attr) -> (h, edge_attr)``; ``cls.updates_edges`` says whether
#: ``h`` already holds its dropout and residual and ``edge_attr`` is updated (ARCHITECTURE.md,
#: "Where to add things")
LOCAL_MODELS = {"gine": GINELocal, "gatedgcn": GatedGCNLocal}


def gps_update(x: Tensor, local: tuple[Tensor, bool] | None, attn: Tensor | None, norms, ffn_residual,
               drop) -> Tensor:
    r"""The GPS layer's recipe, written once (:class:`GPSLayer` and
    :class:`~siggate.nn.GatedGPSConv` call it):

    .. math::
        h_L = N_L(x + \mathrm{drop}(\mathrm{local})),\quad h_A = N_A(x + \mathrm{drop}(\mathrm{attn})),\quad
        h = h_L + h_A,\quad x' = N_F(h + \mathrm{FFN}(h))

    ``local``: the local branch's output ``[N, d]`` and whether it already holds its
    residual (GatedGCN adds its own dropout and residual, as in GraphGPS), or ``None``;
    ``attn``: the attention branch's output ``[N, d]`` or ``None``; ``norms``:
    ``(N_L, N_A, N_F)``; ``ffn_residual(h) = h + FFN(h)``; ``drop``: the branch dropout.
    """
    branches = []
    if local is not None:
        h, with_residual = local
        branches.append(norms[0](h if with_residual else x + drop(h)))
    if attn is not None:
        branches.append(norms[1](x + drop(attn)))
    h = branches[0] if len(branches) == 1 else branches[0] + branches[1]  # the sum
    return norms[2](ffn_residual(h))



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
        dropout (float): dropout after each branch and in the FFN. (default: ``0.0``)
        impl (str): ``"auto"``, ``"reference"``, ``"sdpa"`` or ``"packed"``, used when the
            layer builds its own layout; see :func:`~siggate.nn.impl.resolve_impl`.
            On ``"packed"`` (what ``"auto"`` runs) the GINE and FFN blocks also run fused
            (:meth:`_fused`). (default: ``"auto"``)
        ffn_dim (int, optional): hidden width of the feed-forward block; ``None`` for
            GraphGPS's ``2 * dim``. (default: ``None``)
        attn_type (str): the global attention, ``"full"``, ``"performer"`` or
            ``"exphormer"`` (:mod:`siggate.nn.attention_types`); every type is gated the
            same way. (default: ``"full"``)
        attn_kwargs (dict, optional): the type's own options, e.g.
            ``{"num_features": 64}`` for ``"performer"``. (default: ``None``)
        **attention_options: the attention's shared options, passed to it as given:
            ``gate``, ``gate_position``, ``gate_bias_init``, ``gate_weight_std``,
            ``attn_dropout``, ``bias`` (:class:`~siggate.nn.attention.GatedAttentionBase`;
            defaults :class:`siggate.options.GPSOptions`, ``gate="elementwise"``). A name
            that is none of them is refused here.

    The defaults of ``heads``, ``dropout`` and ``impl`` are :class:`siggate.options.GPSOptions`'.

    Shapes:
        ``x [N, d]``, ``edge_index [2, E]``, ``edge_attr [E, d]``, ``batch [N]`` ->
        ``(x' [N, d], edge_attr' [E, d])``.
    """

    def __init__(
        self,
        dim: int,
        heads: int = GPSOptions.heads,
        local: str = "gine",
        attn: bool = True,
        dropout: float = GPSOptions.dropout,
        impl: str = GPSOptions.impl,
        ffn_dim: int | None = None,
        attn_type: str = "full",
        attn_kwargs: dict | None = None,
        **attention_options,
    ) -> None:
        super().__init__()
        check_whole("dim", dim, 1)  # (a float reached the local branch's Linear: a torch TypeError)
        if local != "none" and local not in LOCAL_MODELS:
            raise ValueError(f"local must be one of {sorted(LOCAL_MODELS) + ['none']}, got {local!r}")
        if local == "none" and not attn:
            raise ValueError("a GPS layer needs at least one branch (local or attention)")
        if impl not in ATTN_IMPLS:
            raise ValueError(f"impl must be one of {ATTN_IMPLS}, got {impl!r}")
        check_real("dropout", dropout)
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.dim = dim
        self.local_kind = local
        self.dropout = dropout
        self.impl = impl
        self.local = None if local == "none" else LOCAL_MODELS[local](dim, dropout=dropout)
        self.norm_local = nn.BatchNorm1d(dim) if self.local is not None else None
        check_shared_options(attention_options)
        check_type_options(attn_type, attn_kwargs)  # (ignored without the branch: a misspelt key went unseen)
        self.attn = make_attention(attn_type, dim, heads, attn_kwargs, impl=impl, **attention_options) if attn else None
        self.norm_attn = nn.BatchNorm1d(dim) if attn else None
        ffn_dim = 2 * dim if ffn_dim is None else ffn_dim
        check_whole("ffn_dim", ffn_dim, 1)
        self.ff1 = nn.Linear(dim, ffn_dim)
        self.ff2 = nn.Linear(ffn_dim, dim)
        self.norm_ff = nn.BatchNorm1d(dim)
        self.reset_parameters()

    @staticmethod
    def options() -> list[str]:
        """The keywords a layer takes besides ``dim`` and ``impl`` (what a model may pass
        down): its own arguments and the attention's shared options."""
        return ([n for n in params(GPSLayer.__init__) if n not in ("dim", "impl")]
                + [n for n in shared_options() if n != "impl"])

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

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor, batch: Tensor | None = None, layout=None,
                return_details: bool = False):
        """``layout``: the batch layout shared by all layers, built once per forward by
        ``layer.attn.make_layout(batch, edge_index)`` at the model's entry; it carries
        the implementation (``layout.impl``). ``None``: built here from ``batch`` (and
        ``edge_index``) with this layer's ``impl``. With ``return_details`` also the
        attention details (the layout must then be built with ``details=True``)."""
        if layout is None and self.attn is not None:
            layout = self.attn.make_layout(batch_vector(x, batch), edge_index, impl=self.impl, details=return_details)
        fused = self._fused(x, layout)
        local = details = attn = None
        edge_in = edge_attr  # the attention reads the layer's input edges (Exphormer's edge-aware scores)
        if self.local is not None:
            check_edge_features(x, edge_index, edge_attr, self.local_kind)
            if fused and isinstance(self.local, GINELocal):
                local = self.local.forward_residual(x, edge_index, edge_attr), True
            else:
                h, edge_attr = self.local(x, edge_index, edge_attr)
                local = h, self.local.updates_edges
        if self.attn is not None:
            attn = self.attn.forward_nodes(x, layout, return_details, edge_attr=edge_in)
            attn, details = attn if return_details else (attn, None)
        ffn_residual = self._ffn_fused if fused else self._ffn_residual
        x = gps_update(x, local, attn, (self.norm_local, self.norm_attn, self.norm_ff), ffn_residual, self._drop)
        return (x, edge_attr, details) if return_details else (x, edge_attr)

    def _fused(self, x: Tensor, layout) -> bool:
        """Whether the GINE and FFN blocks with their residuals run as single autograd
        nodes (:mod:`siggate.nn.kernels.fused_blocks`): on the fast path
        (``layout.impl == "packed"``), when the branch dropout is inactive, and not under
        autocast (they run in one dtype); see :func:`~siggate.nn.impl.resolve_impl`."""
        return (layout is not None and layout.impl == "packed" and (self.dropout == 0.0 or not self.training)
                and not torch.is_autocast_enabled(x.device.type))

    def _ffn_residual(self, h: Tensor) -> Tensor:
        """``h + FFN(h)``, the FFN ``d -> ffn_dim -> d`` with ReLU and dropout."""
        return h + self._drop(self.ff2(self._drop(F.relu(self.ff1(h)))))

    def _ffn_fused(self, h: Tensor) -> Tensor:
        """:meth:`_ffn_residual` without dropout as one autograd node."""
        return MLPResidual.apply(h, h, self.ff1.weight, self.ff1.bias, self.ff2.weight, self.ff2.bias)

    def for_inference(self) -> FoldedGPSLayer:
        """This layer in eval with its BatchNorms folded
        (:class:`~siggate.nn.kernels.fused_blocks.FoldedGPSLayer`): equal outputs in eval,
        inference only, sharing this layer's modules. A snapshot: call this again after
        the weights or statistics change. While the tensors it folds are unchanged
        (:meth:`FoldedGPSLayer.is_current`) the call returns the one it built last, so
        ``model.for_inference()(batch)`` for each batch folds once per change of the weights."""
        if self.training:
            self.eval()
        folded = self.__dict__.get("_folded")
        if folded is None or not folded.is_current(self):
            folded = FoldedGPSLayer(self)
            self.__dict__["_folded"] = folded  # a plain attribute: in no state dict, no sub-module
        return folded

    def _drop(self, x: Tensor) -> Tensor:
        return F.dropout(x, self.dropout, self.training) if self.dropout > 0.0 else x

    def extra_repr(self) -> str:
        return f"dim={self.dim}, local={self.local_kind!r}, dropout={self.dropout}, impl={self.impl!r}"
