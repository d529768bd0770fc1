"""ProximityForest end to end on a real LocalCluster with worker processes."""

from __future__ import annotations

import numpy as np
import pytest
import zarr
from distributed import Client, LocalCluster
from oracles import (
    dense_oob_proximity,
    dense_oob_rownorm,
    dense_original_proximity,
    dense_rfgap,
)

from distforest import ProximityForest, open_store
from distforest.errors import NotFittedError, ParameterError, StoreError
from distforest.store.run_store import RunStore


@pytest.fixture(scope="module")
def fitted(client, small_classification):
    X, y = small_classification
    return ProximityForest(n_estimators=30, random_state=0).set_execution(client).fit(X, y)


def test_store_proximity_equals_dense_oracle(fitted, tmp_path):
    P = fitted.proximity(store=tmp_path / "p.zarr")
    assert P.dims == ("sample_i", "sample_j")
    assert P.dtype == np.float32
    values = P.values
    expected = dense_original_proximity(fitted.leaves_, fitted.leaves_).astype(np.float32)
    np.testing.assert_array_equal(values, expected)
    np.testing.assert_array_equal(values, values.T)
    np.testing.assert_array_equal(np.diag(values), 1.0)
    assert values.min() >= 0.0 and values.max() <= 1.0


def test_store_layout_and_provenance(fitted, tmp_path):
    fitted.proximity(store=tmp_path / "p.zarr")
    ds = open_store(tmp_path / "p.zarr")
    assert ds.attrs["status"] == "complete"
    assert ds.attrs["params"]["random_state"] == 0
    assert ds.attrs["n_trees"] == 30
    assert len(ds.attrs["input"]["fingerprint"]) == 32
    assert ds["leaves"].dims == ("sample", "tree")
    assert ds["inbag"].dtype == np.uint8
    np.testing.assert_array_equal(ds["leaves"].values, fitted.leaves_)
    np.testing.assert_array_equal(ds["inbag"].values, fitted.inbag_)
    # default tile_size 2048 > n = 300: one chunk holds the whole matrix
    assert ds["proximity"].encoding["chunks"] == (300, 300)
    assert ds["leaves"].encoding["chunks"] == (300, 30)
    forest = zarr.open_group(str(tmp_path / "p.zarr" / "forest"), mode="r")
    assert forest["node_offset"][-1] == forest["feature"].shape[0]
    np.testing.assert_array_equal(forest["seed"][:], fitted.seeds_)


def test_saved_forest_routes_rows_to_the_same_leaves(fitted, small_classification, tmp_path):
    X, _ = small_classification
    np.testing.assert_array_equal(fitted.apply(X), fitted.leaves_)
    rs = fitted.save(tmp_path / "f.zarr")
    from distforest.kernels.apply import apply_nodes

    np.testing.assert_array_equal(apply_nodes(X, rs.read_forest()), fitted.leaves_)


def test_leaf_class_values_predict_like_sklearn(client):
    """A forest of our trees classifies about as well as sklearn's forest."""
    from sklearn.datasets import make_classification
    from sklearn.ensemble import RandomForestClassifier

    X, y = make_classification(900, 10, n_informative=6, random_state=3)
    train, test = slice(0, 600), slice(600, None)
    pf = ProximityForest(50, random_state=0).set_execution(client).fit(X[train], y[train])
    leaves = pf.apply(X[test])
    offsets = np.concatenate([[0], np.cumsum(pf.node_counts_)])
    proba = np.mean([pf.nodes_["value"][offsets[t] + leaves[:, t]] for t in range(50)], axis=0)
    ours = np.mean(proba.argmax(axis=1) == y[test])
    sk = RandomForestClassifier(50, random_state=0).fit(X[train], y[train]).score(X[test], y[test])
    assert ours > 0.8 and abs(ours - sk) < 0.05


def test_in_memory_equals_store(fitted, tmp_path):
    small = fitted.proximity()
    stored = fitted.proximity(store=tmp_path / "p.zarr")
    np.testing.assert_array_equal(small.values, stored.values)


def test_in_memory_refused_for_large_n(fitted):
    with pytest.raises(ParameterError, match="store="):
        fitted.proximity(max_in_memory=100)


def test_unknown_method(fitted):
    with pytest.raises(ParameterError, match="must be one of"):
        fitted.proximity(method="cosine")


@pytest.mark.parametrize("method", ["oob", "rfgap"])
def test_oob_and_rfgap_stores_match_oracles(fitted, tmp_path, method):
    P = fitted.proximity(method=method, store=tmp_path / "p.zarr")
    assert P.name == f"proximity_{method}"
    if method == "oob":
        expected = dense_oob_proximity(fitted.leaves_, fitted.inbag_)
        np.testing.assert_array_equal(P.values, P.values.T)
    else:
        expected = dense_rfgap(fitted.leaves_, fitted.inbag_)
        np.testing.assert_allclose(P.values.sum(axis=1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(P.values, expected, rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(P.values, fitted.proximity(method=method).values)
    # a second matrix in the same store keeps the first one
    fitted.proximity(method="original", store=tmp_path / "p.zarr")
    ds = open_store(tmp_path / "p.zarr")
    assert {"proximity", f"proximity_{method}"} <= set(ds.data_vars)


@pytest.mark.parametrize("method", ["original", "oob", "rfgap"])
def test_matrix_free_product_on_the_cluster(fitted, method):
    V = np.random.default_rng(0).normal(size=(fitted.n_samples_, 3))
    oracle = {
        "original": lambda: dense_original_proximity(fitted.leaves_, fitted.leaves_),
        "oob": lambda: dense_oob_rownorm(fitted.leaves_, fitted.inbag_),
        "rfgap": lambda: dense_rfgap(fitted.leaves_, fitted.inbag_),
    }[method]()
    np.testing.assert_allclose(fitted.product(V, method), oracle @ V, rtol=1e-9, atol=1e-12)
    rows = np.array([5, 0, 17])
    np.testing.assert_allclose(
        fitted.product(V, method, rows=rows), (oracle @ V)[rows], rtol=1e-9, atol=1e-12
    )


def test_product_for_new_rows_is_proximity_to_training_rows(fitted, small_classification):
    X, _ = small_classification
    V = np.random.default_rng(1).normal(size=(fitted.n_samples_, 2))
    new = X[:10]
    got = fitted.product(V, "original", new_rows=new)
    leaves_new = fitted.apply(new)
    expected = dense_original_proximity(leaves_new, fitted.leaves_) @ V
    np.testing.assert_allclose(got, expected, rtol=1e-9)


def test_fit_leaves_keeps_the_leaves_and_drops_the_nodes(fitted, small_classification, client,
                                                         tmp_path):  # fmt: skip
    X, y = small_classification
    light = ProximityForest(n_estimators=30, random_state=0).set_execution(client)
    light.fit_leaves(X, y)
    assert light.nodes_ is None and fitted.nodes_ is not None
    np.testing.assert_array_equal(light.leaves_, fitted.leaves_)
    np.testing.assert_array_equal(light.inbag_, fitted.inbag_)
    np.testing.assert_array_equal(light.node_counts_, fitted.node_counts_)
    with pytest.raises(NotFittedError, match=r"fit_leaves\(\).*apply\(\) to new rows.*fit\(X, y\)"):
        light.apply(X)
    with pytest.raises(NotFittedError, match=r"save\(\) needs them"):
        light.save(tmp_path / "f.zarr")
    assert not (tmp_path / "f.zarr").exists()


def test_not_fitted():
    with pytest.raises(NotFittedError):
        ProximityForest().proximity()


@pytest.mark.parametrize(
    ("param", "value"),
    [("n_estimators", 0), ("task", "clustering"), ("max_features", "all"), ("tile_size", 3),
     ("random_state", -1), ("max_samples", 1.5)],
)  # fmt: skip
def test_bad_parameters_are_named(param, value, small_classification, client):
    X, y = small_classification
    with pytest.raises(ParameterError, match=param):
        ProximityForest(**{param: value}).set_execution(client).fit(X, y)


def test_regression_and_unsupervised(client, tmp_path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 4))
    y = X[:, 0] * 2 + rng.normal(scale=0.1, size=120)
    reg = ProximityForest(10, random_state=0).set_execution(client).fit(X, y)
    assert reg.task_ == "regression" and reg.nodes_["value"].shape[1] == 1
    uns = ProximityForest(10, random_state=0).set_execution(client).fit(X)
    assert uns.task_ == "unsupervised"
    P = uns.proximity(store=tmp_path / "u.zarr").values
    expected = dense_original_proximity(uns.leaves_, uns.leaves_).astype(np.float32)
    np.testing.assert_array_equal(P, expected)
    # rows close in feature space are closer in proximity than far ones
    d = np.linalg.norm(X[:, None] - X[None], axis=2)
    near = d < np.quantile(d, 0.05)
    far = d > np.quantile(d, 0.95)
    assert P[near].mean() > 2 * P[far].mean()


def test_existing_output_is_not_overwritten(client, fitted, tmp_path):
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("precious")
    with pytest.raises(StoreError, match="not a distforest store"):
        fitted.proximity(store=other, overwrite=True)
    assert (other / "notes.txt").read_text() == "precious"
    fitted.proximity(store=tmp_path / "p.zarr")
    other_fit = ProximityForest(5, random_state=1).set_execution(client)
    other_fit.fit(np.random.default_rng(0).normal(size=(20, 3)))
    with pytest.raises(StoreError, match="already exists"):
        other_fit.proximity(store=tmp_path / "p.zarr")
    assert open_store(tmp_path / "p.zarr").sizes["sample_i"] == fitted.n_samples_


def test_incomplete_store_is_detected(fitted, tmp_path):
    rs = fitted.save(tmp_path / "half.zarr")  # forest written, status still running
    assert RunStore.open(rs.path).status == "running"
    with pytest.raises(StoreError, match="incomplete"):
        open_store(rs.path)
    with pytest.warns(UserWarning, match="incomplete"):
        ds = open_store(rs.path, allow_incomplete=True)
    assert "leaves" in ds


def _fit_and_tiles(client, X, y, tmp, **kw):
    pf = ProximityForest(n_estimators=24, random_state=42, **kw).set_execution(client).fit(X, y)
    P = pf.proximity(store=tmp).values
    return pf.leaves_, P


def test_determinism_across_workers_threads_tiles_and_batches(client, small_classification,
                                                               tmp_path):  # fmt: skip
    X, y = small_classification
    ref_leaves, ref_P = _fit_and_tiles(client, X, y, tmp_path / "a.zarr", tile_size=64)
    # same cluster, other tile and batch sizes
    leaves, P = _fit_and_tiles(client, X, y, tmp_path / "b.zarr", tile_size=100, batch_size=5)
    np.testing.assert_array_equal(leaves, ref_leaves)
    np.testing.assert_array_equal(P, ref_P)
    # one worker with three threads
    with (
        LocalCluster(n_workers=1, threads_per_worker=3, host="127.0.0.1",
                     dashboard_address=None) as cluster,
        Client(cluster) as other,
    ):  # fmt: skip
        leaves, P = _fit_and_tiles(other, X, y, tmp_path / "c.zarr", tile_size=300, batch_size=1)
    np.testing.assert_array_equal(leaves, ref_leaves)
    np.testing.assert_array_equal(P, ref_P)


def test_progress_is_reported_for_fit_and_tiles(client, small_classification, tmp_path):
    X, y = small_classification
    events: list[tuple[str, int, int]] = []
    pf = ProximityForest(8, batch_size=2, tile_size=100, random_state=0)
    pf.set_execution(client, progress=lambda *e: events.append(e))
    pf.fit(X, y).proximity(store=tmp_path / "p.zarr")
    fit = [e for e in events if e[0] == "fit"]
    tiles = [e for e in events if e[0] == "tiles"]
    assert fit[0] == ("fit", 0, 4) and fit[-1] == ("fit", 4, 4)
    assert tiles[-1] == ("tiles", 6, 6)  # 3 row blocks: 6 upper-triangle tiles
    assert [d for _, d, _ in fit] == sorted(d for _, d, _ in fit)


def test_errors_inside_a_call_on_the_default_client_propagate(client):
    """An error raised while using the notebook's current client is not swallowed."""
    from distforest.parallel.cluster import use_client

    with pytest.raises(ParameterError, match="boom"), use_client() as current:
        assert current is client  # the session's client is the current default client
        raise ParameterError("boom")
