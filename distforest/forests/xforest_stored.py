"""Fit an :class:`~distforest.forests.xforest.XForest` on a table in a run store.

The driver never holds the table nor the rows' (n, T) arrays: it sends tasks
the store's path.

1. **Normalisation.**  One task per chunk of ``input/X`` returns the chunk's
   column minima and maxima (float64, exact for float32 values) and its
   first missing cell; the driver takes the minimum and maximum over the
   chunks, the same float64 values as ``X.min(axis=0)`` and ``np.ptp`` in
   memory.
2. **Trees.**  One task per batch of trees (the same batches and seeds as in
   memory).  Each worker process reads ``input/X`` once and normalises it
   once per fit (shared by its tasks), grows its batch with
   :func:`~distforest.kernels.rptrees.grow_batch` (the same trees, bit for
   bit), writes its rows' leaves, depths and path codes into arrays of its
   own (``fit/leaves_<k>``, ``fit/depth_<k>``, ``fit/path_<k>``, and its
   trees' nodes in ``fit/nodes_<k>``: one writer each) and returns only the
   node counts and directions.  Each batch has its own number of
   path-code words; the widest decides the stored ``path``.
3. **Gather by row chunks.**  One task per block of whole chunks reads the
   batches' rows and writes ``leaves``, ``depth`` and ``path`` (narrower
   batches padded with zero words, as in memory;
   :func:`~distforest.forests.stored.gather_batches`).

The store then holds what :meth:`XForest.save` writes; the estimator's
``leaves_``, ``depth_`` and ``codes_`` are the store's Zarr arrays (read on
use).  The tasks write their trees' nodes too (``fit/nodes_<k>``), joined into
``forest/`` a chunk at a time; ``nodes_`` and ``thresholds_`` read them from
there on use (:class:`StoredNodes`).  Only the directions (a few per tree;
one per split node in ``standard`` mode) pass through the driver.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import zarr

from distforest import location
from distforest.errors import InputError
from distforest.forests.stored import FIT_GROUP, ROUTE_ROWS, gather_batches
from distforest.kernels import rptrees
from distforest.parallel import tasks
from distforest.store.inputs import StoredTable, forget_inputs, input_chunk, scaled_rows
from distforest.store.run_store import RunStore, task_array, write_group

if TYPE_CHECKING:
    from distforest.forests.xforest import XForest

logger = logging.getLogger("distforest")

#: Columns of the flat node array, as stored under ``forest/``.
NODE_COLUMNS = ("parent", "depth", "left", "right", "direction")
#: The rows' arrays a fit writes, per batch then gathered: (name, dtype).
ROW_ARRAYS = (("leaves", "int32"), ("depth", "int32"), ("path", "uint64"))


@dataclass(frozen=True)
class StoredNodes:
    """The ``(total_nodes, 5)`` node array of a forest fitted into a store, read on use.

    Its columns are the 1-D arrays :data:`NODE_COLUMNS` of the store's
    ``forest/`` group: ``nodes[:, k]`` reads one column, ``np.asarray(nodes)``
    all of them (to route new rows), and tasks read the ones they need
    themselves (the products).
    """

    path: str

    @property
    def shape(self) -> tuple[int, int]:
        """``(total_nodes, 5)``."""
        return (int(task_array(self.path, "forest/parent", "r").shape[0]), len(NODE_COLUMNS))

    def column(self, k: int) -> np.ndarray:
        """Column ``k`` (``NODE_COLUMNS[k]``) of every node."""
        return np.asarray(task_array(self.path, f"forest/{NODE_COLUMNS[k]}", "r")[...])

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        nodes = np.stack([self.column(k) for k in range(len(NODE_COLUMNS))], axis=1)
        return nodes if dtype is None else nodes.astype(dtype)

    def __getitem__(self, key: Any) -> np.ndarray:
        if isinstance(key, tuple) and len(key) == 2 and key[0] == slice(None):
            if isinstance(key[1], int | np.integer):
                return self.column(int(key[1]))
        return np.asarray(self)[key]


def _chunk_range(path: str, rows: slice) -> tuple[np.ndarray, np.ndarray, tuple[int, int] | None]:
    """Column minima and maxima (float64) of rows ``rows`` of ``input/X``, and the first
    missing cell ``(row, column)`` (global row), if any."""
    X = input_chunk(path, rows)
    missing = np.isnan(X)
    if missing.any():
        row, col = np.argwhere(missing)[0]
        return np.empty(0), np.empty(0), (int(rows.start + row), int(col))
    return X.min(axis=0).astype(np.float64), X.max(axis=0).astype(np.float64), None


def _normalisation(
    forest: XForest, runner: Any, table: StoredTable, normalize: bool
) -> tuple[np.ndarray, np.ndarray]:
    """``(min, scale)`` of the features from the chunks' ranges; missing cells refused."""
    items = [(table.path, rows) for rows in table.chunks()]
    parts: list[Any] = [None] * len(items)
    for i, part in runner.run(_chunk_range, items, name="xforest-ranges"):
        parts[i] = part
    missing = [p[2] for p in parts if p[2] is not None]
    if missing:
        row, col = min(missing)
        raise InputError(
            f"{table.source}: X-Forest needs complete data, but column "
            f"{table.feature_names[col]!r} is missing at row {row + 1:,} (counted from 1); "
            "impute the missing values first, e.g. `distforest impute`"
        )
    d = table.n_features
    if not normalize:
        return np.zeros(d), np.ones(d)
    lo = np.minimum.reduce([p[0] for p in parts]) if parts else np.zeros(d)
    hi = np.maximum.reduce([p[1] for p in parts]) if parts else np.zeros(d)
    scale = hi - lo  # np.ptp: max - min, in float64
    return lo, np.where(scale > 0, scale, 1.0)


def _write_rows(path: str, name: str, values: np.ndarray, rows: int) -> None:
    """Create array ``name`` of the store at ``path`` (this task its one writer) and fill it."""
    root = zarr.open_group(location.zarr_store(path), mode="r+", use_consolidated=False)
    chunks = (max(1, min(rows, values.shape[0])), *(max(1, s) for s in values.shape[1:]))
    arr = root.create_array(name, shape=values.shape, chunks=chunks, dtype=values.dtype,
                            overwrite=True)  # fmt: skip
    if values.size:
        arr[...] = values


def _grow_task(
    path: str,
    token: str,
    lo: np.ndarray,
    scale: np.ndarray,
    seeds: np.ndarray,
    n_directions: int,
    leaf_size: int,
    standard: bool,
    batch: int,
    rows: int,
) -> rptrees.GrownBatch:
    grown = rptrees.grow_batch(scaled_rows(path, token, lo, scale), seeds, n_directions, leaf_size,
                               standard)  # fmt: skip
    for name, values in (("leaves", grown.leaves), ("depth", grown.depth),
                         ("path", grown.codes)):  # fmt: skip
        _write_rows(path, f"{FIT_GROUP}/{name}_{batch}", values, rows)
    nodes = {c: np.ascontiguousarray(grown.nodes[:, k]) for k, c in enumerate(NODE_COLUMNS)}
    write_group(path, f"{FIT_GROUP}/nodes_{batch}", {**nodes, "threshold": grown.thresholds})
    width, words = grown.codes.shape[1:]
    return replace(grown, leaves=np.empty((0, width), np.int32),
                   depth=np.empty((0, width), np.int32),
                   codes=np.empty((0, width, words), np.uint64),
                   nodes=np.empty((0, len(NODE_COLUMNS)), np.int32),
                   thresholds=np.empty(0))  # fmt: skip


def fit_stored(forest: XForest, table: StoredTable, params: dict[str, Any]) -> XForest:
    """Fit ``forest`` on ``table`` (see the module docstring); returns it, fitted.

    Parameters
    ----------
    forest : XForest
    table : StoredTable
        Its store is written: the fitted arrays and the forest go there.
    params : dict
        The forest's validated parameters.
    """
    n, d, n_trees = table.n_samples, table.n_features, params["n_estimators"]
    tile = params["tile_size"]
    entropy, seeds = tasks.plan_seeds(params["random_state"], n_trees)
    standard = params["mode"] == "standard"
    rptrees.warm_up()
    rs = RunStore.open(table.path, mode="r+")
    rs.mark_running()
    with forest._runner(n * d) as runner:
        lo, scale = _normalisation(forest, runner, table, params["normalize"])
        batch_size = params["batch_size"] or tasks.default_batch_size(n_trees, runner.threads())
        batches = tasks.plan_batches(n_trees, batch_size)
        logger.info("growing %d X-Forest trees on %d x %d from %s in %d tasks", n_trees, n, d,
                    table.path, len(batches))  # fmt: skip
        rs.group.require_group(FIT_GROUP)
        # the batches' arrays in chunks of the gathering blocks: one chunk read per block
        step = max(tile, ROUTE_ROWS // tile * tile)
        token = uuid.uuid4().hex  # each worker reads and normalises the rows once
        grow = (params["n_directions"], params["leaf_size"], standard)
        items = [(table.path, token, lo, scale, seeds[b], *grow, k, step)
                 for k, b in enumerate(batches)]  # fmt: skip
        parts: list[Any] = [None] * len(batches)
        for i, part in runner.run(_grow_task, items, name="xforest-trees",
                                  progress=forest._report("fit")):  # fmt: skip
            parts[i] = part
        runner.everywhere(forget_inputs)
        rs.write_coordinates(n, n_trees)
        batch_arrays = range(len(batches))
        for name, dtype in ROW_ARRAYS:
            dims = ("sample", "tree", "path_word") if name == "path" else ("sample", "tree")
            gather_batches(runner, table.path, [f"{FIT_GROUP}/{name}_{k}" for k in batch_arrays],
                           name, dtype, tile, dims=dims,
                           progress=forest._report("gather"))  # fmt: skip
    # the tasks wrote their trees' nodes; joined here a chunk at a time, never held whole
    rs.join_forest([f"{FIT_GROUP}/nodes_{k}" for k in range(len(batches))],
                   np.concatenate([p.node_counts for p in parts]), seeds)  # fmt: skip
    del rs.group[FIT_GROUP]
    forest._fitted(table, params, parts, (lo, scale), (entropy, seeds))
    forest.nodes_ = cast(np.ndarray, StoredNodes(str(table.path)))
    forest.thresholds_ = cast(np.ndarray, rs.array("forest/threshold"))
    # the store's arrays, read on use (np.asarray, by rows) or by the workers (tiles, products)
    forest.leaves_ = cast(np.ndarray, rs.array("leaves"))
    forest.depth_ = cast(np.ndarray, rs.array("depth"))
    forest.codes_ = cast(np.ndarray, rs.array("path"))
    forest._save_directions(rs)
    rs.update_attrs(**forest._provenance(model=True), store_input=True)
    return forest
