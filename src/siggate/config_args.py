"""Command-line options shared by the ``siggate`` sub-commands: the ones that select a config
(``--config``, ``--set``, ``--seed``, ...), ``--threads`` and ``--device``, and
:func:`add_command`, which gives every sub-command its examples.

A low module: it imports only :mod:`siggate.config`, so the commands of any package can
build their parsers from it without importing :mod:`siggate.cli`, torch or PyG.
"""

from __future__ import annotations

import argparse
import functools
import json
import textwrap
from pathlib import Path

from .config import ConfigError, key_path, load_config, parse_override, sep_char, text_if_text
from .files import out_dir_problem
from .options import (
    DUPLICATES,
    FRAGMENTS,
    SHIPPED_INIT,
    add_cache_dir_flag,
    add_data_root_flag,
    init_is_none,
    shipped_init_name,
)

__all__ = ["CLIError", "WARMUP_START", "add_command", "add_config_args", "add_device_flag", "add_threads_flag",
           "check_device", "check_out_folder", "config_from_args", "examples_epilog", "set_keys"]

#: the ``data.*`` keys that name a path, recorded absolute with ``~`` expanded (:func:`absolute_paths`)
DATA_PATH_KEYS = ("csv", "root", "cache_dir")

#: Learning-rate factor of the first warmup epoch of a ``siggate train`` run (``train.warmup_start``):
#: no epoch trains below 1% of the base. ``--budget`` (a benchmark protocol run) keeps GraphGPS's
#: published start, 0 (the first epoch at 1e-6 of the base).
WARMUP_START = 0.01


class CLIError(Exception):
    """An error to print as one clean message (exit code 2)."""


def examples_epilog(examples: list[str], description: str | None = None) -> dict:
    """``epilog``, ``formatter_class`` (and ``description``, its paragraphs wrapped) arguments of a
    parser whose ``--help`` ends with ``examples`` (1-3 command lines, each optionally followed by
    ``  # comment``), laid out as written."""
    out = {"epilog": "examples:\n" + "\n".join(f"  {line}" for line in examples),
           "formatter_class": argparse.RawDescriptionHelpFormatter}
    if description:
        out["description"] = "\n\n".join(textwrap.fill(" ".join(par.split()), 88) for par in description.split("\n\n"))
    return out


def add_command(subparsers, name: str, help: str, examples: list[str], description: str | None = None,
                **kw) -> argparse.ArgumentParser:
    """``subparsers.add_parser(name)`` with a one-line ``help``, a ``description`` (default: the
    help as a sentence) and :func:`examples_epilog`. A flag is taken only as written
    (``allow_abbrev=False``): argparse read a prefix as the one flag it begins, so ``predict
    --data x.csv`` became ``--data-root x.csv`` and was refused for a flag never given."""
    kw.setdefault("allow_abbrev", False)
    return subparsers.add_parser(name, help=help, **examples_epilog(examples, description or help[:1].upper()
                                                                    + help[1:] + "."), **kw)


def add_set_flag(p: argparse.ArgumentParser, example: str, what: str = "override a config value") -> None:
    """``--set KEY=VALUE`` (``args.overrides``, repeatable; a key given twice with two values is
    refused by :func:`set_keys`)."""
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help=f"{what}, e.g. --set {example} (repeatable, each key once)")


def add_threads_flag(p: argparse.ArgumentParser, default: int | None = None, default_text: str = "torch's choice",
                     what: str = "torch threads") -> None:
    """``--threads N``: torch threads of this process (``args.threads``); ``what`` says what else they are."""
    p.add_argument("--threads", type=int, default=default, metavar="N",
                   help=f"{what} (default: {default_text})")


def absolute_path(text: str) -> str:
    """``text``, a path, with ``~`` expanded and made absolute: how siggate records a path it was
    given, so that a run reads the same file from any folder."""
    return str(Path(text).expanduser().absolute())


def init_source(text: str) -> str:
    """``--init`` as the config records it: a path made absolute (the run resumes, and its record
    reads, from anywhere, as ``data.csv``'s); ``none`` as given; the shipped weights' word in its
    one spelling (``--init Pretrained`` records ``pretrained``: a resume with either is the same
    run), NAME as given."""
    if init_is_none(text):
        return text
    name = shipped_init_name(text)
    if name is not None:
        return SHIPPED_INIT + (f":{name}" if ":" in text else "")
    return absolute_path(text)


def add_device_flag(p: argparse.ArgumentParser) -> None:
    """``--device cpu|cuda`` (``args.device``, default ``cpu``); see :func:`check_device`."""
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="where the model runs: cpu (default) or cuda (a GPU visible to torch)")


def check_device(name: str) -> str:
    """``name`` if torch can run on it, else a :class:`CLIError` naming the cause and the fix."""
    if name == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise CLIError("--device cuda: torch sees no CUDA device here (torch "
                           f"{torch.__version__}, CUDA build {torch.version.cuda or 'none'}); use --device cpu")
    return name


def add_config_args(p: argparse.ArgumentParser) -> None:
    """``--config``, ``--set``, ``--seed``, ``--epochs``, ``--data-root`` and the CSV options."""
    p.add_argument("--config", default=None, help="built-in config name (nci5k, zinc, molhiv, ...) or a YAML path "
                   "(default: nci5k; csv with --data)")
    add_set_flag(p, "model.gate=none")
    p.add_argument("--seed", type=int, default=None, help="random seed (train.seed)")
    p.add_argument("--epochs", type=int, default=None,
                   help="number of epochs (train.epochs); the config's warmup keeps its fraction of the run")
    p.add_argument("--budget", type=int, default=None, metavar="EPOCHS",
                   help="short run of the same benchmark protocol: --epochs with GraphGPS's published "
                        "warmup start (lr x 1e-6 in the first epoch instead of 1%%)")
    p.add_argument("--init", default=None, metavar="WEIGHTS",
                   help="start from pretrained weights: 'pretrained' (shipped with siggate), a pretrained.pt "
                        "written by siggate pretrain, a checkpoint or a run folder (a path is recorded absolute); "
                        "'none' trains from scratch (train.init; with --data "
                        "the recipe's is 'pretrained')")
    add_data_root_flag(p)
    add_cache_dir_flag(p)
    p.add_argument("--data", default=None, metavar="FILE.csv", help="train on your own CSV of SMILES")
    p.add_argument("--smiles-col", default=None, help="SMILES column of --data (default: smiles)")
    p.add_argument("--target-col", default=None, help="target column(s) of --data, comma-separated")
    p.add_argument("--task", default=None, choices=["regression", "binary", "multilabel"], help="task of --data")
    p.add_argument("--sep", default=None, metavar="CHAR",
                   help="field delimiter of --data (default: detected; ',' ';' tab '|'); 'tab' or \\t for a tab")
    p.add_argument("--split", default=None, help="split of --data: scaffold (default), scaffold_balanced, random or column:NAME")
    p.add_argument("--duplicates", default=None, choices=DUPLICATES,
                   help="rows of --data holding one molecule (same canonical SMILES): keep them as rows (default; "
                        "a warning when their labels differ), average them into one row before splitting "
                        "(regression), or keep the first (data.duplicates); with --split column:NAME only rows "
                        "of one split are merged")
    p.add_argument("--fragments", default=None, choices=FRAGMENTS,
                   help="what the model reads of each molecule of --data, in training and in the run's predict, "
                        "evaluate and explain: all "
                        "of it, as written (default; a salt with its counterions), or its parent, the largest "
                        "carbon fragment neutralized where it has one (CC[NH3+].[Cl-] is read as CCN, one molecule "
                        "with its free base for the duplicates and the splits) (data.fragments)")
    p.add_argument("--val-fraction", default=None, type=float, metavar="F",
                   help="with --split column:NAME whose column has no val rows: draw this fraction of the train "
                        "rows (seeded, a molecule's rows together) as the validation split (data.val_fraction)")
    p.add_argument("--decimal", default=None, choices=[".", ","],
                   help="decimal mark of the targets in --data: '.' (default) or ',' for files such as "
                        "'smiles;y' with values like -5,49 (data.decimal)")


def check_out_folder(out, what: str) -> None:
    """Refuse, before any work, an ``--out`` folder ``out`` that cannot be created or written
    (:func:`siggate.files.out_dir_problem`); ``what`` ends the message (``"the run"``)."""
    problem = out_dir_problem(out)
    if problem:
        raise CLIError(f"--out {problem} for {what}")


def check_out_file(path, flag: str, what: str, example: str, starts: str | None = None) -> Path:
    """Refuse, before any work, a file flag's ``path`` (``--out`` of a report) that is a folder, or
    whose folder cannot be created or written; returns it as a :class:`~pathlib.Path` (its folder
    is made by the writer, once there is something to write). ``example``: a file name to suggest
    inside a folder. ``starts``: the text every file the command writes begins with; another
    file there (a result the command reads, the user's own) is refused, not replaced."""
    path = Path(path)
    if path.is_dir():
        raise CLIError(f"{flag} {path} is a folder; give a file name, e.g. {path / example}")
    if starts is not None and path.is_file():
        try:
            with open(path, "rb") as fh:
                head = fh.read(len(starts.encode()))
        except OSError:
            head = b""
        if head and head != starts.encode():
            raise CLIError(f"{flag} {path} holds a file that is not {what}, which writing it would replace: give a "
                           f"new file name, e.g. {path.with_name(example)}")
    problem = out_dir_problem(path.parent)
    if problem:
        raise CLIError(f"{flag} {problem} for {what}")
    return path


#: the flags that describe ``--data FILE.csv`` and the ``data.*`` key each sets: a key is given by
#: its flag or by ``--set``, not both
CSV_FLAGS = {"smiles_col": "smiles_col", "target_col": "target_cols", "task": "task", "split": "split",
             "duplicates": "duplicates", "decimal": "decimal", "val_fraction": "val_fraction", "sep": "sep",
             "fragments": "fragments"}
#: the flags whose values are the CSV's own names (of the columns, of the split column)
CSV_TEXT_FLAGS = ("smiles_col", "target_col", "split")
#: what ``--data`` assumes where neither the flag nor ``--set`` gives the key
CSV_FLAG_DEFAULTS = {"smiles_col": "smiles", "task": "regression"}


def set_keys(args) -> set[str]:
    """The config keys that ``--set`` gives explicitly (``{"train.warmup_epochs", ...}``).

    Raises :class:`~siggate.config.ConfigError` for a malformed item, and for a key given twice
    with two values (the later one silently won)."""
    seen: dict[str, object] = {}
    for item in args.overrides:
        parts, value = parse_override(item)
        value = text_if_text(key_path(parts), item.split("=", 1)[1], value)  # (as it will be applied: 007 is not 7)
        key = ".".join(key_path(parts))  # (a deprecated flat name and its new one are one key)
        if key in seen and seen[key] != value:
            raise ConfigError(f"--set {key} is given twice ({seen[key]!r} and {value!r}); give it once")
        seen[key] = value
    return set(seen)


def _file_sets(name_or_path: str | None, section: str, key: str, csv: bool = False) -> bool:
    """Whether the config file itself (built-in or a path) writes ``section.key`` (with ``csv``: in a
    data section of a CSV's, ``data.name: csv`` or no name, not a benchmark dataset's)."""
    from .config import resolve_config_path

    try:
        path = resolve_config_path(name_or_path or "nci5k")
        stat = path.stat()
    except (OSError, ConfigError):
        return False  # load_config has already named what is wrong with the file
    raw = _file_sections(str(path.resolve()), stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino, stat.st_size)
    part = raw.get(section) if isinstance(raw, dict) else None
    return isinstance(part, dict) and key in part and (not csv or part.get("name", "csv") == "csv")


@functools.lru_cache(maxsize=8)
def _file_sections(path: str, mtime_ns: int, ctime_ns: int, inode: int, size: int):
    """A config file's YAML as read (its path, times, inode and size the key: one read per command,
    however many flags :func:`_file_sets` asks about); None where it cannot be read."""
    import yaml

    from .config import load_yaml

    try:
        return load_yaml(Path(path).read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return None


def recipe_name(args) -> str | None:
    """The config a command line trains with: ``--config``, else ``csv`` with ``--data``, else
    ``None`` (the default, nci5k)."""
    given = getattr(args, "config", None)
    return given if given is not None else ("csv" if getattr(args, "data", None) else None)


#: the shortcut flags of a run and the key each sets: both given is refused (the flag, appended
#: after the --set items, silently won); :func:`flag_key_clash` checks these unless told which
SHORTCUT_FLAGS = {"seed": "train.seed", "epochs": "train.epochs", "budget": "train.epochs", "init": "train.init",
                  "threads": "train.threads", "on_nan": "train.on_nan", "data_root": "data.root",
                  "cache_dir": "data.cache_dir", "max_graphs": "data.max_graphs"}
#: every flag that sets one config key, the CSV flags of ``--data`` among them
FLAG_KEYS = {**SHORTCUT_FLAGS, **{flag: f"data.{key}" for flag, key in CSV_FLAGS.items()}}


def flag_key_clash(args, flags=tuple(SHORTCUT_FLAGS), given: set[str] | None = None) -> str | None:
    """The refusal of a flag of :data:`FLAG_KEYS` given with the ``--set`` key it sets, or ``None``
    (``siggate train``, the runs ``siggate compare`` hands both to, ``siggate pretrain``'s
    ``--threads``: ``flags`` names the ones a command's parser leaves ``None`` unless given). An
    empty value counts as given where it is applied: ``--init ""`` trains from scratch and a CSV
    flag's ``""`` is its value, while an empty ``--data-root`` is not used. ``given``:
    :func:`set_keys` of ``args``, where the caller has it."""
    given = set_keys(args) if given is None else given
    for flag in flags:
        key = FLAG_KEYS[flag]
        value = getattr(args, flag, None)
        if key in given and value is not None and (value != "" or flag == "init" or flag in CSV_FLAGS):
            return f"--{flag.replace('_', '-')} and --set {key} both set {key}; give one"
    return None


def absolute_paths(cfg) -> None:
    """``cfg``'s paths with ``~`` expanded and made absolute, in place: its :data:`DATA_PATH_KEYS`
    and a ``train.init`` that names a file (:func:`init_source`; the shipped names and ``none``
    stay). The same from anywhere (a resume, evaluate or predict from another folder, a member
    started later), whether a flag, ``--set`` or a YAML file gave them (``--set data.root=data``
    was recorded as ``data``, which evaluate from another folder looked for under its own).
    ``siggate train`` and the analyses apply it."""
    for key in DATA_PATH_KEYS:
        value = getattr(cfg.data, key)
        if value:
            setattr(cfg.data, key, absolute_path(value))
    if cfg.train.init:
        cfg.train.init = init_source(cfg.train.init)


def config_from_args(args):
    """Resolve the config from ``--config``/``--set`` and the shortcut flags; validated.

    ``--epochs``/``--budget`` N scale the config's warmup to ``round(warmup * N / epochs)``
    (unless ``--set train.warmup_epochs`` gives it); the warmup starts at :data:`WARMUP_START`
    of the base learning rate, or at GraphGPS's 0 with ``--budget`` (unless ``--set
    train.warmup_start`` or the config file gives it). A warmup that leaves no epoch after it is
    refused by :func:`siggate.train.members.run_refusal`, where the run trains a GNN.
    """
    overrides = list(args.overrides)
    given = set_keys(args)  # (each --set item parsed once)
    clash = flag_key_clash(args, given=given)
    if clash:
        raise CLIError(clash)
    if args.seed is not None:
        overrides.append(f"train.seed={args.seed}")
    if args.epochs is not None and args.budget is not None:
        raise CLIError("--epochs and --budget both set the number of epochs; give one (--budget runs the "
                       "benchmark protocol's schedule)")
    epochs = args.epochs if args.epochs is not None else args.budget
    if getattr(args, "init", None) is not None:  # 'none' (NO_INIT) or "": from scratch, "" after Config.validate
        overrides.append(f"train.init={json.dumps(init_source(args.init))}")
    if getattr(args, "threads", None) is not None:  # the config's train.threads (csv, nci5k: 1) overrode it
        overrides.append(f"train.threads={args.threads}")
    if getattr(args, "on_nan", None):  # an override, so that --resume compares it with the run's own
        overrides.append(f"train.on_nan={args.on_nan}")
    if args.data_root:  # (made absolute below, with the config's own paths)
        overrides.append(f"data.root={json.dumps(str(args.data_root))}")
    if args.cache_dir:
        overrides.append(f"data.cache_dir={json.dumps(str(args.cache_dir))}")
    if args.data:
        for key in ("data.name", "data.csv"):
            if key in given:
                raise CLIError(f"--set {key} with --data {args.data}: --data sets it; drop the --set")
        clash = flag_key_clash(args, CSV_FLAGS, given)
        if clash:
            raise CLIError(clash)
        if (not args.target_col and "data.target_cols" not in given
                and not _file_sets(recipe_name(args), "data", "target_cols", csv=True)):  # (a resumed run's config)
            raise CLIError("--data needs --target-col COL[,COL...] (and usually --task)")
        # the file's own names are text, never YAML ('--target-col yes' is the column 'yes', not True)
        overrides += ["data.name=csv", f"data.csv={json.dumps(str(Path(args.data).absolute()))}"]  # resumable anywhere
        for flag, key in CSV_FLAGS.items():
            value = getattr(args, flag, None)
            if value is None and f"data.{key}" not in given and not _file_sets(recipe_name(args), "data", key, csv=True):
                value = CSV_FLAG_DEFAULTS.get(flag)  # (a CSV config's own value holds: a run's members.yaml)
            if value is not None and flag != "sep":  # (sep is set below: a tab does not survive an override)
                overrides.append(f"data.{key}={json.dumps(value) if flag in CSV_TEXT_FLAGS else value}")
    else:
        for flag in CSV_FLAGS:
            if getattr(args, flag, None) is not None:
                raise CLIError(f"--{flag.replace('_', '-')} applies to --data FILE.csv only; give --data too (without "
                               f"it siggate trains {args.config or 'nci5k'})")
    cfg = load_config(recipe_name(args), overrides)  # --data: configs/csv.yaml
    absolute_paths(cfg)  # (a YAML's train.init was kept relative)
    sep = getattr(args, "sep", None)
    if args.data and sep is not None:  # (--sep "" detected the delimiter as if no --sep were given)
        sep = sep_char(sep)
        if sep is None:
            raise CLIError(f"--sep: {args.sep!r} is not one character; use e.g. --sep ';' or --sep tab (or leave "
                           "--sep out: the delimiter is detected)")
        cfg.data.sep = sep
    t = cfg.train
    if "train.warmup_start" not in given and not _file_sets(recipe_name(args), "train", "warmup_start"):
        t.warmup_start = 0.0 if args.budget is not None else WARMUP_START
    if epochs is not None:
        if epochs < 1:
            raise CLIError(f"--epochs/--budget must be >= 1, got {epochs}")
        t.set_epochs(epochs, keep_warmup="train.warmup_epochs" in given)  # the protocol's warmup fraction
    return cfg.validate()
