"""scikit-learn estimators on SMILES: :class:`SigGateRegressor` and :class:`SigGateClassifier`.

They follow scikit-learn's conventions, so ``clone``, ``cross_val_score``, ``GridSearchCV`` and
``Pipeline`` take them: ``__init__`` only stores hyperparameters, :meth:`fit` learns and returns
``self``, learned state ends in ``_``, ``get_params``/``set_params`` come from ``BaseEstimator``.
``X`` is a sequence of SMILES strings (a list, a 1-d array, a pandas Series, an ``[n, 1]`` array
or a one-column DataFrame); ``y`` is ``[n]`` or ``[n, T]`` (regression, NaN: missing) or ``[n]`` with two classes.

They are ``siggate train --data FILE.csv`` and ``siggate predict`` behind another front door,
not a second copy: :meth:`fit` writes the molecules to a CSV (every row a training row, no test
split, since the caller holds the test data) and ``--val-fraction`` draws a seeded
``val_fraction`` of them for validation (whole molecules, per class for the classifier: the
combination's weights, the fingerprint members' options, a GNN's epoch), resolves the config with the command line's own parser and
:func:`~siggate.config_args.config_from_args`, trains with
:func:`siggate.train.ensemble.train_members` (the ``--members``/``--ensemble`` path) and loads
the result with :func:`~siggate.train.members.load_predictor`; :meth:`predict` featurizes and
refuses SMILES as :class:`~siggate.train.predict.SmilesPredictor` does (its atom limit raised to
the largest molecule fit trained on).

Fitted attributes: ``predictor_`` (the run's predictor), ``smiles_predictor_``,
``calibration_`` (the run's split-conformal calibration, or None without validation labels:
what :meth:`SigGateRegressor.predict_interval` and :meth:`SigGateClassifier.predict_set` read),
``left_out_`` (``(position in X, reason)`` of every molecule fit left out, or merged into an
earlier row of its molecule by ``overrides=['data.duplicates=average']``), ``target_names_``,
``n_features_in_``, ``feature_names_in_`` (a DataFrame ``X``'s column name; predict refuses a
DataFrame of another) and, for the classifier, ``classes_``.

Example::

    from sklearn.model_selection import cross_val_score
    from siggate import SigGateRegressor

    scores = cross_val_score(SigGateRegressor(epochs=30), smiles, y, cv=5, scoring="neg_mean_absolute_error")
"""

from __future__ import annotations

import contextlib
import copy
import csv
import dataclasses
import json
import logging
import math
import numbers
import os
import random
import re
import shutil
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Callable

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.utils.validation import check_is_fitted

from .options import DUPLICATES, FRAGMENTS, LOG_FORMAT, PREDICT_MAX_ATOMS, SEED_MAX, recipe_members, run_weights
from .train.rundir import ESTIMATOR_RECORD, FITTING, estimator_record

#: held by each fit: fits in threads of one process take turns, since training seeds torch's, NumPy's
#: and Python's global random generators (and fit restores them, and siggate's log level, after it)
_ONE_FIT = threading.RLock()
#: the CSV columns :meth:`_SigGateEstimator.fit` writes
_SMILES, _SPLIT = "smiles", "split"
#: the name of the CSV of X and y that fit writes into its work folder (and its refusals name)
_FIT_CSV = "data.csv"

#: NumPy's warning of a complex number cast to real (``numpy.exceptions`` from 1.25; the top level before)
_ComplexWarning = getattr(np, "exceptions", np).ComplexWarning
#: the refusal of a complex ``y`` (scikit-learn's words for it first)
_COMPLEX_Y = "Complex data not supported: y holds complex numbers; give real labels (y.real, if the imaginary parts are 0)"

#: the command line's flags that fit sets, and the estimator parameter each one is
_PARAM_OF_FLAG = {"--val-fraction": "val_fraction", "--members": "members", "--weights": "weights",
                  "--ensemble": "ensemble", "--epochs": "epochs", "--seed": "random_state", "--set": "overrides",
                  "--config": "config", "--target-col": "y", "--smiles-col": "X"}


#: config keys that fit itself sets, and what sets them: an override of one is refused before any
#: work (``train.seed`` and ``train.threads`` were set over, ``data.val_fraction`` refused as a flag)
_KEYS_FIT_SETS = {"data.name": "itself (it trains on the SMILES of X)",
                  "data.csv": "itself (it writes its own CSV of X and y)",
                  "data.smiles_col": "itself (it writes its own CSV of X and y)", "data.target_cols": "from y",
                  "data.task": "from the estimator's class (SigGateRegressor or SigGateClassifier)",
                  # (not "from val_fraction": that draws validation rows at random, never a scaffold split)
                  "data.split": "itself (a random val_fraction of X's molecules validates, the rest train, and no "
                                "test split is held out: split X yourself, e.g. by scaffold, before fit)",
                  "data.val_fraction": "from val_fraction",
                  "data.cache_dir": "itself (a folder of its own)", "train.seed": "from random_state",
                  "train.threads": "from threads"}
#: the ``data.*`` keys an estimator's ``overrides`` may set: what to do with rows of one molecule and
#: with salts;
#: every other one describes the CSV that fit writes itself (its delimiter, decimal mark, rows)
_DATA_KEYS_OF_USERS = ("data.duplicates", "data.fragments")


def _user_level() -> int:
    """The ``stacklevel`` at which ``warnings.warn``, called by the function that calls this, names
    the first frame outside siggate: the caller's line, however deep the estimator's own calls go
    (a fixed level named a line of this module from some entry points)."""
    import sys

    here, level, frame = os.path.dirname(os.path.abspath(__file__)), 1, sys._getframe(1)
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(here + os.sep):
        frame, level = frame.f_back, level + 1
    return level


@contextlib.contextmanager
def _data_warnings(capture: bool):
    """The warnings the data layer logs about the molecules and labels while the block runs (a
    list, filled when it ends), kept from the terminal, for fit to give as ``UserWarning``s; the
    count of rows left out aside (fit says it itself). ``capture=False`` (``verbose``): none, they
    are logged as for the command line."""
    said: list[str] = []
    if not capture:
        yield said
        return
    logger, fitting = logging.getLogger("siggate.data.csvdata"), threading.get_ident()

    class Kept(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.thread != fitting:  # another thread's load: its records go on as they would have
                if logger.parent is not None:
                    logger.parent.handle(record)
                return
            text = record.getMessage()
            if record.levelno >= logging.WARNING and not re.match(r"[^:]*: skipped \d+ of \d+ rows", text):
                said.append(text)

    handler, before = Kept(), (logger.level, logger.propagate)
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)  # (fit's quiet logger is at ERROR)
    logger.propagate = False
    try:
        yield said
    finally:
        logger.removeHandler(handler)
        logger.setLevel(before[0])
        logger.propagate = before[1]


def _data_warning_in_fit_words(text: str, kept: bool) -> str:
    """A data warning of training (:func:`_data_warnings`) as it holds for fit: its predict's atom
    limit is the largest molecule it trained on, its validation rows are drawn by ``random_state``,
    and without an ``out_dir`` (``kept``) no ``data_report.csv`` outlives fit."""
    text = text.replace("siggate predict refuses them unless --max-atoms is raised",
                        "predict takes them (its atom limit is the largest molecule fit trained on)")
    text = text.replace("a random split (another seed draws another) puts labels of it into training",
                        "another random_state draws other validation rows")
    if not kept:
        text = re.sub(r" \(data_report\.csv(?: in the run folder)? lists them\)", "", text)
        text = re.sub(r"; data_report\.csv(?: in the run folder)? lists them\)", ")", text)
    return text


def _in_estimator_words(text: str, data: Path | None = None) -> str:
    """A refusal of ``siggate train`` as fit's caller reads it: the CSV that fit wrote (``data``)
    is not named and, in a refusal of that CSV, its lines are the molecules' positions in X (its
    line 2 holds ``X[0]``; a config file's lines stay lines), and each
    flag is the estimator parameter behind it (``--members`` -> ``members``)."""
    if data is not None and str(data) in text:  # a refusal of fit's CSV: its lines are X's molecules
        text = text.replace(f"{data}: ", "")
        text = re.sub(r"\bline (\d+)\b", lambda m: f"X[{int(m.group(1)) - 2}]" if int(m.group(1)) >= 2 else m.group(0),
                      text)
    # a flag that sets a data key the overrides may set: that override (with its value where one follows)
    values = "|".join(DUPLICATES + FRAGMENTS)
    text = re.sub(rf"--(duplicates|fragments)(?: ({values})\b)?",
                  lambda m: f"overrides=['data.{m.group(1)}={m.group(2)}']" if m.group(2)
                  else f"the override data.{m.group(1)}", text)
    # a config key set on the command line is an override; a task flag is the other estimator
    text = re.sub(r"--set '?([a-z_]+(?:\.[A-Za-z_0-9]+)+=[^\s;,)']+)'?", lambda m: f"overrides=['{m.group(1)}']", text)
    text = re.sub(r"pass --task binary(?: \(data\.task\))?", "use SigGateClassifier", text)
    text = re.sub(r"pass --task multilabel(?: \(data\.task\))?", "fit a SigGateClassifier per target", text)
    return re.sub(r"--[a-z][a-z-]*\b", lambda m: _PARAM_OF_FLAG.get(m.group(0), m.group(0)), text)


def _smiles(X) -> list[str]:
    """``X`` as a list of SMILES strings."""
    if isinstance(X, (str, bytes)):  # (one SMILES is no sequence of them: "got shape ()" named no cause)
        raise ValueError(f"X is one SMILES string ({X!r}), and X must be a sequence of SMILES: give a list, e.g. "
                         f"[{X!r}]")
    arr = np.asarray(X, dtype=object)
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr[:, 0]
    if arr.ndim != 1:
        raise ValueError(f"X must be a sequence of SMILES strings ([n] or [n, 1]), got shape {arr.shape}")
    bad = [i for i, s in enumerate(arr) if not isinstance(s, str)]
    if bad:
        value = arr[bad[0]]
        if value is None or (isinstance(value, float) and math.isnan(value)) or type(value).__name__ == "NAType":
            raise ValueError(f"X must hold SMILES strings; row {bad[0]} is a missing value ({value!r}, an empty cell): "
                             "drop the rows without a SMILES first (e.g. df.dropna(subset=[...]))")
        raise ValueError(f"X must hold SMILES strings; row {bad[0]} is {type(value).__name__}")
    return [str(s) for s in arr]


def _feature_names(X) -> np.ndarray | None:
    """scikit-learn's ``feature_names_in_`` of ``X``: a DataFrame's column names when all are
    strings (an object array), else None."""
    cols = getattr(X, "columns", None)
    if cols is None or not all(isinstance(c, str) for c in cols):
        return None
    return np.asarray(list(cols), dtype=object)


def _refuse_infinite(y: np.ndarray, where: str) -> None:
    """ValueError naming the rows of ``y`` (``[n, T]``) that hold an infinite label, or one beyond
    float32's range, in which labels are kept (training read such a cell as missing, without a word
    where another target's label kept the row)."""
    inf = np.flatnonzero(np.isinf(y).any(axis=1))
    if len(inf):
        raise ValueError(f"{where}y holds an infinite label at row(s) {inf[:5].tolist()}; give a number, or NaN for a "
                         "missing label")
    with np.errstate(invalid="ignore"):
        large = np.flatnonzero((np.abs(y) > np.finfo(np.float32).max).any(axis=1))
    if len(large):
        raise ValueError(f"{where}y holds a label beyond float32's range (about ±3.4e38), in which labels are kept, at "
                         f"row(s) {large[:5].tolist()}; rescale y (a logarithm, or other units)")


def _target_names(y, width: int) -> list[str]:
    """The names of ``y``'s targets: a DataFrame's columns or a Series' name where they can name
    CSV columns (unique, no comma or control character, not ``smiles``/``split``), else ``y`` (one
    target) or ``y0``, ``y1``, ..."""
    from .data.chem import control_character

    cols = getattr(y, "columns", None)
    name = getattr(y, "name", None)
    names = [str(c) for c in cols] if cols is not None else [str(name)] if name is not None and width == 1 else []
    if (len(names) == width and len(set(names)) == width and not set(names) & {_SMILES, _SPLIT}
            and all(n.strip() == n and n and "," not in n and not control_character(n) for n in names)):
        return names
    return [f"y{t}" for t in range(width)] if width > 1 else ["y"]


@contextlib.contextmanager
def _kept_global_state():
    """Python's, NumPy's and torch's global random states and torch's thread count as they were
    before (training seeds them): a scikit-learn estimator leaves its caller's draws alone."""
    import torch

    state = (random.getstate(), np.random.get_state(), torch.get_rng_state(), torch.get_num_threads())
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None  # (never starts CUDA itself)
    try:
        yield
    finally:
        random.setstate(state[0])
        np.random.set_state(state[1])
        torch.set_rng_state(state[2])
        torch.set_num_threads(state[3])
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)


@contextlib.contextmanager
def _claimed(out: Path | None):
    """``(out, begin)``: ``out`` (None: nothing) locked for this fit, where a run that ``siggate
    train`` made is refused, and so is a folder another live run writes into; ``begin()``, called
    once the fit's parameters and data are checked and training starts, sets the run an earlier
    fit left there (its :data:`ESTIMATOR_RECORD`) aside and marks the folder as this fit's. A fit refused
    before ``begin`` leaves the earlier run as it was; one that fails or is interrupted after it
    puts the earlier run back in place of its partial one; one that finishes removes it."""
    if out is None:
        yield None, lambda: None
        return
    from .files import claim_folder
    from .train.rundir import ASIDE, clear_run, drop_aside, restore_aside, run_files, run_output_names, set_aside

    lock = claim_folder(out, ValueError, "out_dir", "two runs must not write into one folder", "the fit")
    try:
        if (out / ASIDE).is_dir() and _fitting(out / ESTIMATOR_RECORD):  # a refit killed outright (kill -9):
            clear_run(out)  # its partial run gives way to the earlier fit's, kept aside, before anything else
            restore_aside(out)
        ours = (out / ESTIMATOR_RECORD).is_file()
        found = run_files(out)
        if found and not ours:  # (a run's marker files: siggate train's, or a user's own of those names)
            raise ValueError(f"out_dir {out} holds {', '.join(found[:3])}{', ...' if len(found) > 3 else ''}: a run "
                             "that siggate train made, or files of its names; fit would replace them: choose another "
                             "out_dir, or move them first")
        if not ours:  # no earlier fit's: files of the names a fit writes are someone's own, not to be replaced
            clashing = run_output_names(out)
            if clashing:
                raise ValueError(f"out_dir {out} holds {clashing}, of the names siggate's runs write (a fit writes "
                                 "some of them, by its members), and no earlier fit made them: choose another out_dir, "
                                 "or move them")
        marker, begun = out / ESTIMATOR_RECORD, False

        def begin() -> None:
            nonlocal begun
            if ours:  # kept aside until this fit has trained: a refit that fails or is interrupted puts it back
                set_aside(out)
            marker.write_text(json.dumps({"estimator": FITTING}) + "\n")  # a fit that fails midway stays ours
            begun = True

        try:
            yield out, begin
        except BaseException:
            if begun and (out / ASIDE).is_dir():  # a refit stopped: its partial run gives way to the earlier fit's
                clear_run(out)
                restore_aside(out)
            elif begun and not run_files(out):  # failed before it wrote a run: nothing of it stays
                marker.unlink(missing_ok=True)
            raise
        drop_aside(out)  # the refit is done: the earlier fit's run goes
    finally:
        lock.release()


def _fitting(record: Path) -> bool:
    """Whether ``record`` (:data:`ESTIMATOR_RECORD`) marks a fit that began and never finished."""
    return record.is_file() and estimator_record(record).get("estimator") == FITTING


class _SigGateEstimator(BaseEstimator):
    """What both estimators share (see the module docstring).

    Args:
        epochs: training epochs (``None``: the config's, 60 for the ``csv`` recipe).
        members: the kinds of model combined (``--members``): ``"gnn"``, ``"svr"``, ``"rf"`` or several,
            e.g. ``"gnn,svr,rf"`` (``None``: the recipe's, as ``siggate train --data`` without
            ``--members``: :func:`~siggate.options.recipe_members` of ``config``, ``csv`` by default).
        weights: how several members combine (``--weights``): ``"equal"`` or ``"val"`` (fitted on the
            held-out rows); ``None``: the recipe's. Copies of one kind always average equally
            (:func:`~siggate.options.run_weights`).
        ensemble: GNN members with seeds ``s..s+ensemble-1``, ``s`` the seed of ``random_state`` (``--ensemble``).
        config: a config name or file (``None``: ``csv``, the ``--data`` recipe).
        overrides: ``"section.key=value"`` strings (``--set``), e.g. ``("train.init=none", "model.layers=2")`` (another
            architecture than the shipped weights' starts from scratch). Keys that ``fit`` sets from
            ``X``, ``y`` or a parameter (``train.seed``: ``random_state``, ``train.threads``: ``threads``,
            ``data.val_fraction``, ``data.csv``, ...; ``train.epochs`` beside ``epochs``) are refused.
        random_state: the seed of the validation draw and of training (``--seed``), scikit-learn's
            name: a whole number >= 0 (default 0, so that a fit repeats), or, as scikit-learn
            reads it, ``None`` (a seed drawn from NumPy's global generator) or a NumPy
            ``RandomState``/``Generator`` (a seed drawn from it); the seed a fit used is ``seed_``.
        seed: the former name of ``random_state`` (deprecated: a ``FutureWarning``).
        val_fraction: the fraction of the rows held out for validation, by molecule and per class
            (at least one row).
        threads: torch threads while training (``train.threads``).
        device: ``"cpu"`` or ``"cuda"``.
        out_dir: keep the run there (a ``siggate predict --checkpoint`` folder; an earlier fit's
            run there is replaced once a fit's parameters and data are checked); ``None``: a
            temporary folder removed after :meth:`fit`. ``""`` and an unexpanded ``"~/..."`` are
            refused (as ``--out`` refuses ``~``: give ``os.path.expanduser``'s path).
        verbose: siggate's log lines (INFO and above) while fitting: on stderr, as ``siggate train``
            shows them, or through the caller's logging where it configured a handler (default
            ``False``: only errors, and the data's warnings as ``UserWarning``).
    """

    _task = "regression"

    def __init__(self, epochs=None, members=None, ensemble=1, config=None, overrides=None, random_state=0,
                 val_fraction=0.1, threads=1, device="cpu", out_dir=None, verbose=False, weights=None, seed=None):
        self.epochs = epochs
        self.members = members
        self.weights = weights
        self.ensemble = ensemble
        self.config = config
        self.overrides = overrides
        self.random_state = random_state
        self.seed = seed
        self.val_fraction = val_fraction
        self.threads = threads
        self.device = device
        self.out_dir = out_dir
        self.verbose = verbose

    # ------------------------------------------------------------------ fitting

    def _targets(self, y) -> tuple[np.ndarray, list[str]]:
        """``y`` as ``[n, T]`` floats and the target names (:func:`_target_names`)."""
        to_numpy = getattr(y, "to_numpy", None)  # pandas: its missing values (pd.NA of a nullable dtype) as NaN
        try:
            with warnings.catch_warnings():  # (NumPy cast complex labels to real with this warning alone)
                warnings.simplefilter("error", _ComplexWarning)
                values = (to_numpy(dtype=np.float64, na_value=np.nan) if to_numpy is not None
                          else np.asarray(y, dtype=np.float64))
        except _ComplexWarning:
            raise ValueError(_COMPLEX_Y) from None
        except (TypeError, ValueError) as exc:
            if "not 'complex'" in str(exc):  # a list (or an object array) of complex numbers
                raise ValueError(_COMPLEX_Y) from None
            raise ValueError(f"y must hold numbers (NaN for a missing label): {exc}") from None
        if values.ndim > 2:
            raise ValueError(f"y has shape {list(values.shape)}; give one label per SMILES, or one row of labels "
                             "per SMILES ([n] or [n, targets])")
        values = values.reshape(-1, 1) if values.ndim == 1 else values
        if values.shape[1] == 0:
            raise ValueError(f"y has shape {list(values.shape)}: no target; give one label per SMILES ([n]) or a "
                             "column per target ([n, targets])")
        return values, _target_names(y, values.shape[1])

    def fit(self, X, y):
        """Train on the SMILES ``X`` and labels ``y``; returns ``self``.

        Rows whose SMILES cannot become a graph are left out with a :class:`UserWarning` naming
        the first three (their positions in ``X``; ``left_out_`` lists every one with its reason);
        a row whose labels are all NaN has none to learn.
        scikit-learn's and Python's global random state and torch's thread count are as before.

        Raises:
            ValueError: bad parameters or data, named (an infinite label, too few molecules or
                examples of a class to hold one out, an ``out_dir`` that holds another run).
        """
        self._check_params()
        seed = self._draw_seed()  # before the caller's random state is kept (None draws from NumPy's, as scikit-learn)
        smiles, feature_names = _smiles(X), _feature_names(X)
        if y is None:  # (scikit-learn's words, which its checks look for)
            raise ValueError(f"{type(self).__name__} requires y to be passed, but the target y is None: fit needs the "
                             "labels of X's molecules (one row per SMILES)")
        if not smiles:
            raise ValueError("X holds no SMILES; fit needs molecules and their labels")
        broken = next((i for i, s in enumerate(smiles) if "\n" in s.strip() or "\r" in s.strip()), None)
        if broken is not None:  # (its CSV row would span lines, and messages name X by line)
            raise ValueError(f"X[{broken}] holds a line break inside its SMILES ({smiles[broken]!r}); a SMILES has "
                             "none: check how X was read")
        smiles = [s.strip() for s in smiles]  # as training reads them (a line read with its newline)
        if np.ndim(y) == 0 or not hasattr(y, "__len__"):  # a number, a generator: no rows to count
            raise ValueError(f"y must be an array-like of labels, one per SMILES (a list, a NumPy array, a pandas "
                             f"Series or DataFrame), got {type(y).__name__}")
        if len(y) != len(smiles):
            raise ValueError(f"X has {len(smiles)} SMILES and y {len(y)} rows")
        columns = [str(c) for c in y.columns] if hasattr(y, "columns") else None  # (as given: score matches them)
        y, names = self._targets(y)  # the classifier's classes wait in _fitting_classes until the run is trained
        _refuse_infinite(y, "")
        empty = [name for name, col in zip(names, y.T) if np.isnan(col).all()]
        if empty:
            raise ValueError(f"y's target(s) {', '.join(map(repr, empty))} have no label (NaN in every row); drop "
                             "them from y or give them labels")
        from .config_args import CLIError
        from .train.loop import NonFiniteLossError

        keep = Path(self.out_dir) if self.out_dir is not None else None
        work = Path(tempfile.mkdtemp(prefix="siggate-fit-"))
        try:  # one fit at a time per process: training seeds and restores the process's random state and logger
            with _ONE_FIT, _kept_global_state(), self._quiet(), _claimed(keep) as (out, begin):
                try:
                    self._fit_in(work, out or work / "run", smiles, y, names, feature_names, begin, seed)
                except (ValueError, CLIError, NonFiniteLossError) as exc:  # the command line's words for what fit was given
                    text = self._in_fit_words(str(exc), work, kept=keep is not None)
                    if text == str(exc) and isinstance(exc, (ValueError, NonFiniteLossError)):
                        raise
                    try:  # the same class, for callers that catch it; a refusal of the flags: a ValueError
                        kept = isinstance(exc, (ValueError, NonFiniteLossError))
                        reworded = type(exc)(text) if kept else ValueError(text)
                    except Exception:
                        reworded = ValueError(text)
                    raise reworded from None
            # y's columns as fit was given them, where target_names_ could not keep them (" logS" from a CSV
            # header with spaces, a name with a comma: y0, y1, ...): score matches a DataFrame's columns by them
            self._y_columns_ = columns if columns is not None and columns != list(self.target_names_) else None
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return self

    def __setstate__(self, state: dict) -> None:
        """An estimator pickled before ``random_state`` had its seed as ``seed``: it loads with that
        seed as ``random_state`` (and no deprecated ``seed`` to warn of)."""
        if isinstance(state, dict) and "random_state" not in state:
            state = {**state, "random_state": state.get("seed", 0), "seed": None}
        super().__setstate__(state)

    def _seed_given(self) -> None:
        """Refuse a ``random_state`` (or the deprecated ``seed``) that gives no seed, named."""
        rs = self.random_state
        if not (rs is None or isinstance(rs, (np.random.RandomState, np.random.Generator))
                or (isinstance(rs, numbers.Integral) and not isinstance(rs, bool) and 0 <= rs <= SEED_MAX)):
            raise ValueError(f"random_state must be a whole number from 0 to 2**32 - 1, None, or a NumPy "
                             f"RandomState or Generator, got {rs!r}")
        if self.seed is None:
            return
        warnings.warn("seed is deprecated: it is scikit-learn's random_state now (random_state=...)", FutureWarning,
                      stacklevel=_user_level())
        if isinstance(self.seed, bool) or not isinstance(self.seed, numbers.Integral) or not 0 <= self.seed <= SEED_MAX:
            raise ValueError(f"seed must be a whole number from 0 to 2**32 - 1, got {self.seed!r}")
        if rs != 0 and rs != self.seed:
            raise ValueError(f"seed={self.seed!r} and random_state={rs!r} name two seeds; give random_state alone")

    def _draw_seed(self) -> int:
        """The seed of this fit: ``seed`` (deprecated), a whole ``random_state``, or one drawn from
        the generator ``random_state`` is (``None``: NumPy's global one), as scikit-learn reads it."""
        if self.seed is not None:
            return int(self.seed)
        rs = self.random_state
        if isinstance(rs, numbers.Integral):
            return int(rs)
        if isinstance(rs, np.random.Generator):
            return int(rs.integers(2**31 - 1))
        from sklearn.utils import check_random_state

        return int(check_random_state(rs).randint(2**31 - 1))

    def _check_params(self) -> None:
        """The hyperparameters' types and ranges, named, before any work."""
        def whole(name, low, none=False):
            value = getattr(self, name)
            if none and value is None:
                return
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
                raise ValueError(f"{name} must be a whole number >= {low}" + (" or None" if none else "")
                                 + f", got {value!r}")

        self._seed_given()
        whole("ensemble", 1)
        whole("threads", 0)
        whole("epochs", 1, none=True)
        if (isinstance(self.val_fraction, bool) or not isinstance(self.val_fraction, numbers.Real)
                or not 0.0 < float(self.val_fraction) < 1.0):
            raise ValueError(f"val_fraction must be a number between 0 and 1, got {self.val_fraction!r}")
        if not isinstance(self.verbose, (bool, np.bool_, numbers.Integral)):  # ("yes" was taken as True)
            raise ValueError(f"verbose must be True or False (or a whole number, as scikit-learn's verbose), got "
                             f"{self.verbose!r}, a {type(self.verbose).__name__}")
        if self.overrides is not None and (isinstance(self.overrides, str)
                                           or not all(isinstance(o, str) for o in self.overrides)):
            raise ValueError(f"overrides must be a sequence of 'section.key=value' strings, e.g. "
                             f"('members.rf.n_estimators=50',), got {self.overrides!r}")
        from .config import ConfigError, override_key, set_itself

        for item in self.overrides or ():
            try:
                key = override_key(item)
            except ConfigError as exc:  # before any work, in the parameter's words
                bare = item.partition("=")[0].strip()
                if bare in self.get_params():  # threads=2: a parameter of the estimator's, not a config key
                    name = "random_state" if bare == "seed" else bare  # (seed: random_state's former name)
                    raise ConfigError(f"overrides {item!r}: {bare} is this estimator's parameter; set "
                                      f"{name}={item.partition('=')[2].strip()} instead") from None
                raise ConfigError(_in_estimator_words(str(exc))) from None
            owned = {**_KEYS_FIT_SETS, **({"train.epochs": "from epochs"} if self.epochs is not None else {})}
            if key.startswith("data.") and key not in _DATA_KEYS_OF_USERS:
                owned.setdefault(key, "itself (it writes its own CSV of X and y)")
            clash = set_itself([key], owned, "fit", name=lambda _: f"overrides {item!r}",
                               drop=lambda _: "drop it from overrides", give="set")
            if clash:
                raise ValueError(clash)
        if not isinstance(self.device, str) or not (self.device == "cpu" or re.fullmatch(r"cuda(:\d+)?", self.device)):
            raise ValueError(f"device must be 'cpu' or 'cuda' (or 'cuda:N'), got {self.device!r}")
        if self.device != "cpu":
            import torch

            if not torch.cuda.is_available():
                raise ValueError("device='cuda': torch sees no CUDA device here; use device='cpu'")
        if self.out_dir is not None and not isinstance(self.out_dir, (str, os.PathLike)):
            raise ValueError(f"out_dir must be a folder's path (a str or pathlib.Path) or None, got {self.out_dir!r}")
        if self.out_dir is not None and os.fspath(self.out_dir) == "":  # (Path("") is the current folder)
            raise ValueError("out_dir is '', an empty path (the run would go into the current folder); give a "
                             "folder's path, or None for a temporary folder removed after fit")
        from .files import tilde_problem

        tilde = tilde_problem(self.out_dir) if self.out_dir is not None else None
        if tilde:  # the command line's rule of --out: a '~' folder would be made here
            raise ValueError(f"out_dir {tilde}")
        if self.out_dir is not None and Path(self.out_dir).exists() and not Path(self.out_dir).is_dir():
            raise ValueError(f"out_dir {self.out_dir} is a file; give a folder")

    def _fit_in(self, work: Path, out: Path, smiles: list[str], y: np.ndarray, names: list[str],
                feature_names: np.ndarray | None, begin: Callable[[], None], seed: int) -> None:
        """Write the CSV into ``work``, train the run into ``out`` with ``seed`` and keep its predictor (and
        ``feature_names_in_``, X's column name when it was a DataFrame, as scikit-learn keeps it).
        ``begin`` (:func:`_claimed`'s) is called once the data is read and checked, before training."""
        from .cli import build_parser
        from .config_args import config_from_args, recipe_name
        from .data.chem import control_character
        from .data.csvdata import MERGED_INTO, MISSING_TARGET, row_issue
        from .train.dataprep import prepare_data
        from .train.ensemble import train_members
        from .train.members import load_predictor, parse_kinds, run_encodings
        from .train.predict import SmilesPredictor, read_calibration, similarity_domain
        from .train.rundir import CALIBRATION

        # a SMILES with a control character is left out as predict refuses it; a CSV holds no NUL, so
        # its row holds the SMILES escaped ('C\\x00C', which does not parse), in its place in X
        controlled = {i: why for i, s in enumerate(smiles) if (why := control_character(s))}
        data = work / _FIT_CSV
        with open(data, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow([_SMILES, *names, _SPLIT])
            for i, (s, label) in enumerate(zip(smiles, y)):
                s = s.encode("unicode_escape").decode("ascii") if i in controlled else s
                w.writerow([s, *["" if np.isnan(x) else repr(float(x)) for x in label], "train"])
        # every row a training row, and --val-fraction draws the held-out ones (whole molecules, per class)
        # each value joined to its flag: a value that starts with "-" (a target "-logIC50") is no flag
        # the CSV's own reading pinned (a config given, a run's members.yaml with smiles_col SMI, read it otherwise)
        argv = ["train", f"--data={data}", f"--smiles-col={_SMILES}", "--sep=,", "--decimal=.",
                f"--target-col={','.join(names)}", f"--task={self._task}",
                f"--split=column:{_SPLIT}", f"--val-fraction={float(self.val_fraction)!r}",
                f"--seed={seed}", f"--cache-dir={work / 'cache'}"]
        argv += [f"--config={self.config}"] if self.config is not None else []  # ("" is refused, as --config "")
        argv += [f"--epochs={int(self.epochs)}"] if self.epochs is not None else []
        for item in [*(self.overrides or ()), f"train.threads={int(self.threads)}"]:  # (0: torch's, not the recipe's 1)
            argv += [f"--set={item}"]
        args = build_parser().parse_args(argv)
        members, weights = recipe_members(recipe_name(args), self.members)  # "" is no kind, refused as --members "" is
        kinds = parse_kinds(members)
        cfg = config_from_args(args)
        weights = run_weights(kinds, self.weights or weights)  # unknown weights raise before any data is read
        from .train.members import run_refusal

        why = run_refusal(cfg, kinds, int(self.ensemble), several=True)  # what training would refuse first: before
        if why:  # the data is read (a warmup that leaves no epoch was refused so) and before the earlier run goes
            raise ValueError(why)
        with _data_warnings(not self.verbose) as said:
            ds = prepare_data(cfg.data, run_encodings(kinds, cfg.model), cfg.train.seed, progress=False,
                              require_test=False)
        ds.invalid = [dataclasses.replace(r, reason=controlled[r.index])  # (the escaped SMILES's parse error)
                      if r.index in controlled and row_issue(r.reason) == "invalid molecule" else r for r in ds.invalid]
        for text in said:  # (fit silences the logger that says them: conflicting duplicates, a target of one class)
            warnings.warn(self._in_fit_words(text.removeprefix(f"{Path(cfg.data.csv).name}: "), work,
                                             kept=self.out_dir is not None, warning=True), UserWarning,
                          stacklevel=_user_level())
        # (position in X, reason in the estimator's words: overrides=['data.duplicates=first'], not the flag)
        dropped = [(r.index, self._in_fit_words(r.reason, work, kept=self.out_dir is not None))
                   for r in ds.invalid if row_issue(r.reason) != MISSING_TARGET]
        merged = [r for r in dropped if r[1].startswith(MERGED_INTO)]  # (data.duplicates=average: trained, as a mean)
        for rows, what in (([r for r in dropped if r not in merged], "left out"),
                           (merged, "merged into an earlier row of the same molecule, which trains on their mean "
                                    "label")):
            if rows:
                warnings.warn(f"{len(rows)} of {len(smiles)} molecules {what} (their positions in X: "
                              + "; ".join(f"{i}: {why}" for i, why in rows[:3]) + ("; ..." if len(rows) > 3 else "")
                              + ")", UserWarning, stacklevel=_user_level())
        import torch

        begin()  # everything checked: the earlier fit's run in out_dir gives way only now
        train_members(cfg, out, kinds, int(self.ensemble), weights=weights, progress=False,
                      device=torch.device(self.device), dataset=ds)
        if out != work / "run":
            column = {"smiles_column": str(feature_names[0])} if feature_names is not None else {}  # (predict's --input)
            (out / ESTIMATOR_RECORD).write_text(json.dumps({**self._record(names), **column}, indent=1, default=str)
                                                + "\n")
        predictor = load_predictor(out, self.device)
        # predict refuses no molecule fit trained on (a CSV's rows above predict's atom limit train, with a note)
        largest = max((g.num_nodes for split in ds.splits.values() for g in split), default=0)
        # kept here: the run's folder may be a temporary one, gone after fit; a run without one has no
        # validation labels (any other refusal of the file is an error of the run, raised)
        calibration = read_calibration(out, predictor.info) if (out / CALIBRATION).is_file() else None
        smiles_predictor = SmilesPredictor(predictor, device=self.device, folder=out, domain=False,
                                           max_atoms=max(PREDICT_MAX_ATOMS, int(largest)))
        if calibration is not None and calibration.needs_similarity:  # kept in memory, measured for intervals only
            smiles_predictor._similarity_from = similarity_domain(out)
        # the fit has succeeded: its attributes all at once (a failure above leaves the earlier fit's)
        self.predictor_, self.smiles_predictor_, self.calibration_ = predictor, smiles_predictor, calibration
        self.n_features_in_ = 1
        if feature_names is not None:
            self.feature_names_in_ = feature_names
        elif hasattr(self, "feature_names_in_"):  # an earlier fit's, on a DataFrame
            del self.feature_names_in_
        self.target_names_ = names
        self.seed_ = seed
        self.left_out_ = dropped
        self._fitted(names)

    def _fitted(self, names: list[str]) -> None:
        """The fitted attributes a kind of estimator adds once its run is trained (the classifier's
        ``classes_``): a failed ``fit`` leaves the earlier fit's as they were."""

    def _in_fit_words(self, text: str, work: Path, kept: bool, warning: bool = False) -> str:
        """A refusal (or, with ``warning``, a data warning) of the run fit trains in ``work`` as fit's
        caller reads it, the one place that rewords one: in the estimator's words
        (:func:`_in_estimator_words`; a config of another task's loss as that choice of recipe,
        :meth:`_recipe_of_another_task`), as it holds for fit (:func:`_data_warning_in_fit_words`),
        without fit's own files where none outlives it (``kept``: an ``out_dir``; a checkpoint in
        fit's folder, removed when fit returns, is no help) and in ``y``'s values (:meth:`_in_words_of_y`)."""
        if warning:
            text = _data_warning_in_fit_words(text, kept)
        text = self._recipe_of_another_task(text)
        text = _in_estimator_words(text, work / _FIT_CSV)
        if not kept:
            text = re.sub(rf"The last good checkpoint is kept at {re.escape(str(work))}\S*\. ", "", text)
        return self._in_words_of_y(text)

    def _recipe_of_another_task(self, text: str) -> str:
        """The refusal of a ``config`` whose loss is another task's (``SigGateRegressor(config="molhiv")``:
        "train.loss: 'bce' does not fit data.task='regression'") as the choice of recipe it is: the
        other estimator, or another config. A loss that ``overrides`` set keeps the config's words."""
        found = re.match(r"train\.loss: '(\w+)' does not fit data\.task='\w+'", text)
        if not found or self.config is None or any(o.partition("=")[0].strip() == "train.loss"
                                                   for o in self.overrides or ()):
            return text
        from .options import TASK_LOSSES

        task = next(t for t, losses in TASK_LOSSES.items() if found.group(1) in losses)
        kind = {"binary": "binary-classification", "multilabel": "binary-classification"}.get(task, task)
        other = {"regression": "SigGateRegressor", "binary-classification": "SigGateClassifier"}.get(kind)
        return (f"config {self.config!r} is a {kind} recipe (train.loss {found.group(1)!r}), and {type(self).__name__} "
                f"fits {'regression' if self._task == 'regression' else 'two classes'}: use "
                + (f"{other} or " if other else "") + "another config (config=None: csv, which fits either)")

    def _in_words_of_y(self, text: str) -> str:
        """``text`` with the run's names for ``y``'s values replaced by ``y``'s own (the classifier's classes)."""
        return text

    def _record(self, names: list[str]) -> dict:
        """What :data:`ESTIMATOR_RECORD` says of the run beside it: the estimator and its targets."""
        return {"estimator": type(self).__name__, "target_names": names}

    @contextlib.contextmanager
    def _quiet(self):
        """siggate's loggers at ERROR while fitting, unless ``verbose``: then at INFO (where the caller
        set no level of siggate's logger), shown through the caller's logging where a handler of its
        is there to show them, else on stderr as the command line shows them (a handler of fit's
        own, removed after it; Python's last resort showed warnings alone)."""
        logger, own = logging.getLogger("siggate"), None
        level = logger.level
        if not self.verbose:
            logger.setLevel(logging.ERROR)
        else:
            if level == logging.NOTSET:
                logger.setLevel(logging.INFO)
            if not logger.hasHandlers():  # (none on siggate's loggers or the root's: the caller configured none)
                own = logging.StreamHandler()
                own.setFormatter(logging.Formatter(LOG_FORMAT))
                logger.addHandler(own)
        try:
            yield
        finally:
            if own is not None:
                logger.removeHandler(own)
            logger.setLevel(level)

    # ------------------------------------------------------------------ predicting

    def _predict_mean(self, X, return_std: bool = False):
        """``[n, T]`` predictions (and the spread over members) of the SMILES ``X``.

        Raises:
            ValueError: SMILES that cannot be predicted (``siggate predict``'s reasons, first three).
        """
        values, std, _ = self._predicted(X)
        return (values, std) if return_std else values

    def _predicted(self, X, checked: bool = False, similarity: bool = False):
        """``([n, T] predictions, [n, T] spread over members (zeros for one model), [n] nearest-training
        similarity or None)`` of the SMILES ``X``; the similarity only when asked for and the fit
        keeps its domain (its intervals are scaled by it): the reader measures it for that call.

        Raises:
            ValueError: as :meth:`_predict_mean`.
        """
        from .train.predict import DOMAIN_COLUMNS

        check_is_fitted(self, "predictor_")
        if not checked:  # (_calibrated checks X's column before its own warnings)
            self._check_columns(X)
        reader = self.smiles_predictor_
        measure = similarity and getattr(reader, "_similarity_from", None) is not None
        if measure:  # the domain columns for this call alone, on a copy of the reader: plain predictions never
            reader = copy.copy(reader)  # measure it, and a prediction in another thread reads the shared one meanwhile
            reader.domain = reader._similarity_from
            # its column as the reader names it (<name>_pred where a target took the name)
            sim_col = reader.columns[-len(DOMAIN_COLUMNS)]
        rows = reader.predict_rows(_smiles(X))
        bad = [(i, r["error"]) for i, r in enumerate(rows) if r["error"]]
        if bad:  # (predict's atom limit has no parameter here: it is the larger of 1,000 and fit's largest molecule)
            raise ValueError(f"{len(bad)} of {len(rows)} SMILES cannot be predicted: "
                             + "; ".join(f"row {i}: {e}" for i, e in bad[:3]).replace(
                                 " (--max-atoms)", " (1,000 atoms, or the largest molecule fit trained on)"))
        cols = self.smiles_predictor_.columns
        t = len(self.target_names_)
        values = np.asarray([[float(r[c]) for c in cols[:t]] for r in rows], dtype=np.float64).reshape(len(rows), t)
        std = (np.asarray([[float(r[c]) for c in cols[t:2 * t]] for r in rows], dtype=np.float64).reshape(len(rows), t)
               if self.smiles_predictor_.ensemble else np.zeros_like(values))
        sims = np.asarray([r[sim_col] for r in rows], dtype=np.float64) if measure else None
        return values, std, sims


    def __sklearn_tags__(self):
        """What scikit-learn's checks and tools read: ``X`` is a sequence of SMILES strings (one
        per molecule, not a numeric matrix); missing labels are NaN in ``y``."""
        tags = super().__sklearn_tags__()
        tags.input_tags.string, tags.input_tags.one_d_array, tags.input_tags.two_d_array = True, True, False
        return tags

    def _check_columns(self, X) -> None:
        """Refuse a one-column DataFrame ``X`` whose column is not the one fit was given (when fit
        was given a DataFrame: ``feature_names_in_``), and warn, as scikit-learn does, about one
        given to an estimator fitted without names; other shapes are :func:`_smiles`'."""
        fitted, given = getattr(self, "feature_names_in_", None), _feature_names(X)
        if fitted is None and given is not None and len(given) == 1:  # scikit-learn's own warning
            warnings.warn(f"X has feature names, but {type(self).__name__} was fitted without feature names",
                          UserWarning, stacklevel=_user_level())
        if fitted is not None and given is None:  # the other direction, as scikit-learn warns too
            warnings.warn(f"X does not have valid feature names, but {type(self).__name__} was fitted with feature "
                          "names", UserWarning, stacklevel=_user_level())
        if fitted is not None and given is not None and len(given) == 1 and list(given) != list(fitted):
            raise ValueError(f"X's column is {list(given)}, but the estimator was fitted on a DataFrame of column "
                             f"{list(fitted)}; give the SMILES in a column of that name (or as a list)")

    def _calibrated(self, X, coverage: float):
        """``(calibration, coverage, mean [n, T], the rows' scale [n, T] or None)`` for the conformal
        intervals or sets of ``X`` at ``coverage`` (the scale: ``Calibration.row_scale``); warns where the calibration has too few
        validation molecules for it (those targets' intervals are infinite, their sets hold both
        classes).

        Raises:
            ValueError: a coverage outside (0, 1), or a fit whose run has no calibration."""
        from .predictors.conformal import check_coverage
        from .train.predict import too_few_message

        check_is_fitted(self, "predictor_")
        self._check_columns(X)  # before any warning about the coverage
        if isinstance(coverage, (bool, np.bool_)) or not isinstance(coverage, numbers.Real):  # ('0.9' passed as 0.9)
            raise ValueError(f"coverage must be a number between 0 and 1 (e.g. 0.9 for 90% intervals), got "
                             f"{coverage!r}, a {type(coverage).__name__}")
        coverage = check_coverage(coverage)
        if not hasattr(self, "calibration_"):  # fitted (and pickled) before the estimator kept its calibration
            raise ValueError("this estimator was fitted by an older siggate, which kept no calibration with it; fit "
                             "it again")
        if self.calibration_ is None:
            raise ValueError("this fit has no conformal calibration (its run held no validation labels); fit again "
                             "with a val_fraction that holds out labelled molecules")
        few = too_few_message(self.calibration_, coverage, name="coverage", again="fit again (a larger val_fraction)")
        if few:
            warnings.warn(few, UserWarning, stacklevel=_user_level())
        mean, std, similarity = self._predicted(X, checked=True, similarity=True)
        return (self.calibration_, coverage, mean,
                self.calibration_.row_scale(std if self.smiles_predictor_.ensemble else None, similarity))


class SigGateRegressor(RegressorMixin, _SigGateEstimator):
    __doc__ = ("SigGate-GT regression on SMILES (``siggate train --data ... --task regression``).\n\n"
               + _SigGateEstimator.__doc__.split("\n\n", 1)[1])
    _task = "regression"

    def predict(self, X, return_std: bool = False):
        """Predictions in target units, ``[n]`` (one target) or ``[n, T]``; with ``return_std``
        also the spread over the members (zeros for one model)."""
        out = self._predict_mean(X, return_std)
        values, std = out if return_std else (out, None)
        if return_std:
            self._warn_zero_std()
        if values.shape[1] == 1:
            values = values[:, 0]
            std = None if std is None else std[:, 0]
        return (values, std) if return_std else values

    def _warn_zero_std(self) -> None:
        """Warn (``UserWarning``), naming them, about the targets whose ``return_std`` is 0 for every
        molecule by construction: one model, or validation weights that give one member everything
        (the default members did so for both targets of a small fit). ``siggate predict`` warns of
        it; an estimator's warning went to a logger that fit silences."""
        from .train.predict import one_member_targets

        if self.smiles_predictor_.ensemble:
            alone, why = one_member_targets(self.predictor_)
        else:
            alone, why = list(self.target_names_), "the fit holds one model"
        if alone:
            warnings.warn(f"return_std is 0 for every molecule for {', '.join(map(repr, alone))}: {why}, so there is "
                          "no spread over members; it is no sign of certainty (predict_interval gives calibrated "
                          "intervals)", UserWarning, stacklevel=_user_level())

    def __sklearn_tags__(self):
        """Also: ``y`` may be ``[n, T]`` (several targets)."""
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags

    def predict_interval(self, X, coverage: float = 0.9):
        """Split-conformal prediction intervals at ``coverage`` (``siggate predict --coverage``):
        ``(lower, upper)`` in target units, ``[n]`` (one target) or ``[n, T]``, calibrated on the
        validation molecules fit held out (``val_fraction``); the width grows as a molecule is less
        like the training molecules (its nearest-training similarity ``s``: half-width ``q * exp(-1.75 s)``,
        :mod:`siggate.predictors.conformal`). A new molecule's label falls inside with
        probability at least ``coverage`` when it is exchangeable with those molecules.

        Raises:
            ValueError: a coverage outside (0, 1), SMILES that cannot be predicted, or a fit
                without validation labels."""
        cal, coverage, mean, scale = self._calibrated(X, coverage)
        lower, upper = cal.intervals(mean, scale, coverage)
        return (lower[:, 0], upper[:, 0]) if lower.shape[1] == 1 else (lower, upper)

    def score(self, X, y, sample_weight=None) -> float:
        """R² of :meth:`predict`, per target over its labelled rows (NaN: a missing label, as in
        :meth:`fit`), averaged over the targets: scikit-learn's ``r2_score`` where no label is
        missing. (scikit-learn's named scorers, e.g. ``"neg_mean_absolute_error"``, refuse NaN
        labels themselves.)"""
        from sklearn.metrics import r2_score

        check_is_fitted(self, "predictor_")
        given = list(np.shape(y))
        columns = [str(c) for c in y.columns] if hasattr(y, "columns") else None
        y = self._targets(y)[0]
        _refuse_infinite(y, "score: ")
        n, t = len(_smiles(X)), len(self.target_names_)
        # a DataFrame's columns name the targets they hold: as target_names_ names them, or as fit was given them
        for names in (list(self.target_names_), getattr(self, "_y_columns_", None)):
            if not names or columns is None or len(columns) != t or not set(columns) & set(names):
                continue
            if len(set(names)) != t:  # names repeated (fit read such columns by position): they map nothing
                if columns == names:
                    break
                continue
            if set(columns) != set(names):
                raise ValueError(f"score: y's columns {columns} are not this model's targets {names}; give a column "
                                 "of each target (in any order), or labels without names")
            y = y[:, [columns.index(name) for name in names]]  # (by position, another target's labels)
            break
        if y.shape != (n, t):  # (a reshape scored mismatched rows or another target's labels)
            raise ValueError(f"score: y has shape {given}, and X {n} SMILES of this model's {t} target(s) "
                             f"{self.target_names_}: give one row of {t} label(s) per SMILES")
        weight = None if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
        if weight is not None and weight.shape != (n,):  # (a bare IndexError of numpy's before)
            raise ValueError(f"score: sample_weight has shape {list(weight.shape)}, and X {n} SMILES: give one weight "
                             "per SMILES")
        pred = np.asarray(self.predict(X), dtype=np.float64).reshape(n, t)
        scores = []
        for t in range(y.shape[1]):
            ok = ~np.isnan(y[:, t])
            if ok.sum() < 2:
                raise ValueError(f"score: target {t} has {int(ok.sum())} label(s); R² needs at least 2")
            scores.append(r2_score(y[ok, t], pred[ok, t], sample_weight=None if weight is None else weight[ok]))
        return float(np.mean(scores))


class SigGateClassifier(ClassifierMixin, _SigGateEstimator):
    __doc__ = ("SigGate-GT binary classification on SMILES (``siggate train --data ... --task binary``); "
               "``y`` holds two classes (any labels; ``classes_`` in sorted order, the second is the "
               "positive one).\n\n" + _SigGateEstimator.__doc__.split("\n\n", 1)[1])
    _task = "binary"

    def _targets(self, labels):
        y = np.asarray(labels)
        if np.iscomplexobj(y) or (y.dtype == object and any(isinstance(v, complex) for v in y.ravel())):
            raise ValueError(_COMPLEX_Y)
        if y.ndim == 2 and y.shape[1] == 1:  # a column vector, as scikit-learn's classifiers take it
            from sklearn.exceptions import DataConversionWarning

            warnings.warn("y is a column vector ([n, 1]); read as one label per molecule ([n])", DataConversionWarning,
                          stacklevel=_user_level())
            y = y[:, 0]
        if y.ndim != 1:
            raise ValueError(f"SigGateClassifier takes one label per molecule ([n]), got shape {y.shape}")
        def absent(v) -> bool:  # None, NaN or pandas' NA
            import pandas as pd

            return v is None or (not isinstance(v, (str, bytes)) and np.ndim(v) == 0 and bool(pd.isna(v)))

        # the labels as given, before NumPy made them one type (NaN in a list became the text 'nan';
        # a DataFrame: its one column's values)
        given = labels.iloc[:, 0].tolist() if getattr(labels, "ndim", 1) == 2 and hasattr(labels, "iloc") else (
            labels.tolist() if hasattr(labels, "tolist") else list(labels))
        given = [v[0] if isinstance(v, (list, tuple)) and len(v) == 1 else v for v in given]
        missing = [i for i, v in enumerate(given) if absent(v)]
        if missing:
            raise ValueError(f"y has no class at row(s) {missing[:5]} (None or NaN); the classifier needs a class "
                             "for every molecule: drop those rows")
        if len({"str" if isinstance(v, str) else "number" for v in given if not absent(v)}) > 1:
            raise ValueError("y mixes text and number labels; give every class as the same type (e.g. all strings), "
                             "or NumPy would read them all as text")
        self._fitting_classes = np.unique(y)
        if len(self._fitting_classes) == 1:  # (a screen of actives alone: "got 1" named neither the class nor a fix)
            c = self._fitting_classes[0]
            raise ValueError(f"SigGateClassifier is binary: y holds one class, {c.item() if isinstance(c, np.generic) else c!r}, "
                             "in every row; give molecules of both classes (for a screen of one class, add negatives, "
                             "or fit a SigGateRegressor on a measured value)")
        if len(self._fitting_classes) != 2:
            from sklearn.utils.multiclass import type_of_target

            values = [v for v in given if not absent(v)]
            real = all(isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_)) and math.isfinite(v)
                       for v in values)  # (type_of_target refuses inf in its own words)
            kind = type_of_target(np.asarray(values, dtype=np.float64)) if real and len(self._fitting_classes) > 2 \
                else "multiclass"
            why = ("; y looks continuous (Unknown label type: continuous): use SigGateRegressor, or binarise y"
                   if kind == "continuous" else "; only binary classification is supported: binarise y (one class "
                   "against the rest)" if len(self._fitting_classes) > 2 else "")
            raise ValueError(f"SigGateClassifier is binary: y must hold two classes, got {len(self._fitting_classes)}"
                             + why)
        return (y == self._fitting_classes[1]).astype(np.float64).reshape(-1, 1), _target_names(labels, 1)

    def _in_words_of_y(self, text: str) -> str:
        """The run's classes 0 and 1 (e.g. the validation draw's "class 1 hold 1 distinct molecule")
        as ``y`` names them."""
        def named(m):
            c = self._fitting_classes[int(m.group(1))]
            return f"class {c.item() if isinstance(c, np.generic) else c!r}"

        text = re.sub(r"has the same value \(([01])\)", lambda m: f"holds the same {named(m)}", text)
        return re.sub(r"\bclass ([01])\b", named, text)

    def _record(self, names: list[str]) -> dict:
        """Also the classes: the run's prediction is the probability of the second."""
        classes = [c.item() if isinstance(c, np.generic) else c for c in self._fitting_classes]
        return {**super()._record(names), "classes": classes, "probability_of": classes[1]}

    def _fitted(self, names: list[str]) -> None:
        self.classes_ = self._fitting_classes

    def predict_proba(self, X) -> np.ndarray:
        """``[n, 2]``: the probabilities of ``classes_[0]`` and ``classes_[1]``."""
        p = self._predict_mean(X)[:, 0]
        return np.stack([1.0 - p, p], axis=1)

    def __sklearn_tags__(self):
        """Also: two classes only."""
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False
        return tags

    def predict_set(self, X, coverage: float = 0.9) -> np.ndarray:
        """Split-conformal prediction sets at ``coverage`` (``siggate predict --coverage``):
        ``[n, 2]`` booleans, whether ``classes_[0]`` and ``classes_[1]`` are in each molecule's
        set, calibrated on the validation molecules fit held out. A set holds the true class with
        probability at least ``coverage`` for molecules exchangeable with those; both classes:
        the model cannot tell at that coverage; neither: no class is plausible enough.

        Raises:
            ValueError: a coverage outside (0, 1), SMILES that cannot be predicted, or a fit
                without validation labels."""
        cal, coverage, prob, _ = self._calibrated(X, coverage)
        return cal.set_members(prob, coverage)[:, 0, :]

    def predict(self, X) -> np.ndarray:
        """The more probable class of each molecule (probability >= 0.5: ``classes_[1]``)."""
        positive = self.predict_proba(X)[:, 1] >= 0.5  # first: NotFittedError before any fitted attribute is read
        return self.classes_[positive.astype(int)]
