"""`XForest`: approximate random-projection trees as Dask tasks, beta-similarity as Zarr tiles.

A fitted forest is summarised by three O(n T) arrays: ``depth_[i, t]``,
``codes_[i, t, :]`` (the path code of row i in tree t, docs/design.md section 3)
and ``leaves_[i, t]``, plus the flat node arrays for routing new rows.  The
beta-similarity ``S[a, b] = mean_t beta ** (d_a + d_b - 2 d_lca)`` is written
tile by tile from the codes, or applied matrix-free through its exact
factorisation ``S = Phi Phi^T / T`` (:func:`distforest.kernels.betasim.phi_product`).
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, cast

import numpy as np
import zarr

from distforest import location
from distforest.errors import InputError, NotFittedError, StoreError
from distforest.forests import constraints as C
from distforest.forests._estimator import DaskEstimator
from distforest.forests.persistence import INPUT_FIELDS, Array, Field, Persisted
from distforest.forests.stored import is_dask_frame
from distforest.forests.tiled import matrix_in_memory, write_matrix
from distforest.forests.xforest_similarity import (
    SIMILARITY_NAMES,
    SimilarityProduct,
    arrays_tile,
    store_tile,
)
from distforest.forests.xforest_stored import NODE_COLUMNS, StoredNodes
from distforest.io import Table, load_table
from distforest.io.in_memory import check_in_memory
from distforest.kernels import betasim, rptrees
from distforest.parallel import tasks
from distforest.parallel.tiling import TilePlan
from distforest.store.inputs import StoredTable
from distforest.store.run_store import RunStore

if TYPE_CHECKING:
    import xarray as xr

logger = logging.getLogger("distforest")

#: ``progress(stage, done, total)``; stages are "fit", "gather" (a stored fit), "tiles"
#: and "product".
Progress = Callable[[str, int, int], None]


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
            Features without missing values.  A
            :class:`~distforest.store.inputs.StoredTable` is read by the tasks
            from its store, and the fitted rows' arrays are written there
            (:mod:`distforest.forests.xforest_stored`); a
            ``dask.dataframe.DataFrame`` is read by partitions into a temporary
            store of float64 rows first, never computed in this process: the
            same trees as in memory (from a table ingested as float32, the
            default of ``ingest``, the trees of those float32 values).
        y : ignored
            Accepted for scikit-learn compatibility; X-Forest is unsupervised.

        Returns
        -------
        self
        """
        params = self._validated()
        if isinstance(X, StoredTable):
            from distforest.forests.xforest_stored import fit_stored

            return fit_stored(self, X, params)
        if is_dask_frame(X):  # read by partitions on the workers, never computed here
            from distforest.forests.stored import fit_in_temporary_store
            from distforest.forests.xforest_stored import fit_stored

            return cast(XForest, fit_in_temporary_store(
                self, X, lambda table: fit_stored(self, table, params), allow_missing=False,
                dtype=np.float64,  # the float64 rows a fit in memory sees
            ))  # fmt: skip
        table = X if isinstance(X, Table) else load_table(X, allow_missing=False)
        if np.isnan(table.X).any():
            raise InputError(
                f"{table.source}: X-Forest needs complete data; impute the "
                "missing values first, e.g. `distforest impute`"
            )
        lo = table.X.min(axis=0) if params["normalize"] else np.zeros(table.n_features)
        scale = np.ptp(table.X, axis=0) if params["normalize"] else np.ones(table.n_features)
        scale = np.where(scale > 0, scale, 1.0)
        Xn = (table.X - lo) / scale
        n_trees = params["n_estimators"]
        entropy, seeds = tasks.plan_seeds(params["random_state"], n_trees)
        standard = params["mode"] == "standard"
        rptrees.warm_up()
        with self._runner(table.X.size) as runner:
            batch_size = params["batch_size"] or tasks.default_batch_size(n_trees, runner.threads())
            batches = tasks.plan_batches(n_trees, batch_size)
            logger.info(
                "growing %d X-Forest trees on %d x %d in %d tasks",
                n_trees,
                table.n_samples,
                table.n_features,
                len(batches),
            )
            X_future = runner.share(Xn)
            items = [
                (X_future, seeds[b], params["n_directions"], params["leaf_size"], standard)
                for b in batches
            ]
            parts: list[Any] = [None] * len(batches)
            for i, part in runner.run(
                rptrees.grow_batch,
                items,
                name="xforest-trees",
                progress=self._report("fit"),
            ):
                parts[i] = part
        words = max(p.codes.shape[2] for p in parts)
        codes = np.zeros((table.n_samples, n_trees, words), dtype=np.uint64)
        for b, part in zip(batches, parts, strict=True):
            codes[:, b, : part.codes.shape[2]] = part.codes
        self.leaves_ = np.concatenate([p.leaves for p in parts], axis=1)
        self.depth_ = np.concatenate([p.depth for p in parts], axis=1)
        self.codes_ = codes
        return self._fitted(table, params, parts, (lo, scale), (entropy, seeds))

    def _fitted(
        self,
        table: Table | StoredTable,
        params: dict[str, Any],
        parts: list[rptrees.GrownBatch],
        normalisation: tuple[np.ndarray, np.ndarray],
        seeding: tuple[int, np.ndarray],
    ) -> XForest:
        """Set the fitted attributes but the rows' arrays (``leaves_``, ``depth_``, ``codes_``)."""
        self.n_samples_ = table.n_samples
        self.n_features_in_ = table.n_features
        self.feature_names_in_ = table.feature_names
        self.feature_min_, self.feature_scale_ = normalisation
        self.random_state_, self.seeds_ = seeding
        self.nodes_ = np.concatenate([p.nodes for p in parts])
        self.thresholds_ = np.concatenate([p.thresholds for p in parts])
        self.node_offset_ = _offsets([p.node_counts for p in parts])
        self.directions_ = np.concatenate([p.directions for p in parts])
        self.direction_offset_ = _offsets([p.direction_counts for p in parts])
        self.input_ = {"source": table.source, "fingerprint": table.fingerprint()}
        self.fit_id_ = uuid.uuid4().hex
        self.params_ = params
        return self

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
        if rs.attrs.get("fit_id") != self.fit_id_:
            raise StoreError(
                f"store {rs.path!r} was written by another fit (fit_id "
                f"{rs.attrs.get('fit_id')!r}, this forest {self.fit_id_!r}); save this forest "
                "to a new store first"
            )
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
