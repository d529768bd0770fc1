"""Each training row's sum of squared within-class proximities (for outlier scores).

``S_i = sum_{j of i's class} P_ij^2`` with ``P_ij = c_ij / T`` (Breiman's
proximity, ``c_ij`` the trees in which i and j share a leaf) has two exact
methods, both summing the integers ``c_ij^2`` and scaling by ``1 / T^2`` once,
so they give the same floats:

- ``"leaf-mates"``: per row, walk its leaf-mates in every tree
  (:func:`distforest.kernels.leafsums.squared_product`); the work is the
  number of co-leaf events, ``sum_t sum_leaves size^2``, about ``T n^2 / L``
  for ``L`` leaves a tree: cheap while leaves are small, quadratic in ``n``
  when trees grown on a fixed sample are applied to more and more rows.  Each
  worker holds all leaves and an inverted index of them (13 bytes a row and tree).
- ``"tree-pairs"``: per pair of trees, group the rows by (leaf, class, leaf)
  (:func:`distforest.kernels.pairsums.pair_square_sums`); the work is
  ``T (T + 1) / 2 * n`` whatever the leaf sizes, one task per pair of tree
  blocks reading only the leaves of its two blocks.

:func:`choose_method` decides from the forest alone (rows, trees, nodes per
tree), never from the cluster, so a forest always takes the same path.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from distforest.kernels import pairsums
from distforest.parallel.execution import Runner
from distforest.parallel.tasks import plan_batches
from distforest.store.run_store import task_array, write_block
from distforest.store.scratch import drop_scratch, row_chunks, scratch_array

#: The two methods of :func:`square_sums`.
METHODS = ("leaf-mates", "tree-pairs")

#: Core-seconds of one co-leaf event of the leaf-mate walk and of one row of one pair of
#: trees of the tree-pair sums, measured on this 2-core machine under load (2 threads,
#: 100 trees): the walk 2.0e-8 s wall an event at 20,000 rows and 3.6e-8 at 200,000 (a
#: counter of n rows touched at random: slower as n grows), the pairs 8.7e-9 and 7.6e-9
#: s wall a pair row, 1.5-1.9e-8 s for one task alone, and 2.4e-8 s on 10,000,000 rows of
#: random leaves (the worst case for its gathers), rounded up (benchmarks/results/
#: out_of_core.md, "outlier scores").
SECONDS_PER_COLEAF = 5e-8
SECONDS_PER_PAIR_ROW = 2e-8
#: Co-leaf events over the ``n^2 / L`` of equal leaves: leaf sizes are uneven (measured
#: 4.2 to 6.6 on trees grown on all rows and on 5-20 % samples).
COLEAF_SKEW = 5.0
#: Distinct in-bag rows a leaf of a fully grown tree holds (about 4.2 measured at
#: 200,000 rows, classification): the leaves a tree has, for plans made before a fit.
ROWS_PER_LEAF = 4.0

#: Bytes of leaves a tree-pair task reads (its two blocks of trees): sets the block size.
BLOCK_PAIR_BYTES = 1_000_000_000

#: Where the leaves of a stored forest are copied in blocks of trees while the sums run.
BY_TREE_ARRAY = "scratch/leaves_by_tree"
#: Each tree-pair task's integer sums (one row per task), when the sums stay in the store.
PARTS_ARRAY = "scratch/pair_sums"
#: The sums of a stored forest, float64 per row, written by tasks (:func:`stored_square_sums`).
SUMS_ARRAY = "scratch/square_sums"


def coleaf_events(n: int, node_counts: np.ndarray) -> float:
    """Co-leaf events of the leaf-mate walk (an estimate from the forest's nodes).

    A tree of ``m`` nodes has ``(m + 1) / 2`` leaves; ``n`` rows in ``L``
    leaves make ``n^2 / L`` (row, leaf-mate) events when the leaves are
    equal, about :data:`COLEAF_SKEW` times as many as they are.
    """
    leaves = (np.asarray(node_counts, dtype=np.float64) + 1.0) / 2.0
    return COLEAF_SKEW * float(np.sum(float(n) * float(n) / np.maximum(leaves, 1.0)))


def pair_rows(n: int, trees: int) -> float:
    """Rows times pairs of trees ``t <= s`` of the tree-pair sums."""
    return float(n) * trees * (trees + 1) / 2


def choose_method(n: int, node_counts: np.ndarray) -> str:
    """The cheaper method for a forest of ``len(node_counts)`` trees applied to ``n`` rows.

    Deterministic: the forest's sizes only (never the cluster nor where the leaves are).
    """
    walk = SECONDS_PER_COLEAF * coleaf_events(n, node_counts)
    pairs = SECONDS_PER_PAIR_ROW * pair_rows(n, len(node_counts))
    return "tree-pairs" if pairs < walk else "leaf-mates"


def block_trees(n: int, trees: int) -> int:
    """Trees per block of the tree-pair tasks: two blocks within :data:`BLOCK_PAIR_BYTES`,
    and at least four blocks (ten tasks) when there are trees enough."""
    by_memory = max(1, BLOCK_PAIR_BYTES // (2 * 4 * max(n, 1)))
    return int(max(1, min(by_memory, math.ceil(trees / 4))))


def plan(n: int, trees: int, rows_per_tree: int, min_samples_leaf: int = 1,
         threads_per_worker: int = 1) -> dict[str, Any]:  # fmt: skip
    """Method, core-seconds and a worker's peak bytes of the sums, before the forest exists.

    The trees' leaves are guessed from the rows each grows on
    (:data:`ROWS_PER_LEAF` distinct in-bag rows a leaf); the run decides from
    the fitted forest's nodes (:func:`choose_method`).
    """
    leaves = max(1.0, 0.632 * rows_per_tree / (ROWS_PER_LEAF * max(1, min_samples_leaf)))
    nodes = np.full(trees, 2 * leaves - 1)
    method = choose_method(n, nodes)
    if method == "leaf-mates":  # all leaves, in-bag counts and the leaf index in each worker
        seconds = SECONDS_PER_COLEAF * coleaf_events(n, nodes)
        peak = 13 * n * trees + 16 * n * threads_per_worker
    else:  # per task: its two blocks of trees, the kernel's order and counters, the result
        seconds = SECONDS_PER_PAIR_ROW * pair_rows(n, trees)
        block = block_trees(n, trees)
        peak = threads_per_worker * (2 * 4 * block * n + 40 * n)
    return {"method": method, "cpu_seconds": seconds, "worker_bytes": int(peak)}


@dataclass(frozen=True)
class TreeBlocks:
    """Stored leaves a task reads by blocks of trees, ``(T_b, n)``.

    ``by_tree``: stored trees first in chunks of whole blocks (the copy); else
    the forest's own ``(n, T)`` leaves, read column by column (every chunk read
    by every task: the fallback when the store cannot be written).
    """

    path: str
    name: str
    by_tree: bool = True

    def read(self, trees: slice) -> np.ndarray:
        arr = task_array(self.path, self.name, "r")
        if self.by_tree:
            return np.asarray(arr[trees])
        return np.ascontiguousarray(np.asarray(arr[:, trees]).T)


@dataclass(frozen=True)
class StoredCodes:
    """Class codes of the rows that tasks read from a store (``name`` None: one class)."""

    path: str
    name: str | None
    n: int

    def read(self, rows: slice = slice(None)) -> np.ndarray:
        """The codes of ``rows`` (int32)."""
        if self.name is None:
            return np.zeros(len(range(*rows.indices(self.n))), dtype=np.int32)
        return np.asarray(task_array(self.path, self.name, "r")[rows], dtype=np.int32)


def _pair_task(
    a: slice,
    b: slice,
    leaves_t: np.ndarray | TreeBlocks,
    codes: np.ndarray | StoredCodes,
    row: int | None = None,
) -> np.ndarray | None:
    """One pair of tree blocks' part of the sums (int64, one per row); with ``row``, written
    as that row of :data:`PARTS_ARRAY` instead of returned."""
    if isinstance(leaves_t, TreeBlocks):
        first = leaves_t.read(a)
        second = first if a == b else leaves_t.read(b)
    else:
        first, second = leaves_t[a], leaves_t[b]
    if isinstance(codes, StoredCodes):
        codes = codes.read()
    part = pairsums.pair_square_sums(first, second, codes, a == b)
    if row is None:
        return part
    assert isinstance(leaves_t, TreeBlocks)
    write_block(leaves_t.path, PARTS_ARRAY, (slice(row, row + 1), slice(None)), part[None])
    return None


def _pair_items(n_trees: int, block: int, leaves_t: Any, codes: Any) -> list[tuple[Any, ...]]:
    blocks = plan_batches(n_trees, block)
    return [(a, b, leaves_t, codes) for k, a in enumerate(blocks) for b in blocks[k:]]


def tree_pair_sums(
    runner: Runner, leaves_t: Any, codes: np.ndarray, n_trees: int, block: int
) -> np.ndarray:
    """``sum_{j of i's class} c_ij^2`` for every row, as int64, one task per pair of blocks.

    ``leaves_t``: a handle of the ``(T, n)`` leaves shared with the workers, or
    :class:`TreeBlocks`.  The parts are integers: added in any order, the result
    is the same whatever the blocks.
    """
    pairsums.warm_up()
    codes_handle = runner.share(np.ascontiguousarray(codes, dtype=np.int32))
    items = _pair_items(n_trees, block, leaves_t, codes_handle)
    total = np.zeros(codes.shape[0], dtype=np.int64)
    for _, part in runner.run(_pair_task, items, name="tree-pair-sums"):
        total += part
    return total


def _reduce_task(path: str, rows: slice, n_parts: int, n_trees: int) -> None:
    """Rows ``rows`` of :data:`SUMS_ARRAY`: the tasks' integer parts added, scaled once."""
    counts = np.asarray(task_array(path, PARTS_ARRAY, "r")[:, rows]).sum(axis=0)
    out = counts.astype(np.float64)
    out *= 1.0 / (n_trees * n_trees)  # as square_sums: the same floats
    write_block(path, SUMS_ARRAY, (rows,), out)


def stored_square_sums(forest: Any, codes: StoredCodes, *, block: int | None = None) -> None:
    """:func:`square_sums` of a forest fitted from a store, written to its
    :data:`SUMS_ARRAY` by tasks (the driver holds no vector of n).

    The tree-pair tasks write their integer parts to :data:`PARTS_ARRAY`, and
    tasks over row chunks add them; with the leaf-mate walk (small forests,
    chosen by :func:`choose_method`) the sums are computed as
    :func:`square_sums` does and written from here.  The same floats either way.

    Raises
    ------
    PermissionError
        The store cannot be written (the caller computes in memory instead).
    """
    from distforest.forests.products import product_session

    n, n_trees = forest.leaves_.shape
    path = codes.path
    scratch_array(path, SUMS_ARRAY, (n,), "float64")
    if choose_method(n, _node_counts(forest)) == "leaf-mates":
        sums = square_sums(forest, codes.read(), method="leaf-mates")
        for rows in row_chunks(n):
            write_block(path, SUMS_ARRAY, (rows,), sums[rows])
        return
    block = block or block_trees(n, n_trees)
    with product_session(forest) as products:
        pairsums.warm_up()
        source = _copy_by_tree(forest.leaves_, path, block)
        try:
            items = _pair_items(n_trees, block, source, codes)
            scratch_array(path, PARTS_ARRAY, (len(items), n), "int64", rows_axis=1)
            work = [(*item, row) for row, item in enumerate(items)]
            for _ in products.runner.run(_pair_task, work, name="tree-pair-sums"):
                pass
            reduce = [(path, rows, len(items), n_trees) for rows in row_chunks(n)]
            for _ in products.runner.run(_reduce_task, reduce, name="tree-pair-totals"):
                pass
        finally:
            drop_scratch(path, BY_TREE_ARRAY, PARTS_ARRAY)


def _copy_by_tree(leaves: Any, path: str, block: int) -> TreeBlocks:
    """The stored leaves ``(n, T)`` copied trees first in chunks of ``block`` trees (dask)."""
    import dask.array as da

    from distforest import location

    n, _ = leaves.shape
    by_tree = da.from_zarr(leaves).T.rechunk((block, n))
    by_tree.to_zarr(location.zarr_store(path), component=BY_TREE_ARRAY, overwrite=True)
    return TreeBlocks(path, BY_TREE_ARRAY)


def _node_counts(forest: Any) -> np.ndarray:
    """Nodes per tree: the forest's, or as many as its in-memory leaves need (SimForest)."""
    counts = getattr(forest, "node_counts_", None)
    if counts is not None:
        return np.asarray(counts)
    leaves = np.asarray(forest.leaves_)
    return np.array([2 * np.unique(leaves[:, t]).size - 1 for t in range(leaves.shape[1])])


def square_sums(
    forest: Any, codes: np.ndarray, *, method: str = "auto", block: int | None = None
) -> np.ndarray:
    """``sum_{j of i's class} P_ij^2`` for every training row of a fitted forest.

    Parameters
    ----------
    forest : ProximityForest
        Fitted.
    codes : ndarray of int, shape (n_samples,)
        Class code of every row, ``0 .. k - 1`` (all 0: one class).
    method : {"auto", "leaf-mates", "tree-pairs"}
        ``"auto"``: :func:`choose_method`.  Both give the same floats.
    block : int, optional
        Trees per block of the tree-pair tasks (default :func:`block_trees`);
        changes no result.

    Returns
    -------
    ndarray of float64, shape (n_samples,)
    """
    from distforest.errors import ParameterError
    from distforest.forests.products import product_session

    n, n_trees = forest.leaves_.shape
    if method == "auto":
        method = choose_method(n, _node_counts(forest))
    if method not in METHODS:
        raise ParameterError(f"method must be 'auto' or one of {METHODS}; got {method!r}")
    codes = np.asarray(codes, dtype=np.int64)
    with product_session(forest) as products:
        if method == "leaf-mates":
            onehot = np.zeros((n, int(codes.max()) + 1))
            onehot[np.arange(n), codes] = 1.0
            return products.squared_product(onehot)[np.arange(n), codes]
        block = block or block_trees(n, n_trees)
        where = products.stored_leaves
        if where is None:
            counts = tree_pair_sums(products.runner, products.leaves_t, codes, n_trees, block)
        else:
            try:
                source = _copy_by_tree(forest.leaves_, where[0], block)
            except PermissionError:  # a store this user may only read (a shared model)
                source = TreeBlocks(*where, by_tree=False)
            try:
                counts = tree_pair_sums(products.runner, source, codes, n_trees, block)
            finally:
                if source.by_tree:
                    drop_scratch(where[0], BY_TREE_ARRAY)
    out = counts.astype(np.float64)
    out *= 1.0 / (n_trees * n_trees)  # in place: one n-vector less on the driver
    return out
