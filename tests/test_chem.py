"""siggate.data.chem: parsing, OGB featurization, penalized logP, splits."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
import torch
from ogb.utils import smiles2graph
from rdkit import Chem, RDConfig
from rdkit.Chem import Crippen
from rdkit.Chem.Scaffolds import MurckoScaffold

from siggate.data.chem import (
    InvalidSmiles,
    mol_to_graph,
    parse_smiles,
    penalized_logp,
    random_split,
    scaffold_split,
    smiles_to_graph,
)

MOLECULES = [
    "CCO",
    "c1ccccc1O",
    "CC(=O)Nc1ccc(O)cc1",  # paracetamol
    "C[C@H](N)C(=O)O",  # chiral centre
    "F/C=C/F",  # stereo double bond
    "[Na+].[Cl-]",  # no bonds
    "C",  # one atom, no bonds
    "O=[N+]([O-])c1ccc(cc1)S(=O)(=O)N",  # charges, hypervalent S
    "C1CCCCCCC1",  # 8-ring
    "CC1=CC(=O)C=CC1=O",
    "OC1=C(Cl)C=C(C=C1[N+]([O-])=O)[N+]([O-])=O",
    "Cn1cnc2c1c(=O)n(C)c(=O)n2C",  # caffeine
]


# ------------------------------------------------------------------- parsing


def test_invalid_smiles_is_value_error():
    assert issubclass(InvalidSmiles, ValueError)


@pytest.mark.parametrize("s", ["", "   ", "\t\n"])
def test_empty_smiles(s):
    with pytest.raises(InvalidSmiles, match="^empty SMILES$"):
        parse_smiles(s)


def test_parse_error_reason():
    with pytest.raises(InvalidSmiles) as err:
        parse_smiles("C1CC(")
    assert str(err.value).startswith("SMILES parse error")
    assert "syntax error" in str(err.value)
    with pytest.raises(InvalidSmiles, match="SMILES parse error"):
        parse_smiles("CXC")


def test_valence_error_reason():
    with pytest.raises(InvalidSmiles) as err:
        parse_smiles("C[N](C)(C)(C)C")
    assert str(err.value) == "Explicit valence for atom # 1 N, 5, is greater than permitted"


def test_kekulize_error_reason():
    with pytest.raises(InvalidSmiles, match="kekulize"):
        parse_smiles("c1cccc1")


def test_an_inchi_is_named_as_one_and_converted_by_the_line_the_reason_gives():
    """A column of InChIs failed row by row with 'SMILES parse error: syntax error' at position 4."""
    from rdkit import Chem

    inchi = Chem.MolToInchi(Chem.MolFromSmiles("CC(=O)Nc1ccc(O)cc1"))
    with pytest.raises(InvalidSmiles) as err:
        parse_smiles(f" {inchi} ")
    assert str(err.value) == ("an InChI, not a SMILES: give a column of SMILES (RDKit converts one: "
                              "Chem.MolToSmiles(Chem.MolFromInchi(text)), whose mobile hydrogens may come back as "
                              "another tautomer: an amide as its iminol)")
    back = parse_smiles(Chem.MolToSmiles(Chem.MolFromInchi(inchi)))  # (RDKit 2026.09: the iminol tautomer)
    assert Chem.MolToInchi(back) == inchi


def test_whitespace_is_stripped():
    mol = parse_smiles("  CCO \n")
    assert mol.GetNumAtoms() == 3


def test_no_rdkit_output_on_stderr(capfd):
    for s in ["C1CC(", "CXC", "c1cccc1", "C[N](C)(C)(C)C", "O=C1O[Al]23(OC1=O)(OC(=O)C(=O)O2)OC(=O)C(=O)O3"]:
        with pytest.raises(InvalidSmiles):
            parse_smiles(s)
    parse_smiles("O=C1O[Al]23(OC1=O)(OC(=O)C(=O)O2)OC(=O)C(=O)O3", allow_unsanitized=True)
    out, err = capfd.readouterr()
    assert err == "" and out == ""


def test_allow_unsanitized_keeps_metal_complex():
    smi = "O=C1O[Al]23(OC1=O)(OC(=O)C(=O)O2)OC(=O)C(=O)O3"  # from NCI first_5K, Al with valence 6
    with pytest.raises(InvalidSmiles, match="Explicit valence for atom # 3 Al, 6"):
        smiles_to_graph(smi)
    g = smiles_to_graph(smi, allow_unsanitized=True)
    raw = Chem.MolFromSmiles(smi, sanitize=False)
    assert g.x.shape == (raw.GetNumAtoms(), 9)
    assert g.edge_index.shape == (2, 2 * raw.GetNumBonds())
    assert g.edge_attr.shape == (2 * raw.GetNumBonds(), 3)
    # ring membership was perceived (the oxalate rings are rings)
    assert g.x[:, 8].sum() > 0
    # a plain parse error stays an error even when unsanitized molecules are allowed
    with pytest.raises(InvalidSmiles, match="SMILES parse error"):
        parse_smiles("C1CC(", allow_unsanitized=True)


# ------------------------------------------------------------- featurization


@pytest.mark.parametrize("smi", MOLECULES)
def test_mol_to_graph_matches_ogb(smi):
    ref = smiles2graph(smi)
    g = smiles_to_graph(smi)
    assert g.x.dtype == g.edge_index.dtype == g.edge_attr.dtype == torch.long
    assert g.x.shape == ref["node_feat"].shape and g.x.shape[1] == 9
    assert g.edge_index.shape == ref["edge_index"].shape and g.edge_index.shape[0] == 2
    assert g.edge_attr.shape == ref["edge_feat"].shape and g.edge_attr.shape[1] == 3
    np.testing.assert_array_equal(g.x.numpy(), ref["node_feat"])
    np.testing.assert_array_equal(g.edge_index.numpy(), ref["edge_index"])
    np.testing.assert_array_equal(g.edge_attr.numpy(), ref["edge_feat"])
    assert g.num_nodes == ref["num_nodes"]
    assert g.smiles == smi


def test_mol_to_graph_both_directions():
    g = smiles_to_graph("CCO")
    assert g.edge_index.tolist() == [[0, 1, 1, 2], [1, 0, 2, 1]]


def test_no_atoms():
    with pytest.raises(InvalidSmiles, match="^no atoms$"):
        mol_to_graph(Chem.Mol())


# ------------------------------------------------------------ penalized logP


def _independent_penalized_logp(smi: str) -> tuple[float, float, float, int]:
    sys.path.insert(0, os.path.join(RDConfig.RDContribDir, "SA_Score"))
    try:
        import sascorer
    finally:
        sys.path.pop(0)
    mol = Chem.MolFromSmiles(smi)
    logp = Crippen.MolLogP(mol)
    sa = sascorer.calculateScore(mol)
    rings = [len(r) for r in mol.GetRingInfo().AtomRings()]
    largest = max(rings) if rings else 0
    ring_penalty = max(largest - 6, 0)
    return logp - sa - ring_penalty, logp, sa, ring_penalty


@pytest.mark.parametrize(
    "smi, penalty",
    [
        ("CCO", 0),
        ("c1ccccc1O", 0),
        ("CC(=O)Nc1ccc(O)cc1", 0),
        ("C1CCCCCCC1", 2),  # cyclooctane
        ("O=C1CCCCCCCCCCCCCCC1", 10),  # 16-membered macrocycle
        ("Cn1cnc2c1c(=O)n(C)c(=O)n2C", 0),
    ],
)
def test_penalized_logp_independent(smi, penalty):
    expected, logp, sa, ring_penalty = _independent_penalized_logp(smi)
    assert ring_penalty == penalty
    assert 1.0 <= sa <= 10.0
    got = penalized_logp(Chem.MolFromSmiles(smi))
    assert isinstance(got, float)
    assert got == pytest.approx(expected, abs=1e-9)
    assert got == pytest.approx(logp - sa - penalty, abs=1e-9)


def test_penalized_logp_ethanol_value():
    # Crippen logP of ethanol is -0.0014; SA score of ethanol is about 1.98
    v = penalized_logp(Chem.MolFromSmiles("CCO"))
    assert -2.2 < v < -1.8


# ------------------------------------------------------------------- splits


def _murcko(s):
    return MurckoScaffold.MurckoScaffoldSmiles(mol=Chem.MolFromSmiles(s), includeChirality=False)


def test_scaffold_split_hand_example():
    smiles = [
        "CCO",  # 0 acyclic -> scaffold ""
        "c1ccccc1C",  # 1 benzene
        "C1CCCCC1O",  # 2 cyclohexane
        "c1ccccc1O",  # 3 benzene
        "c1ccncc1C",  # 4 pyridine
        "c1ccccc1N",  # 5 benzene
        "C1CCCCC1N",  # 6 cyclohexane
        "c1ccccc1CC",  # 7 benzene
        "C1CCCCC1C",  # 8 cyclohexane
        "c1ccccc1Cl",  # 9 benzene
    ]
    # groups: benzene {1,3,5,7,9} (5), cyclohexane {2,6,8} (3), "" {0} (1), pyridine {4} (1)
    # cutoffs: train 8, val 1 -> benzene, cyclohexane -> train; "" (first index 0) -> val; pyridine -> test
    sp = scaffold_split(smiles)
    assert sp == {"train": [1, 2, 3, 5, 6, 7, 8, 9], "val": [0], "test": [4]}


def test_scaffold_split_properties():
    from siggate.data.nci5k import nci5k_source

    lines = open(nci5k_source()).read().splitlines()[:600]
    smiles = [ln.split("\t")[0] for ln in lines]
    smiles = [s for s in smiles if Chem.MolFromSmiles(s) is not None]
    n = len(smiles)
    a = scaffold_split(smiles)
    b = scaffold_split(list(smiles))
    assert a == b  # deterministic
    assert set(a) == {"train", "val", "test"}
    sets = {k: set(v) for k, v in a.items()}
    assert all(a[k] == sorted(a[k]) for k in a)
    assert not (sets["train"] & sets["val"]) and not (sets["train"] & sets["test"]) and not (sets["val"] & sets["test"])
    assert sets["train"] | sets["val"] | sets["test"] == set(range(n))
    assert len(a["train"]) <= 0.8 * n and len(a["val"]) <= 0.1 * n
    scaf = {k: {_murcko(smiles[i]) for i in v} for k, v in a.items()}
    assert not (scaf["train"] & scaf["val"])
    assert not (scaf["train"] & scaf["test"])
    assert not (scaf["val"] & scaf["test"])
    print("scaffold split of", n, "NCI molecules:", {k: len(v) for k, v in a.items()})


def test_scaffold_split_other_fractions():
    smiles = ["c1ccccc1" + "C" * k for k in range(5)] + ["C" * (k + 1) + "O" for k in range(5)]
    sp = scaffold_split(smiles, frac=(0.5, 0.5, 0.0))
    assert sp["train"] == [0, 1, 2, 3, 4] and sp["val"] == [5, 6, 7, 8, 9] and sp["test"] == []
    with pytest.raises(ValueError):
        scaffold_split(smiles, frac=(0.5, 0.2, 0.2))


def test_random_split():
    a = random_split(100, seed=3)
    assert a == random_split(100, seed=3)
    assert a != random_split(100, seed=4)
    assert [len(a[k]) for k in ("train", "val", "test")] == [80, 10, 10]
    assert sorted(a["train"] + a["val"] + a["test"]) == list(range(100))
    assert all(a[k] == sorted(a[k]) for k in a)
    b = random_split(7, frac=(0.6, 0.2, 0.2))
    assert sorted(b["train"] + b["val"] + b["test"]) == list(range(7))
    assert len(b["train"]) == 4 and len(b["val"]) == 1 and len(b["test"]) == 2
    assert random_split(0) == {"train": [], "val": [], "test": []}


def test_balanced_group_split_by_hand():
    from siggate.data.chem import split_by_groups

    # 20 items: one group of 12 ("big": > min(val, test) / 2 = 1), four pairs, no singletons
    keys = ["A"] * 12 + ["p", "p", "q", "q", "r", "r", "s", "s"]
    n = len(keys)
    sp = split_by_groups(keys, frac=(0.6, 0.2, 0.2), balanced=True, seed=0)
    # big groups are larger than min(val, test)/2 = 2 items: only "A" (the pairs are not)
    assert set(range(12)) <= set(sp["train"])
    order = np.random.default_rng(0).permutation(4)  # the pairs p q r s in first-index order, shuffled
    pairs = [[12, 13], [14, 15], [16, 17], [18, 19]]
    expect_train = list(range(12))
    expect_val, expect_test = [], []
    for j in order:  # greedy fill: train cutoff 12 is full, val takes 2 pairs (4), test the rest
        g = pairs[j]
        if len(expect_train) + 2 <= 0.6 * n:
            expect_train += g
        elif len(expect_val) + 2 <= 0.2 * n:
            expect_val += g
        else:
            expect_test += g
    assert sp == {"train": sorted(expect_train), "val": sorted(expect_val), "test": sorted(expect_test)}
    assert sp == split_by_groups(list(keys), frac=(0.6, 0.2, 0.2), balanced=True, seed=0)  # deterministic


def test_balanced_split_differs_from_size_order_but_keeps_groups_whole():
    from siggate.data.chem import split_by_groups

    rng = np.random.default_rng(1)
    keys = [f"g{int(k)}" for k in rng.zipf(1.6, size=400)]
    plain = split_by_groups(keys)
    bal = split_by_groups(keys, balanced=True, seed=0)
    assert plain != bal
    assert bal != split_by_groups(keys, balanced=True, seed=1)
    for sp in (plain, bal):
        assert sorted(sp["train"] + sp["val"] + sp["test"]) == list(range(400))
        where = {}
        for name, idx in sp.items():
            for i in idx:
                assert where.setdefault(keys[i], name) == name  # a group never spans two splits
    # the size order fills test with the rarest groups; the balanced one draws from all sizes
    count = {k: keys.count(k) for k in set(keys)}
    mean_group = {name: np.mean([count[keys[i]] for i in sp["test"]]) for name, sp in (("plain", plain), ("bal", bal))}
    assert mean_group["plain"] < 1.5 < mean_group["bal"], mean_group


def test_cip_chirality_is_one_graph_for_every_spelling_of_a_molecule():
    """RDKit's chirality tag is relative to the neighbours' order in the SMILES as written: S-alanine
    spelled two ways had two tags, one of them R-alanine's. With ``chirality="cip"`` the column
    holds R (1) and S (2); a stereocentre without a CIP label is "other" (3); "tag" stays OGB's."""
    import torch
    from ogb.utils import smiles2graph
    from rdkit import Chem

    from siggate.data.chem import mol_to_graph

    def col(smiles, chirality):
        return mol_to_graph(Chem.MolFromSmiles(smiles), chirality=chirality).x[:, 1].tolist()

    s1, s2, r = "C[C@H](N)C(=O)O", "N[C@@H](C)C(=O)O", "C[C@@H](N)C(=O)O"
    assert col(s1, "tag") != col(s2, "tag") and col(s2, "tag") == col(r, "tag")  # what OGB's features do
    assert col(s1, "cip") == col(s2, "cip") == [0, 2, 0, 0, 0, 0] and col(r, "cip") == [0, 1, 0, 0, 0, 0]
    # the same molecule written from another atom: the centre sits elsewhere, with the same label
    assert sorted(col("OC(=O)[C@H](C)N", "cip")) == sorted(col(s1, "cip"))
    cis, trans = "C[C@H]1CC[C@@H](O)CC1", "C[C@H]1CC[C@H](O)CC1"  # pseudo-asymmetric centres: r and s
    assert col(cis, "cip") != col(trans, "cip") and 3 not in col(cis, "cip")
    # every spelling of a molecule is one graph: the column in canonical atom order is one list
    for smiles in (s1, cis, trans, "C[C@H](O)[C@@H](N)C(=O)O", "C/C=C/[C@@H](Cl)c1ccccc1"):
        mol = Chem.MolFromSmiles(smiles)
        seen = set()
        for k in range(12):
            other = Chem.MolFromSmiles(Chem.MolToSmiles(mol, doRandom=True, canonical=False) if k else smiles)
            column = mol_to_graph(other, chirality="cip").x[:, 1].tolist()
            seen.add(tuple(v for _, v in sorted(zip(Chem.CanonicalRankAtoms(other), column))))
        assert len(seen) == 1, (smiles, seen)
    assert col("CCO", "cip") == [0, 0, 0]
    for smiles in (s1, cis, "C/C=C/C", "C/C=C\\C[C@H](N)O", "c1ccccc1O"):  # tag: OGB's; cip: OGB's bonds
        ogb = smiles2graph(smiles)
        mol = Chem.MolFromSmiles(smiles)
        assert torch.equal(mol_to_graph(mol).x, torch.as_tensor(ogb["node_feat"]))
        assert torch.equal(mol_to_graph(mol, chirality="cip").edge_attr, torch.as_tensor(ogb["edge_feat"]))
        assert torch.equal(mol_to_graph(mol).edge_attr, torch.as_tensor(ogb["edge_feat"]))  # the molecule unchanged
    with pytest.raises(ValueError, match="chirality must be 'tag' or 'cip', got 'rs'"):
        mol_to_graph(Chem.MolFromSmiles(s1), chirality="rs")


def test_rdkit_warnings_do_not_reach_stderr_while_reasons_still_do(capfd):
    """RDKit's warning log passed the error log's capture: '[H+].CC(=O)[O-]' printed "not removing
    hydrogen atom without neighbors" while a CSV was read, and drawing a radical ([C]) printed
    "unsupported number of radical electrons" twice. Both are quiet now; a failure's reason is
    still RDKit's own words."""
    from rdkit import Chem

    from siggate.data.chem import InvalidSmiles, parse_smiles
    from siggate.train.explain import draw_contributions

    capfd.readouterr()
    assert parse_smiles("[H+].CC(=O)[O-]").GetNumAtoms() == 5
    draw_contributions(Chem.MolFromSmiles("[C]"), [0.1], "x", "y")
    with pytest.raises(InvalidSmiles, match="unclosed ring"):
        parse_smiles("C1CC")
    out, err = capfd.readouterr()
    assert out == "" and err == ""
