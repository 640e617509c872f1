"""Graph datasets from a user's CSV of SMILES and targets.

>>> ds = load_csv("solubility.csv", "smiles", ["logS"], task="regression")  # doctest: +SKIP

Rows that cannot become a graph (bad SMILES, non-numeric targets, a missing target
for regression/binary, unknown split label) are not fatal, unless most of a target column's
values are not numbers (a wrong column, refused by :func:`check_any_numeric`): they are
collected as :class:`~siggate.data.base.InvalidRow` in ``dataset.invalid``,
written to ``<cache_dir>/csv/<file stem>/<key>.invalid.csv`` and summarized in
one logged warning by kind (:func:`row_issue`).  The processed dataset is cached
under a key made of the file's SHA-256 and every argument.

Suspicious data is named before training, each case with its fix:

* the same molecule (canonical SMILES) in several rows: ``duplicates="keep"`` (default)
  keeps them and warns when their labels differ by more than :data:`DUPLICATE_TOLERANCE`
  of the target's standard deviation (count and spread); ``"average"`` merges each group
  into its first row with the mean label (regression), ``"first"`` keeps the first row.
  Merged or dropped rows are listed in ``dataset.invalid``, conflicting ones in
  ``dataset.notes``;
* a regression target that holds only 0 and 1: a warning suggesting ``--task binary``;
* a constant target: refused by :func:`check_trainable`;
* molecules of only hydrogens or with a wildcard atom ``*``: dropped with their reason, by
  ``siggate predict``'s rule (:func:`~siggate.data.chem.check_atoms`);
* molecules above ``siggate predict``'s atom limit (:data:`~siggate.options.PREDICT_MAX_ATOMS`):
  a warning with their count (they train, but predict would refuse them), and a note each;
* numbers written with a decimal comma (``-5,49``): refused naming the fix, ``decimal=","``;
* molecules of several fragments (salts, mixtures: ``CCN.Cl``): a note each
  (:data:`SEVERAL_FRAGMENTS`). By default (``fragments="all"``) they train as written, one graph
  and one fingerprint with the counterions, as ``siggate predict`` reads them, with a warning
  naming ``fragments="parent"`` (``--fragments parent``: each molecule read as its parent, the
  largest carbon fragment neutralized, :func:`~siggate.data.chem.parent_molecule`, here and in
  predict); rows whose parent is another molecule's
  parent in another split (a salt and its free base, one in training and one in test) get a note
  each (:data:`PARENT_ACROSS_SPLITS`) and a warning that the val/test scores are optimistic. With
  ``"parent"`` such rows are one molecule, kept in one split (a split column's aside).

:func:`write_run_tables` writes ``splits.csv`` (every row's split or why it was dropped)
and ``data_report.csv`` (every dropped row and every note) into a run folder.
"""

from __future__ import annotations

import array
import csv
import hashlib
import io
import json
import logging
import math
import os
import re
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import numpy as np
import pandas as pd
import torch

from ..files import atomic_write_bytes
from ..options import DELIMITERS, DUPLICATES, FRAGMENTS, PREDICT_MAX_ATOMS, closest_name, counted
from .base import (
    CSV_CHIRALITY,
    FITTED_FILE,
    TASK_TYPES,
    DataError,
    GraphDataset,
    InvalidRow,
    RowNote,
    TaskInfo,
    cache_root,
    one_class_split,
)
from .cache import cached, fingerprint_file, load_dataset, save_dataset, write_invalid_rows
from .chem import (
    MAX_SMILES_LENGTH,
    SPLITS,
    InvalidSmiles,
    check_atoms,
    mol_to_graph,
    murcko_scaffold,
    parent_by_neutralizing,
    parse_smiles,
    read_molecule,
    split_indices,
)
from .compressed import DAMAGED, SAVE_AS_CSV, open_decompressed
from .sdfile import is_sd, kept_sd_table, sd_file_table

__all__ = ["load_csv", "check_columns", "check_trainable", "detect_sep", "read_table", "Records", "line_at", "table_frame", "check_unique_columns",
           "extra_fields_reason", "carried_columns", "row_issue", "write_run_tables", "TASK_METRIC",
           "DUPLICATE_TOLERANCE", "SAVE_AS_CSV", "CSV_VERSION"]

logger = logging.getLogger(__name__)

#: metric used for each task type
TASK_METRIC = {"regression": "mae", "binary": "rocauc", "multilabel": "ap"}

_SPLIT_LABELS = {"train": "train", "val": "val", "valid": "val", "validation": "val", "test": "test"}
_MISSING = {"", "nan", "na", "n/a", "none", "null", "nd", "n.d.", "n/d", "nt", "n.t.", "-", "\u2014", "?"}
#: minus signs that word processors, ChemDraw and formatted spreadsheets write for '-' (the minus
#: sign, the en dash, the small and the full-width hyphen-minus): read as '-' in a label
_MINUS_SIGNS = str.maketrans({"\u2212": "-", "\u2013": "-", "\ufe63": "-", "\uff0d": "-"})
#: a censored measurement ('>10', '<= 5'): a bound, not a label
_CENSORED = re.compile(r"^(<=?|>=?|[\u2264\u2265])\s*[+-]?(\d|\.\d)")
#: a number followed by a unit ("5.5 nM", "12uM", "3.2 mg/mL", "45 %")
_WITH_UNIT = re.compile(r"^\s*[+-]?(\d+[.,]?\d*|[.,]\d+)([eE][+-]?\d+)?\s*[a-zA-Z\u00b5\u03bc%][\w/\u00b5\u03bc%.]*\s*$")
#: a number written with a decimal comma, e.g. ``-5,49`` or ``1,5e-3``
_DECIMAL_COMMA = re.compile(r"^[+-]?\d*,\d+([eE][+-]?\d+)?$")
#: a number that starts "0," ("0,125"): a decimal comma, never a group of thousands
_LEADING_ZERO = re.compile(r"^[+-]?0,")
#: a number with thousands separators ("7,120", "1,234,567.5"), and one with a decimal point
_THOUSANDS = re.compile(r"^[+-]?\d{1,3}(,\d{3})+(\.\d*)?$")
_DECIMAL_POINT = re.compile(r"^[+-]?\d*\.\d+([eE][+-]?\d+)?$")
#: a number with points separating thousands beside a decimal comma ("2.999,2", "1.234.567"): a European export
_THOUSANDS_POINT = re.compile(r"^[+-]?\d{1,3}(\.\d{3})+(,\d*)?$")
#: labels of one molecule conflict when they differ by more than this fraction of the
#: target's standard deviation over the file
DUPLICATE_TOLERANCE = 0.01
#: the reason of a row whose target(s) are missing
MISSING_TARGET = "missing target"
#: how the reason of a row begins that ``duplicates: average`` merged into the first row of its molecule
MERGED_INTO = "merged into row"
#: the reason of a row of empty fields only (``,,,``: a spreadsheet's formatted blank row): no molecule and no label
EMPTY_ROW = "empty row (every field is empty)"
#: the reason of a row that is the header again (files joined with their headers: ``cat a.csv b.csv``)
HEADER_AGAIN = "the header again (files joined with their own headers?)"
#: the reason of a row that is the header's names in another order: the rows after it hold their fields in that order
HEADER_REORDERED = ("the header again, its columns in another order (files joined with their own headers?): the rows "
                    "after it are read in the first header's order, so their fields go to the wrong columns; join the "
                    "files with their columns in one order")
#: bump when the same file and arguments build another dataset (part of every cache key). 2: rows of
#: one molecule share a split (random split; merged only within a split column's split), rows with
#: extra fields are dropped with a reason; 3: rows of only hydrogens or with a wildcard atom '*' are
#: dropped with a reason (siggate predict refused them; they trained), before the split (which
#: reshuffled the other rows); 4: the same rows dropped after the splits are drawn, so that every
#: other row keeps its version-2 split; 5: a label cell that is no number (or not finite) beside a
#: label of another target is missing for its target, the row kept (it was dropped); runs record the
#: version they read the file with (``_meta.source.reading``), and one started with another is not resumed;
#: 6: a molecule and a copy labelling a heavy atom's isotope ([13CH3]) are one molecule (_canonical);
#: 7: under ``data.fragments: parent`` an acid salted with its own anion has the acid for parent
#: (it had none; :func:`~siggate.data.chem.parent_by_neutralizing`); 8: a multilabel row whose every
#: label is missing is dropped, as a regression or binary one is (it was kept: a split slot, no loss),
#: and a row whose fields beyond the header's are all empty (a delimiter at the line's end) is read
CSV_VERSION = 8
#: a regression target whose positive labels' 95th percentile is this many times their 5th (two
#: orders of magnitude: IC50s in nM), and whose logarithm is less skewed than they are (yields from
#: 1 to 99% are not), is warned about as one to model on its logarithm
LOG_SCALE_SPAN = 100.0
#: why a CSV to train on or to score must be a file (a pipe, ``--data <(zcat x.csv.gz)``, is read once)
NOT_A_FILE = ("not a regular file (a pipe?): it is read more than once (and a run records its path and SHA-256 to "
              "score it again later); save it to a file and give that (a compressed file is read as it is)")


def _parse_split(split: str) -> str | None:
    """``"scaffold"``/``"scaffold_balanced"``/``"random"`` -> None; ``"column:NAME"`` -> NAME."""
    if split in SPLITS:
        return None
    if isinstance(split, str) and split.startswith("column:") and split[len("column:"):].strip():
        return split[len("column:"):].strip()
    raise ValueError(f"split must be 'scaffold', 'scaffold_balanced', 'random' or 'column:NAME', got {split!r}")


def detect_sep(path: Path) -> str:
    """The field delimiter of a CSV file, guessed by ``csv.Sniffer`` from its first 64 KiB
    among :data:`DELIMITERS` (``","`` when it cannot tell, e.g. a one-column file); a compressed
    file (gzip, bzip2, xz, a zip of one file) is known by its first bytes, as :func:`read_table` knows it."""
    try:  # compressed by its first bytes, as the reader opens it (not by the file's name)
        with open_decompressed(path) as raw:  # a zip archive: the start of its one file
            sample = raw.read(65536).decode("utf-8-sig", errors="replace")
    except (ValueError, IndexError, *DAMAGED):  # DataError is a ValueError: the reader judges the file
        return ","
    lines = sample.splitlines()
    if len(lines) > 1 and not sample.endswith(("\n", "\r")):
        sample = "\n".join(lines[:-1])  # drop a line cut by the sample's end
    try:
        return csv.Sniffer().sniff(sample, delimiters="".join(DELIMITERS)).delimiter
    except csv.Error:
        return ","


#: what to tell a user whose file is not a text CSV: (first bytes, what the file is)
_NOT_TEXT = ((b"\xd0\xcf\x11\xe0", "an Excel 97-2003 workbook (.xls)"), (b"\xff\xfe", "UTF-16 text"),
             (b"\xfe\xff", "UTF-16 text"))
def _file_bytes(path: Path) -> bytes:
    """The bytes of ``path`` as a CSV reader sees them: decompressed when the file is gzip,
    bzip2, xz or a zip archive of one file. Raises :class:`DataError` naming the fix for an
    Excel or OpenDocument workbook, UTF-16 text, a binary file and a damaged archive."""
    try:
        with open_decompressed(path) as fh:  # a zip: its one file (zip_member refuses a workbook, ...)
            data = fh.read()
    except (ValueError, *DAMAGED) as exc:
        if isinstance(exc, DataError) or (isinstance(exc, OSError) and exc.errno is not None):
            raise  # (the file system's, not the file's: a missing or unreadable file)
        raise DataError(f"{path}: the compressed file is truncated or corrupt ({exc})") from None
    for magic, what in _NOT_TEXT:
        if data.startswith(magic):
            raise DataError(f"{path} is {what}, not a UTF-8 CSV file; {SAVE_AS_CSV}")
    if b"\x00" in data[:65536]:
        raise DataError(f"{path} looks like a binary file (it contains NUL bytes), not a CSV file; {SAVE_AS_CSV}")
    return data


def excel_sep_problem(path, start: str) -> str | None:
    """Why ``path``, whose text begins with ``start`` (its first line at least), is not read as it
    is: Excel's ``sep=;`` line, which names the delimiter above the header (read as the header,
    its columns were ``['sep=', '']``); None for any other first line."""
    found = re.match(r"\ufeff?(sep=.)[ \t]*(?:\r\n?|\n|$)", start)
    if not found:
        return None
    return (f"{path}: line 1 is Excel's {found.group(1)!r} line, which names the delimiter above the header; "
            "delete that line (siggate finds the delimiter from the header), so that the header is line 1")


def _decode(path: Path, data: bytes) -> str:
    """``data`` as UTF-8 text (an initial BOM dropped); else a :class:`DataError` naming the
    first byte that is not UTF-8, its line, and the fix."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = len(re.split(rb"\r\n|\r|\n", data[:exc.start]))  # (a Mac export ends its lines with \r alone)
        raise DataError(f"{path} is not UTF-8 text: byte 0x{data[exc.start]:02x} on line {line} (a Latin-1 or "
                        f"Windows-1252 export?); {SAVE_AS_CSV}") from None


#: read_table shares one string object between the equal fields of a file of at least
#: _SHARED_COLUMNS columns (a pretraining corpus of descriptors: its numbers repeat) that are at most
#: _SHARED_FIELD characters long (numbers and labels; most SMILES are longer). A narrow file's cells
#: are mostly distinct, where sharing would cost time and memory for nothing.
_SHARED_FIELD = 24
_SHARED_COLUMNS = 16


def read_table(path: str | os.PathLike, sep: str) -> tuple[list[str], list[list[str]]]:
    """The header and the data records of the CSV file ``path`` with delimiter ``sep``: each
    record a list of fields as written (quotes removed; a record may have more or fewer fields
    than the header, which the caller judges), blank lines skipped, so record ``i`` is data
    row ``i``; it starts on line ``records.lines[i]`` (:class:`Records`). An SD file (told by
    its first bytes; ``sep`` unread) is the table of :func:`~siggate.data.sdfile.sd_table`.

    Raises:
        DataError: an empty file, a file that is not UTF-8 CSV text (an Excel workbook, UTF-16,
            Latin-1, binary; the message says to save it as UTF-8 CSV), a damaged compressed
            file, or malformed CSV quoting.
    """
    path = Path(path)
    try:
        stat = path.stat()
        key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    except OSError:  # (_file_bytes names why)
        key = None
    kept = kept_sd_table(*key) if key else None  # (an SD file read before, unchanged: not read again)
    data = _file_bytes(path) if kept is None else b""
    if kept is not None or is_sd(data[:65536]):  # molfile records, their properties as columns
        header, rows, starts = kept or sd_file_table(*key, _decode(path, data))
        records = Records([list(row) for row in rows])  # (the kept table is not the caller's to change)
        records.lines.extend(starts)
        return list(header), records
    text = _decode(path, data)
    sep_line = excel_sep_problem(path, text[:16])
    if sep_line:
        raise DataError(sep_line)
    header, records = None, Records()
    shared: dict[str, str] | None = None  # (_SHARED_COLUMNS: a wide file's repeated fields, one object each)
    for start, rec in csv_records(io.StringIO(text, newline=""), sep, path, error=DataError):
        if not rec:
            continue
        if shared is not None:
            rec = [shared.setdefault(f, f) if len(f) <= _SHARED_FIELD else f for f in rec]
        if header is None:
            header, shared = rec, ({} if len(rec) >= _SHARED_COLUMNS else None)  # the header says it is wide
            continue
        records.append(rec)
        records.lines.append(start)
    if header is None:
        raise DataError(f"{path}: the file is empty (no header row); give a CSV whose first line names the "
                        "columns, e.g. smiles,y")
    return header, records


class Records(list):
    """:func:`read_table`'s data records; ``lines``: the line each starts on in the file (blank
    lines and a record's quoted line breaks counted), what messages name a row by."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.lines = array.array("l")


def line_at(lines, i: int) -> int:
    """The file line of data row ``i``: ``lines[i]`` (:attr:`Records.lines`), else ``i + 2`` (a
    header, no blank line)."""
    return int(lines[i]) if lines is not None and i < len(lines) else i + 2


def column_names(fields: list[str]) -> list[str]:
    """A header's column names as the commands that score a file read them (predict, evaluate
    and their plots): each without the spaces around it, so ``id, smiles, y`` names the columns
    ``smiles`` and ``y``; a name that then repeats is refused where a command reads it
    (:func:`check_unique_columns`). Training reads its names as written and says where spaces
    are what differs."""
    return [f.strip() for f in fields]


def smiles_column_in_any_case(path: str | os.PathLike, sep: str | None, wanted: str = "smiles") -> str | None:
    """The one column of the CSV ``path``'s header that is ``wanted`` in another case (ChEMBL's
    export names it ``Smiles``), as ``predict`` reads a file without the run's column; None when
    ``wanted`` is there, when no column or several are, or when the file's start cannot be read
    (its reader names why), or is no regular file (a pipe, which its reader refuses: opened here, it
    waited for a writer). Only the first 64 KiB are read."""
    if not Path(path).is_file():
        return None
    try:
        with open_decompressed(Path(path)) as raw:
            head = raw.read(65536)
    except (OSError, ValueError, IndexError, *DAMAGED):
        return None
    if is_sd(head):  # (its first line is a molecule's title; its SMILES column is 'smiles')
        return None
    sample = head.decode("utf-8-sig", errors="replace")
    first = sample.splitlines()[0] if sample.strip() else ""
    try:
        header = next(csv.reader([first], delimiter=sep or detect_sep(Path(path))), [])
    except csv.Error:
        return None
    return None if wanted in header else one_in_any_case(header, wanted)


def one_in_any_case(fields: Sequence[str], name: str | None) -> str | None:
    """The one field of ``fields`` that is ``name`` in any case, spaces around it aside (None:
    none, several, or no ``name``): the column read in place of a missing one."""
    found = [f for f in fields if name is not None and f.strip().lower() == name.strip().lower()]
    return found[0] if len(found) == 1 else None


def _read_header(path: Path, sep: str) -> list[str]:
    return read_table(path, sep)[0]


def check_unique_columns(path: Path, columns: list[str], wanted: list[str],
                         error: type[Exception] = DataError) -> None:
    """Refuse (``error``) a header that names a column the run reads more than once
    (``smiles,y,y``): which copy is meant cannot be known."""
    for col in dict.fromkeys(wanted):
        where = [i + 1 for i, c in enumerate(columns) if c == col]
        if len(where) > 1:
            raise error(f"{path}: the header names column {col!r} {len(where)} times (columns "
                            f"{', '.join(map(str, where))}); rename the copies so that each name is unique")


def csv_records(lines: Iterable[str], delimiter: str, path, consumed: int = 0,
                error: type[Exception] = ValueError) -> Iterator[tuple[int, list[str]]]:
    """``(first line, fields)`` of each record of the CSV text ``lines`` (what ``csv.reader``
    takes; ``consumed``: the file's lines before them), the one CSV reader of siggate's tables,
    inputs and corpora. A quote opened and never closed is ``error``, named at the line it opened
    on: a lenient reader made every line after it one field of that row, silently. Every other
    flaw of quoting (text after a closing quote: ``"ethanol" ,1.5``) reads as the lenient reader
    reads it, whose fields the callers strip."""
    if csv.field_size_limit() < 2**31 - 1:
        csv.field_size_limit(2**31 - 1)  # a long SMILES is a row to judge, not a reader error
    held: list[str] = []  # the lines of the record being read, for its lenient reading

    def source() -> Iterator[str]:
        for line in lines:
            held.append(line)
            yield line

    reader = csv.reader(source(), delimiter=delimiter, strict=True)
    while True:
        start = reader.line_num + 1 + consumed
        held.clear()
        try:
            rec = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            if "unexpected end of data" in str(exc):
                raise error(f"{path}, line {start}: a quoted field opened on this line is never closed (the file "
                            "ends inside it); close the quote, or remove it") from None
            rec = next(csv.reader(held, delimiter=delimiter), [])  # (the reader goes on at the next line)
        yield start, rec


def extra_fields(record: Sequence[str], width: int) -> list[str]:
    """The fields of ``record`` beyond the header's ``width`` that cannot be matched to a column;
    none where there are none, or where every one is empty: a delimiter at the end of the data
    lines and not of the header (``CCO,1.5,``), whose fields are the columns' (CSV reading 8: every
    such row failed, first with the words of a delimiter inside a field)."""
    extra = list(record[width:])
    return extra if any(f.strip() for f in extra) else []


def rows_of_no_data(header: Sequence[str], records: Sequence[Sequence[str]]) -> tuple[set[int], dict[int, str]]:
    """The data rows of :func:`read_table`'s ``records`` that hold no molecule: ``(empty, again)``,
    the rows of empty fields only (:data:`EMPTY_ROW`), and the rows that are the ``header`` again,
    in any case, each mapped to :data:`HEADER_AGAIN` or, in another column order,
    :data:`HEADER_REORDERED` (files joined with ``cat``; a second file's BOM and a trailing
    delimiter read as its header's). Training drops them with these reasons; ``evaluate`` counts them."""
    width = len(header)
    empty = {i for i, rec in enumerate(records) if not any(cell.strip() for cell in rec)}
    named = [c.strip().lower() for c in header]
    names = set(named)
    again = {}
    for i, rec in enumerate(records):  # (the first field first: a wide file's rows are not lowered whole)
        if rec and rec[0].lstrip("\ufeff").strip().lower() in names:
            fields = [c.lstrip("\ufeff").strip().lower() for c in [*rec[:width], *extra_fields(rec, width)]]
            if sorted(fields) == sorted(named):
                again[i] = HEADER_AGAIN if fields == named else HEADER_REORDERED
    return empty, again


def extra_fields_reason(line: int, width: int, extra: Sequence[str]) -> str:
    """The reason of a row with more fields than the header's ``width``, ``extra`` the fields beyond
    it (:func:`extra_fields`)."""
    return (f"line {line} has {width + len(extra)} fields but the header has {width}: a delimiter inside an unquoted "
            "field? quote that field or remove the extra one")


def _check_columns(path: Path, columns: list[str], wanted: list[tuple[str, str]], sep: str) -> None:
    """Raise a ValueError naming each missing column and listing the available ones."""
    missing = [(role, col) for role, col in wanted if col not in columns]
    if not missing:
        return
    targets = [col.strip() for role, col in wanted if role == "target"]
    for c in (c for c in columns if "," in c):  # --target-col splits at commas: such a name reads as several
        parts = [p.strip() for p in c.split(",")]
        at = next((i for i in range(len(targets) - len(parts) + 1) if targets[i:i + len(parts)] == parts), None)
        if at is not None:
            whole = targets[:at] + [c] + targets[at + len(parts):]
            raise DataError(f"{path}: the target column {c!r} has a comma in its name, which --target-col reads as a "
                            f"list of columns; name the targets with --set 'data.target_cols={json.dumps(whole)}' (or "
                            "rename the column)")
    what = ", ".join(f"{role} column {col!r}" for role, col in missing)
    msg = f"{path}: {what} not found; available columns: {columns}"
    headless = headerless_hint(columns)
    if headless:
        raise DataError(msg + headless)
    if len(columns) == 1:
        for delim, label in ((";", "';'"), ("\t", "a tab"), (",", "','"), ("|", "'|'")):
            if delim != sep and delim in columns[0]:
                msg += (
                    f". The header was read as a single column containing {label}: "
                    f"the file looks delimited by {label}, not {sep!r} (wrong delimiter? pass sep={delim!r}, "
                    f"--sep {delim!r} on the command line)"
                )
                break
    stripped = {c.strip(): c for c in columns}
    near = [f"{col!r} (found {stripped[col.strip()]!r} with spaces)" for _, col in missing if col.strip() in stripped]
    if near:
        msg += "; note: " + ", ".join(near)
    flags = {"SMILES": "--smiles-col", "target": "--target-col", "split": "--split column:NAME"}
    msg += "; name the right column with " + ", ".join(dict.fromkeys(flags[role] for role, _ in missing))
    spelled = {"SMILES": "--smiles-col {}", "target": "--target-col {}", "split": "--split column:{}"}
    guess = {col: closest_name(col, columns) for _, col in missing if col.strip() not in stripped}
    meant = []
    for role in dict.fromkeys(role for role, _ in missing):  # one suggestion per flag, all of its columns
        cols = [col for r, col in wanted if r == role]
        if any(guess.get(col) for col in cols):
            meant.append(spelled[role].format(",".join(guess.get(col) or col for col in cols)))
    if meant:
        msg += f". Did you mean {', '.join(meant)}?"
    raise DataError(msg)


def headerless_hint(fields: list[str]) -> str:
    """``"; its first line ... no header"`` where the header ``fields`` read as a row of data (a
    SMILES of two atoms or more beside a number: a table written without its header, whose first
    molecule would be taken for column names); empty otherwise."""
    from .chem import InvalidSmiles, parse_smiles, quiet_rdkit

    numbers = [f for f in fields if re.fullmatch(r"\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*", f)]
    if not numbers or len(numbers) == len(fields):
        return ""
    for field in fields:
        try:
            with quiet_rdkit():
                if parse_smiles(field).GetNumAtoms() >= 2:
                    return (f"; its first line reads as a row of data (the molecule {field.strip()!r} and the number "
                            f"{numbers[0].strip()!r}): the file has no header; add a first line naming the columns "
                            "(e.g. smiles,y)")
        except InvalidSmiles:
            continue
    return ""


def _label_text(column: pd.Series) -> pd.Series:
    """A target column's cells as the labels are read from them: stripped, typographic minus
    signs as '-' (:data:`_MINUS_SIGNS`)."""
    return column.astype(str).str.strip().str.translate(_MINUS_SIGNS)


def read_otherwise(then: int, path: str | os.PathLike, target_cols: list[str], task: str, sep: str | None = None,
                   decimal: str = ".", fragments: str = "all", smiles_col: str | None = None) -> bool:
    """Whether this siggate (:data:`CSV_VERSION`) reads the CSV ``path`` otherwise than reading
    ``then`` did: other rows kept, so other splits. Version 4 and 5 differ only where a label cell
    that is no number sits beside another target's label (:func:`read_labels` keeps that row now),
    5 and 6 only where a SMILES labels a heavy atom's isotope (one molecule with its unlabelled
    copy now: :data:`_HEAVY_ISOTOPE` anywhere in the file, a cell of another column too, is taken
    to differ), 6 and 7 only under ``fragments="parent"`` where a SMILES is an acid salted with its
    own anion (:func:`~siggate.data.chem.parent_by_neutralizing`; a cell of the ``smiles_col``
    column, or of any where the header lacks it, read as such a SMILES), 7 and 8 only for a
    multilabel task where a row has no label and where a line ends with a delimiter the header
    lacks (:func:`extra_fields`); other versions are taken to differ. A file that
    cannot be read is not judged here."""
    if then == CSV_VERSION:
        return False
    if then not in (4, 5, 6, 7) or CSV_VERSION != 8:
        return True
    try:
        header, records = read_table(Path(path), sep or detect_sep(Path(path)))
        if task == "multilabel":  # a row without a label and with a molecule, kept until version 8
            frame = table_frame(header, records, list(target_cols))
            errors = read_labels(Path(path), frame, list(target_cols), task, decimal, records.lines)[1]
            at = header.index(smiles_col) if smiles_col in header else 0
            if any(e and e.startswith(MISSING_TARGET) and canonical_smiles(records[i][at].strip() if at < len(records[i])
                                                                            else "")
                   for i, e in enumerate(errors)):
                return True
        if any(len(rec) > len(header) and not extra_fields(rec, len(header)) for rec in records):
            return True  # a delimiter at a line's end: the row failed until version 8
        if then == 7:
            return False
        at = header.index(smiles_col) if smiles_col in header else None
        cells = (cell for record in records for cell in (record if at is None else record[at:at + 1]))
        if fragments == "parent" and any(parent_by_neutralizing(cell) for cell in cells):
            return True
        if then == 6:
            return False
        if any(_HEAVY_ISOTOPE.search(cell) for record in records for cell in record):
            return True
        if then == 5:
            return False
        frame = table_frame(header, records, list(target_cols))
        return bool(read_labels(Path(path), frame, list(target_cols), task, decimal, records.lines)[2])
    except (DataError, KeyError, ValueError, OSError):
        return False


#: a SMILES atom with an isotope label on an element other than hydrogen (``[13CH3]``, ``[18F]``;
#: not ``[2H]``, but ``[2He]``/``[3Hg]``, a labelled wildcard ``[1*]`` and ``[13#6]``)
_HEAVY_ISOTOPE = re.compile(r"\[\d+(?!H(?![a-z]))[A-Za-z*#]")


#: the data report's issue of a row kept with a label cell read as missing (:func:`read_labels`)
LABEL_LEFT_OUT = "label left out"

#: the note of a row whose label is a bound, a relation column saying ``>`` or ``<`` (ChEMBL's
#: ``Standard Relation``: an activity beyond the assay's range)
CENSORED_LABEL = "censored label"
#: the note of a row whose unit column names another unit than most labelled rows (ChEMBL's ``Standard Units``)
OTHER_UNIT = "other unit"
#: the values of a relation column: measured (``=``, ``~``: approximately) or a bound; ChEMBL writes them quoted (``'>'``)
_RELATIONS = {"=": False, "~": False, "==": False, "<": True, ">": True, "<=": True, ">=": True, "<<": True,
              ">>": True, "≤": True, "≥": True}
#: the names of a column of the labels' units, the first found read (ChEMBL's ``Standard Units``
#: before a depositor's ``Units``; in any case; not ``Business Unit`` or ``Price per unit``)
_UNIT_COLUMNS = ("standard units", "standard_units", "standard unit", "standard_unit", "units", "unit")


def label_qualifiers(header: list[str], records: Sequence[list[str]], skip: set[str], labelled: np.ndarray
                     ) -> tuple[dict[int, str], dict[int, str]]:
    """The rows of a table whose label a column beside it qualifies: ``(censored, other_unit)``,
    each ``{row: detail}`` for the ``labelled`` rows (a boolean per record). ``censored``: rows
    where the first column of relations (every non-empty cell, its quotes stripped, a relation:
    ``=``, ``<``, ``>=``, ...) holds a bound, not ``=``; ``other_unit``: where the column of
    units (the first of :data:`_UNIT_COLUMNS` there), if its labelled rows name more than one unit,
    names another than the most common. Columns in ``skip`` (the SMILES, targets, split) are not read."""
    def cells(i: int) -> Iterator[str]:
        return (rec[i].strip().strip("'\"").strip() if i < len(rec) else "" for rec in records)

    censored: dict[int, str] = {}
    other: dict[int, str] = {}
    named = {n.strip().lower() for n in header if n not in skip}
    unit_column = next((n for n in _UNIT_COLUMNS if n in named), None)
    for i, name in enumerate(header):
        if name in skip:
            continue
        if not censored and all(v in _RELATIONS for v in cells(i) if v):  # (a column of numbers: its first cell)
            values = list(cells(i))
            if any(values):
                censored = {r: f"{name!r} is {v!r}: the label is a bound"
                            for r, v in enumerate(values) if labelled[r] and _RELATIONS.get(v)}
                if not censored:
                    censored = {-1: ""}  # (the relation column is found, and every labelled row is measured)
        if not other and name.strip().lower() == unit_column:
            values = list(cells(i))
            counts: dict[str, int] = {}
            for r, v in enumerate(values):
                if labelled[r] and v:
                    counts[v] = counts.get(v, 0) + 1
            if len(counts) > 1:
                common = max(counts, key=counts.get)
                other = {r: f"{name!r} is {v!r}, not {common!r} as in {counts[common]} of the labelled rows"
                         for r, v in enumerate(values) if labelled[r] and v and v != common}
    censored.pop(-1, None)
    return censored, other


def read_labels(path: Path, frame: pd.DataFrame, target_cols: list[str], task: str,
                decimal: str = ".", lines=None) -> tuple[np.ndarray, list[str | None], dict[int, str]]:
    """Parse target columns: float array [n, T] (NaN = missing), a per-row error (or None) and the
    rows whose unreadable cells were left out (``{row: why}``), the one reading of labels for
    training and for ``siggate evaluate --data``; ``lines``: the rows' file lines
    (:attr:`Records.lines`), which refusals name. A cell that is not a number (censored ``>100``)
    or not finite is missing for its target: a row with a label of another target keeps it
    (``left out``), a row with none is an error (its first such cell named). A class other than
    0/1 makes its row an error.

    Raises:
        DataError: numbers not all written with the ``decimal`` mark (:func:`_check_decimal_marks`).
    """
    n = len(frame)
    y = np.full((n, len(target_cols)), np.nan, dtype=np.float64)
    errors: list[str | None] = [None] * n
    cell: dict[int, str] = {}  # row -> its first cell that is no label
    for t, col in enumerate(target_cols):
        raw = _label_text(frame[col])
        missing = raw.str.lower().isin(_MISSING).to_numpy()
        text = raw.str.replace(",", ".", regex=False) if decimal == "," else raw
        values = np.array(pd.to_numeric(text.where(~missing, None), errors="coerce"), dtype=np.float64)
        _check_decimal_marks(path, col, raw, missing, values, decimal, lines)
        unread = np.flatnonzero(~missing & np.isnan(values))
        written = frame[col].astype(str).str.strip()  # the cell as the file has it, for the messages
        for i in unread:
            cell.setdefault(i, f"target column {col!r}: {written.iat[i]!r} is not a number" + (
                " (censored: a bound, not a measurement)" if _CENSORED.match(raw.iat[i]) else
                " (a number with its unit: write the numbers alone, every label of the column in one unit)"
                if _WITH_UNIT.match(raw.iat[i]) else ""))
        values[missing] = np.nan
        bad_inf = np.abs(np.nan_to_num(values)) > np.finfo(np.float32).max  # infinite, or so once stored as float32
        for i in np.flatnonzero(bad_inf):
            cell.setdefault(i, f"target column {col!r}: {written.iat[i]!r} is not finite" if np.isinf(values[i])
                            else f"target column {col!r}: {written.iat[i]!r} is beyond float32's range "
                                 "(about ±3.4e38) in which labels are kept")
        values[bad_inf] = np.nan
        if task in ("binary", "multilabel"):  # another class than 0/1 says the row (or the task) is wrong: dropped
            ok = np.isnan(values) | (values == 0) | (values == 1)
            for i in np.flatnonzero(~ok):
                errors[i] = errors[i] or f"target column {col!r}: label {written.iat[i]!r} is not 0 or 1"
        y[:, t] = values
    left_out = {}
    for i, why in sorted(cell.items()):  # a row's other targets' labels are not lost with the cell
        if errors[i]:
            continue
        if np.isfinite(y[i]).any():
            left_out[i] = why
        else:
            errors[i] = why
    for i in np.flatnonzero(np.isnan(y).all(axis=1)):  # (every task: a multilabel row too, CSV_VERSION 8)
        errors[i] = errors[i] or (
            MISSING_TARGET if len(target_cols) == 1 else f"{MISSING_TARGET} (all of {target_cols} are empty)"
        )
    return y, errors, left_out


def _check_decimal_marks(path: Path, col: str, raw: pd.Series, missing: np.ndarray, values: np.ndarray,
                         decimal: str, lines=None) -> None:
    """Refuse a target column whose numbers are not all written with the ``decimal`` mark: with
    ``"."``, numbers with a decimal comma (named ``--decimal ,``), or thousands separators beside
    decimal points (``7,120`` and ``2.86``: reading ``--decimal ,`` would make 7,120 7.12); with
    ``","``, numbers with a decimal point."""
    def line(i: int) -> str:
        return f"{raw.iat[i]!r} on line {line_at(lines, i)}"

    given = np.flatnonzero(~missing)
    if decimal == ",":
        grouped = [i for i in given if _THOUSANDS_POINT.match(raw.iat[i]) and ("," in raw.iat[i] or
                                                                              raw.iat[i].count(".") >= 2)]
        if grouped:  # (each read as no number: the row was dropped, the largest values first)
            raise DataError(f"{path}: target column {col!r} holds {len(grouped)} number(s) with '.' separating "
                            f"thousands ({line(grouped[0])}); remove the thousands separators from the file "
                            "(2.999,2 -> 2999,2), then --decimal , reads the rest")
        point = [i for i in given if _DECIMAL_POINT.match(raw.iat[i])]
        if point:
            raise DataError(f"{path}: target column {col!r} holds {len(point)} number(s) written with a decimal point "
                            f"({line(point[0])}), and --decimal , reads ',' as the decimal mark; drop --decimal , if "
                            "the file's mark is '.', or write every number with one mark (no thousands separators)")
        comma = [i for i in given if "," in raw.iat[i]]
        whole = [i for i in given if "," not in raw.iat[i] and abs(values[i]) >= 100 and float(values[i]).is_integer()]
        if comma and whole and all(_THOUSANDS.match(raw.iat[i]) and not _LEADING_ZERO.match(raw.iat[i]) for i in comma):
            logger.warning("%s: target column %r: every number with a comma has three digits after it (%s), as "
                           "thousands separators do, and %d others are whole numbers of three digits or more (%s): "
                           "--decimal , reads %s as %s; if the commas separate thousands, remove them from the file and "
                           "drop --decimal ,", path, col, line(comma[0]), len(whole), line(whole[0]), raw.iat[comma[0]],
                           f"{values[comma[0]]:g}")
        return
    comma = [i for i in given if np.isnan(values[i]) and (_DECIMAL_COMMA.match(raw.iat[i]) or _THOUSANDS.match(raw.iat[i]))]
    if not comma:
        return
    point = [i for i in given if not np.isnan(values[i]) and "." in raw.iat[i]]
    thousands = all(_THOUSANDS.match(raw.iat[i]) for i in comma)
    if (point or "." in raw.iat[comma[0]]) and thousands:
        where = f"beside numbers with a decimal point ({line(point[0])})" if point else "and a decimal point"
        raise DataError(f"{path}: target column {col!r} holds {len(comma)} number(s) with a comma ({line(comma[0])}) "
                        f"{where}: the commas are thousands separators; remove them from the file (7,120 -> 7120)")
    if point:
        raise DataError(f"{path}: target column {col!r} mixes decimal marks: ',' in {line(comma[0])} and '.' in "
                        f"{line(point[0])}; write every number with one decimal mark")
    if thousands:
        raise DataError(f"{path}: target column {col!r} holds {len(comma)} number(s) with a comma ({line(comma[0])}), "
                        "a decimal comma or a thousands separator: pass --decimal , (data.decimal) if ',' is the "
                        "decimal mark (7,120 = 7.12), else remove the thousands separators (7,120 -> 7120)")
    raise DataError(f"{path}: target column {col!r} holds {len(comma)} number(s) written with a decimal comma "
                    f"({line(comma[0])}); pass --decimal , (data.decimal) to read them, or save the file with '.' "
                    "as the decimal mark")


def row_issue(reason: str) -> str:
    """The kind of a dropped row from its reason: ``"missing target"``, ``"bad target"``,
    ``"bad split label"``, ``"duplicate"`` (merged or dropped by ``duplicates``),
    ``"malformed row"`` (more fields than the header), ``"empty row"``, ``"header again"`` or
    ``"invalid molecule"``."""
    if reason.startswith("line ") and " fields but the header has " in reason:
        return "malformed row"
    if reason.startswith(MISSING_TARGET):
        return MISSING_TARGET
    if reason == EMPTY_ROW:
        return "empty row"
    if reason in (HEADER_AGAIN, HEADER_REORDERED):
        return "header again"
    if reason.startswith("target column"):
        return "bad target"
    if reason.startswith("split column"):
        return "bad split label"
    if reason.startswith((MERGED_INTO, "duplicate of row")):
        return "duplicate"
    return "invalid molecule"


#: the refusal of a CSV with a header and no row, by training and by ``evaluate --data``
NO_ROWS = "the file has a header but no data rows; add one row per molecule"


def check_any_numeric(path: Path, frame: pd.DataFrame, target_cols: list[str], y: np.ndarray,
                      allow_empty: bool = False, lines=None) -> None:
    """A target column in which no row holds a number is a wrong column, not bad rows; for
    training (not ``allow_empty``), one in which most of the values given are not numbers is
    refused too (training on the rest would drop most of its labels). ``allow_empty``: a column
    empty in every row passes while another holds numbers (a file labelled for some of a
    multi-target model's targets, ``siggate evaluate --data``, which counts the rows it cannot
    score). A file of no rows is refused as such."""
    if len(frame) == 0:
        raise DataError(f"{path}: {NO_ROWS}")
    for t, col in enumerate(target_cols):
        if np.isfinite(y[:, t]).any():
            text = _label_text(frame[col])
            present = ~text.str.lower().isin(_MISSING).to_numpy()
            unread, given = np.flatnonzero(present & np.isnan(y[:, t])), int(present.sum())
            if not allow_empty and 2 * len(unread) > given:
                shown = ", ".join(f"{text.iat[i]!r} on line {line_at(lines, i)}" for i in unread[:3])
                raise DataError(f"{path}: target column {col!r}: {len(unread)} of its {given} values are not "
                                f"finite numbers ({shown}); training on the rest would drop most of its labels. Write them "
                                "as plain numbers, leave a cell empty where there is no measurement, or name the "
                                "label column with --target-col (censored values such as '>10' are bounds, which "
                                "siggate does not train on)")
            continue
        raw = [v for v in _label_text(frame[col]) if v.lower() not in _MISSING]
        if not raw and allow_empty and np.isfinite(y).any():
            continue
        if not raw:
            raise DataError(f"{path}: target column {col!r} is empty in every row; name the column that holds "
                            "the values with --target-col")
        first = ", ".join(repr(v) for v in list(dict.fromkeys(raw))[:3])
        numbers = pd.to_numeric(pd.Series(raw), errors="coerce").to_numpy(dtype=np.float64)
        if not np.isnan(numbers).any():  # numbers all, each infinite or beyond float32's range (read_labels)
            raise DataError(f"{path}: target column {col!r} holds no finite number within float32's range (about "
                            f"±3.4e38), in which labels are kept (first values: {first}); rescale the labels (their "
                            "logarithm, or other units) or choose another --target-col")
        raise DataError(f"{path}: target column {col!r} holds no numeric value (first values: {first}); "
                        "targets must be numbers (0/1 for classification): choose another --target-col or "
                        "encode the labels as numbers")


#: the largest rounding of a label to float32 (in which siggate keeps labels), as a share of the
#: column's spread, that a column may have: far below any model's error, far above what float32
#: does to labels written to their instruments' precision (a density 1.0012 +- 5e-4: 1e-4)
FLOAT32_ROUNDING = 1e-2


def check_float32_labels(path: Path, target_cols: list[str], y: np.ndarray) -> None:
    """Refuse a target column whose labels float32 would round by more than
    :data:`FLOAT32_ROUNDING` of their spread: labels on a large offset (``-1000002.3`` beside
    ``-1000001.1``; float32 holds about 7 significant digits), which would train and score a model
    on labels rounded to 1/16, silently. The fix is to subtract the offset."""
    for t, col in enumerate(target_cols):
        values = y[np.abs(y[:, t]) <= np.finfo(np.float32).max, t]  # finite labels float32 holds (others: bad rows)
        if values.size < 2:
            continue
        spread = float(np.std(values))
        rounding = float(np.max(np.abs(values - values.astype(np.float32).astype(np.float64))))
        if spread > 0 and rounding > FLOAT32_ROUNDING * spread:
            centre = float(np.median(values))
            shift = np.format_float_positional(round(centre, -math.floor(math.log10(spread))), trim="-")  # spread's decade
            raise DataError(f"{path}: target column {col!r}: its labels sit far from 0 for their spread (median "
                            f"{centre:.10g}, std {spread:.3g}); siggate keeps labels as 32-bit floats, which would "
                            f"round them by up to {rounding:.3g}; subtract a constant such as {shift} from "
                            "the column first (and add it back to the predictions)")


class EmptySplitError(DataError):
    """A CSV whose split leaves train or val (or test, where required) without rows;
    ``cause``: the message without its fix (training's flags)."""

    def __init__(self, message: str, cause: str):
        super().__init__(message)
        self.cause = cause


def check_trainable(path: Path, ds: GraphDataset, require_test: bool = True, split: str | None = None,
                    val_fraction: float = 0.0) -> None:
    """Raise :class:`DataError` when a model cannot be trained on ``ds``: no usable row, a
    constant target, or an empty split (``siggate train`` calls this; :func:`load_csv` itself only warns).
    ``require_test=False`` allows an empty test split (the scikit-learn estimators' ``fit``);
    ``split`` and ``val_fraction``: how the splits were drawn (``data.split``,
    ``data.val_fraction``), for the fix of an empty one."""
    n_valid = sum(ds.sizes().values())
    if n_valid == 0 and not ds.invalid:
        raise DataError(f"{path}: {NO_ROWS}")
    if n_valid == 0:
        reasons = "; ".join(f"line {r.file_line}: {r.reason}" for r in ds.invalid[:3])
        split = all(row_issue(r.reason) == "bad split label" for r in ds.invalid)  # (the SMILES column was blamed)
        classes = ds.info.task != "regression" and any("is not 0 or 1" in r.reason for r in ds.invalid)
        fix = (f"check the split column (--split column:NAME; its values are {', '.join(_SPLIT_LABELS)})" if split else
               f"its labels are not the classes 0 and 1: a measured quantity trains with --task regression (not "
               f"{ds.info.task}), two classes coded otherwise are recoded as 0 and 1" if classes else
               "check the SMILES column (--smiles-col) and the targets")
        raise DataError(f"{path}: none of the {len(ds.invalid)} rows can be used ({reasons}); {fix}")
    y = _labels(ds)
    for t, name in enumerate(ds.info.target_names):
        col = y[~np.isnan(y[:, t]), t]
        if col.size == 1:  # a constant target at its smallest
            dropped = sum(r.reason.startswith(f"target column {name!r}") for r in ds.invalid)
            raise DataError(f"{path}: target column {name!r} has a label in one usable row only"
                            + (f" ({dropped} row(s) were dropped for their label)" if dropped else "")
                            + ", so there is nothing to learn; label more rows"
                            + (", or drop it from --target-col" if len(ds.info.target_names) > 1 else ""))
        if col.size > 1 and np.all(col == col[0]):
            dropped = [r for r in ds.invalid if r.reason.startswith(f"target column {name!r}")]
            if dropped:  # the other labels were refused: that is the cause to name (classes coded -1/+1)
                fix = ("recode the two classes as 0 and 1" if "is not 0 or 1" in dropped[0].reason
                       else "write those labels as numbers")
                raise DataError(f"{path}: target column {name!r} has the same value ({col[0]:g}) in all {col.size} "
                                f"rows it can read, and {len(dropped)} row(s) were dropped for their label (line "
                                f"{dropped[0].file_line}: {dropped[0].reason}); {fix}")
            fix = ("drop it from --target-col" if len(ds.info.target_names) > 1
                   else "choose the --target-col that holds the property")
            unread = [r for r in ds.invalid if row_issue(r.reason) == "invalid molecule"]
            left = (f" ({len(unread)} row(s) were left out for their molecule, first line {unread[0].file_line}: "
                    f"{unread[0].reason}; where they hold the other values, mend those SMILES)") if unread else ""
            raise DataError(f"{path}: target column {name!r} has the same value ({col[0]:g}) in all {col.size} "
                            f"labelled rows, so there is nothing to learn (every error would be 0){left}; {fix}")
    empty = [name for name, graphs in ds.splits.items() if not graphs and (require_test or name != "test")]
    if empty:
        cause = (f"{path}: the {' and '.join(empty)} split{'s are' if len(empty) > 1 else ' is'} empty "
                 f"({n_valid} usable rows)")
        raise EmptySplitError(f"{cause}; {_empty_split_fix(empty, split, val_fraction)}", cause)
    if ds.info.task == "binary":  # ROC-AUC, the metric that chooses the epoch and scores the run, needs both
        found = one_class_split(ds)
        if found:
            name, rows = found
            counts = {c: int(np.sum(y[:, 0] == c)) for c in (0.0, 1.0)}
            classes = {float(g.y[0, 0]) for g in ds.splits[name] if not math.isnan(float(g.y[0, 0]))}
            held = classes.pop() if classes else None
            rare = min(counts, key=counts.get)
            head = (f"{path}: the {name} split holds only class {int(held) if held is not None else '?'} "
                    f"({rows} rows), so its ROC-AUC is undefined")
            needing = sum(1 for graphs_ in ds.splits.values() if graphs_)  # an allowed empty test needs none
            if counts[rare] < needing:  # no split can fix it: each split that holds rows needs one
                raise DataError(f"{head}; the file's usable rows hold {counts[rare]} of class {int(rare)} (of "
                                f"{len(y)}), and each of the {needing} splits needs both classes: label "
                                f"more molecules of class {int(rare)}")
            raise DataError(f"{head}; --split random mixes the classes (another --seed draws another random "
                            "split), or give a split column with both classes in each split")
    if ds.info.task == "multilabel":  # average precision over the targets with both classes: one is needed
        found = one_class_split(ds)
        if found:
            name, rows = found
            raise DataError(f"{path}: no target of the {name} split ({rows} rows) holds both classes, so its average "
                            "precision is undefined; --split random mixes the classes (another --seed draws another "
                            "random split), or give a split column with both classes of some target in each split")


def _empty_split_fix(empty: list[str], split: str | None, val_fraction: float) -> str:
    """What to do about the ``empty`` splits of a CSV split by ``split`` (``val_fraction``: the
    share of a split column's train rows drawn as val rows)."""
    if split is not None and split.startswith("column:"):
        if empty == ["val"] and val_fraction:  # (_draw_val draws one at least: they were dropped after it)
            return ("the val rows --val-fraction drew were dropped after the split; add rows, or draw more "
                    "(a larger --val-fraction, data.val_fraction)")
        if empty == ["val"]:
            return ("give the split column val rows, or draw them from its train rows: --val-fraction 0.1 "
                    "(data.val_fraction)")
        return f"give the split column rows of {' and '.join(empty)}"
    others = [s for s in ("random", "scaffold_balanced") if s != (split or "scaffold")]
    return "add rows" + (f", or choose --split {' or '.join(others)} (data.split)" if split != "random" else "")


def _labels(ds: GraphDataset, splits: Sequence[str] = ("train", "val", "test")) -> np.ndarray:
    """Labels ``[G, T]`` of every graph of ``splits`` (NaN: missing)."""
    graphs = [g for name in splits for g in ds.splits.get(name) or []]
    if not graphs:
        return np.zeros((0, ds.info.num_tasks))
    return torch.cat([g.y.reshape(1, -1) for g in graphs]).double().numpy()


def build_csv(
    path: str | os.PathLike,
    smiles_col: str,
    target_cols: list[str],
    task: str,
    split: str = "scaffold",
    seed: int = 0,
    *,
    frac: Sequence[float] = (0.8, 0.1, 0.1),
    sep: str = ",",
    allow_unsanitized: bool = False,
    decimal: str = ".",
    duplicates: str = "keep",
    val_fraction: float = 0.0,
    fragments: str = "all",
    chirality: str = CSV_CHIRALITY,
) -> GraphDataset:
    """Featurize a CSV (no caching); see :func:`load_csv`."""
    path = Path(path)
    split_col = _parse_split(split)
    usecols = list(dict.fromkeys([smiles_col, *target_cols, *([split_col] if split_col else [])]))
    header, records = read_table(path, sep)
    frame = table_frame(header, records, usecols)
    width = len(header)
    if frame.empty:
        raise DataError(f"{path}: {NO_ROWS}")
    lines = records.lines
    y_all, errors, left_out = read_labels(path, frame, target_cols, task, decimal, lines)
    check_any_numeric(path, frame, target_cols, y_all, lines=lines)
    check_float32_labels(path, target_cols, y_all)
    smiles_all = frame[smiles_col].astype(str).tolist()
    split_all = frame[split_col].astype(str).tolist() if split_col else None
    # the table's text is read: free it before the molecules are (a wide file's strings, such as a
    # pretraining corpus's descriptor columns, take more memory than its graphs)
    n_rows = len(frame)
    wide = {i: found for i, rec in enumerate(records) if (found := extra_fields(rec, width))}
    empty, again = rows_of_no_data(header, records)
    censored, other_unit = label_qualifiers(header, records, set(usecols), ~np.isnan(y_all).all(axis=1))
    del header, records, frame

    graphs, keys, canon, parents, invalid = [], [], [], [], []
    late: dict[int, str] = {}  # row -> why: molecules no model reads, dropped after the split (check_atoms)
    for i, smi in enumerate(smiles_all):
        smi = smi.strip()
        try:
            if i in wide:  # its fields cannot be matched to the columns
                raise InvalidSmiles(extra_fields_reason(line_at(lines, i), width, wide[i]))
            if i in empty:  # not a molecule without its label
                raise InvalidSmiles(EMPTY_ROW)
            if i in again:  # not a SMILES 'smiles' with a label that is no number
                raise InvalidSmiles(again[i])
            if errors[i] is not None:
                raise InvalidSmiles(errors[i])
            label = None
            if split_all is not None:
                label = _SPLIT_LABELS.get(split_all[i].strip().lower())
                if label is None:
                    raise InvalidSmiles(
                        f"split column {split_col!r}: unknown value {split_all[i]!r} "
                        f"(expected {', '.join(list(_SPLIT_LABELS)[:-1])} or {list(_SPLIT_LABELS)[-1]}, in any case)"
                    )
            reading = read_molecule(parse_smiles(smi, allow_unsanitized=allow_unsanitized,
                                                 max_length=MAX_SMILES_LENGTH), fragments)  # predict's rule
            mol = reading.mol
            try:
                check_atoms(mol)  # predict's rule: a molecule it refuses does not train either
            except InvalidSmiles as exc:  # dropped once the splits are drawn: every other row keeps the split
                late[i] = str(exc)        # it had when such rows were kept (CSV_VERSION 2), so older runs resume
            data = mol_to_graph(mol, chirality=chirality)
            same = _canonical(mol, smi) if _heavy_isotopes(mol, smi) else (reading.smiles or _canonical(mol, smi))
            if split in ("scaffold", "scaffold_balanced"):
                try:
                    key = murcko_scaffold(mol)
                except Exception:  # partially sanitized molecules: a group of their own molecule
                    key = "\x00mol:" + same
            else:
                key = label
        except InvalidSmiles as exc:
            invalid.append(InvalidRow(i, smi, str(exc)))
            continue
        except Exception as exc:  # never let one odd row stop the whole file
            invalid.append(InvalidRow(i, smi, f"{type(exc).__name__}: {exc}"))
            continue
        data.smiles = reading.smiles or smi  # the SMILES the members and the tables read (a salt's parent)
        data.idx = i
        graphs.append(data)
        keys.append(key)
        canon.append(same)
        parents.append(replace(reading, mol=None))  # what the notes read of it (a Mol per row outweighs its graph)

    # a split column is the user's: rows of one molecule are merged only within a split
    keep, notes, merged = _duplicates(canon, graphs, y_all, target_cols, duplicates,
                                      split_of=keys if split_col else None)
    invalid += merged
    for j, g in enumerate(graphs):
        g.y = torch.from_numpy(y_all[g.idx : g.idx + 1].astype(np.float32))
        if g.idx in left_out:  # (a row of a kept molecule, merged or not)
            notes.append(RowNote(g.idx, g.smiles, LABEL_LEFT_OUT, f"{left_out[g.idx]}: that target is missing for "
                                 "this row, its other targets' labels are kept"))
        for issue, found in ((CENSORED_LABEL, censored), (OTHER_UNIT, other_unit)):
            if g.idx in found:
                notes.append(RowNote(g.idx, g.smiles, issue, found[g.idx]))
        if g.num_nodes > PREDICT_MAX_ATOMS:
            notes.append(RowNote(g.idx, g.smiles, "large molecule", f"{g.num_nodes} atoms, above siggate predict's "
                                 f"limit of {PREDICT_MAX_ATOMS} (--max-atoms)"))
    for j, r in enumerate(parents):  # every row, a merged duplicate's too (its merge is listed beside)
        if r.fragments > 1:
            read = (f"{READ_AS_PARENT}: {r.parent}" if r.smiles else
                    f"{READ_AS_WRITTEN}: {NO_PARENT}" if fragments == "parent" else
                    f"all read; the parent: {r.parent}" if r.parent else f"all read: {NO_PARENT}")
            notes.append(RowNote(graphs[j].idx, graphs[j].smiles, SEVERAL_FRAGMENTS, f"{r.fragments} fragments, {read}"))
    graphs, keys, canon, parents = ([graphs[j] for j in keep], [keys[j] for j in keep], [canon[j] for j in keep],
                                    [_key_of_smiles(parents[j].parent) if parents[j].parent else canon[j] for j in keep])
    invalid.sort(key=lambda r: r.index)
    notes.sort(key=lambda r: r.index)

    if split in SPLITS:
        # rows of one molecule in one split (the scaffold splits group them already)
        idx = split_indices(split, keys, frac, seed, molecules=canon)
    else:
        idx = {name: [j for j, k in enumerate(keys) if k == name] for name in ("train", "val", "test")}
        if val_fraction:
            if idx["val"]:
                raise DataError(f"{path}: the split column {split_col!r} already names {len(idx['val'])} val rows; "
                                "--val-fraction draws val rows from train only for a column without them: drop it")
            labels = [float(g.y[0, 0]) for g in graphs] if task == "binary" else None
            idx = _draw_val(idx, canon, val_fraction, seed, path, strata=labels)
    if late:
        invalid = sorted(invalid + [InvalidRow(g.idx, g.smiles, late[g.idx]) for g in graphs if g.idx in late],
                         key=lambda r: r.index)
        notes = [n for n in notes if n.index not in late]
        idx = {k: [j for j in v if graphs[j].idx not in late] for k, v in idx.items()}
    notes = sorted(notes + _parents_across_splits(idx, graphs, canon, parents), key=lambda r: r.index)
    if fragments != "all":  # the report's rows as the file writes them (a graph holds its parent's SMILES)
        notes = [RowNote(n.index, smiles_all[n.index].strip(), n.issue, n.detail) for n in notes]
        invalid = [InvalidRow(r.index, smiles_all[r.index].strip(), r.reason,  # (a merged row was read as its parent)
                              read_as=r.smiles if r.smiles != smiles_all[r.index].strip() else "") for r in invalid]
    invalid = [replace(r, line=line_at(lines, r.index)) for r in invalid]  # where each row is in the file

    info = TaskInfo(
        name="csv",
        task=task,
        num_tasks=len(target_cols),
        metric=TASK_METRIC[task],
        node_features="ogb",
        target_names=list(target_cols),
        chirality=chirality,
    )
    return GraphDataset(
        info=info,
        splits={k: [graphs[j] for j in idx[k]] for k in ("train", "val", "test")},
        invalid=invalid,
        source=str(path),
        notes=notes,
        rows=n_rows,
    )


def table_frame(header: list[str], records: list[list[str]], columns: list[str]) -> pd.DataFrame:
    """The ``columns`` of :func:`read_table`'s records as a frame of strings (a short record's
    missing trailing fields are empty, as every CSV reader reads them)."""
    at = {c: header.index(c) for c in columns}
    return pd.DataFrame({c: [rec[i] if i < len(rec) else "" for rec in records] for c, i in at.items()},
                        columns=columns, dtype=str)


def _heavy_isotopes(mol, smiles: str | None = None) -> bool:
    """Whether ``mol`` labels the isotope of an atom other than hydrogen (``[13CH3]``, ``[18F]``);
    ``smiles``: the text ``mol`` was read from, which labels none unless :data:`_HEAVY_ISOTOPE`
    finds a label in it (the atoms are then not visited: a run's thousands of molecules are keyed
    again by ``evaluate``)."""
    if smiles is not None and not _HEAVY_ISOTOPE.search(smiles):
        return False
    return any(a.GetIsotope() and a.GetAtomicNum() != 1 for a in mol.GetAtoms())


def _canonical(mol, smiles: str) -> str:
    """RDKit's canonical SMILES of ``mol`` with its heavy atoms' isotope labels dropped (the input
    text if RDKit cannot write it): the key of one molecule for the duplicates, the splits and the
    molecules a run fitted. A ``13C``-labelled copy is the molecule every member reads (the atom
    features and the fingerprints hold no isotope; only a stereocentre the label alone makes
    reaches the GNN's CIP column), so it is one molecule with it, never one in training and the
    other in test; a deuterium stays (an atom of the graph)."""
    from rdkit import Chem

    try:
        if not _heavy_isotopes(mol, smiles):
            return Chem.MolToSmiles(mol)
        bare = Chem.Mol(mol)
        for atom in bare.GetAtoms():
            if atom.GetAtomicNum() != 1:
                atom.SetIsotope(0)
        # written and read again, so that stereo the label alone made ([13CH3][C@H](C)O) is perceived
        # away, as for the unlabelled molecule, and every spelling of the labelled one gets one key
        again = Chem.MolFromSmiles(Chem.MolToSmiles(bare))
        return Chem.MolToSmiles(again if again is not None else bare)
    except Exception:
        return smiles


def _key_of_smiles(smiles: str) -> str:
    """:func:`_canonical` of a SMILES siggate wrote itself (a salt's parent), the same key as the
    molecule read from it (the text as it is where RDKit cannot read it)."""
    from rdkit import Chem

    from .chem import quiet_rdkit

    with quiet_rdkit():
        mol = Chem.MolFromSmiles(smiles)
    return smiles if mol is None else _canonical(mol, smiles)


#: the note of a row whose molecule has several fragments (a salt, a mixture)
SEVERAL_FRAGMENTS = "several fragments"
#: how that note says that the model reads the parent (``fragments="parent"``), or, without one, the molecule
READ_AS_PARENT = "read as its parent"
READ_AS_WRITTEN = "read as written"
#: the note of a row whose parent is another molecule's parent in another split
PARENT_ACROSS_SPLITS = "parent across splits"
#: rows a note names at most (then "and N more")
_NAMED_ROWS = 3


#: what that note says of a molecule without a parent (:func:`~siggate.data.chem.parent_molecule`)
NO_PARENT = "no parent to keep (no carbon, two carbon fragments of one size, or one RDKit cannot write back)"


def _parents_across_splits(idx: dict[str, list[int]], graphs: list, canon: list[str],
                           parents: list[str]) -> list[RowNote]:
    """A :data:`PARENT_ACROSS_SPLITS` note on each row whose parent (``parents``, one per graph:
    the largest carbon fragment, neutralized) is the parent of a row of another molecule (``canon``) in
    another split: a salt and its free base, two salts of one base, or one compound written in two
    charge states, on both sides of the split. Rows of one molecule in several splits are the
    duplicates' note (:data:`CROSS_SPLIT`)."""
    where = {j: name for name, rows in idx.items() for j in rows}
    groups: dict[str, list[int]] = {}
    for j in sorted(where):
        groups.setdefault(parents[j], []).append(j)
    notes = []
    for parent, members in groups.items():
        if len({canon[j] for j in members}) < 2 or len({where[j] for j in members}) < 2:
            continue
        for j in members:
            others = [k for k in members if where[k] != where[j] and canon[k] != canon[j]]
            if others:
                rows = ", ".join(f"{where[k]} row {graphs[k].idx}" for k in others[:_NAMED_ROWS])
                rows += f" and {len(others) - _NAMED_ROWS} more" if len(others) > _NAMED_ROWS else ""
                notes.append(RowNote(graphs[j].idx, graphs[j].smiles, PARENT_ACROSS_SPLITS,
                                     f"{where[j]} row; its parent {parent} is also the parent of {rows}"))
    return notes


def _duplicates(canon: list[str], graphs: list, y: np.ndarray, target_cols: list[str], mode: str,
                split_of: list[str] | None = None) -> tuple[list[int], list[RowNote], list[InvalidRow]]:
    """Handle the rows that hold one molecule (equal canonical SMILES ``canon``, one per graph).

    Returns the positions of ``graphs`` to keep, a note for every row of a group whose labels
    conflict (spread above :data:`DUPLICATE_TOLERANCE` of the target's std over ``y [n, T]``), and
    the rows ``mode`` merged (``"average"``: the group's mean label goes to its first row, which
    ``y`` is updated in place for) or dropped (``"first"``).

    ``split_of`` (a split column's label per graph) keeps the splits apart: rows are merged only
    with rows of their own split, so no test label is averaged into a training row and no test
    row is dropped for a training one; a molecule in several splits gets a ``"duplicate across
    splits"`` note on each of its rows (the user's split puts it on both sides).
    """
    if mode not in DUPLICATES:
        raise ValueError(f"duplicates must be one of {DUPLICATES}, got {mode!r}")
    groups: dict[str, list[int]] = {}
    for j, c in enumerate(canon):
        groups.setdefault(c, []).append(j)
    with np.errstate(all="ignore"):
        tol = DUPLICATE_TOLERANCE * np.nan_to_num(np.nanstd(y, axis=0)) if len(y) else np.zeros(y.shape[1])
    drop, notes, merged = set(), [], []
    for members in groups.values():
        if len(members) < 2:
            continue
        rows = [graphs[j].idx for j in members]
        spread = _spread(y[rows])
        if np.any(spread > tol):
            text = ", ".join(f"{c} spread {v:.4g}" for c, v in zip(target_cols, spread) if v > tol[target_cols.index(c)])
            for j, r in zip(members, rows):
                others = ", ".join(str(o) for o in rows if o != r)
                notes.append(RowNote(r, graphs[j].smiles, "conflicting duplicate", f"same molecule as row(s) {others}; {text}"))
        parts: dict[str | None, list[int]] = {}
        for j in members:
            parts.setdefault(split_of[j] if split_of is not None else None, []).append(j)
        if len(parts) > 1:
            for j in members:
                elsewhere = "; ".join(f"{name}: row(s) {', '.join(str(graphs[k].idx) for k in part)}"
                                      for name, part in parts.items() if name != split_of[j])
                notes.append(RowNote(graphs[j].idx, graphs[j].smiles, CROSS_SPLIT,
                                     f"{split_of[j]} row; the same molecule is in {elsewhere}"))
        if mode == "keep":
            continue
        for part in parts.values():
            first = graphs[part[0]].idx
            if mode == "average" and len(part) > 1:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)  # an all-missing target of the group
                    y[first] = np.nanmean(y[[graphs[j].idx for j in part]], axis=0)
            for j in part[1:]:
                drop.add(j)
                reason = (f"{MERGED_INTO} {first} (--duplicates average)" if mode == "average"
                          else f"duplicate of row {first} (--duplicates first)")
                merged.append(InvalidRow(graphs[j].idx, graphs[j].smiles, reason))
    return [j for j in range(len(graphs)) if j not in drop], notes, merged


#: the issue of a row whose molecule a split column also puts into another split
CROSS_SPLIT = "duplicate across splits"


def _spread(labels: np.ndarray) -> np.ndarray:
    """Per target, the largest minus the smallest label of ``labels [n, T]`` (0 where missing)."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-missing target of the group
        return np.nan_to_num(np.nanmax(labels, axis=0) - np.nanmin(labels, axis=0))


def _draw_val(idx: dict[str, list[int]], canon: list[str], fraction: float, seed: int, path: Path,
              strata: Sequence | None = None) -> dict[str, list[int]]:
    """``idx`` with about ``fraction`` of its train rows (at least one) moved to val: whole
    molecules (equal ``canon``) in an order shuffled with ``seed``; with ``strata`` (a binary
    task's labels) that share of each stratum's rows, so that validation holds both classes (a
    molecule whose rows carry both labels counts in its first row's, and moves whole).

    Raises:
        DataError: a stratum (or all the train rows) with too few molecules to give val rows
            and keep train rows.
    """
    strata = [0] * len(canon) if strata is None else list(strata)
    groups: dict[str, list[int]] = {}
    for j in idx["train"]:
        groups.setdefault(canon[j], []).append(j)
    rng = np.random.default_rng(seed)
    val: set[int] = set()
    for stratum in sorted({strata[g[0]] for g in groups.values()}):  # a molecule's class: its first row's
        order = [g for g in groups.values() if strata[g[0]] == stratum]
        rows = [j for g in order for j in g]
        want, got = max(1, round(fraction * len(rows))), 0
        for g in rng.permutation(len(order)):
            if got >= want:
                break
            val.update(order[g])
            got += len(order[g])
        if got == len(rows):
            what = f"the training rows of class {stratum:g}" if len(set(strata)) > 1 else "the training rows"
            raise DataError(f"{path}: {what} hold {len(order)} distinct molecule(s); --val-fraction needs at least "
                            "2, one to train on and one to validate on")
    return {"train": [j for j in idx["train"] if j not in val], "val": sorted(val), "test": idx["test"]}


def load_csv(
    path: str | os.PathLike,
    smiles_col: str,
    target_cols: list[str],
    task: str,
    split: str = "scaffold",
    cache_dir=None,
    seed: int = 0,
    *,
    frac: Sequence[float] = (0.8, 0.1, 0.1),
    sep: str | None = ",",
    allow_unsanitized: bool = False,
    rebuild: bool = False,
    decimal: str = ".",
    duplicates: str = "keep",
    val_fraction: float = 0.0,
    fragments: str = "all",
    chirality: str = CSV_CHIRALITY,
) -> GraphDataset:
    """Load a CSV of SMILES and targets as a :class:`GraphDataset` (cached).

    Args:
        path: the CSV file (``.csv`` or compressed, e.g. ``.csv.gz``).
        smiles_col: column holding SMILES.
        target_cols: target column(s); empty cells (or NA/NaN/None) are missing labels.
        task: ``"regression"`` (metric MAE), ``"binary"`` (one 0/1 column, ROC-AUC)
            or ``"multilabel"`` (0/1 columns with missing labels allowed, AP).
        split: ``"scaffold"`` (deterministic Bemis-Murcko, largest scaffold groups to
            train), ``"scaffold_balanced"`` (large groups to train, the others in a fixed
            shuffled order: see :func:`~siggate.data.chem.split_by_groups`), ``"random"``
            (seeded) or ``"column:NAME"`` (column NAME says train/val/valid/test per row).
        cache_dir: cache root; defaults to :func:`default_cache_dir`.
        seed: seed of the random split and of the balanced scaffold order.
        frac: train/val/test fractions for the scaffold and random splits.
        sep: field delimiter; ``None`` detects it (:func:`detect_sep`; ``siggate train``
            passes ``None`` unless ``--sep`` is given).
        allow_unsanitized: keep molecules that only fail RDKit sanitization
            (partially sanitized) instead of reporting them as invalid rows.
        rebuild: ignore an existing cache file.
        decimal: the targets' decimal mark, ``"."`` or ``","`` (``-5,49``; ``--decimal``).
        duplicates: rows of one molecule (canonical SMILES): ``"keep"`` them (a warning
            when their labels conflict), ``"average"`` them into the first row (regression),
            or keep the ``"first"`` (see the module docstring).
        val_fraction: with ``split="column:NAME"`` whose column names no val row: this
            fraction of the train rows (at least one; whole molecules, drawn with ``seed``)
            becomes the val split (``--val-fraction``). A column with val rows is refused.
        fragments: what the model reads of a molecule: ``"all"`` of it, as written (counterions
            included), or its ``"parent"``, the largest carbon fragment neutralized, where it has
            one (:func:`~siggate.data.chem.read_molecule`, ``siggate predict``'s rule too). With
            ``"parent"`` a salt and its free base are one molecule (for the duplicates and the
            splits), and a graph's ``smiles`` is the parent's canonical SMILES (the notes and the
            dropped rows keep the SMILES as written).
        chirality: what the atoms' chirality feature holds (:data:`~siggate.data.base.ATOM_CHIRALITY`):
            ``"cip"`` (R/S, however the SMILES is written; every run since it was kept) or
            ``"tag"`` (RDKit's tag in the order written: runs recorded before, as their
            ``info.chirality`` says, so that ``siggate evaluate`` rebuilds their graphs as they were).

    Raises:
        ValueError: bad arguments. :class:`~siggate.data.base.DataError` (a
            ``ValueError``): an empty file, missing columns (the message lists the
            available columns and hints at a wrong delimiter), no data rows, a target
            column without a single number, numbers with a decimal comma while
            ``decimal="."``.
        FileNotFoundError: no such file.
    """
    path = Path(path)
    if sep is None:
        sep = detect_sep(path) if path.is_file() else ","
    target_cols = _check_arguments(path, smiles_col, target_cols, task, split, sep)
    if decimal not in (".", ","):
        raise ValueError(f"decimal must be '.' or ',', got {decimal!r}")
    if duplicates not in DUPLICATES:
        raise ValueError(f"duplicates must be one of {DUPLICATES}, got {duplicates!r}")
    if fragments not in FRAGMENTS:
        raise ValueError(f"fragments must be one of {FRAGMENTS}, got {fragments!r}")
    if not 0.0 <= float(val_fraction) < 1.0 or (val_fraction and _parse_split(split) is None):
        raise ValueError(f"val_fraction must be in [0, 1) and needs split='column:NAME', got {val_fraction!r} "
                         f"with split {split!r}")
    if duplicates == "average" and task != "regression":
        raise ValueError(f"duplicates='average' merges regression labels into their mean; a {task} label has "
                         "no mean, use 'first' or 'keep'")
    cache_dir = cache_root(cache_dir)
    parts = {
        "dataset": "csv",
        "path": str(path.resolve()),
        "source_sha256": fingerprint_file(path),
        "smiles_col": smiles_col,
        "target_cols": target_cols,
        "task": task,
        "split": split,
        "seed": int(seed),
        "frac": [float(f) for f in frac],
        "sep": sep,
        "allow_unsanitized": bool(allow_unsanitized),
        "decimal": decimal,
        "duplicates": duplicates,
        "val_fraction": float(val_fraction),
        "fragments": fragments,
        "chirality": chirality,
        "notes": 5,  # the datasets carry their row notes (2: fragments and parents across splits; 3: a labelled
        # parent is its unlabelled molecule's; 4: censored labels and other units; 5: the reasons of an empty row
        # and of the header again) and row count
        "version": CSV_VERSION,
    }
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", path.name.split(".")[0]) or "data"
    folder = f"csv/{stem}"
    ds = cached(
        cache_dir,
        folder,
        parts,
        lambda: build_csv(
            path, smiles_col, target_cols, task, split, seed, frac=frac, sep=sep,
            allow_unsanitized=allow_unsanitized, decimal=decimal, duplicates=duplicates, val_fraction=val_fraction,
            fragments=fragments, chirality=chirality,
        ),
        save=save_dataset,
        load=load_dataset,
        rebuild=rebuild,
    )
    _report(path, ds, fresh=cached.last_hit is False)
    return ds


def check_columns(path: str | os.PathLike, smiles_col: str, target_cols, task: str, split: str | None = None,
                  sep: str | None = None) -> None:
    """What :func:`load_csv` checks first: the file is there and its header names the columns,
    once each. For a caller that must refuse before it changes anything
    (``siggate train --overwrite`` clears the earlier run only after this).

    Raises:
        DataError, FileNotFoundError, ValueError: as :func:`load_csv`.
    """
    path = Path(path)
    sep = sep or (detect_sep(path) if path.is_file() else ",")
    _check_arguments(path, smiles_col, target_cols, task, split or "scaffold", sep)


def check_smiles_apart(smiles_col: str, target_cols) -> None:
    """Refuse (:class:`DataError`) one column named as both the SMILES column and a target: every
    row was then read as an invalid molecule, or as a label that is no number."""
    if smiles_col in list(target_cols):
        raise DataError(f"column {smiles_col!r} is named as both the SMILES column and a target: a column holds the "
                        "molecules or a label; name the SMILES column with --smiles-col and the labels with "
                        "--target-col")


def _check_arguments(path: Path, smiles_col: str, target_cols, task: str, split: str, sep: str) -> list[str]:
    """Check :func:`load_csv`'s arguments and the file's header; returns the target columns
    as a list of strings.  Raises ``ValueError`` / ``FileNotFoundError`` as documented there."""
    if isinstance(target_cols, str):
        target_cols = [target_cols]
    target_cols = [str(c) for c in target_cols]
    if task not in TASK_TYPES:
        raise ValueError(f"task must be one of {TASK_TYPES}, got {task!r}")
    if not target_cols:
        raise ValueError("target_cols: name at least one target column")
    if len(set(target_cols)) != len(target_cols):
        raise ValueError(f"target_cols has repeated columns: {target_cols}")
    check_smiles_apart(smiles_col, target_cols)
    if task == "binary" and len(target_cols) != 1:
        raise ValueError(
            f"task 'binary' takes exactly one target column, got {len(target_cols)}; use task='multilabel'"
        )
    split_col = _parse_split(split)
    if not path.is_file():
        raise FileNotFoundError(f"CSV file not found: {path}" + (" (it is a folder)" if path.is_dir() else "")
                                if not path.exists() or path.is_dir() else f"{path} is {NOT_A_FILE}")
    columns = _read_header(path, sep)
    wanted = [("SMILES", smiles_col)] + [("target", c) for c in target_cols]
    if split_col:
        wanted.append(("split", split_col))
    _check_columns(path, columns, wanted, sep)
    check_unique_columns(path, columns, [c for _, c in wanted])
    return target_cols


def _report(path: Path, ds: GraphDataset, fresh: bool) -> None:
    """Log the dropped rows by kind (the list written next to the cache file), conflicting
    duplicates, large molecules and a 0/1 regression target: warnings when the dataset was
    freshly built or when the data itself is suspicious. (An empty split is
    :func:`check_trainable`'s to refuse: a warning before its error said it twice.)"""
    log_path = None
    if ds.invalid:
        try:
            log_path = write_invalid_rows(Path(cached.last_path).with_suffix(".invalid.csv"), ds.invalid)
        except OSError as exc:
            logger.warning("%s: could not write the invalid-row log: %s", path, exc)
    name = path.name
    if ds.invalid:
        kinds: dict[str, int] = {}
        for r in ds.invalid:
            kinds[row_issue(r.reason)] = kinds.get(row_issue(r.reason), 0) + 1
        total = ds.rows or sum(ds.sizes().values()) + len(ds.invalid)
        examples = "; ".join(f"line {r.file_line} {r.smiles!r}: {r.reason}" for r in ds.invalid[:3])
        more = f" (+{len(ds.invalid) - 3} more)" if len(ds.invalid) > 3 else ""
        where = f"; full list in {log_path}" if log_path else ""
        logger.log(logging.WARNING if fresh else logging.INFO, "%s: skipped %d of %d rows (%s): %s%s%s", name,
                   len(ds.invalid), total, ", ".join(f"{n} {k}" for k, n in kinds.items()), examples, more, where)
    _warn_notes(name, ds)
    train, held = _labels(ds, ["train"]), _labels(ds, ["val", "test"])  # (stacked once for both checks)
    _warn_training_labels(name, ds, train, held)
    if ds.info.task == "regression":
        y = np.concatenate([train, held])
        for t, col in enumerate(ds.info.target_names):
            v = y[~np.isnan(y[:, t]), t]
            if v.size and np.all((v == 0) | (v == 1)) and np.any(v == 0) and np.any(v == 1):
                task = "binary" if ds.info.num_tasks == 1 else "multilabel"
                logger.warning("%s: target column %r holds only 0 and 1, and is trained as regression (MAE); if it "
                               "is a class label, pass --task %s (data.task)", name, col, task)
            elif v.size >= 10 and np.all(v > 0):
                from scipy.stats import skew

                low, high = np.percentile(v, [5, 95])
                if high >= LOG_SCALE_SPAN * low and abs(skew(np.log(v))) < abs(skew(v)):
                    logger.warning("%s: target column %r spans %.1f orders of magnitude (5th to 95th percentile: %.3g "
                                   "to %.3g), all positive: a potency, concentration or solubility is modelled on its "
                                   "logarithm, else its largest values decide the loss and the scores; to train on "
                                   "that, give a column of its log10 (pIC50 = 9 - log10(IC50 in nM))", name, col,
                                   math.log10(high / low), low, high)


def _warn_training_labels(name: str, ds: GraphDataset, train: np.ndarray, held: np.ndarray) -> None:
    """Warn about each target that the training rows give nothing to learn from where the file does:
    no label among them, or one value (one class) in all of them. A GNN then learns noise or a
    constant, a fingerprint member a constant, refit on the train and val rows (a test R2 of -29
    passed without a word); a GNN's untrained multilabel output drew confident conformal sets. A
    multilabel panel may hold such an assay: warned, not refused (a member that cannot learn it
    refuses it before any member trains). ``train``, ``held``: the labels of the train rows and
    of the val and test rows (:func:`_labels`)."""
    if ds.info.task == "multiclass" or not len(ds.train):
        return
    for t, target in enumerate(ds.info.target_names):
        col, other = train[~np.isnan(train[:, t]), t], held[~np.isnan(held[:, t]), t]
        if not col.size and other.size:
            what = f"no label among the {len(train)} training rows ({other.size} in val and test)"
        elif col.size and np.all(col == col[0]) and np.any(other != col[0]):
            what = (f"{f'only class {col[0]:g}' if ds.info.task != 'regression' else f'the same value ({col[0]:g})'} "
                    f"in all {col.size} labelled training rows (val or test rows differ)")
        else:
            continue
        logger.warning("%s: target %r has %s, so no model learns it from them: its predictions are a constant or an "
                       "untrained output's, and its scores are not a model's; a random split (another seed draws "
                       "another) puts labels of it into training, or leave it out", name, target, what)


def _warn_notes(name: str, ds: GraphDataset) -> None:
    """One warning per kind of :attr:`GraphDataset.notes` (conflicting duplicates, duplicates across a
    split column, several fragments, parents across splits, large molecules)."""
    groups: dict[frozenset, float] = {}  # rows of one molecule -> its largest label spread
    for n in ds.notes:
        if n.issue == "conflicting duplicate":
            same, _, spread = n.detail.partition(";")
            rows = frozenset([n.index, *map(int, re.findall(r"\d+", same))])
            groups[rows] = max(float(v) for v in re.findall(r"spread ([0-9.eE+-]+)", spread))
    handled = [r for r in ds.invalid if row_issue(r.reason) == "duplicate"]
    if groups and handled:
        logger.info("%s: %s in several rows with labels that differ; %s merged or dropped (--duplicates)", name,
                    counted(len(groups), "molecule appears", "molecules appear"),
                    counted(len(handled), "row was", "rows were"))
    elif groups:
        spreads = list(groups.values())
        average = ("--duplicates average to merge each into its mean, or " if ds.info.task == "regression"
                   else "")  # a class label has no mean: average is refused for it
        logger.warning("%s: %s in several rows (%d rows) with labels that differ by more than %g "
                       "of the target's std (spread up to %.4g, median %.4g); kept as separate rows: pass "
                       "%s--duplicates first to keep the first row (data_report.csv in the run folder lists them)",
                       name, counted(len(groups), "molecule appears", "molecules appear"), sum(len(g) for g in groups),
                       DUPLICATE_TOLERANCE, max(spreads),
                       float(np.median(spreads)), average)
    cross = [n for n in ds.notes if n.issue == CROSS_SPLIT]
    if cross:
        logger.warning("%s: %s a molecule that the split column also puts into another split (first: row "
                       "%d, %s; %s), so its val/test scores are optimistic; rows are merged (--duplicates) only within "
                       "a split. Give each molecule one split (data_report.csv lists them)", name,
                       counted(len(cross), "row holds", "rows hold"),
                       cross[0].index, cross[0].smiles, cross[0].detail)
    salts = [n for n in ds.notes if n.issue == SEVERAL_FRAGMENTS]
    whole = [n for n in salts if READ_AS_WRITTEN in n.detail]
    read = len(salts) - len(whole) if whole or (salts and READ_AS_PARENT in salts[0].detail) else 0
    if read:  # --fragments parent
        logger.log(logging.WARNING if whole else logging.INFO, "%s: %s (--fragments parent)%s", name,
                   counted(read, "row of several fragments (salts or mixtures) is read as its parent",
                           "rows of several fragments (salts or mixtures) are read as their parent"),
                   f"; {counted(len(whole), 'has', 'have')} none ({NO_PARENT}; first: row {whole[0].index}, "
                   f"{whole[0].smiles}) and {'trains' if len(whole) == 1 else 'train'} as written, counterions "
                   "included" if whole else "")
    elif whole:  # --fragments parent, and no row has a parent (not "0 rows ... are read as their parent")
        one = len(whole) == 1
        logger.warning("%s: %s of several fragments (salts or mixtures) %s %s (first: row %d, %s), so --fragments "
                       "parent reads %s as written: %s with %s counterions", name, counted(len(whole), "row"),
                       "has" if one else "have", NO_PARENT, whole[0].index, whole[0].smiles, "it" if one else "them",
                       "it trains" if one else "they train", "its" if one else "their")
    elif salts:
        logger.warning("%s: %s molecules of several fragments (salts or mixtures; first: row %d, %s): each trains "
                       "as one graph and one fingerprint, counterions included, and siggate predict reads them the "
                       "same way; if the property is the parent's, pass --fragments parent (data.fragments: the "
                       "largest carbon fragment, neutralized; data_report.csv lists them)", name,
                       counted(len(salts), "row holds", "rows hold"), salts[0].index,
                       salts[0].smiles)
    parents = [n for n in ds.notes if n.issue == PARENT_ACROSS_SPLITS]
    if parents:
        logger.warning("%s: %s (largest carbon fragment, neutralized) with another molecule in another "
                       "split (first: row %d, %s; %s), e.g. a salt and its free base, so the val/test scores are "
                       "optimistic; pass --fragments parent to read each molecule as its parent, which keeps them in "
                       "one split (a split column's rows stay where it puts them; data_report.csv lists them)",
                       name, counted(len(parents), "row shares its parent", "rows share their parent"), parents[0].index,
                       parents[0].smiles, parents[0].detail)
    censored = [n for n in ds.notes if n.issue == CENSORED_LABEL]
    if censored:
        column = censored[0].detail.split(" is ")[0]
        logger.warning("%s: %s censored (%s says '<' or '>'; first: row %d, %s): each label is a "
                       "bound, not a measurement, and trains as if it were one; keep the rows whose relation is '=' "
                       "(ChEMBL's pChEMBL Value is given for those only; data_report.csv lists them)", name,
                       counted(len(censored), "labelled row is", "labelled rows are"), column, censored[0].index,
                       censored[0].detail.split(":")[0])
    other = [n for n in ds.notes if n.issue == OTHER_UNIT]
    if other:
        column, _, rest = other[0].detail.partition(" is ")
        common = rest.split(", not ")[1].split(" as in ")[0]
        units = sorted({n.detail.split(" is ")[1].split(",")[0] for n in other})
        shown = ", ".join(units[:5]) + (f" and {len(units) - 5} more" if len(units) > 5 else "")
        logger.warning("%s: %s in another unit than %s (%s: %s): one number scale "
                       "mixes units, so those labels are off by their units' ratio; convert them or keep one unit's "
                       "rows (data_report.csv lists them)", name,
                       counted(len(other), "labelled row gives its label", "labelled rows give their label"), common,
                       column, shown)
    large = [n for n in ds.notes if n.issue == "large molecule"]
    if large:
        sizes = [int(n.detail.split()[0]) for n in large]
        logger.warning("%s: %d molecules have more than %d atoms (largest %d): they train, but siggate predict "
                       "refuses them unless --max-atoms is raised, and they enlarge the mean size that pooling "
                       "'norm' divides by; drop them if they are not what the model is for", name, len(large),
                       PREDICT_MAX_ATOMS, max(sizes))


#: the columns a run's row tables write themselves; an input column of one of these names is
#: carried as ``input_<name>``
_OWN_COLUMNS = ("row", "smiles", "split", "reason", "issue", "detail")


def carried_columns(ds: GraphDataset, sep: str | None, smiles_col: str, split: str | None = None
                    ) -> tuple[list[str], dict[int, list[str]]]:
    """The input's columns other than the SMILES, the targets and a split column, as the run's
    row tables carry them (IDs, names, notes): ``(names, {row: values})``, re-read from
    ``ds.source`` (delimiter ``sep``, detected when None), leaving out unnamed columns of no value
    (an Excel export's trailing ``,,,``). Names that a table writes itself (``row``, ``smiles``,
    ``split``, ...) or that repeat get the prefix ``input_``. Empty, with a
    warning, when the file is gone or no longer has the dataset's rows."""
    if not ds.source:  # a dataset built in memory: no file to carry columns from
        return [], {}
    path = Path(ds.source)
    try:
        header, records = read_table(path, sep or detect_sep(path))
    except (OSError, DataError) as exc:
        logger.warning("%s: cannot read it again for its other columns (%s); the run's row tables hold none", path, exc)
        return [], {}
    if ds.rows and len(records) != ds.rows:
        logger.warning("%s: it has %d data rows now, %d at loading; the run's row tables hold none of its other "
                       "columns", path, len(records), ds.rows)
        return [], {}
    skip = {smiles_col, *ds.info.target_names, *([_parse_split(split)] if split and _parse_split(split) else [])}
    def blank(i: int) -> bool:  # an unnamed column of no value: Excel's trailing empty columns (",,,")
        return not header[i].strip() and all(i >= len(rec) or not rec[i].strip() for rec in records)

    keep = [i for i, c in enumerate(header) if c not in skip and not blank(i)]
    names, seen = [], set(_OWN_COLUMNS) | set(ds.info.target_names)
    for i in keep:
        name = header[i] if header[i] not in seen else f"input_{header[i]}"
        while name in seen:
            name = f"input_{name}"
        seen.add(name)
        names.append(name)
    return names, {r: [rec[i] if i < len(rec) else "" for i in keep] for r, rec in enumerate(records)}


def canonical_smiles(smiles: str) -> str | None:
    """The key of the molecule ``smiles`` as training keys it (:func:`_canonical`: RDKit's
    canonical SMILES, stereo kept, heavy atoms' isotope labels dropped), ``None`` for text RDKit
    cannot read."""
    from rdkit import Chem

    from .chem import quiet_rdkit

    with quiet_rdkit():
        mol = Chem.MolFromSmiles(smiles)
    return None if mol is None else _canonical(mol, smiles)


def _rdkit_version() -> str:
    from rdkit import rdBase

    return rdBase.rdkitVersion


def _fitted_keys(smiles: Iterable[str]) -> list[str]:
    """The sorted canonical SMILES (:func:`canonical_smiles`) of ``smiles``, those RDKit reads."""
    return sorted({k for k in map(canonical_smiles, smiles) if k})


def fitted_molecules(run: str | os.PathLike) -> set[str] | None:
    """The canonical SMILES of the molecules a run fitted, its train and val rows (the val rows
    choose its epoch and weights, and fingerprint members refit on them), from its ``splits.csv``
    (:func:`write_run_tables`); ``None`` for a run folder without one. The keys training wrote
    (:data:`FITTED_FILE`) are taken when they are those of this ``splits.csv`` under this RDKit
    (its canonical SMILES may change between versions) and this CSV reading (siggate's key may);
    otherwise, as for a run made before them, each molecule is keyed again (about 0.3 ms each)."""
    path = Path(run) / "splits.csv"
    if not path.is_file():
        return None
    text = path.read_bytes()
    try:
        kept = json.loads((Path(run) / FITTED_FILE).read_text(encoding="utf-8"))
        keys = kept["molecules"]
        if (kept["splits_sha256"] == hashlib.sha256(text).hexdigest() and kept["rdkit"] == _rdkit_version()
                and kept.get("reading") == CSV_VERSION and isinstance(keys, list) and all(isinstance(k, str) for k in keys)):
            return set(keys)
    except (OSError, ValueError, KeyError, TypeError):  # none, or not one this code wrote: keyed again
        pass
    rows = csv.DictReader(io.StringIO(text.decode("utf-8"), newline=""))
    return set(_fitted_keys(r["smiles"] for r in rows if r.get("split") in ("train", "val")))


def write_run_tables(ds: GraphDataset, out: str | os.PathLike,
                     carried: tuple[list[str], dict[int, list[str]]] | None = None) -> list[Path]:
    """Write ``splits.csv`` and ``data_report.csv`` of a CSV dataset into the run folder ``out``.

    ``splits.csv``: one row per input row (``row`` is the 0-based data row, blank lines not
    counted: line ``row + 2`` of a file without them), ``row,smiles,<carried columns>,split,reason``: the input's ``carried`` columns
    (:func:`carried_columns`, e.g. IDs), the split (``train``/``val``/``test``), or ``dropped``
    and why. ``data_report.csv``: ``row,smiles,issue,detail`` for every dropped row (issue from
    :func:`row_issue`) and every note (conflicting duplicates, duplicates across splits, several
    fragments, parents across splits, large molecules), in row order. :data:`FITTED_FILE`: the
    keys of the train and val molecules, so that ``evaluate`` need not key them again
    (:func:`fitted_molecules`). Returns the paths written.
    """
    out = Path(out)
    extra, values = carried or ([], {})
    table = {g.idx: [g.idx, g.smiles, split, ""] for split, graphs in ds.splits.items() for g in graphs}
    table.update({r.index: [r.index, r.read_as or r.smiles, "dropped", r.reason] for r in ds.invalid})  # (as read)
    table = {k: v[:2] + values.get(k, [""] * len(extra)) + v[2:] for k, v in table.items()}
    report = [[r.index, r.smiles, row_issue(r.reason), r.reason] for r in ds.invalid]
    report += [[n.index, n.smiles, n.issue, n.detail] for n in ds.notes]
    report.sort(key=lambda r: r[0])
    paths = []
    for name, header, rows in (("splits.csv", ["row", "smiles", *extra, "split", "reason"],
                                [table[k] for k in sorted(table)]),
                               ("data_report.csv", ["row", "smiles", "issue", "detail"], report)):
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(header)
        w.writerows(rows)
        atomic_write_bytes(out / name, buf.getvalue().encode("utf-8"))
        paths.append(out / name)
    fitted = {"splits_sha256": hashlib.sha256(paths[0].read_bytes()).hexdigest(), "rdkit": _rdkit_version(),
              "reading": CSV_VERSION,  # (the keys are siggate's canonical SMILES of this reading)
              "molecules": _fitted_keys(g.smiles for s in ("train", "val") for g in ds.splits.get(s, []))}
    atomic_write_bytes(out / FITTED_FILE, json.dumps(fitted).encode("utf-8"))
    return paths + [out / FITTED_FILE]
