"""Numba kernels of one SimForest level: class counts, pair draws, requests, splits, partition.

A SimForest tree (:mod:`distforest.kernels.simtrees`) is grown level by level.
The members of the nodes of one level are stored in one flat array
``order`` (object ids), grouped by node (``offsets[k]:offsets[k + 1]`` is
node ``k``), each with its in-bag weight ``w`` (the bootstrap count, 1
without bootstrap).  Inside a node the members are in ascending object id
order; the partition below is stable, so this holds at every level.
Out-of-bag objects travel along as *passengers* (``porder``/``poffsets``):
they are routed like a prediction but never influence a split.

Specification (the oracle in ``tests/simforest_oracle.py`` follows it):

Randomness
    Node ``k`` has a 64-bit key (:func:`distforest.kernels.rptrees.root_key`
    of the tree seed for the root, ``child_key(parent, 0 or 1)`` for the left
    or right child).  Attempt ``a`` (``0 <= a < max_draws``) of pair ``p``
    uses the uniforms ``u = uniform(key, c)`` and ``v = uniform(key, c + 1)``
    with ``c = 2 (p max_draws + a)``.  ``O_i`` is the member at weighted
    position ``floor(u W)`` (``W`` the node's total weight, members walked in
    ascending id order, each occupying ``w`` positions); ``O_j`` is the member
    at weighted position ``floor(v W')`` among the members of another class
    than ``O_i`` (``W'`` their total weight).  A pair is accepted when
    ``S(O_i, O_j)`` is observed (not NaN); otherwise the next attempt is
    used; after ``max_draws`` failures pair ``p`` is dropped.
Projection
    ``S(k, O_j) - S(k, O_i)`` (similarities) or ``D(k, O_i)**2 - D(k, O_j)**2``
    (distances, computed as ``d_i * d_i - d_j * d_j``); NaN when either is
    missing.
Score
    For a threshold ``t``: L = observed members with projection ``<= t``,
    R = the other observed members, M = members whose projection is NaN.
    ``score = (term(L) + term(R)) + term(M)`` with
    ``term(C) = w_C - (sum_c n_c**2) / w_C`` (0 for an empty C), ``n_c`` the
    class weights of C and ``w_C`` their sum: ``term`` is ``w_C`` times the
    Gini impurity of C, so the score is (up to the node's constant total
    weight) the weighted Gini of the children, missing members counted as a
    third child that keeps its impurity.  Thresholds are the midpoints
    ``(a + b) / 2`` of consecutive distinct sorted projections (``a`` itself if
    rounding made the midpoint equal ``b``); both ``w_L`` and ``w_R`` must be
    ``>= min_samples_leaf``.  The lowest score wins; ties go to the lower
    threshold, then to the lower pair index.
Routing
    observed: ``<= threshold`` left, else right; missing: stays at the node
    (``missing_go = -1``), or goes to the child with the larger observed
    weight ``w_L >= w_R`` -> left (``missing="larger"``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from distforest.kernels.rptrees import child_key, root_key, uniform

#: ``go`` codes of a member after a split.
GO_LEFT = 0
GO_RIGHT = 1
GO_STAY = 2


@njit(nogil=True, cache=True)
def class_weights(order, w, offsets, y, n_classes):  # pragma: no cover - numba
    """Weighted class counts of every node of a level, shape (n_nodes, n_classes)."""
    n_nodes = offsets.shape[0] - 1
    out = np.zeros((n_nodes, n_classes), dtype=np.float64)
    for k in range(n_nodes):
        for q in range(offsets[k], offsets[k + 1]):
            out[k, y[order[q]]] += w[q]
    return out


@njit(nogil=True, cache=True)
def _weighted_pick(order, w, y, s, e, target, skip_class):  # pragma: no cover - numba
    """The member at weighted position ``target``, skipping class ``skip_class``."""
    acc = 0.0
    last = -1
    for q in range(s, e):
        if y[order[q]] == skip_class:
            continue
        acc += w[q]
        last = order[q]
        if target < acc:
            return order[q]
    return last


@njit(nogil=True, cache=True)
def draw_pairs(keys, order, w, offsets, y, cw, pending, attempt, max_draws):  # pragma: no cover
    """Candidate pairs of one draw attempt for the ``pending`` (node, pair) slots.

    Returns ``(cand_i, cand_j)`` of shape (n_nodes, n_pairs), -1 where not pending.
    """
    n_nodes, n_pairs = pending.shape
    ci = np.full((n_nodes, n_pairs), -1, dtype=np.int64)
    cj = np.full((n_nodes, n_pairs), -1, dtype=np.int64)
    for k in range(n_nodes):
        s, e = offsets[k], offsets[k + 1]
        total = 0.0
        for c in range(cw.shape[1]):
            total += cw[k, c]
        for p in range(n_pairs):
            if not pending[k, p]:
                continue
            counter = 2 * (p * max_draws + attempt)
            t = np.floor(uniform(keys[k], counter) * total)
            if t >= total:
                t = total - 1.0
            oi = _weighted_pick(order, w, y, s, e, t, np.int64(-1))  # no literal: one signature
            other = total - cw[k, y[oi]]
            t2 = np.floor(uniform(keys[k], counter + 1) * other)
            if t2 >= other:
                t2 = other - 1.0
            ci[k, p] = oi
            cj[k, p] = _weighted_pick(order, w, y, s, e, t2, y[oi])
    return ci, cj


@njit(nogil=True, cache=True)
def level_requests(order, offsets, porder, poffsets, pair_i, pair_j, valid):  # pragma: no cover
    """The similarity requests of a level, grouped by pair object.

    For node ``k`` and valid pair ``p`` two groups are requested, rows
    ``pair_i[k, p]`` then ``pair_j[k, p]``, each with columns the node's
    members followed by its passengers.

    Returns
    -------
    rows : int64 (n_groups,)
    row_offsets : int64 (n_groups + 1,)
    cols : int64 (row_offsets[-1],)
    base : int64 (n_nodes, n_pairs)
        Offset of pair ``p``'s first group in ``cols`` (-1 if not valid).
    """
    n_nodes, n_pairs = valid.shape
    n_groups = 0
    n_cols = 0
    for k in range(n_nodes):
        size = offsets[k + 1] - offsets[k] + poffsets[k + 1] - poffsets[k]
        for p in range(n_pairs):
            if valid[k, p]:
                n_groups += 2
                n_cols += 2 * size
    rows = np.empty(n_groups, dtype=np.int64)
    row_offsets = np.zeros(n_groups + 1, dtype=np.int64)
    cols = np.empty(n_cols, dtype=np.int64)
    base = np.full((n_nodes, n_pairs), -1, dtype=np.int64)
    g = 0
    q = 0
    for k in range(n_nodes):
        for p in range(n_pairs):
            if not valid[k, p]:
                continue
            base[k, p] = q
            for side in range(2):
                rows[g] = pair_i[k, p] if side == 0 else pair_j[k, p]
                for t in range(offsets[k], offsets[k + 1]):
                    cols[q] = order[t]
                    q += 1
                for t in range(poffsets[k], poffsets[k + 1]):
                    cols[q] = porder[t]
                    q += 1
                g += 1
                row_offsets[g] = q
    return rows, row_offsets, cols, base


@njit(nogil=True, cache=True)
def projection(si, sj, distance):  # pragma: no cover - numba
    """The split value of an object with ``si = S(k, O_i)`` and ``sj = S(k, O_j)``."""
    if distance:
        return si * si - sj * sj
    return sj - si


@njit(nogil=True, cache=True)
def _term(cnt, weight):  # pragma: no cover - numba
    """``weight`` times the Gini impurity of class weights ``cnt``."""
    if weight <= 0.0:
        return 0.0
    sq = 0.0
    for c in range(cnt.shape[0]):
        sq += cnt[c] * cnt[c]
    return weight - sq / weight


@njit(nogil=True, cache=True)
def split_level(
    order, w, offsets, porder, poffsets, y, n_classes, vals, base, distance, min_leaf, larger
):  # pragma: no cover - numba
    """Best split of every node of a level and where each member goes.

    Returns
    -------
    best_pair : int64 (n_nodes,), -1 when no admissible split exists
    threshold : float64 (n_nodes,)
    missing_go : int8 (n_nodes,), -1 stay, 0 left, 1 right
    go : int8 (len(order),) and pgo : int8 (len(porder),), ``GO_*`` codes
    """
    n_nodes, n_pairs = base.shape
    best_pair = np.full(n_nodes, -1, dtype=np.int64)
    threshold = np.zeros(n_nodes, dtype=np.float64)
    missing_go = np.full(n_nodes, -1, dtype=np.int8)
    go = np.full(order.shape[0], GO_STAY, dtype=np.int8)
    pgo = np.full(porder.shape[0], GO_STAY, dtype=np.int8)
    c_tot = np.zeros(n_classes)
    c_left = np.zeros(n_classes)
    c_right = np.zeros(n_classes)
    c_miss = np.zeros(n_classes)
    for k in range(n_nodes):
        s, e = offsets[k], offsets[k + 1]
        m = e - s
        size = m + poffsets[k + 1] - poffsets[k]
        proj = np.empty(m)
        best = np.inf
        best_wl = 0.0
        best_wr = 0.0
        for p in range(n_pairs):
            b = base[k, p]
            if b < 0:
                continue
            c_tot[:] = 0.0
            c_miss[:] = 0.0
            w_tot = 0.0
            w_miss = 0.0
            n_obs = 0
            for t in range(m):
                v = projection(vals[b + t], vals[b + size + t], distance)
                proj[t] = v
                if np.isnan(v):
                    c_miss[y[order[s + t]]] += w[s + t]
                    w_miss += w[s + t]
                else:
                    c_tot[y[order[s + t]]] += w[s + t]
                    w_tot += w[s + t]
                    n_obs += 1
            if n_obs < 2:
                continue
            obs = np.empty(n_obs, dtype=np.int64)
            n_obs = 0
            for t in range(m):
                if not np.isnan(proj[t]):
                    obs[n_obs] = t
                    n_obs += 1
            srt = obs[np.argsort(proj[obs], kind="mergesort")]
            t_miss = _term(c_miss, w_miss)
            c_left[:] = 0.0
            w_left = 0.0
            for q in range(n_obs - 1):
                t = srt[q]
                c_left[y[order[s + t]]] += w[s + t]
                w_left += w[s + t]
                lo = proj[t]
                hi = proj[srt[q + 1]]
                if not lo < hi:
                    continue
                w_right = w_tot - w_left
                if w_left < min_leaf or w_right < min_leaf:
                    continue
                for c in range(n_classes):
                    c_right[c] = c_tot[c] - c_left[c]
                score = _term(c_left, w_left) + _term(c_right, w_right)
                if w_miss > 0.0:
                    score = score + t_miss
                if score < best:
                    best = score
                    best_pair[k] = p
                    thr = (lo + hi) / 2.0
                    threshold[k] = lo if thr >= hi else thr
                    best_wl = w_left
                    best_wr = w_right
        p = best_pair[k]
        if p < 0:
            continue
        if larger:
            missing_go[k] = GO_LEFT if best_wl >= best_wr else GO_RIGHT
        b = base[k, p]
        thr = threshold[k]
        for t in range(size):
            v = projection(vals[b + t], vals[b + size + t], distance)
            if np.isnan(v):
                code = GO_STAY if missing_go[k] < 0 else missing_go[k]
            elif v <= thr:
                code = GO_LEFT
            else:
                code = GO_RIGHT
            if t < m:
                go[s + t] = code
            else:
                pgo[poffsets[k] + t - m] = code
    return best_pair, threshold, missing_go, go, pgo


@njit(nogil=True, cache=True)
def partition(order, w, offsets, go, split):  # pragma: no cover - numba
    """Members of the children of the ``split`` nodes, left child then right, stable.

    ``w`` may be an empty array (passengers carry no weight).  Returns the new
    ``order``, ``w`` and ``offsets`` (two children per split node, in node order).
    """
    n_nodes = offsets.shape[0] - 1
    n_split = 0
    total = 0
    for k in range(n_nodes):
        if split[k]:
            n_split += 1
            for q in range(offsets[k], offsets[k + 1]):
                if go[q] != GO_STAY:
                    total += 1
    has_w = w.shape[0] > 0
    new_order = np.empty(total, dtype=np.int64)
    new_w = np.empty(total if has_w else 0, dtype=np.float64)
    new_offsets = np.zeros(2 * n_split + 1, dtype=np.int64)
    q2 = 0
    c = 0
    for k in range(n_nodes):
        if not split[k]:
            continue
        for side in range(2):
            for q in range(offsets[k], offsets[k + 1]):
                if go[q] == side:
                    new_order[q2] = order[q]
                    if has_w:
                        new_w[q2] = w[q]
                    q2 += 1
            c += 1
            new_offsets[c] = q2
    return new_order, new_w, new_offsets


@njit(nogil=True, cache=True)
def tree_root_key(seed):  # pragma: no cover - numba
    """Key of the root node of the tree with ``seed``."""
    return root_key(seed)


@njit(nogil=True, cache=True)
def children_keys(keys):  # pragma: no cover - numba
    """Keys of the left and right children of each node, interleaved (2 n,)."""
    out = np.empty(2 * keys.shape[0], dtype=np.uint64)
    for k in range(keys.shape[0]):
        out[2 * k] = child_key(keys[k], np.int64(0))
        out[2 * k + 1] = child_key(keys[k], np.int64(1))
    return out
