"""A weighted combination of predictors: ``siggate train --ensemble N`` and ``--members``.

The combination predicts the weighted mean of its members' predictions (target units for
regression, probabilities for classification) and reports their weighted standard deviation
(``ddof=0``) as the spread, which ``siggate predict`` writes as ``<target>_uncertainty``.

Weights (``weights=``):

* ``None``: equal weights, ``1/M`` each. The mean and spread are then exactly
  ``torch.stack(p).mean(0)`` and ``.std(0, correction=0)``, the numbers ``--ensemble`` always gave.
* ``"val"``: fitted on the validation split, per target: the non-negative weights summing to one
  that minimise the squared error of the combined prediction on the target's labelled
  validation rows (least squares on the simplex, for probabilities the Brier score). Per
  target, because members may be good at different targets and each target has its own scale
  and missing labels; a target without validation labels keeps equal weights (per group, then
  split within it). For
  ``multiclass`` the classes share one weight vector, so the combination stays a distribution.
  Members given one ``groups`` label (``siggate train``: one kind, e.g. the GNN seeds of
  ``--ensemble N``) are fitted as one, through their mean prediction, and share its weight
  equally: the validation rows weigh kinds of model, never one seed against another. The groups
  are saved with the weights, so a loaded combination refits its weights the same way.
  The test split is never read.
* a sequence: fixed weights, ``[M]`` (every target) or ``[M][T]``, non-negative, each target's
  summing to one.

Storage: ``predictor.json`` (kind ``combination``) lists the members' subfolders and the
weights; each member saves itself into its subfolder. :meth:`Combination.load` takes the
function that loads a member folder (``siggate.train.members.load_predictor``), so this package
knows no member kind.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from .base import (
    GROWN_OR_COPIED,
    MANIFEST,
    SAVED_FILES,
    AtomContributions,
    Prediction,
    PredictorFileError,
    check_saved_files,
    out_of_sample,
    read_manifest,
    task_info,
    write_manifest,
)

#: weights below this from :func:`simplex_least_squares` are the solver's rounding, set to 0
SOLVER_ZERO = 1e-9
#: the most members (groups) whose weights are checked on every support (2^M - 1 small solves)
EXACT_SUPPORTS_MAX = 10
#: the least weight :func:`simplex_least_squares` gives a member on its exact pass; a smaller share is none
SHARE_MIN = 1e-6
#: how a combination's weights were set
WEIGHTINGS = ("equal", "fixed", "val")


def simplex_least_squares(a: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The weights ``w`` (``[M]``, ``w >= 0``, ``sum(w) == 1``) that minimise ``||a @ w - y||^2``
    for ``a [n, M]`` (one column per member) and ``y [n]``: a small convex quadratic program,
    solved with SciPy's SLSQP from equal weights, then exactly on the support it found (and never
    worse than a member alone or equal weights)."""
    from scipy.optimize import minimize

    a = np.asarray(a, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    m = a.shape[1]
    if m == 1:
        return np.ones(1)
    # the weights sum to one, so centring and scaling y and every column alike leaves the argmin
    # as it is: the program is solved in the members' own error scale, whatever the units and
    # offset (in the labels' spread, labels nearly alike beside members' larger errors made the
    # loss so large that SLSQP stopped at its start, equal weights, and called it converged)
    centre = float(np.mean(y))
    spread = float(np.sqrt(np.mean((a - y[:, None]) ** 2))) or float(np.std(y)) or 1.0
    a, y = (a - centre) / spread, (y - centre) / spread

    def loss(w):
        r = a @ w - y
        return float(r @ r) / len(y)

    def grad(w):
        return 2.0 * (a.T @ (a @ w - y)) / len(y)

    res = minimize(loss, np.full(m, 1.0 / m), jac=grad, method="SLSQP", bounds=[(0.0, 1.0)] * m,
                   constraints=[{"type": "eq", "fun": lambda w: w.sum() - 1.0, "jac": lambda w: np.ones(m)}],
                   options={"ftol": 1e-14, "maxiter": 1000})
    w = np.where(res.x > SOLVER_ZERO, res.x, 0.0)  # the solver's 1e-16s are no share: a member left out
    w = w / w.sum()                                  # has weight 0, so its spread counts for nothing
    # polished on its support: the equality-constrained least squares there, solved exactly (KKT),
    # where its weights stay non-negative (a member of far larger errors sets the scale, and SLSQP's
    # tolerance then stops short of the others' optimum)
    on = np.flatnonzero(w)
    if on.size > 1:
        k = a[:, on]
        kkt = np.block([[2.0 * k.T @ k, np.ones((on.size, 1))], [np.ones((1, on.size)), np.zeros((1, 1))]])
        sol = np.linalg.lstsq(kkt, np.concatenate([2.0 * k.T @ y, [1.0]]), rcond=None)[0][:on.size]
        if np.all(sol >= 0):
            polished = np.zeros(m)
            polished[on] = sol / sol.sum()
            w = polished if loss(polished) <= loss(w) else w
    # a guard on the solver: no member alone, nor equal weights, may be better than its answer
    for other in (*np.eye(m), np.full(m, 1.0 / m)):
        if loss(other) < loss(w) * (1 - 1e-9) - 1e-15:
            w = other
    # exact where the members are few (a run's kinds of member): the optimum is the equality-constrained
    # least squares on its own support, so the best non-negative one over every support is the answer.
    # One member of errors ~10^4 times the others' sets the scale above, and SLSQP then stopped short of
    # the others' optimum on a support the polish above cannot leave (val weights [0, 1, 0] at 1.7 times
    # the squared error of [0, 0.935, 0.065]: a diverged member beside two good ones)
    if m <= EXACT_SUPPORTS_MAX:
        w = _best_support(a - y[:, None], w, loss)
    return w


def _best_support(err: np.ndarray, w: np.ndarray, loss: Callable[[np.ndarray], float]) -> np.ndarray:
    """The lowest-``loss`` of ``w`` and, on every support of the members' errors ``err [n, M]``
    (``a @ w - y == err @ w`` on the simplex), the weights minimising ``||err_S v||^2`` with
    ``sum(v) == 1`` where each is at least :data:`SHARE_MIN`, each solved in its own support's
    error scale. (A share of 5e-9 for a member wrong by 9,000, its errors' chance correlation with
    the others' exploited, lowered the val error by 0.5% and made the combination's spread 0.6
    where its members agreed to 0.01.)"""
    m = err.shape[1]
    gram = err.T @ err / err.shape[0]
    # the supports are ranked by w'Gw (loss(w) on the simplex, from the [M, M] Gram matrix: up to 2^M - 1
    # candidates, each a pass over every row otherwise), and the best is taken where loss says it is better
    cand, cand_q = None, np.inf
    for size in range(1, m + 1):
        for on in itertools.combinations(range(m), size):
            g = gram[np.ix_(on, on)]
            g = g / (float(np.mean(np.diag(g))) or 1.0)  # the support's errors in their own scale
            kkt = np.block([[2.0 * g, np.ones((size, 1))], [np.ones((1, size)), np.zeros((1, 1))]])
            sol = np.linalg.lstsq(kkt, np.concatenate([np.zeros(size), [1.0]]), rcond=None)[0][:size]
            if sol.sum() <= 0 or np.any(sol / sol.sum() < SHARE_MIN):  # negative, or a share that is none
                continue
            v = np.zeros(m)
            v[list(on)] = sol / sol.sum()
            q = float(v @ gram @ v)
            if q < cand_q:
                cand, cand_q = v, q
    return cand if cand is not None and loss(cand) < loss(w) else w


def _kind(member) -> str:
    """A member's kind as a combination records it (``gnn``, ``svr``, ``rf``, ``combination``)."""
    return str(getattr(member, "kind", type(member).__name__))


def _check_weights(weights, m: int) -> np.ndarray:
    """Fixed weights as ``[M, 1]`` or ``[M, T]``; refused unless non-negative and summing to one."""
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim == 1:
        w = w[:, None]
    if w.ndim != 2 or w.shape[0] != m:
        raise ValueError(f"weights: one per member ({m}), or one row per member with one column per target; "
                         f"got shape {tuple(np.asarray(weights).shape)}")
    if not np.isfinite(w).all() or (w < 0).any() or not np.allclose(w.sum(0), 1.0, atol=1e-6):
        raise ValueError(f"weights must be non-negative and sum to one over the members; got {w.T.tolist()}")
    return w


class Combination:
    """The weighted mean of predictors (see the module docstring).

    Args:
        members: fitted or unfitted predictors of one task (same task type and targets).
        weights: ``None`` (equal), ``"val"`` (fitted on the validation split by :meth:`fit` or
            :meth:`fit_weights`) or fixed weights ``[M]`` / ``[M][T]``. (default: ``None``)
        names: the members' subfolders in a saved combination. (default: ``member0``, ...)
        record: JSON fields saved with the combination and restored by :meth:`load` (``siggate
            train`` keeps the run's config and data source there). (default: none)
        groups: a label per member (``siggate train``: its kind); ``"val"`` weights are fitted
            to the groups' mean predictions and a group's weight is shared equally by its members,
            so validation rows never choose among copies of one kind (seeds). (default: each
            member its own group)

    Attributes:
        weights_: ``[M, T]`` weights, or ``None`` for equal weights.
    """

    kind = "combination"

    def __init__(self, members: Sequence, weights: None | str | Sequence = None, names: Sequence[str] | None = None,
                 record: dict | None = None, groups: Sequence[str] | None = None) -> None:
        if not members:
            raise ValueError("a combination needs at least one member")
        self.members = list(members)
        self.names = list(names) if names is not None else [f"member{i}" for i in range(len(self.members))]
        if len(self.names) != len(self.members) or len(set(self.names)) != len(self.names):
            raise ValueError(f"names: one distinct name per member, got {self.names}")
        self.record = dict(record or {})
        self.groups = list(groups) if groups is not None else list(self.names)
        if len(self.groups) != len(self.members):
            raise ValueError(f"groups: one label per member, got {len(self.groups)} for {len(self.members)} members")
        if weights is None:
            self.weighting, self.weights_ = "equal", None
        elif isinstance(weights, str):
            if weights != "val":
                raise ValueError(f"weights: None, 'val' or a list of numbers, got {weights!r}")
            self.weighting, self.weights_ = "val", None
        else:
            self.weighting, self.weights_ = "fixed", _check_weights(weights, len(self.members))

    @property
    def info(self):
        """The task of the members (the first member's :class:`~siggate.data.base.TaskInfo`)."""
        infos = [m.info for m in self.members]
        first = infos[0]
        for i, other in enumerate(infos[1:], 1):
            if (other.task, other.num_tasks, list(other.target_names), other.level) != \
                    (first.task, first.num_tasks, list(first.target_names), first.level):
                raise ValueError(f"member {self.names[i]} predicts another task ({other.task}, targets "
                                 f"{list(other.target_names)}) than {self.names[0]} ({first.task}, "
                                 f"{list(first.target_names)}); a combination's members share one task")
        return first

    def fit(self, ds) -> "Combination":
        """Fit every member on ``ds``, then the weights (:meth:`fit_weights`)."""
        for m in self.members:
            m.fit(ds)
        return self.fit_weights(ds)

    def fit_weights(self, ds) -> "Combination":
        """With ``weights="val"``: fit the weights on ``ds.val`` from the (fitted) members'
        out-of-sample predictions (:func:`~.base.out_of_sample`: a member refitted on train+val
        answers with the predictions it made before; module docstring); otherwise nothing to fit.
        Returns ``self``."""
        if self.weighting != "val":
            return self
        from ..data.base import split_mask, stacked_labels

        info, graphs = self.info, ds.val
        if not graphs:
            raise ValueError("weights='val' fits the weights on the validation split, and this dataset has no "
                             "validation molecules; give it a val split, or use equal weights (weights=None)")
        preds = torch.stack([out_of_sample(m, "val", graphs).mean for m in self.members]).double()  # M, rows, T
        y = stacked_labels(graphs, info, "val")
        if info.transductive:
            preds = preds[:, torch.cat([split_mask(g, info, "val") for g in graphs])]
        labels = list(dict.fromkeys(self.groups))
        of = np.array([labels.index(g) for g in self.groups])
        size = np.bincount(of, minlength=len(labels))
        p, y = np.stack([preds.numpy()[of == g].mean(0) for g in range(len(labels))]), y.numpy()  # groups, rows, T
        m, t = p.shape[0], p.shape[2]
        w = np.full((m, t), 1.0 / m)
        if info.task == "multiclass":  # one weight vector for all classes (Brier score on one-hot labels)
            onehot = np.eye(t)[y.astype(int)]
            w[:] = simplex_least_squares(p.reshape(m, -1).T, onehot.reshape(-1))[:, None]
        else:
            y = y.reshape(len(y), -1)
            for j in range(t):
                ok = ~np.isnan(y[:, j])
                if ok.any():
                    w[:, j] = simplex_least_squares(p[:, ok, j].T, y[ok, j])
        self.weights_ = w[of] / size[of, None]  # a group's weight shared equally by its members
        return self

    def combine(self, preds: Sequence[Prediction]) -> Prediction:
        """The combination of the members' predictions ``preds`` (in member order): the weighted
        mean and the weighted standard deviation over members (``ddof=0``), ``[G, T]`` each."""
        stacked = torch.stack([p.mean for p in preds])  # members, G, T (promoted: a GNN's float64 beside a kernel's float32)
        if self.weights_ is None:
            if self.weighting == "val":
                raise ValueError("weights='val': fit the weights (fit or fit_weights) before predicting")
            return Prediction(stacked.mean(0), stacked.std(0, correction=0))
        w = torch.as_tensor(self.weights_, dtype=stacked.dtype)[:, None, :]  # members, 1, T
        mean = (w * stacked).sum(0)
        return Prediction(mean, (w * (stacked - mean) ** 2).sum(0).clamp_min(0).sqrt())

    def predict(self, graphs) -> Prediction:
        """:meth:`combine` of every member's prediction for ``graphs``."""
        return self.combine([m.predict(graphs) for m in self.members])

    def member_weights(self) -> torch.Tensor:
        """``[M, T]`` the members' weights per target (equal: ``1/M``)."""
        if self.weights_ is not None:
            return torch.as_tensor(self.weights_, dtype=torch.float64)
        if self.weighting == "val":
            raise ValueError("weights='val': fit the weights (fit or fit_weights) before predicting")
        m = len(self.members)
        return torch.full((m, self.info.num_outputs), 1.0 / m, dtype=torch.float64)

    def atom_contributions(self, graphs, **options) -> AtomContributions:
        """The weighted sum of the members' atom contributions (and of their baselines and
        predictions): the combined mean is linear in the members', so where every member's
        contributions add up to its prediction minus its baseline (integrated gradients), the
        combination's do too (occlusion, the fingerprint members', does not). ``options`` go to
        every member's ``atom_contributions`` (e.g. ``steps``; a member ignores those it does not use).

        Raises:
            ValueError: a member kind that cannot attribute its predictions to atoms.
        """
        parts = []
        for name, member in zip(self.names, self.members):
            if not hasattr(member, "atom_contributions"):
                raise ValueError(f"member {name} ({getattr(member, 'kind', type(member).__name__)}) cannot attribute "
                                 "its predictions to atoms; explain the other members' folders one by one")
            parts.append(member.atom_contributions(graphs, **options))
        w = self.member_weights()  # M, T
        atoms = [sum(w[i] * p.atoms[g].double() for i, p in enumerate(parts)) for g in range(len(parts[0].atoms))]
        baseline = sum(w[i] * p.baseline.double() for i, p in enumerate(parts))
        prediction = sum(w[i] * p.prediction.double() for i, p in enumerate(parts))
        methods = sorted({p.method for p in parts})
        return AtomContributions(atoms, baseline, prediction, "; ".join(methods), all(p.complete for p in parts))

    def save(self, folder: str | Path, members: bool = True) -> None:
        """Each member into ``folder/<name>`` (unless ``members`` is false: the members saved
        themselves there, as ``siggate train`` does when it fits each, and a finished member's
        files are never written again), then ``folder/predictor.json``."""
        folder = Path(folder)
        for name, m in zip(self.names, self.members) if members else ():
            m.save(folder / name)
        write_manifest(folder, self.kind, self.info, files=[f"{n}/{MANIFEST}" for n in self.names],
                       members=self.names, weighting=self.weighting,
                       weights=None if self.weights_ is None else self.weights_.tolist(), groups=self.groups,
                       kinds=[_kind(m) for m in self.members], **self.record)

    @classmethod
    def load(cls, folder: str | Path, load_member: Callable[[Path], object]) -> "Combination":
        """The combination saved in ``folder``; ``load_member(path)`` loads each member folder.

        Raises:
            PredictorFileError: not a combination's manifest, or unusable weights.
        """
        folder = Path(folder)
        doc = read_manifest(folder)
        if doc["kind"] != cls.kind:
            raise PredictorFileError(f"{folder}: a {doc['kind']!r} predictor, not a {cls.kind!r}")
        try:
            if not isinstance(doc["members"], list):  # (a string was read letter by letter)
                raise TypeError(f"members must be a list of folder names, got {type(doc['members']).__name__}")
            names = [str(n) for n in doc["members"]]
            weighting = doc.get("weighting", "equal")
            if weighting not in WEIGHTINGS:
                raise ValueError(f"unknown weighting {weighting!r}")
            if weighting == "equal" and doc.get("weights") is not None:  # (its saved weights were silently dropped)
                raise ValueError(f"weighting 'equal' beside weights {doc['weights']!r}: an edited weighting")
        except (KeyError, TypeError, ValueError) as exc:
            raise PredictorFileError(f"{folder}: not a combination manifest ({exc})") from None
        bad = [n for n in names if Path(n).name != n or n in ("", ".", "..")]
        if bad:
            raise PredictorFileError(f"{folder}: member folder {bad[0]!r} is not a subfolder name")
        if not names:
            raise PredictorFileError(f"{folder}: a combination of no members; retrain it")
        missing = [n for n in names if not (folder / n).is_dir()]
        if missing:
            raise PredictorFileError(f"{folder}: its member folder(s) {', '.join(missing)} are missing; copy the "
                                     "whole run folder, or retrain it")
        info = task_info(doc, folder)
        check_saved_files(folder, doc, GROWN_OR_COPIED)  # (a member retrained by a growth, or of another run)
        record = {k: v for k, v in doc.items() if k not in ("format", "kind", "info", "members", "weighting", "weights",
                                                            "groups", "kinds", SAVED_FILES)}
        if "split_seed" in record and (type(record["split_seed"]) is not int):  # (a traceback in evaluate)
            raise PredictorFileError(f"{folder / MANIFEST}: split_seed must be a whole number, got "
                                     f"{record['split_seed']!r}")
        groups = doc.get("groups")  # absent in combinations saved before groups: one per member
        if groups is not None and (not isinstance(groups, list) or len(groups) != len(names)):
            raise PredictorFileError(f"{folder}: unusable groups (one label per member expected)")
        out = cls([load_member(folder / n) for n in names], None, names, record,
                  groups=None if groups is None else [str(g) for g in groups])
        if weighting != "equal":
            try:
                out.weighting, out.weights_ = weighting, _check_weights(doc["weights"], len(names))
            except (KeyError, TypeError, ValueError) as exc:
                raise PredictorFileError(f"{folder}: unusable weights ({exc})") from None
        kinds = doc.get("kinds")  # (absent in combinations saved before it was recorded)
        found = [_kind(m) for m in out.members]
        if kinds is not None and list(kinds) != found:  # a member folder swapped for another kind's
            saved = list(kinds) + ["nothing"] * (len(found) - len(kinds))
            at = next((i for i in range(len(found)) if saved[i] != found[i]), 0)
            raise PredictorFileError(f"{folder}: its member {names[at]} holds a {found[at]!r} predictor where the "
                                     f"combination saved {saved[at]!r} (its kinds: {', '.join(map(str, kinds))}); "
                                     "copy the whole run folder as it was, or retrain it")
        if info.num_tasks != out.info.num_tasks or list(info.target_names) != list(out.info.target_names):
            raise PredictorFileError(f"{folder}: its members predict the target(s) {', '.join(out.info.target_names)}, "
                                     f"its manifest names {', '.join(info.target_names)}")
        if out.weights_ is not None and out.weights_.shape[1] not in (1, info.num_tasks):
            raise PredictorFileError(f"{folder}: unusable weights (a column per target, {info.num_tasks}, or one for "
                                     f"all; got {out.weights_.shape[1]})")
        return out
