"""Numba kernels for the top-k proximity neighbours of every row.

No n x n matrix: per tree, the rows are grouped by leaf once (an inverted
index, :func:`leaf_index`); a query row then visits, tree by tree, only the
rows of its own leaf, adds them up in a dense per-row counter reused from
row to row (reset through the list of rows it touched) and keeps the ``k``
best in a small heap.  Work is the number of (pair, tree) co-leaf events of
the query rows, memory ``O(n)`` per running block besides the index.

Values are computed exactly as the dense tiles of
:mod:`distforest.kernels.proximity` compute them, so the same pair gets the
same float32 bits:

- ``original``: ``float32(count / T)``;
- ``oob``: ``float32(shared / both)`` with ``shared`` the trees where both
  rows are out of bag and share a leaf and ``both`` the trees where both are
  out of bag (a popcount of the two rows' out-of-bag bit masks);
- ``rfgap``: ``float32(sum_t c_j(t) / M_i(t) / |S_i|)`` summed over the trees
  in order in float64, the same additions as the dense kernel.

Order: proximity descending, ties to the smaller row number; rows of
proximity 0 follow by row number (what the top-k of the dense row is).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from distforest.kernels.prefetch import LINE_INT32, prefetch

#: Method codes of :func:`block_neighbors`.
ORIGINAL, OOB, RFGAP = 0, 1, 2

_LOW32 = np.uint64(0xFFFFFFFF)

#: The kernel asks for the member list of the tree this many trees ahead of the
#: one it counts, and for at most this many of its first members (see
#: :mod:`distforest.kernels.prefetch`; measured on 100,000 rows, 100 trees: the
#: counting pass 25-30 % faster than without).
AHEAD, AHEAD_MEMBERS = 4, 8 * LINE_INT32


@njit(nogil=True, cache=True, inline="always")
def _kept(method, count):  # pragma: no cover - numba
    """A row's weight in a tree's index: 1 (original), 1 if out of bag (oob), in-bag count."""
    if method == ORIGINAL:
        return 1
    if method == OOB:
        return 1 if count == 0 else 0
    return int(count)


@njit(nogil=True, cache=True)
def count_members(method, leaves, inbag, leaf_offset, leaf_start):  # pragma: no cover - numba
    """First pass of :func:`leaf_index` over a block of rows: members per leaf.

    Adds to ``leaf_start[leaf_offset[t] + l + 1]`` the block's rows kept in leaf l of tree t.
    """
    b, n_trees = leaves.shape
    for r in range(b):
        for t in range(n_trees):
            leaf = leaves[r, t]
            if leaf < 0 or leaf_offset[t] + leaf + 1 >= leaf_offset[t + 1]:
                raise ValueError("a leaf id is negative or beyond its tree's largest")
            if _kept(method, inbag[r, t]) != 0:
                leaf_start[leaf_offset[t] + leaf + 1] += 1


@njit(nogil=True, cache=True)
def start_positions(leaf_offset, leaf_start):  # pragma: no cover - numba
    """Second step: counts to start positions within each tree; returns ``member_offset``."""
    n_trees = leaf_offset.shape[0] - 1
    member_offset = np.zeros(n_trees + 1, dtype=np.int64)
    for t in range(n_trees):
        for m in range(leaf_offset[t] + 1, leaf_offset[t + 1]):
            leaf_start[m] += leaf_start[m - 1]
        member_offset[t + 1] = member_offset[t] + leaf_start[leaf_offset[t + 1] - 1]
    return member_offset


@njit(nogil=True, cache=True)
def place_members(  # pragma: no cover - numba
    method, first_row, leaves, inbag, leaf_offset, leaf_start, member_offset, members, weights
):
    """Third pass over the blocks, in row order: each kept row into its leaf's next slot.

    Uses ``leaf_start`` as the slots' cursors: afterwards each entry holds the
    next leaf's start, which :func:`shift_starts` puts back.
    """
    b, n_trees = leaves.shape
    with_weights = weights.shape[0] > 0
    for r in range(b):
        for t in range(n_trees):
            keep = _kept(method, inbag[r, t])
            if keep != 0:
                slot = leaf_offset[t] + leaves[r, t]
                p = member_offset[t] + leaf_start[slot]
                members[p] = first_row + r
                if with_weights:
                    weights[p] = keep
                leaf_start[slot] += 1


@njit(nogil=True, cache=True)
def shift_starts(leaf_offset, leaf_start):  # pragma: no cover - numba
    """Last step: the cursors of :func:`place_members` back to leaf starts."""
    n_trees = leaf_offset.shape[0] - 1
    for t in range(n_trees):
        for m in range(leaf_offset[t + 1] - 1, leaf_offset[t], -1):
            leaf_start[m] = leaf_start[m - 1]
        leaf_start[leaf_offset[t]] = 0


def leaf_tables(largest: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``leaf_offset`` and a zeroed ``leaf_start`` for trees whose largest leaf ids are given."""
    leaf_offset = np.zeros(len(largest) + 1, dtype=np.int64)
    np.cumsum(np.asarray(largest, dtype=np.int64) + 2, out=leaf_offset[1:])
    return leaf_offset, np.zeros(leaf_offset[-1], dtype=np.int32)


def leaf_index(
    leaves: np.ndarray, inbag: np.ndarray, method: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per tree, the rows a method keeps grouped by leaf, rows ascending within a leaf.

    For rows that come in blocks (read from a store) call the four steps
    :func:`count_members`, :func:`start_positions`, :func:`place_members` and
    :func:`shift_starts` block by block instead; this is all of them on one block.

    Parameters
    ----------
    leaves : ndarray of int32, shape (n, T)
        Leaf (node) id of every row in every tree (rows by trees, as stored).
    inbag : ndarray of uint8, shape (n, T)
        In-bag counts.
    method : int
        :data:`ORIGINAL` keeps every row, :data:`OOB` the out-of-bag rows of each
        tree, :data:`RFGAP` the in-bag rows, weighted by their in-bag counts.

    Returns
    -------
    members : ndarray of int32, shape (kept,)
        Row numbers, tree after tree, leaf after leaf.
    weights : ndarray of uint8, shape (kept,) for rfgap, else (0,)
        In-bag count of each member.
    member_offset : ndarray of int64, shape (T + 1,)
        Tree t's members are ``members[member_offset[t]:member_offset[t + 1]]``.
    leaf_offset : ndarray of int64, shape (T + 1,)
        Where tree t's leaf table starts in ``leaf_start``.
    leaf_start : ndarray of int32
        Leaf ``l`` of tree t holds tree t's members ``s:e`` (relative to
        ``member_offset[t]``) with ``s, e = leaf_start[leaf_offset[t] + l]``
        and ``leaf_start[leaf_offset[t] + l + 1]``.
    """
    largest = leaves.max(axis=0) if leaves.shape[0] else np.zeros(leaves.shape[1], np.int64)
    leaf_offset, leaf_start = leaf_tables(largest)
    count_members(method, leaves, inbag, leaf_offset, leaf_start)
    member_offset = start_positions(leaf_offset, leaf_start)
    members = np.empty(member_offset[-1], dtype=np.int32)
    weights = np.empty(member_offset[-1] if method == RFGAP else 0, dtype=np.uint8)
    place_members(method, 0, leaves, inbag, leaf_offset, leaf_start, member_offset, members,
                  weights)  # fmt: skip
    shift_starts(leaf_offset, leaf_start)
    return members, weights, member_offset, leaf_offset, leaf_start


@njit(nogil=True, cache=True)
def oob_masks(inbag):  # pragma: no cover - numba
    """Bit masks of the trees where each row is out of bag.

    Parameters
    ----------
    inbag : ndarray of uint8, shape (n, T)

    Returns
    -------
    ndarray of uint64, shape (n, ceil(T / 64))
        Bit ``t % 64`` of word ``t // 64`` set when row i is out of bag in tree t.
    """
    n, n_trees = inbag.shape
    words = (n_trees + 63) // 64
    out = np.zeros((n, words), dtype=np.uint64)
    for r in range(n):
        for t in range(n_trees):
            if inbag[r, t] == 0:
                out[r, t >> 6] |= np.uint64(1) << np.uint64(t & 63)
    return out


@njit(nogil=True, cache=True, inline="always")
def _ask_for_leaf(  # pragma: no cover - numba
    members, member_offset, leaf_offset, leaf_start, q_leaves, a, t
):
    """Prefetch the first members of row ``a``'s leaf in tree ``t``."""
    slot = leaf_offset[t] + q_leaves[a, t]
    s = member_offset[t] + leaf_start[slot]
    e = min(member_offset[t] + leaf_start[slot + 1], s + AHEAD_MEMBERS)
    for p in range(s, e, LINE_INT32):
        prefetch(members, p)  # type: ignore[call-arg]  # (numba passes the typing context)


@njit(nogil=True, cache=True, inline="always")
def _popcount(x):  # pragma: no cover - numba
    x = x - ((x >> np.uint64(1)) & np.uint64(0x5555555555555555))
    x = (x & np.uint64(0x3333333333333333)) + ((x >> np.uint64(2)) & np.uint64(0x3333333333333333))
    x = (x + (x >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return (x * np.uint64(0x0101010101010101)) >> np.uint64(56)


@njit(nogil=True, cache=True, inline="always")
def _sift_down(heap, size, pos):  # pragma: no cover - numba
    """Restore the min-heap below ``pos``."""
    key = heap[pos]
    while True:
        child = 2 * pos + 1
        if child >= size:
            break
        if child + 1 < size and heap[child + 1] < heap[child]:
            child += 1
        if heap[child] >= key:
            break
        heap[pos] = heap[child]
        pos = child
    heap[pos] = key


@njit(nogil=True, cache=True, inline="always")
def _offer(heap, size, k, key):  # pragma: no cover - numba
    """Offer ``key`` to a min-heap of the ``k`` largest keys; returns the new size."""
    if size < k:
        pos = size
        while pos > 0:  # sift up
            parent = (pos - 1) >> 1
            if heap[parent] <= key:
                break
            heap[pos] = heap[parent]
            pos = parent
        heap[pos] = key
        return size + 1
    if key > heap[0]:
        heap[0] = key
        _sift_down(heap, size, 0)
    return size


def block_neighbors(
    method: int,
    first_row: int,
    q_leaves: np.ndarray,
    q_inbag: np.ndarray,
    members: np.ndarray,
    weights: np.ndarray,
    member_offset: np.ndarray,
    leaf_offset: np.ndarray,
    leaf_start: np.ndarray,
    masks: np.ndarray,
    n: int,
    k: int,
    include_self: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """The top-k proximity neighbours of a block of rows.

    The counters' dtype is chosen here, in Python, so that a process compiles
    only the :func:`_block_neighbors` it calls (inside a kernel, both branches'
    would be compiled, 2 CPU s each).

    Parameters
    ----------
    method : int
        :data:`ORIGINAL`, :data:`OOB` or :data:`RFGAP`.
    first_row : int
        Row number of the block's first row.
    q_leaves, q_inbag : ndarray of int32 and uint8, shape (b, T)
        The block's leaves and in-bag counts (rows by trees).
    members, weights, member_offset, leaf_offset, leaf_start : ndarray
        :func:`leaf_index` of all n rows: all rows for ``original``, the out-of-bag
        rows (weight 1) for ``oob``, the in-bag rows (weight: in-bag count) for
        ``rfgap``.
    masks : ndarray of uint64, shape (n, words)
        :func:`oob_masks` of all rows (``oob`` only; any array otherwise).
    n, k : int
        Rows in all, neighbours a row.
    include_self : bool
        Whether a row may be its own neighbour (with its own diagonal value).

    Returns
    -------
    index : ndarray of int64, shape (b, k)
    proximity : ndarray of float32, shape (b, k)
    """
    # the per-row tree counters in one byte when they fit (half the cache they take)
    size = n if method != RFGAP else 1
    if q_leaves.shape[1] < 255:
        counts8 = np.zeros(size, dtype=np.uint8)
        return _block_neighbors(method, first_row, q_leaves, q_inbag, members, weights,
                                member_offset, leaf_offset, leaf_start, masks, n, k,
                                include_self, counts8)  # fmt: skip
    counts16 = np.zeros(size, dtype=np.uint16)
    return _block_neighbors(method, first_row, q_leaves, q_inbag, members, weights,
                            member_offset, leaf_offset, leaf_start, masks, n, k, include_self,
                            counts16)  # fmt: skip


@njit(nogil=True, cache=True)
def _block_neighbors(  # pragma: no cover - numba
    method,
    first_row,
    q_leaves,
    q_inbag,
    members,
    weights,
    member_offset,
    leaf_offset,
    leaf_start,
    masks,
    n,
    k,
    include_self,
    counts,
):
    """:func:`block_neighbors` with zeroed tree counters ``counts`` (n,), uint8 or uint16."""
    b, n_trees = q_leaves.shape
    index = np.empty((b, k), dtype=np.int64)
    proximity = np.empty((b, k), dtype=np.float32)
    hist = np.zeros(n_trees + 1, dtype=np.int64)
    keys = np.empty(n, dtype=np.uint64)
    sums = np.zeros(n if method == RFGAP else 1, dtype=np.float64)
    touched = np.empty(n + 1, dtype=np.int32)  # one spare: written before it counts
    heap = np.empty(k, dtype=np.uint64)
    bits = np.empty(1, dtype=np.float32)
    bits_u = bits.view(np.uint32)
    words = masks.shape[1]
    # rows in the order of their leaf in the first tree: rows of near leaves (the
    # node ids of one subtree are near) share leaves in other trees too, so a row
    # finds more of its member lists still in the cache from the rows just before
    # it (each row's result depends on that row alone, not on the order)
    order = np.argsort(q_leaves[:, 0].copy(), kind="mergesort") if n_trees else np.arange(b)
    for a in order:
        i = first_row + a
        n_touched = 0
        n_used = 0
        for t in range(min(AHEAD, n_trees)):
            if method == ORIGINAL or q_inbag[a, t] == 0:
                _ask_for_leaf(members, member_offset, leaf_offset, leaf_start, q_leaves, a, t)
        for t in range(n_trees):
            u = t + AHEAD  # (the trees a row skips are not asked for)
            if u < n_trees and (method == ORIGINAL or q_inbag[a, u] == 0):
                _ask_for_leaf(members, member_offset, leaf_offset, leaf_start, q_leaves, a, u)
            if method != ORIGINAL and q_inbag[a, t] != 0:
                continue
            slot = leaf_offset[t] + q_leaves[a, t]
            s = member_offset[t] + leaf_start[slot]
            e = member_offset[t] + leaf_start[slot + 1]
            if method == RFGAP:
                mass = 0
                for p in range(s, e):
                    mass += int(weights[p])
                if mass == 0:
                    continue
                n_used += 1
                w = 1.0 / np.float64(mass)
                for p in range(s, e):
                    j = members[p]
                    touched[n_touched] = j  # kept only if j is new (no branch)
                    n_touched += sums[j] == 0.0
                    sums[j] += w * np.float64(weights[p])
            else:
                for p in range(s, e):
                    j = members[p]
                    touched[n_touched] = j
                    n_touched += counts[j] == 0
                    counts[j] += 1
        # one pass over the candidates in touch order reads (and, when no row of
        # proximity 0 will be needed, clears) the counters, writing keys in order:
        # key = value bits (count, or float32 bits) << 32 | ~row, larger is better
        reset = n_touched > k
        if method == ORIGINAL:
            hist[:] = 0
        for m in range(n_touched):
            j = touched[m]
            key = np.uint64(0)  # 0: not a candidate (self)
            if method == RFGAP:
                total = sums[j]
                if reset:
                    sums[j] = 0.0
                if j != i or include_self:
                    bits[0] = np.float32(total / np.float64(n_used))
                    key = (np.uint64(bits_u[0]) << np.uint64(32)) | (_LOW32 - np.uint64(j))
            else:
                count = counts[j]
                if reset:
                    counts[j] = 0
                if j != i or include_self:
                    if method == ORIGINAL:  # counts order as their fractions do
                        key = (np.uint64(count) << np.uint64(32)) | (_LOW32 - np.uint64(j))
                        hist[count] += 1
                    else:
                        both = 0
                        for word in range(words):
                            both += _popcount(masks[i, word] & masks[j, word])
                        bits[0] = np.float32(np.float64(count) / np.float64(both))
                        key = (np.uint64(bits_u[0]) << np.uint64(32)) | (_LOW32 - np.uint64(j))
            keys[m] = key
        if method == ORIGINAL:  # only counts that can make the top k go to a heap
            above = 0
            c = n_trees
            while c > 1 and above + hist[c] < k:
                above += hist[c]
                c -= 1
            lowest = np.uint64(c) << np.uint64(32)
            size = 0
            for m in range(n_touched):
                if keys[m] >= lowest:
                    size = _offer(heap, size, k, keys[m])
            ranked = np.sort(heap[:size])[::-1]
        elif n_touched > k:  # ratios tie often (heap churn): select, then sort k
            # (at most one key is 0, the row itself: the k largest are all candidates)
            ranked = np.sort(np.partition(keys[:n_touched], n_touched - k)[n_touched - k :])[::-1]
            size = k
        else:
            ranked = np.sort(keys[:n_touched])[::-1]
            size = 0
            while size < n_touched and ranked[size] != 0:
                size += 1
        for m in range(size):
            key = ranked[m]
            index[a, m] = np.int64(_LOW32 - (key & _LOW32))
            if method == ORIGINAL:
                proximity[a, m] = np.float32(np.int64(key >> np.uint64(32)) / n_trees)
            else:
                bits_u[0] = np.uint32(key >> np.uint64(32))
                proximity[a, m] = bits[0]
        r = 0
        m = size
        while m < k:  # rows of proximity 0, by row number
            positive = counts[r] != 0 if method != RFGAP else sums[r] != 0.0
            if not positive and (r != i or include_self):
                index[a, m] = r
                proximity[a, m] = 0.0
                m += 1
            r += 1
        if not reset:
            for m in range(n_touched):
                j = touched[m]
                if method == RFGAP:
                    sums[j] = 0.0
                else:
                    counts[j] = 0
    return index, proximity


def warm_up(n_trees: int = 1) -> None:
    """Compile (or load from cache) the kernels once, before tasks fan out.

    For the tree counters of a forest of ``n_trees`` trees (uint8 below 255
    trees, uint16 from there: :func:`block_neighbors`).
    """
    leaves = np.zeros((3, n_trees), dtype=np.int32)
    inbag = np.ones((3, n_trees), dtype=np.uint8)
    masks = oob_masks(inbag)
    for method in (ORIGINAL, OOB, RFGAP):
        members, weights, member_offset, leaf_offset, leaf_start = leaf_index(leaves, inbag, method)
        block_neighbors(method, 0, leaves, inbag, members, weights, member_offset, leaf_offset,
                        leaf_start, masks, 3, 2, False)  # fmt: skip
