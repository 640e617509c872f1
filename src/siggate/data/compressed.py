"""Compressed input files, read as every reader of siggate reads them: the compression told by a
file's first bytes (gzip, bzip2, xz, a zip archive of one file), never by its name; what the file
holds (``.csv``, ``.smi``) told by its name under the compression's suffix; and the one set of
errors that a damaged compressed file raises while it is read.

``train --data`` (:mod:`.csvdata`), ``predict``/``explain`` and ``pretrain``'s corpus
(:mod:`.corpus`) all open their files here, so they tell the same compressions the same way (what a
file holds is each reader's own question: ``train --data`` reads every file as a CSV).
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import zipfile
import zlib
from pathlib import Path
from typing import IO

from .base import DataError

__all__ = ["DAMAGED", "SAVE_AS_CSV", "compression", "inner_suffix", "zip_member", "open_decompressed"]

#: what reading a damaged compressed file raises (gzip, bzip2, xz, zip), at its opening or later
DAMAGED = (OSError, EOFError, zlib.error, lzma.LZMAError, zipfile.BadZipFile)
#: the fix named for every file that is not UTF-8 CSV text
SAVE_AS_CSV = "save it as UTF-8 CSV (in Excel: File > Save As > 'CSV UTF-8 (Comma delimited)')"
#: the names of the compressions read, dropped from a file's name to find what it holds
_SUFFIXES = (".gz", ".bz2", ".xz", ".zip")
_MAGIC = ((b"\x1f\x8b", gzip), (b"BZh", bz2), (b"\xfd7zXZ\x00", lzma), (b"PK\x03\x04", zipfile))


def compression(head: bytes):
    """The module that reads a file starting with the bytes ``head`` (its first 6 or more):
    ``gzip``, ``bz2``, ``lzma`` (xz), ``zipfile``, or None for a file that is not compressed."""
    return next((module for magic, module in _MAGIC if head.startswith(magic)), None)


def inner_suffix(path: Path) -> str:
    """The suffix that says what a file holds (``.csv``, ``.smi``, ...) under its compression's,
    lower case: ``in.csv.bz2`` is a CSV; ``""`` for a name without one (``lib.zip``: then the
    zip's own file names it, or the reader judges by the content)."""
    suffixes = [x.lower() for x in Path(path).suffixes]
    while suffixes and suffixes[-1] in _SUFFIXES:
        suffixes.pop()
    return suffixes[-1] if suffixes else ""


def zip_member(archive: zipfile.ZipFile, path: Path) -> str:
    """The name of the one file of the zip ``archive`` (read from ``path``). Raises
    :class:`DataError` naming the fix for an Excel or OpenDocument workbook, a PyTorch checkpoint
    and an archive of other than one file."""
    names = archive.namelist()
    if any(n.startswith("xl/") for n in names):
        raise DataError(f"{path} is an Excel workbook (.xlsx), not a CSV file; {SAVE_AS_CSV}")
    if "content.xml" in names:
        raise DataError(f"{path} is an OpenDocument spreadsheet, not a CSV file; {SAVE_AS_CSV}")
    if any(n.endswith("/data.pkl") or n == "data.pkl" for n in names):
        raise DataError(f"{path} is a PyTorch checkpoint (a model, e.g. a run's best.pt), not a CSV "
                        "file; give the CSV of SMILES and labels")
    files = [n for n in names if not n.endswith("/") and not _mac_metadata(n)]
    if len(files) != 1:
        shown = ", ".join(files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
        raise DataError(f"{path} is a zip archive of {len(files)} files{f' ({shown})' if files else ''}; unzip it and "
                        "give the one file to read")
    return files[0]


def _mac_metadata(name: str) -> bool:
    """Whether the zip entry ``name`` is what macOS's Finder adds beside a compressed file: its
    resource fork (``__MACOSX/._data.csv``, or ``._data.csv``) or a ``.DS_Store``, not a file of the user's."""
    base = name.rsplit("/", 1)[-1]
    return name.startswith("__MACOSX/") or base.startswith("._") or base == ".DS_Store"


def open_decompressed(path: Path, module="detect") -> IO[bytes]:
    """``path`` opened for reading its bytes, decompressed where it is compressed (``module``:
    :func:`compression` of its first bytes, told here unless the caller has them). Raises
    :class:`DataError` for a zip that is not one file (:func:`zip_member`), one of :data:`DAMAGED`
    for an archive too damaged to open (a gzip, bzip2 or xz stream raises it while it is read)."""
    if module == "detect":
        with open(path, "rb") as fh:
            module = compression(fh.read(6))
    if module is zipfile:
        with zipfile.ZipFile(path) as archive:  # its member holds the file open until it is closed
            return archive.open(zip_member(archive, path))
    return module.open(path, "rb") if module else open(path, "rb")
