"""The pictures of a run (matplotlib, Agg backend, PNG): what a person looks at before the numbers.

* :func:`parity_figure`: test predictions against labels, one panel per target (the first
  :data:`MAX_PANELS` of a run of many), the diagonal,
  MAE and R² in the title; activity-cliff compounds marked when the CSV has a cliff column
  (:data:`CLIFF_COLUMNS`, e.g. MoleculeACE's ``cliff_mol``).
* :func:`learning_figure`: training loss and the validation/test metric per epoch, one line per
  GNN member (overlaid), from each run's ``history``.
* :func:`residual_figure`: the absolute test error against the ensemble's spread, with the
  lines ``|error| = sigma`` and ``2 sigma``.
* :func:`roc_figure`: a classification run's test ROC curve per target, its ROC-AUC in the title.

:func:`write_run_plots` writes them into a ``--data`` run folder (regression: ``parity.png`` and
``residuals.png`` when the members' spread is not zero everywhere; binary and multilabel:
``roc.png``, not a parity plot of probabilities; ``learning_curves.png``); ``siggate evaluate --data``
draws its own parity plot. Each ``*_figure`` function returns the figure, so tests can count
what it holds; :func:`save_figure` writes and closes it. matplotlib is imported inside the
functions only: ``siggate --help`` never loads it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from ..predictors.conformal import as_2d

#: the run folder's pictures
PARITY, LEARNING, RESIDUALS, ROC = "parity.png", "learning_curves.png", "residuals.png", "roc.png"
#: targets drawn per picture, in rows of PANEL_COLUMNS: a run of many targets (a pretraining's
#: ~190 descriptors) shows its first MAX_PANELS, and the picture says so
MAX_PANELS, PANEL_COLUMNS = 12, 4
#: CSV columns that mark activity-cliff compounds (first found is used), truthy values below
CLIFF_COLUMNS = ("cliff_mol", "cliff")
_TRUE = {"1", "1.0", "true", "yes", "y", "t"}
#: the ``Software`` text of every picture siggate draws (:func:`save_figure`)
DRAWN_BY = "siggate"


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: str | Path, dpi: int = 110, title: str | None = None) -> Path:
    """Write ``fig`` (with ``title`` above its panels, before a title it has: :func:`_panels`' "the
    first 12 of N targets") as a PNG at ``path`` and close it: the one way siggate saves a picture.
    The folder is created, and the file is written atomically (a full disk leaves the earlier
    picture, not half of one). The PNG's ``Software`` text says :data:`DRAWN_BY`
    (:func:`drawn_by_siggate`)."""
    from ..files import atomic_write

    plt = _pyplot()
    path = Path(path)
    if title:
        had = getattr(fig, "_suptitle", None)  # (Figure.get_suptitle is matplotlib 3.8's)
        had = had.get_text() if had is not None else ""
        fig.suptitle(f"{title}; {had}" if had else title, fontsize=10)
    try:
        fig.tight_layout()
        atomic_write(path, lambda fh: fig.savefig(fh, format="png", dpi=dpi, metadata={"Software": DRAWN_BY}))
    finally:
        plt.close(fig)
    return path


def drawn_by_siggate(path: str | Path) -> bool:
    """Whether the PNG at ``path`` is one :func:`save_figure` wrote: a picture that a command may
    replace where it writes beside the user's own files (another PNG of that name is theirs)."""
    try:
        from PIL import Image

        with Image.open(path) as im:
            return str(im.info.get("Software", "")) == DRAWN_BY
    except Exception:  # noqa: BLE001 - not a PNG that can be read: not one of siggate's
        return False


def _panels(plt, n_targets: int):
    """A figure with one panel per target, at most :data:`MAX_PANELS` (the first ones; the figure's
    title says how many of how many), :data:`PANEL_COLUMNS` per row; ``(fig, [axes])``."""
    shown = min(n_targets, MAX_PANELS)
    cols = max(1, min(shown, PANEL_COLUMNS))
    rows = max(1, -(-shown // cols))
    fig, axes = plt.subplots(rows, cols, figsize=(4.4 * cols, 4.2 * rows), squeeze=False)
    flat = list(axes.ravel())
    for ax in flat[shown:]:
        fig.delaxes(ax)
    if shown < n_targets:
        fig.suptitle(f"the first {shown} of {n_targets} targets", fontsize=10)
    return fig, flat[:shown]


#: the most characters of a target's name a panel shows (longer ones overran the next panel's title)
NAME_CHARS = 30


def _shown(name: str, ellipsis: str = "…") -> str:
    """A target's name as a picture shows it: cut to :data:`NAME_CHARS` with ``ellipsis`` (a panel's
    "…"; explain's RDKit drawings, ASCII only, "...")."""
    name = str(name)
    return name if len(name) <= NAME_CHARS else name[:NAME_CHARS - len(ellipsis)] + ellipsis


def _unscored(title: str, name: str, y, p, t: int) -> str | None:
    """The title of target ``t``'s panel where a labelled row's prediction is not finite: the run's
    metrics of such a target are None (:func:`~.metrics.summary`), so its panel scores nothing
    either; None where every prediction is finite. The one rule of the three scored figures."""
    bad = int((~np.isnan(y[:, t]) & ~np.isfinite(p[:, t])).sum())
    return f"{title} {name}: {bad} non-finite predictions, not scored" if bad else None


def parity_figure(labels, preds, names: Sequence[str], cliff=None, title: str = "test"):
    """Predictions against labels, one panel per target (its labelled rows only).

    Args:
        labels, preds: ``[n, T]`` in target units (labels NaN where missing).
        names: the targets' names.
        cliff: ``[n]`` booleans, activity-cliff compounds (drawn as orange triangles), or ``None``.
        title: the set the points come from.
    """
    plt = _pyplot()
    y, p = as_2d(labels), as_2d(preds)
    fig, axes = _panels(plt, y.shape[1])
    for t, ax in enumerate(axes):
        name, ok = _shown(names[t]), ~np.isnan(y[:, t]) & np.isfinite(p[:, t])
        marked = np.zeros(len(y), bool) if cliff is None else np.asarray(cliff, bool)
        plain, sharp = ok & ~marked, ok & marked
        ax.scatter(y[plain, t], p[plain, t], s=14, alpha=0.7, color="tab:blue", label="molecule")
        if sharp.any():
            ax.scatter(y[sharp, t], p[sharp, t], s=26, marker="^", color="tab:orange", edgecolor="k",
                       linewidth=0.4, label="cliff compound")
        if ok.any():
            lo = float(min(y[ok, t].min(), p[ok, t].min()))
            hi = float(max(y[ok, t].max(), p[ok, t].max()))
            pad = 0.05 * (hi - lo or 1.0)
            ax.plot([lo - pad, hi + pad], [lo - pad, hi + pad], color="k", lw=0.8, ls="--", label="y = x")
            err = p[ok, t] - y[ok, t]
            ss = float(np.sum((y[ok, t] - y[ok, t].mean()) ** 2))
            r2 = f"{1 - float(np.sum(err ** 2)) / ss:.3f}" if ss > 0 else "n/a"
            ax.set_title(_unscored(title, name, y, p, t) or
                         f"{title} {name}: n {int(ok.sum())}, MAE {np.mean(np.abs(err)):.3g}, R² {r2}", fontsize=9)
        else:  # (an empty panel said nothing: a file without this target's labels)
            ax.set_title(f"{title} {name}: no labels, not scored", fontsize=9)
        ax.set_xlabel(f"label {name}")
        ax.set_ylabel(f"prediction {name}")
        ax.legend(fontsize=7, loc="best")
        ax.grid(alpha=0.3)
    return fig


def learning_figure(histories: dict, metric: str):
    """Training loss (left) and the validation (solid) and test (dashed) metric (right) per
    epoch; ``histories`` maps a member's name to its ``history`` (``metrics.json``). Where a
    member's epochs were scored with both kinds of BatchNorm statistics (a run keeping its last
    epoch recomputes them only for it), the recomputed points are circled and named."""
    from matplotlib.ticker import MaxNLocator

    plt = _pyplot()
    fig, (loss_ax, metric_ax) = plt.subplots(1, 2, figsize=(10, 4))
    circled = False  # the recomputed-statistics marker is named once, whatever the members
    for i, (name, hist) in enumerate(histories.items()):
        epochs = [h["epoch"] for h in hist]
        color = f"C{i % 10}"
        loss_ax.plot(epochs, [h["train_loss"] for h in hist], color=color, marker=".", label=name)
        metric_ax.plot(epochs, [h["val"] for h in hist], color=color, marker=".", label=f"{name} val")
        test = [(e, h["test"]) for e, h in zip(epochs, hist) if h.get("test") is not None]
        if test:  # (a marker: one epoch's test point was a line of one point, not drawn)
            metric_ax.plot(*zip(*test), color=color, ls="--", marker="x", ms=4, label=f"{name} test")
        norms = [h.get("eval_norm") for h in hist]
        if "running" in norms and "train" in norms:  # a run keeping its last epoch (bn_stats.epoch_norm)
            at = [(e, h["val"]) for e, h in zip(epochs, hist) if h.get("eval_norm") == "train"]
            metric_ax.plot(*zip(*at), color=color, ls="none", marker="o", mfc="none", ms=8,
                           label=None if circled else "circled: scored with recomputed BatchNorm statistics "
                                                      "(the others: running)")
            circled = True
    loss_ax.set_title("training loss (normalised targets)", fontsize=9)
    metric_ax.set_title(f"{metric} per epoch", fontsize=9)
    every = sorted({h["epoch"] for hist in histories.values() for h in hist})
    for ax, label in ((loss_ax, "loss"), (metric_ax, metric)):
        ax.set_xlabel("epoch")
        if len(every) <= 2:  # (the locator gives up below two whole numbers: 0.945 ... 1.050)
            ax.set_xticks(every)
        else:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # epochs are whole
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        # beside the curves, not over them, once there are more than a few lines
        many = len(ax.get_legend_handles_labels()[1]) > 6
        ax.legend(fontsize=7, **({"loc": "upper left", "bbox_to_anchor": (1.01, 1.0)} if many else {}))
    if any(len(ax.get_legend_handles_labels()[1]) > 6 for ax in (loss_ax, metric_ax)):
        fig.set_size_inches(14, 4)
        fig.tight_layout()
    return fig


def residual_figure(labels, preds, spread, names: Sequence[str], title: str = "test"):
    """``|prediction - label|`` against the spread over members, one panel per target, with
    the lines ``|error| = sigma`` and ``2 sigma`` (a calibrated Gaussian spread leaves about
    68% and 95% of the points below them)."""
    plt = _pyplot()
    y, p, s = as_2d(labels), as_2d(preds), as_2d(spread)
    fig, axes = _panels(plt, y.shape[1])
    for t, ax in enumerate(axes):
        name, ok = _shown(names[t]), ~np.isnan(y[:, t]) & np.isfinite(p[:, t]) & np.isfinite(s[:, t])
        unscored = _unscored(title, name, y, p, t)
        err = np.abs(p[ok, t] - y[ok, t])
        ax.scatter(s[ok, t], err, s=14, alpha=0.7, color="tab:purple", label="molecule")
        top = float(s[ok, t].max()) if ok.any() else None
        if unscored:  # (as the run's metrics: None)
            ax.set_title(unscored, fontsize=9)
        elif top == 0:  # no spread to judge: not "0% within 1 sigma", which reads as miscalibration
            ax.set_title(f"{title} {name}: spread 0 for every molecule\n(one member holds all the "
                         "weight): no sigma to compare", fontsize=9)  # two lines: one overran the panel
        elif ok.any():
            for k, ls in ((1, "--"), (2, ":")):
                ax.plot([0, top], [0, k * top], color="k", lw=0.8, ls=ls, label=f"|error| = {k} sigma")
            ax.set_title(f"{title} {name}: {np.mean(err <= s[ok, t]):.0%} within 1 sigma, "
                         f"{np.mean(err <= 2 * s[ok, t]):.0%} within 2", fontsize=9)
        else:  # (an empty panel had no title)
            ax.set_title(f"{title} {name}: no labels or spread, not scored", fontsize=9)
        ax.set_xlabel(f"spread over members (sigma) {name}")
        ax.set_ylabel(f"|prediction - label| {name}")
        ax.legend(fontsize=7, loc="best")
        ax.grid(alpha=0.3)
    return fig


def cliff_marks(csv_path: str | Path | None, rows: Sequence[int]) -> np.ndarray | None:
    """``[len(rows)]`` booleans: the CSV rows ``rows`` (0-based data rows) marked in its first
    :data:`CLIFF_COLUMNS` column (``1``, ``true``, ``yes``); ``None`` when the file has no such
    column or cannot be read."""
    if not csv_path or not Path(csv_path).is_file():
        return None
    from ..data.base import DataError
    from ..data.csvdata import column_names, detect_sep, read_table

    try:  # the strict reader of training and evaluate, so its data rows are the rows numbered here
        path = Path(csv_path)
        header, records = read_table(path, detect_sep(path))
    except (OSError, DataError):
        return None
    header = column_names(header)  # (as predict and evaluate read it)
    col = next((c for c in CLIFF_COLUMNS if c in header), None)
    if col is None:
        return None
    at = header.index(col)
    flags = [at < len(rec) and rec[at].strip().lower() in _TRUE for rec in records]
    return np.asarray([bool(flags[r]) if 0 <= r < len(flags) else False for r in rows])


def roc_figure(labels, probs, names: Sequence[str], title: str = "test"):
    """A classification run's ROC curve per target (its labelled rows; 0/1 labels, the probability
    of class 1), the chance diagonal, and the ROC-AUC in the title (a target with one class only,
    or no labels, has no curve, and says so)."""
    from sklearn.metrics import roc_auc_score, roc_curve

    plt = _pyplot()
    y, p = as_2d(labels), as_2d(probs)
    fig, axes = _panels(plt, y.shape[1])
    for t, ax in enumerate(axes):
        name, ok = _shown(names[t]), ~np.isnan(y[:, t]) & np.isfinite(p[:, t])
        unscored = _unscored(title, name, y, p, t)
        ax.plot([0, 1], [0, 1], color="0.6", lw=0.8, ls="--", label="chance")
        if unscored:  # (as the run's metrics: None)
            ax.set_title(unscored, fontsize=9)
        elif len(np.unique(y[ok, t])) == 2:
            fpr, tpr, _ = roc_curve(y[ok, t], p[ok, t])
            ax.plot(fpr, tpr, color="tab:blue", lw=1.5, label="model")
            ax.set_title(f"{title} {name}: n {int(ok.sum())}, ROC-AUC {roc_auc_score(y[ok, t], p[ok, t]):.3f}",
                         fontsize=9)
        elif ok.any():
            ax.set_title(f"{title} {name}: one class only, no ROC curve", fontsize=9)
        else:
            ax.set_title(f"{title} {name}: no labels, not scored", fontsize=9)
        ax.set_xlabel("false positive rate")
        ax.set_ylabel("true positive rate")
        ax.legend(fontsize=7, loc="lower right")
        ax.grid(alpha=0.3)
    return fig


def write_run_plots(out: str | Path, names: Sequence[str], metric: str, labels, preds, spread=None,
                    histories: dict | None = None, cliff=None, task: str = "regression") -> list[Path]:
    """A run folder's pictures: regression: :data:`PARITY` (test predictions) and
    :data:`RESIDUALS` (when the members' ``spread`` is not zero everywhere: with one member, or all
    the weight on one, there is nothing to draw); a classification ``task``: :data:`ROC`; and
    :data:`LEARNING` (when ``histories`` holds any). Returns the paths written."""
    out = Path(out)
    if task == "regression":
        paths = [save_figure(parity_figure(labels, preds, names, cliff), out / PARITY)]
    else:
        paths = [save_figure(roc_figure(labels, preds, names), out / ROC)]
    if histories:
        paths.append(save_figure(learning_figure(histories, metric), out / LEARNING))
    if task == "regression" and spread is not None and np.nanmax(np.abs(as_2d(spread)), initial=0.0) > 0:
        paths.append(save_figure(residual_figure(labels, preds, spread, names), out / RESIDUALS))
    return paths
