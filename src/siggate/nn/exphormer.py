r"""Exphormer attention, gated per head: attention type ``"exphormer"``.

Shirzad et al., "Exphormer: Sparse Transformers for Graphs" (ICML 2023,
https://arxiv.org/abs/2303.06147). Softmax attention, but each node ``i`` attends only to

(a) the sources ``j`` of the graph's edges ``j -> i``,
(b) its neighbours in a random expander on the nodes of its graph
    (:func:`expander_edges`: ``expander_degree_total / 2`` random permutations ``pi`` of
    the graph's nodes, each adding ``i <-> pi(i)``, Friedman's random regular graphs, as
    Exphormer's ``Random-d`` builds them; Exphormer's ``exp_deg`` counts the permutations,
    so its ``exp_deg: 3`` is ``expander_degree_total=6``, the default here). A graph of at
    most :data:`COMPLETE_MAX_NODES` (10) nodes gets the complete graph on its nodes instead,
    every ordered pair ``i != j`` once, as Exphormer's ``generate_random_expander`` gives
    graphs too small for a random one (as there, a larger graph's permutations may pair a
    node with itself or repeat a pair),
(c) itself (so every node attends at least to itself), and
(d) the graph's ``num_virtual_nodes`` virtual nodes.

Edge-aware scores, as Exphormer's: every (key ``j``, query ``i``) pair ``p`` carries an
edge vector ``e_p``, mapped by the layer's edge projection ``E`` (a linear map, per head
``[H, d_head]``), and scores ``sum_c q_ic k_jc E(e_p)_c / sqrt(d_head)``. A graph edge's
``e_p`` is its row of ``edge_attr`` (the layer's input edge features; without them, one
learned vector for every graph edge); expander edges share one learned vector, self-loops
another, and the edges into and out of virtual node ``r`` one each (``virtual_edges_in``,
``virtual_edges_out``). (a)-(c) are kept as a list of pairs (:func:`attention_graph`), not a
set: a pair that is an edge and an expander edge counts twice, with each vector, as in
Exphormer's concatenated edge lists. Time and memory are ``O(E + N (degree + virtual
nodes))``.

Virtual nodes. Virtual node ``r`` is a learnable vector ``z_r`` of the layer (each graph
gets its own copy). It attends to every node of its graph (edge vector
``virtual_edges_in[r]``) and to itself (the self-loop vector), ``u_{g,r}``, and every node
of the graph attends to it with key ``k(z_r)``, edge vector ``virtual_edges_out[r]`` and
value ``u_{g,r}``. In Exphormer the virtual nodes are extra rows that carry this pooled
state to the next layer; here both hops happen inside the layer, so only node rows enter
and leave it and the layer keeps ``GPSConv``'s signature. ``q, k, v`` (and the value gate)
of ``z_r`` come from the layer's own projections.

The expander is generated in the layer from the batch, with no preprocessing: graph ``g``
of ``n`` nodes gets permutations from a generator seeded with ``(expander_seed, n, key of
g)``. The key is a function of the graph alone (:func:`graph_keys`: its edges, numbered
within the graph), so a molecule keeps its expander, and its output, in every batch, at any
position, in training, evaluation and prediction alike, and two graphs of one size mostly
get different expanders. The permutations are applied in that numbering, so the layer is not
permutation-equivariant: the same graph with its nodes renumbered (a molecule written as
another SMILES) gets another expander and another output, as in Exphormer, whose expander
is one draw over the dataset's node numbering. A caller with its own identity for each graph (a dataset index)
may pass it as ``graph_index`` (:meth:`~GatedExphormerAttention.make_layout`,
:meth:`siggate.nn.GatedGPSConv.forward`) to seed with it instead.

Other differences from Exphormer: expanders are drawn per graph from its key, not once
for the dataset from one generator; no best-of-k selection by spectral gap; self-loops are
always added; the scores are an exact softmax (max-stabilised) where Exphormer clamps them
to ``[-5, 5]``; the virtual nodes' two hops happen in one layer (above).

:func:`sparse_attention` is the readable definition of (a)-(d) and the test oracle;
:func:`siggate.nn.kernels.edge_attention.sparse_attention_fast` must equal it
(``tests/test_attention_types.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import partial

import torch
from torch import Tensor, nn

from ..options import ExphormerOptions, GPSOptions
from .attention import GatedAttentionBase, check_node_impl, check_whole
from .kernels.edge_attention import sparse_attention_fast
from .kernels.layout import GraphSegments, batch_vector, dropout_keep, seeded_generator, segment_amax

__all__ = ["GatedExphormerAttention", "AttentionGraph", "attention_graph", "expander_edges", "graph_keys",
           "sparse_attention"]


def _permutations(n: int, count: int, seed: int, index: int) -> Tensor:
    """``[count, n]`` random permutations of ``range(n)``, a function of ``(n, seed,
    index)`` only."""
    gen = seeded_generator(seed, int(index) * 1_000_003 + n)
    return torch.stack([torch.randperm(n, generator=gen) for _ in range(count)])


#: graphs of at most this many nodes get the complete graph as their expander (Exphormer's rule)
COMPLETE_MAX_NODES = 10
#: a prime below 2**31: keys and their products with the mixing constants stay far from int64's end
_KEY_PRIME = 2_147_483_647


def graph_keys(edge_index: Tensor, segments: GraphSegments) -> Tensor:
    """``[G]`` int64 keys, each a function of one graph only: its size and the multiset of
    its edges ``(j, i)`` in its own node numbering (``j - ptr[g]``, ``i - ptr[g]``), each
    edge hashed and the hashes summed (the edges' order does not matter). The same graph
    gets the same key in any batch and at any position; two different graphs rarely share
    one. ``edge_index [2, E]`` inside the graphs of ``segments`` (sorted by graph).

    Each edge's hash is nonlinear in ``(j, i)`` (multiplications modulo a prime with
    xor-shifts between them): a hash linear in ``j`` and ``i`` would sum to a function of
    the size, the edge count and ``sum_i deg(i) * i`` alone, which many molecules share."""
    P, G = _KEY_PRIME, segments.num_graphs
    ptr = segments.ptr.to(edge_index.device)
    g = segments.batch.to(edge_index.device)[edge_index[1]]
    local = edge_index - ptr[g]
    code = (local[0] * 1_000_003 + local[1] * 7_919 + 1) % P
    for mult, shift in ((48_271, 13), (69_621, 16), (40_692, 11)):  # every product < 2**48: no overflow
        code = (code * mult) % P
        code = code ^ (code >> shift)  # < 2**31
    keys = torch.zeros(G, dtype=torch.long, device=edge_index.device).index_add_(0, g, code) % P
    sizes = torch.as_tensor(segments.sizes, dtype=torch.long, device=edge_index.device)
    return (keys * 69_621 + sizes) % P


def _complete_pairs(n: int) -> tuple[Tensor, Tensor]:
    """Every ordered pair ``(j, i)``, ``i != j``, of ``range(n)``: ``n (n - 1)`` pairs."""
    j, i = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
    keep = j != i
    return j[keep], i[keep]


def expander_edges(segments: GraphSegments, degree_total: int, seed: int = 0,
                   graph_index: Tensor | None = None) -> Tensor:
    """``[2, X]`` (source, target) expander edges of each graph: for a graph of ``n >``
    :data:`COMPLETE_MAX_NODES` nodes, a random ``degree_total``-regular expander,
    ``degree_total / 2`` random permutations ``pi`` of the graph, each giving ``i -> pi(i)``
    and ``pi(i) -> i`` (a node may get a self-pair or a repeated pair); for a smaller graph
    the complete graph (every ordered pair ``i != j`` once), as Exphormer's preprocessing.
    Graph ``g``'s permutations depend on ``(seed, its size, graph_index[g])``; ``graph_index
    [G]`` (a key or index per graph, e.g. :func:`graph_keys`) defaults to the graphs'
    positions ``0..G-1``. ``degree_total`` must be even; ``0``: no expander."""
    if degree_total % 2 or degree_total < 0:
        raise ValueError(f"expander degree must be even and >= 0, got {degree_total}")
    if not segments.is_sorted:
        raise ValueError("the expander needs a batch vector sorted by graph, as PyG's Batch stores it; sort the nodes")
    device = segments.batch.device
    ids = range(segments.num_graphs) if graph_index is None else graph_index.view(-1).tolist()
    if graph_index is not None and len(ids) != segments.num_graphs:
        raise ValueError(f"graph_index has {len(ids)} entries for {segments.num_graphs} graphs")
    ptr = segments.ptr.cpu().tolist()
    out = []
    for g, n in enumerate(segments.sizes):
        if n == 0 or degree_total == 0:
            continue
        if n <= COMPLETE_MAX_NODES:
            a, b = _complete_pairs(n)
            out.append(torch.stack([a, b]) + ptr[g])
            continue
        perm = _permutations(n, degree_total // 2, seed, ids[g]) + ptr[g]  # k, n
        a = (torch.arange(n) + ptr[g]).expand_as(perm).reshape(-1)
        b = perm.reshape(-1)
        out.append(torch.stack([torch.cat([a, b]), torch.cat([b, a])]))
    if not out:
        return torch.empty(2, 0, dtype=torch.long, device=device)
    return torch.cat(out, 1).to(device)


@dataclass
class AttentionGraph:
    """The (key, query) pairs of an Exphormer layer for one batch, shared by every layer.

    ``src [P]`` keys and ``dst [P]`` queries, sorted by ``dst`` (a list: a pair may repeat
    with another edge vector); ``edge_id [P]`` which edge vector each pair carries: ``e <
    num_edges`` graph edge ``e`` (a row of ``edge_attr``), ``num_edges`` the expander's,
    ``num_edges + 1`` the self-loops'; ``row_ptr [N + 1]`` where each query's pairs start
    (CSR); ``segments`` the graphs; ``cache`` what the fast path derives from them once.
    """

    src: Tensor
    dst: Tensor
    edge_id: Tensor
    row_ptr: Tensor
    segments: GraphSegments
    num_edges: int
    degree: int
    seed: int
    cache: dict = field(default_factory=dict, repr=False)

    @property
    def num_nodes(self) -> int:
        return self.segments.num_nodes

    @property
    def num_graphs(self) -> int:
        return self.segments.num_graphs

    @property
    def batch(self) -> Tensor:
        return self.segments.batch

    @property
    def impl(self) -> str:
        """The implementation the layout serves (its segments carry it)."""
        return self.segments.impl


def attention_graph(edge_index: Tensor, segments: GraphSegments, degree: int, seed: int = 0,
                    graph_index: Tensor | None = None, expander: Tensor | None = None) -> AttentionGraph:
    """The pairs (a)-(c) of the module docstring: the graph's edges ``edge_index [2, E]``
    (``j -> i``: ``i`` attends to ``j``), the expander (:func:`expander_edges` of total
    degree ``degree``, each graph's seeded by ``graph_index [G]`` or else its
    :func:`graph_keys`; or the given ``expander [2, X]``) and self-loops, each with its
    ``edge_id``."""
    n, E, dev = segments.num_nodes, edge_index.size(1), edge_index.device
    if expander is None:
        if graph_index is None and degree > 0 and max(segments.sizes, default=0) > COMPLETE_MAX_NODES:
            graph_index = graph_keys(edge_index, segments)
        expander = expander_edges(segments, degree, seed, graph_index).to(dev)
    loops = torch.arange(n, device=dev).expand(2, -1)
    pairs = torch.cat([edge_index, expander, loops], 1)
    ids = torch.cat([torch.arange(E, device=dev), torch.full((expander.size(1),), E, device=dev),
                     torch.full((n,), E + 1, device=dev)])
    order = torch.sort(pairs[1] * n + pairs[0], stable=True).indices  # by query, then key
    src, dst, ids = pairs[0, order], pairs[1, order], ids[order]
    row_ptr = torch.zeros(n + 1, dtype=torch.long, device=dev)
    row_ptr[1:] = torch.bincount(dst, minlength=n).cumsum(0)
    return AttentionGraph(src, dst, ids, row_ptr, segments, E, degree, seed)


def sparse_attention(q: Tensor, k: Tensor, v: Tensor, graph: AttentionGraph, extra_logits: Tensor | None = None,
                     extra_values: Tensor | None = None, edge_keep: Tensor | None = None,
                     extra_keep: Tensor | None = None, edge_scale: Tensor | None = None) -> Tensor:
    r"""Softmax attention over the pairs of ``graph`` plus extra keys per node (the definition).

    Query ``i`` scores key ``j`` of each pair ``p = (j, i)`` with
    ``sum_c q_ic k_jc w_pc / sqrt(d_head)``, ``w_p = edge_scale[edge_id_p]`` (``None``: all
    ones, plain ``q_i . k_j``), and each of its ``r`` extra keys with
    ``extra_logits[i, :, r]`` (value ``extra_values[i, :, r]``); one softmax over both per
    node and head, dropout multipliers ``edge_keep [P, H]`` and ``extra_keep [N, H, r]`` on
    the probabilities.

    Shapes: ``q, k, v [N, H, d_head]``, ``edge_scale [num_edges + 2, H, d_head]``,
    ``extra_logits [N, H, r]``, ``extra_values [N, H, r, d_head]`` -> ``[N, H, d_head]``.
    """
    src, dst = graph.src, graph.dst
    N, H, dh = q.shape
    qk = q[dst] * k[src]  # P, H, dh
    if edge_scale is not None:
        qk = qk * edge_scale[graph.edge_id]
    logits = qk.sum(-1) / math.sqrt(dh)  # P, H
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
        dim, heads: see :class:`~siggate.nn.attention.GatedAttentionBase`.
        impl (str): ``"auto"``/``"packed"`` (the fast path,
            :mod:`siggate.nn.kernels.edge_attention`) or ``"reference"``
            (:func:`sparse_attention` spelled out). (default: ``"auto"``)
        expander_degree_total (int): total degree of the random expander, even (twice
            Exphormer's ``exp_deg``, the number of permutations); ``0``: none. (default: ``6``)
        num_virtual_nodes (int): virtual nodes per graph; ``0``: none. (default: ``1``)
        expander_seed (int): seed of the expanders. (default: ``0``)
        **kwargs: the gate, ``attn_dropout`` and ``bias``: see
            :class:`~siggate.nn.attention.GatedAttentionBase` (``attn_dropout`` drops attention
            probabilities of edges and virtual nodes; ``bias`` is also the edge projection's).

    Shapes: ``x [N, d]``, ``edge_index [2, E]``, ``edge_attr [E, d]`` (optional),
    ``batch [N]`` -> ``[N, d]``.
    """

    node_rows_only = True

    attn_type = "exphormer"
    layout_types = (AttentionGraph,)

    def __init__(
        self,
        dim: int,
        heads: int = GPSOptions.heads,
        impl: str = GPSOptions.impl,
        expander_degree_total: int = ExphormerOptions.expander_degree_total,
        num_virtual_nodes: int = ExphormerOptions.num_virtual_nodes,
        expander_seed: int = ExphormerOptions.expander_seed,
        **kwargs,
    ) -> None:
        super().__init__(dim, heads, **kwargs)
        check_node_impl(impl)
        check_whole("expander_degree_total", expander_degree_total, 0)
        if expander_degree_total % 2:
            raise ValueError(f"expander_degree_total must be even and >= 0, got {expander_degree_total}")
        check_whole("num_virtual_nodes", num_virtual_nodes, 0)
        check_whole("expander_seed", expander_seed, 0)  # (0.5 was truncated to 0)
        if expander_seed >= 2**63:  # (the generator's seed wraps: 2**70 drew seed 0's expanders)
            raise ValueError(f"expander_seed must be below 2**63, got {expander_seed}")
        self.impl = impl
        self.expander_degree_total = expander_degree_total
        self.num_virtual_nodes = num_virtual_nodes
        self.expander_seed = expander_seed
        self.virtual = nn.Parameter(torch.empty(num_virtual_nodes, dim)) if num_virtual_nodes else None
        self.edge_proj = nn.Linear(dim, dim, bias=self.in_proj.bias is not None)  # Exphormer's E (biased as the projections)
        #: edge vectors of graph edges without edge_attr (0), expander edges (1), self-loops (2)
        self.edge_vectors = nn.Parameter(torch.empty(3, dim))
        self.virtual_edges_in = nn.Parameter(torch.empty(num_virtual_nodes, dim)) if num_virtual_nodes else None
        self.virtual_edges_out = nn.Parameter(torch.empty(num_virtual_nodes, dim)) if num_virtual_nodes else None
        self.reset_parameters()

    def reset_attention(self) -> None:
        self.edge_proj.reset_parameters()
        for p in (self.virtual, self.edge_vectors, self.virtual_edges_in, self.virtual_edges_out):
            if p is not None:
                nn.init.normal_(p)

    def build_layout(self, batch: Tensor, edge_index: Tensor | None, num_graphs: int | None, impl: str,
                     graph_index: Tensor | None = None) -> AttentionGraph:
        """The batch's :class:`AttentionGraph` (:func:`attention_graph`), carrying ``impl``;
        ``graph_index [G]``: an identity of each graph that seeds its expander (e.g. its
        dataset index); ``None``: its :func:`graph_keys`, a function of the graph itself."""
        if edge_index is None:
            raise ValueError("the exphormer attention needs the batch's edge_index")
        return attention_graph(edge_index, GraphSegments.from_batch(batch, num_graphs, impl), self.expander_degree_total,
                               self.expander_seed, graph_index)

    def forward(self, x: Tensor, edge_index: Tensor, batch: Tensor | None = None,
                layout: AttentionGraph | None = None, return_details: bool = False, impl: str | None = None,
                edge_attr: Tensor | None = None, graph_index: Tensor | None = None):
        """``x [N, d]``, ``edge_index [2, E]``, ``batch [N]`` (``None``: one graph),
        ``edge_attr [E, d]`` (optional), ``graph_index [G]`` (optional, see
        :meth:`build_layout`) -> ``[N, d]`` (with ``return_details``, ``(out, details)``, see
        :meth:`forward_nodes`)."""
        if layout is None:
            layout = self.make_layout(batch_vector(x, batch), edge_index, impl=impl, details=return_details,
                                      graph_index=graph_index)
        return self.forward_nodes(x, layout, return_details, edge_attr=edge_attr)

    def attention_core(self, x: Tensor, layout: AttentionGraph, edge_attr: Tensor | None = None):
        """``(q, k, v) -> o`` for :meth:`gated`: :meth:`_attend` with the fast path
        (``layout.impl == "packed"``) or :func:`sparse_attention`, the dropout draws and the
        edge scales of ``edge_attr [E, d]`` (the graph edges' vectors, in the order of the
        ``edge_index`` the layout was built from; ``None``: the learned graph-edge vector)."""
        edge_keep = extra_keep = None
        if self.training and self.attn_dropout > 0:
            p, H = self.attn_dropout, self.heads
            edge_keep = dropout_keep((layout.src.numel(), H), p, x)
            extra_keep = dropout_keep((x.size(0), H, self.num_virtual_nodes), p, x) if self.virtual is not None else None
        attend = sparse_attention_fast if layout.impl == "packed" else sparse_attention
        return partial(self._attend, graph=layout, attend=attend, edge_keep=edge_keep, extra_keep=extra_keep,
                       edge_attr=edge_attr)

    def _edge_vectors(self, vectors: Tensor) -> Tensor:
        """``[M, d]`` edge vectors -> ``[M, H, d_head]`` score scales (the edge projection)."""
        return self.edge_proj(vectors).view(vectors.size(0), self.heads, self.head_dim)

    def edge_scale(self, graph: AttentionGraph, edge_attr: Tensor | None) -> Tensor:
        """``[num_edges + 2, H, d_head]``: the projected vectors of the graph edges
        (``edge_attr [E, d]``, or the learned graph-edge vector), the expander and self-loops,
        indexed by ``graph.edge_id``."""
        E = graph.num_edges
        if edge_attr is None:
            graph_edges = self.edge_vectors[:1].expand(E, -1)
        elif edge_attr.dim() != 2 or edge_attr.shape != (E, self.dim):
            raise ValueError(f"edge_attr must be [num_edges, dim] = [{E}, {self.dim}], got {list(edge_attr.shape)} "
                             "(GatedGPSConv: give the attention edge features of that width as attn_edge_attr=)")
        else:
            graph_edges = edge_attr
        return self._edge_vectors(torch.cat([graph_edges.to(self.edge_vectors.dtype), self.edge_vectors[1:]]))

    def extra_rows(self) -> Tensor | None:
        """The virtual nodes ``z [r, d]``: :meth:`gated` projects (and value-gates) them with
        the nodes, so the core receives their ``q, k, v`` after the nodes'."""
        return self.virtual

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, graph: AttentionGraph, attend, edge_keep,
                extra_keep, edge_attr) -> Tensor:
        """``q, k, v [N + r, H, d_head]`` (the nodes', then the virtual nodes', see
        :meth:`extra_rows`) -> ``[N, H, d_head]``: the virtual nodes' keys and values
        (:meth:`virtual_keys`), then ``attend`` (:func:`sparse_attention` or its fast path)
        over the pairs, with their edge scales, and them."""
        logits = values = None
        scale = self.edge_scale(graph, edge_attr)
        if self.virtual is not None:
            n = graph.num_nodes
            logits, values = self.virtual_keys(q[:n], k[:n], v[:n], graph.segments, (q[n:], k[n:], v[n:]), scale[-1])
            q, k, v = q[:n], k[:n], v[:n]
        return attend(q, k, v, graph, logits, values, edge_keep, extra_keep, edge_scale=scale)

    def virtual_keys(self, q: Tensor, k: Tensor, v: Tensor, segments: GraphSegments,
                     virtual: tuple[Tensor, Tensor, Tensor], loop_scale: Tensor | None = None) -> tuple[Tensor, Tensor]:
        r"""The virtual nodes as extra keys of every node: ``(logits [N, H, r], values
        [N, H, r, d_head])``, from the nodes' ``q, k, v [N, H, d_head]`` and the virtual
        nodes' ``virtual = (q, k, v)`` ``[r, H, d_head]`` each (their values gated where the
        gate sits on the values, by :meth:`gated`). Value of virtual node ``r`` in graph ``g``:
        its attention over the graph's nodes (edge scale ``E(virtual_edges_in[r])``) and
        itself (``loop_scale [H, d_head]``), ``u_{g,r}``; logit of node ``i`` for it:
        ``sum_c q_ic k(z_r)_c E(virtual_edges_out[r])_c / sqrt(d_head)``. ``O(N r)``; plain
        autograd."""
        qz, kz, vz = virtual  # r, H, dh
        batch, G = segments.batch, segments.num_graphs
        scale = 1.0 / math.sqrt(self.head_dim)
        w_in, w_out = self._edge_vectors(self.virtual_edges_in), self._edge_vectors(self.virtual_edges_out)
        loop = torch.ones_like(qz[0]) if loop_scale is None else loop_scale
        s = torch.einsum("nhc,rhc->nhr", k, qz * w_in) * scale  # N, H, r: virtual r scores node n
        s_self = (qz * kz * loop).sum(-1).t() * scale  # H, r
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
        logits = torch.einsum("nhc,rhc->nhr", q, kz * w_out) * scale
        return logits, (u.expand(q.size(0), -1, -1, -1) if G == 1 else u[batch])  # a view for one graph

    def extra_repr(self) -> str:
        return (super().extra_repr() + f", expander_degree_total={self.expander_degree_total}, "
                f"num_virtual_nodes={self.num_virtual_nodes}, expander_seed={self.expander_seed}")
