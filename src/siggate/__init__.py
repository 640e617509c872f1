"""siggate: sigmoid-gated attention for GraphGPS graph transformers (SigGate-GT).

``siggate.SigGateRegressor`` and ``siggate.SigGateClassifier`` (scikit-learn estimators on
SMILES, :mod:`siggate.estimator`) are imported on first use, so ``import siggate`` stays light.
"""

from .version import __version__

__all__ = ["__version__", "SigGateRegressor", "SigGateClassifier"]

#: names served lazily from :mod:`siggate.estimator`
_ESTIMATORS = ("SigGateRegressor", "SigGateClassifier")


def __getattr__(name: str):
    if name in _ESTIMATORS:
        from . import estimator

        return getattr(estimator, name)
    raise AttributeError(f"module 'siggate' has no attribute {name!r}")
