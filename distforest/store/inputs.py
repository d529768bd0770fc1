"""The encoded input table inside a run store: ``input/X`` and ``input/y``.

Layout::

    run.zarr/
      input/
        attrs: source, feature_names, categories, target_name, target_kind,
               target_labels, fingerprint, lengths (rows per source partition),
               id_name (the ID column, or null)
        X   (sample, feature) float32 (float64 if so encoded), chunks (rows, n_features)
        y   (sample,)          float64 / int64 values, or int32 codes of target_labels
        id  (sample,)          the rows' IDs (int64 or text), with an ID column only

:func:`ingest` reads a source by partitions (:mod:`distforest.io.ingest`)
and writes pass 2 with ``dask.array.to_zarr``, after a rechunk so that each
task writes whole Zarr chunks (two tasks writing one chunk would lose data
without an error).  The driver only sees the summaries.

:class:`StoredTable` is the handle estimators take instead of an in-memory
table; tasks read its rows with :func:`input_rows` (all rows read once per
worker process and shared by its tasks) or :func:`input_chunk`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from distforest.errors import StoreError
from distforest.io.attrs import decode_attrs, encode_attrs
from distforest.io.ingest import Ingested, read_partitioned
from distforest.io.source import row_chunks
from distforest.store.run_store import RunStore, task_array
from distforest.store.schema import INPUT_GROUP, INPUT_ROWS

__all__ = [
    "INPUT_GROUP",
    "INPUT_ROWS",
    "PendingInput",
    "StoredTable",
    "copy_target",
    "ingest",
    "input_chunk",
    "input_rows",
    "partition_names",
    "write_ingested",
    "write_row_ids",
]


@dataclass(frozen=True)
class StoredTable:
    """An encoded table in a run store, read by tasks (never whole by the driver).

    Attributes
    ----------
    path : str
        The run store.
    n_samples, n_features : int
    feature_names : tuple of str
    categories : dict of str to tuple
    target_name : str or None
    target_kind : str or None
        ``"float"``, ``"int"`` or ``"labels"`` (y holds codes of ``target_labels``).
    target_labels : tuple
    source : str
    fingerprint_ : str
    rows : int
        Rows per chunk of ``input/X``.
    id_name : str or None
        The ID column, whose values are ``input/id`` (None: rows are numbered).
    """

    path: str
    n_samples: int
    n_features: int
    feature_names: tuple[str, ...]
    categories: dict[str, tuple[str, ...]]
    target_name: str | None
    target_kind: str | None
    target_labels: tuple[Any, ...]
    source: str
    fingerprint_: str
    rows: int
    id_name: str | None = None

    @property
    def X_name(self) -> str:
        """Path of the features in the store."""
        return f"{INPUT_GROUP}/X"

    @property
    def has_target(self) -> bool:
        """Whether ``input/y`` exists."""
        return self.target_kind is not None

    @property
    def store_path(self) -> str:
        """The run store (a fit on these rows writes its results there)."""
        return self.path

    def fingerprint(self) -> str:
        """Hash of the partitions' summaries (counts, ranges, levels), not of every byte."""
        return self.fingerprint_

    def read_y(self) -> np.ndarray | None:
        """The target (O(n)); label codes turned back into labels."""
        if not self.has_target:
            return None
        y = np.asarray(zarr.open_array(self.path, path=f"{INPUT_GROUP}/y", mode="r")[...])
        if self.target_kind == "labels":
            return np.asarray(self.target_labels, dtype=object)[y]
        return y

    def quality(self) -> dict[str, Any]:
        """Rows, features and missing cells (from the partitions' summaries; rows with one:
        not counted)."""
        a = decode_attrs(RunStore.open(self.path).subgroup(INPUT_GROUP).attrs)
        return _quality(self.n_samples, self.n_features, a.get("missing") or {})

    def placed(self, store: str, attrs: dict[str, Any]) -> StoredTable:
        """These rows: already in a store, the fit reads them there."""
        return self

    def chunks(self) -> list[slice]:
        """Row slices of the chunks of ``input/X``."""
        return row_chunks(self.n_samples, self.rows)

    def target_classes(self) -> tuple[Any, ...] | None:
        """The sorted distinct labels when ``input/y`` holds their codes, else None."""
        return self.target_labels if self.target_kind == "labels" else None

    def read_codes(self) -> np.ndarray:
        """``input/y`` (codes of :meth:`target_classes`) read a chunk at a time into int16
        (int32 for many classes): 2 bytes a row on the driver, not a code and a label."""
        y = zarr.open_array(self.path, path=f"{INPUT_GROUP}/y", mode="r")
        many = len(self.target_labels) > 1 << 15
        codes = np.empty(self.n_samples, dtype=np.int32 if many else np.int16)
        for rows in row_chunks(self.n_samples, int(y.chunks[0])):
            codes[rows] = y[rows]
        return codes

    def row_ids(self) -> Any:
        """``input/id`` (read on use), or None: rows are numbered."""
        if self.id_name is None:
            return None
        return zarr.open_array(self.path, path=f"{INPUT_GROUP}/id", mode="r")

    def read_rows(self, rows: slice, dtype: Any = np.float32) -> np.ndarray:
        """Rows ``rows`` of ``input/X`` in ``dtype``."""
        values = zarr.open_array(self.path, path=self.X_name, mode="r")[rows]
        return np.ascontiguousarray(values, dtype=dtype)

    def rows_handle(self, share: Any, dtype: Any = np.float32) -> StoredRows:
        """The rows for the tasks: the store's path, read whole once per worker process
        (:class:`StoredRows`; ``np.asarray(handle, dtype)`` converts if the store's
        dtype differs).  ``share`` is not needed: no rows are sent."""
        return StoredRows.of(self.path, self.X_name, self.source, self.fingerprint_)

    @classmethod
    def open(cls, path: str | Path) -> StoredTable:
        """The stored input of the run store at ``path``."""
        rs = RunStore.open(path)
        if INPUT_GROUP not in rs.group:
            raise StoreError(f"store {rs.path!r} holds no {INPUT_GROUP}/ group; ingest a table "
                             "into it first (distforest.store.inputs.ingest)")  # fmt: skip
        group = rs.subgroup(INPUT_GROUP)
        a: dict[str, Any] = decode_attrs(group.attrs)
        X = group["X"]
        assert isinstance(X, zarr.Array)
        return cls(rs.path, int(X.shape[0]), int(X.shape[1]), tuple(a["feature_names"]),
                   {k: tuple(v) for k, v in a["categories"].items()}, a["target_name"],
                   a["target_kind"], tuple(a["target_labels"]), a["source"], a["fingerprint"],
                   int(X.chunks[0]), a.get("id_name"))  # fmt: skip


def ingest(
    source: Any,
    store: str | Path,
    *,
    target: str | None = None,
    drop: tuple[str, ...] | list[str] = (),
    na_values: tuple[str, ...] | list[str] = (),
    allow_missing: bool = True,
    rows: int = INPUT_ROWS,
    blocksize: Any = None,
    overwrite: bool = False,
    attrs: dict[str, Any] | None = None,
    id: str | None = None,
    dtype: Any = np.float32,
) -> StoredTable:
    """Read ``source`` by partitions into a new run store's ``input/`` group.

    Every check of :func:`distforest.io.load_table` is made on the partitions'
    summaries before the store is created; the store stays ``running`` (never
    ``complete``) until its run finishes.

    Parameters
    ----------
    source
        A path (CSV/TSV or glob, Parquet file or dataset folder, Zarr), a
        dask/pandas DataFrame, dask array, xarray Dataset or zarr Array/Group.
    store : str or Path
        The run store to create.
    target, drop, na_values, allow_missing
        As :func:`distforest.io.load_table`.
    rows : int
        Rows per chunk of ``input/X``.
    blocksize : int or str, optional
        Bytes per CSV partition.
    overwrite : bool
        Replace an existing distforest store.
    attrs : dict, optional
        More attributes of the store.
    id : str, optional
        Column of row IDs, written by the tasks as ``input/id``.
    dtype : numpy dtype, default float32
        Of ``input/X``: float32 as the trees read them, or float64, the values
        :func:`~distforest.io.load_table` gives (SMERF grows its trees on those).

    Returns
    -------
    StoredTable
    """
    data = read_partitioned(
        source,
        target=target,
        drop=tuple(drop),
        na_values=tuple(na_values),
        allow_missing=allow_missing,
        blocksize=blocksize,
        id=id,
        dtype=dtype,
    )
    return write_ingested(data, store, rows=rows, overwrite=overwrite, attrs=attrs)


def write_ingested(
    data: Ingested,
    store: str | Path,
    *,
    rows: int = INPUT_ROWS,
    overwrite: bool = False,
    attrs: dict[str, Any] | None = None,
) -> StoredTable:
    """Create run store ``store`` and write pass 2 of ``data`` into its ``input/`` group.

    Returns
    -------
    StoredTable
    """
    import dask.array as da

    enc = data.encoding
    n, d = enc.n_samples, len(enc.features)
    rows = max(1, min(rows, n))
    rs = RunStore.create(store, attrs=dict(attrs or {}), overwrite=overwrite)
    group = rs.group.require_group(INPUT_GROUP)
    group.attrs.update(
        encode_attrs(
            {
                "source": data.source,
                "feature_names": list(enc.features),
                "categories": {k: list(v) for k, v in enc.categories.items()},
                "target_name": enc.target,
                "target_kind": enc.target_kind,
                "target_labels": [
                    v if isinstance(v, str | int | float) else str(v) for v in enc.target_labels
                ],
                "fingerprint": enc.fingerprint,
                "lengths": list(enc.lengths),
                "part_names": list(data.part_names),
                "missing": dict(enc.missing),
                "id_name": data.id_name,
            }
        )
    )
    # float32 as the trees read them; float64 when pass 1 encoded float64 (SMERF, k-NN)
    X = group.create_array("X", shape=(n, d), chunks=(rows, d), dtype=data.X.dtype,
                           dimension_names=("sample", "feature"), fill_value=np.nan)  # fmt: skip
    X.attrs.update(encode_attrs({"feature_names": list(enc.features)}))
    targets = [(data.X.rechunk((rows, d)), X)]
    if data.y is not None:
        y = group.create_array("y", shape=(n,), chunks=(rows,), dtype=data.y.dtype,
                               dimension_names=("sample",))  # fmt: skip
        targets.append((data.y.rechunk((rows,)), y))
    if data.ids is not None:
        ids = group.create_array("id", shape=(n,), chunks=(rows,),
                                 dtype=str if data.ids.dtype == object else data.ids.dtype,
                                 dimension_names=("sample",))  # fmt: skip
        targets.append((data.ids.rechunk((rows,)), ids))
    # Rechunked to the Zarr chunks: each task writes whole chunks that no other task
    # touches (two tasks writing one chunk would lose data without an error).
    for src, _dst in targets:
        if any(c % rows for c in src.chunks[0][:-1]):  # pragma: no cover - rechunk's promise
            raise StoreError(f"input chunks {src.chunks[0][:4]} are not whole {rows}-row chunks")
    sources: list[Any] = [src for src, _ in targets]
    destinations: list[Any] = [dst for _, dst in targets]
    da.store(sources, destinations, lock=False)
    return StoredTable.open(rs.path)


def partition_names(table: StoredTable) -> tuple[list[str], list[int]]:
    """How messages name the source partitions of a stored table, and their rows: the part
    files (a store ingested before they were recorded: the table's source)."""
    a: dict[str, Any] = decode_attrs(RunStore.open(table.path).subgroup(INPUT_GROUP).attrs)
    lengths = [int(v) for v in a.get("lengths") or [table.n_samples]]
    names = [str(v) for v in a.get("part_names") or []]
    return (names if len(names) == len(lengths) else [table.source] * len(lengths)), lengths


def copy_target(table: StoredTable, rs: RunStore, n_features: int) -> None:
    """An ``input/`` group in ``rs`` with ``table``'s target (``input/y`` copied by tasks)
    and attributes, its ``n_features`` features named ``0 .. d-1`` without categories or
    target name (an array's); the caller writes ``input/X`` (rows derived from ``table``'s,
    in its order)."""
    import dask.array as da

    old = RunStore.open(table.path).subgroup(INPUT_GROUP)
    a: dict[str, Any] = decode_attrs(old.attrs)
    group = rs.group.require_group(INPUT_GROUP)
    group.attrs.update(encode_attrs({**a, "feature_names": [str(j) for j in range(
        n_features)], "categories": {}, "target_name": None, "id_name": None}))  # fmt: skip
    if "y" in old:
        y = old["y"]
        assert isinstance(y, zarr.Array)
        copy: Any = group.create_array("y", shape=y.shape, chunks=y.chunks, dtype=y.dtype,
                                  dimension_names=("sample",))  # fmt: skip
        da.store(da.from_zarr(y), copy, lock=False)


def write_row_ids(rs: RunStore, table: StoredTable) -> Any:
    """Copy ``input/id`` into the store's row coordinates (``sample``, ``sample_i``,
    ``sample_j``), by tasks, chunk by chunk; returns the ``sample`` array (a handle: the
    IDs are read when an output needs them, not here).

    Each coordinate array gets the ``id_name`` attribute, as
    :meth:`RunStore.write_coordinates` gives IDs held in memory.
    """
    import dask.array as da

    from distforest.store.schema import ROW_COORDS

    if table.id_name is None:
        raise StoreError(f"store {rs.path!r}: the stored input has no ID column")
    source = rs.group[f"{INPUT_GROUP}/id"]
    assert isinstance(source, zarr.Array)
    ids = da.from_zarr(source)
    targets: list[Any] = []
    for dim in ROW_COORDS:
        arr = rs.group.create_array(dim, shape=source.shape, chunks=source.chunks,
                                    dtype=source.dtype, dimension_names=(dim,),
                                    overwrite=True)  # fmt: skip
        arr.attrs.update(encode_attrs({"id_name": table.id_name}))
        targets.append(arr)
    da.store([ids] * len(targets), targets, lock=False)  # same chunks: whole chunks per task
    return rs.array("sample")


@dataclass(frozen=True)
class PendingInput:
    """A table whose summaries are read (pass 1) and whose store is not written yet.

    What a job needs before it creates its store: the size, the source and
    the fingerprint (for the job's spec); :meth:`placed` then runs pass 2.
    """

    data: Ingested

    @property
    def source(self) -> str:
        """The input, as the user gave it."""
        return self.data.source

    @property
    def n_samples(self) -> int:
        """Rows of the table."""
        return self.data.encoding.n_samples

    @property
    def n_features(self) -> int:
        """Feature columns."""
        return len(self.data.encoding.features)

    def fingerprint(self) -> str:
        """Hash of the partitions' summaries."""
        return self.data.encoding.fingerprint

    @property
    def target_name(self) -> str | None:
        """The target column, or None."""
        return self.data.encoding.target

    def quality(self) -> dict[str, Any]:
        """Rows, features and missing cells (from the summaries; rows with one: unknown)."""
        return _quality(self.n_samples, self.n_features, self.data.encoding.missing)

    def target_classes(self) -> tuple[Any, ...] | None:
        """The sorted distinct labels when the target is text (kept as their codes), else None."""
        enc = self.data.encoding
        return tuple(enc.target_labels) if enc.target_kind == "labels" else None

    def read_y(self) -> np.ndarray | None:
        """The target's values, computed from the partitions (O(n)); None without one."""
        if self.data.y is None:
            return None
        y = np.asarray(self.data.y.compute())
        labels = self.target_classes()
        return y if labels is None else np.asarray(labels, dtype=object)[y]

    def placed(self, store: str, attrs: dict[str, Any]) -> StoredTable:
        """Create the run store ``store`` (replacing one) with ``attrs`` and write pass 2
        into its ``input/``: the rows the fit reads."""
        return write_ingested(self.data, store, overwrite=True, attrs=attrs)


def _quality(n: int, d: int, missing: dict[str, Any]) -> dict[str, Any]:
    """A report's data-quality counts of a table read by partitions (rows with a missing
    value are not counted there)."""
    return {"rows": n, "features": d, "missing_cells": int(sum(missing.values())),
            "rows_with_missing": None}  # fmt: skip


# -- inside tasks ----------------------------------------------------------------------

#: Whole arrays a worker process keeps for its tasks (rows of X; leaves and in-bag
#: counts transposed for the products).
KEPT_ARRAYS = 3
_cache: dict[tuple[str, str, bool], tuple[Any, np.ndarray]] = {}
_cache_lock = threading.Lock()


def input_rows(path: str, name: str = f"{INPUT_GROUP}/X", *, transpose: bool = False) -> np.ndarray:
    """All of array ``name`` in the store at ``path``, read once per process and shared.

    A worker that needs every row (to grow trees) reads them once; its other
    tasks get the same (read-only) array.  At most :data:`KEPT_ARRAYS` arrays
    are kept, the oldest dropped first; an array replaced in the store is read
    again.

    Parameters
    ----------
    path, name : str
    transpose : bool
        Keep the transpose, C-ordered (``(T, n)`` leaves for the products).
    """
    arr = task_array(path, name, "r")
    key = (str(path), name, transpose)
    with _cache_lock:
        kept = _cache.pop(key, None)
        if kept is not None and kept[0] is arr:
            _cache[key] = kept  # most recent last
            return kept[1]
        values = np.asarray(arr[...])
        if transpose:
            values = np.ascontiguousarray(values.T)
        values.setflags(write=False)
        _cache[key] = (arr, values)
        while len(_cache) > KEPT_ARRAYS:
            _cache.pop(next(iter(_cache)))
        return values


def input_chunk(path: str, rows: slice, name: str = f"{INPUT_GROUP}/X") -> np.ndarray:
    """Rows ``rows`` of ``name`` in the store at ``path`` (from the shared copy if read)."""
    with _cache_lock:
        kept = _cache.get((str(path), name, False))
    if kept is not None and kept[0] is task_array(path, name, "r"):
        return kept[1][rows]
    return np.asarray(task_array(path, name, "r")[rows])


@dataclass(frozen=True)
class StoredRows:
    """Rows of a store's 2-D array, read whole once per worker process by the tasks.

    A task indexes it as an array (``rows[a:b]``, ``np.asarray(rows)``): the
    first use in a process reads the array (:func:`input_rows`), later ones
    share that copy.  The object itself is a path and a name: sending it to
    tasks moves no rows, and the driver never reads them.
    """

    path: str
    name: str
    shape: tuple[int, int]
    #: Where the rows came from and a hash of them (the table's), for messages and records.
    source: str = ""
    fingerprint: str = ""

    @classmethod
    def of(cls, path: str | Path, name: str, source: str = "", fingerprint: str = "") -> StoredRows:
        """The rows of array ``name`` in the store at ``path``."""
        arr = task_array(str(path), name, "r")
        return cls(str(path), name, (int(arr.shape[0]), int(arr.shape[1])), source, fingerprint)

    def rows(self) -> np.ndarray:
        """All the rows (this process's shared, read-only copy)."""
        return input_rows(self.path, self.name)

    def __getitem__(self, key: Any) -> np.ndarray:
        if isinstance(key, slice):  # a chunk: from this process's copy if read, else alone
            return input_chunk(self.path, key, self.name)
        return self.rows()[key]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        rows = self.rows()
        return rows if dtype is None or rows.dtype == dtype else rows.astype(dtype)


#: Values a worker process keeps for the tasks of one fit: (kind, path, token) -> value.
_per_fit: dict[tuple[str, str, str], Any] = {}
_per_fit_lock = threading.Lock()


def per_fit(kind: str, path: str, token: str, make: Callable[[], Any]) -> Any:
    """``make()`` computed once per worker process for the fit ``token`` on the store at
    ``path`` and shared by that fit's tasks; a new fit drops the previous one's value of
    the same ``kind`` (the rows it scaled, the forest it read)."""
    key = (kind, str(path), token)
    with _per_fit_lock:
        if key not in _per_fit:
            for old in [k for k in _per_fit if k[0] == kind]:
                del _per_fit[old]
            _per_fit[key] = make()
        return _per_fit[key]


def forget_inputs() -> None:
    """Drop the rows kept by :func:`input_rows` and the values kept by :func:`per_fit`
    (call on every worker when done)."""
    with _cache_lock:
        _cache.clear()
    with _per_fit_lock:
        _per_fit.clear()
