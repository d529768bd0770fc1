"""Rows as a k-NN model or a neighbour search sees them: selected, scaled and checked, by chunks.

One algorithm for every :class:`~distforest.io.source.RowSource`: rows in
memory are one chunk (computed in this process), rows in a store are its
chunks (one task each on dask's current scheduler; the driver never holds
them).

1. every chunk gives a small summary (:func:`chunk_map`): a scaler fitted on
   it, its covariance for ``mahalanobis``;
2. the summaries are merged (:func:`merge_scalers`, :func:`merge_covariances`):
   one summary is taken as it is, so the rows in memory get exactly what
   scikit-learn's ``fit`` and ``np.cov`` give; several are merged by Chan et
   al.'s rule (``range``: exact; ``zscore``, ``mahalanobis``: to rounding);
3. every chunk is scaled and checked for the measure (a bad value named with
   its part file, column and row of the whole table): returned in memory, or
   written by its task into whole chunks of a store (:func:`write_scaled`).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from distforest.errors import InputError, ParameterError
from distforest.forests.measures import Measure, check_values, make_scaler, parse_metric

__all__ = ["Scaling", "chunk_map", "fit_scaling", "scaled", "scaled_in_store", "write_scaled"]

#: How the rows in memory are named in messages (the estimator's reference rows).
IN_MEMORY = "the reference data"


def _chunks(rows: Any) -> list[slice]:
    return [slice(0, rows.shape[0])] if isinstance(rows, np.ndarray) else rows.chunks()


def _read(rows: Any, where: slice) -> np.ndarray:
    if isinstance(rows, np.ndarray):
        return np.asarray(rows[where], dtype=np.float64)
    return rows.read_rows(where, np.float64)


def _on_chunk(rows: Any, where: slice, fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    """A task: ``fn`` of one chunk of the rows."""
    return fn(_read(rows, where), where, *args)


def chunk_map(rows: Any, fn: Callable[..., Any], *args: Any) -> list[Any]:
    """``fn(X_chunk, rows_slice, *args)`` for every chunk of ``rows``, in order.

    Parameters
    ----------
    rows : ndarray or RowSource
        An array or rows in memory: one chunk, in this process; rows in a store:
        one task per chunk on dask's current scheduler, each reading its chunk.
    fn : callable
        Module-level (it travels to the workers); takes the chunk as float64.
    """
    if isinstance(rows, np.ndarray) or rows.store_path is None:
        return [_on_chunk(rows, where, fn, args) for where in _chunks(rows)]
    import dask

    task = dask.delayed(_on_chunk, pure=False)
    return list(dask.compute(*[task(rows, where, fn, args) for where in _chunks(rows)]))


@dataclass(frozen=True)
class Scaling:
    """What turns a source's rows into the rows a model sees.

    Attributes
    ----------
    support : ndarray of bool
        The kept features.
    scaler : scikit-learn scaler or None
    measure : Measure or None
        The fitted measure whose values are checked (None: any value, a forest's).
    names : tuple of str
        The kept features' names (for messages).
    parts : tuple of str
        How messages name the rows' parts (part files; one name for rows in memory).
    starts : tuple of int
        The first row of each part in the whole table.
    """

    support: np.ndarray
    scaler: Any
    measure: Measure | None
    names: tuple[str, ...]
    parts: tuple[str, ...] = (IN_MEMORY,)
    starts: tuple[int, ...] = (0,)

    def check(self, X: np.ndarray, first: int) -> None:
        """Refuse values of the scaled rows ``X`` (rows ``first..``) the measure cannot use,
        naming the part, the column and the row of the whole table."""
        if self.measure is None:
            return
        starts = np.asarray((*self.starts, np.iinfo(np.int64).max), dtype=np.int64)
        at = first
        while at < first + X.shape[0]:  # each part's rows on their own: named by their part
            k = int(np.searchsorted(starts, at, side="right")) - 1
            end = min(int(starts[k + 1]), first + X.shape[0])
            # (rows in memory: named by column number and row, as scikit-learn's messages)
            memory = self.parts[k] == IN_MEMORY
            check_values(self.measure, X[at - first : end - first], self.parts[k],
                         None if memory else self.names, at)  # fmt: skip
            at = end


def scaled(X: np.ndarray, where: slice, scaling: Scaling) -> np.ndarray:
    """One chunk's rows as the model sees them: kept features, scaled, checked (float64)."""
    X = X[:, scaling.support]
    if scaling.scaler is not None and len(X):
        X = np.ascontiguousarray(scaling.scaler.transform(X), dtype=np.float64)
    scaling.check(X, where.start)
    return np.ascontiguousarray(X, dtype=np.float64)


# -- the summaries of the chunks, merged --------------------------------------------------


def _scaler_part(X: np.ndarray, where: slice, support: np.ndarray, normalize: str,
                 feature_range: tuple[float, float]) -> Any:  # fmt: skip
    """A task: the scaler fitted on one chunk's kept features (None for no rows)."""
    X = X[:, support]
    if not len(X):
        return None
    return make_scaler(normalize, feature_range).fit(X)


def merge_scalers(parts: list[Any], normalize: str, feature_range: tuple[float, float]) -> Any:
    """One scaler from scalers fitted on chunks: the one as it is, else ``range`` from the
    chunks' minima and maxima (exact), ``zscore`` by Chan et al.'s merge of the moments."""
    parts = [p for p in parts if p is not None]
    if len(parts) == 1:
        return parts[0]
    scaler = make_scaler(normalize, feature_range)
    seen = [np.broadcast_to(np.asarray(p.n_samples_seen_, dtype=np.float64),
                            p.scale_.shape) for p in parts]  # fmt: skip
    if normalize == "range":  # fitted on the two rows of the bounds: as on every row
        with warnings.catch_warnings():  # an all-missing column: NaN, as scikit-learn's
            warnings.simplefilter("ignore", RuntimeWarning)
            bounds = np.vstack([np.nanmin([p.data_min_ for p in parts], axis=0),
                                np.nanmax([p.data_max_ for p in parts], axis=0)])  # fmt: skip
        scaler.fit(bounds)
        scaler.n_samples_seen_ = int(sum(s.max() for s in seen))
        return scaler
    count, mean, m2 = np.zeros_like(seen[0]), np.zeros_like(seen[0]), np.zeros_like(seen[0])
    for c, p in zip(seen, parts, strict=True):
        total = count + c
        with np.errstate(invalid="ignore", divide="ignore"):
            delta = np.where(total > 0, p.mean_ - mean, 0.0)
            share = np.where(total > 0, c / np.maximum(total, 1), 0.0)
        m2 = m2 + p.var_ * c + delta**2 * count * share
        mean = mean + delta * share
        count = total
    scaler.mean_, scaler.var_ = mean, m2 / np.maximum(count, 1)
    # a constant column is left as it is, by scikit-learn's rule: a variance within the
    # rounding of its sums, or a scale too small to divide by
    eps = np.finfo(np.float64).eps
    scale = np.sqrt(scaler.var_)
    constant = (scaler.var_ <= count * eps * scaler.var_ + (count * mean * eps) ** 2) | (
        scale < 10 * eps
    )
    scale[constant] = 1.0
    scaler.scale_ = scale
    scaler.n_samples_seen_ = int(count.max()) if count.size else 0
    scaler.n_features_in_ = int(mean.size)
    return scaler


def _covariance_part(X: np.ndarray, where: slice,
                     scaling: Scaling) -> tuple[int, np.ndarray, np.ndarray] | None:  # fmt: skip
    """A task: one chunk's scaled rows checked, their count, mean and covariance."""
    X = scaled(X, where, scaling)
    if not len(X):
        return None
    cov = np.atleast_2d(np.cov(X, rowvar=False)) if len(X) > 1 else np.zeros((X.shape[1],) * 2)
    return len(X), X.mean(axis=0), cov


def merge_covariances(parts: list[Any]) -> np.ndarray:
    """The covariance of all rows from the chunks' (count, mean, covariance): the one as it
    is (``np.cov`` of the rows), else Chan et al.'s merge of the scatter matrices."""
    parts = [p for p in parts if p is not None]
    n = sum(p[0] for p in parts)
    if n < 2:
        raise InputError("mahalanobis needs at least 2 reference rows for a covariance")
    if len(parts) == 1:
        return np.asarray(parts[0][2])
    d = parts[0][1].size
    count, mean, m2 = 0, np.zeros(d), np.zeros((d, d))
    for c, m, cov in parts:
        delta = m - mean
        m2 = m2 + cov * max(c - 1, 0) + np.outer(delta, delta) * count * c / (count + c)
        mean = mean + delta * c / (count + c)
        count += c
    return np.asarray(m2 / (count - 1))


def fit_scaling(
    rows: Any,
    *,
    support: np.ndarray,
    normalize: str | None,
    feature_range: tuple[float, float],
    metric: Any,
    metric_params: dict[str, Any] | None = None,
    names: tuple[str, ...],
) -> Scaling:
    """The scaler and the measure fitted on ``rows`` (an array: one chunk, or a source).

    ``metric`` None: a forest's rows (any values; no measure).  The values of the
    rows are checked for the measure (chunk by chunk) when the rows are scaled.
    """
    support = np.asarray(support, dtype=bool)
    kept = tuple(n for n, s in zip(names, support, strict=True) if s)
    parts, starts = _parts(rows)
    scaling = Scaling(support, None, None, kept, parts, starts)
    if normalize is not None:
        scaler = merge_scalers(chunk_map(rows, _scaler_part, support, normalize, feature_range),
                               normalize, feature_range)  # fmt: skip
        scaling = replace(scaling, scaler=scaler)
    if metric is None:
        return scaling
    measure = parse_metric(metric, metric_params)
    if measure.name == "mahalanobis" and measure.VI is None:
        # the rows' values are checked (for complete rows) before the covariance
        cov = merge_covariances(
            chunk_map(rows, _covariance_part, replace(scaling, measure=measure))
        )
        return replace(scaling, measure=replace(measure, VI=np.linalg.pinv(cov)))
    return replace(scaling, measure=measure.fitted(np.empty((0, len(kept)))))


def _parts(rows: Any) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """How messages name the parts of ``rows`` and where each starts (a store's input
    records its partitions; rows in memory are one part)."""
    if isinstance(rows, np.ndarray) or rows.store_path is None:
        return (IN_MEMORY,), (0,)
    from distforest.store.inputs import partition_names

    names, lengths = partition_names(rows)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    return tuple(names), tuple(int(s) for s in starts)


# -- the scaled rows into a store, by tasks -------------------------------------------------


def _write_chunk(X: np.ndarray, where: slice, scaling: Scaling, path: str,
                 outputs: tuple[tuple[str, str], ...]) -> None:  # fmt: skip
    """A task: one chunk scaled and checked, written into whole chunks of the arrays
    ``outputs`` (name, dtype) of the store at ``path``."""
    from distforest.store.run_store import task_array

    values = scaled(X, where, scaling)
    for name, dtype in outputs:
        task_array(path, name, "r+")[where] = values.astype(dtype)


def write_scaled(source: Any, scaling: Scaling, path: str | Path,
                 outputs: dict[str, Any]) -> None:  # fmt: skip
    """Scale and check every chunk of ``source`` (a store's rows) into the arrays ``outputs``
    (name to dtype, created here with the source's chunks) of the run store at ``path``:
    one task per chunk, each writing whole chunks no other task touches."""
    import zarr

    n, d = source.n_samples, int(np.count_nonzero(scaling.support))
    rows = max(1, source.chunks()[0].stop if source.n_samples else 1)
    group = zarr.open_group(str(path), mode="r+")
    for name, dtype in outputs.items():
        parent, _, leaf = name.rpartition("/")
        where = group.require_group(parent) if parent else group
        where.create_array(leaf, shape=(n, d), chunks=(rows, d), dtype=dtype,
                           dimension_names=("sample", "feature"), overwrite=True)  # fmt: skip
    names = tuple((name, np.dtype(dtype).str) for name, dtype in outputs.items())
    parts, starts = _parts(source)  # a bad value named with this source's part and row
    chunk_map(source, _write_chunk, replace(scaling, parts=parts, starts=starts), str(path),
              names)  # fmt: skip


@contextlib.contextmanager
def scaled_in_store(
    sources: list[Any],
    *,
    metric: str,
    normalize: str | None,
    feature_range: tuple[float, float],
) -> Iterator[tuple[Measure, list[Any]]]:
    """The rows of ``sources`` (the queries, then optionally the reference; sources in a
    store) scaled and checked by tasks into a temporary store, as a neighbour search or a
    matrix's tiles read them; the scaler and the measure fitted on the last source.

    Yields
    ------
    measure, rows
        The fitted measure and one :class:`~distforest.store.inputs.StoredRows` per
        source.  The store is removed when the block ends (also on errors).
    """
    from distforest.store.inputs import StoredRows
    from distforest.store.run_store import RunStore
    from distforest.store.temporary import temporary_store

    fit_on = sources[-1]
    if normalize is not None and parse_metric(metric).binary:
        raise ParameterError(f"{metric} is for 0/1 data; use --normalize none with it")
    scaling = fit_scaling(fit_on, support=np.ones(fit_on.n_features, dtype=bool),
                          normalize=normalize, feature_range=feature_range, metric=metric,
                          names=tuple(fit_on.feature_names))  # fmt: skip
    assert scaling.measure is not None
    with temporary_store() as path:
        rs = RunStore.create(path, attrs={"source": str(sources[0].source)})
        names = ("X", "Y")[: len(sources)]
        for name, source in zip(names, sources, strict=True):
            write_scaled(source, scaling, rs.path, {name: np.float64})
        try:
            yield scaling.measure, [StoredRows.of(rs.path, name, str(s.source), s.fingerprint())
                                    for name, s in zip(names, sources, strict=True)]  # fmt: skip
        finally:
            _forget_everywhere()


def _forget_everywhere() -> None:
    """Drop the rows the workers kept (their store is about to be removed)."""
    from distributed import get_client

    from distforest.store.inputs import forget_inputs

    try:
        get_client().run(forget_inputs)
    except ValueError:  # no client: the rows were read in this process
        forget_inputs()
