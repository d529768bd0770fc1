"""Multi-output trees that each predict a random group of columns: design (b) of imputation.

One forest per iteration.  Tree t draws a group ``G_t`` of the columns to
impute; its outputs are the columns of ``G_t`` (numeric ones standardised,
categorical ones as the one-hot of their levels), its inputs every other
column (the current fill) and the target, when given.  It is fitted on the
rows where every column of ``G_t`` is observed, so a row with a missing cell
in column c of ``G_t`` is out of bag in tree t and the tree's prediction for
it is the in-bag weighted mean of c's observed values over its leaf: its
RF-GAP proximity-weighted mean (Rhodes et al. 2023), exactly as for the
per-column forests of :mod:`distforest.kernels.column_trees`.  Column c's
imputation is the mean over the trees whose group held c (numeric) or the
level with the largest mean one-hot value (categorical: a weighted vote).

Groups are drawn in rounds: each round is a random permutation of the
columns cut into groups of ``group_size``, so every column is predicted by
exactly one tree per round and by ``rounds`` trees in all.

Pure numpy and scikit-learn: arrays and seeds in, arrays out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from distforest.kernels.trees import TreeParams, bootstrap_counts, make_tree


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
