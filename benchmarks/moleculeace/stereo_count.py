"""How many molecules of the 20 public MoleculeACE targets share every Morgan environment and
count (radius 2, unfolded, stereo ignored, as the fingerprint members read them) with another
molecule of their target: the molecules a chirality-aware fingerprint could tell apart.

    python benchmarks/moleculeace/stereo_count.py        # JSON on stdout, per target and in all

Reads the targets' CSVs from the installed MoleculeACE wheel (``run.py``'s ``read_target``); the
reserved targets are never read.
"""

from __future__ import annotations

import collections
import json

from run import PUBLIC, read_target


def count(target: str) -> dict:
    from rdkit import Chem
    from rdkit.Chem import rdFingerprintGenerator

    gen = rdFingerprintGenerator.GetMorganGenerator(radius=2)
    rows = read_target(target)
    keys = [tuple(sorted(gen.GetSparseCountFingerprint(Chem.MolFromSmiles(r["smiles"])).GetNonzeroElements().items()))
            for r in rows]
    seen = collections.Counter(keys)
    shared = [seen[k] > 1 for k in keys]
    return {"molecules": len(rows), "test": sum(r["file_split"] == "test" for r in rows), "shared": sum(shared),
            "shared_test": sum(s and r["file_split"] == "test" for s, r in zip(shared, rows))}


def main() -> None:
    per = {t: count(t) for t in PUBLIC}
    total = {k: sum(v[k] for v in per.values()) for k in ("molecules", "test", "shared", "shared_test")}
    print(json.dumps({"targets": per, "all": total}, indent=1))


if __name__ == "__main__":
    main()
