"""siggate pretrain, train.init and the shipped pretrained weights (issue 22, item 3)."""

from __future__ import annotations

import csv
import gzip
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from recipe_flags import GNN_ALONE
from siggate.config import ConfigError, load_config
from siggate.data.corpus import benchmark_test_smiles, inchikey, moses_train_path, read_smiles
from siggate.train import init_weights
from siggate.train.pretrain import CLIP_Z, build_corpus, pretrain, pretrain_config

IN_CI = os.environ.get("CI", "").strip().lower() == "true"
ROOT = Path(__file__).resolve().parents[1]
CSV = ["data.csv=data.csv", "data.target_cols=y"]  # a csv config names its file (not read here)

# 60 distinct small molecules (a few written twice in another form, and one bad line)
BASE = ["CCO", "CCN", "CCC", "CCCC", "CCCCC", "CCCCCC", "c1ccccc1", "Cc1ccccc1", "CCc1ccccc1", "Oc1ccccc1",
        "Nc1ccccc1", "Clc1ccccc1", "Brc1ccccc1", "CC(=O)O", "CC(=O)N", "CC(=O)OC", "CCOC(=O)C", "C1CCCCC1",
        "C1CCNCC1", "C1CCOCC1", "c1ccncc1", "c1ccoc1", "c1ccsc1", "c1cc[nH]c1", "CC(C)O", "CC(C)N", "CC(C)C",
        "CC(C)(C)O", "OCCO", "NCCN", "OCCN", "CC#N", "C=CC", "C=CC=C", "CC=O", "O=CO", "NC(N)=O", "CS(C)=O",
        "CSC", "CCS", "FC(F)F", "ClCCl", "OC(=O)CC(=O)O", "c1ccc2ccccc2c1", "c1ccc(cc1)O", "COc1ccccc1",
        "CC(=O)c1ccccc1", "O=C(O)c1ccccc1", "Cc1ccncc1", "CCCCCCCC", "CCCCO", "CCCCN", "OC1CCCCC1",
        "NC1CCCCC1", "CC1CCCCC1", "c1ccc(N)nc1", "CNC", "CN(C)C", "COC", "CCOCC"]


def _corpus_file(tmp_path: Path, gz: bool = False) -> Path:
    lines = ["SMILES"] + BASE + ["OCC", "C(C)O", "not_a_smiles"]  # OCC and C(C)O are ethanol again
    path = tmp_path / ("corpus.csv.gz" if gz else "corpus.csv")
    data = ("\n".join(lines) + "\n").encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def test_read_smiles_csv_gz_and_smi(tmp_path):
    csv_path = _corpus_file(tmp_path, gz=True)
    got = read_smiles(csv_path)
    assert got[:3] == ["CCO", "CCN", "CCC"] and len(got) == len(BASE) + 3
    smi = tmp_path / "x.smi"
    smi.write_text("CCO id1\n\nc1ccccc1\tbenzene\n")
    assert read_smiles(smi) == ["CCO", "c1ccccc1"]
    bad = tmp_path / "bad.csv"
    bad.write_text("name,value\na,1\n")
    with pytest.raises(ValueError, match="no SMILES column.*--smiles-col"):
        read_smiles(bad)
    empty = tmp_path / "empty.csv"  # read as a file without a SMILES column "among []"
    empty.write_text("")
    with pytest.raises(ValueError) as caught:
        read_smiles(empty)
    assert str(caught.value) == (f"{empty}: the file is empty (no header row); give a .csv file with a SMILES column "
                                 "and one molecule per row")


def test_read_smiles_takes_a_bom_and_names_a_damaged_or_foreign_file(tmp_path):
    bom = tmp_path / "excel.csv"
    bom.write_bytes(b"\xef\xbb\xbfsmiles,y\nCCO,1\nCCN,2\n")  # Excel's UTF-8 CSV: its header was '\ufeffsmiles'
    assert read_smiles(bom) == ["CCO", "CCN"]
    cut = tmp_path / "cut.smi.gz"
    whole = gzip.compress(b"CCO\n" * 500)
    cut.write_bytes(whole[:len(whole) - 8])  # its trailer cut off
    with pytest.raises(ValueError, match=r"cut\.smi\.gz: the compressed file is truncated or corrupt .*; compress it again"):
        read_smiles(cut)
    latin = tmp_path / "latin.smi"
    latin.write_bytes("CCO caf\xe9\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin\.smi is not UTF-8 text \(byte 0xe9\); save it as UTF-8"):
        read_smiles(latin)


def test_read_smiles_reads_every_compression_that_train_reads(tmp_path):
    # a corpus compressed as bzip2, xz or a one-file zip was refused as "not UTF-8 text" (gzip alone
    # was told by its first bytes); what it holds is told by the name under the compression's suffix
    import bz2
    import lzma
    import zipfile

    data = ("SMILES,y\n" + "".join(f"{s},1\n" for s in BASE[:5])).encode()
    for name, pack in (("c.csv.bz2", bz2.compress), ("c.csv.xz", lzma.compress), ("c.csv.gz", gzip.compress)):
        (tmp_path / name).write_bytes(pack(data))
        assert read_smiles(tmp_path / name) == BASE[:5], name
    (tmp_path / "named.gz").write_bytes(bz2.compress(b"CCO x\nCCN\n"))  # by the bytes, not the name
    assert read_smiles(tmp_path / "named.gz") == ["CCO", "CCN"]
    with zipfile.ZipFile(tmp_path / "c.csv.zip", "w") as z:
        z.writestr("inner.csv", data)
    assert read_smiles(tmp_path / "c.csv.zip") == BASE[:5]
    with zipfile.ZipFile(tmp_path / "lib.zip", "w") as z:  # a zip's own file names what it holds
        z.writestr("inner.csv", data)
    assert read_smiles(tmp_path / "lib.zip") == BASE[:5]
    with zipfile.ZipFile(tmp_path / "two.zip", "w") as z:
        z.writestr("a.smi", "CCO\n")
        z.writestr("b.smi", "CCN\n")
    with pytest.raises(ValueError, match=r"two\.zip is a zip archive of 2 files \(a\.smi, b\.smi\); unzip it"):
        read_smiles(tmp_path / "two.zip")
    cut = tmp_path / "cut.csv.xz"
    cut.write_bytes(lzma.compress(data)[:-20])
    with pytest.raises(ValueError, match=r"cut\.csv\.xz: the compressed file is truncated or corrupt"):
        read_smiles(cut)


def test_an_exclude_file_that_yields_no_molecule_is_refused(tmp_path, monkeypatch):
    # a CSV named .txt read as one SMILES per line ('CCO,1.0'): nothing parsed, nothing excluded, no word said
    kw = dict(molecules=1000, seed=0, data_root=tmp_path / "none", progress=False, test_sets=())
    as_text = tmp_path / "test_set.txt"
    as_text.write_text("smiles,y\nc1ccccc1,1.0\nOc1ccccc1,2.0\n")
    with pytest.raises(ConfigError, match=r"--exclude .*test_set\.txt: none of its 3 lines is a molecule RDKit reads"):
        build_corpus(_corpus_file(tmp_path), tmp_path / "c", exclude_files=[str(as_text)], **kw)
    other_col = tmp_path / "test_set.csv"
    other_col.write_text("mol,y\nc1ccccc1,1.0\n")
    with pytest.raises(ConfigError, match=r"--exclude: .*test_set\.csv: no SMILES column among \['mol', 'y'\]; name that "
                                          r"column smiles \(--smiles-col names the corpus's column\)"):
        build_corpus(_corpus_file(tmp_path), tmp_path / "c", exclude_files=[str(other_col)], **kw)
    assert not (tmp_path / "c" / "corpus.csv").exists()
    # the arguments, before any file is read: a corpus too small to split, an exclude file that is not there
    with pytest.raises(ConfigError, match=r"^pretrain --molecules 5: a corpus needs at least 10 molecules$"):
        build_corpus(tmp_path / "not_read.smi", tmp_path / "c", **{**kw, "molecules": 5})
    with pytest.raises(ConfigError, match=r"^--exclude .*gone\.smi: no such file$"):
        build_corpus(_corpus_file(tmp_path), tmp_path / "c", exclude_files=[str(tmp_path / "gone.smi")], **kw)
    # a corpus file too short: before the benchmarks' test sets are read (a minute for molpcba's InChIKeys)
    short = tmp_path / "short.smi"
    short.write_text("CCO\nCCN\n\nCCC\n")
    import siggate.data.corpus as corpus

    def unread(*args, **kwargs):
        raise AssertionError("the test sets were read")

    monkeypatch.setattr(corpus, "benchmark_test_smiles", unread)
    with pytest.raises(ConfigError, match=r"test_set\.txt: none of its 3 lines is a molecule"):  # before them too
        build_corpus(_corpus_file(tmp_path), tmp_path / "c", exclude_files=[str(as_text)], **{**kw, "test_sets": None})
    with pytest.raises(ConfigError, match=r"^pretrain: only 3 SMILES in .*short\.smi; a corpus needs at least 10 "
                                          r"molecules$"):
        build_corpus(short, tmp_path / "c", **{**kw, "test_sets": None})
    monkeypatch.undo()
    # enough lines, too few of them molecules: after the selection, named as such
    (tmp_path / "bad.smi").write_text("CCO\nCCN\n" + "not_a_smiles\n" * 10)
    with pytest.raises(ConfigError, match=r"^pretrain: only 2 usable molecules of the 12 in .*bad\.smi \(0 removed as "
                                          r"benchmark test molecules or molecules of --exclude, 0 duplicates, 10 invalid\)"):
        build_corpus(tmp_path / "bad.smi", tmp_path / "c", **kw)
    # every molecule excluded: said so (it read 'only 0 usable molecules' with no cause)
    source = _corpus_file(tmp_path)
    with pytest.raises(ConfigError, match=r"^pretrain: only 0 usable molecules of the \d+ in .* \([1-9]\d* removed as "
                                          r"benchmark test molecules or molecules of --exclude, \d+ duplicates, 1 invalid\)"):
        build_corpus(source, tmp_path / "c2", exclude_files=[str(source)], **{**kw, "test_sets": ()})


def test_inchikey_identifies_one_molecule_across_spellings():
    assert inchikey("CCO") == inchikey("OCC") == inchikey("C(C)O") == "LFQSCWFLJHTTHZ-UHFFFAOYSA-N"
    assert inchikey("not_a_smiles") is None


def test_corpus_drops_invalid_duplicates_and_excluded(tmp_path):
    exclude = tmp_path / "test_set.smi"
    exclude.write_text("c1ccccc1\nOc1ccccc1\n")  # two corpus molecules are another benchmark's test molecules
    meta = build_corpus(_corpus_file(tmp_path), tmp_path / "c", molecules=1000, seed=0, data_root=tmp_path / "none",
                        exclude_files=[str(exclude)], progress=False, test_sets=())
    assert meta["read"] == len(BASE) + 3
    # OCC and C(C)O are ethanol again; BASE spells phenol twice (Oc1ccccc1, c1ccc(cc1)O), and
    # whichever spelling comes second is a duplicate of an excluded molecule, not a new one
    assert (meta["invalid"], meta["duplicate"], meta["in_test_set"]) == (1, 3, 2)
    assert meta["kept"] == len(BASE) - 1 - 2
    assert meta["test_sets"][f"file:{exclude}"] == {"molecules": 2, "inchikeys": 2, "sha256": hashlib.sha256(
        "\n".join(sorted({inchikey("c1ccccc1"), inchikey("Oc1ccccc1")})).encode()).hexdigest()}
    import csv

    rows = list(csv.DictReader(open(tmp_path / "c" / "corpus.csv")))
    assert len(rows) == meta["kept"] and set(rows[0]) == {"smiles", "split", *meta["descriptors"]}
    keys = {inchikey(r["smiles"]) for r in rows}
    assert inchikey("c1ccccc1") not in keys and len(keys) == len(rows)
    train = [r for r in rows if r["split"] == "train"]
    for name in ("MolWt", "TPSA"):
        col = torch.tensor([float(r[name]) for r in train], dtype=torch.float64)
        assert abs(col.mean().item()) < 1e-3 and col.std(unbiased=False).item() == pytest.approx(1.0, abs=1e-3)
    assert max(abs(float(r[n])) for r in rows for n in meta["descriptors"]) <= CLIP_Z
    # the same call again reuses the corpus; another seed draws it anew
    again = build_corpus(_corpus_file(tmp_path), tmp_path / "c", molecules=1000, seed=0, data_root=tmp_path / "none",
                         exclude_files=[str(exclude)], progress=False, test_sets=())
    assert again["csv_sha256"] == meta["csv_sha256"] and again["seconds"] == meta["seconds"]
    # a resuming run (keep) never replaces the corpus its model was trained on: other arguments are named
    before = (tmp_path / "c" / "corpus.csv").read_bytes()
    with pytest.raises(ConfigError, match=r"pretrain --resume: the run's corpus in .* was built otherwise \(molecules "
                                          r"1000 then, 500 now\); resume with the run's own"):
        build_corpus(_corpus_file(tmp_path), tmp_path / "c", molecules=500, seed=0, data_root=tmp_path / "none",
                     exclude_files=[str(exclude)], progress=False, test_sets=(), keep=True)
    assert (tmp_path / "c" / "corpus.csv").read_bytes() == before
    # an edited corpus.csv with the run's own arguments: the remedy is the file, not the flags
    (tmp_path / "c" / "corpus.csv").write_bytes(before + b"\n")
    with pytest.raises(ConfigError) as caught:
        build_corpus(_corpus_file(tmp_path), tmp_path / "c", molecules=1000, seed=0, data_root=tmp_path / "none",
                     exclude_files=[str(exclude)], progress=False, test_sets=(), keep=True)
    assert str(caught.value).endswith("was built otherwise (corpus.csv edited since); put back the corpus.csv the "
                                      "run was trained on (meta.json's csv_sha256), or pretrain into a new --out")
    assert (tmp_path / "c" / "corpus.csv").read_bytes() == before + b"\n"
    # corpus.csv removed (meta.json kept): a resume with other arguments rebuilt the corpus, wrote its
    # record over the run's and was refused only then, after which the run's own flags were refused
    # too; now the other arguments are named with nothing written, and the run's own build it again,
    # checked against the record
    (tmp_path / "c" / "corpus.csv").unlink()
    record = (tmp_path / "c" / "meta.json").read_bytes()
    with pytest.raises(ConfigError) as caught:
        build_corpus(_corpus_file(tmp_path), tmp_path / "c", molecules=500, seed=0, data_root=tmp_path / "none",
                     exclude_files=[str(exclude)], progress=False, test_sets=(), keep=True)
    assert "was built otherwise (molecules 1000 then, 500 now; corpus.csv removed since); resume with the run's " \
        "own" in str(caught.value), caught.value
    assert (tmp_path / "c" / "meta.json").read_bytes() == record and not (tmp_path / "c" / "corpus.csv").exists()
    rebuilt = build_corpus(_corpus_file(tmp_path), tmp_path / "c", molecules=1000, seed=0, data_root=tmp_path / "none",
                           exclude_files=[str(exclude)], progress=False, test_sets=(), keep=True)
    assert rebuilt["csv_sha256"] == meta["csv_sha256"] and (tmp_path / "c" / "corpus.csv").read_bytes() == before
    # built again otherwise (here: the record's digest altered): refused, the record kept, no corpus.csv left
    (tmp_path / "c" / "corpus.csv").unlink()
    altered = json.loads(record)
    altered["csv_sha256"] = "0" * 64
    (tmp_path / "c" / "meta.json").write_text(json.dumps(altered))
    with pytest.raises(ConfigError, match=r"corpus.csv, built again from the run's arguments, is not the corpus the "
                                          r"run was trained on"):
        build_corpus(_corpus_file(tmp_path), tmp_path / "c", molecules=1000, seed=0, data_root=tmp_path / "none",
                     exclude_files=[str(exclude)], progress=False, test_sets=(), keep=True)
    assert json.loads((tmp_path / "c" / "meta.json").read_text()) == altered
    assert not (tmp_path / "c" / "corpus.csv").exists() and not (tmp_path / "c" / "corpus.csv.tmp").exists()


def test_every_registered_molecule_benchmark_is_kept_out_of_the_corpus_or_named():
    """A registered graph-level dataset's test molecules are read and dropped from the pretraining
    corpus (``TEST_SETS``), or ``NOT_EXCLUDED`` says why not: a new benchmark without either would
    reach the corpus unnoticed."""
    from siggate.data.catalog import DATASET_META
    from siggate.data.corpus import NOT_EXCLUDED, TEST_SETS

    molecules = {name for name, meta in DATASET_META.items() if meta["level"] == "graph"}
    assert molecules - set(TEST_SETS) == set(NOT_EXCLUDED)
    assert not set(TEST_SETS) & set(NOT_EXCLUDED)


def test_benchmark_test_sets_named_when_missing(tmp_path):
    found, missing = benchmark_test_smiles(tmp_path / "nowhere", names=("zinc", "nci5k"))
    assert "zinc" in missing and len(found["nci5k"]) > 400
    from siggate.data.corpus import FROM_DATA_ROOT

    found, missing = benchmark_test_smiles(None, names=FROM_DATA_ROOT + ("nci5k",))
    assert list(found) == ["nci5k"] and list(missing) == list(FROM_DATA_ROOT)
    assert set(missing.values()) == {"no data root (--data-root; default: $SIGGATE_DATA, else ../shared/data beside "
                                     "a checkout of siggate)"}


def test_a_corpus_file_with_excels_sep_line_or_molfiles_is_named(tmp_path):
    """The corpus reader named the ``sep=,`` line's columns as missing; an SD file's atom lines
    would have been read as SMILES (its molecules are read now)."""
    from siggate.data.corpus import read_smiles

    sep = tmp_path / "c.csv"
    sep.write_text("sep=,\nsmiles\nCCO\nCCN\n")
    with pytest.raises(ValueError, match="line 1 is Excel's 'sep=,' line, which names the delimiter above the header"):
        read_smiles(sep)
    from rdkit import Chem

    sdf = tmp_path / "m.smi"  # (named as a SMILES file: told by its content), read as its molecules
    sdf.write_text("".join(Chem.MolToMolBlock(Chem.MolFromSmiles(s)) + "$$$$\n" for s in ("OCC", "c1ccccc1N")))
    assert read_smiles(sdf) == ["CCO", "Nc1ccccc1"]
    with pytest.raises(ValueError, match="--smiles-col smiles names a CSV's column, and this file is an SD file"):
        read_smiles(sdf, "smiles")


def test_a_missing_moleculeace_package_is_named_with_the_command_that_installs_it(monkeypatch):
    """Without MoleculeACE the warning said only 'No package metadata was found for MoleculeACE',
    where ``--smiles moses`` without molsets names the pip command."""
    import importlib.metadata

    real = importlib.metadata.distribution

    def distribution(name):
        if name == "MoleculeACE":
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "distribution", distribution)
    found, missing = benchmark_test_smiles(None, names=("moleculeace",))
    assert found == {} and missing == {"moleculeace": "MoleculeACE is not installed: pip install --no-deps "
                                                      "MoleculeACE==3.0.0"}


def test_pretrain_then_finetune_copies_the_backbone(tmp_path):
    out = tmp_path / "pt"
    rec = pretrain(_corpus_file(tmp_path), out, molecules=1000, epochs=1, seed=0, data_root=tmp_path / "none",
                   overrides=["model.layers=2", "model.dim=16", "model.pe_steps=4", "model.pe_dim=4",
                              "train.warmup_epochs=0"], progress=False,
                   test_sets=())
    assert rec["corpus_molecules"] == len(BASE) - 1 and rec["epochs"] == 1
    blob = torch.load(out / "pretrained.pt", map_location="cpu", weights_only=True)
    assert blob["format"] == "siggate-pretrained-1" and blob["pretraining"]["corpus_sha256"]
    run = torch.load(out / "model" / "best.pt", map_location="cpu", weights_only=True)
    assert blob["resolved"] == run["resolved"] and init_weights.pretrained_pool_norm(blob) == \
        run["resolved"]["model.pool_norm"] > 1  # the divisor the layers were trained with travels with them
    with pytest.raises(ConfigError, match="--resume"):
        pretrain(_corpus_file(tmp_path), out, molecules=1000, epochs=1, data_root=tmp_path / "none", progress=False,
                 test_sets=())
    # a finished run resumed is left as it is: its pretrained.pt was written again (its record's time changed,
    # and with it the file's hash that fine-tuned runs record)
    exported = (out / "pretrained.pt").read_bytes()
    again = pretrain(_corpus_file(tmp_path), out, molecules=1000, epochs=1, seed=0, data_root=tmp_path / "none",
                     overrides=["model.layers=2", "model.dim=16", "model.pe_steps=4", "model.pe_dim=4",
                                "train.warmup_epochs=0"], progress=False, test_sets=(), resume=True)
    assert (out / "pretrained.pt").read_bytes() == exported and again == rec
    # a growth stopped between its last epoch and its export left the shorter run's pretrained.pt beside the longer
    # run, and resuming then trained nothing and returned that stale export: it is exported again
    from siggate.files import safe_torch_load
    from siggate.train.checkpoint import atomic_save

    stale = safe_torch_load(out / "pretrained.pt")
    stale["pretraining"] = {**stale["pretraining"], "epochs": 0, "val_mae": 9.0}
    atomic_save(stale, out / "pretrained.pt")
    mended = pretrain(_corpus_file(tmp_path), out, molecules=1000, epochs=1, seed=0, data_root=tmp_path / "none",
                      overrides=["model.layers=2", "model.dim=16", "model.pe_steps=4", "model.pe_dim=4",
                                 "train.warmup_epochs=0"], progress=False, test_sets=(), resume=True)
    assert (mended["epochs"], mended["val_mae"]) == (rec["epochs"], rec["val_mae"])
    assert safe_torch_load(out / "pretrained.pt")["pretraining"]["val_mae"] == rec["val_mae"]
    # --resume where nothing was started is refused (it started a new pretraining in silence)
    with pytest.raises(ConfigError, match="--resume: .*holds no pretraining to continue"):
        pretrain(_corpus_file(tmp_path), tmp_path / "typo", molecules=1000, epochs=1, data_root=tmp_path / "none",
                 progress=False, test_sets=(), resume=True)
    assert not (tmp_path / "typo").exists()

    from siggate.data.base import TaskInfo
    from siggate.train.modelprep import build_model

    cfg = load_config("csv", ["model.layers=2", "model.dim=16", "model.pe_steps=4", "model.pe_dim=4",
                              f"model.pool_norm={init_weights.pretrained_pool_norm(blob)}", *CSV])
    model = build_model(cfg.model, TaskInfo(name="t", task="regression", num_tasks=1, metric="mae"))
    fresh = {k: v.clone() for k, v in model.state_dict().items()}
    report = init_weights.load_init(model, str(out), cfg.model.to_dict())
    state = model.state_dict()
    last = max(int(k.split(".")[1]) for k in state if k.startswith("head."))
    for name, tensor in state.items():
        if name.startswith(f"head.{last}."):
            assert torch.equal(tensor, fresh[name]), name  # the new task's layer keeps its initialisation
        else:
            assert torch.equal(tensor, blob["model"][name]), name
    assert report["copied"] == len(state) - 2 and report["path"].endswith("pretrained.pt")

    other = load_config("csv", ["model.layers=3", "model.dim=16", "model.pe_steps=4", "model.pe_dim=4",
                                "model.pool_norm=5", *CSV])
    with pytest.raises(ConfigError, match=r"model\.layers: pretrained 2, this run 3"):
        init_weights.load_init(build_model(other.model, TaskInfo(name="t", task="regression", num_tasks=1, metric="mae")),
                               str(out / "pretrained.pt"), other.model.to_dict())
    with pytest.raises(ConfigError, match="does not exist"):
        init_weights.resolve_init(str(tmp_path / "nothing.pt"))


def test_pretraining_refuses_its_own_targets_as_inputs(tmp_path, capsys):
    """``pretrain --set model.mol_features=rdkit2d`` gave the model the descriptors it regresses;
    refused before the corpus is built. Morgan counts are no target and stay allowed."""
    from siggate.train.pretrain import pretrain_config
    from test_predict import run_cli

    for kind in ("rdkit2d", "morgan_count+rdkit2d"):
        with pytest.raises(ConfigError, match="gives the model the rdkit2d descriptors as inputs, and pretraining "
                                              "regresses those same descriptors"):
            pretrain_config(None, tmp_path / "c.csv", ["MolWt"], 1, 0, [f"model.mol_features={kind}"])
    assert pretrain_config(None, tmp_path / "c.csv", ["MolWt"], 4, 0,
                           ["model.mol_features=morgan_count"]).model.mol_features == "morgan_count"
    # the recipe's warmup (3 epochs) is kept: a run too short to leave it was trained at the warmup's
    # rising rate alone, never reaching train.lr nor decaying (siggate train refuses it too)
    with pytest.raises(ConfigError, match=r"^pretrain --epochs 3: train.warmup_epochs=3 leaves no epoch after the "
                                          r"warmup of a 3-epoch run; .*\(--set train.warmup_epochs=N with N < 3\)$"):
        pretrain_config(None, tmp_path / "c.csv", ["MolWt"], 3, 0)
    assert pretrain_config(None, tmp_path / "c.csv", ["MolWt"], 3, 0, ["train.warmup_epochs=2"]).train.epochs == 3
    # a node-level dataset's config: named as such (its loss was named as not fitting a regression task)
    with pytest.raises(ConfigError, match=r"^--config pattern: a config of the node-level dataset pattern; pretrain "
                                          r"trains a model of molecules: give a molecule config"):
        pretrain_config("pattern", tmp_path / "c.csv", ["MolWt"], 4, 0)
    # a molecule classifier's config: its loss named, with the key that mends it (which does)
    with pytest.raises(ConfigError, match=r"^--config peptides-func: its train.loss \(bce\) is a classifier's, and "
                                          r"pretraining regresses descriptors: add --set train.loss=auto, or give a "
                                          r"regression config \(csv, the default\)$"):
        pretrain_config("peptides-func", tmp_path / "c.csv", ["MolWt"], 4, 0)
    assert pretrain_config("peptides-func", tmp_path / "c.csv", ["MolWt"], 4, 0,
                           ["train.loss=auto", "train.warmup_epochs=1"]).train.loss == "auto"
    rc, _, err = run_cli(["pretrain", "--smiles", str(_corpus_file(tmp_path)), "--out", str(tmp_path / "pt"),
                          "--epochs", "2", "--data-root", str(tmp_path / "none")], capsys)
    assert rc == 2 and err.strip().splitlines() == [
        "siggate pretrain: error: pretrain --epochs 2: train.warmup_epochs=3 leaves no epoch after the warmup of a "
        "2-epoch run; train for more epochs or lower it (--set train.warmup_epochs=N with N < 2)"]
    assert not (tmp_path / "pt").exists()
    rc, _, err = run_cli(["pretrain", "--smiles", str(_corpus_file(tmp_path)), "--out", str(tmp_path / "pt"),
                          "--set", "model.mol_features=rdkit2d", "--data-root", str(tmp_path / "none")], capsys)
    assert rc == 2 and "siggate pretrain: error: model.mol_features: 'rdkit2d' gives the model" in err
    assert not (tmp_path / "pt").exists()  # refused before the corpus, and nothing left behind


def _csv_recipe_dataset():
    from test_predict import tiny_dataset

    return tiny_dataset(40, pe_steps=16)


def test_finetune_keeps_the_pretrained_pool_norm_and_says_so(caplog, monkeypatch):
    """The shipped weights were trained at pool_norm 21.64 (MOSES' mean size); a fine-tune with
    the csv recipe (pool_norm 0) resolved its own value unannounced. It keeps the pretrained
    one, says so, and records it where predict and resume read it; another explicit value is
    refused as an architecture difference. The set-up reads the weights file once."""
    from siggate.train import init_weights
    from siggate.train.loop import setup_run
    from siggate.train.modelprep import resolve_pool_norm

    caplog.set_level("INFO", logger="siggate.train")
    ds = _csv_recipe_dataset()
    cfg = load_config("csv", [*CSV, "train.init=pretrained"])
    own = resolve_pool_norm(cfg.model, ds.train)["model.pool_norm"]
    assert own != 21.64
    reads = []
    monkeypatch.setattr(init_weights, "resolve_init", lambda s, f=init_weights.resolve_init: reads.append(s) or f(s))
    run = setup_run(cfg.model, cfg.train, ds)
    assert reads == ["pretrained"] and run.init["copied"] > 0
    assert run.resolved == {"model.pool_norm": 21.64} and run.model.pool_norm == 21.64
    assert any(r.getMessage() == f"model.pool_norm: 21.64, the pretrained weights' (pooling 'norm' divides the atom "
                                 f"sum by it; this run's training molecules average {own:g} atoms)"
               for r in caplog.records)

    def setup(overrides):
        c = load_config("csv", overrides)
        return setup_run(c.model, c.train, ds)

    assert setup([*CSV, "train.init=pretrained", "model.pool_norm=21.64"]).resolved == {}
    with pytest.raises(ConfigError, match=r"model\.pool_norm: pretrained 21\.64, this run 5 \(0 takes the pretrained value\)\); use the "
                       r"pretrained model's settings, or train from scratch: --set train\.init=none \(siggate train: "
                       r"--init none\)$"):
        setup([*CSV, "train.init=pretrained", "model.pool_norm=5"])
    assert setup([*CSV, "train.init=''"]).resolved == {"model.pool_norm": own}  # from scratch: its own


def test_init_copies_a_layer_whole_or_not_at_all():
    """With molecule features the head's first layer reads more columns: its weight has another
    shape and stayed fresh while its bias was copied. Now the whole layer stays fresh."""
    from siggate.data.base import TaskInfo
    from siggate.train.modelprep import build_model

    cfg = load_config("csv", [*CSV, "model.mol_features=rdkit2d", "model.pool_norm=21.64"])
    model = build_model(cfg.model, TaskInfo(name="t", task="regression", num_tasks=1, metric="mae"))
    fresh = {k: v.clone() for k, v in model.state_dict().items()}
    report = init_weights.load_init(model, "pretrained", cfg.model.to_dict())
    blob = torch.load(init_weights.resolve_init("pretrained"), map_location="cpu", weights_only=True)
    state = model.state_dict()
    assert set(report["fresh"]) == {"head.0.weight", "head.0.bias", "head.4.weight", "head.4.bias", "mol_mean",
                                    "mol_std"}
    for name in report["fresh"]:
        assert torch.equal(state[name], fresh[name]), name
    assert torch.equal(state["head.2.weight"], blob["model"]["head.2.weight"])  # a layer of the same shape is copied


def test_weights_of_another_datasets_encoders_are_refused_with_the_fix(tmp_path):
    """Weights whose backbone tensors differ only by a dataset's encoders (a node-level run's) were
    refused as 'written for another model', with no fix (helper-187): the message names it."""
    from siggate.data.base import TaskInfo
    from siggate.train.modelprep import build_model

    cfg = load_config("csv", [*CSV, "model.pool_norm=21.64"])
    model = build_model(cfg.model, TaskInfo(name="t", task="regression", num_tasks=1, metric="mae"))
    blob = torch.load(init_weights.resolve_init("pretrained"), map_location="cpu", weights_only=True)
    key = next(k for k in blob["model"] if k.startswith("node_encoder."))
    blob["model"][key] = torch.zeros(3, 3)  # another vocabulary's embedding
    torch.save(blob, tmp_path / "other.pt")
    with pytest.raises(ConfigError, match=r"it was written for another model \(another dataset's node or edge "
                                          r"encoders, or architecture\): give weights of this model, or train from "
                                          r"scratch: --set train\.init=none \(siggate train: --init none\)$"):
        init_weights.load_init(model, str(tmp_path / "other.pt"), cfg.model.to_dict())


def test_a_folder_named_pretrained_here_is_named_beside_the_shipped_weights(tmp_path, monkeypatch, caplog):
    """``--init pretrained`` with a ``./pretrained`` folder (a user's own pretraining) took the
    shipped weights without a word; the warning says which it took and how to give the folder."""
    from siggate.config_args import init_source

    monkeypatch.chdir(tmp_path)
    init_weights._warn_shadowed.cache_clear()
    shipped = init_weights.resolve_init("pretrained")
    assert not caplog.records
    (tmp_path / "pretrained").mkdir()
    # an empty folder of that name (a run's own output folder, --out pretrained, made moments before) holds no
    # weights to mistake: no warning (helper-187)
    assert init_weights.resolve_init("pretrained") == shipped and not caplog.records
    (tmp_path / "pretrained" / "pretrained.pt").write_bytes(b"weights")
    with caplog.at_level("WARNING", logger="siggate.train"):
        assert init_weights.resolve_init("pretrained") == shipped  # still the shipped weights
        init_weights.resolve_init("pretrained")  # said once
    assert [r.getMessage() for r in caplog.records] == [
        f"train.init 'pretrained' means the weights shipped with siggate, not {tmp_path / 'pretrained'} here; to "
        "start from that, give it as ./pretrained"]
    # --init Pretrained (recorded 'pretrained') read ./Pretrained before the word was read in any case: said too
    (tmp_path / "pretrained").rename(tmp_path / "Pretrained")
    caplog.clear()
    init_weights._warn_shadowed.cache_clear()
    with caplog.at_level("WARNING", logger="siggate.train"):
        assert init_weights.resolve_init(init_source("Pretrained")) == shipped
    assert [r.getMessage() for r in caplog.records] == [
        f"train.init 'pretrained' means the weights shipped with siggate, not {tmp_path / 'Pretrained'} here; to "
        "start from that, give it as ./Pretrained"]
    # pretrained:NAME is a shipped name, never a path (pretrained:/abs/x read any file, recorded as shipped)
    for name in (f"pretrained:{tmp_path / 'pretrained' / 'pretrained'}", "pretrained:../x", "pretrained:.."):
        with pytest.raises(ConfigError, match=r"pretrained:NAME names shipped weights by their name \(shipped: "
                                              r"default\); give the path of other weights as it is"):
            init_weights.resolve_init(name)


def test_the_word_pretrained_is_read_in_any_case_as_none_is(tmp_path, monkeypatch):
    """``--init None`` trained from scratch, but ``--init Pretrained`` was a path (made absolute,
    then 'does not exist'): the word is read in any case, in the one place that reads ``none``,
    and recorded in its one spelling (a resume with either is the same run); a shipped NAME, a
    file's name, keeps its case."""
    from siggate.config_args import init_source
    from siggate.options import init_is_none, init_is_shipped, shipped_init_name

    monkeypatch.chdir(tmp_path)
    shipped = init_weights.resolve_init("pretrained")
    for word in ("Pretrained", "PRETRAINED", " pretrained ", "Pretrained:default"):
        assert init_is_shipped(word) and not init_is_none(word)
        assert init_source(word) == ("pretrained:default" if ":" in word else "pretrained")  # not made a path
        assert init_weights.resolve_init(word) == shipped
    assert init_source("PreTrained:Other") == "pretrained:Other"
    assert shipped_init_name("PreTrained:Other") == "Other" and shipped_init_name("pretrained") == "default"
    assert shipped_init_name("none") is None and shipped_init_name("./pretrained") is None
    assert not init_is_shipped("pretrainedx") and not init_is_shipped(str(tmp_path / "pretrained"))


def test_shipped_weights_load_and_fit_the_csv_recipe():
    path = init_weights.resolve_init("pretrained")
    assert path.stat().st_size < 8 * 2**20
    blob = torch.load(path, map_location="cpu", weights_only=True)
    rec = blob["pretraining"]
    assert rec["corpus_source"] == "train.csv.gz" and len(rec["corpus_sha256"]) == 64
    assert rec["corpus_molecules"] > 10_000 and rec["removed_test_molecules"] >= 0
    cfg = load_config("csv", CSV)
    saved = blob["config"]["model"]
    assert {k: saved[k] for k in init_weights.ARCH_KEYS if k in saved} == \
        {k: getattr(cfg.model, k) for k in init_weights.ARCH_KEYS if k in saved}


def test_init_from_the_cli_refuses_another_architecture_before_the_folder_and_none_trains_from_scratch(tmp_path):
    """``--init pretrained`` copies the shipped backbone; an architecture the weights do not fit is
    refused in one line before a folder is claimed, naming the key and ``--init none``, which
    trains from scratch (``train.init: ''``)."""
    csv = tmp_path / "d.csv"
    csv.write_text("smiles,y\n" + "".join(f"{s},{len(s) * 0.1:.2f}\n" for s in BASE))

    def train(out, *flags):
        return subprocess.run([sys.executable, "-m", "siggate", "train", "--data", str(csv), "--target-col", "y",
                               "--split", "random", "--out", str(tmp_path / out), "--no-progress", *flags],
                              capture_output=True, text=True, cwd=tmp_path)

    r = train("run", *GNN_ALONE, "--epochs", "2", "--init", "pretrained")
    assert r.returncode == 0, r.stderr[-2000:]
    init = json.loads((tmp_path / "run" / "metrics.json").read_text())["init"]
    assert init["source"] == "pretrained" and init["copied"] > 50

    r = train("other", "--epochs", "1", "--init", "pretrained", "--set", "model.layers=2")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().endswith("has another architecture (model.layers: pretrained 4, this run 2); use the "
                                     "pretrained model's settings, or train from scratch: --set train.init=none "
                                     "(siggate train: --init none)"), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "other").exists()

    r = train("nognn", "--init", "pretrained", "--members", "svr,rf")
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "siggate train: error: --init applies to a GNN member, and --members svr,rf holds no GNN: drop "
        "--init, or add gnn to --members"], r.stderr
    assert not (tmp_path / "nognn").exists()
    # the same key by --set: refused as the flag is (it was ignored, and recorded as the run's init)
    r = train("nognn2", "--set", f"train.init={csv}", "--members", "svr,rf")
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "siggate train: error: --set train.init applies to a GNN member, and --members svr,rf holds no GNN: drop "
        "--set train.init, or add gnn to --members"], r.stderr
    assert not (tmp_path / "nognn2").exists()

    r = train("notweights", "--epochs", "1", "--init", str(csv))
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "d.csv is not a weights file siggate can read" in r.stderr and "or none" in r.stderr, r.stderr
    assert not (tmp_path / "notweights").exists()

    # the flag and the key together: refused (the flag, applied after the --set items, silently won)
    r = train("both", *GNN_ALONE, "--epochs", "1", "--set", "train.init=pretrained", "--init", "NONE")
    assert r.returncode == 2 and r.stderr == "siggate train: error: --init and --set train.init both set train.init; give one\n"
    r = train("scratch", *GNN_ALONE, "--epochs", "1", "--set", "model.layers=2", "--init", "NONE")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "init" not in json.loads((tmp_path / "scratch" / "metrics.json").read_text())
    assert "init: ''" in (tmp_path / "scratch" / "config.yaml").read_text()
    # --init "" is from scratch too (options.init_is_none), not "not given": it fine-tuned the shipped weights
    r = train("empty", *GNN_ALONE, "--epochs", "1", "--set", "model.layers=2", "--init", "")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "init: ''" in (tmp_path / "empty" / "config.yaml").read_text()


def test_members_that_start_later_start_from_the_weights_the_run_started_from(tmp_path):
    """A GNN member that had not started when its run stopped read train.init's file at the resume:
    weights exported again since (or an upgraded shipped file) started it from other weights than
    its siblings, without a word; a relative --set train.init was read from the resume's folder.
    The run records the file's digest, a resume with a member still to start checks it, and
    --set train.init is made absolute as --init is."""
    import shutil

    from siggate.train.init_weights import SHIPPED

    csv = tmp_path / "d.csv"
    csv.write_text("smiles,y\n" + "".join(f"{s},{len(s) * 0.1:.2f}\n" for s in BASE))
    weights = tmp_path / "w.pt"
    shutil.copy(SHIPPED / "default.pt", weights)

    def train(*flags, cwd=tmp_path):
        return subprocess.run([sys.executable, "-m", "siggate", "train", "--data", str(csv), "--target-col", "y",
                               "--split", "random", "--out", str(tmp_path / "ens"), "--no-progress", "--threads", "1",
                               *flags], capture_output=True, text=True, cwd=cwd)

    flags = [*GNN_ALONE, "--ensemble", "2", "--epochs", "1", "--set", "train.warmup_epochs=0", "--set", "train.init=w.pt"]
    r = train(*flags)
    assert r.returncode == 0, r.stderr[-2000:]
    record = yaml.safe_load((tmp_path / "ens" / "members.yaml").read_text())
    assert record["train"]["init"] == str(weights)  # absolute, as --init's
    assert record["_meta"]["init_weights"] == {"path": str(weights.resolve()),
                                               "sha256": hashlib.sha256(weights.read_bytes()).hexdigest()}
    shutil.rmtree(tmp_path / "ens" / "member1")  # as if the run had stopped before member1 started
    original = weights.read_bytes()
    shutil.copy(tmp_path / "ens" / "member0" / "best.pt", weights)  # other weights under the name
    r = train(*flags, "--resume")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    error = r.stderr.strip().splitlines()[-1]
    assert error.startswith(f"siggate train: error: train.init: {weights} holds other weights than when this run "
                            "started (sha256 ") and "GNN member member1 has yet to start from them" in error, error
    weights.write_bytes(original)
    r = train(*flags, "--resume")  # the weights of then: member1 trains from them
    assert r.returncode == 0, r.stderr[-2000:]
    m1 = json.loads((tmp_path / "ens" / "member1" / "metrics.json").read_text())["init"]
    m0 = json.loads((tmp_path / "ens" / "member0" / "metrics.json").read_text())["init"]
    assert m1["sha256"] == m0["sha256"] == hashlib.sha256(original).hexdigest()
    # no GNN member started yet: they all start from the weights as they are now (a warning says so)
    shutil.rmtree(tmp_path / "ens" / "member0")
    shutil.rmtree(tmp_path / "ens" / "member1")
    (tmp_path / "ens" / "metrics.json").unlink()
    shutil.copy(SHIPPED / "default.pt", weights)
    record = yaml.safe_load((tmp_path / "ens" / "members.yaml").read_text())
    record["_meta"]["init_weights"]["sha256"] = "0" * 64  # as if the run had started from other weights
    (tmp_path / "ens" / "members.yaml").write_text(yaml.safe_dump(record, sort_keys=False))
    r = train(*flags, "--resume")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "holds other weights than when this run started; no GNN member has started from those" in r.stderr
    for m in ("member0", "member1"):
        assert json.loads((tmp_path / "ens" / m / "metrics.json").read_text())["init"]["sha256"] == \
            hashlib.sha256(weights.read_bytes()).hexdigest()
    record = yaml.safe_load((tmp_path / "ens" / "members.yaml").read_text())  # the record follows: a later resume
    assert record["_meta"]["init_weights"]["sha256"] == hashlib.sha256(weights.read_bytes()).hexdigest()


def test_init_from_weights_that_read_stereocentres_otherwise_warns_and_is_recorded(tmp_path, capsys, caplog):
    """A CSV run (CIP labels) started from a benchmark run's weights (RDKit's CW/CCW tag) reused the
    embedding's chirality rows for the other meaning without a word, and recorded nothing of it."""
    import logging

    from test_predict import run_cli

    csv = tmp_path / "d.csv"
    csv.write_text("smiles,y\n" + "".join(f"{s},{len(s) * 0.1:.2f}\n" for s in BASE))
    base = ["train", "--data", str(csv), "--target-col", "y", "--split", "random", *GNN_ALONE, "--epochs", "1",
            "--set", "model.layers=1", "--set", "model.dim=16", "--set", "model.pe_dim=4", "--no-progress",
            "--cache-dir", str(tmp_path / "c")]
    assert run_cli([*base, "--init", "none", "--out", str(tmp_path / "src")], capsys)[0] == 0
    blob = torch.load(tmp_path / "src" / "best.pt", weights_only=True)
    assert blob["info"]["chirality"] == "cip"
    blob["info"]["chirality"] = "tag"
    torch.save(blob, tmp_path / "tag.pt")
    for init, said in ((tmp_path / "src", None), (tmp_path / "tag.pt", "tag")):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="siggate"):
            rc, _, err = run_cli([*base, "--init", str(init), "--out", str(tmp_path / f"ft-{init.name}")], capsys)
        assert rc == 0, err
        warned = [r.getMessage() for r in caplog.records if "stereocentres" in r.getMessage()]
        record = json.loads((tmp_path / f"ft-{init.name}" / "metrics.json").read_text())["init"]
        if said is None:
            assert warned == [] and record["chirality"] == "cip"
        else:
            assert warned == [f"train.init: {init} was trained on atom features that read stereocentres by RDKit's "
                              "tag (CW/CCW, in the order a SMILES wrote the neighbours), and this run's read them by "
                              "their CIP label (R/S): the chirality rows of its atom embedding start from the other "
                              "reading's meaning (fine-tuning relearns them)"] and record["chirality"] == "tag"


def test_init_none_is_from_scratch_wherever_it_is_given_and_pretraining_clears_a_recipes_init(tmp_path):
    """``none`` means from scratch in ``--set``, a YAML and the estimator's overrides alike (the
    config stores ``""``); a pretraining whose base recipe names weights starts fresh."""
    assert load_config("csv", [*CSV, "train.init=none"]).train.init == ""
    assert load_config("csv", [*CSV, "train.init=None"]).train.init == ""
    assert load_config("csv", [*CSV, "train.init=pretrained"]).train.init == "pretrained"
    base = tmp_path / "base.yaml"
    base.write_text(yaml.safe_dump({**load_config("csv", CSV).to_dict(), "train": {
        **load_config("csv", CSV).train.to_dict(), "init": "pretrained"}}))
    assert load_config(str(base), []).train.init == "pretrained"
    assert pretrain_config(str(base), tmp_path / "corpus.csv", ["a", "b"], epochs=4, seed=0).train.init == ""
    with pytest.raises(ConfigError, match=r"^train\.init: pretraining starts from a fresh model; drop --set train\.init$"):
        pretrain_config(str(base), tmp_path / "corpus.csv", ["a"], epochs=1, seed=0, overrides=["train.init=pretrained"])


def test_moses_corpus_is_read_from_the_wheel():
    try:
        path = moses_train_path()
    except FileNotFoundError as exc:
        if IN_CI:
            pytest.fail(f"{exc} (the README's test command installs it)")
        pytest.skip(str(exc))
    with gzip.open(path, "rt") as fh:
        assert next(fh).strip() == "SMILES" and sum(1 for _ in fh) == 1_584_663


def test_a_corpus_built_before_a_benchmark_was_known_resumes(tmp_path, monkeypatch):
    """A corpus built before siggate read a benchmark's test set (molpcba came later) was refused on
    resume wherever that benchmark's files are found, with a remedy to hide them; the benchmarks it
    considered are compared, and a new one is no difference for it."""
    from siggate.data import corpus

    monkeypatch.setattr(corpus, "TEST_SETS", {"fake": lambda root: ["c1ccccc1"]})
    first = build_corpus(_corpus_file(tmp_path), tmp_path / "c", molecules=1000, seed=0, data_root=tmp_path / "none",
                         progress=False)
    assert set(first["test_sets"]) == {"fake"} and first["in_test_set"] == 1
    monkeypatch.setattr(corpus, "TEST_SETS", {"fake": lambda root: ["c1ccccc1"], "later": lambda root: ["CCO"]})
    again = build_corpus(_corpus_file(tmp_path), tmp_path / "c", molecules=1000, seed=0, data_root=tmp_path / "none",
                         progress=False, keep=True)
    assert again["csv_sha256"] == first["csv_sha256"]  # reused: "later" was not a benchmark it considered
    monkeypatch.setattr(corpus, "TEST_SETS", {"later": lambda root: ["CCO"]})  # one it considered is unreadable now
    monkeypatch.setitem(corpus.TEST_SETS, "fake", lambda root: (_ for _ in ()).throw(FileNotFoundError("gone")))
    with pytest.raises(ConfigError, match=r"benchmark test sets \['fake'\] then, \[\] now\); make the same benchmarks "
                                          r"readable as then \(--data-root\)"):
        build_corpus(_corpus_file(tmp_path), tmp_path / "c", molecules=1000, seed=0, data_root=tmp_path / "none",
                     progress=False, keep=True)


def test_a_corpus_built_against_another_test_set_is_not_reused(tmp_path, monkeypatch):
    """A corpus was reused whenever the same benchmarks were readable, whatever their test sets held
    now: one built against an older (smaller) test set kept molecules that are test molecules now,
    and its record still said that set was excluded. The test sets' InChIKeys are compared (their
    counts, for a corpus recorded before their digest): a resume is refused, a new build rebuilds."""
    from siggate.data import corpus

    kw = dict(molecules=1000, seed=0, data_root=tmp_path / "none", progress=False)
    monkeypatch.setattr(corpus, "TEST_SETS", {"fake": lambda root: ["c1ccccc1"]})
    first = build_corpus(_corpus_file(tmp_path), tmp_path / "c", **kw)
    kept = {r["smiles"] for r in csv.DictReader(open(tmp_path / "c" / "corpus.csv"))}
    assert "CCO" in kept and first["in_test_set"] == 1
    assert build_corpus(_corpus_file(tmp_path), tmp_path / "c", keep=True, **kw) == first  # the same set: reused
    monkeypatch.setattr(corpus, "TEST_SETS", {"fake": lambda root: ["c1ccccc1", "OCC"]})  # ethanol is a test molecule now
    with pytest.raises(ConfigError, match=r"the test set\(s\) of fake hold other molecules now, which the corpus was "
                                          r"not checked against\); put the data root of then back \(--data-root\), or "
                                          r"pretrain into a new --out"):
        build_corpus(_corpus_file(tmp_path), tmp_path / "c", keep=True, **kw)
    again = build_corpus(_corpus_file(tmp_path), tmp_path / "c", **kw)  # no model trained on it: built again
    assert "CCO" not in {r["smiles"] for r in csv.DictReader(open(tmp_path / "c" / "corpus.csv"))}
    assert again["in_test_set"] > first["in_test_set"]
    # a record from before the digest: its counts decide
    meta = json.loads((tmp_path / "c" / "meta.json").read_text())
    del meta["test_sets"]["fake"]["sha256"]
    (tmp_path / "c" / "meta.json").write_text(json.dumps(meta))
    assert build_corpus(_corpus_file(tmp_path), tmp_path / "c", keep=True, **kw)["csv_sha256"] == again["csv_sha256"]
    monkeypatch.setattr(corpus, "TEST_SETS", {"fake": lambda root: ["c1ccccc1", "OCC", "CCN"]})
    with pytest.raises(ConfigError, match="the test set"):
        build_corpus(_corpus_file(tmp_path), tmp_path / "c", keep=True, **kw)


def test_a_corpus_write_stopped_midway_leaves_no_partial_file(tmp_path, monkeypatch):
    """Ctrl-C while corpus.csv was written left corpus.csv.tmp (for moses, the size of the corpus)
    until a --resume replaced it: it is removed, and the chunks stay for the resume."""
    import types

    from siggate.train import pretrain as pt

    class Stopping:
        rows = 0

        def writerow(self, row):
            Stopping.rows += 1
            if Stopping.rows == 3:
                raise KeyboardInterrupt

    monkeypatch.setattr(pt, "csv", types.SimpleNamespace(writer=lambda fh: Stopping()))
    with pytest.raises(KeyboardInterrupt):
        build_corpus(_corpus_file(tmp_path), tmp_path / "c", seed=0, molecules=1000, data_root=tmp_path / "none",
                     progress=False, test_sets=())
    assert Stopping.rows == 3 and not list((tmp_path / "c").glob("corpus.csv*"))
    assert list((tmp_path / "c" / "partial").glob("descriptors-*.npy"))


def test_an_interrupted_corpus_build_resumes_at_its_first_missing_chunk(tmp_path, monkeypatch):
    """The descriptors of a million molecules take hours: a build stopped midway kept nothing and
    began again. Each chunk is saved when done, a resumed build computes only the chunks missing,
    and a build of other arguments discards the pieces."""
    from siggate.train import pretrain as pt

    monkeypatch.setattr(pt, "CHUNK", 7)
    args = dict(molecules=1000, data_root=tmp_path / "none", progress=False, test_sets=())
    no_warmup = ["train.warmup_epochs=0"]
    ref = build_corpus(_corpus_file(tmp_path), tmp_path / "ref", seed=0, **args)
    csv_ref = (tmp_path / "ref" / "corpus.csv").read_bytes()
    assert ref["kept"] == len(BASE) - 1 and not (tmp_path / "ref" / "partial").exists()
    n_chunks = -(-ref["kept"] // 7)
    real, calls = pt._chunk_descriptors, []

    def counted(stop_at=None):
        def chunk(smiles):
            if len(calls) == stop_at:
                raise KeyboardInterrupt
            calls.append(list(smiles))
            return real(smiles)
        return chunk

    monkeypatch.setattr(pt, "_chunk_descriptors", counted(stop_at=3))
    with pytest.raises(KeyboardInterrupt):
        build_corpus(_corpus_file(tmp_path), tmp_path / "c", seed=0, **args)
    part = tmp_path / "c" / "partial"
    assert sorted(p.name for p in part.glob("descriptors-*.npy")) == [f"descriptors-{i:05d}.npy" for i in range(3)]
    assert (part / "selection.json.gz").is_file() and not (tmp_path / "c" / "corpus.csv").exists()
    calls.clear()
    monkeypatch.setattr(pt, "_chunk_descriptors", counted())
    import siggate.data.corpus as corpus

    reads, read_smiles_before = [], corpus.read_smiles
    monkeypatch.setattr(corpus, "read_smiles", lambda *a, **k: reads.append(a) or [])  # the selection is saved
    again = build_corpus(_corpus_file(tmp_path), tmp_path / "c", seed=0, **args)
    monkeypatch.setattr(corpus, "read_smiles", read_smiles_before)
    assert reads == []  # the source was not read again (1.6 million SMILES for moses)
    assert len(calls) == n_chunks - 3  # the three saved chunks were read, not computed
    assert calls[0] == [line.split(",")[0] for line in csv_ref.decode().splitlines()[1:]][21:28]  # the fourth chunk
    assert (tmp_path / "c" / "corpus.csv").read_bytes() == csv_ref and again["csv_sha256"] == ref["csv_sha256"]
    assert not part.exists()  # the corpus is written: its pieces are gone

    # pieces of another build (seed 0) are discarded by a build of seed 1, never mixed in
    calls.clear()
    monkeypatch.setattr(pt, "_chunk_descriptors", counted(stop_at=2))
    with pytest.raises(KeyboardInterrupt):
        build_corpus(_corpus_file(tmp_path), tmp_path / "d", seed=0, **args)
    calls.clear()
    monkeypatch.setattr(pt, "_chunk_descriptors", counted())
    other = build_corpus(_corpus_file(tmp_path), tmp_path / "d", seed=1, **args)
    seed1 = build_corpus(_corpus_file(tmp_path), tmp_path / "seed1", seed=1, **args)
    assert len(calls) == 2 * n_chunks and other["csv_sha256"] == seed1["csv_sha256"] != ref["csv_sha256"]

    # --resume of a pretraining whose corpus was never written goes on with it (it was refused as
    # "nothing to continue", and the build began again without --resume)
    calls.clear()
    monkeypatch.setattr(pt, "_chunk_descriptors", counted(stop_at=1))
    with pytest.raises(KeyboardInterrupt):
        pretrain(_corpus_file(tmp_path), tmp_path / "run", epochs=1, overrides=no_warmup, **args)
    calls.clear()
    monkeypatch.setattr(pt, "_chunk_descriptors", counted(stop_at=0))
    with pytest.raises(KeyboardInterrupt):  # past the refusal: it went on to the second chunk
        pretrain(_corpus_file(tmp_path), tmp_path / "run", epochs=1, resume=True, overrides=no_warmup, **args)
    assert len(list((tmp_path / "run" / "corpus" / "partial").glob("descriptors-*.npy"))) == 1


def test_corpus_descriptors_from_two_worker_processes_equal_one_and_resume(tmp_path, monkeypatch):
    """Two worker processes give the corpus one gives, and, resuming a build stopped after one
    chunk, compute (and save) only the chunks missing."""
    from siggate.train import pretrain as pt

    monkeypatch.setattr(pt, "CHUNK", 20)
    args = dict(molecules=1000, seed=0, data_root=tmp_path / "none", progress=False, test_sets=())
    one = build_corpus(_corpus_file(tmp_path), tmp_path / "one", **args)
    real = pt._chunk_descriptors

    def stop_after_one(smiles, done=[]):
        if done:
            raise KeyboardInterrupt
        done.append(1)
        return real(smiles)

    monkeypatch.setattr(pt, "_chunk_descriptors", stop_after_one)  # (the workers run the module's own)
    with pytest.raises(KeyboardInterrupt):
        build_corpus(_corpus_file(tmp_path), tmp_path / "two", **args)
    monkeypatch.setattr(pt, "_chunk_descriptors", real)
    saved, write = [], pt.atomic_write_bytes
    monkeypatch.setattr(pt, "atomic_write_bytes", lambda path, data: (saved.append(Path(path).name), write(path, data)))
    two = build_corpus(_corpus_file(tmp_path), tmp_path / "two", workers=2, **args)
    assert -(-one["kept"] // 20) == 3 and two["csv_sha256"] == one["csv_sha256"]
    assert sorted(n for n in saved if n.startswith("descriptors-")) == ["descriptors-00001.npy", "descriptors-00002.npy"]


def test_a_resumed_fine_tune_keeps_the_record_of_the_weights_it_started_from(tmp_path, monkeypatch, capsys):
    """A resumed fine-tune read ``train.init`` again: its metrics named whatever file stood at that
    path now (another pretraining's hash, weights it never started from), a relative ``--init``
    could not resume from another folder, and a moved file could not resume at all. The path is
    recorded absolute, and the checkpoints keep the record; the weights come from ``last.pt``."""
    import shutil

    from siggate.files import file_digest
    from test_predict import run_cli

    csv = tmp_path / "d.csv"
    csv.write_text("smiles,y\n" + "".join(f"{s},{len(s) * 0.1:.2f}\n" for s in BASE))
    work, out = tmp_path / "work", tmp_path / "ft"
    work.mkdir()
    shutil.copy(init_weights.SHIPPED / "default.pt", work / "X.pt")
    started = file_digest(work / "X.pt")
    monkeypatch.chdir(work)
    rc, _, err = run_cli(["train", "--data", str(csv), "--target-col", "y", "--split", "random", "--out", str(out),
                          *GNN_ALONE, "--epochs", "2", "--init", "X.pt", "--no-progress"], capsys)
    assert rc == 0, err
    first = json.loads((out / "metrics.json").read_text())["init"]
    assert first["path"] == first["source"] == str(work / "X.pt") and first["sha256"] == started
    assert yaml.safe_load((out / "config.yaml").read_text())["train"]["init"] == str(work / "X.pt")
    blob = torch.load(work / "X.pt", weights_only=True)  # another pretraining's weights at that path now
    blob["model"] = {k: v + 1 if v.is_floating_point() else v for k, v in blob["model"].items()}
    torch.save(blob, work / "X.pt")
    monkeypatch.chdir(tmp_path)  # and from another folder
    for epochs in ("3", "4"):
        rc, _, err = run_cli(["train", "--resume", str(out), "--epochs", epochs, "--no-progress"], capsys)
        assert rc == 0, err
        metrics = json.loads((out / "metrics.json").read_text())
        assert metrics["init"] == first and metrics["epochs"] == int(epochs)
        (work / "X.pt").unlink(missing_ok=True)  # the second resume: no file at all
    assert not (work / "X.pt").exists()


def test_init_files_siggate_did_not_write_are_refused_in_one_line(tmp_path, capsys):
    """Weights files that torch loads safely but whose config is not a mapping, whose model config
    is a list, or whose pool_norm is not a number failed with tracebacks (exit 1); a run of several
    members as --init is pointed to its GNN member."""
    from test_predict import run_cli

    csv = tmp_path / "d.csv"
    csv.write_text("smiles,y\n" + "".join(f"{s},{len(s) * 0.1:.2f}\n" for s in BASE))
    weights = {"w": torch.zeros(2)}
    for i, blob in enumerate([{"model": weights, "config": "oops"}, {"model": weights, "config": {"model": ["dim"]}},
                              {"model": weights, "config": {"model": {"pooling": "norm", "pool_norm": "abc"}}},
                              {"model": {"w": [1, 2]}}, {"model": weights, "resolved": [1]}]):
        torch.save(blob, tmp_path / f"c{i}.pt")
        rc, out, err = run_cli(["train", "--data", str(csv), "--target-col", "y", "--out", str(tmp_path / f"r{i}"),
                                *GNN_ALONE, "--epochs", "2", "--init", str(tmp_path / f"c{i}.pt")], capsys)
        assert rc == 2 and err.strip().splitlines() == [
            f"siggate train: error: train.init: {tmp_path / f'c{i}.pt'} is not a weights file siggate can read (its "
            "weights, config or resolved values are not siggate's); give 'pretrained', a pretrained.pt, a checkpoint "
            "or none"], (i, err)
        assert not (tmp_path / f"r{i}").exists()
    comb = tmp_path / "comb"  # the csv recipe's run: gnn,svr,rf
    for name in ("member0", "member1"):
        (comb / name).mkdir(parents=True)
    (comb / "member1" / "best.pt").write_bytes(b"")
    with pytest.raises(ConfigError, match=rf"^train\.init: {comb} is a run of several members; name its GNN member's "
                                          rf"folder \({comb / 'member1'}\)$"):
        init_weights.resolve_init(str(comb))


def test_attention_keys_are_no_difference_between_models_without_attention():
    """Pretrained GINE weights (no attention branch) refused a run that set model.gate or model.heads,
    keys that shape no tensor of either model; with an attention branch they still differ."""
    cfg = load_config("csv", [*CSV, "model.gate=none", "model.heads=2", "model.attn_type=performer"]).model.to_dict()
    assert cfg["attn"] is False and init_weights.init_refusal("pretrained", cfg) is None
    blob = {"model": {}, "config": {"model": {**cfg, "attn": True, "gate": "elementwise"}}}
    why = init_weights._architecture_refusal(Path("w.pt"), blob, {**cfg, "attn": True})
    assert why.startswith("train.init: w.pt has another architecture (model.gate: pretrained 'elementwise', this run "
                          "'none'); ")


def test_an_attention_types_options_that_change_the_attention_are_architecture():
    """Weights pretrained with performer's softmax kernel loaded into a model of its relu kernel (the
    same tensor shapes; the query/key weights were trained for the other features): the options of
    model.attention.<type> that make another attention are compared; how often the features are
    redrawn is training, and no difference; without an attention branch on either side, none is."""
    cfg = load_config("csv", [*CSV, "model.attn=true", "model.attn_type=performer", "model.pe=none"]).model.to_dict()
    saved = {**cfg, "attention": {**cfg["attention"], "performer": {**cfg["attention"]["performer"],
                                                                    "kernel": "softmax"}}}
    now = {**cfg, "attention": {**cfg["attention"], "performer": {**cfg["attention"]["performer"], "kernel": "relu"}}}
    why = init_weights._architecture_refusal(Path("w.pt"), {"model": {}, "config": {"model": saved}}, now)
    assert why.startswith("train.init: w.pt has another architecture (model.attention.performer.kernel: pretrained "
                          "'softmax', this run 'relu'); ")
    redrawn = {**saved, "attention": {**saved["attention"], "performer": {**saved["attention"]["performer"],
                                                                         "redraw_interval": 7}}}
    assert init_weights._architecture_refusal(Path("w.pt"), {"model": {}, "config": {"model": redrawn}}, saved) is None
    off = {"model": {}, "config": {"model": {**saved, "attn": False}}}
    assert init_weights._architecture_refusal(Path("w.pt"), off, {**now, "attn": False}) is None
    ex = load_config("csv", [*CSV, "model.attn=true", "model.attn_type=exphormer"]).model.to_dict()
    other = {**ex, "attention": {**ex["attention"], "exphormer": {**ex["attention"]["exphormer"], "expander_seed": 9}}}
    assert "model.attention.exphormer.expander_seed: pretrained 9, this run 0" in init_weights._architecture_refusal(
        Path("w.pt"), {"model": {}, "config": {"model": other}}, ex)


def test_position_keys_are_no_difference_between_models_without_a_positional_encoder():
    """Weights pretrained with model.pe=none refused a run with pe=none and another pe_dim or
    pe_steps: sizes of an encoder neither model has. With an encoder they still differ."""
    cfg = load_config("csv", [*CSV, "model.pe=none", "model.pe_dim=4", "model.pe_steps=8"]).model.to_dict()
    blob = {"model": {}, "config": {"model": {**cfg, "pe_dim": 8, "pe_steps": 16}}}
    assert init_weights._architecture_refusal(Path("w.pt"), blob, cfg) is None
    why = init_weights._architecture_refusal(Path("w.pt"), {"model": {}, "config": {"model": {**cfg, "pe": "rwse",
                                                                                                "pe_dim": 8}}},
                                             {**cfg, "pe": "rwse"})
    assert why.startswith("train.init: w.pt has another architecture (model.pe_dim: pretrained 8, this run 4); ")


def test_exclusions_spelled_otherwise_reuse_the_corpus_and_its_partial_build(tmp_path, monkeypatch):
    """The corpus's key held each --exclude file as spelled: ./ex.smi, an absolute path or another
    working folder made a resumed run refuse its own corpus, and a partial build's descriptor
    chunks were thrown away. Files are compared by their SHA-256; a test set not read by that fact
    alone (its reason names the data root)."""
    from siggate.train import pretrain as pt

    monkeypatch.chdir(tmp_path)
    (tmp_path / "ex.smi").write_text("c1ccccc1\n")
    kw = dict(molecules=1000, seed=0, progress=False, test_sets=())
    meta = build_corpus(_corpus_file(tmp_path), tmp_path / "c", data_root=tmp_path / "none", exclude_files=["ex.smi"],
                        **kw)
    for spelled in ("./ex.smi", str(tmp_path / "ex.smi")):
        again = build_corpus(_corpus_file(tmp_path), tmp_path / "c", data_root=tmp_path / "none",
                             exclude_files=[spelled], keep=True, **kw)
        assert again["csv_sha256"] == meta["csv_sha256"] and again["seconds"] == meta["seconds"]
    (tmp_path / "ex.smi").write_text("c1ccccc1\nCCO\n")  # another file under the same name: not the same corpus
    with pytest.raises(ConfigError, match=r"built otherwise \(exclude_files"):
        build_corpus(_corpus_file(tmp_path), tmp_path / "c", data_root=tmp_path / "none", exclude_files=["ex.smi"],
                     keep=True, **kw)
    key = {"version": 1, "exclude_files": ["ex.smi:abc"], "test_sets": {
        "zinc": {"skipped": f"no such file {tmp_path}/none/ZINC"}, "file:ex.smi": {"molecules": 1}}}
    part = pt._partial_dir(tmp_path / "p", key)
    (part / "descriptors-00000.npy").write_bytes(b"kept")
    moved = {"version": 1, "exclude_files": [f"{tmp_path}/ex.smi:abc"], "test_sets": {
        "zinc": {"skipped": "no such file /elsewhere/ZINC"}, f"file:{tmp_path}/ex.smi": {"molecules": 1}}}
    assert pt._partial_dir(tmp_path / "p", moved) == part and (part / "descriptors-00000.npy").read_bytes() == b"kept"
    pt._partial_dir(tmp_path / "p", {**moved, "seed": 1})  # other arguments: the partial build goes
    assert not (part / "descriptors-00000.npy").exists()


def test_a_corpus_file_read_wrongly_is_named_and_its_empty_selection_not_kept(tmp_path):
    """A CSV named .txt is read as one SMILES per line: every row invalid, and the empty
    selection was saved, so the same bytes renamed .csv (the fix) read it again and failed the same
    way. The refusal says how the file was read; the selection is not kept; --smiles-col with a
    line file is refused; a CSV of another delimiter is named as such."""
    rows = "id,mol,x\n" + "".join(f"{i},{s},1\n" for i, s in enumerate(BASE))
    (tmp_path / "lib.txt").write_text(rows)
    with pytest.raises(ConfigError, match=r"only 0 usable molecules of the \d+ in .*lib.txt \(0 removed as benchmark "
                                          r"test molecules or molecules of --exclude, 0 duplicates, \d+ invalid\); a "
                                          r"corpus needs at least "
                                          r"10; .*lib.txt is read as one SMILES per line \(.smi/.txt\): if it is a "
                                          "CSV, name it .csv and give --smiles-col$"):
        build_corpus(tmp_path / "lib.txt", tmp_path / "c", molecules=50, seed=0, data_root=tmp_path / "none",
                     progress=False, test_sets=())
    (tmp_path / "lib.csv").write_text(rows)
    meta = build_corpus(tmp_path / "lib.csv", tmp_path / "c", molecules=50, seed=0, data_root=tmp_path / "none",
                        progress=False, test_sets=(), smiles_col="mol")
    assert meta["kept"] == 50 and meta["invalid"] == 0
    with pytest.raises(ValueError, match=r"lib.txt: --smiles-col mol names a CSV's column, and this file is read as "
                                         r"one SMILES per line \(.smi/.txt\); name a CSV file .csv, or drop"):
        read_smiles(tmp_path / "lib.txt", "mol")
    (tmp_path / "semi.csv").write_text(rows.replace(",", ";"))
    with pytest.raises(ValueError, match=r"semi.csv: its header reads as one column \('id;mol;x'\): a .csv corpus is "
                                         "comma-separated; save it so$"):
        read_smiles(tmp_path / "semi.csv", "mol")


def test_a_finished_pretraining_with_damaged_records_resumes(tmp_path, caplog):
    """A finished pretraining whose pretrained.pt was damaged failed its --resume with a traceback
    (the model is intact: it is exported again); a damaged corpus meta.json gave 'Expecting value'
    or an AttributeError: rebuilt where no model was trained on it, else refused naming the file."""
    out = tmp_path / "pt"
    small = ["model.layers=1", "model.dim=16", "model.pe_steps=4", "model.pe_dim=4", "train.warmup_epochs=0"]
    kw = dict(molecules=1000, epochs=1, seed=0, data_root=tmp_path / "none", overrides=small, progress=False,
              test_sets=())
    rec = pretrain(_corpus_file(tmp_path), out, **kw)
    (out / "pretrained.pt").write_bytes((out / "pretrained.pt").read_bytes()[:3000])
    again = pretrain(_corpus_file(tmp_path), out, resume=True, **kw)
    assert again["corpus_sha256"] == rec["corpus_sha256"] and torch.load(out / "pretrained.pt", weights_only=True)
    assert any("pretrained.pt cannot be read" in r.getMessage() and "exporting it again" in r.getMessage()
               for r in caplog.records)
    for damaged in ("", "[1, 2]"):
        (out / "corpus" / "meta.json").write_text(damaged)
        with pytest.raises(ConfigError, match=r"^pretrain --resume: .*meta.json, the record of the corpus the run was "
                                              "trained on, cannot be read; restore it, or pretrain into a new --out$"):
            pretrain(_corpus_file(tmp_path), out, resume=True, **kw)
    meta = build_corpus(_corpus_file(tmp_path), out / "corpus", molecules=1000, seed=0, data_root=tmp_path / "none",
                        progress=False, test_sets=())  # no run on it: built again
    assert meta["kept"] == rec["corpus_molecules"]


def test_a_run_recorded_with_a_relative_init_is_the_same_run_under_its_absolute_path(tmp_path, monkeypatch):
    """Runs and comparisons recorded before --init was made absolute hold the path as typed: the
    same command now records the absolute path, which counted as another config (a resume refused,
    a comparison's every run a conflict). One file is one init; another file still differs."""
    from siggate.config_args import init_source
    from siggate.train.checkpoint import config_differences

    monkeypatch.chdir(tmp_path)
    old = {"train": {"init": "X.pt"}}
    assert config_differences(old, {"train": {"init": init_source("X.pt")}}) == []
    assert init_source("X.pt") == str(tmp_path / "X.pt") and init_source("pretrained:default") == "pretrained:default"
    assert config_differences(old, {"train": {"init": str(tmp_path / "other" / "X.pt")}}) == [
        f"train.init: checkpoint has 'X.pt', current config has '{tmp_path / 'other' / 'X.pt'}'"]
    assert config_differences({"train": {"init": "pretrained"}}, {"train": {"init": str(tmp_path / "pretrained")}})


@pytest.mark.parametrize("item, expected", [
    ("train.seed=5", "--set train.seed: pretrain sets it from --seed; drop --set train.seed and give --seed instead"),
    ("train.epochs=2", "--set train.epochs: pretrain sets it from --epochs; drop --set train.epochs and give --epochs "
                       "instead"),
    ("data.split=random", "--set data.split: pretrain sets it itself (its corpus and split); drop --set data.split"),
    ("data.target_cols=MolWt", "--set data.target_cols: pretrain sets it itself (its corpus and split); drop --set "
                               "data.target_cols"),
    # trained descriptors of the salt on its parent's graph, without a word
    ("data.fragments=parent", "--set data.fragments: pretrain sets it itself (it regresses the descriptors of each "
                              "molecule as written); drop --set data.fragments"),
    # trained on 50 molecules while the export said 300
    ("data.max_graphs=50", "--set data.max_graphs: pretrain sets it itself (its corpus's molecules, from --molecules); "
                           "drop --set data.max_graphs and give --molecules instead"),
    # refused once the corpus was built, naming a --decimal flag pretrain lacks
    ("data.decimal=,", "--set data.decimal: pretrain sets it itself (its corpus and split); drop --set data.decimal"),
    ("data.sep=;", "--set data.sep: pretrain sets it itself (its corpus and split); drop --set data.sep"),
    ("data.val_fraction=0.5", "--set data.val_fraction: pretrain sets it itself (its corpus and split); drop --set "
                              "data.val_fraction"),
])
def test_pretrain_refuses_a_set_of_the_keys_it_sets_itself(tmp_path, item, expected):
    """They came after pretrain's own and won: --set train.seed=5 --set data.split=random trained
    seed 5 on a random split while the corpus record and pretrained.pt said seed 0 and the
    seeded split; --set train.epochs=2 then named --epochs in its warmup error."""
    from siggate.train.pretrain import pretrain_config

    with pytest.raises(ConfigError) as e:
        pretrain_config(None, tmp_path / "c.csv", ["MolWt"], 4, 0, ["train.warmup_epochs=1", item])
    assert str(e.value) == expected


def test_pretrain_refuses_a_config_file_that_reads_its_own_data_otherwise(tmp_path):
    """A config file's data.fragments: parent (or a cut, a delimiter) was applied to the corpus: it
    is refused before the corpus is built; the csv recipe's own defaults pass."""
    from siggate.train.pretrain import pretrain_config

    for key, value in (("fragments", "parent"), ("max_graphs", 50), ("sep", ";"), ("duplicates", "first")):
        config = tmp_path / f"{key}.yaml"
        config.write_text(f"data:\n  name: csv\n  {key}: {value!r}\n")
        with pytest.raises(ConfigError) as e:
            pretrain_config(str(config), tmp_path / "c.csv", ["MolWt"], 4, 0, ["train.warmup_epochs=1"])
        assert str(e.value) == (f"--config {config}: its data.{key} ({value!r}) describes its own data, and pretrain "
                                f"reads the corpus it writes as written: drop data.{key} from the config")
    assert pretrain_config(None, tmp_path / "c.csv", ["MolWt"], 4, 0, ["train.warmup_epochs=1"]).data.fragments == "all"


def test_pretrain_threads_from_set_or_flag_not_both(tmp_path, capsys, monkeypatch):
    """--set train.threads=2 was silently replaced by --threads's default 1."""
    import siggate.train.pretrain as pt
    from test_predict import run_cli

    seen = {}

    def fake(source, out, **kw):
        seen.update(overrides=kw["overrides"], workers=kw["workers"])
        raise SystemExit(0)

    monkeypatch.setattr(pt, "pretrain", fake)
    smiles = _corpus_file(tmp_path)
    for argv, overrides, workers in ((["--set", "train.threads=2"], ["train.threads=2"], 1),
                                     ([], ["train.threads=1"], 1), (["--threads", "2"], ["train.threads=2"], 2)):
        seen.clear()
        with pytest.raises(SystemExit):
            run_cli(["pretrain", "--smiles", str(smiles), "--out", str(tmp_path / "pt"), *argv], capsys)
        assert (seen["overrides"], seen["workers"]) == (overrides, workers)
    rc, _, err = run_cli(["pretrain", "--smiles", str(smiles), "--out", str(tmp_path / "pt"), "--threads", "2", "--set",
                          "train.threads=3"], capsys)
    assert rc == 2 and "--threads and --set train.threads both set train.threads; give one" in err


def test_pretrain_names_an_exclude_folder_as_a_folder(tmp_path, capsys):
    from test_predict import run_cli

    (tmp_path / "adir").mkdir()
    rc, _, err = run_cli(["pretrain", "--smiles", str(_corpus_file(tmp_path)), "--out", str(tmp_path / "pt"),
                          "--exclude", str(tmp_path / "adir")], capsys)
    assert rc == 2 and f"--exclude {tmp_path / 'adir'}: a folder; give a SMILES file or CSV in it" in err


def test_a_pretraining_and_a_run_keep_to_their_own_folders(tmp_path, capsys):
    """A finished export whose model/ was removed was trained again and written over by the same
    command; a pretraining into a train run's folder (or a run into a pretraining's) made
    --init FOLDER name other weights than the user's; a pretraining stopped before its export was
    named as a folder of no weights. Each is refused in one line, naming what to do instead."""
    import shutil

    from siggate.train.init_weights import resolve_init
    from test_predict import run_cli

    out = tmp_path / "pt"
    kw = dict(molecules=1000, epochs=1, seed=0, data_root=tmp_path / "none", progress=False, test_sets=(),
              overrides=["model.layers=2", "model.dim=16", "model.pe_steps=4", "model.pe_dim=4",
                         "train.warmup_epochs=0"])
    pretrain(_corpus_file(tmp_path), out, **kw)
    export = (out / "pretrained.pt").read_bytes()
    shutil.rmtree(out / "model")
    for resume in (False, True):
        with pytest.raises(ConfigError, match=r"holds a finished pretraining's export \(pretrained.pt\) and no model/ "
                                              r"to resume; fine-tune from it \(--init .*pt\), or pretrain into another"):
            pretrain(_corpus_file(tmp_path), out, resume=resume, **kw)
    assert (out / "pretrained.pt").read_bytes() == export
    # a run into the pretraining's folder, a pretraining into a run's
    csv = tmp_path / "d.csv"
    csv.write_text("smiles,y\n" + "".join(f"{s},{len(s) * 0.1:.2f}\n" for s in BASE))
    rc, _, err = run_cli(["train", "--data", str(csv), "--target-col", "y", "--out", str(out), "--members", "svr"],
                         capsys)
    assert rc == 2 and err.strip().splitlines()[-1] == (
        f"siggate train: error: --out {out} holds a pretraining (pretrained.pt, corpus/); train into a folder of its "
        f"own (fine-tune from it with --init {out / 'pretrained.pt'})")
    run = tmp_path / "run"
    rc, _, err = run_cli(["train", "--data", str(csv), "--target-col", "y", "--out", str(run), "--members", "svr"],
                         capsys)
    assert rc == 0, err
    shutil.copy(out / "pretrained.pt", run / "pretrained.pt")  # a run an earlier siggate let in beside one: resumes
    rc, _, err = run_cli(["train", "--data", str(csv), "--target-col", "y", "--out", str(run), "--members", "svr",
                          "--resume"], capsys)
    assert rc == 0, err
    (run / "pretrained.pt").unlink()
    rc, _, err = run_cli(["pretrain", "--smiles", str(_corpus_file(tmp_path)), "--out", str(run), "--epochs", "1"],
                         capsys)
    assert rc == 2 and err.strip().splitlines()[-1] == (
        f"siggate pretrain: error: --out {run} holds a siggate train run; pretrain into a folder of its own")
    (run / "corpus" / "partial").mkdir(parents=True)  # no pretraining begun there: --resume does not open it
    rc, _, err = run_cli(["pretrain", "--smiles", str(_corpus_file(tmp_path)), "--out", str(run), "--epochs", "1",
                          "--resume"], capsys)
    assert rc == 2 and err.strip().endswith("holds a siggate train run; pretrain into a folder of its own"), err
    shutil.rmtree(run / "corpus")
    own = tmp_path / "project"  # a folder of the user's with a config.yaml of its own is no run
    own.mkdir()
    (tmp_path / "none").mkdir()  # (a data root without the benchmarks: their test sets are skipped)
    (own / "config.yaml").write_text("lr: 1\n")
    rc, _, err = run_cli(["pretrain", "--smiles", str(_corpus_file(tmp_path)), "--out", str(own), "--epochs", "2",
                          "--set", "train.warmup_epochs=0", "--set", "model.layers=1", "--set", "model.dim=16",
                          "--set", "model.pe_dim=4", "--set", "model.pe_steps=4",
                          "--data-root", str(tmp_path / "none")], capsys)
    assert rc == 0, err
    # --init FOLDER: both files, or a pretraining without its export, named
    both = tmp_path / "both"
    both.mkdir()
    shutil.copy(out / "pretrained.pt", both / "pretrained.pt")
    shutil.copy(out / "pretrained.pt", both / "best.pt")
    with pytest.raises(ConfigError, match="holds both a pretraining's pretrained.pt and a run's best.pt; name the "
                                          "weights file"):
        resolve_init(str(both))
    (out / "model").mkdir()
    (out / "pretrained.pt").unlink()
    with pytest.raises(ConfigError, match=r"is a pretraining that has not exported its weights \(no pretrained.pt\): "
                                          r"finish it with siggate pretrain \.\.\. --out .* --resume"):
        resolve_init(str(out))


def test_constant_descriptors_are_dropped_in_float64():
    """A constant non-integer descriptor has a float32 std of ~1e-6: it was kept as a target, which
    the scaler (float64) then found constant and the run refused, naming a flag pretrain lacks."""
    import numpy as np

    from siggate.data.molfeatures import RDKIT2D_NAMES
    from siggate.train.pretrain import _descriptor_targets

    rng = np.random.default_rng(0)
    raw = rng.normal(size=(40, len(RDKIT2D_NAMES))).astype(np.float32)
    raw[:, 3] = np.float32(1.7)  # constant, not an integer
    raw[:, 5] = 7.0
    assert raw[np.arange(30)].std(axis=0)[3] > 0  # (float32's own std along the rows: not 0)
    z, names, scaler = _descriptor_targets(raw, np.arange(30))
    assert RDKIT2D_NAMES[3] not in names and RDKIT2D_NAMES[5] not in names and len(names) == len(RDKIT2D_NAMES) - 2
    assert z.shape == (40, len(names)) and all(s > 0 for s in scaler["std"])


def test_param_match_is_an_architecture_key_of_init():
    """Weights of a parameter-matched control (wider FFN) started a model without it: refused late,
    as 'lacks 16 backbone tensors', not naming the key; it is named with the others now."""
    from siggate.train.init_weights import _architecture_refusal

    blob = {"config": {"model": {"dim": 64, "attn": True, "gate": "none", "param_match": "ffn"}}}
    why = _architecture_refusal(Path("w.pt"), blob, {"dim": 64, "attn": True, "gate": "none", "param_match": "none"})
    assert why == ("train.init: w.pt has another architecture (model.param_match: pretrained 'ffn', this run 'none'); "
                   "use the pretrained model's settings, or train from scratch: --set train.init=none (siggate train: "
                   "--init none)")


def test_an_ffn_width_given_as_0_or_as_2_dim_is_one_architecture(tmp_path):
    """model.ffn_dim 0 is 2 * dim: the shipped weights (ffn_dim 0, dim 64) were refused for a config
    giving ffn_dim 128 ('model.ffn_dim: pretrained 0, this run 128'), and weights saved so for one of
    0, though every tensor has the same shape. The widths they resolve to are compared; another
    width, or param_match's, is still named."""
    from siggate.data.base import TaskInfo
    from siggate.train.init_weights import _architecture_refusal
    from siggate.train.modelprep import build_model

    cfg = load_config("csv", [*CSV, "model.pool_norm=21.64", "model.ffn_dim=128"])
    model = build_model(cfg.model, TaskInfo(name="t", task="regression", num_tasks=1, metric="mae"))
    report = init_weights.load_init(model, "pretrained", cfg.model.to_dict())
    assert report["copied"] > 0 and all(n.startswith(("head.", "mol_")) for n in report["fresh"])
    blob = torch.load(init_weights.resolve_init("pretrained"), map_location="cpu", weights_only=True)
    blob["config"]["model"]["ffn_dim"] = 128  # the reverse: weights saved with 128, a run of 0
    torch.save(blob, tmp_path / "wide.pt")
    assert init_weights.init_refusal(str(tmp_path / "wide.pt"), {**cfg.model.to_dict(), "ffn_dim": 0}) is None
    why = init_weights.init_refusal(str(tmp_path / "wide.pt"), {**cfg.model.to_dict(), "ffn_dim": 96})
    assert "(model.ffn_dim: pretrained 128, this run 96)" in why
    # param_match ffn at dim 64 is an FFN of 160: the same as ffn_dim 160, not as 0
    saved = {"config": {"model": {"dim": 64, "ffn_dim": 0, "param_match": "ffn"}}}
    assert _architecture_refusal(Path("w.pt"), saved, {"dim": 64, "ffn_dim": 160, "param_match": "none"}) is None
    assert "model.param_match: pretrained 'ffn', this run 'none'" in _architecture_refusal(
        Path("w.pt"), saved, {"dim": 64, "ffn_dim": 0, "param_match": "none"})


def test_a_partial_build_keyed_before_the_test_sets_digest_is_kept(tmp_path, caplog):
    """A partial corpus (hours of descriptors, for a million molecules) keyed by the previous
    version, whose test-set entries hold counts alone, was removed as 'built with other arguments'
    once the key held each set's digest: it is kept where the counts agree, and removed where a set
    holds other molecules (digests, or counts)."""
    from siggate.train.pretrain import _partial_dir

    new = {"molecules": 10, "seed": 0, "test_sets": {"zinc": {"molecules": 2, "inchikeys": 2, "sha256": "a" * 64},
                                                     "molpcba": {"skipped": "no file"}}}
    old = {**new, "test_sets": {"zinc": {"molecules": 2, "inchikeys": 2}, "molpcba": {"skipped": "elsewhere"}}}
    out = tmp_path / "c"
    part = _partial_dir(out, old)
    (part / "chunk-0.npy").write_bytes(b"kept")
    assert _partial_dir(out, new) == part and (part / "chunk-0.npy").is_file()
    (part / "key.json").write_text(json.dumps(new))
    other = {**new, "test_sets": {**new["test_sets"], "zinc": {"molecules": 2, "inchikeys": 2, "sha256": "b" * 64}}}
    assert not (_partial_dir(out, other) / "chunk-0.npy").exists()  # another zinc test set: built again
    (part / "key.json").write_text(json.dumps(old))
    (part / "chunk-0.npy").write_bytes(b"kept")
    grown = {**new, "test_sets": {**new["test_sets"], "zinc": {"molecules": 3, "inchikeys": 3, "sha256": "a" * 64}}}
    assert not (_partial_dir(out, grown) / "chunk-0.npy").exists()


def test_a_reused_corpus_warns_of_no_test_set(tmp_path, monkeypatch, caplog):
    """Reusing a corpus warned that a test set was 'not read; its molecules are not excluded', as if
    it were building one: the warning is the build's alone."""
    from siggate.data import corpus

    def gone(root):
        raise FileNotFoundError("no such file")

    monkeypatch.setattr(corpus, "TEST_SETS", {"fake": lambda root: ["c1ccccc1"], "gone": gone})
    kw = dict(molecules=1000, seed=0, data_root=tmp_path / "none", progress=False)
    with caplog.at_level("WARNING", logger="siggate"):
        build_corpus(_corpus_file(tmp_path), tmp_path / "c", **kw)
    assert sum("test set of gone not read" in r.getMessage() for r in caplog.records) == 1
    caplog.clear()
    with caplog.at_level("WARNING", logger="siggate"):
        build_corpus(_corpus_file(tmp_path), tmp_path / "c", **kw)
    assert not [r for r in caplog.records if "not read" in r.getMessage()]
    caplog.clear()
    monkeypatch.setitem(corpus.TEST_SETS, "fake", lambda root: ["c1ccccc1", "OCC"])  # built again: warned once
    with caplog.at_level("WARNING", logger="siggate"):
        build_corpus(_corpus_file(tmp_path), tmp_path / "c", **kw)
    assert sum("test set of gone not read" in r.getMessage() for r in caplog.records) == 1


def test_a_reuse_reads_only_the_test_sets_it_was_built_against(tmp_path, monkeypatch):
    """The reuse check read every test set siggate knows and every --exclude file (their InChIKeys
    computed) at each reuse and resume, work only a rebuild needs: it reads the sets the corpus was
    built against, and compares the exclude files by digest."""
    from siggate.data import corpus

    calls = []
    monkeypatch.setattr(corpus, "TEST_SETS", {"fake": lambda root: calls.append("fake") or ["c1ccccc1"]})
    exclude = tmp_path / "ex.smi"
    exclude.write_text("CCN\n")
    kw = dict(molecules=1000, seed=0, data_root=tmp_path / "none", progress=False, exclude_files=[str(exclude)])
    first = build_corpus(_corpus_file(tmp_path), tmp_path / "c", **kw)
    calls.clear()
    monkeypatch.setitem(corpus.TEST_SETS, "later", lambda root: calls.append("later") or ["CCO"])
    read = corpus.read_smiles
    monkeypatch.setattr(corpus, "read_smiles", lambda *a, **k: calls.append(f"read {a[0]}") or read(*a, **k))
    again = build_corpus(_corpus_file(tmp_path), tmp_path / "c", keep=True, **kw)
    assert again["csv_sha256"] == first["csv_sha256"] and calls == ["fake"]
