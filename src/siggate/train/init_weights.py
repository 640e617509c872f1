"""Start a model from pretrained weights: ``siggate train --init pretrained|PATH`` (``train.init``).

``train.init`` names the weights: ``pretrained`` (the weights shipped in the package,
``siggate/pretrained/default.pt``; see :data:`SHIPPED`), ``pretrained:NAME`` (another shipped
file), a file written by ``siggate pretrain`` (``pretrained.pt``) or any ``siggate train``
checkpoint (``best.pt``/``last.pt``, or the run folder). Every tensor of the model whose name and
shape match is copied, except the last layer of the prediction head, which is the new task's and
keeps its fresh initialisation. The backbone (encoders and GPS layers) must match exactly: the
config's architecture keys are compared first and a difference is named.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..config import ConfigError
from ..files import file_digest

__all__ = ["SHIPPED", "resolve_init", "load_init", "ARCH_KEYS"]

#: the folder of the weights shipped in the package
SHIPPED = Path(__file__).resolve().parents[1] / "pretrained"
#: model keys that shape the backbone: a pretrained model and its fine-tuning config must agree on them
ARCH_KEYS = ("dim", "layers", "heads", "local", "attn", "attn_type", "gate", "gate_position", "pe", "pe_steps",
             "pe_dim", "pooling", "head_layers", "ffn_dim")


def resolve_init(source: str) -> Path:
    """The weights file ``train.init`` names (see the module docstring)."""
    if source == "pretrained" or source.startswith("pretrained:"):
        name = source.partition(":")[2] or "default"
        path = SHIPPED / f"{name}.pt"
        if not path.is_file():
            have = sorted(p.stem for p in SHIPPED.glob("*.pt"))
            raise ConfigError(f"train.init: no shipped weights {name!r} in {SHIPPED} (shipped: {', '.join(have) or 'none'})")
        return path
    path = Path(source).expanduser()
    if path.is_dir():
        for name in ("pretrained.pt", "best.pt", "last.pt"):
            if (path / name).is_file():
                return path / name
        raise ConfigError(f"train.init: {path} holds no pretrained.pt, best.pt or last.pt; name the weights file")
    if not path.is_file():
        raise ConfigError(f"train.init: {path} does not exist; give 'pretrained', a pretrained.pt or a checkpoint")
    return path



def _head_last(state: dict) -> str:
    """The prefix of the prediction head's last layer (``head.<i>.``) in a state dict."""
    idx = sorted({int(k.split(".")[1]) for k in state if k.startswith("head.")})
    return f"head.{idx[-1]}." if idx else "head.?."


def load_init(model: torch.nn.Module, source: str, model_cfg: dict) -> dict:
    """Copy the weights ``source`` names into ``model`` (in place); a report of what was copied.

    Args:
        model: the freshly built model (its own initialisation stays where nothing is copied).
        source: ``train.init``.
        model_cfg: the fine-tuning run's ``model`` config as a dict, checked against the weights'.

    Raises:
        ConfigError: the weights' backbone differs (the differing keys are named).
    """
    path = resolve_init(source)
    blob = torch.load(path, map_location="cpu", weights_only=True)
    saved_cfg = (blob.get("config") or {}).get("model", {})
    diffs = [f"model.{k}: pretrained {saved_cfg[k]!r}, this run {model_cfg.get(k)!r}"
             for k in ARCH_KEYS if k in saved_cfg and saved_cfg[k] != model_cfg.get(k)]
    if diffs:
        raise ConfigError(f"train.init: {path} has another architecture ({'; '.join(diffs)}); "
                          "use the pretrained model's settings or drop --init")
    saved, own = blob["model"], model.state_dict()
    last = _head_last(own)
    copied, fresh = [], []
    for name, tensor in own.items():
        src = saved.get(name)
        # the head's last layer is the new task's; mol_mean/mol_std scale the new data's features
        if name.startswith((last, "mol_")) or src is None or src.shape != tensor.shape:
            fresh.append(name)
            continue
        tensor.copy_(src)
        copied.append(name)
    backbone_fresh = [n for n in fresh if not n.startswith(("head.", "mol_"))]
    if backbone_fresh:
        raise ConfigError(f"train.init: {path} lacks {len(backbone_fresh)} backbone tensors of this model "
                          f"(e.g. {backbone_fresh[0]}); it was written for another model")
    return {"source": source, "path": str(path), "sha256": file_digest(path), "copied": len(copied),
            "fresh": fresh, "pretraining": blob.get("pretraining")}
