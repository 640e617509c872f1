"""``siggate`` command line: wires configs, data, training and analyses together.

Sub-commands: ``train``, ``evaluate``, ``predict``, ``data`` here; ``compare``, ``analyze``
and ``bench`` are registered by their own light modules (see ``EXTRA_COMMANDS``). Building the
parser imports no torch, PyG, RDKit, SciPy or matplotlib (``tests/test_cli_help.py``): a
parser's ``func`` may be ``"module:function"``, imported only when that command runs.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import logging
import sys
from pathlib import Path

from .config_args import (
    CLIError,
    add_command,
    add_config_args,
    add_device_flag,
    add_threads_flag,
    check_device,
    config_from_args,
)
from .files import out_dir_problem
from .options import add_progress_flag, progress_enabled

# name -> light module exposing ``register(subparsers)``; each sets ``func`` on its parser.
EXTRA_COMMANDS = {
    "compare": "siggate.train.compare",
    "analyze": "siggate.analysis.cli",
    "bench": "siggate.perf.cli",
}

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
        "siggate predict --checkpoint runs/x --input molecules.csv --output preds.csv",
        "siggate predict --checkpoint runs/pattern-elementwise-seed0 --split test --output nodes.csv",
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


def cmd_train(args) -> int:
    from .train.loop import train

    cfg = config_from_args(args)
    if args.on_nan:
        cfg.train.on_nan = args.on_nan
    if args.ddp and args.ensemble is not None:
        raise CLIError("--ensemble trains its members one after the other; it does not combine with --ddp")
    from .data.catalog import DATASET_META

    if args.ensemble is not None and DATASET_META.get(cfg.data.name, {}).get("level") == "node":
        raise CLIError(f"--ensemble averages graph-level predictions; {cfg.data.name} is a node-level dataset. "
                       "Train its seeds one by one, or compare them with siggate compare.")
    if args.ddp:
        return _train_ddp(cfg, args)
    out = default_out_dir(cfg, args.out)
    check_out_dir(out)
    if args.ensemble is not None:
        return _train_ensemble(cfg, out, args)
    print(f"siggate train: dataset={cfg.data.name} {_attention(cfg)} layers={cfg.model.layers} "
          f"dim={cfg.model.dim} epochs={cfg.train.epochs} seed={cfg.train.seed} -> {out}", flush=True)
    m = train(cfg, out, resume=args.resume, progress=progress_enabled(args))
    print(json.dumps({k: m[k] for k in ("dataset", "metric", "best_epoch", "val", "test", "params", "seconds")}, indent=2))
    return 0


def default_out_dir(cfg, out: str | None = None) -> Path:
    """``out`` if given, else ``runs/<dataset>-<gate>-seed<seed>`` (``siggate train``'s default)."""
    if out:
        return Path(out)
    return Path("runs") / f"{cfg.data.name}-{cfg.model.gate}-seed{cfg.train.seed}"


def _train_ensemble(cfg, out: Path, args) -> int:
    """``siggate train --ensemble N``: N members (seeds seed..seed+N-1) in OUT/member*/."""
    from .train.ensemble import train_ensemble

    if args.ensemble < 1:
        raise CLIError(f"--ensemble must be >= 1, got {args.ensemble}")
    print(f"siggate train: ensemble of {args.ensemble} on dataset={cfg.data.name} {_attention(cfg)} "
          f"seeds {cfg.train.seed}..{cfg.train.seed + args.ensemble - 1} -> {out}", flush=True)
    res = train_ensemble(cfg, out, args.ensemble, resume=args.resume, progress=progress_enabled(args))
    print(json.dumps({k: res[k] for k in ("metric", "seeds", "member_test", "val", "test")}, indent=2))
    return 0


def check_out_dir(out: Path) -> None:
    """Refuse an output folder that cannot be one before any work starts: an existing file,
    or a place where the folder cannot be created or written."""
    problem = out_dir_problem(out)
    if problem:
        raise CLIError(f"--out {problem} for the run")


def _train_ddp(cfg, args) -> int:
    """``siggate train --ddp``: join the torchrun process group and run
    :func:`siggate.train.loop.train` on it. Only rank 0 prints, logs and writes files."""
    import torch.distributed as dist

    from .train.distributed import init_distributed
    from .train.loop import train

    try:
        ctx = init_distributed()
    except RuntimeError as exc:
        print(f"siggate train: error: {exc}", file=sys.stderr)
        return 2
    try:
        out = default_out_dir(cfg, args.out)
        if ctx.is_main:
            print(f"siggate train --ddp: world_size={ctx.world_size} device={ctx.device} dataset={cfg.data.name} "
                  f"{_attention(cfg)} global_batch={cfg.train.batch_size} epochs={cfg.train.epochs} "
                  f"seed={cfg.train.seed} -> {out}", flush=True)
        else:
            logging.getLogger("siggate").setLevel(logging.WARNING)
        m = train(cfg, out, resume=args.resume, progress=ctx.is_main and progress_enabled(args), dist=ctx)
        if ctx.is_main:
            print(json.dumps({k: m[k] for k in ("dataset", "metric", "best_epoch", "val", "test", "params",
                                                "seconds", "world_size")}, indent=2))
        ctx.barrier()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    return 0


def _set_threads(args) -> None:
    """Apply ``--threads`` (where the command has it) before any work."""
    if getattr(args, "threads", None):
        import torch

        torch.set_num_threads(args.threads)


def cmd_evaluate(args) -> int:
    from .files import atomic_write_bytes
    from .train.evaluate import EvaluationError, evaluate

    if args.data is None and (args.target_col or args.smiles_col != "smiles"):
        raise CLIError("--smiles-col/--target-col name the columns of --data FILE.csv; give --data too")
    if args.data is not None and args.split is not None:
        raise CLIError(f"--split applies to the run's own data; --data {args.data} is scored whole (drop --split)")
    device = check_device(args.device)
    targets = [c.strip() for c in args.target_col.split(",") if c.strip()] if args.target_col else None
    try:
        res = evaluate(args.checkpoint, split=args.split or "test", data=args.data, smiles_col=args.smiles_col,
                       target_cols=targets, allow_changed=args.allow_changed, data_root=args.data_root,
                       cache_dir=args.cache_dir, device=device, progress=progress_enabled(args))
    except EvaluationError as exc:
        raise CLIError(str(exc)) from None
    text = json.dumps(res, indent=2)
    print(text)
    if args.output:
        atomic_write_bytes(Path(args.output), (text + "\n").encode())
        print(f"siggate evaluate: wrote {args.output}", file=sys.stderr)
    return 0



def cmd_predict(args) -> int:
    from .train.predict import Predictor, predict_to_csv, read_smiles
    from .train.predict_nodes import checkpoint_level, predict_nodes_to_csv

    if checkpoint_level(args.checkpoint) == "node":
        if args.smiles or args.input:
            raise CLIError("this checkpoint predicts per node of its dataset's graphs, not from SMILES; "
                           "drop the SMILES/--input and choose graphs with --split")
        n = predict_nodes_to_csv(args.checkpoint, args.split or "test", args.output,
                                 data_root=args.data_root, cache_dir=args.cache_dir)
        print(f"siggate predict: {n} node rows" + (f" -> {args.output}" if args.output else ""), file=sys.stderr)
        return 0
    if args.split:
        raise CLIError("--split applies to node-level checkpoints (pattern, cluster, sbm-large); "
                       "give SMILES as arguments or --input FILE")
    if not args.smiles and not args.input:
        raise CLIError("give SMILES as arguments or --input FILE")
    pred = Predictor(args.checkpoint, max_atoms=args.max_atoms, device=check_device(args.device))
    chunks = [list(args.smiles)] if args.smiles else read_smiles(args.input, args.smiles_col, args.chunk_size)
    n, bad = predict_to_csv(pred, chunks, args.output)
    print(f"siggate predict: {n} rows, {n - bad} predicted, {bad} failed"
          + (f" -> {args.output}" if args.output else ""), file=sys.stderr)
    return 1 if bad else 0


def cmd_data(args) -> int:
    from .data.catalog import list_datasets

    if args.action == "list":
        for d in list_datasets():
            print(f"{d['name']:18s} {'(needs data root) ' if d.get('needs_root') else ''}{d.get('description', '')}")
        return 0
    if not args.name:
        raise CLIError("siggate data verify NAME [--data-root DIR]")
    from .data.catalog import DATASET_META
    from .data.verify import verify

    options = {k: getattr(args, k) for k in ("max_graphs", "num_nodes") if getattr(args, k)}
    meta = DATASET_META.get(str(args.name).strip().lower())
    refused = [k for k in options if meta is not None and k not in meta["options"]]
    if refused:
        flag = "--" + refused[0].replace("_", "-")
        raise CLIError(f"{flag} does not apply to {args.name}; it applies to "
                       + ", ".join(sorted(n for n, m in DATASET_META.items() if refused[0] in m["options"])))
    res = verify(args.name, root=args.data_root, cache_dir=args.cache_dir, progress=progress_enabled(args), **options)
    print(json.dumps(res, indent=2, default=str))
    return 0


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = argparse.ArgumentParser(prog="siggate", description="SigGate-GT: gated graph transformers")
    parser.add_argument("--version", action="version", version=f"siggate {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = add_command(sub, "train", "train a model (default: the nci5k config)", EXAMPLES["train"])
    add_config_args(p)
    p.add_argument("--out", default=None, help="output directory (default: runs/<dataset>-<gate>-seed<seed>)")
    p.add_argument("--resume", action="store_true", help="continue from OUT/last.pt")
    p.add_argument("--ensemble", type=int, default=None, metavar="N",
                   help="train N members with seeds seed..seed+N-1 into OUT/member*/; siggate predict on OUT "
                        "averages them and adds an uncertainty column (their std)")
    p.add_argument("--on-nan", choices=["stop", "skip"], default=None, help="on a non-finite loss: stop (default) or skip the batch")
    p.add_argument("--ddp", action="store_true", help="distributed data parallel (under torchrun)")
    add_progress_flag(p)
    add_threads_flag(p, default_text="train.threads, else torch's choice")
    p.set_defaults(func=cmd_train)

    p = add_command(sub, "evaluate", "score a run or ensemble on its splits or on a labelled CSV", EXAMPLES["evaluate"],
                    description="Score a trained run (a folder or a .pt) or an ensemble folder (the mean of its "
                                "members) on its own data's splits, or on your own labelled CSV with --data, "
                                "featurized as in training. Prints the metric per split and per target as JSON.")
    p.add_argument("--checkpoint", required=True, metavar="RUN",
                   help="run folder (its best.pt), ensemble folder (OUT/ensemble.json) or .pt checkpoint")
    p.add_argument("--split", default=None, help="split of the run's own data: train, val, test or all (default: test)")
    p.add_argument("--data", default=None, metavar="FILE.csv",
                   help="score this labelled CSV of SMILES instead (every row; invalid SMILES and empty labels are counted)")
    p.add_argument("--smiles-col", default="smiles", help="SMILES column of --data (default: smiles)")
    p.add_argument("--target-col", default=None, metavar="COL[,COL...]",
                   help="label column(s) of --data, in the model's target order (default: the training targets' names)")
    p.add_argument("--allow-changed", action="store_true",
                   help="score the run's training CSV even if it changed since training (re-split; default: refuse)")
    p.add_argument("--output", default=None, metavar="FILE.json", help="also write the scores to this JSON file")
    p.add_argument("--data-root", default=None, help="benchmark data root (default: as in training, or $SIGGATE_DATA)")
    p.add_argument("--cache-dir", default=None, help="cache for processed data (default: $SIGGATE_CACHE)")
    add_device_flag(p)
    add_threads_flag(p)
    add_progress_flag(p)
    p.set_defaults(func=cmd_evaluate)

    p = add_command(sub, "predict", "predict properties of molecules from SMILES, or per node of a "
                                    "node-level dataset's graphs", EXAMPLES["predict"])
    p.add_argument("--checkpoint", required=True, metavar="RUN",
                   help="run folder (its best.pt), ensemble folder (mean and uncertainty) or .pt checkpoint")
    p.add_argument("smiles", nargs="*", help="SMILES strings")
    p.add_argument("--split", default=None,
                   help="node-level checkpoints: the dataset split to predict, train, val, test or all (default: test)")
    p.add_argument("--data-root", default=None, help="node-level checkpoints: benchmark data root")
    p.add_argument("--cache-dir", default=None, help="node-level checkpoints: cache for processed data")
    p.add_argument("--input", default=None, help="CSV with a SMILES column, or a .smi/.txt file with one SMILES per line")
    p.add_argument("--smiles-col", default="smiles", help="SMILES column of --input (default: smiles)")
    p.add_argument("--output", default=None, help="output CSV (default: stdout)")
    p.add_argument("--max-atoms", type=int, default=1000,
                   help="refuse molecules with more atoms, with a reason per row (default: 1000; attention is quadratic)")
    p.add_argument("--chunk-size", type=int, default=1000,
                   help="rows of --input read, predicted and written at a time (default: 1000)")
    add_device_flag(p)
    add_threads_flag(p)
    p.set_defaults(func=cmd_predict)

    p = add_command(sub, "data", "list datasets or verify one", EXAMPLES["data"])
    p.add_argument("action", choices=["list", "verify"], help="list: the registered datasets; verify: load one, print its counts")
    p.add_argument("name", nargs="?", help="dataset to verify (see siggate data list)")
    p.add_argument("--data-root", default=None, help="benchmark data root (default: $SIGGATE_DATA)")
    p.add_argument("--cache-dir", default=None, help="cache for processed data (default: $SIGGATE_CACHE)")
    p.add_argument("--max-graphs", type=int, default=0, metavar="N",
                   help="generated datasets (pattern, cluster): only the first N graphs of each split")
    p.add_argument("--num-nodes", type=int, default=0, metavar="N", help="sbm-large: nodes of its graph")
    add_threads_flag(p)
    add_progress_flag(p)
    p.set_defaults(func=cmd_data)

    for name, module in EXTRA_COMMANDS.items():
        if importlib.util.find_spec(module) is not None:
            importlib.import_module(module).register(sub)
    return parser


#: the commands whose ``--threads`` :func:`main` applies (compare and analyze apply their own)
THREADED = ("train", "evaluate", "predict", "data")


def _user_errors() -> tuple:
    """The errors :func:`main` prints as one line with exit code 2, imported only once one was
    raised (so that light commands such as ``siggate data list`` never import torch)."""
    from .config import ConfigError
    from .data.base import DataError
    from .train.checkpoint import CheckpointError
    from .train.loop import NonFiniteLossError
    from .train.predict import InputError

    return CLIError, ConfigError, DataError, CheckpointError, InputError, NonFiniteLossError, FileNotFoundError


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    func = args.func
    if isinstance(func, str):  # "module:function" of a light parser, imported now
        module, _, name = func.partition(":")
        func = getattr(importlib.import_module(module), name)
    try:
        if args.command in THREADED:
            _set_threads(args)
        return int(func(args) or 0)
    except Exception as exc:
        if not isinstance(exc, _user_errors()):
            raise
        print(f"siggate {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"siggate {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
