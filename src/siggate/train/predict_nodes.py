"""``siggate predict`` for node-level checkpoints: one CSV row per node of a dataset split.

A node-level model predicts for the nodes of its dataset's graphs (PATTERN, CLUSTER,
sbm-large), so its input is a split of that dataset, rebuilt (or read from the cache) from
the checkpoint's config, not SMILES. The CSV has a header and these columns:

``split``
    the split the node is scored in: ``train``, ``val`` or ``test`` (for a transductive
    dataset, the mask the node is in);
``graph``
    the graph's position in its split (``0`` for the one graph of a transductive dataset);
``node``
    the node's index in its graph (``edge_index`` numbering);
``label``
    the node's label (``label_<target>`` per target for several regression targets);
``prediction``
    the predicted class id (argmax) for classification, the value in target units for
    regression (``prediction_<target>`` per target);
``prob_<c>``
    classification only: the softmax probability of each class ``c``.

Rows come split by split, graph by graph, node by node. ``--split all`` writes every split
(for a transductive dataset: every node in one of the masks, once, in the node order of its one
graph, so the ``split`` column interleaves; a node in no mask has no label to score and is left
out). The file is written atomically.
"""

from __future__ import annotations

import csv
from pathlib import Path

import torch

from ..data.base import split_mask
from ..files import number_text
from .predict import InputError, csv_output

SPLITS = ("train", "val", "test")


def _load(checkpoint, **kwargs):
    """The saved predictor at ``checkpoint`` (:func:`~siggate.train.members.load_predictor`)."""
    from ..predictors.base import PredictorFileError
    from .members import load_predictor

    try:
        return load_predictor(checkpoint, **kwargs)
    except PredictorFileError as exc:
        raise InputError(str(exc)) from None


def checkpoint_level(checkpoint) -> str:
    """``"graph"`` or ``"node"``: what the checkpoint (a ``.pt`` file, a run folder or a folder
    of several members) predicts for."""
    from ..predictors.base import PredictorFileError
    from .members import saved_task

    try:
        return saved_task(checkpoint).level
    except PredictorFileError as exc:
        raise InputError(str(exc)) from None


def columns(info) -> list[str]:
    """The CSV header for a node-level task ``info`` (see the module docstring)."""
    if info.task == "multiclass":
        return ["split", "graph", "node", "label", "prediction"] + [f"prob_{c}" for c in range(info.num_classes)]
    names = info.target_names
    labels = ["label"] if len(names) == 1 else [f"label_{n}" for n in names]
    preds = ["prediction"] if len(names) == 1 else [f"prediction_{n}" for n in names]
    return ["split", "graph", "node", *labels, *preds]


def _rows(predictor, info, graphs: list, split: str):
    """``(split column, graph, node, label row, prediction row)`` of every node of ``graphs``
    that ``split`` scores (for a transductive graph: its mask's nodes, or every node in a
    mask for ``"all"``)."""
    out = predictor.predict(graphs).mean
    if info.task == "multiclass":
        out = torch.cat([out.argmax(1, keepdim=True).to(out.dtype), out.softmax(1)], dim=1)
    start = 0
    for gi, g in enumerate(graphs):
        n = int(g.num_nodes)
        pred = out[start:start + n].tolist()
        start += n
        y = g.y.view(n, -1).tolist()
        if info.transductive:
            masks = torch.stack([split_mask(g, info, s) for s in SPLITS], 1)  # N, 3
            keep = masks.any(1) if split == "all" else split_mask(g, info, split)
            where = [SPLITS[i] for i in masks.float().argmax(1).tolist()]  # read for kept nodes only
            nodes = torch.nonzero(keep).view(-1).tolist()
        else:
            where, nodes = [split] * n, range(n)
        for v in nodes:
            yield where[v], gi, v, y[v], pred[v]


def _fmt(row: list, multiclass: bool) -> list:
    if multiclass:
        return [int(row[0])] + [number_text(v) for v in row[1:]]
    return [number_text(v) for v in row]


def predict_nodes_to_csv(checkpoint, split: str, output: str | Path | None, data_root=None, cache_dir=None,
                         batch_size: int = 64, device="cpu") -> int:
    """Write one CSV row per node of ``split`` (``train``, ``val``, ``test`` or ``all``) of the
    checkpoint's dataset to ``output`` (or stdout), predicted on ``device``; returns the number
    of rows.

    Raises:
        InputError: an unknown split, an ensemble folder, or an unwritable ``output``.
    """
    from .dataprep import prepare_data
    from .gnn_member import GNNMember
    from .members import run_data

    if split not in SPLITS + ("all",):
        raise InputError(f"--split: unknown split {split!r}; choose train, val, test or all")
    predictor = _load(checkpoint, device=device)  # (predict --device cuda ran on the CPU, without a word)
    if not isinstance(predictor, GNNMember):
        raise InputError(f"{checkpoint} is an ensemble; node-level predictions take one run folder or checkpoint")
    predictor.batch_size = batch_size
    info, trained_on = predictor.info, run_data(predictor)
    data = trained_on.data
    if data_root:
        data.root = str(data_root)
    if cache_dir:
        data.cache_dir = str(cache_dir)
    ds = prepare_data(data, predictor.encodings, trained_on.split_seed, progress=False)
    if info.transductive:
        names = [split]  # one graph: one pass covers the split's mask (or every node for "all")
    else:
        names = list(SPLITS) if split == "all" else [split]
    multiclass = info.task == "multiclass"
    n = 0
    with csv_output(output) as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(columns(info))
        for name in names:
            graphs = ds.splits["test" if name == "all" else name]  # a transductive graph is in every split
            for where, gi, v, y, pred in _rows(predictor, info, graphs, name):
                label = [int(y[0])] if multiclass else [number_text(t) for t in y]
                w.writerow([where, gi, v, *label, *_fmt(pred, multiclass)])
                n += 1
    return n

