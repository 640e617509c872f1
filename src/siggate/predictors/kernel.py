"""The MinMax kernel on count fingerprints, and Nyström features for sets too large for a dense kernel.

**MinMax** (Tanimoto on counts; Ralaivola et al., Neural Networks 2005): for count vectors ``a, b``,

    K(a, b) = Σ_i min(a_i, b_i) / Σ_i max(a_i, b_i),      K = 1 where both are all-zero.

Computed here through the *unfolding* of counts into bits: a count ``c`` in bin ``i`` becomes the
bits ``(i, 1), ..., (i, c)``, so ``Σ min(a_i, b_i)`` is the dot product of the unfolded bit vectors
and ``Σ max = Σa + Σb − Σmin``. The dot products are one sparse-times-dense product per block of
columns (cost ∝ the non-zeros of ``a`` times the columns, not ``size``); every count and partial
sum is an integer, so ``Σmin`` is exact in any summation order and :func:`minmax_kernel` returns
the same values on every machine. The unfolded bits are binary, so MinMax is the Tanimoto kernel
on them and positive semi-definite (Gower 1971; Ralaivola et al. 2005).

**Nyström** (Williams and Seeger, NIPS 2001): with ``m`` landmark rows, ``K ≈ K_nm K_mm⁺ K_mn``;
:func:`nystrom_projection` gives ``W = U_r diag(s_r)^-1/2`` from the eigenpairs of ``K_mm`` above a
relative cut-off, so that ``Φ = K_nm W`` are features whose inner products are that approximation.
With every training row a landmark, ``ΦΦᵀ = K`` on the training rows: the exact kernel map.

Memory: :func:`minmax_kernel` holds the ``[na, nb]`` result plus a dense scratch block of at most
``block`` columns by the distinct unfolded bits of that block.
"""

from __future__ import annotations

import numpy as np

__all__ = ["minmax_kernel", "nystrom_projection"]


def _unfold(x, kmax: int):
    """The unfolded binary CSR (``n`` rows, int64 column keys ``bin * kmax + level``) of CSR counts."""
    import scipy.sparse as sp

    x = sp.csr_matrix(x)
    counts = x.data.astype(np.int64)
    if counts.size and counts.min() < 0:
        raise ValueError("MinMax kernel: fingerprint counts must be >= 0")
    keep = counts > 0
    bins = x.indices.astype(np.int64)[keep]
    counts = counts[keep]
    rows = np.repeat(np.arange(x.shape[0], dtype=np.int64), np.diff(x.indptr))[keep]
    total = int(counts.sum())
    start = np.cumsum(counts) - counts
    level = np.arange(total, dtype=np.int64) - np.repeat(start, counts)
    keys = np.repeat(bins, counts) * kmax + level
    return np.repeat(rows, counts), keys


def minmax_kernel(a, b, block: int = 1024) -> np.ndarray:
    """MinMax kernel between the rows of two count-fingerprint matrices.

    Args:
        a: ``[na, size]`` non-negative integer counts (SciPy sparse or dense).
        b: ``[nb, size]`` the same for the other side.
        block: columns (rows of ``b``) computed at once; bounds the scratch memory.

    Returns:
        ``float64 [na, nb]`` with values in ``[0, 1]`` (module docstring).
    """
    import scipy.sparse as sp

    a, b = sp.csr_matrix(a), sp.csr_matrix(b)
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"MinMax kernel: fingerprints of {a.shape[1]} and {b.shape[1]} bins cannot be compared")
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


def nystrom_projection(k_mm: np.ndarray, rtol: float = 1e-10) -> np.ndarray:
    """``W [m, r]`` with ``W Wᵀ = K_mm⁺`` restricted to eigenvalues above ``rtol`` times the largest
    (``r`` of them), so that ``Φ = K_nm W`` are Nyström features (module docstring).

    Args:
        k_mm: ``[m, m]`` kernel among the landmarks (symmetric positive semi-definite).
        rtol: relative eigenvalue cut-off; smaller eigenvalues (rounding noise) are dropped.
    """
    k = 0.5 * (np.asarray(k_mm, dtype=np.float64) + np.asarray(k_mm, dtype=np.float64).T)
    s, u = np.linalg.eigh(k)
    keep = s > rtol * max(float(s.max(initial=0.0)), 0.0)
    if not keep.any():
        raise ValueError("Nyström: the landmarks' kernel has no positive eigenvalue")
    return u[:, keep] / np.sqrt(s[keep])[None, :]
