"""A slow, obviously right SMERF tree in plain numpy: the oracle of distforest.kernels.smerf.

Every cut's objective is computed from scratch over the children's blocks of D
(O(m^2) per cut, O(m^3) per candidate), missing pairs dropped with a mask.
It draws its random numbers in the order the kernel documents, so on data
without ties it must grow the kernel's tree node for node.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np


def better(value: float, best: float) -> bool:
    """The kernel's tie rule: smaller by more than a relative 1e-12."""
    return value < best - 1e-12 * abs(best) if best != np.inf else value < best


def child_mean(D: np.ndarray, rows: np.ndarray) -> float | None:
    """Mean of the observed D over the pairs of ``rows`` (None if none is observed)."""
    block = D[np.ix_(rows, rows)]
    seen = ~np.isnan(block)
    return float(block[seen].mean()) if seen.any() else None


def split_objective(D: np.ndarray, rows: np.ndarray, go_left: np.ndarray) -> float | None:
    """sum over children of (n_c / m) * (mean observed D in c); None if a child has none."""
    m = len(rows)
    total = 0.0
    for part in (rows[go_left], rows[~go_left]):
        mean = child_mean(D, part)
        if mean is None:
            return None
        total += len(part) / m * mean
    return total


def oracle_sweep(
    x: np.ndarray, D: np.ndarray, rows: np.ndarray, min_leaf: int
) -> tuple[float, float]:
    """Best (objective, threshold) over the midpoints of consecutive distinct values."""
    best, thr = np.inf, np.nan
    values = np.unique(x)
    for lo, hi in itertools.pairwise(values):
        t = 0.5 * (lo + hi)
        go_left = x <= t
        if min(go_left.sum(), (~go_left).sum()) < min_leaf:
            continue
        value = split_objective(D, rows, go_left)
        if value is not None and better(value, best):
            best, thr = value, t
    return best, thr


def oracle_project(X: np.ndarray, rows: np.ndarray, feats: np.ndarray, weights: np.ndarray):
    v = np.zeros(len(rows))
    for f, w in zip(feats, weights, strict=True):
        v = v + X[rows, f] * w
    return v


def oracle_candidates(rng: np.random.Generator, d: int, k: int, oblique: bool):
    if not oblique:
        feats = list(range(d)) if k == d else list(rng.choice(d, k, replace=False))
        return [(np.array([f]), np.array([1.0])) for f in feats]
    out = []
    for _ in range(k):
        c = min(d, 1 + int(rng.poisson(0.5)))
        feats = rng.choice(d, c, replace=False)
        signs = np.where(rng.random(c) < 0.5, -1.0, 1.0)
        out.append((feats, signs))
    return out


@dataclass
class OracleNode:
    rows: np.ndarray
    mean: float
    feats: np.ndarray | None = None
    weights: np.ndarray | None = None
    threshold: float = np.nan
    children: list[OracleNode] = field(default_factory=list)


def oracle_tree(
    X: np.ndarray,
    D: np.ndarray,
    seed: int,
    *,
    k: int,
    min_leaf: int = 1,
    max_depth: int | None = None,
    bootstrap: bool = True,
    oblique: bool = False,
) -> tuple[OracleNode, np.ndarray]:
    """The root of the tree (recursive nodes) and the per-feature importances."""
    n, d = X.shape
    rng = np.random.default_rng(seed)
    rows0 = np.sort(rng.integers(0, n, n)) if bootstrap else np.arange(n)
    importances = np.zeros(d)

    def grow(rows: np.ndarray, depth: int) -> OracleNode:
        block = D[np.ix_(rows, rows)]
        seen = block[~np.isnan(block)]
        mean = float(seen.mean()) if seen.size else np.nan
        node = OracleNode(rows, mean)
        splittable = seen.size > 0 and seen.max() > seen.min() and len(rows) >= 2 * min_leaf
        if max_depth is not None and depth >= max_depth:
            splittable = False
        if not splittable:
            return node
        best = (np.inf, np.nan, None)
        for feats, weights in oracle_candidates(rng, d, k, oblique):
            x = oracle_project(X, rows, feats, weights)
            value, thr = oracle_sweep(x, D, rows, min_leaf)
            if better(value, best[0]):
                best = (value, thr, (feats, weights, x))
        if best[2] is None:
            return node
        feats, weights, x = best[2]
        node.feats, node.weights, node.threshold = feats, weights, best[1]
        importances[feats] += len(rows) / len(rows0) * (mean - best[0]) / len(feats)
        go_left = x <= best[1]
        node.children = [grow(rows[go_left], depth + 1), grow(rows[~go_left], depth + 1)]
        return node

    return grow(rows0, 0), importances


def oracle_leaf_mean(D: np.ndarray, a: np.ndarray, b: np.ndarray) -> float:
    """Mean of the observed D over members a x members b (NaN if none)."""
    block = D[np.ix_(a, b)]
    seen = block[~np.isnan(block)]
    return float(seen.mean()) if seen.size else np.nan
