"""Neural-network building blocks of SigGate-GT."""

from .attention import GATE_KINDS, GATE_POSITIONS, GatedMultiheadAttention
from .encoders import LapPEEncoder, NodeEncoder, RWSEEncoder, TypeEncoder
from .layer import LOCAL_MODELS, DenseIndex, GatedGCNLocal, GINELocal, GPSLayer
from .model import SigGateGT

__all__ = [
    "GATE_KINDS", "GATE_POSITIONS", "GatedMultiheadAttention", "GPSLayer", "GINELocal",
    "GatedGCNLocal", "DenseIndex", "LOCAL_MODELS", "SigGateGT", "NodeEncoder", "RWSEEncoder",
    "LapPEEncoder", "TypeEncoder",
]
