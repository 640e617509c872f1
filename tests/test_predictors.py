"""The predictor interface (``siggate.predictors``): the combination's mean, spread and weights
against independent computations, its storage, the GNN member, the one loader of saved
predictors (new and old folders), the registry of member kinds and a run of several members
that resumes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from siggate.data.base import GraphDataset, TaskInfo
from siggate.predictors.base import (
    Prediction,
    PredictorFileError,
    load_arrays,
    read_manifest,
    save_arrays,
    task_info,
    write_manifest,
)
from siggate.predictors.combine import Combination, simplex_least_squares
from test_predict import one_thread, tiny_config, tiny_dataset, train_tiny

INFO = TaskInfo(name="toy", task="regression", num_tasks=2, metric="mae", target_names=["a", "b"])


class Fixed:
    """A member that predicts given rows (by the graphs' ``idx``) and counts what it is asked."""

    kind = "fixed"

    def __init__(self, table: torch.Tensor, info: TaskInfo = INFO) -> None:
        self.table, self.info, self.asked = table, info, []

    def fit(self, ds):
        return self

    def predict(self, graphs) -> Prediction:
        idx = [int(g.idx) for g in graphs]
        self.asked += idx
        return Prediction(self.table[idx])

    def save(self, folder) -> None:
        Path(folder).mkdir(parents=True, exist_ok=True)
        save_arrays(Path(folder) / "table.pt", {"table": self.table})
        write_manifest(folder, self.kind, self.info, files=["table.pt"])

    @classmethod
    def load(cls, folder) -> "Fixed":
        return cls(load_arrays(Path(folder) / "table.pt")["table"], task_info(read_manifest(folder)))


def _graphs(y: torch.Tensor, start: int = 0) -> list[Data]:
    return [Data(y=y[i:i + 1], idx=start + i, num_nodes=1) for i in range(len(y))]


def test_equal_weights_give_the_ensembles_mean_and_std_exactly():
    g = torch.Generator().manual_seed(0)
    tables = [torch.randn(9, 2, generator=g) for _ in range(3)]
    combo = Combination([Fixed(t) for t in tables])
    pred = combo.predict(_graphs(torch.zeros(9, 2)))
    stacked = torch.stack(tables)
    assert torch.equal(pred.mean, stacked.mean(0)) and torch.equal(pred.spread, stacked.std(0, correction=0))
    one = Combination([Fixed(tables[0])]).predict(_graphs(torch.zeros(9, 2)))
    assert torch.equal(one.mean, tables[0]) and torch.equal(one.spread, torch.zeros(9, 2))


def test_fixed_weights_are_a_weighted_mean_and_std():
    g = torch.Generator().manual_seed(1)
    tables = [torch.randn(5, 2, generator=g, dtype=torch.float64) for _ in range(3)]
    w = np.array([[0.2, 0.5], [0.3, 0.5], [0.5, 0.0]])  # per target
    pred = Combination([Fixed(t) for t in tables], weights=w.tolist()).predict(_graphs(torch.zeros(5, 2)))
    p = np.stack([t.numpy() for t in tables])  # M, G, T
    mean = np.einsum("mt,mgt->gt", w, p)
    std = np.sqrt(np.einsum("mt,mgt->gt", w, (p - mean) ** 2))
    assert np.allclose(pred.mean.numpy(), mean, atol=1e-12) and np.allclose(pred.spread.numpy(), std, atol=1e-12)
    shared = Combination([Fixed(t) for t in tables], weights=[0.25, 0.25, 0.5]).predict(_graphs(torch.zeros(5, 2)))
    assert np.allclose(shared.mean.numpy(), np.tensordot([0.25, 0.25, 0.5], p, 1), atol=1e-12)
    for bad in ([0.5, 0.6, -0.1], [0.2, 0.2, 0.2], [0.5, 0.5]):
        with pytest.raises(ValueError, match="weights"):
            Combination([Fixed(t) for t in tables], weights=bad)
    with pytest.raises(ValueError, match="'val' or a list"):
        Combination([Fixed(tables[0])], weights="best")


def test_simplex_least_squares_matches_a_grid_search():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(40, 3))
    y = a @ np.array([0.6, 0.1, 0.3]) + 0.3 * rng.normal(size=40)
    w = simplex_least_squares(a, y)
    assert (w >= 0).all() and w.sum() == pytest.approx(1.0, abs=1e-12)
    step = 0.005
    grid = [(i * step, j * step, 1 - (i + j) * step) for i in range(201) for j in range(201 - i)]
    losses = [np.sum((a @ np.array(g) - y) ** 2) for g in grid]
    best = np.array(grid[int(np.argmin(losses))])
    assert np.sum((a @ w - y) ** 2) <= min(losses) + 1e-9  # never worse than the grid's best point
    assert np.abs(w - best).max() <= step
    # the optimum on an edge: a useless member gets weight 0
    assert simplex_least_squares(np.stack([y, -y], 1), y) == pytest.approx([1.0, 0.0], abs=1e-9)


@pytest.mark.parametrize("unit,offset", [(1e-12, 0.0), (1e-9, 0.0), (1e6, 0.0), (1.0, 1e4), (1e-6, 7.0)])
def test_simplex_least_squares_does_not_depend_on_the_labels_units(unit, offset):
    """The program was scaled by the labels' mean square floored at 1e-12: labels in molar units
    (1e-9) or smaller left SLSQP at its equal starting weights, silently (``--weights val`` kept
    1/3 each where the labels' own units gave 0.998 to one member). The weights sum to one, so
    rescaling and shifting labels and predictions alike must give the same weights."""
    rng = np.random.default_rng(0)
    y = rng.normal(3, 1.5, 50)
    a = np.stack([y + rng.normal(0, 0.1, 50), y + rng.normal(0, 2, 50), y + rng.normal(0, 1, 50)], 1)
    want = simplex_least_squares(a, y)
    assert want[0] > 0.99 and want[1] == 0.0
    np.testing.assert_allclose(simplex_least_squares(a * unit + offset, y * unit + offset), want, atol=1e-6)


def test_val_weights_per_target_skip_missing_labels_and_never_read_test():
    g = torch.Generator().manual_seed(2)
    y = torch.randn(30, 2, generator=g)
    y[20:25, 1] = float("nan")  # target b: some validation labels missing
    good_a = y.clone()
    good_a[:, 1] = 0.0  # member 0 knows target a, member 1 target b
    good_b = torch.randn(30, 2, generator=g)
    good_b[:, 1] = torch.nan_to_num(y[:, 1], nan=5.0)
    members = [Fixed(good_a), Fixed(good_b)]
    ds = GraphDataset(info=INFO, splits={"train": _graphs(y[:10]), "val": _graphs(y[10:25], 10),
                                         "test": _graphs(y[25:], 25)})
    combo = Combination(members, weights="val").fit(ds)
    assert combo.weights_ == pytest.approx(np.array([[1.0, 0.0], [0.0, 1.0]]), abs=1e-6)
    assert all(i < 25 for m in members for i in m.asked)  # the test rows were never predicted
    no_labels = GraphDataset(info=INFO, splits={"train": [], "val": _graphs(torch.full((4, 2), float("nan")), 10),
                                                "test": []})
    assert Combination(members, weights="val").fit_weights(no_labels).weights_ == pytest.approx(np.full((2, 2), 0.5))
    with pytest.raises(ValueError, match="fit the weights"):
        Combination(members, weights="val").predict(ds.test)


def test_multiclass_val_weights_minimise_the_brier_score_with_one_vector_for_all_classes():
    """The multiclass branch of the val weights had no test (replacing its solve by nothing, equal
    weights, passed): the weights are the simplex point that minimises the validation Brier score
    (scipy's SLSQP here), one weight per member for every class, and the combined rows stay
    probability vectors."""
    from scipy.optimize import minimize

    info = TaskInfo(name="mc", task="multiclass", num_tasks=1, metric="accuracy", num_classes=3)
    rng = np.random.default_rng(4)
    y = rng.integers(0, 3, size=40)
    onehot = np.eye(3)[y]
    sharp = 0.7 * onehot + 0.1  # a good member, a noisy one, and one that knows nothing
    noisy = rng.dirichlet(np.ones(3), size=40)
    tables = [torch.tensor(t) for t in (sharp, 0.5 * sharp + 0.5 * noisy, np.full((40, 3), 1 / 3))]
    ys = torch.tensor(y, dtype=torch.float64)[:, None]
    ds = GraphDataset(info=info, splits={"train": [], "val": _graphs(ys[:30]), "test": _graphs(ys[30:], 30)})
    combo = Combination([Fixed(t, info) for t in tables], weights="val").fit(ds)
    p = np.stack([t[:30].numpy() for t in tables])  # members, rows, classes

    def brier(w):
        return float(((np.tensordot(w, p, axes=1) - onehot[:30]) ** 2).sum())

    ref = minimize(brier, np.full(3, 1 / 3), method="SLSQP", bounds=[(0, 1)] * 3,
                   constraints=[{"type": "eq", "fun": lambda w: w.sum() - 1}], options={"ftol": 1e-12}).x
    assert combo.weights_.shape == (3, 3) and np.allclose(combo.weights_, combo.weights_[:, :1])  # shared by classes
    assert combo.weights_[:, 0] == pytest.approx(ref, abs=1e-4) and brier(combo.weights_[:, 0]) <= brier(ref) + 1e-9
    assert brier(combo.weights_[:, 0]) < brier(np.full(3, 1 / 3)) - 0.1  # not the equal weights
    rows = combo.predict(ds.test).mean
    assert torch.allclose(rows.sum(1), torch.ones(10, dtype=rows.dtype))


def test_combination_saves_and_loads_and_refuses_crafted_manifests(tmp_path):
    g = torch.Generator().manual_seed(3)
    tables = [torch.randn(6, 2, generator=g) for _ in range(2)]
    combo = Combination([Fixed(t) for t in tables], weights=[[0.25, 1.0], [0.75, 0.0]], names=["gnn", "svr"],
                        record={"split_seed": 7}, groups=["k", "k"])
    combo.save(tmp_path / "c")
    doc = json.loads((tmp_path / "c" / "predictor.json").read_text())
    assert (doc["kind"], doc["members"], doc["weighting"], doc["split_seed"]) == ("combination", ["gnn", "svr"],
                                                                                   "fixed", 7)
    assert doc["kinds"] == ["fixed", "fixed"]
    back = Combination.load(tmp_path / "c", Fixed.load)
    graphs = _graphs(torch.zeros(6, 2))
    assert torch.equal(back.predict(graphs).mean, combo.predict(graphs).mean)
    assert back.record == {"split_seed": 7} and back.names == ["gnn", "svr"] and back.groups == ["k", "k"]
    (tmp_path / "c" / "predictor.json").write_text(json.dumps({k: v for k, v in doc.items() if k != "groups"}))
    assert Combination.load(tmp_path / "c", Fixed.load).groups == ["gnn", "svr"]  # saved before groups: one each
    (tmp_path / "c" / "predictor.json").write_text(json.dumps({**doc, "groups": ["k"]}))
    with pytest.raises(PredictorFileError, match="unusable groups"):
        Combination.load(tmp_path / "c", Fixed.load)
    doc["members"] = ["gnn", "../svr"]
    (tmp_path / "c" / "predictor.json").write_text(json.dumps(doc))
    with pytest.raises(PredictorFileError, match="not a subfolder name"):
        Combination.load(tmp_path / "c", Fixed.load)
    # hand edits are named, never a KeyError or TypeError from inside (a reader's hunt found those)
    doc["members"] = ["gnn", "svr"]
    edits = [({"members": ["gnn", "svr", "rf"]}, "member folder\\(s\\) rf are missing"),
             ({"members": []}, "a combination of no members"),
             ({"info": "x"}, "no usable task description 'info' \\(TypeError"),
             ({"info": {**doc["info"], "bogus": 1}}, "no usable task description 'info' \\(TypeError: .*bogus"),
             ({"info": {**doc["info"], "task": "bogus"}}, "no usable task description 'info' \\(ValueError: task"),
             ({"info": {**doc["info"], "target_names": ["a"]}}, "'info' names 1 target\\(s\\) for 2 task\\(s\\)"),
             # a member folder of another kind (an svr's copied over the rf's), target names of another run
             ({"kinds": ["fixed", "rf"]}, "its member svr holds a 'fixed' predictor where the combination saved 'rf'"),
             ({"info": {**doc["info"], "target_names": ["a", "other"]}},
              "its members predict the target\\(s\\) .*, its manifest names a, other"),
             # a weight column per target or one for all: three columns for two targets mixed them silently
             ({"weights": [[0.2, 0.3, 0.5], [0.8, 0.7, 0.5]]}, "unusable weights \\(a column per target, 2, or one for all; got 3\\)")]
    edits += [({"members": "gnn"}, "members must be a list of folder names, got str"),  # (read letter by letter)
              ({"weighting": "equal"}, r"weighting 'equal' beside weights \[\[0\.25, 1\.0\], \[0\.75, 0\.0\]\]: an "
                                       "edited weighting"),  # (predicted with equal weights, without a word)
              ({"format": float("inf")}, r"not a siggate predictor manifest \(OverflowError"),  # (a traceback)
              ({"split_seed": "abc"}, "split_seed must be a whole number, got 'abc'")]  # (evaluate's traceback)
    for edit, message in edits:
        (tmp_path / "c" / "predictor.json").write_text(json.dumps({**doc, **edit}))
        with pytest.raises(PredictorFileError, match=message):
            Combination.load(tmp_path / "c", Fixed.load)
    # a member folder of another run copied in (its own files agree with its manifest): the
    # combination keeps each member manifest's SHA-256
    (tmp_path / "c" / "predictor.json").write_text(json.dumps(doc))
    Fixed(tables[1] + 1).save(tmp_path / "c" / "svr")
    with pytest.raises(PredictorFileError, match=r"svr/predictor\.json: not the file its predictor\.json was saved "
                                                 r"with \(another SHA-256\): a run grown by --resume --epochs that has "
                                                 r"not finished .*, or a file of another run copied in"):
        Combination.load(tmp_path / "c", Fixed.load)
    Fixed(tables[1]).save(tmp_path / "c" / "svr")
    (tmp_path / "c" / "predictor.json").write_text("[" * 100000 + "]" * 100000)  # json's RecursionError: a traceback
    with pytest.raises(PredictorFileError, match="not a siggate predictor manifest \\(ValueError: JSON nested too deep to read"):
        Combination.load(tmp_path / "c", Fixed.load)
    (tmp_path / "c" / "predictor.json").write_text(json.dumps({k: v for k, v in doc.items() if k != "info"}))
    with pytest.raises(PredictorFileError, match="no usable task description 'info' \\(KeyError"):
        Combination.load(tmp_path / "c", Fixed.load)
    from siggate.train.members import load_predictor

    with pytest.raises(PredictorFileError, match="give the folder that holds it .*, not the manifest itself"):
        load_predictor(tmp_path / "c" / "predictor.json")  # was: "holds pickle instructions"
    other = TaskInfo(name="toy", task="binary", num_tasks=2, metric="rocauc", target_names=["a", "b"])
    with pytest.raises(ValueError, match="share one task"):
        Combination([Fixed(tables[0]), Fixed(tables[1], other)]).info


# ------------------------------------------------------------------------ the GNN member


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A one-epoch run folder written by ``train`` (no predictor.json: an older run's layout)."""
    out = tmp_path_factory.mktemp("gnn") / "run"
    ds = tiny_dataset()
    train_tiny(out, dataset=ds)
    return out, ds


def test_gnn_member_predicts_the_best_epochs_model_and_loads_old_and_new_folders(tiny_run, tmp_path):
    from siggate.train.gnn_member import GNNMember, mark_run
    from siggate.train.members import load_predictor
    from siggate.train.modelprep import load_trained
    from siggate.train.scoring import predict_graphs

    out, ds = tiny_run
    assert not (out / "predictor.json").exists()
    model, ckpt, _, info = load_trained(out / "best.pt")
    want = predict_graphs(model, ds.test, info, ckpt["target_mean"], ckpt["target_std"], 64)
    for path in (out, out / "best.pt"):  # a run folder without predictor.json, and a checkpoint file
        member = load_predictor(path)
        assert isinstance(member, GNNMember) and member.info == info
        pred = member.predict(ds.test)
        assert torch.equal(pred.mean, want) and pred.spread is None
    copy = tmp_path / "copy"
    load_predictor(out).save(copy)  # another folder: the run's files travel with the manifest
    assert read_manifest(copy)["kind"] == "gnn" and (copy / "best.pt").is_file()
    assert torch.equal(load_predictor(copy).predict(ds.test).mean, want)
    mark_run(out)
    assert read_manifest(out) == {**read_manifest(copy)}
    assert torch.equal(GNNMember.load(out).predict(ds.test).mean, want)
    # another run's checkpoint copied in (another width, another task) was predicted from without a word
    other = torch.load(out / "best.pt", weights_only=True)
    other["model"] = {k: v + 1 if v.is_floating_point() else v for k, v in other["model"].items()}
    torch.save(other, copy / "best.pt")
    with pytest.raises(PredictorFileError, match=r"best\.pt: not the file its predictor\.json was saved with \(another "
                                                 r"SHA-256\): a run grown by --resume --epochs that has not finished "
                                                 r"\(still training, or stopped: finish it with siggate train --resume "
                                                 r"RUN\), or a file of "
                                                 r"another run copied in \(copy the whole run folder as it was, or "
                                                 r"retrain it\)$"):
        load_predictor(copy)
    # no graphs: [0, T] like the fingerprint members (a combination stacks them); SMILES: named
    assert tuple(member.predict([]).mean.shape) == (0, info.num_tasks)
    empty = member.atom_contributions([])
    assert empty.atoms == [] and tuple(empty.baseline.shape) == tuple(empty.prediction.shape) == (0, info.num_tasks)
    with pytest.raises(TypeError, match="the GNN member predicts graphs, and item 0 is a str; featurize SMILES"):
        member.predict(["CCO"])


def test_gnn_member_fit_trains_reuses_and_resumes(tmp_path):
    from siggate.train.gnn_member import GNNMember

    ds = tiny_dataset()
    cfg = tiny_config(train={"epochs": 2})
    with one_thread():
        member = GNNMember(cfg, tmp_path / "m", progress=False).fit(ds)
    assert member.metrics_["epochs"] == 2 and member.info == ds.info
    stamp = (tmp_path / "m" / "best.pt").stat().st_mtime_ns
    again = GNNMember(cfg, tmp_path / "m", progress=False).fit(ds)  # finished: reused, not trained again
    assert (tmp_path / "m" / "best.pt").stat().st_mtime_ns == stamp
    assert torch.equal(again.predict(ds.val).mean, member.predict(ds.val).mean)
    with pytest.raises(AttributeError, match="not fitted"):
        GNNMember(cfg, tmp_path / "x").predict(ds.val)


# ------------------------------------------------------------------ registry and loader


def test_unknown_member_kinds_are_refused_with_the_list(tmp_path, capsys):
    from siggate.cli import main
    from siggate.train.members import MEMBER_KINDS, MemberError, parse_kinds

    with pytest.raises(MemberError, match=r"--members: gnn is named twice; each kind is one member \(--ensemble N"):
        parse_kinds("gnn, gnn")
    with pytest.raises(MemberError, match=r"unknown member kind 'svm'; known kinds: " + ", ".join(sorted(MEMBER_KINDS))):
        parse_kinds("gnn,svm")
    rc = main(["train", "--data", str(tmp_path / "d.csv"), "--members", "gnn,svm", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and "unknown member kind 'svm'; known kinds: gnn" in err and len(err.strip().splitlines()) == 1


def test_old_ensemble_folder_loads_as_equal_weights(tiny_run, tmp_path):
    from siggate.train.members import load_predictor, run_data, saved_task

    out, ds = tiny_run
    ens = tmp_path / "old"
    for i in range(2):
        (ens / f"member{i}").mkdir(parents=True)
        (ens / f"member{i}" / "best.pt").write_bytes((out / "best.pt").read_bytes())
    (ens / "ensemble.json").write_text(json.dumps({"members": ["member0/best.pt", "member1/best.pt"],
                                                   "seeds": [4, 5]}))
    combo = load_predictor(ens)
    assert isinstance(combo, Combination) and combo.weighting == "equal" and combo.names == ["member0", "member1"]
    pred, single = combo.predict(ds.test), load_predictor(out).predict(ds.test)
    assert torch.equal(pred.mean, single.mean) and torch.equal(pred.spread, torch.zeros_like(single.mean))
    assert run_data(combo).split_seed == 4 and run_data(load_predictor(ens / "member1")).split_seed == 4
    assert saved_task(ens).name == ds.info.name
    (ens / "member1" / "best.pt").unlink()
    with pytest.raises(PredictorFileError, match="member checkpoint"):
        load_predictor(ens)


class Sized:
    """A member kind for the tests: predicts ``a * atoms + b`` fitted by least squares on the
    training rows; counts its fits."""

    kind = "sized"
    fits = 0

    def __init__(self, info=None, coef=None) -> None:
        self.info, self.coef = info, coef

    def fit(self, ds):
        type(self).fits += 1
        x = torch.tensor([[float(g.num_nodes), 1.0] for g in ds.train], dtype=torch.float64)
        y = torch.cat([g.y for g in ds.train]).double()
        self.info, self.coef = ds.info, torch.linalg.lstsq(x, y).solution
        return self

    def predict(self, graphs):
        x = torch.tensor([[float(g.num_nodes), 1.0] for g in graphs], dtype=torch.float64)
        return Prediction((x @ self.coef).float())

    def save(self, folder):
        write_manifest(folder, self.kind, self.info)
        save_arrays(Path(folder) / "coef.pt", {"coef": self.coef})

    @classmethod
    def load(cls, folder):
        return cls(task_info(read_manifest(folder)), load_arrays(Path(folder) / "coef.pt")["coef"])


def test_val_weights_of_a_group_are_fitted_to_its_mean_and_shared_equally():
    """Copies of one kind (``groups``) are one candidate for the validation weights: the weights
    are those fitted to the groups' mean predictions, split equally within a group, so the
    validation rows never choose among seeds (ungrouped, the better copy takes it all)."""
    g = torch.Generator().manual_seed(3)
    y = torch.randn(40, 2, generator=g)
    near, far = y + 0.1 * torch.randn(40, 2, generator=g), y + 0.8 * torch.randn(40, 2, generator=g)
    other = torch.randn(40, 2, generator=g)
    ds = GraphDataset(info=INFO, splits={"train": _graphs(y[:10]), "val": _graphs(y[10:30], 10), "test": []})
    members = [Fixed(near), Fixed(far), Fixed(other)]
    grouped = Combination(members, weights="val", groups=["gnn", "gnn", "svr"]).fit_weights(ds).weights_
    mean = Combination([Fixed((near + far) / 2), Fixed(other)], weights="val").fit_weights(ds).weights_
    assert grouped[0] == pytest.approx(grouped[1]) and grouped[2] == pytest.approx(mean[1])
    assert grouped[0] + grouped[1] == pytest.approx(mean[0]) and grouped.sum(0) == pytest.approx([1.0, 1.0])
    alone = Combination(members, weights="val").fit_weights(ds).weights_
    assert not np.allclose(alone[0], alone[1])  # without groups the copies are weighed apart
    with pytest.raises(ValueError, match="one label per member"):
        Combination(members, weights="val", groups=["gnn"])


def test_gnn_members_keep_their_last_epoch_only_beside_another_kind(tmp_path, monkeypatch):
    """``train.select: auto`` keeps the last epoch of GNN members whose validation predictions
    fit a combination's weights: beside another kind. Copies of the GNN alone share one weight
    (nothing is fitted among them), so they keep their best epoch even with ``--weights val``."""
    from siggate.train import members as members_mod
    from siggate.train.members import MemberKind, build_members

    monkeypatch.setitem(members_mod.MEMBER_KINDS, "sized",
                        MemberKind(build=lambda spec: Sized(), load=lambda folder, device: Sized.load(folder)))
    cfg = tiny_config()

    def selects(kinds, weights):
        return [m.cfg.train.select for _, _, m in build_members(kinds, cfg, tmp_path, 2, weights=weights)
                if hasattr(m, "cfg")]

    assert selects(["gnn"], "val") == ["best", "best"]
    assert selects(["gnn", "sized"], "val") == ["last", "last"]
    assert selects(["gnn", "sized"], None) == ["best", "best"]


def test_a_run_of_several_kinds_records_each_member_and_resumes(tmp_path, monkeypatch):
    """One registry entry adds a kind; metrics.json holds every member's and the combination's
    scores; a second call reuses the finished members, and a GNN member stopped after its first
    epoch resumes to the numbers of an uninterrupted run."""
    from siggate.train import members as members_mod
    from siggate.train import record
    from siggate.train.ensemble import train_members
    from siggate.train.members import MemberKind, load_predictor

    monkeypatch.setitem(members_mod.MEMBER_KINDS, "sized",
                        MemberKind(build=lambda spec: Sized(), load=lambda folder, device: Sized.load(folder)))
    ds, cfg = tiny_dataset(), tiny_config(train={"epochs": 2})
    with one_thread():
        whole = train_members(cfg, tmp_path / "whole", ["sized", "gnn"], 2, weights="val", progress=False, dataset=ds)
    assert [(m["name"], m["kind"], m["seed"]) for m in whole["members"]] == [
        ("member0", "gnn", 0), ("member1", "gnn", 1), ("member2", "sized", 0)]
    assert whole["weighting"] == "val" and np.allclose(np.sum(whole["weights"], 0), 1.0)
    assert whole["weights"][0] == pytest.approx(whole["weights"][1])  # the two GNN seeds share their kind's weight
    combo = load_predictor(tmp_path / "whole")
    preds = [m.predict(ds.test).mean for m in combo.members]
    w = torch.tensor(whole["weights"], dtype=torch.float64)[:, None, :]
    assert torch.allclose(combo.predict(ds.test).mean, (w * torch.stack(preds)).sum(0), atol=1e-6)
    y = torch.cat([g.y for g in ds.test])
    assert whole["test"] == pytest.approx(float((combo.predict(ds.test).mean - y).abs().mean()), rel=1e-5)
    for m, p in zip(whole["members"], preds):
        assert m["test"] == pytest.approx(float((p - y).abs().mean()), rel=1e-5)

    original, fits = record.RunFiles.__call__, Sized.fits

    class Crash(Exception):
        pass

    def crash_in_member1(self, run, end):
        original(self, run, end)
        if self.out.name == "member1" and end.row["epoch"] == 1:
            raise Crash

    monkeypatch.setattr(record.RunFiles, "__call__", crash_in_member1)
    with one_thread(), pytest.raises(Crash):
        train_members(cfg, tmp_path / "cut", ["sized", "gnn"], 2, weights="val", progress=False, dataset=ds)
    monkeypatch.setattr(record.RunFiles, "__call__", original)
    stamp = (tmp_path / "cut" / "member0" / "best.pt").stat().st_mtime_ns
    with one_thread():
        resumed = train_members(cfg, tmp_path / "cut", ["sized", "gnn"], 2, weights="val", resume=True,
                                progress=False, dataset=ds)
    assert (tmp_path / "cut" / "member0" / "best.pt").stat().st_mtime_ns == stamp  # finished: reused
    hist = [json.loads((tmp_path / r / "member1" / "metrics.json").read_text())["history"] for r in ("whole", "cut")]
    keys = ("train_loss", "val", "test", "grad_norm")
    assert [[h[k] for k in keys] for h in hist[0]] == [[h[k] for k in keys] for h in hist[1]]
    assert Sized.fits == fits + 1  # fitted once in the cut run (after the GNN members), never refitted
    strip = ("seconds",)
    assert {k: v for k, v in resumed.items() if k not in strip} == {k: v for k, v in whole.items() if k not in strip}


def test_old_name_of_the_smiles_predictor_still_works():
    import siggate.train.predict as predict

    with pytest.warns(DeprecationWarning, match="SmilesPredictor"):
        assert predict.Predictor is predict.SmilesPredictor


def test_encodings_of_members_must_agree(tiny_run):
    from siggate.train.dataprep import Encodings
    from siggate.train.members import encodings_of, load_predictor

    out, _ = tiny_run
    gnn = load_predictor(out)
    assert encodings_of(Combination([gnn, Sized()])) == Encodings("rwse", 4, "none")

    class Other:
        encodings = Encodings("lappe", 4, "none")

    with pytest.raises(PredictorFileError, match="different graph encodings"):
        encodings_of(Combination([gnn, Other()]))


def test_a_confident_classifiers_probabilities_do_not_tie_at_one(tiny_run, monkeypatch):
    """The GNN member (predict, evaluate, a combination's member scores) took the sigmoid in float32,
    which is 1.0 from a logit of about 17: a confident model's probabilities tied there, and evaluate
    scored ROC-AUC 0.5 where the run recorded 0.4. They are float64, as training scores them."""
    import dataclasses

    import siggate.train.gnn_member as gm
    from siggate.train.members import load_predictor
    from siggate.train.scoring import probabilities

    out, ds = tiny_run
    member = load_predictor(out)
    member._info = dataclasses.replace(member.info, task="binary")
    logits = torch.linspace(17, 24, len(ds.test), dtype=torch.float32)[:, None]
    monkeypatch.setattr(gm, "predict_graphs", lambda *a, **k: logits.clone())
    p = member.predict(ds.test).mean
    assert p.dtype == torch.float64 and bool((p < 1).all()) and len(set(p[:, 0].tolist())) == len(ds.test)
    assert torch.equal(p, probabilities(logits.double(), "binary"))
    assert bool((torch.sigmoid(logits) == 1).any())  # what float32 gave


def test_the_zero_uncertainty_warning_says_what_the_task_s_conformal_output_does(caplog):
    """A classifier's run of one member was told that its conformal intervals widen away from the
    training molecules: it gives prediction sets, which are not scaled."""
    import logging

    from siggate.train.predict import _warn_one_member_targets

    binary = TaskInfo(name="toy", task="binary", num_tasks=1, metric="rocauc", target_names=["active"])
    said = {}
    for info in (INFO, binary):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="siggate"):
            _warn_one_member_targets(Combination([Fixed(torch.zeros(3, info.num_tasks), info)]), "run")
        said[info.task] = caplog.messages[-1]
    assert said["regression"].endswith("not a sign of certainty; conformal intervals (--coverage, or an estimator's "
                                       "predict_interval) of a run calibrated on the similarity to its training "
                                       "molecules widen away from them")
    assert said["binary"] == ("run: the run holds one member for 'active', so its _uncertainty column is 0 for every "
                              "molecule, not a sign of certainty; conformal prediction sets (--coverage, or an "
                              "estimator's predict_set) hold their coverage over the run's molecules as a whole")
