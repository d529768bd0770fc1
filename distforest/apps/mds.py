"""Classical multidimensional scaling of proximities, matrix-free.

Classical scaling of dissimilarities D takes the top eigenvectors of
``B = -1/2 J D^2 J`` (J the centring matrix).  With Breiman's
``D = sqrt(1 - P)``, ``D^2 = 1 - P`` and ``B = 1/2 J P J``; with ``D = 1 - P``,
``B = J P J - 1/2 J (P*P) J``.  Both only need products ``P v`` (per-tree leaf
sums) and ``(P*P) v`` (sparse proximity rows), so ARPACK's Lanczos
(``scipy.sparse.linalg.eigsh``) finds the top eigenvectors at n = 1,000,000
without an n x n matrix.
"""

from __future__ import annotations

import numpy as np
from scipy.sparse.linalg import LinearOperator, eigsh

from distforest.errors import ParameterError

DISSIMILARITIES = ("sqrt", "linear")


def _centre(v: np.ndarray) -> np.ndarray:
    return v - v.mean(axis=0)


def classical_mds_operator(product, squared_product, n: int, dissimilarity: str) -> LinearOperator:
    """The double-centred matrix B as a symmetric linear operator."""

    def matvec(v: np.ndarray) -> np.ndarray:
        v = _centre(np.asarray(v, dtype=np.float64).reshape(n, -1))
        out = _centre(product(v))
        if dissimilarity == "sqrt":
            out = 0.5 * out
        else:
            out = out - 0.5 * _centre(squared_product(v))
        return out

    return LinearOperator((n, n), matvec=matvec, matmat=matvec, dtype=np.float64)


def mds(
    forest, n_components: int = 2, *, dissimilarity: str = "sqrt", tol: float = 1e-8
) -> tuple[np.ndarray, np.ndarray]:
    """Classical MDS coordinates of the training rows of a fitted forest.

    Parameters
    ----------
    forest : ProximityForest
    n_components : int, default 2
    dissimilarity : {"sqrt", "linear"}, default "sqrt"
        ``sqrt``: D = sqrt(1 - P) (Breiman, R's ``MDSplot``); ``linear``: D = 1 - P.
    tol : float
        Relative accuracy of the eigenvalues (ARPACK).

    Returns
    -------
    coordinates : ndarray, shape (n_samples, n_components)
        ``U sqrt(lambda)``, by decreasing eigenvalue; the sign of each axis
        is fixed so that its largest absolute entry is positive.
    eigenvalues : ndarray, shape (n_components,)
    """
    from distforest.forests.products import product_session

    if dissimilarity not in DISSIMILARITIES:
        raise ParameterError(
            f"dissimilarity must be one of {DISSIMILARITIES}, got {dissimilarity!r}"
        )
    n = forest.n_samples_
    if not 1 <= n_components < n - 1:
        raise ParameterError(f"n_components must be in [1, {n - 2}], got {n_components!r}")
    with product_session(forest) as session:
        op = classical_mds_operator(session.product, session.squared_product, n, dissimilarity)
        start = np.random.default_rng(0).standard_normal(n)
        values, vectors = eigsh(op, k=n_components, which="LA", tol=tol, v0=start)
    order = np.argsort(values)[::-1]
    values, vectors = values[order], vectors[:, order]
    signs = np.sign(vectors[np.abs(vectors).argmax(axis=0), np.arange(n_components)])
    coordinates = vectors * signs * np.sqrt(np.clip(values, 0, None))
    return coordinates, values
