"""``siggate bench`` on the ``siggate`` CLI: the parser from :mod:`siggate.perf.args`, the
work in :func:`siggate.perf.bench._cmd`, imported only when the command runs."""

from __future__ import annotations

from ..config_args import add_command
from .args import DESCRIPTION, EXAMPLES, HELP, add_arguments


def register(subparsers) -> None:
    """Add ``bench`` to the ``siggate`` CLI."""
    p = add_command(subparsers, "bench", HELP, EXAMPLES, description=DESCRIPTION)
    add_arguments(p)
    p.set_defaults(func="siggate.perf.bench:_cmd")
