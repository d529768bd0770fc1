"""Trees that predict one column from the others: column-aware proximity imputation.

For column c, a forest is fitted on the rows where c is observed, with the
other columns (and the target codes, when given) as inputs and c as the
output: regression trees for a numeric column, classification trees for a
categorical one.  A missing cell of row i then becomes the RF-GAP
proximity-weighted mean of the observed values of c (Rhodes et al. 2023)::

    (P V)_i = (1/T) sum_t sum_{j in leaf_t(i)} c_j(t) V_j / M_i(t)

with c_j(t) the in-bag count of j and M_i(t) the total in-bag count of the
leaf.  Row i is out of bag in every tree (it was not a training row), so the
inner sum is the in-bag weighted mean of V over i's leaf: the product
factorises into one *leaf value* per tree and leaf (the leaf sum of c V
over the leaf sum of c), which is the node value scikit-learn's tree stores.
``V`` is the column's observed value (numeric: the weighted mean is the
forest's prediction) or the one-hot of its levels (categorical: the weighted
class fractions; the level with the largest weighted vote is the forest's
majority class).  No n x n matrix exists at any point: O(n T) per column.

Everything random comes from the per-tree seeds (as in
:mod:`distforest.kernels.trees`, whose tree fitting is reused).  Pure numpy
and scikit-learn: arrays and seeds in, arrays out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from distforest.kernels.trees import TreeParams, bootstrap_counts, make_tree

#: The node arrays a column forest keeps: what routing a row needs.
ROUTING_FIELDS = ("children_left", "children_right", "feature", "threshold", "missing_go_to_left")


@dataclass(frozen=True)
class ColumnTrees:
    """A batch of trees predicting one column, reduced to what imputation needs.

    Attributes
    ----------
    node_counts : ndarray of int64, shape (n_trees,)
    nodes : dict of str to ndarray
        Routing arrays of :data:`ROUTING_FIELDS`, concatenated over the trees
        (child indices local to their tree).
    leaf_values : ndarray of float64, shape (n_nodes, k)
        Per node: the in-bag weighted mean of V over the node's training rows
        (leaves only; 0 elsewhere).  k = 1 for a numeric column, the number
        of observed levels for a categorical one.
    prediction_sum : ndarray of float64, shape (m, k)
        Sum over the batch's trees of the leaf values of the rows to impute.
    """

    node_counts: np.ndarray
    nodes: dict[str, np.ndarray]
    leaf_values: np.ndarray
    prediction_sum: np.ndarray


def column_inputs(X: np.ndarray, column: int, extra: np.ndarray | None) -> np.ndarray:
    """The inputs of column ``column``'s trees: every other column, then ``extra``.

    Parameters
    ----------
    X : ndarray, shape (n, d)
        Filled data (no NaN).
    column : int
    extra : ndarray, shape (n,) or (n, e), or None
        More inputs, e.g. the target's class codes.

    Returns
    -------
    ndarray of float64, shape (n, d - 1 + e)
    """
    parts = [X[:, :column], X[:, column + 1 :]]
    if extra is not None:
        parts.append(extra.reshape(X.shape[0], -1).astype(np.float64))
    return np.ascontiguousarray(np.concatenate(parts, axis=1), dtype=np.float64)


def inbag_counts(
    rng: np.random.Generator, n: int, params: TreeParams, max_rows: int | None
) -> np.ndarray:
    """In-bag counts of one tree over the column's ``n`` observed rows.

    ``max_rows`` None (or at least ``n``): every row once (extra-trees) or a
    bootstrap sample of ``n`` (random forest), as
    :func:`~distforest.kernels.trees.bootstrap_counts` draws them.  Fewer:
    ``max_rows`` distinct rows drawn at random (extra-trees), or a bootstrap
    sample of size ``max_rows`` (random forest, scikit-learn's
    ``max_samples``).  Rows with a count of 0 are out of bag for the tree:
    their RF-GAP weight in it is 0, so the weights stay well defined.

    Parameters
    ----------
    rng : numpy.random.Generator
        The tree's generator (consumed first).
    n : int
    params : TreeParams
    max_rows : int or None

    Returns
    -------
    ndarray of uint8, shape (n,)
    """
    if max_rows is None or max_rows >= n:
        return bootstrap_counts(rng, n, params)  # draws nothing for extra-trees
    if params.bootstrap:
        return bootstrap_counts(rng, n, replace(params, max_samples=max_rows / n))
    counts = np.zeros(n, dtype=np.uint8)
    counts[rng.choice(n, size=max_rows, replace=False)] = 1
    return counts


def _inputs(
    X: np.ndarray, positions: np.ndarray, column: int, extra: np.ndarray | None
) -> np.ndarray:
    """The trees' float32 inputs of rows ``positions`` (:func:`column_inputs` of those rows)."""
    part = None if extra is None else extra[positions]
    return np.ascontiguousarray(column_inputs(X[positions], column, part), dtype=np.float32)


def fit_column_tree(
    F: np.ndarray | None,
    target: np.ndarray,
    n_levels: int,
    seed: int,
    params: TreeParams,
    rows: np.ndarray | None = None,
    *,
    max_rows: int | None = None,
    inputs: Callable[[np.ndarray], np.ndarray] | None = None,
) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray | None]:
    """Fit one tree from its seed, as :func:`distforest.kernels.trees.fit_one_tree` does.

    The seed gives the in-bag counts (:func:`inbag_counts`), then the tree's
    own ``random_state`` (the same order of draws as ``fit_one_tree``).  The
    trees' leaf values are scikit-learn's node values: the in-bag weighted
    mean of the column (regression) or the weighted class fractions
    (classification), i.e. the leaf sums of ``V`` over the leaf's total
    in-bag count.

    Parameters
    ----------
    F : ndarray of float32, shape (n, d_in), or None with ``inputs``
        Inputs of the training rows (C-contiguous: validation is skipped).
    target : ndarray, shape (n,)
        Values, or level index 0..n_levels-1.
    n_levels : int
        0 for a numeric column.
    seed : int
    params : TreeParams
    rows : ndarray of float32, shape (m, d_in), optional
        Rows to route through the new tree (C-contiguous).
    max_rows : int, optional
        In-bag rows drawn for the tree (see :func:`inbag_counts`).
    inputs : callable, optional
        ``inputs(positions)``: the float32 inputs of those training rows,
        when ``F`` is not given (a subsampled tree builds only its own rows).

    Returns
    -------
    nodes : dict of str to ndarray
        The routing arrays of :data:`ROUTING_FIELDS`.
    leaf_values : ndarray of float64, shape (n_nodes, max(1, n_levels))
    row_values : ndarray of float64, shape (m, max(1, n_levels)) or None
        The leaf values of ``rows``.
    """
    rng = np.random.default_rng(seed)
    n = target.shape[0]
    inbag = inbag_counts(rng, n, params, max_rows)
    tree = make_tree(params, int(rng.integers(0, 2**31 - 1)))
    # the checks of tree.fit (dtype, finiteness) hold by construction: skip them, as
    # scikit-learn's own forests do
    if params.bootstrap or (max_rows is not None and max_rows < n):
        used = np.flatnonzero(inbag)
        train = F[used] if F is not None else inputs(used)  # type: ignore[misc]
        weight = inbag[used].astype(np.float64) if params.bootstrap else None
        tree._fit(train, target[used], sample_weight=weight, check_input=False)
    else:  # every row once: no weights is the same tree (weights of 1), a third faster
        assert F is not None  # given when every row is used
        tree._fit(F, target, check_input=False)
    t = tree.tree_
    value = t.value[:, 0, :]
    if n_levels:
        values = np.zeros((value.shape[0], n_levels))
        values[:, tree.classes_.astype(np.int64)] = value  # levels missing from the sample
    else:
        values = np.ascontiguousarray(value[:, :1], dtype=np.float64)
    nodes = {
        "children_left": t.children_left.astype(np.int32),
        "children_right": t.children_right.astype(np.int32),
        "feature": t.feature.astype(np.int32),
        "threshold": t.threshold.astype(np.float64),
        "missing_go_to_left": t.missing_go_to_left.astype(np.uint8),
    }
    row_values = None if rows is None else values[tree.apply(rows, check_input=False)]
    return nodes, values, row_values


def fit_column_trees(
    X: np.ndarray,
    extra: np.ndarray | None,
    column: int,
    observed: np.ndarray,
    target: np.ndarray,
    n_levels: int,
    seeds: np.ndarray,
    params: TreeParams,
    max_rows: int | None = None,
    keep_nodes: bool = True,
) -> ColumnTrees:
    """Fit one batch of trees predicting ``column`` and impute its missing rows.

    Parameters
    ----------
    X : ndarray, shape (n, d)
        The current filled data.
    extra : ndarray or None
        More inputs (see :func:`column_inputs`).
    column : int
    observed : ndarray of bool, shape (n,)
        Rows where the column was observed: the training rows.
    target : ndarray, shape (n_observed,)
        What the trees fit: the observed values (regression) or level index
        0..n_levels-1 (classification).
    n_levels : int
        Observed levels of a categorical column; 0 for a numeric one.
    seeds : ndarray of uint64, shape (n_trees,)
        One seed per tree.
    params : TreeParams
        ``task`` is "regression" or "classification".
    max_rows : int, optional
        In-bag rows per tree (:func:`inbag_counts`); None: every observed row.
        Fewer than the observed rows: each tree builds only its own rows'
        inputs, never the whole table's.
    keep_nodes : bool, default True
        False: return no trees (empty node arrays), only ``prediction_sum``:
        what the next step of the imputation needs.

    Returns
    -------
    ColumnTrees
        With ``prediction_sum`` for the rows where the column is missing.
    """
    n_observed = target.shape[0]
    if max_rows is None or max_rows >= n_observed:
        max_rows, F = None, column_inputs(X, column, extra)
        train: np.ndarray | None = np.ascontiguousarray(F[observed], dtype=np.float32)
        rows = np.ascontiguousarray(F[~observed], dtype=np.float32)
        del F
    else:  # each tree gathers the inputs of its own rows
        train, rows = None, _inputs(X, np.flatnonzero(~observed), column, extra)
    positions = np.flatnonzero(observed)
    k = max(1, n_levels)
    total = np.zeros((rows.shape[0], k))
    parts = []
    for seed in seeds:
        nodes, values, row_values = fit_column_tree(
            train, target, n_levels, int(seed), params, rows, max_rows=max_rows,
            inputs=lambda used: _inputs(X, positions[used], column, extra),
        )  # fmt: skip
        assert row_values is not None  # rows were given
        total += row_values  # in tree order: the same bits for any batching
        if keep_nodes:
            parts.append((nodes, values))
        else:
            parts.append(({f: v[:0] for f, v in nodes.items()}, values[:0]))
    return ColumnTrees(
        node_counts=np.array([len(n["feature"]) for n, _ in parts], dtype=np.int64),
        nodes={f: np.concatenate([n[f] for n, _ in parts]) for f in ROUTING_FIELDS},
        leaf_values=np.concatenate([v for _, v in parts]),
        prediction_sum=total,
    )


def predict_sum(trees: ColumnTrees, F: np.ndarray) -> np.ndarray:
    """Sum over the trees of the leaf values of rows ``F`` (already the trees' inputs).

    Parameters
    ----------
    trees : ColumnTrees
    F : ndarray, shape (m, d_in)

    Returns
    -------
    ndarray of float64, shape (m, k)
        Divide by the number of trees for the proximity-weighted mean (vote).
    """
    from distforest.kernels.apply import apply_nodes  # numba: imported when new rows come

    offsets = np.concatenate([[0], np.cumsum(trees.node_counts)]).astype(np.int64)
    leaves = apply_nodes(F, {**trees.nodes, "node_offset": offsets})
    out = np.zeros((F.shape[0], trees.leaf_values.shape[1]))
    for t in range(leaves.shape[1]):  # in tree order: the same bits for any batching
        out += trees.leaf_values[offsets[t] + leaves[:, t]]
    return out
