"""The refined forest: trees grown on a sample, their crowded leaves split on every row.

With trees grown on a fixed sample of rows (``max_samples``, or the automatic
200,000 rows above :data:`~distforest.forests.proximity_forest.LARGE_FOREST_ROWS`),
every leaf fills with ``n / m`` times the rows it was grown on, and every exact
sum over co-leaf pairs (top-k neighbours, dense tiles, imputation from
neighbours) grows as ``n^2``.  A forest with ``leaf_bound`` set grows each
tree's top on the sample as before, routes every row, then splits each leaf
holding more than the bound further on the rows it holds, with the forest's
splitting rule (:mod:`distforest.kernels.refine`), in the same task: the
leaves then hold at most ``leaf_bound`` rows (but for rows whose observed
values are all the same: thresholds lie between observed values, and a
missing value goes right), at any n, and the co-leaf work is at most ``leaf_bound`` events per
row and tree.

This module decides whether and how a forest is refined (:func:`refine_rule`,
whose reason the dry run prints) and refines a grown batch (:func:`refine_grown`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from distforest.errors import ParameterError
from distforest.kernels.refine import refine_batch, resolve_mtry
from distforest.kernels.trees import TreeBatch, TreeParams, sample_size

#: ``leaf_bound="auto"``: the most rows a refined leaf keeps (measured in
#: ``benchmarks/results/refine.md``: 5.7 co-leaf events per row and tree, against
#: 163 for the forest grown on 200,000 of 1,000,000 rows).
AUTO_LEAF_BOUND = 8
#: ``leaf_bound="auto"`` refines when the rows are at least this many times the rows
#: drawn per tree (the leaves that much more crowded than grown): with the default
#: 200,000 rows a tree, from 1,000,000 rows, where the refined forest's fit and
#: neighbours took 3-14 % less CPU a tree than the forest as grown (five seeds), with neighbours
#: as often of their row's class (results/refine-phases.md); at 100,000 rows on
#: 20,000 a tree it took 30 % more (its neighbours save less at smaller n).
AUTO_CROWDING = 5
#: Nodes of a refined tree per row and tree, times its leaf bound: 0.41 nodes a row at
#: bound 8 (1,000,000 rows, trees on 200,000; benchmarks/results/refine-memory.md).
NODES_TIMES_BOUND = 3.3
#: Bytes of a tree node (children, feature, threshold, flag, counts), besides its values.
NODE_BYTES = 29


@dataclass(frozen=True)
class RefineRule:
    """How a batch's crowded leaves are refined (the grower's option).

    Attributes
    ----------
    bound : int
        Leaves with more routed rows are split further, down to at most this many.
    min_split : int
        Rows a refinement node needs to be split by the criterion.
    mtry : int
        Features tried per split.
    n_classes : int
        Classes (0: regression).
    extra : bool
        Random thresholds (extra-trees) instead of the best.
    min_leaf : int
    bootstrap : bool
        Rows of a refined leaf add a Poisson(1) in-bag count (else every row is in bag).
    """

    bound: int
    min_split: int
    mtry: int
    n_classes: int
    extra: bool
    min_leaf: int
    bootstrap: bool

    def row_tree_bytes(self) -> float:
        """Bytes a growing task holds per row and tree of its batch: the leaf and in-bag
        count (5) and the refined tree's nodes, twice (the trees' nodes and their join)."""
        nodes = min(2.0, NODES_TIMES_BOUND / self.bound)
        return 5 + 2 * nodes * (NODE_BYTES + 4 * max(1, self.n_classes))


def _unsupported(params: TreeParams, weighted: bool) -> str | None:
    """Why a forest of ``params`` cannot be refined, or None."""
    if params.task == "unsupervised":
        return "an unsupervised forest (its trees separate the rows from synthetic ones)"
    if params.criterion not in (None, "gini", "squared_error"):
        return f"criterion={params.criterion!r} (refinement splits by gini or squared error)"
    for name in ("max_depth", "max_leaf_nodes", "class_weight", "rows_per_class"):
        if getattr(params, name) is not None:
            return f"{name} (it bounds or weighs the trees otherwise)"
    if params.min_impurity_decrease:
        return "min_impurity_decrease"
    if weighted:
        return "sample_weight"
    return None


def refine_rule(
    leaf_bound: Any, params: TreeParams, n: int, n_features: int, *, weighted: bool = False
) -> tuple[RefineRule | None, str]:
    """The refinement of a forest of ``params`` on ``n`` rows, and why (for the dry run).

    ``leaf_bound``: None never refines; ``"auto"`` refines with
    :data:`AUTO_LEAF_BOUND` when the trees are grown on a sample of at most
    ``1 / AUTO_CROWDING`` of the rows and the forest can be refined; an integer
    always refines (a forest that cannot be refined is refused).
    """
    if leaf_bound is None:
        return None, "leaf_bound=None: leaves as grown"
    why_not = _unsupported(params, weighted)
    if leaf_bound == "auto":
        drawn = None if params.max_samples is None else sample_size(n, params)
        if drawn is None or drawn >= n:
            return None, "leaves as grown: the trees are grown on all the rows (leaf_bound='auto')"
        if drawn * AUTO_CROWDING > n:
            return None, (
                f"leaves as grown: trees grown on {drawn:,} of {n:,} rows, leaves "
                f"{n / drawn:.1f} times as crowded, under the {AUTO_CROWDING} at which refining "
                "them is faster (leaf_bound='auto')"
            )
        if why_not is not None:
            return None, f"leaves as grown: {why_not} is not refined (leaf_bound='auto')"
        bound = AUTO_LEAF_BOUND
        reason = (f"refined: trees grown on {drawn:,} of {n:,} rows, leaves split further to "
                  f"at most {bound} rows (leaf_bound='auto')")  # fmt: skip
    else:
        if why_not is not None:
            raise ParameterError(
                f"leaf_bound={leaf_bound} cannot refine {why_not}; pass leaf_bound=None "
                "(or 'auto', which leaves such forests as grown)"
            )
        bound = int(leaf_bound)
        reason = f"refined: leaves split further to at most {bound} rows (leaf_bound={bound})"
    split = params.min_samples_split
    min_split = max(bound + 1, split if isinstance(split, int) else 2)
    rule = RefineRule(
        bound=bound, min_split=min_split, mtry=resolve_mtry(params.max_features, n_features),
        n_classes=params.n_classes if params.task == "classification" else 0,
        extra=params.kind == "extra-trees", min_leaf=params.min_samples_leaf,
        bootstrap=params.bootstrap,
    )  # fmt: skip
    return rule, reason


def refine_grown(
    batch: TreeBatch, X: np.ndarray, y: np.ndarray, seeds: np.ndarray, rule: RefineRule
) -> TreeBatch:
    """``batch`` (grown with its nodes, every row routed) with its crowded leaves refined."""
    leaves, inbag, nodes, counts = refine_batch(
        X, y, batch.leaves, batch.inbag, seeds, batch.nodes, batch.node_counts,
        bound=rule.bound, min_split=rule.min_split, mtry=rule.mtry, n_classes=rule.n_classes,
        extra=rule.extra, min_leaf=rule.min_leaf, bootstrap=rule.bootstrap,
    )  # fmt: skip
    return TreeBatch(leaves, inbag, counts, nodes, batch.importances)
