"""Fit a batch of trees with scikit-learn and flatten them to plain arrays.

Everything a tree needs is derived from its seed: the bootstrap in-bag
counts, the tree's own ``random_state`` and, for unsupervised forests, the
synthetic contrast sample.  So the same seed gives the same tree whichever
worker, batch or thread fits it.

This module is pure: numpy arrays and seeds in, numpy arrays out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from sklearn.tree import (
    DecisionTreeClassifier,
    DecisionTreeRegressor,
    ExtraTreeClassifier,
    ExtraTreeRegressor,
)

Task = Literal["classification", "regression", "unsupervised"]

#: In-bag counts are stored as uint8; a bootstrap count above this is refused.
MAX_INBAG_COUNT = np.iinfo(np.uint8).max

#: Names of the per-node arrays of a flattened tree, in storage order.  The
#: routing arrays keep scikit-learn's exact values (threshold float64); node
#: statistics are stored compactly (value and weights float32, counts int32).
NODE_FIELDS = (
    "children_left",
    "children_right",
    "feature",
    "threshold",
    "missing_go_to_left",
    "n_node_samples",
    "weighted_n_node_samples",
    "value",
)


@dataclass(frozen=True)
class TreeParams:
    """Settings shared by every tree of a forest (already validated).

    Parameters
    ----------
    task : {"classification", "regression", "unsupervised"}
    kind : {"random-forest", "extra-trees"}
        Best split among ``max_features`` candidates, or a random threshold
        per candidate feature (extremely randomized trees).
    max_features : int, float, str or None
        As in scikit-learn's trees.
    min_samples_leaf : int
    max_depth : int or None
    bootstrap : bool
        Draw in-bag counts with replacement; otherwise every row is in bag once.
    max_samples : float, int or None
        Bootstrap sample size: a fraction of n, a count (an int), or ``None``: n.
    n_classes : int
        Number of classes (2 for unsupervised, 0 for regression).
    min_samples_split, max_leaf_nodes, min_impurity_decrease
        As in scikit-learn's trees (their defaults by default).
    criterion : str or None
        scikit-learn's split criterion; None: the tree's default (gini, squared_error).
    class_weight : {"balanced", "balanced_subsample"}, tuple of (code, weight) or None
        Class weights multiplying each tree's row weights, as in scikit-learn's
        forests: ``balanced`` from the whole target, ``balanced_subsample`` from
        each tree's bootstrap sample, pairs from a mapping (classes as codes).
    rows_per_class : tuple of int or None
        Per-class bootstrap sizes, one per class code (R's ``sampsize`` with
        ``strata`` the target); replaces ``max_samples``.
    """

    task: Task
    kind: str
    max_features: int | float | str | None
    min_samples_leaf: int
    max_depth: int | None
    bootstrap: bool
    max_samples: float | int | None
    n_classes: int
    min_samples_split: int | float = 2
    max_leaf_nodes: int | None = None
    min_impurity_decrease: float = 0.0
    criterion: str | None = None
    class_weight: str | tuple[tuple[int, float], ...] | None = None
    rows_per_class: tuple[int, ...] | None = None


@dataclass(frozen=True)
class TreeBatch:
    """The fitted trees of one batch, flattened.

    Attributes
    ----------
    leaves : ndarray of int32, shape (n_samples, n_trees)
        Leaf (node index within its tree) of every training row.
    inbag : ndarray of uint8, shape (n_samples, n_trees)
        Bootstrap count of every training row.
    node_counts : ndarray of int64, shape (n_trees,)
        Number of nodes of each tree.
    nodes : dict of str to ndarray
        Per-node arrays of all trees of the batch, concatenated (see
        :data:`NODE_FIELDS`); child indices are local to their tree.
    importances : ndarray of float64, shape (n_trees, n_features)
        Each tree's impurity-based feature importances, normalised to sum to
        1 (all zeros for a tree that is a single leaf), as scikit-learn's
        ``tree.feature_importances_``.
    """

    leaves: np.ndarray
    inbag: np.ndarray
    node_counts: np.ndarray
    nodes: dict[str, np.ndarray]
    importances: np.ndarray

    def nodes_only(self) -> TreeBatch:
        """The same batch without its per-row arrays (once they are copied elsewhere)."""
        empty = np.empty((0, self.leaves.shape[1]))
        return TreeBatch(empty.astype(np.int32), empty.astype(np.uint8), self.node_counts,
                         self.nodes, self.importances)  # fmt: skip


def tree_input(X: np.ndarray) -> np.ndarray:
    """``X`` as the trees read it: float32, C-ordered (no copy when it already is).

    scikit-learn's trees convert their input to float32 on every ``fit`` and
    ``apply``; converting once (on the driver, before ``X`` is sent to the
    workers) gives the very same values, half the bytes to send, and no
    per-tree conversion.  The caller checks that the values fit in float32
    (:func:`distforest.io.load_table` does).

    Parameters
    ----------
    X : ndarray of float, shape (n, d)

    Returns
    -------
    ndarray of float32, shape (n, d)
    """
    return np.ascontiguousarray(X, dtype=np.float32)


def bootstrap_counts(
    rng: np.random.Generator, n: int, params: TreeParams, y: np.ndarray | None = None
) -> np.ndarray:
    """In-bag counts of ``n`` rows for one tree.

    Parameters
    ----------
    rng : numpy.random.Generator
        The tree's generator (consumed in a fixed order).
    n : int
        Number of rows.
    params : TreeParams
    y : ndarray of int, shape (n,), optional
        Class codes, for ``params.rows_per_class`` (drawn class by class).

    Returns
    -------
    ndarray of uint8, shape (n,)
    """
    if not params.bootstrap:
        return np.ones(n, dtype=np.uint8)
    if params.rows_per_class is not None:
        assert y is not None  # classification only (checked by the estimator)
        drawn = []
        for code, size in enumerate(params.rows_per_class):
            rows = np.flatnonzero(y == code)
            if rows.size == 0:
                raise ValueError(
                    f"max_samples asks for {size} rows of class code {code}, which has none"
                )
            drawn.append(rows[rng.integers(0, rows.size, size=size)])
        counts = np.bincount(np.concatenate(drawn), minlength=n)
    else:
        counts = np.bincount(rng.integers(0, n, size=sample_size(n, params)), minlength=n)
    if counts.max() > MAX_INBAG_COUNT:
        raise ValueError(
            f"a bootstrap count of {counts.max()} does not fit in uint8; lower max_samples"
        )
    return counts.astype(np.uint8)


def sample_size(n: int, params: TreeParams) -> int:
    """Rows drawn for one tree's bootstrap (scikit-learn's rule for ``max_samples``)."""
    if params.max_samples is None:
        return n
    if isinstance(params.max_samples, int):
        return params.max_samples
    return max(1, round(params.max_samples * n))


def synthetic_contrast(rng: np.random.Generator, X: np.ndarray) -> np.ndarray:
    """Breiman's synthetic second class: each column sampled from its marginal.

    Parameters
    ----------
    rng : numpy.random.Generator
    X : ndarray, shape (n, d)

    Returns
    -------
    ndarray, shape (n, d)
        Rows whose features are independent draws (with replacement) from
        the observed values of each column, which destroys the dependence
        between columns that the forest then learns to recognise.
    """
    n, d = X.shape
    rows = rng.integers(0, n, size=(n, d))
    return np.take_along_axis(X, rows, axis=0)


def make_tree(params: TreeParams, seed: int):
    """The scikit-learn tree of ``params`` (not fitted), with ``random_state=seed``."""
    random_forest = params.kind == "random-forest"
    if params.task == "regression":
        cls = DecisionTreeRegressor if random_forest else ExtraTreeRegressor
    else:
        cls = DecisionTreeClassifier if random_forest else ExtraTreeClassifier
    more = {} if params.criterion is None else {"criterion": params.criterion}
    return cls(
        max_features=params.max_features,
        min_samples_split=params.min_samples_split,
        min_samples_leaf=params.min_samples_leaf,
        max_depth=params.max_depth,
        max_leaf_nodes=params.max_leaf_nodes,
        min_impurity_decrease=params.min_impurity_decrease,
        random_state=seed,
        **more,
    )


def _flatten(tree, params: TreeParams) -> dict[str, np.ndarray]:
    t = tree.tree_
    value = t.value[:, 0, :] if params.task != "regression" else t.value[:, 0, :1]
    if params.task != "regression" and value.shape[1] < params.n_classes:
        # A bootstrap sample may miss a class; sklearn then stores fewer
        # columns.  Put them back at the positions of the forest's classes.
        full = np.zeros((value.shape[0], params.n_classes))
        full[:, tree.classes_.astype(np.int64)] = value
        value = full
    return {
        "children_left": t.children_left.astype(np.int32),
        "children_right": t.children_right.astype(np.int32),
        "feature": t.feature.astype(np.int32),
        "threshold": t.threshold.astype(np.float64),
        "missing_go_to_left": t.missing_go_to_left.astype(np.uint8),
        "n_node_samples": t.n_node_samples.astype(np.int32),
        "weighted_n_node_samples": t.weighted_n_node_samples.astype(np.float32),
        "value": value.astype(np.float32),
    }


def fit_one_tree(
    X: np.ndarray,
    y: np.ndarray | None,
    seed: int,
    params: TreeParams,
    sample_weight: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray], np.ndarray]:
    """Fit one tree from its seed.

    Parameters
    ----------
    X : ndarray of float, shape (n, d)
        Features; NaN allowed (scikit-learn's trees route missing values).
        Best given as :func:`tree_input` (float32), else converted here.
    y : ndarray, shape (n,) or None
        Class codes 0..k-1 (classification), floats (regression), or None
        (unsupervised).
    seed : int
        The tree's seed, from which everything random is derived.
    params : TreeParams
    sample_weight : ndarray of float64, shape (n,), optional
        Row weights, multiplying the in-bag counts (see :func:`grow_tree`).

    Returns
    -------
    leaves : ndarray of int32, shape (n,)
    inbag : ndarray of uint8, shape (n,)
    nodes : dict of str to ndarray
    importances : ndarray of float64, shape (d,)
        The tree's normalised impurity decrease per feature.
    """
    X = tree_input(X)
    inbag, tree = grow_tree(X, y, seed, params, sample_weight)
    # float32 already; finiteness is the caller's (load_table refuses infinities)
    leaves = tree.apply(X, check_input=False).astype(np.int32)
    return leaves, inbag, _flatten(tree, params), tree.feature_importances_


def class_weights(y: np.ndarray, inbag: np.ndarray, params: TreeParams) -> np.ndarray:
    """Each row's class weight for one tree, as scikit-learn's forests compute it.

    ``balanced``: ``n / (k * count)`` of the row's class over the whole target;
    ``balanced_subsample``: the same over the tree's bootstrap sample (rows
    counted as often as drawn); pairs: the given weight per class code (1 for
    a class not given).

    Parameters
    ----------
    y : ndarray of int, shape (n,)
        Class codes.
    inbag : ndarray of uint8, shape (n,)
        The tree's in-bag counts.
    params : TreeParams

    Returns
    -------
    ndarray of float64, shape (n,)
    """
    from sklearn.utils.class_weight import compute_sample_weight

    if params.class_weight == "balanced_subsample" and params.bootstrap:
        drawn = np.repeat(np.arange(y.size), inbag)
        return compute_sample_weight("balanced", y, indices=drawn)
    if isinstance(params.class_weight, str):  # balanced (or balanced_subsample without bootstrap)
        return compute_sample_weight("balanced", y)
    assert params.class_weight is not None
    per_code = np.ones(max(params.n_classes, int(y.max()) + 1))
    for code, w in params.class_weight:
        per_code[code] = w
    return per_code[y]


def grow_tree(
    X: np.ndarray,
    y: np.ndarray | None,
    seed: int,
    params: TreeParams,
    sample_weight: np.ndarray | None = None,
) -> tuple:
    """Grow one tree from its seed, without routing the rows through it.

    The rows' weights in the tree are their in-bag counts, times
    ``sample_weight`` and the class weights when given (scikit-learn's
    forests' rule); without them the trees are those grown before weights
    existed, bit for bit.

    Parameters
    ----------
    X : ndarray of float32, shape (n, d)
        As :func:`tree_input` gives it.
    y : ndarray, shape (n,) or None
    seed : int
    params : TreeParams
    sample_weight : ndarray of float64, shape (n,), optional

    Returns
    -------
    inbag : ndarray of uint8, shape (n,)
    tree : the fitted scikit-learn tree
    """
    rng = np.random.default_rng(seed)
    n = X.shape[0]
    inbag = bootstrap_counts(rng, n, params, y)
    tree_seed = int(rng.integers(0, 2**31 - 1))
    used = np.flatnonzero(inbag)
    if params.task == "unsupervised":
        synthetic = synthetic_contrast(rng, X)
        synthetic_inbag = bootstrap_counts(rng, n, params)
        used_synthetic = np.flatnonzero(synthetic_inbag)
        X_fit = np.concatenate([X[used], synthetic[used_synthetic]])
        y_fit = np.repeat(np.array([0, 1]), [used.size, used_synthetic.size])
        weight = np.concatenate([inbag[used], synthetic_inbag[used_synthetic]]).astype(float)
    else:
        assert y is not None  # supervised forests always have a target
        X_fit, y_fit, weight = X[used], y[used], inbag[used].astype(float)
        if sample_weight is not None:
            weight *= sample_weight[used]
        if params.class_weight is not None:
            weight *= class_weights(y, inbag, params)[used]
    tree = make_tree(params, tree_seed).fit(X_fit, y_fit, sample_weight=weight)
    return inbag, tree


def grow_nodes(
    X: np.ndarray,
    y: np.ndarray | None,
    seeds: np.ndarray,
    params: TreeParams,
    sample_weight: np.ndarray | None = None,
) -> TreeBatch:
    """Grow one tree per seed; keep their nodes and in-bag counts, route no row.

    For rows read from a store: the leaves of every row are computed
    afterwards by row chunks (:func:`distforest.kernels.apply.apply_forest`).
    The trees are those :func:`fit_tree_batch` grows from the same seeds.

    Returns
    -------
    TreeBatch
        With ``leaves`` empty (0 rows) and ``inbag`` of shape (n, n_trees).
    """
    X = tree_input(X)
    n = X.shape[0]
    inbag = np.empty((n, len(seeds)), dtype=np.uint8)
    per_tree, node_counts = [], np.empty(len(seeds), dtype=np.int64)
    importances = np.empty((len(seeds), X.shape[1]), dtype=np.float64)
    for k, seed in enumerate(seeds):
        inbag[:, k], tree = grow_tree(X, y, int(seed), params, sample_weight)
        nodes = _flatten(tree, params)
        node_counts[k] = len(nodes["feature"])
        importances[k] = tree.feature_importances_
        per_tree.append(nodes)
    merged = {f: np.concatenate([t[f] for t in per_tree]) for f in NODE_FIELDS}
    leaves = np.empty((0, len(seeds)), dtype=np.int32)
    return TreeBatch(leaves, inbag, node_counts, merged, importances)


def fit_tree_batch(
    X: np.ndarray,
    y: np.ndarray | None,
    seeds: np.ndarray,
    params: TreeParams,
    keep_nodes: bool = True,
    sample_weight: np.ndarray | None = None,
) -> TreeBatch:
    """Fit one tree per seed and flatten the batch.

    Parameters
    ----------
    X : ndarray of float, shape (n, d)
        Best given as :func:`tree_input` (float32), else converted once here.
    y : ndarray, shape (n,) or None
    seeds : ndarray of uint64, shape (n_trees,)
    params : TreeParams
    keep_nodes : bool, default True
        False: drop each tree's nodes once its leaves are known (``nodes`` is
        then empty; ``node_counts`` is kept), for callers that only need the
        training rows' leaves and in-bag counts.
    sample_weight : ndarray of float64, shape (n,), optional
        Row weights (see :func:`grow_tree`).

    Returns
    -------
    TreeBatch
    """
    X = tree_input(X)  # once for the batch, not once per tree
    n = X.shape[0]
    leaves = np.empty((n, len(seeds)), dtype=np.int32)
    inbag = np.empty((n, len(seeds)), dtype=np.uint8)
    per_tree = []
    node_counts = np.empty(len(seeds), dtype=np.int64)
    importances = np.empty((len(seeds), X.shape[1]), dtype=np.float64)
    for k, seed in enumerate(seeds):
        leaves[:, k], inbag[:, k], nodes, importances[k] = fit_one_tree(
            X, y, int(seed), params, sample_weight
        )
        node_counts[k] = len(nodes["feature"])
        if keep_nodes:
            per_tree.append(nodes)
    merged = (
        {f: np.concatenate([t[f] for t in per_tree]) for f in NODE_FIELDS} if keep_nodes else {}
    )
    return TreeBatch(leaves=leaves, inbag=inbag, node_counts=node_counts, nodes=merged,
                     importances=importances)  # fmt: skip
