"""Ranks and a descending order of per-row values, by row chunks.

Values of n rows (a column of a scratch space, chunked by rows: in a run
store or held in memory, :class:`~distforest.store.scratch.ScratchSpace`) are
ranked and put in order without gathering them, each step one task a chunk:

- **Exact average ranks** (:class:`SortedChunks`): every chunk's values are
  copied sorted (:func:`sort_chunks`); a chunk's task then counts, for each
  of its values, the values less than and equal to it in every sorted chunk
  (binary searches), and the counts give the rank ``pandas``'
  ``rank(method="average")`` gives, the same float
  (:func:`~distforest.kernels.order_stats.average_ranks`).
- **A descending order** (:class:`DescendingOrder`): each chunk's task writes
  its rows' columns ordered by (key descending, row ascending); the driver
  cuts the key's range at values taken from every chunk at regular positions
  of its order (:func:`split_points`), so that each range holds about a
  chunk of rows and equal keys always fall in one range; a range's task
  gathers its slice of every chunk's order and sorts it.  Joined in range
  order, the ranges are the whole table in order.

In a store the driver holds a few numbers a chunk (samples, slice bounds), never a
vector of n.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from distforest.kernels import order_stats
from distforest.store.scratch import ScratchSpace, row_chunks

#: Rows per chunk of the ordered copies at most (a range's task reads a slice of each
#: chunk's order: smaller chunks read less beside the slice).
ORDER_CHUNK = 1 << 16
#: Values of each chunk's order the driver takes to cut the key's range.
SAMPLES_PER_CHUNK = 1024


@dataclass(frozen=True)
class SortedChunks:
    """Values of array ``name`` (n rows, float64) and ``sorted_name``, the same values with
    each chunk of ``chunk`` rows sorted (:func:`sort_chunks`)."""

    space: ScratchSpace
    name: str
    sorted_name: str
    n: int
    chunk: int

    def sort(self, rows: slice) -> None:
        """Write the sorted copy of chunk ``rows``."""
        values = self.space.read(self.name, rows)
        self.space.write(self.sorted_name, (rows,), np.sort(values))

    def ranks01(self, rows: slice) -> np.ndarray:
        """Average ranks of rows ``rows`` among all n values, scaled to [0, 1] as
        ``(rank - 1) / max(1, n - 1)``."""
        values = self.space.read(self.name, rows)
        order = np.argsort(values, kind="stable")
        queries = values[order]  # sorted queries: the searches walk the chunks in order
        less = np.zeros(values.size, dtype=np.int64)
        equal = np.zeros(values.size, dtype=np.int64)
        for chunk in row_chunks(self.n, self.chunk):
            below, same = order_stats.tie_counts(self.space.read(self.sorted_name, chunk),
                                                 queries)  # fmt: skip
            less += below
            equal += same
        ranks = np.empty(values.size, dtype=np.float64)
        ranks[order] = order_stats.average_ranks(less, equal)
        return (ranks - 1) / max(1, self.n - 1)


def _sort_task(columns: list[SortedChunks], rows: slice) -> None:
    for column in columns:
        column.sort(rows)


def sort_chunks(runner: Any, columns: list[SortedChunks]) -> None:
    """Make the sorted copies of ``columns`` (all of the same rows and chunks), a task a chunk."""
    first = columns[0]
    for column in columns:
        first.space.create(column.sorted_name, (first.n,), "float64", chunk=first.chunk)
    items = [(columns, rows) for rows in row_chunks(first.n, first.chunk)]
    for _ in runner.run(_sort_task, items, name="sort-chunks"):
        pass


def order_chunk(chunk: int) -> int:
    """Rows per chunk of the ordered copies: the largest divisor of ``chunk`` up to
    :data:`ORDER_CHUNK` (each task writes whole chunks)."""
    parts = -(-chunk // ORDER_CHUNK)
    while chunk % parts:
        parts += 1
    return chunk // parts


@dataclass(frozen=True)
class DescendingOrder:
    """Columns of n rows copied under ``prefix`` in the order (``key`` descending, ``row``
    ascending) within each chunk of ``chunk`` rows; ``key`` and ``row`` are columns too."""

    space: ScratchSpace
    prefix: str
    n: int
    chunk: int

    def create(self, dtypes: dict[str, Any]) -> None:
        """The scratch arrays of the columns (``key`` float64 and ``row`` int64 added)."""
        for name, dtype in {"key": "float64", "row": "int64", **dtypes}.items():
            self.space.create(f"{self.prefix}/{name}", (self.n,), dtype,
                              chunk=order_chunk(self.chunk))  # fmt: skip

    def write(self, rows: slice, key: np.ndarray, columns: dict[str, np.ndarray]) -> np.ndarray:
        """Write chunk ``rows`` in order; returns its keys at regular positions (the samples
        of :func:`split_points`)."""
        row = np.arange(rows.start, rows.stop, dtype=np.int64)
        order = np.lexsort((row, -key))
        for name, values in {"key": key, "row": row, **columns}.items():
            self.space.write(f"{self.prefix}/{name}", (rows,), np.asarray(values)[order])
        step = max(1, -(-key.size // SAMPLES_PER_CHUNK))
        return np.asarray(key[order][::step])

    def bounds(self, rows: slice, points: np.ndarray) -> np.ndarray:
        """Where each range starts and ends in chunk ``rows``'s order (relative to its start):
        range ``r`` is ``[bounds[r], bounds[r + 1])``."""
        key = self.space.read(f"{self.prefix}/key", rows)
        inside = np.searchsorted(-key, -points, side="left")  # keys above each point
        return np.concatenate([[0], inside, [key.size]]).astype(np.int64)

    def gather(self, names: list[str], bounds: np.ndarray, r: int) -> dict[str, np.ndarray]:
        """Columns ``names`` of range ``r`` (``bounds``: one row of :meth:`bounds` a chunk),
        in order."""
        got: dict[str, list[np.ndarray]] = {name: [] for name in ("key", "row", *names)}
        for rows, edges in zip(row_chunks(self.n, self.chunk), bounds, strict=True):
            part = slice(rows.start + int(edges[r]), rows.start + int(edges[r + 1]))
            for name, pieces in got.items():
                pieces.append(self.space.read(f"{self.prefix}/{name}", part))
        joined = {name: np.concatenate(pieces) for name, pieces in got.items()}
        order = np.lexsort((joined["row"], -joined["key"]))
        return {name: values[order] for name, values in joined.items()}


def split_points(samples: list[np.ndarray], ranges: int) -> np.ndarray:
    """Distinct keys, descending, cutting the keys into about ``ranges`` ranges of equal rows
    (from each chunk's samples): range 0 holds the keys above the first point, range ``r``
    those at most point ``r - 1`` and above point ``r``, the last those at most the last."""
    values = np.sort(np.concatenate(samples))[::-1]
    if ranges < 2 or values.size == 0:
        return np.empty(0, dtype=np.float64)
    picks = values[[k * values.size // ranges for k in range(1, ranges)]]
    return np.unique(picks)[::-1]


def _bounds_task(order: DescendingOrder, rows: slice, points: np.ndarray) -> np.ndarray:
    return order.bounds(rows, points)


def range_bounds(runner: Any, order: DescendingOrder, points: np.ndarray) -> np.ndarray:
    """Every chunk's range bounds (:meth:`DescendingOrder.bounds`), a chunk a row."""
    chunks = row_chunks(order.n, order.chunk)
    bounds = np.zeros((len(chunks), points.size + 2), dtype=np.int64)
    items = [(order, rows, points) for rows in chunks]
    for j, edges in runner.run(_bounds_task, items, name="order-ranges"):
        bounds[j] = edges
    return bounds
