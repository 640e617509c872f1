"""The packed layout: the graphs of a PyG batch regrouped by size for attention.

What it computes: from a PyG ``batch`` vector, a partition of the graphs (sorted by node
count) into contiguous size groups, each padded only to its own largest graph, and the
index tensors that gather ``q, k, v`` of every group from node rows and scatter the
attention output back to node order (:class:`PackedLayout`).

Reference: the padded ``(B, N_max)`` layout of :class:`DenseIndex` (below; PyG's
``to_dense_batch``); attention over a packed layout must equal attention over the padded
batch on every real node. Pinned by ``tests/test_fast_path.py``
(``test_packed_layout_covers_every_node_once``, ``test_batch_of_one_has_no_padding_and_no_mask``
and, through the kernels, every ``*_fast_equals_readable`` test). How the grouping costs
were calibrated: ``benchmarks/README.md`` (step 1 and 10).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor


def segment_amax(x: Tensor, index: Tensor, size: int) -> Tensor:
    """``[size, ...]``: the maximum of the rows of ``x [N, ...]`` with each value of
    ``index [N]`` (``-inf`` where there are none)."""
    out = x.new_full((size,) + x.shape[1:], -math.inf)
    return out.scatter_reduce(0, index.view((-1,) + (1,) * (x.dim() - 1)).expand_as(x), x, "amax")


def check_edge_features(x: Tensor, edge_index: Tensor, edge_attr: Tensor | None, local: str | None = None) -> None:
    """Refuse edge features a local model would broadcast instead of read: a GPS layer's
    ``edge_attr`` is ``[E, d]``, one encoded row per edge at the layer's width (an ``[E, 1]``
    column would be added to every channel, and PyG's ``GINEConv`` refuses it too); and none
    where the layer's ``local`` model reads them (a TypeError inside its sum or linear layer)."""
    if edge_attr is None and local is not None:
        raise ValueError(f"local={local!r} reads edge features: give edge_attr [E, d] = "
                         f"{[edge_index.size(1), x.size(-1)]} (encode them first, e.g. siggate.nn.TypeEncoder; "
                         "graphs without edge features: TypeEncoder(1, d) of a zero type per edge), or local='none'")
    if edge_attr is None:
        return
    want = (edge_index.size(1), x.size(-1))
    if tuple(edge_attr.shape) != want:
        raise ValueError(f"edge_attr must be [E, d] = {list(want)}, the encoded edge features at the layer's width, "
                         f"got {list(edge_attr.shape)}; encode raw edge features first (e.g. nn.Linear or "
                         "siggate.nn.TypeEncoder)")


def batch_vector(x: Tensor, batch: Tensor | None) -> Tensor:
    """``batch [N]``, or every row of ``x [N, ...]`` in graph 0 when it is ``None``."""
    return x.new_zeros(x.size(0), dtype=torch.long) if batch is None else batch


def seeded_generator(seed: int, salt: int) -> torch.Generator:
    """A CPU generator that is a function of ``(seed, salt)`` only."""
    return torch.Generator().manual_seed((int(seed) * 0x9E3779B97F4A7C15 + int(salt)) % 2**63)


def dropout_keep(shape, p: float, like: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """Dropout multiplier of ``shape`` (dtype and device of ``like``): ``1 / (1 - p)`` with
    probability ``1 - p``, else 0; shared by the readable attention types and the kernels.

    ``rand >= p`` is the same Bernoulli(1 - p) draw as ``bernoulli_``, but cheaper on CPU
    (measured in ``benchmarks/README.md``, step 3)."""
    u = torch.rand(shape, dtype=like.dtype, device=like.device, generator=generator)
    return u.ge_(p).mul_(1.0 / (1.0 - p))


#: Cost of one extra attention call, in units of attention scores per head; used to
#: decide how many size groups a :class:`PackedLayout` uses (``benchmarks/README.md``).
GROUP_CALL_COST = 4096
#: Per-row cost (in scores) of a padded row: the gather/scatter and softmax row overhead.
GROUP_ROW_COST = 16


def _partition_sizes(sizes: list[int], call_cost: float, row_cost: float) -> list[int]:
    """Split ascending ``sizes`` into contiguous groups minimising
    ``sum_groups count * n_max * (n_max + row_cost) + call_cost``; returns group ends.

    Dynamic programming over the distinct sizes (a group never splits equal sizes)."""
    if not sizes:
        return []
    ends_u, vals = [], []
    for i, s in enumerate(sizes):  # last index of each distinct size
        if i + 1 == len(sizes) or sizes[i + 1] != s:
            ends_u.append(i + 1)
            vals.append(s * (s + row_cost))
    u = len(ends_u)
    best = [0.0] * (u + 1)
    prev = [0] * (u + 1)
    for j in range(1, u + 1):
        end, w = ends_u[j - 1], vals[j - 1]
        b, arg = None, 0
        for i in range(j):
            c = best[i] + (end - (ends_u[i - 1] if i else 0)) * w + call_cost
            if b is None or c < b:
                b, arg = c, i
        best[j], prev[j] = b, arg
    out, j = [], u
    while j > 0:
        out.append(ends_u[j - 1])
        j = prev[j]
    return out[::-1]


def graph_counts(batch, num_graphs: int | None = None):
    """``[G]``: the nodes of each graph of a batch vector (a tensor, or a NumPy array: its counts
    one too), ``G`` being ``num_graphs`` or, when None, ``batch.max() + 1`` (0 for no node); the
    one place that counts them for every layout.

    Raises:
        ValueError: ``batch`` holds a graph ``>= num_graphs`` (an index error deep inside otherwise).
    """
    bincount = torch.bincount if isinstance(batch, Tensor) else np.bincount
    counts = bincount(batch, minlength=num_graphs or 0)
    if num_graphs is not None and len(counts) > num_graphs:  # (bincount's length: no extra sync)
        raise ValueError(f"num_graphs={num_graphs}, but batch holds graph {len(counts) - 1}: give at least "
                         f"batch.max() + 1 = {len(counts)}, or None to count them")
    return counts


def sorted_by_graph(batch) -> bool:
    """Whether a batch vector (a tensor or a NumPy array) is non-decreasing: each graph's rows
    contiguous and in graph order, as PyG's ``Batch`` stores them."""
    return len(batch) < 2 or bool((batch[1:] >= batch[:-1]).all())


class PackedLayout:
    """Graphs of a PyG batch regrouped for attention (the layout of the fast path).

    Graphs are sorted by node count and split into contiguous groups (dynamic programming
    over the sorted sizes, trading padding against the per-call cost, see
    :data:`GROUP_CALL_COST`). Group ``k`` holds ``g_k`` graphs padded to its largest one,
    ``n_k`` nodes. Node features never take this padded form: the attention gathers
    ``q, k, v`` of each group straight from the node rows (:meth:`gather_index`) and
    gathers its output back (:meth:`out_index`). Built once per forward pass and shared
    by every layer; index tensors are built (with NumPy, on the host) on first use and
    cached.

    Attributes:
        num_nodes (int): nodes of the batch.
        groups (list): ``(g_k, n_k)`` per group.
        nodes (list): per group ``[g_k, n_k]`` node ids (padding points at node 0).
        valid (list): per group ``[g_k, n_k]`` bool, ``True`` for real nodes, or ``None``
            when the group has no padding (all its graphs have ``n_k`` nodes).
    """

    #: the implementation this layout serves (:func:`siggate.nn.impl.resolve_impl`)
    impl = "packed"

    def __init__(self, num_nodes: int, groups: list, nodes_np: list, valid_np: list, device) -> None:
        self.num_nodes = num_nodes
        self.groups = groups
        self.device = torch.device(device)
        self._nodes = nodes_np  # per group (g, n) int64 arrays
        self._valid = valid_np  # per group (g, n) bool arrays or None
        self._cache: dict = {}

    @classmethod
    def from_batch(cls, batch: Tensor, batch_size: int | None = None, call_cost: float | None = None,
                   row_cost: float | None = None) -> "PackedLayout":
        """Layout of a PyG ``batch`` vector; ``call_cost``/``row_cost`` default to
        :data:`GROUP_CALL_COST`/:data:`GROUP_ROW_COST` (``call_cost=0`` gives one group per
        distinct size, a huge value one padded group)."""
        call_cost = GROUP_CALL_COST if call_cost is None else call_cost
        row_cost = GROUP_ROW_COST if row_cost is None else row_cost
        b = batch.detach().cpu().numpy()
        counts = graph_counts(b, batch_size)
        ptr = np.concatenate([[0], np.cumsum(counts)])
        # node ids in graph order: the rows themselves when the batch is sorted (PyG's Batch), else
        # each graph's rows gathered in their order in the batch
        rows = None if sorted_by_graph(b) else np.argsort(b, kind="stable")
        order = np.argsort(counts, kind="stable")
        order = order[counts[order] > 0]
        sizes = counts[order]
        ends = _partition_sizes(sizes.tolist(), call_cost, row_cost)
        groups, nodes, valid, start = [], [], [], 0
        for end in ends:
            members, msz = order[start:end], sizes[start:end]
            n = int(msz[-1])
            ar = np.arange(n)
            ids = ptr[members][:, None] + ar[None, :]  # g, n
            if rows is not None:
                ids = rows[np.minimum(ids, b.size - 1)]  # padding slots are zeroed below
            if msz[0] == n:
                valid.append(None)
            else:
                ok = ar[None, :] < msz[:, None]
                ids[~ok] = 0
                valid.append(ok)
            groups.append((len(members), n))
            nodes.append(ids)
            start = end
        return cls(int(b.size), groups, nodes, valid, batch.device)

    # ------------------------------------------------------------------ helpers

    def _tensor(self, key, build):
        """Cached host-built array as a tensor on the layout's device."""
        if key not in self._cache:
            arr = build()
            t = torch.from_numpy(np.ascontiguousarray(arr))
            self._cache[key] = t.to(self.device) if self.device.type != "cpu" else t
        return self._cache[key]

    @property
    def nodes(self) -> list:
        return [self._tensor(("nodes", k), lambda k=k: self._nodes[k]) for k in range(len(self.groups))]

    @property
    def valid(self) -> list:
        return [None if v is None else self._tensor(("valid", k), lambda v=v: v) for k, v in enumerate(self._valid)]

    def padded_rows(self) -> int:
        """Rows of all groups together (real nodes plus padding)."""
        return sum(g * n for g, n in self.groups)

    def _bias_np(self, k: int, dtype: torch.dtype, heads: int) -> np.ndarray:
        v = self._valid[k]
        np_dtype = {torch.float64: np.float64, torch.float16: np.float16}.get(dtype, np.float32)
        low = torch.finfo(dtype).min if dtype in (torch.float64, torch.float16, torch.float32) else np.finfo(np.float32).min
        b = np.where(v, np_dtype(0), np_dtype(low))  # g, n
        return np.repeat(b[:, None, :], heads, axis=1) if heads else b

    def bias(self, k: int, dtype: torch.dtype) -> Tensor | None:
        """Additive key mask ``[g_k, 1, 1, n_k]`` of group ``k``: 0 for real keys and the
        most negative finite value for padding, so that ``exp`` gives exactly 0 while a
        padded query row (whose output is discarded) stays finite. ``None`` without padding."""
        if self._valid[k] is None:
            return None
        t = self._tensor(("bias", k, dtype), lambda: self._bias_np(k, dtype, 0))
        if t.dtype != dtype:  # bfloat16: no NumPy type
            self._cache[("bias", k, dtype)] = t = t.to(dtype).clamp_(min=torch.finfo(dtype).min)
        g, n = self.groups[k]
        return t.view(g, 1, 1, n)

    def bias_bmm(self, k: int, heads: int, dtype: torch.dtype) -> Tensor | None:
        """:meth:`bias` repeated to ``[g_k * H, 1, n_k]`` (the batched-matmul layout)."""
        if self._valid[k] is None:
            return None
        t = self._tensor(("bias_bmm", k, heads, dtype), lambda: self._bias_np(k, dtype, heads))
        if t.dtype != dtype:
            self._cache[("bias_bmm", k, heads, dtype)] = t = t.to(dtype).clamp_(min=torch.finfo(dtype).min)
        g, n = self.groups[k]
        return t.view(g * heads, 1, n)

    def _gather_np(self, k: int, heads: int, stride: int, heads_inner: bool) -> np.ndarray:
        ids = self._nodes[k]
        j = np.arange(3)[:, None, None, None]
        h = np.arange(heads)
        if heads_inner:
            return (ids[None, :, :, None] * stride + j * heads + h[None, None, None, :]).reshape(-1)  # 3, g, n, H
        return (ids[None, :, None, :] * stride + j * heads + h[None, None, :, None]).reshape(-1)  # 3, g, H, n

    def gather_index(self, k: int, heads: int, stride: int, heads_inner: bool = False) -> Tensor:
        """``[3 * g_k * H * n_k]``: rows of a projection viewed as ``[num_nodes * stride,
        d_head]`` (``stride`` rows per node, ``q | k | v`` first) that form group ``k``'s
        ``q, k, v`` as one ``(3, g_k, H, n_k, d_head)`` block, or ``(3, g_k, n_k, H,
        d_head)`` with ``heads_inner``."""
        return self._tensor(("gather", k, heads, stride, heads_inner),
                            lambda: self._gather_np(k, heads, stride, heads_inner))

    def gather_all(self, heads: int, stride: int) -> Tensor:
        """:meth:`gather_index` of all groups, concatenated (the blocks of :meth:`block_offsets`)."""
        return self._tensor(("gather_all", heads, stride), lambda: np.concatenate(
            [self._gather_np(k, heads, stride, False) for k in range(len(self.groups))]))

    def out_offsets(self, heads: int) -> list[int]:
        """Start row of each group in the concatenated output ``[sum_k g_k H n_k, d_head]``."""
        off, out = 0, []
        for g, n in self.groups:
            out.append(off)
            off += g * heads * n
        return out + [off]

    def block_offsets(self, heads: int) -> list[int]:
        """Start row of each group's ``(3, g_k H, n_k, d_head)`` block in the
        concatenation of all groups' blocks (rows of ``d_head``)."""
        return [3 * o for o in self.out_offsets(heads)]

    def _nodes_or_dummy(self, k: int) -> np.ndarray:
        """Node ids of group ``k`` with padding mapped to ``num_nodes`` (a dummy row)."""
        v = self._valid[k]
        return self._nodes[k] if v is None else np.where(v, self._nodes[k], self.num_nodes)

    def out_index(self, heads: int, heads_inner: bool = False) -> Tensor:
        """``[num_nodes * H]``: for node ``i`` and head ``h``, its row in the concatenated
        output (row ``i * H + h`` of the node-order result). Each group's output is laid
        out ``(g, H, n)`` (batched matmul), or ``(g, n, H)`` with ``heads_inner`` (the
        memory order of the CPU flash kernel's output)."""
        def build():
            idx = np.empty((self.num_nodes + 1) * heads, dtype=np.int64)
            offs = self.out_offsets(heads)
            for k, (g, n) in enumerate(self.groups):
                node = self._nodes_or_dummy(k)  # g, n
                if heads_inner:
                    dst = node[:, :, None] * heads + np.arange(heads)  # g, n, H
                else:
                    dst = node[:, None, :] * heads + np.arange(heads)[None, :, None]  # g, H, n
                idx[dst.reshape(-1)] = np.arange(offs[k], offs[k + 1])
            return idx[: self.num_nodes * heads]
        return self._tensor(("out", heads, heads_inner), build)

    def out_source(self, heads: int) -> tuple[Tensor, Tensor | None]:
        """Inverse of :meth:`out_index`: for each concatenated-output row its node-order
        row (padding points at row 0), and the padding rows (or ``None``)."""
        h = np.arange(heads)[None, :, None]
        src = self._tensor(("src", heads), lambda: np.concatenate(
            [(self._nodes[k][:, None, :] * heads + h).reshape(-1) for k in range(len(self.groups))]))
        if all(v is None for v in self._valid):
            return src, None

        def build_pad():
            offs, pad = self.out_offsets(heads), []
            for k, (g, n) in enumerate(self.groups):
                if self._valid[k] is not None:
                    bad = np.repeat(~self._valid[k][:, None, :], heads, axis=1).reshape(-1)
                    pad.append(np.flatnonzero(bad) + offs[k])
            return np.concatenate(pad)
        return src, self._tensor(("pad", heads), build_pad)

    def block_source(self, heads: int, stride: int) -> Tensor:
        """``[num_nodes * stride]``: for each row of a projection viewed as
        ``[num_nodes * stride, d_head]``, its row in the concatenated blocks of
        :meth:`block_offsets`; rows past ``q | k | v`` (gate rows, ``stride > 3H``) map
        to rows appended after the blocks, ``node * (stride - 3H) + r``. The backward
        gathers its ``q, k, v`` gradients with it (a gather, not a scatter-add)."""
        def build():
            boffs = self.block_offsets(heads)
            extra = stride - 3 * heads
            idx = np.empty(((self.num_nodes + 1) * stride), dtype=np.int64)
            col = (np.arange(3)[:, None, None, None] * heads + np.arange(heads)[None, None, :, None])  # 3, 1, H, 1
            for k, (g, n) in enumerate(self.groups):
                node = self._nodes_or_dummy(k)[None, :, None, :]  # 1, g, 1, n
                idx[(node * stride + col).reshape(-1)] = np.arange(boffs[k], boffs[k + 1])  # order 3, g, H, n
            idx = idx.reshape(self.num_nodes + 1, stride)[: self.num_nodes]
            if extra:
                idx[:, 3 * heads :] = boffs[-1] + np.arange(self.num_nodes * extra).reshape(-1, extra)
            return idx.reshape(-1)
        return self._tensor(("block_src", heads, stride), build)


@dataclass
class DenseIndex:
    """Where each node of a PyG batch sits in the padded ``(B, N_max)`` layout.

    Computed once per forward pass and shared by every layer (PyG's ``to_dense_batch``
    recomputes it in each layer).
    """

    flat: Tensor  # [num_nodes] position in the flattened (B * N_max) layout
    mask: Tensor  # [B, N_max] True for real nodes
    batch_size: int
    max_nodes: int
    impl: str = "reference"  # the padded implementation it serves: "reference" or "sdpa"

    @property
    def num_nodes(self) -> int:
        """Nodes of the batch (as every layout says: :class:`PackedLayout`, :class:`GraphSegments`)."""
        return int(self.flat.numel())

    @classmethod
    def from_batch(cls, batch: Tensor, batch_size: int | None = None, impl: str = "reference") -> "DenseIndex":
        counts = graph_counts(batch, batch_size)
        batch_size = counts.numel()
        max_nodes = int(counts.max()) if counts.numel() else 0
        ptr = torch.zeros(batch_size + 1, dtype=torch.long, device=batch.device)
        ptr[1:] = counts.cumsum(0)
        pos = torch.arange(batch.numel(), device=batch.device) - ptr[batch]
        if not sorted_by_graph(batch):  # a graph's rows not contiguous
            order = torch.argsort(batch, stable=True)
            pos = torch.empty_like(batch)
            pos[order] = torch.arange(batch.numel(), device=batch.device) - ptr[batch[order]]
        flat = batch * max_nodes + pos
        mask = torch.zeros(batch_size * max_nodes, dtype=torch.bool, device=batch.device)
        mask[flat] = True
        return cls(flat, mask.view(batch_size, max_nodes), batch_size, max_nodes, impl)

    def to_dense(self, x: Tensor) -> Tensor:
        """``[num_nodes, d] -> [B, N_max, d]`` (zeros at padding)."""
        out = x.new_zeros(self.batch_size * self.max_nodes, x.size(-1))
        out[self.flat] = x
        return out.view(self.batch_size, self.max_nodes, x.size(-1))  # (no -1: a batch of no node has 0 elements)

    def to_sparse(self, x: Tensor) -> Tensor:
        """``[B, N_max, d] -> [num_nodes, d]``."""
        return x.reshape(self.batch_size * self.max_nodes, x.size(-1))[self.flat]


class GraphSegments:
    """The graphs of a PyG batch as contiguous runs of node rows (the layout of the
    ``"performer"`` attention, and part of ``"exphormer"``'s).

    PyG's ``Batch`` stores each graph's nodes contiguously and in graph order, so graph
    ``g`` is rows ``ptr[g]:ptr[g + 1]``. :attr:`is_sorted` says whether ``batch`` really is
    ordered like that (the readable references use only ``batch`` and work either way;
    the fast paths need it).

    Attributes:
        batch (Tensor): ``[N]`` graph of each node.
        ptr (Tensor): ``[G + 1]`` first row of each graph (valid when :attr:`is_sorted`).
        num_graphs (int): ``G``.
        sizes (list): nodes per graph (host ints).
        is_sorted (bool): ``batch`` is non-decreasing.
        impl (str): the implementation it serves: ``"packed"`` (the fast path) or
            ``"reference"``.
    """

    def __init__(self, batch: Tensor, num_graphs: int | None = None, impl: str = "packed") -> None:
        counts = graph_counts(batch, num_graphs)
        self.batch = batch
        self.num_graphs = counts.numel()
        self.num_nodes = int(batch.numel())
        self.ptr = torch.cat([counts.new_zeros(1), counts.cumsum(0)])
        self.sizes = counts.tolist()
        self.is_sorted = sorted_by_graph(batch)
        self.impl = impl

    @classmethod
    def from_batch(cls, batch: Tensor, num_graphs: int | None = None, impl: str = "packed") -> "GraphSegments":
        return cls(batch, num_graphs, impl)

    def runs(self, min_nodes: int) -> tuple[list[tuple[int, int, int]], Tensor | None]:
        """``(big, small)``: ``(graph, first row, end row)`` of every graph with at least
        ``min_nodes`` nodes, and the rows of all other graphs (``None`` if none)."""
        if not self.is_sorted:
            raise ValueError("the fast path needs a batch vector sorted by graph, as PyG's Batch stores it; "
                             "sort the nodes or use impl='reference'")
        starts = self.ptr.tolist()
        big = [(g, starts[g], starts[g + 1]) for g, n in enumerate(self.sizes) if n >= min_nodes]
        if len(big) == self.num_graphs:
            return big, None
        is_small = torch.tensor([n < min_nodes for n in self.sizes], device=self.batch.device)
        small = is_small[self.batch].nonzero().view(-1)
        return big, small if small.numel() else None  # None also when the small graphs are empty
