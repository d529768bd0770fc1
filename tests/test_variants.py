"""OOB and RF-GAP proximities and the matrix-free products, against oracles."""

from __future__ import annotations

import numpy as np
import pytest
from oracles import (
    dense_oob_proximity,
    dense_oob_rownorm,
    dense_original_proximity,
    dense_rfgap,
)

from distforest.kernels.leafsums import leaf_inbag_total, leaf_product, normalise
from distforest.kernels.proximity import oob_proximity_tile, rfgap_proximity_tile
from distforest.kernels.trees import TreeParams, fit_tree_batch


def _random_forest_like(seed: int, n: int = 60, trees: int = 15, leaves: int = 7):
    rng = np.random.default_rng(seed)
    leaf = rng.integers(0, leaves, size=(n, trees)).astype(np.int32)
    inbag = rng.poisson(1.0, size=(n, trees)).astype(np.uint8)
    return leaf, inbag


@pytest.mark.parametrize("seed", range(5))
def test_oob_tile_matches_oracle(seed):
    leaves, inbag = _random_forest_like(seed)
    expected = dense_oob_proximity(leaves, inbag).astype(np.float32)
    got = oob_proximity_tile(leaves[:25], leaves[20:], inbag[:25], inbag[20:])
    np.testing.assert_allclose(got, expected[:25, 20:], rtol=1e-6)


@pytest.mark.parametrize("seed", range(5))
def test_rfgap_tile_matches_definition_and_rows_sum_to_one(seed):
    leaves, inbag = _random_forest_like(seed)
    mass = leaf_inbag_total(np.ascontiguousarray(leaves.T), np.ascontiguousarray(inbag.T)).T
    expected = dense_rfgap(leaves, inbag)
    left = rfgap_proximity_tile(leaves[:30], leaves[:30], inbag[:30], inbag[:30], mass[:30])
    right = rfgap_proximity_tile(leaves[:30], leaves[30:], inbag[:30], inbag[30:], mass[:30])
    got = np.hstack([left, right])
    np.testing.assert_allclose(got, expected[:30], rtol=1e-5, atol=1e-7)
    has_oob = (inbag[:30] == 0).any(axis=1)
    np.testing.assert_allclose(got.sum(axis=1)[has_oob], 1.0, rtol=1e-5)


ORACLES = {
    "original": dense_original_proximity,
    "oob": dense_oob_rownorm,
    "rfgap": dense_rfgap,
}


@pytest.mark.parametrize("method", sorted(ORACLES))
@pytest.mark.parametrize("seed", range(3))
def test_leaf_product_equals_dense_product(method, seed):
    leaves, inbag = _random_forest_like(seed, n=80, trees=12)
    V = np.random.default_rng(seed).normal(size=(80, 3))
    if method == "original":
        dense = ORACLES[method](leaves, leaves)
    else:
        dense = ORACLES[method](leaves, inbag)
    lt, it = np.ascontiguousarray(leaves.T), np.ascontiguousarray(inbag.T)
    # two tree batches added together, as the tasks do
    s1, n1 = leaf_product(lt[:5], it[:5], V, lt[:5], it[:5], method)
    s2, n2 = leaf_product(lt[5:], it[5:], V, lt[5:], it[5:], method)
    np.testing.assert_allclose(normalise(s1 + s2, n1 + n2), dense @ V, rtol=1e-10, atol=1e-12)


def test_rfgap_product_is_the_oob_prediction():
    """P_rfgap @ y is the out-of-bag prediction of a real regression forest."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 5))
    y = X[:, 0] + 0.5 * X[:, 1] ** 2 + rng.normal(scale=0.1, size=200)
    params = TreeParams("regression", "random-forest", 1.0, 3, None, True, None, 0)
    batch = fit_tree_batch(X, y, np.arange(40, dtype=np.uint64), params)
    lt, it = np.ascontiguousarray(batch.leaves.T), np.ascontiguousarray(batch.inbag.T)
    sums, norm = leaf_product(lt, it, y[:, None], lt, it, "rfgap")
    prediction = normalise(sums, norm)[:, 0]
    offsets = np.concatenate([[0], np.cumsum(batch.node_counts)])
    tree_pred = np.stack(
        [batch.nodes["value"][offsets[t] + batch.leaves[:, t], 0] for t in range(40)], axis=1
    )
    oob = batch.inbag == 0
    expected = (tree_pred * oob).sum(axis=1) / oob.sum(axis=1)
    np.testing.assert_allclose(prediction, expected, atol=1e-6)


def test_rfgap_product_gives_oob_class_probabilities():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(150, 4))
    y = (X[:, 0] + rng.normal(scale=0.5, size=150) > 0).astype(int) + (X[:, 1] > 1)
    params = TreeParams("classification", "random-forest", "sqrt", 1, None, True, None, 3)
    batch = fit_tree_batch(X, y, np.arange(30, dtype=np.uint64) + 7, params)
    lt, it = np.ascontiguousarray(batch.leaves.T), np.ascontiguousarray(batch.inbag.T)
    onehot = np.eye(3)[y]
    proba = normalise(*leaf_product(lt, it, onehot, lt, it, "rfgap"))
    offsets = np.concatenate([[0], np.cumsum(batch.node_counts)])
    values = batch.nodes["value"]
    tree_proba = np.stack([values[offsets[t] + batch.leaves[:, t]] for t in range(30)], axis=1)
    oob = (batch.inbag == 0)[:, :, None]
    expected = (tree_proba * oob).sum(axis=1) / oob.sum(axis=1)
    np.testing.assert_allclose(proba, expected, atol=1e-6)


def test_products_are_bit_identical_on_any_cluster(client):
    """The same forest and V give the same bits on 2 workers, on 1 thread and in process."""
    from distributed import Client, LocalCluster

    from distforest.forests.products import ProximityProducts
    from distforest.parallel.execution import Runner

    rng = np.random.default_rng(4)
    leaves = rng.integers(0, 40, size=(500, 30)).astype(np.int32)
    inbag = rng.integers(0, 3, size=(500, 30)).astype(np.uint8)
    V = rng.normal(size=(500, 3))
    got = {}
    with (
        LocalCluster(
            n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None
        ) as cluster,  # fmt: skip
        Client(cluster) as single,
    ):
        for name, c in (("two workers", client), ("one thread", single)):
            got[name] = ProximityProducts(Runner(c), leaves, inbag).product(V, "rfgap")
    got["in process"] = ProximityProducts(Runner(None), leaves, inbag).product(V, "rfgap")
    assert got["two workers"].tobytes() == got["one thread"].tobytes()
    assert got["in process"].tobytes() == got["one thread"].tobytes()
    dense = dense_rfgap(leaves, inbag) @ V
    np.testing.assert_allclose(got["one thread"], dense, rtol=1e-10, atol=1e-12)
