"""An observed distance matrix for SMERF: read whole, checked, symmetric.

Reading goes through :func:`distforest.io.matrices.load_matrix` (``.npy``,
Zarr array or group, ``store.zarr/array``, numpy, dask, xarray, zarr), and the
entry checks through :func:`~distforest.io.matrices.check_entries` (square,
finite, every row with an observed entry).  SMERF grows its trees on the whole
matrix, so it is then read into memory (float32 stays float32: half the
memory; anything else becomes float64) and one more rule is checked:

- **symmetry**: ``D[i, j] == D[j, i]``, NaN on both sides of a pair not
  observed.  A non-symmetric D is refused, not silently symmetrised, because
  which side is right is the user's call; the message shows the fix
  ``D = (D + D.T) / 2``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import zarr

from distforest.errors import InputError
from distforest.io.matrices import StoredMatrix, check_entries, decode, load_matrix

#: Rows compared at a time in the symmetry check (bounds its temporary memory).
BLOCK = 1024
#: Relative tolerance of the symmetry check (float32 rounding passes).
SYMMETRY_RTOL = 1e-5


def _in_memory(matrix: np.ndarray | StoredMatrix) -> np.ndarray:
    data: Any
    if isinstance(matrix, np.ndarray):
        data = matrix
    elif matrix.path.endswith(".npy"):
        data = np.load(matrix.path, mmap_mode="r")
    else:
        node: Any = zarr.open(matrix.path, mode="r")
        arr = node if matrix.name is None else node[matrix.name]
        data = decode(arr[...], dict(arr.attrs))
    dtype = np.float32 if data.dtype == np.float32 else np.float64
    return np.ascontiguousarray(data, dtype=dtype)


def load_distances(source: Any, *, n: int | None = None, what: str = "D") -> np.ndarray:
    """The observed matrix as a C-contiguous float array, after every check.

    Parameters
    ----------
    source : path or array-like
        See :func:`distforest.io.matrices.load_matrix`; NaN = pair not observed.
    n : int, optional
        Rows the matrix must have (the rows of X).
    what : str
        How error messages name it.

    Returns
    -------
    ndarray of float32 or float64, shape (n, n)

    Raises
    ------
    InputError
        Not square, not ``n`` rows, infinite values, a row with nothing
        observed, or not symmetric.
    """
    matrix = load_matrix(source, what)
    check_entries(matrix, what, square=True)
    if n is not None and matrix.shape[0] != n:
        raise InputError(
            f"{what} is {matrix.shape[0]} x {matrix.shape[1]} but X has {n} rows; D must have "
            "one row and one column per row of X, in the same order"
        )
    D = _in_memory(matrix)
    check_symmetric(D, what)
    return D


def check_symmetric(D: np.ndarray, what: str = "D") -> None:
    """Refuse ``D[i, j] != D[j, i]`` (beyond float32 rounding) or a one-sided NaN."""
    n = D.shape[0]
    for start in range(0, n, BLOCK):
        rows = slice(start, min(start + BLOCK, n))
        block, mirror = D[rows], D[:, rows].T
        seen, seen_t = ~np.isnan(block), ~np.isnan(mirror)
        tol = SYMMETRY_RTOL * np.maximum(np.abs(np.nan_to_num(block)), 1.0)
        differ = (seen != seen_t) | (seen & seen_t & (np.abs(block - mirror) > tol))
        if differ.any():
            i, j = (int(k) for k in np.argwhere(differ)[0])
            raise InputError(
                f"{what} is not symmetric: [{start + i}, {j}] is {float(block[i, j])!r} but "
                f"[{j}, {start + i}] is {float(mirror[i, j])!r}; SMERF needs D[i, j] == D[j, i] "
                "(NaN on both sides for a pair not observed); symmetrise it first, e.g. "
                "D = (D + D.T) / 2, or fill the missing side"
            )
