"""SMERF trees: splits that minimise the children's average within-node distance.

A node with members M (``m`` rows, a row drawn twice by the bootstrap counts
twice) is split into children c minimising (docs/design.md section 4)::

    sum_c (n_c / m) * mean_{a, b in c, D_ab observed} D_ab      (self-pairs included)

With a complete D the child's mean is ``sum_{a,b in c} D_ab / n_c^2`` and the
objective is ``sum_c (1 / (m n_c)) sum_{a, b in c} D_ab``.  With
``D = 1[y_a != y_b]`` this is the weighted Gini impurity, with
``D = (y_a - y_b)^2 / 2`` the weighted variance: SMERF generalises CART.

Missing pairs (NaN in D) are left out of every sum and every count: each
child's mean is over its observed pairs, and a cut leaving a child with no
observed pair is not allowed.

:func:`sweep_feature` sweeps every cut of one candidate in O(k) for the k-th
cut from running sums over the sorted node (O(m^2) per candidate, never
O(m^3)), reading D in place through the node's row ids (no copy of the
node's block).  :func:`grow_tree` grows one tree depth first.

Candidates: axis-aligned (``max_features`` features per node) or, with
``oblique=True``, as many sparse random projections in the manner of SPORF
(Tomita et al. 2020): each has ``1 + Poisson(0.5)`` distinct features (at
most d; on average about 1.5 as SPORF's default density) with random +-1
weights.  A split is stored as a projection (features and weights);
an axis-aligned split is the projection with one feature and weight 1.

Randomness: one ``numpy.random.Generator`` per tree from its seed; the
bootstrap is drawn first (``sort(rng.integers(0, n, n))``), then each node
that may be split, in depth-first order (left child before right), draws its
candidates: axis-aligned, ``rng.choice(d, k, replace=False)`` (all features in
order when ``k == d``); oblique, for each of the k candidates
``c = min(d, 1 + rng.poisson(0.5))``, ``rng.choice(d, c, replace=False)``
and ``rng.random(c) < 0.5`` for the negative signs.

Ties: the first best cut wins, in this order: candidates in the order drawn,
cuts from the smallest threshold up; a later cut replaces the best only when
smaller by more than a relative 1e-12 (:data:`TIE`), so that equal objectives
summed in different orders stay ties.  Thresholds are midpoints of consecutive distinct values,
``<=`` goes left.  A node is a leaf when its observed distances are all
equal (e.g. a pure node for the Gini distance), it has fewer than
``2 * min_samples_leaf`` in-bag rows, it is at ``max_depth``, or no
candidate has an allowed cut.

Prediction (:func:`tile_distance`): a tree predicts pair (a, b) as the mean
of the observed D over the in-bag members (with multiplicity) of a's leaf and
b's leaf; the forest averages the trees where that mean exists (a tree whose
two leaves share no observed pair abstains), and a pair on which every tree
abstains gets ``fallback`` (the mean of all observed D).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit

from distforest.kernels.signatures import kernel_input

#: Mean number of extra features in an oblique candidate (SPORF density ~1.5).
OBLIQUE_EXTRA = 0.5
#: A cut or candidate replaces the best one only when smaller by more than this
#: fraction of it: equal objectives computed in different orders are ties.
TIE = 1e-12


@njit(nogil=True, cache=True)
def better(value, best):  # pragma: no cover - numba
    """Whether ``value`` beats ``best`` by more than rounding (see :data:`TIE`)."""
    return value < best - TIE * abs(best) if best != np.inf else value < best


@njit(nogil=True, cache=True)
def node_sums(D, rows):  # pragma: no cover - numba
    """Per member: sum and count of its observed distances to the node; the range of D.

    Returns
    -------
    rowsum, rowcnt : ndarray, shape (m,)
    lo, hi : float
        Smallest and largest observed distance in the node (inf, -inf if none).
    """
    m = rows.shape[0]
    rowsum = np.zeros(m)
    rowcnt = np.zeros(m)
    lo, hi = np.inf, -np.inf
    for a in range(m):
        ra = rows[a]
        s, c = 0.0, 0.0
        for b in range(m):
            v = D[ra, rows[b]]
            if v == v:
                s += v
                c += 1.0
                if v < lo:
                    lo = v
                if v > hi:
                    hi = v
        rowsum[a] = s
        rowcnt[a] = c
    return rowsum, rowcnt, lo, hi


@njit(nogil=True, cache=True)
def sweep_feature(x, D, rows, rowsum, rowcnt, min_leaf):  # pragma: no cover - numba
    """Best cut of one candidate: (objective, threshold), or (inf, nan) if none is allowed.

    Parameters
    ----------
    x : ndarray, shape (m,)
        The node's values of the candidate (a feature or a projection).
    D : ndarray, shape (n, n)
        The whole distance matrix (NaN = not observed), read through ``rows``.
    rows : ndarray of int64, shape (m,)
        The node's row ids, in the order of ``x``.
    rowsum, rowcnt : ndarray, shape (m,)
        From :func:`node_sums`.
    min_leaf : int

    Notes
    -----
    When every pair of the node is observed (``rowcnt == m``), the NaN test
    and the pair counts are skipped: same sums in the same order, same result.
    """
    m = x.shape[0]
    order = np.argsort(x, kind="mergesort")
    sorted_rows = rows[order]  # read in sweep order, no double indirection
    total, ntotal = 0.0, 0.0
    complete = True
    for a in range(m):
        total += rowsum[a]
        ntotal += rowcnt[a]
        complete = complete and rowcnt[a] == m
    left, lcnt = 0.0, 0.0  # pairs within the first k sorted rows
    cross, xcnt = 0.0, 0.0  # pairs with one row in the first k, one after
    best, threshold = np.inf, np.nan
    for k in range(1, m):
        p = order[k - 1]  # row p moves from the right to the left
        rp = sorted_rows[k - 1]
        Drow = D[rp]
        if complete:
            to_left = _row_sum(Drow, sorted_rows, k - 1)
            cnt_left = float(k - 1)
        else:
            to_left, cnt_left = _row_sum_observed(Drow, sorted_rows, k - 1)
        own = Drow[rp]
        own_cnt = 1.0
        if own != own:
            own, own_cnt = 0.0, 0.0
        to_right = rowsum[p] - own - to_left
        cnt_right = rowcnt[p] - own_cnt - cnt_left
        left += 2.0 * to_left + own
        lcnt += 2.0 * cnt_left + own_cnt
        cross += to_right - to_left
        xcnt += cnt_right - cnt_left
        if k < min_leaf or m - k < min_leaf:
            continue
        lo, hi = x[p], x[order[k]]
        if lo == hi:
            continue
        right = total - left - 2.0 * cross
        rcnt = ntotal - lcnt - 2.0 * xcnt
        if lcnt <= 0.0 or rcnt <= 0.0:
            continue
        value = (k / m) * (left / lcnt) + ((m - k) / m) * (right / rcnt)
        if better(value, best):
            best, threshold = value, 0.5 * (lo + hi)
    return best, threshold


@njit(nogil=True, cache=True)
def _row_sum(Drow, cols, k):  # pragma: no cover - numba
    """``sum(Drow[cols[:k]])`` added in order (every entry observed)."""
    s = 0.0
    for t in range(k):
        s += Drow[cols[t]]
    return s


@njit(nogil=True, cache=True)
def _row_sum_observed(Drow, cols, k):  # pragma: no cover - numba
    """Sum and count of the observed (non-NaN) ``Drow[cols[:k]]``, added in order."""
    s, c = 0.0, 0.0
    for t in range(k):
        v = Drow[cols[t]]
        if v == v:
            s += v
            c += 1.0
    return s, c


@njit(nogil=True, cache=True)
def project(X, rows, features, weights):  # pragma: no cover - numba
    """``sum_k X[r, features[k]] * weights[k]`` for every r in ``rows`` (summed in order)."""
    out = np.empty(rows.shape[0])
    for i in range(rows.shape[0]):
        v = 0.0
        for k in range(features.shape[0]):
            v += X[rows[i], features[k]] * weights[k]
        out[i] = v
    return out


@njit(nogil=True, cache=True)
def apply_tree(
    X, left, right, threshold, proj_start, proj_feature, proj_weight
):  # pragma: no cover
    """Leaf (node id local to the tree) of every row of ``X``."""
    n = X.shape[0]
    out = np.empty(n, dtype=np.int32)
    for i in range(n):
        v = 0
        while left[v] >= 0:
            s = 0.0
            for k in range(proj_start[v], proj_start[v + 1]):
                s += X[i, proj_feature[k]] * proj_weight[k]
            v = left[v] if s <= threshold[v] else right[v]
        out[i] = v
    return out


@dataclass
class SmerfTree:
    """A flat tree: node arrays (-1 children for leaves), split projections, leaf members.

    Attributes
    ----------
    left, right : ndarray of int64, shape (n_nodes,)
        Children (-1 for a leaf).
    threshold : ndarray of float64, shape (n_nodes,)
        ``projection <= threshold`` goes left (NaN for a leaf).
    objective : ndarray of float64, shape (n_nodes,)
        The node's mean observed pairwise distance (its SMERF objective before
        it is split; NaN if it has no observed pair).
    n_node_samples : ndarray of int64, shape (n_nodes,)
        In-bag rows reaching the node (with multiplicity).
    proj_start : ndarray of int64, shape (n_nodes + 1,)
        ``proj_feature[proj_start[v]:proj_start[v + 1]]`` (and the weights) are
        node v's projection; empty for a leaf.
    proj_feature : ndarray of int64
    proj_weight : ndarray of float64
    leaf_offset : ndarray of int64, shape (n_nodes + 1,)
        ``leaf_members[leaf_offset[v]:leaf_offset[v + 1]]`` are leaf v's in-bag
        rows (with multiplicity); empty for an internal node.
    leaf_members : ndarray of int64
    importances : ndarray of float64, shape (n_features,)
        Total decrease of the objective per feature, each split weighted by
        its share of the root's rows; an oblique split's decrease is shared
        equally among its features.
    """

    left: np.ndarray
    right: np.ndarray
    threshold: np.ndarray
    objective: np.ndarray
    n_node_samples: np.ndarray
    proj_start: np.ndarray
    proj_feature: np.ndarray
    proj_weight: np.ndarray
    leaf_offset: np.ndarray
    leaf_members: np.ndarray
    importances: np.ndarray

    @property
    def feature(self) -> np.ndarray:
        """First feature of each node's projection (-1 for a leaf): the axis-aligned split's."""
        out = np.full(self.left.shape[0], -1, dtype=np.int64)
        inner = np.flatnonzero(self.left >= 0)
        out[inner] = self.proj_feature[self.proj_start[inner]]
        return out

    def apply(self, X: np.ndarray) -> np.ndarray:
        """Leaf of every row of ``X`` (int32 node ids)."""
        X = np.ascontiguousarray(X, dtype=np.float64)
        return apply_tree(
            X, self.left, self.right, self.threshold,
            self.proj_start, self.proj_feature, self.proj_weight,
        )  # fmt: skip


def n_candidates(max_features: int | float | str | None, d: int) -> int:
    """Candidates per node for scikit-learn's ``max_features`` forms ("auto" = "sqrt")."""
    if max_features is None:
        return d
    if max_features in ("sqrt", "auto"):
        return max(1, int(np.sqrt(d)))
    if max_features == "log2":
        return max(1, int(np.log2(d)))
    if isinstance(max_features, float):
        return max(1, int(max_features * d))
    return min(d, int(max_features))


@functools.cache
def _single_features(k: int) -> tuple[np.ndarray, np.ndarray]:
    """Weights (ones) and starts of ``k`` one-feature candidates, made once (read-only)."""
    weights, starts = np.ones(k), np.arange(k + 1, dtype=np.int64)
    weights.setflags(write=False)
    starts.setflags(write=False)
    return weights, starts


def draw_candidates(
    rng: np.random.Generator, d: int, k: int, oblique: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The node's candidate projections, drawn as the module says.

    Returns
    -------
    features : ndarray of int64
    weights : ndarray of float64
        Candidate ``c`` is ``features[starts[c]:starts[c + 1]]`` with those weights.
    starts : ndarray of int64, shape (k + 1,)
    """
    if not oblique:
        feats = np.arange(d) if k == d else rng.choice(d, k, replace=False)
        return (kernel_input(feats, np.int64), *_single_features(k))
    features, weights = [], []
    for _ in range(k):
        c = min(d, 1 + int(rng.poisson(OBLIQUE_EXTRA)))
        features.append(rng.choice(d, c, replace=False).astype(np.int64))
        weights.append(np.where(rng.random(c) < 0.5, -1.0, 1.0))
    starts = offsets([f.shape[0] for f in features])
    # read-only as _single_features' are: one compiled best_split (module signatures)
    return (
        kernel_input(np.concatenate(features), np.int64),
        kernel_input(np.concatenate(weights), np.float64),
        kernel_input(starts, np.int64),
    )


@njit(nogil=True, cache=True)
def best_split(
    X, D, rows, rowsum, rowcnt, min_leaf, features, weights, starts
):  # pragma: no cover - numba
    """The best cut over a node's candidates, in candidate order (ties keep the first).

    Returns
    -------
    value, threshold : float
        As :func:`sweep_feature` (``inf, nan`` if no candidate can cut).
    candidate : int
        Its index (-1 if none).
    x : ndarray, shape (m,)
        The node's values of that candidate.
    """
    best, threshold, chosen = np.inf, np.nan, -1
    values = np.empty(0)
    for c in range(starts.shape[0] - 1):
        lo, hi = starts[c], starts[c + 1]
        x = project(X, rows, features[lo:hi], weights[lo:hi])
        value, thr = sweep_feature(x, D, rows, rowsum, rowcnt, min_leaf)
        if better(value, best):
            best, threshold, chosen, values = value, thr, c, x
    return best, threshold, chosen, values


def bootstrap_rows(rng: np.random.Generator, n: int, bootstrap: bool) -> np.ndarray:
    """The tree's in-bag rows (sorted, with multiplicity), the first draw of its generator."""
    return np.sort(rng.integers(0, n, n)) if bootstrap else np.arange(n, dtype=np.int64)


def grow_tree(
    X: np.ndarray,
    D: np.ndarray,
    seed: int,
    *,
    max_features: int | float | str | None = "sqrt",
    min_samples_leaf: int = 1,
    max_depth: int | None = None,
    bootstrap: bool = True,
    oblique: bool = False,
) -> SmerfTree:
    """Grow one SMERF tree on rows ``X`` (n, d) with distances ``D`` (n, n; NaN = missing).

    ``D`` is read in place (float32 or float64, C-contiguous); no block of it
    is copied.
    """
    X = kernel_input(X, np.float64)  # read-only views: one signature whoever made them
    if D.dtype not in (np.float32, np.float64) or not D.flags.c_contiguous:
        D = np.ascontiguousarray(D, dtype=np.float64)
    D = kernel_input(D, D.dtype)
    n, d = X.shape
    rng = np.random.default_rng(seed)
    rows0 = bootstrap_rows(rng, n, bootstrap)
    k = n_candidates(max_features, d)
    left: list[int] = []
    right: list[int] = []
    threshold: list[float] = []
    objective: list[float] = []
    size: list[int] = []
    proj: list[tuple[np.ndarray, np.ndarray]] = []
    members: dict[int, np.ndarray] = {}
    importances = np.zeros(d)
    n_root = rows0.shape[0]
    stack = [(rows0, 0, -1, False)]  # (rows, depth, parent, is_right)
    empty = (np.empty(0, np.int64), np.empty(0))
    while stack:
        rows, depth, parent, is_right = stack.pop()
        v = len(left)
        if parent >= 0:
            (right if is_right else left)[parent] = v
        m = rows.shape[0]
        left.append(-1)
        right.append(-1)
        threshold.append(np.nan)
        size.append(m)
        proj.append(empty)
        if m == 1:  # a leaf; its mean is its own (observed) distance, as node_sums gives it
            own = D[rows[0], rows[0]]
            objective.append(0.0 + float(own) if own == own else np.nan)
            members[v] = rows
            continue
        rowsum, rowcnt, lo, hi = node_sums(D, rows)
        count = rowcnt.sum()
        node_mean = rowsum.sum() / count if count > 0 else np.nan
        objective.append(float(node_mean))
        can_split = count > 0 and hi > lo and m >= 2 * min_samples_leaf
        if max_depth is not None and depth >= max_depth:
            can_split = False
        if not can_split:
            members[v] = rows
            continue
        features, weights, starts = draw_candidates(rng, d, k, oblique)
        value, thr, c, values = best_split(X, D, rows, rowsum, rowcnt, min_samples_leaf,
                                           features, weights, starts)  # fmt: skip
        if c < 0:
            members[v] = rows
            continue
        feats = features[starts[c] : starts[c + 1]]
        threshold[v], proj[v] = thr, (feats, weights[starts[c] : starts[c + 1]])
        importances[feats] += (m / n_root) * (node_mean - value) / feats.shape[0]
        go_left = values <= thr
        # depth first, left child first: push right, then left
        stack.append((rows[~go_left], depth + 1, v, True))
        stack.append((rows[go_left], depth + 1, v, False))
    n_nodes = len(left)
    leaf_sizes = [members[v].shape[0] if v in members else 0 for v in range(n_nodes)]
    flat = [members[v] for v in range(n_nodes) if v in members]
    return SmerfTree(
        left=np.asarray(left, dtype=np.int64),
        right=np.asarray(right, dtype=np.int64),
        threshold=np.asarray(threshold, dtype=np.float64),
        objective=np.asarray(objective, dtype=np.float64),
        n_node_samples=np.asarray(size, dtype=np.int64),
        proj_start=offsets([p[0].shape[0] for p in proj]),
        proj_feature=np.concatenate([p[0] for p in proj]).astype(np.int64),
        proj_weight=np.concatenate([p[1] for p in proj]).astype(np.float64),
        leaf_offset=offsets(leaf_sizes),
        leaf_members=np.concatenate(flat).astype(np.int64),
        importances=importances,
    )


def offsets(counts: list[int] | np.ndarray) -> np.ndarray:
    """``[0, c0, c0 + c1, ...]`` (int64): where each of consecutive runs of ``counts`` starts."""
    return np.concatenate([[0], np.cumsum(np.asarray(counts, dtype=np.int64))]).astype(np.int64)


# -- a forest as flat arrays -----------------------------------------------------------

#: Per-node columns of a flat forest (node ids local to their tree).
NODE_COLUMNS = ("left", "right", "threshold", "objective", "n_node_samples", "proj_count",
                "leaf_size")  # fmt: skip


@dataclass
class FlatForest:
    """Trees concatenated: per-node columns, projections and leaf members, with offsets.

    Attributes
    ----------
    nodes : dict of str to ndarray
        :data:`NODE_COLUMNS`, each of shape (total_nodes,).
    node_offset : ndarray of int64, shape (n_trees + 1,)
    proj_feature, proj_weight : ndarray
        Split projections, node after node (leaves have none).
    leaf_members : ndarray of int64
        In-bag rows of every leaf, leaf after leaf, tree after tree.
    importances : ndarray of float64, shape (n_trees, n_features)
    """

    nodes: dict[str, np.ndarray]
    node_offset: np.ndarray
    proj_feature: np.ndarray
    proj_weight: np.ndarray
    leaf_members: np.ndarray
    importances: np.ndarray

    @property
    def proj_start(self) -> np.ndarray:
        """Global offsets of the nodes' projections, shape (total_nodes + 1,)."""
        return offsets(self.nodes["proj_count"])

    @property
    def leaf_start(self) -> np.ndarray:
        """Global offsets of the nodes' leaf members, shape (total_nodes + 1,)."""
        return offsets(self.nodes["leaf_size"])


def flatten(trees: list[SmerfTree]) -> FlatForest:
    """Concatenate trees into a :class:`FlatForest` (node ids stay local to their tree)."""
    nodes = {
        "left": np.concatenate([t.left for t in trees]),
        "right": np.concatenate([t.right for t in trees]),
        "threshold": np.concatenate([t.threshold for t in trees]),
        "objective": np.concatenate([t.objective for t in trees]),
        "n_node_samples": np.concatenate([t.n_node_samples for t in trees]),
        "proj_count": np.concatenate([np.diff(t.proj_start) for t in trees]),
        "leaf_size": np.concatenate([np.diff(t.leaf_offset) for t in trees]),
    }
    return FlatForest(
        nodes=nodes,
        node_offset=offsets([t.left.shape[0] for t in trees]),
        proj_feature=np.concatenate([t.proj_feature for t in trees]),
        proj_weight=np.concatenate([t.proj_weight for t in trees]),
        leaf_members=np.concatenate([t.leaf_members for t in trees]),
        importances=np.stack([t.importances for t in trees]),
    )


def concatenate(parts: list[FlatForest], *, consume: bool = False) -> FlatForest:
    """Join flat forests (batches of trees) in order.

    With ``consume``, each array of the parts is dropped from them (replaced by
    an empty one) as soon as it is joined, so that the joined forest and the
    parts are never both held whole: the peak is the forest plus one column.
    """
    counts = np.concatenate([np.diff(p.node_offset) for p in parts])

    nodes: dict[str, np.ndarray] = {}
    for c in NODE_COLUMNS:
        nodes[c] = np.concatenate([p.nodes[c] for p in parts])
        if consume:
            for p in parts:
                p.nodes[c] = nodes[c][:0]
    arrays: dict[str, np.ndarray] = {}
    for name in ("proj_feature", "proj_weight", "leaf_members", "importances"):
        arrays[name] = np.concatenate([getattr(p, name) for p in parts])
        if consume:
            for p in parts:
                setattr(p, name, arrays[name][:0])
    return FlatForest(nodes=nodes, node_offset=offsets(counts), **arrays)


def grow_batch(X: np.ndarray, D: np.ndarray, seeds: np.ndarray, params: dict) -> FlatForest:
    """Grow one tree per seed (``params``: keyword arguments of :func:`grow_tree`)."""
    return flatten([grow_tree(X, D, int(s), **params) for s in seeds])


@njit(nogil=True, cache=True)
def apply_forest(X, left, right, threshold, proj_start, proj_feature, proj_weight,
                 node_offset):  # pragma: no cover - numba  # fmt: skip
    """Leaf (local node id) of every row of ``X`` in every tree: int32 (n, n_trees)."""
    n = X.shape[0]
    n_trees = node_offset.shape[0] - 1
    out = np.empty((n, n_trees), dtype=np.int32)
    for t in range(n_trees):
        base = node_offset[t]
        for i in range(n):
            v = 0
            while left[base + v] >= 0:
                g = base + v
                s = 0.0
                for k in range(proj_start[g], proj_start[g + 1]):
                    s += X[i, proj_feature[k]] * proj_weight[k]
                v = left[g] if s <= threshold[g] else right[g]
            out[i, t] = v
    return out


def apply(forest: FlatForest, X: np.ndarray) -> np.ndarray:
    """Leaf of every row of ``X`` in every tree of ``forest``."""
    n = forest.nodes
    return apply_forest(
        np.ascontiguousarray(X, dtype=np.float64), n["left"], n["right"], n["threshold"],
        forest.proj_start, forest.proj_feature, forest.proj_weight, forest.node_offset,
    )  # fmt: skip


def inbag_counts(forest: FlatForest, n: int) -> np.ndarray:
    """Bootstrap count of every training row in every tree: uint16 (n, n_trees)."""
    n_trees = forest.node_offset.shape[0] - 1
    out = np.zeros((n, n_trees), dtype=np.uint16)
    member_offset = forest.leaf_start[forest.node_offset]
    for t in range(n_trees):
        rows = forest.leaf_members[member_offset[t] : member_offset[t + 1]]
        out[:, t] = np.bincount(rows, minlength=n)
    return out


@njit(nogil=True, cache=True)
def _distinct(leaves, t, n_nodes):  # pragma: no cover - numba
    """Distinct leaves of column t: slot of each node (-1 if absent), the leaves, their number."""
    slot = np.full(n_nodes, -1, dtype=np.int64)
    uniq = np.empty(leaves.shape[0], dtype=np.int64)
    count = 0
    for i in range(leaves.shape[0]):
        v = leaves[i, t]
        if slot[v] < 0:
            slot[v] = count
            uniq[count] = v
            count += 1
    return slot, uniq, count


@njit(nogil=True, cache=True)
def _leaf_means(D, ua, na, ub, nb, base, leaf_start, leaf_members):  # pragma: no cover - numba
    """Mean observed D over the members of leaf ``ua[p]`` x leaf ``ub[q]``: (na, nb), NaN if none.

    The b leaves' members are first laid out in slot order, then each a
    member's row of D is read once per tree against all of them; each cell's
    terms are added in the same order as a plain loop over the two member lists.
    """
    b_start = np.empty(nb + 1, dtype=np.int64)
    b_start[0] = 0
    for q in range(nb):
        g = base + ub[q]
        b_start[q + 1] = b_start[q] + leaf_start[g + 1] - leaf_start[g]
    b_members = np.empty(b_start[nb], dtype=np.int64)
    for q in range(nb):
        g = base + ub[q]
        size = leaf_start[g + 1] - leaf_start[g]
        b_members[b_start[q] : b_start[q] + size] = leaf_members[leaf_start[g] : leaf_start[g + 1]]
    means = np.empty((na, nb))
    sums = np.empty(nb)
    counts = np.empty(nb)
    values = np.empty(b_start[nb])
    for p in range(na):
        ga = base + ua[p]
        sums[:] = 0.0
        counts[:] = 0.0
        for x in range(leaf_start[ga], leaf_start[ga + 1]):
            row = D[leaf_members[x]]
            for y in range(values.shape[0]):
                values[y] = row[b_members[y]]
            for q in range(nb):
                s, c = sums[q], counts[q]
                for y in range(b_start[q], b_start[q + 1]):
                    v = values[y]
                    if v == v:
                        s += v
                        c += 1.0
                sums[q], counts[q] = s, c
        for q in range(nb):
            means[p, q] = sums[q] / counts[q] if counts[q] > 0 else np.nan
    return means


@njit(nogil=True, cache=True)
def tile_distance(D, leaves_a, leaves_b, node_offset, leaf_start, leaf_members,
                  oob, inbag_a, inbag_b, fallback):  # pragma: no cover - numba  # fmt: skip
    """Forest-predicted distances of a tile: rows with leaves ``leaves_a`` x ``leaves_b``.

    Per tree, the mean of the observed D over the in-bag members of the two
    leaves, computed once per distinct leaf pair of the tile (memory
    O(tile^2 + nodes of one tree)); the forest averages the trees where the
    mean exists.  With ``oob``, tree t counts for (i, j) only when both have
    ``inbag == 0`` in t.  Cells on which no tree counts get ``fallback``.
    """
    n_a, n_trees = leaves_a.shape
    n_b = leaves_b.shape[0]
    acc = np.zeros((n_a, n_b))
    cnt = np.zeros((n_a, n_b))
    col_slot = np.empty(n_b, dtype=np.int64)
    for t in range(n_trees):
        base = node_offset[t]
        n_nodes = node_offset[t + 1] - base
        slot_a, ua, na = _distinct(leaves_a, t, n_nodes)
        slot_b, ub, nb = _distinct(leaves_b, t, n_nodes)
        means = _leaf_means(D, ua, na, ub, nb, base, leaf_start, leaf_members)
        for j in range(n_b):
            col_slot[j] = slot_b[leaves_b[j, t]]
            if oob and inbag_b[j, t] != 0:
                col_slot[j] = -1
        for i in range(n_a):
            if oob and inbag_a[i, t] != 0:
                continue
            mrow = means[slot_a[leaves_a[i, t]]]
            acc_i, cnt_i = acc[i], cnt[i]
            for j in range(n_b):
                q = col_slot[j]
                if q < 0:
                    continue
                val = mrow[q]
                if val == val:
                    acc_i[j] += val
                    cnt_i[j] += 1.0
    out = np.empty((n_a, n_b))
    for i in range(n_a):
        for j in range(n_b):
            out[i, j] = acc[i, j] / cnt[i, j] if cnt[i, j] > 0 else fallback
    return out


def warm_up(dtype: Any = np.float64) -> None:
    """Compile (or load from cache) every kernel once, before fanning out tasks.

    Only for distances ``D`` of ``dtype`` (float32 or float64, as read in
    place): the other dtype's kernels are not compiled for nothing.  In-bag
    counts reach :func:`tile_distance` as uint16 (:func:`tile_counts`).
    """
    X = np.array([[0.0, 1.0], [1.0, 0.0], [0.5, 0.5]])
    D = np.array([[0.0, 1.0, np.nan], [1.0, 0.0, 2.0], [np.nan, 2.0, 0.0]], dtype=dtype)
    f = grow_batch(X, D, np.array([1], dtype=np.uint64), {"max_features": None, "oblique": True})
    leaves = apply(f, X)
    counts = tile_counts(inbag_counts(f, 3))
    tile_distance(D, leaves, leaves, f.node_offset, f.leaf_start, f.leaf_members, True,
                  counts, counts, 0.0)  # fmt: skip


def tile_counts(inbag: np.ndarray) -> np.ndarray:
    """In-bag counts as :func:`tile_distance` reads them: uint16 (a saved fit's are uint8)."""
    return kernel_input(inbag, np.uint16)
