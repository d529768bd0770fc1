"""Double centring: similarities from a full distance matrix, row block by row block.

SimForest (Sathe & Aggarwal 2017) takes distances by converting them to
similarities as classical multidimensional scaling does::

    S = -1/2 J D² J,  J = I - 1 1ᵀ / n,

that is ``S_ij = -1/2 (D²_ij - r_i - c_j + m)`` with ``r_i`` the mean of
row i of D², ``c_j`` the mean of column j and ``m`` the mean of all of D².
D is checked symmetric (:func:`~distforest.io.distances.load_distances`), so
the column means are the row means.  Two passes over blocks of rows, never
the n x n matrix in memory: the first sums each row of D² (a whole row in
one call, and the grand mean from the row sums added exactly, so the result
does not depend on the block size), the second writes the blocks of S to a
Zarr array stored by rows (the layout SimForest reads best).

New objects (a test matrix Q, rows the new objects, columns the training
objects) get Gower's out-of-sample rule with the training column means and
grand mean: ``S_xj = -1/2 (Q²_xj - mean_j Q²_xj - c_j + m)``, which is the
training formula for a training row.
"""

from __future__ import annotations

import math
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from distforest.errors import InputError
from distforest.io.distances import BLOCK_BYTES, distance_blocks, load_distances
from distforest.io.matrices import check_rows, load_matrix, row_blocks

#: Bytes of one Zarr chunk of S (whole rows: chunks of ``rows x n``).
CHUNK_BYTES = 8 * 1024**2


@dataclass(frozen=True)
class Centring:
    """What double centring of the training distances measured (needed for new objects).

    Attributes
    ----------
    column_means : ndarray of float64, shape (n,)
        ``c_j``: the mean of column j of D² (= row j, D being symmetric).
    grand_mean : float
        ``m``: the mean of all entries of D².
    """

    column_means: np.ndarray
    grand_mean: float


def centre_block(
    squared: np.ndarray, row_means: np.ndarray, centring: Centring, cols: slice = slice(None)
) -> np.ndarray:
    """``-1/2 (D² - r_i - c_j + m)`` for a block of rows of D² (columns ``cols``)."""
    out = squared - row_means[:, None]
    out -= centring.column_means[cols][None, :]
    out += centring.grand_mean
    out *= -0.5
    return out


def _row_means(block: np.ndarray, start: int, what: str) -> np.ndarray:
    """Mean of each row of the squared block (each row summed whole: block-independent)."""
    missing = np.isnan(block)
    if missing.any():
        i, j = (int(k) for k in np.argwhere(missing)[0])
        raise InputError(
            f"{what}[{start + i}, {j}] is NaN; double centring needs every distance "
            "(a full matrix): fill the missing pairs, or give SimForest the matrix with "
            "missing pairs as --similarity with --kind distance"
        )
    block = np.asarray(block, dtype=np.float64)
    return (block * block).sum(axis=1) / block.shape[1]


def _create(out: str, shape: tuple[int, int]) -> zarr.Array:
    rows = max(1, min(shape[0], CHUNK_BYTES // (8 * max(shape[1], 1))))
    attributes: dict[str, Any] = {"long_name": "similarity (double-centred distances)"}
    return zarr.create_array(store=out, shape=shape, chunks=(rows, shape[1]), dtype="float64",
                             attributes=attributes)  # fmt: skip


def _block_rows(n_cols: int) -> int:
    return max(1, BLOCK_BYTES // (8 * max(n_cols, 1)))


def double_centre(source: Any, out: str, *, what: str = "--distances") -> Centring:
    """Write ``S = -1/2 J D² J`` of the full distance matrix ``source`` to Zarr at ``out``.

    Parameters
    ----------
    source : path or array-like
        A square, symmetric matrix of distances with no missing entry
        (anything :func:`~distforest.io.matrices.load_matrix` reads).
    out : str
        Path of the Zarr array to create (float64, stored by rows).
    what : str
        How error messages name the input.

    Returns
    -------
    Centring
        The column means and grand mean of D², for new objects (:func:`centre_new_rows`).

    Raises
    ------
    InputError
        Not square, infinite or missing entries, or not symmetric.
    """
    checked = load_distances(source, what=what)
    n = checked.shape[0]
    rows = _block_rows(n)
    row_means = np.empty(n)
    for start, block in distance_blocks(checked.values, rows):
        row_means[start : start + block.shape[0]] = _row_means(block, start, what)
    centring = Centring(row_means, math.fsum(row_means.tolist()) / n)
    target = _create(out, (n, n))
    for start, block in distance_blocks(checked.values, rows):
        D = np.asarray(block, dtype=np.float64)
        stop = start + D.shape[0]
        target[start:stop] = centre_block(D * D, row_means[start:stop], centring)
    return centring


def centre_new_rows(source: Any, centring: Centring, out: str, *, what: str = "--distances") -> int:
    """Write the similarities of new objects (rows of ``source``) to the training objects.

    ``source`` holds the new objects' distances to every training object
    (columns in training order, no missing entry); Gower's rule with the
    training ``centring`` gives the similarities SimForest's training saw.
    Returns the number of new objects.
    """
    matrix = load_matrix(source, what)
    m, n = matrix.shape
    if n != centring.column_means.size:
        raise InputError(
            f"{what} is {m} x {n} but the model was trained on {centring.column_means.size} "
            "objects; give each new object's distance to every training object, in training "
            "order (one column per training object)"
        )
    rows = _block_rows(n)
    target = _create(out, (m, n))
    for start, block in row_blocks(matrix, rows):
        check_rows(block, start, what)
        row_means = _row_means(block, start, what)
        stop = start + block.shape[0]
        target[start:stop] = centre_block(block * block, row_means, centring)
    return m


@contextmanager
def centred_matrix(near: str) -> Iterator[str]:
    """A path for a centred matrix next to ``near`` (a local output), removed afterwards.

    Next to the output rather than in the system's temporary folder: workers
    of a cluster on a shared file system read it there.
    """
    parent = Path(near).absolute().parent if "://" not in near else None
    if parent is not None:
        parent.mkdir(parents=True, exist_ok=True)
    folder = tempfile.mkdtemp(prefix=".centred-", dir=parent)
    try:
        yield str(Path(folder) / "similarity.zarr")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
