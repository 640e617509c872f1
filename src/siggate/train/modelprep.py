"""Model assembly: the model a ``model`` config describes for a task, the values resolved from
the training data (:func:`resolve_pool_norm`, kept in the run's record, never in the config),
and a trained model back from its checkpoint (:func:`load_trained`).
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from ..config import ConfigError, ModelConfig, from_dict
from ..data.base import TaskInfo
from ..nn.model import SigGateGT
from ..version import __version__
from .checkpoint import CheckpointError, describe_weight_mismatch, load_checkpoint


def resolve_pool_norm(model: ModelConfig, train_graphs) -> dict:
    """The values training resolves from the data, as ``{"model.pool_norm": x}``: with
    ``pooling: norm`` and ``pool_norm: 0`` the divisor is the mean number of nodes of the
    training graphs (rounded to 0.01, at least 1); any other config resolves nothing (``{}``).
    They live in the checkpoint (``"resolved"``), ``config.yaml``'s ``_meta.resolved`` and
    ``metrics.json``; the config itself stays as the user gave it."""
    if not model.pool_norm_unresolved:
        return {}
    if not len(train_graphs):
        raise ConfigError("model.pool_norm: 0 takes the training graphs' mean size, and there are no training "
                          "graphs; set model.pool_norm to a positive number")
    mean_nodes = sum(int(g.num_nodes) for g in train_graphs) / len(train_graphs)
    return {"model.pool_norm": max(round(mean_nodes, 2), 1.0)}


def fit_mol_feature_scaling(model: SigGateGT, train_graphs) -> SigGateGT:
    """Standardize the model's molecule features with the training graphs' ``mol_x``
    (:class:`siggate.data.molfeatures.FeatureScaler`); the statistics are buffers of the model,
    so its checkpoint carries them to ``predict``, ``evaluate``, ensembles and resume. A column
    constant on the training rows teaches the model nothing, and its weights stay untrained: its
    std is set to infinity, so it enters the head as 0 for every molecule (a held-out value would
    otherwise meet random weights)."""
    if not model.mol_features_dim:
        return model
    from ..data.molfeatures import FeatureScaler

    if not len(train_graphs) or any(getattr(g, "mol_x", None) is None for g in train_graphs):
        raise ConfigError("model.mol_features: the training graphs carry no molecule features (mol_x) to fit "
                          "their scaling on; load the data with siggate.train.dataprep.prepare_data")
    x = torch.cat([g.mol_x for g in train_graphs]).numpy()
    state = FeatureScaler.fit(x).state_dict()
    constant = torch.from_numpy(np.ptp(x, axis=0) == 0)
    model.set_mol_feature_scaling(state["mean"], state["std"].masked_fill(constant, float("inf")))
    return model


def resolved_model_config(model: ModelConfig, resolved: dict) -> ModelConfig:
    """``model`` with the ``model.*`` values of ``resolved`` (:func:`resolve_pool_norm`)
    filled in: the model config a run built its model from.

    Raises:
        ConfigError: ``model.pool_norm: 0`` and nothing resolved it.
    """
    model = replace(model, **{k.split(".", 1)[1]: v for k, v in resolved.items() if k.startswith("model.")})
    if model.pool_norm_unresolved:
        raise ConfigError("model.pool_norm: 0 stands for the training graphs' mean size, which only training "
                          "resolves; set model.pool_norm to a positive number to build this model without data")
    return model


def build_model(model: ModelConfig, info: TaskInfo, seed: int = 0, train_graphs=None,
                resolved: dict | None = None) -> SigGateGT:
    """Build the model ``model`` describes for ``info`` with ``seed``-controlled, gate-last
    initialisation; the values resolved from the data are ``resolved``, or resolved from
    ``train_graphs`` as training does (:func:`resolve_pool_norm`); ``train_graphs`` also fit the
    molecule features' scaling (:func:`fit_mol_feature_scaling`); without them the features
    are left unscaled."""
    if resolved is None:
        resolved = resolve_pool_norm(model, train_graphs) if train_graphs is not None else {}
    model_cfg = resolved_model_config(model, resolved)
    torch.manual_seed(seed)
    net = SigGateGT.from_config(model_cfg, info)
    # Re-seed and re-initialise: the model's initial weights are a function of the seed alone
    # (models that differ only in the gate share every other one: the gates draw from
    # generators of their own, GatedAttentionBase.reset_gate).
    torch.manual_seed(seed)
    net.reset_parameters()
    return net if train_graphs is None else fit_mol_feature_scaling(net, train_graphs)


def load_trained(path: str | Path):
    """Load a checkpoint written by :func:`siggate.train.pipeline.train`: returns
    ``(model, ckpt, cfg, info)``, the model in eval mode with the checkpoint's weights."""
    ckpt = load_checkpoint(path)
    try:
        cfg = from_dict(ckpt["config"])
    except Exception as exc:  # incompatible config from another version
        raise CheckpointError(f"{path}: its config does not fit this siggate version: {exc}") from None
    info = TaskInfo(**ckpt["info"])
    try:
        model_cfg = resolved_model_config(cfg.model, ckpt["resolved"])
    except ConfigError as exc:
        raise CheckpointError(f"{path}: {exc}") from None
    # the config is checked against the weights before the model is built: a crafted config
    # (dim 2**20, a million layers) would otherwise allocate terabytes or build without end
    held = {int(m.group(1)) for k in ckpt["model"] for m in [re.match(r"layers\.(\d+)\.", k)] if m}
    if model_cfg.layers != len(held):
        raise CheckpointError(f"{path}: the weights do not fit the model its config describes: model.layers "
                              f"{model_cfg.layers}, the weights hold {len(held)} layers")
    with torch.device("meta"):  # shapes only, no memory
        diffs = describe_weight_mismatch(SigGateGT.from_config(model_cfg, info).state_dict(), ckpt["model"])
    if not diffs:
        model = SigGateGT.from_config(model_cfg, info)
    if diffs:
        raise CheckpointError(
            f"{path}: the weights do not fit the model its config describes: "
            + "; ".join(diffs[:5]) + (f" (+{len(diffs) - 5} more)" if len(diffs) > 5 else "")
            + f". It was written by siggate {ckpt.get('siggate_version')}; this is {__version__}."
        )
    model.load_state_dict(ckpt["model"])
    model.eval()
    return model, ckpt, cfg, info
