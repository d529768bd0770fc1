"""New rows against a fitted forest, checked against dense oracles.

The new rows' leaves come from scikit-learn's own trees (the same trees as
the forest's, see ``oracles.sklearn_forest_trees``); the proximities,
weighted predictions and outlier scores are then computed by brute force from
their definitions.
"""

from __future__ import annotations

import numpy as np
import pytest
from oracles import dense_original_proximity, sklearn_forest_trees
from sklearn.datasets import load_wine, make_regression

from distforest import ProximityForest, execution, open_store
from distforest.apps.outliers import (
    FENCE_IQRS,
    MAD_SCALE,
    outlier_flags,
    outlier_flags_new_rows,
    outlier_scores,
    outlier_scores_new_rows,
)


def _dense_cross(leaves_new: np.ndarray, leaves: np.ndarray, inbag: np.ndarray) -> dict:
    """The three proximities of rows out of bag in every tree, by their definitions."""
    n_new, n_trees = leaves_new.shape
    same = leaves_new[:, None, :] == leaves[None, :, :]  # (new, train, tree)
    oob_j = (inbag == 0)[None, :, :]
    oob = (same & oob_j).sum(axis=2) / np.maximum(oob_j.sum(axis=2), 1)
    rfgap = np.zeros((n_new, leaves.shape[0]))
    for i in range(n_new):
        for t in range(n_trees):
            members = leaves[:, t] == leaves_new[i, t]
            rfgap[i] += np.where(members, inbag[:, t], 0) / inbag[members, t].sum()
    return {
        "original": dense_original_proximity(leaves_new, leaves),
        "oob": oob,
        "rfgap": rfgap / n_trees,
    }


@pytest.fixture(scope="module")
def wine():
    X, y = load_wine(return_X_y=True)
    rng = np.random.default_rng(0)
    X_new = X[rng.choice(len(X), 25, replace=False)] * rng.uniform(0.9, 1.1, size=(25, 13))
    X_new[3, 2] = np.nan  # routed by the trees' missing-value branches
    with execution("synchronous"):
        pf = ProximityForest(15, task="classification", random_state=5).fit(X, y)
    trees = sklearn_forest_trees(pf, X, y)
    leaves_new = np.stack([tree.apply(X_new.astype(np.float32)) for tree in trees], axis=1)
    return pf, X, y, X_new, _dense_cross(leaves_new, pf.leaves_, pf.inbag_)


@pytest.mark.parametrize("method", ["original", "oob", "rfgap"])
def test_cross_proximity_in_memory_and_stored(wine, method, tmp_path):
    pf, _, _, X_new, dense = wine
    with execution("synchronous"):
        here = pf.proximity(method, X=X_new)
        stored = pf.proximity(method, X=X_new, store=tmp_path / "cross.zarr")
    assert here.shape == (25, 178) and here.dims == ("sample_i", "sample_j")
    np.testing.assert_allclose(here.values, dense[method], atol=1e-6)
    np.testing.assert_allclose(stored.values, dense[method], atol=1e-6)
    ds = open_store(tmp_path / "cross.zarr")
    assert ds.attrs["fit_id"] == pf.fit_id_ and ds["leaves"].shape == (25, 15)
    if method == "rfgap":
        np.testing.assert_allclose(here.values.sum(axis=1), 1.0, rtol=1e-5)


def test_first_argument_may_be_the_new_rows(wine):
    pf, _, _, X_new, dense = wine
    with execution("synchronous"):
        np.testing.assert_allclose(pf.proximity(X_new).values, dense["original"], atol=1e-6)


def test_proximity_weighted_prediction(wine):
    pf, _, y, X_new, dense = wine
    onehot = np.eye(3)[y]
    with execution("synchronous"):
        for method in ("rfgap", "original"):
            weights = dense[method] @ onehot
            expected = np.argmax(weights / weights.sum(axis=1, keepdims=True), axis=1)
            np.testing.assert_array_equal(pf.predict_proximity(X_new, method), expected)
    X, v = make_regression(n_samples=120, n_features=4, random_state=0)
    with execution("synchronous"):
        reg = ProximityForest(10, task="regression", random_state=0).fit(X, v)
        got = reg.predict_proximity(X[:10] + 0.05)
    trees = sklearn_forest_trees(reg, X, v)
    leaves_new = np.stack([t.apply((X[:10] + 0.05).astype(np.float32)) for t in trees], axis=1)
    P = _dense_cross(leaves_new, reg.leaves_, reg.inbag_)["rfgap"]
    np.testing.assert_allclose(got, P @ v / P.sum(axis=1), rtol=1e-6)


def test_outlier_scores_of_new_rows_on_the_training_scale(wine):
    pf, X, y, X_new, dense = wine
    with execution("synchronous"):
        got = outlier_scores_new_rows(pf, X_new)
        predicted = pf.predict(X_new)
        train_scores = outlier_scores(pf)
        again = outlier_scores_new_rows(pf, X[:20], labels=y[:20])
    P_train = dense_original_proximity(pf.leaves_, pf.leaves_)
    n = len(y)
    raw_train = n / ((P_train**2) * (y[:, None] == y[None, :])).sum(axis=1)
    P_new = dense["original"]
    raw_new = n / ((P_new**2) * (predicted[:, None] == y[None, :])).sum(axis=1)
    expected = np.empty(len(X_new))
    for c in range(3):
        ref = raw_train[y == c]
        median, mad = np.median(ref), MAD_SCALE * np.median(np.abs(ref - np.median(ref)))
        expected[predicted == c] = (raw_new[predicted == c] - median) / mad
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    with execution("synchronous"):  # the form: outlier_scores(pf, X_new)
        np.testing.assert_array_equal(outlier_scores(pf, X_new), got)
        np.testing.assert_array_equal(outlier_scores(pf, X[:20], y[:20]), again)
        np.testing.assert_array_equal(outlier_scores(pf, y), train_scores)  # labels: 1-D
    # training rows given as new rows land in their own leaves (P_ii = 1 among the
    # training rows): the same scores as R's outlier() gives them (float32 matrix tiles)
    np.testing.assert_allclose(again, train_scores[:20], atol=1e-5)


def test_new_rows_are_flagged_by_the_training_rows_fence(wine):
    """A new row's flag is the training rows' (their class's far-out fence on
    ``log1p(score - min)``, by numpy here): training rows given again as new rows keep
    their flags, and the thresholds are the training rows' own."""
    pf, X, y, X_new, _ = wine
    with execution("synchronous"):
        train = outlier_flags(pf)
        new = outlier_flags_new_rows(pf, X_new)
        again = outlier_flags_new_rows(pf, X[:40], labels=y[:40])
    for c in range(3):  # the oracle: numpy's percentiles of the class's log scores
        s = train.scores[y == c]
        u = np.log1p(s - s.min())
        q1, q3 = np.percentile(u, [25, 75])
        expected = s.min() + np.expm1(q3 + FENCE_IQRS * (q3 - q1))
        np.testing.assert_allclose(new.thresholds[c], expected, rtol=1e-6)
    np.testing.assert_allclose(new.thresholds, train.thresholds, rtol=1e-12)
    predicted = np.searchsorted(np.unique(y), pf.predict(X_new))
    np.testing.assert_array_equal(new.flags, new.scores > new.thresholds[predicted])
    np.testing.assert_array_equal(again.flags, again.scores > train.thresholds[y[:40]])


def test_cross_proximity_tiles_on_a_cluster(client, wine, tmp_path):
    """Several tiles as tasks on worker processes (two row arrays named alike are sent)."""
    _, X, y, X_new, _ = wine
    with execution("synchronous"):
        pf = ProximityForest(15, task="classification", random_state=5, tile_size=64).fit(X, y)
        here = pf.proximity("rfgap", X=X_new).values
    with execution(client):
        there = pf.proximity("rfgap", X=X_new, store=tmp_path / "c.zarr").values
        scores = outlier_scores_new_rows(pf, X_new)
    np.testing.assert_array_equal(there, here)
    with execution("synchronous"):
        np.testing.assert_allclose(scores, outlier_scores_new_rows(pf, X_new), rtol=1e-12)


def test_score_command_applies_a_saved_model(tmp_path):
    """Tonight's rows against a stored forest: predictions and outlier scores per ID."""
    import pandas as pd
    from click.testing import CliRunner

    from distforest.cli.main import cli

    X, y = load_wine(return_X_y=True)
    names = [f"f{j}" for j in range(X.shape[1])]
    train = pd.DataFrame(X[::2], columns=names).assign(kind=y[::2])
    new = pd.DataFrame(X[1::2], columns=names).assign(visit=[f"v{i}" for i in range(89)])
    train.to_csv(tmp_path / "train.csv", index=False)
    new[["visit", *reversed(names)]].to_csv(tmp_path / "new.csv", index=False)  # any order
    model = tmp_path / "model.zarr"
    runner = CliRunner()
    fitted = runner.invoke(cli, ["-q", "proximity", str(tmp_path / "train.csv"), "--target",
                                 "kind", "--trees", "12", "--out", str(model)])  # fmt: skip
    assert fitted.exit_code == 0, fitted.output
    scored = runner.invoke(cli, ["-q", "score", str(model), str(tmp_path / "new.csv"), "--id",
                                 "visit", "--out", str(tmp_path / "s.csv")])  # fmt: skip
    assert scored.exit_code == 0, scored.output
    got = pd.read_csv(tmp_path / "s.csv")
    assert list(got.columns) == ["visit", "predicted", "proximity_predicted", "outlier",
                                 "outlier_flag"]  # fmt: skip
    forest = ProximityForest.load(model)
    rows = new[names]
    with execution("synchronous"):
        np.testing.assert_array_equal(got["predicted"], forest.predict(rows))
        np.testing.assert_array_equal(got["proximity_predicted"], forest.predict_proximity(rows))
        np.testing.assert_allclose(got["outlier"], outlier_scores_new_rows(forest, rows))
    assert (got["predicted"] == y[1::2]).mean() > 0.85


@pytest.mark.parametrize("method", ["original", "rfgap"])
def test_top_k_neighbours_of_new_rows_are_the_top_k_of_the_dense_cross_proximity(wine, method):
    pf, _, _, X_new, dense = wine
    k = 12
    with execution("synchronous"):
        nb = pf.proximity_neighbors(k, method, X=X_new, block_rows=7)
        cross = pf.proximity(method, X=X_new).values  # the dense float32 values
    assert nb["index"].shape == (25, k) and nb.attrs["rows"] == "new"
    for i in range(25):
        # proximity descending, ties to the smaller training row (a stable sort of -p)
        order = np.argsort(-cross[i].astype(np.float64), kind="stable")[:k]
        np.testing.assert_array_equal(nb["index"].values[i], order)
        np.testing.assert_array_equal(nb["proximity"].values[i], cross[i][order])
    np.testing.assert_allclose(nb["proximity"].values[:, 0],
                               dense[method].max(axis=1), atol=1e-6)  # fmt: skip


def test_top_k_neighbours_of_new_rows_refusals(wine, tmp_path):
    from distforest.errors import ParameterError

    pf, _, _, X_new, _ = wine
    with pytest.raises(ParameterError, match="'original' or 'rfgap', got 'oob'"):
        pf.proximity_neighbors(5, "oob", X=X_new)
    with pytest.raises(ParameterError, match="pass store=None"):
        pf.proximity_neighbors(5, X=X_new, store=tmp_path / "n.zarr")
