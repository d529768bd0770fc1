"""Read a table by partitions: summaries up to the driver, encoded rows as a lazy array.

:func:`read_partitioned` runs pass 1 (one task per partition returns a
:class:`~distforest.io.summaries.PartSummary`), decides the encoding on the
driver (:func:`~distforest.io.summaries.decide`: every check of
:func:`~distforest.io.load_table`), and returns pass 2 as lazy
``dask.array`` objects: ``X`` (float32, one block per partition, row lengths
known from pass 1) and ``y``.  Nothing here holds more than a summary per
partition; the tasks run on the current dask scheduler (the workers of a
``distributed`` client).  Writing the arrays is the store's
(:mod:`distforest.store.inputs`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from distforest.errors import InputError
from distforest.io.partitions import PATH_COLUMN, Partitions, open_partitions
from distforest.io.row_ids import id_block, id_kind, id_summary
from distforest.io.summaries import (
    Encoding,
    NeedLevels,
    count_levels,
    decide,
    encode_partition,
    encode_target,
    summarise_block,
    summarise_partition,
    warn_empty_features,
)
from distforest.io.tables import check_column, check_target

__all__ = ["Ingested", "read_partitioned"]


@dataclass(frozen=True)
class Ingested:
    """A table read by partitions: its encoding and the lazy encoded arrays.

    Attributes
    ----------
    encoding : Encoding
    X : dask.array.Array
        float32, shape (n, d), one row block per partition.
    y : dask.array.Array or None
    source : str
    partitions : Partitions
    ids : dask.array.Array or None
        The rows' IDs (int64, or text as objects), one block per partition.
    id_name : str or None
        The ID column.
    part_names : tuple of str
        How messages name each partition: its part file, else its number.
    """

    encoding: Encoding
    X: Any
    y: Any
    source: str
    partitions: Partitions
    ids: Any = None
    id_name: str | None = None
    part_names: tuple[str, ...] = ()


def read_partitioned(
    source: Any,
    *,
    target: str | None = None,
    drop: tuple[str, ...] | list[str] = (),
    na_values: tuple[str, ...] | list[str] = (),
    allow_missing: bool = True,
    min_rows: int = 2,
    blocksize: Any = None,
    id: str | None = None,
    dtype: Any = np.float32,
) -> Ingested:
    """Pass 1 on the workers, the encoding decided here, pass 2 as lazy arrays.

    Parameters
    ----------
    source
        Anything :func:`~distforest.io.partitions.open_partitions` opens.
    target : str, optional
        The target column (its values are checked: none missing, not constant).
    drop : sequence of str
        Columns to leave out.
    na_values : sequence of str
        Extra missing-value markers.
    allow_missing : bool
    min_rows : int
    blocksize : int or str, optional
        Bytes per CSV partition.
    id : str, optional
        Column of row IDs (:mod:`distforest.io.row_ids`): not a feature; read by
        the partitions' tasks as :attr:`Ingested.ids`.
    dtype : numpy dtype, default float32
        Of the encoded features: float32 as the trees read them, or float64,
        the values :func:`~distforest.io.load_table` gives (for k-NN models).

    Returns
    -------
    Ingested

    Raises
    ------
    InputError
        Naming the part file, column and row of the table of the first problem.
    """
    na = tuple(str(v) for v in na_values)
    parts = open_partitions(source, na_values=na, blocksize=blocksize)
    names = list(parts.columns)
    id_col = None if id is None else str(id)
    for col in [*map(str, drop), *([target] if target is not None else []),
                *([id_col] if id_col is not None else [])]:  # fmt: skip
        check_column(col, names, parts.source)
    if parts.array is not None:
        if id_col is not None:
            raise InputError(f"{parts.source}: row IDs (--id {id_col}) are read from a table "
                             "by partitions, not from a numeric array; store the IDs in a "
                             "table column, or leave --id out")  # fmt: skip
        ingested = _read_array(parts, target, tuple(map(str, drop)), allow_missing, min_rows,
                               dtype)  # fmt: skip
    else:
        ingested = _read_frame(parts, target, tuple(map(str, drop)), na, allow_missing, min_rows,
                               id_col, dtype)  # fmt: skip
    warn_empty_features(ingested.encoding.empty_features, stacklevel=2)
    return ingested


def _compute(*values: Any) -> tuple[Any, ...]:
    import dask

    return dask.compute(*values)


def _read_frame(
    parts: Partitions,
    target: str | None,
    drop: tuple[str, ...],
    na: tuple[str, ...],
    allow_missing: bool,
    min_rows: int,
    id_col: str | None = None,
    dtype: Any = np.float32,
) -> Ingested:
    import dask
    import dask.array as da

    text = parts.columns if parts.text else ()
    file_col = PATH_COLUMN if parts.text else None
    blocks = parts.frame.to_delayed()
    summarise = dask.delayed(summarise_partition, pure=True)
    pass1 = [summarise(b, text, na, target, file_col) for b in blocks]
    if id_col is not None:  # the same tasks read each partition once for both
        pass1 += [dask.delayed(id_summary, pure=True)(b, id_col, parts.text, na) for b in blocks]
    results = list(_compute(*pass1))
    summaries, id_summaries = results[: len(blocks)], results[len(blocks) :]
    for s in summaries:  # a remote part file named by its URL, as the user gave it
        s.file = parts.file_url(s.file)
    labels = [s.file or parts.partition_name(k) for k, s in enumerate(summaries)]
    if id_col is not None:
        drop = (*drop, id_col)  # not a feature
    kwargs = dict(source=parts.source, names=labels, columns=parts.columns, target=target,
                  drop=drop, text_columns=text, na=na, sep=parts.sep,
                  allow_missing=allow_missing, min_rows=min_rows)  # fmt: skip
    while True:
        try:
            encoding = decide(summaries, **kwargs)  # type: ignore[arg-type]
            break
        except NeedLevels as need:  # an all-numeric partition of a categorical column
            todo = [k for k, s in enumerate(summaries) if s.columns[need.column].levels is None]
            count = dask.delayed(count_levels, pure=True)
            found = _compute(*[count(blocks[k], need.column, na) for k in todo])
            for k, levels in zip(todo, found, strict=True):
                column = summaries[k].columns[need.column]
                summaries[k].columns[need.column] = replace(
                    column, levels=levels, overflow=levels is None
                )
    d = len(encoding.features)
    encode = dask.delayed(encode_partition, pure=True)
    X = da.concatenate(
        [
            da.from_delayed(encode(b, encoding, dtype), shape=(rows, d), dtype=dtype)
            for b, rows in zip(blocks, encoding.lengths, strict=True)
        ]
    )
    y = None
    if target is not None:
        dtype = {"labels": np.int32, "int": np.int64}.get(str(encoding.target_kind), np.float64)
        code = dask.delayed(encode_target, pure=True)
        y = da.concatenate(
            [
                da.from_delayed(code(b, encoding), shape=(rows,), dtype=dtype)
                for b, rows in zip(blocks, encoding.lengths, strict=True)
            ]
        )
    ids = None
    if id_col is not None:
        kind = id_kind(id_summaries, encoding.lengths, id_col, parts.source, labels)
        id_dtype: Any = np.int64 if kind == "int" else object
        block = dask.delayed(id_block, pure=True)
        ids = da.concatenate(
            [
                da.from_delayed(block(b, id_col, kind, parts.text), shape=(rows,), dtype=id_dtype)
                for b, rows in zip(blocks, encoding.lengths, strict=True)
            ]
        )
    return Ingested(encoding, X, y, parts.source, parts, ids, id_col, tuple(labels))


def _read_array(
    parts: Partitions,
    target: str | None,
    drop: tuple[str, ...],
    allow_missing: bool,
    min_rows: int,
    dtype: Any = np.float32,
) -> Ingested:
    import dask

    arr = parts.array
    keep = [j for j, c in enumerate(parts.columns) if c not in drop]
    if target is not None:
        raise InputError(f"{parts.source}: an array has no named target column {target!r}; "
                         "store it as the group's 'y' array")  # fmt: skip
    blocks = arr.to_delayed()[:, 0]
    summarise = dask.delayed(summarise_block, pure=True)
    summaries = list(_compute(*[summarise(b, parts.columns) for b in blocks]))
    labels = [parts.partition_name(k) for k in range(len(summaries))]
    encoding = decide(summaries, source=parts.source, names=labels, columns=parts.columns,
                      target=None, drop=drop, text_columns=(), na=(), sep=None,
                      allow_missing=allow_missing, min_rows=min_rows)  # fmt: skip
    X = arr[:, keep].astype(dtype)
    y = parts.y
    if y is not None:
        # a stored target is O(n): checked whole, as load_table does
        values = check_target(np.asarray(y), encoding.n_samples, "y", parts.source)
        kind = "labels" if values.dtype.kind not in "biuf" else (
            "int" if values.dtype.kind in "biu" else "float")  # fmt: skip
        labels_t: tuple[Any, ...] = ()
        if kind == "labels":
            uniq, codes = np.unique(values.astype(str), return_inverse=True)
            labels_t, values = tuple(uniq.tolist()), codes.astype(np.int32)
        import dask.array as da

        y = da.from_array(values, chunks=(X.chunks[0],))
        encoding = replace(encoding, target="y", target_kind=kind,
                           target_labels=tuple(labels_t))  # fmt: skip
    return Ingested(encoding, X, y, parts.source, parts, part_names=tuple(labels))
