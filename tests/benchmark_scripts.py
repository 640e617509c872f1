"""Load a script of ``benchmarks/`` by its path, under a module name of the caller's choice
(the scripts are not a package), for the tests of the harnesses."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load(name: str, relpath: str):
    """The module of ``benchmarks/<relpath>``, registered in ``sys.modules`` as ``name`` (so the
    study's ``"name:function"`` requests find it)."""
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / relpath)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod
