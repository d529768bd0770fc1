"""Similarity-based learning: k-nearest-neighbour classification and regression.

:class:`KNNClassifier` (majority or distance-weighted vote) and
:class:`KNNRegressor` (mean or distance-weighted mean) follow the
scikit-learn estimator API, so they work with ``cross_val_score``,
``GridSearchCV`` and ``SequentialFeatureSelector``.  The metric is any
measure of :mod:`distforest.forests.measures`, a forest similarity
(``"rf-proximity"``, ``"rfgap"``, ``"beta"``, ``"simforest"``: a SimForest,
for classification only; ``"smerf"``: the distance a SMERF learns from the
training rows' observed distances), an object with
``fit``/``cross_similarity``, or a function ``distance(A, B)``.

Distance weighting uses ``w = 1 / d^2``.  When a query has neighbours at
distance 0 (exact matches), only those vote, each with weight 1, since
``1 / 0`` would swamp everything else.  Similarities s become distances
``1 - s``; ``s = 1`` is an exact match.

Row weights (``fit(X, y, sample_weight=w)``) grow the forest of ``"rf-proximity"``
and ``"rfgap"``; with a measure or a distance function, whose neighbours do not
depend on them, they multiply each neighbour's vote (a weighted k-NN).

Saved models (:func:`save_model`, :func:`load_model`) are plain Zarr arrays and
JSON attributes: loading never runs code (no pickle).  A model with a forest
metric keeps its forest in the group :data:`FOREST_GROUP` of the model store,
in the forest's own layout.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from sklearn.base import ClassifierMixin, RegressorMixin, clone, is_classifier
from sklearn.utils.multiclass import type_of_target
from sklearn.utils.validation import column_or_1d

from distforest import location
from distforest.errors import InputError, NotFittedError, ParameterError, StoreError
from distforest.forests import constraints as C
from distforest.forests._estimator import DaskEstimator
from distforest.forests.forest_similarity import (
    FunctionDistance,
    load_similarity,
    make_similarity,
)
from distforest.forests.measures import (
    Measure,
    check_values,
    make_scaler,
)
from distforest.forests.neighbors import Neighbors, search
from distforest.forests.pairwise import as_matrix
from distforest.parallel.execution import use_execution
from distforest.store.inputs import StoredRows
from distforest.store.run_store import RunStore, complete_output
from distforest.store.schema import INPUT_GROUP

WEIGHTS = ("uniform", "distance")
SELECTIONS = ("forward", "backward")
MODEL_SCHEMA = 1
#: Group of a model store holding the forest of a forest metric.
FOREST_GROUP = "metric_forest"
#: Every forest metric, with the type of the rows its forest grows from (a model's rows in
#: a store): the one the forest's fit converts an array to (a ProximityForest's trees read
#: float32; the beta, simforest and smerf similarities give their forest float64 rows).
STORED_FORESTS: dict[str, type[np.floating[Any]]] = {
    "rf-proximity": np.float32,
    "rfgap": np.float32,
    "beta": np.float64,
    "simforest": np.float64,
    "smerf": np.float64,
}


def vote_weights(distances: np.ndarray, weights: str) -> np.ndarray:
    """Weight of each neighbour: 1, or ``1 / d^2`` with exact matches taking all the weight.

    Parameters
    ----------
    distances : ndarray, shape (n, k)
    weights : {"uniform", "distance"}

    Returns
    -------
    ndarray of float64, shape (n, k)
    """
    if weights == "uniform":
        return np.ones_like(distances, dtype=np.float64)
    d = np.asarray(distances, dtype=np.float64)
    exact = d <= 0.0
    w = np.zeros_like(d)
    np.divide(1.0, d * d, out=w, where=~exact)
    has_exact = exact.any(axis=1)
    w[has_exact] = exact[has_exact].astype(np.float64)
    return w


class KNNBase(DaskEstimator):
    """Shared parameters, fitting and neighbour search of the k-NN estimators.

    Parameters
    ----------
    n_neighbors : int, default 5
        k, the number of neighbours that vote.
    weights : {"uniform", "distance"}, default "uniform"
        Equal votes, or ``1 / d^2`` (exact matches only, when there are any).
    metric : str, object or callable, default "euclidean"
        A measure name (``"euclidean"``, ``"manhattan"``, ``"minkowski:3"``,
        ``"chebyshev"``, ``"mahalanobis"``, ``"cosine"``, ``"rbf"``,
        ``"jaccard"``, ``"russell-rao"``, ``"sokal-michener"``), a forest
        similarity (``"rf-proximity"``, ``"rfgap"``, ``"beta"``, and for
        :class:`KNNClassifier` ``"simforest"``), ``"smerf"`` (a SMERF's
        learned distance), an object with ``fit(X, y)`` and
        ``cross_similarity(X_query)``, or a function ``distance(A, B)``.
    metric_params : dict, optional
        ``p``, ``gamma`` or ``VI`` for the measure; ``{"distances": D}`` for
        ``"smerf"``: the observed n x n distances of the training rows (NaN =
        not observed) or a path to them (not saved with the model: the SMERF
        keeps its own copy).
    normalize : {None, "range", "zscore"}, default None
        Rescale features with a scikit-learn scaler fitted on the training rows.
    feature_range : (low, high), default (0, 1)
        Interval of ``normalize="range"``.
    algorithm : {"auto", "kd_tree", "ball_tree", "brute"}, default "auto"
        ``auto``: k-d tree for Minkowski distances on at most 15 features,
        brute-force tiles otherwise.
    select : {None, "forward", "backward"}, default None
        Sequential feature selection (scikit-learn's ``SequentialFeatureSelector``,
        cross-validated with this estimator) before fitting.
    n_features_to_select : "auto", int or float, default "auto"
        Passed to the selector (``auto`` with no tolerance: half the features).
    select_cv : int, default 5
        Folds of the selector.
    n_estimators : int, default 100
        Trees of a forest metric.
    random_state : int or None, default None
        Seed of a forest metric.
    batch_size, tile_size : int, optional
        Query rows per task; candidates per tile of the brute search.

    Where it runs is not a parameter.  By default the neighbour search runs
    in this process and forest metrics fit their trees on the current Dask
    client (or a LocalCluster).  Inside ``with distforest.execution(client=c):``,
    or after :meth:`set_execution`, both run on that cluster, including the
    clones made by the feature selector and by ``cross_val_score``.

    Attributes
    ----------
    n_features_in_ : int
        Features given to ``fit`` (before selection).
    support_ : ndarray of bool
        Features kept by the selection (all True without ``select``).
    scaler_ : scikit-learn scaler or None
    measure_ : Measure or None
        The fitted measure (None for a forest metric or callable).
    similarity_ : object or None
        The fitted forest similarity / callable adaptor.
    X_fit_ : ndarray or StoredRows
        Training rows after selection and normalisation (fitted from rows in a
        store: in a temporary store this model owns, read by the search's tasks).
    sample_weight_ : ndarray of float64 or None
        Weight of each training row's vote (``fit``'s ``sample_weight`` with a
        measure or distance function); None when the votes are not weighted.
    """

    def __init__(
        self,
        n_neighbors: int = 5,
        *,
        weights: str = "uniform",
        metric: Any = "euclidean",
        metric_params: dict[str, Any] | None = None,
        normalize: str | None = None,
        feature_range: tuple[float, float] = (0.0, 1.0),
        algorithm: str = "auto",
        select: str | None = None,
        n_features_to_select: str | int | float = "auto",
        select_cv: int = 5,
        n_estimators: int = 100,
        random_state: int | None = None,
        batch_size: int | None = None,
        tile_size: int = 8192,
    ) -> None:
        self.n_neighbors = n_neighbors
        self.weights = weights
        self.metric = metric
        self.metric_params = metric_params
        self.normalize = normalize
        self.feature_range = feature_range
        self.algorithm = algorithm
        self.select = select
        self.n_features_to_select = n_features_to_select
        self.select_cv = select_cv
        self.n_estimators = n_estimators
        self.random_state = random_state
        self.batch_size = batch_size
        self.tile_size = tile_size

    # -- fitting ----------------------------------------------------------

    _parameter_constraints: ClassVar[dict[str, C.Constraint]] = {
        "n_neighbors": C.Int(1),
        "weights": C.Choice(WEIGHTS),
        "metric": C.Checked("a measure name, forest metric, similarity object or function"),
        "metric_params": C.Checked("the measure's own parameters"),
        "normalize": C.Choice(C.NORMALIZATIONS, none=True),
        "feature_range": C.Pair(),
        "algorithm": C.Choice(C.ALGORITHMS),
        "select": C.Choice(SELECTIONS, none=True),
        "n_features_to_select": C.Checked("scikit-learn's SequentialFeatureSelector"),
        "select_cv": C.Int(2),
        "n_estimators": C.Int(1),
        "random_state": C.Seed(),
        "batch_size": C.Int(1, none=True),
        "tile_size": C.TILE_SIZE,
    }

    def _fit(
        self, X: Any, y: Any, y_fit: np.ndarray, source: Any = None, sample_weight: Any = None
    ) -> None:
        with use_execution(self._current_execution()):  # clones made here run there too
            self._fit_here(X, y, y_fit, source, sample_weight)

    def _opened(self, X: Any, y: Any) -> tuple[Any, Any, Any]:
        """``(X, y, None)`` for rows in memory, ``(None, None, source)`` for rows in a store.

        ``y`` None or a column name: ``X`` is opened as a source
        (:func:`~distforest.store.source.open_source`: a folder of parts, a dask
        DataFrame, a run store... is read by partitions into a temporary store),
        its target the named column or its own.
        """
        if y is not None and not isinstance(y, str):
            return X, y, None
        from distforest.store.source import open_source

        source = open_source(X, y, dtype=np.float64)
        if source.store_path is None:  # rows in memory: the table and its target
            table: Any = source
            return table.table, source.read_y(), None
        return None, None, source

    def _check_similarity(self, similarity: Any) -> None:
        """Refuse a forest ``similarity`` this model cannot grow: SMERF with ``select``,
        a classification forest for a regressor."""
        if self.metric == "smerf" and self.select is not None:
            raise ParameterError(
                f"select={self.select!r} cross-validates on subsets of the rows, but "
                "metric='smerf' learns from the observed distances of all training rows; "
                "remove select, or choose the features first with another metric"
            )
        if getattr(similarity, "needs_classes", False) and not is_classifier(self):
            raise ParameterError(
                f"metric={_metric_name(self.metric)!r} grows a classification forest and needs "
                f"class labels, but {type(self).__name__} has a numeric target; use "
                "KNNClassifier for labels, or for regression a forest metric without classes "
                "('rf-proximity', 'rfgap', 'beta') or a measure such as 'rbf'"
            )

    def _vote_weights(self, sample_weight: Any, similarity: Any, n: int) -> np.ndarray | None:
        """The checked ``sample_weight`` when it weighs the votes (a measure or a distance
        function), None without weights or when a forest metric's forest takes them; a
        forest whose fit takes no weights is refused."""
        from sklearn.utils.validation import has_fit_parameter

        from distforest.forests.proximity_forest import _check_weights

        if sample_weight is None:
            return None
        weights = _check_weights(sample_weight, n, "supervised")
        if similarity is None or isinstance(similarity, FunctionDistance):
            return weights
        if has_fit_parameter(similarity, "sample_weight"):
            return None  # the forest's fit weighs its rows (and checks the weights again)
        raise InputError(
            f"sample_weight cannot be used with metric={_metric_name(self.metric)!r}: its "
            "forest's fit takes no row weights; use 'rf-proximity' or 'rfgap' (the weights "
            "grow the forest), a measure such as 'euclidean' or a distance function (the "
            "weights weigh each neighbour's vote), or fit without sample_weight"
        )

    def _fit_here(
        self, X: Any, y: Any, y_fit: np.ndarray, source: Any, sample_weight: Any = None
    ) -> None:
        """One fit for rows in memory (one chunk, here) and rows in a store (its chunks,
        by tasks; the model's rows and a forest's arrays then stay in a temporary store
        this model owns, copied into the model store by :func:`save_model`)."""
        from distforest.forests.scaled_rows import fit_scaling, scaled

        self._validated()
        similarity = make_similarity(self.metric, self.n_estimators, self.random_state,
                                     self.metric_params)  # fmt: skip
        self._check_similarity(similarity)
        if source is None:
            rows, names = as_matrix(X, "X")
            n, d = rows.shape
        else:
            rows, names = source, tuple(source.feature_names)
            n, d = source.n_samples, source.n_features
        if n != y_fit.shape[0]:
            raise InputError(f"X has {n} rows but y has {y_fit.shape[0]} values")
        votes = self._vote_weights(sample_weight, similarity, n)
        if votes is not None and not votes.all():  # a row of weight 0 is not a neighbour
            if source is not None:
                raise InputError(
                    f"sample_weight gives weight 0 to {np.count_nonzero(votes == 0):,} rows "
                    "of a table in a store; drop those rows from the table, or give them a "
                    "weight > 0"
                )
            kept = votes > 0
            rows, y_fit, votes = rows[kept], y_fit[kept], votes[kept]
            y = np.asarray(y)[kept] if y is not None else None
            n = rows.shape[0]
        self.sample_weight_ = votes
        self.n_features_in_ = d
        self.feature_names_in_ = names
        self.support_ = np.ones(d, dtype=bool)
        if self.select is not None:  # cross-validated on every row, in this process
            whole = (
                rows
                if source is None
                else np.vstack(
                    [source.read_rows(c, np.float64) for c in source.chunks()] or [np.empty((0, d))]
                )
            )
            self.support_ = self._selected(whole, y if y is not None else source.read_y())
        if self.n_neighbors > n:
            raise ParameterError(
                f"n_neighbors={self.n_neighbors} but only {n} training rows "
                f"(n_samples = {n}); use a smaller n_neighbors"
            )
        scaling = fit_scaling(rows, support=self.support_, normalize=self.normalize,
                              feature_range=self.feature_range,
                              metric=None if similarity is not None else self.metric,
                              metric_params=self.metric_params, names=names)  # fmt: skip
        self.scaler_ = scaling.scaler
        self.similarity_ = similarity
        self.measure_ = scaling.measure
        self.X_fit_: np.ndarray | StoredRows
        if source is None:
            self.X_fit_ = scaled(rows, slice(0, n), scaling)
            if similarity is not None:
                forest_weights = {} if sample_weight is None else {"sample_weight": sample_weight}
                similarity.fit(self.X_fit_, y, **forest_weights)
        else:
            self.X_fit_ = _stored_rows(self, source, scaling, sample_weight)
        self.y_fit_ = y_fit

    def _selected(self, X: np.ndarray, y: Any) -> np.ndarray:
        from sklearn.feature_selection import SequentialFeatureSelector

        inner = clone(self).set_params(select=None)
        selector = SequentialFeatureSelector(
            inner,
            n_features_to_select=self.n_features_to_select,
            direction=self.select,
            cv=self.select_cv,
        )
        selector.fit(X, np.asarray(y))
        return selector.get_support()

    # -- storing ------------------------------------------------------------

    def save(
        self, store: str | Path, *, overwrite: bool = False, attrs: dict[str, Any] | None = None
    ) -> RunStore:
        """Write the fitted model as a complete store (:func:`save_model`; no pickle)."""
        return save_model(self, store, overwrite=overwrite, attrs=attrs)

    @classmethod
    def load(cls, store: str | Path, *, client: Any = None) -> Any:
        """A model written by :meth:`save` (:func:`load_model`), of this class."""
        model = load_model(store, client)
        if not isinstance(model, cls):
            raise StoreError(
                f"{str(store)!r} holds a {type(model).__name__}, not a {cls.__name__}; "
                f"load it with {type(model).__name__}.load"
            )
        return model

    # -- neighbours ---------------------------------------------------------

    def _check_fitted(self) -> None:
        if not hasattr(self, "X_fit_"):
            raise NotFittedError(f"this {type(self).__name__} is not fitted; call fit(X, y) first")

    def transform_queries(self, X: Any) -> np.ndarray:
        """Query rows as the model sees them: selected features, normalised."""
        self._check_fitted()
        Q, _ = as_matrix(X, "X")
        if Q.shape[1] != self.n_features_in_:
            raise InputError(
                f"X has {Q.shape[1]} features, but {type(self).__name__} is expecting "
                f"{self.n_features_in_} features as input; pass the training columns"
            )
        Q = Q[:, self.support_]
        if self.scaler_ is not None:
            Q = np.ascontiguousarray(self.scaler_.transform(Q), dtype=np.float64)
        if self.measure_ is not None:
            check_values(self.measure_, Q, "X")
        return Q

    def kneighbors(
        self, X: Any = None, n_neighbors: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Distances and indices of the nearest training rows, nearest first.

        Parameters
        ----------
        X : array-like, shape (n_queries, n_features), or None
            None (forest metrics ``"rf-proximity"`` and ``"rfgap"`` only): the
            neighbours of every training row among the others (a row is not its
            own neighbour, as in scikit-learn), exact, from the forest's leaves
            without any n x n matrix
            (:meth:`~distforest.forests.proximity_forest.ProximityForest.proximity_neighbors`):
            distance ``1 - p`` with p Breiman's proximity, or the training rows'
            RF-GAP (over the trees where the row is out of bag; a new row is out
            of bag in every tree).  Ties go to the smaller row number.
        n_neighbors : int, optional
            Defaults to ``n_neighbors``.

        Returns
        -------
        distances : ndarray of float64, shape (n_queries, k)
        indices : ndarray of int64, shape (n_queries, k)
        """
        if X is None:
            return self._training_neighbors(n_neighbors or self.n_neighbors)
        found = self._neighbors(self.transform_queries(X), n_neighbors or self.n_neighbors)
        return found.distances, found.indices

    def _training_neighbors(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        self._check_fitted()
        kind = getattr(self.similarity_, "kind", None)
        forest = getattr(self.similarity_, "forest_", None)
        if kind not in ("rf-proximity", "rfgap") or forest is None:
            raise ParameterError(
                "kneighbors() without X (each training row's neighbours among the others) needs "
                f"metric='rf-proximity' or 'rfgap', not {_metric_name(self.metric)!r}; pass X"
            )
        with use_execution(self._current_execution()):  # placed by the input's size
            found = forest.proximity_neighbors(k, "original" if kind == "rf-proximity" else "rfgap")
        distances = 1.0 - found["proximity"].values.astype(np.float64)
        return distances, found["index"].values

    def _neighbors(self, Q: np.ndarray, k: int) -> Neighbors:
        reference: Any = self.X_fit_  # an array, or StoredRows its tasks read
        with use_execution(self._current_execution()):  # placed by the input's size
            return search(
                Q,
                reference,
                k,
                measure=self.measure_,
                similarity=self.similarity_,
                algorithm="brute" if self.similarity_ is not None else self.algorithm,
                batch_size=self.batch_size,
                tile_size=self.tile_size,
            )

    def _weighted(self, X: Any) -> tuple[np.ndarray, np.ndarray]:
        """Each query's neighbours and their votes: ``weights``' vote times the
        neighbour's sample weight, when the votes are weighted."""
        found = self._neighbors(self.transform_queries(X), self.n_neighbors)
        votes = vote_weights(found.distances, self.weights)
        rows = getattr(self, "sample_weight_", None)  # (absent in models saved before)
        return found.indices, votes if rows is None else votes * rows[found.indices]


class KNNClassifier(ClassifierMixin, KNNBase):
    """k-nearest-neighbour classifier: majority or distance-weighted (1/d^2) vote.

    Parameters and common attributes: see :class:`KNNBase`.  A tie between
    classes goes to the first class in sorted label order.

    Attributes
    ----------
    classes_ : ndarray
        Class labels, sorted.
    """

    def fit(self, X: Any, y: Any = None, sample_weight: Any = None) -> KNNClassifier:
        """Remember the (selected, normalised) training rows and their labels.

        Parameters
        ----------
        X : array-like, DataFrame, Table, path or source, shape (n_samples, n_features)
            A folder of parts, a glob, a large file, a dask DataFrame or rows in a
            store are fitted by chunks on the cluster (:meth:`KNNBase._opened`).
        y : array-like, shape (n_samples,), column name or None
            None: the target of ``X`` (a table read with its target).
        sample_weight : array-like of shape (n_samples,) or None
            Non-negative row weights.  Metrics ``"rf-proximity"`` and ``"rfgap"``
            grow their forest with them (as ``ProximityForest.fit``) and vote as
            without weights; a measure or a distance function multiplies each
            neighbour's vote by its weight (rows of weight 0 are left out of the
            neighbours).  The other forest metrics refuse them.

        Returns
        -------
        self
        """
        X, y, source = self._opened(X, y)
        labels = None if source is None else source.target_classes()
        if labels is not None:  # a stored target of labels: kept as their codes
            values: np.ndarray = np.asarray(labels, dtype=object)
        else:
            values = _target(y if source is None else source.read_y(), type(self).__name__,
                             "the class labels")  # fmt: skip
        kind = type_of_target(values)
        if kind in ("continuous", "continuous-multioutput"):
            raise InputError(
                f"Unknown label type: {kind} target (e.g. {values.flat[0]!r}); KNNClassifier "
                "needs class labels: use KNNRegressor for numeric targets"
            )
        if values.dtype.kind == "f" and not np.isfinite(values).all():
            raise InputError("the class labels hold NaN or inf; drop those rows")
        if labels is not None:
            self.classes_, codes = values, source.read_codes()
        else:
            self.classes_, codes = np.unique(values, return_inverse=True)
        self._fit(X, y, codes.astype(np.int64), source, sample_weight)
        return self

    def predict_proba(self, X: Any) -> np.ndarray:
        """Share of the (weighted) vote of each class, shape (n_queries, n_classes)."""
        indices, w = self._weighted(X)
        scores = np.zeros((indices.shape[0], len(self.classes_)))
        rows = np.repeat(np.arange(indices.shape[0]), indices.shape[1])
        np.add.at(scores, (rows, self.y_fit_[indices].ravel()), w.ravel())
        return scores / scores.sum(axis=1, keepdims=True)

    def predict(self, X: Any) -> np.ndarray:
        """Class with the largest (weighted) vote for each query row."""
        proba = self.predict_proba(X)
        return self.classes_[np.argmax(proba, axis=1)]


class KNNRegressor(RegressorMixin, KNNBase):
    """k-nearest-neighbour regression: mean or distance-weighted (1/d^2) mean of the targets.

    Parameters and attributes: see :class:`KNNBase`.
    """

    def fit(self, X: Any, y: Any = None, sample_weight: Any = None) -> KNNRegressor:
        """Remember the (selected, normalised) training rows and their targets.

        Parameters
        ----------
        X : array-like, DataFrame, Table, path or source, shape (n_samples, n_features)
            As :meth:`KNNClassifier.fit`.
        y : array-like of float, shape (n_samples,), column name or None
            None: the target of ``X``.
        sample_weight : array-like of shape (n_samples,) or None
            As :meth:`KNNClassifier.fit`: the neighbours' targets are averaged
            with their weights (times the ``weights`` vote).

        Returns
        -------
        self
        """
        X, y, source = self._opened(X, y)
        if source is not None and source.target_classes() is not None:
            raise InputError("KNNRegressor needs a numeric target; use KNNClassifier")
        values = _target(y if source is None else source.read_y(), type(self).__name__,
                         "the target values")  # fmt: skip
        try:
            y_fit = np.asarray(values, dtype=np.float64)
        except (TypeError, ValueError):
            raise InputError("KNNRegressor needs a numeric target; use KNNClassifier") from None
        if not np.isfinite(y_fit).all():
            raise InputError("the target has missing or infinite values; drop those rows")
        self._fit(X, y, y_fit, source, sample_weight)
        return self

    def predict(self, X: Any) -> np.ndarray:
        """(Weighted) mean target of the neighbours of each query row."""
        indices, w = self._weighted(X)
        return (w * self.y_fit_[indices]).sum(axis=1) / w.sum(axis=1)


def _metric_name(metric: Any) -> str:
    """A metric as a user named it: the name, or the class of an object."""
    return metric if isinstance(metric, str) else type(metric).__name__


def _target(y: Any, model: str, what: str) -> np.ndarray:
    """``y`` as a 1-D array (a column vector is flattened with a warning)."""
    if y is None:
        raise InputError(f"{model} requires y to be passed, but the target y is None; give {what}")
    y = np.asarray(y)
    if y.ndim == 2 and y.shape[1] == 1:
        return column_or_1d(y, warn=True)
    if y.ndim != 1:
        raise InputError(f"{model} needs a 1-D target, got shape {y.shape}")
    return y


# -- saving without pickle -------------------------------------------------------

_SCALER_FIELDS = {
    "range": ("min_", "scale_", "data_min_", "data_max_", "data_range_"),
    "zscore": ("mean_", "scale_", "var_"),
}


def save_model(
    model: KNNBase,
    path: str | Path,
    *,
    overwrite: bool = False,
    attrs: dict[str, Any] | None = None,
    complete: bool = True,
) -> RunStore:
    """Write a fitted k-NN model as a Zarr store: arrays and JSON attributes only.

    A forest metric (``"rf-proximity"``, ``"rfgap"``, ``"beta"``, ``"simforest"``,
    ``"smerf"``) saves its
    forest in the group :data:`FOREST_GROUP`; a callable or a user's
    similarity object cannot be saved (it would be code).

    Parameters
    ----------
    model : KNNClassifier or KNNRegressor
        Fitted.
    path : str or Path
        Zarr store to create.
    overwrite : bool
        Replace an existing distforest store.
    attrs : dict, optional
        More JSON attributes to record (e.g. the input's target column).
    complete : bool, default True
        Mark the store complete (False: a job goes on writing into it; its run
        protocol completes it).
    """
    model._check_fitted()
    rs = RunStore.create(path, attrs=model_attrs(model, attrs), overwrite=overwrite)
    if isinstance(model.X_fit_, np.ndarray):
        rs.write_array("X_fit", model.X_fit_, ("sample", "feature"))
    else:  # rows in a store: copied by tasks, a chunk at a time
        _copy_rows(rs, "X_fit", model.X_fit_)
    rs.write_array("y_fit", model.y_fit_, ("sample",))
    votes: np.ndarray | None = getattr(model, "sample_weight_", None)
    if votes is not None:  # the votes' weights
        rs.write_array("sample_weight", votes, ("sample",))
    write_fitted_parameters(model, rs)
    if complete:
        complete_output(rs)
    return rs


def _copy_rows(rs: RunStore, name: str, rows: StoredRows) -> None:
    """Array ``name`` of the model store from stored rows, copied by tasks on dask's
    current scheduler in whole chunks (this process never holds them)."""
    import dask.array as da
    import zarr

    source = zarr.open_array(rows.path, path=rows.name, mode="r")
    target: Any = rs.group.create_array(name, shape=source.shape, chunks=source.chunks,
                                        dtype=source.dtype,
                                        dimension_names=("sample", "feature"))  # fmt: skip
    da.store(da.from_zarr(source), target, lock=False)


def _stored_rows(
    model: KNNBase, source: Any, scaling: Any, sample_weight: Any = None
) -> StoredRows:
    """The model's rows of a ``source`` in a store, scaled and checked by tasks into a
    temporary store that lives as long as ``model``; a forest metric's forest grown from
    them there (its rows as :data:`STORED_FORESTS` types them, its target the source's)."""
    from distforest.forests.scaled_rows import write_scaled
    from distforest.store.inputs import StoredTable, copy_target
    from distforest.store.temporary import new_folder, release, tie

    work = new_folder("distforest-knn-")
    tie(model, work)
    try:
        rs = RunStore.create(work / "rows.zarr", attrs={"source": source.source})
        forest = model.similarity_ is not None
        outputs: dict[str, Any] = {"X_fit": np.float64}
        if forest:  # the forest's table: features 0..d-1, as the one-file fit's array
            copy_target(source, rs, int(np.count_nonzero(scaling.support)))
            outputs[f"{INPUT_GROUP}/X"] = STORED_FORESTS[str(model.metric)]
        write_scaled(source, scaling, rs.path, outputs)
        if forest:
            similarity: Any = model.similarity_
            forest_weights = {} if sample_weight is None else {"sample_weight": sample_weight}
            similarity.fit_table(StoredTable.open(rs.path), **forest_weights)
        return StoredRows.of(rs.path, "X_fit", source.source, source.fingerprint())
    except BaseException:
        release(model)
        raise


def model_attrs(model: KNNBase, attrs: dict[str, Any] | None = None) -> dict[str, Any]:
    """The JSON attributes of a model store: the model's kind, parameters, measure,
    features and classes, with ``attrs`` (refuses a metric that would be code)."""
    forest = model.similarity_ is not None
    if forest and model.metric not in C.FOREST_METRICS:
        raise ParameterError(
            f"a k-NN model with metric {model.metric!r} cannot be saved (it would be code); "
            f"use a measure such as 'euclidean' or a forest metric {C.FOREST_METRICS}"
        )
    measure: Measure | None = model.measure_
    params = {k: v for k, v in model.get_params().items() if k != "metric_params"}
    params["feature_range"] = list(params["feature_range"])
    return {
        "model": type(model).__name__,
        "model_schema": MODEL_SCHEMA,
        "params": json.loads(json.dumps(params, default=str)),
        "measure": None
        if measure is None
        else {"name": measure.name, "p": measure.p, "gamma": measure.gamma},
        "metric_forest": FOREST_GROUP if forest else None,
        "feature_names": list(model.feature_names_in_),
        "classes": [c.item() if hasattr(c, "item") else c for c in getattr(model, "classes_", [])],
        **(attrs or {}),
    }


def write_fitted_parameters(model: KNNBase, rs: RunStore) -> None:
    """Write what a model learned besides its rows into the store ``rs``: the kept
    features, the Mahalanobis VI, the scaler's fields and the metric's forest."""
    rs.write_array("support", model.support_.astype(np.uint8), ("feature_in",))
    measure: Measure | None = model.measure_
    if measure is not None and measure.VI is not None:
        rs.write_array("mahalanobis_VI", measure.VI, ("feature", "feature_j"))
    if model.scaler_ is not None and model.normalize is not None:
        for name in _SCALER_FIELDS[model.normalize]:
            rs.write_array(f"scaler_{name}", getattr(model.scaler_, name), ("feature",))
    if model.similarity_ is not None:
        saved: Any = model.similarity_  # a forest similarity: it has save()
        saved.save(location.join(rs.path, FOREST_GROUP))


def load_model(path: str | Path, client: Any = None, *,
               require_complete: bool = True) -> KNNClassifier | KNNRegressor:  # fmt: skip
    """Read a model written by :func:`save_model` (no code is run).

    Parameters
    ----------
    path : str or Path
    client : distributed.Client, optional
        Run the model's neighbour search there (:meth:`~KNNBase.set_execution`).
    require_complete : bool, default True
        Refuse a store not marked complete (False: a job's model, written by its
        finished fit stage and completed when the job ends).
    """
    rs = RunStore.open(path, require_complete=require_complete)
    attrs = rs.attrs
    kinds = {"KNNClassifier": KNNClassifier, "KNNRegressor": KNNRegressor}
    if attrs.get("model") not in kinds:
        raise StoreError(f"{str(path)!r} is a distforest store but not a k-NN model")
    params = dict(attrs["params"])
    params["feature_range"] = tuple(params["feature_range"])
    params.pop("client", None)  # stores written before execution left the parameters
    model = kinds[attrs["model"]](**params)
    if client is not None:
        model.set_execution(client)
    g = rs.group
    model.X_fit_ = np.asarray(rs.read("X_fit"), dtype=np.float64)
    model.y_fit_ = rs.read("y_fit")
    model.sample_weight_ = rs.read("sample_weight") if "sample_weight" in g else None
    model.support_ = rs.read("support").astype(bool)
    model.n_features_in_ = int(model.support_.size)
    model.feature_names_in_ = tuple(attrs["feature_names"])
    if attrs["model"] == "KNNClassifier":
        model.classes_ = np.asarray(attrs["classes"])
    model.measure_ = model.similarity_ = None
    if attrs.get("metric_forest"):
        where = location.join(rs.path, attrs["metric_forest"])
        model.similarity_ = load_similarity(model.metric, where)  # no client: it travels in tasks
    else:
        m = attrs["measure"]
        VI = rs.read("mahalanobis_VI") if "mahalanobis_VI" in g else None
        model.measure_ = Measure(m["name"], p=m["p"], gamma=m["gamma"], VI=VI)
    model.scaler_ = make_scaler(model.normalize, model.feature_range)
    if model.scaler_ is not None and model.normalize is not None:
        for name in _SCALER_FIELDS[model.normalize]:
            setattr(model.scaler_, name, rs.read(f"scaler_{name}"))
        model.scaler_.n_features_in_ = int(model.X_fit_.shape[1])
        model.scaler_.n_samples_seen_ = int(model.X_fit_.shape[0])
    return model
