"""Applicability domain: how similar a molecule is to the nearest molecule a model was trained
on, and whether that is too far to trust the prediction.

Similarity is the Tanimoto similarity of Morgan *count* fingerprints (radius 2, folded to 2048
bins): ``sum min(a, b) / sum max(a, b)``, which equals the bit Tanimoto on 0/1 vectors. Both the
fingerprints (:func:`siggate.data.fingerprints.morgan_counts`) and the similarity
(:func:`siggate.data.fingerprints.minmax_kernel`, the kernel members' MinMax kernel) are those of
:mod:`siggate.data.fingerprints`. Counts, not bits: a bit fingerprint does not see size. A
900-carbon alkane sets nearly the same few bits as hexane (bit Tanimoto above 0.85) but has 150
times its counts (count Tanimoto below 0.01; ``tests/test_run_record.py`` pins both), and it is
exactly the kind of molecule a model trained on drug-sized molecules extrapolates wildly on.

:class:`Domain` is fitted at training time: the training molecules' fingerprints (stored as
three integer arrays, :meth:`Domain.save`, read back with ``allow_pickle=False``) and a
threshold: the :data:`DOMAIN_PERCENTILE`-th percentile of the validation molecules'
nearest-training similarities. About 95% of molecules as novel as the validation split are
inside; a molecule below it is more novel than nearly all of them. Because the default CSV
split is by scaffold, the validation molecules are already out-of-scaffold, so the threshold
flags only molecules stranger than a new scaffold.
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from ..files import atomic_write, atomic_write_bytes, read_json
from .fingerprints import minmax_kernel, morgan_counts, to_mols

#: Morgan radius and folded length of the domain's fingerprints
RADIUS, N_BITS = 2, 2048
#: the percentile of the validation molecules' nearest-training similarity taken as the threshold
DOMAIN_PERCENTILE = 5.0
#: the fewest validation molecules whose :data:`DOMAIN_PERCENTILE`-th percentile lies between two
#: of them rather than at the least similar one (``100 / percentile``)
DOMAIN_MIN_VAL = int(np.ceil(100 / DOMAIN_PERCENTILE))
#: files of a run folder: the record (JSON) and the training fingerprints (arrays)
DOMAIN_FILE, FINGERPRINTS_FILE = "domain.json", "domain_fingerprints.npz"
DOMAIN_FORMAT = 1
#: query molecules compared with the training set at once (bounds the ``[rows, n_train]`` similarities),
#: fewer where the training set is so large that ``[256, n_train]`` would pass ``_SIMILARITIES_AT_ONCE``
_QUERY_BLOCK = 256
_SIMILARITIES_AT_ONCE = 16_000_000  # 128 MB of float64


class DomainError(ValueError):
    """A stored domain that cannot be read."""


#: molecules parsed at once by :func:`domain_fingerprints` (an RDKit molecule is tens of KB: a
#: million of them held at once ran a pretraining run out of memory after its last epoch)
_FINGERPRINT_CHUNK = 10_000


def domain_fingerprints(smiles: Sequence[str], radius: int = RADIUS, n_bits: int = N_BITS):
    """Morgan count fingerprints of ``smiles`` (:func:`~siggate.data.fingerprints.morgan_counts`,
    a CSR matrix ``[n, n_bits]`` of int32 counts), :data:`_FINGERPRINT_CHUNK` molecules at a time;
    a SMILES RDKit cannot parse gets an empty row (similarity 0 to every molecule)."""
    import scipy.sparse as sp

    smiles = list(smiles)
    blocks = []
    for lo in range(0, len(smiles), _FINGERPRINT_CHUNK):
        chunk, mols, at = smiles[lo:lo + _FINGERPRINT_CHUNK], [], []
        for i, s in enumerate(chunk):
            try:
                mols.append(to_mols([str(s)])[0])
                at.append(i)
            except ValueError:
                continue
        fps = morgan_counts(mols, radius, n_bits, sparse=True)
        if len(at) != len(chunk):
            place = sp.csr_matrix((np.ones(len(at), dtype=np.int32), (np.asarray(at, dtype=np.int64),
                                                                       np.arange(len(at)))), shape=(len(chunk), len(at)))
            fps = sp.csr_matrix(place @ fps, dtype=np.int32)
        blocks.append(fps)
    if not blocks:
        return sp.csr_matrix((0, int(n_bits)), dtype=np.int32)
    return blocks[0] if len(blocks) == 1 else sp.csr_matrix(sp.vstack(blocks, format="csr"), dtype=np.int32)


def pack(fps) -> dict[str, np.ndarray]:
    """Count fingerprints (CSR) as arrays: ``bits`` and ``counts`` of every fingerprint's set bins,
    one after the other, and ``offsets [n + 1]`` (fingerprint ``i`` is ``offsets[i]:offsets[i+1]``)."""
    fps.sort_indices()
    return {"bits": np.asarray(fps.indices, dtype=np.int32), "counts": np.asarray(fps.data, dtype=np.int32),
            "offsets": np.asarray(fps.indptr, dtype=np.int64)}


def unpack(arrays: dict, n_bits: int):
    """The fingerprints :func:`pack` stored, checked for shape and bounds.

    Raises:
        ValueError: arrays that do not describe count fingerprints of ``n_bits`` bins."""
    import scipy.sparse as sp

    bits, counts, offsets = (np.asarray(arrays[k]) for k in ("bits", "counts", "offsets"))
    ok = (bits.ndim == counts.ndim == offsets.ndim == 1 and offsets.size >= 1 and offsets[0] == 0
          and offsets[-1] == bits.size == counts.size and bool(np.all(np.diff(offsets) >= 0))
          and (bits.size == 0 or (bits.min() >= 0 and bits.max() < n_bits and counts.min() >= 0)))
    if not ok:
        raise ValueError("the stored fingerprints are inconsistent (bits/counts/offsets)")
    return sp.csr_matrix((counts.astype(np.int32), bits.astype(np.int64), offsets.astype(np.int64)),
                         shape=(offsets.size - 1, int(n_bits)))


def nearest_similarity(query, reference) -> np.ndarray:
    """``[len(query)]``: each query fingerprint's largest count Tanimoto similarity to the rows of
    ``reference`` (CSR count fingerprints; 0 when ``reference`` has none)."""
    n = query.shape[0]
    if reference.shape[0] == 0:
        return np.zeros(n)
    out = np.zeros(n, dtype=np.float64)
    # [_QUERY_BLOCK, chunk] similarities at once: a large training set is taken a chunk of rows at a
    # time (each query block still passes over it once, as minmax_kernel would in one call)
    chunk = max(1, _SIMILARITIES_AT_ONCE // _QUERY_BLOCK)
    for lo in range(0, n, _QUERY_BLOCK):
        hi = min(lo + _QUERY_BLOCK, n)
        for r in range(0, reference.shape[0], chunk):
            np.maximum(out[lo:hi], minmax_kernel(query[lo:hi], reference[r:r + chunk]).max(axis=1), out=out[lo:hi])
    empty = np.diff(query.indptr) == 0  # an unparsable molecule: similarity 0 (the kernel says 1 to an empty row)
    out[empty] = 0.0
    return out


@dataclass
class Domain:
    """The training molecules' fingerprints and the similarity below which a molecule is outside
    the domain (see the module docstring).

    Attributes:
        reference: the training molecules' count fingerprints (CSR ``[n_train, n_bits]``).
        threshold: nearest-training similarity below which a molecule is outside.
        record: what :meth:`fit` measured (``percentile``, the validation similarities' quantiles).
        val_nearest: after :meth:`fit`, the validation molecules' nearest-training
            similarities (not saved).
    """

    reference: object
    threshold: float
    radius: int = RADIUS
    n_bits: int = N_BITS
    record: dict | None = None
    val_nearest: np.ndarray | None = field(default=None, repr=False, compare=False)

    @classmethod
    def fit(cls, train_smiles: Sequence[str], val_smiles: Sequence[str], percentile: float = DOMAIN_PERCENTILE,
            radius: int = RADIUS, n_bits: int = N_BITS) -> "Domain":
        """The domain of ``train_smiles``, its threshold the ``percentile``-th percentile of
        ``val_smiles``' nearest-training similarities."""
        reference = domain_fingerprints(train_smiles, radius, n_bits)
        val = nearest_similarity(domain_fingerprints(val_smiles, radius, n_bits), reference)
        threshold = float(np.percentile(val, percentile)) if len(val) else 0.0
        record = {"percentile": float(percentile), "n_train": int(reference.shape[0]), "n_val": int(len(val)),
                  "val_similarity": {f"p{p:g}": float(np.percentile(val, p)) if len(val) else None
                                     for p in (1, 5, 25, 50)}}
        return cls(reference, threshold, radius, n_bits, record, val)

    def similarity(self, smiles: Sequence[str]) -> np.ndarray:
        """``[len(smiles)]`` nearest-training similarities."""
        return nearest_similarity(domain_fingerprints(smiles, self.radius, self.n_bits), self.reference)

    def graph_similarity(self, graphs) -> np.ndarray:
        """:meth:`similarity` of graphs by their ``smiles`` (the SMILES as read: a salt's parent)."""
        return self.similarity([str(getattr(g, "smiles", "")) for g in graphs])

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
    def load(cls, folder: str | Path, required: bool = False) -> "Domain | None":
        """The domain saved in ``folder``, or ``None`` when it holds none; ``required``: the
        caller cannot do without it (the refusal then does not offer to delete it).

        Raises:
            DomainError: files that cannot be read (corrupt, newer, or holding pickled objects).
        """
        folder = Path(folder)
        if not (folder / DOMAIN_FILE).is_file():
            return None
        try:
            doc = read_json(folder / DOMAIN_FILE)
            if int(doc["format"]) > DOMAIN_FORMAT:
                raise DomainError(f"{folder / DOMAIN_FILE}: written by a newer siggate; upgrade siggate")
            with np.load(folder / FINGERPRINTS_FILE, allow_pickle=False) as z:
                arrays = {k: z[k] for k in ("bits", "counts", "offsets")}
            n_bits, radius = int(doc["n_bits"]), int(doc["radius"])
            if n_bits < 1 or radius < 0:
                raise ValueError(f"n_bits {n_bits} and radius {radius}: a fingerprint has >= 1 bits and radius >= 0")
            record = {k: v for k, v in doc.items() if k not in ("format", "radius", "n_bits", "threshold")}
            return cls(unpack(arrays, n_bits), float(doc["threshold"]), radius, n_bits, record)
        except DomainError:
            raise
        except (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile) as exc:
            remedy = "" if required else ", or delete domain.json to predict without it"
            if isinstance(exc, ValueError) and "allow_pickle" in str(exc):  # (NumPy's advice: load it unsafely)
                with open(folder / FINGERPRINTS_FILE, "rb") as fh:  # (NumPy takes any file not its own for a pickle)
                    pickled = "Object arrays" in str(exc) or fh.read(1) == b"\x80"
                if pickled:
                    raise DomainError(f"{folder / FINGERPRINTS_FILE}: refused: it holds pickled Python objects, which "
                                      f"siggate never writes (nothing in it was run); retrain the run{remedy}") from None
                exc = ValueError(f"{FINGERPRINTS_FILE} is no NumPy archive")
            raise DomainError(f"{folder}: cannot read the applicability domain ({type(exc).__name__}: {exc}); "
                              f"retrain the run{remedy}") from None
