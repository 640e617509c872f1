import math

import numpy as np
import pytest
import torch

from siggate.analysis.metrics import (
    attention_entropy,
    dirichlet_energy,
    dirichlet_energy_batched,
    mad,
    mad_batched,
    numerical_rank,
    stable_rank,
    stable_rank_batched,
)


# ---------------------------------------------------------------- stable rank
def test_stable_rank_rank_one():
    u = torch.randn(7, 1, generator=torch.Generator().manual_seed(0))
    v = torch.randn(1, 5, generator=torch.Generator().manual_seed(1))
    assert stable_rank(u @ v) == pytest.approx(1.0, rel=1e-9)


def test_stable_rank_orthogonal():
    q, _ = torch.linalg.qr(torch.randn(6, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(0)))
    assert stable_rank(q) == pytest.approx(6.0, rel=1e-9)
    assert stable_rank(3.0 * torch.eye(4)) == pytest.approx(4.0, rel=1e-6)


def test_stable_rank_diag_and_zero():
    # singular values 3, 2, 1 -> (9 + 4 + 1) / 9
    assert stable_rank(torch.diag(torch.tensor([1.0, 3.0, 2.0]))) == pytest.approx(14 / 9, rel=1e-6)
    assert stable_rank(torch.zeros(3, 4)) == 0.0
    assert stable_rank(torch.zeros(0, 4)) == 0.0


def test_stable_rank_batched():
    M = torch.stack([torch.diag(torch.tensor([1.0, 3.0, 2.0])), torch.eye(3), torch.zeros(3, 3)])
    M = torch.stack([M, M])  # [2, 3, 3, 3]
    out = stable_rank_batched(M)
    assert out.shape == (2, 3)
    torch.testing.assert_close(out[0], torch.tensor([14 / 9, 3.0, 0.0]))
    torch.testing.assert_close(out[1], out[0])


def test_numerical_rank_product():
    g = torch.Generator().manual_seed(0)
    A = torch.randn(20, 3, dtype=torch.float64, generator=g)
    B = torch.randn(3, 15, dtype=torch.float64, generator=g)
    M = A @ B
    assert numerical_rank(M) == 3
    assert numerical_rank(M) == np.linalg.matrix_rank(M.numpy())
    assert numerical_rank(M.float()) == 3
    assert numerical_rank(torch.zeros(4, 4)) == 0
    assert numerical_rank(torch.eye(5)) == 5


def test_numerical_rank_thresholds():
    M = torch.diag(torch.tensor([10.0, 1.0, 0.01], dtype=torch.float64))
    assert numerical_rank(M) == 3
    assert numerical_rank(M, rel_tol=0.05) == 2  # threshold 0.5
    assert numerical_rank(M, rel_tol=0.2) == 1  # threshold 2
    assert numerical_rank(M, tol=0.001) == 3
    assert numerical_rank(M, tol=5.0) == 1
    with pytest.raises(ValueError):
        numerical_rank(M, tol=1.0, rel_tol=0.1)


# ------------------------------------------------------------ Dirichlet / MAD
def test_identical_features_zero():
    x = torch.ones(5, 3) * torch.tensor([1.0, -2.0, 0.5])
    ei = torch.tensor([[0, 1, 1, 2, 3, 4], [1, 0, 2, 1, 4, 3]])
    assert dirichlet_energy(x, ei) == 0.0
    assert mad(x) == pytest.approx(0.0, abs=1e-12)
    assert mad(torch.zeros(4, 3)) == 0.0


def test_two_node_hand_example():
    x = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    ei = torch.tensor([[0, 1], [1, 0]])  # one undirected edge, both directions
    # ||x0 - x1||^2 = 1, counted for both directed edges, / N=2 -> 1
    assert dirichlet_energy(x, ei) == pytest.approx(1.0)
    # one direction only -> 0.5
    assert dirichlet_energy(x, ei[:, :1]) == pytest.approx(0.5)
    # degree-normalised: d = 1 each -> ||(x0 - x1)/sqrt 2||^2 = 1/2 per edge, x2 / 2 -> 0.5
    assert dirichlet_energy(x, ei, normalized=True) == pytest.approx(0.5)
    # cos = 1/sqrt(2); both ordered pairs have the same distance
    assert mad(x) == pytest.approx(1 - 1 / math.sqrt(2))


def test_mad_orthogonal_and_zero_vector_conventions():
    x = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    assert mad(x) == pytest.approx(1.0)
    x = torch.tensor([[1.0, 0.0], [-1.0, 0.0]])
    assert mad(x) == pytest.approx(2.0)
    # zero vs non-zero: distance 1; zero vs zero: 0
    x = torch.tensor([[0.0, 0.0], [0.0, 0.0], [1.0, 0.0]])
    # ordered pairs: (0,1)=0,(1,0)=0, the 4 pairs with node 2 are 1 -> 4/6
    assert mad(x) == pytest.approx(4 / 6)


def test_batched_versions_match_per_graph():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(7, 4, generator=g)
    batch = torch.tensor([0, 0, 0, 1, 1, 1, 1])
    ei = torch.tensor([[0, 1, 1, 2, 3, 4, 5, 6, 4], [1, 0, 2, 1, 4, 3, 6, 5, 6]])
    de = dirichlet_energy_batched(x, ei, batch)
    assert de.shape == (2,)
    ei0 = ei[:, ei[1] < 3]
    ei1 = ei[:, ei[1] >= 3] - 3
    assert de[0].item() == pytest.approx(dirichlet_energy(x[:3], ei0))
    assert de[1].item() == pytest.approx(dirichlet_energy(x[3:], ei1))
    den = dirichlet_energy_batched(x, ei, batch, normalized=True)
    assert den[1].item() == pytest.approx(dirichlet_energy(x[3:], ei1, normalized=True))
    # an empty trailing graph via num_graphs
    assert dirichlet_energy_batched(x, ei, batch, num_graphs=3)[2].item() == 0.0

    per = mad_batched(x, batch)
    assert per[0].item() == pytest.approx(mad(x[:3]))
    assert per[1].item() == pytest.approx(mad(x[3:]))
    assert mad(x, batch) == pytest.approx((mad(x[:3]) + mad(x[3:])) / 2)
    # a single-node graph has no pairs and is excluded
    b2 = torch.tensor([0, 0, 0, 1, 1, 1, 2])
    assert math.isnan(mad_batched(x, b2)[2].item())
    assert mad(x, b2) == pytest.approx((mad(x[:3]) + mad(x[3:6])) / 2)


def test_dirichlet_matches_laplacian_quadratic_form():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(5, 3, dtype=torch.float64, generator=g)
    ei = torch.tensor([[0, 1, 1, 2, 2, 3, 0, 4], [1, 0, 2, 1, 3, 2, 4, 0]])
    A = torch.zeros(5, 5, dtype=torch.float64)
    A[ei[1], ei[0]] = 1.0
    L = torch.diag(A.sum(1)) - A
    # symmetric A: sum over directed edges = 2 tr(X^T L X)
    assert dirichlet_energy(x, ei) == pytest.approx(2 * torch.trace(x.T @ L @ x).item() / 5)


# ----------------------------------------------------------- attention entropy
def test_entropy_uniform_and_onehot():
    k = 5
    p = torch.full((3, 4, k), 1.0 / k)  # [H, N_q, N_k]
    out = attention_entropy(p)
    assert out.shape == (3,)
    torch.testing.assert_close(out, torch.full((3,), math.log(k)))
    onehot = torch.eye(k).unsqueeze(0).repeat(2, 1, 1)
    torch.testing.assert_close(attention_entropy(onehot), torch.zeros(2))


def test_entropy_masking_matches_unpadded():
    g = torch.Generator().manual_seed(0)
    B, H, n_max = 2, 3, 6
    sizes = [4, 6]
    logits = torch.randn(B, H, n_max, n_max, generator=g)
    mask = torch.zeros(B, n_max, dtype=torch.bool)
    for b, n in enumerate(sizes):
        mask[b, :n] = True
    p = torch.softmax(logits.masked_fill(~mask[:, None, None, :], float("-inf")), dim=-1)
    p = p.masked_fill(~mask[:, None, :, None], 0.3)  # garbage in padded query rows
    out = attention_entropy(p, mask)
    assert out.shape == (B, H)
    for b, n in enumerate(sizes):
        ref = attention_entropy(torch.softmax(logits[b, :, :n, :n], dim=-1))
        torch.testing.assert_close(out[b], ref)
    # full-shape mask [B, H, N_k] gives the same
    torch.testing.assert_close(attention_entropy(p, mask[:, None, :].expand(B, H, n_max)), out)
    # NaN in padding (a softmax over no key) is never read; NaN in a real entry (weights gone NaN) is
    # no entropy, where `p > 0` read it as 0: a collapsed head
    padded = p.masked_fill(~mask[:, None, :, None], float("nan")).masked_fill(~mask[:, None, None, :], float("nan"))
    torch.testing.assert_close(attention_entropy(padded, mask), out)
    broken = p.clone()
    broken[0, 1, 2, 3] = float("nan")
    got = attention_entropy(broken, mask)
    assert torch.isnan(got[0, 1]) and torch.isfinite(got[0, 0]) and torch.isfinite(got[1]).all()


def test_entropy_cross_attention_and_errors():
    p = torch.full((2, 3, 4), 0.25)
    torch.testing.assert_close(attention_entropy(p, query_mask=torch.tensor([True, False, True])),
                               torch.full((2,), math.log(4)))
    out = attention_entropy(p, query_mask=torch.zeros(3, dtype=torch.bool))
    assert torch.isnan(out).all()
    with pytest.raises(ValueError):
        attention_entropy(p, mask=torch.ones(5, dtype=torch.bool))


def test_a_representation_gone_nan_has_no_mad_or_rank():
    """Weights gone NaN gave NaN features, which MAD read as zero vectors (MAD 0: fully
    smoothed) and the SVD of the ranks refused with a traceback; each is NaN now, for that graph
    or matrix only, and a one-node graph is still left out of MAD rather than counted as NaN."""
    from siggate.analysis.smoothing import numerical_rank_batched

    x = torch.randn(7, 4, generator=torch.Generator().manual_seed(0)).double()
    batch = torch.tensor([0, 0, 0, 1, 1, 1, 2])  # graph 2: one node, no pairs
    clean = mad(x, batch)
    x_bad = x.clone()
    x_bad[4, 2] = float("nan")
    per_graph = mad_batched(x_bad, batch)
    assert torch.isfinite(per_graph[0]) and torch.isnan(per_graph[1]) and torch.isnan(per_graph[2])
    assert math.isnan(mad(x_bad, batch)) and math.isfinite(clean)
    assert mad(x_bad[:3], batch[:3]) == pytest.approx(float(mad_batched(x, batch)[0]))
    dense = torch.stack([x[:3], x[3:6]])
    dense_bad = torch.stack([x[:3], x_bad[3:6]])
    sr, sr_bad = stable_rank_batched(dense), stable_rank_batched(dense_bad)
    assert sr_bad[0] == pytest.approx(float(sr[0])) and torch.isnan(sr_bad[1])
    nr = numerical_rank_batched(dense_bad, 1e-3)
    assert nr[0] == 3 and torch.isnan(nr[1])


def test_numerical_rank_of_a_matrix_with_nan_is_refused_by_name():
    """It failed inside the SVD (torch's LinAlgError) where the analyses' batched rank gives NaN."""
    from siggate.analysis.metrics import numerical_rank

    for bad in (float("nan"), float("inf")):
        with pytest.raises(ValueError, match="holds NaN or inf, so it has no rank"):
            numerical_rank(torch.tensor([[1.0, bad], [0.0, 1.0]]))
    assert numerical_rank(torch.eye(3)) == 3
