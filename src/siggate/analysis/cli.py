"""``siggate analyze``: mechanism analyses of the paper's claims.

Sub-commands (each writes ``OUT/<name>.json`` and ``OUT/<name>.png`` and prints a table):

* ``synthetic``  stable rank of gated vs ungated heads on random graphs;
* ``rank``       per-layer, per-head stable rank before/after the gate on a dataset split;
* ``smoothing``  Dirichlet energy, MAD and rank of node representations vs depth;
* ``entropy``    attention entropy per layer and head over training;
* ``lr-sweep``   final metric and divergence over learning rates; stable LR range;
* ``overhead``   extra parameters and forward+backward time of each gate kind;
* ``report``     one Markdown report of all results with a verdict per claim;
* ``claims``     the paper's claims against committed compare and analysis results, one table.
"""

from __future__ import annotations

import importlib

SUBCOMMANDS = {
    "synthetic": "siggate.analysis.synthetic",
    "rank": "siggate.analysis.rank",
    "smoothing": "siggate.analysis.smoothing",
    "entropy": "siggate.analysis.entropy",
    "lr-sweep": "siggate.analysis.lrsweep",
    "overhead": "siggate.analysis.overhead",
    "report": "siggate.analysis.report",
    "claims": "siggate.analysis.claims",
}


def register(subparsers) -> None:
    p = subparsers.add_parser("analyze", help="mechanism analyses of the paper's claims (rank, smoothing, ...)",
                              description=__doc__.split("\n\n", 1)[1] if __doc__ else None)
    sub = p.add_subparsers(dest="analysis", metavar="ANALYSIS")
    for module in SUBCOMMANDS.values():
        importlib.import_module(module).register(sub)

    def _help(args) -> int:
        p.print_help()
        return 2

    p.set_defaults(func=_help)
