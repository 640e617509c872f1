"""siggate.data.csvdata.load_csv on small CSV files written by the tests."""

from __future__ import annotations

import csv
import math

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
    (GOOD[4], "", "", "train"),  # 7: no target at all (invalid for regression, kept for multilabel)
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
    assert bad[7] == "no target value" and bad[11] == "no target value"
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


def test_multilabel_keeps_missing_labels(csv_file, tmp_path):
    ds = load_csv(csv_file, "smiles", ["y2"], "multilabel", split="random", cache_dir=tmp_path)
    assert ds.info.metric == "ap" and ds.info.num_tasks == 1 and ds.info.target_names == ["y2"]
    assert sorted(r.index for r in ds.invalid) == [1, 3, 5]  # only the bad molecules
    by_idx = {g.idx: g for g in _all(ds)}
    assert math.isnan(by_idx[2].y.item()) and math.isnan(by_idx[7].y.item())  # missing labels kept
    assert by_idx[4].y.tolist() == [[1.0]] and by_idx[6].y.tolist() == [[1.0]]
    # two columns: a row with every label missing is still kept, labels must be 0/1
    ds2 = load_csv(csv_file, "smiles", ["y2", "y1"], "multilabel", split="random", cache_dir=tmp_path)
    bad = {r.index: r.reason for r in ds2.invalid}
    assert 7 not in bad and 11 not in bad
    assert "label '1.5' is not 0 or 1" in bad[0] and "'abc' is not a number" in bad[6]
    g7 = {g.idx: g for g in _all(ds2)}[7]
    assert g7.y.shape == (1, 2) and torch.isnan(g7.y).all()


def test_binary_metric_and_missing(tmp_path):
    path = tmp_path / "b.csv"
    path.write_text("smiles,label\nCCO,1\nCCN,0\nCCC,\nc1ccccc1,2\nCCCl,1\n")
    ds = load_csv(path, "smiles", ["label"], "binary", split="random", cache_dir=tmp_path / "c")
    assert ds.info.metric == "rocauc" and ds.info.task == "binary"
    bad = {r.index: r.reason for r in ds.invalid}
    assert bad[2] == "no target value" and "not 0 or 1" in bad[3]
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
