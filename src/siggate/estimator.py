"""scikit-learn estimators on SMILES: :class:`SigGateRegressor` and :class:`SigGateClassifier`.

They follow scikit-learn's conventions, so ``clone``, ``cross_val_score``, ``GridSearchCV`` and
``Pipeline`` take them: ``__init__`` only stores hyperparameters, :meth:`fit` learns and returns
``self``, learned state ends in ``_``, ``get_params``/``set_params`` come from ``BaseEstimator``.
``X`` is a sequence of SMILES strings (a list, a 1-d array, a pandas Series, or an ``[n, 1]``
array); ``y`` is ``[n]`` or ``[n, T]`` (regression, NaN: missing) or ``[n]`` with two classes.

They are ``siggate train --data FILE.csv`` and ``siggate predict`` behind another front door,
not a second copy: :meth:`fit` writes the molecules to a CSV (with a ``split`` column: a seeded
``val_fraction`` of the rows for validation (the combination's weights, the fingerprint
members' options, a GNN's epoch), the rest for training; no test split, since the caller holds
the test data), resolves the config with the command line's own parser and
:func:`~siggate.config_args.config_from_args`, trains with
:func:`siggate.train.ensemble.train_members` (the ``--members``/``--ensemble`` path) and loads
the result with :func:`~siggate.train.members.load_predictor`; :meth:`predict` featurizes and
refuses SMILES as :class:`~siggate.train.predict.SmilesPredictor` does.

Example::

    from sklearn.model_selection import cross_val_score
    from siggate import SigGateRegressor

    scores = cross_val_score(SigGateRegressor(epochs=30), smiles, y, cv=5, scoring="neg_mean_absolute_error")
"""

from __future__ import annotations

import contextlib
import csv
import logging
import shutil
import tempfile
from pathlib import Path

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.utils.validation import check_is_fitted

from .options import recipe_members, run_weights

#: the CSV columns :meth:`_SigGateEstimator.fit` writes
_SMILES, _SPLIT = "smiles", "split"


def _smiles(X) -> list[str]:
    """``X`` as a list of SMILES strings."""
    arr = np.asarray(X, dtype=object)
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr[:, 0]
    if arr.ndim != 1:
        raise ValueError(f"X must be a sequence of SMILES strings ([n] or [n, 1]), got shape {arr.shape}")
    bad = [i for i, s in enumerate(arr) if not isinstance(s, str)]
    if bad:
        raise ValueError(f"X must hold SMILES strings; row {bad[0]} is {type(arr[bad[0]]).__name__}")
    return [str(s) for s in arr]


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
        ensemble: GNN members with seeds ``seed..seed+ensemble-1`` (``--ensemble``).
        config: a config name or file (``None``: ``csv``, the ``--data`` recipe).
        overrides: ``"section.key=value"`` strings (``--set``), e.g. ``("train.init=none", "model.layers=2")`` (another
            architecture than the shipped weights' starts from scratch).
        seed: the seed of the validation draw and of training.
        val_fraction: the fraction of the rows held out for validation (at least one row).
        threads: torch threads while training (``train.threads``).
        device: ``"cpu"`` or ``"cuda"``.
        out_dir: keep the run there (a ``siggate predict --checkpoint`` folder); ``None``: a
            temporary folder removed after :meth:`fit`.
        verbose: siggate's log lines while fitting (default: only errors).
    """

    _task = "regression"

    def __init__(self, epochs=None, members=None, ensemble=1, config=None, overrides=None, seed=0,
                 val_fraction=0.1, threads=1, device="cpu", out_dir=None, verbose=False, weights=None):
        self.epochs = epochs
        self.members = members
        self.weights = weights
        self.ensemble = ensemble
        self.config = config
        self.overrides = overrides
        self.seed = seed
        self.val_fraction = val_fraction
        self.threads = threads
        self.device = device
        self.out_dir = out_dir
        self.verbose = verbose

    # ------------------------------------------------------------------ fitting

    def _targets(self, y) -> tuple[np.ndarray, list[str]]:
        """``y`` as ``[n, T]`` floats and the target names."""
        y = np.asarray(y, dtype=np.float64)
        y = y.reshape(-1, 1) if y.ndim == 1 else y
        return y, [f"y{t}" for t in range(y.shape[1])] if y.shape[1] > 1 else ["y"]

    def _val_rows(self, y: np.ndarray) -> np.ndarray:
        """Booleans ``[n]``: the rows held out for validation (a seeded draw)."""
        n = len(y)
        rng = np.random.default_rng(self.seed)
        k = min(max(1, int(round(self.val_fraction * n))), n - 1)
        val = np.zeros(n, bool)
        val[rng.permutation(n)[:k]] = True
        return val

    def fit(self, X, y):
        """Train on the SMILES ``X`` and labels ``y``; returns ``self``."""
        smiles = _smiles(X)
        y, names = self._targets(y)
        if len(y) != len(smiles):
            raise ValueError(f"X has {len(smiles)} SMILES and y {len(y)} rows")
        if not 0.0 < float(self.val_fraction) < 1.0:
            raise ValueError(f"val_fraction must be between 0 and 1, got {self.val_fraction!r}")
        if len(smiles) < 2:
            raise ValueError("fit needs at least 2 molecules (one to train on, one to stop on)")
        keep = Path(self.out_dir) if self.out_dir is not None else None
        work = Path(tempfile.mkdtemp(prefix="siggate-fit-"))
        try:
            with self._quiet():
                self._fit_in(work, keep or work / "run", smiles, y, names)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return self

    def _fit_in(self, work: Path, out: Path, smiles: list[str], y: np.ndarray, names: list[str]) -> None:
        """Write the CSV into ``work``, train the run into ``out`` and keep its predictor."""
        from .cli import build_parser
        from .config_args import config_from_args, recipe_name
        from .train.dataprep import prepare_data
        from .train.ensemble import train_members
        from .train.members import load_predictor, parse_kinds, run_encodings
        from .train.predict import SmilesPredictor

        data = work / "data.csv"
        val = self._val_rows(y)
        with open(data, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow([_SMILES, *names, _SPLIT])
            for s, label, v in zip(smiles, y, val):
                w.writerow([s, *["" if np.isnan(x) else repr(float(x)) for x in label], "val" if v else "train"])
        argv = ["train", "--data", str(data), "--target-col", ",".join(names), "--task", self._task,
                "--split", f"column:{_SPLIT}", "--seed", str(int(self.seed)), "--cache-dir", str(work / "cache")]
        argv += ["--config", str(self.config)] if self.config else []
        argv += ["--epochs", str(int(self.epochs))] if self.epochs is not None else []
        for item in [*(self.overrides or ()), *([f"train.threads={int(self.threads)}"] if self.threads else [])]:
            argv += ["--set", str(item)]
        args = build_parser().parse_args(argv)
        cfg = config_from_args(args)
        members, weights = recipe_members(recipe_name(args), self.members)  # "" is no kind, refused as --members "" is
        kinds = parse_kinds(members)
        weights = run_weights(kinds, self.weights or weights)  # unknown weights raise before any data is read
        ds = prepare_data(cfg.data, run_encodings(kinds, cfg.model), cfg.train.seed, progress=False,
                          require_test=False)
        import torch

        train_members(cfg, out, kinds, int(self.ensemble), weights=weights, progress=False,
                      device=torch.device(self.device), dataset=ds)
        self.predictor_ = load_predictor(out, self.device)
        self.smiles_predictor_ = SmilesPredictor(self.predictor_, device=self.device, domain=False)
        self.n_features_in_ = 1
        self.target_names_ = names

    @contextlib.contextmanager
    def _quiet(self):
        """siggate's loggers at ERROR while fitting, unless ``verbose``."""
        logger = logging.getLogger("siggate")
        level = logger.level
        if not self.verbose:
            logger.setLevel(logging.ERROR)
        try:
            yield
        finally:
            logger.setLevel(level)

    # ------------------------------------------------------------------ predicting

    def _predict_mean(self, X, return_std: bool = False):
        """``[n, T]`` predictions (and the spread over members) of the SMILES ``X``.

        Raises:
            ValueError: SMILES that cannot be predicted (``siggate predict``'s reasons, first three).
        """
        check_is_fitted(self, "predictor_")
        rows = self.smiles_predictor_.predict_rows(_smiles(X))
        bad = [(i, r["error"]) for i, r in enumerate(rows) if r["error"]]
        if bad:
            raise ValueError(f"{len(bad)} of {len(rows)} SMILES cannot be predicted: "
                             + "; ".join(f"row {i}: {e}" for i, e in bad[:3]))
        cols = self.smiles_predictor_.columns
        t = len(self.target_names_)
        values = np.asarray([[float(r[c]) for c in cols[:t]] for r in rows], dtype=np.float64).reshape(len(rows), t)
        if not return_std:
            return values
        std = (np.asarray([[float(r[c]) for c in cols[t:2 * t]] for r in rows], dtype=np.float64).reshape(len(rows), t)
               if self.smiles_predictor_.ensemble else np.zeros_like(values))
        return values, std


class SigGateRegressor(RegressorMixin, _SigGateEstimator):
    __doc__ = ("SigGate-GT regression on SMILES (``siggate train --data ... --task regression``).\n\n"
               + _SigGateEstimator.__doc__.split("\n\n", 1)[1])
    _task = "regression"

    def predict(self, X, return_std: bool = False):
        """Predictions in target units, ``[n]`` (one target) or ``[n, T]``; with ``return_std``
        also the spread over the members (zeros for one model)."""
        out = self._predict_mean(X, return_std)
        values, std = out if return_std else (out, None)
        if values.shape[1] == 1:
            values = values[:, 0]
            std = None if std is None else std[:, 0]
        return (values, std) if return_std else values


class SigGateClassifier(ClassifierMixin, _SigGateEstimator):
    __doc__ = ("SigGate-GT binary classification on SMILES (``siggate train --data ... --task binary``); "
               "``y`` holds two classes (any labels; ``classes_`` in sorted order, the second is the "
               "positive one).\n\n" + _SigGateEstimator.__doc__.split("\n\n", 1)[1])
    _task = "binary"

    def _targets(self, y):
        y = np.asarray(y)
        if y.ndim != 1:
            raise ValueError(f"SigGateClassifier takes one label per molecule ([n]), got shape {y.shape}")
        self.classes_ = np.unique(y)
        if len(self.classes_) != 2:
            raise ValueError(f"SigGateClassifier is binary: y must hold two classes, got {len(self.classes_)}")
        return (y == self.classes_[1]).astype(np.float64).reshape(-1, 1), ["y"]

    def _val_rows(self, y: np.ndarray) -> np.ndarray:
        """Held-out rows drawn per class, so that the validation ROC-AUC is defined."""
        rng = np.random.default_rng(self.seed)
        val = np.zeros(len(y), bool)
        for c in (0.0, 1.0):
            rows = np.flatnonzero(y[:, 0] == c)
            k = min(max(1, int(round(self.val_fraction * len(rows)))), len(rows) - 1)
            val[rng.permutation(rows)[:k]] = True
        return val

    def predict_proba(self, X) -> np.ndarray:
        """``[n, 2]``: the probabilities of ``classes_[0]`` and ``classes_[1]``."""
        p = self._predict_mean(X)[:, 0]
        return np.stack([1.0 - p, p], axis=1)

    def predict(self, X) -> np.ndarray:
        """The more probable class of each molecule (probability >= 0.5: ``classes_[1]``)."""
        return self.classes_[(self.predict_proba(X)[:, 1] >= 0.5).astype(int)]
