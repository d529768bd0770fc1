"""Refinement of a tree's crowded leaves: split them further on every row they hold.

A tree grown on a fixed sample of ``m`` rows has about as many leaves at any
n; routed, each of its leaves holds about ``n / m`` times the rows it was
grown on, and every exact sum over co-leaf pairs grows as ``n^2``.  Here each
leaf that holds more than ``bound`` routed rows is grown further on those
rows, with the forest's splitting rule (best split among ``mtry`` random
features by weighted Gini or squared error, or extremely randomized
thresholds), until no node holds more than ``bound`` rows (or a node is
pure, or no feature splits it).  The refinement's nodes are grafted below
the leaf: the leaf's slot becomes the refinement's root and its other nodes
are appended after the tree's, so the refined tree is one ordinary tree
(routing a new row through it gives the refined leaf).

Row weights are in-bag counts.  A row of a crowded leaf adds to its count in
the sample a Poisson(1) count (online bagging, Oza & Russell) drawn from a
counter-based generator keyed by the tree's seed and the row's index: the
same counts whatever the chunking, the workers or the input's home, and a
row of count 0 is out of bag (no split of the tree used it).  Everything
random in a leaf's refinement (the features tried, extra-trees' thresholds)
comes from a SplitMix64 stream keyed by the tree's seed and the leaf's id: no
global generator, the same draws in any thread.

This module is pure: numpy arrays and seeds in, numpy arrays out.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from distforest.kernels.signatures import kernel_input

#: Golden-ratio increment and mixing constants of SplitMix64 (Steele, Lea & Flood 2014).
_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
#: Keys of the two streams drawn from a tree's seed: rows' Poisson counts, leaves' seeds.
ROW_STREAM, LEAF_STREAM = np.uint64(1), np.uint64(2)


@njit(nogil=True, cache=True, inline="always")
def _mix(x):  # pragma: no cover - numba
    """SplitMix64's finaliser: a bijection of uint64 with full avalanche."""
    x = (x ^ (x >> np.uint64(30))) * _MIX1
    x = (x ^ (x >> np.uint64(27))) * _MIX2
    return x ^ (x >> np.uint64(31))


@njit(nogil=True, cache=True, inline="always")
def keyed(seed, stream, index):  # pragma: no cover - numba
    """A uint64 determined by ``(seed, stream, index)`` alone (counter-based)."""
    key = _mix(np.uint64(seed) + stream * _GAMMA)
    return _mix(key + (np.uint64(index) + np.uint64(1)) * _GAMMA)


@njit(nogil=True, cache=True, inline="always")
def _poisson1(bits):  # pragma: no cover - numba
    """A Poisson(1) count by inversion of the uniform of ``bits``' top 53 bits."""
    u = float(bits >> np.uint64(11)) * (1.0 / 9007199254740992.0)
    k = 0
    p = math.exp(-1.0)
    cdf = p
    while u >= cdf and k < 254:
        k += 1
        p /= k
        cdf += p
    return k


@njit(nogil=True, cache=True, inline="always")
def _next(rng):  # pragma: no cover - numba
    """The next 64 random bits of a leaf's SplitMix64 stream (its state in ``rng[0]``)."""
    rng[0] += _GAMMA
    return _mix(rng[0])


@njit(nogil=True, cache=True, inline="always")
def _below(rng, m):  # pragma: no cover - numba
    """A random integer in ``[0, m)``."""
    return int(_next(rng) % np.uint64(m))


@njit(nogil=True, cache=True, inline="always")
def _uniform(rng):  # pragma: no cover - numba
    """A random float in ``[0, 1)``."""
    return float(_next(rng) >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@njit(nogil=True, cache=True)
def poisson_counts(seed, rows):  # pragma: no cover - numba
    """Poisson(1) in-bag counts of ``rows`` (row indices) for the tree of ``seed``."""
    out = np.empty(rows.shape[0], dtype=np.uint8)
    for i in range(rows.shape[0]):
        out[i] = _poisson1(keyed(seed, ROW_STREAM, rows[i]))
    return out


@njit(nogil=True, cache=True)
def _node_stats(rows, start, end, y, w, n_classes, stats):  # pragma: no cover - numba
    """Weighted class sums (or sum and sum of squares) of a node; returns its weight."""
    stats[:] = 0.0
    total = 0.0
    for i in range(start, end):
        r = rows[i]
        wr = w[r]
        if wr == 0.0:
            continue
        total += wr
        if n_classes > 0:
            stats[int(y[r])] += wr
        else:
            stats[0] += wr * y[r]
            stats[1] += wr * y[r] * y[r]
    return total


@njit(nogil=True, cache=True)
def _is_pure(stats, total, n_classes):  # pragma: no cover - numba
    if total <= 0.0:
        return True
    if n_classes > 0:
        for c in range(n_classes):
            if stats[c] > 0.0 and stats[c] < total:
                return False
        return True
    mean = stats[0] / total
    return stats[1] / total - mean * mean <= 1e-12 * max(1.0, mean * mean)


@njit(nogil=True, cache=True)
def _add(sums, n_classes, yr, wr, sign):  # pragma: no cover - numba
    """Add (sign 1) or take (sign -1) a row's weight to class sums, or weighted target sum."""
    if n_classes > 0:
        sums[int(yr)] += sign * wr
    else:
        sums[0] += sign * wr * yr


@njit(nogil=True, cache=True)
def _proxy(left, right, wl, wr, n_classes):  # pragma: no cover - numba
    """scikit-learn's proxy improvement: sum of squares of the children's sums over weights."""
    if n_classes == 0:
        return left[0] * left[0] / wl + right[0] * right[0] / wr
    lsq, rsq = 0.0, 0.0
    for c in range(n_classes):
        lsq += left[c] * left[c]
        rsq += right[c] * right[c]
    return lsq / wl + rsq / wr


#: Runs of a node's values that :func:`_stable_sort` sorts by insertion before merging.
_RUN = 16


@njit(nogil=True, cache=True)
def _stable_sort(keys, ids, n, spare_keys, spare_ids):  # pragma: no cover - numba
    """Sort ``keys[:n]`` ascending in place, ``ids`` alongside; equal keys keep their order.

    The order of ``np.argsort(keys[:n], kind="mergesort")`` (keys hold no NaN),
    without its allocations: insertion sort of runs of :data:`_RUN`, then
    bottom-up merges through the ``spare`` buffers.
    """
    for lo in range(0, n, _RUN):
        hi = min(lo + _RUN, n)
        for i in range(lo + 1, hi):
            key, ident = keys[i], ids[i]
            j = i - 1
            while j >= lo and keys[j] > key:
                keys[j + 1], ids[j + 1] = keys[j], ids[j]
                j -= 1
            keys[j + 1], ids[j + 1] = key, ident
    src_k, src_i, dst_k, dst_i = keys, ids, spare_keys, spare_ids
    width, moved = _RUN, False
    while width < n:
        for lo in range(0, n, 2 * width):
            mid, hi = min(lo + width, n), min(lo + 2 * width, n)
            i, j, o = lo, mid, lo
            while i < mid and j < hi:
                if src_k[j] < src_k[i]:  # the left run first on ties: stable
                    dst_k[o], dst_i[o] = src_k[j], src_i[j]
                    j += 1
                else:
                    dst_k[o], dst_i[o] = src_k[i], src_i[i]
                    i += 1
                o += 1
            while i < mid:
                dst_k[o], dst_i[o] = src_k[i], src_i[i]
                i += 1
                o += 1
            while j < hi:
                dst_k[o], dst_i[o] = src_k[j], src_i[j]
                j += 1
                o += 1
        src_k, src_i, dst_k, dst_i = dst_k, dst_i, src_k, src_i
        width *= 2
        moved = not moved
    if moved:
        keys[:n] = src_k[:n]
        ids[:n] = src_i[:n]


@njit(nogil=True, cache=True)
def _best_split(
    X, rows, start, end, y, w, n_classes, mtry, extra, min_leaf, buffers, features, sums, rng
):  # pragma: no cover - numba
    """The best (feature, threshold) of a node by the forest's rule; feature -1 if none.

    Features are visited in a random order until ``mtry`` non-constant ones were
    tried (scikit-learn's rule).  Thresholds lie between values seen; rows with
    a missing value go right.  A split must leave ``min_leaf`` rows and some
    in-bag weight on each side.  ``buffers`` (values, rows, and their spares
    for the sort), ``features`` and ``sums`` (the node's, left, right) are
    scratch space.
    """
    xs, order, spare_xs, spare_order = buffers
    node_sums, left, right = sums[0], sums[1], sums[2]
    d = X.shape[1]
    for j in range(d):
        features[j] = j
    best_f, best_t, best_proxy = -1, 0.0, -np.inf
    tried = 0
    n_node = end - start
    wtot = 0.0
    for i in range(start, end):
        wtot += w[rows[i]]
    node_sums[:] = 0.0  # every feature starts from all the node's rows on the right
    for i in range(start, end):
        _add(node_sums, n_classes, y[rows[i]], w[rows[i]], 1.0)
    for j in range(d):
        if tried >= mtry:
            break
        pick = j + _below(rng, d - j)
        features[j], features[pick] = features[pick], features[j]
        f = features[j]
        nn = np.int64(0)  # not a literal: one compiled _stable_sort
        lo, hi = np.inf, -np.inf
        for i in range(start, end):
            v = X[rows[i], f]
            if not np.isnan(v):
                xs[nn] = v
                order[nn] = rows[i]
                nn += 1
                lo = min(lo, v)
                hi = max(hi, v)
        if nn == 0 or not hi > lo:
            continue  # constant in this node: not counted
        tried += 1
        left[:] = 0.0
        right[:] = node_sums
        if extra:  # one random threshold, uniform between the node's extremes
            thr = float(lo) + _uniform(rng) * (float(hi) - float(lo))
            if thr >= float(hi):
                thr = float(lo)
            n_l, wl = 0, 0.0
            for i in range(nn):
                if xs[i] <= thr:
                    r = order[i]
                    n_l += 1
                    wl += w[r]
                    _add(left, n_classes, y[r], w[r], 1.0)
                    _add(right, n_classes, y[r], w[r], -1.0)
            wr = wtot - wl
            if n_l >= min_leaf and n_node - n_l >= min_leaf and wl > 0.0 and wr > 0.0:
                proxy = _proxy(left, right, wl, wr, n_classes)
                if proxy > best_proxy:
                    best_proxy, best_f, best_t = proxy, f, thr
            continue
        _stable_sort(xs, order, nn, spare_xs, spare_order)
        wl = 0.0
        for p in range(nn - 1):
            r = order[p]
            wl += w[r]
            _add(left, n_classes, y[r], w[r], 1.0)
            _add(right, n_classes, y[r], w[r], -1.0)
            a, b = xs[p], xs[p + 1]
            if not b > a:
                continue
            wr = wtot - wl
            if p + 1 < min_leaf or n_node - p - 1 < min_leaf or wl <= 0.0 or wr <= 0.0:
                continue
            proxy = _proxy(left, right, wl, wr, n_classes)
            if proxy > best_proxy:
                thr = float(a) / 2.0 + float(b) / 2.0
                if thr == float(b) or np.isinf(thr):
                    thr = float(a)
                best_proxy, best_f, best_t = proxy, f, thr
    return best_f, best_t


@njit(nogil=True, cache=True)
def _median_split(X, rows, start, end, buffers, features, rng):  # pragma: no cover - numba
    """A crowded node the criterion cannot split (pure, or no valid split): at the
    median of the first feature, in a random order, that is not constant there."""
    values, ids, spare_values, spare_ids = buffers
    d = X.shape[1]
    for j in range(d):
        features[j] = j
    for j in range(d):
        pick = j + _below(rng, d - j)
        features[j], features[pick] = features[pick], features[j]
        f = features[j]
        nn = np.int64(0)  # not a literal: one compiled _stable_sort
        for i in range(start, end):
            v = X[rows[i], f]
            if not np.isnan(v):
                values[nn] = v
                ids[nn] = i
                nn += 1
        if nn < 2:
            continue
        _stable_sort(values, ids, nn, spare_values, spare_ids)
        if not values[nn - 1] > values[0]:
            continue
        m = nn // 2
        while m < nn and not values[m] > values[m - 1]:
            m += 1
        if m == nn:  # the upper half is one value: split below it instead
            m = nn // 2
            while not values[m] > values[m - 1]:
                m -= 1
        a, b = float(values[m - 1]), float(values[m])
        thr = a / 2.0 + b / 2.0
        if thr == b or np.isinf(thr):
            thr = a
        return f, thr
    return -1, 0.0


@njit(nogil=True, cache=True)
def _node_room(cap, width):  # pragma: no cover - numba
    """Arrays for ``cap`` appended nodes: children -1, feature and threshold -2, zeros."""
    return (np.full(cap, -1, dtype=np.int32), np.full(cap, -1, dtype=np.int32),
            np.full(cap, -2, dtype=np.int32), np.full(cap, -2.0, dtype=np.float64),
            np.zeros(cap, dtype=np.int32), np.zeros(cap, dtype=np.float32),
            np.zeros((cap, width), dtype=np.float32))  # fmt: skip


@njit(nogil=True, cache=True)
def _more_room(cap, c_left, c_right, feat, thresh, n_samples, weighted,
               value):  # pragma: no cover - numba  # fmt: skip
    """The appended-node arrays grown to ``cap`` nodes, the nodes so far kept."""
    m = c_left.shape[0]
    out = _node_room(cap, value.shape[1])
    out[0][:m] = c_left
    out[1][:m] = c_right
    out[2][:m] = feat
    out[3][:m] = thresh
    out[4][:m] = n_samples
    out[5][:m] = weighted
    out[6][:m] = value
    return out


@njit(nogil=True, cache=True)
def refine_tree(
    X, y, leaves, counts, seed, n_top, bound, min_split, mtry, n_classes, extra, min_leaf, bootstrap
):  # pragma: no cover - numba
    """Refine the crowded leaves of one tree (see the module's docstring).

    Parameters
    ----------
    X : float32 (n, d)
    y : float64 (n,)
        Class codes (``n_classes > 0``) or the regression target.
    leaves : int32 (n,)
        Every row's leaf in the tree (node ids below ``n_top``).
    counts : uint8 (n,)
        The rows' in-bag counts in the tree's sample.
    seed : uint64
    n_top : int
        Nodes of the tree.
    bound : int
        Leaves with more rows than this are refined.
    min_split : int
        Rows a refinement node needs to be split (more than ``bound``).
    mtry, n_classes, extra, min_leaf, bootstrap
        The splitting rule.

    Returns
    -------
    leaves, counts : the refined ones
    patch : int64 (P, 3): top leaf slot, its left and right child (tree-local ids)
    patch_split : float64 (P, 2): the slot's feature and threshold
    nodes : (left, right, feature, threshold, n_node_samples, weighted, value)
        The appended nodes, ids from ``n_top``.
    """
    n = X.shape[0]
    pop = np.zeros(n_top + 1, dtype=np.int64)
    for i in range(n):
        pop[leaves[i] + 1] += 1
    crowded_rows = 0
    largest = 0
    for leaf in range(n_top):
        size = pop[leaf + 1]
        if size > bound:
            crowded_rows += size
            largest = max(largest, size)
    start_of = np.cumsum(pop)
    order = np.empty(n, dtype=np.int64)
    cursor = start_of[:-1].copy()
    for i in range(n):
        order[cursor[leaves[i]]] = i
        cursor[leaves[i]] += 1
    new_leaves = leaves.copy()
    new_counts = counts.copy()
    w = np.zeros(n, dtype=np.float64)
    for i in range(n):
        leaf = leaves[i]
        if pop[leaf + 1] > bound and bootstrap:
            total = int(counts[i]) + _poisson1(keyed(seed, ROW_STREAM, i))
            new_counts[i] = min(total, 255)
        w[i] = new_counts[i]
    # the appended nodes: at most 2 a crowded row, about 0.4 at bound 8; room for a
    # quarter of the most first, grown by half as needed
    most = 2 * crowded_rows + 1
    width = max(n_classes, 1)
    c_left, c_right, feat, thresh, n_samples, weighted, value = _node_room(
        min(most, crowded_rows // 4 + 64), width
    )
    patch = np.empty((n_top, 3), dtype=np.int64)
    patch_split = np.empty((n_top, 2), dtype=np.float64)
    n_patch = 0
    next_id = n_top
    size = max(largest, 1)
    # a crowded leaf's rows, copied together before it is split: every pass over a
    # node then reads a few contiguous rows, not rows scattered over all n
    X_leaf = np.empty((size, X.shape[1]), dtype=X.dtype)
    y_leaf = np.empty(size, dtype=np.float64)
    w_leaf = np.empty(size, dtype=np.float64)
    at = np.empty(size, dtype=np.int64)  # the leaf's rows (positions in X_leaf), partitioned
    buffers = (np.empty(size, dtype=np.float32), np.empty(size, dtype=np.int64),
               np.empty(size, dtype=np.float32), np.empty(size, dtype=np.int64))  # fmt: skip
    features = np.empty(X.shape[1], dtype=np.int64)
    stats = np.zeros(max(n_classes, 2), dtype=np.float64)
    sums = np.zeros((3, max(n_classes, 2)), dtype=np.float64)
    stack = np.empty((2 * largest + 2, 3), dtype=np.int64)
    rng = np.zeros(1, dtype=np.uint64)
    for leaf in range(n_top):
        s0, s1 = start_of[leaf], start_of[leaf + 1]
        if s1 - s0 <= bound:
            continue
        for i in range(s1 - s0):
            r = order[s0 + i]
            X_leaf[i] = X[r]
            y_leaf[i] = y[r]
            w_leaf[i] = w[r]
            at[i] = i
        rng[0] = keyed(seed, LEAF_STREAM, leaf)
        stack[0, 0], stack[0, 1], stack[0, 2] = 0, s1 - s0, leaf
        top = 1
        while top > 0:
            top -= 1
            start, end, node = stack[top, 0], stack[top, 1], stack[top, 2]
            total = _node_stats(at, start, end, y_leaf, w_leaf, n_classes, stats)
            split = -1
            thr = 0.0
            if end - start >= min_split and not _is_pure(stats, total, n_classes):
                split, thr = _best_split(X_leaf, at, start, end, y_leaf, w_leaf, n_classes,
                                         mtry, extra, min_leaf, buffers, features, sums,
                                         rng)  # fmt: skip
            if split < 0 and end - start > bound:  # pure or no gain, still crowded
                split, thr = _median_split(X_leaf, at, start, end, buffers, features, rng)
            if node >= n_top:  # an appended node: its statistics (a node of no in-bag
                k = node - n_top  # weight keeps its parent's value, set below)
                n_samples[k] = end - start
                weighted[k] = total
                if total > 0:
                    if n_classes > 0:
                        for c in range(n_classes):
                            value[k, c] = stats[c] / total
                    else:
                        value[k, 0] = stats[0] / total
            if split < 0:
                if node >= n_top:
                    for i in range(start, end):
                        new_leaves[order[s0 + at[i]]] = node
                continue
            mid = start
            for i in range(start, end):  # partition: the left rows first
                v = X_leaf[at[i], split]
                if not np.isnan(v) and v <= thr:
                    at[mid], at[i] = at[i], at[mid]
                    mid += 1
            lo_id, hi_id = next_id, next_id + 1
            next_id += 2
            if next_id - n_top > c_left.shape[0]:
                room = min(most, c_left.shape[0] + c_left.shape[0] // 2 + 2)
                c_left, c_right, feat, thresh, n_samples, weighted, value = _more_room(
                    room, c_left, c_right, feat, thresh, n_samples, weighted, value
                )
            if node >= n_top:
                k = node - n_top
                c_left[k], c_right[k], feat[k], thresh[k] = lo_id, hi_id, split, thr
            else:
                patch[n_patch, 0], patch[n_patch, 1], patch[n_patch, 2] = node, lo_id, hi_id
                patch_split[n_patch, 0], patch_split[n_patch, 1] = split, thr
                n_patch += 1
            if node >= n_top:
                value[lo_id - n_top] = value[node - n_top]
                value[hi_id - n_top] = value[node - n_top]
            elif total > 0:
                for c in range(width):
                    shared = stats[c] / total if n_classes > 0 or c == 0 else 0.0
                    value[lo_id - n_top, c] = shared
                    value[hi_id - n_top, c] = shared
            stack[top, 0], stack[top, 1], stack[top, 2] = mid, end, hi_id
            stack[top + 1, 0], stack[top + 1, 1], stack[top + 1, 2] = start, mid, lo_id
            top += 2
    m = next_id - n_top
    return (
        new_leaves,
        new_counts,
        patch[:n_patch].copy(),
        patch_split[:n_patch].copy(),
        c_left[:m].copy(),
        c_right[:m].copy(),
        feat[:m].copy(),
        thresh[:m].copy(),
        n_samples[:m].copy(),
        weighted[:m].copy(),
        value[:m].copy(),
    )


def resolve_mtry(max_features: int | float | str | None, d: int) -> int:
    """Features tried per split, by scikit-learn's rule for ``max_features``."""
    if max_features is None:
        return d
    if max_features == "sqrt":
        return max(1, int(np.sqrt(d)))
    if max_features == "log2":
        return max(1, int(np.log2(d)))
    if isinstance(max_features, float):
        return max(1, int(max_features * d))
    return int(max_features)


def _graft(top: dict[str, np.ndarray], out: tuple, n_classes: int) -> dict[str, np.ndarray]:
    """One tree's nodes with the refinement's below its crowded leaves."""
    patch, split, left, right, feature, threshold, n_samples, weighted, value = out[2:]
    nodes = {name: np.array(values) for name, values in top.items()}
    slots = patch[:, 0]
    nodes["children_left"][slots] = patch[:, 1]
    nodes["children_right"][slots] = patch[:, 2]
    nodes["feature"][slots] = split[:, 0].astype(np.int32)
    nodes["threshold"][slots] = split[:, 1]
    nodes["missing_go_to_left"][slots] = 0
    width = nodes["value"].shape[1]
    appended = {
        "children_left": left, "children_right": right, "feature": feature,
        "threshold": threshold, "missing_go_to_left": np.zeros(len(left), dtype=np.uint8),
        "n_node_samples": n_samples, "weighted_n_node_samples": weighted,
        "value": value[:, :width] if n_classes else value,
    }  # fmt: skip
    return {name: np.concatenate([nodes[name], appended[name].astype(nodes[name].dtype)])
            for name in nodes}  # fmt: skip


def refine_batch(
    X: np.ndarray,
    y: np.ndarray,
    leaves: np.ndarray,
    inbag: np.ndarray,
    seeds: np.ndarray,
    nodes: dict[str, np.ndarray],
    node_counts: np.ndarray,
    *,
    bound: int,
    min_split: int,
    mtry: int,
    n_classes: int,
    extra: bool,
    min_leaf: int,
    bootstrap: bool,
) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray], np.ndarray]:
    """Refine every tree of a batch (:func:`refine_tree`) and graft the refinements.

    Parameters
    ----------
    X : ndarray of float32, shape (n, d)
    y : ndarray, shape (n,)
        Class codes or regression target.
    leaves, inbag : ndarray, shape (n, w)
        Every row's leaf and in-bag count in the batch's trees.
    seeds : ndarray of uint64, shape (w,)
    nodes : dict of str to ndarray
        The batch's node arrays, concatenated (``node_counts`` per tree).
    node_counts : ndarray of int64, shape (w,)
    bound, min_split, mtry, n_classes, extra, min_leaf, bootstrap
        See :func:`refine_tree`.

    Returns
    -------
    leaves, inbag, nodes, node_counts
        Of the refined trees (``leaves`` and ``inbag`` written in place).
    """
    y64 = np.ascontiguousarray(y, dtype=np.float64)
    offsets = np.concatenate([[0], np.cumsum(node_counts)]).astype(np.int64)
    per_tree = []
    counts = np.empty_like(node_counts)
    for t, seed in enumerate(seeds):
        top = {name: values[offsets[t] : offsets[t + 1]] for name, values in nodes.items()}
        out = refine_tree(kernel_input(X, X.dtype), y64, np.ascontiguousarray(leaves[:, t]),
                          np.ascontiguousarray(inbag[:, t]), np.uint64(seed),
                          int(node_counts[t]), bound, min_split, mtry, n_classes, extra,
                          min_leaf, bootstrap)  # fmt: skip
        leaves[:, t], inbag[:, t] = out[0], out[1]
        grafted = _graft(top, out, n_classes)
        counts[t] = len(grafted["feature"])
        per_tree.append(grafted)
    # field by field, each tree's field freed as it is joined: never the nodes twice
    merged = {name: np.concatenate([tree.pop(name) for tree in per_tree]) for name in nodes}
    return leaves, inbag, merged, counts
