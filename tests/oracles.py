"""Slow, obviously correct reference implementations the kernels must match."""

from __future__ import annotations

import numpy as np


def dense_original_proximity(leaves_i: np.ndarray, leaves_j: np.ndarray) -> np.ndarray:
    """Fraction of trees in which two rows share a leaf, by brute force.

    ``leaves_*`` are (rows, trees); every pair and tree is compared.
    """
    same = leaves_i[:, None, :] == leaves_j[None, :, :]
    return same.mean(axis=2)


def dense_weighted_matches(leaves_i, leaves_j, weights_i, weights_j) -> np.ndarray:
    """sum_t w_i[t, a] w_j[t, b] [leaf_t(a) == leaf_t(b)], trees first layout."""
    out = np.zeros((leaves_i.shape[1], leaves_j.shape[1]))
    for t in range(leaves_i.shape[0]):
        same = leaves_i[t][:, None] == leaves_j[t][None, :]
        out += same * np.outer(weights_i[t], weights_j[t])
    return out


def dense_oob_proximity(leaves: np.ndarray, inbag: np.ndarray) -> np.ndarray:
    """R's OOB proximity: shared-leaf count over trees where both are OOB."""
    oob = inbag == 0
    both = oob[:, None, :] & oob[None, :, :]
    same = leaves[:, None, :] == leaves[None, :, :]
    num = (both & same).sum(axis=2)
    den = both.sum(axis=2)
    return np.where(den > 0, num / np.maximum(den, 1), 0.0)


def dense_oob_rownorm(leaves: np.ndarray, inbag: np.ndarray) -> np.ndarray:
    """sum_t o_i o_j [same leaf] / sum_t o_i (the factorisable OOB weighting)."""
    oob = inbag == 0
    both = oob[:, None, :] & oob[None, :, :]
    same = leaves[:, None, :] == leaves[None, :, :]
    norm = oob.sum(axis=1)[:, None]
    return np.where(norm > 0, (both & same).sum(axis=2) / np.maximum(norm, 1), 0.0)


def dense_rfgap(leaves: np.ndarray, inbag: np.ndarray) -> np.ndarray:
    """RF-GAP by its definition, looping over rows and trees."""
    n, n_trees = leaves.shape
    P = np.zeros((n, n))
    for i in range(n):
        used = 0
        for t in range(n_trees):
            if inbag[i, t] != 0:
                continue
            members = leaves[:, t] == leaves[i, t]
            mass = inbag[members, t].sum()
            if mass == 0:
                continue
            used += 1
            P[i] += np.where(members, inbag[:, t], 0) / mass
        if used:
            P[i] /= used
    return P


def sklearn_forest_trees(pf, X: np.ndarray, y: np.ndarray) -> list:
    """The scikit-learn trees a random forest grows for a ProximityForest's bootstraps.

    Each tree of a supervised ``ProximityForest`` is the tree scikit-learn's
    ``RandomForest*`` fits for the same bootstrap: the whole X, the in-bag
    counts as sample weights, the tree's own seed (drawn right after the
    bootstrap from the tree's generator).  Checks each against the forest's
    recorded leaves.
    """
    from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

    trees = []
    for t, seed in enumerate(pf.seeds_):
        rng = np.random.default_rng(int(seed))
        rng.integers(0, len(X), size=len(X))  # the bootstrap draw comes first
        tree_seed = int(rng.integers(0, 2**31 - 1))
        if pf.task_ == "classification":
            tree = DecisionTreeClassifier(max_features="sqrt", random_state=tree_seed)
        else:
            tree = DecisionTreeRegressor(max_features=1.0, random_state=tree_seed)
        tree.fit(X, y, sample_weight=pf.inbag_[:, t].astype(np.float64))
        np.testing.assert_array_equal(tree.apply(X.astype(np.float32)), pf.leaves_[:, t])
        trees.append(tree)
    return trees
