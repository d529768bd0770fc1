"""Clustering on similarities: in memory, from Zarr tiles and matrix-free agree."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.cluster import DBSCAN
from sklearn.datasets import load_iris
from sklearn.metrics import adjusted_rand_score

from distforest.apps import clustering as C
from distforest.errors import InputError, ParameterError
from distforest.forests.xforest import XForest


@pytest.fixture(scope="module")
def iris_forest(client):
    X, y = load_iris(return_X_y=True)
    forest = XForest(100, n_directions=2, leaf_size=5, random_state=0, tile_size=64).set_execution(
        client
    )
    return forest.fit(X), y


def test_accuracy_uses_the_best_matching():
    truth = np.array([0, 0, 1, 1, 2, 2])
    assert C.clustering_accuracy(truth, [5, 5, 3, 3, 9, 9]) == 1.0
    assert C.clustering_accuracy(truth, [1, 1, 1, 1, 2, 2]) == pytest.approx(4 / 6)
    # noise is never matched, even when it would fit a class
    assert C.clustering_accuracy(truth, [-1, -1, 1, 1, 2, 2]) == pytest.approx(4 / 6)
    s = C.scores(truth, [5, 5, 3, 3, 9, 9])
    assert s == {"accuracy": 1.0, "ari": 1.0, "nmi": pytest.approx(1.0)}
    with pytest.raises(InputError):
        C.clustering_accuracy(truth, [0, 1])


def test_kernel_kmeans_objective_is_the_feature_space_one():
    """With an explicit feature map (unit rows), the objective is the k-means inertia."""
    rng = np.random.default_rng(0)
    F = np.vstack([rng.normal(0, 0.3, size=(20, 3)) + 5 * np.eye(3)[c] for c in range(3)])
    F /= np.linalg.norm(F, axis=1, keepdims=True)
    labels, objective = C.kernel_kmeans(F @ F.T, 3, n_init=5, random_state=0)
    inertia = sum(((F[labels == c] - F[labels == c].mean(0)) ** 2).sum() for c in range(3))
    assert objective == pytest.approx(inertia, rel=1e-9)
    truth = np.repeat([0, 1, 2], 20)
    assert C.clustering_accuracy(truth, labels) == 1.0
    # more restarts never give a worse objective
    _, one = C.kernel_kmeans(F @ F.T, 3, n_init=1, random_state=0)
    assert objective <= one + 1e-12


def test_in_memory_zarr_and_matrix_free_agree(iris_forest, tmp_path):
    forest, y = iris_forest
    dense = forest.similarity().values
    stored = forest.similarity(store=tmp_path / "s.zarr")
    zarr_op = C.as_operator(stored, max_dense=10)  # force tile-by-tile reading
    assert zarr_op.dense is None
    V = np.random.default_rng(0).normal(size=(len(y), 2))
    np.testing.assert_allclose(zarr_op(V), dense.astype(np.float64) @ V, rtol=1e-10)
    with forest.product_session() as product:
        free = C.as_operator(product)
        np.testing.assert_allclose(free(V), dense @ V, atol=1e-5)
        km_free, obj_free = C.kernel_kmeans(free, 3, n_init=2, random_state=0)
        sp_free = C.spectral(free, 3, random_state=0)
    km_dense, obj_dense = C.kernel_kmeans(dense, 3, n_init=2, random_state=0)
    km_zarr, _ = C.kernel_kmeans(zarr_op, 3, n_init=2, random_state=0)
    assert adjusted_rand_score(km_dense, km_zarr) == 1.0
    assert adjusted_rand_score(km_dense, km_free) == 1.0
    assert obj_free == pytest.approx(obj_dense, rel=1e-5)
    assert C.clustering_accuracy(y, km_dense) > 0.8
    sp_dense = C.spectral(dense, 3, random_state=0)
    assert C.clustering_accuracy(y, sp_dense) > 0.8
    assert adjusted_rand_score(sp_dense, sp_free) > 0.9
    eps = 0.6
    db_dense = C.dbscan(dense, eps, min_samples=5)
    expect = DBSCAN(eps=eps, min_samples=5, metric="precomputed").fit_predict(
        np.sqrt(np.maximum(2 - 2 * dense.astype(np.float64), 0))
    )
    np.testing.assert_array_equal(db_dense, expect)
    np.testing.assert_array_equal(C.dbscan(zarr_op, eps, min_samples=5), db_dense)
    with pytest.raises(ParameterError, match="store"):
        C.dbscan(free, eps)


def test_bad_clustering_parameters(iris_forest):
    forest, _ = iris_forest
    S = forest.similarity().values
    with pytest.raises(ParameterError, match="method must be one of"):
        C.cluster(S, "kmedoids", k=3)
    with pytest.raises(ParameterError, match="needs k"):
        C.cluster(S, "spectral")
    with pytest.raises(ParameterError, match="eps"):
        C.cluster(S, "dbscan", eps=3.0)
    with pytest.raises(ParameterError, match="at most the number of rows"):
        C.kernel_kmeans(S[:2, :2], 3)
    with pytest.raises(InputError, match="square"):
        C.as_operator(np.ones((3, 2)))
