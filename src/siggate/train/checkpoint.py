"""Checkpoints: plain data (tensors, numbers, strings, lists, dicts), written atomically.

A checkpoint never holds a pickled Python object, so it loads with
``torch.load(weights_only=True)``; one that needs anything more (for example a crafted
pickle payload) is refused without running it.
"""

from __future__ import annotations

import random
import zipfile
from pathlib import Path

import numpy as np
import torch

from ..files import UnsafeFile, atomic_torch_save, file_digest, safe_torch_load
from ..options import RUN_LOCAL_KEYS, init_is_shipped, resolve_select
from ..predictors.base import MANIFEST
from ..version import __version__
from .runfiles import BEST, LAST, METRICS

#: 2: the values resolved from the data (``model.pool_norm: 0``) moved out of ``config`` into ``resolved``
FORMAT_VERSION = 2


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be used: missing, corrupt, unsafe or incompatible."""


class CheckpointWriteError(OSError, CheckpointError):
    """Writing a checkpoint failed (full disk, no permission, ...); the previous file is intact.

    Also an ``OSError`` with the original ``errno``, so ``except OSError`` still catches it.
    """

    def __str__(self) -> str:
        return str(self.strerror)


def atomic_save(obj, path: str | Path) -> None:
    """``torch.save`` to ``path`` atomically (:func:`siggate.files.atomic_write`: a temporary
    file in the same folder, fsync, rename, usual permissions).

    If anything fails (including a full disk) the temporary file is removed and the
    previous file at ``path`` is left untouched; an ``OSError`` is raised as
    :class:`CheckpointWriteError` naming the file.
    """
    path = Path(path)
    try:
        atomic_torch_save(obj, path)  # (a stop while it is written comes once it is written)
    except OSError as exc:
        kept = "the previous checkpoint there is intact" if path.exists() else "no checkpoint was written"
        err = CheckpointWriteError(
            exc.errno, f"could not write checkpoint {path}: {exc.strerror or exc}; {kept}"
        )
        raise err from exc


#: Entries every checkpoint written by ``siggate train`` holds.
REQUIRED_KEYS = ("format", "siggate_version", "config", "info", "model", "target_mean", "target_std")


def load_checkpoint(path: str | Path, map_location="cpu", finite: bool = True) -> dict:
    """Load a siggate checkpoint safely (``weights_only=True``) and check it.

    Raises :class:`CheckpointError` naming what is wrong: a missing or unreadable file, a
    truncated or corrupt one, one that holds Python objects other than tensors and plain
    containers (never unpickled: a crafted payload is refused before it can run), one
    written by a newer siggate (format number), or one whose entries, config or task
    description do not fit this version; with ``finite`` (a checkpoint read to predict), one
    whose weights or target scale hold NaN or inf. Training reads its own checkpoints with
    ``finite=False``: a diverged run that an analysis records keeps its (NaN) weights.
    """
    path = Path(path)
    if not path.exists():
        if path.name in (BEST, LAST) and any((path.parent / n).is_file() for n in (MANIFEST, METRICS)):
            raise CheckpointError(f"checkpoint not found: {path}: the finished run there lacks its {path.name}; copy "
                                  "the whole run folder, or retrain it")  # (a run's own, gone)
        raise CheckpointError(f"checkpoint not found: {path}. Pass the best.pt or last.pt written by 'siggate train --out DIR'.")
    if path.is_dir():
        raise CheckpointError(f"{path} is a directory; pass the best.pt or last.pt file inside it.")
    text = _text_file(path)
    if text:
        raise CheckpointError(f"{path} is {text}, not a checkpoint; pass the best.pt written by "
                              "'siggate train --out DIR'.")
    try:
        ckpt = safe_torch_load(path, map_location=map_location)
    except UnsafeFile as exc:
        if exc.global_:
            raise CheckpointError(
                f"refused to load {path}: it contains a Python object ({exc.global_}) other than plain "
                f"tensors and containers, which could run code when unpickled. siggate checkpoints never "
                f"do; this file is not one of ours or was tampered with. Nothing in it was run."
            ) from None
        raise CheckpointError(
            f"cannot read checkpoint {path}: the file is truncated or corrupt, or holds pickle instructions that "
            f"safe loading does not run ({exc.detail}), which siggate checkpoints never hold. Nothing in it was run."
        ) from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError, ValueError, KeyError, AttributeError,
            TypeError, IndexError, UnicodeDecodeError) as exc:
        if isinstance(exc, PermissionError):  # the file system's refusal, not a damaged file (cli names it)
            raise
        raise CheckpointError(
            f"cannot read checkpoint {path}: the file is truncated or corrupt ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else 'unexpected end of file'})."
        ) from None
    _check_structure(ckpt, path, finite)
    return ckpt


#: the state entries whose inf is a value: a constant molecule feature's std (its column is 0 for every molecule)
INF_ALLOWED = ("mol_std",)


def first_nonfinite(tensors: dict) -> str | None:
    """The name of the first floating-point tensor of ``tensors`` holding NaN, or inf outside
    :data:`INF_ALLOWED`, or ``None``."""
    def bad(name: str, v) -> bool:
        if not v.is_floating_point():
            return False
        if name.rsplit(".", 1)[-1] in INF_ALLOWED:
            return bool(torch.isnan(v).any())
        return not bool(torch.isfinite(v).all())

    return next((k for k, v in tensors.items() if bad(k, v)), None)


def _text_file(path: Path) -> str | None:
    """What a text file given as a checkpoint is (``"a text file (CSV)"``), or None for a file that
    may be one: torch's zip archive (``PK``), a legacy pickle (``0x80``) or any binary content."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except OSError:
        return None
    if not head or head[:2] == b"PK" or head[:1] == b"\x80" or b"\x00" in head:
        return None
    if head.startswith(b"version https://git-lfs"):
        return "a Git LFS pointer (the file itself was never fetched: git lfs pull)"
    first = head.decode("utf-8", errors="replace").lstrip("\ufeff").lstrip()  # a cp1252 'µ' is text too
    printable = sum(c.isprintable() or c in "\r\n\t" for c in first)
    if printable < 0.95 * max(len(first), 1):
        return None
    kind = ("JSON" if first[:1] in "{[" else "YAML" if first.startswith(("format:", "model:", "train:", "data:"))
            else "CSV or other text")
    return f"a text file ({kind})"


def _check_structure(ckpt, path: Path, finite: bool = True) -> None:
    if not isinstance(ckpt, dict) or "format" not in ckpt or "model" not in ckpt:
        raise CheckpointError(f"{path} is not a siggate checkpoint (no 'format'/'model' entries).")
    fmt = ckpt["format"]
    written_by = f"siggate {ckpt.get('siggate_version', '(unknown version)')}"
    if isinstance(fmt, str) and fmt.startswith("siggate-pretrained-"):  # siggate pretrain's weights, no head
        raise CheckpointError(f"{path} holds pretrained weights (siggate pretrain's), not a trained model: they predict "
                              f"nothing until fine-tuned on labels: siggate train --data FILE.csv --target-col COL "
                              f"--init {path}")
    if isinstance(fmt, bool) or not isinstance(fmt, int):
        raise CheckpointError(f"{path}: checkpoint format must be an integer, got {fmt!r}; it is not a siggate checkpoint.")
    if fmt > FORMAT_VERSION:
        raise CheckpointError(
            f"{path} was written by a newer siggate (checkpoint format {fmt}, {written_by}); "
            f"this is siggate {__version__} (format {FORMAT_VERSION}). Upgrade siggate to load it."
        )
    if fmt < 1:
        raise CheckpointError(f"{path}: unknown checkpoint format {fmt} ({written_by}); this siggate reads format {FORMAT_VERSION}.")
    missing = [k for k in REQUIRED_KEYS if k not in ckpt]
    if missing:
        raise CheckpointError(
            f"{path} lacks the entries {missing} that every siggate checkpoint has ({written_by}); "
            "it is incomplete or was not written by 'siggate train'."
        )
    if not isinstance(ckpt["model"], dict) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in ckpt["model"].items()
    ):
        raise CheckpointError(f"{path}: 'model' is not a state dict of named tensors.")
    for key in ("target_mean", "target_std"):
        if not isinstance(ckpt[key], torch.Tensor):
            raise CheckpointError(f"{path}: {key!r} must be a tensor, got {type(ckpt[key]).__name__}.")
    bad = first_nonfinite({**ckpt["model"], "target_mean": ckpt["target_mean"], "target_std": ckpt["target_std"]})
    if finite and (bad is not None or bool((ckpt["target_std"] <= 0).any())):  # every prediction would be NaN, or scaled by 0
        raise CheckpointError(f"{path}: {'its ' + bad + ' holds NaN or inf' if bad else 'its target_std is not positive'}"
                              "; a run's checkpoint never does (it was damaged, or saved after training diverged): "
                              "use another checkpoint of the run, or train again")
    _check_info(ckpt["info"], path, written_by)
    if isinstance(ckpt["config"], dict):  # configs of older siggate versions -> current schema
        from ..config import split_resolved, upgrade_config_dict

        ckpt["config"] = upgrade_config_dict(ckpt["config"])
        ckpt["config"], ckpt["resolved"] = split_resolved(ckpt["config"], ckpt.get("resolved"))
    _check_config(ckpt["config"], path, written_by)


def _check_info(info, path: Path, written_by: str) -> None:
    from dataclasses import fields

    from ..data.base import TaskInfo

    if not isinstance(info, dict):
        raise CheckpointError(f"{path}: 'info' must be a mapping, got {type(info).__name__}.")
    known = [f.name for f in fields(TaskInfo)]
    unknown = [k for k in info if k not in known]
    if unknown:
        raise CheckpointError(
            f"{path}: its task description has fields {unknown} that this siggate ({__version__}) "
            f"does not know (it was written by {written_by}); known fields: {known}."
        )
    try:
        TaskInfo(**info)
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"{path}: its task description does not fit this siggate ({written_by}): {exc}") from None


def _check_config(cfg, path: Path, written_by: str) -> None:
    from ..config import ConfigError, from_dict

    if not isinstance(cfg, dict):
        raise CheckpointError(f"{path}: 'config' must be a mapping, got {type(cfg).__name__}.")
    try:
        from_dict(cfg)
    except ConfigError as exc:
        raise CheckpointError(
            f"{path}: its config does not fit this siggate ({__version__}); it was written by "
            f"{written_by}. {exc}"
        ) from None


def describe_weight_mismatch(expected: dict, saved: dict) -> list[str]:
    """What differs between a model's ``state_dict()`` and saved weights: missing and
    unexpected names, and shapes that differ (empty when they fit)."""
    out = []
    for k in expected:
        if k not in saved:
            out.append(f"{k}: missing from the checkpoint")
        elif tuple(expected[k].shape) != tuple(saved[k].shape):
            out.append(f"{k}: checkpoint has shape {tuple(saved[k].shape)}, the model expects {tuple(expected[k].shape)}")
    out += [f"{k}: in the checkpoint but not in the model" for k in saved if k not in expected]
    return out


def shrink_refusal(path, epochs: int, done: int) -> str | None:
    """Why the run whose resume checkpoint ``path`` has trained ``done`` epochs cannot resume with
    ``train.epochs=epochs`` (its record would say it ran ``epochs`` and hold more), or None. The
    one rule of ``resume_run`` and of ``siggate train --resume``'s check before the data load."""
    if epochs >= done:
        return None
    return (f"cannot resume from {path} with train.epochs={epochs}: the run has trained {done} epochs, and a "
            f"resumed run may grow, not shrink; give --epochs {done} or more")


def damaged_state(path, exc: Exception) -> CheckpointError:
    """The refusal of a resume checkpoint ``path`` whose training state does not read (``exc``)."""
    detail = str(exc).splitlines()[0] if str(exc) else repr(exc)
    return CheckpointError(f"cannot resume from {path}: its training state is not one siggate wrote "
                           f"({type(exc).__name__}: {detail}); the file is damaged or was edited: restore it, or "
                           "train the run again with --overwrite")


def trained_epochs(path) -> int:
    """The epochs the resume checkpoint ``path`` has trained (read safely, :func:`load_checkpoint`).

    Raises:
        CheckpointError: an unreadable or foreign file, or a damaged training state (:func:`damaged_state`)."""
    try:
        return int(load_checkpoint(path, finite=False)["state"]["epoch"])  # (a count: the weights are not checked)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        raise damaged_state(path, exc) from None


def rng_state() -> dict:
    """Python, numpy and torch RNG states as plain data."""
    py = random.getstate()
    np_state = np.random.get_state()
    return {
        "python": [py[0], list(py[1]), py[2]],
        "numpy": [np_state[0], torch.from_numpy(np_state[1].astype(np.int64)), int(np_state[2]),
                  int(np_state[3]), float(np_state[4])],
        "torch": torch.get_rng_state(),
    }


def set_rng_state(state: dict) -> None:
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    n = state["numpy"]
    np.random.set_state((n[0], n[1].numpy().astype(np.uint32), n[2], n[3], n[4]))
    torch.set_rng_state(state["torch"])


def config_differences(saved_cfg: dict, current_cfg: dict, ignore: tuple = (),
                       csv_sha256: str | None = None) -> list[str]:
    """:func:`describe_incompatibility` without :data:`RUN_LOCAL_KEYS` and ``ignore``, with
    ``train.select`` compared as a run of its own applies it (:func:`_select_applied`) and
    ``data.csv`` as :func:`_same_csv` compares it (``csv_sha256``: the SHA-256 the saved run
    recorded for its CSV, :func:`~siggate.train.record.data_source`)."""
    skip = RUN_LOCAL_KEYS + tuple(ignore)
    saved_cfg, current_cfg = _select_applied(saved_cfg), _select_applied(current_cfg)
    saved_cfg = _same_init(_same_csv(saved_cfg, current_cfg, csv_sha256), current_cfg)
    return [d for d in describe_incompatibility(saved_cfg, current_cfg) if d.split(":", 1)[0] not in skip]


def _same_init(saved: dict, current: dict) -> dict:
    """``saved`` with its ``train.init`` written as ``current`` writes it where both name one file:
    a run saved before ``--init`` was recorded as an absolute path holds it relative to the folder
    it was started in (the same file when used from there)."""
    a, b = ((c.get("train") or {}).get("init") if isinstance(c, dict) else None for c in (saved, current))
    if not (isinstance(a, str) and isinstance(b, str)) or a == b or not a or not b:
        return saved
    if init_is_shipped(a) or init_is_shipped(b) or Path(a).expanduser().absolute() != Path(b).expanduser().absolute():
        return saved
    return {**saved, "train": {**saved["train"], "init": b}}


def _same_csv(saved: dict, current: dict, sha256: str | None = None) -> dict:
    """``saved`` with its ``data.csv`` written as ``current`` writes it where both name one file:
    a run saved before ``--data`` was recorded as an absolute path holds it relative to the
    folder it was started in (the same file when resumed from there), and a run whose file was
    moved or copied (to another machine) is resumed on the copy when the copy's SHA-256 is the
    one the run recorded (``sha256``)."""
    a, b = ((c.get("data") or {}).get("csv") if isinstance(c, dict) else None for c in (saved, current))
    if not (isinstance(a, str) and isinstance(b, str)) or a == b:
        return saved
    if Path(a).absolute() != Path(b).absolute() and not (sha256 and Path(b).is_file() and file_digest(b) == sha256):
        return saved
    return {**saved, "data": {**saved["data"], "csv": b}}


def _select_applied(config: dict) -> dict:
    """``config`` with ``train.select`` as a run of its own applies it (``auto`` is ``best`` there,
    :func:`~siggate.options.resolve_select`; a config saved before the key existed is ``auto``),
    so a run saved with ``best``, or without the key, is the same run under the default ``auto``
    (for resuming it and for reusing it in a study). A member weighed on val is given a concrete
    ``last`` by :func:`~siggate.train.members.build_members`, which stays a difference."""
    train = config.get("train") if isinstance(config, dict) else None
    if not isinstance(train, dict):
        return config
    return {**config, "train": {**train, "select": resolve_select(train.get("select", "auto"), weighs_on_val=False)}}


def describe_incompatibility(saved_cfg: dict, current_cfg: dict, prefix: str = "") -> list[str]:
    """Human-readable list of config values that differ between two nested dicts."""
    diffs = []
    for key in sorted(set(saved_cfg) | set(current_cfg)):
        a, b = saved_cfg.get(key, "<missing>"), current_cfg.get(key, "<missing>")
        if isinstance(a, dict) and isinstance(b, dict):
            diffs += describe_incompatibility(a, b, f"{prefix}{key}.")
        elif a != b:
            diffs.append(f"{prefix}{key}: checkpoint has {a!r}, current config has {b!r}")
    return diffs
