"""Atomic file writes: the one implementation used by the data cache, checkpoints,
prediction CSVs and analysis results.

A file is written to a temporary name in the same folder (``.<name>.<random>.tmp``), given
the permissions ``open()`` would give it (``0666`` less the umask, not ``mkstemp``'s
private ``0600``), fsynced, moved over the target with ``os.replace`` and the folder
fsynced; on any failure the temporary file is removed and the previous file is left
untouched.  A leaf module: it imports nothing from ``siggate``.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import re
import shutil
import socket
import stat
import tempfile
from pathlib import Path
from typing import BinaryIO, Callable

__all__ = ["NUMBER_DIGITS", "number_text", "finite_or_none", "read_json", "safe_torch_load", "UnsafeFile", "umask", "file_mode", "fsync_dir", "AtomicFile", "atomic_write", "atomic_write_bytes", "FolderBusy",
           "FolderLock", "folder_busy"]


#: the fewest significant digits of the labels and predictions siggate writes into CSV files
NUMBER_DIGITS = 7


def number_text(value: float) -> str:
    """A label or prediction as siggate writes it into a CSV: the shortest text of at least
    :data:`NUMBER_DIGITS` significant digits that reads back as the same number: as the same
    32-bit float for a value that is one (labels, a regression network's outputs, a fingerprint
    member's predictions; at most 9 digits), else as the same 64-bit float (a classifier's
    probabilities, taken in float64, a combination's weighted mean; at most 17). Seven digits alone lost
    what set a label or prediction apart beside a large offset (12000.13586 written as
    12000.14), and metrics recomputed from the file then differed from the run's."""
    import struct

    v = float(value)
    if v != v or v in (float("inf"), float("-inf")):
        return f"{v:g}"
    try:
        as32 = struct.unpack("f", struct.pack("f", v))[0]
    except OverflowError:  # beyond float32's range: a 64-bit value
        as32 = None
    same = ((lambda s: struct.unpack("f", struct.pack("f", float(s)))[0] == v) if as32 == v
            else (lambda s: float(s) == v))
    for digits in range(NUMBER_DIGITS, 18):
        text = f"{v:.{digits}g}"
        if same(text):
            return text
    return repr(v)


def finite_or_none(doc):
    """``doc`` (dicts and lists, nested) with every non-finite float replaced by ``None``: JSON has
    no infinity, and ``json.dumps`` writes ``Infinity``, which strict parsers refuse."""
    if isinstance(doc, dict):
        return {k: finite_or_none(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [finite_or_none(v) for v in doc]
    return None if isinstance(doc, float) and not math.isfinite(doc) else doc


def read_json(path: str | os.PathLike):
    """The JSON document in ``path``, the one way siggate reads a run's or a result's JSON file.

    Raises:
        ValueError: not JSON, or nested past the parser's depth (Python's ``RecursionError``, which
            no caller's ``except ValueError`` would catch: a crafted file's traceback).
        OSError: the file cannot be read, or is no regular file (a link to ``/dev/zero``, a pipe:
            read until memory ran out, or forever).
    """
    import json

    if not stat.S_ISREG(os.stat(path).st_mode):
        raise OSError(errno.EINVAL, "not a regular file (a device, a pipe, or a link to one)", str(path))
    text = Path(path).read_text(encoding="utf-8")
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deep to read") from None


class UnsafeFile(ValueError):
    """A file that ``torch.load(weights_only=True)`` refused: it holds pickled Python objects
    (``global_``: the one it names, when it names one) or pickle instructions safe loading does not run.
    Nothing in it was run."""

    def __init__(self, detail: str, global_: str | None) -> None:
        super().__init__(detail)
        self.detail, self.global_ = detail, global_


def safe_torch_load(path: str | os.PathLike, map_location="cpu"):
    """``torch.load(path, weights_only=True)``, the one way siggate reads a ``.pt`` file: torch's
    refusal becomes :class:`UnsafeFile` with its one informative line (torch's message also
    advises loading the file unsafely, which is never the fix for a file someone crafted), and
    torch's warning about a pickle protocol is not printed. Other errors (a truncated file) pass."""
    import pickle
    import re
    import warnings

    import torch

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        glob = next((m.group(1) for ln in lines
                     for m in [re.search(r"(?:Unsupported global: GLOBAL|unsupported GLOBAL) ([\w.]+)", ln)] if m), None)
        informative = [ln for ln in lines if "GLOBAL" in ln or "Unsupported" in ln or "WeightsUnpickler error:" in ln]
        detail = next((ln.split("WeightsUnpickler error:", 1)[-1].strip() for ln in informative
                       if ln.split("WeightsUnpickler error:", 1)[-1].strip()), None)
        if detail is None:  # the error line may follow the bare "WeightsUnpickler error:" line
            i = next((k for k, ln in enumerate(lines) if ln.endswith("WeightsUnpickler error:")), None)
            detail = lines[i + 1] if i is not None and i + 1 < len(lines) else "unreadable pickle"
        raise UnsafeFile(detail.split(" was not an allowed global")[0], glob) from None


def umask() -> int:
    """The process's current umask (read without changing it for longer than a call)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def file_mode() -> int:
    """The permissions ``open()`` gives a new file: ``0o666`` less the umask."""
    return 0o666 & ~umask()


def fsync_dir(folder: str | os.PathLike) -> None:
    """fsync a folder so a rename inside it is durable (best effort; a no-op on Windows)."""
    if os.name == "nt":  # directories cannot be opened for fsync on Windows
        return
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class AtomicFile:
    """A temporary file :attr:`tmp` next to ``path`` that becomes ``path`` on :meth:`commit`.

    Write to ``tmp`` (by name or by handle), then :meth:`commit`; or :meth:`discard`.
    As a context manager it commits on a normal exit and discards on an exception.

    Args:
        path: the file to (re)place.
        make_parents: create the missing folders above ``path`` (else an ``OSError``).
    """

    def __init__(self, path: str | os.PathLike, make_parents: bool = True, output: bool = False) -> None:
        self.path = Path(path)
        self.direct = output and direct_target(self.path)
        self.mode = None
        if self.direct:  # a pipe or a device (/dev/null, /dev/stdout) is written into, never replaced
            self.tmp = str(self.path)
            return
        if output and self.path.is_symlink() and self.path.exists():  # the file it names is replaced, the link kept
            self.path = Path(os.path.realpath(self.path))
        if output and self.path.is_file():  # a user's file replaced keeps its mode (set once it is written)
            self.mode = os.stat(self.path).st_mode & 0o7777
        folder = self.path.parent if str(self.path.parent) else Path(".")
        if make_parents:
            folder.mkdir(parents=True, exist_ok=True)
        fd, self.tmp = tempfile.mkstemp(dir=folder, prefix=f".{self.path.name}.", suffix=".tmp")
        os.close(fd)
        try:
            os.chmod(self.tmp, file_mode())
        except OSError:
            pass

    def commit(self) -> None:
        """fsync the temporary file, move it over ``path`` and fsync the folder."""
        if self.direct:
            return
        try:
            if self.mode is not None:
                os.chmod(self.tmp, self.mode)
            fd = os.open(self.tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(self.tmp, self.path)
        except BaseException:
            self.discard()
            raise
        fsync_dir(self.path.parent if str(self.path.parent) else ".")

    def discard(self) -> None:
        """Remove the temporary file (if it is still there)."""
        if self.direct:
            return
        try:
            os.unlink(self.tmp)
        except OSError:
            pass

    def __enter__(self) -> "AtomicFile":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.discard()


def stale_temporaries(folder: str | os.PathLike, names) -> list[Path]:
    """The temporary files :class:`AtomicFile` left in ``folder`` for a file of ``names`` (or a
    ``.pt``) when its process was killed (``kill -9``) between writing and moving them in:
    ``.<name>.<8 characters>.tmp``. Only the process that holds the folder's lock may remove them."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    found = []
    for p in folder.iterdir():
        m = _TEMPORARY.fullmatch(p.name)
        if m and p.is_file() and (m.group(1) in names or m.group(1).endswith(".pt")):
            found.append(p)
    return sorted(found)


#: the name of :class:`AtomicFile`'s temporary file of ``<name>`` (``tempfile.mkstemp``'s 8 characters)
_TEMPORARY = re.compile(r"\.(.+)\.[a-z0-9_]{8}\.tmp")


def direct_target(path: str | os.PathLike) -> bool:
    """Whether an output written to ``path`` goes into it rather than replacing it: a pipe or a
    device (:func:`special_file`), or a name under ``/dev`` or ``/proc`` (``/dev/stdout`` redirected
    to a file names that file: replaced, the earlier lines of ``>> log`` were lost)."""
    text = os.path.abspath(path)
    return special_file(path) or text.startswith(("/dev/", "/proc/"))


def special_file(path: str | os.PathLike) -> bool:
    """Whether ``path`` (its links followed) is there and neither a regular file nor a folder: a
    named pipe, a device (``/dev/null``), a socket, which a writer writes into instead of replacing."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def write_protected(path: str | os.PathLike) -> bool:
    """Whether the regular file ``path`` may not be written: no write permission for this user,
    or none for anyone (``chmod a-w``, which root's ``os.access`` does not see)."""
    path = Path(path)
    return path.is_file() and (not os.access(path, os.W_OK) or not path.stat().st_mode & 0o222)


def atomic_write(path: str | os.PathLike, write: Callable[[BinaryIO], object], output: bool = False) -> None:
    """Call ``write(binary file)`` on a temporary file next to ``path`` and move it in place
    atomically (see the module docstring); on failure the old file is untouched. ``output``: a
    user's ``--output`` (:class:`AtomicFile`: a pipe, a device, a link followed, its mode kept). A
    writer's ``RuntimeError`` of a failed write (``torch.save`` on a full disk) is an ``OSError``
    naming ``path``, as is an ``OSError`` that names no file."""
    with AtomicFile(path, output=output) as f:
        try:
            with open(f.tmp, "ab" if f.direct else "wb") as fh:
                try:
                    write(fh)
                except RuntimeError as exc:
                    if "write" not in str(exc) and "unexpected pos" not in str(exc):
                        raise
                    raise OSError(errno.EIO, f"writing it failed ({exc}): a full disk or a file size limit?",
                                  str(path)) from None
        except OSError as exc:  # a full disk, a size limit: the write's error names no file
            name_os_error(exc, str(path))
            raise


def stop_signals() -> list:
    """The signals that stop a command while it runs: Ctrl-C (SIGINT), SIGTERM and, where the
    platform has it, SIGHUP (the CLI's handlers, :func:`signals_held`, the Ray driver's)."""
    import signal

    return [signal.SIGINT, signal.SIGTERM] + ([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])


@contextlib.contextmanager
def signals_held():
    """Hold Ctrl-C, SIGTERM and SIGHUP while the block runs and act on the first that came after
    it: the block (a checkpoint's ``torch.save``) is finished, then the command stops as the
    signal's handler says. ``torch.save`` writes from C++, which took the handler's exception
    inside a write for a failed write ("unexpected pos"): a run stopped then read "could not
    write checkpoint ...: a full disk or a file size limit?", exit status 2, instead of stopping
    with the resume command. Only Python handlers are held (a default action stays), and only in
    the main thread, where Python runs them."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    kinds = stop_signals()
    came: list[tuple] = []
    before = {}
    for kind in kinds:
        handler = signal.getsignal(kind)
        if callable(handler):
            before[kind] = handler
            signal.signal(kind, lambda signum, frame: came.append((signum, frame)))
    try:
        yield
    finally:
        for kind, handler in before.items():
            signal.signal(kind, handler)
        if came:
            signum, frame = came[0]
            before[signum](signum, frame)


def atomic_torch_save(obj, path: str | os.PathLike) -> None:
    """``torch.save(obj)`` to ``path`` atomically (:func:`atomic_write`), the stop signals held
    until it is written (:func:`signals_held`): the one way siggate writes a torch file (the data
    cache, checkpoints, the fingerprint members' arrays). On failure the old file is untouched."""
    import torch

    with signals_held():
        atomic_write(path, lambda fh: torch.save(obj, fh))


def name_os_error(exc: OSError, name: str) -> None:
    """Give a failed write's ``OSError`` that names no file (a full disk, a file size limit) the
    name ``name`` (a path, or ``"standard output"``), so that its message says where; one that
    carries a message alone (no errno) and a broken pipe, which is no file's fault, are left as
    they are. The one rule of every write's error message (:func:`atomic_write`, ``siggate predict``'s
    output)."""
    if exc.filename is None and exc.errno not in (None, errno.EPIPE):
        exc.filename = name


def atomic_write_bytes(path: str | os.PathLike, data: bytes, output: bool = False) -> None:
    """Write ``data`` to ``path`` atomically; on failure the old file is untouched (``output``: :func:`atomic_write`)."""
    atomic_write(path, lambda fh: fh.write(data), output)


def tilde_problem(path: str | os.PathLike) -> str | None:
    """Why ``path`` is not written as given: it begins with a ``~`` that the shell did not expand
    (a quoted ``"~/runs"``), so a folder named ``~`` would be made here; None otherwise (or where
    a ``~`` folder is there)."""
    path = Path(path)
    first = path.parts[0] if path.parts else ""
    if not first.startswith("~") or Path(first).exists() or os.path.expanduser(first) == first:
        return None  # (~run1, no user of that name: a name like any)
    return f"{path}: {first!r} is not expanded to a home folder here (a quoted path?); give {os.path.expanduser(path)} instead"


def out_dir_problem(out: str | os.PathLike) -> str | None:
    """Why ``out`` cannot be an output folder (an existing file, a file on its path, or an
    ancestor that cannot be written), or ``None`` when it can be one."""
    out = Path(out)
    tilde = tilde_problem(out)
    if tilde:
        return tilde
    if out.exists() and not out.is_dir():
        return f"{out}: this is an existing file, not a folder; choose a folder path"
    if out.is_symlink() and not out.exists():  # (mkdir said "File exists")
        return f"{out}: a symbolic link to {os.readlink(out)}, which is not there; create that folder, or choose another path"
    probe = out
    while not probe.exists():  # the deepest existing ancestor decides whether we may create it
        probe = probe.parent
    if not probe.is_dir():
        return f"{out}: {probe} is a file, so the folder cannot be created; choose another path"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{out}: {probe} is not writable; choose a folder you can write to"
    try:  # os.access says yes to root everywhere, also on read-only and pseudo filesystems (/sys)
        os.rmdir(tempfile.mkdtemp(prefix=".siggate-probe-", dir=probe))
    except OSError as exc:
        return f"{out}: {probe} is not writable ({exc.strerror or exc}); choose a folder you can write to"
    return None


def file_digest(path: str | os.PathLike, algorithm: str = "sha256") -> str:
    """Hex digest of a file's bytes (read in 1 MiB blocks); ``algorithm`` as :func:`hashlib.new` names it."""
    import hashlib

    h = hashlib.new(algorithm)
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def same_file(a, b) -> bool:
    """Whether the paths ``a`` and ``b`` (``-``: standard input, no file) are one existing file."""
    return bool(a and b) and "-" not in (str(a), str(b)) and Path(a).is_file() and Path(b).is_file() \
        and Path(a).samefile(b)


def source_changed(path: str | os.PathLike, recorded: str | None, when: str) -> str | None:
    """Why the CSV at ``path`` is not the file a run recorded (``recorded``, its SHA-256 in
    :func:`siggate.train.record.data_source`): ``"PATH changed since WHEN (sha256 A... then, B... now)"``; None when
    it is the same, or nothing was recorded. The one check of ``--resume`` and ``siggate evaluate``."""
    if not recorded:
        return None
    now = file_digest(path)
    return None if now == recorded else f"{path} changed since {when} (sha256 {recorded[:16]}... then, {now[:16]}... now)"


try:  # POSIX; elsewhere folders are not locked
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None


class FolderBusy(RuntimeError):
    """Another live process holds the :class:`FolderLock` of a folder; the message names it."""


class FolderLock:
    """This process's claim on an output folder, so that two runs never write into one.

    :meth:`acquire` creates the folder (and missing parents) and takes an exclusive
    ``flock`` on ``<folder>/.siggate.lock``, non-blocking: while another process holds it,
    :class:`FolderBusy` names that process (the pid and host written in the file). The kernel
    drops the lock when its process ends, however it ends, so a crashed or killed run never
    leaves a stale lock. :meth:`release` removes the lock file and, when this process created
    the folder and wrote no file into it (a run refused at its data stage), the folders it
    created, so a refusal leaves nothing behind. Usable as a context manager.

    Args:
        folder: the output folder.
    """

    NAME = ".siggate.lock"

    def __init__(self, folder: str | os.PathLike) -> None:
        self.folder = Path(folder)
        self.path = self.folder / self.NAME
        self._fd: int | None = None
        self._created: list[Path] = []
        self._also: list[FolderLock] = []

    def acquire(self) -> "FolderLock":
        """Create the folder and take the lock (see the class docstring).

        Raises:
            FolderBusy: another process holds it.
            OSError: the folder or lock file cannot be created.
        """
        missing, probe = [], self.folder
        while not probe.exists():
            missing.append(probe)
            probe = probe.parent
        self.folder.mkdir(parents=True, exist_ok=True)
        self._created = [p for p in missing if p.is_dir()]  # deepest first
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, file_mode())
            if fcntl is None:
                break
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                self._remove_created()
                raise FolderBusy(f"another siggate process ({_holder(self.path)}) is writing into "
                                 f"{self.folder}") from None
            try:  # the holder before us may have removed the file we locked: lock the one in place
                same = os.path.samestat(os.fstat(fd), os.stat(self.path))
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(fd, f"{_this_process()}\n".encode())
        self._fd = fd
        return self

    def also(self, other: "FolderLock") -> None:
        """Hold the acquired lock ``other`` with this one: :meth:`release` releases it too."""
        self._also.append(other)

    def release(self) -> None:
        """Remove the lock file and drop the lock (and those held :meth:`also`); remove the
        folders :meth:`acquire` created when no file was written into them."""
        while self._also:
            self._also.pop().release()
        if self._fd is None:
            return
        try:
            os.unlink(self.path)  # while still locked: a process that opened it re-checks the inode
        except OSError:
            pass
        os.close(self._fd)
        self._fd = None
        self._remove_created()

    def _remove_created(self) -> None:
        if not self._created or any(p.is_file() for p in self.folder.rglob("*")):
            return
        shutil.rmtree(self.folder, ignore_errors=True)
        for p in self._created[1:]:  # the parents it made, deepest first, while empty
            try:
                p.rmdir()
            except OSError:
                break
        self._created = []

    def __enter__(self) -> "FolderLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def claim_folder(folder: str | os.PathLike, error: type[Exception], label: str, busy: str, purpose: str,
                 busy_ok: bool = False) -> FolderLock | None:
    """``folder``'s :class:`FolderLock`, acquired: the one way siggate's writers (``siggate train``,
    ``pretrain``, ``explain``, ``compare``, ``analyze mad``, an analysis's runs, the estimator's ``fit``) claim an output folder. A folder another live
    process holds raises ``error("LABEL FOLDER: <who holds it>; BUSY")`` (``busy``: what to do),
    or returns None with ``busy_ok`` (the caller takes another folder); one that cannot be created
    raises ``error`` naming why and ``purpose`` (what the folder is for)."""
    lock = FolderLock(folder)
    try:
        return lock.acquire()
    except FolderBusy as exc:
        if busy_ok:
            return None
        raise error(f"{label} {folder}: {exc}; {busy}") from None
    except OSError as exc:
        raise error(f"{label} {folder}: cannot create the folder ({exc.strerror or exc}); choose a folder you can "
                    f"write to for {purpose}") from None


def _holder(path: Path) -> str:
    """Who holds the lock file ``path``, as written there (``pid 123 on host``)."""
    try:
        text = path.read_text().strip()
    except OSError:
        text = ""
    return text or "pid unknown"


def _this_process() -> str:
    """How a :class:`FolderLock` names its holder: ``pid 123 on host``."""
    return f"pid {os.getpid()} on {socket.gethostname()}"


def folder_busy(folder: str | os.PathLike, others: bool = False) -> str | None:
    """Who holds ``folder``'s :class:`FolderLock` (``"pid 123 on host"``), or None when no live
    process does; with ``others``, None also when this process holds it (a run reading its own
    folder). Creates nothing."""
    busy = _folder_holder(folder)
    return None if others and busy == _this_process() else busy


def _folder_holder(folder: str | os.PathLike) -> str | None:
    path = Path(folder) / FolderLock.NAME
    if fcntl is None or not path.is_file():
        return None
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _holder(path)
    except OSError:  # a file system without flock (some NFS, CIFS, FUSE mounts): no live holder to name
        return None
    finally:
        os.close(fd)
    return None
