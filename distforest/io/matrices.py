"""Precomputed pairwise matrices as inputs: NumPy, ``.npy`` files, Zarr, xarray, Dask.

A matrix given in memory stays a NumPy array (the caller shares it with the
workers once).  A matrix on disk becomes a :class:`StoredMatrix`, a small
picklable reference that each task opens itself, reading only the entries it
asks for (a ``.npy`` file through a memory map, a Zarr array through
coordinate selection, which touches only the chunks holding those entries).
So a 10 GB similarity matrix is never loaded whole, nor sent to a worker.

Zarr matrices stored as integers with a CF ``scale_factor`` attribute (how
distforest stores Breiman's proximity: counts of trees, scale ``1/T``) are
decoded on reading, as xarray does: ``count * scale_factor``, and cells
equal to ``_FillValue`` (never written) as NaN.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from distforest import settings
from distforest.errors import InputError
from distforest.io.in_memory import fits_in_memory, in_memory_cells

#: Array names tried, in order, in a Zarr group holding several arrays.
PREFERRED_NAMES = ("similarity", "distance", "S", "D", "Q", "matrix")

#: Type of the values decoded from integer counts (holds every count exactly).
DECODED_DTYPE = np.dtype(np.float32)

#: Rows read in one call at most (bytes), so a level asking thousands of rows stays small.
ROW_BATCH_BYTES = 32 * 1024**2


def _scale(attrs: Mapping[str, Any], dtype: np.dtype) -> float | None:
    """The CF ``scale_factor`` of an integer array, or None if it is stored as it is."""
    scale = attrs.get("scale_factor")
    return None if scale is None or dtype.kind not in "iu" else float(scale)


def decoded_dtype(array: zarr.Array) -> np.dtype:
    """The type a reader sees: float32 for CF-scaled integers, else the stored type."""
    dtype = np.dtype(array.dtype)
    return DECODED_DTYPE if _scale(array.attrs, dtype) is not None else dtype


def decode(values: Any, attrs: Mapping[str, Any]) -> np.ndarray:
    """Values read from a Zarr array with attributes ``attrs``, decoded like xarray does.

    Integers with a ``scale_factor`` become ``values * scale_factor`` as
    float32 (computed in float64, as xarray does, then rounded once), with
    NaN where they equal ``_FillValue``; anything else is returned unchanged.
    For counts of T trees stored with ``scale_factor = 1/T`` the result is
    bit for bit ``float32(count / T)``.
    """
    values = np.asarray(values)
    scale = _scale(attrs, values.dtype)
    if scale is None:
        return values
    out = (values * scale).astype(DECODED_DTYPE)
    fill = attrs.get("_FillValue")
    if fill is not None:
        out[values == fill] = np.nan
    return out


@dataclass(frozen=True)
class StoredMatrix:
    """A 2-D matrix on disk, opened lazily where it is read.

    Attributes
    ----------
    path : str
        A ``.npy`` file or a Zarr store directory.
    name : str or None
        The array's path inside a Zarr group (None: the store is the array, or ``.npy``).
    shape : tuple of int
    """

    path: str
    name: str | None
    shape: tuple[int, int]

    def __post_init__(self) -> None:
        # Absolute from the start: tasks open it on workers, whose folder may differ.
        if "://" not in self.path:
            object.__setattr__(self, "path", str(Path(self.path).absolute()))

    def open(self) -> Any:
        """An object answering ``m[rows, cols]`` (integer arrays, element-wise) and ``m[a:b]``."""
        if self.path.endswith(".npy"):
            return np.load(self.path, mmap_mode="r")
        node: Any = zarr.open(self.path, mode="r")
        arr = node if self.name is None else node[self.name]
        return CoordinateReader(arr)


class CoordinateReader:
    """Element-wise reads of a Zarr array, optionally shifted by a row offset.

    ``reader[rows, cols]`` with two integer arrays returns
    ``array[rows[t] + offset, cols[t]]`` for every t: only the chunks holding
    those entries are read.  ``reader[a:b]`` is a reader of rows ``a .. b - 1``
    (sharing the row cache).

    When the array's chunks span whole rows (chunks ``(h, n)``, e.g. ``(1, n)``),
    any entry of a row costs reading the row's chunk anyway: the reader then
    reads whole rows and keeps the most recently used ones (up to
    ``cache_bytes``), so a row asked again (a SimForest level asks
    ``S(O_i, O_j)``, then ``O_i``'s row against the node's members) is read
    from disk once.  Values are the same either way.

    Parameters
    ----------
    array : zarr.Array
    offset : int
        Added to every requested row.
    cache_bytes : int, optional
        Most bytes of whole rows kept (at least one row); 0 turns whole-row
        reading off (plain coordinate selection).  Default: the
        ``distforest.row-cache-bytes`` setting (:mod:`distforest.settings`).

    Attributes
    ----------
    rows_read : int
        Rows read from the store through the row cache (0 for other layouts).
    """

    def __init__(self, array: zarr.Array, offset: int = 0, cache_bytes: int | None = None) -> None:
        if cache_bytes is None:
            cache_bytes = int(settings.get("row-cache-bytes"))
        self.array = array
        self.offset = offset
        self.attrs = dict(array.attrs)
        chunks = tuple(array.chunks)
        self.whole_rows = len(chunks) == 2 and chunks[1] >= array.shape[1] and cache_bytes > 0
        self.row_bytes = int(array.shape[1]) * np.dtype(array.dtype).itemsize
        self.cache_rows = max(1, cache_bytes // max(1, self.row_bytes))
        self._cache: OrderedDict[int, np.ndarray] = OrderedDict()
        self.rows_read = 0

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, slice):
            start = 0 if key.start is None else int(key.start)
            view = copy.copy(self)
            view.offset = self.offset + start
            return view
        rows, cols = key
        rows = np.asarray(rows, dtype=np.int64) + self.offset
        cols = np.asarray(cols, dtype=np.int64)
        if rows.size == 0:
            return np.empty(0, dtype=decoded_dtype(self.array))
        if self.whole_rows:
            return decode(self._from_rows(rows, cols), self.attrs)
        return decode(self.array.get_coordinate_selection((rows, cols)), self.attrs)

    def _from_rows(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """``array[rows[t], cols[t]]`` from whole rows, cached or read in batches."""
        order = np.argsort(rows, kind="stable")
        uniq, starts = np.unique(rows[order], return_index=True)
        ends = np.append(starts[1:], order.shape[0])
        out = np.empty(rows.shape[0], dtype=np.dtype(self.array.dtype))
        cache = self._cache
        missing = []
        for k, row in enumerate(uniq.tolist()):
            values = cache.get(row)
            if values is None:
                missing.append(k)
                continue
            cache.move_to_end(row)
            at = order[starts[k] : ends[k]]
            out[at] = values[cols[at]]
        batch = max(1, ROW_BATCH_BYTES // max(1, self.row_bytes))
        for b in range(0, len(missing), batch):
            ks = missing[b : b + batch]
            block = np.asarray(self.array.get_orthogonal_selection((uniq[ks], slice(None))))
            self.rows_read += len(ks)
            for q, k in enumerate(ks):
                at = order[starts[k] : ends[k]]
                out[at] = block[q, cols[at]]
                cache[int(uniq[k])] = block[q].copy()
                if len(cache) > self.cache_rows:
                    cache.popitem(last=False)
        return out


def _zarr_matrix(node: Any, path: str, name: str | None, what: str) -> StoredMatrix:
    if isinstance(node, zarr.Array):
        return StoredMatrix(path, name, tuple(node.shape))  # type: ignore[arg-type]
    arrays = {k: a for k, a in node.arrays() if a.ndim == 2}
    pick = next((k for k in PREFERRED_NAMES if k in arrays), None)
    if pick is None and len(arrays) == 1:
        pick = next(iter(arrays))
    if pick is None:
        found = ", ".join(sorted(arrays)) or "none"
        raise InputError(
            f"{what}: the Zarr group {path!r} holds {len(arrays)} 2-D arrays ({found}); "
            f"name one as {path}/<array> or keep a single 2-D array in the group"
        )
    arr = arrays[pick]
    inner = pick if name is None else f"{name}/{pick}"
    return StoredMatrix(path, inner, tuple(arr.shape))


def _open_path(path: Path, what: str) -> np.ndarray | StoredMatrix:
    if not path.exists():
        # "store.zarr/similarity": an array inside a group
        parent, name = path.parent, path.name
        if parent.exists() and parent.is_dir():
            try:
                node = zarr.open_group(str(parent), mode="r")[name]
            except (KeyError, FileNotFoundError, ValueError, TypeError):
                node = None
            if node is not None:
                return _zarr_matrix(node, str(parent), name, what)
        raise InputError(f"{what}: {str(path)!r} does not exist")
    if path.suffix == ".npy":
        try:
            arr = np.load(path, mmap_mode="r")
        except (ValueError, OSError) as exc:
            raise InputError(f"{what}: cannot read {str(path)!r} as a .npy file: {exc}") from None
        if arr.ndim != 2:
            raise InputError(f"{what}: {str(path)!r} has shape {arr.shape}; a 2-D matrix is needed")
        return StoredMatrix(str(path), None, tuple(arr.shape))
    try:
        node = zarr.open(str(path), mode="r")
    except (FileNotFoundError, ValueError, TypeError, KeyError) as exc:
        raise InputError(
            f"{what}: {str(path)!r} is neither a .npy file nor a Zarr array or group ({exc}); "
            "save the matrix with numpy.save('S.npy', S) or as a Zarr array"
        ) from None
    return _zarr_matrix(node, str(path), None, what)


def _local_root(arr: zarr.Array) -> str | None:
    root = getattr(arr.store, "root", None)
    return None if root is None else str(root)


def load_matrix(source: Any, what: str = "the matrix") -> np.ndarray | StoredMatrix:
    """Read a user's pairwise matrix without loading a big one.

    Parameters
    ----------
    source : ndarray, str, Path, zarr.Array, xarray.DataArray or dask array
        A path names a ``.npy`` file, a Zarr array, a Zarr group with one 2-D
        array (or one named ``similarity``/``distance``), or ``group/array``.
    what : str
        How error messages name the input (e.g. ``"--similarity S.npy"``).

    Returns
    -------
    ndarray or StoredMatrix
        In-memory inputs as float arrays; inputs on disk as references.
    """
    if isinstance(source, StoredMatrix):
        return source
    if isinstance(source, str | Path):
        out = _open_path(Path(source), what)
    elif isinstance(source, zarr.Array):
        root = _local_root(source)
        if root is not None:
            out = StoredMatrix(root, source.path or None, tuple(source.shape))  # type: ignore[arg-type]
        else:
            out = decode(source[...], dict(source.attrs))
    else:
        data: Any = getattr(source, "data", None) if hasattr(source, "dims") else source
        if hasattr(data, "compute") and hasattr(data, "chunks"):  # dask
            if not fits_in_memory(*data.shape):
                nbytes = int(np.prod(data.shape)) * data.dtype.itemsize
                raise InputError(
                    f"{what} is a Dask array of {nbytes / 1e9:.1f} GB, above the in-memory "
                    f"limit of {in_memory_cells():,} cells; write it to Zarr by rows "
                    "first (array.rechunk((1, -1)).to_zarr('S.zarr')) and pass the path, so "
                    "tasks read only the rows they need"
                )
            data = data.compute()
        out = np.asarray(data if data is not None else source)
    if isinstance(out, np.ndarray):
        if out.ndim != 2:
            raise InputError(f"{what} must be a 2-D matrix, got shape {out.shape}")
        if not np.issubdtype(out.dtype, np.floating):
            try:
                out = out.astype(np.float64)
            except (TypeError, ValueError):
                raise InputError(f"{what} must hold numbers, got dtype {out.dtype}") from None
    return out


def layout_advice(matrix: np.ndarray | StoredMatrix, what: str) -> str | None:
    """Advice for a Zarr matrix whose chunks cut its rows (None when rows are whole chunks).

    SimForest reads a pair object's row against a node's members, scattered
    over the columns; every read touches whole chunks (inner chunks when
    sharded), so chunks ``(1, n)`` read a needed row once and tiles read
    many rows for one.  ``benchmarks/results/simforest_scale.md`` measures it.
    """
    if not isinstance(matrix, StoredMatrix) or matrix.path.endswith(".npy"):
        return None
    node: Any = zarr.open(matrix.path, mode="r")
    arr = node if matrix.name is None else node[matrix.name]
    chunks = tuple(int(c) for c in arr.chunks)
    n = int(arr.shape[1])
    if chunks[1] >= n:
        return None
    return (
        f"{what} is stored in chunks of {chunks}, which cut its rows: each row a tree reads "
        f"pulls whole chunks of other rows too.  Store it by rows, chunks (1, {n}), for far "
        f"fewer bytes read, e.g. dask.array.from_zarr({matrix.path!r}"
        + (f", component={matrix.name!r}" if matrix.name else "")
        + ").rechunk((1, -1)).to_zarr('S_rows.zarr')"
    )


def open_matrix(matrix: np.ndarray | StoredMatrix) -> Any:
    """What a task reads entries from: the array itself, or the opened stored matrix."""
    return matrix.open() if isinstance(matrix, StoredMatrix) else matrix


def row_blocks(matrix: np.ndarray | StoredMatrix, rows: int) -> Iterator[tuple[int, np.ndarray]]:
    """``(start, block)`` for consecutive blocks of ``rows`` rows, read one at a time."""
    n = matrix.shape[0]
    attrs: Mapping[str, Any] = {}
    if isinstance(matrix, StoredMatrix):
        if matrix.path.endswith(".npy"):
            data: Any = np.load(matrix.path, mmap_mode="r")
        else:
            node: Any = zarr.open(matrix.path, mode="r")
            data = node if matrix.name is None else node[matrix.name]
            attrs = dict(data.attrs)
    else:
        data = matrix
    for start in range(0, n, rows):
        yield start, np.asarray(decode(data[start : start + rows], attrs), dtype=np.float64)


def check_shape(
    matrix: np.ndarray | StoredMatrix, what: str, *, square: bool, n_columns: int | None = None
) -> None:
    """Refuse a matrix that is empty, not square when it must be, or of the wrong width."""
    n, m = matrix.shape
    if square and n != m:
        raise InputError(
            f"{what} has shape {n} x {m}; a square matrix of every object against every "
            "object is needed (rows and columns in the order of the labels)"
        )
    if n_columns is not None and m != n_columns:
        raise InputError(
            f"{what} has {m} columns but the model was trained on {n_columns} objects; "
            "give one column per training object, in training order"
        )
    if n == 0:
        raise InputError(f"{what} is empty")


#: Largest magnitude a float32 holds: every float input (features, similarities,
#: distances) must stay within it.
FLOAT32_MAX = float(np.finfo(np.float32).max)


def check_rows(values: np.ndarray, start: int, what: str) -> None:
    """Refuse an infinite entry or a row with nothing observed in rows ``start ...``."""
    bad = np.isinf(values)
    if bad.any():
        i, j = (int(k) for k in np.argwhere(bad)[0])
        raise InputError(
            f"{what}[{start + i}, {j}] is {values[i, j]!r}; entries must be finite numbers "
            "(NaN marks a pair that was not observed)"
        )
    with np.errstate(invalid="ignore"):
        huge = np.abs(values) > FLOAT32_MAX
    if huge.any():
        i, j = (int(k) for k in np.argwhere(huge)[0])
        raise InputError(
            f"{what}[{start + i}, {j}] is {float(values[i, j])!r}, beyond the float32 range the "
            f"forests compute in (|x| <= {FLOAT32_MAX:.3g}); rescale the matrix (e.g. divide "
            "it by a power of ten) or fix the entry"
        )
    empty = np.isnan(values).all(axis=1)
    if empty.any():
        i = int(np.flatnonzero(empty)[0])
        raise InputError(
            f"{what}: row {start + i} has no observed entry (all NaN); drop that object "
            f"({int(empty.sum())} such rows in this block) or give it some similarities"
        )


def check_entries(
    matrix: np.ndarray | StoredMatrix, what: str, *, square: bool, n_columns: int | None = None
) -> None:
    """Refuse a matrix with a wrong shape, an infinite entry, or a row with nothing observed.

    The check reads the matrix once, block by block (never whole).
    """
    check_shape(matrix, what, square=square, n_columns=n_columns)
    block = max(1, (64 * 1024**2) // (8 * max(1, matrix.shape[1])))
    for start, values in row_blocks(matrix, block):
        check_rows(values, start, what)
