"""Morgan fingerprints and the MinMax kernel (``data/fingerprints.py``) against RDKit called
directly and their definitions, the Nyström map (``predictors/kernel.py``), and the applicability
domain's similarity (``data/similarity.py``), which is that kernel of those fingerprints."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from rdkit import Chem
from rdkit.Chem import rdFingerprintGenerator

from siggate.data import fingerprints as fp
from siggate.data import molfeatures
from siggate.data import similarity as sim
from siggate.predictors.kernel import exact_kernel_map, minmax_kernel, nystrom_projection

SMILES = ["CCO", "c1ccccc1O", "CC(=O)Nc1ccc(O)cc1", "[Na+].[Cl-]", "CCCCCCCCCCCCCCCCCCCC", "C[C@H](N)C(=O)O",
          "O=C1NC(=O)C=C1", "Clc1ccc(Br)cc1"]


@pytest.mark.parametrize("radius, size", [(2, 2048), (3, 1024), (0, 64)])
def test_counts_and_bits_equal_rdkit(radius, size):
    gen = rdFingerprintGenerator.GetMorganGenerator(radius=radius, fpSize=size)
    mols = [Chem.MolFromSmiles(s) for s in SMILES]
    want = np.stack([gen.GetCountFingerprintAsNumPy(m) for m in mols]).astype(np.float32)
    dense = fp.morgan_counts(SMILES, radius, size)
    assert dense.dtype == np.float32 and dense.shape == (len(SMILES), size)
    assert np.array_equal(dense, want)
    sparse = fp.morgan_counts(mols, radius, size, sparse=True)
    assert sparse.dtype == np.int32 and sparse.has_sorted_indices and np.array_equal(sparse.toarray(), want)
    bits = fp.ecfp_bits(SMILES, radius, size)
    assert bits.dtype == np.uint8 and np.array_equal(bits, (want > 0).astype(np.uint8))
    assert np.array_equal(bits, np.stack([gen.GetFingerprintAsNumPy(m) for m in mols]))
    assert dense[4].max() > 10  # the long chain: counts, not bits


def test_sparse_blocks_join_in_order(monkeypatch):
    monkeypatch.setattr(fp, "_BLOCK", 3)  # 8 molecules: blocks of 3, 3, 2
    assert np.array_equal(fp.morgan_counts(SMILES, sparse=True).toarray(), fp.morgan_counts(SMILES))
    assert fp.morgan_counts([], sparse=True).shape == (0, fp.SIZE)


def test_molfeatures_morgan_count_is_the_same_fingerprint():
    assert np.array_equal(molfeatures.compute(SMILES, "morgan_count"), fp.morgan_counts(SMILES, 2, 2048))


def test_bit_atoms_one_environment_per_count_centre_first_within_radius():
    smiles, radius = "CC(=O)Nc1ccc(O)cc1", 2
    mol = Chem.MolFromSmiles(smiles)
    dist = Chem.GetDistanceMatrix(mol)
    counts = fp.morgan_counts([smiles], radius, 2048)[0]
    envs = fp.bit_atoms(smiles, radius, 2048)
    assert sorted(envs) == np.flatnonzero(counts).tolist()
    centres = []
    for bit, found in envs.items():
        assert len(found) == counts[bit]
        for env in found:
            centre = env[0]
            assert all(dist[centre, a] <= radius for a in env) and len(set(env)) == len(env)
            centres.append(centre)
    # every atom is the centre of its radius-0 environment, so each appears as a centre
    assert set(centres) == set(range(mol.GetNumAtoms()))


def test_unparsable_smiles_named_with_position():
    # parses but fails sanitization (5-valent carbon): kept as the datasets keep it (allow_unsanitized)
    # 6 atoms at radius 0, 6 at radius 1; at radius 2 no environment covers a new bond
    assert fp.morgan_counts(["C(C)(C)(C)(C)C"]).sum() == 6 + 6
    with pytest.raises(ValueError, match=r"molecule 1 \('C1CC'\) is not a valid SMILES.*drop invalid molecules"):
        fp.morgan_counts(["CCO", "C1CC"])
    with pytest.raises(ValueError, match="item 0 is a int"):
        fp.ecfp_bits([3])
    with pytest.raises(ValueError, match="radius must be an integer >= 0"):
        fp.morgan_counts(["CCO"], radius=-1)


def reference_minmax(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The definition, one pair at a time."""
    out = np.empty((a.shape[0], b.shape[0]))
    for i in range(a.shape[0]):
        for j in range(b.shape[0]):
            hi = np.maximum(a[i], b[j]).sum()
            out[i, j] = np.minimum(a[i], b[j]).sum() / hi if hi > 0 else 1.0
    return out


def random_counts(rng, n: int, d: int, high: int = 20) -> np.ndarray:
    x = rng.integers(0, high, size=(n, d)) * (rng.random((n, d)) < 0.3)
    x[0] = 0  # an empty fingerprint
    return x


@pytest.mark.parametrize("block", [1, 7, 1024])
def test_minmax_kernel_equals_the_definition(block):
    rng = np.random.default_rng(0)
    a, b = random_counts(rng, 13, 40), random_counts(rng, 9, 40, high=60)
    k = minmax_kernel(a, b, block=block)
    assert k.dtype == np.float64 and k.shape == (13, 9)
    np.testing.assert_allclose(k, reference_minmax(a, b), rtol=0, atol=1e-15)
    assert k[0, 0] == 1.0 and np.all(k[0, 1:] == 0.0)  # two empty fingerprints are identical; empty vs not: 0
    assert np.array_equal(minmax_kernel(a, b, block=3), k)  # blocks do not change a single value


def test_minmax_kernel_refuses_counts_it_cannot_count():
    """Counts of 1.5 were read as 1 (K 1.0 against [1, 2], where the definition gives 0.857), and
    negative ones are refused: each named, since the kernel counts whole numbers."""
    with pytest.raises(ValueError, match="fingerprint counts must be whole numbers"):
        minmax_kernel(np.array([[1.5, 2.0]]), np.array([[1.0, 2.0]]))
    with pytest.raises(ValueError, match="fingerprint counts must be >= 0"):
        minmax_kernel(np.array([[-1.0, 2.0]]), np.array([[1.0, 2.0]]))
    with pytest.raises(ValueError, match="fingerprint counts must be whole numbers below 2"):  # it wrapped to < 0
        minmax_kernel(np.array([[1e20, 2.0]]), np.array([[1.0, 2.0]]))
    with pytest.raises(ValueError, match="fingerprint counts must be finite numbers"):
        minmax_kernel(np.array([[np.nan, 2.0]]), np.array([[1.0, 2.0]]))
    assert minmax_kernel(np.array([[1.0, 2.0]], dtype=np.float32), np.array([[2, 2]]))[0, 0] == 0.75


def test_minmax_kernel_on_molecules_symmetric_psd():
    x = fp.morgan_counts(SMILES, sparse=True)
    k = minmax_kernel(x, x)
    np.testing.assert_allclose(k, reference_minmax(x.toarray(), x.toarray()), rtol=0, atol=1e-15)
    assert np.array_equal(k, k.T) and np.all(np.diag(k) == 1.0)
    assert np.linalg.eigvalsh(k).min() > -1e-12
    with pytest.raises(ValueError, match="2048 and 1024 bins"):
        minmax_kernel(x, fp.morgan_counts(SMILES, size=1024, sparse=True))


def test_nystrom_with_every_row_a_landmark_is_the_exact_kernel_map():
    x = fp.morgan_counts(SMILES, sparse=True)
    k = minmax_kernel(x, x)
    phi = k @ nystrom_projection(k)
    np.testing.assert_allclose(phi @ phi.T, k, atol=1e-10)
    land = [0, 2, 5]  # fewer landmarks: exact on the landmarks themselves
    w = nystrom_projection(k[np.ix_(land, land)])
    phi = k[:, land] @ w
    np.testing.assert_allclose((phi @ phi.T)[np.ix_(land, land)], k[np.ix_(land, land)], atol=1e-10)
    # the exact map read from the eigendecomposition is K W, without the kernel product
    w, direct = exact_kernel_map(k)
    np.testing.assert_allclose(w, nystrom_projection(k), atol=0)
    np.testing.assert_allclose(direct, k @ w, atol=1e-10)
    np.testing.assert_allclose(direct @ direct.T, k, atol=1e-10)


def test_the_members_kernel_is_the_fingerprints_module_s():
    assert minmax_kernel is fp.minmax_kernel  # one home: the members and the domain share it


def test_the_domain_s_similarity_is_the_minmax_kernel_of_morgan_counts(tmp_path):
    """The applicability domain reads data/fingerprints (one home): its fingerprints are
    morgan_counts', its nearest-training similarity the count Tanimoto by definition, an
    unparsable SMILES is similar to nothing, and the stored arrays load back equal."""
    train, query = SMILES[:5], [SMILES[5], "C1CC", "C" * 60, SMILES[2]]
    ref = sim.domain_fingerprints(train)
    assert np.array_equal(ref.toarray(), fp.morgan_counts(train, sim.RADIUS, sim.N_BITS))
    q = sim.domain_fingerprints(query)
    assert q.shape == (4, sim.N_BITS) and q[1].nnz == 0
    assert np.array_equal(q[[0, 2, 3]].toarray(), fp.morgan_counts([query[i] for i in (0, 2, 3)]))
    want = reference_minmax(q.toarray(), ref.toarray()).max(axis=1)
    want[1] = 0.0
    got = sim.nearest_similarity(q, ref)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-15)
    assert got[3] == 1.0 and got[1] == 0.0  # a training molecule; the unparsable one
    assert np.array_equal(sim.nearest_similarity(q, ref[:0]), np.zeros(4))
    dom = sim.Domain.fit(train, [SMILES[6], SMILES[7]])
    dom.save(tmp_path)
    back = sim.Domain.load(tmp_path)
    assert back.threshold == dom.threshold and np.array_equal(back.reference.toarray(), ref.toarray())
    np.testing.assert_array_equal(back.similarity(query), got)
    with np.load(tmp_path / sim.FINGERPRINTS_FILE) as z:
        arrays = dict(z)
    arrays["bits"][0] = sim.N_BITS  # a bin beyond the fingerprint
    np.savez(tmp_path / sim.FINGERPRINTS_FILE, **arrays)
    with pytest.raises(sim.DomainError, match="cannot read the applicability domain.*inconsistent"):
        sim.Domain.load(tmp_path)
    # a crafted domain.json: a negative radius (a ValueError traceback mid-output at predict) and
    # JSON nested too deep (a RecursionError traceback) are refused when the domain is loaded
    dom.save(tmp_path)
    doc = json.loads((tmp_path / sim.DOMAIN_FILE).read_text())
    for text, why in ((json.dumps({**doc, "radius": -1}), "n_bits .* and radius -1"),
                      ("[" * 100000 + "]" * 100000, "JSON nested too deep to read")):
        (tmp_path / sim.DOMAIN_FILE).write_text(text)
        with pytest.raises(sim.DomainError, match=f"cannot read the applicability domain \\(.*{why}"):
            sim.Domain.load(tmp_path)
    # a pickled object in the arrays (a received run folder): refused, never unpickled
    dom.save(tmp_path)
    marker = tmp_path / "unpickled"
    with np.load(tmp_path / sim.FINGERPRINTS_FILE) as z:
        arrays = dict(z)
    arrays["bits"] = np.array([_Payload(str(marker))], dtype=object)
    np.savez(tmp_path / sim.FINGERPRINTS_FILE, **arrays)
    with pytest.raises(sim.DomainError) as refused:  # (NumPy's own words advised loading it unsafely)
        sim.Domain.load(tmp_path)
    assert str(refused.value) == (f"{tmp_path / sim.FINGERPRINTS_FILE}: refused: it holds pickled Python objects, "
                                  "which siggate never writes (nothing in it was run); retrain the run, or delete "
                                  "domain.json to predict without it")
    import pickle

    (tmp_path / sim.FINGERPRINTS_FILE).write_bytes(pickle.dumps(_Payload(str(marker))))  # a bare pickle
    with pytest.raises(sim.DomainError, match="refused: it holds pickled Python objects"):
        sim.Domain.load(tmp_path)
    (tmp_path / sim.FINGERPRINTS_FILE).write_bytes(b"not an archive")  # (NumPy took it for a pickle too)
    with pytest.raises(sim.DomainError, match=r"cannot read the applicability domain \(ValueError: "
                                              r"domain_fingerprints\.npz is no NumPy archive\)"):
        sim.Domain.load(tmp_path)
    assert not marker.exists()


class _Payload:
    """Unpickling it writes the file ``path``: proof that a load ran a pickle."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (Path.touch, (Path(self.path),))


# ----------------------------------------------------------------------------- several kinds side by side

KIND_SMILES = ["CCOc1ccccc1N", "O=C(O)c1ccncc1Cl", "CC(C)(C)NC(=O)C1CC1", "C", "c1ccc2ccccc2c1"]


def _generator_of(kind: str, size: int):
    g = rdFingerprintGenerator
    return {"morgan": lambda: g.GetMorganGenerator(radius=2, fpSize=size),
            "fmorgan": lambda: g.GetMorganGenerator(radius=2, fpSize=size,
                                                    atomInvariantsGenerator=g.GetMorganFeatureAtomInvGen()),
            "atompair": lambda: g.GetAtomPairGenerator(fpSize=size),
            "torsion": lambda: g.GetTopologicalTorsionGenerator(fpSize=size),
            "path": lambda: g.GetRDKitFPGenerator(maxPath=6, fpSize=size)}[kind]()


def test_count_fingerprints_lay_rdkit_s_kinds_side_by_side():
    kinds, size = ("torsion", "path", "morgan", "fmorgan", "atompair"), 512
    got = fp.count_fingerprints(KIND_SMILES, "torsion+path+morgan+fmorgan+atompair", 2, size)
    sparse = fp.count_fingerprints(KIND_SMILES, kinds, 2, size, sparse=True)
    assert got.shape == (5, 5 * size) and np.array_equal(sparse.toarray(), got)
    for k, kind in enumerate(kinds):
        want = np.stack([_generator_of(kind, size).GetCountFingerprintAsNumPy(Chem.MolFromSmiles(s)) for s in KIND_SMILES])
        assert np.array_equal(got[:, k * size : (k + 1) * size], want)
    assert np.array_equal(fp.count_fingerprints(KIND_SMILES, "morgan", 2, size), fp.morgan_counts(KIND_SMILES, 2, size))


def test_bit_atoms_of_several_kinds_cover_each_count_with_its_atoms():
    size = 1024
    for s in KIND_SMILES:
        x = fp.count_fingerprints([s], "morgan+atompair+torsion+fmorgan+path", 2, size)[0]
        where = fp.bit_atoms(s, 2, size, kinds="morgan+atompair+torsion+fmorgan+path")
        assert sorted(where) == np.flatnonzero(x).tolist()
        assert all(len(envs) == x[b] for b, envs in where.items())
        n_bonds = Chem.MolFromSmiles(s).GetNumBonds()
        for b, envs in where.items():  # an atom pair has 2 atoms, a torsion 4, a path 2..7 (the molecule's own indices)
            assert all(len(e) == {1: 2, 2: 4}.get(b // size, len(e)) for e in envs)
            if b // size == 4:
                assert all(2 <= len(e) <= min(7, n_bonds + 1) for e in envs)
            assert all(0 <= a < Chem.MolFromSmiles(s).GetNumAtoms() for e in envs for a in e)


def test_minmax_kernel_of_parts_is_the_mean_of_each_part_s_kernel():
    x = fp.count_fingerprints(KIND_SMILES, "morgan+atompair+torsion", 2, 256, sparse=True)
    parts = [fp.minmax_kernel(x[:, k * 256 : (k + 1) * 256], x[:, k * 256 : (k + 1) * 256]) for k in range(3)]
    np.testing.assert_allclose(fp.minmax_kernel(x, x, parts=3), sum(parts) / 3, rtol=0, atol=1e-12)
    assert not np.allclose(fp.minmax_kernel(x, x, parts=3), fp.minmax_kernel(x, x))  # not the pooled kernel
    with pytest.raises(ValueError, match="do not split into 5 equal fingerprints"):
        fp.minmax_kernel(x, x, parts=5)


@pytest.mark.parametrize("bad", ["morgan+ecfp", "", "morgan+morgan"])
def test_unknown_or_repeated_kinds_are_refused_by_name(bad):
    with pytest.raises(ValueError, match="give distinct kinds among morgan, atompair, torsion, fmorgan, path"):
        fp.count_fingerprints(KIND_SMILES, bad)
