"""Probe, not a siggate option: ``siggate train`` with add pooling divided by a constant
(chemprop's ``norm`` aggregation divides the sum by 100).

    python benchmarks/peers/probes/pool_probe.py 25 train --data ... (siggate train's arguments)

Used for ``results/additive_probe.json``.
"""

import sys

from torch_geometric.nn import global_add_pool

import siggate.nn.model as model_module
from siggate.cli import main

if __name__ == "__main__":
    scale = float(sys.argv[1])
    model_module.POOLING["add"] = lambda x, batch, size=None: global_add_pool(x, batch, size=size) / scale
    sys.exit(main(sys.argv[2:]))
