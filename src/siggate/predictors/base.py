"""The one interface shared by every model a run can hold, and its safe storage.

A *predictor* is a GNN run (``siggate.train``'s GNN member), a fingerprint kernel or tree model,
or a weighted combination of predictors. It follows scikit-learn's conventions where they fit
(the constructor only stores options; :meth:`Predictor.fit` learns and returns ``self``), but its
data is siggate's: a :class:`~siggate.data.base.GraphDataset` to learn from, and a list of PyG
``Data`` graphs (each with ``smiles`` where the member reads SMILES) to predict.

Contract of a predictor ``p``:

* ``p.kind`` (class attribute): its name in the folder's ``predictor.json``; :func:`read_manifest`
  tells a loader which class to build.
* ``p.info``: the :class:`~siggate.data.base.TaskInfo` it predicts (targets, task type).
* ``p.fit(ds)``: learn from ``ds.train``. ``ds.val`` may choose among options (early stopping,
  a hyperparameter grid, combination weights); ``ds.test`` is never read. Returns ``p``.
* ``p.predict(graphs)``: a :class:`Prediction` for the graphs, in their order.
* ``p.save(folder)``: ``folder/predictor.json`` (:func:`write_manifest`: kind, task, options and
  what was learned that fits in JSON) and plain arrays (:func:`save_arrays`). Nothing is pickled.
* ``type(p).load(folder)``: the predictor back, equal in its predictions.
* optional, ``p.held_out_``: ``{split: array [G, T]}``, the predictions for a split made before
  ``p`` refitted on it (a fingerprint member chooses its options on ``ds.val``, then learns from
  train and val). Whatever must see out-of-sample predictions of ``ds.val`` (the combination's
  weights, the conformal calibration, the val metrics) reads :func:`out_of_sample`.
* optional, ``p.atom_contributions(graphs, **options)``: an :class:`AtomContributions`
  (``siggate explain``): each atom's share of the prediction relative to a reference. The GNN
  uses integrated gradients (``steps``); a fingerprint member occludes each bin of its fingerprint
  and shares the change over the atoms that set the bin (:mod:`.fpmember`; options it does not
  use are ignored); a combination takes its members' weighted sum.

Regression predictions are in target units; ``binary``/``multilabel`` predictions are
probabilities. Missing labels (NaN) are skipped per target when fitting.
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Protocol, Sequence, runtime_checkable

from ..files import (
    UnsafeFile,
    atomic_torch_save,
    atomic_write_bytes,
    file_digest,
    read_json,
    safe_torch_load,
)

if TYPE_CHECKING:
    import torch

    from ..data.base import GraphDataset, TaskInfo

MANIFEST = "predictor.json"
#: a fingerprint member's arrays beside its manifest (:func:`save_arrays`)
ARRAYS = "arrays.pt"
#: version of the ``predictor.json`` layout; a newer one is refused by name
MANIFEST_FORMAT = 1
#: the manifest's field of the files it was saved with: ``{path in the folder: SHA-256}``
#: (:func:`write_manifest`, :func:`check_saved_files`; absent in manifests saved before it)
SAVED_FILES = "sha256"
#: why a file a growth retrains (a GNN's checkpoint, a combination's member) may differ from its
#: manifest's, and the fixes: a run grown by ``--resume --epochs`` rewrites them before its record
GROWN_OR_COPIED = ("a run grown by --resume --epochs that has not finished (still training, or stopped: finish it with "
                   "siggate train --resume RUN), or a file of another run copied in (copy the whole run folder as it "
                   "was, or retrain it)")


class PredictorFileError(ValueError):
    """A predictor folder or array file that cannot be loaded (missing, corrupt, unsafe, newer)."""


@dataclass
class Prediction:
    """What a predictor returns for ``G`` graphs.

    Attributes:
        mean: ``[G, T]`` float tensor: target units (regression) or probabilities (classification).
        spread: ``[G, T]`` standard deviation over a combination's members, or ``None`` for a
            single model.
    """

    mean: "torch.Tensor"
    spread: "torch.Tensor | None" = None


@dataclass
class AtomContributions:
    """How much each atom of each of ``G`` molecules contributes to a prediction, relative to a
    reference. For a *complete* method (integrated gradients, an exact additive model), per
    molecule and target ``atoms[g].sum(0) == prediction[g] - baseline[g]`` up to the method's
    numerical error; occlusion (the fingerprint members) measures each bin's effect with the
    others present, so its sum differs from ``prediction - baseline`` by the model's interactions
    between bins, and ``method`` says which was used (a combination's sum holds for the share of
    its complete members).

    Attributes:
        atoms: per molecule ``[n_atoms, T]`` (float64, target units or probabilities).
        baseline: ``[G, T]`` the reference prediction the contributions are measured from.
        prediction: ``[G, T]`` the prediction (as :meth:`Predictor.predict`'s ``mean``).
        method: how they were computed, for the reader (e.g. ``"integrated gradients ..."``).
        complete: whether the method is complete, so that each sum should equal ``prediction -
            baseline`` (``siggate explain`` warns where it misses). (default: ``False``)
    """

    atoms: list
    baseline: "torch.Tensor"
    prediction: "torch.Tensor"
    method: str
    complete: bool = False


@runtime_checkable
class Predictor(Protocol):
    """See the module docstring for the contract."""

    kind: ClassVar[str]
    info: "TaskInfo"

    def fit(self, ds: "GraphDataset") -> "Predictor": ...

    def predict(self, graphs: Sequence) -> Prediction: ...

    def save(self, folder: str | Path) -> None: ...

    @classmethod
    def load(cls, folder: str | Path) -> "Predictor": ...


def out_of_sample(member, split: str, graphs: Sequence) -> Prediction:
    """``member``'s prediction for ``graphs``, the molecules of ``split`` it was fitted with, as
    the combination and the calibration must see it: the predictions it kept before refitting on
    ``split`` (``held_out_``), else :meth:`Predictor.predict`.

    Raises:
        PredictorFileError: kept predictions for another number of molecules than ``graphs`` (a
            saved member of another split, or an edited file).
    """
    kept = getattr(member, "held_out_", {}).get(split)
    if kept is None:
        return member.predict(graphs)
    import numpy as np
    import torch

    if len(kept) != len(graphs):
        raise PredictorFileError(f"{member.kind}: kept {len(kept)} out-of-sample {split} predictions for {len(graphs)} "
                                 "molecules, so it was fitted on another split (or its file was edited); train the "
                                 "run again with --overwrite")
    return Prediction(mean=torch.from_numpy(np.asarray(kept, dtype=np.float32)))  # as the member's predict gives them


def write_manifest(folder: str | Path, kind: str, info: "TaskInfo", files: Sequence[str] = (), **fields) -> Path:
    """Write ``folder/predictor.json``: ``format``, ``kind``, ``info`` (the task), ``fields``
    (JSON values only) and the SHA-256 of each of ``files`` (paths in ``folder``: the arrays,
    the checkpoint, the members' manifests), atomically. Returns its path."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    doc = {"format": MANIFEST_FORMAT, "kind": kind, "info": info.to_dict(), **fields}
    if files:
        doc[SAVED_FILES] = {name: file_digest(folder / name) for name in files}
    path = folder / MANIFEST
    atomic_write_bytes(path, json.dumps(doc, indent=2).encode())
    return path


def read_manifest(folder: str | Path) -> dict:
    """``folder/predictor.json`` as a dict, checked for ``format`` and ``kind``.

    Raises:
        PredictorFileError: no manifest, unreadable JSON, or a format newer than this siggate's.
    """
    path = Path(folder) / MANIFEST
    if not path.is_file():
        raise PredictorFileError(f"{folder}: no {MANIFEST}; give a run folder written by 'siggate train'")
    try:
        doc = read_json(path)
        fmt = int(doc["format"])
        doc["kind"] = str(doc["kind"])
    except (ValueError, KeyError, TypeError, OverflowError) as exc:  # (OverflowError: a format of Infinity)
        raise PredictorFileError(f"{path}: not a siggate predictor manifest ({type(exc).__name__}: {exc})") from None
    if fmt > MANIFEST_FORMAT:
        raise PredictorFileError(f"{path}: written by a newer siggate (format {fmt}, this one reads {MANIFEST_FORMAT}); "
                                 "upgrade siggate")
    return doc


def check_saved_files(folder: str | Path, doc: dict,
                      why: str = "a file of another run copied in, or one edited: copy the whole run folder as it was, "
                                 "or retrain it") -> None:
    """Refuse a file of ``folder`` that is not the one its manifest ``doc`` was saved with (another
    run's arrays, checkpoint or member copied in: its predictions changed without a word), saying
    ``why`` it may differ and the fix. A file that is missing is its loader's to name; a manifest
    saved before the digests checks nothing.

    Raises:
        PredictorFileError: a file whose SHA-256 differs (saying ``why`` and the fix), or unusable digests.
    """
    folder, saved = Path(folder), doc.get(SAVED_FILES)
    if saved is None:
        return
    if not isinstance(saved, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in saved.items()):
        raise PredictorFileError(f"{folder / MANIFEST}: unusable {SAVED_FILES!r} (file names and their SHA-256)")
    for name, digest in saved.items():
        path = folder / name
        if any(part in ("", ".", "..") for part in name.split("/")) or Path(name).is_absolute():
            raise PredictorFileError(f"{folder / MANIFEST}: {name!r} is not a file of the folder")
        if path.is_file() and file_digest(path) != digest:
            raise PredictorFileError(f"{path}: not the file its {MANIFEST} was saved with (another SHA-256): {why}")


def task_info(doc: dict, folder: str | Path = "") -> "TaskInfo":
    """The :class:`TaskInfo` stored in the manifest ``doc`` (of ``folder``, for messages).

    Raises:
        PredictorFileError: no usable ``info`` (missing, not a mapping, unknown or bad fields,
            target names that do not match its number of targets).
    """
    from ..data.base import TaskInfo

    try:
        info = TaskInfo(**doc["info"])
        names = list(info.target_names)
    except (KeyError, TypeError, ValueError) as exc:
        raise PredictorFileError(f"{Path(folder) / MANIFEST}: no usable task description 'info' "
                                 f"({type(exc).__name__}: {exc})") from None
    if names and len(names) != info.num_tasks:
        raise PredictorFileError(f"{Path(folder) / MANIFEST}: 'info' names {len(names)} target(s) for "
                                 f"{info.num_tasks} task(s)")
    return info


def save_arrays(path: str | Path, arrays: dict) -> None:
    """Save ``{name: array or tensor}`` (numpy arrays become tensors) with ``torch.save``,
    atomically; :func:`load_arrays` reads it back with ``weights_only=True``."""
    import numpy as np
    import torch

    out = {k: torch.from_numpy(np.ascontiguousarray(v)) if isinstance(v, np.ndarray) else v for k, v in arrays.items()}
    atomic_torch_save(out, Path(path))


def load_arrays(path: str | Path) -> dict:
    """Load a file written by :func:`save_arrays` (or any ``torch.save`` of tensors and plain
    containers) with ``weights_only=True``: a file holding other Python objects is refused before
    anything in it runs.

    Raises:
        PredictorFileError: missing, truncated or corrupt, holding objects other than tensors, or
            not a dict of them.
    """
    path = Path(path)
    if not path.is_file():  # (said "file not found" alone, where a member folder's file was missing)
        raise PredictorFileError(f"{path}: file not found; a saved model needs it beside its {MANIFEST}: copy the "
                                 "whole run folder, or train it again")
    try:
        arrays = safe_torch_load(path)
    except UnsafeFile as exc:
        raise PredictorFileError(
            f"refused to load {path}: it holds Python objects other than tensors and plain containers, which could "
            f"run code when unpickled ({exc.global_ or exc.detail}); siggate never writes such files. Nothing in it "
            "was run.") from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError, ValueError, KeyError, AttributeError,
            TypeError, IndexError, UnicodeDecodeError) as exc:
        if isinstance(exc, PermissionError):  # the file system's refusal, not a damaged file (cli names it)
            raise
        raise PredictorFileError(f"cannot read {path}: truncated or corrupt ({type(exc).__name__})") from None
    if not isinstance(arrays, dict):
        raise PredictorFileError(f"{path}: not a siggate arrays file (it holds a {type(arrays).__name__}, not a "
                                 "dict of arrays); copy the run folder again, or retrain it")
    return arrays
