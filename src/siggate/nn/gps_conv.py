"""A drop-in for PyG's :class:`torch_geometric.nn.GPSConv` with SigGate-GT's gated attention."""

from __future__ import annotations

import inspect
from functools import partial
from typing import Any, Callable

import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn.inits import reset
from torch_geometric.nn.resolver import activation_resolver, normalization_resolver

from .attention_types import ATTENTION_TYPES, check_shared_options, make_attention, type_options
from .kernels.layout import batch_vector
from .layer import gps_update

#: ``attn_type`` names of PyG's ``GPSConv`` -> siggate's attention types
PYG_ATTN_TYPES = {"multihead": "full", "performer": "performer"}
#: ``attn_kwargs`` keys named as in ``nn.MultiheadAttention`` -> siggate's arguments; with
#: the type's own options (:func:`~siggate.nn.attention_types.type_options`) the only
#: keys accepted: anything else is refused rather than ignored.
SHARED_KWARGS = {"dropout": "attn_dropout", "bias": "bias"}


class GatedGPSConv(nn.Module):
    r"""The GPS layer of PyG's :class:`~torch_geometric.nn.GPSConv` (Rampášek et al.,
    "Recipe for a General, Powerful, Scalable Graph Transformer",
    https://arxiv.org/abs/2205.12454) with SigGate-GT's gated attention
    (:class:`~siggate.nn.GatedMultiheadAttention`).

    Same arguments, forward and sub-module names (``conv``, ``attn``, ``mlp``, ``norm1``,
    ``norm2``, ``norm3``) as ``GPSConv``, so that changing the import is enough:

    .. math::
        h_L = \mathrm{N_1}(x + \mathrm{Drop}(\mathrm{conv}(x))),\quad
        h_A = \mathrm{N_2}(x + \mathrm{Drop}(\mathrm{Attn}(x))),\quad
        h = h_L + h_A,\quad x' = \mathrm{N_3}(h + \mathrm{MLP}(h))

    with ``MLP = Linear(c, 2c), act, Dropout, Linear(2c, c), Dropout``. With
    ``gate="none"`` it computes what ``GPSConv`` computes and has its parameter count;
    a gate adds :meth:`GatedMultiheadAttention.gate_parameters` parameters.

    Args:
        channels (int): size of each node representation ``c``.
        conv (MessagePassing, optional): the local message-passing layer, called as
            ``conv(x, edge_index, **kwargs)``; ``None`` for attention only.
        heads (int): attention heads. (default: ``1``)
        dropout (float): dropout after each branch and in the MLP. (default: ``0.0``)
        act (str or Callable): activation of the MLP. (default: ``"relu"``)
        act_kwargs (dict, optional): arguments of the activation. (default: ``None``)
        norm (str or Callable, optional): normalisation after each residual.
            (default: ``"batch_norm"``)
        norm_kwargs (dict, optional): arguments of the normalisation. (default: ``None``)
        attn_type (str): the global attention: ``"multihead"`` (PyG's name for softmax
            over all nodes; ``"full"`` is the same), ``"performer"`` or ``"exphormer"``
            (:mod:`siggate.nn.attention_types`); each is gated the same way.
            (default: ``"multihead"``)
        attn_kwargs (dict, optional): ``dropout`` (on the attention probabilities) and
            ``bias``, as for ``nn.MultiheadAttention``, plus the type's own options:
            ``num_features``, ``redraw_interval``, ``kernel`` (``"performer"``: ``"softmax"`` or
            ``"relu"``, PyG's ``PerformerAttention`` kernel; a module is refused),
            ``expander_degree_total``, ``num_virtual_nodes``, ``expander_seed``
            (``"exphormer"``). (default: ``None``)
        **attention_options: the gate and the implementation, passed to the attention:
            ``gate`` (``"none"``, ``"headwise"`` or ``"elementwise"``), ``gate_position``
            (``"output"``, ``"value"`` or ``"post"``), ``gate_bias_init`` (the gate starts
            near ``sigmoid(gate_bias_init)``), ``gate_weight_std``, ``impl``
            (:func:`~siggate.nn.impl.resolve_impl`); see
            :class:`~siggate.nn.attention.GatedAttentionBase`. Defaults:
            :class:`siggate.options.GPSOptions` (the elementwise gate at the output, starting
            at 0.5). The attention dropout and bias are ``attn_kwargs``' ``dropout`` and
            ``bias``, as in ``GPSConv``.

    ``heads``, ``dropout`` and ``attn_kwargs["dropout"]`` default to ``GPSConv``'s ``1``,
    ``0.0`` and ``0.0`` (PyG's, not :class:`~siggate.options.GPSOptions`' 4 heads).

    Shapes:
        ``x [N, c]``, ``edge_index [2, E]``, ``batch [N]`` (optional) -> ``[N, c]``.
    """

    def __init__(
        self,
        channels: int,
        conv: nn.Module | None,
        heads: int = 1,
        dropout: float = 0.0,
        act: str | Callable = "relu",
        act_kwargs: dict[str, Any] | None = None,
        norm: str | Callable | None = "batch_norm",
        norm_kwargs: dict[str, Any] | None = None,
        attn_type: str = "multihead",
        attn_kwargs: dict[str, Any] | None = None,
        **attention_options,
    ) -> None:
        super().__init__()
        kind = PYG_ATTN_TYPES.get(attn_type, attn_type)
        if kind not in ATTENTION_TYPES:
            raise ValueError(f"attn_type {attn_type!r} is not supported by GatedGPSConv "
                             f"(supported: {sorted(set(PYG_ATTN_TYPES) | set(ATTENTION_TYPES))})")
        given = sorted(set(attention_options) & set(SHARED_KWARGS.values()))
        if given:
            raise TypeError(f"GatedGPSConv takes {given} as attn_kwargs "
                            f"{[k for k, v in SHARED_KWARGS.items() if v in given]}, as PyG's GPSConv")
        check_shared_options(attention_options)
        own = dict(attn_kwargs or {})
        shared = {SHARED_KWARGS[k]: own.pop(k) for k in list(own) if k in SHARED_KWARGS}
        unknown = sorted(set(own) - set(type_options(kind)))
        if unknown:
            raise ValueError(f"attn_kwargs {unknown} are not supported with attn_type {attn_type!r} "
                             f"(supported: {sorted(SHARED_KWARGS) + type_options(kind)})")
        self.channels = channels
        self.conv = conv
        self.heads = heads
        self.dropout = dropout
        self.attn_type = attn_type
        self.attn = make_attention(kind, channels, heads, own, **attention_options, **shared)
        self.mlp = nn.Sequential(
            nn.Linear(channels, channels * 2),
            activation_resolver(act, **(act_kwargs or {})),
            nn.Dropout(dropout),
            nn.Linear(channels * 2, channels),
            nn.Dropout(dropout),
        )
        norm_kwargs = norm_kwargs or {}
        self.norm1 = normalization_resolver(norm, channels, **norm_kwargs)
        self.norm2 = normalization_resolver(norm, channels, **norm_kwargs)
        self.norm3 = normalization_resolver(norm, channels, **norm_kwargs)
        self.norm_with_batch = (self.norm1 is not None
                                and "batch" in inspect.signature(self.norm1.forward).parameters)

    def reset_parameters(self) -> None:
        """Re-initialise the local conv, the attention (gate last), the MLP and the norms."""
        if self.conv is not None:
            self.conv.reset_parameters()
        self.attn.reset_parameters()
        reset(self.mlp)
        for norm in (self.norm1, self.norm2, self.norm3):
            if norm is not None:
                norm.reset_parameters()

    def forward(self, x: Tensor, edge_index: Tensor, batch: Tensor | None = None,
                graph_index: Tensor | None = None, attn_edge_attr: Tensor | None = None, **kwargs) -> Tensor:
        """``x [N, c]``, ``edge_index [2, E]``, ``batch [N]`` -> ``[N, c]``; ``kwargs``
        (e.g. ``edge_attr``) go to ``conv``; ``edge_attr [E, c]`` also to the attention (an
        edge-aware type such as Exphormer scores with it), unless ``attn_edge_attr [E, c]``
        gives the attention edge features of its own (a conv's ``edge_attr`` of another width,
        e.g. ``GINEConv(mlp, edge_dim=4)``'s, is the conv's alone). ``graph_index [G]`` (optional): an
        identity of each graph (e.g. its dataset index) that seeds Exphormer's expanders
        instead of the graphs' own content (the other types ignore it). The recipe is
        :func:`~siggate.nn.layer.gps_update`, the attention runs over the layout its type builds
        from ``batch`` (and ``edge_index``)."""
        local = None if self.conv is None else (self.conv(x, edge_index, **kwargs), False)
        layout = self.attn.make_layout(batch_vector(x, batch), edge_index, graph_index=graph_index)
        attn = self.attn.forward_nodes(x, layout, edge_attr=kwargs.get("edge_attr") if attn_edge_attr is None
                                       else attn_edge_attr)
        norms = [partial(self._norm, norm, batch=batch) for norm in (self.norm1, self.norm2, self.norm3)]
        drop = partial(F.dropout, p=self.dropout, training=self.training)
        return gps_update(x, local, attn, norms, lambda h: h + self.mlp(h), drop)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        """A state dict saved from PyG's ``GPSConv`` loads: its ``torch.nn.MultiheadAttention``
        names the fused projection ``attn.in_proj_weight``/``attn.in_proj_bias``, siggate
        ``attn.in_proj.weight``/``attn.in_proj.bias`` (every other name is the same). A gated
        conv has more projection rows (the gate's) than ``GPSConv`` saved: refused by torch's
        size check."""
        for part in ("weight", "bias"):
            old = f"{prefix}attn.in_proj_{part}"
            if old in state_dict and f"{prefix}attn.in_proj.{part}" not in state_dict:
                state_dict[f"{prefix}attn.in_proj.{part}"] = state_dict.pop(old)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def _norm(self, norm: nn.Module | None, h: Tensor, batch: Tensor | None = None) -> Tensor:
        if norm is None:
            return h
        return norm(h, batch=batch) if self.norm_with_batch else norm(h)

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.channels}, conv={self.conv}, heads={self.heads}, "
                f"attn_type={self.attn_type}, gate={self.attn.gate}, gate_position={self.attn.gate_position})")
