"""Load a script of ``benchmarks/`` by its path, under a module name of the caller's choice
(the scripts are not a package), for the tests of the harnesses."""

from __future__ import annotations

from pathlib import Path

from siggate.train.executor import load_script

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load(name: str, relpath: str):
    """The module of ``benchmarks/<relpath>``, executed afresh and registered in ``sys.modules``
    as ``name`` (so the study's ``"name:function"`` requests find it)."""
    return load_script(name, BENCHMARKS / relpath)
