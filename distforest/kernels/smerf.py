"""SMERF trees: splits that minimise the children's average within-node distance.

A node with members M (``m`` rows, a row drawn twice by the bootstrap counts
twice) is split into children c minimising (DESIGN.md section 4)::

    sum_c (1 / (m n_c)) sum_{a, b in c} D_ab          (self-pairs included)

With ``D = 1[y_a != y_b]`` this is the weighted Gini impurity, with
``D = (y_a - y_b)^2 / 2`` the weighted variance: SMERF generalises CART.

:func:`best_split` sweeps every cut of a candidate feature in O(m) per cut
from running sums over the sorted block of D (O(m^2) per candidate, never
O(m^3)); :func:`grow_tree` grows one tree depth first.  This first version
takes a complete in-memory D (no missing pairs yet) and axis-aligned
candidates; the estimator, missing pairs, oblique candidates and tiled
prediction are not built yet (issue 12).

Randomness: one ``numpy.random.Generator`` per tree from its seed; the
bootstrap is drawn first (``rng.integers(0, n, n)``), then each node, in
depth-first order (left child before right), draws its candidate features
with ``rng.choice(d, k, replace=False)`` (all features, in order, when
``k == d``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit


@njit(nogil=True, cache=True)
def sweep_feature(x: np.ndarray, D: np.ndarray, min_leaf: int) -> tuple[float, float]:
    """Best cut of one feature: (objective, threshold), or (inf, nan) if none is allowed.

    ``x`` are the node's values of the feature, ``D`` the node's distance
    block (rows and columns in the same order as ``x``).  Cuts fall between
    distinct consecutive sorted values, at their midpoint; ``<=`` goes left.
    """
    m = x.shape[0]
    order = np.argsort(x, kind="mergesort")
    total = 0.0
    for a in range(m):
        for b in range(m):
            total += D[a, b]
    left = 0.0  # sum over pairs within the first k sorted rows
    cross = 0.0  # sum over pairs (one in the first k, one after)
    best, threshold = np.inf, np.nan
    for k in range(1, m):
        p = order[k - 1]  # row p moves from the right to the left
        to_left, to_right, own = 0.0, 0.0, D[p, p]
        for t in range(m):
            q = order[t]
            if t < k - 1:
                to_left += D[p, q]
            elif t > k - 1:
                to_right += D[p, q]
        left += 2.0 * to_left + own
        cross += to_right - to_left
        if k < min_leaf or m - k < min_leaf:
            continue
        lo, hi = x[order[k - 1]], x[order[k]]
        if lo == hi:
            continue
        right = total - left - 2.0 * cross
        value = left / (m * k) + right / (m * (m - k))
        if value < best:
            best, threshold = value, 0.5 * (lo + hi)
    return best, threshold


@dataclass
class SmerfTree:
    """A flat tree: node arrays (-1 children for leaves) and the in-bag rows of each leaf.

    Attributes
    ----------
    feature, threshold, left, right : ndarray, shape (n_nodes,)
    objective : ndarray, shape (n_nodes,)
        The node's mean pairwise distance ``sum_{a,b in node} D_ab / m^2`` (its
        SMERF objective before it is split).
    n_node_samples : ndarray of int64, shape (n_nodes,)
        In-bag rows reaching the node (with multiplicity).
    leaf_members : ndarray of int64
        In-bag row ids of every leaf, leaf after leaf (with multiplicity).
    leaf_offset : ndarray of int64, shape (n_nodes + 1,)
        ``leaf_members[leaf_offset[v]:leaf_offset[v + 1]]`` are leaf v's rows.
    """

    feature: np.ndarray
    threshold: np.ndarray
    left: np.ndarray
    right: np.ndarray
    objective: np.ndarray
    n_node_samples: np.ndarray
    leaf_members: np.ndarray
    leaf_offset: np.ndarray

    def apply(self, X: np.ndarray) -> np.ndarray:
        """Leaf of every row of ``X``."""
        node = np.zeros(X.shape[0], dtype=np.int64)
        active = self.left[node] >= 0
        while active.any():
            idx = np.flatnonzero(active)
            go_left = X[idx, self.feature[node[idx]]] <= self.threshold[node[idx]]
            node[idx] = np.where(go_left, self.left[node[idx]], self.right[node[idx]])
            active = self.left[node] >= 0
        return node


def _n_candidates(max_features: int | float | str | None, d: int) -> int:
    if max_features is None:
        return d
    if max_features == "sqrt":
        return max(1, int(np.sqrt(d)))
    if max_features == "log2":
        return max(1, int(np.log2(d)))
    if isinstance(max_features, float):
        return max(1, int(max_features * d))
    return min(d, int(max_features))


def grow_tree(
    X: np.ndarray,
    D: np.ndarray,
    seed: int,
    *,
    max_features: int | float | str | None = "sqrt",
    min_samples_leaf: int = 1,
    max_depth: int | None = None,
    bootstrap: bool = True,
) -> SmerfTree:
    """Grow one SMERF tree on rows ``X`` (n, d) with distances ``D`` (n, n).

    A node is split when its within-node distance sum is not zero (not
    "pure"), it has at least ``2 * min_samples_leaf`` in-bag rows, it is
    shallower than ``max_depth`` and some candidate has an allowed cut.
    """
    X = np.ascontiguousarray(X, dtype=np.float64)
    D = np.ascontiguousarray(D, dtype=np.float64)
    n, d = X.shape
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.integers(0, n, n)) if bootstrap else np.arange(n)
    k = _n_candidates(max_features, d)
    feature: list[int] = []
    left: list[int] = []
    right: list[int] = []
    threshold: list[float] = []
    objective: list[float] = []
    size: list[int] = []
    members: dict[int, np.ndarray] = {}
    stack = [(rows, 0, -1, False)]  # (rows, depth, parent, is_right)
    while stack:
        node_rows, depth, parent, is_right = stack.pop()
        v = len(feature)
        if parent >= 0:
            (right if is_right else left)[parent] = v
        block = D[np.ix_(node_rows, node_rows)]
        m = node_rows.shape[0]
        feature.append(-1)
        threshold.append(np.nan)
        left.append(-1)
        right.append(-1)
        objective.append(float(block.sum()) / (m * m))
        size.append(m)
        can_split = block.sum() != 0 and m >= 2 * min_samples_leaf
        if max_depth is not None and depth >= max_depth:
            can_split = False
        best = (np.inf, np.nan, -1)
        if can_split:
            candidates = np.arange(d) if k == d else rng.choice(d, k, replace=False)
            for f in candidates:
                value, thr = sweep_feature(X[node_rows, f], block, min_samples_leaf)
                if value < best[0]:
                    best = (value, thr, int(f))
        if best[2] < 0:
            members[v] = node_rows
            continue
        feature[v], threshold[v] = best[2], best[1]
        go_left = X[node_rows, best[2]] <= best[1]
        # depth first, left child first: push right, then left
        stack.append((node_rows[~go_left], depth + 1, v, True))
        stack.append((node_rows[go_left], depth + 1, v, False))
    n_nodes = len(feature)
    offset = np.zeros(n_nodes + 1, dtype=np.int64)
    for v in range(n_nodes):
        offset[v + 1] = offset[v] + (members[v].shape[0] if v in members else 0)
    flat = [members[v] for v in range(n_nodes) if v in members]
    return SmerfTree(
        feature=np.asarray(feature, dtype=np.int64),
        threshold=np.asarray(threshold, dtype=np.float64),
        left=np.asarray(left, dtype=np.int64),
        right=np.asarray(right, dtype=np.int64),
        objective=np.asarray(objective, dtype=np.float64),
        n_node_samples=np.asarray(size, dtype=np.int64),
        leaf_members=np.concatenate(flat).astype(np.int64) if flat else np.empty(0, np.int64),
        leaf_offset=offset,
    )


def predict_pairs(tree: SmerfTree, D: np.ndarray, leaves_a: np.ndarray, leaves_b: np.ndarray):
    """Predicted distance of pairs (a, b): mean of D over the in-bag members of their leaves."""
    out = np.empty((leaves_a.shape[0], leaves_b.shape[0]))
    off, mem = tree.leaf_offset, tree.leaf_members
    cache: dict[tuple[int, int], float] = {}
    for i, la in enumerate(leaves_a):
        for j, lb in enumerate(leaves_b):
            key = (int(la), int(lb))
            if key not in cache:
                ma, mb = mem[off[la] : off[la + 1]], mem[off[lb] : off[lb + 1]]
                cache[key] = float(D[np.ix_(ma, mb)].mean())
            out[i, j] = cache[key]
    return out
