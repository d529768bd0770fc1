"""Pairwise similarity/distance matrices as Zarr tiles, and top-k neighbours without them.

- :func:`pairwise` writes an n x m matrix tile by tile (one Dask task per
  tile; for ``Y=None`` only the upper triangle is computed and each tile is
  mirrored), or returns a small one in memory.
- :func:`top_k_neighbors` finds the k nearest rows of every query row.  It
  never forms the matrix: a k-d / ball tree (scikit-learn) built once per
  worker answers blocks of queries for Minkowski distances on
  low-dimensional data (blocks cut along a Morton curve, so each task's
  queries are near each other); otherwise each task streams tiles of
  candidates through a running merge
  (:func:`distforest.kernels.metrics.merge_top_k`): fused numba kernels for
  Minkowski distances, BLAS products for cosine and for Euclidean on many
  features (exact values re-computed for the pairs that can win), dense
  tiles for the other measures.  Memory is O(n k) in the driver and
  O(tile) in a task.

Both take the same inputs as the forests (arrays, DataFrames, paths), an
optional range / z-score normalisation fitted on the reference rows (``Y``,
or ``X`` when ``Y`` is None), and a measure from :mod:`distforest.forests.measures`.
Results do not depend on the number of workers, the batch or tile sizes.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from distforest.errors import ParameterError
from distforest.forests import _params as P
from distforest.forests.measures import Measure, check_values, make_scaler, parse_metric
from distforest.io import Table, load_table
from distforest.kernels import metrics as metric_kernels
from distforest.parallel import tasks
from distforest.parallel.cluster import use_client
from distforest.store.run_store import RunStore, check_can_create, write_block

logger = logging.getLogger("distforest")

ALGORITHMS = ("auto", "kd_tree", "ball_tree", "brute")
#: ``auto`` uses a k-d tree for Minkowski distances up to this many features.
KD_TREE_MAX_FEATURES = 15
#: The brute search uses BLAS products for Euclidean distances from this many features.
GRAM_MIN_FEATURES = 13
#: Query rows per matrix product of the brute search (a 64 x tile block stays in cache).
GRAM_ROWS = 64
#: Safety factor on the rounding bound of the product form (see :func:`_gram_search`).
GRAM_SLACK = 8.0
#: ``client=SYNCHRONOUS`` runs the same tasks one after another in this process.
SYNCHRONOUS = "synchronous"

Progress = Callable[[str, int, int], None]


# -- inputs ---------------------------------------------------------------------


def as_matrix(X: Any, what: str = "X") -> tuple[np.ndarray, tuple[str, ...]]:
    """Features as a float64 matrix (and their names) from any supported input.

    A numeric 2-D ndarray is used as it is (any number of rows); everything
    else goes through :func:`distforest.io.load_table`.
    """
    if isinstance(X, Table):
        return X.X, X.feature_names
    if isinstance(X, np.ndarray) and X.dtype.kind in "biuf":
        if X.ndim != 2:
            raise ParameterError(f"{what} must be 2-D (rows x features), got shape {X.shape}")
        names = tuple(str(i) for i in range(X.shape[1]))
        return np.ascontiguousarray(X, dtype=np.float64), names
    table = load_table(X)
    return table.X, table.feature_names


def prepare(
    X: Any,
    Y: Any,
    metric: str | Measure,
    metric_params: dict[str, Any] | None,
    normalize: str | None,
    feature_range: tuple[float, float],
) -> tuple[Measure, np.ndarray, np.ndarray, Any]:
    """Parse the measure, load and normalise both sides, fit the measure on the reference.

    Returns
    -------
    measure, A, B, scaler
        ``A`` the query rows, ``B`` the reference rows (``A`` itself when
        ``Y`` is None), the fitted scaler or None.
    """
    measure = parse_metric(metric, metric_params)
    A, _ = as_matrix(X, "X")
    B = A
    if Y is not None:
        B, _ = as_matrix(Y, "Y")
        if B.shape[1] != A.shape[1]:
            raise ParameterError(
                f"X has {A.shape[1]} features but Y has {B.shape[1]}; give both the same columns"
            )
    check_values(measure, A, "X")
    scaler = make_scaler(normalize, feature_range)
    if scaler is not None:
        if measure.binary:
            raise ParameterError(f"{measure.name} is for 0/1 data; use normalize=None with it")
        scaler.fit(B)
        B = np.ascontiguousarray(scaler.transform(B), dtype=np.float64)
        A = B if Y is None else np.ascontiguousarray(scaler.transform(A), dtype=np.float64)
    return measure.fitted(B), A, B, scaler


# -- running tasks --------------------------------------------------------------


class _Session:
    """Where tasks run: a Dask client, or this process (``client="synchronous"``)."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def share(self, value: Any) -> Any:
        return value if self.client is None else tasks.scatter(self.client, value)

    def threads(self) -> int:
        return 1 if self.client is None else tasks.total_threads(self.client)

    def run(
        self, func: Callable[..., Any], items: Sequence[tuple], name: str, progress: Any
    ) -> Iterator[tuple[int, Any]]:
        if self.client is not None:
            yield from tasks.run_tasks(self.client, func, items, name=name, progress=progress)
            return
        for i, args in enumerate(items):
            yield i, func(*args)
            if progress is not None:
                progress(i + 1, len(items))


def session(client: Any, scheduler: str | None, cluster: str | Path | None) -> Any:
    """Context manager yielding a :class:`_Session` (see ``client`` in :func:`pairwise`)."""
    import contextlib

    @contextlib.contextmanager
    def _cm() -> Iterator[_Session]:
        if isinstance(client, str):
            if client != SYNCHRONOUS:
                raise ParameterError(
                    f"client must be a distributed.Client, None or {SYNCHRONOUS!r}, got {client!r}"
                )
            yield _Session(None)
            return
        with use_client(client, scheduler=scheduler, cluster=cluster) as c:
            yield _Session(c)

    return _cm()


def _stage(progress: Progress | None, stage: str) -> Any:
    return None if progress is None else lambda done, total: progress(stage, done, total)


# -- pairwise matrices ----------------------------------------------------------


def _tile(measure: Measure, A: np.ndarray, B: np.ndarray, ri: slice, rj: slice, dtype: str):
    return measure.values(A[ri], B[rj]).astype(dtype, copy=False)


def pairwise_tile_task(
    path: str, name: str, measure: Measure, A: np.ndarray, B: np.ndarray,
    rows_i: slice, rows_j: slice, mirror: bool, dtype: str,
) -> int:  # fmt: skip
    """Compute tile ``(rows_i, rows_j)`` and write it (and its mirror); returns bytes written."""
    tile = _tile(measure, A, B, rows_i, rows_j, dtype)
    write_block(path, name, (rows_i, rows_j), tile)
    if mirror and rows_i != rows_j:
        write_block(path, name, (rows_j, rows_i), np.ascontiguousarray(tile.T))
        return 2 * tile.nbytes
    return tile.nbytes


def pairwise(
    X: Any,
    Y: Any = None,
    *,
    metric: str | Measure = "euclidean",
    metric_params: dict[str, Any] | None = None,
    normalize: str | None = None,
    feature_range: tuple[float, float] = (0.0, 1.0),
    store: str | Path | None = None,
    tile_size: int = 2048,
    dtype: str | None = None,
    overwrite: bool = False,
    max_in_memory: int = 10_000,
    client: Any = None,
    scheduler: str | None = None,
    cluster: str | Path | None = None,
    progress: Progress | None = None,
) -> xr.DataArray:
    """Similarity or distance between every row of ``X`` and every row of ``Y``.

    Parameters
    ----------
    X : array-like, DataFrame, path or Table
        Rows of the matrix (``sample_i``).
    Y : same as X, optional
        Columns (``sample_j``); ``None`` means ``X`` against itself, which is
        symmetric: only tiles with ``i <= j`` are computed, each also written
        mirrored.
    metric : str or Measure
        See :mod:`distforest.forests.measures`: ``euclidean``, ``manhattan``,
        ``chebyshev``, ``minkowski:P``, ``mahalanobis`` (distances), ``cosine``,
        ``rbf[:GAMMA]``, ``russell-rao``, ``sokal-michener``, ``jaccard``
        (similarities).
    metric_params : dict, optional
        ``p``, ``gamma`` or ``VI`` (Mahalanobis inverse covariance; estimated
        on the reference rows, ``Y`` or else ``X``, when not given).
    normalize : {None, "range", "zscore"}
        Rescale the features first, fitted on the reference rows.
    feature_range : (low, high)
        Interval of ``normalize="range"``.
    store : str or Path, optional
        Zarr store to create; the matrix is written tile by tile as Dask
        tasks.  ``None``: a small matrix computed in memory (here, no cluster).
    tile_size : int
        Rows/columns of one tile (one task, one Zarr chunk).
    dtype : str, optional
        Values' type; default float32 in a store, float64 in memory.
    overwrite : bool
        Replace an existing distforest store.
    max_in_memory : int
        Without a store, refuse matrices with more than ``max_in_memory ** 2`` cells.
    client : distributed.Client, None or "synchronous"
        The cluster (else ``scheduler``/``cluster``, else the current client,
        else a LocalCluster for the call); ``"synchronous"`` runs the tiles in
        this process.
    scheduler, cluster : optional
        Address of a scheduler or a cluster YAML file.
    progress : callable, optional
        ``progress("tiles", done, total)``.

    Returns
    -------
    xarray.DataArray
        Dims ``(sample_i, sample_j)``, named ``"distance"`` or ``"similarity"``
        after the measure's kind; ``attrs`` record the metric, kind and
        normalisation.  Lazy and Zarr-backed with a store.
    """
    tile = P.check_int("tile_size", tile_size, low=16)
    measure, A, B, _ = prepare(X, Y, metric, metric_params, normalize, feature_range)
    symmetric = Y is None
    n, m = A.shape[0], B.shape[0]
    name = measure.kind
    attrs = {"metric": measure.spec, "kind": measure.kind, "normalize": normalize or "none",
             "feature_range": list(feature_range), "symmetric": symmetric}  # fmt: skip
    if store is None:
        if n * m > max_in_memory**2:
            raise ParameterError(
                f"an in-memory {n} x {m} matrix needs {n * m * 8 / 1e9:.1f} GB; pass "
                f"store='matrix.zarr' to write it tile by tile (or raise max_in_memory)"
            )
        dtype = dtype or "float64"
        out = np.empty((n, m), dtype=dtype)
        for ri, rj in _plan(n, m, tile, symmetric):
            out[ri, rj] = _tile(measure, A, B, ri, rj, dtype)
            if symmetric and ri != rj:
                out[rj, ri] = out[ri, rj].T
        coords = {"sample_i": np.arange(n), "sample_j": np.arange(m)}
        return xr.DataArray(out, dims=("sample_i", "sample_j"), coords=coords, name=name,
                            attrs=attrs)  # fmt: skip
    dtype = dtype or "float32"
    rs = RunStore.create(store, attrs={"params": attrs, "input": _describe(X, A, B)},
                         overwrite=overwrite)  # fmt: skip
    rs.write_array("sample_i", np.arange(n, dtype=np.int64), ("sample_i",))
    rs.write_array("sample_j", np.arange(m, dtype=np.int64), ("sample_j",))
    rs.create_matrix(name, n, m, tile, dtype=dtype, attrs={**attrs, "complete": False})
    plan = _plan(n, m, tile, symmetric)
    logger.info("writing %d %s tiles of %d x %d to %s", len(plan), name, tile, tile, rs.path)
    with session(client, scheduler, cluster) as s:
        a = s.share(A)
        b = a if symmetric else s.share(B)
        items = [(rs.path, name, measure, a, b, ri, rj, symmetric, dtype) for ri, rj in plan]
        for _ in s.run(pairwise_tile_task, items, f"{name}-tiles", _stage(progress, "tiles")):
            pass
    rs.group[name].attrs.update({"complete": True})
    rs.mark_complete()
    return rs.dataset()[name]


def _describe(X: Any, A: np.ndarray, B: np.ndarray) -> dict[str, Any]:
    """The ``input`` attribute of a store: source, sizes, fingerprint of the rows."""
    out: dict[str, Any] = {"source": getattr(X, "source", f"<{type(X).__name__}>"),
                           "n_samples": int(A.shape[0]), "n_features": int(A.shape[1]),
                           "n_reference": int(B.shape[0])}  # fmt: skip
    if isinstance(X, Table):
        out["fingerprint"] = X.fingerprint()
    return out


def _plan(n: int, m: int, tile: int, symmetric: bool) -> list[tuple[slice, slice]]:
    if symmetric:
        return tasks.plan_tiles(n, tile, symmetric=True)
    return [(ri, rj) for ri in tasks.plan_batches(n, tile) for rj in tasks.plan_batches(m, tile)]


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
                QA[rows] @ RA.T, q_sq[rows], r_sq, slack[rows], scale, Q[rows], R, cosine,
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
        metric_kernels.merge_top_k(D, 0, start, spec.exclude_self, best_d, best_i)
    elif uses_gram(spec.measure, Q.shape[1]):
        _gram_search(spec, reference, Q, start, best_d, best_i)
        if spec.measure.name != "cosine":
            best_d = np.sqrt(best_d)
    elif spec.measure.minkowski_p is not None:
        p = float(spec.measure.minkowski_p)
        for cols in tasks.plan_batches(reference.shape[0], spec.tile_size):
            metric_kernels.minkowski_top_k(Q, reference[cols], p, cols.start, start,
                                           spec.exclude_self, best_d, best_i)  # fmt: skip
        best_d = metric_kernels.minkowski_finish(best_d, p)
    else:
        for cols in tasks.plan_batches(reference.shape[0], spec.tile_size):
            D = spec.measure.distances(Q, reference[cols])
            metric_kernels.merge_top_k(D, cols.start, start, spec.exclude_self, best_d, best_i)
    return metric_kernels.finish_top_k(best_d, best_i)


def neighbors_task(
    spec: SearchSpec, reference: np.ndarray, queries: np.ndarray, rows: slice | np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """k nearest reference rows of ``queries[rows]``: (distances, indices), nearest first.

    ``rows`` is a slice (brute tiles) or an array of row numbers (tree
    searches take their queries in a space-filling-curve order).
    """
    Q = np.ascontiguousarray(queries[rows])
    if spec.algorithm in ("kd_tree", "ball_tree"):
        ids = np.arange(rows.start, rows.stop) if isinstance(rows, slice) else rows
        return _tree_block(spec, reference, Q, ids)
    return _brute_block(spec, reference, Q, rows.start)


def resolve_algorithm(algorithm: str, measure: Measure | None, n_features: int) -> str:
    """``auto``: a k-d tree for Minkowski distances on at most 15 features, else brute tiles."""
    P.check_choice("algorithm", algorithm, ALGORITHMS)
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


def search(
    queries: np.ndarray,
    reference: np.ndarray,
    k: int,
    *,
    measure: Measure | None = None,
    similarity: Any = None,
    algorithm: str = "auto",
    exclude_self: bool = False,
    batch_size: int | None = None,
    tile_size: int = 8192,
    client: Any = SYNCHRONOUS,
    scheduler: str | None = None,
    cluster: str | Path | None = None,
    progress: Progress | None = None,
) -> Neighbors:
    """Nearest neighbours of prepared (normalised, fitted) data; see :func:`top_k_neighbors`.

    ``similarity`` (an object with ``cross_similarity(Q)``) replaces
    ``measure``; distances are then ``1 - s``.
    """
    k = P.check_int("k", k)
    n_ref = reference.shape[0]
    if k > n_ref - int(exclude_self):
        raise ParameterError(
            f"k={k} but there are only {n_ref - int(exclude_self)} candidate rows; use a smaller k"
        )
    algorithm = resolve_algorithm(algorithm, measure, reference.shape[1])
    if similarity is not None:
        algorithm = "brute"
    spec = SearchSpec(k, algorithm, measure, exclude_self, P.check_int("tile_size", tile_size),
                      uuid.uuid4().hex, similarity)  # fmt: skip
    nq = queries.shape[0]
    if algorithm == "brute":
        metric_kernels.warm_up()
    with session(client, scheduler, cluster) as s:
        if batch_size is None:
            if algorithm != "brute":
                cap = 16384
            else:
                cap = 1024 if similarity is None else max(16, (1 << 23) // n_ref)
            batch_size = min(cap, tasks.default_batch_size(nq, s.threads()))
        batches: list[Any] = tasks.plan_batches(nq, P.check_int("batch_size", batch_size))
        if algorithm != "brute" and nq > 1:
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
        distances = np.empty((nq, k))
        indices = np.empty((nq, k), dtype=np.int64)
        try:
            for i, (d, idx) in s.run(neighbors_task, items, "neighbors", _stage(progress, "knn")):
                distances[batches[i]] = d
                indices[batches[i]] = idx
        finally:
            _TREES.pop(spec.token, None)
    return Neighbors(distances, indices)


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
    tile_size: int = 8192,
    client: Any = None,
    scheduler: str | None = None,
    cluster: str | Path | None = None,
    progress: Progress | None = None,
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

    Returns
    -------
    Neighbors or xarray.Dataset
    """
    measure, A, B, _ = prepare(X, Y, metric, metric_params, normalize, feature_range)
    if store is not None:
        check_can_create(store, overwrite)
    result = search(
        A, B, k, measure=measure, algorithm=algorithm, exclude_self=Y is None,
        batch_size=batch_size, tile_size=tile_size, client=client, scheduler=scheduler,
        cluster=cluster, progress=progress,
    )  # fmt: skip
    if store is None:
        return result
    attrs = {
        "metric": measure.spec,
        "kind": measure.kind,
        "distance": "1 - similarity" if measure.kind == "similarity" else measure.spec,
        "k": int(k),
        "normalize": normalize or "none",
        "algorithm": resolve_algorithm(algorithm, measure, B.shape[1]),
        "exclude_self": Y is None,
    }
    rs = RunStore.create(store, attrs={"params": attrs, "input": _describe(X, A, B)},
                         overwrite=overwrite)  # fmt: skip
    n = A.shape[0]
    rows = min(n, 65536)
    rs.write_array("sample", np.arange(n, dtype=np.int64), ("sample",))
    rs.write_array("neighbor", np.arange(k, dtype=np.int64), ("neighbor",))
    dims = ("sample", "neighbor")
    rs.write_array("neighbor_index", result.indices, dims, chunks=(rows, k))
    rs.write_array("neighbor_distance", result.distances, dims, chunks=(rows, k))
    rs.mark_complete()
    return rs.dataset()
