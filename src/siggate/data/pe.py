"""Positional / structural encodings precomputed per graph (GraphGPS-style).

Two encodings are provided, both computed once per graph on the CPU and stored
as node-level float tensors on each ``Data`` object:

* **RWSE** (random-walk structural encoding, GraphGPS ``posenc_RWSE``):
  ``data.rwse`` ``FloatTensor [N, k]``; column ``t-1`` holds the probability that a
  simple random walk started at node ``i`` is back at ``i`` after ``t`` steps,
  i.e. the diagonal of ``P^t`` with ``P = D^-1 A``, for ``t = 1..k``.
* **LapPE** (Laplacian eigenvector encoding, GraphGPS ``posenc_LapPE`` with
  ``laplacian_norm: none`` and ``eigvec_norm: L2``): ``data.lap_vec`` and
  ``data.lap_val``, both ``FloatTensor [N, m]``.

:func:`cached_pe` computes them for a whole dataset once and keeps the result on
disk (see :mod:`siggate.data.cache`).
"""

from __future__ import annotations

import contextlib
import hashlib
from pathlib import Path

import numpy as np
import torch
from torch_geometric.data import Data
from tqdm.auto import tqdm

#: Bump when the numbers produced by :func:`rwse` / :func:`lap_pe` change, so that
#: caches written by an older version are not reused.
PE_VERSION = 1

__all__ = ["PE_VERSION", "rwse", "lap_pe", "add_pe", "cached_pe"]


def _blas_single_thread():
    """Run BLAS/LAPACK single-threaded: the matrices here are small (tens to a few
    hundred nodes), and a multi-threaded OpenBLAS ``eigh`` on a 150x150 matrix is
    ~30x slower on a busy 2-core machine than a single-threaded one."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - threadpoolctl comes with scikit-learn
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


_SMALL = 32  # below this many nodes the thread-limit context costs more than it saves


def _as_numpy_edges(edge_index, num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    ei = torch.as_tensor(edge_index).detach().cpu().long()
    if ei.numel() == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    if ei.dim() != 2 or ei.shape[0] != 2:
        raise ValueError(f"edge_index must have shape [2, E], got {tuple(ei.shape)}")
    row, col = ei[0].numpy(), ei[1].numpy()
    if row.min() < 0 or col.min() < 0 or row.max() >= num_nodes or col.max() >= num_nodes:
        raise ValueError(f"edge_index refers to nodes outside 0..{num_nodes - 1}")
    return row, col


def rwse(edge_index, num_nodes: int, k: int) -> torch.Tensor:
    """Random-walk structural encoding (GraphGPS RWSE), ``FloatTensor [N, k]``.

    ``out[i, t-1] = (P^t)[i, i]`` for ``t = 1..k`` where ``P = D^-1 A``; ``A`` is the
    dense adjacency built from ``edge_index`` as given (each listed pair adds 1, so
    pass both directions of an undirected edge, as PyG graphs do) and ``D`` the
    out-degree.  Rows of isolated nodes are 0 (their ``D^-1`` is taken as 0, as in
    GraphGPS).

    For a symmetric ``A`` (every molecule graph) the diagonal is obtained from one
    symmetric eigendecomposition: ``P`` is similar to ``S = D^-1/2 A D^-1/2 = U Λ Uᵀ``
    and ``diag(P^t) = diag(S^t) = (U∘U) Λ^t``, which costs one ``eigh`` instead of
    ``k`` matrix products.  A non-symmetric ``A`` falls back to repeated products.
    Computed in float64; tiny negative round-off is clamped to 0.
    """
    if k < 0:
        raise ValueError("k must be >= 0")
    n = int(num_nodes)
    if n == 0 or k == 0:
        return torch.zeros((n, k), dtype=torch.float32)
    with _blas_single_thread() if n >= _SMALL else contextlib.nullcontext():
        return _rwse(edge_index, n, k)


def _rwse(edge_index, n: int, k: int) -> torch.Tensor:
    row, col = _as_numpy_edges(edge_index, n)
    adj = np.zeros((n, n), dtype=np.float64)
    np.add.at(adj, (row, col), 1.0)
    deg = adj.sum(axis=1)
    with np.errstate(divide="ignore"):
        inv = np.where(deg > 0, 1.0 / deg, 0.0)
    steps = np.arange(1, k + 1)
    if np.array_equal(adj, adj.T):
        inv_sqrt = np.sqrt(inv)
        sym = inv_sqrt[:, None] * adj * inv_sqrt[None, :]
        lam, vec = np.linalg.eigh(sym)
        lam = np.clip(lam, -1.0, 1.0)
        powers = lam[:, None] ** steps[None, :]  # [N, k]
        out = (vec * vec) @ powers
    else:
        trans = inv[:, None] * adj
        out = np.empty((n, k), dtype=np.float64)
        cur = trans.copy()
        for t in range(k):
            out[:, t] = np.diagonal(cur)
            if t + 1 < k:
                cur = cur @ trans
    out = np.clip(out, 0.0, 1.0)
    return torch.from_numpy(out).to(torch.float32)


def lap_pe(edge_index, num_nodes: int, m: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Laplacian eigenvector encoding (GraphGPS LapPE), ``(vec [N, m], val [N, m])``.

    Choices, following GraphGPS ``compute_posenc_stats`` with
    ``laplacian_norm=none`` and ``eigvec_norm=L2``:

    * the graph is made undirected and simple (both directions, duplicates merged,
      self-loops dropped) and ``L = D - A`` is the **unnormalized** Laplacian;
    * ``numpy.linalg.eigh`` (float64) on the dense ``L``; eigenpairs sorted by
      eigenvalue ascending and the first ``m`` kept (the 0 eigenvalue(s) first, one
      per connected component).  For graphs with ``N >= 64`` and ``m <= N/2`` only
      those ``m`` pairs are computed (``scipy.linalg.eigh(subset_by_index=...)``),
      which gives the same eigenvalues and, up to sign and to the basis chosen
      inside repeated eigenvalues, the same eigenvectors;
    * eigenvalues clamped to ``>= 0`` (removes ``-1e-16`` round-off);
    * each kept eigenvector rescaled to unit L2 norm (``eigh`` already returns unit
      vectors; this only guards the degenerate case);
    * ``val[i, j]`` is the ``j``-th eigenvalue for every node ``i`` (the row is
      repeated per node so the tensor batches as node-level data);
    * when ``N < m`` the missing columns ``N..m-1`` of both ``vec`` and ``val`` are
      ``NaN`` (the model masks them);
    * eigenvector signs (and bases of repeated eigenvalues) are left as ``eigh``
      returns them; GraphGPS randomizes signs at training time, not here.
    """
    if m < 0:
        raise ValueError("m must be >= 0")
    n = int(num_nodes)
    with _blas_single_thread() if n >= _SMALL else contextlib.nullcontext():
        return _lap_pe(edge_index, n, m)


def _lap_pe(edge_index, n: int, m: int) -> tuple[torch.Tensor, torch.Tensor]:
    vec = torch.full((n, m), float("nan"), dtype=torch.float32)
    val = torch.full((n, m), float("nan"), dtype=torch.float32)
    if n == 0 or m == 0:
        return vec, val
    row, col = _as_numpy_edges(edge_index, n)
    adj = np.zeros((n, n), dtype=np.float64)
    adj[row, col] = 1.0
    adj[col, row] = 1.0
    np.fill_diagonal(adj, 0.0)
    lap = np.diag(adj.sum(axis=1)) - adj
    if n >= 64 and m * 2 <= n:
        # only the m smallest pairs are needed: LAPACK's MRRR subset driver is ~2x faster
        import scipy.linalg

        evals, evecs = scipy.linalg.eigh(lap, subset_by_index=[0, m - 1], driver="evr")
    else:
        evals, evecs = np.linalg.eigh(lap)
    order = np.argsort(evals, kind="stable")[:m]
    evals = np.clip(evals[order], 0.0, None)
    evecs = evecs[:, order]
    norms = np.linalg.norm(evecs, axis=0, keepdims=True)
    evecs = evecs / np.clip(norms, 1e-12, None)
    kept = evals.shape[0]  # min(n, m)
    vec[:, :kept] = torch.from_numpy(evecs).to(torch.float32)
    val[:, :kept] = torch.from_numpy(evals).to(torch.float32).unsqueeze(0).expand(n, kept)
    return vec, val


def _compute_pe(data: Data, rwse_steps: int, lap_dim: int) -> dict:
    """PE tensors of one graph; call inside :func:`_blas_single_thread`."""
    n = int(data.num_nodes)
    out = {}
    if rwse_steps > 0:
        out["rwse"] = _rwse(data.edge_index, n, rwse_steps) if n > 0 else torch.zeros((0, rwse_steps))
    if lap_dim > 0:
        out["lap_vec"], out["lap_val"] = _lap_pe(data.edge_index, n, lap_dim)
    return out


def add_pe(graphs: list[Data], rwse_steps: int = 0, lap_dim: int = 0, progress: bool = False) -> list[Data]:
    """Set ``rwse`` (if ``rwse_steps > 0``) and ``lap_vec``/``lap_val`` (if ``lap_dim > 0``).

    The graphs are modified in place and the same list is returned.
    """
    if rwse_steps <= 0 and lap_dim <= 0:
        return graphs
    it = tqdm(graphs, desc="positional encodings", unit="graph", disable=not progress, leave=False)
    with _blas_single_thread():
        for data in it:
            for key, value in _compute_pe(data, rwse_steps, lap_dim).items():
                data[key] = value
    return graphs


def _graphs_digest(graphs: list[Data]) -> str:
    """Cheap content digest of the graph structure: each graph's node and edge counts, and the
    edge lists. The edge counts split the joined list into its graphs: without them two graphs of
    as many nodes, one without edges (``[Na+].[Cl-]``), could trade places unseen, and each was
    handed the other's encodings."""
    h = hashlib.sha256()
    h.update(str(len(graphs)).encode())
    if graphs:
        counts = torch.tensor([[int(g.num_nodes), int(g.edge_index.shape[-1])] for g in graphs], dtype=torch.int64)
        h.update(counts.numpy().tobytes())
        edges = torch.cat([g.edge_index.reshape(2, -1).long() for g in graphs], dim=1)
        h.update(edges.contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def cached_pe(
    graphs: list[Data],
    dataset_key: str,
    cache_dir,
    rwse_steps: int = 0,
    lap_dim: int = 0,
    progress: bool = True,
) -> list[Data]:
    """:func:`add_pe` for a whole dataset, computed once and cached on disk.

    The cache lives in ``cache_dir`` under a key made of ``dataset_key``,
    ``rwse_steps``, ``lap_dim``, :data:`PE_VERSION` and a digest of the graphs'
    structure (so a changed dataset never picks up stale encodings).  Only the
    encodings are stored; on a hit they are attached to the given graphs without
    recomputation.  The graphs are modified in place and the same list is returned.
    """
    from siggate.data.cache import cached, load_graphs, save_graphs

    if rwse_steps <= 0 and lap_dim <= 0:
        return graphs
    parts = {
        "dataset": str(dataset_key),
        "rwse_steps": int(rwse_steps),
        "lap_dim": int(lap_dim),
        "pe_version": PE_VERSION,
        "graphs": _graphs_digest(graphs),
    }

    def build() -> list[Data]:
        out = []
        it = tqdm(graphs, desc=f"PE {dataset_key}", unit="graph", disable=not progress)
        with _blas_single_thread():
            for data in it:
                out.append(Data(num_nodes=int(data.num_nodes), **_compute_pe(data, rwse_steps, lap_dim)))
        return out

    pes = cached(Path(cache_dir), "pe", parts, build, save=save_graphs, load=load_graphs)
    if len(pes) != len(graphs):
        raise RuntimeError(f"PE cache holds {len(pes)} graphs, dataset has {len(graphs)}")
    for data, pe in zip(graphs, pes):
        if int(pe.num_nodes) != int(data.num_nodes):
            raise RuntimeError("PE cache does not match the graphs (node counts differ)")
        for key in ("rwse", "lap_vec", "lap_val"):
            if key in pe:
                data[key] = pe[key]
    return graphs
