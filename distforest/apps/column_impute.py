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

Large tables.  Each tree may grow on a random subset of the column's observed
rows (``max_samples``; by default 20,000 rows per tree on tables of more
than 50,000 rows, every observed row below): the other observed rows are out
of bag for that tree (in-bag count 0, RF-GAP weight 0), and every missing
row is still routed through every tree, so the imputed value stays the
RF-GAP weighted mean of the observed values over the forest.  When the
forests would hold more than ``keep_nodes`` allows (rows x trees), the tasks
return only the sums the next column needs, never the trees: the kept
iteration's forests are grown again from their seeds and the float32 data at
the start of that iteration when new rows come (:func:`regrow_forests`, the
same trees).  On tables of more than 50,000 rows the iterations also stop,
keeping the last one, when the change shrank by less than 5 %
(:func:`stopping_tolerance`): at that size the change levels off at the
noise of the trees' random draws instead of growing again, and missForest's
rule alone would run all ``max_iter`` iterations for a change of 1 % or less
per iteration.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
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
from distforest.kernels.trees import TreeParams, tree_input
from distforest.parallel.execution import Runner
from distforest.parallel.tasks import plan_batches

logger = logging.getLogger("distforest")

#: Tasks per column forest: the trees are cut into this many batches whatever
#: the cluster, so that the same seed gives the same bits anywhere.
COLUMN_TASKS = 8
#: ``max_samples="auto"``: tables of at most this many rows grow every tree on all
#: the column's observed rows, and stop on missForest's rule alone ...
LARGE_TABLE_ROWS = 50_000
#: ... larger ones on this many of them (drawn per tree): the time and memory of a
#: tree stop growing with n (a missing row is still routed through every tree).
AUTO_ROWS_PER_TREE = 20_000
#: ... and stop as well once the change shrank by less than this share: it has
#: reached the floor set by the trees' own random draws (each iteration grows new
#: trees), where more iterations only resample that noise.
LARGE_TABLE_TOLERANCE = 0.05


def stopping_tolerance(n_rows: int) -> float:
    """The least relative shrink of the change that continues the iterations (0: none)."""
    return 0.0 if n_rows <= LARGE_TABLE_ROWS else LARGE_TABLE_TOLERANCE


def resolve_max_samples(max_samples: int | float | str | None, n_rows: int) -> int | float | None:
    """``max_samples`` with ``"auto"`` replaced for a table of ``n_rows`` rows."""
    if max_samples == "auto":
        return None if n_rows <= LARGE_TABLE_ROWS else AUTO_ROWS_PER_TREE
    return max_samples  # type: ignore[return-value]  # validated: int, float or None


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
    #: Rows per tree: an int, a share of the observed rows (float) or None (all);
    #: already resolved (:func:`resolve_max_samples`).
    max_samples: int | float | None = None
    #: Return each tree's nodes to the caller (False: prediction sums only).
    keep_nodes: bool = True
    #: Stop (keeping this iteration) when no kind of change shrank by more than this
    #: share (:func:`stopping_tolerance`); 0: missForest's rule alone.
    tolerance: float = 0.0

    def rows_per_tree(self, n_observed: int) -> int | None:
        """In-bag rows of a tree of a column with ``n_observed`` rows; None: all of them."""
        if self.max_samples is None:
            return None
        if isinstance(self.max_samples, float):
            size = max(1, round(self.max_samples * n_observed))
        else:
            size = int(self.max_samples)
        return None if size >= n_observed else size

    def forest_cells(self, missing: np.ndarray) -> int:
        """Rows x trees of one iteration's forests (what their nodes grow with)."""
        n_observed = (~missing).sum(axis=0)[missing.any(axis=0)]
        rows = [self.rows_per_tree(int(m)) or int(m) for m in n_observed]
        return sum(rows) * self.n_estimators

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


@dataclass(frozen=True)
class Regrowth:
    """What grows the kept iteration's forests again (fit returned no trees).

    Attributes
    ----------
    iteration : int
        The kept iteration (0-based): its trees' seeds.
    start : ndarray of float32, shape (n, d)
        The filled data at its start, as the trees read it.
    extra : ndarray or None
        The extra inputs of fit (target codes or values).
    """

    iteration: int
    start: np.ndarray
    extra: np.ndarray | None


@dataclass(frozen=True)
class ColumnFit:
    """The result of :func:`impute_by_column`.

    Attributes
    ----------
    imputed : ndarray, shape (n, d)
    forests : dict of int to ColumnForest
        The forests that gave ``imputed`` (those of the iteration kept);
        empty when ``regrow`` is set.
    history : list of dict
        Per iteration: ``iteration``, ``seconds``, ``change``, ``kept``.
    regrow : Regrowth or None
        Set when the settings keep no nodes (:func:`regrow_forests`).
    """

    imputed: np.ndarray
    forests: dict[int, ColumnForest]
    history: list[dict[str, Any]]
    regrow: Regrowth | None = None


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
    progress: Callable[[int, int], None] | None = None,
) -> ColumnFit:
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
        With ``keep_nodes=False`` no tree reaches this process: the result
        holds a :class:`Regrowth` instead of forests.
    max_iter : int
    entropy : int
        Root of every tree's seed.
    progress : callable, optional
        ``progress(done, total)`` of each column forest's tasks (its tree batches), as
        :meth:`~distforest.parallel.execution.Runner.run` reports them.

    Returns
    -------
    ColumnFit
        ``imputed`` is the mean of the kept iterations after the first (the
        first alone if no other was kept).
    """
    missing = np.isnan(X_obs)
    order = column_order(missing)
    if not order:  # nothing to impute
        return ColumnFit(X_cur.copy(), {}, [])
    sweep = _Sweep.share(runner, X_obs, categorical, extra, settings, order, entropy, progress)
    X = X_cur.copy()
    kept_X, kept_forests, kept_start = X.copy(), {}, None
    history: list[dict[str, Any]] = []
    previous: dict[str, float] | None = None
    cells = missing[:, order]
    mean = PassMean(missing, categorical)
    for it in range(max_iter):
        tick = time.perf_counter()
        before = X[:, order][cells]
        start = None if settings.keep_nodes else tree_input(X)
        forests = sweep.run(X, it)
        change = change_statistics(
            before[None, :], X[:, order][cells][None, :], _cell_kinds(categorical, order, cells)
        )
        grew = previous is not None and _grew(change, previous)
        history.append({"iteration": it + 1, "seconds": time.perf_counter() - tick,
                        "change": change, "kept": not grew})  # fmt: skip
        logger.info(f"column iteration {it + 1}: change {change}"
                    + (" grew: the previous iteration is kept" if grew else ""))  # fmt: skip
        if grew:
            break
        settled = previous is not None and _grew(change, previous, settings.tolerance)
        kept_X, kept_forests, previous = X.copy(), forests, change
        if it > 0:  # the first pass starts from the medians: left out of the mean
            mean.add(X)
        kept_start = None if start is None else Regrowth(it, start, extra)
        if settled:
            logger.info(f"column iteration {it + 1}: the change shrank by less than "
                        f"{settings.tolerance:.0%}: kept, and the last")  # fmt: skip
            break
    imputed = mean.result(kept_X)
    return ColumnFit(imputed, {} if kept_start else kept_forests, history, kept_start)


def regrow_forests(
    runner: Runner,
    X_obs: np.ndarray,
    categorical: np.ndarray,
    settings: ColumnSettings,
    entropy: int,
    regrow: Regrowth,
) -> dict[int, ColumnForest]:
    """The forests of the kept iteration, grown again from their seeds (the same trees).

    Parameters
    ----------
    runner : Runner
    X_obs : ndarray, shape (n, d)
        The training data with NaN where missing.
    categorical : ndarray of bool, shape (d,)
    settings : ColumnSettings
        Those of fit (``keep_nodes`` is ignored: the nodes are kept).
    entropy : int
    regrow : Regrowth

    Returns
    -------
    dict of int to ColumnForest
    """
    order = column_order(np.isnan(X_obs))
    settings = replace(settings, keep_nodes=True)
    sweep = _Sweep.share(runner, X_obs, categorical, regrow.extra, settings, order, entropy)
    return sweep.run(regrow.start.astype(np.float64), regrow.iteration)


@dataclass(frozen=True)
class _Sweep:
    """One pass over the columns (one iteration): the fixed inputs, shared once."""

    runner: Runner
    columns: dict[int, _Column]
    shared: dict[int, tuple[Any, ...]]
    extra: Any
    settings: ColumnSettings
    order: list[int]
    entropy: int
    #: ``progress(done, total)`` of each column forest's tasks.
    progress: Callable[[int, int], None] | None = None

    @classmethod
    def share(
        cls,
        runner: Runner,
        X_obs: np.ndarray,
        categorical: np.ndarray,
        extra: np.ndarray | None,
        settings: ColumnSettings,
        order: list[int],
        entropy: int,
        progress: Callable[[int, int], None] | None = None,
    ) -> _Sweep:
        columns = {j: _prepare(X_obs, j, bool(categorical[j])) for j in order}
        shared = {j: tuple(runner.share(a) for a in (c.observed, c.target))
                  for j, c in columns.items()}  # fmt: skip
        extra_handle = None if extra is None else runner.share(extra)
        return cls(runner, columns, shared, extra_handle, settings, order, entropy, progress)

    def run(self, X: np.ndarray, iteration: int) -> dict[int, ColumnForest]:
        """Fit every column's forest in order, updating its missing cells in ``X``."""
        n_trees = self.settings.n_estimators
        return {
            j: _fit_column(self.runner, X, self.extra, self.columns[j], self.shared[j],
                           self.settings, tree_seeds(self.entropy, iteration, j, n_trees),
                           self.progress)
            for j in self.order
        }  # fmt: skip


def _cell_kinds(categorical: np.ndarray, order: Sequence[int], cells: np.ndarray) -> np.ndarray:
    """Per imputed cell (in the flattening order of ``X[:, order][cells]``): categorical?"""
    kinds = np.broadcast_to(categorical[order], cells.shape)
    return kinds[cells]


def _grew(change: dict[str, float], previous: dict[str, float], tolerance: float = 0.0) -> bool:
    """missForest's rule: stop when no kind of column changed less than the time before.

    With ``tolerance``: when none changed less than ``1 - tolerance`` times as much.
    """
    return not any(change[k] < (1.0 - tolerance) * previous[k] for k in change)


def _fit_column(
    runner: Runner,
    X: np.ndarray,
    extra_handle: Any,
    col: _Column,
    shared: tuple[Any, ...],
    settings: ColumnSettings,
    seeds: np.ndarray,
    progress: Callable[[int, int], None] | None = None,
) -> ColumnForest:
    """One column's forest as tasks over tree batches (``progress(done, total)`` of them);
    its missing cells updated in ``X``."""
    params = settings.tree_params(bool(col.levels.size), col.levels.size)
    X_handle = runner.share(tree_input(X))  # what the trees read: half the bytes to send
    batches = settings.batches()
    observed, target = shared
    n_levels = col.levels.size
    max_rows = settings.rows_per_tree(int(col.observed.sum()))
    items = [(X_handle, extra_handle, col.column, observed, target, n_levels, seeds[b], params,
              max_rows, settings.keep_nodes) for b in batches]  # fmt: skip
    parts: list[Any] = [None] * len(batches)
    for i, part in runner.run(fit_column_trees, items, name=f"column-{col.column}",
                              progress=progress):  # fmt: skip
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
