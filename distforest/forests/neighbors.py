"""Top-k neighbours without forming the matrix.

:func:`top_k_neighbors` finds the k nearest rows of every query row.  A k-d /
ball tree (scikit-learn) built once per worker answers blocks of queries for
Minkowski distances on low-dimensional data (blocks cut along a Morton
curve, so each task's queries are near each other); otherwise each task
streams tiles of candidates through a running merge
(:func:`distforest.kernels.metrics.merge_top_k`): fused numba kernels for
Minkowski distances, BLAS products for cosine and for Euclidean on many
features (exact values re-computed for the pairs that can win), dense tiles
for the other measures.  Memory is O(n k) in the driver and O(tile) in a
task.  Results do not depend on the number of workers, the batch or tile sizes.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from distforest import location
from distforest.errors import ParameterError
from distforest.forests import constraints as C
from distforest.forests.measures import Measure
from distforest.forests.pairwise import _describe, prepare
from distforest.kernels import metrics as metric_kernels
from distforest.kernels.signatures import kernel_input
from distforest.parallel import placement, tasks
from distforest.parallel.execution import Progress, for_call
from distforest.parallel.placement import cells_of
from distforest.store.inputs import StoredRows
from distforest.store.run_store import RunStore, check_can_create, complete_output

logger = logging.getLogger("distforest")

#: ``auto`` uses a k-d tree for Minkowski distances up to this many features.
KD_TREE_MAX_FEATURES = 15
#: The brute search uses BLAS products for Euclidean distances from this many features.
GRAM_MIN_FEATURES = 13
#: Query rows per matrix product of the brute search (a 64 x tile block stays in cache).
GRAM_ROWS = 64
#: Rows per chunk of a neighbours store.
NEIGHBOR_ROWS = 65536
#: Safety factor on the rounding bound of the product form (see :func:`_gram_search`).
GRAM_SLACK = 8.0


# -- top-k neighbours -----------------------------------------------------------


@dataclass(frozen=True)
class Neighbors:
    """The k nearest reference rows of each query row, nearest first.

    Attributes
    ----------
    distances : ndarray of float64, shape (n_queries, k)
        Distances (``1 - s`` for a similarity measure).
    indices : ndarray of int64, shape (n_queries, k)
        Reference row numbers; ``-1`` where fewer than k candidates exist.
    """

    distances: np.ndarray
    indices: np.ndarray


@dataclass(frozen=True)
class SearchSpec:
    """What one neighbour task needs besides the data (small, sent with every task)."""

    k: int
    algorithm: str
    measure: Measure | None
    exclude_self: bool
    tile_size: int
    token: str
    similarity: Any = None


#: Trees built in this process, by search token (at most a few kept).
_TREES: dict[str, Any] = {}
_MAX_TREES = 2


def _tree(spec: SearchSpec, reference: np.ndarray) -> Any:
    tree = _TREES.get(spec.token)
    if tree is None:
        from sklearn.neighbors import BallTree, KDTree

        cls = KDTree if spec.algorithm == "kd_tree" else BallTree
        assert spec.measure is not None and spec.measure.minkowski_p is not None
        p = spec.measure.minkowski_p
        if p == 2.0:
            kw: dict[str, Any] = {"metric": "euclidean"}
        elif p == 1.0:
            kw = {"metric": "manhattan"}
        elif math.isinf(p):
            kw = {"metric": "chebyshev"}
        else:
            kw = {"metric": "minkowski", "p": p}
        tree = cls(reference, leaf_size=40, **kw)
        while len(_TREES) >= _MAX_TREES:
            _TREES.pop(next(iter(_TREES)))
        _TREES[spec.token] = tree
    return tree


def _tree_block(spec: SearchSpec, reference: np.ndarray, Q: np.ndarray, ids: np.ndarray):
    """k nearest by the worker's tree for query rows ``Q`` (global row numbers ``ids``)."""
    k = spec.k
    extra = int(spec.exclude_self)
    dist, idx = _tree(spec, reference).query(Q, k=min(k + extra, reference.shape[0]))
    if extra:
        is_self = idx == ids[:, None]
        drop = np.where(is_self.any(axis=1), is_self.argmax(axis=1), idx.shape[1] - 1)
        keep = np.ones(idx.shape, dtype=bool)
        keep[np.arange(idx.shape[0]), drop] = False
        idx = idx[keep].reshape(idx.shape[0], -1)
        dist = dist[keep].reshape(idx.shape[0], -1)
    order = np.lexsort((idx, dist), axis=-1)
    return np.take_along_axis(dist, order, -1), np.take_along_axis(idx, order, -1).astype(np.int64)


def uses_gram(measure: Measure | None, n_features: int) -> bool:
    """Whether the brute search ranks by matrix products (BLAS) rather than pair by pair.

    Cosine always; Euclidean on more than :data:`GRAM_MIN_FEATURES` - 1
    features (on fewer, the fused numba kernel is faster than a product
    whose inner dimension is tiny).
    """
    if measure is None:
        return False
    if measure.name == "cosine":
        return True
    return measure.minkowski_p == 2.0 and n_features >= GRAM_MIN_FEATURES


def _gram_sides(X: np.ndarray, cosine: bool, center: np.ndarray | None):
    """Rows as the product sees them (unit length, or centred) and their squared norms."""
    if cosine:
        norms = np.sqrt(np.einsum("ij,ij->i", X, X))
        A = np.divide(X, norms[:, None], out=np.zeros_like(X), where=norms[:, None] > 0)
    else:
        A = X - center
    return A, np.einsum("ij,ij->i", A, A)


def _gram_search(spec: SearchSpec, reference: np.ndarray, Q: np.ndarray, start: int,
                 best_d: np.ndarray, best_i: np.ndarray) -> None:  # fmt: skip
    """Top-k by Euclidean or cosine distance from BLAS products, exact values for the winners.

    Inside each tile of ``tile_size`` candidates, blocks of :data:`GRAM_ROWS`
    query rows are multiplied with the tile (``||a||^2 + ||b||^2 - 2 a.b`` on
    rows centred on the reference mean, or ``1 - a.b`` on unit rows) and
    scanned by :func:`distforest.kernels.metrics.gram_top_k`, which re-computes
    exactly every pair that could enter a row's list.
    """
    assert spec.measure is not None
    cosine = spec.measure.name == "cosine"
    center = None if cosine else reference.mean(axis=0)
    scale = 0.5 if cosine else 1.0
    QA, q_sq = _gram_sides(Q, cosine, center)
    # rounding bound of the product form (with a wide margin): pairs within it get exact values
    width = GRAM_SLACK * (Q.shape[1] + 4) * np.finfo(np.float64).eps
    blocks = tasks.plan_batches(Q.shape[0], GRAM_ROWS)
    for cols in tasks.plan_batches(reference.shape[0], spec.tile_size):
        R = reference[cols]
        RA, r_sq = _gram_sides(R, cosine, center)
        slack = width * (q_sq + r_sq.max())
        for rows in blocks:
            metric_kernels.gram_top_k(
                QA[rows] @ RA.T, q_sq[rows], r_sq, slack[rows], scale,
                kernel_input(Q[rows], Q.dtype), kernel_input(R, R.dtype), cosine,
                cols.start, start + rows.start, spec.exclude_self, best_d[rows], best_i[rows],
            )  # fmt: skip


def _brute_block(spec: SearchSpec, reference: np.ndarray, Q: np.ndarray, start: int):
    best_d, best_i = metric_kernels.empty_top_k(Q.shape[0], spec.k)
    if spec.similarity is not None:
        sim = spec.similarity
        if hasattr(sim, "cross_distance"):
            D = np.asarray(sim.cross_distance(Q), dtype=np.float64)
        else:
            D = 1.0 - np.asarray(sim.cross_similarity(Q), dtype=np.float64)
        metric_kernels.merge_top_k(kernel_input(D, D.dtype), 0, start, spec.exclude_self,
                                   best_d, best_i)  # fmt: skip
    elif spec.measure is None:
        raise ValueError("a search needs a measure or a similarity")
    elif uses_gram(spec.measure, Q.shape[1]):
        _gram_search(spec, reference, Q, start, best_d, best_i)
        if spec.measure.name != "cosine":
            best_d = np.sqrt(best_d)
    elif spec.measure.minkowski_p is not None:
        p = float(spec.measure.minkowski_p)
        for cols in tasks.plan_batches(reference.shape[0], spec.tile_size):
            metric_kernels.minkowski_top_k(kernel_input(Q, Q.dtype),
                                           kernel_input(reference[cols], reference.dtype), p,
                                           cols.start, start, spec.exclude_self, best_d,
                                           best_i)  # fmt: skip
        best_d = metric_kernels.minkowski_finish(best_d, p)
    else:
        for cols in tasks.plan_batches(reference.shape[0], spec.tile_size):
            D = spec.measure.distances(Q, reference[cols])
            metric_kernels.merge_top_k(kernel_input(D, D.dtype), cols.start, start,
                                       spec.exclude_self, best_d, best_i)  # fmt: skip
    return metric_kernels.finish_top_k(best_d, best_i)


def neighbors_task(
    spec: SearchSpec, reference: np.ndarray, queries: np.ndarray, rows: slice | np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """k nearest reference rows of ``queries[rows]``: (distances, indices), nearest first.

    ``rows`` is a slice (brute tiles) or an array of row numbers (tree
    searches take their queries in a space-filling-curve order).
    """
    if isinstance(reference, StoredRows):  # rows in a store: read once per worker
        reference = reference.rows()
    Q = np.ascontiguousarray(queries[rows])
    if spec.algorithm in ("kd_tree", "ball_tree"):
        ids = np.arange(rows.start, rows.stop) if isinstance(rows, slice) else rows
        return _tree_block(spec, reference, Q, ids)
    assert isinstance(rows, slice)  # brute tiles take row ranges
    return _brute_block(spec, reference, Q, rows.start)


def resolve_algorithm(algorithm: str, measure: Measure | None, n_features: int) -> str:
    """``auto``: a k-d tree for Minkowski distances on at most 15 features, else brute tiles."""
    C.check_choice("algorithm", algorithm, C.ALGORITHMS)
    tree_ok = measure is not None and measure.minkowski_p is not None
    if algorithm == "auto":
        return "kd_tree" if tree_ok and n_features <= KD_TREE_MAX_FEATURES else "brute"
    if algorithm != "brute" and not tree_ok:
        name = "a forest similarity" if measure is None else repr(measure.name)
        raise ParameterError(
            f"algorithm={algorithm!r} needs a Minkowski distance (euclidean, manhattan, "
            f"chebyshev, minkowski:P), not {name}; use algorithm='brute' or 'auto'"
        )
    return algorithm


def query_batch_size(nq: int, n_ref: int, algorithm: str, forest: bool, threads: int) -> int:
    """Query rows per task of a search: about 4 tasks per thread, capped so that a task's
    tiles (brute; a forest similarity's rows) stay small."""
    if algorithm != "brute":
        cap = 16384
    else:
        cap = 1024 if not forest else max(16, (1 << 23) // n_ref)
    return min(cap, tasks.default_batch_size(nq, threads))


def check_k(k: int, n_ref: int, exclude_self: bool) -> int:
    """``k`` as an int, refused (:class:`ParameterError`, exit 2) above the candidate rows."""
    k = C.check_int("k", k)
    if k > n_ref - int(exclude_self):
        raise ParameterError(
            f"k={k} but there are only {n_ref - int(exclude_self)} candidate rows; use a smaller k"
        )
    return k


def search(queries: np.ndarray, reference: np.ndarray, k: int, **options: Any) -> Neighbors:
    """Nearest neighbours of prepared (normalised, fitted) data; see :func:`top_k_neighbors`.

    ``options`` are those of :func:`search_into`; the answers are kept here.
    """
    nq = queries.shape[0]
    width = check_k(k, reference.shape[0], bool(options.get("exclude_self", False)))
    distances = np.empty((nq, width))  # k checked first: never an allocation k cannot fill
    indices = np.empty((nq, width), dtype=np.int64)

    def keep(rows: Any, d: np.ndarray, idx: np.ndarray) -> None:
        distances[rows] = d
        indices[rows] = idx

    search_into(keep, queries, reference, k, **options)
    return Neighbors(distances, indices)


def search_into(
    sink: Callable[[Any, np.ndarray, np.ndarray], None],
    queries: Any,
    reference: Any,
    k: int,
    *,
    measure: Measure | None = None,
    similarity: Any = None,
    algorithm: str = "auto",
    exclude_self: bool = False,
    batch_size: int | None = None,
    tile_size: int = C.NEIGHBOR_TILE,
    client: Any = None,
    scheduler: str | None = None,
    cluster: str | Path | None = None,
    progress: Progress | None = None,
) -> None:
    """The search of :func:`search`, each task's answer given to ``sink(rows, distances,
    indices)`` as it arrives (in the driver; nothing is kept).

    ``similarity`` (an object with ``cross_similarity(Q)``) replaces
    ``measure``; distances are then ``1 - s``.  ``queries`` and ``reference``
    may be :class:`~distforest.store.inputs.StoredRows` (the tasks read them;
    the queries are then taken in row order: ``rows`` are slices).
    """
    n_ref = reference.shape[0]
    k = check_k(k, n_ref, exclude_self)
    algorithm = resolve_algorithm(algorithm, measure, reference.shape[1])
    if similarity is not None:
        algorithm = "brute"
    spec = SearchSpec(k, algorithm, measure, exclude_self, C.check_tile_size(tile_size),
                      uuid.uuid4().hex, similarity)  # fmt: skip
    nq = queries.shape[0]
    if algorithm == "brute":
        metric_kernels.warm_up()
    exe = for_call(client, scheduler, cluster, progress)
    cells = cells_of(reference) + (0 if queries is reference else cells_of(queries))
    with placement.runner(cells, exe) as s:
        if batch_size is None:
            batch_size = query_batch_size(nq, n_ref, algorithm, similarity is not None,
                                          s.threads())  # fmt: skip
        batches: list[Any] = tasks.plan_batches(nq, C.check_int("batch_size", batch_size))
        if algorithm != "brute" and nq > 1 and not isinstance(queries, StoredRows):
            # near queries together: each task walks the same branches of the tree
            order = metric_kernels.morton_order(queries)
            batches = [order[b] for b in batches]
        ref = s.share(reference)
        qs = ref if queries is reference else s.share(queries)
        # a forest similarity travels once per worker, not with every task
        shared = spec if similarity is None else s.share(spec)
        items = [(shared, ref, qs, rows) for rows in batches]
        logger.info("k=%d neighbours of %d rows among %d by %s in %d tasks",
                    k, nq, n_ref, algorithm, len(items))  # fmt: skip
        try:
            for i, (d, idx) in s.run(neighbors_task, items, name="neighbors",
                                     progress=exe.stage("knn")):  # fmt: skip
                sink(batches[i], d, idx)
        finally:
            _TREES.pop(spec.token, None)


def top_k_neighbors(
    X: Any,
    Y: Any = None,
    *,
    k: int = 10,
    metric: str | Measure = "euclidean",
    metric_params: dict[str, Any] | None = None,
    normalize: str | None = None,
    feature_range: tuple[float, float] = (0.0, 1.0),
    algorithm: str = "auto",
    store: str | Path | None = None,
    overwrite: bool = False,
    batch_size: int | None = None,
    tile_size: int = C.NEIGHBOR_TILE,
    client: Any = None,
    scheduler: str | None = None,
    cluster: str | Path | None = None,
    progress: Progress | None = None,
    attrs: dict[str, Any] | None = None,
    complete: bool = True,
) -> Neighbors | xr.Dataset:
    """The k nearest rows of ``Y`` (or of ``X`` itself) for every row of ``X``.

    Never forms the n x m matrix.  With ``algorithm="auto"``, Minkowski
    distances on at most 15 features use a scikit-learn k-d tree, built once
    per worker from the reference rows, queried in row blocks (one Dask task
    each); other measures stream tiles of ``tile_size`` candidates through a
    running merge.  Ties are broken by the smaller row number, so the
    answer does not depend on workers, batch or tile size (the tree and brute
    paths agree except possibly on exactly tied distances).

    Parameters
    ----------
    X : array-like, DataFrame, path or Table
        Query rows.
    Y : same as X, optional
        Reference rows; ``None``: the rows of ``X``, each row's own pair excluded.
    k : int
        Neighbours per row.
    metric, metric_params, normalize, feature_range :
        As in :func:`pairwise`; a similarity s is turned into the distance ``1 - s``.
    algorithm : {"auto", "kd_tree", "ball_tree", "brute"}
    store : str or Path, optional
        Write ``neighbor_index`` and ``neighbor_distance`` (dims ``sample``,
        ``neighbor``) to a new Zarr store and return it as a Dataset.
    overwrite : bool
    batch_size : int, optional
        Query rows per task.
    tile_size : int
        Candidate rows per tile of the brute path.
    client, scheduler, cluster, progress :
        As in :func:`pairwise` (progress stage ``"knn"``).
    attrs : dict, optional
        More JSON attributes for the store (recorded before it is marked complete).
    complete : bool, default True
        Mark the store complete when written (False: a job's run protocol does).

    Returns
    -------
    Neighbors or xarray.Dataset
    """
    measure, A, B, _ = prepare(X, Y, metric, metric_params, normalize, feature_range)
    if store is not None:
        check_can_create(store, overwrite)
    options = dict(measure=measure, algorithm=algorithm, exclude_self=Y is None,
                   batch_size=batch_size, tile_size=tile_size, client=client,
                   scheduler=scheduler, cluster=cluster, progress=progress)  # fmt: skip
    if store is None:
        if isinstance(A, StoredRows):
            raise ParameterError("rows in a store give their neighbours in a store: pass store=")
        return search(A, B, k, **options)
    result = None if isinstance(A, StoredRows) else search(A, B, k, **options)
    params = {
        "metric": measure.spec,
        "kind": measure.kind,
        "distance": "1 - similarity" if measure.kind == "similarity" else measure.spec,
        "k": int(k),
        "normalize": normalize or "none",
        "algorithm": resolve_algorithm(algorithm, measure, B.shape[1]),
        "exclude_self": Y is None,
    }
    rs = RunStore.create(store, attrs={"params": params, "input": _describe(X, A, B),
                                       **(attrs or {})}, overwrite=overwrite)  # fmt: skip
    n = A.shape[0]
    rows = min(n, NEIGHBOR_ROWS)
    rs.write_array("neighbor", np.arange(k, dtype=np.int64), ("neighbor",))
    dims = ("sample", "neighbor")
    if result is not None:
        rs.write_named("sample", np.arange(n, dtype=np.int64))
        rs.write_array("neighbor_index", result.indices, dims, chunks=(rows, k))
        rs.write_array("neighbor_distance", result.distances, dims, chunks=(rows, k))
    else:  # each task's rows written as they arrive: the driver never holds n x k
        sample: Any = rs.group.create_array(
            "sample", shape=(n,), chunks=(rows,), dtype="int64", dimension_names=("sample",)
        )
        for start in range(0, n, rows):  # the row numbers too, a chunk at a time
            sample[start : start + rows] = np.arange(start, min(start + rows, n))
        index, distance = (
            rs.group.create_array(name, shape=(n, k), chunks=(rows, k), dtype=dtype,
                                  dimension_names=dims, overwrite=True)
            for name, dtype in (("neighbor_index", "int64"), ("neighbor_distance", "float64"))
        )  # fmt: skip

        def write(rows: Any, d: np.ndarray, idx: np.ndarray) -> None:
            index[rows] = idx
            distance[rows] = d

        try:
            search_into(write, A, B, k, **options)
        except BaseException:
            location.remove_tree(rs.path)  # no half-written store left at STORE
            raise
    if complete:
        complete_output(rs)
    return rs.dataset()
