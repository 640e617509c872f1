"""``siggate predict``: row-by-row reasons, input files, streaming with flat memory.

Also holds the helpers the fault tests share (``tests/test_bad_inputs.py``,
``tests/test_fuzz.py``, ``tests/test_checkpoint.py`` import them): a tiny dataset built
from RDKit's bundled NCI molecules and a 1-layer, width-16 model trained for one epoch
in-process, so no data root and no network are needed.
"""

from __future__ import annotations

import contextlib
import copy
import csv
import gzip
import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import yaml
from rdkit import Chem, RDConfig, rdBase

from siggate.config import from_dict
from siggate.data.base import GraphDataset, TaskInfo
from siggate.data.chem import smiles_to_graph
from siggate.data.pe import add_pe
from siggate.train.executor import load_script

NCI_SMI = Path(RDConfig.RDDataDir) / "NCI" / "first_5K.smi"

# --------------------------------------------------------------------------- helpers

TINY_CONFIG = {
    "data": {"name": "csv", "csv": "toy.csv", "target_cols": ["y"], "task": "regression"},
    "model": {"layers": 1, "dim": 16, "heads": 2, "pe": "rwse", "pe_steps": 4, "pe_dim": 4,
              "head_layers": 2, "attn_dropout": 0.0},
    "train": {"epochs": 1, "batch_size": 32, "eval_batch_size": 64, "warmup_epochs": 0, "seed": 0},
}


def nci_smiles(n: int, start: int = 0) -> list[str]:
    """The first ``n`` SMILES (from line ``start``) of RDKit's NCI file that sanitize."""
    out = []
    with open(NCI_SMI) as fh, rdBase.BlockLogs():
        for k, line in enumerate(fh):
            parts = line.split()
            if k < start or not parts:
                continue
            if Chem.MolFromSmiles(parts[0]) is not None:
                out.append(parts[0])
            if len(out) >= n:
                break
    return out


@contextlib.contextmanager
def one_thread():
    """Torch on one thread: on a busy 2-core machine two OpenMP threads are many times slower."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)


def tiny_config(**sections):
    """``TINY_CONFIG`` with ``section={key: value}`` overrides, validated."""
    raw = copy.deepcopy(TINY_CONFIG)
    for sec, values in sections.items():
        raw[sec].update(values)
    return from_dict(raw)


def tiny_dataset(n: int = 96, targets=None, pe_steps: int = 4) -> GraphDataset:
    """``n`` NCI molecules, target = atoms / 10 (or ``targets``), split 70/15/15 in order."""
    graphs = []
    for i, s in enumerate(nci_smiles(n)):
        g = smiles_to_graph(s)
        y = float(g.num_nodes) / 10 if targets is None else float(targets[i])
        g.y = torch.tensor([[y]], dtype=torch.float32)
        g.idx = i
        graphs.append(g)
    if pe_steps:
        graphs = add_pe(graphs, rwse_steps=pe_steps)
    a, b = int(0.7 * n), int(0.85 * n)
    info = TaskInfo(name="toy", task="regression", num_tasks=1, metric="mae", target_names=["y"])
    return GraphDataset(info=info, splits={"train": graphs[:a], "val": graphs[a:b], "test": graphs[b:]})


def train_tiny(out_dir, cfg=None, dataset=None, resume: bool = False) -> dict:
    from siggate.train.pipeline import train

    with one_thread():
        return train(cfg or tiny_config(), out_dir, resume=resume, progress=False,
                     dataset=dataset if dataset is not None else tiny_dataset())


_SHARED: dict = {}


def shared_checkpoint(tmp_path_factory) -> Path:
    """``best.pt`` of one tiny training run, made once per test session."""
    if "ckpt" not in _SHARED:
        out = tmp_path_factory.mktemp("tiny_run")
        train_tiny(out)
        _SHARED["ckpt"] = out / "best.pt"
    return _SHARED["ckpt"]


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    """``siggate ARGV`` in this process: (exit code, stdout, stderr)."""
    from siggate.cli import main

    capsys.readouterr()
    with one_thread():
        rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def subprocess_env() -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", SIGGATE_OFFLINE="1",
               PYTHONIOENCODING="utf-8")
    src = str(Path(__file__).resolve().parents[1] / "src")
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    return env


def read_output(path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> Path:
    return shared_checkpoint(tmp_path_factory)


@pytest.fixture(scope="module")
def predictor(ckpt):
    from siggate.train.predict import SmilesPredictor

    return SmilesPredictor(ckpt)


@pytest.fixture(autouse=True)
def _single_thread():
    with one_thread():
        yield


# --------------------------------------------------------------------------- rows


def test_good_rows_are_predicted_in_order_with_finite_values(predictor):
    smiles = nci_smiles(40)
    rows = predictor.predict_rows(smiles)
    assert [r["smiles"] for r in rows] == smiles
    assert all(r["error"] == "" for r in rows)
    assert all(math.isfinite(float(r["y"])) for r in rows)
    assert predictor.columns == ["y", "nearest_train_similarity", "outside_domain"]  # the run records its domain


def test_prediction_does_not_depend_on_batch_company(predictor):
    """A molecule predicted alone, or inside a chunk with big and small neighbours
    (regrouped by size internally), gets the same number."""
    smiles = nci_smiles(30)
    alone = [predictor.predict_rows([s])[0]["y"] for s in smiles[:5]]
    mixed = predictor.predict_rows(["C" * 300] + smiles[:5] + ["C1CC", "CC" * 100])
    together = [r["y"] for r in mixed[1:6]]
    assert [float(a) for a in alone] == pytest.approx([float(t) for t in together], rel=1e-4, abs=1e-5)


def test_bad_rows_get_reasons_and_good_rows_still_predicted(predictor):
    smiles = ["CCO", "", "C1CC", "c1ccccc1", "[H][H]", "CN(C)(C)(C)C", "CC(=O)O"]
    rows = predictor.predict_rows(smiles)
    assert [r["smiles"] for r in rows] == smiles
    errors = [r["error"] for r in rows]
    assert errors[0] == errors[3] == errors[6] == ""
    assert errors[1] == "empty SMILES"
    assert "unclosed ring" in errors[2]
    assert "no heavy atoms" in errors[4]
    assert "Explicit valence" in errors[5]
    for r in rows:
        assert (r["y"] == "") == (r["error"] != "")


def test_disconnected_fragments_are_one_graph_with_components(predictor):
    """Documented rule: 'C.C' is predicted as one graph of two components (as OGB does)."""
    g = predictor.featurize("C.C")
    assert g.num_nodes == 2 and g.edge_index.shape[1] == 0
    salt = predictor.featurize("CC(=O)[O-].[Na+]")
    assert salt.num_nodes == 5
    rows = predictor.predict_rows(["C.C", "CC(=O)[O-].[Na+]", "CC(=O)O"])
    assert all(r["error"] == "" for r in rows)
    # the sum pooling sees both fragments: 'C.C' is not the same as 'C'
    assert rows[0]["y"] != predictor.predict_rows(["C"])[0]["y"]


def test_unusual_elements_map_to_ogb_vocabulary(predictor):
    from ogb.utils.features import get_atom_feature_dims

    dims = get_atom_feature_dims()
    og = predictor.featurize("[Og]")
    u = predictor.featurize("[U+6]")
    far = predictor.featurize("[C-7]")  # charge outside -5..5: OGB's misc index
    assert int(og.x[0, 0]) == 117 and int(u.x[0, 0]) == 91
    assert int(far.x[0, 3]) == dims[3] - 1
    for g in (og, u, far):
        assert (g.x < torch.tensor(dims)).all() and (g.x >= 0).all()
    rows = predictor.predict_rows(["[Og]", "[U]", "[U+6]", "[C-7]", "[CH3]", "[O]", "C[N+](C)(C)C"])
    assert [r["error"] for r in rows] == [""] * 7


def test_large_molecules_batched_alone_and_limit_is_a_reason(ckpt):
    from siggate.train.predict import SmilesPredictor

    pred = SmilesPredictor(ckpt, max_atoms=600, batch_size=16)
    big = "C" * 550  # 550 atoms: under the limit, predicted
    rows = pred.predict_rows(["CCO", big, "C" * 601, "CCN"])
    assert rows[1]["error"] == "" and math.isfinite(float(rows[1]["y"]))
    assert rows[2]["error"] == "molecule has 601 heavy atoms, above the limit of 600 (--max-atoms)"
    assert rows[0]["error"] == rows[3]["error"] == ""
    # big molecules do not share a forward pass with many others
    batches = list(pred._batches([10] * 20 + [550, 500]))
    assert sorted(k for b in batches for k in b) == list(range(22))
    assert all(len(b) <= 16 for b in batches)
    assert [b for b in batches if 20 in b] == [[20]]


def test_non_finite_model_output_is_a_row_error(predictor, monkeypatch):
    from siggate.predictors.base import Prediction

    orig = predictor.predictor.predict

    def nan_out(graphs):
        out = orig(graphs)
        return Prediction(torch.full_like(out.mean, float("nan")), out.spread)

    monkeypatch.setattr(predictor.predictor, "predict", nan_out)
    rows = predictor.predict_rows(["CCO", "CCN"])
    assert [r["error"] for r in rows] == ["model produced a non-finite prediction"] * 2
    assert [r["nearest_train_similarity"] for r in rows] == ["", ""]  # a failed row gets no domain either


def test_a_failing_batch_is_retried_one_by_one(predictor, monkeypatch):
    orig = predictor._predict_graphs

    def picky(graphs):
        if len(graphs) > 1 or graphs[0].smiles == "CCN":
            raise RuntimeError("boom")
        return orig(graphs)

    monkeypatch.setattr(predictor, "_predict_graphs", picky)
    before = predictor.outside
    rows = predictor.predict_rows(["CCO", "CCN", "CCC"])
    assert rows[0]["error"] == rows[2]["error"] == ""
    assert rows[1]["error"] == "prediction failed: RuntimeError: boom"
    # the domain columns come with each row's prediction, on the one-by-one path too; none for the failed row
    sims = predictor.domain.similarity(["CCO", "CCC"])
    assert [rows[i]["nearest_train_similarity"] for i in (0, 2)] == pytest.approx(sims.tolist())
    assert rows[1]["nearest_train_similarity"] == rows[1]["outside_domain"] == ""
    assert predictor.outside - before == sum(rows[i]["outside_domain"] == "true" for i in (0, 2))


# --------------------------------------------------------------------------- files


def test_read_smiles_csv_quoting_blank_lines_bom_and_chunks(tmp_path):
    from siggate.train.predict import read_smiles

    p = tmp_path / "in.csv"
    p.write_bytes("\ufeffid,smiles\n1,CCO\n\n2,\"C(C)O\"\n3,\n4, CCN \n5\n".encode("utf-8"))
    chunks = list(read_smiles(p, chunk=2))
    assert chunks == [["CCO", "C(C)O"], ["", "CCN"], [""]]


def test_predict_refuses_a_quote_never_closed_instead_of_reading_the_rest_as_one_field(ckpt, tmp_path, capsys):
    """An opening quote never closed made the rest of the file one field of its row: predict
    wrote 3 rows of 200, exit 0. Refused with the line it opened on, exit 2, no output file."""
    rows = ["id,smiles,note"] + [f"{i},CCO,ok" for i in range(200)]
    rows[3] = '2,CCN,"5 vial'
    src = tmp_path / "q.csv"
    src.write_text("\n".join(rows) + "\n")
    rc, _, err = run_cli(["predict", "--checkpoint", str(ckpt), "--input", str(src), "--output",
                          str(tmp_path / "out.csv")], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert "q.csv, line 4: a quoted field opened on this line is never closed (the file ends inside it)" in err
    assert not (tmp_path / "out.csv").exists()


def test_read_smiles_smi_with_header_and_names(tmp_path):
    from siggate.train.predict import read_smiles

    p = tmp_path / "in.smi"
    p.write_text("SMILES Name\nCCO ethanol\n\n  c1ccccc1\tbenzene\nCCN\n")
    assert [s for c in read_smiles(p) for s in c] == ["CCO", "c1ccccc1", "CCN"]
    q = tmp_path / "in.txt"  # a CSV without the .csv suffix is recognised by its header
    q.write_text("name\tsmiles\na\tCCO\n")
    assert list(read_smiles(q)) == [["CCO"]]
    # a spreadsheet's "Text (Tab delimited)" export names SMILES in capitals: with the column second,
    # every line (the header too) was read as a SMILES and its name; first, the other columns were
    # merged into one name holding a tab
    from siggate.train.predict import read_input

    for header, row, smiles_at in (("Compound ID\tSMILES\tpIC50", "c1\tCCO\t5.1", 1),
                                   ("SMILES\tCompound ID\tpIC50", "CCO\tc1\t5.1", 0), ("Name\tSMILES", "e\tCCO", 1)):
        q.write_text(f"{header}\n{row}\n")
        rows = read_input(q, fallback="smiles")
        assert rows.columns == header.split("\t") and [r for c in rows for r in c] == [row.split("\t")]
        assert rows.smiles_index == smiles_at
    q.write_text("SMILES Name\nCCO ethanol\n")  # a SMILES file's header of two names stays one
    assert read_input(q, fallback="smiles").columns == ["smiles", "name"]


def test_read_smiles_gzip_and_stdin(tmp_path, monkeypatch):
    import io

    from siggate.train.predict import read_input, read_smiles

    p = tmp_path / "in.csv.gz"
    with gzip.open(p, "wt") as fh:
        fh.write("smiles\nCCO\nCCN\n")
    assert list(read_smiles(p)) == [["CCO", "CCN"]]

    class FakeStdin:
        buffer = io.BytesIO(b"CCO\nCCC\n")

    monkeypatch.setattr(sys, "stdin", FakeStdin())
    assert list(read_smiles("-")) == [["CCO", "CCC"]]

    class GzipStdin:  # `siggate predict --input - < in.smi.gz` was read as garbage rows
        buffer = io.BufferedReader(io.BytesIO(gzip.compress(b"CCO ethanol\nCCC\n")))

    monkeypatch.setattr(sys, "stdin", GzipStdin())
    rows = read_input("-")
    assert rows.columns == ["smiles", "name"] and list(rows) == [[["CCO", "ethanol"], ["CCC", ""]]]


@pytest.mark.parametrize("kind", ["bz2", "xz", "zip", "gz-unnamed"])
def test_predict_reads_the_compressed_files_training_reads(tmp_path, kind):
    # train --data reads gzip, bzip2, xz and a one-file zip by their first bytes; predict and explain
    # read only gzip and refused the others as binary files
    import bz2
    import lzma
    import zipfile

    from siggate.train.predict import InputError, read_input

    text = "smiles,id\nCCO,a\nc1ccccc1,b\n"
    p = tmp_path / {"bz2": "in.csv.bz2", "xz": "in.csv.xz", "zip": "in.zip", "gz-unnamed": "in.csv"}[kind]
    if kind == "zip":
        with zipfile.ZipFile(p, "w") as z:
            z.writestr("in.csv", text)
    else:
        p.write_bytes({"bz2": bz2, "xz": lzma, "gz-unnamed": gzip}[kind].compress(text.encode()))
    rows = read_input(p)
    assert rows.columns == ["smiles", "id"] and list(rows) == [[["CCO", "a"], ["c1ccccc1", "b"]]]
    if kind in ("bz2", "xz"):  # a CSV by its name under the compression's: its missing column is refused as in a .csv
        other = tmp_path / f"other.csv.{kind}"
        other.write_bytes({"bz2": bz2, "xz": lzma}[kind].compress(b"id,mol\na,CCO\n"))
        with pytest.raises(InputError, match="column 'smiles' not found"):
            read_input(other)
        cut = tmp_path / f"cut.csv.{kind}"
        whole = {"bz2": bz2, "xz": lzma}[kind].compress(("smiles\n" + "CCO\n" * 20000).encode())
        cut.write_bytes(whole[:len(whole) // 2])
        with pytest.raises(InputError, match="truncated or corrupt"):
            list(read_input(cut))
    if kind == "zip":
        # macOS's Finder adds the file's resource fork (and a folder's .DS_Store): not the user's files
        with zipfile.ZipFile(p, "a") as z:
            z.writestr("__MACOSX/._in.csv", b"\x00\x05\x16\x07 resource fork")
            z.writestr(".DS_Store", b"Bud1")
        assert list(read_input(p)) == [[["CCO", "a"], ["c1ccccc1", "b"]]]
        with zipfile.ZipFile(p, "a") as z:
            z.writestr("other.csv", text)
        with pytest.raises(InputError, match=r"is a zip archive of 2 files \(in\.csv, other\.csv\); unzip it"):
            read_input(p)


def test_a_smi_files_names_come_through(tmp_path, caplog):
    """A .smi file's names (the rest of each line, Daylight's layout) were dropped from the output;
    they are its ``name`` column now, streamed in chunks as before. A file without names keeps its
    one column."""
    from siggate.train.predict import read_input

    p = tmp_path / "in.smi"
    p.write_text("SMILES Name\nCCO ethanol\n\n  c1ccccc1\tbenzene ring \nCCN\n")
    rows = read_input(p, chunk=2)
    assert rows.columns == ["smiles", "name"]
    assert list(rows) == [[["CCO", "ethanol"], ["c1ccccc1", "benzene ring"]], [["CCN", ""]]]
    q = tmp_path / "plain.smi"
    q.write_text("CCO\nCCN\nCCC\n")
    rows = read_input(q, chunk=2)
    assert rows.columns == ["smiles"] and list(rows) == [[["CCO"], ["CCN"]], [["CCC"]]]
    late = tmp_path / "late.smi"  # the name column is decided by the first chunk: a later name is named as lost
    late.write_text("CCO\nCCN\nCCC propane\nCCCC butane\n")
    with caplog.at_level("WARNING", logger="siggate.predict"):
        assert list(read_input(late, chunk=2)) == [[["CCO"], ["CCN"]], [["CCC"], ["CCCC"]]]
    assert [r.getMessage() for r in caplog.records if "names molecules only after" in r.getMessage()] == [
        f"{late} names molecules only after its first 2 lines ('propane'): the output has no name column, so names "
        "are dropped; raise --chunk-size, or name the molecules from the first line"]


def test_predict_cli_exit_codes_and_one_row_per_input(ckpt, tmp_path, capsys):
    good = tmp_path / "good.csv"
    good.write_text("smiles,name\nCCO,a\nc1ccccc1,b\n")
    out = tmp_path / "out.csv"
    rc, _, err = run_cli(["predict", "--checkpoint", str(ckpt), "--input", str(good), "--output", str(out)], capsys)
    assert rc == 0, err
    assert [r["smiles"] for r in read_output(out)] == ["CCO", "c1ccccc1"]
    assert "2 rows, 2 predicted, 0 failed" in err

    mixed = tmp_path / "mixed.csv"
    mixed.write_text("smiles\nCCO\nnot_a_molecule\n\nCCN\n")
    rc, _, err = run_cli(["predict", "--checkpoint", str(ckpt), "--input", str(mixed), "--output", str(out)], capsys)
    assert rc == 1
    rows = read_output(out)
    assert [r["smiles"] for r in rows] == ["CCO", "not_a_molecule", "CCN"]
    assert rows[1]["error"].startswith("SMILES parse error") and rows[1]["y"] == ""
    assert "3 rows, 2 predicted, 1 failed" in err

    # SMILES on the command line, CSV on stdout
    rc, stdout, _ = run_cli(["predict", "--checkpoint", str(ckpt), "CCO", "[H][H]"], capsys)
    assert rc == 1
    rows = list(csv.DictReader(stdout.splitlines()))
    assert [r["smiles"] for r in rows] == ["CCO", "[H][H]"]
    assert "no heavy atoms" in rows[1]["error"]


def test_predict_reads_data_as_input_and_takes_flags_only_as_written(ckpt, tmp_path, capsys):
    """``predict --data new.csv`` (train's and evaluate's name for the molecules) was read as
    ``--data-root new.csv``, an abbreviation argparse accepted, and refused for a flag never given:
    it is ``--input``'s other name. A prefix of a flag is no longer taken for the flag (``--out``
    wrote the predictions as ``--output`` does, ``--data`` did not): it is named, with the flag
    it begins, and nothing is written."""
    src = tmp_path / "new.csv"
    src.write_text("smiles,name\nCCO,a\nc1ccccc1,b\n")
    outs = {}
    for flag in ("--input", "--data"):
        outs[flag] = tmp_path / f"{flag[2:]}.csv"
        rc, _, err = run_cli(["predict", "--checkpoint", str(ckpt), flag, str(src), "--output", str(outs[flag])],
                             capsys)
        assert rc == 0 and "2 rows, 2 predicted, 0 failed" in err, err
    assert outs["--data"].read_text() == outs["--input"].read_text()
    assert [r["name"] for r in read_output(outs["--data"])] == ["a", "b"]
    with pytest.raises(SystemExit) as exc:
        run_cli(["predict", "--checkpoint", str(ckpt), "--input", str(src), "--out", str(tmp_path / "o.csv")], capsys)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.splitlines()[-1] == (
        "siggate predict: error: unrecognized arguments: --out (did you mean --output?)")
    assert not (tmp_path / "o.csv").exists()


def _fifo_of(path: Path, data: bytes):
    """A named pipe at ``path`` that a thread fills with ``data`` once it is opened for reading
    (``--input <(cat x.csv)`` is such a pipe); returns the thread."""
    import threading

    os.mkfifo(path)

    def feed():
        with open(path, "wb") as fh:
            fh.write(data)

    thread = threading.Thread(target=feed, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("compressed", [False, True])
def test_predict_reads_a_pipe_from_its_first_byte(ckpt, tmp_path, capsys, compressed):
    """``predict --input <(cat new.csv)`` sniffed the pipe's first 8 KB and opened it again: the
    header and the first rows were gone, and the rest was read as SMILES lines (28 rows of 128,
    all failed). A pipe is read once, as standard input is."""
    rows = "".join(f"{s},m{i}\n" for i, s in enumerate(nci_smiles(300)))
    text = ("smiles,name\n" + rows).encode()
    assert len(text) > 8192  # more than the sniffed head
    regular = tmp_path / "new.csv"
    regular.write_bytes(text)
    want = tmp_path / "want.csv"
    assert run_cli(["predict", "--checkpoint", str(ckpt), "--input", str(regular), "--output", str(want)], capsys)[0] == 0
    pipe = tmp_path / "pipe"
    feeder = _fifo_of(pipe, gzip.compress(text) if compressed else text)
    got = tmp_path / "got.csv"
    rc, _, err = run_cli(["predict", "--checkpoint", str(ckpt), "--input", str(pipe), "--output", str(got)], capsys)
    feeder.join(timeout=30)
    assert rc == 0 and "300 rows, 300 predicted, 0 failed" in err, err
    assert got.read_text() == want.read_text()


def test_train_evaluate_and_pretrain_name_a_pipe_given_as_their_data(ckpt, tmp_path, capsys):
    """A pipe given as ``--data`` was 'not found' (train) or 'no such file' (evaluate): it is
    there, and is refused for what it is, a stream read once."""
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)  # (nothing writes it: neither command opens it)
    why = ("is not a regular file (a pipe?): it is read more than once (and a run records its path and SHA-256 to "
           "score it again later); save it to a file and give that (a compressed file is read as it is)\n")
    rc, _, err = run_cli(["train", "--data", str(pipe), "--target-col", "y", "--members", "rf", "--out",
                          str(tmp_path / "run")], capsys)
    assert rc == 2 and err.endswith(f"siggate train: error: {pipe} {why}") and not (tmp_path / "run").exists(), err
    rc, _, err = run_cli(["evaluate", "--checkpoint", str(ckpt), "--data", str(pipe)], capsys)
    assert rc == 2 and err.endswith(f"siggate evaluate: error: --data {pipe} {why}"), err
    rc, _, err = run_cli(["pretrain", "--smiles", str(pipe), "--out", str(tmp_path / "pt")], capsys)
    assert rc == 2 and err.endswith(f"siggate pretrain: error: --smiles {pipe} {why}") and not (tmp_path / "pt").exists()


def test_an_sd_file_is_read_by_every_reader_as_its_molecules_and_their_data_items(ckpt, predictor, tmp_path, capsys):
    """An SD file given to predict was read as lines (each atom line a 'SMILES': 14,440 rows of
    which 400 were predicted, a 'C' of '0.0 0.0 C'), then refused with a conversion command. Every
    reader reads it now, as a table: the molecules' SMILES (stereo from 3D coordinates too), their
    titles as ``name`` and their data items as columns; a record RDKit cannot sanitize or read fails
    with its reason, the others are read; gzip and pipes too. Predictions equal those of a CSV of
    the same SMILES."""
    from rdkit import Chem
    from rdkit.Chem import AllChem

    from siggate.data.corpus import read_smiles

    smiles = nci_smiles(40)[:36] + ["C[C@H](N)C(=O)O"]
    sdf = tmp_path / "mols.sdf"
    with Chem.SDWriter(str(sdf)) as w:
        for i, smi in enumerate(smiles):
            mol = Chem.MolFromSmiles(smi)
            if i == len(smiles) - 1:  # 3D coordinates, no wedges: its stereo is read from them
                mol = Chem.AddHs(mol)
                AllChem.EmbedMolecule(mol, randomSeed=0)
            mol.SetProp("_Name", f"m{i}")
            mol.SetProp("pIC50", f"{len(smi) / 10:.1f}")
            if i == 1:
                mol.SetProp("smiles", "registered")  # a data item of that name: carried as input_smiles
            w.write(mol)
    bad = Chem.MolToMolBlock(Chem.MolFromSmiles("CN(C)(C)(C)C", sanitize=False))
    with open(sdf, "a") as fh:
        fh.write(f"{bad}> <pIC50>\n5.0\n\n$$$$\nbroken\n\n\n  1  0  0  0  0  0  0  0  0  0999 V2000\nM  END\n$$$$\n")
    packed = tmp_path / "mols.sdf.gz"
    packed.write_bytes(gzip.compress(sdf.read_bytes()))
    table = tmp_path / "same.csv"
    table.write_text("smiles\n" + "".join(f"{s}\n" for s in smiles))

    rc, _, err = run_cli(["predict", "--checkpoint", str(ckpt), "--input", str(table), "--output",
                          str(tmp_path / "csv.csv")], capsys)
    assert rc == 0, err
    expected = read_output(tmp_path / "csv.csv")
    n = len(smiles)
    for source in (sdf, packed):
        rc, _, err = run_cli(["predict", "--checkpoint", str(ckpt), "--input", str(source), "--output",
                              str(tmp_path / "sd.csv")], capsys)
        assert rc == 1 and f"{n + 2} rows, {n} predicted, 2 failed" in err, err  # (1: some rows failed)
        rows = read_output(tmp_path / "sd.csv")
        assert list(rows[0])[:4] == ["smiles", "name", "pIC50", "input_smiles"]
        assert [r["smiles"] for r in rows[:n]] == [Chem.CanonSmiles(s) for s in smiles]
        assert [r["name"] for r in rows[:n]] == [f"m{i}" for i in range(n)]
        assert rows[1]["input_smiles"] == "registered" and rows[0]["input_smiles"] == ""
        target = predictor.info.target_names[0]
        # (RDKit's canonical SMILES orders the atoms otherwise: sums in another order, the sixth digit)
        assert [float(r[target]) for r in rows[:n]] == pytest.approx([float(r[target]) for r in expected], rel=1e-5)
        assert "Explicit valence for atom # 1 N, 5" in rows[n]["error"]
        assert rows[n + 1]["error"] == ("RDKit cannot read this record's molfile (its counts line, atom or bond block "
                                        "is malformed); fix or drop the record")
    assert rows[n - 1]["smiles"] == "C[C@H](N)C(=O)O"

    # piped, gzip too
    for blob in (sdf.read_bytes(), packed.read_bytes()):
        feeder = _fifo_of(tmp_path / "pipe", blob)
        rc, out, err = run_cli(["predict", "--checkpoint", str(ckpt), "--input", str(tmp_path / "pipe")], capsys)
        feeder.join(timeout=30)
        (tmp_path / "pipe").unlink()
        assert rc == 1 and f"{n + 2} rows, {n} predicted, 2 failed" in err, err  # (1: some rows failed)

    rc, _, err = run_cli(["explain", "--checkpoint", str(ckpt), "--input", str(sdf), "--out", str(tmp_path / "e")],
                         capsys)
    assert rc == 1 and f"{n + 2} rows, {n} explained, 2 failed" in err, err
    rc, out, err = run_cli(["evaluate", "--checkpoint", str(ckpt), "--data", str(packed), "--target-col",
                            f"{predictor.info.target_names[0]}=pIC50"], capsys)
    counts = json.loads(out)["rows"]
    assert rc == 0 and (counts["scored"], counts["invalid"], counts["unlabelled"]) == (n, 1, 1), err  # (broken: no pIC50)
    rc, _, err = run_cli(["train", "--data", str(sdf), "--target-col", "pIC50", "--members", "rf", "--split", "random",
                          "--out", str(tmp_path / "r"), "--cache-dir", str(tmp_path / "c")], capsys)
    assert rc == 0, err
    split = read_output(tmp_path / "r" / "splits.csv")
    assert len(split) == n + 2 and [r["name"] for r in split[:3]] == ["m0", "m1", "m2"]
    assert [r["split"] for r in split[n:]] == ["dropped", "dropped"]
    assert read_smiles(packed)[:n] == [Chem.CanonSmiles(s) for s in smiles]  # pretrain's corpus reader

    # no titles and no data items (a .mol file, or RDKit's SDWriter of bare molecules): one column
    bare = tmp_path / "bare.sdf"
    bare.write_text("".join(Chem.MolToMolBlock(Chem.MolFromSmiles(s)) + "$$$$\n" for s in smiles[:3]))
    single = tmp_path / "one.mol"
    single.write_text(Chem.MolToMolBlock(Chem.MolFromSmiles(smiles[0])))
    for path, rows in ((bare, 3), (single, 1)):
        rc, out, err = run_cli(["predict", "--checkpoint", str(ckpt), "--input", str(path), "--chunk-size", "2"], capsys)
        assert rc == 0 and f"{rows} rows, {rows} predicted, 0 failed" in err, err
        assert out.splitlines()[0].startswith("smiles,")

    # a data item whose header follows the value before it without a blank line keeps that value;
    # a file read several times by one command is parsed once (RDKit reads each molfile once)
    from siggate.data import sdfile
    from siggate.data.csvdata import read_table

    tight = tmp_path / "tight.sdf"
    tight.write_text(Chem.MolToMolBlock(Chem.MolFromSmiles("CCO")) + "> <pKi>\n7.1\n> <ID>\nA1\n\n$$$$\n")
    # (and read from disk and decoded once: a 100 MB file was read whole on each call)
    from siggate.data import csvdata

    parsed, reads = [], []
    real, real_bytes = sdfile.sd_table, csvdata._file_bytes
    sdfile.sd_table = lambda lines: parsed.append(1) or real(lines)
    csvdata._file_bytes = lambda path: reads.append(path) or real_bytes(path)
    try:
        assert read_table(tight, ",")[1] == [["CCO", "7.1", "A1"]] and read_table(tight, ",")[0] == ["smiles", "pKi", "ID"]
        assert parsed == [1] and reads == [tight]
        tight.write_text(tight.read_text().replace("7.1", "7.25"))  # a changed file is read again
        assert read_table(tight, ",")[1] == [["CCO", "7.25", "A1"]] and parsed == [1, 1] and reads == [tight] * 2
    finally:
        sdfile.sd_table, csvdata._file_bytes = real, real_bytes

    # a CSV holding molblocks in a quoted column is a CSV
    blocks = tmp_path / "blocks.csv"
    with blocks.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["smiles", "molblock"])
        for smi in smiles[:3]:
            w.writerow([smi, Chem.MolToMolBlock(Chem.MolFromSmiles(smi))])
    rc, _, err = run_cli(["predict", "--checkpoint", str(ckpt), "--input", str(blocks)], capsys)
    assert rc == 0 and "3 rows, 3 predicted, 0 failed" in err, err


def test_sd_records_rdkit_reads_no_molecule_from_are_named_by_why_and_old_counts_lines_are_sd(tmp_path):
    """A record without its 'M  END' line read its data items into the molfile (lost) and one of no
    atoms had an empty SMILES ('empty SMILES'); both were refused as malformed or empty without the
    cause. A molfile whose counts line names no version (older writers) made the file a CSV of
    atom lines. Each is named, its items kept; the old counts line is read as RDKit reads it."""
    from rdkit import Chem

    from siggate.data.chem import InvalidSmiles, parse_smiles
    from siggate.data.csvdata import read_table

    block = Chem.MolToMolBlock(Chem.MolFromSmiles("CCO"))
    lines = block.split("\n")
    unended = "\n".join(line for line in lines if not line.startswith("M  END"))
    empty = "none\n\n\n  0  0  0  0  0  0  0  0  0  0999 V2000\nM  END\n"
    sdf = tmp_path / "odd.sdf"
    sdf.write_text(f"{block}> <y>\n1.0\n\n$$$$\n{unended}> <y>\n2.0\n> <id>\nA2\n\n$$$$\n{empty}> <y>\n3.0\n\n$$$$\n")
    header, rows = read_table(sdf, ",")
    assert header == ["smiles", "name", "y", "id"] and [r[2:] for r in rows] == [["1.0", ""], ["2.0", "A2"], ["3.0", ""]]
    assert rows[0][0] == "CCO" and rows.lines.tolist() == [1, 15, 30]
    why = []
    for r in rows[1:]:
        with pytest.raises(InvalidSmiles) as exc:
            parse_smiles(r[0])
        why.append(str(exc.value))
    assert why == ["RDKit cannot read this record's molfile (it has no 'M  END' line after its atom and bond blocks); fix "
                   "or drop the record",
                   "RDKit cannot read this record's molfile (its molecule has no atoms); fix or drop the record"]
    old = tmp_path / "old.sdf"
    old.write_text("\n".join(lines[:3] + [lines[3][:33].rstrip()] + lines[4:]) + "> <y>\n1.5\n\n$$$$\n")
    assert read_table(old, ",") == (["smiles", "y"], [["CCO", "1.5"]])
    from siggate.data.sdfile import is_sd  # (told within predict's first 8 KiB, however large the first molecule)

    large = Chem.MolToMolBlock(Chem.MolFromSmiles("C" * 160 + "N")).split("\n")
    assert is_sd("\n".join(large[:3] + [large[3][:33].rstrip()] + large[4:]).encode()[:8192])
    both = tmp_path / "both.sdf"  # items 'smiles' and 'input_smiles': two columns input_smiles were made
    both.write_text(f"{block}> <smiles>\nOCC\n\n> <input_smiles>\nC(O)C\n\n$$$$\n")
    assert read_table(both, ",") == (["smiles", "input_input_smiles", "input_smiles"], [["CCO", "OCC", "C(O)C"]])
    not_sd = tmp_path / "not.csv"  # (a CSV whose fourth line begins with numbers is a CSV)
    not_sd.write_text("smiles,y\nCCO,1\nCCN,2\n  3  2,x\nM  END,4\n")
    assert read_table(not_sd, ",")[0] == ["smiles", "y"]


def test_unknown_flags_are_named_with_the_flags_they_begin_or_resemble(capsys):
    from siggate.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["train", "--epoch", "3", "--thread", "1", "--seedz", "2"])
    err = capsys.readouterr().err.splitlines()[-1]
    assert exc.value.code == 2 and err == ("siggate train: error: unrecognized arguments: --epoch 3 --thread 1 --seedz 2 "
                                           "(did you mean --epochs for --epoch, --threads for --thread, --seed for "
                                           "--seedz?)")
    with pytest.raises(SystemExit) as exc:  # nothing close: no hint
        main(["train", "--zzzzzz"])
    assert exc.value.code == 2 and capsys.readouterr().err.splitlines()[-1] == (
        "siggate train: error: unrecognized arguments: --zzzzzz")
    with pytest.raises(SystemExit) as exc:  # siggate's own flag after the command ('did you mean --overwrite?')
        main(["train", "--verbose"])
    assert exc.value.code == 2 and capsys.readouterr().err.splitlines()[-1] == (
        "siggate train: error: unrecognized arguments: --verbose (--verbose goes before the command: siggate --verbose "
        "train ...)")
    for argv in (["--input", "a.csv", "--data", "b.csv"], ["--data", "a.csv", "--data", "b.csv"]):
        with pytest.raises(SystemExit) as exc:  # the second silently won
            main(["predict", "--checkpoint", "run", *argv])
        assert exc.value.code == 2 and capsys.readouterr().err.splitlines()[-1] == (
            "siggate predict: error: --input and --data name one file; give one of them, once")


def test_no_command_takes_a_flag_by_its_prefix():
    """Every parser of the CLI (sub-commands, analyses, bench's own) refuses abbreviations."""
    import argparse

    from siggate.cli import build_parser
    from siggate.perf.args import build_parser as bench_parser

    seen = []

    def walk(parser):
        seen.append(parser.prog)
        assert parser.allow_abbrev is False, parser.prog
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    walk(sub)

    walk(build_parser())
    walk(bench_parser())
    assert {"siggate", "siggate predict", "siggate analyze entropy", "siggate bench"} <= set(seen)


def test_an_output_named_gz_is_compressed_and_one_of_another_type_is_refused(ckpt, tmp_path, capsys):
    """--output out.csv.gz (or evaluate's scores.json.gz) wrote plain text under that name, which
    pandas could not read back; out.xlsx got CSV text too."""
    import gzip

    plain, packed = tmp_path / "out.csv", tmp_path / "out.csv.gz"
    for out in (plain, packed):
        rc, _, err = run_cli(["predict", "--checkpoint", str(ckpt), "CCO", "c1ccccc1", "--output", str(out)], capsys)
        assert rc == 0, err
    assert gzip.decompress(packed.read_bytes()) == plain.read_bytes()
    rc, _, err = run_cli(["predict", "--checkpoint", str(ckpt), "--input", str(packed)], capsys)  # read back
    assert rc == 0 and "2 rows, 2 predicted" in err
    data = tmp_path / "d.csv"
    data.write_text("smiles,y\nCCO,0.3\nc1ccccc1,0.6\nCCCC,0.4\n")
    rc, out, err = run_cli(["evaluate", "--checkpoint", str(ckpt), "--data", str(data), "--output",
                            str(tmp_path / "s.json.gz")], capsys)
    assert rc == 0, err
    scores = json.loads(gzip.decompress((tmp_path / "s.json.gz").read_bytes()))
    assert scores == json.loads(out) and scores["checkpoint"] == str(ckpt)  # the scores it printed
    for cmd, name, fix in (("predict", "out.xlsx", "out.csv"), ("evaluate", "s.parquet", "s.json"),
                           ("predict", "out.csv.bz2", "out.csv")):
        rc, _, err = run_cli([cmd, "--checkpoint", str(ckpt), *(["CCO"] if cmd == "predict" else []), "--output",
                              str(tmp_path / name)], capsys)
        kind = "CSV" if cmd == "predict" else "JSON"
        assert rc == 2 and err == (f"siggate {cmd}: error: --output {tmp_path / name}: siggate writes {kind} text, not "
                                   f"{Path(name).suffix} (gzip-compressed with .gz); give e.g. {tmp_path / fix} or "
                                   f"{tmp_path / fix}.gz\n")
        assert not (tmp_path / name).exists()


def test_input_error_leaves_no_output_file(ckpt, tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("smile,y\nCCO,1\n")
    out = tmp_path / "out.csv"
    rc, _, err = run_cli(["predict", "--checkpoint", str(ckpt), "--input", str(bad), "--output", str(out)], capsys)
    assert rc == 2
    assert "column 'smiles' not found" in err and "smile" in err
    assert not out.exists()
    assert list(tmp_path.glob(".out.csv*")) == []


def test_a_previous_output_survives_a_failed_run(ckpt, tmp_path, capsys):
    """A corrupt .gz discovered mid-stream: exit 2 and the old output is untouched."""
    src = tmp_path / "in.csv.gz"
    body = "smiles\n" + "C\n" * 5000  # more than the 8 KB checked up front
    src.write_bytes(gzip.compress(body.encode())[:-8])  # the CRC/size trailer is cut off
    out = tmp_path / "out.csv"
    out.write_text("old results\n")
    rc, _, err = run_cli(["predict", "--checkpoint", str(ckpt), "--input", str(src), "--output", str(out),
                          "--chunk-size", "500"], capsys)
    assert rc == 2
    assert "truncated or corrupt" in err
    assert out.read_text() == "old results\n"
    assert list(tmp_path.glob(".out.csv*")) == []


def test_output_file_gets_normal_permissions(ckpt, tmp_path, capsys):
    out = tmp_path / "out.csv"
    rc, _, _ = run_cli(["predict", "--checkpoint", str(ckpt), "CCO", "--output", str(out)], capsys)
    assert rc == 0
    mask = os.umask(0)
    os.umask(mask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~mask


def test_an_output_that_is_a_pipe_a_device_a_link_or_write_protected_is_written_as_such(ckpt, predictor, tmp_path,
                                                                                         capsys):
    """--output replaced whatever was at its path with a new file: a named pipe (its reader got
    nothing), a device (as root, --output /dev/null would replace the system's), a symlink (the link
    itself), and a write-protected file (its mode reset) (helper-155). A pipe or a device is written
    into, a link's file is replaced and the link kept, a replaced file keeps its mode, a
    write-protected one is refused; ``--output -`` is standard output, as ``--input -`` is standard
    input, and a .tsv name (the text has commas) is refused."""
    import threading

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()), daemon=True)
    reader.start()
    rc, _, err = run_cli(["predict", "--checkpoint", str(ckpt), "CCO", "--output", str(fifo)], capsys)
    reader.join(timeout=30)
    assert rc == 0 and fifo.is_fifo() and got and got[0].splitlines()[1].startswith("CCO,"), err
    data = tmp_path / "d.csv"
    data.write_text(f"smiles,{predictor.info.target_names[0]}\nCCO,0.3\nc1ccccc1,0.6\nCCCC,0.4\n")
    rc, _, err = run_cli(["evaluate", "--checkpoint", str(ckpt), "--data", str(data), "--output", "/dev/null"], capsys)
    assert rc == 0 and Path("/dev/null").is_char_device(), err

    target, link = tmp_path / "target.csv", tmp_path / "link.csv"
    target.write_text("old\n")
    os.chmod(target, 0o640)
    link.symlink_to(target.name)
    rc, _, err = run_cli(["predict", "--checkpoint", str(ckpt), "CCO", "--output", str(link)], capsys)
    assert rc == 0 and link.is_symlink() and target.read_text().startswith("smiles,"), err
    assert target.stat().st_mode & 0o777 == 0o640

    locked = tmp_path / "locked.csv"
    locked.write_text("keep\n")
    os.chmod(locked, 0o444)
    rc, _, err = run_cli(["predict", "--checkpoint", str(ckpt), "CCO", "--output", str(locked)], capsys)
    assert rc == 2 and err == (f"siggate predict: error: --output {locked} is write-protected; make it writable (chmod "
                               "u+w) if it may be replaced, or choose another --output\n")
    assert locked.read_text() == "keep\n"

    rc, out, err = run_cli(["predict", "--checkpoint", str(ckpt), "CCO", "--output", "-"], capsys)
    assert rc == 0 and out.splitlines()[1].startswith("CCO,") and not Path("-").exists(), err
    log = tmp_path / "log.txt"  # --output /dev/stdout >> log: appended (its link named the log, which was replaced)
    log.write_text("EARLIER\n")
    with open(log, "ab") as fh:
        done = subprocess.run([sys.executable, "-m", "siggate", "predict", "--checkpoint", str(ckpt), "CCO", "--output",
                               "/dev/stdout"], stdout=fh, stderr=subprocess.PIPE, env=subprocess_env(), text=True)
    assert done.returncode == 0, done.stderr
    assert log.read_text().splitlines()[:2] == ["EARLIER", out.splitlines()[0]]
    rc, _, err = run_cli(["evaluate", "--checkpoint", str(ckpt), "--data", str(data), "--output", "-"], capsys)
    assert rc == 2 and err == ("siggate evaluate: error: --output -: the scores are printed on standard output "
                               "already; drop --output, or give a file\n")
    rc, _, err = run_cli(["predict", "--checkpoint", str(ckpt), "CCO", "--output", str(tmp_path / "p.tsv")], capsys)
    assert rc == 2 and "siggate writes CSV text, not .tsv" in err and not (tmp_path / "p.tsv").exists()


def test_a_tilde_the_shell_did_not_expand_is_named_not_made_a_folder(ckpt, tmp_path, capsys, monkeypatch):
    """``--out "~/runs/x"`` (quoted: the shell leaves the ``~``) made a folder named ``~`` in the
    working folder for train, explain and evaluate, which a later ``rm -rf ~`` typed to remove it
    would take for the home folder; predict said "its folder ~ does not exist" (helper-155). Each
    names the ``~`` and the path it stands for; a folder that is really named ``~`` is written."""
    monkeypatch.chdir(tmp_path)
    home = os.path.expanduser("~")
    for argv, flag, given in ((["predict", "--checkpoint", str(ckpt), "CCO", "--output", "~/p.csv"], "--output", "~/p.csv"),
                              (["explain", "--checkpoint", str(ckpt), "CCO", "--out", "~/ex"], "--out", "~/ex"),
                              (["train", "--data", "d.csv", "--target-col", "y", "--out", "~/run"], "--out", "~/run")):
        rc, _, err = run_cli(argv, capsys)
        assert rc == 2 and f"error: {flag} {given}: '~' is not expanded to a home folder here (a quoted path?); give " \
            f"{home}/{given[2:]} instead" in err, err
    assert not (tmp_path / "~").exists()
    rc, _, err = run_cli(["predict", "--checkpoint", str(ckpt), "CCO", "--output", "~nobody_here_xyz/p.csv"], capsys)
    assert rc == 2 and "not expanded" not in err  # (no such user: a name like any, whose folder is not there)
    (tmp_path / "~").mkdir()
    rc, _, err = run_cli(["predict", "--checkpoint", str(ckpt), "CCO", "--output", "~/p.csv"], capsys)
    assert rc == 0 and (tmp_path / "~" / "p.csv").is_file(), err


def test_pretrained_weights_given_to_predict_or_evaluate_are_named_with_the_fine_tune(tmp_path, capsys):
    """The shipped pretrained weights given to predict were "checkpoint format must be an integer,
    got 'siggate-pretrained-1'", a pretraining's folder "a folder with no predictor.json" (helper-155):
    each is named as pretrained weights, with the command that fine-tunes them."""
    import shutil

    import siggate

    shipped = Path(siggate.__file__).parent / "pretrained" / "default.pt"
    folder = tmp_path / "pt"
    folder.mkdir()
    shutil.copy(shipped, folder / "pretrained.pt")
    for cmd in (["predict", "--checkpoint", str(shipped), "CCO"], ["evaluate", "--checkpoint", str(shipped)]):
        rc, _, err = run_cli(cmd, capsys)
        assert rc == 2 and err.strip().endswith(
            f"{shipped} holds pretrained weights (siggate pretrain's), not a trained model: they predict nothing "
            f"until fine-tuned on labels: siggate train --data FILE.csv --target-col COL --init {shipped}"), err
    rc, _, err = run_cli(["predict", "--checkpoint", str(folder), "CCO"], capsys)
    assert rc == 2 and err.strip().endswith(
        f"{folder} holds a pretraining (pretrained.pt), not a trained model: its weights predict nothing until "
        f"fine-tuned on labels: siggate train --data FILE.csv --target-col COL --init {folder}"), err


def test_a_dangling_link_as_out_and_a_missing_data_file_are_named_first(ckpt, tmp_path, capsys):
    """``--out`` a symbolic link to a folder that is not there said "cannot create the folder (File
    exists)"; ``evaluate --data missing.csv --output sc.json`` beside a ``sc_parity.png`` of the
    user's complained of the picture before the missing file (helper-155)."""
    link = tmp_path / "dl"
    link.symlink_to("nowhere")
    rc, _, err = run_cli(["explain", "--checkpoint", str(ckpt), "CCO", "--out", str(link)], capsys)
    assert rc == 2 and err.strip() == (f"siggate explain: error: --out {link}: a symbolic link to nowhere, which is not "
                                       "there; create that folder, or choose another path for the explanations"), err
    (tmp_path / "sc_parity.png").write_bytes(b"mine")
    rc, _, err = run_cli(["evaluate", "--checkpoint", str(ckpt), "--data", str(tmp_path / "missing.csv"), "--output",
                          str(tmp_path / "sc.json")], capsys)
    assert rc == 2 and err.strip() == f"siggate evaluate: error: --data {tmp_path / 'missing.csv'}: no such file", err


def test_a_file_systems_refusal_is_one_line_with_its_file_and_fix(ckpt, tmp_path, capsys, monkeypatch):
    """A full disk, a file size limit or a file without read permission ended train, predict and
    explain in a traceback (a torch ``RuntimeError: unexpected pos`` for a checkpoint cut short).
    Each is one line naming the file and what to do, exit 2; a failed ``torch.save`` is named as a
    failed write of its file."""
    import errno

    import siggate.train.predict as P
    from siggate.files import atomic_write

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "p.csv"))

    monkeypatch.setattr(P, "predict_to_csv", full)
    rc, _, err = run_cli(["predict", "--checkpoint", str(ckpt), "CCO", "--output", str(tmp_path / "p.csv")], capsys)
    assert rc == 2 and err == (f"siggate predict: error: {tmp_path / 'p.csv'}: No space left on device; free space and "
                               "run the command again (a train run goes on with --resume)\n")
    monkeypatch.undo()

    # a real size limit (ulimit -f): the failed write names the output (its temporary file removed)
    # or standard output; it named no file
    import resource

    many = tmp_path / "many.csv"
    many.write_text("smiles\n" + "CCO\nc1ccccc1O\n" * 400)
    limit = lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (8192, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))  # noqa: E731
    command = [sys.executable, "-m", "siggate", "predict", "--checkpoint", str(ckpt), "--input", str(many)]
    for output, named in ((["--output", str(tmp_path / "big.csv")], str(tmp_path / "big.csv")), ([], "standard output")):
        with open(tmp_path / "stdout", "wb") as sink:
            done = subprocess.run(command + output, stdout=sink, stderr=subprocess.PIPE, text=True, preexec_fn=limit,
                                  cwd=tmp_path)
        assert done.returncode == 2 and done.stderr.splitlines()[-1] == (
            f"siggate predict: error: {named}: File too large; raise the file size limit (ulimit -f) and run the "
            "command again (a train run goes on with --resume)"), done.stderr
    assert not list(tmp_path.glob(".big.csv*")) and not (tmp_path / "big.csv").exists()
    script = "import sys; from siggate.files import atomic_write_bytes; atomic_write_bytes(sys.argv[1], bytes(65536))"
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "run.json")], stderr=subprocess.PIPE,
                          text=True, preexec_fn=limit)  # (every file a run writes)
    assert done.stderr.splitlines()[-1] == f"OSError: [Errno 27] File too large: '{tmp_path / 'run.json'}'", done.stderr
    assert not list(tmp_path.glob(".run.json*"))

    def cut_short(fh):  # an OSError of a message alone keeps its message (naming a file dropped it)
        raise OSError("the arrays were cut short")

    with pytest.raises(OSError) as exc:
        atomic_write(tmp_path / "x.bin", cut_short)
    assert str(exc.value) == "the arrays were cut short"

    def pipe_gone(fh):  # a broken pipe is no file's fault: not named (a pipe as --output: /dev/stdout)
        raise BrokenPipeError(errno.EPIPE, "Broken pipe")

    with pytest.raises(BrokenPipeError) as exc:
        atomic_write(tmp_path / "x.bin", pipe_gone)
    assert exc.value.filename is None

    import siggate.train.checkpoint as C

    def locked(path, **kwargs):  # a checkpoint without read permission was "truncated or corrupt"
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr(C, "safe_torch_load", locked)
    rc, _, err = run_cli(["predict", "--checkpoint", str(ckpt), "CCO"], capsys)
    assert rc == 2 and err == (f"siggate predict: error: {ckpt}: Permission denied; give your user permission to it "
                               "(chmod, or the folder's owner), or choose another path\n"), err
    monkeypatch.undo()

    def cut(fh):
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 1088 vs 982")

    with pytest.raises(OSError) as exc:
        atomic_write(tmp_path / "w.pt", cut)
    assert exc.value.errno == errno.EIO and exc.value.filename == str(tmp_path / "w.pt")
    assert not list(tmp_path.glob(".w.pt*")) and not (tmp_path / "w.pt").exists()
    with pytest.raises(RuntimeError, match="another"):  # not a failed write: as it was
        atomic_write(tmp_path / "w.pt", lambda fh: (_ for _ in ()).throw(RuntimeError("another")))


# --------------------------------------------------------------------------- 100k rows

_STREAM_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    import siggate.train.predict as P
    from siggate.cli import main

    out = Path(sys.argv[sys.argv.index("--output") + 1])
    seen = []  # per chunk: its rows, and the data rows already in the output's temporary file
    real = P.read_input

    def written():
        tmp = list(out.parent.glob(f".{out.name}.*.tmp"))
        return max(0, sum(1 for _ in open(tmp[0], "rb")) - 1) if len(tmp) == 1 else None  # less the header

    def tracked(*a, **k):
        rows = real(*a, **k)
        chunks = rows.chunks
        def gen():
            for c in chunks:
                seen.append([len(c), written()])
                yield c
        rows.chunks = gen()
        return rows

    P.read_input = tracked
    rc = main(sys.argv[1:])
    print(json.dumps({"rc": rc, "seen": seen}))
    """
)


@pytest.mark.slow
def test_rows_stream_chunk_by_chunk(tmp_path):
    """12,000 rows in, 12,000 rows out, one to one, in chunks of 1,000: when each chunk is read, the
    output already holds every row of the chunks before it (written and flushed, not held), so
    memory stays flat however long the input. (The test before measured peak RSS over 100,000 rows
    against a threshold.)"""
    train_tiny(tmp_path / "run", tiny_config(model={"pe": "none"}), tiny_dataset(64, pe_steps=0))
    ckpt = tmp_path / "run" / "best.pt"
    with rdBase.BlockLogs():
        pool = [s for s in nci_smiles(1500) if Chem.MolFromSmiles(s).GetNumAtoms() <= 12][:300]
    assert len(pool) >= 100
    n = 12_000
    bad_every = 997
    src = tmp_path / "big.csv"
    expected = []
    with open(src, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "smiles"])
        for i in range(n):
            s = "not_a_smiles" if i % bad_every == 0 else pool[i % len(pool)]
            expected.append(s)
            w.writerow([i, s])
    out = tmp_path / "big_out.csv"
    script = tmp_path / "stream.py"
    script.write_text(_STREAM_SCRIPT)
    proc = subprocess.run(
        [sys.executable, str(script), "predict", "--checkpoint", str(ckpt), "--input", str(src),
         "--output", str(out), "--chunk-size", "1000"],
        capture_output=True, text=True, env=subprocess_env(), timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res["rc"] == 1  # the bad rows
    assert res["seen"] == [[1000, 1000 * k] for k in range(12)]
    assert not list(tmp_path.glob(".big_out.csv.*.tmp"))  # renamed when done
    rows = read_output(out)
    assert len(rows) == n
    assert [r["smiles"] for r in rows] == expected
    assert [r["id"] for r in rows] == [str(i) for i in range(n)]  # the input's other columns come through
    failed = [i for i, r in enumerate(rows) if r["error"]]
    assert failed == list(range(0, n, bad_every))
    assert all(r["y"] for i, r in enumerate(rows) if i % bad_every)


# --------------------------------------------------------------------------- output columns


def test_input_columns_come_through_in_order_and_a_label_column_gets_pred(ckpt, tmp_path, capsys):
    src = tmp_path / "in.csv"
    src.write_text("id,y,smiles,note\nm1,0.5,CCO,a\nm2,,not_a_smiles,\"b, c\"\nm3,1.5,c1ccccc1O,\n")
    out = tmp_path / "out.csv"
    rc, _, _ = run_cli(["predict", "--checkpoint", str(ckpt), "--input", str(src), "--output", str(out)], capsys)
    assert rc == 1  # one bad row
    with open(out, newline="") as fh:
        header = next(csv.reader(fh))
    assert header == ["id", "y", "smiles", "note", "y_pred", "nearest_train_similarity", "outside_domain",
                      "error"]  # no two columns named y
    rows = read_output(out)
    assert [(r["id"], r["y"], r["note"]) for r in rows] == [("m1", "0.5", "a"), ("m2", "", "b, c"), ("m3", "1.5", "")]
    assert rows[1]["y_pred"] == "" and rows[1]["error"].startswith("SMILES parse error")
    from siggate.train.predict import SmilesPredictor

    direct = SmilesPredictor(ckpt).predict_rows(["CCO"])[0]["y"]
    # the file: the shortest text that reads back as the same float32
    assert float(rows[0]["y_pred"]) == pytest.approx(direct, rel=1e-7) and rows[0]["error"] == ""
    import struct

    assert struct.unpack("f", struct.pack("f", float(rows[0]["y_pred"])))[0] == struct.unpack("f", struct.pack("f", direct))[0]
    rc, stdout, _ = run_cli(["predict", "--checkpoint", str(ckpt), "CCO"], capsys)
    assert stdout.splitlines()[0] == "smiles,y,nearest_train_similarity,outside_domain,error"  # SMILES as arguments
    # the peer benchmark's runner reads the prediction column as the one that is not an input column
    peers = load_script("peers_run", Path(__file__).resolve().parents[1] / "benchmarks" / "peers" / "run.py", reuse=True)
    assert peers.prediction_column(src, rows) == "y_pred"


def test_an_earlier_predictions_file_read_back_gets_no_second_error_column(ckpt, tmp_path, capsys):
    """A file holding predict's own columns (its output fed back in) got a second 'error'
    column, which spreadsheets and csv.DictReader read as one; the new one is error_pred."""
    src = tmp_path / "in.csv"
    src.write_text("smiles,y,error,error_pred\nCCO,0.5,old,older\nnot_a_smiles,,,\n")
    out = tmp_path / "out.csv"
    rc, _, _ = run_cli(["predict", "--checkpoint", str(ckpt), "--input", str(src), "--output", str(out)], capsys)
    assert rc == 1
    with open(out, newline="") as fh:
        header, *rows = list(csv.reader(fh))
    assert header == ["smiles", "y", "error", "error_pred", "y_pred", "nearest_train_similarity", "outside_domain",
                      "error_pred_pred"]
    assert [r[2:4] for r in rows] == [["old", "older"], ["", ""]]
    assert rows[0][-1] == "" and rows[1][-1].startswith("SMILES parse error")


def test_output_names_read_back_twice_stay_unique():
    """An output read back a second time holds y, y_pred, error and error_pred: the new columns
    took y_pred and error_pred again; each name now gets _pred while it is taken."""
    from siggate.train.rundir import error_column, prediction_columns

    before = ["smiles", "y", "y_pred", "error", "error_pred", "outside_domain"]
    cols = prediction_columns(["y"], before, True, after=("nearest_train_similarity", "outside_domain"))
    assert cols == ["y_pred_pred", "y_pred_pred_uncertainty", "nearest_train_similarity", "outside_domain_pred"]
    assert error_column(before) == "error_pred_pred"
    every = before + cols + [error_column(before)]
    assert len(every) == len(set(every))
    assert prediction_columns(["error"], ["smiles", "error"]) == ["error_pred_pred"]  # error_pred: the errors


def test_ensemble_columns_are_named_after_the_targets(predictor):
    ens = copy.copy(predictor)
    ens.ensemble = True
    domain = ["nearest_train_similarity", "outside_domain"]
    assert ens.output_columns(["smiles"]) == ["y", "y_uncertainty", *domain]
    assert ens.output_columns(["smiles", "y"]) == ["y_pred", "y_pred_uncertainty", *domain]
    assert ens.output_columns(["smiles", "y_uncertainty"]) == ["y_pred", "y_pred_uncertainty", *domain]
    assert predictor.output_columns(["smiles", "error"]) == ["y", *domain]
    assert predictor.output_columns(["smiles", "outside_domain"]) == ["y", "nearest_train_similarity",
                                                                      "outside_domain_pred"]


def test_predict_counts_the_rows_outside_the_domain(ckpt, capsys):
    """Rows outside the applicability domain were flagged per row only: a chemist predicting a
    file saw no sign that most of it was extrapolation. The summary counts them."""
    smiles = [*nci_smiles(3), "FC(F)(F)C(F)(F)C(F)(F)F", "C[Si](C)(C)[Si](C)(C)C", "O=[N+]([O-])c1c(Cl)c(Cl)c(Cl)c(Cl)c1Cl"]
    rc, stdout, err = run_cli(["predict", "--checkpoint", str(ckpt), *smiles], capsys)
    assert rc == 0, err
    rows = list(csv.DictReader(stdout.splitlines()))
    outside = sum(r["outside_domain"] == "true" for r in rows)
    assert outside >= 1  # these molecules are nothing like the training ones
    assert f"warning: {outside} of {len(rows)} predicted rows are outside the run's applicability domain" in err
    rc, stdout, err = run_cli(["predict", "--checkpoint", str(ckpt), smiles[0]], capsys)  # a training molecule
    assert list(csv.DictReader(stdout.splitlines()))[0]["outside_domain"] == "false"
    assert "outside the run's applicability domain" not in err


def test_a_molecule_predicts_alike_however_its_stereo_smiles_is_written(tmp_path, capsys):
    """A CSV run reads a stereocentre by its CIP label: S-alanine spelled two ways was two graphs
    (RDKit's tag follows the written order), the second one R-alanine's. A run recorded before
    (its info without ``chirality``) is read as it trained, by the tag: predict featurizes it so,
    and resuming it is refused, since this siggate would read its molecules otherwise."""
    from test_engine import TINY

    rows = ["smiles,y"] + [f"{s},{i % 7 / 3:.3f}" for i, s in enumerate(nci_smiles(60))]
    rows += ["C[C@H](N)C(=O)O,0.5", "C[C@@H](N)C(=O)O,1.5", "C[C@H](O)CC,0.7", "C[C@@H](O)CC,0.2"]
    data = tmp_path / "chiral.csv"
    data.write_text("\n".join(rows) + "\n")
    run = tmp_path / "run"
    argv = ["train", "--data", str(data), "--target-col", "y", "--members", "gnn", "--init", "none", "--epochs", "2",
            "--split", "random", "--cache-dir", str(tmp_path / "cache"), "--out", str(run), "--no-progress"]
    for item in TINY:
        argv += ["--set", item]
    rc, _, err = run_cli(argv, capsys)
    assert rc == 0, err
    ckpt = torch.load(run / "best.pt", weights_only=True)
    assert ckpt["info"]["chirality"] == "cip"
    s_ala = ["C[C@H](N)C(=O)O", "N[C@@H](C)C(=O)O", "OC(=O)[C@H](C)N"]
    rc, out, err = run_cli(["predict", "--checkpoint", str(run), *s_ala, "C[C@@H](N)C(=O)O"], capsys)
    assert rc == 0, err
    got = [float(r["y"]) for r in csv.DictReader(out.splitlines())]
    assert got[0] == got[1] == got[2] != got[3], got
    # a run recorded before: its molecules read by the tag, as it trained (the two spellings differ)
    from siggate.train.predict import SmilesPredictor

    for name in ("best.pt", "last.pt"):
        blob = torch.load(run / name, weights_only=True)
        del blob["info"]["chirality"]
        torch.save(blob, run / name)
    old = SmilesPredictor(run / "best.pt", domain=False)
    assert old.info.chirality == "tag"
    tags = [old.featurize(s).x[:, 1].tolist() for s in s_ala[:2]]
    assert tags[0] != tags[1]
    resume = [*argv[:argv.index("--epochs")], "--epochs", "3", *argv[argv.index("--epochs") + 2:], "--resume"]
    rc, _, err = run_cli(resume, capsys)  # the checkpoints' word (the training's own check, after the data)
    assert rc == 2 and "the run read its atoms' chirality as 'tag', this siggate reads them as 'cip'" in err, err
    record = yaml.safe_load((run / "config.yaml").read_text())
    del record["_meta"]["task"]["chirality"]  # the record's too: refused before the data, by the reading rule
    (run / "config.yaml").write_text(yaml.safe_dump(record, sort_keys=False))
    rc, _, err = run_cli(resume, capsys)
    assert rc == 2 and "its GNN read the molecules' stereocentres by RDKit's tag" in err, err
    from siggate.train.study import reuse_status

    cfg = yaml.safe_load((run / "config.yaml").read_text())
    cfg.pop("_meta")
    status = reuse_status(run, cfg)  # compare and the studies do not mix it in beside new runs either
    assert status.state == "conflict" and "stereocentres" in status.reason, status


def test_the_epoch_star_marks_a_best_epoch_only_where_val_chooses_one(tmp_path, caplog):
    """A run that keeps its last epoch (a member under --weights val) starred every epoch line, as
    if each were a new best: the star marks the best validation score so far, kept as best.pt."""
    import logging

    ds = tiny_dataset()
    lines = {}
    for select in ("best", "last"):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="siggate.train"):
            train_tiny(tmp_path / select, tiny_config(train={"epochs": 3, "select": select}), dataset=ds)
        lines[select] = [m for m in caplog.messages if m.startswith("epoch ")]
    assert [len(v) for v in lines.values()] == [3, 3]
    assert lines["best"][0].endswith("s  *")  # (the first epoch is the best so far)
    assert not [m for m in lines["last"] if m.endswith("*")]
