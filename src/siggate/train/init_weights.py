"""Start a model from pretrained weights: ``siggate train --init pretrained|PATH`` (``train.init``).

``train.init`` names the weights: ``pretrained`` (the weights shipped in the package,
``siggate/pretrained/default.pt``; see :data:`SHIPPED`), ``pretrained:NAME`` (another shipped
file), a file written by ``siggate pretrain`` (``pretrained.pt``) or any ``siggate train``
checkpoint (``best.pt``/``last.pt``, or the run folder; of a run of several members, its GNN
member's folder). Every tensor of the model whose name and
shape match is copied, except the last layer of the prediction head, which is the new task's and
keeps its fresh initialisation; a layer is copied whole or not at all (a head layer that also
reads molecule features has another weight shape, and keeps its fresh bias as well). The
backbone (encoders and GPS layers) must match exactly: the config's architecture keys are
compared first and a difference is named (the attention's own keys, :data:`ATTENTION_KEYS`, are
no difference between two models without attention). With pooling ``norm`` the pretrained divisor
(``model.pool_norm``) is kept (:func:`init_resolved`).
"""

from __future__ import annotations

import functools
import logging
import os
from pathlib import Path
from typing import NamedTuple

import torch

from ..config import ConfigError
from ..files import file_digest, safe_torch_load
from ..options import NO_INIT, init_is_shipped, shipped_init_name
from .runfiles import BEST, LAST

__all__ = ["SHIPPED", "InitWeights", "resolve_init", "read_init", "init_refusal", "load_init", "init_resolved", "pretrained_pool_norm", "ARCH_KEYS"]

#: the folder of the weights shipped in the package
SHIPPED = Path(__file__).resolve().parents[1] / "pretrained"
#: model keys that shape the backbone: a pretrained model and its fine-tuning config must agree on them
ARCH_KEYS = ("dim", "layers", "heads", "local", "attn", "attn_type", "gate", "gate_position", "pe", "pe_steps",
             "pe_dim", "pooling", "head_layers", "ffn_dim", "param_match")
#: the architecture keys of the attention branch alone (a model with ``attn: false`` has no tensor they shape)
ATTENTION_KEYS = ("heads", "attn_type", "gate", "gate_position")
#: the architecture keys of the positional encoder alone (a model with ``pe: none`` has none)
POSITION_KEYS = ("pe_steps", "pe_dim")
#: the architecture keys that set the FFN's width alone (compared by the width they resolve to)
FFN_KEYS = ("ffn_dim", "param_match")
#: the options of ``model.attention.<type>`` that make another attention of the same weights (the
#: kernel the query/key weights were trained for, which nodes attend); how often performer's
#: features are redrawn is training, not architecture
ATTENTION_ARCH_OPTIONS = {"performer": ("num_features", "kernel"),
                          "exphormer": ("expander_degree_total", "num_virtual_nodes", "expander_seed")}


@functools.lru_cache(maxsize=8)
def _warn_shadowed(path: str, source: str) -> None:
    """Once per process: a file or folder here has the name of the shipped weights."""
    logging.getLogger("siggate.train").warning(
        "train.init %r means the weights shipped with siggate, not %s here; to start from that, give it as ./%s",
        source, path, Path(path).name)


def _here_in_any_case(source: str) -> list[Path]:
    """The entries of the working folder named ``source`` in any case: the word ``pretrained`` is
    read in any case (``--init Pretrained`` is recorded ``pretrained``), so a ``./Pretrained`` that
    ``--init Pretrained`` read before is shadowed by the shipped weights as ``./pretrained`` is."""
    want = source.strip().lower()
    try:
        return sorted(Path(entry.name) for entry in os.scandir(".") if entry.name.lower() == want)
    except OSError:  # (a working folder gone or unreadable: nothing here to shadow)
        return []


def resolve_init(source: str) -> Path:
    """The weights file ``train.init`` names (see the module docstring)."""
    if init_is_shipped(source):
        # weights here of the shipped name, in any case (not a run's own fresh output folder named so, which held none)
        for here in _here_in_any_case(source):
            if here.is_file() or any((here / name).is_file() for name in ("pretrained.pt", BEST, LAST)):
                _warn_shadowed(str(here.resolve()), source)
        name = shipped_init_name(source) or "default"
        if Path(name).name != name or name in (".", ".."):  # (pretrained:/abs/x read any file, recorded as shipped)
            raise ConfigError(f"train.init {source!r}: pretrained:NAME names shipped weights by their name "
                              f"(shipped: {', '.join(sorted(p.stem for p in SHIPPED.glob('*.pt'))) or 'none'}); give "
                              "the path of other weights as it is, without 'pretrained:'")
        path = SHIPPED / f"{name}.pt"
        if not path.is_file():
            have = sorted(p.stem for p in SHIPPED.glob("*.pt"))
            raise ConfigError(f"train.init: no shipped weights {name!r} in {SHIPPED} (shipped: {', '.join(have) or 'none'})")
        return path
    path = Path(source).expanduser()
    if path.is_dir():
        if (path / "pretrained.pt").is_file() and (path / BEST).is_file():  # a run and a pretraining in one
            raise ConfigError(f"train.init: {path} holds both a pretraining's pretrained.pt and a run's best.pt; "
                              "name the weights file")
        for name in ("pretrained.pt", BEST, LAST):
            if (path / name).is_file():
                return path / name
        if (path / "model").is_dir() and (path / "corpus").is_dir():  # a pretraining stopped before its export
            raise ConfigError(f"train.init: {path} is a pretraining that has not exported its weights (no "
                              f"pretrained.pt): finish it with siggate pretrain ... --out {path} --resume, or name "
                              f"its checkpoint, {path / 'model' / BEST}")
        from .rundir import member_folders

        gnn = [m for m in member_folders(path) if (m / BEST).is_file()]
        if gnn:  # a run of several members (the csv recipe's gnn,svr,rf): its GNN's weights are a member's
            raise ConfigError(f"train.init: {path} is a run of several members; name its GNN member's folder "
                              f"({gnn[0]})")
        raise ConfigError(f"train.init: {path} holds no pretrained.pt, best.pt or last.pt; name the weights file")
    if not path.is_file():
        raise ConfigError(f"train.init: {path} does not exist; give 'pretrained', a pretrained.pt, a checkpoint "
                          f"or {NO_INIT} (from scratch)")
    return path



def _head_last(state: dict) -> str:
    """The prefix of the prediction head's last layer (``head.<i>.``) in a state dict."""
    idx = sorted({int(k.split(".")[1]) for k in state if k.startswith("head.")})
    return f"head.{idx[-1]}." if idx else "head.?."


def _layer(name: str) -> str:
    """The module a state-dict entry belongs to (``head.0.weight`` -> ``head.0``)."""
    return name.rsplit(".", 1)[0]


def pretrained_pool_norm(blob: dict) -> float | None:
    """The divisor of pooling ``norm`` the weights in ``blob`` were trained with: the value their
    run resolved from its data (``resolved``), or the config's own positive value; None when the
    blob records none (another pooling, or written before siggate kept it)."""
    model = (blob.get("config") or {}).get("model") or {}
    if model.get("pooling") != "norm":
        return None
    value = (blob.get("resolved") or {}).get("model.pool_norm") or model.get("pool_norm")
    return float(value) if value else None


def _ffn_width(model_cfg: dict) -> int | None:
    """The FFN hidden width a model config builds (:func:`~siggate.nn.model.resolve_ffn_dim`;
    ``ffn_dim`` 0 is ``2 * dim``), or None where the config does not say (no ``dim``)."""
    from ..nn.model import resolve_ffn_dim

    try:
        return resolve_ffn_dim(model_cfg) or 2 * int(model_cfg["dim"])
    except (KeyError, TypeError, ValueError):
        return None


def _architecture_refusal(path: Path, blob: dict, model_cfg: dict) -> str | None:
    """Why the weights ``blob`` (read from ``path``) cannot start a model of ``model_cfg`` (a
    dict), or None: the architecture keys that differ, and an explicit ``pool_norm`` other than
    the pretrained one (``0`` takes it). The one wording of the refusal."""
    saved_cfg = (blob.get("config") or {}).get("model") or {}
    # without an attention branch on either side, the attention's own keys shape nothing
    unused = ATTENTION_KEYS if saved_cfg.get("attn") is False and model_cfg.get("attn") is False else ()
    if saved_cfg.get("pe") == "none" and model_cfg.get("pe") == "none":  # no encoder: its sizes shape nothing
        unused += POSITION_KEYS
    width = _ffn_width(saved_cfg)
    if width is not None and width == _ffn_width(model_cfg):
        unused += FFN_KEYS  # one FFN width, set two ways (ffn_dim 0 is 2 * dim): the same tensors
    diffs = [f"model.{k}: pretrained {saved_cfg[k]!r}, this run {model_cfg.get(k)!r}"
             for k in ARCH_KEYS if k in saved_cfg and k not in unused and saved_cfg[k] != model_cfg.get(k)]
    kind = model_cfg.get("attn_type")
    if "attn_type" not in unused and kind == saved_cfg.get("attn_type") and kind in ATTENTION_ARCH_OPTIONS:
        then = (saved_cfg.get("attention") or {}).get(kind) or {}
        now = (model_cfg.get("attention") or {}).get(kind) or {}
        diffs += [f"model.attention.{kind}.{k}: pretrained {then[k]!r}, this run {now.get(k)!r}"
                  for k in ATTENTION_ARCH_OPTIONS[kind] if k in then and then[k] != now.get(k)]
    value = pretrained_pool_norm(blob)
    own = model_cfg.get("pool_norm") or 0
    if value is not None and model_cfg.get("pooling") == "norm" and own > 0 and abs(own - value) > 1e-9:
        diffs.append(f"model.pool_norm: pretrained {value:g}, this run {own:g} (0 takes the pretrained value)")
    if not diffs:
        return None
    return (f"train.init: {path} has another architecture ({'; '.join(diffs)}); use the pretrained model's "
            f"settings, or train from scratch: --set train.init={NO_INIT} (siggate train: --init {NO_INIT})")


class InitWeights(NamedTuple):
    """Weights ``train.init`` names, read once (:func:`read_init`) and passed on."""

    source: str  # train.init as given
    path: Path  # the file it names
    blob: dict  # what torch.load read from it (weights_only)


def read_init(source: str | InitWeights) -> InitWeights:
    """The weights ``train.init`` = ``source`` names, read from their file (``weights_only``);
    weights already read are returned as they are.

    Raises:
        ConfigError: ``source`` names no weights (:func:`resolve_init`), the file is not a
            weights file torch can read without pickled code, or its weights, config or resolved
            values are not siggate's.
    """
    if isinstance(source, InitWeights):
        return source
    path = resolve_init(source)
    try:
        blob = safe_torch_load(path)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the user's wrong path
        raise ConfigError(f"train.init: {path} is not a weights file siggate can read ({type(exc).__name__}); "
                          f"give 'pretrained', a pretrained.pt, a checkpoint or {NO_INIT}") from None
    if not isinstance(blob, dict) or not isinstance(blob.get("model"), dict):
        raise ConfigError(f"train.init: {path} holds no model weights; give 'pretrained', a pretrained.pt, a "
                          f"checkpoint or {NO_INIT}")
    if not _readable_blob(blob):
        raise ConfigError(f"train.init: {path} is not a weights file siggate can read (its weights, config or "
                          f"resolved values are not siggate's); give 'pretrained', a pretrained.pt, a checkpoint or "
                          f"{NO_INIT}")
    from .checkpoint import first_nonfinite

    bad = first_nonfinite(blob["model"])
    if bad is not None:  # every batch's loss would be NaN: a run that stops, or under --on-nan skip trains nothing
        raise ConfigError(f"train.init: {path} holds non-finite weights (NaN or inf in {bad}); they cannot start "
                          f"training: pretrain again, give other weights, or train from scratch with --init {NO_INIT}")
    return InitWeights(source, path, blob)


def _readable_blob(blob: dict) -> bool:
    """Whether ``blob`` is shaped as siggate writes weights: tensors by name, a config whose
    ``model`` is a mapping, a mapping of resolved values and a numeric ``pool_norm``."""
    config, resolved = blob.get("config") or {}, blob.get("resolved") or {}
    if not (isinstance(config, dict) and isinstance(config.get("model") or {}, dict) and isinstance(resolved, dict)
            and all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in blob["model"].items())):
        return False
    try:
        pretrained_pool_norm(blob)
    except (TypeError, ValueError):
        return False
    return True


def init_refusal(source: str | InitWeights, model_cfg: dict) -> str | None:
    """Why ``train.init`` = ``source`` cannot start a model of ``model_cfg`` (a dict), or None;
    what :func:`load_init` would refuse, checked by the CLI before a run folder is claimed.

    Raises:
        ConfigError: ``source`` names no readable weights (:func:`read_init`).
    """
    init = read_init(source)
    return _architecture_refusal(init.path, init.blob, model_cfg)


def init_resolved(source: str | InitWeights, model_cfg, resolved: dict) -> dict:
    """The values a fine-tuning run resolves (``resolved``, from its own data), with
    ``model.pool_norm`` taken from the pretrained weights ``source`` names: their layers were
    trained on atom sums divided by it, so a run whose config leaves it to be resolved
    (``pool_norm: 0``, the csv recipe) keeps it, and says so. An explicit other value is refused,
    as any architecture key that differs is.

    Raises:
        ConfigError: ``model.pool_norm`` set to another value than the pretrained one.
    """

    if model_cfg.pooling != "norm":
        return resolved
    _, path, blob = read_init(source)
    value = pretrained_pool_norm(blob)
    if value is None:
        return resolved
    if not model_cfg.pool_norm_unresolved:
        why = _architecture_refusal(path, blob, model_cfg.to_dict())
        if why:
            raise ConfigError(why)
        return resolved
    own = resolved.get("model.pool_norm")
    logging.getLogger("siggate.train").info(
        "model.pool_norm: %g, the pretrained weights' (pooling 'norm' divides the atom sum by it; this run's "
        "training molecules average %s atoms)", value, f"{own:g}" if own else "an unknown number of")
    return {**resolved, "model.pool_norm": value}


def load_init(model: torch.nn.Module, source: str | InitWeights, model_cfg: dict, chirality: str | None = None) -> dict:
    """Copy the weights ``source`` names into ``model`` (in place); a report of what was copied.

    Args:
        model: the freshly built model (its own initialisation stays where nothing is copied).
        source: ``train.init``, or the weights it names already read (:func:`read_init`).
        model_cfg: the fine-tuning run's ``model`` config as a dict, checked against the weights'.
        chirality: how the run's atom features read stereocentres
            (:data:`~siggate.data.base.ATOM_CHIRALITY`): a warning where the weights record
            another reading (their chirality embedding rows then start from other meanings,
            which fine-tuning relearns; weights that record none say nothing: the shipped ones,
            pretrained on MOSES, which writes no stereocentre, never trained those rows). (default: None)

    Raises:
        ConfigError: the weights' backbone differs (the differing keys are named).
    """
    source, path, blob = read_init(source)
    why = _architecture_refusal(path, blob, model_cfg)
    if why:
        raise ConfigError(why)
    saved, own = blob["model"], model.state_dict()
    last = _head_last(own)
    # the head's last layer is the new task's; mol_mean/mol_std scale the new data's features;
    # a layer is copied whole or not at all: one whose weight has another shape (a head that
    # also reads molecule features) keeps its fresh bias too
    unfit = {_layer(n) for n, t in own.items() if saved.get(n) is None or saved[n].shape != t.shape}
    copied, fresh = [], []
    for name, tensor in own.items():
        if name.startswith((last, "mol_")) or _layer(name) in unfit:
            fresh.append(name)
            continue
        tensor.copy_(saved[name])
        copied.append(name)
    backbone_fresh = [n for n in fresh if not n.startswith(("head.", "mol_"))]
    if backbone_fresh:
        raise ConfigError(f"train.init: {path} lacks (or holds in another shape) {len(backbone_fresh)} backbone "
                          f"tensors of this model (e.g. {backbone_fresh[0]}); it was written for another model "
                          "(another dataset's node or edge encoders, or architecture): give weights of this "
                          f"model, or train from scratch: --set train.init={NO_INIT} (siggate train: --init {NO_INIT})")
    then = (blob.get("info") or {}).get("chirality")
    if chirality is not None and then is not None and then != chirality:
        from ..data.base import CHIRALITY_WORDS

        logging.getLogger("siggate.train").warning(
            "train.init: %s was trained on atom features that read stereocentres by %s, and this run's read them by "
            "%s: the chirality rows of its atom embedding start from the other reading's meaning (fine-tuning "
            "relearns them)", path, CHIRALITY_WORDS.get(then, repr(then)), CHIRALITY_WORDS.get(chirality, repr(chirality)))
    return {"source": source, "path": str(path), "sha256": file_digest(path), "copied": len(copied),
            "fresh": fresh, "pretraining": blob.get("pretraining"), "chirality": then}

