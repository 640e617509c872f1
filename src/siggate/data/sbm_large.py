"""``sbm-large``: one large stochastic-block-model graph, for full-batch (transductive) node
classification at scale.

The graph comes from :func:`siggate.data.sbm.sbm_large_graph` with its defaults (10 blocks,
average degree 10, intra/inter odds 4, 16 noisy features) and ``num_nodes`` nodes (config key
``data.num_nodes``; default :data:`DEFAULT_NUM_NODES`). Its nodes are split by the graph's
``train_mask``/``val_mask``/``test_mask``; each split of the :class:`GraphDataset` holds that
one graph. It is built in memory on each load (seconds, even for 10^6 nodes) and not cached,
so a new generator never meets a stale cache.
"""

from __future__ import annotations

from .base import DataError, GraphDataset, TaskInfo
from .registry import register_dataset
from .sources import check_kwargs

__all__ = ["DEFAULT_NUM_NODES", "sbm_large"]

#: nodes of ``sbm-large`` when ``data.num_nodes`` is 0
DEFAULT_NUM_NODES = 10_000
#: its blocks (classes), average degree and ratio of the edge probabilities within and between blocks
BLOCKS, AVG_DEGREE, P_RATIO = 10, 10.0, 4.0


def smallest_num_nodes() -> int:
    """The fewest nodes an ``sbm-large`` graph can have: its :data:`BLOCKS` balanced blocks reach
    :data:`AVG_DEGREE` with edge probabilities of at most 1."""
    import numpy as np

    from .sbm import sbm_edge_probabilities

    n = BLOCKS
    while True:
        try:
            sbm_edge_probabilities(np.bincount(np.arange(n) % BLOCKS), AVG_DEGREE, P_RATIO)
            return n
        except ValueError:
            n += 1


@register_dataset(
    "sbm-large",
    "one large SBM graph (data.num_nodes nodes, default 10,000; 10 blocks), full-batch node "
    "classification on train/val/test masks, accuracy",
    needs_root=False, options=("num_nodes", "seed"), level="node",
)
def sbm_large(root=None, cache_dir=None, *, num_nodes: int = 0, seed: int = 0, progress: bool = True,
              **kw) -> GraphDataset:
    """The ``sbm-large`` graph with ``num_nodes`` nodes (``0``: :data:`DEFAULT_NUM_NODES`),
    drawn with ``seed``. ``root`` and ``cache_dir`` are not read."""
    import torch

    from .sbm import sbm_large_graph

    check_kwargs("sbm-large", kw)
    n = int(num_nodes) or DEFAULT_NUM_NODES
    least = smallest_num_nodes()
    if n < least:  # (the generator's own words name its arguments: blocks, degree, none of them the user's)
        raise DataError(f"sbm-large needs data.num_nodes >= {least} for its {BLOCKS} blocks at average degree "
                        f"{AVG_DEGREE:g}, got {n}; give {least} or more (--set data.num_nodes={least}; siggate data "
                        f"verify: --num-nodes {least}), or 0 for {DEFAULT_NUM_NODES:,}")
    g = sbm_large_graph(n, num_blocks=BLOCKS, avg_degree=AVG_DEGREE, p_ratio=P_RATIO, seed=seed)
    for key in ("train_mask", "val_mask", "test_mask"):
        if key not in g or g[key].dtype != torch.bool or g[key].shape != (n,):
            raise ValueError(f"sbm_large_graph must return a boolean {key} of shape [{n}]")
    info = TaskInfo(
        name="sbm-large", task="multiclass", num_tasks=1, metric="accuracy", node_features="dense",
        num_node_features=int(g.x.shape[1]), num_edge_types=1, level="node", transductive=True,
        num_classes=int(g.y.max()) + 1, target_names=["block"],
    )
    return GraphDataset(info=info, splits={"train": [g], "val": [g], "test": [g]},
                        source=f"sbm-large, {n} nodes, seed {seed} (siggate.data.sbm.sbm_large_graph)")

