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
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

GATE_KINDS = ("none", "headwise", "elementwise")
GATE_POSITIONS = ("output", "value", "post")

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
    ``sum_groups count * n_max * (n_max + row_cost) + call_cost``; returns group ends."""
    b = len(sizes)
    if b == 0:
        return []
    s = np.asarray(sizes, dtype=np.float64)
    w = s * (s + row_cost)
    best = np.zeros(b + 1)
    prev = np.zeros(b + 1, dtype=np.int64)
    starts = np.arange(b, dtype=np.float64)
    for j in range(1, b + 1):
        cand = best[:j] + (j - starts[:j]) * w[j - 1] + call_cost
        i = int(cand.argmin())
        best[j], prev[j] = cand[i], i
    ends, j = [], b
    while j > 0:
        ends.append(j)
        j = int(prev[j])
    return ends[::-1]


@dataclass
class PackedLayout:
    """Graphs of a PyG batch regrouped for attention (the layout of the fast path).

    Graphs are sorted by node count and split into contiguous groups (dynamic programming
    over the sorted sizes, trading padding against the per-call cost, see
    :data:`GROUP_CALL_COST`). Group ``k`` holds ``g_k`` graphs padded to its largest one,
    ``n_k`` nodes. Node features never take this padded form: the attention gathers
    ``q, k, v`` of each group straight from the node rows with :meth:`gather_index`, and
    scatters its output back with :meth:`out_index`. Built once per forward pass and
    shared by every layer; the index tensors are built on first use and cached.

    Attributes:
        num_nodes (int): nodes of the batch.
        groups (list): ``(g_k, n_k)`` per group.
        nodes (list): per group ``[g_k, n_k]`` node ids (padding points at node 0).
        valid (list): per group ``[g_k, n_k]`` bool, ``True`` for real nodes, or ``None``
            when the group has no padding (all its graphs have ``n_k`` nodes).
    """

    num_nodes: int
    groups: list
    nodes: list
    valid: list
    _cache: dict = field(default_factory=dict, repr=False)

    @classmethod
    def from_batch(cls, batch: Tensor, batch_size: int | None = None, call_cost: float | None = None,
                   row_cost: float | None = None) -> "PackedLayout":
        """Layout of a PyG ``batch`` vector; ``call_cost``/``row_cost`` default to
        :data:`GROUP_CALL_COST`/:data:`GROUP_ROW_COST` (``call_cost=0`` gives one group per
        distinct size, a huge value one padded group)."""
        call_cost = GROUP_CALL_COST if call_cost is None else call_cost
        row_cost = GROUP_ROW_COST if row_cost is None else row_cost
        dev = batch.device
        if batch_size is None:
            batch_size = int(batch.max()) + 1 if batch.numel() else 0
        counts = torch.bincount(batch, minlength=batch_size).tolist()
        ptr = [0] * (batch_size + 1)
        for i, c in enumerate(counts):
            ptr[i + 1] = ptr[i] + c
        order = sorted((c, g) for g, c in enumerate(counts) if c > 0)
        ends = _partition_sizes([c for c, _ in order], call_cost, row_cost)
        groups, nodes, valid, start = [], [], [], 0
        for end in ends:
            members = order[start:end]
            n = members[-1][0]
            starts = torch.tensor([ptr[g] for _, g in members], device=dev)
            ids = starts[:, None] + torch.arange(n, device=dev)[None, :]  # g, n
            if members[0][0] == n:
                valid.append(None)
            else:
                sizes = torch.tensor([c for c, _ in members], device=dev)
                ok = torch.arange(n, device=dev)[None, :] < sizes[:, None]
                ids = ids.masked_fill(~ok, 0)
                valid.append(ok)
            groups.append((len(members), n))
            nodes.append(ids)
            start = end
        return cls(int(batch.numel()), groups, nodes, valid)

    def padded_rows(self) -> int:
        """Rows of all groups together (real nodes plus padding)."""
        return sum(g * n for g, n in self.groups)

    def bias(self, k: int, dtype: torch.dtype) -> Tensor | None:
        """Additive key mask ``[g_k, 1, 1, n_k]`` of group ``k``: 0 for real keys and the
        most negative finite value for padding, so that ``exp`` gives exactly 0 while a
        padded query row (whose output is discarded) stays finite. ``None`` without padding."""
        if self.valid[k] is None:
            return None
        key = ("bias", k, dtype)
        if key not in self._cache:
            v = self.valid[k]
            b = torch.zeros(v.shape, dtype=dtype, device=v.device).masked_fill_(~v, torch.finfo(dtype).min)
            self._cache[key] = b[:, None, None, :]
        return self._cache[key]

    def bias_bmm(self, k: int, heads: int, dtype: torch.dtype) -> Tensor | None:
        """:meth:`bias` expanded to ``[g_k * H, 1, n_k]`` (the batched-matmul layout)."""
        b = self.bias(k, dtype)
        if b is None:
            return None
        key = ("bias_bmm", k, heads, dtype)
        if key not in self._cache:
            g, n = self.groups[k]
            self._cache[key] = b.expand(g, heads, 1, n).reshape(g * heads, 1, n)
        return self._cache[key]

    def gather_index(self, k: int, heads: int, stride: int, heads_inner: bool = False) -> Tensor:
        """``[3 * g_k * H * n_k]``: rows of a projection viewed as ``[num_nodes * stride,
        d_head]`` (``stride`` rows per node, ``q | k | v`` first) that form group ``k``'s
        ``q, k, v`` as one ``(3, g_k, H, n_k, d_head)`` block, or ``(3, g_k, n_k, H,
        d_head)`` with ``heads_inner``."""
        key = ("gather", k, heads, stride, heads_inner)
        if key not in self._cache:
            ids = self.nodes[k]  # g, n
            dev = ids.device
            j = torch.arange(3, device=dev)[:, None, None, None]
            h = torch.arange(heads, device=dev)
            if heads_inner:
                idx = ids[None, :, :, None] * stride + j * heads + h[None, None, None, :]  # 3, g, n, H
            else:
                idx = ids[None, :, None, :] * stride + j * heads + h[None, None, :, None]  # 3, g, H, n
            self._cache[key] = idx.reshape(-1)
        return self._cache[key]

    def out_offsets(self, heads: int) -> list[int]:
        """Start row of each group in the concatenated output ``[sum_k g_k H n_k, d_head]``."""
        off, out = 0, []
        for g, n in self.groups:
            out.append(off)
            off += g * heads * n
        return out + [off]

    def out_index(self, heads: int, heads_inner: bool = False) -> Tensor:
        """``[num_nodes * H]``: for node ``i`` and head ``h``, its row in the concatenated
        output (row ``i * H + h`` of the node-order result). Each group's output is laid
        out ``(g, H, n)`` (batched matmul), or ``(g, n, H)`` with ``heads_inner`` (the
        memory order of the CPU flash kernel's output)."""
        key = ("out", heads, heads_inner)
        if key not in self._cache:
            dev = self.nodes[0].device if self.nodes else torch.device("cpu")
            idx = torch.empty(self.num_nodes * heads, dtype=torch.long, device=dev)
            offs = self.out_offsets(heads)
            for k, (g, n) in enumerate(self.groups):
                h = torch.arange(heads, device=dev)[None, :, None]
                b = torch.arange(g, device=dev)[:, None, None]
                i = torch.arange(n, device=dev)[None, None, :]
                pos = offs[k] + ((b * n + i) * heads + h if heads_inner else (b * heads + h) * n + i)  # g, H, n
                dst = self.nodes[k][:, None, :] * heads + h  # g, H, n
                if self.valid[k] is not None:
                    ok = self.valid[k][:, None, :].expand(g, heads, n)
                    pos, dst = pos[ok], dst[ok]
                idx[dst.reshape(-1)] = pos.reshape(-1)
            self._cache[key] = idx
        return self._cache[key]

    def block_offsets(self, heads: int) -> list[int]:
        """Start row of each group's ``(3, g_k H, n_k, d_head)`` block in the
        concatenation of all groups' blocks (rows of ``d_head``)."""
        off, out = 0, []
        for g, n in self.groups:
            out.append(off)
            off += 3 * g * heads * n
        return out + [off]

    def gather_all(self, heads: int, stride: int) -> Tensor:
        """:meth:`gather_index` of all groups, concatenated."""
        key = ("gather_all", heads, stride)
        if key not in self._cache:
            parts = [self.gather_index(k, heads, stride) for k in range(len(self.groups))]
            self._cache[key] = parts[0] if len(parts) == 1 else torch.cat(parts)
        return self._cache[key]

    def block_source(self, heads: int, stride: int) -> Tensor:
        """``[num_nodes * stride]``: for each row of a projection viewed as
        ``[num_nodes * stride, d_head]``, its row in the concatenated blocks of
        :meth:`block_offsets`; rows past ``q | k | v`` (gate rows, ``stride > 3H``) map
        to rows appended after the blocks, ``node * (stride - 3H) + r``. The backward
        gathers its ``q, k, v`` gradients with it (a gather, not a scatter-add)."""
        key = ("block_src", heads, stride)
        if key not in self._cache:
            offs = self.block_offsets(heads)
            dev = self.nodes[0].device
            extra = stride - 3 * heads
            idx = torch.empty(self.num_nodes, stride, dtype=torch.long, device=dev)
            j = torch.arange(3, device=dev)[:, None, None, None]
            h = torch.arange(heads, device=dev)[None, None, :, None]
            for k, (g, n) in enumerate(self.groups):
                b = torch.arange(g, device=dev)[None, :, None, None]
                i = torch.arange(n, device=dev)[None, None, None, :]
                pos = offs[k] + ((j * g + b) * heads + h) * n + i  # 3, g, H, n
                col = (j * heads + h).expand(3, g, heads, n)
                node = self.nodes[k][None, :, None, :].expand(3, g, heads, n)
                if self.valid[k] is not None:
                    ok = self.valid[k][None, :, None, :].expand(3, g, heads, n)
                    pos, col, node = pos[ok], col[ok], node[ok]
                idx[node.reshape(-1), col.reshape(-1)] = pos.reshape(-1)
            if extra:
                idx[:, 3 * heads :] = offs[-1] + torch.arange(self.num_nodes * extra, device=dev).view(-1, extra)
            self._cache[key] = idx.view(-1)
        return self._cache[key]

    def out_source(self, heads: int) -> tuple[Tensor, Tensor | None]:
        """Inverse of :meth:`out_index`: for each concatenated-output row its node-order
        row (padding points at row 0), and the padding rows (or ``None``)."""
        key = ("src", heads)
        if key not in self._cache:
            dev = self.nodes[0].device
            h = torch.arange(heads, device=dev)
            src, pad, off = [], [], 0
            for k, (g, n) in enumerate(self.groups):
                src.append((self.nodes[k][:, None, :] * heads + h[None, :, None]).reshape(-1))
                if self.valid[k] is not None:
                    bad = ~self.valid[k][:, None, :].expand(g, heads, n).reshape(-1)
                    pad.append(bad.nonzero().view(-1) + off)
                off += g * heads * n
            self._cache[key] = (torch.cat(src), torch.cat(pad) if pad else None)
        return self._cache[key]


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


class _GroupedAttention(torch.autograd.Function):
    """Multi-head softmax attention with dropout over all size groups of a
    :class:`PackedLayout`, optionally gated, with a hand-written backward (the CPU
    training path).

    Input ``proj [num_nodes, 3d + g]`` (``q | k | v | gate logits``); outputs the
    attention ``[num_nodes, d]`` (multiplied by the gate when ``gate_output``) and the
    gate ``sigmoid(logits) [num_nodes, g]``. Forward: one gather of every group's
    ``q, k, v`` as ``(3, g H, n, d_head)`` blocks, then per group ``baddbmm`` (scale and
    key mask in one call), softmax, dropout and ``bmm`` into the concatenated output,
    and one gather back to node order. Backward: ``dS = P_d * dP - P * rowsum(P_d * dP)``
    (``P_d`` the dropped probabilities), each group's ``dq, dk, dv`` written into one
    buffer, and one gather (:meth:`PackedLayout.block_source`) back to projection rows.
    Autograd alone needs about three times as many operations here (views, transposes,
    stack/cat of q/k/v, expanded masks, the gate's views and products).

    Groups with at least :data:`CHUNKED_MIN_NODES` nodes keep only the log-sum-exp and a
    seed, and recompute probabilities and dropout masks in query chunks (memory
    ``O(n * chunk)``); smaller groups keep ``P`` and ``P_d``.
    """

    @staticmethod
    def forward(ctx, proj, layout, heads, p, scale, gate_dim, gate_output):
        n_nodes, width = proj.shape
        d = (width - gate_dim) // 3
        dh = d // heads
        rows, stride, copied = _qkv_rows(proj, d, dh)
        offs, boffs = layout.out_offsets(heads), layout.block_offsets(heads)
        blks = rows.index_select(0, layout.gather_all(heads, stride))  # all groups' q, k, v
        outs = proj.new_empty(offs[-1], dh)
        saved, plan = [], []
        seed = None
        for k, (g, n) in enumerate(layout.groups):
            q, kk, v = blks[boffs[k] : boffs[k + 1]].view(3, g * heads, n, dh).unbind(0)
            bias = layout.bias_bmm(k, heads, proj.dtype)
            o = outs[offs[k] : offs[k + 1]].view(g * heads, n, dh)
            if n >= CHUNKED_MIN_NODES:
                if seed is None:
                    seed = int(torch.randint(0, 2**62, (1,)).item())
                gen = torch.Generator(device=proj.device).manual_seed(seed + k)
                saved.append(_chunk_forward(q, kk, v, bias, p, scale, CHUNK_ROWS, gen, o))
                plan.append("chunk")
            else:
                if bias is None:
                    s = torch.baddbmm(o.new_empty(1, 1, 1), q, kk.transpose(1, 2), beta=0.0, alpha=scale)
                else:
                    s = torch.baddbmm(bias, q, kk.transpose(1, 2), alpha=scale)  # gH, n, n
                a = torch.softmax(s, dim=-1)
                ad = a * _dropout_keep(a.shape, p, a) if p > 0.0 else a
                torch.bmm(ad, v, out=o)
                saved += [a, ad]
                plan.append("math")
        out = outs.index_select(0, layout.out_index(heads)).view(n_nodes, d)
        gate = o_plain = None
        if gate_dim:
            gate = torch.sigmoid(proj[:, 3 * d :])
            if gate_output:
                o_plain = out
                out = (out.view(n_nodes, heads, dh) * gate.view(n_nodes, heads, -1)).view(n_nodes, d)
        ctx.save_for_backward(blks, outs, gate, o_plain, *saved)
        ctx.layout, ctx.heads, ctx.p, ctx.scale, ctx.plan, ctx.seed = layout, heads, p, scale, plan, seed
        ctx.dims = (n_nodes, width, d, dh, stride, copied, gate_dim)
        if gate is None:
            return out, proj.new_empty(n_nodes, 0)
        return out, gate

    @staticmethod
    def backward(ctx, grad_out, grad_gate):
        layout, heads, p, scale = ctx.layout, ctx.heads, ctx.p, ctx.scale
        blks, outs, gate, o_plain, *saved = ctx.saved_tensors
        n_nodes, width, d, dh, stride, copied, gate_dim = ctx.dims
        grad_out = grad_out.contiguous()
        d_gate = grad_gate if gate_dim else None
        if o_plain is not None:  # the output gate: d(o * g) = (do * g, do * o)
            go = grad_out.view(n_nodes, heads, dh)
            dg = go * o_plain.view(n_nodes, heads, dh)
            dg = dg.sum(-1) if gate.size(1) == heads and dh > 1 else dg.view(n_nodes, -1)
            d_gate = dg.view(n_nodes, -1) if d_gate is None else d_gate + dg.view(n_nodes, -1)
            grad_out = (go * gate.view(n_nodes, heads, -1)).view(n_nodes, d)
        src, pad = layout.out_source(heads)
        d_outs = grad_out.view(n_nodes * heads, dh).index_select(0, src)
        if pad is not None:
            d_outs.index_fill_(0, pad, 0.0)
        offs, boffs = layout.out_offsets(heads), layout.block_offsets(heads)
        extra = 0 if copied else stride - 3 * heads  # gate rows carried in the gather
        d_blks = grad_out.new_empty(boffs[-1] + n_nodes * extra, dh)
        i = 0
        for k, ((g, n), mode) in enumerate(zip(layout.groups, ctx.plan)):
            do = d_outs[offs[k] : offs[k + 1]].view(g * heads, n, dh)
            q, kk, v = blks[boffs[k] : boffs[k + 1]].view(3, g * heads, n, dh).unbind(0)
            dq, dk, dv = d_blks[boffs[k] : boffs[k + 1]].view(3, g * heads, n, dh).unbind(0)
            if mode == "chunk":
                lse = saved[i]
                i += 1
                gen = torch.Generator(device=grad_out.device).manual_seed(ctx.seed + k)
                o = outs[offs[k] : offs[k + 1]].view(g * heads, n, dh)
                _chunk_backward(q, kk, v, layout.bias_bmm(k, heads, grad_out.dtype), o, lse, do, p, scale,
                                CHUNK_ROWS, gen, dq, dk, dv)
            else:
                a, ad = saved[i : i + 2]
                i += 2
                torch.bmm(ad.transpose(1, 2), do, out=dv)
                x = torch.bmm(do, v.transpose(1, 2)).mul_(ad)  # P_d * dP, gH, n, n
                ds = x.addcmul_(a, x.sum(-1, keepdim=True), value=-1.0)
                torch.baddbmm(dq, ds, kk, beta=0.0, alpha=scale, out=dq)
                torch.baddbmm(dk, ds.transpose(1, 2), q, beta=0.0, alpha=scale, out=dk)
        d_logits = None
        if gate_dim:
            d_logits = (torch.ops.aten.sigmoid_backward(d_gate, gate) if d_gate is not None
                        else gate.new_zeros(gate.shape))
            if extra:
                d_blks[boffs[-1] :].view(n_nodes, gate_dim).copy_(d_logits)
        d_rows = d_blks.index_select(0, layout.block_source(heads, stride))  # n_nodes * stride, dh
        if copied:
            d_proj = torch.cat([d_rows.view(n_nodes, 3 * d), d_logits], 1) if gate_dim else d_rows.view(n_nodes, 3 * d)
        else:
            d_proj = d_rows.view(n_nodes, width)
        return d_proj, None, None, None, None, None, None


def grouped_attention(proj: Tensor, layout: PackedLayout, heads: int, dropout_p: float,
                      gate_dim: int = 0, gate_output: bool = False) -> tuple[Tensor, Tensor | None]:
    """Softmax attention of every graph with itself, over a :class:`PackedLayout`.

    ``proj [num_nodes, 3d + gate_dim]`` (``q | k | v | gate logits``) ->
    ``(attention [num_nodes, d], sigmoid(gate logits) [num_nodes, gate_dim] or None)``;
    with ``gate_output`` the attention is returned already multiplied by the gate (per
    head, or per head dimension). Kernels:

    * CPU with gradients: :class:`_GroupedAttention` (hand-written backward, fast
      dropout; chunked for large groups, so memory is not ``O(n^2)``);
    * CPU without gradients: batched matmuls per group (about 1.7x faster than the flash
      kernel at ``d_head = 16`` and tens of nodes); large groups use the flash kernel
      (memory ``O(n)``), or the chunked kernel when there is dropout;
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
        o = _grouped_attention_nograd(proj, layout, heads, dropout_p, d, dh, scale)
    else:
        o = _grouped_attention_sdpa(proj, layout, heads, dropout_p, d, dh)
    gate = torch.sigmoid(proj[:, 3 * d :]) if gate_dim else None
    if gate is not None and gate_output:
        o = (o.view(n_nodes, heads, dh) * gate.view(n_nodes, heads, -1)).view(n_nodes, d)
    return o, gate


def _grouped_attention_nograd(proj, layout, heads, dropout_p, d, dh, scale) -> Tensor:
    """CPU attention without autograd (see :func:`grouped_attention`)."""
    rows, stride, _ = _qkv_rows(proj, d, dh)
    offs, boffs = layout.out_offsets(heads), layout.block_offsets(heads)
    blks = rows.index_select(0, layout.gather_all(heads, stride))
    outs = proj.new_empty(offs[-1], dh)
    for k, (g, n) in enumerate(layout.groups):
        q, kk, v = blks[boffs[k] : boffs[k + 1]].view(3, g * heads, n, dh).unbind(0)
        o = outs[offs[k] : offs[k + 1]].view(g * heads, n, dh)
        bias = layout.bias_bmm(k, heads, proj.dtype)
        if n >= CHUNKED_MIN_NODES:
            if dropout_p > 0.0:
                _chunk_forward(q, kk, v, bias, dropout_p, scale, CHUNK_ROWS, None, o)
            else:  # 4-D, or SDPA would pick its O(n^2) math kernel
                b4 = layout.bias(k, proj.dtype)
                o.view(g, heads, n, dh).copy_(F.scaled_dot_product_attention(
                    q.view(g, heads, n, dh), kk.view(g, heads, n, dh), v.view(g, heads, n, dh), attn_mask=b4))
            continue
        if bias is None:
            sc = torch.baddbmm(o.new_empty(1, 1, 1), q, kk.transpose(1, 2), beta=0.0, alpha=scale)
        else:
            sc = torch.baddbmm(bias, q, kk.transpose(1, 2), alpha=scale)  # gH, n, n
        a = torch.softmax(sc, dim=-1)
        if dropout_p > 0.0:
            a.mul_(_dropout_keep(a.shape, dropout_p, a))
        torch.bmm(a, v, out=o)
    return outs.index_select(0, layout.out_index(heads)).view(proj.size(0), d)


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
                       out_bias: Tensor | None = None) -> Tensor:
        """The fast path: the same attention on node rows, using a :class:`PackedLayout`.

        Projections, gates and the output projection run on the ``num_nodes`` real rows;
        only the attention itself sees each size group's padded shape
        (:func:`grouped_attention`). ``out_weight``/``out_bias`` replace the output
        projection's parameters (the GPS layer passes BatchNorm-folded ones in eval).

        Shapes: ``x [num_nodes, d]`` -> ``[num_nodes, d]``.
        """
        n_rows = x.size(0)
        d, H, dh = self.dim, self.heads, self.head_dim
        proj = self.in_proj(x)  # num_nodes, 3d + g
        p_drop = self.attn_dropout if self.training else 0.0
        if self.gate_dim and self.gate_position == "value":
            gate = torch.sigmoid(proj[:, 3 * d :]).view(n_rows, H, -1)
            v = (proj[:, 2 * d : 3 * d].view(n_rows, H, dh) * gate).view(n_rows, d)
            o, _ = grouped_attention(torch.cat([proj[:, : 2 * d], v], dim=1), layout, H, p_drop)
        else:  # the output gate is applied inside grouped_attention
            o, gate = grouped_attention(proj, layout, H, p_drop, self.gate_dim, self.gate_position == "output")
            gate = gate.view(n_rows, H, -1) if self.gate_dim else None  # num_nodes, H, dh|1
        out = self.out_proj(o) if out_weight is None else F.linear(o, out_weight, out_bias)
        if gate is not None and self.gate_position == "post":
            out = (out.view(n_rows, H, dh) * gate).view(n_rows, d)
        return out

    def extra_repr(self) -> str:
        return (
            f"dim={self.dim}, heads={self.heads}, gate={self.gate!r}, "
            f"gate_position={self.gate_position!r}, gate_bias_init={self.gate_bias_init}, "
            f"attn_dropout={self.attn_dropout}, fused={self.fused}"
        )
