"""Which attention implementation runs: :func:`resolve_impl`, the one statement of it.

It is called in one place, :meth:`siggate.nn.attention.GatedAttentionBase.choose_impl`,
when the layout of a forward is built at the model's entry; the layout then carries the
choice (``layout.impl``) to every layer.
"""

from __future__ import annotations

import os

from ..options import ATTN_IMPLS, IMPL_ENV, impl_env_problem


def resolve_impl(impl: str, padded: bool = False) -> str:
    """The implementation that runs for ``impl``: ``"reference"``, ``"sdpa"`` or ``"packed"``.

    An explicit choice is returned as given. ``"auto"`` becomes ``$SIGGATE_ATTN_IMPL`` when
    that is set (to force an implementation while debugging), otherwise ``"packed"`` for
    node rows (a GPS layer, the model, :class:`GatedGPSConv`) and ``"sdpa"`` for a padded
    batch (the attention module called alone). Requests for attention details
    (``return_details=True``) run ``"reference"``. What runs under ``"auto"``:

    ===================  ========  ==============  ========  ==========================================
    input                device    autograd        autocast  runs
    ===================  ========  ==============  ========  ==========================================
    node rows            CPU       on (training)   off       packed: the attention core as one autograd
                                                             node with a hand-written backward; GINE and
                                                             FFN blocks with their residuals likewise
                                                             (when the branch dropout is inactive)
    node rows            CPU       off             off       packed: batched-matmul core
    node rows            CUDA      on / off        off       packed: SDPA per size group; fused blocks
    node rows            any       on / off        on        packed, at the autocast dtype, no fused blocks
    padded ``(B, N, d)`` any       on / off        any       sdpa
    ===================  ========  ==============  ========  ==========================================

    BatchNorm folding is no part of any implementation: it is the explicit transform
    :meth:`siggate.nn.SigGateGT.for_inference`. For ``"performer"`` and ``"exphormer"``
    (node rows only), ``"packed"`` means their fast path in :mod:`siggate.nn.kernels`
    and ``"reference"`` their readable definition; they refuse ``"sdpa"`` (and run
    ``"reference"`` under ``$SIGGATE_ATTN_IMPL=sdpa``).
    ``benchmarks/README.md`` has the measurements.
    """
    if impl == "auto":
        if impl_env_problem():
            raise ValueError(impl_env_problem())
        impl = os.environ.get(IMPL_ENV) or "auto"
    elif impl not in ATTN_IMPLS:
        raise ValueError(f"impl must be one of {ATTN_IMPLS}, got {impl!r}")
    if impl == "auto":
        return "sdpa" if padded else "packed"
    return impl


def check_node_impl(impl: str) -> None:
    """The implementations an attention type on node rows only takes: all but ``"sdpa"``."""
    if impl not in ATTN_IMPLS or impl == "sdpa":
        allowed = tuple(i for i in ATTN_IMPLS if i != "sdpa")
        raise ValueError(f"impl must be one of {allowed} for this attention type, got {impl!r}")
