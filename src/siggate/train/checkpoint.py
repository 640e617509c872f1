"""Checkpoints: plain data (tensors, numbers, strings, lists, dicts), written atomically.

A checkpoint never holds a pickled Python object, so it loads with
``torch.load(weights_only=True)``; one that needs anything more (for example a crafted
pickle payload) is refused without running it.
"""

from __future__ import annotations

import os
import pickle
import random
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import torch

import siggate

FORMAT_VERSION = 1


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be used: missing, corrupt, unsafe or incompatible."""


def atomic_save(obj, path: str | Path) -> None:
    """``torch.save`` to a temporary file in the same folder, fsync, then rename over ``path``.

    If anything fails (including a full disk) the temporary file is removed and the
    previous file at ``path`` is left untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            torch.save(obj, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        try:
            dfd = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        except OSError:
            pass
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def load_checkpoint(path: str | Path, map_location="cpu") -> dict:
    """Load a siggate checkpoint safely (``weights_only=True``) and check its format."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"checkpoint not found: {path}. Pass the best.pt or last.pt written by 'siggate train --out DIR'.")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        raise CheckpointError(
            f"refused to load {path}: it contains Python objects other than plain tensors and "
            f"containers, which could run code when unpickled. siggate checkpoints never do; "
            f"this file is not one of ours or was tampered with. (detail: {str(exc).splitlines()[0]})"
        ) from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError, ValueError) as exc:
        raise CheckpointError(f"cannot read checkpoint {path}: the file is truncated or corrupt ({exc}).") from None
    if not isinstance(ckpt, dict) or "format" not in ckpt or "model" not in ckpt:
        raise CheckpointError(f"{path} is not a siggate checkpoint (no 'format'/'model' entries).")
    if ckpt["format"] > FORMAT_VERSION:
        raise CheckpointError(
            f"{path} was written by a newer siggate (checkpoint format {ckpt['format']}, "
            f"siggate {ckpt.get('siggate_version')}); this is siggate {siggate.__version__} "
            f"(format {FORMAT_VERSION}). Upgrade siggate to load it."
        )
    return ckpt


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
