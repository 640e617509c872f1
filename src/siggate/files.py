"""Atomic file writes: the one implementation used by the data cache, checkpoints,
prediction CSVs and analysis results.

A file is written to a temporary name in the same folder (``.<name>.<random>.tmp``), given
the permissions ``open()`` would give it (``0666`` less the umask, not ``mkstemp``'s
private ``0600``), fsynced, moved over the target with ``os.replace`` and the folder
fsynced; on any failure the temporary file is removed and the previous file is left
untouched.  A leaf module: it imports nothing from ``siggate``.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import BinaryIO, Callable

__all__ = ["umask", "file_mode", "fsync_dir", "AtomicFile", "atomic_write", "atomic_write_bytes"]


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

    def __init__(self, path: str | os.PathLike, make_parents: bool = True) -> None:
        self.path = Path(path)
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
        try:
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


def atomic_write(path: str | os.PathLike, write: Callable[[BinaryIO], object]) -> None:
    """Call ``write(binary file)`` on a temporary file next to ``path`` and move it in place
    atomically (see the module docstring); on failure the old file is untouched."""
    with AtomicFile(path) as f:
        with open(f.tmp, "wb") as fh:
            write(fh)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically; on failure the old file is untouched."""
    atomic_write(path, lambda fh: fh.write(data))


def out_dir_problem(out: str | os.PathLike) -> str | None:
    """Why ``out`` cannot be an output folder (an existing file, a file on its path, or an
    ancestor that cannot be written), or ``None`` when it can be one."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        return f"{out}: this is an existing file, not a folder; choose a folder path"
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
