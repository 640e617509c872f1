"""The kinds of member a run can hold, the factory that builds them, and the one loader of
saved predictors.

* :data:`MEMBER_KINDS` maps a kind (``siggate train --members KIND,...``) to a
  :class:`MemberKind`: how to build a new, unfitted member from a :class:`MemberSpec`, and how
  to load a saved one. Adding a kind is one entry here; its class lives in
  :mod:`siggate.predictors` (or, for the GNN, :mod:`siggate.train.gnn_member`).
* :func:`build_members` builds the members of a run: the GNN copies first (``--ensemble N``:
  seeds ``seed .. seed+N-1``), then the other kinds in the order given, in ``member0``,
  ``member1``, ... .
* :func:`load_predictor` loads whatever a run folder holds, by its ``predictor.json``, and
  every folder written before it existed: a run folder (``best.pt``), a checkpoint file and an
  ``--ensemble`` folder (``ensemble.json``).
* :func:`run_data` says which data a loaded predictor was trained on (for ``siggate evaluate``).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import torch

from ..config import Config, DataConfig, from_dict, upgrade_config_dict
from ..files import read_json
from ..options import SEED_MAX, member_names, resolve_select, run_weights
from ..predictors.base import MANIFEST, PredictorFileError, read_manifest, task_info
from ..predictors.combine import Combination
from ..predictors.forest import ForestGrid, RandomForest
from ..predictors.svr import KernelSVR, SVRGrid
from .dataprep import Encodings
from .gnn_member import GNNMember
from .runfiles import BEST, CONFIG

log = logging.getLogger("siggate.train")

#: the manifest of an ``--ensemble`` folder written before ``predictor.json`` (still read)
ENSEMBLE_FILE = "ensemble.json"


class MemberError(ValueError):
    """Members that cannot be built as asked (an unknown kind, no members)."""


@dataclass(frozen=True)
class MemberSpec:
    """What a member kind's constructor is given.

    Attributes:
        cfg: the run's config (``siggate train``'s), ``train.seed`` set to :attr:`seed`.
        folder: the member's own folder (``OUT/member{i}``).
        seed: the member's seed.
        split_seed: the seed the run's data were split with (the run's first seed).
        progress: progress bars while fitting.
        device: where the member trains and predicts, if it uses torch.
        resume: reuse a finished member in :attr:`folder`, resume an interrupted one.
    """

    cfg: Config
    folder: Path
    seed: int
    split_seed: int
    progress: bool = True
    device: torch.device | None = None
    resume: bool = True


@dataclass(frozen=True)
class MemberKind:
    """A member kind: ``build(spec)`` returns a new, unfitted predictor; ``load(folder, device)``
    a saved one (a kind that does not use torch ignores ``device``)."""

    build: Callable[[MemberSpec], object]
    load: Callable[[Path, torch.device | str | None], object]


def _build_gnn(spec: MemberSpec) -> GNNMember:
    return GNNMember(spec.cfg, spec.folder, spec.split_seed, spec.progress, spec.device, spec.resume)


def _build_svr(spec: MemberSpec) -> KernelSVR:
    o = spec.cfg.members.svr
    grid = {f.name: getattr(o, f.name) for f in dataclasses.fields(SVRGrid)}  # every grid field of the options
    return KernelSVR(grid, exact_max=o.exact_max, landmarks=o.landmarks, seed=spec.seed, average=o.average)


def _build_rf(spec: MemberSpec) -> RandomForest:
    o = spec.cfg.members.rf
    grid = {f.name: getattr(o, f.name) for f in dataclasses.fields(ForestGrid)}
    return RandomForest(o.n_estimators, o.radius, o.size, grid, seed=spec.seed,
                        n_jobs=spec.cfg.train.threads or 1)


#: member kind -> how to build and load it (``siggate train --members``): the GNN, and the
#: fingerprint members with the options of the config's ``members`` section, their grids chosen on
#: the validation split (:mod:`siggate.predictors.svr`, :mod:`siggate.predictors.forest`; seeded
#: with the member's seed, the forest fitted on ``train.threads`` threads)
MEMBER_KINDS: dict[str, MemberKind] = {
    "gnn": MemberKind(build=_build_gnn, load=lambda folder, device: GNNMember.load(folder, device)),
    "svr": MemberKind(build=lambda spec: _build_svr(spec), load=lambda folder, device: KernelSVR.load(folder)),
    "rf": MemberKind(build=lambda spec: _build_rf(spec), load=lambda folder, device: RandomForest.load(folder)),
}

#: the kind whose copies ``--ensemble N`` multiplies
GNN = "gnn"


def parse_kinds(text: str | Sequence[str]) -> list[str]:
    """``"gnn,svr"`` (or a list) as distinct member kinds, in order.

    Raises:
        MemberError: an unknown kind (the message lists the known ones), none, or one named twice
            (``gnn,gnn`` trained one GNN: ``--ensemble N`` is how a run holds N).
    """
    entries = text.split(",") if isinstance(text, str) else [str(k) for k in text]
    if len(entries) > 1 and any(not k.strip() for k in entries):  # (dropped without a word: 'svr,' trained svr)
        raise MemberError(f"--members {text!r}: an empty entry among the kinds; name each kind once, e.g. "
                          "gnn,svr,rf")
    kinds = member_names(text)
    unknown = [k for k in kinds if k not in MEMBER_KINDS]
    if unknown or not kinds:
        what = f"unknown member kind {unknown[0]!r}" if unknown else "no member kind given"
        raise MemberError(f"--members: {what}; known kinds: {', '.join(sorted(MEMBER_KINDS))}")
    named = [k.strip() for k in (text.split(",") if isinstance(text, str) else text) if k.strip()]
    if len(named) != len(kinds):
        twice = next(k for k in kinds if named.count(k) > 1)
        raise MemberError(f"--members: {twice} is named twice; each kind is one member (--ensemble N trains N GNN "
                          "members)")
    return kinds


def check_copies(kinds: Sequence[str], gnn_copies: int) -> None:
    """Refuse ``gnn_copies`` (``--ensemble N``) that cannot apply to the members ``kinds``.

    Raises:
        MemberError: ``gnn_copies < 1``, or several copies of a GNN member that ``kinds`` lacks.
    """
    if gnn_copies < 1:
        raise MemberError(f"--ensemble must be >= 1, got {gnn_copies}")
    if gnn_copies > 1 and GNN not in kinds:
        raise MemberError(f"--ensemble {gnn_copies} multiplies the GNN members and --members {','.join(kinds)} holds "
                          "none; add gnn to --members, or drop --ensemble")


def run_refusal(cfg: Config, kinds: Sequence[str], gnn_copies: int, several: bool, started: bool = False,
                distributed: bool = False) -> str | None:
    """Why a run of the members ``kinds`` (``gnn_copies`` GNNs; ``several``: a run of members, not
    one model) cannot train under ``cfg``, or None: what training would refuse, asked before a run
    folder is claimed, so that an earlier run in it never gives way to a refused one (``siggate
    train`` and the estimators both ask it). ``started``: the run began (its weights ``train.init``
    are in its last.pt, not read again). ``distributed``: it trains under ``--ddp``. A GNN's
    schedule is checked here (a warmup that leaves no epoch after it), not where the config is read:
    fingerprint members have no epochs.

    Raises:
        MemberError: ``gnn_copies`` that cannot apply to ``kinds`` (:func:`check_copies`).
        ConfigError: ``train.init`` names no readable weights.
    """
    from ..data.catalog import DATASET_META
    from .init_weights import init_refusal
    from .losses import cliff_term_refusal

    check_copies(kinds, gnn_copies)
    gnn = GNN in kinds
    top = cfg.train.seed + gnn_copies - 1  # the last GNN member's seed (build_members)
    if gnn and top > SEED_MAX:  # (its member failed in numpy, after the first had trained)
        return (f"--ensemble {gnn_copies} trains its GNN members with seeds {cfg.train.seed}..{top}, past the "
                f"largest seed {SEED_MAX}; give --seed {SEED_MAX - gnn_copies + 1} or lower")
    why = cfg.train.warmup_refusal() if gnn else None  # (fingerprint members have no epochs to warm up:
    if why:  # --members svr --set train.epochs=2 was refused for its warmup)
        return why
    if cfg.train.cliff_weight > 0:
        why = cliff_term_refusal(cfg.data.name == "csv", cfg.data.task, gnn=gnn, dataset=cfg.data.name,
                                 distributed=distributed)
        if why:
            return why
    if cfg.train.init and gnn and not started:
        why = init_refusal(cfg.train.init, cfg.model.to_dict())
        if why:
            return why
    if DATASET_META.get(cfg.data.name, {}).get("level") == "node":
        fingerprint = [k for k in kinds if k != GNN]
        if fingerprint:
            who = f"the {' and '.join(fingerprint)} member" + (" predicts" if len(fingerprint) == 1 else "s predict")
            return (f"--members {','.join(kinds)}: {who} one value per molecule, and {cfg.data.name} is a "
                    "node-level dataset; train it with the GNN alone (drop --members)")
        if several:
            return (f"--ensemble/--members average graph-level predictions; {cfg.data.name} is a node-level "
                    "dataset. Train its seeds one by one, or compare them with siggate compare.")
    return None


def run_encodings(kinds: str | Sequence[str], model) -> Encodings:
    """What the graphs of a run of the members ``kinds`` must carry: the model config's
    encodings (:meth:`~.dataprep.Encodings.of`) when a GNN member reads them, none otherwise
    (the fingerprint members read SMILES; a positional encoding would be computed for nothing)."""
    return Encodings.of(model) if GNN in parse_kinds(kinds) else Encodings()


def build_members(kinds: Sequence[str], cfg: Config, out: str | Path, gnn_copies: int = 1, progress: bool = True,
                  device: torch.device | None = None, resume: bool = True,
                  weights: str | None = None) -> list[tuple[str, int, object]]:
    """``[(name, seed, unfitted member)]`` of a run in ``out``: ``gnn_copies`` GNN members (seeds
    ``cfg.train.seed + i``) if ``kinds`` holds ``"gnn"``, then one member of each other kind
    (seed ``cfg.train.seed``), named ``member0``, ``member1``, ... (their folders under ``out``).
    Each member's ``train.select`` is made concrete (:func:`~siggate.options.resolve_select`):
    ``auto`` keeps a GNN's last epoch when the members combine with ``"val"`` weights
    (:func:`~siggate.options.run_weights`: several kinds).

    Raises:
        MemberError: an unknown kind, or ``gnn_copies`` that cannot apply (:func:`check_copies`).
    """
    kinds = parse_kinds(kinds)
    check_copies(kinds, gnn_copies)
    base = cfg.train.seed
    order = [(GNN, base + i) for i in range(gnn_copies) if GNN in kinds] + [(k, base) for k in kinds if k != GNN]
    weighs_on_val = run_weights(kinds, weights) == "val"
    members = []
    for i, (kind, seed) in enumerate(order):
        c = copy.deepcopy(cfg)
        c.train.seed = seed
        c.train.select = resolve_select(c.train.select, weighs_on_val=weighs_on_val)
        name = f"member{i}"
        spec = MemberSpec(c, Path(out) / name, seed, base, progress, device, resume)
        members.append((name, seed, MEMBER_KINDS[kind].build(spec)))
    return members


def fit_member(member, folder: Path, ds, resume: bool = True, device=None,
               on_fitted: Callable[[Path], None] | None = None):
    """Fit ``member`` on ``ds`` and save it into ``folder``; returns the fitted member.

    A member that trains into its own folder (the GNN: ``member.folder``) reuses and resumes
    there itself; any other member whose ``folder`` holds a saved predictor is reused (with
    ``resume``) instead of being fitted again. ``on_fitted(folder)`` runs after a fit and save
    (not after a reuse): what the run records beside the member."""
    from .checkpoint import CheckpointError

    folder = Path(folder)
    if getattr(member, "folder", None) is None and resume and (folder / MANIFEST).is_file():
        saved = read_manifest(folder)["kind"]
        if saved != member.kind:  # member folders swapped or edited: its scores would be another kind's
            raise PredictorFileError(f"{folder} holds a saved {saved} member where the run's record puts its "
                                     f"{member.kind} member; restore the run folder, or train it again with --overwrite")
        try:
            reused = load_predictor(folder, device)
            log.info("%s: the %s member fitted before is reused, not fitted again", folder, member.kind)
            return reused
        except (PredictorFileError, CheckpointError, OSError, ValueError) as exc:  # its arrays cut short or gone
            if isinstance(exc, PermissionError):  # not damaged: the user's to grant (named by the command)
                raise
            log.warning("%s: the saved member cannot be read (%s); it is fitted again", folder, exc)
    member.fit(ds)
    member.save(folder)
    if on_fitted is not None:
        on_fitted(folder)
    return member


def load_predictor(path: str | Path, device: torch.device | str | None = "cpu"):
    """The predictor saved at ``path``: a folder with ``predictor.json`` (any kind of
    :data:`MEMBER_KINDS`, or a combination), a run folder without one (its ``best.pt``), an
    ``--ensemble`` folder written before ``predictor.json`` (``ensemble.json``: a combination of
    its members, equal weights) or a checkpoint file (``.pt``).

    Raises:
        PredictorFileError: a folder that holds none of these, an unknown kind, a broken manifest.
        CheckpointError: a checkpoint that cannot be loaded (named refusals, nothing unpickled).
    """
    path = Path(path)
    if path.name == MANIFEST and path.is_file():
        raise PredictorFileError(f"{path}: give the folder that holds it ({path.parent}), not the manifest itself")
    if not path.is_dir():
        return GNNMember.from_checkpoint(path, device, split_seed=_split_seed_beside(path))
    from ..files import folder_busy

    busy = folder_busy(path, others=True)  # (this process: a run reading its own)
    if busy and ((path / MANIFEST).is_file() or (path / BEST).is_file()):  # its best epoch so far, or an earlier end
        logging.getLogger("siggate.predict").warning(
            "%s: a run is training there now (%s): what is read is the run as it stands (a best epoch so far, or the "
            "predictor of an earlier end), which may change", path, busy)
    if (path / MANIFEST).is_file():
        kind = read_manifest(path)["kind"]
        if kind == Combination.kind:
            return Combination.load(path, lambda folder: load_predictor(folder, device))
        if kind not in MEMBER_KINDS:
            raise PredictorFileError(f"{path / MANIFEST}: unknown predictor kind {kind!r} (this siggate knows "
                                     f"{', '.join(sorted(MEMBER_KINDS))}, {Combination.kind}); upgrade siggate")
        return MEMBER_KINDS[kind].load(path, device)
    if (path / ENSEMBLE_FILE).is_file():
        return _legacy_ensemble(path, device)
    if (path / BEST).is_file():
        return GNNMember.from_checkpoint(path / BEST, device, split_seed=_split_seed_beside(path / BEST))
    if (path / "pretrained.pt").is_file():  # siggate pretrain's folder: weights without a head
        raise PredictorFileError(f"{path} holds a pretraining (pretrained.pt), not a trained model: its weights predict "
                                 "nothing until fine-tuned on labels: siggate train --data FILE.csv --target-col COL "
                                 f"--init {path}")
    if busy:  # a run still training there: its predictor is written when it ends
        raise PredictorFileError(f"{path}: a run is still training there ({busy}), and its predictor is written when "
                                 "it finishes; try again then")
    from ..config import ConfigError
    from .rundir import MEMBERS_RECORD, member_of_run, read_record

    record = next((name for name in (MEMBERS_RECORD, CONFIG) if (path / name).is_file()), None)
    try:  # siggate's record (its _meta), not a project's own config.yaml
        ours = record is not None and "_meta" in read_record(path / record)
    except (ConfigError, OSError, ValueError):
        ours = False
    if ours:  # a run stopped before it wrote its predictor (Ctrl-C, a full disk)
        run = member_of_run(path) or path
        raise PredictorFileError(f"{path}: a run that was stopped before it finished ({record}, no {MANIFEST} or "
                                 f"{BEST} yet); finish it with siggate train --resume {run}")
    raise PredictorFileError(f"{path}: a folder with no {MANIFEST} and neither {ENSEMBLE_FILE} nor {BEST}; give a "
                             "run folder, an ensemble folder or a .pt checkpoint")


def run_checkpoint_name(folder: str | Path) -> str | None:
    """The checkpoint file of ``folder`` that :func:`load_predictor` loads for it when it is one
    GNN's run (its manifest's ``checkpoint``, else ``best.pt``); None for any other folder. What a
    run's ``calibration.json`` was computed from."""
    folder = Path(folder)
    if (folder / MANIFEST).is_file():
        try:
            doc = read_manifest(folder)
        except PredictorFileError:
            return None
        return str(doc.get("checkpoint", BEST)) if doc.get("kind") == GNNMember.kind else None
    return BEST if (folder / BEST).is_file() and not (folder / ENSEMBLE_FILE).is_file() else None


def _legacy_members(path: Path) -> tuple[list[Path], int]:
    """An ``ensemble.json`` folder's member checkpoints and the seed its split was drawn with."""
    manifest = path / ENSEMBLE_FILE
    try:
        doc = read_json(manifest)
        files = [path / str(m) for m in doc["members"]]
        split_seed = int(doc["seeds"][0])
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        raise PredictorFileError(f"{manifest}: not a siggate ensemble manifest ({exc}); retrain with "
                                 "siggate train --ensemble N") from None
    missing = [str(f) for f in files if not f.is_file()]
    if missing or not files:
        raise PredictorFileError(f"{manifest}: member checkpoint(s) missing: {', '.join(missing) or 'none listed'}")
    return files, split_seed


def _legacy_ensemble(path: Path, device) -> Combination:
    """An ``ensemble.json`` folder: its members' checkpoints, equal weights, the first seed's split."""
    files, split_seed = _legacy_members(path)
    members = [GNNMember.from_checkpoint(f, device, split_seed=split_seed) for f in files]
    names = [f.parent.name if f.parent != path else f.stem for f in files]
    return Combination(members, names=names if len(set(names)) == len(names) else None,
                       record={"split_seed": split_seed})


def saved_task(path: str | Path):
    """The :class:`~siggate.data.base.TaskInfo` of what :func:`load_predictor` would load from
    ``path``, read from its manifest or checkpoint without building a model.

    Raises:
        PredictorFileError, CheckpointError: as :func:`load_predictor`.
    """
    from ..data.base import TaskInfo
    from .checkpoint import load_checkpoint

    path = Path(path)
    if path.name == MANIFEST and path.is_file():  # (read as a checkpoint: "pass the best.pt", which a member folder lacks)
        load_predictor(path)  # raises its refusal: give the folder that holds it
    if path.is_dir():
        if (path / MANIFEST).is_file():
            return task_info(read_manifest(path), path)
        if (path / ENSEMBLE_FILE).is_file():
            path = _legacy_members(path)[0][0]
        elif (path / BEST).is_file():
            path = path / BEST
        else:
            load_predictor(path)  # raises its refusal
    return TaskInfo(**load_checkpoint(path)["info"])


def _split_seed_beside(checkpoint: Path) -> int | None:
    """The split seed a run's ``predictor.json`` records for the checkpoint ``checkpoint``, or the
    first seed of an ``ensemble.json`` folder that holds it; None when neither says."""
    folder = checkpoint.parent
    if (folder / MANIFEST).is_file():
        try:
            seed = read_manifest(folder).get("split_seed")
            if seed is not None:
                return int(seed)
        except (PredictorFileError, TypeError, ValueError):
            pass
    for up in (folder, folder.parent):
        f = up / ENSEMBLE_FILE
        if f.is_file():
            try:
                return int(json.loads(f.read_text())["seeds"][0])
            except (ValueError, KeyError, IndexError, TypeError):
                return None
    return None


def members_of(predictor) -> list:
    """The leaf predictors of ``predictor``: its members, recursively, or itself."""
    inner = getattr(predictor, "members", None)
    return [leaf for m in inner for leaf in members_of(m)] if inner else [predictor]


def encodings_of(predictor) -> Encodings:
    """What the graphs given to ``predictor`` must carry beyond atoms and bonds: the union of its
    members' :attr:`~.gnn_member.GNNMember.encodings` (members that read none, e.g. fingerprint
    models, add nothing).

    Raises:
        PredictorFileError: two members that read different positional encodings or molecule features.
    """
    found = [m.encodings for m in members_of(predictor) if getattr(m, "encodings", None) is not None]
    pe = {(e.pe, e.pe_steps) for e in found if e.pe != "none"}
    mol = {e.mol_features for e in found if e.mol_features != "none"}
    if len(pe) > 1 or len(mol) > 1:
        raise PredictorFileError(f"the members read different graph encodings ({sorted(pe)}, {sorted(mol)}); "
                                 "predict with each member folder on its own")
    kind, steps = next(iter(pe), ("none", 0))
    return Encodings(kind, steps, next(iter(mol), "none"))


@dataclass(frozen=True)
class RunData:
    """The data a predictor was trained on: its ``data`` config, the seed its splits were drawn
    with, and a CSV run's file record (``{"csv", "sha256"}``, :func:`~.record.data_source`)."""

    data: DataConfig
    split_seed: int
    source: dict | None = None


def run_data(predictor, folder: str | Path | None = None) -> RunData:
    """The data ``predictor`` (from :func:`load_predictor`, out of ``folder`` when given) was
    trained on: a combination's own record (``config``, ``split_seed``, ``data_source``, written by
    ``siggate train``), else its first GNN member's checkpoint, split with the combination's or the
    member's split seed, else, for a fingerprint member's ``folder`` (``member{i}``, which records
    no data of its own), the record of the run one folder up (:func:`_run_record_above`).

    Raises:
        PredictorFileError: the predictor records no data (no config, no GNN member, no run above).
    """
    record = getattr(predictor, "record", {}) or {}
    gnn = next((m for m in members_of(predictor) if isinstance(m, GNNMember)), None)
    if "config" not in record and gnn is None and folder is not None:
        record = _run_record_above(Path(folder))
    if "config" in record:
        cfg = from_dict(upgrade_config_dict(record["config"]))
        return RunData(cfg.data, int(record.get("split_seed", cfg.train.seed)), record.get("data_source"))
    if gnn is None:
        raise PredictorFileError("this predictor records no training data (no config); score it on a labelled file "
                                 "with --data FILE.csv")
    return RunData(copy.deepcopy(gnn.cfg.data), int(record.get("split_seed", gnn.split_seed)), gnn.data_source_)


def _run_record_above(folder: Path) -> dict:
    """The data record of the run whose member ``folder`` is: the fields its combination's
    ``predictor.json`` keeps (``config``, ``split_seed``, ``data_source``) when that lists
    ``folder``, else, in a run that has not finished, its :data:`~.rundir.MEMBERS_RECORD` config
    (split with ``train.seed``, as ``siggate train`` splits a run of members); ``{}`` when
    ``folder`` is no run's member."""
    from .rundir import MEMBERS_RECORD, config_from_record, member_folders, read_record

    run = folder.resolve().parent
    if folder.resolve() not in {m.resolve() for m in member_folders(run)}:
        return {}
    if (run / MANIFEST).is_file():
        doc = read_manifest(run)
        if doc["kind"] == Combination.kind and folder.name in (doc.get("members") or ()) and "config" in doc:
            return doc
    if (run / MEMBERS_RECORD).is_file():
        record = read_record(run / MEMBERS_RECORD)  # its _meta holds the training CSV's record
        return {"config": config_from_record(record, run / MEMBERS_RECORD)[0],
                "data_source": (record.get("_meta") or {}).get("source")}
    return {}


def trained_smiles_col(predictor, folder: str | Path | None = None) -> str:
    """The SMILES column of the CSV ``predictor`` (out of ``folder``) was trained on
    (:func:`run_data`; for an estimator's fit on a DataFrame, its column, which its record names),
    else ``smiles`` (a benchmark run, or a predictor that records no data): the column that
    ``evaluate --data``, ``predict --input`` and ``explain --input`` read by default."""
    from .rundir import estimator_record

    column = estimator_record(folder).get("smiles_column") if folder is not None else None
    if isinstance(column, str) and column:
        return column
    try:
        data = run_data(predictor, folder).data
    except PredictorFileError:
        return "smiles"
    return data.smiles_col if data.name == "csv" and data.smiles_col else "smiles"
