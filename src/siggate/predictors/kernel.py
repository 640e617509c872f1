"""The MinMax kernel on count fingerprints, and Nyström features for sets too large for a dense kernel.

**MinMax** (Tanimoto on counts; Ralaivola et al., Neural Networks 2005): for count vectors ``a, b``,

    K(a, b) = Σ_i min(a_i, b_i) / Σ_i max(a_i, b_i),      K = 1 where both are all-zero.

:func:`minmax_kernel` lives with the fingerprints it compares
(:func:`siggate.data.fingerprints.minmax_kernel`, which says how it is computed exactly), because
the applicability domain (:mod:`siggate.data.similarity`) measures the same similarity; it is
re-exported here for the members. The unfolded bits are binary, so MinMax is the Tanimoto kernel
on them and positive semi-definite (Gower 1971; Ralaivola et al. 2005).

**Nyström** (Williams and Seeger, NIPS 2001): with ``m`` landmark rows, ``K ≈ K_nm K_mm⁺ K_mn``;
:func:`nystrom_projection` gives ``W = U_r diag(s_r)^-1/2`` from the eigenpairs of ``K_mm`` above a
relative cut-off, so that ``Φ = K_nm W`` are features whose inner products are that approximation.
With every training row a landmark, ``ΦΦᵀ = K`` on the training rows: the exact kernel map.

"""

from __future__ import annotations

import numpy as np

from ..data.fingerprints import minmax_kernel

__all__ = ["exact_kernel_map", "minmax_kernel", "nystrom_projection"]


def _eigenpairs(k_mm: np.ndarray, rtol: float) -> tuple[np.ndarray, np.ndarray]:
    """The eigenvalues ``s [r]`` of the symmetrized ``k_mm`` above ``rtol`` times the largest, and
    their eigenvectors ``u [m, r]``."""
    k = 0.5 * (np.asarray(k_mm, dtype=np.float64) + np.asarray(k_mm, dtype=np.float64).T)
    s, u = np.linalg.eigh(k)
    keep = s > rtol * max(float(s.max(initial=0.0)), 0.0)
    if not keep.any():
        raise ValueError("Nyström: the landmarks' kernel has no positive eigenvalue")
    return s[keep], u[:, keep]


def nystrom_projection(k_mm: np.ndarray, rtol: float = 1e-10) -> np.ndarray:
    """``W [m, r]`` with ``W Wᵀ = K_mm⁺`` restricted to eigenvalues above ``rtol`` times the largest
    (``r`` of them), so that ``Φ = K_nm W`` are Nyström features (module docstring).

    Args:
        k_mm: ``[m, m]`` kernel among the landmarks (symmetric positive semi-definite).
        rtol: relative eigenvalue cut-off; smaller eigenvalues (rounding noise) are dropped.
    """
    s, u = _eigenpairs(k_mm, rtol)
    return u / np.sqrt(s)[None, :]


def exact_kernel_map(k: np.ndarray, rtol: float = 1e-10) -> tuple[np.ndarray, np.ndarray]:
    """``(W, Φ)`` where every row is a landmark (``k``: the rows' kernel ``[n, n]``): ``W`` as
    :func:`nystrom_projection` gives it, and ``Φ = K W``, which is ``U_r diag(s_r)^1/2`` (``U``'s
    other columns are orthogonal to ``U_r``): read from the one eigendecomposition instead of the
    kernel computed again and an ``n × n`` by ``n × r`` product (at 3,200 rows those took more
    time than the eigendecomposition and the logistic regressions together)."""
    s, u = _eigenpairs(k, rtol)
    root = np.sqrt(s)[None, :]
    return u / root, u * root
