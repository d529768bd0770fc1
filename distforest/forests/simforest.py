"""`SimilarityForestClassifier`: SimForest trees as Dask tasks, models as plain Zarr arrays.

A SimForest (Sathe & Aggarwal, KDD 2017) never sees features: only
similarities (or distances) between objects, from one of three sources:

- a **stored matrix** ``S`` (n x n; NumPy, ``.npy``, Zarr, xarray, Dask; NaN
  = not observed).  Tasks read the entries they need (rows of the pair
  objects, by symmetry), never the whole matrix; prediction reads only the
  pair objects' columns of a test x train matrix ``Q``;
- a **named measure** on feature rows (``metric="rbf"``, ``"cosine"``,
  ``"dot"``, ``"euclidean"``), computed on the fly as the trees ask;
- a **function** ``similarity(objects_a, objects_b) -> (len(a), len(b))``
  on arbitrary objects (strings, series), given to ``fit``.

The trees (:mod:`distforest.kernels.simtrees`) are grown by the fit driver
(:func:`~distforest.forests.fit_driver.fit_forest`), one task per batch, each
tree from its own seed: the forest is the same on any number of workers and
from any home of the objects.  The training objects' final nodes (``leaves_``)
and bootstrap counts (``inbag_``) feed the same proximity tiles, products and
applications as a proximity forest's (outliers, MDS).

Feature rows read as a table (:func:`~distforest.store.source.open_source`:
a file, a run store, a folder of parts, a dask DataFrame) take one path with a
named measure: the tasks take the source's rows (a store's ``input/X`` read once
per worker process, scaled once by a command's z-score), missing values and
the pair objects are read by chunk tasks, and the driver's sink keeps the final
nodes, bootstrap counts and trees where the rows are: rows in a store leave
``leaves``, ``inbag`` and ``forest/`` in that store (``leaves_``/``inbag_`` are
its Zarr arrays, ``trees_`` a :class:`StoredTrees` read by the prediction
tasks), so the driver never holds the rows, an ``(n, T)`` array or the trees.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, ClassVar, cast

import numpy as np
import xarray as xr
from sklearn.base import ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import column_or_1d, validate_data

from distforest import location
from distforest.errors import InputError, NotFittedError, ParameterError, StoreError
from distforest.forests import constraints as C
from distforest.forests._estimator import DaskEstimator
from distforest.forests.fit_driver import (
    ColumnSummary,
    ForestFit,
    GrownBatch,
    fit_forest,
    scaled_once,
    summarise_columns,
)
from distforest.forests.measures import Measure, parse_metric
from distforest.forests.persistence import UNSET, Array, Field, Persisted, numeric, plain_items
from distforest.forests.tiles import ARRAY_NAMES, proximity_in_memory, write_proximity
from distforest.io.in_memory import check_in_memory
from distforest.io.matrices import (
    StoredMatrix,
    check_entries,
    layout_advice,
    load_matrix,
    open_matrix,
)
from distforest.io.source import RowSource
from distforest.kernels.simfetch import fetch_columns, fetch_function, fetch_rows
from distforest.kernels.simtrees import (
    SimTree,
    SimTreeParams,
    apply_forest,
    grow_tree,
    predict_forest,
)
from distforest.parallel import tasks
from distforest.parallel.placement import cells_of
from distforest.store.inputs import per_fit
from distforest.store.run_store import RunStore, complete_output
from distforest.store.sink import open_sink
from distforest.store.source import opened_unless_held

logger = logging.getLogger("distforest")

#: Named measures SimForest computes on feature rows.
METRICS = ("precomputed", "rbf", "cosine", "dot", "euclidean")
#: Node arrays of a saved SimForest (``forest/`` group), in :class:`SimTree` field order.
NODE_FIELDS = (
    "left", "right", "pair_i", "pair_j", "threshold", "missing_go", "value",
    "n_node_samples", "depth",
)  # fmt: skip
#: Memory for one prediction task's block of a test x train matrix.
BLOCK_BYTES = 64 * 1024**2
#: The objects' arrays of a fit (the driver's per-row results): name -> (dtype, dims).
ROW_RESULTS = {"leaves": ("int32", ("sample", "tree")), "inbag": ("uint8", ("sample", "tree"))}

Similarity = Callable[[Any, Any], Any]
#: The per-row arrays of a loaded or stored tree (the forest's ``leaves_``/``inbag_`` hold them).
NO_ROWS = np.empty(0, dtype=np.int32)


def grow_simforest_batch(
    X: Any, y: np.ndarray, seeds: np.ndarray, *, function: Similarity | None,
    params: SimTreeParams, n_classes: int,
    scaling: tuple[np.ndarray, np.ndarray, str] | None = None,
) -> GrownBatch:  # fmt: skip
    """The fit driver's grower of a :class:`SimilarityForestClassifier`: the trees of
    ``seeds`` on ``X`` (S, a stored matrix, or the objects of ``function``: feature rows
    scaled as ``(X - mean) / scale`` with ``scaling`` ``(mean, scale, token)``, once per
    worker process and fit), the objects' final nodes and bootstrap counts, the trees'
    node counts, similarity evaluations and pair objects, and their nodes."""
    if function is None:
        fetch = fetch_rows(open_matrix(X))
    else:
        fetch = fetch_function(
            function, X if scaling is None else scaled_once(X, scaling[2], *scaling[:2])
        )
    trees = [grow_tree(fetch, y, int(seed), params, n_classes) for seed in seeds]
    return GrownBatch(
        rows={"leaves": np.stack([t.leaves for t in trees], axis=1).astype(np.int32),
              "inbag": np.stack([t.inbag for t in trees], axis=1).astype(np.uint8)},
        trees={"node_counts": np.array([t.n_nodes for t in trees], dtype=np.int64),
               "n_evaluations": np.array([t.n_evaluations for t in trees], dtype=np.int64),
               "pair_ids": _pair_ids(trees)},
        nodes=_node_arrays(trees),
    )  # fmt: skip


def _node_arrays(trees: list[SimTree]) -> dict[str, np.ndarray]:
    """The trees' node arrays, concatenated (the layout of ``forest/``)."""
    return {f: np.concatenate([getattr(t, f) for t in trees]) for f in NODE_FIELDS}


def _pair_ids(trees: list[SimTree]) -> np.ndarray:
    """The objects the trees' splits compare, sorted, once each."""
    ids = np.concatenate([np.concatenate([t.pair_i, t.pair_j]) for t in trees])
    return np.unique(ids[ids >= 0])


def _evaluations(trees: list[SimTree] | StoredTrees) -> list[int]:
    """The similarities each tree evaluated while growing."""
    if isinstance(trees, StoredTrees):
        return [int(v) for v in trees.n_evaluations]
    return [int(t.n_evaluations) for t in trees]


def _trees_of(nodes: dict[str, np.ndarray], n_evaluations: Any, missing: str,
              kind: str) -> list[SimTree]:  # fmt: skip
    """The trees of a store's ``forest/`` arrays (without their per-object arrays)."""
    offsets = nodes["node_offset"]
    trees = []
    for t in range(len(offsets) - 1):
        part = slice(int(offsets[t]), int(offsets[t + 1]))
        trees.append(SimTree(
            **{f: nodes[f][part] for f in NODE_FIELDS},
            inbag=NO_ROWS, leaves=NO_ROWS,  # the rows' arrays are leaves_ and inbag_
            n_evaluations=int(n_evaluations[t]), missing=missing, kind=kind,
        ))  # fmt: skip
    return trees


@dataclass(frozen=True)
class StoredTrees:
    """The trees of a SimForest fitted into a store (its ``forest/`` group), never held
    by the driver: the tasks that predict read them, once per worker process.

    ``fit_id`` names the fit: a later fit into the same store replaced them, and
    reading them then is refused.
    """

    path: str
    fit_id: str
    n_evaluations: np.ndarray
    missing: str
    kind: str

    def __len__(self) -> int:
        return len(self.n_evaluations)

    def __iter__(self) -> Iterator[SimTree]:
        """The trees, read from the store on use (here: not kept)."""
        return iter(self.read())

    def __getitem__(self, k: int) -> SimTree:
        return self.read()[k]

    def read(self) -> list[SimTree]:
        """The trees, read from the store (refused if a later fit replaced them)."""
        rs = RunStore.open(self.path)
        rs.check_fit(self.fit_id, f"the trees in {self.path!r} belong",
                     "a later fit on the same stored table replaced them; fit this forest "
                     "again")  # fmt: skip
        return _trees_of(rs.read_forest(), self.n_evaluations, self.missing, self.kind)

    def load(self) -> list[SimTree]:
        """The trees, read once per worker process and fit (the tasks that predict)."""
        return cast(list[SimTree], per_fit("simforest trees", self.path, self.fit_id, self.read))


@dataclass(frozen=True)
class _Objects:
    """The training objects of a fit not read from a table (a similarity matrix, the
    objects of a function, feature rows checked by scikit-learn), described as the fit
    driver asks of a source: their number, a name, numbered rows and a handle."""

    objects: Any
    n_samples: int
    n_features: int
    source: str
    store_path: None = None
    id_name: None = None

    def row_ids(self) -> None:
        """Rows are numbered."""
        return None

    def rows_handle(self, share: Any, dtype: Any = None) -> Any:
        """The objects as the tasks take them: shared, or a stored matrix they read."""
        return self.objects if isinstance(self.objects, StoredMatrix) else share(self.objects)


def _check_table(table: RowSource, measure: Measure, summary: ColumnSummary) -> None:
    """Refuse what a measure cannot compare: text columns, missing values (counted by the
    chunks' tasks)."""
    if table.categories:
        raise InputError(
            f"{table.source}: column(s) {sorted(table.categories)} hold text; a SimForest "
            "measure needs numeric features (drop them, or encode them as numbers)"
        )
    missing = {
        name: int(v) for name, v in zip(table.feature_names, summary.missing, strict=True) if v
    }
    if missing:
        raise InputError(
            f"{table.source} has missing values ({missing}); {measure.name} needs complete "
            "rows: impute them first (distforest impute) or drop those rows"
        )
    if not (np.isfinite(summary.low).all() and np.isfinite(summary.high).all()):
        raise InputError(
            f"{table.source} has infinite values; {measure.name} needs finite features: "
            "replace them (or drop those rows) first"
        )


def _pair_chunk(rows: Any, chunk: slice, ids: np.ndarray) -> np.ndarray:
    """A task: the rows ``ids`` (all within ``chunk``) of a source's rows handle."""
    return np.asarray(rows[chunk])[ids - chunk.start]


def _pair_rows(runner: Any, table: RowSource, rows: Any, ids: np.ndarray,
               summary: ColumnSummary, scaling: Any) -> np.ndarray:  # fmt: skip
    """The pair objects' rows (scaled as the tasks scale them), one task per chunk of the
    rows handle ``rows`` holding some: the driver never reads a stored table."""
    items = [(rows, chunk, ids[(ids >= chunk.start) & (ids < chunk.stop)])
             for chunk in table.chunks()]  # fmt: skip
    items = [item for item in items if item[2].size]
    parts: list[Any] = [None] * len(items)
    for i, part in runner.run(_pair_chunk, items, name="pair-objects"):
        parts[i] = part
    values = (np.concatenate(parts) if parts
              else np.empty((0, table.n_features), dtype=summary.dtype))  # fmt: skip
    if scaling is None:
        return values
    mean, scale = scaling
    return cast(np.ndarray, (values.astype(np.float64) - mean) / scale)


def _classes(table: RowSource) -> tuple[np.ndarray, np.ndarray]:
    """``(classes, codes)`` as the in-memory fit's ``np.unique`` gives them; text labels
    kept as codes of their sorted values are read a chunk at a time (never as labels)."""
    labels = table.target_classes()
    if labels is not None:
        classes = np.empty(len(labels), dtype=object)
        classes[:] = list(labels)
        return classes, table.read_codes()
    y = table.read_y()
    if y is None:
        raise InputError(
            f"{table.source} has no labels: give its label column (target='<column>', or y "
            "naming the column of a path) to fit a classifier"
        )
    return class_codes(y, table.n_samples)


def _test_block(
    per_block: Callable[..., np.ndarray],
    source: Any,
    function: Similarity | None,
    rows: slice,
    trees: list[SimTree] | StoredTrees,
    pair_ids: np.ndarray,
    pair_objects: Any,
    *extra: Any,
) -> np.ndarray:
    """One task: ``per_block(trees, fetch, n, *extra)`` for test objects ``rows``.

    ``fetch`` reads Q's rows ``rows``, or compares those test objects with
    the pair objects; ``per_block`` is :func:`predict_forest` (class
    probabilities) or :func:`apply_forest` (nodes).
    """
    if isinstance(trees, StoredTrees):
        trees = trees.load()
    if function is None:
        fetch = fetch_columns(open_matrix(source)[rows])
    else:
        fetch = fetch_function(function, pair_objects, source[rows], row_ids=pair_ids)
    return per_block(trees, fetch, rows.stop - rows.start, *extra)


def _checked_array(estimator: Any, X: Any, *, precomputed: bool, reset: bool) -> Any:
    """In-memory arrays through scikit-learn's checks (paths and Zarr go as they are)."""
    lazy = type(X).__module__.split(".")[0] in ("zarr", "xarray", "dask")
    if lazy or isinstance(X, str | Path | StoredMatrix):
        return X
    try:
        return validate_data(
            estimator, X, reset=reset, dtype=(np.float64, np.float32),
            ensure_all_finite="allow-nan" if precomputed else True,
        )  # fmt: skip
    except ValueError as exc:
        if not precomputed or "features" not in str(exc):
            raise
        raise InputError(
            f"{exc} A test x train matrix needs one column per training object, in training order."
        ) from None


def _as_objects(X: Any) -> Any:
    """Objects for a similarity function: numeric arrays as they are, anything else as objects."""
    if isinstance(X, np.ndarray):
        return X
    try:
        arr = np.asarray(X)
    except ValueError:
        arr = None
    if arr is None or arr.dtype == object or arr.ndim == 0:
        arr = np.empty(len(X), dtype=object)
        arr[:] = list(X)
    return arr


def _measure_spec(measure: Measure | str | None) -> str | dict[str, Any]:
    """A measure as saved: its spec, or ``"precomputed"`` / ``"function"``."""
    if isinstance(measure, Measure):
        return measure.spec
    return "precomputed" if measure is None else "function"


def _measure_of(spec: Any) -> Measure | str | None:
    """The measure of a saved spec (a function is named ``"function"``, not code)."""
    if spec == "precomputed":
        return None
    return "function" if spec == "function" else parse_metric(spec)


def class_codes(y: Any, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``(classes, codes)`` of ``n`` labels (scikit-learn's checks, at least two classes)."""
    check_classification_targets(y)
    labels = column_or_1d(y, warn=True)
    if labels.shape[0] != n:
        raise InputError(
            f"y has {labels.shape[0]} labels but there are {n} objects; give one label per "
            "object, in the order of the matrix rows"
        )
    classes, codes = np.unique(labels, return_inverse=True)
    if classes.shape[0] < 2:
        raise InputError(f"y has one class only ({classes[0]!r}); a classifier needs at least two")
    return classes, codes


class SimilarityForestClassifier(Persisted, ClassifierMixin, DaskEstimator):
    """A classification forest grown from pairwise similarities (or distances) only.

    Parameters
    ----------
    n_estimators : int, default 100
        Number of trees.
    n_pairs : int, default 1
        Pairs ``(O_i, O_j)`` of different classes tried at each node (the paper's r).
    kind : {"similarity", "distance"}, default "similarity"
        What a precomputed matrix or a function gives: objects are ordered by
        ``S_kj - S_ki`` or by ``D_ki**2 - D_kj**2``.  A named ``metric`` sets
        its own kind (``euclidean`` is a distance, the others similarities).
        The paper turns a full distance matrix into similarities by double
        centring, ``S = -1/2 J D**2 J``; then ``S_kj - S_ki`` is
        ``(D_ki**2 - D_kj**2) / 2`` plus a term that is the same for every
        object k, so both order the objects (and split them) alike, and
        ``D**2`` needs no full matrix (entries may be missing).
    max_depth : int or None, default None
        None grows every tree to purity.
    min_samples_leaf : int, default 1
        Smallest in-bag weight of a child.
    missing : {"stay", "both", "larger"}, default "stay"
        An object whose needed similarity is missing: ``stay`` stops at the
        node and is answered by its class distribution (the paper);
        ``both`` trains like ``stay`` but predicts down both children,
        weighted by their training sizes; ``larger`` goes to the larger child.
    bootstrap : bool, default True
        Grow each tree on a bootstrap sample (the paper does not say; with
        ``False`` every tree sees every object once).
    metric : {"precomputed", "rbf", "cosine", "dot", "euclidean"}, default "precomputed"
        ``precomputed``: ``fit(S, y)`` takes the n x n matrix and
        ``predict(Q)`` the n_test x n_train one.  Otherwise ``X`` are feature
        rows and the measure is computed on the fly (``fit`` may also take a
        ``similarity=`` function or name, which takes precedence).
    metric_params : dict or None, default None
        ``{"gamma": g}`` for ``rbf`` (default ``1 / n_features``).
    batch_size : int or None, default None
        Trees per Dask task; None gives about four tasks per worker thread.
    tile_size : int, default 2048
        Rows and columns of one proximity tile.
    random_state : int or None, default 0
        Seed of the forest: the same value gives the same trees on any cluster.

    Attributes
    ----------
    classes_ : ndarray
        Labels as given to ``fit``.
    trees_ : list of SimTree, or StoredTrees
        The trees' nodes (their own ``leaves``/``inbag`` are empty after
        :meth:`load`: see ``leaves_``/``inbag_``); after a fit from a stored
        table, a :class:`StoredTrees` (the store's ``forest/``, read by the
        tasks that predict).
    leaves_, inbag_ : ndarray, shape (n_samples, n_estimators)
        Final node and bootstrap count of every training object in every tree
        (the store's Zarr arrays, read on use, after a fit from a stored table).
    n_similarity_evaluations_ : int
        Similarities requested while growing all trees.
    n_samples_ : int
    """

    #: Made from the one declaration, :data:`~distforest.forests.constraints.SIMFOREST_PARAMETERS`.
    _parameter_constraints: ClassVar[dict[str, C.Constraint]] = {
        **{name: p.constraint for name, p in C.SIMFOREST_PARAMETERS.items()},
        "metric": C.Choice(METRICS),
        "metric_params": C.Checked("by parse_metric"),
    }

    def __init__(
        self,
        n_estimators: int = 100,
        n_pairs: int = 1,
        kind: str = "similarity",
        max_depth: int | None = None,
        min_samples_leaf: int = 1,
        missing: str = "stay",
        bootstrap: bool = True,
        metric: str = "precomputed",
        metric_params: dict[str, Any] | None = None,
        batch_size: int | None = None,
        tile_size: int = 2048,
        random_state: int | None = 0,
    ) -> None:
        self.n_estimators = n_estimators
        self.n_pairs = n_pairs
        self.kind = kind
        self.max_depth = max_depth
        self.min_samples_leaf = min_samples_leaf
        self.missing = missing
        self.bootstrap = bootstrap
        self.metric = metric
        self.metric_params = metric_params
        self.batch_size = batch_size
        self.tile_size = tile_size
        self.random_state = random_state

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.pairwise = self.metric == "precomputed"
        tags.input_tags.allow_nan = self.metric == "precomputed"
        return tags

    # -- fitting ------------------------------------------------------------

    def _measure(self, similarity: Any, params: dict[str, Any]) -> Measure | Similarity | None:
        """The fitted measure, the user's function, or None for a precomputed matrix."""
        if similarity is not None and not isinstance(similarity, str):
            if not callable(similarity):
                raise ParameterError(
                    f"similarity must be a function f(objects_a, objects_b) -> array or a "
                    f"measure name ({', '.join(METRICS[1:])}), got {similarity!r}"
                )
            return similarity
        name = similarity if similarity is not None else params["metric"]
        if name == "precomputed":
            return None
        C.check_choice("metric", name, METRICS[1:])
        return parse_metric(name, params["metric_params"])

    def fit(self, X: Any, y: Any = None, similarity: Any = None) -> SimilarityForestClassifier:
        """Grow the trees, one Dask task per batch.

        Parameters
        ----------
        X : array-like, path, Zarr, xarray or Dask array, StoredTable or dask DataFrame
            With ``metric="precomputed"`` and no ``similarity``: the n x n
            similarity (or distance) matrix, NaN where not observed.
            Otherwise the n objects (feature rows for a named measure, any
            sequence for a function).  With a named measure, feature rows
            not given in memory are opened by
            :func:`~distforest.store.source.open_source`: a file read whole
            (CSV, Parquet, a ``memory://`` URL...) is fitted as its rows in
            float64; a :class:`~distforest.store.inputs.StoredTable` (labels
            in its ``input/y``), a run store, a glob, a folder of parts, a
            large file or a ``dask.dataframe.DataFrame`` (``y`` names the
            label column) is read by the tasks, never whole by this process
            (float64 rows, float32 from a frame of float32 columns): the same
            trees, and ``leaves_``/``inbag_`` are the store's Zarr arrays.
        y : array-like of shape (n,), or str
            Class labels, at least two classes; or the label column of ``X``
            when that is a path or a dask DataFrame.
        similarity : callable or str, optional
            ``f(objects_a, objects_b) -> (len(a), len(b))`` array, or a name
            among ``rbf``, ``cosine``, ``dot``, ``euclidean``.

        Returns
        -------
        self
        """
        if isinstance(X, RowSource):  # a table read already: feature rows with their labels
            return self.fit_table(X, y, similarity)
        params = self._validated()
        measure = self._measure(similarity, params)
        if isinstance(measure, Measure):  # feature rows: opened unless held here
            with opened_unless_held(X, y, owner=self, dtype=None) as table:
                if table is not None:
                    return self.fit_table(table, None, similarity)
        kind = params["kind"]
        objects: Any = None
        if measure is None:
            X = _checked_array(self, X, precomputed=True, reset=True)
            source: Any = load_matrix(X, "the similarity matrix")
            check_entries(source, "the similarity matrix", square=True)
            advice = layout_advice(source, "the similarity matrix")
            if advice is not None:
                logger.warning(advice)
            n = source.shape[0]
        elif isinstance(measure, Measure):
            objects = _checked_array(self, X, precomputed=False, reset=True)
            measure = measure.fitted(objects)
            kind = measure.kind
            source, n = objects, objects.shape[0]
        else:
            objects = source = _as_objects(X)
            n = len(source)
        classes, codes = class_codes(y, n)
        function = cast(
            "Similarity | None", None if measure is None else getattr(measure, "values", measure)
        )
        shape: tuple[int, ...] = tuple(getattr(source, "shape", (n,)))
        what = _Objects(source, n, int(shape[1]) if len(shape) == 2 else 1,
                        "the similarity matrix" if measure is None else "the objects")  # fmt: skip
        with self._runner(cells_of(source)) as runner:
            fit = self._grow(runner, params, what, what.rows_handle(runner.share), function,
                             codes, len(classes), kind)  # fmt: skip
        self._take_fit(fit, classes, codes, measure, kind, params)
        self.pair_objects_ = None if objects is None else objects[self.pair_ids_]
        self._record_store(fit)
        return self

    def fit_table(
        self,
        table: RowSource,
        y: Any = None,
        similarity: Any = None,
        *,
        scaling: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> SimilarityForestClassifier:
        """Fit on the feature rows and labels of a source with a named measure (the fit of a
        table given to :meth:`fit`: rows read by partitions, a run store, a file read whole).

        The fit driver's tasks take the source's rows (a store's ``input/X``: read once
        per worker process, scaled once when ``scaling`` is given) and the objects'
        final nodes, bootstrap counts and trees' nodes go to its sink: a store's rows
        leave them in that store, which then holds what :meth:`save` writes
        (``leaves_``/``inbag_`` are its Zarr arrays and ``trees_`` a
        :class:`StoredTrees` that the prediction tasks read); this process never
        holds such rows, an ``(n, T)`` array or the trees.

        Parameters
        ----------
        table : RowSource
            Feature rows and their labels (:func:`~distforest.store.source.open_source`).
        y : None
            The labels are the table's; giving them again is refused.
        similarity : str, optional
            A measure name, as for :meth:`fit`.
        scaling : (mean, scale), optional
            Features scaled as ``(X - mean) / scale`` in float64 before the
            measure (a command's ``--normalize zscore``).

        Returns
        -------
        self
        """
        if y is not None:
            raise InputError(
                f"{table.source} was read with its labels ({table.target_name!r}); do not pass "
                "y as well"
            )
        params = self._validated()
        if callable(similarity):
            raise ParameterError(
                "a table of feature rows is fitted with a named measure (metric='rbf', "
                "'cosine', 'dot' or 'euclidean'), not a similarity function: load the objects "
                "to use a function"
            )
        measure = self._measure(similarity, params)
        if not isinstance(measure, Measure):
            raise ParameterError(
                f"{table.source} holds feature rows, not a similarity matrix: give "
                "metric='rbf', 'cosine', 'dot' or 'euclidean'"
            )
        classes, codes = _classes(table)
        measure = measure.fitted(np.empty((0, table.n_features)))  # rbf: gamma from the width
        scaled = None if scaling is None else (*scaling, uuid.uuid4().hex)
        with self._runner(table.n_samples * table.n_features) as runner:
            rows = table.rows_handle(runner.share, np.float64)
            summary = summarise_columns(runner, table, rows)
            _check_table(table, measure, summary)
            fit = self._grow(runner, params, table, rows, measure.values, codes, len(classes),
                             measure.kind, scaled)  # fmt: skip
            self._take_fit(fit, classes, codes, measure, measure.kind, params)
            self.pair_objects_ = _pair_rows(runner, table, rows, self.pair_ids_, summary,
                                            scaling)  # fmt: skip
        self.n_features_in_ = table.n_features
        self._record_store(fit)
        return self

    def _grow(
        self,
        runner: Any,
        params: dict[str, Any],
        source: Any,
        rows: Any,
        function: Similarity | None,
        codes: np.ndarray,
        n_classes: int,
        kind: str,
        scaling: tuple[np.ndarray, np.ndarray, str] | None = None,
    ) -> ForestFit:
        """The one growing of the trees, on the fit driver: ``rows`` (the source's handle)
        are S, a stored matrix the tasks read, or the objects of ``function``; the
        objects' final nodes and bootstrap counts and the trees' nodes go to the driver's
        sink (the rows' store, else memory by the in-memory rule)."""
        n_trees = params["n_estimators"]
        grower = partial(grow_simforest_batch, function=function, scaling=scaling,
                         params=self._tree_params(params, kind), n_classes=n_classes)  # fmt: skip
        sink = open_sink(source.n_samples, n_trees, store=source.store_path,
                         chunk_rows=params["tile_size"], owner=self)  # fmt: skip
        return fit_forest(
            source, grower, y=codes.astype(np.int64), n_trees=n_trees,
            random_state=params["random_state"],
            batch_size=params["batch_size"] or tasks.default_batch_size(n_trees, runner.threads()),
            runner=runner, sink=sink, row_results=ROW_RESULTS, rows=rows,
            progress=self._report("fit"), join_progress=self._report("leaves"),
        )  # fmt: skip

    def _take_fit(self, fit: ForestFit, classes: np.ndarray, codes: np.ndarray, measure: Any,
                  kind: str, params: dict[str, Any]) -> None:  # fmt: skip
        """Set the fitted attributes once, from the fit driver's result: the trees from the
        joined nodes, or (a fit into a store) :class:`StoredTrees` read there on use."""
        missing = self._tree_params(params, kind).missing
        evaluations = fit.trees["n_evaluations"]
        trees: list[SimTree] | StoredTrees
        if fit.store is None:
            assert fit.nodes is not None  # kept by the driver
            offsets = np.concatenate([[0], np.cumsum(fit.trees["node_counts"])])
            trees = _trees_of({**fit.nodes, "node_offset": offsets}, evaluations, missing, kind)
        else:
            trees = StoredTrees(fit.store, fit.fit_id, evaluations, missing, kind)
        self.random_state_, self.seeds_, self.fit_id_ = fit.random_state, fit.seeds, fit.fit_id
        self._set_fitted(trees, classes, codes, measure, None, kind, params,
                         rows=(fit.rows["leaves"], fit.rows["inbag"]))  # fmt: skip
        self.pair_ids_ = np.unique(fit.trees["pair_ids"])

    def _record_store(self, fit: ForestFit) -> None:
        """A fit into a store (the rows', or a temporary one): the store becomes this
        model's (what save writes), so that its matrices go there."""
        if fit.store is not None:
            rs = RunStore.open(fit.store, mode="r+")
            self._write_arrays(rs, self.params_["tile_size"],
                               ("target", "pair_ids", "pair_objects"))  # fmt: skip
            rs.update_attrs(**self._provenance(model=True), store_input=True)

    @staticmethod
    def _tree_params(params: dict[str, Any], kind: str) -> SimTreeParams:
        """The trees' settings (the same whatever the input's home)."""
        return SimTreeParams(
            n_pairs=params["n_pairs"], kind=kind, max_depth=params["max_depth"],
            min_samples_leaf=params["min_samples_leaf"], missing=params["missing"],
            bootstrap=params["bootstrap"],
        )  # fmt: skip

    def _set_fitted(
        self,
        trees: list[SimTree] | StoredTrees,
        classes: np.ndarray,
        codes: np.ndarray,
        measure: Any,
        objects: Any,
        kind: str,
        params: dict[str, Any],
        rows: tuple[Any, Any],
    ) -> None:
        """The fitted attributes; ``rows``: ``(leaves, inbag)`` (arrays, or a store's Zarr
        arrays)."""
        self.trees_ = trees
        self.classes_ = classes
        self.y_ = codes.astype(np.int64)
        self.task_ = "classification"
        self.n_samples_ = int(codes.shape[0])
        self.kind_ = kind
        self.measure_ = measure
        self.leaves_, self.inbag_ = rows
        self.n_similarity_evaluations_ = sum(_evaluations(trees))
        if not isinstance(trees, StoredTrees):  # (a stored fit's: from its tasks' summaries)
            self.pair_ids_ = _pair_ids(trees)
        self.pair_objects_ = None if objects is None else objects[self.pair_ids_]
        self.params_ = params

    # -- prediction ---------------------------------------------------------

    def _check_fitted(self) -> None:
        if not hasattr(self, "trees_"):
            raise NotFittedError(
                "this SimilarityForestClassifier is not fitted yet; call fit(S, y) first"
            )

    def predict_proba(self, X: Any, similarity: Any = None) -> np.ndarray:
        """Class probabilities: the trees' node distributions, averaged.

        Parameters
        ----------
        X : array-like, path, Zarr, xarray or Dask array
            For a precomputed forest: the n_test x n_train similarities
            (NaN allowed; only the pair objects' columns are read).
            Otherwise the test objects.
        similarity : callable, optional
            The training function again, for a forest fitted with one and
            loaded from a store (functions are not saved).

        Returns
        -------
        ndarray of shape (n_test, n_classes)
        """
        self._check_fitted()
        return self._over_test_blocks(
            predict_forest, X, similarity, (self.params_["missing"],),
            np.empty((0, len(self.classes_))), "predict",
        )  # fmt: skip

    def apply(self, X: Any, similarity: Any = None) -> np.ndarray:
        """Node where each test object ends in each tree (the traversal of prediction).

        Node ids are those of :attr:`leaves_`: a training object given again
        ends where training sent it (in bag or out of bag).  An object held
        by a missing similarity at a node that keeps it (``missing="stay"``,
        and ``"both"``, which trains like ``"stay"``) ends at that inner
        node; with ``"both"``, :meth:`predict_proba` spreads such an object
        over both children, but ``apply`` gives the one node where it
        stopped, as :attr:`leaves_` does.  ``"larger"`` follows the larger
        child.  Runs as Dask tasks over test-row blocks, like prediction.

        Parameters
        ----------
        X, similarity :
            As for :meth:`predict_proba`.

        Returns
        -------
        ndarray of int32, shape (n_test, n_estimators)
        """
        self._check_fitted()
        empty = np.empty((0, len(self.trees_)), dtype=np.int32)
        return self._over_test_blocks(apply_forest, X, similarity, (), empty, "apply")

    def _over_test_blocks(
        self,
        per_block: Callable[..., np.ndarray],
        X: Any,
        similarity: Any,
        extra: tuple[Any, ...],
        like: np.ndarray,
        stage: str,
    ) -> np.ndarray:
        """``per_block(trees, fetch, n, *extra)`` over test-row blocks, one task each.

        The result has one row per test object and the columns and dtype of ``like``.
        """
        source, function, n, per_row = self._test_source(X, similarity)
        rows = max(1, min(n, BLOCK_BYTES // (8 * max(1, per_row))))
        blocks = [slice(s, min(s + rows, n)) for s in range(0, n, rows)]
        out = np.empty((n, like.shape[1]), dtype=like.dtype)
        with self._runner(cells_of(source)) as runner:
            shared = source if isinstance(source, StoredMatrix) else runner.share(source)
            # a stored fit's trees: the tasks read them from the store
            trees = (
                self.trees_ if isinstance(self.trees_, StoredTrees) else runner.share(self.trees_)
            )
            items = [(per_block, shared, function, b, trees, self.pair_ids_, self.pair_objects_,
                      *extra) for b in blocks]  # fmt: skip
            for i, part in runner.run(_test_block, items, name=f"simforest-{stage}",
                                      progress=self._report(stage)):  # fmt: skip
                out[blocks[i]] = part
        return out

    def _test_source(self, X: Any, similarity: Any) -> tuple[Any, Similarity | None, int, int]:
        """What test blocks read: (Q or objects, function or None, n_test, values per row)."""
        function: Similarity | None
        if self.measure_ is None and similarity is None:
            X = _checked_array(self, X, precomputed=True, reset=False)
            source: Any = load_matrix(X, "the test x train matrix")
            check_entries(source, "the test x train matrix", square=False,
                          n_columns=self.n_samples_)  # fmt: skip
            return source, None, source.shape[0], len(self.pair_ids_)
        function = similarity if similarity is not None else self.measure_
        if function is None or isinstance(function, str):
            raise ParameterError(
                "this forest was fitted with a similarity function, which is not saved; "
                "pass it again: predict(objects, similarity=f)"
            )
        function = getattr(function, "values", function)
        if isinstance(self.measure_, Measure):
            source = _checked_array(self, X, precomputed=False, reset=False)
        else:
            source = _as_objects(X)
        if self.pair_objects_ is None:
            raise ParameterError(
                "this forest holds no pair objects (they were not numeric and could not "
                "be saved): fit it again in this session to predict with a function"
            )
        return source, function, len(source), 1

    def predict(self, X: Any, similarity: Any = None) -> np.ndarray:
        """The most probable class of each test object (labels as given to ``fit``)."""
        self._check_fitted()
        return self.classes_[np.argmax(self.predict_proba(X, similarity), axis=1)]

    # -- proximities ---------------------------------------------------------

    def proximity(
        self,
        method: str = "original",
        store: str | Path | None = None,
        *,
        overwrite: bool = False,
        max_in_memory: int | None = None,
        tile_size: int | None = None,
        complete: bool = True,
    ) -> xr.DataArray:
        """Proximity of the training objects: the fraction of trees where they end together.

        An object held at an inner node by a missing similarity (``missing="stay"``)
        ends there; out-of-bag objects are routed too, so every object has a
        final node in every tree.

        Parameters
        ----------
        method : {"original", "oob", "rfgap"}
            As for :meth:`distforest.ProximityForest.proximity`.
        store : str, Path or None
            Zarr store to write tile by tile (one Dask task per tile); None
            returns a small in-memory matrix.
        overwrite : bool
            Replace an existing distforest store.
        max_in_memory : int, optional
            Without a store, refuse matrices of more than ``max_in_memory ** 2``
            cells; default the ``distforest.in-memory-cells`` setting
            (:mod:`distforest.io.in_memory`, 100,000,000 cells).
        tile_size : int, optional
            Rows and columns of one tile (default: the forest's ``tile_size``).
        complete : bool
            Mark the store complete afterwards (a pipeline marks it when all
            its stages are done).  A model store of this fit takes the matrix
            next to the model.

        Returns
        -------
        xarray.DataArray
            Dims ``(sample_i, sample_j)``, float32; lazy when ``store`` is given.
        """
        self._check_fitted()
        C.check_choice("method", method, C.PROXIMITY_METHODS)
        if method in C.OUT_OF_BAG_METHODS and not self.params_["bootstrap"]:
            raise ParameterError(
                f"method={method!r} needs out-of-bag objects; refit with bootstrap=True"
            )
        n = self.n_samples_
        tile = self.params_["tile_size"] if tile_size is None else C.check_tile_size(tile_size)
        if store is None:
            check_in_memory(n, n, what="proximity", itemsize=4, store="proximity.zarr",
                            max_in_memory=max_in_memory)  # fmt: skip
            # (a stored fit's leaves are Zarr arrays: a matrix this small has small ones)
            leaves, inbag = np.asarray(self.leaves_), np.asarray(self.inbag_)
            values = proximity_in_memory(leaves, inbag, method, tile)
            coords = {"sample_i": np.arange(n), "sample_j": np.arange(n)}
            return xr.DataArray(values, dims=("sample_i", "sample_j"), coords=coords,
                                name=ARRAY_NAMES[method], attrs={"method": method})  # fmt: skip
        rs = self._proximity_store(store, overwrite)
        with self._runner(self._fitted_cells()) as runner:
            write_proximity(
                runner, rs, method, tile, identity={"fit_id": self.fit_id_},
                attrs={"n_trees": len(self.trees_)}, progress=self._report("tiles"),
            )  # fmt: skip
        if complete:
            complete_output(rs)
        return rs.dataset()[ARRAY_NAMES[method]]

    def _proximity_store(self, store: str | Path, overwrite: bool) -> RunStore:
        path = store
        if location.exists(path):
            with contextlib.suppress(StoreError):
                rs = RunStore.open(path, mode="r+")
                if rs.attrs.get("fit_id") == self.fit_id_ and "leaves" in rs.group:
                    rs.mark_running()
                    return rs
        rs = RunStore.create(path, attrs=self._provenance(), overwrite=overwrite)
        self._write_rows(rs)
        return rs

    # -- storing ------------------------------------------------------------

    _store_tag = ("model", "simforest")
    _store_requires = ("forest",)
    _store_hint = "write one with `distforest simforest fit ... --out model.zarr`"
    _unstored_params = ("metric_params",)
    _save_completes = True
    _stored_fields = (
        Field("fit_id", "fit_id_"),
        Field("kind", "kind_"),
        # a function is not saved: pass it again to predict
        Field("measure", "measure_", encode=_measure_spec, decode=_measure_of),
        Field("classes", "classes_", encode=plain_items, decode=np.asarray),
        Field("n_samples", "n_samples_", decode=int),
        Field("n_features", "n_features_in_", decode=int, default=UNSET),
        Field("n_evaluations", encode=lambda f: _evaluations(f.trees_)),
    )
    _stored_arrays = (
        Array("leaves", "leaves_"),
        Array("inbag", "inbag_"),
        Array("target", "y_", rows=False),
        Array("pair_ids", "pair_ids_", rows=False),
        # the pair objects' features, for a named measure: all that prediction needs
        Array("pair_objects", "pair_objects_", rows=False, optional=True, keep=numeric),
    )

    def _write_rows(self, rs: RunStore) -> None:
        rs.write_coordinates(self.n_samples_, len(self.trees_))
        self._write_arrays(rs, self.params_["tile_size"], ("leaves", "inbag", "target"))

    def _save_parts(self, rs: RunStore, tile_size: int) -> None:
        trees = self.trees_
        if isinstance(trees, StoredTrees):  # in a store: copied from there a chunk at a time
            if trees.path != rs.path:
                rs.copy_group("forest", RunStore.open(trees.path).subgroup("forest"))
            return
        rs.write_forest(_node_arrays(trees), np.array([t.n_nodes for t in trees]), self.seeds_)

    def _load_parts(self, rs: RunStore) -> None:
        nodes = rs.read_forest()
        self.seeds_ = nodes["seed"]
        trees = _trees_of(nodes, rs.attrs["n_evaluations"], self.params_["missing"], self.kind_)
        pair_ids, objects = self.pair_ids_, self.pair_objects_
        self._set_fitted(trees, self.classes_, self.y_, self.measure_, None, self.kind_,
                         self.params_, rows=(self.leaves_, self.inbag_))  # fmt: skip
        self.pair_ids_, self.pair_objects_ = pair_ids, objects
