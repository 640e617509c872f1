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

Positional encodings, when asked for, are added by :mod:`siggate.data.pe`:
``rwse`` ``[N, k]``, ``lap_vec`` ``[N, m]`` and ``lap_val`` ``[N, m]`` (NaN-padded
where a graph has fewer than ``m`` nodes).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..options import HIGHER_IS_BETTER

TASK_TYPES = ("regression", "binary", "multilabel")
#: metric name -> higher_is_better (one table for the package: :data:`siggate.options.HIGHER_IS_BETTER`)
METRICS = HIGHER_IS_BETTER


class DataError(ValueError):
    """Source data that is missing, truncated or corrupt; the message names the file."""


@dataclass
class TaskInfo:
    """What a dataset predicts and how it is scored.

    Args:
        name: registry name (``"nci5k"``, ``"zinc"``, ...).
        task: ``"regression"``, ``"binary"`` or ``"multilabel"``.
        num_tasks: number of targets ``T``.
        metric: ``"mae"``, ``"rocauc"`` or ``"ap"``.
        node_features: ``"ogb"`` (9 OGB atom columns) or ``"typed"`` (one type column).
        num_node_types: number of node types when ``node_features="typed"``.
        num_edge_types: number of edge types when ``node_features="typed"``.
        target_names: one name per target.
    """

    name: str
    task: str
    num_tasks: int
    metric: str
    node_features: str = "ogb"
    num_node_types: int = 0
    num_edge_types: int = 0
    target_names: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.task not in TASK_TYPES:
            raise ValueError(f"task must be one of {TASK_TYPES}, got {self.task!r}")
        if self.metric not in METRICS:
            raise ValueError(f"metric must be one of {sorted(METRICS)}, got {self.metric!r}")
        if not self.target_names:
            self.target_names = ["y"] if self.num_tasks == 1 else [f"y{i}" for i in range(self.num_tasks)]

    @property
    def higher_is_better(self) -> bool:
        return METRICS[self.metric]

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class InvalidRow:
    """A source row that could not become a graph, with RDKit's reason."""

    index: int
    smiles: str
    reason: str


@dataclass
class GraphDataset:
    """A dataset split into ``train``/``val``/``test`` lists of ``Data``."""

    info: TaskInfo
    splits: dict
    invalid: list = field(default_factory=list)
    source: str = ""

    @property
    def train(self):
        return self.splits["train"]

    @property
    def val(self):
        return self.splits["val"]

    @property
    def test(self):
        return self.splits["test"]

    def sizes(self) -> dict:
        return {k: len(v) for k, v in self.splits.items()}


def default_cache_dir() -> Path:
    """Writable cache root: ``$SIGGATE_CACHE`` or ``~/.cache/siggate``."""
    env = os.environ.get("SIGGATE_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "siggate"


def default_data_root() -> Path | None:
    """Data root: ``$SIGGATE_DATA``, else ``../shared/data`` next to the checkout if present."""
    env = os.environ.get("SIGGATE_DATA")
    if env:
        return Path(env)
    here = Path(__file__).resolve()
    for parent in here.parents:
        cand = parent.parent / "shared" / "data"
        if (parent / "pyproject.toml").exists() and cand.is_dir():
            return cand
    return None
