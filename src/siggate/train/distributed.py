"""Distributed data-parallel training (``torchrun ... -m siggate train --ddp``).

This module holds the process group and the collectives; :func:`siggate.train.pipeline.train`
runs on them, and ``siggate train --ddp`` (:mod:`siggate.cli`) starts both.

One process per device: ``gloo`` on CPU, ``nccl`` on GPU (``cuda:LOCAL_RANK``). Every rank
builds the same model (same seed), wraps it in ``DistributedDataParallel`` and reads its
share of each global batch from a seeded ``DistributedSampler`` (``set_epoch`` every epoch),
so a run on ``W`` processes with global batch ``B`` sees the same global batches as one
process with batch ``B``; each rank's batch is ``B / W``. BatchNorm statistics are
synchronised across ranks (``torch.nn.SyncBatchNorm`` on GPU, :class:`CPUSyncBatchNorm`
on CPU, where PyTorch's SyncBatchNorm is not supported). Metrics are evaluated on rank 0;
only rank 0 writes checkpoints, logs and ``metrics.json``.

Launch on one machine::

    torchrun --nproc_per_node=4 -m siggate train --ddp --config zinc --out runs/zinc-ddp

and on several machines (run on each node, ``--node_rank`` 0..N-1)::

    torchrun --nnodes=2 --nproc_per_node=8 --node_rank=0 \\
        --rdzv_backend c10d --rdzv_endpoint HOST:29500 -m siggate train --ddp ...
"""

from __future__ import annotations

import datetime
import logging
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

log = logging.getLogger("siggate.train")


class PeerFailed(RuntimeError):
    """Raised on the ranks other than 0 when rank 0 failed at a step they wait on (it prints the
    error); ``siggate train --ddp`` ends such a rank quietly, exit status 2."""


@dataclass
class DistContext:
    """Rank, world size and device of this process, with the few collectives the loop needs.

    The default (``world_size=1``) is a plain single-process run: every collective is the
    identity and nothing is initialised.
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def all_reduce_sum(self, values: list[float]) -> list[float]:
        """Sum a list of numbers over ranks (in float64)."""
        if not self.distributed:
            return list(values)
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(t)
        return t.tolist()

    def any(self, flag: bool) -> bool:
        """``True`` on every rank if ``flag`` is true on any rank."""
        return self.all_reduce_sum([1.0 if flag else 0.0])[0] > 0

    def broadcast(self, obj, src: int = 0):
        """Rank ``src``'s ``obj`` on every rank (pickled)."""
        if not self.distributed:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=src, device=self.device if self.device.type == "cuda" else None)
        return box[0]

    def all_gather(self, obj) -> list:
        """``[obj of rank 0, obj of rank 1, ...]`` on every rank."""
        if not self.distributed:
            return [obj]
        out = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()


def init_distributed(timeout_minutes: float = 60.0) -> DistContext:
    """Join the process group that ``torchrun`` describes in ``RANK``/``WORLD_SIZE``/
    ``LOCAL_RANK``/``MASTER_ADDR``/``MASTER_PORT``: ``nccl`` when CUDA is available,
    else ``gloo``."""
    missing = [k for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
    if missing:
        raise RuntimeError(
            "--ddp must run under torchrun (missing environment: " + ", ".join(missing) + "). "
            "Launch with: torchrun --nproc_per_node=N -m siggate train --ddp ..."
        )
    if not dist.is_available():
        raise RuntimeError("this PyTorch build has no torch.distributed support")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    if torch.cuda.is_available():
        if local_rank >= torch.cuda.device_count():
            raise RuntimeError(f"LOCAL_RANK={local_rank} but only {torch.cuda.device_count()} GPU(s) are visible")
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    if not dist.is_initialized():
        dist.init_process_group(backend, rank=rank, world_size=world,
                                timeout=datetime.timedelta(minutes=timeout_minutes))
    log.info("rank %d/%d on %s (%s)", rank, world, device, backend)
    return DistContext(rank=rank, world_size=world, local_rank=local_rank, device=device)


class _AllReduceSum(torch.autograd.Function):
    """Differentiable sum over ranks: the gradient of a sum is the sum of the gradients."""

    @staticmethod
    def forward(ctx, t):
        t = t.clone()
        dist.all_reduce(t)
        return t

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        dist.all_reduce(grad)
        return grad


class CPUSyncBatchNorm(nn.BatchNorm1d):
    """``BatchNorm1d`` whose training statistics are taken over the union of every rank's
    batch, for CPU (gloo) runs, where ``torch.nn.SyncBatchNorm`` refuses CPU tensors.

    Mean and variance are computed in two all-reduced passes (sum and count, then the sum of
    squared deviations) and are differentiable, so, after DDP averages the gradients, the
    update equals that of one process holding the whole global batch (up to float rounding).
    Running statistics are updated exactly as ``BatchNorm1d`` does (unbiased variance).
    In eval mode, or outside an initialised process group, it is plain ``BatchNorm1d``.
    It has the same parameters and buffers (and ``state_dict`` keys) as ``BatchNorm1d``.

    Shapes: ``[N, C]`` -> ``[N, C]``.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (self.training and dist.is_available() and dist.is_initialized()):
            return super().forward(x)
        if x.dim() != 2:
            raise ValueError(f"CPUSyncBatchNorm expects [N, C] input, got {tuple(x.shape)}")
        xd = x.double()
        stats = _AllReduceSum.apply(torch.cat([xd.sum(0), xd.new_tensor([x.size(0)])]))
        n = stats[-1]
        mean = stats[:-1] / n
        var = _AllReduceSum.apply(((xd - mean) ** 2).sum(0)) / n
        if self.track_running_stats:
            with torch.no_grad():
                self.num_batches_tracked.add_(1)
                m = self.momentum if self.momentum is not None else 1.0 / float(self.num_batches_tracked)
                unbiased = var * (n / (n - 1).clamp_min(1))
                self.running_mean.mul_(1 - m).add_(mean.to(self.running_mean.dtype), alpha=m)
                self.running_var.mul_(1 - m).add_(unbiased.to(self.running_var.dtype), alpha=m)
        y = ((xd - mean) / torch.sqrt(var + self.eps)).to(x.dtype)
        if self.affine:
            y = y * self.weight + self.bias
        return y


def convert_sync_batchnorm(model: nn.Module, device: torch.device) -> nn.Module:
    """Synchronise every BatchNorm of ``model`` across ranks: ``torch.nn.SyncBatchNorm`` on
    CUDA, :class:`CPUSyncBatchNorm` (in place of ``BatchNorm1d``) on CPU."""
    if device.type == "cuda":
        return nn.SyncBatchNorm.convert_sync_batchnorm(model)
    for name, child in model.named_children():
        if type(child) is nn.BatchNorm1d:
            new = CPUSyncBatchNorm(child.num_features, child.eps, child.momentum, child.affine,
                                   child.track_running_stats)
            new.load_state_dict(child.state_dict())
            setattr(model, name, new)
        else:
            convert_sync_batchnorm(child, device)
    return model


def has_unused_parameters(model: nn.Module, batch) -> bool:
    """Whether some parameter of ``model`` takes no part in its output on ``batch`` (for
    example the edge updates of a last GatedGCN layer), so DDP must look for unused
    parameters. Runs one forward in eval mode: no random number is drawn, no statistic is
    updated and no ``.grad`` is touched."""
    was_training = model.training
    model.eval()
    try:
        params = [p for p in model.parameters() if p.requires_grad]
        grads = torch.autograd.grad(model(batch).sum(), params, allow_unused=True)
    finally:
        model.train(was_training)
    return any(g is None for g in grads)
