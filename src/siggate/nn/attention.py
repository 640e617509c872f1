"""Gated multi-head self-attention (the SigGate-GT attention block).

Each head ``k`` computes softmax attention ``O_k = softmax(Q_k K_k^T / sqrt(d_head)) V_k``;
SigGate-GT multiplies it element by element by an input-conditioned sigmoid gate
``G_k = sigmoid(X W_Gk + b_Gk)`` before the heads are concatenated and projected.
A softmax row is a convex combination of value vectors, so an ungated head can never
"attend to nothing"; the gate, with values in (0, 1), lets it scale its output down.

The gate logits are extra output columns of the fused input projection (as in the
gated-attention language-model code): one column per head for ``gate="headwise"``
(``d*H + H`` extra parameters) and one per head dimension for ``gate="elementwise"``
(``d*d + d`` extra parameters). ``gate="none"`` is exactly ungated multi-head attention,
i.e. what GraphGPS uses.

Two computations of the same attention are kept side by side:

* the **readable path** (:meth:`GatedMultiheadAttention.forward` with ``fused=False`` or
  ``return_details=True``) spells out ``q k^T``, the mask, softmax and dropout on the
  usual ``(B, N_max, d)`` zero-padded batch; it is the test oracle and what analyses read;
* the **packed fast path** (:meth:`GatedMultiheadAttention.forward_packed`, used by the
  model) works on node rows ``[num_nodes, d]``: projections and gates run on real nodes
  only, and only the attention itself sees a padded layout, a :class:`PackedLayout` in
  which the graphs of a batch are sorted by size and split into groups, each padded only
  to its own largest graph (a group of equal-sized graphs, e.g. a batch of one, has no
  padding and no mask). ``tests/test_fast_path.py`` pins it to the readable path.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..options import GATE_KINDS, GATE_POSITIONS  # shared with siggate.config

#: Cost of one extra attention call, in units of attention scores per head; used to
#: decide how many size groups a :class:`PackedLayout` uses (``benchmarks/README.md``).
GROUP_CALL_COST = 4096
#: Per-row cost (in scores) of a padded row: the gather/scatter and softmax row overhead.
GROUP_ROW_COST = 16
#: On CPU in training, groups with more nodes than this use the chunked kernel
#: (memory ``O(n * chunk)`` instead of ``O(n^2)``, see :class:`_GroupedAttention`).
CHUNKED_MIN_NODES = 384
#: Query rows per chunk of the chunked kernel.
CHUNK_ROWS = 128


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
        if batch_size is None:
            batch_size = int(b.max()) + 1 if b.size else 0
        counts = np.bincount(b, minlength=batch_size)
        ptr = np.concatenate([[0], np.cumsum(counts)])
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


def _dropout_keep(shape, p: float, like: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """Dropout multiplier: ``1 / (1 - p)`` with probability ``1 - p``, else 0.

    ``rand >= p`` is the same Bernoulli(1 - p) draw as ``bernoulli_``, about 3x faster on
    CPU (``benchmarks/README.md``)."""
    u = torch.rand(shape, dtype=like.dtype, device=like.device, generator=generator)
    return u.ge_(p).mul_(1.0 / (1.0 - p))


def _chunk_forward(q, k, v, bias, p, scale, chunk, gen, out):
    """Chunked ``dropout(softmax(q k^T scale + bias)) v`` into ``out``; returns the
    per-row log-sum-exp. ``q, k, v, out (B, n, d_head)``, ``bias (B, 1, n)`` or None."""
    n = q.size(1)
    lse = q.new_empty(q.shape[:2])
    kt = k.transpose(1, 2)
    for s in range(0, n, chunk):
        sc = torch.bmm(q[:, s : s + chunk], kt).mul_(scale)  # B, c, n
        if bias is not None:
            sc.add_(bias)
        m = sc.logsumexp(dim=-1, keepdim=True)
        lse[:, s : s + chunk] = m.squeeze(-1)
        a = sc.sub_(m).exp_()
        if p > 0.0:
            a.mul_(_dropout_keep(a.shape, p, a, gen))
        torch.bmm(a, v, out=out[:, s : s + chunk])
    return lse


def _chunk_backward(q, k, v, bias, out, lse, d_out, p, scale, chunk, gen, dq, dk, dv):
    """Backward of :func:`_chunk_forward`, recomputing probabilities and dropout masks
    chunk by chunk (``gen`` replays the forward's draws); writes ``dq, dk, dv``."""
    n = q.size(1)
    kt = k.transpose(1, 2)
    delta = (d_out * out).sum(-1, keepdim=True)  # B, n, 1
    dk.zero_()
    dv.zero_()
    for s in range(0, n, chunk):
        sl = slice(s, s + chunk)
        sc = torch.bmm(q[:, sl], kt).mul_(scale)
        if bias is not None:
            sc.add_(bias)
        a = sc.sub_(lse[:, sl, None]).exp_()  # probabilities, B, c, n
        do = d_out[:, sl]
        dp = torch.bmm(do, v.transpose(1, 2))  # B, c, n
        if p > 0.0:
            keep = _dropout_keep(a.shape, p, a, gen)
            dv.baddbmm_((a * keep).transpose(1, 2), do)
            dp.mul_(keep)
        else:
            dv.baddbmm_(a.transpose(1, 2), do)
        ds = dp.sub_(delta[:, sl]).mul_(a)
        torch.baddbmm(dq[:, sl], ds, k, beta=0.0, alpha=scale, out=dq[:, sl])
        dk.baddbmm_(ds.transpose(1, 2), q[:, sl], alpha=scale)


def _qkv_rows(proj: Tensor, d: int, dh: int) -> tuple[Tensor, int, bool]:
    """``proj [num_nodes, 3d + g]`` as rows of ``d_head`` values: ``(rows, stride, copied)``
    with ``q, k, v`` of node ``i``, part ``j``, head ``h`` at row ``i * stride + j H + h``.
    Without a copy when the width is a multiple of ``d_head`` (no gate, elementwise gate);
    otherwise (headwise gate) the ``q | k | v`` columns are copied out first."""
    n, width = proj.shape
    if proj.is_contiguous() and width % dh == 0:
        return proj.view(n * (width // dh), dh), width // dh, False
    return proj[:, : 3 * d].contiguous().view(n * (3 * d // dh), dh), 3 * d // dh, True


def _project(x: Tensor, weight: Tensor, bias: Tensor | None, dh: int) -> tuple[Tensor, Tensor, int]:
    """The input projection ``x W^T + b`` ``[N, 3d + g]`` written with a row stride that is
    a multiple of ``d_head`` (padding columns when needed, e.g. a headwise gate), so that
    it is also ``rows [N * stride, d_head]`` without a copy. Returns ``(proj, rows, stride)``."""
    n, width = x.size(0), weight.size(0)
    stride = -(-width // dh)
    if stride * dh == width:
        proj = torch.addmm(bias, x, weight.t()) if bias is not None else x.mm(weight.t())
        return proj, proj.view(n * stride, dh), stride
    buf = x.new_empty(n, stride * dh)
    proj = buf[:, :width]
    if bias is not None:
        torch.addmm(bias, x, weight.t(), out=proj)
    else:
        torch.mm(x, weight.t(), out=proj)
    return proj, buf.view(n * stride, dh), stride


def _core_forward(rows: Tensor, stride: int, layout: PackedLayout, heads: int, p: float, scale: float,
                  train: bool):
    """Softmax attention (with dropout ``p``) of every size group of ``layout``, reading
    ``q, k, v`` from projection ``rows`` (see :func:`_qkv_rows`).

    One gather builds every group's ``(3, g H, n, d_head)`` block; per group a
    ``baddbmm`` (scale and key mask in one call), softmax, dropout and ``bmm`` write into
    the concatenated output; one gather returns node order. Groups with at least
    :data:`CHUNKED_MIN_NODES` nodes run chunked (training, or dropout) or through the CPU
    flash kernel (inference): memory ``O(n)``, not ``O(n^2)``.

    Returns ``(o [num_nodes * H, d_head], state)``; ``state`` feeds
    :func:`_core_backward` when ``train``.
    """
    dh = rows.size(1)
    offs, boffs = layout.out_offsets(heads), layout.block_offsets(heads)
    blks = rows.index_select(0, layout.gather_all(heads, stride))
    outs = rows.new_empty(offs[-1], dh)
    saved, plan, seed = [], [], None
    for k, (g, n) in enumerate(layout.groups):
        q, kk, v = blks[boffs[k] : boffs[k + 1]].view(3, g * heads, n, dh).unbind(0)
        o = outs[offs[k] : offs[k + 1]].view(g * heads, n, dh)
        bias = layout.bias_bmm(k, heads, rows.dtype)
        if n >= CHUNKED_MIN_NODES:
            if train:
                if seed is None:
                    seed = int(torch.randint(0, 2**62, (1,)).item())
                gen = torch.Generator(device=rows.device).manual_seed(seed + k)
                saved.append(_chunk_forward(q, kk, v, bias, p, scale, CHUNK_ROWS, gen, o))
                plan.append("chunk")
            elif p > 0.0:
                _chunk_forward(q, kk, v, bias, p, scale, CHUNK_ROWS, None, o)
            else:  # 4-D, or SDPA would pick its O(n^2) math kernel
                v4 = [t.view(g, heads, n, dh) for t in (q, kk, v)]
                o.view(g, heads, n, dh).copy_(F.scaled_dot_product_attention(*v4, attn_mask=layout.bias(k, rows.dtype)))
            continue
        if bias is None:
            s = torch.baddbmm(o.new_empty(1, 1, 1), q, kk.transpose(1, 2), beta=0.0, alpha=scale)
        else:
            s = torch.baddbmm(bias, q, kk.transpose(1, 2), alpha=scale)  # gH, n, n
        a = torch.softmax(s, dim=-1)
        if p > 0.0:
            ad = a * _dropout_keep(a.shape, p, a) if train else a.mul_(_dropout_keep(a.shape, p, a))
        else:
            ad = a
        torch.bmm(ad, v, out=o)
        if train:
            saved += [a, ad]
            plan.append("math")
    return outs.index_select(0, layout.out_index(heads)), (blks, outs, saved, plan, seed)


def _core_backward(d_o: Tensor, layout: PackedLayout, heads: int, p: float, scale: float, state,
                   extra_rows: int = 0) -> Tensor:
    """Backward of :func:`_core_forward` for ``d_o [num_nodes * H, d_head]``.

    ``dS = P_d * dP - P * rowsum(P_d * dP)`` (``P_d`` the dropped probabilities); each
    group's ``dq, dk, dv`` go into one buffer laid out like the forward's blocks, with
    ``extra_rows`` free rows appended (for gate gradients); gather it with
    :meth:`PackedLayout.block_source` to get projection-row gradients. Padding never
    leaks: padded query rows get a zero output gradient, masked keys have probability 0.
    """
    blks, outs, saved, plan, seed = state
    dh = d_o.size(1)
    src, pad = layout.out_source(heads)
    d_outs = d_o.index_select(0, src)
    if pad is not None:
        d_outs.index_fill_(0, pad, 0.0)
    offs, boffs = layout.out_offsets(heads), layout.block_offsets(heads)
    d_blks = d_o.new_empty(boffs[-1] + extra_rows, dh)
    i = 0
    for k, ((g, n), mode) in enumerate(zip(layout.groups, plan)):
        do = d_outs[offs[k] : offs[k + 1]].view(g * heads, n, dh)
        q, kk, v = blks[boffs[k] : boffs[k + 1]].view(3, g * heads, n, dh).unbind(0)
        dq, dk, dv = d_blks[boffs[k] : boffs[k + 1]].view(3, g * heads, n, dh).unbind(0)
        if mode == "chunk":
            gen = torch.Generator(device=d_o.device).manual_seed(seed + k)
            o = outs[offs[k] : offs[k + 1]].view(g * heads, n, dh)
            _chunk_backward(q, kk, v, layout.bias_bmm(k, heads, d_o.dtype), o, saved[i], do, p, scale, CHUNK_ROWS,
                            gen, dq, dk, dv)
            i += 1
        else:
            a, ad = saved[i : i + 2]
            i += 2
            torch.bmm(ad.transpose(1, 2), do, out=dv)
            x = torch.bmm(do, v.transpose(1, 2)).mul_(ad)  # P_d * dP, gH, n, n
            ds = x.addcmul_(a, x.sum(-1, keepdim=True), value=-1.0)
            torch.baddbmm(dq, ds, kk, beta=0.0, alpha=scale, out=dq)
            torch.baddbmm(dk, ds.transpose(1, 2), q, beta=0.0, alpha=scale, out=dk)
    return d_blks


def _gate_apply(o: Tensor, gate: Tensor, heads: int) -> Tensor:
    n, d = o.shape
    return (o.view(n, heads, d // heads) * gate.view(n, heads, -1)).view(n, d)


def _gate_backward(d_og: Tensor, o: Tensor, gate: Tensor, heads: int) -> tuple[Tensor, Tensor]:
    """Gradients of ``o * gate`` (gate per head or per head dimension): ``(d_o, d_gate)``."""
    n, d = o.shape
    go = d_og.view(n, heads, d // heads)
    dg = go * o.view(n, heads, d // heads)
    dg = dg.sum(-1) if gate.size(1) == heads and d // heads > 1 else dg.view(n, -1)
    return (go * gate.view(n, heads, -1)).view(n, d), dg.view(n, -1)


class _GroupedAttention(torch.autograd.Function):
    """:func:`_core_forward` on a given projection, optionally gated, as one autograd
    node with the backward written out (:func:`_core_backward`).

    Input ``proj [num_nodes, 3d + g]`` (``q | k | v | gate logits``); outputs the
    attention ``[num_nodes, d]`` (multiplied by the gate when ``gate_output``) and the
    gate ``sigmoid(logits) [num_nodes, g]``. Used for the ``"value"`` and ``"post"`` gate
    positions; the output gate and no gate take :class:`_AttentionBranch`.
    """

    @staticmethod
    def forward(ctx, proj, layout, heads, p, scale, gate_dim, gate_output):
        n_nodes, width = proj.shape
        d = (width - gate_dim) // 3
        dh = d // heads
        rows, stride, copied = _qkv_rows(proj, d, dh)
        o, state = _core_forward(rows, stride, layout, heads, p, scale, True)
        out = o.view(n_nodes, d)
        gate = o_plain = None
        if gate_dim:
            gate = torch.sigmoid(proj[:, 3 * d :])
            if gate_output:
                o_plain, out = out, _gate_apply(out, gate, heads)
        blks, outs, saved, plan, seed = state
        ctx.save_for_backward(blks, outs, gate, o_plain, *saved)
        ctx.layout, ctx.heads, ctx.p, ctx.scale, ctx.plan, ctx.seed = layout, heads, p, scale, plan, seed
        ctx.dims = (n_nodes, width, d, dh, stride, copied, gate_dim)
        if gate is None:
            return out, proj.new_empty(n_nodes, 0)
        return out, gate

    @staticmethod
    def backward(ctx, grad_out, grad_gate):
        layout, heads = ctx.layout, ctx.heads
        blks, outs, gate, o_plain, *saved = ctx.saved_tensors
        n_nodes, width, d, dh, stride, copied, gate_dim = ctx.dims
        grad_out = grad_out.contiguous()
        d_gate = grad_gate if gate_dim else None
        if o_plain is not None:
            grad_out, dg = _gate_backward(grad_out, o_plain, gate, heads)
            d_gate = dg if d_gate is None else d_gate + dg
        extra = 0 if copied else stride - 3 * heads  # gate rows carried through the gather
        state = (blks, outs, saved, ctx.plan, ctx.seed)
        d_blks = _core_backward(grad_out.view(n_nodes * heads, dh), layout, heads, ctx.p, ctx.scale, state,
                                n_nodes * extra)
        d_logits = None
        if gate_dim:
            d_logits = (torch.ops.aten.sigmoid_backward(d_gate, gate) if d_gate is not None
                        else gate.new_zeros(gate.shape))
            if extra:
                d_blks[-n_nodes * extra :].view(n_nodes, gate_dim).copy_(d_logits)
        d_rows = d_blks.index_select(0, layout.block_source(heads, stride))  # n_nodes * stride, dh
        if not copied:
            return d_rows.view(n_nodes, width), None, None, None, None, None, None
        d_proj = d_rows.view(n_nodes, 3 * d)
        if gate_dim:
            d_proj = torch.cat([d_proj, d_logits], 1)
        return d_proj, None, None, None, None, None, None


class _AttentionBranch(torch.autograd.Function):
    """The whole attention branch ``[x +] out_proj(attention(in_proj(x)) * gate)`` as one
    autograd node (no gate, or the output gate), with the backward written out.

    Replaces about twenty autograd nodes and their bookkeeping (two linear layers with
    their transposes, the slices and views of ``q, k, v`` and of the gate, sigmoid,
    product, residual) by one; the projection is written with a ``d_head``-aligned row
    stride (:func:`_project`), so even a headwise gate needs no copy of ``q, k, v``.
    """

    @staticmethod
    def forward(ctx, x, w_in, b_in, w_out, b_out, layout, heads, p, gate_dim, residual):
        n_nodes, d = x.size(0), w_out.size(0)
        dh = d // heads
        scale = 1.0 / math.sqrt(dh)
        proj, rows, stride = _project(x, w_in, b_in, dh)
        o, state = _core_forward(rows, stride, layout, heads, p, scale, True)
        o = o.view(n_nodes, d)
        gate = None
        og = o
        if gate_dim:
            gate = torch.sigmoid(proj[:, 3 * d :])
            og = _gate_apply(o, gate, heads)
        y = torch.addmm(b_out, og, w_out.t()) if b_out is not None else og.mm(w_out.t())
        if residual:
            y.add_(x)
        blks, outs, saved, plan, seed = state
        ctx.save_for_backward(x, w_in, w_out, og, o if gate_dim else None, gate, blks, outs, *saved)
        ctx.layout, ctx.heads, ctx.p, ctx.scale, ctx.plan, ctx.seed = layout, heads, p, scale, plan, seed
        ctx.dims = (n_nodes, d, dh, stride, gate_dim, residual, b_in is not None, b_out is not None)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, w_in, w_out, og, o, gate, blks, outs, *saved = ctx.saved_tensors
        n_nodes, d, dh, stride, gate_dim, residual, has_b_in, has_b_out = ctx.dims
        heads = ctx.heads
        width = 3 * d + gate_dim
        dy = dy.contiguous()
        d_og = dy.mm(w_out)
        dw_out = dy.t().mm(og)
        db_out = dy.sum(0) if has_b_out else None
        d_o, d_logits = d_og, None
        if gate_dim:
            d_o, dg = _gate_backward(d_og, o, gate, heads)
            d_logits = torch.ops.aten.sigmoid_backward(dg, gate)
        extra = stride - 3 * heads
        state = (blks, outs, saved, ctx.plan, ctx.seed)
        d_blks = _core_backward(d_o.view(n_nodes * heads, dh), ctx.layout, heads, ctx.p, ctx.scale, state,
                                n_nodes * extra)
        if extra:
            d_blks[-n_nodes * extra :].view(n_nodes, extra * dh)[:, :gate_dim].copy_(d_logits)
        d_proj = d_blks.index_select(0, ctx.layout.block_source(heads, stride)).view(n_nodes, stride * dh)
        if stride * dh != width:
            d_proj = d_proj[:, :width]
        dw_in = d_proj.t().mm(x)
        db_in = d_proj.sum(0) if has_b_in else None
        dx = torch.addmm(dy, d_proj, w_in) if residual else d_proj.mm(w_in)
        return dx, dw_in, db_in, dw_out, db_out, None, None, None, None, None


def grouped_attention(proj: Tensor, layout: PackedLayout, heads: int, dropout_p: float,
                      gate_dim: int = 0, gate_output: bool = False) -> tuple[Tensor, Tensor | None]:
    """Softmax attention of every graph with itself, over a :class:`PackedLayout`.

    ``proj [num_nodes, 3d + gate_dim]`` (``q | k | v | gate logits``) ->
    ``(attention [num_nodes, d], sigmoid(gate logits) [num_nodes, gate_dim] or None)``;
    with ``gate_output`` the attention is returned already multiplied by the gate (per
    head, or per head dimension). Kernels:

    * CPU with gradients: :class:`_GroupedAttention` (hand-written backward, fast
      dropout; chunked for large groups, so memory is not ``O(n^2)``);
    * CPU without gradients: :func:`_core_forward` (batched matmuls per group, about
      1.7x faster than the flash kernel at ``d_head = 16`` and tens of nodes; the flash
      kernel, memory ``O(n)``, for large groups);
    * accelerators: one :func:`F.scaled_dot_product_attention` per group on the gathered
      ``q, k, v`` under autograd (the fused kernels, which also do dropout).
    """
    n_nodes, width = proj.shape
    d = (width - gate_dim) // 3
    dh = d // heads
    scale = 1.0 / math.sqrt(dh)
    if not layout.groups:  # no nodes
        o = proj[:, :d] * 0.0
    elif proj.device.type == "cpu" and torch.is_grad_enabled() and proj.requires_grad:
        o, gate = _GroupedAttention.apply(proj, layout, heads, dropout_p, scale, gate_dim, gate_output)
        return o, (gate if gate_dim else None)
    elif proj.device.type == "cpu":
        rows, stride, _ = _qkv_rows(proj, d, dh)
        o = _core_forward(rows, stride, layout, heads, dropout_p, scale, False)[0].view(n_nodes, d)
    else:
        o = _grouped_attention_sdpa(proj, layout, heads, dropout_p, d, dh)
    gate = torch.sigmoid(proj[:, 3 * d :]) if gate_dim else None
    if gate is not None and gate_output:
        o = _gate_apply(o, gate, heads)
    return o, gate


def _grouped_attention_sdpa(proj, layout, heads, dropout_p, d, dh) -> Tensor:
    """Accelerator attention: SDPA per group under autograd (see :func:`grouped_attention`)."""
    rows, stride, _ = _qkv_rows(proj, d, dh)
    outs = []
    for k, (g, n) in enumerate(layout.groups):
        blk = rows.index_select(0, layout.gather_index(k, heads, stride, heads_inner=True))
        q, kk, v = blk.view(3, g, n, heads, dh).transpose(2, 3).unbind(0)  # g, H, n, dh (memory g, n, H, dh)
        o = F.scaled_dot_product_attention(q, kk, v, attn_mask=layout.bias(k, proj.dtype), dropout_p=dropout_p)
        outs.append(o.transpose(1, 2).reshape(-1, dh))  # g, n, H: no copy, the output follows q's layout
    o = outs[0] if len(outs) == 1 else torch.cat(outs)
    return o.index_select(0, layout.out_index(heads, heads_inner=True)).view(proj.size(0), d)


class GatedMultiheadAttention(nn.Module):
    r"""Multi-head self-attention with an optional input-conditioned sigmoid gate.

    From "SigGate-GT" (a GraphGPS graph transformer with sigmoid-gated attention); the gate
    follows the gated attention of Qiu et al., "Gated Attention for Large Language Models"
    (https://arxiv.org/abs/2505.06708).

    Args:
        dim (int): model width ``d``; must be divisible by ``heads``.
        heads (int): number of heads ``H`` (``d_head = d / H``). (default: ``4``)
        gate (str): ``"none"``, ``"headwise"`` (one scalar gate per head and node) or
            ``"elementwise"`` (one gate per head dimension and node). (default: ``"elementwise"``)
        gate_position (str): where the gate multiplies. ``"output"`` gates each head's
            attention output before concatenation (the paper's choice), ``"value"`` gates
            the values before attention, ``"post"`` gates after the output projection.
            (default: ``"output"``)
        gate_bias_init (float): initial gate bias ``b_G``. The gate starts at
            ``sigmoid(X W_G + b_G)``; with the default ``0.0`` it is centred on
            ``sigmoid(0) = 0.5``, a large positive value starts it fully open (1.0).
            (default: ``0.0``)
        gate_weight_std (float, optional): if given, the gate weights start from
            ``N(0, gate_weight_std^2)``; ``0.0`` makes the initial gate the constant
            ``sigmoid(gate_bias_init)``. If ``None``, Xavier-uniform like ``q, k, v``.
            (default: ``None``)
        attn_dropout (float): dropout on the attention probabilities. (default: ``0.0``)
        bias (bool): biases in the projections. (default: ``True``)
        fused (bool): use ``F.scaled_dot_product_attention``; the readable path is used
            instead when ``False`` or when details are requested. (default: ``True``)

    Shapes:
        - input ``x``: ``(B, N, d)``, ``mask``: ``(B, N)`` bool, ``True`` for real nodes
          (PyG's ``to_dense_batch`` convention) or ``None``;
        - output: ``(B, N, d)``; with ``return_details=True`` also a dict with
          ``attn`` ``(B, H, N, N)``, ``head_out`` (before the gate) and ``head_out_gated``
          ``(B, N, H, d_head)`` and ``gate`` (``(B, N, H, d_head)`` or ``(B, N, H, 1)``,
          ``None`` for ``gate="none"``).
    """

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
        fused: bool = True,
    ) -> None:
        super().__init__()
        if dim % heads != 0:
            raise ValueError(f"dim ({dim}) must be divisible by heads ({heads})")
        if gate not in GATE_KINDS:
            raise ValueError(f"gate must be one of {GATE_KINDS}, got {gate!r}")
        if gate_position not in GATE_POSITIONS:
            raise ValueError(f"gate_position must be one of {GATE_POSITIONS}, got {gate_position!r}")
        if not 0.0 <= attn_dropout < 1.0:
            raise ValueError(f"attn_dropout must be in [0, 1), got {attn_dropout}")
        self.dim = dim
        self.heads = heads
        self.head_dim = dim // heads
        self.gate = gate
        self.gate_position = gate_position
        self.gate_bias_init = float(gate_bias_init)
        self.gate_weight_std = gate_weight_std
        self.attn_dropout = attn_dropout
        self.fused = fused
        self.gate_dim = {"none": 0, "headwise": heads, "elementwise": dim}[gate]
        # One matmul computes q, k, v and the gate logits.
        self.in_proj = nn.Linear(dim, 3 * dim + self.gate_dim, bias=bias)
        self.out_proj = nn.Linear(dim, dim, bias=bias)
        self.reset_parameters()

    def reset_parameters(self, reset_gate: bool = True) -> None:
        """Re-initialise ``q, k, v`` and output projections like ``nn.MultiheadAttention``,
        then (if ``reset_gate``) the gate. The gate comes last so that gated and ungated
        models built from the same seed share every other initial weight."""
        d = self.dim
        w = self.in_proj.weight
        with torch.no_grad():
            qkv = torch.empty(3 * d, d, dtype=w.dtype, device=w.device)
            nn.init.xavier_uniform_(qkv)
            w[: 3 * d].copy_(qkv)
            if self.in_proj.bias is not None:
                self.in_proj.bias[: 3 * d].zero_()
        self.out_proj.reset_parameters()
        if self.out_proj.bias is not None:
            nn.init.zeros_(self.out_proj.bias)
        if reset_gate:
            self.reset_gate()

    def reset_gate(self) -> None:
        """Re-initialise the gate weights and set the gate bias to ``gate_bias_init``."""
        if self.gate_dim == 0:
            return
        d = self.dim
        w = self.in_proj.weight
        with torch.no_grad():
            g = torch.empty(self.gate_dim, d, dtype=w.dtype, device=w.device)
            if self.gate_weight_std is None:
                nn.init.xavier_uniform_(g)
            else:
                nn.init.normal_(g, 0.0, self.gate_weight_std)
            w[3 * d :].copy_(g)
            if self.in_proj.bias is not None:
                self.in_proj.bias[3 * d :].fill_(self.gate_bias_init)

    def gate_parameters(self) -> int:
        """Number of parameters the gate adds (``d*d + d``, ``d*H + H`` or 0)."""
        return self.gate_dim * (self.dim + (1 if self.in_proj.bias is not None else 0))

    def _split(self, x: Tensor):
        B, N, _ = x.shape
        d, H, dh = self.dim, self.heads, self.head_dim
        proj = self.in_proj(x)  # B, N, 3d + g
        q, k, v = (proj[..., i * d : (i + 1) * d].view(B, N, H, dh) for i in range(3))
        gate = None
        if self.gate_dim:
            gate = torch.sigmoid(proj[..., 3 * d :]).view(B, N, H, -1)  # B, N, H, dh|1
        return q, k, v, gate

    def forward(self, x: Tensor, mask: Tensor | None = None, return_details: bool = False):
        B, N, _ = x.shape
        q, k, v, gate = self._split(x)
        if gate is not None and self.gate_position == "value":
            v = v * gate
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # B, H, N, dh
        p_drop = self.attn_dropout if self.training else 0.0
        attn = None
        if self.fused and not return_details:
            attn_mask = None if mask is None else mask[:, None, None, :]  # B, 1, 1, N
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=p_drop)
        else:
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim)  # B, H, N, N
            if mask is not None:
                scores = scores.masked_fill(~mask[:, None, None, :], float("-inf"))
            attn = scores.softmax(dim=-1)
            o = F.dropout(attn, p_drop, training=self.training) @ v
        o = o.transpose(1, 2)  # B, N, H, dh
        head_out = o
        if gate is not None and self.gate_position == "output":
            o = o * gate
        out = self.out_proj(o.reshape(B, N, self.dim))
        if gate is not None and self.gate_position == "post":
            out = (out.view(B, N, self.heads, self.head_dim) * gate).view(B, N, self.dim)
        if not return_details:
            return out
        return out, {"attn": attn, "head_out": head_out, "head_out_gated": o, "gate": gate}

    def forward_packed(self, x: Tensor, layout: PackedLayout, out_weight: Tensor | None = None,
                       out_bias: Tensor | None = None, residual: bool = False) -> Tensor:
        """The fast path: the same attention on node rows, using a :class:`PackedLayout`.

        Projections, gates and the output projection run on the ``num_nodes`` real rows;
        only the attention itself sees each size group's padded shape
        (:func:`grouped_attention`). ``out_weight``/``out_bias`` replace the output
        projection's parameters (the GPS layer passes BatchNorm-folded ones in eval);
        ``residual=True`` returns ``x + attention(x)``.

        Shapes: ``x [num_nodes, d]`` -> ``[num_nodes, d]``.
        """
        n_rows = x.size(0)
        d, H, dh = self.dim, self.heads, self.head_dim
        p_drop = self.attn_dropout if self.training else 0.0
        w_out = self.out_proj.weight if out_weight is None else out_weight
        b_out = self.out_proj.bias if out_weight is None else out_bias
        if (x.device.type == "cpu" and layout.groups and (not self.gate_dim or self.gate_position == "output")
                and not torch.is_autocast_enabled("cpu")):
            if torch.is_grad_enabled():  # one autograd node for the whole branch
                return _AttentionBranch.apply(x, self.in_proj.weight, self.in_proj.bias, w_out, b_out, layout, H,
                                              p_drop, self.gate_dim, residual)
            proj, rows, stride = _project(x, self.in_proj.weight, self.in_proj.bias, dh)
            o = _core_forward(rows, stride, layout, H, p_drop, 1.0 / math.sqrt(dh), False)[0].view(n_rows, d)
            if self.gate_dim:
                o = _gate_apply(o, torch.sigmoid(proj[:, 3 * d :]), H)
            out = F.linear(o, w_out, b_out)
            return out.add_(x) if residual else out
        proj = self.in_proj(x)  # num_nodes, 3d + g
        if self.gate_dim and self.gate_position == "value":
            gate = torch.sigmoid(proj[:, 3 * d :]).view(n_rows, H, -1)
            v = (proj[:, 2 * d : 3 * d].view(n_rows, H, dh) * gate).view(n_rows, d)
            o, _ = grouped_attention(torch.cat([proj[:, : 2 * d], v], dim=1), layout, H, p_drop)
        else:  # the output gate is applied inside grouped_attention
            o, gate = grouped_attention(proj, layout, H, p_drop, self.gate_dim, self.gate_position == "output")
            gate = gate.view(n_rows, H, -1) if self.gate_dim else None  # num_nodes, H, dh|1
        out = F.linear(o, w_out, b_out)
        if gate is not None and self.gate_position == "post":
            out = (out.view(n_rows, H, dh) * gate).view(n_rows, d)
        return x + out if residual else out

    def extra_repr(self) -> str:
        return (
            f"dim={self.dim}, heads={self.heads}, gate={self.gate!r}, "
            f"gate_position={self.gate_position!r}, gate_bias_init={self.gate_bias_init}, "
            f"attn_dropout={self.attn_dropout}, fused={self.fused}"
        )
