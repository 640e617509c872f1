"""``siggate pretrain``: learn a backbone from unlabelled molecules by regressing their RDKit
descriptors, as CheMeleon pretrains chemprop on Mordred descriptors.

Steps, each resumable (``OUT`` is the pretraining folder):

1. **Corpus** (``OUT/corpus/``). The SMILES are shuffled with the seed and read in that order;
   a molecule is kept when RDKit parses it, its InChIKey is new, and the InChIKey is not in a
   benchmark's test set (:func:`siggate.data.corpus.benchmark_test_smiles`, plus ``--exclude``
   files), until ``molecules`` are kept. The counts of each reason are in ``corpus/meta.json``.
2. **Targets.** The 217 ``rdkit2d`` descriptors of :mod:`siggate.data.molfeatures`, standardized
   with the corpus's training rows and clipped to +-:data:`CLIP_Z`; constant columns are dropped.
   ``corpus.csv`` holds ``smiles``, ``split`` (98/1/1, seeded) and one column per descriptor.
   Until the corpus is written, ``corpus/partial/`` keeps the selection of step 1 and the raw
   descriptors in chunks of :data:`CHUNK` molecules, each saved when done (hours for a million
   molecules on one core; ``workers`` processes share the chunks), so an interrupted build resumes
   at the first chunk missing; a partial build of other arguments is removed, not mixed in.
3. **Training** (``OUT/model/``): an ordinary ``siggate train`` run of the chosen config on that
   CSV (multi-target regression), so progress, checkpoints and exact resume are the loop's.
4. **Export** (``OUT/pretrained.pt``): the best epoch's weights, config, task and the corpus
   record, loadable with ``torch.load(weights_only=True)``; ``siggate train --init OUT`` (or the
   file) fine-tunes from it.
"""

from __future__ import annotations

import csv
import json
import logging
import time
from pathlib import Path

import numpy as np

from ..config import Config, ConfigError, DataConfig, load_config
from ..files import atomic_write_bytes, file_digest, safe_torch_load
from ..options import Z_CLIP, parse_mol_features
from .rundir import PRETRAIN_CORPUS_RECORD, PRETRAIN_PARTIAL, pretraining_files
from .runfiles import BEST, LAST, METRICS

log = logging.getLogger(__name__)

__all__ = ["build_corpus", "pretrain_config", "pretrain", "export_pretrained", "CLIP_Z", "FORMAT"]

#: standardized descriptor targets are clipped to this many standard deviations
CLIP_Z = Z_CLIP
SPLIT_FRAC = (0.98, 0.01, 0.01)  # train / val / test; val and test get at least one molecule each
MIN_MOLECULES = 10
FORMAT = "siggate-pretrained-1"
CORPUS_VERSION = 2  # 2: val and test are fixed counts of a seeded permutation (1: a seeded draw per row)
#: molecules per saved chunk of descriptors while a corpus is built (``corpus/partial/``)
CHUNK = 10_000



def _test_set_root(data_root, test_sets):
    """The data root the benchmarks' test sets are read from; one given (or ``$SIGGATE_DATA``) that
    does not exist is refused when a test set lives there, since the corpus would keep its molecules."""
    from ..data.base import checked_data_root, default_data_root
    from ..data.corpus import FROM_DATA_ROOT

    return checked_data_root(data_root) if set(test_sets) & set(FROM_DATA_ROOT) else data_root or default_data_root()


def keys_digest(keys) -> str:
    """sha256 of the sorted InChIKeys ``keys``, one per line: a test set's contents in the corpus record."""
    import hashlib

    return hashlib.sha256("\n".join(sorted(keys)).encode()).hexdigest()


def _same_test_set(then: dict, now: dict) -> bool:
    """A test set's record when a corpus was built against the same set read now: the digest of
    its InChIKeys, or its counts for a corpus recorded before the digest."""
    if "sha256" in then:
        return then["sha256"] == now.get("sha256")
    return (then.get("molecules"), then.get("inchikeys")) == (now.get("molecules"), now.get("inchikeys"))


def _excluded_keys(data_root, exclude_files: list[str], test_sets, warn: bool = True) -> tuple[set, dict]:
    """``(the InChIKeys a corpus leaves out, their record)``: each benchmark test set's and each
    ``--exclude`` file's, or ``{"skipped": why}`` for a benchmark not read (warned about with
    ``warn``, :func:`_warn_skipped`)."""
    from ..data.corpus import benchmark_test_smiles, inchikey, read_smiles

    files, keys = {}, {}  # the user's files first: a refusal of one comes before the benchmarks' test sets are read
    for f in exclude_files:
        try:
            files[f"file:{f}"] = smiles = read_smiles(f, fix="name that column smiles (--smiles-col names the corpus's "
                                                               "column)")
        except (OSError, ValueError) as exc:
            raise ConfigError(f"--exclude: {exc}") from None
        keys[f"file:{f}"] = {k for k in map(inchikey, smiles) if k}
        if not keys[f"file:{f}"]:  # (a CSV named .txt reads as lines that parse as nothing)
            raise ConfigError(f"--exclude {f}: none of its {len(smiles)} lines is a molecule RDKit reads, so "
                              "nothing would be excluded; give a .smi/.txt file of one SMILES per line, or a .csv "
                              "with a smiles column")
    sets, missing = benchmark_test_smiles(_test_set_root(data_root, test_sets), test_sets)
    for name, smiles in sets.items():
        keys[name] = {k for k in map(inchikey, smiles) if k}
    sets.update(files)
    keys = {name: keys[name] for name in sets}  # the record's order: the benchmarks, then the files
    # sha256: of the sorted InChIKeys, so that a reused corpus is checked against the test sets' contents
    record = {name: {"molecules": len(sets[name]), "inchikeys": len(k), "sha256": keys_digest(k)}
              for name, k in keys.items()}
    for name, why in missing.items():
        record[name] = {"skipped": why}
    if warn:
        _warn_skipped(record)
    return set().union(*keys.values()) if keys else set(), record


def _warn_skipped(record: dict) -> None:
    """The warning of each benchmark test set a corpus build could not read (its record's ``skipped``)."""
    for name, entry in record.items():
        if isinstance(entry, dict) and "skipped" in entry:
            log.warning("pretrain: test set of %s not read (%s); its molecules are not excluded", name, entry["skipped"])


def _select(smiles: list[str], molecules: int, seed: int, excluded: set, progress: bool) -> tuple[list[str], dict]:
    """Shuffled, parsed, de-duplicated and test-set-free SMILES (canonical), until ``molecules``."""
    from rdkit import Chem, rdBase
    from tqdm.auto import tqdm

    order = np.random.default_rng(seed).permutation(len(smiles))
    kept, seen = [], set()
    counts = {"read": 0, "invalid": 0, "duplicate": 0, "in_test_set": 0}
    bar = tqdm(total=molecules, desc="corpus", unit="mol", disable=not progress)
    with rdBase.BlockLogs():
        for i in order:
            if len(kept) >= molecules:
                break
            counts["read"] += 1
            mol = Chem.MolFromSmiles(smiles[i])
            key = Chem.MolToInchiKey(mol) if mol is not None and mol.GetNumHeavyAtoms() else ""
            if not key:
                counts["invalid"] += 1
            elif key in seen:
                counts["duplicate"] += 1
            elif key in excluded:
                counts["in_test_set"] += 1
                seen.add(key)
            else:
                seen.add(key)
                kept.append(Chem.MolToSmiles(mol))
                bar.update(1)
    bar.close()
    return kept, counts


def _comparable(key: dict) -> dict:
    """A corpus build's key as two are compared: an exclusion by its file's SHA-256, not by the
    path as spelled (``ex.smi``, ``./ex.smi``, another working folder); a benchmark test set not
    read by that fact, not by its reason (which names the data root's path). The files' own
    entries among the test sets are their SHA-256s' (``exclude_files``)."""
    out = dict(key)
    if isinstance(out.get("exclude_files"), list):
        out["exclude_files"] = sorted(str(e).rsplit(":", 1)[-1] for e in out["exclude_files"])
    if isinstance(out.get("test_sets"), dict):
        out["test_sets"] = {k: "skipped" if isinstance(v, dict) and "skipped" in v else v
                            for k, v in out["test_sets"].items() if not str(k).startswith("file:")}
    return out


def _same_build(saved: dict, key: dict) -> bool:
    """Whether a partial build's ``saved`` key is of the build ``key``: :func:`_comparable`, its test
    sets compared by :func:`_same_test_set` (counts, for a key written before their digest)."""
    a, b = _comparable(saved), _comparable(key)
    then, now = a.pop("test_sets", None), b.pop("test_sets", None)
    if a != b:
        return False
    if not (isinstance(then, dict) and isinstance(now, dict)):
        return then == now
    return set(then) == set(now) and all(
        then[k] == now[k] if "skipped" in (then[k], now[k]) or not isinstance(then[k], dict)
        else _same_test_set(then[k], now[k]) for k in then)


def _partial_dir(out: Path, key: dict) -> Path:
    """``out/partial`` for a corpus build of ``key`` (its arguments and the test sets read), created;
    a partial build of another key (or an unreadable one) is removed first."""
    import shutil

    part = out / PRETRAIN_PARTIAL
    if part.exists():
        try:
            saved = json.loads((part / "key.json").read_text())
            same = isinstance(saved, dict) and _same_build(saved, key)
        except (OSError, ValueError):
            same = False
        if not same:
            log.info("pretrain: removing the partial corpus in %s, built with other arguments", part)
            shutil.rmtree(part)
    if not part.exists():
        part.mkdir(parents=True)
        atomic_write_bytes(part / "key.json", json.dumps(key).encode())
    return part


def _selection_saved(out: Path, want: dict) -> bool:
    """Whether ``out``'s partial corpus holds a saved selection of a build of the arguments ``want``
    (:func:`_saved_selection` reads it, unless the test sets read now differ from its key's)."""
    part = out / PRETRAIN_PARTIAL
    try:
        key = json.loads((part / "key.json").read_text())
    except (OSError, ValueError):
        return False
    return (isinstance(key, dict) and _comparable({k: key.get(k) for k in want}) == _comparable(want)
            and (part / "selection.json.gz").is_file())


def _saved_selection(part: Path, select) -> tuple[list[str], dict, int]:
    """``(kept SMILES, counts, SMILES in the source)``: from ``part/selection.json.gz``, else
    ``select()``'s, saved there."""
    import gzip

    path = part / "selection.json.gz"
    try:
        doc = json.loads(gzip.decompress(path.read_bytes()))
        return doc["kept"], doc["counts"], doc["source_smiles"]
    except (OSError, ValueError, KeyError, TypeError, EOFError):
        kept, counts, n = select()
        atomic_write_bytes(path, gzip.compress(json.dumps({"kept": kept, "counts": counts, "source_smiles": n}).encode(),
                                               compresslevel=3))
        return kept, counts, n


def _chunk_descriptors(smiles: list[str]) -> np.ndarray:
    """The raw ``rdkit2d`` descriptors of one chunk."""
    from ..data.molfeatures import compute

    return compute(smiles, "rdkit2d")


def _pool_task(task: tuple[int, list[str]]) -> tuple[int, np.ndarray]:
    """A worker's task: ``(chunk index, its SMILES)`` -> ``(chunk index, its descriptors)``."""
    return task[0], _chunk_descriptors(task[1])


def _ignore_interrupt() -> None:
    """A worker leaves Ctrl-C to the parent, which saves what is done and ends the pool."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _raw_descriptors(smiles: list[str], part: Path, workers: int, progress: bool) -> np.ndarray:
    """The raw ``rdkit2d`` descriptors of ``smiles`` ``[n, 217]``: the chunks already saved in
    ``part`` are read, the others computed (by ``workers`` processes) and saved as each is done."""
    import io

    from tqdm.auto import tqdm

    from ..data.molfeatures import RDKIT2D_NAMES

    width = len(RDKIT2D_NAMES)
    starts = range(0, len(smiles), CHUNK)
    blocks: dict[int, np.ndarray] = {}
    for i, start in enumerate(starts):
        try:
            block = np.load(part / f"descriptors-{i:05d}.npy", allow_pickle=False)
        except (OSError, ValueError, EOFError):
            continue
        if block.shape == (len(smiles[start:start + CHUNK]), width) and block.dtype == np.float32:
            blocks[i] = block
    todo = [i for i in range(len(starts)) if i not in blocks]
    if blocks and todo:
        log.info("pretrain: resuming the corpus's descriptors at %d of %d molecules", len(blocks) * CHUNK, len(smiles))

    def keep(i: int, block: np.ndarray) -> None:
        buf = io.BytesIO()
        np.save(buf, block, allow_pickle=False)
        atomic_write_bytes(part / f"descriptors-{i:05d}.npy", buf.getvalue())
        blocks[i] = block
        bar.update(len(block))

    bar = tqdm(total=len(smiles), initial=sum(len(b) for b in blocks.values()), desc="descriptors", unit="mol",
               disable=not progress)
    try:
        if workers > 1 and len(todo) > 1:
            import multiprocessing

            pool = multiprocessing.get_context("spawn").Pool(min(workers, len(todo)), initializer=_ignore_interrupt)
            try:  # each chunk saved as it comes; an interrupt ends the workers at once (their chunks are lost)
                for i, block in pool.imap_unordered(_pool_task, [(i, smiles[starts[i]:starts[i] + CHUNK]) for i in todo]):
                    keep(i, block)
                pool.close()
            except BaseException:
                pool.terminate()
                raise
            finally:
                pool.join()
        else:
            for i in todo:
                keep(i, _chunk_descriptors(smiles[starts[i]:starts[i] + CHUNK]))
    finally:
        bar.close()
    return np.concatenate([blocks[i] for i in range(len(starts))]) if blocks else np.zeros((0, width), np.float32)


def _descriptor_targets(raw: np.ndarray, train_rows: np.ndarray) -> tuple[np.ndarray, list[str], dict]:
    from ..data.molfeatures import RDKIT2D_NAMES, FeatureScaler

    # in float64, as the scaler: a constant non-integer column has a float32 std of ~1e-6 (kept, then
    # scaled by 1 and refused as a constant target)
    keep = np.nonzero(raw[train_rows].astype(np.float64).std(axis=0) > 0)[0]
    scaler = FeatureScaler.fit(raw[train_rows][:, keep])
    z = np.clip(scaler.transform(raw[:, keep]), -CLIP_Z, CLIP_Z)
    names = [RDKIT2D_NAMES[j] for j in keep]
    return z, names, {"mean": scaler.mean.tolist(), "std": scaler.std.tolist()}


def build_corpus(source: str | Path, out: Path, molecules: int, seed: int = 0, data_root=None,
                 exclude_files: list[str] = (), smiles_col: str | None = None, progress: bool = True,
                 test_sets=None, keep: bool = False, workers: int = 1) -> dict:
    """Write ``out/corpus.csv`` and ``out/meta.json`` (see the module docstring); the meta dict.

    ``test_sets`` names the benchmarks whose test molecules are dropped (default: all of
    :data:`siggate.data.corpus.TEST_SETS`). A corpus already in ``out`` with the same source file
    (sha256), size, seed, SMILES column and exclusions is reused as it is; ``keep`` (a run resuming on it)
    refuses to replace one built otherwise. A build interrupted before the corpus was written
    resumes from ``out/partial`` (the module docstring); ``workers`` processes compute the
    descriptors, with the same result as one.

    Raises:
        ConfigError: too few usable molecules; with ``keep``, a corpus in ``out`` built from
            other arguments (named), which a model was trained on.
    """
    from ..data.corpus import TEST_SETS, read_smiles

    test_sets = tuple(TEST_SETS) if test_sets is None else tuple(test_sets)
    if molecules < MIN_MOLECULES:  # before any file is read
        raise ConfigError(f"pretrain --molecules {molecules}: a corpus needs at least {MIN_MOLECULES} molecules")
    for f in exclude_files:
        if not Path(f).is_file():
            raise ConfigError(f"--exclude {f}: " + ("a folder; give a SMILES file or CSV in it" if Path(f).is_dir()
                                                    else "no such file"))

    source = Path(source)
    src_sha = file_digest(source)
    want = {"version": CORPUS_VERSION, "source_sha256": src_sha, "molecules": molecules, "seed": seed,
            "exclude_files": sorted(f"{f}:{file_digest(f)}" for f in exclude_files),
            "smiles_col": smiles_col}  # (None, the default, as a corpus recorded before the key has it)
    meta_path, csv_path = out / PRETRAIN_CORPUS_RECORD, out / "corpus.csv"
    meta, expect = None, None  # expect: the digest a corpus built again for a resume must have
    if meta_path.is_file() and (csv_path.is_file() or keep):  # (a run's corpus.csv removed: its record still holds)
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            meta = None
        if not isinstance(meta, dict):  # damaged: no corpus to reuse; one a model was trained on is not rebuilt
            if keep:
                raise ConfigError(f"pretrain --resume: {meta_path}, the record of the corpus the run was trained on, "
                                  "cannot be read; restore it, or pretrain into a new --out")
            log.warning("pretrain: %s cannot be read; building the corpus again", meta_path)
            meta = None
    if meta is not None:
        # the same test sets must be readable now as when the corpus was built: of those it considered
        # (a benchmark siggate came to know later, such as molpcba, is no difference for an older corpus),
        # holding the same molecules (a corpus built against an older test set keeps molecules now in it)
        considered = [n for n in test_sets if n in meta.get("test_sets", {})]
        # (only those: a reuse reads no other set, and no --exclude file, whose digests the key compares)
        sets_now = {k: v for k, v in _excluded_keys(data_root, [], considered, warn=False)[1].items()
                    if "skipped" not in v}
        sets_then = {k: v for k, v in meta.get("test_sets", {}).items() if "skipped" not in v and not k.startswith("file:")}
        now, built = sorted(sets_now), sorted(sets_then)
        moved = [k for k in built if k in sets_now and not _same_test_set(sets_then[k], sets_now[k])]
        same_csv = csv_path.is_file() and meta.get("csv_sha256") == file_digest(csv_path)
        then, asked = _comparable({k: meta.get(k) for k in want}), _comparable(want)
        if then == asked and same_csv and now == built and not moved:
            log.info("pretrain: reusing the corpus in %s (%d molecules)", out, meta["kept"])
            return meta
        if keep and then == asked and now == built and not moved and not csv_path.is_file():
            expect = meta.get("csv_sha256")  # built again from the run's own arguments, and checked against it
            log.warning("pretrain: %s, the corpus the run was trained on, is gone; building it again from the run's "
                        "arguments", csv_path)
        elif keep:
            changed = [k for k in want if then[k] != asked[k]]
            differ = [f"{k} {meta.get(k)!r} then, {want[k]!r} now" for k in changed]
            fixes = ["resume with the run's own --smiles, --smiles-col, --molecules, --seed and --exclude (and their files as "
                     "they were)"] if changed else []
            if not same_csv:
                differ.append(f"corpus.csv {'edited' if csv_path.is_file() else 'removed'} since")
                fixes.append("put back the corpus.csv the run was trained on (meta.json's csv_sha256)")
            if now != built:
                differ.append(f"benchmark test sets {built} then, {now} now")
                fixes.append("make the same benchmarks readable as then (--data-root)")
            if moved:  # the corpus may hold molecules that are test molecules now: no remedy but a new corpus
                differ.append(f"the test set(s) of {', '.join(moved)} hold other molecules now, which the corpus was "
                              "not checked against")
                fixes.append("put the data root of then back (--data-root)")
            raise ConfigError(f"pretrain --resume: the run's corpus in {out} was built otherwise ({'; '.join(differ)}); "
                              f"{', and '.join(fixes)}, or pretrain into a new --out")
        if moved:
            log.warning("pretrain: the test set(s) of %s hold other molecules than when the corpus in %s was built; "
                        "building it again", ", ".join(moved), out)
    t0 = time.time()
    smiles = None
    if not _selection_saved(out, want):  # (a resumed build has its selection: the source is not read again)
        smiles = read_smiles(source, smiles_col)  # a file too short is refused before the test sets are read
        if len(smiles) < MIN_MOLECULES:
            raise ConfigError(f"pretrain: only {len(smiles)} SMILES in {source}; a corpus needs at least "
                              f"{MIN_MOLECULES} molecules")
    excluded, read_sets = _excluded_keys(data_root, list(exclude_files), test_sets)
    part = _partial_dir(out, {**want, "test_sets": read_sets})

    def select(read: list[str] | None = smiles) -> tuple[list[str], dict, int]:
        read = read_smiles(source, smiles_col) if read is None else read
        return (*_select(read, molecules, seed, excluded, progress), len(read))

    kept, counts, n_source = _saved_selection(part, select)
    del smiles, select  # the source's SMILES (1.6 million for moses) are done with
    if len(kept) < MIN_MOLECULES:  # not kept: the file mended (a CSV named .csv) is read again, not this selection
        (part / "selection.json.gz").unlink(missing_ok=True)
        from ..data.compressed import inner_suffix

        hint = ""
        if counts.get("invalid") == n_source and inner_suffix(source) not in (".csv", ".tsv"):
            hint = (f"; {source} is read as one SMILES per line (.smi/.txt): if it is a CSV, name it .csv and give "
                    "--smiles-col")
        why = (f" ({counts.get('in_test_set', 0)} removed as benchmark test molecules or molecules of --exclude, "
               f"{counts.get('duplicate', 0)} duplicates, {counts.get('invalid', 0)} invalid)")
        raise ConfigError(f"pretrain: only {len(kept)} usable molecules of the {n_source} in {source}{why}; a corpus "
                          f"needs at least {MIN_MOLECULES}{hint}")
    if len(kept) < molecules:  # (an INFO line said it, among others)
        log.warning("pretrain: %s holds %d usable molecules, fewer than --molecules %d: the corpus has %d", source,
                    len(kept), molecules, len(kept))
    n = len(kept)
    n_val, n_test = (max(1, round(f * n)) for f in SPLIT_FRAC[1:])
    split = np.full(n, "train", dtype=object)
    perm = np.random.default_rng(seed + 1).permutation(n)
    split[perm[:n_val]], split[perm[n_val:n_val + n_test]] = "val", "test"
    raw = _raw_descriptors(kept, part, max(1, int(workers)), progress)
    z, names, scaler = _descriptor_targets(raw, np.nonzero(split == "train")[0])
    del raw
    out.mkdir(parents=True, exist_ok=True)
    tmp = csv_path.with_suffix(".csv.tmp")
    try:
        with open(tmp, "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(["smiles", "split", *names])
            for s, sp, row in zip(kept, split, z):
                w.writerow([s, sp, *(f"{v:.5g}" for v in row)])
    except BaseException:  # (Ctrl-C, a full disk: a partial corpus the size of the source stayed)
        tmp.unlink(missing_ok=True)
        raise
    if expect is not None and file_digest(tmp) != expect:  # the run's record stays as it was
        tmp.unlink()
        raise ConfigError(f"pretrain --resume: {csv_path}, built again from the run's arguments, is not the corpus the "
                          f"run was trained on (its digest differs from {meta_path}'s csv_sha256; another RDKit or "
                          "data root?); put back the corpus.csv it was trained on, or pretrain into a new --out")
    tmp.replace(csv_path)
    meta = {**want, "source": str(source), "source_smiles": n_source, **counts, "kept": len(kept),
            "split_sizes": {k: int((split == k).sum()) for k in ("train", "val", "test")},
            "test_sets": read_sets, "descriptors": names, "clip_z": CLIP_Z, "scaler": scaler,
            "csv_sha256": file_digest(csv_path), "seconds": round(time.time() - t0, 1)}
    atomic_write_bytes(meta_path, json.dumps(meta, indent=1).encode())
    import shutil

    shutil.rmtree(part, ignore_errors=True)  # the corpus is written: its pieces are done with
    log.info("pretrain: corpus of %d molecules (%d read; %d removed as benchmark test molecules or molecules of "
             "--exclude, %d duplicates, "
             "%d invalid) in %.0f s", len(kept), counts["read"], counts["in_test_set"], counts["duplicate"],
             counts["invalid"], meta["seconds"])
    return meta


#: the data keys of how the corpus CSV that pretrain writes is read, beside those it sets: each
#: stays at its default (a molecule read as its parent, or a cut, would not be the one whose
#: descriptors it regresses, or the corpus its record counts)
_CORPUS_READING = ("sep", "decimal", "duplicates", "val_fraction", "fragments", "max_graphs", "num_nodes", "seed")


def pretrain_config(base: str | None, corpus_csv: Path, targets: list[str], epochs: int, seed: int,
                    overrides: list[str] = (), cache_dir: str | None = None) -> Config:
    """The training config of a pretraining run: ``base`` (default ``csv``) on the corpus CSV."""
    from ..config import override_key, set_itself

    mine = {"train.epochs": "from --epochs", "train.seed": "from --seed",
            **{f"data.{k}": "itself (its corpus and split)" for k in ("name", "csv", "smiles_col", "target_cols", "task",
                                                                       "split", *_CORPUS_READING)},
            "data.fragments": "itself (it regresses the descriptors of each molecule as written)",
            "data.max_graphs": "itself (its corpus's molecules, from --molecules)"}
    if base is not None and not str(base).strip():  # (--config "" pretrained the csv recipe, silently)
        load_config(base)  # its refusal, one home
    clash = set_itself([override_key(item) for item in overrides], mine, "pretrain")
    if clash:  # they came after these and won: a run that its corpus and record do not describe
        raise ConfigError(clash)
    sets = ["data.name=csv", f"data.csv={corpus_csv}", "data.smiles_col=smiles", f"data.target_cols={','.join(targets)}",
            "data.task=regression", "data.split=column:split", f"train.epochs={epochs}", f"train.seed={seed}",
            "train.init=''",  # pretraining starts fresh, whatever weights the base recipe names
            *([f"data.cache_dir={cache_dir}"] if cache_dir else []), *overrides]
    try:
        cfg = load_config(base or "csv", sets)
    except ConfigError:
        from ..data.catalog import DATASET_META

        try:
            name = load_config(base or "csv").data.name
        except ConfigError:
            name = None
        if DATASET_META.get(name, {}).get("level") == "node":  # (its loss and task were named instead)
            raise ConfigError(f"--config {base}: a config of the node-level dataset {name}; pretrain trains a model of "
                              "molecules: give a molecule config (csv, the default; nci5k, zinc, ...)") from None
        if not any(o.startswith("train.loss=") for o in overrides):  # a classifier's loss, which it had not chosen
            try:
                load_config(base or "csv", [*sets, "train.loss=auto"])
            except ConfigError:
                pass
            else:
                raise ConfigError(f"--config {base}: its train.loss ({load_config(base or 'csv').train.loss}) is a "
                                  "classifier's, and pretraining regresses descriptors: add --set train.loss=auto, or "
                                  "give a regression config (csv, the default)") from None
        raise
    if cfg.train.init:
        raise ConfigError("train.init: pretraining starts from a fresh model; drop --set train.init")
    for key in _CORPUS_READING:  # a config file's own (a --set of one is refused above)
        if getattr(cfg.data, key) != getattr(DataConfig(), key):
            raise ConfigError(f"--config {base}: its data.{key} ({getattr(cfg.data, key)!r}) describes its own data, and "
                              f"pretrain reads the corpus it writes as written: drop data.{key} from the config")
    if "rdkit2d" in parse_mol_features(cfg.model.mol_features):
        raise ConfigError(f"model.mol_features: {cfg.model.mol_features!r} gives the model the rdkit2d descriptors "
                          "as inputs, and pretraining regresses those same descriptors: it would learn to copy its "
                          "input. Drop rdkit2d from model.mol_features for pretraining (set it when fine-tuning)")
    why = cfg.train.warmup_refusal()  # the recipe's warmup is kept in epochs (the shipped weights': 3 of 15)
    if why:
        raise ConfigError(f"pretrain --epochs {epochs}: {why}")
    return cfg


def export_pretrained(run_dir: Path, dest: Path, corpus: dict, extra: dict | None = None) -> dict:
    """``dest``: the best epoch's model weights, config and task of the run in ``run_dir`` and the
    corpus record, for ``torch.load(weights_only=True)``; returns its ``pretraining`` record."""
    from .checkpoint import atomic_save, load_checkpoint

    ckpt = load_checkpoint(run_dir / BEST)
    metrics = json.loads((run_dir / METRICS).read_text())
    record = {"corpus_source": Path(corpus["source"]).name, "corpus_sha256": corpus["source_sha256"],
              "corpus_molecules": corpus["kept"], "corpus_seed": corpus["seed"],
              "removed_test_molecules": corpus["in_test_set"], "test_sets": json.dumps(corpus["test_sets"]),
              "targets": "rdkit2d descriptors (standardized, clipped)", "descriptors": list(corpus["descriptors"]),
              "epochs": metrics["epochs"], "best_epoch": metrics["best_epoch"], "val_mae": metrics["val"],
              "train_seconds": metrics["seconds"], "siggate_version": ckpt.get("siggate_version"), **(extra or {})}
    blob = {"format": FORMAT, "model": {k: v.clone() for k, v in ckpt["model"].items()}, "config": ckpt["config"],
            "resolved": dict(ckpt.get("resolved") or {}), "info": ckpt["info"], "params": ckpt["params"],
            "pretraining": record}
    atomic_save(blob, dest)
    safe_torch_load(dest)  # the promise: loads without pickled code
    return record


def pretrain(source: str | Path, out: str | Path, molecules: int = 100_000, epochs: int = 20, seed: int = 0,
             config: str | None = None, overrides: list[str] = (), data_root=None, exclude_files: list[str] = (),
             smiles_col: str | None = None, resume: bool = False, progress: bool = True, test_sets=None,
             device: str = "cpu", workers: int = 1) -> dict:
    """Corpus, training and export (module docstring); returns the export's ``pretraining`` record.
    ``workers``: processes that compute the corpus's descriptors."""
    from .pipeline import train

    out = Path(out)
    model_dir = out / "model"
    if not resume and (model_dir / LAST).exists():
        raise ConfigError(f"{out} holds a pretraining run; pass --resume to continue it, or another --out")
    if (out / "pretrained.pt").is_file() and not (model_dir / LAST).exists():  # its model/ removed: a new run
        raise ConfigError(f"{out} holds a finished pretraining's export (pretrained.pt) and no model/ to resume; "  # would
                          f"fine-tune from it (--init {out}), or pretrain into another --out")  # write over it
    if resume and not (model_dir / LAST).exists() and "corpus/" not in pretraining_files(out):
        raise ConfigError(f"--resume: {out} holds no pretraining to continue (no corpus, no checkpoint); check "
                          "--out, or drop --resume to start one")
    # the config is refused before the corpus is built (minutes to hours), not after
    pretrain_config(config, out / "corpus" / "corpus.csv", ["descriptor"], epochs, seed, overrides)
    corpus = build_corpus(source, out / "corpus", molecules, seed, data_root, exclude_files, smiles_col, progress,
                          test_sets, keep=resume and (model_dir / LAST).exists(), workers=workers)
    cfg = pretrain_config(config, out / "corpus" / "corpus.csv", corpus["descriptors"], epochs, seed, overrides,
                          cache_dir=str(out / "cache"))
    t0 = time.time()
    import torch

    from .distributed import DistContext

    dest, last = out / "pretrained.pt", model_dir / LAST
    before = file_digest(last) if last.is_file() else None
    train(cfg, model_dir, resume=resume and last.exists(), progress=progress,
          dist=DistContext(device=torch.device(device)))
    if dest.is_file() and before is not None and file_digest(last) == before:  # no epoch trained: a finished
        try:                                                                  # run resumed is left as it is,
            record = safe_torch_load(dest)["pretraining"]                     # when its export is of it
            metrics = json.loads((model_dir / METRICS).read_text())
            if json.dumps([record.get(k) for k in ("epochs", "best_epoch", "val_mae")]) == json.dumps(
                    [metrics.get(k) for k in ("epochs", "best_epoch", "val")]):  # (as text: a NaN equals a NaN)
                return record
            # a growth (--resume --epochs N) stopped between its last epoch and its export: the export is the
            # shorter run's, the model the longer one's
            log.warning("pretrain: %s is the export of %s epochs, the run in %s has trained %s; exporting it again",
                        dest, record.get("epochs"), model_dir, metrics.get("epochs"))
        except Exception as exc:  # noqa: BLE001 (damaged or not ours: made again from the run's best.pt, below)
            log.warning("pretrain: %s cannot be read (%s: %s); exporting it again from %s", dest,
                        type(exc).__name__, exc, model_dir / BEST)
    return export_pretrained(model_dir, dest, corpus, {"wall_seconds_this_call": round(time.time() - t0)})
