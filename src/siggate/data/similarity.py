"""Applicability domain: how similar a molecule is to the nearest molecule a model was trained
on, and whether that is too far to trust the prediction.

Similarity is the Tanimoto similarity of Morgan *count* fingerprints (radius 2, folded to 2048
bits; RDKit's ``BulkTanimotoSimilarity`` on count vectors: ``sum min(a, b) / sum max(a, b)``,
which equals the bit Tanimoto on 0/1 vectors). Counts, not bits: a bit fingerprint does not see
size. A 900-carbon alkane sets nearly the same few bits as hexane (bit Tanimoto above 0.85) but
has 150 times its counts (count Tanimoto below 0.01; ``tests/test_run_record.py`` pins both),
and it is exactly the kind of molecule a model trained on drug-sized molecules extrapolates
wildly on.

:class:`Domain` is fitted at training time: the training molecules' fingerprints (stored as
three integer arrays, :meth:`Domain.save`, read back with ``allow_pickle=False``) and a
threshold: the :data:`DOMAIN_PERCENTILE`-th percentile of the validation molecules'
nearest-training similarities. About 95% of molecules as novel as the validation split are
inside; a molecule below it is more novel than nearly all of them. Because the default CSV
split is by scaffold, the validation molecules are already out-of-scaffold, so the threshold
flags only molecules stranger than a new scaffold.

The fingerprint itself is one function, :func:`count_fingerprints` (the fingerprint members'
featurization can take its place).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from ..files import atomic_write, atomic_write_bytes

#: Morgan radius and folded length of the domain's fingerprints
RADIUS, N_BITS = 2, 2048
#: the percentile of the validation molecules' nearest-training similarity taken as the threshold
DOMAIN_PERCENTILE = 5.0
#: files of a run folder: the record (JSON) and the training fingerprints (arrays)
DOMAIN_FILE, FINGERPRINTS_FILE = "domain.json", "domain_fingerprints.npz"
DOMAIN_FORMAT = 1


class DomainError(ValueError):
    """A stored domain that cannot be read."""


def count_fingerprints(smiles: Sequence[str], radius: int = RADIUS, n_bits: int = N_BITS) -> list:
    """Morgan count fingerprints (RDKit ``UIntSparseIntVect`` of ``n_bits``) of ``smiles``;
    a SMILES RDKit cannot parse gets an empty fingerprint (similarity 0 to everything)."""
    from rdkit import Chem, DataStructs
    from rdkit.Chem import rdFingerprintGenerator

    from .chem import quiet_rdkit

    gen = rdFingerprintGenerator.GetMorganGenerator(radius=radius, fpSize=n_bits)
    out = []
    with quiet_rdkit():
        for s in smiles:
            mol = Chem.MolFromSmiles(str(s))
            out.append(gen.GetCountFingerprint(mol) if mol is not None else DataStructs.UIntSparseIntVect(n_bits))
    return out


def pack(fps: list) -> dict[str, np.ndarray]:
    """Count fingerprints as arrays: ``bits`` and ``counts`` of every fingerprint's set bits, one
    after the other, and ``offsets [n + 1]`` (fingerprint ``i`` is ``offsets[i]:offsets[i+1]``)."""
    bits, counts, offsets = [], [], [0]
    for fp in fps:
        items = sorted(fp.GetNonzeroElements().items())
        bits += [b for b, _ in items]
        counts += [c for _, c in items]
        offsets.append(len(bits))
    return {"bits": np.asarray(bits, dtype=np.int32), "counts": np.asarray(counts, dtype=np.int32),
            "offsets": np.asarray(offsets, dtype=np.int64)}


def unpack(arrays: dict, n_bits: int) -> list:
    """The fingerprints :func:`pack` stored."""
    from rdkit import DataStructs

    bits, counts, offsets = arrays["bits"], arrays["counts"], arrays["offsets"]
    out = []
    for i in range(len(offsets) - 1):
        fp = DataStructs.UIntSparseIntVect(n_bits)
        for b, c in zip(bits[offsets[i]:offsets[i + 1]].tolist(), counts[offsets[i]:offsets[i + 1]].tolist()):
            fp[b] = c
        out.append(fp)
    return out


def nearest_similarity(query: list, reference: list) -> np.ndarray:
    """``[len(query)]``: each query fingerprint's largest Tanimoto similarity to ``reference``
    (0 when ``reference`` is empty)."""
    from rdkit import DataStructs

    if not reference:
        return np.zeros(len(query))
    return np.asarray([max(DataStructs.BulkTanimotoSimilarity(fp, reference)) for fp in query], dtype=np.float64)


@dataclass
class Domain:
    """The training molecules' fingerprints and the similarity below which a molecule is outside
    the domain (see the module docstring).

    Attributes:
        reference: the training molecules' count fingerprints.
        threshold: nearest-training similarity below which a molecule is outside.
        record: what :meth:`fit` measured (``percentile``, the validation similarities' quantiles).
    """

    reference: list
    threshold: float
    radius: int = RADIUS
    n_bits: int = N_BITS
    record: dict | None = None

    @classmethod
    def fit(cls, train_smiles: Sequence[str], val_smiles: Sequence[str], percentile: float = DOMAIN_PERCENTILE,
            radius: int = RADIUS, n_bits: int = N_BITS) -> "Domain":
        """The domain of ``train_smiles``, its threshold the ``percentile``-th percentile of
        ``val_smiles``' nearest-training similarities."""
        reference = count_fingerprints(train_smiles, radius, n_bits)
        val = nearest_similarity(count_fingerprints(val_smiles, radius, n_bits), reference)
        threshold = float(np.percentile(val, percentile)) if len(val) else 0.0
        record = {"percentile": float(percentile), "n_train": len(reference), "n_val": int(len(val)),
                  "val_similarity": {f"p{p:g}": float(np.percentile(val, p)) if len(val) else None
                                     for p in (1, 5, 25, 50)}}
        return cls(reference, threshold, radius, n_bits, record)

    def similarity(self, smiles: Sequence[str]) -> np.ndarray:
        """``[len(smiles)]`` nearest-training similarities."""
        return nearest_similarity(count_fingerprints(smiles, self.radius, self.n_bits), self.reference)

    def inside(self, similarity) -> np.ndarray:
        """Whether each similarity is at or above the threshold."""
        return np.asarray(similarity) >= self.threshold

    def to_dict(self) -> dict:
        return {"format": DOMAIN_FORMAT, "fingerprint": "morgan-count", "radius": self.radius, "n_bits": self.n_bits,
                "similarity": "tanimoto (sum min / sum max of counts)", "threshold": self.threshold,
                **(self.record or {})}

    def save(self, folder: str | Path) -> None:
        """``folder/domain.json`` and ``folder/domain_fingerprints.npz`` (integer arrays only)."""
        folder = Path(folder)
        arrays = pack(self.reference)
        atomic_write(folder / FINGERPRINTS_FILE, lambda fh: np.savez_compressed(fh, **arrays))
        atomic_write_bytes(folder / DOMAIN_FILE, json.dumps(self.to_dict(), indent=2).encode())

    @classmethod
    def load(cls, folder: str | Path) -> "Domain | None":
        """The domain saved in ``folder``, or ``None`` when it holds none.

        Raises:
            DomainError: files that cannot be read (corrupt, newer, or holding pickled objects).
        """
        folder = Path(folder)
        if not (folder / DOMAIN_FILE).is_file():
            return None
        try:
            doc = json.loads((folder / DOMAIN_FILE).read_text())
            if int(doc["format"]) > DOMAIN_FORMAT:
                raise DomainError(f"{folder / DOMAIN_FILE}: written by a newer siggate; upgrade siggate")
            with np.load(folder / FINGERPRINTS_FILE, allow_pickle=False) as z:
                arrays = {k: z[k] for k in ("bits", "counts", "offsets")}
            n_bits, radius = int(doc["n_bits"]), int(doc["radius"])
            record = {k: v for k, v in doc.items() if k not in ("format", "radius", "n_bits", "threshold")}
            return cls(unpack(arrays, n_bits), float(doc["threshold"]), radius, n_bits, record)
        except DomainError:
            raise
        except (OSError, ValueError, KeyError, TypeError, EOFError) as exc:
            raise DomainError(f"{folder}: cannot read the applicability domain ({type(exc).__name__}: {exc}); "
                              "retrain the run, or delete domain.json to predict without it") from None
