"""A slow X-Forest written the obvious way: explicit node objects, recursion, tree walks.

It shares with :mod:`distforest.kernels.rptrees` only the *specification* of
the randomness (the splitmix64 hash chain of node keys and the per-tree X
directions), re-implemented here with Python integers, so that both build
the same trees.  Similarities are computed by walking from each leaf up to
the root and counting edges to the first common node.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from distforest.kernels.rptrees import DIRECTION_SALT, GOLDEN, MIX_1, MIX_2, tree_directions

MASK = (1 << 64) - 1


def mix(z: int) -> int:
    z &= MASK
    z = ((z ^ (z >> 30)) * MIX_1) & MASK
    z = ((z ^ (z >> 27)) * MIX_2) & MASK
    return z ^ (z >> 31)


def uniform(key: int, counter: int) -> float:
    z = mix(key + (counter + 1) * GOLDEN)
    return (z >> 11) * (1.0 / 9007199254740992.0)


def direction(key: int, p: int) -> np.ndarray:
    dkey = mix(key ^ DIRECTION_SALT)
    g = []
    for j in range(p):
        u1, u2 = uniform(dkey, 2 * j), uniform(dkey, 2 * j + 1)
        g.append(math.sqrt(-2.0 * math.log(1.0 - u1)) * math.cos(2.0 * math.pi * u2))
    v = np.array(g)
    norm = math.sqrt(sum(x * x for x in g))
    return v / norm


@dataclass
class Node:
    depth: int
    parent: Node | None
    points: list[int]
    left: Node | None = None
    right: Node | None = None
    threshold: float | None = None
    direction: np.ndarray | None = None
    children: list = field(default_factory=list)


def build_tree(X: np.ndarray, seed: int, n_directions: int, leaf_size: int, standard: bool):
    """Recursively build one tree; returns (root, leaf node of each point)."""
    p = X.shape[1]
    dirs = None if standard else tree_directions(seed, n_directions, p)
    leaf_of: dict[int, Node] = {}

    def grow(node: Node, key: int) -> None:
        pts = node.points
        if len(pts) > leaf_size:
            w = direction(key, p) if standard else dirs[node.depth % n_directions]
            proj = {i: float(X[i] @ w) for i in pts}
            lo, hi = min(proj.values()), max(proj.values())
        if len(pts) <= leaf_size or lo == hi:
            for i in pts:
                leaf_of[i] = node
            return
        for attempt in range(64):
            thr = lo + uniform(key, attempt) * (hi - lo)
            if thr < hi:
                break
        node.threshold, node.direction = thr, w
        node.left = Node(node.depth + 1, node, [i for i in pts if proj[i] <= thr])
        node.right = Node(node.depth + 1, node, [i for i in pts if proj[i] > thr])
        grow(node.left, mix(key ^ (1 * GOLDEN)))
        grow(node.right, mix(key ^ (2 * GOLDEN)))

    root = Node(0, None, list(range(X.shape[0])))
    grow(root, mix(seed + GOLDEN))
    return root, [leaf_of[i] for i in range(X.shape[0])]


def walk(root: Node, x: np.ndarray) -> Node:
    """The leaf a new row reaches."""
    node = root
    while node.left is not None:
        node = node.left if float(x @ node.direction) <= node.threshold else node.right
    return node


def edges(a: Node, b: Node) -> int:
    """Number of edges between two nodes, by walking up to the first common ancestor."""
    up_a = []
    node = a
    while node is not None:
        up_a.append(node)
        node = node.parent
    ids = {id(n): k for k, n in enumerate(up_a)}
    steps_b = 0
    node = b
    while id(node) not in ids:
        node = node.parent
        steps_b += 1
    return ids[id(node)] + steps_b


def similarity(leaves_a: list[list[Node]], leaves_b: list[list[Node]], beta: float) -> np.ndarray:
    """Mean over trees of beta ** edges; ``leaves_*[t][i]`` is the leaf of point i in tree t."""
    n_trees = len(leaves_a)
    out = np.zeros((len(leaves_a[0]), len(leaves_b[0])))
    for t in range(n_trees):
        for i, la in enumerate(leaves_a[t]):
            for j, lb in enumerate(leaves_b[t]):
                out[i, j] += beta ** edges(la, lb)
    return out / n_trees


def dense_phi(leaves: list[Node], beta: float) -> np.ndarray:
    """Phi of docs/design.md section 3 for one tree, one column per node."""
    nodes: dict[int, int] = {}
    rows = []
    for leaf in leaves:
        entries = {}
        node = leaf
        while node is not None:
            col = nodes.setdefault(id(node), len(nodes))
            k = node.depth
            entries[col] = (
                beta**leaf.depth if k == 0 else (math.sqrt(1 - beta**2) * beta ** (leaf.depth - k))
            )
            node = node.parent
        rows.append(entries)
    Phi = np.zeros((len(leaves), len(nodes)))
    for i, entries in enumerate(rows):
        for col, value in entries.items():
            Phi[i, col] = value
    return Phi
