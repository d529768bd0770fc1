"""`XForest`: approximate random-projection trees as Dask tasks, beta-similarity as Zarr tiles.

A fitted forest is summarised by three O(n T) arrays: ``depth_[i, t]``,
``codes_[i, t, :]`` (the path code of row i in tree t, docs/design.md section 3)
and ``leaves_[i, t]``, plus the flat node arrays for routing new rows.  The
beta-similarity ``S[a, b] = mean_t beta ** (d_a + d_b - 2 d_lca)`` is written
tile by tile from the codes, or applied matrix-free through its exact
factorisation ``S = Phi Phi^T / T`` (:func:`distforest.kernels.betasim.phi_product`,
:mod:`distforest.forests.xforest_similarity`).

One fit, whatever holds the rows, on the fit driver
(:func:`~distforest.forests.fit_driver.fit_forest`):

1. **Normalisation.**  The column minima and maxima (float64, exact for
   float32 values) and the first missing cell of every chunk of the source's
   rows, one task each, reduced here: the same float64 values as
   ``X.min(axis=0)`` and ``np.ptp``; the driver never reads a stored table.
2. **Trees.**  The driver's tasks, one per batch of trees, seeds planned from
   ``random_state``: the same trees on any cluster and from any home of the
   rows.  Each worker process normalises the rows once per fit
   (:func:`grow_xforest_batch`).  Each batch has its own number of path-code
   words; the widest decides ``codes_`` (narrower batches padded with zero words).
3. **Rows' arrays.**  Leaves, depths and path codes go to the driver's sink:
   arrays here, or the run store of the rows (gathered by row chunks), where
   the nodes are joined into ``forest/`` a chunk at a time: the store then
   holds what :meth:`XForest.save` writes, ``leaves_``, ``depth_`` and
   ``codes_`` are its Zarr arrays and ``nodes_``, ``thresholds_`` read it on
   use (:class:`StoredNodes`).  Only the directions (a few per tree; one per
   split node in ``standard`` mode) pass through the driver.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, cast

import numpy as np
import zarr

from distforest import location
from distforest.errors import InputError, NotFittedError
from distforest.forests import constraints as C
from distforest.forests._estimator import DaskEstimator
from distforest.forests.fit_driver import (
    ForestFit,
    GrownBatch,
    fit_forest,
    scaled_once,
    summarise_columns,
)
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
from distforest.store.run_store import RunStore, complete_output, task_array
from distforest.store.sink import open_sink
from distforest.store.source import opened

if TYPE_CHECKING:
    import xarray as xr

logger = logging.getLogger("distforest")

#: ``progress(stage, done, total)``; stages are "fit", "gather" (a stored fit), "tiles"
#: and "product".
Progress = Callable[[str, int, int], None]


#: Columns of the flat node array, as stored under ``forest/``.
NODE_COLUMNS = ("parent", "depth", "left", "right", "direction")
#: The rows' arrays of a fit (the driver's per-row results): name -> (dtype, dims).
ROW_RESULTS = {"leaves": ("int32", ("sample", "tree")), "depth": ("int32", ("sample", "tree")),
               "path": ("uint64", ("sample", "tree", "path_word"))}  # fmt: skip


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


def _normalisation(runner: Any, table: RowSource, rows: Any,
                   normalize: bool) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """``(min, scale)`` of the features (:func:`~distforest.forests.fit_driver.summarise_columns`
    on the rows handle ``rows``), exact in float64 (``np.ptp`` is max - min); missing
    cells refused, the first one named."""
    summary = summarise_columns(runner, table, rows)
    if summary.first_missing is not None:
        row, col = summary.first_missing
        raise InputError(
            f"{table.source}: X-Forest needs complete data, but column "
            f"{table.feature_names[col]!r} is missing at row {row + 1:,} (counted from 1); "
            "impute the missing values first, e.g. `distforest impute`"
        )
    d = table.n_features
    if not normalize:
        return np.zeros(d), np.ones(d)
    scale = summary.high - summary.low
    return summary.low, np.where(scale > 0, scale, 1.0)


def grow_xforest_batch(
    X: np.ndarray, y: None, seeds: np.ndarray, *, shift: np.ndarray, scale: np.ndarray,
    token: str, n_directions: int, leaf_size: int, standard: bool,
) -> GrownBatch:  # fmt: skip
    """The fit driver's grower of an :class:`XForest`: the trees of ``seeds`` on the rows
    normalised as ``(X - shift) / scale`` in float64 (once per worker process and fit
    ``token``), their rows' leaves, depths and path codes, and their nodes."""

    grown = rptrees.grow_batch(scaled_once(X, token, shift, scale), seeds, n_directions,
                               leaf_size, standard)  # fmt: skip
    nodes = {c: np.ascontiguousarray(grown.nodes[:, k]) for k, c in enumerate(NODE_COLUMNS)}
    return GrownBatch(
        rows={"leaves": grown.leaves, "depth": grown.depth, "path": grown.codes},
        trees={"node_counts": grown.node_counts, "directions": grown.directions,
               "direction_counts": grown.direction_counts},
        nodes={**nodes, "threshold": grown.thresholds},
    )  # fmt: skip


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

    #: Made from the one declaration, :data:`~distforest.forests.constraints.XFOREST_PARAMETERS`.
    _parameter_constraints: ClassVar[dict[str, C.Constraint]] = {
        name: p.constraint for name, p in C.XFOREST_PARAMETERS.items()
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
        """The one fit (see the module docstring) on the fit driver: the rows' arrays and
        the nodes go to its sink (the rows' store, else memory by the in-memory rule)."""
        n, d, n_trees = table.n_samples, table.n_features, params["n_estimators"]
        rptrees.warm_up()
        with self._runner(n * d) as runner:
            rows = table.rows_handle(runner.share, np.float64)
            lo, scale = _normalisation(runner, table, rows, params["normalize"])
            grower = partial(grow_xforest_batch, shift=lo, scale=scale, token=uuid.uuid4().hex,
                             n_directions=params["n_directions"], leaf_size=params["leaf_size"],
                             standard=params["mode"] == "standard")  # fmt: skip
            sink = open_sink(n, n_trees, store=table.store_path,
                             chunk_rows=params["tile_size"], owner=self)  # fmt: skip
            fit = fit_forest(
                table, grower, y=None, n_trees=n_trees, random_state=params["random_state"],
                batch_size=params["batch_size"]
                or tasks.default_batch_size(n_trees, runner.threads()),
                runner=runner, sink=sink, row_results=ROW_RESULTS, dtype=np.float64,
                rows=rows, progress=self._report("fit"), join_progress=self._report("gather"),
            )  # fmt: skip
        del rows
        self._take_fit(table, fit, params, lo, scale)
        return self

    def _take_fit(self, table: RowSource, fit: ForestFit, params: dict[str, Any],
                  lo: np.ndarray, scale: np.ndarray) -> None:  # fmt: skip
        """Set the fitted attributes once, from the fit driver's result (a fit into a
        store: the store's arrays, read on use, and the store made this model's)."""
        self.n_samples_ = table.n_samples
        self.n_features_in_ = table.n_features
        self.feature_names_in_ = table.feature_names
        self.feature_min_, self.feature_scale_ = lo, scale
        self.random_state_, self.seeds_ = fit.random_state, fit.seeds
        self.node_offset_ = _offsets(fit.trees["node_counts"])
        self.directions_ = fit.trees["directions"]
        self.direction_offset_ = _offsets(fit.trees["direction_counts"])
        self.input_ = {"source": table.source, "fingerprint": table.fingerprint()}
        self.fit_id_ = fit.fit_id
        self.params_ = params
        # arrays here, or the store's Zarr arrays (read on use, by rows)
        self.leaves_: np.ndarray = fit.rows["leaves"]
        self.depth_: np.ndarray = fit.rows["depth"]
        self.codes_: np.ndarray = fit.rows["path"]
        if fit.store is None:
            assert fit.nodes is not None  # kept by the driver
            self.nodes_ = np.stack([fit.nodes[c] for c in NODE_COLUMNS], axis=1)
            self.thresholds_ = fit.nodes["threshold"]
            return
        rs = RunStore.open(fit.store, mode="r+")
        self.nodes_ = cast(np.ndarray, StoredNodes(fit.store))
        self.thresholds_ = cast(np.ndarray, rs.array("forest/threshold"))
        self._save_directions(rs)
        rs.update_attrs(**self._provenance(model=True), store_input=True)

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
        complete_output(rs)
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


def _offsets(counts: np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
