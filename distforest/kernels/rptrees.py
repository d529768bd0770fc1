"""Numba kernels of X-Forest: random-projection trees grown level by level, with path codes.

A tree is grown level by level over all points (no recursion).  ``order``
holds the points grouped by node; every level visits each node of that level
once, and a node is split by partitioning its slice of ``order`` in place.
Each point carries its depth and its *path code*: bit ``k`` (word ``k // 64``,
bit ``k % 64``) is 1 when the point went right at depth ``k``.  The lowest
common ancestor of two points is then the common prefix of their codes, so
the number of edges between their leaves is ``d_a + d_b - 2 d_lca``
(docs/design.md section 4) and the beta-similarity in one tree is
``beta ** (d_a + d_b - 2 d_lca)`` (:mod:`distforest.kernels.betasim`).

Randomness is counter based: every node has a 64-bit key (the root's from
the tree seed, a child's from its parent's key and side), and the node's
threshold draws (and, in ``standard`` mode, its direction) are hashes of that
key.  So a tree depends only on its seed and data, never on the order in
which nodes are visited, and a recursive reference implementation reproduces
it exactly.

Splitting rule: the node at depth ``d`` projects its points on direction
``d mod X`` (``standard`` mode: a fresh direction per node), draws a threshold
``lo + u (hi - lo)`` with ``u`` uniform in [0, 1), sends ``proj <= threshold``
left and redraws while the right side would be empty.  A node with at most
``leaf_size`` points, or whose projections are all equal, is a leaf.

All kernels are ``@njit(nogil=True, cache=True)`` over flat arrays.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from distforest.kernels.signatures import kernel_input

_U64 = np.uint64
#: Constants of the splitmix64 mixer; the oracle in tests/ uses the same ones.
GOLDEN = 0x9E3779B97F4A7C15
MIX_1 = 0xBF58476D1CE4E5B9
MIX_2 = 0x94D049BB133111EB
DIRECTION_SALT = 0xD1B54A32D192ED03
#: Leaf nodes have direction -1 and children -1.
NO_NODE = -1
#: At most this many threshold draws per node (a split exists after the first
#: draw with probability ~1; the cap only guards against an endless loop).
MAX_DRAWS = 64


@njit(nogil=True, cache=True)
def mix64(z):  # pragma: no cover - numba
    """splitmix64 finaliser: a bijective hash of a uint64."""
    z = (z ^ (z >> _U64(30))) * _U64(MIX_1)
    z = (z ^ (z >> _U64(27))) * _U64(MIX_2)
    return z ^ (z >> _U64(31))


@njit(nogil=True, cache=True)
def root_key(seed):  # pragma: no cover - numba
    """Key of a tree's root node from the tree's seed."""
    return mix64(_U64(seed) + _U64(GOLDEN))


@njit(nogil=True, cache=True)
def child_key(key, side):  # pragma: no cover - numba
    """Key of the left (``side=0``) or right (``side=1``) child."""
    return mix64(key ^ (_U64(side + 1) * _U64(GOLDEN)))


@njit(nogil=True, cache=True)
def uniform(key, counter):  # pragma: no cover - numba
    """The ``counter``-th uniform number in [0, 1) of the node with ``key``."""
    z = mix64(key + _U64(counter + 1) * _U64(GOLDEN))
    return (z >> _U64(11)) * (1.0 / 9007199254740992.0)


@njit(nogil=True, cache=True)
def node_direction(key, p, out):  # pragma: no cover - numba
    """A random unit direction for a ``standard``-mode node (Box-Muller)."""
    dkey = mix64(key ^ _U64(DIRECTION_SALT))
    norm = 0.0
    for j in range(p):
        u1 = uniform(dkey, 2 * j)
        u2 = uniform(dkey, 2 * j + 1)
        g = np.sqrt(-2.0 * np.log(1.0 - u1)) * np.cos(2.0 * np.pi * u2)
        out[j] = g
        norm += g * g
    norm = np.sqrt(norm)
    if norm == 0.0:
        out[0] = 1.0
        norm = 1.0
    for j in range(p):
        out[j] /= norm


@njit(nogil=True, cache=True)
def _grow_codes(codes, words):  # pragma: no cover - numba
    out = np.zeros((codes.shape[0], words), dtype=np.uint64)
    out[:, : codes.shape[1]] = codes
    return out


@njit(nogil=True, cache=True)
def grow_tree(X, proj, col0, n_cols, seed, leaf_size, standard):  # pragma: no cover - numba
    """Grow one random-projection tree level by level.

    Parameters
    ----------
    X : ndarray of float64, shape (n, p)
        The (normalised) data; read only in ``standard`` mode.
    proj : ndarray of float64, shape (m, n)
        Projections, one row per direction (so a level reads one contiguous
        vector); rows ``col0 .. col0 + n_cols - 1`` are this tree's X
        directions (ignored in ``standard`` mode).
    col0, n_cols : int
        This tree's rows of ``proj``; depth ``d`` uses ``col0 + d % n_cols``.
    seed : uint64
        The tree's seed (root key).
    leaf_size : int
        A node with at most this many points is a leaf.
    standard : bool
        Draw a fresh direction for every node (Dasgupta-Freund RP tree).

    Returns
    -------
    leaf, depth : ndarray of int32, shape (n,)
        Leaf node id and depth of every point.
    codes : ndarray of uint64, shape (n, words)
        Path codes (bit k of the code: went right at depth k).
    nodes : ndarray of int32, shape (n_nodes, 5)
        Per node in breadth-first order: parent, depth, left, right, direction
        (-1 for a leaf's children and direction; the root's parent is -1).
    thresholds : ndarray of float64, shape (n_nodes,)
    directions : ndarray of float64, shape (n_internal, p)
        ``standard`` mode only (else shape (0, p)): the direction of each
        internal node, indexed by the node's direction entry.
    """
    n, p = X.shape
    max_nodes = 2 * n - 1
    nodes = np.full((max_nodes, 5), -1, dtype=np.int32)
    thresholds = np.zeros(max_nodes, dtype=np.float64)
    keys = np.zeros(max_nodes, dtype=np.uint64)
    starts = np.zeros(max_nodes, dtype=np.int64)
    ends = np.zeros(max_nodes, dtype=np.int64)
    dirs = np.zeros((n - 1 if standard and n > 1 else 0, p), dtype=np.float64)
    values = np.empty(n, dtype=np.float64)
    direction = np.empty(p, dtype=np.float64)
    order = np.arange(n)
    leaf = np.zeros(n, dtype=np.int32)
    depth = np.zeros(n, dtype=np.int32)
    codes = np.zeros((n, 1), dtype=np.uint64)
    nodes[0, 1] = 0
    keys[0] = root_key(seed)
    ends[0] = n
    n_nodes = 1
    n_dirs = 0
    level_start = 0
    level_end = 1
    d = 0
    while level_start < level_end:
        if d >= 64 * codes.shape[1]:
            codes = _grow_codes(codes, codes.shape[1] + 1)
        for v in range(level_start, level_end):
            s = starts[v]
            e = ends[v]
            size = e - s
            lo = 0.0
            hi = 0.0
            if size > leaf_size:
                if standard:
                    node_direction(keys[v], p, direction)
                    for k in range(s, e):
                        acc = 0.0
                        row = order[k]
                        for j in range(p):
                            acc += X[row, j] * direction[j]
                        values[k] = acc
                else:
                    pc = proj[col0 + d % n_cols]
                    for k in range(s, e):
                        values[k] = pc[order[k]]
                lo = values[s]
                hi = values[s]
                for k in range(s + 1, e):
                    x = values[k]
                    if x < lo:
                        lo = x
                    elif x > hi:
                        hi = x
            if size <= leaf_size or lo == hi:
                for k in range(s, e):
                    leaf[order[k]] = v
                    depth[order[k]] = d
                continue
            thr = hi
            for attempt in range(MAX_DRAWS):
                thr = lo + uniform(keys[v], attempt) * (hi - lo)
                if thr < hi:
                    break
            if thr >= hi:  # never in practice: fall back to the midpoint below hi
                thr = lo + 0.5 * (hi - lo)
            # partition order[s:e] (and values) in place: <= thr left
            a = s
            b = e - 1
            while a <= b:
                if values[a] <= thr:
                    a += 1
                else:
                    tmp = order[a]
                    order[a] = order[b]
                    order[b] = tmp
                    x = values[a]
                    values[a] = values[b]
                    values[b] = x
                    b -= 1
            word = d >> 6
            bit = _U64(1) << _U64(d & 63)
            for k in range(a, e):
                codes[order[k], word] |= bit
            left = n_nodes
            right = n_nodes + 1
            n_nodes += 2
            nodes[v, 2] = left
            nodes[v, 3] = right
            thresholds[v] = thr
            if standard:
                dirs[n_dirs] = direction
                nodes[v, 4] = n_dirs
                n_dirs += 1
            else:
                nodes[v, 4] = d % n_cols
            for side in range(2):
                child = left + side
                nodes[child, 0] = v
                nodes[child, 1] = d + 1
                keys[child] = child_key(keys[v], np.int64(side))
                starts[child] = s if side == 0 else a
                ends[child] = a if side == 0 else e
        level_start = level_end
        level_end = n_nodes
        d += 1
    return (
        leaf,
        depth,
        codes,
        nodes[:n_nodes].copy(),
        thresholds[:n_nodes].copy(),
        dirs[:n_dirs].copy(),
    )


@njit(nogil=True, cache=True)
def route(X, nodes, thresholds, directions):  # pragma: no cover - numba
    """Send rows of ``X`` down one stored tree.

    Parameters
    ----------
    X : ndarray of float64, shape (m, p)
        Normalised rows.
    nodes, thresholds : as returned by :func:`grow_tree`
    directions : ndarray of float64, shape (k, p)
        The tree's directions (its X directions, or per-node ones in
        ``standard`` mode), indexed by the node's direction entry.

    Returns
    -------
    leaf, depth : ndarray of int32, shape (m,)
    codes : ndarray of uint64, shape (m, words)
    """
    m, p = X.shape
    max_depth = 0
    for v in range(nodes.shape[0]):
        if nodes[v, 1] > max_depth:
            max_depth = nodes[v, 1]
    words = max_depth // 64 + 1
    leaf = np.zeros(m, dtype=np.int32)
    depth = np.zeros(m, dtype=np.int32)
    codes = np.zeros((m, words), dtype=np.uint64)
    for i in range(m):
        v = 0
        while nodes[v, 2] != NO_NODE:
            k = nodes[v, 4]
            acc = 0.0
            for j in range(p):
                acc += X[i, j] * directions[k, j]
            d = nodes[v, 1]
            if acc <= thresholds[v]:
                v = nodes[v, 2]
            else:
                codes[i, d >> 6] |= _U64(1) << _U64(d & 63)
                v = nodes[v, 3]
        leaf[i] = v
        depth[i] = nodes[v, 1]
    return leaf, depth, codes


# -- plain functions around the kernels (still numpy only) --------------------


@dataclass(frozen=True)
class GrownBatch:
    """The trees of one batch, flattened.

    Attributes
    ----------
    leaves, depth : ndarray of int32, shape (n, B)
    codes : ndarray of uint64, shape (n, B, W)
    nodes : ndarray of int32, shape (total_nodes, 5)
        parent, depth, left, right, direction (see :func:`grow_tree`).
    thresholds : ndarray of float64, shape (total_nodes,)
    node_counts : ndarray of int64, shape (B,)
    directions : ndarray of float64, shape (total_directions, p)
    direction_counts : ndarray of int64, shape (B,)
    """

    leaves: np.ndarray
    depth: np.ndarray
    codes: np.ndarray
    nodes: np.ndarray
    thresholds: np.ndarray
    node_counts: np.ndarray
    directions: np.ndarray
    direction_counts: np.ndarray


def tree_directions(seed: int, n_directions: int, p: int) -> np.ndarray:
    """The X random unit directions of an ``x``-mode tree, shape (X, p), from its seed."""
    rng = np.random.default_rng(np.random.SeedSequence(int(seed), spawn_key=(1,)))
    W = rng.standard_normal((n_directions, p))
    norms = np.linalg.norm(W, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return W / norms


def grow_batch(
    X: np.ndarray, seeds: np.ndarray, n_directions: int, leaf_size: int, standard: bool
) -> GrownBatch:
    """Grow the trees of ``seeds`` on ``X``; one matrix product for all X directions.

    Parameters
    ----------
    X : ndarray of float64, shape (n, p)
        Normalised data.
    seeds : ndarray of uint64, shape (B,)
    n_directions : int
        X, the directions per tree (ignored in ``standard`` mode).
    leaf_size : int
    standard : bool

    Returns
    -------
    GrownBatch
    """
    X = kernel_input(X, np.float64)  # read-only or not, one compiled grow_tree
    n, p = X.shape
    n_trees = len(seeds)
    if standard:
        proj = np.zeros((1, n))
        per_tree = [np.zeros((0, p))] * n_trees
    else:
        per_tree = [tree_directions(s, n_directions, p) for s in seeds]
        # One product per tree, (X, p) @ (p, n): its bits must not depend on how many
        # trees share the batch (a (B X, p) product's blocking, hence its rounding,
        # changes with B, and B follows the number of worker threads).
        proj = np.concatenate([d @ X.T for d in per_tree])  # (B X, n)
    results = []
    for t, seed in enumerate(seeds):
        res = grow_tree(
            X, proj, t * n_directions, n_directions, np.uint64(seed), leaf_size, standard
        )
        results.append(res)
    words = max(r[2].shape[1] for r in results)
    codes = np.zeros((n, n_trees, words), dtype=np.uint64)
    for t, r in enumerate(results):
        codes[:, t, : r[2].shape[1]] = r[2]
    dirs = [r[5] for r in results] if standard else per_tree
    return GrownBatch(
        leaves=np.stack([r[0] for r in results], axis=1),
        depth=np.stack([r[1] for r in results], axis=1),
        codes=codes,
        nodes=np.concatenate([r[3] for r in results]),
        thresholds=np.concatenate([r[4] for r in results]),
        node_counts=np.array([len(r[4]) for r in results], dtype=np.int64),
        directions=np.concatenate(dirs),
        direction_counts=np.array([len(d) for d in dirs], dtype=np.int64),
    )


def route_forest(
    X: np.ndarray,
    nodes: np.ndarray,
    thresholds: np.ndarray,
    node_offsets: np.ndarray,
    directions: np.ndarray,
    direction_offsets: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Leaves, depths and path codes of new (normalised) rows in every tree.

    Returns
    -------
    leaves, depth : ndarray of int32, shape (m, T)
    codes : ndarray of uint64, shape (m, T, W)
    """
    X = np.ascontiguousarray(X, dtype=np.float64)
    n_trees = len(node_offsets) - 1
    parts = []
    for t in range(n_trees):
        a, b = node_offsets[t], node_offsets[t + 1]
        c, d = direction_offsets[t], direction_offsets[t + 1]
        parts.append(route(X, nodes[a:b], thresholds[a:b], np.ascontiguousarray(directions[c:d])))
    words = max(p[2].shape[1] for p in parts)
    codes = np.zeros((X.shape[0], n_trees, words), dtype=np.uint64)
    for t, part in enumerate(parts):
        codes[:, t, : part[2].shape[1]] = part[2]
    leaves = np.stack([p[0] for p in parts], axis=1)
    return leaves, np.stack([p[1] for p in parts], axis=1), codes


def warm_up() -> None:
    """Compile (or load from cache) every kernel once, before fanning out tasks."""
    X = np.array([[0.0, 1.0], [1.0, 0.0], [0.5, 0.5]])
    for standard in (False, True):
        batch = grow_batch(X, np.array([1], dtype=np.uint64), 2, 1, standard)
        offs = np.array([0, len(batch.thresholds)])
        doffs = np.array([0, len(batch.directions)])
        route_forest(X, batch.nodes, batch.thresholds, offs, batch.directions, doffs)
