#!/usr/bin/env python
"""Throughput and peak memory of SigGate-GT against PyG's GPSConv.

A thin wrapper: the logic lives in :mod:`siggate.perf.bench` so that the installed
``siggate bench`` command works too. Same options, e.g.::

    python benchmarks/throughput.py --config zinc --threads 1 --out benchmarks/results
    python benchmarks/throughput.py --scaling --out benchmarks/results

See benchmarks/README.md.
"""

import sys

from siggate.perf.bench import main

if __name__ == "__main__":
    sys.exit(main())
