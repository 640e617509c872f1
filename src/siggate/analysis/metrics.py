"""Representation / attention diagnostics used in the mechanism analyses.

All functions are plain tensor functions (no module state, no autograd
needed); they run under ``torch.no_grad`` semantics and compute in float64
for the scalar-returning ones unless stated otherwise.

Definitions (shapes in brackets):

* ``stable_rank(M [n, d]) = ||M||_F^2 / ||M||_2^2`` (0 for the zero matrix).
* ``numerical_rank(M [n, d])`` = #singular values ``> tol`` with
  ``tol = max(n, d) * eps(dtype) * sigma_max`` by default (numpy
  ``matrix_rank`` convention), or ``tol = rel_tol * sigma_max``.
* ``dirichlet_energy(x [N, d], edge_index [2, E])``
  ``= (1/N) * sum_{(j -> i) in E} ||x_i - x_j||^2`` (Rusch et al., 2023,
  "A Survey on Oversmoothing in GNNs":
  ``(1/|V|) sum_i sum_{j in N(i)} ||X_i - X_j||^2``). Every *directed* edge
  in ``edge_index`` contributes once, so an undirected edge stored in both
  directions contributes twice. With ``normalized=True`` node features are
  divided by ``sqrt(1 + deg)`` first (``deg`` = in-degree, i.e. the count of
  ``i`` in ``edge_index[1]``; equal to the degree for symmetric graphs):
  ``(1/N) sum_{(j -> i)} ||x_i / sqrt(1+d_i) - x_j / sqrt(1+d_j)||^2``
  (the self-loop-augmented normalisation of Cai & Wang, 2020).
* ``mad(x [N, d], batch [N])``: mean average distance (Chen et al., 2020),
  mean over ordered pairs ``i != j`` of the same graph of the cosine distance
  ``1 - cos(x_i, x_j)``; averaged per graph, then over graphs.
* ``attention_entropy(p [..., N_q, N_k])``: mean over valid query rows of the
  row entropy ``-sum_k p log p`` (natural log, ``0 log 0 = 0``).
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

__all__ = [
    "stable_rank",
    "stable_rank_batched",
    "numerical_rank",
    "dirichlet_energy",
    "dirichlet_energy_batched",
    "mad",
    "mad_batched",
    "attention_entropy",
]


def _as_float(M: Tensor) -> Tensor:
    M = torch.as_tensor(M).detach()
    if not (M.is_floating_point() or M.is_complex()):
        M = M.double()
    elif M.dtype in (torch.float16, torch.bfloat16):
        M = M.float()
    return M


# --------------------------------------------------------------------------- rank


def stable_rank_batched(M: Tensor) -> Tensor:
    """Stable rank of every matrix in a batch.

    Args:
        M: ``[..., n, d]`` tensor.

    Returns:
        ``[...]`` tensor (dtype of ``M``, at least float32) with
        ``||M||_F^2 / ||M||_2^2`` per matrix; ``0`` where the matrix is zero
        (also for empty matrices), NaN where it holds a non-finite entry.
        ``1 <= stable_rank <= rank(M)`` otherwise.
    """
    M = _as_float(M)
    if M.dim() < 2:
        raise ValueError(f"stable_rank expects [..., n, d], got shape {tuple(M.shape)}")
    lead = M.shape[:-2]
    if M.shape[-1] == 0 or M.shape[-2] == 0:
        return torch.zeros(lead, dtype=M.real.dtype, device=M.device)
    s = svdvals_or_nan(M)  # [..., min(n, d)], descending
    top = s[..., :1]
    # sum((s_i / s_1)^2): squaring s itself under- or overflows float32 for matrices scaled far from 1
    ratio = ((s / top.clamp_min(torch.finfo(s.dtype).tiny)) ** 2).sum(-1)
    return torch.where(top[..., 0] > 0, ratio, torch.where(torch.isnan(top[..., 0]), top[..., 0], torch.zeros_like(ratio)))


def svdvals_or_nan(M: Tensor) -> Tensor:
    """``torch.linalg.svdvals`` of ``[..., n, d]``, with NaN singular values for a matrix holding
    a non-finite entry (weights gone NaN), where the SVD raises: its rank is no number, not 0."""
    bad = ~torch.isfinite(M).flatten(-2).all(-1) if M.numel() else torch.zeros(M.shape[:-2], dtype=torch.bool)
    if not bool(bad.any()):
        return torch.linalg.svdvals(M)
    s = torch.linalg.svdvals(torch.where(bad[..., None, None], torch.zeros_like(M), M))
    return torch.where(bad[..., None], torch.full_like(s, float("nan")), s)


def stable_rank(M: Tensor) -> float:
    """Stable rank ``||M||_F^2 / ||M||_2^2`` of a single ``[n, d]`` matrix.

    Returns ``0.0`` for the zero matrix. Computed in float64.
    """
    M = _as_float(M)
    if M.dim() != 2:
        raise ValueError(f"stable_rank expects a 2-D [n, d] matrix, got shape {tuple(M.shape)}")
    if not M.is_complex():
        M = M.double()
    return float(stable_rank_batched(M))


def numerical_rank(M: Tensor, tol: Optional[float] = None, rel_tol: Optional[float] = None) -> int:
    """Number of singular values of ``M [n, d]`` strictly greater than a threshold.

    Threshold:
        * ``tol`` given: absolute threshold ``tol``.
        * ``rel_tol`` given: ``rel_tol * sigma_max``.
        * neither: ``max(n, d) * eps(M.dtype) * sigma_max`` (numpy
          ``matrix_rank`` convention; ``eps`` of the *input* dtype, so a
          float32 matrix uses float32 eps even though the SVD runs in float64).

    Passing both ``tol`` and ``rel_tol`` is an error. The zero / empty matrix
    has rank 0. A matrix holding NaN or inf has none: ``ValueError`` (the analyses' batched
    :func:`siggate.analysis.smoothing.numerical_rank_batched` gives NaN there; this one's ``int`` cannot, and the SVD failed
    as a ``LinAlgError``).
    """
    if tol is not None and rel_tol is not None:
        raise ValueError("pass at most one of tol and rel_tol")
    M = _as_float(M)
    if M.dim() != 2:
        raise ValueError(f"numerical_rank expects a 2-D [n, d] matrix, got shape {tuple(M.shape)}")
    n, d = M.shape
    if n == 0 or d == 0:
        return 0
    if not bool(torch.isfinite(M).all()):
        raise ValueError("numerical_rank: the matrix holds NaN or inf, so it has no rank (smoothing.numerical_rank_batched "
                         "gives NaN for such a matrix)")
    eps = torch.finfo(M.real.dtype if M.is_complex() else M.dtype).eps
    s = torch.linalg.svdvals(M.to(torch.complex128) if M.is_complex() else M.double())
    smax = float(s[0])
    if tol is not None:
        thr = float(tol)
    elif rel_tol is not None:
        thr = float(rel_tol) * smax
    else:
        thr = max(n, d) * eps * smax
    return int((s > thr).sum())


# ----------------------------------------------------------------- Dirichlet energy


def _edge_sq_dist(x: Tensor, edge_index: Tensor, normalized: bool) -> Tensor:
    src, dst = edge_index[0].long(), edge_index[1].long()
    if normalized:
        deg = torch.bincount(dst, minlength=x.shape[0]).to(x.dtype)
        x = x / torch.sqrt(1.0 + deg).unsqueeze(-1)
    diff = x[dst] - x[src]
    return (diff * diff).sum(-1)  # [E]


def dirichlet_energy(x: Tensor, edge_index: Tensor, normalized: bool = False) -> float:
    """Dirichlet energy of node features on one graph (Rusch et al., 2023).

    ``E(X) = (1/N) * sum_{(j, i) in edge_index} ||x_i - x_j||^2``

    Args:
        x: ``[N, d]`` (or ``[N]``, treated as ``d = 1``) node features.
        edge_index: ``[2, E]`` directed edges ``edge_index[0] -> edge_index[1]``;
            each column contributes once (undirected graphs stored with both
            directions therefore count every edge twice, matching
            ``sum_i sum_{j in N(i)}``). Self-loops contribute 0.
        normalized: if ``True``, use ``x_i / sqrt(1 + d_i)`` with ``d_i`` the
            in-degree of ``i`` (number of columns with ``edge_index[1] == i``).

    Returns:
        The energy as a Python float (float64 computation); ``0.0`` when
        ``N == 0``. Identical features give ``0`` (unnormalised case).
    """
    x = _as_float(x).double()
    if x.dim() == 1:
        x = x.unsqueeze(-1)
    N = x.shape[0]
    if N == 0:
        return 0.0
    edge_index = torch.as_tensor(edge_index, device=x.device)
    if edge_index.numel() == 0:
        return 0.0
    return float(_edge_sq_dist(x, edge_index, normalized).sum() / N)


def dirichlet_energy_batched(
    x: Tensor,
    edge_index: Tensor,
    batch: Tensor,
    normalized: bool = False,
    num_graphs: Optional[int] = None,
) -> Tensor:
    """Per-graph Dirichlet energy for a PyG mini-batch.

    Args:
        x: ``[N, d]`` node features of all graphs.
        edge_index: ``[2, E]`` edges (global node indices; edges never cross graphs).
        batch: ``[N]`` graph id of every node.
        normalized: degree normalisation as in :func:`dirichlet_energy`.
        num_graphs: number of graphs ``G`` (default ``batch.max() + 1``).

    Returns:
        ``[G]`` float64 tensor, ``E_g = (1/N_g) sum_{edges (j -> i), i in g} ||x_i - x_j||^2``
        (``0`` for graphs without nodes). Entry ``g`` equals
        :func:`dirichlet_energy` applied to graph ``g`` alone.
    """
    x = _as_float(x).double()
    if x.dim() == 1:
        x = x.unsqueeze(-1)
    batch = torch.as_tensor(batch, device=x.device).long()
    if num_graphs is None:
        num_graphs = int(batch.max()) + 1 if batch.numel() > 0 else 0
    out = torch.zeros(num_graphs, dtype=torch.float64, device=x.device)
    if num_graphs == 0:
        return out
    edge_index = torch.as_tensor(edge_index, device=x.device).long()
    if edge_index.numel() > 0:
        sq = _edge_sq_dist(x, edge_index, normalized)
        out.index_add_(0, batch[edge_index[1]], sq)
    counts = torch.bincount(batch, minlength=num_graphs).to(torch.float64)
    return torch.where(counts > 0, out / counts.clamp_min(1.0), torch.zeros_like(out))


# --------------------------------------------------------------------------- MAD


def _graph_mad(x: Tensor, eps: float) -> Optional[Tensor]:
    """Mean cosine distance over ordered pairs i != j of one graph (None if < 2 nodes; NaN if a
    feature is not finite: a NaN norm is no zero vector, whose distances read as 0)."""
    n = x.shape[0]
    if n < 2:
        return None
    if not bool(torch.isfinite(x).all()):
        return torch.tensor(float("nan"), dtype=x.dtype, device=x.device)
    norms = x.norm(dim=-1)
    nonzero = norms > eps
    xn = torch.where(nonzero.unsqueeze(-1), x / norms.clamp_min(eps).unsqueeze(-1), torch.zeros_like(x))
    cos = xn @ xn.T  # zero vector -> cos 0 with everything
    dist = 1.0 - cos
    both_zero = (~nonzero).unsqueeze(0) & (~nonzero).unsqueeze(1)
    dist = torch.where(both_zero, torch.zeros_like(dist), dist)
    dist = dist.clamp(0.0, 2.0)
    dist.fill_diagonal_(0.0)
    return dist.sum() / (n * (n - 1))


def mad_batched(x: Tensor, batch: Optional[Tensor] = None, eps: float = 1e-12) -> Tensor:
    """Per-graph MAD; ``[G]`` float64 tensor with ``nan`` for graphs with < 2 nodes, and for
    graphs with a non-finite feature.

    See :func:`mad` for the definition.
    """
    x = _as_float(x).double()
    if x.dim() == 1:
        x = x.unsqueeze(-1)
    if batch is None:
        batch = torch.zeros(x.shape[0], dtype=torch.long, device=x.device)
    batch = torch.as_tensor(batch, device=x.device).long()
    G = int(batch.max()) + 1 if batch.numel() > 0 else 0
    out = torch.full((G,), float("nan"), dtype=torch.float64, device=x.device)
    for g in range(G):
        v = _graph_mad(x[batch == g], eps)
        if v is not None:
            out[g] = v
    return out


def mad(x: Tensor, batch: Optional[Tensor] = None, eps: float = 1e-12) -> float:
    """Mean Average Distance (Chen et al., 2020, "Measuring and Relieving the
    Over-smoothing Problem for GNNs"), all-pairs variant.

    For each graph ``g`` with ``N_g >= 2`` nodes:

    ``MAD_g = 1 / (N_g (N_g - 1)) * sum_{i != j in g} (1 - cos(x_i, x_j))``

    and ``MAD = mean_g MAD_g`` (graphs weighted equally; graphs with fewer than
    two nodes have no pairs and are excluded; NaN when a graph's features are not finite). Conventions for zero vectors
    (``||x|| <= eps``): two zero vectors have distance ``0``; a zero vector and a
    non-zero vector have cosine ``0``, i.e. distance ``1``.

    Difference from Chen et al.: their MAD averages only the *non-zero*
    distances of each row (under a neighbourhood mask); here every ordered
    pair ``i != j`` counts, so identical features give exactly ``0``.

    Args:
        x: ``[N, d]`` node features.
        batch: ``[N]`` graph assignment, or ``None`` for a single graph.
        eps: norm below which a vector counts as zero.

    Returns:
        Python float; ``0.0`` when no graph has two nodes.
    """
    per_graph = mad_batched(x, batch, eps)
    valid = graphs_with_pairs(x.shape[0], batch, per_graph.numel())
    if not bool(valid.any()):
        return 0.0
    return float(per_graph[valid].mean())  # (NaN where a graph's features are not finite)


def graphs_with_pairs(num_nodes: int, batch: Optional[Tensor], num_graphs: int) -> Tensor:
    """``[G]`` bool: the graphs with at least two nodes, which MAD averages over."""
    if batch is None:
        return torch.full((num_graphs,), num_nodes >= 2, dtype=torch.bool)
    return torch.bincount(torch.as_tensor(batch).long(), minlength=num_graphs)[:num_graphs] >= 2


# ---------------------------------------------------------------- attention entropy


def attention_entropy(
    p: Tensor,
    mask: Optional[Tensor] = None,
    query_mask: Optional[Tensor] = None,
) -> Tensor:
    """Mean row entropy of attention distributions.

    Args:
        p: ``[*L, N_q, N_k]`` attention probabilities (rows sum to 1 over the
            valid keys), e.g. ``[B, H, N, N]`` or ``[H, N, N]``.
        mask: optional ``[*L', N_k]`` bool key mask, ``True`` = real (valid)
            key, as returned by ``torch_geometric.utils.to_dense_batch``.
            ``L'`` must be a prefix of ``L`` (e.g. ``[B]`` for ``p`` of shape
            ``[B, H, N, N]``) or all of ``L``; missing trailing dims broadcast.
            Entries of ``p`` at invalid keys are ignored.
        query_mask: optional ``[*L', N_q]`` bool mask of valid query rows
            (same prefix rule). Defaults to ``mask`` when ``N_q == N_k``
            (self-attention); otherwise all query rows are valid.

    Returns:
        ``[*L]`` tensor (float32 or wider) with
        ``mean_{valid q} ( -sum_{valid k} p[q, k] * log p[q, k] )``, natural
        log, ``0 log 0 = 0``. Uniform attention over ``k`` keys gives
        ``log k``, one-hot rows give ``0``. ``nan`` where no query row is valid, and where a
        valid entry of ``p`` is NaN (entries at invalid keys or rows are never read).
    """
    p = _as_float(p)
    if p.dim() < 2:
        raise ValueError(f"attention_entropy expects [..., N_q, N_k], got shape {tuple(p.shape)}")
    lead = p.shape[:-2]
    n_q, n_k = p.shape[-2], p.shape[-1]

    def expand(m: Tensor, n: int, name: str) -> Tensor:
        m = torch.as_tensor(m, device=p.device).bool()
        if m.shape[-1] != n or m.dim() - 1 > len(lead) or tuple(m.shape[:-1]) != tuple(lead[: m.dim() - 1]):
            raise ValueError(
                f"{name} of shape {tuple(m.shape)} incompatible with attention of shape {tuple(p.shape)}"
            )
        # insert singleton dims for the missing trailing leading dims: [*L', n] -> [*L', 1.., n]
        for _ in range(len(lead) - (m.dim() - 1)):
            m = m.unsqueeze(-2)
        return m

    # 0 log 0 = 0; a NaN probability (weights gone NaN) stays NaN, not the entropy 0 of a collapsed head
    plogp = torch.where(p > 0, p * torch.log(p.clamp_min(torch.finfo(p.dtype).tiny)),
                        torch.where(torch.isnan(p), p, torch.zeros_like(p)))
    if mask is not None:
        km = expand(mask, n_k, "mask")
        plogp = torch.where(km.unsqueeze(-2), plogp, torch.zeros_like(plogp))  # [*L, 1, N_k] (padding's NaN unread)
        if query_mask is None and n_q == n_k:
            query_mask = mask
    row_h = -plogp.sum(-1)  # [*L, N_q]

    if query_mask is None:
        return row_h.mean(-1)
    qm = expand(query_mask, n_q, "query_mask").expand_as(row_h)
    count = qm.to(row_h.dtype).sum(-1)
    total = torch.where(qm, row_h, torch.zeros_like(row_h)).sum(-1)
    return torch.where(count > 0, total / count.clamp_min(1.0), torch.full_like(total, float("nan")))
