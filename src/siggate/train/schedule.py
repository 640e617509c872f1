"""Learning-rate schedule of GraphGPS: linear warmup, then cosine decay, stepped per epoch."""

from __future__ import annotations

import math

import torch


def warmup_cosine_factor(epoch: int, warmup_epochs: int, total_epochs: int, start: float = 0.0) -> float:
    """Multiplier of the base learning rate at ``epoch`` (0-based).

    During warmup (``epoch < warmup_epochs``) it rises linearly from ``start`` at epoch 0
    towards 1 at ``warmup_epochs``: ``start + (1 - start) * epoch / warmup_epochs``, floored at
    ``1e-6`` so that ``start=0`` still moves in the first epoch. Afterwards it follows half a
    cosine from 1 to 0 over the remaining ``total_epochs - warmup_epochs`` epochs:
    ``0.5 * (1 + cos(pi * (epoch - warmup) / (total - warmup)))``, never below ``start``, so with
    ``start > 0`` no epoch trains below ``start`` of the base rate. With ``start=0`` this is
    GraphGPS's ``cosine_with_warmup`` scheduler (its first epoch trains at ``1e-6`` of the base);
    ``siggate train`` starts at ``start=0.01`` unless run with ``--budget``
    (:data:`siggate.config_args.WARMUP_START`).
    """
    if epoch < warmup_epochs:
        return max(1e-6, start + (1.0 - start) * epoch / max(1, warmup_epochs))
    progress = (epoch - warmup_epochs) / max(1, total_epochs - warmup_epochs)
    return max(start, 0.5 * (1.0 + math.cos(math.pi * progress)))


def make_scheduler(optimizer, warmup_epochs: int, total_epochs: int,
                   start: float = 0.0) -> torch.optim.lr_scheduler.LambdaLR:
    """A ``LambdaLR`` applying :func:`warmup_cosine_factor`; call ``step()`` once per epoch."""
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda e: warmup_cosine_factor(e, warmup_epochs, total_epochs, start)
    )
