"""Small fake benchmark datasets written in the official on-disk layouts.

Each ``make_*`` helper writes files under ``root`` exactly where the loaders in
:mod:`siggate.data.zinc`, :mod:`siggate.data.ogb_mol` and :mod:`siggate.data.peptides`
look for them (OGB ``ogbg_*`` folders, LRGB ``peptides-*`` folders, PyG ``ZINC/subset/processed``) and returns what it wrote,
so tests can compare the loaded graphs with the source values.
"""

from __future__ import annotations

import gzip
import io
import pickle
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from rdkit import Chem
from torch_geometric.data import Data, InMemoryDataset

# Small valid molecules (all sanitize in RDKit).
SMILES = [
    "CCO",
    "c1ccccc1",
    "CC(=O)O",
    "CCN",
    "C1CC1",
    "O=C=O",
    "CC(C)O",
    "c1ccncc1",
    "CCOC(=O)C",
    "N#CC",
    "C[C@H](N)C(=O)O",
    "OCC(O)CO",
    "CC(C)(C)c1ccc(O)cc1",
    "O=C1NC(=O)C=C1",
    "CSCC[C@H](N)C(=O)O",
    "Clc1ccc(Br)cc1",
]
#: Parses but fails sanitization (5-valent carbon): kept only with allow_unsanitized.
UNSANITIZABLE = "C(C)(C)(C)(C)C"
#: Does not parse at all (unclosed ring): always an invalid row.
UNPARSABLE = "C1CC"

PEPTIDES_STRUCT_TARGETS = [
    "Inertia_mass_a",
    "Inertia_mass_b",
    "Inertia_mass_c",
    "Inertia_valence_a",
    "Inertia_valence_b",
    "Inertia_valence_c",
    "length_a",
    "length_b",
    "length_c",
    "Spherocity",
    "Plane_best_fit",
]


def _write_gz(path: Path, text: str, name: str | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as raw, gzip.GzipFile(filename=name or path.stem, mode="wb", fileobj=raw, mtime=0) as gz:
        gz.write(text.encode())


def write_csv_gz(path: Path, df: pd.DataFrame, header: bool = True, index: bool = False) -> None:
    buf = io.StringIO()
    df.to_csv(buf, header=header, index=index)
    _write_gz(path, buf.getvalue())


def write_index_csv_gz(path: Path, indices) -> None:
    """OGB split / count file: one integer per line, no header."""
    _write_gz(path, "".join(f"{int(i)}\n" for i in indices))


def atom_bond_counts(smiles: str) -> tuple[int, int]:
    mol = Chem.MolFromSmiles(smiles)
    return mol.GetNumAtoms(), mol.GetNumBonds()


def default_split(n: int) -> dict:
    idx = np.arange(n)
    n_val = max(1, n // 8)
    n_test = max(1, n // 8)
    return {"train": idx[: n - n_val - n_test], "val": idx[n - n_val - n_test : n - n_test], "test": idx[n - n_test :]}


# ----------------------------------------------------------------------------- OGB


def make_ogb_mol(
    root: Path,
    folder: str,
    task_names: list[str],
    smiles: list[str],
    labels: np.ndarray,
    split: dict | None = None,
    raw: bool = True,
    label_first: bool = True,
) -> dict:
    """An OGB ``ogbg_mol*`` folder: ``mapping/mol.csv.gz``, ``split/scaffold/*.csv.gz``,
    ``RELEASE_v1.txt`` and (``raw=True``) ``raw/num-{node,edge}-list.csv.gz`` and
    ``raw/graph-label.csv.gz`` (NaN written as empty fields, as pandas does)."""
    root = Path(root)
    base = root / folder
    labels = np.asarray(labels, dtype=np.float64).reshape(len(smiles), len(task_names))
    split = split or default_split(len(smiles))
    cols = {name: labels[:, j] for j, name in enumerate(task_names)}
    df = pd.DataFrame(cols)
    df["smiles"] = smiles
    df["mol_id"] = [f"mol{i}" for i in range(len(smiles))]
    if not label_first:
        df = df[["smiles"] + task_names + ["mol_id"]]
    if len(task_names) == 1:  # molhiv stores ints
        df[task_names[0]] = df[task_names[0]].astype("Int64")
    write_csv_gz(base / "mapping" / "mol.csv.gz", df)
    (base / "RELEASE_v1.txt").parent.mkdir(parents=True, exist_ok=True)
    (base / "RELEASE_v1.txt").write_text("fixture\n")
    for key, fname in (("train", "train"), ("val", "valid"), ("test", "test")):
        write_index_csv_gz(base / "split" / "scaffold" / f"{fname}.csv.gz", split[key])
    counts = []
    for s in smiles:
        try:
            counts.append(atom_bond_counts(s))
        except AttributeError:  # not parsable with sanitization
            mol = Chem.MolFromSmiles(s, sanitize=False)
            counts.append((mol.GetNumAtoms(), mol.GetNumBonds()) if mol is not None else (0, 0))
    if raw:
        write_index_csv_gz(base / "raw" / "num-node-list.csv.gz", [a for a, _ in counts])
        write_index_csv_gz(base / "raw" / "num-edge-list.csv.gz", [b for _, b in counts])
        write_csv_gz(base / "raw" / "graph-label.csv.gz", pd.DataFrame(labels), header=False)
    return {"smiles": list(smiles), "labels": labels, "split": split, "task_names": task_names, "counts": counts}


def make_molpcba(root: Path, n: int = 16, seed: int = 0, smiles: list[str] | None = None, **kw) -> dict:
    """Fake ``ogbg_molpcba``: 128 task columns (0/1 with ~40% NaN) + smiles + mol_id."""
    smiles = list(smiles if smiles is not None else SMILES[:n])
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, size=(len(smiles), 128)).astype(np.float64)
    labels[rng.random(labels.shape) < 0.4] = np.nan
    tasks = [f"PCBA-{1000 + 7 * j}" for j in range(128)]
    return make_ogb_mol(root, "ogbg_molpcba", tasks, smiles, labels, **kw)


def make_molhiv(root: Path, smiles: list[str] | None = None, seed: int = 0, **kw) -> dict:
    smiles = list(smiles if smiles is not None else SMILES)
    labels = np.random.default_rng(seed).integers(0, 2, size=(len(smiles), 1)).astype(np.float64)
    return make_ogb_mol(root, "ogbg_molhiv", ["HIV_active"], smiles, labels, **kw)


# ----------------------------------------------------------------------------- LRGB peptides


def write_split_pickle(path: Path, split: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        pickle.dump({k: np.asarray(v, dtype=np.int64) for k, v in split.items()}, f)


def make_peptides_func(root: Path, smiles: list[str] | None = None, seed: int = 0, split: dict | None = None) -> dict:
    """Fake ``peptides-functional``: CSV with ``Unnamed: 0, smiles, peptide_seq, labels, identifier``
    (labels written as ``"[0, 1, ...]"`` strings) + the split pickle."""
    smiles = list(smiles if smiles is not None else SMILES)
    labels = np.random.default_rng(seed).integers(0, 2, size=(len(smiles), 10))
    split = split or default_split(len(smiles))
    df = pd.DataFrame(
        {
            "smiles": smiles,
            "peptide_seq": ["AG" * (i % 3 + 1) for i in range(len(smiles))],
            "labels": [str(list(map(int, row))) for row in labels],
            "identifier": [f"pep{i}" for i in range(len(smiles))],
        }
    )
    base = Path(root) / "peptides-functional"
    write_csv_gz(base / "raw" / "peptide_multi_class_dataset.csv.gz", df, index=True)
    write_split_pickle(base / "splits_random_stratified_peptide.pickle", split)
    (base / "701eb743e899f4d793f0e13c8fa5a1b4").touch()
    return {"smiles": smiles, "labels": labels.astype(np.float64), "split": split}


def make_peptides_struct(
    root: Path,
    smiles: list[str] | None = None,
    seed: int = 0,
    split: dict | None = None,
    normalized: bool = True,
    write_split: bool = True,
    break_normalization: bool = False,
) -> dict:
    """Fake ``peptides-structural``: ``raw/peptide_structure_normalized_dataset.csv.gz``
    (targets z-scored over all rows, pandas ``ddof=1``) or, with ``normalized=False``,
    ``raw/peptide_structure_dataset.csv.gz`` with the unscaled targets; plus
    ``splits_random_stratified_peptide_structure.pickle``.

    Returns ``raw`` (unscaled) and ``standardized`` target arrays."""
    smiles = list(smiles if smiles is not None else SMILES)
    rng = np.random.default_rng(seed)
    raw = rng.normal(loc=np.linspace(1, 50, 11), scale=np.linspace(0.5, 9, 11), size=(len(smiles), 11))
    frame = pd.DataFrame(raw, columns=PEPTIDES_STRUCT_TARGETS)
    standardized = ((frame - frame.mean()) / frame.std()).to_numpy()
    values = standardized if normalized else raw
    if break_normalization:
        values = values * 2.0 + 1.0
    df = pd.DataFrame({"smiles": smiles, "peptide_seq": ["GA"] * len(smiles)})
    for j, name in enumerate(PEPTIDES_STRUCT_TARGETS):
        df[name] = values[:, j]
    split = split or default_split(len(smiles))
    base = Path(root) / "peptides-structural"
    fname = "peptide_structure_normalized_dataset.csv.gz" if normalized else "peptide_structure_dataset.csv.gz"
    write_csv_gz(base / "raw" / fname, df, index=True)
    if write_split:
        write_split_pickle(base / "splits_random_stratified_peptide_structure.pickle", split)
    return {"smiles": smiles, "raw": raw, "standardized": standardized, "split": split}


# ----------------------------------------------------------------------------- ZINC


def fake_zinc_graphs(n: int, seed: int) -> list[Data]:
    """Graphs shaped like PyG's ZINC: ``x [N, 1]`` long, ``edge_attr [E]`` long 1..3, ``y [1]``."""
    gen = torch.Generator().manual_seed(seed)
    graphs = []
    for _ in range(n):
        num = int(torch.randint(3, 9, (1,), generator=gen))
        pairs = [(i, i + 1) for i in range(num - 1)] + [(0, num - 1)]
        src = [a for a, b in pairs] + [b for a, b in pairs]
        dst = [b for a, b in pairs] + [a for a, b in pairs]
        bond = torch.randint(1, 4, (len(pairs),), generator=gen)
        graphs.append(
            Data(
                x=torch.randint(0, 28, (num, 1), generator=gen),
                edge_index=torch.tensor([src, dst]),
                edge_attr=torch.cat([bond, bond]),
                y=torch.randn(1, generator=gen),
            )
        )
    return graphs


def make_zinc(root: Path, sizes=(12, 4, 4), old_format=("val", "test"), seed: int = 0) -> dict:
    """Fake ``ZINC/subset/processed/{train,val,test}.pt``; splits listed in ``old_format``
    use the old ``(Data, slices)`` 2-tuple, the others PyG's current ``InMemoryDataset.save``."""
    out = {}
    folder = Path(root) / "ZINC" / "subset" / "processed"
    folder.mkdir(parents=True, exist_ok=True)
    for k, (split, n) in enumerate(zip(("train", "val", "test"), sizes)):
        graphs = fake_zinc_graphs(n, seed + k)
        path = folder / f"{split}.pt"
        if split in old_format:
            data, slices = InMemoryDataset.collate(graphs)
            torch.save((data, slices), path)
        else:
            InMemoryDataset.save(graphs, str(path))
        out[split] = graphs
    return out


def snapshot(root: Path) -> dict:
    """Every file under ``root`` with its size and mtime (to prove nothing was written)."""
    root = Path(root)
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}
