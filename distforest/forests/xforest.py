"""`XForest`: approximate random-projection trees as Dask tasks, beta-similarity as Zarr tiles.

A fitted forest is summarised by three O(n T) arrays: ``depth_[i, t]``,
``codes_[i, t, :]`` (the path code of row i in tree t, docs/design.md section 3)
and ``leaves_[i, t]``, plus the flat node arrays for routing new rows.  The
beta-similarity ``S[a, b] = mean_t beta ** (d_a + d_b - 2 d_lca)`` is written
tile by tile from the codes, or applied matrix-free through its exact
factorisation ``S = Phi Phi^T / T`` (:func:`distforest.kernels.betasim.phi_product`,
:mod:`distforest.forests.xforest_similarity`).

One fit, whatever holds the rows; only where the rows' arrays go differs:

1. **Normalisation.**  The column minima and maxima (float64, exact for
   float32 values) and the first missing cell of every row chunk, reduced
   here: rows in memory are one chunk; a stored table's chunks are one task
   each, so the driver never reads the table.  The same float64 values as
   ``X.min(axis=0)`` and ``np.ptp``.
2. **Trees.**  One task per batch of trees, seeds planned here, so the same
   ``random_state`` gives the same trees on any cluster and from any home of
   the rows.  Rows in memory are normalised here and shared once; from a store
   each worker process reads ``input/X`` once and normalises it once per fit.
   A batch's rows' leaves, depths and path codes (and its trees' nodes) come
   back for rows in memory; for a stored table they are written into arrays
   of the batch's own in the store (``fit/leaves_<k>``, ``fit/depth_<k>``,
   ``fit/path_<k>``, ``fit/nodes_<k>``: one writer each) and only the node
   counts and directions come back.  Each batch has its own number of
   path-code words; the widest decides ``codes_``.
3. **Rows' arrays.**  In memory, joined here.  In a store, gathered by row
   chunks (one task per block of whole chunks writes ``leaves``, ``depth``
   and ``path``, narrower batches padded with zero words;
   :func:`~distforest.store.sink.gather_batches`) and the nodes joined
   into ``forest/`` a chunk at a time: the store then holds what
   :meth:`XForest.save` writes, ``leaves_``, ``depth_`` and ``codes_`` are its
   Zarr arrays and ``nodes_``, ``thresholds_`` read it on use
   (:class:`StoredNodes`).  Only the directions (a few per tree; one per split
   node in ``standard`` mode) pass through the driver.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, cast

import numpy as np
import zarr

from distforest import location
from distforest.errors import InputError, NotFittedError
from distforest.forests import constraints as C
from distforest.forests._estimator import DaskEstimator
from distforest.forests.persistence import INPUT_FIELDS, Array, Field, Persisted
from distforest.forests.tiled import matrix_in_memory, write_matrix
from distforest.forests.xforest_similarity import (
    SIMILARITY_NAMES,
    SimilarityProduct,
    arrays_tile,
    store_tile,
)
from distforest.io import Table, load_table
from distforest.io.in_memory import check_in_memory
from distforest.io.source import RowSource
from distforest.kernels import betasim, rptrees
from distforest.parallel import tasks
from distforest.parallel.tiling import TilePlan
from distforest.store.inputs import forget_inputs, input_chunk, scaled_rows
from distforest.store.run_store import RunStore, task_array, write_group
from distforest.store.sink import FIT_GROUP, ROUTE_ROWS, gather_batches
from distforest.store.source import opened

if TYPE_CHECKING:
    import xarray as xr

logger = logging.getLogger("distforest")

#: ``progress(stage, done, total)``; stages are "fit", "gather" (a stored fit), "tiles"
#: and "product".
Progress = Callable[[str, int, int], None]


#: Columns of the flat node array, as stored under ``forest/``.
NODE_COLUMNS = ("parent", "depth", "left", "right", "direction")
#: The rows' arrays a stored fit writes, per batch then gathered: (name, dtype).
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


@dataclass(frozen=True)
class _ScaledRows:
    """A stored table's ``input/X`` as a tree task reads it: ``(X - lo) / scale`` in
    float64, read and normalised once per worker process and fit (``token``)."""

    path: str
    token: str
    lo: np.ndarray
    scale: np.ndarray

    def read(self) -> np.ndarray:
        return scaled_rows(self.path, self.token, self.lo, self.scale)


def _column_range(X: np.ndarray, first: int) -> tuple[np.ndarray, np.ndarray,
                                                     tuple[int, int] | None]:  # fmt: skip
    """Column minima and maxima (float64) of the rows ``X`` (row ``first`` onwards of the
    table), and the first missing cell ``(row, column)`` (row of the table), if any."""
    missing = np.isnan(X)
    if missing.any():
        row, col = np.argwhere(missing)[0]
        return np.empty(0), np.empty(0), (int(first + row), int(col))
    return X.min(axis=0).astype(np.float64), X.max(axis=0).astype(np.float64), None


def _chunk_range(path: str, rows: slice) -> tuple[np.ndarray, np.ndarray,
                                                 tuple[int, int] | None]:  # fmt: skip
    """:func:`_column_range` of rows ``rows`` of a store's ``input/X`` (a task)."""
    return _column_range(input_chunk(path, rows), rows.start)


def _normalisation(runner: Any, table: RowSource, normalize: bool) -> tuple[np.ndarray, np.ndarray]:
    """``(min, scale)`` of the features from the row chunks' ranges (rows in memory: read
    here; a store's: one task per chunk), exact in float64 (``np.ptp`` is max - min);
    missing cells refused, the first one named."""
    if table.store_path is not None:
        items = [(table.store_path, rows) for rows in table.chunks()]
        parts: list[Any] = [None] * len(items)
        for i, part in runner.run(_chunk_range, items, name="xforest-ranges"):
            parts[i] = part
    else:
        parts = [_column_range(table.read_rows(rows, np.float64), rows.start)
                 for rows in table.chunks()]  # fmt: skip
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
    scale = hi - lo
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
    rows: np.ndarray | _ScaledRows,
    seeds: np.ndarray,
    n_directions: int,
    leaf_size: int,
    standard: bool,
    sink: tuple[str, int, int] | None,
) -> rptrees.GrownBatch:
    """One task: the trees of ``seeds`` on the normalised rows.  ``sink`` ``(store path,
    batch, chunk rows)``: the batch's rows' arrays and nodes are written into arrays of
    their own (``fit/leaves_<k>``, ... ``fit/nodes_<k>``: one writer each) and only the
    node counts and directions come back; None: the whole batch comes back."""
    grown = rptrees.grow_batch(rows.read() if isinstance(rows, _ScaledRows) else rows, seeds,
                               n_directions, leaf_size, standard)  # fmt: skip
    if sink is None:
        return grown
    path, batch, chunk = sink
    for name, values in (("leaves", grown.leaves), ("depth", grown.depth),
                         ("path", grown.codes)):  # fmt: skip
        _write_rows(path, f"{FIT_GROUP}/{name}_{batch}", values, chunk)
    nodes = {c: np.ascontiguousarray(grown.nodes[:, k]) for k, c in enumerate(NODE_COLUMNS)}
    write_group(path, f"{FIT_GROUP}/nodes_{batch}", {**nodes, "threshold": grown.thresholds})
    width, words = grown.codes.shape[1:]
    return replace(grown, leaves=np.empty((0, width), np.int32),
                   depth=np.empty((0, width), np.int32),
                   codes=np.empty((0, width, words), np.uint64),
                   nodes=np.empty((0, len(NODE_COLUMNS)), np.int32),
                   thresholds=np.empty(0))  # fmt: skip


class XForest(Persisted, DaskEstimator):
    """Approximate random-projection trees (X-Forest) and their beta-similarity.

    Per tree, ``n_directions`` random unit directions are drawn; the node at
    depth d splits on direction ``d mod n_directions`` at a threshold drawn
    uniformly between the node's smallest and largest projection.  A node
    with at most ``leaf_size`` points (or whose projections are all equal) is
    a leaf.  ``mode="standard"`` draws a fresh direction for every node (the
    Dasgupta-Freund RP tree).

    Parameters
    ----------
    n_estimators : int, default 1000
        Number of trees.
    n_directions : int, default 2
        X, the directions per tree (``mode="x"``).
    leaf_size : int, default 10
        A node with at most this many points is a leaf; a node of
        ``leaf_size + 1`` distinct points is split.  The X-Forest paper stops
        splitting when a node holds *fewer than* tau points, so
        ``leaf_size = tau - 1`` gives the paper's trees (``leaf_size=9`` for
        its tau = 10; ``tests/test_xforest.py`` checks both sides of the
        boundary).
    beta : float in [0, 1], default 0.9
        Decay per edge of the beta-similarity ``mean_t beta ** edges(a, b)``.
    mode : {"x", "standard"}, default "x"
    normalize : bool, default True
        Min-max normalise every feature first (as in the paper).
    batch_size : int or None
        Trees per Dask task; ``None`` gives about four tasks per worker thread.
    tile_size : int, default 2048
        Rows and columns of one similarity tile (one task, one Zarr chunk).
    random_state : int or None
        The same value gives the same trees and matrices whatever the cluster,
        batch and tile sizes.

    Where it runs is not a parameter: use ``with distforest.execution(client=c):``
    or :meth:`set_execution` (progress stages ``"fit"`` and ``"tiles"``).

    Attributes
    ----------
    n_samples_, n_features_in_ : int
    feature_names_in_ : tuple of str
    feature_min_, feature_scale_ : ndarray, shape (n_features,)
        The normalisation ``(X - min) / scale`` (identity when ``normalize=False``).
    seeds_ : ndarray of uint64, shape (n_estimators,)
    random_state_ : int
    leaves_, depth_ : ndarray of int32, shape (n_samples, n_estimators)
        Leaf node (local to its tree) and depth of every row.
    codes_ : ndarray of uint64, shape (n_samples, n_estimators, n_words)
        Path codes: bit k says the row went right at depth k.
    nodes_ : ndarray of int32, shape (total_nodes, 5)
        parent, depth, left, right, direction of every node (trees concatenated).
    thresholds_ : ndarray of float64, shape (total_nodes,)
    node_offset_ : ndarray of int64, shape (n_estimators + 1,)
    directions_ : ndarray of float64, shape (total_directions, n_features)
    direction_offset_ : ndarray of int64, shape (n_estimators + 1,)
    """

    def __init__(
        self,
        n_estimators: int = 1000,
        *,
        n_directions: int = 2,
        leaf_size: int = 10,
        beta: float = 0.9,
        mode: str = "x",
        normalize: bool = True,
        batch_size: int | None = None,
        tile_size: int = 2048,
        random_state: int | None = None,
    ) -> None:
        self.n_estimators = n_estimators
        self.n_directions = n_directions
        self.leaf_size = leaf_size
        self.beta = beta
        self.mode = mode
        self.normalize = normalize
        self.batch_size = batch_size
        self.tile_size = tile_size
        self.random_state = random_state

    _parameter_constraints: ClassVar[dict[str, C.Constraint]] = {
        "n_estimators": C.Int(1),
        "n_directions": C.Int(1),
        "leaf_size": C.Int(1),
        "beta": C.Number(0, 1, " (the similarity decay per tree edge; the paper uses 0.9)"),
        "mode": C.Choice(C.MODES),
        "normalize": C.Bool(),
        "batch_size": C.Int(1, none=True),
        "tile_size": C.TILE_SIZE,
        "random_state": C.Seed(),
    }

    # -- fitting ------------------------------------------------------------

    def fit(self, X: Any, y: Any = None) -> XForest:
        """Grow the trees, one Dask task per batch of trees.

        Parameters
        ----------
        X : path, array-like, DataFrame, dask/xarray/zarr object, Table or StoredTable
            Features without missing values.  Rows in memory give ``leaves_``,
            ``depth_`` and ``codes_`` as arrays here; a
            :class:`~distforest.store.inputs.StoredTable` is read by the tasks
            from its store, and those arrays (and the trees' nodes) are written
            there, read on use; a ``dask.dataframe.DataFrame`` is read by
            partitions into a temporary store of float64 rows first, never
            computed in this process, as is a path to a glob, a folder of parts or
            a large file (:func:`~distforest.store.source.open_source` decides).
            The same trees either way (from a table ingested as float32, the
            default of ``ingest``, the trees of those float32 values).
        y : ignored
            Accepted for scikit-learn compatibility; X-Forest is unsupervised.

        Returns
        -------
        self
        """
        params = self._validated()
        # rows read by partitions go to a temporary store of float64 rows (the values a
        # fit in memory sees) living as long as this forest
        with opened(X, owner=self, allow_missing=False, dtype=np.float64) as source:
            return self._grow(source, params)

    def _grow(self, table: RowSource, params: dict[str, Any]) -> XForest:
        """The one fit (see the module docstring): rows in memory or in a store, the
        rows' arrays and the nodes kept where the rows are."""
        n, d, n_trees = table.n_samples, table.n_features, params["n_estimators"]
        entropy, seeds = tasks.plan_seeds(params["random_state"], n_trees)
        grow = (params["n_directions"], params["leaf_size"], params["mode"] == "standard")
        rptrees.warm_up()
        path = table.store_path
        rs = None
        if path is not None:
            rs = RunStore.open(path, mode="r+")
            rs.mark_running()
            rs.group.require_group(FIT_GROUP)
        with self._runner(n * d) as runner:
            lo, scale = _normalisation(runner, table, params["normalize"])
            size = params["batch_size"] or tasks.default_batch_size(n_trees, runner.threads())
            batches = tasks.plan_batches(n_trees, size)
            logger.info("growing %d X-Forest trees on %d x %d from %s in %d tasks", n_trees, n,
                        d, table.source, len(batches))  # fmt: skip
            rows: Any
            if path is None:
                rows = runner.share((table.read_rows(slice(None), np.float64) - lo) / scale)
            else:  # each worker reads and normalises the rows once
                rows = _ScaledRows(path, uuid.uuid4().hex, lo, scale)
            # a store's batch arrays in chunks of the gathering blocks: one read per block
            step = max(params["tile_size"], ROUTE_ROWS // params["tile_size"] * params["tile_size"])
            items = [(rows, seeds[b], *grow, None if path is None else (path, k, step))
                     for k, b in enumerate(batches)]  # fmt: skip
            parts: list[Any] = [None] * len(batches)
            for i, part in runner.run(_grow_task, items, name="xforest-trees",
                                      progress=self._report("fit")):  # fmt: skip
                parts[i] = part
            if rs is not None:
                runner.everywhere(forget_inputs)
                self._gather(runner, rs, n, n_trees, len(batches), params["tile_size"])
        self.n_samples_ = n
        self.n_features_in_ = d
        self.feature_names_in_ = table.feature_names
        self.feature_min_, self.feature_scale_ = lo, scale
        self.random_state_, self.seeds_ = entropy, seeds
        self.node_offset_ = _offsets([p.node_counts for p in parts])
        self.directions_ = np.concatenate([p.directions for p in parts])
        self.direction_offset_ = _offsets([p.direction_counts for p in parts])
        self.input_ = {"source": table.source, "fingerprint": table.fingerprint()}
        self.fit_id_ = uuid.uuid4().hex
        self.params_ = params
        if rs is None or path is None:
            self._keep(parts, batches, n, n_trees)
            return self
        # the tasks wrote their trees' nodes; joined here a chunk at a time, never held whole
        rs.join_forest([f"{FIT_GROUP}/nodes_{k}" for k in range(len(batches))],
                       np.concatenate([p.node_counts for p in parts]), seeds)  # fmt: skip
        del rs.group[FIT_GROUP]
        self.nodes_ = cast(np.ndarray, StoredNodes(path))
        self.thresholds_ = cast(np.ndarray, rs.array("forest/threshold"))
        # the store's arrays, read on use (np.asarray, by rows) or by the workers
        self.leaves_ = cast(np.ndarray, rs.array("leaves"))
        self.depth_ = cast(np.ndarray, rs.array("depth"))
        self.codes_ = cast(np.ndarray, rs.array("path"))
        self._save_directions(rs)
        rs.update_attrs(**self._provenance(model=True), store_input=True)
        return self

    def _keep(self, parts: list[rptrees.GrownBatch], batches: list[slice], n: int,
              n_trees: int) -> None:  # fmt: skip
        """The rows' arrays and the nodes of a fit in memory, joined here."""
        words = max(p.codes.shape[2] for p in parts)
        codes = np.zeros((n, n_trees, words), dtype=np.uint64)
        for b, part in zip(batches, parts, strict=True):
            codes[:, b, : part.codes.shape[2]] = part.codes
        self.leaves_ = np.concatenate([p.leaves for p in parts], axis=1)
        self.depth_ = np.concatenate([p.depth for p in parts], axis=1)
        self.codes_ = codes
        self.nodes_ = np.concatenate([p.nodes for p in parts])
        self.thresholds_ = np.concatenate([p.thresholds for p in parts])

    def _gather(self, runner: Any, rs: RunStore, n: int, n_trees: int, n_batches: int,
                tile: int) -> None:  # fmt: skip
        """Join a stored fit's per-batch arrays into ``leaves``, ``depth`` and ``path`` by
        row chunks (narrower batches padded with zero words, as in memory)."""
        rs.write_coordinates(n, n_trees)
        for name, dtype in ROW_ARRAYS:
            dims = ("sample", "tree", "path_word") if name == "path" else ("sample", "tree")
            gather_batches(runner, rs.path, [f"{FIT_GROUP}/{name}_{k}" for k in range(n_batches)],
                           name, dtype, tile, dims=dims,
                           progress=self._report("gather"))  # fmt: skip

    def _check_fitted(self) -> None:
        if not hasattr(self, "codes_"):
            raise NotFittedError("this XForest is not fitted yet; call fit(X) first")

    def _beta(self, kind: str) -> float:
        self._check_fitted()
        return (
            self.params_["beta"]
            if C.check_choice("kind", kind, C.SIMILARITY_KINDS) == "beta"
            else 0.0
        )

    # -- new rows -------------------------------------------------------------

    def paths(self, X: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Route new rows through every stored tree.

        Parameters
        ----------
        X : array-like or any input :func:`distforest.io.load_table` reads
            Rows with the training features in the training order.

        Returns
        -------
        leaves, depth : ndarray of int32, shape (m, n_estimators)
        codes : ndarray of uint64, shape (m, n_estimators, n_words)
        """
        self._check_fitted()
        table = X if isinstance(X, Table) else load_table(X, allow_missing=False)
        if table.n_features != self.n_features_in_:
            raise InputError(
                f"{table.source} has {table.n_features} features but the forest was fitted "
                f"on {self.n_features_in_}; pass the same columns in the same order"
            )
        if np.isnan(table.X).any():
            raise InputError(
                f"{table.source}: rows with missing values cannot be routed; impute them first"
            )
        Xn = (table.X - self.feature_min_) / self.feature_scale_
        return rptrees.route_forest(
            Xn,
            np.asarray(self.nodes_),  # (a stored fit's: read here)
            np.asarray(self.thresholds_),
            self.node_offset_,
            self.directions_,
            self.direction_offset_,
        )

    def cross_similarity(self, X_query: Any, kind: str = "beta") -> np.ndarray:
        """Similarity between new rows and the fitted rows, in memory.

        Parameters
        ----------
        X_query : array-like, shape (n_query, n_features)
            Keep it small: the result is dense.
        kind : {"beta", "basic"}
            ``basic``: fraction of trees in which the two rows share a leaf.

        Returns
        -------
        ndarray of float32, shape (n_query, n_samples): one column per fitted row
            ``S[q, i] = mean_t beta ** edges_t(q, i)``.
        """
        beta = self._beta(kind)
        _, depth, codes = self.paths(X_query)
        if not isinstance(self.codes_, zarr.Array):
            return betasim.similarity_block(codes, depth, self.codes_, self.depth_, beta)
        # a stored fit: the fitted rows' codes read a chunk at a time, never whole here
        step = int(self.codes_.chunks[0])
        blocks = [
            betasim.similarity_block(codes, depth, self.codes_[s : s + step],
                                     self.depth_[s : s + step], beta)
            for s in range(0, self.n_samples_, step)
        ]  # fmt: skip
        return np.concatenate(blocks, axis=1) if blocks else np.zeros((len(depth), 0), np.float32)

    # -- matrices -------------------------------------------------------------

    def similarity(
        self,
        kind: str = "beta",
        store: str | Path | None = None,
        *,
        overwrite: bool = False,
        max_in_memory: int | None = None,
    ) -> xr.DataArray:
        """Pairwise similarity of the training rows.

        Parameters
        ----------
        kind : {"beta", "basic"}, default "beta"
            ``beta``: mean over trees of ``beta ** edges`` between the two
            rows' leaves (stored as ``beta_similarity``); ``basic``: fraction
            of trees in which they share a leaf (``basic_similarity``).
        store : str, Path or None
            Zarr store to write, one Dask task per upper-triangle tile (and its
            mirror).  The forest, ``depth``, ``path`` and ``leaves`` are saved
            with it.  ``None``: an in-memory matrix (at most the in-memory limit).
        overwrite : bool
            Replace an existing store written by another fit.
        max_in_memory : int, optional
            Without a store, refuse matrices of more than ``max_in_memory ** 2``
            cells; default the ``distforest.in-memory-cells`` setting
            (:mod:`distforest.io.in_memory`, 100,000,000 cells).

        Returns
        -------
        xarray.DataArray
            Dims ``(sample_i, sample_j)``, float32, symmetric, diagonal 1;
            lazy and Zarr-backed when ``store`` is given.
        """
        self._check_fitted()
        beta = self._beta(kind)
        name = SIMILARITY_NAMES[kind]
        n = self.n_samples_
        attrs = {"kind": kind, "beta": beta, "n_trees": int(self.codes_.shape[1])}
        if store is None:
            check_in_memory(n, n, what="similarity", itemsize=4, store="similarity.zarr",
                            max_in_memory=max_in_memory)  # fmt: skip
            plan = TilePlan(n, n, self.params_["tile_size"], symmetric=True)
            values = matrix_in_memory(plan, arrays_tile, (self.codes_, self.depth_, beta))
            coords = {"sample_i": np.arange(n), "sample_j": np.arange(n)}
            import xarray as xr  # on use: fitting and storing need none of it

            return xr.DataArray(
                values, dims=("sample_i", "sample_j"), coords=coords, name=name, attrs=attrs
            )
        rs = self._open_or_create(store, overwrite)
        self.write_similarity(rs, kind)
        rs.mark_complete()
        return rs.dataset()[name]

    def write_similarity(self, rs: RunStore, kind: str = "beta") -> dict[str, int]:
        """Write a similarity into an open store tile by tile, resuming if possible.

        Tiles marked in the store's done record by an earlier, interrupted
        call on the same fit are skipped.  The store is not marked complete.

        Parameters
        ----------
        rs : RunStore
            A store saved from this forest (same ``fit_id``), opened for writing.
        kind : {"beta", "basic"}

        Returns
        -------
        dict
            ``tiles`` (planned), ``skipped`` (already done) and ``bytes`` written.
        """
        beta = self._beta(kind)
        rs.check_fit(self.fit_id_, f"store {rs.path!r} holds a forest that belongs",
                     "save this forest to a new store first")  # fmt: skip
        name = SIMILARITY_NAMES[kind]
        n = self.n_samples_
        plan = TilePlan(n, n, self.params_["tile_size"], symmetric=True)
        betasim.warm_up()  # compile once here, not in every worker at the same time
        with self._runner(self._fitted_cells()) as runner:
            return write_matrix(
                runner, rs, name, plan, store_tile, (rs.path, beta),
                identity={"fit_id": self.fit_id_, "kind": kind, "beta": beta},
                attrs={"kind": kind, "beta": beta, "n_trees": int(self.codes_.shape[1])},
                progress=self._report("tiles"),
            )  # fmt: skip

    @contextlib.contextmanager
    def product_session(self, kind: str = "beta") -> Iterator[SimilarityProduct]:
        """A reusable matrix-free ``S @ V`` on this forest's client (for eigensolvers)."""
        self._check_fitted()
        beta = self._beta(kind)
        with self._runner(self._fitted_cells()) as runner:
            yield SimilarityProduct(runner, self, beta)

    def product(self, V: Any, kind: str = "beta") -> np.ndarray:
        """``S @ V`` without forming S, through ``S = Phi Phi^T / T`` (docs/design.md section 3).

        Parameters
        ----------
        V : array-like, shape (n_samples,) or (n_samples, k)
        kind : {"beta", "basic"}

        Returns
        -------
        ndarray of float64, same shape as ``V``
        """
        with self.product_session(kind) as session:
            return session(V)

    # -- storing --------------------------------------------------------------

    _store_tag = ("method", "xforest")
    _store_hint = "use `distforest xforest` to make one"
    _stored_fields = (
        *INPUT_FIELDS,
        Field("task", encode=lambda forest: "unsupervised"),
        Field("n_trees", encode=lambda forest: int(forest.codes_.shape[1])),
        Field("fit_id", "fit_id_"),
    )
    _stored_arrays = (
        Array("leaves", "leaves_"),
        Array("depth", "depth_"),
        Array("path", "codes_"),
    )

    def _save_parts(self, rs: RunStore, tile_size: int) -> None:
        nodes = {c: np.ascontiguousarray(self.nodes_[:, k]) for k, c in enumerate(NODE_COLUMNS)}
        nodes["threshold"] = np.asarray(self.thresholds_)
        rs.write_forest(nodes, np.diff(self.node_offset_), self.seeds_)
        self._save_directions(rs)

    def _save_directions(self, rs: RunStore) -> None:
        """Write ``forest/``'s directions and normalisation (the nodes are written)."""
        forest = RunStore(location.join(rs.path, "forest"), rs.subgroup("forest"))
        forest.write_array("direction_offset", self.direction_offset_, ("tree_edge",))
        forest.write_array("directions", self.directions_, ("direction", "feature"))
        forest.write_array("feature_min", self.feature_min_, ("feature",))
        forest.write_array("feature_scale", self.feature_scale_, ("feature",))

    @classmethod
    def _rows_in_store(cls, rs: RunStore) -> bool:
        # a fit from a stored table keeps its (n, T) arrays in the store: read on use
        return bool(rs.attrs.get("store_input"))

    def _load_parts(self, rs: RunStore) -> None:
        stored = bool(rs.attrs.get("store_input"))  # a stored fit's nodes: read on use
        node_arrays = (*NODE_COLUMNS, "threshold") if stored else ()
        f = {name: np.asarray(arr[...]) for name, arr in rs.subgroup("forest").arrays()
             if name not in node_arrays}  # fmt: skip
        self.feature_min_, self.feature_scale_ = f["feature_min"], f["feature_scale"]
        self.seeds_ = f["seed"]
        if stored:
            self.nodes_ = cast(np.ndarray, StoredNodes(rs.path))
            self.thresholds_ = cast(np.ndarray, rs.array("forest/threshold"))
        else:
            self.nodes_ = np.stack([f[c] for c in NODE_COLUMNS], axis=1).astype(np.int32)
            self.thresholds_ = f["threshold"]
        self.node_offset_ = f["node_offset"]
        self.directions_ = f["directions"]
        self.direction_offset_ = f["direction_offset"]


def _offsets(counts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(np.concatenate(counts))]).astype(np.int64)
