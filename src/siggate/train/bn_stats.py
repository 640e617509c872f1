"""BatchNorm statistics recomputed on the training set before an evaluation ("precise BN").

In training a BatchNorm layer normalises with the statistics of its batch; in eval it uses
its running averages ``running_mean``/``running_var``, which PyTorch updates after every
training batch with momentum 0.1. At evaluation time they are therefore, in effect, the
statistics of the last 10-20 training batches (32 molecules each in ``siggate train``), and
which molecules those were moves every eval output from one epoch to the next even when the
weights barely move (the floor of a cosine schedule), so the best validation epoch is partly
chosen by batch order. :func:`recompute_bn_stats` replaces them with the statistics of the
whole training set under the current weights (Wu & Johnson 2021, "Rethinking 'Batch' in
BatchNorm", https://arxiv.org/abs/2105.07576, Sec. 3, PreciseBN): a pure function of the
weights and the training data. ``train.eval_norm: train`` calls it before every evaluation
(:func:`siggate.train.loop.evaluate_epoch`; a run that keeps its last epoch only before the last
one, :func:`epoch_norm`), so ``best.pt`` holds the statistics it was scored with and
``predict``, ``evaluate`` and ``for_inference()`` use them as they use any buffer.

The pass runs the model in eval mode (no dropout, no LapPE sign flip, no random number
drawn, no cross-rank synchronisation of ``SyncBatchNorm``), except that every BatchNorm
normalises with its batch's own statistics, as in training, and accumulates the mean and
variance of its inputs over all training nodes (edges, for a norm over edges): each
batch's in its own dtype, merged in float64 (Chan's pairwise merge). The result does not
depend on the running statistics it replaces, hence not on which batches training saw last.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch_geometric.data import Batch

from ..options import keeps_last

#: Most nodes in one forward pass of the recompute (:func:`graph_batches`): about 1,400
#: molecules of 23 heavy atoms per batch (about 8 MB per activation at width 64), which bounds
#: the pass's memory on large sets. On four peer tasks the scores with this budget are within
#: 2e-4 MAE of one batch holding the whole training set, where 256-graph batches moved them by
#: up to 0.012 (benchmarks/results/stable_eval/norm_batch.json).
BN_STATS_NODES = 32_768


class _Moments:
    """Count, mean and sum of squared deviations of the rows of ``[n, C]`` batches, merged
    in float64 (Chan, Golub & LeVeque 1979)."""

    def __init__(self) -> None:
        self.n = 0
        self.mean: torch.Tensor | None = None
        self.m2: torch.Tensor | None = None

    def add(self, x: torch.Tensor) -> None:
        nb = x.size(0)
        if nb == 0:
            return
        var, mean = torch.var_mean(x.detach(), dim=0, correction=0)  # the batch's own, in its dtype
        mb, m2b = mean.double(), var.double() * nb
        if self.mean is None:
            self.n, self.mean, self.m2 = nb, mb, m2b
            return
        n = self.n + nb
        delta = mb - self.mean
        self.mean = self.mean + delta * (nb / n)
        self.m2 = self.m2 + m2b + delta * delta * (self.n * nb / n)
        self.n = n

    def unbiased_var(self) -> torch.Tensor:
        """The unbiased variance, as BatchNorm keeps ``running_var``."""
        return self.m2 / max(self.n - 1, 1)


def graph_batches(graphs, max_nodes: int = BN_STATS_NODES):
    """``graphs`` in order as PyG batches of consecutive graphs holding at most ``max_nodes``
    nodes together (a larger graph alone), built without a loader (no random number drawn).

    The batches are as large as memory allows because the pass normalises each batch with its
    own statistics: with the whole training set in one batch those are the statistics being
    recomputed, so every layer's input is what it receives in eval; smaller batches shift the
    deeper layers' statistics (their inputs were normalised with noisy batch statistics).
    """
    chunk, nodes = [], 0
    for g in graphs:
        n = int(g.num_nodes)
        if chunk and nodes + n > max_nodes:
            yield Batch.from_data_list(chunk)
            chunk, nodes = [], 0
        chunk.append(g)
        nodes += n
    if chunk:
        yield Batch.from_data_list(chunk)


def batch_norms(model: nn.Module) -> list[_BatchNorm]:
    """The BatchNorm layers of ``model`` that keep running statistics (``BatchNorm1d``,
    ``SyncBatchNorm``, :class:`~siggate.train.distributed.CPUSyncBatchNorm`), in module order."""
    return [m for m in model.modules() if isinstance(m, _BatchNorm) and m.track_running_stats]


@torch.no_grad()
def recompute_bn_stats(model: nn.Module, batches, device=None) -> int:
    """Set every BatchNorm's ``running_mean``/``running_var`` of ``model`` to the mean and
    unbiased variance of its inputs over all of ``batches`` (the training graphs), the
    upstream layers normalising each batch with its own statistics, as in training.

    Args:
        model: the model (not a DDP wrapper); it is left in the train/eval mode it was in.
        batches: an iterable of batches of the training graphs in a fixed order, as large
            as memory allows (:func:`graph_batches`), drawing no random number.
        device: where to run (default: where the batches are).

    Returns:
        The number of BatchNorm layers updated (a layer that saw no row keeps its
        statistics). ``num_batches_tracked`` and the weights are left unchanged.
    """
    norms = batch_norms(model)
    if not norms:
        return 0
    moments = {bn: _Moments() for bn in norms}

    def batch_stats(bn: _BatchNorm, inputs, _output):
        x = inputs[0]
        moments[bn].add(x)
        if x.size(0) < 2:  # a batch of one row has no variance: the layer's eval output stands
            return None
        # what the layer computes in training: normalised with this batch's statistics
        return F.batch_norm(x, None, None, bn.weight, bn.bias, True, 0.0, bn.eps)

    was_training = model.training
    hooks = [bn.register_forward_hook(batch_stats) for bn in norms]
    model.eval()
    try:
        for batch in batches:
            model(batch if device is None else batch.to(device))
    finally:
        for h in hooks:
            h.remove()
        model.train(was_training)
    updated = 0
    for bn, m in moments.items():
        if m.mean is None:  # no batch, or an edge norm over graphs without edges
            continue
        bn.running_mean.copy_(m.mean.to(bn.running_mean.dtype))
        bn.running_var.copy_(m.unbiased_var().to(bn.running_var.dtype))
        updated += 1
    return updated


def epoch_norm(train_cfg, epoch: int, last: bool | None = None) -> str:
    """The BatchNorm statistics the evaluation after epoch ``epoch`` (0-based) uses:
    ``train.eval_norm``, except that a run keeping its last epoch (``train.select: last``)
    recomputes them only after the schedule's last epoch. Its earlier scores choose nothing, and
    the recompute (a pass over the training set) costs 20-30% of an epoch. The model it saves is
    the same: the pass changes no weight, draws no random number and replaces the statistics
    whole (above), and a training step never reads them. (One rare exception: a recompute batch
    that gives a layer a single row passes it on normalised with the running statistics, so the
    later layers' recomputed statistics, and the saved model, then differ slightly.) The
    earlier epochs' scores are then the running statistics' (``log.csv``'s ``eval_norm`` says
    which). ``last``: :func:`~siggate.options.keeps_last` of ``train_cfg.select``, when the caller
    resolved it once for the run."""
    if last is None:
        last = keeps_last(train_cfg.select)
    if train_cfg.eval_norm == "train" and epoch < train_cfg.epochs - 1 and last:
        return "running"
    return train_cfg.eval_norm
