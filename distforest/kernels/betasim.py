"""Numba kernels of X-Forest similarities, from path codes and depths.

Row a's leaf in tree t is described by its depth ``d_a`` and path code (see
:mod:`distforest.kernels.rptrees`); the number of edges between two leaves is
``d_a + d_b - 2 d_lca`` with ``d_lca`` the common prefix of the codes, and the
beta-similarity averages ``beta ** edges`` over trees (``beta = 0``: the basic
similarity, the share of trees with a common leaf).  :func:`phi_product`
applies the same matrix without forming it, through the exact factorisation
``S = Phi Phi^T / T`` of docs/design.md section 3.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numba.cpython.unsafe.numbers import trailing_zeros

from distforest.kernels.signatures import kernel_input


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
    low = min(x, y, trailing_zeros(c ^ e))  # type: ignore[call-arg]  # cttz(0) = 64
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
                        low = min(x, y, np.int64(trailing_zeros(ca ^ cj[b])))  # type: ignore[call-arg]
                        acc[b - j0] += powers[x + y - 2 * low]
                else:
                    for b in range(j0, j1):
                        y = np.int64(dj[b])
                        low = min(x, y)
                        for w in range(n_words):
                            diff = codes_i[t, w, a] ^ codes_j[t, w, b]
                            if diff != 0:
                                low = min(low, 64 * w + np.int64(trailing_zeros(diff)))  # type: ignore[call-arg]
                                break
                        acc[b - j0] += powers[x + y - 2 * low]
            for b in range(j0, j1):
                out[a, b] = acc[b - j0] * inv
    return out


@njit(nogil=True, cache=True)
def phi_product(leaves, depth_nodes, parents, offsets, V, beta):  # pragma: no cover - numba
    """``sum_t Phi_t Phi_t^T V`` for a batch of trees, without forming Phi.

    Uses docs/design.md section 3: per tree, ``g_v`` = sum over the points below
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
    wi, wj = (_trees_first(c, words) for c in (codes_i, codes_j))
    ti, tj = (np.ascontiguousarray(d.T, dtype=np.int32) for d in (depth_i, depth_j))
    return similarity_tile_words(wi, ti, wj, tj, beta_powers(float(beta), 2 * top), block)


def _trees_first(codes: np.ndarray, words: int) -> np.ndarray:
    """(n, T, w) codes as (T, words, n), zero-padded to ``words`` words."""
    out = np.zeros((codes.shape[1], words, codes.shape[0]), dtype=np.uint64)
    out[:, : codes.shape[2], :] = codes.transpose(1, 2, 0)
    return out


def warm_up() -> None:
    """Compile (or load from cache) every kernel once, before fanning out tasks."""
    codes = np.array([[[0]], [[1]], [[2]]], dtype=np.uint64)
    depth = np.array([[1], [2], [2]], dtype=np.int32)
    similarity_block(codes, depth, codes, depth, 0.5)
    similarity_block(np.concatenate([codes, codes], axis=2), depth, codes, depth, 0.5)
    leaves = kernel_input(np.zeros((1, 3)), np.int32)  # read-only, as the callers pass them
    phi_product(
        leaves,
        kernel_input(np.zeros(1), np.int32),
        kernel_input(np.full(1, -1), np.int32),
        np.array([0, 1]),
        np.ones((3, 1)),
        0.5,
    )
