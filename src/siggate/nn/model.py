"""SigGate-GT: a GraphGPS graph transformer whose attention heads carry sigmoid gates."""

from __future__ import annotations

import copy
import math
import numbers

import torch
from torch import Tensor, nn
from torch_geometric.nn import global_add_pool, global_mean_pool

from ..options import ATTN_IMPLS, POOLING, Z_CLIP, GPSOptions, mol_features_dim  # shared with siggate.config
from .attention import GatedAttentionBase, check_real, check_whole
from .attention_types import attn_kwargs_from_config, check_options
from .encoders import NodeEncoder, OGBBondEncoder, make_edge_encoder
from .kernels.layout import DenseIndex, batch_vector
from .layer import GPSLayer

#: what one prediction is for (:data:`siggate.options.TASK_LEVELS`)
LEVELS = ("graph", "node")

#: ``param_match`` rules: how an ungated model is widened to the elementwise gate's size
PARAM_MATCH_RULES = ("none", "ffn")


def matched_ffn_dim(dim: int) -> int:
    """FFN hidden width that gives an ungated GPS layer the parameters of an elementwise gate.

    The elementwise gate adds ``d * d + d`` parameters per layer (a ``d x d`` weight and a
    bias). Widening the FFN ``d -> h -> d`` by ``k`` hidden units adds ``k * (2d + 1)``
    (``k`` columns of ``W1``, ``k`` biases, ``k`` rows of ``W2``). The rule ``"ffn"`` takes
    ``h = 2d + round(d (d + 1) / (2d + 1))``; for ``d = 64`` that is ``160`` (gate 4,160
    parameters, wider FFN 4,128, per layer).
    """
    return 2 * dim + round(dim * (dim + 1) / (2 * dim + 1))


def resolve_ffn_dim(cfg: dict) -> int | None:
    """The FFN width a model config asks for: ``model.ffn_dim`` if set (> 0), the
    ``param_match`` rule's width for a matched ungated control, else ``None`` (``2 * dim``)."""
    if cfg.get("ffn_dim"):
        return int(cfg["ffn_dim"])
    if cfg.get("param_match", "none") == "ffn":
        return matched_ffn_dim(int(cfg["dim"]))
    return None


def pool_graphs(x: Tensor, batch: Tensor, num_graphs: int, pooling: str = "add", norm: float = 1.0) -> Tensor:
    """Node features ``[N, d]`` -> one vector per graph ``[G, d]``.

    ``"add"``: the sum over the graph's nodes; ``"mean"``: their mean; ``"norm"``: the sum
    divided by the constant ``norm`` (chemprop's ``norm`` aggregation divides by 100). A
    constant divisor keeps the readout additive in the nodes, as a property summed over
    atoms needs, while a graph of about ``norm`` nodes pools to the scale of one node. The
    head's first weights then need not be a graph size smaller than the others, which
    Adam's steps, of a fixed size whatever the input scale, would move too coarsely.
    """
    if pooling not in POOLING:
        raise ValueError(f"pooling must be one of {POOLING}, got {pooling!r}")
    if pooling == "mean":
        return global_mean_pool(x, batch, size=num_graphs)
    g = global_add_pool(x, batch, size=num_graphs)
    return g / norm if pooling == "norm" else g


def mlp_head(dim: int, layers: int, out: int, halve: bool = True, norm: bool = False,
             extra_in: int = 0) -> nn.Sequential:
    """A prediction MLP: ``layers - 1`` blocks ``Linear(w, w'), [BatchNorm(w'),] ReLU``, then
    ``Linear(w, out)``. ``extra_in`` more input columns (molecule features) widen only the
    first layer's input: ``Linear(dim + extra_in, w')``, the widths after it stay those of ``dim``.

    With the defaults (``halve=True``: ``w' = w // 2``, no norm) this is GraphGPS's
    ``san_graph`` graph head. ``halve=False, norm=True`` is GraphGym's ``MLP`` as GraphGPS's
    ``inductive_node`` head builds it (width ``dim`` throughout, ``gnn.batchnorm: True``).

    Shapes: ``[G, dim + extra_in]`` (or ``[N, dim]``) -> ``[G, out]``.
    """
    if isinstance(layers, bool) or not isinstance(layers, numbers.Integral) or layers < 1:
        raise ValueError(f"a prediction head needs at least one layer (its output Linear), got {layers!r}")
    if halve and dim >> (layers - 1) < 1:  # (a zero-width layer: every graph got the output's bias, silently)
        raise ValueError(f"head_layers={layers} is too many for dim={dim}: the prediction head halves the width at "
                         f"each layer, so at most {int(dim).bit_length()} layers fit; lower head_layers or raise dim")
    head, width = [], dim
    for i in range(layers - 1):
        nxt = width // 2 if halve else width
        head += [nn.Linear(width + (extra_in if i == 0 else 0), nxt)] + ([nn.BatchNorm1d(nxt)] if norm else []) + [nn.ReLU()]
        width = nxt
    head.append(nn.Linear(width + (extra_in if layers == 1 else 0), out))
    return nn.Sequential(*head)


def _check_readout(pooling: str, pool_norm: float, level: str, mol_features_dim: int) -> None:
    """:class:`SigGateGT`'s readout arguments, each refused with what is allowed."""
    if pooling not in POOLING:
        raise ValueError(f"pooling must be one of {POOLING}, got {pooling!r}")
    check_real("pool_norm", pool_norm)
    if pooling == "norm" and not (math.isfinite(pool_norm) and pool_norm > 0):  # (inf pooled every graph to 0)
        raise ValueError(f"pool_norm must be > 0 and finite for pooling='norm' (the divisor of each graph's sum, "
                         f"e.g. the training graphs' mean size), got {pool_norm!r}")
    if level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}, got {level!r}")
    check_whole("mol_features_dim", mol_features_dim, 0)  # (2.5 was truncated to 2 columns, silently)
    if mol_features_dim and level != "graph":
        raise ValueError(f"mol_features_dim must be >= 0, and 0 at node level; got {mol_features_dim!r} "
                         f"at level {level!r}")


class SigGateGT(nn.Module):
    r"""SigGate-GT model: encoders, ``layers`` GPS layers, then pooling and an MLP head per
    graph (``level="graph"``) or an MLP head per node (``level="node"``, no pooling).

    With ``gate="none"`` this is the GraphGPS model (Rampášek et al. 2022,
    https://arxiv.org/abs/2205.12454).

    Args:
        num_tasks (int): outputs per graph (or node) ``T``: targets, or class logits.
        dim (int): hidden width. (default: ``64``)
        layers (int): number of GPS layers. (default: ``10``)
        node_features (str): ``"ogb"``, ``"typed"`` or ``"dense"``. (default: ``"ogb"``)
        num_node_types (int): node types for ``"typed"``. (default: ``0``)
        num_edge_types (int): edge types when ``node_features`` is not ``"ogb"``; a graph
            without ``edge_attr`` gives all its edges type 0. (default: ``0``)
        pe (str): ``"none"``, ``"rwse"`` or ``"lappe"``. (default: ``"none"``)
        pe_steps (int): RWSE steps or LapPE eigenvectors. (default: ``0``)
        pe_dim (int): channels given to the positional encoding. (default: ``0``)
        pooling (str): ``"add"``, ``"mean"`` or ``"norm"`` (the sum divided by
            ``pool_norm``, see :func:`pool_graphs`); graph level only. (default: ``"add"``)
        pool_norm (float): the divisor of ``pooling="norm"``, which needs it > 0; unused by
            the other poolings. (default: ``0.0``, the config's "not set")
        head_layers (int): layers of the prediction MLP: per graph halving the width each
            time (GraphGPS ``san_graph``), per node at width ``dim`` with BatchNorm (GraphGPS
            ``inductive_node``); see :func:`mlp_head`. (default: ``3``)
        level (str): ``"graph"`` or ``"node"``. (default: ``"graph"``)
        num_node_features (int): float columns of ``x`` for ``"dense"``. (default: ``0``)
        mol_features_dim (int): ``F`` molecule-level features per graph (chemprop's
            ``--features-generators``, :mod:`siggate.data.molfeatures`), read from
            ``data.mol_x [G, F]``, standardized with the buffers ``mol_mean``/``mol_std``
            ``[F]`` (set from the training rows by :meth:`set_mol_feature_scaling`; saved in
            the state dict), clipped to +-:data:`siggate.options.Z_CLIP` and concatenated to the
            pooled embedding before the head; graph level only. ``0``: no features, no
            buffers. (default: ``0``)
        impl (str): attention implementation, ``"auto"``, ``"reference"``, ``"sdpa"`` or
            ``"packed"``, chosen once per forward; see :func:`~siggate.nn.impl.resolve_impl`.
            (default: ``"auto"``)
        **layer_options: every layer's options, passed to :class:`GPSLayer` as given (PyG's
            convention): ``heads``, ``local``, ``attn``, ``dropout``, ``ffn_dim``, ``attn_type``,
            ``attn_kwargs`` and the attention's ``gate``, ``gate_position``,
            ``gate_bias_init``, ``gate_weight_std``, ``attn_dropout``; their defaults are
            :class:`GPSLayer`'s and :class:`siggate.options.GPSOptions`' (4 heads, GINE,
            attention on, the elementwise gate at the output, no dropout).

    Shapes: a PyG ``Batch`` with ``G`` graphs and ``N`` nodes -> ``[G, T]`` (graph level) or
    ``[N, T]`` (node level). Node predictions are equivariant to node permutations (for
    ``attn_type="exphormer"`` only on graphs of at most 10 nodes: a larger graph's expander is
    drawn over its node numbering, :mod:`siggate.nn.exphormer`) and, in eval mode, independent
    of the other graphs in the batch (attention stays within a graph, BatchNorm uses its
    running statistics).
    """

    def __init__(
        self,
        num_tasks: int,
        dim: int = 64,
        layers: int = 10,
        node_features: str = "ogb",
        num_node_types: int = 0,
        num_edge_types: int = 0,
        pe: str = "none",
        pe_steps: int = 0,
        pe_dim: int = 0,
        pooling: str = "add",
        pool_norm: float = 0.0,
        head_layers: int = 3,
        level: str = "graph",
        num_node_features: int = 0,
        mol_features_dim: int = 0,
        impl: str = GPSOptions.impl,
        **layer_options,
    ) -> None:
        super().__init__()
        _check_readout(pooling, pool_norm, level, mol_features_dim)
        check_whole("num_tasks", num_tasks, 1)
        check_whole("dim", dim, 1)  # (a float failed inside the encoders' embedding tables with torch's words)
        check_whole("layers", layers, 0)
        if impl not in ATTN_IMPLS:  # (with no layer to check it, a misspelt impl was kept)
            raise ValueError(f"impl must be one of {ATTN_IMPLS}, got {impl!r}")
        self.num_tasks = num_tasks
        self.pooling = pooling
        self.pool_norm = float(pool_norm)
        self.level = level
        self.impl = impl
        self.node_encoder = NodeEncoder(node_features, dim, num_node_types, pe, pe_steps, pe_dim, num_node_features)
        self.edge_encoder = make_edge_encoder(node_features, dim, num_edge_types)
        check_options(layer_options, GPSLayer.options(), "layer option")
        self.layers = nn.ModuleList(GPSLayer(dim, impl=impl, **layer_options) for _ in range(layers))
        per_node = level == "node"
        self.mol_features_dim = int(mol_features_dim)
        if self.mol_features_dim:  # data statistics, not parameters: reset_parameters keeps them
            self.register_buffer("mol_mean", torch.zeros(self.mol_features_dim))
            self.register_buffer("mol_std", torch.ones(self.mol_features_dim))
        self.head = mlp_head(dim, head_layers, num_tasks, halve=not per_node, norm=per_node,
                             extra_in=self.mol_features_dim)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Re-initialise every parameter: first all non-gate parameters in a fixed order,
        then the gates, which draw from generators of their own
        (:meth:`~siggate.nn.attention.GatedAttentionBase.reset_gate`). Seeded identically,
        gated and ungated models thus share all non-gate initial weights."""
        self.node_encoder.reset_parameters()
        self.edge_encoder.reset_parameters()
        for layer in self.layers:
            layer.reset_parameters(reset_gate=False)
        for mod in self.head:
            if hasattr(mod, "reset_parameters"):  # Linear, BatchNorm
                mod.reset_parameters()
        for mod in self.attention_modules():
            mod.reset_gate()

    @torch.no_grad()
    def set_mol_feature_scaling(self, mean: Tensor, std: Tensor) -> None:
        """Standardize the molecule features as ``(mol_x - mean) / std`` (``[F]`` each, std > 0;
        the training rows' statistics, e.g. :class:`siggate.data.molfeatures.FeatureScaler`;
        ``std = inf`` makes a column 0 for every molecule)."""
        mean, std = torch.as_tensor(mean).reshape(-1), torch.as_tensor(std).reshape(-1)
        if mean.numel() != self.mol_features_dim or std.numel() != self.mol_features_dim:
            raise ValueError(f"the model takes {self.mol_features_dim} molecule features, got statistics of "
                             f"{mean.numel()} and {std.numel()} columns")
        if not bool((std > 0).all()):
            raise ValueError("molecule feature std must be > 0")
        self.mol_mean.copy_(mean)
        self.mol_std.copy_(std)

    def readout_input(self, g: Tensor, data) -> Tensor:
        """The head's input ``[G, d + F]``: the pooled embedding ``g [G, d]`` and the
        standardized molecule features ``data.mol_x [G, F]``, clipped to +-``Z_CLIP`` (just
        ``g`` when F = 0)."""
        if not self.mol_features_dim:
            return g
        mol_x = getattr(data, "mol_x", None)
        if mol_x is None or tuple(mol_x.shape) != (g.size(0), self.mol_features_dim):
            got = "none" if mol_x is None else f"shape {tuple(mol_x.shape)}"
            raise ValueError(f"the model takes molecule features mol_x [{g.size(0)}, {self.mol_features_dim}] "
                             f"per batch, got {got}; build the graphs with the model's model.mol_features")
        scaled = (mol_x.to(g.dtype) - self.mol_mean.to(g.dtype)) / self.mol_std.to(g.dtype)
        return torch.cat([g, scaled.clamp(-Z_CLIP, Z_CLIP)], dim=1)

    def attention_modules(self) -> list[GatedAttentionBase]:
        return [layer.attn for layer in self.layers if layer.attn is not None]

    def gate_parameter_count(self) -> int:
        return sum(m.gate_parameters() for m in self.attention_modules())

    def forward(self, data, return_details: bool = False):
        """Predict ``[G, T]`` (graph level) or ``[N, T]`` (node level). With
        ``return_details=True`` also return a dict with ``hidden`` (node representations after
        the encoder and after each layer, ``[N, d]`` each), ``attn`` (per-layer attention
        details, see :class:`GatedMultiheadAttention`), ``mask`` ``[G, N_max]`` and
        ``graph_emb`` ``[G, d]`` (``None`` at node level)."""
        batch = batch_vector(data.x, getattr(data, "batch", None))
        num_graphs = int(getattr(data, "num_graphs", None) or (int(batch.max()) + 1))
        attns = self.attention_modules()
        # the one layout (and with it the implementation) of this forward, shared by every layer; no graph
        # identity from the data (data.idx): Exphormer seeds each graph's expander with the graph itself, so a
        # molecule scores the same in training, evaluation and prediction, in any batch
        layout = attns[0].make_layout(batch, data.edge_index, num_graphs, self.impl, return_details) if attns else None
        x = self.node_encoder(data)
        edge_attr = data.edge_attr
        if edge_attr is None:  # no edge features: one edge type (GraphGPS's DummyEdge)
            if isinstance(self.edge_encoder, OGBBondEncoder):  # (its 3 bond features cannot be made up)
                raise ValueError("node_features='ogb' reads OGB's bond features: give data.edge_attr [E, 3] "
                                 "(ogb.utils.smiles2graph's), or use node_features='typed' for graphs without them")
            edge_attr = data.edge_index.new_zeros(data.edge_index.size(1))
        e = self.edge_encoder(edge_attr)
        hidden, attn = [x], []
        for layer in self.layers:
            if return_details:
                x, e, det = layer(x, data.edge_index, e, batch, layout, return_details=True)
                hidden.append(x)
                attn.append(det)
            else:
                x, e = layer(x, data.edge_index, e, batch, layout)
        g = pool_graphs(x, batch, num_graphs, self.pooling, self.pool_norm) if self.level == "graph" else None
        out = self.head(x if g is None else self.readout_input(g, data))
        if not return_details:
            return out
        mask = layout.mask if isinstance(layout, DenseIndex) else DenseIndex.from_batch(batch, num_graphs).mask
        return out, {"hidden": hidden, "attn": attn, "mask": mask, "graph_emb": g}

    def for_inference(self) -> "SigGateGT":
        """This model, trained, as an inference model: put in eval mode, and returned with
        every layer's BatchNorms folded (:meth:`GPSLayer.for_inference`). Its eval outputs
        equal this model's (up to float rounding); it shares this model's modules and
        snapshots the folded ones, so build it again after the weights or statistics
        change. It refuses training and ``return_details``.

        Example: ``model.for_inference()(batch)``, under ``torch.inference_mode()``."""
        if self.training:
            self.eval()
        folded = copy.copy(self)
        folded._modules = dict(self._modules)  # a module dict of its own: the layers are replaced, not shared
        folded.layers = nn.ModuleList(layer.for_inference() for layer in self.layers)
        return folded

    @classmethod
    def from_config(cls, model_cfg, info) -> "SigGateGT":
        """Build from a model config (``siggate.config.ModelConfig`` or dict) and a
        :class:`siggate.data.base.TaskInfo`."""
        cfg = model_cfg if isinstance(model_cfg, dict) else model_cfg.to_dict()
        keys = ("dim", "layers", "heads", "local", "attn", "gate", "gate_position", "gate_bias_init",
                "gate_weight_std", "dropout", "attn_dropout", "pe", "pe_steps", "pe_dim", "pooling", "head_layers",
                "impl", "attn_type", "pool_norm")
        kwargs = {k: cfg[k] for k in keys if k in cfg}
        kwargs["mol_features_dim"] = mol_features_dim(cfg.get("mol_features", "none"))
        kwargs["ffn_dim"] = resolve_ffn_dim(cfg)
        kwargs["attn_kwargs"] = attn_kwargs_from_config(cfg)
        return cls(
            num_tasks=info.num_outputs,
            node_features=info.node_features,
            num_node_types=info.num_node_types,
            num_edge_types=info.num_edge_types,
            level=info.level,
            num_node_features=info.num_node_features,
            **kwargs,
        )
