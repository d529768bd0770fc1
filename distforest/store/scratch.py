"""Scratch arrays of a run store: per-row arrays that tasks write and read, then removed.

Answers computed by row chunks (outlier scores, the mislabel ranking, MDS,
imputation by partitions) keep their per-row intermediates in arrays under
``scratch/`` of the run store, chunked by rows, one task a chunk; they are
dropped when the answer is written.  The same algorithms run on rows held in
memory: their per-row values are then a :class:`HeldColumn` (the one-chunk
case, or a few chunks of one array) instead of a :class:`StoredColumn`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

#: Rows per chunk of the per-row scratch arrays, and per task that reads them.
ROWS_PER_CHUNK = 1 << 20


def scratch_array(
    path: str,
    name: str,
    shape: tuple[int, ...],
    dtype: Any,
    rows_axis: int = 0,
    chunk: int | None = None,
    *,
    chunks: tuple[int, ...] | None = None,
    compressed: bool = True,
) -> None:
    """A new (replaced) scratch array of the store at ``path`` whose axis ``rows_axis`` holds
    the rows in chunks of ``chunk`` (default :data:`ROWS_PER_CHUNK`) and the other axes
    one a chunk (axis 0 before the rows) or whole (after them); or chunked as ``chunks``.
    ``compressed=False``: stored raw (blocks of doubles that are rewritten often)."""
    import zarr

    from distforest import location

    if chunks is None:
        rows = min(max(shape[rows_axis], 1), chunk or ROWS_PER_CHUNK)
        chunks = (*(1 for _ in shape[:rows_axis]), rows,
                  *(max(s, 1) for s in shape[rows_axis + 1 :]))  # fmt: skip
    root = zarr.open_group(location.zarr_store(path), mode="r+", use_consolidated=False)
    extra: dict[str, Any] = {} if compressed else {"compressors": None}
    root.create_array(name, shape=shape, chunks=chunks, dtype=dtype, overwrite=True, **extra)


def row_chunks(n: int, chunk: int | None = None) -> list[slice]:
    """Row slices of the chunks of the per-row scratch arrays (of ``chunk`` rows, default
    :data:`ROWS_PER_CHUNK`; the last shorter)."""
    size = chunk or ROWS_PER_CHUNK
    return [slice(s, min(s + size, n)) for s in range(0, n, size)]


def drop_scratch(path: str, *names: str) -> None:
    """Remove scratch arrays ``names`` (all of ``scratch/`` when none are named)."""
    import zarr

    from distforest import location

    group = zarr.open_group(location.zarr_store(path), mode="r+", use_consolidated=False)
    for name in names or ("scratch",):
        if name in group:
            del group[name]
    scratch = group.get("scratch")
    if isinstance(scratch, zarr.Group) and not list(scratch.keys()):
        del group["scratch"]


class Column(Protocol):
    """Per-row values a task reads by row chunks."""

    def read(self, rows: slice) -> np.ndarray:
        """The values of ``rows``."""


@dataclass(frozen=True)
class HeldColumn:
    """Per-row values held in memory (an answer computed on rows held in memory)."""

    values: np.ndarray

    def read(self, rows: slice) -> np.ndarray:
        return self.values[rows]


@dataclass(frozen=True)
class StoredColumn:
    """Per-row values in array ``name`` of the store at ``path``, read by tasks."""

    path: str
    name: str

    def read(self, rows: slice) -> np.ndarray:
        from distforest.store.run_store import read_rows

        return read_rows(self.path, self.name, rows)


@dataclass(frozen=True)
class ScratchSpace:
    """Where an answer's scratch arrays live: the run store at ``path`` (tasks anywhere open
    them), or (``path`` None) arrays held in this process (its tasks run here).

    One set of methods for both, so an answer computed by row chunks is one
    algorithm whether its rows are in a store or in memory.
    """

    path: str | None
    held: dict[str, np.ndarray] = field(default_factory=dict, compare=False, repr=False)

    def create(self, name: str, shape: tuple[int, ...], dtype: Any, rows_axis: int = 0,
               chunk: int | None = None, **layout: Any) -> None:  # fmt: skip
        """A new (replaced) array, as :func:`scratch_array` makes it (``layout``: its
        ``chunks`` and ``compressed``)."""
        if self.path is None:
            self.held[name] = np.zeros(shape, dtype=dtype)
        else:
            scratch_array(self.path, name, shape, dtype, rows_axis, chunk, **layout)

    def read(self, name: str, region: slice | tuple[slice | int, ...]) -> np.ndarray:
        """Region ``region`` (rows, or a slice or index of each axis) of array ``name``."""
        if self.path is None:
            return self.held[name][region]
        from distforest.store.run_store import task_array

        return np.asarray(task_array(self.path, name, "r")[region])

    def write(self, name: str, region: tuple[slice, ...], values: np.ndarray) -> None:
        """Write ``region`` of array ``name`` (whole chunks: this task's alone)."""
        if self.path is None:
            self.held[name][region] = values
        else:
            from distforest.store.run_store import write_block

            write_block(self.path, name, region, values)

    def column(self, name: str) -> Column:
        """Array ``name`` as a :class:`Column`."""
        if self.path is None:
            return HeldColumn(self.held[name])
        return StoredColumn(self.path, name)

    def drop(self, *names: str) -> None:
        """Remove arrays ``names`` and the arrays under them (groups)."""
        if self.path is not None:
            drop_scratch(self.path, *names)
            return
        for key in list(self.held):
            if any(key == name or key.startswith(name + "/") for name in names):
                del self.held[key]
