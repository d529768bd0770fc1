"""An observed distance matrix for SMERF: checked block by block, read whole where it is used.

Reading goes through :func:`distforest.io.matrices.load_matrix` (``.npy``,
Zarr array or group, ``store.zarr/array``, numpy, dask, xarray, zarr).
:func:`load_distances` checks it in one pass over blocks of rows, never
holding a matrix on disk whole (:data:`BLOCK_BYTES` per block):

- square, one row per row of X, finite, every row with an observed entry
  (:func:`~distforest.io.matrices.check_entries`' rules and messages);
- **symmetry**: ``D[i, j] == D[j, i]``, NaN on both sides of a pair not
  observed.  A non-symmetric D is refused, not silently symmetrised, because
  which side is right is the user's call; the message shows the fix
  ``D = (D + D.T) / 2``.

The same pass measures the mean of the observed entries (float64 row sums
added exactly, so an array in memory and the same array on disk give the same
bits whatever the blocks), the fraction observed and, on request, a fingerprint.

SMERF grows its trees on the whole matrix, so every process that grows trees
or predicts holds it (float32 stays float32: half the memory; anything else
becomes float64).  A matrix given in memory stays a NumPy array (the caller
shares it with the workers).  A matrix on disk stays a small picklable
:class:`StoredDistances` reference: each process that needs the values calls
:meth:`StoredDistances.load`, which reads the file once per process (a
``.npy`` of the right type is memory-mapped, not copied) and keeps it for
the next tasks of that process (one matrix at a time, see :func:`clear_cache`).
So the driver of a fit on a 1.6 GB Zarr matrix never reads it whole, and
each worker reads it once instead of receiving a copy.
"""

from __future__ import annotations

import hashlib
import math
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from distforest.errors import InputError
from distforest.io.matrices import StoredMatrix, check_rows, check_shape, decode, load_matrix

#: Bytes of one block of rows read at a time by the checks and the copies (a Zarr
#: matrix is read in whole chunks of rows when its chunk rows are fewer).
BLOCK_BYTES = 64 * 1024**2
#: Relative tolerance of the symmetry check (float32 rounding passes).
SYMMETRY_RTOL = 1e-5


def _dtype(source: np.dtype) -> np.dtype:
    """float32 stays float32, anything else becomes float64."""
    return np.dtype(np.float32 if source == np.float32 else np.float64)


class _Source:
    """Row and column blocks of an in-memory or stored matrix, decoded to one float type."""

    def __init__(self, matrix: np.ndarray | StoredMatrix) -> None:
        self.attrs: dict[str, Any] = {}
        self.chunk_rows = 1
        data: Any
        if isinstance(matrix, np.ndarray):
            data = matrix
        elif matrix.path.endswith(".npy"):
            data = np.load(matrix.path, mmap_mode="r")
        else:
            node: Any = zarr.open(matrix.path, mode="r")
            data = node if matrix.name is None else node[matrix.name]
            self.attrs = dict(data.attrs)
            self.chunk_rows = int(data.chunks[0])
        self.data = data
        self.n = int(data.shape[0])
        sample = decode(np.zeros(0, dtype=data.dtype), self.attrs)
        self.dtype = _dtype(sample.dtype)

    def rows_per_block(self) -> int:
        rows = max(1, BLOCK_BYTES // (self.dtype.itemsize * max(1, self.n)))
        return self.chunk_rows * max(1, rows // self.chunk_rows)

    def read(self, rows: slice, cols: slice = slice(None)) -> np.ndarray:
        values = decode(self.data[rows, cols], self.attrs)
        return np.ascontiguousarray(values, dtype=self.dtype)

    def blocks(self, rows: int | None = None) -> Iterator[tuple[int, np.ndarray]]:
        step = rows or self.rows_per_block()
        for start in range(0, self.n, step):
            yield start, self.read(slice(start, min(start + step, self.n)))


def _stamp(matrix: StoredMatrix) -> tuple[int, int, int]:
    """(latest modification in ns, total bytes, files) of the files holding ``matrix``."""
    top = Path(matrix.path) if matrix.name is None else Path(matrix.path) / matrix.name
    if top.is_file():
        st = top.stat()
        return st.st_mtime_ns, st.st_size, 1
    latest, size, files = 0, 0, 0
    for folder, _, names in os.walk(top):
        for name in names:
            st = os.stat(os.path.join(folder, name))
            latest, size, files = max(latest, st.st_mtime_ns), size + st.st_size, files + 1
    return latest, size, files


@dataclass(frozen=True)
class StoredDistances:
    """A checked distance matrix on disk; :meth:`load` gives its values in any process.

    Attributes
    ----------
    matrix : StoredMatrix
        Where it is (a ``.npy`` file or a Zarr array).
    dtype : str
        The type of the values loaded (``"float32"`` or ``"float64"``).
    stamp : tuple of int
        Latest modification time (ns), bytes and files of the matrix when it
        was checked: :meth:`load` refuses a file changed since.
    """

    matrix: StoredMatrix
    dtype: str
    stamp: tuple[int, int, int]

    @classmethod
    def of(cls, matrix: StoredMatrix) -> StoredDistances:
        """A reference to ``matrix`` as it is now (no check of its values)."""
        return cls(matrix, str(_Source(matrix).dtype), _stamp(matrix))

    @property
    def shape(self) -> tuple[int, int]:
        return self.matrix.shape

    def load(self) -> np.ndarray:
        """The whole matrix, read once per process and kept for the next calls.

        Raises
        ------
        InputError
            The file changed after it was checked (or was removed).
        """
        with _LOCK:
            if _CACHE.get("key") == self:
                return _CACHE["values"]
            _CACHE.clear()  # one matrix per process: drop the last before reading the next
            values = self._read()
            _CACHE.update(key=self, values=values)
            return values

    def _source(self) -> _Source:
        """The matrix opened for reading, after checking that it did not change."""
        where = self.matrix.path + ("" if self.matrix.name is None else f"/{self.matrix.name}")
        try:
            stamp = _stamp(self.matrix)
        except FileNotFoundError:
            stamp = None
        if stamp != self.stamp:
            raise InputError(
                f"the distance matrix {where!r} changed or was removed after it was checked "
                "(fit or load); refit on the new file, or load the model again"
            )
        return _Source(self.matrix)

    def blocks(self, rows: int) -> Iterator[tuple[int, np.ndarray]]:
        """``(start, block)`` for consecutive blocks of ``rows`` rows, read from the file."""
        return self._source().blocks(rows)

    def _read(self) -> np.ndarray:
        source = self._source()
        dtype = np.dtype(self.dtype)
        if (
            isinstance(source.data, np.ndarray)
            and source.data.dtype == dtype
            and (source.data.flags.c_contiguous)
        ):
            return np.asarray(source.data)  # memory-mapped: the page cache is shared
        values = np.empty(self.shape, dtype=dtype)
        for start, block in source.blocks():
            values[start : start + block.shape[0]] = block
        return values

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        values = self.load()
        return values if dtype is None else values.astype(dtype)


_LOCK = threading.Lock()
_CACHE: dict[str, Any] = {}


def clear_cache() -> None:
    """Forget the matrix this process loaded for :meth:`StoredDistances.load`."""
    with _LOCK:
        _CACHE.clear()


def distance_values(D: np.ndarray | StoredDistances) -> np.ndarray:
    """The values of an in-memory matrix or of a stored one (loaded once per process)."""
    return D.load() if isinstance(D, StoredDistances) else D


def distance_blocks(D: np.ndarray | StoredDistances, rows: int) -> Iterator[tuple[int, np.ndarray]]:
    """``(start, block)`` of ``rows`` rows at a time; a stored matrix is never read whole."""
    if isinstance(D, StoredDistances):
        yield from D.blocks(rows)
        return
    for start in range(0, D.shape[0], rows):
        yield start, D[start : start + rows]


@dataclass(frozen=True)
class Distances:
    """A checked observed distance matrix and what the check measured.

    Attributes
    ----------
    values : ndarray or StoredDistances
        The matrix in memory, or a reference to it on disk.
    mean : float
        Mean of the observed entries (float64 row sums, added exactly).
    observed : float
        Fraction of the entries observed (not NaN).
    fingerprint : str or None
        BLAKE2b digest of the values (C order, float32 or float64), if asked for.
    """

    values: np.ndarray | StoredDistances
    mean: float
    observed: float
    fingerprint: str | None = None

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.values.shape)

    @property
    def itemsize(self) -> int:
        return np.dtype(self.values.dtype).itemsize


def _check_symmetric(block: np.ndarray, strip: np.ndarray, start: int, what: str) -> None:
    """Refuse ``block[i, j] != strip[j, i]`` beyond float32 rounding, or a one-sided NaN.

    ``block`` holds rows ``start ...`` from column ``start`` on, ``strip`` the
    same columns from row ``start`` on (the mirrored cells).  Only the cells
    that differ exactly (NaN among them) are looked at closely.
    """
    # compared along the strip's memory order; nonzero lists the block's cells row by row
    rows, cols = np.nonzero((strip != block.T).T)
    if rows.size == 0:
        return
    a, b = block[rows, cols], strip[cols, rows]
    seen, seen_t = ~np.isnan(a), ~np.isnan(b)
    tol = SYMMETRY_RTOL * np.maximum(np.abs(np.nan_to_num(a)), 1.0)
    differ = (seen != seen_t) | (seen & seen_t & (np.abs(a - b) > tol))
    if differ.any():
        k = int(np.argmax(differ))
        i, j = int(rows[k]), int(cols[k])
        raise InputError(
            f"{what} is not symmetric: [{start + i}, {start + j}] is {float(a[k])!r} but "
            f"[{start + j}, {start + i}] is {float(b[k])!r}; SMERF needs D[i, j] == "
            "D[j, i] (NaN on both sides for a pair not observed); symmetrise it first, e.g. "
            "D = (D + D.T) / 2, or fill the missing side"
        )


def load_distances(
    source: Any, *, n: int | None = None, what: str = "D", fingerprint: bool = False
) -> Distances:
    """The observed matrix, checked: in memory as a C-contiguous float array, on disk as a
    :class:`StoredDistances` reference (never read whole here).

    Parameters
    ----------
    source : path or array-like
        See :func:`distforest.io.matrices.load_matrix`; NaN = pair not observed.
    n : int, optional
        Rows the matrix must have (the rows of X).
    what : str
        How error messages name it.
    fingerprint : bool
        Also hash the values (one more pass over them in memory).

    Returns
    -------
    Distances
        float32 values stay float32, anything else becomes float64.

    Raises
    ------
    InputError
        Not square, not ``n`` rows, infinite values, a row with nothing
        observed, or not symmetric.
    """
    matrix = load_matrix(source, what)
    rows, cols = matrix.shape
    check_shape(matrix, what, square=True)
    if n is not None and rows != n:
        raise InputError(
            f"{what} is {rows} x {cols} but X has {n} rows; D must have "
            "one row and one column per row of X, in the same order"
        )
    stamp = _stamp(matrix) if isinstance(matrix, StoredMatrix) else None
    src = _Source(matrix)
    sums: list[float] = []
    count = 0
    digest = hashlib.blake2b(digest_size=16) if fingerprint else None
    for start, block in src.blocks():
        check_rows(block, start, what)
        stop = start + block.shape[0]
        strip = src.read(slice(start, None), slice(start, stop))
        _check_symmetric(block[:, start:], strip, start, what)
        seen = ~np.isnan(block)
        # per-row float64 sums, added exactly: the mean does not depend on the blocks
        sums.extend(np.where(seen, block, 0).astype(np.float64).sum(axis=1).tolist())
        count += int(seen.sum())
        if digest is not None:
            digest.update(block.data)
    values: np.ndarray | StoredDistances
    if isinstance(matrix, np.ndarray):
        values = np.ascontiguousarray(matrix, dtype=src.dtype)
    else:
        assert stamp is not None
        values = StoredDistances(matrix, str(src.dtype), stamp)
    return Distances(
        values, math.fsum(sums) / count, count / (rows * cols),
        None if digest is None else digest.hexdigest(),
    )  # fmt: skip
