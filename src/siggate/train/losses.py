"""The training losses by name (``train.loss``), over the labelled entries of a batch."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..config import ConfigError
from ..options import TASK_LOSSES


def sbm_class_weights(y: torch.Tensor, num_classes: int) -> torch.Tensor:
    """Benchmarking-GNNs' class weights for the SBM tasks (their GatedGCN ``loss``, GraphGPS's
    ``weighted_cross_entropy``), from the labels ``y [n]`` of one batch: ``w_c = (n - n_c) / n``
    for a class present ``n_c > 0`` times, ``0`` for an absent class; ``[num_classes]``. When
    only one class is present its weight is 1 (their formula gives 0 and the loss 0/0)."""
    counts = torch.bincount(y, minlength=num_classes).to(torch.float32)
    n = float(y.numel())
    weight = (n - counts) / max(n, 1.0) * (counts > 0)
    return weight if bool(weight.any()) else (counts > 0).to(torch.float32)


def _masked(loss):
    """``loss(pred, y)`` over the entries whose label is not NaN."""
    def fn(pred: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        valid = ~torch.isnan(y)
        return loss(pred[valid], y[valid])

    return fn


#: ``train.loss`` -> ``fn(pred, y)``; regression and binary labels may be NaN (missing)
LOSSES = {
    "l1": _masked(F.l1_loss),
    "mse": _masked(F.mse_loss),
    "bce": _masked(F.binary_cross_entropy_with_logits),
    "ce": lambda pred, y: F.cross_entropy(pred, y),
    "weighted_ce": lambda pred, y: F.cross_entropy(pred, y, weight=sbm_class_weights(y, pred.shape[1])),
}


def loss_fn(name: str, task: str):
    """The training loss ``fn(pred, y)``: ``"l1"``, ``"mse"`` (regression) or ``"bce"``
    (binary/multilabel logits) over the labelled entries (NaN labels masked); ``"ce"`` or
    ``"weighted_ce"`` (multiclass: logits ``[n, C]``, class ids ``[n]``; weighted by
    :func:`sbm_class_weights` of each batch). ``"auto"``: L1, BCE or CE (first of
    :data:`siggate.options.TASK_LOSSES`).

    Raises:
        ConfigError: a loss that does not fit ``task``.
    """
    allowed = TASK_LOSSES[task]
    if name == "auto":
        name = allowed[0]
    if name not in allowed:
        raise ConfigError(f"train.loss: {name!r} does not fit a {task} task; allowed values: "
                          + ", ".join(("auto",) + allowed) + ".")
    return LOSSES[name]
