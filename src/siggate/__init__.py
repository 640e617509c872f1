"""siggate: sigmoid-gated attention for GraphGPS graph transformers (SigGate-GT)."""

__version__ = "0.1.0"
