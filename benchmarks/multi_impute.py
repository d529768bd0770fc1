"""Design (b) of column-aware imputation, a measured prototype: multi-output trees.

Issue 13, item 1 named two designs for ``ProximityImputer(proximity="column")``;
design (a), one forest per column (:mod:`distforest.apps.column_impute`), is
the default.  This is design (b), kept here (not in the package) because it
did not win: ``benchmarks/results/impute_designs.md`` (made by
``benchmarks/bench_impute_designs.py``) has the measurements and the reasons.

Each iteration fits ONE forest.  Tree t draws a group ``G_t`` of
``group_size`` of the columns to impute; its outputs are the columns of
``G_t`` (numeric ones standardised, categorical ones as the one-hot of their
levels: scikit-learn's multi-output regression trees), its inputs every
other column (the current fill) and the target, when given.  It is fitted on
the rows where every column of ``G_t`` is observed, so a row whose cell in
column c of ``G_t`` is missing is out of bag in tree t, and the tree's
prediction for it is the in-bag weighted mean of c's observed values over
its leaf: its RF-GAP proximity-weighted mean (Rhodes et al. 2023), as for the
per-column forests of (a).  Column c's missing cell becomes the mean of the
predictions of the trees whose group held c (numeric), or the level with the
largest mean one-hot value (categorical: a weighted vote).

Groups are drawn in rounds: each round is a random permutation of the
columns cut into groups of ``group_size``, so every column is predicted by
exactly one tree per round, ``rounds`` trees in all.  Unlike (a), which
visits the columns one after another, all cells of an iteration are updated
together from the same fill (Jacobi rather than Gauss-Seidel).  Iterations
stop on the rule of (a) (missForest's): when the change between two
iterations stops shrinking, the previous imputation is returned.

Trees run as tasks in a fixed number of batches whatever the cluster, whose
sums are added in batch order: the same seed gives the same bits anywhere.
"""

from __future__ import annotations

import itertools
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from distforest.apps.column_impute import _cell_kinds, _grew, column_order
from distforest.forests.targets import encode_target, resolve_task
from distforest.kernels.imputation import change_statistics, start_values
from distforest.kernels.trees import TreeParams, bootstrap_counts, make_tree
from distforest.parallel.execution import Runner, current_execution, in_process

# -- the trees (arrays and seeds in, arrays out) -----------------------------------------


@dataclass(frozen=True)
class Outputs:
    """How the columns to impute become tree outputs (fixed for a whole fit).

    Attributes
    ----------
    columns : ndarray of int64, shape (m,)
        The columns to impute (positions in X).
    observed : ndarray of bool, shape (n, m)
        Where each of them is observed.
    targets : list of ndarray
        Per column, shape (n, k_c): the output block (standardised values, or
        the one-hot of the level index; 0 where missing: never a training row).
    levels : list of ndarray
        Per column, its observed level codes (categorical) or empty (numeric).
    center, scale : ndarray of float64, shape (m,)
        Numeric columns: the observed mean and standard deviation (0, 1 for
        categorical ones).
    """

    columns: np.ndarray
    observed: np.ndarray
    targets: list[np.ndarray]
    levels: list[np.ndarray]
    center: np.ndarray
    scale: np.ndarray


def make_outputs(X_obs: np.ndarray, columns: np.ndarray, categorical: np.ndarray) -> Outputs:
    """The output blocks of ``columns`` from the data with NaN where missing.

    Parameters
    ----------
    X_obs : ndarray, shape (n, d)
    columns : ndarray of int
        The columns to impute.
    categorical : ndarray of bool, shape (d,)

    Returns
    -------
    Outputs
    """
    observed = ~np.isnan(X_obs[:, columns])
    targets, levels = [], []
    center, scale = np.zeros(columns.size), np.ones(columns.size)
    for k, j in enumerate(columns):
        obs = observed[:, k]
        values = X_obs[obs, j]
        if categorical[j]:
            lv, index = np.unique(values, return_inverse=True)
            block = np.zeros((X_obs.shape[0], lv.size))
            block[np.flatnonzero(obs), index] = 1.0
        else:
            lv = np.empty(0)
            center[k], spread = float(values.mean()), float(values.std())
            scale[k] = spread if spread > 0 else 1.0
            block = np.zeros((X_obs.shape[0], 1))
            block[obs, 0] = (values - center[k]) / scale[k]
        targets.append(block)
        levels.append(lv)
    return Outputs(np.asarray(columns, dtype=np.int64), observed, targets, levels, center, scale)


def draw_groups(n_columns: int, group_size: int, rounds: int, seed: int) -> list[np.ndarray]:
    """The output groups of one forest: ``rounds`` permutations cut into groups.

    Parameters
    ----------
    n_columns : int
        Columns to impute (positions 0..n_columns-1 in :class:`Outputs`).
    group_size : int
        Columns per tree (capped at ``n_columns``); the last group of a round
        may be smaller.
    rounds : int
        Trees per column.
    seed : int

    Returns
    -------
    list of ndarray of int64
        One sorted group per tree, round after round.
    """
    size = max(1, min(group_size, n_columns))
    rng = np.random.default_rng(seed)
    groups = []
    for _ in range(rounds):
        order = rng.permutation(n_columns)
        groups += [np.sort(order[s : s + size]) for s in range(0, n_columns, size)]
    return groups


def tree_inputs(X: np.ndarray, drop: np.ndarray, extra: np.ndarray | None) -> np.ndarray:
    """Every column of the filled ``X`` but ``drop``, then ``extra``, as float32 C-order."""
    parts = [np.delete(X, drop, axis=1)]
    if extra is not None:
        parts.append(extra.reshape(X.shape[0], -1))
    return np.ascontiguousarray(np.concatenate(parts, axis=1), dtype=np.float32)


def fit_group_tree(
    X: np.ndarray,
    extra: np.ndarray | None,
    outputs: Outputs,
    group: np.ndarray,
    seed: int,
    params: TreeParams,
) -> list[np.ndarray]:
    """Fit one multi-output tree of ``group`` and predict its columns' missing cells.

    Parameters
    ----------
    X : ndarray, shape (n, d)
        The current fill (no NaN).
    extra : ndarray or None
        More inputs (the target codes or values).
    outputs : Outputs
    group : ndarray of int
        Positions in ``outputs.columns`` of the tree's outputs.
    seed : int
        The tree's seed: its in-bag counts, then its own ``random_state``.
    params : TreeParams
        A regression tree (``task="regression"``).

    Returns
    -------
    list of ndarray
        Per column of ``group``, shape (m_c, k_c): the tree's output block for
        the rows where the column is missing, in row order (standardised
        values, or level fractions).
    """
    train = outputs.observed[:, group].all(axis=1)
    if not train.any():
        names = outputs.columns[group].tolist()
        raise ValueError(f"columns {names} are never observed in the same row: a tree "
                         "predicting them together has no training row; use a smaller group "
                         "size (1 always works)")  # fmt: skip
    F = tree_inputs(X, outputs.columns[group], extra)
    Y = np.concatenate([outputs.targets[g] for g in group], axis=1)[train]
    rng = np.random.default_rng(seed)
    inbag = bootstrap_counts(rng, int(train.sum()), params)
    tree = make_tree(params, int(rng.integers(0, 2**31 - 1)))
    used = np.flatnonzero(inbag)
    # float32 and finite by construction: skip tree.fit's checks, as scikit-learn's forests do
    tree._fit(F[train][used], Y[used], sample_weight=inbag[used].astype(np.float64),
              check_input=False)  # fmt: skip
    missing = ~outputs.observed[:, group]
    rows = np.flatnonzero(missing.any(axis=1))
    pred = tree.predict(F[rows], check_input=False).reshape(rows.size, -1)
    out, at = [], 0
    for k, g in enumerate(group):
        width = outputs.targets[g].shape[1]
        out.append(pred[missing[rows, k], at : at + width])
        at += width
    return out


def fit_group_trees(
    X: np.ndarray,
    extra: np.ndarray | None,
    outputs: Outputs,
    groups: list[np.ndarray],
    seeds: np.ndarray,
    params: TreeParams,
) -> list[np.ndarray]:
    """A batch of trees: per column to impute, the sum of its trees' output blocks.

    Parameters
    ----------
    X, extra, outputs, params
        As in :func:`fit_group_tree`.
    groups : list of ndarray
        One group per tree.
    seeds : ndarray of uint64
        One seed per tree.

    Returns
    -------
    list of ndarray
        Per column of ``outputs``, shape (m_c, k_c), summed in tree order.
    """
    sums = [np.zeros((int((~outputs.observed[:, k]).sum()), t.shape[1]))
            for k, t in enumerate(outputs.targets)]  # fmt: skip
    for group, seed in zip(groups, seeds, strict=True):
        for g, block in zip(group, fit_group_tree(X, extra, outputs, group, int(seed), params),
                            strict=True):  # fmt: skip
            sums[g] += block
    return sums


def imputed_values(outputs: Outputs, sums: list[np.ndarray], rounds: int) -> list[np.ndarray]:
    """The imputed cells of each column from its trees' summed outputs.

    Numeric: the mean prediction, back on the column's scale.  Categorical:
    the level with the largest summed fraction (the weighted vote).
    """
    out = []
    for k, block in enumerate(sums):
        lv = outputs.levels[k]
        if lv.size:
            out.append(lv[np.argmax(block, axis=1)].astype(np.float64))
        else:
            out.append(block[:, 0] / rounds * outputs.scale[k] + outputs.center[k])
    return out


# -- the iterations ----------------------------------------------------------------------

logger = logging.getLogger("distforest")

#: Tasks per forest: its trees are cut into this many batches whatever the cluster.
MULTI_TASKS = 8


@dataclass(frozen=True)
class MultiSettings:
    """The trees of every iteration's forest.

    Attributes
    ----------
    rounds : int
        Trees per column (each round gives every column one tree).
    group_size : int
        Columns predicted by one tree.
    kind : {"extra-trees", "random-forest"}
    max_features : int, float, str or None
        Inputs tried per split (as scikit-learn's trees).
    min_samples_leaf : int
    max_depth : int or None
    """

    rounds: int = 50
    group_size: int = 3
    kind: str = "extra-trees"
    max_features: int | float | str | None = 0.33
    min_samples_leaf: int = 1
    max_depth: int | None = None

    def tree_params(self) -> TreeParams:
        return TreeParams(
            task="regression",
            kind=self.kind,
            max_features=self.max_features,
            min_samples_leaf=self.min_samples_leaf,
            max_depth=self.max_depth,
            bootstrap=self.kind == "random-forest",
            max_samples=None,
            n_classes=0,
        )


def forest_plan(
    entropy: int, iteration: int, n_columns: int, settings: MultiSettings
) -> tuple[list[np.ndarray], np.ndarray]:
    """The groups and tree seeds of one iteration's forest, from the root entropy."""
    seq = np.random.SeedSequence([entropy, iteration])
    group_seed, tree_root = seq.spawn(2)
    groups = draw_groups(n_columns, settings.group_size, settings.rounds,
                         int(group_seed.generate_state(1)[0]))  # fmt: skip
    return groups, tree_root.generate_state(len(groups), dtype=np.uint64)


def impute_multi(
    runner: Runner,
    X_obs: np.ndarray,
    X_start: np.ndarray,
    categorical: np.ndarray,
    extra: np.ndarray | None,
    settings: MultiSettings,
    *,
    max_iter: int,
    entropy: int,
) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """Iterate multi-output forests until missForest's rule stops them.

    Parameters
    ----------
    runner : Runner
    X_obs : ndarray, shape (n, d)
        The data with NaN where missing.
    X_start : ndarray, shape (n, d)
        The starting fill; not modified.
    categorical : ndarray of bool, shape (d,)
    extra : ndarray or None
        More inputs of every tree (target codes or values).
    settings : MultiSettings
    max_iter : int
    entropy : int
        Root of the groups and of every tree's seed.

    Returns
    -------
    imputed : ndarray, shape (n, d)
    history : list of dict
        Per iteration: ``iteration``, ``seconds``, ``trees``, ``change``, ``kept``.
    """
    missing = np.isnan(X_obs)
    columns = np.array(column_order(missing), dtype=np.int64)
    X = X_start.copy()
    if not columns.size:
        return X, []
    local = make_outputs(X_obs, columns, categorical)
    outputs = runner.share(local)
    extra_handle = None if extra is None else runner.share(extra)
    params = settings.tree_params()
    cells = missing[:, columns]
    kinds = _cell_kinds(categorical, columns.tolist(), cells)
    kept, previous = X.copy(), None
    history: list[dict[str, Any]] = []
    for it in range(max_iter):
        tick = time.perf_counter()
        before = X[:, columns][cells]
        groups, seeds = forest_plan(entropy, it, columns.size, settings)
        sums = _forest_sums(runner, X, extra_handle, outputs, groups, seeds, params)
        for k, values in enumerate(imputed_values(local, sums, settings.rounds)):
            X[missing[:, columns[k]], columns[k]] = values
        change = change_statistics(before[None, :], X[:, columns][cells][None, :], kinds)
        grew = previous is not None and _grew(change, previous)
        history.append({"iteration": it + 1, "seconds": time.perf_counter() - tick,
                        "trees": len(groups), "change": change, "kept": not grew})  # fmt: skip
        logger.info(f"multi-output iteration {it + 1}: {len(groups)} trees, change {change}")
        if grew:
            break
        kept, previous = X.copy(), change
    return kept, history


def _forest_sums(
    runner: Runner,
    X: np.ndarray,
    extra_handle: Any,
    outputs: Any,
    groups: list[np.ndarray],
    seeds: np.ndarray,
    params: TreeParams,
) -> list[np.ndarray]:
    """Per column, the summed outputs of the forest's trees (batches added in order)."""
    X_handle = runner.share(X)
    bounds = np.linspace(0, len(groups), min(MULTI_TASKS, len(groups)) + 1).astype(int)
    items = [(X_handle, extra_handle, outputs, groups[a:b], seeds[a:b], params)
             for a, b in itertools.pairwise(bounds)]  # fmt: skip
    parts: list[Any] = [None] * len(items)
    for i, part in runner.run(fit_group_trees, items, name="multi-output"):
        parts[i] = part
    total = [block.copy() for block in parts[0]]
    for part in parts[1:]:  # in batch order: the same bits on any cluster
        for acc, block in zip(total, part, strict=True):
            acc += block
    return total


def multi_output_impute(
    X: np.ndarray,
    y: np.ndarray | None = None,
    categorical_features: Sequence[int] | None = None,
    *,
    rounds: int = 50,
    group_size: int = 3,
    max_features: int | float | str | None = 0.33,
    kind: str = "extra-trees",
    max_iter: int = 10,
    random_state: int | None = None,
    history: list[dict[str, Any]] | None = None,
) -> np.ndarray:
    """Impute a numeric array with design (b), in this process on one thread per core.

    Parameters
    ----------
    X : ndarray, shape (n, d)
        Features, NaN where missing; categorical columns as numeric level codes.
    y : ndarray, shape (n,), optional
        Target: one more input of every tree (class codes, or values for a
        numeric target with many distinct values).
    categorical_features : sequence of int, optional
        Positions of categorical columns (imputed by weighted vote).
    rounds : int, default 50
        Trees per column.
    group_size : int, default 3
        Columns predicted by each multi-output tree.
    max_features, kind
        Of the trees (as :class:`~distforest.apps.impute.ProximityImputer`).
    max_iter : int, default 10
        The most iterations; missForest's rule usually stops earlier.
    random_state : int or None
        Same value: same imputation.
    history : list, optional
        Filled with the per-iteration records (see :func:`impute_multi`).

    Returns
    -------
    ndarray, shape (n, d)
    """
    X_obs = np.asarray(X, dtype=np.float64)
    categorical = np.zeros(X_obs.shape[1], dtype=bool)
    categorical[list(categorical_features or [])] = True
    for j in np.flatnonzero(np.isnan(X_obs).all(axis=0)):
        raise ValueError(f"column {j} has no observed value; there is nothing to impute it "
                         "from: drop it")  # fmt: skip
    task = resolve_task("auto", None if y is None else np.asarray(y), "y")
    extra, _ = encode_target(task, None if y is None else np.asarray(y))
    start = np.where(np.isnan(X_obs), start_values(X_obs, categorical), X_obs)
    settings = MultiSettings(rounds, group_size, kind, max_features)
    entropy = int(np.random.SeedSequence(random_state).entropy)  # type: ignore[arg-type]
    with in_process(current_execution(), os.cpu_count() or 1) as runner:
        out, hist = impute_multi(runner, X_obs, start, categorical, extra, settings,
                                 max_iter=max_iter, entropy=entropy)  # fmt: skip
    if history is not None:
        history[:] = hist
    return out
