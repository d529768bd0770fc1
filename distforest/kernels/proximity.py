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
    li = np.ascontiguousarray(leaves_i.T, dtype=np.int32)
    lj = np.ascontiguousarray(leaves_j.T, dtype=np.int32)
    counts = leaf_match_sum(li, lj, np.ones(li.shape), np.ones(lj.shape))
    return (counts / np.float64(n_trees)).astype(np.float32)


def warm_up() -> None:
    """Compile (or load from cache) every kernel of this module once.

    Call it in the driver before fanning tasks out, so that worker processes
    load the cached machine code instead of racing to write it.
    """
    leaves = np.zeros((1, 2), dtype=np.int32)
    weights = np.ones((1, 2), dtype=np.float64)
    leaf_match_sum(leaves, leaves, weights, weights)
