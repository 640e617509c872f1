"""SD files (MDL molfile records, each ended by a ``$$$$`` line) read as tables.

Chemists get molecules as SD files from vendors, docking and registration systems, with their
properties as data items (``> <pIC50>`` and the value below it). :func:`sd_table` turns the
records into the rows of a table, as a CSV would give them: a ``smiles`` column (RDKit's
canonical SMILES of the record's molecule, its stereo taken from the molfile's wedges or 3D
coordinates), a ``name`` column (the molfile's title line, where a record has one and no data
item is called ``name``), then one column per data item in the order they first appear (a
record without an item has an empty cell; an item called ``smiles`` is ``input_smiles``, or
``input_input_smiles`` beside an item of that name).
``train --data``, ``evaluate --data``, ``predict --input``, ``explain --input`` and ``pretrain
--smiles`` read SD files through it.

A record RDKit cannot sanitize keeps its SMILES as written unsanitized, so that the reader that
parses it names the cause (an atom's valence, an aromatic ring) for its row; one RDKit cannot
read at all gets a text that names it (:data:`~siggate.data.chem.UNREADABLE_MOLFILE`), refused
by its reason.
"""

from __future__ import annotations

import re
from typing import Iterable

from .chem import UNREADABLE_MOLFILE

#: an SD file's start: a molfile's three header lines, then its counts line (``V2000``/``V3000``
#: at columns 34-39 of a line of at least 33 characters before it)
MOLFILE = re.compile(rb"(?:[^\n]*\n){3}.{33,39}V[23]000[ \t]*\r?(?:\n|$)")
#: the same with an older counts line that names no version (its atom and bond counts, right-aligned
#: in three columns each, first), told by the atom line after it (three coordinates and an element)
#: or, for no atoms, the ``M  END`` line (RDKit reads such a molfile); within a reader's first bytes,
#: however large the first molecule
OLD_MOLFILE = re.compile(rb"(?:[^\n]*\n){3}[ \d]{2}\d[ \d]{2}\d[ \d]*\r?\n"
                         rb"(?:[ \t]*-?\d+\.\d+[ \t]+-?\d+\.\d+[ \t]+-?\d+\.\d+[ \t]+[A-Za-z*]|M  END)")
#: the column of the molecules' SMILES, and the column of their titles
SMILES, NAME = "smiles", "name"
_ITEM = re.compile(r"^>.*?<([^>]*)>")


def is_sd(head: bytes) -> bool:
    """Whether a file whose (decompressed) bytes begin with ``head`` is an SD file (or a molfile)."""
    return bool(MOLFILE.match(head) or OLD_MOLFILE.match(head))


def _records(lines: Iterable[str]) -> Iterable[tuple[int, list[str]]]:
    """``(first line number, lines)`` of each record (without its ``$$$$`` line; a last record
    without one too), line ends dropped; records of blank lines only are skipped."""
    start, block = 1, []
    for number, line in enumerate(lines, start=1):
        line = line.rstrip("\r\n")
        if line.strip() == "$$$$":
            if any(s.strip() for s in block):
                yield start, block
            start, block = number + 1, []
        else:
            block.append(line)
    if any(s.strip() for s in block):
        yield start, block


def _smiles(molblock: str, start: int, ended: bool) -> str:
    """The SMILES of a molfile: RDKit's canonical SMILES, unsanitized where it cannot sanitize
    the molecule (the SMILES reader then names why),
    :data:`~siggate.data.chem.UNREADABLE_MOLFILE` and why where it cannot read it, or where the
    molecule has no atoms; ``ended``: whether the molfile has its ``M  END`` line."""
    from rdkit import Chem

    from .chem import quiet_rdkit

    unreadable = f"{UNREADABLE_MOLFILE} {start}: {{}}>"
    if not ended:  # (RDKit reads none without it)
        return unreadable.format("it has no 'M  END' line after its atom and bond blocks")
    with quiet_rdkit():
        mol = Chem.MolFromMolBlock(molblock)
        if mol is None:
            mol = Chem.MolFromMolBlock(molblock, sanitize=False, removeHs=False)
        if mol is not None and not mol.GetNumAtoms():  # (a record that holds only data: a structure left out)
            return unreadable.format("its molecule has no atoms")
        try:
            return Chem.MolToSmiles(mol) if mol is not None else unreadable.format(MALFORMED)
        except Exception:  # (an unsanitized molecule RDKit cannot write)
            return unreadable.format(MALFORMED)


#: why RDKit read no molecule from a molfile with its ``M  END`` line
MALFORMED = "its counts line, atom or bond block is malformed"


def kept_sd_table(path: str, size: int, mtime_ns: int) -> tuple[list[str], list[list[str]], list[int]] | None:
    """The table :func:`sd_file_table` kept for the SD file ``path`` as it is (``size``,
    ``mtime_ns``), None when it kept none: a command reads its file several times (its header,
    its rows, its other columns), and the file is then neither read nor decoded again."""
    return _KEPT["table"] if _KEPT.get("key") == (path, size, mtime_ns) else None


def sd_file_table(path: str, size: int, mtime_ns: int, text: str) -> tuple[list[str], list[list[str]], list[int]]:
    """:func:`sd_table` of the SD file ``path`` (its decoded ``text``), kept for the file as it is
    (``size``, ``mtime_ns``; the last file read, :func:`kept_sd_table`), so that RDKit reads each
    molfile once."""
    kept = kept_sd_table(path, size, mtime_ns)
    if kept is None:
        _KEPT.clear()
        kept = sd_table(text.split("\n"))  # (not splitlines: a form feed in a title)
        _KEPT.update(key=(path, size, mtime_ns), table=kept)
    return kept


#: the table of the SD file :func:`sd_file_table` read last, and its key
_KEPT: dict = {}


def sd_table(lines: Iterable[str]) -> tuple[list[str], list[list[str]], list[int]]:
    """The table of an SD file's ``lines`` (text, with or without line ends): ``(header, rows,
    starts)``, ``starts[i]`` the line on which row ``i``'s record begins (see the module)."""
    rows: list[tuple[str, str, dict[str, str]]] = []
    starts: list[int] = []
    items: dict[str, None] = {}
    for start, block in _records(lines):
        end = next((i for i, line in enumerate(block) if line.startswith("M  END")), None)
        ended = end is not None  # (without it, the molfile ends before the first data item)
        if not ended:
            end = next((i - 1 for i, line in enumerate(block) if i > 3 and _ITEM.match(line)), len(block) - 1)
        values: dict[str, str] = {}
        name, value = None, []
        for line in block[end + 1:] + [""]:
            found = _ITEM.match(line)
            if found:
                if name is not None:  # (the item before it ended without its blank line)
                    values.setdefault(name, "\n".join(value))
                    items.setdefault(name)
                name, value = found.group(1).strip(), []
            elif name is not None and line.strip():
                value.append(line.strip())
            elif name is not None:  # a blank line ends the item's value
                values.setdefault(name, "\n".join(value))
                items.setdefault(name)
                name = None
        rows.append((_smiles("\n".join(block[:end + 1]) + "\n", start, ended), block[0].strip(), values))
        starts.append(start)
    titled = NAME not in items and any(title for _, title, _ in rows)
    columns = list(items)
    renamed, taken = {}, set(columns)
    if SMILES in items:  # (an item called input_smiles too: input_input_smiles)
        renamed[SMILES] = next(n for n in (f"{'input_' * k}{SMILES}" for k in range(1, len(columns) + 2)) if n not in taken)
    header = [SMILES, *([NAME] if titled else []), *(renamed.get(c, c) for c in columns)]
    table = [[smiles, *([title] if titled else []), *(values.get(c, "") for c in columns)]
             for smiles, title, values in rows]
    return header, table, starts
