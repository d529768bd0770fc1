"""Clustering on a similarity matrix: kernel k-means, spectral clustering, DBSCAN.

A similarity reaches these functions in one of three forms, wrapped by
:func:`as_operator`:

- a small in-memory matrix (numpy array or in-memory DataArray);
- a lazy Zarr-backed DataArray, read tile by tile (never all at once);
- a matrix-free product ``S @ V`` (:class:`~distforest.forests.xforest_similarity.SimilarityProduct`
  or any callable with a ``shape``), e.g. X-Forest's ``S = Phi Phi^T / T``.

Kernel k-means and (large) spectral clustering only need products ``S @ V``;
DBSCAN needs the neighbours within ``eps`` in the distance ``sqrt(2 - 2 S)``,
found block of rows by block of rows.  Scores: accuracy under the best
one-to-one matching of clusters to classes (Hungarian algorithm), ARI, NMI.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np
import xarray as xr
from scipy import sparse
from scipy.optimize import linear_sum_assignment
from scipy.sparse.linalg import LinearOperator, eigsh
from sklearn.cluster import DBSCAN, KMeans, SpectralClustering
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

from distforest.errors import InputError, ParameterError
from distforest.forests import constraints as C

logger = logging.getLogger(__name__)

METHODS = C.CLUSTER_METHODS

#: Largest n for which a stored matrix is read whole into memory.
MAX_DENSE = 5_000


class SimilarityOperator:
    """``S @ V`` and row blocks of a symmetric similarity, whatever holds it.

    Parameters
    ----------
    n : int
        Number of rows (and columns).
    matvec : callable
        ``matvec(V)`` returns ``S @ V`` for V of shape (n, k).
    rows : callable or None
        ``rows(slice)`` returns those rows of S as ``(column slice, block)``
        pieces; None for a matrix-free operator (DBSCAN then is not available).
    dense : ndarray or None
        The whole matrix, when it is in memory.
    block : int
        Rows per block when reading rows.
    """

    def __init__(
        self,
        n: int,
        matvec: Callable[[np.ndarray], np.ndarray],
        rows: Callable[[slice], list[tuple[slice, np.ndarray]]] | None = None,
        dense: np.ndarray | None = None,
        block: int = 2048,
    ) -> None:
        self.shape = (n, n)
        self._matvec = matvec
        self.rows = rows
        self.dense = dense
        self.block = block

    def __call__(self, V: np.ndarray) -> np.ndarray:
        """``S @ V`` for V of shape (n,) or (n, k)."""
        V = np.asarray(V, dtype=np.float64)
        out = self._matvec(V[:, None] if V.ndim == 1 else V)
        return out[:, 0] if V.ndim == 1 else out


def _zarr_operator(S: xr.DataArray) -> SimilarityOperator:
    """Products and rows from a stored matrix, read one chunk-aligned tile at a time."""
    n = S.shape[0]
    chunks = S.encoding.get("chunks") or S.encoding.get("preferred_chunks") or (2048, 2048)
    block = int(chunks[0] if isinstance(chunks, tuple) else 2048)
    dim_i, dim_j = S.dims
    spans = [slice(s, min(s + block, n)) for s in range(0, n, block)]

    def rows(r: slice) -> list[tuple[slice, np.ndarray]]:
        return [(c, np.asarray(S.isel({dim_i: r, dim_j: c}).values)) for c in spans]

    def matvec(V: np.ndarray) -> np.ndarray:
        out = np.zeros((n, V.shape[1]))
        for r in spans:
            for c in spans:  # one tile in memory at a time
                out[r] += np.asarray(S.isel({dim_i: r, dim_j: c}).values, dtype=np.float64) @ V[c]
        return out

    return SimilarityOperator(n, matvec, rows, None, block)


def as_operator(similarity: Any, *, max_dense: int = MAX_DENSE) -> SimilarityOperator:
    """Wrap a similarity (array, DataArray, or matrix-free product) as an operator.

    Parameters
    ----------
    similarity : ndarray, xarray.DataArray, SimilarityOperator or callable
        A callable must take (n, k) arrays and have a ``shape`` attribute.
    max_dense : int
        A Zarr-backed DataArray with at most this many rows is read whole.

    Returns
    -------
    SimilarityOperator
    """
    if isinstance(similarity, SimilarityOperator):
        return similarity
    if isinstance(similarity, xr.DataArray):
        if similarity.shape[0] > max_dense and similarity.chunks is not None:
            return _zarr_operator(similarity)
        similarity = np.asarray(similarity.values)
    if isinstance(similarity, np.ndarray):
        if similarity.ndim != 2 or similarity.shape[0] != similarity.shape[1]:
            raise InputError(f"a similarity must be a square matrix, got shape {similarity.shape}")
        S = similarity.astype(np.float64, copy=False)
        whole = slice(0, S.shape[0])
        return SimilarityOperator(S.shape[0], S.__matmul__, lambda r: [(whole, S[r])], S)
    if callable(similarity) and hasattr(similarity, "shape"):
        return SimilarityOperator(int(similarity.shape[0]), similarity)
    raise InputError(
        f"cannot cluster a {type(similarity).__name__}; pass a square array, an xarray "
        "DataArray (e.g. from open_store) or a matrix-free product (XForest.product_session())"
    )


# -- kernel k-means --------------------------------------------------------------


def _one_hot(labels: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    H = np.zeros((labels.size, k))
    H[np.arange(labels.size), labels] = 1.0
    counts = H.sum(axis=0)
    return H / np.maximum(counts, 1.0), counts


def _kernel_plus_plus(op: SimilarityOperator, k: int, rng: np.random.Generator) -> np.ndarray:
    """k-means++ seeding in feature space; one column of S per centre (diagonal taken as 1)."""
    n = op.shape[0]
    centres = [int(rng.integers(n))]
    columns = [op(np.eye(1, n, centres[0])[0])]
    closest = 2.0 - 2.0 * columns[0]
    for _ in range(1, k):
        weights = np.maximum(closest, 0.0)
        total = weights.sum()
        c = int(rng.choice(n, p=weights / total)) if total > 0 else int(rng.integers(n))
        centres.append(c)
        columns.append(op(np.eye(1, n, c)[0]))
        closest = np.minimum(closest, 2.0 - 2.0 * columns[-1])
    return np.argmax(np.stack(columns, axis=1), axis=1)


#: Iterations of one kernel k-means run at most.
KMEANS_MAX_ITER = 100


def kernel_kmeans(
    similarity: Any,
    k: int,
    *,
    n_init: int = 10,
    max_iter: int = KMEANS_MAX_ITER,
    random_state: int | None = 0,
) -> tuple[np.ndarray, float]:
    """Kernel k-means with ``n_init`` restarts; the run with the lowest objective wins.

    The kernel is the similarity itself (PSD for beta-similarity, docs/design.md
    section 3).  Each iteration takes one product ``S @ H`` with the k
    normalised cluster indicators, so it runs matrix-free.  The diagonal is
    taken as 1 (true for beta and basic similarity and Gaussian kernels).

    Parameters
    ----------
    similarity : see :func:`as_operator`
    k : int
    n_init : int
        Restarts, each seeded by kernel k-means++.
    max_iter : int
    random_state : int or None

    Returns
    -------
    labels : ndarray of int64, shape (n,)
    objective : float
        Sum over rows of the squared feature-space distance to their cluster mean.
    """
    k = C.check_int("k", k)
    n_init = C.check_int("n_init", n_init)
    op = as_operator(similarity)
    n = op.shape[0]
    if k > n:
        raise ParameterError(f"k must be at most the number of rows ({n}), got {k}")
    rng = np.random.default_rng(random_state)
    best: tuple[np.ndarray, float] | None = None
    for _ in range(n_init):
        labels = _kernel_plus_plus(op, k, rng)
        objective = np.inf
        for _ in range(max_iter):
            H, counts = _one_hot(labels, k)
            SH = op(H)
            within = np.einsum("ac,ac->c", H, SH)
            dist = 1.0 - 2.0 * SH + within[None, :]
            dist[:, counts == 0] = np.inf
            new = np.argmin(dist, axis=1)
            objective = float(dist[np.arange(n), labels].sum())
            empty = np.setdiff1d(np.arange(k), new)
            for c in empty:  # give an empty cluster the worst-fitting row
                far = int(np.argmax(dist[np.arange(n), new]))
                new[far] = c
            if np.array_equal(new, labels):
                break
            labels = new
        if best is None or objective < best[1]:
            best = (labels.astype(np.int64), objective)
    assert best is not None
    return best


# -- spectral clustering -------------------------------------------------------------


def spectral(similarity: Any, k: int, *, random_state: int | None = 0) -> np.ndarray:
    """Spectral clustering with the similarity as affinity.

    In memory: scikit-learn's ``SpectralClustering(affinity="precomputed")``.
    Otherwise (a stored or matrix-free similarity): the top ``k`` eigenvectors
    of ``D^-1/2 S D^-1/2`` by ARPACK on products, rows normalised, then
    k-means (the same embedding, without an n x n matrix).

    Returns
    -------
    ndarray of int64, shape (n,)
    """
    k = C.check_int("k", k)
    op = as_operator(similarity)
    if op.dense is not None:
        model = SpectralClustering(n_clusters=k, affinity="precomputed", random_state=random_state)
        return model.fit_predict(op.dense).astype(np.int64)
    n = op.shape[0]
    d = op(np.ones(n))
    scale = 1.0 / np.sqrt(np.maximum(d, 1e-300))

    def normalised(v: np.ndarray) -> np.ndarray:
        v2 = v.reshape(n, -1)
        return (scale[:, None] * op(scale[:, None] * v2)).reshape(v.shape)

    operator = LinearOperator((n, n), matvec=normalised, matmat=normalised, dtype=np.float64)
    v0 = np.random.default_rng(random_state).uniform(-1, 1, n)
    _, vectors = eigsh(operator, k=k, which="LA", v0=v0)
    embedding = vectors * scale[:, None]
    embedding /= np.maximum(np.linalg.norm(embedding, axis=1, keepdims=True), 1e-300)
    model = KMeans(n_clusters=k, n_init=10, random_state=random_state)
    return model.fit_predict(embedding).astype(np.int64)


# -- DBSCAN ----------------------------------------------------------------------------


def similarity_distance(S: np.ndarray) -> np.ndarray:
    """``sqrt(2 - 2 S)``: the feature-space distance of a kernel with unit diagonal."""
    return np.sqrt(np.maximum(2.0 - 2.0 * np.asarray(S, dtype=np.float64), 0.0))


def dbscan(similarity: Any, eps: float, *, min_samples: int = 5) -> np.ndarray:
    """DBSCAN on the distance ``sqrt(2 - 2 S)`` (scikit-learn, precomputed).

    A stored matrix is read block of rows by block of rows and only pairs
    within ``eps`` are kept (a sparse neighbourhood graph), so memory grows
    with the number of close pairs, not with n^2.

    Returns
    -------
    ndarray of int64, shape (n,)
        Cluster labels; -1 marks noise.
    """
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 < eps <= 2:
        raise ParameterError(f"eps must be a distance in (0, 2] (sqrt(2 - 2 S)), got {eps!r}")
    min_samples = C.check_int("min_samples", min_samples)
    op = as_operator(similarity)
    model = DBSCAN(eps=eps, min_samples=min_samples, metric="precomputed")
    if op.dense is not None:
        labels = model.fit_predict(similarity_distance(op.dense)).astype(np.int64)
        if (labels == -1).all():
            _warn_all_noise(eps, min_samples, _kth_distances(op, min_samples))
        return labels
    if op.rows is None:
        raise ParameterError(
            "DBSCAN needs the similarity's rows: write it to a store first "
            "(XForest.similarity(store=...)) instead of passing a matrix-free product"
        )
    n = op.shape[0]
    parts = []
    for start in range(0, n, op.block):
        r = slice(start, min(start + op.block, n))
        for c, tile in op.rows(r):  # one tile in memory at a time
            D = similarity_distance(tile)
            i, j = np.nonzero(D <= eps)
            # a stored zero must stay a neighbour: keep distances strictly positive
            parts.append((i + r.start, j + c.start, np.maximum(D[i, j], 1e-12)))
    rows, cols, vals = (np.concatenate(x) for x in zip(*parts, strict=True))
    graph = sparse.csr_matrix((vals, (rows, cols)), shape=(n, n))
    labels = model.fit_predict(graph).astype(np.int64)
    if (labels == -1).all():
        _warn_all_noise(eps, min_samples, _kth_distances(op, min_samples))
    return labels


def _kth_distances(op: Any, k: int) -> np.ndarray:
    """Each row's distance to its k-th nearest row, itself included (DBSCAN's core rule).

    Read like :func:`dbscan` reads the matrix (a dense one at once, a stored one
    tile by tile, keeping k distances a row).
    """
    if op.dense is not None:
        D = similarity_distance(op.dense)
        k = min(k, D.shape[1])
        return np.partition(D, k - 1, axis=1)[:, k - 1]
    n = op.shape[0]
    k = min(k, n)
    out = np.empty(n)
    for start in range(0, n, op.block):
        r = slice(start, min(start + op.block, n))
        best = np.full((r.stop - r.start, k), np.inf)
        for _, tile in op.rows(r):
            both = np.concatenate([best, similarity_distance(tile)], axis=1)
            best = np.partition(both, k - 1, axis=1)[:, :k]
        out[r] = best.max(axis=1)
    return out


def _warn_all_noise(eps: float, min_samples: int, kth: np.ndarray) -> None:
    """Say that every row is noise, and which eps would give clusters."""
    smallest, median = float(np.min(kth)), float(np.median(kth))
    logger.warning(
        "DBSCAN with eps=%g and min_samples=%d put every row in noise (label -1): no row "
        "has %d rows within %g.  eps >= %.3g gives at least one cluster (the smallest "
        "distance of a row to its %d-th nearest row); eps = %.3g (the median of those "
        "distances) makes about half of the rows core points",
        eps, min_samples, min_samples, eps, smallest, min_samples, median,
    )  # fmt: skip


# -- scores ------------------------------------------------------------------------------


def clustering_accuracy(truth: Any, labels: Any) -> float:
    """Share of rows whose cluster is matched to their class (Hungarian matching).

    Clusters and classes are matched one to one to maximise agreement; rows in
    unmatched clusters and DBSCAN noise (label -1) count as wrong.
    """
    truth = np.asarray(truth)
    labels = np.asarray(labels)
    if truth.shape != labels.shape:
        raise InputError(f"{truth.size} true labels for {labels.size} cluster labels")
    classes, t = np.unique(truth, return_inverse=True)
    clusters, c = np.unique(labels, return_inverse=True)
    table = np.zeros((clusters.size, classes.size), dtype=np.int64)
    np.add.at(table, (c, t), 1)
    table[clusters == -1] = 0
    rows, cols = linear_sum_assignment(table, maximize=True)
    return float(table[rows, cols].sum() / truth.size)


def scores(truth: Any, labels: Any) -> dict[str, float]:
    """Accuracy (Hungarian), adjusted Rand index and normalised mutual information."""
    return {
        "accuracy": clustering_accuracy(truth, labels),
        "ari": float(adjusted_rand_score(truth, labels)),
        "nmi": float(normalized_mutual_info_score(truth, labels)),
    }


def cluster(
    similarity: Any,
    method: str,
    *,
    k: int | None = None,
    eps: float | None = None,
    min_samples: int = 5,
    n_init: int = 10,
    random_state: int | None = 0,
) -> np.ndarray:
    """Run one of :data:`METHODS` on a similarity; returns labels (-1: DBSCAN noise)."""
    C.check_choice("method", method, METHODS)
    if method == "dbscan":
        if eps is None:
            raise ParameterError("DBSCAN needs eps (a distance sqrt(2 - 2 S) in (0, 2])")
        return dbscan(similarity, eps, min_samples=min_samples)
    if k is None:
        raise ParameterError(f"{method} needs k, the number of clusters")
    if method == "spectral":
        return spectral(similarity, k, random_state=random_state)
    return kernel_kmeans(similarity, k, n_init=n_init, random_state=random_state)[0]
