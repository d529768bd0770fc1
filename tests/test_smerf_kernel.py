"""SMERF kernels against the slow oracle of tests/smerf_oracle.py and against scikit-learn.

With D = 1[y_a != y_b] the SMERF objective is the weighted Gini impurity and
with D = (y_a - y_b)^2 / 2 the weighted variance, so a SMERF tree (all
features, no bootstrap) makes scikit-learn's tree.  Ties (two splits with the
same objective, common in small nodes) are broken differently: scikit-learn
visits features in its own random order, we take the first in ours.  The
comparison walks both trees node by node; where the splits differ, it checks
that scikit-learn's split has exactly our split's objective (a tie) and stops
comparing below that node.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import spearmanr
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor
from smerf_oracle import (
    OracleNode,
    oracle_leaf_mean,
    oracle_sweep,
    oracle_tree,
    split_objective,
)

from distforest.kernels import smerf as K


def _distances(rng: np.random.Generator, n: int, missing: float = 0.0) -> np.ndarray:
    Z = rng.normal(size=(n, 2))
    D = ((Z[:, None, :] - Z[None, :, :]) ** 2).sum(-1) - 0.3  # may be negative
    D = (D + D.T) / 2
    if missing:
        hole = np.triu(rng.random((n, n)) < missing, 1)
        D[hole | hole.T] = np.nan
    return D


def _node_sweep(x, D, rows, min_leaf):
    rowsum, rowcnt, _, _ = K.node_sums(D, rows)
    return K.sweep_feature(x, D, rows, rowsum, rowcnt, min_leaf)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("min_leaf", [1, 3])
@pytest.mark.parametrize("missing", [0.0, 0.3])
def test_sweep_matches_the_oracle(seed, min_leaf, missing):
    rng = np.random.default_rng(seed)
    n = 40
    D = _distances(rng, n, missing)
    rows = np.sort(rng.integers(0, n, 30))  # a bootstrap node: repeated rows
    x = rng.integers(0, 8, n).astype(float)[rows]  # ties: no cut between equal values
    got = _node_sweep(x, D, rows, min_leaf)
    want = oracle_sweep(x, D, rows, min_leaf)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-10)
    assert got[1] == want[1]


def test_sweep_skips_a_cut_that_leaves_a_child_without_observed_pairs():
    D = np.array([[np.nan, 1.0, 1.0], [1.0, 0.0, 3.0], [1.0, 3.0, 0.0]])
    rows = np.arange(3)
    x = np.array([0.0, 1.0, 2.0])
    # the cut after row 0 leaves {0} alone, whose only pair is missing
    value, thr = _node_sweep(x, D, rows, 1)
    assert thr == 1.5
    assert value == pytest.approx(oracle_sweep(x, D, rows, 1)[0])


def _walk(tree: K.SmerfTree, v: int, node: OracleNode, log: list[int]) -> None:
    """Node for node: same split projection and threshold, same leaf members."""
    assert tree.n_node_samples[v] == len(node.rows)
    np.testing.assert_allclose(tree.objective[v], node.mean, rtol=1e-10, equal_nan=True)
    if not node.children:
        assert tree.left[v] == -1
        members = tree.leaf_members[tree.leaf_offset[v] : tree.leaf_offset[v + 1]]
        np.testing.assert_array_equal(np.sort(members), np.sort(node.rows))
        return
    s = slice(tree.proj_start[v], tree.proj_start[v + 1])
    np.testing.assert_array_equal(tree.proj_feature[s], node.feats)
    np.testing.assert_array_equal(tree.proj_weight[s], node.weights)
    assert tree.threshold[v] == node.threshold
    log.append(v)
    _walk(tree, int(tree.left[v]), node.children[0], log)
    _walk(tree, int(tree.right[v]), node.children[1], log)


CASES = [
    {"max_features": "sqrt", "bootstrap": True},
    {"max_features": None, "bootstrap": False, "min_samples_leaf": 3},
    {"max_features": 2, "bootstrap": True, "max_depth": 3},
    {"max_features": "sqrt", "bootstrap": True, "oblique": True},
    {"max_features": 3, "bootstrap": False, "oblique": True, "min_samples_leaf": 2},
]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("missing", [0.0, 0.3])
def test_tree_matches_the_oracle_node_for_node(case, missing):
    rng = np.random.default_rng(5)
    n, d = 36, 6
    X = rng.normal(size=(n, d))
    D = _distances(rng, n, missing)
    tree = K.grow_tree(X, D, 11, **case)
    k = K.n_candidates(case["max_features"], d)
    oracle_kw = {key: case[key] for key in ("bootstrap", "oblique", "max_depth") if key in case}
    root, importances = oracle_tree(
        X, D, 11, k=k, min_leaf=case.get("min_samples_leaf", 1), **oracle_kw
    )
    splits: list[int] = []
    _walk(tree, 0, root, splits)
    assert len(splits) >= 3  # a real tree, not a stump
    np.testing.assert_allclose(tree.importances, importances, rtol=1e-9, atol=1e-12)
    # routing: every in-bag member of a leaf is routed to that leaf
    leaves = tree.apply(X)
    for v in np.flatnonzero(tree.left < 0):
        members = tree.leaf_members[tree.leaf_offset[v] : tree.leaf_offset[v + 1]]
        assert (leaves[members] == v).all()


def _compare_with_sklearn(tree, X, D, sk) -> tuple[int, int]:
    """Walk both trees; returns (splits equal, ties).  Fails on any other difference."""
    t = sk.tree_
    same = ties = 0
    stack = [(0, 0, np.arange(X.shape[0]))]
    while stack:
        v, s, rows = stack.pop()
        if t.children_left[s] == -1:
            assert tree.left[v] == -1, f"sklearn node {s} is a leaf, ours {v} is split"
            continue
        assert tree.left[v] >= 0, f"our node {v} is a leaf, sklearn's node {s} is split"
        f, thr = int(tree.feature[v]), float(tree.threshold[v])
        go_left = X[rows, f] <= thr
        sk_left = X[rows, t.feature[s]] <= t.threshold[s]
        if np.array_equal(go_left, sk_left) or np.array_equal(go_left, ~sk_left):
            # the same two children (maybe on the other sides: another feature, same rows)
            same += 1
            sk_l, sk_r = int(t.children_left[s]), int(t.children_right[s])
            if not np.array_equal(go_left, sk_left):
                sk_l, sk_r = sk_r, sk_l
            stack.append((int(tree.left[v]), sk_l, rows[go_left]))
            stack.append((int(tree.right[v]), sk_r, rows[~go_left]))
            continue
        ours = split_objective(D, rows, go_left)
        theirs = split_objective(D, rows, sk_left)
        assert ours == pytest.approx(theirs, rel=1e-12, abs=1e-14), "not a tie"
        ties += 1
    return same, ties


def _float32_exact(X):
    return X.astype(np.float32).astype(np.float64)  # scikit-learn splits float32 values


@pytest.mark.parametrize("seed", range(4))
def test_gini_distance_gives_sklearns_classification_tree(seed):
    rng = np.random.default_rng(seed)
    X = _float32_exact(rng.normal(size=(150, 4)))
    y = (X[:, 0] + 0.5 * X[:, 1] ** 2 + 0.3 * rng.normal(size=150) > 0.4).astype(int)
    D = (y[:, None] != y[None, :]).astype(float)
    tree = K.grow_tree(X, D, seed, max_features=None, bootstrap=False)  # grown to purity
    sk = DecisionTreeClassifier(criterion="gini", random_state=0).fit(X, y)
    same, ties = _compare_with_sklearn(tree, X, D, sk)
    # every split is the same (same children) or a tie; ties are few and only in
    # small nodes, where Gini's counts often make two different splits equal
    assert same >= 12 and ties <= 3
    # the top levels have no ties: same partition and the same importances
    shallow = K.grow_tree(X, D, seed, max_features=None, bootstrap=False, max_depth=3,
                          min_samples_leaf=5)  # fmt: skip
    sk3 = DecisionTreeClassifier(random_state=0, max_depth=3, min_samples_leaf=5).fit(X, y)
    assert _compare_with_sklearn(shallow, X, D, sk3)[1] == 0
    assert len(shallow.left) == sk3.tree_.node_count
    ours = shallow.importances / shallow.importances.sum()
    np.testing.assert_allclose(ours, sk3.feature_importances_, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("seed", range(3))
def test_half_squared_difference_gives_sklearns_regression_tree(seed):
    rng = np.random.default_rng(10 + seed)
    X = _float32_exact(rng.normal(size=(100, 3)))
    y = X[:, 0] - 2 * X[:, 2] + 0.1 * rng.normal(size=100)
    D = (y[:, None] - y[None, :]) ** 2 / 2
    tree = K.grow_tree(X, D, seed, max_features=None, bootstrap=False, min_samples_leaf=2)
    sk = DecisionTreeRegressor(random_state=0, min_samples_leaf=2).fit(X, y)
    same, ties = _compare_with_sklearn(tree, X, D, sk)
    assert ties == 0  # continuous y: no ties, the whole tree is scikit-learn's
    assert same == sk.tree_.node_count // 2 == len(tree.left) // 2
    # importances: in small nodes two features can make the same children, and each
    # tree credits its own, so compare where no two features split alike (the top)
    kw = {"max_depth": 3, "min_samples_leaf": 5}
    shallow = K.grow_tree(X, D, seed, max_features=None, bootstrap=False, **kw)
    sk3 = DecisionTreeRegressor(random_state=0, **kw).fit(X, y)
    np.testing.assert_allclose(
        shallow.importances / shallow.importances.sum(), sk3.feature_importances_, rtol=1e-9
    )


def _forest(X, D, n_trees=20, **kw):
    return K.grow_batch(X, D, np.arange(1, n_trees + 1, dtype=np.uint64), kw)


def _slow_tile(forest, D, leaves_a, leaves_b, oob=False, inbag_a=None, inbag_b=None, fallback=0.0):
    start = forest.leaf_start
    out = np.empty((len(leaves_a), len(leaves_b)))
    T = leaves_a.shape[1]
    for i in range(len(leaves_a)):
        for j in range(len(leaves_b)):
            vals = []
            for t in range(T):
                if oob and (inbag_a[i, t] or inbag_b[j, t]):
                    continue
                ga = forest.node_offset[t] + leaves_a[i, t]
                gb = forest.node_offset[t] + leaves_b[j, t]
                a = forest.leaf_members[start[ga] : start[ga + 1]]
                b = forest.leaf_members[start[gb] : start[gb + 1]]
                v = oracle_leaf_mean(D, a, b)
                if not np.isnan(v):
                    vals.append(v)
            out[i, j] = np.mean(vals) if vals else fallback
    return out


@pytest.mark.parametrize("oob", [False, True])
def test_tile_distance_matches_leaf_pair_means(oob):
    rng = np.random.default_rng(3)
    X = rng.normal(size=(50, 4))
    D = _distances(rng, 50, missing=0.5)
    f = _forest(X, D, 8, max_features=2, min_samples_leaf=3)
    leaves = K.apply(f, X)
    inbag = K.inbag_counts(f, 50)
    Q = rng.normal(size=(7, 4))
    lq = K.apply(f, Q)
    zeros = np.zeros_like(lq)
    # new rows against training rows, and training pairs out of bag
    a, b, ia, ib = (leaves[:9], leaves, inbag[:9], inbag) if oob else (lq, leaves, zeros, inbag)
    got = K.tile_distance(D, a, b, f.node_offset, f.leaf_start, f.leaf_members, oob, ia, ib, -7.0)
    want = _slow_tile(f, D, a, b, oob, ia, ib, -7.0)
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_inbag_counts_are_the_bootstrap():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 3))
    D = _distances(rng, 30)
    f = _forest(X, D, 3)
    inbag = K.inbag_counts(f, 30)
    for t, seed in enumerate((1, 2, 3)):
        boot = K.bootstrap_rows(np.random.default_rng(seed), 30, True)
        np.testing.assert_array_equal(inbag[:, t], np.bincount(boot, minlength=30))


def test_learned_distance_ranks_pairs_with_30_percent_missing():
    """A synthetic setting (|x0 - x1| differences, 6 noise features): 30% of D missing."""
    rng = np.random.default_rng(8)
    n = 200
    X = rng.uniform(-1, 1, size=(n, 8))
    g = X[:, 0] + X[:, 1]
    truth = np.abs(g[:, None] - g[None, :])
    D = truth.copy()
    hole = np.triu(rng.random((n, n)) < 0.3, 1)
    D[hole | hole.T] = np.nan
    f = _forest(X, D, 30, max_features=3)
    Q = rng.uniform(-1, 1, size=(60, 8))
    gq = Q[:, 0] + Q[:, 1]
    lq = K.apply(f, Q)
    z = np.zeros_like(lq)
    pred = K.tile_distance(D, lq, lq, f.node_offset, f.leaf_start, f.leaf_members, False, z, z,
                           float(np.nanmean(D)))  # fmt: skip
    want = np.abs(gq[:, None] - gq[None, :])
    iu = np.triu_indices(60, 1)
    rho = spearmanr(pred[iu], want[iu]).statistic
    # the same forest on the complete D, for scale
    full = _forest(X, truth, 30, max_features=3)
    lf = K.apply(full, Q)
    pf = K.tile_distance(truth, lf, lf, full.node_offset, full.leaf_start, full.leaf_members,
                         False, z, z, 0.0)  # fmt: skip
    rho_full = spearmanr(pf[iu], want[iu]).statistic
    assert rho > 0.85
    assert rho > rho_full - 0.05
    # leaving the missing pairs out beats reading them as 0
    D0 = np.nan_to_num(D)
    f0 = _forest(X, D0, 30, max_features=3)
    l0 = K.apply(f0, Q)
    p0 = K.tile_distance(D0, l0, l0, f0.node_offset, f0.leaf_start, f0.leaf_members, False,
                         z, z, 0.0)  # fmt: skip
    assert rho > spearmanr(p0[iu], want[iu]).statistic + 0.02
    # and the plain Euclidean distance on all 8 features ranks far worse
    eu = np.sqrt(((Q[:, None] - Q[None]) ** 2).sum(-1))
    assert rho > spearmanr(eu[iu], want[iu]).statistic + 0.3


def test_determinism_and_dtype():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(60, 5))
    D = np.abs(X[:, None, 0] - X[None, :, 0])
    a = K.grow_tree(X, D, 7, max_features="sqrt", min_samples_leaf=4, oblique=True)
    b = K.grow_tree(X, D, 7, max_features="sqrt", min_samples_leaf=4, oblique=True)
    for name in ("left", "threshold", "proj_feature", "proj_weight", "leaf_members"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    c = K.grow_tree(X, D.astype(np.float32), 7, max_features="sqrt", min_samples_leaf=4)
    assert c.left.shape[0] > 3
