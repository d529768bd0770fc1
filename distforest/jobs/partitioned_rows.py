"""Rows of ``distforest similarity`` and ``distforest neighbors`` read by partitions.

When INPUT or ``--reference`` is a glob, a folder of parts or a file over
32 MB (:func:`distforest.jobs.inputs.partitioned_input`), the driver never
holds their rows:

1. pass 1 of :func:`~distforest.io.ingest.read_partitioned` on the workers
   (every check of the in-memory reader, a bad value named with its part
   file, column and global row), the features as float64, the values
   :func:`~distforest.io.load_table` gives;
2. the scaler fitted on the reference rows from the partitions' minima and
   maxima (``range``: exact) or moments (``zscore``: to rounding), and
   ``mahalanobis``' covariance merged from the partitions' scatter matrices
   (the k-NN fit's own functions, :mod:`distforest.jobs.knn_partitioned`);
3. one task per partition scales its rows and checks them for the measure,
   all before anything is written; then the rows are written, rechunked to
   whole Zarr chunks, into a temporary store;
4. the matrix's tiles and the neighbour search read them from there, once
   per worker process (:class:`~distforest.store.inputs.StoredRows`); the
   neighbours are written into the output store as each task's rows arrive.

Without normalisation, or with ``range``, the stored matrix and the
neighbours equal the one-file command's; with ``zscore`` or ``mahalanobis``,
to the rounding of the merged moments.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from distforest.errors import InputError, ParameterError

#: Rows per chunk of the temporary stored rows.
ROWS_PER_CHUNK = 20_000


def by_partitions(input: str, reference: str | None) -> bool:
    """Whether a pairwise command reads its rows by partitions (INPUT or the reference is
    a glob, a folder of parts or a file over 32 MB): then both sides are."""
    from distforest.jobs.inputs import partitioned_input

    return partitioned_input(input) or (reference is not None and partitioned_input(reference))


def _same_features(X: Any, Y: Any) -> None:
    a, b = X.encoding.features, Y.encoding.features
    if tuple(a) != tuple(b):
        raise InputError(
            f"{Y.source} has {len(b)} feature column(s) ({', '.join(map(str, b))}) but "
            f"{X.source} has {len(a)} ({', '.join(map(str, a))}); give both the same columns "
            "(--drop the others)"
        )


@contextlib.contextmanager
def stored_rows(
    input: str,
    reference: str | None,
    *,
    metric: str,
    normalize: str | None,
    feature_range: tuple[float, float],
    drop: tuple[str, ...] = (),
    na_values: tuple[str, ...] = (),
) -> Iterator[tuple[Any, Any, Any]]:
    """The rows of INPUT (and the reference), scaled and checked, in a temporary store.

    Runs on the current dask scheduler (the command's cluster); the store is
    removed when the block ends, also on errors.

    Yields
    ------
    measure, X, Y
        The measure fitted on the reference rows; ``X`` and ``Y`` (None without
        a reference) as :class:`~distforest.store.inputs.StoredRows`.

    Raises
    ------
    InputError
        A bad value (named with its part file, column and row), or the two
        tables' feature columns differ.
    ParameterError
        ``normalize`` with a measure for 0/1 data.
    """
    import dask.array as da

    from distforest.forests.measures import parse_metric
    from distforest.jobs.inputs import temporary_store
    from distforest.jobs.knn_partitioned import (
        check_blocks,
        fitted_measure,
        fitted_scaler,
        read_training,
        scaled_rows,
    )
    from distforest.store.inputs import StoredRows, forget_inputs
    from distforest.store.run_store import RunStore

    if normalize is not None and parse_metric(metric).binary:
        raise ParameterError(f"{metric} is for 0/1 data; use --normalize none with it")
    X = read_training(input, None, drop, na_values)
    Y = None if reference is None else read_training(reference, None, drop, na_values)
    if Y is not None:
        _same_features(X, Y)
    fit_on = X if Y is None else Y
    scaler = fitted_scaler(normalize, feature_range, fit_on.X)
    measure = fitted_measure(metric, None, fit_on.X, scaler)
    tables = [t for t in (X, Y) if t is not None]
    rows = [scaled_rows(t, scaler, measure) for t in tables]
    check_blocks(*rows)  # every bad value found before anything is written
    with temporary_store() as path:
        rs = RunStore.create(path, attrs={"source": str(X.source)})
        names = ("X", "Y")[: len(rows)]
        chunks = [max(1, min(ROWS_PER_CHUNK, int(r.shape[0]))) for r in rows]
        targets: list[Any] = [rs.group.create_array(name, shape=r.shape, chunks=(c, r.shape[1]),
                                         dtype="float64")
                   for name, r, c in zip(names, rows, chunks, strict=True)]  # fmt: skip
        # rechunked to the Zarr chunks: each task writes whole chunks no other task touches
        da.store([r.rechunk((c, r.shape[1])) for r, c in zip(rows, chunks, strict=True)],
                 targets, lock=False)  # fmt: skip
        stored = [StoredRows.of(path, name, str(t.source), t.encoding.fingerprint)
                  for name, t in zip(names, tables, strict=True)]  # fmt: skip
        try:
            yield measure, stored[0], (stored[1] if Y is not None else None)
        finally:
            _forget_everywhere(forget_inputs)


def _forget_everywhere(forget: Any) -> None:
    """Drop the rows the workers kept (the store is about to be removed)."""
    from distributed import get_client

    try:
        get_client().run(forget)
    except ValueError:  # no client: the rows were read in this process
        forget()


def input_sizes(input: str, reference: str | None, drop: tuple[str, ...],
                na_values: tuple[str, ...]) -> tuple[str, int, int, int]:  # fmt: skip
    """For a dry run, without loading: ``(source, n, m, d)`` (``m`` the reference's rows,
    ``n`` without one)."""
    from distforest.jobs.inputs import input_shape

    source, n, d = input_shape(input, drop=drop, na_values=na_values)
    m = n if reference is None else input_shape(reference, drop=drop, na_values=na_values)[1]
    return source, n, m, d
