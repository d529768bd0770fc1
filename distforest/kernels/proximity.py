"""Numba kernels for proximity tiles.

A proximity tile ``P[I, J]`` compares, tree by tree, the leaf of every row of
block ``I`` with the leaf of every row of block ``J``.  Comparing all pairs
costs ``|I| |J| T``; instead, per tree both blocks are sorted by leaf id (a
radix sort: :func:`leaf_order`) and their distinct leaves merged, so the cost
is ``T (|I| + |J|)`` plus one update per pair that really shares a leaf.  With
fully grown trees most leaves hold a handful of rows, so the tile is dominated
by writing it, not by the comparisons.

All kernels take leaves laid out as ``(tree, row)`` (C-contiguous int32), so
that one tree's leaves of a block are contiguous.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numba import njit

from distforest.kernels.signatures import kernel_input

#: Bits of a leaf id sorted per pass of :func:`leaf_order`'s radix sort.
RADIX_BITS = 11


@njit(nogil=True, cache=True)
def leaf_order(leaves):  # pragma: no cover - numba
    """Per tree, a block's rows ordered by leaf id, and their leaf ids in that order.

    A stable least-significant-digit radix sort (``RADIX_BITS`` bits a pass,
    as many passes as the largest leaf id needs): rows of one leaf keep their
    block order, exactly as a stable ``argsort`` orders them, at about an
    eighth of its cost for 2,048-row blocks.

    Parameters
    ----------
    leaves : ndarray of int32, shape (T, n)
        Leaf ids, none negative.

    Returns
    -------
    order, sorted_leaves : ndarray of int32, shape (T, n)
        ``sorted_leaves[t] = leaves[t, order[t]]`` is non-decreasing.
    """
    n_trees, n = leaves.shape
    buckets = 1 << RADIX_BITS
    mask = buckets - 1
    order = np.empty((n_trees, n), dtype=np.int32)
    sorted_leaves = np.empty((n_trees, n), dtype=np.int32)
    rows_a = np.empty(n, dtype=np.int32)
    keys_a = np.empty(n, dtype=np.int32)
    rows_b = np.empty(n, dtype=np.int32)
    keys_b = np.empty(n, dtype=np.int32)
    starts = np.empty(buckets, dtype=np.int64)
    for t in range(n_trees):
        largest = 0
        for a in range(n):
            rows_a[a] = a
            keys_a[a] = leaves[t, a]
            if leaves[t, a] < 0:
                raise ValueError("leaf ids must not be negative")
            largest = max(largest, leaves[t, a])
        shift = 0
        while True:  # one counting-sort pass per digit, low digit first
            starts[:] = 0
            for a in range(n):
                starts[(keys_a[a] >> shift) & mask] += 1
            total = 0
            for d in range(buckets):
                size = starts[d]
                starts[d] = total
                total += size
            for a in range(n):
                d = (keys_a[a] >> shift) & mask
                rows_b[starts[d]] = rows_a[a]
                keys_b[starts[d]] = keys_a[a]
                starts[d] += 1
            rows_a, rows_b = rows_b, rows_a
            keys_a, keys_b = keys_b, keys_a
            shift += RADIX_BITS
            if (largest >> shift) == 0:
                break
        order[t] = rows_a
        sorted_leaves[t] = keys_a
    return order, sorted_leaves


@njit(nogil=True, cache=True)
def _shared_runs(si, sj, runs):  # pragma: no cover - numba
    """Merge two sorted leaf lists; record the runs of leaves both hold.

    ``runs[k] = (a, a_end, b, b_end)``: ``si[a:a_end]`` and ``sj[b:b_end]``
    are one leaf common to both blocks.  Returns the number of runs.
    """
    ni = si.shape[0]
    nj = sj.shape[0]
    a = 0
    b = 0
    k = 0
    while a < ni and b < nj:
        va = si[a]
        vb = sj[b]
        if va < vb:
            a += 1
        elif va > vb:
            b += 1
        else:
            a_end = a + 1
            while a_end < ni and si[a_end] == va:
                a_end += 1
            b_end = b + 1
            while b_end < nj and sj[b_end] == va:
                b_end += 1
            runs[k, 0] = a
            runs[k, 1] = a_end
            runs[k, 2] = b
            runs[k, 3] = b_end
            k += 1
            a = a_end
            b = b_end
    return k


@njit(nogil=True, cache=True)
def leaf_match_sum(leaves_i, leaves_j, weights_i, weights_j):  # pragma: no cover - numba
    """Weighted count of shared leaves for every pair of a tile.

    Parameters
    ----------
    leaves_i, leaves_j : ndarray of int32, shape (T, ni) and (T, nj)
        Leaf id of every row of each block in every tree.
    weights_i, weights_j : ndarray of float64, shape (T, ni) and (T, nj)
        Per-tree row weights.

    Returns
    -------
    ndarray of float64, shape (ni, nj)
        ``out[a, b] = sum_t wi[t, a] * wj[t, b] * [leaf_t(a) == leaf_t(b)]``,
        summed over trees in order (deterministic).
    """
    n_trees, ni = leaves_i.shape
    nj = leaves_j.shape[1]
    out = np.zeros((ni, nj), dtype=np.float64)
    runs = np.empty((min(ni, nj), 4), dtype=np.int64)
    oi, si = leaf_order(leaves_i)
    oj, sj = leaf_order(leaves_j)
    for t in range(n_trees):
        wi = weights_i[t]
        wj = weights_j[t]
        for k in range(_shared_runs(si[t], sj[t], runs)):
            for p in range(runs[k, 0], runs[k, 1]):
                r = oi[t, p]
                w = wi[r]
                if w != 0.0:
                    for q in range(runs[k, 2], runs[k, 3]):
                        c = oj[t, q]
                        out[r, c] += w * wj[c]
    return out


@njit(nogil=True, cache=True)
def leaf_runs(sorted_leaves):  # pragma: no cover - numba
    """Per tree, the distinct leaves of a sorted block and where each one's rows start.

    Parameters
    ----------
    sorted_leaves : ndarray of int32, shape (T, n)
        From :func:`leaf_order`.

    Returns
    -------
    leaf : ndarray of int32, shape (T, m)
        ``leaf[t, :n_runs[t]]``: tree t's distinct leaves, ascending (``m``
        is the most any tree has).
    start : ndarray of int32, shape (T, m + 1)
        Leaf ``leaf[t, k]`` holds the rows ``order[t, start[t, k]:start[t, k + 1]]``.
    n_runs : ndarray of int32, shape (T,)
    """
    n_trees, n = sorted_leaves.shape
    n_runs = np.zeros(n_trees, dtype=np.int32)
    for t in range(n_trees):
        for p in range(n):
            if p == 0 or sorted_leaves[t, p] != sorted_leaves[t, p - 1]:
                n_runs[t] += 1
    width = n_runs.max() if n_trees else 0
    leaf = np.zeros((n_trees, width), dtype=np.int32)
    start = np.zeros((n_trees, width + 1), dtype=np.int32)
    for t in range(n_trees):
        k = 0
        for p in range(n):
            if p == 0 or sorted_leaves[t, p] != sorted_leaves[t, p - 1]:
                leaf[t, k] = sorted_leaves[t, p]
                start[t, k] = p
                k += 1
        start[t, k] = n
    return leaf, start, n_runs


@njit(nogil=True, cache=True)
def add_sorted_leaf_counts(  # pragma: no cover - numba
    order_i, leaf_i, start_i, runs_i, order_j, leaf_j, start_j, runs_j, counts
):
    """Add, for every pair of rows, the number of trees in which they share a leaf.

    Per tree, the two blocks' distinct leaves are merged (without branching
    on which is smaller) and every pair of rows of a common leaf counted.

    Parameters
    ----------
    order_i, leaf_i, start_i, runs_i, order_j, leaf_j, start_j, runs_j : ndarray
        Both blocks as :func:`sort_block` gives them (so a block used by
        many tiles is sorted once): the rows by leaf from :func:`leaf_order`,
        then :func:`leaf_runs` of the sorted leaves.
    counts : ndarray of integers, shape (ni, nj), C-contiguous
        Added to in place; its type must hold ``T`` plus what it holds.

    Returns
    -------
    ndarray
        ``counts``.
    """
    n_trees = order_i.shape[0]
    n_cols = counts.shape[1]
    flat = counts.reshape(-1)
    common = np.empty((leaf_i.shape[1], 2), dtype=np.int32)
    for t in range(n_trees):
        a = 0
        b = 0
        k = 0
        while a < runs_i[t] and b < runs_j[t]:
            va = leaf_i[t, a]
            vb = leaf_j[t, b]
            common[k, 0] = a
            common[k, 1] = b
            k += va == vb
            a += va <= vb
            b += vb <= va
        for m in range(k):
            # every pair of the leaf's rows in one loop (a loop per row of I would
            # mispredict its exit once per row: the runs are short)
            p = start_i[t, common[m, 0]]
            p_end = start_i[t, common[m, 0] + 1]
            q_first = start_j[t, common[m, 1]]
            q_end = start_j[t, common[m, 1] + 1]
            q = q_first
            base = order_i[t, p] * n_cols
            for _ in range(np.int64(p_end - p) * (q_end - q_first)):
                flat[base + order_j[t, q]] += 1
                q += 1
                if q == q_end:
                    q = q_first
                    p += 1
                    if p < p_end:
                        base = order_i[t, p] * n_cols
    return counts


@njit(nogil=True, cache=True)
def add_shared_leaf_counts(leaves_i, leaves_j, counts):  # pragma: no cover - numba
    """:func:`add_sorted_leaf_counts` from unsorted leaves, shape (T, ni) and (T, nj)."""
    order_i, sorted_i = leaf_order(leaves_i)
    order_j, sorted_j = leaf_order(leaves_j)
    leaf_i, start_i, runs_i = leaf_runs(sorted_i)
    leaf_j, start_j, runs_j = leaf_runs(sorted_j)
    return add_sorted_leaf_counts(
        order_i, leaf_i, start_i, runs_i, order_j, leaf_j, start_j, runs_j, counts
    )


@njit(nogil=True, cache=True)
def counts_to_fraction(counts, n_trees):  # pragma: no cover - numba
    """``counts / n_trees`` as float32, each rounded once from float64."""
    ni, nj = counts.shape
    out = np.empty((ni, nj), dtype=np.float32)
    for r in range(ni):
        for c in range(nj):
            out[r, c] = np.float32(counts[r, c] / n_trees) if counts[r, c] else 0.0
    return out


def shared_leaf_fraction(leaves_i: np.ndarray, leaves_j: np.ndarray) -> np.ndarray:
    """Fraction of trees in which each pair of rows shares a leaf, as float32.

    Parameters
    ----------
    leaves_i, leaves_j : ndarray of int32, shape (T, ni) and (T, nj)

    Returns
    -------
    ndarray of float32, shape (ni, nj)
        ``count / T`` rounded once from float64.
    """
    n_trees = leaves_i.shape[0]
    counts = np.zeros((leaves_i.shape[1], leaves_j.shape[1]), dtype=np.int32)
    li, lj = kernel_input(leaves_i, np.int32), kernel_input(leaves_j, np.int32)
    return counts_to_fraction(add_shared_leaf_counts(li, lj, counts), n_trees)


def original_proximity_tile(leaves_i: np.ndarray, leaves_j: np.ndarray) -> np.ndarray:
    """Breiman's proximity between two row blocks.

    Parameters
    ----------
    leaves_i, leaves_j : ndarray of int, shape (ni, T) and (nj, T)
        Leaf ids, rows by trees (the on-disk layout).

    Returns
    -------
    ndarray of float32, shape (ni, nj)
        Fraction of the T trees in which the two rows share a leaf.
    """
    li, lj = _leaves_first(leaves_i, leaves_j)
    return shared_leaf_fraction(li, lj)


def sort_block(leaves: np.ndarray) -> tuple[np.ndarray, ...]:
    """A block of leaves sorted per tree, as :func:`sorted_block_counts` takes it.

    Parameters
    ----------
    leaves : ndarray of int, shape (n, T)
        Leaf ids, rows by trees (the on-disk layout).

    Returns
    -------
    order, leaf, start, n_runs : ndarray of int32
        The rows of each tree by leaf (:func:`leaf_order`) and the runs of
        each leaf in that order (:func:`leaf_runs`).
    """
    (li,) = _trees_first(leaves, dtype=np.int32)
    order, sorted_leaves = leaf_order(li)
    return (order, *leaf_runs(sorted_leaves))


def sorted_block_counts(
    block_i: tuple[np.ndarray, ...],
    block_j: tuple[np.ndarray, ...],
    dtype: str | np.dtype = "int32",
) -> np.ndarray:
    """Number of trees in which each pair of rows of two sorted blocks shares a leaf.

    Breiman's proximity is these counts over T (see
    :func:`original_proximity_tile`); stored as integers they are exact and
    small (one byte a pair for T < 255).

    Parameters
    ----------
    block_i, block_j : tuple of ndarray
        Both blocks from :func:`sort_block`.
    dtype : str or dtype, default "int32"
        Integer type of the counts; it must hold T.

    Returns
    -------
    ndarray of ``dtype``, shape (ni, nj)
    """
    n_trees = block_i[0].shape[0]
    if block_j[0].shape[0] != n_trees:
        raise ValueError(
            f"leaf blocks disagree on the number of trees: {n_trees} vs {block_j[0].shape[0]}"
        )
    dtype = np.dtype(dtype)
    if dtype.kind not in "iu" or np.iinfo(dtype).max < n_trees:
        raise ValueError(f"counts of {n_trees} trees do not fit in {dtype}; use a wider integer")
    counts = np.zeros((block_i[0].shape[1], block_j[0].shape[1]), dtype=dtype)
    order_i, leaf_i, start_i, runs_i = block_i
    order_j, leaf_j, start_j, runs_j = block_j
    return add_sorted_leaf_counts(
        order_i, leaf_i, start_i, runs_i, order_j, leaf_j, start_j, runs_j, counts
    )


def shared_leaf_counts(
    leaves_i: np.ndarray, leaves_j: np.ndarray, dtype: str | np.dtype = "int32"
) -> np.ndarray:
    """:func:`sorted_block_counts` of two blocks of leaves, shape (ni, T) and (nj, T)."""
    return sorted_block_counts(sort_block(leaves_i), sort_block(leaves_j), dtype)


def _leaves_first(leaves_i: np.ndarray, leaves_j: np.ndarray) -> list[np.ndarray]:
    """Both blocks of leaves as (tree, row) int32, after checking they agree on T."""
    n_trees = leaves_i.shape[1]
    if leaves_j.shape[1] != n_trees:
        raise ValueError(
            f"leaf blocks disagree on the number of trees: {n_trees} vs {leaves_j.shape[1]}"
        )
    return _trees_first(leaves_i, leaves_j, dtype=np.int32)


def _trees_first(*blocks: np.ndarray, dtype: type) -> list[np.ndarray]:
    return [kernel_input(b.T, dtype) for b in blocks]


def oob_proximity_tile(
    leaves_i: np.ndarray, leaves_j: np.ndarray, inbag_i: np.ndarray, inbag_j: np.ndarray
) -> np.ndarray:
    """Out-of-bag proximity between two row blocks (R randomForest's definition).

    ``#{t: both out of bag and same leaf} / #{t: both out of bag}``, and 0
    for a pair that is never out of bag together.

    Parameters
    ----------
    leaves_i, leaves_j : ndarray of int, shape (ni, T) and (nj, T)
    inbag_i, inbag_j : ndarray of uint8, shape (ni, T) and (nj, T)

    Returns
    -------
    ndarray of float32, shape (ni, nj)
    """
    li, lj = _trees_first(leaves_i, leaves_j, dtype=np.int32)
    oi, oj = _trees_first(inbag_i == 0, inbag_j == 0, dtype=np.float64)
    shared = leaf_match_sum(li, lj, oi, oj)
    both_oob = oi.T @ oj
    out = np.zeros_like(shared)
    np.divide(shared, both_oob, out=out, where=both_oob > 0)
    return out.astype(np.float32)


def rfgap_proximity_tile(
    leaves_i: np.ndarray,
    leaves_j: np.ndarray,
    inbag_i: np.ndarray,
    inbag_j: np.ndarray,
    mass_i: np.ndarray,
) -> np.ndarray:
    """RF-GAP proximity (Rhodes, Cutler & Moon 2023) from block I to block J.

    ``p(i, j) = (1/|S_i|) sum_{t in S_i} c_j(t) [leaf_t(j) = leaf_t(i)] / M_i(t)``
    with ``S_i`` the trees where i is out of bag (and its leaf holds in-bag
    rows), ``c_j(t)`` the in-bag count of j and ``M_i(t)`` the total in-bag
    count of i's leaf.  Rows sum to 1 over all columns; not symmetric.

    Parameters
    ----------
    leaves_i, leaves_j : ndarray of int, shape (ni, T) and (nj, T)
    inbag_i, inbag_j : ndarray of uint8, shape (ni, T) and (nj, T)
    mass_i : ndarray of float, shape (ni, T)
        ``M_i(t)`` for the rows of block I.

    Returns
    -------
    ndarray of float32, shape (ni, nj)
    """
    li, lj = _trees_first(leaves_i, leaves_j, dtype=np.int32)
    mass = np.ascontiguousarray(mass_i.T, dtype=np.float64)
    used = (inbag_i.T == 0) & (mass > 0)
    wi = np.zeros_like(mass)
    np.divide(1.0, mass, out=wi, where=used)
    (wj,) = _trees_first(inbag_j, dtype=np.float64)
    sums = leaf_match_sum(li, lj, kernel_input(wi, np.float64), wj)
    n_used = used.sum(axis=0)
    out = np.zeros_like(sums)
    np.divide(sums, n_used[:, None], out=out, where=n_used[:, None] > 0)
    return out.astype(np.float32)


def weighted_proximity_tile(
    leaves_i: np.ndarray, leaves_j: np.ndarray, weights_i: np.ndarray
) -> np.ndarray:
    """Proximity with a weight per row and tree: ``sum_t w_i(t) [leaf_t(i) = leaf_t(j)]``.

    The KeRF weighting gives ``w_i(t) = 1 / (T |L_t(i)|)`` (one over the size of
    i's leaf), the boosted weighting ``w_i(t) = w_t / sum_s w_s`` (a weight per tree).

    Parameters
    ----------
    leaves_i, leaves_j : ndarray of int, shape (ni, T) and (nj, T)
    weights_i : ndarray of float, shape (ni, T)

    Returns
    -------
    ndarray of float32, shape (ni, nj)
    """
    li, lj = _trees_first(leaves_i, leaves_j, dtype=np.int32)
    (wi,) = _trees_first(weights_i, dtype=np.float64)
    ones = kernel_input(np.ones(lj.shape), np.float64)
    return leaf_match_sum(li, lj, wi, ones).astype(np.float32)


def warm_up(counts: Sequence[Any] = (np.uint8, np.uint16)) -> None:
    """Compile (or load from cache) every kernel of this module once.

    Call it in the driver before fanning tasks out, so that worker processes
    load the cached machine code instead of racing to write it.  ``counts``:
    the dtypes of tree counts the job will ask for (each is a compilation of
    its own; a matrix of one forest has one).
    """
    # read-only, as the callers pass them (kernels.signatures)
    leaves = kernel_input(np.zeros((1, 2)), np.int32)
    weights = kernel_input(np.ones((1, 2)), np.float64)
    leaf_match_sum(leaves, leaves, weights, weights)
    shared_leaf_fraction(leaves, leaves)
    block = sort_block(leaves.T)
    for dtype in counts:
        add_shared_leaf_counts(leaves, leaves, np.zeros((2, 2), dtype=dtype))
        sorted_block_counts(block, block, np.dtype(dtype))
