"""The one fit of every forest: seeds, batches of trees, the runner, the sink.

:func:`fit_forest` knows no estimator.  An estimator gives it

- a :class:`~distforest.io.source.RowSource` (rows in memory or in a store,
  from :func:`distforest.store.source.open_source`),
- a *grower*: a picklable callable ``grower(X, y, seeds) -> GrownBatch`` that
  grows one batch of trees on all the rows (a module-level function, or a
  :func:`functools.partial` of one, with the estimator's tree settings bound),
- the per-row results the grower makes (name -> dtype and dims),
- a :class:`~distforest.store.sink.RowSink` (from
  :func:`distforest.store.sink.open_sink`) where the per-row results and the
  trees' nodes go,

and takes back a :class:`ForestFit`, from which it sets its fitted attributes
once.  The same seeds (planned from ``random_state``) and the same batches
whatever the input's home: the same trees, bit for bit.

One task per batch of trees: it opens the rows on its worker (rows in memory
were sent once per worker; rows in a store are read once per worker process
and shared by its tasks), grows its trees and puts its per-row arrays and nodes
into the sink (returned to the driver for a sink in memory, written into the
store's ``fit/`` parts otherwise, then joined by row-block tasks: no process
holds a whole ``(n, T)`` array or the whole forest).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from distforest.io.source import RowSource
from distforest.parallel import tasks
from distforest.parallel.execution import Runner
from distforest.store.inputs import forget_inputs, per_fit
from distforest.store.sink import ROUTE_ROWS, ForestRef, RowSink, SinkHandle

__all__ = [
    "ColumnSummary",
    "ForestFit",
    "Grower",
    "GrownBatch",
    "Router",
    "fit_forest",
    "scaled_once",
    "summarise_columns",
]

logger = logging.getLogger("distforest")


@dataclass(frozen=True)
class GrownBatch:
    """What a grower returns for one batch of ``w`` trees.

    Attributes
    ----------
    rows : dict of str to ndarray
        Per-row results, ``(n, w, ...)`` each (leaves, in-bag counts, path codes).
    trees : dict of str to ndarray
        Per-tree results, ``(w, ...)`` each (node counts, importances), kept on
        the driver (small).
    nodes : dict of str to ndarray
        The trees' node arrays, concatenated over the batch's trees (child
        indices local to their tree); empty when the nodes are not kept.
    """

    rows: Mapping[str, np.ndarray]
    trees: Mapping[str, np.ndarray]
    nodes: Mapping[str, np.ndarray] = field(default_factory=dict)


#: ``grower(X, y, seeds) -> GrownBatch``: X the source's rows (every row, as the
#: source's ``rows_handle`` gives them: an array, or a handle that is not one, such as a
#: stored matrix, as it is), y the shared target (or what the trees fit against) or
#: None, seeds the batch's per-tree seeds.
Grower = Callable[[np.ndarray, "np.ndarray | None", np.ndarray], GrownBatch]


@dataclass(frozen=True)
class ForestFit:
    """The result of :func:`fit_forest`.

    Attributes
    ----------
    seeds : ndarray of uint64, shape (n_trees,)
    random_state : int
        The root entropy the seeds were planned from.
    batches : list of slice
        The trees of each task.
    rows : dict
        Per-row results ``(n, n_trees, ...)``: NumPy arrays, or the store's Zarr
        arrays (read on use).
    trees : dict of str to ndarray
        Per-tree results ``(n_trees, ...)``, joined in tree order.
    nodes : mapping or None
        The forest's node arrays (a dict, or a store's
        :class:`~distforest.store.sink.StoredNodes`); None when not kept.
    sample_ids : array or None
        The rows' IDs (the store's ``sample`` array for rows in that store).
    fit_id : str
        A new identity of this fit (the store's ``fit_id`` names the forest it holds).
    store : str or None
        The run store the results are in; None: in memory.
    """

    seeds: np.ndarray
    random_state: int
    batches: list[slice]
    rows: dict[str, Any]
    trees: dict[str, np.ndarray]
    nodes: Mapping[str, np.ndarray] | None
    sample_ids: Any
    fit_id: str
    store: str | None


#: ``router(X_chunk, nodes) -> {name: (rows, T) array}``: the per-row results of a chunk
#: of rows routed through the joined forest (``nodes`` with ``node_offset``).
Router = Callable[[np.ndarray, Mapping[str, np.ndarray]], Mapping[str, np.ndarray]]


@dataclass(frozen=True)
class ColumnSummary:
    """The feature columns of a source's rows, from one task per chunk (:func:`summarise_columns`).

    Attributes
    ----------
    low, high : ndarray of float64, shape (n_features,)
        Column minima and maxima (exact for float32 values); empty when a cell is missing.
    missing : ndarray of int64, shape (n_features,)
        Missing cells per column.
    first_missing : (row, column) or None
        The first missing cell, in row order.
    dtype : numpy dtype
        Of the rows the tasks read (the handle's).
    """

    low: np.ndarray
    high: np.ndarray
    missing: np.ndarray
    first_missing: tuple[int, int] | None
    dtype: np.dtype


def _summarise_chunk(rows: Any, chunk: slice) -> ColumnSummary:
    X = np.asarray(rows[chunk])
    nan = np.isnan(X)
    counts = nan.sum(axis=0).astype(np.int64)
    if counts.any():
        row, col = np.argwhere(nan)[0]
        return ColumnSummary(np.empty(0), np.empty(0), counts,
                             (int(chunk.start + row), int(col)), X.dtype)  # fmt: skip
    low, high = X.min(axis=0).astype(np.float64), X.max(axis=0).astype(np.float64)
    return ColumnSummary(low, high, counts, None, X.dtype)


def summarise_columns(runner: Runner, source: RowSource, rows: Any) -> ColumnSummary:
    """The :class:`ColumnSummary` of ``source``, one task per chunk of its rows handle
    ``rows`` (``source.rows_handle(runner.share, dtype)``, given to :func:`fit_forest`
    afterwards): the driver never reads a stored table, wherever the rows are."""
    chunks = source.chunks()
    parts: list[Any] = [None] * len(chunks)
    for i, part in runner.run(_summarise_chunk, [(rows, c) for c in chunks], name="columns"):
        parts[i] = part
    d = source.n_features
    if not parts:
        return ColumnSummary(np.zeros(d), np.zeros(d), np.zeros(d, np.int64), None,
                             np.dtype(np.float64))  # fmt: skip
    missing = np.sum([p.missing for p in parts], axis=0)
    firsts = [p.first_missing for p in parts if p.first_missing is not None]
    if firsts:
        return ColumnSummary(np.empty(0), np.empty(0), missing, min(firsts), parts[0].dtype)
    return ColumnSummary(np.minimum.reduce([p.low for p in parts]),
                         np.maximum.reduce([p.high for p in parts]), missing, None,
                         parts[0].dtype)  # fmt: skip


def scaled_once(X: Any, token: str, shift: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """``(X - shift) / scale`` in float64 (read-only), computed once per worker process for
    the fit ``token`` and shared by its tasks (a grower's normalised rows)."""

    def make() -> np.ndarray:
        rows = np.asarray(X, dtype=np.float64) - shift
        rows /= scale
        rows.setflags(write=False)
        return rows

    return cast(np.ndarray, per_fit("scaled rows", "", token, make))


def _grow_task(
    grower: Callable[..., GrownBatch],
    rows: Any,
    y: np.ndarray | None,
    seeds: np.ndarray,
    k: int,
    out: SinkHandle,
    route: bool,
) -> GrownBatch:
    # rows that read as an array are read (a store's: once per worker process); any other
    # handle (a matrix or rows its grower reads on use) is given as it is
    X = np.asarray(rows) if hasattr(rows, "__array__") else rows
    grown = grower(X, y, seeds) if route else grower(X, y, seeds, route=False)
    return GrownBatch(
        rows=out.put_batch(k, grown.rows) or {},
        trees=grown.trees,
        nodes=(out.put_nodes(k, grown.nodes) or {}) if grown.nodes else {},
    )


def _route_task(
    router: Router, rows: Any, forest: ForestRef, block: slice, out: SinkHandle
) -> dict[str, np.ndarray | None]:
    routed = router(np.asarray(rows[block]), forest.nodes())
    return {name: out.put_rows(name, block, values) for name, values in routed.items()}


def fit_forest(
    source: RowSource,
    grower: Callable[..., GrownBatch],
    *,
    y: Any,
    n_trees: int,
    random_state: int | None,
    batch_size: int | None,
    runner: Runner,
    sink: RowSink,
    row_results: Mapping[str, tuple[Any, tuple[str, ...]]],
    keep_nodes: bool = True,
    dtype: Any = np.float32,
    rows: Any = None,
    node_dims: Mapping[str, tuple[str, ...]] | None = None,
    router: Router | None = None,
    routed: tuple[str, ...] = (),
    progress: tasks.ProgressCallback | None = None,
    join_progress: tasks.ProgressCallback | None = None,
    row_tree_bytes: float | None = None,
) -> ForestFit:
    """Grow ``n_trees`` trees on ``source`` by batches, their results into ``sink``.

    Parameters
    ----------
    source : RowSource
    grower : callable
        ``grower(X, y, seeds) -> GrownBatch`` (picklable: it runs on the workers).
        With a ``router``, it is also called as ``grower(X, y, seeds, route=False)``:
        then it leaves out the per-row results the router gives.
    y : ndarray or None
        The target as the trees fit it (codes or floats; SMERF's observed distances, an
        array or a reference to a file), sent once per worker.
    n_trees : int
    random_state : int or None
        Seed of the whole forest (:func:`distforest.parallel.tasks.plan_seeds`).
    batch_size : int or None
        Trees per task (None: :func:`distforest.parallel.tasks.plan_tree_batches`).
    runner : Runner
    sink : RowSink
        Where per-row results and nodes go (memory, or a run store).
    row_results : mapping
        Per-row result name -> ``(dtype, dims)`` (the grower's ``rows`` keys, and the
        router's).
    keep_nodes : bool, default True
        Give the trees' nodes back (``ForestFit.nodes``); False: none are kept (a
        router still reads them from the store while routing).
    dtype : numpy dtype, default float32
        Of the rows the grower and the router see.
    rows : object, optional
        ``source.rows_handle(runner.share, dtype)`` when the caller made it already (it
        read the rows before the fit): the rows are not sent twice.
    node_dims : mapping, optional
        The dims of the grower's ``nodes`` arrays that are not one value per node (a
        split's projections, a leaf's members: joined end to end all the same).
    router : callable, optional
        ``router(X_chunk, nodes) -> {name: (rows, T)}``.  For a sink in a store: the
        trees are grown without routing the rows, the forest is joined into the
        store, and tasks of about :data:`~distforest.store.sink.ROUTE_ROWS` rows
        route their chunk through every tree (no task holds a batch's results for
        every row).  A sink in memory routes while growing, whatever ``router``.
    routed : tuple of str
        The names of ``row_results`` the router gives.
    progress, join_progress : callable, optional
        ``(done, total)`` of the growing tasks and of the routing and joining ones.
    row_tree_bytes : float, optional
        Bytes a growing task holds per row and tree of its batch (default: the
        ``row_results`` the grower makes, one value a row and tree).  Without
        ``batch_size``, a task grows at most
        :func:`~distforest.parallel.tasks.most_trees_a_task` trees: on more rows, smaller
        batches of the same trees.

    Returns
    -------
    ForestFit
    """
    entropy, seeds = tasks.plan_seeds(random_state, n_trees)
    n = source.n_samples
    if row_tree_bytes is None:
        row_tree_bytes = sum(np.dtype(kind).itemsize for kind, _ in row_results.values())
    most = tasks.most_trees_a_task(n, row_tree_bytes)
    batches = tasks.plan_tree_batches(n_trees, runner.threads(), batch_size, most)
    logger.info("fitting %d trees on %d x %d from %s in %d tasks", n_trees, n,
                source.n_features, source.source, len(batches))  # fmt: skip
    routing = router is not None and not sink.in_memory
    by_rows = {name: row_results[name] for name in routed} if routing else {}
    sink.expect_batches(n_trees, {k: v for k, v in row_results.items() if k not in by_rows})
    rows = source.rows_handle(runner.share, dtype) if rows is None else rows
    y_shared = None if y is None else runner.share(y)
    out = sink.handle()
    items = [(grower, rows, y_shared, seeds[b], k, out, not routing) for k, b in enumerate(batches)]
    trees: list[Mapping[str, np.ndarray]] = [{}] * len(batches)
    for k, grown in runner.run(_grow_task, items, name="fit-trees", progress=progress):
        sink.place_batch(k, batches[k], grown.rows)
        sink.place_nodes(k, grown.nodes)
        trees[k] = grown.trees
    del y_shared
    per_tree = {name: np.concatenate([t[name] for t in trees]) for name in trees[0]}
    fit_id = uuid.uuid4().hex
    ids = sink.coordinates(n_trees, source)
    nodes = (sink.join_nodes(per_tree["node_counts"], seeds, fit_id, node_dims)
             if (keep_nodes or routing) and "node_counts" in per_tree else None)  # fmt: skip
    joined = sink.join_batches(runner, progress=join_progress)
    if routing:
        assert router is not None and sink.path is not None  # routing says so
        for name, (dtype_r, dims) in by_rows.items():
            joined[name] = sink.create(name, (n, n_trees), dtype_r, dims)
        chunk = max(1, min(n, sink.chunk_rows))
        step = max(chunk, ROUTE_ROWS // chunk * chunk)
        forest = ForestRef(sink.path, fit_id)  # each worker reads it once
        blocks = [slice(s, min(s + step, n)) for s in range(0, n, step)]
        route = [(router, rows, forest, block, out) for block in blocks]
        for i, result in runner.run(_route_task, route, name="leaves", progress=join_progress):
            for name, values in result.items():
                sink.place_rows(name, blocks[i], values)
    del rows
    sink.close()
    runner.everywhere(forget_inputs)  # the rows (and forest) the workers kept for this fit
    return ForestFit(seeds, entropy, batches, joined, per_tree, nodes if keep_nodes else None,
                     ids, fit_id, sink.path)  # fmt: skip
