"""The attention types by name: ``"full"``, ``"performer"``, ``"exphormer"``.

One attention concept: every type is a :class:`~siggate.nn.attention.GatedAttentionBase`
(the same projections, the same per-head sigmoid gate from the layer input applied to
each head's output before the concatenation and the output projection, ``gate="none"``
for plain GraphGPS attention); only the attention core differs. :func:`make_attention`
builds one from its name, with the type's own options in ``attn_kwargs`` (as PyG's
``GPSConv(attn_type=..., attn_kwargs=...)``). The names are
:data:`siggate.options.ATTN_TYPES` (a test keeps the two equal).

========== ========================================= ========================= =====================
type       attends to                                cost per graph of n nodes ``attn_kwargs``
========== ========================================= ========================= =====================
full       every node of the graph (softmax)         ``O(n^2)``                ``impl``
performer  every node, FAVOR+ random-feature kernel  ``O(n m)``                ``num_features``,
                                                                               ``redraw_interval``,
                                                                               ``kernel``
exphormer  edges, expander neighbours, self, virtual ``O(E + n degree)``       ``expander_degree_total``,
           nodes (sparse softmax)                                              ``num_virtual_nodes``,
                                                                               ``expander_seed``
========== ========================================= ========================= =====================
"""

from __future__ import annotations

from typing import Any

from .attention import GatedAttentionBase, GatedMultiheadAttention
from .exphormer import GatedExphormerAttention
from .performer import GatedPerformerAttention

ATTENTION_TYPES: dict[str, type[GatedAttentionBase]] = {
    "full": GatedMultiheadAttention,
    "performer": GatedPerformerAttention,
    "exphormer": GatedExphormerAttention,
}



def make_attention(attn_type: str, dim: int, heads: int = 4, attn_kwargs: dict[str, Any] | None = None,
                   **kwargs) -> GatedAttentionBase:
    """``ATTENTION_TYPES[attn_type](dim, heads, **kwargs, **attn_kwargs)``; ``kwargs`` are
    the shared arguments (gate, dropout, ``impl``), ``attn_kwargs`` the type's own.
    Unknown names and keys are refused with the allowed ones."""
    if attn_type not in ATTENTION_TYPES:
        raise ValueError(f"attn_type must be one of {tuple(ATTENTION_TYPES)}, got {attn_type!r}")
    cls = ATTENTION_TYPES[attn_type]
    attn_kwargs = dict(attn_kwargs or {})
    own = type_options(attn_type)
    unknown = sorted(set(attn_kwargs) - set(own))
    if unknown:
        raise ValueError(f"attn_kwargs {unknown} are not options of attn_type {attn_type!r} (its options: {own})")
    return cls(dim, heads, **kwargs, **attn_kwargs)


def type_options(attn_type: str) -> list[str]:
    """The constructor arguments an attention type adds to the shared ones."""
    import inspect

    shared = set(inspect.signature(GatedAttentionBase.__init__).parameters) | {"impl"}
    params = inspect.signature(ATTENTION_TYPES[attn_type].__init__).parameters
    return [p for p in params if p not in shared]


def attn_kwargs_from_config(cfg: dict) -> dict[str, Any]:
    """The type's ``attn_kwargs`` from a model config dict: its section of
    ``model.attention`` (:data:`siggate.options.ATTENTION_OPTIONS`, whose fields are the
    constructor's argument names); the sections of other types are ignored."""
    return dict((cfg.get("attention") or {}).get(cfg.get("attn_type", "full")) or {})
