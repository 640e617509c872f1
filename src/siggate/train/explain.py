"""``siggate explain``: each atom's contribution to a prediction, drawn on the molecule.

For every input SMILES, read and refused exactly as ``siggate predict`` does
(:meth:`~siggate.train.predict.SmilesPredictor.featurize_rows`), the predictor's
``atom_contributions`` (:class:`~siggate.predictors.base.AtomContributions`; for the GNN,
integrated gradients from a zero atom-embedding baseline, :mod:`siggate.train.attribution`; for
the fingerprint members (svr, rf), occlusion of fingerprint bins shared among the atoms that set
them, from the empty fingerprint, :mod:`siggate.predictors.fpmember`; for a combination, its
members' weighted sum) is written to ``OUT``:

* ``molecules.csv``: one row per input row, in order: ``row`` (0-based), ``smiles``, the input's
  other columns (a CSV's IDs, a ``.smi`` file's ``name``; ``_input`` added to a name that
  ``molecules.csv`` uses itself), per target
  the prediction (named ``<target>``, or ``<target>_pred`` where one of the two CSVs has a column
  of that name, ``siggate predict``'s rule; the same name in ``atoms.csv``), ``<target>_baseline``
  (the reference prediction) and ``<target>_atoms_sum`` (the sum of the atoms' contributions: for the GNN equal to prediction minus baseline up to
  the integral's numerical error; occlusion is not complete, and its sum differs from it by the
  model's interactions between bins), the pictures' stem, and ``error``;
* ``atoms.csv``: one row per atom of each predicted molecule: ``row``, ``atom`` (RDKit's atom
  index in the SMILES as written, counting the atoms RDKit keeps: an explicit ``[H]`` is not one,
  a ``[2H]`` is), ``element`` and one contribution column per target;
* ``mol<row>.svg`` and ``mol<row>.png`` (``mol<row>_<target>.*`` for several targets): the
  molecule drawn with RDKit, every atom coloured by its contribution (red raises the
  prediction, blue lowers it; full colour at the largest absolute contribution among all the
  molecules of the explanation, per target, or at ``--scale``: the pictures of one explanation
  compare), a colour bar with that scale, and the prediction and baseline in the legend (two
  targets whose names give one file name: the later one's position added). An explanation is
  written into ``OUT/.explaining`` (:data:`STAGE`) and only when it is complete replaces the
  pictures and CSVs of an earlier one in ``OUT`` (of that one's targets, whatever this one's are),
  so every picture there is of this one, and an explanation that stops (input refused partway,
  Ctrl-C) leaves the earlier one as it was. ``siggate explain`` holds the folder's lock while it writes;
* ``explanation.json`` (:data:`EXPLANATION`), written as the files are replaced and again when
  that is done: the targets, ``finished``, and then ``rows`` and ``failed``. Files of the names
  above in a folder without it, and pictures its ``molecules.csv`` does not list, are not an
  explanation's (:func:`foreign_files`): ``siggate explain`` refuses to replace them without
  ``--overwrite``.
"""

from __future__ import annotations

import csv
import json
import logging
import re
import shutil
from pathlib import Path

import numpy as np
import torch

from ..files import atomic_write_bytes, number_text
from .attribution import DEFAULT_STEPS

log = logging.getLogger("siggate.explain")

#: picture size in pixels, and the band below the molecule that holds the colour bar
WIDTH, HEIGHT, BAR_BAND = 460, 440, 80


def atom_colour(value: float, scale: float) -> tuple[float, float, float]:
    """White at 0, pure red at ``+scale``, pure blue at ``-scale`` (RGB in 0..1)."""
    a = max(-1.0, min(1.0, value / scale)) if scale > 0 else 0.0
    return (1.0, 1.0 - a, 1.0 - a) if a >= 0 else (1.0 + a, 1.0 + a, 1.0)


#: the colour bar's title (the legend above it names the target)
CAPTION = "atom contribution (red raises it, blue lowers it)"


def draw_contributions(mol, values, legend: str, caption: str = CAPTION, png: bool = False,
                       scale: float | None = None, described: str | None = None):
    """The molecule ``mol`` with atom ``i`` highlighted in :func:`atom_colour` of ``values[i]``,
    ``legend`` under it and a colour bar from ``-scale`` to ``+scale`` titled ``caption``
    (``scale``: full colour; None: the largest absolute value of ``values``). Returns SVG text,
    whose ``<desc>`` says ``described`` (default ``legend``: the legend with the target's name as
    it is, where the drawn one is :func:`drawn_names`'), or PNG bytes with ``png``."""
    from rdkit.Chem.Draw import rdMolDraw2D
    from rdkit.Geometry import Point2D

    from ..data.chem import quiet_rdkit

    values = [float(v) for v in values]
    scale = max((abs(v) for v in values), default=0.0) if scale is None else float(scale)
    cls = rdMolDraw2D.MolDraw2DCairo if png else rdMolDraw2D.MolDraw2DSVG
    d = cls(WIDTH, HEIGHT, WIDTH, HEIGHT - BAR_BAND)
    d.drawOptions().legendFontSize = 15
    colours = {i: atom_colour(v, scale) for i, v in enumerate(values)}
    with quiet_rdkit():  # (a radical such as [C]: "unsupported number of radical electrons" on stderr, twice)
        rdMolDraw2D.PrepareAndDrawMolecule(d, mol, highlightAtoms=list(colours), highlightAtomColors=colours,
                                           highlightBonds=[], legend=legend)
    left, right, top = 60.0, WIDTH - 60.0, HEIGHT - BAR_BAND + 28.0
    d.SetFillPolys(True)
    pieces = 48
    for k in range(pieces):
        d.SetColour(atom_colour(scale * (-1 + 2 * (k + 0.5) / pieces), scale))
        x0 = left + (right - left) * k / pieces
        d.DrawRect(Point2D(x0, top), Point2D(x0 + (right - left) / pieces + 0.5, top + 18), True)
    d.SetColour((0.0, 0.0, 0.0))
    d.SetFontSize(13)
    d.DrawString(caption, Point2D(WIDTH / 2, top - 14), 0, True)
    for x, text in ((left, f"{-scale:+.3g}"), (WIDTH / 2, "0"), (right, f"{scale:+.3g}")):
        d.DrawString(text, Point2D(x, top + 34), 0, True)
    d.FinishDrawing()
    text = d.GetDrawingText()
    if png:
        return text
    from xml.sax.saxutils import escape

    # RDKit draws text as outlines: the legend and scale also as text, for search and screen readers
    desc = f"<desc>{escape(legend if described is None else described)}; {escape(caption)}, from {-scale:+.6g} to {scale:+.6g}</desc>"
    return text.replace("<!-- END OF HEADER -->", "<!-- END OF HEADER -->\n" + desc, 1)


def drawn_names(names: list[str]) -> list[str]:
    """The targets' ``names`` as a picture's legend draws them: RDKit draws text byte by byte, so a
    name's letters outside ASCII (``pKä``, ``µM``) came out as empty boxes. Accents are dropped
    (``pKa``), a micro sign is ``u`` (``uM``), any other such letter ``?``; a name past
    :data:`.plots.NAME_CHARS` is cut with ``...``, as the run's pictures cut theirs. Where two targets would then look alike (``pKa`` and
    ``pKä``), each is drawn with its number among the targets (``pKa (target 2)``). The pictures'
    ``<desc>``, file names and CSVs keep the names as they are."""
    import unicodedata

    from .plots import _shown

    def ascii_text(name: str) -> str:
        text = unicodedata.normalize("NFKD", str(name).replace("\u00b5", "u").replace("\u03bc", "u"))
        text = "".join(c for c in text if not unicodedata.combining(c))
        text = "".join(c if c.isascii() and c.isprintable() else "?" for c in text)
        return _shown(text, "...")

    drawn = [ascii_text(n) for n in names]
    return [f"{d} (target {t + 1})" if drawn.count(d) > 1 else d for t, d in enumerate(drawn)]


def _tag(target: str) -> str:
    """A target's name as the pictures' file names carry it."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", target)


def _tags(names: list[str]) -> list[str]:
    """:func:`_tag` of each target, made unique by the target's position where two names give one
    tag (``IC50 (nM)`` and ``IC50 [nM]``: their pictures took one file, the second drawn over the
    first), or tags that differ only in case (``pKa`` and ``PKA``: one file on macOS's and
    Windows' file systems)."""
    tags: list[str] = []
    for t, name in enumerate(names):
        tag = _tag(name)
        while tag.casefold() in {x.casefold() for x in tags}:
            tag = f"{tag}_{t}"
        tags.append(tag)
    return tags


def _stem(row: int, tag: str | None) -> str:
    """A picture's file name without its suffix: ``mol<row>``, or ``mol<row>_<tag>`` (several targets)."""
    return f"mol{row}" + (f"_{tag}" if tag is not None else "")


#: the record of the explanation in a folder (its targets, whether it finished): the files of an
#: explanation's names in a folder without it are someone's own, not to be replaced
EXPLANATION = "explanation.json"
#: where an explanation is written until it is complete; then it replaces the earlier one in the folder
STAGE = ".explaining"


def explained_targets(predictor) -> list[str]:
    """The names of the targets whose contributions an explanation with ``predictor`` draws."""
    info = predictor.predictor.info
    return list(info.target_names or [f"target{t}" for t in range(info.num_tasks)])


def explanation_files(out: str | Path, names: list[str]) -> list[str]:
    """The files in ``out`` of the names an explanation of the targets ``names`` writes
    (``molecules.csv``, ``atoms.csv``, ``mol<row>[_<target>].svg|png``), whoever made them."""
    return _written_names(out, names, Path.is_file)


def _written_names(out: str | Path, names: list[str], kind) -> list[str]:
    """The entries of ``out`` for which ``kind`` (``Path.is_file``, ``Path.is_dir``) holds, of
    the names an explanation of ``names`` writes."""
    out = Path(out)
    if not out.is_dir():
        return []
    tags = f"_({'|'.join(re.escape(t) for t in _tags(names))})" if len(names) > 1 else ""
    picture = re.compile(r"mol\d+" + tags + r"\.(svg|png)")
    return sorted(p.name for p in out.iterdir()
                  if kind(p) and (picture.fullmatch(p.name) or p.name in ("molecules.csv", "atoms.csv")))


def folders_in_the_way(out: str | Path, names: list[str]) -> list[str]:
    """The folders in ``out`` of the names an explanation of ``names`` writes (a ``mol0.png``
    folder), which no file can replace."""
    return _written_names(out, names, Path.is_dir)


def foreign_files(out: str | Path, names: list[str]) -> list[str]:
    """The user's own files of the names an explanation writes, which it would replace:
    :func:`explanation_files` of a folder that holds no explanation (no :data:`EXPLANATION`), or
    the pictures of a folder's finished explanation that its ``molecules.csv`` does not list (a
    ``mol5.png`` put beside the ``mol0`` of an explanation of one molecule)."""
    out = Path(out)
    if not ((out / EXPLANATION).is_file() or _explained_before(out / "molecules.csv")):
        return explanation_files(out, names)
    stems = _listed_stems(out)
    if stems is None:  # an explanation whose replacement stopped midway: its files are its own
        return []
    earlier = _recorded_targets(out) or names
    return sorted(f for f in set(explanation_files(out, names)) | set(explanation_files(out, earlier))
                  if f not in ("molecules.csv", "atoms.csv") and f.rsplit(".", 1)[0] not in stems)


def _listed_stems(out: Path) -> set[str] | None:
    """The pictures' stems (``mol<row>``, ``mol<row>_<target>``) the finished explanation in
    ``out`` lists in its ``molecules.csv``; None where it is not finished or cannot be read."""
    try:
        if (out / EXPLANATION).is_file() and not json.loads((out / EXPLANATION).read_text(encoding="utf-8")).get("finished"):
            return None
        with open(out / "molecules.csv", newline="", encoding="utf-8") as fh:
            return {stem for r in csv.DictReader(fh) for stem in (r.get("pictures") or "").split(";")} - {""}
    except (OSError, ValueError, AttributeError, csv.Error):
        return None


def _recorded_targets(out: Path) -> list[str] | None:
    """The targets the folder's :data:`EXPLANATION` records (None: none readable)."""
    try:
        targets = json.loads((out / EXPLANATION).read_text(encoding="utf-8")).get("targets")
    except (OSError, ValueError, AttributeError):
        return None
    return targets if isinstance(targets, list) and all(isinstance(t, str) for t in targets) else None


def _replace_explanation(out: Path, stage: Path, names: list[str]) -> None:
    """The complete explanation in ``stage`` in place of the one in ``out``: the earlier one's
    pictures and CSVs (named by its record's targets, which may differ from this one's) go, this
    one's pictures come, then its CSVs, which list them. The earlier one's files are moved aside
    first and deleted last: a move that fails (a folder of a picture's name, a full disk) puts
    them back, with its record, and raises (the earlier one's files were deleted first, then lost
    with this one's staging folder)."""
    import os
    import tempfile

    earlier = _recorded_targets(out)
    olds = sorted(set(explanation_files(out, names)) | set(explanation_files(out, earlier or names)))
    record = (out / EXPLANATION).read_bytes() if (out / EXPLANATION).is_file() else None
    aside = Path(tempfile.mkdtemp(prefix=".siggate-earlier-", dir=out))
    placed: list[str] = []
    try:
        _record(out, names, None)  # (until the files are in place: not finished)
        for old in olds:
            os.replace(out / old, aside / old)
        for p in sorted(stage.iterdir(), key=lambda p: p.suffix == ".csv"):
            os.replace(p, out / p.name)
            placed.append(p.name)
    except BaseException:
        for name in placed:
            (out / name).unlink(missing_ok=True)
        for old in olds:
            if (aside / old).exists():
                os.replace(aside / old, out / old)  # (one that fails leaves the rest in the folder aside, named)
        if record is not None:
            atomic_write_bytes(out / EXPLANATION, record)
        else:  # no record before: the files are the user's (or an unrecorded explanation's), not "stopped midway"
            (out / EXPLANATION).unlink(missing_ok=True)
        shutil.rmtree(aside, ignore_errors=True)  # (empty: all put back; a failed put-back leaves it, with them)
        raise
    shutil.rmtree(aside, ignore_errors=True)


def _explained_before(path: Path) -> bool:
    """Whether ``path`` is the ``molecules.csv`` of an explanation made before
    :data:`EXPLANATION` was written (its header: ``row,smiles,...,pictures,error``)."""
    try:
        with open(path, encoding="utf-8") as fh:
            header = fh.readline().strip()
    except (OSError, UnicodeDecodeError):
        return False
    return header.startswith("row,smiles,") and header.endswith(",pictures,error")


def explain_to_folder(predictor, chunks, out: str | Path, steps: int = DEFAULT_STEPS,
                      scale: float | None = None) -> tuple[int, int]:
    """Explain every SMILES of ``chunks`` (lists of SMILES, or an ``InputRows`` of
    :func:`~siggate.train.predict.read_input`) with the :class:`~siggate.train.predict.SmilesPredictor`
    ``predictor`` into the folder ``out`` (module docstring). Returns ``(rows, failed rows)``.
    ``scale``: the contribution drawn in full colour in every picture; None: per target, the
    largest absolute contribution among all the molecules explained, so that the pictures of one
    explanation compare (each picture had its own scale: a methane's +0.07 as red as a chlorine's +1.3).

    Raises:
        ValueError: a predictor that cannot attribute its predictions to atoms.
    """
    from .predict import InputRows

    if not isinstance(chunks, InputRows):
        chunks = InputRows(["smiles"], 0, ([[s] for s in chunk] for chunk in chunks))
    inner = predictor.predictor
    if not hasattr(inner, "atom_contributions"):
        raise ValueError(f"a {getattr(inner, 'kind', type(inner).__name__)} predictor cannot attribute its "
                         "predictions to atoms")
    info = inner.info
    if info.level != "graph" or info.task == "multiclass":
        raise ValueError(f"atom contributions are drawn for graph-level regression and binary/multilabel models; "
                         f"this one is a {info.level}-level {info.task} model")
    names = explained_targets(predictor)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    # written aside until complete, then in place of the earlier explanation: input refused partway
    # (a damaged file, Ctrl-C) leaves the earlier one as it was, and none is left half replaced
    stage = out / STAGE
    if stage.is_symlink() or stage.is_file():
        stage.unlink()
    elif stage.is_dir():  # (one that stopped before it was complete)
        shutil.rmtree(stage)
    stage.mkdir()
    try:
        n, bad = _explain_into(predictor, chunks, stage, names, steps, scale)
        _replace_explanation(out, stage, names)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    _record(out, names, (n, bad))
    return n, bad


#: how far a GNN's atom sum may miss prediction minus baseline, as a fraction of it, before a warning
COMPLETENESS_TOLERANCE = 0.05


def _explain_into(predictor, chunks, out: Path, names: list[str], steps: int, scale: float | None) -> tuple[int, int]:
    """:func:`explain_to_folder`'s CSVs and pictures of the targets ``names``, written into the
    empty folder ``out``."""
    from rdkit import Chem

    from ..data.chem import InvalidSmiles, parse_smiles, quiet_rdkit
    from .predict import csv_output, header_text, input_smiles, output_fields, warn_legacy
    from .rundir import carried_names, prediction_columns

    inner = predictor.predictor
    tags = _tags(names) if len(names) > 1 else [None]  # (the pictures' file names)
    what = "P({})" if inner.info.task in ("binary", "multilabel") else "{}"
    shown = drawn_names(names)  # (a legend's: ASCII, cut)
    parent = predictor.fragments == "parent"  # a run that reads salts as their parents names what it drew
    head = ["row", "smiles", *(["read_as"] if parent else [])]
    extra = ("_baseline", "_atoms_sum")  # a target's columns named by predict's rule: <target>_pred where taken
    # one name per target in both CSVs, clear of their own columns ("error" among them)
    cols = prediction_columns(names, [*head, "pictures", "atom", "element"], suffixes=extra)[:len(names)]
    own = [*head, *[c for n in cols for c in (n, *(n + x for x in extra))], "pictures", "error"]
    at = chunks.smiles_index
    kept = [j for j in range(len(chunks.columns)) if j != at]  # the input's other columns (IDs, names), carried
    mol_cols = [*head, *carried_names([chunks.columns[j] for j in kept], own), *own[len(head):]]
    n = bad = 0
    legacy: list[tuple[int, str]] = []
    # a complete method's sums (integrated gradients: a GNN, or GNNs combined; not occlusion, a fingerprint
    # member's) add up to prediction minus baseline up to the Riemann error: the (row, target) pairs that miss it by
    # more than COMPLETENESS_TOLERANCE
    missed = []
    # (stem, the parsed mol's binary, target, its values (an array), legend, legend with the name as it is): drawn at one scale at the end,
    # kept compact (an RDKit Mol object takes about 20 times the memory of its binary)
    pictures: list[tuple] = []
    with csv_output(out / "molecules.csv") as mol_fh, csv_output(out / "atoms.csv") as atom_fh:
        mol_w, atom_w = csv.writer(mol_fh, lineterminator="\n"), csv.writer(atom_fh, lineterminator="\n")
        mol_w.writerow(header_text(mol_cols))
        atom_w.writerow(["row", "atom", "element", *cols])
        for recs in chunks:
            rows, ok, graphs = predictor.featurize_rows(input_smiles(recs, at))
            for rec, row in zip(recs, rows):
                row["error"] = getattr(rec, "error", "") or row["error"]  # a malformed row is not explained
            found = {}
            for batch in predictor.batches(graphs):
                chunk = [graphs[k] for k in batch]
                try:
                    contrib = inner.atom_contributions(chunk, steps=steps)
                except Exception as exc:  # one molecule the model cannot handle must not stop the others
                    for k in batch:
                        rows[ok[k]]["error"] = f"attribution failed: {type(exc).__name__}: {exc}"
                    continue
                for j, k in enumerate(batch):  # with the SMILES the graph was built from (a salt's parent)
                    found[ok[k]] = (contrib.atoms[j], contrib.baseline[j], contrib.prediction[j], graphs[k].smiles,
                                    contrib.complete)
            for i, (rec, row) in enumerate(zip(recs, rows)):
                fields = output_fields(rec, at, chunks.columns, n + i, legacy)
                read_as = [found[i][3] if i in found else ""] if parent else []  # the SMILES drawn
                record = [n + i, fields[at], *read_as, *[fields[j] for j in kept]]
                if i in found and not row["error"]:
                    atoms, base, pred, read, complete = found[i]
                    if not (torch.isfinite(atoms).all() and torch.isfinite(pred).all()):
                        row["error"] = "model produced a non-finite prediction"
                mol = None
                if i in found and not row["error"]:
                    try:
                        with quiet_rdkit():
                            mol = parse_smiles(read)  # its atoms in the order of the graph's
                    except InvalidSmiles as exc:  # one molecule must not stop the others
                        row["error"] = f"cannot draw {read!r}: {exc}"
                    if mol is not None and mol.GetNumAtoms() != atoms.shape[0]:
                        row["error"] = (f"cannot draw {read!r}: {mol.GetNumAtoms()} atoms against the model's "
                                        f"{atoms.shape[0]}")
                if i not in found or row["error"]:
                    mol_w.writerow(record + [""] * (3 * len(names) + 1) + [row["error"] or "not explained"])
                    bad += 1
                    continue
                elements = [a.GetSymbol() for a in mol.GetAtoms()]
                for a, (element, values) in enumerate(zip(elements, atoms.tolist())):
                    atom_w.writerow([n + i, a, element, *[number_text(v) for v in values]])
                stems, binary = [], mol.ToBinary()
                for t, name in enumerate(names):
                    stem = _stem(n + i, tags[t])
                    figures = (f" = {float(pred[t]):.4g}   baseline {float(base[t]):.4g}   "
                               f"atoms sum {float(atoms[:, t].sum()):+.4g}")
                    pictures.append((stem, binary, t, atoms[:, t].numpy().copy(), what.format(shown[t]) + figures,
                                     what.format(name) + figures))
                    stems.append(stem)
                values = [number_text(float(v)) for t in range(len(names))
                          for v in (pred[t], base[t], atoms[:, t].sum())]
                for t, name in enumerate(names if complete else ()):
                    change, total = float(pred[t] - base[t]), float(atoms[:, t].sum())
                    drawn = float(atoms[:, t].abs().sum())  # (a change near 0 with contributions that are not)
                    if abs(total - change) > COMPLETENESS_TOLERANCE * max(abs(change), drawn):
                        missed.append((n + i, name, total, change))
                mol_w.writerow(record + values + [";".join(stems), ""])
            n += len(rows)
        # the pictures, before the CSVs that list them appear: one colour scale per target
        scales = {t: max((float(np.abs(p[3]).max(initial=0.0)) for p in pictures if p[2] == t), default=0.0)
                  if scale is None else float(scale) for t in range(len(names))}
        for stem, binary, t, values, legend, named in pictures:  # (the legend drawn, and with the target's own name)
            mol, values = Chem.Mol(binary), values.tolist()  # the molecule parsed above
            (out / f"{stem}.svg").write_text(draw_contributions(mol, values, legend, CAPTION, scale=scales[t],
                                                               described=named))
            (out / f"{stem}.png").write_bytes(draw_contributions(mol, values, legend, CAPTION, png=True,
                                                                 scale=scales[t]))
    warn_legacy(legacy)
    if missed:
        row, name, total, change = missed[0]
        log.warning("the atom contributions of %d molecule(s) miss prediction minus baseline by more than %d%% (of it, "
                    "or of the contributions' absolute sum where larger; first: row %d, %s: sum %.4g against %.4g): "
                    "the path integral has too few points for this model; explain again with more --steps (now %d; "
                    "e.g. %d) for contributions that add up", len({r for r, *_ in missed}),
                    round(100 * COMPLETENESS_TOLERANCE), row, name, total, change, steps, 4 * steps)
    return n, bad


def _record(out: Path, names: list[str], counts: tuple[int, int] | None) -> None:
    """The folder's :data:`EXPLANATION`: the targets, and ``rows``/``failed`` once it finished."""
    done = {} if counts is None else {"rows": counts[0], "failed": counts[1]}
    atomic_write_bytes(out / EXPLANATION, json.dumps({"format": 1, "targets": names, "finished": counts is not None,
                                                      **done}, indent=2).encode())
