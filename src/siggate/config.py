"""Typed, validated run configuration.

A config has four sections, ``data``, ``model``, ``train`` and ``members`` (the fingerprint
members' options, read only by a run that holds those members). It is read from YAML
(``configs/<name>.yaml`` or a path), then ``--set key.path=value`` overrides are applied.
Every key is checked before any work starts: an unknown key, a wrong type or a value out
of range raises :class:`ConfigError` naming the key path, the bad value, the allowed
values and, for typos, the closest valid key.
"""

from __future__ import annotations

import dataclasses
import math
import re
import warnings
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from .options import (
    ATTN_IMPLS,
    ATTN_TYPES,
    DUPLICATES,
    EVAL_NORMS,
    FLAT_ATTENTION_KEYS,
    FRAGMENTS,
    GATE_KINDS,
    GATE_POSITIONS,
    LOCAL_MODEL_NAMES,
    MOL_FEATURES,
    PERFORMER_KERNELS,
    POOLING,
    SEED_MAX,
    SELECTS,
    SPLITS,
    TASK_LOSSES,
    ExphormerOptions,
    ForestMemberOptions,
    GPSOptions,
    PerformerOptions,
    SVRMemberOptions,
    closest_name,
    init_is_none,
    parse_mol_features,
)

CONFIG_DIR = Path(__file__).resolve().parent / "configs"


class ConfigError(ValueError):
    """A config key or value that cannot be used."""


def _choice(*allowed):
    return {"choices": allowed}


@dataclass
class DataConfig:
    name: str = "nci5k"
    root: str | None = None
    cache_dir: str | None = None
    # user CSV datasets (name: csv)
    csv: str | None = None
    smiles_col: str = "smiles"
    target_cols: list = field(default_factory=list)
    task: str = "regression"
    split: str | None = None   # None: the dataset's own default split
    sep: str | None = None     # CSV field delimiter; None: detected from the file
    decimal: str = "."         # CSV decimal mark of the targets: "." or "," (European spreadsheets)
    duplicates: str = "keep"   # CSV rows of one molecule: keep, average (regression) or first
    val_fraction: float = 0.0  # a CSV split column without val rows: this fraction of its train rows becomes val
    fragments: str = "all"     # CSV molecules: as written ("all") or as their parent (largest carbon fragment, neutralized)
    max_graphs: int = 0        # > 0: only the first N graphs of each split (quick runs, tests)
    num_nodes: int = 0         # sbm-large: nodes of its one graph; 0: the dataset's default
    seed: int = 0              # generated graph sets (pattern, cluster): the generator's draw of the recipe


@dataclass
class AttentionConfig:
    """``model.attention``: each attention type's own options, one dataclass per type
    (:mod:`siggate.options`), the same defaults as the constructors."""

    performer: PerformerOptions = field(default_factory=PerformerOptions)
    exphormer: ExphormerOptions = field(default_factory=ExphormerOptions)


@dataclass
class ModelConfig:
    """The model's keys; the defaults are :class:`siggate.nn.SigGateGT`'s, those the layers
    and the attention share read from :class:`siggate.options.GPSOptions` (a test keeps
    them equal)."""

    dim: int = 64
    layers: int = 10
    heads: int = GPSOptions.heads
    local: str = "gine"
    attn: bool = True
    gate: str = GPSOptions.gate
    gate_position: str = GPSOptions.gate_position
    gate_bias_init: float = GPSOptions.gate_bias_init
    gate_weight_std: float | None = GPSOptions.gate_weight_std  # None: Xavier-uniform gate weights; else N(0, std^2)
    ffn_dim: int = 0                        # FFN hidden width; 0: GraphGPS's 2 * dim
    param_match: str = "none"               # "ffn": ungated control widened to the elementwise gate's size
    dropout: float = GPSOptions.dropout
    attn_dropout: float = GPSOptions.attn_dropout
    pe: str = "none"
    pe_steps: int = 0
    pe_dim: int = 0
    pooling: str = "add"
    pool_norm: float = 0.0                  # pooling "norm": sum / pool_norm; 0: the training graphs' mean size
    head_layers: int = 3
    impl: str = GPSOptions.impl            # attention implementation (siggate.nn.impl.resolve_impl)
    attn_type: str = "full"                # global attention: full softmax, performer or exphormer
    attention: AttentionConfig = field(default_factory=AttentionConfig)  # the types' own options
    mol_features: str = "none"             # molecule features beside the pooled embedding (siggate.data.molfeatures)

    @property
    def pool_norm_unresolved(self) -> bool:
        """``pooling: norm`` with ``pool_norm: 0``: the divisor is the training graphs' mean
        size, which training resolves (:func:`siggate.train.modelprep.resolve_pool_norm`) into the
        run's checkpoint and metadata; the config keeps its ``0``."""
        return self.pooling == "norm" and not self.pool_norm > 0


@dataclass
class TrainConfig:
    epochs: int = 40
    batch_size: int = 32
    eval_batch_size: int = 256
    lr: float = 1e-3
    weight_decay: float = 1e-5
    warmup_epochs: int = 3
    # learning-rate factor of the first warmup epoch, rising linearly to 1 at epoch
    # warmup_epochs (train/schedule.py); 0 is GraphGPS's published schedule (floored at 1e-6)
    warmup_start: float = 0.0
    clip: float = 1.0
    seed: int = 0
    loss: str = "auto"
    normalize_targets: bool = True
    on_nan: str = "stop"
    threads: int = 0
    # BatchNorm statistics an evaluation uses: "running" (PyTorch's running averages over the last
    # training batches) or "train" (recomputed on the training set first, train/bn_stats.py)
    eval_norm: str = "running"
    # the epoch whose weights best.pt keeps: "best" (the lowest validation metric), "last" (the
    # schedule's end; the validation split then chooses nothing, so its scores stay out of
    # sample, e.g. for the weights of a combination of members fitted on it) or "auto" (last for
    # a GNN member weighed on val, best otherwise: siggate.options.resolve_select)
    select: str = "auto"
    # weight of the activity-cliff term (train/losses.py, CliffPairLoss): 0 trains on the loss alone
    cliff_weight: float = 0.0
    init: str = ""                          # start from these weights: "pretrained", a pretrained.pt or a checkpoint

    def set_epochs(self, epochs: int, keep_warmup: bool = False) -> None:
        """Train for ``epochs`` epochs, the warmup keeping its fraction of the schedule,
        ``round(warmup_epochs * epochs / self.epochs)`` (unless ``keep_warmup``): the one rule of
        ``--epochs``, ``--budget`` and the analyses' short runs."""
        if not keep_warmup and self.epochs > 0 and epochs != self.epochs:
            self.warmup_epochs = round(self.warmup_epochs * epochs / self.epochs)
        self.epochs = epochs

    def warmup_refusal(self) -> str | None:
        """Why this schedule must not run, a warmup that leaves no epoch after it (the learning
        rate would never reach ``lr`` nor decay), with the fix; ``None`` when it can run."""
        if self.warmup_epochs and self.warmup_epochs >= self.epochs:
            return (f"train.warmup_epochs={self.warmup_epochs} leaves no epoch after the warmup of a "
                    f"{self.epochs}-epoch run; train for more epochs or lower it "
                    f"(--set train.warmup_epochs=N with N < {self.epochs})")
        return None


@dataclass
class MembersConfig:
    """``members``: the fingerprint members' own options (``siggate train --members svr,rf``), one
    dataclass per kind (:mod:`siggate.options`), the same defaults as the members' constructors.
    A run without that member does not read its section (``--resume`` still compares it, as
    every key). Grids are lists (``--set members.svr.C=1,5,20``):
    each target chooses among them on its validation rows."""

    svr: SVRMemberOptions = field(default_factory=SVRMemberOptions)
    rf: ForestMemberOptions = field(default_factory=ForestMemberOptions)


def _plain(value):
    """``value`` with every tuple as a list (YAML writes lists, and a saved config reads back equal)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


@dataclass
class Config:
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    members: MembersConfig = field(default_factory=MembersConfig)

    def to_dict(self) -> dict:
        return _plain(dataclasses.asdict(self))

    def validate(self) -> "Config":
        _check(self)
        if init_is_none(self.train.init):
            self.train.init = ""  # from scratch: --init none, --set train.init=none or a YAML's init: none
        return self


for _cls in (DataConfig, ModelConfig, TrainConfig, MembersConfig):
    _cls.to_dict = lambda self: _plain(dataclasses.asdict(self))  # type: ignore[attr-defined]

# Constraints checked by ``_check``: choices and ranges per key path.
#: the most intra-op threads a run may ask for (torch cannot hold a larger count)
MAX_THREADS = 4096
#: the largest gate bias or gate weight std at initialization (sigmoid(40) is 1 in float32 already)
GATE_INIT_MAX = 1e4

CONSTRAINTS: dict[str, dict[str, Any]] = {
    "data.task": _choice("regression", "binary", "multilabel"),
    "data.decimal": _choice(".", ","),
    "data.duplicates": _choice(*DUPLICATES),
    "data.fragments": _choice(*FRAGMENTS),
    "model.local": _choice(*sorted(LOCAL_MODEL_NAMES), "none"),
    "model.gate": _choice(*GATE_KINDS),
    "model.gate_position": _choice(*GATE_POSITIONS),
    "model.impl": _choice(*ATTN_IMPLS),
    "model.attn_type": _choice(*ATTN_TYPES),
    "model.pe": _choice("none", "rwse", "lappe"),
    "model.pooling": _choice(*POOLING),
    "model.param_match": _choice("none", "ffn"),
    "train.loss": _choice("auto", *dict.fromkeys(loss for losses in TASK_LOSSES.values() for loss in losses)),
    "train.on_nan": _choice("stop", "skip"),
    "train.eval_norm": _choice(*EVAL_NORMS),
    "train.select": _choice(*SELECTS),
    # sizes far past any model that trains on one machine (a width of 4e9 passed, then failed in the
    # allocator with a traceback; 1e8 random-walk steps ran a minute before numpy's MemoryError)
    "model.dim": {"min": 1, "max": 16384},
    "model.ffn_dim": {"min": 0, "max": 65536},
    "model.layers": {"min": 1, "max": 1024},
    "model.heads": {"min": 1, "max": 1024},
    "model.head_layers": {"min": 1, "max": 64},
    "model.pool_norm": {"min": 0.0},
    "model.pe_steps": {"min": 0, "max": 1024},
    "model.pe_dim": {"min": 0, "max": 4096},
    "model.dropout": {"min": 0.0, "max_excl": 1.0},
    "model.attn_dropout": {"min": 0.0, "max_excl": 1.0},
    "model.attention.performer.num_features": {"min": 1},
    "model.attention.performer.redraw_interval": {"min": 0},
    "model.attention.performer.kernel": _choice(*PERFORMER_KERNELS),
    "model.attention.exphormer.expander_degree_total": {"min": 0},
    "model.attention.exphormer.num_virtual_nodes": {"min": 0},
    "model.attention.exphormer.expander_seed": {"min": 0, "max": 2**63 - 1},  # (numpy's generator takes it)
    # a sigmoid gate is saturated long before: past float32's range the layer's fill fails, and a
    # std of 1e39 filled the gate weights with inf (a "non-finite loss" that named the learning rate)
    "model.gate_bias_init": {"min": -GATE_INIT_MAX, "max": GATE_INIT_MAX},
    "train.epochs": {"min": 1},
    "train.cliff_weight": {"min": 0.0},
    "train.batch_size": {"min": 1},
    "train.eval_batch_size": {"min": 1},
    "train.lr": {"min_excl": 0.0},
    "train.weight_decay": {"min": 0.0},
    "train.warmup_epochs": {"min": 0},
    "train.warmup_start": {"min": 0.0, "max": 1.0},
    "train.clip": {"min": 0.0},
    "train.threads": {"min": 0, "max": MAX_THREADS},
    "data.val_fraction": {"min": 0.0, "max_excl": 1.0},
    "data.max_graphs": {"min": 0},
    "data.num_nodes": {"min": 0},
    "data.seed": {"min": 0, "max": SEED_MAX},
    "train.seed": {"min": 0, "max": SEED_MAX},
}

SECTIONS = ("data", "model", "train", "members")


def _known_keys(cls) -> list[str]:
    return [f.name for f in fields(cls)]


#: ``data.*`` keys only some generated datasets take (their loaders' ``options``), and what each sets
_GENERATOR_KEYS = {"num_nodes": "the size of its one graph", "seed": "the generator's draw of the recipe"}


def _suggest(key: str, options: list[str], prefix: str = "") -> str:
    close = closest_name(key, options, cutoff=0.5)  # case slips too: 'Elementwise', 'GATE'
    return f" Did you mean {prefix + close!r}?" if close else ""


def _section_classes() -> dict:
    return {"data": DataConfig, "model": ModelConfig, "train": TrainConfig, "members": MembersConfig}


def _suggest_key(prefix: str, key: str) -> str:
    """Closest valid key path for ``prefix.key``: a typo in the same section, or the same
    name in another section (``train.dim`` -> ``model.dim``)."""
    classes = _section_classes()
    hint = _suggest(key, _known_keys(classes[prefix]), f"{prefix}.")
    if hint:
        return hint
    for sec, cls in classes.items():
        if sec != prefix and key in _known_keys(cls):
            return f" Did you mean '{sec}.{key}'? ({key!r} belongs to the '{sec}' section.)"
    return ""


def _range_text(rule: dict) -> str:
    lo = f">= {rule['min']}" if "min" in rule else (f"> {rule['min_excl']}" if "min_excl" in rule else "")
    hi = f"<= {rule['max']}" if "max" in rule else (f"< {rule['max_excl']}" if "max_excl" in rule else "")
    return " and ".join(x for x in (lo, hi) if x)


def _coerce(path: str, value: Any, default: Any, annotation: str) -> Any:
    """Convert ``value`` to the type of the field, or raise a ConfigError."""
    ann = str(annotation)
    if ann.startswith("tuple["):  # a grid: "1,5,20", a YAML list or one value; empty or null: ()
        return _coerce_tuple(path, [] if value is None else value, ann)
    if value is None:
        if "None" in ann:
            return None
        raise ConfigError(f"{path}: null is not allowed; expected {ann}")
    if ann == "float | None":
        ann = "float"
    if ann == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
            return value.lower() in ("true", "1", "yes")
        raise ConfigError(f"{path}: expected true or false, got {value!r}")
    if ann == "int":
        if isinstance(value, bool):
            raise ConfigError(f"{path}: expected an integer, got {value!r}")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value)
            except ValueError:
                pass
        raise ConfigError(f"{path}: expected an integer, got {value!r}")
    if ann == "float":
        if isinstance(value, bool):
            raise ConfigError(f"{path}: expected a number, got {value!r}")
        out = None
        if isinstance(value, (int, float)):
            out = float(value)
        elif isinstance(value, str):
            try:
                out = float(value)
            except ValueError:
                pass
        if out is None:
            raise ConfigError(f"{path}: expected a number, got {value!r}")
        if not math.isfinite(out):
            raise ConfigError(f"{path}: {value!r} is not allowed; expected a finite number")
        return out
    if ann == "list":
        if isinstance(value, str):
            return [v.strip() for v in value.split(",") if v.strip()]
        if isinstance(value, (list, tuple)):
            bad = [v for v in value if isinstance(v, (dict, list, tuple)) or v is None]
            if bad:
                raise ConfigError(f"{path}: expected a list of names, got {value!r}")
            return [str(v) for v in value]
        raise ConfigError(f"{path}: expected a list (or a comma-separated string), got {value!r}")
    if "str" in ann:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
        raise ConfigError(f"{path}: expected a string, got {value!r} ({type(value).__name__})")
    return value


def _coerce_tuple(path: str, value: Any, ann: str) -> tuple:
    """``value`` as the tuple ``ann`` names (``tuple[float, ...]``, ``tuple[int, ...]``,
    ``tuple[str, ...]`` or ``tuple[float | str, ...]``): a comma-separated string, a list or one value."""
    kinds = ann[len("tuple["):].split(",")[0].replace(" ", "").split("|")
    items = [v.strip() for v in value.split(",") if v.strip()] if isinstance(value, str) else (
        list(value) if isinstance(value, (list, tuple)) else [value])  # "": () (members.svr.average=)
    out = []
    for item in items:
        for kind in kinds:
            try:
                out.append(_coerce(path, item, None, kind))
                break
            except ConfigError:
                continue
        else:
            want = {"float": ("finite numbers", "1,5"), "int": ("integers", "1,5"), "str": ("names", "a,b")}
            raise ConfigError(f"{path}: {item!r} is not allowed; expected a list of "
                              f"{' or '.join(want.get(k, (k,))[0] for k in kinds)}, e.g. {path}={want[kinds[0]][1]}")
    if len(set(out)) != len(out):
        raise ConfigError(f"{path}: {next(v for v in out if out.count(v) > 1)!r} is given twice; list each value once")
    return tuple(out)


def _build_section(cls, raw: dict, prefix: str):
    if not isinstance(raw, dict):
        raise ConfigError(f"{prefix}: expected a mapping of keys, got {raw!r}")
    known = {f.name: f for f in fields(cls)}
    kwargs = {}
    for key, value in raw.items():
        if key not in known:
            hint = _suggest_key(prefix, str(key)) if prefix in SECTIONS else _suggest(str(key), list(known), f"{prefix}.")
            raise ConfigError(
                f"unknown config key '{prefix}.{key}' (value {value!r}).{hint} "
                f"Valid keys in '{prefix}': {', '.join(known)}."
            )
        f = known[key]
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        if dataclasses.is_dataclass(default):  # a nested section: model.attention, model.attention.performer
            kwargs[key] = _build_section(type(default), {} if value is None else value, f"{prefix}.{key}")  # (0: refused)
        else:
            kwargs[key] = _coerce(f"{prefix}.{key}", value, default, f.type)
    return cls(**kwargs)


def from_dict(raw: dict) -> Config:
    """Build and validate a :class:`Config` from a nested dict."""
    raw = raw or {}
    if not isinstance(raw, dict):
        raise ConfigError(f"a config must be a mapping with sections data/model/train/members, got {type(raw).__name__}")
    sections = _section_classes()
    for key in raw:
        if key not in sections:
            owners = [s for s, cls in sections.items() if key in _known_keys(cls)]
            if owners:  # a key without its section: 'gate' -> 'model.gate'
                hint = f" Did you mean '{owners[0]}.{key}'? Keys go inside a section."
            else:
                hint = _suggest(str(key), list(sections))
            raise ConfigError(
                f"unknown config section '{key}'.{hint} "
                f"Valid sections: {', '.join(sections)}."
            )
    raw = _nest_flat_attention_keys(raw, warn=True)
    cfg = Config(**{k: _build_section(cls, raw.get(k, {}) or {}, k) for k, cls in sections.items()})
    return cfg.validate()


def _nest_flat_attention_keys(raw: dict, warn: bool) -> dict:
    """``raw`` with the flat ``model.performer_*``/``model.expander_*`` keys of older
    configs moved into ``model.attention.<type>`` (:data:`siggate.options.FLAT_ATTENTION_KEYS`),
    with a deprecation message when ``warn`` (keys given now, in a file or a dict: one that the
    section also gives with another value is refused, since which one was meant is unknown); an
    old record's (not ``warn``) fills only what its section lacks. A new dict when anything moved.
    ``--set`` items of the old names are moved as they are applied (:func:`load_config`), so
    their order against the new names is kept."""
    model = raw.get("model")
    if not isinstance(model, dict) or not set(model) & set(FLAT_ATTENTION_KEYS):
        return raw
    model = dict(model)
    attention = {k: dict(v) if isinstance(v, dict) else v for k, v in (model.get("attention") or {}).items()}
    for old in [k for k in model if k in FLAT_ATTENTION_KEYS]:
        kind, name = FLAT_ATTENTION_KEYS[old]
        section = attention.setdefault(kind, {})
        if isinstance(section, dict) and warn and name in section and section[name] != model[old]:
            raise ConfigError(f"model.{old}: {model[old]!r} and model.attention.{kind}.{name}: {section[name]!r} "
                              f"both set one option (the first is its deprecated name); keep "
                              f"model.attention.{kind}.{name}")
        if isinstance(section, dict):
            section.setdefault(name, model[old])
        if warn:
            _deprecated_flat_key(old, kind, name, stacklevel=4)
        del model[old]
    model["attention"] = attention
    return {**raw, "model": model}


def _deprecated_flat_key(old: str, kind: str, name: str, stacklevel: int) -> None:
    warnings.warn(f"model.{old} is deprecated: write model.attention.{kind}.{name} (it was read as that)",
                  FutureWarning, stacklevel=stacklevel)


def _check(cfg: Config) -> None:
    """Validate ``cfg``: value ranges, then the model, then the data, then the members (first error raised)."""
    _check_ranges(cfg)
    _check_model(cfg.model)
    _check_data(cfg)
    _check_members(cfg.members)


def _check_members(m: MembersConfig) -> None:
    """Each member kind's options by its own rules (``check()`` of its options dataclass in
    :mod:`siggate.options`, which its constructor applies too), named by their key path."""
    for f in fields(m):
        try:
            getattr(m, f.name).check()
        except ValueError as e:
            raise ConfigError(f"members.{f.name}.{e}") from None


def _check_ranges(cfg: Config) -> None:
    """Each key of :data:`CONSTRAINTS` against its choices or range."""
    for path, rule in CONSTRAINTS.items():
        value = cfg
        for part in path.split("."):
            value = getattr(value, part)
        if "choices" in rule and value not in rule["choices"]:
            raise ConfigError(
                f"{path}: {value!r} is not allowed. Allowed values: {', '.join(map(str, rule['choices']))}."
                + (_suggest(str(value), list(map(str, rule["choices"]))))
            )
        if "choices" in rule:
            continue
        out = (
            (isinstance(value, float) and value != value)  # NaN passes every comparison
            or ("min" in rule and value < rule["min"])
            or ("min_excl" in rule and value <= rule["min_excl"])
            or ("max" in rule and value > rule["max"])
            or ("max_excl" in rule and value >= rule["max_excl"])
        )
        if out:
            raise ConfigError(f"{path}: {value!r} is out of range; allowed values: {_range_text(rule)}.")


def _check_model(m) -> None:
    """Combinations of model options that cannot work."""
    if m.dim % m.heads != 0:
        raise ConfigError(
            f"model.heads: {m.heads} does not divide model.dim={m.dim}. Allowed values: divisors of "
            f"{m.dim} such as {[h for h in range(1, min(m.dim, 16) + 1) if m.dim % h == 0]}, or change model.dim."
        )
    if m.pe != "none":
        if not 0 < m.pe_dim < m.dim:
            raise ConfigError(
                f"model.pe_dim: {m.pe_dim} is out of range when model.pe={m.pe!r}; allowed values: "
                f"1..{m.dim - 1} (below model.dim={m.dim}), or set model.pe=none."
            )
        if m.pe_steps < 1:
            raise ConfigError(f"model.pe_steps: must be >= 1 when model.pe={m.pe!r}, got {m.pe_steps}")
    if m.gate_weight_std is not None and not 0 <= m.gate_weight_std <= GATE_INIT_MAX:
        raise ConfigError(f"model.gate_weight_std: {m.gate_weight_std!r} is out of range; allowed values: >= 0 and "
                          f"<= {GATE_INIT_MAX}, or null for Xavier-uniform gate weights.")
    if m.param_match != "none":
        if m.gate != "none":
            raise ConfigError(
                f"model.param_match: {m.param_match!r} widens an ungated model to the elementwise gate's size, "
                f"but model.gate={m.gate!r}; set model.gate=none or model.param_match=none.")
        if m.ffn_dim:
            raise ConfigError(
                f"model.param_match: {m.param_match!r} sets the FFN width itself; remove model.ffn_dim={m.ffn_dim} "
                "or set model.param_match=none.")
    if m.pool_norm and m.pooling != "norm":
        raise ConfigError(f"model.pool_norm: {m.pool_norm!r} divides the pooled sum only with model.pooling=norm, "
                          f"not {m.pooling!r}; set model.pooling=norm or model.pool_norm=0.")
    degree = m.attention.exphormer.expander_degree_total
    if degree % 2:
        raise ConfigError(f"model.attention.exphormer.expander_degree_total: {degree} is odd; allowed values: even "
                          f"numbers >= 0 (the expander is built from degree/2 random permutations, Exphormer's "
                          f"exp_deg), e.g. {degree + 1}.")
    if m.attn_type != "full" and m.impl == "sdpa":
        raise ConfigError(f"model.impl: 'sdpa' runs only with model.attn_type=full, not {m.attn_type!r}; "
                          "allowed values: auto, reference, packed.")
    try:
        parse_mol_features(m.mol_features)
    except ValueError:
        raise ConfigError(f"model.mol_features: {m.mol_features!r} is not allowed. Allowed values: "
                          f"{', '.join(MOL_FEATURES)}, or kinds joined with '+' (morgan_count+rdkit2d)."
                          + _suggest(str(m.mol_features), list(MOL_FEATURES))) from None
    if m.local == "none" and not m.attn:
        raise ConfigError("model.local='none' with model.attn=false leaves no branch; enable one of them")
    if m.dim >> (m.head_layers - 1) < 1:
        raise ConfigError(
            f"model.head_layers: {m.head_layers} is too many for model.dim={m.dim}: the prediction head halves "
            f"the width at each layer, so at most {m.dim.bit_length()} layers fit; lower model.head_layers "
            "or raise model.dim."
        )


#: the names a field delimiter may be given by (``--sep tab``, ``data.sep=tab``)
SEP_NAMES = {"tab": "\t", "\\t": "\t"}


def sep_char(value) -> str | None:
    """The field delimiter ``value`` gives (``data.sep``, ``--sep``): one character, or a name of
    :data:`SEP_NAMES`; ``None`` for anything else."""
    sep = SEP_NAMES.get(value, value) if isinstance(value, str) else None
    return sep if sep is not None and len(sep) == 1 else None


def _check_data(cfg: Config) -> None:
    """The dataset name, its split and the CSV options (``data.sep`` named by :data:`SEP_NAMES`
    becomes its character)."""
    split = cfg.data.split
    if split is not None and split not in SPLITS and not (split.startswith("column:") and split[len("column:"):].strip()):
        raise ConfigError(
            f"data.split: {split!r} is not allowed. Allowed values: {', '.join(SPLITS)}, column:NAME "
            "(or leave it unset for the dataset's default)." + _suggest(split, list(SPLITS))
        )
    if cfg.data.name == "csv":
        if not cfg.data.csv:
            raise ConfigError("data.csv: a CSV path is required when data.name='csv' (siggate train --data FILE.csv; "
                              "--set data.csv=FILE.csv elsewhere)")
        if not cfg.data.target_cols:
            raise ConfigError("data.target_cols: name at least one target column (siggate train --target-col COL; "
                              "--set 'data.target_cols=[COL]' elsewhere)")
        loss, task, cols = cfg.train.loss, cfg.data.task, [str(c) for c in cfg.data.target_cols]
        if len(set(cols)) != len(cols):
            raise ConfigError(f"data.target_cols: {', '.join(cols)} names a column more than once; name each "
                              "target once (--target-col)")
        if cfg.data.sep is not None:
            sep = sep_char(cfg.data.sep)
            if sep is None:
                raise ConfigError(f"data.sep: {cfg.data.sep!r} is not one character; use e.g. data.sep=';' or "
                                  "data.sep=tab (or leave it out: the delimiter is detected)")
            cfg.data.sep = sep
        if task == "binary" and len(cols) > 1:
            raise ConfigError(f"data.task: 'binary' takes one target column, got {len(cols)} ({', '.join(cols)}); "
                              "several 0/1 targets are --task multilabel")
        if cfg.data.duplicates == "average" and task != "regression":
            raise ConfigError(f"data.duplicates: 'average' merges regression labels into their mean; a {task} "
                              "label has no mean, use --duplicates first or --duplicates keep")
        if cfg.data.val_fraction and not (split or "").startswith("column:"):
            raise ConfigError(f"data.val_fraction: {cfg.data.val_fraction} draws validation rows from the train rows "
                              "of a split column (--split column:NAME); the other splits take their validation "
                              "share from the whole file. Remove it, or split by a column.")
        if loss != "auto" and loss not in TASK_LOSSES[task]:
            raise ConfigError(
                f"train.loss: {loss!r} does not fit data.task={task!r}; allowed values: "
                + ", ".join(("auto",) + TASK_LOSSES[task]) + "."
            )
        for key, what in _GENERATOR_KEYS.items():
            if getattr(cfg.data, key):
                raise ConfigError(f"data.{key}: {getattr(cfg.data, key)} applies to generated datasets ({what}), "
                                  "not to CSV data; remove it.")
    else:
        from .data.catalog import DATASET_META, DATASETS

        if cfg.data.name not in DATASETS:
            raise ConfigError(
                f"data.name: unknown dataset {cfg.data.name!r}. Allowed values: {', '.join(sorted(DATASETS))}, csv."
                + _suggest(cfg.data.name, sorted(DATASETS))
            )
        for key, what in _GENERATOR_KEYS.items():
            if getattr(cfg.data, key) and key not in DATASET_META[cfg.data.name]["options"]:
                takers = sorted(n for n, meta in DATASET_META.items() if key in meta["options"])
                raise ConfigError(f"data.{key}: {getattr(cfg.data, key)} applies to {', '.join(takers)} ({what}), "
                                  f"not to {cfg.data.name}; remove it.")
        if cfg.model.mol_features != "none" and DATASET_META[cfg.data.name]["level"] != "graph":
            raise ConfigError(f"model.mol_features: {cfg.model.mol_features!r} adds one vector per molecule to "
                              f"a graph-level readout; {cfg.data.name} predicts per node. Set model.mol_features=none.")
        model_defaults = ModelConfig()
        for key in _READOUT_KEYS:  # (a node-level model pools nothing: accepted and ignored before)
            if DATASET_META[cfg.data.name]["level"] != "graph" and getattr(cfg.model, key) != getattr(model_defaults, key):
                raise ConfigError(f"model.{key}: {getattr(cfg.model, key)!r} shapes a graph-level readout; "
                                  f"{cfg.data.name} predicts per node, pooling nothing. Remove it.")
        if cfg.data.fragments != "all":
            raise ConfigError(f"data.fragments: {cfg.data.fragments!r} applies to CSV data (siggate train --data); "
                              f"{cfg.data.name}'s molecules are read as the benchmark publishes them. Remove it.")
        defaults = DataConfig()
        for key in _CSV_KEYS:  # (they were accepted, ignored, and recorded as the run's: task binary on nci5k)
            if getattr(cfg.data, key) != getattr(defaults, key):
                hint = " (or set data.name=csv: siggate train --data FILE.csv)" if key == "csv" else ""
                raise ConfigError(f"data.{key}: {getattr(cfg.data, key)!r} applies to CSV data (siggate train --data "
                                  f"FILE.csv), not to {cfg.data.name}; remove it{hint}.")
        if split is not None and "split" not in DATASET_META[cfg.data.name]["options"]:
            takers = sorted(n for n, meta in DATASET_META.items() if "split" in meta["options"])
            raise ConfigError(
                f"data.split: {cfg.data.name} comes with its official split, which siggate always uses; "
                f"data.split applies to {', '.join(takers)} and csv data only. Remove data.split from the config."
            )
        if split is not None and split.startswith("column:"):
            raise ConfigError(f"data.split: {split!r} needs a CSV with a split column (data.name='csv').")


#: what YAML reads as null (an override's text)
YAML_NULLS = ("", "~", "null", "Null", "NULL")
#: the model keys of a graph-level readout, which a node-level model has none of
_READOUT_KEYS = ("pooling", "pool_norm")
#: the data keys of a CSV alone (``data.fragments`` and ``data.split`` are checked on their own)
_CSV_KEYS = ("csv", "smiles_col", "target_cols", "task", "sep", "decimal", "duplicates", "val_fraction")


def parse_override(item: str) -> tuple[list[str], Any]:
    """``"model.gate=none"`` -> ``(["model", "gate"], "none")`` (value parsed as YAML)."""
    if "=" not in item:
        raise ConfigError(f"--set expects key.path=value, got {item!r}")
    key, value = item.split("=", 1)
    parts = key.strip().split(".")
    if len(parts) < 2 or not all(parts):
        hint = ""
        if len(parts) == 1 and parts[0]:
            owners = [s for s, cls in _section_classes().items() if parts[0] in _known_keys(cls)]
            hint = (" Did you mean " + " or ".join(f"'{o}.{parts[0]}'" for o in owners) + "?") if owners else ""
        raise ConfigError(f"--set key must look like section.key (e.g. model.gate), got {key!r}.{hint}")
    try:
        parsed = yaml.safe_load(value)
    except yaml.YAMLError:
        parsed = value
    return parts, parsed


def key_path(parts: list[str]) -> list[str]:
    """The key path an override's ``parts`` stand for: a deprecated flat attention key
    (``model.performer_features``, :data:`~siggate.options.FLAT_ATTENTION_KEYS`) as its nested
    name (``model.attention.performer.num_features``), any other as given."""
    if len(parts) == 2 and parts[0] == "model" and parts[1] in FLAT_ATTENTION_KEYS:
        return ["model", "attention", *FLAT_ATTENTION_KEYS[parts[1]]]
    return list(parts)


def override_key(item: str) -> str:
    """The key an override gives: ``"model.gate=none"`` -> ``"model.gate"`` (``parse_override``'s
    rules: a malformed item raises its :class:`ConfigError`)."""
    return ".".join(parse_override(item)[0])


def set_itself(keys, owned: dict[str, str], setter: str, name=lambda key: f"--set {key}",
               drop=lambda key: f"drop --set {key}", give: str = "give") -> str | None:
    """The refusal of the first of ``keys`` (config keys a user set) that a command sets itself, or
    ``None``: its setting would replace the user's silently, or the user's would leave a run that
    its record does not describe. ``setter`` names the command (``"pretrain"``, ``"fit"``);
    ``owned`` maps each key it sets to how (``"from --seed"``, ``"itself (its corpus)"``), where
    ``from --FLAG`` or a bare ``from NAME`` at the end names what to give instead. ``name`` and
    ``drop`` word a key as the surface takes it (``--set KEY``; an estimator's ``overrides``)."""
    for key in keys:
        if key in owned:
            how = owned[key]
            instead = re.search(r"\bfrom (--[\w-]+)", how) or re.search(r"\bfrom (\w+)$", how)
            return (f"{name(key)}: {setter} sets it {how}; {drop(key)}"
                    + (f" and {give} {instead.group(1)} instead" if instead else ""))
    return None


def resolve_config_path(name_or_path: str) -> Path:
    p = Path(name_or_path)
    if p.suffix.lower() in (".yaml", ".yml") and p.is_file():
        return p
    cand = CONFIG_DIR / f"{name_or_path}.yaml"
    if "/" not in str(name_or_path) and cand.is_file():
        return cand
    if p.is_file():  # a YAML file with another extension
        return p
    known = sorted(q.stem for q in CONFIG_DIR.glob("*.yaml"))
    if p.is_dir():
        saved = f" (a run folder's config.yaml is one: {p / 'config.yaml'})" if (p / "config.yaml").is_file() else ""
        raise ConfigError(f"config {name_or_path!r} is a folder; give a YAML file{saved} or a built-in config: "
                          f"{', '.join(known)}")
    if p.exists():  # a device, a pipe
        raise ConfigError(f"config {name_or_path!r} is not a regular file; give a YAML file or a built-in config: "
                          f"{', '.join(known)}")
    if p.suffix.lower() in (".yaml", ".yml") or len(p.parts) > 1:
        builtin = (f"; the built-in config of that name is given as {p.stem!r} (--config {p.stem})"
                   if p.stem in known else f". Built-in configs: {', '.join(known)}.")  # (configs/zinc.yaml too)
        raise ConfigError(f"config file {name_or_path!r} not found (looked in {Path.cwd()}){builtin}")
    raise ConfigError(
        f"config {name_or_path!r} not found: it is neither a YAML file nor a built-in config. "
        f"Built-in configs: {', '.join(known)}.{_suggest(name_or_path, known)}"
    )


def upgrade_config_dict(raw: dict, record: bool = True) -> dict:
    """A config dict written by an older siggate, brought to the current schema; returns a
    new dict. :func:`~siggate.train.checkpoint.load_checkpoint` applies it to every
    checkpoint it loads.

    - ``data.split``: until the balanced nci5k split, the default was ``"scaffold"`` for
      every dataset and the benchmarks with an official split ignored it. For those it
      becomes unset (what it always meant); for nci5k and CSV data it stays
      ``"scaffold"``, the OGB-order split those runs really used.
      Only in a run's record (``record``): a user's file (no ``_meta``) giving ``"scaffold"`` to
      such a dataset is refused, as any other split is.
    - The CSV keys (``data.csv``, ``data.task``, ...) of a benchmark dataset's run were accepted and
      ignored before they were refused: a record's read as their defaults (only with ``record``).
    - ``model.fused`` (a bool) became ``model.impl``: ``true`` is ``"auto"``, ``false``
      ``"reference"``.
    - ``model.pool_norm`` came with ``pooling: norm``; older configs pool ``add`` or
      ``mean``, where it is unused: ``0``.
    - ``model.mol_features`` came later; older models have none: ``"none"``.
    - ``train.init`` came with ``siggate pretrain``; older runs started fresh: ``""``.
    - ``data.val_fraction`` came with validation rows drawn from a split column's train rows;
      older runs had none: ``0``.
    - ``data.fragments`` came with reading a salt as its parent; older runs read every molecule
      as written: ``"all"``.
    - ``train.warmup_start`` came with ``siggate train``'s 1% warmup start; older runs
      warmed up from GraphGPS's ``0``.
    - ``train.eval_norm`` came with the BatchNorm statistics recomputed before evaluation;
      older runs were scored with the running statistics: ``"running"``.
    - ``train.cliff_weight`` came with the activity-cliff term; older runs had none: ``0``.
    - ``train.select`` came with keeping the last epoch; older runs kept the best, what the
      missing key's default ``"auto"`` means for a run of its own (it is left unset: a
      built-in config without the key gets ``auto`` too).
    - ``model.performer_features``, ``performer_redraw``, ``performer_kernel``,
      ``expander_degree``, ``expander_degree_total``, ``expander_seed`` and ``virtual_nodes``
      moved into ``model.attention.performer``/``.exphormer``
      (:data:`siggate.options.FLAT_ATTENTION_KEYS`); ``expander_degree`` (the expander's
      total degree) is ``expander_degree_total`` there, the same number (Exphormer's
      ``exp_deg`` counts permutations, half of it; the new name says which).
    - ``members`` (the fingerprint members' options) came after the members; an older run's
      svr and rf members were built with their defaults, and each member's ``predictor.json``
      records the options it really used: the section, and any of its keys a config lacks, read
      as today's defaults (unknown keys stay, to be refused).
    - ``model.attention`` the same way: an attention type added after a run was saved (its
      options section) and any option a type gained read as today's defaults, which the run's
      model, of whatever type, was built with (resume refused every older run before).
    """
    if not isinstance(raw, dict):
        return raw
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in raw.items()}
    data = out.get("data")
    if (record and isinstance(data, dict) and data.get("split") == "scaffold"
            and data.get("name", "nci5k") not in ("nci5k", "csv")):  # (a user's file: refused, as another split is)
        data["split"] = None
    if isinstance(data, dict):
        data.setdefault("val_fraction", 0.0)
        data.setdefault("fragments", "all")
    if record and isinstance(data, dict) and data.get("name", "nci5k") != "csv":  # CSV keys a benchmark's run
        defaults = DataConfig()  # was given: ignored then, refused now; the record reads as it trained
        data.update({k: getattr(defaults, k) for k in _CSV_KEYS if k in data})
        from .data.catalog import DATASET_META

        model = out.get("model")  # a node-level run's pooling, ignored then too
        if isinstance(model, dict) and DATASET_META.get(data.get("name", "nci5k"), {}).get("level") == "node":
            model_defaults = ModelConfig()
            model.update({k: getattr(model_defaults, k) for k in _READOUT_KEYS if k in model})
    model = out.get("model")
    if isinstance(model, dict) and "fused" in model:
        fused = model.pop("fused")
        model.setdefault("impl", "auto" if fused else "reference")
    if isinstance(model, dict):
        model.setdefault("pool_norm", 0.0)
        model.setdefault("mol_features", "none")
    train = out.get("train")
    if isinstance(train, dict):
        train.setdefault("warmup_start", 0.0)
        train.setdefault("init", "")
        train.setdefault("eval_norm", "running")
        train.setdefault("cliff_weight", 0.0)
    if any(k in out for k in ("data", "model", "train")):  # a whole config, not a loose section
        out["members"] = _kinds_filled(out.get("members"), MembersConfig().to_dict())
    out = _nest_flat_attention_keys(out, warn=False)
    if isinstance(out.get("model"), dict):
        out["model"] = {**out["model"], "attention": _kinds_filled(out["model"].get("attention"),
                                                                   _plain(dataclasses.asdict(AttentionConfig())))}
    return out


def _kinds_filled(saved, defaults: dict):
    """A saved section of one subsection per kind (``members``, ``model.attention``) with each
    kind it lacks, and each key a kind lacks, read as ``defaults`` (today's): a kind or a field
    added later. Unknown kinds and keys stay, to be refused; a section that is no mapping too."""
    saved = {} if saved is None else saved
    if not isinstance(saved, dict):
        return saved
    merged = {kind: kind_defaults if saved.get(kind) is None else
              {**kind_defaults, **saved[kind]} if isinstance(saved[kind], dict) else saved[kind]
              for kind, kind_defaults in defaults.items()}
    return {**saved, **merged}


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping (PyYAML keeps the last)."""


def _unique_mapping(loader: _UniqueKeyLoader, node, deep: bool = False):
    seen: dict = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":  # '<<:' merges another mapping: construct_mapping does it
            continue
        key, line = loader.construct_object(key_node, deep=deep), key_node.start_mark.line + 1
        try:
            first = seen.get(key)
        except TypeError:  # an unhashable key: construct_mapping names it
            continue
        if first is not None:
            raise yaml.constructor.ConstructorError(
                None, None, f"{key!r} is given twice in one section (first on line {first}); keep one",
                key_node.start_mark)
        seen[key] = line
    return loader.construct_mapping(node, deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def load_yaml(text: str):
    """A config file's YAML (safe: plain data only), a key given twice in one section refused
    (``yaml.YAMLError``): the last one silently won."""
    return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)


def yaml_problem(exc: yaml.YAMLError) -> str:
    """A YAML error in one line: its problem and where (PyYAML's own text spans several lines
    with a caret under the line)."""
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    mark = getattr(exc, "problem_mark", None)
    return f"{problem} (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else problem


def load_config(name_or_path: str | None = None, overrides: list[str] | None = None) -> Config:
    """Load a built-in config by name (default ``nci5k``) or a YAML path, apply ``--set``
    overrides, and validate. A run's saved ``config.yaml`` loads too: its ``_meta``
    section is ignored and an older schema upgraded (:func:`upgrade_config_dict`)."""
    if name_or_path is not None and not str(name_or_path).strip():  # (--config "" trained the default, silently)
        raise ConfigError("--config is empty; give a built-in config name (nci5k, zinc, csv, ...) or a YAML path, or "
                          "leave --config out")
    path = resolve_config_path(name_or_path or "nci5k")
    try:
        raw = load_yaml(path.read_text(encoding="utf-8"))
        if raw is None:  # (it trained with the dataclasses' defaults: 40 epochs, full attention, nci5k's data)
            raise ConfigError(f"{path}: the config file is empty; give its sections data/model/train/members (a built-in "
                              f"config such as {CONFIG_DIR / 'csv.yaml'} shows them), or leave --config out")
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {yaml_problem(exc)}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not a UTF-8 text file ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config file: {exc.strerror or exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError(
            f"{path}: a config must be a mapping with sections data/model/train/members, got {type(raw).__name__}"
        )
    meta = raw.pop("_meta", None)  # written by siggate train next to the config (version, commit, task)
    if not raw:  # "{}" (or a _meta alone): as an empty file, the dataclasses' defaults without a word
        raise ConfigError(f"{path}: the config holds no section; give its sections data/model/train/members (a "
                          f"built-in config such as {CONFIG_DIR / 'csv.yaml'} shows them), or leave --config out")
    if isinstance(meta, dict):  # a run's config as the user gave it (older runs saved resolved values in it)
        if meta.get("resolved") is not None and not isinstance(meta["resolved"], dict):
            raise ConfigError(f"{path}: _meta.resolved must be a mapping (a run's record writes one), got "
                              f"{type(meta['resolved']).__name__}; mend it or drop the _meta section")
        raw = split_resolved(raw, meta.get("resolved"))[0]
    # a file's flat keys are named; a run's record (with its _meta) is read as the siggate that wrote it meant it
    record = isinstance(meta, dict) and bool({"siggate_version", "git_commit"} & set(meta))  # (siggate wrote it)
    raw = upgrade_config_dict(_nest_flat_attention_keys(raw, warn=True), record=record)
    for item in overrides or []:
        given, value = parse_override(item)  # section.key or, nested, model.attention.performer.num_features
        parts = key_path(given)
        if parts != given:  # a deprecated flat name: its new one, in order
            _deprecated_flat_key(given[1], *parts[2:], stacklevel=2)
        if _names_section(parts):  # its value replaced the section: "members.svr=" reset every key of it
            raise ConfigError(f"--set {'.'.join(parts)} names a section of keys, not one key; set one of its keys, "
                              f"e.g. --set {'.'.join(parts)}.{_first_key(parts)}=...")
        node = raw
        for depth, part in enumerate(parts[:-1]):
            if node.get(part) is None:
                node[part] = {}
            if not isinstance(node[part], dict):
                where = ".".join(parts[: depth + 1])
                raise ConfigError(f"--set {item.strip()}: {where} is one value ({node[part]!r}), not a group of keys; "
                                  f"set it as --set {where}=VALUE")
            node = node[part]
        node[parts[-1]] = text_if_text(parts, item.split("=", 1)[1], value)
    return from_dict(raw)


def text_if_text(parts: list[str], text: str, parsed: Any) -> Any:
    """An override's value for a key of text (a column's name, a split, a delimiter): the text
    after ``=`` as written, where YAML read it as something else (``007`` as 7, ``0123`` as 83,
    ``column:fold #1`` as ``column:fold``, ``#`` as null); a quoted value and null as YAML reads them.
    A list of names (``data.target_cols``) given as one number is its text too (``007``, ``1e3``).
    Other keys: ``parsed``."""
    section = _section_at(parts[:-1])
    f = {f.name: f for f in fields(section)}.get(parts[-1]) if section is not None else None
    if f is not None and str(f.type) == "list" and isinstance(parsed, (int, float)) and not isinstance(parsed, bool):
        return text.strip()
    if f is None or str(f.type) not in ("str", "str | None") or parsed is None and text.strip() in YAML_NULLS:
        return parsed
    text = text.strip()
    return parsed if isinstance(parsed, str) and text[:1] in ("'", '"') else text


def _section_at(parts: list[str]):
    """The dataclass of the config section that the key path ``parts`` names
    (``["members", "svr"]`` -> :class:`~siggate.options.SVRMemberOptions`), or ``None`` when it
    names a value or nothing known."""
    cls = _section_classes().get(parts[0])
    for part in parts[1:]:
        f = {f.name: f for f in fields(cls)}.get(part) if cls is not None else None
        if f is None or f.default_factory is dataclasses.MISSING:
            return None
        default = f.default_factory()
        cls = type(default) if dataclasses.is_dataclass(default) else None
    return cls


def _names_section(parts: list[str]) -> bool:
    return len(parts) >= 2 and _section_at(parts) is not None


def _first_key(parts: list[str]) -> str:
    """The path, below the section ``parts``, of its first key that holds a value."""
    path = [*parts, fields(_section_at(parts))[0].name]
    while _section_at(path) is not None:
        path.append(fields(_section_at(path))[0].name)
    return ".".join(path[len(parts):])


def split_resolved(config: dict, resolved: dict | None) -> tuple[dict, dict]:
    """A run record's config as the user gave it and the values training resolved from the data
    (``{"model.pool_norm": x}``, see :func:`siggate.train.modelprep.resolve_pool_norm`).

    ``resolved`` is the record's own entry (the checkpoint's ``"resolved"``, ``config.yaml``'s
    ``_meta.resolved``). Records written before siggate kept the two apart (checkpoint format 1)
    have none and saved the resolved number inside the config: with ``pooling: norm`` their
    positive ``pool_norm`` moves to ``resolved`` and the config gets back its ``0`` (such a
    record does not say whether the number was given or resolved; it reads as resolved, the
    csv recipe's case)."""
    if resolved is not None:
        return config, dict(resolved)
    m = config.get("model") if isinstance(config.get("model"), dict) else {}
    if m.get("pooling") == "norm" and m.get("pool_norm"):
        return {**config, "model": {**m, "pool_norm": 0.0}}, {"model.pool_norm": m["pool_norm"]}
    return config, {}
