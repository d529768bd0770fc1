"""SimForest trees (Sathe & Aggarwal, KDD 2017): grown and applied level by level from similarities.

A SimForest tree never sees features, only similarities ``S(a, b)`` (or
distances, ``kind="distance"``) between objects, requested through a *fetch*
callback, batched so that one call serves every node of a level:

``fetch(rows, row_offsets, cols) -> values``
    ``rows`` (int64, g groups) are pair objects (training object ids);
    ``cols[row_offsets[q]:row_offsets[q + 1]]`` (int64) are the objects wanted
    against ``rows[q]``; the answer is a float array of ``len(cols)`` with
    ``values[t] = S(cols[t], rows[q])`` for ``t`` in group ``q``, NaN where the
    similarity is not observed.  While growing, ``cols`` are training objects
    too (so a stored symmetric matrix answers each group from *row*
    ``rows[q]``); while predicting they are test objects (a stored test x
    train matrix ``Q`` answers from column ``rows[q]`` of ``Q``).  The number of
    evaluations of a call is ``len(cols)``.

:func:`fetch_rows`, :func:`fetch_columns`, :func:`fetch_function` and
:func:`fetch_elementwise` build fetches for in-memory matrices and functions.

Growth (the exact rules are in :mod:`distforest.kernels.simsplit`): per level,
(1) class weights of every node; a node is a leaf when it is pure, at
``max_depth``, or lighter than ``2 min_samples_leaf``; (2) candidate pairs are
drawn for the other nodes and their ``S(O_i, O_j)`` fetched (one call per
draw attempt, almost always one); (3) one fetch of every member (and
out-of-bag passenger) against the nodes' pair objects; (4) the numba sweep
picks each node's split and partitions its members.  Each level asks ``2 r``
similarities per object still descending, so a tree of depth ``O(log n)``
costs ``O(r n log n)`` evaluations.

Randomness: the bootstrap is drawn by ``numpy.random.default_rng(seed)``
(``integers(0, n, size=n)``, counted); node draws are counter-based hashes of
per-node keys derived from the same seed, so a tree depends only on its seed
and data, never on the order in which nodes are visited.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from distforest.errors import InputError, ParameterError
from distforest.kernels.names import SIMFOREST_KINDS, SIMFOREST_MISSING
from distforest.kernels.simsplit import (
    GO_STAY,
    children_keys,
    class_weights,
    draw_pairs,
    level_requests,
    partition,
    split_level,
    tree_root_key,
)

Fetch = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]
KINDS = SIMFOREST_KINDS
MISSING = SIMFOREST_MISSING


@dataclass(frozen=True)
class SimTreeParams:
    """Parameters of one SimForest tree.

    Parameters
    ----------
    n_pairs : int
        Pairs ``(O_i, O_j)`` tried per node (the paper's ``r``).
    kind : {"similarity", "distance"}
        Order by ``S_kj - S_ki`` or by ``D_ki**2 - D_kj**2``.
    max_depth : int or None
        Nodes at this depth are leaves (root depth 0); None grows to purity.
    min_samples_leaf : int
        Minimum in-bag weight of each child of a split.
    missing : {"stay", "both", "larger"}
        An object whose needed similarity is missing: ``"stay"`` stops at the
        node (the paper); ``"both"`` trains like ``"stay"`` but a predicted
        object descends both children, weighted by their training weights;
        ``"larger"`` goes (training and prediction) to the child with the
        larger observed weight.
    bootstrap : bool
        Grow each tree on a bootstrap sample (weights = counts).
    max_draws : int
        Draw attempts per pair before giving it up when ``S(O_i, O_j)`` is missing.
    oob_leaves : bool
        Also route the out-of-bag objects while growing, so that
        :attr:`SimTree.leaves` covers every training object.
    """

    n_pairs: int = 1
    kind: str = "similarity"
    max_depth: int | None = None
    min_samples_leaf: int = 1
    missing: str = "stay"
    bootstrap: bool = True
    max_draws: int = 16
    oob_leaves: bool = True

    def __post_init__(self) -> None:
        for name in ("n_pairs", "min_samples_leaf", "max_draws"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
                raise ParameterError(f"{name} must be an integer >= 1, got {value!r}")
        if self.max_depth is not None and (
            isinstance(self.max_depth, bool)
            or not isinstance(self.max_depth, int | np.integer)
            or self.max_depth < 0
        ):
            raise ParameterError(
                f"max_depth must be None or an integer >= 0, got {self.max_depth!r}"
            )
        if self.kind not in KINDS:
            raise ParameterError(f"kind must be one of {KINDS}, got {self.kind!r}")
        if self.missing not in MISSING:
            raise ParameterError(f"missing must be one of {MISSING}, got {self.missing!r}")


@dataclass
class SimTree:
    """One fitted SimForest tree as flat node arrays (node 0 is the root, ids breadth first).

    Attributes
    ----------
    left, right : int32 (n_nodes,)
        Children, -1 for a leaf.
    pair_i, pair_j : int64 (n_nodes,)
        Object ids of the split pair (``O_j`` of another class than ``O_i``), -1 for a leaf.
    threshold : float64 (n_nodes,)
        Projection ``<= threshold`` goes left.
    missing_go : int8 (n_nodes,)
        Where a missing projection goes: -1 stays, 0 left, 1 right.
    value : float64 (n_nodes, n_classes)
        In-bag class weights of every node (including members that stayed).
    n_node_samples : int64 (n_nodes,)
        In-bag weight of every node.
    depth : int32 (n_nodes,)
    inbag : int32 (n,)
        Bootstrap count of every training object.
    leaves : int32 (n,)
        Final node of every training object (where it stopped under
        ``missing="stay"``), -1 for out-of-bag objects if not routed.
    n_evaluations : int
        Similarities requested while growing.
    missing : str
        The tree's missing rule (prediction default).
    kind : str
        "similarity" or "distance".
    """

    left: np.ndarray
    right: np.ndarray
    pair_i: np.ndarray
    pair_j: np.ndarray
    threshold: np.ndarray
    missing_go: np.ndarray
    value: np.ndarray
    n_node_samples: np.ndarray
    depth: np.ndarray
    inbag: np.ndarray
    leaves: np.ndarray
    n_evaluations: int
    missing: str = "stay"
    kind: str = "similarity"

    @property
    def n_nodes(self) -> int:
        return int(self.left.shape[0])

    @property
    def n_classes(self) -> int:
        return int(self.value.shape[1])

    def node_proba(self) -> np.ndarray:
        """Class distribution of every node, shape (n_nodes, n_classes)."""
        return self.value / self.value.sum(axis=1, keepdims=True)


def _call(fetch: Fetch, rows: np.ndarray, offsets: np.ndarray, cols: np.ndarray) -> np.ndarray:
    if cols.shape[0] == 0:
        return np.empty(0)
    vals = np.asarray(fetch(rows, offsets, cols), dtype=np.float64)
    if vals.shape != cols.shape:
        raise InputError(
            f"fetch returned shape {vals.shape} for {cols.shape[0]} requested similarities; "
            "it must return one value per entry of cols (NaN where not observed)"
        )
    return vals


def check_labels(y: np.ndarray, n_classes: int | None = None) -> tuple[np.ndarray, int]:
    """Labels as int64 codes ``0 .. n_classes - 1``; raise :class:`InputError` otherwise."""
    y = np.asarray(y)
    if y.ndim != 1 or y.shape[0] < 2 or not np.issubdtype(y.dtype, np.integer):
        raise InputError(
            f"y must be a 1-d integer array of class codes with >= 2 objects, got dtype "
            f"{y.dtype} and shape {y.shape}; encode labels with numpy.unique(..., "
            "return_inverse=True)"
        )
    y = y.astype(np.int64)
    k = int(y.max()) + 1 if n_classes is None else int(n_classes)
    if y.min() < 0 or y.max() >= k:
        raise InputError(f"class codes must lie in 0..{k - 1}, got {y.min()}..{y.max()}")
    return y, k


def grow_tree(
    fetch: Fetch,
    y: np.ndarray,
    seed: int,
    params: SimTreeParams | None = None,
    n_classes: int | None = None,
) -> SimTree:
    """Grow one SimForest tree level by level.

    Parameters
    ----------
    fetch : callable
        ``fetch(rows, row_offsets, cols) -> values`` (module docstring).
    y : int array (n,)
        Class codes of the training objects ``0 .. n - 1``.
    seed : int
        The tree's seed (``0 <= seed < 2**64``), e.g. from ``plan_seeds``.
    params : SimTreeParams, optional
    n_classes : int, optional
        Number of classes (default ``y.max() + 1``).

    Returns
    -------
    SimTree
    """
    params = SimTreeParams() if params is None else params
    y, n_cls = check_labels(y, n_classes)
    n = y.shape[0]
    seed = int(seed)
    if params.bootstrap:
        rng = np.random.default_rng(seed)
        inbag = np.bincount(rng.integers(0, n, size=n), minlength=n).astype(np.int32)
    else:
        inbag = np.ones(n, dtype=np.int32)
    order = np.flatnonzero(inbag).astype(np.int64)
    w = inbag[order].astype(np.float64)
    porder = np.flatnonzero(inbag == 0).astype(np.int64) if params.oob_leaves else np.empty(0)
    porder = porder.astype(np.int64)
    offsets = np.array([0, order.shape[0]], dtype=np.int64)
    poffsets = np.array([0, porder.shape[0]], dtype=np.int64)
    keys = np.array([tree_root_key(np.uint64(seed))], dtype=np.uint64)
    ids = np.zeros(1, dtype=np.int64)
    next_id = 1
    depth = 0
    max_depth = np.iinfo(np.int64).max if params.max_depth is None else params.max_depth
    r = params.n_pairs
    distance = params.kind == "distance"
    larger = params.missing == "larger"
    leaves = np.full(n, -1, dtype=np.int32)
    n_eval = 0
    levels: list[tuple[Any, ...]] = []  # per level: node arrays and the depth
    while ids.shape[0]:
        n_nodes = ids.shape[0]
        cw = class_weights(order, w, offsets, y, n_cls)
        weight = cw.sum(axis=1)
        can = ((cw > 0).sum(axis=1) >= 2) & (depth < max_depth)
        can &= weight >= 2 * params.min_samples_leaf
        pi = np.full((n_nodes, r), -1, dtype=np.int64)
        pj = np.full((n_nodes, r), -1, dtype=np.int64)
        valid = np.zeros((n_nodes, r), dtype=bool)
        pending = np.repeat(can[:, None], r, axis=1)
        for attempt in range(params.max_draws):
            if not pending.any():
                break
            ci, cj = draw_pairs(keys, order, w, offsets, y, cw, pending, attempt, params.max_draws)
            kk, pp = np.nonzero(pending)
            a, b = ci[kk, pp], cj[kk, pp]
            sij = _call(fetch, a, np.arange(a.shape[0] + 1, dtype=np.int64), b)
            n_eval += a.shape[0]
            ok = ~np.isnan(sij)
            pi[kk[ok], pp[ok]] = a[ok]
            pj[kk[ok], pp[ok]] = b[ok]
            valid[kk[ok], pp[ok]] = True
            pending[kk[ok], pp[ok]] = False
        rows, roffs, cols, base = level_requests(order, offsets, porder, poffsets, pi, pj, valid)
        vals = _call(fetch, rows, roffs, cols)
        n_eval += cols.shape[0]
        best, thr, mgo, go, pgo = split_level(
            order, w, offsets, porder, poffsets, y, n_cls, vals, base, distance,
            float(params.min_samples_leaf), larger,
        )  # fmt: skip
        split = best >= 0
        node_of = np.repeat(np.arange(n_nodes), np.diff(offsets))
        stay = go == GO_STAY
        leaves[order[stay]] = ids[node_of[stay]]
        pnode_of = np.repeat(np.arange(n_nodes), np.diff(poffsets))
        pstay = pgo == GO_STAY
        leaves[porder[pstay]] = ids[pnode_of[pstay]]
        n_split = int(split.sum())
        child_ids = next_id + np.arange(2 * n_split, dtype=np.int64)
        next_id += 2 * n_split
        left = np.full(n_nodes, -1, dtype=np.int32)
        right = np.full(n_nodes, -1, dtype=np.int32)
        left[split] = child_ids[0::2]
        right[split] = child_ids[1::2]
        sel = np.flatnonzero(split)
        li = np.full(n_nodes, -1, dtype=np.int64)
        lj = np.full(n_nodes, -1, dtype=np.int64)
        li[sel] = pi[sel, best[sel]]
        lj[sel] = pj[sel, best[sel]]
        thr = np.where(split, thr, 0.0)
        levels.append((left, right, li, lj, thr, mgo, cw, depth))
        order, w, offsets = partition(order, w, offsets, go, split)
        porder, _, poffsets = partition(porder, np.empty(0), poffsets, pgo, split)
        keys = children_keys(keys[split])
        ids = child_ids
        depth += 1
    value = np.concatenate([lv[6] for lv in levels])
    return SimTree(
        left=np.concatenate([lv[0] for lv in levels]),
        right=np.concatenate([lv[1] for lv in levels]),
        pair_i=np.concatenate([lv[2] for lv in levels]),
        pair_j=np.concatenate([lv[3] for lv in levels]),
        threshold=np.concatenate([lv[4] for lv in levels]),
        missing_go=np.concatenate([lv[5] for lv in levels]),
        value=value,
        n_node_samples=np.rint(value.sum(axis=1)).astype(np.int64),
        depth=np.concatenate([np.full(lv[0].shape[0], lv[7], dtype=np.int32) for lv in levels]),
        inbag=inbag,
        leaves=leaves,
        n_evaluations=n_eval,
        missing=params.missing,
        kind=params.kind,
    )


def route(
    tree: SimTree, fetch: Fetch, n_objects: int, both: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Send objects ``0 .. n_objects - 1`` down ``tree``, level by level.

    At a node the object needs ``S(obj, pair_i)`` and ``S(obj, pair_j)`` (one
    fetch per level for all objects).  A missing projection follows the node's
    ``missing_go``; where that is "stay", the object stops at the node, or,
    with ``both``, continues into both children with weights proportional to
    their ``n_node_samples``.

    Returns
    -------
    obj, node : int64 arrays
        Final (object, node) entries; every object has at least one.
    weight : float64 array
        Entry weights; those of an object sum to 1.
    n_evaluations : int
    """
    obj = np.arange(n_objects, dtype=np.int64)
    node = np.zeros(n_objects, dtype=np.int64)
    wt = np.ones(n_objects)
    done: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    n_eval = 0
    while obj.shape[0]:
        internal = tree.left[node] >= 0
        done.append((obj[~internal], node[~internal], wt[~internal]))
        obj, node, wt = obj[internal], node[internal], wt[internal]
        if obj.shape[0] == 0:
            break
        srt = np.argsort(node, kind="stable")
        obj, node, wt = obj[srt], node[srt], wt[srt]
        uniq, starts, counts = np.unique(node, return_index=True, return_counts=True)
        rows = np.stack([tree.pair_i[uniq], tree.pair_j[uniq]], axis=1).ravel()
        sizes = np.repeat(counts, 2)
        roffs = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        grp = np.repeat(np.arange(2 * uniq.shape[0]), sizes)
        within = np.arange(grp.shape[0]) - roffs[grp]
        cols = obj[starts[grp // 2] + within]
        vals = _call(fetch, rows, roffs, cols)
        n_eval += cols.shape[0]
        u = np.repeat(np.arange(uniq.shape[0]), counts)
        pos = np.arange(obj.shape[0]) - starts[u]
        si = vals[roffs[2 * u] + pos]
        sj = vals[roffs[2 * u + 1] + pos]
        proj = si * si - sj * sj if tree.kind == "distance" else sj - si
        miss = np.isnan(proj)
        child = np.where(proj <= tree.threshold[node], tree.left[node], tree.right[node])
        mg = tree.missing_go[node]
        child = np.where(miss & (mg == 0), tree.left[node], child)
        child = np.where(miss & (mg == 1), tree.right[node], child)
        stuck = miss & (mg < 0)
        go_on = ~stuck
        nxt = [(obj[go_on], child[go_on].astype(np.int64), wt[go_on])]
        if both:
            o, nd, ww = obj[stuck], node[stuck], wt[stuck]
            nl = tree.n_node_samples[tree.left[nd]].astype(np.float64)
            nr = tree.n_node_samples[tree.right[nd]].astype(np.float64)
            nxt.append((o, tree.left[nd].astype(np.int64), ww * nl / (nl + nr)))
            nxt.append((o, tree.right[nd].astype(np.int64), ww * nr / (nl + nr)))
        else:
            done.append((obj[stuck], node[stuck], wt[stuck]))
        obj = np.concatenate([e[0] for e in nxt])
        node = np.concatenate([e[1] for e in nxt])
        wt = np.concatenate([e[2] for e in nxt])
    return (
        np.concatenate([d[0] for d in done]),
        np.concatenate([d[1] for d in done]),
        np.concatenate([d[2] for d in done]),
        n_eval,
    )


def predict_tree(
    tree: SimTree, fetch: Fetch, n_objects: int, missing: str | None = None
) -> tuple[np.ndarray, int]:
    """Class distributions of objects ``0 .. n_objects - 1`` by one tree.

    Parameters
    ----------
    tree : SimTree
    fetch : callable
        ``fetch(rows, row_offsets, cols)`` with ``rows`` training pair objects
        and ``cols`` the objects to predict.
    n_objects : int
    missing : {"stay", "both", "larger"}, optional
        Prediction rule for a missing projection at a node whose
        ``missing_go`` is "stay" (default: the tree's own rule).

    Returns
    -------
    proba : float64 (n_objects, n_classes)
        Each row is the (weighted) class distribution of the node(s) where
        the object ended.
    n_evaluations : int
    """
    missing = tree.missing if missing is None else missing
    if missing not in MISSING:
        raise ParameterError(f"missing must be one of {MISSING}, got {missing!r}")
    obj, node, wt, n_eval = route(tree, fetch, n_objects, both=missing == "both")
    dist = tree.node_proba()
    proba = np.empty((n_objects, tree.n_classes))
    for c in range(tree.n_classes):
        proba[:, c] = np.bincount(obj, weights=wt * dist[node, c], minlength=n_objects)
    return proba, n_eval


def apply_tree(tree: SimTree, fetch: Fetch, n_objects: int) -> np.ndarray:
    """Node where each object stops (a leaf, or the node where a missing value held it)."""
    obj, node, _, _ = route(tree, fetch, n_objects, both=False)
    out = np.empty(n_objects, dtype=np.int32)
    out[obj] = node
    return out


def grow_forest(
    fetch: Fetch,
    y: np.ndarray,
    seeds: Sequence[int] | np.ndarray,
    params: SimTreeParams | None = None,
    n_classes: int | None = None,
) -> list[SimTree]:
    """Grow one tree per seed, in process (a Dask task would run one batch of seeds)."""
    y, n_cls = check_labels(y, n_classes)
    return [grow_tree(fetch, y, int(s), params, n_cls) for s in seeds]


def predict_forest(
    trees: Sequence[SimTree], fetch: Fetch, n_objects: int, missing: str | None = None
) -> np.ndarray:
    """Mean over trees of the per-tree class distributions, shape (n_objects, n_classes)."""
    if not trees:
        raise ParameterError("predict_forest needs at least one tree, got an empty list")
    total = np.zeros((n_objects, trees[0].n_classes))
    for tree in trees:
        total += predict_tree(tree, fetch, n_objects, missing)[0]
    return total / len(trees)


def apply_forest(trees: Sequence[SimTree], fetch: Fetch, n_objects: int) -> np.ndarray:
    """Node where each object stops in each tree, shape (n_objects, n_trees) int32."""
    return np.stack([apply_tree(tree, fetch, n_objects) for tree in trees], axis=1)


def forest_leaves(trees: Sequence[SimTree]) -> np.ndarray:
    """Training objects' final nodes, shape (n, n_trees) int32 (``leaves[i, t]``)."""
    return np.stack([t.leaves for t in trees], axis=1)
