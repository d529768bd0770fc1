"""Column-aware proximity imputation: one forest per column, iterated to missForest's rule.

The engine behind ``ProximityImputer(proximity="column")``.  Each iteration
visits the columns with a missing cell, fewest missing first (missForest's
order).  For column c it fits a forest predicting c from the other columns
(and the target, when given) on the rows where c is observed, and replaces
each missing cell of c by its RF-GAP proximity-weighted mean of the observed
values (numeric) or the level with the largest weighted vote (categorical):
the forest's prediction (see :mod:`distforest.kernels.column_trees`).  The
next column already sees the new values.

Iterations stop on missForest's rule (Stekhoven & Buehlmann 2012): as soon
as the change between two iterations grows (numeric: ``sum (new - old)^2 /
sum new^2`` over the imputed cells; categorical: the share of imputed cells
that changed; with both kinds, when neither shrinks), that iteration is
discarded; or after ``max_iter`` iterations.  The result is the mean
(numeric) or majority level (categorical) of the kept iterations after the
first (:class:`~distforest.kernels.pass_mean.PassMean`): each refits every
forest from new seeds, so their mean has less of the forests' Monte Carlo
noise than any one of them; the first starts from the medians and is left out.

The trees of one column are Dask tasks (fixed batches of trees: the result
does not depend on the cluster); a column's batches are added in batch order.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from distforest.kernels.column_trees import (
    ColumnTrees,
    column_inputs,
    fit_column_trees,
    predict_sum,
)
from distforest.kernels.imputation import change_statistics
from distforest.kernels.pass_mean import PassMean
from distforest.kernels.trees import TreeParams
from distforest.parallel.execution import Runner
from distforest.parallel.tasks import plan_batches

logger = logging.getLogger("distforest")

#: Tasks per column forest: the trees are cut into this many batches whatever
#: the cluster, so that the same seed gives the same bits anywhere.
COLUMN_TASKS = 8


@dataclass(frozen=True)
class ColumnSettings:
    """The trees of every column forest (already validated)."""

    n_estimators: int
    kind: str
    max_features: int | float | str | None
    min_samples_leaf: int
    max_depth: int | None
    bootstrap: bool
    batch_size: int | None

    def tree_params(self, categorical: bool, n_levels: int) -> TreeParams:
        return TreeParams(
            task="classification" if categorical else "regression",
            kind=self.kind,
            max_features=self.max_features,
            min_samples_leaf=self.min_samples_leaf,
            max_depth=self.max_depth,
            bootstrap=self.bootstrap,
            max_samples=None,
            n_classes=n_levels if categorical else 0,
        )

    def batches(self) -> list[slice]:
        size = self.batch_size or max(1, -(-self.n_estimators // COLUMN_TASKS))
        return plan_batches(self.n_estimators, size)


@dataclass(frozen=True)
class ColumnForest:
    """The fitted forest of one column: routing arrays and leaf values of all its trees.

    Attributes
    ----------
    column : int
    levels : ndarray
        Level codes of a categorical column (the vote's choices); empty if numeric.
    trees : ColumnTrees
    """

    column: int
    levels: np.ndarray
    trees: ColumnTrees

    @property
    def n_trees(self) -> int:
        return int(self.trees.node_counts.size)

    def value(self, prediction_sum: np.ndarray) -> np.ndarray:
        """Imputed values from summed leaf values: the weighted mean, or the top level."""
        if self.levels.size:
            return self.levels[np.argmax(prediction_sum, axis=1)].astype(np.float64)
        return prediction_sum[:, 0] / self.n_trees


@dataclass(frozen=True)
class _Column:
    """What the trees of one column learn from: fixed for the whole fit."""

    column: int
    observed: np.ndarray  # bool (n,)
    target: np.ndarray  # values, or level index 0..k-1
    levels: np.ndarray  # level codes (categorical) else empty


def _prepare(X_obs: np.ndarray, column: int, categorical: bool) -> _Column:
    col = X_obs[:, column]
    observed = ~np.isnan(col)
    values = col[observed]
    if not categorical:
        return _Column(column, observed, values, np.empty(0))
    levels, index = np.unique(values, return_inverse=True)
    return _Column(column, observed, index.astype(np.float64), levels)


def column_order(missing: np.ndarray) -> list[int]:
    """Columns with a missing cell, fewest missing first (ties by position)."""
    counts = missing.sum(axis=0)
    return [int(j) for j in np.argsort(counts, kind="stable") if counts[j] > 0]


def tree_seeds(entropy: int, iteration: int, column: int, n_trees: int) -> np.ndarray:
    """The trees' seeds of one column in one iteration, from the root entropy."""
    seq = np.random.SeedSequence([entropy, iteration, column])
    return seq.generate_state(n_trees, dtype=np.uint64)


def impute_by_column(
    runner: Runner,
    X_obs: np.ndarray,
    X_cur: np.ndarray,
    categorical: np.ndarray,
    extra: np.ndarray | None,
    settings: ColumnSettings,
    *,
    max_iter: int,
    entropy: int,
    report: Callable[[int, int], None] | None = None,
) -> tuple[np.ndarray, dict[int, ColumnForest], list[dict[str, Any]]]:
    """Iterate column forests until missForest's rule stops them.

    Parameters
    ----------
    runner : Runner
    X_obs : ndarray, shape (n, d)
        The data with NaN where missing.
    X_cur : ndarray, shape (n, d)
        The starting fill (median / most frequent level); not modified.
    categorical : ndarray of bool, shape (d,)
    extra : ndarray or None
        More inputs for every column's trees (target codes or values).
    settings : ColumnSettings
    max_iter : int
    entropy : int
        Root of every tree's seed.
    report : callable, optional
        ``report(done, max_iter)`` after each iteration.

    Returns
    -------
    imputed : ndarray, shape (n, d)
        The mean of the kept iterations after the first (the first alone if
        no other was kept).
    forests : dict of int to ColumnForest
        The forests of the last kept iteration (what new rows are routed through).
    history : list of dict
        Per iteration: ``iteration``, ``seconds``, ``change``, ``kept``.
    """
    missing = np.isnan(X_obs)
    order = column_order(missing)
    if not order:  # nothing to impute
        return X_cur.copy(), {}, []
    columns = {j: _prepare(X_obs, j, bool(categorical[j])) for j in order}
    shared = {j: tuple(runner.share(a) for a in (c.observed, c.target))
              for j, c in columns.items()}  # fmt: skip
    extra_handle = None if extra is None else runner.share(extra)
    X = X_cur.copy()
    kept_X, kept_forests = X.copy(), {}
    history: list[dict[str, Any]] = []
    previous: dict[str, float] | None = None
    cells = missing[:, order]
    mean = PassMean(missing, categorical)
    for it in range(max_iter):
        tick = time.perf_counter()
        before = X[:, order][cells]
        forests = {}
        for j in order:
            forests[j] = _fit_column(runner, X, extra_handle, columns[j], shared[j], settings,
                                     tree_seeds(entropy, it, j, settings.n_estimators))  # fmt: skip
        change = change_statistics(
            before[None, :], X[:, order][cells][None, :], _cell_kinds(categorical, order, cells)
        )
        grew = previous is not None and _grew(change, previous)
        history.append({"iteration": it + 1, "seconds": time.perf_counter() - tick,
                        "change": change, "kept": not grew})  # fmt: skip
        logger.info(f"column iteration {it + 1}: change {change}"
                    + (" grew: the previous iteration is kept" if grew else ""))  # fmt: skip
        if report is not None:
            report(it + 1, max_iter)
        if grew:
            break
        kept_X, kept_forests, previous = X.copy(), forests, change
        if it > 0:  # the first pass starts from the medians: left out of the mean
            mean.add(X)
    return mean.result(kept_X), kept_forests, history


def _cell_kinds(categorical: np.ndarray, order: Sequence[int], cells: np.ndarray) -> np.ndarray:
    """Per imputed cell (in the flattening order of ``X[:, order][cells]``): categorical?"""
    kinds = np.broadcast_to(categorical[order], cells.shape)
    return kinds[cells]


def _grew(change: dict[str, float], previous: dict[str, float]) -> bool:
    """missForest's rule: stop when no kind of column changed less than the time before."""
    return not any(change[k] < previous[k] for k in change)


def _fit_column(
    runner: Runner,
    X: np.ndarray,
    extra_handle: Any,
    col: _Column,
    shared: tuple[Any, ...],
    settings: ColumnSettings,
    seeds: np.ndarray,
) -> ColumnForest:
    """One column's forest as tasks over tree batches; its missing cells updated in ``X``."""
    params = settings.tree_params(bool(col.levels.size), col.levels.size)
    X_handle = runner.share(X)
    batches = settings.batches()
    observed, target = shared
    n_levels = col.levels.size
    items = [(X_handle, extra_handle, col.column, observed, target, n_levels, seeds[b], params)
             for b in batches]  # fmt: skip
    parts: list[Any] = [None] * len(batches)
    for i, part in runner.run(fit_column_trees, items, name=f"column-{col.column}"):
        parts[i] = part
    total = parts[0].prediction_sum.copy()
    for part in parts[1:]:  # in batch order: the same bits on any cluster
        total += part.prediction_sum
    forest = ColumnForest(col.column, col.levels, _join(parts, max(1, n_levels)))
    X[~col.observed, col.column] = forest.value(total)
    return forest


def _join(parts: list[ColumnTrees], k: int) -> ColumnTrees:
    fields = parts[0].nodes.keys()
    return ColumnTrees(
        node_counts=np.concatenate([p.node_counts for p in parts]),
        nodes={f: np.concatenate([p.nodes[f] for p in parts]) for f in fields},
        leaf_values=np.concatenate([p.leaf_values for p in parts]),
        prediction_sum=np.zeros((0, k)),
    )


def impute_new_rows(
    forests: dict[int, ColumnForest],
    X_obs: np.ndarray,
    start: np.ndarray,
    categorical: np.ndarray,
    extra: np.ndarray | None,
    max_iter: int,
) -> np.ndarray:
    """Impute new rows with the fitted column forests (no refit), to the same rule.

    As in fit, the result is the mean of the kept passes after the first.

    Cells of a column without a forest (it had no missing value in fit) keep
    ``start`` (the training median / most frequent level).
    """
    missing = np.isnan(X_obs)
    X = np.where(missing, start, X_obs)
    order = [j for j in column_order(missing) if j in forests]
    if not order:
        return X
    cells = missing[:, order]
    kinds = _cell_kinds(categorical, order, cells)
    previous, kept = None, X.copy()
    in_order = np.zeros(X.shape[1], dtype=bool)
    in_order[order] = True
    mean = PassMean(missing & in_order, categorical)
    for it in range(max_iter):
        before = X[:, order][cells]
        for j in order:
            rows = missing[:, j]
            F = column_inputs(X[rows], j, None if extra is None else extra[rows])
            X[rows, j] = forests[j].value(predict_sum(forests[j].trees, F))
        change = change_statistics(before[None, :], X[:, order][cells][None, :], kinds)
        if previous is not None and _grew(change, previous):
            break
        kept, previous = X.copy(), change
        if it > 0:
            mean.add(X)
    return mean.result(kept)
