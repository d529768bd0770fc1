"""A slow SimForest tree written the obvious way: node objects, recursion, explicit loops.

It shares with :mod:`distforest.kernels.simsplit` only the *specification*
(module docstring there): the splitmix64 node keys, the weighted pair draws,
the projection, the score and its tie rules.  Everything is recomputed from
a full matrix with Python loops: every candidate threshold's children are
formed by comparing each member with the threshold and their class weights
counted from scratch.  Convention of both: ``S(k, o) = M[o, k]`` for a
training matrix ``M`` (read by the row of the pair object) and
``S(t, o) = Q[t, o]`` for a test x train matrix ``Q``.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np

from distforest.kernels.rptrees import GOLDEN, MIX_1, MIX_2

MASK = (1 << 64) - 1


def mix(z: int) -> int:
    z &= MASK
    z = ((z ^ (z >> 30)) * MIX_1) & MASK
    z = ((z ^ (z >> 27)) * MIX_2) & MASK
    return z ^ (z >> 31)


def root_key(seed: int) -> int:
    return mix(seed + GOLDEN)


def child_key(key: int, side: int) -> int:
    return mix(key ^ (((side + 1) * GOLDEN) & MASK))


def uniform(key: int, counter: int) -> float:
    return (mix(key + (counter + 1) * GOLDEN) >> 11) * (1.0 / 9007199254740992.0)


@dataclass
class Node:
    depth: int
    counts: list[float]
    left: Node | None = None
    right: Node | None = None
    pair: tuple[int, int] = (-1, -1)
    threshold: float = 0.0
    missing_go: int = -1
    members: list[int] = field(default_factory=list)


def gini_term(counts: list[float]) -> float:
    """``w`` times the Gini impurity ``1 - sum p_c**2`` of class weights ``counts``."""
    w = 0.0
    for c in counts:
        w += c
    if w <= 0.0:
        return 0.0
    sq = 0.0
    for c in counts:
        sq += c * c
    return w - sq / w


def pick(members, weights, y, target: float, skip_class: int) -> int:
    acc = 0.0
    last = -1
    for obj, wt in zip(members, weights, strict=True):
        if y[obj] == skip_class:
            continue
        acc += wt
        last = obj
        if target < acc:
            return obj
    return last


class OracleTree:
    """Grow one tree from a full matrix ``M`` (NaN = missing); see the module docstring."""

    def __init__(
        self, M, y, seed, n_classes, n_pairs=1, kind="similarity", max_depth=None,
        min_samples_leaf=1, missing="stay", bootstrap=True, max_draws=16,
    ):  # fmt: skip
        self.M, self.y, self.C = M, [int(v) for v in y], n_classes
        self.r, self.distance, self.max_depth = n_pairs, kind == "distance", max_depth
        self.msl, self.larger, self.max_draws = min_samples_leaf, missing == "larger", max_draws
        n = len(y)
        if bootstrap:
            draws = np.random.default_rng(seed).integers(0, n, size=n)
            self.inbag = [0] * n
            for d in draws:
                self.inbag[int(d)] += 1
        else:
            self.inbag = [1] * n
        self.stop: dict[int, Node] = {}
        members = [i for i in range(n) if self.inbag[i] > 0]
        passengers = [i for i in range(n) if self.inbag[i] == 0]
        self.root = self.build(members, passengers, root_key(seed), 0)

    def sim(self, k: int, o: int) -> float:
        return float(self.M[o, k])

    def proj(self, k: int, oi: int, oj: int) -> float:
        si, sj = self.sim(k, oi), self.sim(k, oj)
        return si * si - sj * sj if self.distance else sj - si

    def counts(self, objs) -> list[float]:
        out = [0.0] * self.C
        for o in objs:
            out[self.y[o]] += float(self.inbag[o])
        return out

    def draw_pair(self, members, key, p):
        wts = [float(self.inbag[o]) for o in members]
        total = sum(wts)
        for a in range(self.max_draws):
            c = 2 * (p * self.max_draws + a)
            t = min(float(math.floor(uniform(key, c) * total)), total - 1.0)
            oi = pick(members, wts, self.y, t, -1)
            other = sum(wt for o, wt in zip(members, wts, strict=True) if self.y[o] != self.y[oi])
            t2 = min(float(math.floor(uniform(key, c + 1) * other)), other - 1.0)
            oj = pick(members, wts, self.y, t2, self.y[oi])
            if not math.isnan(self.sim(oj, oi)):
                return oi, oj
        return None

    def best_split(self, members, key):
        best = (math.inf, None)
        for p in range(self.r):
            pair = self.draw_pair(members, key, p)
            if pair is None:
                continue
            vals = {o: self.proj(o, *pair) for o in members}
            obs = [o for o in members if not math.isnan(vals[o])]
            miss = [o for o in members if math.isnan(vals[o])]
            distinct = sorted(set(vals[o] for o in obs))
            for lo, hi in itertools.pairwise(distinct):
                thr = (lo + hi) / 2.0
                thr = lo if thr >= hi else thr
                left = [o for o in obs if vals[o] <= thr]
                right = [o for o in obs if vals[o] > thr]
                wl, wr = sum(self.counts(left)), sum(self.counts(right))
                if wl < self.msl or wr < self.msl:
                    continue
                score = gini_term(self.counts(left)) + gini_term(self.counts(right))
                if miss:
                    score = score + gini_term(self.counts(miss))
                if score < best[0]:
                    best = (score, (pair, thr, wl, wr))
        return best[1]

    def goes(self, node: Node, obj_proj: float) -> int:
        if math.isnan(obj_proj):
            return node.missing_go
        return 0 if obj_proj <= node.threshold else 1

    def build(self, members, passengers, key, depth) -> Node:
        counts = self.counts(members)
        node = Node(depth, counts)
        weight = sum(counts)
        splittable = sum(1 for c in counts if c > 0) >= 2 and weight >= 2 * self.msl
        if self.max_depth is not None and depth >= self.max_depth:
            splittable = False
        found = self.best_split(members, key) if splittable else None
        if found is None:
            for o in members + passengers:
                self.stop[o] = node
            return node
        (oi, oj), thr, wl, wr = found
        node.pair, node.threshold = (oi, oj), thr
        if self.larger:
            node.missing_go = 0 if wl >= wr else 1
        sides: tuple[list[int], list[int]] = ([], [])
        psides: tuple[list[int], list[int]] = ([], [])
        for objs, out in ((members, sides), (passengers, psides)):
            for o in objs:
                g = self.goes(node, self.proj(o, oi, oj))
                if g < 0:
                    self.stop[o] = node
                else:
                    out[g].append(o)
        node.left = self.build(sides[0], psides[0], child_key(key, 0), depth + 1)
        node.right = self.build(sides[1], psides[1], child_key(key, 1), depth + 1)
        return node

    def flat(self) -> dict[str, np.ndarray]:
        """The tree breadth first, as the kernel's arrays."""
        nodes, queue = [], [self.root]
        while queue:
            nd = queue.pop(0)
            nodes.append(nd)
            queue += [c for c in (nd.left, nd.right) if c is not None]
        ids = {id(nd): k for k, nd in enumerate(nodes)}
        leaves = np.full(len(self.y), -1, dtype=np.int32)
        for o, nd in self.stop.items():
            leaves[o] = ids[id(nd)]
        return {
            "left": np.array([ids[id(nd.left)] if nd.left else -1 for nd in nodes]),
            "right": np.array([ids[id(nd.right)] if nd.right else -1 for nd in nodes]),
            "pair_i": np.array([nd.pair[0] for nd in nodes]),
            "pair_j": np.array([nd.pair[1] for nd in nodes]),
            "threshold": np.array([nd.threshold for nd in nodes]),
            "missing_go": np.array([nd.missing_go for nd in nodes]),
            "value": np.array([nd.counts for nd in nodes]),
            "depth": np.array([nd.depth for nd in nodes]),
            "inbag": np.array(self.inbag),
            "leaves": leaves,
        }

    def predict(self, Q, missing: str = "stay") -> np.ndarray:
        """Class distributions of test objects with similarities ``Q[t, o]``."""

        def walk(node: Node, t: int) -> np.ndarray:
            dist = np.array(node.counts) / sum(node.counts)
            if node.left is None:
                return dist
            oi, oj = node.pair
            si, sj = float(Q[t, oi]), float(Q[t, oj])
            g = self.goes(node, si * si - sj * sj if self.distance else sj - si)
            if g == 0:
                return walk(node.left, t)
            if g == 1:
                return walk(node.right, t)
            if missing != "both":
                return dist
            nl, nr = sum(node.left.counts), sum(node.right.counts)
            return nl / (nl + nr) * walk(node.left, t) + nr / (nl + nr) * walk(node.right, t)

        return np.array([walk(self.root, t) for t in range(Q.shape[0])])
