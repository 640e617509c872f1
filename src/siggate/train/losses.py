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
    return _sbm_weights(torch.bincount(y, minlength=num_classes).to(torch.float32))


def _sbm_weights(counts: torch.Tensor) -> torch.Tensor:
    """:func:`sbm_class_weights` from the classes' label counts ``[num_classes]``."""
    n = float(counts.sum())
    weight = (n - counts) / max(n, 1.0) * (counts > 0)
    return weight if bool(weight.any()) else (counts > 0).to(torch.float32)


def _masked(loss):
    """``loss(pred, y)`` over the entries whose label is not NaN."""
    def fn(pred: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        valid = ~torch.isnan(y)
        return loss(pred[valid], y[valid])

    return fn


#: the losses over the labelled entries: their means (:data:`LOSSES`) and sums (:func:`loss_share`)
_SUMMED = {"l1": F.l1_loss, "mse": F.mse_loss, "bce": F.binary_cross_entropy_with_logits}

#: ``train.loss`` -> ``fn(pred, y)``; regression and binary labels may be NaN (missing)
LOSSES = {
    **{name: _masked(fn) for name, fn in _SUMMED.items()},
    "ce": lambda pred, y: F.cross_entropy(pred, y),
    "weighted_ce": lambda pred, y: F.cross_entropy(pred, y, weight=sbm_class_weights(y, pred.shape[1])),
}


def loss_share(name: str, pred: torch.Tensor, y: torch.Tensor, all_sum) -> tuple[torch.Tensor, float]:
    """This rank's part of the loss ``name`` of a global batch that ``W`` ranks share, and the
    batch's rows over ``W`` (what the rank adds to the logged epoch loss, per unit of its loss).

    The part is ``W · (this rank's summed loss) / (the batch's denominator)``: its labelled
    entries for the masked losses, rows for ``ce``, the summed class weights for
    ``weighted_ce``, whose weights come from the whole batch's class counts. DDP averages the
    ranks' gradients, so the step is the one the whole batch takes in one process. Each rank's
    own mean instead weighed the ranks alike: a rank holding fewer labels (a target missing on its
    molecules, smaller graphs of a node task) counted as much as one holding many.

    Args:
        all_sum: sums a list of numbers over the ranks (:meth:`~.distributed.DistContext.all_reduce_sum`).
    """
    if name in _SUMMED:
        valid = ~torch.isnan(y)
        part, den = _SUMMED[name](pred[valid], y[valid], reduction="sum"), float(valid.sum())
    elif name == "ce":
        part, den = F.cross_entropy(pred, y, reduction="sum"), float(y.numel())
    else:  # weighted_ce: the weights of the whole batch's classes
        counts = torch.tensor(all_sum(torch.bincount(y, minlength=pred.shape[1]).tolist()), dtype=torch.float32)
        weight = _sbm_weights(counts).to(device=pred.device, dtype=pred.dtype)
        part, den = F.cross_entropy(pred, y, weight=weight, reduction="sum"), float(weight[y].sum())
    world, total, rows = all_sum([1.0, den, float(y.shape[0])])
    return part * (world / total if total > 0 else float("nan")), rows / world


def loss_name(name: str, task: str) -> str:
    """``train.loss`` ``name`` for a ``task``: ``"auto"`` made concrete (:func:`loss_fn`'s rule)."""
    return TASK_LOSSES[task][0] if name == "auto" else name


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
    name = loss_name(name, task)
    if name not in allowed:
        raise ConfigError(f"train.loss: {name!r} does not fit a {task} task; allowed values: "
                          + ", ".join(("auto",) + allowed) + ".")
    return LOSSES[name]


#: the cliff term's fingerprint (Morgan bits, radius 2, 2,048 bits: ECFP4) and the Tanimoto
#: similarity above which two molecules of a batch form a pair
CLIFF_RADIUS, CLIFF_BITS, CLIFF_SIMILARITY = 2, 2048, 0.5


def cliff_term_refusal(smiles: bool, task: str, level: str = "graph", gnn: bool = True, dataset: str = "",
                       distributed: bool = False) -> str | None:
    """Why ``train.cliff_weight`` cannot apply (``None`` where it can): it needs SMILES (a CSV
    given with ``--data``), a graph-level regression task and a GNN to train with it, in one
    process (``distributed``: ``--ddp`` splits each batch over the ranks, and the pairs across
    them would be lost). The one check, made by the CLI before a run folder is claimed and by the
    training loop."""
    why = (f"the dataset {dataset or 'given'} has no SMILES (give a CSV with --data)" if not smiles else
           f"the task is {level}-level {task}" if task != "regression" or level != "graph" else
           "no GNN member trains with it" if not gnn else
           "--ddp splits each batch over the ranks, and the pairs across them would be lost (train without --ddp)"
           if distributed else None)
    return None if why is None else (f"train.cliff_weight compares a GNN's predictions for similar molecules of a "
                                     f"regression task; here {why}: drop --set train.cliff_weight")


class CliffPairLoss:
    """The activity-cliff term of ``train.cliff_weight``: the error in the *difference* between
    similar molecules of a batch.

    For labelled molecules ``i < j`` of a batch whose Morgan bit fingerprints (ECFP4, 2,048
    bits) have Tanimoto similarity ``s_ij`` above ``threshold``, with the weight
    ``w_ij = (s_ij - threshold) / (1 - threshold)``, the term is

        Σ_ij w_ij |(p_i - p_j) - (y_i - y_j)| / Σ_ij w_ij

    in the units the loss sees (standardized targets), over each target's pairs whose two
    labels are present; 0 when a batch has no such pair. The pointwise loss sees a pair of near
    twins as two independent errors; a model that predicts them alike while their activities
    differ by a lot (an activity cliff) pays the whole difference here. ACANet (Shen et al.,
    "Online triplet contrastive learning enables efficient cliff awareness in molecular
    activity prediction", 2024) makes a GNN cliff-aware with a triplet loss on its embeddings
    of such pairs; this term acts on the predictions instead, so it needs no margin and keeps
    the target's units. Two rows of the same SMILES (duplicates kept) form no pair: the model
    predicts them alike, and their label difference is noise no model can fit.

    Fingerprints are computed once per SMILES (``smiles`` from the batch) and kept.
    """

    def __init__(self, threshold: float = CLIFF_SIMILARITY) -> None:
        if not 0.0 <= threshold < 1.0:
            raise ValueError(f"CliffPairLoss: threshold must be in [0, 1), got {threshold}")
        self.threshold = threshold
        self._fps: dict = {}
        self._gen = None

    def similarity(self, smiles) -> torch.Tensor:
        """Tanimoto similarities of the molecules' Morgan bit fingerprints, float64 ``[n, n]``."""
        from rdkit import DataStructs
        from rdkit.Chem import rdFingerprintGenerator

        from ..data.fingerprints import to_mols

        if self._gen is None:
            self._gen = rdFingerprintGenerator.GetMorganGenerator(radius=CLIFF_RADIUS, fpSize=CLIFF_BITS)
        new = [s for s in dict.fromkeys(smiles) if s not in self._fps]
        for s, mol in zip(new, to_mols(new)):
            self._fps[s] = self._gen.GetFingerprint(mol)
        fps = [self._fps[s] for s in smiles]
        return torch.tensor([DataStructs.BulkTanimotoSimilarity(fp, fps) for fp in fps], dtype=torch.float64)

    def __call__(self, pred: torch.Tensor, y: torch.Tensor, smiles) -> torch.Tensor:
        """The term for predictions and labels ``[n, T]`` (NaN: missing) of molecules ``smiles``."""
        pred, y = pred.reshape(len(smiles), -1), y.reshape(len(smiles), -1)
        smiles = list(smiles)
        sim = self.similarity(smiles).to(pred.device)
        w = ((sim - self.threshold) / (1.0 - self.threshold)).clamp(min=0.0).triu(diagonal=1)
        index = {s: i for i, s in enumerate(dict.fromkeys(smiles))}  # rows of one molecule (duplicates kept)
        ids = torch.tensor([index[s] for s in smiles], device=pred.device)
        w = w * (ids[:, None] != ids[None, :])  # no model can tell them apart: their pair is no cliff
        total, weight = pred.sum() * 0.0, 0.0
        for t in range(y.shape[1]):
            ok = ~torch.isnan(y[:, t])
            wt = (w * (ok[:, None] & ok[None, :])).to(pred.dtype)
            if not bool(wt.any()):
                continue
            yt = torch.nan_to_num(y[:, t])
            err = (pred[:, t, None] - pred[None, :, t]) - (yt[:, None] - yt[None, :])
            total = total + (wt * err.abs()).sum()
            weight += float(wt.sum())
        return total / weight if weight > 0 else total
