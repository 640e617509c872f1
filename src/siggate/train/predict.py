"""Predict molecular properties from SMILES with a trained checkpoint.

Inputs are streamed in chunks, so memory stays flat however long the input is. Every
input row gives exactly one output row, in input order: the prediction, or an ``error``
naming why the row could not be predicted. Valid rows are predicted even when others fail.

What happens to unusual molecules (one rule each, applied the same way everywhere):

* empty or whitespace-only SMILES: refused, ``"empty SMILES"``;
* unparsable SMILES, or one that fails RDKit sanitization (e.g. a 5-valent carbon):
  refused with RDKit's reason (``"SMILES parse error: ..."``, ``"Explicit valence ..."``);
* text that was not valid UTF-8 in the input file: refused, ``"not valid UTF-8 ..."``;
  control characters (NUL, ...) are refused, ``"contains a control character ..."``, and so
  are non-ASCII characters, ``"contains a non-ASCII character ..."`` (SMILES are ASCII; RDKit
  would silently stop parsing at one, reading ``CCOé`` as ``CCO``);
* no heavy atoms (``[H][H]``, ``[H+]``: RDKit keeps lone hydrogens as atoms): refused,
  ``"no heavy atoms ..."``; such species are outside every training set;
* wildcard/dummy atoms (``*``, atomic number 0): refused, ``"contains a wildcard atom ..."``;
* a SMILES longer than 10 characters per atom of ``max_atoms`` (10,000 at the default):
  refused unread, ``"SMILES of N characters, above the limit ..."`` (RDKit's time grows
  faster than the length: a 100,000-character string took minutes);
* more than ``max_atoms`` atoms (``--max-atoms``, default 1000): refused with the count.
  Molecules up to the limit are predicted (large ones are batched on their own, since
  attention memory grows with the square of the atom count);
* disconnected fragments (salts and mixtures: ``C.C``, ``[Na+].[Cl-]``): **predicted as one
  graph with several connected components**, exactly as OGB featurizes them (the OGB
  benchmarks contain such salts). Message passing stays within each fragment; global
  attention and the sum pooling see all of them. A run trained with ``--fragments parent``
  predicts each molecule's parent instead (:func:`~siggate.data.chem.read_molecule`: the largest
  carbon fragment, neutralized, where it has one), as it was trained; the output's ``smiles``
  column keeps the input;
* unusual elements (``[Og]``, ``[U]``), charges and radicals: predicted. The OGB atom
  vocabulary covers atomic numbers 1-118, formal charges -5..+5 and 0..4 radical
  electrons; anything outside maps to OGB's ``misc`` index. Elements the model never saw
  in training have untrained embeddings, so such predictions are extrapolations;
* a non-finite model output: refused, ``"model produced a non-finite prediction"``.

Input files (:func:`read_smiles`): a CSV (or ``.tsv``) with a header naming the SMILES
column, or a ``.smi``/text file with the SMILES as the first whitespace-separated token of
each line (an optional first line ``smiles ...`` is taken as a header). Compressed files (gzip,
bzip2, xz, a one-file zip) are read as ``train --data`` reads them, their kind told by the
name under the compression's (``in.csv.bz2`` is a CSV), and ``-`` reads standard input (gzip
too). Blank lines are skipped. A missing column, a SMILES column named twice, a wrong
delimiter, an empty, binary, UTF-16 or truncated file raises :class:`InputError` (exit code 2) before any output is written. A row with more
fields than the header fails with that reason (its fields cannot be matched to the columns).
Other columns whose bytes are not UTF-8 (a Latin-1 spreadsheet export) are read as
Windows-1252 and written as UTF-8, with one warning.
"""

from __future__ import annotations

import contextlib
import csv
import gzip
import io
import itertools
import logging
import math
import re
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np
import torch

from ..data.base import DataError
from ..data.chem import (
    SMILES_CHARS_PER_ATOM,
    InvalidSmiles,
    check_atoms,
    check_smiles_length,
    control_character,
    mol_to_graph,
    parse_smiles,
    quiet_rdkit,
    read_molecule,
)
from ..data.compressed import DAMAGED, compression, inner_suffix, open_decompressed
from ..data.csvdata import excel_sep_problem, headerless_hint, one_in_any_case
from ..data.sdfile import is_sd, sd_table
from ..files import AtomicFile, name_os_error, number_text, read_json
from ..options import DELIMITERS, closest_name
from ..options import PREDICT_MAX_ATOMS as DEFAULT_MAX_ATOMS
from .runfiles import METRICS

#: Padded atom pairs per forward pass (graphs x largest graph squared): bounds the memory of
#: dense attention when large molecules are predicted. ``batch_size`` graphs of up to 64 atoms
#: fit; larger molecules go in smaller batches (at least one graph per batch).
PAIRS_PER_ATOM_BUDGET = 64 * 64

_SURROGATE = re.compile("[\udc80-\udcff]")
_NON_ASCII = re.compile(r"[^\x00-\x7f]")


log = logging.getLogger("siggate.predict")

#: the applicability-domain columns of :class:`SmilesPredictor` (after the predictions)
DOMAIN_COLUMNS = ("nearest_train_similarity", "outside_domain")


class InputError(ValueError):
    """An input file that cannot be read as SMILES rows."""


def run_folder(checkpoint) -> Path | None:
    """The run folder of ``checkpoint``: a folder itself, a checkpoint file's folder, or a loaded
    predictor's (a GNN member's checkpoint folder); ``None`` when it has none."""
    if isinstance(checkpoint, (str, Path)):
        path = Path(checkpoint)
        return path if path.is_dir() else path.parent
    ckpt = getattr(checkpoint, "checkpoint", None)
    return Path(ckpt).parent if ckpt is not None else getattr(checkpoint, "folder", None)


def _fragments(predictor, folder: Path | None) -> str:
    """The run's ``data.fragments`` (:func:`~.members.run_data`): what its models read of a
    molecule; ``"all"`` for a predictor of no run, or one saved before the key."""
    from ..predictors.base import PredictorFileError
    from .members import run_data

    try:
        return run_data(predictor, folder).data.fragments
    except PredictorFileError:
        return "all"


def run_calibration(folder: Path | None, coverage, info, checkpoint=None):
    """``(coverage, Calibration)`` of the run in ``folder`` for ``--coverage``, predicting with
    ``checkpoint`` (a ``.pt`` file of ``folder``, or the folder's own model when None).

    Raises:
        InputError: a bad coverage, a run without ``calibration.json``, one that does not fit, a
            checkpoint of the run that is not the model it calibrates (``last.pt`` beside ``best.pt``)."""
    coverage = _coverage(coverage)
    cal = read_calibration(folder, info, checkpoint)
    few = too_few_message(cal, coverage)
    if few:
        log.warning("%s", few)
    return coverage, cal


def _coverage(coverage) -> float:
    """``coverage`` checked (:func:`~siggate.predictors.conformal.check_coverage`).

    Raises:
        InputError: naming ``--coverage``."""
    from ..predictors.conformal import CalibrationError, check_coverage

    try:
        return check_coverage(coverage)
    except CalibrationError as exc:
        raise InputError(f"--coverage: {exc}") from None


def read_calibration(folder: Path | None, info, checkpoint=None):
    """The ``Calibration`` of the run in ``folder`` (its ``calibration.json``), checked against the
    model's task and targets (``info``) and, given one, the ``checkpoint`` it would predict with.

    Raises:
        InputError: a run without ``calibration.json``, one that does not fit, a checkpoint of
            the run that is not the model it calibrates (``last.pt`` beside ``best.pt``)."""
    from ..predictors.conformal import Calibration
    from .members import run_checkpoint_name
    from .rundir import CALIBRATION

    path = None if folder is None else Path(folder) / CALIBRATION
    if path is not None and not path.is_file() and (Path(folder).parent / CALIBRATION).is_file():
        raise InputError(f"--coverage: {folder} is a member of the run {Path(folder).parent}, which calibrates the "
                         f"members' combination; predict with {Path(folder).parent}, or drop --coverage")
    kind = _member_kind(folder) if path is not None and not path.is_file() else None
    if kind is not None:  # a fingerprint member copied out of its run: the run calibrates it, as a combination
        raise InputError(f"--coverage: {folder} holds one {kind} member, calibrated only as part of the run it was "
                         "trained in; predict with that run's folder, or drop --coverage")
    if path is None or not path.is_file():
        raise InputError(f"--coverage: the run {folder} holds no {CALIBRATION} (node-level and multiclass runs are "
                         "not calibrated; a graph-level run trained before siggate calibrated its runs is, once "
                         "trained again); drop --coverage, or train the run again")
    calibrated = run_checkpoint_name(folder)
    if checkpoint is not None and Path(checkpoint).is_file() and Path(checkpoint).name != calibrated:
        model = f"its {calibrated}" if calibrated else "its own model"
        raise InputError(f"--coverage: {path} calibrates the run's predictions with {model}, not "
                         f"{Path(checkpoint).name}, whose intervals would not hold their coverage; predict with the "
                         f"run folder {folder}, or drop --coverage")
    try:
        cal = Calibration.from_dict(read_json(path))
    except (ValueError, OSError) as exc:  # (its fix, as a damaged domain.json's)
        raise InputError(f"--coverage: {path} cannot be read ({exc}); copy the run folder again or train it again, "
                         "or drop --coverage") from None
    names = list(info.target_names or [f"target{t}" for t in range(info.num_tasks)])
    if cal.task != info.task:
        raise InputError(f"--coverage: {path} calibrates a {cal.task} task, the model's is {info.task}; it belongs "
                         "to another run")
    if list(cal.targets) != names:
        raise InputError(f"--coverage: {path} calibrates targets {list(cal.targets)}, the model predicts {names}; "
                         "it belongs to another run")
    return cal


def _member_kind(folder: Path) -> str | None:
    """The kind of the fingerprint member saved in ``folder`` (its ``predictor.json``), None for
    any other folder (a GNN run, a combination, no manifest)."""
    from ..predictors.base import MANIFEST, PredictorFileError, read_manifest
    from ..predictors.combine import Combination
    from .gnn_member import GNNMember

    try:
        kind = read_manifest(folder)["kind"] if (Path(folder) / MANIFEST).is_file() else None
    except PredictorFileError:
        return None
    return kind if kind not in (None, GNNMember.kind, Combination.kind) else None


def too_few_message(cal, coverage: float, name: str = "--coverage", again: str = "retrain") -> str | None:
    """Why ``cal`` cannot bound ``coverage`` for some targets (too few validation molecules: an
    honest answer, infinite intervals or sets of every class, but not one to take for an
    interval), naming the option as ``name`` and the way to train again as ``again``; None when
    it can for every target."""
    few = cal.too_few(coverage)
    if not few:
        return None
    from ..predictors.conformal import fewest_for, unbounded_text

    which = ", ".join(f"{target!r} on {n}" for target, n in few.items())
    least = min(few.values())
    highest = math.floor(least / (least + 1) * 1000) / 1000  # rounded down: a rounded-up value still fails
    remedy = (f"ask a coverage of at most {highest:g}, or {again} with more validation rows" if least
              else f"{again} with validation labels for every target (without them no coverage has a finite bound)")
    return (f"{name} {coverage:g}: the run's calibration holds too few validation molecules for it ({which}; "
            f"{fewest_for(coverage)} are needed): those targets' "
            f"{unbounded_text(cal.task)}; {remedy}")


def one_member_targets(combination) -> tuple[list[str], str]:
    """The targets whose weights give one member of ``combination`` everything, so that their
    spread over the members (``<target>_uncertainty``, an estimator's ``return_std``) is 0 for
    every molecule, and why (one member, or the validation weights)."""
    weights = combination.member_weights().numpy()  # [M, T]
    names = combination.info.target_names or [f"target{t}" for t in range(weights.shape[1])]
    alone = [n for n, w in zip(names, weights.T) if np.isclose(w, 1.0).any()]
    why = ("the run holds one member" if weights.shape[0] == 1
           else "the validation weights give one member all the weight")
    return alone, why


def _warn_one_member_targets(combination, where) -> None:
    """Warn, naming them, about the targets whose weights give one member everything: their
    ``<target>_uncertainty`` (the members' weighted spread) is 0 for every molecule."""
    alone, why = one_member_targets(combination)
    if alone:  # (a classifier's conformal sets are not scaled: nothing of it widens)
        instead = ("conformal intervals (--coverage, or an estimator's predict_interval) of a run calibrated on the "
                   "similarity to its training molecules widen away from them" if combination.info.task == "regression"
                   else "conformal prediction sets (--coverage, or an estimator's predict_set) hold their coverage "
                   "over the run's molecules as a whole")
        log.warning("%s: %s for %s, so %s 0 for every molecule, not a sign of certainty; %s",
                    where if isinstance(where, (str, Path)) else "this run", why, ", ".join(map(repr, alone)),
                    "its _uncertainty column is" if len(alone) == 1 else "their _uncertainty columns are", instead)


def similarity_domain(folder: Path | None):
    """The domain saved in ``folder``, by which the run's calibration scales its intervals.

    Raises:
        InputError: no domain files, or ones that cannot be read."""
    from ..data.similarity import Domain, DomainError

    try:
        found = None if folder is None else _own_domain(Domain.load(folder, required=True), folder,
                                                        "or drop --coverage")
    except DomainError as exc:
        raise InputError(f"--coverage: {exc}, or drop --coverage (the run's intervals are scaled by each molecule's "
                         "similarity to its training molecules)") from None
    if found is None:
        raise InputError(f"--coverage: the run {folder} scales its intervals by each molecule's similarity to its "
                         "training molecules, but holds no domain.json and domain_fingerprints.npz to measure it; "
                         "copy the whole run folder, or drop --coverage")
    return found


def _domain(folder: Path | None):
    """The applicability domain saved in ``folder``, or ``None``.

    Raises:
        InputError: domain files that cannot be read."""
    from ..data.similarity import Domain, DomainError

    if folder is None:
        return None
    try:
        domain = _own_domain(Domain.load(folder), folder, "or delete domain.json to predict without it")
    except DomainError as exc:
        raise InputError(str(exc)) from None
    if domain is None and _recorded_domain(folder):  # its columns would be missing without a word
        log.warning("%s: the run recorded its applicability domain, but its domain.json is gone: the output has no "
                    "nearest_train_similarity and outside_domain columns; copy the whole run folder", folder)
    return domain


def _recorded_domain(folder: Path) -> bool:
    """Whether the run in ``folder`` recorded an applicability domain (its ``metrics.json``)."""
    try:
        return isinstance(read_json(Path(folder) / METRICS).get("domain"), dict)
    except (ValueError, OSError, AttributeError):
        return False


def _own_domain(domain, folder: Path, remedy: str):
    """``domain`` (loaded from ``folder``), checked to be the run's own: its training molecules as
    many as the run's ``metrics.json`` says it trained on (where both say).

    Raises:
        InputError: another run's domain files, naming the way out (``remedy``)."""
    if domain is None or not (Path(folder) / METRICS).is_file():
        return domain
    try:
        trained = read_json(Path(folder) / METRICS).get("splits", {}).get("train")
    except (ValueError, OSError, AttributeError):
        return domain  # the metrics are not this check's to refuse
    described = (domain.record or {}).get("n_train")
    if isinstance(trained, int) and isinstance(described, int) and trained != described:
        raise InputError(f"{folder}: its domain.json describes {described} training molecules, but the run trained on "
                         f"{trained}: the domain files belong to another run; restore the run's own, {remedy}")
    return domain


class SmilesPredictor:
    """SMILES in, one row of predictions (in target units) out, from a saved predictor.

    Args:
        checkpoint: what ``siggate train`` saved (:func:`~siggate.train.members.load_predictor`:
            a run folder, a checkpoint file ``best.pt``/``last.pt``, or a folder of several
            members, whose combination is the prediction and whose spread over members goes to
            the ``<target>_uncertainty`` column(s)), or a predictor already loaded.
        max_atoms: molecules with more atoms are refused with a reason (attention is
            quadratic in the number of atoms). (default: ``1000``)
        batch_size: graphs per forward pass at most; fewer when molecules are large.
            (default: ``128``)
        device: where the model runs, ``"cpu"`` or ``"cuda"``. (default: ``"cpu"``)
        coverage: add split-conformal intervals at this coverage (``--coverage``, e.g. ``0.9``):
            ``<target>_lower``/``<target>_upper`` for regression, ``<target>_set`` (``{0}``,
            ``{1}``, ``{0,1}``) for binary and multilabel tasks, from the run's
            ``calibration.json`` (:mod:`siggate.predictors.conformal`). (default: none)
        domain: add ``nearest_train_similarity`` and ``outside_domain`` when the run records its
            applicability domain (``domain.json``, :mod:`siggate.data.similarity`). (default: ``True``)
        folder: the run folder a ``checkpoint`` given as a loaded predictor came from (a
            fingerprint member's run records how it reads a molecule, and its calibration and
            domain); by default the checkpoint's own folder, or the loaded GNN's.
        uncertainty: warn about the targets whose ``<target>_uncertainty`` is 0 for every molecule
            (a combination whose weights give one member everything); a caller that writes no
            such column (``siggate explain``) passes ``False``. (default: ``True``)
    """

    #: the run's data.fragments (set from the run; this default serves a reader pickled before it)
    fragments = "all"
    #: the folder the predictor was loaded from (None: a predictor object without one, or a reader pickled before it)
    folder = None
    #: the domain the nearest-training similarity is measured with (a reader pickled before it: its ``domain``)
    _similarity_from = None

    def __init__(self, checkpoint, max_atoms: int = DEFAULT_MAX_ATOMS, batch_size: int = 128,
                 device: str = "cpu", coverage: float | None = None, domain: bool = True,
                 folder: str | Path | None = None, uncertainty: bool = True) -> None:
        if isinstance(max_atoms, bool) or not isinstance(max_atoms, int) or max_atoms < 1:
            raise InputError(f"max_atoms (--max-atoms) must be a positive integer, got {max_atoms!r}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InputError(f"batch_size must be a positive integer, got {batch_size!r}")
        from ..predictors.base import PredictorFileError
        from ..predictors.combine import Combination
        from .members import encodings_of, load_predictor, members_of

        try:
            self.predictor = load_predictor(checkpoint, device) if isinstance(checkpoint, (str, Path)) else checkpoint
            self.info = self.predictor.info
            encodings = encodings_of(self.predictor)
        except PredictorFileError as exc:
            raise InputError(str(exc)) from None
        except ValueError as exc:  # members of different tasks
            raise InputError(f"{checkpoint}: {exc}") from None
        if isinstance(checkpoint, (str, Path)):
            from .rundir import unfinished

            why = unfinished(checkpoint)
            if why:
                log.warning("%s", why)
        self.ensemble = isinstance(self.predictor, Combination)  # its spread is the uncertainty
        if self.ensemble and uncertainty:  # (a caller that writes no _uncertainty column has nothing to warn of)
            _warn_one_member_targets(self.predictor, checkpoint)
        for member in members_of(self.predictor):  # a chunk is one forward pass, as _batches sized it
            if getattr(member, "batch_size", None) is not None:
                member.batch_size = max(member.batch_size, batch_size)
        self.device = device
        self.max_atoms = max_atoms
        self.batch_size = batch_size
        self.rwse, self.lap, self.mol_features = encodings.rwse_steps, encodings.lap_dim, encodings.mol_features
        if folder is None:
            folder = run_folder(checkpoint if isinstance(checkpoint, (str, Path)) else self.predictor)
        self.folder = folder = None if folder is None else Path(folder)
        self.coverage, self.calibration = None, None
        if coverage is not None:
            self.coverage, self.calibration = run_calibration(
                folder, coverage, self.info, checkpoint if isinstance(checkpoint, (str, Path)) else None)
        found = similarity_domain(folder) if self._scaled_by_similarity() else _domain(folder) if domain else None
        self.domain = found if domain else None
        self._similarity_from = found
        self.fragments = _fragments(self.predictor, folder)
        self.outside = 0  # rows predicted outside the applicability domain so far (predict's summary says so)
        if self.info.node_features != "ogb":
            raise InputError(
                f"this checkpoint was trained on {self.info.name!r}, whose graphs use integer atom types, "
                "not SMILES-derived OGB features; it cannot predict from SMILES"
            )

    def output_columns(self, input_columns: list[str]) -> list[str]:
        """The prediction columns written after ``input_columns``: each target's name
        (``data.target_cols``; probabilities for classification), then ``<target>_uncertainty``
        for an ensemble. A target whose name (or its uncertainty's) is already an input column,
        e.g. the label column of a labelled file, is written as ``<target>_pred`` (and
        ``<target>_pred_uncertainty``), so no output has two columns of one name."""
        from .rundir import prediction_columns

        targets = self.info.target_names or [f"target{t}" for t in range(self.info.num_tasks)]
        return prediction_columns(targets, input_columns, self.ensemble, self._suffixes(),
                                  DOMAIN_COLUMNS if self.domain is not None else ())

    def _suffixes(self) -> list[str]:
        """The per-target columns after the predictions and uncertainties: intervals or sets."""
        if self.calibration is None:
            return []
        return ["_lower", "_upper"] if self.calibration.task == "regression" else ["_set"]

    @property
    def columns(self) -> list[str]:
        """The prediction columns of :meth:`predict_rows` (after ``smiles``): :meth:`output_columns`
        of an input with only a ``smiles`` column."""
        return self.output_columns(["smiles"])

    def featurize(self, smiles: str):
        """SMILES -> graph with positional encodings; raises ``InvalidSmiles`` with a reason
        (see the module docstring for the rules)."""
        return self._add_pe([self._graph(smiles)])[0]

    def _add_pe(self, graphs: list) -> list:
        from ..data.pe import add_pe

        if self.rwse or self.lap:
            graphs = add_pe(graphs, rwse_steps=self.rwse, lap_dim=self.lap)
        return graphs

    def _graph(self, smiles: str):
        """SMILES -> graph without positional encodings (see :meth:`featurize`)."""
        if not isinstance(smiles, str):
            raise InvalidSmiles(f"SMILES must be a string, got {type(smiles).__name__}")
        bad = _SURROGATE.search(smiles)
        if bad:
            byte = ord(bad.group()) - 0xDC00
            raise InvalidSmiles(
                f"not valid UTF-8: byte 0x{byte:02x} at character {bad.start() + 1}; save the input as UTF-8"
            )
        s = smiles.strip()
        if not s:
            raise InvalidSmiles("empty SMILES")
        ctrl = control_character(s)
        if ctrl:
            raise InvalidSmiles(ctrl)
        wide = _NON_ASCII.search(s)
        if wide:  # RDKit would silently stop parsing there: 'CCOé' would be read as 'CCO'
            raise InvalidSmiles(
                f"contains a non-ASCII character ({wide.group()!r}) at position {wide.start() + 1}; SMILES are plain ASCII"
            )
        max_length = SMILES_CHARS_PER_ATOM * max(self.max_atoms, DEFAULT_MAX_ATOMS)
        check_smiles_length(s, max_length)  # before RDKit, whose time grows faster than the length
        with quiet_rdkit():
            if len(s) > self.max_atoms:  # cheap count before sanitizing a possibly huge molecule
                from rdkit import Chem

                raw = Chem.MolFromSmiles(s, sanitize=False)
                if raw is not None:
                    heavy = sum(1 for a in raw.GetAtoms() if a.GetAtomicNum() != 1)
                    if heavy > self.max_atoms:
                        raise InvalidSmiles(self._too_large(heavy, "heavy atoms"))
            mol, read = parse_smiles(s), None
            if self.fragments != "all":  # the run reads a salt as its parent (read_molecule)
                reading = read_molecule(mol, self.fragments)
                mol, read = reading.mol, reading.smiles
            check_atoms(mol)  # the rule a CSV's training rows pass
            if mol.GetNumAtoms() > self.max_atoms:
                raise InvalidSmiles(self._too_large(mol.GetNumAtoms(), "atoms"))
            g = mol_to_graph(mol, chirality=self.info.chirality)  # as the run read its molecules
            if self.mol_features != "none":  # raw, as the datasets store them; the model scales
                from ..data.molfeatures import compute

                g.mol_x = torch.from_numpy(compute([mol], self.mol_features))
        g.smiles = read or s  # a salt's parent: what the members and explain read
        return g

    def _scaled_by_similarity(self) -> bool:
        """Whether the calibration's intervals are scaled by the molecules' nearest-training similarity."""
        return self.calibration is not None and self.calibration.needs_similarity

    def _too_large(self, n: int, what: str) -> str:
        return f"molecule has {n} {what}, above the limit of {self.max_atoms} (--max-atoms)"

    @torch.no_grad()
    def _predict_graphs(self, graphs) -> list[list]:
        """One list of output values per graph, in :attr:`columns` order: the predictions, an
        ensemble's uncertainties, the intervals or sets, then the domain columns."""
        pred = self.predictor.predict(graphs)
        mean = pred.mean.cpu()
        spread = None if pred.spread is None else pred.spread.cpu()
        source = self._similarity_from if self._similarity_from is not None else self.domain
        wanted = self.domain is not None or self._scaled_by_similarity()  # the domain columns, or the intervals
        similarity = source.graph_similarity(graphs) if wanted and source is not None else None
        parts = [mean.tolist()] + ([spread.tolist()] if self.ensemble else [])
        if self.calibration is not None and self.calibration.task == "regression":
            scale = self.calibration.row_scale(None if spread is None else spread.numpy(), similarity)
            lower, upper = self.calibration.intervals(mean.numpy(), scale, self.coverage)
            # at float32, the precision the members' predictions are made at (a network's outputs, a fingerprint
            # member's), so one row's numbers are written alike
            parts += [lower.astype(np.float32).tolist(), upper.astype(np.float32).tolist()]
        elif self.calibration is not None:
            parts.append(self.calibration.sets(mean.numpy(), self.coverage))
        if self.domain is not None:
            parts.append([[float(sim), "false" if inside else "true"]
                          for sim, inside in zip(similarity, self.domain.inside(similarity))])
        finite = torch.isfinite(mean).all(dim=1)
        if spread is not None:
            finite &= torch.isfinite(spread).all(dim=1)
        return [[finite[g].item()] + [v for part in parts for v in part[g]] for g in range(len(mean))]

    def _batches(self, sizes: list[int]) -> Iterator[list[int]]:
        """Positions into ``sizes`` grouped into batches of similar size whose padded atom
        pairs (graphs x largest squared) stay within ``batch_size * PAIRS_PER_ATOM_BUDGET``."""
        budget = self.batch_size * PAIRS_PER_ATOM_BUDGET
        order = sorted(range(len(sizes)), key=lambda k: sizes[k])
        cur: list[int] = []
        for k in order:
            n = max(sizes[k], 1)
            if cur and (len(cur) >= self.batch_size or (len(cur) + 1) * n * n > budget):
                yield cur
                cur = []
            cur.append(k)
        if cur:
            yield cur

    def featurize_rows(self, smiles: Iterable[str]) -> tuple[list[dict], list[int], list]:
        """The rules of the module docstring applied to each SMILES: ``(rows, ok, graphs)``, one
        row per SMILES (``smiles``, empty :attr:`columns` and ``error``, the reason a row was
        refused), the positions of the rows that became graphs, and their graphs with the
        encodings the predictor reads. ``siggate predict`` and ``siggate explain`` share it."""
        smiles = list(smiles)
        rows, ok, graphs = [], [], []
        empty = {c: "" for c in self.columns}
        with quiet_rdkit():
            for i, s in enumerate(smiles):
                row = {"smiles": s, **empty, "error": ""}
                try:
                    graphs.append(self._graph(s))
                    ok.append(i)
                except InvalidSmiles as exc:
                    row["error"] = str(exc) or "invalid SMILES"
                except Exception as exc:  # featurization must never take down the other rows
                    row["error"] = f"featurization failed: {type(exc).__name__}: {exc}"
                rows.append(row)
        try:  # positional encodings for the whole chunk at once (much cheaper than per graph)
            graphs = self._add_pe(graphs)
        except Exception:  # find the graph(s) at fault, keep the others
            kept, kept_ok = [], []
            for g, i in zip(graphs, ok):
                try:
                    kept += self._add_pe([g])
                    kept_ok.append(i)
                except Exception as exc:
                    rows[i]["error"] = f"featurization failed: {type(exc).__name__}: {exc}"
            graphs, ok = kept, kept_ok
        return rows, ok, graphs

    def batches(self, graphs: list) -> Iterator[list[int]]:
        """Positions into ``graphs`` grouped into forward passes (:meth:`_batches`)."""
        return self._batches([int(g.num_nodes) for g in graphs])

    def predict_rows(self, smiles: Iterable[str]) -> list[dict]:
        """One dict per input SMILES, in order: ``smiles``, the prediction column(s) (floats at
        full precision, the nearest-training similarity too; text for sets and ``outside_domain``;
        ``""`` for a refused row) and ``error``."""
        rows, ok, graphs = self.featurize_rows(smiles)
        for batch in self.batches(graphs):
            chunk = [graphs[k] for k in batch]
            idx = [ok[k] for k in batch]
            try:
                preds = self._predict_graphs(chunk)
            except Exception:  # e.g. a molecule the model cannot handle: retry one by one
                preds = None
            if preds is not None:
                for j, p in zip(idx, preds):
                    self._fill(rows[j], p)
                continue
            for j, g in zip(idx, chunk):
                try:
                    self._fill(rows[j], self._predict_graphs([g])[0])
                except Exception as exc:
                    rows[j]["error"] = f"prediction failed: {type(exc).__name__}: {exc}"
        if self.domain is not None:
            out_col = self.columns[-1]
            self.outside += sum(rows[i].get(out_col) == "true" for i in ok if not rows[i]["error"])
        return rows

    def _fill(self, row: dict, values: list) -> None:
        """Write one graph's :meth:`_predict_graphs` values (its finiteness first) into ``row``."""
        if not values[0]:
            row["error"] = "model produced a non-finite prediction"
            return
        for c, v in zip(self.columns, values[1:]):
            row[c] = v if isinstance(v, str) else float(v)  # full precision; written by _cell


# --------------------------------------------------------------------------- input


def _open_text(path: Path):
    """Open ``path`` (``-`` for stdin) as text, decompressed where it is gzip, bzip2, xz or a zip of
    one file (by its first bytes, as ``train --data`` reads it): UTF-8 with an optional BOM;
    undecodable bytes are kept as surrogates so the row can name them. Returns ``(text, compressed,
    sd)``: ``sd`` whether it is an SD file (:func:`~siggate.data.sdfile.is_sd`)."""
    kw = dict(encoding="utf-8-sig", errors="surrogateescape", newline="")

    def stream(raw):  # read once, from its start: its first bytes cannot be read again
        peek = getattr(raw, "peek", None)
        if peek is not None and peek(2)[:2] == b"\x1f\x8b":  # gzip on stdin (zcat-less pipes), read as a .gz file
            raw = gzip.GzipFile(fileobj=raw, mode="rb")
        sd = is_sd(raw.peek(8192)) if hasattr(raw, "peek") else False  # (what is buffered)
        return io.TextIOWrapper(raw, **kw), None, sd

    if str(path) == "-":
        return stream(sys.stdin.buffer)
    if not path.exists():
        raise InputError(f"input file not found: {path}")
    if path.is_dir():
        raise InputError(f"input {path} is a directory; give a CSV or .smi file")
    if not path.is_file():  # a pipe (--input <(zcat x.gz)), /dev/stdin: the file's first bytes were lost by reopening it
        try:
            return stream(open(path, "rb"))
        except OSError as exc:
            raise InputError(f"cannot read input file {path}: {exc.strerror or exc}") from None
    try:
        with open(path, "rb") as fh:
            head = fh.read(8192)
    except OSError as exc:
        raise InputError(f"cannot read input file {path}: {exc.strerror or exc}") from None
    module = compression(head)  # compressed as training's reader knows it: by its first bytes
    if path.suffix.lower() == ".gz" and module is not gzip and head:
        raise InputError(f"{path} is named .gz but is not gzip-compressed")

    def opened():
        try:
            return open_decompressed(path, module)
        except DataError as exc:  # a zip of other than one file, a workbook
            raise InputError(str(exc)) from None

    if module:
        try:
            with opened() as fh:
                head = fh.read(8192)
        except DAMAGED as exc:
            raise InputError(f"{path}: the compressed file is truncated or corrupt ({exc})") from None
    if head[:2] in (b"\xff\xfe", b"\xfe\xff"):
        raise InputError(f"{path} is UTF-16 encoded; save it as UTF-8")
    if b"\x00" in head:
        raise InputError(f"{path} looks like a binary file (it contains NUL bytes), not a CSV or .smi text file")
    return io.TextIOWrapper(opened(), **kw), module is not None, is_sd(head)


def _delimiter_hint(header_line: str, delim: str) -> str:
    for cand, name in ((";", "';'"), ("\t", "tabs"), ("|", "'|'"), (",", "','")):
        if cand != delim and cand in header_line:
            return f" The header has a single column {header_line.strip()!r}: the file seems to be delimited by {name}, not {'tabs' if delim == chr(9) else repr(delim)}."
    return ""


class InputRows:
    """The rows of an input file, streamed: ``columns`` (the file's header; ``["smiles"]`` for a
    ``.smi``/text file, ``["smiles", "name"]`` when it names molecules), ``smiles_index`` (the
    SMILES column's position) and ``chunks``, an iterator of lists of records (each a list of
    ``len(columns)`` strings)."""

    def __init__(self, columns: list[str], smiles_index: int, chunks: Iterator[list[list[str]]]) -> None:
        self.columns, self.smiles_index, self.chunks = columns, smiles_index, chunks

    def __iter__(self) -> Iterator[list[list[str]]]:
        return iter(self.chunks)


def read_input(path: str | Path, smiles_col: str = "smiles", chunk: int = 1000,
               fallback: str | None = None) -> InputRows:
    """Stream the rows of a CSV (with a ``smiles_col`` header, else a ``fallback`` one,
    :func:`smiles_column`; every column is kept) or a
    ``.smi``/text file (first whitespace-separated token of each line, as column ``smiles``; the
    rest of the line as column ``name`` when the first ``chunk`` lines name any molecule), or
    an SD file (:func:`~siggate.data.sdfile.sd_table`: read whole, its molecules' SMILES and data
    items as columns), ``chunk`` rows at a time.

    The file is opened and its header checked when this is called, so a missing file or
    column, a wrong delimiter or an unreadable file raises :class:`InputError` before any
    output is written. Bytes that are not UTF-8 are kept (as surrogate escapes) so that
    their row fails with a reason instead of stopping the run.
    """
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise InputError(f"chunk size must be a positive integer, got {chunk!r}")
    path = Path(path)
    fh, _, sd = _open_text(path)
    if sd:  # molfile records, their properties as columns
        with fh:
            header, rows, _ = sd_table(fh)
        smiles_col = smiles_column(path, header, smiles_col, fallback) if smiles_col not in header else smiles_col
        if smiles_col not in header:
            raise InputError(f"column {smiles_col!r} not found in {path}, an SD file whose columns are {header} (the "
                             f"molfiles' SMILES are {header[0]!r}); pass --smiles-col {header[0]}")
        return InputRows(header, header.index(smiles_col), (rows[i:i + chunk] for i in range(0, len(rows), chunk)))
    try:
        try:
            first, consumed = fh.readline(), 1
            while first and not first.strip():  # leading blank lines
                first, consumed = fh.readline(), consumed + 1
        except DAMAGED as exc:
            raise InputError(f"cannot read {path}: the file is truncated or corrupt ({exc})") from None
        if not first:
            raise InputError(f"input file {path} is empty: expected a CSV header with a {smiles_col!r} column, "
                             "or one SMILES per line")
        sep_line = excel_sep_problem(path, first)
        if sep_line:
            raise InputError(sep_line)
        suffix = inner_suffix(path)
        delim = _sniff_csv(first, (smiles_col, fallback), suffix)
    except BaseException:
        fh.close()
        raise
    if delim is not None:
        from ..data.csvdata import check_unique_columns, column_names

        header = column_names(next(csv.reader([first], delimiter=delim), []))
        try:
            check_unique_columns(path, header, [smiles_col], InputError)
        except InputError:
            fh.close()
            raise
        if smiles_col not in header:
            smiles_col = smiles_column(path, header, smiles_col, fallback)
        if smiles_col not in header:
            fh.close()
            sug = closest_name(smiles_col, header)
            headless = headerless_hint(header)
            if headless:
                raise InputError(f"column {smiles_col!r} not found in {path}{headless}")
            hint = f" Did you mean --smiles-col {sug}?" if sug else ""
            if len(header) == 1:
                hint += _delimiter_hint(first, delim)
            raise InputError(
                f"column {smiles_col!r} not found in {path}. Available columns: {header}. "
                f"Pass --smiles-col NAME.{hint}"
            )
        return InputRows(header, header.index(smiles_col), _csv_rows(fh, path, header.index(smiles_col), len(header),
                                                                     delim, chunk, consumed))
    records = _smi_records(fh, path, first, smiles_col)
    try:
        head = list(itertools.islice(records, chunk))
    except BaseException:
        records.close()
        raise
    named = any(name for _, name in head)  # a name column when the first chunk's lines have names
    return InputRows(["smiles", "name"] if named else ["smiles"], 0, _chunks(head, records, chunk, 2 if named else 1, path))


def read_smiles(path: str | Path, smiles_col: str = "smiles", chunk: int = 1000) -> Iterator[list[str]]:
    """The SMILES of :func:`read_input`, ``chunk`` at a time (the other columns dropped)."""
    rows = read_input(path, smiles_col, chunk)
    return ([rec[rows.smiles_index] for rec in recs] for recs in rows)


def smiles_column(path, header: Sequence[str], wanted: str, fallback: str | None) -> str:
    """The column of ``header`` to read SMILES from: ``wanted`` when it is there, else
    ``fallback`` (:func:`~siggate.data.csvdata.one_in_any_case`) with a warning naming both; else ``wanted``, for the
    caller to refuse. ``predict``, ``explain`` and ``evaluate --data`` read the column a run was
    trained on (``--smiles-col`` then), and a new file naming its SMILES ``smiles`` is read
    without one."""
    found = None if wanted in header else one_in_any_case(header, fallback)
    if found is None:
        return wanted
    log.warning("%s: no column %r, the one the run was trained on; reading SMILES from column %r "
                "(choose another with --smiles-col)", path, wanted, found)
    return found




def _sniff_csv(first: str, smiles_cols: tuple[str, str | None], suffix: str) -> str | None:
    """The delimiter of a CSV: the one of :data:`~siggate.options.DELIMITERS` by which the header
    ``first`` names one of ``smiles_cols`` (in any case for the second, the fallback, except in a
    ``.smi``/``.txt`` file, unless its header has three tab-separated fields or more, or two with the
    SMILES second: a spreadsheet's "Text (Tab delimited)" export), as
    ``siggate train`` reads a ``;``-separated ``.csv``; else ``,`` for a ``.csv``, a tab for a
    ``.tsv``, and ``None`` (a .smi-style file) for any other."""
    from ..data.csvdata import column_names

    wanted, fallback = smiles_cols
    if suffix in (".smi", ".txt"):  # a SMILES file's header "SMILES Name" stays one; "ID<tab>SMILES<tab>pIC50" is a table
        fields = column_names(next(csv.reader([first], delimiter="\t"), []))
        name = wanted if wanted in fields else one_in_any_case(fields, fallback)
        if name is not None and (len(fields) >= 3 or fields.index(name) > 0):  # ("Name<tab>SMILES" too)
            return "\t"
        fallback = None
    for delim in DELIMITERS:
        if delim in first:
            fields = column_names(next(csv.reader([first], delimiter=delim), []))
            if wanted in fields or one_in_any_case(fields, fallback) is not None:
                return delim
    return {".csv": ",", ".tsv": "\t"}.get(suffix)


def _csv_rows(fh, path: Path, col: int, width: int, delim: str, chunk: int,
              consumed: int = 1) -> Iterator[list[list[str]]]:
    """Records of ``width`` fields (short rows padded with ``""``), the SMILES field ``col``
    stripped; a record with more fields carries an ``error``. ``consumed``: the lines read
    before ``fh``'s position (the header), so that messages name the file's line numbers."""
    try:
        from ..data.csvdata import csv_records, extra_fields, extra_fields_reason

        records = csv_records(fh, delim, path, consumed, InputError)
        buf: list[str] = []
        start = consumed  # the line the last record read began on
        while True:
            try:
                start, rec = next(records)
            except StopIteration:
                break
            except csv.Error as exc:  # (csv_records reads leniently what is not a quote never closed)
                raise InputError(f"{path}, after line {start}: malformed CSV ({exc})") from None
            except DAMAGED as exc:
                raise InputError(f"cannot read {path}: the file is truncated or corrupt ({exc})") from None
            if not rec:  # a blank line is not a record
                continue
            extra = extra_fields(rec, width)  # (empty ones after the last column: a delimiter at the line's end)
            rec = _Record((rec + [""] * width)[:width])
            rec[col] = rec[col].strip()
            if extra:  # its fields cannot be matched to the columns: the row fails, the others go on
                rec.error = extra_fields_reason(start, width, extra)
            buf.append(rec)
            if len(buf) >= chunk:
                yield buf
                buf = []
        if buf:
            yield buf
    finally:
        fh.close()


class _Record(list):
    """An input record; ``error`` says why the row cannot be predicted whatever its SMILES."""

    error = ""


def _smi_records(fh, path: Path, first: str, smiles_col: str) -> Iterator[list[str]]:
    """``[smiles, name]`` of each non-blank line of a .smi/text file (Daylight's layout: the
    SMILES, whitespace, then the rest of the line as the molecule's name, ``""`` where none),
    ``first`` its first line (skipped when it is a header naming ``smiles_col``). Closes ``fh``."""
    try:
        parts = first.split(maxsplit=1)
        if not (parts and parts[0].lower() == smiles_col.lower()):  # else: a header line
            yield [parts[0], parts[1].strip() if len(parts) > 1 else ""]
        try:
            for line in fh:
                parts = line.split(maxsplit=1)
                if parts:
                    yield [parts[0], parts[1].strip() if len(parts) > 1 else ""]
        except DAMAGED as exc:
            raise InputError(f"cannot read {path}: the file is truncated or corrupt ({exc})") from None
    finally:
        fh.close()


def _chunks(head: list[list[str]], records: Iterator[list[str]], chunk: int, width: int,
            path: Path) -> Iterator[list[list[str]]]:
    """``head`` and then the rest of ``records`` in lists of ``chunk``, each record cut to
    ``width`` (1: the names dropped, which a warning says once when a later line has one)."""
    buf, warned = [r[:width] for r in head], False
    for rec in records:
        if len(buf) >= chunk:
            yield buf
            buf = []
        if width == 1 and rec[1] and not warned:
            warned = True
            log.warning("%s names molecules only after its first %d lines (%r): the output has no name column, "
                        "so names are dropped; raise --chunk-size, or name the molecules from the first line",
                        path, len(head), rec[1])
        buf.append(rec[:width])
    if buf:
        yield buf


# -------------------------------------------------------------------------- output


@contextlib.contextmanager
def csv_output(output: str | Path | None) -> Iterator[io.TextIOWrapper]:
    """A UTF-8 text handle for CSV rows (gzip-compressed when ``output`` ends in ``.gz``): on
    ``output`` written atomically (a temporary file next to it, renamed when the block ends normally, removed if it raises, so a run that
    stops never leaves a partial file that looks complete), or on stdout when ``output`` is
    empty. Characters that cannot be encoded are written escaped (``\\xff``).

    Raises:
        InputError: ``output`` cannot be written.
    """
    if not output:
        fh = io.TextIOWrapper(sys.stdout.buffer, encoding="utf-8", errors="backslashreplace", newline="",
                              write_through=True)
        try:
            yield fh
            fh.flush()
        except OSError as exc:  # (a full disk or a size limit of the file stdout was sent to: named as such)
            name_os_error(exc, "standard output")
            raise
        finally:
            try:
                fh.detach()
            except (OSError, ValueError):
                pass
        return
    try:
        sink = AtomicFile(output, make_parents=False, output=True)
    except OSError as exc:
        folder = Path(output).parent
        fix = f" (its folder {folder} does not exist: create it, or choose another --output)" if not folder.is_dir() else ""
        raise InputError(f"cannot write output {output}: {exc.strerror or exc}{fix}") from None
    # (into /dev/stdout: appended, as >> asked); a full disk is named with the output's path
    base = raw = io.BufferedWriter(_NamedFile(sink.tmp, "ab" if sink.direct else "wb", shown=str(output)))
    if str(output).lower().endswith(".gz"):  # compressed, as its name says (and as --input reads it)
        import gzip

        raw = gzip.GzipFile(filename=Path(output).name[:-3], mode="wb", fileobj=base, mtime=0)
    fh = io.TextIOWrapper(raw, encoding="utf-8", errors="backslashreplace", newline="")
    try:
        yield fh
        fh.close()  # (a GzipFile writes its trailer, and leaves the file it wrote into open)
        base.close()
    except BaseException:
        for close in (fh.close, base.close, base.raw.close):  # (closing flushes: a full disk fails again)
            try:
                close()
            except (OSError, ValueError):
                pass
        sink.discard()  # (no temporary file left by a failed write)
        raise
    sink.commit()


class _NamedFile(io.FileIO):
    """A file whose failed writes (a full disk, a file size limit: ``OSError`` without a file name)
    name the file ``shown``, the user's ``--output`` beside which the temporary file is written."""

    def __init__(self, path: str, mode: str, shown: str) -> None:
        super().__init__(path, mode)
        self.shown = shown

    def write(self, data) -> int:
        try:
            return super().write(data)
        except OSError as exc:
            name_os_error(exc, self.shown)
            raise


def _cell(value) -> str:
    """A prediction column's value as ``siggate predict`` writes it (numbers: :func:`~siggate.files.number_text`)."""
    return number_text(value) if isinstance(value, float) else value


def predict_to_csv(predictor: SmilesPredictor, chunks: InputRows | Iterable[list[str]],
                   output: str | Path | None) -> tuple[int, int]:
    """Write predictions as CSV to ``output`` (or stdout), chunk by chunk: the input's columns
    in their order (``chunks`` from :func:`read_input`; chunks of SMILES strings give one
    ``smiles`` column), the prediction columns (:meth:`SmilesPredictor.output_columns`), then
    ``error`` (``error_pred`` beside an input's own ``error``, :func:`~.rundir.error_column`).
    Returns ``(rows, failed_rows)``.

    A file is written to a temporary name next to ``output`` and renamed when every chunk
    is done, so a run that stops (a corrupt input, Ctrl-C) never leaves a partial file that
    looks complete. Input bytes that were not UTF-8 are written back escaped (``\\xff``).
    """
    if not isinstance(chunks, InputRows):
        chunks = InputRows(["smiles"], 0, ([[s] for s in chunk] for chunk in chunks))
    columns, at = chunks.columns, chunks.smiles_index
    n = bad = 0
    legacy: list[tuple[int, str]] = []  # (row, column) of text fields read as Windows-1252
    with csv_output(output) as out_fh:
        w = csv.writer(out_fh, lineterminator="\r\n")
        from .rundir import error_column

        w.writerow(header_text([*columns, *predictor.output_columns(columns), error_column(columns)]))
        for recs in chunks:
            rows = predictor.predict_rows(input_smiles(recs, at))
            for k, (rec, r) in enumerate(zip(recs, rows)):
                if getattr(rec, "error", ""):
                    r.update({c: "" for c in predictor.columns}, error=rec.error)
                w.writerow([*output_fields(rec, at, columns, n + k, legacy), *(_cell(r[c]) for c in predictor.columns),
                            r["error"]])
            out_fh.flush()
            n += len(rows)
            bad += sum(1 for r in rows if r["error"])
    warn_legacy(legacy)
    return n, bad


def input_smiles(recs: list[list[str]], at: int) -> list[str]:
    """The SMILES (field ``at``) of the input records ``recs``; ``""`` for a record that carries an
    ``error`` (more fields than the header: which field holds the SMILES is unknown)."""
    return [rec[at] if not getattr(rec, "error", "") else "" for rec in recs]


def output_fields(rec: list[str], at: int, columns: list[str], row: int, legacy: list[tuple[int, str]]) -> list[str]:
    """The input record ``rec`` (row ``row`` of a file with ``columns``) as an output writes it
    back: a SMILES (field ``at``) with bytes that are not UTF-8 echoed as ``\\xff`` (a SMILES is
    ASCII: its row failed), other text that is not UTF-8 read as Windows-1252, each such field's
    ``(row, column)`` added to ``legacy`` (for :func:`warn_legacy`)."""
    fields = list(rec)
    for j, f in enumerate(fields):
        if isinstance(f, str) and _SURROGATE.search(f):
            if j == at:
                fields[j] = _escape_bytes(f)
            else:
                fields[j] = _legacy_text(f)
                legacy.append((row, columns[j]))
    return fields


def header_text(columns: list[str]) -> list[str]:
    """An output's header: a name whose bytes were not UTF-8 read as Windows-1252, as the fields'
    text is (:func:`output_fields`; it was written as a surrogate escape, ``Conc \\udcb5M``)."""
    return [_legacy_text(c) if isinstance(c, str) and _SURROGATE.search(c) else c for c in columns]


def warn_legacy(legacy: list[tuple[int, str]]) -> None:
    """One warning for the text fields :func:`output_fields` read as Windows-1252, if any."""
    if legacy:
        log.warning("the input is not UTF-8: %d text fields (first: row %d, column %r) were read as Windows-1252 "
                    "(Latin-1) and written as UTF-8; save the input as UTF-8 to be sure they read as meant",
                    len(legacy), legacy[0][0], legacy[0][1])


def _legacy_text(s: str) -> str:
    """Text whose bytes were not UTF-8 (surrogate escapes), decoded as Windows-1252, the encoding
    of spreadsheet exports that are not UTF-8 (a byte Windows-1252 leaves undefined as Latin-1)."""
    raw = s.encode("utf-8", "surrogateescape")
    try:
        return raw.decode("cp1252")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def _escape_bytes(s: str) -> str:
    """Undecodable input bytes (surrogate escapes) as ``\\xff`` text."""
    return s.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def __getattr__(name: str):
    """``Predictor``: the old name of :class:`SmilesPredictor` (deprecated: it clashes with
    :class:`siggate.predictors.base.Predictor`, the interface every model implements)."""
    if name == "Predictor":
        import warnings

        warnings.warn("siggate.train.predict.Predictor is deprecated; use siggate.train.predict.SmilesPredictor",
                      DeprecationWarning, stacklevel=2)
        return SmilesPredictor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
