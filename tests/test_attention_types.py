"""The attention types ``performer`` and ``exphormer`` (and ``full`` where it shares the
contract): fast paths pinned to the readable references, values against independent dense
computations, invariances, the gate's place, parameters, config and checkpoints.

Everything runs in float64 on tiny batches of graphs."""

from __future__ import annotations

import dataclasses
import math
from functools import partial

import pytest
import torch
from torch_geometric.data import Batch, Data
from torch_geometric.nn import GINEConv

import siggate.nn.kernels.edge_attention as EA
import siggate.nn.kernels.linear_attention as LA
from siggate.nn import GatedAttentionBase, GatedGPSConv, GPSLayer, SigGateGT
from siggate.nn.attention_types import ATTENTION_TYPES, make_attention
from siggate.nn.exphormer import COMPLETE_MAX_NODES, attention_graph, expander_edges, graph_keys
from siggate.nn.kernels.edge_attention import _PairSoftmax, _row_blocks
from siggate.nn.kernels.layout import GraphSegments
from siggate.nn.performer import favor_features, linear_attention_reference, orthogonal_gaussian, performer_reference
from siggate.options import ATTN_TYPES

DT = torch.float64
D, H = 16, 4
# a one-node graph, graphs on both sides of the kernels' size thresholds and of Exphormer's complete-graph rule
SIZES = [5, 1, 12, 3, 7]
# each type's own constructor options for these tests (a type missing here fails the test below)
OWN = {"full": {}, "performer": {"num_features": 16}, "exphormer": {"num_virtual_nodes": 2}}
# the types beside full softmax: their fast paths, dropout, folded BatchNorm and GatedGPSConv are tested here
SPARSE = [t for t in ATTN_TYPES if t != "full"]


def test_every_attention_type_is_tested():
    assert sorted(OWN) == sorted(ATTN_TYPES)


@pytest.fixture(autouse=True)
def _double_and_small_kernels(monkeypatch):
    """float64 here only; kernel thresholds small enough that these tiny batches take every
    branch (big and small graphs, several chunks, chunks across graph boundaries)."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(DT)
    monkeypatch.setattr(LA, "BIG_GRAPH", 6)
    monkeypatch.setattr(LA, "CHUNK_ROWS", 4)
    monkeypatch.setattr(EA, "PAIR_CHUNK", 5)
    yield
    torch.set_default_dtype(old)


def batch_graph(sizes=SIZES, seed=0, d=D):
    """``x [N, d]``, ``edge_index`` (a path and a few chords inside each graph, both
    directions), ``batch [N]``."""
    g = torch.Generator().manual_seed(seed)
    batch = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    ptr = [0] + torch.tensor(sizes).cumsum(0).tolist()
    edges = []
    for a, n in zip(ptr, sizes):
        edges += [(a + i, a + i + 1) for i in range(n - 1)]
        if n > 3:
            edges += [(a + int(i), a + int(j)) for i, j in torch.randint(0, n, (n // 2, 2), generator=g) if i != j]
    ei = torch.tensor(edges, dtype=torch.long).t() if edges else torch.empty(2, 0, dtype=torch.long)
    ei = torch.cat([ei, ei.flip(0)], 1)
    return torch.randn(batch.numel(), d, generator=g), ei, batch


def make(kind, gate="elementwise", position="output", seed=0, d=D, heads=H, attn_dropout=0.0, **own):
    torch.manual_seed(seed)
    return make_attention(kind, d, heads, {**OWN[kind], **own}, gate=gate, gate_position=position,
                          attn_dropout=attn_dropout)


def run(attn, x, ei, batch, impl):
    return attn.forward_nodes(x, attn.make_layout(batch, ei, impl=impl))


def test_type_names_are_the_config_names():
    assert tuple(ATTENTION_TYPES) == ATTN_TYPES


# ----------------------------------------------------------------------------- fast == reference


@pytest.mark.parametrize("kind", SPARSE)
@pytest.mark.parametrize("gate", ["none", "headwise", "elementwise"])
@pytest.mark.parametrize("position", ["output", "value", "post"])
@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_fast_path_equals_reference(kind, gate, position, dropout):
    """Outputs and every gradient (input and parameters), in training with dropout (the
    same masks: drawn before the implementation is chosen)."""
    x, ei, batch = batch_graph()
    attn = make(kind, gate, position, attn_dropout=dropout).train()
    results = []
    for impl in ("reference", "packed"):
        xi = x.clone().requires_grad_()
        attn.zero_grad()
        torch.manual_seed(1)
        out = run(attn, xi, ei, batch, impl)
        (out.sin() * torch.arange(out.numel()).view_as(out).cos()).sum().backward()
        results.append([out.detach(), xi.grad] + [p.grad for p in attn.parameters()])
    for name, a, b in zip(["out", "x"] + [n for n, _ in attn.named_parameters()], *results):
        assert torch.allclose(a, b, atol=1e-12, rtol=0), name


@pytest.mark.parametrize("dropout", [False, True])
def test_pair_softmax_gradcheck(dropout):
    """The fused pairs' kernel against finite differences, both outputs (``o`` and the
    log-sum-exp) carrying gradient, over several blocks of rows."""
    g = torch.Generator().manual_seed(0)
    x, ei, batch = batch_graph([5, 1, 6], d=6)
    graph = attention_graph(ei, GraphSegments(batch), degree=2)
    q, k, v = (torch.randn(x.size(0), 2, 3, generator=g, requires_grad=True) for _ in range(3))
    w = torch.randn(graph.num_edges + 2, 2, 3, generator=g, requires_grad=True)  # the edge scales
    keep = (torch.rand(graph.src.numel(), 2, generator=g) > 0.3) / 0.7 if dropout else None

    def f(q, k, v, w):
        o, lse = _PairSoftmax.apply(q, k, v, w, keep, graph, 0.6)
        return o, lse.sin()

    assert len(_row_blocks(graph)) > 2
    assert torch.autograd.gradcheck(f, (q, k, v, w))


@pytest.mark.parametrize("kind", SPARSE)
def test_fast_path_gradcheck_finite_differences(kind):
    """Finite differences of the whole fast path (eval: no dropout, no redraw) with
    respect to the input and every parameter."""
    x, ei, batch = batch_graph([4, 1, 7], d=8)
    attn = make(kind, "elementwise", d=8, heads=2).eval()
    call = _NodeCall(attn, attn.make_layout(batch, ei, impl="packed"))
    names = [n for n, _ in call.named_parameters()]

    def f(x, *params):
        return torch.func.functional_call(call, dict(zip(names, params)), (x,))

    inputs = (x.requires_grad_(),) + tuple(p.detach().clone().requires_grad_() for _, p in call.named_parameters())
    assert torch.autograd.gradcheck(f, inputs, fast_mode=True)


class _NodeCall(torch.nn.Module):
    """``attn.forward_nodes(x, layout)`` as a module call (for functional_call)."""

    def __init__(self, attn, layout):
        super().__init__()
        self.attn, self.layout = attn, layout

    def forward(self, x):
        return self.attn.forward_nodes(x, self.layout)


# ----------------------------------------------------------------------------- invariances


def _permute_within_graphs(batch, seed=0):
    """A node permutation that keeps every graph's nodes together (batch stays sorted)."""
    g = torch.Generator().manual_seed(seed)
    perm = torch.cat([idx[torch.randperm(idx.numel(), generator=g)] for idx in
                      [torch.nonzero(batch == b).view(-1) for b in range(int(batch.max()) + 1)]])
    return perm


@pytest.mark.parametrize("kind", ATTN_TYPES)
@pytest.mark.parametrize("impl", ["reference", "packed"])
def test_node_permutation_equivariance(kind, impl):
    """``f(P x) = P f(x)``. The expander is a random graph on node positions, so for
    exphormer the permuted batch gets the permuted attention graph (the layout is data)."""
    x, ei, batch = batch_graph()
    attn = make(kind).eval()
    perm = _permute_within_graphs(batch)
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(perm.numel())
    layout = attn.make_layout(batch, ei, impl=impl)
    if kind == "exphormer":  # the same expander, in node ids of the permuted batch
        seg = GraphSegments(batch)
        expander = expander_edges(seg, attn.expander_degree_total, graph_index=graph_keys(ei, seg))
        p_layout = attention_graph(inv[ei], seg, 0, expander=inv[expander])
    else:
        p_layout = attn.make_layout(batch, inv[ei], impl=impl)
    out = attn.forward_nodes(x, layout)
    p_out = attn.forward_nodes(x[perm], p_layout)
    assert torch.allclose(p_out, out[perm], atol=1e-12)


@pytest.mark.parametrize("kind", ATTN_TYPES)
@pytest.mark.parametrize("impl", ["reference", "packed"])
def test_no_cross_graph_leakage(kind, impl):
    """Changing graph 2's features leaves every other graph's output bit for bit unchanged,
    and the batch equals each graph run alone."""
    x, ei, batch = batch_graph()
    attn = make(kind).eval()
    out = run(attn, x, ei, batch, impl)
    x2 = x.clone()
    x2[batch == 2] = torch.randn(int((batch == 2).sum()), D) * 5
    out2 = run(attn, x2, ei, batch, impl)
    assert torch.equal(out[batch != 2], out2[batch != 2])
    assert not torch.allclose(out[batch == 2], out2[batch == 2])
    for b in range(len(SIZES)):
        nodes = torch.nonzero(batch == b).view(-1)
        keep = (batch[ei[0]] == b)
        one = torch.zeros(nodes.numel(), dtype=torch.long)
        # exphormer: the graph alone keeps its expander (a function of the graph itself)
        alone = attn.forward_nodes(x[nodes], attn.make_layout(one, ei[:, keep] - nodes[0], impl=impl))
        assert torch.allclose(alone, out[nodes], atol=1e-12), b


# ----------------------------------------------------------------------------- gradients


@pytest.mark.parametrize("kind", ATTN_TYPES)
def test_gradients_reach_every_parameter(kind):
    """A training step of two GPS layers (fast path): every trainable parameter gets a
    non-zero gradient, the gate and the virtual nodes included."""
    x, ei, batch = batch_graph()
    torch.manual_seed(0)
    layers = torch.nn.ModuleList(GPSLayer(D, H, attn_dropout=0.0, attn_type=kind, attn_kwargs=OWN[kind])
                                 for _ in range(2)).train()
    e = torch.randn(ei.size(1), D)
    h = x
    for layer in layers:
        h, e = layer(h, ei, e, batch)
    (h.sin().sum()).backward()
    for name, p in layers.named_parameters():
        if p.requires_grad:
            assert p.grad is not None and p.grad.abs().sum() > 0, name


# ----------------------------------------------------------------------------- values


def _exact_softmax_attention(q, k, v):
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), -1) @ v


def test_performer_error_shrinks_with_the_number_of_features():
    """FAVOR+ against exact softmax attention on a 24-node graph: the relative error
    (mean over 6 draws of the features) falls at every step m = 16, 64, 256, 1024, by
    about 2x per 4x features (Monte Carlo: 1/sqrt(m)). (With larger ``|q|, |k|`` the
    estimator's heavy tail makes it converge more slowly at these ``m``.)"""
    g = torch.Generator().manual_seed(0)
    n, heads, dh = 24, 2, 8
    q, k, v = (torch.randn(n, heads, dh, generator=g) * 0.3 for _ in range(3))
    exact = _exact_softmax_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)).transpose(0, 1)
    seg = GraphSegments(torch.zeros(n, dtype=torch.long))
    scale = dh ** -0.25
    errors = []
    for m in (16, 64, 256, 1024):
        errs = []
        for draw in range(6):
            torch.manual_seed(draw)
            omega = orthogonal_gaussian(m, dh, DT)
            phi_q, phi_k = favor_features(q * scale, k * scale, omega, seg.batch, 1)
            approx = linear_attention_reference(phi_q, phi_k, v, seg)
            errs.append(float((approx - exact).norm() / exact.norm()))
        errors.append(sum(errs) / len(errs))
    assert all(b < 0.75 * a for a, b in zip(errors, errors[1:])), errors
    assert errors[-1] < errors[0] / 5, errors


def test_random_features_are_orthogonal_blocks_of_gaussian_rows():
    torch.manual_seed(0)
    w = orthogonal_gaussian(40, 8, DT)
    block = w[:8] / w[:8].norm(dim=1, keepdim=True)
    assert torch.allclose(block @ block.t(), torch.eye(8), atol=1e-12)
    torch.manual_seed(1)
    norms = torch.cat([orthogonal_gaussian(64, 8, DT).pow(2).sum(1) for _ in range(50)])
    assert abs(float(norms.mean()) - 8.0) < 0.3  # E|w|^2 = dim for w ~ N(0, I)


def _dense_exphormer(attn, x, pairs, edge_attr=None, position="output"):
    """Independent loop computation of an Exphormer layer's output on one graph: ``pairs``
    a list of ``(key j, query i, kind)`` with kind ``("edge", e)``, ``"expander"`` or
    ``"loop"``; each pair's score ``sum(q_i * k_j * E(vector)) / sqrt(dh)`` (Exphormer's
    edge-aware score); virtual node ``r`` pooled by a softmax over all nodes (vector
    ``virtual_edges_in[r]``) and itself (the loop vector), then one softmax per query over
    its pairs and the virtual nodes (vector ``virtual_edges_out[r]``). The gate, from each
    row's own input, multiplies at ``position``: the values (the virtual nodes' too), each
    head's output, or the projected output."""
    d, heads = attn.dim, attn.heads
    dh = d // heads
    W, b = attn.in_proj.weight, attn.in_proj.bias
    P, Pz = x @ W.t() + b, attn.virtual @ W.t() + b
    gate = torch.sigmoid(x @ W[3 * d :].t() + b[3 * d :]).view(x.size(0), heads, -1)
    gate_z = torch.sigmoid(attn.virtual @ W[3 * d :].t() + b[3 * d :]).view(-1, heads, gate.size(-1))
    Ew, Eb = attn.edge_proj.weight, attn.edge_proj.bias
    proj = lambda vec, h: (vec @ Ew.t() + Eb)[h * dh:(h + 1) * dh]  # noqa: E731
    vecs = {"expander": attn.edge_vectors[1], "loop": attn.edge_vectors[2]}
    n, outs = x.size(0), []
    for h in range(heads):
        cols = [slice(i * d + h * dh, i * d + (h + 1) * dh) for i in range(3)]
        q, k, v = (P[:, c] for c in cols)
        qz, kz, vz = (Pz[:, c] for c in cols)
        if position == "value":
            v, vz = v * gate[:, h], vz * gate_z[:, h]
        u = []
        for r in range(qz.size(0)):  # virtual node r attends to the graph and itself
            s = [(qz[r] * k[j] * proj(attn.virtual_edges_in[r], h)).sum() for j in range(n)]
            s.append((qz[r] * kz[r] * proj(vecs["loop"], h)).sum())
            p = torch.softmax(torch.stack(s) / math.sqrt(dh), 0)
            u.append(p[:n] @ v + p[n] * vz[r])
        rows = []
        for i in range(n):
            mine = [(j, kind) for j, i2, kind in pairs if i2 == i]
            s, vals = [], []
            for j, kind in mine:
                vec = (attn.edge_vectors[0] if edge_attr is None else edge_attr[kind[1]]) if kind != "expander" \
                    and kind != "loop" else vecs[kind]
                s.append((q[i] * k[j] * proj(vec, h)).sum())
                vals.append(v[j])
            for r in range(qz.size(0)):
                s.append((q[i] * kz[r] * proj(attn.virtual_edges_out[r], h)).sum())
                vals.append(u[r])
            p = torch.softmax(torch.stack(s) / math.sqrt(dh), 0)
            rows.append(p @ torch.stack(vals))
        outs.append(torch.stack(rows))
    o = torch.stack(outs, 1)  # N, H, dh
    if position == "output":
        o = o * gate
    out = o.reshape(x.size(0), d) @ attn.out_proj.weight.t() + attn.out_proj.bias
    return (out.view(x.size(0), heads, dh) * gate).reshape(x.size(0), d) if position == "post" else out


def _pairs(ei, n, expander=None):
    """The ``(key, query, kind)`` list of :func:`_dense_exphormer`: edges, expander, self-loops."""
    out = [(j, i, ("edge", e)) for e, (j, i) in enumerate(ei.t().tolist())]
    out += [] if expander is None else [(j, i, "expander") for j, i in expander.t().tolist()]
    return out + [(i, i, "loop") for i in range(n)]


@pytest.mark.parametrize("impl", ["reference", "packed"])
@pytest.mark.parametrize("position", ["output", "value", "post"])
def test_exphormer_on_a_complete_graph_equals_a_loop_computation_with_virtual_nodes(impl, position):
    """All pairs are edges and there is no expander: the layer must equal the loop
    computation over the edges, the self-loops and the virtual nodes, with edge_attr, the
    gate at each position (on the values, the virtual nodes' values are gated too)."""
    n = 6
    x = torch.randn(n, D, generator=torch.Generator().manual_seed(3))
    ei = torch.tensor([(i, j) for i in range(n) for j in range(n) if i != j]).t()
    edge_attr = torch.randn(ei.size(1), D, generator=torch.Generator().manual_seed(4))
    attn = make("exphormer", "headwise", position, num_virtual_nodes=2, expander_degree_total=0).eval()
    with torch.no_grad():
        attn.in_proj.bias.normal_()  # non-zero biases are checked too
        attn.edge_proj.bias.normal_()
    layout = attn.make_layout(torch.zeros(n, dtype=torch.long), ei, impl=impl)
    out = attn.forward_nodes(x, layout, edge_attr=edge_attr)
    assert torch.allclose(out, _dense_exphormer(attn, x, _pairs(ei, n), edge_attr, position), atol=1e-12)


@pytest.mark.parametrize("impl", ["reference", "packed"])
@pytest.mark.parametrize("n", [9, 13])
def test_exphormer_equals_the_loop_computation_on_a_sparse_graph(impl, n):
    """A sparse graph: the pairs are the graph's edges, the expander's (a pair that is both
    counts twice) and self-loops; without edge_attr the graph edges share one vector. 9
    nodes: the expander is the complete graph; 13: random permutations, seeded by the graph."""
    x, ei, batch = batch_graph([n])
    attn = make("exphormer", "headwise", expander_degree_total=4, num_virtual_nodes=1).eval()
    seg = GraphSegments(batch)
    expander = expander_edges(seg, 4, graph_index=graph_keys(ei, seg))
    pairs = _pairs(ei, n, expander)
    if n <= COMPLETE_MAX_NODES:
        assert sorted(zip(*expander.tolist())) == [(j, i) for j in range(n) for i in range(n) if i != j]
    else:
        assert len({(j, i) for j, i, _ in pairs}) < len(pairs) < n * n  # repeated pairs, and not dense
    assert torch.allclose(run(attn, x, ei, batch, impl), _dense_exphormer(attn, x, pairs), atol=1e-12)


def test_expander_is_regular_within_each_graph_and_differs_between_graphs_of_one_size():
    sizes = [13, 1, 13, 16]
    x, ei, batch = batch_graph(sizes, seed=1)
    seg = GraphSegments(batch)
    src, dst = expander_edges(seg, 4, seed=3)
    n = seg.num_nodes
    degree = torch.bincount(src, minlength=n)
    assert torch.equal(degree[seg.batch != 1], torch.full((n - 1,), 4))  # 4-regular, with multiplicity
    assert degree[seg.batch == 1].item() == 0  # a one-node graph: the complete graph has no pair
    assert torch.equal(seg.batch[src], seg.batch[dst])  # inside graphs
    pairs = set(zip(src.tolist(), dst.tolist()))
    assert all((j, i) in pairs for i, j in pairs)  # symmetric

    def local(edges, g, s=seg):
        a, b = edges
        keep = s.batch[a] == g
        return sorted(zip((a[keep] - s.ptr[g]).tolist(), (b[keep] - s.ptr[g]).tolist()))

    assert local((src, dst), 0) != local((src, dst), 2)  # two graphs of 13 nodes: two expanders
    # a graph's expander is a function of (seed, its size, its index): the batch around it does not matter
    alone = expander_edges(GraphSegments(torch.zeros(16, dtype=torch.long)), 4, seed=3, graph_index=torch.tensor([3]))
    assert sorted(zip(*alone.tolist())) == local((src, dst), 3)
    ids = torch.tensor([40, 41, 40, 7])  # dataset indices: graphs 0 and 2 are the same graph
    by_id = expander_edges(seg, 4, seed=3, graph_index=ids)
    assert local(by_id, 0) == local(by_id, 2) and local(by_id, 0) != local((src, dst), 0)
    other = expander_edges(GraphSegments(torch.zeros(16, dtype=torch.long)), 4, seed=4, graph_index=torch.tensor([3]))
    assert not torch.equal(alone, other)


def test_small_graphs_get_the_complete_graph_as_exphormer_does():
    """Exphormer's ``generate_random_expander``: a graph of at most 10 nodes gets every
    ordered pair ``i != j`` once (no self-pair, no repeat), whatever the degree and seed;
    from 11 nodes on, ``degree / 2`` permutations (``n * degree`` pairs)."""
    sizes = [1, 2, 7, 10, 11]
    seg = GraphSegments(torch.repeat_interleave(torch.arange(5), torch.tensor(sizes)))
    for degree, seed in ((2, 0), (6, 5), (20, 1)):
        src, dst = expander_edges(seg, degree, seed=seed)
        for g, n in enumerate(sizes):
            keep = seg.batch[dst] == g
            got = sorted(zip((src[keep] - seg.ptr[g]).tolist(), (dst[keep] - seg.ptr[g]).tolist()))
            if n <= 10:
                assert got == [(j, i) for j in range(n) for i in range(n) if i != j], (n, degree)
            else:
                assert len(got) == n * degree
    assert expander_edges(seg, 0).size(1) == 0  # degree 0: no expander, small graphs included


def test_graph_keys_depend_on_the_graph_alone():
    """The same graph gets the same key at any position and in any batch (edges in any
    order); another graph of the same size gets another key."""
    sizes = [13, 4, 13, 13]
    x, ei, batch = batch_graph(sizes, seed=2)
    seg = GraphSegments(batch)
    keys = graph_keys(ei, seg)
    x1, ei1, b1 = batch_graph([13], seed=2)  # graph 0 alone (the same generator draws)
    assert graph_keys(ei1, GraphSegments(b1)).tolist() == keys[:1].tolist()
    shuffled = ei[:, torch.randperm(ei.size(1), generator=torch.Generator().manual_seed(0))]
    assert torch.equal(graph_keys(shuffled, seg), keys)
    assert len(set(keys[[0, 2, 3]].tolist())) == 3


def test_graph_keys_separate_graphs_with_the_same_size_edge_count_and_degree_sums():
    """The key mixes each edge nonlinearly: a hash linear in the edges' ends would depend on
    the graph only through its size, edge count and ``sum_i deg(i) * i``, and give two chains
    of 12 nodes that differ by swapping two inner nodes' labels the same key (and with it the
    same expander; on 2,761 ogbg-molhiv molecules above 10 atoms such sums merged 2,592
    distinct edge sets into 1,784 keys)."""
    n = 12
    chain = [(i, i + 1) for i in range(n - 1)]
    swap = {1: 2, 2: 1}  # both of degree 2: the same sum of deg(i) * i, other edges
    swapped = [(swap.get(a, a), swap.get(b, b)) for a, b in chain]
    assert sorted(map(sorted, swapped)) != sorted(map(sorted, chain))

    def key(edges):
        ei = torch.tensor(edges + [(b, a) for a, b in edges]).t()
        return graph_keys(ei, GraphSegments(torch.zeros(n, dtype=torch.long))).item()

    assert key(swapped) != key(chain)
    ring = chain + [(n - 1, 0)]  # and in a ring, where every node has degree 2, any relabelling would do
    assert len({key(ring), key([(swap.get(a, a), swap.get(b, b)) for a, b in ring])}) == 2


def _edge_batch(sizes=SIZES):
    x, ei, batch = batch_graph(sizes)
    return x, ei, batch, torch.randn(ei.size(1), D, generator=torch.Generator().manual_seed(5))


@pytest.mark.parametrize("impl", ["reference", "packed"])
def test_exphormer_scores_read_edge_attr_and_only_inside_the_edge_s_graph(impl):
    """A changed edge_attr row changes the attention output of its graph (at the edge's
    query) and no other graph's output, bit for bit."""
    x, ei, batch, ea = _edge_batch()
    attn = make("exphormer").eval()
    layout = attn.make_layout(batch, ei, impl=impl)
    out = attn.forward_nodes(x, layout, edge_attr=ea)
    e = int(torch.nonzero(batch[ei[1]] == 2)[0])  # an edge of graph 2
    ea2 = ea.clone()
    ea2[e] += 1.0
    out2 = attn.forward_nodes(x, layout, edge_attr=ea2)
    assert not torch.allclose(out2[ei[1, e]], out[ei[1, e]])
    assert torch.equal(out2[batch != 2], out[batch != 2])
    assert not torch.allclose(out, attn.forward_nodes(x, layout))  # without edge_attr: another score
    with pytest.raises(ValueError, match=r"edge_attr must be \[num_edges, dim\]"):
        attn.forward_nodes(x, layout, edge_attr=ea[:-1])


@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_exphormer_fast_path_with_edge_attr_equals_reference(dropout):
    """Outputs and gradients (input, edge_attr, every parameter) with edge_attr."""
    x, ei, batch, ea = _edge_batch()
    attn = make("exphormer", attn_dropout=dropout).train()
    results = []
    for impl in ("reference", "packed"):
        layout = attn.make_layout(batch, ei, impl=impl)
        xi, eai = x.clone().requires_grad_(), ea.clone().requires_grad_()
        attn.zero_grad()
        torch.manual_seed(1)
        out = attn.forward_nodes(xi, layout, edge_attr=eai)
        (out.sin() * torch.arange(out.numel()).view_as(out).cos()).sum().backward()
        results.append([out.detach(), xi.grad, eai.grad] + [p.grad for p in attn.parameters()])
    for name, a, b in zip(["out", "x", "edge_attr"] + [n for n, _ in attn.named_parameters()], *results):
        assert torch.allclose(a, b, atol=1e-12, rtol=0), name


def test_the_layer_and_the_model_give_exphormer_edge_attr_and_graph_identity():
    """A GPS layer hands its input edge_attr to the attention (both paths, and folded for
    inference), and so does GatedGPSConv, whose ``graph_index`` seeds the expanders instead
    of the graphs' content; the model seeds each graph's expander with the graph itself, so
    the same graph in another batch, at another position, with or without a ``data.idx``,
    keeps its expander and output."""
    x, ei, batch, ea = _edge_batch()
    ea2 = ea.clone()
    ea2[0] += 1.0
    for impl in ("reference", "packed"):
        torch.manual_seed(0)
        layer = GPSLayer(D, H, local="none", attn_type="exphormer", attn_kwargs=OWN["exphormer"], impl=impl).eval()
        out = layer(x, ei, ea, batch)[0]
        assert not torch.allclose(out, layer(x, ei, ea2, batch)[0])
        folded = layer.for_inference()
        assert torch.allclose(folded(x, ei, ea, batch)[0], out, atol=1e-10)
        assert torch.allclose(folded(x, ei, ea2, batch)[0], layer(x, ei, ea2, batch)[0], atol=1e-10)
    conv = GatedGPSConv(D, None, heads=H, attn_type="exphormer", attn_kwargs=OWN["exphormer"]).eval()
    assert not torch.allclose(conv(x, ei, batch, edge_attr=ea), conv(x, ei, batch, edge_attr=ea2))
    big = batch == 2  # the graph above COMPLETE_MAX_NODES: a random expander
    by_id = conv(x, ei, batch, graph_index=torch.arange(len(SIZES)) + 100, edge_attr=ea)
    assert not torch.allclose(by_id[big], conv(x, ei, batch, edge_attr=ea)[big])
    assert torch.allclose(by_id[~big], conv(x, ei, batch, edge_attr=ea)[~big], atol=1e-12)  # complete graphs
    b = _molecules([12, 15, 12, 13])
    torch.manual_seed(0)
    model = SigGateGT(1, dim=D, layers=1, heads=H, pe="none", attn_type="exphormer", attn_kwargs=OWN["exphormer"]).eval()
    graphs = b.to_data_list()
    full = model(Batch.from_data_list(graphs))
    for i, g in enumerate(graphs):
        g.idx = 10 + i  # a dataset index changes nothing
    pair = Batch.from_data_list([graphs[2], graphs[1]])
    assert torch.allclose(model(pair), full[[2, 1]], atol=1e-12)  # graph 2 keeps its expander in position 0
    assert torch.allclose(model(Batch.from_data_list(graphs[::-1])), full.flip(0), atol=1e-12)


# ----------------------------------------------------------------------------- the gate


@pytest.mark.parametrize("kind", ATTN_TYPES)
def test_gate_none_adds_no_parameters(kind):
    """``gate="none"``: exactly the projections (``4 d^2 + 4 d``), plus the virtual nodes
    for exphormer; each gate adds exactly :meth:`gate_parameters`."""
    # exphormer: the virtual nodes and their in/out edge vectors, the edge projection and 3 edge vectors
    r = OWN[kind].get("num_virtual_nodes", 1)
    extra = 3 * r * D + D * D + D + 3 * D if kind == "exphormer" else 0
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    none = make(kind, "none")
    assert none.gate_parameters() == 0
    assert count(none) == 4 * D * D + 4 * D + extra
    for gate, added in (("headwise", H * (D + 1)), ("elementwise", D * (D + 1))):
        gated = make(kind, gate)
        assert count(gated) - count(none) == gated.gate_parameters() == added
    layer = lambda g: GPSLayer(D, H, gate=g, attn_type=kind, attn_kwargs=OWN[kind])  # noqa: E731
    full = lambda g: GPSLayer(D, H, gate=g)  # noqa: E731
    assert count(layer("none")) == count(full("none")) + extra


@pytest.mark.parametrize("kind", ATTN_TYPES)
@pytest.mark.parametrize("gate", ["headwise", "elementwise"])
def test_gate_multiplies_each_head_before_the_output_projection(kind, gate):
    """By hand: ``out = concat_h(head_out_h * sigmoid(X W_Gh + b_Gh)) W_out^T + b_out``,
    where ``head_out`` is what the same attention without a gate computes per head."""
    x, ei, batch = batch_graph([8])
    attn = make(kind, gate).eval()
    plain = make(kind, "none").eval()
    plain.load_state_dict({k: (v[: 3 * D] if k.startswith("in_proj") else v) for k, v in attn.state_dict().items()})
    with torch.no_grad():
        attn.in_proj.bias.normal_()
        plain.in_proj.bias.copy_(attn.in_proj.bias[: 3 * D])
    layout = attn.make_layout(batch, ei, impl="reference")
    out, det = attn.forward_nodes(x, layout, return_details=True)
    plain_out, plain_det = plain.forward_nodes(x, layout, return_details=True)
    head_out = plain_det["head_out"].reshape(8, H, D // H)  # full: (1, N, H, dh) padded batch of one graph
    W, b = attn.in_proj.weight[3 * D :], attn.in_proj.bias[3 * D :]
    g = torch.sigmoid(x @ W.t() + b).view(8, H, -1)  # one value per head, or per head dimension
    by_hand = (head_out * g).reshape(8, D) @ attn.out_proj.weight.t() + attn.out_proj.bias
    assert torch.allclose(out.reshape(8, D), by_hand, atol=1e-12)
    assert torch.allclose(plain_out.reshape(8, D), head_out.reshape(8, D) @ attn.out_proj.weight.t()
                          + attn.out_proj.bias, atol=1e-12)
    post = (plain_out.reshape(8, H, -1) * g).reshape(8, D)  # gating after the projection differs
    assert not torch.allclose(out.reshape(8, D), post, atol=1e-6)


# ----------------------------------------------------------------------------- Performer's features


def test_performer_redraws_on_schedule_and_never_in_eval():
    x, ei, batch = batch_graph([6])
    a = make("performer", redraw_interval=3).train()
    seen = []
    for _ in range(7):
        run(a, x, ei, batch, "packed")
        seen.append(a.omega.clone())
    changes = [not torch.equal(p, q) for p, q in zip(seen, seen[1:])]
    assert changes == [False, False, True, False, False, True]  # passes 4 and 7 use new features
    assert int(a.forward_count) == 1 and int(a.draws) == 3
    a.eval()
    before = a.omega.clone()
    for _ in range(5):
        run(a, x, ei, batch, "packed")
    assert torch.equal(a.omega, before)
    assert {"omega", "forward_count", "feature_seed", "draws"} <= set(a.state_dict())


def test_performer_replicas_redraw_the_same_features_whatever_their_rng():
    """DDP replicas share rank 0's buffers but not its random stream: a redraw must depend
    on the buffers only. A copy of the module, stepped with another global RNG state, draws
    the same features; another initialisation seed draws others."""
    x, ei, batch = batch_graph([6])
    a = make("performer", redraw_interval=2).train()
    b = make("performer", redraw_interval=2, seed=5).train()
    b.load_state_dict(a.state_dict())
    c = make("performer", redraw_interval=2, seed=5).train()
    for step in range(5):
        torch.manual_seed(100 + step)
        run(a, x, ei, batch, "packed")
        torch.manual_seed(200 + step)
        run(b, x, ei, batch, "packed")
        run(c, x, ei, batch, "packed")
        assert torch.equal(a.omega, b.omega), step
    assert int(a.draws) == 3 and not torch.equal(a.omega, c.omega)


# ----------------------------------------------------------------------------- layers, model, config


@pytest.mark.parametrize("kind", SPARSE)
def test_gps_conv_takes_the_attention_type(kind):
    x, ei, batch = batch_graph()
    e = torch.randn(ei.size(1), D)

    def conv(impl):
        torch.manual_seed(0)
        mlp = torch.nn.Sequential(torch.nn.Linear(D, D), torch.nn.ReLU(), torch.nn.Linear(D, D))
        return GatedGPSConv(D, GINEConv(mlp), heads=H, attn_type=kind, attn_kwargs={"dropout": 0.0, **OWN[kind]},
                            impl=impl).eval()

    fast, slow = conv("auto"), conv("reference")
    assert type(fast.attn) is ATTENTION_TYPES[kind] and f"attn_type={kind}" in repr(fast)
    out = fast(x, ei, batch, edge_attr=e)
    assert out.shape == (x.size(0), D)
    assert torch.allclose(out, slow(x, ei, batch, edge_attr=e), atol=1e-12)


def _molecules(sizes, seed=0):
    from ogb.utils.features import get_atom_feature_dims, get_bond_feature_dims
    from torch_geometric.data import Batch

    x, ei, batch = batch_graph(sizes, seed)
    g = torch.Generator().manual_seed(seed)
    graphs = []
    for b in range(len(sizes)):
        nodes = torch.nonzero(batch == b).view(-1)
        e = ei[:, batch[ei[0]] == b] - nodes[0]
        graphs.append(Data(
            x=torch.stack([torch.randint(0, k, (nodes.numel(),), generator=g) for k in get_atom_feature_dims()], 1),
            edge_index=e, y=torch.zeros(1, 1),
            edge_attr=torch.stack([torch.randint(0, k, (e.size(1),), generator=g) for k in get_bond_feature_dims()],
                                  1)))
    return Batch.from_data_list(graphs)


@pytest.mark.parametrize("kind", SPARSE)
def test_model_fast_training_step_equals_reference(kind):
    b = _molecules(SIZES)
    models = []
    for impl in ("packed", "reference"):
        torch.manual_seed(0)
        models.append(SigGateGT(1, dim=D, layers=2, heads=H, attn_dropout=0.0, pe="none", impl=impl,
                                attn_type=kind, attn_kwargs=OWN[kind]).train())
    outs = [m(b) for m in models]
    assert torch.allclose(outs[0], outs[1], atol=1e-10)
    for o in outs:
        o.pow(2).sum().backward()
    for (name, p1), p2 in zip(models[0].named_parameters(), models[1].parameters()):
        assert (p1.grad is None) == (p2.grad is None), name
        if p1.grad is not None:
            assert torch.allclose(p1.grad, p2.grad, atol=1e-10), name


def test_config_builds_the_type_and_a_checkpoint_reloads_it(tmp_path):
    import siggate
    from siggate.config import from_dict
    from siggate.data.base import TaskInfo
    from siggate.train.checkpoint import FORMAT_VERSION, atomic_save
    from siggate.train.modelprep import load_trained

    info = TaskInfo(name="nci5k", task="regression", num_tasks=1, metric="mae")
    b = _molecules([5, 8])
    for kind, keys, expect in (
        ("performer", {"attention": {"performer": {"num_features": 8, "redraw_interval": 5, "kernel": "relu"}}},
         {"num_features": 8, "redraw_interval": 5, "kernel": "relu"}),
        ("exphormer", {"attention": {"exphormer": {"expander_degree_total": 2, "num_virtual_nodes": 3,
                                                   "expander_seed": 5}}},
         {"expander_degree_total": 2, "num_virtual_nodes": 3, "expander_seed": 5}),
    ):
        cfg = from_dict({"data": {"name": "nci5k"}, "model": {"dim": D, "layers": 2, "pe": "none", "attn_type": kind,
                                                             **keys}})
        torch.manual_seed(0)
        model = SigGateGT.from_config(cfg.model, info)
        for attn in model.attention_modules():
            assert type(attn) is ATTENTION_TYPES[kind]
            assert {k: getattr(attn, k) for k in expect} == expect
        model.train()
        for _ in range(2):  # a counter and features that are not the initial ones are saved too
            model(b)
        model.eval()
        path = tmp_path / f"{kind}.pt"
        atomic_save({"format": FORMAT_VERSION, "siggate_version": siggate.__version__, "config": cfg.to_dict(),
                     "info": info.to_dict(), "model": model.state_dict(), "target_mean": torch.zeros(1),
                     "target_std": torch.ones(1)}, path)
        loaded, *_ = load_trained(path)
        assert type(loaded.layers[0].attn) is ATTENTION_TYPES[kind]
        assert torch.equal(loaded(b), model(b))


@pytest.mark.parametrize("kind", SPARSE)
def test_details_are_padded_like_the_full_attention(kind):
    """``return_details`` gives the same padded ``(B, N_max, H, ...)`` layout as ``"full"``
    (what the analyses and the trainer's gate means read); no attention probabilities."""
    from siggate.train.scoring import gate_means

    b = _molecules([5, 8, 3])
    torch.manual_seed(0)
    model = SigGateGT(1, dim=D, layers=2, heads=H, pe="none", attn_type=kind, attn_kwargs=OWN[kind]).eval()
    out, det = model(b, return_details=True)
    assert torch.allclose(out, model(b), atol=1e-10)
    mask = det["mask"]
    for a in det["attn"]:
        assert a["attn"] is None
        assert a["head_out"].shape == (*mask.shape, H, D // H) == a["gate"].shape
        assert not a["head_out"][~mask].any() and a["head_out"][mask].abs().sum() > 0
    assert len(gate_means(model, b.to_data_list())) == 2


@pytest.mark.parametrize("kind", ATTN_TYPES)
def test_details_of_a_batch_ending_in_a_graph_without_nodes_match_the_mask(kind):
    """The sparse types padded their details by ``layout.batch`` alone, which does not see a
    last graph without nodes: ``gate`` was ``[2, N_max, ...]`` beside the model's ``[3, N_max]``
    mask, and ``a["gate"][mask]`` (the trainer's ``gate_means``) raised an IndexError. Each
    type's gate at the real nodes is ``sigmoid(x W_G + b_G)`` of the layer's input."""
    from siggate.train.scoring import gate_means

    def graph(n):
        ring = torch.tensor([[i for i in range(n)], [(i + 1) % n for i in range(n)]]) if n > 1 else torch.empty(2, 0)
        return Data(x=torch.arange(n) % 3, edge_index=ring.long(), edge_attr=torch.zeros(ring.size(1), dtype=torch.long),
                    num_nodes=n)

    b = Batch.from_data_list([graph(4), graph(2), graph(0)])
    torch.manual_seed(0)
    model = SigGateGT(1, dim=D, layers=2, heads=H, node_features="typed", num_node_types=3, num_edge_types=1,
                      attn_type=kind, attn_kwargs=OWN[kind]).eval()
    with torch.no_grad():
        out, det = model(b, return_details=True)
        assert torch.allclose(out, model(b), atol=1e-6)
    mask = det["mask"]
    assert mask.shape == (3, 4) and mask.sum(1).tolist() == [4, 2, 0]
    for layer, a, x in zip(model.layers, det["attn"], det["hidden"]):
        assert a["gate"].shape == (3, 4, H, D // H) == a["head_out"].shape == a["head_out_gated"].shape
        w, bias = layer.attn.in_proj.weight[3 * D:], layer.attn.in_proj.bias[3 * D:]
        expected = torch.sigmoid(x @ w.t() + bias).view(-1, H, D // H)
        assert torch.allclose(a["gate"][mask], expected, atol=1e-6)
        assert torch.allclose(a["head_out_gated"][mask], a["head_out"][mask] * expected, atol=1e-6)
    assert len(gate_means(model, b.to_data_list())) == 2


def test_config_refuses_bad_attention_options():
    from siggate.config import ConfigError, from_dict

    for model, match in (({"attn_type": "performr"}, "Did you mean 'performer'"),
                         ({"attn_type": "exphormer", "attention": {"exphormer": {"expander_degree_total": 3}}},
                          "model.attention.exphormer.expander_degree_total: 3 is odd"),
                         ({"attention": {"performer": {"kernel": "relux"}}},
                          "model.attention.performer.kernel: 'relux' is not allowed"),
                         ({"attn_type": "performer", "impl": "sdpa"}, "'sdpa' runs only with model.attn_type=full"),
                         ({"attention": {"performer": {"num_features": 0}}},
                          "model.attention.performer.num_features: 0 is out of range"),
                         ({"attention": {"performer": {"num_feature": 8}}},
                          "unknown config key 'model.attention.performer.num_feature'.*Did you mean "
                          "'model.attention.performer.num_features'")):
        with pytest.raises(ConfigError, match=match):
            from_dict({"data": {"name": "nci5k"}, "model": model})


def test_old_flat_attention_keys_are_read_with_a_deprecation_message():
    from siggate.config import ConfigError, ModelConfig, from_dict, load_config, upgrade_config_dict

    with pytest.warns(FutureWarning, match=r"model.performer_features is deprecated: write "
                                           r"model.attention.performer.num_features"):
        cfg = from_dict({"model": {"performer_features": 8, "virtual_nodes": 3}})
    assert cfg.model.attention.performer.num_features == 8 and cfg.model.attention.exphormer.num_virtual_nodes == 3
    # expander_degree was renamed expander_degree_total (the same number, the expander's total degree)
    with pytest.warns(FutureWarning, match="model.expander_degree is deprecated: write "
                                           "model.attention.exphormer.expander_degree_total"):
        old = load_config("nci5k", ["model.expander_degree=2"])
    assert old.model.attention.exphormer.expander_degree_total == 2
    flat = {"expander_degree_total": 4, "expander_seed": 9, "performer_kernel": "relu"}
    with pytest.warns(FutureWarning) as caught:
        cfg = from_dict({"model": flat})
    assert sorted(str(w.message).split(" is deprecated")[0] for w in caught) == sorted(f"model.{k}" for k in flat)
    assert (cfg.model.attention.exphormer.expander_degree_total, cfg.model.attention.exphormer.expander_seed,
            cfg.model.attention.performer.kernel) == (4, 9, "relu")
    nested = load_config("nci5k", ["model.attention.performer.redraw_interval=7"])
    assert nested.model.attention.performer.redraw_interval == 7
    # --set items apply in order, the old name as its new one; one input giving both names differently is refused
    for items, want in ((["model.expander_degree=6", "model.attention.exphormer.expander_degree_total=8"], 8),
                        (["model.attention.exphormer.expander_degree_total=8", "model.expander_degree=6"], 6)):
        with pytest.warns(FutureWarning):
            assert load_config("nci5k", items).model.attention.exphormer.expander_degree_total == want
    with pytest.raises(ConfigError, match=r"^model.performer_features: 8 and "
                                          r"model.attention.performer.num_features: 32 both set one option"):
        from_dict({"model": {"performer_features": 8, "attention": {"performer": {"num_features": 32}}}})
    saved = upgrade_config_dict({"model": {"performer_redraw": 5, "expander_degree": 4}})  # an old record: silent
    defaults = dataclasses.asdict(ModelConfig().attention)
    assert saved["model"]["attention"] == {"performer": {**defaults["performer"], "redraw_interval": 5},
                                           "exphormer": {**defaults["exphormer"], "expander_degree_total": 4}}
    assert not {"performer_redraw", "expander_degree"} & set(saved["model"])


def test_a_run_saved_before_an_attention_type_or_option_existed_resumes_as_their_defaults():
    """A type's options section (or an option) added after a run was saved read as missing: resume
    refused every older run ("model.attention.<type>: checkpoint has '<missing>'"), and studies
    reran them, whatever type the run's model had. They read as today's defaults, which that
    model was built with; a saved value that differs is still a difference."""
    import copy

    from siggate.config import load_config, upgrade_config_dict
    from siggate.train.rundir import resume_differences

    current = load_config("nci5k").to_dict()
    old = copy.deepcopy(current)
    del old["model"]["attention"]["exphormer"], old["model"]["attention"]["performer"]["kernel"]
    assert resume_differences(upgrade_config_dict(old), current) == []
    del old["model"]["attention"]
    assert resume_differences(upgrade_config_dict(old), current) == []
    other = copy.deepcopy(current)
    other["model"]["attention"]["performer"]["num_features"] = 3
    assert resume_differences(upgrade_config_dict(other), current) == [
        f"model.attention.performer.num_features: checkpoint has 3, current config has "
        f"{current['model']['attention']['performer']['num_features']}"]
    unknown = copy.deepcopy(current)
    unknown["model"]["attention"]["linear"] = {"rank": 4}  # a type this siggate does not know stays, to be refused
    assert upgrade_config_dict(unknown)["model"]["attention"]["linear"] == {"rank": 4}


def test_defaults_are_the_same_in_the_config_and_the_constructors():
    """One source of defaults: each type's options dataclass, its constructor and
    ``model.attention``; and every ``model.*`` key that ``SigGateGT`` takes."""
    import dataclasses
    import inspect

    from siggate.config import ModelConfig
    from siggate.options import ATTENTION_OPTIONS

    cfg = ModelConfig()
    base = set(inspect.signature(GatedAttentionBase.__init__).parameters) | {"kwargs", "impl"}  # impl: GPSOptions'
    for kind, cls in ATTENTION_TYPES.items():  # a type's own constructor options are its options dataclass's
        own = set(inspect.signature(cls.__init__).parameters) - base
        options = ATTENTION_OPTIONS.get(kind)
        assert own == ({f.name for f in dataclasses.fields(options)} if options else set()), kind
    assert set(ATTENTION_OPTIONS) == {f.name for f in dataclasses.fields(cfg.attention)}  # each a config section
    for kind, options in ATTENTION_OPTIONS.items():
        params = inspect.signature(ATTENTION_TYPES[kind].__init__).parameters
        for f in dataclasses.fields(options):
            assert params[f.name].default == f.default == getattr(getattr(cfg.attention, kind), f.name), (kind, f)
    # SigGateGT passes its layer options to GPSLayer, which passes the attention's to it
    params = {}
    for fn in (GatedAttentionBase.__init__, GPSLayer.__init__, SigGateGT.__init__):
        params.update(inspect.signature(fn).parameters)
    shared = [f.name for f in dataclasses.fields(ModelConfig) if f.name in params and f.name != "ffn_dim"]
    assert {"layers", "pe", "pe_steps", "pe_dim", "pool_norm", "attn_dropout", "gate", "heads", "local"} <= set(shared)
    for name in shared:
        assert params[name].default == getattr(cfg, name), name


@pytest.mark.parametrize("kind", SPARSE)
def test_layer_inference_with_folded_batchnorms_equals_reference(kind):
    """``GPSLayer.for_inference()`` folds the BatchNorms around the attention branch
    (its output scaled by the attention BatchNorm); same result as the reference in eval."""
    x, ei, batch = batch_graph()
    e = torch.randn(ei.size(1), D)
    torch.manual_seed(0)
    fast = GPSLayer(D, H, attn_dropout=0.0, attn_type=kind, attn_kwargs=OWN[kind])
    slow = GPSLayer(D, H, attn_dropout=0.0, attn_type=kind, attn_kwargs=OWN[kind], impl="reference")
    with torch.no_grad():
        for bn in (fast.norm_local, fast.norm_attn, fast.norm_ff):
            bn.running_mean.normal_()
            bn.running_var.uniform_(0.5, 2.0)
            bn.weight.normal_()
    slow.load_state_dict(fast.state_dict())
    fast.eval()
    slow.eval()
    with torch.no_grad():
        folded = fast.for_inference()
        assert torch.allclose(folded(x, ei, e, batch)[0], slow(x, ei, e, batch)[0], atol=1e-5)
        assert torch.allclose(fast(x, ei, e, batch)[0], slow(x, ei, e, batch)[0], atol=1e-12)


def _favor_exact(q, k, v, omega, batch):
    """The FAVOR+ estimator evaluated exactly in float64 log space (an independent oracle
    for any input scale): ``o_i = sum_j softmax_j(w_ij) v_j`` with
    ``w_ij = logsumexp_r(z(q_i)_r + z(k_j)_r)``, ``z(x)_r = w_r . x - |x|^2 / 2``."""
    q, k, v, omega = (t.double() for t in (q, k, v, omega))
    zq = q @ omega.t() - q.pow(2).sum(-1, keepdim=True) / 2  # N, H, m
    zk = k @ omega.t() - k.pow(2).sum(-1, keepdim=True) / 2
    out = torch.empty_like(v)
    for g in batch.unique():
        i = torch.nonzero(batch == g).view(-1)
        w = torch.logsumexp(zq[i][:, None] + zk[i][None], -1)  # n_q, n_k, H
        out[i] = torch.einsum("qkh,khd->qhd", torch.softmax(w, 1), v[i])
    return out


@pytest.mark.parametrize("scale", [0.3, 30.0, 1000.0])
def test_performer_equals_its_exact_estimator_at_any_input_scale(scale):
    """float32 features at input norms up to ~10^3 (PATTERN's encoder gives ~200): both
    paths, forward and gradient finite, equal the estimator evaluated exactly in float64
    log space. (A stabiliser shared by all features would let a query's features and its
    graph's keys fall into disjoint exponent ranges and zero whole rows.)"""
    g = torch.Generator().manual_seed(0)
    x, _, batch = batch_graph()
    seg = GraphSegments(batch)
    q, k, v = (torch.randn(x.size(0), H, 4, generator=g) * scale for _ in range(3))
    torch.manual_seed(0)
    omega = orthogonal_gaussian(16, 4, torch.float32)
    exact = _favor_exact(q, k, v, omega, batch)
    for name, f in [("reference", performer_reference), ("fast", partial(LA.performer_fast, features=favor_features))]:
        q32 = q.float().requires_grad_()
        out = f(q32, k.float(), v.float(), omega, seg)
        (gq,) = torch.autograd.grad(out.square().sum(), q32)
        assert torch.isfinite(gq).all(), name
        err = (out.double() - exact).abs().amax() / exact.abs().amax()
        assert err < 1e-4, (name, float(err))


def test_performer_module_approaches_full_attention_with_many_features():
    """The whole module (projections, the ``d_head^{-1/4}`` scaling, gate, output) against
    the full softmax attention with the same weights: close with 4,096 features, and much
    closer than with the softmax temperature wrong. (Inputs of unit scale: the positive
    features' variance grows like ``exp(|q|^2 + |k|^2)``, so at twice this scale even 16,384
    features leave a 20% error.)"""
    x, ei, batch = batch_graph([12])
    full = make("full", gate="elementwise").eval()
    perf = make("performer", gate="elementwise", num_features=4096).eval()
    perf.load_state_dict({**perf.state_dict(), **full.state_dict()})
    wrong = make("performer", gate="elementwise", num_features=4096).eval()
    wrong.load_state_dict(perf.state_dict())
    s = perf.head_dim ** -0.5  # instead of ** -0.25: softmax(q . k / d_head)
    wrong._attend = lambda q, k, v, attend, segments, key_keep: attend(q * s, k * s, v, wrong.omega, segments, key_keep)
    with torch.no_grad():
        exact = run(full, x, ei, batch, "reference")
        err = float((run(perf, x, ei, batch, "reference") - exact).norm() / exact.norm())
        err_wrong = float((run(wrong, x, ei, batch, "reference") - exact).norm() / exact.norm())
    assert err < 0.05 and err_wrong > 3 * err, (err, err_wrong)


@pytest.mark.parametrize("kind", SPARSE)
@pytest.mark.parametrize("sizes", [[7, 0, 9], [3, 0, 8], [0, 8]])
def test_fast_path_handles_empty_graphs(kind, sizes):
    """Empty graphs in a batch (between, before, after others; the last one only through
    ``num_graphs``): the fast path equals the reference, outputs and input gradients."""
    x, ei, batch = batch_graph(sizes)
    attn = make(kind).eval()
    results = []
    for impl in ("reference", "packed"):
        xi = x.clone().requires_grad_()
        out = attn.forward_nodes(xi, attn.make_layout(batch, ei, len(sizes) + 1, impl=impl))
        results.append((out, torch.autograd.grad(out.sin().sum(), xi)[0]))
    (a, ga), (b, gb) = results
    assert torch.allclose(a, b, atol=1e-12) and torch.allclose(ga, gb, atol=1e-12)


def test_exphormer_refuses_a_batch_not_sorted_by_graph():
    """The expander is built on each graph's contiguous rows; on an interleaved batch it
    would join nodes of different graphs, so it must refuse."""
    batch = torch.tensor([0, 1, 0, 1, 0, 1, 0, 1])
    with pytest.raises(ValueError, match="sorted by graph"):
        expander_edges(GraphSegments(batch), 2)


@pytest.mark.parametrize("impl", ["reference", "packed"])
def test_performer_relu_kernel_equals_an_exact_computation(impl):
    """``kernel="relu"``: each query's weights are ``phi(q_i) . phi(k_j)`` normalised over its
    graph, ``phi(x) = relu(x d_head^{-1/4} W^T) + 1e-3`` (PyG's ``generalized_kernel``),
    computed densely per graph and head; the fast path equals the reference in gradients."""
    x, ei, batch = batch_graph()
    attn = make("performer", "headwise", kernel="relu").eval()
    out = run(attn, x, ei, batch, impl)
    d, heads = attn.dim, attn.heads
    dh = d // heads
    W, b = attn.in_proj.weight, attn.in_proj.bias
    P = x @ W.t() + b
    gate = torch.sigmoid(P[:, 3 * d:]).view(-1, heads, 1)
    expect = torch.zeros(x.size(0), heads, dh)
    phi = lambda t: torch.relu(t * dh ** -0.25 @ attn.omega.t()) + 1e-3  # noqa: E731
    for g in range(len(SIZES)):
        nodes = torch.nonzero(batch == g).view(-1)
        for h in range(heads):
            q, k, v = (P[nodes, i * d + h * dh:i * d + (h + 1) * dh] for i in range(3))
            w = phi(q) @ phi(k).t()  # n, n
            expect[nodes, h] = (w / w.sum(1, keepdim=True)) @ v
    expect = (expect * gate).reshape(-1, d) @ attn.out_proj.weight.t() + attn.out_proj.bias
    assert torch.allclose(out, expect, atol=1e-12)
    xi = [x.clone().requires_grad_() for _ in range(2)]
    grads = [torch.autograd.grad(run(attn, xx, ei, batch, i).sin().sum(), xx)[0] for xx, i in
             zip(xi, ("reference", "packed"))]
    assert torch.allclose(*grads, atol=1e-12)
    assert "kernel='relu'" in repr(attn)
    with pytest.raises(ValueError, match=r"kernel must be one of \('softmax', 'relu'\)"):
        make("performer", kernel="exp")


def test_the_gate_is_applied_in_one_function():
    """Only ``GatedAttentionBase.gated`` splits the projection into q, k, v and the gate and
    asks where the gate sits (the constructor stores it, reprs print it); Exphormer's virtual
    nodes go through it as ``extra_rows``."""
    import ast
    from pathlib import Path

    import siggate.nn

    allowed = {"gate_position": {"attention.py:GatedAttentionBase.__init__", "attention.py:GatedAttentionBase.gated",
                                 "attention.py:GatedAttentionBase.extra_repr", "gps_conv.py:GatedGPSConv.__repr__"},
               "split": {"attention.py:GatedAttentionBase.gated"}}
    found = {name: set() for name in allowed}
    root = Path(siggate.nn.__file__).parent
    for path in root.rglob("*.py"):
        def visit(node, where):
            for child in ast.iter_child_nodes(node):
                inner = f"{where}.{child.name}" if isinstance(child, (ast.ClassDef, ast.FunctionDef)) else where
                if isinstance(child, ast.Attribute) and child.attr == "gate_position":
                    found["gate_position"].add(f"{path.relative_to(root)}:{where.lstrip('.')}")
                if (isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute) and child.func.attr == "split"
                        and isinstance(child.func.value, ast.Name) and child.func.value.id == "self"):
                    found["split"].add(f"{path.relative_to(root)}:{where.lstrip('.')}")
                visit(child, inner)

        visit(ast.parse(path.read_text()), "")
    assert found == allowed
