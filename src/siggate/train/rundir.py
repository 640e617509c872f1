"""A training run's folder, as ``siggate train`` guards it: whether it holds a run, a
default name that is free, clearing it for ``--overwrite``, and the run's saved config for
``--resume``. Light: no torch.

A folder *holds a run* when it has any of :data:`RUN_MARKERS` (``config.yaml`` is written
before the first epoch, ``last.pt`` after each, ``metrics.json`` at the end; a run of several
members writes ``members.yaml`` before its first member), or is a folder of several members
(``ensemble.json`` of older ensembles, or ``member{i}/`` folders holding runs; see
:mod:`siggate.train.ensemble`).
"""

from __future__ import annotations

import copy
import csv
import io
import math
import os
import re
import shutil
from pathlib import Path

import yaml

from ..config import ConfigError, split_resolved, upgrade_config_dict
from ..data.base import FITTED_FILE
from ..data.similarity import DOMAIN_FILE, FINGERPRINTS_FILE
from ..files import atomic_write_bytes, folder_busy, number_text
from ..options import run_weights
from ..predictors.base import ARRAYS, MANIFEST
from .plots import LEARNING, PARITY, RESIDUALS, ROC
from .runfiles import BEST, CONFIG, LAST, METRICS

#: a run of several members' config and the members it holds (``siggate train --members/--ensemble``,
#: :func:`siggate.train.ensemble.train_members`), written before its first member is fitted
MEMBERS_RECORD = "members.yaml"
#: a member without a run folder of its own (svr, rf): the config of the run it was fitted in (its
#: members.yaml then), which a resume that would reuse the member checks against its own
MEMBER_FIT_RECORD = "fitted_with.yaml"
#: Files whose presence makes a folder a run.
RUN_MARKERS = (CONFIG, LAST, METRICS, MEMBERS_RECORD)
#: a run's split-conformal calibration (``record.write_calibration``), read by ``siggate predict --coverage``
CALIBRATION = "calibration.json"
#: what a scikit-learn estimator's fit writes into its ``out_dir`` beside the run (:mod:`siggate.estimator`),
#: so that its next fit replaces that run and never one that ``siggate train`` made
ESTIMATOR_RECORD = "estimator.json"
#: Everything ``siggate train`` writes into a run folder (files, and the TensorBoard folder
#: ``tb``): a run's checkpoints, log and metrics, the ``predictor.json`` of a GNN run or of a
#: combination of members (and a fingerprint member's ``arrays.pt``), an older ensemble's
#: ``ensemble.json`` and a CSV run's tables;
#: ``--overwrite`` removes these and the ``member{i}`` folders of a run of several members. The
#: run's lock (:class:`siggate.files.FolderLock`, ``.siggate.lock``) is not one of them: the
#: overwriting run holds it, and a lock file removed while held would let a second run in.
RUN_OUTPUTS = RUN_MARKERS + (ESTIMATOR_RECORD, BEST, "log.csv", "ensemble.json", MANIFEST, ARRAYS, "test_predictions.csv",
                              "splits.csv", "data_report.csv", FITTED_FILE, CALIBRATION, DOMAIN_FILE, FINGERPRINTS_FILE,
                              PARITY, LEARNING, RESIDUALS, ROC)
RUN_FOLDERS = ("tb",)
_MEMBER = re.compile(r"member\d+")


def member_of_run(folder: str | Path) -> Path | None:
    """The run of several members whose member ``folder`` is (``RUN/member3`` beside its record), or None."""
    folder = Path(folder)
    top = folder.resolve().parent
    if _MEMBER.fullmatch(folder.name) and any((top / name).is_file() for name in (MEMBERS_RECORD, "ensemble.json")):
        return top
    return None


def member_folders(out: Path) -> list[Path]:
    """The ``member{i}`` folders of a run of several members (sorted by name; none for another folder)."""
    if not out.is_dir():
        return []
    return sorted(p for p in out.iterdir() if p.is_dir() and _MEMBER.fullmatch(p.name))


def run_folders(folder: str | Path, recorded: bool = False) -> set[Path]:
    """The folders of the run that ``folder`` (a run, or one of its ``member*`` folders) belongs
    to, resolved: the run's own and its members'; empty when it holds no run and no saved
    predictor (a checkpoint copied into a folder of other files), or with ``recorded`` no
    checkpoint, no :data:`MEMBERS_RECORD` and no saved predictor (a folder of the user's with a
    ``config.yaml`` of their own and the ``metrics.json`` that ``evaluate --output`` wrote is no run)."""
    folder = Path(folder)
    top = folder.parent if _MEMBER.fullmatch(folder.name) else folder
    if not (run_files(top) or run_files(folder) or (folder / MANIFEST).is_file()):
        return set()
    if recorded and not any((f / name).is_file() for f in {top, folder}
                            for name in (BEST, LAST, MEMBERS_RECORD, MANIFEST)):
        return set()
    return {top.resolve(), *(m.resolve() for m in member_folders(top))}


def run_output_names(out: str | Path) -> str:
    """The names in ``out`` that ``siggate train`` writes (:data:`RUN_OUTPUTS`, :data:`RUN_FOLDERS`,
    ``member*`` folders), whoever made them, as a refusal names them (the first four, folders with
    a ``/``); ``""`` when there are none."""
    out = Path(out)
    if not out.is_dir():
        return ""
    names = [p.name + ("/" if p.is_dir() else "") for p in sorted(out.iterdir())
             if p.name in RUN_OUTPUTS or p.name in RUN_FOLDERS or _MEMBER.fullmatch(p.name)]
    return ", ".join(names[:4]) + (" ..." if len(names) > 4 else "")


def run_files(out: str | Path) -> list[str]:
    """The files that make ``out`` a run (relative to ``out``; empty when it holds none)."""
    out = Path(out)
    found = [name for name in RUN_MARKERS + ("ensemble.json",) if (out / name).is_file()]
    for member in member_folders(out):
        found += [f"{member.name}/{name}" for name in RUN_MARKERS if (member / name).is_file()]
    return found


def read_record(path: str | Path) -> dict:
    """A run's YAML record (``config.yaml``, :data:`MEMBERS_RECORD`) as a mapping, its ``_meta``
    a mapping too (``{}`` for an empty file).

    Raises:
        ConfigError: not YAML, or not a mapping: a damaged or crafted record (a traceback from
            inside the resume before).
    """
    path = Path(path)
    try:
        saved = yaml.safe_load(path.read_text()) or {}
    except (yaml.YAMLError, UnicodeDecodeError, RecursionError) as exc:
        raise ConfigError(f"{path}: not a run record siggate reads ({type(exc).__name__}); restore the run folder "
                          "from where it came, or retrain it") from None
    if not isinstance(saved, dict) or not isinstance(saved.get("_meta") or {}, dict):
        raise ConfigError(f"{path}: not a run record siggate reads (a mapping of config sections is expected); "
                          "restore the run folder from where it came, or retrain it")
    return saved


def run_commit(out: str | Path) -> str | None:
    """The git commit of siggate that trained the run in ``out``, as its record's ``_meta``
    says (``members.yaml`` for a run of several members, else ``config.yaml``); ``None``
    without a record or a recorded commit."""
    out = Path(out)
    record = out / (MEMBERS_RECORD if (out / MEMBERS_RECORD).is_file() else CONFIG)
    if not record.is_file():
        return None
    return (read_record(record).get("_meta") or {}).get("git_commit")


def holds_run(out: str | Path) -> bool:
    """Whether ``out`` holds a run or an ensemble (see the module docstring)."""
    return bool(run_files(out))


#: a ``siggate pretrain`` folder's corpus build under way (``corpus/partial/``), and its built corpus's record
PRETRAIN_PARTIAL, PRETRAIN_CORPUS_RECORD = "partial", "meta.json"


def pretraining_files(out: str | Path, begun: bool = False) -> list[str]:
    """What of a ``siggate pretrain`` folder ``out`` holds: its export ``pretrained.pt``, its
    ``corpus/`` (built, or a build under way); empty for any other folder. ``begun``: only what
    shows that a pretraining ran its course here, its checkpoint ``model/last.pt`` or its built
    corpus (an empty build under way, or an export copied in, does not)."""
    out = Path(out)
    built = (out / "corpus" / PRETRAIN_CORPUS_RECORD).is_file()
    if begun:
        return [name for name, there in (("model/last.pt", (out / "model" / LAST).is_file()),
                                         ("corpus/", built)) if there]
    found = ["pretrained.pt"] if (out / "pretrained.pt").is_file() else []
    if built or (out / "corpus" / PRETRAIN_PARTIAL).is_dir():
        found.append("corpus/")
    return found


def forget_refused_run(out: str | Path) -> bool:
    """After a new run in ``out``, a folder it found without files of a run's names
    (:func:`run_entries`; other files stay), refused its input: remove what it
    wrote when that is only its record (``config.yaml``, :data:`MEMBERS_RECORD`, the members'
    ``config.yaml``: no checkpoint, no saved member, no metrics), so that the command with its
    input mended starts there without ``--overwrite``; a folder holding anything more keeps it all
    (nothing trained is lost). The caller checks that the folder held no file of a run's names:
    :func:`clear_run` removes every name a run writes, a user's own files of those names too. Returns whether it
    removed the record."""
    out = Path(out)
    files = run_files(out)
    records = (CONFIG, MEMBERS_RECORD)
    if not files or any(Path(f).name not in records for f in files):
        return False
    if any((member / MANIFEST).is_file() or (member / BEST).is_file() for member in member_folders(out)):
        return False
    clear_run(out)
    return True


def free_run_dir(base: str | Path, taken: str | Path | None = None) -> Path:
    """``base`` if it holds no run, else the first of ``base-2``, ``base-3``, ... that holds none;
    a folder another live run is writing into (:func:`siggate.files.folder_busy`) and ``taken``
    are skipped too."""
    base = Path(base)
    path, n = base, 1
    while holds_run(path) or folder_busy(path) or (taken is not None and path == Path(taken)):
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def run_entries(out: Path) -> list[Path]:
    """What ``siggate train`` wrote into ``out``, the one list of it (:func:`clear_run` removes it,
    :func:`set_aside` moves it): :data:`RUN_OUTPUTS`, :data:`RUN_FOLDERS`, the ensemble members and
    unfinished atomic writes ``.*.tmp``, those that are there."""
    return [p for p in (*(out / n for n in RUN_OUTPUTS + RUN_FOLDERS), *member_folders(out), *out.glob(".*.tmp"))
            if p.is_file() or p.is_dir() or p.is_symlink()]


def clear_run(out: str | Path) -> None:
    """Remove what ``siggate train`` wrote into ``out`` (:func:`run_entries`); other files stay, and
    so do a member's files of other names. A symbolic link in a member's or a folder's place is
    removed as a link: what it points to is never entered (a received run's ``member2`` linked to
    someone's folder lost its files to ``--overwrite``)."""
    out = Path(out)
    for p in run_entries(out):
        if p.is_symlink() or not p.is_dir() or (p.name not in RUN_FOLDERS and not _MEMBER.fullmatch(p.name)):
            p.unlink()  # a file, a link; a folder of a file's name is refused (IsADirectoryError), not entered
        elif p.name in RUN_FOLDERS:
            shutil.rmtree(p)
        else:  # a member: its own run's files, and the folder once empty
            clear_run(p)
            if not any(p.iterdir()):
                p.rmdir()


#: where ``--overwrite`` keeps the run it replaces until the new run has got past its input checks
ASIDE = ".siggate-replaced"


def set_aside(out: str | Path) -> None:
    """Move the run in ``out`` (what :func:`clear_run` removes) into ``out/.siggate-replaced`` (an
    earlier one there, left by a replacement that stopped, goes first): ``--overwrite`` replaces a
    run only once the new one has got past its input checks (:func:`restore_aside`,
    :func:`drop_aside`). Links are moved as links."""
    out = Path(out)
    aside = out / ASIDE
    drop_aside(out)
    entries = run_entries(out)
    if not entries:
        return
    aside.mkdir()
    for p in entries:
        os.replace(p, aside / p.name)


def restore_aside(out: str | Path) -> bool:
    """Put back the run :func:`set_aside` moved (a new run refused its input and took back its
    record, or was killed before it wrote anything); returns whether it did. Nothing is put back
    while a name it holds is taken in ``out`` (the caller then removes it with :func:`drop_aside`)."""
    out = Path(out)
    aside = out / ASIDE
    if not aside.is_dir() or aside.is_symlink():
        return False
    entries = list(aside.iterdir())
    if any((out / p.name).exists() or (out / p.name).is_symlink() for p in entries):
        return False
    for p in entries:
        os.replace(p, out / p.name)
    aside.rmdir()
    return True


def drop_aside(out: str | Path) -> None:
    """Remove the run :func:`set_aside` kept (the new run is under way, or done)."""
    aside = Path(out) / ASIDE
    if aside.is_symlink():
        aside.unlink()
    elif aside.is_dir():
        shutil.rmtree(aside)


def saved_config_path(out: str | Path, ensemble: bool = False) -> Path:
    """The config that ``--resume`` reads: ``out``'s own ``config.yaml``, or for a run of several
    members its :data:`MEMBERS_RECORD` (or, in a folder written before it, the first member's
    ``config.yaml``: the members of an ``--ensemble`` differ only in their seed)."""
    out = Path(out)
    if not ensemble:
        return out / CONFIG
    return out / MEMBERS_RECORD if (out / MEMBERS_RECORD).is_file() else out / "member0" / CONFIG


def is_member_folder(folder: str | Path) -> bool:
    """Whether ``folder`` is named as a member of a run of several members (``member0``, ...)."""
    return bool(_MEMBER.fullmatch(Path(folder).resolve().name))


def is_members_folder(out: str | Path) -> bool:
    """Whether ``out`` is the folder of a run of several members (its :data:`MEMBERS_RECORD`, an
    older ``ensemble.json``, or a ``member0/`` folder)."""
    out = Path(out)
    return any((out / name).exists() for name in (MEMBERS_RECORD, "ensemble.json", "member0"))


def saved_members(out: str | Path) -> dict | None:
    """The members a run of several members records in its :data:`MEMBERS_RECORD`
    (``{"kinds": [...], "ensemble": N, "weights": "equal" | "val"}``), or None where none is
    recorded (another folder, or one written before the record). ``weights`` is the one the run
    combines with (:func:`~siggate.options.run_weights`: an older record of ``val`` weights for
    copies of one kind reads ``equal``).

    Raises:
        ValueError: the record names unknown weights (the message names the file).
    """
    path = Path(out) / MEMBERS_RECORD
    if not path.is_file():
        return None
    members = (read_record(path).get("_meta") or {}).get("members")
    if not isinstance(members, dict):
        return None
    try:
        return {**members, "weights": run_weights(members.get("kinds") or ["gnn"], members.get("weights"))}
    except ValueError as exc:
        raise ValueError(f"{path} records {exc}") from None


def read_saved_config(path: str | Path) -> dict:
    """A run's saved ``config.yaml`` as a config dict: ``_meta`` dropped, older schemas upgraded."""
    return saved_config_and_resolved(path)[0]


def saved_config_and_resolved(path: str | Path) -> tuple[dict, dict]:
    """A run's saved ``config.yaml``: ``(config as the user gave it, values resolved from the
    data)`` (see :func:`siggate.config.split_resolved`), older schemas upgraded.

    Raises:
        ConfigError: a record that is not one (:func:`read_record`), or whose sections are not
            mappings.
    """
    return config_from_record(read_record(path), path)


def config_from_record(saved: dict, path: str | Path) -> tuple[dict, dict]:
    """:func:`saved_config_and_resolved` of a record already read (:func:`read_record`) from ``path``
    (named in the error); ``saved`` is left as it was."""
    saved = dict(saved)
    meta = saved.pop("_meta", None) or {}
    try:
        return split_resolved(upgrade_config_dict(saved), meta.get("resolved"))
    except (AttributeError, TypeError, ValueError) as exc:
        raise ConfigError(f"{path}: not a run record siggate reads ({type(exc).__name__}: {exc}); restore the run "
                          "folder from where it came, or retrain it") from None


def changed_since(path: str | Path, data, consequence: str = ", so the run would go on with other data") -> str | None:
    """Why a CSV run whose record is ``path`` must not resume on (or, a finished one, stand for)
    ``data`` (its ``DataConfig`` now, or its ``to_dict()``): the file's SHA-256 differs from the one
    recorded when the run started (``_meta.source``, :func:`~siggate.train.record.data_source`),
    said with ``consequence``; None when it is the same, or the run records none (saved before
    siggate recorded it)."""
    from ..files import source_changed

    name, csv = (data.get("name"), data.get("csv")) if isinstance(data, dict) else (data.name, data.csv)
    if name != "csv" or not csv or not Path(csv).is_file():
        return None
    why = source_changed(csv, recorded_sha256(path), "the run started")
    return why and why + consequence


#: the end of a conflict's reason when this siggate reads the run's CSV otherwise (:func:`reading_changed`)
READ_OTHERWISE = ": its rows and splits were read as the siggate that started it read them"


def recorded_chirality(path: str | Path) -> str | None:
    """How the run recorded at ``path`` (``config.yaml``, :data:`MEMBERS_RECORD`) read its molecules'
    stereocentres (:data:`~siggate.data.base.ATOM_CHIRALITY`): None for a run of members without a
    GNN (the fingerprints read no stereo) or an unreadable record; else its ``_meta.task``'s, for a
    run of members without one its GNN members' records', and ``"tag"`` for a record written
    before siggate kept it."""
    try:
        meta = read_record(path).get("_meta") or {}
    except (OSError, ValueError):
        return None
    members = meta.get("members")
    if isinstance(members, dict) and "gnn" not in (members.get("kinds") or []):
        return None
    task = meta.get("task")
    if isinstance(task, dict):
        return task.get("chirality", "tag")
    if isinstance(members, dict):  # a members record written before it held the task: its GNN members say
        said = {recorded_chirality(m / CONFIG) for m in member_folders(Path(path).parent)
                if (m / CONFIG).is_file()} - {None}
        if len(said) == 1:
            return said.pop()
    return "tag"


def reading_changed(source: dict | None, data, chirality: str | None = None) -> str | None:
    """Why this siggate reads a CSV run's file otherwise than when the run started (``source``:
    its record's :func:`~siggate.train.record.data_source`; ``data``: its ``DataConfig`` or its
    ``to_dict()``): rows kept that were dropped, so other splits, or (``chirality``: the run's
    :func:`recorded_chirality`, for a run to go on or be reused beside new ones) its molecules'
    stereocentres read otherwise; ``None`` when it reads it as then, or nothing was recorded. A run
    that records a hash and no reading started at reading 4. ``siggate evaluate`` and ``predict``
    read a run's molecules by its own chirality, so they pass none."""
    from ..data.base import CHIRALITY_WORDS, CSV_CHIRALITY
    from ..data.csvdata import CSV_VERSION, read_otherwise

    get = data.get if isinstance(data, dict) else lambda key: getattr(data, key, None)
    if get("name") == "csv" and chirality is not None and chirality != CSV_CHIRALITY:
        return (f"its GNN read the molecules' stereocentres by {CHIRALITY_WORDS.get(chirality, repr(chirality))}, and "
                f"this siggate reads them by {CHIRALITY_WORDS[CSV_CHIRALITY]}")
    if not isinstance(source, dict) or not source.get("sha256"):
        return None
    csv = get("csv") or source.get("csv")  # the file that will be read (moved since, where its content is the run's)
    if get("name") != "csv" or not csv or not Path(csv).is_file():
        return None
    then = source.get("reading", 4)
    if not read_otherwise(then, csv, list(get("target_cols") or []), get("task") or "regression", get("sep"),
                          get("decimal") or ".", get("fragments") or "all", get("smiles_col")):
        return None
    said = "other rows kept or merged"  # (a reading before those READING_CHANGES names)
    if then >= min(READING_CHANGES) - 1:
        changes = [READING_CHANGES[v] for v in range(then + 1, CSV_VERSION + 1)]
        said = ", ".join(changes[:-1]) + (", and " if len(changes) > 1 else "") + changes[-1]
    return (f"this siggate reads {csv} otherwise than the one that started the run did (CSV reading {then}, now "
            f"{CSV_VERSION}: {said}, so the splits differ)")


#: what each reading of the CSVs changed (the readings since a run's are named by :func:`reading_changed`)
READING_CHANGES = {
    5: "rows with a label cell that is no number beside another target's label are kept",
    6: "a copy of a molecule labelling a heavy atom's isotope ([13CH3]) is one molecule with it",
    7: "(data.fragments: parent) an acid salted with its own anion (CC(=O)[O-].CC(=O)O.[Na+]) has the acid for parent",
    8: "a multilabel row without any label is dropped, and a line ending with a delimiter the header lacks is read",
}


def resume_differences(saved: dict, current: dict, path: str | Path | None = None) -> list[str]:
    """The config values in which ``current`` (built from the flags given with ``--resume``)
    differs from the run's ``saved`` config (its record ``path``, None: none to read), one ``"key: checkpoint has A,
    current config has B"`` per key; ``train.epochs`` (a resumed run may grow), the run-local keys
    (where data lies, threads) and the path of a CSV whose content is the one recorded (a moved
    file) may differ."""
    from .checkpoint import config_differences  # torch; only when resuming

    return config_differences(saved, current, ignore=("train.epochs",),
                              csv_sha256=recorded_sha256(path) if path is not None else None)


def recorded_source(path: str | Path) -> dict:
    """What a run recorded of its CSV when it started (its record ``path``, ``_meta.source``,
    :func:`~siggate.train.record.data_source`); ``{}`` for a named dataset or an older run."""
    source = (read_record(path).get("_meta") or {}).get("source")
    return source if isinstance(source, dict) else {}


def recorded_sha256(path: str | Path) -> str | None:
    """The SHA-256 of the CSV a run recorded when it started (:func:`recorded_source`); None for a
    named dataset or a run saved before siggate recorded it."""
    return recorded_source(path).get("sha256")


#: What ``--resume`` keeps from the run unless ``--set`` gives it again: the warmup is the run's
#: own, whatever ``--epochs`` would scale it to in a new run.
SCHEDULE_KEYS = ("warmup_epochs", "warmup_start")


def keep_run_schedule(cfg, saved: dict, given: set[str]):
    """``cfg`` with :data:`SCHEDULE_KEYS` taken from the run's ``saved`` config, except the keys
    in ``given`` (``--set`` items); a validated copy."""
    cfg = copy.deepcopy(cfg)
    for key in SCHEDULE_KEYS:
        if f"train.{key}" not in given and key in (saved.get("train") or {}):
            setattr(cfg.train, key, saved["train"][key])
    return cfg.validate()


#: a run's test-set predictions at its best epoch (``siggate train --data``)
TEST_PREDICTIONS = "test_predictions.csv"


def prediction_columns(targets: list[str], before: list[str], ensemble: bool = False, suffixes=(),
                       after=()) -> list[str]:
    """The names of the prediction columns written after the columns ``before``, the one rule of
    ``siggate predict`` and ``test_predictions.csv``: each target's name, or ``<target>_pred``
    where a column of that name (or of one of its per-target columns) is already there, e.g. the
    labels; then, for an ensemble, ``<name>_uncertainty`` of each; then ``<name><suffix>`` of
    each per-target ``suffixes`` (``predict --coverage``'s ``_lower``/``_upper`` or ``_set``);
    then the columns ``after`` (the domain columns), ``<column>_pred`` where taken. ``_pred`` is
    added again while a name is still taken (an earlier output read back twice), so no output has
    two columns of one name."""
    taken = set(before) | {error_column(before)}
    suffixes = (["_uncertainty"] if ensemble else []) + list(suffixes)
    names = []
    for name in targets:
        names.append(_free(name, taken, suffixes))
        taken |= {names[-1], *(f"{names[-1]}{x}" for x in suffixes)}
    cols = names + [f"{n}{x}" for x in suffixes for n in names]
    for name in after:
        cols.append(_free(name, taken))
        taken.add(cols[-1])
    return cols


def error_column(before: list[str]) -> str:
    """The name of ``siggate predict``'s per-row error column after the columns ``before``:
    ``error``, or ``error_pred`` where the input already has an ``error`` column (e.g. an earlier
    prediction read back; ``_pred`` again while the name is taken), :func:`prediction_columns`' rule."""
    return _free("error", set(before))


def _free(name: str, taken: set, suffixes=(), mark: str = "_pred") -> str:
    """``name`` with ``mark`` added while it (or ``name + suffix`` for one of ``suffixes``) is ``taken``."""
    while name in taken or any(f"{name}{x}" in taken for x in suffixes):
        name += mark
    return name


def carried_names(columns: list[str], own: list[str]) -> list[str]:
    """The names under which an output that writes its ``own`` columns carries an input's
    ``columns``: each kept, or with ``_input`` added while one of ``own`` (or an earlier carried
    column) has it (``siggate explain``'s ``molecules.csv``)."""
    taken, names = set(own), []
    for c in columns:
        names.append(_free(c, taken, mark="_input"))
        taken.add(names[-1])
    return names


def write_test_predictions(path: str | Path, rows: list[int], smiles: list[str], names: list[str],
                           labels: list[list[float]], preds: list[list[float]],
                           uncertainty: list[list[float]] | None = None,
                           carried: tuple[list[str], dict[int, list[str]]] | None = None) -> Path:
    """Write one row per test molecule: ``row`` (its data row in the input file, 0-based),
    ``smiles``, the input's ``carried`` columns (``(names, {row: values})``, e.g. IDs), each
    target's label (empty where missing), then the predictions in target units (probabilities
    for classification) named by :func:`prediction_columns` (``<target>_pred``, as ``siggate
    predict`` names them beside a label column) and an ensemble's standard deviation over
    members (``<target>_pred_uncertainty``). ``labels``/``preds``/``uncertainty``: ``[G, T]``."""
    def fmt(v: float) -> str:
        return "" if v is None or math.isnan(v) else number_text(v)

    extra, values = carried or ([], {})
    header = ["row", "smiles", *extra, *names]
    header += prediction_columns(names, header, ensemble=uncertainty is not None)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    for g, (r, s) in enumerate(zip(rows, smiles)):
        fields = [r, s, *values.get(r, [""] * len(extra)), *(fmt(v) for v in labels[g]), *(fmt(v) for v in preds[g])]
        w.writerow(fields + ([fmt(v) for v in uncertainty[g]] if uncertainty is not None else []))
    atomic_write_bytes(Path(path), buf.getvalue().encode("utf-8"))
    return Path(path)


#: what :data:`ESTIMATOR_RECORD` says while a fit is under way (a fit killed midway leaves it)
FITTING = "fitting"


def _record_folder(checkpoint) -> Path:
    """The run folder that ``checkpoint`` (a folder, or a file in one) names."""
    return Path(checkpoint) if Path(checkpoint).is_dir() else Path(checkpoint).parent


def estimator_record(checkpoint) -> dict:
    """The :data:`ESTIMATOR_RECORD` of the run ``checkpoint`` is (a folder, or a file in one):
    ``{"estimator": "SigGateRegressor", "target_names": [...], ...}`` for a run an estimator's
    ``fit`` made (``{"estimator": FITTING}`` while it is under way); ``{}`` for any other run,
    or a record that cannot be read."""
    from ..files import read_json

    try:
        record = read_json(_record_folder(checkpoint) / ESTIMATOR_RECORD)
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def estimator_fit(folder: Path | None) -> str | None:
    """The estimator ``fit`` that made the run in ``folder`` (its :data:`ESTIMATOR_RECORD`), in
    words (``"SigGateRegressor.fit"``; a fit under way, or killed midway, too), else ``None``."""
    name = estimator_record(folder).get("estimator") if folder is not None else None
    return None if not name else "an estimator's fit" if name == FITTING else f"{name}.fit"


def estimator_classes_note(checkpoint) -> str | None:
    """For a run that ``SigGateClassifier.fit`` kept (its :data:`ESTIMATOR_RECORD` names the
    classes): which class its probability is of, in words for ``predict``, ``evaluate`` and
    ``explain``, whose columns are 0 and 1; ``None`` for any other run."""
    record = estimator_record(checkpoint)
    folder = _record_folder(checkpoint)
    if not record and (folder / ESTIMATOR_RECORD).is_file():  # (damaged: its note was dropped without a word)
        return (f"{folder / ESTIMATOR_RECORD} cannot be read, so which class a probability here is of is not known: "
                "if an estimator's fit made this run, it is of the estimator's classes_[1]")
    if "probability_of" not in record or not isinstance(record.get("classes"), list):
        return None
    classes = record["classes"]
    if len(classes) != 2 or record["probability_of"] != classes[1]:
        return (f"{folder / ESTIMATOR_RECORD} names the classes {classes!r} and a probability of "
                f"{record['probability_of']!r}, which a fit never writes (two classes, the second's probability): "
                "it was edited; which class a probability here is of is not known")
    names = record.get("target_names") or ["y"]
    return (f"this run was fit by SigGateClassifier on the classes {', '.join(map(repr, record['classes']))}: its "
            f"{names[0]} is the probability of {record['probability_of']!r}, and a scored file's labels are 1 for "
            f"{record['probability_of']!r} and 0 for {classes[0]!r}")  # (classes 1, 2: a file of 1s and 2s is not read so)


def records_epochs(metrics, want, strict: bool = False) -> bool:
    """Whether the record ``metrics`` (a ``metrics.json``) is of a run of ``want`` epochs (a
    config's ``train.epochs``): a run grown by ``--resume --epochs N`` and stopped before its new
    record keeps the old one, of fewer. A record or a config without epochs (older, or another
    kind of run) passes, except ``strict`` (a resume that takes a run of members as finished: one
    recorded before its record said its epochs is combined and recorded again, as it always was)."""
    have = metrics.get("epochs") if isinstance(metrics, dict) else None
    if strict:
        return isinstance(have, int) and have == want
    return not isinstance(want, int) or not isinstance(have, int) or have == want


def unfinished(path: str | Path) -> str | None:
    """Why the run folder ``path`` (or the folder of the checkpoint file ``path``) does not hold a
    finished run, in words that name the fix; None where it does (or holds no run record at all).
    A run stopped before its ``metrics.json`` (killed, or still training), or grown by ``--resume
    --epochs N`` and stopped before its new record (the old ``metrics.json`` of fewer epochs beside
    a ``config.yaml`` of N), has a ``best.pt`` that is the best epoch so far, not the one its
    record, calibration and test predictions describe; a run of members is checked member by member."""
    from ..files import read_json

    top = _record_folder(path)
    if not top.is_dir():
        return None
    for run in (top, *member_folders(top)):
        record = run / CONFIG if (run / CONFIG).is_file() else run / MEMBERS_RECORD
        if not record.is_file():
            continue
        try:
            metrics = read_json(run / METRICS)
        except FileNotFoundError:
            what = ("its best.pt is the best epoch so far" if (run / BEST).is_file() else
                    "its files are not all of one finished run")  # (members without a GNN hold no best.pt)
            return (f"{run} holds no metrics.json: the run has not finished (stopped, or still training), "
                    f"so {what}; finish it with siggate train --resume {top}")
        except PermissionError:  # (not damage: a permission to grant)
            return (f"{run / METRICS}: Permission denied, so whether the run finished is not known; give your "
                    "user permission to it (chmod, or the folder's owner)")
        except (OSError, ValueError) as exc:  # (damaged: not a run stopped before its record)
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            return (f"{run / METRICS} cannot be read ({why}): the run folder is damaged; copy it again from "
                    f"where it was made, or finish the run again with siggate train --resume {top}")
        try:
            want = (read_record(record).get("train") or {}).get("epochs")
        except (ConfigError, OSError, AttributeError):  # (damaged: its loader names it)
            continue
        if not records_epochs(metrics, want):
            return (f"{run}: its {record.name} says {want} epochs and its metrics.json records {metrics['epochs']}: "
                    f"grown by --resume --epochs and stopped before it finished, so its files are of two runs; finish "
                    f"it with siggate train --resume {top}")
    return None
