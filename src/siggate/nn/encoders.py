"""Node, edge and positional encoders (GraphGPS-style feature encoders).

The node encoder embeds atoms into ``dim - pe_dim`` channels and the positional encoder
produces ``pe_dim`` channels; the two are concatenated, as in GraphGPS.
"""

from __future__ import annotations

import numbers
from typing import Sequence

import torch
from ogb.utils.features import get_atom_feature_dims, get_bond_feature_dims
from torch import Tensor, nn

from .attention import check_whole


def _whole(value) -> bool:
    """Whether ``value`` is a whole number (not a bool, a float or a string)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


class TypeEncoder(nn.Module):
    """Embedding of integer node/edge types (ZINC atoms and bonds).

    Shapes: ``[N]`` or ``[N, 1]`` long -> ``[N, dim]``. Several columns, or float values (one-hot
    features), are refused: they are not one type per row (``node_features="dense"`` reads float
    node columns; edge features of several columns need ``"ogb"`` or a model of one's own).
    """

    def __init__(self, num_types: int, dim: int, what: str = "types") -> None:
        super().__init__()
        check_whole(f"{what}: the number of types", num_types, 1)
        self.num_types = num_types
        self.what = what
        self.emb = nn.Embedding(num_types, dim)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.emb.reset_parameters()

    def forward(self, x: Tensor) -> Tensor:
        if x.dim() == 2 and x.size(1) == 1:
            x = x[:, 0]
        if x.dim() != 1 or x.is_floating_point() or x.is_complex():
            raise ValueError(f"{self.what}: expected one integer type per row, [N] or [N, 1], got a {x.dtype} tensor "
                             f"of shape {tuple(x.shape)}; store the type index (0..{self.num_types - 1}), not several "
                             f"columns or a one-hot encoding")
        return self.emb(x)


class DenseEncoder(nn.Module):
    """Linear map of float node features (``node_features="dense"``), GraphGPS's ``LinearNode``.

    Shapes: ``[N, F]`` float -> ``[N, dim]``.
    """

    def __init__(self, num_features: int, dim: int) -> None:
        super().__init__()
        self.lin = nn.Linear(num_features, dim)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.lin.reset_parameters()

    def forward(self, x: Tensor) -> Tensor:
        return self.lin(x.to(self.lin.weight.dtype))  # stored features in the model's dtype (float64 too)


class _EmbeddingSum(nn.Module):
    """Sum of one ``nn.Embedding(dims[i], dim)`` per column of an integer feature matrix,
    each initialised with ``xavier_uniform_``: OGB's ``AtomEncoder``/``BondEncoder``
    (``ogb.graphproppred.mol_encoder``), written here so that ``import siggate.nn`` does not
    load ``ogb.graphproppred`` (and scikit-learn through it). The embeddings are built and
    initialised in OGB's order and stored under OGB's attribute name, so a seed gives the
    same parameters as OGB's class and old checkpoints load (``tests/test_nn.py`` pins both).

    Shapes: ``[N, len(dims)]`` long -> ``[N, dim]``.
    """

    _list_name = "embedding_list"

    def __init__(self, dims: Sequence[int], dim: int) -> None:
        super().__init__()
        embeddings = nn.ModuleList()
        for size in dims:
            emb = nn.Embedding(size, dim)
            nn.init.xavier_uniform_(emb.weight.data)
            embeddings.append(emb)
        setattr(self, self._list_name, embeddings)

    def reset_parameters(self) -> None:
        for emb in getattr(self, self._list_name):
            nn.init.xavier_uniform_(emb.weight.data)

    def forward(self, x: Tensor) -> Tensor:
        embeddings = getattr(self, self._list_name)
        if x.dim() != 2 or x.shape[1] != len(embeddings):  # (an IndexError from inside the loop before)
            raise ValueError(f"{type(self).__name__} reads [rows, {len(embeddings)}] integer features (OGB's "
                             f"featurization, ogb.utils.smiles2graph), got shape {tuple(x.shape)}")
        out = 0
        for i in range(x.shape[1]):
            out = out + embeddings[i](x[:, i])
        return out


class OGBAtomEncoder(_EmbeddingSum):
    """OGB's ``AtomEncoder``: sum of 9 categorical embeddings (``get_atom_feature_dims()``).

    Shapes: ``[N, 9]`` long -> ``[N, dim]``.
    """

    _list_name = "atom_embedding_list"

    def __init__(self, dim: int) -> None:
        super().__init__(get_atom_feature_dims(), dim)


class OGBBondEncoder(_EmbeddingSum):
    """OGB's ``BondEncoder``: sum of 3 categorical embeddings (``get_bond_feature_dims()``).

    Shapes: ``[E, 3]`` long -> ``[E, dim]``.
    """

    _list_name = "bond_embedding_list"

    def __init__(self, dim: int) -> None:
        super().__init__(get_bond_feature_dims(), dim)


class RWSEEncoder(nn.Module):
    """Random-walk structural encoding (Dwivedi et al. 2022): BatchNorm over the ``k``
    return probabilities, then a linear map to ``pe_dim`` channels (GraphGPS ``RWSE``).

    Shapes: ``rwse [N, k]`` -> ``[N, pe_dim]``.
    """

    def __init__(self, steps: int, pe_dim: int) -> None:
        super().__init__()
        self.steps = steps
        self.norm = nn.BatchNorm1d(steps)
        self.lin = nn.Linear(steps, pe_dim)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.norm.reset_parameters()
        self.lin.reset_parameters()

    def forward(self, data) -> Tensor:
        return self.lin(self.norm(data.rwse.to(self.lin.weight.dtype)))


class LapPEEncoder(nn.Module):
    """Laplacian eigenvector encoding with a DeepSet over the ``m`` (eigvec, eigval) pairs
    (GraphGPS ``LapPE`` with ``model: DeepSet``).

    Each pair ``(u_i[v], lambda_i)`` goes through GraphGPS's DeepSet MLP: for ``layers = 2``
    ``Linear(2, 2 pe_dim) -> ReLU -> Linear(2 pe_dim, pe_dim) -> ReLU``; each extra layer
    adds a ``Linear(2 pe_dim, 2 pe_dim) -> ReLU`` in the middle, and ``layers = 1`` is
    ``Linear(2, pe_dim) -> ReLU``. Pairs that are padding (NaN, for graphs with fewer than
    ``m`` nodes) are zeroed; the ``m`` results are summed. In training, each eigenvector's
    sign is flipped at random per graph (eigenvectors are only defined up to sign).

    Shapes: ``lap_vec [N, m]``, ``lap_val [N, m]`` -> ``[N, pe_dim]``.
    """

    def __init__(self, m: int, pe_dim: int, layers: int = 2) -> None:
        super().__init__()
        if layers < 1:
            raise ValueError(f"layers must be >= 1, got {layers}")
        self.m = m
        wide = pe_dim if layers == 1 else 2 * pe_dim
        self.lin_in = nn.Linear(2, wide)
        mlp: list[nn.Module] = [nn.ReLU()]
        for _ in range(layers - 2):
            mlp += [nn.Linear(wide, wide), nn.ReLU()]
        if layers > 1:
            mlp += [nn.Linear(wide, pe_dim), nn.ReLU()]
        self.mlp = nn.Sequential(*mlp)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.lin_in.reset_parameters()
        for mod in self.mlp:
            if isinstance(mod, nn.Linear):
                mod.reset_parameters()

    def forward(self, data) -> Tensor:
        vec, val = (t.to(self.lin_in.weight.dtype) for t in (data.lap_vec, data.lap_val))
        if self.training:
            batch = getattr(data, "batch", None)
            num_graphs = int(batch.max()) + 1 if batch is not None and batch.numel() else 1
            sign = torch.randint(0, 2, (num_graphs, vec.size(1)), device=vec.device) * 2 - 1
            vec = vec * (sign[batch] if batch is not None else sign[0])
        pad = torch.isnan(vec) | torch.isnan(val)
        pair = torch.stack([vec, val], dim=-1).masked_fill(pad.unsqueeze(-1), 0.0)  # N, m, 2
        h = self.mlp(self.lin_in(pair))  # N, m, pe_dim
        return h.masked_fill(pad.unsqueeze(-1), 0.0).sum(dim=1)


PE_ENCODERS = {"rwse": RWSEEncoder, "lappe": LapPEEncoder}


#: ``node_features`` -> ``(width, num_node_types, num_node_features) -> encoder of data.x``
FEATURE_ENCODERS = {
    "ogb": lambda width, types, features: OGBAtomEncoder(width),
    "typed": lambda width, types, features: TypeEncoder(types, width, "num_node_types (node_features='typed', x)"),
    "dense": lambda width, types, features: DenseEncoder(features, width),
}


class NodeEncoder(nn.Module):
    """Node feature embedding (``dim - pe_dim`` channels) concatenated with a positional encoding.

    Args:
        node_features (str): ``"ogb"`` (OGB 9-column atoms), ``"typed"`` (type index) or
            ``"dense"`` (float columns, a linear map).
        dim (int): output width.
        num_node_types (int): number of types for ``"typed"``.
        pe (str): ``"none"``, ``"rwse"`` or ``"lappe"``.
        pe_steps (int): RWSE steps ``k`` or LapPE eigenvectors ``m``.
        pe_dim (int): channels of the positional part.
        num_node_features (int): float columns of ``x`` for ``"dense"``.

    Shapes: ``data.x`` (+ ``data.rwse`` or ``data.lap_vec``/``lap_val``) -> ``[N, dim]``.
    """

    def __init__(self, node_features: str, dim: int, num_node_types: int = 0, pe: str = "none",
                 pe_steps: int = 0, pe_dim: int = 0, num_node_features: int = 0) -> None:
        super().__init__()
        if node_features not in FEATURE_ENCODERS:
            raise ValueError(f"node_features must be one of {sorted(FEATURE_ENCODERS)}, got {node_features!r}")
        if pe != "none" and pe not in PE_ENCODERS:
            raise ValueError(f"pe must be one of {sorted(PE_ENCODERS) + ['none']}, got {pe!r}")
        if pe != "none" and not (_whole(pe_dim) and 0 < pe_dim < dim):  # (4.0 failed in the embedding with torch's words)
            raise ValueError(f"pe_dim must be a whole number in (0, dim={dim}) when pe={pe!r}, got {pe_dim!r}")
        if pe != "none":  # (0 built an encoder of no input: the encoding silently absent)
            check_whole(f"pe_steps (the {'random-walk steps' if pe == 'rwse' else 'eigenvectors'} of pe={pe!r})",
                        pe_steps, 1)
        if node_features == "dense" and not (_whole(num_node_features) and num_node_features > 0):
            raise ValueError(f"node_features='dense' needs num_node_features > 0 (the float columns of x), "
                             f"a whole number, got {num_node_features!r}")
        atom_dim = dim - (pe_dim if pe != "none" else 0)
        self.atom = FEATURE_ENCODERS[node_features](atom_dim, num_node_types, num_node_features)
        self.pe = PE_ENCODERS[pe](pe_steps, pe_dim) if pe != "none" else None

    def reset_parameters(self) -> None:
        self.atom.reset_parameters()
        if self.pe is not None:
            self.pe.reset_parameters()

    def forward(self, data) -> Tensor:
        h = self.atom(data.x)
        if self.pe is None:
            return h
        return torch.cat([h, self.pe(data)], dim=-1)


def make_edge_encoder(node_features: str, dim: int, num_edge_types: int = 0) -> nn.Module:
    """OGB ``BondEncoder`` for ``"ogb"`` features, else a type embedding of ``num_edge_types``
    (one type for graphs without edge features: GraphGPS's ``DummyEdge``)."""
    if node_features == "ogb":
        return OGBBondEncoder(dim)
    return TypeEncoder(num_edge_types, dim, f"num_edge_types (node_features={node_features!r}, edge_attr; 1 for "
                                            "graphs without edge features)")
