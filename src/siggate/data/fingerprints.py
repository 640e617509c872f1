"""Count fingerprints of molecules (Morgan, feature Morgan, atom pairs, topological torsions,
RDKit subgraph paths), ECFP bit vectors,
which atoms set each bin, and the MinMax kernel between count fingerprints.

The one home for fingerprints in siggate (the readout's ``morgan_count`` features of
:mod:`siggate.data.molfeatures`, the kernel and tree members of :mod:`siggate.predictors`, the
applicability domain of :mod:`siggate.data.similarity`). All use RDKit's generator API
(``rdFingerprintGenerator``), so a fingerprint is a pure function of the molecule, its kind, the
radius (the Morgan kinds only) and the size:

* :func:`morgan_counts`: *count* Morgan fingerprints, each environment hashed and folded into
  ``size`` bins, a bin holding how many environments of the molecule fell into it. Dense
  ``float32 [n, size]`` (what a random forest reads) or a SciPy CSR matrix of ``int32`` counts
  (what the MinMax kernel reads: ~40 non-zero bins of 2,048 in a drug-like molecule).
* :func:`count_fingerprints`: the count fingerprints of several *kinds* (:data:`KINDS`: ``morgan``
  at a radius; ``fmorgan``, Morgan environments of the same radius over pharmacophoric atom
  features (donor, acceptor, aromatic, halogen, basic, acidic: FCFP) instead of atom identities;
  ``atompair``, RDKit's atom pairs at every topological distance; ``torsion``, its topological
  torsions of four atoms; ``path``, RDKit's fingerprint of the subgraphs of 1 to
  :data:`PATH_BONDS` bonds), each folded into ``size`` bins, side by side in one matrix of
  ``len(kinds) * size`` columns (kind ``k`` in columns ``k*size`` to ``(k+1)*size``). A kind is
  named in a *fingerprint* string, kinds joined by ``+`` (:func:`parse_kinds`):
  ``"morgan+atompair+torsion"``.
* :func:`ecfp_bits`: ECFP bit vectors (``uint8 [n, size]``, 1 where the count is positive), the
  features of MoleculeACE's published RF and SVM rows (radius 2 is ECFP4).
* :func:`minmax_kernel`: the MinMax (Tanimoto on counts) similarity between the rows of two count
  fingerprint matrices, ``Σ min / Σ max``, exact (the kernel members' kernel and the
  applicability domain's similarity, :mod:`siggate.data.similarity`); with ``parts=k`` the mean of
  the MinMax kernels of the ``k`` kinds side by side (each kind weighs the same, however many
  environments it counts: a molecule has about as many atom pairs as atoms squared).
* :func:`bit_atoms`: for one molecule, ``{bin: (environment, ...)}``, one environment per count,
  each the tuple of its atom indices (a Morgan environment's centre atom first, an atom pair's two
  atoms, a torsion's four; RDKit's ``AtomsPerBit``), so an explanation can spread a bin's
  contribution over the atoms that set it.

Molecules are RDKit ``Mol`` objects or SMILES strings. SMILES are parsed as the datasets parse them
(:func:`siggate.data.chem.parse_smiles` with partially sanitized molecules allowed); one that RDKit
cannot parse is the caller's problem, and :func:`to_mols` says which one and why.
RDKit and SciPy are imported inside the functions that use them.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..options import FINGERPRINT_KINDS, parse_fingerprint_kinds

__all__ = ["RADIUS", "SIZE", "KINDS", "parse_kinds", "to_mols", "morgan_counts", "count_fingerprints", "ecfp_bits",
           "bit_atoms", "minmax_kernel"]

#: the default radius (2: ECFP4 environments) and number of bins
RADIUS = 2
SIZE = 2048
#: molecules per block when building a sparse matrix (bounds the dense scratch array to 32 MiB at 2,048 bins)
_BLOCK = 4096

#: the kinds of count fingerprint (:func:`count_fingerprints`); the radius applies to the two Morgan kinds
KINDS = FINGERPRINT_KINDS
#: the kinds of a fingerprint string (its one home is siggate.options, where the config checks them)
parse_kinds = parse_fingerprint_kinds
_RADIUS_KINDS = ("morgan", "fmorgan")
#: the largest subgraph (in bonds) of the ``path`` kind
PATH_BONDS = 6

_GENERATORS: dict = {}


def _generator(radius: int, size: int, kind: str = "morgan"):
    """RDKit's generator of ``kind`` for ``(radius, size)`` (the radius is Morgan's), built once per process."""
    if int(radius) != radius or radius < 0:
        raise ValueError(f"Morgan radius must be an integer >= 0, got {radius!r}")
    if int(size) != size or size < 1:
        raise ValueError(f"fingerprint size must be an integer >= 1, got {size!r}")
    (kind,) = parse_kinds((kind,))
    key = (kind, int(radius) if kind in _RADIUS_KINDS else 0, int(size))
    if key not in _GENERATORS:
        from rdkit.Chem import rdFingerprintGenerator as gen

        _GENERATORS[key] = {
            "morgan": lambda: gen.GetMorganGenerator(radius=key[1], fpSize=key[2]),
            "fmorgan": lambda: gen.GetMorganGenerator(radius=key[1], fpSize=key[2],
                                                      atomInvariantsGenerator=gen.GetMorganFeatureAtomInvGen()),
            "atompair": lambda: gen.GetAtomPairGenerator(fpSize=key[2]),
            "torsion": lambda: gen.GetTopologicalTorsionGenerator(fpSize=key[2]),
            "path": lambda: gen.GetRDKitFPGenerator(maxPath=PATH_BONDS, fpSize=key[2]),
        }[kind]()
    return _GENERATORS[key]


def to_mols(mols_or_smiles: Sequence[Any]) -> list:
    """RDKit molecules of ``mols_or_smiles`` (``Mol`` objects pass through; SMILES are parsed).

    Raises:
        ValueError: a SMILES that RDKit cannot parse (its position, the SMILES and RDKit's reason),
            or an item that is neither a ``Mol`` nor a string.
    """
    from rdkit import Chem

    from .chem import InvalidSmiles, parse_smiles, quiet_rdkit

    out = []
    with quiet_rdkit():
        for i, item in enumerate(mols_or_smiles):
            if isinstance(item, Chem.Mol):
                out.append(item)
                continue
            if not isinstance(item, str):
                raise ValueError(f"fingerprints: item {i} is a {type(item).__name__}, not an RDKit Mol or a SMILES string")
            mol = Chem.MolFromSmiles(item.strip())  # the common case, fast
            if mol is None:
                try:
                    mol = parse_smiles(item, allow_unsanitized=True)
                except InvalidSmiles as exc:
                    raise ValueError(f"fingerprints: molecule {i} ({item!r}) is not a valid SMILES: {exc}; "
                                     "parse and drop invalid molecules before computing fingerprints") from None
            out.append(mol)
    return out


def morgan_counts(mols_or_smiles: Sequence[Any], radius: int = RADIUS, size: int = SIZE, sparse: bool = False):
    """Folded count Morgan fingerprints.

    Args:
        mols_or_smiles: ``n`` RDKit molecules or SMILES.
        radius: Morgan radius (2: ECFP4 environments).
        size: number of bins the environments are folded into.
        sparse: return a SciPy ``csr_matrix`` of ``int32`` counts (sorted indices) instead of a
            dense array.

    Returns:
        ``float32 [n, size]`` counts, or the CSR matrix of the same values.

    Raises:
        ValueError: an unparsable SMILES (:func:`to_mols`), a bad radius or size.
    """
    return count_fingerprints(mols_or_smiles, ("morgan",), radius, size, sparse)


def count_fingerprints(mols_or_smiles: Sequence[Any], kinds: str | Sequence[str] = ("morgan",), radius: int = RADIUS,
                       size: int = SIZE, sparse: bool = False):
    """Folded count fingerprints of one or more kinds, side by side (module docstring).

    Args:
        mols_or_smiles: ``n`` RDKit molecules or SMILES.
        kinds: a fingerprint string (``"morgan+atompair+torsion"``) or a sequence of :data:`KINDS`.
        radius: radius of the Morgan kinds (the other kinds have none).
        size: number of bins each kind is folded into.
        sparse: return a SciPy ``csr_matrix`` of ``int32`` counts (sorted indices).

    Returns:
        ``float32 [n, len(kinds) * size]`` counts, or the CSR matrix of the same values.

    Raises:
        ValueError: an unparsable SMILES (:func:`to_mols`), a bad kind, radius or size.
    """
    gens = [_generator(radius, size, kind) for kind in parse_kinds(kinds)]
    mols = to_mols(mols_or_smiles)
    width = size * len(gens)

    def fill(dense, part):
        for i, mol in enumerate(part):
            for k, gen in enumerate(gens):
                dense[i, k * size : (k + 1) * size] = gen.GetCountFingerprintAsNumPy(mol)
        return dense

    if not sparse:
        return fill(np.zeros((len(mols), width), dtype=np.float32), mols)
    import scipy.sparse as sp

    blocks = [sp.csr_matrix(fill(np.zeros((len(mols[lo : lo + _BLOCK]), width), dtype=np.int32), mols[lo : lo + _BLOCK]))
              for lo in range(0, len(mols), _BLOCK)]
    if not blocks:
        return sp.csr_matrix((0, width), dtype=np.int32)
    out = sp.vstack(blocks, format="csr", dtype=np.int32)
    out.sort_indices()
    return out


def ecfp_bits(mols_or_smiles: Sequence[Any], radius: int = RADIUS, size: int = SIZE) -> np.ndarray:
    """ECFP bit vectors, ``uint8 [n, size]`` (radius 2: ECFP4): 1 where a Morgan environment of the
    molecule folds into the bit. Equal to ``morgan_counts(...) > 0``.

    Raises:
        ValueError: an unparsable SMILES (:func:`to_mols`), a bad radius or size.
    """
    gen = _generator(radius, size)
    mols = to_mols(mols_or_smiles)
    out = np.zeros((len(mols), size), dtype=np.uint8)
    for i, mol in enumerate(mols):
        out[i] = gen.GetFingerprintAsNumPy(mol)
    return out


def bit_atoms(mol_or_smiles: Any, radius: int = RADIUS, size: int = SIZE,
              kinds: str | Sequence[str] = ("morgan",)) -> dict[int, tuple[tuple[int, ...], ...]]:
    """Which atoms set each bin of one molecule's count fingerprint (of ``kinds`` side by side, as
    :func:`count_fingerprints` lays them out).

    Returns:
        ``{bin: (environment, ...)}`` for every non-zero bin: one environment per count (so
        ``len(result[b]) == count_fingerprints([mol], kinds, radius, size)[0, b]``), each the tuple
        of the atom indices it covers: a Morgan (or feature Morgan) environment's centre first
        (radius 0: the centre alone), an atom pair's two atoms, a torsion's four, a path's atoms.

    Raises:
        ValueError: an unparsable SMILES (:func:`to_mols`), a bad kind, radius or size.
    """
    from rdkit.Chem import rdFingerprintGenerator

    (mol,) = to_mols([mol_or_smiles])
    out = {}
    for k, kind in enumerate(parse_kinds(kinds)):
        ao = rdFingerprintGenerator.AdditionalOutput()
        ao.AllocateAtomsPerBit()
        _generator(radius, size, kind).GetCountFingerprintAsNumPy(mol, additionalOutput=ao)
        out.update({k * size + int(b): tuple(tuple(int(a) for a in env) for env in envs)
                    for b, envs in sorted(ao.GetAtomsPerBit().items())})
    return out


def _unfold(x, kmax: int):
    """The unfolded binary CSR (``n`` rows, int64 column keys ``bin * kmax + level``) of CSR counts."""
    import scipy.sparse as sp

    x = sp.csr_matrix(x)
    counts = x.data.astype(np.int64)  # (checked by _check_counts)
    keep = counts > 0
    bins = x.indices.astype(np.int64)[keep]
    counts = counts[keep]
    rows = np.repeat(np.arange(x.shape[0], dtype=np.int64), np.diff(x.indptr))[keep]
    total = int(counts.sum())
    start = np.cumsum(counts) - counts
    level = np.arange(total, dtype=np.int64) - np.repeat(start, counts)
    keys = np.repeat(bins, counts) * kmax + level
    return np.repeat(rows, counts), keys


def _check_counts(x) -> None:
    """Refuse counts the kernel cannot count: not finite, negative, or not whole numbers below
    2^31 (1.5 was read as 1, K 1.0 where Σmin/Σmax is 0.857; 1e20 wrapped to a negative count)."""
    data = x.data
    if not data.size:
        return
    if not np.all(np.isfinite(data)):
        raise ValueError("MinMax kernel: fingerprint counts must be finite numbers")
    if data.min() < 0:
        raise ValueError("MinMax kernel: fingerprint counts must be >= 0")
    if not np.array_equal(data, np.floor(data)) or data.max() >= 2**31:
        raise ValueError("MinMax kernel: fingerprint counts must be whole numbers below 2^31 (this kernel counts "
                         "them as bits)")


def minmax_kernel(a, b, block: int = 1024, parts: int = 1) -> np.ndarray:
    """MinMax kernel (Tanimoto on counts) between the rows of two count-fingerprint matrices:
    ``K(a, b) = Σ_i min(a_i, b_i) / Σ_i max(a_i, b_i)``, 1 where both are all-zero. With
    ``parts=k``, the columns are ``k`` fingerprints side by side (:func:`count_fingerprints`) and
    the kernel is the mean of their ``k`` MinMax kernels (a mean of kernels is a kernel).

    Computed through the *unfolding* of counts into bits: a count ``c`` in bin ``i`` becomes the
    bits ``(i, 1), ..., (i, c)``, so ``Σ min(a_i, b_i)`` is the dot product of the unfolded bit
    vectors and ``Σ max = Σa + Σb − Σmin``. The dot products are one sparse-times-dense product per
    block of columns (cost ∝ the non-zeros of ``a`` times the columns, not ``size``); every count
    and partial sum is an integer, so ``Σmin`` is exact in any summation order and the same values
    come out on every machine. Memory: the ``[na, nb]`` result plus a dense scratch block of at
    most ``block`` columns by the distinct unfolded bits of that block.

    Args:
        a: ``[na, size]`` non-negative integer counts (SciPy sparse or dense).
        b: ``[nb, size]`` the same for the other side.
        block: columns (rows of ``b``) computed at once; bounds the scratch memory.
        parts: how many fingerprints of equal width lie side by side in the columns.

    Returns:
        ``float64 [na, nb]`` with values in ``[0, 1]``.
    """
    import scipy.sparse as sp

    a, b = sp.csr_matrix(a), sp.csr_matrix(b)
    _check_counts(a)
    _check_counts(b)
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"MinMax kernel: fingerprints of {a.shape[1]} and {b.shape[1]} bins cannot be compared")
    if parts != 1:
        if int(parts) != parts or parts < 1 or a.shape[1] % parts:
            raise ValueError(f"MinMax kernel: {a.shape[1]} columns do not split into {parts!r} equal fingerprints")
        w = a.shape[1] // int(parts)
        out = minmax_kernel(a[:, :w], b[:, :w], block)
        for k in range(1, int(parts)):
            out += minmax_kernel(a[:, k * w : (k + 1) * w], b[:, k * w : (k + 1) * w], block)
        return out / int(parts)
    na, nb = a.shape[0], b.shape[0]
    out = np.empty((na, nb), dtype=np.float64)
    if na == 0 or nb == 0:
        return out
    kmax = int(max(a.data.max(initial=0), b.data.max(initial=0), 1))
    a_rows, a_keys = _unfold(a, kmax)
    b_rows, b_keys = _unfold(b, kmax)
    sum_a = np.bincount(a_rows, minlength=na).astype(np.float64)
    sum_b = np.bincount(b_rows, minlength=nb).astype(np.float64)
    b_start = np.searchsorted(b_rows, np.arange(0, nb + 1))
    for lo in range(0, nb, block):
        hi = min(lo + block, nb)
        rows, keys = b_rows[b_start[lo] : b_start[hi]] - lo, b_keys[b_start[lo] : b_start[hi]]
        cols, pos = np.unique(keys, return_inverse=True)
        dense = np.zeros((cols.size, hi - lo), dtype=np.float32)  # unfolded bits of this block, [bits, columns]
        dense[pos, rows] = 1.0
        where = np.searchsorted(cols, a_keys)
        hit = where < cols.size
        hit[hit] = cols[where[hit]] == a_keys[hit]
        a_c = sp.csr_matrix((np.ones(int(hit.sum()), dtype=np.float32), (a_rows[hit], where[hit])),
                            shape=(na, cols.size))
        mins = np.asarray(a_c @ dense, dtype=np.float64)  # integer sums below 2^24: exact in float32
        maxs = sum_a[:, None] + sum_b[None, lo:hi] - mins
        with np.errstate(invalid="ignore", divide="ignore"):
            out[:, lo:hi] = np.where(maxs > 0, mins / np.where(maxs > 0, maxs, 1.0), 1.0)
    return out
