"""PATTERN and CLUSTER, regenerated: the node-classification benchmarks of Dwivedi et al.,
"Benchmarking Graph Neural Networks" (https://arxiv.org/abs/2003.00982), drawn here from
their stochastic-block-model recipe instead of downloaded.

The recipe is the one of the benchmark's generation notebooks
(``benchmarking-gnns/data/SBMs/generate_SBM_PATTERN.ipynb`` and
``generate_SBM_CLUSTER.ipynb``, the configuration their saved outputs print):

* **PATTERN** (:data:`PATTERN`): 5 communities, each of ``randint(5, 35)`` nodes (5..34), edge
  probability ``p = 0.5`` inside a community and ``q = 0.35`` between two; node features drawn
  uniformly from ``{0, 1, 2}``. 100 patterns are drawn once, each of ``randint(5, 35)`` nodes
  with internal edge probability 0.5 and its own fixed features in ``{0, 1, 2}`` (the
  notebook's "v2"; its paper text says 20 nodes, the "v1" of the notebook). Every graph plants
  one pattern, each pattern node linked to each community node with probability
  ``q_pattern = 0.5``; nodes are then shuffled. Label 1 for the pattern's nodes, 0 otherwise.
  Each pattern gives 100 train, 20 val and 20 test graphs: 10,000/2,000/2,000.
* **CLUSTER** (:data:`CLUSTER`): 6 communities of ``randint(5, 35)`` nodes, ``p = 0.55``,
  ``q = 0.25``; nodes shuffled; in each community one node chosen at random has feature
  ``community + 1``, all others 0; label = community (0..5). 10,000/1,000/1,000 graphs.

Randomness: graph ``i`` of a split draws from its own generator, seeded by ``(seed, dataset,
split, i)`` (and pattern ``k`` by ``(seed, dataset, "pattern", k)``), so a dataset is a pure
function of ``seed`` (the config's ``data.seed``), the first ``n`` graphs of a split are the
same whatever ``n`` (``max_graphs``), and graphs could be drawn in any order. The benchmark's
notebook drew the train graphs pattern by pattern; here graph ``i`` of a split plants pattern
``i % 100``, so that any prefix of a split mixes patterns.

A regeneration is a new draw of the recipe, not the released dataset. PATTERN's 100 patterns
are drawn once per dataset, so their sizes (and with them the graphs' sizes and the share of
pattern nodes) are a property of the draw: seed 0 gives about 115.3 nodes, 5,686 directed
edges and 15.6% pattern nodes per graph, where the released files have about 118.9 nodes,
6,099 edges and 18%. Results on a regeneration are therefore not like-for-like with published
PATTERN or CLUSTER numbers. Each loaded dataset states its draw in ``GraphDataset.stats``
(:func:`realised_stats`: the realised statistics next to :data:`PUBLISHED`), which every
training run writes to its ``metrics.json`` as ``dataset_stats``.

Each graph: ``x`` ``LongTensor [N, 1]`` (feature ids), ``edge_index`` ``[2, E]`` (both
directions, sorted, no self-loops), ``y`` ``LongTensor [N]``, ``idx`` (position in its
split). No ``edge_attr``: the model gives every edge one learned type, GraphGPS's
``DummyEdge``. Cached under ``<cache_dir>/datasets/{pattern,cluster}-<split>`` with
``edge_index`` stored as ``int16`` (graphs have < 205 nodes).
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import numpy as np
from tqdm.auto import tqdm

from .base import GraphDataset, TaskInfo
from .registry import register_dataset
from .sources import BUILD_VERSION, check_kwargs, resolve_dirs

if TYPE_CHECKING:  # torch and PyG load when graphs are generated, not when the loaders register
    from torch_geometric.data import Data

__all__ = ["SBMRecipe", "PATTERN", "CLUSTER", "PUBLISHED", "realised_stats", "pattern_graph", "cluster_graph", "generate", "pattern", "cluster"]

SPLIT_IDS = {"train": 0, "val": 1, "test": 2}
_PATTERN_STREAM = 3  # the split id of the patterns' own random streams


@dataclass(frozen=True)
class SBMRecipe:
    """Parameters of one SBM benchmark (ranges are ``numpy`` half-open: ``[lo, hi)``).

    Args:
        name: ``"pattern"`` or ``"cluster"`` (also mixed into the random streams).
        blocks: communities per graph.
        block_size: ``(lo, hi)``: each community has ``integers(lo, hi)`` nodes.
        p: edge probability inside a community.
        q: edge probability between two communities.
        splits: graphs per split.
        vocab: PATTERN: node feature values ``0..vocab-1``.
        patterns: PATTERN: number of distinct planted patterns.
        pattern_size: PATTERN: ``(lo, hi)`` nodes of each pattern.
        p_pattern: PATTERN: edge probability inside a pattern.
        q_pattern: PATTERN: probability of an edge between a pattern node and a community node.
    """

    name: str
    blocks: int
    block_size: tuple
    p: float
    q: float
    splits: tuple
    vocab: int = 0
    patterns: int = 0
    pattern_size: tuple = (0, 0)
    p_pattern: float = 0.0
    q_pattern: float = 0.0

    @property
    def split_sizes(self) -> dict:
        return dict(self.splits)


#: generate_SBM_PATTERN.ipynb: 5 blocks of 5..34 nodes, p 0.5, q 0.35 ("v4"), vocabulary 3,
#: 100 patterns of 5..34 nodes ("v2"), p_pattern 0.5, q_pattern 0.5; 100/20/20 graphs per pattern
PATTERN = SBMRecipe("pattern", blocks=5, block_size=(5, 35), p=0.5, q=0.35,
                    splits=(("train", 10_000), ("val", 2_000), ("test", 2_000)),
                    vocab=3, patterns=100, pattern_size=(5, 35), p_pattern=0.5, q_pattern=0.5)
#: generate_SBM_CLUSTER.ipynb: 6 blocks of 5..34 nodes, p 0.55, q 0.25; 10,000/1,000/1,000 graphs
CLUSTER = SBMRecipe("cluster", blocks=6, block_size=(5, 35), p=0.55, q=0.25,
                    splits=(("train", 10_000), ("val", 1_000), ("test", 1_000)))

_DATASET_IDS = {"pattern": 1, "cluster": 2}

#: the released datasets' statistics, per graph (Dwivedi et al., the dataset table; edges are
#: directed, both directions of each undirected edge, as ``edge_index`` holds them); PATTERN's
#: share of pattern nodes is read from the released files (about 18%)
PUBLISHED = {
    "pattern": {"graphs": 14_000, "mean_nodes": 118.9, "mean_edges": 6098.9, "class_balance": [0.82, 0.18]},
    "cluster": {"graphs": 12_000, "mean_nodes": 117.2, "mean_edges": 4303.9},
}


def realised_stats(recipe: SBMRecipe, seed: int, splits: dict) -> dict:
    """What a draw realised, next to :data:`PUBLISHED`: ``{"seed", "graphs", "mean_nodes",
    "mean_edges"`` (directed), ``"mean_pattern_nodes"`` (PATTERN), ``"class_balance"`` (the
    share of nodes per class), ``"published": {...}``, ``"note"}`` over the graphs of
    ``splits`` (``{split: [Data]}``)."""
    graphs = [g for v in splits.values() for g in v]
    n = max(len(graphs), 1)
    counts = np.zeros(2 if recipe.patterns else recipe.blocks)
    for g in graphs:
        counts += np.bincount(g.y.numpy(), minlength=len(counts))
    out = {"seed": int(seed), "graphs": len(graphs),
           "mean_nodes": round(sum(int(g.num_nodes) for g in graphs) / n, 2),
           "mean_edges": round(sum(int(g.edge_index.size(1)) for g in graphs) / n, 1)}
    if recipe.patterns:
        out["mean_pattern_nodes"] = round(float(counts[1]) / n, 2)
    out["class_balance"] = [round(float(c), 4) for c in counts / max(counts.sum(), 1)]
    out["published"] = PUBLISHED[recipe.name]
    out["note"] = (f"{recipe.name} regenerated with seed {seed}: a new draw of the Benchmarking-GNNs recipe, not "
                   "the released dataset; results are not like-for-like with published numbers")
    return out


def _rng(seed: int, recipe: SBMRecipe, stream: int, i: int) -> np.random.Generator:
    return np.random.default_rng([int(seed), _DATASET_IDS[recipe.name], stream, int(i)])


@functools.lru_cache(maxsize=256)
def _pairs(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Node pairs ``i < j`` of ``n`` nodes (read-only arrays, cached per ``n``)."""
    a, b = np.triu_indices(n, 1)
    a.setflags(write=False)
    b.setflags(write=False)
    return a, b


def _block_edges(rng: np.random.Generator, blocks: np.ndarray, p: float, q: float) -> tuple[np.ndarray, np.ndarray]:
    """Pairs ``(i, j)``, ``i < j``, of a stochastic block model: each pair is an edge with
    probability ``p`` when ``blocks[i] == blocks[j]``, else ``q``."""
    a, b = _pairs(len(blocks))
    prob = np.where(blocks[a] == blocks[b], p, q)
    keep = rng.random(len(a)) < prob
    return a[keep], b[keep]


def _blocks(rng: np.random.Generator, recipe: SBMRecipe) -> np.ndarray:
    """Community id of every node, communities in order: ``[N]``."""
    sizes = rng.integers(recipe.block_size[0], recipe.block_size[1], size=recipe.blocks)
    return np.repeat(np.arange(recipe.blocks), sizes)


def _graph(src: np.ndarray, dst: np.ndarray, perm: np.ndarray, x: np.ndarray, y: np.ndarray, idx: int) -> Data:
    """The shuffled graph: old node ``perm[k]`` becomes node ``k``; undirected edges listed in
    both directions, sorted by (source, target)."""
    n = len(perm)
    new = np.empty(n, dtype=np.int64)
    new[perm] = np.arange(n)
    s, d = new[src], new[dst]
    s, d = np.concatenate([s, d]), np.concatenate([d, s])
    order = np.lexsort((d, s))
    import torch
    from torch_geometric.data import Data

    edge_index = torch.from_numpy(np.stack([s[order], d[order]]))
    return Data(x=torch.from_numpy(x[perm].astype(np.int64)).view(-1, 1), edge_index=edge_index,
                y=torch.from_numpy(y[perm].astype(np.int64)), idx=int(idx), num_nodes=n)


def _pattern_instance(seed: int, recipe: SBMRecipe, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pattern ``k``: its internal edges ``(a, b)`` (``a < b``) and node features ``[m]``."""
    rng = _rng(seed, recipe, _PATTERN_STREAM, k)
    m = int(rng.integers(recipe.pattern_size[0], recipe.pattern_size[1]))
    a, b = _block_edges(rng, np.zeros(m, dtype=np.int64), recipe.p_pattern, recipe.p_pattern)
    return a, b, rng.integers(recipe.vocab, size=m)


def pattern_graph(rng: np.random.Generator, recipe: SBMRecipe, instance: tuple, idx: int = 0) -> Data:
    """One PATTERN graph: the SBM of ``recipe`` with the pattern ``instance`` (from
    :func:`_pattern_instance`) planted; ``y = 1`` on the pattern's nodes."""
    pa, pb, pu = instance
    c = _blocks(rng, recipe)
    n, m = len(c), len(pu)
    a, b = _block_edges(rng, c, recipe.p, recipe.q)
    u = rng.integers(recipe.vocab, size=n)
    link = rng.random((m, n)) < recipe.q_pattern  # pattern node r -- community node j
    r, j = np.nonzero(link)
    src = np.concatenate([a, j, pa + n])
    dst = np.concatenate([b, r + n, pb + n])
    perm = rng.permutation(n + m)
    y = np.concatenate([np.zeros(n, dtype=np.int64), np.ones(m, dtype=np.int64)])
    return _graph(src, dst, perm, np.concatenate([u, pu]), y, idx)


def cluster_graph(rng: np.random.Generator, recipe: SBMRecipe, idx: int = 0) -> Data:
    """One CLUSTER graph: the SBM of ``recipe``; one random node per community has feature
    ``community + 1``, the others 0; ``y`` = community."""
    c = _blocks(rng, recipe)
    a, b = _block_edges(rng, c, recipe.p, recipe.q)
    perm = rng.permutation(len(c))
    starts = np.concatenate([[0], np.cumsum(np.bincount(c, minlength=recipe.blocks))[:-1]])
    labelled = starts + rng.integers(0, np.bincount(c, minlength=recipe.blocks))  # one node per community
    u = np.zeros(len(c), dtype=np.int64)
    u[labelled] = c[labelled] + 1
    return _graph(a, b, perm, u, c, idx)


def generate(recipe: SBMRecipe, split: str, seed: int = 0, count: int | None = None,
             progress: bool = False) -> list[Data]:
    """The first ``count`` graphs (default: all) of ``split`` of ``recipe``, drawn with ``seed``."""
    total = recipe.split_sizes[split]
    count = total if count is None else min(int(count), total)
    instances = {}
    graphs = []
    for i in tqdm(range(count), desc=f"{recipe.name}/{split}", unit="graph", disable=not progress, mininterval=1.0):
        rng = _rng(seed, recipe, SPLIT_IDS[split], i)
        if recipe.patterns:
            k = i % recipe.patterns
            if k not in instances:
                instances[k] = _pattern_instance(seed, recipe, k)
            graphs.append(pattern_graph(rng, recipe, instances[k], i))
        else:
            graphs.append(cluster_graph(rng, recipe, i))
    return graphs


def _save_compact(graphs: list[Data], path) -> None:
    """Store graphs with ``int16`` edge ids (nodes < 32768), a quarter of the bytes."""
    import torch

    from .cache import save_graphs

    slim = []
    for g in graphs:
        h = g.clone()
        h.edge_index = g.edge_index.to(torch.int16)
        slim.append(h)
    save_graphs(slim, path)


def _load_compact(path) -> list[Data]:
    from .cache import load_graphs

    graphs = load_graphs(path)
    for g in graphs:
        g.edge_index = g.edge_index.long()
    return graphs


def _load(recipe: SBMRecipe, cache_dir, seed: int, max_graphs: int, progress: bool, kw: dict) -> GraphDataset:
    from .cache import cached

    check_kwargs(recipe.name, kw)
    _, cache_dir = resolve_dirs(None, cache_dir)
    splits = {}
    for split, total in recipe.splits:
        count = min(max_graphs, total) if max_graphs else total
        parts = {"loader": recipe.name, "version": BUILD_VERSION, "recipe": asdict(recipe), "seed": int(seed),
                 "split": split, "count": count}
        splits[split] = cached(cache_dir / "datasets", f"{recipe.name}-{split}", parts,
                               lambda split=split, count=count: generate(recipe, split, seed, count, progress),
                               save=_save_compact, load=_load_compact)
    info = TaskInfo(
        name=recipe.name, task="multiclass", num_tasks=1, metric="weighted_accuracy", node_features="typed",
        num_node_types=recipe.vocab if recipe.patterns else recipe.blocks + 1, num_edge_types=1,
        level="node", num_classes=2 if recipe.patterns else recipe.blocks,
        target_names=["in_pattern" if recipe.patterns else "community"],
    )
    source = f"{recipe.name} regenerated with seed {seed} (Benchmarking-GNNs SBM recipe)"
    return GraphDataset(info=info, splits=splits, source=source, stats=realised_stats(recipe, seed, splits))


@register_dataset(
    "pattern",
    "PATTERN, regenerated from the Benchmarking-GNNs SBM recipe (10,000/2,000/2,000 graphs), "
    "node classification (in the planted pattern or not), weighted accuracy",
    needs_root=False, options=("max_graphs", "seed"), level="node",
)
def pattern(root=None, cache_dir=None, *, seed: int = 0, max_graphs: int = 0, progress: bool = False,
            **kw) -> GraphDataset:
    """PATTERN drawn from :data:`PATTERN` with ``seed``; ``max_graphs > 0`` keeps (and builds)
    only the first ``max_graphs`` graphs of each split. ``root`` is not read."""
    return _load(PATTERN, cache_dir, seed, max_graphs, progress, kw)


@register_dataset(
    "cluster",
    "CLUSTER, regenerated from the Benchmarking-GNNs SBM recipe (10,000/1,000/1,000 graphs), "
    "node classification (6 communities), weighted accuracy",
    needs_root=False, options=("max_graphs", "seed"), level="node",
)
def cluster(root=None, cache_dir=None, *, seed: int = 0, max_graphs: int = 0, progress: bool = False,
            **kw) -> GraphDataset:
    """CLUSTER drawn from :data:`CLUSTER` with ``seed``; ``max_graphs`` as for :func:`pattern`."""
    return _load(CLUSTER, cache_dir, seed, max_graphs, progress, kw)
