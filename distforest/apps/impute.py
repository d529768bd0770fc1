"""Missing-value imputation from random-forest proximities (Breiman's rfImpute), matrix-free.

Start from the column median (numeric) or most frequent level (categorical);
then, ``iterations`` times, fit a :class:`~distforest.forests.ProximityForest`
on the current filled data and replace every *originally* missing cell:

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

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, ClassVar

import numpy as np
from sklearn.base import TransformerMixin

from distforest.errors import InputError, NotFittedError
from distforest.forests import constraints as C
from distforest.forests._estimator import DaskEstimator
from distforest.forests.products import ProximityProducts
from distforest.forests.proximity_forest import ProximityForest
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
    start_values,
    update_cells,
)
from distforest.parallel.execution import Runner
from distforest.parallel.tasks import release_memory

logger = logging.getLogger("distforest")

#: ``progress(stage, done, total)``: stage "fit" (trees of the current forest,
#: from ProximityForest) and "impute" (finished iterations).
Progress = Callable[[str, int, int], None]

VOTES = ("sum", "mean")
#: Parameters handed to each iteration's :class:`ProximityForest` as they are.
FOREST_PARAMS = ("n_estimators", "task", "kind", "max_features", "min_samples_leaf",
                 "max_depth", "batch_size", "random_state")  # fmt: skip

#: Use all rows of the product (and slice) when more than this share of the
#: rows has a missing cell: cheaper than sending a row index to every task.
_ALL_ROWS_SHARE = 0.5


# ---------------------------------------------------------------------------
# The estimator
# ---------------------------------------------------------------------------


class ProximityImputer(TransformerMixin, DaskEstimator):
    """Impute missing values from random-forest proximities (rfImpute), matrix-free.

    Start from the column median / most frequent level; then ``iterations``
    times fit a :class:`~distforest.forests.ProximityForest` on the current
    filled data (supervised when a target is given, else
    ``task="unsupervised"``: Breiman's synthetic second class) and replace
    each originally missing cell by the proximity-weighted mean of the
    column's originally observed values (numeric) or the level with the
    largest proximity-weighted vote (categorical).  Each iteration is one
    matrix-free product ``P @ V`` over the rows with a missing cell; the
    n x n proximity matrix is never formed, so it runs on millions of rows.

    Parameters
    ----------
    iterations : int, default 5
        Forest refits (R's ``iter``).  ``iterations=1`` gives the first
        imputation from the median-filled data.
    proximity : {"original", "oob", "rfgap"}, default "rfgap"
        Weights of the observed rows.  ``original``: Breiman's share of trees
        in which two rows share a leaf (R's choice).  ``oob``: the same
        counted over the trees where both rows are out of bag, divided by the
        number of trees where the imputed row is (the row-normalised OOB
        proximity of :mod:`distforest.kernels.leafsums`; the ratio of sums
        does not depend on that normalisation).  ``rfgap``: RF-GAP (Rhodes
        et al. 2023), the in-bag rows of the leaves an out-of-bag row falls
        into, each weighted by its bootstrap count over the leaf's total.
        The default measured best in ``benchmarks/results/imputation.md``:
        lowest error of the three on 4 of 5 real sets at 20 % MCAR (e.g.
        Vehicle NRMSE 0.372 vs 0.392 original, 0.401 oob; Satellite 0.268
        vs 0.344 original); within 0.001 of ``original`` on the fifth.
    categorical_vote : {"sum", "mean"}, default "sum"
        ``sum``: the level with the largest proximity-weighted sum (Breiman).
        ``mean``: that sum divided by the level's number of observed rows
        (R ``rfImpute``): favours rare levels.
    categorical_features : sequence of str or int, optional
        Columns to treat as categorical besides text columns and pandas
        ``category`` columns (which always are), e.g. integer-coded
        factors.  Names, or positions among the feature columns.
    n_estimators : int, default 100
        Trees per forest.
    task : {"auto", "classification", "regression", "unsupervised"}, default "auto"
        Forest task; ``auto`` is unsupervised without a target.
    kind : {"random-forest", "extra-trees"}, default "extra-trees"
    max_features : {"auto", "sqrt", "log2"}, int, float or None, default 1
        The trees.  The defaults (one random feature and a random threshold
        per split, grown until the leaves are pure in the class) give
        proximities that reflect closeness in *all* features rather than in
        the few that separate the classes, which is what imputation needs:
        NRMSE 0.372 instead of 0.453 on Vehicle with 20 % MCAR, and better
        on every real set measured (``benchmarks/results/imputation.md``).
        ``kind="random-forest", max_features="auto", proximity="original"``
        is R's rfImpute.  With ``max_features=1`` keep ``min_samples_leaf=1``:
        a random split that leaves too few rows on one side ends the node.
    min_samples_leaf, max_depth, batch_size
        Passed to each :class:`~distforest.forests.ProximityForest`.
    random_state : int or None, default None
        Seed; the forest of iteration k gets a seed derived from it, so the
        same value gives the same imputation on any cluster.

    Where it runs is not a parameter: ``with distforest.execution(client=c):``
    or :meth:`set_execution`; without them the current ``distributed``
    client, else a LocalCluster for the duration of a ``fit`` / ``transform``
    call (one for all iterations).  Progress stages: ``"fit"`` per tree batch
    of the current forest and ``"impute"`` per finished iteration.

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
    forest_ : ProximityForest
        The last forest, used by :meth:`transform` on new rows.
    n_iter_ : int
        Iterations run (0 when the data had no missing value).
    history_ : list of dict
        Per iteration: seconds, the relative change of the imputed values
        (numeric: ``sum (new - old)^2 / sum new^2``; categorical: share of
        changed cells) and ``fallbacks``, cells whose weights summed to 0.
    random_state_ : int
        Root entropy used (equals ``random_state`` when given).

    Notes
    -----
    Edge cases:

    - **Missing target values**: an :class:`~distforest.errors.InputError`
      naming the rows; drop them or impute without a target (a supervised
      forest needs every row's class or value, and guessing one would bias
      the proximities).
    - **A column with no observed value**: an InputError naming it; there
      is nothing to average (drop the column).
    - **A column missing in every row of one class**: works.  The weights
      come from the rows of other classes that share leaves with the row;
      a cell whose weights sum to 0 (possible with ``rfgap``/``oob``: only
      same-class rows carry weight) keeps its starting value (median or most
      frequent level); ``history_[k]["fallbacks"]`` counts them.
    - **No missing value at all**: ``fit`` still grows one forest (so that
      :meth:`transform` can impute new rows) and ``fit_transform`` returns
      the data unchanged.

    Accuracy: more accurate than scikit-learn's IterativeImputer with
    ExtraTrees (missForest-like) where the columns are weakly related (Pima,
    Wisconsin breast cancer), less accurate where they are strongly related
    (Satellite, Vehicle: one proximity kernel serves every column, missForest
    fits a model per column), at 1-17 % of its time
    (``benchmarks/results/imputation.md``).

    Output follows the input: a DataFrame (or a path, read as one) gives a
    DataFrame with the same columns, order and dtypes, categoricals as their
    labels (integer and boolean columns get the weighted mean rounded); a
    NumPy array gives an array; a :class:`~distforest.io.Table` a Table.  A
    target given as a column name (``y="Class"``) stays in the output
    unchanged.

    Examples
    --------
    >>> imp = ProximityImputer(n_estimators=100, random_state=0)  # doctest: +SKIP
    >>> filled = imp.fit_transform(df, y="Class")                 # doctest: +SKIP
    >>> new_filled = imp.transform(new_df)                        # doctest: +SKIP
    """

    def __init__(
        self,
        iterations: int = 5,
        *,
        proximity: str = "rfgap",
        categorical_vote: str = "sum",
        categorical_features: Sequence[str | int] | None = None,
        n_estimators: int = 100,
        task: str = "auto",
        kind: str = "extra-trees",
        max_features: int | float | str | None = 1,
        min_samples_leaf: int = 1,
        max_depth: int | None = None,
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
        self.batch_size = batch_size
        self.random_state = random_state

    # -- parameters and cluster ------------------------------------------------

    _parameter_constraints: ClassVar[dict[str, C.Constraint]] = {
        "iterations": C.Int(1),
        "proximity": C.Choice(C.PROXIMITY_METHODS),
        "categorical_vote": C.Choice(VOTES),
        "categorical_features": C.Checked("column names or positions, checked against X"),
        # the parameters passed on to each ProximityForest: its own constraints
        **{name: ProximityForest._parameter_constraints[name] for name in FOREST_PARAMS},
    }

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True  # missing values are what it fills
        return tags

    def _check_fitted(self) -> None:
        if not hasattr(self, "forest_"):
            raise NotFittedError(
                "this ProximityImputer is not fitted yet; call fit(X) or fit_transform(X) first"
            )

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

    def fit_transform(self, X: Any, y: Any = None, **fit_params: Any) -> Any:
        """Fit and return the imputed training data (same form as ``X``).

        Parameters
        ----------
        X, y
            As in :meth:`fit`.

        Returns
        -------
        DataFrame, ndarray or Table
        """
        data = self._fit(X, y)
        return decode_output(data, self._imputed.copy())

    def _fit(self, X: Any, y: Any) -> EncodedTable:
        params = self._validated()
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
        X_cur = np.where(missing, start, data.X)
        root = np.random.SeedSequence(params["random_state"])
        seeds = [
            int(c.generate_state(1, dtype=np.uint64)[0]) for c in root.spawn(params["iterations"])
        ]
        columns = [int(j) for j in np.flatnonzero(counts)]
        self.history_: list[dict[str, Any]] = []
        logger.info(
            f"imputing {int(counts.sum())} cells in {len(columns)} columns of {data.source} "
            f"({params['iterations']} iterations, {params['proximity']} proximity)"
        )
        report = self._report("impute")
        forest: ProximityForest | None = None
        with self._runner() as runner:  # one cluster for all iterations
            if not columns:  # nothing to impute: one forest, for transform on new rows
                forest = self._forest(params, seeds[-1]).fit(data.table(X_cur))
            for k, seed in enumerate(seeds if columns else []):
                del forest  # free the last forest's trees before growing the next
                release_memory()
                forest = self._iterate(params, seed, runner, data, X_cur, start, columns)
                if report is not None:
                    report(k + 1, len(seeds))
        self.n_features_in_ = len(data.names)
        self.feature_names_in_ = data.names
        self.categorical_ = data.categorical.copy()
        self.categories_ = {data.names[j]: lv for j, lv in data.levels.items()}
        self.statistics_ = start
        self.n_missing_ = {name: int(c) for name, c in zip(data.names, counts, strict=True)}
        assert forest is not None
        self.forest_ = forest
        self.task_ = forest.task_
        self.n_iter_ = len(self.history_)
        self.random_state_ = int(root.entropy)  # type: ignore[arg-type]  # an int
        self._train = replace(data, original=None, y=None)
        self._fingerprint = fingerprint(data.X, data.names)
        self._imputed = X_cur
        return data

    def _iterate(
        self,
        params: dict[str, Any],
        seed: int,
        runner: Runner,
        data: EncodedTable,
        X_cur: np.ndarray,
        start: np.ndarray,
        columns: list[int],
    ) -> ProximityForest:
        """One rfImpute iteration in place on ``X_cur``: refit, one product, update."""
        tick = time.perf_counter()
        missing = data.missing
        rows = np.flatnonzero(missing.any(axis=1))
        layout = plan_columns(data.X, data.categorical, columns)
        forest = self._forest(params, seed).fit(data.table(X_cur))
        session = ProximityProducts(runner, forest.leaves_, forest.inbag_)
        V = build_v(data.X, layout, start)
        if rows.size > _ALL_ROWS_SHARE * data.X.shape[0]:
            R = session.product(V, params["proximity"])[rows]
        else:
            R = session.product(V, params["proximity"], rows=rows)
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

    def _forest(self, params: dict[str, Any], seed: int) -> ProximityForest:
        """The forest of one iteration (it runs on the imputer's execution)."""
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

    def transform(self, X: Any) -> Any:
        """Impute the missing cells of ``X`` (the training data or new rows).

        The training data itself (same values and missing cells) gets the
        result of :meth:`fit`.  New rows start from the training medians /
        most frequent levels and are routed through the last forest
        (``forest_``); each missing cell becomes the proximity-weighted mean
        (vote) of the training rows' *observed* values, new rows being out of
        bag in every tree.  This repeats ``iterations`` times, the new rows'
        leaves moving as their filled values change.  Training rows are never
        changed by new ones.

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
        params = self._validated()
        data = encode_like(X, self._train)
        if fingerprint(data.X, data.names) == self._fingerprint:
            return decode_output(data, self._imputed.copy())
        missing = data.missing
        X_cur = np.where(missing, self.statistics_, data.X)
        rows = np.flatnonzero(missing.any(axis=1))
        if rows.size == 0:
            return decode_output(data, X_cur)
        train, forest, stats = self._train, self.forest_, self.statistics_
        layout = plan_columns(train.X, train.categorical, range(len(train.names)))
        V = build_v(train.X, layout, stats)
        local, local_missing = X_cur[rows], missing[rows]
        report = self._report("impute")
        with self._runner() as runner:
            session = ProximityProducts(runner, forest.leaves_, forest.inbag_)
            for k in range(params["iterations"]):
                leaves = forest.apply(Table(local, data.names))
                R = session.product(V, params["proximity"], new_leaves=leaves)
                vote = params["categorical_vote"]
                update_cells(
                    local, np.arange(rows.size), local_missing, R, layout, stats, stats, vote
                )
                if report is not None:
                    report(k + 1, params["iterations"])
        X_cur[rows] = local
        return decode_output(data, X_cur)
