"""X-Forest similarity matrices: tile functions for the tile service, and ``S @ V``.

The beta-similarity ``S[a, b] = mean_t beta ** (d_a + d_b - 2 d_lca)`` is
computed per tile from the rows' path codes and depths
(:func:`store_tile` reads them from a run store inside a task;
:func:`arrays_tile` takes them in memory), or applied matrix-free through
its exact factorisation ``S = Phi Phi^T / T`` (:class:`SimilarityProduct`, a
:class:`~distforest.forests.products.ProductSession` over tree batches).
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from distforest.errors import InputError
from distforest.forests.products import (
    WHOLE_FOREST_BYTES,
    ProductSession,
    StoredArray,
    stored_location,
)
from distforest.kernels import betasim
from distforest.kernels.signatures import kernel_input
from distforest.parallel.execution import Runner
from distforest.store.run_store import read_rows

#: Name of each X-Forest similarity in a store.
SIMILARITY_NAMES = {"beta": "beta_similarity", "basic": "basic_similarity"}


class FittedForest(Protocol):
    """What :class:`SimilarityProduct` reads of a fitted X-Forest: its rows' leaves
    (an array, or a stored fit's Zarr array) and its nodes (an array, or a stored fit's
    view with the store's ``path``)."""

    n_samples_: int
    leaves_: Any
    nodes_: Any
    node_offset_: np.ndarray


def store_tile(path: str, beta: float, rows: slice, cols: slice) -> np.ndarray:
    """Tile function of the tile service: one similarity block from the stored codes.

    Runs inside a Dask worker: reads ``path`` and ``depth`` rows of the two
    blocks and loops over all trees.
    """
    codes_i, depth_i = read_rows(path, "path", rows), read_rows(path, "depth", rows)
    if rows == cols:
        codes_j, depth_j = codes_i, depth_i
    else:
        codes_j, depth_j = read_rows(path, "path", cols), read_rows(path, "depth", cols)
    return betasim.similarity_block(codes_i, depth_i, codes_j, depth_j, beta)


def arrays_tile(codes: np.ndarray, depth: np.ndarray, beta: float, rows: slice, cols: slice):
    """Tile function from in-memory codes and depths (small matrices)."""
    return betasim.similarity_block(codes[rows], depth[rows], codes[cols], depth[cols], beta)


def _product_part(
    trees: slice,
    leaves_t: np.ndarray | StoredArray,
    node_depth: np.ndarray | StoredArray,
    parent: np.ndarray | StoredArray,
    offsets: np.ndarray,
    V: np.ndarray,
    beta: float,
) -> np.ndarray:
    a, b = offsets[trees.start], offsets[trees.stop]
    leaves = leaves_t.trees(trees) if isinstance(leaves_t, StoredArray) else leaves_t[trees]
    # a stored fit's nodes: read once per process
    depth = node_depth.read() if isinstance(node_depth, StoredArray) else node_depth
    up = parent.read() if isinstance(parent, StoredArray) else parent
    return betasim.phi_product(
        kernel_input(leaves, np.int32),
        kernel_input(depth[a:b], np.int32),
        kernel_input(up[a:b], np.int32),
        offsets[trees.start : trees.stop + 1] - a,
        V,
        beta,
    )


class SimilarityProduct:
    """Repeated ``S @ V`` for one fitted forest (no n x n anywhere).

    A :class:`~distforest.forests.products.ProductSession` over the forest's
    leaves and node parents: one task per batch of trees, summed in batch
    order, so results are bit-identical on any cluster.

    Parameters
    ----------
    runner : Runner
    forest : XForest
        A fitted forest (:class:`FittedForest`).
    beta : float
        0 gives the basic similarity.
    batch_size : int, optional
        Trees per task.
    """

    def __init__(
        self, runner: Runner, forest: FittedForest, beta: float, batch_size: int | None = None
    ) -> None:
        self.beta = float(beta)
        self.n_trees = forest.leaves_.shape[1]
        self.shape = (forest.n_samples_, forest.n_samples_)
        betasim.warm_up()
        where = stored_location(forest.leaves_)
        leaves: np.ndarray | StoredArray
        if where is not None:  # a stored fit: the workers read its leaves, this process never
            whole = 4 * self.shape[0] * self.n_trees <= WHOLE_FOREST_BYTES
            leaves = StoredArray(*where, whole)
        else:
            leaves = np.ascontiguousarray(forest.leaves_.T)
        nodes: tuple[Any, Any]
        if not isinstance(forest.nodes_, np.ndarray):  # stored: the workers read them there
            path = forest.nodes_.path
            nodes = (StoredArray(path, "forest/depth"), StoredArray(path, "forest/parent"))
        else:
            nodes = (np.ascontiguousarray(forest.nodes_[:, 1]),
                     np.ascontiguousarray(forest.nodes_[:, 0]))  # fmt: skip
        shared = (leaves, *nodes, forest.node_offset_)
        self.session = ProductSession(runner, _product_part, shared, self.n_trees, batch_size)

    def __call__(self, V: Any) -> np.ndarray:
        """``S @ V``; ``V`` of shape (n,) or (n, k)."""
        V = np.asarray(V, dtype=np.float64)
        if V.shape[0] != self.shape[0]:
            raise InputError(f"V has {V.shape[0]} rows but the forest has {self.shape[0]}")
        V2 = np.ascontiguousarray(V[:, None] if V.ndim == 1 else V)
        total = self.session.sum(self.session.share(V2), self.beta, name="xforest-product")
        total /= self.n_trees
        return total[:, 0] if V.ndim == 1 else total

    matvec = __call__
