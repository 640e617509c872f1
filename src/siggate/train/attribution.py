"""Atom contributions of a trained SigGate-GT: integrated gradients on the atom embeddings.

Integrated gradients (Sundararajan, Taly & Yan 2017, https://arxiv.org/abs/1703.01365) attribute
``f(x) - f(x')`` to the inputs along the straight path from a baseline ``x'`` to ``x``:

    ``IG_i = (x_i - x'_i) * integral_0^1 df/dx_i (x' + a (x - x')) da``

and, for any ``f`` differentiable along the path, ``sum_i IG_i = f(x) - f(x')`` (completeness).

Here ``x`` is the output of the model's node encoder, ``[N, d]``: each atom's embedding of its
OGB features (element, charge, aromaticity, ...) and of its positional encoding. The baseline
``x'`` is zero: every atom's embedding switched off, while the bonds, the graph's shape and any
molecule-level features stay as they are. An atom's contribution is the sum of ``IG`` over its
``d`` channels, so the contributions of a molecule's atoms add up to its prediction minus the
*baseline prediction* ``f(x')`` (the same molecule with featureless atoms). ``f`` is what
``predict`` returns: target units for regression, probabilities for classification.

Why this method: its reference is explicit (the baseline prediction is reported beside the
contributions) and the contributions add up to the prediction, so an atom's number reads in
the target's units. Leave-one-atom-out masking changes the graph the model sees (a molecule
without that atom) and its contributions do not add up to anything. The integral is a midpoint
Riemann sum of ``steps`` points; the model (ReLU, sigmoid gates, softmax attention) is smooth
only in parts, so the sum comes closer to completeness as ``steps`` grows, not always steadily:
:func:`integrated_gradients` returns the prediction and the baseline beside the contributions,
and ``siggate explain`` warns of the molecules whose sum misses their difference by more than 5%.
"""

from __future__ import annotations

import torch

from ..data.base import TaskInfo
from .dataprep import graph_loader
from .scoring import probabilities

#: Riemann points of the path integral (``siggate explain --steps``)
DEFAULT_STEPS = 50


def _outputs(model, batch, info: TaskInfo, mean, std) -> torch.Tensor:
    """``[G, T]`` in target units (regression) or probabilities (classification)."""
    out = model(batch)
    if info.task == "regression" and mean is not None:
        out = out * std.to(out.device) + mean.to(out.device)
    return probabilities(out, info.task)


def integrated_gradients(model, graphs, info: TaskInfo, mean=None, std=None, steps: int = DEFAULT_STEPS,
                         batch_size: int = 64, device=None) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
    """Integrated gradients of ``model`` (eval mode) for each graph of ``graphs`` with the zero
    baseline on the node encoder's output (module docstring).

    Args:
        model: a graph-level :class:`~siggate.nn.model.SigGateGT`.
        graphs: PyG ``Data`` molecules with the encodings the model reads.
        info: the task (targets, task type).
        mean, std: the target normalisation (``[T]``) of a regression model. (default: none)
        steps: Riemann points of the path integral. (default: ``50``)
        batch_size: graphs per forward pass. (default: ``64``)
        device: where the model runs. (default: the model's)

    Returns:
        ``(contributions, baseline, prediction)``: per graph ``[n_atoms, T]`` (CPU, float64),
        and ``[G, T]`` baseline and actual predictions; per graph and target the contributions
        sum to ``prediction - baseline`` up to the Riemann error.

    Raises:
        ValueError: a node-level or multiclass model, or ``steps < 1``.
    """
    if info.level != "graph" or info.task == "multiclass":
        raise ValueError(f"atom contributions are defined for graph-level regression and binary/multilabel models; "
                         f"this one is {info.level}-level {info.task}")
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    model.eval()
    device = device or next(model.parameters()).device
    contributions, baselines, predictions = [], [], []
    state = {"x": None}

    def swap(module, inputs, output):  # the node encoder's output replaced by the point on the path
        return output if state["x"] is None else state["x"]

    handle = model.node_encoder.register_forward_hook(swap)
    try:
        for batch in graph_loader(list(graphs), batch_size):
            batch = batch.to(device)
            with torch.no_grad():
                state["x"] = None
                x = model.node_encoder(batch)
                state["x"] = torch.zeros_like(x)
                base = _outputs(model, batch, info, mean, std)
                state["x"] = x
                pred = _outputs(model, batch, info, mean, std)
            total = torch.zeros(x.shape[0], base.shape[1], dtype=torch.float64, device=x.device)
            for k in range(steps):
                point = ((k + 0.5) / steps * x).requires_grad_(True)
                state["x"] = point
                with torch.enable_grad():
                    out = _outputs(model, batch, info, mean, std)
                    for t in range(out.shape[1]):  # graphs do not interact in eval mode: one backward per target
                        (grad,) = torch.autograd.grad(out[:, t].sum(), point, retain_graph=t + 1 < out.shape[1])
                        total[:, t] += (grad * x).sum(dim=1).double()
            per_atom = (total / steps).cpu()
            counts = torch.bincount(batch.batch, minlength=batch.num_graphs).tolist()
            contributions += list(torch.split(per_atom, counts))
            baselines.append(base.detach().cpu())
            predictions.append(pred.detach().cpu())
    finally:
        handle.remove()
    return contributions, torch.cat(baselines), torch.cat(predictions)

