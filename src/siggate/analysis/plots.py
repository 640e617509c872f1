"""Matplotlib helpers (Agg backend; nothing is shown, everything is saved)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from ..options import parse_gate_spec  # noqa: E402

GATE_COLORS = {"none": "tab:gray", "headwise": "tab:blue", "elementwise": "tab:red"}


def color(name: str, i: int = 0) -> str:
    base, _ = parse_gate_spec(name)
    return GATE_COLORS.get(base, f"C{i % 10}")


def subplots(nrows: int = 1, ncols: int = 1, size=(4.5, 3.4), **kw):
    fig, axes = plt.subplots(nrows, ncols, figsize=(size[0] * ncols, size[1] * nrows), squeeze=False, **kw)
    return fig, axes


def save(fig, path: Path) -> Path:
    from ..train.plots import save_figure

    return save_figure(fig, path, dpi=110)
