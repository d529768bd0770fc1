"""The top-k proximity neighbours of every training row, exact, without the n x n matrix.

A dense proximity matrix grows as n^2 (170 GB of uint8 counts at a million
rows); most of its users only want each row's nearest rows by proximity.
Here every row's ``k`` largest proximities are found from the forest's
leaves alone: per tree the rows are grouped by leaf once (an inverted index,
:func:`distforest.kernels.coleaf.leaf_index`), then Dask tasks over blocks of
rows visit, for each row, only the rows sharing one of its leaves and keep
the best ``k`` (:func:`distforest.kernels.coleaf.block_neighbors`).

The values are those of the dense matrix, bit for bit (float32), and the
order is the dense row's: proximity descending, ties to the smaller row
number.  When a row has fewer than ``k`` rows of non-zero proximity, the rest
are the rows of proximity 0 with the smallest row numbers (the exact top k
of the dense row).  A row is not its own neighbour unless ``include_self``
(it then has the dense diagonal: 1 for ``original``, 1 or 0 for ``oob``, 0
for ``rfgap``).

With a store, each block of rows is written to ``neighbors_index`` and
``neighbors_proximity`` (``(sample, neighbor)``, chunked by the block) and
marked in ``done/neighbors_index``: an interrupted run resumes at the first
missing block.  Each row's result depends on that row alone, so it is the
same whatever the block size and the number of workers.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from distforest.errors import ParameterError, StoreError
from distforest.kernels import coleaf
from distforest.parallel.execution import Runner
from distforest.parallel.tasks import ProgressCallback
from distforest.store.run_store import (
    RunStore,
    complete_output,
    mark_done,
    read_rows,
    task_array,
    write_block,
)
from distforest.store.schema import array_spec, row_chunks

if TYPE_CHECKING:
    import scipy.sparse
    import xarray as xr

#: Names of the stored neighbour arrays (a contract: read by tools outside distforest).
INDEX, PROXIMITY = "neighbors_index", "neighbors_proximity"

#: Kernel code of each method.
METHOD_CODES = {"original": coleaf.ORIGINAL, "oob": coleaf.OOB, "rfgap": coleaf.RFGAP}

#: Rows of one task (and one chunk of the stored arrays) at most and at least, unless given.
BLOCK_ROWS, MIN_BLOCK_ROWS = 4096, 256
#: Row blocks are sized so that there are at least this many tasks to share out.
MIN_TASKS = 64


def block_rows_for(n: int, block_rows: int | None = None) -> int:
    """Rows of a task: ``block_rows``, else from n alone (never from the cluster, so the
    stored chunks, and what a resumed run finds, are the same on any cluster)."""
    if block_rows is None:
        return max(MIN_BLOCK_ROWS, min(BLOCK_ROWS, -(-n // MIN_TASKS)))
    if isinstance(block_rows, bool) or not isinstance(block_rows, int | np.integer) or \
            block_rows < 1:  # fmt: skip
        raise ParameterError(f"block_rows must be a positive number of rows, got {block_rows!r}")
    return int(block_rows)


@dataclass
class CoLeafIndex:
    """The inverted leaf index of all rows for one method, as the kernel takes it.

    ``leaves`` and ``inbag`` (rows by trees) are kept only when the tasks take
    their query rows from here rather than from a store.
    """

    method: str
    n: int
    n_trees: int
    parts: tuple[np.ndarray, ...]
    masks: np.ndarray
    leaves: np.ndarray | None = None
    inbag: np.ndarray | None = None

    @property
    def nbytes(self) -> int:
        """Bytes held (what sharing it sends to every worker)."""
        arrays = (*self.parts, self.masks, self.leaves, self.inbag)
        return int(sum(a.nbytes for a in arrays if a is not None))


def build_index(
    leaves: np.ndarray, inbag: np.ndarray, method: str, *, keep_rows: bool = False
) -> CoLeafIndex:
    """The index of ``method``: all rows (original), out-of-bag rows (oob), in-bag rows (rfgap).

    Parameters
    ----------
    leaves : ndarray of int, shape (n, T)
    inbag : ndarray of uint8, shape (n, T)
    method : {"original", "oob", "rfgap"}
    keep_rows : bool
        Keep ``leaves`` and ``inbag`` in the index (tasks read their rows from it).
    """
    code = METHOD_CODES[method]
    leaves = np.ascontiguousarray(leaves, dtype=np.int32)
    inbag = np.ascontiguousarray(inbag, dtype=np.uint8)
    parts = coleaf.leaf_index(leaves, inbag, code)
    masks = coleaf.oob_masks(inbag) if code == coleaf.OOB else np.zeros((1, 1), np.uint64)
    n, n_trees = leaves.shape
    return CoLeafIndex(method, n, n_trees, parts, masks,
                       leaves if keep_rows else None, inbag if keep_rows else None)  # fmt: skip


#: Rows read at once while a worker builds its index from the store.
READ_ROWS = 65_536


def build_stored_index(path: str, method: str) -> CoLeafIndex:
    """:func:`build_index` from a store's ``leaves`` and ``inbag``, read block by block.

    Three passes over the blocks (largest leaf id per tree, members per leaf,
    members placed), so that only the index itself is ever held whole.
    """
    code = METHOD_CODES[method]
    n, n_trees = task_array(path, "leaves", "r").shape
    blocks = _blocks(n, READ_ROWS)

    def read(rows: slice) -> tuple[np.ndarray, np.ndarray]:
        return (np.ascontiguousarray(read_rows(path, "leaves", rows), dtype=np.int32),
                np.ascontiguousarray(read_rows(path, "inbag", rows), dtype=np.uint8))  # fmt: skip

    largest = np.zeros(n_trees, dtype=np.int64)
    for rows in blocks:
        largest = np.maximum(largest, read_rows(path, "leaves", rows).max(axis=0))
    leaf_offset, leaf_start = coleaf.leaf_tables(largest)
    for rows in blocks:
        coleaf.count_members(code, *read(rows), leaf_offset, leaf_start)
    member_offset = coleaf.start_positions(leaf_offset, leaf_start)
    members = np.empty(member_offset[-1], dtype=np.int32)
    weights = np.empty(member_offset[-1] if code == coleaf.RFGAP else 0, dtype=np.uint8)
    words = (n_trees + 63) // 64
    masks = np.zeros((n, words) if code == coleaf.OOB else (1, 1), dtype=np.uint64)
    for rows in blocks:
        leaves, inbag = read(rows)
        coleaf.place_members(code, rows.start, leaves, inbag, leaf_offset, leaf_start,
                             member_offset, members, weights)  # fmt: skip
        if code == coleaf.OOB:
            masks[rows] = coleaf.oob_masks(inbag)
    coleaf.shift_starts(leaf_offset, leaf_start)
    parts = (members, weights, member_offset, leaf_offset, leaf_start)
    return CoLeafIndex(method, n, n_trees, parts, masks)


def check_k(k: Any, n: int, include_self: bool) -> int:
    """``k`` as an int, refused unless ``1 <= k <= n`` (``n - 1`` without self)."""
    most = n if include_self else n - 1
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or not 1 <= k <= most:
        raise ParameterError(
            f"k must be an integer from 1 to {most} (the rows other than the row itself"
            f"{'' if not include_self else ', the row included'}), got {k!r}"
        )
    return int(k)


def check_trees(n_trees: int, method: str) -> None:
    """The kernel counts trees in 16 bits."""
    if method != "rfgap" and n_trees >= 65535:
        raise ParameterError(
            f"{method} neighbours count trees in 16 bits: at most 65,534 trees, got {n_trees}"
        )


def neighbors_of(index: CoLeafIndex, rows: slice, leaves: np.ndarray, inbag: np.ndarray,
                 k: int, include_self: bool) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Neighbours of the rows ``rows`` (their ``leaves`` and ``inbag``, rows by trees)."""
    members, weights, member_offset, leaf_offset, leaf_start = index.parts
    return coleaf.block_neighbors(
        METHOD_CODES[index.method], rows.start,
        np.ascontiguousarray(leaves, dtype=np.int32), np.ascontiguousarray(inbag, dtype=np.uint8),
        members, weights, member_offset, leaf_offset, leaf_start, index.masks, index.n, k,
        include_self,
    )  # fmt: skip


# -- tasks --------------------------------------------------------------------


class _IndexCache:
    """A process's index of the run it works for, built from the store on first use."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.key: tuple[str, str, str] | None = None
        self.index: CoLeafIndex | None = None

    def get(self, path: str, method: str, write: str) -> CoLeafIndex:
        key = (path, method, write)
        with self.lock:  # one build per process, the other threads wait for it
            if self.key != key or self.index is None:
                self.index = None  # free the old one before building
                self.index = build_stored_index(path, method)
                self.key = key
            return self.index

    def forget(self, write: str) -> None:
        with self.lock:
            if self.key is not None and self.key[2] == write:
                self.key, self.index = None, None


_cache = _IndexCache()


def forget_index(write: str) -> None:
    """Free this process's index of a finished neighbours write (run on every worker)."""
    _cache.forget(write)


def memory_task(index: CoLeafIndex, rows: slice, k: int,
                include_self: bool) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """A task of an in-memory result: the rows' neighbours from the shared index."""
    assert index.leaves is not None and index.inbag is not None
    return neighbors_of(index, rows, index.leaves[rows], index.inbag[rows], k, include_self)


def store_task(path: str, method: str, write: str, block: int, rows: slice, k: int,
               include_self: bool) -> int:  # fmt: skip
    """A task of a stored result: read the rows, write their neighbours, mark the block done."""
    index = _cache.get(path, method, write)
    leaves = read_rows(path, "leaves", rows)
    inbag = read_rows(path, "inbag", rows)
    return _store_block(path, block, index, rows, leaves, inbag, k, include_self)


def memory_store_task(index: CoLeafIndex, path: str, block: int, rows: slice, k: int,
                      include_self: bool) -> int:  # fmt: skip
    """:func:`store_task` in the driver's process: the index and the rows from memory."""
    assert index.leaves is not None and index.inbag is not None
    return _store_block(path, block, index, rows, index.leaves[rows], index.inbag[rows], k,
                        include_self)  # fmt: skip


def _store_block(path: str, block: int, index: CoLeafIndex, rows: slice, leaves: np.ndarray,
                 inbag: np.ndarray, k: int, include_self: bool) -> int:  # fmt: skip
    """Write the neighbours of ``rows`` and mark their block done; the bytes written."""
    found, values = neighbors_of(index, rows, leaves, inbag, k, include_self)
    write_block(path, INDEX, (rows, slice(None)), found)
    write_block(path, PROXIMITY, (rows, slice(None)), values)
    mark_done(path, INDEX, (block, 0))
    return int(found.nbytes + values.nbytes)


# -- driving ------------------------------------------------------------------


def _blocks(n: int, size: int) -> list[slice]:
    return [slice(start, min(start + size, n)) for start in range(0, n, size)]


def compute_neighbors(
    runner: Runner,
    leaves: np.ndarray,
    inbag: np.ndarray,
    method: str,
    k: int,
    *,
    include_self: bool = False,
    block_rows: int | None = None,
    progress: ProgressCallback | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Every row's top-k neighbours in memory: ``index`` (n, k) int64, ``proximity`` float32."""
    n, n_trees = leaves.shape
    k = check_k(k, n, include_self)
    check_trees(n_trees, method)
    blocks = _blocks(n, block_rows_for(n, block_rows))
    coleaf.warm_up(n_trees)
    index = build_index(leaves, inbag, method, keep_rows=True)
    shared = runner.share(index)
    found = np.empty((n, k), dtype=np.int64)
    values = np.empty((n, k), dtype=np.float32)
    items = [(shared, rows, k, include_self) for rows in blocks]
    for b, (block_found, block_values) in runner.run(memory_task, items, name="neighbors",
                                                      progress=progress):  # fmt: skip
        found[blocks[b]] = block_found
        values[blocks[b]] = block_values
    return found, values


def _prepare(rs: RunStore, n: int, k: int, block_rows: int,
             identity: Mapping[str, Any]) -> np.ndarray:  # fmt: skip
    """Create the two arrays and the done record, or keep them to resume; the done record."""
    identity = dict(identity)
    blocks = (-(-n // block_rows), 1)
    if INDEX in rs.group and PROXIMITY in rs.group:
        done = rs.done_tiles(INDEX)
        arr = rs.array(INDEX)
        if (rs.array_attrs(INDEX).get("identity") == identity and done is not None
                and done.shape == blocks and tuple(arr.shape) == (n, k)):  # fmt: skip
            return done
    for name in (INDEX, PROXIMITY):
        spec = array_spec(name)
        assert spec.dtype is not None
        rs.group.create_array(
            name, shape=(n, k), chunks=row_chunks(spec, (n, k), block_rows), dtype=spec.dtype,
            fill_value=-1 if name == INDEX else np.nan, dimension_names=spec.dims,
            overwrite=True,
        )  # fmt: skip
    rs.update_array_attrs(INDEX, identity=identity, complete=False)
    rs.create_done_record(INDEX, blocks)
    return np.zeros(blocks, dtype=np.uint8)


def write_neighbors(
    runner: Runner,
    rs: RunStore,
    method: str,
    k: int,
    *,
    include_self: bool = False,
    block_rows: int | None = None,
    identity: Mapping[str, Any],
    progress: ProgressCallback | None = None,
    rows: tuple[np.ndarray, np.ndarray] | None = None,
) -> dict[str, int]:
    """Write every row's top-k neighbours into a store holding ``leaves`` and ``inbag``.

    Blocks already marked in ``done/neighbors_index`` by an earlier call with
    the same ``identity``, ``k``, ``include_self`` and block size are skipped.
    The worker processes build the index from the store themselves (once each).
    When the tasks run in this process and ``rows`` (the store's ``leaves``
    and ``inbag``, already in memory) is given, the index is built once from
    them instead, and no task reads the store.

    Returns
    -------
    dict
        ``blocks`` (planned), ``skipped`` (already done) and ``bytes`` written.
    """
    n, n_trees = rs.array("leaves").shape
    k = check_k(k, n, include_self)
    check_trees(n_trees, method)
    block_rows = block_rows_for(n, block_rows)
    # (symmetric: False tells `distforest status` the done record is one flag a block)
    full = {**dict(identity), "method": method, "k": k, "include_self": bool(include_self),
            "block_rows": int(block_rows), "symmetric": False}  # fmt: skip
    done = _prepare(rs, n, k, block_rows, full)
    blocks = _blocks(n, block_rows)
    pending = [b for b in range(len(blocks)) if not done[b, 0]]
    coleaf.warm_up(n_trees)  # compile once here, not in every worker at once
    write = uuid.uuid4().hex
    task: Any = store_task
    items: list[tuple[Any, ...]] = [(rs.path, method, write, b, blocks[b], k, include_self)
                                    for b in pending]  # fmt: skip
    if runner.in_process and rows is not None and pending and \
            all(isinstance(a, np.ndarray) for a in rows):  # fmt: skip
        index = build_index(*rows, method, keep_rows=True)
        task, items = memory_store_task, [(index, rs.path, b, blocks[b], k, include_self)
                                          for b in pending]  # fmt: skip
    stats = {"blocks": len(blocks), "skipped": len(blocks) - len(pending), "bytes": 0}
    try:
        for _, written in runner.run(task, items, name="neighbors", progress=progress):
            stats["bytes"] += written
    finally:
        with contextlib.suppress(Exception):  # only memory is at stake: never mask an error
            runner.everywhere(forget_index, write)
    attrs: dict[str, Any] = {"method": method, "k": k, "include_self": bool(include_self)}
    rs.update_array_attrs(PROXIMITY, **attrs)
    rs.update_array_attrs(INDEX, **attrs, complete=True)
    return stats


# -- results ------------------------------------------------------------------


class NeighborsAccessor:
    """``ds.neighbors``: what a neighbours Dataset offers besides its arrays."""

    def __init__(self, ds: xr.Dataset) -> None:
        self._ds = ds

    def to_scipy_sparse(self, *, keep_zeros: bool = False) -> scipy.sparse.csr_matrix:
        """:func:`neighbors_to_csr` of this Dataset."""
        return neighbors_to_csr(self._ds, keep_zeros=keep_zeros)


_accessor_lock = threading.Lock()


def _register_accessor() -> None:
    """Register ``ds.neighbors`` with xarray once (on first use: xarray is imported late)."""
    import xarray as xr

    with _accessor_lock:
        if not hasattr(xr.Dataset, "neighbors"):
            xr.register_dataset_accessor("neighbors")(NeighborsAccessor)


def neighbors_dataset(found: Any, values: Any, attrs: Mapping[str, Any]) -> xr.Dataset:
    """The result as an :class:`xarray.Dataset` with ``index`` and ``proximity``.

    ``ds.neighbors.to_scipy_sparse()`` gives it as a CSR matrix (:func:`neighbors_to_csr`).
    """
    import xarray as xr

    _register_accessor()
    dims = ("sample", "neighbor")
    n, k = found.shape
    return xr.Dataset(
        {"index": (dims, found), "proximity": (dims, values)},
        coords={"sample": np.arange(n), "neighbor": np.arange(k)},
        attrs=dict(attrs),
    )


def stored_neighbors(rs: RunStore) -> xr.Dataset:
    """The neighbours of a store as a lazy Dataset (``index`` and ``proximity``)."""
    if INDEX not in rs.group or not rs.array_attrs(INDEX).get("complete"):
        raise StoreError(
            f"store {rs.path!r} holds no complete {INDEX!r}; compute it with "
            "ProximityForest.proximity_neighbors(k, store=...) or distforest proximity --top-k"
        )
    _register_accessor()
    ds = rs.dataset()[[INDEX, PROXIMITY]].rename({INDEX: "index", PROXIMITY: "proximity"})
    attrs = rs.array_attrs(INDEX)
    ds.attrs = {key: attrs[key] for key in ("method", "k", "include_self")}
    return ds


def forest_neighbors(
    forest: Any,
    k: int,
    method: str,
    store: Any,
    *,
    include_self: bool,
    overwrite: bool,
    block_rows: int | None,
) -> xr.Dataset:
    """:meth:`ProximityForest.proximity_neighbors` (see there)."""
    forest._check_fitted()
    forest._check_method(method)
    k = check_k(k, forest.n_samples_, include_self)  # before any cluster starts
    block_rows_for(forest.n_samples_, block_rows)
    check_trees(forest.leaves_.shape[1], method)
    attrs = {"method": method, "k": k, "include_self": bool(include_self)}
    if store is None:
        with forest._runner(forest._fitted_cells()) as runner:
            found, values = compute_neighbors(
                runner, forest.leaves_, forest.inbag_, method, k, include_self=include_self,
                block_rows=block_rows, progress=forest._report("neighbors"),
            )  # fmt: skip
        return neighbors_dataset(found, values, attrs)
    rs = forest._open_or_create(store, overwrite)
    write_forest_neighbors(forest, rs, method, k, include_self=include_self,
                           block_rows=block_rows)  # fmt: skip
    complete_output(rs)
    return stored_neighbors(rs)


def new_rows_task(index: CoLeafIndex, leaves: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """A task over new rows: out of bag in every tree, never one of the training rows."""
    inbag = np.zeros(leaves.shape, dtype=np.uint8)
    return neighbors_of(index, slice(0, leaves.shape[0]), leaves, inbag, k, True)


def new_rows_neighbors(
    forest: Any, X: Any, k: int, method: str, store: Any, *, block_rows: int | None
) -> xr.Dataset:
    """:meth:`ProximityForest.proximity_neighbors` of new rows (``X``): see there."""
    from distforest.forests.new_rows import new_leaves

    forest._check_fitted()
    forest._check_method(method)
    if method == "oob":
        raise ParameterError(
            "proximity_neighbors(X=...) takes method 'original' or 'rfgap', got 'oob' (a new "
            "row is out of bag in every tree: use 'original', or proximity('oob', X=X) for "
            "the dense matrix)"
        )
    if store is not None:
        raise ParameterError(
            f"proximity_neighbors(X=...) computes new rows' neighbours in memory, got "
            f"store={store!r}; pass store=None (the result is n_new x k)"
        )
    k = check_k(k, forest.n_samples_, True)
    check_trees(forest.leaves_.shape[1], method)
    leaves = new_leaves(forest, X)
    blocks = _blocks(leaves.shape[0], block_rows_for(leaves.shape[0], block_rows))
    found = np.empty((leaves.shape[0], k), dtype=np.int64)
    values = np.empty((leaves.shape[0], k), dtype=np.float32)
    coleaf.warm_up(leaves.shape[1])
    index = build_index(forest.leaves_, forest.inbag_, method)
    with forest._runner(forest._fitted_cells()) as runner:
        shared = runner.share(index)
        items = [(shared, leaves[rows], k) for rows in blocks]
        for b, (block_found, block_values) in runner.run(
            new_rows_task, items, name="neighbors-new-rows", progress=forest._report("neighbors")
        ):
            found[blocks[b]] = block_found
            values[blocks[b]] = block_values
    attrs = {"method": method, "k": k, "include_self": False, "rows": "new"}
    return neighbors_dataset(found, values, attrs)


def write_forest_neighbors(
    forest: Any,
    rs: RunStore,
    method: str,
    k: int,
    *,
    include_self: bool = False,
    block_rows: int | None = None,
) -> dict[str, int]:
    """A fitted forest's neighbours into its open store (not marked complete), resuming.

    Like :meth:`ProximityForest.write_proximity`: for callers, such as the CLI
    job, that write more into the store before completing it.
    """
    forest._check_fitted()
    forest._check_method(method)  # (out-of-bag methods need a bootstrap forest)
    rs.check_fit(forest.fit_id_, f"store {rs.path!r} holds a forest that belongs",
                 "save this forest to a new store first")  # fmt: skip
    with forest._runner(forest._fitted_cells()) as runner:
        return write_neighbors(
            runner, rs, method, k, include_self=include_self, block_rows=block_rows,
            identity={"fit_id": forest.fit_id_}, progress=forest._report("neighbors"),
            rows=(forest.leaves_, forest.inbag_),
        )  # fmt: skip


def neighbors_to_csr(ds: xr.Dataset, *, keep_zeros: bool = False) -> scipy.sparse.csr_matrix:
    """The neighbours as an n x n CSR matrix with the proximities as values.

    Row i holds its ``k`` neighbours (the columns), in the order found.
    Neighbours of proximity 0 (padding of rows with fewer than ``k`` non-zero
    proximities) are left out unless ``keep_zeros``; they would otherwise be
    explicit zeros.

    Parameters
    ----------
    ds : xarray.Dataset
        From :meth:`ProximityForest.proximity_neighbors` (or :func:`stored_neighbors`).
    keep_zeros : bool
        Keep zero-proximity neighbours as explicit zeros (exactly k entries a row).

    Returns
    -------
    scipy.sparse.csr_matrix of float32, shape (n, n)
    """
    import scipy.sparse as sp

    found = np.asarray(ds["index"].values, dtype=np.int64)
    values = np.asarray(ds["proximity"].values, dtype=np.float32)
    n, k = found.shape
    if keep_zeros:
        indptr = np.arange(0, n * k + 1, k, dtype=np.int64)
        return sp.csr_matrix((values.ravel(), found.ravel(), indptr), shape=(n, n))
    keep = values > 0
    indptr = np.concatenate([[0], np.cumsum(keep.sum(axis=1))]).astype(np.int64)
    return sp.csr_matrix((values[keep], found[keep], indptr), shape=(n, n))
