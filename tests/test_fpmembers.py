"""The fingerprint members of issue 32 (``predictors/svr.py``: ``KernelSVR``; ``predictors/forest.py``:
``RandomForest``): against scikit-learn fitted directly, the val-only choice of options (the test
split is never read), missing labels, the Nyström path, and storage without pickle."""

from __future__ import annotations

import json
import pickle
import shutil

import numpy as np
import pytest
import torch
from rdkit import Chem
from rdkit.Chem import Descriptors
from torch_geometric.data import Data

from siggate.data.base import DataError, GraphDataset, TaskInfo
from siggate.data.fingerprints import morgan_counts
from siggate.predictors.base import Predictor, PredictorFileError, read_manifest
from siggate.predictors.forest import RandomForest, flatten_trees, forest_predict
from siggate.predictors.fpmember import ConstantModel
from siggate.predictors.kernel import minmax_kernel
from siggate.predictors.svr import KernelSVR, SVRGrid

SUBST = ["", "C", "O", "N", "Cl", "F", "C(=O)O", "OC", "C#N"]
#: 81 substituted benzenes and pyridines: small, varied, no data files needed
SMILES = [f"c1cc({a})ccc1{b}".replace("()", "") for a in SUBST for b in SUBST[:5]] + \
         [f"c1cnc({a})cc1{b}".replace("()", "") for a in SUBST for b in SUBST[:4]]
LOGP = np.array([Descriptors.MolLogP(Chem.MolFromSmiles(s)) for s in SMILES])
TPSA = np.array([Descriptors.TPSA(Chem.MolFromSmiles(s)) for s in SMILES])
ONE = {"radius": [2], "size": [1024], "C": [5.0], "epsilon": [0.05]}


class Forbidden(list):
    """A split that fails on any read: proof that ``fit`` never looks at it."""

    def _no(self, *a, **k):
        raise AssertionError("the test split was read")

    __iter__ = __getitem__ = __len__ = __bool__ = _no


def svr_member(grid=None, **options) -> KernelSVR:
    """The svr member on count Morgan fingerprints alone, fitted on the train rows only: the setting
    these tests pin against references (the kinds side by side and the refit have their own tests)."""
    grid = dict(grid) if isinstance(grid, dict) else {}
    grid.setdefault("fingerprint", ["morgan"])
    return KernelSVR(grid=grid, **{"refit": False, **options})


def grid_of(chosen: dict) -> dict:
    """The grid of one recorded candidate: each field's value, or the values it averaged over."""
    return {k: (v if isinstance(v, list) else [v]) for k, v in chosen.items()}


def rf_member(**options) -> RandomForest:
    """The rf member fitted on the train rows only (the refit has its own tests)."""
    return RandomForest(**{"refit": False, **options})


def make_ds(y: np.ndarray, task: str = "regression", split=(0.6, 0.2), test: list | None = None) -> GraphDataset:
    y = y.reshape(len(SMILES), -1)
    rng = np.random.default_rng(1)
    order = rng.permutation(len(SMILES))
    a, b = int(split[0] * len(order)), int(sum(split) * len(order))
    graphs = [Data(smiles=SMILES[i], y=torch.tensor(y[i : i + 1], dtype=torch.float32), idx=int(i)) for i in order]
    info = TaskInfo(name="toy", task=task, num_tasks=y.shape[1], metric="mae" if task == "regression" else "rocauc")
    return GraphDataset(info=info, splits={"train": graphs[:a], "val": graphs[a:b],
                                           "test": graphs[b:] if test is None else test})


def labels(graphs) -> np.ndarray:
    return np.concatenate([g.y.double().numpy() for g in graphs])


# ----------------------------------------------------------------------------- the SVR against scikit-learn


def test_svr_equals_sklearn_svr_on_a_precomputed_kernel():
    from sklearn.svm import SVR

    ds = make_ds(LOGP)
    member = svr_member(grid=ONE).fit(ds)
    assert isinstance(member, Predictor) and member.models_[0].mode == "svr"
    ytr = labels(ds.train)[:, 0]
    mean, std = ytr.mean(), ytr.std()
    xtr = morgan_counts([g.smiles for g in ds.train], 2, 1024).astype(np.float64)
    xte = morgan_counts([g.smiles for g in ds.test], 2, 1024).astype(np.float64)

    def k(a, b):  # Σmin/Σmax directly, dense
        return np.minimum(a[:, None], b[None]).sum(-1) / np.maximum(a[:, None], b[None]).sum(-1)

    ref = SVR(kernel="precomputed", C=5.0, epsilon=0.05).fit(k(xtr, xtr), (ytr - mean) / std)
    want = mean + std * ref.predict(k(xte, xtr))
    got = member.predict(ds.test)
    assert got.mean.shape == (len(ds.test), 1) and got.mean.dtype == torch.float32 and got.spread is None
    f, out = member.decision_and_output([g.smiles for g in ds.test])
    np.testing.assert_allclose(out[:, 0], want, rtol=0, atol=1e-9)
    assert member.models_[0].support.shape[0] == ref.support_.size


# ----------------------------------------------------------------------------- the forest against scikit-learn


@pytest.mark.parametrize("classify", [False, True])
def test_forest_traversal_equals_sklearn(classify):
    from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor

    rng = np.random.default_rng(0)
    x = (rng.integers(0, 4, size=(300, 30)) * (rng.random((300, 30)) < 0.4)).astype(np.float32)
    y = x[:, 0] * 2 - x[:, 3] + rng.normal(size=300)
    cls = RandomForestClassifier if classify else RandomForestRegressor
    est = cls(n_estimators=7, max_features=0.5, random_state=0).fit(x[:200], (y[:200] > 0) if classify else y[:200])
    want = est.predict_proba(x[200:])[:, 1] if classify else est.predict(x[200:])
    trees = flatten_trees(est.estimators_, classify)
    assert np.array_equal(forest_predict(x[200:], trees), want)
    import scipy.sparse as sp

    assert np.array_equal(forest_predict(sp.csr_matrix(x[200:]), trees), want)


def test_forest_member_equals_sklearn_forest_on_the_same_fingerprints():
    from sklearn.ensemble import RandomForestRegressor

    ds = make_ds(LOGP)
    member = rf_member(n_estimators=10, size=512, grid={"max_features": [0.5]}).fit(ds)
    ytr = labels(ds.train)[:, 0]
    mean, std = ytr.mean(), ytr.std()
    x = morgan_counts([g.smiles for g in ds.train], 2, 512, sparse=True).astype(np.float32).tocsc()  # as the member fits
    est = RandomForestRegressor(n_estimators=10, max_features=0.5, random_state=0).fit(x, (ytr - mean) / std)
    want = mean + std * est.predict(morgan_counts([g.smiles for g in ds.test], 2, 512))
    np.testing.assert_allclose(member.predict_array([g.smiles for g in ds.test])[:, 0], want, rtol=0, atol=1e-12)


def test_forest_max_features_given_as_an_integer_is_the_fraction():
    """``grid={"max_features": 1}`` (the documented fraction 1.0: every feature) reached scikit-learn as
    the integer 1, one feature per split, and predicted otherwise, silently; a bool is refused."""
    ds = make_ds(LOGP)
    whole = rf_member(n_estimators=5, size=512, grid={"max_features": 1.0}).fit(ds).predict_array([g.smiles for g in ds.test])
    member = rf_member(n_estimators=5, size=512, grid={"max_features": [1]})
    assert member.grid.max_features == (1.0,) and isinstance(member.grid.max_features[0], float)
    np.testing.assert_array_equal(member.fit(ds).predict_array([g.smiles for g in ds.test]), whole)
    with pytest.raises(ValueError, match=r"^max_features: True is out of range; allowed values: fractions in \(0, 1\]"):
        rf_member(grid={"max_features": True})


# ----------------------------------------------------------------------------- the val-only choice


SVR_GRID = {"radius": [2, 1], "size": [1024], "C": [5.0, 0.05], "epsilon": [0.05, 0.5]}


@pytest.mark.parametrize("make, candidates", [(lambda: svr_member(grid=SVR_GRID), 4),  # C averaged, not chosen
                                              (lambda: svr_member(grid=SVR_GRID, average=()), 8),
                                              (lambda: rf_member(n_estimators=5, size=512,
                                                                 grid={"max_features": [1.0, 0.2]}), 2)])
def test_choice_is_the_lowest_val_rmse_and_never_reads_test(make, candidates):
    ds = make_ds(LOGP)
    member = make().fit(ds)
    meta = member.models_[0].meta
    assert meta["choice"] == "val" and meta["n_val"] == len(ds.val)
    yv = labels(ds.val)[:, 0]
    # each candidate fitted alone, scored here: the member picked the lowest, and predicts as that one does
    best, best_score = None, np.inf
    for s in meta["scores"]:
        point = grid_of({k: v for k, v in s.items() if k != "val_score"})
        if isinstance(member, KernelSVR):
            single = svr_member(grid=point, average=member.average).fit(ds)
            pred = single.decision_and_output([g.smiles for g in ds.val])[1][:, 0]
        else:
            single = rf_member(n_estimators=5, size=512, grid=point).fit(ds)
            pred = single.predict_array([g.smiles for g in ds.val])[:, 0]
        rmse = float(np.sqrt(np.mean((pred - yv) ** 2)))
        assert rmse == pytest.approx(s["val_score"], rel=1e-12)
        if rmse < best_score:
            best, best_score = single, rmse
    assert len(meta["scores"]) == candidates
    assert torch.equal(member.predict(ds.val).mean, best.predict(ds.val).mean)
    # the test split: NaN labels change nothing, and a split that cannot be read at all is never read
    for test in ([Data(smiles=g.smiles, y=torch.full_like(g.y, float("nan"))) for g in ds.test], Forbidden()):
        other = make().fit(make_ds(LOGP, test=test))
        assert other.models_[0].meta == meta
        assert torch.equal(other.predict(ds.val).mean, member.predict(ds.val).mean)


@pytest.mark.parametrize("make", [lambda: svr_member(grid={"radius": [1, 2], "C": [1.0, 5.0]}),
                                  lambda: rf_member(n_estimators=5, size=512, grid={"max_features": [0.5, 1.0]})])
def test_target_without_val_labels_falls_back_to_the_first_grid_point(make):
    y = np.stack([LOGP, TPSA], axis=1)
    ds = make_ds(y)
    for g in ds.val:
        g.y[0, 1] = float("nan")
    member = make().fit(ds)
    first, second = member.models_
    assert first.meta["choice"] == "val" and len(first.meta["scores"]) > 1
    assert second.meta["choice"] == "fallback: no labelled val row" and second.meta["n_val"] == 0
    assert len(second.meta["scores"]) == 1 and second.meta["scores"][0]["val_score"] is None
    first_values = {k: v[0] for k, v in member.grid.to_dict().items()}
    # the svr's C is averaged over, not chosen: its fallback holds all the grid's C values
    assert second.meta["chosen"] == first_values | ({"C": [1.0, 5.0]} if isinstance(member, KernelSVR) else {})


# ----------------------------------------------------------------------------- missing labels, several targets


@pytest.mark.parametrize("make", [lambda: svr_member(grid={"radius": [1, 2], "size": [1024]}),
                                  lambda: rf_member(n_estimators=5, size=512)])
def test_each_target_learns_from_its_labelled_rows_only(make):
    y = np.stack([LOGP, TPSA], axis=1)
    rng = np.random.default_rng(3)
    y[rng.random(len(SMILES)) < 0.4, 1] = np.nan  # target 1: 40% missing, in every split
    ds = make_ds(y)
    member = make().fit(ds)
    # target 1 alone, on only its labelled rows: the same model
    keep = {s: [g for g in ds.splits[s] if np.isfinite(g.y[0, 1].item())] for s in ("train", "val", "test")}
    alone_ds = GraphDataset(info=TaskInfo(name="toy", task="regression", num_tasks=1, metric="mae"),
                            splits={s: [Data(smiles=g.smiles, y=g.y[:, 1:]) for g in v] for s, v in keep.items()})
    alone = make().fit(alone_ds)
    assert member.models_[1].meta == alone.models_[0].meta
    assert member.models_[1].meta["n_train"] == len(keep["train"]) < len(ds.train)
    got = member.predict(ds.test).mean
    assert torch.isfinite(got).all()
    assert torch.equal(got[:, 1:], alone.predict(ds.test).mean)


# ----------------------------------------------------------------------------- classification


def test_classification_probabilities_are_a_fitted_kernel_logistic_regression():
    y = (LOGP > np.median(LOGP)).astype(float)
    ds = make_ds(y, task="binary")
    member = svr_member(grid={"radius": [2], "size": [1024], "C": [2.0]}).fit(ds)
    m = member.models_[0]
    assert m.mode == "klr" and m.meta["basis"] == "exact"
    smiles = [g.smiles for g in ds.train]
    f, p = member.decision_and_output(smiles)
    assert np.all((p > 0) & (p < 1))
    np.testing.assert_allclose(p[:, 0], 1 / (1 + np.exp(-f[:, 0])), rtol=1e-12)
    # stationarity of C Σ logloss(y, Kβ + b) + ½ βᵀKβ: K(C(p - y) + β) = 0 and Σ(p - y) = 0
    x = morgan_counts(smiles, 2, 1024, sparse=True)
    k = minmax_kernel(x, x)
    assert np.array_equal(m.support.toarray(), x.toarray())  # every training row is a landmark
    r = p[:, 0] - labels(ds.train)[:, 0]
    assert np.abs(k @ (2.0 * r + m.coef)).max() < 1e-3 * np.abs(k @ m.coef).max()
    assert abs(r.sum()) < 1e-3 * len(r)
    # the forest's probabilities
    rf = rf_member(n_estimators=5, size=512).fit(ds).predict(ds.test).mean
    assert ((rf >= 0) & (rf <= 1)).all()


@pytest.mark.parametrize("make", [svr_member, lambda: rf_member(n_estimators=3)])
def test_one_class_target_is_the_smoothed_rate(make, tmp_path):
    y = np.stack([(LOGP > 1).astype(float), np.ones(len(SMILES))], axis=1)
    ds = make_ds(y, task="multilabel")
    member = make().fit(ds)
    got = member.predict(ds.test).mean
    n = len(ds.train)
    assert torch.allclose(got[:, 1], torch.full((len(ds.test),), (n + 0.5) / (n + 1)))
    assert member.models_[1].meta == {"why": "one class among the training rows"}
    member.save(tmp_path)
    assert torch.equal(type(member).load(tmp_path).predict(ds.test).mean, got)


@pytest.mark.parametrize("make", [lambda **o: svr_member(grid=ONE, **o), lambda **o: rf_member(n_estimators=3, **o)])
@pytest.mark.parametrize("task", ["regression", "binary"])
def test_a_constant_of_the_training_rows_is_learned_again_from_the_val_rows(make, task):
    """A target with one labelled training row (or one class there) and several val rows kept the
    training rows' constant after the refit, ignoring every val label: the val rows now teach it,
    as they teach every other target."""
    y = (LOGP > np.median(LOGP)).astype(float) if task == "binary" else LOGP.copy()
    ds = make_ds(y, task=task)
    train_pos = {g.idx for g in ds.train}
    keep = next(i for i in range(len(SMILES)) if i in train_pos)
    for g in ds.train:  # one labelled training row of this target; the val rows all labelled
        if g.idx != keep:
            g.y = torch.full_like(g.y, float("nan"))
    member = make(refit=True).fit(ds)
    m = member.models_[0]
    val_y = labels(ds.val)[:, 0]
    assert m.meta["refit"] == {"rows": "train+val", "n": 1 + len(ds.val)}
    assert m.meta["choice"] == "fallback: a constant on the training rows, fitted on the train and val rows"
    assert m.meta["train_only"] == {"why": "one labelled row among the training rows"}
    if task == "binary" and np.unique(np.append(val_y, y[keep])).size < 2:
        pytest.fail("the toy data must give the val rows both classes")
    assert not isinstance(m, ConstantModel)  # two classes (or many rows) among train+val: a fitted model
    twin = make()  # the same member fitted on those rows as its training rows, without val rows
    both = make_ds(y, task=task)
    rows = [g for g in both.train if g.idx == keep] + list(both.val)
    both.splits.update(train=rows, val=[])
    np.testing.assert_allclose(member.predict(ds.test).mean.numpy(), twin.fit(both).predict(both.test).mean.numpy(),
                               rtol=1e-6, atol=1e-9)
    train_only = (y[keep] + 0.5) / 2 if task == "binary" else y[keep]  # the constant of the one training row
    np.testing.assert_allclose(member.held_out_["val"][:, 0], train_only)  # what the weights read: out of sample
    if task == "binary":  # one class among the train and val rows too: their smoothed rate
        ones = make_ds(np.ones(len(SMILES)), task="binary")
        m = make(refit=True).fit(ones).models_[0]
        n = len(ones.train) + len(ones.val)
        assert isinstance(m, ConstantModel) and m.value == pytest.approx((n + 0.5) / (n + 1))
        assert m.meta == {"why": "one class among the train and val rows",
                          "train_only": {"why": "one class among the training rows"},
                          "refit": {"rows": "train+val", "n": n}}


# ----------------------------------------------------------------------------- large sets: Nyström


def test_above_exact_max_the_svr_fits_ridge_on_nystrom_features():
    from sklearn.linear_model import Ridge

    ds = make_ds(LOGP)
    member = svr_member(grid={"radius": [2], "size": [1024], "C": [5.0]}, exact_max=10, landmarks=12, seed=4).fit(ds)
    m = member.models_[0]
    assert m.mode == "ridge" and m.meta["basis"] == "nystrom 12" and m.support.shape[0] == 12
    # independently: the same 12 landmarks' Φ, then scikit-learn's ridge with alpha = 1/C
    ytr = labels(ds.train)[:, 0]
    mean, std = ytr.mean(), ytr.std()
    x = morgan_counts([g.smiles for g in ds.train], 2, 1024)
    pick = np.sort(np.random.default_rng([4, 0]).choice(len(ds.train), size=12, replace=False))
    assert np.array_equal(m.support.toarray(), x[pick])
    kmm = minmax_kernel(x[pick], x[pick])
    s, u = np.linalg.eigh(kmm)
    w = u[:, s > 1e-10 * s.max()] / np.sqrt(s[s > 1e-10 * s.max()])
    xt = morgan_counts([g.smiles for g in ds.test], 2, 1024)
    ridge = Ridge(alpha=1 / 5.0).fit(minmax_kernel(x, x[pick]) @ w, (ytr - mean) / std)
    want = mean + std * ridge.predict(minmax_kernel(xt, x[pick]) @ w)
    np.testing.assert_allclose(member.decision_and_output([g.smiles for g in ds.test])[1][:, 0], want, atol=1e-8)
    # more landmarks than rows is refused by the draw only above exact_max; classification uses them too
    yb = (LOGP > np.median(LOGP)).astype(float)
    klr = svr_member(grid={"radius": [2], "size": [1024], "C": [2.0]}, exact_max=10, landmarks=12).fit(make_ds(yb, "binary"))
    assert klr.models_[0].meta["basis"] == "nystrom 12" and klr.models_[0].support.shape[0] == 12


def test_averaged_c_is_the_mean_of_the_models_fitted_at_each_c(tmp_path):
    """The default averages the svr over the grid's C values: against scikit-learn SVRs fitted at
    each C on the dense MinMax kernel (exact), and as the mean decision of single-C members for
    Nyström ridge and kernel logistic regression, each one model over the union of supports."""
    from sklearn.svm import SVR

    assert KernelSVR().average == ("C",)
    ds = make_ds(LOGP)
    grid = {"fingerprint": ["morgan"], "radius": [2], "size": [1024], "C": [5.0, 0.3], "epsilon": [0.05]}
    member = svr_member(grid=grid).fit(ds)
    ytr = labels(ds.train)[:, 0]
    mean, std = ytr.mean(), ytr.std()
    xtr = morgan_counts([g.smiles for g in ds.train], 2, 1024).astype(np.float64)
    xte = morgan_counts([g.smiles for g in ds.test], 2, 1024).astype(np.float64)

    def k(a, b):
        return np.minimum(a[:, None], b[None]).sum(-1) / np.maximum(a[:, None], b[None]).sum(-1)

    refs = [SVR(kernel="precomputed", C=c, epsilon=0.05).fit(k(xtr, xtr), (ytr - mean) / std) for c in (5.0, 0.3)]
    want = mean + std * np.mean([r.predict(k(xte, xtr)) for r in refs], axis=0)
    smiles = [g.smiles for g in ds.test]
    np.testing.assert_allclose(member.predict_array(smiles)[:, 0], want, rtol=0, atol=1e-9)
    m = member.models_[0]
    assert m.meta["chosen"]["C"] == [5.0, 0.3] and len(m.meta["scores"]) == 1
    assert m.support.shape[0] == np.union1d(refs[0].support_, refs[1].support_).size
    yb = (LOGP > np.median(LOGP)).astype(float)
    for data, options in ((ds, {"exact_max": 10, "landmarks": 12}), (make_ds(yb, "binary"), {})):
        avg = svr_member(grid=grid, **options).fit(data)
        singles = [svr_member(grid={**grid, "C": [c]}, **options).fit(data) for c in (5.0, 0.3)]
        assert avg.models_[0].mode == ("ridge" if options else "klr")
        np.testing.assert_allclose(avg.decision_and_output(smiles)[0],
                                   np.mean([s.decision_and_output(smiles)[0] for s in singles], axis=0), atol=1e-9)
    # a member saved before averaging existed loads as one that chose C (its model is what it stored)
    member.save(tmp_path / "m")
    doc = json.loads((tmp_path / "m" / "predictor.json").read_text())
    assert doc["options"]["average"] == ["C"]
    del doc["options"]["average"]
    (tmp_path / "m" / "predictor.json").write_text(json.dumps(doc))
    back = KernelSVR.load(tmp_path / "m")
    assert back.average == () and np.array_equal(back.predict_array(smiles), member.predict_array(smiles))
    # the constructors apply the rules the config applies (one home: the options dataclasses' check)
    for build, message in ((lambda: KernelSVR(average=("radius",)), "average: 'radius' is not allowed. Allowed values: "
                            "C, epsilon (the options that keep the kernel)"),
                           (lambda: KernelSVR(landmarks=0), "landmarks: 0 is out of range; allowed values: >= 1."),
                           (lambda: KernelSVR({"C": [0.0]}), "C: 0.0 is out of range; allowed values: > 0."),
                           (lambda: KernelSVR({"fingerprint": ["morgan+path", "path+morgan"]}),
                            "fingerprint: ['morgan+path', 'path+morgan'] names one kernel twice"),
                           (lambda: RandomForest(0), "n_estimators: 0 is out of range; allowed values: >= 1."),
                           (lambda: RandomForest(radius=-1), "radius: -1 is out of range; allowed values: >= 0."),
                           (lambda: RandomForest(size=10**12), "size: 1000000000000 is out of range; allowed values: 1 "
                            "to 1048576."),
                           (lambda: KernelSVR({"size": [2048, 10**12]}), "size: 1000000000000 is out of range; "
                            "allowed values: 1 to 1048576."),
                           (lambda: RandomForest(grid={"max_features": [1.5]}), "max_features: 1.5 is out of range")):
        with pytest.raises(ValueError) as caught:
            build()
        assert str(caught.value).startswith(message)
    assert KernelSVR(average="epsilon").average == ("epsilon",)  # a bare name, not its letters


# ----------------------------------------------------------------------------- storage


@pytest.mark.parametrize("task", ["regression", "multilabel"])
@pytest.mark.parametrize("make", [lambda: svr_member(grid={"radius": [1, 2], "C": [1.0, 5.0]}),
                                  lambda: svr_member(grid={"C": [1.0]}, exact_max=10, landmarks=8),
                                  lambda: rf_member(n_estimators=4, size=1024)])
def test_save_load_round_trip_predicts_exactly_the_same(tmp_path, task, make):
    y = np.stack([LOGP, TPSA], axis=1)
    if task != "regression":
        y = (y > np.median(y, axis=0)).astype(float)
    y[::3, 1] = np.nan
    ds = make_ds(y, task=task)
    member = make().fit(ds)
    before = member.predict(ds.test).mean
    member.save(tmp_path / "m")
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == ["arrays.pt", "predictor.json"]
    doc = read_manifest(tmp_path / "m")
    strict = json.loads((tmp_path / "m" / "predictor.json").read_text(),
                        parse_constant=lambda c: pytest.fail(f"non-JSON constant {c} in the manifest"))
    assert strict == doc
    assert doc["kind"] == member.kind and doc["info"]["task"] == task and len(doc["targets"]) == 2
    loaded = type(member).load(tmp_path / "m")
    assert repr(loaded) == repr(member)
    assert torch.equal(loaded.predict(ds.test).mean, before)
    assert [m.meta for m in loaded.models_] == [m.meta for m in member.models_]
    with pytest.raises(PredictorFileError, match="holds a"):
        (RandomForest if isinstance(member, KernelSVR) else KernelSVR).load(tmp_path / "m")


def forge(folder) -> None:
    """Give ``folder``'s manifest the SHA-256 of its edited ``arrays.pt``: a crafted folder whose
    manifest agrees with it (or one saved before the digests), which the loading's own checks refuse."""
    from siggate.files import file_digest

    doc = json.loads((folder / "predictor.json").read_text())
    doc["sha256"]["arrays.pt"] = file_digest(folder / "arrays.pt")
    (folder / "predictor.json").write_text(json.dumps(doc))


def test_a_file_of_another_run_is_refused_by_its_digest(tmp_path):
    """Another run's arrays.pt copied into a member folder (fitted on other labels, or of a binary
    run) loaded and predicted other numbers without a word (helper-168): the manifest keeps each
    file's SHA-256. A manifest saved before the digests loads as it did."""
    ds, other = make_ds(LOGP), make_ds(LOGP[::-1].copy())
    svr_member(grid=ONE).fit(ds).save(tmp_path / "a")
    svr_member(grid=ONE).fit(other).save(tmp_path / "b")
    shutil.copy(tmp_path / "b" / "arrays.pt", tmp_path / "a" / "arrays.pt")
    with pytest.raises(PredictorFileError, match=r"^.*arrays\.pt: not the file its predictor\.json was saved with "
                                                 r"\(another SHA-256\): a file of another run copied in, or one edited: "
                                                 r"copy the whole run folder as it was, or retrain it$"):
        KernelSVR.load(tmp_path / "a")
    doc = json.loads((tmp_path / "b" / "predictor.json").read_text())
    del doc["sha256"]  # (saved before the digests)
    (tmp_path / "b" / "predictor.json").write_text(json.dumps(doc))
    assert torch.equal(KernelSVR.load(tmp_path / "b").predict(ds.test).mean,
                       svr_member(grid=ONE).fit(other).predict(ds.test).mean)
    doc["sha256"] = {"../a/arrays.pt": "0"}
    (tmp_path / "b" / "predictor.json").write_text(json.dumps(doc))
    with pytest.raises(PredictorFileError, match=r"'\.\./a/arrays\.pt' is not a file of the folder"):
        KernelSVR.load(tmp_path / "b")


class Payload:
    def __reduce__(self):
        import os

        return (os.system, ("touch PWNED_BY_PICKLE",))


@pytest.mark.parametrize("make", [lambda: svr_member(grid=ONE), lambda: rf_member(n_estimators=2, size=256)])
def test_a_crafted_pickle_in_the_member_folder_is_refused_unrun(tmp_path, monkeypatch, make):
    monkeypatch.chdir(tmp_path)
    ds = make_ds(LOGP)
    make().fit(ds).save(tmp_path / "m")
    arrays = tmp_path / "m" / "arrays.pt"
    torch.save({"t0.coef": Payload()}, arrays)  # a torch file whose pickle runs code
    with pytest.raises(PredictorFileError, match="arrays.pt: not the file its predictor.json was saved with"):
        type(make()).load(tmp_path / "m")  # (refused by its digest before it is read)
    forge(tmp_path / "m")  # (a crafted manifest agrees: the safe loading refuses it)
    with pytest.raises(PredictorFileError, match="refused to load .*arrays.pt.*Nothing in it was run"):
        type(make()).load(tmp_path / "m")
    arrays.write_bytes(pickle.dumps(Payload()))  # a bare pickle
    forge(tmp_path / "m")
    with pytest.raises(PredictorFileError, match="refused to load .*arrays.pt.*Nothing in it was run"):
        type(make()).load(tmp_path / "m")
    assert not (tmp_path / "PWNED_BY_PICKLE").exists()
    torch.save([torch.zeros(2)], arrays)  # safe to load, but no dict of arrays: was an AttributeError traceback
    forge(tmp_path / "m")
    with pytest.raises(PredictorFileError, match="not a siggate arrays file \\(it holds a list, not a dict of arrays\\)"):
        type(make()).load(tmp_path / "m")


def test_corrupt_arrays_are_refused_by_name(tmp_path):
    ds = make_ds(LOGP)
    rf_member(n_estimators=2, size=256).fit(ds).save(tmp_path / "rf")
    from siggate.predictors.base import load_arrays, save_arrays

    arrays = load_arrays(tmp_path / "rf" / "arrays.pt")
    arrays["t0.left"][0] = 0  # the root points to itself: a cycle that would never end
    arrays["t0.left"][1] = 10**9
    save_arrays(tmp_path / "rf" / "arrays.pt", arrays)
    forge(tmp_path / "rf")
    with pytest.raises(PredictorFileError, match="left points outside"):
        RandomForest.load(tmp_path / "rf")
    svr_member(grid=ONE).fit(ds).save(tmp_path / "svr")
    arrays = load_arrays(tmp_path / "svr" / "arrays.pt")
    arrays["t0.coef"] = arrays["t0.coef"][:-1]
    save_arrays(tmp_path / "svr" / "arrays.pt", arrays)
    forge(tmp_path / "svr")
    with pytest.raises(PredictorFileError, match="coefficients for"):
        KernelSVR.load(tmp_path / "svr")


@pytest.mark.parametrize("task", ["regression", "binary"])
def test_damaged_numbers_are_refused_at_load_not_predicted(tmp_path, task):
    """A tampered member loaded and predicted with exit 0: a forest's NaN thresholds changed the
    numbers, leaf values of 5 were 'probabilities' of a binary run, a regression svr read as a
    klr (or back) changed them too; NaN coefficients, y_std, a negative radius, negative counts
    or a forest of no tree failed every row later without naming the file."""
    from siggate.predictors.base import load_arrays, read_manifest, save_arrays

    y = LOGP if task == "regression" else (LOGP > np.median(LOGP)).astype(float)
    ds = make_ds(y, task=task)
    rf_member(n_estimators=2, size=256).fit(ds).save(tmp_path / "rf")
    svr_member(grid=ONE).fit(ds).save(tmp_path / "svr")
    assert np.isfinite(RandomForest.load(tmp_path / "rf").predict(ds.test).mean.numpy()).all()

    def damaged(kind, arrays=None, target=None):
        folder = tmp_path / f"{kind}-{len(list(tmp_path.iterdir()))}"  # (one copy per case)
        shutil.copytree(tmp_path / kind, folder)
        if arrays:
            a = load_arrays(folder / "arrays.pt")
            arrays(a)
            save_arrays(folder / "arrays.pt", a)
            forge(folder)
        if target:
            doc = read_manifest(folder)
            target(doc["targets"][0])
            (folder / "predictor.json").write_text(json.dumps(doc))
        return folder

    def nan_split(a):
        left = a["t0.left"]  # (tensors, as load_arrays returns them)
        a["t0.threshold"][int(torch.nonzero(left != torch.arange(left.numel()))[0])] = float("nan")

    cases = [(RandomForest, damaged("rf", nan_split), "threshold holds NaN, or inf at a split"),
             (RandomForest, damaged("rf", lambda a: a.update({"t0.roots": a["t0.roots"][:0]})), "has no tree"),
             (RandomForest, damaged("rf", target=lambda t: t.update(radius=-1)), "stored radius -1 is not an integer >= 0"),
             # (loaded, then every row failed in an OverflowError)
             (KernelSVR, damaged("svr", target=lambda t: t.update(size=10**12)),
              "stored size 1000000000000 is not an integer from 1 to 1048576"),
             (KernelSVR, damaged("svr", lambda a: a["t0.coef"].__setitem__(0, np.nan)), "t0.coef holds NaN or inf"),
             (KernelSVR, damaged("svr", lambda a: a["t0.support.counts"].__setitem__(0, -3)), "are inconsistent"),
             (KernelSVR, damaged("svr", target=lambda t: t.update(y_std=float("nan"))), "stored y_std nan is not a positive"),
             (KernelSVR, damaged("svr", target=lambda t: t.update(mode="klr" if task == "regression" else "svr")),
              f"does not fit a {task} task")]
    if task == "binary":
        cases.append((RandomForest, damaged("rf", lambda a: a["t0.value"].__setitem__(slice(None), 5.0)),
                      "t0.value holds values outside \\[0, 1\\]"))
    for cls, folder, message in cases:
        with pytest.raises(PredictorFileError, match=message):
            cls.load(folder)


def test_grid_points_hold_averaged_fields_whole_in_grid_order():
    grid = SVRGrid(fingerprint=("morgan",), radius=(2, 1), size=(2048,), C=(5.0, 20.0), epsilon=(0.05,))
    assert [(p["radius"], p["C"]) for p in grid.points()] == [(2, 5.0), (2, 20.0), (1, 5.0), (1, 20.0)]
    assert [(p["radius"], p["C"]) for p in grid.points(("C",))] == [(2, [5.0, 20.0]), (1, [5.0, 20.0])]
    assert KernelSVR(grid=grid).candidates() == grid.points(("C",)) and grid.fallback() == grid.points()[0]
    assert KernelSVR(grid=grid, average=()).candidates() == grid.points()
    first, second = grid.points(("C",))
    assert first["C"] is not second["C"]  # each point owns its list
    with pytest.raises(ValueError, match=r"cannot average over \['c'\]: SVRGrid has the fields"):
        grid.points(("c",))


# ----------------------------------------------------------------------------- what is refused


def test_refusals_name_the_cause():
    with pytest.raises(ValueError, match=r"unknown grid option\(s\) \['gamma'\]"):
        svr_member(grid={"gamma": [1.0]})
    with pytest.raises(ValueError, match=r"^C: give at least one value"):
        SVRGrid(C=())
    ds = make_ds(LOGP)
    ds.splits["train"][0].smiles = None
    with pytest.raises(DataError, match="graph 0 carries none"):  # DataError: the CLI's one line, exit 2
        rf_member(n_estimators=1).fit(ds)
    info = TaskInfo(name="mc", task="multiclass", num_tasks=1, metric="accuracy", num_classes=3)
    with pytest.raises(DataError, match="not 'multiclass'"):
        svr_member().fit(GraphDataset(info=info, splits={"train": [], "val": [], "test": []}))
    node = TaskInfo(name="nodes", task="regression", num_tasks=1, metric="mae", level="node")
    with pytest.raises(DataError, match="the rf member predicts one value per molecule; nodes is a node-level task"):
        rf_member().fit(GraphDataset(info=node, splits={"train": [], "val": [], "test": []}))
    with pytest.raises(DataError, match="needs 0/1 labels"):
        svr_member(grid=ONE).fit(make_ds(LOGP, task="binary"))
    with pytest.raises(RuntimeError, match="call fit"):
        rf_member().predict(ds.test)


# ----------------------------------------------------------------------------- kinds side by side, and the refit


def _rdkit_counts(smiles: list[str], kind: str) -> np.ndarray:
    """Count fingerprints (1,024 bins) straight from RDKit's generators: the independent reference."""
    from rdkit.Chem import rdFingerprintGenerator as gen

    g = {"morgan": lambda: gen.GetMorganGenerator(radius=2, fpSize=1024),
         "atompair": lambda: gen.GetAtomPairGenerator(fpSize=1024),
         "torsion": lambda: gen.GetTopologicalTorsionGenerator(fpSize=1024)}[kind]()
    return np.stack([g.GetCountFingerprintAsNumPy(Chem.MolFromSmiles(s)) for s in smiles]).astype(np.float64)


def _dense_minmax(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.minimum(a[:, None], b[None]).sum(-1) / np.maximum(a[:, None], b[None]).sum(-1)


def test_svr_on_several_kinds_is_an_svr_on_the_mean_of_their_minmax_kernels():
    from sklearn.svm import SVR

    kinds = ("morgan", "atompair", "torsion")
    ds = make_ds(LOGP)
    member = svr_member(grid={**ONE, "fingerprint": ["+".join(kinds)]}).fit(ds)
    ytr = labels(ds.train)[:, 0]
    mean, std = ytr.mean(), ytr.std()
    tr, te = [g.smiles for g in ds.train], [g.smiles for g in ds.test]
    k_tr = sum(_dense_minmax(_rdkit_counts(tr, k), _rdkit_counts(tr, k)) for k in kinds) / 3
    k_te = sum(_dense_minmax(_rdkit_counts(te, k), _rdkit_counts(tr, k)) for k in kinds) / 3
    want = mean + std * SVR(kernel="precomputed", C=5.0, epsilon=0.05).fit(k_tr, (ytr - mean) / std).predict(k_te)
    np.testing.assert_allclose(member.predict(ds.test).mean[:, 0].double().numpy(), want, rtol=0, atol=1e-5)
    model = member.models_[0]
    assert model.fingerprint == "morgan+atompair+torsion" and model.support.shape[1] == 3 * 1024
    # the kinds differ from Morgan alone: the kernel is not Morgan's under another name
    alone = svr_member(grid=ONE).fit(ds).predict(ds.test).mean
    assert float((alone - member.predict(ds.test).mean).abs().max()) > 1e-3


def test_the_default_svr_averages_five_kinds_of_kernel_and_refits():
    member = KernelSVR()
    assert member.grid.fingerprint == ("morgan+atompair+torsion+fmorgan+path",) and member.refit
    assert RandomForest().refit


@pytest.mark.parametrize("make", [lambda refit: svr_member(grid={"radius": [1, 2], "C": [1.0, 5.0]}, refit=refit),
                                  lambda refit: rf_member(n_estimators=5, size=512, refit=refit,
                                                          grid={"max_features": [0.5, 1.0]})])
def test_refit_learns_the_val_chosen_option_on_train_and_val_and_keeps_out_of_sample_val(make, tmp_path):
    from siggate.predictors.base import out_of_sample

    ds = make_ds(np.stack([LOGP, TPSA], 1))
    once, refit = make(False).fit(ds), make(True).fit(ds)
    # the held-out val predictions are the train-only fit's; the kept choice is the same
    np.testing.assert_array_equal(refit.held_out_["val"], once.predict_array([g.smiles for g in ds.val]))
    assert out_of_sample(refit, "val", ds.val).mean.numpy().tolist() == \
        torch.from_numpy(refit.held_out_["val"].astype(np.float32)).numpy().tolist()
    for j in range(2):
        assert refit.models_[j].meta["chosen"] == once.models_[j].meta["chosen"]
        assert refit.models_[j].meta["refit"] == {"rows": "train+val", "n": len(ds.train) + len(ds.val)}
    # the test predictions are those of the chosen option fitted on train+val alone
    merged = GraphDataset(info=ds.info, splits={"train": list(ds.train) + list(ds.val), "val": [], "test": ds.test})
    for j in range(2):
        point = grid_of(once.models_[j].meta["chosen"])
        alone = (svr_member(grid=point) if refit.kind == "svr" else
                 rf_member(n_estimators=5, size=512, grid=point)).fit(merged)
        np.testing.assert_allclose(refit.predict(ds.test).mean[:, j].numpy(), alone.predict(ds.test).mean[:, j].numpy(),
                                   rtol=0, atol=1e-6)
    assert float((refit.predict(ds.test).mean - once.predict(ds.test).mean).abs().max()) > 1e-4
    # saved and loaded: the same predictions and the same held-out val predictions
    refit.save(tmp_path / "m")
    back = type(refit).load(tmp_path / "m")
    np.testing.assert_array_equal(back.held_out_["val"], refit.held_out_["val"])
    assert torch.equal(back.predict(ds.test).mean, refit.predict(ds.test).mean)
    with pytest.raises(ValueError, match="out-of-sample val predictions for 3 molecules"):
        out_of_sample(back, "val", ds.val[:3])


def test_a_combination_weighs_refitted_members_by_their_out_of_sample_val_predictions():
    from siggate.predictors.combine import Combination, simplex_least_squares

    ds = make_ds(LOGP)
    members = [svr_member(grid=ONE, refit=True).fit(ds), rf_member(n_estimators=5, size=512, refit=True).fit(ds)]
    combo = Combination(members, "val").fit_weights(ds)
    y = labels(ds.val)[:, 0]
    want = simplex_least_squares(np.stack([m.held_out_["val"][:, 0] for m in members], 1), y)
    np.testing.assert_allclose(combo.weights_[:, 0], want, atol=1e-9)
    # the weights follow the kept predictions, not a fresh predict: a perfect kept rf takes all the weight
    members[1].held_out_["val"] = y[:, None].copy()
    np.testing.assert_allclose(Combination(members, "val").fit_weights(ds).weights_[:, 0], [0.0, 1.0], atol=1e-6)


def test_a_refit_that_crosses_exact_max_records_the_basis_it_was_fitted_on():
    """Train rows at ``exact_max`` fit the exact SVR; train+val rows above it refit on Nyström
    landmarks, and the saved meta says so (it kept the train-only fit's ``exact`` before)."""
    ds = make_ds(LOGP)
    member = svr_member(grid={"radius": [2], "size": [1024], "C": [5.0]}, exact_max=len(ds.train), landmarks=20,
                        refit=True).fit(ds)
    m = member.models_[0]
    assert m.mode == "ridge" and m.support.shape[0] == 20
    assert m.meta["basis"] == "nystrom 20" and m.meta["refit"]["n"] == len(ds.train) + len(ds.val)
    assert m.meta["choice"] == "val" and m.meta["n_train"] == len(ds.train)  # the selection record is the val choice's


@pytest.mark.parametrize("make", [lambda: svr_member(grid=ONE), lambda: rf_member(n_estimators=3, size=512)])
def test_a_member_saved_before_kinds_and_refit_loads_as_it_was_fitted(make, tmp_path):
    """A folder written before fingerprint kinds and the refit (no ``fingerprint`` per target, no
    ``refit`` option, no ``held_out.val`` array) loads, predicts with Morgan counts as before, says
    it was not refitted, and answers out-of-sample val queries with its own (train-only) predictions."""
    from siggate.predictors.base import load_arrays, out_of_sample, save_arrays

    ds = make_ds(np.stack([LOGP, TPSA], 1))
    member = make().fit(ds)
    member.save(tmp_path / "m")
    doc = json.loads((tmp_path / "m" / "predictor.json").read_text())
    del doc["options"]["refit"]
    doc["options"]["grid"].pop("fingerprint", None)
    for t in doc["targets"]:
        t.pop("fingerprint", None)
    (tmp_path / "m" / "predictor.json").write_text(json.dumps(doc))
    arrays = load_arrays(tmp_path / "m" / "arrays.pt")
    assert "held_out.val" not in arrays  # fitted with refit=False: nothing kept
    save_arrays(tmp_path / "m" / "arrays.pt", arrays)
    old = type(member).load(tmp_path / "m")
    assert old.refit is False and old.held_out_ == {}
    assert torch.equal(old.predict(ds.test).mean, member.predict(ds.test).mean)
    assert torch.equal(out_of_sample(old, "val", ds.val).mean, member.predict(ds.val).mean)


def test_a_run_scores_weighs_and_calibrates_val_on_the_train_only_predictions(tmp_path):
    """``train_members`` with refitted svr and rf members (the defaults): each member's val metric,
    the val weights, the combination's val metric and the calibration's scores are those of the
    members fitted on the train rows alone, not of the refitted members that learned the val rows."""
    from siggate.config import Config
    from siggate.predictors.combine import simplex_least_squares
    from siggate.predictors.conformal import SIMILARITY_RATE
    from siggate.train.ensemble import train_members

    ds = make_ds(LOGP)
    cfg = Config()
    res = train_members(cfg, tmp_path / "run", ["svr", "rf"], weights="val", progress=False, dataset=ds)
    once = [KernelSVR(refit=False).fit(ds), RandomForest(refit=False).fit(ds)]
    pv = np.stack([m.predict_array([g.smiles for g in ds.val])[:, 0] for m in once])  # members, val rows
    y = labels(ds.val)[:, 0]
    for m, p in zip(res["members"], pv):
        assert m["val"] == pytest.approx(np.abs(p - y).mean(), rel=1e-6)
    w = simplex_least_squares(pv.T, y)
    np.testing.assert_allclose(np.asarray(res["weights"])[:, 0], w, atol=1e-6)
    w = np.asarray(res["weights"])[:, 0]  # as recorded (a weight of exactly 0 or 1 gives a spread of exactly 0)
    mean = w @ pv
    assert res["val"] == pytest.approx(np.abs(mean - y).mean(), rel=1e-5)
    domain = json.loads((tmp_path / "run" / "domain.json").read_text())  # scaled by the nearest-training similarity
    fps = [morgan_counts([g.smiles for g in split], domain["radius"], domain["n_bits"], sparse=True)
           for split in (ds.val, ds.train)]
    sigma = np.exp(-SIMILARITY_RATE * minmax_kernel(*fps).max(1))
    cal = json.loads((tmp_path / "run" / "calibration.json").read_text())["targets"]["y"]
    np.testing.assert_allclose(cal["scores"], np.sort(np.abs(y - mean) / sigma), rtol=1e-4, atol=1e-6)
    # the refitted members predict val better than that: the check above could tell them apart
    refit = np.stack([m.predict_array([g.smiles for g in ds.val])[:, 0] for m in
                      (KernelSVR().fit(ds), RandomForest().fit(ds))])
    assert np.abs(refit - y).mean() < 0.8 * np.abs(pv - y).mean()
    # what the harnesses' rows keep of it: each member's scores and weight, and the combination's
    from siggate.train.ensemble import member_shares

    shares = member_shares(json.loads((tmp_path / "run" / "metrics.json").read_text()))
    assert shares["weighting"] == "val" and [m["kind"] for m in shares["members"]] == ["svr", "rf"]
    assert [m["weight"] for m in shares["members"]] == pytest.approx(list(w))
    assert [m["val"] for m in shares["members"]] == pytest.approx([np.abs(p - y).mean() for p in pv], rel=1e-6)
    assert shares["members"][0]["val_summary"]["rmse"] == pytest.approx(np.sqrt(((pv[0] - y) ** 2).mean()), rel=1e-6)
    assert shares["combination"]["val"] == res["val"] and shares["combination"]["test"] == res["test"]


def test_val_weights_without_validation_molecules_are_refused_by_name():
    from siggate.predictors.combine import Combination

    ds = make_ds(LOGP, split=(0.8, 0.0))
    assert len(ds.val) == 0
    members = [svr_member(grid=ONE).fit(ds), rf_member(n_estimators=3, size=256).fit(ds)]
    with pytest.raises(ValueError, match="has no validation molecules; give it a val split, or use equal weights"):
        Combination(members, "val").fit_weights(ds)
    assert Combination(members).fit_weights(ds).weights_ is None  # equal weights need no val


def test_simplex_weights_leave_a_dominated_member_out_exactly():
    """A member that only adds error gets weight exactly 0 (the solver's 1e-16 was kept before,
    so the spread of a combination that val gave to one member was 1e-10, not the README's 0);
    the weights still solve the problem: the best mix of two partial predictors is found."""
    from siggate.predictors.combine import simplex_least_squares

    rng = np.random.default_rng(0)
    y = rng.normal(size=200)
    w = simplex_least_squares(np.stack([y, y + rng.normal(size=200)], 1), y)
    assert w.tolist() == [1.0, 0.0]
    half = rng.normal(size=200)
    a = np.stack([y + half, y - half], 1)  # each wrong by ±half: the mean is exact
    np.testing.assert_allclose(simplex_least_squares(a, y), [0.5, 0.5], atol=1e-6)


def test_simplex_weights_are_found_where_the_labels_are_nearly_alike():
    """Validation labels nearly alike beside the members' larger errors (99 of 100 at 4.0, one at
    4.01: a censored assay) made the scaled program so large that SLSQP stopped at equal weights
    and called it converged, in 13 of 20 draws, at 14 times the optimum's squared error. The
    weights are the optimum's: checked against the closed form of two members on the segment."""
    from siggate.predictors.combine import simplex_least_squares

    def best(a, y):  # w a0 + (1 - w) a1 - y = w d + (a1 - y): least squares in w, clipped to [0, 1]
        d = a[:, 0] - a[:, 1]
        w = float(np.clip(-(d @ (a[:, 1] - y)) / (d @ d), 0.0, 1.0))
        return [w, 1 - w]

    rng = np.random.default_rng(0)
    for _ in range(20):
        y = np.full(100, 4.0)
        y[rng.integers(100)] = 4.01
        a = np.stack([y + rng.normal(0, 0.1, 100), y + 0.6 + rng.normal(0, 0.1, 100)], 1)
        np.testing.assert_allclose(simplex_least_squares(a, y), best(a, y), atol=1e-6)
    two = np.array([3.896, 3.872])  # two labels, members off by 1 and by 10
    a = np.stack([two + np.array([1.0, -1.5]), two + np.array([-10.0, 10.0])], 1)
    np.testing.assert_allclose(simplex_least_squares(a, two), best(a, two), atol=1e-6)
    assert abs(simplex_least_squares(a, two)[0] - 0.5) > 0.3  # (equal weights, where it stopped before)
    # a third member of far larger errors set the scale, and SLSQP stopped short of the others' optimum (2.5%
    # above it): polished on its support, the weights are the two good members' closed form
    for t in range(10):
        y = rng.normal(5, 1, 200)
        e = rng.normal(0, 0.01, 200)
        a = np.stack([y + e + rng.normal(0, 0.001, 200), y - e + rng.normal(0, 0.001, 200),
                      y + rng.normal(0, 1000 * (1 + 4 * t), 200)], 1)
        np.testing.assert_allclose(simplex_least_squares(a, y), [*best(a[:, :2], y), 0.0], atol=1e-6)


def test_simplex_weights_are_the_optimum_beside_a_member_of_far_larger_errors():
    """A member wrong by ~7,000 (a diverged model) beside two good members of opposite, partly
    cancelling errors set the solver's scale, and SLSQP stopped at [0, 1, 0]: 1.67 times the
    squared error of the optimum [0, 0.935, 0.065]. The weights are checked against every
    support's equality-constrained least squares (the optimum lies on one of them)."""
    import itertools

    from siggate.predictors.combine import simplex_least_squares

    def best(a, y):
        err, out, low = a - y[:, None], None, np.inf
        for k in range(1, a.shape[1] + 1):
            for on in itertools.combinations(range(a.shape[1]), k):
                g = err[:, on].T @ err[:, on]
                v = np.linalg.solve(g, np.ones(k))  # min v'Gv with sum(v) = 1: v ∝ G^-1 1
                if np.all(v >= 0):
                    w = np.zeros(a.shape[1])
                    w[list(on)] = v / v.sum()
                    if np.sum((err @ w) ** 2) < low:
                        out, low = w, np.sum((err @ w) ** 2)
        return out

    rng = np.random.default_rng(7)
    y = rng.normal(size=60) * 2 + 5
    u, v, z = rng.normal(size=(3, 60))
    a = np.stack([y + 1050 + 7000 * z, y + 0.03 + 0.17 * u, y - 0.2 + 1.5 * (-0.64 * u + 0.77 * v)], 1)
    want = best(a, y)
    np.testing.assert_allclose(want, [0.0, 0.93509, 0.06491], atol=1e-5)
    np.testing.assert_allclose(simplex_least_squares(a, y), want, atol=1e-6)


def test_predict_given_a_member_s_manifest_names_its_folder(tmp_path, capsys):
    """``siggate predict --checkpoint RUN/member0/predictor.json`` said the file was "a text file
    (JSON), not a checkpoint; pass the best.pt", which a fingerprint member or a combination has
    none of: the command names the folder to give instead, exit code 2."""
    from siggate.cli import main

    member = svr_member(ONE).fit(make_ds(LOGP))
    member.save(tmp_path / "m")
    manifest = tmp_path / "m" / "predictor.json"
    rc = main(["predict", "--checkpoint", str(manifest), "CCO"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err == [
        f"siggate predict: error: {manifest}: give the folder that holds it ({tmp_path / 'm'}), not the manifest itself"]


def test_the_exact_support_pass_reads_the_rows_twice_not_once_per_support():
    """The exact pass over every support (2^M - 1 of them) measured each candidate's loss on every
    row: ten members on 200,000 validation rows took 12 s where the solver had taken 1 s. The
    candidates are ranked on the members' [M, M] Gram matrix; the rows are read for the best alone."""
    from siggate.predictors.combine import _best_support, simplex_least_squares

    rng = np.random.default_rng(3)
    y = rng.normal(size=500)
    a = np.stack([y + rng.normal(size=500) * (0.5 + 0.1 * k) for k in range(8)], 1)
    err = a - y[:, None]
    passes = []

    def loss(w):
        passes.append(1)
        r = err @ w
        return float(r @ r) / len(y)

    w = _best_support(err, np.full(8, 1 / 8), loss)
    assert len(passes) <= 2
    assert np.all(w >= 0) and abs(w.sum() - 1) < 1e-12 and loss(w) <= loss(np.full(8, 1 / 8))
    np.testing.assert_allclose(w, simplex_least_squares(a, y), atol=1e-9)
