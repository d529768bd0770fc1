"""Route rows through flattened trees (the saved forest, no scikit-learn objects).

A saved forest is a set of per-node arrays concatenated over trees, with
``node_offset[t]`` the first node of tree t and child indices local to the
tree.  Routing follows scikit-learn's rule: ``x[feature] <= threshold`` goes
left; a missing value goes where ``missing_go_to_left`` says.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(nogil=True, cache=True)
def apply_forest(X, node_offset, children_left, children_right, feature, threshold,
                 missing_go_to_left):  # pragma: no cover - numba  # fmt: skip
    """Leaf of every row in every tree.

    Parameters
    ----------
    X : ndarray of float32, shape (n, d)
        Rows; float32 as scikit-learn's trees compare them.
    node_offset : ndarray of int64, shape (T + 1,)
    children_left, children_right, feature : ndarray of int32, shape (n_nodes,)
    threshold : ndarray of float64, shape (n_nodes,)
    missing_go_to_left : ndarray of uint8, shape (n_nodes,)

    Returns
    -------
    ndarray of int32, shape (n, T)
        Node index (local to its tree) of the leaf reached.
    """
    n = X.shape[0]
    n_trees = node_offset.shape[0] - 1
    out = np.empty((n, n_trees), dtype=np.int32)
    for t in range(n_trees):
        base = node_offset[t]
        for i in range(n):
            node = 0
            while children_left[base + node] != -1:
                k = base + node
                x = X[i, feature[k]]
                if np.isnan(x):
                    go_left = missing_go_to_left[k] != 0
                else:
                    go_left = x <= threshold[k]
                node = children_left[k] if go_left else children_right[k]
            out[i, t] = node
    return out


def apply_nodes(X: np.ndarray, nodes: dict[str, np.ndarray]) -> np.ndarray:
    """Leaves of ``X`` in a saved forest.

    Parameters
    ----------
    X : ndarray, shape (n, d)
    nodes : dict of str to ndarray
        The forest's flat arrays including ``node_offset``.

    Returns
    -------
    ndarray of int32, shape (n, T)
    """
    return apply_forest(
        np.ascontiguousarray(X, dtype=np.float32),
        nodes["node_offset"].astype(np.int64),
        nodes["children_left"].astype(np.int32),
        nodes["children_right"].astype(np.int32),
        nodes["feature"].astype(np.int32),
        nodes["threshold"].astype(np.float64),
        nodes["missing_go_to_left"].astype(np.uint8),
    )
