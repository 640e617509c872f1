"""Property tests: featurization and prediction never crash and keep rows one to one.

CI runs a fixed, derandomized set of examples so that it never fails by chance. For a
deeper search, set ``SIGGATE_FUZZ_EXAMPLES`` (e.g. 2000): the examples are then drawn at
random and that many are tried per test.
"""

from __future__ import annotations

import csv
import os

import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from ogb.utils.features import get_atom_feature_dims, get_bond_feature_dims
from rdkit import Chem, rdBase

from siggate.data.chem import InvalidSmiles, smiles_to_graph
from test_predict import one_thread, shared_checkpoint

_DEEP = int(os.environ.get("SIGGATE_FUZZ_EXAMPLES", "0") or 0)
FUZZ = settings(max_examples=_DEEP or 80, derandomize=not _DEEP, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])

ATOM_DIMS = torch.tensor(get_atom_feature_dims())
BOND_DIMS = torch.tensor(get_bond_feature_dims())

#: characters SMILES are made of, so random strings often get deep into the parser
SMILES_ALPHABET = "CNOSPFIBrlcnospbH[]()=#$:/\\@+-.%0123456789*~&!^ \t"

#: pieces that bond on both sides, so any concatenation is a valid molecule
CHAIN_UNITS = ["C", "CC", "N", "O", "S", "C(=O)", "C(C)", "C(F)(F)", "C(Cl)", "c1ccc(cc1)", "C1CCC(CC1)",
               "[N+](C)(C)", "[Si](C)(C)", "C(=C)", "[C@@H](N)", "c1ccc(o1)", "C(O)", "[13CH2]", "P(=O)(O)"]
#: start groups (bond onward) and end groups (bond backward)
HEADS = ["", "C", "F", "Cl", "Br", "O", "N", "N#C", "OC(=O)", "[O-]", "[NH3+]", "c1ccccc1", "NS(=O)(=O)"]
TAILS = ["", "C", "F", "Cl", "Br", "I", "O", "N", "C#N", "C(=O)O", "[O-]", "[NH3+]", "c1ccccc1", "S(=O)(=O)N"]
#: whole extra fragments (salts, solvents, odd elements)
FRAGMENTS = ["[Na+]", "[Cl-]", "O", "[K+]", "[Og]", "[U]", "[Fe+2]", "CC(=O)[O-]", "[CH3]"]

#: any text, including non-ASCII and control characters (for the predictor, which refuses them)
random_text = st.one_of(
    st.text(max_size=40),
    st.text(alphabet=SMILES_ALPHABET, max_size=40),
)

@st.composite
def valid_molecules(draw) -> str:
    frags = []
    for _ in range(draw(st.integers(1, 3))):
        body = "".join(draw(st.lists(st.sampled_from(CHAIN_UNITS), min_size=1, max_size=8)))
        frags.append(draw(st.sampled_from(HEADS)) + body + draw(st.sampled_from(TAILS)))
    frags += draw(st.lists(st.sampled_from(FRAGMENTS), max_size=2))
    return ".".join(frags)


@pytest.fixture(scope="module")
def predictor(tmp_path_factory):
    from siggate.train.predict import SmilesPredictor

    return SmilesPredictor(shared_checkpoint(tmp_path_factory))


@pytest.fixture(autouse=True, scope="module")
def _single_thread():
    with one_thread():
        yield


def _check_graph(g, n_atoms: int) -> None:
    assert g.num_nodes == n_atoms >= 1
    assert g.x.dtype == torch.long and g.x.shape == (n_atoms, 9)
    assert ((g.x >= 0) & (g.x < ATOM_DIMS)).all()
    e = g.edge_index.shape[1]
    assert g.edge_index.shape == (2, e) and g.edge_attr.shape == (e, 3) and e % 2 == 0
    if e:
        assert int(g.edge_index.min()) >= 0 and int(g.edge_index.max()) < n_atoms
        assert ((g.edge_attr >= 0) & (g.edge_attr < BOND_DIMS)).all()


@FUZZ
@given(random_text)
# molecules that parse, so that the graph's checks run on every run (random text seldom parses)
@example(' CCO ')
@example('c1ccccc1O')
@example('[Na+].[Cl-]')
@example('C[C@H](N)C(=O)O')
@example('P')
def test_featurizing_random_text_raises_only_invalid_smiles(s):
    try:
        g = smiles_to_graph(s)
    except InvalidSmiles as exc:
        assert str(exc)  # always a reason
        return
    assert s.strip().isascii()  # RDKit would silently drop everything after a non-ASCII character
    with rdBase.BlockLogs():
        mol = Chem.MolFromSmiles(s.strip())
    assert mol is not None
    _check_graph(g, mol.GetNumAtoms())


@FUZZ
@given(valid_molecules())
def test_valid_molecules_featurize_and_predict(predictor, smiles):
    with rdBase.BlockLogs():
        mol = Chem.MolFromSmiles(smiles)
    assert mol is not None, smiles  # the generator only builds valid molecules
    _check_graph(smiles_to_graph(smiles), mol.GetNumAtoms())
    (row,) = predictor.predict_rows([smiles])
    assert row["error"] == "" and float(row["y"]) == float(row["y"])  # finite, not NaN


@FUZZ
@given(random_text)
# molecules that parse, so that the graph's checks run on every run (random text seldom parses)
@example(' CCO ')
@example('c1ccccc1O')
@example('[Na+].[Cl-]')
@example('C[C@H](N)C(=O)O')
@example('P')
def test_predictor_featurize_raises_only_invalid_smiles(predictor, s):
    from siggate.data.chem import InvalidSmiles

    try:
        g = predictor.featurize(s)
    except InvalidSmiles as exc:
        assert str(exc)
        return
    assert s.strip().isascii()
    with rdBase.BlockLogs():
        mol = Chem.MolFromSmiles(s.strip())
    _check_graph(g, mol.GetNumAtoms())
    assert g.rwse.shape == (g.num_nodes, predictor.rwse)


@FUZZ
@given(st.lists(st.one_of(random_text, valid_molecules(), st.none()), max_size=25))
def test_predict_rows_one_to_one(predictor, smiles):
    rows = predictor.predict_rows(smiles)
    assert len(rows) == len(smiles)
    assert [r["smiles"] for r in rows] == smiles  # same order, same strings
    for r in rows:
        assert set(r) == {"smiles", "y", "nearest_train_similarity", "outside_domain", "error"}
        assert (r["y"] == "") != (r["error"] == "")  # a prediction or a reason, never both


_NO_CONTROL = st.characters(blacklist_categories=("Cs", "Cc"))


@FUZZ
@given(st.lists(st.text(alphabet=_NO_CONTROL, max_size=20), min_size=1, max_size=30),
       st.integers(1, 7))
def test_read_smiles_csv_round_trip(tmp_path_factory, values, chunk):
    from siggate.train.predict import read_smiles

    path = tmp_path_factory.mktemp("rt") / "in.csv"
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "smiles"])
        for i, v in enumerate(values):
            w.writerow([i, v])
    chunks = list(read_smiles(path, chunk=chunk))
    assert all(1 <= len(c) <= chunk for c in chunks)
    assert [s for c in chunks for s in c] == [v.strip() for v in values]


@settings(max_examples=300, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False, width=32), st.floats(allow_nan=False, allow_infinity=False))
def test_written_numbers_read_back_as_the_numbers_written(as32, as64):
    """``number_text`` (every label and prediction siggate writes into a CSV) kept 7 significant
    digits: beside a large offset (12000.13586, stored as the float32 12000.1357...) it wrote
    12000.14, and metrics recomputed from test_predictions.csv differed from the run's. A 32-bit
    value reads back as the same 32-bit float (at most 9 digits), any other as the same 64-bit
    float; short values stay short."""
    import struct

    from siggate.files import number_text

    def f32(x: float) -> float:
        return struct.unpack("f", struct.pack("f", x))[0]

    text = number_text(as32)
    assert f32(float(text)) == as32 and len(text.replace("-", "").split("e")[0].replace(".", "").lstrip("0")) <= 9
    if f32(as64) != as64:
        assert float(number_text(as64)) == as64
    assert number_text(f32(12000.13586)) == "12000.136" and number_text(f32(0.1)) == "0.1"
    assert number_text(2.5) == "2.5" and number_text(-1000002.3) == "-1000002.3" and number_text(float("nan")) == "nan"
