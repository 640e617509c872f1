"""Neural-network building blocks of SigGate-GT."""

from .attention import ATTN_IMPLS, GATE_KINDS, GATE_POSITIONS, GatedMultiheadAttention, resolve_impl
from .encoders import LapPEEncoder, NodeEncoder, RWSEEncoder, TypeEncoder
from .gps_conv import GatedGPSConv
from .kernels.layout import PackedLayout
from .layer import LOCAL_MODELS, DenseIndex, GatedGCNLocal, GINELocal, GPSLayer
from .model import SigGateGT, mlp_head

__all__ = [
    "ATTN_IMPLS", "GATE_KINDS", "GATE_POSITIONS", "GatedMultiheadAttention", "resolve_impl", "GPSLayer",
    "GINELocal", "GatedGCNLocal", "DenseIndex", "PackedLayout", "LOCAL_MODELS", "SigGateGT", "mlp_head",
    "GatedGPSConv", "NodeEncoder", "RWSEEncoder", "LapPEEncoder", "TypeEncoder",
]
