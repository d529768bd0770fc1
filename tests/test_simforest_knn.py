"""k-NN with a SimForest as metric: ``apply``, the "simforest" similarity, models, CLI."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_iris, make_classification

from distforest.apps.knn import FOREST_GROUP, KNNClassifier, KNNRegressor, load_model, save_model
from distforest.errors import NotFittedError, ParameterError
from distforest.forests import simforest as simforest_module
from distforest.forests.forest_similarity import (
    FOREST_METRICS,
    SimForestSimilarity,
    load_similarity,
)
from distforest.forests.simforest import SimilarityForestClassifier
from distforest.parallel.execution import execution


@pytest.fixture(autouse=True)
def _in_process():
    """Every test runs its tasks in this process unless it asks for the cluster."""
    with execution("synchronous"):
        yield


def _incomplete_rbf(n: int = 120, missing: float = 0.2) -> tuple[np.ndarray, np.ndarray]:
    """A symmetric RBF matrix with ``missing`` of its off-diagonal entries NaN, and labels."""
    X, y = make_classification(n_samples=n, n_features=5, n_informative=3, random_state=4)
    S = np.exp(-((X[:, None, :] - X[None, :, :]) ** 2).sum(axis=2) / X.shape[1])
    rng = np.random.default_rng(5)
    hole = np.triu(rng.random(S.shape) < missing, 1)
    S[hole | hole.T] = np.nan
    return S, y


@pytest.mark.parametrize("missing", ["stay", "both", "larger"])
def test_apply_on_the_training_matrix_gives_the_training_leaves(missing):
    S, y = _incomplete_rbf()
    forest = SimilarityForestClassifier(n_estimators=15, missing=missing, random_state=3)
    forest.fit(S, y)
    nodes = forest.apply(S)  # S is also the training x training "test" matrix
    assert nodes.dtype == np.int32 and nodes.shape == (S.shape[0], 15)
    # every training object, in bag or out of bag, ends where training sent it
    np.testing.assert_array_equal(nodes, forest.leaves_)
    assert (forest.inbag_ == 0).any()
    inner = np.array([forest.trees_[t].left[nodes[:, t]] >= 0 for t in range(15)]).T
    if missing == "larger":
        assert not inner.any()  # a missing value follows the larger child down to a leaf
    else:
        assert inner.any()  # held at inner nodes by missing similarities: the test means it


@pytest.mark.parametrize("metric", ["rbf", "cosine", "euclidean"])
def test_apply_on_training_features_gives_the_training_leaves(metric):
    X, y = make_classification(n_samples=150, n_features=6, n_informative=4, random_state=1)
    forest = SimilarityForestClassifier(n_estimators=12, metric=metric, random_state=2).fit(X, y)
    np.testing.assert_array_equal(forest.apply(X), forest.leaves_)


def test_apply_is_the_traversal_of_prediction(monkeypatch):
    # oracle: the class distribution of the node apply() gives, averaged over the trees,
    # is predict_proba (missing="stay": one node per object and tree)
    S, y = _incomplete_rbf()
    train, test = np.arange(0, 120, 2), np.arange(1, 120, 2)
    forest = SimilarityForestClassifier(n_estimators=10, random_state=0)
    forest.fit(S[np.ix_(train, train)], y[train])
    Q = S[np.ix_(test, train)]
    nodes = forest.apply(Q)
    expected = np.zeros((test.size, 2))
    for t, tree in enumerate(forest.trees_):
        expected += tree.node_proba()[nodes[:, t]]
    np.testing.assert_allclose(forest.predict_proba(Q), expected / len(forest.trees_))
    # any number of test-row blocks (tasks) gives the same nodes
    monkeypatch.setattr(simforest_module, "BLOCK_BYTES", 8 * len(forest.pair_ids_) * 7)
    np.testing.assert_array_equal(forest.apply(Q), nodes)


def test_simforest_cross_similarity_equals_dense_oracle():
    X, y = load_iris(return_X_y=True)
    Xq = X[::7] + 0.05
    sim = SimForestSimilarity(n_estimators=20, random_state=1).fit(X, y)
    S = sim.cross_similarity(Xq)
    forest = sim.forest_
    lq, lf = forest.apply(Xq), forest.leaves_
    expected = np.zeros((Xq.shape[0], X.shape[0]))
    for q in range(Xq.shape[0]):
        for j in range(X.shape[0]):
            shared = sum(lq[q, t] == lf[j, t] for t in range(lf.shape[1]))
            expected[q, j] = shared / lf.shape[1]
    assert S.dtype == np.float64 and S.shape == expected.shape
    np.testing.assert_allclose(S, expected, rtol=0, atol=1e-6)
    assert 0.0 < S.max() <= 1.0
    # a training row against the training rows: 1 with itself
    np.testing.assert_allclose(np.diag(sim.cross_similarity(X[:10])[:, :10]), 1.0)


def test_simforest_similarity_passes_forest_parameters_and_reloads(tmp_path):
    X, y = load_iris(return_X_y=True)
    sim = SimForestSimilarity(8, 0, metric="cosine", max_depth=2, bootstrap=False).fit(X, y)
    assert sim.forest_.metric == "cosine" and sim.forest_.max_depth == 2
    assert max(int(t.depth.max()) for t in sim.forest_.trees_) <= 2
    sim.save(tmp_path / "sim.zarr")
    again = load_similarity("simforest", tmp_path / "sim.zarr")
    assert isinstance(again, SimForestSimilarity)
    np.testing.assert_array_equal(again.cross_similarity(X[1::3]), sim.cross_similarity(X[1::3]))
    assert not [p for p in (tmp_path / "sim.zarr").rglob("*") if p.suffix in (".pkl", ".pickle")]


def test_knn_with_simforest_metric_classifies_and_is_deterministic():
    assert "simforest" in FOREST_METRICS
    X, y = load_iris(return_X_y=True)
    params = {"n_neighbors": 5, "metric": "simforest", "n_estimators": 25}
    model = KNNClassifier(**params, random_state=0).fit(X[::2], y[::2])
    accuracy = (model.predict(X[1::2]) == y[1::2]).mean()
    assert accuracy > 0.85, accuracy  # chance is 1/3
    same = KNNClassifier(**params, random_state=0).fit(X[::2], y[::2])
    d_a, i_a = model.kneighbors(X[1::2])
    d_b, i_b = same.kneighbors(X[1::2])
    np.testing.assert_array_equal(i_a, i_b)
    np.testing.assert_array_equal(d_a, d_b)
    other = KNNClassifier(**params, random_state=1).fit(X[::2], y[::2])
    assert not np.array_equal(other.similarity_.forest_.leaves_, model.similarity_.forest_.leaves_)


def test_saved_knn_model_with_simforest_metric_predicts_identically(tmp_path):
    X, y = load_iris(return_X_y=True)
    labels = np.array(["setosa", "versicolor", "virginica"])[y]
    model = KNNClassifier(n_neighbors=4, weights="distance", metric="simforest",
                          normalize="zscore", n_estimators=15, random_state=7)  # fmt: skip
    model.fit(X[::2], labels[::2])
    path = tmp_path / "knn.zarr"
    save_model(model, path)
    assert (path / FOREST_GROUP).is_dir()
    assert not [p for p in path.rglob("*") if p.suffix in (".pkl", ".pickle")]
    again = load_model(path)
    assert isinstance(again.similarity_, SimForestSimilarity)
    np.testing.assert_array_equal(again.predict(X[1::2]), model.predict(X[1::2]))
    np.testing.assert_array_equal(again.predict_proba(X[1::2]), model.predict_proba(X[1::2]))
    np.testing.assert_array_equal(again.kneighbors(X[1::2])[0], model.kneighbors(X[1::2])[0])


def test_simforest_metric_needs_class_labels():
    X, y = load_iris(return_X_y=True)
    with pytest.raises(ParameterError, match=r"needs class labels.*use KNNClassifier"):
        KNNRegressor(metric="simforest", n_estimators=5).fit(X, X[:, 0])
    with pytest.raises(ParameterError, match=r"needs class labels.*use KNNClassifier"):
        KNNRegressor(metric=SimForestSimilarity(5)).fit(X, y.astype(float))
    with pytest.raises(ParameterError, match=r"call fit\(X, y\)"):
        SimForestSimilarity(5).fit(X)
    with pytest.raises(ParameterError, match="feature rows"):
        SimForestSimilarity(5, metric="precomputed").fit(X, y)
    with pytest.raises(NotFittedError):
        SimForestSimilarity(5).cross_similarity(X)


def test_simforest_metric_on_the_cluster_and_from_the_command_line(tmp_path, client):
    import pandas as pd
    from click.testing import CliRunner

    from distforest.cli.main import cli

    X, y = load_iris(return_X_y=True)
    params = {"n_neighbors": 5, "metric": "simforest", "n_estimators": 10, "random_state": 3}
    here = KNNClassifier(**params).fit(X[::2], y[::2])
    # the similarity travels to the workers; its queries are routed inside each search task
    with execution(client):
        there = KNNClassifier(**params, batch_size=15).fit(X[::2], y[::2])
        d_b, i_b = there.kneighbors(X[1::2])
    d_a, i_a = here.kneighbors(X[1::2])
    np.testing.assert_array_equal(i_a, i_b)
    np.testing.assert_array_equal(d_a, d_b)

    names = ["sl", "sw", "pl", "pw"]
    frame = pd.DataFrame(X, columns=names).assign(kind=np.array(["a", "b", "c"])[y])
    frame.iloc[::2].to_csv(tmp_path / "train.csv", index=False)
    frame.iloc[1::2].to_csv(tmp_path / "test.csv", index=False)
    model_path = tmp_path / "model.zarr"
    runner = CliRunner()
    fit = ["-q", "knn", "fit", tmp_path / "train.csv", "--target", "kind", "--metric",
           "simforest", "--k", "5", "--trees", "10", "--seed", "3",
           "--scheduler", client.scheduler.address]  # fmt: skip
    result = runner.invoke(cli, [str(a) for a in [*fit, "--out", model_path]])
    assert result.exit_code == 0, result.output
    test_csv, out_csv = tmp_path / "test.csv", tmp_path / "p.csv"
    predict = ["-q", "knn", "predict", model_path, test_csv, "--out", out_csv]
    result = runner.invoke(cli, [str(a) for a in predict])
    assert result.exit_code == 0, result.output
    got = pd.read_csv(tmp_path / "p.csv")["kind"].to_numpy()
    oracle = KNNClassifier(**params).fit(X[::2], frame["kind"].to_numpy()[::2])
    np.testing.assert_array_equal(got, oracle.predict(X[1::2]))
    # a numeric target: a clear error, non-zero exit, no model written
    frame.drop(columns="kind").to_csv(tmp_path / "numeric.csv", index=False)
    bad = [*fit[:3], tmp_path / "numeric.csv", "--target", "pw", *fit[6:], "--task",
           "regression", "--out", tmp_path / "bad.zarr"]  # fmt: skip
    result = runner.invoke(cli, [str(a) for a in bad])
    assert result.exit_code != 0
    assert "needs class labels" in result.output and "KNNClassifier" in result.output
    assert not (tmp_path / "bad.zarr").exists()
