"""``siggate`` command line: wires configs, data, training and analyses together.

Sub-commands: ``train``, ``evaluate``, ``predict``, ``explain``, ``pretrain``, ``data`` here; ``compare``, ``analyze``
and ``bench`` are registered by their own light modules (see ``EXTRA_COMMANDS``). Building the
parser imports no torch, PyG, RDKit, SciPy or matplotlib (``tests/test_cli_help.py``): a
parser's ``func`` may be ``"module:function"``, imported only when that command runs.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib
import importlib.util
import json
import logging
import math
import os
import sys
from pathlib import Path

from .config_args import (
    CLIError,
    add_command,
    add_config_args,
    add_device_flag,
    add_set_flag,
    add_threads_flag,
    check_device,
    check_out_folder,
    config_from_args,
    flag_key_clash,
    set_keys,
)
from .files import same_file
from .options import (
    DEFAULT_MEMBERS,
    DEFAULT_WEIGHTS,
    LOG_FORMAT,
    MEMBER_KIND_NAMES,
    MEMBER_WEIGHTS,
    PREDICT_MAX_ATOMS,
    RECIPE_MEMBERS,
    add_cache_dir_flag,
    add_data_root_flag,
    add_progress_flag,
    init_is_none,
    init_is_shipped,
    progress_enabled,
    recipe_members,
    run_weights,
)
from .train.runfiles import CONFIG, LAST

# name -> light module exposing ``register(subparsers)``; each sets ``func`` on its parser.
EXTRA_COMMANDS = {
    "compare": "siggate.train.compare",
    "analyze": "siggate.analysis.cli",
    "bench": "siggate.perf.cli",
}

#: the train keys only a GNN member reads: a run without one refuses them (--set), not ignores them
GNN_TRAIN_KEYS = frozenset(f"train.{k}" for k in ("epochs", "batch_size", "eval_batch_size", "lr", "weight_decay",
                                                  "warmup_epochs", "warmup_start", "clip", "on_nan", "eval_norm",
                                                  "select", "loss", "normalize_targets"))

#: the examples at the end of each sub-command's ``--help``
EXAMPLES = {
    "train": [
        "siggate train --config zinc --epochs 50 --seed 1 --out runs/zinc-s1",
        "siggate train --data my.csv --target-col logS --task regression   # your own CSV of SMILES",
        "siggate train --data my.csv --target-col logS --ensemble 5 --out runs/logS",
    ],
    "evaluate": [
        "siggate evaluate --checkpoint runs/x --split all          # the run's own splits",
        "siggate evaluate --checkpoint runs/x --data external.csv --output scores.json",
        "siggate evaluate --checkpoint runs/logS --data test.csv --target-col logS   # an ensemble folder",
    ],
    "predict": [
        'siggate predict --checkpoint runs/x "CCO" "c1ccccc1O"',
        "siggate predict --checkpoint runs/x --input molecules.csv --output preds.csv --coverage 0.9",
        "siggate predict --checkpoint runs/pattern-elementwise-seed0 --split test --output nodes.csv",
    ],
    "explain": [
        'siggate explain --checkpoint runs/x "CCO" "c1ccccc1O" --out explained/',
        "siggate explain --checkpoint runs/x --input molecules.csv --out explained/ --steps 100",
    ],
    "pretrain": [
        "siggate pretrain --smiles moses --out runs/pretrain --molecules 100000 --epochs 15",
        "siggate pretrain --smiles my_library.smi --out runs/pt --exclude my_test.csv",
        "siggate pretrain --smiles moses --out runs/pretrain --resume        # continue an interrupted run",
    ],
    "data": [
        "siggate data list",
        "siggate data verify zinc --data-root ../shared/data",
        "siggate data verify pattern --max-graphs 100",
    ],
}


def _attention(cfg) -> str:
    """``gate=...`` for the banner, or ``attention=off`` when the model has no attention branch."""
    return f"gate={cfg.model.gate}" if cfg.model.attn else "attention=off"


def _smiles_column_in_any_case(data) -> None:
    """Read SMILES from the one column of the CSV ``data.csv`` that is ``data.smiles_col`` in
    another case (ChEMBL's export names it ``Smiles``) where the file has no column of that name,
    as ``predict`` reads a file without the run's column; said on stderr."""
    from .data.csvdata import smiles_column_in_any_case

    found = smiles_column_in_any_case(data.csv, data.sep, data.smiles_col)
    if found is not None:
        print(f"siggate train: reading SMILES from column {found!r} (the file has no column {data.smiles_col!r}; "
              "choose another with --smiles-col)", file=sys.stderr)
        data.smiles_col = found


def _init_path(init: str | None) -> str | None:
    """``train.init`` where it names a path (a folder or file that ``--overwrite`` must not remove),
    else None: the shipped weights' names and ``none`` are no path (an --out named 'pretrained' was
    refused as the --init that --overwrite would remove)."""
    return None if not init or init_is_none(init) or init_is_shipped(init) else init


def cmd_train(args) -> int:
    from .train import rundir

    if args.resume and args.overwrite:
        raise CLIError("--resume continues the run in the folder and --overwrite replaces it; give one")
    resume = _resume_dir(args)
    kinds, weights = _member_choice(args, resume)
    several = args.ensemble is not None or kinds != ["gnn"]
    saved = None
    if resume is not None:
        if not several and rundir.is_members_folder(resume):
            raise CLIError(_no_run_to_resume(resume, several))
        if several and not rundir.is_members_folder(resume) and _holds_one_run(resume):
            raise CLIError(_no_run_to_resume(resume, several))  # its last.pt would pass for a member's
        if several:
            _check_saved_members(resume, kinds, weights, args)
        path = rundir.saved_config_path(resume, ensemble=several)
        if path.is_file():
            saved = rundir.read_saved_config(path)
            if args.config is None:  # the run's own config; flags given again must agree with it
                args.config = str(path)
        elif not (resume / LAST).is_file():  # a last.pt alone: the flags and its checkpoint must agree
            raise CLIError(_no_run_to_resume(resume, several))
    cfg = config_from_args(args)
    given_keys = set_keys(args)  # (config_from_args has parsed each --set item)
    if saved is None and cfg.data.name == "csv" and cfg.data.csv:  # (a resumed run's config names the column read)
        _smiles_column_in_any_case(cfg.data)
    if saved is not None:
        cfg = rundir.keep_run_schedule(cfg, saved, given_keys)
        diffs = rundir.resume_differences(saved, cfg.to_dict(), path)
        if diffs:
            raise CLIError(f"--resume {resume}: the flags differ from the run's config ({'; '.join(diffs)}); "
                           f"drop them to continue the run as it was, or start a new run with another --out")
        if cfg.data.name == "csv" and cfg.data.csv and not Path(cfg.data.csv).exists():
            fit = rundir.estimator_fit(path)
            if fit:  # (the CSV fit wrote of X and y went when fit returned: no new path to give)
                raise CLIError(f"--resume {resume}: the run was made by {fit}, whose CSV of X and y is removed when "
                               "fit returns, so the run cannot go on from here; fit the estimator again")
            raise CLIError(f"--resume {resume}: the run's CSV {cfg.data.csv} is gone; if it moved, give its new path "
                           "with --data NEW_PATH (the file must be the one the run trained on: its SHA-256 is checked)")
        changed = rundir.changed_since(path, cfg.data)
        if changed:
            raise CLIError(f"--resume {resume}: {changed}; restore the file, or start a new run with another --out")
        otherwise = rundir.reading_changed(rundir.recorded_source(path), cfg.data, rundir.recorded_chirality(path))
        if otherwise:
            raise CLIError(f"--resume {resume}: {otherwise}; start a new run with another --out, or resume it with the "
                           "siggate version that started it")
    epochs_given = (args.epochs is not None or getattr(args, "budget", None) is not None
                    or "train.epochs" in given_keys)
    if resume is not None and (saved is None or epochs_given):  # a saved schedule cannot shrink by itself
        _check_resumed_epochs(resume, cfg.train.epochs, several)  # (resume_run reads last.pt again later)
    if args.ddp and several:
        if args.ensemble is None and getattr(args, "members", None) is None:  # the record's or recipe's, not the user's
            raise CLIError(f"--ddp trains one GNN, and the run in {resume} trains the members {','.join(kinds)} one "
                           "after the other: resume it without --ddp" if resume is not None else
                           f"--ddp trains one GNN, and this recipe trains the members {','.join(kinds)} one after the "
                           "other: add --members gnn to train its GNN under torchrun")
        raise CLIError("--ensemble/--members train their members one after the other; they do not combine with --ddp")
    from .train.members import run_refusal

    started = resume is not None and any((f / LAST).is_file() for f in rundir.run_folders(resume))
    why = run_refusal(cfg, kinds, 1 if args.ensemble is None else args.ensemble, several, started, args.ddp)
    if why:  # refused before a folder is claimed (training checks it too)
        raise CLIError(why)
    if "gnn" not in kinds:  # a flag that only a GNN reads is refused, not ignored (a recipe's own values stay quiet)
        init_flag = "--init" if args.init is not None else "--set train.init"
        given = {init_flag: bool(cfg.train.init) and (args.init is not None or "train.init" in given_keys),
                 "--epochs": args.epochs is not None,
                 "--budget": args.budget is not None, "--on-nan": args.on_nan is not None}
        for flag in (f for f, on in given.items() if on):
            raise CLIError(f"{flag} applies to a GNN member, and --members {','.join(kinds)} holds no GNN: drop "
                           f"{flag}, or add gnn to --members")
        unread = sorted(k for k in given_keys if k.startswith("model.") or k in GNN_TRAIN_KEYS)
        if unread:  # a --set list shared by runs of other members is fine; say that these go unread here
            print(f"siggate train: warning: --members {','.join(kinds)} holds no GNN, so no member reads "
                  f"--set {', '.join(unread)}", file=sys.stderr)
    if args.overwrite and cfg.data.name == "csv":  # a file or column it would refuse: before the earlier run goes
        from .data.csvdata import check_columns

        check_columns(cfg.data.csv, cfg.data.smiles_col, list(cfg.data.target_cols), cfg.data.task, cfg.data.split,
                      cfg.data.sep)
    if args.ddp:
        if args.device != "cpu":
            raise CLIError("--device with --ddp: torchrun gives each rank its device (nccl on GPU); drop --device")
        ddp_out = resume if resume is not None else (Path(args.out) if args.out else None)
        if ddp_out is None:
            raise CLIError("--ddp needs --out DIR (or --resume RUN): every rank must write to the same folder, "
                           "so it cannot be a default name that the ranks pick one by one")
        if args.overwrite:
            _check_inputs_outside(ddp_out, {"--data": cfg.data.csv, "--init": _init_path(cfg.train.init)})
        return _train_ddp(cfg, args, ddp_out, resume is not None)
    device = check_device(args.device)
    out = resume if resume is not None else default_out_dir(cfg, args.out)
    if args.overwrite:
        _check_inputs_outside(out, {"--data": cfg.data.csv, "--init": _init_path(cfg.train.init)})
    lock = claim_out_dir(out, resume=resume is not None, overwrite=args.overwrite,
                         default_name=resume is None and not args.out, cfg=cfg)
    out = lock.folder
    try:
        with _refusal_takes_back(lock):
            if several:
                return _train_members(cfg, out, args, kinds, weights, resume is not None, device)
            from .train.distributed import DistContext
            from .train.gnn_member import mark_run
            from .train.pipeline import train

            print(f"siggate train: dataset={cfg.data.name} {_attention(cfg)} layers={cfg.model.layers} "
                  f"dim={cfg.model.dim} epochs={cfg.train.epochs} seed={cfg.train.seed} -> {out}", flush=True)
            m = train(cfg, out, resume=resume is not None, progress=progress_enabled(args),
                      dist=DistContext(device=_torch_device(device)))
            mark_run(out)
    except KeyboardInterrupt as exc:
        said, status = _stopped(exc)
        hint = (f"nothing of the new run was saved, and the earlier run in {out} is kept; run the same command again "
                "to replace it" if getattr(exc, "earlier_run_kept", False) else _resume_hint(out, args))
        _say_stopped(f"siggate train: {said}; {hint}")
        return status
    finally:
        lock.release()
    print(json.dumps({k: m[k] for k in ("dataset", "metric", "best_epoch", "val", "test", "params", "seconds")}, indent=2))
    _print_summaries(m, out)
    return 0


@contextlib.contextmanager
def _refusal_takes_back(lock):
    """A run in the folder that ``lock`` claimed (None: this process claimed none, a DDP rank
    other than 0), refused on bad input (:func:`_user_errors`) before it saved anything, takes back
    the record it wrote (:func:`siggate.train.rundir.forget_refused_run`), so that the command
    with its input mended starts there afresh, and the run ``--overwrite`` set aside
    (:func:`siggate.train.rundir.set_aside`) comes back: a file the checks refuse (no numeric
    label, an empty split) no longer costs the finished run, nor does Ctrl-C or a crash before the
    new run saved more than its record. Only where the run found no file of a
    run's names in the folder (:func:`~siggate.train.rundir.run_entries`): a user's own files of
    those names would go with it. A resumed run never does. Otherwise (the run went on, finished
    or stopped) the set-aside run is removed."""
    from .train import rundir

    empty = lock is not None and not rundir.run_entries(lock.folder)  # of a run's names; a user's notes may stay
    try:
        yield
    except BaseException as exc:  # a refusal; or Ctrl-C, a crash, where --overwrite set a run aside
        if empty and (isinstance(exc, _user_errors()) or (lock.folder / rundir.ASIDE).is_dir()):
            with contextlib.suppress(OSError):  # the refusal, not a failure to tidy up, is the error
                if rundir.forget_refused_run(lock.folder) or not rundir.run_files(lock.folder):
                    if rundir.restore_aside(lock.folder) and isinstance(exc, KeyboardInterrupt):
                        exc.earlier_run_kept = True  # (its hint: not to resume the earlier run, but to run again)
        raise
    finally:
        if lock is not None:
            with contextlib.suppress(OSError):
                rundir.drop_aside(lock.folder)


def _print_summaries(m: dict, out: Path | None = None, file=None) -> None:
    """The best epoch's ``val_metrics``/``test_metrics`` of ``m``, one line per target, and the
    row-level files a CSV run wrote into ``out``."""
    from .train.metrics import format_summary

    for key, scores in m.items():
        if key.endswith("_metrics") and isinstance(scores, dict) and "per_target" in scores:
            print("\n".join(format_summary(key[:-len("_metrics")], scores)), file=file or sys.stdout)
    if out is not None and (out / "test_predictions.csv").is_file():
        print(f"test predictions: {out / 'test_predictions.csv'}; every row's split: {out / 'splits.csv'}; "
              f"dropped and suspicious rows: {out / 'data_report.csv'}", file=file or sys.stdout)


def _check_resumed_epochs(resume: Path, epochs: int, several: bool) -> None:
    """Refuse, before the data load, ``--epochs`` below what the run (each GNN member of a run of
    several) has trained: the rule :func:`~siggate.train.loop.resume_run` applies, named sooner."""
    from .train.checkpoint import CheckpointError, shrink_refusal, trained_epochs
    from .train.record import resume_checkpoint
    from .train.rundir import member_folders

    for last in [resume_checkpoint(m) for m in member_folders(resume)] if several else [resume_checkpoint(resume)]:
        if not last.is_file():
            continue
        try:
            refusal = shrink_refusal(last, epochs, trained_epochs(last))
        except CheckpointError as exc:
            raise CLIError(str(exc)) from None
        if refusal:
            raise CLIError(refusal)


def _resume_dir(args) -> Path | None:
    """The run folder ``--resume`` continues (``--resume RUN``, else ``--out``, else the default
    folder's first name), or None without ``--resume``."""
    if not args.resume:
        return None
    if isinstance(args.resume, str):
        if args.out and Path(args.out) != Path(args.resume):
            raise CLIError(f"--resume {args.resume} and --out {args.out} name two folders; give the run once")
        return Path(args.resume)
    if args.out:
        return Path(args.out)
    raise CLIError("--resume needs the run folder: siggate train --resume RUN (or --resume --out RUN)")


def _member_choice(args, resume: Path | None) -> tuple[list[str], str]:
    """The run's member kinds (checked against ``--ensemble``) and weights: ``--members`` and
    ``--weights`` where given, else the recipe's (:func:`~siggate.options.recipe_members`). A
    ``--resume`` of a run of several members takes what it recorded for whichever of members,
    weights and ``--ensemble`` are not given; a ``--resume`` of any other folder without
    ``--members`` the GNN alone (whatever the recipe's default)."""
    from .config_args import recipe_name
    from .train import rundir
    from .train.members import GNN, MemberError, check_copies, parse_kinds

    saved = _saved_members(resume) if resume is not None and rundir.is_members_folder(resume) else None
    try:
        if saved:
            kinds = parse_kinds(args.members or saved.get("kinds") or ["gnn"])
            weights = args.weights or saved.get("weights", DEFAULT_WEIGHTS)
            if args.ensemble is None and GNN in kinds and int(saved.get("ensemble", 1)) != 1:
                args.ensemble = int(saved["ensemble"])
        elif resume is not None and args.members is None and not rundir.is_members_folder(resume):
            kinds, weights = [GNN], args.weights or DEFAULT_WEIGHTS
        else:
            members, weights = recipe_members(recipe_name(args), args.members)
            kinds, weights = parse_kinds(members), args.weights or weights
        check_copies(kinds, 1 if args.ensemble is None else args.ensemble)
        return kinds, weights
    except MemberError as exc:
        raise CLIError(str(exc)) from None


def _members_flags(members: dict, weights: bool = False) -> str:
    """The flags that name the recorded ``members`` of a run (``rundir.saved_members``);
    ``--weights`` where it is not ``equal``, or always with ``weights`` (the flag that differs)."""
    kinds = list(members.get("kinds") or [])
    return " ".join(([f"--members {','.join(kinds)}"] if kinds != ["gnn"] else [])
                    + ([f"--ensemble {members['ensemble']}"] if "gnn" in kinds else [])
                    + ([f"--weights {members.get('weights', 'equal')}"]
                       if weights or members.get("weights", "equal") != "equal" else []))


def _saved_members(out: Path) -> dict | None:
    """``rundir.saved_members(out)``; a record with unknown weights is a one-line :class:`CLIError`."""
    from .config import ConfigError
    from .train import rundir

    try:
        return rundir.saved_members(out)
    except ConfigError:  # a record that is none: it names its own remedy
        raise
    except ValueError as exc:
        raise CLIError(f"--resume {out}: {exc}; restore the file, or start a new run with another --out") from None


def _check_saved_members(out: Path, kinds: list[str], weights: str, args) -> None:
    """Refuse ``--resume`` of a run of several members with other members, ``--ensemble`` or
    ``--weights`` than it records (a folder written before the record is not checked)."""

    saved = _saved_members(out)
    if saved is None:
        return
    given = {"kinds": kinds, "ensemble": 1 if args.ensemble is None else args.ensemble,
             "weights": run_weights(kinds, weights)}
    if "gnn" not in kinds:
        given["ensemble"] = saved.get("ensemble")  # --ensemble applies to GNN members only
    diffs = [k for k in ("kinds", "ensemble", "weights") if saved.get(k) != given[k]]
    if diffs:
        named = "weights" in diffs
        raise CLIError(f"--resume {out}: the run was trained with {_members_flags(saved, named)}, not "
                       f"{_members_flags(given, named)}; give them as it was trained, or start a new run with another "
                       "--out")


def _holds_one_run(out: Path) -> bool:
    """Whether ``out`` holds the run of one GNN (its ``config.yaml`` or ``last.pt``)."""
    return (out / CONFIG).is_file() or (out / LAST).is_file()


def _no_run_to_resume(out: Path, ensemble: bool) -> str:
    """Why ``--resume`` finds nothing to continue in ``out``."""
    from .train import rundir

    if not out.exists():
        return f"--resume {out}: no such folder, so there is no run to resume; check the path"
    if not out.is_dir():
        return f"--resume {out} is a file; give the run's folder (the one that holds its config.yaml)"
    if not ensemble and rundir.is_members_folder(out):
        saved = _saved_members(out)
        how = (_members_flags(saved) if saved else
               "--ensemble N, N as it was trained (and --members as it was trained)")
        return f"--resume {out}: this is an ensemble folder of several members; resume it with {how}"
    if ensemble and not rundir.is_members_folder(out) and _holds_one_run(out):
        return (f"--resume {out}: the folder holds the run of one GNN, and --members/--ensemble would train a run of "
                "several members over it; drop them to continue that run, or start the new run with another --out")
    top = rundir.member_of_run(out)
    if top is not None:
        return (f"--resume {out}: this is a member of the run {top}, which resumes as a whole (its members with it): "
                f"siggate train --resume {top}")
    if rundir.pretraining_files(out):  # (a new run there is refused: a folder of its own)
        return (f"--resume {out}: the folder holds a pretraining, not a training run; resume it with siggate pretrain "
                f"... --out {out} --resume, or train into a folder of its own")
    missing = f"{rundir.MEMBERS_RECORD} or member0/config.yaml" if ensemble else "config.yaml"
    return (f"--resume {out}: the folder holds no run to resume (no {missing}); check the path, "
            "or drop --resume to start a new run there")


def _resume_hint(out: Path, args) -> str:
    """The command that continues an interrupted run in ``out`` (or why there is none)."""
    import shlex

    from .train import rundir

    if not rundir.holds_run(out):
        return "no epoch had started, nothing was saved; run the same command again"
    return (f"resume with: siggate train --resume {shlex.quote(str(out))}"
            + (f" --ensemble {args.ensemble}" if args.ensemble is not None else "")
            + (f" --members {shlex.quote(args.members)}" if args.members else "")
            + (f" --weights {args.weights}" if args.weights else ""))


def _ddp_resume_hint(out: Path, world_size: int) -> str:
    """The command that continues an interrupted ``--ddp`` run in ``out`` (or why there is none)."""
    import shlex

    from .train import rundir

    if not rundir.holds_run(out):
        return "no epoch had started, nothing was saved; run the same command again"
    local = int(os.environ.get("LOCAL_WORLD_SIZE") or world_size)  # (torchrun's ranks on this node)
    if local != world_size:  # several nodes: --nproc_per_node is per node, and the rendezvous is the job's own
        return (f"resume with the same torchrun command on each node, running siggate train --ddp --resume "
                f"{shlex.quote(str(out))}")
    return (f"resume with: torchrun --nproc_per_node={world_size} -m siggate train --ddp --resume "
            f"{shlex.quote(str(out))}")


def default_out_dir(cfg, out: str | None = None, taken: Path | None = None) -> Path:
    """``out`` if given, else ``runs/<name>-seed<seed>`` (``siggate train``'s default), where
    the name is the dataset's, or ``<file stem>-csv`` for ``--data``, then the gate (``attnoff``
    without an attention branch); ``-2``, ``-3``, ... is appended when that folder holds a run
    or another run is writing into it (or it is ``taken``)."""
    from .train.rundir import free_run_dir

    if out:
        return Path(out)
    data = f"{Path(cfg.data.csv).stem}-csv" if cfg.data.name == "csv" and cfg.data.csv else cfg.data.name
    arm = cfg.model.gate if cfg.model.attn else "attnoff"
    return free_run_dir(Path("runs") / f"{data}-{arm}-seed{cfg.train.seed}", taken=taken)


def _torch_device(name: str):
    import torch

    return torch.device(name)


def _train_members(cfg, out: Path, args, kinds: list[str], weights: str, resume: bool, device: str = "cpu") -> int:
    """``siggate train --ensemble N`` / ``--members KIND,...``: the members (N GNN members with seeds
    seed..seed+N-1, then the other kinds) in OUT/member*/, combined into one predictor in OUT."""
    from .train.ensemble import member_lines, train_members

    n = 1 if args.ensemble is None else args.ensemble  # checked by _member_kinds
    gnn = f"{n} GNN member(s) {_attention(cfg)} seeds {cfg.train.seed}..{cfg.train.seed + n - 1}" if "gnn" in kinds else ""
    others = ", ".join(k for k in kinds if k != "gnn")
    print(f"siggate train: members {', '.join(x for x in (gnn, others) if x)} on dataset={cfg.data.name} "
          f"-> {out}", flush=True)
    res = train_members(cfg, out, kinds, n, weights=weights, resume=resume,
                        progress=progress_enabled(args), device=_torch_device(device))
    print(json.dumps({"metric": res["metric"], "members": [{k: m[k] for k in ("name", "kind", "seed", "val", "test")}
                                                          for m in res["members"]],
                      "weighting": res["weighting"], "val": res["val"], "test": res["test"]}, indent=2))
    print("\n".join(member_lines(res)))
    _print_summaries(res, out)
    return 0


def _remove_stale_temporaries(out: Path) -> None:
    """Remove what a killed run left of its atomic writes in ``out`` and its members' folders
    (:func:`~siggate.files.stale_temporaries`; the folder is this process's now)."""
    from .files import stale_temporaries
    from .train.rundir import RUN_OUTPUTS, member_folders

    for folder in (out, *member_folders(out)):
        for p in stale_temporaries(folder, RUN_OUTPUTS):
            p.unlink(missing_ok=True)
            logging.getLogger("siggate.train").info("%s: removed %s, what a killed run left of a write", folder, p.name)


def _check_inputs_outside(out: Path, given: dict) -> None:
    """Refuse an ``--overwrite`` of ``out`` that would set aside a file the run reads (``given``:
    ``{flag: path}``): the CSV of a run file's name inside it, or weights in it or the folder itself
    (``--init OUT``), which were then "not found" once set aside."""
    from .train.rundir import run_entries

    home = out.resolve()
    entries = [e.resolve() for e in run_entries(home)] if home.is_dir() else []
    for flag, path in given.items():
        if not path or not Path(path).exists():
            continue
        path = Path(path).resolve()
        inside = path == home or any(path == e or e in path.parents for e in entries)
        if inside:
            raise CLIError(f"{flag} {path} is {'the folder' if path == home else 'a file of the run in the folder'} "
                           f"that --overwrite replaces, so it would be gone before it is read; copy it out of "
                           f"{out}, or choose another --out")


def claim_out_dir(out: Path, resume: bool = False, overwrite: bool = False, default_name: bool = False,
                  cfg=None, what: str = "the run", pretraining_ok: bool = False):
    """Check ``out`` (:func:`check_out_dir`) and claim it for this process: the held
    :class:`siggate.files.FolderLock` (release it when the run ends). A folder another live run
    holds is refused in one line; with ``default_name`` (no ``--out`` given) the next free
    default name (``-2``, ``-3``, ...) is taken instead."""
    from .files import claim_folder

    for _ in range(100):
        check_out_folder(out, what)
        lock = claim_folder(out, CLIError, "--out", "two runs must not write into one folder: wait for it to end, or "
                            "choose another --out", what, busy_ok=default_name)
        if lock is None:  # a concurrent run took this default name first
            out = default_out_dir(cfg, None, taken=out)
            continue
        try:
            check_out_dir(out, resume=resume, overwrite=overwrite, pretraining_ok=pretraining_ok)
            _claim_members_run(out, lock)
        except BaseException:
            lock.release()
            raise
        _remove_stale_temporaries(out)
        return lock
    raise CLIError(f"--out {out}: no free default folder; name one with --out")


def _claim_members_run(out: Path, lock) -> None:
    """A member's folder (``run/member0``, an ordinary run folder) trained on its own: the run of
    members it belongs to is claimed too, held with ``lock``, so that the two never train it at once
    (the run of members locks only its own folder: both wrote one ``log.csv`` and ``last.pt``)."""
    from .files import FolderBusy, FolderLock
    from .train.rundir import is_member_folder, is_members_folder

    parent = out.resolve().parent
    if not is_member_folder(out) or not is_members_folder(parent):  # (an explanation in RUN/explained is none)
        return
    try:
        lock.also(FolderLock(parent).acquire())
    except FolderBusy as exc:
        raise CLIError(f"--out {out} is a member of the run in {parent}, and {exc}: two runs must not train one "
                       "member; wait for it to end") from None


def check_out_dir(out: Path, resume: bool = False, overwrite: bool = False, pretraining_ok: bool = False) -> None:
    """Refuse an output folder that cannot be one before any work starts: an existing file,
    or a place where the folder cannot be created or written; and a folder that holds a run
    (:func:`siggate.train.rundir.holds_run`), or files of the names a run writes without one
    (:func:`siggate.train.rundir.run_output_names`), unless it is resumed, or cleared with ``overwrite``;
    a pretraining's folder (:func:`~siggate.train.rundir.pretraining_files`) unless ``pretraining_ok``
    (``siggate pretrain``'s own, and explain's, whose files do not mix with it) or ``resume`` (a run an
    earlier siggate let in beside a pretraining)."""
    from .train import rundir

    check_out_folder(out, "the run")
    top = None if resume else rundir.member_of_run(out)
    if top is not None:
        raise CLIError(f"--out {out} is a member of the run {top}: a run trained into it would replace that run's "
                       f"member; continue that run with --resume {top}, or choose another --out")
    found = [] if pretraining_ok or resume else rundir.pretraining_files(out)  # (a run an earlier siggate put
    if found:  # beside one resumes) a new run beside it: --init OUT then named the pretraining's weights, not the run's
        export = out / "pretrained.pt"
        raise CLIError(f"--out {out} holds a pretraining ({', '.join(found)}); train into a folder of its own"
                       + (f" (fine-tune from it with --init {export})" if export.is_file() else ""))
    if not rundir.run_entries(out) and rundir.restore_aside(out):  # a replacement killed midway (kill -9)
        logging.getLogger("siggate").warning(f"{out}: restored the run that an interrupted --overwrite had set "
                                             f"aside ({rundir.ASIDE})")
    found = rundir.run_files(out)
    if found and not resume:
        if not overwrite:
            aside = (f" (the run an interrupted --overwrite replaced is in {rundir.ASIDE}/: move it out to keep it)"
                     if (out / rundir.ASIDE).is_dir() else "")
            raise CLIError(f"--out {out} holds a run ({', '.join(found[:4])}){aside}; pass --resume to continue it, "
                           "--overwrite to replace it, or choose another --out")
        rundir.set_aside(out)  # replaced once the new run gets past its input checks (_refusal_takes_back)
    elif not found and not resume:  # no run, but files of a run's names: someone's own, not to write over
        clashing = rundir.run_output_names(out)
        if clashing and not overwrite:
            raise CLIError(f"--out {out} holds {clashing}, names "
                           "a run writes, but no run: move them or choose another --out (--overwrite replaces them)")
        if clashing:
            rundir.set_aside(out)


def _train_ddp(cfg, args, out: Path, resume: bool) -> int:
    """``siggate train --ddp``: join the torchrun process group and run
    :func:`siggate.train.pipeline.train` on it. Only rank 0 prints, logs and writes files."""
    import torch.distributed as dist

    from .train.distributed import PeerFailed, init_distributed
    from .train.pipeline import train

    try:
        ctx = init_distributed()
    except RuntimeError as exc:
        print(f"siggate train: error: {exc}", file=sys.stderr)
        return 2
    lock = None
    try:
        problem = None
        if ctx.is_main:  # rank 0 alone claims, checks (and with --overwrite clears) the folder; the others wait
            try:
                lock = claim_out_dir(out, resume=resume, overwrite=args.overwrite)
            except CLIError as exc:
                problem = str(exc)
        problem = ctx.broadcast(problem)
        if problem:
            raise CLIError(problem)
        if ctx.is_main:
            print(f"siggate train --ddp: world_size={ctx.world_size} device={ctx.device} dataset={cfg.data.name} "
                  f"{_attention(cfg)} global_batch={cfg.train.batch_size} epochs={cfg.train.epochs} "
                  f"seed={cfg.train.seed} -> {out}", flush=True)
        else:
            logging.getLogger("siggate").setLevel(logging.WARNING)
        with _refusal_takes_back(lock):
            try:
                m = train(cfg, out, resume=resume, progress=ctx.is_main and progress_enabled(args), dist=ctx)
            except PeerFailed:  # rank 0 failed and says why: this rank stops without a word
                return 2
            except KeyboardInterrupt as exc:  # torchrun passes a SIGTERM (Ctrl-C) on to every rank: rank 0 says it
                said, status = _stopped(exc)
                if ctx.is_main:
                    _say_stopped(f"siggate train: {said}; {_ddp_resume_hint(out, ctx.world_size)}")
                return status
        if ctx.is_main:
            from .train.gnn_member import mark_run

            mark_run(out)  # (as a run without --ddp: a grown run's manifest named the checkpoint it replaced)
            print(json.dumps({k: m[k] for k in ("dataset", "metric", "best_epoch", "val", "test", "params",
                                                "seconds", "world_size")}, indent=2))
        ctx.barrier()
    finally:
        if lock is not None:
            lock.release()
        if dist.is_initialized():
            dist.destroy_process_group()
    return 0


def _check_threads(args) -> None:
    """Refuse a negative ``--threads`` (any command that has the flag) before any work."""
    from .config import MAX_THREADS

    threads = getattr(args, "threads", None)
    if isinstance(threads, int) and not isinstance(threads, bool) and not 0 <= threads <= MAX_THREADS:
        raise CLIError(f"--threads {threads}: give a number of threads from 1 to {MAX_THREADS} (0: torch's choice)")


def _set_threads(args) -> None:
    """Apply ``--threads`` (where the command has it) before any work."""
    if getattr(args, "threads", None):
        import torch

        torch.set_num_threads(args.threads)


def cmd_evaluate(args) -> int:
    from .files import atomic_write_bytes
    from .train.evaluate import EvaluationError, evaluate
    from .train.metrics import MetricUndefinedError

    if args.data is None and (args.target_col or args.smiles_col is not None):
        raise CLIError("--smiles-col/--target-col name the columns of --data FILE.csv; give --data too")
    if args.data is None and args.decimal is not None:
        raise CLIError("--decimal reads the labels of --data FILE.csv; give --data too")
    if args.data is not None and args.split is not None:
        raise CLIError(f"--split applies to the run's own data; --data {args.data} is scored whole (drop --split)")
    if args.data is None and args.max_atoms is not None:  # (its value is checked where predict's is)
        raise CLIError("--max-atoms limits the molecules of --data FILE.csv (the run's own splits are scored whole); "
                       "give --data too")
    if args.output == "-":
        raise CLIError("--output -: the scores are printed on standard output already; drop --output, or give a file")
    if args.output:
        _check_output_file(Path(args.output), reads={"--data": args.data}, checkpoint=args.checkpoint)
    else:
        _stream_open("stdout", "the scores are written to it", "give --output FILE")
    device = check_device(args.device)
    targets = [c.strip() for c in args.target_col.split(",") if c.strip()] if args.target_col else None
    pictures = None
    if args.data is not None:  # the file's parity plot (a classifier's ROC curves) next to the scores, or the file
        beside = Path(args.output) if args.output else Path(args.data)
        pictures = beside.with_name(_stem(beside))
    _note_classes("evaluate", args.checkpoint)
    try:
        res = evaluate(args.checkpoint, split=args.split or "test", data=args.data, smiles_col=args.smiles_col,
                       target_cols=targets, allow_changed=args.allow_changed, data_root=args.data_root,
                       cache_dir=args.cache_dir, device=device, progress=progress_enabled(args), pictures=pictures,
                       decimal=args.decimal, coverage=args.coverage, output=args.output, max_atoms=args.max_atoms)
    except EvaluationError as exc:
        raise CLIError(str(exc)) from None
    except MetricUndefinedError as exc:
        what = f"--data {args.data}" if args.data else f"the {args.split or 'test'} split"
        raise CLIError(f"{what}: {str(exc).rstrip('.')}; score rows of both classes") from None
    text = json.dumps(res, indent=2)
    failed = None
    if args.output:  # before the scores are printed: a reader of stdout that leaves (| head) loses no file
        try:
            data = (text + "\n").encode()
            if args.output.lower().endswith(".gz"):  # compressed, as its name says
                import gzip

                data = gzip.compress(data, mtime=0)
            atomic_write_bytes(Path(args.output), data, output=True)
        except OSError as exc:  # said before the scores (a reader of stdout that leaves would lose it)
            failed = exc
            print(f"siggate evaluate: error: --output {args.output}: cannot write it ({exc.strerror or exc}); the "
                  "scores are printed on standard output, or choose a path you can write to", file=sys.stderr)
    print(text)
    _print_summaries({f"{k}_metrics": v for k, v in res.get("metrics", {}).items()}, file=sys.stderr)
    for split, shares in {k: v for k, v in res.get("coverage", {}).items() if k != "nominal"}.items():
        held = ", ".join(f"{t} {c['coverage']:.0%} of {c['n']}" for t, c in shares.items() if c["coverage"] is not None)
        print(f"siggate evaluate: at coverage {res['coverage']['nominal']:g} the {split} labels fall inside: "
              f"{held or 'none labelled'}", file=sys.stderr)
    for key, what in (("parity_plot", "parity plot"), ("roc_plot", "ROC curves")):
        if res.get(key):
            print(f"siggate evaluate: {what} {res[key]}", file=sys.stderr)
    if failed is not None:
        return 2
    if args.output:
        print(f"siggate evaluate: wrote {args.output}", file=sys.stderr)
    return 0


#: file types an --output name may promise that siggate does not write (it writes text, gzipped for .gz)
_OTHER_FORMATS = (".xlsx", ".xls", ".ods", ".parquet", ".pq", ".feather", ".arrow", ".zip", ".bz2", ".xz", ".zst",
                  ".7z", ".pkl", ".pickle", ".h5", ".hdf5", ".npy", ".npz", ".sdf")
#: the names of tables of molecules, which a JSON of scores would replace (evaluate --output a copy of the data)
_TABLE_FORMATS = (".csv", ".tsv", ".smi", ".txt")


def _check_output_file(path: Path, example: str = "scores.json", reads: dict | None = None,
                       checkpoint: str | None = None) -> None:
    """Refuse, before any work, an output file that cannot be written (a folder, or a place whose
    folder cannot be created or written) or that would replace what the command reads: a file
    of ``reads`` (``{flag: path}``) or one that training wrote into the folders of a run: the run
    that ``checkpoint`` belongs to, or any other (:func:`~siggate.train.rundir.run_folders`: the
    run and its members; :data:`~siggate.train.rundir.RUN_OUTPUTS`, a checkpoint: another run's
    ``best.pt`` was replaced by a CSV), whether it is there yet or not; a file of the user's own
    there is rewritten; a name of another file type (``.xlsx``, ``.parquet``; a table's for JSON,
    ``.json`` for a table) than the text it writes (``example``'s type; ``.gz``: compressed). (The
    CSV the run trained on is refused once its predictor is read:
    :func:`~siggate.train.evaluate.training_csv_clash`.)"""
    from .files import direct_target, out_dir_problem, tilde_problem, write_protected
    from .train.rundir import RUN_OUTPUTS, run_folders

    tilde = tilde_problem(path)
    if tilde:
        raise CLIError(f"--output {tilde}")
    if path.is_dir():  # (a file in it, unless it is a run's folder or one inside a run's: then here)
        inside = any(run_folders(p) for p in (path, path.parent))
        raise CLIError(f"--output {path} is a folder; give a file name, e.g. {Path(example) if inside else path / example}")
    if direct_target(path):  # a pipe or a device (/dev/null): written into, as a shell's redirection does
        return
    if path.is_symlink() and path.resolve().name in RUN_OUTPUTS:  # (written through: the file it names is checked)
        path = path.resolve()
    if write_protected(path):
        raise CLIError(f"--output {path} is write-protected; make it writable (chmod u+w) if it may be replaced, or "
                       "choose another --output")
    if path.is_file():
        reads = {**(reads or {}), **({"--checkpoint": checkpoint} if checkpoint else {})}  # a loose .pt too
        for flag, read in reads.items():
            if same_file(path, read):
                raise CLIError(f"--output {path} is the file that {flag} reads; writing it would replace that "
                               f"file: give another --output, e.g. {path.with_name(example)}")
    if path.name in RUN_OUTPUTS or path.suffix == ".pt":  # a run's name in a run's folder, there or not yet
        run = Path(checkpoint) if checkpoint else None
        run = run.parent if run is not None and run.is_file() else run
        homes = run_folders(run) if run is not None and run.is_dir() else set()  # a member's run too
        if path.resolve().parent not in homes:  # another run's folder
            run, homes = path.parent, run_folders(path.parent, recorded=True)
        if path.resolve().parent in homes:
            raise CLIError(f"--output {path} is a file of the run {run}; writing it would change the run: give a "
                           "new file name, or a path outside the run")
    kind = Path(example).suffix.lstrip(".").upper()
    other = (*_OTHER_FORMATS, *(_TABLE_FORMATS if kind == "JSON" else (".json", ".tsv")))  # (a .tsv: commas)
    if path.suffix.lower() in other:  # it was written as plain text under that name
        named = path.with_name(_stem(path.with_suffix("")) + Path(example).suffix)
        raise CLIError(f"--output {path}: siggate writes {kind} text, not {path.suffix} (gzip-compressed with .gz); "
                       f"give e.g. {named} or {named}.gz")
    probe = path.parent
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise CLIError(f"--output {path}: {probe} is a file, so the folder cannot be created; choose another path")
    problem = out_dir_problem(path.parent)
    if problem:
        raise CLIError(f"--output {path}: cannot write there ({problem})")


def _stem(path: Path) -> str:
    """``path``'s name without its type and compression suffixes (``ext.scaffold.csv.gz`` ->
    ``ext.scaffold``): the stem of the files named after it."""
    name = path.name
    for suffixes in ((".gz", ".bz2", ".xz", ".zip"), (".csv", ".tsv", ".txt", ".smi", ".json", ".sdf", ".sd", ".mol")):
        name = next((name[: -len(x)] for x in suffixes if name.lower().endswith(x) and len(name) > len(x)), name)
    return name


def _smiles_source(args) -> str | None:
    """Where ``predict``/``explain`` read molecules: ``--input FILE``, ``"-"`` (standard input,
    given as the only SMILES) or ``None`` (the SMILES arguments)."""
    if not args.smiles and not args.input:
        raise CLIError("give SMILES as arguments or --input FILE")
    if "-" in args.smiles:  # the shell's name for standard input, not a SMILES
        if len(args.smiles) > 1 or args.input:
            raise CLIError("'-' reads the molecules from standard input; give it alone, without other SMILES or "
                           "--input")
        _stream_open("stdin", "'-' reads the molecules from it", "give them with --input FILE or as arguments")
        return "-"
    if args.input == "-":
        _stream_open("stdin", "'--input -' reads the molecules from it", "give them with --input FILE")
    if args.smiles and args.input:
        raise CLIError("give SMILES as arguments or --input FILE, not both")
    named = next((s for s in args.smiles if s.lower().endswith(_FILE_ENDINGS) or ("/" in s and Path(s).is_file())), None)
    if named is not None:  # (it was predicted as a SMILES: one row, 'SMILES parse error', exit 1)
        raise CLIError(f"{named!r} is a file, not a SMILES; read its molecules with --input {named}")
    return args.input


#: the endings of a file of molecules given where SMILES are expected (no SMILES ends so: the
#: lower-case letters of .csv, .smi, .txt and .tsv are no aromatic atom)
_FILE_ENDINGS = (".csv", ".csv.gz", ".smi", ".smi.gz", ".txt", ".tsv")


def _read_input(args, pred, source):
    """The rows of ``predict``/``explain --input``: the SMILES column ``--smiles-col``, else the
    column the run was trained on, or ``smiles`` when the file lacks it (as for ``evaluate --data``)."""
    from .train.members import trained_smiles_col
    from .train.predict import read_input

    if args.smiles_col:
        return read_input(source, args.smiles_col, args.chunk_size)
    return read_input(source, trained_smiles_col(pred.predictor, pred.folder), args.chunk_size, fallback="smiles")


#: ``siggate predict``'s and ``siggate explain``'s defaults of the flags that only molecule checkpoints read
_PREDICT_DEFAULTS = {"max_atoms": PREDICT_MAX_ATOMS, "chunk_size": 1000}


def _note_classes(command: str, checkpoint) -> None:
    """Say on stderr which class an estimator-fit classifier's probability is of (its columns are 0/1)."""
    from .train.rundir import estimator_classes_note

    note = estimator_classes_note(checkpoint)
    if note:
        print(f"siggate {command}: note: {note}", file=sys.stderr)


def _molecule_flags(args) -> dict[str, bool]:
    """Which of ``--max-atoms`` and ``--chunk-size`` were given (not by comparing with their
    defaults: ``--max-atoms 1000`` is given too), their defaults (:data:`_PREDICT_DEFAULTS`) then
    filled in."""
    given = {"--max-atoms": getattr(args, "max_atoms", None) is not None,
             "--chunk-size": getattr(args, "chunk_size", None) is not None}
    for key, value in _PREDICT_DEFAULTS.items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)
    return given


def cmd_predict(args) -> int:
    from .train.predict import SmilesPredictor, predict_to_csv
    from .train.predict_nodes import checkpoint_level, predict_nodes_to_csv

    limits = _molecule_flags(args)
    if args.output == "-":  # standard output, as --input - is standard input
        args.output = None
    if not args.output:
        _stream_open("stdout", "the predictions are written to it", "give --output FILE")
    if args.output:
        _check_output_file(Path(args.output), "predictions.csv", reads={"--input": args.input},
                           checkpoint=args.checkpoint)
    if checkpoint_level(args.checkpoint) == "node":
        if args.smiles or args.input:
            raise CLIError("this checkpoint predicts per node of its dataset's graphs, not from SMILES; "
                           "drop the SMILES/--input and choose graphs with --split")
        given = {"--coverage": args.coverage is not None, "--smiles-col": args.smiles_col is not None, **limits}
        for flag in (f for f, on in given.items() if on):  # silently without effect before
            raise CLIError(f"{flag} applies to molecule (SMILES) checkpoints; this one predicts per node of its "
                           "dataset's graphs (no calibration, no SMILES): drop it")
        n = predict_nodes_to_csv(args.checkpoint, args.split or "test", args.output,
                                 data_root=args.data_root, cache_dir=args.cache_dir, device=check_device(args.device))
        print(f"siggate predict: {n} node rows" + (f" -> {args.output}" if args.output else ""), file=sys.stderr)
        return 0
    for flag, value in (("--split", args.split), ("--data-root", args.data_root), ("--cache-dir", args.cache_dir)):
        if value:
            raise CLIError(f"{flag} applies to node-level checkpoints (pattern, cluster, sbm-large); "
                           "give SMILES as arguments or --input FILE")
    source = _smiles_source(args)
    pred = SmilesPredictor(args.checkpoint, max_atoms=args.max_atoms, device=check_device(args.device),
                           coverage=args.coverage)
    if args.output:  # before any row is written (evaluate refuses it as well)
        from .train.evaluate import training_csv_clash
        from .train.predict import run_folder

        clash = training_csv_clash(args.output, pred.predictor, run_folder(args.checkpoint), "predictions.csv")
        if clash:
            raise CLIError(clash)
    _note_classes("predict", args.checkpoint)
    chunks = _read_input(args, pred, source) if source else [list(args.smiles)]
    n, bad = predict_to_csv(pred, chunks, args.output)  # (a reader of stdout that left: main's BrokenPipeError)
    print(f"siggate predict: {n} rows, {n - bad} predicted, {bad} failed"
          + (f" -> {args.output}" if args.output else ""), file=sys.stderr)
    _warn_no_rows("predict", n)
    if pred.outside:
        from .predictors.conformal import conformal_output

        print(f"siggate predict: warning: {pred.outside} of {n - bad} predicted rows are outside the run's applicability "
              "domain (outside_domain: true; no training molecule is as similar as the validation molecules' "
              "threshold): their predictions" + (f" and {conformal_output(pred.calibration.task)}" if pred.coverage else "")
              + " are extrapolations, not to be trusted like the others", file=sys.stderr)
    return 1 if bad else 0


def cmd_explain(args) -> int:
    from .train.explain import explain_to_folder, explained_targets, folders_in_the_way, foreign_files
    from .train.predict import SmilesPredictor
    from .train.predict_nodes import checkpoint_level

    _molecule_flags(args)
    if checkpoint_level(args.checkpoint) == "node":
        raise CLIError("this checkpoint predicts per node of a dataset's graphs; explain takes molecule-level "
                       "(SMILES) checkpoints")
    source = _smiles_source(args)
    if args.steps < 1:
        raise CLIError(f"--steps must be at least 1, got {args.steps}")
    if args.scale is not None and not (math.isfinite(args.scale) and args.scale > 0):
        raise CLIError(f"--scale must be a positive number (the contribution drawn in full colour), got {args.scale}")
    check_out_folder(args.out, "the explanations")
    from .predictors.base import MANIFEST
    from .train.rundir import holds_run

    if holds_run(args.out) or (Path(args.out) / MANIFEST).is_file():  # its molecules.csv, pictures among a run's files
        raise CLIError(f"--out {args.out} holds a run, whose folder the explanation's files would mix into: give a "
                       f"folder of its own, e.g. {Path(args.out) / 'explained'}")
    for name in ("molecules.csv", "atoms.csv"):  # an earlier explanation's CSV read back: this one replaces it
        made = Path(args.out) / name
        if same_file(made, args.input):
            raise CLIError(f"--input {args.input} is {made}, which this explanation replaces; copy it elsewhere "
                           "first, or give another --out")
    pred = SmilesPredictor(args.checkpoint, max_atoms=args.max_atoms, device=check_device(args.device), domain=False,
                           uncertainty=False)
    _note_classes("explain", args.checkpoint)
    targets = explained_targets(pred) if hasattr(pred.predictor, "info") else None
    blocking = folders_in_the_way(args.out, targets) if targets else []
    if blocking:
        raise CLIError(f"--out {args.out} holds the folder{'s' if len(blocking) > 1 else ''} {', '.join(blocking[:4])}, "
                       "of names an explanation writes its files by: move them or choose another --out")
    theirs = foreign_files(args.out, targets) if targets else []
    if theirs and not args.overwrite:
        raise CLIError(f"--out {args.out} holds {', '.join(theirs[:4])}{' ...' if len(theirs) > 4 else ''}, names an "
                       "explanation writes, but no explanation wrote them: move them or choose another --out "
                       "(--overwrite replaces them)")
    chunks = _read_input(args, pred, source) if source else [list(args.smiles)]
    lock = claim_out_dir(Path(args.out), resume=True, what="the explanations", pretraining_ok=True)  # one explain at a time
    try:
        n, bad = explain_to_folder(pred, chunks, args.out, steps=args.steps, scale=args.scale)
    except ValueError as exc:
        if type(exc).__name__ in ("InputError", "DataError", "ConfigError"):
            raise
        raise CLIError(f"{args.checkpoint}: {exc}") from None
    finally:
        lock.release()
    print(f"siggate explain: {n} rows, {n - bad} explained, {bad} failed -> {args.out} (molecules.csv, atoms.csv, "
          "one SVG and PNG per molecule)", file=sys.stderr)
    _warn_no_rows("explain", n)
    return 1 if bad else 0


def _warn_no_rows(command: str, n: int) -> None:
    """A warning where the input held no molecule (a header alone, an empty file or stream): the
    empty output is not a result (evaluate, which has no scores to give, refuses such a file)."""
    if n == 0:
        print(f"siggate {command}: warning: the input holds no rows (a header alone, or nothing); nothing was "
              f"{'predicted' if command == 'predict' else 'explained'}", file=sys.stderr)


def cmd_pretrain(args) -> int:
    if args.molecules < 1 or args.epochs < 1:
        raise CLIError("--molecules and --epochs must be at least 1")
    from .train.rundir import pretraining_files, run_folders

    # a train run's folder: --init OUT then named the pretraining's weights (one an earlier siggate let in resumes)
    if run_folders(args.out, recorded=True) and not (args.resume and pretraining_files(args.out, begun=True)):
        raise CLIError(f"--out {args.out} holds a siggate train run; pretrain into a folder of its own")
    lock = claim_out_dir(Path(args.out), resume=True, what="the pretraining", pretraining_ok=True)  # pretrain()
    # guards its own run
    try:
        return _pretrain(args)
    finally:
        lock.release()


def _pretrain(args) -> int:
    from .train.pretrain import pretrain

    source = args.smiles
    if source == "moses":
        from .data.corpus import moses_train_path

        source = moses_train_path()
    elif Path(source).is_dir():
        raise CLIError(f"--smiles {source} is a folder; give a CSV or .smi file in it, or 'moses'")
    elif not Path(source).is_file():
        from .data.csvdata import NOT_A_FILE

        raise CLIError(f"--smiles {source} is {NOT_A_FILE}" if Path(source).exists()
                       else f"--smiles {source}: no such file; give a CSV or .smi file, or 'moses'")
    clash = flag_key_clash(args, ("threads",))  # the flag silently won (its other flags have defaults)
    if clash:
        raise CLIError(clash)
    if args.threads is None:  # one thread and one process, unless --set train.threads names the threads
        args.threads = 0 if "train.threads" in set_keys(args) else 1
        _set_threads(args)
    overrides = [*args.overrides, *([f"train.threads={args.threads}"] if args.threads else [])]
    print(f"siggate pretrain: up to {args.molecules} molecules of {source}, {args.epochs} epochs, "
          f"config {args.config or 'csv'} -> {args.out}", flush=True)
    try:
        rec = pretrain(source, args.out, molecules=args.molecules, epochs=args.epochs, seed=args.seed,
                       config=args.config, overrides=overrides, data_root=args.data_root, exclude_files=args.exclude,
                       smiles_col=args.smiles_col, resume=args.resume, progress=progress_enabled(args),
                       device=check_device(args.device), workers=args.threads or 1)
    except KeyboardInterrupt as exc:
        said, status = _stopped(exc)
        _say_stopped(f"siggate pretrain: {said}; resume with: siggate pretrain --smiles {args.smiles} --out "
                     f"{args.out} --resume (and the same options)")
        return status
    except (ValueError, OSError) as exc:  # an unreadable corpus or exclude file: name it, no traceback
        if type(exc).__name__ in ("ConfigError", "DataError"):
            raise
        raise CLIError(str(exc)) from None
    print(json.dumps({k: rec[k] for k in ("corpus_molecules", "removed_test_molecules", "best_epoch", "val_mae",
                                          "train_seconds")}, indent=2))
    print(f"fine-tune with: siggate train --data FILE.csv --target-col COL --init {Path(args.out) / 'pretrained.pt'}")
    return 0


def cmd_data(args) -> int:
    from .data.catalog import list_datasets

    if args.action == "list":
        if args.name:  # it was ignored: the whole list, exit 0
            raise CLIError(f"siggate data list takes no dataset name ({args.name!r}); to check one: siggate data "
                           f"verify {args.name}")
        given = [f for f in ("max_graphs", "num_nodes", "data_root", "cache_dir") if getattr(args, f, None)]
        if given:  # (ignored as well)
            flag = "--" + given[0].replace("_", "-")
            raise CLIError(f"{flag} applies to siggate data verify NAME; siggate data list takes no options")
        for d in list_datasets():
            print(f"{d['name']:18s} {'(needs data root) ' if d.get('needs_root') else ''}{d.get('description', '')}")
        return 0
    if not args.name:
        raise CLIError("siggate data verify NAME [--data-root DIR]")
    from .data.catalog import DATASET_META
    from .data.verify import verify

    for key in ("max_graphs", "num_nodes"):  # 0 is "all" / the default; below it counted nothing, exit 0
        if getattr(args, key) < 0:
            raise CLIError(f"--{key.replace('_', '-')} {getattr(args, key)}: give a number >= 1 (or 0 for the default)")
    options = {k: getattr(args, k) for k in ("max_graphs", "num_nodes") if getattr(args, k)}
    meta = DATASET_META.get(str(args.name).strip().lower())
    refused = [k for k in options if meta is not None and k not in meta["options"] and k != "max_graphs"]  # (any cuts)
    if refused:
        flag = "--" + refused[0].replace("_", "-")
        raise CLIError(f"{flag} does not apply to {args.name}; it applies to "
                       + ", ".join(sorted(n for n, m in DATASET_META.items() if refused[0] in m["options"])))
    root = args.data_root or None  # an empty --data-root is not given, as train and evaluate read it (not the cwd)
    if meta is not None and meta["needs_root"]:  # a missing --data-root or $SIGGATE_DATA folder is named, not its files
        from .data.base import checked_data_root

        root = checked_data_root(root)
    res = verify(args.name, root=root, cache_dir=args.cache_dir, progress=progress_enabled(args), **options)
    print(json.dumps(res, indent=2, default=str))
    return 0


def build_parser() -> argparse.ArgumentParser:
    from .version import __version__

    parser = argparse.ArgumentParser(prog="siggate", description="SigGate-GT: gated graph transformers",
                                     allow_abbrev=False)  # flags as written (add_command)
    parser.add_argument("--version", action="version", version=f"siggate {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = add_command(sub, "train", "train a model (default: the nci5k config)", EXAMPLES["train"])
    add_config_args(p)
    p.add_argument("--out", default=None, help="output directory (default: runs/<dataset>-<gate>-seed<seed>, "
                   "runs/<file>-csv-<gate>-seed<seed> for --data, <gate> 'attnoff' without attention; -2, -3, ... "
                   "appended when taken). A folder that holds a run is refused without --resume or --overwrite")
    p.add_argument("--resume", nargs="?", const=True, default=False, metavar="RUN",
                   help="continue the run in RUN (or --out) from its last.pt, with its saved config.yaml; "
                        "flags given again must agree with it (--epochs may grow the run)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the run in --out: its checkpoints, logs and TensorBoard events are removed first")
    p.add_argument("--ensemble", type=int, default=None, metavar="N",
                   help="train N GNN members with seeds seed..seed+N-1 into OUT/member*/; siggate predict on OUT "
                        "combines them with the run's other members (sharing one weight with --weights val) and adds an "
                        "uncertainty column (the members' spread)")
    p.add_argument("--members", default=None, metavar="KIND[,KIND...]",
                   help=f"the kinds of model the run holds, combined into one (default: {DEFAULT_MEMBERS}; with --data "
                        f"{RECIPE_MEMBERS['csv'][0]}; "
                        + "; ".join(f"{k}: {v}" for k, v in MEMBER_KIND_NAMES.items()) + "); --ensemble N "
                        "multiplies the GNN members")
    p.add_argument("--weights", choices=MEMBER_WEIGHTS, default=None,
                   help="how several members are combined: equal weights, or weights fitted on the validation "
                        f"split (non-negative, summing to one per target) (default: {DEFAULT_WEIGHTS}; with --data "
                        f"{RECIPE_MEMBERS['csv'][1]}; copies of one kind always average equally; a --resume of "
                        "several members: the run's)")
    p.add_argument("--on-nan", choices=["stop", "skip"], default=None, help="on a non-finite loss: stop (default) or skip the batch")
    p.add_argument("--ddp", action="store_true", help="distributed data parallel (under torchrun)")
    add_progress_flag(p)
    add_threads_flag(p, default_text="train.threads, else torch's choice")
    add_device_flag(p)
    p.set_defaults(func=cmd_train)

    p = add_command(sub, "evaluate", "score a run or ensemble on its splits or on a labelled CSV", EXAMPLES["evaluate"],
                    description="Score a trained run (a folder or a .pt) or a folder of several members (their "
                                "combination) on its own data's splits, or on your own labelled CSV with --data, "
                                "featurized as in training. Prints the metric per split and per target as JSON.")
    p.add_argument("--checkpoint", required=True, metavar="RUN",
                   help="run folder (its best.pt), folder of several members (their combination; OUT/predictor.json, "
                        "or an older OUT/ensemble.json) or .pt checkpoint")
    p.add_argument("--split", default=None, help="split of the run's own data: train, val, test or all (default: test)")
    p.add_argument("--data", default=None, metavar="FILE.csv",
                   help="score this labelled CSV of SMILES instead (every row; invalid SMILES and empty labels are "
                        "counted) and draw its parity plot, <stem>_parity.png next to --output (else next to the file; a "
                        "classifier: its ROC curves, <stem>_roc.png)")
    p.add_argument("--smiles-col", default=None,
                   help="SMILES column of --data (default: the training run's SMILES column, else smiles)")
    p.add_argument("--target-col", default=None, metavar="COL[,COL...]",
                   help="label column(s) of --data, in the model's target order, or TARGET=COL pairs naming the "
                        "column of each target they name (a target not named: the column of its own name, else not "
                        "scored; entries that are all the file's columns are columns, a '=' in a name or not) "
                        "(default: the training targets' names)")
    p.add_argument("--decimal", default=None, choices=[".", ","],
                   help="decimal mark of the labels in --data: '.' or ',' (-5,49) (default: the run's own for the CSV "
                        "it trained on, else '.')")
    p.add_argument("--max-atoms", type=int, default=None,
                   help="with --data: molecules with more atoms are not scored; they are counted as invalid, the first "
                        "named with its reason (default: 1000, as siggate predict)")
    p.add_argument("--allow-changed", action="store_true",
                   help="score the run's training CSV even if it changed since training (re-split; default: refuse)")
    p.add_argument("--coverage", default=None, metavar="C",
                   help="also check the run's conformal intervals (a classifier's sets) at coverage C (0 < C < 1), "
                        "as siggate predict --coverage C draws them: the share of labels inside, per target and "
                        "split, and for --data or the test split a warning where it is below C by more than chance "
                        "allows")
    p.add_argument("--output", default=None, metavar="FILE.json", help="also write the scores to this JSON file (gzip-compressed when it ends in .gz)")
    add_data_root_flag(p, default="as in training")
    add_cache_dir_flag(p, default="as in training")
    add_device_flag(p)
    add_threads_flag(p)
    add_progress_flag(p)
    p.set_defaults(func=cmd_evaluate)

    p = add_command(sub, "predict", "predict properties of molecules from SMILES, or per node of a "
                                    "node-level dataset's graphs", EXAMPLES["predict"])
    p.add_argument("--checkpoint", required=True, metavar="RUN",
                   help="run folder (its best.pt), ensemble folder (mean and uncertainty) or .pt checkpoint")
    p.add_argument("smiles", nargs="*", help="SMILES strings, or - to read them from standard input")
    p.add_argument("--split", default=None,
                   help="node-level checkpoints: the dataset split to predict, train, val, test or all (default: test)")
    add_data_root_flag(p, "node-level checkpoints", default="as in training")
    add_cache_dir_flag(p, "node-level checkpoints", default="as in training")
    p.add_argument("--input", "--data", dest="input", default=None, metavar="FILE", action=_GivenOnce,
                   help="CSV with a SMILES column, or a .smi/.txt file with one SMILES per line (--data: the same, as "
                        "train and evaluate name it)")
    p.add_argument("--smiles-col", default=None,
                   help="SMILES column of --input (default: the training run's SMILES column, else smiles)")
    p.add_argument("--output", default=None, help="output CSV, gzip-compressed when it ends in .gz (default: stdout)")
    p.add_argument("--max-atoms", type=int, default=None,
                   help="refuse molecules with more atoms, with a reason per row (default: 1000; attention is quadratic)")
    p.add_argument("--chunk-size", type=int, default=None,
                   help="rows of --input read, predicted and written at a time (default: 1000)")
    p.add_argument("--coverage", default=None, metavar="C",
                   help="add split-conformal intervals holding the label with probability C (e.g. 0.9), calibrated "
                        "on the run's validation molecules: <target>_lower/_upper (regression) or <target>_set "
                        "(binary/multilabel: {0}, {1}, {0,1}, or {}: no class plausible enough, common at low coverage)")
    add_device_flag(p)
    add_threads_flag(p)
    p.set_defaults(func=cmd_predict)

    p = add_command(sub, "explain", "draw each atom's contribution to a molecule's prediction (integrated "
                                    "gradients for the GNN, occlusion of fingerprint bins for the fingerprint members), with a CSV "
                                    "of per-atom values", EXAMPLES["explain"])
    p.add_argument("--checkpoint", required=True, metavar="RUN",
                   help="run folder (its best.pt), folder of several members (their weighted contributions) or .pt")
    p.add_argument("smiles", nargs="*", help="SMILES strings")
    p.add_argument("--input", "--data", dest="input", default=None, metavar="FILE", action=_GivenOnce,
                   help="CSV with a SMILES column, or a .smi/.txt file with one SMILES per line (--data: the same, as "
                        "train and evaluate name it)")
    p.add_argument("--smiles-col", default=None,
                   help="SMILES column of --input (default: the training run's SMILES column, else smiles)")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="folder for molecules.csv, atoms.csv and one SVG and PNG per molecule (and target)")
    p.add_argument("--steps", type=int, default=50,
                   help="Riemann points of the GNN's integrated-gradients path integral (default: 50; more: the "
                        "atoms' sum closer to prediction minus baseline; the fingerprint members do not use it)")
    p.add_argument("--max-atoms", type=int, default=None,
                   help="refuse molecules with more atoms, with a reason per row (default: 1000)")
    p.add_argument("--chunk-size", type=int, default=None, help="rows of --input read and explained at a time (default: 1000)")
    p.add_argument("--scale", type=float, default=None,
                   help="the contribution drawn in full colour in every picture, to compare explanations "
                        "(default: per target, the largest absolute contribution among this explanation's molecules)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace files of the names an explanation writes (molecules.csv, atoms.csv, mol*.svg/png) "
                        "in an --out that holds no earlier explanation (an earlier explanation is always replaced)")
    add_device_flag(p)
    add_threads_flag(p)
    p.set_defaults(func=cmd_explain)

    p = add_command(sub, "pretrain", "pretrain a backbone on unlabelled SMILES (RDKit descriptor regression)",
                    EXAMPLES["pretrain"])
    p.add_argument("--smiles", required=True, metavar="FILE",
                   help="unlabelled molecules: a CSV with a SMILES column, a .smi/.txt file (either may be gzip, bzip2, "
                        "xz or a zip of one file), or 'moses' "
                        "for the MOSES training set inside an installed molsets==0.3.1 wheel")
    p.add_argument("--smiles-col", default=None, help="SMILES column of a CSV corpus (default: smiles/SMILES)")
    p.add_argument("--out", required=True, help="pretraining folder: corpus/, model/ and pretrained.pt")
    p.add_argument("--molecules", type=int, default=100_000, help="molecules drawn from the corpus (default: 100000)")
    p.add_argument("--epochs", type=int, default=20, help="training epochs (default: 20)")
    p.add_argument("--seed", type=int, default=0, help="seed of the draw, the split and the training (default: 0)")
    p.add_argument("--config", default=None, help="model config to pretrain (default: csv, the --data recipe)")
    add_set_flag(p, "train.lr=0.001")
    p.add_argument("--exclude", action="append", default=[], metavar="FILE",
                   help="also drop the molecules of this SMILES file or CSV (repeatable); the test sets of ZINC, "
                        "molhiv, molpcba, NCI-5K and MoleculeACE are always dropped where their files are found")
    add_data_root_flag(p, "the ZINC, molhiv and molpcba test sets")
    p.add_argument("--resume", action="store_true", help="continue the run in --out")
    add_threads_flag(p, default=None, default_text="1, or --set train.threads",
                     what="torch threads, and the processes that compute the corpus's descriptors (0: the "
                          "config's train.threads and one process)")
    add_device_flag(p)
    add_progress_flag(p)
    p.set_defaults(func=cmd_pretrain)

    p = add_command(sub, "data", "list datasets or verify one", EXAMPLES["data"])
    p.add_argument("action", choices=["list", "verify"], help="list: the registered datasets; verify: load one, print its counts")
    p.add_argument("name", nargs="?", help="dataset to verify (see siggate data list)")
    add_data_root_flag(p)
    add_cache_dir_flag(p)
    p.add_argument("--max-graphs", type=int, default=0, metavar="N",
                   help="only the first N graphs of each split (a generated dataset builds only those); 0: all")
    p.add_argument("--num-nodes", type=int, default=0, metavar="N", help="sbm-large: nodes of its graph")
    add_threads_flag(p)
    add_progress_flag(p)
    p.set_defaults(func=cmd_data)

    for name, module in EXTRA_COMMANDS.items():
        if importlib.util.find_spec(module) is not None:
            importlib.import_module(module).register(sub)
    return parser


#: the commands whose ``--threads`` :func:`main` applies (compare and analyze apply their own)
THREADED = ("train", "evaluate", "predict", "explain", "data", "pretrain")


#: what to do about a file system's refusal, by its errno (a full disk, a file size limit, permissions)
_FILE_SYSTEM_FIXES = {
    errno.ENOSPC: "free space and run the command again (a train run goes on with --resume)",
    errno.EDQUOT: "free space within the quota and run the command again (a train run goes on with --resume)",
    errno.EFBIG: "raise the file size limit (ulimit -f) and run the command again (a train run goes on with --resume)",
    errno.EIO: "check the disk and run the command again (a train run goes on with --resume)",
    errno.EACCES: "give your user permission to it (chmod, or the folder's owner), or choose another path",
    errno.EPERM: "give your user permission to it (chmod, or the folder's owner), or choose another path",
    errno.EROFS: "it is on a read-only file system; choose another path",
}


def _file_system_error(exc: BaseException) -> str | None:
    """The one line that names a file system's refusal (``OSError`` of :data:`_FILE_SYSTEM_FIXES`)
    with its file and the fix, for :func:`main` to print instead of a traceback; None otherwise."""
    if not isinstance(exc, OSError) or exc.errno not in _FILE_SYSTEM_FIXES:
        return None
    where = f"{exc.filename}: " if exc.filename else ""
    return f"{where}{exc.strerror or exc}; {_FILE_SYSTEM_FIXES[exc.errno]}"


def _user_errors() -> tuple:
    """The errors :func:`main` prints as one line with exit code 2, imported only once one was
    raised (so that light commands such as ``siggate data list`` never import torch)."""
    from .config import ConfigError
    from .data.base import DataError
    from .predictors.base import PredictorFileError
    from .train.checkpoint import CheckpointError
    from .train.executor import ExecutorError
    from .train.loop import NonFiniteLossError
    from .train.metrics import MetricUndefinedError
    from .train.predict import InputError

    return (CLIError, ConfigError, DataError, CheckpointError, InputError, NonFiniteLossError, PredictorFileError,
            FileNotFoundError, MetricUndefinedError, ExecutorError)


def _innermost(parser: argparse.ArgumentParser, args) -> argparse.ArgumentParser:
    """The (sub-)sub-command parser that ``args`` were parsed by (``siggate analyze entropy``'s)."""
    while True:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        name = getattr(args, subs[0].dest, None) if subs else None
        if name not in (subs[0].choices if subs else {}):
            return parser
        parser = subs[0].choices[name]


class _GivenOnce(argparse.Action):
    """A value flag of several names (``--input``/``--data``) given at most once: the second
    silently won."""

    def __call__(self, parser, namespace, values, option_string=None):
        if getattr(namespace, self.dest, None) is not None:
            parser.error(f"{' and '.join(self.option_strings)} name one file; give one of them, once")
        setattr(namespace, self.dest, values)


def _flag_hint(parser: argparse.ArgumentParser, extra: list[str], root: argparse.ArgumentParser | None = None) -> str:
    """``" (did you mean --output?)"`` for the unknown flags of ``extra`` that begin one or more of
    ``parser``'s (a flag is taken only as written: :func:`~siggate.config_args.add_command`), or
    lie close to one; a flag of ``root`` (``siggate --verbose``) is said to go before the command;
    empty otherwise."""
    import difflib

    known = [o for a in parser._actions for o in a.option_strings if o.startswith("--")]
    top = {o for a in (root._actions if root is not None and root is not parser else ()) for o in a.option_strings}
    before = [x for x in extra if x in top]
    if before:
        return f" ({', '.join(before)} goes before the command: siggate {' '.join(before)} {parser.prog.split(' ', 1)[-1]} ...)"
    hints = []
    for flag in (x.split("=", 1)[0] for x in extra if x.startswith("--")):
        near = [o for o in known if o.startswith(flag)] or difflib.get_close_matches(flag, known, n=1)
        hints += [(flag, " or ".join(near))] if near else []
    if len(hints) == 1:
        return f" (did you mean {hints[0][1]}?)"
    return f" (did you mean {', '.join(f'{near} for {flag}' for flag, near in hints)}?)" if hints else ""


def _stopped(exc: BaseException) -> tuple[str, int]:
    """How a stopped command says so and its exit status (128 + the signal's number, as a shell
    reports it): ``terminated`` (SIGTERM, 143), ``hung up`` (SIGHUP, 129) or ``interrupted``
    (Ctrl-C, 130)."""
    if isinstance(exc, Terminated):
        return (f"{exc.said} ({exc.signal_name})", 128 + exc.signum)
    return ("interrupted", 130)


def _say_stopped(line: str) -> None:
    """Print a stopped command's line on stderr, where a hang-up may have closed the terminal
    (an EIO then ended the command in a traceback, exit status 1, not the signal's)."""
    with contextlib.suppress(OSError):
        print(line, file=sys.stderr)


class Terminated(KeyboardInterrupt):
    """SIGTERM (a scheduler ending a job, ``kill``, ``lanes.sh stop``) or SIGHUP (the terminal
    closed, an ssh session lost), raised where the process is, so that what is being written is
    finished or removed and the command says how to resume, as after Ctrl-C; its exit status is
    128 + the signal's number (143, 129). SIGHUP ended the process at once: temporary files
    stayed beside an --output and in the cache."""

    def __init__(self, signum: int = 15) -> None:
        import signal

        super().__init__(signum)  # (a copy or a pickle keeps its signal)
        self.signum = int(signum)
        self.signal_name = signal.Signals(self.signum).name
        self.said = "hung up" if self.signal_name == "SIGHUP" else "terminated"


@contextlib.contextmanager
def _terminated_as_interrupt():
    """SIGTERM and SIGHUP raise :class:`Terminated` while a command runs (the main thread only,
    where Python delivers signals; a SIGHUP that ``nohup`` ignores stays ignored); the handlers
    before are put back after it. Python's default ended the process at once: no ``finally`` ran,
    a checkpoint being written left its temporary file, and nothing was said."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise Terminated(signum)

    from .files import stop_signals

    kinds = [k for k in stop_signals() if k != signal.SIGINT]  # (Ctrl-C: Python's own KeyboardInterrupt)
    before = {}
    for kind in kinds:
        if kind == getattr(signal, "SIGHUP", None) and signal.getsignal(kind) == signal.SIG_IGN:
            continue  # (nohup: hang-ups are to be ignored)
        before[kind] = signal.signal(kind, handler)
    try:
        yield
    finally:  # (None: a handler set outside Python, which cannot be put back from here; the default then)
        for kind, was in before.items():
            signal.signal(kind, was if was is not None else signal.SIG_DFL)


def main(argv: list[str] | None = None) -> int:
    _CLOSED_STREAMS.clear()
    _CLOSED_STREAMS.update(_open_standard_streams())
    with _terminated_as_interrupt():
        try:
            return _main(argv)
        except KeyboardInterrupt as exc:  # (before a command ran: while its modules were imported, a traceback)
            said, status = _stopped(exc)
            _say_stopped(f"siggate: {said}")
            return status


#: the standard streams the shell closed for this command (:func:`_open_standard_streams`); kept
#: here, not on the parsed arguments, which runs record
_CLOSED_STREAMS: set[str] = set()


def _open_standard_streams() -> frozenset[str]:
    """The standard streams the shell closed (``<&-``, ``>&-``, ``2>&-``), each reopened onto the
    null device: a file the command opened took the closed descriptor (RDKit's messages to
    descriptor 2 then went into it), and a print to a closed stderr went to stdout (predict's summary
    line ended its CSV). A command whose results go to a closed stdout refuses (:func:`_stream_open`).
    Both outputs write what their encoding lacks escaped (``PYTHONIOENCODING=ascii``, a console of
    another code page: a target named pKä ended train in a UnicodeEncodeError)."""
    closed = set()
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        try:
            os.fstat(fd)
        except OSError:
            os.open(os.devnull, os.O_RDWR)  # (the lowest free descriptor: this one)
            closed.add(name)
        if getattr(sys, name) is None:
            setattr(sys, name, open(fd, "r" if fd == 0 else "w", encoding="utf-8", errors="backslashreplace",
                                    closefd=False))
            closed.add(name)
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream.errors == "strict":
                stream.reconfigure(errors="backslashreplace")
        except (AttributeError, ValueError):  # (not a text file of the io module: a test's capture)
            pass
    return frozenset(closed)


def _stream_open(name: str, what: str, fix: str) -> None:
    """Refuse (:class:`CLIError`) to read or write ``what`` through the standard stream ``name``
    (``"stdin"``, ``"stdout"``) that the shell closed (:func:`_open_standard_streams`)."""
    if name in _CLOSED_STREAMS:
        stream, shell = {"stdin": ("standard input", "<&-"), "stdout": ("standard output", ">&-")}[name]
        raise CLIError(f"{stream} is closed ({shell}), and {what}; {fix}")


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # named by the command they were given to, with its usage (the top-level usage said nothing of it)
        inner = _innermost(parser, args)
        inner.error(f"unrecognized arguments: {' '.join(extra)}{_flag_hint(inner, extra, parser)}")
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format=LOG_FORMAT)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    with _one_line_warnings(args.command):
        return _run_command(args)


@contextlib.contextmanager
def _one_line_warnings(command: str):
    """siggate's own warnings on one line, ``siggate CMD: warning: ...``, while ``command`` runs:
    Python's format names the file and line of siggate's code and prints that line of source below
    (a deprecated config key read as two lines of our internals). Other packages' warnings keep it,
    those they attribute to siggate's line that called them too (pandas' and torch's deprecations
    name their caller's line): a warning is siggate's where siggate's code called ``warnings.warn``
    (:func:`_warned_by_siggate`)."""
    import warnings

    here = str(Path(__file__).resolve().parent) + os.sep
    python_format = warnings.formatwarning

    def one_line(message, category, filename, lineno, line=None):
        if _warned_by_siggate(filename, here):
            return f"siggate {command}: warning: {message}\n"
        return python_format(message, category, filename, lineno, line)

    warnings.formatwarning = one_line
    try:
        yield
    finally:
        if warnings.formatwarning is one_line:
            warnings.formatwarning = python_format


def _warned_by_siggate(filename: str, here: str) -> bool:
    """Whether the warning being formatted is siggate's own: attributed to a file under ``here``
    (siggate's folder; a name that is no absolute path, ``sys`` or ``<string>``, is not, whatever
    the working folder) and issued by siggate's code, the first frame outside :mod:`warnings` on
    the stack being siggate's (another package's warning names the line of siggate that called it)."""
    try:
        if not os.path.isabs(filename) or not str(Path(filename).resolve()).startswith(here):
            return False
    except (OSError, ValueError):  # (a name Python cannot resolve: "embedded null byte")
        return False
    frame = sys._getframe(2)  # (above one_line: the warnings module's frames, then the code that warned)
    while frame is not None and frame.f_globals.get("__name__") == "warnings":
        frame = frame.f_back
    name = frame.f_globals.get("__name__", "") if frame is not None else ""
    return name == "siggate" or name.startswith("siggate.")


def _run_command(args) -> int:
    """Run the parsed command ``args``: its exit status; a user's error as one line, exit 2."""
    func = args.func
    if isinstance(func, str):  # "module:function" of a light parser, imported now
        module, _, name = func.partition(":")
        func = getattr(importlib.import_module(module), name)
    try:
        from .options import impl_env_problem

        if impl_env_problem() and args.command != "data":  # (the commands that may run attention)
            raise CLIError(impl_env_problem())
        _check_threads(args)
        if hasattr(args, "ray_address"):  # before any data is prepared (analyze's runs are built after it)
            from .train.executor import check_backend_flags

            check_backend_flags(args)
        if args.command in THREADED:
            _set_threads(args)
        return int(func(args) or 0)
    except BrokenPipeError:  # the reader of stdout left (siggate predict ... | head): nothing more to write
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so that exiting flushes nowhere
        except (OSError, ValueError):  # (a stdout without a descriptor: a test's capture)
            pass
        if args.command not in ("predict", "evaluate"):  # (their output is the stream: read as far as wanted)
            try:
                print(f"siggate {args.command}: stopped: the reader of its standard output left (a closed pipe)",
                      file=sys.stderr)
            except OSError:  # (stderr went into the same pipe: 2>&1 | head)
                pass
        return 1
    except Exception as exc:
        said = _file_system_error(exc)
        if said is None and not isinstance(exc, _user_errors()):
            raise
        print(f"siggate {args.command}: error: {said or exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        again = ("; run the same command again to resume (finished runs are kept, unfinished ones resume)"
                 if args.command == "compare" else "")
        said, status = _stopped(exc)
        _say_stopped(f"siggate {args.command}: {said}{again}")
        return status


if __name__ == "__main__":
    sys.exit(main())
