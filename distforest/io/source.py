"""Rows to learn from, wherever they are: the :class:`RowSource` protocol.

Every estimator and every answer reads its rows from a source.  A source
knows its shape, names, target, row IDs and a fingerprint, splits its rows
into chunks, and gives the tasks a handle to its rows that they open on a
worker.  Two kinds satisfy it:

- :class:`MemoryRows`, rows held by this process (a NumPy array, a DataFrame
  or a file read whole): one chunk, or a few;
- :class:`~distforest.store.inputs.StoredTable`, rows encoded into a run
  store (``input/X``): many chunks, read by the tasks, never whole by the
  driver.

Which kind an input becomes is decided in one place,
:func:`distforest.store.source.open_source`.  The algorithms are written for
chunks; rows in memory are the one-chunk case.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from distforest.io.tables import Table

__all__ = ["MemoryRows", "RowSource", "RowSummary", "row_chunks"]


def row_chunks(n: int, rows: int) -> list[slice]:
    """Slices of ``rows`` rows (the last one shorter) covering ``0..n``."""
    rows = max(1, int(rows))
    return [slice(s, min(s + rows, n)) for s in range(0, n, rows)]


@runtime_checkable
class RowSummary(Protocol):
    """What a job knows of its input before its store exists: size, origin, a fingerprint.

    Every :class:`RowSource` is one; so is a table read by partitions whose rows
    are not written yet (:class:`~distforest.store.inputs.PendingInput`): its
    :meth:`placed` writes them into the job's store.
    """

    @property
    def source(self) -> str: ...

    @property
    def n_samples(self) -> int: ...

    @property
    def n_features(self) -> int: ...

    @property
    def target_name(self) -> str | None: ...

    def fingerprint(self) -> str:
        """A hash of the rows (or of their partitions' summaries), stable across runs."""
        ...

    def quality(self) -> dict[str, Any]:
        """Rows, features, missing cells and rows with one (None: not counted), for a report."""
        ...

    def read_y(self) -> np.ndarray | None:
        """The target as given (labels or numbers), O(n); None without one."""
        ...

    def target_classes(self) -> tuple[Any, ...] | None:
        """The sorted distinct labels when the target is kept as their codes, else None.

        Then :meth:`RowSource.read_codes` gives the codes without building the labels.
        """
        ...

    def placed(self, store: str, attrs: dict[str, Any]) -> RowSource:
        """The rows where a job's fit reads them, ``store`` being the job's run store.

        Rows in memory or already in a store are returned as they are (the fit
        saves its own arrays); rows read by partitions are written into the
        store's ``input/`` group (the store created with ``attrs``) and read
        from there by the tasks.
        """
        ...


@runtime_checkable
class RowSource(RowSummary, Protocol):
    """Rows with their feature names, target and IDs, read in chunks.

    Attributes
    ----------
    source : str
        Where the rows came from, as the user gave it (for messages and provenance).
    n_samples, n_features : int
    feature_names : tuple of str
    categories : dict of str to tuple
        For categorical features: code ``k`` means ``categories[name][k]``.
    target_name : str or None
    id_name : str or None
        The ID column (None: rows are numbered).
    """

    @property
    def feature_names(self) -> tuple[str, ...]: ...

    @property
    def categories(self) -> dict[str, tuple[Any, ...]]: ...

    @property
    def id_name(self) -> str | None: ...

    @property
    def store_path(self) -> str | None:
        """The run store the rows live in (results of a fit go there), or None: in memory."""
        ...

    def chunks(self) -> list[slice]:
        """Row slices covering every row, in order: one chunk or a few in memory."""
        ...

    def read_codes(self) -> np.ndarray:
        """Codes of :meth:`target_classes` per row, in the smallest integer type."""
        ...

    def row_ids(self) -> Any:
        """The rows' IDs (an array, or a store's array read on use), or None: row numbers."""
        ...

    def read_rows(self, rows: slice, dtype: Any = np.float32) -> np.ndarray:
        """Rows ``rows`` of the features, in ``dtype`` (for the driver: a chunk at a time)."""
        ...

    def rows_handle(self, share: Any, dtype: Any = np.float32) -> Any:
        """What a task takes as its rows; ``np.asarray(handle)`` on a worker gives them all.

        Parameters
        ----------
        share : callable
            The runner's ``share`` (sends a value to the workers once); rows in
            memory go through it, rows in a store are a path read once per
            worker process.
        dtype : numpy dtype, default float32
            Of the rows the tasks see (float32: as the trees read them).
        """
        ...


@dataclass(frozen=True)
class MemoryRows:
    """A :class:`RowSource` over rows held in this process (an encoded :class:`Table`).

    Parameters
    ----------
    table : Table
        The rows, as :func:`distforest.io.load_table` encodes them.
    chunk_rows : int or None
        Rows per chunk; None: one chunk.
    """

    table: Table
    chunk_rows: int | None = None

    @property
    def source(self) -> str:
        return str(self.table.source)

    @property
    def n_samples(self) -> int:
        return self.table.n_samples

    @property
    def n_features(self) -> int:
        return self.table.n_features

    @property
    def feature_names(self) -> tuple[str, ...]:
        return tuple(self.table.feature_names)

    @property
    def categories(self) -> dict[str, tuple[Any, ...]]:
        return dict(self.table.categories)

    @property
    def target_name(self) -> str | None:
        return self.table.target_name

    @property
    def id_name(self) -> str | None:
        return self.table.id_name

    @property
    def store_path(self) -> str | None:
        return None

    def fingerprint(self) -> str:
        return self.table.fingerprint()

    def quality(self) -> dict[str, Any]:
        missing = np.isnan(self.table.X)
        return {"rows": self.n_samples, "features": self.n_features,
                "missing_cells": int(missing.sum()),
                "rows_with_missing": int(missing.any(axis=1).sum())}  # fmt: skip

    def placed(self, store: str, attrs: dict[str, Any]) -> RowSource:
        return self

    def chunks(self) -> list[slice]:
        return row_chunks(self.n_samples, self.chunk_rows or max(1, self.n_samples))

    def read_y(self) -> np.ndarray | None:
        return self.table.y

    def target_classes(self) -> tuple[Any, ...] | None:
        return None

    def read_codes(self) -> np.ndarray:
        raise TypeError("rows in memory keep their target as given: use read_y()")

    def row_ids(self) -> Any:
        return self.table.ids

    def read_rows(self, rows: slice, dtype: Any = np.float32) -> np.ndarray:
        return np.ascontiguousarray(self.table.X[rows], dtype=dtype)

    def rows_handle(self, share: Any, dtype: Any = np.float32) -> Any:
        # converted once here (float32 halves what is sent), not in every task
        return share(np.ascontiguousarray(self.table.X, dtype=dtype))
