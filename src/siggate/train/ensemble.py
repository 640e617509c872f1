"""A run of several members combined into one predictor: ``siggate train --ensemble N`` (N GNN
members that differ only in their seed) and ``--members KIND,...`` (members of several kinds,
:data:`~siggate.train.members.MEMBER_KINDS`).

:func:`train_members` is a short pipeline:

1. prepare the data once, split with the first seed (``cfg.data``): a member's seed must not
   move molecules between train, val and test, or the combination's test set would leak; the
   graphs carry the GNN's encodings only when a GNN member reads them;
2. build the members (:func:`~siggate.train.members.build_members`), then record the run's
   config and members (``members.yaml``, what ``--resume`` checks the flags against): data or
   options refused before this leave the folder as it was;
3. fit each into its folder (:func:`~siggate.train.members.fit_member`): a finished member is
   reused, an interrupted GNN member resumes from its ``last.pt``;
4. combine them (:class:`~siggate.predictors.combine.Combination`: equal weights, or weights
   fitted on the validation split) and score every member and the combination on val and test;
5. record it.

Layout of the folder::

    OUT/members.yaml          the run's config, with ``_meta.members``: the kinds, ``--ensemble``
                              and ``--weights`` (written before the first member is fitted)
    OUT/predictor.json        the combination: its members' folders, the weights, the run's
                              config, split seed and data source
    OUT/metrics.json          each member's and the combination's val/test metric and summaries
                              (``members``), as the terminal shows them, and ``init``: what the
                              GNN members started from (with ``train.init``; a run of one model's)
    OUT/test_predictions.csv  the combination's test predictions with their spread over members
                              (CSV runs; also splits.csv and data_report.csv)
    OUT/calibration.json      the combination's split-conformal calibration (``predict --coverage``)
    OUT/domain.json, OUT/domain_fingerprints.npz   the training molecules' applicability domain
    OUT/parity.png or roc.png, learning_curves.png, residuals.png   pictures (CSV runs; train.plots)
    OUT/member0/ ...          the members' folders (a GNN member's is an ordinary run folder)

Member ``i`` of ``--ensemble N`` trains with seed ``train.seed + i``. The combination predicts the
(weighted) mean of its members' predictions (probabilities for classification, target units for
regression) and reports their standard deviation over members (``ddof=0``: 0 for one member) as
the uncertainty. Folders written before ``predictor.json`` (``ensemble.json``) still load
(:func:`~siggate.train.members.load_predictor`).
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from ..config import Config
from ..data.base import GraphDataset
from ..options import run_weights
from ..predictors.base import out_of_sample
from ..predictors.combine import Combination
from .dataprep import prepare_data
from .members import build_members, fit_member, parse_kinds, run_encodings
from .metrics import mean_counts, metric_texts
from .record import data_source, record_results, write_config, write_csv_run_tables, write_metrics
from .rundir import MEMBER_FIT_RECORD, MEMBERS_RECORD
from .runfiles import CONFIG, LAST, METRICS
from .scoring import split_metric, split_summary

log = logging.getLogger("siggate.train")

SPLITS = ("val", "test")


def train_members(cfg: Config, out: str | Path, kinds=("gnn",), gnn_copies: int = 1, weights: str | None = None,
                  resume: bool = False, progress: bool = True, device: torch.device | None = None,
                  dataset: GraphDataset | None = None) -> dict:
    """Train the members ``kinds`` (``gnn_copies`` GNN members) of ``cfg`` into ``out``, combine
    them with ``weights`` (``None`` or ``"equal"``: equal; ``"val"``: fitted on the validation split,
    for members of several kinds, :func:`~siggate.options.run_weights`) and write
    the folder the module docstring describes. ``dataset``: the prepared data (default: prepared
    from ``cfg.data``). Returns its ``metrics.json``.

    Raises:
        MemberError: an unknown kind or ``gnn_copies < 1``.
    """
    out = Path(out)
    kinds = parse_kinds(kinds)
    weights = None if run_weights(kinds, weights) == "equal" else "val"  # copies of one kind: nothing to weigh
    ds = dataset if dataset is not None else prepare_data(cfg.data, run_encodings(kinds, cfg.model), cfg.train.seed,
                                                          progress=False)
    built = build_members(kinds, cfg, out, gnn_copies, progress, device, resume, weights)
    if resume:  # a member that refuses these flags refuses them before the record is rewritten with them
        _check_resumable(built, out, cfg)
        done = _finished_record(out, cfg, kinds, gnn_copies, weights, built)
        if done is not None:  # a finished run resumed: its record stays as it is (as a run of one model's)
            log.info("%s: the run of members has finished; nothing to train", out)
            return done
    for _, _, member in built:  # a member that would refuse the data refuses it before any member trains
        if hasattr(member, "check_trainable"):
            member.check_trainable(ds)
    init = _init_weights(out, cfg, built, resume)
    # recorded only now: data that cannot be used leaves no record, so the command with its
    # flags mended runs without --overwrite
    out.mkdir(parents=True, exist_ok=True)
    source = data_source(cfg.data)
    write_config(out / MEMBERS_RECORD, cfg.to_dict(), source=source, task=ds.info.to_dict(),
                 members={"kinds": kinds, "ensemble": int(gnn_copies), "weights": weights or "equal"},
                 **({"init_weights": init} if init else {}))
    def fitted_with(folder: Path) -> None:  # what _check_resumable reads when a resume would reuse the member
        write_config(folder / MEMBER_FIT_RECORD, cfg.to_dict(), source=source)

    # (a GNN member's run folder holds its own config.yaml, which its checkpoints are checked against)
    fitted = [fit_member(member, out / name, ds, resume, device,
                         on_fitted=fitted_with if getattr(member, "folder", None) is None else None)
              for name, _, member in built]
    record = {"config": cfg.to_dict(), "split_seed": cfg.train.seed, "data_source": source}
    combo = Combination(fitted, weights, [name for name, _, _ in built], record,
                        groups=[member.kind for member in fitted]).fit_weights(ds)
    splits = [s for s in SPLITS if ds.splits.get(s)]  # no test split: the scikit-learn estimators' fit
    preds = {s: [out_of_sample(m, s, ds.splits[s]) for m in fitted] for s in splits}  # val: as the weights saw it
    both = {s: combo.combine(preds[s]) for s in splits}
    started = [_member_init(member) for member in fitted]  # the weights each GNN member started from
    metrics = {
        "dataset": ds.info.name, "level": ds.info.level, "task": ds.info.task, "metric": ds.info.metric,
        "higher_is_better": ds.info.higher_is_better, "seed": cfg.train.seed,
        "epochs": cfg.train.epochs,  # the config's, which a resume's record is checked against (a growth)
        # as a run of one model records it: what its GNN members started from (they start from one file)
        **({"init": next(r for r in started if r)} if any(started) else {}),
        "members": [{"name": name, "kind": member.kind, "seed": seed,
                     **({"init": started[i]} if started[i] else {}),
                     **_scores(ds, {s: preds[s][i].mean for s in splits})}
                    for i, (name, seed, member) in enumerate(built)],
        "weighting": combo.weighting, "weights": None if combo.weights_ is None else combo.weights_.tolist(),
        **_scores(ds, {s: both[s].mean for s in splits}),
        "splits": ds.sizes(),
    }
    combo.save(out, members=False)  # fit_member saved each member; a reused one is not rewritten
    metrics.update(record_results(out, ds, {s: both[s].mean for s in splits}, {s: both[s].spread for s in splits},
                                  _histories(fitted, [name for name, _, _ in built]), cfg.data.name == "csv"))
    if cfg.data.name == "csv":  # the combination's test predictions, with their spread; every row's split
        test = both.get("test")
        write_csv_run_tables(out, ds, None if test is None else test.mean, None if test is None else test.spread,
                             data=cfg.data)
    write_metrics(out, metrics)
    return metrics


def _member_init(member) -> dict | None:
    """What a fitted GNN member's own ``metrics.json`` records of the weights ``train.init``
    started it from (:func:`~.record.init_record`), or None (no ``train.init``, another kind)."""
    record = (getattr(member, "metrics_", None) or {}).get("init")
    return record if isinstance(record, dict) else None


def _finished_record(out: Path, cfg: Config, kinds: list[str], gnn_copies: int, weights: str | None,
                     built) -> dict | None:
    """The ``metrics.json`` of the run of members in ``out`` where it records this run finished:
    it is of this config's epochs, its :data:`~.rundir.MEMBERS_RECORD` holds these members and
    this config (the keys that say where and how a run executes aside, ``--threads`` among them),
    every GNN member's record is of its config's epochs and every other member is saved; else
    None. Resumed so, it was combined, calibrated and recorded again (with the new thread count
    written over the old)."""
    from ..files import read_json
    from ..predictors.base import MANIFEST, read_manifest
    from .checkpoint import config_differences
    from .rundir import read_saved_config, records_epochs, saved_members
    from .study import reuse_status

    try:
        metrics = read_json(out / METRICS)
        members, saved = saved_members(out), read_saved_config(out / MEMBERS_RECORD)
    except (OSError, ValueError):  # (a damaged record: ConfigError, a ValueError) trained and recorded again
        return None
    want = {"kinds": list(kinds), "ensemble": int(gnn_copies), "weights": weights or "equal"}
    if not isinstance(metrics, dict) or not (out / MANIFEST).is_file() or members != want:
        return None
    if not records_epochs(metrics, cfg.train.epochs, strict=True):  # grown and stopped after its members, before
        return None                                                   # its record (or recorded before it said its epochs)
    if config_differences(saved, cfg.to_dict()):  # (a moved CSV too: recorded again with its new path)
        return None
    for name, _, member in built:
        folder = getattr(member, "folder", None)
        if folder is not None and reuse_status(folder, member.cfg.to_dict()).state != "done":
            return None
        if folder is None and not (out / name / MANIFEST).is_file():
            return None
        try:
            if folder is None and read_manifest(out / name).get("kind") != member.kind:  # swapped: its fit refuses it
                return None
        except (OSError, ValueError):  # damaged: its fit names it
            return None
    problem = _unreadable(out)
    if problem:  # finished, but a file predict reads is damaged or gone: recorded again from the members
        log.warning("%s: the finished run cannot be read (%s); its members are read and its record written again",
                    out, problem)
        return None
    return metrics


def _unreadable(out: Path) -> str | None:
    """Why the finished run of members in ``out`` cannot be read as ``predict`` reads it (its
    combination, its members' arrays, its calibration), or None."""
    from ..files import read_json
    from ..predictors.base import PredictorFileError
    from .checkpoint import CheckpointError
    from .members import load_predictor
    from .rundir import CALIBRATION

    try:
        load_predictor(out)
        if (out / CALIBRATION).exists():
            try:
                read_json(out / CALIBRATION)
            except ValueError as exc:
                return f"{out / CALIBRATION}: {exc}"
    except (PredictorFileError, CheckpointError, OSError, ValueError) as exc:
        if isinstance(exc, PermissionError):  # not damaged: the user's to grant (named by the command)
            raise
        return str(exc)
    return None


def _init_weights(out: Path, cfg: Config, built, resume: bool) -> dict | None:
    """The record of the weights ``train.init`` names (``{"path", "sha256"}``) that the run's GNN
    members start from, kept in its :data:`~.rundir.MEMBERS_RECORD`; None without ``train.init``.

    A GNN member that has not started reads the file when its turn comes, so a resume in which one
    has started and another has not is refused where the file holds other weights than the record's
    (a pretraining exported again, an upgraded shipped file): its members would start from different
    weights. Where none has started they all start from the file as it is now (a warning says so);
    where every one has started, the file is not read (it may be gone) and the record stays.

    Raises:
        ConfigError: the weights changed since the run started (named, both digests)."""
    from ..config import ConfigError
    from ..files import file_digest
    from .init_weights import resolve_init
    from .rundir import read_record

    if not cfg.train.init:
        return None
    then = None
    if resume and (out / MEMBERS_RECORD).is_file():
        try:
            then = (read_record(out / MEMBERS_RECORD).get("_meta") or {}).get("init_weights")
        except (OSError, ValueError):  # a damaged record is rewritten: nothing to compare with
            then = None
    gnns = [m for _, _, m in built if getattr(m, "kind", None) == "gnn" and getattr(m, "folder", None) is not None]
    waiting = [m for m in gnns if not (Path(m.folder) / LAST).is_file()]
    if not waiting:
        return then if isinstance(then, dict) else None
    path = resolve_init(cfg.train.init)
    now = {"path": str(path.resolve()), "sha256": file_digest(path)}
    if not (isinstance(then, dict) and then.get("sha256") and then["sha256"] != now["sha256"]):
        return now
    if len(waiting) == len(gnns):  # none has started: they all start from the file as it is now
        log.warning("train.init: %s holds other weights than when this run started; no GNN member has started from "
                    "those, so they all start from these", path)
    else:
        raise ConfigError(f"train.init: {path} holds other weights than when this run started (sha256 "
                          f"{then['sha256'][:16]}... then, {now['sha256'][:16]}... now), and the run's GNN member "
                          f"{Path(waiting[0].folder).name} has yet to start from them: its members would start from "
                          "different weights; put the weights of then back, or train into a new --out")
    return now


def _check_resumable(built, out: Path, cfg: Config) -> None:
    """Refuse (:class:`~.checkpoint.CheckpointError`, as its own resume would) flags that a GNN
    member's interrupted run cannot resume with, and a config other than the one a saved member
    of another kind was fitted under (:data:`~.rundir.MEMBER_FIT_RECORD`; ``members.yaml`` edited
    between the fit and the resume reused an svr fitted on another split beside an rf fitted on
    the new one, and the weights were fitted on the svr's training molecules), before
    :data:`~.rundir.MEMBERS_RECORD` is written: the record took them first, and the run's own flags
    were then refused as differing from it. The rule is the resume's own
    (:func:`~.rundir.resume_differences`: a moved CSV of the recorded content, more epochs, where
    the run executes may differ). A member saved before its record was kept is not checked."""
    from .checkpoint import CheckpointError
    from .rundir import read_saved_config, resume_differences
    from .study import saved_run_config

    for name, _, member in built:
        folder = getattr(member, "folder", None)
        if folder is None:
            record = Path(out) / name / MEMBER_FIT_RECORD
            if not record.is_file():
                continue
            diffs = resume_differences(read_saved_config(record), cfg.to_dict(), record)
            if diffs:
                raise CheckpointError(f"cannot reuse the {member.kind} member in {record.parent}: it was fitted under "
                                      f"another config ({'; '.join(diffs)}); resume with the run's own flags and "
                                      "record, or train into a new --out")
            continue
        if not (Path(folder) / LAST).is_file():
            continue
        saved = saved_run_config(folder)
        diffs = resume_differences(saved[0], member.cfg.to_dict(), Path(folder) / CONFIG) if saved else []
        if diffs:
            raise CheckpointError(f"cannot resume from {Path(folder) / LAST}: the config differs ({'; '.join(diffs)}); "
                                  "resume with the run's own flags, or train into a new --out")


def _histories(members, names) -> dict:
    """``{name: history}`` of the members that trained epoch by epoch (the GNN members)."""
    out = {}
    for name, member in zip(names, members):
        history = (getattr(member, "metrics_", None) or {}).get("history")
        if history:
            out[name] = history
    return out


def _scores(ds, preds: dict) -> dict:
    """``{split: metric, <split>_metrics: summary}`` of the predictions ``preds`` per split
    (target units, or probabilities for classification); ``test`` is ``None`` without a test split."""
    out = {"test": None, **{s: split_metric(ds.info, ds.splits[s], p, s) for s, p in preds.items()}}
    out.update({f"{s}_metrics": split_summary(ds.info, ds.splits[s], p, s) for s, p in preds.items()})
    return out


def member_lines(metrics: dict) -> list[str]:
    """One line per member and one for the combination of :func:`train_members`' ``metrics``:
    name, kind and seed (or the weighting), then for val and test the mean over targets of the
    split's summary (MAE, RMSE, R2 or ROC-AUC, PR-AUC, ...; the task's metric where a split has no
    summary), each with ``(k of n)`` where it is over fewer of the ``n`` targets (a target unlabelled
    in the split, a ROC-AUC of one class), as the split's mean line says, so that one reads what
    each member adds."""
    def scores(m: dict, split: str) -> str:
        res = m.get(f"{split}_metrics") or {}
        if res.get("mean"):
            per = res.get("per_target") or {}
            return f"{split} " + "  ".join(metric_texts(res["mean"], mean_counts(res) if per else None, len(per)))
        return f"{split} {metrics['metric']} " + ("n/a" if m.get(split) is None else f"{m[split]:.4g}")

    rows = [(m["name"], f"{m['kind']} seed {m['seed']}", m) for m in metrics["members"]]
    rows.append(("combined", f"{metrics.get('weighting', 'equal')} weights", metrics))
    lines = [f"{name:>9}  {what:<13}  {scores(m, 'val')}   {scores(m, 'test')}" for name, what, m in rows]
    if metrics.get("weighting") == "val":  # a val score of the rows the weights were fitted on flatters
        lines.append(f"{'':>9}  the combination's val scores are in-sample (its weights were fitted on the val rows); "
                     "its test scores are out of sample")
    sole = single_member_targets(metrics)
    if sole:
        lines.append(f"{'':>9}  the val weights give {', '.join(repr(t) for t in sole)} to one member alone: "
                     "its uncertainty (the weighted members' spread) is 0 for every molecule there; read "
                     "outside_domain for molecules unlike the training set")
    return lines


def single_member_targets(metrics: dict) -> list[str]:
    """The targets whose weights (``metrics["weights"]``, ``[M][T]``) rest on one member: their
    weighted spread, the combination's uncertainty, is 0 for every molecule."""
    weights = metrics.get("weights")
    if not weights or len(weights) < 2:
        return []
    names = list(((metrics.get("val_metrics") or {}).get("per_target")) or {})  # the targets, in order
    if len(names) != len(weights[0]):
        names = [f"target{t}" for t in range(len(weights[0]))]
    return [names[t] for t in range(len(weights[0])) if sum(w[t] > 0 for w in weights) == 1]


def member_shares(metrics: dict) -> dict:
    """What each member of :func:`train_members`' ``metrics`` scored and weighed, and the
    combination (the harnesses keep this in their rows, so that a member's share outlives the run
    folder): ``weighting``; ``combination`` and each of ``members`` (in order, with ``name`` and
    ``kind``) with ``val`` and ``test`` (the task's metric, mean over targets) and
    ``val_summary``/``test_summary`` (the split summaries' means: MAE, RMSE, R2 or ROC-AUC, ...;
    ``None`` where a split has none); each member's ``weight`` is its combination weight, mean
    over targets (``1/n`` under equal weights)."""
    def scores(m: dict) -> dict:
        return {"val": m.get("val"), "test": m.get("test"),
                **{f"{s}_summary": (m.get(f"{s}_metrics") or {}).get("mean") for s in ("val", "test")}}

    weights, members = metrics.get("weights"), metrics["members"]
    return {"weighting": metrics.get("weighting", "equal"), "combination": scores(metrics),
            "members": [{"name": m.get("name"), "kind": m.get("kind", "gnn"),  # older --ensemble runs: GNN copies
                         "weight": (sum(weights[i]) / len(weights[i])) if weights else 1 / len(members), **scores(m)}
                        for i, m in enumerate(members)]}
