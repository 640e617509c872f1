"""The GNN as a predictor (:class:`~siggate.predictors.base.Predictor`): a ``siggate train`` run
of SigGate-GT in its own folder.

Its folder is an ordinary run folder (``config.yaml``, ``best.pt``, ``last.pt``, ``log.csv``,
``metrics.json``, ...) plus ``predictor.json`` (kind ``gnn``: the checkpoint it predicts with and
the seed its data were split with). A run folder written before ``predictor.json`` existed, or a
checkpoint file, loads with :meth:`GNNMember.from_checkpoint`.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Sequence

import torch

from ..config import Config
from ..predictors.base import (
    GROWN_OR_COPIED,
    MANIFEST,
    AtomContributions,
    Prediction,
    PredictorFileError,
    check_saved_files,
    read_manifest,
    write_manifest,
)
from .attribution import DEFAULT_STEPS, integrated_gradients
from .dataprep import Encodings
from .modelprep import load_trained
from .runfiles import BEST, CONFIG, LAST, METRICS
from .scoring import predict_graphs, probabilities


class GNNMember:
    """A SigGate-GT run behind the predictor interface.

    Args:
        cfg: the run's config (``siggate train``'s: data, model and training).
        folder: the run folder :meth:`fit` trains into.
        split_seed: the seed the data were split with, when it is not the run's own (an
            ensemble's members share the first member's split). (default: ``cfg.train.seed``)
        progress: progress bars while training. (default: ``True``)
        device: where the model trains and predicts. (default: CPU)
        resume: :meth:`fit` reuses a finished run in ``folder`` and resumes an interrupted one
            from its ``last.pt`` (else it trains from scratch). (default: ``True``)
        batch_size: graphs per forward pass when predicting. (default: ``train.eval_batch_size``)

    Attributes (after :meth:`fit` or loading):
        model_: the best epoch's model, in eval mode; target_mean_, target_std_: the target
        normalisation; data_source_: a CSV run's file record (path and SHA-256); metrics_: the
        run's ``metrics.json`` (after :meth:`fit`).
    """

    kind = "gnn"

    def __init__(self, cfg: Config, folder: str | Path, split_seed: int | None = None, progress: bool = True,
                 device: torch.device | str | None = None, resume: bool = True, batch_size: int | None = None) -> None:
        self.cfg, self.folder = cfg, Path(folder)
        self.split_seed = cfg.train.seed if split_seed is None else int(split_seed)
        self.progress, self.resume = progress, resume
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self.batch_size = batch_size or cfg.train.eval_batch_size
        self.checkpoint = self.folder / BEST
        self._info = None
        self.model_ = self.target_mean_ = self.target_std_ = self.metrics_ = self.data_source_ = None

    @property
    def info(self):
        """The task (known once fitted or loaded)."""
        if self._info is None:
            raise AttributeError("this GNN member is not fitted yet: call fit(ds) or load it")
        return self._info

    @property
    def encodings(self) -> Encodings:
        """What the model reads from its graphs beyond atoms and bonds (positional encodings,
        molecule features): what ``siggate predict`` must add to a SMILES' graph."""
        return Encodings.of(self.cfg.model)

    def fit(self, ds) -> "GNNMember":
        """Train the run into :attr:`folder` on ``ds`` (:func:`siggate.train.pipeline.train`):
        a finished run there of the same config is reused, an interrupted one resumes from its
        ``last.pt`` (with ``resume``). Then load its best epoch. Returns ``self``."""
        from .distributed import DistContext
        from .pipeline import train
        from .study import reuse_status

        status = reuse_status(self.folder, self.cfg.to_dict()) if self.resume else None
        if status is not None and status.state == "done" and (self.folder / BEST).is_file():
            self.metrics_ = status.metrics
        else:
            self.metrics_ = train(self.cfg, self.folder, resume=self.resume and (self.folder / LAST).exists(),
                                  progress=self.progress, dataset=ds, dist=DistContext(device=self.device))
        return self._adopt(self.folder / BEST, load_trained(self.folder / BEST))

    def _adopt(self, path: Path, loaded: tuple) -> "GNNMember":
        """Take the weights, normalisation, config and task of :func:`~.modelprep.load_trained`'s
        ``loaded`` checkpoint ``path``."""
        model, ckpt, cfg, info = loaded
        self.cfg, self.checkpoint, self._info = cfg, Path(path), info
        self.model_ = model.to(self.device)
        self.target_mean_, self.target_std_ = ckpt["target_mean"], ckpt["target_std"]
        self.data_source_ = ckpt.get("data_source")
        return self

    def predict(self, graphs: Sequence) -> Prediction:
        """The best epoch's predictions for ``graphs``, ``batch_size`` at a time in their order:
        ``[G, T]`` (``[N, T]`` per node for a node-level run) in target units, probabilities for
        binary/multilabel tasks (multiclass: the class scores)."""
        graphs = self._graphs(graphs)
        if not graphs:
            return Prediction(torch.empty(0, self._width, dtype=torch.float64))
        raw = predict_graphs(self.model_, graphs, self.info, self.target_mean_, self.target_std_,
                             self.batch_size, self.device)
        # in float64, as training scores its epochs (split_probabilities): a float32 sigmoid is 1.0 from a
        # logit of about 17 on, and a confident model's probabilities tied there (ROC-AUC 0.5 for 0.4)
        return Prediction(probabilities(raw.double(), self.info.task))

    @property
    def _width(self) -> int:
        """Values per prediction: the targets (a multiclass task: its classes' scores)."""
        return self.info.num_classes if self.info.task == "multiclass" else self.info.num_tasks

    def _graphs(self, graphs: Sequence) -> list:
        """``graphs`` as a list, for a fitted member; refused by name when they are not graphs."""
        if self.model_ is None:
            raise AttributeError("this GNN member is not fitted yet: call fit(ds) or load it")
        graphs = list(graphs)
        bad = next((i for i, g in enumerate(graphs) if not hasattr(g, "num_nodes")), None)
        if bad is not None:
            raise TypeError(f"the GNN member predicts graphs, and item {bad} is a {type(graphs[bad]).__name__}; "
                            "featurize SMILES first (siggate.train.predict.SmilesPredictor(run).featurize)")
        return graphs

    def atom_contributions(self, graphs: Sequence, steps: int = DEFAULT_STEPS) -> AtomContributions:
        """Each atom's contribution to the best epoch's prediction for ``graphs``: integrated
        gradients on the atom embeddings from the zero baseline, ``steps`` Riemann points
        (:func:`siggate.train.attribution.integrated_gradients`, which says why)."""
        graphs = self._graphs(graphs)
        if not graphs:
            empty = torch.empty(0, self._width, dtype=torch.float64)
            return AtomContributions([], empty, empty.clone(), "integrated gradients (no molecules)", complete=True)
        atoms, baseline, prediction = integrated_gradients(self.model_, graphs, self.info, self.target_mean_,
                                                           self.target_std_, steps, self.batch_size, self.device)
        # in float64, as predict gives the member's predictions
        return AtomContributions([a.double() for a in atoms], baseline.double(), prediction.double(),
                                 f"integrated gradients on the atom embeddings, zero baseline, {steps} steps",
                                 complete=True)

    def save(self, folder: str | Path) -> None:
        """Write ``predictor.json`` into ``folder``; a folder other than the run's gets a copy of
        the run's files first (its checkpoints, config, log and metrics)."""
        folder = Path(folder)
        src = self.checkpoint.parent
        if folder.resolve() != src.resolve():
            folder.mkdir(parents=True, exist_ok=True)
            for name in (self.checkpoint.name, LAST, CONFIG, METRICS, "log.csv"):
                if (src / name).is_file():
                    shutil.copy2(src / name, folder / name)
        _write_manifest(folder, self.info, self.checkpoint.name, self.split_seed)

    @classmethod
    def load(cls, folder: str | Path, device: torch.device | str | None = None,
             batch_size: int | None = None) -> "GNNMember":
        """The GNN member saved in ``folder`` (its ``predictor.json`` and checkpoint).

        Raises:
            PredictorFileError: not a GNN member's folder.
            CheckpointError: its checkpoint cannot be loaded (named refusals, no pickle).
        """
        folder = Path(folder)
        doc = read_manifest(folder)
        if doc["kind"] != cls.kind:
            raise PredictorFileError(f"{folder}: a {doc['kind']!r} predictor, not a {cls.kind!r}")
        name = str(doc.get("checkpoint", BEST))
        if Path(name).name != name:
            raise PredictorFileError(f"{folder / MANIFEST}: checkpoint {name!r} is not a file of the folder")
        check_saved_files(folder, doc, GROWN_OR_COPIED)
        return cls.from_checkpoint(folder / name, device, batch_size, split_seed=doc.get("split_seed"))

    @classmethod
    def from_checkpoint(cls, path: str | Path, device: torch.device | str | None = None,
                        batch_size: int | None = None, split_seed: int | None = None) -> "GNNMember":
        """The GNN member of a checkpoint file (``best.pt``, ``last.pt``) written by
        ``siggate train``, with or without a ``predictor.json`` beside it."""
        path = Path(path)
        loaded = load_trained(path)
        member = cls(loaded[2], path.parent, split_seed, progress=False, device=device, batch_size=batch_size)
        return member._adopt(path, loaded)


def _write_manifest(folder: Path, info, checkpoint: str, split_seed: int) -> None:
    write_manifest(folder, GNNMember.kind, info, files=[checkpoint], checkpoint=checkpoint, split_seed=int(split_seed))


def mark_run(folder: str | Path) -> None:
    """Write ``predictor.json`` into the run folder of a finished :func:`~siggate.train.pipeline.train`
    (``siggate train`` of one model), so that it loads as a GNN member like any other; nothing
    when it holds no ``best.pt``."""
    from ..data.base import TaskInfo
    from .checkpoint import load_checkpoint

    best = Path(folder) / BEST
    if best.is_file():
        ckpt = load_checkpoint(best, finite=False)  # (its task and seed: loading it to predict checks its weights)
        _write_manifest(Path(folder), TaskInfo(**ckpt["info"]), BEST, ckpt["config"]["train"]["seed"])
