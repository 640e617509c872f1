"""On-disk cache of processed datasets.

* Keys are content-addressed: :func:`cache_key` hashes the caller's ``parts``
  (source file fingerprint, loader arguments, ...) together with
  :data:`FEATURIZATION_VERSION`, so a changed source, argument or featurizer
  never reuses a stale file.
* Files are written atomically (temp file in the same folder, fsync,
  ``os.replace``, fsync of the folder) so a reader never sees a half-written
  cache and a crash never destroys the previous file.
* :func:`cached` serializes builders across processes with a ``filelock``; a
  corrupt or truncated cache file, or one whose bytes differ from the SHA-256 recorded
  when it was written, is reported, deleted and rebuilt.
* Graph lists are stored as a dict of plain, concatenated tensors that loads
  with ``torch.load(weights_only=True)`` (no pickled Python objects).
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import json
import logging
import os
import time
from pathlib import Path
from typing import Any, Callable

import torch
from filelock import FileLock, Timeout
from torch_geometric.data import Data

from ..files import AtomicFile, atomic_torch_save, atomic_write_bytes, file_digest, safe_torch_load
from .base import DataError, GraphDataset, InvalidRow, RowNote, TaskInfo

__all__ = [
    "FEATURIZATION_VERSION",
    "fingerprint_file",
    "cache_key",
    "atomic_write_bytes",
    "atomic_torch_save",
    "save_graphs",
    "load_graphs",
    "graphs_to_dict",
    "graphs_from_dict",
    "dataset_to_dict",
    "dataset_from_dict",
    "save_dataset",
    "load_dataset",
    "cached",
    "write_invalid_rows",
    "report_invalid",
]

logger = logging.getLogger(__name__)

#: Bump whenever the featurization of molecules/graphs changes (features, targets,
#: splits, storage format): every cache key changes with it.
FEATURIZATION_VERSION = 1

_GRAPHS_FORMAT = "siggate.graphs"
_GRAPHS_FORMAT_VERSION = 1
_DATASET_FORMAT = "siggate.dataset"


# --------------------------------------------------------------------------- keys


def fingerprint_file(path: str | os.PathLike) -> str:
    """SHA-256 hex digest of a file's bytes."""
    return file_digest(path)


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    if isinstance(obj, (set, frozenset)):
        return sorted(obj, key=repr)
    raise TypeError(f"cache_key parts must be JSON-serializable, got {type(obj).__name__}: {obj!r}")


def cache_key(parts: dict) -> str:
    """First 16 hex chars of the SHA-256 of the canonical JSON of ``parts``.

    :data:`FEATURIZATION_VERSION` is always added, as ``featurization_version``.
    """
    full = dict(parts)
    full["featurization_version"] = FEATURIZATION_VERSION
    text = json.dumps(full, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=_jsonable)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


# ------------------------------------------------------------------ atomic writes


# atomic_write_bytes and atomic_torch_save are re-exported from :mod:`siggate.files`, the one implementation.




# ------------------------------------------------------------------ graph storage

_PRIMITIVES = (str, int, float, bool, type(None))


def _pack_tensors(key: str, given: list[torch.Tensor]) -> dict:
    dtypes = {v.dtype for v in given}
    ndims = {v.dim() for v in given}
    if len(dtypes) > 1:
        raise TypeError(f"attribute {key!r} has mixed dtypes across graphs: {sorted(map(str, dtypes))}")
    if len(ndims) > 1:
        raise ValueError(f"attribute {key!r} has mixed numbers of dimensions across graphs: {sorted(ndims)}")
    ndim = given[0].dim() if given else 1
    if not given:
        return {"mode": "cat", "dim": 0, "data": torch.empty(0), "sizes": torch.empty(0, dtype=torch.long)}
    if ndim == 0:
        return {"mode": "scalar", "data": torch.stack(given).cpu()}
    shapes = [tuple(v.shape) for v in given]
    varying = [d for d in range(ndim) if len({sh[d] for sh in shapes}) > 1]
    if len(varying) <= 1:
        dim = varying[0] if varying else 0
        return {
            "mode": "cat",
            "dim": dim,
            "data": torch.cat(given, dim=dim).cpu(),
            "sizes": torch.tensor([sh[dim] for sh in shapes], dtype=torch.long),
        }
    # several dimensions vary: store flattened pieces with their shapes
    return {
        "mode": "flat",
        "data": torch.cat([v.reshape(-1) for v in given]).cpu(),
        "sizes": torch.tensor([v.numel() for v in given], dtype=torch.long),
        "shapes": torch.tensor(shapes, dtype=torch.long),
    }


def _unpack_tensors(key: str, entry: dict) -> list[torch.Tensor]:
    mode, data = entry["mode"], entry["data"]
    if mode == "scalar":
        return list(data.unbind(0))
    sizes = entry["sizes"].tolist()
    if mode == "cat":
        dim = int(entry["dim"])
        if sum(sizes) != (data.shape[dim] if data.dim() > dim else 0):
            raise ValueError(f"inconsistent stored tensor {key!r}")
        pieces = torch.split(data, sizes, dim=dim) if sizes else ()
        if dim != 0:  # slices along a later dimension are strided: give each graph its own memory
            pieces = [p.contiguous() for p in pieces]
        return list(pieces)
    if mode == "flat":
        if sum(sizes) != data.numel():
            raise ValueError(f"inconsistent stored tensor {key!r}")
        shapes = entry["shapes"].tolist()
        return [p.view(sh) for p, sh in zip(torch.split(data, sizes), shapes)]
    raise ValueError(f"unknown storage mode {mode!r} for {key!r}")


def _data_from_mapping(mapping: dict) -> Data:
    data = Data()
    store = getattr(data, "_store", None)
    fast = getattr(store, "_mapping", None)
    if isinstance(fast, dict):  # skip Data.__setattr__'s per-attribute checks (hot path)
        fast.update(mapping)
        return data
    return Data(**mapping)  # pragma: no cover - other PyG layouts


@torch.no_grad()
def graphs_to_dict(graphs: list[Data]) -> dict:
    """Pack graphs into a dict of plain tensors and lists (``weights_only``-loadable).

    Each tensor attribute is concatenated over graphs along the one dimension
    whose size differs between graphs (dim 0 for ``x``/``edge_attr``/``rwse``,
    dim 1 for ``edge_index``, which stays relative to its own graph) together
    with the per-graph sizes (slice offsets).  ``str``/``int``/``float``/``bool``
    attributes become plain lists.  An attribute missing from some graphs is
    recorded in a ``present`` mask and stays missing after loading.
    """
    graphs = list(graphs)
    g = len(graphs)
    mappings = [d.to_dict() for d in graphs]
    keys: dict[str, None] = {}
    for m in mappings:
        for k in m:
            keys.setdefault(k, None)
    tensors: dict[str, dict] = {}
    lists: dict[str, dict] = {}
    for key in keys:
        present = [key in m for m in mappings]
        given = [m[key] for m in mappings if key in m]
        if all(isinstance(v, torch.Tensor) for v in given):
            entry = _pack_tensors(key, given)
            target = tensors
        elif all(isinstance(v, _PRIMITIVES) for v in given):
            entry = {"values": [m.get(key) for m in mappings]}
            target = lists
        else:
            types = sorted({type(v).__name__ for v in given})
            raise TypeError(
                f"cannot store attribute {key!r} (types {types}): each attribute must be a tensor "
                "in every graph, or str/int/float/bool/None in every graph"
            )
        if not all(present):
            entry["present"] = present
        target[key] = entry
    return {
        "format": _GRAPHS_FORMAT,
        "version": _GRAPHS_FORMAT_VERSION,
        "num_graphs": g,
        "tensors": tensors,
        "lists": lists,
    }


def graphs_from_dict(blob: dict) -> list[Data]:
    """Inverse of :func:`graphs_to_dict`."""
    if not isinstance(blob, dict) or blob.get("format") != _GRAPHS_FORMAT:
        raise ValueError("not a siggate graph file")
    if blob.get("version") != _GRAPHS_FORMAT_VERSION:
        raise ValueError(f"unsupported siggate graph file version {blob.get('version')!r}")
    g = int(blob["num_graphs"])
    mappings: list[dict] = [{} for _ in range(g)]
    for key, entry in blob["tensors"].items():
        present = entry.get("present")
        rows = [i for i in range(g) if present[i]] if present is not None else range(g)
        values = _unpack_tensors(key, entry)
        if len(values) != len(rows):
            raise ValueError(f"inconsistent stored tensor {key!r}: {len(values)} pieces for {len(rows)} graphs")
        for i, v in zip(rows, values):
            mappings[i][key] = v
    for key, entry in blob["lists"].items():
        values = entry["values"]
        if len(values) != g:
            raise ValueError(f"inconsistent stored list {key!r}")
        present = entry.get("present")
        for i in range(g):
            if present is None or present[i]:
                mappings[i][key] = values[i]
    return [_data_from_mapping(m) for m in mappings]


def save_graphs(graphs: list[Data], path: str | os.PathLike) -> None:
    """Atomically store a list of graphs (see :func:`graphs_to_dict`)."""
    atomic_torch_save(graphs_to_dict(graphs), path)


def load_graphs(path: str | os.PathLike) -> list[Data]:
    """Load graphs stored by :func:`save_graphs` (``weights_only=True``)."""
    return graphs_from_dict(safe_torch_load(path))


# ---------------------------------------------------------------- dataset storage


def dataset_to_dict(ds: GraphDataset) -> dict:
    """Pack a :class:`GraphDataset` into plain tensors/lists/dicts."""
    return {
        "format": _DATASET_FORMAT,
        "info": ds.info.to_dict(),
        "splits": {name: graphs_to_dict(graphs) for name, graphs in ds.splits.items()},
        "invalid": [[r.index, r.smiles, r.reason, r.line, r.read_as] for r in ds.invalid],
        "source": ds.source,
        "notes": [[r.index, r.smiles, r.issue, r.detail] for r in ds.notes],
        "rows": int(ds.rows),
    }


def dataset_from_dict(blob: dict) -> GraphDataset:
    """Inverse of :func:`dataset_to_dict`."""
    if not isinstance(blob, dict) or blob.get("format") != _DATASET_FORMAT:
        raise ValueError("not a siggate dataset file")
    return GraphDataset(
        info=TaskInfo(**blob["info"]),
        splits={name: graphs_from_dict(b) for name, b in blob["splits"].items()},
        invalid=[InvalidRow(int(row[0]), row[1], row[2], None if len(row) < 4 or row[3] is None else int(row[3]),
                            str(row[4]) if len(row) > 4 else "")
                 for row in blob["invalid"]],  # (a cache written before the line was kept has three fields)
        source=blob.get("source", ""),
        notes=[RowNote(int(i), s, issue, detail) for i, s, issue, detail in blob.get("notes", [])],
        rows=int(blob.get("rows", 0)),
    )


def save_dataset(ds: GraphDataset, path: str | os.PathLike) -> None:
    """Atomically store a :class:`GraphDataset` (loads with ``weights_only=True``)."""
    atomic_torch_save(dataset_to_dict(ds), path)


def load_dataset(path: str | os.PathLike) -> GraphDataset:
    """Load a dataset stored by :func:`save_dataset`."""
    return dataset_from_dict(safe_torch_load(path))


# ------------------------------------------------------------------------ caching


# ------------------------------------------------------------- invalid-row report


def write_invalid_rows(path: str | os.PathLike, rows: list[InvalidRow]) -> Path:
    """Write ``index,smiles,reason`` rows (with a header) to ``path`` atomically."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["index", "smiles", "reason"])
    for r in rows:
        writer.writerow([r.index, r.smiles, r.reason])
    data = buf.getvalue().encode("utf-8")
    path = Path(path)
    try:
        if path.read_bytes() == data:
            return path
    except OSError:
        pass
    atomic_write_bytes(path, data)
    return path


def report_invalid(
    name: str, rows: list[InvalidRow], total: int, log_path: Path | None, fresh: bool, log: logging.Logger = logger
) -> None:
    """Log a one-line summary of skipped rows (a warning when freshly built)."""
    if not rows:
        return
    level = logging.WARNING if fresh else logging.INFO
    examples = "; ".join(f"row {r.index} {r.smiles!r}: {r.reason}" for r in rows[:3])
    more = f" (+{len(rows) - 3} more)" if len(rows) > 3 else ""
    where = f"; full list in {log_path}" if log_path else ""
    log.log(level, "%s: skipped %d of %d rows that are not valid molecules: %s%s%s",
            name, len(rows), total, examples, more, where)
    for r in rows:
        log.debug("%s: invalid row %d %r: %s", name, r.index, r.smiles, r.reason)


def _default_load(path: Path) -> Any:
    return safe_torch_load(path)


def _default_save(obj: Any, path: Path) -> None:
    torch.save(obj, path)


def _try_load(path: Path, load: Callable[[Path], Any]) -> tuple[bool, Any, str]:
    """``(loaded, object, why not)`` of the cache file ``path``; a file whose bytes differ from the
    SHA-256 its sidecar recorded when it was written is not loaded (:func:`_changed_since_written`)."""
    try:
        changed = _changed_since_written(path)
        if changed:
            return False, None, changed
        return True, load(path), ""
    except FileNotFoundError:
        return False, None, "missing"
    except Exception as exc:  # corrupt, truncated, wrong format, ...
        return False, None, f"{type(exc).__name__}: {exc}"


def _changed_since_written(path: Path) -> str:
    """Why the cache file ``path`` is not the file that was written, or ``""``: its SHA-256 against
    the one its sidecar (``<key>.json``) recorded. torch reads a zip without checking its CRCs, so a
    flipped byte in a tensor loaded as data (a label of -3.4e35, an edge to a node that does not
    exist). A sidecar without a digest (written before it was recorded) or unreadable checks nothing."""
    try:
        recorded = json.loads(path.with_suffix(".json").read_text(encoding="utf-8")).get("sha256")
    except (OSError, ValueError, AttributeError):
        return ""
    if not isinstance(recorded, str):
        return ""
    actual = file_digest(path)
    return "" if actual == recorded else f"its bytes changed since it was written (SHA-256 {actual[:12]}, recorded {recorded[:12]})"


def cached(
    cache_dir: str | os.PathLike,
    name: str,
    parts: dict,
    build: Callable[[], Any],
    save: Callable[[Any, Path], None] = _default_save,
    load: Callable[[Path], Any] = _default_load,
    rebuild: bool = False,
) -> Any:
    """Return the cached result of ``build()``, building and storing it if needed.

    The file is ``cache_dir/name/<cache_key(parts)>.pt``; a ``.json`` next to it
    records ``parts`` for humans and the file's SHA-256, which every load checks first (a file
    changed since, a flipped byte on disk, is rebuilt like a corrupt one).  ``save(obj, path)`` may write non-atomically:
    it is always pointed at a temp file that is then moved in place atomically.
    A file that fails to ``load`` is reported with a warning (a log record), deleted and rebuilt.
    Builders in different processes are serialized by a ``FileLock`` on
    ``<file>.lock``; a process that waited re-checks the cache before building.

    After each call ``cached.last_hit`` is ``True`` when the result came from
    disk and ``False`` when ``build()`` ran; ``cached.last_path`` is the file.
    ``rebuild=True`` ignores (and replaces) an existing file.
    """
    key = cache_key(parts)
    folder = Path(cache_dir) / name
    path = folder / f"{key}.pt"
    cached.last_path = path

    if path.exists() and not rebuild:
        t0 = time.perf_counter()
        ok, obj, _ = _try_load(path, load)
        if ok:
            cached.last_hit = True
            logger.info("cache hit %s (%.2fs)", path, time.perf_counter() - t0)
            return obj

    lock = FileLock(str(path) + ".lock")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        try:
            lock.acquire(timeout=0)
        except Timeout:
            logger.info("waiting for another process building %s", path)
            lock.acquire()
    except OSError as exc:  # a read-only or misplaced cache (SIGGATE_CACHE, --cache-dir)
        raise DataError(f"cannot write the cache folder {folder} ({exc.strerror or exc}); give --cache-dir a folder "
                        "you can write to (a run reads the cache folder it was trained with; without one named, "
                        "SIGGATE_CACHE sets it)") from None
    try:
        if path.exists() and not rebuild:
            ok, obj, why = _try_load(path, load)
            if ok:  # built by another process while we waited
                cached.last_hit = True
                logger.info("cache hit %s (built concurrently)", path)
                return obj
            if why != "missing":
                # one message: a log record (the CLI's format; Python's last-resort handler prints it
                # where logging is not set up), not also a Python warning, which printed it twice
                logger.warning("corrupt cache file %s (%s); deleting and rebuilding", path, why)
                try:
                    path.unlink()
                except FileNotFoundError:
                    pass
        t0 = time.perf_counter()
        obj = build()
        built_s = time.perf_counter() - t0

        side = folder / f"{key}.json"
        with AtomicFile(path) as out:
            save(obj, Path(out.tmp))
            # the new file's digest, which every load checks (_changed_since_written), in place before the file
            # is: a kill between the two leaves the old file beside the new digest (rebuilt), never the reverse
            try:
                meta = {"parts": parts, "featurization_version": FEATURIZATION_VERSION, "key": key,
                        "sha256": file_digest(out.tmp)}
                atomic_write_bytes(side, json.dumps(meta, sort_keys=True, indent=1, default=_jsonable).encode("utf-8"))
            except Exception:  # without a sidecar the file loads unchecked, as one written before digests;
                with contextlib.suppress(OSError):  # an old sidecar's digest would fail the new file at every load
                    side.unlink(missing_ok=True)
        cached.last_hit = False
        logger.info("cache miss %s: built in %.2fs", path, built_s)
        return obj
    finally:
        lock.release()


cached.last_hit = None  # type: ignore[attr-defined]
cached.last_path = None  # type: ignore[attr-defined]
