"""Neural-network building blocks of SigGate-GT."""

from .attention import (
    ATTN_IMPLS,
    GATE_KINDS,
    GATE_POSITIONS,
    GatedAttentionBase,
    GatedMultiheadAttention,
    resolve_impl,
)
from .attention_types import ATTENTION_TYPES, make_attention
from .encoders import LapPEEncoder, NodeEncoder, RWSEEncoder, TypeEncoder
from .exphormer import GatedExphormerAttention
from .gps_conv import GatedGPSConv
from .kernels.layout import GraphSegments, PackedLayout
from .layer import LOCAL_MODELS, DenseIndex, GatedGCNLocal, GINELocal, GPSLayer
from .model import SigGateGT, mlp_head
from .performer import GatedPerformerAttention

__all__ = [
    "ATTN_IMPLS", "GATE_KINDS", "GATE_POSITIONS", "GatedAttentionBase", "GatedMultiheadAttention",
    "GatedPerformerAttention", "GatedExphormerAttention", "ATTENTION_TYPES", "make_attention", "GraphSegments",
    "resolve_impl", "GPSLayer",
    "GINELocal", "GatedGCNLocal", "DenseIndex", "PackedLayout", "LOCAL_MODELS", "SigGateGT", "mlp_head",
    "GatedGPSConv", "NodeEncoder", "RWSEEncoder", "LapPEEncoder", "TypeEncoder",
]
