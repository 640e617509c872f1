"""Gated multi-head self-attention (the SigGate-GT attention block).

Each head ``k`` computes attention ``O_k = softmax(Q_k K_k^T / sqrt(d_head)) V_k``;
SigGate-GT multiplies it element by element by an input-conditioned sigmoid gate
``G_k = sigmoid(X W_Gk + b_Gk)`` before the heads are concatenated and projected.
A softmax row is a convex combination of value vectors, so an ungated head can never
"attend to nothing"; the gate, with values in (0, 1), lets it scale its output down.

The gate logits are extra output columns of the fused input projection (as in the
gated-attention language-model code): one column per head for ``gate="headwise"``
(``d*H + H`` extra parameters) and one per head dimension for ``gate="elementwise"``
(``d*d + d`` extra parameters). ``gate="none"`` is exactly ungated multi-head attention,
i.e. what GraphGPS uses.

:class:`GatedAttentionBase` holds what every attention type shares: the projections, the
gate and its initialisation, and :meth:`~GatedAttentionBase.gated`, the one function that
applies the gate (every type, every position) around an attention core
``(q, k, v) -> per-head output``. The types are its subclasses, chosen by name in
:mod:`siggate.nn.attention_types`; each supplies only its core and its layout:
:class:`GatedMultiheadAttention` (``"full"``, here),
:class:`~siggate.nn.performer.GatedPerformerAttention` and
:class:`~siggate.nn.exphormer.GatedExphormerAttention`.

Which implementation runs is decided once per forward, by
:meth:`~GatedAttentionBase.make_layout` at the model's entry (through
:meth:`~GatedAttentionBase.choose_impl`, the only caller of
:func:`~siggate.nn.impl.resolve_impl`), and travels with the layout (``layout.impl``).
"""

from __future__ import annotations

import math
import numbers
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..options import ATTN_IMPLS, GATE_KINDS, GATE_POSITIONS, GPSOptions, gate_width  # shared with siggate.config
from .impl import IMPL_ENV, check_node_impl, resolve_impl  # noqa: F401 (IMPL_ENV, check_node_impl re-exported)
from .kernels.layout import DenseIndex, PackedLayout
from .kernels.packed import PackedAttend


def _seed_from_global_state(salt: bytes) -> int:
    """A 63-bit seed that is a hash of torch's global CPU random state and ``salt``; the state
    is read, not advanced (:meth:`GatedAttentionBase.reset_gate`)."""
    import hashlib

    state = torch.random.get_rng_state().numpy().tobytes()
    return int.from_bytes(hashlib.sha256(state + salt).digest()[:8], "little") >> 1




def check_whole(name: str, value, low: int) -> None:
    """Refuse ``value`` unless it is a whole number ``>= low`` (a width, a count): a float or a
    value below ``low`` is refused where it is given, not met later as a ``TypeError`` or an empty
    module."""
    if isinstance(value, bool) or not (isinstance(value, numbers.Integral) and value >= low):
        raise ValueError(f"{name} must be a whole number >= {low}, got {value!r}")


def check_real(name: str, value, optional: bool = False) -> None:
    """Refuse ``value`` unless it is a real number (or ``None`` where ``optional``): a string or
    ``None`` met a comparison's ``TypeError`` ("'<=' not supported between instances of 'float'
    and 'str'") that named no argument."""
    if (value is None and optional) or (isinstance(value, numbers.Real) and not isinstance(value, bool)):
        return
    raise ValueError(f"{name} must be a number{' or None' if optional else ''}, got {value!r}")


class GatedAttentionBase(nn.Module):
    r"""What every attention type shares: projections, the per-head sigmoid gate, and
    :meth:`gated`, the pipeline around an attention core.

    One matmul ``X W_in + b_in`` gives ``q, k, v`` and the gate logits of every node; the
    gate ``G = sigmoid(X W_G + b_G)`` multiplies each head's output before the heads are
    concatenated and projected (``gate_position="output"``), or the values, or the
    projected output. A subclass supplies :meth:`build_layout` (what it needs to know about
    a batch) and :meth:`attention_core` (``(q, k, v) -> o``, all ``[N, H, d_head]``).
    With ``gate="none"`` no gate column or parameter exists.

    The defaults are :class:`siggate.options.GPSOptions`' (the subclasses, the GPS layer and
    the model pass these arguments down as keywords and write none of them again).

    Args:
        dim (int): model width ``d``; must be divisible by ``heads``.
        heads (int): number of heads ``H`` (``d_head = d / H``). (default: ``4``)
        gate (str): ``"none"``, ``"headwise"`` (one scalar gate per head and node) or
            ``"elementwise"`` (one gate per head dimension and node). (default: ``"elementwise"``)
        gate_position (str): ``"output"`` gates each head's attention output before the
            concatenation (the paper's choice), ``"value"`` the values before attention,
            ``"post"`` the output after the projection. (default: ``"output"``)
        gate_bias_init (float): initial gate bias ``b_G``; with ``0.0`` the gate is centred
            on ``sigmoid(0) = 0.5``, a large positive value starts it fully open. (default: ``0.0``)
        gate_weight_std (float, optional): gate weights start from ``N(0, std^2)``; ``0.0``
            makes the initial gate the constant ``sigmoid(gate_bias_init)``; ``None``:
            Xavier-uniform like ``q, k, v``. (default: ``None``)
        attn_dropout (float): dropout on the attention probabilities. (default: ``0.0``)
        bias (bool): biases in the projections. (default: ``True``)
    """

    #: the name of the type in :data:`siggate.nn.attention_types.ATTENTION_TYPES`
    attn_type = ""
    #: the layouts the type's :meth:`build_layout` makes (and :meth:`forward_nodes` reads); empty
    #: (a subclass of one's own that names none): not checked
    layout_types: tuple = ()

    def __init__(self, dim: int, heads: int = GPSOptions.heads, gate: str = GPSOptions.gate,
                 gate_position: str = GPSOptions.gate_position, gate_bias_init: float = GPSOptions.gate_bias_init,
                 gate_weight_std: float | None = GPSOptions.gate_weight_std,
                 attn_dropout: float = GPSOptions.attn_dropout, bias: bool = True) -> None:
        super().__init__()
        check_whole("dim", dim, 1)
        check_whole("heads", heads, 1)
        if dim % heads != 0:
            raise ValueError(f"dim ({dim}) must be divisible by heads ({heads})")
        if gate not in GATE_KINDS:
            raise ValueError(f"gate must be one of {GATE_KINDS}, got {gate!r}")
        if gate_position not in GATE_POSITIONS:
            raise ValueError(f"gate_position must be one of {GATE_POSITIONS}, got {gate_position!r}")
        check_real("attn_dropout", attn_dropout)
        check_real("gate_bias_init", gate_bias_init)
        check_real("gate_weight_std", gate_weight_std, optional=True)
        if not 0.0 <= attn_dropout < 1.0:
            raise ValueError(f"attn_dropout must be in [0, 1), got {attn_dropout}")
        if not math.isfinite(gate_bias_init):
            raise ValueError(f"gate_bias_init must be a finite number, got {gate_bias_init}")
        if gate_weight_std is not None and not (math.isfinite(gate_weight_std) and gate_weight_std >= 0):
            raise ValueError(f"gate_weight_std must be a finite number >= 0 (or None: the projection's own "
                             f"initialisation), got {gate_weight_std}")
        if not bias and gate != "none" and gate_bias_init != 0.0:
            raise ValueError(f"gate_bias_init={gate_bias_init} needs the projections' biases (the gate bias is one); "
                             "drop bias=False, or leave gate_bias_init at 0")
        self.dim, self.heads, self.head_dim = dim, heads, dim // heads
        self.gate, self.gate_position = gate, gate_position
        self.gate_bias_init, self.gate_weight_std = float(gate_bias_init), gate_weight_std
        self.attn_dropout = attn_dropout
        self.gate_dim = gate_width(gate, dim, heads)
        with torch.random.fork_rng(devices=[]):  # its width depends on the gate: it draws nothing (reset below)
            self.in_proj = nn.Linear(dim, 3 * dim + self.gate_dim, bias=bias)  # q | k | v | gate logits
        self.out_proj = nn.Linear(dim, dim, bias=bias)
        # subclasses register their own parameters and buffers, then call reset_parameters()

    def reset_parameters(self, reset_gate: bool = True) -> None:
        """Re-initialise ``q, k, v`` and output projections like ``nn.MultiheadAttention``,
        then what the type adds (:meth:`reset_attention`), then (if ``reset_gate``) the
        gate. The gate draws from a generator of its own (:meth:`reset_gate`), so gated and
        ungated modules, layers and models built from the same seed share every other initial
        weight, in whatever order their parts are reset."""
        d, w = self.dim, self.in_proj.weight
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
        """Re-initialise the gate weights and set the gate bias to ``gate_bias_init``.

        The weights are drawn on the CPU from a generator seeded by a hash of torch's global
        CPU random state and of this module's ``q, k, v`` weights, which they leave as they are:
        what is drawn after the gate (the next layer, the training's shuffles) does not depend on
        whether there is one, the same ``q, k, v`` give the same gate on every device, and the layers
        of a model, whose gates are reset one after another with nothing drawn between them,
        get gates of their own (their ``q, k, v`` differ)."""
        if self.gate_dim == 0:
            return
        d, w = self.dim, self.in_proj.weight
        with torch.no_grad():
            if w.is_meta:  # shapes only (a checkpoint's check before building): nothing to draw
                return
            g = torch.empty(self.gate_dim, d, dtype=torch.float32)
            qkv = w[: 3 * d].detach().to("cpu", torch.float32).contiguous().numpy().tobytes()
            gen = torch.Generator().manual_seed(_seed_from_global_state(b"gate" + qkv))
            if self.gate_weight_std is None:
                nn.init.xavier_uniform_(g, generator=gen)
            else:
                nn.init.normal_(g, 0.0, self.gate_weight_std, generator=gen)
            w[3 * d :].copy_(g)
            if self.in_proj.bias is not None:
                self.in_proj.bias[3 * d :].fill_(self.gate_bias_init)

    def gate_parameters(self) -> int:
        """Number of parameters the gate adds (``d*d + d``, ``d*H + H`` or 0)."""
        return self.gate_dim * (self.dim + (1 if self.in_proj.bias is not None else 0))

    node_rows_only: bool = False
    """Whether the type runs on node rows alone (Performer, Exphormer): no ``"sdpa"`` path."""

    def choose_impl(self, impl: str | None = None, padded: bool = False, details: bool = False) -> str:
        """The implementation a forward runs: ``"reference"`` for details, else ``impl``
        (or the module's own) through :func:`resolve_impl`; the only place that calls it. A
        type on node rows alone refuses an explicit ``"sdpa"`` and runs its reference under
        ``$SIGGATE_ATTN_IMPL=sdpa`` (it ran the reference under the name sdpa)."""
        if details:
            return "reference"
        asked = impl or self.impl
        chosen = resolve_impl(asked, padded=padded)
        if chosen == "sdpa" and self.node_rows_only:
            if asked != "auto":
                check_node_impl(asked)
            return "reference"
        return chosen

    def make_layout(self, batch: Tensor, edge_index: Tensor | None = None, num_graphs: int | None = None,
                    impl: str | None = None, details: bool = False, graph_index: Tensor | None = None):
        """What :meth:`forward_nodes` needs to know about a batch (``batch [N]``,
        ``edge_index [2, E]``, ``graph_index [G]``: an identity per graph, e.g. its dataset
        index, that Exphormer seeds its expanders with instead of the graphs' own content;
        the other types ignore it), built once per forward at the model's entry and
        shared by every layer; it carries the implementation (:meth:`choose_impl`) as ``.impl``."""
        impl = self.choose_impl(impl, details=details)
        if batch.dtype != torch.long:  # (an int32 batch vector failed in Performer's scatter with torch's words)
            batch = batch.long()
        return self.build_layout(batch, edge_index, num_graphs, impl, graph_index=graph_index)

    def build_layout(self, batch: Tensor, edge_index: Tensor | None, num_graphs: int | None, impl: str,
                     graph_index: Tensor | None = None):
        """:meth:`make_layout` for a resolved ``impl``; returns an object with ``.impl``."""
        raise NotImplementedError

    def attention_core(self, x: Tensor, layout, edge_attr: Tensor | None = None):
        """The type's attention for node rows ``x [N, d]`` over ``layout``, as a callable
        ``(q, k, v) -> o``, all ``[N, H, d_head]`` (``layout.impl`` picks the kernel);
        ``edge_attr [E, d]``: the layer's input edge features, for a type that scores with
        them (Exphormer; the others ignore them)."""
        raise NotImplementedError

    def split(self, x: Tensor):
        """Input ``x (..., d)`` -> ``q, k, v (..., H, d_head)`` and the gate
        ``sigmoid(logits) (..., H, d_head|1)`` (``None`` without a gate), from one projection."""
        proj = self.in_proj(x)
        lead, d, H, dh = proj.shape[:-1], self.dim, self.heads, self.head_dim
        parts = proj.split([d, d, d, self.gate_dim], dim=-1)  # one backward (a cat), not four zero-filled slices
        q, k, v = (t.view(*lead, H, dh) for t in parts[:3])
        gate = torch.sigmoid(parts[3]).view(*lead, H, self.gate_dim // H) if self.gate_dim else None  # (no -1: 0 rows)
        return q, k, v, gate

    def extra_rows(self) -> Tensor | None:
        """Rows besides the nodes' that the type's core attends with (Exphormer's virtual
        nodes, ``[r, d]``), or ``None``: :meth:`gated` projects and gates them with the nodes."""
        return None

    def gated(self, x: Tensor, core, fused: bool = False):
        """The gated multi-head pipeline, for every type and gate position, and the one
        place that applies the gate: input projection, value gate, ``core(q, k, v) -> o``
        (``(..., H, d_head)`` each), output gate (each head before the concatenation), output
        projection, post gate.

        The type's :meth:`extra_rows` (node rows only) are projected and value-gated with
        ``x``: the core receives their ``q, k, v`` after the nodes' and returns the nodes' rows.

        ``fused`` (node rows on the fast path, :meth:`_fused`): a core that offers
        ``core.projected(x, W, b, dim, heads) -> (o, rest)`` (the input projection and the
        core in one step, one autograd node in training, e.g.
        :class:`~siggate.nn.kernels.packed.PackedAttend`) gets the projection too, unless the
        gate sits on the values or there are extra rows; ``rest``, the projection's columns
        after ``q | k | v``, are the gate logits. The same operations, fewer autograd nodes.

        ``x (..., d)`` -> ``(out (..., d), (head_out, head_out_gated, gate))``, the last
        three ``(..., H, d_head)`` and ``(..., H, d_head|1)`` or ``None``: the heads' outputs
        before and after an output gate. With the gate on the values (``"value"``) both hold
        the gated heads, and on the projected output (``"post"``) neither does: there the two
        are one tensor."""
        extra = self.extra_rows()
        at = None if self.gate_dim == 0 else self.gate_position
        projected = getattr(core, "projected", None) if fused and extra is None and at != "value" else None
        both = projected(x, self.in_proj.weight, self.in_proj.bias, self.dim, self.heads) if projected else None
        if both is not None:  # the projection and the core as one node; the rest of the projection: gate logits
            head_out = o = both[0]
            gate = torch.sigmoid(both[1]).view(x.size(0), self.heads, self.gate_dim // self.heads) if at else None
        else:
            q, k, v, gate = self.split(x if extra is None else torch.cat([x, extra.to(x.dtype)]))
            head_out = o = core(q, k, v * gate if at == "value" else v)  # ..., H, dh
        if extra is not None and gate is not None:
            gate = gate[: x.size(0)]  # the nodes' rows
        if at == "output":
            o = o * gate
        out = self.out_proj(o.flatten(-2))  # ..., d
        if at == "post":
            out = (out.unflatten(-1, (self.heads, self.head_dim)) * gate).flatten(-2)
        return out, (head_out, o, gate)

    def forward_nodes(self, x: Tensor, layout, return_details: bool = False, edge_attr: Tensor | None = None):
        """Attention of each graph's nodes on node rows ``x [N, d]`` (and the edges'
        ``edge_attr [E, d]``, see :meth:`attention_core`) -> ``[N, d]``. With
        ``return_details``, ``(out, details)``: ``head_out``, ``head_out_gated``
        ``(B, N_max, H, d_head)`` and ``gate`` padded by graph (``layout.batch``) as the
        ``"full"`` type returns them, and ``attn`` ``None`` (only ``"full"`` forms it)."""
        self.check_layout(layout, x)
        out, parts = self.gated(x, self.attention_core(x, layout, edge_attr), self._fused(x, layout))
        if not return_details:
            return out
        # every graph of the layout, trailing graphs without nodes too: the model's mask is [G, N_max]
        index = DenseIndex.from_batch(layout.batch, getattr(layout, "num_graphs", None))

        def padded(t):
            return None if t is None else index.to_dense(t.flatten(1)).view(*index.mask.shape, *t.shape[1:])

        return out, dict(zip(("head_out", "head_out_gated", "gate"), map(padded, parts)), attn=None)

    def check_layout(self, layout, x: Tensor | None = None) -> None:
        """Refuse a layout that another attention type built, or one built for another batch than
        the node rows ``x`` (``ValueError`` naming the call that builds this type's: a model of
        one's own that built a :class:`PackedLayout` for a Performer layer, or kept one layout
        across batches, failed deep inside the kernels with an index error)."""
        if self.layout_types and not isinstance(layout, self.layout_types):
            raise ValueError(f"a {type(layout).__name__} is not a layout the {self.attn_type!r} attention reads; "
                             "build it with layer.attn.make_layout(batch, edge_index, num_graphs)")
        nodes = getattr(layout, "num_nodes", None)  # every layout of siggate's says it
        if x is not None and nodes is not None and x.size(0) != nodes:
            raise ValueError(f"the layout was built for a batch of {nodes} nodes, and x has {x.size(0)} rows; build "
                             "it from this batch: layer.attn.make_layout(batch, edge_index, num_graphs)")

    def _fused(self, x: Tensor, layout) -> bool:
        """Whether :meth:`gated` may hand the input projection to the core (one step, one
        autograd node in training): on the fast path (``layout.impl == "packed"``), on node
        rows and not under autocast (the kernel runs in one dtype); see
        :func:`~siggate.nn.impl.resolve_impl`."""
        return layout.impl == "packed" and x.dim() == 2 and not torch.is_autocast_enabled(x.device.type)

    def _dropout_p(self) -> float:
        return self.attn_dropout if self.training else 0.0

    def extra_repr(self) -> str:
        return (f"dim={self.dim}, heads={self.heads}, gate={self.gate!r}, gate_position={self.gate_position!r}, "
                f"gate_bias_init={self.gate_bias_init}, attn_dropout={self.attn_dropout}, impl={self.impl!r}")


class GatedMultiheadAttention(GatedAttentionBase):
    r"""Multi-head self-attention with an optional input-conditioned sigmoid gate
    (attention type ``"full"``: softmax over all nodes of a graph).

    From "SigGate-GT" (a GraphGPS graph transformer with sigmoid-gated attention); the gate
    follows Qiu et al., "Gated Attention for Large Language Models"
    (https://arxiv.org/abs/2505.06708).

    Args:
        dim, heads: see :class:`GatedAttentionBase`.
        impl (str): ``"auto"``, ``"reference"`` (:meth:`reference_core`, spelled out),
            ``"sdpa"`` (``F.scaled_dot_product_attention`` on the padded batch) or
            ``"packed"`` (node rows over a :class:`PackedLayout`,
            :func:`~siggate.nn.kernels.packed.packed_core`); see :func:`resolve_impl`.
            (default: ``"auto"``)
        **kwargs: the gate, ``attn_dropout`` and ``bias``: see :class:`GatedAttentionBase`.
    """

    attn_type = "full"
    layout_types = (DenseIndex, PackedLayout)

    def __init__(self, dim: int, heads: int = GPSOptions.heads, impl: str = GPSOptions.impl, **kwargs) -> None:
        super().__init__(dim, heads, **kwargs)
        if impl not in ATTN_IMPLS:
            raise ValueError(f"impl must be one of {ATTN_IMPLS}, got {impl!r}")
        self.impl = impl
        self.reset_parameters()

    def forward(self, x: Tensor, mask: Tensor | None = None, return_details: bool = False, impl: str | None = None):
        """Gated self-attention of each graph of a padded batch with itself.

        Args:
            x (Tensor): node features ``(B, N, d)``, zero-padded.
            mask (Tensor, optional): ``(B, N)`` bool, ``True`` for real nodes (PyG's
                ``to_dense_batch`` convention; the opposite of ``nn.MultiheadAttention``'s
                ``key_padding_mask``). Padded keys get no attention. ``None``: no padding.
            return_details (bool): also return a dict with ``attn`` ``(B, H, N, N)``
                (probabilities before dropout), ``head_out`` (before the gate) and
                ``head_out_gated`` ``(B, N, H, d_head)``, and ``gate`` (``(B, N, H,
                d_head|1)``, ``None`` for ``gate="none"``); runs ``impl="reference"``.
                "Before" and "after" differ only for ``gate_position="output"``: a value
                gate acts before the heads' outputs (both are gated), a ``"post"`` gate
                after the projection (neither is), and the two are the same tensor.
            impl (str, optional): overrides :attr:`impl` for this call.

        Returns:
            ``(B, N, d)``; rows at padded positions are not meaningful (``"packed"``
            returns 0 there). With ``return_details``, ``(out, details)``.
        """
        impl = self.choose_impl(impl, padded=True, details=return_details)
        if mask is None:
            mask = torch.ones(x.shape[:2], dtype=torch.bool, device=x.device)
        elif mask.dtype != torch.bool or mask.shape != x.shape[:2]:  # (SDPA read a 0/1 float mask as a bias)
            raise ValueError(f"mask must be a bool tensor of shape (B, N) = {tuple(x.shape[:2])}, True for real "
                             f"nodes; got {mask.dtype} of shape {tuple(mask.shape)} (mask.bool() converts a 0/1 one)")
        if impl == "packed":  # the real rows, attended over a layout built from the mask
            batch = torch.arange(x.size(0), device=x.device).repeat_interleave(mask.sum(1))
            out = x.new_zeros(x.shape)
            out[mask] = self.forward_nodes(x[mask], PackedLayout.from_batch(batch, x.size(0)))
            return out
        probs: dict = {}
        out, (head_out, o, gate) = self.gated(x, partial(self.reference_core, mask=mask, impl=impl, probs=probs))
        if not return_details:
            return out
        return out, {"attn": probs.get("attn"), "head_out": head_out, "head_out_gated": o, "gate": gate}

    def reference_core(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor, impl: str = "reference",
                       probs: dict | None = None) -> Tensor:
        """The padded attention core: ``q, k, v (B, N, H, d_head)``, ``mask (B, N)`` ->
        ``(B, N, H, d_head)``; ``"reference"`` spells out scores, mask, softmax and
        dropout (and stores the probabilities in ``probs["attn"]``), ``"sdpa"`` calls
        ``F.scaled_dot_product_attention``."""
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # B, H, N, dh
        if impl == "sdpa":
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None, None, :], dropout_p=self._dropout_p())
            return o.transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim)  # B, H, N, N
        # the dtype's lowest finite value, not -inf: a padded row with no real key (a graph without
        # nodes) then gets finite probabilities, whose rows are dropped, not NaN in every gradient
        attn = scores.masked_fill(~mask[:, None, None, :], torch.finfo(scores.dtype).min).softmax(dim=-1)
        if probs is not None:
            probs["attn"] = attn
        return (F.dropout(attn, self._dropout_p(), training=self.training) @ v).transpose(1, 2)  # B, N, H, dh

    def build_layout(self, batch: Tensor, edge_index: Tensor | None, num_graphs: int | None, impl: str,
                     graph_index: Tensor | None = None) -> DenseIndex | PackedLayout:
        """A :class:`PackedLayout` for ``"packed"``, else the padded batch's
        :class:`DenseIndex` (``edge_index`` and ``graph_index`` are not used)."""
        if impl == "packed":
            return PackedLayout.from_batch(batch, num_graphs)
        return DenseIndex.from_batch(batch, num_graphs, impl)

    def attention_core(self, x: Tensor, layout: PackedLayout, edge_attr: Tensor | None = None):
        """:func:`~siggate.nn.kernels.packed.packed_core` over ``layout`` (no edge scores), with
        the input projection fused into it where a kernel allows
        (:class:`~siggate.nn.kernels.packed.PackedAttend`)."""
        return PackedAttend(layout, self._dropout_p())

    def forward_nodes(self, x: Tensor, layout: DenseIndex | PackedLayout, return_details: bool = False,
                      edge_attr: Tensor | None = None):
        """Node rows ``x [N, d]`` -> ``[N, d]`` (no edge scores): over a :class:`PackedLayout` the packed
        core; over a :class:`DenseIndex` :meth:`forward` on the padded batch (as a module
        call, so hooks see it), which alone forms the probabilities ``return_details`` asks for."""
        self.check_layout(layout, x)
        if isinstance(layout, PackedLayout):
            if return_details:
                raise ValueError("return_details needs the padded reference: build the layout with "
                                 "make_layout(..., details=True)")
            return super().forward_nodes(x, layout)
        h = self(layout.to_dense(x), layout.mask, return_details=return_details, impl=layout.impl)
        h, details = h if return_details else (h, None)
        return (layout.to_sparse(h), details) if return_details else layout.to_sparse(h)
