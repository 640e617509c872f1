"""Input that used to be misread in silence, or to end in a traceback (issue 30): each case is
now read as meant, reported per row, or refused in one line with exit code 2 and the fix.

Sections: files that are not UTF-8 CSV text (train and evaluate); ambiguous headers and
rows with extra fields; flags that only make sense with ``--data``; ``--threads``; outputs
and caches that cannot be written.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import zipfile

import pytest

from recipe_flags import GNN_SCRATCH
from test_predict import nci_smiles, one_thread, read_output, run_cli, shared_checkpoint

# the GNN alone from scratch: a tiny architecture, one run's folder
_TINY = [*GNN_SCRATCH, "--set", "model.layers=1", "--set", "model.dim=16", "--set", "model.pe=none", "--set", "model.heads=2",
         "--set", "model.head_layers=2", "--set", "train.warmup_epochs=0", "--set", "train.batch_size=16",
         "--no-progress"]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return shared_checkpoint(tmp_path_factory)


@pytest.fixture(autouse=True)
def _single_thread(monkeypatch):
    monkeypatch.setenv("SIGGATE_OFFLINE", "1")
    with one_thread():
        yield


def _table(n: int = 30, extra: str = "") -> str:
    """``smiles,y,split`` rows of NCI molecules (2/3 train, then val, then test)."""
    lines = ["smiles,y,split" + extra]
    for i, s in enumerate(nci_smiles(n)):
        split = "train" if i < 2 * n // 3 else ("val" if i < 5 * n // 6 else "test")
        lines.append(f"{s},{len(s) / 10},{split}" + ("," + f"id{i}" if extra else ""))
    return "\n".join(lines) + "\n"


def _one_error_line(err: str, command: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.startswith(f"siggate {command}: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _xlsx_bytes() -> bytes:
    """The members by which a spreadsheet program's .xlsx is recognised (a zip with ``xl/``)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("[Content_Types].xml", "<Types/>")
        z.writestr("xl/workbook.xml", "<workbook/>")
        z.writestr("xl/worksheets/sheet1.xml", "<worksheet/>")
    return buf.getvalue()


#: (id, file bytes, what the message must say besides "save it as UTF-8 CSV")
NOT_UTF8_CSV = [
    ("xlsx", _xlsx_bytes(), "is an Excel workbook (.xlsx), not a CSV file"),
    ("xls", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 64, "is an Excel 97-2003 workbook (.xls)"),
    ("latin1", "smiles,y,name\nCCO,1.0,B\u00e9lier\nCCN,2.0,x\n".encode("latin-1"),
     "is not UTF-8 text: byte 0xe9 on line 2"),
    ("macroman-cr", "smiles,y,name\rCCO,1.0,x\rCCN,2.0,y\rCCC,3.0,\u00b5M\r".encode("mac-roman"),  # "CSV (Macintosh)"
     "is not UTF-8 text: byte 0xb5 on line 4"),  # (it said line 1: only \n was counted)
    ("utf16", "smiles,y\nCCO,1\n".encode("utf-16"), "is UTF-16 text, not a UTF-8 CSV file"),
]


@pytest.mark.parametrize("content, expected", [c[1:] for c in NOT_UTF8_CSV], ids=[c[0] for c in NOT_UTF8_CSV])
def test_train_refuses_a_file_that_is_not_utf8_csv(tmp_path, capsys, content, expected):
    data = tmp_path / "mols.csv"
    data.write_bytes(content)
    rc, _, err = run_cli(["train", "--data", str(data), "--target-col", "y", "--epochs", "1", "--out",
                          str(tmp_path / "run"), "--cache-dir", str(tmp_path / "c"), *_TINY], capsys)
    assert rc == 2
    line = _one_error_line(err, "train")
    assert expected in line and "save it as UTF-8 CSV" in line
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("content, expected", [c[1:] for c in NOT_UTF8_CSV] + [(b"", "the file is empty")],
                         ids=[c[0] for c in NOT_UTF8_CSV] + ["empty"])
def test_evaluate_refuses_a_file_that_is_not_utf8_csv(ckpt, tmp_path, capsys, content, expected):
    data = tmp_path / "ext.csv"
    data.write_bytes(content)
    rc, out, err = run_cli(["evaluate", "--checkpoint", str(ckpt), "--data", str(data), "--target-col", "y"], capsys)
    assert rc == 2 and out == ""
    assert expected in _one_error_line(err, "evaluate")


def test_duplicate_header_is_refused_in_train_and_evaluate(ckpt, tmp_path, capsys):
    """``smiles,y,y``: which ``y`` is meant cannot be known (pandas read the first one)."""
    data = tmp_path / "d.csv"
    data.write_text("smiles,y,y\nCCO,1,5\nCCN,2,6\nCCC,3,7\n")
    want = "the header names column 'y' 2 times (columns 2, 3); rename the copies"
    rc, _, err = run_cli(["train", "--data", str(data), "--target-col", "y", "--split", "random", "--epochs", "1",
                          "--out", str(tmp_path / "run"), "--cache-dir", str(tmp_path / "c"), *_TINY], capsys)
    assert rc == 2 and want in _one_error_line(err, "train")
    rc, _, err = run_cli(["evaluate", "--checkpoint", str(ckpt), "--data", str(data)], capsys)
    assert rc == 2 and want in _one_error_line(err, "evaluate")
    data.write_text("smiles,y,note,note\nCCO,1,a,b\nCCN,2,c,d\n")  # a repeated column nobody reads is fine
    from siggate.data.csvdata import read_table

    assert read_table(data, ",")[0] == ["smiles", "y", "note", "note"]


def test_a_row_with_an_extra_field_is_reported_not_shifted(tmp_path):
    """``CCO,1.5,train,oops`` under ``smiles,y,split``: the row is dropped with its reason
    (pandas dropped the extra field and trained the row), the others load."""
    from siggate.data.csvdata import load_csv, row_issue

    text = _table(30)
    lines = text.splitlines()
    lines[4] = lines[4] + ",oops"  # data row 3
    lines[5] = lines[5].rsplit(",", 1)[0]  # data row 4: the split field missing (empty), read as before
    data = tmp_path / "d.csv"
    data.write_text("\n".join(lines) + "\n")
    ds = load_csv(data, "smiles", ["y"], "regression", split="column:split", cache_dir=tmp_path / "c")
    assert [(r.index, r.reason) for r in ds.invalid] == [
        (3, "line 5 has 4 fields but the header has 3: a delimiter inside an unquoted field? quote that field or "
            "remove the extra one"),
        (4, "split column 'split': unknown value '' (expected train, val, valid, validation or test, in any case)")]
    assert row_issue(ds.invalid[0].reason) == "malformed row"
    assert sum(ds.sizes().values()) == 28


def test_evaluate_counts_rows_with_extra_fields_apart(ckpt, tmp_path, capsys, caplog):
    data = tmp_path / "ext.csv"
    data.write_text("smiles,y\nCCO,1.0\nCCN,2.0,9.9\nCCC,3.0\n")
    rc, out, err = run_cli(["evaluate", "--checkpoint", str(ckpt), "--data", str(data)], capsys)
    assert rc == 0, err
    res = json.loads(out)
    assert res["rows"] == {"rows": 3, "scored": 2, "invalid": 0, "unlabelled": 0, "bad_label": 0, "bad_label_cell": 0, "malformed": 1,
                           "empty": 0, "header_again": 0, "fitted": 0}
    assert any("1 rows have more fields than the header, so their fields cannot be matched to the columns; they are "
               "not scored (line 3 has 3 fields but the header has 2: a delimiter inside an unquoted field?" in
               r.getMessage() for r in caplog.records)


def test_a_table_without_a_header_is_named_by_every_reader(ckpt, tmp_path, capsys):
    """A CSV written without its header listed its first molecule and label as the column names,
    and the hint to name them with --smiles-col would have dropped that molecule in silence."""
    from siggate.data.csvdata import headerless_hint

    data = tmp_path / "h.csv"
    data.write_text("CCO,1.5\nCCN,2.5\nCCCC,3\n")
    why = ("its first line reads as a row of data (the molecule 'CCO' and the number '1.5'): the file has no header; "
           "add a first line naming the columns (e.g. smiles,y)\n")
    for argv in (["train", "--data", str(data), "--target-col", "y", "--members", "rf", "--out", str(tmp_path / "r")],
                 ["predict", "--checkpoint", str(ckpt), "--input", str(data)],
                 ["evaluate", "--checkpoint", str(ckpt), "--data", str(data)]):
        rc, out, err = run_cli(argv, capsys)
        assert rc == 2 and err.startswith(f"siggate {argv[0]}: error: ") and err.endswith(f"; {why}"), err
    assert not (tmp_path / "r").exists()
    # headers are not taken for data: names, a name beside a number-like name, numbers alone
    for header in (["smiles", "y"], ["Smiles", "pIC50"], ["ID", "SMILES", "2021"], ["1", "2"], ["CN", "name"]):
        assert headerless_hint(header) == "", header


def test_excels_sep_line_is_named_by_every_reader(ckpt, tmp_path, capsys):
    """Excel's ``sep=;`` line above the header: train named columns ['sep=', ''] not found, predict
    suggested --sep ';' (which would not help: the header is line 2)."""
    data = tmp_path / "x.csv"
    data.write_bytes(b"\xef\xbb\xbfsep=;\r\nsmiles;y\r\nCCO;1\r\nCCN;2\r\n")
    why = (f"{data}: line 1 is Excel's 'sep=;' line, which names the delimiter above the header; delete that line "
           "(siggate finds the delimiter from the header), so that the header is line 1\n")
    for argv in (["train", "--data", str(data), "--target-col", "y", "--members", "rf", "--out", str(tmp_path / "r")],
                 ["predict", "--checkpoint", str(ckpt), "--input", str(data)],
                 ["evaluate", "--checkpoint", str(ckpt), "--data", str(data)]):
        rc, out, err = run_cli(argv, capsys)
        assert rc == 2 and err == f"siggate {argv[0]}: error: {why}", err
        assert out == ("" if argv[0] != "train" else f"siggate train: members rf on dataset=csv -> {tmp_path / 'r'}\n")
    assert not (tmp_path / "r").exists()


def test_rows_ending_with_a_delimiter_the_header_lacks_are_read(ckpt, tmp_path, capsys):
    """Data lines ending in a delimiter that the header does not end with (``id,smiles,y`` over
    ``m0,CCO,5.5,``): every row failed as 'a delimiter inside an unquoted field?' (then, named, still
    failed), though its fields are the columns'. Such rows are read by train, predict and evaluate,
    as the same lines without the delimiter are (CSV reading 8); a row whose extra field holds text
    still fails."""
    from siggate.data.csvdata import load_csv
    from siggate.train.predict import SmilesPredictor

    target = SmilesPredictor(ckpt).predictor.info.target_names[0]
    lines = [f"m{i},{s},{i}.5" for i, s in enumerate(["CCO", "CCN", "CCC", "CCCO", "CCCN", "CCCC"])]
    data, plain = tmp_path / "t.csv", tmp_path / "plain.csv"
    data.write_text(f"id,smiles,{target}\n" + "".join(f"{line},\n" for line in lines[:-1]) + "m9,CCCCO,9.5,x,\n")
    plain.write_text(f"id,smiles,{target}\n" + "".join(f"{line}\n" for line in lines[:-1]) + "m9,CCCCO,9.5,x,\n")
    why = "line 7 has 5 fields but the header has 3: a delimiter inside an unquoted field? quote that field or remove " \
          "the extra one"
    for path in (data, plain):
        ds = load_csv(path, "smiles", [target], "regression", split="random", cache_dir=tmp_path / path.stem)
        assert [(r.index, r.reason) for r in ds.invalid] == [(5, why)] and sum(map(len, ds.splits.values())) == 5
    outs = []
    for path in (data, plain):
        rc, out, err = run_cli(["predict", "--checkpoint", str(ckpt), "--input", str(path)], capsys)
        assert rc == 1, err
        outs.append(list(csv.DictReader(io.StringIO(out))))
    assert outs[0] == outs[1] and [r["error"] for r in outs[0]] == [""] * 5 + [why]
    scores = []
    for path in (data, plain):
        rc, out, err = run_cli(["evaluate", "--checkpoint", str(ckpt), "--data", str(path)], capsys)
        assert rc == 0, err
        scores.append(json.loads(out))
    assert scores[0]["rows"] == scores[1]["rows"] and scores[0]["rows"]["scored"] == 5
    assert scores[0]["rows"]["malformed"] == 1


# --------------------------------------------------------------------------- flags of --data without --data


@pytest.mark.parametrize("flags", [["--target-col", "y"], ["--smiles-col", "smi"], ["--task", "binary"],
                                   ["--split", "random"], ["--val-fraction", "0.1"]],
                         ids=["target-col", "smiles-col", "task", "split", "val-fraction"])
def test_csv_flags_without_data_are_refused(tmp_path, capsys, flags):
    """``--target-col`` without ``--data`` trained nci5k, ignoring the flag."""
    rc, _, err = run_cli(["train", *flags, "--epochs", "1", "--out", str(tmp_path / "run")], capsys)
    assert rc == 2
    assert (f"{flags[0]} applies to --data FILE.csv only; give --data too (without it siggate trains nci5k)"
            in _one_error_line(err, "train"))
    assert not (tmp_path / "run").exists()


def test_val_fraction_through_the_command_line(tmp_path, capsys):
    data = tmp_path / "tt.csv"
    data.write_text(_table(30).replace(",val\n", ",train\n"))
    args = ["train", "--data", str(data), "--target-col", "y", "--epochs", "1", "--cache-dir", str(tmp_path / "c"),
            *_TINY]
    rc, _, err = run_cli([*args, "--split", "column:split", "--out", str(tmp_path / "a")], capsys)
    assert rc == 2 and "or draw them from its train rows: --val-fraction 0.1 (data.val_fraction)" in _one_error_line(err, "train")
    rc, _, err = run_cli([*args, "--split", "random", "--val-fraction", "0.1", "--out", str(tmp_path / "b")], capsys)
    assert rc == 2 and "data.val_fraction: 0.1 draws validation rows from the train rows of a split column" in err
    rc, _, err = run_cli([*args, "--split", "column:split", "--val-fraction", "0.2", "--out", str(tmp_path / "c")],
                         capsys)
    assert rc == 0, err
    assert json.loads((tmp_path / "c" / "metrics.json").read_text())["splits"] == {"train": 20, "val": 5, "test": 5}


# --------------------------------------------------------------------------- --threads, outputs and caches


@pytest.mark.parametrize("command", [["train", "--epochs", "1"], ["evaluate", "--checkpoint", "x"],
                                     ["predict", "--checkpoint", "x", "CCO"], ["data", "list"]],
                         ids=["train", "evaluate", "predict", "data"])
def test_negative_threads_is_one_line(capsys, command):
    rc, _, err = run_cli([*command, "--threads", "-1"], capsys)
    assert rc == 2
    assert "--threads -1: give a number of threads from 1 to 4096" in _one_error_line(err, command[0])


def test_data_list_with_a_name_is_refused(capsys):
    # the name was ignored: the whole list, exit 0, as if zinc had been listed or checked
    rc, out, err = run_cli(["data", "list", "zinc"], capsys)
    assert rc == 2 and out == ""
    assert "takes no dataset name ('zinc'); to check one: siggate data verify zinc" in _one_error_line(err, "data")


def test_a_file_given_where_smiles_go_is_refused_naming_input(ckpt, tmp_path, capsys, monkeypatch):
    """``predict --checkpoint RUN mols.csv`` predicted the file name as a SMILES: one row, 'SMILES
    parse error', exit 1. A file of molecules given as a SMILES is refused, naming --input; and
    ``explain --out RUN`` wrote its files among the run's."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "mols").write_text("smiles\nCCO\n")
    for command in ("predict", "explain"):
        for given in ("mols.csv", "MOLS.SMI", "a.smi.gz", "sub/mols"):
            extra = ["--out", str(tmp_path / "e")] if command == "explain" else []
            rc, out, err = run_cli([command, "--checkpoint", str(ckpt), "CCO", given, *extra], capsys)
            assert rc == 2 and out == "", err
            assert err == (f"siggate {command}: error: {given!r} is a file, not a SMILES; read its molecules with "
                           f"--input {given}\n")
    # an explanation into a run's own folder (its molecules.csv and pictures among the run's files): refused
    run = ckpt.parent if ckpt.is_file() else ckpt
    before = sorted(p.name for p in run.iterdir())
    rc, out, err = run_cli(["explain", "--checkpoint", str(ckpt), "CCO", "--out", str(run)], capsys)
    assert rc == 2 and err == (f"siggate explain: error: --out {run} holds a run, whose folder the explanation's files "
                               f"would mix into: give a folder of its own, e.g. {run / 'explained'}\n")
    assert sorted(p.name for p in run.iterdir()) == before
    (tmp_path / "CCO").write_text("a file named like a SMILES")  # no path separator: a SMILES, predicted
    rc, out, err = run_cli(["predict", "--checkpoint", str(ckpt), "CCO"], capsys)
    assert rc == 0 and out.startswith("smiles,"), err
    assert not (tmp_path / "e").exists()


@pytest.mark.parametrize("flag", ["--split", "--data-root", "--cache-dir"])
def test_node_level_flags_on_a_molecule_checkpoint_are_refused(ckpt, tmp_path, capsys, flag):
    """``predict --checkpoint MOLECULES CCO --data-root /nonexistent`` (or ``--cache-dir``) was
    accepted and ignored; like ``--split``, they apply to node-level checkpoints only."""
    rc, out, err = run_cli(["predict", "--checkpoint", str(ckpt), "CCO", flag, str(tmp_path / "x")], capsys)
    assert rc == 2 and out == ""
    assert f"{flag} applies to node-level checkpoints (pattern, cluster, sbm-large)" in _one_error_line(err, "predict")


def test_an_output_that_would_replace_what_the_command_reads_is_refused(ckpt, tmp_path, capsys):
    """``predict --output`` naming its --input, or ``evaluate --output`` its --data, replaced the
    molecules with the predictions (the labels with JSON); an output over a run's own file changed
    the run. Each is refused before any work and the file is left as it was; a new file in the run
    folder is written."""
    data = tmp_path / "ext.csv"
    text = "smiles,y\nCCO,1.0\nCCN,2.0\nCCC,3.0\n"
    data.write_text(text)
    run = ckpt.parent if ckpt.is_file() else ckpt
    metrics = run / "metrics.json"
    kept = metrics.read_bytes()
    cases = [(["predict", "--checkpoint", str(ckpt), "--input", str(data), "--output", str(data)],
              f"--output {data} is the file that --input reads"),
             (["evaluate", "--checkpoint", str(ckpt), "--data", str(data), "--output", str(tmp_path / "." / "ext.csv")],
              "is the file that --data reads"),
             (["evaluate", "--checkpoint", str(ckpt), "--output", str(metrics)], f"is a file of the run {run}"),
             (["predict", "--checkpoint", str(ckpt), "CCO", "--output", str(metrics)], f"is a file of the run {run}")]
    for argv, why in cases:
        rc, out, err = run_cli(argv, capsys)
        assert rc == 2 and out == "" and why in _one_error_line(err, argv[0]), err
        assert data.read_text() == text and metrics.read_bytes() == kept
    # another run's files: its best.pt was replaced by a CSV (predict --checkpoint A --output B/best.pt)
    import shutil

    other = tmp_path / "other"
    shutil.copytree(run, other)
    for argv in (["predict", "--checkpoint", str(ckpt), "CCO", "--output", str(other / "best.pt")],
                 ["evaluate", "--checkpoint", str(ckpt), "--output", str(other / "metrics.json")],
                 ["predict", "--checkpoint", str(ckpt), "--input", str(data), "--output",
                  str(other / "test_predictions.csv")]):
        kept_other = {p.name: p.read_bytes() for p in other.iterdir() if p.is_file()}
        rc, out, err = run_cli(argv, capsys)
        assert rc == 2 and out == "" and f"is a file of the run {other}" in _one_error_line(err, argv[0]), err
        assert {p.name: p.read_bytes() for p in other.iterdir() if p.is_file()} == kept_other
    (other / "best.pt").unlink()  # a run name not there yet: a JSON named best.pt was written into the run
    rc, out, err = run_cli(["evaluate", "--checkpoint", str(ckpt), "--output", str(other / "best.pt")], capsys)
    assert rc == 2 and f"is a file of the run {other}" in _one_error_line(err, "evaluate") and not (other / "best.pt").exists()
    shutil.rmtree(other)
    (run / "reports").mkdir()
    for new in (run / "extra-predictions.csv", run / "reports" / "test_predictions.csv"):  # the user's own files in it
        for _ in range(2):  # written, and written again
            rc, _, err = run_cli(["predict", "--checkpoint", str(ckpt), "CCO", "--output", str(new)], capsys)
            assert rc == 0 and new.is_file(), err
        new.unlink()
    (run / "reports").rmdir()
    # a fingerprint member's folder (no run record of its own) and a member given as the checkpoint:
    # the run's and every member's files are the run's
    from siggate.cli import CLIError, _check_output_file
    from siggate.train.rundir import run_folders

    member = tmp_path / "fp" / "member1"
    member.mkdir(parents=True)
    (member / "predictor.json").write_text("{}")
    (member / "arrays.pt").write_bytes(b"arrays")
    (member.parent / "member0").mkdir()
    (member.parent / "predictor.json").write_text("{}")
    assert run_folders(member) == {member.parent.resolve(), member.resolve(), (member.parent / "member0").resolve()}
    assert run_folders(tmp_path) == set()
    for given, output in ((member, member / "predictor.json"), (member, member / "arrays.pt"),
                          (member, member.parent / "predictor.json"), (member / "arrays.pt", member.parent / "predictor.json")):
        with pytest.raises(CLIError, match=f"--output {output} is a file of the run {member}"):
            _check_output_file(output, checkpoint=str(given))
    _check_output_file(member.parent / "notes.json", checkpoint=str(member))  # a new file beside them: written
    elsewhere = tmp_path / "copied"  # a checkpoint copied beside files of the same names is no run folder
    elsewhere.mkdir()
    (elsewhere / "best.pt").write_bytes((run / "best.pt").read_bytes())
    (elsewhere / "test_predictions.csv").write_text("x\n")
    rc, _, err = run_cli(["predict", "--checkpoint", str(elsewhere / "best.pt"), "CCO", "--output",
                          str(elsewhere / "test_predictions.csv")], capsys)
    assert rc == 0, err


def test_evaluate_output_over_the_runs_training_csv_or_a_loose_checkpoint_is_refused(ckpt, tmp_path, capsys, caplog):
    """``evaluate --output`` naming the run's own training CSV replaced it with the scores (and the
    run could no longer be scored: "changed since training"); naming a --checkpoint .pt outside a
    run folder replaced the model with JSON. Both refused, exit 2, the file left as it was."""
    import shutil

    data = tmp_path / "train.csv"
    data.write_text(_table(30))
    run = tmp_path / "run"
    rc, _, err = run_cli(["train", "--data", str(data), "--target-col", "y", "--split", "column:split", "--members",
                          "svr", "--out", str(run), "--no-progress"], capsys)
    assert rc == 0, err
    kept = data.read_bytes()
    other = tmp_path / "other.csv"
    other.write_text(_table(12).replace(",train\n", ",test\n"))
    for extra in ([], ["--data", str(other)]):  # its own splits scored, or another file: before any scoring
        rc, out, err = run_cli(["evaluate", "--checkpoint", str(run), *extra, "--output", str(data), "--no-progress"],
                               capsys)
        assert rc == 2 and out == "" and f"--output {data}: siggate writes JSON text, not .csv" in \
            _one_error_line(err, "evaluate"), (extra, err)
        assert data.read_bytes() == kept
    # a training file of another name (compressed): the same refusal by what the run trained on, also from a
    # member's folder, which holds no record of its own (its run's is one folder up)
    packed = tmp_path / "train.csv.gz"
    packed.write_bytes(gzip.compress(data.read_bytes()))
    zrun = tmp_path / "zrun"
    rc, _, err = run_cli(["train", "--data", str(packed), "--target-col", "y", "--split", "column:split", "--members",
                          "svr,rf", "--out", str(zrun), "--no-progress"], capsys)
    assert rc == 0, err
    zipped = packed.read_bytes()
    for command, checkpoint in ((["evaluate"], zrun), (["evaluate"], zrun / "member0"), (["predict", "CCO"], zrun),
                                (["predict", "CCO"], zrun / "member1")):
        rc, out, err = run_cli([command[0], "--checkpoint", str(checkpoint), *command[1:], "--output", str(packed)],
                               capsys)
        assert rc == 2 and out == "" and _one_error_line(err, command[0]).startswith(
            f"siggate {command[0]}: error: --output {packed} is the training CSV the run's splits are read from"), err
        assert packed.read_bytes() == zipped
    # predict --output over it wrote the predictions in its place, without a word
    rc, out, err = run_cli(["predict", "--checkpoint", str(run), "CCO", "--output", str(data)], capsys)
    assert rc == 2 and out == "" and _one_error_line(err, "predict") == (
        f"siggate predict: error: --output {data} is the training CSV the run's splits are read from; writing it would replace that file and "
        f"the run could no longer be scored: give another --output, e.g. {tmp_path / 'predictions.csv'}"), err
    assert data.read_bytes() == kept
    # evaluate's JSON over a table of molecules (a copy of the data: its rows were gone), predict's table named .json
    copy = tmp_path / "copy.csv"
    copy.write_bytes(other.read_bytes())
    for command, output, message in (
            (["evaluate", "--data", str(other)], copy, f"--output {copy}: siggate writes JSON text, not .csv "
                                                        f"(gzip-compressed with .gz); give e.g. {tmp_path / 'copy.json'}"),
            (["predict", "CCO"], tmp_path / "p.json", f"--output {tmp_path / 'p.json'}: siggate writes CSV text, not "
                                                      f".json (gzip-compressed with .gz); give e.g. {tmp_path / 'p.csv'}")):
        rc, out, err = run_cli([command[0], "--checkpoint", str(run), *command[1:], "--output", str(output)], capsys)
        assert rc == 2 and out == "" and _one_error_line(err, command[0]).startswith(
            f"siggate {command[0]}: error: {message}"), err
    assert copy.read_bytes() == other.read_bytes() and not (tmp_path / "p.json").exists()
    rc, _, err = run_cli(["evaluate", "--checkpoint", str(run), "--no-progress"], capsys)
    assert rc == 0, err  # the run is still scored
    blank = tmp_path / "blank.csv"  # a bad label on line 6, after blank lines: it was named line 3
    blank.write_text("smiles,y\n\n\nCCO,1.0\n\nCCCO,abc\nCCCCO,0.5\nCCN,0.2\n")
    with caplog.at_level("WARNING", logger="siggate"):
        rc, _, err = run_cli(["evaluate", "--checkpoint", str(run), "--data", str(blank), "--no-progress"], capsys)
    assert rc == 0 and "1 row(s) have a label that cannot be scored (first: line 6, target column 'y'" in caplog.text
    loose = tmp_path / "loose" / "model.pt"
    loose.parent.mkdir()
    shutil.copy(ckpt if ckpt.is_file() else ckpt / "best.pt", loose)
    kept = loose.read_bytes()
    rc, out, err = run_cli(["evaluate", "--checkpoint", str(loose), "--data", str(data), "--output", str(loose)], capsys)
    assert rc == 2 and out == "" and f"--output {loose} is the file that --checkpoint reads" in _one_error_line(
        err, "evaluate")
    assert loose.read_bytes() == kept


def test_evaluate_output_that_cannot_be_written_is_refused_before_scoring(ckpt, tmp_path, capsys, monkeypatch):
    data = tmp_path / "ext.csv"
    data.write_text("smiles,y\nCCO,1.0\nCCN,2.0\nCCC,3.0\n")
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    for output, why in ((blocker / "scores.json", "is a file, so the folder cannot be created"),
                        (tmp_path, "is a folder; give a file name")):
        rc, out, err = run_cli(["evaluate", "--checkpoint", str(ckpt), "--data", str(data), "--output", str(output)],
                               capsys)
        assert rc == 2 and out == "" and why in _one_error_line(err, "evaluate")
    # the folder is writable when checked, and fails when written (full disk, a read-only remount):
    # the scores are on stdout and the failure is one line
    from siggate import files

    def full(path, data, output=False):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files, "atomic_write_bytes", full)
    rc, out, err = run_cli(["evaluate", "--checkpoint", str(ckpt), "--data", str(data), "--output",
                            str(tmp_path / "s.json")], capsys)
    assert rc == 2 and json.loads(out)["n"] == {"data": 3}
    assert ("cannot write it (No space left on device); the scores are printed on standard output"
            in _one_error_line(err, "evaluate"))


def test_unwritable_cache_is_one_line(tmp_path, capsys, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    monkeypatch.setenv("SIGGATE_CACHE", str(blocker / "cache"))
    data = tmp_path / "d.csv"
    data.write_text(_table(30))
    rc, _, err = run_cli(["train", "--data", str(data), "--target-col", "y", "--split", "column:split", "--epochs",
                          "1", "--out", str(tmp_path / "run"), *_TINY], capsys)
    assert rc == 2
    line = _one_error_line(err, "train")
    assert f"cannot write the cache folder {blocker / 'cache'}" in line and "give --cache-dir a folder" in line
    assert not (tmp_path / "run").exists()
    # a ~ the shell left (SIGGATE_CACHE='~/c', --cache-dir=~/c) made a folder named ~ here: it is the home folder
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    for env, flag in (("~/env-cache", []), (str(blocker / "cache"), ["--cache-dir=~/flag-cache"])):
        monkeypatch.setenv("SIGGATE_CACHE", env)
        rc, _, err = run_cli(["train", "--data", str(data), "--target-col", "y", "--split", "column:split", "--members",
                              "rf", *flag, "--out", str(tmp_path / f"run{len(flag)}")], capsys)
        assert rc == 0, err
    assert {"env-cache", "flag-cache"} <= {p.name for p in (tmp_path / "home").iterdir()}
    assert not (tmp_path / "~").exists()


def test_evaluate_predict_explain_read_the_training_runs_smiles_column_by_default(tmp_path, capsys, caplog):
    """The README promised it for evaluate, whose default was 'smiles' whatever the run was
    trained on; predict --input and explain --input defaulted to 'smiles' too, so a file in the
    training CSV's own layout was refused. --smiles-col still names another column."""
    data = tmp_path / "d.csv"
    data.write_text(_table(30).replace("smiles,y,split", "mol,y,split"))
    run = tmp_path / "run"
    rc, _, err = run_cli(["train", "--data", str(data), "--smiles-col", "mol", "--target-col", "y", "--split",
                          "column:split", "--epochs", "1", "--out", str(run), "--cache-dir", str(tmp_path / "c"),
                          *_TINY], capsys)
    assert rc == 0, err
    ext = tmp_path / "ext.csv"
    ext.write_text("mol,y\nCCO,1.0\nCCN,2.0\n")
    rc, out, err = run_cli(["evaluate", "--checkpoint", str(run), "--data", str(ext)], capsys)
    assert rc == 0, err
    assert json.loads(out)["rows"]["scored"] == 2
    rc, _, err = run_cli(["predict", "--checkpoint", str(run), "--input", str(ext), "--output",
                          str(tmp_path / "p.csv")], capsys)
    assert rc == 0, err
    assert [(r["mol"], r["error"]) for r in read_output(tmp_path / "p.csv")] == [("CCO", ""), ("CCN", "")]
    rc, _, err = run_cli(["explain", "--checkpoint", str(run), "--input", str(ext), "--out", str(tmp_path / "x"),
                          "--steps", "2"], capsys)
    assert rc == 0, err
    assert (tmp_path / "x" / "molecules.csv").read_text().count("\n") == 3  # a header and the two molecules
    other = tmp_path / "other.dat"  # not .csv: the header decides that it is a CSV
    other.write_text("id,Smiles,y\na,CCO,1.0\nb,CCN,3.0\n")
    said = "no column 'mol', the one the run was trained on; reading SMILES from column 'Smiles'"

    def told() -> bool:
        found = [r.getMessage() for r in caplog.records if said in r.getMessage()]
        caplog.clear()
        return len(found) == 1

    caplog.clear()
    rc, _, err = run_cli(["predict", "--checkpoint", str(run), "--input", str(other), "--output",
                          str(tmp_path / "q.csv")], capsys)  # a file without the run's column: its "smiles" one
    assert rc == 0 and told(), err
    assert [(r["id"], r["Smiles"], r["error"]) for r in read_output(tmp_path / "q.csv")] == [("a", "CCO", ""),
                                                                                            ("b", "CCN", "")]
    rc, out, err = run_cli(["evaluate", "--checkpoint", str(run), "--data", str(other)], capsys)
    assert rc == 0 and told() and json.loads(out)["rows"]["scored"] == 2, err
    rc, _, err = run_cli(["explain", "--checkpoint", str(run), "--input", str(other), "--out", str(tmp_path / "x2"),
                          "--steps", "2"], capsys)
    assert rc == 0 and told(), err
    named = tmp_path / "other.csv"
    named.write_text(other.read_text())
    rc, _, err = run_cli(["predict", "--checkpoint", str(run), "--input", str(named), "--smiles-col", "smiles"],
                         capsys)  # a column the user names is never swapped for another
    assert rc == 2 and "column 'smiles' not found" in _one_error_line(err, "predict") and not told()
    neither = tmp_path / "neither.csv"
    neither.write_text("structure\nCCO\n")
    rc, _, err = run_cli(["predict", "--checkpoint", str(run), "--input", str(neither)], capsys)
    assert rc == 2 and "column 'mol' not found" in _one_error_line(err, "predict")
    rc, _, err = run_cli(["evaluate", "--checkpoint", str(run), "--data", str(neither)], capsys)
    assert rc == 2 and "no column 'mol'" in _one_error_line(err, "evaluate")


def test_predict_dash_reads_standard_input(ckpt, tmp_path, capsys, monkeypatch):
    """``siggate predict --checkpoint RUN -`` predicted the SMILES '-' (a failed row)."""
    import sys

    class Stdin:
        buffer = io.BytesIO(b"smiles,id\nCCO,a\nc1ccccc1O,b\n")

    monkeypatch.setattr(sys, "stdin", Stdin())
    out = tmp_path / "p.csv"
    rc, _, err = run_cli(["predict", "--checkpoint", str(ckpt), "-", "--output", str(out)], capsys)
    assert rc == 0, err
    rows = read_output(out)
    assert [(r["smiles"], r["id"], r["error"]) for r in rows] == [("CCO", "a", ""), ("c1ccccc1O", "b", "")]
    for argv in (["CCO", "-"], ["-", "--input", str(out)]):
        rc, _, err = run_cli(["predict", "--checkpoint", str(ckpt), *argv], capsys)
        assert rc == 2 and "'-' reads the molecules from standard input; give it alone" in _one_error_line(err,
                                                                                                           "predict")
    rc, _, err = run_cli(["predict", "--checkpoint", str(ckpt), "CCO", "--input", str(out)], capsys)
    assert rc == 2 and "not both" in _one_error_line(err, "predict")  # --input was ignored


def test_evaluate_names_a_renamed_or_implausible_target(ckpt, tmp_path, capsys, caplog):
    """An nci5k model scored with --target-col y on another property gave R2 -33 and no word
    that the names differ; now the renaming and labels far from the training targets' mean and
    spread are named (stderr and the JSON's ``warnings``); the model's own property is not."""
    import torch
    from rdkit import Chem

    smiles = nci_smiles(20)
    atoms = [Chem.MolFromSmiles(s).GetNumAtoms() / 10 for s in smiles]  # what the tiny model learned, as 'y'
    plain, other = tmp_path / "plain.csv", tmp_path / "other.csv"
    plain.write_text("smiles,y\n" + "".join(f"{s},{a}\n" for s, a in zip(smiles, atoms)))
    other.write_text("smiles,logS\n" + "".join(f"{s},{a * 100 + 40}\n" for s, a in zip(smiles, atoms)))
    rc, out, err = run_cli(["evaluate", "--checkpoint", str(ckpt), "--data", str(plain)], capsys)
    assert rc == 0, err
    assert [w for w in json.loads(out).get("warnings", []) if "molecules the run fitted" not in w] == []
    caplog.clear()
    rc, out, err = run_cli(["evaluate", "--checkpoint", str(ckpt), "--data", str(other), "--target-col", "logS"],
                           capsys)
    assert rc == 0, err
    res = json.loads(out)
    from siggate.train.modelprep import load_trained

    ck = load_trained(ckpt)[1]
    mean, std = float(ck["target_mean"][0]), float(ck["target_std"][0])
    labels = torch.tensor([a * 100 + 40 for a in atoms], dtype=torch.float32).double()
    assert res["warnings"] == [
        "scored column 'logS' as the model's target 'y': the names differ, so make sure each is the same property "
        "in the same units",
        f"the labels of 'logS' (mean {float(labels.mean()):.4g}, std {float(labels.std(correction=0)):.4g}) are far "
        f"from the training targets 'y' (mean {mean:.4g}, std {std:.4g}): another property, or other units?",
        "20 of the 20 rows scored are molecules the run fitted (its train or val rows), so their scores are in "
        "sample; score a file of other molecules for an external estimate"]
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
        f"--data {other}: {w}" for w in res["warnings"]]


# --------------------------------------------------------------------------- predict's input file


def test_predict_reads_a_latin1_text_column_as_text(ckpt, tmp_path, capsys, caplog):
    """A name column exported as Latin-1 came out as ``B\\xe9lier``; it is read as Windows-1252
    and the output, UTF-8, says ``Bélier``, with one warning naming the fix."""
    src = tmp_path / "in.csv"
    src.write_bytes("smiles,name\nCCO,B\u00e9lier\nCCN,na\u00efve \u2013 \u20ac\n".encode("cp1252"))
    out = tmp_path / "out.csv"
    rc, _, err = run_cli(["predict", "--checkpoint", str(ckpt), "--input", str(src), "--output", str(out)], capsys)
    assert rc == 0, err
    rows = read_output(out)
    assert [(r["name"], r["error"]) for r in rows] == [("B\u00e9lier", ""), ("na\u00efve \u2013 \u20ac", "")]
    assert all(float(r["y"]) == float(r["y"]) for r in rows)
    assert [r.getMessage() for r in caplog.records if "not UTF-8" in r.getMessage()] == [
        "the input is not UTF-8: 2 text fields (first: row 0, column 'name') were read as Windows-1252 (Latin-1) and "
        "written as UTF-8; save the input as UTF-8 to be sure they read as meant"]
    # a header's name too: it was written as a surrogate escape ('Conc \udcb5M'), in predict's and explain's tables
    src.write_bytes("smiles;name;Conc \u00b5M\nCCO;B\u00e9lier;1\n".encode("cp1252"))
    rc, _, err = run_cli(["predict", "--checkpoint", str(ckpt), "--input", str(src), "--output", str(out)], capsys)
    assert rc == 0 and list(read_output(out)[0])[:3] == ["smiles", "name", "Conc \u00b5M"], err
    rc, _, err = run_cli(["explain", "--checkpoint", str(ckpt), "--input", str(src), "--out", str(tmp_path / "x"),
                          "--steps", "2"], capsys)
    assert rc == 0, err
    assert (tmp_path / "x" / "molecules.csv").read_text(encoding="utf-8").splitlines()[0].split(",")[2:4] == [
        "name", "Conc \u00b5M"]


def test_predict_fails_a_row_with_an_extra_field_and_refuses_a_repeated_smiles_column(ckpt, tmp_path, capsys):
    src = tmp_path / "in.csv"
    src.write_text("id,smiles\na,CCO\nb,CCN,oops\nc,CCC\n")
    out = tmp_path / "out.csv"
    rc, _, err = run_cli(["predict", "--checkpoint", str(ckpt), "--input", str(src), "--output", str(out)], capsys)
    assert rc == 1, err
    rows = read_output(out)
    assert list(rows[0]) == ["id", "smiles", "y", "nearest_train_similarity", "outside_domain", "error"]
    assert [(r["id"], r["error"]) for r in rows] == [
        ("a", ""), ("b", "line 3 has 3 fields but the header has 2: a delimiter inside an unquoted field? quote that "
                         "field or remove the extra one"), ("c", "")]
    assert rows[1]["y"] == "" and rows[0]["y"] and rows[2]["y"]
    src.write_text("smiles,name,smiles\nCCO,x,CCN\n")
    rc, _, err = run_cli(["predict", "--checkpoint", str(ckpt), "--input", str(src), "--output", str(out)], capsys)
    assert rc == 2 and "the header names column 'smiles' 2 times (columns 1, 3)" in _one_error_line(err, "predict")


# --------------------------------------------------------------------------- the run's row tables


def test_run_tables_carry_the_inputs_other_columns_and_name_predictions_as_predict(tmp_path, capsys):
    """test_predictions.csv and splits.csv lacked the input's ID columns; they carry every
    column but the SMILES, the targets and the split column, and test_predictions.csv names its
    predictions by predict's own rule (``y_pred`` beside the labels ``y``)."""
    data = tmp_path / "d.csv"
    lines = _table(30).splitlines()
    data.write_text("\n".join([f"id,{lines[0]},note,row,,"]  # (an Excel export's trailing empty columns: left out,
                              + [f"m{i},{ln},n{i},{i * 10},," for i, ln in enumerate(lines[1:])]) + "\n")  # not '', input_)
    out = tmp_path / "run"
    rc, _, err = run_cli(["train", "--data", str(data), "--target-col", "y", "--split", "column:split", "--epochs", "1",
                          "--out", str(out), "--cache-dir", str(tmp_path / "c"), *_TINY], capsys)
    assert rc == 0, err
    preds = read_output(out / "test_predictions.csv")
    assert list(preds[0]) == ["row", "smiles", "id", "note", "input_row", "y", "y_pred"]
    assert [(r["row"], r["id"], r["note"], r["input_row"]) for r in preds] == [
        (str(i), f"m{i}", f"n{i}", str(i * 10)) for i in range(25, 30)]
    splits = read_output(out / "splits.csv")
    assert list(splits[0]) == ["row", "smiles", "id", "note", "input_row", "split", "reason"]
    assert [(r["id"], r["split"]) for r in splits][19:21] == [("m19", "train"), ("m20", "val")]
    from siggate.train.predict import SmilesPredictor

    header = list(preds[0])[:-1]
    assert SmilesPredictor(out).output_columns(header) == [  # the name predict gives beside the labels
        "y_pred", "nearest_train_similarity", "outside_domain"]


# --------------------------------------------------------------------------- very long SMILES


#: 100,000 characters of linked benzene rings: RDKit took 45 s to read it unsanitized, minutes to sanitize
HUGE = "c1ccccc1" * 12_500


def test_predict_refuses_a_huge_smiles_unread(ckpt, tmp_path, capsys, monkeypatch):
    """Refused before RDKit reads it (RDKit's time grows faster than the length): RDKit is never
    given the string. (The test before timed the command against 20 s.)"""
    from rdkit import Chem

    given = []
    for name in ("MolFromSmiles", "MolFromSmarts"):
        real = getattr(Chem, name)
        def spy(s, *a, _real=real, **k):  # records the length; never hands RDKit the huge string itself
            given.append(len(s))
            return None if len(s) > 10_000 else _real(s, *a, **k)

        monkeypatch.setattr(Chem, name, spy)
    out = tmp_path / "p.csv"
    rc, _, err = run_cli(["predict", "--checkpoint", str(ckpt), "CCO", HUGE, "--output", str(out)], capsys)
    assert given and max(given) < len(HUGE)  # CCO was read; the huge one never
    assert rc == 1
    rows = read_output(out)
    assert rows[0]["error"] == "" and rows[1]["error"] == (
        "SMILES of 100,000 characters, above the limit of 10,000 (10 per atom of a 1,000-atom molecule); not parsed")
    from siggate.train.predict import SmilesPredictor

    with pytest.raises(Exception, match="above the limit of 20,000 .* 2,000-atom"):
        SmilesPredictor(ckpt, max_atoms=2000).featurize("C" * 20_001)  # --max-atoms raises the length limit with it


def test_a_training_row_with_a_huge_smiles_is_dropped_with_its_reason(tmp_path):
    from siggate.data.csvdata import load_csv

    data = tmp_path / "d.csv"
    data.write_text(_table(30) + "c1ccccc1" * 2_000 + ",1.0,train\n")
    ds = load_csv(data, "smiles", ["y"], "regression", split="column:split", cache_dir=tmp_path / "c")
    assert [(r.index, r.reason) for r in ds.invalid] == [
        (30, "SMILES of 16,000 characters, above the limit of 10,000 (10 per atom of a 1,000-atom molecule); "
             "not parsed")]


def test_a_file_of_another_kind_is_named_for_what_it_is(ckpt, tmp_path, capsys):
    """Misleading refusals: a CSV given as a checkpoint was 'truncated or corrupt, or holds pickle
    instructions', a checkpoint given as --data 'a zip archive of 323 files; unzip it', a file
    given to --resume 'holds no run', a folder given to evaluate --data or pretrain --smiles 'no
    such file'. Each is named for what it is."""
    text = tmp_path / "mols.csv"
    text.write_text("smiles,y\nCCO,1\n")
    (tmp_path / "folder").mkdir()
    best = (ckpt / "best.pt") if ckpt.is_dir() else ckpt
    cases = [
        (["predict", "--checkpoint", str(text), "CCO"], f"{text} is a text file (CSV or other text), not a checkpoint"),
        (["train", "--data", str(best), "--target-col", "y", "--out", str(tmp_path / "r")],
         f"{best} is a PyTorch checkpoint (a model, e.g. a run's best.pt), not a CSV file"),
        (["train", "--resume", str(text)], f"--resume {text} is a file; give the run's folder"),
        (["evaluate", "--checkpoint", str(ckpt), "--data", str(tmp_path / "folder")],
         f"--data {tmp_path / 'folder'} is a folder; give the CSV file"),
        (["pretrain", "--smiles", str(tmp_path / "folder"), "--out", str(tmp_path / "pt")],
         f"--smiles {tmp_path / 'folder'} is a folder; give a CSV or .smi file in it"),
    ]
    latin = tmp_path / "latin.csv"  # Excel's cp1252 'µ': still text, not a corrupt checkpoint
    latin.write_bytes(b"smiles,IC50 (\xb5M)\nCCO,1\n")
    lfs = tmp_path / "best.pt"  # a checkpoint whose Git LFS content was never fetched
    lfs.write_bytes(b"version https://git-lfs.github.com/spec/v1\noid sha256:0123\nsize 12\n")
    cases += [(["predict", "--checkpoint", str(latin), "CCO"], f"{latin} is a text file (CSV or other text)"),
              (["predict", "--checkpoint", str(lfs), "CCO"], f"{lfs} is a Git LFS pointer (the file itself was "
                                                             "never fetched: git lfs pull), not a checkpoint")]
    for argv, why in cases:
        rc, out, err = run_cli(argv, capsys)
        assert rc == 2 and why in _one_error_line(err, argv[0]), err


@pytest.mark.parametrize("argv, who", [(["train", "--bogus"], "siggate train"),
                                       (["analyze", "rank", "--checkpoint", "x.pt", "--out", "o", "--nope"],
                                        "siggate analyze rank"),
                                       (["--bogus"], "siggate")])
def test_an_unknown_flag_is_named_by_the_command_it_was_given_to(capsys, argv, who):
    """siggate train --bogus printed the top-level usage ('siggate [-h] ... COMMAND ...'), which says
    nothing of train's flags; the command that was given the flag names it, with its own usage."""
    from siggate.cli import main

    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and f"{who}: error: unrecognized arguments: {argv[-1]}" in err
    assert err.startswith(f"usage: {who} ")
