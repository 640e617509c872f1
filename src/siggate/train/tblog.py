"""TensorBoard logging that can never break a training run.

:class:`TBLogger` wraps ``torch.utils.tensorboard.SummaryWriter``. If TensorBoard is not
installed, the folder cannot be written, or any later call fails (full disk, ...), it logs one
warning and turns itself off; training goes on with ``log.csv`` and the checkpoints.
"""

from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger("siggate.train")


class TBLogger:
    """Per-epoch scalars of a run in ``log_dir`` (step = epoch number, 1-based).

    Tags: ``train/loss``, ``train/lr``, ``train/grad_norm``, ``val/<metric>``,
    ``test/<metric>``, ``gate/mean_layer<i>`` (mean gate value of layer ``i`` on validation
    graphs; absent without gates) and ``time/epoch_seconds``.

    Args:
        log_dir (str | Path): folder for the event files.
        purge_step (int | None): on resume, the first epoch that will be written again;
            TensorBoard hides events at or after it from the interrupted run. (default: ``None``)
        enabled (bool): ``False`` makes every call a no-op. (default: ``True``)
    """

    def __init__(self, log_dir: str | Path, purge_step: int | None = None, enabled: bool = True) -> None:
        self.log_dir = Path(log_dir)
        self._writer = None
        if not enabled:
            return
        try:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(log_dir=str(self.log_dir), purge_step=purge_step)
        except Exception as exc:  # noqa: BLE001 - logging must never stop training
            log.warning("TensorBoard logging is off (%s: %s); log.csv is still written", type(exc).__name__, exc)

    @property
    def enabled(self) -> bool:
        return self._writer is not None

    def _guard(self, fn) -> None:
        if self._writer is None:
            return
        try:
            fn(self._writer)
        except Exception as exc:  # noqa: BLE001
            log.warning("TensorBoard logging failed (%s: %s) and is now off for this run", type(exc).__name__, exc)
            self._disable()

    def _disable(self) -> None:
        writer, self._writer = self._writer, None
        try:
            writer.close()
        except Exception:  # noqa: BLE001
            pass

    def log_epoch(self, row: dict, metric: str) -> None:
        """Write one epoch's row of the training history (the dict the loop keeps)."""
        def write(w) -> None:
            step = int(row["epoch"])
            w.add_scalar("train/loss", row["train_loss"], step)
            w.add_scalar("train/lr", row["lr"], step)
            w.add_scalar("train/grad_norm", row["grad_norm"], step)
            w.add_scalar(f"val/{metric}", row["val"], step)
            if row.get("test") is not None:  # a run without a test split (scikit-learn's fit) has none
                w.add_scalar(f"test/{metric}", row["test"], step)
            for i, g in enumerate(row.get("gate_mean") or []):
                w.add_scalar(f"gate/mean_layer{i}", g, step)
            w.add_scalar("time/epoch_seconds", row["seconds"], step)
            w.flush()

        self._guard(write)

    def close(self) -> None:
        if self._writer is not None:
            self._disable()
