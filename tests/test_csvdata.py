"""siggate.data.csvdata.load_csv on small CSV files written by the tests."""

from __future__ import annotations

import csv
import math
import shutil

import pytest
import torch
from ogb.utils import smiles2graph
from rdkit import Chem
from rdkit.Chem.Scaffolds import MurckoScaffold

from siggate.data.cache import cached
from siggate.data.csvdata import load_csv

GOOD = [
    "CCO",
    "c1ccccc1O",
    "CC(=O)Nc1ccc(O)cc1",
    "c1ccccc1C",
    "C1CCCCC1O",
    "c1ccncc1",
    "CCN(CC)CC",
    "c1ccccc1N",
    "C1CCCCC1N",
    "OCC(O)CO",
    "c1ccc2ccccc2c1",
    "CC(C)Cc1ccc(cc1)C(C)C(=O)O",
]

ROWS = [
    # smiles, y1, y2, fold
    (GOOD[0], "1.5", "0", "train"),
    ("C1CC(", "2.0", "1", "train"),  # 1: parse error
    (GOOD[1], "-0.5", "", "train"),
    ("", "1.0", "1", "val"),  # 3: empty SMILES
    (GOOD[2], "3.25", "1", "train"),
    ("C[N](C)(C)(C)C", "0.1", "0", "test"),  # 5: valence
    (GOOD[3], "abc", "1", "train"),  # 6: non-numeric target
    (GOOD[4], "", "", "train"),  # 7: no target at all (dropped, for multilabel too since CSV_VERSION 8)
    (GOOD[5], "0.75", "0", "valid"),
    (GOOD[6], "2.5", "1", "test"),
    (GOOD[7], "1e-1", "0", "train"),
    (GOOD[8], "NaN", "1", "train"),  # y1 missing, y2 present
    (GOOD[9], "-1", "0", "Train "),
    (GOOD[10], "4.0", "1", "test"),
    (GOOD[11], "0.0", "0", "VAL"),
]


@pytest.fixture
def csv_file(tmp_path):
    path = tmp_path / "mols.csv"
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["smiles", "y1", "y2", "fold", "comment"])
        for s, a, b, f in ROWS:
            w.writerow([s, a, b, f, "x, y"])
    return path


def _all(ds):
    return [g for k in ("train", "val", "test") for g in ds.splits[k]]


def test_a_row_of_empty_fields_and_the_header_again_are_named_as_such(tmp_path):
    """A spreadsheet's formatted blank rows (``,,``) were counted and listed as "missing target",
    sending the user to look for molecules without a label, and a second file's header (``cat a.csv
    b.csv``) as a SMILES 'smiles' whose label 'y' is no number. Rows whose every field is empty (or
    spaces) are an ``empty row``, the header's names again (in any case) the ``header again``; a row
    with an ID and nothing else still misses its target and molecule."""
    from siggate.data.csvdata import EMPTY_ROW, HEADER_AGAIN, HEADER_REORDERED, row_issue

    path = tmp_path / "blank.csv"
    path.write_text("smiles,y,id\n" + "".join(f"{s},{i},m{i}\n" for i, s in enumerate(GOOD))
                    + ",,\n , ,\n,,m99\nSMILES, y,id\n"  # (a second file's header, joined by cat)
                    + "\ufeffsmiles,y,id\ny,smiles,id\nsmiles,y,id,\n")  # (Excel's BOM; another order; a delimiter)
    ds = load_csv(path, "smiles", ["y"], "regression", split="random", cache_dir=tmp_path / "c")
    n = len(GOOD)
    assert {r.index: r.reason for r in ds.invalid} == {n: EMPTY_ROW, n + 1: EMPTY_ROW, n + 2: "missing target",
                                                       n + 3: HEADER_AGAIN, n + 4: HEADER_AGAIN,
                                                       n + 5: HEADER_REORDERED, n + 6: HEADER_AGAIN}
    assert [row_issue(r.reason) for r in ds.invalid] == ["empty row", "empty row", "missing target", "header again",
                                                         "header again", "header again", "header again"]
    assert "the rows after it are read in the first header's order" in HEADER_REORDERED
    assert sum(map(len, ds.splits.values())) == n


def test_regression_scaffold(csv_file, tmp_path):
    ds = load_csv(csv_file, "smiles", ["y1"], "regression", cache_dir=tmp_path / "cache")
    assert cached.last_hit is False
    assert ds.info.task == "regression" and ds.info.metric == "mae" and ds.info.num_tasks == 1
    assert ds.info.target_names == ["y1"] and ds.info.node_features == "ogb"
    bad = {r.index: r.reason for r in ds.invalid}
    print(bad)
    assert sorted(bad) == [1, 3, 5, 6, 7, 11]
    assert bad[1].startswith("SMILES parse error")
    assert bad[3] == "empty SMILES"
    assert bad[5] == "Explicit valence for atom # 1 N, 5, is greater than permitted"
    assert "'abc' is not a number" in bad[6] and "y1" in bad[6]
    assert bad[7] == "missing target" and bad[11] == "missing target"
    graphs = _all(ds)
    assert sorted(g.idx for g in graphs) == [0, 2, 4, 8, 9, 10, 12, 13, 14]
    by_idx = {g.idx: g for g in graphs}
    assert by_idx[0].y.tolist() == [[1.5]] and by_idx[10].y.item() == pytest.approx(0.1)
    assert by_idx[4].smiles == ROWS[4][0]
    ref = smiles2graph(ROWS[4][0])
    assert torch.equal(by_idx[4].x, torch.as_tensor(ref["node_feat"]))
    # scaffold split: no scaffold in two splits
    scaf = {
        k: {MurckoScaffold.MurckoScaffoldSmiles(mol=Chem.MolFromSmiles(g.smiles), includeChirality=False)
            for g in v}
        for k, v in ds.splits.items()
    }
    assert not (scaf["train"] & scaf["val"]) and not (scaf["train"] & scaf["test"]) and not (scaf["val"] & scaf["test"])
    # the invalid-row log
    logs = list((tmp_path / "cache" / "csv" / "mols").glob("*.invalid.csv"))
    assert len(logs) == 1
    with open(logs[0], newline="") as fh:
        assert [int(r["index"]) for r in csv.DictReader(fh)] == [1, 3, 5, 6, 7, 11]


def test_multilabel_keeps_missing_labels_and_drops_rows_without_any(csv_file, tmp_path):
    """A multilabel row keeps its missing labels (masked in the loss), but a row without any label
    was kept too (CSV_VERSION 7): a split slot and a domain molecule with no loss and no metric,
    counted in the split sizes. It is dropped as a ``missing target``, as in a regression."""
    ds = load_csv(csv_file, "smiles", ["y2"], "multilabel", split="random", cache_dir=tmp_path)
    assert ds.info.metric == "ap" and ds.info.num_tasks == 1 and ds.info.target_names == ["y2"]
    bad = {r.index: r.reason for r in ds.invalid}
    empty = {i for i, (_, _, y2, _) in enumerate(ROWS) if not y2.strip()} - {1, 3, 5}
    assert empty and bad == {**{i: bad[i] for i in (1, 3, 5)}, **{i: "missing target" for i in empty}}
    by_idx = {g.idx: g for g in _all(ds)}
    assert not any(torch.isnan(g.y).all() for g in by_idx.values())
    assert by_idx[4].y.tolist() == [[1.0]] and by_idx[6].y.tolist() == [[1.0]]
    # two columns: a row keeps a missing label beside the other's, labels must be 0/1
    ds2 = load_csv(csv_file, "smiles", ["y2", "y1"], "multilabel", split="random", cache_dir=tmp_path)
    bad = {r.index: r.reason for r in ds2.invalid}
    assert bad[7] == "missing target (all of ['y2', 'y1'] are empty)" and 11 not in bad  # (11: y1 NaN, y2 1)
    assert "label '1.5' is not 0 or 1" in bad[0] and 6 not in bad  # 'abc' beside y2's 1: that cell is missing
    assert {n.index: n.issue for n in ds2.notes}[6] == "label left out"
    assert {g.idx: g for g in _all(ds2)}[6].y[0, 0] == 1 and math.isnan({g.idx: g for g in _all(ds2)}[6].y[0, 1])
    assert math.isnan({g.idx: g for g in _all(ds2)}[11].y[0, 1])  # y1's NaN beside y2's 1: kept


def test_binary_metric_and_missing(tmp_path):
    path = tmp_path / "b.csv"
    path.write_text("smiles,label\nCCO,1\nCCN,0\nCCC,\nc1ccccc1,2\nCCCl,1\n")
    ds = load_csv(path, "smiles", ["label"], "binary", split="random", cache_dir=tmp_path / "c")
    assert ds.info.metric == "rocauc" and ds.info.task == "binary"
    bad = {r.index: r.reason for r in ds.invalid}
    assert bad[2] == "missing target" and "not 0 or 1" in bad[3]
    assert sum(ds.sizes().values()) == 3
    with pytest.raises(ValueError, match="multilabel"):
        load_csv(path, "smiles", ["label", "label2"], "binary", cache_dir=tmp_path / "c")


def test_column_split(csv_file, tmp_path):
    ds = load_csv(csv_file, "smiles", ["y1"], "regression", split="column:fold", cache_dir=tmp_path)
    ids = {k: [g.idx for g in v] for k, v in ds.splits.items()}
    assert ids == {"train": [0, 2, 4, 10, 12], "val": [8, 14], "test": [9, 13]}


def test_column_split_unknown_label(tmp_path):
    path = tmp_path / "s.csv"
    path.write_text("smiles,y,fold\nCCO,1,train\nCCN,2,holdout\nCCC,3,test\n")
    ds = load_csv(path, "smiles", ["y"], "regression", split="column:fold", cache_dir=tmp_path)
    assert [r.index for r in ds.invalid] == [1]
    assert "unknown value 'holdout'" in ds.invalid[0].reason


def test_rows_predict_would_refuse_do_not_train(tmp_path):
    """A molecule of only hydrogens or with a wildcard atom trained while siggate predict refused
    it (a model then failed on its own training molecules); both are dropped with predict's reason."""
    from siggate.train.predict import SmilesPredictor

    path = tmp_path / "s.csv"
    path.write_text("smiles,y,fold\nCCO,1,train\n*C,2,train\n[H][H],3,train\nCCN,4,val\nCC*,5,test\nCCC,6,test\n")
    ds = load_csv(path, "smiles", ["y"], "regression", split="column:fold", cache_dir=tmp_path)
    assert [(r.index, r.reason) for r in ds.invalid] == [
        (1, "contains a wildcard atom '*' (atomic number 0) at atom 1 (RDKit index 0), which is not an element"),
        (2, "no heavy atoms: the molecule has only hydrogen (2 H atom(s)); there is nothing to predict from"),
        (4, "contains a wildcard atom '*' (atomic number 0) at atom 3 (RDKit index 2), which is not an element")]
    assert {k: [g.idx for g in v] for k, v in ds.splits.items()} == {"train": [0], "val": [3], "test": [5]}
    from siggate.data.chem import InvalidSmiles

    reader = SmilesPredictor.__new__(SmilesPredictor)  # its SMILES reader alone, at the default limit
    reader.max_atoms, reader.mol_features, reader.fragments = 1000, "none", "all"
    for row in ds.invalid:  # predict's own words for the same molecules
        with pytest.raises(InvalidSmiles) as caught:
            reader._graph(row.smiles)
        assert str(caught.value) == row.reason


def test_dropping_rows_predict_refuses_keeps_every_other_rows_split(tmp_path):
    """Those rows trained until CSV_VERSION 3; dropping them before the split reshuffled every
    other row, so an older run resumed (or was evaluated) on another split, its own training
    molecules in test. They are dropped after it: each other row keeps the split it had."""
    smiles = ["C" * k + "O" for k in range(1, 61)]
    bad, stand_in = {7: "*C", 33: "[H][H]"}, {7: "CNCl", 33: "CNNCl"}  # version 2 read them as any molecule
    for name, at in (("bad", bad), ("kept", stand_in)):
        (tmp_path / f"{name}.csv").write_text(
            "smiles,y\n" + "".join(f"{at.get(i, s)},{i}\n" for i, s in enumerate(smiles)))
    a = load_csv(tmp_path / "bad.csv", "smiles", ["y"], "regression", split="random", cache_dir=tmp_path / "a")
    b = load_csv(tmp_path / "kept.csv", "smiles", ["y"], "regression", split="random", cache_dir=tmp_path / "b")
    assert {r.index for r in a.invalid} == set(bad)
    assert {k: {g.idx for g in v} for k, v in a.splits.items()} == {k: {g.idx for g in v} - set(bad)
                                                                   for k, v in b.splits.items()}


def test_random_split_seed(tmp_path):
    path = tmp_path / "r.csv"
    smiles = ["C" * k + "O" for k in range(1, 41)]
    path.write_text("smiles,y\n" + "".join(f"{s},{i}\n" for i, s in enumerate(smiles)))
    a = load_csv(path, "smiles", ["y"], "regression", split="random", seed=0, cache_dir=tmp_path)
    b = load_csv(path, "smiles", ["y"], "regression", split="random", seed=0, cache_dir=tmp_path)
    assert cached.last_hit is True
    c = load_csv(path, "smiles", ["y"], "regression", split="random", seed=1, cache_dir=tmp_path)
    assert cached.last_hit is False
    ids = lambda d: {k: sorted(g.idx for g in v) for k, v in d.splits.items()}  # noqa: E731
    assert ids(a) == ids(b) and ids(a) != ids(c)
    assert a.sizes() == {"train": 32, "val": 4, "test": 4}


def test_missing_column_message(csv_file, tmp_path):
    with pytest.raises(ValueError) as err:
        load_csv(csv_file, "SMILES", ["y1", "y9"], "regression", cache_dir=tmp_path)
    msg = str(err.value)
    assert "'SMILES'" in msg and "'y9'" in msg and "'y1' " not in msg
    assert "available columns: ['smiles', 'y1', 'y2', 'fold', 'comment']" in msg
    with pytest.raises(ValueError, match="split column 'nope'"):
        load_csv(csv_file, "smiles", ["y1"], "regression", split="column:nope", cache_dir=tmp_path)
    with pytest.raises(ValueError, match="split must be"):
        load_csv(csv_file, "smiles", ["y1"], "regression", split="stratified", cache_dir=tmp_path)
    with pytest.raises(ValueError, match="task must be"):
        load_csv(csv_file, "smiles", ["y1"], "classification", cache_dir=tmp_path)


def test_a_target_column_with_a_comma_in_its_name_is_named_with_the_way_to_give_it(tmp_path):
    """``--target-col "pKi (log, nM)"`` is read as the columns 'pKi (log' and 'nM)', and the hint
    offered "--target-col pKi (log, nM),nM)", which failed again; the refusal now names the
    column and the --set that gives it whole."""
    path = tmp_path / "comma.csv"
    path.write_text('smiles,"pKi (log, nM)"\nCCO,1\nCCN,2\n')
    with pytest.raises(ValueError) as err:
        load_csv(path, "smiles", ["pKi (log", " nM)"], "regression", cache_dir=tmp_path)
    assert str(err.value) == (f"{path}: the target column 'pKi (log, nM)' has a comma in its name, which --target-col "
                              "reads as a list of columns; name the targets with --set 'data.target_cols=[\"pKi (log, "
                              "nM)\"]' (or rename the column)")
    two = tmp_path / "two.csv"
    two.write_text('smiles,logS,"pKi (log, nM)"\nCCO,1,2\nCCN,2,3\n')
    with pytest.raises(ValueError, match=r"""--set 'data.target_cols=\["logS", "pKi \(log, nM\)"\]'"""):
        load_csv(two, "smiles", ["logS", "pKi (log", "nM)"], "regression", cache_dir=tmp_path)


def test_wrong_delimiter_hint(tmp_path):
    path = tmp_path / "semi.csv"
    path.write_text("smiles;y\nCCO;1\nCCN;2\n")
    with pytest.raises(ValueError) as err:
        load_csv(path, "smiles", ["y"], "regression", cache_dir=tmp_path)
    msg = str(err.value)
    assert "available columns: ['smiles;y']" in msg
    assert "delimit" in msg and "';'" in msg
    ds = load_csv(path, "smiles", ["y"], "regression", split="random", cache_dir=tmp_path, sep=";")
    assert sum(ds.sizes().values()) == 2 and not ds.invalid
    tab = tmp_path / "tab.csv"
    tab.write_text("smiles\ty\nCCO\t1\n")
    with pytest.raises(ValueError, match="a tab"):
        load_csv(tab, "smiles", ["y"], "regression", cache_dir=tmp_path)


@pytest.mark.parametrize("kind", ["gz", "gz-unnamed", "bz2", "xz", "zip"])
def test_delimiter_is_detected_inside_compressed_files(tmp_path, kind):
    # the reader opens a compressed file by its first bytes; the delimiter was sniffed from the raw
    # bytes of any file not named .gz (a ';' bzip2 file was refused, its cliff marks dropped)
    import bz2
    import gzip
    import lzma
    import zipfile

    from siggate.data.csvdata import detect_sep

    text = "smiles;y;cliff_mol\nCCO;1,5;0\nCCN;2,5;1\nCCC;3,5;0\n"
    path = tmp_path / {"gz": "d.csv.gz", "gz-unnamed": "d.csv", "bz2": "d.csv.bz2", "xz": "d.csv.xz", "zip": "d.zip"}[kind]
    if kind == "zip":
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("d.csv", text)
    else:
        path.write_bytes({"gz": gzip, "gz-unnamed": gzip, "bz2": bz2, "xz": lzma}[kind].compress(text.encode()))
    assert detect_sep(path) == ";"
    ds = load_csv(path, "smiles", ["y"], "regression", split="random", cache_dir=tmp_path / "c", sep=None,
                  decimal=",")
    assert sorted(float(g.y) for s in ds.splits.values() for g in s) == [1.5, 2.5, 3.5]
    from siggate.train.plots import cliff_marks

    assert cliff_marks(path, [0, 1, 2]).tolist() == [False, True, False]
    broken = tmp_path / "broken.csv.bz2"
    broken.write_bytes(b"BZh9" + b"\x00" * 20)
    assert detect_sep(broken) == ","  # the reader names the damage; detection only guesses


def test_read_table_shares_the_repeated_short_fields_of_a_wide_file(tmp_path):
    # a pretraining corpus of ~190 descriptor columns held one string per cell: most of the memory
    # of a million rows; a wide file's equal short fields are one object now, a narrow file's are not
    from siggate.data.csvdata import _SHARED_COLUMNS, _SHARED_FIELD, read_table

    long = "C" * (_SHARED_FIELD + 1)
    cols = [f"d{i}" for i in range(_SHARED_COLUMNS)]
    wide = tmp_path / "wide.csv"
    wide.write_text(",".join(["smiles", *cols]) + "\n" + "".join(f"{long},{','.join(['0.5'] * len(cols))}\n"
                                                                 for _ in range(3)))
    header, recs = read_table(wide, ",")
    assert header == ["smiles", *cols] and [len(r) for r in recs] == [len(cols) + 1] * 3
    assert recs[0][1] == "0.5" and recs[0][1] is recs[1][1] is recs[2][5]  # one object
    assert recs[0][0] == recs[1][0] and recs[0][0] is not recs[1][0]  # long fields (SMILES) are left alone
    narrow = tmp_path / "narrow.csv"
    narrow.write_text("smiles,y\nCCO,0.5\nCCN,0.5\n")
    _, recs = read_table(narrow, ",")
    assert recs[0][1] == recs[1][1] == "0.5" and recs[0][1] is not recs[1][1]


def test_cache_hit_and_file_change(csv_file, tmp_path):
    cache = tmp_path / "cache"
    a = load_csv(csv_file, "smiles", ["y1"], "regression", cache_dir=cache)
    assert cached.last_hit is False
    b = load_csv(csv_file, "smiles", ["y1"], "regression", cache_dir=cache)
    assert cached.last_hit is True
    assert a.sizes() == b.sizes() and a.invalid == b.invalid
    load_csv(csv_file, "smiles", ["y1", "y2"], "regression", cache_dir=cache)
    assert cached.last_hit is False  # other arguments, other key
    with open(csv_file, "a", newline="") as fh:
        csv.writer(fh).writerow(["CCCCO", "1.0", "1", "train", ""])
    c = load_csv(csv_file, "smiles", ["y1"], "regression", cache_dir=cache)
    assert cached.last_hit is False  # content changed -> rebuilt
    assert sum(c.sizes().values()) == sum(a.sizes().values()) + 1


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_csv(tmp_path / "nope.csv", "smiles", ["y"], "regression", cache_dir=tmp_path)


# --------------------------------------------------------------------------- suspicious data

#: 6 distinct molecules, then row 6 repeats row 0 (ethanol written another way) 5 units higher,
#: row 7 repeats row 1 with the same label, row 8 repeats row 2 three units lower
DUP_ROWS = [("CCO", 1.0), ("c1ccccc1O", 2.0), ("CCN", 3.0), ("CCCl", 4.0), ("CCCC", 5.0), ("c1ccncc1", 6.0),
            ("OCC", 6.0), ("Oc1ccccc1", 2.0), ("NCC", 0.0)]


def _dup_file(tmp_path):
    path = tmp_path / "dup.csv"
    path.write_text("smiles,y\n" + "".join(f"{s},{y}\n" for s, y in DUP_ROWS))
    return path


def test_conflicting_duplicates_are_kept_with_a_warning(tmp_path, caplog):
    caplog.set_level("WARNING", logger="siggate.data.csvdata")
    ds = load_csv(_dup_file(tmp_path), "smiles", ["y"], "regression", split="random", cache_dir=tmp_path / "c")
    assert sum(ds.sizes().values()) == 9 and ds.invalid == []
    notes = [(n.index, n.issue, n.detail) for n in ds.notes]
    assert notes == [(0, "conflicting duplicate", "same molecule as row(s) 6; y spread 5"),
                     (2, "conflicting duplicate", "same molecule as row(s) 8; y spread 3"),
                     (6, "conflicting duplicate", "same molecule as row(s) 0; y spread 5"),
                     (8, "conflicting duplicate", "same molecule as row(s) 2; y spread 3")]  # rows 1/7 agree
    warning = [r.getMessage() for r in caplog.records if "several rows" in r.getMessage()]
    assert len(warning) == 1
    assert warning[0].startswith("dup.csv: 2 molecules appear in several rows (4 rows) with labels that differ")
    assert "spread up to 5, median 4" in warning[0] and "--duplicates average" in warning[0]


def test_a_class_labels_duplicates_warning_offers_only_what_is_allowed(tmp_path, caplog):
    """For a binary task the warning suggested --duplicates average, which is refused there."""
    caplog.set_level("WARNING", logger="siggate.data.csvdata")
    path = tmp_path / "b.csv"
    labels = [0, 1, 0, 1, 0, 1, 1, 1, 0]  # row 6 (ethanol again) conflicts with row 0
    path.write_text("smiles,y\n" + "".join(f"{s},{c}\n" for (s, _), c in zip(DUP_ROWS, labels)))
    load_csv(path, "smiles", ["y"], "binary", split="random", cache_dir=tmp_path / "c")
    (warning,) = [r.getMessage() for r in caplog.records if "several rows" in r.getMessage()]
    assert "kept as separate rows: pass --duplicates first to keep the first row" in warning
    assert "average" not in warning


def test_duplicates_average_merges_before_splitting_and_first_keeps_the_first(tmp_path):
    path = _dup_file(tmp_path)
    avg = load_csv(path, "smiles", ["y"], "regression", split="random", cache_dir=tmp_path / "c", duplicates="average")
    y = {g.idx: g.y.item() for g in _all(avg)}
    assert y == {0: 3.5, 1: 2.0, 2: 1.5, 3: 4.0, 4: 5.0, 5: 6.0}
    assert [(r.index, r.reason) for r in avg.invalid] == [(6, "merged into row 0 (--duplicates average)"),
                                                           (7, "merged into row 1 (--duplicates average)"),
                                                           (8, "merged into row 2 (--duplicates average)")]
    first = load_csv(path, "smiles", ["y"], "regression", split="random", cache_dir=tmp_path / "c", duplicates="first")
    assert {g.idx: g.y.item() for g in _all(first)} == {0: 1.0, 1: 2.0, 2: 3.0, 3: 4.0, 4: 5.0, 5: 6.0}
    assert [r.reason for r in first.invalid] == [f"duplicate of row {k} (--duplicates first)" for k in (0, 1, 2)]
    with pytest.raises(ValueError, match="has no mean"):
        load_csv(path, "smiles", ["y"], "binary", cache_dir=tmp_path / "c", duplicates="average")


def _split_of(ds) -> dict[int, str]:
    return {g.idx: name for name, graphs in ds.splits.items() for g in graphs}


@pytest.mark.parametrize("mode", ["average", "first", "keep"])
def test_a_split_column_is_never_merged_across(tmp_path, caplog, mode):
    """Train ``CCO`` (y=1) and test ``OCC`` (y=5) are one molecule: merging them before the
    split column was applied made one training row of y=3 and let the test row vanish. Rows
    merge only within their split; the molecule in both splits is named on each row."""
    caplog.set_level("WARNING", logger="siggate.data.csvdata")
    path = tmp_path / "fold.csv"
    rows = [("CCO", 1.0, "train"), ("c1ccccc1O", 2.0, "train"), ("OCC", 5.0, "test"), ("CCN", 3.0, "val"),
            ("NCC", 4.0, "val"), ("CCCl", 6.0, "train"), ("C(C)O", 7.0, "test"), ("CCCC", 8.0, "test")]
    path.write_text("smiles,y,fold\n" + "".join(f"{s},{y},{f}\n" for s, y, f in rows))
    ds = load_csv(path, "smiles", ["y"], "regression", split="column:fold", cache_dir=tmp_path / "c", duplicates=mode)
    where, y = _split_of(ds), {g.idx: g.y.item() for g in _all(ds)}
    assert {r: where.get(r) for r in range(8)} == {r: f if mode == "keep" or r not in (4, 6) else None
                                                   for r, (_, _, f) in enumerate(rows)}
    assert y[0] == 1.0  # the training row keeps its own label, whatever the test rows say
    if mode == "average":  # merged within a split: val 3 and 4, test 5 and 7
        assert (y[3], y[2]) == (3.5, 6.0)
        assert [(r.index, r.reason) for r in ds.invalid] == [(4, "merged into row 3 (--duplicates average)"),
                                                             (6, "merged into row 2 (--duplicates average)")]
    elif mode == "first":
        assert (y[3], y[2]) == (3.0, 5.0)
        assert [r.reason for r in ds.invalid] == ["duplicate of row 3 (--duplicates first)",
                                                  "duplicate of row 2 (--duplicates first)"]
    cross = {n.index: n.detail for n in ds.notes if n.issue == "duplicate across splits"}
    assert cross == {0: "train row; the same molecule is in test: row(s) 2, 6",
                     2: "test row; the same molecule is in train: row(s) 0",
                     6: "test row; the same molecule is in train: row(s) 0"}
    warning = [r.getMessage() for r in caplog.records if "also puts into another split" in r.getMessage()]
    assert len(warning) == 1 and warning[0].startswith("fold.csv: 3 rows hold a molecule that the split column")


def test_salts_are_named_and_a_salt_and_its_base_across_splits_is_warned(tmp_path, caplog):
    """Molecules of several fragments train as written by default (as predict reads them), with a
    note each naming their parent: the largest fragment (most heavy atoms, not the longest
    SMILES: butane, not bromide) neutralized (CC[NH3+] is CCN's ammonium, acetate acetic acid).
    Rows whose parent is another molecule's parent in another split (a salt and its free base,
    written neutral or charged) get a note each and one warning naming --fragments parent. No row
    or split changes."""
    caplog.set_level("WARNING", logger="siggate.data.csvdata")
    path = tmp_path / "salts.csv"
    rows = [("CCN.Cl", 1.0, "train"), ("NCC", 1.1, "test"), ("[Na+].CC(=O)[O-]", 2.0, "train"),
            ("CC(=O)O", 2.1, "val"), ("CCO.CCO", 3.0, "train"), ("c1ccccc1O", 4.0, "test"),
            ("CCCC.[Br-]", 5.0, "train"), ("CCCC", 6.0, "test"), ("CC[NH3+].[Cl-]", 1.2, "train")]
    path.write_text("smiles,y,fold\n" + "".join(f"{m},{y},{f}\n" for m, y, f in rows))
    ds = load_csv(path, "smiles", ["y"], "regression", split="column:fold", cache_dir=tmp_path / "c")
    assert _split_of(ds) == {r: f for r, (_, _, f) in enumerate(rows)} and not ds.invalid
    assert {g.idx: g.smiles for g in _all(ds)} == {r: m for r, (m, _, _) in enumerate(rows)}
    assert {g.idx: g.num_nodes for g in _all(ds)}[0] == 4  # C, C, N and the chloride: it stays in the graph
    notes = sorted((n.index, n.issue, n.detail) for n in ds.notes)
    assert notes == [(0, "parent across splits", "train row; its parent CCN is also the parent of test row 1"),
                     (0, "several fragments", "2 fragments, all read; the parent: CCN"),
                     (1, "parent across splits", "test row; its parent CCN is also the parent of train row 0, "
                                                 "train row 8"),
                     (2, "parent across splits", "train row; its parent CC(=O)O is also the parent of val row 3"),
                     (2, "several fragments", "2 fragments, all read; the parent: CC(=O)O"),
                     (3, "parent across splits", "val row; its parent CC(=O)O is also the parent of train row 2"),
                     (4, "several fragments", "2 fragments, all read; the parent: CCO"),
                     (6, "parent across splits", "train row; its parent CCCC is also the parent of test row 7"),
                     (6, "several fragments", "2 fragments, all read; the parent: CCCC"),  # 4 heavy atoms; [Br-]: 1
                     (7, "parent across splits", "test row; its parent CCCC is also the parent of train row 6"),
                     (8, "parent across splits", "train row; its parent CCN is also the parent of test row 1"),
                     (8, "several fragments", "2 fragments, all read; the parent: CCN")]
    messages = [r.getMessage() for r in caplog.records]
    assert [m for m in messages if "several fragments" in m] == [
        "salts.csv: 5 rows hold molecules of several fragments (salts or mixtures; first: row 0, CCN.Cl): each trains as one "
        "graph and one fingerprint, counterions included, and siggate predict reads them the same way; if the property "
        "is the parent's, pass --fragments parent (data.fragments: the largest carbon fragment, neutralized; data_report.csv "
        "lists them)"]
    assert [m for m in messages if "share their parent" in m] == [
        "salts.csv: 7 rows share their parent (largest carbon fragment, neutralized) with another molecule in another split "
        "(first: row 0, CCN.Cl; train row; its parent CCN is also the parent of test row 1), e.g. a salt and its free "
        "base, so the val/test scores are optimistic; pass --fragments parent to read each molecule as its parent, "
        "which keeps them in one split (a split column's rows stay where it puts them; data_report.csv lists them)"]
    # one split for all of them, or no fragments: no warning of either kind
    caplog.clear()
    path.write_text("smiles,y\n" + "".join(f"{m},{y}\n" for m, y, _ in rows if "." not in m))
    ds = load_csv(path, "smiles", ["y"], "regression", split="random", cache_dir=tmp_path / "c2")
    assert ds.notes == [] and not [r for r in caplog.records if "fragment" in r.getMessage()]


K_SALT = "COC(=O)c1c(C(=O)OC)c(C(=O)OC)[c-](C(=O)OC)c1C(=O)OC.[K+]"  # ogbg-molhiv: neutralized, it cannot be kekulized
PT_COMPLEX = "C1=NC2=[S+][Pt-2]3([S+]=C4NC=NC5=C4[NH+]3C=N5)[NH+]3C=NC(=C23)N1"  # its canonical SMILES does not read back


@pytest.mark.parametrize("smiles, parent, read", [
    ("CCN.Cl", "CCN", "CCN"),
    ("CC[NH3+].[Cl-]", "CCN", "CCN"),                   # neutralized
    ("[Na+].CC(=O)[O-]", "CC(=O)O", "CC(=O)O"),
    ("CCCC.[Br-]", "CCCC", "CCCC"),                     # most heavy atoms, not the longest SMILES
    ("CCO.CCO", "CCO", "CCO"),                          # two equal fragments: one parent
    ("C[C@H](N)C(=O)O.Cl", "C[C@H](N)C(=O)O", "C[C@H](N)C(=O)O"),  # stereo kept
    ("C[N+](C)(C)C.[I-]", "C[N+](C)(C)C", "C[N+](C)(C)C"),  # a quaternary ammonium stays charged
    ("OCC", None, None),                                # one uncharged fragment: its own parent, read as written
    ("CC[NH3+]", "CCN", "CCN"),                         # one charged fragment: neutralized
    ("[Na+].[Cl-]", None, None),                        # no carbon: read as written
    ("N.N.[Cl-].[Cl-].[Pt+2]", None, None),
    ("c1ccccc1.c1ccncc1", None, None),                  # two carbon fragments of one size: a mixture
    ("CC(=O)[O-].CC(=O)O.[Na+]", "CC(=O)O", "CC(=O)O"),  # an acid salted with its own anion: one once neutralized
    ("C[NH3+].CN.[Cl-]", "CN", "CN"),
    ("CC(=O)[O-].CC(N)=O.[Na+]", None, None),          # acetate and acetamide: a mixture, neutralized or not
    (K_SALT, None, None),                               # its parent would not read back
    (PT_COMPLEX, None, None),
])
def test_a_molecules_parent_is_its_largest_carbon_fragment_neutralized_or_none(smiles, parent, read):
    """read_molecule's rule, one table: under "parent" the graph is made of the parent parsed again
    from its SMILES (so a picture's atoms are the graph's), or of the molecule as written where it
    has none; under "all" always as written, with the parent named for the notes."""
    from siggate.data.chem import parse_smiles, read_molecule

    mol = parse_smiles(smiles)
    as_parent, as_written = read_molecule(mol, "parent"), read_molecule(mol, "all")
    assert (as_parent.parent, as_parent.smiles) == (parent, read) and as_written.parent == parent
    assert as_written.smiles is None and as_written.mol is mol
    assert as_parent.fragments == as_written.fragments == smiles.count(".") + 1
    if read is None:
        assert as_parent.mol is mol
    else:
        assert Chem.MolToSmiles(as_parent.mol) == read
        assert [a.GetSymbol() for a in as_parent.mol.GetAtoms()] == \
            [a.GetSymbol() for a in Chem.MolFromSmiles(read).GetAtoms()]  # the order read's SMILES gives


def test_the_notes_warnings_agree_with_their_counts(tmp_path, caplog):
    """One row or molecule is said in the singular ("1 molecules appear", "1 rows hold" before), and
    --fragments parent where no row has a parent says so, not "0 rows ... are read as their parent"."""
    from siggate.options import counted
    from test_predict import nci_smiles

    assert (counted(1, "row holds", "rows hold"), counted(2, "row holds", "rows hold")) == ("1 row holds", "2 rows hold")
    assert (counted(1, "molecule"), counted(0, "molecule")) == ("1 molecule", "0 molecules")
    caplog.set_level("INFO", logger="siggate.data.csvdata")
    others = [s for s in nci_smiles(60) if "." not in s][:30]
    path = tmp_path / "one.csv"  # one molecule twice, 5 apart; one salt without a parent
    path.write_text("smiles,y\n" + "".join(f"{m},{i % 7}\n" for i, m in enumerate([*others, "[K+].[Br-]"]))
                    + f"{others[0]},5\n")
    load_csv(path, "smiles", ["y"], "regression", split="random", cache_dir=tmp_path / "c", fragments="parent")
    said = [r.getMessage() for r in caplog.records]
    assert [m for m in said if "several rows" in m][0].startswith(
        "one.csv: 1 molecule appears in several rows (2 rows) with labels that differ by more than")
    assert [m for m in said if "several fragments" in m] == [
        "one.csv: 1 row of several fragments (salts or mixtures) has no parent to keep (no carbon, two carbon "
        "fragments of one size, or one RDKit cannot write back) (first: row 30, [K+].[Br-]), so --fragments parent "
        "reads it as written: it trains with its counterions"]
    assert not [m for m in said if "are read as their parent" in m or "is read as its parent" in m]


def test_fragments_parent_reads_each_molecule_as_its_parent_in_training_and_predict(tmp_path, caplog):
    """--fragments parent: every molecule is read as its parent (largest fragment, neutralized,
    parsed again from its canonical SMILES), so a salt and its free base are one molecule, merged
    by --duplicates and drawn into one split; the graphs and the tables hold the parent. siggate
    predict of the run reads SMILES the same way: salt, charged and neutral forms predict alike."""
    import numpy as np

    from siggate.cli import main
    from test_predict import nci_smiles

    caplog.set_level("INFO", logger="siggate.data.csvdata")
    forms = ["CCN.Cl", "CC[NH3+].[Cl-]", "NCC", "[Na+].CC(=O)[O-]", "CC(=O)O", "[K+].[Br-]"]
    others = [s for s in nci_smiles(60) if "." not in s][:40]
    path = tmp_path / "salts.csv"
    path.write_text("smiles,y\n" + "".join(f"{m},{i % 7}\n" for i, m in enumerate(forms + others)))
    ds = load_csv(path, "smiles", ["y"], "regression", split="random", cache_dir=tmp_path / "c",
                  duplicates="average", fragments="parent")
    kept = {g.idx: g for g in _all(ds)}
    assert [(r.index, r.reason) for r in ds.invalid] == [(1, "merged into row 0 (--duplicates average)"),
                                                         (2, "merged into row 0 (--duplicates average)"),
                                                         (4, "merged into row 3 (--duplicates average)")]
    assert (kept[0].smiles, kept[3].smiles, kept[0].num_nodes) == ("CCN", "CC(=O)O", 3)
    # splits.csv shows each row as read (a merged salt's parent too: it showed the salt), the report as written
    from siggate.data.csvdata import write_run_tables

    write_run_tables(ds, tmp_path / "tables")
    splits = {int(r["row"]): r["smiles"] for r in csv.DictReader(open(tmp_path / "tables" / "splits.csv"))}
    assert [splits[i] for i in range(5)] == ["CCN", "CCN", "NCC", "CC(=O)O", "CC(=O)O"]  # (NCC: read as written)
    report = [(r["row"], r["smiles"]) for r in csv.DictReader(open(tmp_path / "tables" / "data_report.csv"))]
    assert ("1", "CC[NH3+].[Cl-]") in report and ("3", "[Na+].CC(=O)[O-]") in report
    assert float(kept[0].y) == pytest.approx(np.mean([0, 1, 2])) and float(kept[3].y) == pytest.approx(3.5)
    assert [(n.index, n.detail) for n in ds.notes if n.issue == "several fragments"] == [
        (0, "2 fragments, read as its parent: CCN"), (1, "2 fragments, read as its parent: CCN"),  # 1: merged into 0
        (3, "2 fragments, read as its parent: CC(=O)O"),
        (5, "2 fragments, read as written: no parent to keep (no carbon, two carbon fragments of one size, or one "
            "RDKit cannot write back)")]
    assert kept[5].smiles == "[K+].[Br-]" and kept[5].num_nodes == 2
    assert not [n for n in ds.notes if n.issue == "parent across splits"]
    assert [r.getMessage() for r in caplog.records if "several fragments" in r.getMessage()] == [
        "salts.csv: 3 rows of several fragments (salts or mixtures) are read as their parent (--fragments parent); 1 "
        "has none (no parent to keep (no carbon, two carbon fragments of one size, or one RDKit cannot write back); "
        "first: row 5, [K+].[Br-]) and trains as written, counterions included"]  # rows 0, 1 and 3; row 5
    out = tmp_path / "run"
    assert main(["train", "--data", str(path), "--target-col", "y", "--split", "random", "--members", "svr",
                 "--fragments", "parent", "--out", str(out), "--cache-dir", str(tmp_path / "c3"), "--no-progress"]) == 0
    from siggate.train.predict import SmilesPredictor

    reader = SmilesPredictor(out)
    rows = reader.predict_rows(["CCN.Br", "CC[NH3+]", "CCN", "CC(=O)[O-].[K+]", "CC(=O)O"])
    assert [r["smiles"] for r in rows] == ["CCN.Br", "CC[NH3+]", "CCN", "CC(=O)[O-].[K+]", "CC(=O)O"]
    assert rows[0]["y"] == rows[1]["y"] == rows[2]["y"] and rows[3]["y"] == rows[4]["y"]
    assert reader.featurize("CC[NH3+].[Cl-]").smiles == "CCN" and reader.fragments == "parent"
    assert reader.featurize(K_SALT).smiles == K_SALT  # no parent: read as written
    member = SmilesPredictor(out / "member0")  # a fingerprint member's folder: its run's reading
    assert member.fragments == "parent" and member.predict_rows(["CCN.Br"])[0]["y"] == rows[0]["y"]
    from siggate.train.evaluate import evaluate

    labelled = tmp_path / "labelled.csv"  # evaluate --data of the member's folder reads salts as the run does
    labelled.write_text("smiles,y\nCCN.Br,1\nCC(=O)[O-].[K+],2\n")
    want = np.mean([abs(rows[0]["y"] - 1), abs(rows[3]["y"] - 2)])
    for where in (out, out / "member0"):
        assert evaluate(where, data=labelled)["metrics"]["data"]["mean"]["mae"] == pytest.approx(want, rel=1e-5)
    cut = tmp_path / "cut"  # a run stopped before its combination was saved: members.yaml says
    shutil.copytree(out, cut)
    (cut / "predictor.json").unlink()
    assert SmilesPredictor(cut / "member0").fragments == "parent"
    caplog.clear()  # its data record came with the run's members.yaml: the CSV's hash too
    with caplog.at_level("WARNING", logger="siggate"):
        assert evaluate(cut / "member0")["members"] == 1
    assert not [r for r in caplog.records if "records no hash" in r.getMessage()]
    alone = tmp_path / "alone" / "copied"  # the member folder copied out of its run: no run to ask
    shutil.copytree(out / "member0", alone)
    assert SmilesPredictor(alone).fragments == "all"
    report = (out / "data_report.csv").read_text()
    assert "0,CCN.Cl,several fragments,\"2 fragments, read as its parent: CCN\"" in report  # rows as written
    assert "1,CC[NH3+].[Cl-],conflicting duplicate,\"same molecule as row(s) 0, 2; y spread 2\"" in report  # CCN
    unpickled = SmilesPredictor.__new__(SmilesPredictor)  # a reader pickled before data.fragments
    assert unpickled.fragments == "all"
    # explain draws and lists the parent's atoms, in the graph's order
    assert main(["explain", "--checkpoint", str(out), "[Cl-].[NH3+]CC", "--out", str(tmp_path / "why")]) == 0
    atoms = (tmp_path / "why" / "atoms.csv").read_text().splitlines()
    assert [line.split(",")[:3] for line in atoms[1:]] == [["0", "0", "C"], ["0", "1", "C"], ["0", "2", "N"]]
    molecules = (tmp_path / "why" / "molecules.csv").read_text().splitlines()
    assert molecules[0].startswith("row,smiles,read_as,y,") and molecules[1].startswith("0,[Cl-].[NH3+]CC,CCN,")
    with pytest.raises(ValueError, match="data.fragments: 'parent' applies to CSV data"):
        from siggate.config import load_config

        load_config("nci5k", ["data.fragments=parent"])


def test_random_and_scaffold_splits_keep_one_molecule_in_one_split(tmp_path):
    """With --duplicates keep, the rows of one molecule (written differently) land in one
    split for every seed; the random split drew each row on its own."""
    from test_predict import nci_smiles

    base = nci_smiles(40)
    again = [Chem.MolToSmiles(Chem.MolFromSmiles(s), doRandom=True, canonical=False) for s in base[:20]]
    path = tmp_path / "dups.csv"
    path.write_text("smiles,y\n" + "".join(f"{s},{i % 7}\n" for i, s in enumerate(base + again)))
    canon = [Chem.MolToSmiles(Chem.MolFromSmiles(s)) for s in base + again]
    assert len(set(canon)) == 40
    for split in ("random", "scaffold", "scaffold_balanced"):
        for seed in range(5):
            ds = load_csv(path, "smiles", ["y"], "regression", split=split, seed=seed, cache_dir=tmp_path / "c")
            where = _split_of(ds)
            assert len(where) == 60
            homes = {}
            for r, name in where.items():
                homes.setdefault(canon[r], set()).add(name)
            assert all(len(h) == 1 for h in homes.values()), (split, seed)


def test_val_fraction_draws_validation_rows_from_a_train_test_column(tmp_path):
    """A split column of train and test only was refused (an empty val split) with no way to
    draw validation rows; --val-fraction takes them from train: whole molecules, seeded, never
    from test."""
    from siggate.data.base import DataError
    from siggate.data.csvdata import check_trainable
    from test_predict import nci_smiles

    smiles = nci_smiles(30)
    rows = [(s, i, "test" if i >= 24 else "train") for i, s in enumerate(smiles)] + [(smiles[0], 99, "train")]
    path = tmp_path / "tt.csv"
    path.write_text("smiles,y,fold\n" + "".join(f"{s},{y},{f}\n" for s, y, f in rows))
    plain = load_csv(path, "smiles", ["y"], "regression", split="column:fold", cache_dir=tmp_path / "c")
    with pytest.raises(DataError, match=r"the val split is empty \(31 usable rows\); give the split column val rows, "
                                        r"or draw them from its train rows: --val-fraction 0.1 \(data.val_fraction\)$"):
        check_trainable(path, plain, split="column:fold")
    # each split names the fix that applies to it (a split column's was named for every split)
    from siggate.data.csvdata import _empty_split_fix

    assert _empty_split_fix(["val"], "scaffold", 0) == "add rows, or choose --split random or scaffold_balanced (data.split)"
    assert _empty_split_fix(["val"], "scaffold_balanced", 0) == "add rows, or choose --split random (data.split)"
    assert _empty_split_fix(["val", "test"], "random", 0) == "add rows"
    assert _empty_split_fix(["val"], "column:fold", 0.1).startswith("the val rows --val-fraction drew were dropped")
    assert _empty_split_fix(["test"], "column:fold", 0) == "give the split column rows of test"
    got = {}
    for seed in (0, 1):
        ds = load_csv(path, "smiles", ["y"], "regression", split="column:fold", seed=seed, cache_dir=tmp_path / "c",
                      val_fraction=0.2)
        check_trainable(path, ds)
        where = _split_of(ds)
        assert [r for r in range(31) if where[r] == "test"] == list(range(24, 30))  # test untouched
        val = sorted(r for r in range(31) if where[r] == "val")
        assert len(val) in (5, 6) and where[0] == where[30]  # 20% of 25, the two rows of smiles[0] together
        got[seed] = val
    assert got[0] != got[1]
    again = load_csv(path, "smiles", ["y"], "regression", split="column:fold", seed=0, cache_dir=tmp_path / "c",
                     val_fraction=0.2, rebuild=True)
    assert sorted(r for r, name in _split_of(again).items() if name == "val") == got[0]
    path.write_text("smiles,y,fold\nCCO,1,train\nCCN,2,val\nCCC,3,test\n")
    with pytest.raises(DataError, match="already names 1 val rows; --val-fraction draws val rows from train only"):
        load_csv(path, "smiles", ["y"], "regression", split="column:fold", cache_dir=tmp_path / "c", val_fraction=0.2)
    with pytest.raises(ValueError, match="needs split='column:NAME'"):
        load_csv(path, "smiles", ["y"], "regression", split="random", cache_dir=tmp_path / "c", val_fraction=0.2)


def test_zero_one_regression_target_suggests_binary(tmp_path, caplog):
    caplog.set_level("WARNING", logger="siggate.data.csvdata")
    path = tmp_path / "b.csv"
    path.write_text("smiles,active\n" + "".join(f"{s},{i % 2}\n" for i, s in enumerate(GOOD)))
    load_csv(path, "smiles", ["active"], "regression", split="random", cache_dir=tmp_path / "c")
    msgs = [r.getMessage() for r in caplog.records]
    assert "b.csv: target column 'active' holds only 0 and 1, and is trained as regression (MAE); if it is a " \
           "class label, pass --task binary (data.task)" in msgs
    caplog.clear()
    load_csv(path, "smiles", ["active"], "binary", split="random", cache_dir=tmp_path / "c")
    assert not any("holds only 0 and 1" in r.getMessage() for r in caplog.records)


def test_a_potency_in_nanomolar_is_named_as_one_to_model_on_its_logarithm(tmp_path, caplog):
    """IC50s in nM (log-normal over orders of magnitude) trained as they are, without a word: the
    largest decide the loss. Warned about; their log10, yields of 1-99% and a target with a zero
    or a negative value are not."""
    import math

    import numpy as np

    caplog.set_level("WARNING", logger="siggate.data.csvdata")
    rng = np.random.default_rng(0)
    n = len(GOOD)
    columns = {"ic50": 10 ** rng.normal(2.5, 1.0, n), "pic50": 9 - rng.normal(2.5, 1.0, n),
               "yield": np.linspace(1, 99, n), "shifted": np.r_[0.0, 10 ** rng.normal(2.5, 1.0, n - 1)]}
    path = tmp_path / "p.csv"
    path.write_text(",".join(["smiles", *columns]) + "\n" + "".join(
        ",".join([s, *(repr(float(c[i])) for c in columns.values())]) + "\n" for i, s in enumerate(GOOD)))
    ds = load_csv(path, "smiles", list(columns), "regression", split="random", cache_dir=tmp_path / "c")
    msgs = [r.getMessage() for r in caplog.records if "orders of magnitude" in r.getMessage()]
    v = np.concatenate([g.y.numpy() for split in ds.splits.values() for g in split])[:, 0].astype(np.float64)
    low, high = np.percentile(v, [5, 95])
    assert msgs == [f"p.csv: target column 'ic50' spans {math.log10(high / low):.1f} orders of magnitude (5th to 95th "
                    f"percentile: {low:.3g} to {high:.3g}), all positive: a potency, concentration or solubility is "
                    "modelled on its logarithm, else its largest values decide the loss and the scores; to train on "
                    "that, give a column of its log10 (pIC50 = 9 - log10(IC50 in nM))"]
    assert high / low > 100


def test_censored_labels_and_other_units_are_noted_and_warned_about(tmp_path, caplog):
    """A ChEMBL export's ``Standard Value`` trained every ``'>' 10000`` (an inactive compound: a
    bound) as a measured 10 µM, and mixed ``ug.mL-1`` with ``nM`` on one scale, without a word.
    Each such labelled row is a note in the run's report (its relation or its unit), with one
    warning per kind; unlabelled rows, a relation column that says '=' wherever there is a label,
    and a column of relations that holds anything else (it is no relation column) are not."""
    from siggate.data.csvdata import CENSORED_LABEL, OTHER_UNIT

    caplog.set_level("WARNING", logger="siggate.data.csvdata")
    relation = ["'='", "'>'", "'='", "'<'", "", "'='", "'>'", "'='", "'='", "'='", "'='", "'='"]
    units = ["nM", "nM", "ug.mL-1", "nM", "nM", "nM", "nM", "M", "nM", "nM", "nM", ""]
    value = ["5", "10000", "1.5", "0.1", "", "7", "10000", "0.000002", "8", "9", "3", "4"]
    assert len(relation) == len(units) == len(value) == len(GOOD)
    path = tmp_path / "export.csv"
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh, delimiter=";", quoting=csv.QUOTE_ALL)
        w.writerow(["Comment", "Smiles", "Standard Relation", "Standard Value", "Standard Units"])
        w.writerows(zip([">"] * 6 + ["assay 2"] * 6, GOOD, relation, value, units))
    ds = load_csv(path, "Smiles", ["Standard Value"], "regression", split="random", cache_dir=tmp_path / "c",
                  sep=";")
    noted = {n.index: (n.issue, n.detail) for n in ds.notes if n.issue in (CENSORED_LABEL, OTHER_UNIT)}
    assert noted == {
        1: (CENSORED_LABEL, "'Standard Relation' is '>': the label is a bound"),
        3: (CENSORED_LABEL, "'Standard Relation' is '<': the label is a bound"),
        6: (CENSORED_LABEL, "'Standard Relation' is '>': the label is a bound"),
        2: (OTHER_UNIT, "'Standard Units' is 'ug.mL-1', not 'nM' as in 8 of the labelled rows"),
        7: (OTHER_UNIT, "'Standard Units' is 'M', not 'nM' as in 8 of the labelled rows"),
    }
    msgs = [r.getMessage() for r in caplog.records if "labelled rows" in r.getMessage()]
    assert msgs == [
        "export.csv: 3 labelled rows are censored ('Standard Relation' says '<' or '>'; first: row 1, 'Standard "
        "Relation' is '>'): each label is a bound, not a measurement, and trains as if it were one; keep the rows "
        "whose relation is '=' (ChEMBL's pChEMBL Value is given for those only; data_report.csv lists them)",
        "export.csv: 2 labelled rows give their label in another unit than 'nM' ('Standard Units': 'M', 'ug.mL-1'): "
        "one number scale mixes units, so those labels are off by their units' ratio; convert them or keep one "
        "unit's rows (data_report.csv lists them)"]

    caplog.clear()  # columns of other units (a business unit, a price per unit) are no labels' units
    other_cols = tmp_path / "other.csv"
    with open(other_cols, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["smiles", "y", "Business Unit", "Price per unit", "Standard Units"])
        w.writerows([s, i, "CNS" if i % 2 else "Oncology", f"{i}.5", "nM"] for i, s in enumerate(GOOD))
    ds = load_csv(other_cols, "smiles", ["y"], "regression", split="random", cache_dir=tmp_path / "c")
    assert not [n for n in ds.notes if n.issue == OTHER_UNIT]
    assert not [r for r in caplog.records if "another unit" in r.getMessage()]

    caplog.clear()  # the measured rows alone, in one unit: nothing to say
    keep = [i for i in range(len(GOOD)) if relation[i] in ("'='", "") and units[i] in ("nM", "")]
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh, delimiter=";", quoting=csv.QUOTE_ALL)
        w.writerow(["Smiles", "Standard Relation", "Standard Value", "Standard Units"])
        w.writerows([GOOD[i], relation[i], value[i], units[i]] for i in keep)
        w.writerow(["CCCCCCO", "'>'", "", "ug.mL-1"])  # unlabelled: not trained, not noted
    ds = load_csv(path, "Smiles", ["Standard Value"], "regression", split="random", cache_dir=tmp_path / "c",
                  sep=";")
    assert not [n for n in ds.notes if n.issue in (CENSORED_LABEL, OTHER_UNIT)]
    assert [r.getMessage().split(" (")[0] for r in caplog.records] == ["export.csv: skipped 2 of 8 rows"]  # (two without a label)


def test_constant_target_is_refused(tmp_path):
    from siggate.data.base import DataError
    from siggate.data.csvdata import check_trainable

    path = tmp_path / "k.csv"
    path.write_text("smiles,y\n" + "".join(f"{s},2.5\n" for s in GOOD))
    ds = load_csv(path, "smiles", ["y"], "regression", split="random", cache_dir=tmp_path / "c")
    with pytest.raises(DataError) as exc:
        check_trainable(path, ds)
    assert str(exc.value) == (f"{path}: target column 'y' has the same value (2.5) in all 12 labelled rows, so there "
                              "is nothing to learn (every error would be 0); choose the --target-col that holds "
                              "the property")
    # rows left out for their molecule are named (they may hold the other values); unlabelled ones are not
    path.write_text("smiles,y\n" + "".join(f"{s},2.5\n" for s in GOOD) + "C1CC,7\nCCO,\n")
    ds = load_csv(path, "smiles", ["y"], "regression", split="random", cache_dir=tmp_path / "c")
    with pytest.raises(DataError) as exc:
        check_trainable(path, ds)
    assert "(1 row(s) were left out for their molecule, first line 14: SMILES parse error: unclosed ring" in \
        str(exc.value) and "missing target" not in str(exc.value)


def test_decimal_comma_is_named_and_read_with_decimal(tmp_path):
    from siggate.data.base import DataError

    path = tmp_path / "eu.csv"
    path.write_text("smiles;logS\nCCO;-5,49\nCCN;0,5\nCCC;2\nCCCl;1,25e-1\n")
    with pytest.raises(DataError) as exc:
        load_csv(path, "smiles", ["logS"], "regression", sep=None, cache_dir=tmp_path / "c")
    assert str(exc.value) == (f"{path}: target column 'logS' holds 3 number(s) written with a decimal comma "
                              "('-5,49' on line 2); pass --decimal , (data.decimal) to read them, or save the file "
                              "with '.' as the decimal mark")
    ds = load_csv(path, "smiles", ["logS"], "regression", sep=None, split="random", cache_dir=tmp_path / "c",
                  decimal=",")
    assert sorted(round(g.y.item(), 4) for g in _all(ds)) == [-5.49, 0.125, 0.5, 2.0]


def test_thousands_separators_and_mixed_decimal_marks_are_refused_not_misread(tmp_path, caplog):
    """IC50s written '7,120' beside '2.86': the refusal named --decimal , and that flag then read
    7,120 nM as 7.12 (wrong by 1000x, silently). A column whose numbers do not all use the decimal
    mark is refused, and the message says which reading each fix would give."""
    from siggate.data.base import DataError

    def refusal(text: str, decimal: str = ".") -> str:
        path = tmp_path / "d.csv"
        path.write_text("smiles,IC50\n" + text)
        with pytest.raises(DataError) as exc:
            load_csv(path, "smiles", ["IC50"], "regression", split="random", cache_dir=tmp_path / "c", decimal=decimal)
        return str(exc.value).split(": ", 1)[1]

    rows = 'CCO,2.86\nCCN,"7,120"\nCCC,12.14\nCCCl,"5,584"\n'
    assert refusal(rows) == ("target column 'IC50' holds 2 number(s) with a comma ('7,120' on line 3) beside numbers "
                             "with a decimal point ('2.86' on line 2): the commas are thousands separators; remove "
                             "them from the file (7,120 -> 7120)")
    assert refusal('CCO,"5,49"\nCCN,1.5\nCCC,2\n') == (  # a decimal comma beside a point: not thousands, never "remove"
        "target column 'IC50' mixes decimal marks: ',' in '5,49' on line 2 and '.' in '1.5' on line 3; write every "
        "number with one decimal mark")
    assert refusal(rows, ",").startswith("target column 'IC50' holds 2 number(s) written with a decimal point "
                                         "('2.86' on line 2), and --decimal , reads ',' as the decimal mark")
    assert "with a comma ('1,234.5' on line 2) and a decimal point: the commas are thousands" in refusal(
        'CCO,"1,234.5"\nCCN,3\n')
    # the mirror case under --decimal , (a European export): '2.999,2' was no number, and the rows of
    # the largest values were dropped one by one while the rest trained
    assert refusal('CCO,"749,89"\nCCN,"2.999,2"\nCCC,"1.234.567,5"\nCCCl,"12,5"\n', ",") == (
        "target column 'IC50' holds 2 number(s) with '.' separating thousands ('2.999,2' on line 3); remove the "
        "thousands separators from the file (2.999,2 -> 2999,2), then --decimal , reads the rest")
    assert refusal('CCO,"749,89"\nCCN,"1.234.567"\nCCC,"12,5"\n', ",").startswith(  # no decimal part: grouped too
        "target column 'IC50' holds 1 number(s) with '.' separating thousands ('1.234.567' on line 3)")
    both = refusal('CCO,"7,120"\nCCN,"5,584"\nCCC,3\n')  # 7.12 or 7120: the file cannot say
    assert "a decimal comma or a thousands separator: pass --decimal , (data.decimal) if ',' is the decimal mark " \
           "(7,120 = 7.12), else remove the thousands separators (7,120 -> 7120)" in both
    path = tmp_path / "ok.csv"
    path.write_text('smiles;IC50\nCCO;7,120\nCCN;5,584\nCCC;3\n')  # with --decimal , : read as decimal commas
    ds = load_csv(path, "smiles", ["IC50"], "regression", sep=None, split="random", cache_dir=tmp_path / "c",
                  decimal=",")
    assert sorted(round(g.y.item(), 4) for g in _all(ds)) == [3.0, 5.584, 7.12]
    assert "thousands" not in caplog.text  # (3 is no whole number of three digits: nothing says thousands)
    # the fix the refusal offers, taken for a column of thousands separators beside whole numbers of 3+ digits:
    # 2,470 read as 2.47 beside 440 trained without a word; read as said, with a warning that names both
    path.write_text('smiles;MW\nCCO;2,470\nCCN;440\nCCC;5,584\nCCCl;820\n')
    caplog.clear()
    ds = load_csv(path, "smiles", ["MW"], "regression", sep=None, split="random", cache_dir=tmp_path / "c",
                  decimal=",")
    assert sorted(round(g.y.item(), 4) for g in _all(ds)) == [2.47, 5.584, 440.0, 820.0]
    # a decimal comma that cannot be a group of thousands ('0,125') beside whole numbers: no such warning
    path.write_text('smiles;MW\nCCO;0,125\nCCN;150\nCCC;2,500\nCCCl;1200\n')
    caplog.clear()
    load_csv(path, "smiles", ["MW"], "regression", sep=None, split="random", cache_dir=tmp_path / "c2", decimal=",")
    assert "thousands" not in caplog.text
    path.write_text('smiles;MW\nCCO;2,470\nCCN;440\nCCC;5,584\nCCCl;820\n')
    caplog.clear()
    load_csv(path, "smiles", ["MW"], "regression", sep=None, split="random", cache_dir=tmp_path / "c3", decimal=",")
    assert (f"{path}: target column 'MW': every number with a comma has three digits after it ('2,470' on line 2), as "
            "thousands separators do, and 2 others are whole numbers of three digits or more ('440' on line 3): "
            "--decimal , reads 2,470 as 2.47; if the commas separate thousands, remove them from the file and drop "
            "--decimal ,") in caplog.text


def test_large_molecules_are_noted_and_warned(tmp_path, caplog):
    caplog.set_level("WARNING", logger="siggate.data.csvdata")
    path = tmp_path / "big.csv"
    path.write_text("smiles,y\n" + "".join(f"{s},{i}\n" for i, s in enumerate(GOOD)) + "C" * 1200 + ",3\n")
    ds = load_csv(path, "smiles", ["y"], "regression", split="random", cache_dir=tmp_path / "c")
    assert [(n.index, n.issue, n.detail) for n in ds.notes] == [
        (12, "large molecule", "1200 atoms, above siggate predict's limit of 1000 (--max-atoms)")]
    msgs = [r.getMessage() for r in caplog.records if "atoms" in r.getMessage()]
    assert len(msgs) == 1 and msgs[0].startswith("big.csv: 1 molecules have more than 1000 atoms (largest 1200)")


def test_run_tables_list_every_row(csv_file, tmp_path):
    from siggate.data.csvdata import write_run_tables

    ds = load_csv(csv_file, "smiles", ["y1"], "regression", split="column:fold", cache_dir=tmp_path / "c")
    write_run_tables(ds, tmp_path)
    with open(tmp_path / "splits.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [int(r["row"]) for r in rows] == list(range(len(ROWS)))
    assert [r["split"] for r in rows] == ["train", "dropped", "train", "dropped", "train", "dropped", "dropped",
                                          "dropped", "val", "test", "train", "dropped", "train", "test", "val"]
    assert rows[7]["reason"] == "missing target" and rows[0]["smiles"] == "CCO"
    with open(tmp_path / "data_report.csv", newline="") as fh:
        report = [(int(r["row"]), r["issue"]) for r in csv.DictReader(fh)]
    assert report == [(1, "invalid molecule"), (3, "invalid molecule"), (5, "invalid molecule"), (6, "bad target"),
                      (7, "missing target"), (11, "missing target")]


def test_val_fraction_of_a_binary_task_draws_from_each_class():
    """Drawn over all training rows, 10% of 100 rows with 3 positives held no positive at any of
    five seeds, and the validation ROC-AUC was undefined; drawn per class, each class gives its
    share (at least one row). A regression draw is the one it was (one stratum)."""
    from pathlib import Path

    from siggate.data.base import DataError
    from siggate.data.csvdata import _draw_val

    canon = [f"m{i}" for i in range(100)]
    labels = [1.0 if i % 40 == 0 else 0.0 for i in range(100)]
    idx = {"train": list(range(100)), "val": [], "test": []}
    for seed in range(5):
        plain = _draw_val(idx, canon, 0.1, seed, Path("d.csv"))
        assert len(plain["val"]) == 10 and not any(labels[j] for j in plain["val"])
        drawn = _draw_val(idx, canon, 0.1, seed, Path("d.csv"), strata=labels)
        assert sum(labels[j] for j in drawn["val"]) == 1 and len(drawn["val"]) == 11
        assert sorted(drawn["train"] + drawn["val"]) == list(range(100))
    # a regression draw is the one it was before the strata (this list: the draw at 2dd630f)
    twice = [f"m{i % 50}" for i in range(100)]
    assert _draw_val(idx, twice, 0.1, 0, Path("d.csv"))["val"] == [2, 4, 18, 23, 36, 52, 54, 68, 73, 86]
    # a molecule whose rows carry both classes goes whole to its first row's class (never split)
    mixed = [float(i % 2) if i < 50 else float((i + 1) % 2) for i in range(100)]
    for seed in range(10):
        val = set(_draw_val(idx, twice, 0.2, seed, Path("d.csv"), strata=mixed)["val"])
        assert all((j in val) == (j + 50 in val) for j in range(50))
    one = {"train": [0, 1], "val": [], "test": []}
    with pytest.raises(DataError, match="the training rows of class 0 hold 1 distinct molecule"):
        _draw_val(one, ["a", "b"], 0.1, 0, Path("d.csv"), strata=[0.0, 1.0])


def test_an_empty_target_column_passes_for_evaluate_only_beside_a_labelled_one(tmp_path):
    """evaluate --data of a two-target model on a file labelled for one target was refused
    ('empty in every row'), though the metrics skip a target without labels."""
    import pandas as pd

    from siggate.data.base import DataError
    from siggate.data.csvdata import check_any_numeric, read_labels

    frame = pd.DataFrame({"a": ["0", "1", "1"], "b": ["", "", ""], "c": ["x", "y", ""]})
    y, _, _ = read_labels(tmp_path / "f.csv", frame, ["a", "b", "c"], "multilabel")
    check_any_numeric(tmp_path / "f.csv", frame, ["a", "b"], y[:, :2], allow_empty=True)
    with pytest.raises(DataError, match="'b' is empty in every row"):
        check_any_numeric(tmp_path / "f.csv", frame, ["a", "b"], y[:, :2])
    with pytest.raises(DataError, match="'b' is empty in every row"):  # nothing to score at all
        check_any_numeric(tmp_path / "f.csv", frame, ["b"], y[:, 1:2], allow_empty=True)
    with pytest.raises(DataError, match="'c' holds no numeric value"):  # a wrong column stays refused
        check_any_numeric(tmp_path / "f.csv", frame, ["a", "c"], y[:, [0, 2]], allow_empty=True)


def test_float32_rounding_refuses_only_labels_it_would_change_at_their_spread(tmp_path):
    """Labels on a large offset for their spread are refused (float32 would round -1000002.3 by
    1/32); labels written to an instrument's precision are not (a density 1.0012 +- 5e-4, a
    melting point 298.15 +- 0.03 K), and the constant to subtract is rounded at the spread's decade."""
    import numpy as np

    from siggate.data.base import DataError
    from siggate.data.csvdata import check_float32_labels

    rng = np.random.default_rng(0)
    for ok in (1.0 + rng.normal(0, 5e-4, 50).round(4), 298.15 + rng.normal(0, 0.03, 50).round(2),
               7.0 + rng.normal(0, 1.3, 50)):
        check_float32_labels(tmp_path / "x.csv", ["y"], ok[:, None])
    offset = -1e6 - 2.3 + rng.normal(0, 1.5, 50)
    with pytest.raises(DataError, match=r"\(median -1000002.564, .*subtract a constant such as -1000003 from the column first"):
        check_float32_labels(tmp_path / "x.csv", ["y"], offset[:, None])
    nan_kept = np.vstack([offset[:, None], [[np.nan]]])  # missing labels do not count
    with pytest.raises(DataError, match="its labels sit far from 0 for their spread"):
        check_float32_labels(tmp_path / "x.csv", ["y"], nan_kept)


def test_a_label_written_with_its_unit_is_named_so(tmp_path):
    """'5.5 nM' dropped its row as 'not a number' without saying why; the reason names the unit
    (a third of the cells: the rows dropped, the rest trained, as the README says of a few)."""
    smiles = ["CCO", "CCN", "CCC", "c1ccccc1", "CCCl", "CCBr", "CCOC", "CCNC", "c1ccncc1"]
    labels = ["5.5 nM", "12uM", "2.0", "1", "0.5", "45 %", "3", "n.d.", "7"]
    path = tmp_path / "units.csv"
    path.write_text("smiles,y\n" + "".join(f"{s},{v}\n" for s, v in zip(smiles, labels)), encoding="utf-8")
    ds = load_csv(path, "smiles", ["y"], "regression", split="random", cache_dir=tmp_path / "cache")
    unit = " (a number with its unit: write the numbers alone, every label of the column in one unit)"
    assert {r.index: r.reason for r in ds.invalid} == {
        0: f"target column 'y': '5.5 nM' is not a number{unit}", 1: f"target column 'y': '12uM' is not a number{unit}",
        5: f"target column 'y': '45 %' is not a number{unit}", 7: "missing target"}  # (n.d.: not determined)
    assert sorted(g.smiles for g in _all(ds)) == sorted(s for i, s in enumerate(smiles) if i not in (0, 1, 5, 7))


def test_labels_with_typographic_minus_signs_are_read_and_mostly_unreadable_columns_refused(tmp_path):
    """A file exported from a word processor or ChemDraw writes '−' (U+2212) or '–' for '-':
    every negative label was dropped as "not a number" and the run trained on the positive few,
    exit 0. They are read as minus signs now; a censored value says so; and a column whose values
    are mostly not numbers is refused, not trained on the rest."""
    from siggate.data.csvdata import DataError

    smiles = ["CCO", "CCN", "CCC", "c1ccccc1", "CCCl", "CCBr", "CCOC", "CCNC", "c1ccncc1", "CC(C)O"]
    labels = ["\u22121.5", "\uff0d0.5", ">3", "2.0", "\u22120.25", "\u20131e-1", "1", "0", "\u22122", "<=4"]
    path = tmp_path / "minus.csv"
    path.write_text("smiles,y\n" + "".join(f"{s},{v}\n" for s, v in zip(smiles, labels)), encoding="utf-8")
    ds = load_csv(path, "smiles", ["y"], "regression", split="random", cache_dir=tmp_path / "cache")
    got = {g.smiles: g.y.item() for g in _all(ds)}
    assert got == pytest.approx({"CCO": -1.5, "CCN": -0.5, "c1ccccc1": 2.0, "CCCl": -0.25, "CCBr": -0.1, "CCOC": 1.0,
                                 "CCNC": 0.0, "c1ccncc1": -2.0})
    bad = {r.index: r.reason for r in ds.invalid}
    assert bad == {2: "target column 'y': '>3' is not a number (censored: a bound, not a measurement)",
                   9: "target column 'y': '<=4' is not a number (censored: a bound, not a measurement)"}
    censored = tmp_path / "censored.csv"
    censored.write_text("smiles,y\n" + "".join(f"{s},{'>' if i % 2 or i == 0 else ''}{i}\n" for i, s in enumerate(smiles))
                        + "CCCC,\n")
    with pytest.raises(DataError, match=r"censored.csv: target column 'y': 6 of its 10 values are not finite numbers \('>0' on line 2"):
        load_csv(censored, "smiles", ["y"], "regression", split="random", cache_dir=tmp_path / "cache")


def test_no_data_markers_are_missing_labels_and_evaluate_scores_a_mostly_unlabelled_column():
    """'ND', 'n.d.', '-' are how assays write "no measurement": they are missing labels, not bad
    ones. A column whose values are mostly not numbers is refused for training only: an
    external file for evaluate may hold a target measured on a few rows, which it scores."""
    import numpy as np
    import pandas as pd

    from siggate.data.csvdata import DataError, check_any_numeric, read_labels

    frame = pd.DataFrame({"a": ["1", "2", "3", "4"], "b": ["ND", "n.d.", "\u2013", "x"]})
    y, errors, left_out = read_labels("f.csv", frame, ["a", "b"], "regression")
    # 'x' beside a's label 4: that cell is missing, the row's a kept (the whole row was dropped)
    assert np.isnan(y[:, 1]).all() and errors == [None] * 4 and y[3, 0] == 4
    assert left_out == {3: "target column 'b': 'x' is not a number"}
    y, errors, _ = read_labels("f.csv", pd.DataFrame({"a": ["5\u201310", "\u22121"]}), ["a"], "regression")
    assert errors[0] == "target column 'a': '5\u201310' is not a number" and y[1, 0] == -1  # as the file wrote it
    frame = pd.DataFrame({"a": ["1", "2", "3", "4"], "b": ["5", "x", "y", "z"]})
    y, _, _ = read_labels("f.csv", frame, ["a", "b"], "regression")
    check_any_numeric("f.csv", frame, ["a", "b"], y, allow_empty=True)  # evaluate: counted, not refused
    with pytest.raises(DataError, match=r"f.csv: target column 'b': 3 of its 4 values are not finite numbers"):
        check_any_numeric("f.csv", frame, ["a", "b"], y)
    frame = pd.DataFrame({"a": ["1", "2", "3", "4"], "b": ["5", "inf", "-inf", "1e999"]})  # read as missing now
    y, _, _ = read_labels("f.csv", frame, ["a", "b"], "regression")
    with pytest.raises(DataError, match=r"3 of its 4 values are not finite numbers \('inf' on line 3, '-inf'"):
        check_any_numeric("f.csv", frame, ["a", "b"], y)


def test_rows_are_named_by_their_file_line_when_blank_lines_come_before_them(tmp_path):
    """Messages named row i as line i + 2, off by every blank line (and quoted line break) above
    it: a bad label on line 8 was 'line 5'. read_table keeps each record's first line; the
    dataset's dropped rows, a cached one's too, and the refusals name it."""
    from siggate.data.base import DataError
    from siggate.data.csvdata import check_trainable, read_table

    path = tmp_path / "blank.csv"
    path.write_text('smiles,y,note\n\n\nCCO,1.0,a\n\nCCN,2.0,"two\nlines"\nnot_a_smiles,3,b\nCCC,4,c\n'
                    + "".join(f"{'C' * k}O,{k},x\n" for k in range(2, 12)))
    header, records = read_table(path, ",")
    assert header == ["smiles", "y", "note"] and [r[0] for r in records[:4]] == ["CCO", "CCN", "not_a_smiles", "CCC"]
    assert list(records.lines[:5]) == [4, 6, 8, 9, 10]
    for attempt in ("built", "cached"):
        ds = load_csv(path, "smiles", ["y"], "regression", split="random", cache_dir=tmp_path / "c")
        [bad] = ds.invalid
        assert (bad.index, bad.line, bad.file_line) == (2, 8, 8), attempt
    allbad = tmp_path / "allbad.csv"
    allbad.write_text("smiles,y\n\nxx,1\n\nyy,2\n")
    ds = load_csv(allbad, "smiles", ["y"], "regression", split="random", cache_dir=tmp_path / "c")
    with pytest.raises(DataError, match=r"none of the 2 rows can be used \(line 3: .*; line 5: "):
        check_trainable(allbad, ds)
    comma = tmp_path / "comma.csv"
    comma.write_text("smiles,y\nCCO,1.5\n\n\nCCN,\"2,5\"\n")
    with pytest.raises(DataError, match=r"'2,5' on line 5"):
        load_csv(comma, "smiles", ["y"], "regression", split="random", cache_dir=tmp_path / "c")


def test_a_quote_never_closed_is_refused_where_it_opened_not_read_to_the_end(tmp_path, capsys):
    """A lenient CSV reader took a stray opening quote as the start of a field that ran to the end
    of the file: every later row became that field's text, and training (or predict, or explain)
    went on with three rows of two hundred, saying nothing. Strict reading names the line the quote
    opened on; a quote followed by more text than a delimiter is malformed too."""
    from siggate.cli import main as cli_main
    from siggate.data.base import DataError
    from siggate.data.corpus import read_smiles as corpus_smiles
    from siggate.data.csvdata import read_table

    rows = ["smiles,y,note"] + [f"{'C' * (k % 9 + 1)}O,{k},ok" for k in range(200)]
    rows[3] = 'CCN,2,"5 vial'
    path = tmp_path / "quote.csv"
    path.write_text("\n".join(rows) + "\n")
    with pytest.raises(DataError, match=r"^\S*quote.csv, line 4: a quoted field opened on this line is never closed "
                                        r"\(the file ends inside it\); close the quote, or remove it$"):
        read_table(path, ",")
    with pytest.raises(ValueError, match=r"quote.csv, line 4: a quoted field opened on this line is never closed"):
        corpus_smiles(path)
    # a long corpus: the runaway field passed csv's field size limit first, named 13,000 lines further on
    big = tmp_path / "big.csv"
    big.write_text("\n".join(rows[:4] + ["CCO,1,ok"] * 20000) + "\n")
    with pytest.raises(ValueError, match=r"big.csv, line 4: a quoted field opened on this line is never closed"):
        corpus_smiles(big)
    rc = cli_main(["train", "--data", str(path), "--target-col", "y", "--members", "rf", "--split", "random",
                   "--out", str(tmp_path / "run"), "--cache-dir", str(tmp_path / "c"), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and "line 4: a quoted field opened on this line is never closed" in err, err
    assert "Traceback" not in err and not (tmp_path / "run" / "metrics.json").exists()
    # other flaws of quoting read as before (text after a closing quote joins the field), each line its own
    odd = tmp_path / "odd.csv"
    odd.write_text('smiles,name,y\nCCO,"ethanol" ,1\nCCN,"2"x,2\r\nCCC,propane,"3" \n\nCCCC,butane,4\n')
    header, records = read_table(odd, ",")
    assert [list(r) for r in records] == [["CCO", "ethanol ", "1"], ["CCN", "2x", "2"], ["CCC", "propane", "3 "],
                                          ["CCCC", "butane", "4"]]
    assert list(records.lines) == [2, 3, 4, 6]
    ds = load_csv(odd, "smiles", ["y"], "regression", split="random", cache_dir=tmp_path / "c")
    assert not ds.invalid


def test_a_bad_cell_of_one_target_keeps_the_rows_other_labels(tmp_path):
    """One censored, infinite or non-0/1 cell dropped its whole row, losing the row's good labels
    of the other targets (the README's own fix, an empty cell, keeps them): the cell is missing
    now, the row kept with a 'label left out' note; a row with no other label is still dropped."""
    smiles = ["CCO", "CCN", "CCC", "c1ccccc1", "CCCl", "CCBr", "CCOC", "CCNC", "c1ccncc1", "CC(C)O"]
    a = ["1.0", "2.0", "3.0", "4.0", "5.0", "6.0", "7.0", "8.0", "", "10.0"]
    b = ["0.5", ">100", "1.5", "inf", "2.5", "3.0", "3.5", "4.0", "<2", "5.0"]
    path = tmp_path / "two.csv"
    path.write_text("smiles,a,b\n" + "".join(f"{s},{x},{y}\n" for s, x, y in zip(smiles, a, b)))
    ds = load_csv(path, "smiles", ["a", "b"], "regression", split="random", cache_dir=tmp_path / "cache")
    got = {g.smiles: g.y[0].tolist() for g in _all(ds)}
    assert got["CCN"][0] == 2.0 and math.isnan(got["CCN"][1])  # '>100' missing, a's 2.0 kept
    assert got["c1ccccc1"][0] == 4.0 and math.isnan(got["c1ccccc1"][1])
    assert "c1ccncc1" not in got  # '<2' beside an empty a: nothing left, dropped as before
    assert {r.index: r.reason for r in ds.invalid} == {
        8: "target column 'b': '<2' is not a number (censored: a bound, not a measurement)"}
    notes = {n.index: (n.issue, n.detail) for n in ds.notes}
    assert notes[1] == ("label left out", "target column 'b': '>100' is not a number (censored: a bound, not a "
                        "measurement): that target is missing for this row, its other targets' labels are kept")
    assert notes[3][1].startswith("target column 'b': 'inf' is not finite")


def test_a_heavy_isotope_label_is_one_molecule_with_its_unlabelled_copy(tmp_path):
    """The members read no isotope (atom features, fingerprints), so [13CH3]CN is CCN to all of
    them, but the duplicate key kept the label: a labelled copy landed in test with its molecule
    in training, unsaid. One molecule now, in one split; a deuterium (an atom of the graph) stays
    its own molecule."""
    from siggate.data.csvdata import canonical_smiles

    base = [Chem.MolToSmiles(Chem.MolFromSmiles(s)) for s in
            ("CCN", "Cc1ccccc1", "CCO", "CCCl", "c1ccncc1", "CC(C)O", "CCCC", "OCCO", "CC(=O)O", "CN(C)C")]
    rows = [(s, i) for i, s in enumerate(base * 3)]  # 30 rows: enough for a random split
    labelled = {"CCN": "[13CH3]CN", "Cc1ccccc1": "[13CH3]c1ccccc1", "CCCl": "CC[37Cl]", "CCO": "[2H]OCC"}
    rows += [(labelled[s], 100 + i) for i, s in enumerate(labelled)]
    path = tmp_path / "iso.csv"
    path.write_text("smiles,y\n" + "".join(f"{s},{y}\n" for s, y in rows))
    ds = load_csv(path, "smiles", ["y"], "regression", split="random", cache_dir=tmp_path / "c")
    where: dict = {}
    for name, graphs in ds.splits.items():
        for g in graphs:
            where.setdefault(canonical_smiles(g.smiles), set()).add(name)
    assert all(len(s) == 1 for s in where.values()), where
    assert canonical_smiles("[13CH3]CN") == canonical_smiles("CCN") == "CCN"
    assert canonical_smiles("[1*]c1ccccc1") == "*c1ccccc1" and canonical_smiles("[13#6]C") == canonical_smiles("[C]C")
    assert canonical_smiles("CC[37Cl]") == "CCCl" and canonical_smiles("[2H]OCC") != "CCO"
    assert len(where) == len(base) + 1  # the deuterated ethanol is a molecule of its own
    # stereo the label alone made goes with it: one molecule spelled two ways is one key, the unlabelled one's
    assert canonical_smiles("[13CH3][C@H](C)O") == canonical_smiles("C[C@@H]([13CH3])O") == "CC(C)O"
    assert canonical_smiles("[13CH3]/C(C)=C/Cl") == "CC(C)=CCl"
    assert canonical_smiles("[13CH3][C@H](N)C(=O)O") == canonical_smiles("C[C@H](N)C(=O)O")  # a real centre stays
    # a labelled salt's parent is its unlabelled molecule's: the note of a parent across splits names it
    salts = tmp_path / "salts.csv"
    salts.write_text("smiles,y,split\nCCN,1,train\nCCO,2,train\nCCC,3,val\n[13CH3]C[NH3+].[Cl-],4,test\n")
    ds = load_csv(salts, "smiles", ["y"], "regression", split="column:split", cache_dir=tmp_path / "c2")
    assert [n.index for n in ds.notes if n.issue == "parent across splits"] == [0, 3], ds.notes
