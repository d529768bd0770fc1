"""Design (b) of column-aware imputation: one forest of multi-output trees per iteration.

A prototype measured against design (a) (:mod:`distforest.apps.column_impute`,
the default of :class:`~distforest.apps.impute.ProximityImputer`) in
``benchmarks/bench_impute_designs.py``.

Each iteration fits ONE forest: tree t predicts a random group of
``group_size`` columns (multi-output regression trees; categorical columns as
the one-hot of their levels) from the remaining columns and the target, on
the rows where its whole group is observed (see
:mod:`distforest.kernels.multi_trees`).  A missing cell of column c becomes
the mean prediction of the trees whose group held c, which is their RF-GAP
proximity-weighted mean of c's observed values (numeric) or weighted vote
(categorical).  Unlike (a), which visits the columns one after another, all
cells of one iteration are updated together from the same fill (Jacobi
rather than Gauss-Seidel).  Iterations stop on the rule of (a)
(missForest's): when the change between two iterations stops shrinking the
previous imputation is returned.

Trees run as tasks in a fixed number of batches (whatever the cluster), whose
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
from distforest.kernels.multi_trees import (
    Outputs,
    draw_groups,
    fit_group_trees,
    imputed_values,
    make_outputs,
)
from distforest.kernels.trees import TreeParams
from distforest.parallel.execution import Runner, current_execution, in_process

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


__all__ = ["MultiSettings", "Outputs", "forest_plan", "impute_multi", "multi_output_impute"]
