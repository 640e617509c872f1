import math

import numpy as np
import pytest
import torch
from ogb.graphproppred import Evaluator
from sklearn.metrics import average_precision_score, mean_absolute_error, roc_auc_score

from siggate.train.metrics import (
    METRIC_FNS,
    MetricUndefinedError,
    accuracy,
    average_precision,
    compute_metric,
    higher_is_better,
    is_better,
    mae,
    rocauc,
    weighted_accuracy,
)


# ----------------------------------------------------------------------- MAE
def test_mae_hand_computed():
    y_true = np.array([[1.0, 2.0], [3.0, 4.0]])
    y_pred = np.array([[1.5, 2.0], [2.0, 6.0]])
    # |errors| = 0.5, 0, 1, 2 -> mean 0.875
    assert mae(y_true, y_pred) == pytest.approx(0.875)
    assert mae(torch.tensor(y_true), torch.tensor(y_pred)) == pytest.approx(0.875)
    assert mae(y_true, y_pred) == pytest.approx(mean_absolute_error(y_true, y_pred))


def test_mae_nan_per_target_then_mean():
    y_true = np.array([[1.0, np.nan], [3.0, 4.0], [5.0, np.nan]])
    y_pred = np.array([[2.0, 100.0], [3.0, 6.0], [7.0, 100.0]])
    # target 0: (1 + 0 + 2)/3 = 1; target 1: |4-6| = 2 -> (1 + 2)/2
    assert mae(y_true, y_pred) == pytest.approx(1.5)


def test_mae_1d_and_float32_tensor():
    yt = torch.tensor([0.0, 1.0, 2.0])
    yp = torch.tensor([0.5, 1.0, 1.0], dtype=torch.float32)
    assert mae(yt, yp) == pytest.approx(0.5)


def test_mae_all_nan_raises():
    with pytest.raises(MetricUndefinedError):
        mae(np.full((3, 2), np.nan), np.zeros((3, 2)))


def test_shape_mismatch_raises():
    with pytest.raises(ValueError):
        mae(np.zeros((3, 2)), np.zeros((3, 1)))


# ------------------------------------------------------------- classification
def test_rocauc_single_task_matches_sklearn():
    yt = np.array([[0], [1], [1], [0], [1]], dtype=float)
    yp = np.array([[0.1], [0.8], [0.3], [0.4], [0.9]])
    assert rocauc(yt, yp) == pytest.approx(roc_auc_score(yt[:, 0], yp[:, 0]))
    assert rocauc(torch.tensor(yt), torch.tensor(yp)) == pytest.approx(roc_auc_score(yt[:, 0], yp[:, 0]))


def test_multilabel_nan_and_single_class_task_skipped():
    yt = np.array(
        [
            [0, 1, 1],
            [1, np.nan, 1],
            [np.nan, 0, 1],
            [1, 1, np.nan],
            [0, 0, 1],
        ],
        dtype=float,
    )
    yp = np.array(
        [
            [0.2, 0.9, 0.3],
            [0.7, 0.1, 0.2],
            [0.5, 0.4, 0.9],
            [0.1, 0.3, 0.5],
            [0.3, 0.6, 0.1],
        ]
    )
    # task 2 has only positives -> skipped
    exp_auc, exp_ap = [], []
    for t in (0, 1):
        m = ~np.isnan(yt[:, t])
        exp_auc.append(roc_auc_score(yt[m, t], yp[m, t]))
        exp_ap.append(average_precision_score(yt[m, t], yp[m, t]))
    assert rocauc(yt, yp) == pytest.approx(np.mean(exp_auc))
    assert average_precision(yt, yp) == pytest.approx(np.mean(exp_ap))


def test_no_evaluable_task_raises():
    yt = np.array([[1, 0], [1, 0], [np.nan, 0]], dtype=float)
    yp = np.random.rand(3, 2)
    with pytest.raises(MetricUndefinedError, match="both"):
        rocauc(yt, yp)
    with pytest.raises(MetricUndefinedError, match="No task has both positive .1. and negative .0. labels; cannot "
                       "compute average precision"):
        average_precision(yt, yp)


def test_nonfinite_predictions_give_nan():
    yt = np.array([[0], [1], [0], [1]], dtype=float)
    yp = np.array([[0.1], [np.nan], [0.2], [0.3]])
    with pytest.warns(RuntimeWarning):
        assert math.isnan(rocauc(yt, yp))


def _random_labels(rng, G, T, nan_frac):
    yt = (rng.random((G, T)) < 0.3).astype(float)
    yt[rng.random((G, T)) < nan_frac] = np.nan
    return yt


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rocauc_equals_ogb_molhiv(seed):
    rng = np.random.default_rng(seed)
    yt = _random_labels(rng, 200, 1, 0.0)
    yp = rng.normal(size=(200, 1))
    ref = Evaluator("ogbg-molhiv").eval({"y_true": yt, "y_pred": yp})["rocauc"]
    assert rocauc(yt, yp) == pytest.approx(ref, abs=1e-12)
    assert compute_metric("rocauc", torch.tensor(yt), torch.tensor(yp)) == pytest.approx(ref, abs=1e-12)


@pytest.mark.parametrize("seed", [0, 1])
def test_ap_equals_ogb_molpcba(seed):
    rng = np.random.default_rng(seed)
    G, T = 60, 128
    yt = _random_labels(rng, G, T, 0.4)
    yt[:, 5] = np.where(np.isnan(yt[:, 5]), np.nan, 1.0)  # single-class task
    yt[:, 7] = np.nan  # fully missing task
    yp = rng.normal(size=(G, T))
    ref = Evaluator("ogbg-molpcba").eval({"y_true": yt, "y_pred": yp})["ap"]
    assert average_precision(yt, yp) == pytest.approx(ref, abs=1e-12)
    assert compute_metric("ap", yt, yp) == pytest.approx(ref, abs=1e-12)


# ---------------------------------------------------------- registry / order
def test_registry_and_direction():
    assert METRIC_FNS == {"mae": mae, "rocauc": rocauc, "ap": average_precision, "accuracy": accuracy,
                          "weighted_accuracy": weighted_accuracy}
    assert compute_metric("mae", [[1.0]], [[3.0]]) == pytest.approx(2.0)
    with pytest.raises(ValueError):
        compute_metric("f1", [[1.0]], [[1.0]])
    assert not higher_is_better("mae")
    assert higher_is_better("rocauc") and higher_is_better("ap")
    assert higher_is_better("accuracy") and higher_is_better("weighted_accuracy")


def test_is_better():
    assert is_better("mae", 0.2, 0.3)
    assert not is_better("mae", 0.3, 0.2)
    assert is_better("rocauc", 0.8, 0.7)
    assert not is_better("ap", 0.7, 0.8)
    assert not is_better("ap", 0.5, 0.5)
    nan = float("nan")
    assert is_better("mae", 10.0, nan)
    assert not is_better("mae", nan, 10.0)
    assert not is_better("rocauc", nan, nan)


def test_summary_per_target_and_mean_against_hand_computation():
    from siggate.train.metrics import format_summary, summary

    y = np.array([[1.0, 10.0], [2.0, np.nan], [3.0, 30.0], [4.0, 20.0]])
    p = np.array([[1.5, 12.0], [2.0, 99.0], [2.0, 30.0], [4.0, 14.0]])
    res = summary("regression", y, p, ["a", "b"])
    a, b = res["per_target"]["a"], res["per_target"]["b"]
    assert a["mae"] == pytest.approx((0.5 + 0 + 1 + 0) / 4) and a["rmse"] == pytest.approx(np.sqrt(1.25 / 4))
    assert a["r2"] == pytest.approx(1 - 1.25 / 5.0)  # sum (y - 2.5)^2 = 5
    assert b["mae"] == pytest.approx(8 / 3) and b["rmse"] == pytest.approx(np.sqrt(40 / 3))  # the NaN row skipped
    assert b["r2"] == pytest.approx(1 - 40 / 200)
    assert res["mean"] == pytest.approx({k: (a[k] + b[k]) / 2 for k in ("mae", "rmse", "r2")})
    assert summary("regression", [[2.0], [2.0]], [[1.0], [3.0]])["per_target"]["target0"]["r2"] is None
    # one name per column: one name for two targets scored the first alone under it (helper-175)
    for names in (["a"], ["a", "b", "c"]):
        with pytest.raises(ValueError, match=rf"^names: {len(names)} names for 2 targets; give one name per column$"):
            summary("regression", y, p, names)
    lines = format_summary("test", res)
    assert lines[0] == f"test  a  MAE {a['mae']:.4g}  RMSE {a['rmse']:.4g}  R2 {a['r2']:.4g}"
    assert lines[-1].startswith("test  mean over targets  MAE ") and len(lines) == 3
    # a target without a label in this split is no part of the mean: the line says so (val and test means
    # over other targets read as comparable)
    y[:, 1] = np.nan
    lines = format_summary("test", summary("regression", y, p, ["a", "b"]))
    assert lines[1] == "test  b  MAE n/a  RMSE n/a  R2 n/a"
    assert lines[-1] == f"test  mean over targets (1 of 2; no score for b)  MAE {a['mae']:.4g}  RMSE {a['rmse']:.4g}  " \
        f"R2 {a['r2']:.4g}"
    # a metric undefined for a target that is scored (a ROC-AUC of one class, an R2 of constant labels):
    # its mean is over fewer targets, said beside it (it read as the mean over both)
    yc = np.array([[1.0, 1.0], [0.0, 1.0], [1.0, 1.0], [0.0, 1.0]])
    lines = format_summary("test", summary("multilabel", yc, np.array([[0.9, 0.8], [0.2, 0.7], [0.6, 0.9], [0.4, 0.3]]),
                                           ["act", "act2"]))
    assert lines[-1] == "test  mean over targets  ROC-AUC 1 (1 of 2)  PR-AUC 1 (1 of 2)  accuracy 0.875"


def test_summary_classification_against_sklearn():
    from siggate.train.metrics import summary

    y = np.array([[1, 0], [0, 0], [1, np.nan], [0, 0], [1, 0]], dtype=float)
    p = np.array([[0.9, 0.2], [0.6, 0.1], [0.4, 0.7], [0.2, 0.3], [0.5, 0.4]])
    res = summary("multilabel", y, p, ["x", "z"])
    x = res["per_target"]["x"]
    assert x["rocauc"] == pytest.approx(roc_auc_score(y[:, 0], p[:, 0]))
    assert x["prauc"] == pytest.approx(average_precision_score(y[:, 0], p[:, 0]))
    assert x["accuracy"] == pytest.approx(3 / 5)  # 0.9, 0.6 (wrong), 0.4 (wrong), 0.2, 0.5 (>= 0.5: right)
    z = res["per_target"]["z"]  # one class only: ranking metrics undefined, accuracy over the 4 labels
    assert z["rocauc"] is None and z["prauc"] is None and z["accuracy"] == pytest.approx(1.0)
    assert res["mean"]["rocauc"] == x["rocauc"] and res["mean"]["accuracy"] == pytest.approx((0.6 + 1.0) / 2)


def test_confident_logits_do_not_tie_in_the_runs_per_target_table(monkeypatch):
    """split_probabilities took the sigmoid in float32, exactly 1 above a logit of about 17: a
    confident model's predictions tied, and metrics.json's per-target ROC-AUC read 0.5 where the
    headline metric (of the logits) was 1."""
    import torch
    from torch_geometric.data import Data

    from siggate.data.base import GraphDataset, TaskInfo
    from siggate.train import scoring

    info = TaskInfo(name="toy", task="binary", num_tasks=1, metric="rocauc", target_names=["y"])
    graphs = [Data(x=torch.zeros(1, 1), y=torch.tensor([[float(label)]])) for label in (0, 0, 1, 1)]
    ds = GraphDataset(info=info, splits={"train": [], "val": graphs, "test": []})
    monkeypatch.setattr(scoring, "predict_graphs", lambda *a, **k: torch.tensor([[18.0], [20.0], [25.0], [30.0]]))
    p = scoring.split_probabilities(None, ds, ["val"], None, None)["val"]
    assert len(set(p.view(-1).tolist())) == 4  # float32 made all four exactly 1.0
    assert scoring.split_summary(info, graphs, p, "val")["mean"]["rocauc"] == 1.0


def test_a_split_whose_roc_auc_is_undefined_is_refused_before_training_naming_it():
    """molhiv cut to 50 graphs trained and failed at its first scoring with the metric's words
    alone ("No task has both positive (1) and negative (0) labels"), naming no split and no fix."""
    import torch
    from torch_geometric.data import Data

    from siggate.data.base import DataError, GraphDataset, TaskInfo, one_class_split
    from siggate.train.dataprep import check_scorable

    info = TaskInfo(name="toy", task="binary", num_tasks=1, metric="rocauc", target_names=["y"])

    def graphs(*labels):
        return [Data(x=torch.zeros(1, 1), y=torch.tensor([[float(v)]])) for v in labels]

    ds = GraphDataset(info=info, splits={"train": graphs(0, 1), "val": graphs(0, 0, 0), "test": graphs(0, 1)})
    assert one_class_split(ds) == ("val", 3)
    with pytest.raises(DataError, match=r"^the val split \(3 rows\) holds no target with both classes \(0 and 1\), so "
                                        r"its rocauc is undefined: give it rows of both classes"):
        check_scorable(ds)
    check_scorable(GraphDataset(info=info, splits={"train": graphs(0, 1), "val": graphs(0, 1), "test": []}))
