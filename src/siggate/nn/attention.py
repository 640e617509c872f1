"""Gated multi-head self-attention (the SigGate-GT attention block).

Each head ``k`` computes softmax attention ``O_k = softmax(Q_k K_k^T / sqrt(d_head)) V_k``;
SigGate-GT multiplies it element by element by an input-conditioned sigmoid gate
``G_k = sigmoid(X W_Gk + b_Gk)`` before the heads are concatenated and projected.
A softmax row is a convex combination of value vectors, so an ungated head can never
"attend to nothing"; the gate, with values in (0, 1), lets it scale its output down.

The gate logits are extra output columns of the fused input projection (as in the
gated-attention language-model code): one column per head for ``gate="headwise"``
(``d*H + H`` extra parameters) and one per head dimension for ``gate="elementwise"``
(``d*d + d`` extra parameters). ``gate="none"`` is exactly ungated multi-head attention,
i.e. what GraphGPS uses.

:class:`GatedAttentionBase` holds what every attention type shares (the projections, the
gate and its initialisation, the node-row pipeline around an attention core); the types
are its subclasses, chosen by name in :mod:`siggate.nn.attention_types`:
:class:`GatedMultiheadAttention` (``"full"``, softmax over all nodes of a graph, here),
:class:`~siggate.nn.performer.GatedPerformerAttention` and
:class:`~siggate.nn.exphormer.GatedExphormerAttention`.

:meth:`GatedMultiheadAttention.forward` spells the math out (``impl="reference"``): it is
the test oracle and what analyses read. The other implementations (``"sdpa"``,
``"packed"``, in :mod:`siggate.nn.kernels`) must equal it; :func:`resolve_impl` is the one
place that decides which runs.
"""

from __future__ import annotations

import math
import os

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..options import ATTN_IMPLS, GATE_KINDS, GATE_POSITIONS  # shared with siggate.config
from .kernels.layout import DenseIndex, PackedLayout, batch_vector
from .kernels.packed import packed_attention, packed_from_padded

#: Environment variable that replaces ``impl="auto"`` everywhere (for debugging).
IMPL_ENV = "SIGGATE_ATTN_IMPL"


def resolve_impl(impl: str, padded: bool = False) -> str:
    """The implementation that runs for ``impl``: ``"reference"``, ``"sdpa"`` or ``"packed"``.

    An explicit choice is returned as given. ``"auto"`` becomes ``$SIGGATE_ATTN_IMPL`` when
    that is set (to force an implementation while debugging, without touching code),
    otherwise ``"packed"`` for node rows (a GPS layer, the model, :class:`GatedGPSConv`)
    and ``"sdpa"`` for a padded batch (the attention module called alone). Requests for
    attention details (``return_details=True``) always run ``"reference"``, the only
    implementation that forms the attention probabilities. What runs under ``"auto"``:

    ======================  ========  ====================  ========  =====================================
    input                   device    autograd              autocast  runs
    ======================  ========  ====================  ========  =====================================
    node rows               CPU       on (training)         off       packed: attention branch, GINE and
                                                                      FFN blocks as single autograd nodes
                                                                      with hand-written backwards (the
                                                                      GINE/FFN blocks only when the
                                                                      branch dropout is 0)
    node rows               CPU       off (inference)       off       packed: batched-matmul kernel; in
                                                                      eval the BatchNorms are folded
    node rows               CUDA      on / off              off       packed: SDPA per size group; fused
                                                                      GINE/FFN blocks, folding as above
    node rows               any       on / off              on        packed, at the autocast dtype, with
                                                                      no fused blocks and no folding
    padded ``(B, N, d)``    any       on / off              any       sdpa
    ======================  ========  ====================  ========  =====================================

    Every implementation serves every gate kind and position (on CPU, gates at
    ``"value"`` and ``"post"`` take the per-core kernel :class:`_GroupedAttention`
    instead of the whole-branch one). ``benchmarks/README.md`` has the measurements.

    For the attention types ``"performer"`` and ``"exphormer"`` (node rows only),
    ``"packed"`` (what ``"auto"`` runs) means their fast path in :mod:`siggate.nn.kernels`
    and any other implementation their readable reference; they refuse ``impl="sdpa"``.
    """
    if impl == "auto":
        impl = os.environ.get(IMPL_ENV) or "auto"
        if impl not in ATTN_IMPLS:
            raise ValueError(f"${IMPL_ENV} must be one of {ATTN_IMPLS}, got {impl!r}")
    elif impl not in ATTN_IMPLS:
        raise ValueError(f"impl must be one of {ATTN_IMPLS}, got {impl!r}")
    if impl == "auto":
        return "sdpa" if padded else "packed"
    return impl


def check_node_impl(impl: str) -> None:
    """The implementations an attention type on node rows only takes: every one but the
    padded ``"sdpa"``."""
    if impl not in ATTN_IMPLS or impl == "sdpa":
        allowed = tuple(i for i in ATTN_IMPLS if i != "sdpa")
        raise ValueError(f"impl must be one of {allowed} for this attention type, got {impl!r}")


class GatedAttentionBase(nn.Module):
    r"""What every attention type shares: projections, the per-head sigmoid gate and the
    node-row pipeline around an attention core.

    One matmul ``X W_in + b_in`` gives ``q, k, v`` and the gate logits of every node (the
    logits are extra output columns, see the module docstring); the gate
    ``G = sigmoid(X W_G + b_G)`` multiplies each head's output before the heads are
    concatenated and projected (``gate_position="output"``), or the values, or the
    projected output. Subclasses define the attention itself
    (:meth:`forward_nodes` runs ``attention core -> gate -> out_proj`` through
    :meth:`_gated_rows`) and say which layout of a batch they need (:meth:`make_layout`).
    With ``gate="none"`` no gate column or parameter exists.

    Args:
        dim (int): model width ``d``; must be divisible by ``heads``.
        heads (int): number of heads ``H`` (``d_head = d / H``). (default: ``4``)
        gate (str): ``"none"``, ``"headwise"`` (one scalar gate per head and node) or
            ``"elementwise"`` (one gate per head dimension and node). (default: ``"elementwise"``)
        gate_position (str): where the gate multiplies. ``"output"`` gates each head's
            attention output before concatenation (the paper's choice), ``"value"`` gates
            the values before attention, ``"post"`` gates after the output projection.
            (default: ``"output"``)
        gate_bias_init (float): initial gate bias ``b_G``. The gate starts at
            ``sigmoid(X W_G + b_G)``; with the default ``0.0`` it is centred on
            ``sigmoid(0) = 0.5``, a large positive value starts it fully open (1.0).
            (default: ``0.0``)
        gate_weight_std (float, optional): if given, the gate weights start from
            ``N(0, gate_weight_std^2)``; ``0.0`` makes the initial gate the constant
            ``sigmoid(gate_bias_init)``. If ``None``, Xavier-uniform like ``q, k, v``.
            (default: ``None``)
        attn_dropout (float): dropout on the attention probabilities. (default: ``0.0``)
        bias (bool): biases in the projections. (default: ``True``)
    """

    #: the name of the type in :data:`siggate.nn.attention_types.ATTENTION_TYPES`
    attn_type = ""
    #: whether the type reads the batch's graph data: ``forward_nodes(..., edge_attr=)`` (the
    #: layer's input edge features ``[E, d]``) and ``make_layout(..., graph_index=)`` (the
    #: graphs' dataset indices ``[G]``); the layer and the model pass them only then
    uses_graph_data = False

    def __init__(
        self,
        dim: int,
        heads: int = 4,
        gate: str = "elementwise",
        gate_position: str = "output",
        gate_bias_init: float = 0.0,
        gate_weight_std: float | None = None,
        attn_dropout: float = 0.0,
        bias: bool = True,
    ) -> None:
        super().__init__()
        if dim % heads != 0:
            raise ValueError(f"dim ({dim}) must be divisible by heads ({heads})")
        if gate not in GATE_KINDS:
            raise ValueError(f"gate must be one of {GATE_KINDS}, got {gate!r}")
        if gate_position not in GATE_POSITIONS:
            raise ValueError(f"gate_position must be one of {GATE_POSITIONS}, got {gate_position!r}")
        if not 0.0 <= attn_dropout < 1.0:
            raise ValueError(f"attn_dropout must be in [0, 1), got {attn_dropout}")
        self.dim = dim
        self.heads = heads
        self.head_dim = dim // heads
        self.gate = gate
        self.gate_position = gate_position
        self.gate_bias_init = float(gate_bias_init)
        self.gate_weight_std = gate_weight_std
        self.attn_dropout = attn_dropout
        self.gate_dim = {"none": 0, "headwise": heads, "elementwise": dim}[gate]
        # One matmul computes q, k, v and the gate logits.
        self.in_proj = nn.Linear(dim, 3 * dim + self.gate_dim, bias=bias)
        self.out_proj = nn.Linear(dim, dim, bias=bias)
        # subclasses register their own parameters and buffers, then call reset_parameters()

    def reset_parameters(self, reset_gate: bool = True) -> None:
        """Re-initialise ``q, k, v`` and output projections like ``nn.MultiheadAttention``,
        then what the type adds (:meth:`reset_attention`), then (if ``reset_gate``) the
        gate. The gate comes last so that gated and ungated models built from the same
        seed share every other initial weight."""
        d = self.dim
        w = self.in_proj.weight
        with torch.no_grad():
            qkv = torch.empty(3 * d, d, dtype=w.dtype, device=w.device)
            nn.init.xavier_uniform_(qkv)
            w[: 3 * d].copy_(qkv)
            if self.in_proj.bias is not None:
                self.in_proj.bias[: 3 * d].zero_()
        self.out_proj.reset_parameters()
        if self.out_proj.bias is not None:
            nn.init.zeros_(self.out_proj.bias)
        self.reset_attention()
        if reset_gate:
            self.reset_gate()

    def reset_attention(self) -> None:
        """Re-initialise what the attention type adds (random features, virtual nodes)."""

    def reset_gate(self) -> None:
        """Re-initialise the gate weights and set the gate bias to ``gate_bias_init``."""
        if self.gate_dim == 0:
            return
        d = self.dim
        w = self.in_proj.weight
        with torch.no_grad():
            g = torch.empty(self.gate_dim, d, dtype=w.dtype, device=w.device)
            if self.gate_weight_std is None:
                nn.init.xavier_uniform_(g)
            else:
                nn.init.normal_(g, 0.0, self.gate_weight_std)
            w[3 * d :].copy_(g)
            if self.in_proj.bias is not None:
                self.in_proj.bias[3 * d :].fill_(self.gate_bias_init)

    def gate_parameters(self) -> int:
        """Number of parameters the gate adds (``d*d + d``, ``d*H + H`` or 0)."""
        return self.gate_dim * (self.dim + (1 if self.in_proj.bias is not None else 0))

    def _impl(self, impl: str | None, return_details: bool) -> str:
        """The implementation a call runs: ``"reference"`` when the details are asked for,
        else ``impl`` (or the module's own) resolved (:func:`resolve_impl`)."""
        return "reference" if return_details else resolve_impl(impl or self.impl)

    def _split(self, x: Tensor):
        """Input ``x (..., d)`` -> ``q, k, v (..., H, d_head)`` and the gate ``(..., H, d_head|1)``
        (``None`` without a gate), from one input projection."""
        return self._heads(self.in_proj(x))

    def _heads(self, proj: Tensor):
        """:meth:`_split` of the input projection ``(..., 3d + g)``."""
        lead = proj.shape[:-1]
        d, H, dh = self.dim, self.heads, self.head_dim
        parts = proj.split([d, d, d, self.gate_dim], dim=-1)  # one backward (a cat), not four zero-filled slices
        q, k, v = (t.view(*lead, H, dh) for t in parts[:3])
        gate = torch.sigmoid(parts[3]).view(*lead, H, -1) if self.gate_dim else None
        return q, k, v, gate

    def _gated_rows(self, x: Tensor, core, out_weight: Tensor | None = None, out_bias: Tensor | None = None,
                    residual: bool = False, return_details: bool = False, batch: Tensor | None = None):
        """The gated multi-head pipeline on node rows around ``core(q, k, v) -> o``, all
        ``[N, H, d_head]``: input projection, value gate, ``core``, output gate (each
        head before the concatenation), output projection (``out_weight``/``out_bias``
        replace its parameters, e.g. BatchNorm-folded), post gate, ``+ x`` if
        ``residual``. Returns ``[N, d]``, or ``(out, details)`` with ``head_out`` and
        ``head_out_gated`` ``(B, N_max, H, d_head)`` and ``gate`` ``(B, N_max, H, d_head|1)``
        (or ``None``), padded by graph (``batch [N]``) as the ``"full"`` type returns them,
        and ``attn`` ``None`` (only ``"full"`` forms the attention probabilities)."""
        n, d, H, dh = x.size(0), self.dim, self.heads, self.head_dim
        q, k, v, gate = self._split(x)  # N, H, dh; gate N, H, dh|1 or None
        if gate is not None and self.gate_position == "value":
            v = v * gate
        head_out = o = core(q, k, v)  # N, H, dh
        if gate is not None and self.gate_position == "output":
            o = o * gate
        w, b = (self.out_proj.weight, self.out_proj.bias) if out_weight is None else (out_weight, out_bias)
        out = F.linear(o.reshape(n, d), w, b)  # N, d
        if gate is not None and self.gate_position == "post":
            out = (out.view(n, H, dh) * gate).view(n, d)
        if residual:
            out = out + x
        if not return_details:
            return out
        index = DenseIndex.from_batch(batch_vector(x, batch))

        def padded(t):
            return None if t is None else index.to_dense(t.reshape(n, -1)).view(*index.mask.shape, *t.shape[1:])

        return out, {"attn": None, "head_out": padded(head_out), "head_out_gated": padded(o), "gate": padded(gate)}

    def make_layout(self, batch: Tensor, edge_index: Tensor | None = None, num_graphs: int | None = None,
                    impl: str | None = None):
        """What :meth:`forward_nodes` needs to know about a batch, built once per batch and
        shared by every layer (``batch [N]``, ``edge_index [2, E]``)."""
        raise NotImplementedError

    def ensure_layout(self, layout, batch: Tensor, edge_index: Tensor | None = None, impl: str | None = None):
        """``layout`` if :meth:`forward_nodes` can use it with ``impl``, else one built
        by :meth:`make_layout`."""
        raise NotImplementedError

    def forward_nodes(self, x: Tensor, layout, impl: str | None = None, return_details: bool = False,
                      out_weight: Tensor | None = None, out_bias: Tensor | None = None, residual: bool = False):
        """Attention of each graph's nodes on node rows ``x [N, d]`` -> ``[N, d]`` (see
        :meth:`_gated_rows` for the other arguments)."""
        raise NotImplementedError

    def extra_repr(self) -> str:
        return (
            f"dim={self.dim}, heads={self.heads}, gate={self.gate!r}, "
            f"gate_position={self.gate_position!r}, gate_bias_init={self.gate_bias_init}, "
            f"attn_dropout={self.attn_dropout}, impl={self.impl!r}"
        )


class GatedMultiheadAttention(GatedAttentionBase):
    r"""Multi-head self-attention with an optional input-conditioned sigmoid gate
    (attention type ``"full"``: softmax over all nodes of a graph).

    From "SigGate-GT" (a GraphGPS graph transformer with sigmoid-gated attention); the gate
    follows the gated attention of Qiu et al., "Gated Attention for Large Language Models"
    (https://arxiv.org/abs/2505.06708).

    Args:
        dim, heads, gate, gate_position, gate_bias_init, gate_weight_std, attn_dropout,
            bias: see :class:`GatedAttentionBase`.
        impl (str): ``"auto"``, ``"reference"`` (the math below, spelled out),
            ``"sdpa"`` (``F.scaled_dot_product_attention`` on the padded batch) or
            ``"packed"`` (node rows over a size-grouped layout,
            :mod:`siggate.nn.kernels`); see :func:`resolve_impl`. (default: ``"auto"``)
    """

    attn_type = "full"

    def __init__(
        self,
        dim: int,
        heads: int = 4,
        gate: str = "elementwise",
        gate_position: str = "output",
        gate_bias_init: float = 0.0,
        gate_weight_std: float | None = None,
        attn_dropout: float = 0.0,
        bias: bool = True,
        impl: str = "auto",
    ) -> None:
        super().__init__(dim, heads, gate, gate_position, gate_bias_init, gate_weight_std, attn_dropout, bias)
        if impl not in ATTN_IMPLS:
            raise ValueError(f"impl must be one of {ATTN_IMPLS}, got {impl!r}")
        self.impl = impl
        self.reset_parameters()

    def forward(self, x: Tensor, mask: Tensor | None = None, return_details: bool = False,
                impl: str | None = None):
        """Gated self-attention of each graph of a padded batch with itself.

        Args:
            x (Tensor): node features ``(B, N, d)``, zero-padded.
            mask (Tensor, optional): ``(B, N)`` bool, ``True`` for real nodes (PyG's
                ``to_dense_batch`` convention; the opposite of ``nn.MultiheadAttention``'s
                ``key_padding_mask``). Padded keys get no attention. ``None``: no padding.
            return_details (bool): also return a dict with ``attn`` ``(B, H, N, N)``
                (probabilities before dropout), ``head_out`` (before the gate) and
                ``head_out_gated`` ``(B, N, H, d_head)``, and ``gate`` (``(B, N, H,
                d_head)`` or ``(B, N, H, 1)``, ``None`` for ``gate="none"``); runs
                ``impl="reference"``.
            impl (str, optional): overrides :attr:`impl` for this call.

        Returns:
            ``(B, N, d)``; rows at padded positions are not meaningful (``"packed"``
            returns 0 there). With ``return_details``, ``(out, details)``.
        """
        impl = "reference" if return_details else resolve_impl(impl or self.impl, padded=True)
        if impl == "packed":
            return packed_from_padded(self, x, mask)
        B, N, _ = x.shape
        d, H, dh = self.dim, self.heads, self.head_dim
        q, k, v, gate = self._split(x)  # B, N, H, dh; gate B, N, H, dh|1 or None
        if gate is not None and self.gate_position == "value":
            v = v * gate
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # B, H, N, dh
        p_drop = self.attn_dropout if self.training else 0.0
        attn = None
        if impl == "sdpa":
            attn_mask = None if mask is None else mask[:, None, None, :]  # B, 1, 1, N
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=p_drop)
        else:  # reference
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(dh)  # B, H, N, N
            if mask is not None:
                scores = scores.masked_fill(~mask[:, None, None, :], float("-inf"))
            attn = scores.softmax(dim=-1)
            o = F.dropout(attn, p_drop, training=self.training) @ v  # B, H, N, dh
        o = o.transpose(1, 2)  # B, N, H, dh
        head_out = o
        if gate is not None and self.gate_position == "output":
            o = o * gate
        out = self.out_proj(o.reshape(B, N, d))  # B, N, d
        if gate is not None and self.gate_position == "post":
            out = (out.view(B, N, H, dh) * gate).view(B, N, d)
        if not return_details:
            return out
        return out, {"attn": attn, "head_out": head_out, "head_out_gated": o, "gate": gate}

    def forward_packed(self, x: Tensor, layout: PackedLayout, out_weight: Tensor | None = None,
                       out_bias: Tensor | None = None, residual: bool = False) -> Tensor:
        """``impl="packed"`` on node rows ``x [num_nodes, d]`` -> ``[num_nodes, d]``: see
        :func:`siggate.nn.kernels.packed.packed_attention` (``out_weight``/``out_bias``
        replace the output projection's parameters; ``residual`` adds ``x``)."""
        return packed_attention(self, x, layout, out_weight, out_bias, residual)

    def make_layout(self, batch: Tensor, edge_index: Tensor | None = None, num_graphs: int | None = None,
                    impl: str | None = None) -> DenseIndex | PackedLayout:
        """A :class:`PackedLayout` when ``impl`` resolves to ``"packed"``, else the padded
        batch's :class:`DenseIndex` (``edge_index`` is not used)."""
        packed = resolve_impl(impl or self.impl) == "packed"
        return (PackedLayout if packed else DenseIndex).from_batch(batch, num_graphs)

    def ensure_layout(self, layout, batch: Tensor, edge_index: Tensor | None = None,
                      impl: str | None = None) -> DenseIndex | PackedLayout:
        """``"packed"`` needs a :class:`PackedLayout` (``None``: built here; a
        :class:`DenseIndex` raises, since that would be the slow path); the other
        implementations a :class:`DenseIndex`, built from ``batch`` if ``layout`` is not one
        (so ``SIGGATE_ATTN_IMPL=reference`` works on fast-path code)."""
        if resolve_impl(impl or self.impl) == "packed":
            if layout is None:
                return PackedLayout.from_batch(batch)
            if not isinstance(layout, PackedLayout):
                raise ValueError(f"impl 'packed' needs a PackedLayout, got {type(layout).__name__}: pass "
                                 "PackedLayout.from_batch(batch), or None to build it here, or use impl='sdpa'")
            return layout
        return layout if isinstance(layout, DenseIndex) else DenseIndex.from_batch(batch)

    def forward_nodes(self, x: Tensor, layout: DenseIndex | PackedLayout, impl: str | None = None,
                      return_details: bool = False, out_weight: Tensor | None = None, out_bias: Tensor | None = None,
                      residual: bool = False):
        """Node rows ``x [N, d]`` -> ``[N, d]``: :meth:`forward_packed` over a
        :class:`PackedLayout`, or :meth:`forward` on the padded batch of a
        :class:`DenseIndex` (``"reference"``, ``"sdpa"``, and ``return_details``, which
        also returns the padded details)."""
        impl = self._impl(impl, return_details)
        if impl == "packed":
            return self.forward_packed(x, layout, out_weight, out_bias, residual)
        if out_weight is not None:
            raise ValueError("out_weight/out_bias replace the output projection only with impl 'packed'")
        h = self(layout.to_dense(x), layout.mask, return_details=return_details, impl=impl)  # module call: hooks run
        h, details = h if return_details else (h, None)
        h = layout.to_sparse(h)
        if residual:
            h = x + h
        return (h, details) if return_details else h
