"""`ProximityForest`: a random forest fitted as Dask tasks, proximities as Zarr tiles."""

from __future__ import annotations

import json
import logging
import warnings
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, cast

import numpy as np
from sklearn.utils.metaestimators import available_if
from sklearn.utils.validation import column_or_1d

from distforest.errors import DistforestError, InputError, NotFittedError, ParameterError
from distforest.forests import constraints as C
from distforest.forests import forest_predict, tiles
from distforest.forests._estimator import DaskEstimator
from distforest.forests.fit_driver import ForestFit, GrownBatch, fit_forest
from distforest.forests.outside import WEIGHTINGS
from distforest.forests.persistence import INPUT_FIELDS, Array, Field, Persisted, as_list
from distforest.forests.refine import RefineRule, refine_grown, refine_rule
from distforest.forests.targets import fit_target
from distforest.forests.tiles import ARRAY_NAMES, proximity_in_memory
from distforest.io import Table, load_table
from distforest.io.in_memory import check_in_memory
from distforest.io.summaries import warn_empty_features
from distforest.kernels.apply import apply_nodes
from distforest.kernels.trees import (
    NODE_FIELDS,
    Task,
    TreeBatch,
    TreeParams,
    fit_tree_batch,
    grow_nodes,
    tree_input,
)
from distforest.store.run_store import RunStore, complete_output
from distforest.store.sink import open_sink
from distforest.store.source import open_source

if TYPE_CHECKING:
    import xarray as xr

logger = logging.getLogger("distforest")

#: ``max_samples=None`` grows every tree on n bootstrap rows up to this many rows ...
LARGE_FOREST_ROWS = 500_000
#: ... and on this many (drawn with replacement) above it: a fully grown tree on
#: 10 million rows has millions of nodes, 100 of them do not fit a worker.
AUTO_ROWS_PER_TREE = 200_000


def _may_be_classifier(forest: ProximityForest) -> bool:
    """Whether ``forest`` may give class probabilities (a classifier, or not fitted yet)."""
    return getattr(forest, "task_", forest.task) in ("auto", "classification")


def _check_weights(sample_weight: Any, n: int, task: str) -> np.ndarray:
    """``sample_weight`` checked by scikit-learn's rule: n non-negative finite numbers."""
    from sklearn.utils.validation import _check_sample_weight

    if task == "unsupervised":
        raise InputError(
            "sample_weight needs a target: an unsupervised forest weighs its rows against "
            "their synthetic copies; pass y, or fit without sample_weight"
        )
    try:
        return _check_sample_weight(sample_weight, np.empty((n, 0)), dtype=np.float64,
                                    ensure_non_negative=True)  # fmt: skip
    except ValueError as exc:
        raise InputError(
            f"sample_weight: {exc}; pass {n:,} finite weights >= 0, one per row"
        ) from None


def _class_labels(classes: Any) -> list[Any]:
    """Class labels as JSON: numbers and text as they are, anything else as text."""
    return [c if isinstance(c, str | int | float) else str(c) for c in classes]


class ProximityForest(Persisted, DaskEstimator):
    """A random forest whose trees are Dask tasks and whose proximities are Zarr tiles.

    Parameters
    ----------
    n_estimators : int, default 100
        Number of trees.
    task : {"auto", "classification", "regression", "unsupervised"}, default "auto"
        ``auto``: unsupervised without a target, classification for a
        non-numeric or integer target with at most 50 values, else regression.
        ``unsupervised`` separates the data from Breiman's synthetic second
        class (each column sampled independently from its marginal).
    kind : {"random-forest", "extra-trees"}, default "random-forest"
        Best splits (Breiman) or random thresholds (extremely randomized trees).
    max_features : {"auto", "sqrt", "log2"}, int, float or None, default "auto"
        Features tried per split; ``auto`` is ``sqrt`` for classification and
        unsupervised forests and all features for regression.
    criterion : {"auto", "gini", "entropy", "log_loss", "squared_error", \
"absolute_error", "friedman_mse", "poisson"}, default "auto"
        scikit-learn's split criterion; ``auto``: ``gini`` for classification
        and unsupervised forests, ``squared_error`` for regression.
    min_samples_split : int or float, default 2
        As scikit-learn's: rows (or a fraction of them) a node needs to be split.
    min_samples_leaf : int, default 1
    max_depth : int or None, default None
    max_leaf_nodes : int or None, default None
        Grow each tree best-first up to this many leaves (scikit-learn's).
    min_impurity_decrease : float, default 0.0
        Split a node only if the weighted impurity decreases this much (scikit-learn's).
    bootstrap : bool, default True
        Bootstrap rows for each tree.  In-bag counts are always recorded.
    max_samples : int, float, mapping or None, default None
        Bootstrap size: a count of rows, a fraction of the rows, or (classification)
        a mapping class -> rows of that class drawn for every tree, with
        replacement (R randomForest's ``sampsize`` with ``strata=y``; every class
        must be given).  ``None``: n rows per tree
        (Breiman's bootstrap) on up to ``LARGE_FOREST_ROWS`` rows; on more,
        ``AUTO_ROWS_PER_TREE`` rows per tree (as Spark's ``subsamplingRate``
        and H2O's ``sample_rate``), so that a tree's size and time stop
        growing with n (every row is still routed through every tree; the
        rows a tree did not draw are out of bag for it).  Measured cost:
        ``benchmarks/results/max_samples.md``.
    class_weight : {"balanced", "balanced_subsample"}, mapping or None, default None
        Class weights multiplying each tree's row weights (classification), as
        scikit-learn's forests: ``balanced`` weighs classes by ``n / (k * count)``,
        ``balanced_subsample`` computes that on each tree's bootstrap sample, a
        mapping gives a weight per class label (1 for a class not given).
    leaf_bound : {"auto"}, int or None, default None
        Refine the trees' crowded leaves: after a tree is grown (on its sample)
        and every row routed, each leaf holding more than ``leaf_bound`` rows is
        split further on the rows it holds, with the same splitting rule, down to
        at most ``leaf_bound`` rows (those rows' in-bag counts gain a Poisson(1)
        draw keyed by the tree and the row: see :mod:`distforest.forests.refine`).
        The co-leaf work of neighbours, tiles and outliers then stays at most
        ``leaf_bound`` events per row and tree at any n.  ``auto``: refined
        (to ``AUTO_LEAF_BOUND`` = 8 rows) when the trees are grown on a sample of
        at most a fifth of the rows (``AUTO_CROWDING``; by default from 1,000,000
        rows on, where it was measured faster) and the forest supports it (classification or
        regression, gini or squared error, no depth or leaf limit, no weights);
        None (the default): never.  The top-k jobs (``distforest proximity
        --top-k``, pipelines' ``top_k``) default to ``auto``: at 1,000,000 rows its
        fit and neighbours took 3-14 % less CPU a tree (11 % on average) than the forest as grown,
        with neighbours as often of their row's class and a lower imputation
        error (``benchmarks/results/refine-phases.md``); the estimator keeps
        None (its forest unchanged for dense matrices and every other use).
    batch_size : int or None, default None
        Trees per Dask task; ``None`` plans batches that shrink towards the
        end (at most a quarter of a worker thread's share each), so that the
        workers finish together.
    tile_size : int, default 2048
        Rows and columns of one proximity tile (one task, one Zarr chunk).
    random_state : int or None, default None
        Seed of the whole forest.  The same value gives the same trees,
        leaves and proximities whatever the cluster, batch and tile sizes.

    Where it runs is not a parameter: use ``with distforest.execution(client=c):``
    or :meth:`set_execution` (progress stages are ``"fit"`` and ``"tiles"``);
    by default the current Dask client, else a LocalCluster for each call.

    Attributes
    ----------
    n_samples_, n_features_in_ : int
    feature_names_in_ : tuple of str
    task_ : str
    classes_ : list
        Class labels (classification).
    seeds_ : ndarray of uint64, shape (n_estimators,)
        Per-tree seeds planned from ``random_state``.
    random_state_ : int
        The root entropy used (equals ``random_state`` when it was given).
    sample_ids_ : ndarray or None
        Row IDs of the training rows (``id=`` column or DataFrame index; see
        :func:`distforest.io.load_table`), the ``sample`` coordinate of its
        stores; None: row numbers.
    id_name_ : str or None
    leaves_ : ndarray of int32, shape (n_samples, n_estimators)
    inbag_ : ndarray of uint8, shape (n_samples, n_estimators)
    nodes_ : dict of str to ndarray, or None
        Flattened trees, concatenated; ``node_counts_`` nodes per tree.  None
        after :meth:`fit_leaves`.
    tree_importances_ : ndarray of float64, shape (n_estimators, n_features)
        Each tree's normalised impurity-based importances.
    feature_importances_ : ndarray of float64, shape (n_features,)
        Impurity-based importances of the forest (as scikit-learn's forests).
    oob_score_ : float
        Accuracy (classification) or R² (regression) out of bag.
    oob_decision_function_ : ndarray, shape (n_samples, n_classes)
        Out-of-bag class probabilities (classification).
    oob_prediction_ : ndarray, shape (n_samples,)
        Out-of-bag predictions (regression).

    With a target, it is a scikit-learn forest: :meth:`predict`,
    :meth:`predict_proba`, :meth:`score`.  Pass ``task="classification"`` or
    ``task="regression"`` for model selection: scikit-learn then sees a
    classifier (stratified folds, accuracy) or a regressor (R²).
    """

    def __init__(
        self,
        n_estimators: int = 100,
        *,
        task: str = "auto",
        kind: str = "random-forest",
        max_features: int | float | str | None = "auto",
        criterion: str = "auto",
        min_samples_split: int | float = 2,
        min_samples_leaf: int = 1,
        max_depth: int | None = None,
        max_leaf_nodes: int | None = None,
        min_impurity_decrease: float = 0.0,
        bootstrap: bool = True,
        max_samples: int | float | Mapping[Any, int] | None = None,
        class_weight: str | Mapping[Any, float] | None = None,
        leaf_bound: int | str | None = None,
        batch_size: int | None = None,
        tile_size: int = 2048,
        random_state: int | None = None,
    ) -> None:
        self.n_estimators = n_estimators
        self.task = task
        self.kind = kind
        self.max_features = max_features
        self.criterion = criterion
        self.min_samples_split = min_samples_split
        self.min_samples_leaf = min_samples_leaf
        self.max_depth = max_depth
        self.max_leaf_nodes = max_leaf_nodes
        self.min_impurity_decrease = min_impurity_decrease
        self.bootstrap = bootstrap
        self.max_samples = max_samples
        self.class_weight = class_weight
        self.leaf_bound = leaf_bound
        self.batch_size = batch_size
        self.tile_size = tile_size
        self.random_state = random_state

    # -- parameters ---------------------------------------------------------

    def __sklearn_tags__(self) -> Any:
        from sklearn.utils import ClassifierTags, RegressorTags

        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True  # the trees route missing values
        # A classifier or a regressor by its task parameter; "auto" decides at fit
        # (from the target) and "unsupervised" needs no target.
        tags.target_tags.required = self.task in ("classification", "regression")
        if self.task == "classification":
            tags.estimator_type = "classifier"
            tags.classifier_tags = ClassifierTags()
        elif self.task == "regression":
            tags.estimator_type = "regressor"
            tags.regressor_tags = RegressorTags()
        return tags

    _parameter_constraints: ClassVar[dict[str, C.Constraint]] = {
        **C.FOREST_CONSTRAINTS,
        "leaf_bound": C.LeafBound(),
    }

    def _check_combinations(self, params: dict[str, Any]) -> None:
        C.check_bootstrap(params["bootstrap"], params["max_samples"])

    # -- fitting ------------------------------------------------------------

    def fit(self, X: Any, y: Any = None, sample_weight: Any = None) -> ProximityForest:
        """Fit the forest, one Dask task per batch of trees.

        Parameters
        ----------
        X : path, array-like, DataFrame, dask/xarray/zarr object, Table or StoredTable
            Features: anything :func:`distforest.store.source.open_source` opens.
            Rows in a store (a :class:`~distforest.store.inputs.StoredTable`, a
            run store's path) are read by the tasks from there, and the
            results (leaves, in-bag counts, the forest) are written into that
            store; a ``dask.dataframe.DataFrame``, a glob, a folder of parts or
            a large file are read by partitions into a temporary store of this
            forest (``y`` then names the target column), never whole in this
            process.
        y : array-like, str or None
            Target; None for an unsupervised forest (or when ``X`` carries it).

        sample_weight : array-like of shape (n_samples,) or None
            Non-negative row weights (supervised forests): each tree weighs a
            row by its in-bag count times its weight (times its class weight),
            as scikit-learn's forests did before 1.9 (1.9 draws the bootstrap in
            proportion to the weights instead); the out-of-bag estimates and
            importances come from these trees.

        Returns
        -------
        self
        """
        return self._fit(X, y, keep_nodes=True, sample_weight=sample_weight)

    def fit_leaves(self, X: Any, y: Any = None) -> ProximityForest:
        """Fit as :meth:`fit` but keep only the training rows' ``leaves_`` and ``inbag_``.

        The trees' nodes are dropped on the workers as soon as each tree's
        leaves are known (``nodes_`` is None): the same leaves, in-bag counts
        and proximities of the training rows, without the forest's largest
        arrays, but no :meth:`apply` to new rows and no :meth:`save`.  For
        callers that need only the training rows, such as imputation's
        intermediate forests.

        Parameters
        ----------
        X, y
            The training data, as in :meth:`fit`.

        Returns
        -------
        ProximityForest
            This forest, with leaves and in-bag counts only.
        """
        return self._fit(X, y, keep_nodes=False)

    @staticmethod
    def _tree_params(params: dict[str, Any], task: str, classes: list[Any], n: int) -> TreeParams:
        """The trees' settings for ``task`` on ``n`` rows (the same whatever the input's home)."""
        n_classes = len(classes)
        max_samples = params["max_samples"]
        if max_samples is None and params["bootstrap"] and n > LARGE_FOREST_ROWS:
            max_samples = AUTO_ROWS_PER_TREE / n
        if isinstance(max_samples, int) and max_samples > n:
            raise InputError(
                f"max_samples={max_samples} rows per tree, but the input has only {n:,} rows; "
                "give at most n, or a fraction such as max_samples=0.5"
            )
        max_features = params["max_features"]
        if max_features == "auto":
            max_features = 1.0 if task == "regression" else "sqrt"
        C.check_criterion(params["criterion"], task)
        per_class = isinstance(max_samples, Mapping)
        class_weight = params["class_weight"]
        for name, given in (("class_weight", class_weight is not None),
                            ("max_samples per class", per_class)):  # fmt: skip
            if given and task != "classification":
                raise ParameterError(
                    f"{name} needs a classification forest, but the task is {task!r}; "
                    f"pass a class target (task='classification') or remove {name}"
                )
        rows_per_class = None
        if per_class:
            rows_per_class = tuple(C.per_class_codes("max_samples", max_samples, classes, True))
            max_samples = None
        if isinstance(class_weight, Mapping):
            codes = C.per_class_codes("class_weight", class_weight, classes, False)
            class_weight = tuple(enumerate(codes))
        return TreeParams(
            task=cast(Task, task),  # resolve_task returns one of Task's values
            kind=params["kind"],
            max_features=max_features,
            min_samples_leaf=params["min_samples_leaf"],
            max_depth=params["max_depth"],
            bootstrap=params["bootstrap"],
            max_samples=max_samples,
            n_classes=n_classes if task == "classification" else 2,
            min_samples_split=params["min_samples_split"],
            max_leaf_nodes=params["max_leaf_nodes"],
            min_impurity_decrease=params["min_impurity_decrease"],
            criterion=None if params["criterion"] == "auto" else params["criterion"],
            class_weight=class_weight,
            rows_per_class=rows_per_class,
        )

    @classmethod
    def refinement_plan(
        cls, params: Mapping[str, Any], supervised: bool, n: int, d: int
    ) -> tuple[RefineRule | None, str]:
        """The refinement a fit of these parameters on ``n x d`` would make, and why.

        For plans made before any data is read (the dry run, its estimates): the
        task is the given one, else classification with a target (``supervised``)
        and unsupervised without (:func:`~distforest.forests.refine.refine_rule`).
        """
        forest = cls(**params)
        try:
            valid = forest._validated()
            task = valid["task"]
            if task == "auto":
                task = "classification" if supervised else "unsupervised"
            per_class = [v for v in (valid["class_weight"], valid["max_samples"])
                         if isinstance(v, Mapping)]  # fmt: skip
            classes = (sorted(per_class[0]) if per_class else [0, 1]) \
                if task == "classification" else []  # fmt: skip
            tree_params = cls._tree_params(valid, task, classes, n)
            return refine_rule(valid["leaf_bound"], tree_params, n, d)
        except DistforestError as exc:  # the fit reports it with its full context
            return None, f"not decided: {exc}"

    def _fit(
        self, X: Any, y: Any, *, keep_nodes: bool, sample_weight: Any = None
    ) -> ProximityForest:
        params = self._validated()
        if not isinstance(y, str) and len(getattr(y, "shape", ())) == 2 and y.shape[1] == 1:
            y = column_or_1d(y, warn=True)  # a column vector: scikit-learn's warning, then 1-D
        source = open_source(X, y, owner=self)
        C.check_against_data(params, source.n_samples, source.n_features)
        if isinstance(getattr(source, "table", None), Table):  # rows in memory: one pass
            _warn_empty_features(source.table)  # type: ignore[attr-defined]
        task, y_fit, classes = fit_target(params["task"], source)
        tree_params = self._tree_params(params, task, classes, source.n_samples)
        # bound to the grower: absent without weights (the same tasks as before)
        weights: dict[str, Any] = {}
        if sample_weight is not None:
            weights["sample_weight"] = _check_weights(sample_weight, source.n_samples, task)
        n, n_trees = source.n_samples, params["n_estimators"]
        rule, _why = refine_rule(params.get("leaf_bound"), tree_params, n, source.n_features,
                                 weighted=sample_weight is not None)  # fmt: skip
        if rule is not None:  # refined in the growing task: it routes every row itself
            weights["refine"] = rule
        with self._runner(n * source.n_features) as runner:
            # the rows' store, else memory by the in-memory rule, else a store of this forest's
            sink = open_sink(n, n_trees, store=source.store_path, chunk_rows=params["tile_size"],
                             owner=self)  # fmt: skip
            fit = fit_forest(
                source, partial(grow_forest_batch, params=tree_params, keep_nodes=keep_nodes,
                                **weights),
                y=y_fit, n_trees=n_trees, random_state=params["random_state"],
                batch_size=params["batch_size"], runner=runner, sink=sink,
                row_results={"leaves": ("int32", ("sample", "tree")),
                             "inbag": ("uint8", ("sample", "tree"))},
                keep_nodes=keep_nodes, router=None if rule else route_forest_rows,
                routed=() if rule else ("leaves",), progress=self._report("fit"),
                join_progress=self._report("leaves"),
                row_tree_bytes=None if rule is None else rule.row_tree_bytes(),
            )  # fmt: skip
        self._take_fit(source, fit, params, task, y_fit, classes)
        self.leaf_bound_ = None if rule is None else rule.bound
        self._record_store(fit)
        return self

    def _record_store(self, fit: ForestFit) -> None:
        """Make the store the fit wrote its rows' arrays into (rows read from a store or
        by partitions) hold what save() writes, so that matrices are added to it."""
        if fit.store is not None:
            rs = RunStore.open(fit.store, mode="r+")
            self._write_arrays(rs, self.params_["tile_size"],
                               names=("tree_importances", "target"))  # fmt: skip
            rs.update_attrs(**self._provenance(), store_input=True)

    @classmethod
    def from_model(
        cls,
        model: Any,
        X: Any,
        y: Any = None,
        *,
        sample_weight: Any = None,
        tile_size: int = 2048,
    ) -> ProximityForest:
        """A fitted forest from a model fitted elsewhere, on its training rows ``X``.

        Every row is routed through the model's trees by tasks (a folder of parts
        or a large file is read by partitions: the driver never holds it), into
        the same ``leaves`` / ``inbag`` arrays a forest grown here has; every
        answer then works from it (proximities, neighbours, outliers, MDS).

        Parameters
        ----------
        model : fitted estimator or booster
            A scikit-learn ``RandomForest*``, ``ExtraTrees*``, ``GradientBoosting*``
            or ``HistGradientBoosting*`` model, a LightGBM or an XGBoost model
            (see :mod:`distforest.forests.outside`).
        X : array-like, DataFrame, path, folder of parts or dask DataFrame
            The rows the model was fitted on, in the same order (the in-bag counts
            of a scikit-learn bootstrap are replayed for those rows), numeric
            features as the model saw them.
        y : array-like, str or None
            The target (a column name when ``X`` is read from files); needed by
            the answers that use classes (outliers by class, mislabels).  The task
            is the model's own (a classifier's classes, a regressor's numbers); only
            a model whose objective says neither (custom, ranking) has it decided
            from the target's values.
        sample_weight : array-like or None
            The weights the model was fitted with (scikit-learn draws a weighted
            bootstrap when they are given).
        tile_size : int, default 2048
            Rows per tile of the matrices.

        Returns
        -------
        ProximityForest
            Fitted, without tree nodes: :meth:`apply` and :meth:`predict` of new
            rows are the model's own.  Out-of-bag and RF-GAP proximities are
            refused where the model's bagging cannot be replayed.
        """
        from distforest.forests.outside import outside_forest, route_batch
        from distforest.parallel import tasks as plan

        forest = outside_forest(model)
        self = cls(n_estimators=forest.n_trees, bootstrap=forest.bootstrap,
                   max_features=None, tile_size=tile_size)  # fmt: skip
        params = self._validated()
        source = open_source(X, y, owner=self)
        if source.categories:
            raise InputError(
                f"{source.source} has text columns {sorted(source.categories)}; a model "
                "fitted elsewhere is given the numeric features it was fitted on: encode "
                "them as you did for the model and pass the numeric table"
            )
        task, y_fit, classes = (
            # the model says its task: a regressor's target is read as floats, never
            # sorted to guess the task from its distinct values
            fit_target(forest.task, source) if source.target_name or y is not None
            else ("unsupervised", None, [])
        )  # fmt: skip
        weights = None if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
        _, seeds = plan.plan_seeds(0, forest.n_trees)
        grower = partial(route_batch, forest=forest, sample_weight=weights,
                         node_counts=forest.node_counts(),
                         tree_of_seed={int(s): t for t, s in enumerate(seeds)})  # fmt: skip
        n = source.n_samples
        with self._runner(n * source.n_features) as runner:
            sink = open_sink(n, forest.n_trees, store=source.store_path, chunk_rows=tile_size,
                             owner=self)  # fmt: skip
            fit = fit_forest(
                source, grower, y=None, n_trees=forest.n_trees, random_state=0,
                batch_size=None, runner=runner, sink=sink,
                row_results={"leaves": ("int32", ("sample", "tree")),
                             "inbag": ("uint8", ("sample", "tree"))},
                keep_nodes=False, dtype=np.float64, progress=self._report("route"),
                join_progress=self._report("leaves"),
            )  # fmt: skip
        self._take_fit(source, fit, params, task, y_fit, classes)
        self.model_ = model
        self.outside_ = forest
        self.no_inbag_ = forest.no_inbag
        self._record_store(fit)
        return self

    def _take_fit(self, source: Any, fit: ForestFit, params: dict[str, Any], task: str,
                  y_fit: np.ndarray | None, classes: list[Any]) -> None:  # fmt: skip
        """Set the fitted attributes once, from the fit driver's result."""
        n = source.n_samples
        self.n_samples_ = n
        self.n_features_in_ = source.n_features
        self.feature_names_in_ = source.feature_names
        self.categories_ = source.categories
        self.sample_ids_ = fit.sample_ids
        self.id_name_ = source.id_name
        self.target_name_ = source.target_name
        self.task_ = task
        self.classes_ = classes
        self.y_ = y_fit
        self.seeds_ = fit.seeds
        self.random_state_ = fit.random_state
        self.leaves_ = fit.rows["leaves"]
        self.inbag_ = fit.rows["inbag"]
        self.node_counts_ = fit.trees["node_counts"]
        self.tree_importances_: np.ndarray | None = fit.trees["importances"]
        self.nodes_: Mapping[str, np.ndarray] | None = fit.nodes
        self.input_ = {"source": source.source, "fingerprint": source.fingerprint()}
        self.fit_id_ = fit.fit_id
        self.params_ = params

    def apply(self, X: Any) -> np.ndarray:
        """Leaf of each row of ``X`` in every tree, from the flattened forest.

        Parameters
        ----------
        X : array-like or any input :func:`distforest.io.load_table` reads
            Rows with the training features, in the training order; text
            columns are coded with the training labels.  A :class:`Table` is
            taken as already coded.

        Returns
        -------
        ndarray of int32, shape (n, n_estimators)
            From the model's own routing for a forest of :meth:`from_model`.
        """
        if self._outside() is not None:
            return self._outside().leaves(self._model_rows(X))
        self._check_nodes("apply() to new rows")
        if isinstance(X, Table):  # already coded as the forest's input (the imputer's rows)
            if X.n_features != self.n_features_in_:
                raise InputError(
                    f"{X.source} has {X.n_features} features but the forest was fitted "
                    f"on {self.n_features_in_}; pass the same columns (without the target)"
                )
            values = X.X
        else:  # read like predict(): one row is enough, text coded with the training labels
            values = forest_predict.new_rows(self, X)
        offsets = np.concatenate([[0], np.cumsum(self.node_counts_)])
        assert self.nodes_ is not None  # checked
        return apply_nodes(values, {**self.nodes_, "node_offset": offsets})

    def _outside(self) -> Any:
        """The :class:`~distforest.forests.outside.OutsideForest` of a forest made by
        :meth:`from_model`, else None."""
        return self.__dict__.get("outside_")

    def _model_rows(self, X: Any) -> np.ndarray:
        """New rows for the model of :meth:`from_model`: the training columns, float64
        (the model reads its own numbers; no text columns: from_model refuses them)."""
        self._check_fitted()
        forest_predict.check_feature_names(self, X)
        table = X if isinstance(X, Table) else load_table(X, min_rows=1)
        if table.n_features != self.n_features_in_ or table.categories:
            raise InputError(
                f"{table.source} has {table.n_features} features (text columns: "
                f"{sorted(table.categories) or 'none'}), but the model reads "
                f"{self.n_features_in_} numeric features; pass the training columns "
                "(without the target), encoded as for the model"
            )
        return np.asarray(table.X, dtype=np.float64)

    # -- predictions (see distforest.forests.forest_predict) ----------------

    def predict(self, X: Any) -> np.ndarray:
        """Class (classification) or value (regression) of new rows, as scikit-learn's forests.

        The mean over the trees of each row's leaf value: class fractions
        (the most probable class wins; the first on ties) or the mean target.
        One Dask task per block of rows; small inputs run in this process.

        Parameters
        ----------
        X : array-like, DataFrame, path or Table
            Rows with the training features, in the training order.

        Returns
        -------
        ndarray, shape (n,)
            Labels of ``classes_``, or float64 values.
        """
        values = self._predict_values(X)
        if self.task_ == "classification":
            return forest_predict.decode_classes(self, values)
        return values[:, 0]

    def _predict_values(self, X: Any) -> np.ndarray:
        """Class probabilities or values of new rows: the trees' mean leaf value, or the
        model's own prediction for a forest of :meth:`from_model`."""
        if self._outside() is None:
            return forest_predict.predict_values(self, X)
        forest_predict.check_supervised(self, "predict()")
        rows = self._model_rows(X)
        return self._outside().predict(rows, self.task_ == "classification")

    @available_if(_may_be_classifier)
    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities of new rows: the mean of the trees' leaf class fractions.

        Parameters
        ----------
        X : array-like, DataFrame, path or Table

        Returns
        -------
        ndarray of float64, shape (n, n_classes)
            Columns in the order of ``classes_``.
        """
        self._check_task("classification", "predict_proba()")
        return self._predict_values(X)

    @available_if(_may_be_classifier)
    def predict_log_proba(self, X: Any) -> np.ndarray:
        """Logarithm of :meth:`predict_proba` (``-inf`` for probability 0)."""
        with np.errstate(divide="ignore"):
            return np.log(self.predict_proba(X))

    def score(self, X: Any, y: Any, sample_weight: Any = None) -> float:
        """Accuracy (classification) or R² (regression) of :meth:`predict` on ``X``.

        Parameters
        ----------
        X : array-like, DataFrame, path or Table
        y : array-like, shape (n,)
        sample_weight : array-like, optional

        Returns
        -------
        float
        """
        from sklearn.metrics import accuracy_score, r2_score

        predicted = self.predict(X)
        if self.task_ == "classification":
            return float(accuracy_score(y, predicted, sample_weight=sample_weight))
        return float(r2_score(y, predicted, sample_weight=sample_weight))

    def predict_proximity(self, X: Any, method: str = "rfgap") -> np.ndarray:
        """Predict new rows from the training targets, weighted by proximity.

        ``sum_j P_ij y_j / sum_j P_ij`` (regression) or the class with the
        largest summed proximity (classification), ``P`` the proximity of
        the new rows to the training rows (RF-GAP by default, whose weighted
        mean reproduces the forest's out-of-bag-style prediction); computed
        from per-tree leaf sums, never forming ``P``.

        Parameters
        ----------
        X : array-like, DataFrame, path or Table
        method : {"rfgap", "original", "oob"}
            ``oob`` weighs by the row-normalised out-of-bag proximity.

        Returns
        -------
        ndarray, shape (n,)
        """
        from distforest.forests.new_rows import proximity_weights

        weights = proximity_weights(self, X, method)
        if self.task_ == "classification":
            return forest_predict.decode_classes(self, weights)
        return weights[:, 0]

    def _check_task(self, task: str, what: str) -> None:
        forest_predict.check_supervised(self, what)
        if self.task_ != task:  # an AttributeError too: hasattr() is False
            raise NotFittedError(
                f"{what} needs a {task} forest, but this one was fitted for {self.task_}; "
                f"fit it with task={task!r}"
            )

    def _oob(self) -> np.ndarray:
        """The out-of-bag values, computed on first use and kept for this fit."""
        cached = self.__dict__.get("_oob_cache")
        if cached is None or cached[0] != getattr(self, "fit_id_", None):
            cached = (self.fit_id_, forest_predict.oob_values(self))
            self._oob_cache = cached
        return cached[1]

    @property
    def oob_decision_function_(self) -> np.ndarray:
        """Out-of-bag class probabilities of the training rows, shape (n_samples, n_classes).

        Each row's mean leaf class fractions over the trees where it is out of
        bag (zeros, with a warning, for a row in bag in every tree).
        """
        self._check_task("classification", "oob_decision_function_")
        return self._oob()

    @property
    def oob_prediction_(self) -> np.ndarray:
        """Out-of-bag predictions of the training rows (regression), shape (n_samples,)."""
        self._check_task("regression", "oob_prediction_")
        return self._oob()[:, 0]

    @property
    def oob_score_(self) -> float:
        """Accuracy (classification) or R² (regression) of the out-of-bag estimates.

        Computed from the recorded leaves and in-bag counts on first use
        (there is no ``oob_score`` parameter: every bootstrap forest has one).
        """
        forest_predict.check_supervised(self, "oob_score_")
        return forest_predict.oob_score(self, self._oob())

    @property
    def feature_importances_(self) -> np.ndarray:
        """Impurity-based importances, shape (n_features,), summing to 1.

        The mean of the trees' normalised impurity decreases (trees that
        are a single leaf left out), normalised again: as scikit-learn's
        forests.  For an unsupervised forest, how much each feature tells the
        data from its synthetic copy.
        """
        self._check_fitted()
        per_tree = self.tree_importances_
        if per_tree is None:
            raise NotFittedError(
                "this forest was loaded from a store written before importances were saved; "
                "fit it again to get feature_importances_"
            )
        return forest_predict.feature_importances(per_tree, self.node_counts_)

    def _check_method(self, method: str) -> None:
        """A proximity method this fitted forest can give (out-of-bag ones need bootstrap)."""
        C.check_choice("method", method, (*C.PROXIMITY_METHODS, *WEIGHTINGS))
        if method in WEIGHTINGS:  # no in-bag counts read
            return
        why = getattr(self, "no_inbag_", None)  # a model fitted elsewhere, bagging unknown
        if why is not None and method in C.OUT_OF_BAG_METHODS:
            raise ParameterError(
                f"method={method!r} needs each row's in-bag counts, and those of this "
                f"{type(self.model_).__name__} cannot be known: {why}; use method='original'"
            )
        C.check_out_of_bag(method, bool(self.params_["bootstrap"]))

    def _check_fitted(self) -> None:
        if not hasattr(self, "leaves_"):
            raise NotFittedError("this ProximityForest is not fitted yet; call fit(X, y) first")

    def _check_nodes(self, what: str) -> None:
        self._check_fitted()
        if self.nodes_ is None and self._outside() is not None:
            raise NotFittedError(
                f"this ProximityForest was made by from_model() from a "
                f"{type(self.model_).__name__}, whose trees stay in the model; {what} needs "
                "distforest's own tree nodes: use the model itself, or fit a ProximityForest"
            )
        if self.nodes_ is None:
            raise NotFittedError(
                f"this ProximityForest was fitted with fit_leaves(), which keeps no tree "
                f"nodes; {what} needs them: fit it with fit(X, y)"
            )

    # -- storing ------------------------------------------------------------

    _store_requires = ("leaves", "inbag", "forest")
    _store_hint = "fit it again"
    _stored_fields = (
        *INPUT_FIELDS,
        Field(
            "input.categories",
            "categories_",
            encode=lambda c: {k: [str(v) for v in c[k]] for k in c},
            decode=lambda c: {k: tuple(v) for k, v in c.items()},
        ),
        Field("input.target_name", "target_name_"),
        Field("input.id_name", "id_name_", default=None),
        Field("task", "task_"),
        Field("classes", "classes_", encode=_class_labels, decode=as_list),
        Field("n_trees", encode=lambda forest: int(forest.leaves_.shape[1])),
        Field("fit_id", "fit_id_"),
    )
    _stored_arrays = (
        Array("leaves", "leaves_"),
        Array("inbag", "inbag_"),
        # None: loaded from a store written before importances were kept
        Array("tree_importances", "tree_importances_", rows=False, optional=True),
        Array("target", "y_", rows=False, optional=True),
    )

    def _check_saveable(self) -> None:
        if self._outside() is None:  # a model's forest: its rows' arrays, the trees stay in it
            self._check_nodes("save()")

    def _row_ids(self) -> dict[str, Any]:
        return {"ids": self.sample_ids_, "id_name": self.id_name_}

    def _array_attrs(self, name: str) -> dict[str, Any] | None:
        return {"classes": _class_labels(self.classes_)} if name == "target" else None

    def _save_parts(self, rs: RunStore, tile_size: int) -> None:
        if self.nodes_ is None:  # from_model: the trees stay in the model (not loadable)
            rs.update_attrs(outside_model=type(self.model_).__name__)
            return
        rs.write_forest(self.nodes_, self.node_counts_, self.seeds_)

    def _load_parts(self, rs: RunStore) -> None:
        nodes = rs.read_forest()
        self.node_counts_ = np.diff(nodes.pop("node_offset"))
        self.seeds_ = nodes.pop("seed")
        self.nodes_ = {f: nodes[f] for f in NODE_FIELDS}
        self.sample_ids_ = rs.read("sample") if self.id_name_ is not None else None

    @classmethod
    def from_store(cls, store: str | Path) -> ProximityForest:
        """Deprecated alias of :meth:`load` (kept for code written before ``load``)."""
        warnings.warn(
            "ProximityForest.load is deprecated; use ProximityForest.load(store)",
            DeprecationWarning,
            stacklevel=2,
        )
        return cls.load(store)

    def _same_as_stored(self, rs: RunStore) -> bool:
        """Whether ``rs`` holds this very forest, saved by an earlier fit.

        The same parameters and seed on the same input give the same forest
        (determinism), so re-running ``fit`` and ``proximity(store=...)``, as a
        notebook cell run twice does, finds its store instead of refusing it.
        Checked on the provenance (parameters with the seed's entropy, input
        fingerprint, task, classes) and on the saved leaves and in-bag counts.
        """
        attrs = rs.attrs
        if "fit_id" not in attrs or not {"leaves", "inbag"} <= set(rs.group):
            return False
        mine = json.loads(json.dumps(self._provenance(), default=str))
        keys = ("params", "input", "task", "classes", "n_trees")
        if any(attrs.get(k) != mine[k] for k in keys):
            return False
        return bool(
            np.array_equal(rs.read("leaves"), self.leaves_)
            and np.array_equal(rs.read("inbag"), self.inbag_)
        )

    # -- proximities --------------------------------------------------------

    def proximity(
        self,
        method: Any = "original",
        store: str | Path | None = None,
        *,
        X: Any = None,
        overwrite: bool = False,
        max_in_memory: int | None = None,
    ) -> xr.DataArray:
        """Pairwise proximity of the training rows, or of new rows ``X`` to them.

        ``pf.proximity(X_new)`` (an array or DataFrame first) or
        ``pf.proximity("rfgap", X=X_new)``: the ``(n_new, n_train)`` proximity
        of new rows, out of bag in every tree (see
        :mod:`distforest.forests.new_rows`); stored as ``cross_proximity``
        (``_oob``, ``_rfgap``) in a store of its own, which holds the new
        rows' ``leaves`` too.  In memory when ``n_new * n_train`` is at most
        the in-memory limit
        (:mod:`distforest.io.in_memory`).

        Parameters
        ----------
        method : {"original", "oob", "rfgap"}, default "original"
            ``original``: fraction of trees in which two rows share a leaf
            (Breiman); ``oob``: the same over the trees where both rows are out
            of bag (R's ``oob.prox``); ``rfgap``: RF-GAP (Rhodes et al. 2023),
            rows sum to 1, not symmetric, zero diagonal.  Stored as
            ``proximity``, ``proximity_oob`` and ``proximity_rfgap``.
        store : str, Path or None
            Zarr store to write (tile by tile, one Dask task per tile).  The
            forest, ``leaves`` and ``inbag`` are saved with it.  ``None``
            computes a small in-memory matrix (at most the in-memory limit).
        X : array-like, DataFrame, path or Table, optional
            New rows (the training features): their proximity to the
            training rows instead.
        overwrite : bool
            Replace an existing store written by another fit.
        max_in_memory : int, optional
            Without a store, refuse matrices of more than ``max_in_memory ** 2``
            cells; default the ``distforest.in-memory-cells`` setting
            (:mod:`distforest.io.in_memory`, 100,000,000 cells).

        Returns
        -------
        xarray.DataArray
            Dims ``(sample_i, sample_j)``, float32; lazy and Zarr-backed when
            ``store`` is given.
        """
        if not isinstance(method, str):  # pf.proximity(X_new)
            method, X = "original", method
        if method in WEIGHTINGS:
            return self._weighted_proximity(method, store, X=X, overwrite=overwrite,
                                            max_in_memory=max_in_memory)  # fmt: skip
        if X is not None:
            from distforest.forests.new_rows import cross_proximity

            return cross_proximity(self, X, method, store, overwrite=overwrite,
                                   max_in_memory=max_in_memory)  # fmt: skip
        self._check_fitted()
        self._check_method(method)
        n = self.n_samples_
        if store is None:
            check_in_memory(n, n, what="proximity", itemsize=4, store="proximity.zarr",
                            max_in_memory=max_in_memory)  # fmt: skip
            values = proximity_in_memory(
                np.asarray(self.leaves_), np.asarray(self.inbag_), method, self.params_["tile_size"]
            )
            import xarray as xr  # on use: fitting and writing tiles do without it

            rows = np.arange(n) if self.sample_ids_ is None else np.asarray(self.sample_ids_)
            coords = {"sample_i": rows, "sample_j": rows}
            return xr.DataArray(values, dims=("sample_i", "sample_j"), coords=coords,
                                name=ARRAY_NAMES[method], attrs={"method": method})  # fmt: skip
        rs = self._open_or_create(store, overwrite)
        self.write_proximity(rs, method)
        complete_output(rs)
        return rs.dataset()[ARRAY_NAMES[method]]

    def _weighted_proximity(
        self, method: str, store: str | Path | None, *, X: Any, overwrite: bool,
        max_in_memory: int | None,
    ) -> xr.DataArray:  # fmt: skip
        """:meth:`proximity` with ``method="kerf"`` or ``"boosted"`` (a weight per row and
        tree): in memory here, stored by :meth:`write_proximity`."""
        import xarray as xr

        from distforest.forests.outside import weighted_in_memory

        self._check_fitted()
        if X is not None:
            raise ParameterError(
                f"method={method!r} is computed among the training rows only; for new rows "
                "use method='original' (or 'rfgap')"
            )
        if store is not None:
            rs = self._open_or_create(store, overwrite)
            self.write_proximity(rs, method)
            complete_output(rs)
            return rs.dataset()[ARRAY_NAMES[method]]
        n = self.n_samples_
        check_in_memory(n, n, what="proximity", itemsize=4, store="proximity.zarr",
                        max_in_memory=max_in_memory)  # fmt: skip
        values = weighted_in_memory(method, self.leaves_, self.node_counts_, self._outside(),
                                    self.params_["tile_size"])  # fmt: skip
        rows = np.arange(n) if self.sample_ids_ is None else np.asarray(self.sample_ids_)
        return xr.DataArray(values, dims=("sample_i", "sample_j"), name=ARRAY_NAMES[method],
                            coords={"sample_i": rows, "sample_j": rows},
                            attrs={"method": method})  # fmt: skip

    def proximity_neighbors(
        self,
        k: int,
        method: str = "original",
        store: str | Path | None = None,
        *,
        include_self: bool = False,
        overwrite: bool = False,
        block_rows: int | None = None,
        X: Any = None,
    ) -> xr.Dataset:
        """Every training row's ``k`` nearest rows by proximity, exact, without the n x n matrix.

        Sorted by proximity descending, ties to the smaller row number; a row
        with fewer than ``k`` non-zero proximities is completed with the rows of
        proximity 0 of smallest row number (the top k of the dense row).  The
        values are the dense matrix's, bit for bit.  See
        :mod:`distforest.forests.proximity_neighbors`.

        Parameters
        ----------
        k : int
            Neighbours a row (at most n - 1, or n with ``include_self``).
        method : {"original", "oob", "rfgap"}, default "original"
            As in :meth:`proximity`.
        store : str, Path or None
            Zarr store to write ``neighbors_index`` and ``neighbors_proximity``
            into (with the forest, as :meth:`proximity` does), resumable by row
            block; ``None`` computes them in memory.
        include_self : bool
            Let a row be its own neighbour (with its diagonal value).
        overwrite : bool
            Replace an existing store written by another fit.
        block_rows : int or None
            Rows per task (and per stored chunk); None: from n (256 to 4,096,
            at least 64 tasks).  The result does not depend on it.
        X : array-like, DataFrame or path, optional
            New rows: each new row's ``k`` nearest training rows by the
            proximity of :meth:`proximity` with ``X`` (``original`` or
            ``rfgap``; a new row is out of bag in every tree), in memory
            (``store`` None), the same values as the dense cross-proximity.

        Returns
        -------
        xarray.Dataset
            ``index`` (sample, neighbor) int64 and ``proximity`` (sample,
            neighbor) float32; lazy and Zarr-backed when ``store`` is given.
        """
        from distforest.forests.proximity_neighbors import forest_neighbors, new_rows_neighbors

        if X is not None:
            return new_rows_neighbors(self, X, k, method, store, block_rows=block_rows)
        return forest_neighbors(self, k, method, store, include_self=include_self,
                                overwrite=overwrite, block_rows=block_rows)  # fmt: skip

    def leaf_mass(self) -> np.ndarray:
        """Total in-bag count of each row's leaf in each tree (RF-GAP's M_i(t)).

        Returns
        -------
        ndarray of float32, shape (n_samples, n_estimators)
        """
        self._check_fitted()
        return tiles.leaf_mass(self.leaves_, self.inbag_)

    def product(
        self, V: Any, method: str = "original", *, rows: Any = None, new_rows: Any = None
    ) -> np.ndarray:
        """``P @ V`` without forming P (per-tree leaf sums, Dask tasks over tree batches).

        Parameters
        ----------
        V : array-like, shape (n_samples, k) or (n_samples,)
            Values of the training rows.
        method : {"original", "oob", "rfgap"}
            ``oob`` is the row-normalised out-of-bag proximity (see
            :mod:`distforest.kernels.leafsums`).
        rows : array-like of int, optional
            Only these rows of the result.
        new_rows : array-like, optional
            Feature rows not in the training data: returns their proximity
            to the training rows times V (new rows are out of bag everywhere).

        Returns
        -------
        ndarray of float64
        """
        from distforest.forests.products import product_session

        self._check_fitted()
        self._check_method(method)
        V = np.asarray(V, dtype=np.float64)
        if V.shape[0] != self.n_samples_:
            raise InputError(
                f"V has {V.shape[0]} rows but the forest was fitted on {self.n_samples_}"
            )
        new_leaves = None if new_rows is None else self.apply(new_rows)
        with product_session(self) as session:
            return session.product(
                V,
                method,
                rows=None if rows is None else np.asarray(rows, dtype=np.int64),
                new_leaves=new_leaves,
            )

    def write_proximity(self, rs: RunStore, method: str = "original") -> dict[str, int]:
        """Write a proximity matrix into an open store tile by tile, resuming if possible.

        Tiles already marked in the store's done record (by an earlier,
        interrupted call on the same fit) are skipped.  The store is not
        marked complete: the caller does that when its whole run is done.

        Parameters
        ----------
        rs : RunStore
            A store saved from this forest (same ``fit_id``), opened for writing.
        method : {"original", "oob", "rfgap"}

        Returns
        -------
        dict
            ``tiles`` (planned), ``skipped`` (already done) and ``bytes`` written.
        """
        self._check_fitted()
        self._check_method(method)
        rs.check_fit(self.fit_id_, f"store {rs.path!r} holds a forest that belongs",
                     "save this forest to a new store first")  # fmt: skip
        if method in WEIGHTINGS:
            return self._write_weighted(rs, method)
        with self._runner(self._fitted_cells()) as runner:
            return tiles.write_proximity(
                runner, rs, method, self.params_["tile_size"],
                identity={"fit_id": self.fit_id_},
                attrs={"n_trees": int(self.leaves_.shape[1])},
                progress=self._report("tiles"),
            )  # fmt: skip

    def _write_weighted(self, rs: RunStore, method: str) -> dict[str, int]:
        """:meth:`write_proximity` of ``kerf`` / ``boosted``: the tile tasks look each row's
        weight up in a per-leaf table (:func:`~distforest.forests.outside.write_weighted`)."""
        from distforest.forests.outside import write_weighted

        with self._runner(self._fitted_cells()) as runner:
            return write_weighted(runner, rs, method, self.node_counts_, self._outside(),
                                  self.params_["tile_size"], fit_id=self.fit_id_,
                                  progress=self._report("tiles"))  # fmt: skip


def grow_forest_batch(
    X: np.ndarray, y: np.ndarray | None, seeds: np.ndarray, *, params: TreeParams,
    keep_nodes: bool, route: bool = True, sample_weight: np.ndarray | None = None,
    refine: RefineRule | None = None,
) -> GrownBatch:  # fmt: skip
    """The fit driver's grower of a :class:`ProximityForest`: one batch of trees, its rows'
    leaves and in-bag counts (:func:`~distforest.kernels.trees.fit_tree_batch`); with
    ``route=False`` the in-bag counts only (:func:`~distforest.kernels.trees.grow_nodes`,
    the same trees: :func:`route_forest_rows` gives the leaves by row chunks).  With
    ``refine``, the crowded leaves of every tree are split further on the rows they
    hold (:func:`~distforest.forests.refine.refine_grown`; every row routed here)."""
    if y is not None and y.dtype.kind in "iu":  # class codes: the trees see int64 codes
        y = y.astype(np.int64, copy=False)
    if not route:
        grown = grow_nodes(X, y, seeds, params, sample_weight)
        return GrownBatch(
            rows={"inbag": grown.inbag},
            trees={"node_counts": grown.node_counts, "importances": grown.importances},
            nodes=grown.nodes,
        )
    if refine is not None:
        assert y is not None  # refine_rule refuses unsupervised forests
        X = tree_input(X)
        batch = refine_grown(fit_tree_batch(X, y, seeds, params, True), X, y, seeds, refine)
        if not keep_nodes:
            batch = TreeBatch(batch.leaves, batch.inbag, batch.node_counts, {},
                              batch.importances)  # fmt: skip
    else:
        batch = fit_tree_batch(X, y, seeds, params, keep_nodes, sample_weight)
    return GrownBatch(
        rows={"leaves": batch.leaves, "inbag": batch.inbag},
        trees={"node_counts": batch.node_counts, "importances": batch.importances},
        nodes=batch.nodes,
    )


def route_forest_rows(X: np.ndarray, nodes: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The fit driver's router of a :class:`ProximityForest`: the leaves of a chunk of rows
    in every tree (scikit-learn's rule, :func:`~distforest.kernels.apply.apply_nodes`)."""
    return {"leaves": apply_nodes(X, dict(nodes))}


def _warn_empty_features(table: Table) -> None:
    """One warning naming the features with no value at all (no tree can split on them)."""
    empty = np.isnan(table.X).all(axis=0) if table.n_samples else np.zeros(0, dtype=bool)
    warn_empty_features([table.feature_names[j] for j in np.flatnonzero(empty)], stacklevel=3)
