"""`SMERF`: a forest that learns a distance from features plus observed pairwise distances.

Tomita & Vogelstein's Similarity and Metric Random Forests (docs/design.md
section 4): trees split to minimise the children's average within-node
distance of an observed n x n matrix D (NaN = pair not observed; the kernel
leaves it out of every sum), and predict the distance of a new pair as the mean
of D over the in-bag members of the two rows' leaves, averaged over the trees
(:mod:`distforest.kernels.smerf`).

Trees are grown as Dask tasks (one per batch of trees, seeds planned in the
driver, so the same ``random_state`` gives the same forest on any cluster).
Predicted matrices go through the tile service: per tile and tree, only the
distinct leaf pairs the tile needs are averaged, from the leaves' in-bag
members and D; no tree's leaf-by-leaf table is ever built (memory O(n T) for
the leaves plus one tile, beside D itself).  A saved model keeps D (as
``train_distance``, compressed, NaN = not observed) so that it predicts
without the original file.

D given as a file (``.npy`` or Zarr) is checked block by block in the driver
and then only referred to: each worker reads it once for all its tasks
(:class:`distforest.io.distances.StoredDistances`), and :meth:`SMERF.save`
copies it into the model block by block, so the driver never holds it whole.
A loaded model refers to its own ``train_distance`` the same way.

One fit, whatever holds the features, on the fit driver
(:func:`~distforest.forests.fit_driver.fit_forest`): one task per batch of trees
on the same seeds and batches, the same trees bit for bit.  Missing values are
counted by one task per chunk of the rows; each tree task takes the rows (rows
in a store: read once per worker process) and gives its trees, their rows'
leaves (int32) and in-bag counts (uint16; a saved model keeps uint8) to the
driver's sink: arrays here, or, for rows in a store (a
:class:`~distforest.store.inputs.StoredTable`, or a ``dask.dataframe.DataFrame``
ingested on the workers into a temporary one), the store's ``leaves`` and
``inbag`` (gathered by row chunks: ``leaves_`` and ``inbag_`` are those Zarr
arrays, never an n x T copy in the driver) and its ``forest/`` (nodes, split
projections and every leaf's in-bag members, joined a chunk at a time:
``forest_`` is then a :class:`StoredForest`, read on use, never held by the
driver).
A later fit on the same stored table replaces ``leaves``, ``inbag`` and
``forest/``: the earlier model then refuses to predict from them (its
``fit_id``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, cast

import numpy as np

from distforest import location
from distforest.errors import InputError, NotFittedError, ParameterError, StoreError
from distforest.forests import constraints as C
from distforest.forests._estimator import DaskEstimator
from distforest.forests.fit_driver import (
    ColumnSummary,
    GrownBatch,
    fit_forest,
    summarise_columns,
)
from distforest.forests.persistence import (
    INPUT_FIELDS,
    UNSET,
    Array,
    Field,
    Persisted,
)
from distforest.forests.tiled import matrix_in_memory, write_matrix
from distforest.io import Table, load_table
from distforest.io.distances import (
    Distances,
    StoredDistances,
    distance_blocks,
    distance_values,
    load_distances,
)
from distforest.io.in_memory import check_in_memory
from distforest.io.matrices import StoredMatrix
from distforest.io.source import RowSource
from distforest.kernels import smerf as K
from distforest.parallel import tasks
from distforest.parallel.tiling import TilePlan
from distforest.store.inputs import forget_inputs, per_fit
from distforest.store.run_store import RunStore, complete_output
from distforest.store.sink import open_sink
from distforest.store.source import opened

if TYPE_CHECKING:
    import xarray as xr

logger = logging.getLogger("distforest")

#: Default rows/columns of one predicted tile (one task, one Zarr chunk).
TILE_SIZE = C.SMERF_TILE
#: The stored name of a predicted matrix.
DISTANCE = "distance"
#: The stored name of the training distances inside a model.
TRAIN_DISTANCE = "train_distance"
#: The per-row arrays of a fit (the driver's per-row results): name -> (dtype, dims); a
#: saved model's inbag is uint8.
ROW_RESULTS = {"leaves": ("int32", ("sample", "tree")), "inbag": ("uint16", ("sample", "tree"))}


def input_cells(n_samples: int, n_features: int) -> int:
    """Input cells of a fit (for :func:`distforest.parallel.placement.runs_in_process`):
    the features and the n x n observed distances."""
    return n_samples * n_features + n_samples**2


@dataclass
class TileInputs:
    """What every tile task of one predicted matrix needs (shared with the workers once)."""

    D: np.ndarray | StoredDistances
    leaves_a: np.ndarray
    leaves_b: np.ndarray
    inbag_a: np.ndarray
    inbag_b: np.ndarray
    #: ``(node_offset, leaf_start, leaf_members)`` of the trees, or a stored fit's
    #: trees, which each worker reads once (:meth:`StoredForest.tile_arrays`).
    trees: tuple[np.ndarray, np.ndarray, np.ndarray] | StoredForest
    oob: bool
    fallback: float


def distance_tile(inputs: TileInputs, rows: slice, cols: slice) -> np.ndarray:
    """Tile function of the tile service: predicted distances of ``rows`` x ``cols``."""
    oob = inputs.oob
    trees = inputs.trees
    node_offset, leaf_start, leaf_members = (
        trees.tile_arrays() if isinstance(trees, StoredForest) else trees
    )
    return K.tile_distance(
        distance_values(inputs.D), inputs.leaves_a[rows], inputs.leaves_b[cols], node_offset,
        leaf_start, leaf_members, oob,
        inputs.inbag_a[rows] if oob else inputs.inbag_a,
        inputs.inbag_b[cols] if oob else inputs.inbag_b,
        inputs.fallback,
    )  # fmt: skip


#: The arrays of a stored fit's ``forest/`` that are not one value per node: (name, dims).
FOREST_ARRAYS = (("proj_feature", ("projection",)), ("proj_weight", ("projection",)),
                 ("leaf_members", ("member",)))  # fmt: skip


@dataclass(frozen=True)
class StoredForest:
    """The flat trees of a SMERF fitted into a store (its ``forest/``), never held by the
    driver: attributes as :class:`~distforest.kernels.smerf.FlatForest`'s, read on use
    (routing new rows reads the nodes and projections, not the leaves' members), and the
    tile tasks read what they need once per worker process (:meth:`tile_arrays`).

    ``fit_id`` names the fit: a later fit into the same store replaced the trees, and
    reading them then is refused.
    """

    path: str
    fit_id: str
    node_offset: np.ndarray
    importances: np.ndarray

    def _array(self, name: str) -> np.ndarray:
        rs = RunStore.open(self.path)
        fitted = rs.array("leaves").attrs.get("fit_id")
        if fitted != self.fit_id:
            raise StoreError(
                f"the trees of this SMERF in {self.path!r} belong to another fit (fit_id "
                f"{fitted!r}, this model {self.fit_id!r}): a later fit on the same stored "
                "table replaced them; fit this model again"
            )
        return np.asarray(rs.array(f"forest/{name}")[...])

    @property
    def nodes(self) -> dict[str, np.ndarray]:
        """:data:`~distforest.kernels.smerf.NODE_COLUMNS`, read from the store."""
        return {c: self._array(c) for c in K.NODE_COLUMNS}

    @property
    def proj_feature(self) -> np.ndarray:
        return self._array("proj_feature")

    @property
    def proj_weight(self) -> np.ndarray:
        return self._array("proj_weight")

    @property
    def leaf_members(self) -> np.ndarray:
        return self._array("leaf_members")

    @property
    def proj_start(self) -> np.ndarray:
        return K.offsets(self._array("proj_count"))

    @property
    def leaf_start(self) -> np.ndarray:
        return K.offsets(self._array("leaf_size"))

    def tile_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(node_offset, leaf_start, leaf_members)``, read once per process and fit."""
        return cast(tuple[np.ndarray, np.ndarray, np.ndarray], per_fit(
            "smerf trees", self.path, self.fit_id,
            lambda: (self.node_offset, self.leaf_start, self.leaf_members)))  # fmt: skip


def grow_smerf_batch(
    X: np.ndarray, D: np.ndarray | StoredDistances, seeds: np.ndarray, *, params: dict[str, Any],
) -> GrownBatch:  # fmt: skip
    """The fit driver's grower of a :class:`SMERF`: the trees of ``seeds`` on the rows (float64)
    and the observed distances ``D`` (a file: read once per worker process), the rows'
    leaves and in-bag counts (uint16) in those trees, and the flat trees."""
    X = np.asarray(X, dtype=np.float64)
    if not X.flags.writeable:
        X = X.copy()  # this task's own (writable) copy of rows shared read-only
    forest = K.grow_batch(X, distance_values(D), seeds, params)
    inbag = K.inbag_counts(forest, X.shape[0])
    return GrownBatch(
        rows={"leaves": K.apply(forest, X), "inbag": inbag},
        trees={"node_counts": np.diff(forest.node_offset), "importances": forest.importances,
               "inbag_max": inbag.max(axis=0, initial=0)},
        nodes={**forest.nodes, **{name: getattr(forest, name) for name, _ in FOREST_ARRAYS}},
    )  # fmt: skip


def _check_complete(table: RowSource, summary: ColumnSummary) -> None:
    """Refuse features with missing values (counted by the chunks' tasks), naming them."""
    missing = [
        (name, int(v)) for name, v in zip(table.feature_names, summary.missing, strict=True) if v
    ]
    if missing:
        shown = ", ".join(f"{k!r} ({v})" for k, v in missing[:5])
        raise InputError(
            f"{table.source}: SMERF needs complete features, but columns have missing values: "
            f"{shown}; impute them first, e.g. `distforest impute`"
        )


class SMERF(Persisted, DaskEstimator):
    """Similarity and Metric Random Forest: learn a distance from X and an observed D.

    Parameters
    ----------
    n_estimators : int, default 100
        Number of trees.
    max_features : "sqrt", "log2", "auto", None, int or float, default "sqrt"
        Candidates per node (features, or projections when ``oblique``), as
        in scikit-learn.
    oblique : bool, default False
        Sparse random projections as candidates (each 1 + Poisson(0.5) features
        with +-1 weights, as SPORF) instead of single features.
    max_depth : int or None, default None
    min_samples_leaf : int, default 1
        In-bag rows (with multiplicity) each child must keep.
    bootstrap : bool, default True
        Each tree sees n rows drawn with replacement.
    random_state : int or None, default 0
        The same value gives the same trees and matrices on any cluster and
        with any tile size.

    Where it runs is not a parameter: ``with distforest.execution(client=c):``
    or :meth:`set_execution` (progress stages ``"fit"`` and ``"tiles"``).

    Attributes
    ----------
    n_samples_, n_features_in_ : int
    feature_names_in_ : tuple of str
    feature_importances_ : ndarray, shape (n_features,)
        Decrease of the SMERF objective per feature, each split weighted by
        its share of the tree's rows, summed per tree, averaged over the trees
        and normalised to sum to 1 (as scikit-learn's; raw values in
        ``tree_importances_``).
    tree_importances_ : ndarray, shape (n_estimators, n_features)
    seeds_ : ndarray of uint64, shape (n_estimators,)
    random_state_ : int
    leaves_ : ndarray of int32, shape (n_samples, n_estimators)
        Leaf (node id local to its tree) of every training row (fitted from a
        stored table: the store's Zarr array, read on use).
    inbag_ : ndarray of uint16, shape (n_samples, n_estimators)
        Bootstrap count of every training row in every tree (fitted from a
        stored table: the store's uint16 Zarr array, at most 255; a saved model
        keeps them as uint8).
    forest_ : distforest.kernels.smerf.FlatForest or StoredForest
        The trees (fitted from a stored table: the store's ``forest/``, read on use).
    distances_ : ndarray or StoredDistances, shape (n_samples, n_samples)
        The observed training distances (NaN = not observed): the array given
        to ``fit``, or, for D given as a file (and for a loaded model), a
        reference to it whose ``load()`` (or ``numpy.asarray``) reads it.
    mean_distance_ : float
        Mean observed distance: the prediction of a pair no tree can estimate.
    """

    def __init__(
        self,
        n_estimators: int = 100,
        max_features: int | float | str | None = "sqrt",
        oblique: bool = False,
        max_depth: int | None = None,
        min_samples_leaf: int = 1,
        bootstrap: bool = True,
        random_state: int | None = 0,
    ) -> None:
        self.n_estimators = n_estimators
        self.max_features = max_features
        self.oblique = oblique
        self.max_depth = max_depth
        self.min_samples_leaf = min_samples_leaf
        self.bootstrap = bootstrap
        self.random_state = random_state

    #: Made from the one declaration, :data:`~distforest.forests.constraints.SMERF_PARAMETERS`.
    _parameter_constraints: ClassVar[dict[str, C.Constraint]] = {
        name: p.constraint for name, p in C.SMERF_PARAMETERS.items()
    }

    # -- fitting ------------------------------------------------------------

    def fit(self, X: Any, D: Any) -> SMERF:
        """Grow the trees, one Dask task per batch of trees.

        Parameters
        ----------
        X : path, array-like, DataFrame, dask/xarray/zarr object, Table or StoredTable
            n rows of numeric features without missing values.  A
            :class:`~distforest.store.inputs.StoredTable` is read by the tasks
            from its store (and ``leaves_``, ``inbag_`` are written there); a
            ``dask.dataframe.DataFrame`` is read by partitions on the workers
            into a temporary store, never computed here.
        D : path (.npy or Zarr), numpy, dask, xarray or zarr array, or Distances
            Observed symmetric dissimilarities of the rows of X, shape (n, n)
            (may be negative, e.g. minus a similarity); NaN marks a pair not
            observed.  A file is never read whole here: each worker reads it
            once.  A :class:`~distforest.io.distances.Distances` from
            ``load_distances`` is used as checked.

        Returns
        -------
        self
        """
        params = self._validated()
        # rows read by partitions go to a temporary store of float64 rows (the values a
        # fit in memory sees) living as long as this model
        with opened(X, owner=self, allow_missing=False, dtype=np.float64) as source:
            return self._grow(source, D, params)

    def _grow(self, table: RowSource, D: Any, params: dict[str, Any]) -> SMERF:
        """The one fit (see the module docstring): rows in memory or in a store, the
        rows' leaves and in-bag counts kept where the rows are."""
        n, d = table.n_samples, table.n_features
        dist = D if isinstance(D, Distances) else load_distances(D, n=n)
        if dist.shape[0] != n:
            raise InputError(
                f"D has {dist.shape[0]} rows but X ({table.source}) has {n}; D must have one "
                "row and one column per row of X, in the same order"
            )
        n_trees = params["n_estimators"]
        tree_params = {k: params[k]
                       for k in ("max_features", "min_samples_leaf", "max_depth", "bootstrap",
                                 "oblique")}  # fmt: skip
        K.warm_up()  # compile once here, not in every worker at the same time
        with self._runner(input_cells(n, d)) as runner:
            rows = table.rows_handle(runner.share, np.float64)
            _check_complete(table, summarise_columns(runner, table, rows))
            # the rows' store, else memory by the in-memory rule, else a store of this model's
            sink = open_sink(n, n_trees, store=table.store_path, chunk_rows=C.SMERF_TILE,
                             owner=self)  # fmt: skip
            # D given as a file is passed as a reference: each worker reads it once
            fit = fit_forest(
                table, partial(grow_smerf_batch, params=tree_params), y=dist.values,
                n_trees=n_trees, random_state=params["random_state"],
                batch_size=tasks.default_batch_size(n_trees, runner.threads()), runner=runner,
                sink=sink, row_results=ROW_RESULTS, dtype=np.float64, rows=rows,
                node_dims={name: dims for name, dims in FOREST_ARRAYS},
                progress=self._report("fit"),
            )  # fmt: skip
        forest: K.FlatForest | StoredForest
        if fit.store is None:
            assert fit.nodes is not None  # kept by the driver
            nodes = dict(fit.nodes)
            forest = K.FlatForest(
                nodes={c: nodes.pop(c) for c in K.NODE_COLUMNS},
                node_offset=K.offsets(fit.trees["node_counts"]),
                **{name: nodes.pop(name) for name, _ in FOREST_ARRAYS},
                importances=fit.trees["importances"],
            )  # fmt: skip
        else:  # the trees were joined into the store's forest/: read there on use
            if fit.trees["inbag_max"].max(initial=0) > np.iinfo(np.uint8).max:
                raise StoreError("a bootstrap count above 255 cannot be stored as uint8 inbag")
            rs = RunStore.open(fit.store, mode="r+")
            for name in ROW_RESULTS:
                fit.rows[name].attrs.update({"fit_id": fit.fit_id})
            forest_group = RunStore(location.join(rs.path, "forest"), rs.subgroup("forest"))
            forest_group.write_array("tree_importances", fit.trees["importances"],
                                     ("tree", "feature"))  # fmt: skip
            forest = StoredForest(rs.path, fit.fit_id, K.offsets(fit.trees["node_counts"]),
                                  fit.trees["importances"])  # fmt: skip
        return self._fitted(
            forest, fit.rows["leaves"], fit.rows["inbag"], n_samples=n,
            feature_names=table.feature_names, seeds=fit.seeds, entropy=fit.random_state,
            dist=dist, input_={"source": table.source, "fingerprint": table.fingerprint()},
            params=params, fit_id=fit.fit_id,
        )  # fmt: skip

    def _fitted(
        self, forest: K.FlatForest | StoredForest, leaves: Any, inbag: Any, *, n_samples: int,
        feature_names: tuple[str, ...], seeds: np.ndarray, entropy: int, dist: Distances,
        input_: dict[str, Any], params: dict[str, Any], fit_id: str,
    ) -> SMERF:  # fmt: skip
        """Set the fitted attributes (``leaves``, ``inbag``: arrays, or a stored fit's Zarr
        arrays); returns self."""
        self.n_samples_ = n_samples
        self.n_features_in_ = len(feature_names)
        self.feature_names_in_ = feature_names
        self.seeds_ = seeds
        self.random_state_ = entropy
        self.distances_ = dist.values
        self.mean_distance_ = dist.mean
        self.input_ = input_
        self.params_ = params
        self.fit_id_ = fit_id
        self._set_forest(forest, leaves, inbag)
        return self

    def _set_forest(
        self, forest: K.FlatForest | StoredForest, leaves: np.ndarray, inbag: np.ndarray
    ) -> None:
        self.forest_ = forest
        self.leaves_ = leaves
        self.inbag_ = inbag
        self.tree_importances_ = forest.importances
        total = forest.importances.mean(axis=0)
        norm = total.sum()
        self.feature_importances_ = total / norm if norm > 0 else total

    def _fitted_cells(self) -> int:
        """Cells of the training input (:func:`input_cells`)."""
        return input_cells(int(self.n_samples_), int(self.n_features_in_))

    def _distance_cells(self, n: int, m: int) -> int:
        """Input cells of an ``n x m`` learned-distance matrix: the training input
        (features and distances) and the features of the ``n + m`` rows."""
        return self._fitted_cells() + (n + m) * int(self.n_features_in_)

    def _check_fitted(self) -> None:
        if not hasattr(self, "forest_"):
            raise NotFittedError("this SMERF is not fitted yet; call fit(X, D) first")

    # -- new rows -------------------------------------------------------------

    def _rows(self, X: Any, what: str) -> np.ndarray:
        table = X if isinstance(X, Table) else load_table(X, allow_missing=False, min_rows=1)
        if table.n_features != self.n_features_in_:
            raise InputError(
                f"{what} ({table.source}) has {table.n_features} features but the forest was "
                f"fitted on {self.n_features_in_}; pass the same columns in the same order"
            )
        if np.isnan(table.X).any():
            raise InputError(f"{what} ({table.source}): rows with missing values cannot be routed")
        return table.X

    def _route(self, X: Any, what: str) -> np.ndarray:
        """Leaves of the rows of ``X`` (a stored fit's trees: nodes and projections read
        from the store on use).  A source (rows read as a table: by partitions, from a
        store) is routed by its chunks (:func:`~distforest.forests.scaled_rows.chunk_map`:
        one task each for rows in a store)."""
        if not isinstance(X, RowSource):
            return K.apply(cast(K.FlatForest, self.forest_), self._rows(X, what))
        from distforest.forests.scaled_rows import chunk_map

        if X.n_features != self.n_features_in_:
            raise InputError(
                f"{what} ({X.source}) has {X.n_features} features but the forest was "
                f"fitted on {self.n_features_in_}; pass the same columns in the same order"
            )
        parts = chunk_map(X, _route_chunk, self.forest_, f"{what} ({X.source})")
        return np.concatenate(parts) if parts else np.empty((0, self.n_estimators), np.int32)

    def apply(self, X: Any) -> np.ndarray:
        """Leaf of every row of ``X`` in every tree.

        Returns
        -------
        ndarray of int32, shape (n_rows, n_estimators)
            Node ids local to their tree.
        """
        self._check_fitted()
        return self._route(X, "X")

    # -- matrices -------------------------------------------------------------

    def predict_distance(
        self,
        X_a: Any = None,
        X_b: Any = None,
        store: str | Path | None = None,
        *,
        tile_size: int = TILE_SIZE,
        overwrite: bool = False,
        complete: bool = True,
        attrs: dict[str, Any] | None = None,
        resume: bool = False,
    ) -> xr.DataArray:
        """Learned distance between the rows of ``X_a`` and those of ``X_b``.

        Parameters
        ----------
        X_a : array-like, path or Table, optional
            Rows of the matrix (``sample_i``); None: the training rows (their
            leaves as fitted, not routed again).
        X_b : array-like, path or Table, optional
            Columns (``sample_j``); None: the training rows.
        store : str or Path, optional
            Zarr store to create: the matrix ``distance`` is written tile by
            tile as Dask tasks and returned lazily.  None: in memory (at most
            1e8 cells).
        tile_size : int
            Rows/columns of one tile (one task, one Zarr chunk); does not
            change the values.
        overwrite : bool
            Replace an existing distforest store.
        complete : bool
            Mark the store complete afterwards (a job's run protocol marks it when
            all its stages are done).
        attrs : dict, optional
            More JSON attributes of a new store (a job's record), written before its
            first tile.
        resume : bool
            Reopen a half-written ``store`` of this same matrix (this fit, the same
            columns and tiles) and write only the tiles it lacks; a store of anything
            else is replaced as with ``overwrite``.

        Returns
        -------
        xarray.DataArray
            Dims ``(sample_i, sample_j)``, float32, named ``distance``.
        """
        self._check_fitted()
        leaves_a = self.leaves_ if X_a is None else self._route(X_a, "X_a")
        leaves_b = self.leaves_ if X_b is None else self._route(X_b, "X_b")
        none = np.zeros((1, 1), dtype=np.uint16)
        inputs = self._inputs(leaves_a, leaves_b, none, none, oob=False)
        what = "training rows" if X_b is None else "X_b"
        return self._matrix(inputs, False, store, tile_size, overwrite, {"columns": what},
                            complete=complete, record=attrs, resume=resume)  # fmt: skip

    def oob_distance(
        self, store: str | Path | None = None, *, tile_size: int = TILE_SIZE,
        overwrite: bool = False,
    ) -> xr.DataArray:  # fmt: skip
        """Out-of-bag learned distance between the training rows.

        Pair (i, j) is averaged over the trees in which neither row is in the
        bootstrap sample (the mean observed distance where there is none), so
        the matrix can be scored against the observed D without the optimism
        of the in-bag one.

        Parameters
        ----------
        store, tile_size, overwrite
            As :meth:`predict_distance`.

        Returns
        -------
        xarray.DataArray
            Symmetric, dims ``(sample_i, sample_j)``.
        """
        self._check_fitted()
        if not self.params_["bootstrap"]:
            raise ParameterError(
                "oob_distance needs out-of-bag rows, but the forest was fitted with "
                "bootstrap=False (every row is in every tree); refit with bootstrap=True"
            )
        inputs = self._inputs(self.leaves_, self.leaves_, self.inbag_, self.inbag_, oob=True)
        return self._matrix(inputs, True, store, tile_size, overwrite, {"columns": "oob"})

    def _inputs(self, leaves_a, leaves_b, inbag_a, inbag_b, *, oob: bool) -> TileInputs:
        self._check_own_rows()  # a stored fit's leaves: still this fit's
        f = self.forest_
        trees = f if isinstance(f, StoredForest) else (f.node_offset, f.leaf_start, f.leaf_members)
        return TileInputs(
            D=self.distances_, leaves_a=leaves_a, leaves_b=leaves_b, inbag_a=inbag_a,
            inbag_b=inbag_b, trees=trees, oob=oob, fallback=self.mean_distance_,
        )  # fmt: skip

    def _check_own_rows(self) -> None:
        """Refuse store-backed ``leaves_`` that a later fit on the same store replaced."""
        import zarr

        leaves = self.leaves_
        if isinstance(leaves, zarr.Array) and leaves.attrs.get("fit_id") != self.fit_id_:
            raise StoreError(
                f"the leaves of this SMERF in {leaves.store} belong to another fit (fit_id "
                f"{leaves.attrs.get('fit_id')!r}, this model {self.fit_id_!r}): a later fit on "
                "the same stored table replaced them; fit this model again"
            )

    def _matrix(
        self,
        inputs: TileInputs,
        symmetric: bool,
        store: str | Path | None,
        tile_size: int,
        overwrite: bool,
        attrs: dict[str, Any],
        *,
        complete: bool = True,
        record: dict[str, Any] | None = None,
        resume: bool = False,
    ) -> xr.DataArray:
        n, m = inputs.leaves_a.shape[0], inputs.leaves_b.shape[0]
        plan = TilePlan(n, m, C.check_tile_size(tile_size), symmetric=symmetric)
        attrs = {**attrs, "method": "smerf", "n_trees": int(self.seeds_.shape[0])}
        if store is None:
            check_in_memory(n, m, what="distance matrix", itemsize=4, store="distance.zarr")
            values = matrix_in_memory(plan, distance_tile, (inputs,))
            if isinstance(inputs.trees, StoredForest):
                forget_inputs()  # the stored trees this process read for the tiles
            coords = {"sample_i": np.arange(n), "sample_j": np.arange(m)}
            import xarray as xr  # on use: fitting and storing need none of it

            return xr.DataArray(
                values, dims=("sample_i", "sample_j"), coords=coords, name=DISTANCE, attrs=attrs
            )
        rs = self._half_written(store, attrs) if resume else None
        if rs is None:
            rs = RunStore.create(store, attrs={**self._provenance(), "matrix": attrs,
                                               **(record or {})},
                                 overwrite=overwrite or resume)  # fmt: skip
            rs.write_named("sample_i", np.arange(n, dtype=np.int64))
            rs.write_named("sample_j", np.arange(m, dtype=np.int64))
        with self._runner(self._distance_cells(n, m)) as runner:
            shared = runner.share(inputs)
            write_matrix(
                runner, rs, DISTANCE, plan, distance_tile, (shared,),
                identity={"fit_id": self.fit_id_, **attrs}, attrs=attrs,
                progress=self._report("tiles"),
            )  # fmt: skip
            if isinstance(inputs.trees, StoredForest):
                runner.everywhere(forget_inputs)  # the stored trees each worker read
        if complete:
            complete_output(rs)
        return rs.dataset()[DISTANCE]

    def _half_written(self, store: str | Path, attrs: dict[str, Any]) -> RunStore | None:
        """The half-written store of this fit's matrix ``attrs`` at ``store``, reopened
        to write its missing tiles (:func:`~distforest.forests.tiled.write_matrix` keeps
        the tiles it records done), or None."""
        if not location.exists(store):
            return None
        try:
            rs = RunStore.open(store, mode="r+")
        except StoreError:
            return None
        same = rs.attrs.get("fit_id") == self.fit_id_ and rs.attrs.get("matrix") == attrs
        if rs.is_complete or not same or DISTANCE not in rs.group:
            return None
        rs.mark_running()
        return rs

    # -- storing --------------------------------------------------------------

    _store_tag = ("method", "smerf")
    _store_requires = (TRAIN_DISTANCE,)
    _store_hint = "make one with `distforest smerf fit` or SMERF.save"
    _save_completes = True
    _load_requires_complete = True  # load(require_complete=False): a pipeline's unfinished store
    _default_tile_size = TILE_SIZE
    _stored_fields = (
        *INPUT_FIELDS,
        Field("task", encode=lambda model: "distance learning"),
        Field("n_trees", encode=lambda model: int(model.seeds_.shape[0])),
        Field("fit_id", "fit_id_"),
        # a model saved before the mean was recorded measures it once (_load_parts)
        Field("mean_distance", "mean_distance_", decode=float, default=UNSET, model_only=True),
    )
    _stored_arrays = (
        Array("feature_importances", "feature_importances_", rows=False),
        Array("leaves", "leaves_"),
        Array("inbag", "inbag_", dtype="uint16"),
    )

    def _check_saveable(self) -> None:
        self._check_fitted()
        inbag = self.inbag_  # a stored fit's was checked by its tasks
        if isinstance(inbag, np.ndarray) and inbag.max(initial=0) > np.iinfo(np.uint8).max:
            raise StoreError("a bootstrap count above 255 cannot be stored as uint8 inbag")

    def _save_parts(self, rs: RunStore, tile_size: int) -> None:
        """The flat trees under ``forest/`` (node columns, projections, leaf members,
        per-tree importances) and the observed training distances ``train_distance``
        (compressed, by blocks of ``tile_size`` rows), so that :meth:`load` predicts
        without the original D."""
        f = self.forest_
        if isinstance(f, StoredForest):  # in a store: copied from there a chunk at a time
            if f.path != rs.path:
                rs.copy_group("forest", RunStore.open(f.path).subgroup("forest"))
        else:
            rs.write_forest(f.nodes, np.diff(f.node_offset), self.seeds_)
            forest = RunStore(location.join(rs.path, "forest"), rs.subgroup("forest"))
            forest.write_array("proj_feature", f.proj_feature, ("projection",))
            forest.write_array("proj_weight", f.proj_weight, ("projection",))
            forest.write_array("leaf_members", f.leaf_members, ("member",),
                               chunks=(1 << 20,))  # fmt: skip
            forest.write_array("tree_importances", f.importances, ("tree", "feature"))
        n = int(self.n_samples_)
        dist = self.distances_
        arr = rs.create_matrix(TRAIN_DISTANCE, n, n, tile_size, dtype=str(dist.dtype))
        for start, block in distance_blocks(dist, tile_size):  # a file: never read whole
            arr[start : start + block.shape[0]] = block

    def _load_parts(self, rs: RunStore) -> None:
        f = rs.read_forest()
        self.seeds_ = f["seed"]
        n = int(self.n_samples_)
        # the model's own copy of D, read once by each process that predicts
        stored = StoredMatrix(rs.path, TRAIN_DISTANCE, (n, n))
        if hasattr(self, "mean_distance_"):
            self.distances_ = StoredDistances.of(stored)
        else:  # a model saved before the mean was recorded: measure it once
            checked = load_distances(stored, what=f"{rs.path}/{TRAIN_DISTANCE}")
            self.distances_, self.mean_distance_ = checked.values, checked.mean
        forest = K.FlatForest(
            nodes={c: f[c] for c in K.NODE_COLUMNS},
            node_offset=f["node_offset"],
            proj_feature=f["proj_feature"],
            proj_weight=f["proj_weight"],
            leaf_members=f["leaf_members"],
            importances=f["tree_importances"],
        )
        self._set_forest(forest, self.leaves_, self.inbag_)


def _route_chunk(X: np.ndarray, where: slice, forest: Any, what: str) -> np.ndarray:
    """A task: the leaves of one chunk of stored rows (refused with missing values)."""
    if np.isnan(X).any():
        row = where.start + int(np.flatnonzero(np.isnan(X).any(axis=1))[0])
        raise InputError(f"{what}: rows with missing values cannot be routed (row {row})")
    return K.apply(cast(K.FlatForest, forest), X)
