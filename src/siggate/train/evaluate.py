"""``siggate evaluate``: score a trained run, or an ensemble, on labelled graphs.

Two sources of labels:

* the run's own data (default): the dataset named in the checkpoint's config, split as in
  training. A CSV run finds its file by the absolute path and SHA-256 recorded in the
  checkpoint (``data_source``), so it works from any directory; a file whose content changed
  since training is refused, naming both hashes, before anything is scored (its splits and
  scores would silently differ), unless ``allow_changed``.
* an external labelled CSV (``data=FILE``): every row is featurized as ``siggate predict``
  featurizes SMILES (the checkpoint's atom features and positional encodings) and scored as
  one set named ``"data"``; rows that cannot be featurized or have no label are counted, not
  scored.

Any saved predictor is scored through its own ``predict`` (:mod:`siggate.predictors`): a run, or
a folder of several members on their combination (target units for regression, probabilities
for classification), as ``siggate predict`` gives them. Each split gets the dataset's metric
over all targets and per target.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from ..data.base import DataError, TaskInfo
from .metrics import MetricUndefinedError, compute_metric

log = logging.getLogger("siggate.evaluate")

#: the split name of an external ``--data`` file
EXTERNAL_SPLIT = "data"


class EvaluationError(ValueError):
    """A run, ensemble or file that cannot be scored as asked (the message says how to fix it)."""


def _load(checkpoint, device: str):
    """The predictor saved at ``checkpoint`` (:func:`~siggate.train.members.load_predictor`) and its task."""
    from ..predictors.base import PredictorFileError
    from .members import load_predictor
    from .rundir import unfinished

    try:
        predictor = load_predictor(checkpoint, device)
        why = unfinished(checkpoint)
        if why:
            log.warning("%s", why)
        return predictor, predictor.info
    except PredictorFileError as exc:
        raise EvaluationError(str(exc)) from None
    except ValueError as exc:  # members of different tasks
        raise EvaluationError(f"{checkpoint}: {exc}") from None


def score(info: TaskInfo, y_np, p_np) -> dict:
    """``{"metric", "per_target", "n", "metrics"}``: ``info.metric`` of the predictions ``p_np``
    of the labels ``y_np`` (a split's scored rows, :func:`~siggate.train.scoring.scored_rows`: a
    predictor's prediction, in target units, probabilities for classification) over all targets,
    for each target (by name; for ``"multiclass"`` the one class target), the rows scored, and
    :func:`~siggate.train.metrics.summary` (MAE, RMSE, R² or ROC-AUC, PR-AUC, accuracy per target
    and their mean)."""
    from .metrics import summary

    names = info.target_names or [f"target{t}" for t in range(info.num_tasks)]
    overall = float(compute_metric(info.metric, y_np, p_np))
    if info.task == "multiclass" or info.num_tasks == 1:
        per_target = {names[0]: overall}
    else:
        per_target = {n: _metric_or_none(info.metric, y_np[:, t:t + 1], p_np[:, t:t + 1]) for t, n in enumerate(names)}
    return {"metric": overall, "per_target": per_target, "n": int(y_np.shape[0]),
            "metrics": summary(info.task, y_np, p_np, info.target_names or None)}


#: an external file's labels are implausible for a target when their mean lies more than this
#: many training standard deviations from the training mean, or their spread differs by this factor
SUSPECT_SHIFT = 3.0
SUSPECT_SCALE = 5.0


def label_warnings(info: TaskInfo, columns: list[str], graphs: list, target_mean, target_std) -> list[str]:
    """What makes scores on an external file suspect, one sentence each: a label column named
    otherwise than the model's target (scored as that target all the same), and regression
    labels (``graphs``' ``y [1, T]``) whose mean or spread is far from the training targets'
    (``target_mean``/``target_std [T]``, :data:`SUSPECT_SHIFT`, :data:`SUSPECT_SCALE`), the mark of
    another property or other units. A run trained without target normalization records no
    statistics (mean 0, std 1) and gets no spread check, nor does a target whose statistics are NaN."""
    import numpy as np

    out = []
    names = info.target_names or [f"target{t}" for t in range(info.num_tasks)]
    renamed = [(c, n) for c, n in zip(columns, names) if c != n]
    if renamed:
        out.append("scored " + ", ".join(f"column {c!r} as the model's target {n!r}" for c, n in renamed)
                   + ": the names differ, so make sure each is the same property in the same units")
    mean, std = np.asarray(target_mean, dtype=float).reshape(-1), np.asarray(target_std, dtype=float).reshape(-1)
    if info.task != "regression" or not graphs or (np.all(mean == 0) and np.all(std == 1)):
        return out
    y = torch.cat([g.y.reshape(1, -1) for g in graphs]).double().numpy()
    for t, (c, n) in enumerate(zip(columns, names)):
        v = y[~np.isnan(y[:, t]), t]
        if v.size < 3 or not np.isfinite(std[t]):  # NaN statistics: a target its members learned as a constant
            continue
        m, s = float(v.mean()), float(v.std())
        if abs(m - mean[t]) > SUSPECT_SHIFT * std[t] or not std[t] / SUSPECT_SCALE <= s <= std[t] * SUSPECT_SCALE:
            out.append(f"the labels of {c!r} (mean {m:.4g}, std {s:.4g}) are far from the training targets "
                       f"{n!r} (mean {mean[t]:.4g}, std {std[t]:.4g}): another property, or other units?")
    return out


def _metric_or_none(name: str, y, pred) -> float | None:
    """The metric of one target, ``None`` where it is undefined (e.g. a ROC-AUC of a target
    whose labels here are all one class)."""
    try:
        return float(compute_metric(name, y, pred))
    except MetricUndefinedError:
        return None


def _add_scores(res: dict, split: str, scores: dict) -> None:
    """``res[split]`` the metric (the layout ``siggate evaluate`` always printed), and the split's
    ``per_target`` metrics and scored rows ``n``."""
    res[split] = scores["metric"]
    res.setdefault("per_target", {})[split] = scores["per_target"]
    res.setdefault("n", {})[split] = scores["n"]
    res.setdefault("metrics", {})[split] = scores["metrics"]


def _recorded_csv(data, source: dict | None) -> Path:
    """The training CSV a CSV run records: its record ``source``'s absolute path, else the
    ``data`` config's."""
    return Path((source or {}).get("csv") or data.csv)


def training_csv_clash(output: str | Path | None, predictor, folder: Path | None,
                       example: str = "scores.json") -> str | None:
    """The refusal of ``output`` where it is the CSV the run of ``predictor`` (in ``folder``: a
    run, a run of members, a member, a loose checkpoint's) trained on
    (:func:`~.members.run_data`): writing it (``siggate predict --output``, ``siggate evaluate
    --output``, whose file ``example`` names) would replace the file the run's splits are read
    from; None otherwise."""
    if output is None or _trained_on(predictor, folder, output) is None:
        return None
    return (f"--output {output} is the training CSV the run's splits are read from; writing it would replace that "
            f"file and the run could no longer be scored: give another --output, e.g. {Path(output).with_name(example)}")


def _trained_on(predictor, folder: Path | None, path):
    """What the run of ``predictor`` (in ``folder``: a run, a run of members, a member, a loose
    checkpoint's) trained on (:func:`~.members.run_data`) where ``path`` is that CSV; None for any
    other file, or a run of a named dataset."""
    from ..files import same_file
    from ..predictors.base import PredictorFileError
    from .members import run_data

    try:
        trained_on = run_data(predictor, folder)
    except PredictorFileError:
        return None
    if trained_on.data.name != "csv" or not same_file(path, _recorded_csv(trained_on.data, trained_on.source)):
        return None
    return trained_on


def _own_decimal(predictor, folder: Path | None, data) -> str:
    """The decimal mark the run of ``predictor`` read ``data`` with, where ``data`` is its training
    CSV; ``"."`` for any other file."""
    trained_on = _trained_on(predictor, folder, data)
    return (trained_on.data.decimal or ".") if trained_on is not None else "."


def stored_csv(data, source: dict | None, allow_changed: bool = False) -> Path:
    """The training CSV of a CSV run: the absolute path its record ``source`` holds
    (:func:`~siggate.train.record.data_source`, else the ``data`` config's path), checked against
    the SHA-256 recorded at training time."""
    from ..files import source_changed

    source = source or {}
    path = _recorded_csv(data, source)
    if not path.is_file():
        raise EvaluationError(f"the training CSV {path} recorded in the run is not found; score a file with "
                              "--data FILE.csv (and --target-col if its columns are named differently)")
    if source.get("sha256"):
        from .rundir import reading_changed

        changed = source_changed(path, source["sha256"], "training") or reading_changed({**source, "csv": str(path)},
                                                                                         data)
        if changed:
            msg = f"{changed}; its splits and scores would differ from the run's"
            if not allow_changed:
                raise EvaluationError(msg + f". Score it as an external set with --data {path}, or pass "
                                      "--allow-changed to re-split and score the file as this siggate reads it")
            log.warning("%s (--allow-changed: scoring it anyway)", msg)
    else:
        log.warning("%s: the run records no hash of its training CSV (trained before siggate recorded it); "
                    "scores assume the file is unchanged", path)
    return path


def label_columns(target_cols: list[str] | None, info: TaskInfo, named: dict[str, str] | None = None) -> list[str]:
    """The columns of an external file scored as the model's targets, in the targets' order:
    ``target_cols`` (``--target-col``) by position, except that the model's own names in another
    order are matched by name; with ``named`` (its ``TARGET=COL`` pairs, :func:`target_map`) the
    column of each target they name (the others: their own names); none given, the targets' names."""
    names = list(info.target_names or [])
    if not target_cols:
        return names
    if named is not None:
        return [named.get(n, n) for n in names]
    return names if sorted(target_cols) == sorted(names) else list(target_cols)


def target_map(target_cols: list[str] | None, info: TaskInfo) -> dict[str, str] | None:
    """``{target: column}`` of ``--target-col`` given as ``TARGET=COL`` pairs, or None where it is
    a list of columns (no entry holds a ``=``). A model of two targets can so be scored on a file
    that measured one of them under another name."""
    names = list(info.target_names or [])
    pairs = [c.partition("=") for c in target_cols or []]
    if not any(sep for _, sep, _ in pairs):
        return None
    out = {}
    for text, (t, sep, col) in zip(target_cols, pairs):
        t, col = t.strip(), col.strip()
        if not sep or not col:
            raise EvaluationError(f"--target-col {','.join(target_cols)}: give every entry as TARGET=COLUMN "
                                  f"({text!r} is not), or columns alone in the model's target order")
        if t not in names:
            raise EvaluationError(f"--target-col {text}: the model has no target {t!r}; its targets are "
                                  f"{', '.join(names)}")
        if t in out:
            raise EvaluationError(f"--target-col names the target {t!r} twice ({out[t]}, {col}); name each once")
        if col in out.values():
            raise EvaluationError(f"--target-col gives the column {col!r} to two targets; give each its own column")
        out[t] = col
    for n in names:  # a target not named reads the column of its name: not one a pair gives another target
        if n not in out and n in out.values():
            other = next(t for t, c in out.items() if c == n)
            raise EvaluationError(f"--target-col {other}={n}: {n!r} is also the column of the model's target {n!r}, "
                                  f"which would be scored on it too; name that target as well ({n}=COLUMN)")
    return out


def external_graphs(predictor, path, smiles_col: str, target_cols: list[str] | None, info: TaskInfo,
                    notes: list[str], decimal: str = ".", fallback: str | None = None,
                    folder: Path | None = None, max_atoms: int | None = None) -> tuple[list, dict, list[str]]:
    """Graphs of the labelled CSV ``path`` featurized as ``predictor``'s inputs (as ``siggate
    predict`` featurizes SMILES), each with its labels ``y [1, T]``, the columns read as the
    model's targets (:func:`label_columns`: ``--target-col`` entries that are all the file's
    columns are columns, a ``=`` in their names or not), and ``{"rows", "scored",
    "invalid", "unlabelled", "bad_label", "bad_label_cell", "malformed", "empty", "header_again"}`` counts (``bad_label``: rows
    whose only labels are not a number, not finite, or not 0/1 for a classifier, read as training
    reads labels, :func:`~siggate.data.csvdata.read_labels` with ``decimal``; ``bad_label_cell``:
    rows scored on their other targets beside such a cell; ``malformed``: rows with more fields
    than the header; ``empty`` and ``header_again``: rows of empty fields and the header's names,
    :func:`~siggate.data.csvdata.rows_of_no_data`). None is scored; each is reported. A file without ``smiles_col`` is read
    from its ``fallback`` column (:func:`~siggate.train.predict.smiles_column`). ``folder``: where
    ``predictor`` was loaded from (a fingerprint member's run says how it reads a salt); where the
    run's ``splits.csv`` is there, ``fitted`` counts the scored rows that are its train or val
    molecules (canonical SMILES), whose scores are in sample, with a warning. ``notes`` gets
    what the scores' warnings should say (a model's target the file has no column of). A SMILES
    that cannot be featurized (invalid, or above ``max_atoms`` atoms, ``siggate predict``'s limit
    by default) is counted in ``invalid`` and warned about with its line and reason."""
    import numpy as np

    from ..data.chem import InvalidSmiles
    from ..data.csvdata import (
        MISSING_TARGET,
        check_any_numeric,
        check_smiles_apart,
        check_unique_columns,
        column_names,
        detect_sep,
        extra_fields,
        extra_fields_reason,
        headerless_hint,
        label_qualifiers,
        line_at,
        read_labels,
        read_table,
        rows_of_no_data,
        table_frame,
    )
    from .predict import SmilesPredictor, smiles_column

    path = Path(path)
    if path.is_dir():
        raise EvaluationError(f"--data {path} is a folder; give the CSV file of SMILES and labels")
    if not path.is_file():
        from ..data.csvdata import NOT_A_FILE

        raise EvaluationError(f"--data {path} is {NOT_A_FILE}" if path.exists() else f"--data {path}: no such file")
    if info.level != "graph" or info.node_features != "ogb":
        raise EvaluationError(f"--data: this checkpoint scores {info.name!r} graphs, not molecules from SMILES; "
                              "evaluate it on its own splits (drop --data)")
    header, records = read_table(path, detect_sep(path))
    header = column_names(header)  # "id, smiles, y": the columns smiles and y, as predict reads them
    smiles_col = smiles_col.strip() if smiles_col else smiles_col  # (--target-col's names are stripped)
    # pairs unless the entries are all the file's own columns (a '=' in a name or not)
    named = None if not target_cols or all(c in header for c in target_cols) else target_map(target_cols, info)
    cols = label_columns(target_cols, info, named)
    if target_cols and named is None and cols != list(target_cols):
        log.warning("--target-col %s names the model's targets in another order; each column is scored as the "
                    "target of its name (%s)", ",".join(target_cols), ", ".join(cols))
    smiles_col = smiles_column(path, header, smiles_col, fallback)
    check_smiles_apart(smiles_col, cols)  # (the two were merged into one column, every row no molecule)
    unlabelled_targets = []  # the model's targets the file holds no column of: not scored
    if named is not None:  # the targets not named: scored where the file has a column of their name
        unlabelled_targets = [c for c in cols if c not in header and c not in named.values()]
    elif not target_cols and any(c in header for c in cols):
        unlabelled_targets = [c for c in cols if c not in header]
    missing = [c for c in [smiles_col, *cols] if c not in header and c not in unlabelled_targets]
    if missing:
        raise EvaluationError(f"--data {path}: no column {missing[0]!r}; its columns are {', '.join(header)}"
                              + (headerless_hint(header) or " (name them with --smiles-col / --target-col)"))
    if len(cols) != info.num_tasks:
        raise EvaluationError(f"--target-col: the model predicts {info.num_tasks} target(s) "
                              f"({', '.join(info.target_names)}), got {len(cols)} column(s); name one column per "
                              "target in that order, or drop --target-col to score the targets the file has "
                              "columns of, by their names")
    present = [c for c in cols if c not in unlabelled_targets]
    check_unique_columns(path, header, [smiles_col, *present])
    predicted = _predictions_as_labels(header, present, info)
    if predicted:
        raise EvaluationError(f"--data {path} is siggate predict's output: its column {predicted!r} holds the model's "
                              "predictions (a labelled input's would be named "
                              f"{predicted + '_pred'!r}), not measured labels, and would score a perfect fit; give "
                              "the file of measured labels, or name its label column with --target-col")
    table = table_frame(header, records, list(dict.fromkeys([smiles_col, *present])))
    if unlabelled_targets:  # for the scores' warnings
        notes.append(f"no column of the model's target(s) {', '.join(map(repr, unlabelled_targets))}; "
                     f"{', '.join(map(repr, present))} scored, the others are not")
        for c in unlabelled_targets:
            table[c] = ""
    ragged = [i for i, r in enumerate(records) if extra_fields(r, len(header))]  # (empty ones at the end: read)
    lines = records.lines
    labels, reasons, left_out = read_labels(path, table, cols, info.task, decimal, lines)
    check_any_numeric(path, table, cols, labels, allow_empty=True, lines=lines)  # metrics skip a target without labels
    featurizer = SmilesPredictor(predictor, domain=False, folder=folder, uncertainty=False,  # (it writes none)
                                 **({"max_atoms": max_atoms} if max_atoms is not None else {}))
    if ragged:  # their fields cannot be matched to the columns: counted, not scored
        first = records[ragged[0]]
        log.warning("--data %s: %d rows have more fields than the header, so their fields cannot be matched to the "
                    "columns; they are not scored (%s)", path, len(ragged),
                    extra_fields_reason(line_at(lines, ragged[0]), len(header), extra_fields(first, len(header))))
    empty, again = rows_of_no_data(header, records)  # (as training drops them: no molecule, no label)
    if again:
        first = min(again)
        log.warning("--data %s: %d row(s) are the header again, not scored (first: line %d, %s)", path, len(again),
                    line_at(lines, first), again[first])
    skip = set(ragged) | empty | set(again)
    bad = [row for row, why in enumerate(reasons) if why and not why.startswith(MISSING_TARGET) and row not in skip]
    if bad:
        log.warning("--data %s: %d row(s) have a label that cannot be scored (first: line %d, %s); they are not "
                    "scored", path, len(bad), line_at(lines, bad[0]), reasons[bad[0]])
    graphs, invalid, unlabelled, partial = [], [], 0, []
    skip |= set(bad)
    for row, (smiles, y) in enumerate(zip(table[smiles_col], labels)):
        if row in skip:
            continue
        if np.isnan(y).all():
            unlabelled += 1
            continue
        try:
            g = featurizer.featurize(smiles)
        except InvalidSmiles as exc:  # (its reason names --max-atoms where the molecule is too large)
            invalid.append((row, str(exc)))
            continue
        g.y = torch.tensor(y, dtype=torch.float32).reshape(1, -1)
        g.row = row  # the file's 0-based data row
        graphs.append(g)
        if row in left_out:  # scored on its other targets (one bad cell dropped them all before)
            partial.append(row)
    if partial:
        log.warning("--data %s: %d scored row(s) have a label cell that cannot be scored (first: line %d, %s); that "
                    "target is not scored for them, their other targets are", path, len(partial),
                    line_at(lines, partial[0]), left_out[partial[0]])
    if invalid:
        log.warning("--data %s: %d row(s) hold a SMILES that cannot be scored (first: line %d, %s); they are not "
                    "scored", path, len(invalid), line_at(lines, invalid[0][0]), invalid[0][1])
    if not graphs:
        first = f" (first: {invalid[0][1]})" if invalid else ""
        raise DataError(f"--data {path}: no row with a valid SMILES and a label to score ({len(invalid)} whose SMILES "
                        f"cannot be scored{first}, {unlabelled} without a label, {len(bad)} with a label that cannot "
                        f"be scored, {len(ragged)} with more fields than the header"
                        + "".join(f", {n} {what}" for n, what in ((len(empty), "empty"), (len(again), "the header again"))
                                  if n) + ")")
    counts = {"rows": len(table), "scored": len(graphs), "invalid": len(invalid), "unlabelled": unlabelled,
              "bad_label": len(bad), "bad_label_cell": len(partial), "malformed": len(ragged), "empty": len(empty),
              "header_again": len(again)}
    scored = np.zeros(len(records), dtype=bool)
    scored[[g.row for g in graphs]] = True
    censored, other_unit = label_qualifiers(header, records, {smiles_col, *present}, scored)
    for key, found, what in (
            ("censored", censored, "have a censored label, a bound scored as if it were a measurement; score the rows "
                                   "whose relation is '='"),
            ("other_unit", other_unit, "give their label in another unit than most, so their errors are off by the "
                                       "units' ratio; convert them, or score one unit's rows")):
        if found:
            counts[key] = len(found)
            first = min(found)
            notes.append(f"{len(found)} of the {len(graphs)} rows scored {what} (first: line {line_at(lines, first)}, "
                         f"{found[first]})")
    fitted = _fitted_molecules_of(folder)
    if fitted:
        counts["fitted"] = fitted_among(graphs, fitted)  # (a salt: as the run read it)
    return graphs, counts, cols


def _predictions_as_labels(header: list[str], labels: list[str], info: TaskInfo) -> str | None:
    """The label column of ``labels`` that is ``siggate predict``'s prediction of a target, where
    ``header`` is predict's output (its per-row error column last, its domain or uncertainty
    columns there) of a file that had no label column of the target's name (it would have kept it
    and written ``<target>_pred``); None otherwise."""
    from .predict import DOMAIN_COLUMNS
    from .rundir import error_column

    if not header or header[-1] != error_column(header[:-1]):  # (predict names it after the columns before)
        return None
    for col in labels:
        marks = set(DOMAIN_COLUMNS) <= set(header) or f"{col}_uncertainty" in header
        if col in (info.target_names or []) and f"{col}_pred" not in header and marks:
            return col
    return None


def fitted_among(graphs: list, fitted: set[str]) -> int:
    """How many of ``graphs`` are molecules of ``fitted`` (canonical SMILES, :func:`_fitted_molecules_of`)."""
    from ..data.csvdata import canonical_smiles

    return sum(canonical_smiles(g.smiles) in fitted for g in graphs)


def _fitted_molecules_of(folder) -> set[str] | None:
    """:func:`~siggate.data.csvdata.fitted_molecules` of the run ``folder`` is, or whose member it is."""
    from ..data.csvdata import fitted_molecules
    from .rundir import is_members_folder

    if folder is None:
        return None
    folder = Path(folder)
    found = fitted_molecules(folder)
    if found is None and is_members_folder(folder.resolve().parent):
        found = fitted_molecules(folder.resolve().parent)
    return found


def _picture(stem, data, info: TaskInfo, graphs: list, pred: torch.Tensor) -> tuple[str, Path]:
    """The picture of an external file's scored rows, named after ``stem`` (a path without a
    suffix): ``("parity_plot", <stem>_parity.png)`` for regression, or for a classifier its ROC
    curves, ``("roc_plot", <stem>_roc.png)`` (a run folder's pictures, not a parity plot of
    probabilities)."""
    from .plots import cliff_marks, parity_figure, roc_figure, save_figure
    from .scoring import scored_rows

    y, p = scored_rows(info, graphs, pred, None)
    names = list(info.target_names or [f"target{t}" for t in range(info.num_tasks)])
    path = picture_path(stem, info)
    if info.task != "regression":
        return "roc_plot", save_figure(roc_figure(y, p, names, title=Path(data).name), path)
    cliff = cliff_marks(data, [int(g.row) for g in graphs])
    return "parity_plot", save_figure(parity_figure(y, p, names, cliff, title=Path(data).name), path)


def picture_path(stem, info: TaskInfo) -> Path:
    """Where :func:`_picture` draws: ``<stem>_parity.png``, or a classifier's ``<stem>_roc.png``."""
    stem = Path(stem)
    return stem.with_name(f"{stem.name}_{'parity' if info.task == 'regression' else 'roc'}.png")


def evaluate(checkpoint, split: str = "test", data=None, smiles_col: str | None = None, target_cols=None,
             allow_changed: bool = False, data_root=None, cache_dir=None, device: str = "cpu",
             progress: bool = False, pictures: str | Path | None = None, decimal: str | None = None,
             coverage: float | None = None, output: str | Path | None = None, max_atoms: int | None = None) -> dict:
    """Scores of the run or ensemble ``checkpoint`` (a ``.pt``, a run folder or a folder of
    several members) on ``split`` (a split name or ``"all"``) of its own data, or on the labelled
    CSV ``data``: ``{"checkpoint", "dataset", "level", "metric", "members", <split>: metric, ...,
    "per_target": {split: {target: metric}}, "n": {split: rows scored}, "metrics": {split:
    summary}}`` (the summary as in ``metrics.json``'s ``test_metrics``), plus ``"data_file"``
    (and ``"rows"``, its row counts, for an external file; its split is named ``"data"``, and
    ``"warnings"``, :func:`label_warnings`, when its labels look like another property).
    ``smiles_col`` and ``target_cols`` name the columns of ``data``; by default the training
    run's (``data.smiles_col``, else ``smiles``, and its target names).

    ``decimal``: the decimal mark of ``data``'s labels, ``"."`` or ``","`` (as ``siggate train --decimal``);
    None: the run's own where ``data`` is the CSV it trained on (it was refused until given again), else ``"."``.

    ``pictures``: with ``data``, a path without suffix, ``<stem>``: also draw the file's parity plot
    as ``<stem>_parity.png`` (:mod:`~siggate.train.plots`; cliff compounds marked when the file has a
    cliff column) and name it in ``"parity_plot"``; for a classifier its ROC curves instead,
    ``<stem>_roc.png``, named in ``"roc_plot"``.

    ``coverage``: also check the run's split-conformal intervals (sets, for a classifier) at that
    coverage on each scored split, as ``siggate predict --coverage`` draws them: ``"coverage":
    {"nominal", <split>: {target: {"n", "coverage", "mean_width" | "mean_set_size"}}}`` (an
    infinite width, where the calibration is too small for the coverage, as None) and
    ``"coverage_below_nominal": {split: [...]}`` for the external file (or the test split): the
    targets whose coverage is below nominal by more than chance allows, on any number of
    labelled molecules (:func:`~siggate.predictors.conformal.below_nominal`), each also warned about. The validation split is the calibration set itself (its coverage is
    at least nominal by construction) and the train split is in sample: neither is tested.

    ``output``: the file the scores will be written to; refused, before any scoring, when it is
    the run's training CSV (writing it would replace the file the run's splits are read from).

    ``max_atoms``: with ``data``, molecules with more atoms are not scored, each counted as invalid
    with its reason (default: ``siggate predict``'s limit)."""
    import copy

    from ..predictors.base import PredictorFileError
    from .dataprep import prepare_data
    from .members import encodings_of, members_of, run_data, trained_smiles_col
    from .predict import run_folder
    from .scoring import scored_rows

    if data is not None and allow_changed:  # (accepted, with no effect)
        raise EvaluationError(f"--allow-changed applies to the run's own training CSV; --data {data} is scored as it "
                              "is (drop --allow-changed)")
    predictor, info = _load(checkpoint, device)
    folder = run_folder(checkpoint)
    clash = training_csv_clash(output, predictor, folder)
    if clash:
        raise EvaluationError(clash)
    # a picture of the user's own, of the name it takes, is not replaced (a --data that is not there is named first)
    if data is not None and pictures is not None and Path(data).exists():
        from .plots import drawn_by_siggate

        drawn = picture_path(pictures, info)
        if drawn.exists() and not drawn_by_siggate(drawn):
            raise EvaluationError(f"{drawn} is not marked as a picture siggate drew (one drawn before siggate marked "
                                  f"them is not either), and scoring --data {data} would replace it: move it away, or "
                                  "give an --output of another name (the picture is named after it)")
    res = {"checkpoint": str(checkpoint), "dataset": info.name, "level": info.level, "metric": info.metric,
           "members": len(members_of(predictor))}
    calibrated = None if coverage is None else _calibration_of(checkpoint, info, coverage)
    domain = _scale_domain(calibrated, folder)  # read once, for every split scored
    if data is not None:
        fallback = "smiles" if smiles_col is None else None  # the run's column, else the file's "smiles"
        smiles_col = smiles_col or trained_smiles_col(predictor, folder)
        notes: list[str] = []
        decimal = decimal or _own_decimal(predictor, folder, data)
        graphs, counts, cols = external_graphs(predictor, data, smiles_col, target_cols, info, notes, decimal, fallback,
                                               folder, max_atoms)
        res.update({"data_file": str(Path(data).resolve()), "rows": counts})
        prediction = predictor.predict(graphs)
        pred = prediction.mean
        rows = scored_rows(info, graphs, pred, None)
        _add_scores(res, EXTERNAL_SPLIT, score(info, *rows))
        if calibrated is not None:
            _add_coverage(res, calibrated, info, EXTERNAL_SPLIT, rows, prediction.spread, data,
                          None if domain is None else domain.graph_similarity(graphs))
        warnings = notes + label_warnings(info, cols, graphs,
                                          *_training_target_stats(predictor, info))
        if counts.get("fitted"):
            warnings.append(f"{counts['fitted']} of the {len(graphs)} rows scored are molecules the run fitted (its "
                            "train or val rows), so their scores are in sample; score a file of other molecules for "
                            "an external estimate")
        for w in warnings:
            log.warning("--data %s: %s", data, w)
        if warnings:
            res["warnings"] = warnings
        if pictures is not None:
            try:
                key, drawn = _picture(pictures, data, info, graphs, pred)
                res[key] = str(drawn)
            except OSError as exc:  # the scores still count
                log.warning("could not write the picture of %s in %s: %s", data, Path(pictures).parent,
                            exc.strerror or exc)
        return res
    try:
        trained_on = run_data(predictor, folder)
        encodings = encodings_of(predictor)
    except PredictorFileError as exc:
        raise EvaluationError(str(exc)) from None
    d = copy.deepcopy(trained_on.data)
    if data_root:
        d.root = data_root
    if cache_dir:
        d.cache_dir = cache_dir
    if d.name == "csv" and not _recorded_csv(d, trained_on.source).is_file():
        from .rundir import estimator_fit

        fitted = estimator_fit(folder)
        if fitted:  # its CSV was a temporary file the user never made
            raise EvaluationError(f"{checkpoint} is the run of {fitted}, whose training CSV was temporary (and "
                                  "held no test split); score it on a labelled file with --data FILE.csv")
    if allow_changed and d.name != "csv":  # (accepted, with no effect: a named dataset is not the user's file)
        raise EvaluationError(f"--allow-changed applies to a run trained on a CSV of your own; {checkpoint} trained on "
                              f"{d.name!r}: drop it")
    if d.name == "csv":
        d.csv = str(stored_csv(d, trained_on.source, allow_changed))
        res["data_file"] = d.csv
    # a member of an ensemble: its data were split with the ensemble's first seed
    from ..data.csvdata import EmptySplitError

    try:
        ds = prepare_data(d, encodings, trained_on.split_seed, progress, chirality=info.chirality)  # as it trained
    except EmptySplitError as exc:
        if not allow_changed:
            raise
        # the changed file split otherwise than the run's: the cause, without its fix, which names training's flags
        raise EvaluationError(f"{exc.cause}, so the run's splits cannot be rebuilt from the changed file "
                              f"(--allow-changed); score it whole with --data {d.csv}, or restore the file the run "
                              "was trained on") from None
    splits = list(ds.splits) if split == "all" else [split]
    unknown = [s for s in splits if s not in ds.splits]
    if unknown:
        raise EvaluationError(f"unknown split {unknown[0]!r}; available: {', '.join(ds.splits)}, all")
    fitted = _fitted_molecules_of(folder) if allow_changed and d.name == "csv" else None
    for s in splits:
        graphs = ds.splits[s]
        if fitted and s == "test":  # the changed file's split is not the run's: its test rows may be ones it fitted
            seen = fitted_among(graphs, fitted)
            if seen:
                note = (f"{seen} of the {len(graphs)} test molecules of the changed file's split are molecules the run "
                        "fitted (its train or val rows in splits.csv), so the test score is partly in sample")
                log.warning(note)
                res["warnings"] = [*res.get("warnings", []), note]
        prediction = predictor.predict(graphs)
        rows = scored_rows(info, graphs, prediction.mean, s)
        _add_scores(res, s, score(info, *rows))
        if calibrated is not None:
            _add_coverage(res, calibrated, info, s, rows, prediction.spread, None,
                          None if domain is None else domain.graph_similarity(graphs))
    members = members_of(predictor)
    weights = getattr(predictor, "weights_", None)  # a combination's [M, T]; a member of weight 0 adds nothing
    weighs = [True] * len(members) if weights is None else [bool((abs(w) > 0).any()) for w in weights]
    refit = sorted({getattr(m, "kind", type(m).__name__) for m, w in zip(members, weighs)
                    if getattr(m, "refit", False) and w})
    if refit and set(splits) & {"train", "val"}:  # they learned those rows: their scores there are in sample
        note = (f"{', '.join(refit)} member(s) were refit on the train and val rows, so the train and val scores "
                "here are in sample; the run's metrics.json holds the out-of-sample val scores")
        log.warning(note)
        res["warnings"] = [*res.get("warnings", []), note]
    return res


def _calibration_of(checkpoint, info: TaskInfo, coverage: float):
    """``(coverage, the run's Calibration)``, read and checked as ``siggate predict --coverage``
    reads them (the same refusals, as EvaluationError)."""
    from .predict import InputError, run_calibration, run_folder

    try:
        return run_calibration(run_folder(checkpoint), coverage, info,
                               checkpoint if isinstance(checkpoint, (str, Path)) else None)
    except InputError as exc:
        raise EvaluationError(str(exc)) from None


def _scale_domain(calibrated: tuple | None, folder: Path | None):
    """The run's applicability domain when the calibration of ``calibrated`` scales its
    intervals by the nearest-training similarity to it, else None.

    Raises:
        EvaluationError: domain files that cannot be read, or none beside such a calibration."""
    from .predict import InputError, similarity_domain

    if calibrated is None or not calibrated[1].needs_similarity:
        return None
    try:
        return similarity_domain(folder)
    except InputError as exc:
        raise EvaluationError(str(exc)) from None


def _add_coverage(res: dict, calibrated: tuple, info: TaskInfo, split: str, rows: tuple, spread, data,
                  similarity=None) -> None:
    """``res["coverage"][split]`` at the coverage of ``calibrated`` (``(coverage, Calibration)``,
    :func:`_calibration_of`; ``Calibration.covered``, an infinite width as None) of the predictions
    ``rows`` (the split's ``(labels, predictions)``, :func:`~siggate.train.scoring.scored_rows`),
    their ``spread`` (None: one model) and the molecules' nearest-training ``similarity``
    (:func:`_scale_domain`) and, for an
    external file or the test split, the targets whose coverage is below nominal by more than
    chance allows on any number of labelled molecules (``res["coverage_below_nominal"][split]``),
    each warned about."""
    from ..files import finite_or_none
    from ..predictors.conformal import below_nominal, below_nominal_text, conformal_output

    nominal, cal = calibrated
    scale = cal.row_scale(None if spread is None else spread.cpu().numpy(), similarity)
    got = finite_or_none(cal.covered(*rows, scale, nominal))
    res.setdefault("coverage", {"nominal": nominal})[split] = got
    if split not in (EXTERNAL_SPLIT, "test"):
        return
    low = below_nominal({f"{nominal:g}": {split: got}}, {n: c.n for n, c in cal.targets.items()}, least=1, split=split)
    where = f"--data {data}" if data is not None else f"the {split} split"
    for item in low:
        log.warning("%s: %s: these molecules are not like the validation ones the run calibrated on, so its %s cover "
                    "less than asked here", where, below_nominal_text(item, info.task, "labelled molecules", "the targets"),
                    conformal_output(info.task))
    res.setdefault("coverage_below_nominal", {})[split] = low


def _training_target_stats(predictor, info: TaskInfo) -> tuple:
    """The training targets' mean and std ``[T]`` of ``predictor``'s first member that records them:
    a GNN's normalization (``target_mean_``/``target_std_``), or a fingerprint member's per-target
    models (``y_mean``/``y_std``, every target's); mean 0 and std 1, which :func:`label_warnings`
    reads as no statistics, when none does."""
    from .members import members_of

    for member in members_of(predictor):
        mean, std = getattr(member, "target_mean_", None), getattr(member, "target_std_", None)
        models = getattr(member, "models_", None) or []
        if (mean is None or std is None) and any(hasattr(m, "y_std") for m in models):  # NaN: a constant target
            mean = [float(getattr(m, "y_mean", "nan")) for m in models]
            std = [float(getattr(m, "y_std", "nan")) for m in models]
        if mean is not None and std is not None:
            return torch.as_tensor(mean).cpu(), torch.as_tensor(std).cpu()
    return torch.zeros(info.num_tasks), torch.ones(info.num_tasks)
