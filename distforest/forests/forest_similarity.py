"""Forest similarities between new rows and the training rows (k-NN metrics).

The contract every forest similarity follows, so that later forests plug
into :class:`~distforest.apps.knn.KNNClassifier` as a ``metric``::

    sim.fit(X, y=None)                 -> sim
    sim.cross_similarity(X_query)      -> ndarray (n_query, n_fit), values in [0, 1]

k-NN turns a similarity into the distance ``1 - s`` (so distance-weighted
votes use ``1 / (1 - s)^2``, and ``s = 1`` is an exact match).

- ``"rf-proximity"``: share of the trees in which the query falls in the same
  leaf as the training row (Breiman's proximity, all trees count).
- ``"rfgap"``: RF-GAP for a new point, which is out of bag in every tree:
  ``p(x, j) = (1/T) sum_t c_j(t) [j in leaf_t(x)] / M_t(x)`` with ``c_j(t)``
  the in-bag count of training row j and ``M_t(x)`` the total in-bag count
  of x's leaf.  Each row sums to 1 (a point is near its leaf-mates in
  proportion to how often they were drawn), so values are small; their
  order and ratios are what k-NN uses.
- ``"beta"``: X-Forest beta-similarity (:class:`distforest.forests.xforest.XForest`).
- ``"simforest"``: share of the trees of a SimForest
  (:class:`~distforest.forests.simforest.SimilarityForestClassifier`, on the
  fly on the features, RBF by default) in which the query ends in the same
  node as the training row (Breiman's proximity; a node where a missing
  similarity held an object counts as its leaf).  A classification forest:
  it needs class labels.
- ``"smerf"``: the distance a :class:`~distforest.forests.smerf.SMERF` learned
  from the features and the training rows' observed distances (given as
  ``metric_params={"distances": D}``): the mean of D over the in-bag members
  of the two rows' leaves, averaged over the trees.  A distance, used as it
  is (``cross_distance``), not through ``1 - s``.

The forest similarities can be saved (:meth:`ProximitySimilarity.save`,
:meth:`BetaSimilarity.save`, :meth:`SimForestSimilarity.save`,
:meth:`SMERFDistance.save`: the forest's own Zarr layout, no pickle; a
SMERF keeps its copy of D) and read
back with :func:`load_similarity`; a k-NN model keeps its metric's forest that
way, in a group of the model store.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from distforest.errors import NotFittedError, ParameterError, StoreError
from distforest.forests import constraints as C
from distforest.forests.proximity_forest import ProximityForest
from distforest.forests.simforest import SimilarityForestClassifier
from distforest.forests.smerf import SMERF
from distforest.forests.xforest import XForest
from distforest.kernels.proximity import leaf_match_sum, original_proximity_tile
from distforest.kernels.signatures import kernel_input
from distforest.parallel.execution import SYNCHRONOUS, execution
from distforest.store.inputs import StoredTable

FOREST_METRICS = C.FOREST_METRICS


@runtime_checkable
class CrossSimilarity(Protocol):
    """Anything with ``fit(X, y)`` and ``cross_similarity(X_query)``."""

    def fit(self, X: Any, y: Any = None) -> Any: ...

    def cross_similarity(self, X_query: Any) -> np.ndarray: ...


class _SavedForest:
    """What the forest similarities share: saving the forest.

    They pickle as they are (to travel in neighbour-search tasks): a fitted
    forest carries no client, since where it runs is not part of its state.
    """

    forest_: Any

    def new_forest(self) -> Any:
        """The unfitted forest this similarity grows, with its parameters."""
        raise NotImplementedError  # pragma: no cover - every similarity defines it

    def fit_table(self, table: StoredTable) -> Any:
        """Grow the forest from rows (and labels) in a run store, read by the forest's
        tasks: the forest :meth:`fit` grows from those rows, when the store holds them in
        the type ``fit`` gives its forest.  The forest's per-row arrays stay the store's
        (its ``save`` copies them a chunk at a time): save it before the store goes, and
        load the saved similarity to compare new rows (:func:`load_similarity`).

        Parameters
        ----------
        table : StoredTable

        Returns
        -------
        self
        """
        self.forest_ = self.new_forest().fit(table, *self._forest_fit_args())
        return self

    def _forest_fit_args(self) -> tuple[Any, ...]:
        """What the forest's fit takes after the rows (SMERF: the distances)."""
        return ()

    def save(self, store: str | Path) -> None:
        """Write the fitted forest (its own layout, no pickle) as a new, complete store."""
        if not hasattr(self, "forest_"):
            raise NotFittedError(f"call fit before saving this {type(self).__name__}")
        self.forest_.save(store, complete=True)


class ProximitySimilarity(_SavedForest):
    """Random-forest proximity or RF-GAP of new rows to the training rows.

    Parameters
    ----------
    kind : {"rf-proximity", "rfgap"}
    n_estimators : int
    random_state : int or None
    **forest_params
        Any other :class:`ProximityForest` parameter.
    """

    def __init__(
        self,
        kind: str = "rf-proximity",
        n_estimators: int = 100,
        random_state: int | None = None,
        **forest_params: Any,
    ) -> None:
        if kind not in ("rf-proximity", "rfgap"):
            raise ParameterError(f"kind must be 'rf-proximity' or 'rfgap', got {kind!r}")
        self.kind = kind
        self.n_estimators = n_estimators
        self.random_state = random_state
        self.forest_params = forest_params

    def new_forest(self) -> ProximityForest:
        """The unfitted :class:`ProximityForest` (see :meth:`_SavedForest.new_forest`)."""
        return ProximityForest(
            n_estimators=self.n_estimators, random_state=self.random_state, **self.forest_params
        )

    def fit(self, X: Any, y: Any = None, sample_weight: Any = None) -> ProximitySimilarity:
        """Fit the forest (supervised when ``y`` is given; ``sample_weight`` as
        :meth:`ProximityForest.fit` takes it)."""
        self.forest_ = self.new_forest().fit(X, y, sample_weight=sample_weight)
        if self.kind == "rfgap":
            self.leaf_mass_table_ = _leaf_mass_table(self.forest_)
        return self

    def cross_similarity(self, X_query: Any) -> np.ndarray:
        """Similarity of each query row to each training row.

        Returns
        -------
        ndarray of float64, shape (n_query, n_fit)
        """
        if not hasattr(self, "forest_"):
            raise NotFittedError("call fit(X, y) before cross_similarity")
        forest = self.forest_
        leaves_q = forest.apply(np.asarray(X_query, dtype=np.float64))
        if self.kind == "rf-proximity":  # (leaves in a store, of a forest grown there: read)
            leaves = np.asarray(forest.leaves_)
            return original_proximity_tile(leaves_q, leaves).astype(np.float64)
        lq = np.ascontiguousarray(leaves_q.T, dtype=np.int32)
        mass = np.take_along_axis(self.leaf_mass_table_, lq.astype(np.int64), axis=1)
        weights_q = np.zeros_like(mass)
        np.divide(1.0, mass, out=weights_q, where=mass > 0)
        lf = np.ascontiguousarray(np.asarray(forest.leaves_).T, dtype=np.int32)
        counts = np.ascontiguousarray(np.asarray(forest.inbag_).T, dtype=np.float64)
        arrays = (kernel_input(a, a.dtype) for a in (lq, lf, weights_q, counts))
        return leaf_match_sum(*arrays) / lq.shape[0]

    def fit_table(self, table: StoredTable, sample_weight: Any = None) -> ProximitySimilarity:
        """:meth:`_SavedForest.fit_table`, with row weights (as :meth:`fit`) and RF-GAP's
        leaf masses."""
        self.forest_ = self.new_forest().fit(table, sample_weight=sample_weight)
        if self.kind == "rfgap":
            self.leaf_mass_table_ = _leaf_mass_table(self.forest_)
        return self

    @classmethod
    def load(cls, store: str | Path, kind: str) -> ProximitySimilarity:
        """The fitted similarity of a forest written by :meth:`save`.

        Parameters
        ----------
        store : str or Path
        kind : {"rf-proximity", "rfgap"}
        """
        forest = ProximityForest.load(store)
        sim = cls(kind, forest.n_estimators, forest.random_state)
        sim.forest_ = forest
        if kind == "rfgap":
            sim.leaf_mass_table_ = _leaf_mass_table(forest)
        return sim


def _leaf_mass_table(forest: ProximityForest) -> np.ndarray:
    """``table[t, node]``: total in-bag count of the training rows in leaf ``node`` of tree t."""
    n_trees = forest.leaves_.shape[1]
    width = int(forest.node_counts_.max())
    table = np.zeros((n_trees, width))
    for t in range(n_trees):  # (a tree at a time: the columns of arrays in a store too)
        table[t] = np.bincount(
            np.asarray(forest.leaves_[:, t]),
            weights=np.asarray(forest.inbag_[:, t]).astype(np.float64),
            minlength=width,
        )
    return table


class BetaSimilarity(_SavedForest):
    """X-Forest beta-similarity of new rows to the training rows (unsupervised).

    Parameters
    ----------
    n_estimators : int
    random_state : int or None
    """

    def __init__(self, n_estimators: int = 100, random_state: int | None = None) -> None:
        self.n_estimators = n_estimators
        self.random_state = random_state

    def new_forest(self) -> XForest:
        """The unfitted :class:`XForest` (see :meth:`_SavedForest.new_forest`)."""
        return XForest(n_estimators=self.n_estimators, random_state=self.random_state)

    def fit(self, X: Any, y: Any = None) -> BetaSimilarity:
        """Fit an :class:`XForest` on ``X`` (``y`` is ignored)."""
        self.forest_ = self.new_forest().fit(np.asarray(X, dtype=np.float64))
        return self

    def cross_similarity(self, X_query: Any) -> np.ndarray:
        """Beta-similarity of each query row to each training row, (n_query, n_fit)."""
        if not hasattr(self, "forest_"):
            raise NotFittedError("call fit(X) before cross_similarity")
        S = self.forest_.cross_similarity(np.asarray(X_query, dtype=np.float64), kind="beta")
        return np.asarray(S, dtype=np.float64)

    @classmethod
    def load(cls, store: str | Path) -> BetaSimilarity:
        """The fitted similarity of an X-Forest written by :meth:`save`."""
        forest = XForest.load(store)
        sim = cls(forest.n_estimators, forest.random_state)
        sim.forest_ = forest
        return sim


class SimForestSimilarity(_SavedForest):
    """SimForest proximity of new rows to the training rows (supervised: needs class labels).

    The forest computes its measure on the features on the fly; the
    similarity of a query to a training row is the share of the trees in
    which both end in the same node (:meth:`SimilarityForestClassifier.apply`
    for the query, :attr:`~SimilarityForestClassifier.leaves_` for the
    training rows).

    Parameters
    ----------
    n_estimators : int
    random_state : int or None
    metric : {"rbf", "cosine", "dot", "euclidean"}, default "rbf"
        The SimForest's measure on the feature rows.
    **forest_params
        Any other :class:`SimilarityForestClassifier` parameter.
    """

    #: k-NN regression cannot use it: the forest needs class labels.
    needs_classes = True

    def __init__(
        self,
        n_estimators: int = 100,
        random_state: int | None = None,
        metric: str = "rbf",
        **forest_params: Any,
    ) -> None:
        self.n_estimators = n_estimators
        self.random_state = random_state
        self.metric = metric
        self.forest_params = forest_params

    def fit(self, X: Any, y: Any = None) -> SimForestSimilarity:
        """Grow a :class:`SimilarityForestClassifier` on the feature rows ``X`` and labels ``y``."""
        if y is None:
            raise ParameterError(
                "the 'simforest' similarity grows a classification forest and needs class "
                "labels: call fit(X, y), or use an unsupervised metric such as 'beta'"
            )
        if self.metric == "precomputed":
            raise ParameterError(
                "the 'simforest' similarity works on feature rows; metric='precomputed' has no "
                "query features to compare: use 'rbf', 'cosine', 'dot' or 'euclidean'"
            )
        self.forest_ = self.new_forest().fit(np.asarray(X, dtype=np.float64), y)
        return self

    def new_forest(self) -> SimilarityForestClassifier:
        """The unfitted :class:`SimilarityForestClassifier` (see
        :meth:`_SavedForest.new_forest`; a stored table carries its labels)."""
        return SimilarityForestClassifier(
            n_estimators=self.n_estimators,
            random_state=self.random_state,
            metric=self.metric,
            **self.forest_params,
        )

    def cross_similarity(self, X_query: Any) -> np.ndarray:
        """Share of the trees where each query row ends with each training row, (n_query, n_fit).

        The query rows are routed in this process: this runs inside the
        neighbour-search tasks, which are already spread over the cluster.
        """
        if not hasattr(self, "forest_"):
            raise NotFittedError("call fit(X, y) before cross_similarity")
        with execution(client=SYNCHRONOUS):
            leaves_q = self.forest_.apply(np.asarray(X_query, dtype=np.float64))
        leaves = np.asarray(self.forest_.leaves_)  # (in a store, of a forest grown there: read)
        return original_proximity_tile(leaves_q, leaves).astype(np.float64)

    @classmethod
    def load(cls, store: str | Path) -> SimForestSimilarity:
        """The fitted similarity of a SimForest written by :meth:`save`."""
        forest = SimilarityForestClassifier.load(store)
        sim = cls(forest.n_estimators, forest.random_state, forest.metric)
        sim.forest_ = forest
        return sim


class SMERFDistance(_SavedForest):
    """SMERF's learned distance of new rows to the training rows.

    Parameters
    ----------
    distances : path or array-like, shape (n, n)
        Observed distances between the training rows (NaN = not observed),
        in the order of the rows given to :meth:`fit` (see :meth:`SMERF.fit`).
    n_estimators : int
    random_state : int or None
    **forest_params
        Any other :class:`~distforest.forests.smerf.SMERF` parameter.
    """

    def __init__(
        self,
        distances: Any = None,
        n_estimators: int = 100,
        random_state: int | None = None,
        **forest_params: Any,
    ) -> None:
        self.distances = distances
        self.n_estimators = n_estimators
        self.random_state = random_state
        self.forest_params = forest_params

    def fit(self, X: Any, y: Any = None) -> SMERFDistance:
        """Grow a SMERF on ``X`` and the observed ``distances`` (``y`` is not used)."""
        self.forest_ = self.new_forest().fit(np.asarray(X, dtype=np.float64),
                                             *self._forest_fit_args())  # fmt: skip
        return self

    def _forest_fit_args(self) -> tuple[Any, ...]:
        if self.distances is None:
            raise ParameterError(
                "metric='smerf' learns a distance from the training rows' observed distances: "
                "pass metric_params={'distances': D} (an n x n matrix or a .npy/Zarr path; "
                "on the command line, knn fit --distances D.npy)"
            )
        return (self.distances,)

    def new_forest(self) -> SMERF:
        """The unfitted :class:`SMERF` (see :meth:`_SavedForest.new_forest`; its fit takes
        ``distances`` too)."""
        return SMERF(
            n_estimators=self.n_estimators, random_state=self.random_state, **self.forest_params
        )

    def cross_distance(self, X_query: Any) -> np.ndarray:
        """Learned distance of each query row to each training row, (n_query, n_fit).

        Computed in this process: this runs inside the neighbour-search tasks.
        """
        if not hasattr(self, "forest_"):
            raise NotFittedError("call fit(X) before cross_distance")
        with execution(client=SYNCHRONOUS):
            D = self.forest_.predict_distance(np.asarray(X_query, dtype=np.float64))
        return np.asarray(D.values, dtype=np.float64)

    @classmethod
    def load(cls, store: str | Path) -> SMERFDistance:
        """The fitted distance of a SMERF written by :meth:`save` (with its copy of D)."""
        forest = SMERF.load(store)
        sim = cls(None, forest.n_estimators, forest.random_state)
        sim.forest_ = forest
        return sim


def load_similarity(metric: str, store: str | Path) -> CrossSimilarity | SMERFDistance:
    """Read back the forest similarity ``metric`` saved at ``store`` (no code is run).

    Parameters
    ----------
    metric : {"rf-proximity", "rfgap", "beta", "simforest", "smerf"}
    store : str or Path
        Written by the similarity's ``save``.

    Returns
    -------
    ProximitySimilarity, BetaSimilarity, SimForestSimilarity or SMERFDistance
        Fitted: ``cross_similarity`` works at once.
    """
    if metric in ("rf-proximity", "rfgap"):
        return ProximitySimilarity.load(store, metric)
    if metric == "beta":
        return BetaSimilarity.load(store)
    if metric == "simforest":
        return SimForestSimilarity.load(store)
    if metric == "smerf":
        return SMERFDistance.load(store)
    raise StoreError(f"no saved forest similarity {metric!r}; expected one of {C.FOREST_METRICS}")


def make_similarity(
    metric: Any,
    n_estimators: int,
    random_state: int | None,
    metric_params: dict[str, Any] | None = None,
) -> CrossSimilarity | FunctionDistance | SMERFDistance | None:
    """The similarity object for a forest ``metric`` name or a user's object; None otherwise.

    ``metric_params`` holds ``distances`` for ``"smerf"`` (the only forest metric with
    parameters of its own).
    """
    if isinstance(metric, str):
        if metric == "smerf":
            params = dict(metric_params or {})
            distances = params.pop("distances", None)
            if params:
                raise ParameterError(
                    f"metric='smerf' takes metric_params={{'distances': D}}, not {sorted(params)}"
                )
            return SMERFDistance(distances, n_estimators, random_state)
        if metric in ("rf-proximity", "rfgap"):
            return ProximitySimilarity(metric, n_estimators, random_state)
        if metric == "beta":
            return BetaSimilarity(n_estimators, random_state)
        if metric == "simforest":
            return SimForestSimilarity(n_estimators, random_state)
        return None
    if isinstance(metric, CrossSimilarity):
        return metric
    if callable(metric):
        return FunctionDistance(metric)
    raise ParameterError(
        "metric must be a name, an object with fit(X, y) and cross_similarity(X_query), "
        f"or a function distance(A, B) -> (len(A), len(B)) array; got {metric!r}"
    )


class FunctionDistance:
    """A user's function ``distance(A, B) -> ndarray (len(A), len(B))`` as a k-NN metric.

    Parameters
    ----------
    func : callable
        Must return distances (0 = identical, larger = farther).
    """

    def __init__(self, func: Any) -> None:
        self.func = func

    def fit(self, X: Any, y: Any = None) -> FunctionDistance:
        """Remember the training rows."""
        self.X_fit_ = np.asarray(X, dtype=np.float64)
        return self

    def cross_distance(self, X_query: Any) -> np.ndarray:
        """Distances of each query row to each training row, (n_query, n_fit)."""
        D = np.asarray(self.func(np.asarray(X_query, dtype=np.float64), self.X_fit_), dtype=float)
        expected = (np.shape(X_query)[0], self.X_fit_.shape[0])
        if D.shape != expected:
            raise ParameterError(f"the metric function returned shape {D.shape}, not {expected}")
        return D
