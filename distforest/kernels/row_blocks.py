"""Numba kernels: products of tall blocks of rows whose floats do not depend on how the rows
are cut into chunks.

The MDS by row chunks (:mod:`distforest.apps.mds`) keeps blocks of n rows
in a store and works on them a chunk of rows at a time.  BLAS is free to add
a product's terms in an order that depends on the matrix sizes, so a row's
result could change with the chunk it falls in; here every sum is taken in a
fixed order:

- :func:`ordered_product`: ``A @ M`` for a short ``M``, each row's terms added
  in column order, the same floats for a row whatever rows are beside it;
- :func:`grain_sums`: the column sums, ``Q^T Z`` and ``Z^T Z`` of every group
  of ``grain`` consecutive rows, each added in row order; the caller adds the
  groups in row order, so the totals depend on the grain, not on the chunks.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(nogil=True, cache=True)
def _ordered_product(A, M):  # pragma: no cover - numba
    rows, inner = A.shape
    width = M.shape[1]
    out = np.zeros((rows, width))
    for r in range(rows):
        for i in range(inner):
            a = A[r, i]
            for j in range(width):
                out[r, j] += a * M[i, j]
    return out


def ordered_product(A: np.ndarray, M: np.ndarray) -> np.ndarray:
    """``A @ M`` (float64), each row's terms added in column order.

    Parameters
    ----------
    A : ndarray, shape (rows, m)
    M : ndarray, shape (m, w)

    Returns
    -------
    ndarray of float64, shape (rows, w)
    """
    return _ordered_product(
        np.ascontiguousarray(A, dtype=np.float64), np.ascontiguousarray(M, dtype=np.float64)
    )


@njit(nogil=True, cache=True)
def _grain_sums(Z, Q, grain):  # pragma: no cover - numba
    rows, width = Z.shape
    inner = Q.shape[1]
    groups = (rows + grain - 1) // grain
    sums = np.zeros((groups, width))
    qz = np.zeros((groups, inner, width))
    zz = np.zeros((groups, width, width))
    for r in range(rows):
        g = r // grain
        for j in range(width):
            z = Z[r, j]
            sums[g, j] += z
            for i in range(inner):
                qz[g, i, j] += Q[r, i] * z
            for i in range(width):
                zz[g, i, j] += Z[r, i] * z
    return sums, qz, zz


def grain_sums(Z: np.ndarray, Q: np.ndarray, grain: int) -> tuple[np.ndarray, ...]:
    """Per group of ``grain`` rows (the first starting at row 0): sums of ``Z``'s columns,
    ``Q^T Z`` and ``Z^T Z``, each added in row order.

    Parameters
    ----------
    Z : ndarray, shape (rows, w)
    Q : ndarray, shape (rows, m)
    grain : int

    Returns
    -------
    sums : ndarray, shape (groups, w)
    qz : ndarray, shape (groups, m, w)
    zz : ndarray, shape (groups, w, w)
    """
    return _grain_sums(
        np.ascontiguousarray(Z, dtype=np.float64),
        np.ascontiguousarray(Q, dtype=np.float64),
        int(grain),
    )


def warm_up() -> None:
    """Compile (or load from cache) the kernels before fanning out."""
    one = np.ones((2, 1))
    ordered_product(one, np.ones((1, 1)))
    grain_sums(one, one, 1)
