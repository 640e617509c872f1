"""Molecule handling: SMILES parsing with readable errors, OGB graph featurization,
penalized logP and scaffold/random splits.

RDKit reports problems through its C++ error log, which by default goes straight
to stderr.  Everything here runs with that log captured (or blocked), and the
reason is carried by :class:`InvalidSmiles` instead, so that loading a benchmark
with a few broken rows prints nothing but one summary warning from the loader.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import re
import sys
from collections import defaultdict
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
import torch
from ogb.utils.features import atom_to_feature_vector, bond_to_feature_vector
from rdkit import Chem, RDConfig, rdBase
from rdkit.Chem import Descriptors
from rdkit.Chem.Scaffolds import MurckoScaffold
from torch_geometric.data import Data

from ..options import (  # SPLITS: names of the computed splits (:func:`split_indices`)
    FRAGMENTS,
    PREDICT_MAX_ATOMS,
    SPLITS,
)

__all__ = [
    "InvalidSmiles",
    "parse_smiles",
    "mol_to_graph",
    "smiles_to_graph",
    "sa_score",
    "penalized_logp",
    "murcko_scaffold",
    "scaffold_split",
    "random_split",
    "split_indices",
    "SPLITS",
    "quiet_rdkit",
    "parent_by_neutralizing",
    "parent_molecule",
    "read_molecule",
    "Reading",
]


class InvalidSmiles(ValueError):
    """A SMILES string that cannot become a molecule graph; ``str(exc)`` is the reason."""


# --------------------------------------------------------------------------- logging


class _Capture:
    """Collects RDKit error-log lines while active; nothing reaches stderr."""

    def __init__(self) -> None:
        self._text = ""
        self._ctx = None
        self._block = None

    def __enter__(self) -> "_Capture":
        # every log blocked (the warning log too: "not removing hydrogen atom without neighbors" for
        # [H+].CC(=O)[O-] reached stderr past the error log's capture), the error log captured inside
        self._block = rdBase.BlockLogs()
        self._block.__enter__()
        if hasattr(rdBase, "CaptureErrorLog"):  # RDKit >= 2025.x
            self._ctx = rdBase.CaptureErrorLog()
            self._ctx.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        ctx, block, self._ctx, self._block = self._ctx, self._block, None, None
        if ctx is not None:
            ctx.__exit__(*exc)
        block.__exit__(*exc)
        msgs = getattr(ctx, "messages", "")
        self._text = msgs if isinstance(msgs, str) else ""

    @property
    def lines(self) -> list[str]:
        out = []
        for line in self._text.splitlines():
            # drop the "[12:34:56] " timestamp prefix RDKit puts on each line
            line = re.sub(r"^\[\d\d:\d\d:\d\d\]\s?", "", line).strip()
            if line and line not in out:
                out.append(line)
        return out


@contextlib.contextmanager
def quiet_rdkit() -> Iterator[None]:
    """Block RDKit's warning/error log while active (the one helper for this in siggate;
    the reasons of failures still reach :class:`InvalidSmiles`)."""
    with rdBase.BlockLogs():
        yield


def _parse_error_reason(lines: list[str]) -> str:
    """Turn RDKit's SMILES-parser log lines into one readable reason."""
    details = []
    for line in lines:
        m = re.match(r"SMILES Parse Error:\s*(.*)", line)
        if m and not m.group(1).startswith("Failed parsing SMILES"):
            details.append(m.group(1).strip().rstrip(":"))
    if not details:  # messages without the usual prefix (ring closures, ...)
        details = [ln for ln in lines if not set(ln) <= set("~^ ")][:2]
    return "SMILES parse error" + (": " + "; ".join(details) if details else "")


def _sanitize_reason(raw: Chem.Mol, exc: Exception | None = None) -> str:
    """RDKit's explanation of why ``raw`` (parsed with ``sanitize=False``) does not sanitize."""
    try:
        with quiet_rdkit():
            problems = Chem.DetectChemistryProblems(Chem.Mol(raw))
        msgs = [p.Message() for p in problems]
    except Exception:  # pragma: no cover - defensive
        msgs = []
    if msgs:
        return "; ".join(dict.fromkeys(msgs))
    if exc is not None and str(exc):
        return str(exc)
    return "sanitization failed"


# ------------------------------------------------------------------------- parsing

_PARTIAL_SANITIZE_OPS = (
    Chem.SanitizeFlags.SANITIZE_FINDRADICALS
    | Chem.SanitizeFlags.SANITIZE_SETAROMATICITY
    | Chem.SanitizeFlags.SANITIZE_SETCONJUGATION
    | Chem.SanitizeFlags.SANITIZE_SETHYBRIDIZATION
    | Chem.SanitizeFlags.SANITIZE_SYMMRINGS
)


def _partial_sanitize(raw: Chem.Mol) -> Chem.Mol:
    """Best-effort sanitization of a molecule that fails full sanitization."""
    mol = Chem.Mol(raw)
    with quiet_rdkit():
        mol.UpdatePropertyCache(strict=False)
        try:
            Chem.SanitizeMol(mol, _PARTIAL_SANITIZE_OPS, catchErrors=True)
        except Exception:  # pragma: no cover - catchErrors already guards this
            pass
        try:
            mol = Chem.RemoveHs(mol, sanitize=False)
            mol.UpdatePropertyCache(strict=False)
        except Exception:
            pass
        try:
            Chem.AssignStereochemistry(mol, cleanIt=True, force=True)
        except Exception:
            pass
    return mol


#: a control character (NUL, ...; not a tab or a line break), which no SMILES and no column name holds
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def control_character(text: str) -> str | None:
    """Why ``text`` (a SMILES, stripped) is refused for a control character in it, e.g.
    ``"contains a control character ('\\x00') at position 2"``, or None where it holds none: the
    one rule of ``siggate predict`` and of an estimator's ``X`` and target names."""
    ctrl = _CONTROL.search(text)
    return None if ctrl is None else f"contains a control character ({ctrl.group()!r}) at position {ctrl.start() + 1}"


def check_smiles_length(s: str, limit: int | None) -> None:
    """Refuse a SMILES longer than ``limit`` characters (None: no limit) before RDKit reads it:
    RDKit's time grows faster than the length (a 100,000-character string took minutes),
    and no molecule a model here can take needs that many (:data:`MAX_SMILES_LENGTH`).

    Raises:
        InvalidSmiles: naming the length and the limit.
    """
    if limit is not None and len(s) > limit:
        raise InvalidSmiles(f"SMILES of {len(s):,} characters, above the limit of {limit:,} ({SMILES_CHARS_PER_ATOM} "
                            f"per atom of a {limit // SMILES_CHARS_PER_ATOM:,}-atom molecule); not parsed")


def check_atoms(mol) -> None:
    """Refuse a parsed molecule that no model here can read, by one rule for a CSV's training rows
    and for ``siggate predict``: only hydrogens (nothing to predict from), or a wildcard atom
    ``*`` (atomic number 0: a query or an attachment point, not an element).

    Raises:
        InvalidSmiles: naming which, and the first wildcard atom's number.
    """
    atoms = list(mol.GetAtoms())
    if not any(a.GetAtomicNum() > 1 for a in atoms):
        if any(a.GetAtomicNum() == 0 for a in atoms):
            raise InvalidSmiles("contains a wildcard atom '*' (atomic number 0), which is not an element")
        raise InvalidSmiles(f"no heavy atoms: the molecule has only hydrogen ({len(atoms)} H atom(s)); "
                            "there is nothing to predict from")
    wild = [a.GetIdx() for a in atoms if a.GetAtomicNum() == 0]
    if wild:  # (counted as a reader counts, and as RDKit and explain's atoms.csv do)
        raise InvalidSmiles(f"contains a wildcard atom '*' (atomic number 0) at atom {wild[0] + 1} (RDKit index "
                            f"{wild[0]}), which is not an element")


@functools.cache
def _uncharger():
    """RDKit's ``Uncharger``, built once (building it costs several times one use)."""
    from rdkit.Chem.MolStandardize import rdMolStandardize

    return rdMolStandardize.Uncharger()


def _largest_carbon_fragments(mol: Chem.Mol) -> tuple[int, list[Chem.Mol]]:
    """``(the molecule's number of fragments, its fragments that hold carbon and the most heavy
    atoms among those)``: ``[mol]`` for one fragment, ``[]`` where none holds carbon. A carbon
    salt such as a carbonate counts as organic."""
    parts = Chem.GetMolFrags(mol)
    organic = [k for k, part in enumerate(parts) if any(mol.GetAtomWithIdx(a).GetAtomicNum() == 6 for a in part)]
    if len(parts) == 1 or not organic:
        return len(parts), [mol] if organic else []
    frags = Chem.GetMolFrags(mol, asMols=True, sanitizeFrags=False)
    heavy = {k: sum(1 for a in parts[k] if mol.GetAtomWithIdx(a).GetAtomicNum() > 1) for k in organic}
    return len(parts), [frags[k] for k in organic if heavy[k] == max(heavy.values())]


def parent_molecule(mol: Chem.Mol) -> tuple[Chem.Mol | None, str | None, int]:
    """``(parent, its canonical SMILES, the molecule's number of fragments)``; the parent is
    ``None`` (and its SMILES) where there is none to keep.

    The rule (RDKit's tools, simpler than ChEMBL's curated salt lists): of the fragments that
    hold carbon, the one of most heavy atoms, neutralized where RDKit's ``Uncharger`` can
    (``CC[NH3+]`` -> ``CCN``, ``CC(=O)[O-]`` -> ``CC(=O)O``; a quaternary ammonium stays charged),
    so that ``CCN.Cl``, ``CC[NH3+].[Cl-]`` and ``CCN`` have one parent. Fragments of one size are
    compared once neutralized, so that an acid salted with its own anion (``CC(=O)[O-].CC(=O)O.[Na+]``)
    has the acid for parent. There is none for a molecule without carbon (``[Na+].[Cl-]``, ionic
    cisplatin), for two different carbon fragments of one size (a 1:1 mixture, not a salt), or
    where the parent's SMILES does not read back to itself (a neutralized aromatic ring RDKit
    cannot kekulize, some metal complexes): their atoms would not be the ones a picture or a
    fingerprint names."""
    n, top = _largest_carbon_fragments(mol)
    try:
        with quiet_rdkit():  # a parent RDKit cannot read back is a finding, not a log line
            neutral = [_uncharger().uncharge(frag) for frag in top]
            texts = {Chem.MolToSmiles(frag) for frag in neutral}
            if len(texts) != 1:  # no carbon, or a mixture
                return None, None, n
            text = texts.pop()
            again = Chem.MolFromSmiles(text)
    except Exception:  # partly sanitized: no parent to read back
        return None, None, n
    if again is None or Chem.MolToSmiles(again) != text:
        return None, None, n
    return again, text, n


def parent_by_neutralizing(smiles: str) -> bool:
    """Whether ``smiles`` reads as a molecule whose largest carbon fragments differ as written and
    agree neutralized (an acid salted with its own anion): the molecules whose parent
    (:func:`parent_molecule`) came with CSV reading 7; before it they had none."""
    if "." not in smiles:
        return False
    with quiet_rdkit():
        mol = Chem.MolFromSmiles(smiles.strip())
    if mol is None:
        return False
    _, top = _largest_carbon_fragments(mol)
    return len({Chem.MolToSmiles(frag) for frag in top}) > 1 and parent_molecule(mol)[0] is not None


@dataclass(frozen=True)
class Reading:
    """How a model reads one written molecule under ``data.fragments``
    (:func:`read_molecule`)."""

    mol: Chem.Mol        # what the graph, the features and the fingerprints are made of
    smiles: str | None   # its SMILES where it is not the molecule as written (the parent's), else None
    parent: str | None   # the parent's canonical SMILES (:func:`parent_molecule`), None where there is none
                         # or the molecule is its own (one uncharged fragment)
    fragments: int       # the written molecule's number of fragments


def read_molecule(mol: Chem.Mol, fragments: str) -> Reading:
    """The molecule a model reads of ``mol`` under ``data.fragments``
    (:data:`~siggate.options.FRAGMENTS`): ``"all"``, the molecule as written; ``"parent"``, its
    parent (:func:`parent_molecule`, parsed again from its canonical SMILES, so that its atoms are
    in that SMILES' order), or the molecule as written where it has none. One rule for a CSV's
    training rows and ``siggate predict`` (which, under ``"all"``, reads every molecule as
    written without asking).

    A molecule of one uncharged fragment is its own parent: it is read as written, and
    ``Reading.parent`` is None (its own canonical SMILES serves), which spares the parent's cost
    (about twice the graph's) for most molecules."""
    if fragments not in FRAGMENTS:
        raise ValueError(f"fragments must be one of {FRAGMENTS}, got {fragments!r}")
    n = len(Chem.GetMolFrags(mol))
    if n == 1 and not any(a.GetFormalCharge() for a in mol.GetAtoms()):
        return Reading(mol, None, None, n)
    parent, text, n = parent_molecule(mol)
    if fragments == "parent" and parent is not None:
        return Reading(parent, text, text, n)
    return Reading(mol, None, text, n)


#: the SMILES cell of an SD file's record that RDKit cannot read (:mod:`siggate.data.sdfile`), its line and why
#: after it: ``<a molfile RDKit cannot read, at line 12: why>``
UNREADABLE_MOLFILE = "<a molfile RDKit cannot read, at line"

#: characters a SMILES may spend per atom (bracket atoms, ring bonds, branches) before it is
#: refused unread; with :data:`~siggate.options.PREDICT_MAX_ATOMS` the length limit of user input
SMILES_CHARS_PER_ATOM = 10
#: the longest SMILES a CSV row or ``siggate predict`` reads (at the default ``--max-atoms``)
MAX_SMILES_LENGTH = SMILES_CHARS_PER_ATOM * PREDICT_MAX_ATOMS


def parse_smiles(smiles: str, allow_unsanitized: bool = False, max_length: int | None = None) -> Chem.Mol:
    """Parse a SMILES string into an RDKit molecule.

    Args:
        smiles: the SMILES string; surrounding whitespace is ignored, whitespace inside is
            refused (RDKit reads what follows as the molecule's name) unless a CXSMILES
            extension (`` |...|``) follows it.
        allow_unsanitized: when full sanitization fails but the string parses,
            return a partially sanitized molecule instead of raising (used for
            benchmarks such as ogbg-molhiv whose few metal complexes do not pass
            RDKit's valence rules but must still become graphs).
        max_length: refuse longer strings unread (:func:`check_smiles_length`; user
            input passes :data:`MAX_SMILES_LENGTH`). (default: ``None``, no limit)

    Raises:
        InvalidSmiles: with RDKit's reason ("SMILES parse error: ...",
            "Explicit valence for atom # 1 N, 4, is greater than permitted", ...).
    """
    if smiles is None or (isinstance(smiles, float) and math.isnan(smiles)):
        raise InvalidSmiles("empty SMILES")
    if not isinstance(smiles, str):
        raise InvalidSmiles(f"SMILES must be a string, got {type(smiles).__name__}")
    s = smiles.strip()
    if not s:
        raise InvalidSmiles("empty SMILES")
    check_smiles_length(s, max_length)
    bad = next((i for i, ch in enumerate(s) if ord(ch) > 127), None)
    if bad is not None:  # RDKit stops silently at the first non-ASCII character ('CCO\u00e9' -> CCO)
        raise InvalidSmiles(f"contains a non-ASCII character ({s[bad]!r}) at position {bad + 1}; SMILES are plain ASCII")
    if s.startswith(UNREADABLE_MOLFILE):  # an SD file's record (siggate.data.sdfile): '<..., at line N: why>'
        why = s[:-1].partition(": ")[2] or "its counts line, atom or bond block is malformed"
        raise InvalidSmiles(f"RDKit cannot read this record's molfile ({why}); fix or drop the record")
    if s.startswith(("InChI=", "AuxInfo=")):  # a spreadsheet's identifier column, not a SMILES one
        raise InvalidSmiles("an InChI, not a SMILES: give a column of SMILES (RDKit converts one: "
                            "Chem.MolToSmiles(Chem.MolFromInchi(text)), whose mobile hydrogens may come back as "
                            "another tautomer: an amide as its iminol)")
    space = next((i for i, ch in enumerate(s) if ch.isspace()), None)
    if space is not None and not s[space:].lstrip().startswith("|"):  # (a CXSMILES extension " |...|" is kept)
        raise InvalidSmiles(f"contains whitespace at position {space + 1}: RDKit would read {s[:space]!r} alone and "
                            "take the rest for a name; give one SMILES per field")

    # Full parse exactly like ogb.utils.smiles2graph (MolFromSmiles with sanitize=True
    # also removes explicit hydrogens and cleans stereo, which the features depend on).
    full = _Capture()
    with full:
        mol = Chem.MolFromSmiles(s)
    if mol is not None:
        return mol

    cap = _Capture()
    with cap:
        raw = Chem.MolFromSmiles(s, sanitize=False)
    if raw is None:
        if _NUMBER.fullmatch(s):  # (predict --coverage 0.8 0.9 CCO read 0.9 as a molecule; or a column of values)
            raise InvalidSmiles("a number, not a SMILES: a value given where molecules go (a flag takes one value: "
                                "--coverage 0.9), or a column of values read as SMILES")
        raise InvalidSmiles(_parse_error_reason(cap.lines))
    # RDKit's own message from the failed sanitization, else ask it what is wrong
    reason = "; ".join(full.lines) or _sanitize_reason(raw)
    if not allow_unsanitized:
        raise InvalidSmiles(reason)
    return _partial_sanitize(raw)


#: a plain decimal number (no SMILES is one: RDKit refuses a bare ring-closure digit)
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


# --------------------------------------------------------------------- featurizing


#: the OGB chirality column's entries that carry the CIP labels with ``chirality="cip"`` (those of
#: the clockwise and anticlockwise tags): R and S, and the pseudo-asymmetric r and s (a ring's cis
#: and trans: 1,4-disubstituted cyclohexanes); a stereocentre without a label takes "other" (3)
_CIP_ENTRY = {"R": 1, "S": 2, "r": 1, "s": 2}
_CHIRAL_OTHER = 3


def _cip_column(mol: Chem.Mol, tags: np.ndarray) -> np.ndarray:
    """The chirality column with ``chirality="cip"``: R and r 1, S and s 2, a tagged atom without
    a CIP label (an unsanitized molecule) 3, every other atom 0 (``tags``: the OGB column). The
    labels are found on a copy: RDKit's stereo perception rewrites the bonds' E/Z as cis/trans,
    which would change the bond features OGB reads."""
    out = np.where(tags != 0, _CHIRAL_OTHER, 0)
    if not out.any():
        return out
    try:
        centres = Chem.FindMolChiralCenters(Chem.Mol(mol), includeUnassigned=False, useLegacyImplementation=False)
    except Exception:  # RDKit cannot rank this molecule: every tagged atom is "other"
        return out
    for i, label in centres:
        if label in _CIP_ENTRY and tags[i] != 0:
            out[i] = _CIP_ENTRY[label]
    return out


def mol_to_graph(mol: Chem.Mol, chirality: str = "tag") -> Data:
    """OGB featurization of a molecule, identical to ``ogb.utils.smiles2graph``, with
    ``chirality="tag"``; ``"cip"`` writes each stereocentre's CIP label (R/r, S/s) in the chirality
    column instead of RDKit's tag (the bonds' features stay OGB's), which is relative to the neighbours' order in the SMILES as
    written (``C[C@H](N)C(=O)O`` and ``N[C@@H](C)C(=O)O``, one molecule, had two tags, one of them
    R-alanine's), so that every spelling of a molecule is one graph (:data:`~.base.ATOM_CHIRALITY`).

    Returns a ``Data`` with ``x`` ``[N, 9]``, ``edge_index`` ``[2, E]`` (both
    directions of each bond, in bond order) and ``edge_attr`` ``[E, 3]``, all int64.

    Raises:
        InvalidSmiles: "no atoms" for an empty molecule.
    """
    if mol is None:
        raise InvalidSmiles("no molecule")
    n = mol.GetNumAtoms()
    if n == 0:
        raise InvalidSmiles("no atoms")
    feats = np.array([atom_to_feature_vector(mol.GetAtomWithIdx(i)) for i in range(n)], dtype=np.int64).reshape(n, 9)
    if chirality == "cip":
        feats[:, 1] = _cip_column(mol, feats[:, 1])
    elif chirality != "tag":
        raise ValueError(f"chirality must be 'tag' or 'cip', got {chirality!r}")
    x = torch.from_numpy(feats)
    nb = mol.GetNumBonds()
    if nb > 0:
        pairs = np.empty((nb, 2), dtype=np.int64)
        feats = np.empty((nb, 3), dtype=np.int64)
        for k in range(nb):
            bond = mol.GetBondWithIdx(k)
            pairs[k, 0] = bond.GetBeginAtomIdx()
            pairs[k, 1] = bond.GetEndAtomIdx()
            feats[k] = bond_to_feature_vector(bond)
        # interleave (i, j), (j, i) per bond, as OGB does
        ei = np.stack([pairs, pairs[:, ::-1]], axis=1).reshape(-1, 2).T
        ea = np.repeat(feats, 2, axis=0)
        edge_index = torch.from_numpy(np.ascontiguousarray(ei))
        edge_attr = torch.from_numpy(np.ascontiguousarray(ea))
    else:
        edge_index = torch.empty((2, 0), dtype=torch.long)
        edge_attr = torch.empty((0, 3), dtype=torch.long)
    return Data(x=x, edge_index=edge_index, edge_attr=edge_attr, num_nodes=n)


def smiles_to_graph(smiles: str, allow_unsanitized: bool = False) -> Data:
    """``parse_smiles`` + ``mol_to_graph``; the result also carries ``data.smiles``."""
    data = mol_to_graph(parse_smiles(smiles, allow_unsanitized=allow_unsanitized))
    data.smiles = smiles.strip()
    return data


# ---------------------------------------------------------------------- properties

_sascorer = None


def _get_sascorer():
    global _sascorer
    if _sascorer is None:
        sa_dir = os.path.join(RDConfig.RDContribDir, "SA_Score")
        if sa_dir not in sys.path:
            sys.path.append(sa_dir)
        import sascorer  # type: ignore[import-not-found]

        if getattr(sascorer, "_fscores", None) is None:
            sascorer.readFragmentScores()
        _sascorer = sascorer
    return _sascorer


def sa_score(mol: Chem.Mol) -> float:
    """Synthetic accessibility score (Ertl & Schuffenhauer), 1 (easy) .. 10 (hard)."""
    with quiet_rdkit():
        return float(_get_sascorer().calculateScore(mol))


def _largest_ring_size(mol: Chem.Mol) -> int:
    rings = mol.GetRingInfo().AtomRings()
    return max((len(r) for r in rings), default=0)


def penalized_logp(mol: Chem.Mol) -> float:
    """Penalized logP = Crippen logP - SA score - max(largest ring size - 6, 0).

    Un-normalized (no JT-VAE mean/std constants).
    """
    with quiet_rdkit():
        logp = Descriptors.MolLogP(mol)
    cycle_penalty = max(_largest_ring_size(mol) - 6, 0)
    return float(logp - sa_score(mol) - cycle_penalty)


# -------------------------------------------------------------------------- splits


def _check_frac(frac: Sequence[float]) -> tuple[float, float, float]:
    if len(frac) != 3:
        raise ValueError(f"frac must have three entries (train, val, test), got {frac!r}")
    f = tuple(float(v) for v in frac)
    if any(v < 0 for v in f) or abs(sum(f) - 1.0) > 1e-6:
        raise ValueError(f"frac must be non-negative and sum to 1, got {frac!r}")
    return f  # type: ignore[return-value]


def murcko_scaffold(mol: Chem.Mol) -> str:
    """Bemis-Murcko scaffold SMILES without chirality ("" for acyclic molecules)."""
    with quiet_rdkit():
        return MurckoScaffold.MurckoScaffoldSmiles(mol=mol, includeChirality=False)


def _scaffold_of_smiles(smiles: str) -> str:
    try:
        mol = parse_smiles(smiles, allow_unsanitized=True)
        return murcko_scaffold(mol)
    except Exception:
        # an unparsable string is its own group; it can never share a scaffold
        return "\x00unparsable:" + str(smiles)


def split_by_groups(
    keys: Sequence[str],
    frac: Sequence[float] = (0.8, 0.1, 0.1),
    balanced: bool = False,
    seed: int = 0,
) -> dict[str, list[int]]:
    """Deterministic group split: indices with equal ``keys`` land in the same split.

    ``balanced=False`` (OGB / DeepChem "scaffold" order): groups are sorted by size
    (largest first), ties by their first index.  The rare groups, often singletons of
    unusual chemistry, then all end up in val and test.

    ``balanced=True`` (chemprop's "scaffold_balanced"): groups larger than half the
    smaller of the val and test sizes come first, sorted as above; the other groups
    follow in an order shuffled with ``seed``, so that val and test are drawn from the
    whole range of chemistry while no group spans two splits.

    Each group, in that order, goes to train if it fits under the train cutoff, else
    to val if it fits under the val cutoff, else to test.
    """
    f = _check_frac(frac)
    n = len(keys)
    groups: dict[str, list[int]] = defaultdict(list)
    for i, k in enumerate(keys):
        groups[k].append(i)
    train_cut, val_cut = f[0] * n, f[1] * n
    ordered = sorted(groups.values(), key=lambda g: (-len(g), g[0]))
    if balanced:
        big_limit = min(f[1] * n, f[2] * n) / 2
        big = [g for g in ordered if len(g) > big_limit]
        small = sorted((g for g in ordered if len(g) <= big_limit), key=lambda g: g[0])
        order = np.random.default_rng(seed).permutation(len(small))
        ordered = big + [small[j] for j in order]
    train: list[int] = []
    val: list[int] = []
    test: list[int] = []
    for g in ordered:
        if len(train) + len(g) <= train_cut + 1e-9:
            train.extend(g)
        elif len(val) + len(g) <= val_cut + 1e-9:
            val.extend(g)
        else:
            test.extend(g)
    return {"train": sorted(train), "val": sorted(val), "test": sorted(test)}




def split_indices(split: str, keys: Sequence[str], frac: Sequence[float] = (0.8, 0.1, 0.1),
                  seed: int = 0, molecules: Sequence[str] | None = None) -> dict[str, list[int]]:
    """The split named ``split`` (one of :data:`SPLITS`) of ``len(keys)`` items:
    ``"scaffold"`` and ``"scaffold_balanced"`` group by ``keys`` (:func:`split_by_groups`,
    plain or balanced order), ``"random"`` ignores them (:func:`random_split`). With
    ``molecules`` (each item's canonical SMILES), every item of one molecule goes into the split
    of its first one (:func:`molecules_together`), so that no molecule is in training and test."""
    if split == "random":
        idx = random_split(len(keys), frac, seed)
    elif split in ("scaffold", "scaffold_balanced"):
        idx = split_by_groups(keys, frac, balanced=split == "scaffold_balanced", seed=seed)
    else:
        raise ValueError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
    return idx if molecules is None else molecules_together(idx, molecules)


def molecules_together(idx: dict[str, list[int]], molecules: Sequence[str]) -> dict[str, list[int]]:
    """``idx`` with every row of one molecule (equal ``molecules``) moved into the split of its first
    row, so that a molecule written twice never has one row in training and one in test."""
    where = {j: name for name, rows in idx.items() for j in rows}
    home: dict[str, str] = {}
    out: dict[str, list[int]] = {name: [] for name in idx}
    for j in sorted(where):
        out[home.setdefault(molecules[j], where[j])].append(j)
    return out


def scaffold_split(smiles: list[str], frac: Sequence[float] = (0.8, 0.1, 0.1)) -> dict[str, list[int]]:
    """Deterministic Bemis-Murcko scaffold split (OGB / chemprop style).

    Returns ``{"train": [...], "val": [...], "test": [...]}`` of sorted indices
    into ``smiles``; no scaffold is shared between two splits.
    """
    return split_by_groups([_scaffold_of_smiles(s) for s in smiles], frac)


def random_split(n: int, frac: Sequence[float] = (0.8, 0.1, 0.1), seed: int = 0) -> dict[str, list[int]]:
    """Seeded random split of ``range(n)``; sizes ``floor(f*n)`` for train/val, rest test."""
    f = _check_frac(frac)
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    perm = np.random.default_rng(seed).permutation(n)
    n_train = int(math.floor(f[0] * n + 1e-9))
    n_val = int(math.floor(f[1] * n + 1e-9))
    return {
        "train": sorted(perm[:n_train].tolist()),
        "val": sorted(perm[n_train : n_train + n_val].tolist()),
        "test": sorted(perm[n_train + n_val :].tolist()),
    }
