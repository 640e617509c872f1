r"""Exphormer attention, gated per head: attention type ``"exphormer"``.

Shirzad et al., "Exphormer: Sparse Transformers for Graphs" (ICML 2023,
https://arxiv.org/abs/2303.06147). Softmax attention, but each node ``i`` attends only to

(a) the sources ``j`` of the graph's edges ``j -> i``,
(b) its neighbours in a random expander on the nodes of its graph
    (:func:`expander_edges`: ``expander_degree / 2`` random permutations ``pi`` of the
    graph's nodes, each adding ``i <-> pi(i)``, Friedman's random regular graphs, as
    Exphormer's ``Random-d`` builds them),
(c) itself (so every node attends at least to itself), and
(d) the graph's ``num_virtual_nodes`` virtual nodes.

(a)-(c) are merged as a set of (query, key) pairs (:func:`attention_graph`), so a pair
counts once even when it is an edge and an expander edge. Time and memory are
``O(E + N (degree + virtual nodes))``.

Virtual nodes. Virtual node ``r`` is a learnable vector ``z_r`` of the layer (each graph
gets its own copy). It attends to every node of its graph and to itself,
``u_{g,r} = softmax_{j in g + {r}}(q(z_r) . k_j / sqrt(d_head)) v_j`` (per head), and every
node of the graph attends to it with key ``k(z_r)`` and value ``u_{g,r}``. In Exphormer
the virtual nodes are extra rows that carry this pooled state to the next layer; here both
hops happen inside the layer, so only node rows enter and leave it and the layer keeps
``GPSConv``'s signature. ``q, k, v`` (and the value gate) of ``z_r`` come from the layer's
own projections.

The expander is generated in the layer from the batch vector, with no preprocessing: for a
graph of ``n`` nodes it depends only on ``(expander_seed, n)`` (the permutations come from a
generator seeded with both and are cached), so it is the same in every epoch, in a batch
and alone, and for every graph of that size.

:func:`sparse_attention` is the readable definition of (a)-(d) and the test oracle;
:func:`siggate.nn.kernels.edge_attention.sparse_attention_fast` must equal it
(``tests/test_attention_types.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache, partial

import torch
from torch import Tensor, nn

from ..options import ExphormerOptions
from .attention import GatedAttentionBase, check_node_impl
from .kernels.edge_attention import sparse_attention_fast
from .kernels.layout import GraphSegments, batch_vector, dropout_keep, seeded_generator, segment_amax

__all__ = ["GatedExphormerAttention", "AttentionGraph", "attention_graph", "expander_edges", "sparse_attention"]


@lru_cache(maxsize=512)
def _permutations(n: int, count: int, seed: int) -> Tensor:
    """``[count, n]`` random permutations of ``range(n)``, a function of ``(n, seed)`` only."""
    gen = seeded_generator(seed, n)
    return torch.stack([torch.randperm(n, generator=gen) for _ in range(count)])


def expander_edges(segments: GraphSegments, degree: int, seed: int = 0) -> Tensor:
    """``[2, N * degree]`` (source, target) edges of a random ``degree``-regular expander
    on each graph's nodes: ``degree / 2`` random permutations ``pi`` of the graph, each
    giving ``i -> pi(i)`` and ``pi(i) -> i`` (so a node may get a self-pair or a repeated
    pair; :func:`attention_graph` merges them). ``degree`` must be even."""
    if degree % 2 or degree < 0:
        raise ValueError(f"expander degree must be even and >= 0, got {degree}")
    if not segments.is_sorted:
        raise ValueError("the expander needs a batch vector sorted by graph, as PyG's Batch stores it; sort the nodes")
    device = segments.batch.device
    if degree == 0:
        return torch.empty(2, 0, dtype=torch.long, device=device)
    ptr = segments.ptr.cpu()
    out = []
    sizes = torch.tensor(segments.sizes)
    for n in sorted(set(segments.sizes) - {0}):
        starts = ptr[:-1][sizes == n][:, None, None]  # graphs of this size, 1, 1
        perm = _permutations(n, degree // 2, seed)[None]  # 1, k, n
        a = (starts + torch.arange(n)).expand(-1, perm.size(1), -1).reshape(-1)
        b = (starts + perm).reshape(-1)
        out.append(torch.stack([torch.cat([a, b]), torch.cat([b, a])]))
    if not out:
        return torch.empty(2, 0, dtype=torch.long, device=device)
    return torch.cat(out, 1).to(device)


@dataclass
class AttentionGraph:
    """The (query, key) pairs of an Exphormer layer for one batch, shared by every layer.

    ``src [P]`` keys and ``dst [P]`` queries, sorted by ``dst`` then ``src``, each pair once;
    ``row_ptr [N + 1]`` where each query's pairs start (CSR); ``segments`` the graphs;
    ``cache`` what the fast path derives from them once.
    """

    src: Tensor
    dst: Tensor
    row_ptr: Tensor
    segments: GraphSegments
    degree: int
    seed: int
    cache: dict = field(default_factory=dict, repr=False)

    @property
    def num_nodes(self) -> int:
        return self.segments.num_nodes

    @property
    def batch(self) -> Tensor:
        return self.segments.batch

    @property
    def impl(self) -> str:
        """The implementation the layout serves (its segments carry it)."""
        return self.segments.impl


def attention_graph(edge_index: Tensor, segments: GraphSegments, degree: int, seed: int = 0) -> AttentionGraph:
    """The pairs (a)-(c) of the module docstring: the graph's edges ``edge_index [2, E]``
    (``j -> i``: ``i`` attends to ``j``), the expander (:func:`expander_edges`) and self-loops,
    as a set."""
    n = segments.num_nodes
    loops = torch.arange(n, device=edge_index.device).expand(2, -1)
    pairs = torch.cat([edge_index, expander_edges(segments, degree, seed), loops], 1)
    key = torch.unique(pairs[1] * n + pairs[0])  # sorted by query, then key
    src, dst = key % n, key // n
    row_ptr = torch.zeros(n + 1, dtype=torch.long, device=key.device)
    row_ptr[1:] = torch.bincount(dst, minlength=n).cumsum(0)
    return AttentionGraph(src, dst, row_ptr, segments, degree, seed)


def sparse_attention(q: Tensor, k: Tensor, v: Tensor, graph: AttentionGraph, extra_logits: Tensor | None = None,
                     extra_values: Tensor | None = None, edge_keep: Tensor | None = None,
                     extra_keep: Tensor | None = None) -> Tensor:
    r"""Softmax attention over the pairs of ``graph`` plus extra keys per node (the definition).

    Query ``i`` scores key ``j`` of each pair ``(j, i)`` with ``q_i . k_j / sqrt(d_head)``
    and each of its ``r`` extra keys with ``extra_logits[i, :, r]`` (value
    ``extra_values[i, :, r]``); one softmax over both per node and head, dropout
    multipliers ``edge_keep [P, H]`` and ``extra_keep [N, H, r]`` on the probabilities.

    Shapes: ``q, k, v [N, H, d_head]``, ``extra_logits [N, H, r]``,
    ``extra_values [N, H, r, d_head]`` -> ``[N, H, d_head]``.
    """
    src, dst = graph.src, graph.dst
    N, H, dh = q.shape
    logits = (q[dst] * k[src]).sum(-1) / math.sqrt(dh)  # P, H
    m = segment_amax(logits.detach(), dst, N)
    if extra_logits is not None:
        m = torch.maximum(m, extra_logits.detach().amax(-1))  # a stabiliser: cancels in the softmax
    e = torch.exp(logits - m[dst])
    z = e.new_zeros(N, H).index_add(0, dst, e)
    if extra_logits is not None:
        e_extra = torch.exp(extra_logits - m[..., None])  # N, H, r
        z = z + e_extra.sum(-1)
    alpha = e / z[dst]  # P, H
    if edge_keep is not None:
        alpha = alpha * edge_keep
    out = v.new_zeros(N, H, dh).index_add(0, dst, alpha[..., None] * v[src])
    if extra_logits is not None:
        beta = e_extra / z[..., None]
        if extra_keep is not None:
            beta = beta * extra_keep
        out = out + torch.einsum("nhr,nhrd->nhd", beta, extra_values)
    return out


class GatedExphormerAttention(GatedAttentionBase):
    r"""Gated multi-head Exphormer attention on node rows; see the module docstring.

    Args:
        dim, heads, gate, gate_position, gate_bias_init, gate_weight_std, attn_dropout,
            bias: see :class:`~siggate.nn.attention.GatedAttentionBase` (``attn_dropout``
            drops attention probabilities of edges and virtual nodes).
        impl (str): ``"auto"``/``"packed"`` (the fast path,
            :mod:`siggate.nn.kernels.edge_attention`) or ``"reference"``
            (:func:`sparse_attention` spelled out). (default: ``"auto"``)
        expander_degree (int): degree of the random expander, even; ``0``: none.
            (default: ``4``)
        num_virtual_nodes (int): virtual nodes per graph; ``0``: none. (default: ``1``)
        expander_seed (int): seed of the expanders. (default: ``0``)

    Shapes: ``x [N, d]``, ``edge_index [2, E]``, ``batch [N]`` -> ``[N, d]``.
    """

    attn_type = "exphormer"

    def __init__(
        self,
        dim: int,
        heads: int = 4,
        gate: str = "elementwise",
        gate_position: str = "output",
        gate_bias_init: float = 0.0,
        gate_weight_std: float | None = None,
        attn_dropout: float = 0.0,
        bias: bool = True,
        impl: str = "auto",
        expander_degree: int = ExphormerOptions.expander_degree,
        num_virtual_nodes: int = ExphormerOptions.num_virtual_nodes,
        expander_seed: int = ExphormerOptions.expander_seed,
    ) -> None:
        super().__init__(dim, heads, gate, gate_position, gate_bias_init, gate_weight_std, attn_dropout, bias)
        check_node_impl(impl)
        if expander_degree < 0 or expander_degree % 2:
            raise ValueError(f"expander_degree must be even and >= 0, got {expander_degree}")
        if num_virtual_nodes < 0:
            raise ValueError(f"num_virtual_nodes must be >= 0, got {num_virtual_nodes}")
        self.impl = impl
        self.expander_degree = expander_degree
        self.num_virtual_nodes = num_virtual_nodes
        self.expander_seed = expander_seed
        self.virtual = nn.Parameter(torch.empty(num_virtual_nodes, dim)) if num_virtual_nodes else None
        self.reset_parameters()

    def reset_attention(self) -> None:
        if self.virtual is not None:
            nn.init.normal_(self.virtual)

    def build_layout(self, batch: Tensor, edge_index: Tensor | None, num_graphs: int | None,
                     impl: str) -> AttentionGraph:
        """The batch's :class:`AttentionGraph` (:func:`attention_graph`), carrying ``impl``."""
        if edge_index is None:
            raise ValueError("the exphormer attention needs the batch's edge_index")
        return attention_graph(edge_index, GraphSegments.from_batch(batch, num_graphs, impl), self.expander_degree,
                               self.expander_seed)

    def forward(self, x: Tensor, edge_index: Tensor, batch: Tensor | None = None,
                layout: AttentionGraph | None = None, return_details: bool = False, impl: str | None = None):
        """``x [N, d]``, ``edge_index [2, E]``, ``batch [N]`` (``None``: one graph) ->
        ``[N, d]`` (with ``return_details``, ``(out, details)``, see :meth:`forward_nodes`)."""
        if layout is None:
            layout = self.make_layout(batch_vector(x, batch), edge_index, impl=impl, details=return_details)
        return self.forward_nodes(x, layout, return_details)

    def attention_core(self, x: Tensor, layout: AttentionGraph):
        """``(q, k, v) -> o`` for :meth:`gated`: :meth:`_attend` with the fast path
        (``layout.impl == "packed"``) or :func:`sparse_attention`, and the dropout draws."""
        edge_keep = extra_keep = None
        if self.training and self.attn_dropout > 0:
            p, H = self.attn_dropout, self.heads
            edge_keep = dropout_keep((layout.src.numel(), H), p, x)
            extra_keep = dropout_keep((x.size(0), H, self.num_virtual_nodes), p, x) if self.virtual is not None else None
        attend = sparse_attention_fast if layout.impl == "packed" else sparse_attention
        return partial(self._attend, graph=layout, attend=attend, edge_keep=edge_keep, extra_keep=extra_keep)

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, graph: AttentionGraph, attend, edge_keep,
                extra_keep) -> Tensor:
        """``q, k, v [N, H, d_head]`` -> ``[N, H, d_head]``: the virtual nodes' keys and
        values (:meth:`virtual_keys`), then ``attend`` (:func:`sparse_attention` or its
        fast path) over the pairs and them."""
        logits = values = None
        if self.virtual is not None:
            logits, values = self.virtual_keys(q, k, v, graph.segments)
        return attend(q, k, v, graph, logits, values, edge_keep, extra_keep)

    def virtual_keys(self, q: Tensor, k: Tensor, v: Tensor, segments: GraphSegments) -> tuple[Tensor, Tensor]:
        r"""The virtual nodes as extra keys of every node: ``(logits [N, H, r], values
        [N, H, r, d_head])``. Value of virtual node ``r`` in graph ``g``: its attention over
        the graph's nodes and itself, ``u_{g,r}``; logit of node ``i`` for it:
        ``q_i . k(z_r) / sqrt(d_head)``. ``O(N r)``; plain autograd."""
        batch, G = segments.batch, segments.num_graphs
        scale = 1.0 / math.sqrt(self.head_dim)
        qz, kz, vz, gz = self.split(self.virtual)  # r, H, dh; gate r, H, dh|1
        if gz is not None and self.gate_position == "value":
            vz = vz * gz
        s = torch.einsum("nhc,rhc->nhr", k, qz) * scale  # N, H, r: virtual r scores node n
        s_self = (qz * kz).sum(-1).t() * scale  # H, r
        m = segment_amax(s, batch, G)
        m = torch.maximum(m, s_self).detach()  # G, H, r
        e = torch.exp(s - m[batch])
        e_self = torch.exp(s_self - m)  # G, H, r
        z = e_self + e.new_zeros(m.shape).index_add(0, batch, e)
        if G == 1:  # one graph (node-level tasks): a matmul, no [N, H, r, d_head] products
            pooled = torch.einsum("nhr,nhd->hrd", e, v)[None]
        else:
            pooled = e.new_zeros(G, *s.shape[1:], v.size(-1)).index_add(0, batch, e[..., None] * v[:, :, None, :])
        u = (pooled + e_self[..., None] * vz.transpose(0, 1)) / z[..., None]  # G, H, r, dh
        logits = torch.einsum("nhc,rhc->nhr", q, kz) * scale
        return logits, (u.expand(q.size(0), -1, -1, -1) if G == 1 else u[batch])  # a view for one graph

    def extra_repr(self) -> str:
        return (super().extra_repr() + f", expander_degree={self.expander_degree}, "
                f"num_virtual_nodes={self.num_virtual_nodes}, expander_seed={self.expander_seed}")

