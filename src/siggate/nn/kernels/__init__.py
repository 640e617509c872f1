"""Fast implementations behind ``impl="packed"``, kept apart from the readable model.

- :mod:`.layout`: :class:`PackedLayout`, graphs regrouped by size for attention;
- :mod:`.attention_cpu`: CPU attention kernels with hand-written backward passes
  (grouped and chunked);
- :mod:`.packed`: the packed attention (CPU kernels, or SDPA per group on accelerators);
- :mod:`.fused_blocks`: GINE and FFN residual blocks as single autograd nodes, and the GPS
  layer with its BatchNorms folded in inference.

Each module's docstring names the reference it must equal and the test that pins it.
:func:`siggate.nn.impl.resolve_impl` decides when these run.
"""

from .layout import PackedLayout

__all__ = ["PackedLayout"]
