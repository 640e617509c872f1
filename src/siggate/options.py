"""Names of the choices a config can take, importable without torch_geometric or RDKit.

:mod:`siggate.config` validates against these tuples, and the modules that implement
the choices (:mod:`siggate.nn.attention`, :mod:`siggate.nn.layer`, :mod:`siggate.data.chem`,
:mod:`siggate.train.metrics`) import them from here, so the two never drift apart.
This module imports nothing from ``siggate``: every package may use it.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "ATTENTION_OPTIONS",
    "GPSOptions",
    "ExphormerOptions",
    "FLAT_ATTENTION_KEYS",
    "PerformerOptions",
    "ATTN_IMPLS",
    "IMPL_ENV",
    "impl_env_problem",
    "ATTN_TYPES",
    "PERFORMER_KERNELS",
    "GATE_KINDS",
    "GATE_POSITIONS",
    "LOCAL_MODEL_NAMES",
    "MOL_FEATURES",
    "MOL_FEATURE_DIMS",
    "Z_CLIP",
    "POOLING",
    "SPLITS",
    "TASK_LEVELS",
    "TASK_LOSSES",
    "HIGHER_IS_BETTER",
    "PREDICT_MAX_ATOMS",
    "LOG_FORMAT",
    "CACHE_DIR_DEFAULT",
    "DATA_ROOT_DEFAULT",
    "DUPLICATES",
    "FRAGMENTS",
    "DEFAULT_MEMBERS",
    "DEFAULT_WEIGHTS",
    "NO_INIT",
    "RECIPE_MEMBERS",
    "MEMBER_WEIGHTS",
    "member_names",
    "recipe_members",
    "run_weights",
    "MEMBER_KIND_NAMES",
    "FINGERPRINT_KINDS",
    "SVR_AVERAGEABLE",
    "FOREST_MAX_FEATURES",
    "parse_fingerprint_kinds",
    "SVRMemberOptions",
    "ForestMemberOptions",
    "EVAL_NORMS",
    "keeps_last",
    "SELECTS",
    "resolve_select",
    "parse_gate_spec",
    "gate_width",
    "grids_given",
    "parse_mol_features",
    "mol_features_dim",
    "closest_name",
    "DELIMITERS",
]

#: config keys that say where and how a run executes, not what it computes: a run may resume
#: (or a finished run count as the same run, or as the same comparison's) when only these differ
RUN_LOCAL_KEYS = ("data.root", "data.cache_dir", "train.threads")
#: ``model.gate``: no gate, one gate per head, one gate per channel.
GATE_KINDS = ("none", "headwise", "elementwise")
#: ``model.gate_position``: where the gate multiplies (attention output, values, after the projection).
GATE_POSITIONS = ("output", "value", "post")
#: ``model.impl``: attention implementations, all computing the same function
#: (:func:`siggate.nn.impl.resolve_impl` says what ``auto`` picks).
ATTN_IMPLS = ("auto", "reference", "sdpa", "packed")
#: Environment variable that replaces ``impl="auto"`` everywhere (for debugging).
IMPL_ENV = "SIGGATE_ATTN_IMPL"
#: ``model.attn_type``: the global attention of each layer (:data:`siggate.nn.attention_types.ATTENTION_TYPES`):
#: softmax over all nodes of a graph, Performer's FAVOR+ linear attention, Exphormer's sparse attention.
ATTN_TYPES = ("full", "performer", "exphormer")


def impl_env_problem() -> str | None:
    """Why ``$SIGGATE_ATTN_IMPL`` (:data:`IMPL_ENV`) cannot be used, a value not of
    :data:`ATTN_IMPLS`; None when it can or is unset. The command line checks it before any work:
    :func:`siggate.nn.impl.resolve_impl` reads it once attention runs (every row of a prediction
    failed on it, a training run left its folder)."""
    value = os.environ.get(IMPL_ENV)
    if not value or value in ATTN_IMPLS:
        return None
    return f"${IMPL_ENV}={value!r} is not an attention implementation; set it to one of {', '.join(ATTN_IMPLS)}, or unset it"


#: ``model.attention.performer.kernel``: FAVOR+'s positive random features of the softmax kernel, or
#: PyG ``PerformerAttention``'s ReLU features (:mod:`siggate.nn.performer`).
PERFORMER_KERNELS = ("softmax", "relu")


@dataclass(frozen=True)
class GPSOptions:
    """The defaults of the options that the GPS layer, its attention and the model share,
    written once: the constructors of :mod:`siggate.nn` (``GatedAttentionBase`` and its
    types, ``make_attention``, ``GPSLayer``, ``SigGateGT``, the gate of ``GatedGPSConv``) and
    the config's ``model.*`` keys of the same names (:class:`siggate.config.ModelConfig`)
    take their defaults from here. ``GatedGPSConv``'s PyG arguments (``heads``, ``dropout``
    and ``attn_kwargs["dropout"]``) keep ``torch_geometric.nn.GPSConv``'s defaults instead."""

    heads: int = 4                   # attention heads H (d_head = d / H)
    gate: str = "elementwise"        # one of GATE_KINDS
    gate_position: str = "output"    # one of GATE_POSITIONS
    gate_bias_init: float = 0.0      # initial gate bias: the gate starts near sigmoid(0) = 0.5
    gate_weight_std: float | None = None  # gate weights N(0, std^2); None: Xavier-uniform like q, k, v
    attn_dropout: float = 0.0        # dropout on the attention probabilities
    dropout: float = 0.0             # dropout after each branch of the layer and in its FFN
    impl: str = "auto"               # one of ATTN_IMPLS (siggate.nn.impl.resolve_impl)


@dataclass(frozen=True)
class PerformerOptions:
    """The ``"performer"`` attention's own options (``model.attention.performer``), read by
    :class:`siggate.config.ModelConfig` and :class:`siggate.nn.GatedPerformerAttention`."""

    num_features: int = 64        # random features per head
    redraw_interval: int = 1000   # training forward passes between feature redraws; 0: never
    kernel: str = "softmax"       # one of PERFORMER_KERNELS: "softmax" (FAVOR+) or "relu" (PyG's PerformerAttention)


@dataclass(frozen=True)
class ExphormerOptions:
    """The ``"exphormer"`` attention's own options (``model.attention.exphormer``), read by
    :class:`siggate.config.ModelConfig` and :class:`siggate.nn.GatedExphormerAttention`."""

    expander_degree_total: int = 6  # total degree of the random expander (even; 0: none): twice
                                    # Exphormer's exp_deg (its permutations), 6 is its exp_deg 3
    num_virtual_nodes: int = 1      # virtual nodes per graph
    expander_seed: int = 0          # seed of the expanders (with each graph's index and size)


#: attention type -> its options (types without options are absent)
ATTENTION_OPTIONS = {"performer": PerformerOptions, "exphormer": ExphormerOptions}
#: the flat ``model.*`` keys of older configs -> ``(type, option)`` in ``model.attention``
FLAT_ATTENTION_KEYS = {
    "performer_features": ("performer", "num_features"),
    "performer_redraw": ("performer", "redraw_interval"),
    "performer_kernel": ("performer", "kernel"),
    "expander_degree": ("exphormer", "expander_degree_total"),  # the total degree, renamed
    "expander_degree_total": ("exphormer", "expander_degree_total"),
    "expander_seed": ("exphormer", "expander_seed"),
    "virtual_nodes": ("exphormer", "num_virtual_nodes"),
}

#: ``model.local``: the message-passing branches of :data:`siggate.nn.layer.LOCAL_MODELS` (or ``"none"``).
LOCAL_MODEL_NAMES = ("gine", "gatedgcn")
#: ``model.pooling``: the sum, the mean, or the sum over a constant (:func:`siggate.nn.model.pool_graphs`).
POOLING = ("add", "mean", "norm")
#: ``model.mol_features``: molecule-level features concatenated to the pooled embedding
#: (:mod:`siggate.data.molfeatures`): none, Morgan count fingerprint, RDKit 2D descriptors.
#: Kinds can be joined with ``+`` (``morgan_count+rdkit2d``), see :func:`parse_mol_features`.
MOL_FEATURES = ("none", "morgan_count", "rdkit2d")
#: columns F of each kind (checked against the computed features by ``tests/test_molfeatures.py``).
MOL_FEATURE_DIMS = {"none": 0, "morgan_count": 2048, "rdkit2d": 217}
#: standardized descriptor values are clipped to +-this many training standard deviations: the
#: model's molecule features (a held-out molecule far outside the training range, |z| up to
#: thousands, would otherwise dominate the head) and the pretraining targets.
Z_CLIP = 6.0
#: ``data.split`` of the datasets built from SMILES (see :func:`siggate.data.chem.split_indices`).
SPLITS = ("scaffold", "scaffold_balanced", "random")
#: what one prediction is for: a whole graph (pooled), or each node (no pooling).
TASK_LEVELS = ("graph", "node")
#: task -> the ``train.loss`` values that fit it, the first being what ``"auto"`` picks.
TASK_LOSSES = {"regression": ("l1", "mse"), "binary": ("bce",), "multilabel": ("bce",),
               "multiclass": ("ce", "weighted_ce")}
#: metric name -> whether a higher value is better.
HIGHER_IS_BETTER = {"mae": False, "rocauc": True, "ap": True, "accuracy": True, "weighted_accuracy": True}
#: ``siggate predict``'s default ``--max-atoms``: larger molecules are refused (attention is
#: quadratic); training on a CSV warns about molecules above it.
PREDICT_MAX_ATOMS = 1000
#: where the benchmark data root is looked for without --data-root (siggate.data.base.default_data_root),
#: in the words of the command line's help
DATA_ROOT_DEFAULT = "$SIGGATE_DATA, else ../shared/data beside a checkout of siggate"
#: where processed data are cached when no ``--cache-dir`` is given (``data.base.default_cache_dir``)
CACHE_DIR_DEFAULT = "$SIGGATE_CACHE, else ~/.cache/siggate"
#: ``data.duplicates`` (``--duplicates``): what a CSV's repeated molecules become: kept as
#: separate rows, merged into one row with their mean label (regression), or the first row kept.
DUPLICATES = ("keep", "average", "first")
#: ``data.fragments`` (``--fragments``): what a model reads of a molecule: ``all`` of it, as written
#: (counterions included), or its ``parent``, the largest carbon fragment neutralized where it has
#: one (a salt and its free base become one molecule), in training and in ``siggate predict`` alike
#: (:func:`siggate.data.chem.read_molecule`)
FRAGMENTS = ("all", "parent")
#: ``train.init`` (``--init``) for "from scratch", also where a recipe names weights to start from;
#: the config stores it as ``""`` (:meth:`siggate.config.Config.validate`)
NO_INIT = "none"


SHIPPED_INIT = "pretrained"


def init_is_none(text: str) -> bool:
    """``train.init`` says "from scratch": empty, or ``none`` in any case."""
    return text.strip().lower() in ("", NO_INIT)


def shipped_init_name(text: str) -> str | None:
    """The name of the shipped weights ``train.init`` = ``text`` names (``pretrained`` is
    ``default``, ``pretrained:NAME`` is ``NAME``), or None where it names none (a path, or
    ``none``). The word ``pretrained`` is read in any case, as ``none`` is (:func:`init_is_none`):
    ``--init Pretrained`` is the shipped weights, not a file of that name; NAME, a file's
    name, is kept as given."""
    word, colon, name = text.strip().partition(":")
    if word.lower() != SHIPPED_INIT:
        return None
    return name if colon else "default"


def init_is_shipped(text: str) -> bool:
    """``train.init`` names weights shipped in the package (``pretrained`` or ``pretrained:NAME``, the
    word in any case; :func:`shipped_init_name`), not a path."""
    return shipped_init_name(text) is not None
#: ``siggate train --members``: the kinds of member a run can hold, with what each is, for the help
#: (the kinds of :data:`siggate.train.members.MEMBER_KINDS`; a test keeps the two equal)
MEMBER_KIND_NAMES = {"gnn": "the gated graph transformer", "svr": "MinMax-kernel SVR on five count fingerprints",
                     "rf": "random forest on count Morgan fingerprints"}
#: the members of a run and how several combine (``siggate train --members``/``--weights``, the
#: scikit-learn estimators' ``members=``/``weights=``) when none are named: by recipe (the config's
#: name, :func:`recipe_members`), else the GNN alone. ``csv`` is ``siggate train --data``'s recipe
#: and the estimators'.
DEFAULT_MEMBERS, DEFAULT_WEIGHTS = "gnn", "equal"
RECIPE_MEMBERS = {"csv": ("gnn,svr,rf", "val")}
#: ``--weights``: equal weights, or non-negative weights summing to one fitted on the validation split
MEMBER_WEIGHTS = ("equal", "val")
#: the kinds of count fingerprint (:func:`siggate.data.fingerprints.count_fingerprints`), joined by
#: ``+`` where a kernel averages several (:func:`parse_fingerprint_kinds`)
FINGERPRINT_KINDS = ("morgan", "atompair", "torsion", "fmorgan", "path")
#: the fields of :class:`SVRMemberOptions` that a fit can average over rather than choose among:
#: they change the fit, not the kernel, so the mean of the models is one model on the same kernel
SVR_AVERAGEABLE = ("C", "epsilon")
#: a forest's ``max_features`` given by name rather than as a fraction of the features
FOREST_MAX_FEATURES = ("sqrt", "log2")


def parse_fingerprint_kinds(fingerprint: str | Sequence[str]) -> tuple[str, ...]:
    """The kinds named by a fingerprint string (``"morgan+atompair"``) or a sequence of kinds.

    Raises:
        ValueError: an unknown or repeated kind, or none.
    """
    kinds = tuple(k.strip() for k in fingerprint.split("+")) if isinstance(fingerprint, str) else tuple(fingerprint)
    bad = [k for k in kinds if k not in FINGERPRINT_KINDS]
    if bad or not kinds or len(set(kinds)) != len(kinds):
        raise ValueError(f"fingerprint {fingerprint!r}: give distinct kinds among {', '.join(FINGERPRINT_KINDS)} "
                         "joined by '+' (e.g. 'morgan+atompair+torsion')")
    return kinds


@dataclass(frozen=True)
class SVRMemberOptions:
    """The ``svr`` member's options (``members.svr``; ``--set members.svr.C=1,5,20``), read by
    :class:`siggate.config.MembersConfig` and :mod:`siggate.predictors.svr` (its grid's and
    :class:`~siggate.predictors.svr.KernelSVR`'s defaults, whose docstrings say why these).

    The tuples are a grid searched on the validation split, except the fields named in
    ``average`` (of :data:`SVR_AVERAGEABLE`), whose values the fit averages over."""

    fingerprint: tuple[str, ...] = ("morgan+atompair+torsion+fmorgan+path",)  # kernels averaged, kinds joined by +
    radius: tuple[int, ...] = (2, 3)          # Morgan radii
    size: tuple[int, ...] = (2048,)           # bins each kind is folded into
    C: tuple[float, ...] = (5.0, 20.0)        # penalty weights (larger: less regularization)
    epsilon: tuple[float, ...] = (0.05,)      # SVR tube half-widths, standardized target units
    average: tuple[str, ...] = ("C",)         # fields averaged over instead of chosen; () chooses all
    exact_max: int = 5000                     # most train+val rows (refit's) on the exact kernel; above: Nystrom
    landmarks: int = 2000                     # Nystrom landmarks above exact_max

    def check(self) -> None:
        """The one home of these options' rules (the config prefixes ``members.svr.``, the
        member's constructor takes them as they are): each grid field with at least one value,
        every value in range, each kernel once, ``average`` among :data:`SVR_AVERAGEABLE`.

        Raises:
            ValueError: ``"<field>: <why>"``.
        """
        grids_given(self, ("fingerprint", "radius", "size", "C", "epsilon"))
        kernels = []
        for f in self.fingerprint:
            try:
                kernels.append(frozenset(parse_fingerprint_kinds(f)))
            except ValueError as e:
                raise ValueError(f"fingerprint: {e}") from None
        if len(set(kernels)) != len(kernels):  # the mean of the kinds' kernels does not depend on their order
            raise ValueError(f"fingerprint: {list(self.fingerprint)} names one kernel twice (the same kinds in "
                             "another order); list each once")
        _in_range("radius", self.radius, lambda v: v >= 0, ">= 0")
        _in_range("size", self.size, lambda v: 1 <= v <= FP_SIZE_MAX, f"1 to {FP_SIZE_MAX}")
        _in_range("C", self.C, lambda v: v > 0, "> 0")
        _in_range("epsilon", self.epsilon, lambda v: v >= 0, ">= 0")
        _in_range("exact_max", (self.exact_max,), lambda v: v >= 1, ">= 1")
        _in_range("landmarks", (self.landmarks,), lambda v: v >= 1, ">= 1")
        bad = [a for a in self.average if a not in SVR_AVERAGEABLE]
        if bad:
            hint = closest_name(bad[0], SVR_AVERAGEABLE)
            raise ValueError(f"average: {bad[0]!r} is not allowed. Allowed values: {', '.join(SVR_AVERAGEABLE)} (the "
                             "options that keep the kernel), or empty to choose every option on the validation split."
                             + (f" Did you mean {hint!r}?" if hint else ""))


@dataclass(frozen=True)
class ForestMemberOptions:
    """The ``rf`` member's options (``members.rf``), read by :class:`siggate.config.MembersConfig`
    and :class:`siggate.predictors.forest.RandomForest` (its defaults; its docstring says why)."""

    n_estimators: int = 100                     # trees per forest
    radius: int = 2                             # Morgan radius of the count fingerprints
    size: int = 2048                            # fingerprint bins
    max_features: tuple[float | str, ...] = (0.3,)  # chosen on val: fractions in (0, 1], or sqrt / log2

    def check(self) -> None:
        """The one home of these options' rules (see :meth:`SVRMemberOptions.check`).

        Raises:
            ValueError: ``"<field>: <why>"``.
        """
        _in_range("n_estimators", (self.n_estimators,), lambda v: v >= 1, ">= 1")
        _in_range("radius", (self.radius,), lambda v: v >= 0, ">= 0")
        _in_range("size", (self.size,), lambda v: 1 <= v <= FP_SIZE_MAX, f"1 to {FP_SIZE_MAX}")
        grids_given(self, ("max_features",))
        _in_range("max_features", self.max_features,
                  lambda v: v in FOREST_MAX_FEATURES if isinstance(v, str) else not isinstance(v, bool) and 0 < v <= 1,
                  f"fractions in (0, 1] or {' / '.join(FOREST_MAX_FEATURES)}")


def grids_given(options, names: Sequence[str]) -> None:
    """Each grid field of ``options`` in ``names`` holds at least one value (ValueError naming it)."""
    for name in names:
        if not getattr(options, name):
            raise ValueError(f"{name}: give at least one value (a list is a grid chosen on the validation split)")


#: the format of siggate's log lines on the terminal: the command line's, and a verbose estimator's
LOG_FORMAT = "%(levelname)s %(name)s: %(message)s"

#: the largest seed (NumPy's generators take 0 to 2**32 - 1): ``train.seed``, ``data.seed``, the
#: estimators' ``random_state``, and the last GNN member's seed of ``--ensemble N`` (seed + N - 1)
SEED_MAX = 2**32 - 1

#: the most bins a fingerprint member's count fingerprint may have (2,048 by default; a
#: molecule's dense counts are this many numbers): a stored size of 10**12 loaded and failed every row
FP_SIZE_MAX = 1 << 20


def _in_range(name: str, values, ok, allowed: str) -> None:
    """Every value of the field ``name`` passes ``ok`` (ValueError naming the first that does not)."""
    for v in values:
        try:
            good = ok(v)
        except TypeError:  # not a number (a constructor's argument: the config checks the types first)
            good = False
        if not good:
            raise ValueError(f"{name}: {v!r} is out of range; allowed values: {allowed}.")


#: ``train.eval_norm``: the BatchNorm statistics an evaluation uses: the running averages that
#: training keeps (PyTorch's, momentum 0.1), or recomputed on the training set first
#: (:func:`siggate.train.bn_stats.recompute_bn_stats`).
EVAL_NORMS = ("running", "train")
#: ``train.select``: the epoch whose weights ``best.pt`` keeps: the best validation metric, or the
#: schedule's last (the validation split then chooses nothing and stays out of sample); ``auto``
#: (the default) is ``last`` for a GNN member whose validation predictions weigh a combination
#: (``--weights val`` with other members) and ``best`` otherwise (:func:`resolve_select`)
SELECTS = ("auto", "best", "last")


def member_names(text: str | Sequence[str]) -> list[str]:
    """``"gnn, svr,gnn"`` (or a list) as the distinct names it gives, in order (unchecked:
    :func:`siggate.train.members.parse_kinds` checks them against the known kinds)."""
    return list(dict.fromkeys(k.strip() for k in (text.split(",") if isinstance(text, str) else text) if k.strip()))


def recipe_members(recipe: str | None, members: str | Sequence[str] | None = None) -> tuple[str | Sequence[str], str]:
    """``(members, weights)`` a run of the config ``recipe`` holds when ``--weights`` is not given:
    the recipe's (:data:`RECIPE_MEMBERS`, else the GNN alone with equal weights); given ``members``
    (``--members``) replace the recipe's members and keep its weights. What a run of one kind
    then combines with is :func:`run_weights`'s."""
    own_members, weights = RECIPE_MEMBERS.get(recipe or "", (DEFAULT_MEMBERS, DEFAULT_WEIGHTS))
    return (own_members if members is None else members), weights


def run_weights(kinds: str | Sequence[str], weights: str | None) -> str:
    """The weights a run of the member ``kinds`` combines with when asked for ``weights``:
    ``"val"`` only when it holds several kinds. Copies of one kind (``--members gnn --ensemble 3``)
    average equally: the validation rows weigh kinds, never seeds
    (:class:`~siggate.predictors.combine.Combination`), so they choose nothing among the copies,
    and the GNN copies keep their best validation epoch (:func:`resolve_select`).
    ``None`` is ``"equal"``.

    Raises:
        ValueError: ``weights`` is not one of :data:`MEMBER_WEIGHTS` (or ``None``).
    """
    if weights is not None and weights not in MEMBER_WEIGHTS:
        raise ValueError(f"weights={weights!r}: choose from {', '.join(map(repr, MEMBER_WEIGHTS))}")
    return "val" if weights == "val" and len(member_names(kinds)) > 1 else DEFAULT_WEIGHTS


def resolve_select(select: str, weighs_on_val: bool) -> str:
    """``train.select`` made concrete (``best`` or ``last``): ``auto`` is ``last`` when the
    member's validation predictions fit a combination's weights (a best-of-val epoch would make
    them in-sample and overweight it), else ``best``; ``best``/``last`` stay as given."""
    if select == "auto":
        return "last" if weighs_on_val else "best"
    return select


def keeps_last(select: str) -> bool:
    """Whether a training run of ``train.select`` = ``select`` keeps its schedule's last epoch
    (``last``; ``auto`` is ``best`` for a run on its own, :func:`resolve_select`): its validation
    scores then choose nothing, which the loop's best-epoch tracking,
    :func:`~siggate.train.bn_stats.epoch_norm` and ``siggate compare``'s report all read from here."""
    return resolve_select(select, weighs_on_val=False) == "last"


def gate_width(gate: str, dim: int, heads: int) -> int:
    """The gate logits one node gets from the attention's input projection: none, one per head
    (``headwise``) or one per channel (``elementwise``); the gate's parameters per layer are
    ``(dim + 1) * gate_width`` (a weight row per logit from the ``dim`` inputs, and a bias)."""
    widths = {"none": 0, "headwise": heads, "elementwise": dim}
    if gate not in widths:
        raise ValueError(f"unknown gate {gate!r}; choose from {', '.join(GATE_KINDS)}")
    return widths[gate]


def parse_gate_spec(text: str) -> tuple[str, str | None]:
    """``"elementwise@value"`` -> ``("elementwise", "value")``; ``"none"`` -> ``("none", None)``.

    Only splits the text; callers check the names against :data:`GATE_KINDS` and
    :data:`GATE_POSITIONS` (``siggate compare`` also accepts ``none@matched-ffn``).
    """
    gate, _, position = str(text).strip().partition("@")
    return gate, (position or None)


def add_progress_flag(p) -> None:
    """``--progress/--no-progress``: progress bars; by default on only when stderr is a
    terminal, so logs piped to a file stay one line per event."""
    import argparse

    p.add_argument("--progress", dest="progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bars (default: on when the output is a terminal)")


def add_data_root_flag(p, what: str = "", default: str | None = None) -> None:
    """``--data-root``: the benchmark data root (``what`` says which files are read there), by
    default :data:`DATA_ROOT_DEFAULT` (``default``: what this command looks at before it)."""
    text = "benchmark data root" + (f", for {what}" if what else "")
    first = f"{default}, or " if default else ""
    p.add_argument("--data-root", default=None, type=os.path.expanduser,  # (--data-root=~/d: the shell left the ~)
                   help=f"{text} (default: {first}{DATA_ROOT_DEFAULT})")


def add_cache_dir_flag(p, what: str = "", default: str | None = None) -> None:
    """``--cache-dir``: the writable cache for processed data (``what``: where this command uses
    it), by default :data:`CACHE_DIR_DEFAULT` (``default``: what this command looks at before it)."""
    text = "writable cache for processed data" + (f", for {what}" if what else "")
    first = f"{default}, or " if default else ""
    p.add_argument("--cache-dir", default=None, type=os.path.expanduser,  # (--cache-dir=~/c: the shell left the ~)
                   help=f"{text} (default: {first}{CACHE_DIR_DEFAULT})")


def progress_enabled(args) -> bool:
    """Whether to draw progress bars for parsed :func:`add_progress_flag` arguments."""
    import sys

    value = getattr(args, "progress", None)
    return sys.stderr.isatty() if value is None else bool(value)


def parse_mol_features(text: str) -> tuple[str, ...]:
    """``"none"`` -> ``()``; ``"rdkit2d"`` -> ``("rdkit2d",)``; ``"morgan_count+rdkit2d"`` ->
    ``("morgan_count", "rdkit2d")`` (the order of the concatenated columns).

    Raises:
        ValueError: naming the unknown or repeated part and the allowed names.
    """
    text = str(text).strip()
    if text == "none":
        return ()
    parts = tuple(p.strip() for p in text.split("+"))
    allowed = [k for k in MOL_FEATURES if k != "none"]
    for p in parts:
        if p not in allowed:
            raise ValueError(f"unknown molecule feature {p!r} in {text!r}; choose 'none' or one or more of "
                             f"{allowed} joined with '+'")
    if len(set(parts)) != len(parts):
        raise ValueError(f"molecule feature kinds repeat in {text!r}; name each once")
    return parts


def mol_features_dim(text: str) -> int:
    """F of ``model.mol_features`` (``"none"`` -> 0, ``"morgan_count+rdkit2d"`` -> 2265)."""
    return sum(MOL_FEATURE_DIMS[k] for k in parse_mol_features(text))


#: the field delimiters a CSV may use: guessed by ``siggate train``/``evaluate`` (``csvdata.detect_sep``) and by
#: ``predict``/``explain`` from the header that names the SMILES column
DELIMITERS = (",", ";", "\t", "|")


def closest_name(name: str, options: Sequence[str], cutoff: float = 0.6) -> str | None:
    """The option a user probably meant by the unknown ``name``: one that differs only in case,
    else the closest spelling (:func:`difflib.get_close_matches` at ``cutoff``), else None. The one
    rule behind every "Did you mean" of a key, a choice or a CSV column."""
    same_case = [o for o in options if o.lower() == str(name).lower()]
    if same_case:
        return same_case[0]
    close = difflib.get_close_matches(str(name), list(options), n=1, cutoff=cutoff)
    return close[0] if close else None


def counted(n: int, one: str, many: str | None = None) -> str:
    """``n`` with the words that agree with it: ``counted(1, "row holds", "rows hold")`` is ``"1 row
    holds"``, ``counted(3, "molecule")`` is ``"3 molecules"`` (``many``: ``one`` + "s" unless given)."""
    return f"{n} {one if n == 1 else many if many is not None else one + 's'}"
