"""Route rows through flattened trees (the saved forest, no scikit-learn objects).

A saved forest is a set of per-node arrays concatenated over trees, with
``node_offset[t]`` the first node of tree t and child indices local to the
tree.  Routing follows scikit-learn's rule: ``x[feature] <= threshold`` goes
left; a missing value goes where ``missing_go_to_left`` says.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from distforest.kernels.signatures import kernel_input

#: The per-node arrays that route a row to its leaf, in the order tasks take them.
ROUTING_FIELDS = ("children_left", "children_right", "feature", "threshold", "missing_go_to_left")


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
    # read-only, C-contiguous, whoever made them: one compiled apply_forest
    return apply_forest(
        kernel_input(X, np.float32),
        kernel_input(nodes["node_offset"], np.int64),
        kernel_input(nodes["children_left"], np.int32),
        kernel_input(nodes["children_right"], np.int32),
        kernel_input(nodes["feature"], np.int32),
        kernel_input(nodes["threshold"], np.float64),
        kernel_input(nodes["missing_go_to_left"], np.uint8),
    )


@njit(nogil=True, cache=True)
def leaf_value_sums(leaves, node_offset, value, inbag, out_of_bag):  # pragma: no cover - numba
    """Sum over trees of the value of each row's leaf.

    Parameters
    ----------
    leaves : ndarray of int32, shape (n, T)
        Leaf of each row in each tree (local node index).
    node_offset : ndarray of int64, shape (T + 1,)
    value : ndarray of float32, shape (n_nodes, k)
        The nodes' values: class fractions, or the mean target.
    inbag : ndarray of uint8, shape (n, T)
        Bootstrap counts; read only when ``out_of_bag``.
    out_of_bag : bool
        Sum only over the trees where the row is out of bag (``inbag == 0``).

    Returns
    -------
    sums : ndarray of float64, shape (n, k)
    counts : ndarray of int64, shape (n,)
        Trees summed for each row.
    """
    n, n_trees = leaves.shape
    k = value.shape[1]
    sums = np.zeros((n, k), dtype=np.float64)
    counts = np.zeros(n, dtype=np.int64)
    for i in range(n):
        for t in range(n_trees):
            if out_of_bag and inbag[i, t] != 0:
                continue
            node = node_offset[t] + leaves[i, t]
            for c in range(k):
                sums[i, c] += value[node, c]
            counts[i] += 1
    return sums, counts


def mean_leaf_value(
    X: np.ndarray, rows: slice, node_offset: np.ndarray, value: np.ndarray, *routing: np.ndarray
) -> np.ndarray:
    """Mean over the trees of the value of each row's leaf: a forest's prediction.

    A task function: ``X`` and the forest's arrays are shared with the
    workers once; each task routes one block of rows.

    Parameters
    ----------
    X : ndarray of float32, shape (n, d)
    rows : slice
        The rows of ``X`` this task predicts.
    node_offset : ndarray of int64, shape (T + 1,)
    value : ndarray of float32, shape (n_nodes, k)
    *routing : ndarray
        The forest's arrays named in :data:`ROUTING_FIELDS`, in that order.

    Returns
    -------
    ndarray of float64, shape (rows, k)
        Class probabilities (classification) or the predicted value (k = 1).
    """
    offsets = node_offset.astype(np.int64, copy=False)
    leaves = apply_nodes(
        X[rows], {"node_offset": offsets, **dict(zip(ROUTING_FIELDS, routing, strict=True))}
    )
    no_inbag = np.empty((0, 0), dtype=np.uint8)
    sums, counts = leaf_value_sums(leaves, offsets, kernel_input(value, value.dtype), no_inbag,
                                   False)  # fmt: skip
    return sums / np.maximum(counts, 1)[:, None]
