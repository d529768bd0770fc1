"""X-Forest: kernels against a recursive oracle, the estimator, Zarr tiles, products."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
import xforest_oracle as oracle
from distributed import Client, LocalCluster
from sklearn.datasets import load_iris

from distforest.errors import InputError, NotFittedError, ParameterError, StoreError
from distforest.forests.xforest import XForest
from distforest.forests.xforest_similarity import SimilarityProduct
from distforest.kernels import betasim, rptrees
from distforest.parallel.execution import Runner
from distforest.store import open_store


def _data(n: int = 40, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    X[n - 8 : n - 3] = X[0]  # five exact duplicates of row 0
    return X


def _oracle_forest(X, seeds, n_directions, leaf_size, standard):
    built = [oracle.build_tree(X, int(s), n_directions, leaf_size, standard) for s in seeds]
    return [root for root, _ in built], [leaves for _, leaves in built]


@pytest.mark.parametrize("standard", [False, True])
def test_trees_and_similarity_match_recursive_oracle(standard):
    X = _data()
    seeds = np.array([3, 14, 15, 92], dtype=np.uint64)
    batch = rptrees.grow_batch(X, seeds, 2, 3, standard)
    roots, leaves = _oracle_forest(X, seeds, 2, 3, standard)
    for t in range(len(seeds)):
        assert [leaf.depth for leaf in leaves[t]] == batch.depth[:, t].tolist()
        # rows share a kernel leaf exactly when they share an oracle leaf
        same_kernel = batch.leaves[:, t][:, None] == batch.leaves[:, t][None, :]
        ids = np.array([id(leaf) for leaf in leaves[t]])
        assert np.array_equal(same_kernel, ids[:, None] == ids[None, :])
    # duplicates never get separated, and a leaf holds at most leaf_size distinct rows
    assert (batch.leaves[-8:-3] == batch.leaves[0]).all()
    for t in range(len(seeds)):
        for leaf in np.unique(batch.leaves[:, t]):
            members = X[batch.leaves[:, t] == leaf]
            assert len(np.unique(members, axis=0)) <= 3, (t, leaf)
    for beta in (0.0, 0.5, 0.9, 1.0):
        got = betasim.similarity_block(batch.codes, batch.depth, batch.codes, batch.depth, beta)
        np.testing.assert_allclose(got, oracle.similarity(leaves, leaves, beta), atol=2e-7)
    # new rows walked down the explicit trees land where route() sends them
    Q = np.random.default_rng(1).normal(size=(7, 3)) * 2
    offs = np.concatenate([[0], np.cumsum(batch.node_counts)])
    doffs = np.concatenate([[0], np.cumsum(batch.direction_counts)])
    _, qdepth, qcodes = rptrees.route_forest(
        Q, batch.nodes, batch.thresholds, offs, batch.directions, doffs
    )
    qleaves = [[oracle.walk(root, q) for q in Q] for root in roots]
    assert qdepth.tolist() == [[qleaves[t][i].depth for t in range(4)] for i in range(7)]
    got = betasim.similarity_block(qcodes, qdepth, batch.codes, batch.depth, 0.8)
    np.testing.assert_allclose(got, oracle.similarity(qleaves, leaves, 0.8), atol=2e-7)


def test_deep_trees_use_several_code_words():
    """Geometric spacing makes chains deeper than 64 levels: multi-word path codes."""
    X = (2.0 ** -np.arange(200))[:, None]
    X = np.vstack([X, X[:5]])  # duplicates too
    seeds = np.array([5, 6], dtype=np.uint64)
    batch = rptrees.grow_batch(X, seeds, 1, 1, False)
    assert batch.depth.max() > 64 and batch.codes.shape[2] >= 2
    _, leaves = _oracle_forest(X, seeds, 1, 1, False)
    got = betasim.similarity_block(batch.codes, batch.depth, batch.codes, batch.depth, 0.97)
    np.testing.assert_allclose(got, oracle.similarity(leaves, leaves, 0.97), atol=2e-7)


def test_all_equal_rows_make_one_leaf():
    X = np.ones((30, 2))
    batch = rptrees.grow_batch(X, np.array([1], dtype=np.uint64), 2, 3, False)
    assert batch.depth.max() == 0 and batch.node_counts.tolist() == [1]


def test_phi_factorisation_and_product_kernel():
    X = _data(30)
    seeds = np.array([7, 8, 9], dtype=np.uint64)
    batch = rptrees.grow_batch(X, seeds, 3, 2, False)
    _, leaves = _oracle_forest(X, seeds, 3, 2, False)
    V = np.random.default_rng(2).normal(size=(30, 2))
    offs = np.concatenate([[0], np.cumsum(batch.node_counts)]).astype(np.int64)
    for beta in (0.0, 0.6, 1.0):
        S = oracle.similarity(leaves, leaves, beta)
        Phi = np.hstack([oracle.dense_phi(lv, beta) for lv in leaves])
        np.testing.assert_allclose(Phi @ Phi.T / 3, S, atol=1e-12)
        got = (
            betasim.phi_product(
                np.ascontiguousarray(batch.leaves.T),
                batch.nodes[:, 1].copy(),
                batch.nodes[:, 0].copy(),
                offs,
                V,
                beta,
            )
            / 3
        )
        np.testing.assert_allclose(got, S @ V, atol=1e-12)


# -- the estimator on a real LocalCluster ---------------------------------------


@pytest.fixture(scope="module")
def iris() -> np.ndarray:
    return load_iris().data


@pytest.fixture(scope="module")
def fitted(client, iris) -> XForest:
    return (
        XForest(60, n_directions=2, leaf_size=5, random_state=0, tile_size=64)
        .set_execution(client)
        .fit(iris)
    )


def test_fit_attributes_and_in_memory_similarity(fitted, iris):
    n = len(iris)
    assert fitted.leaves_.shape == fitted.depth_.shape == (n, 60)
    assert fitted.codes_.shape[:2] == (n, 60)
    S = fitted.similarity()
    assert S.dims == ("sample_i", "sample_j") and S.dtype == np.float32
    np.testing.assert_allclose(np.diag(S.values), 1.0)
    np.testing.assert_array_equal(S.values, S.values.T)
    assert 0 < S.values.min() and S.values.max() <= 1
    basic = fitted.similarity("basic").values
    # basic similarity is the share of trees with a common leaf
    same = (fitted.leaves_[:, None, :] == fitted.leaves_[None, :, :]).mean(axis=2)
    np.testing.assert_allclose(basic, same, atol=1e-7)
    assert (basic <= S.values + 1e-7).all()


def test_routing_training_rows_reproduces_fit(fitted, iris):
    leaves, depth, codes = fitted.paths(iris)
    np.testing.assert_array_equal(leaves, fitted.leaves_)
    np.testing.assert_array_equal(depth, fitted.depth_)
    np.testing.assert_array_equal(codes, fitted.codes_)
    cross = fitted.cross_similarity(iris[:10])
    assert cross.shape == (10, len(iris)) and cross.dtype == np.float32
    np.testing.assert_array_equal(cross, fitted.similarity().values[:10])
    np.testing.assert_array_equal(
        fitted.cross_similarity(iris[:3], kind="basic"), fitted.similarity("basic").values[:3]
    )


def test_cross_similarity_of_new_rows_matches_oracle(client, iris):
    forest = XForest(5, n_directions=2, leaf_size=4, random_state=3).set_execution(client).fit(iris)
    Xn = (iris - iris.min(0)) / np.ptp(iris, axis=0)
    built = [oracle.build_tree(Xn, int(s), 2, 4, False) for s in forest.seeds_]
    Q = iris[[0, 50, 100]] + np.array([0.3, -0.2, 0.1, 0.05])
    Qn = (Q - iris.min(0)) / np.ptp(iris, axis=0)
    expect = oracle.similarity(
        [[oracle.walk(root, q) for q in Qn] for root, _ in built],
        [leaves for _, leaves in built],
        0.9,
    )
    np.testing.assert_allclose(forest.cross_similarity(Q), expect, atol=2e-7)


def test_matrix_free_product_equals_dense(fitted):
    V = np.random.default_rng(0).normal(size=(fitted.n_samples_, 3))
    for kind in ("beta", "basic"):
        dense = fitted.similarity(kind).values.astype(np.float64)
        np.testing.assert_allclose(fitted.product(V, kind), dense @ V, atol=1e-5)
    v = V[:, 0]
    with fitted.product_session() as op:
        on_cluster = op(v)
    assert on_cluster.shape == v.shape
    # batches fixed by the forest, sums in batch order: the same bits in this process
    here = SimilarityProduct(Runner(None), fitted, fitted.beta)(v)
    assert here.tobytes() == on_cluster.tobytes()


def test_store_tiles_equal_in_memory_and_reload(client, fitted, iris, tmp_path):
    path = tmp_path / "sim.zarr"
    S = fitted.similarity(store=path)
    assert S.dims == ("sample_i", "sample_j")
    assert S.encoding["chunks"] == (64, 64)
    np.testing.assert_array_equal(S.values, fitted.similarity().values)
    fitted.similarity("basic", store=path)  # same fit: added to the same store
    ds = open_store(path)
    assert {"beta_similarity", "basic_similarity", "path", "depth", "leaves"} <= set(ds)
    assert ds.attrs["status"] == "complete" and ds.attrs["method"] == "xforest"
    assert ds["path"].dims == ("sample", "tree", "path_word")
    back = XForest.load(path).set_execution(client)
    np.testing.assert_array_equal(back.codes_, fitted.codes_)
    np.testing.assert_array_equal(back.cross_similarity(iris[:5]), S.values[:5])
    with pytest.raises(StoreError, match="already exists"):
        XForest(3, random_state=0).set_execution(client).fit(iris).similarity(store=path)


def test_same_seed_same_forest_whatever_batches_tiles_and_cluster(client, fitted, iris, tmp_path):
    with (
        LocalCluster(
            n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None
        ) as cluster,
        Client(cluster) as other,
    ):
        again = (
            XForest(60, n_directions=2, leaf_size=5, random_state=0, batch_size=7, tile_size=32)
            .set_execution(other)
            .fit(iris)
        )
        S = again.similarity(store=tmp_path / "s.zarr").values
    np.testing.assert_array_equal(again.codes_, fitted.codes_)
    np.testing.assert_array_equal(again.depth_, fitted.depth_)
    np.testing.assert_array_equal(again.nodes_, fitted.nodes_)
    np.testing.assert_array_equal(again.thresholds_, fitted.thresholds_)
    np.testing.assert_array_equal(S, fitted.similarity().values)
    other_seed = (
        XForest(60, n_directions=2, leaf_size=5, random_state=1).set_execution(client).fit(iris)
    )
    assert not np.array_equal(other_seed.codes_, fitted.codes_)


def test_standard_mode_fits(client, iris):
    forest = (
        XForest(8, mode="standard", leaf_size=5, random_state=0).set_execution(client).fit(iris)
    )
    assert forest.directions_.shape[0] == forest.direction_offset_[-1] > 8
    leaves, _, _ = forest.paths(iris)
    np.testing.assert_array_equal(leaves, forest.leaves_)


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"beta": 1.5}, "beta must be a number in \\[0, 1\\]"),
        ({"mode": "fast"}, "mode must be one of"),
        ({"leaf_size": 0}, "leaf_size must be an integer >= 1"),
        ({"n_directions": 2.5}, "n_directions must be an integer"),
        ({"normalize": "yes"}, "normalize must be True or False"),
    ],
)
def test_bad_parameters(params, match, iris):
    with pytest.raises(ParameterError, match=match):
        XForest(5, **params).fit(iris)


def test_bad_inputs_and_unfitted(client, fitted, iris):
    with pytest.raises(NotFittedError):
        XForest().cross_similarity(iris)
    bad = iris.copy()
    bad[3, 1] = np.nan
    with pytest.raises(InputError, match="missing values"):
        XForest(5).set_execution(client).fit(bad)
    with pytest.raises(InputError, match="fitted on 4"):
        fitted.cross_similarity(iris[:, :3])
    with pytest.raises(ParameterError, match="kind must be one of"):
        fitted.similarity("cosine")
    with pytest.raises(ParameterError, match="store="):
        fitted.similarity(max_in_memory=10)
    assert isinstance(fitted.similarity(), xr.DataArray)


def test_thresholds_do_not_depend_on_the_batch_size_bit_for_bit():
    """Found on Slurm (workers joining one by one change the default batch size).

    With 34 features the projection of a whole batch as one matrix product
    rounds differently from per-tree products, by an ulp here and there.
    """
    X = np.random.default_rng(3).normal(size=(300, 34))
    fits = [
        XForest(120, n_directions=2, random_state=0, batch_size=b)
        .set_execution("synchronous")
        .fit(X)
        for b in (1, 13, 120)
    ]
    for other in fits[1:]:
        assert other.thresholds_.tobytes() == fits[0].thresholds_.tobytes()
        np.testing.assert_array_equal(other.codes_, fits[0].codes_)


@pytest.mark.parametrize("tau", [3, 5, 10])
def test_the_papers_tau_is_leaf_size_plus_one_at_the_boundary(tau):
    """The paper splits a node of tau points and no node of fewer: ``leaf_size = tau - 1``."""
    rng = np.random.default_rng(tau)
    leaf_size = tau - 1
    for n, split in ((tau - 1, False), (tau, True)):
        X = rng.normal(size=(n, 3))  # distinct points: only the size can stop the root
        forest = XForest(20, leaf_size=leaf_size, random_state=0).set_execution("synchronous")
        forest.fit(X)
        root_is_leaf = (forest.depth_ == 0).all(axis=0)
        assert (~root_is_leaf).all() if split else root_is_leaf.all(), (tau, n)
    # inside a tree too: every split node held at least tau points, every leaf fewer
    X = rng.normal(size=(200, 3))
    forest = XForest(10, leaf_size=leaf_size, random_state=1).set_execution("synchronous").fit(X)
    for t in range(10):
        sizes = np.bincount(forest.leaves_[:, t])
        assert sizes.max() <= leaf_size < tau
        nodes = forest.nodes_[forest.node_offset_[t] : forest.node_offset_[t + 1]]
        counts = np.zeros(len(nodes), dtype=np.int64)
        for leaf, size in enumerate(sizes):  # add each leaf's points up to the root
            v = leaf
            while v >= 0 and size:
                counts[v] += size
                v = nodes[v, 0]
        internal = nodes[:, 2] >= 0
        assert internal.any() and (counts[internal] >= tau).all()
