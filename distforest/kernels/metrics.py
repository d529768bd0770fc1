"""Tile kernels for similarity measures that scipy/scikit-learn lack, and top-k merging.

Two things live here:

- the binary measures of co-presence and co-absence (Russell-Rao, Sokal-Michener,
  Jaccard) for whole tiles, from two matrix products of 0/1 matrices (exact:
  the products count integers);
- :func:`merge_top_k`, the running merge that keeps the k smallest distances
  of every query row while tiles of candidates stream past, so that the k
  nearest neighbours of n rows need O(n k) memory, never n x m.

Everything else (Euclidean, Manhattan, Minkowski, Chebyshev, cosine,
Mahalanobis) is computed by :func:`scipy.spatial.distance.cdist`.

Counts, for two binary rows q and d over m features:

- ``CP`` co-presence: both 1;  ``CA`` co-absence: both 0;
- ``PA`` / ``AP``: 1 in q and 0 in d / 0 in q and 1 in d.

Similarities: Russell-Rao ``CP / m``; Sokal-Michener ``(CP + CA) / m``;
Jaccard ``CP / (CP + PA + AP)`` (1 for two all-zero rows, which are identical).
"""

from __future__ import annotations

import numpy as np
from numba import njit

#: Index used for an empty slot of a top-k list (fewer candidates than k).
NO_NEIGHBOUR = -1

BINARY_MEASURES = ("russell-rao", "sokal-michener", "jaccard")


def binary_counts(A: np.ndarray, B: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Co-presence and co-absence counts of every pair of rows of two 0/1 blocks.

    Parameters
    ----------
    A, B : ndarray of 0/1, shape (na, m) and (nb, m)

    Returns
    -------
    cp, ca : ndarray of float64, shape (na, nb)
        Number of features where both rows are 1 (``cp``) and both are 0 (``ca``).
    m : int
        Number of features.
    """
    a = np.ascontiguousarray(A, dtype=np.float64)
    b = np.ascontiguousarray(B, dtype=np.float64)
    m = a.shape[1]
    cp = a @ b.T
    ca = m - a.sum(axis=1)[:, None] - b.sum(axis=1)[None, :] + cp
    return cp, ca, m


def binary_similarity(name: str, A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """A binary similarity between every row of ``A`` and every row of ``B``.

    Parameters
    ----------
    name : {"russell-rao", "sokal-michener", "jaccard"}
    A, B : ndarray of 0/1, shape (na, m) and (nb, m)

    Returns
    -------
    ndarray of float64, shape (na, nb), values in [0, 1]
    """
    cp, ca, m = binary_counts(A, B)
    if name == "russell-rao":
        return cp / m
    if name == "sokal-michener":
        return (cp + ca) / m
    if name == "jaccard":
        union = m - ca
        out = np.ones_like(cp)
        np.divide(cp, union, out=out, where=union > 0)
        return out
    raise ValueError(f"unknown binary measure {name!r}; expected one of {BINARY_MEASURES}")


def empty_top_k(n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Start of a running top-k: every distance +inf, every index empty."""
    return np.full((n, k), np.inf), np.full((n, k), np.iinfo(np.int64).max, dtype=np.int64)


def finish_top_k(best_d: np.ndarray, best_i: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mark slots never filled with :data:`NO_NEIGHBOUR` (and distance +inf)."""
    empty = best_i == np.iinfo(np.int64).max
    best_i[empty] = NO_NEIGHBOUR
    best_d[empty] = np.inf
    return best_d, best_i


@njit(nogil=True, cache=True)
def merge_top_k(dist, col_offset, row_offset, exclude_self, best_d, best_i):  # pragma: no cover
    """Merge a tile of candidate distances into each row's sorted k best, in place.

    The order is total: by distance, then by column index, so the result does
    not depend on how the columns were cut into tiles or in which order the
    tiles came.  NaN distances are never neighbours.

    Parameters
    ----------
    dist : ndarray of float64, shape (n, m)
        Distances of the n query rows to m candidates.
    col_offset : int
        Global index of the tile's first candidate.
    row_offset : int
        Global index of the tile's first query row (to recognise self-pairs).
    exclude_self : bool
        Skip the pair (i, i) (queries and candidates are the same rows).
    best_d, best_i : ndarray, shape (n, k), float64 and int64
        The running lists, sorted ascending; start from :func:`empty_top_k`.
    """
    n, m = dist.shape
    for r in range(n):
        bd = best_d[r]
        bi = best_i[r]
        own = row_offset + r
        for c in range(m):
            d = dist[r, c]
            if d != d:
                continue
            j = col_offset + c
            if exclude_self and j == own:
                continue
            _insert(bd, bi, d, j)


@njit(nogil=True, cache=True)
def _insert(bd, bi, d, j):  # pragma: no cover - numba
    """Insert candidate (d, j) into the sorted list if it beats the last one."""
    k = bd.shape[0]
    if d < bd[k - 1] or (d == bd[k - 1] and j < bi[k - 1]):
        p = k - 1
        while p > 0 and (bd[p - 1] > d or (bd[p - 1] == d and bi[p - 1] > j)):
            bd[p] = bd[p - 1]
            bi[p] = bi[p - 1]
            p -= 1
        bd[p] = d
        bi[p] = j


@njit(nogil=True, cache=True)
def minkowski_top_k(
    Q, R, p, col_offset, row_offset, exclude_self, best_d, best_i
):  # pragma: no cover
    """Fused Minkowski distance and running top-k merge, without a distance tile.

    Ranks by the reduced distance (``sum |q - r|^p``, or ``max |q - r|`` for
    ``p = inf``), summed over features in order, so every pair gets the same
    value whatever tile it is in; :func:`minkowski_finish` turns the kept
    values into distances.

    Parameters
    ----------
    Q, R : ndarray of float64, shape (n, d) and (m, d)
        Query rows and one tile of candidate rows.
    p : float
        Exponent (>= 1, or inf).
    col_offset, row_offset, exclude_self, best_d, best_i :
        As in :func:`merge_top_k` (``best_d`` holds reduced distances).
    """
    n, d = Q.shape
    m = R.shape[0]
    for r in range(n):
        bd = best_d[r]
        bi = best_i[r]
        own = row_offset + r
        for c in range(m):
            j = col_offset + c
            if exclude_self and j == own:
                continue
            acc = 0.0
            if p == 2.0:
                for f in range(d):
                    diff = Q[r, f] - R[c, f]
                    acc += diff * diff
            elif p == 1.0:
                for f in range(d):
                    acc += abs(Q[r, f] - R[c, f])
            elif np.isinf(p):
                for f in range(d):
                    diff = abs(Q[r, f] - R[c, f])
                    if diff > acc:
                        acc = diff
            else:
                for f in range(d):
                    acc += abs(Q[r, f] - R[c, f]) ** p
            _insert(bd, bi, acc, j)


def minkowski_finish(best_d: np.ndarray, p: float) -> np.ndarray:
    """Reduced distances of :func:`minkowski_top_k` as Minkowski distances."""
    if p == 2.0:
        return np.sqrt(best_d)
    if p == 1.0 or np.isinf(p):
        return best_d
    return best_d ** (1.0 / p)


def warm_up() -> None:
    """Compile (or load from cache) the numba kernels once, before fanning out."""
    best_d, best_i = empty_top_k(1, 1)
    merge_top_k(np.zeros((1, 2)), 0, 0, True, best_d, best_i)
    for p in (1.0, 2.0, 3.0, np.inf):
        minkowski_top_k(np.zeros((1, 1)), np.zeros((2, 1)), p, 0, 0, True, best_d, best_i)
