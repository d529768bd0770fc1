"""Matrix-free proximity products from per-tree leaf sums.

For every proximity of docs/design.md section 4 the product ``P @ V`` has the form

    (P V)_i = (1 / norm_i) sum_t  w_dst(i, t) * sum_{j : leaf_t(j) = leaf_t(i)} w_src(j, t) V_j

so per tree one pass over the source rows sums ``w_src V`` into its leaves and
one pass over the destination rows gathers them back: O(n T k) work, O(n k)
memory, no n x n anywhere.  The weights per method:

========  =====================  ===============================  ==================
method    w_src(j, t)            w_dst(i, t)                      norm_i
========  =====================  ===============================  ==================
original  1                      1                                T
oob       [j out of bag]         [i out of bag]                   #trees i is OOB
rfgap     inbag count c_j(t)     [i OOB] / M_i(t)                 #trees i is OOB
========  =====================  ===============================  ==================

``M_i(t)`` is the total in-bag count of i's leaf (RF-GAP).  A tree in which
``M_i(t) = 0`` (a leaf holding only synthetic rows) is skipped for i.

``oob`` here is the row-normalised out-of-bag proximity
``sum_t o_i o_j [same leaf] / sum_t o_i``; the exact OOB proximity divides each
pair by its own count of shared OOB trees, which does not factorise, so it
exists only as dense tiles.  Both agree up to a factor that concentrates
around ``1 - 1/e`` as T grows.

A task handles a batch of trees and returns unnormalised sums and counts;
the caller adds the batches and divides by ``norm``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from distforest.kernels.names import PROXIMITY_METHODS
from distforest.kernels.proximity import leaf_order
from distforest.kernels.signatures import kernel_input

METHOD_CODES = {name: code for code, name in enumerate(PROXIMITY_METHODS)}


@njit(nogil=True, cache=True)
def _leaf_product(leaves_src, inbag_src, V, leaves_dst, inbag_dst, mode):  # pragma: no cover
    n_trees = leaves_src.shape[0]
    n_src = leaves_src.shape[1]
    n_dst = leaves_dst.shape[1]
    k = V.shape[1]
    out = np.zeros((n_dst, k), dtype=np.float64)
    norm = np.zeros(n_dst, dtype=np.float64)
    top = 0
    for t in range(n_trees):
        for j in range(n_src):
            top = max(top, leaves_src[t, j])
        for i in range(n_dst):
            top = max(top, leaves_dst[t, i])
    sums = np.zeros((top + 1, k), dtype=np.float64)
    mass = np.zeros(top + 1, dtype=np.float64)
    for t in range(n_trees):
        ls = leaves_src[t]
        ld = leaves_dst[t]
        for j in range(n_src):
            leaf = ls[j]
            mass[leaf] = 0.0
            for c in range(k):
                sums[leaf, c] = 0.0
        for i in range(n_dst):
            leaf = ld[i]
            mass[leaf] = 0.0
            for c in range(k):
                sums[leaf, c] = 0.0
        for j in range(n_src):
            if mode == 0:
                w = 1.0
            elif mode == 1:
                w = 1.0 if inbag_src[t, j] == 0 else 0.0
            else:
                w = float(inbag_src[t, j])
            if w != 0.0:
                leaf = ls[j]
                mass[leaf] += w
                for c in range(k):
                    sums[leaf, c] += w * V[j, c]
        for i in range(n_dst):
            leaf = ld[i]
            if mode == 0:
                w = 1.0
            elif inbag_dst[t, i] != 0:
                continue
            elif mode == 1:
                w = 1.0
            else:
                if mass[leaf] == 0.0:
                    continue
                w = 1.0 / mass[leaf]
            norm[i] += 1.0
            for c in range(k):
                out[i, c] += w * sums[leaf, c]
    return out, norm


def leaf_product(
    leaves_src: np.ndarray,
    inbag_src: np.ndarray,
    V: np.ndarray,
    leaves_dst: np.ndarray,
    inbag_dst: np.ndarray,
    method: str,
) -> tuple[np.ndarray, np.ndarray]:
    """Unnormalised ``P @ V`` over a batch of trees.

    Parameters
    ----------
    leaves_src, inbag_src : ndarray, shape (T_b, n_src)
        Leaves (int32) and in-bag counts (uint8) of the rows whose values are
        summed, trees first.
    V : ndarray of float64, shape (n_src, k)
    leaves_dst, inbag_dst : ndarray, shape (T_b, n_dst)
        Leaves and in-bag counts of the rows receiving the product (new rows
        have in-bag count 0: out of bag in every tree).
    method : {"original", "oob", "rfgap"}

    Returns
    -------
    sums : ndarray of float64, shape (n_dst, k)
    norm : ndarray of float64, shape (n_dst,)
        Add both over tree batches, then ``sums / norm[:, None]`` is ``P @ V``.
    """
    return _leaf_product(
        kernel_input(leaves_src, np.int32),
        kernel_input(inbag_src, np.uint8),
        kernel_input(V, np.float64),
        kernel_input(leaves_dst, np.int32),
        kernel_input(inbag_dst, np.uint8),
        METHOD_CODES[method],
    )


def normalise(sums: np.ndarray, norm: np.ndarray) -> np.ndarray:
    """``sums / norm`` row by row, 0 where a row has no contributing tree."""
    out = np.zeros_like(sums)
    ok = norm > 0
    out[ok] = sums[ok] / norm[ok, None]
    return out


@njit(nogil=True, cache=True)
def leaf_inbag_total(leaves, inbag):  # pragma: no cover - numba
    """Total in-bag count of each row's leaf, per tree (RF-GAP's ``M_i(t)``).

    Parameters
    ----------
    leaves, inbag : ndarray, shape (T, n)

    Returns
    -------
    ndarray of float64, shape (T, n)
    """
    n_trees, n = leaves.shape
    top = 0
    for t in range(n_trees):
        for i in range(n):
            top = max(top, leaves[t, i])
    mass = np.zeros(top + 1, dtype=np.float64)
    out = np.empty((n_trees, n), dtype=np.float64)
    for t in range(n_trees):
        for i in range(n):
            mass[leaves[t, i]] = 0.0
        for i in range(n):
            mass[leaves[t, i]] += inbag[t, i]
        for i in range(n):
            out[t, i] = mass[leaves[t, i]]
    return out


def warm_up() -> None:
    """Compile (or load from cache) the kernels before fanning out."""
    leaves = np.zeros((1, 2), dtype=np.int32)
    inbag = np.ones((1, 2), dtype=np.uint8)
    leaf_product(leaves, inbag, np.ones((2, 1)), leaves, inbag, "original")
    leaf_inbag_total(leaves, inbag)
    sorted_leaves, order = leaf_index(leaves)
    squared_product(leaves, sorted_leaves, order, np.ones((2, 1)), np.arange(2))


@njit(nogil=True, cache=True)
def _squared_product(leaves, sorted_leaves, order, V, rows):  # pragma: no cover - numba
    n_trees, n = order.shape
    k = V.shape[1]
    out = np.zeros((rows.shape[0], k), dtype=np.float64)
    count = np.zeros(n, dtype=np.int32)
    touched = np.empty(n, dtype=np.int64)
    # integer weights c_ij^2 (exact sums when V holds integers, e.g. a one-hot), scaled by
    # 1 / T^2 once at the end: the same floats as the tree-pair sums of kernels.pairsums
    scale = 1.0 / (n_trees * n_trees)
    for r in range(rows.shape[0]):
        i = rows[r]
        n_touched = 0
        for t in range(n_trees):
            leaf = leaves[t, i]
            lo = np.searchsorted(sorted_leaves[t], leaf, side="left")
            hi = np.searchsorted(sorted_leaves[t], leaf, side="right")
            for p in range(lo, hi):
                j = order[t, p]
                if count[j] == 0:
                    touched[n_touched] = j
                    n_touched += 1
                count[j] += 1
        for q in range(n_touched):
            j = touched[q]
            w = float(count[j] * count[j])
            for c in range(k):
                out[r, c] += w * V[j, c]
            count[j] = 0
        for c in range(k):
            out[r, c] *= scale
    return out


def leaf_index(leaves: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows of each tree sorted by leaf: ``(sorted_leaves, order)``, both (T, n).

    ``order[t, lo:hi]`` are the rows in the leaf ``sorted_leaves[t, lo]``.
    """
    order, sorted_leaves = leaf_order(np.ascontiguousarray(leaves, dtype=np.int32))
    return sorted_leaves, order


def squared_product(
    leaves: np.ndarray,
    sorted_leaves: np.ndarray,
    order: np.ndarray,
    V: np.ndarray,
    rows: np.ndarray,
) -> np.ndarray:
    """``(P * P) @ V`` for some rows, P Breiman's proximity, from sparse rows.

    Each row's proximity row is built from the members of its leaves (it is
    sparse when leaves are small), squared and multiplied with ``V``: the
    cost is the number of (tree, leaf-mate) pairs, never n per row.  The
    squared counts ``c_ij^2`` are summed and the sum multiplied by ``1 / T^2``
    once: exact before the scaling when ``V`` holds small integers (a one-hot
    of classes), so it equals :func:`distforest.kernels.pairsums.pair_square_sums`
    times the same scale, bit for bit.

    Parameters
    ----------
    leaves : ndarray of int32, shape (T, m)
        Leaves of the query rows: the training leaves (``m = n``), or the
        leaves of new rows (each new row's proximity to the training rows).
    sorted_leaves, order : ndarray of int32, shape (T, n)
        From :func:`leaf_index` of the training leaves.
    V : ndarray of float64, shape (n, k)
    rows : ndarray of int64
        Rows of ``leaves`` (columns of the ``(T, m)`` array) in the result.

    Returns
    -------
    ndarray of float64, shape (len(rows), k)
    """
    return _squared_product(
        kernel_input(leaves, np.int32),
        kernel_input(sorted_leaves, np.int32),
        kernel_input(order, np.int32),
        kernel_input(V, np.float64),
        kernel_input(rows, np.int64),
    )
