"""Numba kernel: within-class sums of squared co-leaf counts, by pairs of trees.

With ``c_ij`` the number of trees in which rows i and j share a leaf,

    S_i = sum_{j of i's class} c_ij^2
        = sum_{t, s} |{j of i's class : leaf_t(j) = leaf_t(i), leaf_s(j) = leaf_s(i)}|

so ``S_i`` adds, over every ordered pair of trees ``(t, s)``, the size of
i's cell when the rows are grouped by (leaf in t, class, leaf in s).  Per
tree ``t`` the rows are ordered by (leaf in t, class) once (two stable
counting sorts); then per tree ``s`` one gather of the leaves of ``s`` in
that order and two sequential passes per group count every cell.  The work
is ``O(n)`` per pair of trees whatever the leaf sizes (the leaf-mate walk of
:func:`distforest.kernels.leafsums.squared_product` costs the sum of leaf
sizes, which grows as ``n^2 / leaves`` per tree), and every number is an
integer: sums over any split of the trees into blocks, in any order, are exact.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(nogil=True, cache=True)
def _rows_by_class(codes):  # pragma: no cover - numba
    """The rows ordered by class, stably (a counting sort: the codes are 0 .. k-1)."""
    n = codes.shape[0]
    top = 0
    for i in range(n):
        top = max(top, codes[i])
    starts = np.zeros(top + 2, dtype=np.int64)
    for i in range(n):
        starts[codes[i] + 1] += 1
    for c in range(top + 1):
        starts[c + 1] += starts[c]
    order = np.empty(n, dtype=np.int32)
    for i in range(n):
        order[starts[codes[i]]] = i
        starts[codes[i]] += 1
    return order


@njit(nogil=True, cache=True)
def _pair_sums(leaves_a, leaves_b, codes, same):  # pragma: no cover - numba
    n_a, n = leaves_a.shape
    by_class = _rows_by_class(codes)
    n_b = leaves_b.shape[0]
    out = np.zeros(n, dtype=np.int64)
    top_a = 0
    for t in range(n_a):
        for i in range(n):
            top_a = max(top_a, leaves_a[t, i])
    top_b = 0
    for s in range(n_b):
        for i in range(n):
            top_b = max(top_b, leaves_b[s, i])
    starts = np.zeros(top_a + 2, dtype=np.int64)
    order = np.empty(n, dtype=np.int32)
    bounds = np.empty(n + 1, dtype=np.int64)
    cell = np.empty(n, dtype=np.int32)
    acc = np.zeros(n, dtype=np.int64)
    count = np.zeros(top_b + 1, dtype=np.int64)
    stamp = np.full(top_b + 1, -1, dtype=np.int64)
    group_id = 0
    for t in range(n_a):
        lt = leaves_a[t]
        # rows by (leaf in t, class): a stable counting sort by leaf of the rows by class
        starts[:] = 0
        for i in range(n):
            starts[lt[i] + 1] += 1
        for leaf in range(top_a + 1):
            starts[leaf + 1] += starts[leaf]
        for q in range(n):
            i = by_class[q]
            order[starts[lt[i]]] = i
            starts[lt[i]] += 1
        n_groups = 0
        bounds[0] = 0
        for p in range(1, n):
            i, h = order[p], order[p - 1]
            if lt[i] != lt[h] or codes[i] != codes[h]:
                n_groups += 1
                bounds[n_groups] = p
        n_groups += 1
        bounds[n_groups] = n
        for s in range(t if same else 0, n_b):
            weight = 1 if same and s == t else 2
            ls = leaves_b[s]
            for p in range(n):
                cell[p] = ls[order[p]]
            for g in range(n_groups):
                lo, hi = bounds[g], bounds[g + 1]
                for p in range(lo, hi):  # a stamp per group: no pass to reset the counts
                    leaf = cell[p]
                    if stamp[leaf] != group_id:
                        stamp[leaf] = group_id
                        count[leaf] = 0
                    count[leaf] += 1
                for p in range(lo, hi):
                    acc[p] += weight * count[cell[p]]
                group_id += 1
        for p in range(n):
            out[order[p]] += acc[p]
            acc[p] = 0
    return out


def pair_square_sums(
    leaves_a: np.ndarray, leaves_b: np.ndarray, codes: np.ndarray, same: bool
) -> np.ndarray:
    """Within-class sums of squared co-leaf counts over the pairs of two blocks of trees.

    Parameters
    ----------
    leaves_a, leaves_b : ndarray of int, shape (T_a, n), (T_b, n)
        Leaves of all the training rows in the trees of each block, trees first.
    codes : ndarray of int, shape (n,)
        Class code of every row, ``0 .. k - 1`` (all 0: one class).
    same : bool
        Both blocks are the same trees: the pairs ``t <= s`` of the block
        (``t = s`` once, ``t < s`` twice); else every ``(t, s)`` twice.

    Returns
    -------
    ndarray of int64, shape (n,)
        The block pair's part of ``S_i``: adding the parts of every pair of
        blocks ``a <= b`` of a partition of the trees gives
        ``sum_{j of i's class} c_ij^2`` exactly.
    """
    return _pair_sums(
        np.ascontiguousarray(leaves_a, dtype=np.int32),
        np.ascontiguousarray(leaves_b, dtype=np.int32),
        np.ascontiguousarray(codes, dtype=np.int32),
        bool(same),
    )


def warm_up() -> None:
    """Compile (or load from cache) the kernel before fanning out."""
    leaves = np.zeros((1, 2), dtype=np.int32)
    pair_square_sums(leaves, leaves, np.zeros(2, dtype=np.int32), True)
