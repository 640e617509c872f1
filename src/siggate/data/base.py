"""Data contract shared by every dataset loader.

Every loader returns a :class:`GraphDataset`: three lists of PyG ``Data`` objects
plus a :class:`TaskInfo` that tells the model and the trainer what they hold.

Each graph ``Data`` carries:

* ``x``: ``LongTensor [N, 9]`` OGB atom features (``node_features="ogb"``) or
  ``LongTensor [N, 1]`` integer atom types (``node_features="typed"``);
* ``edge_index``: ``LongTensor [2, E]`` (both directions of every bond);
* ``edge_attr``: ``LongTensor [E, 3]`` OGB bond features or ``LongTensor [E, 1]`` types;
* ``y``: ``FloatTensor [1, T]`` targets, ``NaN`` where a label is missing;
* ``smiles`` (optional, ``str``) and ``idx`` (``int``, row in the source).

Node-level datasets (``TaskInfo.level == "node"``) carry one label per node instead:
``y`` ``LongTensor [N]`` class ids (``task="multiclass"``) or ``FloatTensor [N, T]``
(``task="regression"``). Their ``x`` may be ``LongTensor [N, 1]`` types (``"typed"``) or
``FloatTensor [N, F]`` (``node_features="dense"``), and ``edge_attr`` may be absent (the
model then gives every edge one learned type, GraphGPS's ``DummyEdge``). A *transductive*
dataset is one graph whose nodes are split by boolean ``train_mask``/``val_mask``/``test_mask``
``[N]``: its three splits hold that same graph, and each split scores the nodes of its mask.

Positional encodings, when asked for, are added by :mod:`siggate.data.pe`:
``rwse`` ``[N, k]``, ``lap_vec`` ``[N, m]`` and ``lap_val`` ``[N, m]`` (NaN-padded
where a graph has fewer than ``m`` nodes).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..options import DATA_ROOT_DEFAULT, HIGHER_IS_BETTER, TASK_LEVELS

TASK_TYPES = ("regression", "binary", "multilabel", "multiclass")
NODE_FEATURES = ("ogb", "typed", "dense")
#: what the OGB atom features' chirality column holds (:func:`siggate.data.chem.mol_to_graph`): ``"tag"``
#: RDKit's clockwise/anticlockwise tag, relative to the atom's neighbours in the order the SMILES
#: wrote them (OGB's, so one molecule spelled two ways could read as its enantiomer); ``"cip"`` its
#: CIP label (R, S), the same however the molecule is written
ATOM_CHIRALITY = ("tag", "cip")
#: each reading of :data:`ATOM_CHIRALITY` in words, as messages name it
CHIRALITY_WORDS = {"tag": "RDKit's tag (CW/CCW, in the order a SMILES wrote the neighbours)",
                   "cip": "their CIP label (R/S)"}
#: what a user CSV's runs read (``siggate train --data``, the estimators, the pretraining corpus)
CSV_CHIRALITY = "cip"
#: a CSV run's keys of the molecules it fitted (:func:`siggate.data.csvdata.fitted_molecules`), beside its ``splits.csv``
FITTED_FILE = "fitted_molecules.json"
#: metric name -> higher_is_better (one table for the package: :data:`siggate.options.HIGHER_IS_BETTER`)
METRICS = HIGHER_IS_BETTER


class DataError(ValueError):
    """Source data that is missing, truncated or corrupt; the message names the file."""


@dataclass
class TaskInfo:
    """What a dataset predicts and how it is scored.

    Args:
        name: registry name (``"nci5k"``, ``"zinc"``, ...).
        task: ``"regression"``, ``"binary"``, ``"multilabel"`` or ``"multiclass"`` (one class
            id per graph or node, ``num_classes`` logits).
        num_tasks: number of targets ``T`` (``1`` for ``"multiclass"``).
        metric: a key of :data:`siggate.options.HIGHER_IS_BETTER` (``"mae"``, ``"rocauc"``,
            ``"ap"``, ``"accuracy"``, ``"weighted_accuracy"``).
        node_features: ``"ogb"`` (9 OGB atom columns), ``"typed"`` (one type column) or
            ``"dense"`` (``num_node_features`` float columns).
        num_node_types: number of node types when ``node_features="typed"``.
        num_edge_types: number of edge types when ``node_features`` is not ``"ogb"``.
        target_names: one name per target.
        level: ``"graph"`` (one prediction per graph, pooled) or ``"node"`` (one per node).
        transductive: one graph split by ``train_mask``/``val_mask``/``test_mask``.
        num_classes: classes of a ``"multiclass"`` task (``0`` otherwise).
        num_node_features: float feature columns when ``node_features="dense"``.
        chirality: what the ``"ogb"`` atom features' chirality column holds (:data:`ATOM_CHIRALITY`):
            ``"tag"`` for the OGB datasets (and runs recorded before it was kept), ``"cip"`` for
            CSV data, so that ``siggate predict`` reads a run's molecules as it was trained.
    """

    name: str
    task: str
    num_tasks: int
    metric: str
    node_features: str = "ogb"
    num_node_types: int = 0
    num_edge_types: int = 0
    target_names: list[str] = field(default_factory=list)
    level: str = "graph"
    transductive: bool = False
    num_classes: int = 0
    num_node_features: int = 0
    chirality: str = "tag"

    def __post_init__(self) -> None:
        if self.task not in TASK_TYPES:
            raise ValueError(f"task must be one of {TASK_TYPES}, got {self.task!r}")
        if self.metric not in METRICS:
            raise ValueError(f"metric must be one of {sorted(METRICS)}, got {self.metric!r}")
        if self.level not in TASK_LEVELS:
            raise ValueError(f"level must be one of {TASK_LEVELS}, got {self.level!r}")
        if self.node_features not in NODE_FEATURES:
            raise ValueError(f"node_features must be one of {NODE_FEATURES}, got {self.node_features!r}")
        if self.chirality not in ATOM_CHIRALITY:
            raise ValueError(f"chirality must be one of {ATOM_CHIRALITY}, got {self.chirality!r}")
        if (self.task == "multiclass") != (self.num_classes >= 2):
            raise ValueError(f"num_classes must be >= 2 for a multiclass task and 0 otherwise, got "
                             f"{self.num_classes} for task {self.task!r}")
        if self.transductive and self.level != "node":
            raise ValueError("a transductive dataset (one graph split by node masks) must have level 'node'")
        if not self.target_names:
            self.target_names = ["y"] if self.num_tasks == 1 else [f"y{i}" for i in range(self.num_tasks)]

    @property
    def higher_is_better(self) -> bool:
        return METRICS[self.metric]

    @property
    def num_outputs(self) -> int:
        """Model outputs per graph or node: ``num_classes`` logits for ``"multiclass"``,
        else one per target."""
        return self.num_classes if self.task == "multiclass" else self.num_tasks

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class InvalidRow:
    """A source row that could not become a graph, with RDKit's reason; ``line``: where the row
    starts in its file (blank lines counted), where a CSV reader knew it."""

    index: int
    smiles: str
    reason: str
    line: int | None = field(default=None, compare=False)
    read_as: str = field(default="", compare=False)  # a parsed row's SMILES as read (a salt's parent), where it differs

    @property
    def file_line(self) -> int:
        """The row's line in its file: ``line``, else ``index + 2`` (a header, no blank line)."""
        return self.line if self.line is not None else self.index + 2


@dataclass
class RowNote:
    """A source row that was kept (or merged) but deserves a look: ``issue`` names the kind
    (``"conflicting duplicate"``, ``"large molecule"``, ...), ``detail`` says what was found."""

    index: int
    smiles: str
    issue: str
    detail: str


@dataclass
class GraphDataset:
    """A dataset split into ``train``/``val``/``test`` lists of ``Data``; ``stats``: what a
    generated dataset's draw realised, next to the published figures (written to each run's
    ``metrics.json`` as ``dataset_stats``; empty for the others); ``notes``: :class:`RowNote`
    rows of a user's CSV that were used but look suspicious (duplicates, large molecules);
    ``rows``: the source's data rows (0 when unknown)."""

    info: TaskInfo
    splits: dict
    invalid: list = field(default_factory=list)
    source: str = ""
    stats: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)
    rows: int = 0

    @property
    def train(self):
        return self.splits["train"]

    @property
    def val(self):
        return self.splits["val"]

    @property
    def test(self):
        return self.splits["test"]

    def first(self, n: int) -> "GraphDataset":
        """A shallow copy whose every split holds its first ``n`` graphs (``data.max_graphs``:
        quick runs and tests, ``siggate data verify --max-graphs``); ``self`` for ``n`` 0 or None."""
        if not n:
            return self
        import copy

        cut = copy.copy(self)
        cut.splits = {k: list(v[:n]) for k, v in self.splits.items()}
        return cut

    def sizes(self) -> dict:
        """Graphs per split (``1`` each for a transductive dataset)."""
        return {k: len(v) for k, v in self.splits.items()}

    def node_counts(self) -> dict:
        """Nodes per split: all nodes of the split's graphs, or of its mask for a
        transductive dataset."""
        if self.info.transductive:
            return {k: int(sum(int(g[f"{k}_mask"].sum()) for g in v)) for k, v in self.splits.items()}
        return {k: int(sum(int(g.num_nodes) for g in v)) for k, v in self.splits.items()}


def split_mask(data, info: TaskInfo, split: str | None):
    """Boolean ``[N]`` mask of the nodes ``split`` scores in a transductive dataset (from
    ``data``, one graph or a PyG batch); ``None`` for every other dataset."""
    if not info.transductive:
        return None
    if split is None:
        raise ValueError(f"{info.name} is one graph split by node masks: name the split whose mask to use")
    return data[f"{split}_mask"]


def label_rows(data, info: TaskInfo, split: str | None = None):
    """The labels of ``data`` (one graph or a PyG batch), one row per prediction: ``[G, T]``
    for a graph-level task, ``[N, T]`` per node, and class ids ``[G]``/``[N]`` for
    ``"multiclass"``; for a transductive dataset only the rows of ``split``'s mask."""
    y = data.y.reshape(-1) if info.task == "multiclass" else data.y.reshape(-1, info.num_tasks)
    mask = split_mask(data, info, split)
    return y if mask is None else y[mask]


def stacked_labels(graphs, info: TaskInfo, split: str | None = None):
    """The :func:`label_rows` of ``graphs`` (a non-empty sequence) as one tensor: ``[rows, T]``
    (``[rows]`` for ``"multiclass"``), the rows ``split`` scores."""
    import torch

    return torch.cat([label_rows(g, info, split) for g in graphs])


def one_class_split(ds: "GraphDataset", splits=("train", "val", "test")) -> tuple[str, int] | None:
    """The first of ``splits`` of a binary or multilabel ``ds`` in which no target holds both
    classes (0 and 1), so that its ROC-AUC or average precision is undefined, with its row count;
    ``None`` when each non-empty split has such a target (or the task is another)."""
    info = ds.info
    if info.task not in ("binary", "multilabel"):
        return None
    for split in splits:
        graphs = ds.splits.get(split) or []
        if not len(graphs):
            continue
        y = stacked_labels(graphs, info, split).reshape(-1, info.num_tasks)
        if not bool(((y == 1).any(0) & (y == 0).any(0)).any()):
            return split, int(y.shape[0])
    return None


def checked_data_root(root) -> Path | None:
    """The data root a command reads: ``root`` (``--data-root``) when given, else
    :func:`default_data_root`. A given folder, or a ``$SIGGATE_DATA``, that does not exist is
    refused (:class:`DataError`): a misspelt root otherwise reads as "no benchmark here", which
    ``bench`` answers with other graphs and ``pretrain`` with test molecules left in its corpus."""
    env = os.environ.get("SIGGATE_DATA")
    path = Path(root) if root else default_data_root()
    if root and not path.is_dir():
        raise DataError(f"--data-root {root}: no such folder; give the folder that holds the benchmark data, or leave "
                        f"the flag out (default: {DATA_ROOT_DEFAULT})")
    if not root and env and not path.is_dir():
        raise DataError(f"$SIGGATE_DATA={env}: no such folder; point it at the folder that holds the benchmark data, "
                        "or unset it (then ../shared/data beside a checkout of siggate)")
    return path


def default_cache_dir() -> Path:
    """Writable cache root: ``$SIGGATE_CACHE`` or ``~/.cache/siggate``."""
    env = os.environ.get("SIGGATE_CACHE")
    return Path(os.path.expanduser(env)) if env else Path.home() / ".cache" / "siggate"


def cache_root(cache_dir: str | os.PathLike | None) -> Path:
    """The cache root a loader writes: ``cache_dir`` (``--cache-dir``, ``data.cache_dir``) when
    given, else :func:`default_cache_dir`; a leading ``~`` the shell left (``--cache-dir=~/c``,
    ``SIGGATE_CACHE='~/c'``) is the home folder, not a folder named ``~`` here."""
    return Path(os.path.expanduser(cache_dir)) if cache_dir else default_cache_dir()


def default_data_root() -> Path | None:
    """Data root: ``$SIGGATE_DATA``, else ``../shared/data`` next to the checkout if present
    (:data:`siggate.options.DATA_ROOT_DEFAULT` says so in the help)."""
    env = os.environ.get("SIGGATE_DATA")
    if env:
        return Path(os.path.expanduser(env))  # (SIGGATE_DATA='~/data': quoted, the shell left the ~)
    here = Path(__file__).resolve()
    for parent in here.parents:
        cand = parent.parent / "shared" / "data"
        if (parent / "pyproject.toml").exists() and cand.is_dir():
            return cand
    return None
