"""SimForest tree kernels against the slow oracle, node for node, and their cost."""

from __future__ import annotations

import math

import numpy as np
import pytest
import simforest_oracle as oracle
from hypothesis import given, settings
from hypothesis import strategies as st

from distforest.errors import InputError, ParameterError
from distforest.kernels.simfetch import (
    CountingFetch,
    fetch_columns,
    fetch_elementwise,
    fetch_function,
    fetch_rows,
)
from distforest.kernels.simtrees import (
    SimTreeParams,
    apply_tree,
    forest_leaves,
    grow_forest,
    grow_tree,
    predict_forest,
    predict_tree,
)

FIELDS = ("left", "right", "pair_i", "pair_j", "threshold", "missing_go", "value", "depth")


def make_data(n=60, n_test=25, p=4, n_classes=2, missing=0.0, kind="similarity", seed=0):
    """Train matrix M (n x n, symmetric NaN pattern), test matrix Q, labels."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n + n_test, p))
    y_all = (X[:, 0] + 0.8 * rng.normal(size=n + n_test) > 0).astype(np.int64)
    if n_classes == 3:
        y_all += (X[:, 1] > 0.5).astype(np.int64) * (y_all == 0) * 2
    if kind == "distance":
        K = np.sqrt(((X[:, None, :] - X[None, :, :]) ** 2).sum(-1))
    else:
        K = np.round(X @ X.T, 1)  # rounding makes ties between projections
    M, Q = K[:n, :n].copy(), K[n:, :n].copy()
    if missing:
        hole = np.triu(rng.random((n, n)) < missing, 1)
        M[hole | hole.T] = np.nan
        Q[rng.random(Q.shape) < missing] = np.nan
    return M, Q, y_all[:n], n_classes


def assert_same_tree(tree, ref):
    for name in FIELDS:
        np.testing.assert_array_equal(getattr(tree, name), ref[name], err_msg=name)
    np.testing.assert_array_equal(tree.inbag, ref["inbag"])
    np.testing.assert_array_equal(tree.leaves, ref["leaves"])
    np.testing.assert_array_equal(tree.n_node_samples, ref["value"].sum(axis=1))


CASES = {
    "plain": {},
    "missing": {"missing_frac": 0.2},
    "missing_larger": {"missing_frac": 0.2, "missing": "larger"},
    "distance": {"kind": "distance"},
    "distance_missing": {"kind": "distance", "missing_frac": 0.15},
    "depth_leaf": {"max_depth": 3, "min_samples_leaf": 4},
    "no_bootstrap": {"bootstrap": False, "missing_frac": 0.1},
    "pairs3_classes3": {"n_pairs": 3, "n_classes": 3, "missing_frac": 0.1},
    "heavy_missing": {"missing_frac": 0.5, "n_pairs": 2, "max_draws": 2},
}


def _params(case):
    keys = ("n_pairs", "kind", "max_depth", "min_samples_leaf", "missing", "bootstrap", "max_draws")
    return {k: case[k] for k in keys if k in case}


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("seed", [0, 7, 2**63 + 5])
def test_kernel_matches_oracle_node_for_node(name, seed):
    case = CASES[name]
    M, Q, y, k = make_data(
        n_classes=case.get("n_classes", 2),
        missing=case.get("missing_frac", 0.0),
        kind=case.get("kind", "similarity"),
        seed=seed % 1000,
    )
    params = SimTreeParams(**_params(case))
    tree = grow_tree(fetch_rows(M), y, seed, params, n_classes=k)
    ref = oracle.OracleTree(M, y, seed, k, **_params(case))
    assert_same_tree(tree, ref.flat())
    assert tree.n_nodes > 1 or name == "heavy_missing"
    modes = ["stay", "both"] if params.missing == "stay" else [params.missing]
    for mode in modes:
        proba, _ = predict_tree(tree, fetch_columns(Q), Q.shape[0], missing=mode)
        np.testing.assert_allclose(proba, ref.predict(Q, mode), rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(proba.sum(axis=1), 1.0)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**64 - 1),
    n=st.integers(2, 40),
    missing=st.sampled_from([0.0, 0.3]),
    kind=st.sampled_from(["similarity", "distance"]),
    n_pairs=st.integers(1, 3),
    msl=st.integers(1, 3),
    bootstrap=st.booleans(),
    larger=st.booleans(),
)
def test_kernel_matches_oracle_any_seed(seed, n, missing, kind, n_pairs, msl, bootstrap, larger):
    M, _, y, k = make_data(n=n, n_test=1, missing=missing, kind=kind, seed=seed % 97)
    y[0], y[-1] = 0, 1  # two classes at least
    kw = {"n_pairs": n_pairs, "kind": kind, "min_samples_leaf": msl, "bootstrap": bootstrap}
    kw["missing"] = "larger" if larger else "stay"
    tree = grow_tree(fetch_rows(M), y, seed, SimTreeParams(**kw), n_classes=k)
    assert_same_tree(tree, oracle.OracleTree(M, y, seed, k, **kw).flat())


def test_gini_is_scored_on_the_sorted_order_and_minimised():
    """Hand example: sorted by x the labels are 0 0 1 0 1 1 1.

    Children weights times Gini, by split position (after the m-th point):
    m=1: 0 + 6(1 - (4+16)/36) = 2.667; m=2: 0 + 5(1 - (1+16)/25) = 1.6;
    m=3: 3(4/9) + 4(6/16) = 2.833; m=4: 4(6/16) + 0 = 1.5 (best);
    m=5: 5(12/25) + 0 = 2.4; m=6: 6(1/2) + 0 = 3 (worst).  So the root must
    separate x <= 3 from x >= 4.  The objects are stored shuffled so that
    scoring labels in storage order, or maximising, gives another split.
    """
    x_sorted = np.arange(7, dtype=np.float64) + 1.0
    y_sorted = np.array([0, 0, 1, 0, 1, 1, 1])
    perm = np.array([4, 0, 6, 2, 5, 1, 3])
    x, y = x_sorted[perm], y_sorted[perm]
    S = np.outer(x, x)  # S_kj - S_ki = x_k (x_j - x_i): monotone in x_k
    params = SimTreeParams(bootstrap=False, max_depth=1)
    for seed in range(10):
        tree = grow_tree(fetch_rows(S), y, seed, params)
        assert tree.n_nodes == 3
        sides = {tuple(sorted(x[tree.leaves == c])) for c in (1, 2)}
        assert sides == {(1.0, 2.0, 3.0, 4.0), (5.0, 6.0, 7.0)}
        i, j = tree.pair_i[0], tree.pair_j[0]
        assert y[i] != y[j]
        a, b = sorted([4.0 * (x[j] - x[i]), 5.0 * (x[j] - x[i])])
        assert tree.threshold[0] == (a + b) / 2
        counts = {tuple(tree.value[c]) for c in (1, 2)}
        assert counts == {(3.0, 1.0), (0.0, 3.0)}


def test_one_class_or_max_depth_zero_is_a_single_leaf():
    M, _, y, _ = make_data(n=20)
    assert grow_tree(fetch_rows(M), np.zeros(20, dtype=np.int64), 1).n_nodes == 1
    tree = grow_tree(fetch_rows(M), y, 1, SimTreeParams(max_depth=0))
    assert tree.n_nodes == 1 and tree.n_evaluations == 0
    np.testing.assert_array_equal(tree.leaves, 0)


def test_same_seed_same_tree_and_both_trains_like_stay():
    M, _, y, _ = make_data(missing=0.2)
    a = grow_tree(fetch_rows(M), y, 11)
    b = grow_forest(fetch_rows(M), y, [3, 11])[1]
    c = grow_tree(fetch_rows(M), y, 11, SimTreeParams(missing="both"))
    for name in (*FIELDS, "leaves", "inbag"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
        np.testing.assert_array_equal(getattr(a, name), getattr(c, name))
    d = grow_tree(fetch_rows(M), y, 12)
    assert not np.array_equal(a.leaves, d.leaves)


@pytest.mark.parametrize("missing", ["stay", "larger"])
def test_oob_leaves_agree_with_applying_the_tree(missing):
    M, _, y, _ = make_data(missing=0.25)
    tree = grow_tree(fetch_rows(M), y, 5, SimTreeParams(missing=missing))
    assert (tree.leaves >= 0).all() and (tree.inbag == 0).any()
    np.testing.assert_array_equal(apply_tree(tree, fetch_columns(M), len(y)), tree.leaves)
    leaves = forest_leaves([tree, tree])
    assert leaves.shape == (len(y), 2) and leaves.dtype == np.int32
    no_oob = grow_tree(fetch_rows(M), y, 5, SimTreeParams(missing=missing, oob_leaves=False))
    np.testing.assert_array_equal(no_oob.leaves[tree.inbag == 0], -1)
    np.testing.assert_array_equal(no_oob.leaves[tree.inbag > 0], tree.leaves[tree.inbag > 0])


def _balanced(n, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    y = (X[:, 0] + X[:, 1] * X[:, 2] + 0.5 * rng.normal(size=n) > 0).astype(np.int64)
    return X, y


@pytest.mark.parametrize("n_pairs", [1, 3])
def test_similarity_evaluations_are_n_log_n(n_pairs):
    """Each level asks 2 r similarities per object still descending (in-bag or OOB),
    plus one check S(O_i, O_j) per drawn pair (< r per object and per tree).  The
    mean depth of an object in a tree of random-pair splits is about 2 ln n =
    1.39 log2 n (random binary search trees), so the count is about
    2.8 r n log2 n; c = 4 r + 1 leaves room for unlucky splits yet fails for an
    implementation that re-reads a node's members against all pair objects
    of a level or whole rows.
    """
    n = 4000
    X, y = _balanced(n)
    counting = CountingFetch(fetch_elementwise(lambda a, b: (X[a] * X[b]).sum(axis=1)))
    params = SimTreeParams(n_pairs=n_pairs)
    trees = grow_forest(counting, y, range(3), params)
    assert counting.evaluations == sum(t.n_evaluations for t in trees)
    bound = (4 * n_pairs + 1) * n * math.log2(n)
    for t in trees:
        assert t.n_evaluations <= bound, (t.n_evaluations, bound)
        assert counting.calls <= 3 * (t.depth.max() + 2) * 2  # one or two fetches per level
    ratio = max(t.n_evaluations for t in trees) / (n_pairs * n * math.log2(n))
    assert ratio > 1.0  # the bound is not vacuous: the count really is ~ r n log n


def test_prediction_needs_two_evaluations_per_level():
    X, y = _balanced(500)
    Xt = np.random.default_rng(3).normal(size=(120, 3))
    tree = grow_tree(fetch_rows(X @ X.T), y, 2)
    proba, n_eval = predict_tree(tree, fetch_columns(Xt @ X.T), 120)
    node = apply_tree(tree, fetch_columns(Xt @ X.T), 120)
    assert n_eval == 2 * tree.depth[node].sum()
    assert (tree.left[node] == -1).all()  # nothing missing: every object reaches a leaf
    np.testing.assert_allclose(proba, tree.node_proba()[node])


def test_fetch_function_and_elementwise_agree_with_matrix():
    X, y = _balanced(150)
    X = np.round(4 * X)  # integer features: every way of summing gives the same S
    S = X @ X.T
    f_rows = grow_tree(fetch_rows(S), y, 4)
    f_fun = grow_tree(fetch_function(lambda a, b: a @ b.T, X), y, 4)
    f_el = grow_tree(fetch_elementwise(lambda a, b: (X[a] * X[b]).sum(axis=1)), y, 4)
    for name in FIELDS:
        np.testing.assert_array_equal(getattr(f_rows, name), getattr(f_fun, name))
        np.testing.assert_array_equal(getattr(f_rows, name), getattr(f_el, name))


def test_forest_is_accurate_on_easy_data():
    X, y = _balanced(400)
    Xt, yt = _balanced(200, seed=1)
    trees = grow_forest(fetch_rows(X @ X.T), y, range(30))
    proba = predict_forest(trees, fetch_columns(Xt @ X.T), 200)
    assert (proba.argmax(axis=1) == yt).mean() > 0.8
    M = (X @ X.T).copy()
    M[np.random.default_rng(0).random(M.shape) < 0.15] = np.nan
    M = np.where(np.isnan(M) | np.isnan(M.T), np.nan, M)
    for missing in ("stay", "both", "larger"):
        trees = grow_forest(fetch_rows(M), y, range(30), SimTreeParams(missing=missing))
        proba = predict_forest(trees, fetch_columns(Xt @ X.T), 200)
        assert (proba.argmax(axis=1) == yt).mean() > 0.75, missing


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n_pairs": 0}, "n_pairs must be an integer >= 1, got 0"),
        ({"kind": "cosine"}, "kind must be one of"),
        ({"missing": "drop"}, "missing must be one of"),
        ({"max_depth": -1}, "max_depth must be None or an integer >= 0, got -1"),
        ({"min_samples_leaf": 1.5}, "min_samples_leaf must be an integer"),
    ],
)
def test_bad_parameters_say_what_is_wrong(kwargs, match):
    with pytest.raises(ParameterError, match=match):
        SimTreeParams(**kwargs)


def test_bad_inputs_say_what_is_wrong():
    M, _, y, _ = make_data(n=10)
    with pytest.raises(InputError, match="integer array of class codes"):
        grow_tree(fetch_rows(M), y.astype(float), 0)
    with pytest.raises(InputError, match=r"class codes must lie in 0\.\.1"):
        grow_tree(fetch_rows(M), y + 1, 0, n_classes=2)
    with pytest.raises(InputError, match="fetch returned shape"):
        grow_tree(lambda r, o, c: np.zeros(3), y, 0)
    with pytest.raises(ParameterError, match="at least one tree"):
        predict_forest([], fetch_rows(M), 3)


def _grow_in_child(seed: int) -> tuple[np.ndarray, ...]:
    M, _, y, _ = make_data(missing=0.2, seed=3)
    tree = grow_tree(fetch_rows(M), y, seed)
    return tree.left, tree.pair_i, tree.pair_j, tree.threshold, tree.leaves


def test_same_seed_same_tree_in_another_process():
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as pool:
        remote = pool.submit(_grow_in_child, 2**40 + 1).result()
    for a, b in zip(_grow_in_child(2**40 + 1), remote, strict=True):
        np.testing.assert_array_equal(a, b)
