"""Matplotlib helpers of ``siggate bench`` (Agg backend; figures are saved, never shown)."""

from __future__ import annotations

from pathlib import Path


def figure(ncols: int, size=(11, 4.2)):
    """A figure with ``ncols`` panels side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(1, ncols, figsize=size)


def loglog_panels(axes, panels, xlabel: str) -> None:
    """Log-log axes with a grid; ``panels``: ``(title, y unit)`` per axis."""
    for ax, (title, unit) in zip(axes, panels):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(unit)
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)


def save_figure(fig, path: Path, title: str) -> None:
    from ..train.plots import save_figure as save

    save(fig, path, dpi=120, title=title)
