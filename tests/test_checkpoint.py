"""Checkpoints are data: safe loading, clear refusals, atomic writes that survive a full disk."""

from __future__ import annotations

import errno
import io
import os
import pickle

import pytest
import torch

import siggate
from siggate.train.checkpoint import (
    FORMAT_VERSION,
    CheckpointError,
    CheckpointWriteError,
    atomic_save,
    describe_weight_mismatch,
    load_checkpoint,
)
from test_predict import one_thread, shared_checkpoint, tiny_config, tiny_dataset, train_tiny


class CreatesFile:
    """A pickle payload: unpickling it calls ``open(path, "w")``, which creates ``path``."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return shared_checkpoint(tmp_path_factory)


@pytest.fixture
def good(ckpt):
    """A fresh, mutable copy of the tiny checkpoint's contents."""
    return torch.load(ckpt, weights_only=True)


@pytest.fixture(autouse=True)
def _single_thread():
    with one_thread():
        yield


def test_trained_checkpoint_is_plain_data_with_normal_permissions(ckpt):
    c = load_checkpoint(ckpt)
    assert c["format"] == FORMAT_VERSION and c["siggate_version"] == siggate.__version__
    mask = os.umask(0)
    os.umask(mask)
    assert ckpt.stat().st_mode & 0o777 == 0o666 & ~mask  # not the 0600 of a temp file


@pytest.mark.parametrize("container", ["torch-zip", "torch-legacy", "raw-pickle"])
def test_malicious_payload_is_refused_and_never_runs(tmp_path, container):
    marker = tmp_path / "pwned"
    obj = {"format": 1, "model": {}, "payload": CreatesFile(marker)}
    path = tmp_path / "evil.pt"
    if container == "torch-zip":
        torch.save(obj, path)
    elif container == "torch-legacy":
        torch.save(obj, path, _use_new_zipfile_serialization=False)
    else:
        path.write_bytes(pickle.dumps(obj, protocol=2))
    assert not marker.exists()
    with pytest.raises(CheckpointError, match="refused to load") as exc:
        load_checkpoint(path)
    msg = str(exc.value)
    assert "could run code" in msg and "io.open" in msg and "Nothing in it was run" in msg
    assert not marker.exists()


def test_the_payload_is_live(tmp_path):
    """Proof that the payload above is real: an unsafe load does create the file."""
    marker = tmp_path / "pwned"
    buf = io.BytesIO()
    torch.save({"payload": CreatesFile(marker)}, buf)
    buf.seek(0)
    torch.load(buf, weights_only=False)
    assert marker.exists()


@pytest.mark.parametrize(
    "make, expected",
    [
        (lambda raw: raw[: len(raw) // 2], "truncated or corrupt"),
        (lambda raw: b"", "truncated or corrupt"),
        (lambda raw: os.urandom(4096), "truncated or corrupt"),
        (lambda raw: b"PK\x03\x04" + raw[4:100], "truncated or corrupt"),
    ],
    ids=["half", "empty", "random-bytes", "zip-header-only"],
)
def test_damaged_files(ckpt, tmp_path, make, expected):
    p = tmp_path / "bad.pt"
    p.write_bytes(make(ckpt.read_bytes()))
    with pytest.raises(CheckpointError, match=expected):
        load_checkpoint(p)


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(CheckpointError, match="checkpoint not found"):
        load_checkpoint(tmp_path / "nope.pt")
    (tmp_path / "predictor.json").write_text("{}")  # a run folder that lost its checkpoint: not "pass the best.pt"
    with pytest.raises(CheckpointError, match=r"^checkpoint not found: .*best\.pt: the finished run there lacks its "
                                              r"best\.pt; copy the whole run folder, or retrain it$"):
        load_checkpoint(tmp_path / "best.pt")
    with pytest.raises(CheckpointError, match=r"bset\.pt\. Pass the best\.pt or last\.pt"):  # (a typo: no such file of a run)
        load_checkpoint(tmp_path / "bset.pt")
    with pytest.raises(CheckpointError, match="is a directory"):
        load_checkpoint(tmp_path)


def _save(tmp_path, obj):
    p = tmp_path / "c.pt"
    torch.save(obj, p)
    return p


def test_not_a_siggate_checkpoint(tmp_path):
    with pytest.raises(CheckpointError, match="not a siggate checkpoint"):
        load_checkpoint(_save(tmp_path, [1, 2, 3]))
    with pytest.raises(CheckpointError, match="not a siggate checkpoint"):
        load_checkpoint(_save(tmp_path, {"weights": torch.zeros(2)}))


def test_future_format_says_what_differs(tmp_path, good):
    good["format"] = FORMAT_VERSION + 98
    good["siggate_version"] = "9.0.0"
    with pytest.raises(CheckpointError) as exc:
        load_checkpoint(_save(tmp_path, good))
    msg = str(exc.value)
    assert f"checkpoint format {FORMAT_VERSION + 98}" in msg and "siggate 9.0.0" in msg
    assert f"format {FORMAT_VERSION}" in msg and "Upgrade siggate" in msg


@pytest.mark.parametrize("fmt", ["1", 0, -3, 1.5, True])
def test_odd_format_values(tmp_path, good, fmt):
    good["format"] = fmt
    with pytest.raises(CheckpointError) as exc:
        load_checkpoint(_save(tmp_path, good))
    assert "format" in str(exc.value).replace(str(tmp_path), "")  # (the folder's name holds "format" too)


def test_missing_entries_are_named(tmp_path, good):
    del good["target_std"], good["info"]
    with pytest.raises(CheckpointError, match=r"lacks the entries \['info', 'target_std'\]"):
        load_checkpoint(_save(tmp_path, good))


def test_config_with_unknown_key_names_it_and_the_versions(tmp_path, good):
    good["config"]["model"]["rotary"] = True
    good["siggate_version"] = "0.9.0"
    with pytest.raises(CheckpointError) as exc:
        load_checkpoint(_save(tmp_path, good))
    msg = str(exc.value)
    assert "model.rotary" in msg and "siggate 0.9.0" in msg and siggate.__version__ in msg


def test_config_with_bad_value(tmp_path, good):
    good["config"]["model"]["gate"] = "softmax"
    with pytest.raises(CheckpointError, match="model.gate: 'softmax' is not allowed"):
        load_checkpoint(_save(tmp_path, good))


def test_config_written_before_the_split_change_still_loads(tmp_path, good):
    """Older checkpoints store data.split='scaffold' for every dataset (the old default,
    ignored by datasets with an official split): they must still load, with that meaning."""
    from siggate.config import from_dict, upgrade_config_dict

    for name, expect in (("zinc", None), ("molhiv", None), ("nci5k", "scaffold")):
        raw = {"data": {"name": name, "split": "scaffold"}}
        assert from_dict(upgrade_config_dict(raw)).data.split == expect
        assert raw["data"]["split"] == "scaffold"  # the given dict is not modified
    good["config"]["data"]["name"] = "zinc"
    good["config"]["data"]["split"] = "scaffold"
    assert load_checkpoint(_save(tmp_path, good))["config"]["data"]["split"] is None
    good["config"]["data"]["split"] = "random"  # never a valid value for zinc
    with pytest.raises(CheckpointError, match="zinc comes with its official split"):
        load_checkpoint(_save(tmp_path, good))


def test_task_info_with_unknown_field(tmp_path, good):
    good["info"]["units"] = "kcal/mol"
    with pytest.raises(CheckpointError, match=r"task description has fields \['units'\]"):
        load_checkpoint(_save(tmp_path, good))


def test_model_entry_must_be_tensors(tmp_path, good):
    good["model"]["extra"] = "not a tensor"
    with pytest.raises(CheckpointError, match="state dict of named tensors"):
        load_checkpoint(_save(tmp_path, good))


def test_non_finite_weights_or_target_scale_are_refused_at_load(tmp_path, good):
    """NaN weights or target_std loaded and every row then failed "model produced a non-finite
    prediction" with the file never named; a zero std scaled every prediction to the mean."""
    name = next(k for k, v in good["model"].items() if v.is_floating_point())
    for edit, message in ((lambda c: c["model"][name].view(-1).__setitem__(0, float("nan")), f"its {name} holds NaN"),
                          (lambda c: c["target_std"].fill_(float("inf")), "its target_std holds NaN or inf"),
                          (lambda c: c["target_std"].fill_(0.0), "its target_std is not positive")):
        damaged = {**good, "model": {k: v.clone() for k, v in good["model"].items()},
                   "target_std": good["target_std"].clone()}
        edit(damaged)
        with pytest.raises(CheckpointError, match=f"{message}.*use another checkpoint of the run, or train again"):
            load_checkpoint(_save(tmp_path, damaged))


def test_weights_missing_a_parameter(tmp_path, good):
    from siggate.train.modelprep import load_trained

    name = next(k for k in good["model"] if k.startswith("head."))
    del good["model"][name]
    with pytest.raises(CheckpointError, match="do not fit") as exc:
        load_trained(_save(tmp_path, good))
    assert name in str(exc.value)


def test_describe_weight_mismatch():
    a = {"w": torch.zeros(2, 3), "b": torch.zeros(3), "gone": torch.zeros(1)}
    b = {"w": torch.zeros(3, 3), "b": torch.zeros(3), "new": torch.zeros(1)}
    assert describe_weight_mismatch(a, b) == [
        "w: checkpoint has shape (3, 3), the model expects (2, 3)",
        "gone: missing from the checkpoint",
        "new: in the checkpoint but not in the model",
    ]
    assert describe_weight_mismatch(a, a) == []


# --------------------------------------------------------------------------- writing


def _full_disk_after(monkeypatch, nbytes: int):
    """Make ``torch.save`` write ``nbytes`` of real data, then fail with ENOSPC."""
    real = torch.save

    def save(obj, f, *a, **k):
        buf = io.BytesIO()
        real(obj, buf, *a, **k)
        f.write(buf.getvalue()[:nbytes])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(torch, "save", save)


def test_full_disk_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "last.pt"
    atomic_save({"format": 1, "v": torch.arange(10)}, path)
    before = path.read_bytes()
    _full_disk_after(monkeypatch, 300)
    with pytest.raises(CheckpointWriteError) as exc:
        atomic_save({"format": 1, "v": torch.arange(10_000)}, path)
    assert exc.value.errno == errno.ENOSPC and isinstance(exc.value, OSError)
    assert str(path) in str(exc.value) and "previous checkpoint there is intact" in str(exc.value)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.pt"]  # no temp file left


def test_full_disk_during_training_keeps_last_good_checkpoint(tmp_path, monkeypatch):
    """Epoch 1 writes last.pt; the disk fills while epoch 2 writes: the run stops with a
    clear error and last.pt is still epoch 1's, loadable, with no temp files around."""
    ds = tiny_dataset(64)
    train_tiny(tmp_path, tiny_config(train={"epochs": 1}), ds)
    before = (tmp_path / "last.pt").read_bytes()
    _full_disk_after(monkeypatch, 1000)
    with pytest.raises(CheckpointWriteError, match="No space left on device"):
        train_tiny(tmp_path, tiny_config(train={"epochs": 2}), ds, resume=True)
    monkeypatch.undo()
    assert (tmp_path / "last.pt").read_bytes() == before
    assert load_checkpoint(tmp_path / "last.pt")["state"]["epoch"] == 1
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_write_error_is_a_cli_error(tmp_path):
    """CheckpointWriteError is a CheckpointError (the CLI prints it, exit 2) and an OSError."""
    assert issubclass(CheckpointWriteError, CheckpointError) and issubclass(CheckpointWriteError, OSError)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(CheckpointWriteError, match="could not write checkpoint"):
        atomic_save({"format": 1}, blocker / "sub" / "last.pt")  # parent is a file


class CallsSystem:
    """A payload in a module torch blocks outright (``posix.system``); never unpickled here."""

    def __reduce__(self):
        return os.system, ("true",)


@pytest.mark.parametrize("protocol", [2, 4])
def test_a_blocked_module_is_named_and_torchs_unsafe_advice_is_not_passed_on(tmp_path, capsys, protocol):
    """torch 2.13 words the refusal of a blocked module as "Trying to load unsupported GLOBAL
    posix.system ...", which the old pattern missed: the payload was called a corrupt file, with
    torch's advice to re-run torch.load with weights_only=False attached; a protocol-4 pickle also
    printed torch's UserWarning. The refusal names the object, and advises nothing unsafe."""
    path = tmp_path / "evil.pt"
    if protocol == 2:
        torch.save({"format": 1, "model": {}, "x": CallsSystem()}, path)
    else:
        path.write_bytes(pickle.dumps({"format": 1, "model": {}, "x": CallsSystem()}, protocol=4))
    with pytest.raises(CheckpointError) as exc:
        load_checkpoint(path)
    msg = str(exc.value)
    assert ("refused to load" in msg if protocol == 2 else "holds pickle instructions" in msg)
    assert "Nothing in it was run" in msg and "\n" not in msg and "weights_only" not in msg and "Re-running" not in msg
    if protocol == 2:
        assert f"({os.system.__module__}.system)" in msg
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("key, value, why", [
    ("dim", 8192, "the model expects"),            # built for real: a width the weights do not hold
    ("layers", 1000, "model.layers 1000, the weights hold"),  # built for real: memory until it ran out
    ("head_layers", 50, "model.head_layers: 50 is too many for model.dim"),  # the config's own bound
    # past the config's maxima: refused by the range, before the weights are looked at (a 2**20 width asked 4 TB)
    ("dim", 2 ** 20, r"model\.dim: 1048576 is out of range; allowed values: >= 1 and <= 16384"),
    ("layers", 10 ** 6, r"model\.layers: 1000000 is out of range; allowed values: >= 1 and <= 1024"),
])
def test_a_crafted_model_config_is_refused_before_the_model_is_built(good, tmp_path, key, value, why):
    """A checkpoint's config is checked against its weights before the model is built (building
    it first asked for terabytes, or ran out of memory)."""
    from siggate.train.modelprep import load_trained

    good["config"]["model"][key] = value
    path = tmp_path / "crafted.pt"
    torch.save(good, path)
    with pytest.raises(CheckpointError, match=why):
        load_trained(path)


def test_a_sigterm_while_a_checkpoint_is_written_stops_the_command_once_it_is_written(tmp_path, monkeypatch):
    """SIGTERM (or Ctrl-C) while ``torch.save`` writes a checkpoint broke the write off: on a real
    file the handler's exception came inside the file's C write that torch's C++ writer called,
    which reported a failed write ("unexpected pos"), and ``siggate train`` stopped with "could not
    write checkpoint ...: a full disk or a file size limit?", exit status 2 (here, from a Python
    write, it escapes with the checkpoint unwritten). The signal now waits for the checkpoint to
    be written, then stops the command as siggate's handler does (Terminated: exit status 143,
    the resume line)."""
    import os
    import signal

    from siggate.cli import Terminated, _terminated_as_interrupt
    from siggate.train.checkpoint import atomic_save

    real = torch.save
    writes = []

    class SignalledFile:  # the file torch writes into: SIGTERM comes during its first write
        def __init__(self, fh):
            self.fh = fh

        def write(self, data):
            if not writes:
                os.kill(os.getpid(), signal.SIGTERM)
            writes.append(len(data))
            return self.fh.write(data)

        def __getattr__(self, name):
            return getattr(self.fh, name)

    monkeypatch.setattr(torch, "save", lambda obj, fh: real(obj, SignalledFile(fh)))
    path = tmp_path / "last.pt"
    with _terminated_as_interrupt():
        with pytest.raises(Terminated):
            atomic_save({"w": torch.arange(5000.0)}, path)
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL  # siggate's handler is back
    assert torch.equal(torch.load(path, weights_only=True)["w"], torch.arange(5000.0))  # written whole
    assert len(writes) > 1 and sorted(p.name for p in tmp_path.iterdir()) == ["last.pt"]  # no temporary file left
