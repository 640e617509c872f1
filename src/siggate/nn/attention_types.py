"""The attention types by name: ``"full"``, ``"performer"``, ``"exphormer"``.

One attention concept: every type is a :class:`~siggate.nn.attention.GatedAttentionBase`
(the same projections, the same per-head sigmoid gate from the layer input applied to
each head's output before the concatenation and the output projection, ``gate="none"``
for plain GraphGPS attention); only the attention core differs. :func:`make_attention`
builds one from its name, with the type's own options in ``attn_kwargs`` (as PyG's
``GPSConv(attn_type=..., attn_kwargs=...)``); the options every type shares (the gate,
``attn_dropout``, ``bias``, the kernel choice ``impl``) are keyword arguments of their own
(:func:`shared_options`), never ``attn_kwargs``. The names are
:data:`siggate.options.ATTN_TYPES` (a test keeps the two equal).

========== ========================================= ========================= =====================
type       attends to                                cost per graph of n nodes ``attn_kwargs``
========== ========================================= ========================= =====================
full       every node of the graph (softmax)         ``O(n^2)``                (none)
performer  every node, FAVOR+ random-feature kernel  ``O(n m)``                ``num_features``,
                                                                               ``redraw_interval``,
                                                                               ``kernel``
exphormer  edges, expander neighbours, self, virtual ``O(E + n degree)``       ``expander_degree_total``,
           nodes (sparse softmax)                                              ``num_virtual_nodes``,
                                                                               ``expander_seed``
========== ========================================= ========================= =====================
"""

from __future__ import annotations

import inspect
from typing import Any

from ..options import GPSOptions, closest_name
from .attention import GatedAttentionBase, GatedMultiheadAttention
from .exphormer import GatedExphormerAttention
from .performer import GatedPerformerAttention

ATTENTION_TYPES: dict[str, type[GatedAttentionBase]] = {
    "full": GatedMultiheadAttention,
    "performer": GatedPerformerAttention,
    "exphormer": GatedExphormerAttention,
}



def make_attention(attn_type: str, dim: int, heads: int = GPSOptions.heads, attn_kwargs: dict[str, Any] | None = None,
                   **kwargs) -> GatedAttentionBase:
    """``ATTENTION_TYPES[attn_type](dim, heads, **kwargs, **attn_kwargs)``; ``kwargs`` are
    the shared arguments (:func:`shared_options`: the gate, ``attn_dropout``, ``bias``,
    ``impl``), ``attn_kwargs`` the type's own (:func:`type_options`). Unknown names and keys
    are refused with the allowed ones."""
    attn_kwargs = check_type_options(attn_type, attn_kwargs)
    check_shared_options(kwargs)
    return ATTENTION_TYPES[attn_type](dim, heads, **kwargs, **attn_kwargs)


def check_type_options(attn_type: str, attn_kwargs: dict[str, Any] | None) -> dict[str, Any]:
    """``attn_kwargs`` as a dict, refused (``ValueError``) for an unknown ``attn_type`` or a key that
    is not one of its options (:func:`type_options`); a layer without attention checks them too,
    so that a misspelt option is not ignored until the branch is switched on."""
    if attn_type not in ATTENTION_TYPES:
        raise ValueError(f"attn_type must be one of {tuple(ATTENTION_TYPES)}, got {attn_type!r}")
    attn_kwargs = dict(attn_kwargs or {})
    own = type_options(attn_type)
    unknown = sorted(set(attn_kwargs) - set(own))
    if unknown:
        raise ValueError(f"attn_kwargs {unknown} are not options of attn_type {attn_type!r} (its options: {own})")
    return attn_kwargs


def params(fn) -> list[str]:
    """The named parameters of ``fn`` after ``self`` (no ``*args``/``**kwargs``)."""
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [n for n, p in inspect.signature(fn).parameters.items() if p.kind in kinds and n != "self"]


def shared_options() -> list[str]:
    """The keyword arguments every attention type takes besides ``dim`` and ``heads``:
    :class:`GatedAttentionBase`'s (the gate, ``attn_dropout``, ``bias``) and ``impl``."""
    return [n for n in params(GatedAttentionBase.__init__) if n not in ("dim", "heads")] + ["impl"]


def check_shared_options(kwargs: dict) -> None:
    """Refuse a keyword that is no shared attention option (:func:`shared_options`); a
    layer forwarding ``**kwargs`` to its attention calls this first, so that a misspelt
    option fails where it was given."""
    check_options(kwargs, shared_options(), "attention option")


def check_options(kwargs: dict, allowed: list[str], what: str) -> None:
    """``TypeError`` for the first key of ``kwargs`` not in ``allowed``, naming the closest
    and all of them."""
    for key in kwargs:
        if key not in allowed:
            close = closest_name(key, allowed)
            hint = f"; did you mean {close!r}?" if close else ""
            raise TypeError(f"unknown {what} {key!r}{hint} (the options: {', '.join(allowed)})")


def type_options(attn_type: str) -> list[str]:
    """The constructor arguments an attention type adds to the shared ones."""
    shared = {"dim", "heads", *shared_options()}
    return [p for p in params(ATTENTION_TYPES[attn_type].__init__) if p not in shared]


def attn_kwargs_from_config(cfg: dict) -> dict[str, Any]:
    """The type's ``attn_kwargs`` from a model config dict: its section of
    ``model.attention`` (:data:`siggate.options.ATTENTION_OPTIONS`, whose fields are the
    constructor's argument names); the sections of other types are ignored."""
    return dict((cfg.get("attention") or {}).get(cfg.get("attn_type", "full")) or {})
