"""Numba kernels of X-Forest: random-projection trees, path codes, beta-similarity.

A tree is grown level by level over all points (no recursion).  ``order``
holds the points grouped by node; every level visits each node of that level
once, and a node is split by partitioning its slice of ``order`` in place.
Each point carries its depth and its *path code*: bit ``k`` (word ``k // 64``,
bit ``k % 64``) is 1 when the point went right at depth ``k``.  The lowest
common ancestor of two points is then the common prefix of their codes, so
the number of edges between their leaves is ``d_a + d_b - 2 d_lca``
(DESIGN.md section 4) and the beta-similarity in one tree is
``beta ** (d_a + d_b - 2 d_lca)``.

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
from numba.cpython.unsafe.numbers import trailing_zeros

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
                keys[child] = child_key(keys[v], side)
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


@njit(nogil=True, cache=True)
def beta_powers(beta, max_edges):  # pragma: no cover - numba
    """``beta ** k`` for k = 0 .. max_edges (``0 ** 0 = 1``: beta = 0 is basic similarity)."""
    out = np.empty(max_edges + 1, dtype=np.float64)
    out[0] = 1.0
    for k in range(1, max_edges + 1):
        out[k] = out[k - 1] * beta
    return out


@njit(nogil=True, cache=True, inline="always")
def _edges(x, y, c, e):  # pragma: no cover - numba
    """Edges between two leaves: depths x, y (uint64), one-word path codes c, e."""
    low = min(x, y, trailing_zeros(c ^ e))  # cttz(0) = 64 > any one-word depth
    return x + y - low - low


@njit(nogil=True, cache=True)
def _pair(ci, di, cj, dj, a, b, pw):  # pragma: no cover - numba
    acc = 0.0
    for t in range(ci.shape[1]):
        acc += pw[_edges(np.uint64(di[a, t]), np.uint64(dj[b, t]), ci[a, t], cj[b, t])]
    return acc


@njit(nogil=True, cache=True)
def similarity_tile(ci, di, cj, dj, pw):  # pragma: no cover - numba
    """Mean over trees of ``beta ** edges`` for every pair of two row blocks (one-word codes).

    The tile kernel.  Pairs are taken four rows by four columns at a time
    with the trees innermost, so the 16 running sums stay in registers and
    each loaded code serves four pairs.  Every pair sums its trees in order,
    so the result does not depend on the tile size.

    Parameters
    ----------
    ci, cj : ndarray of uint64, shape (ni, T) and (nj, T)
        Path codes (trees of depth < 64: one word), rows first.
    di, dj : ndarray of uint8, shape (ni, T) and (nj, T)
        Depths.
    pw : ndarray of float64
        ``beta ** k`` for k = 0 .. 126.

    Returns
    -------
    ndarray of float32, shape (ni, nj)
    """
    ni, n_trees = ci.shape
    nj = cj.shape[0]
    out = np.empty((ni, nj), dtype=np.float32)
    inv = 1.0 / n_trees
    a4 = ni - ni % 4
    b4 = nj - nj % 4
    for a in range(0, a4, 4):
        for b in range(0, b4, 4):
            s00 = s01 = s02 = s03 = s10 = s11 = s12 = s13 = 0.0
            s20 = s21 = s22 = s23 = s30 = s31 = s32 = s33 = 0.0
            for t in range(n_trees):
                c0, c1, c2, c3 = ci[a, t], ci[a + 1, t], ci[a + 2, t], ci[a + 3, t]
                x0, x1 = np.uint64(di[a, t]), np.uint64(di[a + 1, t])
                x2, x3 = np.uint64(di[a + 2, t]), np.uint64(di[a + 3, t])
                e0, e1, e2, e3 = cj[b, t], cj[b + 1, t], cj[b + 2, t], cj[b + 3, t]
                y0, y1 = np.uint64(dj[b, t]), np.uint64(dj[b + 1, t])
                y2, y3 = np.uint64(dj[b + 2, t]), np.uint64(dj[b + 3, t])
                s00 += pw[_edges(x0, y0, c0, e0)]
                s01 += pw[_edges(x0, y1, c0, e1)]
                s02 += pw[_edges(x0, y2, c0, e2)]
                s03 += pw[_edges(x0, y3, c0, e3)]
                s10 += pw[_edges(x1, y0, c1, e0)]
                s11 += pw[_edges(x1, y1, c1, e1)]
                s12 += pw[_edges(x1, y2, c1, e2)]
                s13 += pw[_edges(x1, y3, c1, e3)]
                s20 += pw[_edges(x2, y0, c2, e0)]
                s21 += pw[_edges(x2, y1, c2, e1)]
                s22 += pw[_edges(x2, y2, c2, e2)]
                s23 += pw[_edges(x2, y3, c2, e3)]
                s30 += pw[_edges(x3, y0, c3, e0)]
                s31 += pw[_edges(x3, y1, c3, e1)]
                s32 += pw[_edges(x3, y2, c3, e2)]
                s33 += pw[_edges(x3, y3, c3, e3)]
            out[a, b], out[a, b + 1] = s00 * inv, s01 * inv
            out[a, b + 2], out[a, b + 3] = s02 * inv, s03 * inv
            out[a + 1, b], out[a + 1, b + 1] = s10 * inv, s11 * inv
            out[a + 1, b + 2], out[a + 1, b + 3] = s12 * inv, s13 * inv
            out[a + 2, b], out[a + 2, b + 1] = s20 * inv, s21 * inv
            out[a + 2, b + 2], out[a + 2, b + 3] = s22 * inv, s23 * inv
            out[a + 3, b], out[a + 3, b + 1] = s30 * inv, s31 * inv
            out[a + 3, b + 2], out[a + 3, b + 3] = s32 * inv, s33 * inv
    for a in range(ni):  # the last rows and columns that do not fill a 4 x 4 block
        for b in range(b4 if a < a4 else 0, nj):
            out[a, b] = _pair(ci, di, cj, dj, a, b, pw) * inv
    return out


@njit(nogil=True, cache=True)
def similarity_tile_words(codes_i, depth_i, codes_j, depth_j, powers, block):  # pragma: no cover
    """Like :func:`similarity_tile` for path codes of any number of words (deep trees).

    Per row ``a`` of block I and tree t, a run of ``block`` columns of block J
    is compared; each column has its own accumulator, so the additions do not
    wait on one another, and the column run's codes stay in cache.  Trees are
    added in order (the result does not depend on the tile size).

    Parameters
    ----------
    codes_i, codes_j : ndarray of uint64, shape (T, W, ni) and (T, W, nj)
        Path codes, trees first.
    depth_i, depth_j : ndarray of int32, shape (T, ni) and (T, nj)
    powers : ndarray of float64
        ``beta ** k`` for k up to the largest possible number of edges.
    block : int
        Columns handled together.

    Returns
    -------
    ndarray of float32, shape (ni, nj)
    """
    n_trees, n_words, ni = codes_i.shape
    nj = codes_j.shape[2]
    out = np.empty((ni, nj), dtype=np.float32)
    acc = np.empty(block, dtype=np.float64)
    inv = 1.0 / n_trees
    for j0 in range(0, nj, block):
        j1 = min(j0 + block, nj)
        for a in range(ni):
            acc[:] = 0.0
            for t in range(n_trees):
                x = np.int64(depth_i[t, a])
                dj = depth_j[t]
                if n_words == 1:
                    # depths are < 64 and cttz(0) = 64: no branch needed
                    ca = codes_i[t, 0, a]
                    cj = codes_j[t, 0]
                    for b in range(j0, j1):
                        y = np.int64(dj[b])
                        low = min(x, y, np.int64(trailing_zeros(ca ^ cj[b])))
                        acc[b - j0] += powers[x + y - 2 * low]
                else:
                    for b in range(j0, j1):
                        y = np.int64(dj[b])
                        low = min(x, y)
                        for w in range(n_words):
                            diff = codes_i[t, w, a] ^ codes_j[t, w, b]
                            if diff != 0:
                                low = min(low, 64 * w + np.int64(trailing_zeros(diff)))
                                break
                        acc[b - j0] += powers[x + y - 2 * low]
            for b in range(j0, j1):
                out[a, b] = acc[b - j0] * inv
    return out


@njit(nogil=True, cache=True)
def phi_product(leaves, depth_nodes, parents, offsets, V, beta):  # pragma: no cover - numba
    """``sum_t Phi_t Phi_t^T V`` for a batch of trees, without forming Phi.

    Uses DESIGN.md section 3: per tree, ``g_v`` = sum over the points below
    node v of ``beta ** (d_a - depth(v)) V[a]`` (bottom-up), then
    ``h_v = beta h_parent + (1 - beta^2) g_v`` with ``h_root = g_root``
    (top-down), and row a receives ``h`` of its leaf.  O(n + nodes) per tree.

    Parameters
    ----------
    leaves : ndarray of int32, shape (T, n)
        Leaf node id (local to its tree) of every row.
    depth_nodes, parents : ndarray of int32, shape (total_nodes,)
        Depth and parent (local id, -1 for a root) of every node, trees concatenated
        in breadth-first order (a parent precedes its children).
    offsets : ndarray of int64, shape (T + 1,)
        First node of each tree.
    V : ndarray of float64, shape (n, k)
    beta : float

    Returns
    -------
    ndarray of float64, shape (n, k)
        Not divided by T.
    """
    n_trees, n = leaves.shape
    k = V.shape[1]
    out = np.zeros((n, k), dtype=np.float64)
    c = 1.0 - beta * beta
    for t in range(n_trees):
        o = offsets[t]
        m = offsets[t + 1] - o
        g = np.zeros((m, k), dtype=np.float64)
        for a in range(n):
            v = leaves[t, a]
            for q in range(k):
                g[v, q] += V[a, q]
        for v in range(m - 1, 0, -1):
            par = parents[o + v]
            for q in range(k):
                g[par, q] += beta * g[v, q]
        for v in range(1, m):
            par = parents[o + v]
            for q in range(k):
                g[v, q] = beta * g[par, q] + c * g[v, q]
        for a in range(n):
            v = leaves[t, a]
            for q in range(k):
                out[a, q] += g[v, q]
    return out


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
    X = np.ascontiguousarray(X, dtype=np.float64)
    n, p = X.shape
    n_trees = len(seeds)
    if standard:
        proj = np.zeros((1, n))
        per_tree = [np.zeros((0, p))] * n_trees
    else:
        per_tree = [tree_directions(s, n_directions, p) for s in seeds]
        proj = np.concatenate(per_tree) @ X.T  # all directions of the batch at once: (B X, n)
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


def similarity_block(
    codes_i: np.ndarray,
    depth_i: np.ndarray,
    codes_j: np.ndarray,
    depth_j: np.ndarray,
    beta: float,
    block: int = 128,
) -> np.ndarray:
    """Beta-similarity between two row blocks (``beta=0``: basic similarity).

    Parameters
    ----------
    codes_i, codes_j : ndarray of uint64, shape (ni, T, Wi) and (nj, T, Wj)
    depth_i, depth_j : ndarray of int, shape (ni, T) and (nj, T)
    beta : float in [0, 1]
    block : int
        Columns per cache block (deep trees only).

    Returns
    -------
    ndarray of float32, shape (ni, nj)
    """
    if codes_i.shape[1] != codes_j.shape[1]:
        raise ValueError(
            f"blocks disagree on the number of trees: {codes_i.shape[1]} vs {codes_j.shape[1]}"
        )
    words = max(codes_i.shape[2], codes_j.shape[2])
    top = max(int(depth_i.max(initial=0)), int(depth_j.max(initial=0)))
    if words == 1:
        powers = beta_powers(float(beta), 2 * 63)
        ci, cj = (np.ascontiguousarray(c[:, :, 0]) for c in (codes_i, codes_j))
        di, dj = (np.ascontiguousarray(d, dtype=np.uint8) for d in (depth_i, depth_j))
        return similarity_tile(ci, di, cj, dj, powers)
    ci, cj = (_trees_first(c, words) for c in (codes_i, codes_j))
    di, dj = (np.ascontiguousarray(d.T, dtype=np.int32) for d in (depth_i, depth_j))
    return similarity_tile_words(ci, di, cj, dj, beta_powers(float(beta), 2 * top), block)


def _trees_first(codes: np.ndarray, words: int) -> np.ndarray:
    """(n, T, w) codes as (T, words, n), zero-padded to ``words`` words."""
    out = np.zeros((codes.shape[1], words, codes.shape[0]), dtype=np.uint64)
    out[:, : codes.shape[2], :] = codes.transpose(1, 2, 0)
    return out


def warm_up() -> None:
    """Compile (or load from cache) every kernel once, before fanning out tasks."""
    X = np.array([[0.0, 1.0], [1.0, 0.0], [0.5, 0.5]])
    for standard in (False, True):
        batch = grow_batch(X, np.array([1], dtype=np.uint64), 2, 1, standard)
        offs = np.array([0, len(batch.thresholds)])
        doffs = np.array([0, len(batch.directions)])
        route_forest(X, batch.nodes, batch.thresholds, offs, batch.directions, doffs)
    similarity_block(batch.codes, batch.depth, batch.codes, batch.depth, 0.5)
    phi_product(
        np.ascontiguousarray(batch.leaves.T),
        batch.nodes[:, 1].copy(),
        batch.nodes[:, 0].copy(),
        offs,
        np.ones((3, 1)),
        0.5,
    )
