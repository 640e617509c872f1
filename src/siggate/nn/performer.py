r"""Performer attention (FAVOR+), gated per head: attention type ``"performer"``.

Choromanski et al., "Rethinking Attention with Performers" (ICLR 2021,
https://arxiv.org/abs/2009.14794). The softmax kernel ``exp(q . k / sqrt(d_head))`` is
estimated without bias by positive random features: with ``q' = q d_head^{-1/4}``,
``k' = k d_head^{-1/4}`` and rows ``w_1..w_m ~ N(0, I)`` (orthogonal within blocks,
:func:`orthogonal_gaussian`),

.. math::
    \phi(x) = \frac{1}{\sqrt m}\left(e^{w_r^\top x - \|x\|^2/2}\right)_{r=1..m},\qquad
    \mathbb E[\phi(q')^\top \phi(k')] = e^{q' \cdot k'} = e^{q \cdot k / \sqrt{d_{head}}}.

Each node attends to the nodes of its own graph ``g``:

.. math::
    o_i = \frac{\phi(q_i')^\top \sum_{j \in g} \phi(k_j') v_j^\top}
               {\phi(q_i')^\top \sum_{j \in g} \phi(k_j')},

so time and memory are linear in the number of nodes: the per-graph sums
``K'^T V [G, H, m, d_head]`` and ``K'^T 1 [G, H, m]`` are segment sums over the batch
vector, never a padded ``(B, N_max)`` batch. Stabilisers (per graph, head and feature for
the keys, per row for the queries, see :func:`favor_features`) cancel in the ratio and carry
no gradient; they keep every feature in ``(0, 1]`` and every denominator away from 0 at any
input scale.

Random features: drawn at initialisation and redrawn every ``redraw_interval`` training
forward passes (as Performer does; never in eval). Draw ``t`` comes from a generator seeded
with ``(feature_seed, t)``, ``feature_seed`` itself drawn from torch's global RNG at
initialisation: a run is deterministic given ``torch.manual_seed``, and the replicas of a
DDP run (which share the buffers of rank 0) draw the same features at the same step. The
features (``omega``), the seed, the draw and the pass counter are buffers, saved in
checkpoints.

Dropout (``attn_dropout``) cannot drop single ``(i, j)`` probabilities without forming
them; it drops keys instead: in training each key's term in the numerator is kept with
probability ``1 - p`` and scaled by ``1 / (1 - p)`` (the same key for every query of its
graph), the denominator unchanged, so the expected output is the undropped one.

What this is, next to the other Performers of graph transformers: softmax FAVOR+ (above)
with head width ``d / H``, ``num_features = 64`` orthogonal features shared by the heads, a
redraw every ``redraw_interval = 1000`` training passes and key dropout. PyG's
``PerformerAttention`` (``GPSConv(attn_type="performer")``) uses the ReLU kernel with a head
width of 64 whatever ``d / H``; GraphGPS's Performer uses softmax features with 266 of them
and no redraw. ``kernel="relu"`` gives PyG's features, ``relu(x W^T) + 10^{-3}`` on the
``d_head^{-1/4}``-scaled queries and keys (:func:`relu_features`; the head width stays
``d / H``); with ``"relu"`` both implementations take the per-graph outer products (the
fused FAVOR+ kernel is for the softmax features). A full-batch config (one graph per step)
reaches the redraw interval only after that many steps; set ``redraw_interval`` to fit.

:func:`performer_reference` (:func:`favor_features`, then
:func:`linear_attention_reference`) is the readable definition and the test oracle;
:func:`siggate.nn.kernels.linear_attention.performer_fast` must equal it
(``tests/test_attention_types.py``).
"""

from __future__ import annotations

import math
from functools import partial

import torch
from torch import Tensor

from ..options import GPSOptions, PerformerOptions
from .attention import GatedAttentionBase, check_node_impl, check_whole
from .kernels.layout import GraphSegments, batch_vector, dropout_keep, seeded_generator, segment_amax
from .kernels.linear_attention import performer_fast

__all__ = ["GatedPerformerAttention", "orthogonal_gaussian", "favor_features", "relu_features", "performer_reference",
           "linear_attention_reference"]


def orthogonal_gaussian(num_features: int, dim: int, dtype: torch.dtype = torch.float32,
                        device: torch.device | str | None = None,
                        generator: torch.Generator | None = None) -> Tensor:
    """``[num_features, dim]`` random rows, each marginally ``N(0, I_dim)``, orthogonal
    within blocks of ``dim`` rows (Performer's "ORF"): each block is the ``Q`` of a
    Gaussian matrix's QR decomposition (signs fixed by ``R``'s diagonal, which makes it
    Haar-distributed), each row then scaled by the norm of an independent
    ``N(0, I_dim)`` vector. Drawn from ``generator`` (default: torch's global RNG), on the
    CPU, in float64."""
    blocks = []
    for _ in range(-(-num_features // dim)):
        q, r = torch.linalg.qr(torch.randn(dim, dim, dtype=torch.float64, generator=generator))
        blocks.append((q * torch.sign(torch.diagonal(r))).t())
    rows = torch.cat(blocks)[:num_features]
    norms = torch.randn(num_features, dim, dtype=torch.float64, generator=generator).norm(dim=1, keepdim=True)
    return (rows * norms).to(dtype=dtype, device=device)


def favor_features(q: Tensor, k: Tensor, omega: Tensor, batch: Tensor, num_graphs: int) -> tuple[Tensor, Tensor]:
    r"""Positive random features of queries and keys, stabilised so that nothing under- or
    overflows: ``(phi_q, phi_k)``, each ``[N, H, m]``.

    ``q, k [N, H, d_head]`` (already scaled by ``d_head^{-1/4}``), ``omega [m, d_head]``,
    ``batch [N]`` the graph of each node. With ``z(x)_r = w_r . x - |x|^2 / 2``:

    * ``phi_k = exp(z(k) - c) / sqrt(m)``, ``c [G, H, m]`` the maximum of ``z(k)`` over the
      keys of each graph, per head and feature;
    * ``phi_q = exp(z(q) + c - a) / sqrt(m)``, ``a`` the row's maximum of ``z(q) + c``.

    ``c`` multiplies ``phi_q`` and divides ``phi_k`` feature by feature, and ``a`` scales a
    whole query row, so both cancel in the attention ratio (no gradient flows through
    them). Every feature is in ``(0, 1 / sqrt(m)]``, and a query's denominator
    ``phi_q . sum_j phi_k_j`` is at least ``1 / m`` (the feature where ``phi_q`` is
    largest meets the key where ``phi_k`` is largest), whatever the scale of the inputs."""
    zq = q @ omega.t() - q.pow(2).sum(-1, keepdim=True) / 2  # N, H, m
    zk = k @ omega.t() - k.pow(2).sum(-1, keepdim=True) / 2
    c = segment_amax(zk.detach(), batch, num_graphs)[batch]  # N, H, m
    zq = zq + c
    scale = math.sqrt(omega.size(0))
    phi_q = torch.exp(zq - zq.detach().amax(-1, keepdim=True)) / scale
    return phi_q, torch.exp(zk - c) / scale


#: the ReLU kernel's additive floor (PyG's ``generalized_kernel`` ``epsilon``): keeps every
#: feature, and so every denominator, positive
RELU_EPSILON = 1e-3


def relu_features(q: Tensor, k: Tensor, omega: Tensor, batch: Tensor | None = None,
                  num_graphs: int | None = None) -> tuple[Tensor, Tensor]:
    r"""PyG ``PerformerAttention``'s features: ``phi(x) = relu(x W^T) + 1e-3``
    (:data:`RELU_EPSILON`) for ``q, k [N, H, d_head]`` (already scaled by
    ``d_head^{-1/4}``), ``omega [m, d_head]`` -> ``(phi_q, phi_k)``, each ``[N, H, m]``. Not
    an estimator of the softmax kernel: attention weights are ``phi(q_i) . phi(k_j)``
    normalised per query. ``batch`` and ``num_graphs`` are unused (the signature of
    :func:`favor_features`)."""
    return torch.relu(q @ omega.t()) + RELU_EPSILON, torch.relu(k @ omega.t()) + RELU_EPSILON


#: ``kernel`` -> its feature map
KERNEL_FEATURES = {"softmax": favor_features, "relu": relu_features}


def performer_reference(q: Tensor, k: Tensor, v: Tensor, omega: Tensor, segments: GraphSegments,
                        key_keep: Tensor | None = None, features=favor_features) -> Tensor:
    """FAVOR+ attention of each graph with itself (the definition): :func:`favor_features`
    (or ``features``, e.g. :func:`relu_features`) of the queries and keys (already scaled by
    ``d_head^{-1/4}``), then :func:`linear_attention_reference`.

    Shapes: ``q, k, v [N, H, d_head]``, ``omega [m, d_head]``, ``key_keep [N, H]``
    (optional) -> ``[N, H, d_head]``.
    """
    phi_q, phi_k = features(q, k, omega, segments.batch, segments.num_graphs)
    return linear_attention_reference(phi_q, phi_k, v, segments, key_keep)


def linear_attention_reference(phi_q: Tensor, phi_k: Tensor, v: Tensor, segments: GraphSegments,
                               key_keep: Tensor | None = None) -> Tensor:
    r"""Linear attention of each graph with itself (the definition).

    ``o_i = phi_q_i^T S_g / (phi_q_i^T z_g)`` with ``S_g = sum_{j in g} keep_j phi_k_j v_j^T``
    and ``z_g = sum_{j in g} phi_k_j`` (``g`` the graph of node ``i``), as segment sums
    over ``segments.batch``.

    Shapes: ``phi_q, phi_k [N, H, m]``, ``v [N, H, d_head]``, ``key_keep [N, H]`` (dropout
    multipliers, optional) -> ``[N, H, d_head]``.
    """
    batch, G = segments.batch, segments.num_graphs
    N, H, m = phi_k.shape
    weighted = phi_k if key_keep is None else phi_k * key_keep[..., None]
    kv = phi_k.new_zeros(G, H, m, v.size(-1)).index_add(0, batch, weighted[..., :, None] * v[..., None, :])
    z = phi_k.new_zeros(G, H, m).index_add(0, batch, phi_k)  # G, H, m
    num = torch.einsum("nhm,nhmd->nhd", phi_q, kv[batch])  # N, H, dh
    den = torch.einsum("nhm,nhm->nh", phi_q, z[batch])  # N, H
    return num / den[..., None]


class GatedPerformerAttention(GatedAttentionBase):
    r"""Gated multi-head Performer attention (FAVOR+) on node rows; see the module docstring.

    Args:
        dim, heads: see :class:`~siggate.nn.attention.GatedAttentionBase`.
        impl (str): ``"auto"``/``"packed"`` (the fast path,
            :mod:`siggate.nn.kernels.linear_attention`) or ``"reference"``
            (:func:`performer_reference`). (default: ``"auto"``)
        num_features (int): random features ``m`` per head (shared by the heads).
            (default: ``64``)
        redraw_interval (int): training forward passes between two draws of the
            features; ``0`` never redraws. (default: ``1000``)
        kernel (str): ``"softmax"``: FAVOR+'s positive random features, an unbiased
            estimate of softmax attention; ``"relu"``: PyG ``PerformerAttention``'s
            ``relu(x W^T) + 1e-3`` features (:func:`relu_features`). (default: ``"softmax"``)
        **kwargs: the gate, ``attn_dropout`` and ``bias``: see
            :class:`~siggate.nn.attention.GatedAttentionBase` (``attn_dropout`` drops keys,
            see the module docstring).

    Shapes: ``x [N, d]``, ``batch [N]`` -> ``[N, d]``.
    """

    node_rows_only = True

    attn_type = "performer"
    layout_types = (GraphSegments,)

    def __init__(
        self,
        dim: int,
        heads: int = GPSOptions.heads,
        impl: str = GPSOptions.impl,
        num_features: int = PerformerOptions.num_features,
        redraw_interval: int = PerformerOptions.redraw_interval,
        kernel: str = PerformerOptions.kernel,
        **kwargs,
    ) -> None:
        super().__init__(dim, heads, **kwargs)
        check_node_impl(impl)
        check_whole("num_features", num_features, 1)
        check_whole("redraw_interval (0: never)", redraw_interval, 0)
        if kernel not in KERNEL_FEATURES:
            raise ValueError(f"kernel must be one of {tuple(KERNEL_FEATURES)}, got {kernel!r}")
        self.impl = impl
        self.kernel = kernel
        self.num_features = num_features
        self.redraw_interval = redraw_interval
        self.register_buffer("omega", torch.empty(num_features, self.head_dim))  # random feature rows
        self.register_buffer("forward_count", torch.zeros((), dtype=torch.long))  # training passes since the draw
        self.register_buffer("feature_seed", torch.zeros((), dtype=torch.long))  # seeds every draw
        self.register_buffer("draws", torch.zeros((), dtype=torch.long))  # draws so far
        self.reset_parameters()

    def reset_attention(self) -> None:
        if self.feature_seed.is_meta:  # built for its shapes only (a checkpoint's check): nothing to draw
            return
        self.feature_seed.fill_(int(torch.randint(2**62, ())))
        self.draws.zero_()
        self.redraw_features()

    @torch.no_grad()
    def redraw_features(self) -> None:
        """Draw new random features (:func:`orthogonal_gaussian`, seeded with
        ``(feature_seed, draws)``), count the draw and restart the pass count."""
        gen = seeded_generator(int(self.feature_seed), int(self.draws))
        self.omega.copy_(orthogonal_gaussian(self.num_features, self.head_dim, self.omega.dtype, self.omega.device,
                                             generator=gen))
        self.draws += 1
        self.forward_count.zero_()

    def _redraw_schedule(self) -> None:
        if self.training and self.redraw_interval:
            if int(self.forward_count) >= self.redraw_interval:
                self.redraw_features()
            self.forward_count += 1

    def build_layout(self, batch: Tensor, edge_index: Tensor | None, num_graphs: int | None, impl: str,
                     graph_index: Tensor | None = None) -> GraphSegments:
        """The batch's :class:`GraphSegments`, carrying ``impl`` (``edge_index`` and
        ``graph_index`` are not used)."""
        return GraphSegments.from_batch(batch, num_graphs, impl)

    def forward(self, x: Tensor, batch: Tensor | None = None, layout: GraphSegments | None = None,
                return_details: bool = False, impl: str | None = None):
        """``x [N, d]``, ``batch [N]`` (``None``: one graph) -> ``[N, d]`` (with
        ``return_details``, ``(out, details)``, see :meth:`forward_nodes`)."""
        if layout is None:
            layout = self.make_layout(batch_vector(x, batch), impl=impl, details=return_details)
        return self.forward_nodes(x, layout, return_details)

    def attention_core(self, x: Tensor, layout: GraphSegments, edge_attr: Tensor | None = None):
        """``(q, k, v) -> o`` for :meth:`gated`: :meth:`_attend` with the fast path
        (``layout.impl == "packed"``) or :func:`performer_reference`; redraws the features
        on schedule and draws the key dropout (``edge_attr`` is not used)."""
        self._redraw_schedule()
        keep = None
        if self.training and self.attn_dropout > 0:
            keep = dropout_keep((x.size(0), self.heads), self.attn_dropout, x)
        features = KERNEL_FEATURES[self.kernel]
        if layout.impl == "packed":  # the fused per-graph kernel is FAVOR+'s; the ReLU features take the outer products
            attend = partial(performer_fast, features=features, big_graph=None if self.kernel == "softmax" else 2**62)
        else:
            attend = partial(performer_reference, features=features)
        return partial(self._attend, attend=attend, segments=layout, key_keep=keep)

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, attend, segments: GraphSegments,
                key_keep: Tensor | None) -> Tensor:
        """``q, k, v [N, H, d_head]`` -> ``[N, H, d_head]``: ``attend`` on the scaled
        queries and keys (:func:`performer_reference` or its fast path)."""
        scale = self.head_dim ** -0.25
        return attend(q * scale, k * scale, v, self.omega, segments, key_keep)

    def extra_repr(self) -> str:
        return (super().extra_repr()
                + f", num_features={self.num_features}, redraw_interval={self.redraw_interval}, "
                  f"kernel={self.kernel!r}")

