"""Morgan fingerprints of molecules: folded counts, ECFP bit vectors, and which atoms set each bit.

The one home for Morgan fingerprints in siggate (the readout's ``morgan_count`` features of
:mod:`siggate.data.molfeatures`, the kernel and tree members of :mod:`siggate.predictors`). All use
RDKit's generator API (``rdFingerprintGenerator.GetMorganGenerator(radius, fpSize)``), so a
fingerprint is a pure function of the molecule, the radius and the size:

* :func:`morgan_counts`: *count* Morgan fingerprints, each environment hashed and folded into
  ``size`` bins, a bin holding how many environments of the molecule fell into it. Dense
  ``float32 [n, size]`` (what a random forest reads) or a SciPy CSR matrix of ``int32`` counts
  (what the MinMax kernel reads: ~40 non-zero bins of 2,048 in a drug-like molecule).
* :func:`ecfp_bits`: ECFP bit vectors (``uint8 [n, size]``, 1 where the count is positive), the
  features of MoleculeACE's published RF and SVM rows (radius 2 is ECFP4).
* :func:`bit_atoms`: for one molecule, ``{bit: (environment, ...)}``, one environment per count,
  each the tuple of its atom indices with the centre atom first (RDKit's ``AtomsPerBit``), so an
  explanation can spread a bit's contribution over the atoms that set it.

Molecules are RDKit ``Mol`` objects or SMILES strings. SMILES are parsed as the datasets parse them
(:func:`siggate.data.chem.parse_smiles` with partially sanitized molecules allowed); one that RDKit
cannot parse is the caller's problem, and :func:`to_mols` says which one and why.
RDKit and SciPy are imported inside the functions that use them.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

__all__ = ["RADIUS", "SIZE", "to_mols", "morgan_counts", "ecfp_bits", "bit_atoms"]

#: the default radius (2: ECFP4 environments) and number of bins
RADIUS = 2
SIZE = 2048
#: molecules per block when building a sparse matrix (bounds the dense scratch array to 32 MiB at 2,048 bins)
_BLOCK = 4096

_GENERATORS: dict = {}


def _generator(radius: int, size: int):
    """RDKit's Morgan generator for ``(radius, size)``, built once per process."""
    if int(radius) != radius or radius < 0:
        raise ValueError(f"Morgan radius must be an integer >= 0, got {radius!r}")
    if int(size) != size or size < 1:
        raise ValueError(f"fingerprint size must be an integer >= 1, got {size!r}")
    key = (int(radius), int(size))
    if key not in _GENERATORS:
        from rdkit.Chem import rdFingerprintGenerator

        _GENERATORS[key] = rdFingerprintGenerator.GetMorganGenerator(radius=key[0], fpSize=key[1])
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
    gen = _generator(radius, size)
    mols = to_mols(mols_or_smiles)
    if not sparse:
        out = np.zeros((len(mols), size), dtype=np.float32)
        for i, mol in enumerate(mols):
            out[i] = gen.GetCountFingerprintAsNumPy(mol)
        return out
    import scipy.sparse as sp

    blocks = []
    for start in range(0, len(mols), _BLOCK):
        part = mols[start : start + _BLOCK]
        dense = np.zeros((len(part), size), dtype=np.int32)
        for i, mol in enumerate(part):
            dense[i] = gen.GetCountFingerprintAsNumPy(mol)
        blocks.append(sp.csr_matrix(dense))
    if not blocks:
        return sp.csr_matrix((0, size), dtype=np.int32)
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


def bit_atoms(mol_or_smiles: Any, radius: int = RADIUS, size: int = SIZE) -> dict[int, tuple[tuple[int, ...], ...]]:
    """Which atoms set each bin of one molecule's count fingerprint.

    Returns:
        ``{bit: (environment, ...)}`` for every non-zero bin: one environment per count (so
        ``len(result[b]) == morgan_counts([mol], radius, size)[0, b]``), each the tuple of the atom
        indices it covers, centre atom first (radius 0: the centre alone).

    Raises:
        ValueError: an unparsable SMILES (:func:`to_mols`), a bad radius or size.
    """
    from rdkit.Chem import rdFingerprintGenerator

    gen = _generator(radius, size)
    (mol,) = to_mols([mol_or_smiles])
    ao = rdFingerprintGenerator.AdditionalOutput()
    ao.AllocateAtomsPerBit()
    gen.GetCountFingerprintAsNumPy(mol, additionalOutput=ao)
    return {int(b): tuple(tuple(int(a) for a in env) for env in envs) for b, envs in sorted(ao.GetAtomsPerBit().items())}
