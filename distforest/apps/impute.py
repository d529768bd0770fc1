"""Missing-value imputation from random-forest proximities, matrix-free.

The one-forest modes (``rfimpute``: R's rfImpute; ``rfgap``, ``original``,
``oob``): start from the column median (numeric) or most frequent level
(categorical), R's ``na.roughfix``; then, ``iterations`` times, fit a
:class:`~distforest.forests.ProximityForest` on the current filled data and
replace every *originally* missing cell:

- numeric column c, row i: ``sum_j P_ij m_jc x_jc / sum_j P_ij m_jc``, the
  proximity-weighted mean of the column's observed values (``m`` is the
  observed mask, so a row never votes for its own missing cell);
- categorical column c: the level l with the largest ``sum_j P_ij m_jc
  [x_jc = l]`` (``categorical_vote="sum"``), or that sum divided by the
  number of observed rows at level l (``"mean"``, R's ``rfImpute``).

All columns of one iteration come from ONE matrix-free product
``P @ V`` (:class:`~distforest.forests.products.ProximityProducts`) with
``V = [m_c (x_c - median_c), m_c]`` per numeric column and ``m_c [x_c = l]``
per observed level of a categorical column, restricted to the rows that
have a missing cell.  P (n x n) is never formed: the cost is O(n T k) per
iteration for T trees and k columns of V.
"""

from __future__ import annotations

import contextlib
import logging
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from sklearn.base import TransformerMixin

from distforest.apps.column_impute import (
    ColumnSettings,
    Regrowth,
    impute_by_column,
    impute_new_rows,
    regrow_forests,
    resolve_max_samples,
    stopping_tolerance,
)
from distforest.errors import ChangedMeaningWarning, InputError, NotFittedError, ParameterError
from distforest.forests import constraints as C
from distforest.forests._estimator import DaskEstimator
from distforest.forests.targets import encode_target, resolve_task
from distforest.io import Table
from distforest.io.encoding import (
    EncodedTable,
    decode_output,
    encode_like,
    encode_table,
    fingerprint,
)
from distforest.kernels.imputation import (
    build_v,
    change_statistics,
    plan_columns,
    rfimpute_mtry,
    start_values,
    update_cells,
)
from distforest.kernels.trees import tree_input
from distforest.parallel.execution import Runner, current_execution, use_execution
from distforest.parallel.tasks import release_memory

if TYPE_CHECKING:  # imported on use: the column-aware default needs neither (quick start)
    from distforest.forests.proximity_forest import ProximityForest

logger = logging.getLogger("distforest")

#: ``progress(stage, done, total)``: stage "fit" (tree batches of the current forest,
#: from ProximityForest) and "impute" (in fit: the tree batches of every forest of every
#: pass, :class:`FitTasks`; in transform: finished iterations).
Progress = Callable[[str, int, int], None]

#: Parameters handed to each iteration's :class:`ProximityForest` as they are.
FOREST_PARAMS = ("task", "kind", "min_samples_leaf", "max_depth", "batch_size", "random_state")
#: Defaults that depend on the proximity: (column, rfimpute, the other one-forest modes).
#: rfimpute's are R's ``rfImpute(iter=5, ntree=300)``, its ``mtry`` (``max_features``)
#: R's rule for the task (:func:`~distforest.kernels.imputation.rfimpute_mtry`).
MODE_DEFAULTS: dict[str, tuple[Any, Any, Any]] = {
    "iterations": (10, 5, 5),
    "n_estimators": (35, 300, 100),
    "max_features": (0.5, "mtry", 1),
    "kind": ("extra-trees", "random-forest", "extra-trees"),
    "categorical_vote": ("sum", "mean", "sum"),
}
#: What ``proximity="rfimpute"`` named before it became R's rfImpute (told once per fit).
RENAMED_RFIMPUTE = (
    "proximity='rfimpute' is now R's rfImpute (random-forest trees on bootstrap samples, "
    "mtry = floor(sqrt(p)) or floor(p/3), Breiman's proximity, 5 iterations of 300 trees); "
    "before, it named RF-GAP weights with extra-trees of one feature per split, which is "
    "proximity='rfgap' (same results as the old 'rfimpute'); the default is proximity='column'"
)

#: rfImpute keeps the last forest's nodes (for transform) when rows x trees is at most
#: this; above it (hundreds of MB of nodes) the forest keeps only leaves and in-bag
#: counts, and the first transform of new rows grows it again from its seed and input
#: (the same trees: the seed fixes them).
KEEP_NODES_CELLS = 10_000_000

#: Use all rows of the product (and slice) when more than this share of the
#: rows has a missing cell: cheaper than sending a row index to every task.
_ALL_ROWS_SHARE = 0.5


class FitTasks:
    """The ``"impute"`` progress of a fit: the tasks of all its forests as one count.

    A fit grows ``forests`` forests of as many tasks (tree batches) each: every
    pass's forest (the one-forest modes), or every column's forest of every pass
    (``column``).  Called with one forest's ``(done, total)``, it reports the tasks
    done over the forests so far out of ``forests x total``: the stage's count
    moves with every batch, however many passes there are.

    Parameters
    ----------
    report : callable or None
        ``report(done, total)`` (None: nothing is counted).
    forests : int
        Forests the fit grows at most.
    """

    def __init__(self, report: Callable[[int, int], None] | None, forests: int) -> None:
        self.report, self.forests = report, forests
        self.finished = 0  # tasks of the forests that ended
        self.total = 0  # known from the first forest's tasks

    def __call__(self, done: int, total: int) -> None:
        if self.report is None:
            return
        if not self.total:
            self.total = self.forests * total
            self.report(0, self.total)
        if done:
            self.report(min(self.finished + done, self.total), self.total)
        if done >= total:
            self.finished += total

    @contextlib.contextmanager
    def counting(self) -> Iterator[None]:
        """A block whose forests' ``"fit"`` tasks are counted (and still reported as
        ``"fit"``): the current execution's progress, wrapped."""
        exe = current_execution()
        outer = exe.progress
        if self.report is None or outer is None:
            yield
            return

        def progress(stage: str, done: int, total: int) -> None:
            outer(stage, done, total)
            if stage == "fit":
                self(done, total)

        with use_execution(replace(exe, progress=progress)):
            yield

    def close(self) -> None:
        """The fit ended: passes that stopped early end the count at the tasks done."""
        if self.report is not None and 0 < self.finished < self.total:
            self.report(self.finished, self.finished)


# ---------------------------------------------------------------------------
# The estimator
# ---------------------------------------------------------------------------


class ProximityImputer(TransformerMixin, DaskEstimator):
    """Impute missing values from random-forest proximities, matrix-free.

    Two ways to get the weights of the observed rows:

    - ``proximity="column"`` (default): column-aware.  Each iteration fits,
      for every column c with a missing cell (fewest missing first), a
      forest predicting c from the other columns (and the target, when
      given) on the rows where c is observed; each missing cell of c becomes
      the RF-GAP proximity-weighted mean of c's observed values (numeric)
      or the level with the largest weighted vote (categorical).  A missing
      row is out of bag in every tree, so that mean is the forest's
      prediction: computed from per-tree leaf sums, never an n x n matrix
      (:mod:`distforest.kernels.column_trees`).  Iterations (passes) stop
      on missForest's rule: when the change between passes grows, that pass
      is discarded (or after ``iterations``).  The result is the mean
      (numeric) or majority level (categorical) of the kept passes after
      the first, which starts from the medians: each pass refits every
      forest from new seeds, so the mean is a forest of passes x
      ``n_estimators`` trees for the time of the passes
      (:mod:`distforest.kernels.pass_mean`).
    - ``proximity="rfimpute"``: R ``randomForest``'s ``rfImpute``.  Start
      from the column median / most frequent level (``na.roughfix``); then
      ``iterations`` (5) times grow a random forest (``n_estimators``: 300
      trees, bootstrap samples, best splits among ``floor(sqrt(p))``
      features for classification or ``floor(p/3)`` for regression) on the
      current filled data (supervised when a target is given, else
      ``task="unsupervised"``: Breiman's synthetic second class) and replace
      each originally missing cell by the proximity-weighted mean of the
      column's originally observed values (numeric) or the level with the
      largest proximity-weighted vote (categorical), the proximity being
      Breiman's: the share of trees in which two rows share a leaf, over all
      rows.  Each iteration is one matrix-free product ``P @ V`` over the
      rows with a missing cell.  Until this version ``rfimpute`` named the
      ``rfgap`` mode below; it warns (:class:`~distforest.errors.ChangedMeaningWarning`).
    - ``proximity="rfgap"`` (or ``"original"``, ``"oob"``): the same loop with
      other forests and weights: 100 extra-trees of one random feature per
      split, weighted by the named proximity.

    Parameters
    ----------
    iterations : int or None, default None
        ``column``: the most iterations (None: 10; fewer when the rule stops
        them; on tables of more than 50,000 rows they also stop, keeping the
        last, once the change shrank by less than 5 %).  rfImpute: forest
        refits (R's ``iter``; None: 5).
        ``iterations=1`` gives the first imputation from the median-filled
        data.
    proximity : {"column", "rfimpute", "rfgap", "original", "oob"}, default "column"
        ``column``: one forest per column (above).  ``rfimpute``: R's rfImpute
        (above).  The others refit one forest for all columns, weighted by:
        ``rfgap`` (RF-GAP, Rhodes et al. 2023: the in-bag rows of the leaves
        an out-of-bag row falls into, each weighted by its bootstrap count
        over the leaf's total), ``original`` (Breiman's share of trees in
        which two rows share a leaf, as ``rfimpute``) or ``oob`` (the same
        counted over the trees where both rows are out of bag, divided by the
        number of trees where the imputed row is).  Which to use:
        ``benchmarks/results/imputation.md``.
    categorical_vote : {"auto", "sum", "mean"}, default "auto"
        One-forest modes only.  ``sum``: the level with the largest
        proximity-weighted sum (Breiman's description).  ``mean``: that sum
        divided by the level's number of observed rows (what R's ``rfImpute``
        code computes, "the category with the largest average proximity"):
        favours rare levels.  ``auto``: ``mean`` for ``rfimpute``, ``sum``
        for the others.
    categorical_features : sequence of str or int, optional
        Columns to treat as categorical besides text columns and pandas
        ``category`` columns (which always are), e.g. integer-coded
        factors.  Names, or positions among the feature columns.
    n_estimators : int or None, default None
        Trees per forest (None: 35 per column and pass for ``column``, whose
        result averages the passes; 300 for ``rfimpute``, R's ``ntree``; 100
        for the other one-forest modes).
    task : {"auto", "classification", "regression", "unsupervised"}, default "auto"
        ``auto`` uses the target when one is given.  ``column``: the target
        (class codes or values) is one more input of every column's trees,
        ``unsupervised`` leaves it out.  rfImpute: the forest's task.
    kind : {"auto", "random-forest", "extra-trees"}, default "auto"
        ``auto``: random-forest for ``rfimpute`` (the only kind it accepts),
        extra-trees for the others.  ``column``: extra-trees are grown on all
        observed rows, random forests on bootstrap samples (scikit-learn's
        defaults for each).
    max_features : {"auto", "sqrt", "log2"}, int, float or None, default "auto"
        Inputs tried per split.  ``auto``: half of them (0.5) for ``column``
        (with 35 trees: the time of a third with 50 trees, and closer to the
        extra-trees default for regression, all inputs; see
        ``benchmarks/results/imputation.md``); R's ``mtry`` for ``rfimpute``
        (``floor(sqrt(p))``, ``floor(p/3)`` for regression, at least 1); 1
        for ``rfgap``/``original``/``oob`` (one random feature and a random
        threshold per split, grown until the leaves are pure in the class:
        proximities that reflect closeness in *all* features, NRMSE 0.372
        instead of 0.453 with ``"sqrt"`` on Vehicle at 20 % MCAR).  With
        ``max_features=1`` keep ``min_samples_leaf=1``: a random split that
        leaves too few rows on one side ends the node.
    min_samples_leaf, max_depth
        The trees'.
    max_samples : "auto", int, float or None, default "auto"
        ``column`` only: rows each tree grows on, drawn per tree from the
        column's observed rows (without replacement for extra-trees; the
        bootstrap sample's size for random forests, as scikit-learn's
        ``max_samples``).  An int is a number of rows (at most the observed
        ones), a float in (0, 1] a share of them, None every observed row.
        ``auto``: every observed row on tables of at most 50,000 rows, 20,000
        rows per tree on larger ones (so the time and memory of a tree stop
        growing with n).  The rows a tree did not draw are out of bag for it
        (RF-GAP weight 0); every missing cell is still the RF-GAP weighted
        mean over all the column's trees.  Measured at 100,000 rows
        (``benchmarks/results/scale.md``): about +3 % NRMSE for 4x less time.
    batch_size : int or None
        Trees per task (None: ``column`` cuts each column's trees into 8
        tasks; rfImpute as :class:`~distforest.forests.ProximityForest`).
    random_state : int or None, default None
        Seed; every tree's seed is derived from it, so the same value gives
        the same imputation on any cluster and in process.

    Where it runs is not a parameter: ``with distforest.execution(client=c):``
    or :meth:`set_execution`; without them the current ``distributed``
    client; without one, inputs of at most ``distforest.in-process-cells`` (2 million)
    cells run in this process (``column``: on one thread per core), larger
    ones on a LocalCluster started for the duration of a ``fit`` /
    ``transform`` call.  Progress stages: ``"fit"`` per tree batch of the
    current one-forest mode's forest, and ``"impute"``: in ``fit``, the tree
    batches of every forest of every pass as one count (every column's forest
    of every pass for ``column``; out of ``iterations`` passes, the count ends
    where it is when the passes stop early), in ``transform`` per finished
    iteration.

    Attributes
    ----------
    n_features_in_ : int
    feature_names_in_ : tuple of str
    categorical_ : ndarray of bool
        Per feature: imputed by vote (True) or weighted mean (False).
    categories_ : dict of str to ndarray
        Levels of each categorical feature (code k means ``categories_[name][k]``).
    statistics_ : ndarray
        Starting values: median, or the code of the most frequent level.
    n_missing_ : dict of str to int
        Missing (imputed) cells per feature in the training data.
    forest_ : ProximityForest or None
        rfImpute: the last forest, used by :meth:`transform` on new rows.  On
        more than ``KEEP_NODES_CELLS`` rows x trees (or after
        ``fit_transform(..., keep_nodes=False)``) it holds only leaves and
        in-bag counts after fit (``nodes_`` None: the driver keeps no tree
        nodes); the first :meth:`transform` of new rows grows it again, the
        same trees, from its seed and input.
    column_forests_ : dict of int to ColumnForest
        ``column``: the forests of the last kept iteration, by column position
        (columns without a missing value in fit have none).  When the
        forests would hold more than ``KEEP_NODES_CELLS`` rows x trees in
        all, fit keeps none (empty after fit: no tree reaches the driver);
        the first :meth:`transform` of new rows grows them again, the same
        trees, from their seeds and the float32 data at the start of the
        kept iteration (one iteration's time).
    task_ : str
        How the target was used ("classification", "regression" or
        "unsupervised").
    max_features_ : int, float or str
        Features tried per split by the forests (``rfimpute``: R's ``mtry``
        for ``task_`` and the number of features).
    n_iter_ : int
        Iterations run (0 when the data had no missing value).  With
        ``column``, the last one may be discarded by the stopping rule.
    history_ : list of dict
        Per iteration: seconds and the relative change of the imputed values
        (numeric: ``sum (new - old)^2 / sum new^2``; categorical: share of
        changed cells); rfImpute adds ``fallbacks`` (cells whose weights
        summed to 0), ``column`` adds ``kept`` (False for an iteration the
        stopping rule discarded).
    random_state_ : int
        Root entropy used (equals ``random_state`` when given).

    Notes
    -----
    Edge cases:

    - **Missing target values**: an :class:`~distforest.errors.InputError`
      naming the rows; drop them or impute without a target.
    - **A column with no observed value**: an InputError naming it; there
      is nothing to average (drop the column).
    - **A column missing in every row of one class** (rfImpute): a cell
      whose weights sum to 0 (possible with ``rfgap``/``oob``) keeps its
      starting value; ``history_[k]["fallbacks"]`` counts them.
    - **No missing value at all**: ``fit_transform`` returns the data
      unchanged.  rfImpute still grows one forest so that :meth:`transform`
      can impute new rows; ``column`` grows none, and new rows get the
      training medians / most frequent levels.
    - **New rows and the target** (``column``): :meth:`transform` does not
      know the new rows' target; the trees route them as if it were missing
      (scikit-learn's rule: to the child that had more training rows).

    Output follows the input: a DataFrame (or a path, read as one) gives a
    DataFrame with the same columns, order and dtypes, categoricals as their
    labels (integer and boolean columns get the weighted mean rounded); a
    NumPy array gives an array; a :class:`~distforest.io.Table` a Table.  A
    target given as a column name (``y="Class"``) stays in the output
    unchanged.

    Examples
    --------
    >>> imp = ProximityImputer(random_state=0)              # doctest: +SKIP
    >>> filled = imp.fit_transform(df, y="Class")            # doctest: +SKIP
    >>> new_filled = imp.transform(new_df)                   # doctest: +SKIP
    """

    def __init__(
        self,
        iterations: int | None = None,
        *,
        proximity: str = "column",
        categorical_vote: str = "auto",
        categorical_features: Sequence[str | int] | None = None,
        n_estimators: int | None = None,
        task: str = "auto",
        kind: str = "auto",
        max_features: int | float | str | None = "auto",
        min_samples_leaf: int = 1,
        max_depth: int | None = None,
        max_samples: int | float | str | None = "auto",
        batch_size: int | None = None,
        random_state: int | None = None,
    ) -> None:
        self.iterations = iterations
        self.proximity = proximity
        self.categorical_vote = categorical_vote
        self.categorical_features = categorical_features
        self.n_estimators = n_estimators
        self.task = task
        self.kind = kind
        self.max_features = max_features
        self.min_samples_leaf = min_samples_leaf
        self.max_depth = max_depth
        self.max_samples = max_samples
        self.batch_size = batch_size
        self.random_state = random_state

    # -- parameters and cluster ------------------------------------------------

    _parameter_constraints: ClassVar[dict[str, C.Constraint]] = {
        "iterations": C.IMPUTE_ITERATIONS,
        "n_estimators": C.Int(1, none=True),
        "max_features": C.MaxFeatures(),
        "proximity": C.Choice(C.IMPUTE_PROXIMITIES),
        "categorical_vote": C.Choice(C.VOTES),
        "categorical_features": C.Checked("column names or positions, checked against X"),
        "max_samples": C.RowsPerTree(),
        # the parameters passed on to each ProximityForest: its own constraints
        **{name: C.FOREST_CONSTRAINTS[name] for name in FOREST_PARAMS},
        "kind": C.Choice(C.IMPUTE_KINDS),
    }

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True  # missing values are what it fills
        return tags

    def _check_combinations(self, params: dict[str, Any]) -> None:
        if params["max_samples"] != "auto" and params["proximity"] != "column":
            raise ParameterError(
                f"max_samples={params['max_samples']!r} sizes the trees of "
                f"proximity='column', not proximity={params['proximity']!r} (whose forest "
                "uses every row); remove max_samples or use proximity='column'"
            )
        if params["proximity"] == "rfimpute" and params["kind"] == "extra-trees":
            raise ParameterError(
                "kind='extra-trees' with proximity='rfimpute': R's rfImpute grows random-forest "
                "trees; remove kind (or set kind='random-forest'), or use proximity='rfgap' or "
                "'original' for extra-trees"
            )

    def _check_fitted(self) -> None:
        if not hasattr(self, "n_iter_"):
            raise NotFittedError(
                "this ProximityImputer is not fitted yet; call fit(X) or fit_transform(X) first"
            )

    def _settings(self) -> dict[str, Any]:
        """The validated parameters with the proximity's own defaults filled in."""
        params = self._validated()
        mode = {"column": 0, "rfimpute": 1}.get(params["proximity"], 2)
        for name, defaults in MODE_DEFAULTS.items():
            if params[name] is None or (name in ("max_features", "kind", "categorical_vote")
                                        and params[name] == "auto"):  # fmt: skip
                params[name] = defaults[mode]
        if params["max_features"] == "mtry" and hasattr(self, "max_features_"):
            params["max_features"] = self.max_features_  # R's rule, resolved in fit
        params["weights"] = "original" if params["proximity"] == "rfimpute" else params["proximity"]
        return params

    # -- fitting ----------------------------------------------------------------

    def fit(self, X: Any, y: Any = None) -> ProximityImputer:
        """Impute the training data and keep the last forest for new rows.

        Parameters
        ----------
        X : DataFrame, ndarray, path, Table or any input of :func:`distforest.io.load_table`
            Features; NaN (or an empty cell) is missing.
        y : array-like, str or None
            Target values, or the name of the target column of a DataFrame /
            file (kept unchanged in the output).  None: unsupervised forest.

        Returns
        -------
        self
        """
        self._fit(X, y)
        return self

    def fit_transform(self, X: Any, y: Any = None, *, keep_nodes: bool = True) -> Any:
        """Fit and return the imputed training data (same form as ``X``).

        Parameters
        ----------
        X, y
            As in :meth:`fit`.
        keep_nodes : bool, default True
            The one-forest modes: False never brings the last forest's nodes to
            this process, whatever its size (as above ``KEEP_NODES_CELLS``):
            :meth:`for_new_rows` grows it again into a temporary store, the same
            trees.  For a caller that fills new rows elsewhere (``distforest
            impute`` by partitions), whose driver then holds no tree.  ``column``
            ignores it (its forests' own rule).

        Returns
        -------
        DataFrame, ndarray or Table
        """
        data = self._fit(X, y, keep_nodes=keep_nodes)
        return self._feature_columns_only(decode_output(data, self._imputed.copy()))

    def _fit(self, X: Any, y: Any, keep_nodes: bool = True) -> EncodedTable:
        for name in ("max_features_",):  # a refit resolves them again
            self.__dict__.pop(name, None)
        params = self._settings()
        if params["proximity"] == "rfimpute":
            warnings.warn(RENAMED_RFIMPUTE, ChangedMeaningWarning, stacklevel=3)
        data = encode_table(X, y, self.categorical_features)
        missing = data.missing
        counts = missing.sum(axis=0)
        empty = [data.names[j] for j in np.flatnonzero(counts == data.X.shape[0])]
        if empty:
            raise InputError(
                f"{data.source}: column(s) {empty} have no observed value; there is nothing "
                "to impute them from: drop them (e.g. --drop on the command line)"
            )
        start = start_values(data.X, data.categorical)
        root = np.random.SeedSequence(params["random_state"])
        self.history_: list[dict[str, Any]] = []
        logger.info(
            f"imputing {int(counts.sum())} cells in {int((counts > 0).sum())} columns of "
            f"{data.source} ({params['proximity']} proximity)"
        )
        with self._runner(data.X.size) as runner:  # one cluster (or none) for all iterations
            if params["proximity"] == "column":
                X_cur = self._fit_columns(params, runner, data, start, int(root.entropy))  # type: ignore[arg-type]
            else:
                X_cur = self._fit_rfimpute(params, runner, data, start, root, keep_nodes)
        self.n_features_in_ = len(data.names)
        self.feature_names_in_ = data.names
        self.categorical_ = data.categorical.copy()
        self.categories_ = {data.names[j]: lv for j, lv in data.levels.items()}
        self.statistics_ = start
        self.n_missing_ = {name: int(c) for name, c in zip(data.names, counts, strict=True)}
        self.n_iter_ = len(self.history_)
        self.random_state_ = int(root.entropy)  # type: ignore[arg-type]  # an int
        self._train = replace(data, original=None, y=None)
        self._fingerprint = fingerprint(data.X, data.names)
        self._imputed = X_cur
        return data

    def _fit_columns(
        self,
        params: dict[str, Any],
        runner: Runner,
        data: EncodedTable,
        start: np.ndarray,
        entropy: int,
    ) -> np.ndarray:
        """Column-aware imputation: one forest per column, to missForest's stopping rule."""
        task = resolve_task(params["task"], data.y, data.target_name)
        extra, _ = encode_target(task, data.y)
        settings = self._column_settings(params, data.X.shape[0])
        settings = replace(settings, keep_nodes=settings.forest_cells(data.missing)
                           <= KEEP_NODES_CELLS)  # fmt: skip
        forests = params["iterations"] * int(data.missing.any(axis=0).sum())
        tasks = FitTasks(self._report("impute"), forests)
        fit = impute_by_column(
            runner,
            data.X,
            np.where(data.missing, start, data.X),
            data.categorical,
            extra,
            settings,
            max_iter=params["iterations"],
            entropy=entropy,
            progress=tasks,
        )
        tasks.close()
        self.history_ = fit.history
        self.forest_: ProximityForest | None = None
        self.column_forests_ = fit.forests
        self._column_regrow: Regrowth | None = fit.regrow
        self.task_ = task
        self.max_features_ = params["max_features"]
        self._extra_width = 0 if extra is None else 1
        return fit.imputed

    @staticmethod
    def _column_settings(params: dict[str, Any], n_rows: int) -> ColumnSettings:
        """The column forests' settings (``max_samples`` resolved for ``n_rows``)."""
        return ColumnSettings(
            n_estimators=params["n_estimators"],
            kind=params["kind"],
            max_features=params["max_features"],
            min_samples_leaf=params["min_samples_leaf"],
            max_depth=params["max_depth"],
            bootstrap=params["kind"] == "random-forest",
            batch_size=params["batch_size"],
            max_samples=resolve_max_samples(params["max_samples"], n_rows),
            tolerance=stopping_tolerance(n_rows),
        )

    def _routing_columns(self, params: dict[str, Any]) -> dict[int, Any]:
        """The kept column forests, grown again if fit kept none."""
        regrow = getattr(self, "_column_regrow", None)
        if regrow is not None:
            train = self._train
            settings = self._column_settings(params, train.X.shape[0])
            with self._runner(train.X.size) as runner:
                self.column_forests_ = regrow_forests(
                    runner, train.X, train.categorical, settings, self.random_state_, regrow
                )
            self._column_regrow = None
        return self.column_forests_

    def _fit_rfimpute(
        self,
        params: dict[str, Any],
        runner: Runner,
        data: EncodedTable,
        start: np.ndarray,
        root: np.random.SeedSequence,
        keep_nodes: bool = True,
    ) -> np.ndarray:
        """Breiman's rfImpute: one forest for all columns, refitted ``iterations`` times
        (``keep_nodes``: the last forest's nodes kept here when small enough)."""
        missing = data.missing
        counts = missing.sum(axis=0)
        if params["max_features"] == "mtry":  # R's rule: needs the task and the width
            task = resolve_task(params["task"], data.y, data.target_name)
            params["max_features"] = rfimpute_mtry(task, data.X.shape[1])
        self.max_features_ = params["max_features"]
        X_cur = np.where(missing, start, data.X)
        seeds = [
            int(c.generate_state(1, dtype=np.uint64)[0]) for c in root.spawn(params["iterations"])
        ]
        columns = [int(j) for j in np.flatnonzero(counts)]
        tasks = FitTasks(self._report("impute"), len(seeds) if columns else 1)
        forest: ProximityForest | None = None
        # only the last forest routes new rows (transform), and a large one is grown again
        # from its input when new rows come, rather than held here
        small = keep_nodes and data.X.shape[0] * params["n_estimators"] <= KEEP_NODES_CELLS
        self._regrow: tuple[int, Table] | None = None
        if not columns:  # nothing to impute: one forest, for transform on new rows
            forest = self._forest(params, seeds[-1])
            with tasks.counting():
                if keep_nodes:
                    forest.fit(data.table(X_cur))
                else:
                    self._regrow = (seeds[-1], data.table(tree_input(X_cur)))
                    forest.fit_leaves(data.table(X_cur))
        for k, seed in enumerate(seeds if columns else []):
            del forest  # free the last forest's trees before growing the next
            release_memory()
            last = k == len(seeds) - 1
            if last and not small:
                self._regrow = (seed, data.table(tree_input(X_cur)))  # float32: what trees see
            with tasks.counting():
                forest = self._iterate(params, seed, runner, data, X_cur, start, columns,
                                       keep_nodes=last and small)  # fmt: skip
        assert forest is not None
        self.forest_ = forest
        self.column_forests_ = {}
        self.task_ = forest.task_
        return X_cur

    def _iterate(
        self,
        params: dict[str, Any],
        seed: int,
        runner: Runner,
        data: EncodedTable,
        X_cur: np.ndarray,
        start: np.ndarray,
        columns: list[int],
        *,
        keep_nodes: bool,
    ) -> ProximityForest:
        """One rfImpute iteration in place on ``X_cur``: refit, one product, update.

        Without ``keep_nodes`` the forest keeps only its leaves and in-bag counts
        (what the product needs): its nodes never reach this process.
        """
        from distforest.forests.products import ProximityProducts

        tick = time.perf_counter()
        missing = data.missing
        rows = np.flatnonzero(missing.any(axis=1))
        layout = plan_columns(data.X, data.categorical, columns)
        forest = self._forest(params, seed)
        if keep_nodes:
            forest.fit(data.table(X_cur))
        else:
            forest.fit_leaves(data.table(X_cur))
        session = ProximityProducts(runner, forest.leaves_, forest.inbag_)
        V = build_v(data.X, layout, start)
        if rows.size > _ALL_ROWS_SHARE * data.X.shape[0]:
            R = session.product(V, params["weights"])[rows]
        else:
            R = session.product(V, params["weights"], rows=rows)
        cells = missing[rows][:, columns]
        before = np.where(cells, X_cur[rows][:, columns], 0.0)
        vote = params["categorical_vote"]
        fallbacks = update_cells(X_cur, rows, missing[rows], R, layout, start, start, vote)
        after = np.where(cells, X_cur[rows][:, columns], 0.0)
        change = change_statistics(before, after, data.categorical[columns])
        seconds = time.perf_counter() - tick
        self.history_.append(
            {
                "iteration": len(self.history_) + 1,
                "seconds": seconds,
                "change": change,
                "fallbacks": fallbacks,
            }
        )
        logger.info(
            f"iteration {len(self.history_)}/{params['iterations']}: {seconds:.1f} s, "
            f"change {change}, {fallbacks} cell(s) without weights"
        )
        return forest

    def _routing_forest(self, params: dict[str, Any]) -> ProximityForest:
        """The last rfImpute forest with its nodes, grown again if fit kept only leaves."""
        assert self.forest_ is not None
        if self.forest_.nodes_ is None and getattr(self, "_regrow", None) is not None:
            seed, table = self._regrow  # type: ignore[misc]
            with self._runner(table.X.size):
                self.forest_ = self._forest(params, seed).fit(table)
            self._regrow = None
        return self.forest_

    def for_new_rows(self) -> ProximityImputer:
        """A light copy of the fitted imputer, enough for :meth:`transform` of new rows.

        The forests that route new rows are grown again here first if fit kept
        none (their seeds fix them); the one-forest modes' forest then keeps its
        leaves and nodes in a temporary store (living as long as this imputer), so
        neither this process nor what is sent to the tasks holds them.  ``column``
        routes new rows through its column forests alone, so the training rows are
        dropped; the one-forest modes weigh the training rows' observed values, so
        they keep them.  The fitted result is dropped: no rows given later are "the
        training data".

        Returns
        -------
        ProximityImputer
            Sent to the tasks that fill row chunks (it is picklable).
        """
        import copy

        import dask

        self._check_fitted()
        params = self._settings()
        if self.forest_ is None:
            self._routing_columns(params)
        else:  # a forest grown again keeps its leaves and nodes in a temporary store
            with dask.config.set({"distforest.in-memory-cells": 1}):
                self._routing_forest(params)
        light = copy.copy(self)
        if self.forest_ is None:
            light._train = replace(self._train, X=self._train.X[:0])
        light._imputed = self._imputed[:0]
        light._fingerprint = ""  # no hash: rows given later are never the training data
        return light

    def _forest(self, params: dict[str, Any], seed: int) -> ProximityForest:
        """The forest of one iteration (it runs on the imputer's execution)."""
        from distforest.forests.proximity_forest import ProximityForest

        return ProximityForest(
            n_estimators=params["n_estimators"],
            task=params["task"],
            kind=params["kind"],
            max_features=params["max_features"],
            min_samples_leaf=params["min_samples_leaf"],
            max_depth=params["max_depth"],
            batch_size=params["batch_size"],
            random_state=seed,
        )

    # -- new rows -----------------------------------------------------------------

    def get_feature_names_out(self, input_features: Any = None) -> np.ndarray:
        """Names of the imputed columns: the training features, in order.

        Features of an array are named ``x0, x1, ...`` (scikit-learn's rule).
        With ``set_output(transform="pandas")`` (or polars) the imputed values
        of an array come back as a DataFrame with these columns; a DataFrame
        comes back as a DataFrame whatever the setting.

        Parameters
        ----------
        input_features : array-like of str, optional
            Must equal ``feature_names_in_`` when given (same count for arrays).

        Returns
        -------
        ndarray of object, shape (n_features,): one name per input feature
        """
        self._check_fitted()
        fitted = [str(c) for c in self.feature_names_in_]
        positional = fitted == [str(i) for i in range(len(fitted))]
        names = [f"x{i}" for i in range(len(fitted))] if positional else fitted
        if input_features is not None:
            given = [str(c) for c in input_features]
            if len(given) != len(names) or (not positional and given != fitted):
                raise InputError(
                    f"input_features {given} do not match the features seen in fit "
                    f"({fitted}); pass the same names, or None"
                )
            names = given
        return np.asarray(names, dtype=object)

    def _feature_columns_only(self, out: Any) -> Any:
        """The feature columns of a DataFrame result when pandas/polars output is set.

        A DataFrame may carry the target column through :meth:`transform`;
        scikit-learn's output wrapper names the columns by
        :meth:`get_feature_names_out`, so the target column is left out then.
        """
        from sklearn import get_config

        own = self.__dict__.get("_sklearn_output_config", {}).get("transform")
        setting = own or get_config()["transform_output"]
        if setting == "default" or not hasattr(out, "columns"):
            return out
        names = [c for c in out.columns if str(c) in set(map(str, self.feature_names_in_))]
        return out if len(names) == len(out.columns) else out[names]

    def transform(self, X: Any) -> Any:
        """Impute the missing cells of ``X`` (the training data or new rows).

        The training data itself (same values and missing cells) gets the
        result of :meth:`fit`.  New rows start from the training medians /
        most frequent levels.  ``column``: each missing cell of column c
        becomes the prediction of c's fitted forest (``column_forests_``, no
        refit), i.e. the RF-GAP weighted mean (vote) of the training rows'
        observed values, column by column and iterated to the same stopping
        rule (at most ``iterations``); columns that had no missing value in
        fit have no forest and keep the median / most frequent level, and the
        target input is routed as missing.  rfImpute: rows are routed through
        the last forest (``forest_``); each missing cell becomes the
        proximity-weighted mean (vote) of the training rows' *observed*
        values, new rows being out of bag in every tree; this repeats
        ``iterations`` times, the new rows' leaves moving as their filled
        values change.  Training rows are never changed by new ones.

        Parameters
        ----------
        X : DataFrame, ndarray, path or Table
            The training feature columns (a DataFrame may also hold the
            target column named in fit; it is kept unchanged).

        Returns
        -------
        DataFrame, ndarray or Table
            Same form as ``X``.
        """
        self._check_fitted()
        return self._feature_columns_only(self._transform(X))

    def _transform(self, X: Any) -> Any:
        params = self._settings()
        data = encode_like(X, self._train)
        if fingerprint(data.X, data.names) == self._fingerprint:
            return decode_output(data, self._imputed.copy())
        missing = data.missing
        X_cur = np.where(missing, self.statistics_, data.X)
        rows = np.flatnonzero(missing.any(axis=1))
        if rows.size == 0:
            return decode_output(data, X_cur)
        if self.forest_ is None:  # column-aware: route through the column forests
            local = data.X[rows]
            extra = np.full(rows.size, np.nan) if self._extra_width else None
            X_cur[rows] = impute_new_rows(
                self._routing_columns(params), local, self.statistics_, self.categorical_, extra,
                params["iterations"],
            )  # fmt: skip
            return decode_output(data, X_cur)
        from distforest.forests.products import ProximityProducts

        train, forest, stats = self._train, self._routing_forest(params), self.statistics_
        layout = plan_columns(train.X, train.categorical, range(len(train.names)))
        V = build_v(train.X, layout, stats)
        local, local_missing = X_cur[rows], missing[rows]
        report = self._report("impute")
        if report is not None:
            report(0, params["iterations"])
        with self._runner(local.size) as runner:
            session = ProximityProducts(runner, forest.leaves_, forest.inbag_)
            for k in range(params["iterations"]):
                leaves = forest.apply(Table(local, data.names))
                R = session.product(V, params["weights"], new_leaves=leaves)
                vote = params["categorical_vote"]
                update_cells(
                    local, np.arange(rows.size), local_missing, R, layout, stats, stats, vote
                )
                if report is not None:
                    report(k + 1, params["iterations"])
        X_cur[rows] = local
        return decode_output(data, X_cur)
