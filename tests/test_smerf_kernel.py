"""SMERF split search against a brute-force oracle, and against scikit-learn's CART.

With D = 1[y_a != y_b] the SMERF objective is the weighted Gini impurity and
with D = (y_a - y_b)^2 / 2 the weighted variance, so on data without ties a
SMERF tree (all features, no bootstrap) must make scikit-learn's partition.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

from distforest.kernels.smerf import grow_tree, predict_pairs, sweep_feature


def oracle_sweep(x: np.ndarray, D: np.ndarray, min_leaf: int) -> tuple[float, float]:
    """Every cut, objective summed pair by pair: O(m^3), obviously right."""
    m = len(x)
    values = np.sort(np.unique(x))
    best, thr = np.inf, np.nan
    for lo, hi in itertools.pairwise(values):
        t = 0.5 * (lo + hi)
        children = [np.flatnonzero(x <= t), np.flatnonzero(x > t)]
        if min(len(c) for c in children) < min_leaf:
            continue
        value = sum(sum(D[a, b] for a in c for b in c) / (m * len(c)) for c in children)
        if value < best - 1e-12:
            best, thr = value, t
    return best, thr


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("min_leaf", [1, 3])
def test_sweep_matches_the_oracle(seed, min_leaf):
    rng = np.random.default_rng(seed)
    m = 25
    x = rng.integers(0, 8, m).astype(float)  # ties: no cut between equal values
    Z = rng.normal(size=(m, 2))
    D = ((Z[:, None, :] - Z[None, :, :]) ** 2).sum(-1) - 0.3  # may be negative
    D = (D + D.T) / 2
    got = sweep_feature(x, D, min_leaf)
    want = oracle_sweep(x, D, min_leaf)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-10)
    assert got[1] == want[1]


def _same_partition(a: np.ndarray, b: np.ndarray) -> bool:
    return bool(np.array_equal(a[:, None] == a[None, :], b[:, None] == b[None, :]))


@pytest.mark.parametrize("seed", range(4))
def test_gini_distance_gives_sklearns_classification_tree(seed):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(120, 4))
    y = (X[:, 0] + 0.5 * X[:, 1] ** 2 + 0.3 * rng.normal(size=120) > 0.4).astype(int)
    D = (y[:, None] != y[None, :]).astype(float)
    # big nodes only: in tiny nodes several splits are equally good (e.g. any feature
    # separates two rows), and scikit-learn breaks such ties by its own feature order
    kw = {"max_depth": 2, "min_samples_leaf": 5}
    tree = grow_tree(X, D, seed, max_features=None, bootstrap=False, **kw)
    sk = DecisionTreeClassifier(criterion="gini", random_state=0, **kw).fit(X, y)
    assert _same_partition(tree.apply(X), sk.apply(X))
    assert len(tree.feature) == sk.tree_.node_count
    assert tree.threshold[0] == pytest.approx(sk.tree_.threshold[0])


@pytest.mark.parametrize("seed", range(3))
def test_half_squared_difference_gives_sklearns_regression_tree(seed):
    rng = np.random.default_rng(10 + seed)
    X = rng.normal(size=(80, 3))
    y = X[:, 0] - 2 * X[:, 2] + 0.1 * rng.normal(size=80)
    D = (y[:, None] - y[None, :]) ** 2 / 2
    kw = {"max_depth": 3, "min_samples_leaf": 3}
    tree = grow_tree(X, D, seed, max_features=None, bootstrap=False, **kw)
    sk = DecisionTreeRegressor(random_state=0, **kw).fit(X, y)
    assert _same_partition(tree.apply(X), sk.apply(X))


def test_leaf_pair_means_and_determinism():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(60, 5))
    D = np.abs(X[:, None, 0] - X[None, :, 0])
    a = grow_tree(X, D, 7, max_features="sqrt", min_samples_leaf=4)
    b = grow_tree(X, D, 7, max_features="sqrt", min_samples_leaf=4)
    for field in ("feature", "threshold", "left", "right", "leaf_members", "leaf_offset"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    leaves = a.apply(X)
    P = predict_pairs(a, D, leaves[:5], leaves)
    for i in range(5):
        for j in (0, 17, 59):
            ma = a.leaf_members[a.leaf_offset[leaves[i]] : a.leaf_offset[leaves[i] + 1]]
            mb = a.leaf_members[a.leaf_offset[leaves[j]] : a.leaf_offset[leaves[j] + 1]]
            assert P[i, j] == pytest.approx(D[np.ix_(ma, mb)].mean())
    # the learned distance ranks pairs like the true one
    from scipy.stats import spearmanr

    full = predict_pairs(a, D, leaves, leaves)
    iu = np.triu_indices(60, 1)
    assert spearmanr(full[iu], D[iu]).statistic > 0.6
