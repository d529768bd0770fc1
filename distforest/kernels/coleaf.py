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

#: Method codes of :func:`block_neighbors`.
ORIGINAL, OOB, RFGAP = 0, 1, 2

_LOW32 = np.uint64(0xFFFFFFFF)


@njit(nogil=True, cache=True)
def leaf_index(leaves, keep, with_weights):  # pragma: no cover - numba
    """Per tree, the kept rows grouped by leaf, rows ascending within a leaf.

    Parameters
    ----------
    leaves : ndarray of int32, shape (n, T)
        Leaf (node) id of every row in every tree (rows by trees, as stored),
        none negative.
    keep : ndarray of uint8, shape (n, T)
        Rows with 0 are left out of that tree's index; the others are kept
        with their value as weight (e.g. an in-bag count).
    with_weights : bool
        Whether to return the members' weights (else an empty array).

    Returns
    -------
    members : ndarray of int32, shape (kept,)
        Row numbers, tree after tree, leaf after leaf.
    weights : ndarray of uint8, shape (kept,) or (0,)
        ``keep`` of each member.
    member_offset : ndarray of int64, shape (T + 1,)
        Tree t's members are ``members[member_offset[t]:member_offset[t + 1]]``.
    leaf_offset : ndarray of int64, shape (T + 1,)
        Where tree t's leaf table starts in ``leaf_start``.
    leaf_start : ndarray of int32
        Leaf ``l`` of tree t holds tree t's members ``s:e`` (relative to
        ``member_offset[t]``) with ``s, e = leaf_start[leaf_offset[t] + l]``
        and ``leaf_start[leaf_offset[t] + l + 1]``.
    """
    n, n_trees = leaves.shape
    largest = np.full(n_trees, -1, dtype=np.int64)
    member_offset = np.zeros(n_trees + 1, dtype=np.int64)
    for r in range(n):
        for t in range(n_trees):
            leaf = leaves[r, t]
            if leaf < 0:
                raise ValueError("leaf ids must not be negative")
            if leaf > largest[t]:
                largest[t] = leaf
            member_offset[t + 1] += keep[r, t] != 0
    leaf_offset = np.zeros(n_trees + 1, dtype=np.int64)
    for t in range(n_trees):
        member_offset[t + 1] += member_offset[t]
        leaf_offset[t + 1] = leaf_offset[t] + largest[t] + 2
    leaf_start = np.zeros(leaf_offset[n_trees], dtype=np.int32)
    for r in range(n):  # members per leaf ...
        for t in range(n_trees):
            if keep[r, t] != 0:
                leaf_start[leaf_offset[t] + leaves[r, t] + 1] += 1
    for t in range(n_trees):  # ... then where each leaf starts
        for m in range(leaf_offset[t] + 1, leaf_offset[t + 1]):
            leaf_start[m] += leaf_start[m - 1]
    members = np.empty(member_offset[n_trees], dtype=np.int32)
    weights = np.empty(member_offset[n_trees] if with_weights else 0, dtype=np.uint8)
    fill = leaf_start.copy()
    for r in range(n):  # rows in order: ascending within each leaf
        for t in range(n_trees):
            if keep[r, t] != 0:
                slot = leaf_offset[t] + leaves[r, t]
                p = member_offset[t] + fill[slot]
                members[p] = r
                if with_weights:
                    weights[p] = keep[r, t]
                fill[slot] += 1
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


@njit(nogil=True, cache=True)
def block_neighbors(  # pragma: no cover - numba
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
):
    """The top-k proximity neighbours of a block of rows.

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
    b, n_trees = q_leaves.shape
    index = np.empty((b, k), dtype=np.int64)
    proximity = np.empty((b, k), dtype=np.float32)
    counts = np.zeros(n if method != RFGAP else 1, dtype=np.uint16)
    hist = np.zeros(n_trees + 1, dtype=np.int64)
    keys = np.empty(n, dtype=np.uint64)
    sums = np.zeros(n if method == RFGAP else 1, dtype=np.float64)
    touched = np.empty(n + 1, dtype=np.int32)  # one spare: written before it counts
    heap = np.empty(k, dtype=np.uint64)
    bits = np.empty(1, dtype=np.float32)
    bits_u = bits.view(np.uint32)
    words = masks.shape[1]
    for a in range(b):
        i = first_row + a
        n_touched = 0
        n_used = 0
        for t in range(n_trees):
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
        lowest = np.uint64(1)
        if method == ORIGINAL:  # only counts that can make the top k go to the heap
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


def warm_up() -> None:
    """Compile (or load from cache) the kernels once, before tasks fan out."""
    leaves = np.zeros((3, 1), dtype=np.int32)
    inbag = np.ones((3, 1), dtype=np.uint8)
    masks = oob_masks(inbag)
    for method in (ORIGINAL, OOB, RFGAP):
        members, weights, member_offset, leaf_offset, leaf_start = leaf_index(
            leaves, inbag, method == RFGAP
        )
        block_neighbors(method, 0, leaves, inbag, members, weights, member_offset, leaf_offset,
                        leaf_start, masks, 3, 2, False)  # fmt: skip
