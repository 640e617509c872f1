"""How additive is a task's target? Least squares on counts of atom types, scored on the test split.

    python benchmarks/peers/probes/atom_count_fit.py [TASK]      (default: zincmr4k; the task must be built)

Atoms are typed by (element, total H count, aromaticity, degree, hybridization, formal
charge): "0-hop", and additionally by the sorted (element, aromaticity, bond type) of their
bonded neighbours: "1-hop". A target that is a sum of such atom contributions is fitted
exactly by the 1-hop counts (test MAE ~ 0); prints one JSON line per typing.
"""

import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np
from rdkit import Chem

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import tasks  # noqa: E402


def atom_types(mol, hop: int) -> Counter:
    out = Counter()
    for a in mol.GetAtoms():
        t = (a.GetAtomicNum(), a.GetTotalNumHs(), a.GetIsAromatic(), a.GetDegree(), str(a.GetHybridization()),
             a.GetFormalCharge())
        if hop:
            t += tuple(sorted((n.GetAtomicNum(), n.GetIsAromatic(),
                               str(mol.GetBondBetweenAtoms(a.GetIdx(), n.GetIdx()).GetBondType()))
                              for n in a.GetNeighbors()))
        out[t] += 1
    return out


def main(task: str = "zincmr4k") -> None:
    tasks.build(task)
    smiles, targets, splits = tasks.read_task_csv(tasks.task_dir(task) / "data.csv")
    y, split = np.array(targets), np.array(splits)
    mols = [Chem.MolFromSmiles(s) for s in smiles]
    for hop in (0, 1):
        counts = [atom_types(m, hop) for m in mols]
        keys = {k: i for i, k in enumerate(sorted({k for c in counts for k in c}, key=str))}
        X = np.zeros((len(mols), len(keys) + 1))
        X[:, -1] = 1.0
        for i, c in enumerate(counts):
            for k, v in c.items():
                X[i, keys[k]] = v
        train, test = split == "train", split == "test"
        w = np.linalg.lstsq(X[train], y[train], rcond=None)[0]
        print(json.dumps({"task": task, "typing": f"{hop}-hop", "atom_types": len(keys),
                          "train_mae": float(np.abs(X[train] @ w - y[train]).mean()),
                          "test_mae": float(np.abs(X[test] @ w - y[test]).mean())}))


if __name__ == "__main__":
    main(*sys.argv[1:])
