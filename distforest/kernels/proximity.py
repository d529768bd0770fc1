"""Numba kernels for proximity tiles.

A proximity tile ``P[I, J]`` compares, tree by tree, the leaf of every row of
block ``I`` with the leaf of every row of block ``J``.  Comparing all pairs
costs ``|I| |J| T``; instead, per tree both blocks are sorted by leaf id and
merged, so the cost is ``T (|I| + |J|) log`` plus one update per pair that
really shares a leaf.  With fully grown trees most leaves hold a handful of
rows, so the tile is dominated by writing it, not by the comparisons.

All kernels take leaves laid out as ``(tree, row)`` (C-contiguous int32), so
that one tree's leaves of a block are contiguous.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(nogil=True, cache=True)
def _match_tree(li, lj, oi, oj, wi, wj, out):  # pragma: no cover - numba
    """Add ``wi[a] * wj[b]`` to ``out[a, b]`` for every pair in one leaf."""
    ni = li.shape[0]
    nj = lj.shape[0]
    a = 0
    b = 0
    while a < ni and b < nj:
        va = li[oi[a]]
        vb = lj[oj[b]]
        if va < vb:
            a += 1
        elif va > vb:
            b += 1
        else:
            a_end = a
            while a_end < ni and li[oi[a_end]] == va:
                a_end += 1
            b_end = b
            while b_end < nj and lj[oj[b_end]] == va:
                b_end += 1
            for p in range(a, a_end):
                r = oi[p]
                w = wi[r]
                if w != 0.0:
                    for q in range(b, b_end):
                        c = oj[q]
                        out[r, c] += w * wj[c]
            a = a_end
            b = b_end


@njit(nogil=True, cache=True)
def leaf_match_sum(leaves_i, leaves_j, weights_i, weights_j):  # pragma: no cover - numba
    """Weighted count of shared leaves for every pair of a tile.

    Parameters
    ----------
    leaves_i, leaves_j : ndarray of int32, shape (T, ni) and (T, nj)
        Leaf id of every row of each block in every tree.
    weights_i, weights_j : ndarray of float64, shape (T, ni) and (T, nj)
        Per-tree row weights.  All ones gives the number of trees in which
        the two rows share a leaf.

    Returns
    -------
    ndarray of float64, shape (ni, nj)
        ``out[a, b] = sum_t wi[t, a] * wj[t, b] * [leaf_t(a) == leaf_t(b)]``,
        summed over trees in order (deterministic).
    """
    n_trees = leaves_i.shape[0]
    out = np.zeros((leaves_i.shape[1], leaves_j.shape[1]), dtype=np.float64)
    for t in range(n_trees):
        li = leaves_i[t]
        lj = leaves_j[t]
        oi = np.argsort(li, kind="mergesort")
        oj = np.argsort(lj, kind="mergesort")
        _match_tree(li, lj, oi, oj, weights_i[t], weights_j[t], out)
    return out


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
    n_trees = leaves_i.shape[1]
    if leaves_j.shape[1] != n_trees:
        raise ValueError(
            f"leaf blocks disagree on the number of trees: {n_trees} vs {leaves_j.shape[1]}"
        )
    li, lj = _trees_first(leaves_i, leaves_j, dtype=np.int32)
    counts = leaf_match_sum(li, lj, np.ones(li.shape), np.ones(lj.shape))
    return (counts / np.float64(n_trees)).astype(np.float32)


def _trees_first(*blocks: np.ndarray, dtype: type) -> list[np.ndarray]:
    return [np.ascontiguousarray(b.T, dtype=dtype) for b in blocks]


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
    sums = leaf_match_sum(li, lj, wi, wj)
    n_used = used.sum(axis=0)
    out = np.zeros_like(sums)
    np.divide(sums, n_used[:, None], out=out, where=n_used[:, None] > 0)
    return out.astype(np.float32)


def warm_up() -> None:
    """Compile (or load from cache) every kernel of this module once.

    Call it in the driver before fanning tasks out, so that worker processes
    load the cached machine code instead of racing to write it.
    """
    leaves = np.zeros((1, 2), dtype=np.int32)
    weights = np.ones((1, 2), dtype=np.float64)
    leaf_match_sum(leaves, leaves, weights, weights)
