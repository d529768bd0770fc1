"""Fetch callbacks for SimForest trees over in-memory matrices and functions.

A fetch answers ``fetch(rows, row_offsets, cols) -> values`` with
``values[t] = S(cols[t], rows[q])`` for ``t`` in group ``q``
(:mod:`distforest.kernels.simtrees`).  These adapters cover numpy matrices
and Python similarity functions; a stored (Zarr) matrix is wrapped by the
estimator the same way as :func:`fetch_rows`, one row read per group.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from distforest.kernels.simtrees import Fetch


def _expand(rows: np.ndarray, row_offsets: np.ndarray) -> np.ndarray:
    return np.repeat(rows, np.diff(row_offsets))


def fetch_rows(matrix: np.ndarray) -> Fetch:
    """``S(c, r) = matrix[r, c]``: a symmetric training matrix read by rows."""

    def fetch(rows: np.ndarray, row_offsets: np.ndarray, cols: np.ndarray) -> np.ndarray:
        return np.asarray(matrix[_expand(rows, row_offsets), cols], dtype=np.float64)

    return fetch


def fetch_columns(matrix: np.ndarray) -> Fetch:
    """``S(c, r) = matrix[c, r]``: a test x train matrix, only pair objects' columns."""

    def fetch(rows: np.ndarray, row_offsets: np.ndarray, cols: np.ndarray) -> np.ndarray:
        return np.asarray(matrix[cols, _expand(rows, row_offsets)], dtype=np.float64)

    return fetch


def fetch_function(
    similarity: Callable[[object, object], np.ndarray],
    row_objects,
    col_objects=None,
    row_ids: np.ndarray | None = None,
) -> Fetch:
    """One call ``similarity(col_objects[cols_q], row_objects[[rows[q]]])`` per group.

    ``similarity(a, b)`` returns a ``(len(a), len(b))`` array; objects are
    anything indexable by an integer array (numpy arrays, or object arrays of
    strings).  ``col_objects`` defaults to ``row_objects`` (training).  With
    ``row_ids`` (sorted training ids), ``row_objects`` holds only those
    objects, in that order: a fitted forest keeps just its pair objects.
    """
    col_objects = row_objects if col_objects is None else col_objects

    def fetch(rows: np.ndarray, row_offsets: np.ndarray, cols: np.ndarray) -> np.ndarray:
        out = np.empty(cols.shape[0])
        at = rows if row_ids is None else np.searchsorted(row_ids, rows)
        for q in range(rows.shape[0]):
            s, e = row_offsets[q], row_offsets[q + 1]
            if e > s:
                block = similarity(col_objects[cols[s:e]], row_objects[at[q : q + 1]])
                out[s:e] = np.asarray(block, dtype=np.float64).reshape(e - s)
        return out

    return fetch


def fetch_elementwise(similarity: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Fetch:
    """One call ``similarity(cols, rows_expanded)`` on index arrays, element by element."""

    def fetch(rows: np.ndarray, row_offsets: np.ndarray, cols: np.ndarray) -> np.ndarray:
        return np.asarray(similarity(cols, _expand(rows, row_offsets)), dtype=np.float64)

    return fetch


class CountingFetch:
    """Wrap a fetch and count calls and evaluations (``len(cols)`` per call)."""

    def __init__(self, fetch: Fetch) -> None:
        self.fetch = fetch
        self.calls = 0
        self.evaluations = 0

    def __call__(self, rows: np.ndarray, row_offsets: np.ndarray, cols: np.ndarray) -> np.ndarray:
        self.calls += 1
        self.evaluations += int(cols.shape[0])
        return self.fetch(rows, row_offsets, cols)
