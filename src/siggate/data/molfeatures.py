"""Molecule-level features for the readout, as chemprop's ``--features-generators`` gives them.

One vector per molecule, concatenated to the pooled graph embedding before the graph head
(:class:`siggate.nn.model.SigGateGT` with ``mol_features_dim=F``). The kinds
(:data:`siggate.options.MOL_FEATURES`, joined with ``+`` for a concatenation in that order):

=================  =====  ================================================================
kind               F      columns
=================  =====  ================================================================
``none``           0      nothing
``morgan_count``   2048   Morgan count fingerprint, radius 2, 2,048 bins
                          (:func:`siggate.data.fingerprints.morgan_counts`)
``rdkit2d``        217    RDKit's 2D descriptors, the names of :data:`RDKIT2D_NAMES`
                          (sorted; RDKit 2026.09's ``Descriptors._descList``)
=================  =====  ================================================================

Raw ``rdkit2d`` values are made finite and bounded, the same way for every molecule:
a descriptor that raises or returns NaN becomes 0 (chemprop's ``replace_nan_token``),
+-inf becomes +-:data:`CLIP_AT` compressed (below), and a magnitude above
:data:`CLIP_AT` (``1e4``; only ``Ipc`` exceeds it on drug-like molecules, up to ~1e11) is
compressed logarithmically, ``sign(x) * C * (1 + ln(|x| / C))`` (continuous, monotone,
slope 1 at ``C``), so a molecule with ``Ipc = 1e30`` gives ~6e5, not an overflow.
Everything is a pure function of the molecule: no randomness, no dependence on the batch.

:class:`FeatureScaler` standardizes the columns with the training rows' mean and standard
deviation; its :meth:`~FeatureScaler.state_dict` is plain tensors and strings, so it rides in
a ``weights_only`` checkpoint. RDKit and torch are imported inside the functions that use them.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from ..options import MOL_FEATURE_DIMS, mol_features_dim, parse_mol_features

__all__ = ["RDKIT2D_NAMES", "MORGAN_BITS", "MORGAN_RADIUS", "CLIP_AT", "MOLFEATURES_VERSION", "feature_dim",
           "compute", "cached_mol_features", "FeatureScaler"]

#: Morgan count fingerprint size and radius of ``morgan_count``.
MORGAN_BITS = 2048
MORGAN_RADIUS = 2
#: bump when the computed values change: every cache key of :func:`cached_mol_features` changes.
MOLFEATURES_VERSION = 1
#: magnitude above which raw descriptor values are compressed logarithmically (module docstring).
CLIP_AT = 1e4

#: the ``rdkit2d`` columns, in order: RDKit's descriptor names, sorted. Recorded here, not read
#: from the installed RDKit, so that F and the columns' meaning do not change with its version;
#: an RDKit that lacks one of them is refused by name.
RDKIT2D_NAMES: tuple[str, ...] = tuple("""
AvgIpc BCUT2D_CHGHI BCUT2D_CHGLO BCUT2D_LOGPHI BCUT2D_LOGPLOW BCUT2D_MRHI BCUT2D_MRLOW BCUT2D_MWHI
BCUT2D_MWLOW BalabanJ BertzCT Chi0 Chi0n Chi0v Chi1 Chi1n Chi1v Chi2n Chi2v Chi3n Chi3v Chi4n Chi4v
EState_VSA1 EState_VSA10 EState_VSA11 EState_VSA2 EState_VSA3 EState_VSA4 EState_VSA5 EState_VSA6
EState_VSA7 EState_VSA8 EState_VSA9 ExactMolWt FpDensityMorgan1 FpDensityMorgan2 FpDensityMorgan3
FractionCSP3 HallKierAlpha HeavyAtomCount HeavyAtomMolWt Ipc Kappa1 Kappa2 Kappa3 LabuteASA
MaxAbsEStateIndex MaxAbsPartialCharge MaxEStateIndex MaxPartialCharge MinAbsEStateIndex
MinAbsPartialCharge MinEStateIndex MinPartialCharge MolLogP MolMR MolWt NHOHCount NOCount
NumAliphaticCarbocycles NumAliphaticHeterocycles NumAliphaticRings NumAmideBonds
NumAromaticCarbocycles NumAromaticHeterocycles NumAromaticRings NumAtomStereoCenters
NumBridgeheadAtoms NumHAcceptors NumHDonors NumHeteroatoms NumHeterocycles NumRadicalElectrons
NumRotatableBonds NumSaturatedCarbocycles NumSaturatedHeterocycles NumSaturatedRings NumSpiroAtoms
NumUnspecifiedAtomStereoCenters NumValenceElectrons PEOE_VSA1 PEOE_VSA10 PEOE_VSA11 PEOE_VSA12
PEOE_VSA13 PEOE_VSA14 PEOE_VSA2 PEOE_VSA3 PEOE_VSA4 PEOE_VSA5 PEOE_VSA6 PEOE_VSA7 PEOE_VSA8
PEOE_VSA9 Phi RingCount SMR_VSA1 SMR_VSA10 SMR_VSA2 SMR_VSA3 SMR_VSA4 SMR_VSA5 SMR_VSA6 SMR_VSA7
SMR_VSA8 SMR_VSA9 SPS SlogP_VSA1 SlogP_VSA10 SlogP_VSA11 SlogP_VSA12 SlogP_VSA2 SlogP_VSA3
SlogP_VSA4 SlogP_VSA5 SlogP_VSA6 SlogP_VSA7 SlogP_VSA8 SlogP_VSA9 TPSA VSA_EState1 VSA_EState10
VSA_EState2 VSA_EState3 VSA_EState4 VSA_EState5 VSA_EState6 VSA_EState7 VSA_EState8 VSA_EState9
fr_Al_COO fr_Al_OH fr_Al_OH_noTert fr_ArN fr_Ar_COO fr_Ar_N fr_Ar_NH fr_Ar_OH fr_COO fr_COO2 fr_C_O
fr_C_O_noCOO fr_C_S fr_HOCCN fr_Imine fr_NH0 fr_NH1 fr_NH2 fr_N_O fr_Ndealkylation1
fr_Ndealkylation2 fr_Nhpyrrole fr_SH fr_aldehyde fr_alkyl_carbamate fr_alkyl_halide fr_allylic_oxid
fr_amide fr_amidine fr_aniline fr_aryl_methyl fr_azide fr_azo fr_barbitur fr_benzene
fr_benzodiazepine fr_bicyclic fr_diazo fr_dihydropyridine fr_epoxide fr_ester fr_ether fr_furan
fr_guanido fr_halogen fr_hdrzine fr_hdrzone fr_imidazole fr_imide fr_isocyan fr_isothiocyan
fr_ketone fr_ketone_Topliss fr_lactam fr_lactone fr_methoxy fr_morpholine fr_nitrile fr_nitro
fr_nitro_arom fr_nitro_arom_nonortho fr_nitroso fr_oxazole fr_oxime fr_para_hydroxylation fr_phenol
fr_phenol_noOrthoHbond fr_phos_acid fr_phos_ester fr_piperdine fr_piperzine fr_priamide
fr_prisulfonamd fr_pyridine fr_quatN fr_sulfide fr_sulfonamd fr_sulfone fr_term_acetylene
fr_tetrazole fr_thiazole fr_thiocyan fr_thiophene fr_unbrch_alkane fr_urea qed
""".split())

def feature_dim(kind: str) -> int:
    """F of a kind (``"none"`` -> 0, ``"morgan_count+rdkit2d"`` -> 2265;
    :data:`siggate.options.MOL_FEATURE_DIMS`).

    Raises:
        ValueError: an unknown kind (:func:`siggate.options.parse_mol_features`).
    """
    return mol_features_dim(kind)


def _as_mol(item: Any):
    from rdkit import Chem

    if isinstance(item, Chem.Mol):
        return item
    if not isinstance(item, str):
        raise TypeError(f"expected an RDKit Mol or a SMILES string, got {type(item).__name__}")
    from rdkit import rdBase

    with rdBase.BlockLogs():
        mol = Chem.MolFromSmiles(item.strip())
    if mol is None:
        raise ValueError(f"cannot compute molecule features of invalid SMILES {item!r}")
    return mol


def _morgan_count(mols: list) -> np.ndarray:
    from .fingerprints import morgan_counts

    return morgan_counts(mols, radius=MORGAN_RADIUS, size=MORGAN_BITS)


def _rdkit2d_functions() -> list:
    from rdkit.Chem import Descriptors

    known = dict(Descriptors._descList)
    missing = [n for n in RDKIT2D_NAMES if n not in known]
    if missing:
        import rdkit

        raise RuntimeError(f"RDKit {rdkit.__version__} lacks the descriptors {missing[:5]}"
                           f"{' ...' if len(missing) > 5 else ''} of model.mol_features=rdkit2d; "
                           "install RDKit >= 2026.09")
    return [known[n] for n in RDKIT2D_NAMES]


def _compress(x: np.ndarray) -> np.ndarray:
    """Finite, bounded values (float64 in, float64 out): NaN -> 0, then
    ``sign(x) * C * (1 + ln(|x| / C))`` where ``|x| > C`` (+-inf -> the float64 maximum first)."""
    x = np.nan_to_num(np.asarray(x, dtype=np.float64), nan=0.0)
    big = np.abs(x) > CLIP_AT
    with np.errstate(over="ignore"):
        mag = np.minimum(np.abs(x[big]), np.finfo(np.float64).max)
    x[big] = np.sign(x[big]) * CLIP_AT * (1.0 + np.log(mag / CLIP_AT))
    return x


def _rdkit2d(mols: list) -> np.ndarray:
    from rdkit import rdBase

    fns = _rdkit2d_functions()
    raw = np.empty((len(mols), len(fns)), dtype=np.float64)
    with rdBase.BlockLogs():
        for i, mol in enumerate(mols):
            for j, fn in enumerate(fns):
                try:
                    raw[i, j] = fn(mol)
                except Exception:  # noqa: BLE001 - RDKit raises many types; the value becomes NaN -> 0
                    raw[i, j] = math.nan
    return _compress(raw).astype(np.float32)


_COMPUTE = {"morgan_count": _morgan_count, "rdkit2d": _rdkit2d}
assert len(RDKIT2D_NAMES) == MOL_FEATURE_DIMS["rdkit2d"] and MORGAN_BITS == MOL_FEATURE_DIMS["morgan_count"]


def compute(mols_or_smiles: Sequence[Any], kind: str) -> np.ndarray:
    """Molecule features of each molecule, float32 ``[n, F]`` (F = :func:`feature_dim`).

    Args:
        mols_or_smiles: RDKit molecules or SMILES strings (parsed with RDKit's defaults).
        kind: a name of :data:`siggate.options.MOL_FEATURES` or a ``+``-joined combination,
            whose blocks are concatenated in the order written.

    Raises:
        ValueError: an unknown kind, or a SMILES that RDKit cannot parse.
    """
    kinds = parse_mol_features(kind)
    mols = [_as_mol(m) for m in mols_or_smiles]
    blocks = [_COMPUTE[k](mols) for k in kinds]
    if not blocks:
        return np.zeros((len(mols), 0), dtype=np.float32)
    return np.concatenate(blocks, axis=1) if len(blocks) > 1 else blocks[0]


def cached_mol_features(graphs: list, kind: str, dataset_key: str, cache_dir, progress: bool = False) -> list:
    """Set ``g.mol_x`` (float32 ``[1, F]``, raw: not scaled) on each graph from its ``smiles``,
    computed once and cached on disk; the graphs are modified in place and returned.

    The cache file ``cache_dir/molfeatures/<key>.pt`` (plain tensors, ``weights_only``) is
    keyed by ``dataset_key``, ``kind``, :data:`MOLFEATURES_VERSION` and a digest of the
    graphs' SMILES in order, so another kind or a changed dataset never reuses it. SMILES are
    parsed as the datasets parse them (:func:`siggate.data.chem.parse_smiles`, partially
    sanitized molecules allowed). ``kind="none"`` leaves the graphs untouched.

    Raises:
        ValueError: a graph without ``smiles`` (a dataset of typed atoms such as ZINC).
    """
    import hashlib
    from pathlib import Path

    import torch

    from .cache import cached
    from .chem import parse_smiles, quiet_rdkit

    if not parse_mol_features(kind):
        return graphs
    smiles = [getattr(g, "smiles", None) for g in graphs]
    if any(not isinstance(s, str) for s in smiles):
        raise ValueError(f"model.mol_features={kind!r} computes features from SMILES, and the graphs of "
                         f"{dataset_key} carry none; set model.mol_features=none for this dataset")
    digest = hashlib.sha256("\n".join(smiles).encode()).hexdigest()
    parts = {"dataset": str(dataset_key), "kind": kind, "version": MOLFEATURES_VERSION, "smiles": digest}

    def build() -> dict:
        from tqdm.auto import tqdm

        with quiet_rdkit():
            mols = [parse_smiles(s, allow_unsanitized=True)
                    for s in tqdm(smiles, desc=f"{kind} features", unit="mol", disable=not progress)]
        return {"mol_x": torch.from_numpy(compute(mols, kind))}

    x = cached(Path(cache_dir), "molfeatures", parts, build)["mol_x"]
    if x.shape != (len(graphs), feature_dim(kind)):
        raise RuntimeError(f"molecule-feature cache holds shape {tuple(x.shape)}, expected "
                           f"{(len(graphs), feature_dim(kind))}")
    for i, g in enumerate(graphs):
        g.mol_x = x[i : i + 1].clone()
    return graphs


class FeatureScaler:
    """Per-column standardization fitted on training rows: ``(x - mean) / std``.

    A column whose training standard deviation is 0 (or not finite) gets ``std = 1``, so it
    maps to ``x - mean`` (0 on the training rows) instead of dividing by zero. Statistics are
    computed in float64 (population std, ``ddof=0``); :meth:`transform` returns float32.

    Args:
        mean: ``[F]`` column means (use :meth:`fit` to compute them).
        std: ``[F]`` column standard deviations, all > 0.
    """

    def __init__(self, mean: Sequence[float], std: Sequence[float]) -> None:
        self.mean = np.asarray(mean, dtype=np.float64).reshape(-1)
        self.std = np.asarray(std, dtype=np.float64).reshape(-1)
        if self.mean.shape != self.std.shape:
            raise ValueError(f"mean has {self.mean.size} columns but std has {self.std.size}")
        if not (np.all(np.isfinite(self.std)) and np.all(self.std > 0)):
            raise ValueError("every std of a FeatureScaler must be finite and > 0")

    @property
    def dim(self) -> int:
        """F, the number of columns."""
        return int(self.mean.size)

    @classmethod
    def fit(cls, array) -> "FeatureScaler":
        """Fit on training rows ``[n, F]`` (n >= 1; a numpy array or a tensor)."""
        x = np.asarray(array, dtype=np.float64)
        if x.ndim != 2 or x.shape[0] == 0:
            raise ValueError(f"FeatureScaler.fit needs rows [n >= 1, F], got shape {tuple(x.shape)}")
        mean = x.mean(axis=0)
        std = x.std(axis=0)
        std = np.where(np.isfinite(std) & (std > 0), std, 1.0)
        return cls(mean, std)

    def transform(self, array) -> np.ndarray:
        """Scaled rows, float32 ``[n, F]``."""
        x = np.asarray(array, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self.dim:
            raise ValueError(f"FeatureScaler of {self.dim} columns got shape {tuple(x.shape)}")
        return ((x - self.mean) / self.std).astype(np.float32)

    def state_dict(self) -> dict:
        """``{"mean": float64 tensor [F], "std": float64 tensor [F]}``: loadable with
        ``torch.load(weights_only=True)``."""
        import torch

        return {"mean": torch.from_numpy(self.mean.copy()), "std": torch.from_numpy(self.std.copy())}

    @classmethod
    def from_state(cls, state: dict) -> "FeatureScaler":
        """The scaler of a :meth:`state_dict` (tensors, arrays or lists)."""
        def arr(v):
            return v.detach().cpu().numpy() if hasattr(v, "detach") else np.asarray(v)

        return cls(arr(state["mean"]), arr(state["std"]))

    def __repr__(self) -> str:
        return f"FeatureScaler(dim={self.dim})"
