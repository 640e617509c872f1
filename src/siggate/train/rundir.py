"""A training run's folder, as ``siggate train`` guards it: whether it holds a run, a
default name that is free, clearing it for ``--overwrite``, and the run's saved config for
``--resume``. Light: no torch.

A folder *holds a run* when it has any of :data:`RUN_MARKERS` (``config.yaml`` is written
before the first epoch, ``last.pt`` after each, ``metrics.json`` at the end), or is an
folder of several members (its ``metrics.json``, ``ensemble.json`` of older ensembles, or
``member{i}/`` folders holding runs; see :mod:`siggate.train.ensemble`).
"""

from __future__ import annotations

import copy
import csv
import io
import math
import re
import shutil
from pathlib import Path

import yaml

from ..config import split_resolved, upgrade_config_dict
from ..data.similarity import DOMAIN_FILE, FINGERPRINTS_FILE
from ..files import atomic_write_bytes
from .plots import LEARNING, PARITY, RESIDUALS

#: Files whose presence makes a folder a run.
RUN_MARKERS = ("config.yaml", "last.pt", "metrics.json")
#: a run's split-conformal calibration (``record.write_calibration``), read by ``siggate predict --coverage``
CALIBRATION = "calibration.json"
#: Everything ``siggate train`` writes into a run folder (files, and the TensorBoard folder
#: ``tb``); ``--overwrite`` removes these and the ``member{i}`` folders of an ensemble.
RUN_OUTPUTS = RUN_MARKERS + ("best.pt", "log.csv", "ensemble.json", "predictor.json", "test_predictions.csv",
                              "splits.csv", "data_report.csv", CALIBRATION, DOMAIN_FILE, FINGERPRINTS_FILE,
                              PARITY, LEARNING, RESIDUALS)
RUN_FOLDERS = ("tb",)
_MEMBER = re.compile(r"member\d+")


def _members(out: Path) -> list[Path]:
    if not out.is_dir():
        return []
    return sorted(p for p in out.iterdir() if p.is_dir() and _MEMBER.fullmatch(p.name))


def run_files(out: str | Path) -> list[str]:
    """The files that make ``out`` a run (relative to ``out``; empty when it holds none)."""
    out = Path(out)
    found = [name for name in RUN_MARKERS + ("ensemble.json",) if (out / name).is_file()]
    for member in _members(out):
        found += [f"{member.name}/{name}" for name in RUN_MARKERS if (member / name).is_file()]
    return found


def holds_run(out: str | Path) -> bool:
    """Whether ``out`` holds a run or an ensemble (see the module docstring)."""
    return bool(run_files(out))


def free_run_dir(base: str | Path) -> Path:
    """``base`` if it holds no run, else the first of ``base-2``, ``base-3``, ... that holds none."""
    base = Path(base)
    path, n = base, 1
    while holds_run(path):
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def clear_run(out: str | Path) -> None:
    """Remove what ``siggate train`` wrote into ``out`` (:data:`RUN_OUTPUTS`, :data:`RUN_FOLDERS`,
    unfinished atomic writes ``.*.tmp``, and ensemble members); other files stay."""
    out = Path(out)
    for member in _members(out):
        clear_run(member)
        if not any(member.iterdir()):
            member.rmdir()
    for name in RUN_OUTPUTS:
        (out / name).unlink(missing_ok=True)
    for name in RUN_FOLDERS:
        if (out / name).is_dir():
            shutil.rmtree(out / name)
    for tmp in out.glob(".*.tmp"):
        tmp.unlink(missing_ok=True)


def saved_config_path(out: str | Path, ensemble: bool = False) -> Path:
    """The ``config.yaml`` that ``--resume`` reads: ``out``'s own, or its first member's for an
    ensemble (members differ only in their seed)."""
    out = Path(out)
    return out / "member0" / "config.yaml" if ensemble else out / "config.yaml"


def read_saved_config(path: str | Path) -> dict:
    """A run's saved ``config.yaml`` as a config dict: ``_meta`` dropped, older schemas upgraded."""
    saved = yaml.safe_load(Path(path).read_text()) or {}
    meta = saved.pop("_meta", None) or {}
    return split_resolved(upgrade_config_dict(saved), meta.get("resolved"))[0]


def resume_differences(saved: dict, current: dict) -> list[str]:
    """The config values in which ``current`` (built from the flags given with ``--resume``)
    differs from the run's ``saved`` config, one ``"key: checkpoint has A, current config
    has B"`` per key; ``train.epochs`` (a resumed run may grow) and the run-local keys
    (where data lies, threads) may differ."""
    from .checkpoint import config_differences  # torch; only when resuming

    return config_differences(saved, current, ignore=("train.epochs",))


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


def write_test_predictions(path: str | Path, rows: list[int], smiles: list[str], names: list[str],
                           labels: list[list[float]], preds: list[list[float]],
                           uncertainty: list[list[float]] | None = None) -> Path:
    """Write ``row,smiles,<t>,<t>_pred[,<t>_pred_uncertainty]...`` per test molecule: its data
    row in the input file (0-based), its SMILES, then per target its label (empty where
    missing) and prediction, in target units (probabilities for classification), and an
    ensemble's standard deviation over members. ``labels``/``preds``/``uncertainty``: ``[G, T]``."""
    def fmt(v: float) -> str:
        return "" if v is None or math.isnan(v) else f"{v:.6g}"

    header = ["row", "smiles"]
    for n in names:
        header += [n, f"{n}_pred"] + ([f"{n}_pred_uncertainty"] if uncertainty is not None else [])
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    for g, (r, s) in enumerate(zip(rows, smiles)):
        fields = [r, s]
        for t in range(len(names)):
            fields += [fmt(labels[g][t]), fmt(preds[g][t])] + ([fmt(uncertainty[g][t])] if uncertainty is not None else [])
        w.writerow(fields)
    atomic_write_bytes(Path(path), buf.getvalue().encode("utf-8"))
    return Path(path)
