"""Shared plumbing of the ``siggate analyze`` sub-commands.

Config resolution, dataset loading (with an optional cap on the number of graphs),
training one run per variant (reusing :func:`siggate.train.pipeline.train`, skipping runs
that already finished), model-detail collection, JSON/table output.
Nothing here computes a result; the metric definitions live in
:mod:`siggate.analysis.metrics`.
"""

from __future__ import annotations

import copy
import json
import math
import os
import platform
import time
from pathlib import Path
from typing import Iterable, Sequence

import torch

from ..config import Config, load_config, set_itself
from ..config_args import CLIError, absolute_paths, check_out_folder, flag_key_clash, set_keys
from ..files import atomic_write_bytes
from ..options import init_is_none, progress_enabled
from ..version import __version__

# --------------------------------------------------------------------------- CLI


#: the analyses' count flags (their argparse ``dest``) and the least value each takes
COUNT_FLAGS = {"batch_size": 1, "draws": 1, "nodes": 2, "dim": 1, "heads": 1, "max_graphs": 1, "sweep_draws": 1,
               "propagate": 0, "batches": 1, "reps": 1, "warmup": 0, "seed": 0}


def start(args, min_epochs: int | None = None) -> tuple[Path, bool]:
    """Refuse a count flag below its least value (:data:`COUNT_FLAGS`; ``--epochs`` below
    ``min_epochs``, when given) in one line; apply ``--threads``; return the ``--out``
    directory and whether progress bars are on."""
    check_counts(args, min_epochs)
    check_out_folder(args.out, "the analysis")
    set_threads(args.threads)
    return Path(args.out), progress_enabled(args)


def check_counts(args, min_epochs: int | None = None) -> None:
    """Refuse, in one line, a count flag of ``args`` below its least value (:data:`COUNT_FLAGS`;
    ``--epochs`` below ``min_epochs``, when given)."""
    least = {**COUNT_FLAGS, **({"epochs": min_epochs} if min_epochs is not None else {})}
    for dest, low in least.items():
        value = getattr(args, dest, None)
        if value is not None and value < low:
            raise CLIError(f"--{dest.replace('_', '-')} must be >= {low}, got {value}")


def parse_list(text: str | Sequence, cast=str, flag: str = "", choices: Sequence | None = None,
               positive: bool = False) -> list:
    """The comma-separated items of ``text`` (or the items of a sequence), each ``cast``; an item
    that does not cast, is not one of ``choices``, or (``positive``) is not a finite number above
    0 is refused naming ``flag`` (:class:`~siggate.config_args.CLIError`), before any work (a depth
    or learning rate of 0 was refused by its config key, after the data was read). A repeated item
    is kept once, in its first place: a seed or depth given twice is one run, not two pairs of a
    paired test. A list of no items is refused."""
    items = list(text) if isinstance(text, (list, tuple)) else [t.strip() for t in str(text).split(",") if t.strip()]
    out = []
    for item in items:
        try:
            value = cast(item)
        except ValueError:
            raise CLIError(f"{flag or 'a list'}: {item!r} is not {'an integer' if cast is int else 'a number'}") from None
        if choices is not None and value not in choices:
            raise CLIError(f"{flag or 'a list'}: unknown {item!r}; choose from {', '.join(map(str, choices))}")
        if positive and not (math.isfinite(value) and value > 0):
            raise CLIError(f"{flag or 'a list'}: {item!r} is not a number above 0; give "
                           f"{'whole numbers >= 1' if cast is int else 'finite numbers above 0'}")
        if value not in out:
            out.append(value)
    if not out:  # (',' gave nothing: an empty analysis, written over the last one's results)
        raise CLIError(f"{flag or 'a list'}: {str(text)!r} names nothing; give at least one comma-separated item")
    return out


def parse_seeds(text: str | Sequence, flag: str = "--seeds") -> list[int]:
    """The seeds of ``text`` (:func:`parse_list`), each refused naming ``flag`` before any work
    unless in ``0..SEED_MAX`` (``train.seed``'s range): ``--seeds -1`` was refused as the config key
    ``train.seed`` after the data was read."""
    from ..options import SEED_MAX

    seeds = parse_list(text, int, flag)
    bad = next((s for s in seeds if not 0 <= s <= SEED_MAX), None)
    if bad is not None:
        raise CLIError(f"{flag}: {bad} is no seed; give whole numbers from 0 to {SEED_MAX}")
    return seeds


def parse_gates(text: str | Sequence, flag: str = "--gates", positions: bool = False) -> list[str]:
    """The gate kinds of ``text`` (:func:`parse_list`; ``positions``: each may be
    ``GATE@POSITION``), an unknown kind or position refused naming ``flag`` before any work: a
    misspelt gate was refused as the config key ``model.gate`` after the data was read, and by
    ``analyze entropy`` only after the gates before it had trained."""
    from ..options import GATE_KINDS, GATE_POSITIONS, parse_gate_spec

    items = parse_list(text, flag=flag)
    for item in items:
        gate, position = parse_gate_spec(item) if positions else (item, None)
        if gate not in GATE_KINDS or (position is not None and position not in GATE_POSITIONS):
            where = f"; a position after @: {', '.join(GATE_POSITIONS)}" if positions else ""
            raise CLIError(f"{flag}: unknown {item!r}; choose from {', '.join(GATE_KINDS)}{where}")
    return items


def config_from(args, extra: Iterable[str] = (), owned: dict[str, str] | None = None) -> Config:
    """Config from ``--config``/``--set`` (+ ``extra`` overrides). ``owned``: the keys the
    analysis sets in each run itself, and from what (``{"model.gate": "from --gates"}``;
    ``train.epochs`` counts where ``--epochs`` gives a number): a ``--set`` of one is refused (the
    analysis replaced it silently). So are ``--data-root`` or ``--cache-dir`` with the ``--set``
    key they set, and one key set twice (the later silently won)."""
    if getattr(args, "overrides", None) is not None:
        given = set_keys(args)
        clash = flag_key_clash(args, [f for f in ("data_root", "cache_dir", "max_graphs") if hasattr(args, f)], given)
        if clash:
            raise CLIError(clash)
        owned = {k: f"in each run {v}" for k, v in (owned or {}).items()
                 if k != "train.epochs" or getattr(args, "epochs", None)}
        clash = set_itself(sorted(given), owned, f"analyze {getattr(args, 'analysis', '')}")
        if clash:
            raise CLIError(clash)
    overrides = list(getattr(args, "overrides", []) or []) + list(extra)
    for flag, key in (("data_root", "data.root"), ("cache_dir", "data.cache_dir")):  # quoted, as train does them
        if getattr(args, flag, None):  # (unquoted, YAML read 0123 as 83, ~ as None, '#2' as a comment)
            overrides.append(f"{key}={json.dumps(str(getattr(args, flag)))}")
    if getattr(args, "max_graphs", None):  # in the config: a finished run of another cut is another run
        overrides.append(f"data.max_graphs={args.max_graphs}")
    cfg = load_config(getattr(args, "config", None), overrides)
    absolute_paths(cfg)  # (as train records them)
    return cfg


def require_attention(cfg: Config, analysis: str) -> None:
    """Refuse, before any data is read or model trained, an analysis of attention heads
    (``analysis``: its name) on a model without an attention branch (``model.attn: false``, the
    ``--data`` recipe's GNN), which failed with a traceback after training."""
    if not cfg.model.attn:
        raise CLIError(f"analyze {analysis} measures the attention heads, and this model has no attention branch "
                       "(model.attn: false, the --data recipe's GNN); use a model trained with --set model.attn=true"
                       + (" --set train.init=none (the pretrained weights have no attention)"
                          if not init_is_none(cfg.train.init or "") else ""))


def variant(cfg: Config, epochs: int | None = None, **sets) -> Config:
    """Copy of ``cfg`` with ``section__key=value`` changes (e.g. ``model__gate="none"``).

    ``epochs`` shortens the run; the warmup keeps its fraction of the protocol
    (:meth:`~siggate.config.TrainConfig.set_epochs`, the rule of ``siggate train --budget``).
    """
    new = copy.deepcopy(cfg)
    for k, v in sets.items():
        sec, key = k.split("__")
        setattr(getattr(new, sec), key, v)
    if epochs is not None and epochs > 0:
        new.train.set_epochs(epochs)
    return new.validate()


def set_threads(n: int) -> None:
    if n and n > 0:
        torch.set_num_threads(n)


# -------------------------------------------------------------------------- data


def prepare_data(cfg: Config, progress: bool = True):
    """Indirection over :func:`siggate.train.dataprep.prepare_data` (tests replace it)."""
    from ..train.dataprep import prepare_data as _prepare

    return _prepare(cfg.data, cfg.model, cfg.train.seed, progress)


def load_dataset(cfg: Config, progress: bool = True):
    """The dataset of ``cfg``, every split cut to its first ``data.max_graphs`` graphs where it
    gives them (``--max-graphs``: in the config, so that a run's record says on what it trained;
    :func:`prepare_data` cuts it, and the cut is taken again here for a dataset prepared otherwise)."""
    ds = prepare_data(cfg, progress)
    return ds.first(cfg.data.max_graphs) if cfg.data.max_graphs else ds


def batches(graphs, batch_size: int):
    from torch_geometric.loader import DataLoader

    # own generator: iterating a loader without one draws from the global RNG (and would
    # shift the dropout stream of a training run measured between epochs)
    return DataLoader(list(graphs), batch_size=batch_size, shuffle=False, generator=torch.Generator().manual_seed(0))


# ---------------------------------------------------------------------- training


class RunConflict(CLIError):
    """A run directory holds a run of a different config (one line, exit code 2)."""


def train_run(cfg: Config, run_dir: Path, dataset, progress: bool = True) -> dict:
    """Train ``cfg`` into ``run_dir`` unless its finished run is there
    (:func:`siggate.train.study.reuse_status`, the rule every sweep uses); returns its
    ``metrics.json`` (plus ``"reused": bool``). An unfinished run of the same config is
    resumed (exactly, see :mod:`siggate.train.loop`); a run of another config raises
    :class:`RunConflict` rather than being mixed in. A run that stops on a non-finite loss
    returns ``{"diverged": True, "error": ...}`` instead of raising.

    The run holds its folder's lock (:class:`~siggate.files.FolderLock`) from its reuse check to
    its record, as a ``siggate train`` run does: a second analysis into the same ``--out`` (here or
    on a Ray worker) is refused in one line (:class:`~siggate.config_args.CLIError`) instead of
    resuming the run from the first one's ``last.pt`` while that one trains it on, the two
    processes appending to one ``log.csv`` and writing each other's checkpoints."""
    from ..files import claim_folder
    from ..train.loop import NonFiniteLossError
    from ..train.pipeline import train
    from ..train.study import reuse_status

    run_dir = Path(run_dir)
    lock = claim_folder(run_dir, CLIError, "run", "two analyses must not train one run: wait for the other to end, "
                        "or give this one another --out", "the analysis's runs")
    try:
        status = reuse_status(run_dir, cfg.to_dict())
        if status.state == "conflict":
            raise RunConflict(f"{run_dir} holds a run of another config ({status.reason}); "
                              "remove it or choose another --out")
        if status.state == "done":
            return {**status.metrics, "reused": True}
        try:
            m = train(cfg, run_dir, resume=True, progress=progress, dataset=dataset, stop_untrained=False)  # (recorded)
        except NonFiniteLossError as exc:
            return {"diverged": True, "error": str(exc), "val": float("nan"), "history": [], "reused": False}
    finally:
        lock.release()
    m["reused"] = False
    return m


def train_remote(cfg: dict, run_dir: str, threads: int = 0) -> dict:
    """:func:`train_run` on a Ray worker: the worker loads the (cached) dataset itself, cut as
    the config says (``data.max_graphs``) as the driver's is, so the run computes what it would
    locally; ``threads`` torch threads (0: torch's default)."""
    from ..config import from_dict

    if threads:
        set_threads(threads)
    c = from_dict(cfg)
    return train_run(c, Path(run_dir), load_dataset(c, progress=False), progress=False)


def measurable(trained: dict, what: str) -> dict:
    """``trained`` (:func:`train_many`'s ``{key: metrics}``) when no run diverged; else a
    :class:`~siggate.config_args.CLIError` naming the first that did: its weights hold non-finite
    values, so ``what`` cannot be measured on it (a linear-algebra traceback before)."""
    for key, m in trained.items():
        if m.get("diverged"):
            raise CLIError(f"run {key} diverged ({m.get('error')}), so its {what} cannot be measured; lower the "
                           "learning rate (--set train.lr=...), or measure untrained models with --epochs 0")
    return trained


def train_many(runs: dict, dataset, args, progress: bool = True, desc: str = "runs") -> dict:
    """Train every ``{key: (cfg, run_dir)}`` as one study (:mod:`siggate.train.study`) and
    return ``{key: metrics}`` (see :func:`train_run`). ``--backend local`` (the default) trains
    them here one after the other on ``dataset``; ``--backend ray`` makes each one a Ray task
    that loads the dataset itself (see :mod:`siggate.train.executor`).

    Raises:
        RunConflict: a run folder holds a run of another config (before anything trains).
        CLIError: runs failed (on Ray; one line naming each and its cause).
    """
    from ..train.executor import CallRequest, InlineExecutor, executor_from_args, task_threads
    from ..train.study import StudyRun, execute, finished, plan

    local = getattr(args, "backend", "local") == "local"
    study = []
    for key, (c, run_dir) in runs.items():
        if local:
            request = CallRequest(key, "siggate.analysis.common:train_run",
                                  {"cfg": c, "run_dir": Path(run_dir), "dataset": dataset, "progress": progress},
                                  run_dir)
        else:
            request = CallRequest(key, "siggate.analysis.common:train_remote",
                                  {"cfg": c.to_dict(), "run_dir": str(run_dir),
                                   "threads": args.threads or task_threads(args)}, run_dir)
        study.append(StudyRun(key, Path(run_dir), c.to_dict(), request))
    conflicts = [r.error for r in plan(study) if r.state == "conflict"]
    if conflicts:  # one line: the first, and how many more
        raise RunConflict(conflicts[0] + (f" ({len(conflicts) - 1} more run(s) of this --out likewise)"
                                          if len(conflicts) > 1 else ""))
    reused = {r.key for r in study if r.state == "done"}
    # (the Ray-only flags without --backend ray were refused when the command line was parsed)
    execute(study, InlineExecutor() if local else executor_from_args(args), desc=desc, progress=progress)
    failed = [f"run {r.key}: {r.error}" for r in study if r.state == "failed"]
    if failed:  # (a Ray task's; in this process a run's own error stops the sweep as it is raised)
        raise CLIError(f"{len(failed)} of {len(study)} runs failed" + ("" if local else " on Ray") + ": "
                       + "; ".join(failed) + " (the finished runs are kept: mend the cause and run the command "
                       "again to train the others)")
    return {k: {**m, "reused": m.get("reused", k in reused)} for k, m in finished(study).items()}


def load_run_model(run_dir: Path, which: str = "last"):
    from ..train.modelprep import load_trained

    return load_trained(Path(run_dir) / f"{which}.pt")


# ---------------------------------------------------------------------- details


@torch.no_grad()
def forward_details(model, graphs, batch_size: int = 64):
    """Yield ``(batch, details)`` of ``model`` in eval mode over ``graphs``."""
    model.eval()
    for batch in batches(graphs, batch_size):
        _, det = model(batch, return_details=True)
        yield batch, det


def add_gate_sum(det: dict, mask, total, count: int) -> tuple:
    """``(total, count)``, the running sum of each layer's mean gate value weighted by nodes
    (``[L]`` or ``None``) and the nodes counted, with one forward's ``det`` (its real nodes
    ``mask [B, N]``) added. Every node of every graph counts, one-node graphs too, so the mean
    ``total / count`` does not depend on how the graphs are batched."""
    if not det["attn"] or det["attn"][0]["gate"] is None:
        return total, count
    nodes = int(mask.sum())
    g = torch.stack([a["gate"][mask].double().mean() for a in det["attn"]]) * nodes
    return (g if total is None else total + g), count + nodes


# ------------------------------------------------------------------------ output


def finite(x) -> float | None:
    """JSON-safe float (``None`` for NaN/inf)."""
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _json_default(o):
    if isinstance(o, torch.Tensor):
        return o.tolist()
    if hasattr(o, "item"):
        return o.item()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def _clean(o):
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, dict):
        return {str(k): _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    return o


def meta(args=None, cfg: Config | None = None) -> dict:
    """Provenance block stored in every result JSON."""
    from ..train.record import git_commit

    out = {
        "siggate_version": __version__,
        "git_commit": git_commit(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    if args is not None:
        out["argv"] = {k: v for k, v in vars(args).items() if k not in ("func", "model_defaults")}  # (the flags)
    if cfg is not None:
        out["config"] = cfg.to_dict()
    return out


def write_json(obj: dict, path: Path) -> Path:
    """Write ``obj`` as JSON (NaN/inf -> null) atomically."""
    path = Path(path)
    atomic_write_bytes(path, json.dumps(_clean(obj), indent=2, default=_json_default).encode())
    return path


def write_outputs(res: dict, out: Path, name: str, plot) -> Path:
    """``OUT/<name>.json`` (:func:`write_json`) and the figure ``plot(res, OUT/<name>.png)``;
    returns the JSON path."""
    path = write_json(res, Path(out) / f"{name}.json")
    plot(res, Path(out) / f"{name}.png")
    return path


def fmt(x, digits: int = 4) -> str:
    if x is None:
        return "-"
    if isinstance(x, str):
        return x
    if isinstance(x, bool):
        return str(x)
    if isinstance(x, int):
        return str(x)
    if not math.isfinite(x):
        return "nan"
    return f"{x:.{digits}g}"


def table(headers: list[str], rows: list[list], markdown: bool = False) -> str:
    """A plain-text (or Markdown) table."""
    cells = [[fmt(c) for c in r] for r in rows]
    if markdown:
        lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
        lines += ["| " + " | ".join(r) + " |" for r in cells]
        return "\n".join(lines)
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in cells]
    return "\n".join(out)
