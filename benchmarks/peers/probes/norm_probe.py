"""Probe, not a siggate option: ``siggate train`` with the GPS layers' BatchNorms replaced.

    python benchmarks/peers/probes/norm_probe.py layer|none train --data ... (siggate train's arguments)

``layer``: LayerNorm; ``none``: no normalisation. The BatchNorm folding of the fast
inference path is switched off. Used for ``results/additive_probe.json``.
"""

import sys
import types

import torch

import siggate.nn.layer as layer_module
from siggate.cli import main


class _NoNorm(torch.nn.Identity):
    def reset_parameters(self) -> None:
        pass


def _norm(kind: str):
    return lambda dim, *args, **kwargs: torch.nn.LayerNorm(dim) if kind == "layer" else _NoNorm()


if __name__ == "__main__":
    patched = types.SimpleNamespace(**{n: getattr(torch.nn, n) for n in dir(torch.nn) if not n.startswith("__")})
    patched.BatchNorm1d = _norm(sys.argv[1])
    layer_module.nn = patched
    sys.exit(main(sys.argv[2:]))
